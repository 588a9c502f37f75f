//! `update`'s apt side for real: the real `apt-get` against a local repository holding two
//! versions of `npu-agent` in a throwaway root (as `fix`'s tests do). The plan is held to
//! `npu-agent` alone, a downgrade is refused without the flag, the same version does nothing,
//! and (as root, dpkg with `--root`) the install step installs exactly `npu-agent=V` and the
//! pending update settles as the new version's `successful`.

use super::fix_apply::{host_status, installed, is_root, need, repo_with, Repo};
use npu_agent::action::state::StateDir;
use npu_agent::action::update::{self, Pending, Plan, PENDING_FILE};
use npu_agent::action::update_run::run_with;

fn repo(status: &str) -> Option<Repo> {
    repo_with(
        status,
        &[
            ("npu-agent", "1.0-1", "", false),
            ("npu-agent", "1.1-1", "", false),
            ("npu-agent", "1.2-1", "Depends: libextra\n", false),
            ("libextra", "1.0", "", false),
            ("other-tool", "2.0", "", false),
        ],
    )
}

fn at_1_0() -> String {
    installed("npu-agent", "1.0-1", "installed", "")
        + &installed("other-tool", "1.0", "installed", "")
}

#[test]
fn update_plans_hold_to_the_agent_package() {
    let Some(r) = repo(&at_1_0()) else { return };
    let root = r.tree.root();
    assert_eq!(
        update::plan(&root, &r.env, "1.1-1", false).map_err(|e| e.0),
        Ok(Plan::Install {
            from: Some("1.0-1".into()),
            to: "1.1-1".into()
        })
    );
    assert_eq!(
        update::plan(&root, &r.env, "1.0-1", false).map_err(|e| e.0),
        Ok(Plan::Current)
    );
    // A version that pulls in another package is not an update of the agent alone.
    let e = update::plan(&root, &r.env, "1.2-1", false).unwrap_err().0;
    assert!(e.contains("also installs libextra 1.0"), "{e}");
    let e = update::plan(&root, &r.env, "9.9-1", false).unwrap_err().0;
    assert!(e.contains("simulation"), "{e}");
    let e = update::plan(&root, &r.env, "1.1-1; rm", false)
        .unwrap_err()
        .0;
    assert!(e.contains("is not a Debian version"), "{e}");
}

#[test]
fn an_update_downgrade_needs_the_flag() {
    let status = installed("npu-agent", "1.1-1", "installed", "");
    let Some(r) = repo(&status) else { return };
    let root = r.tree.root();
    let e = update::plan(&root, &r.env, "1.0-1", false).unwrap_err().0;
    assert!(e.contains("needs allow_downgrade=true"), "{e}");
    assert_eq!(
        update::plan(&root, &r.env, "1.0-1", true).map_err(|e| e.0),
        Ok(Plan::Install {
            from: Some("1.1-1".into()),
            to: "1.0-1".into()
        })
    );
}

#[test]
fn the_same_version_answers_successful_with_nothing_done() {
    let Some(r) = repo(&at_1_0()) else { return };
    let root = r.tree.root();
    let state = StateDir::new(&root, "/var/lib/npu-agent");
    let o = run_with(
        &root,
        &state,
        &r.env,
        Some("u1".into()),
        "1.0-1",
        false,
        1000,
    );
    assert!(o.ok && !o.reboot_pending, "{o:?}");
    assert!(o.message.contains("nothing was done"), "{}", o.message);
    assert_eq!(state.load::<Pending>(PENDING_FILE).unwrap(), None);
}

#[test]
fn the_update_installs_exactly_the_asked_version_in_a_throwaway_root() {
    if !need(is_root(), "dpkg --root installs need root") {
        return;
    }
    let Some(r) = repo(&at_1_0()) else { return };
    let root = r.tree.root();
    let before = host_status();
    let state = StateDir::new(&root, "/var/lib/npu-agent");
    let o = run_with(
        &root,
        &state,
        &r.env,
        Some("u2".into()),
        "1.1-1",
        false,
        1000,
    );
    assert_eq!(host_status(), before, "the host's dpkg status changed");
    assert!(o.ok && o.reboot_pending, "{o:?}");
    let states =
        npu_agent::action::fix::apply::dpkg::parse_states(&r.tree.read("/var/lib/dpkg/status"));
    let mut got: Vec<(String, String)> = states.into_iter().map(|p| (p.name, p.version)).collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("npu-agent".to_string(), "1.1-1".to_string()),
            ("other-tool".into(), "1.0".into())
        ]
    );
    // The pending update the agent that comes back reads: this one is at the new version.
    let p = state.load::<Pending>(PENDING_FILE).unwrap().unwrap();
    assert_eq!(
        (p.old.as_str(), p.new.as_str(), p.cmd_id.as_str()),
        ("1.0-1", "1.1-1", "u2")
    );
    // It names the process that started the update, which never settles it itself ...
    assert_eq!(
        p.agent_instance.as_deref(),
        Some(update::process_instance())
    );
    assert!(update::settle_pending(&state, 1001).unwrap().is_none());
    // ... the agent that comes back, another process, does.
    let restarted = Pending {
        agent_instance: Some("another-process".into()),
        ..p
    };
    state.save(PENDING_FILE, &restarted).unwrap();
    let s = update::settle_pending(&state, 1001).unwrap().unwrap();
    assert!(s.ok && s.cmd_id == "u2", "{s:?}");
    assert!(
        s.message.contains("updated from 1.0-1 to 1.1-1"),
        "{}",
        s.message
    );
    assert_eq!(state.load::<Pending>(PENDING_FILE).unwrap(), None);
}
