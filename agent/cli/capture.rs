//! `npu-agent capture`: the support bundle.

use super::*;

/// `capture` options.
#[derive(Debug, clap::Args)]
pub struct CaptureArgs {
    /// The bundle to write (a .tar.gz; written to a temporary file, then renamed).
    #[arg(long, value_name = "FILE.tar.gz")]
    pub out: PathBuf,
    /// Capture the board tree under DIR instead of this machine.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Board profile: auto, an id, or a profile file.
    #[arg(long, value_name = "ID|FILE", default_value = "auto")]
    pub profile: String,
    /// Keep host names, user names, serials, addresses and credentials as they are.
    #[arg(long)]
    pub no_redact: bool,
    /// Replace FILE if it exists (without it, an existing FILE is refused with exit 2).
    #[arg(long)]
    pub force: bool,
    /// Print one JSON object: `file`, `archive_bytes`, `entries`, `missing` (`path`, `reason`),
    /// `profile`, `page_size_bytes`, `redacted`.
    #[arg(long)]
    pub json: bool,
}

pub(super) fn capture(a: CaptureArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if let Err(code) = require_root_dir(&a.root, err) {
        return code;
    }
    // As `keygen`: an existing file (or a link) is never replaced without being asked to.
    if let Err(code) = super::refuse_existing(&a.out, a.force, err) {
        return code;
    }
    let root = SysRoot::new(&a.root);
    match crate::capture::capture(
        &root,
        &ProfileChoice::parse(&a.profile),
        &a.out,
        !a.no_redact,
        a.force,
    ) {
        Ok(s) if a.json => {
            let m = &s.manifest;
            write_json(
                out,
                &serde_json::json!({
                    "file": a.out,
                    "archive_bytes": s.archive_bytes,
                    "entries": m.files.len() + 1,
                    "missing": m.missing,
                    "profile": m.profile,
                    "page_size_bytes": m.page_size_bytes,
                    "redacted": m.redacted,
                }),
            );
            EXIT_OK
        }
        Ok(s) => {
            let m = &s.manifest;
            let _ = writeln!(
                out,
                "wrote {} ({} bytes): {} entries, {} path(s) not captured, profile {}, page size {} bytes, {}",
                a.out.display(),
                s.archive_bytes,
                m.files.len() + 1,
                m.missing.len(),
                crate::report::clean(&m.profile),
                m.page_size_bytes,
                if m.redacted { "redacted" } else { "not redacted" }
            );
            for x in m.missing.iter().take(20) {
                // Board-controlled names: no control characters reach the terminal.
                // The reason often starts with the path itself: say it once.
                let reason = x
                    .reason
                    .strip_prefix(x.path.as_str())
                    .and_then(|r| r.strip_prefix(": "))
                    .unwrap_or(&x.reason);
                let _ = writeln!(
                    out,
                    "  not captured: {}: {}",
                    crate::report::clean(&x.path),
                    crate::report::clean(reason)
                );
            }
            EXIT_OK
        }
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            // A --profile that names no profile is the user's mistake, as for `check`.
            match e {
                crate::capture::CaptureError::Profile(_) => EXIT_USAGE,
                crate::capture::CaptureError::Write { .. } => EXIT_FINDINGS,
            }
        }
    }
}
