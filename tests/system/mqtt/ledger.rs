//! The command ledger is written off the link's thread (issue 36): a ledger the disk refuses to
//! take fails the command before it acts, never the link, and the next command runs once the
//! disk takes writes again.

use super::*;

/// The state directory made immutable (`chattr +i`: even root cannot create a file in it) for
/// as long as this lives; `None` when the file system has no such flag (skipped, failing under
/// `CI=true`).
struct Immutable(std::path::PathBuf);

impl Immutable {
    fn set(dir: &std::path::Path) -> Option<Immutable> {
        let ok = std::process::Command::new("chattr")
            .arg("+i")
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var("CI").is_err(),
                "chattr +i {} failed (e2fsprogs, a file system with the immutable flag)",
                dir.display()
            );
            eprintln!("skipped: chattr +i does not work on {}", dir.display());
            return None;
        }
        Some(Immutable(dir.to_path_buf()))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn a_ledger_the_disk_refuses_fails_the_command_not_the_link() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let mut agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let state = board.root().join("var/lib/npu-agent");
    let Some(lock) = Immutable::set(&state) else {
        return;
    };
    let refused = "npu-fleet/b1/cmd/rescan/disk-full-1";
    let p = init_payload("b1", "rescan", "disk-full-1", json!({}), now_s(), 60, None);
    c.publish(refused, &p, false);
    let r = lifecycle(&c, refused, "rejected");
    let reason = r["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("cannot save the command id"), "{r}");
    // The link is alive: the board keeps publishing its status.
    c.drain();
    status_of(&c, "b1");
    assert!(agent.is_running());
    drop(lock);
    let ran = "npu-fleet/b1/cmd/rescan/disk-back-2";
    let p = init_payload("b1", "rescan", "disk-back-2", json!({}), now_s(), 60, None);
    c.publish(ran, &p, false);
    lifecycle(&c, ran, "successful");
    // Its id was on disk before it ran.
    let ledger = board.read("/var/lib/npu-agent/commands.json").unwrap();
    assert!(ledger.contains("disk-back-2"), "{ledger}");
}
