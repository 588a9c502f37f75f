//! The fleet link on a clustered broker: three NATS nodes (Debian 12's `nats-server` 2.9.10,
//! JetStream, MQTT 3.1.1 on each node, routes between them) started here on free loopback
//! ports. Boards and operator tools connect to different nodes, as a fleet behind a load
//! balancer does. Issue 28: a command through another node is answered (item 4: `fleet send`
//! waits for the SUBACK a JetStream consumer takes seconds to give), an answer cut off by a
//! dropped link is sent again (item 1), a board whose command subscription the cluster refuses
//! is shown deaf (item 2), and `command_qos = 0` still receives its commands (item 6).

use crate::support::brokers::{have_nats, NatsCluster};
use crate::support::mqtt::{agent_config, Agent, Board, Client};
use crate::support::proxy::{contains, packet_type, Dir, Fault, Proxy};
use std::process::Command;
use std::time::{Duration, Instant};

const CASE: &str = "own-rk3588-opi5plus-rknpu-0.9.8-healthy";
const T: Duration = Duration::from_secs(60);

fn run_cli(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A board `id` whose agent connects to `url` over MQTT 3.1.1 (NATS speaks nothing else) with
/// `mqtt_extra` lines in `[mqtt]` (and `files` written in its tree), and a client on node port
/// `watch_port` that has seen its first status.
fn board_on(
    id: &str,
    url: &str,
    mqtt_extra: &str,
    files: &[(&str, &str)],
    watch_port: u16,
) -> (Board, Agent, Client) {
    let config = agent_config(url, id, "").replace(
        "keep_alive_s = 5\n",
        &format!("keep_alive_s = 5\nprotocol = \"3.1.1\"\n{mqtt_extra}"),
    );
    let board = Board::from_fixture(CASE, id, &config);
    for (path, text) in files {
        board.write(path, text);
    }
    let agent = Agent::start(&board);
    let topic = format!("npu-fleet/{id}/status");
    let t0 = Instant::now();
    loop {
        // The test client does not subscribe again after a reconnect: a fresh one each round.
        let watcher = Client::connect(watch_port, &[&topic]);
        let round = Instant::now();
        while round.elapsed() < Duration::from_secs(15) {
            if watcher.drain().iter().any(|m| !m.payload.is_empty()) {
                return (board, agent, watcher);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            t0.elapsed() < T,
            "no status of {id} on another node:\n{}",
            agent.log_text()
        );
    }
}

/// `fleet send rescan --board <id>` through node `url`: exit code, stdout, stderr.
fn rescan(id: &str, url: &str) -> (i32, String, String) {
    run_cli(&[
        "fleet", "send", "rescan", "--board", id, "--broker", url, "--wait", "60",
    ])
}

#[test]
fn a_nats_cluster_carries_commands_answers_and_deaf_boards_across_nodes() {
    if !have_nats() {
        return;
    }
    let cluster = NatsCluster::start();
    let t0 = Instant::now();
    // Items 1 and 4: b1 on node 0 behind a proxy that cuts the link as it publishes its first
    // `successful`; the command comes from node 1.
    let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = cut.clone();
    let rule = move |d: Dir, p: &[u8]| {
        let answer = d == Dir::Up && packet_type(p) == 3 && contains(p, b"\"successful\"");
        if answer && !seen.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Fault::Cut;
        }
        Fault::Pass
    };
    let proxy = Proxy::start(
        cluster.mqtt_ports[0],
        std::sync::Arc::new(std::sync::Mutex::new(rule)),
    );
    let (_b1, a1, _w1) = board_on("b1", &proxy.url(), "", &[], cluster.mqtt_ports[1]);
    let (code, out, err) = rescan("b1", &cluster.url(1));
    assert_eq!(code, 0, "{out}{err}\n{}", a1.log_text());
    assert!(out.contains(" successful"), "{out}");
    assert!(
        cut.load(std::sync::atomic::Ordering::SeqCst),
        "the proxy never cut"
    );
    assert!(
        a1.log_text().contains("its final state is published again"),
        "{}",
        a1.log_text()
    );
    eprintln!(
        "nats: b1 answered through another node after a cut: {:?}",
        t0.elapsed()
    );
    // Item 6: command_qos = 0 on node 1, the command from node 2.
    let (_b2, a2, _w2) = board_on(
        "b2",
        &cluster.url(1),
        "command_qos = 0\n",
        &[],
        cluster.mqtt_ports[2],
    );
    let (code, out, err) = rescan("b2", &cluster.url(2));
    assert_eq!(code, 0, "{out}{err}\n{}", a2.log_text());
    assert!(out.contains(" successful"), "{out}");
    // Item 2: board `deaf` may not subscribe to its commands: the status (read on node 0) and
    // fleet watch say so.
    let creds = "username = \"deaf\"\npassword_file = \"/etc/npu-agent/mqtt-password\"\n";
    let (_deaf, ad, _wd) = board_on(
        "deaf",
        &cluster.url(2),
        creds,
        &[("/etc/npu-agent/mqtt-password", "deaf\n")],
        cluster.mqtt_ports[0],
    );
    let w = Client::connect(cluster.mqtt_ports[0], &["npu-fleet/deaf/status"]);
    let s = w.wait_for(T, "deaf's status saying it hears no commands", |m| {
        m.json()["commands"] == "not subscribed"
    });
    assert!(
        s.json()["notices"]
            .to_string()
            .contains("refused the command subscription"),
        "{}",
        s.text()
    );
    let (code, out, err) = run_cli(&["fleet", "watch", "--once", "--broker", &cluster.url(0)]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("deaf ") && l.contains(" deaf ")),
        "{code} {out}{err}\n{}",
        ad.log_text()
    );
    eprintln!("nats: all parts in {:?}", t0.elapsed());
}
