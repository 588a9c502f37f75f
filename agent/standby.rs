//! `npu-agent run` on a board nobody configured yet: the package installs a commented default
//! `/etc/npu-agent/agent.toml` with no broker, and the service is enabled at once (in an image
//! being built, long before anyone provisions a board).
//!
//! Exiting with a config error would make systemd restart the agent every `RestartSec=` forever,
//! filling the journal with the same error. Instead, when systemd started it (`NOTIFY_SOCKET` is
//! set: `Type=notify`), the agent stands by: it tells systemd it is
//! ready, with a status line saying what is missing (`systemctl status npu-agent`), keeps the
//! watchdog fed, and every [`POLL`] looks again — a provisioning file dropped on the boot
//! partition, or `[mqtt] url` set in `/etc/npu-agent/agent.toml` — and starts the daemon as soon
//! as a broker is configured. SIGTERM ends it cleanly (exit 0). Run by hand (no `NOTIFY_SOCKET`),
//! `npu-agent run` without a broker still refuses to start (exit 2), which is what a person wants.

use crate::config::{self, Config};
use crate::provision::{self, ProvisionOutcome};
use crate::root::SysRoot;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

/// How often standby looks for a configuration.
pub const POLL: Duration = Duration::from_secs(5);

/// The status line while standing by.
pub fn status_line(outcome: &ProvisionOutcome, load_error: Option<&str>) -> String {
    let mut s = String::from(
        "standby: no MQTT broker configured (mqtt.url is empty); put npu-agent.toml on the boot partition \
         or set [mqtt] url in /etc/npu-agent/agent.toml",
    );
    if let Some(e) = load_error {
        s.push_str(&format!("; config error: {e}"));
    }
    if let ProvisionOutcome::Invalid { .. }
    | ProvisionOutcome::Failed { .. }
    | ProvisionOutcome::Applied {
        boot_file_removed: false,
        ..
    } = outcome
    {
        if let Some(d) = outcome.describe() {
            s.push_str("; ");
            s.push_str(&d);
        }
    }
    s
}

/// Provisioning again (unless `provision_again` is false) and the config load, as `run` does them
/// at start (no logging).
pub fn reload(
    root_dir: &Path,
    explicit: Option<&Path>,
    env: &[(String, String)],
    root_override: Option<&Path>,
    provision_again: bool,
) -> (ProvisionOutcome, Result<Config, String>) {
    let root = SysRoot::new(root_dir);
    let outcome = if provision_again {
        provision::provision(&root)
    } else {
        ProvisionOutcome::NoFile
    };
    let cfg = config::load(&root, explicit, env).map(|(mut c, _)| {
        if let Some(r) = root_override {
            c.root = r.display().to_string();
        }
        c
    });
    (outcome, cfg.map_err(|e| e.to_string()))
}

/// Returns `cfg` at once when it names a broker, or when not started by systemd (the daemon then
/// refuses the config); else stands by until `reload` yields a config that does (`Some`) or
/// SIGTERM/SIGINT arrives (`None`). `outcome` is the start's provisioning.
pub fn until_configured(
    cfg: Config,
    outcome: ProvisionOutcome,
    reload: impl FnMut(bool) -> (ProvisionOutcome, Result<Config, String>),
) -> Option<(Config, ProvisionOutcome)> {
    if !cfg.mqtt.url.is_empty() || std::env::var_os("NOTIFY_SOCKET").is_none() {
        return Some((cfg, outcome));
    }
    let rt = match crate::sys::runtime::current_thread() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("npu-agent: cannot start the runtime: {e}");
            return None;
        }
    };
    rt.block_on(async {
        // Handlers go in before READY=1: a stop right after it must not find SIGTERM's default.
        use tokio::signal::unix::{signal, SignalKind};
        let (term, int) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        );
        let stop = async move {
            match (term, int) {
                (Ok(mut t), Ok(mut i)) => {
                    tokio::select! {
                        _ = t.recv() => {}
                        _ = i.recv() => {}
                    }
                }
                (Ok(mut t), Err(_)) => {
                    t.recv().await;
                }
                (Err(_), Ok(mut i)) => {
                    i.recv().await;
                }
                (Err(_), Err(_)) => std::future::pending().await,
            }
        };
        let tick = match sd_notify::watchdog_enabled() {
            Some(w) => POLL.min(w / 2),
            None => POLL,
        };
        let notify = |status: &str, first: bool| {
            let mut states = vec![sd_notify::NotifyState::Status(status)];
            if first {
                states.push(sd_notify::NotifyState::Ready);
            }
            let _ = sd_notify::notify(&states);
        };
        let ping = || {
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
        };
        standby(outcome, reload, tick, stop, notify, ping).await
    })
}

/// The standby loop, with its effects passed in (tests drive it with a fake `reload`).
/// `reload(provision_again)` provisions and loads the config; provisioning is not repeated after
/// a file was applied but could not be removed (a read-only boot partition would otherwise have
/// the same files rewritten every tick). `notify(status, first)` sends the status (and READY=1
/// the first time); `ping` feeds the watchdog every `tick`.
pub async fn standby(
    outcome: ProvisionOutcome,
    mut reload: impl FnMut(bool) -> (ProvisionOutcome, Result<Config, String>),
    tick: Duration,
    stop: impl Future<Output = ()>,
    mut notify: impl FnMut(&str, bool),
    mut ping: impl FnMut(),
) -> Option<(Config, ProvisionOutcome)> {
    let mut status = status_line(&outcome, None);
    eprintln!("npu-agent: {status}");
    notify(&status, true);
    // What the status shows: the start's outcome, then each new one (a removed file leaves it).
    let mut shown = outcome.clone();
    let mut last_outcome = outcome;
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    interval.tick().await;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return None,
            _ = interval.tick() => {
                ping();
                let again = !matches!(last_outcome, ProvisionOutcome::Applied { boot_file_removed: false, .. });
                let (o, cfg) = reload(again);
                if o != ProvisionOutcome::NoFile && o != last_outcome {
                    if let Some(line) = o.describe() {
                        eprintln!("npu-agent: {line}");
                    }
                    shown = o.clone();
                }
                if o != ProvisionOutcome::NoFile {
                    last_outcome = o;
                } else if matches!(last_outcome, ProvisionOutcome::Invalid { .. } | ProvisionOutcome::Failed { .. }) {
                    // The broken file was taken away.
                    last_outcome = o;
                }
                match cfg {
                    Ok(c) if !c.mqtt.url.is_empty() => {
                        eprintln!("npu-agent: broker configured ({}); starting", c.mqtt.url);
                        return Some((c, shown));
                    }
                    Ok(_) => {
                        let s = status_line(&last_outcome, None);
                        if s != status {
                            eprintln!("npu-agent: {s}");
                            notify(&s, false);
                            status = s;
                        }
                    }
                    Err(e) => {
                        let s = status_line(&last_outcome, Some(&e));
                        if s != status {
                            eprintln!("npu-agent: {s}");
                            notify(&s, false);
                            status = s;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn with_url(u: &str) -> Config {
        let mut c = Config::default();
        c.mqtt.url = u.into();
        c
    }

    #[test]
    fn a_configured_broker_returns_at_once() {
        let c = until_configured(with_url("mqtt://b:1883"), ProvisionOutcome::NoFile, |_| {
            panic!("no reload")
        })
        .unwrap();
        assert_eq!(c.0.mqtt.url, "mqtt://b:1883");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn stands_by_until_a_broker_appears() {
        let calls = RefCell::new(0);
        let notes = RefCell::new(Vec::new());
        let pings = RefCell::new(0);
        let broken = ProvisionOutcome::Invalid {
            source: "/boot/npu-agent.toml".into(),
            line: Some(4),
            message: "unknown key `urll`".into(),
        };
        let b2 = broken.clone();
        let reload = |again: bool| {
            assert!(again);
            *calls.borrow_mut() += 1;
            match *calls.borrow() {
                1 => (b2.clone(), Ok(Config::default())),
                2 => (
                    ProvisionOutcome::NoFile,
                    Err("config /etc/npu-agent/agent.toml: line 2: bad".to_string()),
                ),
                _ => (
                    ProvisionOutcome::NoFile,
                    Ok(with_url("mqtts://broker:8883")),
                ),
            }
        };
        let got = standby(
            broken,
            reload,
            Duration::from_millis(5),
            std::future::pending(),
            |s: &str, first: bool| notes.borrow_mut().push((s.to_string(), first)),
            || *pings.borrow_mut() += 1,
        )
        .await;
        assert_eq!(got.unwrap().0.mqtt.url, "mqtts://broker:8883");
        assert_eq!(*calls.borrow(), 3);
        assert_eq!(*pings.borrow(), 3);
        let notes = notes.into_inner();
        // READY with the broken file named, then the config error once the file was removed.
        assert!(
            notes[0].1 && notes[0].0.starts_with("standby: no MQTT broker configured"),
            "{notes:?}"
        );
        assert!(
            notes[0].0.contains(
                "first-boot file /boot/npu-agent.toml is invalid (line 4: unknown key `urll`)"
            ),
            "{notes:?}"
        );
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            !notes[1].1
                && notes[1]
                    .0
                    .contains("config error: config /etc/npu-agent/agent.toml: line 2: bad"),
            "{notes:?}"
        );
        assert!(!notes[1].0.contains("first-boot"), "{notes:?}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn stop_ends_standby() {
        let got = standby(
            ProvisionOutcome::NoFile,
            |_| (ProvisionOutcome::NoFile, Ok(Config::default())),
            Duration::from_millis(5),
            tokio::time::sleep(Duration::from_millis(30)),
            |_: &str, _| {},
            || {},
        )
        .await;
        assert!(got.is_none());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_unremovable_boot_file_is_not_applied_again_every_tick() {
        let asked = RefCell::new(Vec::new());
        let applied = ProvisionOutcome::Applied {
            plan: crate::provision::Plan {
                source: "/boot/npu-agent.toml".into(),
                dropin: "/d".into(),
                keys: vec![],
                secrets: vec![],
                files: vec![],
            },
            boot_file_removed: false,
            note: Some("Read-only file system".into()),
        };
        let got = standby(
            applied,
            |again: bool| {
                asked.borrow_mut().push(again);
                let url = if asked.borrow().len() == 3 {
                    "mqtt://b:1"
                } else {
                    ""
                };
                (ProvisionOutcome::NoFile, Ok(with_url(url)))
            },
            Duration::from_millis(5),
            std::future::pending(),
            |s: &str, _| {
                assert!(
                    s.contains("could not be removed: Read-only file system"),
                    "{s}"
                )
            },
            || {},
        )
        .await;
        assert_eq!(got.unwrap().0.mqtt.url, "mqtt://b:1");
        assert_eq!(asked.into_inner(), vec![false, false, false]);
    }

    #[test]
    fn reload_provisions_and_loads() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("boot")).unwrap();
        std::fs::write(
            d.path().join("boot/npu-agent.toml"),
            "[mqtt]\nurl = \"mqtt://10.0.0.5:1883\"\n",
        )
        .unwrap();
        let (o, c) = reload(d.path(), None, &[], Some(Path::new("/captured")), true);
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
        let c = c.unwrap();
        assert_eq!(c.mqtt.url, "mqtt://10.0.0.5:1883");
        assert_eq!(c.root, "/captured");
        // Without provisioning, a new boot file is left alone.
        std::fs::write(d.path().join("boot/npu-agent.toml"), "board_id = \"x\"\n").unwrap();
        let (o, c) = reload(d.path(), None, &[], None, false);
        assert_eq!(o, ProvisionOutcome::NoFile);
        assert_eq!(c.unwrap().board_id, "auto");
        assert!(d.path().join("boot/npu-agent.toml").exists());
    }
}
