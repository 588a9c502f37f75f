//! Bounded reads of files named on the command line (`--config`, `--profile FILE`).

/// Largest config or profile file read from a host path (`--config`, `--profile FILE`): 1 MiB.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads a text file given on the command line, refusing more than `max_bytes` (a FIFO or
/// `/dev/zero` must not exhaust memory) and invalid UTF-8.
pub fn read_host_text(path: &std::path::Path, max_bytes: u64) -> std::io::Result<String> {
    use std::io::Read;
    let mut buf = Vec::new();
    std::fs::File::open(path)?
        .take(max_bytes + 1)
        .read_to_end(&mut buf)?;
    if buf.len() as u64 > max_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {max_bytes} bytes"),
        ));
    }
    String::from_utf8(buf)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}
