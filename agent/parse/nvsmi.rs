//! `nvidia-smi` CSV output: `--query-gpu=index,name,memory.total,memory.used,memory.free
//! --format=csv` (with or without `noheader`/`nounits`), and `--query-compute-apps=pid,used_memory
//! --format=csv`. Memory figures are MiB as nvidia-smi prints them (`24564 MiB`).

/// One GPU's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuMemory {
    /// `index`.
    pub index: u32,
    /// `name`.
    pub name: String,
    /// `memory.total` in bytes.
    pub total_bytes: u64,
    /// `memory.used` in bytes.
    pub used_bytes: Option<u64>,
    /// `memory.free` in bytes.
    pub free_bytes: u64,
}

fn mib(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, unit) = match v.split_once(' ') {
        Some((n, u)) => (n, u.trim()),
        None => (v, "MiB"),
    };
    let n: u64 = num.parse().ok()?;
    let mul = match unit {
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KiB" => 1 << 10,
        "B" => 1,
        _ => return None,
    };
    n.checked_mul(mul)
}

fn columns(line: &str) -> Vec<String> {
    line.split(',').map(|c| c.trim().to_string()).collect()
}

/// Parses `--query-gpu` output. Without a header the columns are taken as
/// `index, name, memory.total, memory.used, memory.free`. Rows with `[N/A]` or unreadable figures
/// are an error naming the row.
pub fn parse_query_gpu(text: &str) -> Result<Vec<GpuMemory>, String> {
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .peekable();
    let default = [
        "index",
        "name",
        "memory.total",
        "memory.used",
        "memory.free",
    ];
    let mut cols: Vec<String> = default.iter().map(|s| s.to_string()).collect();
    if let Some(first) = lines.peek() {
        if first.contains("memory.") || first.starts_with("index") {
            cols = columns(first)
                .into_iter()
                .map(|c| c.split(" [").next().unwrap_or("").to_string())
                .collect();
            lines.next();
        }
    }
    let pos = |k: &str| cols.iter().position(|c| c == k);
    let (Some(ti), Some(fi)) = (pos("memory.total"), pos("memory.free")) else {
        return Err("no memory.total / memory.free columns".into());
    };
    let mut out = Vec::new();
    for (n, line) in lines.enumerate() {
        let f = columns(line);
        let get = |i: Option<usize>| i.and_then(|i| f.get(i)).map(String::as_str);
        let bad = || format!("row {}: {line:?}", n + 1);
        let total_bytes = get(Some(ti)).and_then(mib).ok_or_else(bad)?;
        let free_bytes = get(Some(fi)).and_then(mib).ok_or_else(bad)?;
        out.push(GpuMemory {
            index: get(pos("index"))
                .and_then(|s| s.parse().ok())
                .unwrap_or(n as u32),
            name: get(pos("name")).unwrap_or("").to_string(),
            total_bytes,
            used_bytes: get(pos("memory.used")).and_then(mib),
            free_bytes,
        });
        if out.len() > 64 {
            return Err("more than 64 GPU rows".into());
        }
    }
    if out.is_empty() {
        return Err("no GPU rows".into());
    }
    Ok(out)
}

/// Parses `--query-compute-apps=pid,used_memory` output: (pid, bytes) per row; rows that do not
/// parse are skipped.
pub fn parse_compute_apps(text: &str) -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("pid"))
    {
        let f = columns(line);
        if let (Some(pid), Some(mem)) = (
            f.first().and_then(|p| p.parse().ok()),
            f.get(1).and_then(|m| mib(m)),
        ) {
            out.push((pid, mem));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_gpu_with_header() {
        let t = "index, name, memory.total [MiB], memory.used [MiB], memory.free [MiB]\n0, NVIDIA GeForce RTX 4090, 24564 MiB, 412 MiB, 23720 MiB\n";
        let g = parse_query_gpu(t).unwrap();
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].name, "NVIDIA GeForce RTX 4090");
        assert_eq!(g[0].total_bytes, 24564 << 20);
        assert_eq!(g[0].used_bytes, Some(412 << 20));
        assert_eq!(g[0].free_bytes, 23720 << 20);
    }

    #[test]
    fn query_gpu_noheader_nounits_and_garbage() {
        let g = parse_query_gpu("0, A, 81920, 0, 81559\n1, B, 81920, 10, 81549\n").unwrap();
        assert_eq!(g[1].index, 1);
        assert_eq!(g[1].free_bytes, 81549 << 20);
        assert!(parse_query_gpu("0, A, [N/A], [N/A], [N/A]\n").is_err());
        assert!(parse_query_gpu("").is_err());
        assert!(parse_query_gpu("index, name\n0, A\n").is_err());
    }

    #[test]
    fn compute_apps() {
        assert_eq!(
            parse_compute_apps("pid, used_memory [MiB]\n4242, 20480 MiB\nx, y\n"),
            vec![(4242, 20480 << 20)]
        );
    }
}
