//! `fleet watch`: every board's retained availability and status, as a table or JSON lines.

use super::*;

/// `fleet watch` options.
#[derive(Debug, Clone)]
pub struct WatchArgs {
    /// Broker list, topic root, TLS, credentials and where known board keys are kept.
    pub op: super::operator::Operator,
    /// Print once, when the retained messages have arrived, and exit.
    pub once: bool,
    /// JSON output (with `--once`).
    pub json: bool,
    /// New boards this run records in known_boards (`--accept-new-boards`).
    pub accept_new_boards: usize,
    /// The most rows the table holds (`--max-rows`).
    pub max_rows: usize,
}

/// Runs `fleet watch`. Returns the exit code.
pub fn watch(a: &WatchArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let opts = match operator_link(&a.op, "npu-agent-watch") {
        Ok(o) => o,
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            return EXIT_USAGE;
        }
    };
    let Some(rt) = runtime(err) else {
        return EXIT_USAGE;
    };
    rt.block_on(watch_async(a, opts, out, err))
}

/// `fleet watch --once --format json`: every board's row, and whether the list is complete.
#[derive(Serialize)]
pub(super) struct WatchDoc<'a> {
    boards: &'a [BoardRow],
    incomplete: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    incomplete_reason: Option<&'a str>,
}

/// Board ids per exact-topic SUBSCRIBE when `fleet watch` fetches the statuses a wildcard burst
/// lost: well below mosquitto's default `max_queued_messages` (1000), so one batch's retained
/// statuses can never overflow the broker's per-client packet queue.
pub const EXACT_BATCH: usize = 500;

/// Availability passes `fleet watch` makes at most; a later pass that still reveals boards not
/// seen before makes the list incomplete.
pub const MAX_AVAILABILITY_PASSES: u32 = 4;

/// How long `fleet watch --once` may take in all before it prints what it has, marked
/// incomplete.
pub const ONCE_LIMIT: Duration = Duration::from_secs(300);

/// Connections the broker may close in the middle of a `fleet watch --once` listing before
/// it stops (each reconnect starts the listing over).
pub const ONCE_RESETS: u32 = 2;

/// How long one retained burst may take before `fleet watch --once` gives up on it.
pub(super) const BURST_LIMIT: Duration = Duration::from_secs(30);

/// Where `fleet watch` is in reading the retained state of the fleet.
#[derive(Debug)]
pub(super) enum Phase {
    /// Not connected yet.
    Connecting,
    /// Wildcard `<root>/+/availability` pass n (board ids; small messages).
    Availability(u32),
    /// One wildcard `<root>/+/status` pass (every status the broker's burst carries).
    Statuses,
    /// One SUBSCRIBE of exact `<root>/<id>/status` filters for these boards (still waiting).
    Exact(std::collections::BTreeSet<String>),
    /// Between steps: the next exact batch, or another availability pass when none is left.
    Batches,
    /// The retained state is read; live messages only.
    Live,
}

pub(super) async fn watch_async(
    a: &WatchArgs,
    mut opts: LinkOptions,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    use std::io::IsTerminal;
    let root = &a.op.topic_root;
    let mut link = Link::start(&opts);
    let mut rows = Table::new(a.max_rows);
    let mut link_started = Instant::now();
    let mut last_msg: Option<Instant> = None;
    // Retained statuses received at all (live ones do not show that the broker delivers retained
    // messages to this wildcard subscription).
    let mut retained_statuses: usize = 0;
    let mut fell_back = false;
    let mut connected = false;
    let mut said_unreachable = false;
    let mut last_error = String::new();
    let mut last_draw = Instant::now() - Duration::from_secs(1);
    let mut st = Retained::new(a, rows.max_rows());
    let started = Instant::now();
    // Why `--once` stopped before the listing was done (the list is then incomplete), and how
    // often the broker closed the connection in the middle of it.
    let (mut cut, mut resets): (Option<String>, u32) = (None, 0);
    loop {
        if connected && st.advance(&link, root, a.once) {
            continue;
        }
        if a.once {
            if matches!(st.phase, Phase::Live) {
                break;
            }
            if started.elapsed() > ONCE_LIMIT {
                cut = Some(format!("not done after {} s", ONCE_LIMIT.as_secs()));
                break;
            }
            if !connected && link_started.elapsed() > Duration::from_secs(10) {
                let _ = writeln!(err, "npu-agent: cannot reach {}: {last_error}", a.op.broker);
                link.abort();
                return EXIT_FAILED;
            }
        } else if !connected && link_started.elapsed() > Duration::from_secs(10) {
            say_unreachable(err, &a.op.broker, &last_error, &mut said_unreachable);
        }
        let ev = match tokio::time::timeout(Duration::from_millis(100), link.events.recv()).await {
            Ok(Some(ev)) => Some(ev),
            Ok(None) => break,
            Err(_) => None,
        };
        match ev {
            Some(LinkEvent::ProtocolRefused { reason }) => {
                let _ = writeln!(
                    err,
                    "npu-agent: the broker refuses MQTT 5 ({reason}); using MQTT 3.1.1"
                );
                opts.protocol = crate::mqtt::link::Protocol::V311;
                link = Link::start(&opts);
                link_started = Instant::now();
                fell_back = true;
            }
            Some(LinkEvent::Connected { .. }) => {
                connected = true;
                say_reconnected(err, &a.op.broker, &mut said_unreachable);
                st.start(&link, root);
            }
            Some(LinkEvent::Disconnected { reason, .. }) if a.once && connected => {
                // Each reconnect starts the listing over (at most ONCE_RESETS times).
                resets += 1;
                connected = false;
                if resets > ONCE_RESETS {
                    cut = Some(once_cut(&reason));
                    break;
                }
            }
            Some(LinkEvent::Disconnected { reason, .. }) => last_error = reason,
            Some(LinkEvent::SessionTakenOver { reason, .. }) => last_error = reason,
            Some(LinkEvent::Message {
                topic,
                payload,
                retain,
                ..
            }) => {
                last_msg = Some(Instant::now());
                let counts = (&mut rows, &mut retained_statuses);
                st.take(counts, root, (&topic, &payload), retain);
            }
            Some(LinkEvent::SubAck { .. }) | None => {}
        }
        if !a.once
            && last_draw.elapsed() > Duration::from_millis(250)
            && last_msg.is_some_and(|t| t > last_draw)
        {
            redraw(&rows, &mut st.keys, std::io::stdout().is_terminal(), out);
            last_draw = Instant::now();
        }
    }
    let cut = also_dropped(cut, &rows);
    let end = End {
        notes: save_keys(&mut st.keys)
            .into_iter()
            .chain(rows.refused_note())
            .collect(),
        rows,
        retained_statuses,
        fell_back,
        resets,
        incomplete: incomplete_reason(
            st.passes.incomplete,
            st.timed_out,
            link.dropped.load(std::sync::atomic::Ordering::Relaxed),
            cut,
        ),
    };
    finish(a, link, end, out, err).await
}

/// Writes the new board keys seen since the last time (in batches: at most once a redraw, and
/// at the end), and says why some were not recorded.
fn save_keys(keys: &mut super::known::KnownBoards) -> Option<String> {
    keys.save();
    keys.refused_note(super::known::MORE_BOARDS)
}

/// Why the list is incomplete: `cut`, and (a list that had to drop rows is not the whole
/// fleet) the rows dropped.
fn also_dropped(cut: Option<String>, rows: &Table) -> Option<String> {
    [cut, rows.dropped_note()]
        .into_iter()
        .flatten()
        .reduce(|c, d| format!("{c}; {d}"))
}

/// After an outage the live table said, says it is back.
fn say_reconnected(err: &mut dyn Write, broker: &str, said: &mut bool) {
    if std::mem::take(said) {
        let _ = writeln!(err, "npu-agent: connected to {broker}");
    }
}

/// The live table keeps trying, but says why it shows nothing (once per outage).
fn say_unreachable(err: &mut dyn Write, broker: &str, last_error: &str, said: &mut bool) {
    if !*said {
        let _ = writeln!(
            err,
            "npu-agent: cannot reach {broker}: {last_error}; still trying"
        );
        *said = true;
    }
}

/// Why `fleet watch --once` stopped when the broker closed its connection mid-listing.
fn once_cut(reason: &str) -> String {
    format!(
        "the broker closed the connection in the middle of the listing {} times (the last: \
         {reason}); NATS drops a slow consumer: raise its max_pending",
        ONCE_RESETS + 1
    )
}

/// Where the reading of the retained state stands: the phase, when it began and when its last
/// retained message came (live traffic does not extend a phase), the board ids with a retained
/// availability (all passes; this pass) and with any status, the boards still to be fetched
/// with exact subscriptions, and how the passes went.
struct Retained {
    phase: Phase,
    phase_started: Instant,
    last_retained: Option<Instant>,
    known: std::collections::BTreeSet<String>,
    pass_seen: std::collections::BTreeSet<String>,
    have_status: std::collections::BTreeSet<String>,
    missing: Vec<String>,
    passes: Passes,
    /// A burst did not end within BURST_LIMIT (`--once`).
    timed_out: bool,
    /// The board keys the operator knows: each status's seal is judged against them.
    keys: super::known::KnownBoards,
}

impl Retained {
    /// The state of one run: the operator's known board keys, at most `max_ids` boards.
    fn new(a: &WatchArgs, max_ids: usize) -> Retained {
        let keys = super::known::KnownBoards::load_accepting(
            a.op.known_boards.as_deref(),
            a.accept_new_boards,
        );
        Retained {
            phase: Phase::Connecting,
            phase_started: Instant::now(),
            last_retained: None,
            known: Default::default(),
            pass_seen: Default::default(),
            have_status: Default::default(),
            missing: Vec::new(),
            passes: Passes {
                max_ids,
                availability: 1,
                incomplete: None,
            },
            timed_out: false,
            keys,
        }
    }

    /// Takes one message into `rows` (a retained one extends the current burst), counting
    /// retained statuses.
    fn take(
        &mut self,
        (rows, retained_statuses): (&mut Table, &mut usize),
        root: &str,
        (topic, payload): (&str, &[u8]),
        retain: bool,
    ) {
        if retain {
            self.last_retained = Some(Instant::now());
        }
        let seen = Seen {
            rows,
            have_status: &mut self.have_status,
            pass_seen: &mut self.pass_seen,
            retained_statuses,
            keys: &mut self.keys,
        };
        record_message(seen, &mut self.phase, root, topic, payload, retain);
    }

    /// On (re)connecting: the first availability pass, from the start.
    fn start(&mut self, link: &Link, root: &str) {
        self.phase = Phase::Availability(1);
        self.passes.availability = 1;
        self.phase_started = Instant::now();
        self.last_retained = None;
        self.pass_seen.clear();
        subscribe_phase(link, &self.phase, root);
    }

    /// When the current burst is over, moves to the next phase and subscribes for it (true:
    /// the caller loops again at once). A burst is over when it went quiet (or nothing came at
    /// all), or, for an exact batch, when every board in it has answered; with `once`, one that
    /// outlasts BURST_LIMIT ends the reading, marked as timed out.
    fn advance(&mut self, link: &Link, root: &str, once: bool) -> bool {
        if matches!(self.phase, Phase::Live | Phase::Connecting) {
            return false;
        }
        let burst_over = match &self.phase {
            Phase::Exact(waiting) if waiting.is_empty() => true,
            _ => match self.last_retained {
                Some(t) => t.elapsed() > Duration::from_millis(300),
                None => self.phase_started.elapsed() > Duration::from_millis(1500),
            },
        };
        if !burst_over {
            if once && self.phase_started.elapsed() > BURST_LIMIT {
                self.timed_out = true;
                self.phase = Phase::Live;
            }
            return false;
        }
        let phase = std::mem::replace(&mut self.phase, Phase::Live);
        self.phase = next_phase(
            phase,
            &mut self.passes,
            &self.pass_seen,
            &mut self.known,
            &self.have_status,
            &mut self.missing,
        );
        self.phase_started = Instant::now();
        self.last_retained = None;
        if matches!(self.phase, Phase::Availability(_)) {
            self.pass_seen.clear();
        }
        subscribe_phase(link, &self.phase, root);
        true
    }
}

/// How the availability passes went: the current pass number, and (when the last allowed
/// pass still revealed boards) the pass, the boards it added and the boards known.
struct Passes {
    /// The most board ids a set of the listing keeps (the table's rows).
    max_ids: usize,
    availability: u32,
    incomplete: Option<(u32, usize, usize)>,
}

/// The phase after a retained burst is over. Availability(1) → Statuses → exact batches for
/// boards still without a status → one more availability pass, which shows whether an earlier
/// one missed boards (then batches for those, and so on, up to MAX_AVAILABILITY_PASSES).
fn next_phase(
    phase: Phase,
    passes: &mut Passes,
    pass_seen: &std::collections::BTreeSet<String>,
    known: &mut std::collections::BTreeSet<String>,
    have_status: &std::collections::BTreeSet<String>,
    missing: &mut Vec<String>,
) -> Phase {
    let mut fill_missing = false;
    let mut phase = match phase {
        Phase::Availability(n) => {
            let new = pass_seen.difference(known).count();
            for b in pass_seen {
                insert_bounded(known, b, passes.max_ids);
            }
            if n == 1 {
                Phase::Statuses
            } else if new == 0 || pass_seen.is_empty() {
                // Nothing new (or a broker that does not re-send retained messages
                // on a repeated subscription): the list stands.
                Phase::Live
            } else if n >= MAX_AVAILABILITY_PASSES {
                passes.incomplete = Some((n, new, known.len()));
                Phase::Live
            } else {
                fill_missing = true;
                Phase::Batches
            }
        }
        Phase::Statuses if known.is_empty() && have_status.is_empty() => Phase::Live,
        Phase::Statuses => {
            fill_missing = true;
            Phase::Batches
        }
        _ => Phase::Batches,
    };
    if fill_missing {
        *missing = known
            .iter()
            .filter(|b| !have_status.contains(*b))
            .cloned()
            .collect();
    }
    if matches!(phase, Phase::Batches) {
        phase = if missing.is_empty() {
            passes.availability += 1;
            Phase::Availability(passes.availability)
        } else {
            let at = missing.len().saturating_sub(EXACT_BATCH);
            Phase::Exact(std::collections::BTreeSet::from_iter(missing.split_off(at)))
        };
    }
    phase
}

/// Subscribes to what `phase` reads: the availability or status wildcard, or an exact batch.
/// QoS 0: mosquitto writes a subscription's retained messages out at once and drops what does
/// not fit; over QoS 1 a dropped packet would stay "in flight" and use up later passes' quota.
fn subscribe_phase(link: &Link, phase: &Phase, root: &str) {
    match phase {
        Phase::Availability(_) => {
            let _ = link
                .client
                .try_subscribe(format!("{root}/+/availability"), QoS::AtMostOnce);
        }
        Phase::Statuses => {
            let _ = link
                .client
                .try_subscribe(format!("{root}/+/status"), QoS::AtMostOnce);
        }
        Phase::Exact(batch) => {
            let filters: Vec<String> = batch.iter().map(|b| topics::status(root, b)).collect();
            let _ = link.client.try_subscribe_many(&filters, QoS::AtMostOnce);
        }
        Phase::Live | Phase::Connecting | Phase::Batches => {}
    }
}

/// What the messages so far have shown: the table's rows, boards with a status, boards seen in
/// this availability pass, and how many statuses came retained.
struct Seen<'a> {
    rows: &'a mut Table,
    have_status: &'a mut std::collections::BTreeSet<String>,
    pass_seen: &'a mut std::collections::BTreeSet<String>,
    retained_statuses: &'a mut usize,
    keys: &'a mut super::known::KnownBoards,
}

/// Adds `id` to a set of board ids the listing keeps, while it holds fewer than `max` (the
/// table's rows: a flood of invented ids is counted in the table's note, not kept here).
fn insert_bounded(set: &mut std::collections::BTreeSet<String>, id: &str, max: usize) {
    if set.len() < max || set.contains(id) {
        set.insert(id.to_string());
    }
}

/// Takes one status or availability message into the table (an empty status removes the row).
fn record_message(
    seen: Seen<'_>,
    phase: &mut Phase,
    root: &str,
    topic: &str,
    payload: &[u8],
    retain: bool,
) {
    let leaf = topic.rsplit('/').next().unwrap_or("");
    if topics::parse_board_leaf(root, topic, leaf).is_some_and(|b| !super::board_id_fits(b)) {
        seen.rows.refuse();
        return;
    }
    if let Some(b) = topics::parse_board_leaf(root, topic, "status") {
        if payload.is_empty() {
            seen.rows.remove(b);
            return;
        }
        if retain {
            *seen.retained_statuses += 1;
        }
        insert_bounded(seen.have_status, b, seen.rows.max_rows());
        if let Phase::Exact(waiting) = phase {
            waiting.remove(b);
        }
        let trust = seen.keys.judge(b, topic, payload);
        let Some(row) = seen.rows.touch(b, trust.is_trusted()) else {
            return;
        };
        // A board's own older status, sent again, does not replace the one shown.
        let replay = match trust.is_trusted() {
            true => replay_reason(row, payload),
            false => None,
        };
        match (&replay, trust.is_trusted()) {
            (Some(_), _) => {}
            (None, true) => apply_sealed_status(row, payload),
            (None, false) => apply_status(row, payload),
        }
        row.identity = match replay {
            Some(_) => "REPLAYED".into(),
            None => trust.word().into(),
        };
        row.replayed = replay;
    } else if let Some(b) = topics::parse_board_leaf(root, topic, "availability") {
        if payload.is_empty() {
            return;
        }
        if retain && matches!(phase, Phase::Availability(_)) {
            insert_bounded(seen.pass_seen, b, seen.rows.max_rows());
        }
        if let Some(row) = seen.rows.touch(b, false) {
            row.availability = String::from_utf8_lossy(&payload[..payload.len().min(64)])
                .chars()
                .take(16)
                .collect();
        }
    }
}

/// Redraws the live table: cursor home and clear screen on a terminal, else the table again.
/// New board keys are written then (in batches), and a `note:` line says what the table
/// leaves out.
fn redraw(rows: &Table, keys: &mut super::known::KnownBoards, tty: bool, out: &mut dyn Write) {
    let mut list: Vec<BoardRow> = rows.rows().cloned().collect();
    mark_stale(&mut list, crate::action::now_unix_s());
    let mut text = render_rows(&list);
    let notes = [rows.dropped_note(), rows.refused_note()];
    for n in save_keys(keys)
        .into_iter()
        .chain(notes.into_iter().flatten())
    {
        text.push_str(&format!("note: {n}\n"));
    }
    let _ = if tty {
        write!(out, "\x1b[H\x1b[2J{text}")
    } else {
        writeln!(out, "{text}")
    };
    let _ = out.flush();
}

/// What `watch` ends with: the rows, retained statuses received, whether the link fell back
/// to MQTT 3.1.1, and why the list is incomplete (if it is).
struct End {
    rows: Table,
    retained_statuses: usize,
    fell_back: bool,
    /// Times the broker closed the connection during the listing (`--once`).
    resets: u32,
    /// What the list leaves out on purpose (boards not recorded, rows dropped), said on stderr.
    notes: Vec<String>,
    incomplete: Option<String>,
}

/// Prints the final list (table or JSON) and the reasons it may be empty or incomplete, closes
/// the link, and gives the exit code.
async fn finish(
    a: &WatchArgs,
    link: Link,
    end: End,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let root = &a.op.topic_root;
    // Cut more often than the listing starts over: the INCOMPLETE list below says why.
    if a.once && end.retained_statuses == 0 && end.resets > 0 && end.incomplete.is_none() {
        // Not a protocol limit: the broker dropped the tool while it sent the statuses.
        let _ = writeln!(
            err,
            "npu-agent: no retained status arrived from {}: the broker closed the connection {} \
             time(s) while it sent them. NATS drops a client whose unsent data passes its \
             max_pending (64 MB by default; a status is about 2 KB): raise max_pending above \
             that for the whole fleet",
            a.op.broker, end.resets
        );
        link.shutdown(Duration::from_millis(500)).await;
        return EXIT_FAILED;
    }
    if a.once && end.retained_statuses == 0 && end.fell_back && end.resets == 0 {
        let _ = writeln!(
            err,
            "npu-agent: no retained status arrived from {} over MQTT 3.1.1. Brokers that refuse \
             MQTT 5, such as RabbitMQ before 3.13, do not deliver retained messages to wildcard \
             subscriptions ({root}/+/status), so the fleet cannot be listed this way: run `fleet \
             watch` without --once to see boards as they publish (every report interval), or use \
             a broker that delivers retained messages to wildcards (mosquitto, EMQX, RabbitMQ \
             3.13 and later)",
            a.op.broker
        );
        link.shutdown(Duration::from_millis(500)).await;
        return EXIT_FAILED;
    }
    let mut list: Vec<BoardRow> = end.rows.into_rows();
    mark_stale(&mut list, crate::action::now_unix_s());
    if list.is_empty() && a.once {
        let _ = writeln!(
            err,
            "npu-agent: no boards under {root}/ on {}: no agent has published a status or \
             availability there (check --topic-root and the agents' [mqtt] url and topic_root)",
            a.op.broker
        );
    }
    let incomplete = end.incomplete;
    if a.json {
        // Written straight from the rows: no JSON tree of the whole fleet in memory.
        let doc = WatchDoc {
            boards: &list,
            incomplete: incomplete.is_some(),
            incomplete_reason: incomplete.as_deref(),
        };
        let mut w = std::io::BufWriter::new(&mut *out);
        let _ = serde_json::to_writer_pretty(&mut w, &doc);
        let _ = writeln!(w);
        let _ = w.flush();
    } else {
        let _ = write!(out, "{}", render_rows(&list));
    }
    for n in &end.notes {
        let _ = writeln!(err, "npu-agent: {n}");
    }
    link.shutdown(Duration::from_millis(500)).await;
    match incomplete {
        Some(r) if a.once => {
            let _ = writeln!(err, "npu-agent: the board list is INCOMPLETE: {r}");
            EXIT_FAILED
        }
        _ => EXIT_OK,
    }
}

/// Why a `fleet watch --once` list is incomplete, or `None`. `passes`: (availability passes
/// made, boards the last one revealed that no earlier pass had, boards known in all) when
/// passes kept revealing new boards; `timed_out`: one retained burst was still arriving after
/// 30 s; `dropped`: messages lost inside this process (never with the operator's lossless link).
pub fn incomplete_reason(
    passes: Option<(u32, usize, usize)>,
    timed_out: bool,
    dropped: u64,
    cut: Option<String>,
) -> Option<String> {
    let mut why: Vec<String> = cut.into_iter().collect();
    if let Some((n, new, all)) = passes {
        why.push(format!(
            "after {n} passes over <root>/+/availability the last one still revealed {new} \
             boards no earlier pass had ({all} boards known): boards are joining faster than \
             the passes, or the broker drops retained messages (mosquitto drops what does not \
             fit in the socket's buffers plus max_queued_messages, default 1000, packets for \
             one client: set max_queued_messages 0, or above the number of boards)"
        ));
    }
    if timed_out {
        why.push("retained messages were still arriving after 30 s".to_string());
    }
    if dropped > 0 {
        why.push(format!(
            "{dropped} messages were dropped inside fleet watch"
        ));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Takes one message into `rows` with a key file that knows nothing.
    fn take(rows: &mut Table, topic: &str, payload: &[u8]) {
        let mut keys = super::super::known::KnownBoards::from_file(None);
        let (mut have, mut pass, mut retained) = Default::default();
        let seen = Seen {
            rows,
            have_status: &mut have,
            pass_seen: &mut pass,
            retained_statuses: &mut retained,
            keys: &mut keys,
        };
        record_message(
            seen,
            &mut Phase::Statuses,
            "npu-fleet",
            topic,
            payload,
            false,
        );
    }

    #[test]
    fn ids_no_agent_could_have_make_no_row_and_are_counted() {
        let mut rows = Table::new(100);
        let long = "a".repeat(crate::config::MAX_NAME_BYTES + 1);
        take(&mut rows, &format!("npu-fleet/{long}/status"), b"{}");
        take(
            &mut rows,
            &format!("npu-fleet/{long}/availability"),
            b"online",
        );
        assert_eq!(rows.len(), 0);
        assert!(rows.refused_note().unwrap().starts_with("2 message(s)"));
        // The list is still whole: nothing a real board sent was left out.
        assert_eq!(rows.dropped_note(), None);
        let longest = "b".repeat(crate::config::MAX_NAME_BYTES);
        take(
            &mut rows,
            &format!("npu-fleet/{longest}/availability"),
            b"online",
        );
        assert_eq!(rows.len(), 1);
    }
}
