//! Bounded reads of files named on the command line (`--config`, `--profile FILE`).

/// Largest config or profile file read from a host path (`--config`, `--profile FILE`): 1 MiB.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads a file given on the command line, refusing more than `max_bytes` (a FIFO or
/// `/dev/zero` must not exhaust memory).
pub fn read_host_bytes(path: &std::path::Path, max_bytes: u64) -> std::io::Result<Vec<u8>> {
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
    Ok(buf)
}

/// Reads a text file given on the command line as [`read_host_bytes`] does, refusing invalid
/// UTF-8 with the line, column and value of the first bad byte ([`super::text::strict_utf8`]).
pub fn read_host_text(path: &std::path::Path, max_bytes: u64) -> std::io::Result<String> {
    super::text::strict_utf8(read_host_bytes(path, max_bytes)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))
}
