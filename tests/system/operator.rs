//! The operator's own tools against the real agent: certificates made by the openssl CLI as the
//! operator guide's TLS section (docs/operator-guide.md, after mosquitto's guide) makes them,
//! over mTLS to a real mosquitto; keys that `openssl pkey` and python-cryptography read; the
//! guide's signed bytes; an independent Python signer (`tests/operator/send_command.py`) whose
//! `set_cma` the agent executes and whose one-byte-changed commands it rejects; and the messages
//! of `fleet send` / `fleet watch`, `release_npu` refused by profile, a failed compaction and
//! `run --print-config`.

use crate::support::mqtt::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const CASE: &str = "own-rk3588-opi5plus-rknpu-0.9.8-healthy";
const T: Duration = Duration::from_secs(15);

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_npu-agent")
}

fn run(program: &str, args: &[&str], dir: &Path, env: &[(&str, &str)]) -> (i32, String, String) {
    let o = Command::new(program)
        .args(args)
        .current_dir(dir)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

pub(crate) fn npu_agent(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    run(bin(), args, Path::new("/"), env)
}

/// Board `id` (fixture `case`) on `broker`, whose config trusts a fresh operator key and then
/// has `extra`; returns the board, the key pair's directory (kept alive) and the private key.
pub(crate) fn keyed_board(
    broker: &Broker,
    case: &str,
    id: &str,
    extra: &str,
) -> (Board, tempfile::TempDir, PathBuf) {
    let board = Board::from_fixture(case, id, "");
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("op.key");
    let (code, _, err) = npu_agent(&["keygen", "--out", key.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    board.write(
        "/etc/npu-agent/op.key.pub",
        &std::fs::read_to_string(keys.path().join("op.key.pub")).unwrap(),
    );
    let security = "[security]\ntrusted_keys = [\"/etc/npu-agent/op.key.pub\"]\n";
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&broker.url(), id, &format!("{security}{extra}")),
    );
    (board, keys, key)
}

/// python3 with python-cryptography and paho-mqtt (`.ci/run` installs them); fails in CI.
fn require_python() -> bool {
    if !require_tool("python3") {
        return false;
    }
    let ok = Command::new("python3")
        .args(["-c", "import cryptography, paho.mqtt"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "python-cryptography and paho-mqtt are required in CI (pip install cryptography paho-mqtt)"
        );
        // Straight to stderr, past libtest's capture of `eprintln!`, so a person sees the skip.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: python-cryptography or paho-mqtt missing (set CI=true to make this a failure)"
        );
    }
    ok
}

/// The fenced block after `<!-- tested: NAME -->` in the operator guide (docs/operator-guide.md).
fn readme_block(name: &str) -> String {
    let guide = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operator-guide.md");
    let readme = std::fs::read_to_string(guide).unwrap();
    let marker = format!("<!-- tested: {name} -->");
    let after = &readme[readme.find(&marker).expect("operator guide marker") + marker.len()..];
    let body = after.split_once("```").unwrap().1;
    let body = body.split_once('\n').unwrap().1;
    body[..body.find("```").unwrap()].to_string()
}

fn x509_text(path: &Path) -> String {
    let (code, out, err) = run(
        "openssl",
        &["x509", "-noout", "-text", "-in", path.to_str().unwrap()],
        Path::new("/"),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    out
}

/// Runs the operator guide's certificate commands in a new directory.
pub(crate) fn readme_pki() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pki.sh"), readme_block("tls-certificates")).unwrap();
    let (code, _, err) = run("bash", &["-e", "pki.sh"], dir.path(), &[]);
    assert_eq!(code, 0, "the guide's openssl commands failed: {err}");
    dir
}

/// The agent's config for a TLS broker; the PKI files are copied into the board tree
/// (`/etc/npu-agent/tls/`), where the agent reads them under `--root`.
pub(crate) fn tls_agent_config(url: &str, board: &Board, pki: &Path, client: bool) -> String {
    let p = |f: &str| {
        board.write(
            &format!("/etc/npu-agent/tls/{f}"),
            &std::fs::read_to_string(pki.join(f)).unwrap(),
        );
        format!("/etc/npu-agent/tls/{f}")
    };
    let mut tls = format!("ca_file = \"{}\"\n", p("ca.crt"));
    if client {
        tls.push_str(&format!(
            "cert_file = \"{}\"\nkey_file = \"{}\"\n",
            p("client.crt"),
            p("client.key")
        ));
    }
    agent_config(url, &board.id, "")
        .replace("keep_alive_s = 5\n", &format!("keep_alive_s = 5\n{tls}"))
}

pub(crate) fn tls_broker(pki: &Path, server_crt: &str) -> (Broker, u16) {
    let tls_port = free_port();
    let p = |f: &str| pki.join(f).display().to_string();
    let broker = Broker::start_with(
        free_port(),
        &format!(
            "user root\nlistener {tls_port} 127.0.0.1\ncafile {}\ncertfile {}\nkeyfile {}\nrequire_certificate true\n",
            p("ca.crt"),
            p(server_crt),
            p("server.key")
        ),
    );
    (broker, tls_port)
}

fn wait_log(agent: &Agent, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let t0 = std::time::Instant::now();
    loop {
        let log = agent.log_text();
        if pred(&log) {
            return log;
        }
        assert!(
            t0.elapsed() < T,
            "timed out waiting for {what}; log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn readme_certificates_give_mutual_tls_with_a_v1_client_certificate_and_an_ip_server_name() {
    if !require_tool("mosquitto") || !require_tool("openssl") {
        return;
    }
    let pki = readme_pki();
    // What the guide's commands make: a v1 client certificate; the server's is v3 for 127.0.0.1.
    assert!(x509_text(&pki.path().join("client.crt")).contains("Version: 1 (0x0)"));
    let server = x509_text(&pki.path().join("server.crt"));
    assert!(server.contains("Version: 3 (0x2)"), "{server}");
    assert!(server.contains("IP Address:127.0.0.1"), "{server}");

    let (broker, tls_port) = tls_broker(pki.path(), "server.crt");
    let url = format!("mqtts://127.0.0.1:{tls_port}");
    let board = Board::from_fixture(CASE, "b1", "");
    board.write(
        "/etc/npu-agent/agent.toml",
        &tls_agent_config(&url, &board, pki.path(), true),
    );
    let agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    let s = c.wait_for(T, "the status over mTLS", |m| !m.payload.is_empty());
    assert_eq!(s.json()["board_id"], "b1", "{}", agent.log_text());

    // The operator with the same v1 certificate, through the NPU_AGENT_MQTT_* variables.
    let p = |f: &str| pki.path().join(f).display().to_string();
    let (ca, cert, key) = (p("ca.crt"), p("client.crt"), p("client.key"));
    let env = tls_client_env(&ca, &cert, &key);
    let (code, out, err) = npu_agent(
        &[
            "fleet", "send", "rescan", "--board", "b1", "--broker", &url, "--wait", "10",
        ],
        &env,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.lines().last().unwrap().contains(" successful"), "{out}");

    // A key that is not the certificate's: refused at start, in plain words.
    let (code, _, err) = run(
        "openssl",
        &["genrsa", "-out", "other.key", "2048"],
        pki.path(),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let other = p("other.key");
    let env_bad = [env[0], env[1], ("NPU_AGENT_MQTT_KEY_FILE", other.as_str())];
    let (code, _, err) = npu_agent(&["fleet", "watch", "--once", "--broker", &url], &env_bad);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("client key (key_file) does not belong to the client certificate"),
        "{err}"
    );
    assert!(!err.contains("peer"), "{err}");
    // A passphrase-protected key: the openssl command that writes a usable copy.
    let (code, _, err) = run(
        "openssl",
        &[
            "pkey",
            "-in",
            "client.key",
            "-aes256",
            "-passout",
            "pass:x",
            "-out",
            "enc.key",
        ],
        pki.path(),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let enc = p("enc.key");
    let env_enc = [env[0], env[1], ("NPU_AGENT_MQTT_KEY_FILE", enc.as_str())];
    let (code, _, err) = npu_agent(&["fleet", "watch", "--once", "--broker", &url], &env_enc);
    assert_eq!(code, 2);
    assert!(
        err.contains("passphrase") && err.contains("openssl pkey"),
        "{err}"
    );
}

#[test]
fn a_server_certificate_made_exactly_as_the_guide_is_explained_with_the_fix() {
    if !require_tool("mosquitto") || !require_tool("openssl") {
        return;
    }
    let pki = readme_pki();
    // The guide's server certificate: no -extfile, so X.509 v1 and no subjectAltName.
    let (code, _, err) = run(
        "openssl",
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server-v1.crt",
            "-days",
            "825",
        ],
        pki.path(),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(x509_text(&pki.path().join("server-v1.crt")).contains("Version: 1 (0x0)"));
    let (_broker, tls_port) = tls_broker(pki.path(), "server-v1.crt");
    let url = format!("mqtts://127.0.0.1:{tls_port}");
    let board = Board::from_fixture(CASE, "b1", "");
    board.write(
        "/etc/npu-agent/agent.toml",
        &tls_agent_config(&url, &board, pki.path(), true),
    );
    let agent = Agent::start(&board);
    let log = wait_log(&agent, "the connection error", |l| l.contains("X.509 v1"));
    assert!(log.contains("-extfile"), "{log}");
    assert!(log.contains("subjectAltName"), "{log}");
}

#[test]
fn keygen_keys_are_read_by_openssl_and_python_and_older_keys_still_load() {
    if !require_tool("openssl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("op.key");
    let (code, _, err) = npu_agent(&["keygen", "--out", key.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let public = std::fs::read_to_string(dir.path().join("op.key.pub")).unwrap();
    // openssl derives from the private key exactly the public key keygen wrote.
    let (code, derived, err) = run(
        "openssl",
        &["pkey", "-in", "op.key", "-pubout"],
        dir.path(),
        &[],
    );
    assert_eq!(code, 0, "openssl pkey refuses keygen's private key: {err}");
    assert_eq!(derived, public);
    let (code, text, err) = run(
        "openssl",
        &["pkey", "-pubin", "-in", "op.key.pub", "-noout", "-text"],
        dir.path(),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("ED25519 Public-Key"), "{text}");
    // A key made by openssl loads as a signing key, and signs what its own public key verifies.
    let (code, _, err) = run(
        "openssl",
        &["genpkey", "-algorithm", "ed25519", "-out", "openssl.key"],
        dir.path(),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let k = npu_agent::mqtt::command::load_signing_key(&dir.path().join("openssl.key")).unwrap();
    let (_, openssl_pub, _) = run(
        "openssl",
        &["pkey", "-in", "openssl.key", "-pubout"],
        dir.path(),
        &[],
    );
    assert_eq!(
        npu_agent::mqtt::command::parse_verifying_key(&openssl_pub).unwrap(),
        k.verifying_key()
    );
    // A PKCS#8 v2 key (public key inside), as keygen wrote before, still loads.
    use ed25519_dalek::pkcs8::{spki::der::pem::LineEnding, EncodePrivateKey};
    let old = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
    let v2 = old.to_pkcs8_pem(LineEnding::LF).unwrap();
    std::fs::write(dir.path().join("v2.key"), v2.as_bytes()).unwrap();
    let loaded = npu_agent::mqtt::command::load_signing_key(&dir.path().join("v2.key")).unwrap();
    assert_eq!(loaded.to_bytes(), old.to_bytes());
    let mine = std::fs::read_to_string(&key).unwrap();
    assert!(
        mine.len() < v2.len(),
        "keygen still writes the longer v2 form"
    );
    if !require_python() {
        return;
    }
    let script = "import sys\nfrom cryptography.hazmat.primitives import serialization as s\n\
        k = s.load_pem_private_key(open(sys.argv[1], 'rb').read(), password=None)\n\
        p = s.load_pem_public_key(open(sys.argv[1] + '.pub', 'rb').read())\n\
        f = (s.Encoding.PEM, s.PublicFormat.SubjectPublicKeyInfo)\n\
        assert k.public_key().public_bytes(*f) == p.public_bytes(*f)\n\
        sys.stdout.write(p.public_bytes(*f).decode())\n";
    let (code, out, err) = run(
        "python3",
        &["-c", script, key.to_str().unwrap()],
        dir.path(),
        &[],
    );
    assert_eq!(code, 0, "python-cryptography refuses keygen's keys: {err}");
    assert_eq!(out, public);
}

#[test]
fn the_readme_signed_bytes_are_what_the_agent_signs_and_verifies() {
    let block = readme_block("signed-bytes");
    let mut args = serde_json::Map::new();
    args.insert("size".into(), "256M".into());
    let bytes = npu_agent::mqtt::command::Signed {
        topic_root: "npu-fleet",
        board: "rock5b-01",
        action: "set_cma",
        cmd_id: "1764400000-a1b2c3",
        args: &args,
        issued_at: 1764400000,
        expires_at: 1764400120,
    }
    .bytes();
    assert_eq!(String::from_utf8(bytes).unwrap(), block);
}

fn python_send(args: &[&str]) -> (i32, String, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/operator/send_command.py");
    let mut a = vec![script.to_str().unwrap()];
    a.extend_from_slice(args);
    run("python3", &a, Path::new("/"), &[])
}

#[test]
fn an_independent_python_signer_runs_set_cma_and_a_changed_byte_is_rejected() {
    if !require_tool("mosquitto") || !require_python() {
        return;
    }
    let broker = Broker::start();
    let (board, _keys, key) = keyed_board(&broker, CASE, "b1", "");
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    c.wait_for(T, "a status", |m| !m.payload.is_empty());
    let before = board.read("/boot/armbianEnv.txt").unwrap();
    let addr = format!("127.0.0.1:{}", broker.port);
    let common = [
        "--broker",
        addr.as_str(),
        "--board",
        "b1",
        "--key",
        key.to_str().unwrap(),
        "--wait",
        "10",
    ];
    // One byte changed in each signed field after signing: rejected, nothing edited.
    for field in ["args", "cmd_id", "issued_at", "expires_at"] {
        let mut a = vec!["set_cma", "size=512M", "--tamper", field];
        a.extend_from_slice(&common);
        let (code, out, err) = python_send(&a);
        assert_eq!(code, 1, "{field}: {out}{err}");
        assert!(
            out.contains(" rejected: bad signature: no trusted key verifies it"),
            "{field}: {out}{err}"
        );
    }
    assert_eq!(board.read("/boot/armbianEnv.txt").unwrap(), before);
    // As signed: executed.
    let mut a = vec!["set_cma", "size=512M"];
    a.extend_from_slice(&common);
    let (code, out, err) = python_send(&a);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(" executing"), "{out}");
    assert!(out.lines().last().unwrap().contains(" successful"), "{out}");
    let after = board.read("/boot/armbianEnv.txt").unwrap();
    assert!(after.contains("cma=512M"), "{after}");
    assert!(!before.contains("cma=512M"));
}

#[test]
fn fleet_messages_say_what_is_missing() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let url = broker.url();
    // Usage: both targets named.
    let (code, _, err) = npu_agent(&["fleet", "send", "rescan", "--broker", &url], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("--board") && err.contains("--all"), "{err}");
    // No board at all: said in a few seconds, not after the whole --wait.
    let t0 = std::time::Instant::now();
    let (code, _, err) = npu_agent(
        &[
            "fleet", "send", "rescan", "--all", "--broker", &url, "--wait", "30",
        ],
        &[],
    );
    assert_eq!(code, 1);
    assert!(err.contains("no board at all under npu-fleet/ on"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    let (code, out, err) = npu_agent(&["fleet", "watch", "--once", "--broker", &url], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!("no boards under npu-fleet/ on {url}")),
        "{out}{err}"
    );
    // A board exists, but not the one named.
    let board = Board::from_fixture(CASE, "b1", "");
    board.write("/etc/npu-agent/agent.toml", &agent_config(&url, "b1", ""));
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    c.wait_for(T, "a status", |m| !m.payload.is_empty());
    let (code, _, err) = npu_agent(
        &[
            "fleet", "send", "rescan", "--board", "nosuch", "--broker", &url, "--wait", "30",
        ],
        &[],
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("no status was ever seen for board \"nosuch\" under npu-fleet/ on"),
        "{err}"
    );
    assert!(!err.contains("no final state"), "{err}");
    // LAST_SEEN in whole seconds.
    let (code, out, err) = npu_agent(&["fleet", "watch", "--once", "--broker", &url], &[]);
    assert_eq!(code, 0, "{err}");
    let row = out.lines().find(|l| l.starts_with("b1 ")).expect(&out);
    let seen = row
        .split_whitespace()
        .find(|w| w.len() == 20 && w.ends_with('Z') && w.as_bytes()[10] == b'T');
    assert!(seen.is_some(), "no RFC 3339 time in whole seconds: {row}");
}

#[test]
fn release_npu_is_refused_where_the_profile_has_nothing_to_release() {
    let Some((broker, board)) = broker_and_board(
        CASE,
        "b1",
        "[security]\nallow_unsigned = [\"compact\", \"rescan\", \"release_npu\"]\n",
    ) else {
        return;
    };
    let url = broker.url();
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    let s = c.wait_for(T, "a status", |m| !m.payload.is_empty()).json();
    assert_eq!(s["profile"], "rk3588-rknpu");
    let actions: Vec<&str> = s["actions"]
        .as_array()
        .expect("actions in the status")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        actions,
        ["compact", "set_cma", "reboot", "rescan", "fix", "capture", "update"]
    );
    let (code, out, err) = npu_agent(
        &[
            "fleet",
            "send",
            "release_npu",
            "--board",
            "b1",
            "--broker",
            &url,
            "--wait",
            "10",
        ],
        &[],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("rejected: release_npu unloads models from a local hailo-ollama, and profile \"rk3588-rknpu\""),
        "{out}"
    );
    assert!(out.contains("nothing to release on this board"), "{out}");
}

#[test]
fn a_failed_compaction_does_not_use_up_the_rate_limit() {
    // The fixture has no /proc/sys/vm/compact_memory: every compaction fails.
    let Some((broker, board)) = broker_and_board(CASE, "b1", "[actions]\nauto_compact = false\n")
    else {
        return;
    };
    let url = broker.url();
    assert!(board.read("/proc/sys/vm/compact_memory").is_none());
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    c.wait_for(T, "a status", |m| !m.payload.is_empty());
    for attempt in 0..2 {
        let (code, out, err) = npu_agent(
            &[
                "fleet", "send", "compact", "--board", "b1", "--broker", &url, "--wait", "10",
            ],
            &[],
        );
        assert_eq!(code, 1, "attempt {attempt}: {out}{err}");
        let last = out.lines().last().unwrap_or_default();
        assert!(last.contains(" failed"), "attempt {attempt}: {out}");
        assert!(!out.contains("rate limited"), "attempt {attempt}: {out}");
    }
}

#[test]
fn print_config_shows_where_state_dir_resolves() {
    let dir = tempfile::tempdir().unwrap();
    let root: PathBuf = dir.path().to_path_buf();
    let (code, out, err) = npu_agent(
        &["run", "--root", root.to_str().unwrap(), "--print-config"],
        &[("NPU_AGENT_STATE_DIR", "/srv/npu-state")],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("state_dir = \"/srv/npu-state\""), "{out}");
    let want = format!(
        "# state_dir \"/srv/npu-state\" under root {:?} is {}/srv/npu-state",
        root.display().to_string(),
        root.display()
    );
    assert!(out.contains(&want), "{out}");
}

#[test]
fn a_v1_ca_and_a_server_certificate_with_copied_extensions_work() {
    if !require_tool("mosquitto") || !require_tool("openssl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = "openssl genrsa -out ca.key 2048\n\
        openssl req -new -key ca.key -subj '/CN=v1 CA' -out ca.csr\n\
        openssl x509 -req -in ca.csr -signkey ca.key -out ca.crt -days 30\n\
        openssl genrsa -out server.key 2048\n\
        openssl req -new -key server.key -subj /CN=broker -addext subjectAltName=IP:127.0.0.1 -out server.csr\n\
        openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 30 -copy_extensions copy\n";
    std::fs::write(dir.path().join("pki.sh"), script).unwrap();
    let (code, _, err) = run("bash", &["-e", "pki.sh"], dir.path(), &[]);
    assert_eq!(code, 0, "{err}");
    assert!(x509_text(&dir.path().join("ca.crt")).contains("Version: 1 (0x0)"));
    // The guide's other way to name the broker: -addext on the request, -copy_extensions.
    let server = x509_text(&dir.path().join("server.crt"));
    assert!(
        server.contains("Version: 3 (0x2)") && server.contains("IP Address:127.0.0.1"),
        "{server}"
    );
    let p = |f: &str| dir.path().join(f).display().to_string();
    let tls_port = free_port();
    let _broker = Broker::start_with(
        free_port(),
        &format!(
            "user root\nlistener {tls_port} 127.0.0.1\ncafile {}\ncertfile {}\nkeyfile {}\n",
            p("ca.crt"),
            p("server.crt"),
            p("server.key")
        ),
    );
    let url = format!("mqtts://127.0.0.1:{tls_port}");
    let ca = p("ca.crt");
    let (code, out, err) = npu_agent(
        &["fleet", "watch", "--once", "--broker", &url],
        &[("NPU_AGENT_MQTT_CA_FILE", ca.as_str())],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains(&format!("no boards under npu-fleet/ on {url}")),
        "{err}"
    );
}

/// `fix` from the fleet: unsigned it is rejected and nothing is written; signed with a trusted
/// key it writes the module option on the board (a 16 KiB-page Hailo-8) and answers
/// `successful` with the plan, the steps done and the reboot the finding waits for; sent again,
/// it is rejected before `executing` because nothing is left to apply.
#[test]
fn a_signed_fix_from_the_fleet_writes_the_option_and_an_unsigned_one_is_rejected() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    // The 60 s rate limit of `fix` is lifted so the second send meets the plan's refusal.
    let (board, _keys, key) = keyed_board(
        &broker,
        "own-pi5-hailo8-16k-pages-max-desc-page-size",
        "f1",
        "\n[actions]\nrate_limit_overrides_s = { fix = 0 }\n",
    );
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/f1/status"]);
    c.wait_for(T, "a status", |m| !m.payload.is_empty());
    let url = broker.url();
    let send = |signed: bool| {
        let mut a = vec![
            "fleet",
            "send",
            "fix",
            "--arg",
            "check=hailo.driver_binding",
            "--board",
            "f1",
            "--broker",
            &url,
            "--wait",
            "15",
        ];
        if signed {
            a.extend(["--key", key.to_str().unwrap()]);
        }
        npu_agent(&a, &[])
    };
    let conf = "/etc/modprobe.d/hailo_pci.conf";
    let (code, out, err) = send(false);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("rejected: unsigned fix refused"), "{out}");
    assert_eq!(board.read(conf), None);

    let (code, out, err) = send(true);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(" executing"), "{out}");
    // Each step as it starts, with its place in the plan, before the final state.
    let step = out
        .lines()
        .position(|l| l.contains(" executing: 1 of 2: echo 'options hailo_pci force_desc_page_size=4096' | tee /etc/modprobe.d/hailo_pci.conf"));
    let reboot = out
        .lines()
        .position(|l| l.ends_with(" executing: 2 of 2: reboot"));
    assert!(step.is_some() && step < reboot, "{out}");
    let last = out.lines().last().unwrap();
    assert!(last.contains(" successful"), "{out}");
    assert!(last.contains("\"result\":\"reboot_needed\""), "{last}");
    assert!(last.contains("\"state\":\"done\""), "{last}");
    let written = board.read(conf).unwrap_or_default();
    assert!(
        written.contains("options hailo_pci force_desc_page_size=4096"),
        "{written}"
    );

    let (code, out, err) = send(true);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("rejected: no automatic fix"), "{out}");
    assert_eq!(board.read(conf).unwrap_or_default(), written);
}

/// `fix` from Home Assistant: a board whose config lists `fix` unsigned (the operator's opt-in,
/// never the default) announces a fix button, and its press writes the module option through
/// the gate and the executor; the default config announces none.
#[test]
fn a_fix_button_where_the_config_allows_unsigned_fixes_and_its_press_fixes() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let conf = "/etc/modprobe.d/hailo_pci.conf";
    for (id, allow) in [("h0", "\"rescan\""), ("h1", "\"rescan\", \"fix\"")] {
        let board = Board::from_fixture("own-pi5-hailo8-16k-pages-max-desc-page-size", id, "");
        board.write(
            "/etc/npu-agent/agent.toml",
            &agent_config(
                &broker.url(),
                id,
                &format!(
                    "[security]\nallow_unsigned = [{allow}]\n\n[home_assistant]\nenabled = true\n"
                ),
            ),
        );
        let discovery = format!("homeassistant/device/{id}/config");
        let c = Client::connect(broker.port, &[&discovery]);
        let _agent = Agent::start(&board);
        let d = c.wait_for(T, "discovery", |m| m.topic == discovery).json();
        let button = &d["cmps"][format!("{id}_fix")];
        if id == "h0" {
            assert!(button.is_null(), "{d:#}");
            assert!(!d["cmps"][format!("{id}_rescan")].is_null(), "{d:#}");
            continue;
        }
        let topic = format!("npu-fleet/{id}/ha/fix");
        assert_eq!(button["command_topic"], topic.as_str(), "{d:#}");
        assert_eq!(board.read(conf), None);
        c.publish(&topic, b"PRESS", false);
        let t0 = std::time::Instant::now();
        while !board
            .read(conf)
            .unwrap_or_default()
            .contains("options hailo_pci force_desc_page_size=4096")
        {
            assert!(t0.elapsed() < T, "the fix button did nothing");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}
