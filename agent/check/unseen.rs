//! What a check says when its verdict needs files under a host directory the view does not
//! hold at all (a container given only `/proc`, `/sys`, `/dev` and the logs): never a pass on
//! evidence it could not read.

use super::{Ctx, Finding, Status};

/// `f` unchanged unless it passes and `dir` (one of [`crate::model::HOST_CONFIG_DIRS`]) is
/// not visible in this view: then a skip keeping `f`'s summary and saying that `dir` is
/// missing and what the verdict needs it for (`why`).
pub(crate) fn unless_unseen(ctx: &Ctx<'_>, f: Finding, dir: &str, why: &str) -> Finding {
    if f.status != Status::Pass || !ctx.snap.unseen(dir) {
        return f;
    }
    let mut f = f;
    f.status = Status::Skip;
    f.summary = format!(
        "{}; but no {dir} in this view (a container without the host's {dir}?): {why}",
        f.summary
    );
    f.observed("unseen", dir)
}

#[cfg(test)]
mod tests {
    use crate::check::testkit::{one, Board};
    use crate::model::Status;

    #[test]
    fn memlock_without_etc_is_not_a_pass() {
        let board = || Board::new().process(11, "rkllm_server", Some(65536), Some(65536));
        let f = one(
            "rk3588-rknpu",
            &board().unseen("/etc").build(),
            "limits.memlock",
        );
        assert_eq!(f.status, Status::Skip, "{}", f.summary);
        assert!(f.summary.contains("no /etc in this view"), "{}", f.summary);
        assert!(
            f.summary.contains("limits.conf cannot be read"),
            "{}",
            f.summary
        );
        assert!(
            f.summary.contains("rkllm_server[11]=65536"),
            "{}",
            f.summary
        );
        // /etc there (no limit configured in it): the pass stands.
        let f = one("rk3588-rknpu", &board().build(), "limits.memlock");
        assert_eq!(f.status, Status::Pass, "{}", f.summary);
    }

    #[test]
    fn hailo_runtime_without_dpkg_dir_is_not_a_pass() {
        let board = || {
            Board::new()
                .pci(0x1e60, 0x2864, Some("hailo"))
                .module("hailo_pci", Some("4.20.0"))
                .library("/usr/lib/libhailort.so.4.20.0")
        };
        let f = one(
            "rpi5-hailo8",
            &board().unseen("/var/lib/dpkg").unseen("/etc").build(),
            "hailo.runtime_library",
        );
        assert_eq!(f.status, Status::Skip, "{}", f.summary);
        assert!(
            f.summary.contains("no /var/lib/dpkg in this view"),
            "{}",
            f.summary
        );
        assert!(
            f.summary.contains("packages cannot be listed"),
            "{}",
            f.summary
        );
        // /etc there but no dpkg: an OS without dpkg (Buildroot, Home Assistant OS) keeps its pass.
        let f = one(
            "rpi5-hailo8",
            &board().unseen("/var/lib/dpkg").build(),
            "hailo.runtime_library",
        );
        assert_eq!(f.status, Status::Pass, "{}", f.summary);
    }
}
