//! Conditional GET (RFC 9110 §13.1): the `If-None-Match` and `If-Modified-Since` fields
//! an update job sends with its first request, and the IMF-fixdate they need
//! (RFC 9110 §5.6.7).

/// The precondition of a conditional GET: the server answers 304 Not Modified (RFC 9110
/// §15.4.5) instead of the representation when it still holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Condition {
    /// `If-None-Match: <entity-tag>` (RFC 9110 §13.1.2): 304 while the server's current
    /// ETag matches by the weak comparison. The tag as sent: quotes included, `W/` kept.
    IfNoneMatch(String),
    /// `If-Modified-Since: <HTTP-date>` (RFC 9110 §13.1.3), seconds since the Unix
    /// epoch (UTC): 304 while the representation has not been modified since.
    IfModifiedSince(u64),
}

/// Why a saved entity-tag cannot be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionError {
    /// Not `[W/]"opaque"` with etagc characters only (RFC 9110 §8.8.3).
    NotAnEntityTag,
}

impl std::fmt::Display for ConditionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ConditionError::NotAnEntityTag => "not an entity-tag ([W/]\"...\", RFC 9110 section 8.8.3)",
        })
    }
}

impl std::error::Error for ConditionError {}

impl Condition {
    /// `If-None-Match` with the entity-tag `tag` (leading and trailing whitespace
    /// trimmed), as an `--etag-save` file holds it.
    ///
    /// # Errors
    /// [`ConditionError::NotAnEntityTag`] when `tag` is not one entity-tag: then no field
    /// could carry it without being malformed (or injecting another field).
    pub fn if_none_match(tag: &str) -> Result<Condition, ConditionError> {
        let tag = tag.trim_matches([' ', '\t', '\r', '\n']);
        match crate::fields::parse_etag(tag.as_bytes()) {
            Some(_) => Ok(Condition::IfNoneMatch(tag.to_owned())),
            None => Err(ConditionError::NotAnEntityTag),
        }
    }

    /// The field to add to the request: its name and value.
    pub fn field(&self) -> (&'static str, String) {
        match self {
            Condition::IfNoneMatch(tag) => ("If-None-Match", tag.clone()),
            Condition::IfModifiedSince(secs) => ("If-Modified-Since", format_http_date(*secs)),
        }
    }
}

const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Formats seconds since the Unix epoch as an IMF-fixdate (RFC 9110 §5.6.7), the one form
/// a sender may generate: `Sun, 06 Nov 1994 08:49:37 GMT`. [`crate::parse_http_date`]
/// reads it back to the same second.
pub fn format_http_date(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{}, {d:02} {} {y:04} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(m - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// (year, month 1–12, day 1–31) of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, the inverse of the one in `date.rs`); proleptic Gregorian.
pub fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imf_fixdate_of_known_instants() {
        assert_eq!(format_http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(format_http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(format_http_date(1_835_481_599), "Tue, 29 Feb 2028 23:59:59 GMT");
        assert_eq!(format_http_date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
    }

    #[test]
    fn formatted_dates_parse_back_to_the_same_second() {
        let mut rng = crate::test_rng::Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..20_000 {
            // Up to the year 9999.
            let t = rng.next() % 253_402_300_800;
            assert_eq!(crate::parse_http_date(format_http_date(t).as_bytes()), Some(t), "{t}");
        }
    }

    #[test]
    fn if_none_match_takes_one_entity_tag_as_saved() {
        let c = Condition::if_none_match("\"5f3e-61a\"\n").unwrap();
        assert_eq!(c.field(), ("If-None-Match", "\"5f3e-61a\"".to_owned()));
        let weak = Condition::if_none_match("W/\"abc\"").unwrap();
        assert_eq!(weak.field().1, "W/\"abc\"");
        for bad in [
            "",
            "abc",
            "\"abc",
            "\"a\"b\"",
            "\"a\r\nX-Injected: 1\"",
            "\"a\" \"b\"",
            "w/\"a\"",
        ] {
            assert_eq!(
                Condition::if_none_match(bad),
                Err(ConditionError::NotAnEntityTag),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn if_modified_since_sends_an_imf_fixdate() {
        let c = Condition::IfModifiedSince(784_111_777);
        assert_eq!(
            c.field(),
            ("If-Modified-Since", "Sun, 06 Nov 1994 08:49:37 GMT".to_owned())
        );
        // The field passes the request writer's checks.
        let (n, v) = c.field();
        assert_eq!(crate::check_field(n, &v), Ok(()));
    }
}
