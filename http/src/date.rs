//! HTTP-date (RFC 9110 §5.6.7): IMF-fixdate, and the obsolete RFC 850 and asctime forms
//! that recipients must also accept.

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// Parses an HTTP-date into seconds since the Unix epoch (UTC).
///
/// Accepts `Sun, 06 Nov 1994 08:49:37 GMT`, `Sunday, 06-Nov-94 08:49:37 GMT` (two-digit
/// years: 70–99 → 19xx, else 20xx) and `Sun Nov  6 08:49:37 1994`. The weekday name is not
/// checked. `None` for anything else, for dates before 1970, and for out-of-range fields.
pub fn parse_http_date(value: &[u8]) -> Option<u64> {
    let v = trim(value);
    let s = std::str::from_utf8(v).ok()?;
    let parts: Vec<&str> = s.split_ascii_whitespace().collect();
    let (day, mon, year, time) = match parts.as_slice() {
        // IMF-fixdate: "Sun," "06" "Nov" "1994" "08:49:37" "GMT"
        [wd, d, m, y, t, "GMT"] if wd.ends_with(',') && y.len() == 4 => (num(d)?, month(m)?, num(y)?, *t),
        // RFC 850: "Sunday," "06-Nov-94" "08:49:37" "GMT"
        [wd, dmy, t, "GMT"] if wd.ends_with(',') => {
            let mut it = dmy.split('-');
            let (d, m, y) = (it.next()?, it.next()?, it.next()?);
            if it.next().is_some() || y.len() != 2 {
                return None;
            }
            let y = num(y)?;
            (num(d)?, month(m)?, if y >= 70 { 1900 + y } else { 2000 + y }, *t)
        }
        // asctime: "Sun" "Nov" "6" "08:49:37" "1994"
        [_, m, d, t, y] if y.len() == 4 => (num(d)?, month(m)?, num(y)?, *t),
        _ => return None,
    };
    let mut hms = time.split(':');
    let (h, mi, se) = (num(hms.next()?)?, num(hms.next()?)?, num(hms.next()?)?);
    if hms.next().is_some() || !(1..=31).contains(&day) || h > 23 || mi > 59 || se > 60 || year < 1970 {
        return None;
    }
    let days = days_from_civil(year, mon, day);
    Some(days * 86_400 + h * 3600 + mi * 60 + se)
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &v[start..end]
}

fn num(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 4 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn month(s: &str) -> Option<u64> {
    MONTHS
        .iter()
        .position(|m| m.as_slice() == s.as_bytes())
        .map(|i| i as u64 + 1)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: u64, m: u64, d: u64) -> u64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_of_rfc_9110() {
        let t = 784_111_777; // 1994-11-06 08:49:37 UTC
        assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"), Some(t));
        assert_eq!(parse_http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"), Some(t));
        assert_eq!(parse_http_date(b"Sun Nov  6 08:49:37 1994"), Some(t));
        assert_eq!(parse_http_date(b" Thu, 01 Jan 1970 00:00:00 GMT "), Some(0));
        assert_eq!(parse_http_date(b"Tue, 29 Feb 2028 23:59:59 GMT"), Some(1_835_481_599));
    }

    #[test]
    fn garbage_is_none() {
        for bad in [
            &b""[..],
            b"120",
            b"Sun, 06 Nov 1994 08:49:37 UTC",
            b"Sun, 06 Foo 1994 08:49:37 GMT",
            b"Sun, 32 Nov 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 24:00:00 GMT",
            b"Sun, 06 Nov 1969 08:49:37 GMT",
            b"Sun, 06 Nov 1994 08:49 GMT",
            b"Sunday, 06-Nov-1994 08:49:37 GMT",
            b"Sun, 06 Nov 99999 08:49:37 GMT",
        ] {
            assert_eq!(parse_http_date(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    /// Each form only with its own shape (mutation testing found the guards untested).
    #[test]
    fn each_form_needs_its_shape() {
        for bad in [
            // IMF-fixdate without the comma, or with a two-digit year.
            &b"Sun 06 Nov 1994 08:49:37 GMT"[..],
            b"Sun, 06 Nov 94 08:49:37 GMT",
            // RFC 850 without the comma.
            b"Sunday 06-Nov-94 08:49:37 GMT",
            // asctime with a two-digit year.
            b"Sun Nov  6 08:49:37 94",
            // A day of more than 4 digits, a sign.
            b"Sun, 00006 Nov 1994 08:49:37 GMT",
            b"Sun, +6 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(parse_http_date(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn rfc_850_two_digit_years_below_70_are_20xx() {
        // 2030-01-01 00:00:00 UTC.
        assert_eq!(parse_http_date(b"Tuesday, 01-Jan-30 00:00:00 GMT"), Some(1_893_456_000));
        assert_eq!(parse_http_date(b"Thursday, 01-Jan-70 00:00:00 GMT"), Some(0));
    }

    #[test]
    fn time_fields_at_and_past_their_bounds() {
        let base = 784_080_000; // 1994-11-06 00:00:00 UTC
        assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 23:59:60 GMT"), Some(base + 86_400));
        for bad in [
            &b"Sun, 06 Nov 1994 08:60:00 GMT"[..],
            b"Sun, 06 Nov 1994 08:49:61 GMT",
            b"Sun, 00 Nov 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 08:49:37:00 GMT",
        ] {
            assert_eq!(parse_http_date(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
