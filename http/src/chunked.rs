//! The chunked transfer coding (RFC 9112 §7.1), decoded in place.

use core::fmt;
use core::ops::Range;

/// Most hex digits in a chunk-size: 16 digits span `u64`, so no overflow is possible.
pub const MAX_CHUNK_SIZE_DIGITS: u8 = 16;
/// Longest chunk extension (after the size, before CRLF), or trailer field line, in
/// bytes.
pub const MAX_CHUNK_LINE: u32 = 4 * 1024;
/// Largest trailer section, in bytes, CRLFs included.
pub const MAX_TRAILER: u32 = 64 * 1024;

/// Why a chunked body was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChunkedError {
    /// A chunk-size that is empty or has a non-hex byte.
    BadSize,
    /// A chunk-size of more than [`MAX_CHUNK_SIZE_DIGITS`] hex digits.
    SizeOverflow,
    /// A malformed chunk extension (no `;`, control byte, unterminated quote).
    BadExtension,
    /// A chunk extension longer than [`MAX_CHUNK_LINE`] bytes.
    ExtensionTooLong,
    /// CRLF expected (after the size line or the chunk data, or ending a trailer
    /// line) and something else found, bare LF included.
    MissingCrlf,
    /// A trailer line starting with whitespace, or holding a control byte.
    BadTrailer,
    /// A trailer field line longer than [`MAX_CHUNK_LINE`] bytes.
    TrailerLineTooLong,
    /// A trailer section longer than [`MAX_TRAILER`] bytes.
    TrailerTooLong,
}

impl fmt::Display for ChunkedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChunkedError::BadSize => "invalid chunk size",
            ChunkedError::SizeOverflow => "chunk size too large",
            ChunkedError::BadExtension => "invalid chunk extension",
            ChunkedError::ExtensionTooLong => "chunk extension too long",
            ChunkedError::MissingCrlf => "missing crlf in chunked body",
            ChunkedError::BadTrailer => "invalid trailer field",
            ChunkedError::TrailerLineTooLong => "trailer field too long",
            ChunkedError::TrailerTooLong => "trailer section too long",
        })
    }
}

impl std::error::Error for ChunkedError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Quote {
    Out,
    In,
    Escape,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Reading chunk-size hex digits.
    Size { size: u64, digits: u8 },
    /// BWS after the size, before `;` or CR.
    SizeSpace { size: u64, len: u32 },
    /// Inside chunk extensions, until CR.
    Extension { size: u64, len: u32, quote: Quote },
    /// CR of the size line seen; LF expected.
    SizeLf { size: u64 },
    /// Inside chunk-data. INVARIANT: remaining > 0.
    Data { remaining: u64 },
    /// After chunk-data: CR expected.
    DataCr,
    /// After chunk-data and CR: LF expected.
    DataLf,
    /// At the start of a trailer line, or of the final CRLF.
    TrailerStart { total: u32 },
    /// Inside a trailer field line.
    TrailerLine { len: u32, total: u32 },
    /// CR seen in the trailer section; LF expected. `last` when the line was empty.
    TrailerLf { total: u32, last: bool },
    /// The final CRLF was consumed.
    Done,
    /// An error was returned; it is returned again.
    Failed(ChunkedError),
}

/// A state machine over a chunked body (RFC 9112 §7.1) that survives arbitrary
/// input splits.
///
/// ```text
/// chunked-body = *chunk last-chunk trailer-section CRLF
/// chunk        = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
/// last-chunk   = 1*("0") [ chunk-ext ] CRLF
/// ```
///
/// [`ChunkedDecoder::step`] never copies: it reports which bytes of its input are
/// body data. Input may be split anywhere. Chunk extensions are checked for shape
/// and ignored; trailer fields are checked for shape and ignored. Line ends must be
/// CRLF here (no bare LF): framing inside the body is where lenient parsers
/// disagree and smuggling lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkedDecoder {
    state: State,
}

/// What one [`ChunkedDecoder::step`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// Bytes of the input consumed, `data` included. The rest (from `consumed`)
    /// goes to the next call. Less than the input length only when `data` is
    /// `Some` or `done` is set.
    pub consumed: usize,
    /// The range of the input that is body data, when the step stopped at some.
    pub data: Option<Range<usize>>,
    /// Whether the body ended: the last chunk and trailer section were consumed.
    pub done: bool,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder::new()
    }
}

fn is_ctl(b: u8) -> bool {
    (b < b' ' && b != b'\t') || b == 0x7f
}

impl ChunkedDecoder {
    /// A decoder at the start of a chunked body.
    pub const fn new() -> Self {
        ChunkedDecoder {
            state: State::Size { size: 0, digits: 0 },
        }
    }

    /// Whether the whole chunked body (trailer section included) was consumed.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Bytes of chunk-data left in the current chunk, 0 when between chunks: lets a
    /// caller read exactly that much straight into place.
    pub fn data_remaining(&self) -> u64 {
        match self.state {
            State::Data { remaining } => remaining,
            _ => 0,
        }
    }

    /// Advances over `input`, stopping after the first run of body data.
    ///
    /// Returns how many bytes were consumed and, when it stopped at body data, the
    /// range of `input` holding it (`consumed` includes it). Call again with
    /// `&input[consumed..]` (plus any further input). Makes progress on any
    /// non-empty input until done; after done, consumes nothing: bytes after the
    /// final CRLF belong to whatever follows the body.
    ///
    /// # Errors
    ///
    /// A [`ChunkedError`] naming the malformed element. The decoder is then spent:
    /// every later call returns the same error.
    pub fn step(&mut self, input: &[u8]) -> Result<Step, ChunkedError> {
        let mut pos = 0;
        while pos < input.len() {
            let b = input[pos];
            let next = match self.state {
                State::Done => break,
                State::Failed(e) => return Err(e),
                State::Data { remaining } => {
                    let available = (input.len() - pos) as u64;
                    let n = remaining.min(available);
                    // n <= available, which came from a usize.
                    let end = pos + n as usize;
                    self.state = if n == remaining {
                        State::DataCr
                    } else {
                        State::Data {
                            remaining: remaining - n,
                        }
                    };
                    return Ok(Step {
                        consumed: end,
                        data: Some(pos..end),
                        done: false,
                    });
                }
                state => Self::byte(state, b),
            };
            match next {
                Ok(state) => self.state = state,
                Err(e) => {
                    self.state = State::Failed(e);
                    return Err(e);
                }
            }
            pos += 1;
        }
        if let State::Failed(e) = self.state {
            return Err(e);
        }
        Ok(Step {
            consumed: pos,
            data: None,
            done: self.state == State::Done,
        })
    }

    /// The state after framing byte `b` in `state` (not Data, Done or Failed).
    fn byte(state: State, b: u8) -> Result<State, ChunkedError> {
        use ChunkedError::*;
        Ok(match state {
            State::Size { size, digits } => match b {
                b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                    if digits == MAX_CHUNK_SIZE_DIGITS {
                        return Err(SizeOverflow);
                    }
                    let value = match b {
                        b'0'..=b'9' => b - b'0',
                        b'a'..=b'f' => b - b'a' + 10,
                        _ => b - b'A' + 10,
                    };
                    // 16 hex digits fit u64: shifting left by 4 loses nothing.
                    State::Size {
                        size: size << 4 | u64::from(value),
                        digits: digits + 1,
                    }
                }
                _ if digits == 0 => return Err(BadSize),
                b' ' | b'\t' => State::SizeSpace { size, len: 1 },
                b';' => State::Extension {
                    size,
                    len: 1,
                    quote: Quote::Out,
                },
                b'\r' => State::SizeLf { size },
                b'\n' => return Err(MissingCrlf),
                _ => return Err(BadSize),
            },
            State::SizeSpace { size, len } => match b {
                _ if len >= MAX_CHUNK_LINE => return Err(ExtensionTooLong),
                b' ' | b'\t' => State::SizeSpace { size, len: len + 1 },
                b';' => State::Extension {
                    size,
                    len: len + 1,
                    quote: Quote::Out,
                },
                b'\r' => State::SizeLf { size },
                b'\n' => return Err(MissingCrlf),
                _ => return Err(BadExtension),
            },
            State::Extension { size, len, quote } => {
                let quote = match (quote, b) {
                    (Quote::Out, b'\r') => return Ok(State::SizeLf { size }),
                    (Quote::Out, b'\n') => return Err(MissingCrlf),
                    (_, b'\r' | b'\n') => return Err(BadExtension),
                    _ if is_ctl(b) => return Err(BadExtension),
                    _ if len >= MAX_CHUNK_LINE => return Err(ExtensionTooLong),
                    (Quote::Out, b'"') => Quote::In,
                    (Quote::Out, _) => Quote::Out,
                    (Quote::In, b'\\') => Quote::Escape,
                    (Quote::In, b'"') => Quote::Out,
                    (Quote::In, _) | (Quote::Escape, _) => Quote::In,
                };
                State::Extension {
                    size,
                    len: len + 1,
                    quote,
                }
            }
            State::SizeLf { size } => match b {
                b'\n' if size == 0 => State::TrailerStart { total: 0 },
                b'\n' => State::Data { remaining: size },
                _ => return Err(MissingCrlf),
            },
            State::DataCr => match b {
                b'\r' => State::DataLf,
                _ => return Err(MissingCrlf),
            },
            State::DataLf => match b {
                b'\n' => State::Size { size: 0, digits: 0 },
                _ => return Err(MissingCrlf),
            },
            State::TrailerStart { total } => {
                let total = trailer_total(total)?;
                match b {
                    b'\r' => State::TrailerLf { total, last: true },
                    b'\n' => return Err(MissingCrlf),
                    b' ' | b'\t' => return Err(BadTrailer),
                    _ if is_ctl(b) => return Err(BadTrailer),
                    _ => State::TrailerLine { len: 1, total },
                }
            }
            State::TrailerLine { len, total } => {
                let total = trailer_total(total)?;
                match b {
                    b'\r' => State::TrailerLf { total, last: false },
                    b'\n' => return Err(MissingCrlf),
                    _ if is_ctl(b) => return Err(BadTrailer),
                    _ if len >= MAX_CHUNK_LINE => return Err(TrailerLineTooLong),
                    _ => State::TrailerLine { len: len + 1, total },
                }
            }
            State::TrailerLf { total, last } => match b {
                b'\n' if last => State::Done,
                b'\n' => State::TrailerStart {
                    total: trailer_total(total)?,
                },
                _ => return Err(MissingCrlf),
            },
            State::Data { .. } | State::Done | State::Failed(_) => state,
        })
    }
}

fn trailer_total(total: u32) -> Result<u32, ChunkedError> {
    if total >= MAX_TRAILER {
        return Err(ChunkedError::TrailerTooLong);
    }
    Ok(total + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    /// Decodes `input` fed in pieces ending at `cuts` (sorted offsets); returns the
    /// data and how many bytes were consumed in total.
    fn decode_split(input: &[u8], cuts: &[usize]) -> Result<(Vec<u8>, usize), ChunkedError> {
        let mut dec = ChunkedDecoder::new();
        let mut out = Vec::new();
        let mut start = 0; // first byte not yet consumed
        let mut ends: Vec<usize> = cuts.to_vec();
        ends.push(input.len());
        for end in ends {
            let end = end.max(start);
            // Feed input[start..end] until it is all consumed or done.
            loop {
                let chunk = &input[start..end];
                let step = dec.step(chunk)?;
                assert!(step.consumed <= chunk.len());
                if let Some(r) = &step.data {
                    assert!(r.start < r.end && r.end == step.consumed, "{r:?} {step:?}");
                    out.extend_from_slice(&chunk[r.clone()]);
                }
                assert_eq!(step.done, dec.is_done());
                start += step.consumed;
                if step.done {
                    return Ok((out, start));
                }
                if start == end {
                    break;
                }
                assert!(step.consumed > 0 || chunk.is_empty(), "no progress");
            }
        }
        Ok((out, start))
    }

    fn decode(input: &[u8]) -> Result<(Vec<u8>, usize), ChunkedError> {
        decode_split(input, &[])
    }

    fn decode_done(input: &[u8]) -> Vec<u8> {
        let (out, n) = decode(input).unwrap();
        assert_eq!(n, input.len(), "all consumed");
        out
    }

    fn error_of(input: &[u8]) -> ChunkedError {
        let mut dec = ChunkedDecoder::new();
        let mut rest = input;
        loop {
            match dec.step(rest) {
                Err(e) => {
                    // Sticky.
                    assert_eq!(dec.step(b"0\r\n\r\n"), Err(e));
                    assert_eq!(dec.step(b""), Err(e));
                    return e;
                }
                Ok(step) => {
                    assert!(!step.done, "unexpectedly done");
                    assert!(step.consumed > 0, "no error and no progress");
                    rest = &rest[step.consumed..];
                }
            }
        }
    }

    #[test]
    fn decodes_simple_body() {
        let body = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
        assert_eq!(decode_done(body), b"hello world");
        let body = b"0\r\n\r\n";
        assert_eq!(decode_done(body), b"");
    }

    #[test]
    fn step_reports_ranges_into_input() {
        let mut dec = ChunkedDecoder::new();
        let input = b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\nNEXT";
        let s = dec.step(input).unwrap();
        assert_eq!(
            s,
            Step {
                consumed: 6,
                data: Some(3..6),
                done: false
            }
        );
        assert_eq!(dec.data_remaining(), 0);
        let rest = &input[6..];
        let s = dec.step(rest).unwrap();
        assert_eq!(
            s,
            Step {
                consumed: 7,
                data: Some(5..7),
                done: false
            }
        );
        assert_eq!(&rest[5..7], b"de");
        let rest = &rest[7..];
        let s = dec.step(rest).unwrap();
        assert_eq!(
            s,
            Step {
                consumed: 7,
                data: None,
                done: true
            }
        );
        assert_eq!(&rest[7..], b"NEXT");
        assert!(dec.is_done());
        // Done consumes nothing more.
        assert_eq!(
            dec.step(b"NEXT").unwrap(),
            Step {
                consumed: 0,
                data: None,
                done: true
            }
        );
        assert_eq!(
            dec.step(b"").unwrap(),
            Step {
                consumed: 0,
                data: None,
                done: true
            }
        );
    }

    #[test]
    fn data_remaining_tracks_partial_chunk() {
        let mut dec = ChunkedDecoder::default();
        let s = dec.step(b"a\r\n1234").unwrap();
        assert_eq!(s.data, Some(3..7));
        assert_eq!(dec.data_remaining(), 6);
        let s = dec.step(b"567890\r\n").unwrap();
        assert_eq!(s.data, Some(0..6));
        assert_eq!(dec.data_remaining(), 0);
        assert_eq!(
            dec.step(b"").unwrap(),
            Step {
                consumed: 0,
                data: None,
                done: false
            }
        );
    }

    #[test]
    fn size_forms() {
        assert_eq!(decode_done(b"A\r\n0123456789\r\n0\r\n\r\n"), b"0123456789");
        assert_eq!(decode_done(b"0000a\r\n0123456789\r\n000\r\n\r\n"), b"0123456789");
        assert_eq!(decode_done(b"1 \t \r\nx\r\n0\r\n\r\n"), b"x");
        // 16 digits accepted: the largest size parses (the body would be huge).
        let mut dec = ChunkedDecoder::new();
        let s = dec.step(b"ffffffffffffffff\r\nab").unwrap();
        assert_eq!(s.data, Some(18..20));
        assert_eq!(dec.data_remaining(), u64::MAX - 2);
        let mut dec = ChunkedDecoder::new();
        dec.step(b"0000000000000001\r\n").unwrap();
        assert_eq!(dec.data_remaining(), 1);
    }

    #[test]
    fn extensions_ignored() {
        let body = b"3;name=value;flag\r\nabc\r\n\
                     2 ; q=\"quoted; \\\"with\\\" stuff\"\r\nde\r\n\
                     0;last=1\r\n\r\n";
        assert_eq!(decode_done(body), b"abcde");
        let long = format!("1;{}\r\nx\r\n0\r\n\r\n", "e".repeat(MAX_CHUNK_LINE as usize - 1));
        assert_eq!(decode_done(long.as_bytes()), b"x");
    }

    #[test]
    fn trailers_ignored() {
        let body = b"3\r\nabc\r\n0\r\nExpires: never\r\nX-Sum: 1\r\n\r\n";
        assert_eq!(decode_done(body), b"abc");
        let long = format!("0\r\nX: {}\r\n\r\n", "v".repeat(MAX_CHUNK_LINE as usize - 3));
        assert_eq!(decode_done(long.as_bytes()), b"");
        // Many lines totalling close to the limit.
        let line = format!("X: {}\r\n", "v".repeat(1000));
        let n = (MAX_TRAILER as usize - 2) / line.len();
        let body = format!("0\r\n{}\r\n", line.repeat(n));
        assert_eq!(decode_done(body.as_bytes()), b"");
    }

    #[test]
    fn errors() {
        use ChunkedError::*;
        let cases: &[(&[u8], ChunkedError)] = &[
            (b"\r\n", BadSize),
            (b";ext\r\n", BadSize),
            (b" 1\r\n", BadSize),
            (b"g\r\n", BadSize),
            (b"-1\r\n", BadSize),
            (b"1x\r\n", BadSize),
            (b"0x1\r\n", BadSize),
            (b"1 2\r\n", BadExtension),
            (b"1 x\r\n", BadExtension),
            (b"11111111111111111\r\n", SizeOverflow),
            (b"00000000000000000\r\n", SizeOverflow),
            (b"1;a\x01\r\n", BadExtension),
            (b"1;a=\"unterminated\r\n", BadExtension),
            (b"1;a=\"x\\\r\n", BadExtension),
            (b"1;a=\"\0\"\r\n", BadExtension),
            (b"1\n", MissingCrlf),
            (b"1;a\n", MissingCrlf),
            (b"1 \n", MissingCrlf),
            (b"1\rx", MissingCrlf),
            (b"1\r\nxy", MissingCrlf),
            (b"1\r\nx\ry", MissingCrlf),
            (b"1\r\nx\n", MissingCrlf),
            (b"0\r\n\n", MissingCrlf),
            (b"0\r\nA: b\n", MissingCrlf),
            (b"0\r\nA: b\rx", MissingCrlf),
            (b"0\r\n\rx", MissingCrlf),
            (b"0\r\n folded\r\n", BadTrailer),
            (b"0\r\n\tfolded\r\n", BadTrailer),
            (b"0\r\nA: \0\r\n", BadTrailer),
            (b"0\r\n\x01\r\n", BadTrailer),
        ];
        for (input, want) in cases {
            assert_eq!(error_of(input), *want, "{}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn line_limits() {
        use ChunkedError::*;
        let ext = format!("1;{}", "e".repeat(MAX_CHUNK_LINE as usize));
        assert_eq!(error_of(ext.as_bytes()), ExtensionTooLong);
        let ws = format!("1{}", " ".repeat(MAX_CHUNK_LINE as usize + 1));
        assert_eq!(error_of(ws.as_bytes()), ExtensionTooLong);
        let quoted = format!("1;a=\"{}", "q".repeat(MAX_CHUNK_LINE as usize));
        assert_eq!(error_of(quoted.as_bytes()), ExtensionTooLong);
        let trailer = format!("0\r\nX: {}", "v".repeat(MAX_CHUNK_LINE as usize));
        assert_eq!(error_of(trailer.as_bytes()), TrailerLineTooLong);
        let line = format!("X: {}\r\n", "v".repeat(1000));
        let body = format!("0\r\n{}", line.repeat(MAX_TRAILER as usize / line.len() + 1));
        assert_eq!(error_of(body.as_bytes()), TrailerTooLong);
    }

    #[test]
    fn error_messages_lowercase() {
        use ChunkedError::*;
        for e in [
            BadSize,
            SizeOverflow,
            BadExtension,
            ExtensionTooLong,
            MissingCrlf,
            BadTrailer,
            TrailerLineTooLong,
            TrailerTooLong,
        ] {
            let m = e.to_string();
            assert!(m.starts_with(|c: char| c.is_ascii_lowercase()), "{m}");
        }
    }

    /// Encodes `data` as chunks of random sizes, with random extensions, upper or
    /// lower case hex, leading zeros and trailers.
    fn encode(rng: &mut Rng, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut rest = data;
        loop {
            let n = if rest.is_empty() {
                0
            } else {
                1 + rng.below(rest.len().min(300))
            };
            let zeros = "0".repeat(rng.below(3));
            if rng.below(2) == 0 {
                out.extend_from_slice(format!("{zeros}{n:x}").as_bytes());
            } else {
                out.extend_from_slice(format!("{zeros}{n:X}").as_bytes());
            }
            match rng.below(4) {
                0 => out.extend_from_slice(b";a=b"),
                1 => out.extend_from_slice(b" ; q=\"x;\\\"y\" ;flag"),
                _ => {}
            }
            out.extend_from_slice(b"\r\n");
            if n == 0 {
                break;
            }
            out.extend_from_slice(&rest[..n]);
            out.extend_from_slice(b"\r\n");
            rest = &rest[n..];
        }
        for i in 0..rng.below(3) {
            out.extend_from_slice(format!("X-Trailer-{i}: v{i}\r\n").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out
    }

    /// Property: decoding any split of an encoded body equals decoding it whole
    /// equals the original data, and consumes exactly the chunked body.
    #[test]
    fn property_random_splits() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for case in 0..300 {
            let len = match case % 4 {
                0 => rng.below(8),
                1 => rng.below(64),
                _ => rng.below(2000),
            };
            let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let mut encoded = encode(&mut rng, &data);
            let body_len = encoded.len();
            encoded.extend_from_slice(b"HTTP/1.1 200 OK\r\n"); // what follows the body
            let (whole, n) = decode(&encoded).unwrap();
            assert_eq!(whole, data);
            assert_eq!(n, body_len);
            for _ in 0..20 {
                let mut cuts: Vec<usize> = (0..rng.below(12)).map(|_| rng.below(encoded.len() + 1)).collect();
                cuts.sort_unstable();
                let (split, n) = decode_split(&encoded, &cuts).unwrap();
                assert_eq!(split, data, "case {case} cuts {cuts:?}");
                assert_eq!(n, body_len);
            }
        }
    }

    /// Every single cut and every byte-at-a-time feed of a small body with all
    /// features.
    #[test]
    fn property_every_split_point() {
        let body: &[u8] = b"4;a=\"b;\\\"c\"\r\nwiki\r\n05 \t;x\r\npedia\r\n\
                            E\r\n in\r\n\r\nchunks.\r\n0;end\r\nT: 1\r\nU: 2\r\n\r\n";
        let want = b"wikipedia in\r\n\r\nchunks.";
        for i in 0..=body.len() {
            for j in i..=body.len() {
                let (out, n) = decode_split(body, &[i, j]).unwrap();
                assert_eq!(out, want, "cuts {i} {j}");
                assert_eq!(n, body.len());
            }
        }
        let every: Vec<usize> = (0..=body.len()).collect();
        assert_eq!(decode_split(body, &every).unwrap().0, want);
    }

    /// The line limits are [`MAX_CHUNK_LINE`] bytes, not less, and they count the
    /// whitespace after the size too (mutation testing found both untested).
    #[test]
    fn chunk_line_limits_are_exact() {
        let ext = "x".repeat(2000);
        assert_eq!(decode_done(format!("1;{ext}\r\na\r\n0\r\n\r\n").as_bytes()), b"a");
        let spaces = " ".repeat(2000);
        assert_eq!(decode_done(format!("1{spaces}\r\na\r\n0\r\n\r\n").as_bytes()), b"a");
        // Whitespace, then `;`: the `;` counts one more byte of the line.
        let m = MAX_CHUNK_LINE as usize;
        let ok = format!("1 ;{}\r\na\r\n0\r\n\r\n", "x".repeat(m - 2));
        assert_eq!(decode_done(ok.as_bytes()), b"a");
        let long = format!("1 ;{}\r\na\r\n0\r\n\r\n", "x".repeat(m - 1));
        assert_eq!(error_of(long.as_bytes()), ChunkedError::ExtensionTooLong);
        let spaces = " ".repeat(MAX_CHUNK_LINE as usize + 10);
        assert_eq!(
            error_of(format!("1{spaces}\r\na\r\n0\r\n\r\n").as_bytes()),
            ChunkedError::ExtensionTooLong
        );
    }
}
