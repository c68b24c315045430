//! HTTP/1.1 pieces for ringdl: URL parsing and `Location` resolution, the request
//! head, the response head, field values (`Content-Length`, `Content-Range`,
//! validators), the chunked coding, `Content-Disposition` file names, the parts of a
//! `multipart/byteranges` 206, and the SOCKS5 handshake (RFC 1928, RFC 1929).
//!
//! Everything is a pure function over byte slices: no I/O. Parsers borrow their input
//! and report incomplete input as [`Status::Partial`]. The body-side functions
//! ([`ChunkedDecoder::step`], [`parse_content_range`]) never allocate. Errors are
//! small `Copy` enums, one variant per grammar element.
//!
//! ```
//! use http::{ChunkedDecoder, Framing, Header, Request, Status, Url, parse_head};
//!
//! let url = Url::parse("https://example.com/file.iso").unwrap();
//! let mut out = Vec::new();
//! Request { url: &url, range: None, ranges: &[], user_agent: "ringdl", extra_headers: &[] }
//!     .write_to(&mut out);
//! assert!(out.starts_with(b"GET /file.iso HTTP/1.1\r\nHost: example.com\r\n"));
//!
//! let input = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
//! let mut headers = [Header::EMPTY; 8];
//! let Status::Complete((head_len, response)) = parse_head(input, &mut headers)? else {
//!     unreachable!("the head is complete")
//! };
//! assert_eq!(response.body_framing(false)?, Framing::Chunked);
//!
//! let mut body = &input[head_len..];
//! let mut decoder = ChunkedDecoder::new();
//! let mut data = Vec::new();
//! while !decoder.is_done() {
//!     let step = decoder.step(body)?;
//!     if let Some(range) = step.data {
//!         data.extend_from_slice(&body[range]);
//!     }
//!     body = &body[step.consumed..];
//! }
//! assert_eq!(data, b"abc");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Sources: RFC 9110 (semantics), RFC 9112 (HTTP/1.1), RFC 3986 (URI), RFC 6266 and
//! RFC 8187 (Content-Disposition), RFC 2046 §5.1.1 (multipart).

#![forbid(unsafe_code)]
#![deny(missing_docs, clippy::undocumented_unsafe_blocks)]

mod chunked;
mod conditional;
mod date;
mod disposition;
mod fields;
mod multipart;
mod proxy;
mod request;
mod response;
mod socks5;
mod url;

pub use crate::chunked::{ChunkedDecoder, ChunkedError, MAX_CHUNK_LINE, MAX_CHUNK_SIZE_DIGITS, MAX_TRAILER, Step};
pub use crate::conditional::{Condition, ConditionError, civil_from_days, format_http_date};
pub use crate::date::parse_http_date;
pub use crate::disposition::{content_disposition_filename, sanitize_file_name};
pub use crate::fields::{
    ContentRange, FieldError, Framing, MAX_DECIMAL_DIGITS, RetryAfter, Validator, parse_content_range,
};
pub use crate::multipart::{
    MAX_BOUNDARY, MAX_PART_FIELDS, MAX_PART_HEAD, Part, PartError, Walk, byteranges_boundary, next_byteranges_part,
    parse_byteranges_part,
};
pub use crate::proxy::{
    DEFAULT_PROXY_PORT, ProxyError, ProxyScheme, ProxyUrl, authority, no_proxy_matches, write_connect_request,
    write_proxied_request,
};
pub use crate::request::{ByteRange, MANAGED_FIELDS, Request, RequestError, check_field};
pub use crate::response::{HeadError, Header, MAX_FIELDS, MAX_HEAD, Response, Status, parse_head};
pub use crate::socks5::{
    Socks5Error, Socks5Handshake, Socks5Reply, Socks5Step, Socks5Target, parse_socks5_auth, parse_socks5_method,
    parse_socks5_reply, write_socks5_connect,
};
pub use crate::url::{MAX_URL_LEN, Scheme, SchemeName, Url, UrlError, Userinfo, split_userinfo};

#[cfg(test)]
mod test_rng {
    /// xorshift64*: deterministic randomness for property tests, no dependency.
    pub(crate) struct Rng(pub(crate) u64);

    impl Rng {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        pub(crate) fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        /// Bytes drawn mostly from `alphabet`, sometimes any byte.
        pub(crate) fn bytes(&mut self, len: usize, alphabet: &[u8]) -> Vec<u8> {
            (0..len)
                .map(|_| {
                    if self.below(8) == 0 {
                        self.next() as u8
                    } else {
                        alphabet[self.below(alphabet.len())]
                    }
                })
                .collect()
        }
    }
}
