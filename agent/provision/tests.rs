//! Unit tests for provisioning: parsing, validation, writes and rollback.

use super::*;
use std::fs;
use std::io;

fn signing_key() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[7u8; 32])
}

fn key_pem() -> String {
    use ed25519_dalek::pkcs8::{spki::der::pem::LineEnding, EncodePrivateKey};
    signing_key()
        .to_pkcs8_pem(LineEnding::LF)
        .unwrap()
        .to_string()
}

fn pub_pem() -> String {
    use ed25519_dalek::pkcs8::{spki::der::pem::LineEnding, EncodePublicKey};
    signing_key()
        .verifying_key()
        .to_public_key_pem(LineEnding::LF)
        .unwrap()
}

fn cert_pem() -> String {
    let k = rcgen::KeyPair::generate().unwrap();
    rcgen::CertificateParams::new(vec!["broker.test".into()])
        .unwrap()
        .self_signed(&k)
        .unwrap()
        .pem()
}

fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for (p, t) in files {
        let path = d.path().join(p.trim_start_matches('/'));
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, t).unwrap();
    }
    d
}

fn read(d: &tempfile::TempDir, p: &str) -> Option<String> {
    fs::read_to_string(d.path().join(p.trim_start_matches('/'))).ok()
}

fn mode(d: &tempfile::TempDir, p: &str) -> u32 {
    fs::metadata(d.path().join(p.trim_start_matches('/')))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

fn full_file(cert: &str) -> String {
    format!(
            "board_id = \"line3-cam2\"\n\n[mqtt]\nurl = \"mqtts://broker.example.net:8883\"\nusername = \"line3-cam2\"\n\n\
             [security]\nallow_unsigned = [\"compact\"]\n\n[secrets]\nmqtt_password = \"s3cr3t-pw\"\nmqtt_key = \"\"\"\n{key}\"\"\"\n\n\
             [files]\nmqtt_ca = \"\"\"\n{cert}\"\"\"\nmqtt_cert = \"\"\"\n{cert}\"\"\"\ntrusted_keys = [\"\"\"\n{pubk}\"\"\"]\n",
            key = key_pem(),
            pubk = pub_pem()
        )
}

#[test]
fn no_file_is_no_outcome() {
    let d = tree(&[("/etc/npu-agent/agent.toml", "")]);
    let o = provision(&SysRoot::new(d.path()));
    assert_eq!(o, ProvisionOutcome::NoFile);
    assert_eq!(o.finding(), None);
    assert!(!d.path().join("etc/npu-agent/agent.d").exists());
}

#[test]
fn full_file_is_moved_with_secrets_0600_and_references() {
    let cert = cert_pem();
    let d = tree(&[
        ("/boot/firmware/npu-agent.toml", &full_file(&cert)),
        ("/boot/firmware/config.txt", "dtparam=pciex1\n"),
    ]);
    let root = SysRoot::new(d.path());
    let o = provision_with(&root, &mut RealStorage, "2025-01-02T03:04:05Z");
    let ProvisionOutcome::Applied {
        plan,
        boot_file_removed,
        note,
    } = &o
    else {
        panic!("{o:?}")
    };
    assert!(*boot_file_removed, "{note:?}");
    assert_eq!(plan.source, "/boot/firmware/npu-agent.toml");
    assert_eq!(
        plan.secrets,
        vec![
            "/etc/npu-agent/secrets/mqtt-password",
            "/etc/npu-agent/secrets/mqtt-client.key"
        ]
    );
    assert_eq!(
        plan.files,
        vec![
            "/etc/npu-agent/provisioned/mqtt-ca.pem",
            "/etc/npu-agent/provisioned/mqtt-client.pem",
            "/etc/npu-agent/provisioned/trusted-key-1.pub"
        ]
    );
    assert_eq!(
        plan.keys,
        vec![
            "board_id",
            "mqtt.ca_file",
            "mqtt.cert_file",
            "mqtt.key_file",
            "mqtt.password_file",
            "mqtt.url",
            "mqtt.username",
            "security.allow_unsigned",
            "security.trusted_keys"
        ]
    );
    // The boot file is gone, its neighbours untouched.
    assert!(read(&d, "/boot/firmware/npu-agent.toml").is_none());
    assert_eq!(
        read(&d, "/boot/firmware/config.txt").unwrap(),
        "dtparam=pciex1\n"
    );
    // Secrets: 0600 in a 0700 directory, exact content.
    assert_eq!(
        read(&d, "/etc/npu-agent/secrets/mqtt-password").unwrap(),
        "s3cr3t-pw\n"
    );
    assert_eq!(mode(&d, "/etc/npu-agent/secrets/mqtt-password"), 0o600);
    assert_eq!(
        read(&d, "/etc/npu-agent/secrets/mqtt-client.key").unwrap(),
        key_pem()
    );
    assert_eq!(mode(&d, "/etc/npu-agent/secrets/mqtt-client.key"), 0o600);
    assert_eq!(mode(&d, "/etc/npu-agent/secrets"), 0o700);
    assert_eq!(
        read(&d, "/etc/npu-agent/provisioned/mqtt-ca.pem").unwrap(),
        cert
    );
    assert_eq!(
        read(&d, "/etc/npu-agent/provisioned/trusted-key-1.pub").unwrap(),
        pub_pem()
    );
    // The drop-in references them and holds no secret.
    let dropin = read(&d, DROPIN).unwrap();
    assert!(dropin.starts_with("# Written by npu-agent "), "{dropin}");
    assert!(dropin.contains(
        "at 2025-01-02T03:04:05Z from the first-boot file /boot/firmware/npu-agent.toml"
    ));
    assert!(
        !dropin.contains("s3cr3t-pw")
            && !dropin.contains("PRIVATE KEY")
            && !dropin.contains("[secrets]")
            && !dropin.contains("[files]"),
        "{dropin}"
    );
    // ... and loads as the effective config.
    let (c, s) = config::load(&root, None, &[]).unwrap();
    assert_eq!(s.applied, vec![DROPIN.to_string()]);
    assert_eq!(c.board_id, "line3-cam2");
    assert_eq!(c.mqtt.url, "mqtts://broker.example.net:8883");
    assert_eq!(c.mqtt.username, "line3-cam2");
    assert_eq!(c.mqtt.password_file, "/etc/npu-agent/secrets/mqtt-password");
    assert_eq!(c.mqtt.key_file, "/etc/npu-agent/secrets/mqtt-client.key");
    assert_eq!(c.mqtt.ca_file, "/etc/npu-agent/provisioned/mqtt-ca.pem");
    assert_eq!(
        c.mqtt.cert_file,
        "/etc/npu-agent/provisioned/mqtt-client.pem"
    );
    assert_eq!(
        c.security.trusted_keys,
        vec!["/etc/npu-agent/provisioned/trusted-key-1.pub"]
    );
    assert_eq!(c.security.allow_unsigned, vec!["compact"]);
    // The status finding is info and names the files, never a secret.
    let f = o.finding().unwrap();
    assert_eq!((f.id.as_str(), f.status), (FINDING_ID, Status::Info));
    let js = serde_json::to_string(&f).unwrap();
    assert!(
        !js.contains("s3cr3t-pw") && js.contains("mqtt-password"),
        "{js}"
    );
    // Nothing left on a second start.
    assert_eq!(provision(&root), ProvisionOutcome::NoFile);
}

#[test]
fn armbian_location_and_trusted_keys_append_to_given_paths() {
    let text = format!("[security]\ntrusted_keys = [\"/etc/npu-agent/ops.pub\"]\n\n[files]\ntrusted_keys = [\"\"\"{pubk}\"\"\", \"\"\"{pubk}\"\"\"]\n", pubk = pub_pem());
    let d = tree(&[("/boot/npu-agent.toml", &text)]);
    let root = SysRoot::new(d.path());
    let o = provision(&root);
    assert!(
        matches!(&o, ProvisionOutcome::Applied { plan, boot_file_removed: true, .. } if plan.source == "/boot/npu-agent.toml"),
        "{o:?}"
    );
    let (c, _) = config::load(&root, None, &[]).unwrap();
    assert_eq!(
        c.security.trusted_keys,
        vec![
            "/etc/npu-agent/ops.pub",
            "/etc/npu-agent/provisioned/trusted-key-1.pub",
            "/etc/npu-agent/provisioned/trusted-key-2.pub"
        ]
    );
    // No secrets given: no secrets directory made.
    assert!(!d.path().join("etc/npu-agent/secrets").exists());
}

fn assert_invalid(text: &str, line: Option<usize>, needle: &str) {
    let d = tree(&[
        ("/boot/firmware/npu-agent.toml", text),
        (
            "/etc/npu-agent/agent.d/90-provisioned.toml",
            "board_id = \"old\"\n",
        ),
    ]);
    let root = SysRoot::new(d.path());
    let o = provision(&root);
    let ProvisionOutcome::Invalid {
        source,
        line: l,
        message,
    } = &o
    else {
        panic!("{text}: {o:?}")
    };
    assert_eq!(source, "/boot/firmware/npu-agent.toml");
    assert_eq!(*l, line, "{text}: {message}");
    assert!(message.contains(needle), "{text}: {message}");
    assert!(!message.contains("s3cr3t-pw"), "{message}");
    // Left in place, nothing applied.
    assert_eq!(read(&d, "/boot/firmware/npu-agent.toml").unwrap(), text);
    assert_eq!(read(&d, DROPIN).unwrap(), "board_id = \"old\"\n");
    assert!(!d.path().join("etc/npu-agent/secrets").exists());
    let f = o.finding().unwrap();
    assert_eq!(f.status, Status::Error);
    assert!(
        f.summary
            .contains("left in place and nothing from it was applied"),
        "{}",
        f.summary
    );
    assert_eq!(f.evidence[0].line, line);
}

#[test]
fn broken_files_are_left_in_place_and_named_by_line() {
    // Unknown config key, same message as agent.toml.
    assert_invalid("[mqtt]\nurl = \"mqtt://b:1883\"\npasword_file = \"/x\"\n[secrets]\nmqtt_password = \"s3cr3t-pw\"\n", Some(3), "unknown key `pasword_file`");
    // Unknown key in [secrets].
    assert_invalid(
        "[mqtt]\nurl = \"mqtt://b:1883\"\n[secrets]\nmqtt_pasword = \"s3cr3t-pw\"\n",
        Some(4),
        "unknown key `mqtt_pasword`",
    );
    // TOML syntax.
    assert_invalid("board_id = \"a\"\n[mqtt\nurl = 1\n", Some(2), "");
    // Wrong type.
    assert_invalid("[report]\ninterval_s = \"often\"\n", Some(2), "");
    // A value config validation refuses.
    assert_invalid(
        "[security]\nallow_unsigned = [\"format_disk\"]\n",
        None,
        "format_disk",
    );
    // A bad broker URL.
    assert_invalid(
        "\n[mqtt]\nurl = \"http://broker\"\n",
        Some(3),
        "mqtt:// or mqtts://",
    );
    // A secret both inline and by reference.
    assert_invalid(
        "[mqtt]\npassword_file = \"/etc/pw\"\n[secrets]\nmqtt_password = \"s3cr3t-pw\"\n",
        Some(4),
        "both given",
    );
    // Content that is not what it claims.
    assert_invalid(
        "[secrets]\nmqtt_key = \"s3cr3t-pw\"\n",
        Some(2),
        "not a PEM private key",
    );
    assert_invalid(
        "[files]\nmqtt_ca = \"\"\"\nnot a cert\n\"\"\"\n",
        Some(2),
        "holds no PEM certificate",
    );
    assert_invalid(
        "[files]\ntrusted_keys = [\"nope\"]\n",
        Some(2),
        "files.trusted_keys[0]",
    );
    assert_invalid("[secrets]\nmqtt_password = \"\"\n", Some(2), "is empty");
    assert_invalid(
        "[secrets]\nmqtt_password = \"a\\nb\"\n",
        Some(2),
        "one line",
    );
}

#[test]
fn a_secret_in_a_wrong_place_is_not_echoed() {
    // A password put where a number goes: toml's message would quote it.
    let text = "[report]\ninterval_s = \"s3cr3t-pw\"\n[secrets]\nmqtt_password = \"s3cr3t-pw\"\n";
    assert_invalid(text, Some(2), "(value hidden)");
    // An unquoted numeric password, and a private key pasted on one line.
    let text = "[secrets]\nmqtt_password = 918273645\n";
    let o = prepare("/boot/npu-agent.toml", text, "t").err().unwrap();
    assert!(!format!("{o:?}").contains("918273645"), "{o:?}");
    let pasted = "MC4CAQAwBQYDK2VwBCIEIPasted0KeyMaterialOnOneLine0000000000";
    let text = format!("[secrets]\nmqtt_key = \"{pasted}\"\n");
    let o = prepare("/boot/npu-agent.toml", &text, "t").err().unwrap();
    let shown = format!("{o:?}");
    assert!(
        !shown.contains(pasted) && !shown.contains("77, 67, 52"),
        "{shown}"
    );
    let bytes: Vec<String> = pasted.bytes().take(6).map(|b| b.to_string()).collect();
    assert!(!shown.contains(&bytes.join(", ")), "{shown}");
}

#[test]
fn two_files_and_non_utf8_are_invalid() {
    let d = tree(&[
        ("/boot/firmware/npu-agent.toml", "board_id = \"a\"\n"),
        ("/boot/npu-agent.toml", "board_id = \"b\"\n"),
    ]);
    let o = provision(&SysRoot::new(d.path()));
    assert!(
        matches!(&o, ProvisionOutcome::Invalid { source, .. } if source == "/boot/firmware/npu-agent.toml and /boot/npu-agent.toml"),
        "{o:?}"
    );
    assert!(
        d.path().join("boot/npu-agent.toml").exists()
            && d.path().join("boot/firmware/npu-agent.toml").exists()
    );
    assert_eq!(
        o.finding().unwrap().evidence[0].file,
        "/boot/firmware/npu-agent.toml"
    );

    let d = tempfile::tempdir().unwrap();
    fs::create_dir_all(d.path().join("boot")).unwrap();
    fs::write(
        d.path().join("boot/npu-agent.toml"),
        b"board_id = \"a\"\n# caf\xe9\n",
    )
    .unwrap();
    let o = provision(&SysRoot::new(d.path()));
    assert!(
        matches!(&o, ProvisionOutcome::Invalid { line: Some(2), message, .. } if message.contains("UTF-8")),
        "{o:?}"
    );
}

#[test]
fn comments_only_file_is_applied_as_no_settings() {
    let d = tree(&[("/boot/npu-agent.toml", "# nothing yet\n")]);
    let root = SysRoot::new(d.path());
    let o = provision(&root);
    let ProvisionOutcome::Applied { plan, .. } = &o else {
        panic!("{o:?}")
    };
    assert!(plan.keys.is_empty());
    assert!(o.describe().unwrap().contains("no settings"));
    assert_eq!(
        config::load(&root, None, &[]).unwrap().0,
        config::Config::default()
    );
}

#[test]
fn inspect_writes_nothing() {
    let cert = cert_pem();
    let d = tree(&[("/boot/firmware/npu-agent.toml", &full_file(&cert))]);
    let o = inspect(&SysRoot::new(d.path()));
    let ProvisionOutcome::Pending { plan } = &o else {
        panic!("{o:?}")
    };
    assert_eq!(plan.secrets.len(), 2);
    assert!(d.path().join("boot/firmware/npu-agent.toml").exists());
    assert!(!d.path().join("etc").exists());
    assert!(print_config_note(&o)
        .starts_with("# first-boot file /boot/firmware/npu-agent.toml is valid"));
    assert_eq!(print_config_note(&ProvisionOutcome::NoFile), "");
}

/// Real storage that fails (ENOSPC) at operation number `fail_at`, once.
struct FailAt {
    n: usize,
    fail_at: usize,
}

impl FailAt {
    fn tick(&mut self) -> io::Result<()> {
        self.n += 1;
        if self.n - 1 == self.fail_at {
            Err(io::Error::from_raw_os_error(28))
        } else {
            Ok(())
        }
    }
}

impl Storage for FailAt {
    fn create(
        &mut self,
        path: &Path,
        mode: u32,
    ) -> io::Result<Box<dyn crate::action::atomic::StorageFile>> {
        self.tick()?;
        RealStorage.create(path, mode)
    }
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        self.tick()?;
        RealStorage.rename(from, to)
    }
    fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        self.tick()?;
        RealStorage.sync_dir(dir)
    }
    fn remove_file(&mut self, path: &Path) -> io::Result<()> {
        self.tick()?;
        RealStorage.remove_file(path)
    }
}

fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, u32)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let m = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
                out.push((
                    p.strip_prefix(dir).unwrap().display().to_string(),
                    fs::read(&p).unwrap(),
                    m,
                ));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_failed_write_at_any_step_applies_nothing() {
    let cert = cert_pem();
    let boot = full_file(&cert);
    let old: &[(&str, &str)] = &[
            ("/boot/firmware/npu-agent.toml", &boot),
            ("/etc/npu-agent/agent.toml", "# packaged\n"),
            ("/etc/npu-agent/agent.d/90-provisioned.toml", "board_id = \"old\"\n[mqtt]\npassword_file = \"/etc/npu-agent/secrets/mqtt-password\"\n"),
            ("/etc/npu-agent/secrets/mqtt-password", "old-password\n"),
        ];
    let mut applied_at = None;
    for fail_at in 0..200 {
        let d = tree(old);
        let before = snapshot(d.path());
        let root = SysRoot::new(d.path());
        let mut st = FailAt { n: 0, fail_at };
        let o = provision_with(&root, &mut st, "2025-01-02T03:04:05Z");
        match &o {
            ProvisionOutcome::Failed { source, message } => {
                assert_eq!(source, "/boot/firmware/npu-agent.toml");
                assert!(message.contains("no space left"), "{message}");
                assert_eq!(
                    snapshot(d.path()),
                    before,
                    "fault at op {fail_at} left a change"
                );
                assert_eq!(o.finding().unwrap().status, Status::Fail);
            }
            ProvisionOutcome::Applied {
                boot_file_removed: false,
                note,
                ..
            } => {
                // The fault hit the removal of the boot file: applied, and said so.
                assert!(
                    note.as_deref().unwrap().contains("No space left"),
                    "{note:?}"
                );
                assert!(d.path().join("boot/firmware/npu-agent.toml").exists());
                assert_eq!(
                    read(&d, "/etc/npu-agent/secrets/mqtt-password").unwrap(),
                    "s3cr3t-pw\n"
                );
                assert_eq!(o.finding().unwrap().status, Status::Warn);
            }
            ProvisionOutcome::Applied {
                boot_file_removed: true,
                ..
            } => {
                // Past the last operation (or a fault in the ignored boot-dir fsync).
                assert!(!d.path().join("boot/firmware/npu-agent.toml").exists());
                assert!(read(&d, DROPIN).unwrap().contains("line3-cam2"));
                if st.n <= fail_at {
                    applied_at = Some(fail_at);
                    break;
                }
            }
            other => panic!("op {fail_at}: {other:?}"),
        }
    }
    // 6 files x (create, rename, directory fsync), the removal and its directory fsync.
    assert_eq!(applied_at, Some(20));
}

#[test]
fn the_status_shows_the_outcome_first_once_and_sets_health() {
    use crate::report::status::{daemon_status, DaemonFacts};
    let r: crate::report::Report = serde_json::from_value(serde_json::json!({
        "schema": 1, "board_id": "b", "profile": "generic", "profile_reason": "", "model": "m",
        "agent_version": "0", "time": "", "boot_id": "", "uptime_s": null, "session": 0,
        "health": "ok", "metrics": {}, "reboot_required": false, "last_action": null,
        "findings": [
            {"id": "board.identity", "status": "pass", "summary": ""},
            {"id": "agent.alpha", "status": "pass", "summary": ""}
        ]
    }))
    .unwrap();
    let invalid = ProvisionOutcome::Invalid {
        source: "/boot/npu-agent.toml".into(),
        line: Some(3),
        message: "x".into(),
    };
    let facts = DaemonFacts {
        provisioning: invalid.finding(),
        ..DaemonFacts::default()
    };
    let once = daemon_status(&r, &facts);
    let twice = daemon_status(&once, &facts);
    let ids: Vec<&str> = twice.findings.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(
        ids,
        vec!["agent.provisioning", "board.identity", "agent.alpha"]
    );
    assert_eq!(twice.health, crate::report::Health::Warn);
    let facts = DaemonFacts {
        provisioning: ProvisionOutcome::NoFile.finding(),
        ..DaemonFacts::default()
    };
    let r2 = daemon_status(&r, &facts);
    assert_eq!(r2.findings.len(), 2);
    assert_eq!(r2.health, crate::report::Health::Ok);
}

#[test]
fn the_boot_file_is_zeroed_in_place_before_it_is_removed() {
    let text = "board_id = \"cam-9\"\n[secrets]\nmqtt_password = \"pw-in-the-clusters\"\n";
    let d = tree(&[("/boot/firmware/npu-agent.toml", text)]);
    // A second name for the same inode sees what the unlinked file's blocks held.
    let other = d.path().join("inode-view");
    fs::hard_link(d.path().join("boot/firmware/npu-agent.toml"), &other).unwrap();
    let o = provision(&SysRoot::new(d.path()));
    assert!(
        matches!(
            o,
            ProvisionOutcome::Applied {
                boot_file_removed: true,
                ..
            }
        ),
        "{o:?}"
    );
    assert_eq!(read(&d, "/boot/firmware/npu-agent.toml"), None);
    let left = fs::read(&other).unwrap();
    assert_eq!(left.len(), text.len());
    assert!(left.iter().all(|b| *b == 0), "{left:?}");
}

#[test]
fn a_symlinked_boot_file_is_unlinked_and_its_target_kept() {
    let d = tree(&[("/elsewhere/keep.toml", "board_id = \"cam-3\"\n")]);
    fs::create_dir_all(d.path().join("boot")).unwrap();
    std::os::unix::fs::symlink(
        "../elsewhere/keep.toml",
        d.path().join("boot/npu-agent.toml"),
    )
    .unwrap();
    let o = provision(&SysRoot::new(d.path()));
    assert!(matches!(o, ProvisionOutcome::Applied { .. }), "{o:?}");
    assert_eq!(
        read(&d, "/elsewhere/keep.toml").as_deref(),
        Some("board_id = \"cam-3\"\n")
    );
}

#[test]
fn a_file_notepad_saved_as_toml_txt_is_taken() {
    let d = tree(&[(
        "/boot/firmware/npu-agent.toml.txt",
        "board_id = \"cam-5\"\n",
    )]);
    let root = SysRoot::new(d.path());
    let o = provision(&root);
    let ProvisionOutcome::Applied { plan, .. } = &o else {
        panic!("{o:?}")
    };
    assert_eq!(plan.source, "/boot/firmware/npu-agent.toml.txt");
    assert_eq!(config::load(&root, None, &[]).unwrap().0.board_id, "cam-5");
    assert_eq!(read(&d, "/boot/firmware/npu-agent.toml.txt"), None);
}

/// Issue 37 item 1: a first-boot file whose broker list mixes mqtts:// and mqtt:// with an
/// inline password is refused (the password never shown); the same list alone is provisioned.
#[test]
fn a_mixed_broker_list_with_an_inline_password_is_refused() {
    let text = "[mqtt]\nurl = \"mqtts://a:8883,mqtt://b:1883\"\n[secrets]\nmqtt_password = \"BootPw-37x\"\n";
    let e = match prepare("/boot/npu-agent.toml", text, "now") {
        Err(o) => *o,
        Ok(_) => panic!("provisioned a mixed list with a password"),
    };
    let ProvisionOutcome::Invalid { message, .. } = &e else {
        panic!("{e:?}")
    };
    assert!(message.contains("mixes mqtts:// and mqtt://"), "{message}");
    assert!(!format!("{e:?}").contains("BootPw-37x"), "{e:?}");
    let plain = "[mqtt]\nurl = \"mqtts://a:8883,mqtt://b:1883\"\n";
    assert!(prepare("/boot/npu-agent.toml", plain, "now").is_ok());
}
