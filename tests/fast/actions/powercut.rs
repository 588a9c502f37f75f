//! Fault injection: the atomic writer is stopped after each step (a power cut: nothing runs
//! after it, not even cleanup) and the file is checked; a full disk (ENOSPC) and a read-only
//! filesystem (EROFS) are failed writes the agent reports and cleans up after.

use super::util::rk3588_tree;
use npu_agent::action::atomic::{write_atomic, RealStorage, Step, Storage, StorageFile};
use npu_agent::action::cma::{cma_set, CmaSetOutcome};
use npu_agent::action::reboot::{
    request_reboot, CommandRunner, RebootProgress, RebootRefusal, RunOutcome,
};
use npu_agent::action::state::{BootEditState, StateDir, BOOT_EDIT_FILE};
use npu_agent::action::ActionConfig;
use npu_agent::diagnose::{diagnose, ProfileChoice};
use std::cell::Cell;
use std::io;
use std::path::Path;
use std::rc::Rc;

/// The order of the steps with a backup; the fault injector counts operations in this order.
const STEPS: [Step; 10] = [
    Step::BackupCreate,
    Step::BackupWrite,
    Step::BackupSync,
    Step::BackupRename,
    Step::BackupDirSync,
    Step::TempCreate,
    Step::TempWrite,
    Step::TempSync,
    Step::Rename,
    Step::DirSync,
];

/// Shared counter: which operation fails, and whether the machine is dead after it.
#[derive(Clone)]
struct Fault {
    next_op: Rc<Cell<usize>>,
    fail_at: usize,
    errno: i32,
    power_cut: bool,
    dead: Rc<Cell<bool>>,
}

impl Fault {
    fn new(fail_at: usize, errno: i32, power_cut: bool) -> Self {
        Fault {
            next_op: Rc::new(Cell::new(0)),
            fail_at,
            errno,
            power_cut,
            dead: Rc::new(Cell::new(false)),
        }
    }

    /// Counts one operation; errors when it is the one to fail or the machine is dead.
    fn tick(&self) -> io::Result<()> {
        if self.dead.get() {
            return Err(io::Error::from_raw_os_error(5));
        }
        let n = self.next_op.get();
        self.next_op.set(n + 1);
        if n == self.fail_at {
            if self.power_cut {
                self.dead.set(true);
            }
            return Err(io::Error::from_raw_os_error(self.errno));
        }
        Ok(())
    }

    fn failing_now(&self) -> bool {
        !self.dead.get() && self.next_op.get() == self.fail_at
    }
}

struct FaultStorage {
    fault: Fault,
}

struct FaultFile {
    inner: Box<dyn StorageFile>,
    fault: Fault,
}

impl StorageFile for FaultFile {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.fault.failing_now() {
            // A write that fails half way, as a full disk or a cut does.
            self.inner.write_all(&bytes[..bytes.len() / 2])?;
        }
        self.fault.tick()?;
        self.inner.write_all(bytes)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.fault.tick()?;
        self.inner.sync()
    }
}

impl Storage for FaultStorage {
    fn create(&mut self, path: &Path, mode: u32) -> io::Result<Box<dyn StorageFile>> {
        self.fault.tick()?;
        let inner = RealStorage.create(path, mode)?;
        Ok(Box::new(FaultFile {
            inner,
            fault: self.fault.clone(),
        }))
    }
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        self.fault.tick()?;
        RealStorage.rename(from, to)
    }
    fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        self.fault.tick()?;
        RealStorage.sync_dir(dir)
    }
    fn remove_file(&mut self, path: &Path) -> io::Result<()> {
        // Cleanup is not a counted step, but a dead machine does not clean up.
        if self.fault.dead.get() {
            return Err(io::Error::from_raw_os_error(5));
        }
        RealStorage.remove_file(path)
    }
}

const OLD: &str = "verbosity=1\nextraargs=cma=256M\nconsole=both\n";
const NEW: &str = "verbosity=1\nextraargs=cma=512M\nconsole=both\n";

fn temp_names(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| npu_agent::action::atomic::is_temp_name(n))
        .collect()
}

#[test]
fn power_cut_after_each_step_leaves_old_or_new_and_the_backup() {
    for (fail_at, step) in STEPS.iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("armbianEnv.txt");
        let bak = dir.path().join("armbianEnv.txt.npu-agent.bak");
        std::fs::write(&target, OLD).unwrap();
        let mut storage = FaultStorage {
            fault: Fault::new(fail_at, 5, true),
        };
        let err = write_atomic(
            &mut storage,
            &target,
            NEW.as_bytes(),
            Some(OLD.as_bytes()),
            0o644,
        )
        .unwrap_err();
        assert_eq!(err.step, *step, "cut at op {fail_at}");
        // The file is whole: old until the rename, new after it.
        let now = std::fs::read_to_string(&target).unwrap();
        let want = if *step == Step::DirSync { NEW } else { OLD };
        assert_eq!(now, want, "cut at {step:?}");
        // The backup is either absent (cut before its rename) or complete.
        match std::fs::read_to_string(&bak) {
            Ok(b) => {
                assert_eq!(b, OLD, "cut at {step:?}: partial backup");
                assert!(fail_at > 3, "backup exists before its rename at {step:?}");
            }
            Err(_) => assert!(fail_at <= 3, "backup missing after its rename ({step:?})"),
        }
        let temps_before = temp_names(dir.path());
        // After the "reboot", the same write with a healthy disk completes.
        write_atomic(
            &mut RealStorage,
            &target,
            NEW.as_bytes(),
            Some(now.as_bytes()),
            0o644,
        )
        .unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), NEW);
        // The healthy write leaves no temp file of its own (the cut one's is removed by the
        // next `cma set`, under the edit lock).
        let temps_after = temp_names(dir.path());
        assert!(
            temps_after.iter().all(|n| temps_before.contains(n)),
            "a temp file of the healthy write was left behind: {temps_after:?}"
        );
        npu_agent::action::atomic::remove_stale_temps(&target);
        assert!(temp_names(dir.path()).is_empty());
    }
    // Op 10 does not exist: the sequence has exactly ten steps.
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("f");
    std::fs::write(&target, OLD).unwrap();
    let mut storage = FaultStorage {
        fault: Fault::new(10, 5, true),
    };
    write_atomic(
        &mut storage,
        &target,
        NEW.as_bytes(),
        Some(OLD.as_bytes()),
        0o644,
    )
    .unwrap();
    assert_eq!(storage.fault.next_op.get(), 10);
}

struct NoReboot {
    ran: usize,
}

impl CommandRunner for NoReboot {
    fn sync(&mut self) {}
    fn run(&mut self, _argv: &[String], _timeout: std::time::Duration) -> RunOutcome {
        self.ran += 1;
        RunOutcome::Exited(0)
    }
}

#[test]
fn cut_cma_set_leaves_the_edit_unverified_and_refuses_reboot_until_redone() {
    let allow = ActionConfig {
        allow_reboot: true,
        ..Default::default()
    };
    let env = format!("{OLD}overlay_prefix=rockchip-rk3588\n");
    for (fail_at, step) in STEPS.iter().enumerate() {
        let t = rk3588_tree(&env, "root=UUID=0 cma=256M", 262_144);
        let root = t.root();
        let state = StateDir::default_for(&root);
        let d = diagnose(&root, &ProfileChoice::Auto).unwrap();
        let mut storage = FaultStorage {
            fault: Fault::new(fail_at, 5, true),
        };
        let r = cma_set(&root, &d, "512M", false, &mut storage, &state, 1000);
        assert_eq!(r.outcome, CmaSetOutcome::Failed, "{step:?}");
        assert!(r.error.contains(step.as_str()), "{step:?}: {}", r.error);
        let file = t.read("/boot/armbianEnv.txt");
        assert!(
            file == env || file == env.replace("cma=256M", "cma=512M"),
            "{step:?}: torn file {file:?}"
        );
        let st: BootEditState = state.load(BOOT_EDIT_FILE).unwrap().unwrap();
        assert!(!st.verified, "{step:?}");
        // A reboot now could boot an unverified file: refused, the command never runs.
        let mut runner = NoReboot { ran: 0 };
        match request_reboot(&state, &allow, &mut runner, "c1", "test", 1000) {
            RebootProgress::Refused(RebootRefusal::UnverifiedBootEdit(files)) => {
                assert_eq!(files, "/boot/armbianEnv.txt")
            }
            other => panic!("{step:?}: {other:?}"),
        }
        assert_eq!(runner.ran, 0);
        // Run again on a healthy disk: written, or (cut after the rename) found complete.
        let d = diagnose(&root, &ProfileChoice::Auto).unwrap();
        let again = cma_set(&root, &d, "512M", false, &mut RealStorage, &state, 1001);
        let want = if *step == Step::DirSync {
            CmaSetOutcome::Unchanged
        } else {
            CmaSetOutcome::Written
        };
        assert_eq!(again.outcome, want, "{step:?}: {again:?}");
        let st: BootEditState = state.load(BOOT_EDIT_FILE).unwrap().unwrap();
        assert!(st.verified && st.reboot_required, "{step:?}: {st:?}");
        assert_eq!(
            t.read("/boot/armbianEnv.txt.npu-agent.bak"),
            env,
            "{step:?}: backup is the original"
        );
        assert!(matches!(
            request_reboot(&state, &allow, &mut runner, "c2", "test", 1002),
            RebootProgress::Pending(_)
        ));
        assert_eq!(runner.ran, 1);
    }
}

#[test]
fn full_disk_is_a_clean_failure() {
    let t = rk3588_tree(OLD, "root=UUID=0 cma=256M", 262_144);
    let root = t.root();
    let state = StateDir::default_for(&root);
    let d = diagnose(&root, &ProfileChoice::Auto).unwrap();
    // ENOSPC half way through writing the new content (op 6 = temp write); not a power cut.
    let mut storage = FaultStorage {
        fault: Fault::new(6, 28, false),
    };
    let r = cma_set(&root, &d, "512M", false, &mut storage, &state, 1000);
    assert_eq!(r.outcome, CmaSetOutcome::Failed);
    assert!(
        r.error
            .contains("temp file write failed: no space left on the device (ENOSPC)"),
        "{}",
        r.error
    );
    assert_eq!(t.read("/boot/armbianEnv.txt"), OLD);
    assert_eq!(
        t.names("/boot"),
        vec!["armbianEnv.txt", "armbianEnv.txt.npu-agent.bak"],
        "the half-written temp file is removed"
    );
    // A read-only filesystem fails at the first create.
    let mut storage = FaultStorage {
        fault: Fault::new(0, 30, false),
    };
    let r = cma_set(&root, &d, "512M", false, &mut storage, &state, 1000);
    assert!(r.error.contains("mounted read-only (EROFS)"), "{}", r.error);
    assert_eq!(t.read("/boot/armbianEnv.txt"), OLD);
}
