//! `fleet serve` read by the tools an operator points at it: a real Prometheus server (Debian's
//! `prometheus`, unpacked by `.ci/run` into ~/.cache/npu-agent/prometheus, started here on a
//! free loopback port with the shipped rules) scraping `/metrics`, promtool on the exposition
//! and on the shipped rules' unit tests, and headless Chromium loading the page, with hostile
//! board ids and statuses on the broker. The tools fail the tests under `CI=true` when missing.

use super::serve::{all_signed, two_boards, Serve};
use crate::support::mqtt::*;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);

/// `name` from `$PATH`, else from Debian's prometheus package as `.ci/run` unpacks it; fails
/// under CI when neither has it.
fn prometheus_tool(name: &str) -> Option<PathBuf> {
    let cached = std::env::var_os("HOME").map(|h| {
        Path::new(&h)
            .join(".cache/npu-agent/prometheus/usr/bin")
            .join(name)
    });
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .chain(cached)
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{name} is required under CI=true (.ci/run unpacks Debian's prometheus package)"
        );
        let _ = writeln!(std::io::stderr(), "SKIP: {name} not found");
    }
    found
}

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Runs `tool args` (stdin `input`): success and its stdout and stderr.
fn run(tool: &Path, args: &[&str], input: &str) -> (bool, String) {
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", tool.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

/// A process killed on drop.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `url` until `pred` holds for its body (deadline [`T`]).
fn wait_http(addr: &str, path: &str, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let t0 = Instant::now();
    loop {
        if std::net::TcpStream::connect(addr).is_ok() {
            let (_, body) = super::serve::http_get(addr, path);
            if pred(&body) {
                return body;
            }
            assert!(t0.elapsed() < T, "timed out waiting for {what}: {body}");
        }
        assert!(t0.elapsed() < T, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn prometheus_scrapes_fleet_serve_and_the_shipped_rules_load_and_pass_their_tests() {
    if !require_tool("mosquitto") {
        return;
    }
    let (Some(promtool), Some(prometheus)) =
        (prometheus_tool("promtool"), prometheus_tool("prometheus"))
    else {
        return;
    };
    let rules_dir = repo("packaging/prometheus");
    let (ok, out) = run(
        &promtool,
        &[
            "test",
            "rules",
            rules_dir.join("npu-fleet-rules.test.yml").to_str().unwrap(),
        ],
        "",
    );
    assert!(ok && out.contains("SUCCESS"), "{out}");

    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let (state, known) = (dir.path().join("state"), dir.path().join("known_boards"));
    let (_boards, _agents) = two_boards(&broker);
    let s = Serve::start(&broker.url(), &state, &known, &[]);
    s.wait_json("/api/boards", "both boards signed", |v| {
        all_signed(v, &["b1", "b2"])
    });
    let (_, metrics) = s.get("/metrics");
    let (ok, out) = run(&promtool, &["check", "metrics"], &metrics);
    assert!(ok, "promtool check metrics: {out}\n{metrics}");

    let port = free_port();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nrule_files: [{}]\n\
             scrape_configs:\n  - job_name: npu-fleet\n    static_configs: [{{targets: ['{}']}}]\n",
            rules_dir.join("npu-fleet-rules.yml").display(),
            s.addr
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let _prom = Guard(
        Command::new(&prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus"),
    );
    let addr = format!("127.0.0.1:{port}");
    let body = wait_http(
        &addr,
        "/api/v1/query?query=npu_fleet_board_health",
        "the scrape",
        |b| b.contains("\"board\":\"b1\"") && b.contains("\"board\":\"b2\""),
    );
    assert!(body.contains("\"job\":\"npu-fleet\""), "{body}");
    let q = "/api/v1/query?query=sum(npu_fleet_boards)";
    let body = wait_http(&addr, q, "the counts", |b| b.contains("\"2\"]"));
    assert!(body.contains("\"status\":\"success\""), "{body}");
    let rules = wait_http(&addr, "/api/v1/rules", "the rules", |b| {
        b.contains("NpuAgentVersionSkew")
    });
    assert_eq!(rules.matches("\"type\":\"alerting\"").count(), 8, "{rules}");
    assert!(!rules.contains("\"health\":\"err\""), "{rules}");
}

/// Headless Chromium's DOM of `url` (after scripts would have run), and a screenshot at `png`.
fn chromium(url: &str, png: &Path, profile: &Path) -> String {
    let flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ];
    let user = format!("--user-data-dir={}", profile.display());
    let o = Command::new("chromium")
        .args(flags)
        .args([&user, "--dump-dom", url])
        .output()
        .expect("run chromium");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let shot = Command::new("chromium")
        .args(flags)
        .args([
            &user,
            "--window-size=1400,900",
            &format!("--screenshot={}", png.display()),
            url,
        ])
        .output()
        .expect("run chromium");
    assert!(
        shot.status.success(),
        "{}",
        String::from_utf8_lossy(&shot.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn chromium_shows_the_fleet_and_a_boards_findings_and_hostile_text_stays_inert() {
    if !require_tool("mosquitto") || !require_tool("chromium") {
        return;
    }
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let (state, known) = (dir.path().join("state"), dir.path().join("known_boards"));
    let (boards, _agents) = two_boards(&broker);
    let meminfo = boards[0].read("/proc/meminfo").unwrap();
    let dry = meminfo.replace(
        "CmaFree:            240128 kB",
        "CmaFree:               512 kB",
    );
    boards[0].write("/proc/meminfo", &dry);
    // Anyone on the broker can publish under any id: script, quotes and BIDI overrides.
    let evil_id =
        "evil\"><img src=x onerror=document.body.setAttribute('data-pwned',1)>\u{202e}gpj";
    let evil = serde_json::json!({
        "health": "fail",
        "profile": "<script>document.body.setAttribute('data-pwned',2)</script>",
        "model": "\u{202e}\"'><b>bold</b>",
        "findings": [{"id": "x\"><script>document.body.setAttribute('data-pwned',3)</script>",
                      "status": "fail", "summary": "<script>alert(1)</script>"}],
    });
    let c = Client::connect(broker.port, &[]);
    c.publish(
        &format!("npu-fleet/{evil_id}/status"),
        evil.to_string().as_bytes(),
        true,
    );
    let s = Serve::start(&broker.url(), &state, &known, &[]);
    s.wait_json("/api/boards", "the boards and the evil one", |v| {
        all_signed(v, &["b1", "b2"]) && v.as_array().unwrap().len() == 3
    });
    s.wait_json("/api/boards/b1/history", "cma.free firing", |h| {
        h.as_array()
            .unwrap()
            .iter()
            .any(|r| r["subject"] == "cma.free")
    });
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-page");
    std::fs::create_dir_all(&shots).unwrap();
    let dom = chromium(
        &format!("http://{}/", s.addr),
        &shots.join("fleet.png"),
        dir.path(),
    );
    assert_eq!(dom.matches("<tr class=\"board ").count(), 3, "{dom}");
    assert!(dom.contains("<span id=\"count-all\">3</span>"), "{dom}");
    assert!(dom.contains("<span id=\"count-fail\">2</span>"), "{dom}");
    // Worst first: the two failing boards before the healthy b2.
    let at = |needle: &str| {
        dom.find(needle)
            .unwrap_or_else(|| panic!("{needle}: {dom}"))
    };
    assert!(
        at("href=\"/boards/b2\"") > at("href=\"/boards/b1\""),
        "{dom}"
    );
    // The scripts would set `data-pwned` on <body>: their text is there, escaped, and inert.
    assert!(
        dom.contains("<body><h1>Fleet</h1>"),
        "a board's text ran as script: {dom}"
    );
    assert!(
        !dom.contains("<script") && !dom.contains("<img") && !dom.contains("<b>"),
        "{dom}"
    );
    assert!(
        !dom.contains('\u{202e}'),
        "a BIDI override reached the page: {dom}"
    );
    assert!(dom.contains("\\u{202e}"), "{dom}");
    assert!(png_written(&shots.join("fleet.png")));

    let dom = chromium(
        &format!("http://{}/boards/b1", s.addr),
        &shots.join("b1.png"),
        dir.path(),
    );
    assert!(dom.contains("id=\"finding-cma.free\""), "{dom}");
    assert!(dom.contains("<h3>cma.free fail"), "{dom}");
    assert!(
        dom.contains("<td>finding_start</td><td>cma.free</td>"),
        "{dom}"
    );
    let evil_page = format!(
        "http://{}/boards/{}",
        s.addr,
        npu_agent::fleet::serve::page::path_id(evil_id)
    );
    let dom = chromium(&evil_page, &shots.join("evil.png"), dir.path());
    assert!(
        dom.contains("No status sealed by this board's key yet."),
        "{dom}"
    );
    assert!(dom.contains("<body><p>") && !dom.contains("<img"), "{dom}");
    let filtered = chromium(
        &format!("http://{}/?health=ok", s.addr),
        &shots.join("ok.png"),
        dir.path(),
    );
    assert_eq!(
        filtered.matches("<tr class=\"board ").count(),
        1,
        "{filtered}"
    );
}

/// A PNG file (its signature) was written.
fn png_written(p: &Path) -> bool {
    std::fs::read(p).is_ok_and(|b| b.starts_with(b"\x89PNG"))
}
