use super::layer::*;
use super::*;

fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for (p, t) in files {
        let path = d.path().join(p.trim_start_matches('/'));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, t).unwrap();
    }
    d
}

#[test]
fn layers_merge_in_order() {
    let d = tree(&[
        (
            "/etc/npu-agent/agent.toml",
            "board_id = \"b1\"\n[mqtt]\nurl = \"mqtt://broker:1883\"\nkeep_alive_s = 20\n",
        ),
        (
            "/etc/npu-agent/agent.d/10-a.toml",
            "[mqtt]\nkeep_alive_s = 15\n",
        ),
        (
            "/etc/npu-agent/agent.d/20-b.toml",
            "[report]\ninterval_s = 5\n",
        ),
        (
            "/etc/npu-agent/agent.d/90-provisioned.toml",
            "board_id = \"from-boot\"\n",
        ),
        // Not a layer: provisioning moves it into agent.d/ before the config is loaded.
        (
            "/boot/firmware/npu-agent.toml",
            "board_id = \"unapplied\"\n",
        ),
    ]);
    let env = vec![
        ("NPU_AGENT_MQTT_TOPIC_ROOT".to_string(), "lab".to_string()),
        ("NPU_AGENT_ACTIONS_ALLOW_REBOOT".into(), "true".into()),
    ];
    let (c, s) = load(&SysRoot::new(d.path()), None, &env).unwrap();
    assert_eq!(c.board_id, "from-boot");
    assert_eq!(c.mqtt.url, "mqtt://broker:1883");
    assert_eq!(c.mqtt.keep_alive_s, 15);
    assert_eq!(c.report.interval_s, 5);
    assert_eq!(c.mqtt.topic_root, "lab");
    assert!(c.actions.allow_reboot);
    assert_eq!(s.applied.len(), 5);
}

#[test]
fn mqtt_protocol_from_file_and_environment() {
    let d = tempfile::tempdir().unwrap();
    let (c, _) = load(&SysRoot::new(d.path()), None, &[]).unwrap();
    assert_eq!(c.mqtt.protocol, "auto");
    for (value, want) in [("3.1.1", "3.1.1"), ("5", "5"), ("auto", "auto")] {
        let env = vec![("NPU_AGENT_MQTT_PROTOCOL".to_string(), value.to_string())];
        let (c, _) = load(&SysRoot::new(d.path()), None, &env).unwrap();
        assert_eq!(c.mqtt.protocol, want);
    }
    let env = vec![("NPU_AGENT_MQTT_PROTOCOL".to_string(), "4".to_string())];
    let e = load(&SysRoot::new(d.path()), None, &env).unwrap_err();
    assert!(e.message.contains("mqtt.protocol"), "{e:?}");
}

#[test]
fn mqtt_command_qos_is_0_or_1() {
    let d = tempfile::tempdir().unwrap();
    let (c, _) = load(&SysRoot::new(d.path()), None, &[]).unwrap();
    assert_eq!(c.mqtt.command_qos, 1);
    let env = |v: &str| vec![("NPU_AGENT_MQTT_COMMAND_QOS".to_string(), v.to_string())];
    let (c, _) = load(&SysRoot::new(d.path()), None, &env("0")).unwrap();
    assert_eq!(c.mqtt.command_qos, 0);
    for bad in ["2", "256", "-1", "one"] {
        let e = load(&SysRoot::new(d.path()), None, &env(bad)).unwrap_err();
        let said = format!("{} {}", e.source, e.message).to_ascii_lowercase();
        assert!(said.contains("command_qos"), "{bad}: {e:?}");
    }
}

#[test]
fn mqtt_protocol_of_other_types_reads_as_before() {
    // What the former `#[serde(untagged)]` derive gave, message and line included.
    let cases = [
        (
            "protocol = true",
            Err("data did not match any variant of untagged enum TextOrNumber"),
        ),
        (
            "protocol = [5]",
            Err("data did not match any variant of untagged enum TextOrNumber"),
        ),
        (
            "protocol = { v = 5 }",
            Err("data did not match any variant of untagged enum TextOrNumber"),
        ),
        (
            "protocol = 1979-05-27",
            Err("data did not match any variant of untagged enum TextOrNumber"),
        ),
        ("protocol = 5.0", Ok("5")),
        ("protocol = \"5\"", Ok("5")),
        ("protocol = 5", Ok("5")),
        ("protocol = 3.5", Err("mqtt.protocol = \"3.5\"")),
        (
            "protocol = 18446744073709551615",
            Err("mqtt.protocol = \"18446744073709552000\""),
        ),
    ];
    for (line, want) in cases {
        let d = tree(&[("/etc/npu-agent/agent.toml", &format!("[mqtt]\n{line}\n"))]);
        let got = load(&SysRoot::new(d.path()), None, &[]);
        match (want, got) {
            (Ok(p), Ok((c, _))) => assert_eq!(c.mqtt.protocol, p, "{line}"),
            (Err(m), Err(e)) => {
                eprintln!("{line}: {e}");
                assert!(e.message.contains(m), "{line}: {e}");
                if !m.starts_with("mqtt.protocol") {
                    assert_eq!(e.line, Some(2), "{line}: {e}");
                }
            }
            (w, g) => panic!("{line}: want {w:?}, got {g:?}"),
        }
    }
}

#[test]
fn unknown_key_names_file_and_line() {
    let d = tree(&[(
        "/etc/npu-agent/agent.toml",
        "[mqtt]\nurl = \"mqtt://x\"\npasword_file = \"/x\"\n",
    )]);
    let e = load(&SysRoot::new(d.path()), None, &[]).unwrap_err();
    assert_eq!(e.source, "/etc/npu-agent/agent.toml");
    assert_eq!(e.line, Some(3));
    assert!(e.message.contains("unknown key `pasword_file`"), "{e}");
}

#[test]
fn unknown_env_variable_is_an_error() {
    let d = tree(&[]);
    let e = load(
        &SysRoot::new(d.path()),
        None,
        &[("NPU_AGENT_MQTT_URLL".into(), "x".into())],
    )
    .unwrap_err();
    assert!(e.to_string().contains("urll"), "{e}");
    assert_eq!(e.source, "environment variable NPU_AGENT_MQTT_URLL");
}

#[test]
fn bad_values_are_refused() {
    let d = tree(&[(
        "/etc/npu-agent/agent.toml",
        "[security]\nallow_unsigned = [\"format_disk\"]\n",
    )]);
    assert!(load(&SysRoot::new(d.path()), None, &[])
        .unwrap_err()
        .message
        .contains("format_disk"));
    // `fix` unsigned is the operator's opt-in (never the default): accepted when listed.
    let d = tree(&[(
        "/etc/npu-agent/agent.toml",
        "[security]\nallow_unsigned = [\"rescan\", \"fix\"]\n",
    )]);
    let (c, _) = load(&SysRoot::new(d.path()), None, &[]).unwrap();
    assert_eq!(c.security.allow_unsigned, ["rescan", "fix"]);
    assert!(!Config::default()
        .security
        .allow_unsigned
        .contains(&"fix".into()));
    let d = tree(&[(
        "/etc/npu-agent/agent.toml",
        "[mqtt]\nkeep_alive_s = \"soon\"\n",
    )]);
    assert_eq!(
        load(&SysRoot::new(d.path()), None, &[]).unwrap_err().line,
        Some(2)
    );
}

/// Item 10: environment values take the key's type; long names and extreme ages are bounded.
#[test]
fn config_edges_are_bounded() {
    let d = tree(&[]);
    let root = SysRoot::new(d.path());
    let (c, _) = load(
        &root,
        None,
        &[("NPU_AGENT_MQTT_TOPIC_ROOT".into(), "1883".into())],
    )
    .unwrap();
    assert_eq!(c.mqtt.topic_root, "1883");
    let (c, _) = load(&root, None, &[("NPU_AGENT_BOARD_ID".into(), "true".into())]).unwrap();
    assert_eq!(c.board_id, "true");
    let long = "a".repeat(64 * 1024 + 1);
    let e = load(&root, None, &[("NPU_AGENT_MQTT_TOPIC_ROOT".into(), long)]).unwrap_err();
    assert!(e.message.contains("at most 128"), "{e}");
    for bad in ["0", "18446744073709551615", "604801"] {
        let d = tree(&[(
            "/etc/npu-agent/agent.toml",
            &format!("[security]\nmax_command_age_s = {bad}\n"),
        )]);
        let e = load(&SysRoot::new(d.path()), None, &[]).unwrap_err();
        assert!(e.message.contains("max_command_age_s"), "{bad}: {e}");
    }
    let d = tree(&[(
        "/etc/npu-agent/agent.toml",
        "[security]\nmax_command_age_s = 604800\n",
    )]);
    assert!(load(&SysRoot::new(d.path()), None, &[]).is_ok());
}

/// Item 4: a secret typed where a value of another type goes is not echoed.
#[test]
fn type_errors_do_not_echo_values() {
    for text in [
        "[mqtt]\nkeep_alive_s = \"hunter2-pw\"\n",
        "[mqtt]\nusername = 918273645\n",
        "board_id = [77, 67, 52, 67]\n",
        "[mqtt]\npassword_file = 3.14159\n",
    ] {
        let d = tree(&[("/etc/npu-agent/agent.toml", text)]);
        let e = load(&SysRoot::new(d.path()), None, &[])
            .unwrap_err()
            .to_string();
        for v in ["hunter2", "918273645", "77, 67", "3.14159"] {
            assert!(!e.contains(v), "{text}: {e}");
        }
    }
    // A typo of a key is named; a secret pasted where a key name goes is not (issue 26 item 12).
    assert_eq!(
        redact_values("unknown field `pasword_file`, expected one of `url`, `password_file`"),
        "unknown field `pasword_file`, expected one of `url`, `password_file`"
    );
    // A key of another table or version (lowercase words joined by `_`) is named too.
    assert_eq!(
        redact_values("unknown key `max_boards`, expected one of `listen`, `state_dir`"),
        "unknown key `max_boards`, expected one of `listen`, `state_dir`"
    );
    for secret in ["hunter2_pw", "abc_Def_ghi", "a__b", "_x_y", "tok3n_value"] {
        let shown = redact_values(&format!("unknown key `{secret}`, expected one of `url`"));
        assert!(!shown.contains(secret), "{shown}");
    }
    assert_eq!(
        redact_values("unknown key `SuperSecretPw99`, expected one of `url`, `username`"),
        "unknown key (not shown: 15 characters that are no key's name; a secret?), expected one of `url`, `username`"
    );
    let d = tree(&[(
        "/etc/npu-agent/agent.toml",
        "[mqtt]
hunter2-Pw99 = 1
",
    )]);
    let e = load(&SysRoot::new(d.path()), None, &[])
        .unwrap_err()
        .to_string();
    assert!(!e.contains("hunter2") && e.contains("line 2"), "{e}");
}

#[test]
fn broker_user_info_is_never_printed() {
    let mut c = Config::default();
    c.mqtt.url = "mqtt://user:pw-s3cret@broker:1883".into();
    let text = c.redacted();
    assert!(
        !text.contains("pw-s3cret") && !text.contains("user:"),
        "{text}"
    );
    assert!(text.contains("mqtt://<redacted>@broker:1883"), "{text}");
    let e = crate::mqtt::parse_url(&c.mqtt.url).unwrap_err();
    assert!(!e.contains("pw-s3cret"), "{e}");
}

#[test]
fn redacted_has_no_secret_values() {
    let mut c = Config::default();
    c.mqtt.password_file = "/etc/npu-agent/secret".into();
    let text = c.redacted();
    assert!(text.contains("password_file = \"/etc/npu-agent/secret\""));
    assert!(toml::from_str::<toml::Table>(&text).is_ok());
}

#[test]
fn log_level_from_file_and_environment_and_checked() {
    let d = tree(&[("/etc/npu-agent/agent.toml", "[log]\nlevel = \"warn\"\n")]);
    let root = SysRoot::new(d.path());
    let (c, _) = load(&root, None, &[]).unwrap();
    assert_eq!(c.log.level.as_deref(), Some("warn"));
    let env = vec![(
        "NPU_AGENT_LOG_LEVEL".to_string(),
        "info,mqtt::link=debug".to_string(),
    )];
    let (c, _) = load(&root, None, &env).unwrap();
    assert_eq!(c.log.level.as_deref(), Some("info,mqtt::link=debug"));
    assert!(c
        .redacted()
        .contains("[log]\nlevel = \"info,mqtt::link=debug\""));
    let env = vec![("NPU_AGENT_LOG_LEVEL".to_string(), "loud".to_string())];
    let e = load(&root, None, &env).unwrap_err();
    assert!(
        e.message.contains("log.level") && e.message.contains("not a level"),
        "{e:?}"
    );
    // Absent: the daemon's default (info), and nothing printed for it.
    let empty = tree(&[]);
    let (c, _) = load(&SysRoot::new(empty.path()), None, &[]).unwrap();
    assert_eq!(c.log.level, None);
    assert!(!c.redacted().contains("[log]"));
}

/// `[mqtt] reconnect_max_s`: 120 s by default, 1 to 3600 s, from the file or the environment.
#[test]
fn reconnect_max_is_bounded() {
    let d = tree(&[]);
    let (c, _) = load(&SysRoot::new(d.path()), None, &[]).unwrap();
    assert_eq!(c.mqtt.reconnect_max_s, 120);
    for bad in ["0", "3601"] {
        let d = tree(&[(
            "/etc/npu-agent/agent.toml",
            &format!("[mqtt]\nreconnect_max_s = {bad}\n"),
        )]);
        let e = load(&SysRoot::new(d.path()), None, &[]).unwrap_err();
        assert!(e.message.contains("mqtt.reconnect_max_s"), "{bad}: {e:?}");
    }
    let env = [(
        "NPU_AGENT_MQTT_RECONNECT_MAX_S".to_string(),
        "30".to_string(),
    )];
    let (c, _) = load(&SysRoot::new(d.path()), None, &env).unwrap();
    assert_eq!(c.mqtt.reconnect_max_s, 30);
}

/// Issue 37 item 4: a main file seen before and missing at a reload is an error, not the
/// defaults; one never there is not.
#[test]
fn a_reload_without_the_main_file_it_had_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let root = SysRoot::new(d.path());
    assert!(super::reload(&root, None, &[], false).is_ok());
    let e = super::reload(&root, None, &[], true).unwrap_err();
    assert_eq!(e.source, super::CONFIG_FILE);
    assert!(e.message.contains("missing"), "{e}");
    std::fs::create_dir_all(d.path().join("etc/npu-agent")).unwrap();
    std::fs::write(
        d.path().join("etc/npu-agent/agent.toml"),
        "[security]\nallow_unsigned = []\n",
    )
    .unwrap();
    let (c, read) = super::reload(&root, None, &[], true).unwrap();
    assert!(read && c.security.allow_unsigned.is_empty());
    // Truncated by an editor writing in place: as unreadable as missing.
    std::fs::write(d.path().join("etc/npu-agent/agent.toml"), "").unwrap();
    let e = super::reload(&root, None, &[], true).unwrap_err();
    assert!(e.message.starts_with("empty, though"), "{e}");
    std::fs::write(d.path().join("etc/npu-agent/agent.toml"), "# defaults\n").unwrap();
    let (c, _) = super::reload(&root, None, &[], true).unwrap();
    assert_eq!(
        c.security.allow_unsigned,
        Config::default().security.allow_unsigned
    );
}
