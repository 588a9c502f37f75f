use super::*;
use crate::action::reboot::{RebootIntent, RebootPhase};
use crate::model::remedy::Remedy;

const CONF: &str = "/etc/modprobe.d/hailo_pci.conf";

fn page_size_fix() -> Remedy {
    Remedy {
        steps: vec![
            Step::ModuleOption {
                module: "hailo_pci".into(),
                file: "hailo_pci.conf".into(),
                key: "force_desc_page_size".into(),
                value: "4096".into(),
            },
            Step::RebootNeeded,
        ],
        note: String::new(),
    }
}

fn binding(status: Status) -> Finding {
    Finding::new("hailo.driver_binding", status, "16 KiB pages").with_fix(page_size_fix())
}

struct Board {
    _dir: tempfile::TempDir,
    root: SysRoot,
    state: StateDir,
    env: ApplyEnv,
}

fn board() -> Board {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("etc/modprobe.d")).unwrap();
    let root = SysRoot::new(dir.path());
    let state = StateDir::default_for(&root);
    let env = ApplyEnv::for_root(&root);
    Board {
        _dir: dir,
        root,
        state,
        env,
    }
}

fn fix(b: &Board, findings: &[Finding], dry_run: bool, after: Status) -> FixReport {
    fix_telling(b, findings, dry_run, after, &|_| {})
}

fn fix_telling(
    b: &Board,
    findings: &[Finding],
    dry_run: bool,
    after: Status,
    on_step: &dyn Fn(&str),
) -> FixReport {
    let cx = FixContext {
        root: &b.root,
        state: &b.state,
        env: &b.env,
        on_step,
    };
    run_fix(&cx, findings, &[], dry_run, &|| Ok(vec![binding(after)]))
}

#[test]
fn each_step_is_told_as_it_starts_and_a_dry_run_tells_none() {
    let b = board();
    let told = std::cell::RefCell::new(Vec::<String>::new());
    let tell = |s: &str| {
        // The file step is told before it writes: its file is not there yet.
        told.borrow_mut()
            .push(format!("{s} [written: {}]", conf(&b).is_some()));
    };
    fix_telling(&b, &[binding(Status::Fail)], true, Status::Fail, &tell);
    assert!(told.borrow().is_empty());
    let r = fix_telling(&b, &[binding(Status::Fail)], false, Status::Fail, &tell);
    assert_eq!(r.result, FixResult::RebootNeeded, "{}", r.message);
    assert_eq!(
        *told.borrow(),
        [
            "1 of 2: echo 'options hailo_pci force_desc_page_size=4096' | tee /etc/modprobe.d/hailo_pci.conf [written: false]",
            "2 of 2: reboot [written: true]",
        ]
    );
}

fn conf(b: &Board) -> Option<String> {
    std::fs::read_to_string(b.root.join(CONF).unwrap()).ok()
}

#[test]
fn a_dry_run_plans_and_changes_nothing() {
    let b = board();
    let r = fix(&b, &[binding(Status::Fail)], true, Status::Fail);
    assert_eq!(r.result, FixResult::Planned, "{}", r.message);
    assert!(r.plan.has_steps());
    assert_eq!(conf(&b), None);
    assert!(r.applied.is_none() && r.after.is_empty());
}

#[test]
fn applied_but_still_firing_waits_for_the_reboot_it_needs() {
    let b = board();
    let r = fix(&b, &[binding(Status::Fail)], false, Status::Fail);
    assert_eq!(r.result, FixResult::RebootNeeded, "{}", r.message);
    assert!(r.message.contains("hailo.driver_binding"), "{}", r.message);
    assert!(conf(&b).is_some_and(|c| c.contains("options hailo_pci force_desc_page_size=4096")));
    assert_eq!(r.before[0].status, Status::Fail);
    assert_eq!(r.after[0].status, Status::Fail);
}

#[test]
fn a_finding_that_passes_afterwards_is_fixed() {
    let b = board();
    let r = fix(&b, &[binding(Status::Fail)], false, Status::Pass);
    assert_eq!(r.result, FixResult::Fixed, "{}", r.message);
    assert_eq!(r.after[0].status, Status::Pass);
}

#[test]
fn a_pending_reboot_refuses_and_writes_nothing() {
    let b = board();
    let rs = RebootState {
        schema: 1,
        pending: Some(RebootIntent {
            cmd_id: "c-7".into(),
            reason: "cma".into(),
            boot_id: "b".into(),
            requested_unix_s: 1,
            phase: RebootPhase::Requested,
        }),
        history: Vec::new(),
    };
    b.state.save(REBOOT_FILE, &rs).unwrap();
    let r = fix(&b, &[binding(Status::Fail)], false, Status::Pass);
    assert_eq!(r.result, FixResult::Refused);
    assert!(
        r.message.contains("reboot is pending (command c-7)"),
        "{}",
        r.message
    );
    assert_eq!(conf(&b), None);
}

/// A `set_cma` edit that waits for its reboot is a pending reboot too (issue 37, item 11): the
/// remote preflight and the local run both refuse, with the documented reason.
#[test]
fn a_boot_edit_waiting_for_its_reboot_refuses_and_writes_nothing() {
    use crate::action::state::{BootEditState, BOOT_EDIT_FILE};
    let b = board();
    let edit = BootEditState {
        schema: 1,
        requested: "256M".into(),
        requested_bytes: 256 << 20,
        files: Vec::new(),
        edited_unix_s: 1,
        boot_id: String::new(),
        verified: true,
        reboot_required: true,
        applied_boot_id: None,
    };
    b.state.save(BOOT_EDIT_FILE, &edit).unwrap();
    let findings = [binding(Status::Fail)];
    let why = preflight(&b.state, &findings, &[], false).unwrap_err();
    assert!(why.contains("a reboot is pending"), "{why}");
    assert_eq!(
        preflight(&b.state, &findings, &[], true),
        Ok(()),
        "a dry run"
    );
    let r = fix(&b, &findings, false, Status::Pass);
    assert_eq!(r.result, FixResult::Refused);
    assert!(r.message.contains("reboot is pending"), "{}", r.message);
    assert_eq!(conf(&b), None);
    // Booted since (another boot_id than the edit's): no longer pending.
    let proc_dir = b._dir.path().join("proc/sys/kernel/random");
    std::fs::create_dir_all(&proc_dir).unwrap();
    std::fs::write(proc_dir.join("boot_id"), "new-boot\n").unwrap();
    let edit = BootEditState {
        boot_id: "old-boot".into(),
        ..edit
    };
    b.state.save(BOOT_EDIT_FILE, &edit).unwrap();
    assert_eq!(preflight(&b.state, &findings, &[], false), Ok(()));
}

#[test]
fn advice_only_is_refused_with_the_reason() {
    let b = board();
    let mut f = Finding::new("hailo.pcie_link", Status::Warn, "x");
    f.remedy = "reseat the cable".into();
    let r = fix(&b, &[f], false, Status::Pass);
    assert_eq!(r.result, FixResult::Refused);
    assert!(
        r.message
            .contains("hailo.pcie_link: the remedy is advice for a person"),
        "{}",
        r.message
    );
}

#[test]
fn a_systemd_step_on_a_board_tree_is_refused_before_any_step() {
    let b = board();
    let mut fix_ = page_size_fix();
    fix_.steps.insert(0, Step::DaemonReload);
    let f = Finding::new("limits.memlock", Status::Fail, "x").with_fix(fix_);
    let r = fix(&b, &[f], false, Status::Pass);
    assert_eq!(r.result, FixResult::Refused, "{}", r.message);
    assert!(r.message.contains("systemd"), "{}", r.message);
    assert_eq!(conf(&b), None);
}
