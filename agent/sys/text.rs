//! Strict UTF-8 for configuration text: a byte that is not UTF-8 is an error naming its line,
//! column and value, never a silent U+FFFD (a `disabled` or `trusted_keys` entry mangled into
//! another string would change what the board accepts).

use std::fmt;

/// Where a text is not UTF-8: the first offending byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotUtf8 {
    /// 1-based line of the byte.
    pub line: usize,
    /// 1-based column of the byte, in bytes from the start of its line.
    pub column: usize,
    /// The byte's value.
    pub byte: u8,
}

impl fmt::Display for NotUtf8 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}: byte {:#04x} at column {} is not UTF-8 (save the file as UTF-8)",
            self.line, self.byte, self.column
        )
    }
}

impl NotUtf8 {
    /// The message without the line (for errors that carry the line apart).
    pub fn without_line(&self) -> String {
        format!(
            "byte {:#04x} at column {} is not UTF-8 (save the file as UTF-8)",
            self.byte, self.column
        )
    }
}

/// `bytes` as a `String`, or where the first byte that is not UTF-8 is.
///
/// Errors: [`NotUtf8`] with the line, column and value of that byte (a sequence cut short at the
/// end of the text names its first byte).
pub fn strict_utf8(bytes: Vec<u8>) -> Result<String, NotUtf8> {
    String::from_utf8(bytes).map_err(|e| {
        let b = e.as_bytes();
        let at = e.utf8_error().valid_up_to();
        let head = &b[..at];
        let line_start = head.iter().rposition(|&c| c == b'\n').map_or(0, |i| i + 1);
        NotUtf8 {
            line: head.iter().filter(|&&c| c == b'\n').count() + 1,
            column: at - line_start + 1,
            byte: b[at],
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bad_byte_is_named_by_line_and_column() {
        let e = strict_utf8(b"a = 1\nb = 2\nc = \"x\xffy\"\n".to_vec()).unwrap_err();
        assert_eq!(
            e,
            NotUtf8 {
                line: 3,
                column: 7,
                byte: 0xff
            }
        );
        assert!(e
            .to_string()
            .starts_with("line 3: byte 0xff at column 7 is not UTF-8"));
        // A sequence cut at the end, and valid multibyte text before a bad byte.
        let e = strict_utf8("é\n\u{4e2d}".bytes().chain([0xe4]).collect()).unwrap_err();
        assert_eq!((e.line, e.column, e.byte), (2, 4, 0xe4));
        assert_eq!(strict_utf8("ok\u{4e2d}".into()).unwrap(), "ok\u{4e2d}");
    }
}
