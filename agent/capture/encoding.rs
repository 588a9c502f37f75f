//! A bundle file's bytes, redacted whatever their encoding: UTF-8 text as text; UTF-16 (by its
//! byte-order mark or its NUL pattern) decoded, then redacted as text; any other text (GBK,
//! Latin-1, NUL padding after a power cut) with its ASCII runs redacted in place and every other
//! byte kept; a binary file kept as it is when its ASCII runs carry nothing to redact, else left
//! out (redacting inside a binary would corrupt it) and named in the manifest.

use super::Redactor;

/// What [`redact_bytes`] made of a file.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Redacted {
    /// The bytes to store, and a note for the manifest (empty: nothing to say).
    Keep(Vec<u8>, &'static str),
    /// Not stored: why (for the manifest's `missing`).
    LeftOut(&'static str),
}

/// UTF-16 byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Utf16 {
    Le,
    Be,
}

/// The UTF-16 byte order of `b`: a byte-order mark (on an even length), else a NUL pattern (ASCII in UTF-16 has a
/// NUL in every other byte: at least 1 in 20 of the pairs that are not both NUL have one on one
/// side, ten times as many as on the other) whose decoded start is text (at most 1 in 20
/// characters a control character other than tab and line ends). `None`: not UTF-16.
fn utf16_order(b: &[u8]) -> Option<Utf16> {
    // A byte-order mark on a file of whole code units (a device-tree string that happens to
    // start with 0xff 0xfe is no UTF-16).
    match b {
        [0xff, 0xfe, ..] if b.len() % 2 == 0 => return Some(Utf16::Le),
        [0xfe, 0xff, ..] if b.len() % 2 == 0 => return Some(Utf16::Be),
        _ => {}
    }
    let head = &b[..b.len().min(8192) & !1];
    let (mut odd_nul, mut even_nul, mut pairs) = (0usize, 0usize, 0usize);
    for p in head.chunks_exact(2) {
        match (p[0], p[1]) {
            (0, 0) => continue,
            (_, 0) => odd_nul += 1,
            (0, _) => even_nul += 1,
            _ => {}
        }
        pairs += 1;
    }
    let mostly = |one: usize, other: usize| one >= 2 && one * 20 >= pairs && other * 10 <= one;
    let order = if mostly(odd_nul, even_nul) {
        Utf16::Le
    } else if mostly(even_nul, odd_nul) {
        Utf16::Be
    } else {
        return None;
    };
    let text = decode_utf16(head, order);
    let chars = text.chars().filter(|c| *c != '\0').count();
    let control = text
        .chars()
        .filter(|c| (c.is_control() && !matches!(c, '\0' | '\t' | '\n' | '\r')) || *c == '\u{fffd}')
        .count();
    (chars > 0 && control * 20 <= chars).then_some(order)
}

/// `b` decoded as UTF-16 in `order` (a byte-order mark dropped; an unpaired surrogate becomes
/// U+FFFD, an odd last byte is dropped).
fn decode_utf16(b: &[u8], order: Utf16) -> String {
    let units = b.chunks_exact(2).map(|p| match order {
        Utf16::Le => u16::from_le_bytes([p[0], p[1]]),
        Utf16::Be => u16::from_be_bytes([p[0], p[1]]),
    });
    let text: String = char::decode_utf16(units)
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect();
    text.strip_prefix('\u{feff}')
        .map(str::to_string)
        .unwrap_or(text)
}

/// Text in some 8-bit encoding: not an ELF file, and control bytes other than NUL, tab, line
/// ends, form feed and escape are at most 1 in 50 of the bytes that are not NUL.
fn legacy_text(b: &[u8]) -> bool {
    let body = b.iter().filter(|c| **c != 0).count();
    let control = b
        .iter()
        .filter(|c| (**c < 0x20 && !b"\0\t\n\r\x0c\x1b".contains(c)) || **c == 0x7f)
        .count();
    !b.starts_with(b"\x7fELF") && body > 0 && control * 50 <= body
}

/// A byte of the ASCII text runs: printable ASCII, tab and line ends.
fn ascii_text(c: u8) -> bool {
    c.is_ascii_graphic() || b" \t\n\r".contains(&c)
}

/// `b` with each run of ASCII text redacted as text and every other byte kept as it is (a GBK
/// character's bytes, a Latin-1 letter, NUL padding); `true` when anything changed.
fn redact_ascii_runs(red: &Redactor, b: &[u8]) -> (Vec<u8>, bool) {
    let mut out = Vec::with_capacity(b.len());
    let mut changed = false;
    let mut i = 0;
    while i < b.len() {
        let text = ascii_text(b[i]);
        let end = b[i..]
            .iter()
            .position(|c| ascii_text(*c) != text)
            .map_or(b.len(), |n| i + n);
        let run = &b[i..end];
        match (text, std::str::from_utf8(run)) {
            (true, Ok(s)) => {
                let r = red.text(s);
                changed |= r != s;
                out.extend_from_slice(r.as_bytes());
            }
            _ => out.extend_from_slice(run),
        }
        i = end;
    }
    (out, changed)
}

/// The bytes of a bundle file after redaction (see the module). `cut`: the bytes are the tail
/// of a longer file, whose first (partial) line is dropped.
pub(super) fn redact_bytes(red: &Redactor, b: &[u8], cut: bool) -> Redacted {
    let drop_partial = |mut t: String| {
        if cut {
            if let Some(nl) = t.find('\n') {
                t.drain(..=nl);
            }
        }
        t
    };
    if b.starts_with(b"\x7fELF") {
        return Redacted::Keep(b.to_vec(), "");
    }
    if let Some(order) = utf16_order(b) {
        let text = drop_partial(decode_utf16(b, order));
        let note = match order {
            Utf16::Le => "decoded from UTF-16LE",
            Utf16::Be => "decoded from UTF-16BE",
        };
        return Redacted::Keep(red.text(&text).into_bytes(), note);
    }
    let b = match (cut, b.iter().position(|c| *c == b'\n')) {
        (true, Some(nl)) => &b[nl + 1..],
        _ => b,
    };
    if let Ok(s) = std::str::from_utf8(b) {
        if !s.contains('\0') {
            return Redacted::Keep(red.text(s).into_bytes(), "");
        }
    }
    let (out, changed) = redact_ascii_runs(red, b);
    if legacy_text(b) {
        let note = if changed {
            "not UTF-8: its ASCII text redacted, other bytes kept"
        } else {
            ""
        };
        return Redacted::Keep(if changed { out } else { b.to_vec() }, note);
    }
    match changed {
        false => Redacted::Keep(b.to_vec(), ""),
        true => Redacted::LeftOut(
            "left out: a binary file whose text holds what redaction takes out (it cannot be \
             redacted in place)",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn red() -> Redactor {
        Redactor {
            literals: vec![("kitchen-pi".into(), "redacted-host".into())],
            enabled: true,
        }
    }

    fn stored(r: Redacted) -> (String, &'static str) {
        match r {
            Redacted::Keep(b, note) => (String::from_utf8_lossy(&b).into_owned(), note),
            Redacted::LeftOut(why) => panic!("left out: {why}"),
        }
    }

    /// Issue 37 item 2: a GBK log keeps its Chinese bytes and loses its secrets.
    #[test]
    fn a_gbk_log_has_its_ascii_runs_redacted_and_its_other_bytes_kept() {
        // "模型加载失败" (model load failed) in GBK, then a secret in ASCII.
        let gbk: &[u8] = b"\xc4\xa3\xd0\xcd\xbc\xd3\xd4\xd8\xca\xa7\xb0\xdc: rknn_init ret=-1 password=GbkPw123 --api-key sk9xqwe77 host kitchen-pi\n";
        let Redacted::Keep(out, note) = redact_bytes(&red(), gbk, false) else {
            panic!("left out")
        };
        let text = String::from_utf8_lossy(&out);
        for s in ["GbkPw123", "sk9xqwe77", "kitchen-pi"] {
            assert!(!text.contains(s), "{s} in {text}");
        }
        assert!(out.starts_with(&gbk[..12]), "the GBK bytes changed");
        assert!(
            text.contains("rknn_init ret=-1 password=<redacted>"),
            "{text}"
        );
        assert_eq!(note, "not UTF-8: its ASCII text redacted, other bytes kept");
        // Nothing to redact: the file byte for byte.
        let clean: &[u8] = b"\xc4\xa3\xd0\xcd ok\n";
        assert_eq!(
            redact_bytes(&red(), clean, false),
            Redacted::Keep(clean.to_vec(), "")
        );
    }

    fn utf16(text: &str, order: Utf16, bom: bool) -> Vec<u8> {
        let mut out = Vec::new();
        let units = (bom.then_some(0xfeff))
            .into_iter()
            .chain(text.encode_utf16());
        for u in units {
            out.extend_from_slice(&match order {
                Utf16::Le => u.to_le_bytes(),
                Utf16::Be => u.to_be_bytes(),
            });
        }
        out
    }

    #[test]
    fn a_utf16_log_is_decoded_by_its_bom_or_nul_pattern_then_redacted() {
        let log = "推理 start\nuser=bob password=U16pw999 --api-key sk9xqwe77\n";
        for (order, bom) in [
            (Utf16::Le, true),
            (Utf16::Be, true),
            (Utf16::Le, false),
            (Utf16::Be, false),
        ] {
            let (text, note) = stored(redact_bytes(&red(), &utf16(log, order, bom), false));
            assert!(
                !text.contains("U16pw999") && !text.contains("sk9xqwe77"),
                "{order:?} {bom}: {text}"
            );
            assert!(text.starts_with("推理 start\n"), "{order:?} {bom}: {text}");
            assert!(note.starts_with("decoded from UTF-16"), "{note}");
        }
        // A tail cut in the middle of a line starts at the next one.
        let (text, _) = stored(redact_bytes(&red(), &utf16(log, Utf16::Le, false), true));
        assert!(text.starts_with("user=user password=<redacted>"), "{text}");
    }

    #[test]
    fn nul_padding_is_not_utf16_and_a_binary_with_a_secret_is_left_out() {
        let mut padded = b"kernel: ok password=padPw1234\n".to_vec();
        padded.extend_from_slice(&[0u8; 64]);
        let Redacted::Keep(out, _) = redact_bytes(&red(), &padded, false) else {
            panic!("left out")
        };
        assert!(!String::from_utf8_lossy(&out).contains("padPw1234"));
        assert!(out.ends_with(&[0u8; 64]));
        let mut bin: Vec<u8> = (0u8..=255).cycle().take(2048).collect();
        assert_eq!(
            redact_bytes(&red(), &bin, false),
            Redacted::Keep(bin.clone(), "")
        );
        bin.extend_from_slice(b"\x01\x02token=binTok99\x03");
        assert!(matches!(
            redact_bytes(&red(), &bin, false),
            Redacted::LeftOut(_)
        ));
        // A malformed device-tree string that starts like a byte-order mark is no UTF-16.
        let dt = b"\xff\xfeRadxa ROCK 5B\0garbage".to_vec();
        assert_eq!(
            redact_bytes(&red(), &dt, false),
            Redacted::Keep(dt.clone(), "")
        );
        let elf = b"\x7fELF\x02\x01password=kept-as-is".to_vec();
        assert_eq!(
            redact_bytes(&red(), &elf, false),
            Redacted::Keep(elf.clone(), "")
        );
    }
}
