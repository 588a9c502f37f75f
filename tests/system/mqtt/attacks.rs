//! What someone with broker access tries against the command path, and that it holds.

use super::*;

#[test]
fn hostile_commands_are_rejected_and_the_agent_keeps_serving() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&broker.url(), "b1", &trust(&board, 1)),
    );
    let mut agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    // An oversized retained message on a command topic: the broker must not send it to the
    // agent (MQTT 5 Maximum Packet Size), and the connection must not wedge.
    c.publish("npu-fleet/b1/cmd/compact/huge", &vec![b'x'; 200_000], true);
    let now = now_s();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "npu-fleet/b1/cmd/rescan/exp-1",
            init_payload("b1", "rescan", "exp-1", json!({}), now - 1000, 60, None),
            "expired",
        ),
        (
            "npu-fleet/b1/cmd/set_cma/uns-1",
            init_payload(
                "b1",
                "set_cma",
                "uns-1",
                json!({"size": "256M"}),
                now,
                60,
                None,
            ),
            "unsigned set_cma refused",
        ),
        (
            "npu-fleet/b1/cmd/reboot/uns-2",
            init_payload("b1", "reboot", "uns-2", json!({}), now, 60, None),
            "unsigned reboot refused",
        ),
        (
            "npu-fleet/b1/cmd/set_cma/sig-1",
            init_payload(
                "b1",
                "set_cma",
                "sig-1",
                json!({"size": "256M"}),
                now,
                60,
                Some(&key(2)),
            ),
            "bad signature",
        ),
        (
            "npu-fleet/b1/cmd/rescan/wb-1",
            init_payload("b2", "rescan", "wb-1", json!({}), now, 60, None),
            "names board \"b2\"",
        ),
        (
            "npu-fleet/b1/cmd/format_disk/ua-1",
            init_payload("b1", "format_disk", "ua-1", json!({}), now, 60, None),
            "unknown action",
        ),
        (
            "npu-fleet/b1/cmd/rescan/mal-1",
            b"{\"status\":\"init\",".to_vec(),
            "malformed",
        ),
        (
            "npu-fleet/b1/cmd/rescan/mal-2",
            br#"{"status":"init","board":"b1","issued_at":1,"expires_at":2,"shell":"rm -rf /"}"#
                .to_vec(),
            "unknown field",
        ),
        ("npu-fleet/b1/cmd/rescan/big-1", vec![b' '; 6000], "exceeds"),
        (
            "npu-fleet/b1/cmd/compact/arg-1",
            init_payload(
                "b1",
                "compact",
                "arg-1",
                json!({"drop_caches": "please"}),
                now,
                60,
                None,
            ),
            "true or false",
        ),
    ];
    for (topic, payload, reason) in &cases {
        c.publish(topic, payload, true);
        let r = lifecycle(&c, topic, "rejected");
        assert!(
            r["reason"].as_str().unwrap_or("").contains(reason),
            "{topic}: reason {:?} should contain {reason:?}",
            r["reason"]
        );
        c.publish(topic, b"", true);
    }
    // A replay: the same cmd_id again after it ran.
    let topic = "npu-fleet/b1/cmd/rescan/rp-1";
    c.publish(
        topic,
        &init_payload("b1", "rescan", "rp-1", json!({}), now, 60, None),
        true,
    );
    lifecycle(&c, topic, "successful");
    // Issued a second earlier, so the bytes differ from the first (not a redelivery).
    c.publish(
        topic,
        &init_payload("b1", "rescan", "rp-1", json!({}), now - 1, 60, None),
        true,
    );
    // Answered without destroying the record: the retained state stays the real outcome, and
    // the replay is named beside it.
    let r = c
        .wait_for(T, "replay answer", |m| {
            m.topic == topic && m.json().get("replay_rejected").is_some()
        })
        .json();
    assert_eq!(r["status"], "successful", "{r}");
    assert!(
        r["replay_rejected"].as_str().unwrap().contains("replay"),
        "{r}"
    );
    // Still serving: a signed set_cma runs and edits the boot file.
    let topic = "npu-fleet/b1/cmd/set_cma/ok-1";
    c.publish(
        topic,
        &init_payload(
            "b1",
            "set_cma",
            "ok-1",
            json!({"size": "512M"}),
            now_s(),
            60,
            Some(&key(1)),
        ),
        true,
    );
    lifecycle(&c, topic, "executing");
    let done = lifecycle(&c, topic, "successful");
    assert_eq!(done["result"]["reboot_required"], true, "{done}");
    assert!(board
        .read("/boot/armbianEnv.txt")
        .unwrap()
        .contains("cma=512M"));
    assert!(agent.is_running());
    // The giant retained message never reached the agent: no reconnect loop in its log.
    let log = agent.log_text();
    assert!(
        !log.contains("MQTT connection lost"),
        "the connection dropped: {log}"
    );
}

/// The agent's link under a flood (item 5 of the command-path hardening), against a real broker,
/// over MQTT 5 and 3.1.1: with acknowledgements owed until a message is handled, the broker
/// holds back all but a few (MQTT 5 Receive Maximum; mosquitto's `max_inflight_messages` for
/// 3.1.1) — the flood waits on the broker, not in the agent's memory — while the link keeps
/// publishing and the connection stays up past 1.5 keep-alives; once handled and acknowledged,
/// every message arrives exactly once. An acknowledgement owed to an ended connection is void.
#[test]
fn the_agent_link_holds_a_flood_back_on_the_broker_until_each_message_is_handled() {
    if !require_tool("mosquitto") {
        return;
    }
    use npu_agent::mqtt::link::{Ack, Link, LinkEvent, LinkOptions, Protocol, RECEIVE_MAXIMUM};
    use rumqttc::v5::mqttbytes::QoS;
    const FLOOD: usize = 300;
    // mosquitto's default max_inflight_messages: the bound over 3.1.1, which has no Receive Maximum.
    const MOSQUITTO_INFLIGHT: usize = 20;
    let broker = Broker::start();
    let observer = Client::connect(broker.port, &["flood/+/status"]);
    for (protocol, name, held) in [
        (Protocol::V5, "v5", usize::from(RECEIVE_MAXIMUM)),
        (Protocol::V311, "v311", MOSQUITTO_INFLIGHT),
    ] {
        for i in 0..FLOOD {
            observer.publish(
                &format!("flood/{name}/cmd/{i}"),
                i.to_string().as_bytes(),
                true,
            );
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let opts = LinkOptions {
                url: npu_agent::mqtt::parse_url(&broker.url()).unwrap(),
                tls: None,
                client_id: format!("flood-{name}"),
                keep_alive: Duration::from_secs(5),
                credentials: None,
                last_will: None,
                max_incoming_packet_bytes: 16 * 1024,
                connect_timeout_s: 5,
                lossless: true,
                ack_when_handled: true,
                protocol,
                auto_protocol: false,
                reconnect_max: Duration::from_secs(2),
                fallbacks: Vec::new(),
            };
            let mut link = Link::start(&opts);
            assert!(matches!(
                next_event(&mut link).await,
                LinkEvent::Connected { .. }
            ));
            link.client
                .try_subscribe_no_local(&[format!("flood/{name}/cmd/+")], QoS::AtLeastOnce)
                .unwrap();
            // Nothing acknowledged: only the in-flight window arrives, for longer than 1.5
            // keep-alives (the broker would end a connection whose pings stopped).
            let mut owed: Vec<(String, Ack)> = Vec::new();
            // 8 s over MQTT 5 (keep-alive 5 s: mosquitto ends a silent connection after 7.5 s).
            let hold_s = if protocol == Protocol::V5 { 8 } else { 2 };
            let hold = tokio::time::Instant::now() + Duration::from_secs(hold_s);
            let mut status_sent = false;
            loop {
                match tokio::time::timeout_at(hold, link.events.recv()).await {
                    Err(_) => break,
                    Ok(Some(LinkEvent::Message { topic, ack, .. })) => {
                        owed.push((topic, ack.expect("a QoS 1 message owes an ack")));
                        if !status_sent {
                            // The link still publishes while the flood waits.
                            link.client
                                .try_publish(
                                    format!("flood/{name}/status"),
                                    QoS::AtLeastOnce,
                                    false,
                                    b"up".to_vec(),
                                )
                                .unwrap();
                            status_sent = true;
                        }
                    }
                    // The subscription's SUBACK (granted at QoS 1).
                    Ok(Some(LinkEvent::SubAck { codes })) => assert_eq!(codes, [1], "{name}"),
                    Ok(ev) => panic!("{name}: unexpected {ev:?} while the flood is held back"),
                }
            }
            assert_eq!(
                owed.len(),
                held,
                "{name}: messages delivered before any ack"
            );
            let want = format!("flood/{name}/status");
            let status = observer.wait_for(T, "the status published during the flood", |m| {
                m.topic == want
            });
            assert_eq!(status.text(), "up");
            // A void ack (a connection that has ended) sends nothing.
            let void = Ack {
                connection: 0,
                ..owed[0].1
            };
            assert_eq!(owed[0].1.qos, QoS::AtLeastOnce);
            assert_eq!(link.try_ack(&void), Ok(false));
            // Handle and acknowledge each message: the rest of the flood follows, once each.
            let mut seen: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
            let mut queue: std::collections::VecDeque<(String, Ack)> = owed.into();
            loop {
                while let Some((t, a)) = queue.pop_front() {
                    assert!(seen.insert(t.clone()), "{name}: {t} delivered twice");
                    // The request queue may be full for a moment: retry after a yield.
                    while link.try_ack(&a).is_err() {
                        tokio::task::yield_now().await;
                    }
                }
                if seen.len() == FLOOD {
                    break;
                }
                match next_event(&mut link).await {
                    LinkEvent::Message { topic, ack, .. } => queue.push_back((topic, ack.unwrap())),
                    ev => panic!("{name}: unexpected {ev:?}"),
                }
            }
            // Nothing comes twice.
            let extra = tokio::time::timeout(Duration::from_millis(500), link.events.recv()).await;
            assert!(extra.is_err(), "{name}: {extra:?} after the whole flood");
            assert!(queue.is_empty());
            assert_eq!(link.dropped.load(std::sync::atomic::Ordering::Relaxed), 0);
            link.shutdown(Duration::from_secs(1)).await;
        });
    }
}

/// Item 4 of the command-path hardening: secrets planted in every input — the broker password
/// file, the broker URL, a first-boot provisioning file (an unquoted numeric password), a
/// workload's command line and environment — appear in no status, finding, lifecycle message,
/// Home Assistant payload, log line or CLI output.
#[test]
fn no_planted_secret_leaves_the_board() {
    let Some((broker, board)) = setup("b1", "[home_assistant]\nenabled = true\n") else {
        return;
    };
    const BROKER_PW: &str = "pw-S3CR3T-broker-0042";
    const PROV_PW: &str = "918273645001";
    const API_KEY: &str = "sk-APIKEY-0042";
    const HF_TOKEN: &str = "hf_TOKEN0042";
    const ENV_SECRET: &str = "ENVSECRET0042";
    const URL_PW: &str = "pw-URL-0042";
    let secrets = [BROKER_PW, PROV_PW, API_KEY, HF_TOKEN, ENV_SECRET, URL_PW];
    board.write("/etc/npu-agent/broker.pw", &format!("{BROKER_PW}\n"));
    board.write(
        "/etc/npu-agent/agent.d/50-auth.toml",
        "[mqtt]\nusername = \"agent\"\npassword_file = \"/etc/npu-agent/broker.pw\"\n",
    );
    board.write(
        "/boot/npu-agent.toml",
        &format!("board_id = \"b1\"\n[secrets]\nmqtt_password = {PROV_PW}\n"),
    );
    board.write(
        "/proc/3120/cmdline",
        &format!(
            "python3\0/opt/rkllm_server/flask_server.py\0--target_platform\0rk3588\0--api-key\0{API_KEY}\0--hf-token={HF_TOKEN}\0"
        ),
    );
    board.write(
        "/proc/3120/environ",
        &format!("HF_TOKEN={ENV_SECRET}\0PATH=/usr/bin\0"),
    );
    let c = Client::connect(broker.port, &["#"]);
    let mut agent = Agent::start(&board);
    let st = status_of(&c, "b1");
    // The inputs were read: the provisioning file is reported (without its value).
    assert!(st.text().contains("agent.provisioning"), "{}", st.text());
    // A command the gate refuses, a replay and a button press produce lifecycle messages.
    let now = now_s();
    c.publish(
        "npu-fleet/b1/cmd/reboot/leak-1",
        &init_payload("b1", "reboot", "leak-1", json!({}), now, 60, None),
        true,
    );
    lifecycle(&c, "npu-fleet/b1/cmd/reboot/leak-1", "rejected");
    c.publish("npu-fleet/b1/ha/rescan", b"PRESS", false);
    // The press is handled before the marker; the rescan it runs ends with a status.
    let mut msgs = until_marker(&c, "b1", "leak-marker");
    msgs.extend(collect_for(&c, T, |ms| {
        ms.iter().any(|m| m.topic == "npu-fleet/b1/status")
    }));
    let mut seen: Vec<String> = vec![st.text()];
    seen.extend(msgs.iter().map(|m| format!("{} {}", m.topic, m.text())));
    let _ = agent.terminate();
    seen.push(agent.log_text());
    // The CLI: the effective config, a check, and a refused broker URL with user info.
    let root = board.root().to_str().unwrap().to_string();
    let (_, out, err) = run_cli(&["run", "--print-config", "--root", &root], &[]);
    seen.push(out + &err);
    let (_, out, err) = run_cli(&["check", "--root", &root, "--format", "json"], &[]);
    assert!(out.contains("limits."), "{out}{err}");
    seen.push(out + &err);
    let url = format!("mqtt://agent:{URL_PW}@127.0.0.1:{}", broker.port);
    let (code, out, err) = run_cli(
        &["run", "--print-config", "--root", &root],
        &[("NPU_AGENT_MQTT_URL", url.as_str())],
    );
    assert_ne!(code, 0, "a URL with user info is refused");
    assert!(err.contains("<redacted>"), "{err}");
    seen.push(out + &err);
    let (_, out, err) = run_cli(
        &["run", "--root", &root],
        &[("NPU_AGENT_MQTT_URL", url.as_str())],
    );
    seen.push(out + &err);
    let mut leaks = Vec::new();
    for text in &seen {
        for s in secrets {
            if text.contains(s) {
                leaks.push(format!(
                    "{s} in: {}",
                    text.chars().take(300).collect::<String>()
                ));
            }
        }
    }
    assert!(leaks.is_empty(), "{leaks:#?}");
    eprintln!(
        "attacks: secret-leak outputs={} (6 planted secrets each)",
        seen.len()
    );
}

/// Command-path attacks against a real broker (items 1, 2, 5 and 8 of the hardening issue):
/// a captured signed `init` replayed after an unsigned flood never runs again; a command that
/// never expires is refused; every message of a flood gets a final state and a signed command
/// in the middle of it is answered; a command a crash left `executing` is finished as failed;
/// an unreadable ledger refuses signed commands.
#[test]
fn command_path_attacks_hold_against_a_real_broker() {
    // A broker sized for a fleet: its per-client queue does not drop the test client's copies
    // of the flood (the agent's own drops are what is tested).
    let Some((broker, board)) = flood_broker_and_board() else {
        return;
    };
    // Item 8: the previous agent was killed (-9) while a compaction was executing.
    board.write(
        "/var/lib/npu-agent/commands.json",
        &format!(
            r#"{{"schema":2,"commands":{{"crashed-1":{{"action":"compact","signed":false,"accepted_unix_s":{n},"keep_until_unix_s":{k},"payload_hash":1,"status":"executing"}}}},"last_run":{{}}}}"#,
            n = now_s(),
            k = now_s() + 120
        ),
    );
    // The set_cma rate limit (30 s) is not what this test is about: no window to sleep through
    // between the two signed edits.
    board.write(
        "/etc/npu-agent/agent.d/90-test-limits.toml",
        "[actions]\nrate_limit_overrides_s = { set_cma = 0 }\n",
    );
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    let mut agent = Agent::start(&board);
    let r = lifecycle(&c, "npu-fleet/b1/cmd/compact/crashed-1", "failed");
    assert_eq!(r["reason"], "agent restarted", "{r}");
    status_of(&c, "b1");
    let mut tried = 1;
    // Item 1: set_cma 256M then 512M, both signed; then an unsigned flood; then the captured
    // 256M init again (retained, as an attacker with broker access would).
    let now = now_s();
    let first = init_payload(
        "b1",
        "set_cma",
        "s-256",
        json!({"size": "300M"}),
        now,
        120,
        Some(&key(1)),
    );
    c.publish("npu-fleet/b1/cmd/set_cma/s-256", &first, true);
    lifecycle(&c, "npu-fleet/b1/cmd/set_cma/s-256", "successful");
    let second = init_payload(
        "b1",
        "set_cma",
        "s-512",
        json!({"size": "512M"}),
        now_s(),
        120,
        Some(&key(1)),
    );
    c.publish("npu-fleet/b1/cmd/set_cma/s-512", &second, true);
    lifecycle(&c, "npu-fleet/b1/cmd/set_cma/s-512", "successful");
    // Item 5: 2500 unsigned rescans at full speed, a signed rescan in the middle.
    let flood = 2500;
    for (topic, payload) in rescan_flood("f", flood, 60, "signed-mid") {
        c.publish(&topic, &payload, true);
    }
    tried += flood + 1;
    // Every command's retained record ends in a final state (a fresh subscriber sees them).
    let t0 = Instant::now();
    loop {
        let (done, seen, signed) = retained_rescan_finals(
            broker.port,
            Duration::from_secs(3),
            "npu-fleet/b1/cmd/rescan/signed-mid",
        );
        let signed_mid = signed.as_deref() == Some("successful");
        if done == flood + 1 && signed_mid {
            break;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            panic!(
                "{done} of {} commands have a final state ({seen} topics seen); signed one successful: {signed_mid}\n{}",
                flood + 1,
                agent.log_text()
            );
        }
    }
    // The captured 256M init, replayed: the boot file stays at 512M, the record stays.
    c.publish("npu-fleet/b1/cmd/set_cma/s-256", b"", true);
    c.publish("npu-fleet/b1/cmd/set_cma/s-256", &first, true);
    tried += 1;
    // Ordering marker through the executor: a signed rescan (no rate limit) is admitted after
    // the replay and runs after any job the replay queued, one job at a time in that order.
    let marker = "npu-fleet/b1/cmd/rescan/after-replay";
    c.publish(
        marker,
        &init_payload(
            "b1",
            "rescan",
            "after-replay",
            json!({}),
            now_s(),
            60,
            Some(&key(1)),
        ),
        false,
    );
    lifecycle(&c, marker, "successful");
    assert!(board
        .read("/boot/armbianEnv.txt")
        .unwrap()
        .contains("cma=512M"));
    // Item 2: a command that never expires, signed.
    let mut forever = npu_agent::mqtt::command::InitMessage {
        status: npu_agent::mqtt::command::CmdStatus::Init,
        board: "b1".into(),
        args: json!({"size": "256M"}).as_object().cloned().unwrap(),
        issued_at: -9_223_372_036_854_775_807,
        expires_at: 9_000_000_000_000_000_000,
        signature: None,
    };
    npu_agent::mqtt::command::sign(&key(1), "npu-fleet", "set_cma", "forever", &mut forever);
    c.publish(
        "npu-fleet/b1/cmd/set_cma/forever",
        &serde_json::to_vec(&forever).unwrap(),
        true,
    );
    tried += 1;
    let r = lifecycle(&c, "npu-fleet/b1/cmd/set_cma/forever", "rejected");
    assert!(r["reason"].as_str().unwrap().contains("lifetime"), "{r}");
    assert!(board
        .read("/boot/armbianEnv.txt")
        .unwrap()
        .contains("cma=512M"));
    // Item 1: a corrupt ledger fails closed after a restart.
    let _ = agent.terminate();
    board.write(
        "/var/lib/npu-agent/commands.json",
        "{\"commands\": [garbage",
    );
    let mut agent = Agent::start(&board);
    let id = "after-corrupt";
    c.publish(
        &format!("npu-fleet/b1/cmd/set_cma/{id}"),
        &init_payload(
            "b1",
            "set_cma",
            id,
            json!({"size": "256M"}),
            now_s(),
            60,
            Some(&key(1)),
        ),
        true,
    );
    tried += 1;
    let r = lifecycle(&c, &format!("npu-fleet/b1/cmd/set_cma/{id}"), "rejected");
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .contains("ledger is unreadable"),
        "{r}"
    );
    assert_eq!(
        board.read("/var/lib/npu-agent/commands.json").unwrap(),
        "{\"commands\": [garbage"
    );
    assert!(board
        .read("/boot/armbianEnv.txt")
        .unwrap()
        .contains("cma=512M"));
    assert!(agent.is_running());
    eprintln!("attacks: command-path tried={tried} held={tried}");
}

/// Junk published on the topic of a command that already ran (retained, as an attacker on the
/// broker would) is answered with the real record, not with a `rejected` that replaces it: a
/// fresh subscriber still reads `successful`.
#[test]
fn junk_on_a_used_command_topic_keeps_the_real_outcome() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let topic = "npu-fleet/b1/cmd/rescan/ran-1";
    let p = init_payload("b1", "rescan", "ran-1", json!({}), now_s(), 60, None);
    c.publish(topic, &p, true);
    lifecycle(&c, topic, "successful");
    for junk in [&b"not json"[..], br#"{"status":"init","board":"b1"}"#] {
        c.publish(topic, junk, true);
        let v = c
            .wait_for(T, "the agent's answer to junk", |m| {
                m.topic == topic && m.json()["replay_rejected"].is_string()
            })
            .json();
        assert_eq!(v["status"], "successful", "{v}");
    }
    // The answer above came through the broker after the junk, so the retained record is set.
    let fresh = Client::connect(broker.port, &[topic]);
    let v = fresh
        .wait_for(T, "the retained record", |m| m.topic == topic)
        .json();
    assert_eq!(v["status"], "successful", "{v}");
}

/// Issue 26 item 16: every board used to answer every junk command with a retained message
/// nobody clears. Under MQTT 5 (Retain As Published) a refusal of a command that was not
/// retained is not retained either; one that was retained is, so it still replaces the junk.
#[test]
fn live_junk_leaves_no_retained_answer_on_the_broker() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let n = 30;
    for i in 0..n {
        let id = format!("junk-{i}");
        let topic = format!("npu-fleet/b1/cmd/set_cma/{id}");
        let p = init_payload(
            "b1",
            "set_cma",
            &id,
            json!({"size": "1G"}),
            now_s(),
            60,
            None,
        );
        c.publish(&topic, &p, false);
        c.publish(
            &format!("npu-fleet/b1/cmd/compact/raw-{i}"),
            b"not json",
            false,
        );
    }
    let kept = "npu-fleet/b1/cmd/set_cma/kept-1";
    let p = init_payload(
        "b1",
        "set_cma",
        "kept-1",
        json!({"size": "1G"}),
        now_s(),
        60,
        None,
    );
    c.publish(kept, &p, true);
    // Every refusal was answered live.
    let seen = collect_for(&c, T, |ms| {
        ms.iter()
            .filter(|m| m.topic.contains("/cmd/") && m.text().contains("\"rejected\""))
            .count()
            > 2 * n
    });
    let rejected = seen
        .iter()
        .filter(|m| m.topic.contains("/cmd/") && m.text().contains("\"rejected\""))
        .count();
    assert_eq!(rejected, 2 * n + 1, "answers seen live");
    // A fresh subscriber finds only the retained command's answer kept.
    let marker = "test/marker/junk-probe";
    let probe = Client::connect(broker.port, &["npu-fleet/b1/cmd/#", marker]);
    probe.publish(marker, b"m", false);
    let got = collect_for(&probe, T, |ms| ms.iter().any(|m| m.topic == marker));
    let stored: Vec<&str> = got
        .iter()
        .filter(|m| m.topic != marker && m.retain && !m.payload.is_empty())
        .map(|m| m.topic.as_str())
        .collect();
    assert_eq!(stored, vec![kept], "retained under npu-fleet/b1/cmd/");
    let last = got.iter().rfind(|m| m.topic == kept).unwrap().json();
    assert_eq!(last["status"], "rejected", "{last}");
}
