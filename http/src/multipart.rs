//! A `206 Partial Content` in `multipart/byteranges` form (RFC 9110 §14.6; the multipart
//! syntax of RFC 2046 §5.1.1): the answer to a multi-range request (nginx, Apache), and
//! the form Apache Traffic Server answers even a single Range request in:
//!
//! ```text
//! HTTP/1.1 206 Partial Content
//! Content-Type: multipart/byteranges; boundary=B
//! Content-Length: 1234
//!
//! --B
//! Content-Type: application/octet-stream
//! Content-Range: bytes 0-1023/4096
//!
//! <1024 bytes>
//! --B--
//! ```
//!
//! [`byteranges_boundary`] takes the boundary from the response's `Content-Type`;
//! [`parse_byteranges_part`] reads what comes before the part's bytes (an optional run
//! of empty lines, the delimiter line, the part's header block) and its `Content-Range`.
//! The caller then reads exactly the part's bytes; [`Part::is_whole_body`] says whether
//! a `Content-Length` leaves room for this one part and its closing delimiter and
//! nothing else (a second part, an epilogue). [`next_byteranges_part`] walks a body of
//! several parts: after each part's bytes, the next part's head or the closing
//! delimiter ([`Walk`]). Borrows its input, allocates nothing.

use core::fmt;

use crate::fields::{self, ContentRange, FieldError, parse_content_range};
use crate::response::{HeadError, Header, Status, next_line, parse_field_line};

/// Longest boundary allowed (RFC 2046 §5.1.1: 1 to 70 characters).
pub const MAX_BOUNDARY: usize = 70;

/// Largest run of bytes accepted before the part's bytes (empty lines, delimiter line,
/// part header block, final empty line included).
pub const MAX_PART_HEAD: usize = 8 * 1024;

/// Most header fields accepted in the part's header block.
pub const MAX_PART_FIELDS: usize = 32;

/// Why a `multipart/byteranges` response could not be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PartError {
    /// `Content-Type` parameters are not `;`-separated `name=value` pairs (RFC 9110
    /// §8.3.1), or a parameter appears twice.
    MediaType,
    /// `multipart/byteranges` without a `boundary` parameter (RFC 9110 §14.6 requires it).
    BoundaryMissing,
    /// A boundary that is empty, longer than [`MAX_BOUNDARY`], ends with a space, or has
    /// a character outside RFC 2046's `bchars`.
    BoundaryInvalid,
    /// The body does not start with the delimiter line `--boundary` (after empty lines).
    Delimiter,
    /// The body's first delimiter is the closing one: no part at all.
    NoPart,
    /// A malformed line in the part's header block.
    Field(HeadError),
    /// More than [`MAX_PART_FIELDS`] fields in the part's header block, or more than the
    /// storage given.
    TooManyFields,
    /// No end of the part's header block within [`MAX_PART_HEAD`] bytes.
    TooLarge,
    /// The part has no `Content-Range` field.
    ContentRangeMissing,
    /// The part's `Content-Range` is malformed, or `bytes */complete` (no bytes), or
    /// several that differ.
    ContentRange(FieldError),
}

impl fmt::Display for PartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PartError::MediaType => f.write_str("malformed content-type parameters"),
            PartError::BoundaryMissing => f.write_str("multipart/byteranges without a boundary"),
            PartError::BoundaryInvalid => f.write_str("invalid multipart boundary"),
            PartError::Delimiter => f.write_str("multipart body does not start with its boundary"),
            PartError::NoPart => f.write_str("multipart body without a part"),
            PartError::Field(e) => write!(f, "in the part's header: {e}"),
            PartError::TooManyFields => f.write_str("too many header fields in the part"),
            PartError::TooLarge => f.write_str("part header too large"),
            PartError::ContentRangeMissing => f.write_str("part without content-range"),
            PartError::ContentRange(e) => write!(f, "in the part's content-range: {e}"),
        }
    }
}

impl std::error::Error for PartError {}

/// RFC 2046 §5.1.1 `bchars`: `bcharsnospace / " "`.
fn is_bchar(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'\'' | b'(' | b')' | b'+' | b'_' | b',' | b'-' | b'.' | b'/' | b':' | b'=' | b'?' | b' '
        )
}

/// The boundary of a `multipart/byteranges` `Content-Type` value, `None` for any other
/// media type (RFC 9110 §8.3.1 syntax: `type/subtype *( OWS ";" OWS name=value )`, value a
/// token or a quoted-string; type, subtype and parameter names case-insensitive). The
/// boundary is returned as sent, without quotes.
///
/// # Errors
/// [`PartError::MediaType`] for garbled parameters or a repeated one (for
/// `multipart/byteranges` only); [`PartError::BoundaryMissing`] without a boundary;
/// [`PartError::BoundaryInvalid`] for one RFC 2046 §5.1.1 does not allow (a quoted-pair
/// in it included: no `bchars` needs one).
pub fn byteranges_boundary(content_type: &[u8]) -> Result<Option<&[u8]>, PartError> {
    let v = fields::trim_ows(content_type);
    let semi = v.iter().position(|&b| b == b';').unwrap_or(v.len());
    if !fields::trim_ows(&v[..semi]).eq_ignore_ascii_case(b"multipart/byteranges") {
        return Ok(None);
    }
    let mut rest = &v[semi..];
    let mut boundary = None;
    let skip_ows = |s: &[u8]| -> usize { s.iter().take_while(|&&b| b == b' ' || b == b'\t').count() };
    while !rest.is_empty() {
        // At a ';' (the loop's invariant, after OWS).
        rest = rest.strip_prefix(b";").ok_or(PartError::MediaType)?;
        rest = &rest[skip_ows(rest)..];
        if rest.is_empty() || rest[0] == b';' {
            continue;
        }
        let name_len = rest.iter().take_while(|&&b| crate::response::is_tchar(b)).count();
        let name = &rest[..name_len];
        rest = rest[name_len..].strip_prefix(b"=").ok_or(PartError::MediaType)?;
        if name.is_empty() {
            return Err(PartError::MediaType);
        }
        let is_boundary = name.eq_ignore_ascii_case(b"boundary");
        let value;
        if rest.first() == Some(&b'"') {
            let mut i = 1;
            loop {
                match rest.get(i) {
                    None => return Err(PartError::MediaType),
                    Some(b'"') => break,
                    Some(b'\\') if is_boundary => return Err(PartError::BoundaryInvalid),
                    Some(b'\\') => i += 2,
                    Some(_) => i += 1,
                }
            }
            value = &rest[1..i];
            rest = &rest[i + 1..];
        } else {
            let n = rest.iter().take_while(|&&b| crate::response::is_tchar(b)).count();
            if n == 0 {
                return Err(PartError::MediaType);
            }
            value = &rest[..n];
            rest = &rest[n..];
        }
        rest = &rest[skip_ows(rest)..];
        if is_boundary {
            if boundary.is_some() {
                return Err(PartError::MediaType);
            }
            if value.is_empty()
                || value.len() > MAX_BOUNDARY
                || value.last() == Some(&b' ')
                || !value.iter().all(|&b| is_bchar(b))
            {
                return Err(PartError::BoundaryInvalid);
            }
            boundary = Some(value);
        }
    }
    boundary.map(Some).ok_or(PartError::BoundaryMissing)
}

/// The part of a one-part `multipart/byteranges` body, borrowing the body (`'b`) and the
/// field storage (`'h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part<'b, 'h> {
    /// First byte position of the part (`Content-Range`, RFC 9110 §14.4).
    pub first: u64,
    /// Last byte position, inclusive.
    pub last: u64,
    /// Complete length of the representation; `None` for `*`.
    pub complete: Option<u64>,
    /// Bytes before the part's bytes: empty lines, delimiter line, header block.
    pub head_len: usize,
    /// The part's header fields in the order received.
    pub headers: &'h [Header<'b>],
}

impl Part<'_, '_> {
    /// The part's length in bytes (`u64::MAX` for `bytes 0-18446744073709551615/*`,
    /// one short: saturating).
    pub fn len(&self) -> u64 {
        (self.last - self.first).saturating_add(1)
    }

    /// Never true: a part holds at least one byte (`first <= last`). For clippy's
    /// `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether a body of `content_length` bytes holds this part and its closing
    /// delimiter `CRLF --boundary--` (optionally followed by one CRLF) and nothing else:
    /// with a second part or an epilogue it is longer.
    pub fn is_whole_body(&self, content_length: u64, boundary: &[u8]) -> bool {
        // CRLF "--" boundary "--" (one more CRLF: the second form below).
        let closing = boundary.len() as u64 + 6;
        let exact = (self.head_len as u64)
            .saturating_add(self.len())
            .saturating_add(closing);
        content_length == exact || content_length == exact.saturating_add(2)
    }
}

/// Parses what comes before the first part's bytes in a `multipart/byteranges` body
/// (RFC 2046 §5.1.1, RFC 9110 §14.6): empty lines (a preamble of nothing), the delimiter
/// line `--boundary` with optional trailing SP / HTAB (transport padding), the part's
/// header fields, an empty line. Line endings CRLF or bare LF, as [`crate::parse_head`].
///
/// Returns [`Status::Partial`] while `buf` ends before the header block does (read more,
/// call again with the longer buffer), else the [`Part`] with its `Content-Range`.
///
/// # Errors
/// [`PartError::Delimiter`] as soon as the first non-empty line cannot be the delimiter,
/// [`PartError::NoPart`] for the closing delimiter there, [`PartError::Field`] /
/// [`PartError::TooManyFields`] for the header block, [`PartError::TooLarge`] past
/// [`MAX_PART_HEAD`] bytes, [`PartError::ContentRangeMissing`] /
/// [`PartError::ContentRange`] for the part's `Content-Range` (`bytes */n` included).
pub fn parse_byteranges_part<'b, 'h>(
    buf: &'b [u8],
    boundary: &[u8],
    headers: &'h mut [Header<'b>],
) -> Result<Status<Part<'b, 'h>>, PartError> {
    match next_byteranges_part(buf, boundary, headers)? {
        Status::Complete(Walk::Part(p)) => Ok(Status::Complete(p)),
        Status::Complete(Walk::End { .. }) => Err(PartError::NoPart),
        Status::Partial => Ok(Status::Partial),
    }
}

/// What comes next in a `multipart/byteranges` body: another part, or the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walk<'b, 'h> {
    /// A part's head was read; its bytes follow ([`Part::head_len`] bytes in).
    Part(Part<'b, 'h>),
    /// The closing delimiter `--boundary--` (RFC 2046 §5.1.1 `close-delimiter`): the body
    /// ends. `len`: the bytes up to the end of its line (all of `buf` when the line has
    /// no end yet); what follows is the epilogue, which carries nothing.
    End {
        /// Bytes consumed, the closing delimiter line included.
        len: usize,
    },
}

/// Walks a `multipart/byteranges` body (RFC 9110 §14.6, RFC 2046 §5.1.1) one step: from
/// the start of the body, or from just after a part's bytes, reads the empty lines (the
/// CRLF that ends a part's bytes belongs to the next delimiter; a preamble of nothing),
/// then either the delimiter line and the next part's header block ([`Walk::Part`]), or
/// the closing delimiter ([`Walk::End`]). The caller reads exactly [`Part::len`] bytes
/// after [`Part::head_len`], then calls again with what follows them. Several parts may
/// come in any order; which ranges they may carry is the caller's to check (against what
/// it asked). Line endings CRLF or bare LF.
///
/// Returns [`Status::Partial`] while `buf` ends before the header block (or the closing
/// delimiter) does.
///
/// # Errors
/// As [`parse_byteranges_part`], except that the closing delimiter is [`Walk::End`], not
/// [`PartError::NoPart`].
pub fn next_byteranges_part<'b, 'h>(
    buf: &'b [u8],
    boundary: &[u8],
    headers: &'h mut [Header<'b>],
) -> Result<Status<Walk<'b, 'h>>, PartError> {
    let limited = &buf[..buf.len().min(MAX_PART_HEAD)];
    match parse_limited(limited, boundary, headers)? {
        Status::Partial if buf.len() > MAX_PART_HEAD => Err(PartError::TooLarge),
        status => Ok(status),
    }
}

fn parse_limited<'b, 'h>(
    buf: &'b [u8],
    boundary: &[u8],
    headers: &'h mut [Header<'b>],
) -> Result<Status<Walk<'b, 'h>>, PartError> {
    let mut pos = 0;
    let padding = |s: &[u8]| s.iter().all(|&b| b == b' ' || b == b'\t');
    let delimiter = loop {
        match next_line(buf, pos).map_err(|_| PartError::Delimiter)? {
            None => {
                // Fail fast on a line that cannot become `--boundary`.
                let rest = &buf[pos..];
                let rest = rest.strip_suffix(b"\r").unwrap_or(rest);
                if close_delimiter(rest, boundary).is_some_and(padding) {
                    // The close delimiter, its line not ended (yet): the body ends here
                    // whatever follows (no part's delimiter starts `--boundary--`).
                    return Ok(Status::Complete(Walk::End { len: buf.len() }));
                }
                if !delimiter_prefix_ok(rest, boundary) {
                    return Err(PartError::Delimiter);
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
    if close_delimiter(delimiter, boundary).is_some_and(padding) {
        return Ok(Status::Complete(Walk::End { len: pos }));
    }
    let after = delimiter
        .strip_prefix(b"--")
        .and_then(|l| l.strip_prefix(boundary))
        .ok_or(PartError::Delimiter)?;
    if !padding(after) {
        return Err(PartError::Delimiter);
    }
    let limit = headers.len().min(MAX_PART_FIELDS);
    let mut count = 0;
    loop {
        let Some((line, next)) = next_line(buf, pos).map_err(PartError::Field)? else {
            return Ok(Status::Partial);
        };
        pos = next;
        if line.is_empty() {
            break;
        }
        if count == limit {
            return Err(PartError::TooManyFields);
        }
        headers[count] = parse_field_line(line).map_err(PartError::Field)?;
        count += 1;
    }
    let headers: &'h [Header<'b>] = headers;
    let headers = &headers[..count];
    let mut range = None;
    for h in headers.iter().filter(|h| h.name.eq_ignore_ascii_case("content-range")) {
        let cr = parse_content_range(h.value).map_err(PartError::ContentRange)?;
        if range.is_some_and(|r| r != cr) {
            return Err(PartError::ContentRange(FieldError::ContentRangeConflict));
        }
        range = Some(cr);
    }
    let ContentRange::Bytes { first, last, complete } = range.ok_or(PartError::ContentRangeMissing)? else {
        return Err(PartError::ContentRange(FieldError::ContentRangeInvalid));
    };
    Ok(Status::Complete(Walk::Part(Part {
        first,
        last,
        complete,
        head_len: pos,
        headers,
    })))
}

/// What follows `--boundary--` on a line that starts with it (the close delimiter's
/// transport padding, when it is one); `None` for any other line.
fn close_delimiter<'l>(line: &'l [u8], boundary: &[u8]) -> Option<&'l [u8]> {
    line.strip_prefix(b"--")?.strip_prefix(boundary)?.strip_prefix(b"--")
}

/// Whether an incomplete line can still become the delimiter line: a prefix of
/// `--boundary`, or `--boundary` followed by padding or dashes.
fn delimiter_prefix_ok(line: &[u8], boundary: &[u8]) -> bool {
    let dash_boundary_len = 2 + boundary.len();
    let n = line.len().min(dash_boundary_len);
    let expected = |i: usize| if i < 2 { b'-' } else { boundary[i - 2] };
    if !(0..n).all(|i| line[i] == expected(i)) {
        return false;
    }
    let tail = &line[n..];
    let tail = tail
        .strip_prefix(b"--")
        .or_else(|| tail.strip_prefix(b"-"))
        .unwrap_or(tail);
    tail.iter().all(|&b| b == b' ' || b == b'\t')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// first, last, complete, head_len.
    type Got = (u64, u64, Option<u64>, usize);

    fn part(buf: &[u8], boundary: &[u8]) -> Result<Status<Got>, PartError> {
        let mut h = [Header::EMPTY; MAX_PART_FIELDS];
        Ok(match parse_byteranges_part(buf, boundary, &mut h)? {
            Status::Complete(p) => Status::Complete((p.first, p.last, p.complete, p.head_len)),
            Status::Partial => Status::Partial,
        })
    }

    #[test]
    fn boundary_forms() {
        let b = byteranges_boundary;
        assert_eq!(b(b"multipart/byteranges; boundary=B"), Ok(Some(&b"B"[..])));
        assert_eq!(b(b"Multipart/ByteRanges;BOUNDARY=abc-1"), Ok(Some(&b"abc-1"[..])));
        assert_eq!(
            b(b"multipart/byteranges ; charset=x ;boundary=\"a b:c?\" ; q=\"\\\"\""),
            Ok(Some(&b"a b:c?"[..]))
        );
        assert_eq!(b(b"application/octet-stream"), Ok(None));
        assert_eq!(b(b"multipart/mixed; boundary=B"), Ok(None));
        assert_eq!(b(b"multipart/byteranges"), Err(PartError::BoundaryMissing));
        assert_eq!(b(b"multipart/byteranges; charset=x"), Err(PartError::BoundaryMissing));
        assert_eq!(b(b"multipart/byteranges; boundary="), Err(PartError::MediaType));
        assert_eq!(
            b(b"multipart/byteranges; boundary=\"\""),
            Err(PartError::BoundaryInvalid)
        );
        assert_eq!(
            b(b"multipart/byteranges; boundary=\"a \""),
            Err(PartError::BoundaryInvalid)
        );
        assert_eq!(
            b(b"multipart/byteranges; boundary=a!b"),
            Err(PartError::BoundaryInvalid)
        );
        assert_eq!(
            b(b"multipart/byteranges; boundary=\"a\\b\""),
            Err(PartError::BoundaryInvalid)
        );
        assert_eq!(b(b"multipart/byteranges; boundary=\"ab"), Err(PartError::MediaType));
        assert_eq!(
            b(b"multipart/byteranges; boundary=a; boundary=b"),
            Err(PartError::MediaType)
        );
        assert_eq!(b(b"multipart/byteranges; boundary=a b"), Err(PartError::MediaType));
        let long = [b'x'; 71];
        let mut v = b"multipart/byteranges; boundary=".to_vec();
        v.extend_from_slice(&long[..70]);
        assert!(b(&v).unwrap().is_some());
        v.push(b'x');
        assert_eq!(b(&v), Err(PartError::BoundaryInvalid));
    }

    #[test]
    fn one_part_as_traffic_server_sends_it() {
        let head = b"--B\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes 10-19/100\r\n\r\n";
        let mut body = head.to_vec();
        body.extend_from_slice(b"0123456789\r\n--B--\r\n");
        let n = head.len();
        assert_eq!(part(&body, b"B"), Ok(Status::Complete((10, 19, Some(100), n))));
        for k in 0..n {
            assert_eq!(part(&body[..k], b"B"), Ok(Status::Partial), "prefix {k}");
        }
        let mut h = [Header::EMPTY; 4];
        let Ok(Status::Complete(p)) = parse_byteranges_part(&body, b"B", &mut h) else {
            panic!()
        };
        assert_eq!(p.headers.len(), 2);
        assert!(p.is_whole_body(body.len() as u64, b"B"));
        assert!(p.is_whole_body(body.len() as u64 - 2, b"B"));
        assert!(!p.is_whole_body(body.len() as u64 + 1, b"B"));
        assert!(!p.is_whole_body(body.len() as u64 + 100, b"B"));
    }

    #[test]
    fn leading_empty_lines_padding_and_lf() {
        let body = b"\r\n\n--xy \t\nContent-Range: bytes 0-0/*\n\nZ";
        assert_eq!(part(body, b"xy"), Ok(Status::Complete((0, 0, None, body.len() - 1))));
    }

    #[test]
    fn errors() {
        assert_eq!(part(b"--C\r\n", b"B"), Err(PartError::Delimiter));
        assert_eq!(part(b"--C", b"B"), Err(PartError::Delimiter));
        assert_eq!(part(b"hello", b"B"), Err(PartError::Delimiter));
        assert_eq!(part(b"--Bx\r\n", b"B"), Err(PartError::Delimiter));
        assert_eq!(part(b"--Bx", b"B"), Err(PartError::Delimiter));
        assert_eq!(part(b"--B--\r\n", b"B"), Err(PartError::NoPart));
        assert_eq!(part(b"--B-", b"B"), Ok(Status::Partial));
        assert_eq!(part(b"--B\r\n\r\n", b"B"), Err(PartError::ContentRangeMissing));
        assert_eq!(
            part(b"--B\r\nContent-Range: bytes */5\r\n\r\n", b"B"),
            Err(PartError::ContentRange(FieldError::ContentRangeInvalid))
        );
        assert_eq!(
            part(
                b"--B\r\nContent-Range: bytes 0-1/5\r\nContent-Range: bytes 0-2/5\r\n\r\n",
                b"B"
            ),
            Err(PartError::ContentRange(FieldError::ContentRangeConflict))
        );
        assert_eq!(
            part(b"--B\r\nContent-Range: bytes 3-1/5\r\n\r\n", b"B"),
            Err(PartError::ContentRange(FieldError::ContentRangeOrder))
        );
        assert_eq!(
            part(b"--B\r\n folded\r\n\r\n", b"B"),
            Err(PartError::Field(HeadError::ObsFold))
        );
        let mut many = b"--B\r\n".to_vec();
        for i in 0..=MAX_PART_FIELDS {
            many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        assert_eq!(part(&many, b"B"), Err(PartError::TooManyFields));
        let mut big = b"--B\r\nX: ".to_vec();
        big.resize(MAX_PART_HEAD + 1, b'a');
        assert_eq!(part(&big, b"B"), Err(PartError::TooLarge));
        let mut blank = vec![b'\n'; MAX_PART_HEAD + 1];
        blank.push(b'-');
        assert_eq!(part(&blank, b"B"), Err(PartError::TooLarge));
    }
    /// The edges: a part head at and one byte past MAX_PART_HEAD, empty and trailing
    /// parameters, an unclosed quoted boundary, padding after an unended delimiter line.
    #[test]
    fn edges() {
        // A part head of 2 KiB is under MAX_PART_HEAD (8 KiB); exactly MAX_PART_HEAD
        // bytes still unended wait for more, one byte past it is refused.
        let mut two_k = b"--B\r\nX: ".to_vec();
        two_k.resize(2048, b'a');
        two_k.extend_from_slice(b"\r\nContent-Range: bytes 0-0/1\r\n\r\nZ");
        let len = two_k.len() - 1;
        assert_eq!(part(&two_k, b"B"), Ok(Status::Complete((0, 0, Some(1), len))));
        let mut at = b"--B\r\nX: ".to_vec();
        at.resize(MAX_PART_HEAD, b'a');
        let walk = |buf: &[u8]| {
            let mut h = [Header::EMPTY; MAX_PART_FIELDS];
            next_byteranges_part(buf, b"B", &mut h).map(|s| matches!(s, Status::Partial))
        };
        assert_eq!(walk(&at), Ok(true));
        at.push(b'a');
        assert_eq!(walk(&at), Err(PartError::TooLarge));
        // Empty parameters and a trailing ';' (RFC 9110 §5.6.6 allows them).
        let b = byteranges_boundary;
        assert_eq!(b(b"multipart/byteranges;;boundary=B"), Ok(Some(&b"B"[..])));
        assert_eq!(b(b"multipart/byteranges; boundary=B;"), Ok(Some(&b"B"[..])));
        // A quoted boundary with a backslash is refused as a boundary even when the
        // quote never closes (a quoted-pair elsewhere is skipped: a malformed media type).
        assert_eq!(
            b(b"multipart/byteranges; boundary=\"a\\"),
            Err(PartError::BoundaryInvalid)
        );
        assert_eq!(b(b"multipart/byteranges; q=\"a\\"), Err(PartError::MediaType));
        // The delimiter line with padding, not ended yet: more may come.
        assert_eq!(part(b"--B \t", b"B"), Ok(Status::Partial));
        assert_eq!(part(b"--B\t ", b"B"), Ok(Status::Partial));
        let mut h = [Header::EMPTY; MAX_PART_FIELDS];
        let Ok(Status::Complete(p)) = parse_byteranges_part(&two_k, b"B", &mut h) else {
            panic!()
        };
        assert!(!p.is_empty());
        assert_eq!(p.len(), 1);
    }

    /// Each error says what was wrong, with the field error inside where there is one.
    #[test]
    fn error_texts() {
        assert_eq!(PartError::TooLarge.to_string(), "part header too large");
        assert_eq!(PartError::ContentRangeMissing.to_string(), "part without content-range");
        assert_eq!(
            PartError::Field(HeadError::ObsFold).to_string(),
            format!("in the part's header: {}", HeadError::ObsFold)
        );
        assert_eq!(
            PartError::ContentRange(FieldError::ContentRangeOrder).to_string(),
            format!("in the part's content-range: {}", FieldError::ContentRangeOrder)
        );
    }

    /// Walks `body` as the engine does: each part's head, its bytes, until the end.
    /// Returns the parts (first, last, bytes) and where the walk ended.
    /// A part walked: first, last, its bytes.
    type Walked = (u64, u64, Vec<u8>);

    fn walk(body: &[u8], boundary: &[u8]) -> Result<(Vec<Walked>, usize), PartError> {
        let mut at = 0;
        let mut parts = Vec::new();
        loop {
            let mut h = [Header::EMPTY; MAX_PART_FIELDS];
            match next_byteranges_part(&body[at..], boundary, &mut h)? {
                Status::Complete(Walk::Part(p)) => {
                    let start = at + p.head_len;
                    let end = start + p.len() as usize;
                    parts.push((p.first, p.last, body[start..end.min(body.len())].to_vec()));
                    at = end;
                }
                Status::Complete(Walk::End { len }) => return Ok((parts, at + len)),
                Status::Partial => return Err(PartError::Delimiter),
            }
        }
    }

    #[test]
    fn several_parts_in_any_order_then_the_close_delimiter() {
        let body = b"--B\r\nContent-Type: text/plain\r\nContent-Range: bytes 20-24/100\r\n\r\n01234\r\n\
                     --B\r\nContent-Range: bytes 0-2/100\r\n\r\nabc\r\n--B--\r\n";
        let (parts, end) = walk(body, b"B").unwrap();
        assert_eq!(
            parts,
            [(20, 24, b"01234".to_vec()), (0, 2, b"abc".to_vec())],
            "order as sent"
        );
        assert_eq!(end, body.len());
        // Every prefix of a head, at each step, is Partial (never an error).
        let second = body.windows(5).position(|w| w == b"01234").unwrap() + 5;
        for k in second..second + 39 {
            let mut h = [Header::EMPTY; MAX_PART_FIELDS];
            let r = next_byteranges_part(&body[second..k], b"B", &mut h);
            assert!(matches!(r, Ok(Status::Partial)), "prefix {k}: {r:?}");
        }
    }

    #[test]
    fn a_merged_part_and_a_preamble_of_empty_lines() {
        // A server that merges 0-2 and 5-7 into one part 0-7 (the caller checks what it asked).
        let body = b"\r\n\r\n--B\r\nContent-Range: bytes 0-7/8\r\n\r\nabcdefgh\r\n--B--";
        let (parts, end) = walk(body, b"B").unwrap();
        assert_eq!(parts, [(0, 7, b"abcdefgh".to_vec())]);
        assert_eq!(end, body.len(), "a close delimiter without its line end ends the body");
    }

    #[test]
    fn bare_lf_padding_and_an_epilogue() {
        let body = b"--B \nContent-Range: bytes 3-3/9\n\nX\n--B--\t\nepilogue, ignored\r\n";
        let (parts, end) = walk(body, b"B").unwrap();
        assert_eq!(parts, [(3, 3, b"X".to_vec())]);
        assert_eq!(&body[end..], b"epilogue, ignored\r\n");
    }

    #[test]
    fn a_missing_close_delimiter_is_partial_and_a_wrong_length_is_refused() {
        // The body stops after a part: the walk waits for more (the caller's EOF decides).
        let body = b"--B\r\nContent-Range: bytes 0-1/9\r\n\r\nab\r\n";
        let mut h = [Header::EMPTY; MAX_PART_FIELDS];
        let Ok(Status::Complete(Walk::Part(p))) = next_byteranges_part(body, b"B", &mut h) else {
            panic!()
        };
        let rest = &body[p.head_len + 2..];
        let mut h = [Header::EMPTY; MAX_PART_FIELDS];
        assert_eq!(next_byteranges_part(rest, b"B", &mut h), Ok(Status::Partial));
        // A part with more bytes than its Content-Range says: what follows its length is
        // not a delimiter.
        let body = b"--B\r\nContent-Range: bytes 0-1/9\r\n\r\nabcd\r\n--B--\r\n";
        assert_eq!(walk(body, b"B"), Err(PartError::Delimiter));
        // Fewer bytes: the delimiter is taken as bytes, and what follows is no delimiter.
        let body = b"--B\r\nContent-Range: bytes 0-9/20\r\n\r\nab\r\n--B\r\nContent-Range: bytes 12-13/20\r\n\r\nxy\r\n--B--\r\n";
        assert_eq!(walk(body, b"B"), Err(PartError::Delimiter));
        // A close delimiter followed by other text on its line is no delimiter.
        let mut h = [Header::EMPTY; MAX_PART_FIELDS];
        assert_eq!(
            next_byteranges_part(b"\r\n--B--x\r\n", b"B", &mut h),
            Err(PartError::Delimiter)
        );
        let mut h = [Header::EMPTY; MAX_PART_FIELDS];
        assert_eq!(
            next_byteranges_part(b"\r\n--B--x", b"B", &mut h),
            Err(PartError::Delimiter)
        );
    }
}
