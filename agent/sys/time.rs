//! UTC time through the `time` crate: RFC 3339 timestamps for reports and statuses, and the
//! `YYYY-MM-DD HH:MM:SS` stamps of `/var/log/dpkg.log`.

use time::format_description::well_known::Rfc3339;
use time::{Date, Month, OffsetDateTime, PrimitiveDateTime, Time};

/// The current time as RFC 3339 in UTC: `2026-05-15T10:02:11.25Z` (fraction trimmed of trailing
/// zeros and left out when zero). Before 1970 (a board whose clock is unset reads 1970 at worst)
/// or after 9999 the result is an empty string, never a panic.
pub fn rfc3339_now() -> String {
    match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => rfc3339_utc(d.as_secs(), d.subsec_nanos()),
        Err(_) => String::new(),
    }
}

/// `unix_s` seconds plus `nanos` (below 10^9) after the Unix epoch as RFC 3339 in UTC; an empty
/// string past the year 9999.
pub fn rfc3339_utc(unix_s: u64, nanos: u32) -> String {
    let Ok(secs) = i64::try_from(unix_s) else {
        return String::new();
    };
    OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| t.replace_nanosecond(nanos % 1_000_000_000).ok())
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}

/// Parses `YYYY-MM-DD` and `HH:MM:SS` (as dpkg.log writes them, UTC assumed) into Unix seconds.
/// `None` unless both have exactly that shape and name a real date and time (month 1–12, the
/// month's days with leap years, hour < 24, minute and second < 60).
pub fn unix_from_date_time(date: &str, clock: &str) -> Option<i64> {
    let [y, m, d] = fields::<3>(date, b'-', [4, 2, 2])?;
    let [h, min, s] = fields::<3>(clock, b':', [2, 2, 2])?;
    let month = Month::try_from(u8::try_from(m).ok()?).ok()?;
    let date = Date::from_calendar_date(i32::try_from(y).ok()?, month, u8::try_from(d).ok()?);
    let time = Time::from_hms(h.try_into().ok()?, min.try_into().ok()?, s.try_into().ok()?);
    Some(
        PrimitiveDateTime::new(date.ok()?, time.ok()?)
            .assume_utc()
            .unix_timestamp(),
    )
}

/// Splits `s` at `sep` into exactly `N` all-digit fields of the given widths (dpkg.log's fixed
/// layout: no sign, no shorter or longer field).
fn fields<const N: usize>(s: &str, sep: u8, widths: [usize; N]) -> Option<[u32; N]> {
    let mut out = [0u32; N];
    let mut parts = s.as_bytes().split(|b| *b == sep);
    for (slot, width) in out.iter_mut().zip(widths) {
        let p = parts.next()?;
        if p.len() != width || !p.iter().all(u8::is_ascii_digit) {
            return None;
        }
        *slot = p.iter().fold(0, |n, b| n * 10 + u32::from(b - b'0'));
    }
    parts.next().is_none().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339_utc(0, 0), "1970-01-01T00:00:00Z");
        // 2026-05-15 10:02:11 UTC
        assert_eq!(rfc3339_utc(1_778_839_331, 0), "2026-05-15T10:02:11Z");
        assert_eq!(
            rfc3339_utc(1_778_839_331, 250_000_000),
            "2026-05-15T10:02:11.25Z"
        );
        assert_eq!(
            rfc3339_utc(951_782_400, 1),
            "2000-02-29T00:00:00.000000001Z"
        );
        assert_eq!(rfc3339_utc(253_402_300_799, 0), "9999-12-31T23:59:59Z");
        assert_eq!(rfc3339_utc(253_402_300_800, 0), "");
    }

    #[test]
    fn parses_dpkg_stamps_and_round_trips() {
        assert_eq!(
            unix_from_date_time("2026-05-15", "10:02:11"),
            Some(1_778_839_331)
        );
        assert_eq!(unix_from_date_time("1970-01-01", "00:00:00"), Some(0));
        assert_eq!(unix_from_date_time("1969-12-31", "23:59:59"), Some(-1));
        assert_eq!(
            unix_from_date_time("2024-02-29", "00:00:00"),
            Some(1_709_164_800)
        );
        // Every day of four centuries goes there and back.
        let mut s = unix_from_date_time("1900-01-01", "12:00:00").unwrap();
        let end = unix_from_date_time("2300-01-01", "12:00:00").unwrap();
        while s < end {
            if s >= 0 {
                let f = rfc3339_utc(s as u64, 0);
                assert_eq!(unix_from_date_time(&f[..10], &f[11..19]), Some(s), "{f}");
            }
            s += 86_400;
        }
    }

    #[test]
    fn rejects_bad_shapes_and_impossible_dates() {
        for (d, t) in [
            ("2023-02-29", "00:00:00"),
            ("2100-02-29", "00:00:00"),
            ("2026-13-01", "00:00:00"),
            ("2026-00-01", "00:00:00"),
            ("2026-04-31", "00:00:00"),
            ("2026-05-15", "24:00:00"),
            ("2026-05-15", "10:60:00"),
            ("2026-05-15", "10:00:60"),
            ("26-05-15", "10:00:00"),
            ("2026-5-15", "10:00:00"),
            ("2026-05-15", "10:00"),
            ("2026-05-15-01", "10:00:00"),
            ("+026-05-15", "10:00:00"),
            ("2026-05-15", "1a:00:00"),
            ("", ""),
            ("２026-05-15", "10:00:00"),
        ] {
            assert_eq!(unix_from_date_time(d, t), None, "{d} {t}");
        }
    }
}
