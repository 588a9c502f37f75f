//! Text from the broker as the fleet tools print it. A board id is the topic's spelling, which
//! anyone who may publish chooses: an id outside the agent's own board-id alphabet
//! (`[a-z0-9_-]`, as [`crate::diagnose::sanitize_board_id`] makes it) is shown escaped (`\x20`
//! for a blank, `\u{200b}` for a zero-width space), so a look-alike never reads as a real
//! board, and every cell is cut to its column with a `…` marker, so a long padded value
//! cannot wrap into a line of its own. Free text from a status or an answer keeps its letters
//! but loses control, invisible and direction characters, and blanks after a blank, the same
//! way.

/// The marker at the end of a cut cell.
pub const CUT: char = '…';

/// Whether `c` is in the agent's board-id alphabet.
fn id_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'
}

/// Characters a terminal shows as nothing, or that move other text: controls, blanks other
/// than the space, zero-width and joiner characters, direction marks and overrides, the soft
/// hyphen, variation selectors and tags.
fn invisible(c: char) -> bool {
    c.is_control()
        || (c.is_whitespace() && c != ' ')
        || matches!(c,
            '\u{00ad}' | '\u{034f}' | '\u{061c}' | '\u{115f}' | '\u{1160}' | '\u{17b4}'
            | '\u{17b5}' | '\u{180b}'..='\u{180f}' | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{206f}' | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}' | '\u{feff}' | '\u{ffa0}' | '\u{fff0}'..='\u{fffb}'
            | '\u{e0000}'..='\u{e0fff}')
}

/// `c` escaped: `\xNN` for ASCII, `\u{N}` beyond.
fn escape(c: char, out: &mut String) {
    use std::fmt::Write as _;
    let _ = match c.is_ascii() {
        true => write!(out, "\\x{:02x}", c as u32),
        false => write!(out, "\\u{{{:x}}}", c as u32),
    };
}

/// Cuts `s` to `width` characters, the last one [`CUT`] when anything was left out.
fn cut(s: String, width: usize) -> String {
    if s.chars().count() <= width {
        return s;
    }
    let mut out: String = s.chars().take(width.saturating_sub(1)).collect();
    out.push(CUT);
    out
}

/// A board id as printed: every character outside the alphabet escaped, cut to `width`.
pub fn id(board: &str, width: usize) -> String {
    let mut out = String::new();
    for c in board.chars() {
        match id_char(c) {
            true => out.push(c),
            false => escape(c, &mut out),
        }
        if out.len() > width.saturating_mul(4) {
            break; // enough to cut from, whatever the id's length
        }
    }
    cut(out, width)
}

/// Free text from the broker (a profile, a finding, a reason) as printed: control and
/// invisible characters escaped, and every blank after a blank (padding that would push text
/// to where a line of its own seems to start), cut to `width`.
pub fn text(s: &str, width: usize) -> String {
    let mut out = String::new();
    let mut blank = false;
    for c in s.chars() {
        let padding = c == ' ' && blank;
        blank = c == ' ';
        match padding || invisible(c) || c == char::REPLACEMENT_CHARACTER {
            true => escape(c, &mut out),
            false => out.push(c),
        }
        if out.len() > width.saturating_mul(4) {
            break;
        }
    }
    cut(out, width)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A padded id cannot draw a row of its own; look-alikes are told apart (issue 37, item 6).
    #[test]
    fn ids_outside_the_alphabet_are_escaped_and_cut() {
        assert_eq!(id("rock-5b_01", 24), "rock-5b_01");
        assert_eq!(id("b1\u{200b}", 24), "b1\\u{200b}");
        assert_eq!(id("b1 ", 24), "b1\\x20");
        assert_eq!(id("B1", 24), "\\x421");
        assert_eq!(id("b1\x1b[2J", 24), "b1\\x1b\\x5b2\\x4a");
        let padded = format!("b1{}online signed ok", " ".repeat(400));
        let shown = id(&padded, 24);
        assert_eq!(shown.chars().count(), 24, "{shown}");
        assert!(shown.ends_with(CUT) && !shown.contains(' '), "{shown}");
        assert_eq!(id(&"a".repeat(30), 24), format!("{}{CUT}", "a".repeat(23)));
    }

    #[test]
    fn free_text_keeps_letters_and_loses_invisible_characters() {
        assert_eq!(text("rk3588 NPU über", 40), "rk3588 NPU über");
        assert_eq!(
            text("a\u{202e}b\u{feff}\n", 40),
            "a\\u{202e}b\\u{feff}\\x0a"
        );
        let long = format!("x{}fake", " ".repeat(300));
        assert_eq!(text(&long, 14), "x \\x20\\x20\\x2…");
        assert_eq!(text("a b  c", 40), "a b \\x20c");
    }
}
