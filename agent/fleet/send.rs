//! `fleet send`: one command to one board or all, signed when a key is given, and its
//! lifecycle followed to the final state.

use super::*;

/// `fleet send` options.
#[derive(Debug, Clone)]
pub struct SendArgs {
    /// Action name.
    pub action: String,
    /// `K=V` arguments (`true`/`false` become booleans, the rest strings).
    pub args: Vec<String>,
    /// One board, or `None` for `--all`.
    pub board: Option<String>,
    /// Broker list, topic root, TLS, credentials and where known board keys are kept.
    pub op: super::operator::Operator,
    /// Seconds to wait for the final state.
    pub wait_s: u64,
    /// Seconds to wait, once the broker granted the subscriptions (SUBACK), for the target's
    /// retained availability or status before saying no such board has connected.
    pub board_wait_s: u64,
    /// Where a `capture` command's bundle is written (`fleet capture`); `None` for `fleet send`.
    pub out: Option<std::path::PathBuf>,
    /// Replace a file at `out` (`--force`).
    pub force: bool,
    /// New boards this run records in known_boards (`--accept-new-boards`).
    pub accept_new_boards: usize,
    /// `fleet capture`: write a bundle sealed by a key first seen in this run
    /// (`--accept-new-key`).
    pub accept_new_key: bool,
    /// `--json`: each lifecycle message as one JSON object per line ([`lifecycle_json`]), and
    /// a written bundle as one.
    pub json: bool,
}

/// Parses `K=V` arguments.
pub fn parse_args(kv: &[String]) -> Result<Map<String, Value>, String> {
    let mut m = Map::new();
    for a in kv {
        let (k, v) = a
            .split_once('=')
            .ok_or_else(|| format!("--arg {a:?}: expected KEY=VALUE"))?;
        if k.is_empty() {
            return Err(format!("--arg {a:?}: empty key"));
        }
        let v = match v {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            other => Value::String(other.to_string()),
        };
        m.insert(k.to_string(), v);
    }
    Ok(m)
}

pub(super) fn new_cmd_id() -> String {
    let mut rnd = [0u8; 3];
    let _ = getrandom::fill(&mut rnd);
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("{ms}-{:02x}{:02x}{:02x}", rnd[0], rnd[1], rnd[2])
}

#[derive(Debug, Deserialize)]
pub(super) struct Lifecycle {
    status: CmdStatus,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    result: Option<Value>,
    /// The step a running `fix` is at (with `executing`).
    #[serde(default)]
    step: Option<String>,
}

/// Sends one command and follows its lifecycle. Returns the exit code (0 only on `successful`
/// from every board that answered).
pub fn send(a: &SendArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if let Err(e) = a.action.parse::<command::ActionKind>() {
        let _ = writeln!(err, "npu-agent: {e}");
        return EXIT_USAGE;
    }
    let args = match parse_args(&a.args) {
        Ok(m) => m,
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            return EXIT_USAGE;
        }
    };
    let link = match operator_link(&a.op, "npu-agent-send") {
        Ok(l) => l,
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            return EXIT_USAGE;
        }
    };
    let board = a.board.clone().unwrap_or_else(|| topics::ALL.to_string());
    let cmd_id = new_cmd_id();
    let now = crate::action::now_unix_s();
    let mut msg = InitMessage {
        status: CmdStatus::Init,
        board: board.clone(),
        args,
        issued_at: now,
        expires_at: now + (a.wait_s as i64).clamp(30, 300),
        signature: None,
    };
    if let Some(k) = &a.op.signing_key {
        match command::load_signing_key(k) {
            Ok(key) => command::sign(&key, &a.op.topic_root, &a.action, &cmd_id, &mut msg),
            Err(e) => {
                let _ = writeln!(err, "npu-agent: {e}");
                return EXIT_USAGE;
            }
        }
    }
    let payload = match serde_json::to_vec(&msg) {
        Ok(p) => p,
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            return EXIT_USAGE;
        }
    };
    let Some(rt) = runtime(err) else {
        return EXIT_USAGE;
    };
    rt.block_on(send_async(a, link, &board, &cmd_id, payload, out, err))
}

/// What `fleet send` has seen on its link so far.
#[derive(Default)]
struct Seen {
    connected: bool,
    /// SUBACKs on the current connection: the replies' subscription's, then the target's.
    subacks: u32,
    /// When the broker granted the target's subscription (its retained messages follow).
    granted_at: Option<Instant>,
    /// The target (any board, for `--all`) has published an availability or status.
    target_seen: bool,
    /// The init is published.
    sent: bool,
    /// Every target has given a final state.
    answered: bool,
    last_error: String,
    online: BTreeMap<String, bool>,
    finals: BTreeMap<String, CmdStatus>,
    /// The board keys the operator knows; boards whose final answer is not sealed by theirs.
    keys: super::known::KnownBoards,
    untrusted: std::collections::BTreeSet<String>,
    /// Why a target board is stale ([`super::stale_reason`]), as its status showed.
    stale: Option<String>,
    /// The `result` of the board's trusted `successful` answer.
    result: Option<Value>,
    /// A `capture`'s chunks (`fleet capture`).
    bundle: Option<super::capture::Bundle>,
    /// The board's answer came and chunks of its bundle are missing: subscribe again, for the
    /// broker to send the retained ones.
    refetch: bool,
}

impl Seen {
    /// The exit code ([`exit_code`]; 1 as well when an answer is not the board's), saying why
    /// a failed send's board may be stale.
    fn code(&self, err: &mut dyn Write) -> i32 {
        let code = match self.untrusted.is_empty() {
            true => exit_code(&self.finals, self.answered),
            false => EXIT_FAILED,
        };
        if let (EXIT_FAILED, Some(why)) = (code, &self.stale) {
            let _ = writeln!(err, "npu-agent: {why}");
        }
        code
    }

    /// Takes one message: true when every target has answered and, for a `capture`, every
    /// chunk its answer names has come.
    fn take(
        &mut self,
        a: &SendArgs,
        cmd_id: &str,
        topic: &str,
        p: &[u8],
        (out, err): (&mut dyn Write, &mut dyn Write),
    ) -> bool {
        let chunk = self.bundle.as_mut().is_some_and(|b| b.take(topic, p));
        let replies = Replies {
            target_seen: &mut self.target_seen,
            online: &mut self.online,
            finals: &mut self.finals,
            keys: &mut self.keys,
            untrusted: &mut self.untrusted,
            stale: &mut self.stale,
            result: &mut self.result,
        };
        if !chunk && !on_reply(a, cmd_id, topic, p, replies, (out, err)) {
            return false;
        }
        self.answered = all_answered(a, &self.finals, &self.online);
        match (&mut self.bundle, &self.result) {
            // Named once, when the answer has come: a flood of junk cannot make the broker
            // resend for ever.
            (Some(b), Some(r)) => {
                self.refetch = b.name(r);
                self.answered && b.complete()
            }
            // A plain send, or a capture that failed (nothing to wait for).
            _ => self.answered,
        }
    }

    /// Why to stop waiting now, if it is time: the target never showed up after the SUBACK, the
    /// SUBACK never came, or the wait is over.
    fn give_up(&self, a: &SendArgs, deadline: Instant) -> Option<String> {
        let board_wait = Duration::from_secs(a.board_wait_s);
        if let Some(t) = self.granted_at {
            if !self.target_seen && t.elapsed() > board_wait {
                return Some(unknown_target(a));
            }
        }
        if Instant::now() < deadline {
            return None;
        }
        Some(match (self.connected, self.granted_at, self.target_seen) {
            (true, None, _) => format!(
                "the broker did not answer the subscriptions (no SUBACK) within {} s; try a \
                 longer --wait",
                a.wait_s
            ),
            (true, Some(_), false) => unknown_target(a),
            _ => String::new(), // no final state: reported with the last error
        })
    }
}

pub(super) async fn send_async(
    a: &SendArgs,
    mut opts: LinkOptions,
    board: &str,
    cmd_id: &str,
    payload: Vec<u8>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let root = &a.op.topic_root;
    let init_topic = topics::command(root, board, &a.action, cmd_id);
    let reply_filter = if a.board.is_some() {
        init_topic.clone()
    } else {
        topics::command(root, "+", &a.action, cmd_id)
    };
    let mut link = Link::start(&opts);
    // The command line allows at most a day; a caller of this function may pass more.
    let deadline = Instant::now()
        .checked_add(Duration::from_secs(a.wait_s))
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(MAX_WAIT_S));
    let mut seen = Seen {
        keys: super::known::KnownBoards::load_accepting(
            a.op.known_boards.as_deref(),
            new_boards(a),
        ),
        bundle: a
            .out
            .as_ref()
            .map(|_| super::capture::Bundle::new(root, board, cmd_id)),
        ..Seen::default()
    };
    let mut started = Instant::now();
    loop {
        // An unreachable broker is reported after 10 s (per protocol version tried), not after
        // the whole --wait.
        if !seen.connected && started.elapsed() > Duration::from_secs(10) {
            let why = match seen.last_error.as_str() {
                "" => "no answer",
                e => e,
            };
            let _ = writeln!(err, "npu-agent: cannot reach {}: {why}", a.op.broker);
            link.abort();
            return EXIT_FAILED;
        }
        match seen.give_up(a, deadline) {
            Some(why) if why.is_empty() => {
                if !seen.answered {
                    report_no_final_state(a, seen.sent, &seen.last_error, &reply_filter, err);
                }
                break;
            }
            Some(why) => {
                let _ = writeln!(err, "npu-agent: {why}");
                break;
            }
            None => {}
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let wait = left.min(Duration::from_millis(500));
        let ev = match tokio::time::timeout(wait, link.events.recv()).await {
            Ok(Some(ev)) => ev,
            Ok(None) | Err(_) => continue,
        };
        match ev {
            LinkEvent::ProtocolRefused { reason } => {
                let _ = writeln!(
                    err,
                    "npu-agent: the broker refuses MQTT 5 ({reason}); using MQTT 3.1.1"
                );
                opts.protocol = crate::mqtt::link::Protocol::V311;
                link = Link::start(&opts);
                started = Instant::now();
            }
            LinkEvent::Connected { .. } => {
                seen.connected = true;
                seen.subacks = 0;
                let chunks = seen.bundle.as_ref().map(|b| b.filter());
                subscribe_replies(&link, a, board, &reply_filter, chunks);
                if !seen.sent
                    && link
                        .client
                        .try_publish(init_topic.clone(), QoS::AtLeastOnce, true, payload.clone())
                        .is_ok()
                {
                    seen.sent = true;
                    let _ = writeln!(out, "{}", init_line(a, board, cmd_id));
                }
            }
            LinkEvent::SubAck { codes } => {
                if let Some(why) = on_suback(&mut seen, a, &codes, &reply_filter) {
                    let _ = writeln!(err, "npu-agent: {why}");
                    break;
                }
            }
            LinkEvent::Disconnected { reason, .. } => seen.last_error = reason,
            LinkEvent::SessionTakenOver { reason, .. } => seen.last_error = reason,
            LinkEvent::Message {
                topic, payload: p, ..
            } => {
                if seen.take(a, cmd_id, &topic, &p, (out, err)) {
                    break;
                }
                if let (true, Some(b)) = (std::mem::take(&mut seen.refetch), &seen.bundle) {
                    let _ = link.client.try_subscribe(b.filter(), QoS::AtLeastOnce);
                }
            }
        }
    }
    save_keys(&mut seen.keys, a, err);
    let mut code = seen.code(err);
    if let (Some(b), Some(path)) = (&seen.bundle, &a.out) {
        code = write_bundle(b, code, (path, a.force, a.json), out, err);
    }
    if seen.sent {
        clear_retained(&link, a, &init_topic, &seen.finals, cmd_id);
    }
    link.shutdown(Duration::from_secs(2)).await;
    code
}

/// Writes the board keys first seen in this run, and says why some were not recorded.
fn save_keys(keys: &mut super::known::KnownBoards, a: &SendArgs, err: &mut dyn Write) {
    keys.save();
    let hint = match a.out {
        Some(_) => "--accept-new-key writes a bundle sealed by a key first seen now",
        None => super::known::MORE_BOARDS,
    };
    if let Some(note) = keys.refused_note(hint) {
        let _ = writeln!(err, "npu-agent: {note}");
    }
}

/// New boards this run may record: `--accept-new-boards` for `fleet send`; for `fleet
/// capture` none unless `--accept-new-key` (a bundle is written only when sealed by a key the
/// operator knew before, or was told to take).
fn new_boards(a: &SendArgs) -> usize {
    match (&a.out, a.accept_new_key) {
        (None, _) => a.accept_new_boards,
        (Some(_), true) => 1,
        (Some(_), false) => 0,
    }
}

/// Writes a `capture`'s bundle once the board answered `successful` with its own key; says
/// why not otherwise. Returns the exit code.
fn write_bundle(
    b: &super::capture::Bundle,
    code: i32,
    (path, replace, json): (&std::path::Path, bool, bool),
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let written = match code {
        EXIT_OK => b.write(path, replace),
        // The cause is printed already: the board's refusal or failure, or why no answer came.
        _ => Err("the capture did not succeed (see above)".into()),
    };
    match written {
        Ok(said) if json => {
            let _ = writeln!(out, "{}", serde_json::to_string(&said).unwrap_or_default());
            EXIT_OK
        }
        Ok(said) => {
            let _ = writeln!(out, "{said}");
            EXIT_OK
        }
        Err(e) => {
            let _ = writeln!(err, "npu-agent: bundle not written: {e}");
            EXIT_FAILED
        }
    }
}

/// A SUBACK (the replies' subscription first, then the target's): a refusal ends the send
/// (returned as the reason); the target's grant starts the wait for its retained messages.
fn on_suback(seen: &mut Seen, a: &SendArgs, codes: &[u8], reply_filter: &str) -> Option<String> {
    seen.subacks += 1;
    let what = match seen.subacks {
        1 => format!("the command's replies ({reply_filter})"),
        _ => format!(
            "the board's availability and status under {}/{}/",
            a.op.topic_root,
            a.board.as_deref().unwrap_or("+")
        ),
    };
    if let Some(code) = codes.iter().find(|c| **c >= 0x80) {
        return Some(format!(
            "the broker refused the subscription to {what} ({}): check its ACL for this client",
            crate::mqtt::link::suback_refusal_name(*code)
        ));
    }
    if seen.subacks == 2 {
        seen.granted_at = Some(Instant::now());
    }
    None
}

/// 0 when every target answered (for `--all`: every board online) and every final state is
/// successful; else 1 (as it is when an answer is not the board's).
fn exit_code(finals: &BTreeMap<String, CmdStatus>, answered: bool) -> i32 {
    let all_ok = finals.values().all(|s| *s == CmdStatus::Successful);
    if all_ok && answered {
        EXIT_OK
    } else {
        EXIT_FAILED
    }
}

/// The most boards `fleet send --all` keeps track of (online, answered, refused): a flood of
/// invented ids is not kept past it.
const MAX_BOARDS: usize = 100_000;

/// What an answer under a board id no agent could have counts as, once, among the refused.
const OVERLONG_ID: &str = "(an answer under an over-long board id)";

/// True while a map of boards holds fewer than [`MAX_BOARDS`].
fn has_room(len: usize) -> bool {
    len < MAX_BOARDS
}

/// What the replies so far have shown: whether the target exists, which boards are online
/// (for `--all`), and each board's final state.
struct Replies<'a> {
    target_seen: &'a mut bool,
    online: &'a mut BTreeMap<String, bool>,
    finals: &'a mut BTreeMap<String, CmdStatus>,
    keys: &'a mut super::known::KnownBoards,
    untrusted: &'a mut std::collections::BTreeSet<String>,
    stale: &'a mut Option<String>,
    result: &'a mut Option<Value>,
}

/// Records why the target may not answer (offline, stale): said at once, then at the end.
fn note_stale(stale: &mut Option<String>, why: String, a: &SendArgs, err: &mut dyn Write) {
    if stale.is_none() {
        let _ = writeln!(
            err,
            "npu-agent: {why}: waiting up to {} s (--wait) for it to connect and answer",
            a.wait_s
        );
    }
    *stale = Some(why);
}

/// Takes one message: an availability or status of the target marks it seen; a lifecycle
/// message of this command is printed and a final state recorded (true: the caller checks
/// whether every target has answered).
fn on_reply(
    a: &SendArgs,
    cmd_id: &str,
    topic: &str,
    p: &[u8],
    seen: Replies<'_>,
    (out, err): (&mut dyn Write, &mut dyn Write),
) -> bool {
    let root = &a.op.topic_root;
    if let Some(b) = topics::parse_board_leaf(root, topic, "availability") {
        *seen.target_seen |= !p.is_empty();
        if a.board.is_none() {
            if super::board_id_fits(b)
                && (has_room(seen.online.len()) || seen.online.contains_key(b))
            {
                seen.online.insert(b.to_string(), p == b"online");
            }
        } else if p == b"offline" {
            let why = format!(
                "{} is offline (its retained availability says so)",
                super::show::id(b, ID_WIDTH)
            );
            note_stale(seen.stale, why, a, err);
        }
        return false;
    }
    if let Some(b) = topics::parse_board_leaf(root, topic, "status") {
        *seen.target_seen |= !p.is_empty();
        // The board's own status (known key, or first seen in this run) sets the key its
        // answers are held to.
        seen.keys.judge(b, topic, p);
        if let Ok(s) = serde_json::from_slice::<Value>(p) {
            let (time, every) = (s["time"].as_str().unwrap_or(""), s["interval_s"].as_u64());
            if let Some(why) = super::stale_reason(time, every, crate::action::now_unix_s()) {
                let why = format!("{} is stale: {why}", super::show::id(b, ID_WIDTH));
                note_stale(seen.stale, why, a, err);
            }
        }
        return false;
    }
    let Some(t) = topics::parse_command(root, topic) else {
        return false;
    };
    if t.cmd_id != cmd_id || p.is_empty() {
        return false;
    }
    let Ok(l) = serde_json::from_slice::<Lifecycle>(p) else {
        return false;
    };
    if l.status == CmdStatus::Init {
        return false;
    }
    if !super::board_id_fits(&t.board) {
        // Not kept or cleared, and the send fails (exit 1).
        seen.untrusted.insert(OVERLONG_ID.into());
        return false;
    }
    // An answer is the board's only when sealed by the key known for it (or first seen).
    let trust = seen.keys.judge(&t.board, topic, p);
    // Said as `fleet watch` says it, once per board (on stderr: the lifecycle lines stay as
    // scripts read them): a key first seen in this run may be anyone's.
    if trust.is_trusted() && seen.keys.announce_new(&t.board) {
        let _ = writeln!(
            err,
            "npu-agent: {}: new key, first seen in this run and now recorded in known_boards: \
             check it against the board's log (\"this board's identity\")",
            super::show::id(&t.board, ID_WIDTH)
        );
    }
    let whose = match trust.is_trusted() {
        true => String::new(),
        false => format!(" [{}: not taken as the board's answer]", trust.word()),
    };
    if a.json {
        let _ = writeln!(out, "{}", lifecycle_json(&t.board, cmd_id, &l, Some(trust)));
    } else {
        let _ = writeln!(out, "{}{whose}", lifecycle_line(&t.board, cmd_id, &l));
    }
    if l.status.is_final() && !trust.is_trusted() && has_room(seen.untrusted.len()) {
        seen.untrusted.insert(t.board.clone());
    }
    // Only the board's own final ends its wait: a forged one must not hide the real answer.
    if l.status.is_final()
        && trust.is_trusted()
        && (has_room(seen.finals.len()) || seen.finals.contains_key(&t.board))
    {
        seen.finals.insert(t.board.clone(), l.status);
    }
    if l.status == CmdStatus::Successful && trust.is_trusted() {
        *seen.result = l.result;
    }
    true
}

/// After a connection: subscribes to the command's replies (and a `capture`'s `chunks`), then
/// (a second SUBSCRIBE, whose SUBACK starts the wait for the target) to the target's
/// availability (and status, for one board), whose retained messages tell whether the target
/// exists.
fn subscribe_replies(
    link: &Link,
    a: &SendArgs,
    board: &str,
    reply_filter: &str,
    chunks: Option<String>,
) {
    let root = &a.op.topic_root;
    let first: Vec<String> = std::iter::once(reply_filter.to_string())
        .chain(chunks)
        .collect();
    let _ = link.client.try_subscribe_many(&first, QoS::AtLeastOnce);
    let (filters, qos) = match a.board {
        None => (vec![format!("{root}/+/availability")], QoS::AtLeastOnce),
        Some(_) => (
            ["availability", "status"]
                .map(|leaf| format!("{root}/{board}/{leaf}"))
                .to_vec(),
            QoS::AtMostOnce,
        ),
    };
    let _ = link.client.try_subscribe_many(&filters, qos);
}

/// The widest board id `fleet send` prints (an agent's is at most 64 characters).
pub const ID_WIDTH: usize = 64;

/// The widest reason or result `fleet send` prints on a lifecycle line, characters.
pub const REASON_WIDTH: usize = 4096;

/// `BOARD CMD_ID STATUS[: reason][ result]`: one line of a command's lifecycle, the board's
/// text escaped and cut for the terminal ([`super::show`]).
fn lifecycle_line(board: &str, cmd_id: &str, l: &Lifecycle) -> String {
    use super::show;
    let mut line = format!(
        "{} {cmd_id} {}",
        show::id(board, ID_WIDTH),
        serde_json::to_value(l.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    );
    if let Some(r) = l.reason.as_ref().or(l.step.as_ref()) {
        line.push_str(&format!(": {}", show::text(r, REASON_WIDTH)));
    }
    if let (CmdStatus::Successful, Some(res)) = (l.status, &l.result) {
        line.push_str(&format!(" {}", show::text(&res.to_string(), REASON_WIDTH)));
    }
    line
}

/// The line that says the command was published (`BOARD CMD_ID init`, or its JSON).
fn init_line(a: &SendArgs, board: &str, cmd_id: &str) -> String {
    let init = Lifecycle {
        status: CmdStatus::Init,
        reason: None,
        result: None,
        step: None,
    };
    match a.json {
        true => lifecycle_json(board, cmd_id, &init, None),
        false => format!("{board} {cmd_id} init"),
    }
}

/// `fleet send --json`: one lifecycle message as one line of JSON: `board`, `cmd_id`,
/// `status`, and when present `reason`, `step`, `result` (texts cut to [`REASON_WIDTH`]
/// characters), and `identity` ([`super::known::Trust::word`]; absent on the `init` line) with
/// `trusted` (false: not taken as the board's answer).
fn lifecycle_json(
    board: &str,
    cmd_id: &str,
    l: &Lifecycle,
    trust: Option<super::known::Trust>,
) -> String {
    let cut = |s: &String| s.chars().take(REASON_WIDTH).collect::<String>();
    let mut o = Map::new();
    o.insert("board".into(), board.into());
    o.insert("cmd_id".into(), cmd_id.into());
    o.insert(
        "status".into(),
        serde_json::to_value(l.status).unwrap_or_default(),
    );
    let texts = [("reason", &l.reason), ("step", &l.step)];
    for (k, v) in texts
        .into_iter()
        .filter_map(|(k, v)| Some((k, v.as_ref()?)))
    {
        o.insert(k.into(), cut(v).into());
    }
    if let Some(r) = &l.result {
        o.insert("result".into(), r.clone());
    }
    if let Some(t) = trust {
        o.insert("identity".into(), t.word().into());
        o.insert("trusted".into(), t.is_trusted().into());
    }
    Value::Object(o).to_string()
}

/// Whether every target has answered with a final state: the one board, or (for `--all`)
/// every board that is online, at least one.
fn all_answered(
    a: &SendArgs,
    finals: &BTreeMap<String, CmdStatus>,
    online: &BTreeMap<String, bool>,
) -> bool {
    if a.board.is_some() {
        return !finals.is_empty();
    }
    let up: Vec<&String> = online
        .iter()
        .filter(|(_, on)| **on)
        .map(|(b, _)| b)
        .collect();
    !up.is_empty() && up.iter().all(|b| finals.contains_key(*b))
}

/// `--wait` ran out: says so, with the last connection error, and how to clear a final state
/// a board may still retain after the command was cleared.
fn report_no_final_state(
    a: &SendArgs,
    sent: bool,
    last_error: &str,
    reply_filter: &str,
    err: &mut dyn Write,
) {
    let _ = writeln!(
        err,
        "npu-agent: no final state within {} s{}",
        a.wait_s,
        if last_error.is_empty() {
            String::new()
        } else {
            format!(" (last connection error: {last_error})")
        }
    );
    if sent {
        let _ = writeln!(
            err,
            "npu-agent: the command is cleared now, but a board that still answers \
             later leaves its final state retained on {reply_filter}; clear it with \
             `mosquitto_pub -h HOST -p PORT -r -n -t '<that topic>'` (an empty \
             retained message)"
        );
    }
}

/// The requester clears the retained command (and every board's answer for fleet-wide ones).
fn clear_retained(
    link: &Link,
    a: &SendArgs,
    init_topic: &str,
    finals: &BTreeMap<String, CmdStatus>,
    cmd_id: &str,
) {
    let _ = link
        .client
        .try_publish(init_topic.to_string(), QoS::AtLeastOnce, true, Vec::new());
    if a.board.is_none() {
        for b in finals.keys() {
            let _ = link.client.try_publish(
                topics::command(&a.op.topic_root, b, &a.action, cmd_id),
                QoS::AtLeastOnce,
                true,
                Vec::new(),
            );
        }
    }
}

/// The message for a `fleet send` target that never published anything on this broker.
pub(super) fn unknown_target(a: &SendArgs) -> String {
    let root = &a.op.topic_root;
    match &a.board {
        Some(b) => format!(
            "no status was ever seen for board {b:?} under {root}/ on {} within {} s \
             (--board-wait) of the SUBACK: no agent with that board_id has connected to this \
             broker with this topic root (`npu-agent fleet watch --once --broker {}` lists the \
             boards)",
            a.op.broker, a.board_wait_s, a.op.broker
        ),
        None => format!(
            "no board at all under {root}/ on {} within {} s (--board-wait) of the SUBACK: no \
             agent has published its availability there (check --topic-root and the agents' \
             [mqtt] url and topic_root)",
            a.op.broker, a.board_wait_s
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A padded or invisible board id, or a reason with blanks, cannot forge a line of
    /// `fleet send --all` (issue 37, item 6).
    #[test]
    fn a_lifecycle_line_is_one_line_of_escaped_cut_text() {
        let l: Lifecycle = serde_json::from_str(&format!(
            r#"{{"status":"rejected","reason":"x{}\nb2 c1 successful"}}"#,
            " ".repeat(5000)
        ))
        .unwrap();
        let padded = format!("b1{}b2 c1 successful", " ".repeat(400));
        let line = lifecycle_line(&padded, "c1", &l);
        assert!(!line.contains('\n') && !line.contains("  "), "{line}");
        assert!(line.starts_with("b1\\x20\\x20"), "{line}");
        assert!(
            line.chars().count() < ID_WIDTH + REASON_WIDTH + 20,
            "{line}"
        );
        let zw = lifecycle_line("b1\u{200b}", "c1", &l);
        assert!(zw.starts_with("b1\\u{200b} c1 rejected: x"), "{zw}");
    }
}
