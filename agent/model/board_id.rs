//! The board id's alphabet: what a board calls itself in topics, statuses and bundles.

/// Sanitises a board id to `[a-z0-9_-]` (other characters become `-`), at most 64 characters.
pub fn sanitize_board_id(raw: &str) -> String {
    let s: String = raw
        .trim()
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    if s.is_empty() {
        "unknown".into()
    } else {
        s
    }
}
