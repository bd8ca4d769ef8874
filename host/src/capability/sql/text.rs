//! Text of the wire formats sqlx leaves undecoded without extra crates: PostgreSQL NUMERIC,
//! dates, times and intervals, and MySQL's binary dates and times, written as ISO 8601 (and
//! plain decimal) text. Decoding them here keeps the dependency tree to sqlx alone and gives
//! the guest the exact value: a NUMERIC's digits, not a rounded float.

use std::fmt::Write as _;

/// Days from 1970-01-01 to 2000-01-01, PostgreSQL's epoch.
const PG_EPOCH_DAYS: i64 = 10_957;
const MICROS_PER_DAY: i64 = 86_400_000_000;

/// Year, month, day of a day count from 1970-01-01 (proleptic Gregorian, astronomical years:
/// 1 BC is year 0), after Howard Hinnant's `civil_from_days`.
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `YYYY-MM-DD`; a year outside 0..=9999 gets a sign and at least four digits (ISO 8601's
/// expanded form).
fn write_date(out: &mut String, year: i64, month: u32, day: u32) {
    // Writing to a String cannot fail.
    let _ = if (0..=9999).contains(&year) {
        write!(out, "{year:04}-{month:02}-{day:02}")
    } else {
        write!(out, "{year:+05}-{month:02}-{day:02}")
    };
}

/// `HH:MM:SS` and `.ffffff` when there are microseconds (trailing zeros dropped).
fn write_clock(out: &mut String, hours: u64, minutes: u64, seconds: u64, micros: u64) {
    let _ = write!(out, "{hours:02}:{minutes:02}:{seconds:02}");
    if micros != 0 {
        let frac = format!("{micros:06}");
        let _ = write!(out, ".{}", frac.trim_end_matches('0'));
    }
}

fn write_time_of_day(out: &mut String, micros: i64) {
    let micros = micros.rem_euclid(MICROS_PER_DAY) as u64;
    let secs = micros / 1_000_000;
    write_clock(
        out,
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        micros % 1_000_000,
    );
}

/// A value whose bytes do not have the shape of its type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum BadBytes {
    #[error("expected at least {need} bytes, got {got}")]
    Short { need: usize, got: usize },
    /// No length byte (MySQL): `what` is `date` or `time`.
    #[error("empty {what} value")]
    Empty { what: &'static str },
    #[error("date value of {got} bytes, expected {need}")]
    Date { got: usize, need: usize },
    #[error("time value of {got} bytes")]
    Time { got: usize },
}

fn take<const N: usize>(bytes: &[u8], at: usize) -> Result<[u8; N], BadBytes> {
    bytes
        .get(at..at + N)
        .and_then(|b| b.try_into().ok())
        .ok_or(BadBytes::Short {
            need: at + N,
            got: bytes.len(),
        })
}

/// PostgreSQL DATE (binary: days since 2000-01-01).
pub(super) fn pg_date(bytes: &[u8]) -> Result<String, BadBytes> {
    let days = i32::from_be_bytes(take(bytes, 0)?);
    Ok(match days {
        i32::MAX => "infinity".into(),
        i32::MIN => "-infinity".into(),
        d => {
            let (y, m, day) = civil(i64::from(d) + PG_EPOCH_DAYS);
            let mut out = String::with_capacity(10);
            write_date(&mut out, y, m, day);
            out
        }
    })
}

/// PostgreSQL TIMESTAMP / TIMESTAMPTZ (binary: microseconds since 2000-01-01 00:00, UTC for
/// TIMESTAMPTZ, which gets a `Z`).
pub(super) fn pg_timestamp(bytes: &[u8], utc: bool) -> Result<String, BadBytes> {
    let micros = i64::from_be_bytes(take(bytes, 0)?);
    Ok(match micros {
        i64::MAX => "infinity".into(),
        i64::MIN => "-infinity".into(),
        us => {
            let (y, m, d) = civil(us.div_euclid(MICROS_PER_DAY) + PG_EPOCH_DAYS);
            let mut out = String::with_capacity(27);
            write_date(&mut out, y, m, d);
            out.push('T');
            write_time_of_day(&mut out, us);
            if utc {
                out.push('Z');
            }
            out
        }
    })
}

/// PostgreSQL TIME (microseconds since midnight) and TIMETZ (the same and the zone's offset in
/// seconds west of UTC).
pub(super) fn pg_time(bytes: &[u8], with_zone: bool) -> Result<String, BadBytes> {
    let micros = i64::from_be_bytes(take(bytes, 0)?);
    let mut out = String::with_capacity(21);
    // 24:00:00 is a valid TIME; keep it rather than wrapping to 00:00:00.
    if micros == MICROS_PER_DAY {
        out.push_str("24:00:00");
    } else {
        write_time_of_day(&mut out, micros);
    }
    if with_zone {
        let west = i32::from_be_bytes(take(bytes, 8)?);
        let east = -i64::from(west);
        let (sign, abs) = if east < 0 { ('-', -east) } else { ('+', east) };
        let _ = write!(out, "{sign}{:02}:{:02}", abs / 3600, abs / 60 % 60);
        if abs % 60 != 0 {
            let _ = write!(out, ":{:02}", abs % 60);
        }
    }
    Ok(out)
}

/// PostgreSQL INTERVAL (microseconds, days, months) as an ISO 8601 duration, each part with
/// its own sign as PostgreSQL's `iso_8601` style writes it (`P1Y2M-3DT4H5M6.5S`).
pub(super) fn pg_interval(bytes: &[u8]) -> Result<String, BadBytes> {
    let micros = i64::from_be_bytes(take(bytes, 0)?);
    let days = i32::from_be_bytes(take(bytes, 8)?);
    let months = i32::from_be_bytes(take(bytes, 12)?);
    let mut out = String::from("P");
    for (n, unit) in [(months / 12, 'Y'), (months % 12, 'M'), (days, 'D')] {
        if n != 0 {
            let _ = write!(out, "{n}{unit}");
        }
    }
    if micros != 0 {
        out.push('T');
        let (hours, rest) = (micros / 3_600_000_000, micros % 3_600_000_000);
        let (minutes, rest) = (rest / 60_000_000, rest % 60_000_000);
        for (n, unit) in [(hours, 'H'), (minutes, 'M')] {
            if n != 0 {
                let _ = write!(out, "{n}{unit}");
            }
        }
        if rest != 0 {
            let sign = if rest < 0 { "-" } else { "" };
            let (secs, frac) = (rest.abs() / 1_000_000, rest.abs() % 1_000_000);
            let _ = write!(out, "{sign}{secs}");
            if frac != 0 {
                let _ = write!(out, ".{}", format!("{frac:06}").trim_end_matches('0'));
            }
            out.push('S');
        }
    }
    if out == "P" {
        out.push_str("T0S");
    }
    Ok(out)
}

/// PostgreSQL NUMERIC (binary: digit count, weight, sign, display scale, base-10000 digits) as
/// plain decimal text with the column's scale: `-12.50`, `NaN`, `Infinity`.
pub(super) fn pg_numeric(bytes: &[u8]) -> Result<String, BadBytes> {
    let ndigits = usize::from(u16::from_be_bytes(take(bytes, 0)?));
    let weight = i64::from(i16::from_be_bytes(take(bytes, 2)?));
    let sign = u16::from_be_bytes(take(bytes, 4)?);
    let scale = usize::from(u16::from_be_bytes(take(bytes, 6)?));
    match sign {
        0xC000 => return Ok("NaN".into()),
        0xD000 => return Ok("Infinity".into()),
        0xF000 => return Ok("-Infinity".into()),
        _ => {}
    }
    let mut digits = Vec::with_capacity(ndigits);
    for i in 0..ndigits {
        digits.push(u16::from_be_bytes(take(bytes, 8 + 2 * i)?));
    }
    let digit = |i: i64| usize::try_from(i).ok().and_then(|i| digits.get(i)).copied();
    let mut out = String::new();
    if sign == 0x4000 {
        out.push('-');
    }
    if weight < 0 {
        out.push('0');
    }
    for i in 0..=weight {
        let d = digit(i).unwrap_or(0);
        let _ = if i == 0 {
            write!(out, "{d}")
        } else {
            write!(out, "{d:04}")
        };
    }
    if scale > 0 {
        out.push('.');
        let mut frac = String::with_capacity(scale + 4);
        let mut i = weight + 1;
        while frac.len() < scale {
            let _ = write!(frac, "{:04}", digit(i).unwrap_or(0));
            i += 1;
        }
        frac.truncate(scale);
        out.push_str(&frac);
    }
    Ok(out)
}

/// PostgreSQL UUID (16 bytes) in its usual hyphenated form.
pub(super) fn pg_uuid(bytes: &[u8]) -> Result<String, BadBytes> {
    let b: [u8; 16] = take(bytes, 0)?;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    ))
}

/// MySQL binary DATE, DATETIME and TIMESTAMP: a length byte (0, 4, 7 or 11), then year (u16
/// little-endian), month, day, hour, minute, second, microseconds (u32). The zero date comes
/// back as `0000-00-00`.
pub(super) fn mysql_datetime(bytes: &[u8], date_only: bool) -> Result<String, BadBytes> {
    let len = usize::from(*bytes.first().ok_or(BadBytes::Empty { what: "date" })?);
    let field = |i: usize| bytes.get(1 + i).copied().map_or(0, u64::from);
    if bytes.len() < 1 + len {
        return Err(BadBytes::Date {
            got: bytes.len(),
            need: 1 + len,
        });
    }
    let year = if len >= 2 {
        i64::from(u16::from_le_bytes([bytes[1], bytes[2]]))
    } else {
        0
    };
    let mut out = String::with_capacity(26);
    write_date(&mut out, year, field(2) as u32, field(3) as u32);
    if !date_only {
        let micros = if len >= 11 {
            u64::from(u32::from_le_bytes(take(bytes, 8)?))
        } else {
            0
        };
        out.push('T');
        write_clock(&mut out, field(4), field(5), field(6), micros);
    }
    Ok(out)
}

/// MySQL binary TIME: a length byte (0, 8 or 12), sign, days (u32), hours, minutes, seconds,
/// microseconds (u32). TIME is a signed duration up to 838:59:59, so hours may pass 24.
pub(super) fn mysql_time(bytes: &[u8]) -> Result<String, BadBytes> {
    let len = usize::from(*bytes.first().ok_or(BadBytes::Empty { what: "time" })?);
    if len == 0 {
        return Ok("00:00:00".into());
    }
    if len < 8 || bytes.len() < 1 + len {
        return Err(BadBytes::Time { got: bytes.len() });
    }
    let negative = bytes[1] == 1;
    let days = u64::from(u32::from_le_bytes(take(bytes, 2)?));
    let hours = days * 24 + u64::from(bytes[6]);
    let micros = if len >= 12 {
        u64::from(u32::from_le_bytes(take(bytes, 9)?))
    } else {
        0
    };
    let mut out = String::with_capacity(17);
    if negative {
        out.push('-');
    }
    write_clock(
        &mut out,
        hours,
        u64::from(bytes[7]),
        u64::from(bytes[8]),
        micros,
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric(ndigits: u16, weight: i16, sign: u16, scale: u16, digits: &[u16]) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [ndigits, weight as u16, sign, scale] {
            b.extend(v.to_be_bytes());
        }
        for d in digits {
            b.extend(d.to_be_bytes());
        }
        b
    }

    #[test]
    fn numerics_keep_every_digit() {
        assert_eq!(pg_numeric(&numeric(1, 1, 0, 0, &[1])), Ok("10000".into()));
        assert_eq!(
            pg_numeric(&numeric(2, 0, 0x4000, 2, &[12, 5000])),
            Ok("-12.50".into())
        );
        assert_eq!(
            pg_numeric(&numeric(1, -2, 0, 9, &[7])),
            Ok("0.000000070".into())
        );
        assert_eq!(pg_numeric(&numeric(0, 0, 0, 3, &[])), Ok("0.000".into()));
        assert_eq!(
            pg_numeric(&numeric(0, 0, 0xD000, 0, &[])),
            Ok("Infinity".into())
        );
        assert!(
            pg_numeric(&numeric(2, 0, 0, 0, &[1])).is_err(),
            "a digit short"
        );
    }

    #[test]
    fn dates_are_iso_8601() {
        assert_eq!(pg_date(&0i32.to_be_bytes()), Ok("2000-01-01".into()));
        assert_eq!(pg_date(&(-1i32).to_be_bytes()), Ok("1999-12-31".into()));
        assert_eq!(
            pg_date(&(-730_486i32).to_be_bytes()),
            Ok("-0001-12-31".into())
        );
        let leap = 24 * 3600 * 1_000_000 * 59i64 + 1;
        assert_eq!(
            pg_timestamp(&leap.to_be_bytes(), true),
            Ok("2000-02-29T00:00:00.000001Z".into())
        );
        assert_eq!(
            pg_timestamp(&i64::MAX.to_be_bytes(), false),
            Ok("infinity".into())
        );
        let mut timetz = 3_600_000_000i64.to_be_bytes().to_vec();
        timetz.extend((-19_800i32).to_be_bytes());
        assert_eq!(pg_time(&timetz, true), Ok("01:00:00+05:30".into()));
        assert_eq!(
            pg_time(&MICROS_PER_DAY.to_be_bytes(), false),
            Ok("24:00:00".into())
        );
    }

    #[test]
    fn intervals_are_durations() {
        let interval = |us: i64, days: i32, months: i32| {
            let mut b = us.to_be_bytes().to_vec();
            b.extend(days.to_be_bytes());
            b.extend(months.to_be_bytes());
            pg_interval(&b)
        };
        assert_eq!(interval(0, 0, 0), Ok("PT0S".into()));
        assert_eq!(interval(-90_000_000, 0, 14), Ok("P1Y2MT-1M-30S".into()));
        assert_eq!(interval(500_000, -3, 0), Ok("P-3DT0.5S".into()));
    }

    #[test]
    fn mysql_dates_and_times() {
        assert_eq!(mysql_datetime(&[0], true), Ok("0000-00-00".into()));
        let dt = [11, 0xE8, 0x07, 5, 1, 13, 45, 0, 0x90, 0xD0, 0x03, 0x00];
        assert_eq!(
            mysql_datetime(&dt, false),
            Ok("2024-05-01T13:45:00.25".into())
        );
        assert_eq!(
            mysql_datetime(&[4, 0xE8, 0x07, 5, 1], false),
            Ok("2024-05-01T00:00:00".into())
        );
        let time = [8, 1, 1, 0, 0, 0, 2, 3, 4];
        assert_eq!(mysql_time(&time), Ok("-26:03:04".into()));
        assert!(mysql_time(&[8, 0]).is_err());
    }
}
