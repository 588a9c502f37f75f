//! NUMA files: node lists (`0-1,3` in `/sys/devices/system/node/has_memory`) and
//! `/proc/<pid>/numa_maps` (one line per mapping: address, memory policy, then `key=value`
//! tokens; `N<node>=<pages>` counts the mapping's pages on each node in units of
//! `kernelpagesize_kB`).

use std::collections::BTreeMap;

/// Parses a kernel node list (`0-1,3`); `None` on anything else. At most 4096 nodes.
pub fn parse_node_list(text: &str) -> Option<Vec<u32>> {
    let t = text.trim();
    let mut out = Vec::new();
    if t.is_empty() {
        return Some(out);
    }
    for part in t.split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let n = part.trim().parse::<u32>().ok()?;
                (n, n)
            }
        };
        if b < a || b - a > 4096 || out.len() > 4096 {
            return None;
        }
        out.extend(a..=b);
    }
    Some(out)
}

/// What a process's `numa_maps` says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NumaMaps {
    /// Resident bytes per memory policy (`default`, `interleave:0-1`, `bind:0`, ...).
    pub bytes_by_policy: BTreeMap<String, u64>,
    /// Mappings counted.
    pub mappings: usize,
    /// Policies of the mappings of the model files (`file=` among the paths asked for).
    pub model_policies: Vec<String>,
    /// Resident bytes of the model files per node.
    pub model_bytes_by_node: BTreeMap<u32, u64>,
}

impl NumaMaps {
    /// The policy holding the most resident bytes.
    pub fn dominant_policy(&self) -> Option<&str> {
        self.bytes_by_policy
            .iter()
            .max_by_key(|(_, b)| **b)
            .map(|(p, _)| p.as_str())
    }

    /// True when the model's mappings (or, without any, most memory) use an interleave policy.
    pub fn interleaved(&self) -> bool {
        let is = |p: &str| p.starts_with("interleave") || p.starts_with("weighted interleave");
        if !self.model_policies.is_empty() {
            return self.model_policies.iter().all(|p| is(p));
        }
        self.dominant_policy().is_some_and(is)
    }
}

/// Parses `numa_maps` text; `model_files` are the board paths of the model (a mapping whose
/// `file=` is one of them, or ends in `.gguf`, counts as the model).
pub fn parse_numa_maps(text: &str, model_files: &[String]) -> NumaMaps {
    let mut out = NumaMaps::default();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(_addr), Some(mut policy)) = (it.next(), it.next()) else {
            continue;
        };
        let rest: Vec<&str> = it.collect();
        let mut rest = rest.as_slice();
        let joined;
        // The kernel prints "weighted interleave" with a space.
        if policy == "weighted" {
            if let Some((first, tail)) = rest.split_first() {
                joined = format!("weighted {first}");
                policy = &joined;
                rest = tail;
            }
        }
        let mut page_kb = 4u64;
        let mut file = None;
        let mut nodes: Vec<(u32, u64)> = Vec::new();
        for tok in rest {
            if let Some(v) = tok.strip_prefix("kernelpagesize_kB=") {
                page_kb = v.parse().unwrap_or(4);
            } else if let Some(v) = tok.strip_prefix("file=") {
                file = Some(v);
            } else if let Some((k, v)) = tok.split_once('=') {
                if let (Some(n), Ok(pages)) = (
                    k.strip_prefix('N').and_then(|n| n.parse::<u32>().ok()),
                    v.parse::<u64>(),
                ) {
                    nodes.push((n, pages));
                }
            }
        }
        let bytes = |pages: u64| pages.saturating_mul(page_kb).saturating_mul(1024);
        let total: u64 = nodes
            .iter()
            .map(|(_, p)| bytes(*p))
            .fold(0u64, u64::saturating_add);
        out.mappings += 1;
        let e = out.bytes_by_policy.entry(policy.to_string()).or_insert(0);
        *e = e.saturating_add(total);
        if let Some(f) = file {
            if model_files.iter().any(|m| m == f) || f.ends_with(".gguf") {
                if !out.model_policies.iter().any(|p| p == policy) {
                    out.model_policies.push(policy.to_string());
                }
                for (n, p) in &nodes {
                    let e = out.model_bytes_by_node.entry(*n).or_insert(0);
                    *e = e.saturating_add(bytes(*p));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lists() {
        assert_eq!(parse_node_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_node_list("0,2-3"), Some(vec![0, 2, 3]));
        assert_eq!(parse_node_list(""), Some(vec![]));
        assert_eq!(parse_node_list("3-1"), None);
        assert_eq!(parse_node_list("x"), None);
        assert_eq!(parse_node_list("0-4294967295"), None);
    }

    #[test]
    fn numa_maps_lines() {
        let t = "\
55d0c0000000 interleave:0-1 file=/opt/llama-server mapped=100 N0=50 N1=50 kernelpagesize_kB=4
7f0000000000 interleave:0-1 file=/models/r1.gguf mapped=2048 N0=1024 N1=1024 kernelpagesize_kB=4
7f8000000000 weighted interleave:0-1 anon=10 dirty=10 N0=10 kernelpagesize_kB=4
7f9000000000 default anon=512 N0=512 kernelpagesize_kB=2048
";
        let m = parse_numa_maps(t, &["/models/r1.gguf".to_string()]);
        assert_eq!(m.mappings, 4);
        assert_eq!(m.model_policies, vec!["interleave:0-1".to_string()]);
        assert_eq!(m.model_bytes_by_node.get(&0), Some(&(1024 * 4096)));
        assert_eq!(
            m.bytes_by_policy.get("weighted interleave:0-1"),
            Some(&(10 * 4096))
        );
        assert_eq!(m.bytes_by_policy.get("default"), Some(&(512 * 2048 * 1024)));
        assert!(m.interleaved());
        let d = parse_numa_maps("7f00 default file=/m/x.gguf N0=10 N1=1\n", &[]);
        assert!(!d.interleaved());
        assert_eq!(d.dominant_policy(), Some("default"));
    }
}
