//! `/proc/buddyinfo`: free blocks per zone and buddy order (`Node 0, zone Normal 12 5 ...`).
//! Parsed here line by line.

/// Free block counts of one zone; `free_blocks[k]` counts blocks of order k (2^k pages).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BuddyZone {
    /// NUMA node number.
    pub node: u32,
    /// Zone name (`DMA`, `DMA32`, `Normal`, `Movable`).
    pub zone: String,
    /// Free blocks per order, order 0 first (11 entries on 4 KiB-page kernels).
    pub free_blocks: Vec<u64>,
}

impl BuddyZone {
    /// Free pages in the zone: Σ count[k]·2^k (saturating).
    pub fn free_pages(&self) -> u64 {
        self.free_blocks
            .iter()
            .enumerate()
            .map(|(k, &n)| n.saturating_mul(1u64 << k.min(63)))
            .fold(0u64, |a, b| a.saturating_add(b))
    }

    /// Free pages in blocks of order `order` or higher.
    pub fn free_pages_at_or_above(&self, order: usize) -> u64 {
        self.free_blocks
            .iter()
            .enumerate()
            .skip(order)
            .map(|(k, &n)| n.saturating_mul(1u64 << k.min(63)))
            .fold(0u64, |a, b| a.saturating_add(b))
    }

    /// Highest order with a free block, if any.
    pub fn largest_order(&self) -> Option<usize> {
        self.free_blocks.iter().rposition(|&n| n > 0)
    }
}

/// Parses `/proc/buddyinfo`. Each zone line must have at least one count and at most 64.
pub fn parse_buddyinfo(text: &str) -> Result<Vec<BuddyZone>, String> {
    let mut zones = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let err = || {
            format!(
                "line {}: not `Node N, zone NAME counts…`: {:?}",
                i + 1,
                super::meminfo::truncate(line)
            )
        };
        let rest = line.trim().strip_prefix("Node ").ok_or_else(err)?;
        let (node, rest) = rest.split_once(',').ok_or_else(err)?;
        let node: u32 = node.trim().parse().map_err(|_| err())?;
        let rest = rest.trim().strip_prefix("zone").ok_or_else(err)?;
        let mut parts = rest.split_whitespace();
        let zone = parts.next().ok_or_else(err)?.to_string();
        let free_blocks: Vec<u64> = parts
            .map(|p| p.parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|_| err())?;
        if free_blocks.is_empty() || free_blocks.len() > 64 {
            return Err(err());
        }
        zones.push(BuddyZone {
            node,
            zone,
            free_blocks,
        });
    }
    if zones.is_empty() {
        return Err("no zone lines".into());
    }
    Ok(zones)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "Node 0, zone      DMA      3      2      1      1      1      0      1      1      1      1      0 \nNode 0, zone   Normal   2000    500    100     20      5      1      0      0      0      0      0 \n";

    #[test]
    fn sums_pages_and_finds_largest_block() {
        let z = parse_buddyinfo(SAMPLE).unwrap();
        assert_eq!(z.len(), 2);
        assert_eq!(z[1].zone, "Normal");
        assert_eq!(z[1].free_pages(), 2000 + 1000 + 400 + 160 + 80 + 32);
        assert_eq!(z[1].largest_order(), Some(5));
        assert_eq!(z[0].largest_order(), Some(9));
        assert_eq!(z[0].free_pages_at_or_above(9), 512);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_buddyinfo("").is_err());
        assert!(parse_buddyinfo("Node 0, zone DMA x y\n").is_err());
        assert!(parse_buddyinfo("Node 0 zone DMA 1 2\n").is_err());
        assert!(parse_buddyinfo("Node 0, zone DMA\n").is_err());
    }
}
