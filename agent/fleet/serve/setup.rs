//! `fleet serve`'s setup, in the order that leaves nothing behind on a failure: the listen
//! address is bound first (a port in use changes nothing on disk), then the state directory is
//! made and locked ([`lock_state_dir`]: one service per directory), then the history opened.

use std::io::{Seek, Write};
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::Path;

/// The lock file in the state directory: held (an exclusive `flock`) for the service's life;
/// it holds the holder's pid.
pub const LOCK_FILE: &str = "serve.lock";

/// Binds `addr` (non-blocking, for tokio), warning when it is not a loopback address (the
/// service has no authentication of its own).
///
/// Errors: the address cannot be bound (in use, not this host's, no permission).
pub fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    let l = TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    l.set_nonblocking(true)
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    if !addr.ip().is_loopback() {
        tracing::warn!(
            "listening on {addr}, not a loopback address: the page, API and /metrics have no \
             authentication; put a reverse proxy with TLS and authentication in front \
             (docs/operator-guide.md \"Fleet service\")"
        );
    }
    Ok(l)
}

/// `--listen`'s value: `IP:PORT`, or `HOST:PORT` with the host resolved (its first address).
///
/// Errors: neither, or a host that does not resolve.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let hint = "give IP:PORT, e.g. 127.0.0.1:9465";
    match s.to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| format!("{s}: resolves to no address ({hint})")),
        Err(e) => Err(format!("{s}: {e} ({hint})")),
    }
}

/// Takes the state directory `dir` for this process: an exclusive `flock` on `dir/serve.lock`
/// (made owner-only if missing), held while the returned file is open; this process's pid is
/// written in it.
///
/// Errors: another process holds it ("another fleet serve uses DIR (pid N)"), or the file
/// cannot be opened.
pub fn lock_state_dir(dir: &Path) -> Result<std::fs::File, String> {
    use rustix::fs::{flock, FlockOperation};
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(LOCK_FILE);
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if let Err(e) = flock(&f, FlockOperation::NonBlockingLockExclusive) {
        if e != rustix::io::Errno::WOULDBLOCK {
            return Err(format!("{}: {e}", path.display()));
        }
        let pid = std::fs::read_to_string(&path).unwrap_or_default();
        let pid = match pid.trim().parse::<u32>() {
            Ok(p) => format!(" (pid {p})"),
            Err(_) => String::new(),
        };
        return Err(format!("another fleet serve uses {}{pid}", dir.display()));
    }
    let wrote = f
        .set_len(0)
        .and_then(|()| f.rewind())
        .and_then(|()| writeln!(f, "{}", std::process::id()));
    if let Err(e) = wrote {
        tracing::warn!("{}: {e}", path.display());
    }
    Ok(f)
}
