//! The response head: status line (RFC 9112 §4) and field lines (RFC 9112 §5).

use core::fmt;

use crate::fields::{
    self, ContentRange, FieldError, Framing, RetryAfter, Validator, merge_content_length, merge_transfer_encoding,
    parse_content_range,
};

/// Largest response head accepted, in bytes, final empty line included.
pub const MAX_HEAD: usize = 64 * 1024;

/// Most field lines accepted in one head.
pub const MAX_FIELDS: usize = 100;

/// One field line (RFC 9112 §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header<'b> {
    /// The field name as sent (a token, RFC 9110 §5.1); compare case-insensitively.
    pub name: &'b str,
    /// The field value, leading and trailing SP / HTAB removed (RFC 9112 §5.1).
    pub value: &'b [u8],
}

impl<'b> Header<'b> {
    /// An empty header, to fill storage: `[Header::EMPTY; MAX_FIELDS]`.
    pub const EMPTY: Header<'b> = Header { name: "", value: b"" };
}

impl Default for Header<'_> {
    fn default() -> Self {
        Header::EMPTY
    }
}

/// The result of parsing input that may be incomplete.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status<T> {
    /// The element is complete.
    Complete(T),
    /// More input is needed; nothing invalid was seen so far.
    Partial,
}

impl<T> Status<T> {
    /// Whether this is [`Status::Complete`].
    pub fn is_complete(&self) -> bool {
        matches!(self, Status::Complete(_))
    }

    /// Whether this is [`Status::Partial`].
    pub fn is_partial(&self) -> bool {
        matches!(self, Status::Partial)
    }
}

/// Why a response head was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeadError {
    /// No end of head within [`MAX_HEAD`] bytes.
    TooLarge,
    /// More than [`MAX_FIELDS`] field lines, or more than the storage given.
    TooManyFields,
    /// The HTTP-version is not `HTTP/1.0` or `HTTP/1.1` (RFC 9112 §2.3), or the
    /// input does not start like one.
    Version,
    /// The status-code is not three digits in 100..=599 followed by SP or the line
    /// end (RFC 9112 §4).
    StatusCode,
    /// A control character other than HTAB in the reason-phrase.
    ReasonPhrase,
    /// A CR not followed by LF (RFC 9112 §2.2).
    BareCr,
    /// A field line starting with SP or HTAB: obsolete line folding (RFC 9112 §5.2).
    ObsFold,
    /// A field line without a colon.
    MissingColon,
    /// A field name that is empty or not a token (RFC 9110 §5.1).
    FieldName,
    /// Whitespace between the field name and the colon (RFC 9112 §5.1).
    WhitespaceBeforeColon,
    /// A NUL byte in a field value (RFC 9110 §5.5).
    NulInValue,
}

impl fmt::Display for HeadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HeadError::TooLarge => "response head too large",
            HeadError::TooManyFields => "too many header fields",
            HeadError::Version => "invalid http version",
            HeadError::StatusCode => "invalid status code",
            HeadError::ReasonPhrase => "invalid reason phrase",
            HeadError::BareCr => "bare cr in response head",
            HeadError::ObsFold => "obsolete line folding in header field",
            HeadError::MissingColon => "header line without colon",
            HeadError::FieldName => "invalid header field name",
            HeadError::WhitespaceBeforeColon => "whitespace before colon in header field",
            HeadError::NulInValue => "nul in header field value",
        })
    }
}

impl std::error::Error for HeadError {}

/// A parsed response head, borrowing the input (`'b`) and the field storage (`'h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response<'b, 'h> {
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version: u8,
    /// Status code, 100..=599 (RFC 9110 §15).
    pub code: u16,
    /// Reason phrase, possibly empty; informational only.
    pub reason: &'b [u8],
    /// Field lines in the order received.
    pub headers: &'h [Header<'b>],
}

/// Parses a response head from the start of `buf` (RFC 9112 §4, §5), writing fields
/// into `headers`.
///
/// Returns the head length in bytes (final empty line included; the body starts
/// there) and the response, or [`Status::Partial`] when `buf` ends before the head
/// does: read more and call again with the longer buffer.
///
/// Borrows the input and writes field references into storage the caller provides;
/// allocates nothing. Line endings may be CRLF or a bare LF (RFC 9112 §2.2 allows a
/// recipient to accept LF alone); a CR anywhere else is an error. Empty lines before
/// the status line are skipped (RFC 9112 §2.2 robustness). Field values keep
/// control characters other than NUL, and obs-text, as RFC 9110 §5.5 allows.
///
/// # Errors
///
/// A [`HeadError`] naming the malformed element, as soon as it is seen.
/// [`HeadError::TooLarge`] once `buf` holds more than [`MAX_HEAD`] bytes with no end
/// of head among them.
pub fn parse_head<'b, 'h>(
    buf: &'b [u8],
    headers: &'h mut [Header<'b>],
) -> Result<Status<(usize, Response<'b, 'h>)>, HeadError> {
    let limited = &buf[..buf.len().min(MAX_HEAD)];
    match parse_limited(limited, headers)? {
        Status::Partial if buf.len() > MAX_HEAD => Err(HeadError::TooLarge),
        status => Ok(status),
    }
}

fn parse_limited<'b, 'h>(
    buf: &'b [u8],
    headers: &'h mut [Header<'b>],
) -> Result<Status<(usize, Response<'b, 'h>)>, HeadError> {
    let mut pos = 0;
    let status_line = loop {
        match next_line(buf, pos)? {
            None => {
                // Fail fast on input that cannot become "HTTP/1.x" (HTTP/0.9, TLS).
                let rest = &buf[pos..];
                let rest = rest.strip_suffix(b"\r").unwrap_or(rest);
                let n = rest.len().min(7);
                if rest[..n] != b"HTTP/1."[..n] {
                    return Err(HeadError::Version);
                }
                return Ok(Status::Partial);
            }
            Some((line, next)) => {
                pos = next;
                if !line.is_empty() {
                    break line;
                }
            }
        }
    };
    let (version, code, reason) = parse_status_line(status_line)?;
    let limit = headers.len().min(MAX_FIELDS);
    let mut count = 0;
    loop {
        let Some((line, next)) = next_line(buf, pos)? else {
            return Ok(Status::Partial);
        };
        pos = next;
        if line.is_empty() {
            break;
        }
        if count == limit {
            return Err(HeadError::TooManyFields);
        }
        headers[count] = parse_field_line(line)?;
        count += 1;
    }
    let headers: &'h [Header<'b>] = headers;
    Ok(Status::Complete((
        pos,
        Response {
            version,
            code,
            reason,
            headers: &headers[..count],
        },
    )))
}

/// The line starting at `pos` without its CRLF or LF, and where the next starts;
/// `None` when no LF follows yet.
pub(crate) fn next_line(buf: &[u8], pos: usize) -> Result<Option<(&[u8], usize)>, HeadError> {
    let rest = &buf[pos..];
    let Some(lf) = rest.iter().position(|&b| b == b'\n') else {
        // A CR with something after it that is not LF can never become valid.
        return match rest.iter().position(|&b| b == b'\r') {
            Some(cr) if cr + 1 < rest.len() => Err(HeadError::BareCr),
            _ => Ok(None),
        };
    };
    let line = &rest[..lf];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.contains(&b'\r') {
        return Err(HeadError::BareCr);
    }
    Ok(Some((line, pos + lf + 1)))
}

/// `status-line = HTTP-version SP status-code SP [ reason-phrase ]` (RFC 9112 §4).
/// A missing SP after the code (no reason at all) is accepted.
fn parse_status_line(line: &[u8]) -> Result<(u8, u16, &[u8]), HeadError> {
    let version = match line.get(..8) {
        Some(b"HTTP/1.1") => 1,
        Some(b"HTTP/1.0") => 0,
        _ => return Err(HeadError::Version),
    };
    let rest = line[8..].strip_prefix(b" ").ok_or(HeadError::Version)?;
    let code = match rest.get(..3) {
        Some(&[a, b, c]) if [a, b, c].iter().all(u8::is_ascii_digit) => {
            u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0')
        }
        _ => return Err(HeadError::StatusCode),
    };
    if !(100..=599).contains(&code) {
        return Err(HeadError::StatusCode);
    }
    let reason = match &rest[3..] {
        [] => &[][..],
        [b' ', reason @ ..] => reason,
        _ => return Err(HeadError::StatusCode),
    };
    if reason.iter().any(|&b| (b < b' ' && b != b'\t') || b == 0x7f) {
        return Err(HeadError::ReasonPhrase);
    }
    Ok((version, code, reason))
}

/// `field-line = field-name ":" OWS field-value OWS` (RFC 9112 §5).
pub(crate) fn parse_field_line(line: &[u8]) -> Result<Header<'_>, HeadError> {
    if matches!(line.first(), Some(b' ' | b'\t')) {
        return Err(HeadError::ObsFold);
    }
    let colon = line.iter().position(|&b| b == b':').ok_or(HeadError::MissingColon)?;
    let name = &line[..colon];
    if matches!(name.last(), Some(b' ' | b'\t')) {
        return Err(HeadError::WhitespaceBeforeColon);
    }
    if name.is_empty() || !name.iter().copied().all(is_tchar) {
        return Err(HeadError::FieldName);
    }
    let name = core::str::from_utf8(name).map_err(|_| HeadError::FieldName)?;
    let value = fields::trim_ows(&line[colon + 1..]);
    if value.contains(&0) {
        return Err(HeadError::NulInValue);
    }
    Ok(Header { name, value })
}

/// RFC 9110 §5.6.2 `tchar`.
pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~'
        )
}

impl<'b> Response<'b, '_> {
    /// The value of the first field named `name` (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&'b [u8]> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }

    /// The values of every field named `name`, in order.
    pub fn header_values<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'b [u8]> + 's {
        self.headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }

    /// Whether the status is a redirection that carries `Location`: 301, 302, 303,
    /// 307 or 308 (RFC 9110 §15.4).
    pub fn is_redirect(&self) -> bool {
        matches!(self.code, 301 | 302 | 303 | 307 | 308)
    }

    /// The `Location` value (RFC 9110 §10.2.2); resolve it with [`crate::Url::join`].
    pub fn location(&self) -> Option<&'b [u8]> {
        self.header("location")
    }

    /// `Content-Length` in bytes (RFC 9110 §8.6), `None` when absent. Repeated
    /// fields or list forms (`5, 5`) are accepted when every value is the same.
    ///
    /// # Errors
    ///
    /// [`FieldError::ContentLengthInvalid`] (empty, not digits),
    /// [`FieldError::ContentLengthOverflow`], [`FieldError::ContentLengthConflict`].
    pub fn content_length(&self) -> Result<Option<u64>, FieldError> {
        let mut found = None;
        for value in self.header_values("content-length") {
            merge_content_length(value, &mut found)?;
        }
        Ok(found)
    }

    /// `Content-Range` (RFC 9110 §14.4), `None` when absent. Repeated fields must be
    /// identical.
    ///
    /// # Errors
    ///
    /// As [`parse_content_range`], and [`FieldError::ContentRangeConflict`].
    pub fn content_range(&self) -> Result<Option<ContentRange>, FieldError> {
        let mut values = self.header_values("content-range");
        let Some(first) = values.next() else {
            return Ok(None);
        };
        if values.any(|v| v != first) {
            return Err(FieldError::ContentRangeConflict);
        }
        parse_content_range(first).map(Some)
    }

    /// Whether `Transfer-Encoding` ends in `chunked` (RFC 9112 §6.1); `false` when
    /// the field is absent.
    ///
    /// # Errors
    ///
    /// [`FieldError::TransferEncodingUnsupported`] for any other coding (this client
    /// decodes none), [`FieldError::ChunkedNotLast`], [`FieldError::TransferEncodingEmpty`].
    pub fn is_chunked(&self) -> Result<bool, FieldError> {
        let mut present = false;
        let mut codings = 0;
        let mut chunked = false;
        for value in self.header_values("transfer-encoding") {
            present = true;
            codings += merge_transfer_encoding(value, &mut chunked)?;
        }
        if present && codings == 0 {
            return Err(FieldError::TransferEncodingEmpty);
        }
        Ok(chunked)
    }

    /// The validator to resume with: a strong `ETag`, else `Last-Modified`, else a
    /// weak `ETag` (flagged; unusable in `If-Range`, RFC 9110 §13.1.5). A malformed
    /// ETag (unquoted) is ignored.
    pub fn validator(&self) -> Option<Validator<'b>> {
        let etag = self.header("etag").and_then(fields::parse_etag);
        if let Some((value, false)) = etag {
            return Some(Validator::ETag { value, weak: false });
        }
        if let Some(date) = self.header("last-modified").filter(|v| !v.is_empty()) {
            return Some(Validator::LastModified(date));
        }
        etag.map(|(value, weak)| Validator::ETag { value, weak })
    }

    /// `Retry-After` (RFC 9110 §10.2.3), for 429 and 503; `None` when absent or
    /// unusable.
    pub fn retry_after(&self) -> Option<RetryAfter<'b>> {
        self.header("retry-after").and_then(fields::parse_retry_after)
    }

    /// How the body is delimited (RFC 9112 §6.3): no body for a HEAD request or a
    /// 1xx, 204 or 304 status; else chunked; else `Content-Length`; else until the
    /// connection closes.
    ///
    /// # Errors
    ///
    /// [`FieldError::ContentLengthWithChunked`] when both are present,
    /// [`FieldError::TransferEncodingInHttp10`], and the errors of
    /// [`Response::is_chunked`] and [`Response::content_length`].
    pub fn body_framing(&self, request_was_head: bool) -> Result<Framing, FieldError> {
        if request_was_head || (100..200).contains(&self.code) || matches!(self.code, 204 | 304) {
            return Ok(Framing::NoBody);
        }
        if self.header("transfer-encoding").is_some() {
            if self.version == 0 {
                return Err(FieldError::TransferEncodingInHttp10);
            }
            // `is_chunked` fails unless the codings end in chunked.
            if self.is_chunked()? {
                if self.header("content-length").is_some() {
                    return Err(FieldError::ContentLengthWithChunked);
                }
                return Ok(Framing::Chunked);
            }
        }
        Ok(match self.content_length()? {
            Some(n) => Framing::Length(n),
            None => Framing::Close,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(buf: &[u8]) -> Result<Status<usize>, HeadError> {
        let mut h = [Header::EMPTY; MAX_FIELDS];
        parse_head(buf, &mut h).map(|s| match s {
            Status::Complete((n, _)) => Status::Complete(n),
            Status::Partial => Status::Partial,
        })
    }

    /// Parses a complete head and runs `f` on it.
    fn with<R>(buf: &[u8], f: impl FnOnce(&Response<'_, '_>) -> R) -> R {
        let mut h = [Header::EMPTY; MAX_FIELDS];
        match parse_head(buf, &mut h) {
            Ok(Status::Complete((n, r))) => {
                assert_eq!(n, buf.len());
                f(&r)
            }
            other => panic!("{other:?}"),
        }
    }

    fn fields(fields: &str) -> String {
        format!("HTTP/1.1 200 OK\r\n{fields}\r\n")
    }

    #[test]
    fn parses_complete_head() {
        let buf = b"HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\nX-Empty:\r\n\
                    ETag:  \"abc\" \t\r\n\r\nBODY";
        let mut h = [Header::EMPTY; 4];
        let Ok(Status::Complete((n, r))) = parse_head(buf, &mut h) else {
            panic!()
        };
        assert_eq!(&buf[n..], b"BODY");
        assert_eq!(r.version, 1);
        assert_eq!(r.code, 206);
        assert_eq!(r.reason, b"Partial Content");
        assert_eq!(r.headers.len(), 3);
        assert_eq!(
            r.headers[0],
            Header {
                name: "Content-Length",
                value: b"10"
            }
        );
        assert_eq!(
            r.headers[1],
            Header {
                name: "X-Empty",
                value: b""
            }
        );
        assert_eq!(r.header("etag"), Some(&b"\"abc\""[..]));
        assert_eq!(r.header("ETAG"), Some(&b"\"abc\""[..]));
        assert_eq!(r.header("missing"), None);
    }

    #[test]
    fn status_line_variants() {
        with(b"HTTP/1.0 404 Not Found\r\n\r\n", |r| {
            assert_eq!((r.version, r.code, r.reason), (0, 404, &b"Not Found"[..]));
        });
        with(b"HTTP/1.1 200\r\n\r\n", |r| assert_eq!(r.reason, b""));
        with(b"HTTP/1.1 200 \r\n\r\n", |r| assert_eq!(r.reason, b""));
        with(b"HTTP/1.1 599 x\ty \xff\r\n\r\n", |r| {
            assert_eq!(r.reason, b"x\ty \xff")
        });
        with(b"HTTP/1.1 100 Continue\r\n\r\n", |r| assert_eq!(r.code, 100));
        for (line, want) in [
            (&b"HTTP/2 200 OK"[..], HeadError::Version),
            (b"HTTP/1.2 200 OK", HeadError::Version),
            (b"http/1.1 200 OK", HeadError::Version),
            (b"HTTP/1.1  200 OK", HeadError::StatusCode),
            (b"HTTP/1.10 200 OK", HeadError::Version),
            (b"HTTP/1.1", HeadError::Version),
            (b"HTTP/1.1 20 OK", HeadError::StatusCode),
            (b"HTTP/1.1 2000 OK", HeadError::StatusCode),
            (b"HTTP/1.1 20x OK", HeadError::StatusCode),
            (b"HTTP/1.1 099 OK", HeadError::StatusCode),
            (b"HTTP/1.1 600 OK", HeadError::StatusCode),
            (b"HTTP/1.1 ", HeadError::StatusCode),
            (b"HTTP/1.1 200\tOK", HeadError::StatusCode),
            (b"HTTP/1.1 200 O\x01K", HeadError::ReasonPhrase),
            (b"HTTP/1.1 200 O\x7fK", HeadError::ReasonPhrase),
            (b"HTTP/1.1 200 O\0K", HeadError::ReasonPhrase),
        ] {
            let mut buf = line.to_vec();
            buf.extend_from_slice(b"\r\n\r\n");
            assert_eq!(parse(&buf), Err(want), "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn partial_at_every_split() {
        let buf = b"HTTP/1.1 200 OK\r\nA: b\r\nContent-Length: 3\r\n\r\n";
        for i in 0..buf.len() {
            assert_eq!(parse(&buf[..i]), Ok(Status::Partial), "split {i}");
        }
        assert_eq!(parse(buf), Ok(Status::Complete(buf.len())));
        let lf = b"HTTP/1.1 200 OK\nA: b\n\n";
        for i in 0..lf.len() {
            assert_eq!(parse(&lf[..i]), Ok(Status::Partial), "split {i}");
        }
        assert_eq!(parse(lf), Ok(Status::Complete(lf.len())));
    }

    #[test]
    fn fails_fast_on_non_http() {
        assert_eq!(parse(b"\x16\x03\x01"), Err(HeadError::Version));
        assert_eq!(parse(b"HTTP/2"), Err(HeadError::Version));
        assert_eq!(parse(b"<html>"), Err(HeadError::Version));
        assert_eq!(parse(b"HTTP/1."), Ok(Status::Partial));
        assert_eq!(parse(b"HTTP/1.1 2"), Ok(Status::Partial));
        assert_eq!(parse(b""), Ok(Status::Partial));
        assert_eq!(parse(b"\r"), Ok(Status::Partial));
    }

    #[test]
    fn bare_lf_and_leading_empty_lines() {
        with(b"HTTP/1.1 200 OK\nA: 1\nB: 2\r\n\n", |r| {
            assert_eq!(r.headers.len(), 2);
            assert_eq!(r.header("b"), Some(&b"2"[..]));
        });
        with(b"\r\n\nHTTP/1.1 204 No Content\r\n\r\n", |r| assert_eq!(r.code, 204));
    }

    #[test]
    fn bare_cr_rejected() {
        assert_eq!(parse(b"HTTP/1.1 200 OK\rX: y\r\n\r\n"), Err(HeadError::BareCr));
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n"), Err(HeadError::BareCr));
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\nX: a\r\r\n\r\n"), Err(HeadError::BareCr));
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\n\rX"), Err(HeadError::BareCr));
        // Detected before the line is complete.
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\nX: a\rb"), Err(HeadError::BareCr));
    }

    #[test]
    fn field_line_errors() {
        let cases: &[(&str, HeadError)] = &[
            (" X: folded\r\n", HeadError::ObsFold),
            ("A: b\r\n\tcontinued\r\n", HeadError::ObsFold),
            ("NoColon\r\n", HeadError::MissingColon),
            (": empty name\r\n", HeadError::FieldName),
            ("Bad Name: x\r\n", HeadError::FieldName),
            ("Bad\"Name: x\r\n", HeadError::FieldName),
            ("Bad(Name): x\r\n", HeadError::FieldName),
            ("Caf\u{e9}: x\r\n", HeadError::FieldName),
            ("Name : x\r\n", HeadError::WhitespaceBeforeColon),
            ("Name\t: x\r\n", HeadError::WhitespaceBeforeColon),
            ("Name: a\0b\r\n", HeadError::NulInValue),
        ];
        for (f, want) in cases {
            assert_eq!(parse(fields(f).as_bytes()), Err(*want), "{f:?}");
        }
        // Other controls and obs-text are kept in values; colons in values are fine.
        with(b"HTTP/1.1 200 OK\r\nX: a\x01b\xff:c\r\n\r\n", |r| {
            assert_eq!(r.header("x"), Some(&b"a\x01b\xff:c"[..]));
        });
        with(fields("!#$%&'*+-.^_`|~09azAZ: v\r\n").as_bytes(), |r| {
            assert_eq!(r.headers[0].name, "!#$%&'*+-.^_`|~09azAZ");
        });
    }

    #[test]
    fn field_count_limits() {
        let mut many = String::new();
        for i in 0..MAX_FIELDS {
            many.push_str(&format!("X-{i}: {i}\r\n"));
        }
        assert!(matches!(parse(fields(&many).as_bytes()), Ok(Status::Complete(_))));
        many.push_str("One: more\r\n");
        assert_eq!(parse(fields(&many).as_bytes()), Err(HeadError::TooManyFields));
        let mut big_storage = vec![Header::EMPTY; MAX_FIELDS + 10];
        assert_eq!(
            parse_head(fields(&many).as_bytes(), &mut big_storage),
            Err(HeadError::TooManyFields)
        );
        let mut two = [Header::EMPTY; 2];
        let head = fields("A: 1\r\nB: 2\r\n");
        assert!(parse_head(head.as_bytes(), &mut two).unwrap().is_complete());
        let head = fields("A: 1\r\nB: 2\r\nC: 3\r\n");
        assert_eq!(parse_head(head.as_bytes(), &mut two), Err(HeadError::TooManyFields));
        let mut none: [Header<'_>; 0] = [];
        assert!(parse_head(b"HTTP/1.1 200 OK\r\n\r\n", &mut none).unwrap().is_complete());
    }

    #[test]
    fn head_size_limit() {
        // Exactly MAX_HEAD bytes, complete: accepted.
        let prefix = "HTTP/1.1 200 OK\r\nX: ";
        let pad = MAX_HEAD - prefix.len() - 4;
        let exact = format!("{prefix}{}\r\n\r\n", "a".repeat(pad));
        assert_eq!(exact.len(), MAX_HEAD);
        assert_eq!(parse(exact.as_bytes()), Ok(Status::Complete(MAX_HEAD)));
        // With body bytes after it: still fine.
        let with_body = format!("{exact}body");
        assert_eq!(parse(with_body.as_bytes()), Ok(Status::Complete(MAX_HEAD)));
        // One byte more: too large, even though it is complete.
        let over = format!("{prefix}{}\r\n\r\n", "a".repeat(pad + 1));
        assert_eq!(parse(over.as_bytes()), Err(HeadError::TooLarge));
        // Incomplete at MAX_HEAD: Partial; past it: error.
        let partial = format!("{prefix}{}", "a".repeat(MAX_HEAD - prefix.len()));
        assert_eq!(parse(partial.as_bytes()), Ok(Status::Partial));
        let partial = format!("{partial}a");
        assert_eq!(parse(partial.as_bytes()), Err(HeadError::TooLarge));
    }

    #[test]
    fn status_helpers() {
        assert!(Status::Complete(1).is_complete());
        assert!(Status::<u8>::Partial.is_partial());
        assert_eq!(Header::default(), Header::EMPTY);
    }

    #[test]
    fn error_messages_lowercase() {
        use HeadError::*;
        for e in [
            TooLarge,
            TooManyFields,
            Version,
            StatusCode,
            ReasonPhrase,
            BareCr,
            ObsFold,
            MissingColon,
            FieldName,
            WhitespaceBeforeColon,
            NulInValue,
        ] {
            let m = e.to_string();
            assert!(m.starts_with(|c: char| c.is_ascii_lowercase()), "{m}");
        }
    }

    #[test]
    fn content_length_rules() {
        let cl = |f: &str| with(fields(f).as_bytes(), |r| r.content_length());
        assert_eq!(cl(""), Ok(None));
        assert_eq!(cl("Content-Length: 0\r\n"), Ok(Some(0)));
        assert_eq!(cl("content-length: 5000000000\r\n"), Ok(Some(5_000_000_000)));
        assert_eq!(cl("Content-Length: 18446744073709551615\r\n"), Ok(Some(u64::MAX)));
        assert_eq!(cl("Content-Length: 5, 5\r\n"), Ok(Some(5)));
        assert_eq!(cl("Content-Length: 5,5 ,\t5\r\n"), Ok(Some(5)));
        assert_eq!(cl("Content-Length: 5\r\nContent-Length: 5\r\n"), Ok(Some(5)));
        assert_eq!(cl("Content-Length: 5\r\nContent-Length: 05\r\n"), Ok(Some(5)));
        use FieldError::*;
        assert_eq!(cl("Content-Length: 5, 6\r\n"), Err(ContentLengthConflict));
        assert_eq!(
            cl("Content-Length: 5\r\nContent-Length: 6\r\n"),
            Err(ContentLengthConflict)
        );
        assert_eq!(cl("Content-Length:\r\n"), Err(ContentLengthInvalid));
        assert_eq!(cl("Content-Length: 5,\r\n"), Err(ContentLengthInvalid));
        assert_eq!(cl("Content-Length: -1\r\n"), Err(ContentLengthInvalid));
        assert_eq!(cl("Content-Length: +1\r\n"), Err(ContentLengthInvalid));
        assert_eq!(cl("Content-Length: 1 2\r\n"), Err(ContentLengthInvalid));
        assert_eq!(cl("Content-Length: 0x10\r\n"), Err(ContentLengthInvalid));
        assert_eq!(
            cl("Content-Length: 18446744073709551616\r\n"),
            Err(ContentLengthOverflow)
        );
        assert_eq!(
            cl("Content-Length: 123456789012345678901\r\n"),
            Err(ContentLengthOverflow)
        );
    }

    #[test]
    fn transfer_encoding_rules() {
        let te = |f: &str| with(fields(f).as_bytes(), |r| r.is_chunked());
        assert_eq!(te(""), Ok(false));
        assert_eq!(te("Transfer-Encoding: chunked\r\n"), Ok(true));
        assert_eq!(te("transfer-encoding: CHUNKED\r\n"), Ok(true));
        assert_eq!(te("Transfer-Encoding: , chunked ,\r\n"), Ok(true));
        use FieldError::*;
        assert_eq!(
            te("Transfer-Encoding: gzip, chunked\r\n"),
            Err(TransferEncodingUnsupported)
        );
        assert_eq!(te("Transfer-Encoding: gzip\r\n"), Err(TransferEncodingUnsupported));
        assert_eq!(te("Transfer-Encoding: identity\r\n"), Err(TransferEncodingUnsupported));
        assert_eq!(
            te("Transfer-Encoding: chunked;x=1\r\n"),
            Err(TransferEncodingUnsupported)
        );
        assert_eq!(te("Transfer-Encoding: chunked, gzip\r\n"), Err(ChunkedNotLast));
        assert_eq!(te("Transfer-Encoding: chunked, chunked\r\n"), Err(ChunkedNotLast));
        assert_eq!(
            te("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"),
            Err(ChunkedNotLast)
        );
        assert_eq!(te("Transfer-Encoding:\r\n"), Err(TransferEncodingEmpty));
        assert_eq!(te("Transfer-Encoding: ,\r\n"), Err(TransferEncodingEmpty));
    }

    #[test]
    fn framing_rules() {
        let framing = |status: &str, f: &str, head: bool| {
            let buf = format!("HTTP/1.1 {status}\r\n{f}\r\n");
            with(buf.as_bytes(), |r| r.body_framing(head))
        };
        use FieldError::*;
        assert_eq!(
            framing("200 OK", "Content-Length: 7\r\n", false),
            Ok(Framing::Length(7))
        );
        assert_eq!(framing("200 OK", "Content-Length: 7\r\n", true), Ok(Framing::NoBody));
        assert_eq!(framing("200 OK", "", false), Ok(Framing::Close));
        assert_eq!(
            framing("200 OK", "Transfer-Encoding: chunked\r\n", false),
            Ok(Framing::Chunked)
        );
        assert_eq!(
            framing("200 OK", "Transfer-Encoding: chunked\r\n", true),
            Ok(Framing::NoBody)
        );
        for code in [
            "100 Continue",
            "101 Switching",
            "199 X",
            "204 No Content",
            "304 Not Modified",
        ] {
            assert_eq!(framing(code, "Content-Length: 7\r\n", false), Ok(Framing::NoBody));
        }
        assert_eq!(
            framing("205 Reset", "Content-Length: 0\r\n", false),
            Ok(Framing::Length(0))
        );
        assert_eq!(
            framing("200 OK", "Transfer-Encoding: chunked\r\nContent-Length: 7\r\n", false),
            Err(ContentLengthWithChunked)
        );
        assert_eq!(
            framing("200 OK", "Content-Length: 7\r\nTransfer-Encoding: chunked\r\n", false),
            Err(ContentLengthWithChunked)
        );
        assert_eq!(
            framing("200 OK", "Transfer-Encoding: gzip\r\n", false),
            Err(TransferEncodingUnsupported)
        );
        assert_eq!(
            framing("200 OK", "Content-Length: x\r\n", false),
            Err(ContentLengthInvalid)
        );
        let http10 = b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(with(http10, |r| r.body_framing(false)), Err(TransferEncodingInHttp10));
        let http10 = b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(with(http10, |r| r.body_framing(false)), Ok(Framing::Length(3)));
    }

    #[test]
    fn content_range_field() {
        let cr = |f: &str| with(fields(f).as_bytes(), |r| r.content_range());
        assert_eq!(cr(""), Ok(None));
        assert_eq!(
            cr("Content-Range: bytes 0-9/10\r\n"),
            Ok(Some(ContentRange::Bytes {
                first: 0,
                last: 9,
                complete: Some(10)
            }))
        );
        assert_eq!(
            cr("Content-Range: bytes */10\r\ncontent-range: bytes */10\r\n"),
            Ok(Some(ContentRange::Unsatisfied { complete: 10 }))
        );
        assert_eq!(
            cr("Content-Range: bytes 0-9/10\r\nContent-Range: bytes 0-9/11\r\n"),
            Err(FieldError::ContentRangeConflict)
        );
        assert_eq!(
            cr("Content-Range: bytes 9-0/10\r\n"),
            Err(FieldError::ContentRangeOrder)
        );
    }

    #[test]
    fn validators() {
        let v = |f: &str| {
            let buf = fields(f);
            with(buf.as_bytes(), |r| r.validator().map(|v| format!("{v:?}")))
        };
        let strong = Validator::ETag {
            value: b"\"x\"",
            weak: false,
        };
        let weak = Validator::ETag {
            value: b"\"x\"",
            weak: true,
        };
        let lm = Validator::LastModified(b"Tue, 15 Nov 1994 08:12:31 GMT");
        let d = |v: Validator<'_>| Some(format!("{v:?}"));
        assert_eq!(v(""), None);
        assert_eq!(v("ETag: \"x\"\r\n"), d(strong));
        assert_eq!(
            v("Last-Modified: Tue, 15 Nov 1994 08:12:31 GMT\r\nETag: \"x\"\r\n"),
            d(strong)
        );
        assert_eq!(
            v("ETag: W/\"x\"\r\nLast-Modified: Tue, 15 Nov 1994 08:12:31 GMT\r\n"),
            d(lm)
        );
        assert_eq!(v("ETag: W/\"x\"\r\n"), d(weak));
        assert_eq!(v("ETag: x\r\nLast-Modified: Tue, 15 Nov 1994 08:12:31 GMT\r\n"), d(lm));
        assert_eq!(v("ETag: x\r\n"), None);
        assert_eq!(v("Last-Modified:\r\n"), None);
    }

    /// The 304 nginx answers a conditional GET with (RFC 9110 §15.4.5): no body whatever
    /// its fields say, and the validators it carries are the current ones.
    #[test]
    fn a_304_has_no_body_and_carries_the_validators() {
        let buf = b"HTTP/1.1 304 Not Modified\r\nServer: nginx\r\nDate: Tue, 01 Dec 2026 10:00:00 GMT\r\n\
            Last-Modified: Tue, 01 Dec 2026 09:00:00 GMT\r\nConnection: keep-alive\r\n\
            ETag: \"692d5a50-1000\"\r\nContent-Length: 4096\r\n\r\nHTTP/1.1 200 OK\r\n";
        let mut headers = [Header::EMPTY; MAX_FIELDS];
        let Ok(Status::Complete((len, r))) = parse_head(buf, &mut headers) else {
            panic!("a complete head");
        };
        // The next response starts right after the head: nothing of it is a body.
        assert!(buf[len..].starts_with(b"HTTP/1.1 200"));
        assert_eq!(r.code, 304);
        assert_eq!(r.body_framing(false), Ok(Framing::NoBody));
        assert_eq!(
            r.validator(),
            Some(Validator::ETag {
                value: b"\"692d5a50-1000\"",
                weak: false
            })
        );
        assert_eq!(
            r.header("last-modified").and_then(crate::parse_http_date),
            crate::parse_http_date(b"Tue, 01 Dec 2026 09:00:00 GMT")
        );
    }

    #[test]
    fn redirects_and_retry_after() {
        for code in [301, 302, 303, 307, 308] {
            let buf = format!("HTTP/1.1 {code} R\r\nLocation: /next\r\n\r\n");
            with(buf.as_bytes(), |r| {
                assert!(r.is_redirect());
                assert_eq!(r.location(), Some(&b"/next"[..]));
            });
        }
        for code in [200, 300, 304, 305, 306, 309] {
            let buf = format!("HTTP/1.1 {code} R\r\n\r\n");
            with(buf.as_bytes(), |r| assert!(!r.is_redirect()));
        }
        with(b"HTTP/1.1 503 Busy\r\nRetry-After: 7\r\n\r\n", |r| {
            assert_eq!(r.retry_after(), Some(RetryAfter::Seconds(7)));
        });
        with(b"HTTP/1.1 503 Busy\r\n\r\n", |r| assert_eq!(r.retry_after(), None));
    }

    #[test]
    fn header_values_in_order() {
        with(fields("A: 1\r\nB: x\r\na: 2\r\n").as_bytes(), |r| {
            let all: Vec<&[u8]> = r.header_values("A").collect();
            assert_eq!(all, [&b"1"[..], b"2"]);
            assert_eq!(r.header("a"), Some(&b"1"[..]));
        });
    }

    /// Property: on random input, `parse_head` never panics, a complete head's length
    /// is within the input, and any prefix of a complete head is Partial (or the
    /// same error).
    #[test]
    fn property_random_heads() {
        let mut rng = crate::test_rng::Rng(0xdead_beef_cafe_f00d);
        let alphabet = b"HTTP/1.0 200 OK\r\n:a-Z \t";
        for _ in 0..5_000 {
            let mut buf = b"HTTP/1.1 200 OK\r\n".to_vec();
            let len = rng.below(60);
            buf.extend(rng.bytes(len, alphabet));
            if rng.below(2) == 0 {
                buf.extend_from_slice(b"\r\n\r\n");
            }
            let mut h = [Header::EMPTY; 8];
            match parse_head(&buf, &mut h) {
                Ok(Status::Complete((n, r))) => {
                    assert!(n <= buf.len());
                    assert!(r.headers.len() <= 8);
                    for cut in 0..n {
                        let mut h2 = [Header::EMPTY; 8];
                        assert_eq!(parse_head(&buf[..cut], &mut h2), Ok(Status::Partial));
                    }
                }
                Ok(Status::Partial) => {}
                Err(e) => {
                    // Extending the input never turns an error into success.
                    buf.extend_from_slice(b"\r\n\r\n");
                    let mut h2 = [Header::EMPTY; 8];
                    assert_eq!(parse_head(&buf, &mut h2), Err(e));
                }
            }
        }
    }

    /// Cases mutation testing found unpinned.
    #[test]
    fn status_codes_use_every_digit() {
        for code in [416u16, 429, 599, 100] {
            let head = format!("HTTP/1.1 {code} X\r\n\r\n");
            assert_eq!(with(head.as_bytes(), |r| r.code), code);
        }
    }

    #[test]
    fn heads_up_to_max_head_parse() {
        // 60 KiB of fields: under the 64 KiB limit.
        let pad = "p".repeat(1000);
        let mut head = String::from("HTTP/1.1 200 OK\r\n");
        for i in 0..60 {
            head.push_str(&format!("X-Pad-{i}: {pad}\r\n"));
        }
        head.push_str("\r\n");
        assert!(head.len() < MAX_HEAD);
        assert_eq!(parse(head.as_bytes()), Ok(Status::Complete(head.len())));
    }

    #[test]
    fn status_helpers_say_no_to_the_other_state() {
        let c: Status<u8> = Status::Complete(1);
        assert!(c.is_complete() && !c.is_partial());
        let p: Status<u8> = Status::Partial;
        assert!(p.is_partial() && !p.is_complete());
    }
}
