//! The properties every fuzz target asserts, one function per target, shared by the
//! libFuzzer targets (`fuzz/fuzz_targets/*.rs`, nightly) and the corpus replay test
//! (`tests/fuzz_corpus.rs`, stable). A property failure is a panic naming it.
#![allow(dead_code)]

use std::collections::VecDeque;

use http::{
    ByteRange, ChunkedDecoder, ChunkedError, ContentRange, Framing, Header, MAX_BOUNDARY, MAX_FIELDS, MAX_PART_FIELDS,
    ProxyUrl, Request, Socks5Handshake, Socks5Step, Socks5Target, Status, Url, Walk, byteranges_boundary,
    content_disposition_filename, next_byteranges_part, no_proxy_matches, parse_byteranges_part, parse_content_range,
    parse_head, sanitize_file_name,
};
use ringdl::engine::blocks::WriteBlock;
use ringdl::engine::place::{Blocks, Delimiter, Fed, PlaceError, Placer, content_range_fits};

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
    ("compaction", compaction),
    ("scheduler", scheduler),
    ("records", records),
    ("multipart", multipart),
    ("proxy_url", proxy_url),
    ("no_proxy", no_proxy),
    ("socks5_reply", socks5_reply),
    ("signature_sshsig", signature_sshsig),
    ("signature_signify", signature_signify),
    ("signature_minisign", signature_minisign),
    ("signature_keys", signature_keys),
    ("input_list", input_list),
    ("zsync_control", zsync_control),
    ("zck_header", zck_header),
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
    // Every prefix, each one: O(n²) in the head's length, affordable at fuzz sizes.
    for k in 0..end {
        let mut h2 = [Header::EMPTY; MAX_FIELDS];
        let p = parse_head(&data[..k], &mut h2);
        assert!(
            matches!(p, Ok(Status::Partial)),
            "prefix of {k} bytes of a {full:?} head gave {p:?}"
        );
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
/// passes the engine's own check ([`content_range_fits`], called, not restated) it lies
/// inside the request and its length and end do not overflow.
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
        && content_range_fits(first, last, pos, end)
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
        ranges: &[],
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
    // An extra field named User-Agent or Accept replaces the standard one; one whose value
    // is empty is not sent (`-H 'Name:'` removes a field, as curl's).
    let replaced = |f: &str| extra.iter().any(|(n, _)| n.eq_ignore_ascii_case(f));
    let sent: Vec<&(&str, &str)> = extra.iter().filter(|(_, v)| !trim(v).is_empty()).collect();
    let standard_ua = !user_agent.is_empty() && !replaced("User-Agent");
    let ua = r.header("user-agent").map(|v| String::from_utf8_lossy(v).into_owned());
    let own_ua = sent.iter().find(|(n, _)| n.eq_ignore_ascii_case("user-agent"));
    assert_eq!(
        ua,
        if standard_ua {
            Some(trim(user_agent))
        } else {
            own_ua.map(|(_, v)| trim(v))
        }
    );
    let fixed = 2 + usize::from(standard_ua) + usize::from(!replaced("Accept")) + usize::from(range.is_some());
    assert_eq!(r.headers.len(), fixed + sent.len());
    for (field, (name, value)) in r.headers[fixed..].iter().zip(sent) {
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

/// The plaintext of file bytes `start..start + len` (`start` a multiple of 8): each 8-byte
/// word is a hash of its offset, so a byte placed at the wrong offset (even 4 GiB away)
/// is seen. Built a word at a time: per-byte loops dominate an instrumented fuzz run.
fn pattern(start: u64, len: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len as usize + 8);
    let mut off = start;
    while off < start + len {
        out.extend_from_slice(&(off.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (off >> 29)).to_le_bytes());
        off += 8;
    }
    out.truncate(len as usize);
    out
}

/// A valid chunked encoding of `payload` with chunk sizes up to 1, 300 or 20000 bytes.
/// Plainer chunk lines than [`encode`] (whose zero padding, case and quoted extensions
/// the `chunked` target covers): with 1-byte chunks those make each `compaction` input
/// several times longer (a 45 s trial with `encode`: 784 exec/s, against about 2,200
/// with this one; the trial had other work on the machine).
fn encode_sized(rng: &mut Rng, payload: &[u8]) -> Vec<u8> {
    let cap = [1, 300, 20_000][rng.below(3)];
    let mut out = Vec::with_capacity(payload.len() + payload.len() / cap.min(300) * 8 + 16);
    let mut rest = payload;
    while !rest.is_empty() {
        let n = 1 + rng.below(rest.len().min(cap));
        out.extend_from_slice(format!("{n:x}").as_bytes());
        if rng.below(8) == 0 {
            out.extend_from_slice(b";ext=1");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&rest[..n]);
        out.extend_from_slice(b"\r\n");
        rest = &rest[n..];
    }
    out.extend_from_slice(b"0\r\n");
    if rng.below(4) == 0 {
        out.extend_from_slice(b"X-Trailer: v\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// The file as the writes left it: what the engine would have submitted, checked write by
/// write (O_DIRECT rules when `align > 1`: aligned offset, whole alignment units except
/// the file's last block), inside the response's range, each byte once.
struct Disk {
    start: u64,
    /// End of the bytes the response may carry (exclusive file offset).
    limit: u64,
    /// 1 for the buffered engine (no alignment rules).
    align: u64,
    block: usize,
    /// The file's end when this response reaches it (its last block may be short,
    /// padded when written).
    file_end: Option<u64>,
    bytes: Vec<u8>,
    /// Byte ranges written so far.
    written: Vec<(u64, u64)>,
}

impl Disk {
    /// Completes the oldest `n` queued writes; their blocks go back to the pool.
    fn complete(&mut self, queue: &mut VecDeque<WriteBlock>, n: usize) {
        for _ in 0..n {
            let Some(mut wb) = queue.pop_front() else { return };
            let buf = wb.buf.take().expect("a queued block holds its buffer");
            let (off, fill) = (wb.off, wb.fill as u64);
            assert!(fill > 0, "empty write queued at {off}");
            assert!(
                wb.fill <= self.block && buf.len() == self.block,
                "write larger than its block"
            );
            assert_eq!(
                off % self.align,
                0,
                "unaligned write offset {off} (align {})",
                self.align
            );
            assert!(
                off >= self.start && off + fill <= self.limit,
                "write {off}+{fill} outside the response {}..{}",
                self.start,
                self.limit
            );
            assert!(
                fill % self.align == 0 || self.file_end == Some(off + fill),
                "short write {off}+{fill} that is not the file's last block"
            );
            if let Some(&(a, b)) = self.written.iter().find(|&&(a, b)| off < b && a < off + fill) {
                panic!("write {off}+{fill} overlaps the earlier write {a}..{b}");
            }
            self.written.push((off, off + fill));
            let at = (off - self.start) as usize;
            self.bytes[at..at + wb.fill].copy_from_slice(&buf[..wb.fill]);
        }
    }

    /// The writes cover exactly `start..upto`, and hold `plain` (the plaintext from `start`).
    fn check(&mut self, upto: u64, plain: &[u8]) {
        self.written.sort_unstable();
        let mut at = self.start;
        for &(a, b) in &self.written {
            assert_eq!(a, at, "bytes {at}..{a} never written");
            at = b;
        }
        assert_eq!(at, upto, "writes end at {at}, expected {upto}");
        let n = (upto - self.start) as usize;
        if self.bytes[..n] != plain[..n] {
            let i = (0..n).find(|&i| self.bytes[i] != plain[i]).unwrap_or(0);
            panic!("wrong byte at file offset {}", self.start + i as u64);
        }
    }
}

/// `compaction`: the receive side of the block engines (`ringdl::engine::place`) over a
/// real write pool, driven the way `src/download.rs` drives it. Bytes 0..14 choose the
/// shape — alignment (512/4096) or the buffered engine (no alignment), block size
/// (4–32 KiB), pool size (1–4 blocks: backpressure), the response's file offset (up to
/// 16 TiB), segment length, a 206 that stops short of its segment at an odd offset,
/// framing (Content-Length, chunked 206, chunked 200, close-delimited), how bytes arrive
/// (TLS record payloads of up to 16 KiB, plain reads, or RECVs straight into the block with
/// short reads and EOF), a cut connection, a chunked body longer or shorter than its
/// Content-Range, bytes after the body, work stealing (the body shrunk mid-way, also
/// with a RECV in flight) — and all bytes seed the sizes. Every write is aligned and
/// inside the response; no byte is written twice; the written bytes equal the plaintext at
/// their offsets; a complete body lands whole; one that ends early leaves an aligned
/// resume point with every byte before it written; a lying chunked body is refused before
/// a byte lands past its range; bytes after the body are flagged exactly; input held under
/// backpressure never gets stuck; no write block leaks.
pub fn compaction(data: &[u8]) {
    let b = |i: usize| data.get(i).copied().unwrap_or(0);
    let mut rng = Rng::from(data);
    let direct = b(8) & 4 == 0;
    let align: u64 = if b(0) & 1 == 0 { 4096 } else { 512 };
    let block = 4096 << ((b(0) >> 1) & 3);
    let count = 1 + usize::from(b(0) >> 4) % 4;
    // 0 Content-Length, 1 chunked 206, 2 chunked 200, 3 close-delimited 200.
    let framing = b(9) % 4;
    // 0 TLS record payloads, 1 plain reads, 2 RECV into the block (Content-Length only).
    let mode = match b(10) % 3 {
        2 if framing != 0 => 0,
        m => m,
    };
    let whole_file = framing >= 2 || b(8) & 1 == 1;
    let start = if framing >= 2 {
        0
    } else {
        align * u64::from(u32::from_le_bytes([b(1), b(2), b(3), b(4)]))
    };
    // Up to 64 KiB, 4 KiB or 256 bytes: small bodies keep executions fast, large ones
    // cross several blocks and run the pool dry.
    let mut len = u64::from(u16::from_le_bytes([b(5), b(6)])) >> (4 * (b(7) % 3));
    if !whole_file {
        // A segment that is not the file's tail ends aligned and is never empty.
        len = (len & !(align - 1)).max(align);
    }
    // A 206 that carries less than its segment (a server capping its replies): 1 byte to
    // the whole segment minus one.
    let resp_len = if !whole_file && b(8) & 2 != 0 && len > 1 {
        1 + rng.below(len as usize - 1) as u64
    } else {
        len
    };
    let cut = b(11) & 3 == 0;
    // Chunked 206 only: 1 = more bytes than Content-Range, 2 = fewer.
    let lie = if framing == 1 { b(12) % 4 } else { 0 };
    let trailing = b(13) & 1 == 1 && framing != 3;
    let steal = b(13) & 2 != 0;
    let feed_while_blocked = b(13) & 4 != 0;

    let payload_len = match lie {
        1 => resp_len + 1 + rng.below(3000) as u64,
        2 if resp_len > 0 => rng.below(resp_len as usize) as u64,
        _ => resp_len,
    };
    // Whether the chunked 206 lies (an empty range cannot be shorter).
    let (longer, shorter) = (payload_len > resp_len, payload_len < resp_len);
    let payload = pattern(start, payload_len);
    let mut stream = if framing == 1 || framing == 2 {
        encode_sized(&mut rng, &payload)
    } else {
        payload.clone()
    };
    let body_stream = stream.len();
    if trailing {
        stream.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    }
    let stream_end = if cut { rng.below(stream.len() + 1) } else { stream.len() };

    let seg_end = start + len;
    let resp_end = start + resp_len;
    let (delim, delim_end) = match framing {
        0 => (Delimiter::Length(resp_len), resp_end),
        1 => (Delimiter::Chunked(ChunkedDecoder::new()), resp_end),
        2 => (Delimiter::Chunked(ChunkedDecoder::new()), u64::MAX),
        _ => (Delimiter::Close, u64::MAX),
    };
    let pool = uring::BufPool::new(block, count).expect("write pool");
    let mut queue = VecDeque::new();
    let unit = if direct { align } else { 1 };
    // Room for a lying chunked body's extra bytes, so a write past the range is caught by
    // the range check rather than by indexing.
    let room = payload_len.max(len) as usize + block;
    let mut disk = Disk {
        start,
        limit: if framing >= 2 { payload_len } else { resp_end },
        align: unit,
        block,
        file_end: if framing >= 2 {
            None // learnt at the end
        } else {
            (whole_file).then_some(seg_end)
        },
        bytes: vec![0; room],
        written: Vec::new(),
    };
    let mut p = Placer::new(start, if framing >= 2 { u64::MAX } else { seg_end });
    p.begin(delim, delim_end);
    // Where the body must end: the response's end, or where a steal cut it.
    let mut body_end = resp_end;
    let mut stolen = false;
    let mut try_steal = |p: &mut Placer, rng: &mut Rng, disk: &mut Disk, body_end: &mut u64| {
        if stolen || !steal || rng.below(4) != 0 {
            return;
        }
        stolen = true;
        // As `download.rs` does: the second half, from an aligned offset.
        let (pos, end) = (p.pos(), p.end());
        let at = (pos + p.remaining() / 2).div_ceil(unit) * unit;
        let can = framing == 0 && at > pos && at < end;
        assert_eq!(p.shrink(at), can, "shrink({at}) at {pos}..{end}, framing {framing}");
        if can {
            assert!(p.overrun() && p.end() == at && p.remaining() == at - pos);
            *body_end = at;
            disk.limit = at;
            disk.file_end = None;
        }
    };

    let max_unit = match mode {
        0 => [16, 1500, 16384][rng.below(3)],
        _ => [7, 4096, 65536][rng.below(3)],
    };
    let mut at = 0;
    // The head's read may end right at the body: the event loop feeds the (empty) rest,
    // which completes an empty body.
    let mut outcome = p.feed(
        &[],
        &mut Blocks {
            pool: &pool,
            queue: &mut queue,
        },
    );
    // Mode 2: the head's read carried the first body bytes; they go through `feed`.
    let mut prefix = if mode == 2 {
        rng.below(stream_end.min(4096) + 1)
    } else {
        0
    };
    while at < stream_end && outcome == Ok(Fed::More) {
        if rng.below(3) == 0 {
            let n = rng.below(queue.len() + 1);
            disk.complete(&mut queue, n);
        }
        try_steal(&mut p, &mut rng, &mut disk, &mut body_end);
        if mode == 2 && prefix == 0 {
            let Some((mut buf, range)) = p.recv_target(&mut Blocks {
                pool: &pool,
                queue: &mut queue,
            }) else {
                assert!(!queue.is_empty(), "no block to RECV into and nothing to write: stuck");
                let n = 1 + rng.below(queue.len());
                disk.complete(&mut queue, n);
                continue;
            };
            let (off, fill) = p.block().expect("a RECV target is a block");
            assert_eq!(
                off + range.start as u64,
                p.pos(),
                "RECV range not at the body's position"
            );
            assert_eq!(range.start, fill);
            assert!(!range.is_empty(), "empty RECV range");
            assert!(range.len() as u64 <= p.remaining(), "RECV asks past the body");
            let n = (1 + rng.below(range.len())).min(stream_end - at);
            buf[range.start..range.start + n].copy_from_slice(&stream[at..at + n]);
            at += n;
            // The body may be shrunk while the RECV is in flight.
            try_steal(&mut p, &mut rng, &mut disk, &mut body_end);
            p.recv_done(buf, n);
            outcome = p.settle(&mut Blocks {
                pool: &pool,
                queue: &mut queue,
            });
        } else {
            let lim = if prefix > 0 { prefix } else { max_unit };
            let n = (1 + rng.below(lim)).min(stream_end - at);
            prefix = prefix.saturating_sub(n);
            outcome = p.feed(
                &stream[at..at + n],
                &mut Blocks {
                    pool: &pool,
                    queue: &mut queue,
                },
            );
            at += n;
            while outcome == Ok(Fed::Blocked) {
                if feed_while_blocked && at < stream_end && rng.below(2) == 0 {
                    // More input while some is held: it queues behind, in order.
                    let n = (1 + rng.below(max_unit)).min(stream_end - at);
                    outcome = p.feed(
                        &stream[at..at + n],
                        &mut Blocks {
                            pool: &pool,
                            queue: &mut queue,
                        },
                    );
                    at += n;
                    assert_eq!(outcome, Ok(Fed::Blocked), "input behind held input was not held");
                    continue;
                }
                assert!(!queue.is_empty(), "input held with nothing to write: stuck");
                let n = 1 + rng.below(queue.len());
                disk.complete(&mut queue, n);
                outcome = p.retry_spill(&mut Blocks {
                    pool: &pool,
                    queue: &mut queue,
                });
            }
        }
        if let Some((off, fill)) = p.block() {
            assert_eq!(
                off + fill as u64,
                p.pos(),
                "the block does not end at the body's position"
            );
        }
        let bound = if framing >= 2 { payload_len } else { body_end };
        assert!(p.pos() <= bound, "position {} past the response's end {bound}", p.pos());
    }
    if mode == 2 && cut && outcome == Ok(Fed::More) && !p.has_spill() {
        // The connection closed: the last RECV returns 0 and hands its buffer back.
        if let Some((buf, _)) = p.recv_target(&mut Blocks {
            pool: &pool,
            queue: &mut queue,
        }) {
            p.recv_done(buf, 0);
        }
    }

    // How the response ended decides what is kept, as the event loop does: a complete
    // body (or a close-delimited one at EOF) keeps everything; a failure keeps the
    // aligned part and names the resume point.
    let complete = match &outcome {
        Ok(Fed::Done) => true,
        Ok(Fed::More) if framing == 3 => true,
        Ok(_) => {
            assert!(
                stream_end < stream.len(),
                "an uncut body did not complete ({outcome:?})"
            );
            false
        }
        Err(PlaceError::PastRange { end: e }) => {
            assert!(longer && *e == resp_end, "PastRange without a longer body");
            false
        }
        Err(PlaceError::ShortChunked { at, end: e }) => {
            assert!(
                shorter && *at == start + payload_len && *e == resp_end,
                "ShortChunked: {outcome:?}"
            );
            false
        }
        Err(e) => panic!("unexpected {e:?} for a valid encoding"),
    };
    if stream_end == stream.len() {
        assert!(
            !longer || matches!(outcome, Err(PlaceError::PastRange { .. })),
            "a chunked body longer than its Content-Range was not refused: {outcome:?}"
        );
        assert!(
            !shorter || matches!(outcome, Err(PlaceError::ShortChunked { .. })),
            "a chunked body shorter than its Content-Range was not refused: {outcome:?}"
        );
    }
    if outcome == Ok(Fed::Done) {
        // The connection is reused only when nothing after the body arrived, and the body
        // was not cut short by a steal.
        assert_eq!(
            p.overrun(),
            body_end < resp_end || at > body_stream,
            "overrun flag wrong: {at} of {body_stream} body bytes, steal {}",
            body_end < resp_end
        );
    }
    if complete {
        let got = p.pos();
        match framing {
            0 | 1 => assert_eq!(got, body_end, "complete body of the wrong length"),
            _ if !cut => assert_eq!(got, payload_len, "chunked/close 200 of the wrong length"),
            _ => {}
        }
        if framing == 2 {
            assert_eq!(p.end(), got, "a chunked 200 did not learn its end");
        }
        if framing >= 2 {
            // A chunked or close-delimited 200 ends the file where its body ended.
            disk.limit = got;
            disk.file_end = Some(got);
        }
        // As `finish_job`: O_DIRECT trims unless the response reached the file's end.
        let file_end = disk.file_end == Some(got);
        let trim = (direct && !file_end).then_some(align);
        let expect = if trim.is_some() { got / align * align } else { got };
        assert_eq!(
            p.release(trim, &mut queue),
            expect,
            "wrong resume point after a complete body"
        );
        let n = queue.len();
        disk.complete(&mut queue, n);
        disk.check(expect, &payload);
    } else {
        // As `fail`: O_DIRECT keeps the aligned part, buffered keeps every byte.
        let from = p.release(direct.then_some(align), &mut queue);
        assert_eq!(from % unit, 0, "unaligned resume point {from}");
        assert!(
            from >= start && from <= p.pos(),
            "resume point {from} outside {start}..{}",
            p.pos()
        );
        assert!(
            p.pos() - from < unit.max(1),
            "more than the unaligned tail fetched again"
        );
        let n = queue.len();
        disk.complete(&mut queue, n);
        disk.check(from, &payload);
    }
    assert!(p.block().is_none() && !p.has_spill(), "release left state behind");
    drop(p);
    assert_eq!(pool.available(), count, "a write block leaked");
}

/// The scheduler (`ringdl::schedule`: `Plan`, `retry`, `steal`, `plan`/`plan_missing`)
/// driven the way the event loop drives it, by a model of N connections fetching a file.
/// Fuzz bytes choose the file size, `-x`, `--max-tries`, an optional resumed part, and a
/// sequence of events: a connection asks for work, a body moves forward (the first one
/// plans the rest), a request fails in a random way (stall, idle close, cap, crowding, a
/// refused extra tunnel, cut after some bytes, short reply), an idle connection steals, the
/// clock moves, Retry-After holds. Connections go to two origins (mirrors). Then every
/// connection behaves until the end.
///
/// Properties: every range handed out is non-empty, aligned at its start, inside the file
/// and overlaps no other running request; it re-asks at most one alignment unit of landed
/// bytes at each edge; every byte not landed is always covered by the first request, a
/// queued segment or a running body (nothing is lost); tries never pass `--max-tries`
/// (the download gives up exactly there); no segment goes out before the wait its last
/// failure put on it, and no request to an origin while that origin is held (a wait
/// belongs to what failed, not to the connection); a steal splits inside a body; and with no more
/// faults the download ends with every byte landed, in a bounded number of steps.
pub fn scheduler(data: &[u8]) {
    use ringdl::schedule::queue::Plan;
    use ringdl::schedule::retry::{self, Attempt, Verdict};
    use ringdl::schedule::{FIRST_SEGMENT, Landed, Segment, plan, plan_missing, steal};
    use std::time::Duration;

    const ALIGN: u64 = 4096;
    #[derive(Clone, Copy, Debug)]
    struct Job {
        seg: Segment,
        pos: u64,
        probe: bool,
    }
    let b = |i: usize| data.get(i).copied().unwrap_or(0);
    let total = (1 + u64::from(u16::from_le_bytes([b(0), b(1)])) % 4096) * ALIGN - u64::from(b(2)) * 16;
    let n = 1 + usize::from(b(3)) % 8;
    let max_tries = 1 + u32::from(b(4)) % 5;
    // A resumed part: some aligned ranges already landed.
    let mut landed = Landed::default();
    if b(5) & 1 == 1 {
        let mut at = 0;
        for k in 0..usize::from(b(5) >> 1) % 6 {
            let s = at + ALIGN * u64::from(b(6 + k) % 64);
            let e = (s + ALIGN * (1 + u64::from(b(6 + k) >> 6) * 16)).min(total);
            if s < e {
                landed.add(s, e);
            }
            at = e;
        }
    }
    let first_gap = match landed.ranges().first() {
        Some(&(0, e)) => e,
        _ => 0,
    };
    let probe_start = (first_gap.min(total.saturating_sub(1)) / ALIGN) * ALIGN;
    let probe_end = landed
        .ranges()
        .iter()
        .map(|r| r.0)
        .find(|&s| s > probe_start)
        .map_or(probe_start + FIRST_SEGMENT, |s| s.min(probe_start + FIRST_SEGMENT));
    let mut plan_ = Plan::new(probe_start, probe_end);
    let mut jobs: Vec<Option<Job>> = vec![None; n];
    let mut now = Duration::ZERO;
    let mut gave_up = false;
    let mut handed = 0u64;
    // Counted failures of the first request before the first reply: the plan must hand it
    // out again with exactly these tries.
    let mut probe_counted = 0u32;
    // Waits put on failed segments ((start, end) → not before; the first request's apart),
    // and on each origin: connection `c` goes to origin `c % 2`.
    let mut seg_waits: Vec<(u64, u64, Duration)> = Vec::new();
    let mut probe_wait = Duration::ZERO;
    let mut origin_holds = [Duration::ZERO; 2];
    let check_wait = |seg: &Segment,
                      probe: bool,
                      now: Duration,
                      origin: usize,
                      seg_waits: &mut Vec<(u64, u64, Duration)>,
                      probe_wait: Duration,
                      holds: &[Duration; 2]| {
        assert!(
            now >= holds[origin],
            "a request to origin {origin} went out while it was held"
        );
        if probe {
            assert!(now >= probe_wait, "the first request went out before its wait");
        } else if let Some(k) = seg_waits.iter().position(|w| (w.0, w.1) == (seg.start, seg.end)) {
            assert!(now >= seg_waits[k].2, "{seg:?} went out before its wait");
            seg_waits.remove(k);
        }
    };

    // Every byte not landed is covered by something that will fetch it.
    let check_nothing_lost = |plan_: &Plan, jobs: &[Option<Job>], landed: &Landed| {
        if !plan_.is_planned() {
            return; // the first reply has not told the size yet
        }
        let mut cover: Vec<(u64, u64)> = landed.ranges().to_vec();
        cover.extend(plan_.segments().map(|s| (s.start, s.end)));
        cover.extend(jobs.iter().flatten().map(|j| (j.pos, j.seg.end)));
        cover.sort_unstable();
        let mut at = 0;
        for (s, e) in cover {
            assert!(s <= at, "bytes {at}-{s} are neither landed, queued nor being fetched");
            at = at.max(e);
        }
        assert!(
            at >= total,
            "bytes {at}-{total} are neither landed, queued nor being fetched"
        );
    };
    let check_handout = |seg: &Segment, probe: bool, jobs: &[Option<Job>], landed: &Landed| {
        assert!(seg.start < seg.end, "empty range handed out: {seg:?}");
        assert_eq!(seg.start % ALIGN, 0, "unaligned start: {seg:?}");
        assert!(seg.tries < max_tries, "a segment past --max-tries went out: {seg:?}");
        if !probe {
            assert!(seg.end <= total, "range past the file: {seg:?} of {total}");
        }
        for j in jobs.iter().flatten() {
            assert!(
                seg.end <= j.pos || seg.start >= j.seg.end,
                "{seg:?} overlaps the running body {j:?}"
            );
        }
        // Landed bytes asked again: only the aligned edges of a gap.
        let again: u64 = landed
            .ranges()
            .iter()
            .map(|&(a, b)| b.min(seg.end).saturating_sub(a.max(seg.start)))
            .sum();
        assert!(again <= 2 * ALIGN, "{again} landed bytes asked again by {seg:?}");
    };
    // The first reply: the size is known, the rest is planned (as control::response does).
    let first_reply = |plan_: &mut Plan, job: &mut Job, landed: &Landed| {
        let first_end = job.seg.end.min(total);
        job.seg.end = first_end;
        let q = if landed.bytes() > 0 {
            plan_missing(landed, first_end, total, n, ALIGN)
        } else {
            plan(first_end, total, n, ALIGN)
        };
        plan_.set_queue(q);
    };

    let events = data.get(16..).unwrap_or(&[]);
    let mut i = 0;
    while i + 1 < events.len() && !gave_up {
        let (op, arg) = (events[i], events[i + 1]);
        i += 2;
        let c = usize::from(arg) % n;
        match op % 8 {
            // An idle connection asks for work (then, with the queue empty, steals).
            0 | 1 => {
                if jobs[c].is_some() {
                    continue;
                }
                if let Some((seg, probe)) = plan_.next(now, c % 2) {
                    check_handout(&seg, probe, &jobs, &landed);
                    check_wait(&seg, probe, now, c % 2, &mut seg_waits, probe_wait, &origin_holds);
                    if probe {
                        assert_eq!(seg.tries, probe_counted, "the first request lost its tries");
                    }
                    handed += 1;
                    jobs[c] = Some(Job {
                        seg,
                        pos: seg.start,
                        probe,
                    });
                } else if plan_.is_planned() && !plan_.held(now, c % 2) && op % 8 == 1 {
                    // Steal the body with the most left, at its aligned middle.
                    let Some(v) = (0..n)
                        .filter(|&v| jobs[v].is_some_and(|j| j.seg.end > j.pos))
                        .max_by_key(|&v| jobs[v].map_or(0, |j| j.seg.end - j.pos))
                    else {
                        continue;
                    };
                    let j = jobs[v].unwrap();
                    let rem = j.seg.end - j.pos;
                    if let Some(at) = steal::split_point(j.pos, j.seg.end, rem, j.seg.end, ALIGN) {
                        assert!(
                            j.pos < at && at < j.seg.end && at % ALIGN == 0,
                            "bad split {at} of {j:?}"
                        );
                        let stolen = Segment { start: at, ..j.seg };
                        jobs[v].as_mut().unwrap().seg.end = at;
                        check_handout(&stolen, false, &jobs, &landed);
                        jobs[c] = Some(Job {
                            seg: stolen,
                            pos: at,
                            probe: false,
                        });
                    }
                }
            }
            // A body moves forward by some aligned bytes (or to its end), and lands.
            2 | 3 => {
                let Some(mut j) = jobs[c] else { continue };
                if j.probe && !plan_.is_planned() {
                    first_reply(&mut plan_, &mut j, &landed);
                }
                let step = ALIGN * (1 + u64::from(arg >> 3) * 8);
                let to = (j.pos + step).min(j.seg.end);
                landed.add(j.pos, to);
                j.pos = to;
                jobs[c] = if j.pos >= j.seg.end { None } else { Some(j) };
            }
            // A request fails: the loop keeps the aligned bytes, judges the try, requeues.
            4..=6 => {
                let Some(mut j) = jobs[c].take() else { continue };
                if j.probe && !plan_.is_planned() && op % 8 == 6 {
                    // A head arrived, then the body broke.
                    first_reply(&mut plan_, &mut j, &landed);
                }
                let others_progress = jobs.iter().flatten().any(|o| o.pos > o.seg.start);
                let idle_others = (0..n).any(|o| o != c && jobs[o].is_none());
                let a = Attempt {
                    advanced: j.pos - j.seg.start,
                    ranges: true,
                    silent: j.pos == j.seg.start && arg & 1 == 1,
                    reused: arg & 2 == 2,
                    stalled: arg & 4 == 4,
                    busy: arg & 8 == 8,
                    others_progress,
                    // (Another transfer on the ring served by the origin: `-j`.)
                    others_served: arg & 128 == 128,
                    planned: plan_.is_planned(),
                    extra: arg & 16 == 16,
                    idle_others: idle_others && arg & 32 == 32,
                    asked_wait: arg & 64 == 64,
                    // (A status answer, not a reset.)
                    answered: op & 32 == 32,
                    // (On a connection that carried a whole response; closed under it.)
                    kept: arg & 2 == 2 && op & 64 == 64,
                    closed: op & 128 == 128,
                };
                let mut seg = Segment { start: j.pos, ..j.seg };
                let before = seg.tries;
                let v = retry::judge(&mut seg, &a);
                // (Crowded spends a try too: the idle connections are closed, the request
                // is asked again after its backoff.)
                if matches!(v, Verdict::Counted | Verdict::Crowded) && j.probe && !plan_.is_planned() {
                    probe_counted += 1;
                }
                match v {
                    Verdict::Counted | Verdict::Crowded => assert_eq!(seg.tries, before + 1),
                    _ => assert_eq!(seg.tries, before, "{v:?} spent a try"),
                }
                if v == Verdict::Parked {
                    assert!(
                        a.busy
                            && ((a.planned && others_progress)
                                || (a.others_served && (!a.reused || a.answered))
                                || a.extra)
                    );
                }
                if v == Verdict::Crowded {
                    assert!(a.busy && a.idle_others && a.asked_wait && !others_progress);
                }
                // Free and at once only for a kept connection closed before any answer.
                if v == Verdict::Resent {
                    assert!(a.kept && a.closed && a.silent && !a.stalled && !a.answered);
                }
                assert!(seg.tries <= max_tries);
                if seg.tries >= max_tries {
                    gave_up = true;
                    break;
                }
                // The wait belongs to the segment (and, server-wide, to its origin).
                let retry_after = (arg & 64 == 64).then(|| Duration::from_millis(u64::from(op) * 40));
                let w = retry::wait(v, 0.5, seg.tries, f64::from(op) / 256.0, retry_after, a.busy);
                let until = now + w.segment;
                if w.origin {
                    plan_.hold(c % 2, until);
                    origin_holds[c % 2] = origin_holds[c % 2].max(until);
                }
                if j.probe && !plan_.is_planned() {
                    probe_wait = until;
                } else if seg.start < seg.end {
                    seg_waits.retain(|w| (w.0, w.1) != (seg.start, seg.end));
                    seg_waits.push((seg.start, seg.end, until));
                }
                plan_.requeue_after(seg, j.probe, until);
            }
            // The clock moves; a Retry-After holds every new request to an origin for a while.
            _ => {
                now += Duration::from_millis(u64::from(arg) * 10);
                if arg & 1 == 1 {
                    let until = now + Duration::from_millis(u64::from(arg) * 20);
                    plan_.hold(c % 2, until);
                    origin_holds[c % 2] = origin_holds[c % 2].max(until);
                }
            }
        }
        check_nothing_lost(&plan_, &jobs, &landed);
        assert!(handed <= 100_000);
    }
    if gave_up {
        return;
    }
    // No more faults: every connection works until the download ends.
    for _ in 0..1_000_000 {
        if plan_.is_drained() && jobs.iter().all(Option::is_none) {
            break;
        }
        now += Duration::from_secs(1);
        for c in 0..n {
            match jobs[c] {
                None => {
                    if let Some((seg, probe)) = plan_.next(now, c % 2) {
                        check_handout(&seg, probe, &jobs, &landed);
                        check_wait(&seg, probe, now, c % 2, &mut seg_waits, probe_wait, &origin_holds);
                        jobs[c] = Some(Job {
                            seg,
                            pos: seg.start,
                            probe,
                        });
                    }
                }
                Some(mut j) => {
                    if j.probe && !plan_.is_planned() {
                        first_reply(&mut plan_, &mut j, &landed);
                    }
                    landed.add(j.pos, j.seg.end);
                    jobs[c] = None;
                }
            }
        }
        check_nothing_lost(&plan_, &jobs, &landed);
    }
    assert!(
        plan_.is_drained() && jobs.iter().all(Option::is_none),
        "the download did not end"
    );
    assert!(
        landed.is_complete(total),
        "ended without every byte: {:?}",
        landed.ranges()
    );
}

/// The most application data one `records` run sends (bytes): still many records of every
/// size (16 KiB records down to 32-byte fragments) and a write spanning several of them.
const RECORDS_PLAINTEXT: usize = 128 * 1024;

/// The software record layer's suites, in the order byte 0 of a `records` input picks them.
const RECORD_SUITES: [rustls::SupportedCipherSuite; 6] = {
    use rustls::crypto::ring::cipher_suite as cs;
    [
        cs::TLS13_AES_128_GCM_SHA256,
        cs::TLS13_AES_256_GCM_SHA384,
        cs::TLS13_CHACHA20_POLY1305_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ]
};

/// One self-signed ECDSA certificate for every `records` handshake (made once: key
/// generation would cost more than the handshake).
fn records_cert() -> &'static (rustls::pki_types::CertificateDer<'static>, Vec<u8>) {
    static CERT: std::sync::OnceLock<(rustls::pki_types::CertificateDer<'static>, Vec<u8>)> =
        std::sync::OnceLock::new();
    CERT.get_or_init(|| {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        (ck.cert.der().clone(), ck.signing_key.serialize_der())
    })
}

/// A rustls server (buffered) and the client side handed to `ktls::soft` after an
/// in-memory handshake with an unbuffered client (as ringdl's), `tickets` TLS 1.3 tickets
/// and server records of at most `fragment` bytes.
struct SoftPair {
    server: rustls::ServerConnection,
    tls13: bool,
    opener: ktls::soft::RecordOpener,
    sealer: ktls::soft::RecordSealer,
    kconn: rustls::kernel::KernelConnection<rustls::client::ClientConnectionData>,
    /// What the server sent after the handshake that the client did not process.
    wire: Vec<u8>,
}

/// Feeds `bytes` to the server and returns the plaintext it read from them.
fn server_feed(server: &mut rustls::ServerConnection, mut bytes: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut plain = Vec::new();
    while !bytes.is_empty() {
        server.read_tls(&mut bytes).unwrap();
        server.process_new_packets().unwrap();
        let mut chunk = [0; 4096];
        loop {
            match server.reader().read(&mut chunk) {
                Ok(0) => break, // close_notify
                Ok(n) => plain.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("server read: {e}"),
            }
        }
    }
    plain
}

fn server_drain(server: &mut rustls::ServerConnection, out: &mut Vec<u8>) {
    while server.wants_write() {
        server.write_tls(out).unwrap();
    }
}

/// A key exchange with no arithmetic, for `records` handshakes only: each side's "public
/// key" is 32 random bytes and the shared secret is their XOR, the same on both sides.
/// The target tests the record layer after the handshake, not the handshake; X25519 and
/// the ECDSA verification took about a third of every run (perf, 2026-12-01).
#[derive(Debug)]
struct XorGroup;

struct XorExchange([u8; 32]);

impl rustls::crypto::SupportedKxGroup for XorGroup {
    fn start(&self) -> Result<Box<dyn rustls::crypto::ActiveKeyExchange>, rustls::Error> {
        let mut k = [0; 32];
        rustls::crypto::ring::default_provider().secure_random.fill(&mut k)?;
        Ok(Box::new(XorExchange(k)))
    }

    fn name(&self) -> rustls::NamedGroup {
        rustls::NamedGroup::X25519
    }
}

impl rustls::crypto::ActiveKeyExchange for XorExchange {
    fn complete(self: Box<Self>, peer: &[u8]) -> Result<rustls::crypto::SharedSecret, rustls::Error> {
        if peer.len() != 32 {
            return Err(rustls::Error::General("xor group: a 32-byte key".into()));
        }
        let secret: Vec<u8> = self.0.iter().zip(peer).map(|(a, b)| a ^ b).collect();
        Ok(rustls::crypto::SharedSecret::from(secret))
    }

    fn pub_key(&self) -> &[u8] {
        &self.0
    }

    fn group(&self) -> rustls::NamedGroup {
        rustls::NamedGroup::X25519
    }
}

/// Accepts the server's certificate and signatures unchecked (`records` only: its
/// handshakes are in memory between two configurations of this file).
#[derive(Debug)]
struct TrustAll;

impl rustls::client::danger::ServerCertVerifier for TrustAll {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        vec![rustls::SignatureScheme::ECDSA_NISTP256_SHA256]
    }
}

fn soft_handshake(suite: rustls::SupportedCipherSuite, tickets: usize, fragment: usize) -> SoftPair {
    use rustls::client::UnbufferedClientConnection;
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    use rustls::unbuffered::{ConnectionState, UnbufferedStatus};
    use std::sync::Arc;
    let (cert, key) = records_cert();
    let prov = Arc::new(rustls::crypto::CryptoProvider {
        cipher_suites: vec![suite],
        kx_groups: vec![&XorGroup],
        ..rustls::crypto::ring::default_provider()
    });
    let versions = [suite.version()];
    let mut sc = rustls::ServerConfig::builder_with_provider(prov.clone())
        .with_protocol_versions(&versions)
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.clone())),
        )
        .unwrap();
    sc.send_tls13_tickets = tickets;
    sc.max_fragment_size = Some(fragment);
    let mut cc = rustls::ClientConfig::builder_with_provider(prov)
        .with_protocol_versions(&versions)
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(TrustAll))
        .with_no_client_auth();
    cc.enable_secret_extraction = true;
    cc.resumption = rustls::client::Resumption::disabled();
    let mut client = UnbufferedClientConnection::new(Arc::new(cc), ServerName::try_from("localhost").unwrap()).unwrap();
    let mut server = rustls::ServerConnection::new(Arc::new(sc)).unwrap();
    let (mut incoming, mut to_server) = (Vec::new(), Vec::new());
    loop {
        let mut answer = Vec::new();
        let UnbufferedStatus { discard, state } = client.process_tls_records(&mut incoming);
        let done = match state.unwrap() {
            ConnectionState::EncodeTlsData(mut s) => {
                let mut buf = vec![0; 1 << 16];
                let n = s.encode(&mut buf).unwrap();
                to_server.extend_from_slice(&buf[..n]);
                false
            }
            ConnectionState::TransmitTlsData(s) => {
                s.done();
                false
            }
            ConnectionState::BlockedHandshake => {
                server_feed(&mut server, &to_server);
                to_server.clear();
                server_drain(&mut server, &mut answer);
                assert!(!answer.is_empty(), "handshake stalled");
                false
            }
            ConnectionState::WriteTraffic(_) => true,
            _ => panic!("unexpected client state during the handshake"),
        };
        incoming.drain(..discard);
        incoming.extend(answer);
        if done {
            break;
        }
    }
    server_feed(&mut server, &to_server);
    server_drain(&mut server, &mut incoming);
    let version = client.protocol_version().unwrap();
    let (secrets, kconn) = client.dangerous_into_kernel_connection().unwrap();
    let ((rx_seq, rx), (tx_seq, tx)) = (secrets.rx, secrets.tx);
    SoftPair {
        server,
        tls13: version == rustls::ProtocolVersion::TLSv1_3,
        opener: ktls::soft::RecordOpener::new(version, rx_seq, rx).unwrap(),
        sealer: ktls::soft::RecordSealer::new(version, tx_seq, tx).unwrap(),
        kconn,
        wire: incoming,
    }
}

/// What one receive run of `records` saw.
#[derive(Debug, Default, PartialEq, Eq)]
struct SoftRun {
    landed: usize,
    tickets: usize,
    key_updates: usize,
    close_notify: bool,
}

/// Receives `wire` the way the engine does: TCP segments of random sizes appended after
/// the ciphertext already there, each whole record opened in place so its application
/// data lands right after the bytes already landed (offset 0 onwards of `buf`), handshake
/// records routed to rustls. `flipped`: the wire offset of a flipped bit, which must never
/// be inside a record that opens. Returns the run's tally and whether it ended on an
/// error (or a truncated record).
fn soft_receive(
    p: &mut SoftPair,
    wire: &[u8],
    rng: &mut Rng,
    buf: &mut Vec<u8>,
    flipped: Option<usize>,
) -> (SoftRun, bool) {
    let mut run = SoftRun::default();
    buf.clear();
    let (mut src, mut fed) = (0, 0);
    while fed < wire.len() {
        let max = if rng.next().is_multiple_of(4) { 40 } else { 20000 };
        let n = 1 + rng.below(max);
        let end = (fed + n).min(wire.len());
        buf.extend_from_slice(&wire[fed..end]);
        fed = end;
        loop {
            // (That no open touches the landed bytes is checked at the end, against
            // rustls' plaintext: a copy here per record would make a run quadratic.)
            let o = match p.opener.open(buf, src, run.landed) {
                Ok(Some(o)) => o,
                Ok(None) => break,
                Err(e) => {
                    if std::env::var_os("RECORDS_DEBUG").is_some() {
                        eprintln!("open at {src}: {e}");
                    }
                    return (run, true);
                }
            };
            if let Some(f) = flipped {
                assert!(
                    !(src..src + o.wire).contains(&f),
                    "a record with a flipped bit opened: {o:?}"
                );
            }
            assert!(!run.close_notify, "a record after close_notify");
            src += o.wire;
            let content = run.landed..run.landed + o.len;
            match o.typ {
                23 => run.landed += o.len,
                22 => {
                    let payload = buf[content].to_vec();
                    match p.opener.handshake(&mut p.kconn, &payload) {
                        Ok(h) => {
                            run.tickets += h.tickets;
                            run.key_updates += usize::from(h.key_update.is_some());
                        }
                        Err(e) => {
                            if std::env::var_os("RECORDS_DEBUG").is_some() {
                                eprintln!("handshake at {src}: {e}");
                            }
                            return (run, true);
                        }
                    }
                }
                _ => match ktls::NonData::decode(o.typ, &buf[content]) {
                    Ok(a) if a.is_close_notify() => run.close_notify = true,
                    _ => return (run, true),
                },
            }
        }
    }
    let truncated = src < buf.len();
    (run, truncated)
}

/// `records`: the software record layer (`ktls::soft`) against rustls. Byte 0 picks the
/// suite (6), the number of TLS 1.3 tickets (0–3) and whether one bit of the wire is
/// flipped; the rest is a script for the rustls server: application data of random sizes
/// (records of a random maximum fragment size), TLS 1.3 KeyUpdates, then close_notify.
///
/// Properties: received in random TCP segments, every record opens in place and exactly
/// rustls' plaintext lands, contiguously, with every ticket and KeyUpdate taken and the
/// close_notify seen; records our layer seals (a request, a TLS 1.3 KeyUpdate of ours,
/// more data) are read by the rustls server as exactly that plaintext. With one bit
/// flipped anywhere after the handshake, the run ends on an error or a truncated record,
/// the record holding the bit never opens, and what landed is a prefix of the plaintext
/// (no byte of the damaged record or after it).
pub fn records(data: &[u8]) {
    let Some((&head, script)) = data.split_first() else {
        return;
    };
    let suite = RECORD_SUITES[usize::from(head % 6)];
    let tickets = usize::from(head / 6 % 4);
    let flip = head >= 128;
    let mut rng = Rng::from(data);
    let fragment = 32 + rng.below(16389 - 32 + 1);
    let mut p = soft_handshake(suite, tickets, fragment);
    p.server.set_buffer_limit(None);
    let mut wire = std::mem::take(&mut p.wire);
    let mut want = Vec::new();
    let mut key_updates = 0;
    for &op in script.iter().take(48) {
        match op % 8 {
            7 if p.tls13 => {
                p.server.refresh_traffic_keys().unwrap();
                key_updates += 1;
            }
            _ => {
                let n = match op % 4 {
                    0 => usize::from(op / 4),
                    1 => rng.below(70_000),
                    _ => rng.below(2000),
                }
                // At most RECORDS_PLAINTEXT per run: long scripts had made runs of ~0.5 MB
                // (a few hundred a second), without reaching more of the record layer.
                .min(RECORDS_PLAINTEXT.saturating_sub(want.len()));
                let start = want.len();
                want.extend((0..n.div_ceil(8)).flat_map(|_| rng.next().to_le_bytes()));
                want.truncate(start + n);
                use std::io::Write;
                p.server.writer().write_all(&want[start..]).unwrap();
            }
        }
        server_drain(&mut p.server, &mut wire);
    }
    p.server.send_close_notify();
    server_drain(&mut p.server, &mut wire);

    let mut buf = Vec::with_capacity(wire.len());
    if flip && !wire.is_empty() {
        let at = rng.below(wire.len());
        wire[at] ^= 1 << rng.below(8);
        let (run, failed) = soft_receive(&mut p, &wire, &mut rng, &mut buf, Some(at));
        assert!(
            failed,
            "a flipped bit at {at} of {} went unnoticed: {run:?}",
            wire.len()
        );
        assert!(
            buf[..run.landed] == want[..run.landed],
            "landed bytes differ from rustls' plaintext"
        );
        return;
    }
    let (run, failed) = soft_receive(&mut p, &wire, &mut rng, &mut buf, None);
    assert!(!failed, "rustls' records refused: {run:?}");
    let expect = SoftRun {
        landed: want.len(),
        tickets: if p.tls13 { tickets } else { 0 },
        key_updates,
        close_notify: true,
    };
    assert_eq!(run, expect, "{:?}", suite.suite());
    assert!(buf[..run.landed] == want[..], "plaintext differs from rustls'");

    // TX: a request (and a KeyUpdate of ours), read back by the rustls server.
    let mut request: Vec<u8> = (0..5000).flat_map(|_| rng.next().to_le_bytes()).collect();
    request.truncate(rng.below(40_000));
    let mut out = Vec::new();
    p.sealer.seal(23, &request, &mut out).unwrap();
    if p.tls13 && rng.next().is_multiple_of(2) {
        p.sealer.seal(22, &ktls::key_update_message(false), &mut out).unwrap();
        let (seq, tx) = p.kconn.update_tx_secret().unwrap();
        p.sealer.rekey(seq, tx).unwrap();
    }
    p.sealer.seal(23, b"after", &mut out).unwrap();
    p.sealer.seal(21, &[1, 0], &mut out).unwrap();
    let got = server_feed(&mut p.server, &out);
    assert!(
        got.len() == request.len() + 5 && got[..request.len()] == request[..] && got.ends_with(b"after"),
        "the rustls server read something else than we sealed"
    );
}

/// `multipart`: first line = a `Content-Type` value, rest = the body of a 206. A boundary
/// taken is 1..=70 `bchars` not ending in a space and comes back from a quoted
/// `boundary="…"`; a part taken (with that boundary, or `B`) consumed ≤ len, every
/// prefix of its head is Partial, its head alone parses to the same part, its
/// Content-Range is a byte range inside its complete length, and a Content-Length of
/// exactly one part and its closing delimiter is a whole body (one byte more is not).
/// A part built from the input's numbers parses back to them.
pub fn multipart(data: &[u8]) {
    let (ctype, body) = split_line(data);
    let boundary = match byteranges_boundary(ctype) {
        Ok(Some(b)) => {
            assert!(!b.is_empty() && b.len() <= MAX_BOUNDARY, "boundary length {}", b.len());
            assert!(b.last() != Some(&b' '), "boundary ends with a space");
            assert!(
                b.iter()
                    .all(|&c| c.is_ascii_alphanumeric() || b"'()+_,-./:=? ".contains(&c)),
                "boundary with a byte outside bchars: {b:?}"
            );
            let mut again = b"multipart/byteranges; boundary=\"".to_vec();
            again.extend_from_slice(b);
            again.push(b'"');
            assert_eq!(
                byteranges_boundary(&again),
                Ok(Some(b)),
                "quoted boundary does not round-trip"
            );
            b
        }
        _ => &b"B"[..],
    };
    let mut h = [Header::EMPTY; MAX_PART_FIELDS];
    if let Ok(Status::Complete(p)) = parse_byteranges_part(body, boundary, &mut h) {
        let n = p.head_len;
        assert!(n <= body.len(), "part head {n} > input {}", body.len());
        assert!(p.first <= p.last, "first > last");
        assert!(p.complete.is_none_or(|c| p.last < c), "last >= complete");
        for k in 0..n {
            let mut h2 = [Header::EMPTY; MAX_PART_FIELDS];
            let r = parse_byteranges_part(&body[..k], boundary, &mut h2);
            assert!(
                matches!(r, Ok(Status::Partial)),
                "prefix of {k} bytes of a {n}-byte part head gave {r:?}"
            );
        }
        let mut h3 = [Header::EMPTY; MAX_PART_FIELDS];
        let Ok(Status::Complete(q)) = parse_byteranges_part(&body[..n], boundary, &mut h3) else {
            panic!("the part head alone does not parse")
        };
        assert_eq!(
            (q.first, q.last, q.complete, q.head_len),
            (p.first, p.last, p.complete, n)
        );
        let whole = (n as u64)
            .saturating_add(p.len())
            .saturating_add(6 + boundary.len() as u64);
        if whole < u64::MAX - 2 {
            assert!(p.is_whole_body(whole, boundary) && p.is_whole_body(whole + 2, boundary));
            assert!(!p.is_whole_body(whole + 1, boundary) && !p.is_whole_body(whole + 3, boundary));
        }
    }
    // A part built from the input's numbers parses back to them.
    let mut rng = Rng::from(data);
    let first = rng.next() >> rng.below(64);
    let last = first.saturating_add(rng.next() >> rng.below(64));
    let more = (rng.next() >> rng.below(64)).checked_add(1);
    let complete = more.and_then(|m| last.checked_add(m)).filter(|_| rng.below(4) != 0);
    let total = complete.map_or_else(|| "*".to_owned(), |c| c.to_string());
    let built = format!(
        "\r\n--{}\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes {first}-{last}/{total}\r\n\r\n",
        String::from_utf8_lossy(boundary)
    );
    let mut h4 = [Header::EMPTY; MAX_PART_FIELDS];
    match parse_byteranges_part(built.as_bytes(), boundary, &mut h4) {
        Ok(Status::Complete(p)) => {
            assert_eq!(
                (p.first, p.last, p.complete, p.head_len),
                (first, last, complete, built.len())
            )
        }
        other => panic!("built part {built:?} gave {other:?}"),
    }
    multipart_walk(body, boundary);
}

/// `multipart`'s walk over several parts ([`next_byteranges_part`], as the engine reads a
/// multi-range answer): each step consumes ≤ what is left and at least one byte, a part's
/// range is a byte range inside its complete length, the walk ends (at most one step per
/// input byte), and the close delimiter appended after what was walked ends it.
fn multipart_walk(body: &[u8], boundary: &[u8]) {
    let mut at = 0;
    for _ in 0..=body.len() {
        let mut h = [Header::EMPTY; MAX_PART_FIELDS];
        match next_byteranges_part(&body[at..], boundary, &mut h) {
            Ok(Status::Complete(Walk::Part(p))) => {
                assert!(
                    p.head_len > 0 && p.head_len <= body.len() - at,
                    "part head {} at {at}",
                    p.head_len
                );
                assert!(p.first <= p.last && p.complete.is_none_or(|c| p.last < c));
                let skip = usize::try_from(p.len()).unwrap_or(usize::MAX);
                at = (at + p.head_len).saturating_add(skip).min(body.len());
            }
            Ok(Status::Complete(Walk::End { len })) => {
                assert!(len <= body.len() - at, "end {len} past the input");
                return;
            }
            Ok(Status::Partial) | Err(_) => {
                let mut closed = body[..at].to_vec();
                closed.extend_from_slice(b"\r\n--");
                closed.extend_from_slice(boundary);
                closed.extend_from_slice(b"--\r\n");
                let mut h = [Header::EMPTY; MAX_PART_FIELDS];
                assert_eq!(
                    next_byteranges_part(&closed[at..], boundary, &mut h),
                    Ok(Status::Complete(Walk::End { len: closed.len() - at })),
                    "the close delimiter after {at} bytes"
                );
                return;
            }
        }
    }
    panic!("the walk did not end within one step per byte");
}

/// Every byte but RFC 3986 `unreserved` as `%XX`.
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `proxy_url`: never panics; a parsed proxy has a host and a port, its Display is
/// its scheme + `://` + (`***@` exactly when it has credentials) + `host:port` and never
/// shows a password, and the Display parses back to the same scheme, host and port; the
/// credentials, percent-encoded again into that URL, parse back to themselves.
pub fn proxy_url(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let Ok(p) = ProxyUrl::parse(s) else { return };
    assert!(!p.host().is_empty(), "empty host: {s:?}");
    assert_ne!(p.port(), 0, "port 0: {s:?}");
    let shown = p.to_string();
    let scheme = format!("{}://", p.scheme().as_str());
    let rest = shown.strip_prefix(&scheme).expect("Display starts with the scheme");
    let authority = match (rest.strip_prefix("***@"), p.credentials()) {
        (Some(a), Some(_)) => a,
        (None, None) => rest,
        (_, creds) => panic!(
            "{shown:?} does not say whether there are credentials ({:?})",
            creds.is_some()
        ),
    };
    assert!(
        !authority.contains('@'),
        "credentials in the shown authority: {shown:?}"
    );
    let again = ProxyUrl::parse(&format!("{scheme}{authority}")).unwrap_or_else(|e| panic!("{shown:?}: {e}"));
    assert_eq!(
        (again.scheme(), again.host(), again.port(), again.credentials()),
        (p.scheme(), p.host(), p.port(), None)
    );
    if let Some((user, password)) = p.credentials() {
        let url = format!(
            "{scheme}{}:{}@{authority}",
            percent_encode(user),
            percent_encode(password)
        );
        let back = ProxyUrl::parse(&url).unwrap_or_else(|e| panic!("{url:?}: {e}"));
        assert_eq!(
            back.credentials(),
            Some((user, password)),
            "credentials round trip: {url:?}"
        );
        assert_eq!((back.host(), back.port()), (p.host(), p.port()));
    }
}

/// `no_proxy`: first line = the list, second = a host. Never panics; `*` matches every
/// host; a list is the union of its entries (for a list without a `*` entry); a host a URL
/// accepts matches a list of exactly itself, its upper-case form, a subdomain of it (a
/// name), and not a name that merely ends with it.
pub fn no_proxy(data: &[u8]) {
    let (list, host) = split_line(data);
    let (Ok(list), Ok(host)) = (std::str::from_utf8(list), std::str::from_utf8(host)) else {
        return;
    };
    let m = no_proxy_matches(list, host);
    assert!(no_proxy_matches("*", host), "'*' misses {host:?}");
    assert!(no_proxy_matches(" * ", host), "' * ' misses {host:?}");
    // (A `*` entry inside a longer list is a name, not "every host": as a list of its own
    // it would mean every host, so such lists are left out here. So are entries with other
    // whitespace at an end (`\x0c*`, `a\r`): a whole list is trimmed of any whitespace,
    // while entries split at SP/HTAB only.)
    let tokens = || list.split([',', ' ', '\t']).filter(|t| !t.is_empty());
    if list.trim() != "*" && tokens().all(|t| t != "*" && t.trim() == t) {
        let any = tokens().any(|t| no_proxy_matches(t, host));
        assert_eq!(m, any, "{list:?} vs its entries for {host:?}");
        assert_eq!(
            m,
            no_proxy_matches(&format!("{list},"), host),
            "a trailing comma changed {list:?}"
        );
    }
    let Ok(u) = Url::parse(&format!("http://{host}/")) else {
        return;
    };
    let h = u.host();
    assert!(no_proxy_matches(h, h), "{h:?} does not match itself");
    assert!(no_proxy_matches(&format!("x,{h} ,y"), h), "{h:?} not found in a list");
    let is_ip = h.parse::<std::net::IpAddr>().is_ok();
    if !is_ip {
        assert!(no_proxy_matches(&h.to_ascii_uppercase(), h), "case matters for {h:?}");
        assert!(no_proxy_matches(&format!(".{h}"), h), ".{h} does not match {h:?}");
        let sub = format!("www.{h}");
        if sub.parse::<std::net::IpAddr>().is_err() {
            assert!(no_proxy_matches(h, &sub), "{h:?} does not match its subdomain");
        }
        let longer = format!("x{h}");
        if longer.parse::<std::net::IpAddr>().is_err() && !h.starts_with('.') {
            assert!(!no_proxy_matches(h, &longer), "{h:?} matches {longer:?}");
        }
    }
}

/// `socks5_reply`: a flag byte (odd: the handshake offers a user name and password), then
/// the proxy's bytes, fed to a handshake for a domain target at the split points the
/// input's hash picks. Never panics;
/// every step consumes no more than it was given; `Send` appends a message and `Open`
/// none; a handshake opens only after method selection and the reply (at least 2 + 7
/// bytes), and the same bytes in one piece give the same outcome as in pieces.
pub fn socks5_reply(data: &[u8]) {
    let Some((&flag, data)) = data.split_first() else {
        return;
    };
    let creds = (flag & 1 == 1).then(|| (b"user".to_vec(), b"pw".to_vec()));
    let run = |splits: &mut dyn FnMut(usize) -> usize| -> (Result<usize, http::Socks5Error>, usize) {
        let mut out = Vec::new();
        let target = Socks5Target::Domain("example.com".into(), 443);
        let mut h = Socks5Handshake::start(target, creds.clone(), &mut out).expect("valid start");
        let (mut at, mut avail, mut sends) = (0usize, 0usize, 0usize);
        loop {
            avail = (avail + splits(data.len() - avail)).min(data.len());
            let before = out.len();
            match h.advance(&data[at..avail], &mut out) {
                Ok(Socks5Step::NeedMore) => {
                    assert_eq!(out.len(), before, "NeedMore appended bytes");
                    if avail == data.len() {
                        return (Ok(usize::MAX), sends);
                    }
                }
                Ok(Socks5Step::Send(n)) => {
                    assert!(n <= avail - at, "Send consumed {n} of {}", avail - at);
                    assert!(out.len() > before, "Send appended nothing");
                    at += n;
                    sends += 1;
                }
                Ok(Socks5Step::Open(n)) => {
                    assert!(n <= avail - at, "Open consumed {n} of {}", avail - at);
                    assert_eq!(out.len(), before, "Open appended bytes");
                    // (The shortest reply: ATYP 3 with an empty BND.ADDR, 7 bytes.)
                    assert!(at + n >= 2 + 7, "opened after {} bytes", at + n);
                    return (Ok(at + n), sends);
                }
                Err(e) => return (Err(e), sends),
            }
        }
    };
    let whole = run(&mut |left| left);
    let mut rng = Rng::from(data);
    let pieces = run(&mut |left| if left == 0 { 0 } else { 1 + rng.below(left) });
    assert_eq!(whole, pieces, "one piece and many pieces differ");
}

/// `signature_sshsig`: an armored signature or a bare blob that parses encodes back to
/// itself (the blob exactly: its encoding is canonical); verification over any split of
/// the input into key / signature / data never panics (whether a chosen key verifies its
/// own garbage — a small-order Ed25519 key can — is not a property of the parser).
pub fn signature_sshsig(data: &[u8]) {
    use ringdl::signature::{Signature, parse, sshsig};
    if let Ok(s) = sshsig::parse_blob(data) {
        assert_eq!(s.encode_blob(), data, "a parsed blob does not encode back to itself");
        assert!(!s.namespace.is_empty());
    }
    if let Ok(Signature::Sshsig(s)) = parse(data) {
        assert_eq!(sshsig::parse_blob(&s.encode_blob()).as_ref(), Ok(&s));
    }
    let mut rng = Rng::from(data);
    let a = rng.below(data.len() + 1);
    let b = a + rng.below(data.len() - a + 1);
    let _ = sshsig::verify_blob(&data[..a], &data[a..b], &data[b..]);
}

/// `signature_signify`: a parsed `.sig` re-encodes to a file that parses to the same signature; it
/// needs the message (never a prehash); verifying it does not panic.
pub fn signature_signify(data: &[u8]) {
    use ringdl::signature::{Input, Signature, TrustedKey, parse, signify};
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(s) = signify::parse(text) {
        assert_eq!(signify::parse(&s.encode()).as_ref(), Ok(&s), "does not round-trip");
        let sig = Signature::Signify(s.clone());
        assert_eq!(sig.input(), Input::Message);
        let key = TrustedKey::Ed(ringdl::signature::EdKey {
            id: s.keynum,
            key: [9; 32],
        });
        let _ = s.verify(&[key], data);
    }
    let _ = parse(data);
}

/// `signature_minisign`: a parsed `.minisig` re-encodes to a file that parses to the same signature;
/// `ED` asks for BLAKE2b-512, `Ed` for the message; verifying it does not panic.
pub fn signature_minisign(data: &[u8]) {
    use ringdl::signature::{Input, Signature, TrustedKey, minisign, parse};
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(s) = minisign::parse(text) {
        assert_eq!(minisign::parse(&s.encode()).as_ref(), Ok(&s), "does not round-trip");
        let want = if s.prehashed { Input::Blake2b512 } else { Input::Message };
        assert_eq!(Signature::Minisign(s.clone()).input(), want);
        let key = TrustedKey::Ed(ringdl::signature::EdKey {
            id: s.key_id,
            key: [9; 32],
        });
        let _ = s.verify(&[key], data);
    }
    let _ = parse(data);
}

/// `signature_keys`: every key parsed from a trusted-key file is well formed: an SSH key's
/// blob starts with the type its line names; an allowed-signers line's principals and
/// namespaces come from the line.
pub fn signature_keys(data: &[u8]) {
    use ringdl::signature::{TrustedKey, parse_keys};
    let Ok(keys) = parse_keys(data) else { return };
    assert!(!keys.is_empty(), "Ok with no key");
    let text = String::from_utf8_lossy(data);
    for k in keys {
        if let TrustedKey::Ssh(s) = k {
            let n = s
                .blob
                .get(..4)
                .map(|b| u32::from_be_bytes(b.try_into().unwrap()) as usize);
            assert_eq!(n.and_then(|n| s.blob.get(4..4 + n)), Some(s.key_type.as_bytes()));
            assert!(text.contains(&s.key_type));
            if let Some(p) = &s.principals {
                assert!(text.contains(p.as_str()), "principals not from the line: {p:?}");
            }
        }
    }
}

/// `-i` lists (`ringdl::input::parse`): never a panic; an error names a line that exists
/// (or says the list has no URL); every entry's line is a line of the input, in
/// increasing order, and holds its URLs; `out=` stays relative without `..`;
/// `connections=` is within 1..=64; and writing the entries back as a list parses to the
/// same entries (line numbers aside).
pub fn input_list(data: &[u8]) {
    use ringdl::input::{Entry, parse};
    let lines = data.split(|&b| b == b'\n').count();
    let entries = match parse(data, "L") {
        Ok(e) => e,
        Err(e) => {
            let m = &e.msg;
            let n: Option<usize> = m
                .strip_prefix("L, line ")
                .and_then(|r| r.split(':').next())
                .and_then(|n| n.parse().ok());
            assert!(
                n.is_some_and(|n| (1..=lines).contains(&n)) || m == "L: no URL in the list",
                "an error that names no line of the input: {m}"
            );
            return;
        }
    };
    assert!(!entries.is_empty());
    let text = String::from_utf8_lossy(data);
    let text_lines: Vec<&str> = text.split('\n').collect();
    let mut last = 0;
    for e in &entries {
        assert!(
            e.line > last && e.line <= lines,
            "line {} after {last} of {lines}",
            e.line
        );
        last = e.line;
        assert!(!e.urls.is_empty(), "an entry without a URL: {e:?}");
        for u in &e.urls {
            assert!(
                text_lines[e.line - 1].contains(u.as_str()),
                "{u:?} is not on line {}",
                e.line
            );
        }
        if let Some(out) = &e.out {
            assert!(out.is_relative(), "{out:?}");
            assert!(
                !out.components().any(|c| c == std::path::Component::ParentDir),
                "{out:?}"
            );
        }
        assert!(e.connections.is_none_or(|c| (1..=64).contains(&c)));
    }
    let mut again = String::new();
    for e in &entries {
        again.push_str(&e.urls.join("\t"));
        again.push('\n');
        let mut opt = |k: &str, v: &str| again.push_str(&format!(" {k}={v}\n"));
        if let Some(o) = &e.out {
            opt("out", &o.to_string_lossy());
        }
        if let Some(d) = &e.dir {
            opt("dir", &d.to_string_lossy());
        }
        if let Some(c) = &e.checksum {
            let hex: String = c.expected.iter().map(|b| format!("{b:02x}")).collect();
            opt("checksum", &format!("{}={hex}", c.name));
        }
        for (n, v) in &e.headers {
            opt("header", &format!("{n}: {v}"));
        }
        if let Some(c) = e.connections {
            opt("connections", &c.to_string());
        }
    }
    let back = parse(again.as_bytes(), "L").unwrap_or_else(|e| panic!("{again:?} does not parse back: {}", e.msg));
    let strip = |v: &[Entry]| -> Vec<Entry> { v.iter().cloned().map(|e| Entry { line: 0, ..e }).collect() };
    assert_eq!(strip(&back), strip(&entries), "written back as {again:?}");
}

/// `zsync_control`: the input as a `.zsync` ([`ringdl::delta::zsync::Zsync::parse`]): an
/// error names the control file; a parsed one's pieces are its blocks (contiguous, the
/// last one short, remote = target), `ceil(Length / Blocksize)` of them, held by the input.
/// Scanning a seed (the input itself) finds the same blocks whatever the feed sizes, and
/// each block found is that block ([`ringdl::delta::Index::matches`]). Then the input as
/// a target: a control file made for it in `zsyncmake`'s format (block size and
/// `Hash-Lengths` from its first bytes) parses back, an edited copy scans the same in any
/// feed sizes to blocks that match, and the target itself, when its blocks differ (the
/// last one zero-padded), is found whole, each block in place.
pub fn zsync_control(data: &[u8]) {
    use ringdl::delta::Index;
    use ringdl::delta::zsync::Zsync;
    match Zsync::parse(data) {
        Err(e) => assert!(e.contains("zsync"), "an error that does not name the format: {e}"),
        Ok(z) => {
            let n = z.pieces().len() as u64;
            let bs = z.block_size();
            assert!(bs.is_power_of_two());
            assert_eq!(n, z.target_len().div_ceil(bs));
            let (_, rsum, ck) = z.hash_lengths();
            assert!(n * u64::from(rsum + ck) < data.len() as u64 || n == 0);
            check_zsync_pieces(&z);
            if bs <= 1 << 16 {
                zsync_scan_agrees(&z, data, &mut Rng::from(data));
            }
        }
    }
    let Some((&pick, _)) = data.split_first() else { return };
    let bs = 16usize << (pick % 6);
    let lengths = (1 + (pick >> 3) % 2, 1 + (pick >> 4) % 4, 3 + (pick >> 6) * 4);
    let control = make_zsync(data, bs, lengths);
    let z = Zsync::parse(&control).unwrap_or_else(|e| panic!("a control file made here: {e}"));
    assert_eq!(z.target_len(), data.len() as u64);
    check_zsync_pieces(&z);
    let mut rng = Rng::from(data);
    let mut seed = data.to_vec();
    for _ in 0..rng.below(4) {
        let at = rng.below(seed.len() + 1);
        match rng.below(3) {
            0 => seed
                .splice(at..at, (0..rng.below(2 * bs) + 1).map(|i| i as u8))
                .for_each(drop),
            1 => seed.drain(at..(at + rng.below(2 * bs)).min(seed.len())).for_each(drop),
            _ => {
                if let Some(b) = seed.get_mut(at) {
                    *b ^= 1;
                }
            }
        }
    }
    zsync_scan_agrees(&z, &seed, &mut rng);
    // Blocks as their sums see them: the last one zero-padded.
    let blocks: std::collections::HashSet<Vec<u8>> = data
        .chunks(bs)
        .map(|b| {
            let mut b = b.to_vec();
            b.resize(bs, 0);
            b
        })
        .collect();
    let can_start = lengths.0 == 1 || data.len() > bs;
    if blocks.len() == data.len().div_ceil(bs) && can_start {
        let found = zsync_scan_agrees(&z, data, &mut rng);
        for (p, f) in z.pieces().iter().zip(found) {
            assert_eq!(
                f,
                Some(ringdl::delta::Found::Target(p.target_start)),
                "the target as seed"
            );
        }
    }
}

fn check_zsync_pieces(z: &ringdl::delta::zsync::Zsync) {
    use ringdl::delta::Index;
    let mut at = 0;
    for p in z.pieces() {
        assert_eq!(p.target_start, at);
        assert!(p.target_len > 0 && p.target_len <= z.block_size());
        assert_eq!((p.remote_start, p.remote_len), (p.target_start, p.target_len));
        at += p.target_len;
    }
    assert_eq!(at, z.target_len());
    if let Some(p) = z.pieces().last() {
        assert!(p.target_len == z.block_size() || p.target_start + p.target_len == z.target_len());
    }
}

/// Scans `seed` whole, then in feed sizes from `rng`: the same result, every block found
/// is the block. Returns the result.
fn zsync_scan_agrees(z: &ringdl::delta::zsync::Zsync, seed: &[u8], rng: &mut Rng) -> Vec<Option<ringdl::delta::Found>> {
    use ringdl::delta::{Found, Index};
    let mut s = z.scanner(None);
    s.feed(seed);
    let whole = s.finish().to_vec();
    assert_eq!(whole.len(), z.pieces().len());
    let mut s = z.scanner(None);
    let mut rest = seed;
    while !rest.is_empty() {
        let n = (rng.below(3 * z.block_size() as usize) + 1).min(rest.len());
        s.feed(&rest[..n]);
        rest = &rest[n..];
    }
    assert_eq!(s.finish().to_vec(), whole, "feed sizes changed what was found");
    for (i, f) in whole.iter().enumerate() {
        let Some(Found::Target(o)) = *f else { continue };
        let p = z.pieces()[i];
        let bytes = seed.get(o as usize..(o + p.target_len) as usize);
        assert!(
            bytes.is_some_and(|b| z.matches(i, b)),
            "block {i} found at {o} is not the block"
        );
    }
    whole
}

/// A control file for `target` in `zsyncmake` 0.6.2's format (no SHA-1), blocks of `bs`
/// bytes, `Hash-Lengths` `(seq_matches, rsum_bytes, checksum_bytes)`.
fn make_zsync(target: &[u8], bs: usize, (seq, rsum, ck): (u8, u8, u8)) -> Vec<u8> {
    use md4::{Digest, Md4};
    let mut out = format!(
        "zsync: 0.6.2\nBlocksize: {bs}\nLength: {}\nHash-Lengths: {seq},{rsum},{ck}\nURL: t\n\n",
        target.len()
    )
    .into_bytes();
    for block in target.chunks(bs) {
        let mut padded = block.to_vec();
        padded.resize(bs, 0);
        let (mut a, mut b) = (0u16, 0u16);
        for &c in &padded {
            a = a.wrapping_add(u16::from(c));
            b = b.wrapping_add(a);
        }
        let r = [(a >> 8) as u8, a as u8, (b >> 8) as u8, b as u8];
        out.extend_from_slice(&r[4 - usize::from(rsum)..]);
        out.extend_from_slice(&Md4::digest(&padded)[..usize::from(ck)]);
    }
    out
}

/// `zck_header`: a `.zck` file's start (lead, header, maybe chunks). `head_len` over the
/// growing prefixes says "not yet" until it knows, then one length (or one refusal) for
/// good; `Zck::parse` never panics, as given and resealed (the header checksum made right
/// again, so mutations reach the index); a parsed index's pieces tile the target and its
/// remote ranges follow the header; any shorter head is refused; every piece opened from
/// the input's bytes gives no more than its length, and a refusal names its chunk; the
/// input scanned as a seed (as a `.zck`, and from its second byte as a plain seed) finds
/// the same pieces whatever the feed sizes, a plain find holding the piece's bytes.
///
/// Corpus (`fuzz/corpus/zck_header/`, made with Debian's zck 1.2.3): whole files
/// `text-u.zck` (`zck -u`), `text.zck`, `text-dict-u.zck` (`-u -D`, a raw dictionary),
/// `rand-none-u.zck` (`-u --compression-format=none`); headers of a 2 MB random file
/// `big-u.head`, `big.head`, `big-sha512.head` (`-h sha512`); and `text-u.zck` edited and
/// resealed: `.lying.zck` (a chunk's length 1000 short), `.optsig.zck` (an optional
/// element, a signature, trailing bytes), `text.sha1-lead.zck`, `text.sha1-chunks.zck`
/// (SHA-1 checksums, which zck accepts but does not write), `streams.head` (flag 0),
/// `comp1.head` (compression 1), `count.head` (a count one too many); and cut or broken:
/// `.truncated`, `.lead`, `.flipped.head` (checksum mismatch), `detached.head` (`\0ZHR1`),
/// `huge.lead` (a 1 TiB header).
pub fn zck_header(data: &[u8]) {
    use ringdl::delta::zck;
    let mut settled: Option<Result<Option<u64>, String>> = None;
    for k in 0..=data.len().min(128) {
        let r = zck::head_len(&data[..k]);
        if let Some(s) = &settled {
            assert_eq!(r.is_err(), s.is_err(), "head_len of {k} bytes: {r:?} after {s:?}");
            if let (Ok(Some(a)), Ok(Some(b))) = (&r, s) {
                assert_eq!(a, b, "head_len changed at {k} bytes");
            }
        } else if !matches!(r, Ok(None)) {
            settled = Some(r);
        }
    }
    zck_checks(data);
    let mut sealed = data.to_vec();
    if zck::reseal(&mut sealed).is_ok() {
        zck_checks(&sealed);
    }
}

/// `len` bytes of `src` from `start`, if it has them.
fn zck_bytes(src: &[u8], start: u64, len: u64) -> Option<&[u8]> {
    let start = usize::try_from(start).ok()?;
    src.get(start..start.checked_add(usize::try_from(len).ok()?)?)
}

/// The checks of [`zck_header`] on one input.
fn zck_checks(data: &[u8]) {
    use ringdl::delta::zck::{self, Zck};
    use ringdl::delta::{Found, Index};
    let Ok(mut z) = Zck::parse(data) else { return };
    let n = z.head_len();
    assert_eq!(zck::head_len(data), Ok(Some(n)));
    assert!(
        Zck::parse(&data[..n as usize - 1]).is_err(),
        "a head one byte short parsed"
    );
    let (mut target, mut remote) = (0, z.pieces().first().map_or(n, |p| p.remote_start));
    assert!(remote >= n);
    for p in z.pieces() {
        assert_eq!(
            (p.target_start, p.remote_start),
            (target, remote),
            "pieces do not tile: {p:?}"
        );
        assert!(
            p.target_len > 0 && p.target_len <= zck::MAX_CHUNK_LEN && p.remote_len > 0,
            "{p:?}"
        );
        target += p.target_len;
        remote += p.remote_len;
    }
    assert_eq!(z.target_len(), target);
    assert_eq!(z.file_len(), remote.max(n));
    if let Some((a, b)) = z.always_fetch() {
        let _ = z.take_always(zck_bytes(data, a, b - a).unwrap_or(&data[..1]));
    }
    let mut out = Vec::new();
    for (i, p) in z.pieces().iter().enumerate().take(8) {
        // The piece's bytes when the input holds them, else its first byte (a length error).
        let fetched = zck_bytes(data, p.remote_start, p.remote_len).unwrap_or(&data[..1]);
        match z.open_fetched(i, fetched, &mut out) {
            Ok(()) => assert_eq!(out.len() as u64, p.target_len),
            Err(e) => {
                assert!(e.contains(&format!("chunk {}", i + 1)), "{e}");
                assert!(out.is_empty(), "bytes left after a refusal");
            }
        }
    }
    let mut rng = Rng::from(data);
    for seed in [data, &data[1.min(data.len())..]] {
        let scan = |split: &mut dyn FnMut() -> usize| {
            let mut s = z.scanner(None);
            let mut rest = seed;
            while !rest.is_empty() {
                let k = split().clamp(1, rest.len());
                s.feed(&rest[..k]);
                rest = &rest[k..];
            }
            s.finish().to_vec()
        };
        let whole = scan(&mut || usize::MAX);
        assert_eq!(whole.len(), z.pieces().len());
        assert_eq!(
            scan(&mut || 1 + rng.below(700)),
            whole,
            "the feed sizes changed what was found"
        );
        for (i, f) in whole.iter().enumerate() {
            let p = z.pieces()[i];
            match *f {
                Some(Found::Target(at)) => {
                    assert!(
                        at + p.target_len <= seed.len() as u64,
                        "piece {i} found past the seed's end"
                    );
                    assert!(
                        z.matches(i, &seed[at as usize..(at + p.target_len) as usize]),
                        "piece {i} found where it is not"
                    );
                }
                Some(Found::Remote(at)) => assert!(at + p.remote_len <= seed.len() as u64),
                None => {}
            }
        }
    }
}
