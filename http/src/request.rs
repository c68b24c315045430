//! The request head: a `GET` with optional `Range` (RFC 9112 §3, RFC 9110 §14.2).

use core::fmt;

use crate::url::{Url, push_decimal};

/// A byte range to request (RFC 9110 §14.1.2 `int-range`), in bytes, inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ByteRange {
    /// `bytes=first-`: from offset `first` to the end.
    From(u64),
    /// `bytes=first-last`: offsets `first..=last`.
    FromTo(u64, u64),
}

impl ByteRange {
    /// The first offset requested.
    pub fn first(self) -> u64 {
        match self {
            ByteRange::From(first) | ByteRange::FromTo(first, _) => first,
        }
    }

    /// The last offset requested, `None` for an open range.
    pub fn last(self) -> Option<u64> {
        match self {
            ByteRange::From(_) => None,
            ByteRange::FromTo(_, last) => Some(last),
        }
    }

    /// Appends the `Range` field value, e.g. `bytes=0-99` or `bytes=100-`.
    pub fn write_to(self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"bytes=");
        push_decimal(out, self.first());
        out.push(b'-');
        if let Some(last) = self.last() {
            push_decimal(out, last);
        }
    }
}

impl fmt::Display for ByteRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ByteRange::From(first) => write!(f, "bytes={first}-"),
            ByteRange::FromTo(first, last) => write!(f, "bytes={first}-{last}"),
        }
    }
}

/// Why [`Request::write_to`] refused to write a request head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestError {
    /// A `FromTo` range whose first offset is past its last (RFC 9110 §14.1.1).
    InvalidRange,
    /// An extra header name that is not a token (RFC 9110 §5.1), or is empty.
    InvalidHeaderName,
    /// A header value (extra or `User-Agent`) holding CR, LF or NUL, or another
    /// control character than HTAB (RFC 9110 §5.5).
    InvalidHeaderValue,
    /// An extra header the writer manages itself ([`MANAGED_FIELDS`]: `Host`, `Range`,
    /// `Accept-Encoding`, framing and connection fields).
    ManagedHeaderName,
}

/// Fields the request writer owns and an extra header may not set: `Host` and `Range`
/// (target and segment), `Accept-Encoding` (kept `identity` so byte offsets mean file
/// offsets), and the framing and connection fields of RFC 9112 §6 and RFC 9110 §7.6
/// (a `GET` here has no body and the connection's reuse is the downloader's).
pub const MANAGED_FIELDS: [&str; 10] = [
    "Host",
    "Range",
    "Accept-Encoding",
    "Content-Length",
    "Transfer-Encoding",
    "Connection",
    "Keep-Alive",
    "TE",
    "Upgrade",
    "Expect",
];

/// Checks one extra header field as [`Request::validate`] does: the name is a token
/// (RFC 9110 §5.1) and not one of [`MANAGED_FIELDS`], the value holds no control
/// character but HTAB (RFC 9110 §5.5: no CR, LF or NUL, so no field can be injected).
///
/// # Errors
/// [`RequestError::InvalidHeaderName`], [`RequestError::ManagedHeaderName`] or
/// [`RequestError::InvalidHeaderValue`].
pub fn check_field(name: &str, value: &str) -> Result<(), RequestError> {
    if name.is_empty() || !name.bytes().all(crate::response::is_tchar) {
        return Err(RequestError::InvalidHeaderName);
    }
    if MANAGED_FIELDS.iter().any(|m| m.eq_ignore_ascii_case(name)) {
        return Err(RequestError::ManagedHeaderName);
    }
    if !is_field_value(value.as_bytes()) {
        return Err(RequestError::InvalidHeaderValue);
    }
    Ok(())
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RequestError::InvalidRange => "invalid range: first byte after last byte",
            RequestError::InvalidHeaderName => "invalid header name",
            RequestError::InvalidHeaderValue => "control character (CR, LF, NUL, ...) in header value",
            RequestError::ManagedHeaderName => "header is written by ringdl itself and cannot be set",
        })
    }
}

impl std::error::Error for RequestError {}

/// A `GET` request for `url`, written as an HTTP/1.1 head (RFC 9112 §3).
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The resource: gives the request target (origin-form) and `Host`.
    pub url: &'a Url,
    /// The `Range` to ask for, if any.
    pub range: Option<ByteRange>,
    /// A byte-range set (RFC 9110 §14.1.2), inclusive `(first, last)` offsets: when not
    /// empty it is the `Range` field, `bytes=a-b,c-d,…` in the order given, in place of
    /// `range`.
    pub ranges: &'a [(u64, u64)],
    /// The `User-Agent` value; omitted when empty.
    pub user_agent: &'a str,
    /// More fields, written after the standard ones, in order. One named `User-Agent`
    /// or `Accept` replaces the standard field; one whose value is empty (after
    /// trimming SP and HTAB) is not written (so `User-Agent` with an empty value sends
    /// none, as curl's `-H 'User-Agent:'`).
    pub extra_headers: &'a [(&'a str, &'a str)],
}

impl Request<'_> {
    /// Appends the request head to `out`:
    ///
    /// ```text
    /// GET /path?query HTTP/1.1\r\n
    /// Host: host[:port]\r\n
    /// User-Agent: ..\r\n
    /// Accept: */*\r\n
    /// Accept-Encoding: identity\r\n
    /// Range: bytes=first-[last]\r\n
    /// Name: value\r\n            (each extra header)
    /// \r\n
    /// ```
    ///
    /// `Accept-Encoding: identity` keeps byte offsets meaningful for `Range`.
    ///
    /// # Errors
    ///
    /// [`RequestError`] when a field would be malformed or could inject another
    /// field ([`Request::validate`]); `out` is then left unchanged.
    pub fn try_write_to(&self, out: &mut Vec<u8>) -> Result<(), RequestError> {
        self.validate()?;
        let replaced = |field: &str| self.extra_headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(field));
        out.extend_from_slice(b"GET ");
        out.extend_from_slice(self.url.path_and_query().as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        self.url.write_host_header(out);
        out.extend_from_slice(b"\r\n");
        if !self.user_agent.is_empty() && !replaced("User-Agent") {
            out.extend_from_slice(b"User-Agent: ");
            out.extend_from_slice(self.user_agent.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if !replaced("Accept") {
            out.extend_from_slice(b"Accept: */*\r\n");
        }
        out.extend_from_slice(b"Accept-Encoding: identity\r\n");
        if !self.ranges.is_empty() {
            out.extend_from_slice(b"Range: bytes=");
            for (k, &(first, last)) in self.ranges.iter().enumerate() {
                if k > 0 {
                    out.push(b',');
                }
                push_decimal(out, first);
                out.push(b'-');
                push_decimal(out, last);
            }
            out.extend_from_slice(b"\r\n");
        } else if let Some(range) = self.range {
            out.extend_from_slice(b"Range: ");
            range.write_to(out);
            out.extend_from_slice(b"\r\n");
        }
        for (name, value) in self.extra_headers {
            let value = value.trim_matches([' ', '\t']);
            if value.is_empty() {
                continue;
            }
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        Ok(())
    }

    /// [`Request::try_write_to`] for requests built by the program itself.
    ///
    /// # Panics
    ///
    /// When [`Request::validate`] fails (a range with first > last, a header name
    /// that is not a token, a control character in a value): a programming error.
    /// Check headers that come from the user with [`Request::validate`] first, or use
    /// [`Request::try_write_to`].
    pub fn write_to(&self, out: &mut Vec<u8>) {
        if let Err(e) = self.try_write_to(out) {
            panic!("invalid request: {e}");
        }
    }

    /// Checks what [`Request::write_to`] checks, without writing: the range, the
    /// `User-Agent` value, and each extra header with [`check_field`].
    ///
    /// # Errors
    ///
    /// As [`Request::write_to`].
    pub fn validate(&self) -> Result<(), RequestError> {
        if let Some(ByteRange::FromTo(first, last)) = self.range
            && first > last
        {
            return Err(RequestError::InvalidRange);
        }
        if self.ranges.iter().any(|&(first, last)| first > last) {
            return Err(RequestError::InvalidRange);
        }
        if !is_field_value(self.user_agent.as_bytes()) {
            return Err(RequestError::InvalidHeaderValue);
        }
        for (name, value) in self.extra_headers {
            check_field(name, value)?;
        }
        Ok(())
    }
}

/// RFC 9110 §5.5: VCHAR, obs-text, SP and HTAB only.
fn is_field_value(value: &[u8]) -> bool {
    value.iter().all(|&b| b == b'\t' || (b >= b' ' && b != 0x7f))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(req: &Request<'_>) -> String {
        let mut out = Vec::new();
        req.write_to(&mut out);
        let mut again = Vec::new();
        req.try_write_to(&mut again).unwrap();
        assert_eq!(out, again);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn writes_plain_get() {
        let url = Url::parse("http://example.com/a?b#c").unwrap();
        let req = Request {
            url: &url,
            range: None,
            ranges: &[],
            user_agent: "ringdl/0.1",
            extra_headers: &[],
        };
        assert_eq!(
            head(&req),
            "GET /a?b HTTP/1.1\r\nHost: example.com\r\nUser-Agent: ringdl/0.1\r\n\
             Accept: */*\r\nAccept-Encoding: identity\r\n\r\n"
        );
    }

    #[test]
    fn writes_range_port_ipv6_and_extras() {
        let url = Url::parse("https://[::1]:8443/").unwrap();
        let req = Request {
            url: &url,
            range: Some(ByteRange::FromTo(0, u64::MAX)),
            ranges: &[],
            user_agent: "",
            extra_headers: &[("If-Range", "\"abc\""), ("X-A", " b\tc ")],
        };
        assert_eq!(
            head(&req),
            "GET / HTTP/1.1\r\nHost: [::1]:8443\r\nAccept: */*\r\nAccept-Encoding: identity\r\n\
             Range: bytes=0-18446744073709551615\r\nIf-Range: \"abc\"\r\nX-A: b\tc\r\n\r\n"
        );
        let req = Request {
            range: Some(ByteRange::From(5_000_000_000)),
            ranges: &[],
            extra_headers: &[],
            ..req
        };
        assert!(head(&req).contains("\r\nRange: bytes=5000000000-\r\n"));
        let req = Request {
            range: Some(ByteRange::FromTo(7, 7)),
            ranges: &[],
            ..req
        };
        assert!(head(&req).contains("\r\nRange: bytes=7-7\r\n"));
    }

    #[test]
    fn extra_headers_replace_user_agent_and_accept_and_empty_ones_drop() {
        let url = Url::parse("http://h/").unwrap();
        let req = Request {
            url: &url,
            range: None,
            ranges: &[],
            user_agent: "ringdl/0.1",
            extra_headers: &[
                ("user-agent", "curl/8"),
                ("Accept", "application/octet-stream"),
                ("Authorization", "Bearer t"),
                ("X-Empty", " \t"),
            ],
        };
        assert_eq!(
            head(&req),
            "GET / HTTP/1.1\r\nHost: h\r\nAccept-Encoding: identity\r\nuser-agent: curl/8\r\n\
             Accept: application/octet-stream\r\nAuthorization: Bearer t\r\n\r\n"
        );
        // An empty User-Agent removes the field altogether.
        let req = Request {
            extra_headers: &[("User-Agent", "")],
            ..req
        };
        assert!(!head(&req).contains("User-Agent"), "{}", head(&req));
        assert!(head(&req).contains("Accept: */*"));
    }

    #[test]
    fn check_field_rejects_managed_and_malformed() {
        assert_eq!(check_field("X-Token", "a b\tc"), Ok(()));
        for name in MANAGED_FIELDS
            .iter()
            .copied()
            .chain(["host", "RANGE", "accept-encoding"])
        {
            assert_eq!(check_field(name, "x"), Err(RequestError::ManagedHeaderName), "{name}");
        }
        for name in ["", "X Y", "X:", "Ä", "a\r\nb"] {
            assert_eq!(check_field(name, "x"), Err(RequestError::InvalidHeaderName), "{name:?}");
        }
        for value in ["a\rb", "a\nb", "a\0b", "\x7f", "\x1b[31m"] {
            assert_eq!(
                check_field("X", value),
                Err(RequestError::InvalidHeaderValue),
                "{value:?}"
            );
        }
    }

    #[test]
    fn byte_range_accessors_and_display() {
        assert_eq!(ByteRange::From(3).first(), 3);
        assert_eq!(ByteRange::From(3).last(), None);
        assert_eq!(ByteRange::FromTo(3, 9).last(), Some(9));
        assert_eq!(ByteRange::From(3).to_string(), "bytes=3-");
        assert_eq!(ByteRange::FromTo(3, 9).to_string(), "bytes=3-9");
    }

    #[test]
    fn rejects_injection_and_bad_ranges() {
        let url = Url::parse("http://h/").unwrap();
        let ok = Request {
            url: &url,
            range: None,
            ranges: &[],
            user_agent: "ua",
            extra_headers: &[],
        };
        let cases: [(Request<'_>, RequestError); 7] = [
            (
                Request {
                    range: Some(ByteRange::FromTo(2, 1)),
                    ranges: &[],
                    ..ok
                },
                RequestError::InvalidRange,
            ),
            (
                Request {
                    user_agent: "a\r\nX: y",
                    ..ok
                },
                RequestError::InvalidHeaderValue,
            ),
            (
                Request {
                    extra_headers: &[("X", "a\nb")],
                    ..ok
                },
                RequestError::InvalidHeaderValue,
            ),
            (
                Request {
                    extra_headers: &[("X", "a\0b")],
                    ..ok
                },
                RequestError::InvalidHeaderValue,
            ),
            (
                Request {
                    extra_headers: &[("X Y", "v")],
                    ..ok
                },
                RequestError::InvalidHeaderName,
            ),
            (
                Request {
                    extra_headers: &[("X:", "v")],
                    ..ok
                },
                RequestError::InvalidHeaderName,
            ),
            (
                Request {
                    extra_headers: &[("", "v")],
                    ..ok
                },
                RequestError::InvalidHeaderName,
            ),
        ];
        for (req, want) in cases {
            let mut out = b"keep".to_vec();
            assert_eq!(req.try_write_to(&mut out), Err(want));
            assert_eq!(out, b"keep");
            assert_eq!(req.validate(), Err(want));
            assert!(!want.to_string().is_empty());
        }
        let caught = std::panic::catch_unwind(|| {
            let url = Url::parse("http://h/").unwrap();
            let req = Request {
                url: &url,
                range: None,
                ranges: &[],
                user_agent: "a\nb",
                extra_headers: &[],
            };
            req.write_to(&mut Vec::new());
        });
        assert!(caught.is_err());
        // Non-ASCII (obs-text) values pass.
        let req = Request {
            user_agent: "\u{e9}",
            ..ok
        };
        assert!(req.validate().is_ok());
    }
}
