//! The binary's command line as a person meets it: help and version on stdout with exit 0, usage
//! errors on stderr with exit 2, and output that cannot be written is an error too.

use super::cli::{agent, agent_cmd, case, stderr, stdout};

#[test]
fn usage_errors_exit_2() {
    for args in [
        vec!["check", "--format", "yaml"],
        vec!["check", "--fail-on", "info"],
        vec!["check", "--root", "/nonexistent/tree"],
        vec!["check", "--profile", "no-such-profile"],
        vec!["check", "--profile", "/nonexistent/p.toml"],
        vec!["frobnicate"],
        vec![],
    ] {
        let o = agent(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).is_empty(), "{args:?} printed no reason");
    }
    let o = agent(&["check", "--profile", "no-such-profile"]);
    assert!(
        stderr(&o).contains("available: rpi5-hailo10h, rpi5-hailo8, rk3588-rknpu, generic"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn help_and_version_exit_0() {
    let o = agent(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("check"));
    let o = agent(&["--version"]);
    assert_eq!(
        stdout(&o).trim(),
        format!("npu-agent {}", env!("CARGO_PKG_VERSION"))
    );
}

/// The binary's side of the parser: help on stdout with exit 0 at every level, usage errors and
/// a missing command on stderr with exit 2, a non-UTF-8 argument refused without a panic.
#[test]
fn help_and_usage_errors_go_where_they_belong() {
    for args in [
        &["-h"][..],
        &["check", "--help"],
        &["fleet", "send", "-h"],
        &["help", "cma", "set"],
    ] {
        let o = agent(args);
        assert_eq!(o.status.code(), Some(0), "{args:?}");
        assert!(
            stdout(&o).contains("\nUsage: npu-agent "),
            "{args:?}: {}",
            stdout(&o)
        );
        assert!(o.stderr.is_empty(), "{args:?}: {}", stderr(&o));
    }
    let o = agent(&["fleet", "send", "-h"]);
    for want in [
        "--board <BOARD>",
        "--all",
        "--wait <SECS>",
        "[default: 30]",
        "<ACTION>",
    ] {
        assert!(stdout(&o).contains(want), "{want}: {}", stdout(&o));
    }
    let o = agent(&[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    assert!(
        stderr(&o).contains("Usage: npu-agent <COMMAND>"),
        "{}",
        stderr(&o)
    );
    let o = agent(&["check", "--format=yaml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    assert_eq!(
        stderr(&o),
        "error: invalid value 'yaml' for '--format <FORMAT>'\n  \
         [possible values: text, json, prometheus]\n\
         \n\
         For more information, try '--help'.\n"
    );
    use std::os::unix::ffi::OsStrExt;
    let o = agent_cmd()
        .args(["check", "--profile"])
        .arg(std::ffi::OsStr::from_bytes(b"bad\xff"))
        .output()
        .expect("run npu-agent");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with("error: invalid UTF-8 was detected in one or more arguments\n"),
        "{}",
        stderr(&o)
    );
}

/// Output that does not reach stdout is an error (exit 2 and a message), so a full disk under
/// the Prometheus textfile cannot leave a truncated report that looks whole.
#[test]
fn output_lost_on_a_full_disk_is_an_error() {
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("open /dev/full")
    };
    let root = case("own-rk3588-opi5plus-rknpu-0.9.8-healthy");
    for args in [
        vec!["check", "--root", root.as_str()],
        vec!["check", "--root", root.as_str(), "--format", "prometheus"],
        vec!["--help"],
    ] {
        let o = agent_cmd()
            .args(&args)
            .stdout(full())
            .output()
            .expect("run npu-agent");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("cannot write the output"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    // The same commands with a working stdout succeed.
    assert_eq!(agent(&["check", "--root", &root]).status.code(), Some(0));
}
