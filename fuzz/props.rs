//! The properties every fuzz target asserts, one function per target, shared by the
//! libFuzzer targets (`fuzz/fuzz_targets/*.rs`, nightly) and the corpus replay test
//! (`tests/fuzz_corpus.rs`, stable). A property failure is a panic naming it.
#![allow(dead_code)]

use http::{
    ByteRange, ChunkedDecoder, ChunkedError, ContentRange, Framing, Header, MAX_FIELDS, Request, Status, Url,
    content_disposition_filename, parse_content_range, parse_head, sanitize_file_name,
};

/// A property check over one fuzz input.
pub type Check = fn(&[u8]);

/// Every target: (name = directory under `fuzz/corpus/`, property check).
pub const TARGETS: &[(&str, Check)] = &[
    ("url_parse", url_parse),
    ("location_join", location_join),
    ("response_head", response_head),
    ("content_range", content_range),
    ("chunked", chunked),
    ("disposition", disposition),
    ("ktls_record_type", ktls_record_type),
    ("ktls_records", ktls_records),
    ("request_write", request_write),
];

/// xorshift64*: split points and shapes derived from fuzz bytes.
struct Rng(u64);

impl Rng {
    fn from(seed: &[u8]) -> Rng {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for &b in seed {
            s = (s ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        Rng(s | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn split_line(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, b""),
    }
}

/// A `Url`'s invariants, and Display → parse gives it back.
fn check_url(u: &Url) {
    let s = u.to_string();
    assert_eq!(Url::parse(&s).as_ref(), Ok(u), "Display does not parse back: {s}");
    assert!(!u.host().is_empty(), "empty host: {s}");
    assert_ne!(u.port(), 0, "port 0: {s}");
    let pq = u.path_and_query();
    assert!(pq.starts_with('/'), "path does not start with '/': {s}");
    assert!(
        pq.bytes().all(|b| b > b' ' && b < 0x7f && b != b'#'),
        "non-URI byte in target: {s}"
    );
    let joined = match u.query() {
        Some(q) => format!("{}?{q}", u.path()),
        None => u.path().to_owned(),
    };
    assert_eq!(joined, pq, "path + query != path_and_query");
    assert_eq!(u.join(b"").as_ref(), Ok(u), "join(\"\") is not the base: {s}");
    assert_eq!(u.join(s.as_bytes()).as_ref(), Ok(u), "join(itself) differs: {s}");
    if let Some(name) = u.file_name_decoded() {
        check_file_name(&name);
    }
}

/// `url_parse`: never panics; a parsed URL round-trips through Display.
pub fn url_parse(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(u) = Url::parse(s) {
        check_url(&u);
    }
}

/// `location_join`: first line = base URL (a fixed one when it does not parse), rest =
/// `Location`. A joined URL satisfies every `Url` property.
pub fn location_join(data: &[u8]) {
    let (base, location) = split_line(data);
    let base = std::str::from_utf8(base)
        .ok()
        .and_then(|b| Url::parse(b).ok())
        .unwrap_or_else(|| Url::parse("http://example.com:8080/a/b/c.iso?q=1").unwrap());
    if let Ok(u) = base.join(location) {
        check_url(&u);
        if u.scheme() == base.scheme()
            && u.host() == base.host()
            && u.port() == base.port()
            && !u.path_and_query().starts_with("//")
        {
            assert_eq!(
                base.join(u.path_and_query().as_bytes()).as_ref(),
                Ok(&u),
                "absolute-path join differs"
            );
        }
    }
}

/// `response_head`: consumed ≤ len; every prefix of a head is Partial; re-parsing the
/// head alone gives the same response; the field helpers agree and never panic.
pub fn response_head(data: &[u8]) {
    let mut h = [Header::EMPTY; MAX_FIELDS];
    let full = parse_head(data, &mut h);
    let end = match &full {
        Ok(Status::Complete((n, _))) => *n,
        Ok(Status::Partial) => data.len(),
        Err(_) => return,
    };
    assert!(end <= data.len(), "head length {end} > input {}", data.len());
    for k in 0..end {
        let boundary =
            k < 64 || k + 2 >= end || matches!(data[k - 1], b'\r' | b'\n') || matches!(data[k], b'\r' | b'\n');
        if boundary {
            let mut h2 = [Header::EMPTY; MAX_FIELDS];
            let p = parse_head(&data[..k], &mut h2);
            assert!(
                matches!(p, Ok(Status::Partial)),
                "prefix of {k} bytes of a {full:?} head gave {p:?}"
            );
        }
    }
    let Ok(Status::Complete((n, r))) = full else { return };
    assert!(n > 0);
    let mut h3 = [Header::EMPTY; MAX_FIELDS];
    match parse_head(&data[..n], &mut h3) {
        Ok(Status::Complete((n2, r2))) => assert!(n2 == n && r2 == r, "head alone parses differently"),
        other => panic!("head alone gave {other:?}"),
    }
    assert!((100..=599).contains(&r.code) && r.version <= 1);
    let _ = (r.validator(), r.retry_after(), r.location(), r.is_redirect());
    if let Some(v) = r.validator() {
        let _ = v.if_range_value();
    }
    let cl = r.content_length();
    let chunked = r.is_chunked();
    if let Ok(Some(cr)) = r.content_range() {
        check_content_range(cr);
    }
    assert_eq!(r.body_framing(true), Ok(Framing::NoBody), "HEAD response has a body");
    match r.body_framing(false) {
        Ok(Framing::Chunked) => {
            assert_eq!(chunked, Ok(true));
            assert!(r.header("content-length").is_none(), "chunked with Content-Length");
        }
        Ok(Framing::Length(len)) => assert_eq!(cl, Ok(Some(len))),
        Ok(Framing::Close) => assert_eq!(cl, Ok(None)),
        Ok(Framing::NoBody) => assert!((100..200).contains(&r.code) || matches!(r.code, 204 | 304)),
        Err(_) => {}
    }
}

fn check_content_range(cr: ContentRange) {
    let ContentRange::Bytes { first, last, complete } = cr else {
        return;
    };
    assert!(first <= last, "Content-Range first {first} > last {last}");
    if let Some(c) = complete {
        assert!(last < c, "Content-Range last {last} >= complete {c}");
    }
}

/// `content_range`: bytes 0..16 = the request (`first`, `end` exclusive, big-endian);
/// the rest is the value. A parsed range keeps its invariant and round-trips; when it
/// passes the engine's check (first == requested first, last < end) it lies inside the
/// request and its length and end do not overflow.
pub fn content_range(data: &[u8]) {
    let (req, value) = data.split_at(data.len().min(16));
    let mut r = [0u8; 16];
    r[..req.len()].copy_from_slice(req);
    let pos = u64::from_be_bytes(r[..8].try_into().unwrap());
    let end = u64::from_be_bytes(r[8..].try_into().unwrap());
    let Ok(cr) = parse_content_range(value) else { return };
    check_content_range(cr);
    let text = match cr {
        ContentRange::Bytes {
            first,
            last,
            complete: Some(c),
        } => format!("bytes {first}-{last}/{c}"),
        ContentRange::Bytes {
            first,
            last,
            complete: None,
        } => format!("bytes {first}-{last}/*"),
        ContentRange::Unsatisfied { complete } => format!("bytes */{complete}"),
    };
    assert_eq!(
        parse_content_range(text.as_bytes()),
        Ok(cr),
        "{text} does not parse back"
    );
    if let ContentRange::Bytes { first, last, complete } = cr
        && pos < end
        && first == pos
        && last < end
    {
        assert!(pos <= first && last < end, "range outside the request");
        let n = last - first + 1;
        assert!(n <= end - pos, "range longer than the request");
        let _resp_end = last.checked_add(1).expect("last + 1 overflows");
        if let Some(c) = complete {
            assert!(last < c);
        }
    }
}

/// What decoding produced: the body data, and how it ended.
#[derive(Debug, PartialEq, Eq)]
struct Decoded {
    data: Vec<u8>,
    /// Err: the error; Ok(Some(n)): done after n bytes; Ok(None): wants more input.
    end: Result<Option<usize>, ChunkedError>,
}

/// Feeds `input` in pieces ending at `cuts`, as a reader would: unconsumed bytes stay in
/// the buffer and the next piece is appended. Checks each step's own properties.
fn decode(input: &[u8], cuts: &[usize]) -> Decoded {
    let mut dec = ChunkedDecoder::new();
    let mut data = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut taken = 0; // bytes of input moved into buf
    let mut consumed_total = 0;
    let ends = cuts.iter().copied().chain(std::iter::once(input.len()));
    for cut in ends {
        buf.extend_from_slice(&input[taken..cut]);
        taken = cut;
        loop {
            let step = match dec.step(&buf) {
                Ok(s) => s,
                Err(e) => {
                    assert_eq!(dec.step(b"0\r\n\r\n"), Err(e), "a failed decoder recovered");
                    return Decoded { data, end: Err(e) };
                }
            };
            assert!(
                step.consumed <= buf.len(),
                "consumed {} > len {}",
                step.consumed,
                buf.len()
            );
            if let Some(r) = &step.data {
                assert!(
                    r.start <= r.end && r.end <= step.consumed,
                    "data {r:?} outside consumed {}",
                    step.consumed
                );
                assert!(r.end == step.consumed, "data does not end the step");
                data.extend_from_slice(&buf[r.clone()]);
            }
            assert!(
                step.consumed == buf.len() || step.data.is_some() || step.done,
                "stopped early without data or done"
            );
            assert_eq!(step.done, dec.is_done());
            buf.drain(..step.consumed);
            consumed_total += step.consumed;
            if step.done {
                let again = dec.step(b"0\r\n\r\n").expect("step after done failed");
                assert!(
                    again.consumed == 0 && again.done && again.data.is_none(),
                    "step after done: {again:?}"
                );
                return Decoded {
                    data,
                    end: Ok(Some(consumed_total)),
                };
            }
            if step.consumed == 0 || buf.is_empty() {
                break;
            }
        }
    }
    Decoded { data, end: Ok(None) }
}

/// Split points from the fuzz bytes: sorted offsets into `0..=len`.
fn cuts(rng: &mut Rng, len: usize) -> Vec<usize> {
    let mut c: Vec<usize> = (0..rng.below(8)).map(|_| rng.below(len + 1)).collect();
    if rng.below(4) == 0 {
        c = (1..len).collect(); // byte by byte
    }
    c.sort_unstable();
    c
}

/// A valid chunked encoding of `payload`, shaped by `rng`.
fn encode(rng: &mut Rng, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = payload;
    while !rest.is_empty() {
        let n = 1 + rng.below(rest.len().min(40));
        let hex = format!("{n:x}");
        let zeros = rng.below(16 - hex.len() + 1);
        out.extend(std::iter::repeat_n(b'0', zeros));
        if rng.below(2) == 0 {
            out.extend_from_slice(hex.to_ascii_uppercase().as_bytes());
        } else {
            out.extend_from_slice(hex.as_bytes());
        }
        match rng.below(4) {
            0 => out.extend_from_slice(b";a=b"),
            1 => out.extend_from_slice(b" ;name=\"q\\\"uo;ted\""),
            _ => {}
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&rest[..n]);
        out.extend_from_slice(b"\r\n");
        rest = &rest[n..];
    }
    out.extend_from_slice(b"0");
    if rng.below(3) == 0 {
        out.extend_from_slice(b";last");
    }
    out.extend_from_slice(b"\r\n");
    for _ in 0..rng.below(3) {
        out.extend_from_slice(b"X-Trailer: v\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// `chunked`: bytes 0..8 seed the split points. The input decodes the same in one piece
/// and in pieces; each step keeps consumed ≤ len and data inside what it consumed; a valid
/// encoding of the input decodes back to it, leaving what follows it.
pub fn chunked(data: &[u8]) {
    let (seed, input) = data.split_at(data.len().min(8));
    let mut rng = Rng::from(seed);
    let whole = decode(input, &[]);
    let c = cuts(&mut rng, input.len());
    let split = decode(input, &c);
    assert_eq!(whole, split, "split at {c:?} decodes differently");

    let mut encoded = encode(&mut rng, input);
    let len = encoded.len();
    encoded.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    let c = cuts(&mut rng, encoded.len());
    let expect = Decoded {
        data: input.to_vec(),
        end: Ok(Some(len)),
    };
    assert_eq!(decode(&encoded, &[]), expect, "valid encoding did not decode back");
    assert_eq!(
        decode(&encoded, &c),
        expect,
        "valid encoding split at {c:?} did not decode back"
    );
}

/// A file name fit to create in the output directory.
fn check_file_name(name: &str) {
    assert!(!name.is_empty(), "empty name");
    assert!(name.len() <= 255, "name of {} bytes", name.len());
    assert!(!name.starts_with('.'), "hidden or dot name: {name:?}");
    assert!(!name.contains(['/', '\\', '\0']), "separator or NUL in {name:?}");
    assert!(!name.chars().any(char::is_control), "control char in {name:?}");
    assert_eq!(
        sanitize_file_name(name).as_deref(),
        Some(name),
        "sanitizing is not idempotent"
    );
}

/// `disposition`: every name from `Content-Disposition` or `sanitize_file_name` is safe.
pub fn disposition(data: &[u8]) {
    if let Some(name) = content_disposition_filename(data) {
        check_file_name(&name);
    }
    if let Some(name) = sanitize_file_name(&String::from_utf8_lossy(data)) {
        check_file_name(&name);
    }
}

const HDR: usize = 16; // sizeof(struct cmsghdr), 64-bit Linux
const SOL_TLS: i32 = 282;
const TLS_GET_RECORD_TYPE: i32 = 2;

fn align8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// A cmsg as the kernel's put_cmsg writes it.
fn put_cmsg(out: &mut Vec<u8>, level: i32, typ: i32, data: &[u8]) {
    out.extend_from_slice(&(HDR + data.len()).to_ne_bytes());
    out.extend_from_slice(&level.to_ne_bytes());
    out.extend_from_slice(&typ.to_ne_bytes());
    out.extend_from_slice(data);
    out.resize(align8(out.len()), 0);
}

/// `ktls_record_type`: never panics; `Some(t)` only when the buffer, walked as
/// CMSG_FIRSTHDR / CMSG_NXTHDR do, holds a SOL_TLS / TLS_GET_RECORD_TYPE cmsg whose
/// data lies inside the buffer and starts with `t`, and no earlier well-formed one
/// matches. A kernel-shaped buffer built from the input gives its record type back.
pub fn ktls_record_type(data: &[u8]) {
    if size_of::<usize>() != 8 {
        return;
    }
    let got = ktls::record_type(data);
    // The oracle: walk the chain.
    let mut off = 0;
    let mut want = None;
    while off + HDR <= data.len() {
        let len = usize::from_ne_bytes(data[off..off + 8].try_into().unwrap());
        let level = i32::from_ne_bytes(data[off + 8..off + 12].try_into().unwrap());
        let typ = i32::from_ne_bytes(data[off + 12..off + 16].try_into().unwrap());
        if len < HDR || len > data.len() - off {
            break;
        }
        if level == SOL_TLS && typ == TLS_GET_RECORD_TYPE {
            want = data.get(off + HDR).copied().filter(|_| len > HDR);
            break;
        }
        off += align8(len);
    }
    assert_eq!(got, want, "record_type disagrees with the cmsg walk");

    // Kernel-shaped: unrelated cmsgs from the input, then the record type.
    let mut buf = Vec::new();
    let mut rest = data;
    while let [level, typ, n, tail @ ..] = rest {
        let n = usize::from(*n % 16).min(tail.len());
        let (level, typ) = (i32::from(*level), i32::from(*typ % 4));
        put_cmsg(&mut buf, level, typ, &tail[..n]);
        rest = &tail[n..];
        if buf.len() > 256 {
            break;
        }
    }
    let t = data.first().copied().unwrap_or(23);
    put_cmsg(&mut buf, SOL_TLS, TLS_GET_RECORD_TYPE, &[t]);
    assert_eq!(
        ktls::record_type(&buf),
        Some(t),
        "kernel-shaped buffer lost its record type"
    );
    assert_eq!(
        ktls::record_type(&ktls::record_type_cmsg(t)),
        None,
        "a SET cmsg read as GET"
    );
}

/// `ktls_records`: byte 0 = content type, rest = payload. `NonData::decode` and
/// `handshake_messages` never panic; messages tile the payload, an incomplete tail last.
pub fn ktls_records(data: &[u8]) {
    let Some((&typ, payload)) = data.split_first() else {
        return;
    };
    match ktls::NonData::decode(typ, payload) {
        Ok(ktls::NonData::Alert { level, description }) => {
            assert!(typ == 21 && payload == [level, description]);
        }
        Ok(ktls::NonData::Handshake(p)) => assert!(typ == 22 && p == payload),
        Err(_) => assert!(typ != 22),
    }
    let mut covered = 0;
    let mut ended = false;
    for m in ktls::handshake_messages(payload) {
        assert!(!ended, "a message after the incomplete tail");
        match m {
            Ok(msg) => {
                assert_eq!(payload[covered], msg.typ);
                covered += 4 + msg.body.len();
                assert_eq!(&payload[covered - msg.body.len()..covered], msg.body);
            }
            Err(tail) => {
                assert_eq!(tail, &payload[covered..]);
                assert!(!tail.is_empty());
                covered += tail.len();
                ended = true;
            }
        }
    }
    assert_eq!(covered, payload.len(), "messages do not tile the payload");
}

/// `request_write`: line 1 = URL, line 2 = User-Agent, line 3 = range (`a-b`, `a-`),
/// further lines `name:value` extra headers. A request that validates writes a head whose
/// lines all end in CRLF and which the project's own head parser reads back field for
/// field; one that does not leaves the output unchanged.
pub fn request_write(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut lines = text.split('\n');
    let Some(Ok(url)) = lines.next().map(Url::parse) else {
        return;
    };
    let user_agent = lines.next().unwrap_or("");
    let range = lines.next().and_then(|r| {
        let (a, b) = r.split_once('-')?;
        let a = a.parse().ok()?;
        Some(if b.is_empty() {
            ByteRange::From(a)
        } else {
            ByteRange::FromTo(a, b.parse().ok()?)
        })
    });
    let extra: Vec<(&str, &str)> = lines.filter_map(|l| l.split_once(':')).collect();
    let req = Request {
        url: &url,
        range,
        user_agent,
        extra_headers: &extra,
    };
    let mut out = b"keep".to_vec();
    let Ok(()) = req.try_write_to(&mut out) else {
        assert!(req.validate().is_err());
        assert_eq!(out, b"keep", "a refused request wrote something");
        return;
    };
    let head = &out[4..];
    assert!(head.ends_with(b"\r\n\r\n"));
    for (i, &b) in head.iter().enumerate() {
        if b == b'\n' {
            assert!(i > 0 && head[i - 1] == b'\r', "bare LF at {i}");
        }
        if b == b'\r' {
            assert_eq!(head.get(i + 1), Some(&b'\n'), "bare CR at {i}");
        }
    }
    let line_end = head.windows(2).position(|w| w == b"\r\n").unwrap();
    let request_line = format!("GET {} HTTP/1.1", url.path_and_query());
    assert_eq!(&head[..line_end], request_line.as_bytes());
    // The fields, read back with the response parser behind a status line.
    let mut as_response = b"HTTP/1.1 200 OK".to_vec();
    as_response.extend_from_slice(&head[line_end..]);
    let mut h = [Header::EMPTY; MAX_FIELDS];
    let Ok(Status::Complete((n, r))) = parse_head(&as_response, &mut h) else {
        if extra.len() + 5 > MAX_FIELDS {
            return;
        }
        panic!("written head does not parse: {:?}", String::from_utf8_lossy(head));
    };
    assert_eq!(n, as_response.len());
    assert_eq!(r.header("host"), Some(url.host_header().as_bytes()));
    let trim = |s: &str| s.trim_matches([' ', '\t']).to_owned();
    let ua = r.header("user-agent").map(|v| String::from_utf8_lossy(v).into_owned());
    assert_eq!(ua, (!user_agent.is_empty()).then(|| trim(user_agent)));
    let fixed = 3 + usize::from(!user_agent.is_empty()) + usize::from(range.is_some());
    assert_eq!(r.headers.len(), fixed + extra.len());
    for (field, (name, value)) in r.headers[fixed..].iter().zip(&extra) {
        assert_eq!(field.name, *name);
        assert_eq!(field.value, trim(value).as_bytes());
    }
    if let Some(range) = range {
        let want = format!(
            "bytes={}-{}",
            range.first(),
            range.last().map(|l| l.to_string()).unwrap_or_default()
        );
        assert_eq!(r.header("range"), Some(want.as_bytes()));
    }
}
