//! The host side of the fleet scenarios on virtual boards: an MQTT subscriber that records every
//! message (with its retain flag) from the harness's mosquitto, and the host build of `npu-agent`
//! run as the operator would (`keygen`, `fleet send`, `fleet watch`) with a bounded wait.
#![allow(dead_code)]

use crate::common;
use serde_json::Value;
use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One message as the subscriber received it.
#[derive(Debug, Clone)]
pub struct Msg {
    pub topic: String,
    pub payload: Vec<u8>,
    /// True for a retained message delivered on subscribe (a live one has it false).
    pub retain: bool,
    pub at: Instant,
}

impl Msg {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.payload).into_owned()
    }

    /// The payload as JSON (Null when it is not JSON, e.g. an empty clear).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.payload).unwrap_or(Value::Null)
    }
}

/// A rumqttc (MQTT 3.1.1) client on 127.0.0.1:PORT subscribed to one filter; keeps every
/// message in arrival order. Waits take an index (`len()` before the action) so an old message
/// never satisfies a wait for a new one.
pub struct Subscriber {
    client: rumqttc::Client,
    msgs: Arc<Mutex<Vec<Msg>>>,
    stop: Arc<AtomicBool>,
}

impl Subscriber {
    /// Connects and subscribes (QoS 1); returns once the broker acknowledged the subscription.
    pub fn connect(port: u16, filter: &str) -> Subscriber {
        let mut rnd = [0u8; 4];
        getrandom::fill(&mut rnd).expect("random client id");
        let mut o = rumqttc::MqttOptions::new(
            format!("vboard-sub-{:08x}", u32::from_le_bytes(rnd)),
            "127.0.0.1",
            port,
        );
        o.set_keep_alive(Duration::from_secs(10));
        o.set_max_packet_size(1 << 20, 1 << 20);
        let (client, mut conn) = rumqttc::Client::new(o, 100);
        client
            .subscribe(filter, rumqttc::QoS::AtLeastOnce)
            .expect("queue SUBSCRIBE");
        let msgs = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let subscribed = Arc::new(AtomicBool::new(false));
        let (m, s, sub) = (msgs.clone(), stop.clone(), subscribed.clone());
        std::thread::spawn(move || {
            for ev in conn.iter() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                match ev {
                    Ok(rumqttc::Event::Incoming(rumqttc::Packet::Publish(p))) => {
                        m.lock().expect("inbox").push(Msg {
                            topic: p.topic.clone(),
                            payload: p.payload.to_vec(),
                            retain: p.retain,
                            at: Instant::now(),
                        })
                    }
                    Ok(rumqttc::Event::Incoming(rumqttc::Packet::SubAck(_))) => {
                        sub.store(true, Ordering::SeqCst)
                    }
                    Ok(_) => {}
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while !subscribed.load(Ordering::SeqCst) {
            assert!(
                Instant::now() < deadline,
                "the host subscriber got no SUBACK from 127.0.0.1:{port} in 10 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Subscriber { client, msgs, stop }
    }

    /// Messages received so far.
    pub fn len(&self) -> usize {
        self.msgs.lock().expect("inbox").len()
    }

    pub fn all(&self) -> Vec<Msg> {
        self.msgs.lock().expect("inbox").clone()
    }

    /// The first message at index `from` or later that satisfies `pred`, or None after `timeout`.
    pub fn find_from(
        &self,
        from: usize,
        timeout: Duration,
        pred: impl Fn(&Msg) -> bool,
    ) -> Option<(usize, Msg)> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let m = self.msgs.lock().expect("inbox");
                if let Some((i, msg)) = m.iter().enumerate().skip(from).find(|(_, msg)| pred(msg)) {
                    return Some((i, msg.clone()));
                }
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Topics and the first 120 bytes of the last `n` messages, for a timeout's panic message.
    pub fn recent(&self, n: usize) -> String {
        let m = self.msgs.lock().expect("inbox");
        m.iter()
            .skip(m.len().saturating_sub(n))
            .map(|x| {
                format!(
                    "{}{} {}",
                    x.topic,
                    if x.retain { " (retained)" } else { "" },
                    x.text().chars().take(120).collect::<String>()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.client.try_disconnect();
    }
}

/// The retained message on `topic` as a fresh subscriber gets it (None if none came in `timeout`).
pub fn retained(port: u16, topic: &str, timeout: Duration) -> Option<Msg> {
    let s = Subscriber::connect(port, topic);
    s.find_from(0, timeout, |m| m.topic == topic && m.retain)
        .map(|(_, m)| m)
}

/// What a host `npu-agent` command printed.
#[derive(Debug)]
pub struct CliOut {
    pub code: i32,
    pub out: String,
    pub err: String,
    pub took: Duration,
}

impl CliOut {
    /// stdout lines (`fleet send`: one per state, `<board> <cmd_id> <state>[: reason] [result]`;
    /// the CLI cuts a result at 300 characters, so read big results from the command topic).
    pub fn lines(&self) -> Vec<&str> {
        self.out.lines().collect()
    }

    /// The cmd_id from the first line (`<board> <cmd_id> init`).
    pub fn cmd_id(&self) -> String {
        self.out
            .lines()
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or_else(|| panic!("no `<board> <cmd_id> init` line in {self:?}"))
            .to_string()
    }
}

/// A host `npu-agent` process with its output in files (no pipe to fill up).
pub struct Running {
    child: Option<Child>,
    dir: tempfile::TempDir,
    args: Vec<String>,
    started: Instant,
}

/// Starts the host build of `npu-agent ARGS` (the operator's side).
pub fn spawn(args: &[&str]) -> Running {
    let dir = tempfile::Builder::new()
        .prefix("vboard-cli-")
        .tempdir()
        .expect("temp dir");
    let out = fs::File::create(dir.path().join("out")).expect("out file");
    let err = fs::File::create(dir.path().join("err")).expect("err file");
    let child = Command::new(common::host_agent())
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("run the host npu-agent");
    Running {
        child: Some(child),
        dir,
        args: args.iter().map(|s| s.to_string()).collect(),
        started: Instant::now(),
    }
}

impl Running {
    /// Waits for the exit; kills it and panics after `timeout`.
    pub fn wait(mut self, timeout: Duration) -> CliOut {
        let mut child = self.child.take().expect("child");
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(st) = child.try_wait().expect("poll npu-agent") {
                break st;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "`npu-agent {}` still running after {timeout:?}; output so far:\n{}\n{}",
                    self.args.join(" "),
                    self.read("out"),
                    self.read("err")
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        CliOut {
            code: status.code().unwrap_or(-1),
            out: self.read("out"),
            err: self.read("err"),
            took: self.started.elapsed(),
        }
    }

    fn read(&self, name: &str) -> String {
        fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `npu-agent ARGS` on the host, at most `timeout`.
pub fn npu_agent(args: &[&str], timeout: Duration) -> CliOut {
    spawn(args).wait(timeout)
}

/// `npu-agent keygen --out DIR/operator.key`: (private key path, public key PEM text).
pub fn keygen(dir: &Path) -> (String, String) {
    let key = dir.join("operator.key");
    let key_s = key.to_str().expect("utf-8 temp path").to_string();
    let r = npu_agent(&["keygen", "--out", &key_s], Duration::from_secs(30));
    assert_eq!(r.code, 0, "keygen: {r:?}");
    let public = fs::read_to_string(format!("{key_s}.pub"))
        .unwrap_or_else(|e| panic!("{key_s}.pub after keygen: {e} ({r:?})"));
    assert!(public.contains("BEGIN PUBLIC KEY"), "{public}");
    (key_s, public)
}
