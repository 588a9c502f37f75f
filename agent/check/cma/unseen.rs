//! What the boot-file checks say when the view holds no `/boot` at all (a container given only
//! `/proc`, `/sys`, `/dev` and the logs): they never pass on boot files they could not read.

use super::*;

/// The profile's boot files, joined for a summary (`/boot/armbianEnv.txt or ...`).
fn boot_file_names(ctx: &Ctx<'_>) -> String {
    ctx.profile
        .cma
        .boot_files
        .iter()
        .map(|b| b.path.as_str())
        .collect::<Vec<_>>()
        .join(" or ")
}

/// True when the profile names boot files, none was read and the view has no `/boot` at all.
fn boot_unseen(ctx: &Ctx<'_>) -> bool {
    ctx.snap.boot_files.is_empty()
        && !ctx.profile.cma.boot_files.is_empty()
        && ctx.snap.unseen("/boot")
}

/// `f` unchanged unless it passes without the boot files it compares: then, when the booted
/// command line sets `cma=` (a boot file put it there and may since have changed), a skip
/// naming the missing files; without a booted `cma=`, the pass with a note that `/boot` is not
/// visible.
pub(super) fn unless_boot_unseen(ctx: &Ctx<'_>, f: Finding, verdict: &str) -> Finding {
    if f.status != Status::Pass || !boot_unseen(ctx) {
        return f;
    }
    let booted_cma = booted_cmdline(ctx)
        .0
        .as_deref()
        .and_then(find_cma)
        .is_some();
    let names = boot_file_names(ctx);
    if booted_cma {
        return Finding::skip(
            &f.id,
            format!(
                "cannot read {names}: the boot configuration is not visible here (no /boot: a container without the host's /boot?); {verdict} needs them"
            ),
        )
        .observed("unseen", "/boot");
    }
    if no_pool_and_no_logs(ctx) {
        return Finding::skip(
            &f.id,
            format!(
                "CmaTotal is 0 B and neither {names} nor the kernel log can be read here (no /boot, /etc, /var/lib/dpkg or /var/log: a container without the host's files?): whether a pool was asked for and could not be placed is unknown"
            ),
        )
        .observed("unseen", "/boot, /var/log");
    }
    let mut f = f;
    f.summary = format!("{} (no /boot in this view: {names} not read)", f.summary);
    f
}

/// No CMA pool (or no `CmaTotal`), no kernel log read, and no `/var/log` and none of the
/// host's configuration directories in the view (a container, not a host without /boot): the
/// reason a pool is missing (a boot file's `cma=`, a node the kernel could not place) is
/// nowhere this view can see.
fn no_pool_and_no_logs(ctx: &Ctx<'_>) -> bool {
    let total = ctx
        .snap
        .meminfo
        .as_ref()
        .ok()
        .and_then(|m| m.cma_total_bytes);
    matches!(total, None | Some(0))
        && ctx.snap.host_config_unseen()
        && ctx.snap.unseen("/var/log")
        && crate::check::sources::kernel_log_unavailable(ctx).is_some()
}

#[cfg(test)]
mod tests {
    use crate::check::testkit::{one, Board, MIB};
    use crate::model::Status;
    use crate::parse::bootfile::BootFileKind;

    fn booted_64m() -> Board {
        Board::new()
            .meminfo(8192 * MIB, 4096 * MIB, Some((64 * MIB, 60 * MIB)))
            .cmdline("root=/dev/mmcblk0p2 cma=64M")
    }

    #[test]
    fn no_boot_dir_is_not_a_pass() {
        for id in ["cma.boot_param", "reboot.pending"] {
            let f = one("rk3588-rknpu", &booted_64m().unseen("/boot").build(), id);
            assert_eq!(f.status, Status::Skip, "{id}: {}", f.summary);
            assert!(f.summary.contains("/boot/armbianEnv.txt"), "{}", f.summary);
            assert!(f.summary.contains("not visible here"), "{}", f.summary);
        }
    }

    #[test]
    fn a_board_with_boot_but_no_boot_file_still_passes() {
        // /boot is there, the board just keeps no boot file the profile names.
        let f = one("rk3588-rknpu", &booted_64m().build(), "cma.boot_param");
        assert_eq!(f.status, Status::Pass, "{}", f.summary);
        // The boot file read and pending: the real verdict, unseen or not.
        let pending = booted_64m()
            .boot_file(
                "/boot/armbianEnv.txt",
                BootFileKind::ArmbianEnv,
                "extraargs=cma=128M\n",
            )
            .build();
        assert_eq!(
            one("rk3588-rknpu", &pending, "reboot.pending").status,
            Status::Warn
        );
    }

    #[test]
    fn no_pool_no_boot_dir_and_no_logs_is_not_a_pass() {
        let snap = Board::new()
            .meminfo(4096 * MIB, 2048 * MIB, Some((0, 0)))
            .cmdline("root=/dev/mmcblk0p2")
            .unseen("/boot")
            .unseen("/etc")
            .unseen("/var/lib/dpkg")
            .unseen("/var/log")
            .build();
        let f = one("rk3588-rknpu", &snap, "cma.boot_param");
        assert_eq!(f.status, Status::Skip, "{}", f.summary);
        assert!(
            f.summary.contains("nor the kernel log can be read"),
            "{}",
            f.summary
        );
        assert!(f.summary.contains("/boot/armbianEnv.txt"), "{}", f.summary);
    }

    #[test]
    fn no_boot_dir_and_no_booted_cma_passes_with_a_note() {
        let snap = Board::new()
            .meminfo(8192 * MIB, 4096 * MIB, Some((0, 0)))
            .cmdline("root=/dev/mmcblk0p2")
            .unseen("/boot")
            .build();
        let f = one("rk3588-rknpu", &snap, "reboot.pending");
        assert_eq!(f.status, Status::Pass, "{}", f.summary);
        assert!(f.summary.contains("no /boot in this view"), "{}", f.summary);
    }
}
