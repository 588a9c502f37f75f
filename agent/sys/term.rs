//! [`TerminalSafe`]: the writer every command's output goes through, so board-controlled text
//! (model strings, finding ids, log lines, file names, a fleet's statuses) cannot drive an
//! operator's terminal. It drops C0 control characters other than newline and tab, DEL, C1
//! controls (U+0080..U+009F), the direction marks, embeddings, overrides and isolates and the
//! line and paragraph separators (U+061C, U+200E/F, U+202A..E, U+2066..9, U+2028/9), and every
//! escape sequence except the three the agent writes itself: SGR colours (`ESC [ digits/; m`,
//! only the codes the agent uses: no conceal, no black or background colour), and, for `fleet
//! watch` only ([`TerminalSafe::with_redraw`]), cursor home (`ESC [ H`) and clear screen
//! (`ESC [ 2 J`). JSON output keeps its meaning: serde escapes control characters inside
//! strings, and only the invisible direction and separator characters are left out.

use std::io::{self, Write};

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Normal,
    Esc,
    Csi(Vec<u8>),
    C2,
    /// A multi-byte UTF-8 sequence that may be a direction or separator character: the bytes
    /// so far and the length it will have.
    Utf8(Vec<u8>, usize),
}

/// Direction marks, embeddings, overrides and isolates (which reorder what follows on the line,
/// so a verdict can read backwards) and the line and paragraph separators.
fn hidden_format(seq: &[u8]) -> bool {
    std::str::from_utf8(seq)
        .ok()
        .and_then(|s| s.chars().next())
        .is_some_and(|c| {
            matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
        })
}

/// SGR parameters the agent's own colours use (reset, bold, dim, red, green, yellow, magenta,
/// cyan). Anything else — conceal (`8`), black or background colours that hide text — is
/// dropped, so board text cannot make a verdict invisible.
fn own_sgr(params: &[u8]) -> bool {
    params.split(|c| *c == b';').all(|p| {
        matches!(
            p,
            b"" | b"0" | b"1" | b"2" | b"31" | b"32" | b"33" | b"35" | b"36"
        )
    })
}

/// A writer that filters what reaches `inner`. See the module docs.
#[derive(Debug)]
pub struct TerminalSafe<W: Write> {
    inner: W,
    state: State,
    redraw: bool,
    /// The first write or flush error of `inner` ([`TerminalSafe::write_error`]).
    error: Option<io::ErrorKind>,
}

impl<W: Write> TerminalSafe<W> {
    /// Wraps `inner`.
    pub fn new(inner: W) -> Self {
        TerminalSafe {
            inner,
            state: State::Normal,
            redraw: false,
            error: None,
        }
    }

    /// The kind of the first error writing or flushing `inner` returned, if any: callers that
    /// ignore single write results (a report line) still learn that the output is incomplete
    /// (a full disk under a `.prom` file, a closed pipe).
    pub fn write_error(&self) -> Option<io::ErrorKind> {
        self.error
    }

    /// Also lets cursor home and clear screen through: only for `fleet watch`, which redraws its
    /// table (and escapes the boards' text itself). Every other command drops them, so a boot
    /// file or a model string cannot wipe what the operator is reading.
    pub fn with_redraw(mut self) -> Self {
        self.redraw = true;
        self
    }

    fn filter(&mut self, buf: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(buf.len());
        for &b in buf {
            let state = std::mem::replace(&mut self.state, State::Normal);
            self.state = match state {
                State::Normal => Self::normal(b, &mut out),
                State::Esc if b == b'[' => State::Csi(Vec::new()),
                State::Esc => State::Normal,
                State::Csi(mut p) => match b {
                    0x30..=0x3f if p.len() < 16 => {
                        p.push(b);
                        State::Csi(p)
                    }
                    b'm' if own_sgr(&p) => {
                        out.extend_from_slice(b"\x1b[");
                        out.extend_from_slice(&p);
                        out.push(b'm');
                        State::Normal
                    }
                    b'H' if p.is_empty() && self.redraw => {
                        out.extend_from_slice(b"\x1b[H");
                        State::Normal
                    }
                    b'J' if p == b"2" && self.redraw => {
                        out.extend_from_slice(b"\x1b[2J");
                        State::Normal
                    }
                    0x40..=0x7e => State::Normal,
                    _ => State::Normal,
                },
                State::C2 if (0x80..=0x9f).contains(&b) => State::Normal,
                State::C2 => {
                    out.push(0xc2);
                    Self::normal(b, &mut out)
                }
                State::Utf8(mut seq, len) if b & 0xc0 == 0x80 => {
                    seq.push(b);
                    if seq.len() < len {
                        State::Utf8(seq, len)
                    } else {
                        if !hidden_format(&seq) {
                            out.extend_from_slice(&seq);
                        }
                        State::Normal
                    }
                }
                State::Utf8(seq, _) => {
                    out.extend_from_slice(&seq);
                    Self::normal(b, &mut out)
                }
            };
        }
        out
    }

    fn normal(b: u8, out: &mut Vec<u8>) -> State {
        match b {
            0x1b => State::Esc,
            0xc2 => State::C2,
            // Leads of U+061C (ALM) and of U+2000..U+2FFF (marks, overrides, separators).
            0xd8 => State::Utf8(vec![b], 2),
            0xe2 => State::Utf8(vec![b], 3),
            b'\n' | b'\t' => {
                out.push(b);
                State::Normal
            }
            0x00..=0x1f | 0x7f => State::Normal,
            _ => {
                out.push(b);
                State::Normal
            }
        }
    }
}

impl<W: Write> Write for TerminalSafe<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let filtered = self.filter(buf);
        if let Err(e) = self.inner.write_all(&filtered) {
            self.error.get_or_insert(e.kind());
            return Err(e);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush().inspect_err(|e| {
            self.error.get_or_insert(e.kind());
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn safe(parts: &[&[u8]]) -> Vec<u8> {
        let mut w = TerminalSafe::new(Vec::new()).with_redraw();
        for p in parts {
            w.write_all(p).unwrap();
        }
        w.inner
    }

    #[test]
    fn direction_and_separator_characters_are_dropped() {
        let hostile = "ok\u{202E}liaf\u{202C} \u{2066}x\u{2069}\u{200F}\u{2028}y\u{2029}\u{061C}z";
        let bytes = hostile.as_bytes();
        // Whole, and split inside every multi-byte sequence.
        let (a, b) = bytes.split_at(3);
        for out in [
            safe(&[bytes]),
            safe(&[a, b]),
            safe(&[&bytes[..6], &bytes[6..]]),
        ] {
            assert_eq!(String::from_utf8_lossy(&out), "okliaf xyz");
        }
        // Other text in the same UTF-8 ranges passes: arrows, ellipsis, box drawing, Arabic.
        let fine = "a → b … ─ ص";
        assert_eq!(String::from_utf8_lossy(&safe(&[fine.as_bytes()])), fine);
    }

    #[test]
    fn board_text_cannot_drive_the_terminal() {
        let hostile: &[u8] =
            b"Evil\x1b]0;pwned\x07 \x1b[2K\x1b[1A\rmodel\x08\x9b\xc2\x9b31m\x7f ok\n\tnext";
        let out = safe(&[hostile]);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "Evil0;pwned model\u{fffd}31m ok\n\tnext"
        );
        // The agent's own sequences pass, also when split across writes.
        let out = safe(&[
            b"\x1b[1;3",
            b"1mfail\x1b[0m \x1b[H\x1b",
            b"[2J",
            "é ü".as_bytes(),
        ]);
        assert_eq!(out, "\x1b[1;31mfail\x1b[0m \x1b[H\x1b[2Jé ü".as_bytes());
    }

    /// Outside `fleet watch`, home and clear screen are dropped too.
    #[test]
    fn no_redraw_outside_watch() {
        let mut w = TerminalSafe::new(Vec::new());
        w.write_all(b"a\x1b[H\x1b[2Jb\x1b[1;31mc").unwrap();
        assert_eq!(w.inner, b"ab\x1b[1;31mc");
    }

    /// Colours that hide text (conceal, black on black, a background) never pass.
    #[test]
    fn hiding_colours_are_dropped() {
        let out = safe(&[b"a\x1b[8mFAIL\x1b[30;40mb\x1b[0;8mc\x1b[38;5;0md\x1b[33me"]);
        assert_eq!(String::from_utf8_lossy(&out), "aFAILbcd\x1b[33me");
    }
}
