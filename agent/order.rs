//! Sorting through one shared routine.
//!
//! Every `sort`/`sort_by_key` call on a new element type or with a new key closure makes the
//! compiler emit another copy of std's sort (driftsort plus its small-sort and pivot helpers,
//! about 3-4 KB of aarch64 code each). The agent sorts short lists in a dozen places (directory
//! names, thermal trip points, findings, override patterns), so these helpers sort a list of
//! indices with a comparator behind a `dyn` reference instead: one copy of the sort for all of
//! them, and a small per-type step that moves the items into the sorted order.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

/// The stable sorted order of `len` items as indices into them: `cmp(a, b)` compares the items
/// at indices `a` and `b`; items that compare equal keep their order.
#[inline(never)]
pub fn sorted_order(len: usize, cmp: &dyn Fn(usize, usize) -> Ordering) -> Vec<usize> {
    let mut order: Vec<usize> = (0..len).collect();
    order.sort_by(|&a, &b| cmp(a, b));
    order
}

/// Sorts `items` stably by `cmp` (the same result as `items.sort_by(cmp)`).
pub fn sort_by<T>(items: &mut Vec<T>, cmp: impl Fn(&T, &T) -> Ordering) {
    let order = sorted_order(items.len(), &|a, b| cmp(&items[a], &items[b]));
    let mut slots: Vec<Option<T>> = items.drain(..).map(Some).collect();
    items.extend(order.iter().filter_map(|&i| slots[i].take()));
}

/// Sorts `items` stably by the key `key` returns (the same result as
/// `items.sort_by_key(key)`).
pub fn sort_by_key<T, K: Ord>(items: &mut Vec<T>, key: impl Fn(&T) -> K) {
    sort_by(items, |a, b| key(a).cmp(&key(b)));
}

/// Sorts `items` in ascending `Ord` order (the same result as `items.sort()`).
pub fn sort<T: Ord>(items: &mut Vec<T>) {
    sort_by(items, T::cmp);
}

/// Collects `pairs` into a map by inserting them one by one; for a repeated key the last pair
/// wins, as with `collect()`. `collect()` into a `BTreeMap` sorts the pairs first, one more copy
/// of std's sort per key/value type; `insert` is there anyway.
pub fn btree_map<K: Ord, V>(pairs: impl IntoIterator<Item = (K, V)>) -> BTreeMap<K, V> {
    let mut map = BTreeMap::new();
    for (k, v) in pairs {
        map.insert(k, v);
    }
    map
}

/// Collects `items` into a set by inserting them one by one (the same set as `collect()`,
/// without the sort `collect()` runs first).
pub fn btree_set<K: Ord>(items: impl IntoIterator<Item = K>) -> BTreeSet<K> {
    let mut set = BTreeSet::new();
    for k in items {
        set.insert(k);
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_like_std_and_keeps_equal_keys_in_order() {
        let mut v: Vec<(u32, &str)> = vec![(3, "c"), (1, "a"), (3, "a"), (0, "z"), (1, "b")];
        let mut expected = v.clone();
        expected.sort_by_key(|p| p.0);
        sort_by_key(&mut v, |p| p.0);
        assert_eq!(v, expected);
        assert_eq!(v, [(0, "z"), (1, "a"), (1, "b"), (3, "c"), (3, "a")]);

        let mut s: Vec<String> = ["thermal_zone10", "b", "thermal_zone9", "a", "b"]
            .map(String::from)
            .to_vec();
        sort(&mut s);
        assert_eq!(s, ["a", "b", "b", "thermal_zone10", "thermal_zone9"]);

        let mut r = vec![1, 5, 2, 5, 0];
        sort_by(&mut r, |a, b| b.cmp(a));
        assert_eq!(r, [5, 5, 2, 1, 0]);

        let mut empty: Vec<u8> = Vec::new();
        sort(&mut empty);
        assert!(empty.is_empty());
    }

    #[test]
    fn btree_map_keeps_the_last_value_of_a_repeated_key_like_collect() {
        let pairs = [("b", 1), ("a", 2), ("b", 3)];
        let expected: BTreeMap<&str, i32> = pairs.into_iter().collect();
        assert_eq!(btree_map(pairs), expected);
        assert_eq!(btree_map(pairs).get("b"), Some(&3));
        let set = btree_set(["b", "a", "b"]);
        assert_eq!(set.into_iter().collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn large_lists_match_std() {
        // A pseudo-random list long enough for the sort's merge paths, with many equal keys.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut v: Vec<(u8, u32)> = (0..500u32)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x % 17) as u8, i)
            })
            .collect();
        let mut expected = v.clone();
        expected.sort_by_key(|p| p.0);
        sort_by_key(&mut v, |p| p.0);
        assert_eq!(v, expected);
    }
}
