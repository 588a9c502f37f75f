//! `fleet send ... --all --waves 10%,100%` (or `--canary N%`): a staged rollout. The online
//! boards are listed from the retained availability and statuses (as `fleet watch --once`
//! lists them), split into waves by cumulative share, and each wave is sent board by board in
//! parallel ([`super::send`] per board) and waits for every answer. The first wave with a
//! board that did not answer `successful` stops the rollout: its failed boards are named and
//! the later waves are not sent (exit 1).

use super::*;

/// Parses `10%,50%,100%`: cumulative shares in percent, increasing, the last 100.
///
/// Errors: a share that is no whole percent from 1 to 100, not increasing, or a last one
/// under 100.
pub fn parse_waves(s: &str) -> Result<Vec<u32>, String> {
    let mut out: Vec<u32> = Vec::new();
    for w in s.split(',') {
        let p: u32 = w
            .trim()
            .trim_end_matches('%')
            .parse()
            .ok()
            .filter(|p| (1..=100).contains(p))
            .ok_or_else(|| format!("--waves {s:?}: {w:?} is no share from 1% to 100%"))?;
        if out.last().is_some_and(|last| *last >= p) {
            return Err(format!("--waves {s:?}: the shares must increase"));
        }
        out.push(p);
    }
    if out.last() != Some(&100) {
        return Err(format!("--waves {s:?}: the last wave must be 100%"));
    }
    Ok(out)
}

/// `boards` split into waves by the cumulative `shares` (percent): wave k holds the boards up
/// to `ceil(n * share_k / 100)`; waves left empty are dropped.
pub fn split(boards: &[String], shares: &[u32]) -> Vec<Vec<String>> {
    let n = boards.len();
    let mut out = Vec::new();
    let mut from = 0;
    for p in shares {
        let to = (n * *p as usize).div_ceil(100).min(n);
        if to > from {
            out.push(boards[from..to].to_vec());
            from = to;
        }
    }
    out
}

/// The online boards whose status is sealed by the key pinned for them in `known_boards`, as
/// `fleet watch --once --format json` lists them (`identity` `signed`). A board whose key is not
/// pinned (first seen, changed, unsealed) is left out and named on `err`: anyone with broker
/// access can announce a board online and answer for it, which must not decide a wave.
///
/// Errors: the listing failed (its error output).
fn online_boards(a: &SendArgs, err: &mut dyn Write) -> Result<Vec<String>, i32> {
    let w = WatchArgs {
        op: a.op.clone(),
        once: true,
        json: true,
        // Listing records no key: only boards pinned before the rollout take part.
        accept_new_boards: 0,
        max_rows: MAX_ROWS,
    };
    let (mut o, mut e) = (Vec::new(), Vec::new());
    let code = watch(&w, &mut o, &mut e);
    let _ = err.write_all(&e);
    if code != 0 && o.is_empty() {
        return Err(code);
    }
    let doc: Value = serde_json::from_slice(&o).unwrap_or(Value::Null);
    let online = doc["boards"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["availability"] == "online");
    let (mut boards, mut unpinned) = (Vec::new(), Vec::new());
    for r in online {
        let Some(b) = r["board"].as_str() else {
            continue;
        };
        match r["identity"].as_str() {
            Some("signed") => boards.push(b.to_string()),
            other => unpinned.push(format!(
                "{} ({})",
                super::show::id(b, ID_WIDTH),
                other.unwrap_or("no status")
            )),
        }
    }
    if !unpinned.is_empty() {
        let _ = writeln!(
            err,
            "npu-agent: {} online board(s) left out of the rollout, their key not pinned in \
             known_boards: {}; run `npu-agent fleet watch --once` to record first-seen keys, check \
             them against the boards' logs, and roll out again",
            unpinned.len(),
            unpinned.join(", ")
        );
    }
    boards.sort();
    Ok(boards)
}

/// Runs the staged rollout of `a` (its `board` is ignored) in the waves `shares`. Returns the
/// exit code: 0 when every board of every wave answered `successful`.
pub fn rollout(a: &SendArgs, shares: &[u32], out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let boards = match online_boards(a, err) {
        Ok(b) => b,
        Err(code) => return code,
    };
    if boards.is_empty() {
        let _ = writeln!(err, "npu-agent: no board online: nothing to roll out");
        return EXIT_FAILED;
    }
    let waves = split(&boards, shares);
    for (i, wave) in waves.iter().enumerate() {
        let _ = writeln!(
            out,
            "wave {}/{}: {} board(s): {}",
            i + 1,
            waves.len(),
            wave.len(),
            wave.join(", ")
        );
        let results: Vec<(String, i32, Vec<u8>, Vec<u8>)> = std::thread::scope(|s| {
            let handles: Vec<_> = wave
                .iter()
                .map(|b| {
                    let one = SendArgs {
                        board: Some(b.clone()),
                        // Every board of a wave is pinned: no new key is taken meanwhile.
                        accept_new_boards: 0,
                        ..a.clone()
                    };
                    s.spawn(move || {
                        let (mut o, mut e) = (Vec::new(), Vec::new());
                        let code = send(&one, &mut o, &mut e);
                        (one.board.unwrap_or_default(), code, o, e)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or((String::new(), EXIT_FAILED, vec![], vec![]))
                })
                .collect()
        });
        let mut failed = Vec::new();
        for (b, code, o, e) in results {
            let _ = out.write_all(&o);
            let _ = err.write_all(&e);
            if code != 0 {
                failed.push(b);
            }
        }
        if !failed.is_empty() {
            let _ = writeln!(
                err,
                "npu-agent: wave {}/{} failed on {}; the rollout stopped ({} board(s) in later waves not sent)",
                i + 1,
                waves.len(),
                failed.join(", "),
                waves[i + 1..].iter().map(Vec::len).sum::<usize>()
            );
            return EXIT_FAILED;
        }
    }
    let _ = writeln!(
        out,
        "rollout: {} board(s) in {} wave(s), all successful",
        boards.len(),
        waves.len()
    );
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waves_are_cumulative_shares_ending_at_100() {
        assert_eq!(parse_waves("10%,100%"), Ok(vec![10, 100]));
        assert_eq!(parse_waves("5,50%,100"), Ok(vec![5, 50, 100]));
        assert!(parse_waves("50%,10%,100%")
            .unwrap_err()
            .contains("increase"));
        assert!(parse_waves("10%,90%").unwrap_err().contains("100%"));
        assert!(parse_waves("0%,100%").unwrap_err().contains("no share"));
        assert!(parse_waves("x").is_err());
        let boards: Vec<String> = (0..25).map(|i| format!("b{i:02}")).collect();
        let w = split(&boards, &[10, 100]);
        assert_eq!(w.iter().map(Vec::len).collect::<Vec<_>>(), [3, 22]);
        assert_eq!(w[0], ["b00", "b01", "b02"]);
        let three = &boards[..3];
        assert_eq!(
            split(three, &[10, 50, 100])
                .iter()
                .map(Vec::len)
                .collect::<Vec<_>>(),
            [1, 1, 1]
        );
        assert_eq!(split(&boards[..1], &[10, 100]).len(), 1);
    }
}
