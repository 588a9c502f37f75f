//! CMA checks: pool size, free space, the boot-time `cma=` and whether a reboot is pending.

use super::{mib, Ctx, Finding, LogHit, Status};
use crate::model::LogClass;
use crate::parse::bootfile::{find_boot_cma, BootCma, BootFileKind};
use crate::parse::cmdline::{find_cma, CmaParam};
use crate::parse::logline::LogEvent;
use crate::profile::CmdlineCma;

mod boot_param;
mod free;
mod pool;
mod reboot;
mod unseen;

use boot_param::*;
use free::*;
use pool::*;
use reboot::*;
use unseen::*;

pub(super) fn all(ctx: &Ctx<'_>) -> Vec<Finding> {
    vec![
        pool_size(ctx),
        free(ctx),
        boot_param(ctx),
        reboot_pending(ctx),
    ]
}

/// CMA figures from every source the board offers: `/proc/meminfo` first, then the kernel log
/// (the boot `Memory:` line, `cma: Reserved`/`created CMA memory pool`, and the `number of
/// available pages` line printed after a failure).
struct CmaFigures {
    /// `CmaTotal` in bytes and where it came from.
    total: Option<(u64, String)>,
    /// `CmaFree` in bytes and where it came from.
    free: Option<(u64, String)>,
    /// `MemFree` in bytes (meminfo only).
    mem_free: Option<u64>,
    /// Why meminfo gave no CMA figures, when it did not.
    meminfo_gap: Option<String>,
    /// A needed meminfo field is present but malformed (the check ends in `error`).
    malformed: Option<String>,
}

fn figures(ctx: &Ctx<'_>) -> CmaFigures {
    let mut f = CmaFigures {
        total: None,
        free: None,
        mem_free: None,
        meminfo_gap: None,
        malformed: None,
    };
    match &ctx.snap.meminfo {
        Ok(m) => {
            f.malformed = m
                .field_error("CmaTotal")
                .or_else(|| m.field_error("CmaFree"));
            f.total = m.cma_total_bytes.map(|t| (t, "/proc/meminfo".to_string()));
            f.free = m.cma_free_bytes.map(|t| (t, "/proc/meminfo".to_string()));
            f.mem_free = m.mem_free_bytes;
            if f.total.is_none() {
                f.meminfo_gap = Some(if m.is_complete() {
                    "/proc/meminfo has no CmaTotal line (no CONFIG_CMA)".into()
                } else {
                    "/proc/meminfo in this tree has no CmaTotal line".into()
                });
            }
        }
        Err(e) if e.is_not_found() => f.meminfo_gap = Some("no /proc/meminfo in this tree".into()),
        Err(e) => {
            f.meminfo_gap = Some(format!("cannot read /proc/meminfo: {e}"));
            if e.kind == crate::root::ReadErrorKind::Malformed {
                f.malformed = Some(e.to_string());
            }
        }
    }
    let kernel = |pred: fn(&LogEvent) -> bool| {
        ctx.logs
            .find(Some(LogClass::Kernel), pred)
            .last()
            .map(|(h, e)| (h.file.clone(), e.clone()))
    };
    if f.total.is_none() {
        if let Some((
            file,
            LogEvent::CmaAvailablePages {
                free_pages,
                total_pages,
            },
        )) = kernel(|e| matches!(e, LogEvent::CmaAvailablePages { .. }))
        {
            f.total = Some((
                total_pages.saturating_mul(ctx.snap.page_size.bytes),
                file.clone(),
            ));
            f.free = Some((free_pages.saturating_mul(ctx.snap.page_size.bytes), file));
        } else if let Some((file, LogEvent::BootCmaReserved { bytes })) =
            kernel(|e| matches!(e, LogEvent::BootCmaReserved { .. }))
        {
            f.total = Some((bytes, file));
        } else if let Some((file, LogEvent::CmaReserved { bytes, .. })) =
            kernel(|e| matches!(e, LogEvent::CmaReserved { .. }))
        {
            f.total = Some((bytes, file));
        }
    }
    f
}

/// Devices the kernel log shows holding or failing to get contiguous memory, named as the
/// kernel names them (`nvme nvme0 (host memory buffer 40 MiB)`, `vc4 (allocation failed)`).
fn consumers<'a>(ctx: &'a Ctx<'_>) -> (Vec<String>, Vec<&'a LogHit>) {
    let mut names: Vec<String> = Vec::new();
    let mut hits = Vec::new();
    for (h, e) in ctx.logs.find(Some(LogClass::Kernel), |e| {
        matches!(e, LogEvent::CmaConsumer { .. })
    }) {
        if let LogEvent::CmaConsumer {
            device,
            bytes,
            failed,
        } = e
        {
            let what = match (bytes, failed) {
                (Some(b), _) if h.text.contains("host memory buffer") => {
                    format!("{device} (NVMe host memory buffer {})", mib(*b))
                }
                (Some(b), _) => format!("{device} ({})", mib(*b)),
                (None, true) => format!("{device} (contiguous allocation failed)"),
                (None, false) => device.clone(),
            };
            if !names.contains(&what) {
                names.push(what);
                hits.push(h);
            }
        }
    }
    (names, hits)
}

/// The `cma=` of the kernel-argument boot files and the Pi `config.txt` overlay.
struct BootView {
    /// (path, kind, parsed) of the first kernel-argument file holding `cma=` (or the first one
    /// present when none holds it).
    cmdline_file: Option<(String, BootFileKind, BootCma)>,
    /// (path, parsed) of the Pi config.txt overlay pool.
    overlay: Option<(String, CmaParam, usize)>,
}

fn boot_view(ctx: &Ctx<'_>) -> BootView {
    let mut cmdline_file: Option<(String, BootFileKind, BootCma)> = None;
    let mut overlay = None;
    for b in &ctx.snap.boot_files {
        let Ok(text) = &b.text else { continue };
        let parsed = find_boot_cma(b.kind, text);
        if b.kind == BootFileKind::PiConfig {
            if overlay.is_none() {
                if let (Some(c), Some(line)) = (parsed.cma, parsed.line) {
                    overlay = Some((b.path.clone(), c, line));
                }
            }
            continue;
        }
        let replace = match &cmdline_file {
            None => true,
            Some((_, _, cur)) => cur.cma.is_none() && parsed.cma.is_some(),
        };
        if replace {
            cmdline_file = Some((b.path.clone(), b.kind, parsed));
        }
    }
    BootView {
        cmdline_file,
        overlay,
    }
}

fn show_cma(c: &Option<CmaParam>) -> String {
    c.as_ref()
        .map(|c| format!("cma={}", c.raw))
        .unwrap_or_else(|| "no cma=".into())
}

/// The command line the kernel booted with: `/proc/cmdline`, else the `Kernel command line:`
/// line of the kernel log. Returns the line and where it came from.
fn booted_cmdline(ctx: &Ctx<'_>) -> (Option<String>, String) {
    if let Ok(l) = &ctx.snap.cmdline {
        return (Some(l.clone()), "/proc/cmdline".into());
    }
    for log in ctx.snap.logs.iter().filter(|l| l.class == LogClass::Kernel) {
        if let Some(rest) = log
            .lines
            .iter()
            .rev()
            .find_map(|l| l.split_once("Kernel command line: ").map(|(_, r)| r))
        {
            return (Some(rest.trim().to_string()), log.path.clone());
        }
    }
    (None, "/proc/cmdline".into())
}

#[cfg(test)]
mod tests {
    use crate::check::testkit::{one, Board, MIB};
    use crate::model::Status;

    const GIB: u64 = 1024 * MIB;

    fn board(cma_total: u64, cma_free: u64) -> Board {
        Board::new().meminfo(8 * GIB, 4 * GIB, Some((cma_total, cma_free)))
    }

    /// A pool that is full of real users is never told to become the size it already is.
    #[test]
    fn enlarging_a_held_pool_asks_for_more_than_it_has() {
        for (total, ram, want) in [
            (256 * MIB, 8 * GIB, "cma=512M"),
            (64 * MIB, 8 * GIB, "cma=256M"),
        ] {
            let b = Board::new().meminfo(ram, 4 * GIB, Some((total, 2 * MIB)));
            let f = one("rk3588-rknpu", &b.build(), "cma.free");
            assert_eq!(f.status, Status::Fail, "{}", f.summary);
            assert!(f.remedy.contains(want), "{total}: {}", f.remedy);
        }
        // Twice the pool would pass a quarter of RAM (cma set's bound): the profile's size.
        assert_eq!(
            super::free::enlarged("256M", Some(512 * MIB), Some(2 * GIB)),
            "256M"
        );
        assert_eq!(super::free::enlarged("256M", Some(256 * MIB), None), "512M");
        assert_eq!(super::free::enlarged("256M", None, Some(GIB)), "256M");
    }

    #[test]
    fn pool_and_free_verdicts() {
        let table = [
            (
                "rpi5-hailo8",
                board(256 * MIB, 200 * MIB),
                "cma.pool_size",
                Status::Pass,
                "CmaTotal 256 MiB",
            ),
            (
                "rpi5-hailo8",
                board(16 * MIB, MIB),
                "cma.pool_size",
                Status::Fail,
                "below the 64 MiB the profile needs",
            ),
            (
                "rk3588-rknpu",
                board(0, 0),
                "cma.pool_size",
                Status::Pass,
                "fine for the NPU, which allocates through its IOMMU",
            ),
            (
                "rpi5-hailo8",
                Board::new(),
                "cma.pool_size",
                Status::Skip,
                "CmaTotal unknown",
            ),
            (
                "rpi5-hailo8",
                board(256 * MIB, 200 * MIB),
                "cma.free",
                Status::Pass,
                "CmaFree 200 MiB of 256 MiB (78%)",
            ),
            (
                "rpi5-hailo8",
                board(16 * MIB, MIB),
                "cma.free",
                Status::Fail,
                "CMA is held by real CMA users",
            ),
            (
                "rk3588-rknpu",
                board(0, 0),
                "cma.free",
                Status::Skip,
                "no CMA pool",
            ),
        ];
        let lent = Board::new().meminfo(8 * GIB, 300 * MIB, Some((256 * MIB, 10 * MIB)));
        let f = one("rpi5-hailo8", &lent.build(), "cma.free");
        assert_eq!(f.status, Status::Info, "{}", f.summary);
        assert!(
            f.summary.contains("free CMA may be lent to movable pages"),
            "{}",
            f.summary
        );
        assert!(f.remedy.contains("compact --drop-caches"), "{}", f.remedy);
        for (profile, b, id, status, summary) in table {
            let f = one(profile, &b.build(), id);
            assert_eq!(f.status, status, "{id}: {}", f.summary);
            assert!(f.summary.contains(summary), "{id}: {}", f.summary);
        }
        let with_file = board(16 * MIB, MIB).boot_file(
            "/boot/firmware/config.txt",
            crate::parse::bootfile::BootFileKind::PiConfig,
            "[all]\n",
        );
        let f = one("rpi5-hailo8", &with_file.build(), "cma.pool_size");
        assert!(f.remedy.contains("npu-agent cma set 256M"), "{}", f.remedy);
        // Without a boot file the agent could edit, `cma set` is never offered.
        let f = one(
            "rpi5-hailo8",
            &board(16 * MIB, MIB).build(),
            "cma.pool_size",
        );
        assert!(!f.remedy.contains("sudo npu-agent cma set"), "{}", f.remedy);
        assert!(
            f.remedy.contains("setting cma=256M by hand"),
            "{}",
            f.remedy
        );
    }

    #[test]
    fn boot_param_and_reboot_verdicts() {
        let plain = board(256 * MIB, 200 * MIB).cmdline("console=tty1 root=/dev/mmcblk0p2");
        let f = one("rpi5-hailo8", &plain.build(), "cma.boot_param");
        assert_eq!(f.status, Status::Pass, "{}", f.summary);
        assert!(f.summary.contains("no cma= set"), "{}", f.summary);
        let unplaced = board(0, 0).cmdline("console=ttyS2 cma=256M");
        let f = one("rk3588-rknpu", &unplaced.build(), "cma.boot_param");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(
            f.summary.contains("the kernel could not reserve it"),
            "{}",
            f.summary
        );
        assert!(f.remedy.contains("keep a single cma="), "{}", f.remedy);
        let f = one("rpi5-hailo8", &Board::new().build(), "cma.boot_param");
        assert_eq!(f.status, Status::Skip);
        let f = one("rpi5-hailo8", &plain_board().build(), "reboot.pending");
        assert_eq!(f.status, Status::Pass, "{}", f.summary);
        assert!(
            f.summary.contains("no boot-time cma= change"),
            "{}",
            f.summary
        );
        let f = one("rpi5-hailo8", &Board::new().build(), "reboot.pending");
        assert_eq!(f.status, Status::Skip);
        assert!(
            f.summary.contains("no boot file and no /proc/cmdline"),
            "{}",
            f.summary
        );
    }

    #[test]
    fn reboot_pending_when_boot_file_and_kernel_differ() {
        use crate::parse::bootfile::BootFileKind;
        let path = "/boot/firmware/cmdline.txt";
        let pending =
            plain_board().boot_file(path, BootFileKind::PiCmdline, "console=tty1 cma=256M");
        let f = one("rpi5-hailo8", &pending.build(), "reboot.pending");
        assert_eq!(f.status, Status::Warn, "{}", f.summary);
        assert_eq!(
            f.summary,
            format!("{path} sets cma=256M but the kernel booted with no cma=: a reboot is pending")
        );
        assert!(f.remedy.starts_with("sudo reboot"), "{}", f.remedy);
        let applied = board(256 * MIB, 200 * MIB)
            .cmdline("console=tty1 cma=256M")
            .boot_file(path, BootFileKind::PiCmdline, "console=tty1 cma=256M");
        let f = one("rpi5-hailo8", &applied.build(), "reboot.pending");
        assert_eq!(f.status, Status::Pass, "{}", f.summary);
        assert!(
            f.summary.contains("and /proc/cmdline agree (cma=256M)"),
            "{}",
            f.summary
        );
    }

    fn plain_board() -> Board {
        board(256 * MIB, 200 * MIB).cmdline("console=tty1")
    }
}
