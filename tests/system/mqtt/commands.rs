//! Commands end to end: each gets one final state, once, through duplicates, floods, reboots and restarts.

use super::*;

#[test]
fn duplicate_delivery_executes_once() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let topic = "npu-fleet/b1/cmd/rescan/dup-1";
    let p = init_payload("b1", "rescan", "dup-1", json!({}), now_s(), 60, None);
    c.publish(topic, &p, false);
    c.publish(topic, &p, false);
    c.publish(topic, &p, false);
    lifecycle(&c, topic, "successful");
    // Any answer to a duplicate would arrive before the marker's.
    let later = until_marker(&c, "b1", "dup-marker");
    let states: Vec<String> = later
        .iter()
        .filter(|m| m.topic == topic)
        .map(|m| m.json()["status"].as_str().unwrap_or("").to_string())
        .collect();
    // A copy that arrives after the command finished is answered again (its answer may have
    // been lost), never run again.
    assert!(
        !states.iter().any(|s| s == "executing" || s == "rejected"),
        "duplicates must never run again, got {states:?}"
    );
}

/// Issue 28 item 1: the link dropped right after `successful`, so the broker still holds the
/// retained `init` and delivers it again. The agent answers it with the recorded final state
/// (without running it again), so the command does not stay unanswered for ever.
#[test]
fn a_finished_command_delivered_again_is_answered_again() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let topic = "npu-fleet/b1/cmd/rescan/lost-1";
    let p = init_payload("b1", "rescan", "lost-1", json!({}), now_s(), 60, None);
    c.publish(topic, &p, true);
    lifecycle(&c, topic, "successful");
    let _ = c.drain();
    // The broker "lost" the answer: the retained message is the init again.
    c.publish(topic, &p, true);
    let again = lifecycle(&c, topic, "successful");
    assert_eq!(again["cmd_id"], "lost-1");
    let later = until_marker(&c, "b1", "lost-marker");
    assert!(
        !later
            .iter()
            .any(|m| m.topic == topic && m.json()["status"] == "executing"),
        "it ran again"
    );
    // What stays retained is the answer, not the init.
    let fresh = Client::connect(broker.port, &[topic]);
    let kept = fresh.wait_for(T, "the retained record", |m| m.topic == topic);
    assert_eq!(kept.json()["status"], "successful");
}

/// Issue 28 item 1, the real fault: the connection dies as the agent publishes `successful`
/// (a proxy cuts it instead of passing that PUBLISH on), so the broker keeps `executing`, not the
/// `init`, and nothing is delivered again. The agent sends the answer again on its next
/// connection (rumqttc alone drops it on a clean start), and the command ran once.
#[test]
fn an_answer_cut_off_by_the_broker_is_sent_again_on_the_next_connection() {
    use crate::support::proxy::{contains, packet_type, Dir, Fault};
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = cut.clone();
    let rule = move |dir: Dir, p: &[u8]| {
        let answer = dir == Dir::Up
            && packet_type(p) == 3
            && contains(p, b"cmd/rescan/cut-1")
            && contains(p, b"\"successful\"");
        if answer && !seen.swap(true, std::sync::atomic::Ordering::SeqCst) {
            Fault::Cut
        } else {
            Fault::Pass
        }
    };
    let (_proxy, agent) = behind_proxy(&broker, &board, rule);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let topic = "npu-fleet/b1/cmd/rescan/cut-1";
    let p = init_payload("b1", "rescan", "cut-1", json!({}), now_s(), 60, None);
    c.publish(topic, &p, true);
    lifecycle(&c, topic, "executing");
    let done = lifecycle(&c, topic, "successful");
    assert!(
        cut.load(std::sync::atomic::Ordering::SeqCst),
        "the proxy never cut"
    );
    assert_eq!(done["cmd_id"], "cut-1");
    // The status of the new connection comes after its subscriptions (the marker is live).
    status_of(&c, "b1");
    let later = until_marker(&c, "b1", "cut-marker");
    assert!(
        !later
            .iter()
            .any(|m| m.topic == topic && m.json()["status"] == "executing"),
        "it ran again"
    );
    let fresh = Client::connect(broker.port, &[topic]);
    let kept = fresh.wait_for(T, "the retained record", |m| m.topic == topic);
    assert_eq!(kept.json()["status"], "successful", "{}", agent.log_text());
    assert!(
        agent
            .log_text()
            .contains("its final state is published again"),
        "{}",
        agent.log_text()
    );
}

#[test]
fn br26_burst_of_commands_does_not_freeze_the_loop() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let mut agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let now = now_s();
    let t0 = Instant::now();
    for i in 0..300 {
        let id = format!("burst-{i}");
        c.publish(
            &format!("npu-fleet/b1/cmd/rescan/{id}"),
            &init_payload("b1", "rescan", &id, json!({}), now, 60, None),
            false,
        );
    }
    // Every command gets an answer (run or rate-limited), and status keeps flowing.
    let mut answered = std::collections::HashSet::new();
    while answered.len() < 300 {
        let m = c.wait_for(
            Duration::from_secs(20),
            &format!("answers ({} of 300 so far)", answered.len()),
            |m| m.topic.contains("/cmd/rescan/burst-"),
        );
        let st = m.json()["status"].as_str().unwrap_or("").to_string();
        if st == "successful" || st == "rejected" || st == "failed" {
            answered.insert(m.topic.clone());
        }
    }
    let burst_ms = t0.elapsed().as_millis();
    status_of(&c, "b1");
    assert!(agent.is_running());
    eprintln!("bench: 300-command burst answered in {burst_ms} ms");
    // Unsigned rescans are rate limited (one per 5 s; a refusal uses no slot): one sent after
    // the window runs. Asked again every 250 ms until one does, within the window plus T.
    let window_from = Instant::now();
    for n in 0.. {
        let id = format!("after-burst-{n}");
        let topic = format!("npu-fleet/b1/cmd/rescan/{id}");
        c.publish(
            &topic,
            &init_payload("b1", "rescan", &id, json!({}), now_s(), 60, None),
            false,
        );
        let t = topic.clone();
        let answer = c.wait_for(T, &format!("an answer on {topic}"), move |m| {
            m.topic == t
                && ["successful", "rejected", "failed"]
                    .contains(&m.json()["status"].as_str().unwrap_or(""))
        });
        let status = answer.json()["status"].clone();
        if status == "successful" {
            break;
        }
        assert!(
            status == "rejected" && window_from.elapsed() < Duration::from_secs(5) + T,
            "no rescan ran {:?} after the burst: {}",
            window_from.elapsed(),
            answer.text()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn reboot_is_proven_by_a_changed_boot_id() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let extra = format!(
        "{}\n[actions]\nallow_reboot = true\nreboot_command = [\"true\"]\nreboot_timeout_s = 60\n",
        trust(&board, 1)
    );
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&broker.url(), "b1", &extra),
    );
    let mut agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let before = board.read("/proc/sys/kernel/random/boot_id").unwrap();
    let topic = "npu-fleet/b1/cmd/reboot/rb-1";
    c.publish(
        topic,
        &init_payload(
            "b1",
            "reboot",
            "rb-1",
            json!({"reason": "test"}),
            now_s(),
            120,
            Some(&key(1)),
        ),
        true,
    );
    lifecycle(&c, topic, "executing");
    // The intent (with the boot_id before) is on disk before the reboot command runs.
    let t0 = Instant::now();
    let state: Value = loop {
        if let Some(t) = board.read("/var/lib/npu-agent/reboot.json") {
            break serde_json::from_str(&t).unwrap();
        }
        assert!(t0.elapsed() < T, "no reboot intent persisted");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(state["pending"]["cmd_id"], "rb-1");
    assert_eq!(state["pending"]["boot_id"], before.trim());
    // "The board reboots": the agent goes down, the kernel comes back with a new boot_id.
    assert_eq!(agent.terminate(), Some(0));
    board.write(
        "/proc/sys/kernel/random/boot_id",
        "0b7e6a36-1c52-4f0e-9f7b-7d5c1a3e9e10\n",
    );
    let _agent = Agent::start(&board);
    let done = lifecycle(&c, topic, "successful");
    assert!(
        done["reason"].as_str().unwrap().contains("0b7e6a36"),
        "{done}"
    );
}

#[test]
fn reboot_without_a_reboot_is_failed() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let extra = format!(
        "{}\n[actions]\nallow_reboot = true\nreboot_command = [\"true\"]\n",
        trust(&board, 1)
    );
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&broker.url(), "b1", &extra),
    );
    let mut agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let topic = "npu-fleet/b1/cmd/reboot/rb-2";
    c.publish(
        topic,
        &init_payload(
            "b1",
            "reboot",
            "rb-2",
            json!({}),
            now_s(),
            120,
            Some(&key(1)),
        ),
        true,
    );
    lifecycle(&c, topic, "executing");
    // Only the agent restarts; boot_id stays the same.
    agent.terminate();
    let _agent = Agent::start(&board);
    let r = lifecycle(&c, topic, "failed");
    assert!(r["reason"].as_str().unwrap().contains("agent"), "{r}");
}

#[test]
fn a_refused_automatic_compaction_is_not_retried_in_a_loop() {
    // Fragmented memory asks for compaction, but this tree has no /proc/sys/vm/compact_memory
    // (a kernel without CONFIG_COMPACTION): one refused attempt per cooldown, not a busy loop.
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let board = Board::from_fixture("own-rk3588s-opi5-pending-cma-fragmented", "frag", "");
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&broker.url(), "frag", ""),
    );
    let c = Client::connect(broker.port, &["npu-fleet/frag/status"]);
    let mut agent = Agent::start(&board);
    let first = status_of(&c, "frag");
    std::thread::sleep(Duration::from_secs(6));
    let later = c.drain();
    assert!(
        later.len() <= 8,
        "{} statuses in 6 s with interval_s = 2: a publish loop",
        later.len()
    );
    let last = later
        .last()
        .map(|m| m.json())
        .unwrap_or_else(|| first.json());
    assert_eq!(
        last["last_action"]["action"], "compact",
        "{}",
        last["last_action"]
    );
    assert_eq!(last["last_action"]["status"], "failed");
    assert!(agent.is_running());
}

/// Issue 26 item 10: the agent published `successful`, but a full state directory kept the
/// ledger from recording it; after a restart the ledger says `executing`. The broker's retained
/// `successful` stays (it is not overwritten with `failed: agent restarted`), while a command
/// the broker holds no answer for is still failed.
#[test]
fn a_final_answer_the_ledger_could_not_record_is_kept_after_a_restart() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let (n, k) = (now_s(), now_s() + 120);
    let entry = |action: &str| {
        format!(
            r#"{{"action":"{action}","signed":false,"accepted_unix_s":{n},"keep_until_unix_s":{k},"payload_hash":1,"status":"executing"}}"#
        )
    };
    board.write(
        "/var/lib/npu-agent/commands.json",
        &format!(
            r#"{{"schema":2,"commands":{{"lost-1":{},"crashed-2":{}}},"last_run":{{}}}}"#,
            entry("rescan"),
            entry("compact")
        ),
    );
    // The board's identity key, as its first start made it: its answers are sealed with it.
    let key = npu_agent::mqtt::ed25519::SigningKey::from_bytes(&[5; 32]);
    board.write("/var/lib/npu-agent/board_identity.key", &key.to_pkcs8_pem());
    let c = Client::connect(broker.port, &["npu-fleet/b1/cmd/#"]);
    let time = String::from_utf8(
        std::process::Command::new("date")
            .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let answer = format!(
        r#"{{"status":"successful","board":"b1","action":"rescan","cmd_id":"lost-1","time":"{}","result":{{}}}}"#,
        time.trim()
    );
    let lost = "npu-fleet/b1/cmd/rescan/lost-1";
    c.publish(
        lost,
        &npu_agent::mqtt::board_sig::seal(&key, lost, answer.clone().into_bytes()),
        true,
    );
    // Someone else's retained "successful" (not sealed by this board) is not taken.
    let spoof = answer
        .replace("rescan", "compact")
        .replace("lost-1", "crashed-2");
    c.publish("npu-fleet/b1/cmd/compact/crashed-2", spoof.as_bytes(), true);
    let _agent = Agent::start(&board);
    let r = lifecycle(&c, "npu-fleet/b1/cmd/compact/crashed-2", "failed");
    assert_eq!(r["reason"], "agent restarted", "{r}");
    let probe = Client::connect(broker.port, &["npu-fleet/b1/cmd/rescan/lost-1"]);
    let kept = probe.wait_for(T, "lost-1's record", |m| m.topic.ends_with("/lost-1"));
    assert_eq!(kept.json()["status"], "successful", "{}", kept.text());
}

/// Item 5 of the command-path hardening, at start: 1,500 retained unsigned `init`s (and a signed
/// one among them) wait on the broker before the agent connects; every one gets a final state —
/// the first rescan runs, the rest are rate limited — and the signed one runs. The broker keeps
/// every queued message for the agent (`max_queued_messages 0`), as the operator guide asks.
#[test]
fn retained_commands_waiting_at_start_all_get_a_final_state() {
    let Some((broker, board)) = flood_broker_and_board() else {
        return;
    };
    let c = Client::connect(broker.port, &[]);
    let waiting = 1500;
    for (topic, payload) in rescan_flood("w", waiting, 120, "signed-waiting") {
        c.publish(&topic, &payload, true);
    }
    // Every init is on the broker (a retained burst to a fresh subscriber holds all of them).
    let t0 = Instant::now();
    loop {
        let check = Client::connect(broker.port, &["npu-fleet/b1/cmd/rescan/+"]);
        let n = collect_for(&check, Duration::from_secs(2), |ms| ms.len() > waiting).len();
        if n == waiting + 1 {
            break;
        }
        assert!(t0.elapsed() < T, "{n} of {} inits retained", waiting + 1);
    }
    let agent = Agent::start(&board);
    let t0 = Instant::now();
    loop {
        let check = Client::connect(broker.port, &["npu-fleet/b1/cmd/rescan/+"]);
        // One subscriber sees the retained states, then every later change in order.
        let finals = last_status(&collect_for(&check, Duration::from_secs(3), |ms| {
            let f = last_status(ms);
            let done = f
                .values()
                .filter(|v| *v == "successful" || *v == "rejected")
                .count();
            done == waiting + 1
                && f.get("npu-fleet/b1/cmd/rescan/signed-waiting")
                    .map(String::as_str)
                    == Some("successful")
        }));
        let count = |s: &str| finals.values().filter(|v| v.as_str() == s).count();
        let signed = finals
            .get("npu-fleet/b1/cmd/rescan/signed-waiting")
            .map(String::as_str);
        if count("successful") + count("rejected") == waiting + 1 && signed == Some("successful") {
            // Unsigned rescans run at most once per 5 s (the rest are rate limited).
            let unsigned_runs = count("successful") - 1;
            let bound = 1 + t0.elapsed().as_secs() as usize / 5;
            assert!(
                (1..=bound).contains(&unsigned_runs),
                "{unsigned_runs} unsigned rescans ran"
            );
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{} successful, {} rejected of {} ({} topics); signed one: {signed:?}\n{}",
            count("successful"),
            count("rejected"),
            waiting + 1,
            finals.len(),
            agent.log_text()
        );
    }
    eprintln!(
        "attacks: retained-at-start tried={} held={}",
        waiting + 1,
        waiting + 1
    );
}

/// Every policy refusal is decided before `executing`: a signed reboot with `allow_reboot =
/// false`, a signed `set_cma` above the RAM and a `release_npu` on a board without hailo-ollama
/// are answered `rejected` with the reason, and no `executing` is ever published for them.
#[test]
fn policy_refusals_are_rejected_never_executing_first() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let extra = format!("{}\n[actions]\nallow_reboot = false\n", trust(&board, 1));
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&broker.url(), "b1", &extra),
    );
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let cases = [
        ("reboot", "pr-1", json!({}), "not allowed"),
        ("set_cma", "pr-2", json!({"size": "900G"}), "RAM"),
        ("release_npu", "pr-3", json!({}), "hailo-ollama"),
    ];
    for (action, id, args, why) in cases {
        let topic = format!("npu-fleet/b1/cmd/{action}/{id}");
        c.publish(
            &topic,
            &init_payload("b1", action, id, args, now_s(), 120, Some(&key(1))),
            true,
        );
        let seen = std::cell::RefCell::new(Vec::new());
        let done = c.wait_for(T, &format!("a final state on {topic}"), |m| {
            if m.topic != topic || m.payload.is_empty() {
                return false;
            }
            let s = m.json()["status"].as_str().unwrap_or("").to_string();
            seen.borrow_mut().push(s.clone());
            s == "rejected" || s == "failed" || s == "successful"
        });
        let done = done.json();
        assert_eq!(done["status"], "rejected", "{action}: {done}");
        assert!(
            done["reason"].as_str().unwrap().contains(why),
            "{action}: {done}"
        );
        assert!(
            !seen.borrow().iter().any(|s| s == "executing"),
            "{action} published {:?}",
            seen.borrow()
        );
    }
}

/// QoS 2 and a session takeover: 600 unsigned rescans and a signed one in the middle, published
/// at QoS 2 (the agent subscribes at QoS 1, so the broker delivers them at QoS 1: no PUBREL games
/// reach it), while a client connects twice with the agent's own client id and kicks it off in
/// the middle of the flood (acknowledgements owed on the old connection are void; the broker
/// re-sends the retained `init`s on the new one). Every command gets a final state, and the
/// signed one runs exactly once (one `executing`, one `successful`).
#[test]
fn a_qos2_flood_with_session_takeovers_leaves_no_command_without_a_final_state() {
    let Some((broker, board)) = flood_broker_and_board() else {
        return;
    };
    let signed_topic = "npu-fleet/b1/cmd/rescan/signed-q2";
    let watch = Client::connect(broker.port, &[signed_topic, "npu-fleet/b1/cmd/reboot/+"]);
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    let agent = Agent::start(&board);
    status_of(&c, "b1");
    let (p, _pt) = qos2_publisher(broker.port, "attacker-q2", false);
    let flood = 600;
    let mut session = 1;
    for (i, (topic, payload)) in rescan_flood("q2", flood, 120, "signed-q2")
        .into_iter()
        .enumerate()
    {
        p.publish(topic, rumqttc::QoS::ExactlyOnce, true, payload)
            .unwrap();
        if i == flood / 3 || i == 2 * flood / 3 {
            // A takeover with the agent's client id, in the middle of the flood.
            let (thief, t) = qos2_publisher(broker.port, "npu-agent-b1", true);
            std::thread::sleep(Duration::from_millis(300));
            let _ = thief.disconnect();
            let _ = t.join();
            // The agent is back (after its back-off) before the flood goes on.
            session += 1;
            let t0 = Instant::now();
            while !agent.log_text().contains(&format!("session={session} ")) {
                assert!(t0.elapsed() < T, "not reconnected: {}", agent.log_text());
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    let t0 = Instant::now();
    loop {
        let (done, seen, signed) =
            retained_rescan_finals(broker.port, Duration::from_secs(3), signed_topic);
        if done == flood + 1 && signed.as_deref() == Some("successful") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "{done} of {} commands have a final state ({seen} topics); signed one: {signed:?}\n{}",
            flood + 1,
            agent.log_text()
        );
    }
    // A second run of the signed command would be published before the marker's answer.
    let seen: Vec<String> = until_marker(&watch, "b1", "q2-marker")
        .iter()
        .filter(|m| m.topic == signed_topic)
        .map(|m| m.json()["status"].as_str().unwrap_or("").to_string())
        .collect();
    let count = |s: &str| seen.iter().filter(|v| v.as_str() == s).count();
    assert_eq!(count("executing"), 1, "{seen:?}");
    assert_eq!(count("successful"), 1, "{seen:?}");
    assert_eq!(count("rejected"), 0, "{seen:?}");
    // Both takeovers did end the agent's session in the middle of the flood (it connected 3 times).
    let log = agent.log_text();
    assert!(log.contains("session=3 "), "{log}");
    eprintln!(
        "attacks: qos2-takeover tried={} held={}",
        flood + 3,
        flood + 3
    );
}
