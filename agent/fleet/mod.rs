//! The operator side, in the same binary: `keygen`, `fleet send`, `fleet watch` and
//! `fleet capture`; with the `serve` feature (in the default build) also `fleet serve`.
//!
//! The broker list, topic root, signing key, TLS files, credentials and protocol of the
//! operator's own connection come from the command line, the `NPU_AGENT_MQTT_*` variables and
//! the operator config file `fleet.toml` ([`operator`]).

/// The longest `fleet send --wait`, seconds (a day): a longer wait is a typo, and a deadline
/// past what the clock can hold would end the command with an overflow.
pub const MAX_WAIT_S: u64 = 86_400;

mod capture;
pub mod known;
pub mod operator;
mod rollout;
mod rows;
mod send;
#[cfg(feature = "serve")]
pub mod serve;
pub mod show;
pub use rows::*;
mod watch;
pub use rollout::{parse_waves, rollout};
pub use send::*;
pub use watch::*;

use crate::mqtt::command::{self, CmdStatus, InitMessage};
use crate::mqtt::link::{Link, LinkEvent, LinkOptions};
use crate::mqtt::{self, topics};
use rumqttc::v5::mqttbytes::QoS;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

/// A board whose last status is more than this many intervals old is stale.
pub const STALE_INTERVALS: i64 = 3;

/// True when `id`, a board id read from a topic, is no longer than an agent's may be
/// ([`crate::config::MAX_NAME_BYTES`] bytes in `agent.toml`). A longer one is never a board's:
/// the tools keep nothing under it, so ids of 64 KiB cannot cost them memory.
pub(crate) fn board_id_fits(id: &str) -> bool {
    id.len() <= crate::config::MAX_NAME_BYTES
}

/// Why a board is stale, if it is: its last status (`time`, RFC 3339) is older than
/// [`STALE_INTERVALS`] times its `interval_s` (plus a minute for clocks and slow checks) at
/// `now_s`, whatever its retained availability says (a broker node that died with the board's
/// session never publishes its last will).
pub fn stale_reason(time: &str, interval_s: Option<u64>, now_s: i64) -> Option<String> {
    let interval = i64::try_from(interval_s?).ok()?;
    let (date, clock) = time.split_once('T')?;
    let at = crate::sys::time::unix_from_date_time(date, clock.get(..8)?)?;
    let age = now_s.saturating_sub(at);
    (age > interval.saturating_mul(STALE_INTERVALS).saturating_add(60)).then(|| {
        format!("its last status is {age} s old and it publishes every {interval} s: it may be off the broker, whatever its availability says")
    })
}

/// Exit codes of the fleet commands.
pub const EXIT_OK: i32 = 0;
/// Failed, rejected or timed out.
pub const EXIT_FAILED: i32 = 1;
/// Usage or connection setup error.
pub const EXIT_USAGE: i32 = 2;

/// Connection options for an operator tool (no last will; lossless event channel), from the
/// resolved settings ([`operator::Operator`]).
///
/// Errors: a broker list that does not parse or mixes `mqtts://` and `mqtt://` while secrets are
/// set; an unreadable TLS, password or `known_boards` file.
pub fn operator_link(op: &operator::Operator, id_prefix: &str) -> Result<LinkOptions, String> {
    let mut fallbacks = mqtt::parse_urls(&op.broker)?;
    mqtt::refuse_mixed_tls(&fallbacks, "--broker", &op.secrets_set())?;
    known::KnownBoards::check(op.known_boards.as_deref())?;
    let url = fallbacks.remove(0);
    let read = |p: &std::path::Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    let tls = if url.tls || fallbacks.iter().any(|u| u.tls) {
        let ca_pem = match &op.ca_file {
            Some(p) => read(p)?,
            None => Vec::new(),
        };
        let client = match (&op.cert_file, &op.key_file) {
            (Some(c), Some(k)) => {
                Some((read(c)?, crate::sys::secret::Secret::from_file(&read(k)?)))
            }
            _ => None,
        };
        Some(mqtt::tls_config(&mqtt::TlsFiles { ca_pem, client })?)
    } else {
        None
    };
    let credentials = match &op.username {
        Some(u) => {
            let p = match &op.password_file {
                Some(f) => crate::sys::secret::Secret::password_from_file(&read(f)?),
                None => crate::sys::secret::Secret::default(),
            };
            Some((u.clone(), p))
        }
        None => None,
    };
    let protocol = op.protocol;
    let mut rnd = [0u8; 4];
    let _ = getrandom::fill(&mut rnd);
    Ok(LinkOptions {
        url,
        tls,
        client_id: format!("{id_prefix}-{:08x}", u32::from_le_bytes(rnd)),
        keep_alive: Duration::from_secs(30),
        credentials,
        last_will: None,
        max_incoming_packet_bytes: 4 << 20,
        connect_timeout_s: 5,
        lossless: true,
        ack_when_handled: false,
        protocol: protocol.first(),
        auto_protocol: protocol.falls_back(),
        // A person waits on these tools: reconnect within seconds of the broker coming back.
        reconnect_max: Duration::from_secs(8),
        fallbacks,
    })
}

/// A current-thread runtime for an operator command; `None` (reason printed) if it cannot start.
fn runtime(err: &mut dyn Write) -> Option<tokio::runtime::Runtime> {
    match crate::sys::runtime::current_thread() {
        Ok(r) => Some(r),
        Err(e) => {
            let _ = writeln!(err, "npu-agent: cannot start the runtime: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_several_intervals_old_is_stale() {
        let now = crate::sys::time::unix_from_date_time("2026-12-04", "10:00:00").unwrap();
        let t = "2026-12-04T09:50:00.123Z"; // 600 s before
        let why = stale_reason(t, Some(60), now).unwrap();
        assert!(
            why.contains("600 s old") && why.contains("every 60 s"),
            "{why}"
        );
        assert_eq!(
            stale_reason(t, Some(300), now),
            None,
            "within 3 intervals and a minute"
        );
        assert_eq!(
            stale_reason(t, None, now),
            None,
            "an older agent says no interval"
        );
        assert_eq!(stale_reason("yesterday", Some(60), now), None);
        assert_eq!(stale_reason(t, Some(u64::MAX), now), None);
    }

    #[test]
    fn an_incomplete_list_says_why() {
        assert_eq!(incomplete_reason(None, false, 0, None), None);
        let why = incomplete_reason(Some((4, 49, 5134)), true, 0, None).unwrap();
        assert!(
            why.contains("after 4 passes")
                && why.contains("revealed 49 boards")
                && why.contains("(5134 boards known)")
                && why.contains("max_queued_messages")
                && why.contains("30 s"),
            "{why}"
        );
    }

    #[test]
    fn args_parse() {
        let m = parse_args(&["size=256M".into(), "drop_caches=true".into()]).unwrap();
        assert_eq!(m["size"], "256M");
        assert_eq!(m["drop_caches"], true);
        assert!(parse_args(&["nokey".into()]).is_err());
        assert!(parse_args(&["=v".into()]).is_err());
    }

    #[test]
    fn status_rows() {
        let mut r = BoardRow::default();
        apply_status(&mut r, br#"{"health":"fail","profile":"rk3588-rknpu","model":"ROCK 5B","time":"t","session":3,
            "findings":[{"id":"cma.free","status":"warn"},{"id":"limits.nofile","status":"fail","fix":{"steps":[]}},{"id":"x","status":"pass","fix":{}}],
            "metrics":{"cma_free_bytes":1048576,"soc_temp_c":88.5,"undervoltage_now":true}}"#);
        assert_eq!(r.soc_temp_c, Some(88.5));
        assert_eq!(r.undervoltage_now, Some(true));
        let table = render_rows(std::slice::from_ref(&r));
        assert!(table.contains("  88.5 YES   1 "), "{table}");
        assert_eq!(r.fixable, vec!["limits.nofile"]);
        assert_eq!(r.worst, vec!["limits.nofile fail", "cma.free warn"]);
        assert_eq!(r.cma_free_bytes, Some(1 << 20));
        assert_eq!(r.session, 3);
        r.last_seen = "2026-11-30T18:08:27.123456789Z".into();
        assert!(render_rows(std::slice::from_ref(&r)).contains(" 2026-11-30T18:08:27Z "));
        assert_eq!(
            whole_seconds("2026-11-30T18:08:27+01:00"),
            "2026-11-30T18:08:27+01:00"
        );
        assert_eq!(
            whole_seconds("2026-11-30T18:08:27.5+01:00"),
            "2026-11-30T18:08:27+01:00"
        );
        assert_eq!(whole_seconds(""), "");
        assert_eq!(whole_seconds("x.y"), "x.y");
        // A board online whose command subscription was refused is shown deaf.
        r.availability = "online".into();
        apply_status(&mut r, br#"{"health":"ok","commands":"not subscribed"}"#);
        assert_eq!(r.commands, "not subscribed");
        assert!(render_rows(std::slice::from_ref(&r)).contains(" deaf "));
        apply_status(&mut r, br#"{"health":"ok","commands":"subscribed"}"#);
        assert!(render_rows(std::slice::from_ref(&r)).contains(" online "));
        apply_status(&mut r, b"garbage");
        assert_eq!(r.health, "unparsable");
        assert!(render_rows(&[r]).contains("unparsable"));
    }

    /// A status from the broker cannot clear the watch screen, add a row or hide a column:
    /// every board-provided cell is escaped before the table is drawn.
    #[test]
    fn hostile_status_cannot_draw_on_the_table() {
        let mut r = BoardRow {
            board: "b\x1b[2J\x1b[H".into(),
            availability: "online\x1b[8m".into(),
            ..BoardRow::default()
        };
        apply_status(&mut r, "{\"health\":\"ok\\u001b[2J\",\"profile\":\"p\\nevil-board online ok\",\
            \"time\":\"t\\u001b[H\",\"findings\":[{\"id\":\"x\\u001b[8m\\u009b\",\"status\":\"fail\"}]}".as_bytes());
        let table = render_rows(&[r]);
        assert!(
            !table.contains('\x1b') && !table.contains('\u{9b}'),
            "{table:?}"
        );
        assert_eq!(table.lines().count(), 2, "{table}");
        assert!(table.contains("x\\x1b[8m\\u{9b} fail"), "{table}");
        assert!(
            table.starts_with("BOARD") && table.contains("\nb\\x1b\\x5b"),
            "{table}"
        );
    }
}
