//! Test harness: a real mosquitto on a free loopback port, the real `npu-agent run` process on a
//! temporary board tree, and a small MQTT client. Every wait has a timeout; every process is
//! killed when its guard drops.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Fails in CI when a tool is missing; elsewhere returns false so the test can say why it skips.
pub fn require_tool(name: &str) -> bool {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
        || Path::new(&format!("/usr/sbin/{name}")).exists();
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "{name} is required in CI (apt-get install {name})"
        );
        // Straight to stderr, past libtest's capture of `eprintln!`, so a person sees the skip.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: {name} not installed (set CI=true to make this a failure)"
        );
    }
    found
}

fn mosquitto_bin() -> String {
    if Path::new("/usr/sbin/mosquitto").exists() {
        "/usr/sbin/mosquitto".into()
    } else {
        "mosquitto".into()
    }
}

/// A free TCP port on 127.0.0.1 (bound and released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A mosquitto broker process.
pub struct Broker {
    pub port: u16,
    child: Option<Child>,
    conf: PathBuf,
    _dir: tempfile::TempDir,
}

impl Broker {
    /// Starts mosquitto on a free port (plain MQTT, anonymous, loopback only).
    pub fn start() -> Broker {
        Broker::start_with(free_port(), "")
    }

    /// Starts mosquitto on `port` with extra listener config lines.
    pub fn start_with(port: u16, extra: &str) -> Broker {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("mosquitto.conf");
        std::fs::write(
            &conf,
            format!("listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nset_tcp_nodelay true\nlog_dest stderr\nlog_type error\n{extra}\n"),
        )
        .unwrap();
        let mut b = Broker {
            port,
            child: None,
            conf,
            _dir: dir,
        };
        b.restart();
        b
    }

    /// (Re)starts the process and waits until it accepts connections.
    pub fn restart(&mut self) {
        let child = Command::new(mosquitto_bin())
            .arg("-c")
            .arg(&self.conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mosquitto");
        self.child = Some(child);
        let t0 = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "mosquitto did not listen on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the broker (the agent sees its connection drop).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    /// The mosquitto process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A board tree copied from a fixture, with an agent config.
pub struct Board {
    pub dir: tempfile::TempDir,
    pub id: String,
}

impl Board {
    /// Copies `tests/fixtures/boards/<case>/root` and writes `/etc/npu-agent/agent.toml`.
    pub fn from_fixture(case: &str, id: &str, config: &str) -> Board {
        let dir = tempfile::tempdir().unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/boards")
            .join(case)
            .join("root");
        let status = Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", src.display()))
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success());
        let b = Board {
            dir,
            id: id.to_string(),
        };
        b.write("/etc/npu-agent/agent.toml", config);
        b
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn write(&self, board_path: &str, text: &str) {
        let p = self.dir.path().join(board_path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    pub fn read(&self, board_path: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.path().join(board_path.trim_start_matches('/'))).ok()
    }
}

/// The standard agent config for tests.
pub fn agent_config(url: &str, board: &str, extra: &str) -> String {
    format!(
        "board_id = \"{board}\"\nstate_dir = \"/var/lib/npu-agent\"\n\n[mqtt]\nurl = \"{url}\"\nkeep_alive_s = 5\nreconnect_max_s = 2\n\n[report]\ninterval_s = 2\n\n{extra}\n"
    )
}

/// A mosquitto broker and a board copied from the fixture `case`, with id `id` and the standard
/// config ([`agent_config`]) pointing at that broker plus `extra`. `None` when mosquitto is
/// missing outside CI (the test then skips; under `CI=true` it fails).
pub fn broker_and_board(case: &str, id: &str, extra: &str) -> Option<(Broker, Board)> {
    if !require_tool("mosquitto") {
        return None;
    }
    let broker = Broker::start();
    let board = Board::from_fixture(case, id, "");
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&broker.url(), id, extra),
    );
    Some((broker, board))
}

/// The `NPU_AGENT_MQTT_*` variables that give an operator tool (`fleet send`, `fleet watch`) a
/// CA, a client certificate and its key (host paths).
pub fn tls_client_env<'a>(
    ca: &'a str,
    cert: &'a str,
    key: &'a str,
) -> [(&'static str, &'a str); 3] {
    [
        ("NPU_AGENT_MQTT_CA_FILE", ca),
        ("NPU_AGENT_MQTT_CERT_FILE", cert),
        ("NPU_AGENT_MQTT_KEY_FILE", key),
    ]
}

/// A running `npu-agent run`.
pub struct Agent {
    child: Option<Child>,
    pub log: PathBuf,
}

impl Agent {
    pub fn start(board: &Board) -> Agent {
        Agent::start_env(board, &[])
    }

    pub fn start_env(board: &Board, env: &[(&str, &str)]) -> Agent {
        let log = board.root().join("agent.log");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
            .args(["run", "--root"])
            .arg(board.root())
            .envs(env.iter().copied())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .expect("start npu-agent run");
        Agent {
            child: Some(child),
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// SIGKILL: no clean stop, the broker must send the last will.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait for a clean exit; returns the exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        let mut c = self.child.take()?;
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
        let t0 = Instant::now();
        loop {
            if let Ok(Some(s)) = c.try_wait() {
                return s.code();
            }
            if t0.elapsed() > Duration::from_secs(10) {
                let _ = c.kill();
                let _ = c.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A received message.
#[derive(Debug, Clone)]
pub struct Msg {
    pub topic: String,
    pub payload: Vec<u8>,
    pub retain: bool,
    pub at: Instant,
}

impl Msg {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.payload).into_owned()
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.payload).unwrap_or(serde_json::Value::Null)
    }
}

/// A test-side MQTT 3.1.1 client (rumqttc's blocking client) that records every message.
pub struct Client {
    client: rumqttc::Client,
    inbox: Arc<Mutex<VecDeque<Msg>>>,
    _thread: std::thread::JoinHandle<()>,
}

impl Client {
    pub fn connect(port: u16, subscriptions: &[&str]) -> Client {
        Client::connect_qos(port, subscriptions, rumqttc::QoS::AtLeastOnce)
    }

    /// [`Client::connect`] with subscriptions at `qos` (QoS 0 costs a NATS cluster no stored
    /// consumer, which a node's death can leave unanswered for a while).
    pub fn connect_qos(port: u16, subscriptions: &[&str], qos: rumqttc::QoS) -> Client {
        let mut id = [0u8; 4];
        getrandom::fill(&mut id).unwrap();
        let mut o = rumqttc::MqttOptions::new(
            format!("test-{:08x}", u32::from_le_bytes(id)),
            "127.0.0.1",
            port,
        );
        o.set_keep_alive(Duration::from_secs(5));
        o.set_max_packet_size(1 << 20, 1 << 20);
        let mut net = rumqttc::NetworkOptions::new();
        net.set_tcp_nodelay(true);
        let (client, mut conn) = rumqttc::Client::new(o, 1000);
        conn.eventloop.set_network_options(net);
        for s in subscriptions {
            client.subscribe(*s, qos).unwrap();
        }
        let inbox = Arc::new(Mutex::new(VecDeque::new()));
        let ib = inbox.clone();
        let thread = std::thread::spawn(move || {
            for ev in conn.iter() {
                match ev {
                    Ok(rumqttc::Event::Incoming(rumqttc::Packet::Publish(p))) => {
                        ib.lock().unwrap().push_back(Msg {
                            topic: p.topic.clone(),
                            payload: p.payload.to_vec(),
                            retain: p.retain,
                            at: Instant::now(),
                        })
                    }
                    Ok(_) => {}
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        });
        Client {
            client,
            inbox,
            _thread: thread,
        }
    }

    pub fn publish(&self, topic: &str, payload: &[u8], retain: bool) {
        self.client
            .publish(topic, rumqttc::QoS::AtLeastOnce, retain, payload.to_vec())
            .unwrap();
    }

    /// Waits for a message matching `pred` (consumed messages before it are dropped).
    pub fn wait_for(&self, timeout: Duration, what: &str, pred: impl Fn(&Msg) -> bool) -> Msg {
        let t0 = Instant::now();
        loop {
            {
                let mut q = self.inbox.lock().unwrap();
                while let Some(m) = q.pop_front() {
                    if pred(&m) {
                        return m;
                    }
                }
            }
            assert!(
                t0.elapsed() < timeout,
                "timed out after {timeout:?} waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// All messages received so far (kept).
    pub fn drain(&self) -> Vec<Msg> {
        self.inbox.lock().unwrap().drain(..).collect()
    }
}

/// An init message for a command, optionally signed.
pub fn init_payload(
    board: &str,
    action: &str,
    cmd_id: &str,
    args: serde_json::Value,
    issued_at: i64,
    lifetime_s: i64,
    key: Option<&npu_agent::mqtt::command::SigningKey>,
) -> Vec<u8> {
    let mut m = npu_agent::mqtt::command::InitMessage {
        status: npu_agent::mqtt::command::CmdStatus::Init,
        board: board.into(),
        args: args.as_object().cloned().unwrap_or_default(),
        issued_at,
        expires_at: issued_at + lifetime_s,
        signature: None,
    };
    if let Some(k) = key {
        npu_agent::mqtt::command::sign(k, "npu-fleet", action, cmd_id, &mut m);
    }
    serde_json::to_vec(&m).unwrap()
}

pub fn now_s() -> i64 {
    npu_agent::action::now_unix_s()
}
