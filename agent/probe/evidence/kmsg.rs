//! The live kernel ring buffer, `/dev/kmsg`: one record per `read()` (`prio,seq,usec,flags;text`),
//! opened non-blocking, read after a sequence number so no record is counted twice.

use super::{SourceState, KMSG, MAX_LINES_PER_SOURCE};
use std::collections::VecDeque;
use std::io::Read;

/// Records read from `/dev/kmsg`.
pub struct KmsgRead {
    /// Messages as `[seconds.micros] text`.
    pub lines: Vec<String>,
    /// Highest sequence number read.
    pub last_seq: Option<u64>,
    /// Records lost: overwritten while reading (`EPIPE`) or between cycles (a gap after the
    /// cursor).
    pub lost: u64,
}

/// Parses one `/dev/kmsg` record (`prio,seq,usec,flags;text\n key=value...`) into its sequence
/// number and `[seconds.micros] text`. `None` for a malformed record.
pub fn parse_kmsg_record(rec: &str) -> Option<(u64, String)> {
    let (head, rest) = rec.split_once(';')?;
    let mut f = head.split(',');
    let _prio = f.next()?;
    let seq: u64 = f.next()?.trim().parse().ok()?;
    let usec: u64 = f.next()?.trim().parse().ok()?;
    let text = rest.split('\n').next().unwrap_or("");
    Some((
        seq,
        format!("[{:>5}.{:06}] {}", usec / 1_000_000, usec % 1_000_000, text),
    ))
}

/// Reads every record of the kernel ring buffer after sequence number `after` (all when
/// `None`), without blocking. Errors are (denied or missing, why).
pub fn read_kmsg(after: Option<u64>) -> Result<KmsgRead, (SourceState, String)> {
    read_kmsg_at(std::path::Path::new(KMSG), after)
}

/// [`read_kmsg`] on another device path (tests).
pub fn read_kmsg_at(
    path: &std::path::Path,
    after: Option<u64>,
) -> Result<KmsgRead, (SourceState, String)> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::PermissionDenied => {
                let restrict = std::fs::read_to_string("/proc/sys/kernel/dmesg_restrict")
                    .map(|s| s.trim() == "1")
                    .unwrap_or(false);
                let why = if restrict {
                    "permission denied: kernel.dmesg_restrict=1 and the agent has no CAP_SYSLOG (or the unit sets ProtectKernelLogs=yes)"
                } else {
                    "permission denied (the unit sets ProtectKernelLogs=yes, or no CAP_SYSLOG)"
                };
                (SourceState::Denied, why.to_string())
            }
            std::io::ErrorKind::NotFound => (SourceState::Missing, format!("no {}", path.display())),
            _ => (SourceState::Denied, format!("cannot open {}: {e}", path.display())),
        })?;
    let mut out = KmsgRead {
        lines: Vec::new(),
        last_seq: None,
        lost: 0,
    };
    let mut buf = vec![0u8; 16 * 1024];
    let mut lines: VecDeque<String> = VecDeque::new();
    // The ring buffer is bounded; this only stops a device that never says EAGAIN.
    for _ in 0..2_000_000 {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let rec = String::from_utf8_lossy(&buf[..n]);
                let Some((seq, line)) = parse_kmsg_record(&rec) else {
                    continue;
                };
                if after.is_some_and(|a| seq <= a) {
                    continue;
                }
                if out.last_seq.is_none() {
                    if let Some(a) = after {
                        out.lost += seq.saturating_sub(a + 1);
                    }
                }
                out.last_seq = Some(seq);
                lines.push_back(line);
                if lines.len() > MAX_LINES_PER_SOURCE {
                    lines.pop_front();
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::PIPE.raw_os_error()) => {
                out.lost += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                if out.last_seq.is_none() && lines.is_empty() {
                    return Err((
                        SourceState::Denied,
                        format!("cannot read {}: {e}", path.display()),
                    ));
                }
                break;
            }
        }
    }
    out.lines = lines.into();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kmsg_records() {
        let (seq, line) =
            parse_kmsg_record("3,1234,5123456,-;cma: cma_alloc: alloc failed, req-size: 8 pages, ret: -12\n SUBSYSTEM=x\n").unwrap();
        assert_eq!(seq, 1234);
        assert_eq!(
            line,
            "[    5.123456] cma: cma_alloc: alloc failed, req-size: 8 pages, ret: -12"
        );
        assert!(parse_kmsg_record("garbage").is_none());
        assert!(parse_kmsg_record("6,x,1,-;t").is_none());
    }

    #[test]
    fn kmsg_missing_device_is_missing() {
        let r = read_kmsg_at(std::path::Path::new("/nonexistent/kmsg"), None);
        assert!(matches!(r, Err((SourceState::Missing, _))));
    }

    #[test]
    fn kmsg_cursor_skips_records_already_read() {
        let first = match read_kmsg(None) {
            Ok(k) => k,
            Err((state, why)) => {
                // Not root, or a sandbox without the ring buffer: the state names why.
                assert!(matches!(state, SourceState::Denied | SourceState::Missing));
                eprintln!("SKIP: /dev/kmsg not readable here: {why}");
                return;
            }
        };
        let last = first.last_seq.expect("a booted kernel has records");
        assert!(!first.lines.is_empty());
        let again = read_kmsg(Some(last)).unwrap();
        // Only records written after the first read (none or a few), each newer than `last`.
        assert!(again.lines.len() < first.lines.len());
        assert!(again.last_seq.is_none_or(|s| s > last));
    }
}
