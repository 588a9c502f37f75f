//! UTC civil time without a date-time library: RFC 3339 timestamps for reports and statuses, and
//! the `YYYY-MM-DD HH:MM:SS` stamps of `/var/log/dpkg.log`.
//!
//! Conversions between days since 1970-01-01 and proleptic Gregorian dates follow the
//! era-of-400-years method (146,097 days per era), exact for every year 0000–9999 handled here.

use std::time::{SystemTime, UNIX_EPOCH};

/// The current time as RFC 3339 in UTC: `2026-05-15T10:02:11.25Z` (fraction trimmed of trailing
/// zeros and left out when zero). Before 1970 (a board whose clock is unset reads 1970 at worst)
/// or after 9999 the result is an empty string, never a panic.
pub fn rfc3339_now() -> String {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => rfc3339_utc(d.as_secs(), d.subsec_nanos()),
        Err(_) => String::new(),
    }
}

/// `unix_s` seconds plus `nanos` (below 10^9) after the Unix epoch as RFC 3339 in UTC; an empty
/// string past the year 9999.
pub fn rfc3339_utc(unix_s: u64, nanos: u32) -> String {
    let days = unix_s / 86_400;
    let secs_of_day = unix_s % 86_400;
    let (y, m, d) = civil_from_days(days as i64);
    if !(0..=9999).contains(&y) {
        return String::new();
    }
    let mut out = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        secs_of_day / 3600,
        secs_of_day / 60 % 60,
        secs_of_day % 60
    );
    let nanos = nanos % 1_000_000_000;
    if nanos != 0 {
        let frac = format!("{nanos:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

/// Parses `YYYY-MM-DD` and `HH:MM:SS` (as dpkg.log writes them, UTC assumed) into Unix seconds.
/// `None` unless both have exactly that shape and name a real date and time (month 1–12, the
/// month's days with leap years, hour < 24, minute and second < 60).
pub fn unix_from_date_time(date: &str, clock: &str) -> Option<i64> {
    let d = fields::<3>(date, b'-', [4, 2, 2])?;
    let t = fields::<3>(clock, b':', [2, 2, 2])?;
    let (y, m, day) = (d[0] as i64, d[1], d[2]);
    if !(1..=12).contains(&m) || day == 0 || day > days_in_month(y, m) {
        return None;
    }
    if t[0] > 23 || t[1] > 59 || t[2] > 59 {
        return None;
    }
    let days = days_from_civil(y, m, day);
    Some(days * 86_400 + (t[0] * 3600 + t[1] * 60 + t[2]) as i64)
}

/// Splits `s` at `sep` into exactly `N` all-digit fields of the given widths.
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

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of the proleptic Gregorian date `y-m-d`.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (i64::from(m) + 9) % 12; // March = 0
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date `(year, month, day)` of `days` since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
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
