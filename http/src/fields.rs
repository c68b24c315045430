//! Field values the downloader acts on: `Content-Length`, `Transfer-Encoding`,
//! `Content-Range`, `ETag` / `Last-Modified`, `Retry-After` (RFC 9110, RFC 9112 §6).
//!
//! Everything here works on a borrowed, OWS-trimmed field value and allocates
//! nothing.

use core::fmt;

/// Why a field value could not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FieldError {
    /// `Content-Length` empty, or not all digits (RFC 9110 §8.6).
    ContentLengthInvalid,
    /// `Content-Length` over 20 digits or over `u64::MAX`.
    ContentLengthOverflow,
    /// Several `Content-Length` values that differ (RFC 9110 §8.6).
    ContentLengthConflict,
    /// `Content-Length` together with `Transfer-Encoding` (RFC 9112 §6.3 item 3):
    /// a request smuggling or response splitting sign.
    ContentLengthWithChunked,
    /// A transfer coding other than `chunked` (gzip, deflate, identity...), which
    /// this client does not decode.
    TransferEncodingUnsupported,
    /// `Transfer-Encoding` present with no coding in it.
    TransferEncodingEmpty,
    /// `chunked` not the last (or not the only) transfer coding (RFC 9112 §6.1).
    ChunkedNotLast,
    /// `Transfer-Encoding` in an HTTP/1.0 response: framing is faulty (RFC 9112 §6.1).
    TransferEncodingInHttp10,
    /// `Content-Range` not `bytes first-last/complete` nor `bytes */complete`
    /// (RFC 9110 §14.4).
    ContentRangeInvalid,
    /// A `Content-Range` position over 20 digits or over `u64::MAX`.
    ContentRangeOverflow,
    /// A `Content-Range` unit other than `bytes`.
    ContentRangeUnit,
    /// A `Content-Range` with first > last, or last ≥ complete length.
    ContentRangeOrder,
    /// Several `Content-Range` fields that differ.
    ContentRangeConflict,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FieldError::ContentLengthInvalid => "invalid content-length",
            FieldError::ContentLengthOverflow => "content-length too large",
            FieldError::ContentLengthConflict => "conflicting content-length values",
            FieldError::ContentLengthWithChunked => "both content-length and transfer-encoding present",
            FieldError::TransferEncodingUnsupported => "unsupported transfer-encoding",
            FieldError::TransferEncodingEmpty => "empty transfer-encoding",
            FieldError::ChunkedNotLast => "chunked is not the final transfer-encoding",
            FieldError::TransferEncodingInHttp10 => "transfer-encoding in an http/1.0 response",
            FieldError::ContentRangeInvalid => "invalid content-range",
            FieldError::ContentRangeOverflow => "content-range position too large",
            FieldError::ContentRangeUnit => "content-range unit is not bytes",
            FieldError::ContentRangeOrder => "content-range positions out of order",
            FieldError::ContentRangeConflict => "conflicting content-range values",
        })
    }
}

impl std::error::Error for FieldError {}

/// How the response body is delimited (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Framing {
    /// No body: a response to HEAD, or status 1xx, 204 or 304.
    NoBody,
    /// Exactly this many bytes follow the head.
    Length(u64),
    /// `Transfer-Encoding: chunked`; decode with [`crate::ChunkedDecoder`].
    Chunked,
    /// The body ends when the server closes the connection.
    Close,
}

/// A parsed `Content-Range` field value (RFC 9110 §14.4), positions in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ContentRange {
    /// `bytes first-last/complete` (206): offsets `first..=last`; `complete` is the
    /// representation's length, `None` for `/*` (unknown).
    ///
    /// INVARIANT: `first <= last`, and `last < complete` when known.
    Bytes {
        /// First byte offset, inclusive.
        first: u64,
        /// Last byte offset, inclusive.
        last: u64,
        /// Complete length in bytes, `None` when the server sent `*`.
        complete: Option<u64>,
    },
    /// `bytes */complete` (416): no range satisfiable; the complete length.
    Unsatisfied {
        /// Complete length in bytes.
        complete: u64,
    },
}

impl ContentRange {
    /// The complete length, when the server stated it.
    pub fn complete_length(&self) -> Option<u64> {
        match *self {
            ContentRange::Bytes { complete, .. } => complete,
            ContentRange::Unsatisfied { complete } => Some(complete),
        }
    }
}

/// Parses a `Content-Range` value: `bytes first-last/complete`, `bytes first-last/*`
/// or `bytes */complete` (RFC 9110 §14.4). The unit is case-insensitive; positions
/// are decimal, at most 20 digits, checked against `u64` overflow.
///
/// # Errors
///
/// [`FieldError::ContentRangeUnit`] for another unit, [`FieldError::ContentRangeOverflow`]
/// for a position past `u64::MAX`, [`FieldError::ContentRangeOrder`] when first > last or
/// last ≥ complete, [`FieldError::ContentRangeInvalid`] for any other syntax error.
pub fn parse_content_range(value: &[u8]) -> Result<ContentRange, FieldError> {
    let value = trim_ows(value);
    let sp = value
        .iter()
        .position(|&b| b == b' ')
        .ok_or(FieldError::ContentRangeInvalid)?;
    let (unit, rest) = (&value[..sp], &value[sp + 1..]);
    if !unit.eq_ignore_ascii_case(b"bytes") {
        return Err(if unit.is_empty() {
            FieldError::ContentRangeInvalid
        } else {
            FieldError::ContentRangeUnit
        });
    }
    let number = |digits: &[u8]| {
        parse_decimal(digits).map_err(|e| match e {
            NumberError::Invalid => FieldError::ContentRangeInvalid,
            NumberError::Overflow => FieldError::ContentRangeOverflow,
        })
    };
    if let Some(complete) = rest.strip_prefix(b"*/") {
        return Ok(ContentRange::Unsatisfied {
            complete: number(complete)?,
        });
    }
    let slash = rest
        .iter()
        .position(|&b| b == b'/')
        .ok_or(FieldError::ContentRangeInvalid)?;
    let (range, complete) = (&rest[..slash], &rest[slash + 1..]);
    let dash = range
        .iter()
        .position(|&b| b == b'-')
        .ok_or(FieldError::ContentRangeInvalid)?;
    let first = number(&range[..dash])?;
    let last = number(&range[dash + 1..])?;
    let complete = match complete {
        b"*" => None,
        digits => Some(number(digits)?),
    };
    if first > last || complete.is_some_and(|c| last >= c) {
        return Err(FieldError::ContentRangeOrder);
    }
    Ok(ContentRange::Bytes { first, last, complete })
}

/// A validator for resuming with `If-Range` (RFC 9110 §8.8, §13.1.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Validator<'a> {
    /// `ETag`: the opaque-tag including its double quotes (`"abc"`), without `W/`.
    ETag {
        /// The opaque-tag, quotes included.
        value: &'a [u8],
        /// Whether the server sent `W/`: a weak tag cannot be used in `If-Range`.
        weak: bool,
    },
    /// `Last-Modified`: the HTTP-date, as sent.
    LastModified(&'a [u8]),
}

impl<'a> Validator<'a> {
    /// The value to send in `If-Range`: a strong ETag's opaque-tag or the
    /// Last-Modified date; `None` for a weak ETag (RFC 9110 §13.1.5).
    pub fn if_range_value(&self) -> Option<&'a [u8]> {
        match *self {
            Validator::ETag { value, weak: false } => Some(value),
            Validator::ETag { weak: true, .. } => None,
            Validator::LastModified(date) => Some(date),
        }
    }
}

/// Parses `entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE` (RFC 9110 §8.8.3); returns
/// the opaque-tag (quotes included) and whether it is weak.
pub(crate) fn parse_etag(value: &[u8]) -> Option<(&[u8], bool)> {
    let (tag, weak) = match value.strip_prefix(b"W/") {
        Some(tag) => (tag, true),
        None => (value, false),
    };
    let inner = tag.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    inner
        .iter()
        .all(|&b| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80)
        .then_some((tag, weak))
}

/// A `Retry-After` value (RFC 9110 §10.2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RetryAfter<'a> {
    /// `delay-seconds`: wait this many seconds.
    Seconds(u64),
    /// An HTTP-date, as sent (not parsed here).
    Date(&'a [u8]),
}

/// Parses a `Retry-After` value; `None` when empty or an out-of-range number.
pub(crate) fn parse_retry_after(value: &[u8]) -> Option<RetryAfter<'_>> {
    let value = trim_ows(value);
    if value.is_empty() {
        return None;
    }
    if value.iter().all(u8::is_ascii_digit) {
        return parse_decimal(value).ok().map(RetryAfter::Seconds);
    }
    Some(RetryAfter::Date(value))
}

/// Most decimal digits accepted for a `u64` field: `u64::MAX` has 20.
pub const MAX_DECIMAL_DIGITS: usize = 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NumberError {
    Invalid,
    Overflow,
}

/// `1*DIGIT` as a `u64`: at most [`MAX_DECIMAL_DIGITS`] digits, overflow checked.
pub(crate) fn parse_decimal(digits: &[u8]) -> Result<u64, NumberError> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(NumberError::Invalid);
    }
    if digits.len() > MAX_DECIMAL_DIGITS {
        return Err(NumberError::Overflow);
    }
    digits.iter().try_fold(0u64, |acc, &b| {
        acc.checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or(NumberError::Overflow)
    })
}

/// Parses one `Content-Length` field value, list form included (`5, 5`), into
/// `found`, rejecting a value that differs from one seen before.
pub(crate) fn merge_content_length(value: &[u8], found: &mut Option<u64>) -> Result<(), FieldError> {
    for element in value.split(|&b| b == b',') {
        let n = parse_decimal(trim_ows(element)).map_err(|e| match e {
            NumberError::Invalid => FieldError::ContentLengthInvalid,
            NumberError::Overflow => FieldError::ContentLengthOverflow,
        })?;
        match *found {
            Some(seen) if seen != n => return Err(FieldError::ContentLengthConflict),
            _ => *found = Some(n),
        }
    }
    Ok(())
}

/// Folds one `Transfer-Encoding` field value into `chunked_last`: whether the
/// codings so far end in `chunked`. Empty list elements are skipped (RFC 9110
/// §5.6.1); returns how many codings were seen.
pub(crate) fn merge_transfer_encoding(value: &[u8], chunked_last: &mut bool) -> Result<usize, FieldError> {
    let mut codings = 0;
    for element in value.split(|&b| b == b',') {
        let coding = trim_ows(element);
        if coding.is_empty() {
            continue;
        }
        if *chunked_last {
            return Err(FieldError::ChunkedNotLast);
        }
        if !coding.eq_ignore_ascii_case(b"chunked") {
            return Err(FieldError::TransferEncodingUnsupported);
        }
        *chunked_last = true;
        codings += 1;
    }
    Ok(codings)
}

/// Trims optional whitespace (SP / HTAB, RFC 9110 §5.6.3) from both ends.
pub(crate) fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_limits() {
        assert_eq!(parse_decimal(b"0"), Ok(0));
        assert_eq!(parse_decimal(b"18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_decimal(b"18446744073709551616"), Err(NumberError::Overflow));
        assert_eq!(parse_decimal(b"99999999999999999999"), Err(NumberError::Overflow));
        assert_eq!(parse_decimal(b"000000000000000000001"), Err(NumberError::Overflow));
        assert_eq!(parse_decimal(b"00000000000000000001"), Ok(1));
        assert_eq!(parse_decimal(b""), Err(NumberError::Invalid));
        assert_eq!(parse_decimal(b"+1"), Err(NumberError::Invalid));
        assert_eq!(parse_decimal(b"1 "), Err(NumberError::Invalid));
        assert_eq!(parse_decimal(b"0x10"), Err(NumberError::Invalid));
    }

    #[test]
    fn content_range_forms() {
        assert_eq!(
            parse_content_range(b"bytes 0-499/1234"),
            Ok(ContentRange::Bytes {
                first: 0,
                last: 499,
                complete: Some(1234)
            })
        );
        assert_eq!(
            parse_content_range(b"BYTES 5-5/*"),
            Ok(ContentRange::Bytes {
                first: 5,
                last: 5,
                complete: None
            })
        );
        assert_eq!(
            parse_content_range(b" bytes */47022 "),
            Ok(ContentRange::Unsatisfied { complete: 47022 })
        );
        assert_eq!(
            parse_content_range(b"bytes */0"),
            Ok(ContentRange::Unsatisfied { complete: 0 })
        );
        // Files over 4 GiB.
        assert_eq!(
            parse_content_range(b"bytes 4294967296-8589934591/8589934592"),
            Ok(ContentRange::Bytes {
                first: 1 << 32,
                last: (1 << 33) - 1,
                complete: Some(1 << 33)
            })
        );
        assert_eq!(
            parse_content_range(b"bytes 0-18446744073709551614/18446744073709551615"),
            Ok(ContentRange::Bytes {
                first: 0,
                last: u64::MAX - 1,
                complete: Some(u64::MAX)
            })
        );
        assert_eq!(
            parse_content_range(b"bytes 0-18446744073709551615/*"),
            Ok(ContentRange::Bytes {
                first: 0,
                last: u64::MAX,
                complete: None
            })
        );
        assert_eq!(
            ContentRange::Bytes {
                first: 0,
                last: 1,
                complete: None
            }
            .complete_length(),
            None
        );
        assert_eq!(ContentRange::Unsatisfied { complete: 9 }.complete_length(), Some(9));
    }

    #[test]
    fn content_range_errors() {
        use FieldError::*;
        let cases: &[(&[u8], FieldError)] = &[
            (b"", ContentRangeInvalid),
            (b"bytes", ContentRangeInvalid),
            (b" 0-1/2", ContentRangeInvalid),
            (b"bytes 0-1", ContentRangeInvalid),
            (b"bytes 01/2", ContentRangeInvalid),
            (b"bytes -1/2", ContentRangeInvalid),
            (b"bytes 0-/2", ContentRangeInvalid),
            (b"bytes 0-1/", ContentRangeInvalid),
            (b"bytes 0-1/x", ContentRangeInvalid),
            (b"bytes */*", ContentRangeInvalid),
            (b"bytes */", ContentRangeInvalid),
            (b"bytes  0-1/2", ContentRangeInvalid),
            (b"bytes 0 -1/2", ContentRangeInvalid),
            (b"bytes 0-1 /2", ContentRangeInvalid),
            (b"bytes 0-1/2, 3-4/5", ContentRangeInvalid),
            (b"bytes 0-1-2/3", ContentRangeInvalid),
            (b"items 0-1/2", ContentRangeUnit),
            (b"bytes=0-1/2", ContentRangeInvalid),
            (b"bytes 18446744073709551616-1/2", ContentRangeOverflow),
            (b"bytes 0-18446744073709551616/*", ContentRangeOverflow),
            (b"bytes 0-1/18446744073709551616", ContentRangeOverflow),
            (b"bytes */18446744073709551616", ContentRangeOverflow),
            (b"bytes 2-1/5", ContentRangeOrder),
            (b"bytes 0-5/5", ContentRangeOrder),
            (b"bytes 0-0/0", ContentRangeOrder),
        ];
        for (value, want) in cases {
            assert_eq!(
                parse_content_range(value),
                Err(*want),
                "{}",
                String::from_utf8_lossy(value)
            );
        }
    }

    #[test]
    fn etags() {
        assert_eq!(parse_etag(b"\"abc\""), Some((&b"\"abc\""[..], false)));
        assert_eq!(parse_etag(b"W/\"abc\""), Some((&b"\"abc\""[..], true)));
        assert_eq!(parse_etag(b"\"\""), Some((&b"\"\""[..], false)));
        assert_eq!(parse_etag(b"abc"), None);
        assert_eq!(parse_etag(b"\"a\"b\""), None);
        assert_eq!(parse_etag(b"\"a b\""), None);
        assert_eq!(parse_etag(b"w/\"a\""), None);
        assert_eq!(parse_etag(b"\""), None);
        assert_eq!(parse_etag(b"\"\xe9\""), Some((&b"\"\xe9\""[..], false)));
    }

    #[test]
    fn validator_if_range_value() {
        assert_eq!(
            Validator::ETag {
                value: b"\"a\"",
                weak: false
            }
            .if_range_value(),
            Some(&b"\"a\""[..])
        );
        assert_eq!(
            Validator::ETag {
                value: b"\"a\"",
                weak: true
            }
            .if_range_value(),
            None
        );
        assert_eq!(Validator::LastModified(b"d").if_range_value(), Some(&b"d"[..]));
    }

    #[test]
    fn retry_after_forms() {
        assert_eq!(parse_retry_after(b"120"), Some(RetryAfter::Seconds(120)));
        assert_eq!(parse_retry_after(b" 0 "), Some(RetryAfter::Seconds(0)));
        assert_eq!(parse_retry_after(b"99999999999999999999999"), None);
        assert_eq!(parse_retry_after(b""), None);
        assert_eq!(
            parse_retry_after(b"Fri, 31 Dec 1999 23:59:59 GMT"),
            Some(RetryAfter::Date(b"Fri, 31 Dec 1999 23:59:59 GMT"))
        );
    }

    #[test]
    fn trims_ows() {
        assert_eq!(trim_ows(b" \t a b \t"), b"a b");
        assert_eq!(trim_ows(b"   "), b"");
        assert_eq!(trim_ows(b""), b"");
    }

    #[test]
    fn messages_lowercase() {
        use FieldError::*;
        for e in [
            ContentLengthInvalid,
            ContentLengthOverflow,
            ContentLengthConflict,
            ContentLengthWithChunked,
            TransferEncodingUnsupported,
            TransferEncodingEmpty,
            ChunkedNotLast,
            TransferEncodingInHttp10,
            ContentRangeInvalid,
            ContentRangeOverflow,
            ContentRangeUnit,
            ContentRangeOrder,
            ContentRangeConflict,
        ] {
            let m = e.to_string();
            assert!(m.starts_with(|c: char| c.is_ascii_lowercase()), "{m}");
        }
    }
}
