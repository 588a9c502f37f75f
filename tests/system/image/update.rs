//! The agent updating itself on the booted ROCK 5B image under systemd (issue 39), in one boot:
//! a repository signed with a throwaway gpg key by `packaging/apt-repo/publish.sh` holds npu-agent
//! N (the image's), N+1 and a broken N+2 (its binary exits at once), baked into the image and
//! added to the board's sources by `image/add-apt-repo.sh`. From the fleet (`npu-agent fleet
//! send`): an unsigned `update` is rejected; a signed one to a version apt does not have is
//! refused by the simulation the sandboxed agent runs; the signed `update` to N+1 installs it in
//! a transient unit, the package's restart brings up a new agent, which answers `successful` and
//! retains a status naming N+1; the same signed command replayed (the same bytes, then altered
//! bytes) runs nothing; a downgrade without `allow_downgrade` is refused; the signed `update` to
//! N+2 never comes back and the watchdog service (armed with the update, sleeping to the
//! deadline) reinstalls N+1, whose agent answers
//! `rolled back` (and N+1's own watchdog, firing meanwhile, leaves N+2's record alone).
//! Prints `bench:` lines for the update and the rollback.

use super::*;
use crate::support::mqtt::Client;

const BOARD: &str = "rock-5b-update";
/// Where the repository sits in the guest's root file system.
const REPO: &str = "/srv/npu-agent-apt";
const PENDING: &str = "/var/lib/npu-agent/update-pending.json";

/// The board's configuration (agent.d): broker, id, the operator's key; `update` signed only,
/// and without its 10-minute rate limit so one boot takes several updates.
fn board_config() -> String {
    format!(
        "board_id = \"{BOARD}\"\n[mqtt]\nurl = \"mqtt://10.0.2.100:1883\"\nkeep_alive_s = 5\nreconnect_max_s = 5\n[report]\ninterval_s = 10\n[actions]\nrate_limit_overrides_s = {{ update = 0 }}\n[security]\nallow_unsigned = [\"rescan\"]\ntrusted_keys = [\"/etc/npu-agent/keys/operator.pub\"]\n"
    )
}

/// Makes the unpacked package `tree` a build whose agent never comes up: its binary says so on
/// standard error and exits 1.
fn break_agent(tree: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let bin = tree.join("usr/bin/npu-agent");
    fs::write(
        &bin,
        "#!/bin/sh\necho 'npu-agent: a broken build for the update test; exiting' >&2\nexit 1\n",
    )
    .unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
}

/// Every file under `dir`, as build-test-image.sh's `--file GUEST/REL=HOST` arguments.
fn file_args(dir: &Path, guest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().display().to_string();
                out.push(format!("{guest}/{rel}={}", p.display()));
            }
        }
    }
    out.sort();
    out
}

/// What the guest says about an update that went wrong: dpkg's view, the agent's and the
/// transient units' journals.
fn explain(g: &mut Guest) -> String {
    g.sh("dpkg-query -W -f='${Status} ${Version}\\n' npu-agent; ls -l /var/lib/dpkg/updates; cat /var/lib/npu-agent/update-pending.json; systemctl list-timers --all --no-pager | grep npu; journalctl --no-pager -o short-monotonic -u npu-agent | tail -n 40; journalctl -b --no-pager -o short-monotonic | grep -E 'npu-agent-update|apt|dpkg' | tail -n 80")
        .0
}

fn version_in(g: &mut Guest) -> String {
    g.ok("dpkg-query -W -f='${Version}' npu-agent")
        .trim()
        .to_string()
}

fn main_pid(g: &mut Guest) -> String {
    g.ok("systemctl show -p MainPID --value npu-agent")
        .trim()
        .to_string()
}

/// `fleet send update --arg version=V [--arg more]... --key K` waiting up to `wait_s` for the
/// final answer; returns the CLI's output and the final answer's JSON from the subscription.
fn update(
    sub: &fleet::Subscriber,
    g: &Guest,
    url: &str,
    args: &[&str],
    key: &str,
    wait_s: u64,
) -> (fleet::CliOut, Value) {
    let from = sub.len();
    let mut a = vec!["fleet", "send", "update"];
    for kv in args {
        a.extend(["--arg", kv]);
    }
    let wait = wait_s.to_string();
    a.extend([
        "--board", BOARD, "--broker", url, "--wait", &wait, "--key", key,
    ]);
    let out = fleet::spawn(&a).wait(Duration::from_secs(wait_s + 60));
    let topic = format!("npu-fleet/{BOARD}/cmd/update/{}", out.cmd_id());
    let (_, m) = wait_msg(sub, g, from, &topic, Duration::from_secs(30), |m| {
        matches!(
            m.json()["status"].as_str(),
            Some("successful" | "failed" | "rejected")
        )
    });
    (out, m.json())
}

#[test]
fn rock5b_image_updates_itself_from_a_signed_repository_and_rolls_back_a_broken_version() {
    let Some(deb) = prerequisites() else { return };
    let why = "the signed repository of the update test; Debian packages apt-utils, gnupg";
    if common::tools(["apt-ftparchive", "gpg"], why).is_none() {
        return;
    }
    let Some(mq) = Mosquitto::start() else { return };
    let (port, url) = (mq.port, mq.url());
    let tmp = tempfile::tempdir().unwrap();
    let (key, public) = fleet::keygen(tmp.path());
    let (n, n1, n2) = (
        format!("{VERSION}-1"),
        format!("{VERSION}-2"),
        format!("{VERSION}-3"),
    );
    let next = rebuilt_with_version(&deb, &n1, &tmp.path().join("n1"));
    let broken = rebuilt_with(&deb, &n2, &tmp.path().join("n2"), break_agent);
    let (home, fpr) = crate::apt_signed::new_key(tmp.path(), "archive");
    let repo = tmp.path().join("repo");
    crate::apt_signed::publish(&home, &fpr, &repo, &[&deb, &next, &broken]);
    let config = tmp.path().join("50-update.toml");
    fs::write(&config, board_config()).unwrap();
    let public_file = tmp.path().join("operator.pub");
    fs::write(&public_file, &public).unwrap();
    let img = tmp.path().join("img");
    let mut args: Vec<String> = vec![
        "--deb".into(),
        deb.display().to_string(),
        "--board".into(),
        "rock5b".into(),
    ];
    let mut files = vec![
        format!("/etc/npu-agent/agent.d/50-update.toml={}", config.display()),
        format!("/etc/npu-agent/keys/operator.pub={}", public_file.display()),
        format!(
            "/root/add-apt-repo.sh={}",
            repo_path("image/add-apt-repo.sh").display()
        ),
    ];
    files.extend(file_args(&repo, REPO));
    for f in files {
        args.extend(["--file".into(), f]);
    }
    args.push(img.display().to_string());
    build_image(&args.iter().map(String::as_str).collect::<Vec<_>>());

    let sub = fleet::Subscriber::connect(port, "npu-fleet/#");
    let avail = format!("npu-fleet/{BOARD}/availability");
    let status_topic = format!("npu-fleet/{BOARD}/status");
    let mut g = Guest::boot(&img, port, "", log_path("rock5b-update.log"));
    wait_msg(&sub, &g, 0, &avail, BOOT_TIMEOUT, |m| m.text() == "online");
    say(&format!(
        "bench: ROCK 5B update image boot to online: {:.1} s",
        g.started.elapsed().as_secs_f64()
    ));
    g.login();

    // The board's only apt source: the signed repository, added as on a running board.
    let fetched = g.ok(&format!(
        "mkdir -p /root/apt-sources && mv /etc/apt/sources.list /etc/apt/sources.list.d/* /root/apt-sources/ 2>/dev/null; \
         sh /root/add-apt-repo.sh / file:{REPO} {REPO}/npu-agent-archive-keyring.asc 2>&1 && apt-get update < /dev/null 2>&1"
    ));
    assert!(
        fetched.contains("bookworm InRelease")
            && !fetched.contains("W:")
            && !fetched.contains("E:"),
        "{fetched}"
    );
    let listed = g.ok("apt-cache madison npu-agent");
    for v in [&n, &n1, &n2] {
        assert!(
            listed.contains(&format!(" {v} ")),
            "{v} not listed:\n{listed}"
        );
    }
    assert_eq!(version_in(&mut g), n);
    // apt-get -s works in the service's own view of the file system (ProtectSystem=strict:
    // dpkg's database and apt's cache read-only), where the agent's plan runs it.
    let sim = g.ok(&format!(
        "nsenter -t $(systemctl show -p MainPID --value npu-agent) -m -- sh -c 'touch /var/lib/dpkg/npu-test 2>&1; apt-get -s install npu-agent={n1} < /dev/null 2>&1'"
    ));
    assert!(sim.contains("Read-only file system"), "{sim}");
    assert!(
        sim.contains(&format!("Inst npu-agent [{n}] ({n1} ")),
        "{sim}"
    );
    let pid_n = main_pid(&mut g);

    // Refused, nothing changed: unsigned; a version apt does not have (the sandboxed agent's
    // simulation fails).
    let unsigned = send(&url, BOARD, "update", &[&format!("version={n1}")], None);
    assert_ne!(unsigned.code, 0, "{unsigned:?}");
    assert!(unsigned.out.contains("rejected"), "{unsigned:?}");
    let missing = format!("version={VERSION}-9");
    let (out, a) = update(&sub, &g, &url, &[&missing], &key, 240);
    assert_ne!(out.code, 0, "{out:?}\n{}", g.tail());
    let reason = a["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("the simulation (apt-get -s) failed"),
        "{a:#}"
    );
    assert_eq!(version_in(&mut g), n);
    assert_eq!(main_pid(&mut g), pid_n);

    // N -> N+1 under systemd: the new agent answers once connected, and retains a status
    // naming N+1.
    let from = sub.len();
    let t0 = Instant::now();
    let (up, a) = update(&sub, &g, &url, &[&format!("version={n1}")], &key, 600);
    let update_s = t0.elapsed().as_secs_f64();
    if up.code != 0 {
        panic!("{up:?}\n{a:#}\n{}", explain(&mut g));
    }
    assert_eq!(a["status"], "successful", "{a:#}");
    assert_eq!(
        a["reason"],
        format!("updated from {n} to {n1}; agent {VERSION} is running"),
        "{a:#}"
    );
    assert_eq!(a["result"]["agent_version"], VERSION, "{a:#}");
    say(&format!(
        "bench: update {n} -> {n1} under systemd (fleet send to the new agent's answer): {update_s:.1} s"
    ));
    // The old agent went offline and a new one came online before the answer.
    let topic = format!("npu-fleet/{BOARD}/cmd/update/{}", up.cmd_id());
    let (i_off, _) = wait_msg(&sub, &g, from, &avail, Duration::from_secs(1), |m| {
        m.text() == "offline"
    });
    let (i_on, _) = wait_msg(&sub, &g, i_off, &avail, Duration::from_secs(1), |m| {
        m.text() == "online"
    });
    let (i_answer, _) = wait_msg(&sub, &g, from, &topic, Duration::from_secs(1), |m| {
        m.json()["status"] == "successful"
    });
    assert!(
        i_on < i_answer,
        "the answer came before the new agent's online"
    );
    assert_eq!(version_in(&mut g), n1);
    let pid_n1 = main_pid(&mut g);
    assert_ne!(pid_n1, pid_n, "the service was not restarted");
    assert_eq!(g.sh(&format!("test -e {PENDING}")).1, 1, "the record stays");
    let unit_log = g.ok("journalctl --no-pager -o cat -u 'npu-agent-update-[0-9]*'");
    assert!(
        unit_log.contains(&format!("Unpacking npu-agent ({n1}) over ({n})")),
        "{unit_log}"
    );
    let (_, st) = wait_msg(
        &sub,
        &g,
        i_answer,
        &status_topic,
        Duration::from_secs(120),
        |m| m.json()["last_action"]["cmd_id"] == up.cmd_id().as_str(),
    );
    let retained = fleet::retained(port, &status_topic, Duration::from_secs(20))
        .expect("a retained status")
        .json();
    for s in [&st.json(), &retained] {
        let detail = s["last_action"]["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(&format!("to {n1}")), "{s:#}");
    }

    // The update's signed command replayed: the same bytes are answered with the recorded
    // outcome, altered bytes are refused as a replay; nothing runs again.
    let init = sub
        .all()
        .into_iter()
        .find(|m| m.topic == topic && m.json()["status"] == "init")
        .expect("the signed init on the command topic");
    assert!(!init.json()["signature"].is_null(), "{}", init.text());
    let c = Client::connect(port, &[]);
    let from = sub.len();
    c.publish(&topic, &init.payload, false);
    let (i_again, again) = wait_msg(&sub, &g, from, &topic, Duration::from_secs(60), |m| {
        m.json()["status"] == "successful"
    });
    assert!(
        again.json()["reason"]
            .as_str()
            .unwrap_or_default()
            .contains(&n1),
        "{}",
        again.text()
    );
    let mut altered = init.payload.clone();
    altered.push(b' ');
    c.publish(&topic, &altered, false);
    let (_, refused) = wait_msg(
        &sub,
        &g,
        i_again + 1,
        &topic,
        Duration::from_secs(60),
        |m| m.json()["replay_rejected"].is_string(),
    );
    assert!(
        refused.json()["replay_rejected"]
            .as_str()
            .unwrap_or_default()
            .contains("already used (replay)"),
        "{}",
        refused.text()
    );
    let executing = sub.all()[from..]
        .iter()
        .any(|m| m.topic == topic && m.json()["status"] == "executing");
    assert!(!executing, "a replay ran: {}", sub.recent(12));
    assert_eq!(main_pid(&mut g), pid_n1);
    assert_eq!(version_in(&mut g), n1);

    // The new agent answers from inside the package's postinst (its restart waits for the
    // agent's READY=1): apt holds dpkg's lock a little longer, and an update sent now would be
    // refused with `dpkg is locked`. Wait for the install unit to end.
    let left = g.ok("for i in $(seq 300); do systemctl list-units --no-legend --all 'npu-agent-update-[0-9]*' | grep -q . || break; sleep 1; done; systemctl list-units --no-legend --all 'npu-agent-update-[0-9]*'; dpkg-query -W -f='${Status}' npu-agent");
    assert_eq!(left.trim(), "install ok installed", "{left}");

    // Back to N without allow_downgrade: refused.
    let (out, a) = update(&sub, &g, &url, &[&format!("version={n}")], &key, 240);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        a["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("a downgrade needs allow_downgrade=true"),
        "{a:#}"
    );

    // N+2 never comes up: the watchdog reinstalls N+1 at the deadline, whose agent answers.
    let t0 = Instant::now();
    let from = sub.len();
    let v2 = format!("version={n2}");
    let run = fleet::spawn(&[
        "fleet", "send", "update", "--arg", &v2, "--board", BOARD, "--broker", &url, "--wait",
        "900", "--key", &key,
    ]);
    let done = sub.find_from(from, Duration::from_secs(720), |m| {
        m.topic
            .starts_with(&format!("npu-fleet/{BOARD}/cmd/update/"))
            && matches!(
                m.json()["status"].as_str(),
                Some("successful" | "failed" | "rejected")
            )
    });
    let Some((_, answer)) = done else {
        panic!(
            "no answer to the update to {n2}\n{}\n{}",
            sub.recent(12),
            explain(&mut g)
        );
    };
    let rollback_s = t0.elapsed().as_secs_f64();
    let down = run.wait(Duration::from_secs(120));
    let a = answer.json();
    if a["status"] != "failed"
        || !a["reason"]
            .as_str()
            .unwrap_or_default()
            .starts_with("rolled back")
    {
        panic!("{down:?}\n{a:#}\n{}", explain(&mut g));
    }
    assert_eq!(
        a["reason"],
        format!(
            "rolled back to {n1}: {n2} did not come back healthy and connected within the deadline"
        ),
        "{a:#}"
    );
    say(&format!(
        "bench: rollback of a broken {n2} to {n1} under systemd (fleet send to the old version's answer, deadline 300 s): {rollback_s:.1} s"
    ));
    assert_eq!(version_in(&mut g), n1);
    let state = g.ok("for i in $(seq 120); do systemctl is-active -q npu-agent && break; sleep 1; done; systemctl is-active npu-agent");
    assert_eq!(state.trim(), "active", "{}", g.tail());
    let broken_log = g.ok(
        "journalctl -u npu-agent --no-pager -o cat | grep -c 'a broken build for the update test'",
    );
    assert!(
        broken_log.trim().parse::<u32>().unwrap_or(0) >= 1,
        "{broken_log}"
    );
    let wd = g.ok("journalctl --no-pager -o cat -u 'npu-agent-update-watchdog-*'");
    println!("the watchdog units' journal:\n{wd}");
    // One watchdog reinstalled N+1; N+1's own (armed by the first update) stood down.
    assert_eq!(
        wd.matches(&format!("Unpacking npu-agent ({n1}) over ({n2})"))
            .count(),
        1,
        "{wd}"
    );
    assert!(!wd.contains(&format!("npu-agent ({n})")), "{wd}");
    assert_eq!(g.sh(&format!("test -e {PENDING}")).1, 1);
    g.poweroff();
}

fn repo_path(rel: &str) -> PathBuf {
    repo().join(rel)
}
