//! The agent's MQTT link against a real mosquitto: status, availability, reconnects, TLS, session takeovers, fail-over, systemd, reloads.

use super::*;

#[test]
fn status_arrives_retained_and_parses() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let _agent = Agent::start(&board);
    let live = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    let first = status_of(&live, "b1");
    // A client connecting later gets both as retained messages.
    let late = Client::connect(
        broker.port,
        &["npu-fleet/b1/status", "npu-fleet/b1/availability"],
    );
    let retained = late.wait_for(T, "retained status", |m| {
        m.topic == "npu-fleet/b1/status" && m.retain
    });
    let avail = late.wait_for(T, "retained availability", |m| {
        m.topic == "npu-fleet/b1/availability"
    });
    assert_eq!(avail.text(), "online");
    assert!(avail.retain);
    for s in [first.json(), retained.json()] {
        assert_eq!(s["schema"], 1);
        assert_eq!(s["board_id"], "b1");
        assert_eq!(s["profile"], "rk3588-rknpu");
        assert_eq!(s["health"], "ok");
        assert!(s["session"].as_u64().unwrap() >= 1);
        assert_eq!(s["metrics"]["cma_total_bytes"], 268_435_456u64);
        assert_eq!(s["metrics"]["mqtt_incoming_dropped"], 0u64);
        assert!(s["metrics"]["mqtt_status_coalesced"].is_u64());
        assert!(s["findings"].as_array().unwrap().len() >= npu_agent::check::CHECK_IDS.len());
        assert!(time::OffsetDateTime::parse(
            s["time"].as_str().unwrap(),
            &time::format_description::well_known::Rfc3339
        )
        .is_ok());
    }
}

#[test]
fn availability_goes_offline_on_sigkill_and_on_clean_stop() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let c = Client::connect(broker.port, &["npu-fleet/b1/availability"]);
    let mut agent = Agent::start(&board);
    c.wait_for(T, "online", |m| m.text() == "online");
    agent.kill();
    // The broker sends the last will after 1.5 keep-alives (5 s).
    c.wait_for(Duration::from_secs(20), "offline (last will)", |m| {
        m.text() == "offline"
    });
    let mut agent = Agent::start(&board);
    c.wait_for(T, "online again", |m| m.text() == "online");
    assert_eq!(
        agent.terminate(),
        Some(0),
        "clean stop exits 0: {}",
        agent.log_text()
    );
    let off = c.wait_for(Duration::from_secs(3), "offline before a clean stop", |m| {
        m.text() == "offline"
    });
    assert!(off.at.elapsed() < Duration::from_secs(3));
    // The clean stop is logged: its cause, and that offline was published.
    let log = agent.log_text();
    let stop = log
        .lines()
        .filter(|l| l.contains("signal=SIGTERM"))
        .collect::<Vec<_>>();
    assert!(
        stop.iter().any(|l| l.contains("stopping")),
        "no stop cause logged:\n{log}"
    );
    assert!(
        stop.iter()
            .any(|l| l.contains("published the retained availability offline")),
        "no offline logged:\n{log}"
    );
}

#[test]
fn br24_broker_restart_restores_subscriptions_and_status() {
    let Some((mut broker, board)) = setup("b1", "") else {
        return;
    };
    let agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    let s1 = status_of(&c, "b1").json()["session"].as_u64().unwrap();
    broker.stop();
    // The agent has seen the broker go before it comes back empty.
    wait_log(&agent, &["MQTT connection lost"]);
    broker.restart();
    let restarted = Instant::now();
    // The agent cannot know the broker lost everything: it must re-publish and re-subscribe.
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    c.wait_for(T, "online after restart", |m| {
        m.topic == "npu-fleet/b1/availability" && m.text() == "online"
    });
    let online_ms = restarted.elapsed().as_millis();
    let s2 = status_of(&c, "b1").json();
    assert!(
        s2["session"].as_u64().unwrap() > s1,
        "session counter increments on reconnect: {s1} -> {}",
        s2["session"]
    );
    eprintln!("bench: broker restart -> online + status in {online_ms} ms");
    // A command sent after the restart executes (the subscription was restored).
    let topic = "npu-fleet/b1/cmd/rescan/after-restart";
    c.publish(
        topic,
        &init_payload(
            "b1",
            "rescan",
            "after-restart",
            json!({}),
            now_s(),
            60,
            None,
        ),
        true,
    );
    lifecycle(&c, topic, "successful");
}

#[test]
fn broker_absent_at_start_then_status_arrives() {
    if !require_tool("mosquitto") {
        return;
    }
    let port = free_port();
    let board = Board::from_fixture(CASE, "b1", "");
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&format!("mqtt://127.0.0.1:{port}"), "b1", ""),
    );
    let mut agent = Agent::start(&board);
    // It has tried and failed to connect (and must survive that).
    wait_log(&agent, &["cannot connect to the MQTT broker"]);
    assert!(
        agent.is_running(),
        "the agent must keep running without a broker: {}",
        agent.log_text()
    );
    let broker = Broker::start_with(port, "");
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    let s = status_of(&c, "b1");
    assert_eq!(s.json()["board_id"], "b1");
}

#[test]
fn mutual_tls_with_generated_certificates() {
    if !require_tool("mosquitto") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (ca, scert, skey, ccert, ckey) = pki(dir.path());
    let tls_port = free_port();
    let plain_port = free_port();
    // One broker: a TLS listener that requires a client certificate, and a plain one to observe.
    let broker = Broker::start_with(
        plain_port,
        &format!("listener {tls_port} 127.0.0.1\ncafile {ca}\ncertfile {scert}\nkeyfile {skey}\nrequire_certificate true\n"),
    );
    let board = Board::from_fixture(CASE, "b1", "");
    let tls_url = format!("mqtts://localhost:{tls_port}");
    // The TLS material in the board tree: the agent reads it under --root.
    for (host, name) in [
        (&ca, "ca.crt"),
        (&ccert, "client.crt"),
        (&ckey, "client.key"),
    ] {
        board.write(
            &format!("/etc/npu-agent/tls/{name}"),
            &std::fs::read_to_string(host).unwrap(),
        );
    }
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&tls_url, "b1", "").replace("keep_alive_s = 5\n", "keep_alive_s = 5\nca_file = \"/etc/npu-agent/tls/ca.crt\"\ncert_file = \"/etc/npu-agent/tls/client.crt\"\nkey_file = \"/etc/npu-agent/tls/client.key\"\n"),
    );
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    assert_eq!(status_of(&c, "b1").json()["board_id"], "b1");
    // The operator over mTLS too (TLS material from the NPU_AGENT_MQTT_* variables).
    let env = tls_client_env(&ca, &ccert, &ckey);
    let (code, out, err) = run_cli(
        &[
            "fleet", "send", "rescan", "--board", "b1", "--broker", &tls_url, "--wait", "10",
        ],
        &env,
    );
    assert_eq!(code, 0, "{out}{err}");
    // Without a client certificate the broker refuses the agent.
    let board2 = Board::from_fixture(CASE, "b2", "");
    board2.write(
        "/etc/npu-agent/ca.crt",
        &std::fs::read_to_string(&ca).unwrap(),
    );
    board2.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&tls_url, "b2", "").replace(
            "keep_alive_s = 5\n",
            "keep_alive_s = 5\nca_file = \"/etc/npu-agent/ca.crt\"\n",
        ),
    );
    let agent2 = Agent::start(&board2);
    // The refusal has happened (an agent that got in would have published on connect).
    wait_log(
        &agent2,
        &["cannot connect to the MQTT broker", "MQTT connection lost"],
    );
    assert!(
        c.drain()
            .iter()
            .all(|m| !m.topic.starts_with("npu-fleet/b2/")),
        "an agent without a client certificate got in"
    );
    drop(agent2);
}

#[test]
fn systemd_notify_ready_status_and_watchdog() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut agent = Agent::start_env(
        &board,
        &[
            ("NOTIFY_SOCKET", sock_path.to_str().unwrap()),
            ("WATCHDOG_USEC", "1000000"),
        ],
    );
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    status_of(&c, "b1");
    let t0 = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while t0.elapsed() < Duration::from_secs(5) {
        if let Ok(n) = sock.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        let watchdogs = got.iter().filter(|m| m.contains("WATCHDOG=1")).count();
        if got.iter().any(|m| m.contains("READY=1"))
            && got.iter().any(|m| m.starts_with("STATUS=health"))
            && watchdogs >= 3
        {
            break;
        }
    }
    assert!(got.iter().any(|m| m.contains("READY=1")), "{got:?}");
    let status = got.iter().find(|m| m.starts_with("STATUS=")).unwrap();
    assert!(status.contains("health Ok"), "{status}");
    assert!(
        got.iter().filter(|m| m.contains("WATCHDOG=1")).count() >= 3,
        "WATCHDOG=1 at half the 1 s interval: {got:?}"
    );
    assert_eq!(agent.terminate(), Some(0));
}

#[test]
fn run_refuses_a_bad_config_and_prints_the_effective_one() {
    let board = Board::from_fixture(CASE, "b1", "[mqtt]\nurl = \"mqtt://127.0.0.1:1\"\npassword_file = \"/etc/npu-agent/secret\"\nusername = \"u\"\n");
    board.write(
        "/etc/npu-agent/agent.d/50-site.toml",
        "[report]\ninterval_s = 7\n",
    );
    let (code, out, err) = run_cli(
        &[
            "run",
            "--root",
            board.root().to_str().unwrap(),
            "--print-config",
        ],
        &[("NPU_AGENT_MQTT_TOPIC_ROOT", "lab")],
    );
    assert_eq!(code, 0, "{err}");
    let cfg: toml::Table = toml::from_str(out.split_once('\n').unwrap().1).unwrap();
    assert_eq!(cfg["report"]["interval_s"].as_integer(), Some(7));
    assert_eq!(cfg["mqtt"]["topic_root"].as_str(), Some("lab"));
    assert_eq!(
        cfg["mqtt"]["password_file"].as_str(),
        Some("/etc/npu-agent/secret")
    );
    assert!(
        out.lines()
            .next()
            .unwrap()
            .contains("/etc/npu-agent/agent.d/50-site.toml"),
        "{out}"
    );
    // An unknown key is fatal and named.
    board.write(
        "/etc/npu-agent/agent.d/60-typo.toml",
        "[mqtt]\nkeepalive_s = 5\n",
    );
    let (code, _, err) = run_cli(&["run", "--root", board.root().to_str().unwrap()], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("/etc/npu-agent/agent.d/60-typo.toml: line 2: unknown key `keepalive_s`"),
        "{err}"
    );
    // No broker URL: refuses to start.
    let empty = Board::from_fixture(CASE, "b1", "");
    let (code, _, err) = run_cli(&["run", "--root", empty.root().to_str().unwrap()], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("mqtt.url is not set"), "{err}");
}

#[test]
fn the_mqtt_311_fallback_link_publishes_and_receives() {
    // The link the agent falls back to when a broker refuses MQTT 5, against a real broker.
    if !require_tool("mosquitto") {
        return;
    }
    use npu_agent::mqtt::link::{Link, LinkEvent, LinkOptions, MqttClient, Protocol};
    let broker = Broker::start();
    let observer = Client::connect(broker.port, &["v311/#"]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let opts = LinkOptions {
            url: npu_agent::mqtt::parse_url(&broker.url()).unwrap(),
            tls: None,
            client_id: "v311-test".into(),
            keep_alive: Duration::from_secs(5),
            credentials: None,
            last_will: Some(("v311/availability".into(), b"offline".to_vec())),
            max_incoming_packet_bytes: 16 * 1024,
            connect_timeout_s: 5,
            lossless: true,
            ack_when_handled: false,
            protocol: Protocol::V311,
            auto_protocol: false,
            reconnect_max: Duration::from_secs(2),
            fallbacks: Vec::new(),
        };
        let mut link = Link::start(&opts);
        assert!(matches!(link.client, MqttClient::V311(_)));
        assert!(matches!(
            next_event(&mut link).await,
            LinkEvent::Connected { .. }
        ));
        link.client
            .try_subscribe("v311/cmd/#", rumqttc::v5::mqttbytes::QoS::AtLeastOnce)
            .unwrap();
        link.client
            .try_publish(
                "v311/status",
                rumqttc::v5::mqttbytes::QoS::AtLeastOnce,
                true,
                b"hello".to_vec(),
            )
            .unwrap();
        // Let the link's task send SUBSCRIBE and PUBLISH (a blocking sleep here would stall it on
        // this one-thread runtime): the observer seeing the retained status proves both reached
        // the broker, in that order, so the subscription is in place.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut status = None;
        while status.is_none() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            status = observer
                .drain()
                .into_iter()
                .find(|m| m.topic == "v311/status");
        }
        let status = status.expect("the 3.1.1 link's publish never reached the broker");
        assert_eq!(status.text(), "hello");
        // A 200 KB message on a subscribed topic is within the 3.1.1 limit: delivered, no wedge.
        observer.publish("v311/cmd/big", &vec![b'x'; 200_000], false);
        observer.publish("v311/cmd/small", b"after", false);
        let mut got = Vec::new();
        while got.len() < 2 {
            if let LinkEvent::Message { topic, payload, .. } = next_event(&mut link).await {
                got.push((topic, payload.len()));
            }
        }
        assert_eq!(
            got,
            vec![
                ("v311/cmd/big".to_string(), 200_000),
                ("v311/cmd/small".to_string(), 5)
            ]
        );
        link.abort();
    });
    // Aborted without DISCONNECT: the broker sends the 3.1.1 last will.
    let w = observer.wait_for(Duration::from_secs(20), "last will", |m| {
        m.topic == "v311/availability"
    });
    assert_eq!(w.text(), "offline");
}

/// Two agents with one `board_id` on one mosquitto: each takes the session over from the other.
/// The drops that follow a full status are that takeover, not a status too large for the
/// broker: once the takeover is recognised, neither agent keeps the compact status.
#[test]
fn a_session_takeover_is_not_read_as_a_status_too_large() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let twin = Board::from_fixture(CASE, "b1", &agent_config(&broker.url(), "b1", ""));
    let a = Agent::start(&board);
    let b = Agent::start(&twin);
    let compact = "publishing the compact status from now on";
    let full_again = "publishing the full status again";
    // mosquitto 2.0 ends the session without reason code 0x8E: only the pattern is seen.
    let takeover = "another client may use this board id";
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let logs = [a.log_text(), b.log_text()];
        if logs.iter().all(|l| l.contains(takeover)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no takeover recognised by both agents:\n{}\n---\n{}",
            logs[0],
            logs[1]
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The compact form may have been chosen before the takeover was recognised, but then it
    // is undone: the last word on the status form is never "compact".
    let undone = |log: &str| {
        let last_compact = log.rfind(compact);
        last_compact.is_none() || log.rfind(full_again) > last_compact
    };
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5)
        && ![a.log_text(), b.log_text()].iter().all(|l| undone(l))
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    for log in [a.log_text(), b.log_text()] {
        assert!(
            undone(&log),
            "the compact status stays on after a takeover:\n{log}"
        );
    }
}

/// Issue 28 item 3: one broker fault right after a full status (a node crash, a restart) is
/// not read as a packet limit: the next connection publishes the full status again.
#[test]
fn one_drop_after_a_full_status_keeps_the_full_status() {
    use crate::support::proxy::{contains, packet_type, Dir, Proxy};
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let rule = cut_first(1, |d, p| {
        d == Dir::Up && packet_type(p) == 3 && contains(p, b"npu-fleet/b1/status")
    });
    let proxy = Proxy::start(broker.port, rule);
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&proxy.url(), "b1", ""),
    );
    let agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    let s = c.wait_for(T, "the status of the second connection", |m| {
        !m.payload.is_empty() && m.json()["session"] == 2
    });
    assert_ne!(s.json()["form"], "compact", "{}", agent.log_text());
    assert!(
        s.json()["findings"].is_array(),
        "the full form has the findings"
    );
    let log = agent.log_text();
    assert!(!log.contains("compact status from now on"), "{log}");
}

/// Issue 28 item 3: connections closed right after CONNACK without a reason code (an overloaded
/// broker, a cluster node going away) are not called "another client uses this board id": the
/// agent backs off and says it may be either.
#[test]
fn kicks_without_a_reason_are_not_named_a_takeover() {
    use crate::support::proxy::{packet_type, Dir, Proxy};
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let rule = cut_first(3, |d, p| d == Dir::Up && packet_type(p) == 8);
    let proxy = Proxy::start(broker.port, rule);
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&proxy.url(), "b1", ""),
    );
    let agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    let s = c.wait_for(Duration::from_secs(30), "a status after the kicks", |m| {
        !m.payload.is_empty() && m.json()["session"].as_u64() >= Some(4)
    });
    let log = agent.log_text();
    assert!(log.contains("or the broker is overloaded"), "{log}");
    assert!(!log.contains("another client uses this board id"), "{log}");
    let notices = s.json()["notices"].to_string();
    assert!(notices.contains("or an overloaded broker"), "{notices}");
}

/// Issue 28 item 3, the other side: when the broker does say it (an MQTT 5 DISCONNECT with
/// reason code 0x8E, here put in place of the SUBACK by a proxy), one is enough, and the agent
/// names it.
#[test]
fn a_takeover_the_broker_names_is_reported_as_one_at_once() {
    use crate::support::proxy::{packet_type, Dir, Fault};
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let mut left = 1;
    let rule = move |d: Dir, p: &[u8]| {
        if left > 0 && d == Dir::Down && packet_type(p) == 9 {
            left -= 1;
            return Fault::Replace(vec![0xe0, 0x02, 0x8e, 0x00]);
        }
        Fault::Pass
    };
    let (_proxy, agent) = behind_proxy(&broker, &board, rule);
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    let s = c.wait_for(T, "a status after the takeover", |m| {
        !m.payload.is_empty() && m.json()["session"].as_u64() >= Some(2)
    });
    let log = agent.log_text();
    assert!(log.contains("another client uses this board id:"), "{log}");
    assert!(!log.contains("or the broker is overloaded"), "{log}");
    let notices = s.json()["notices"].to_string();
    assert!(
        notices.contains("another client uses this board id (b1)"),
        "{notices}"
    );
}

/// Issue 28 item 2: a broker that refuses the command subscription (an ACL, a cluster out of
/// consumers; here a proxy rewrites the first two SUBACKs to 0x87) leaves a board that
/// publishes but hears nothing. The agent reads its SUBACK, says so in the status
/// (`commands: not subscribed`, a notice) and the log, subscribes again with back-off, and
/// hears commands once the broker grants it; `fleet watch` shows the board `deaf` meanwhile.
#[test]
fn a_refused_command_subscription_is_retried_and_shown() {
    use crate::support::proxy::{packet_type, refuse_suback, Dir, Fault};
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let mut left = 2;
    let rule = move |d: Dir, p: &[u8]| {
        if left > 0 && d == Dir::Down && packet_type(p) == 9 {
            left -= 1;
            return Fault::Replace(refuse_suback(p, true, 0x87));
        }
        Fault::Pass
    };
    let (_proxy, agent) = behind_proxy(&broker, &board, rule);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    let deaf = c.wait_for(T, "a status saying the commands are not subscribed", |m| {
        m.topic == "npu-fleet/b1/status" && m.json()["commands"] == "not subscribed"
    });
    let notices = deaf.json()["notices"].to_string();
    assert!(
        notices.contains("not authorized, reason code 0x87"),
        "{notices}"
    );
    let watch = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(["fleet", "watch", "--once", "--broker", &broker.url()])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&watch.stdout);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("b1 ") && l.contains(" deaf ")),
        "{table}"
    );
    c.wait_for(T, "a status saying the commands are subscribed", |m| {
        m.topic == "npu-fleet/b1/status" && m.json()["commands"] == "subscribed"
    });
    let topic = "npu-fleet/b1/cmd/rescan/heard-1";
    let p = init_payload("b1", "rescan", "heard-1", json!({}), now_s(), 60, None);
    c.publish(topic, &p, true);
    lifecycle(&c, topic, "successful");
    let log = agent.log_text();
    assert!(log.contains("refused the command subscription"), "{log}");
    // Two refusals, then the third SUBSCRIBE was granted (no third refusal).
    assert_eq!(
        log.matches("the broker refused the command subscription")
            .count(),
        2,
        "{log}"
    );
}

/// Issue 26 item 15: SIGHUP (`systemctl reload`) reads the config and the trusted keys again
/// without a restart: a key taken out of `trusted_keys` verifies nothing afterwards, the agent
/// keeps its process and its connection, and a config that cannot be read keeps the running one.
#[test]
fn sighup_reloads_the_trusted_keys_without_a_restart() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let config = |extra: &str| agent_config(&broker.url(), "b1", extra);
    board.write("/etc/npu-agent/agent.toml", &config(&trust(&board, 1)));
    let mut agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let pid = agent.pid();
    let rescan = |id: &str| {
        let p = init_payload("b1", "rescan", id, json!({}), now_s(), 60, Some(&key(1)));
        c.publish(&format!("npu-fleet/b1/cmd/rescan/{id}"), &p, true);
    };
    rescan("k-before");
    lifecycle(&c, "npu-fleet/b1/cmd/rescan/k-before", "successful");
    let hup = || {
        let ok = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    };
    // A broken config: the running one stays (key 1 still trusted).
    board.write("/etc/npu-agent/agent.toml", "board_id = [\n");
    hup();
    wait_log(&agent, &["SIGHUP: the config was not reloaded"]);
    rescan("k-broken");
    lifecycle(&c, "npu-fleet/b1/cmd/rescan/k-broken", "successful");
    // Key 1 taken out, a key 2 trusted instead, and a broker setting that waits for a restart.
    board.write(
        "/etc/npu-agent/agent.toml",
        &config(&trust(&board, 2)).replace("keep_alive_s = 5", "keep_alive_s = 6"),
    );
    hup();
    wait_log(&agent, &["SIGHUP: config reloaded"]);
    assert!(
        agent.log_text().contains("restart_needed: mqtt"),
        "{}",
        agent.log_text()
    );
    rescan("k-after");
    let r = lifecycle(&c, "npu-fleet/b1/cmd/rescan/k-after", "rejected");
    assert!(
        r["reason"].as_str().unwrap_or("").contains("bad signature"),
        "{r}"
    );
    assert!(agent.is_running() && agent.pid() == pid);
}

/// Issue 27, back-off sized for a fleet: a broker that refuses the CONNECT (not authorised)
/// is not asked again for the whole cap (`reconnect_max_s`, default 120 s), where the old
/// policy asked again within 0.1 s and then every 1.6 s.
#[test]
fn a_refused_connect_waits_the_whole_cap() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start_with(free_port(), "allow_anonymous false\n");
    let board = Board::from_fixture(CASE, "b1", "");
    // The default cap: the test helper's short one removed.
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&broker.url(), "b1", "").replace("reconnect_max_s = 2\n", ""),
    );
    let agent = Agent::start(&board);
    let t0 = Instant::now();
    while !agent.log_text().contains("retry_in_ms") {
        assert!(
            t0.elapsed() < T,
            "no connection failure logged: {}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = agent.log_text();
    assert!(log.contains("NotAuthorized (reason code 0x87)"), "{log}");
    assert!(log.contains("retry_in_ms=120000"), "{log}");
}

/// Issue 27, several brokers: `[mqtt] url` lists the nodes in order; the agent connects to the
/// first that answers, fails over to the next when its broker goes away, and says in its status
/// which broker it is on; the fleet tools take the same list.
#[test]
fn the_agent_fails_over_to_the_next_broker_and_says_which() {
    if !require_tool("mosquitto") {
        return;
    }
    let mut a = Broker::start();
    let b = Broker::start();
    let dead = format!("mqtt://127.0.0.1:{}", free_port());
    let list = format!("{dead},{},{}", a.url(), b.url());
    let board = Board::from_fixture(CASE, "b1", "");
    board.write("/etc/npu-agent/agent.toml", &agent_config(&list, "b1", ""));
    let _agent = Agent::start(&board);
    // The first node refuses the connection: the second one has the board.
    let on_a = Client::connect(a.port, &["npu-fleet/b1/status"]);
    let s = on_a.wait_for(T, "a status on the second broker", |m| {
        !m.payload.is_empty()
    });
    assert_eq!(s.json()["broker"], a.url().as_str(), "{}", s.text());
    // The tools take the list too, and use the node that answers.
    let (code, out, err) = run_cli(
        &[
            "fleet",
            "watch",
            "--once",
            "--broker",
            &format!("{dead},{}", a.url()),
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.lines().any(|l| l.starts_with("b1 ")), "{out}");
    // Its node goes away: the board moves on to the third.
    let on_b = Client::connect(b.port, &["npu-fleet/b1/status"]);
    a.stop();
    let s = on_b.wait_for(T, "a status on the third broker", |m| !m.payload.is_empty());
    assert_eq!(s.json()["broker"], b.url().as_str(), "{}", s.text());
}
