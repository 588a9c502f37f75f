//! MQTT 3.1.1-only brokers started by the tests, on free loopback ports, stopped when the guard
//! drops: RabbitMQ (Debian 12's `rabbitmq-server` 3.10 with the `rabbitmq_mqtt` plugin) and amqtt
//! (PyPI). Neither is a system service: RabbitMQ runs from a temporary directory with its own
//! `epmd` (started here, loopback only, on a free port), its own Erlang cookie (HOME is the
//! temporary directory) and a node name no other test uses.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

// Included beside `support/mqtt.rs` (as `support`), whose free loopback port it uses.
use super::mqtt::free_port;

fn wait_port(port: u16, within: Duration, child: &mut Child, log: &Path) {
    let t0 = Instant::now();
    while t0.elapsed() < within {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!(
                "broker exited ({st}) before listening on {port}:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!(
        "broker not listening on {port} after {within:?}:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

fn stop(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        // SIGTERM first (a clean stop), then SIGKILL.
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if matches!(c.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// The RabbitMQ server script (Debian 12 `rabbitmq-server`).
pub const RABBITMQ_SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

/// True when RabbitMQ can be started; in CI its absence is a failure.
pub fn have_rabbitmq() -> bool {
    let found = Path::new(RABBITMQ_SERVER).exists() && Path::new("/usr/bin/epmd").exists();
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "rabbitmq-server is required in CI (apt-get install rabbitmq-server)"
        );
        eprintln!("SKIP: rabbitmq-server not installed (set CI=true to make this a failure)");
    }
    found
}

/// A RabbitMQ node with the MQTT plugin, listening on loopback only.
pub struct RabbitMq {
    /// MQTT port.
    pub port: u16,
    server: Option<Child>,
    epmd: Option<Child>,
    dir: tempfile::TempDir,
}

impl RabbitMq {
    /// Starts epmd and the node; waits (up to 120 s, the machine may be busy) for the MQTT port.
    pub fn start() -> RabbitMq {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (port, amqp, dist, epmd_port) = (free_port(), free_port(), free_port(), free_port());
        std::fs::write(
            d.join("rabbitmq.conf"),
            format!(
                "listeners.tcp.1 = 127.0.0.1:{amqp}\nmqtt.listeners.tcp.1 = 127.0.0.1:{port}\n\
                 mqtt.allow_anonymous = true\nlog.console = true\nlog.console.level = warning\n\
                 log.file = false\n"
            ),
        )
        .unwrap();
        std::fs::write(d.join("enabled_plugins"), "[rabbitmq_mqtt].\n").unwrap();
        let log = d.join("rabbitmq.log");
        let out = std::fs::File::create(&log).unwrap();
        let mut epmd = Command::new("/usr/bin/epmd")
            .args(["-port", &epmd_port.to_string(), "-address", "127.0.0.1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start epmd");
        let elog = d.join("epmd.log");
        std::fs::write(&elog, "").unwrap();
        wait_port(epmd_port, Duration::from_secs(10), &mut epmd, &elog);
        let mut nonce = [0u8; 4];
        getrandom::fill(&mut nonce).unwrap();
        let server = Command::new(RABBITMQ_SERVER)
            .env("HOME", d)
            .env("ERL_EPMD_PORT", epmd_port.to_string())
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .env(
                "RABBITMQ_NODENAME",
                format!("npu-test-{:08x}@localhost", u32::from_le_bytes(nonce)),
            )
            .env("RABBITMQ_DIST_PORT", dist.to_string())
            .env("RABBITMQ_CONFIG_FILE", d.join("rabbitmq.conf"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", d.join("enabled_plugins"))
            .env("RABBITMQ_MNESIA_BASE", d.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", d.join("log"))
            .env("RABBITMQ_PID_FILE", d.join("rabbitmq.pid"))
            // The script then execs the Erlang VM: the child is the broker itself.
            .env("RUNNING_UNDER_SYSTEMD", "true")
            .env(
                "RABBITMQ_SERVER_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}",
            )
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start rabbitmq-server");
        let mut r = RabbitMq {
            port,
            server: Some(server),
            epmd: Some(epmd),
            dir,
        };
        let log2 = log.clone();
        wait_port(
            port,
            Duration::from_secs(120),
            r.server.as_mut().unwrap(),
            &log2,
        );
        r
    }

    /// `mqtt://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    /// The broker's console log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("rabbitmq.log")).unwrap_or_default()
    }
}

impl Drop for RabbitMq {
    fn drop(&mut self) {
        stop(&mut self.server);
        stop(&mut self.epmd);
    }
}

/// The amqtt broker program: `NPU_AGENT_AMQTT`, else the venv `.ci/run` makes under
/// `~/.cache/npu-agent-ci/amqtt-venv`, else `amqtt` on PATH.
pub fn amqtt_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("NPU_AGENT_AMQTT") {
        return Some(PathBuf::from(p));
    }
    if let Some(home) = std::env::var_os("HOME") {
        let p = Path::new(&home).join(".cache/npu-agent-ci/amqtt-venv/bin/amqtt");
        if p.exists() {
            return Some(p);
        }
    }
    let on_path = Command::new("sh")
        .args(["-c", "command -v amqtt"])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    Some(PathBuf::from(
        String::from_utf8_lossy(&on_path.stdout).trim().to_string(),
    ))
}

/// True when amqtt can be started; in CI its absence is a failure.
pub fn have_amqtt() -> bool {
    let found = amqtt_bin().is_some();
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "amqtt is required in CI (.ci/run installs it into ~/.cache/npu-agent-ci/amqtt-venv)"
        );
        eprintln!("SKIP: amqtt not installed (set CI=true to make this a failure)");
    }
    found
}

/// An amqtt broker (MQTT 3.1.1 only), anonymous, loopback only.
pub struct Amqtt {
    /// MQTT port.
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl Amqtt {
    /// Starts amqtt and waits for its port.
    pub fn start() -> Amqtt {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let conf = dir.path().join("amqtt.yaml");
        std::fs::write(
            &conf,
            format!(
                "listeners:\n  default:\n    type: tcp\n    bind: 127.0.0.1:{port}\nplugins:\n  \
                 amqtt.plugins.authentication.AnonymousAuthPlugin:\n    allow_anonymous: true\n"
            ),
        )
        .unwrap();
        let log = dir.path().join("amqtt.log");
        let out = std::fs::File::create(&log).unwrap();
        let mut child = Command::new(amqtt_bin().expect("amqtt"))
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start amqtt");
        wait_port(port, Duration::from_secs(60), &mut child, &log);
        Amqtt {
            port,
            child: Some(child),
            dir,
        }
    }

    /// `mqtt://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }
}

impl Drop for Amqtt {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// The NATS server (Debian 12 `nats-server` 2.9.10).
pub const NATS_SERVER: &str = "/usr/sbin/nats-server";

/// True when nats-server can be started; in CI its absence is a failure (the one tool check,
/// [`super::mqtt::require_tool`]).
pub fn have_nats() -> bool {
    super::mqtt::require_tool("nats-server")
}

/// A three-node NATS cluster (routes between every node, JetStream, MQTT 3.1.1 on each node) on
/// free loopback ports, from a temporary directory, stopped when dropped. A client without
/// credentials is user `ops` (everything allowed); user `deaf` (password `deaf`) may not
/// subscribe to board `deaf`'s command topics, so its SUBACK carries 0x80.
pub struct NatsCluster {
    dir: tempfile::TempDir,
    children: Vec<Option<Child>>,
    /// Each node's MQTT port.
    pub mqtt_ports: Vec<u16>,
}

impl NatsCluster {
    /// Starts the nodes and waits until each one's MQTT port listens.
    pub fn start() -> NatsCluster {
        NatsCluster::start_on("127.0.0.1")
    }

    /// [`NatsCluster::start`] with each node's MQTT listener on `mqtt_host` (`0.0.0.0` lets a
    /// bench in a private network namespace spread its clients over 127.0.0.1-127.0.0.4).
    pub fn start_on(mqtt_host: &str) -> NatsCluster {
        NatsCluster::start_with(mqtt_host, "")
    }

    /// [`NatsCluster::start_on`] with `extra` lines in every node's config (`max_pending: 65536`).
    pub fn start_with(mqtt_host: &str, extra: &str) -> NatsCluster {
        let dir = tempfile::tempdir().unwrap();
        let ports: Vec<[u16; 3]> = (0..3)
            .map(|_| [free_port(), free_port(), free_port()])
            .collect();
        let routes: Vec<String> = ports
            .iter()
            .map(|p| format!("nats-route://127.0.0.1:{}", p[1]))
            .collect();
        let mut children = Vec::new();
        for (i, [client, cluster, mqtt]) in ports.iter().enumerate() {
            let conf = dir.path().join(format!("n{i}.conf"));
            let store = dir.path().join(format!("js{i}"));
            std::fs::write(
                &conf,
                format!(
                    "{extra}server_name: n{i}\nlisten: 127.0.0.1:{client}\n\
                     jetstream {{ store_dir: \"{}\" }}\n\
                     cluster {{ name: c1, listen: 127.0.0.1:{cluster}, routes: [{}] }}\n\
                     mqtt {{ listen: {mqtt_host}:{mqtt} }}\n\
                     no_auth_user: ops\n\
                     authorization {{ users: [ {{user: ops, password: ops}},\n\
                       {{user: deaf, password: deaf, permissions: {{ publish: \">\",\n\
                         subscribe: {{ allow: \">\", deny: [\"npu-fleet.deaf.cmd.>\"] }} }} }} ] }}\n",
                    store.display(),
                    routes.join(", ")
                ),
            )
            .unwrap();
            let log = dir.path().join(format!("n{i}.log"));
            let child = Command::new(NATS_SERVER)
                .arg("-c")
                .arg(&conf)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("start nats-server");
            children.push(Some(child));
        }
        // Owned before the wait: a node that fails to start stops the others when this drops.
        let mut cluster = NatsCluster {
            dir,
            children,
            mqtt_ports: ports.iter().map(|p| p[2]).collect(),
        };
        for (i, p) in ports.iter().enumerate() {
            let log = cluster.dir.path().join(format!("n{i}.log"));
            wait_port(
                p[2],
                Duration::from_secs(30),
                cluster.children[i].as_mut().unwrap(),
                &log,
            );
        }
        cluster
    }

    /// `mqtt://127.0.0.1:<port>` of node `i`.
    pub fn url(&self, i: usize) -> String {
        format!("mqtt://127.0.0.1:{}", self.mqtt_ports[i])
    }

    /// Kills node `i` at once (SIGKILL, as a crashed machine: no goodbye to its clients).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The server processes' ids.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().flatten().map(|c| c.id()).collect()
    }

    /// The servers' logs.
    pub fn logs(&self) -> String {
        (0..self.children.len())
            .map(|i| {
                std::fs::read_to_string(self.dir.path().join(format!("n{i}.log")))
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n---\n")
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            stop(c);
        }
    }
}
