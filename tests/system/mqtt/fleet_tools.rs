//! The operator's fleet tools (`fleet send`, `fleet watch`) against a real broker.

use super::*;

#[test]
fn fleet_send_and_watch_end_to_end() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let keyfile = keys.path().join("op.key");
    let (code, out, err) = run_cli(&["keygen", "--out", keyfile.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("op.key.pub"));
    let pubkey = std::fs::read_to_string(keys.path().join("op.key.pub")).unwrap();
    board.write("/etc/npu-agent/op.key.pub", &pubkey);
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(
            &broker.url(),
            "b1",
            "[security]\ntrusted_keys = [\"/etc/npu-agent/op.key.pub\"]\n",
        ),
    );
    let _agent = Agent::start(&board);
    let watcher = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    status_of(&watcher, "b1");
    let url = broker.url();
    let (code, out, err) = run_cli(
        &[
            "fleet", "send", "rescan", "--board", "b1", "--broker", &url, "--wait", "10",
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].ends_with(" init"), "{out}");
    assert!(lines.iter().any(|l| l.contains(" executing")), "{out}");
    assert!(lines.last().unwrap().contains(" successful"), "{out}");
    // The requester clears the retained command at the end.
    let cmd_id = lines[0].split_whitespace().nth(1).unwrap().to_string();
    let marker = "test/marker/retained-probe";
    let probe = Client::connect(
        broker.port,
        &[&format!("npu-fleet/b1/cmd/rescan/{cmd_id}"), marker],
    );
    // The broker sends retained messages when it takes the subscription, so before this echo.
    probe.publish(marker, b"m", false);
    let got = collect_for(&probe, T, |ms| ms.iter().any(|m| m.topic == marker));
    assert!(got.iter().any(|m| m.topic == marker), "no marker echo");
    assert!(
        got.iter()
            .filter(|m| m.topic != marker)
            .all(|m| m.payload.is_empty()),
        "retained command not cleared"
    );
    // Unsigned destructive: rejected, exit 1.
    let (code, out, _) = run_cli(
        &[
            "fleet",
            "send",
            "set_cma",
            "--arg",
            "size=512M",
            "--board",
            "b1",
            "--broker",
            &url,
            "--wait",
            "10",
        ],
        &[],
    );
    assert_eq!(code, 1);
    assert!(out.contains("rejected: unsigned set_cma refused"), "{out}");
    // Signed: runs.
    let (code, out, err) = run_cli(
        &[
            "fleet",
            "send",
            "set_cma",
            "--arg",
            "size=512M",
            "--board",
            "b1",
            "--broker",
            &url,
            "--key",
            keyfile.to_str().unwrap(),
            "--wait",
            "10",
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(board
        .read("/boot/armbianEnv.txt")
        .unwrap()
        .contains("cma=512M"));
    // The next status says a reboot is required.
    let s = watcher.wait_for(T, "status with reboot_required", |m| {
        m.json()["reboot_required"] == true
    });
    assert_eq!(s.json()["board_id"], "b1");
    // fleet watch --once --format json sees the board.
    let (code, out, err) = run_cli(
        &[
            "fleet", "watch", "--broker", &url, "--once", "--format", "json",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let b = &v["boards"][0];
    assert_eq!(b["board"], "b1");
    assert_eq!(b["availability"], "online");
    assert_eq!(b["profile"], "rk3588-rknpu");
    assert!(
        b["worst"].as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap()
            .starts_with("reboot.pending")
            || w.as_str().unwrap().starts_with("cma.boot_param")),
        "{b}"
    );
    // --all reaches every board.
    let (code, out, err) = run_cli(
        &[
            "fleet",
            "send",
            "rescan",
            "--all",
            "--broker",
            &url,
            "--wait",
            "10",
            "--key",
            keyfile.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("b1 ") && l.contains("successful")),
        "{out}"
    );
}

/// A board (or anyone on the broker) cannot drive the operator's terminal through `fleet watch`
/// or `fleet send`: a status and a command reply carrying conceal, clear-screen, cursor-home
/// and a newline with a fake row reach the output escaped.
#[test]
fn hostile_statuses_and_replies_cannot_drive_the_operator_terminal() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let url = broker.url();
    let c = Client::connect(broker.port, &["npu-fleet/evil/cmd/#"]);
    c.publish("npu-fleet/evil/availability", b"online\x1b[8m", true);
    c.publish(
        "npu-fleet/evil/status",
        json!({"health": "ok\u{1b}[2J\u{1b}[H", "profile": "p\nfake-board online ok",
               "model": "m\u{1b}[30;40m", "time": "t", "session": 1,
               "findings": [{"id": "cma.free\u{1b}[8m", "status": "fail"}]})
        .to_string()
        .as_bytes(),
        true,
    );
    let bad: [&[u8]; 5] = [b"\x1b[8m", b"\x1b[2J", b"\x1b[H", b"\x1b[30", b"\x1b[1A"];
    let clean = |what: &str, text: &str| {
        for b in bad {
            let b = String::from_utf8_lossy(b);
            assert!(!text.contains(b.as_ref()), "{what} carries {b:?}: {text:?}");
        }
    };
    let (code, out, err) = run_cli(&["fleet", "watch", "--broker", &url, "--once"], &[]);
    assert_eq!(code, 0, "{err}");
    clean("fleet watch", &out);
    assert!(out.contains("cma.free\\x1b[8m fail"), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.contains("online")).count(),
        1,
        "{out}"
    );
    // fleet send: the "board" answers the init with a hostile reason.
    let child = Command::new(agent_bin())
        .args([
            "fleet", "send", "rescan", "--board", "evil", "--broker", &url, "--wait", "10",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let init = c.wait_for(T, "the init of fleet send", |m| {
        m.json()["status"] == "init"
    });
    c.publish(
        &init.topic,
        json!({"status": "rejected", "reason": "no\u{1b}[8m hidden\u{1b}[2J\u{1b}[Hfake successful"})
            .to_string()
            .as_bytes(),
        true,
    );
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    clean("fleet send", &out);
    assert!(
        out.contains("rejected: no\\x1b[8m hidden\\x1b[2J\\x1b[Hfake successful"),
        "{out}"
    );
    assert_eq!(o.status.code(), Some(1), "{out}");
}

/// When every availability pass still reveals boards no earlier pass had (here: a board joins
/// every 50 ms while `fleet watch --once` reads), the list is said to be INCOMPLETE, with exit 1
/// and the reason in the JSON, instead of passing for the whole fleet.
#[test]
fn fleet_watch_once_says_incomplete_while_passes_keep_revealing_boards() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    fill_statuses(&broker, 50);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let joiner = {
        let stop = stop.clone();
        let port = broker.port;
        std::thread::spawn(move || {
            let c = Client::connect(port, &[]);
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let id = format!("late-{i:04}");
                c.publish(&format!("npu-fleet/{id}/availability"), b"online", true);
                let body = json!({"health": "pass", "board_id": id});
                c.publish(
                    &format!("npu-fleet/{id}/status"),
                    body.to_string().as_bytes(),
                    true,
                );
                i += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let (code, out, err) = run_cli(
        &[
            "fleet",
            "watch",
            "--broker",
            &broker.url(),
            "--once",
            "--format",
            "json",
        ],
        &[],
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    joiner.join().unwrap();
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["incomplete"], true, "{out}");
    let why = v["incomplete_reason"].as_str().unwrap();
    assert!(
        why.contains("after 4 passes") && why.contains("boards are joining"),
        "{why}"
    );
    assert!(err.contains("INCOMPLETE"), "{err}");
    // What it did read is listed: the 50 boards there from the start, and the early joiners.
    let boards = v["boards"].as_array().unwrap();
    assert!(boards.len() > 50, "{}", boards.len());
    for i in 0..50 {
        let b = format!("fleet-{i:04}");
        assert!(
            boards.iter().any(|r| r["board"] == b.as_str()),
            "{b} missing"
        );
    }
}

/// `fleet watch --once` lists every board of a fleet whose retained statuses do not fit in
/// one burst from a mosquitto with its default limits (`max_queued_messages 1000`): the broker's
/// log proves it dropped part of the wildcard burst, and the list still has every board.
#[test]
fn fleet_watch_once_lists_every_board_from_a_broker_with_default_limits() {
    if !require_tool("mosquitto") {
        return;
    }
    const N: usize = 6000;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("mosquitto.log");
    // mosquitto started as root writes its log as the `mosquitto` user.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    // Default limits; only a log file added, to see the broker drop messages.
    let broker = Broker::start_with(
        free_port(),
        &format!("log_dest file {}\nlog_type notice", log.display()),
    );
    fill_statuses(&broker, N);
    let url = broker.url();
    let t0 = Instant::now();
    let (code, out, err) = run_cli(
        &[
            "fleet", "watch", "--broker", &url, "--once", "--format", "json",
        ],
        &[],
    );
    let took = t0.elapsed();
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    assert_eq!(v["incomplete"], false, "{err}");
    assert_eq!(code, 0, "{err}");
    let boards = v["boards"].as_array().unwrap();
    assert_eq!(boards.len(), N, "every board is listed");
    for (i, b) in boards.iter().enumerate() {
        assert_eq!(b["board"], format!("fleet-{i:04}"));
        assert_eq!(b["health"], "pass", "{b}");
        assert_eq!(b["availability"], "online", "{b}");
    }
    assert!(took < Duration::from_secs(30), "took {took:?}");
    // The broker did cut the wildcard burst: the list is complete despite that, not because
    // everything fitted.
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(
        log.contains("Outgoing messages are being dropped for client npu-agent-watch-"),
        "mosquitto dropped nothing, so this test proved nothing: {log}"
    );
}

/// Issue 28 item 5: a broker that keeps closing `fleet watch --once`'s connection in the middle
/// of the retained burst (NATS drops a slow consumer) ends the listing with what it has, marked
/// incomplete with the reason, instead of starting over for ever; one reconnect (a broker
/// restart) only starts it over, and the list is complete.
#[test]
fn fleet_watch_once_cut_mid_listing_says_incomplete_and_why() {
    let Some((broker, _board)) = setup("b1", "") else {
        return;
    };
    let c = Client::connect(broker.port, &[]);
    for i in 0..50 {
        c.publish(&format!("npu-fleet/w{i:02}/availability"), b"online", true);
        c.publish(
            &format!("npu-fleet/w{i:02}/status"),
            br#"{"health":"ok","profile":"p","time":"t","session":1}"#,
            true,
        );
    }
    // Every retained message is stored before the listing starts.
    let check = Client::connect(broker.port, &["npu-fleet/w49/status"]);
    check.wait_for(T, "the last retained status", |_| true);
    let (code, doc, err) = watch_cut(broker.port, 1);
    assert_eq!(code, 0, "{doc}{err}");
    assert_eq!(doc["boards"].as_array().map(Vec::len), Some(50), "{doc}");
    let (code, doc, err) = watch_cut(broker.port, 3);
    assert_eq!(code, 1, "{doc}{err}");
    assert_eq!(doc["incomplete"], true, "{doc}");
    let why = doc["incomplete_reason"].as_str().unwrap_or("");
    assert!(
        why.contains("in the middle of the listing 3 times"),
        "{why}"
    );
    assert!(why.contains("max_pending"), "{why}");
    assert!(err.contains("in the middle of the listing"), "{err}");
}

/// Issue 28 item 4: `fleet send` waits for the SUBACK before it waits for the board: a broker
/// that takes 4 s per SUBACK (a cluster creating a QoS 1 consumer) is not "no such board"; a
/// refused subscription and a SUBACK that never comes are each named as what did not come.
#[test]
fn fleet_send_waits_for_the_suback_and_says_what_did_not_come() {
    use crate::support::proxy::{packet_type, refuse_suback, Fault};
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    status_of(&c, "b1");
    let slow = |_: u32, p: &[u8]| match packet_type(p) {
        9 => Fault::Delay(Duration::from_secs(4)),
        _ => Fault::Pass,
    };
    let (code, out, err) = send_through(broker.port, &["--wait", "30"], slow);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(" successful"), "{out}");
    // The target's SUBACK refused: named, with the reason code.
    let refuse = |n: u32, p: &[u8]| match (n, packet_type(p)) {
        (2, 9) => Fault::Replace(refuse_suback(p, true, 0x87)),
        _ => Fault::Pass,
    };
    let (code, _, err) = send_through(broker.port, &["--wait", "10"], refuse);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("the broker refused the subscription to the board's"),
        "{err}"
    );
    assert!(err.contains("not authorized, reason code 0x87"), "{err}");
    // No SUBACK and nothing else either: said so, not "no such board".
    let (code, out, err) = send_through(
        broker.port,
        &["--wait", "3", "--board-wait", "1"],
        |_, _| Fault::Drop,
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("did not answer the subscriptions (no SUBACK)"),
        "{out}{err}"
    );
    assert!(!err.contains("no status was ever seen"), "{err}");
    // An unknown board after a granted subscription: the board wait is named.
    let (code, _, err) = run_cli(
        &[
            "fleet",
            "send",
            "rescan",
            "--board",
            "nobody",
            "--broker",
            &broker.url(),
            "--board-wait",
            "1",
        ],
        &[],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("within 1 s (--board-wait)"), "{err}");
}

/// Issue 27, liveness that does not depend on one node: a board whose retained status is many
/// intervals old is `stale` in `fleet watch` (with the reason in JSON), whatever its retained
/// availability says, and `fleet send` says so when the board does not answer.
#[test]
fn a_board_with_an_old_status_is_stale_whatever_its_availability_says() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let c = Client::connect(broker.port, &["npu-fleet/ghost/#"]);
    // Its node died with its session: the last will never came, "online" stayed.
    c.publish("npu-fleet/ghost/availability", b"online", true);
    let old = String::from_utf8(
        Command::new("date")
            .args(["-u", "-d", "-1 hour", "+%Y-%m-%dT%H:%M:%SZ"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let status = format!(
        r#"{{"health":"ok","board_id":"ghost","profile":"rk3588-rknpu","time":"{}","session":1,"interval_s":60,"findings":[]}}"#,
        old.trim()
    );
    c.publish("npu-fleet/ghost/status", status.as_bytes(), true);
    let url = broker.url();
    let (code, out, err) = run_cli(&["fleet", "watch", "--once", "--broker", &url], &[]);
    assert_eq!(code, 0, "{out}{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with("ghost "))
        .unwrap_or_default();
    assert_eq!(row.split_whitespace().nth(1), Some("stale"), "{out}");
    let (code, out, err) = run_cli(
        &[
            "fleet", "watch", "--once", "--format", "json", "--broker", &url,
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let why = v["boards"][0]["stale"].as_str().unwrap_or_default();
    assert!(why.contains("publishes every 60 s"), "{v}");
    let (code, out, err) = run_cli(
        &[
            "fleet",
            "send",
            "rescan",
            "--board",
            "ghost",
            "--broker",
            &url,
            "--wait",
            "3",
            "--board-wait",
            "1",
        ],
        &[],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("ghost is stale: its last status is"), "{err}");
}

/// `fleet send` to a board whose retained availability says `offline` waits out `--wait`, then
/// says the board is offline (not only that no final state came).
#[test]
fn fleet_send_says_a_board_is_offline() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let c = Client::connect(broker.port, &["npu-fleet/gone/availability"]);
    c.publish("npu-fleet/gone/availability", b"offline", true);
    c.wait_for(Duration::from_secs(10), "the availability", |m| {
        m.payload == b"offline"
    });
    let url = broker.url();
    let (code, out, err) = run_cli(
        &[
            "fleet",
            "send",
            "rescan",
            "--board",
            "gone",
            "--broker",
            &url,
            "--wait",
            "3",
            "--board-wait",
            "2",
        ],
        &[],
    );
    assert_eq!(code, 1, "{out}{err}");
    // Said first, as soon as the availability is in, with what the wait is for.
    let early = "gone is offline (its retained availability says so): waiting up to 3 s (--wait)";
    let end = err.find("no final state within 3 s").expect(&err);
    assert!(err.find(early).is_some_and(|at| at < end), "{err}");
    assert!(
        err.contains("gone is offline (its retained availability says so)"),
        "{err}"
    );
}
