//! `npu-agent capture`: the support bundle.

use super::*;

pub(super) static CAPTURE: Spec = Spec {
    name: "capture",
    about: "Write a support bundle (.tar.gz): every file the checks read, the kernel log and the \
            workloads' journal as files, page size, uname and a manifest; redacted unless \
            --no-redact. `check --root` on the unpacked bundle gives the same verdicts. Never \
            overwrites FILE unless --force. Exit 0 written, 1 could not write, 2 usage error \
            (such as a --root that is not a directory, a --profile that names no profile, or \
            FILE exists).",
    opts: &[
        Opt::path(
            "out",
            "FILE.tar.gz",
            "The bundle to write (a .tar.gz; written to a temporary file, then renamed).",
        )
        .required(),
        Opt::path(
            "root",
            "DIR",
            "Capture the board tree under DIR instead of this machine.",
        )
        .default("/"),
        Opt::text(
            "profile",
            "ID|FILE",
            "Board profile: auto, an id, or a profile file.",
        )
        .default("auto"),
        Opt::flag(
            "no-redact",
            "Keep host names, user names, serials, addresses and credentials as they are.",
        ),
        Opt::flag(
            "force",
            "Replace FILE if it exists (without it, an existing FILE is refused with exit 2).",
        ),
    ],
    args: &[],
    commands: &[],
    one_of: None,
};

/// `capture` options (see [`CAPTURE`] for each one's meaning).
#[derive(Debug)]
pub struct CaptureArgs {
    /// The bundle to write (a .tar.gz; written to a temporary file, then renamed).
    pub out: PathBuf,
    /// Capture the board tree under this directory instead of this machine.
    pub root: PathBuf,
    /// Board profile: auto, an id, or a profile file.
    pub profile: String,
    /// Keep host names, user names, serials, addresses and credentials as they are.
    pub no_redact: bool,
    /// Replace `out` if it exists.
    pub force: bool,
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
