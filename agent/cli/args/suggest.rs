//! "Did you mean" hints for a mistyped option or command: the nearest known name.

use crate::sys::distance::edit_distance;

/// `"; did you mean 'PREFIXNAME'?"` for the known name closest to a mistyped `given` (letter
/// case ignored): one it begins (two letters at least), or one at most about a third of its
/// letters away (changed, inserted or removed); an empty string when none is that close.
/// `prefix` is shown before the name (`--` for options).
pub(super) fn did_you_mean<'a>(
    given: &str,
    known: impl Iterator<Item = &'a str>,
    prefix: &str,
) -> String {
    let given = given.to_ascii_lowercase();
    let limit = given.chars().count().div_ceil(3).max(1);
    known
        .map(|k| {
            let prefix = given.len() >= 2 && k.starts_with(given.as_str());
            (if prefix { 0 } else { edit_distance(&given, k) }, k)
        })
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| format!("; did you mean '{prefix}{k}'?"))
        .unwrap_or_default()
}
