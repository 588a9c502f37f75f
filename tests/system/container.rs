//! The OCI container image (packaging/oci/build-image.sh, built with umoci into a temp dir from the
//! static aarch64 agent): its entrypoint and volume, the same verdicts as `check --root` on board
//! trees mounted read-only at /host, the daemon reporting over MQTT from it, and a `fix`, `cma
//! set` or remote `set_cma` in it that is refused with what to run on the host while the host is
//! mounted read-only.
//!
//! The container runs under podman (temporary storage, no daemon): with its defaults, else with
//! runc and rlimits within this process's own (this sandbox: crun refuses its hybrid cgroup
//! hierarchy, and podman's default RLIMIT_NOFILE needs CAP_SYS_RESOURCE, which it withholds).
//! Where podman cannot start a container at all the test says why and runs the image's unpacked
//! root file system
//! (`umoci unpack`) with its entrypoint and environment under `bwrap` in new mount, PID, IPC, UTS
//! and cgroup namespaces, the ones podman gives a container, with the host's network as podman's
//! `--network host` and the add-on's `host_network` (docs/image-guide.md). The
//! aarch64 binary runs through qemu-user's binfmt_misc entry (flag F, so it works in any mount
//! namespace). A missing tool fails under `CI=true` and skips otherwise.

use crate::common;
use crate::support::mqtt::{init_payload, now_s, require_tool, Board, Broker, Client};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// How the image is run: under podman, or its unpacked root under bwrap.
enum Runner {
    /// podman with a temporary store, the image's name, and the options `run` needs here (the
    /// runtime and rlimits, see [`podman`]).
    Podman {
        store: PathBuf,
        image: String,
        options: Vec<String>,
    },
    /// bwrap over the unpacked root, with the image's entrypoint and environment.
    Bwrap {
        rootfs: PathBuf,
        entrypoint: String,
        env: Vec<(String, String)>,
    },
}

/// A mount into the container: host path, container path, writable.
struct Mount<'a>(&'a Path, &'a str, bool);

/// The built image: its layout, the unpacked bundle's runtime config, and how to run it.
struct Image {
    _dir: tempfile::TempDir,
    config: Value,
    runner: Runner,
}

/// Builds the image with packaging/oci/build-image.sh and picks its runner; None after a skip.
fn image() -> Option<Image> {
    let why = "build and run the OCI image; Debian packages umoci, bubblewrap, qemu-user-static";
    let [_, bwrap, _] = common::tools(["umoci", "bwrap", "qemu-aarch64-static"], why)?;
    let bin = common::aarch64_agent()?;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("oci/npu-agent");
    let built = Command::new("bash")
        .arg(common::manifest_dir().join("packaging/oci/build-image.sh"))
        .arg("--bin")
        .arg(&bin)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(built.status.success(), "build-image.sh: {}", text(&built));
    let reference = String::from_utf8_lossy(&built.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    let tag = format!("{}:npu-agent:{}", out.display(), env!("CARGO_PKG_VERSION"));
    assert_eq!(reference, tag, "the last line names the layout and tag");
    let bundle = dir.path().join("bundle");
    let unpacked = Command::new("umoci")
        .args(["unpack", "--image", &tag])
        .arg(&bundle)
        .output()
        .unwrap();
    assert!(
        unpacked.status.success(),
        "umoci unpack: {}",
        text(&unpacked)
    );
    let config: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
    let runner = match podman(dir.path(), &out.with_extension("tar")) {
        Ok(r) => r,
        Err(why) => {
            common::say(&format!(
                "container: podman cannot run a container in this sandbox ({why}); running the \
                 unpacked image under {} in the same namespaces instead",
                bwrap.display()
            ));
            bwrap_runner(&bundle, &config)
        }
    };
    Some(Image {
        _dir: dir,
        config,
        runner,
    })
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// podman's command with its store under `store` (nothing under /var/lib/containers).
fn podman_cmd(store: &Path) -> Command {
    let mut c = Command::new("podman");
    c.arg("--root")
        .arg(store.join("root"))
        .arg("--runroot")
        .arg(store.join("run"))
        .arg("--tmpdir")
        .arg(store.join("tmp"))
        .args(["--storage-driver", "vfs", "--cgroup-manager", "cgroupfs"])
        .args(["--events-backend", "file"]);
    c.stdin(Stdio::null());
    c
}

/// Loads the image's archive into a temporary podman store and starts it once (`--version`).
///
/// Errors: why podman cannot be used (absent, or it cannot start a container here).
fn podman(dir: &Path, archive: &Path) -> Result<Runner, String> {
    if common::which("podman").is_none() {
        return Err("podman is not installed".into());
    }
    let store = dir.join("podman");
    let loaded = podman_cmd(&store)
        .args(["load", "-q", "-i"])
        .arg(archive)
        .output()
        .map_err(|e| e.to_string())?;
    let said = String::from_utf8_lossy(&loaded.stdout).into_owned();
    let Some(image) = said.lines().find_map(|l| l.strip_prefix("Loaded image: ")) else {
        return Err(format!("podman load: {}", text(&loaded).trim()));
    };
    let image = image.trim().to_string();
    let name = format!("localhost/npu-agent:{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(image, name, "the name podman load gives the image");
    // podman's defaults first (crun); then runc, which takes hybrid cgroup hierarchies that crun
    // refuses, with rlimits this process may give (podman's default RLIMIT_NOFILE of 1048576 needs
    // CAP_SYS_RESOURCE where the hard limit is lower).
    let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let (soft, hard) = (
        nofile.current.unwrap_or(1024),
        nofile.maximum.unwrap_or(1024),
    );
    let mut tries = vec![Vec::new()];
    if let Some(runc) = common::which("runc") {
        tries.push(vec![
            format!("--runtime={}", runc.display()),
            format!("--ulimit=nofile={soft}:{hard}"),
            "--ulimit=nproc=4096:4096".to_string(),
        ]);
    }
    let mut why = Vec::new();
    for options in tries {
        let runtime = if options.is_empty() { "crun" } else { "runc" };
        let r = Runner::Podman {
            store: store.clone(),
            image: image.clone(),
            options,
        };
        let o = run(&r, &[], &[], &["--version"]);
        if o.status.success() {
            common::say(&format!("container: runs under podman ({runtime})"));
            return Ok(r);
        }
        let last = text(&o).lines().last().unwrap_or_default().to_string();
        why.push(format!("{runtime}: {last}"));
    }
    Err(why.join("; "))
}

fn bwrap_runner(bundle: &Path, config: &Value) -> Runner {
    let args = config["process"]["args"].as_array().expect("process.args");
    let env = config["process"]["env"]
        .as_array()
        .expect("process.env")
        .iter()
        .filter_map(|v| v.as_str()?.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Runner::Bwrap {
        rootfs: bundle.join("rootfs"),
        entrypoint: args[0].as_str().unwrap().to_string(),
        env,
    }
}

/// Runs the image with `mounts`, extra `env` and `args` in place of its command (the host's
/// network is shared: the daemon test's broker listens on the host's loopback).
fn command(r: &Runner, mounts: &[Mount<'_>], env: &[(&str, &str)], args: &[&str]) -> Command {
    match r {
        Runner::Podman {
            store,
            image,
            options,
        } => {
            let mut c = podman_cmd(store);
            c.args(["run", "--rm", "--pull", "never", "--network", "host"]);
            c.args(options);
            for Mount(host, inside, rw) in mounts {
                let mode = if *rw { "rw" } else { "ro" };
                c.arg("-v")
                    .arg(format!("{}:{inside}:{mode}", host.display()));
            }
            for (k, v) in env {
                c.arg("-e").arg(format!("{k}={v}"));
            }
            c.arg(image).args(args);
            c
        }
        Runner::Bwrap {
            rootfs,
            entrypoint,
            env: image_env,
        } => {
            let mut c = Command::new("bwrap");
            c.args(["--unshare-pid", "--unshare-ipc", "--unshare-uts"])
                .args(["--unshare-cgroup-try", "--die-with-parent"])
                .arg("--ro-bind")
                .arg(rootfs)
                .arg("/");
            for Mount(host, inside, rw) in mounts {
                c.arg(if *rw { "--bind" } else { "--ro-bind" })
                    .arg(host)
                    .arg(inside);
            }
            c.args(["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"])
                .args(["--chdir", "/", "--clearenv"]);
            for (k, v) in image_env
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .chain(env.iter().copied())
            {
                c.args(["--setenv", k, v]);
            }
            c.arg(entrypoint).args(args);
            c.stdin(Stdio::null());
            c
        }
    }
}

/// Ends what a killed `podman run` left running (conmon keeps a container after its client).
fn stop_all(r: &Runner) {
    if let Runner::Podman { store, .. } = r {
        let o = podman_cmd(store)
            .args(["rm", "--force", "--all", "--time", "0"])
            .output()
            .expect("podman rm");
        assert!(o.status.success(), "podman rm: {}", text(&o));
    }
}

fn run(r: &Runner, mounts: &[Mount<'_>], env: &[(&str, &str)], args: &[&str]) -> Output {
    command(r, mounts, env, args)
        .output()
        .expect("run the image")
}

/// (health, profile, [(check id, status)]) of a `check --format json` report.
fn verdicts(report: &Value) -> (Value, Value, Vec<(String, String)>) {
    let findings = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            (
                f["id"].as_str().unwrap().to_string(),
                f["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (
        report["health"].clone(),
        report["profile"].clone(),
        findings,
    )
}

fn fixture(case: &str) -> PathBuf {
    common::manifest_dir()
        .join("tests/fixtures/boards")
        .join(case)
        .join("root")
}

/// Board trees of each kind: healthy Hailo and RKNPU boards, Home Assistant OS with an add-on,
/// Docker container logs, a package mix-up, a 16k-page kernel and a power fault.
const CASES: [&str; 7] = [
    "own-pi5-hailo8-4.23-healthy",
    "own-rk3588-opi5plus-rknpu-0.9.8-healthy",
    "own-pi5-haos-hailo8l-held-by-second-addon-status-74",
    "own-rk3588-rkllama-docker-nofile-1024-errno-24",
    "pi5-hailo10h-mixed-4.x-and-5.x-userland",
    "own-pi5-hailo8-16k-pages-max-desc-page-size",
    "own-pi5-hailo8-3a-supply-old-bootloader-gen3-link-errors",
];

#[test]
fn the_image_runs_the_agent_with_the_host_at_slash_host() {
    let Some(img) = image() else { return };
    let p = &img.config["process"];
    let args: Vec<&str> = p["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args, ["/usr/bin/npu-agent", "run", "--root", "/host"]);
    let env: Vec<&str> = p["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(env.contains(&"container=oci"), "{env:?}");
    let o = run(&img.runner, &[], &[], &["--version"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("npu-agent {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn check_in_the_image_gives_the_verdicts_of_check_root_on_each_tree() {
    let Some(img) = image() else { return };
    for case in CASES {
        let tree = fixture(case);
        let host = Command::new(common::host_agent())
            .args(["check", "--format", "json", "--root"])
            .arg(&tree)
            .output()
            .unwrap();
        let inside = run(
            &img.runner,
            &[Mount(&tree, "/host", false)],
            &[],
            &["check", "--format", "json", "--root", "/host"],
        );
        let parse = |o: &Output, who: &str| -> Value {
            serde_json::from_slice(&o.stdout)
                .unwrap_or_else(|e| panic!("{case}: {who} printed no report ({e}): {}", text(o)))
        };
        let (h, c) = (parse(&host, "host"), parse(&inside, "container"));
        let (hv, cv) = (verdicts(&h), verdicts(&c));
        assert!(!hv.2.is_empty(), "{case}: no findings");
        assert_eq!(cv, hv, "{case}: the container's verdicts differ");
        assert_eq!(
            inside.status.code(),
            host.status.code(),
            "{case}: exit codes"
        );
    }
    common::say(&format!(
        "container: {} board trees, the image's verdicts == check --root",
        CASES.len()
    ));
}

/// A copy of `case`'s tree with the image's state volume's mount point and, as on a board, /etc.
fn tree_copy(case: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let ok = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", fixture(case).display()))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(ok.success());
    std::fs::create_dir_all(dir.path().join("var/lib/npu-agent")).unwrap();
    std::fs::create_dir_all(dir.path().join("etc/modprobe.d")).unwrap();
    dir
}

#[test]
fn fix_in_the_image_refuses_a_read_only_host_and_says_what_to_run_there() {
    let Some(img) = image() else { return };
    let tree = tree_copy("own-pi5-hailo8-16k-pages-max-desc-page-size");
    let state = tempfile::tempdir().unwrap();
    let conf = tree.path().join("etc/modprobe.d/hailo_pci.conf");
    let before = std::fs::read(&conf).ok();
    let fix = |host_rw: bool| {
        run(
            &img.runner,
            &[
                Mount(tree.path(), "/host", host_rw),
                Mount(state.path(), "/host/var/lib/npu-agent", true),
            ],
            &[],
            &["fix", "--yes", "--root", "/host"],
        )
    };
    let o = fix(false);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        err.contains("/etc/modprobe.d/hailo_pci.conf is the host's and cannot be written from this container"),
        "{err}"
    );
    assert!(err.contains("mount the host's /etc read-write"), "{err}");
    assert!(err.contains("container=oci"), "{err}");
    assert!(
        err.contains("`sudo npu-agent fix` in a shell on the host"),
        "{err}"
    );
    assert!(err.contains("nothing was changed"), "{err}");
    assert_eq!(std::fs::read(&conf).ok(), before, "the host file changed");
    // The boot files too: `cma set` is refused before its backup is written.
    let boot = tree.path().join("boot/firmware/config.txt");
    let boot_before = std::fs::read(&boot).unwrap();
    let o = run(
        &img.runner,
        &[
            Mount(tree.path(), "/host", false),
            Mount(state.path(), "/host/var/lib/npu-agent", true),
        ],
        &[],
        &["cma", "set", "512M", "--root", "/host"],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("refused: /boot/firmware/config.txt is the host's and cannot be written from this container"),
        "{out}"
    );
    assert!(out.contains("mount the host's /boot read-write"), "{out}");
    assert_eq!(std::fs::read(&boot).unwrap(), boot_before);
    let names: Vec<_> = std::fs::read_dir(boot.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "no backup or temp file: {names:?}");
    // The host layout allows it: the host's files mounted writable, the fix is carried out.
    let o = fix(true);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let now = std::fs::read_to_string(&conf).expect("the modprobe.d file written");
    assert!(now.contains("options hailo_pci"), "{now}");
}

/// A started image, stopped (and its podman container removed) when dropped.
struct Started<'a> {
    child: std::process::Child,
    runner: &'a Runner,
}

impl Drop for Started<'_> {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        stop_all(self.runner);
    }
}

#[test]
fn run_in_the_image_reports_the_host_tree_over_mqtt_and_rejects_a_boot_edit() {
    if !require_tool("mosquitto") {
        return;
    }
    let Some(img) = image() else { return };
    let broker = Broker::start();
    let board = Board::from_fixture("own-pi5-hailo8-4.23-healthy", "ctr1", "");
    std::fs::create_dir_all(board.root().join("var/lib/npu-agent")).unwrap();
    let config_txt = board.read("/boot/firmware/config.txt").expect("config.txt");
    let state = tempfile::tempdir().unwrap();
    let observer = Client::connect(broker.port, &["lab/ctr1/status", "lab/ctr1/cmd/#"]);
    let url = broker.url();
    let env = [
        ("NPU_AGENT_MQTT_URL", url.as_str()),
        ("NPU_AGENT_MQTT_TOPIC_ROOT", "lab"),
        ("NPU_AGENT_BOARD_ID", "ctr1"),
        ("NPU_AGENT_REPORT_INTERVAL_S", "2"),
        // Unsigned here so the test needs no key: the refusal is the container's, not the gate's.
        (
            "NPU_AGENT_SECURITY_ALLOW_UNSIGNED",
            r#"["compact", "rescan", "set_cma"]"#,
        ),
    ];
    let mounts = [
        Mount(board.root(), "/host", false),
        Mount(state.path(), "/host/var/lib/npu-agent", true),
    ];
    // The image's own command: `run --root /host` (bwrap runs the entrypoint with it).
    let mut cmd = command(&img.runner, &mounts, &env, &["run", "--root", "/host"]);
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the image");
    let _started = Started {
        child,
        runner: &img.runner,
    };
    let m = observer.wait_for(
        Duration::from_secs(60),
        "a status from the container",
        |m| m.topic == "lab/ctr1/status" && m.json()["health"].is_string(),
    );
    let status = m.json();
    assert_eq!(status["profile"], "rpi5-hailo8", "{status}");
    assert_eq!(status["board_id"], "ctr1", "{status}");
    // The daemon's state went to the mounted state directory, not to the read-only host.
    assert!(
        std::fs::read_dir(state.path()).unwrap().next().is_some(),
        "nothing in the state directory"
    );
    // A remote boot-file edit is rejected before `executing`, with what to run on the host.
    let topic = "lab/ctr1/cmd/set_cma/ctr-cma-1";
    let init = init_payload(
        "ctr1",
        "set_cma",
        "ctr-cma-1",
        json!({"size": "512M"}),
        now_s(),
        120,
        None,
    );
    observer.publish(topic, &init, false);
    let answer = observer.wait_for(Duration::from_secs(60), "the set_cma answer", |m| {
        m.topic == topic && m.json()["status"] != "init"
    });
    let a = answer.json();
    assert_eq!(a["status"], "rejected", "{a}");
    let reason = a["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(
            "/boot/firmware/config.txt is the host's and cannot be written from this container"
        ),
        "{a}"
    );
    assert_eq!(board.read("/boot/firmware/config.txt").unwrap(), config_txt);
}
