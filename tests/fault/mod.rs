//! A scriptable HTTP/HTTPS test server that misbehaves on purpose (issue 4).
//!
//! It runs in the test process (std threads, std::net, rustls), serves a
//! deterministic pseudo-random body of a chosen size at *every* path, answers
//! `Range: bytes=a-b`, `bytes=a-` and `bytes=-n` correctly by default (206 with
//! Content-Range, 416 `bytes */N` when unsatisfiable, keep-alive), and records every
//! request. Faults are scripted with a builder:
//!
//! ```ignore
//! let srv = FaultServer::builder()
//!     .size(4 << 20)
//!     .tls()                                   // HTTPS; srv.ca_pem() for --ca-certificate
//!     .fault_on(When::Request(3), Fault::Close { after: 12345, how: Close::Rst })
//!     .fault(Fault::Chunked { chunk: 10_000, extensions: true, trailers: true })
//!     .start();
//! let url = srv.url("file.bin");
//! // ... run ringdl ...
//! assert_eq!(srv.requests().len(), 5);
//! ```
//!
//! Every rule whose [`When`] matches a request applies its [`Fault`] to the response
//! plan, in the order the rules were added, so faults compose (a chunked 206 that
//! is cut after 1000 bytes: two rules). Requests are numbered from 1 in the order
//! the server finished reading them (across all connections).
//!
//! Random choices use [`crate::util::XorShift`], the one generator of the test crate.
pub mod proxy;
mod tls;

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustls::{ServerConfig, ServerConnection, StreamOwned};
use sha2::{Digest, Sha256};

use crate::util::XorShift;

// ---------------------------------------------------------------------------
// Public API

/// How a connection is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Close {
    /// TCP FIN (`shutdown(SHUT_WR)`), without TLS close_notify: a cut.
    Fin,
    /// TCP RST (`SO_LINGER` 0, then close).
    Rst,
    /// TLS close_notify, then FIN (plain HTTP: same as [`Close::Fin`]): a clean close.
    Clean,
    /// `close(2)` at once, nothing read after it: FIN, and the kernel answers what the
    /// client sends next with RST (as nginx closes a kept-alive connection it is done with).
    Drop,
}

/// Retry-After value of a [`Fault::Status`].
#[derive(Clone, Debug)]
pub enum RetryAfter {
    /// `Retry-After: <n>` (delay-seconds).
    Seconds(u64),
    /// `Retry-After: <IMF-fixdate>` this many seconds after the response is sent.
    DateIn(u64),
    /// A raw value.
    Raw(String),
}

/// Which requests a rule applies to.
#[derive(Clone, Debug)]
pub enum When {
    /// Every request.
    Always,
    /// The request with this number (1-based, arrival order over all connections).
    Request(u64),
    /// These request numbers.
    Requests(Vec<u64>),
    /// Request numbers `>= n`.
    From(u64),
    /// Requests whose path (request-target without the query) equals this.
    Path(String),
    /// Requests whose Range does not start at byte 0 (the segments after ringdl's
    /// first request, which asks for `bytes=0-…`).
    Segment,
    /// Requests whose Range starts at or after this byte.
    RangeFrom(u64),
    /// Both.
    And(Box<When>, Box<When>),
    /// The first request this selects on which the fault takes effect (a short 206 on
    /// a range already shorter than its `max` does not count), and no other.
    Once(Box<When>),
    /// Requests that arrive less than this after the server's first request (a server
    /// restarting, an S3 "slow down" burst).
    Within(Duration),
    /// Requests that came on a connection that carried one before (a kept-alive one).
    Kept,
    /// Requests that arrive while more than this many connections are open (a server that
    /// counts idle keep-alive connections toward a per-client cap). Counted 50 ms after
    /// the request's head was read, so that connections the client opened together have
    /// all been accepted.
    Crowded(u64),
}

impl When {
    /// Convenience: `When::Path(p.into())`.
    pub fn path(p: &str) -> When {
        When::Path(p.to_owned())
    }
}

/// Something wrong (or just unusual) with a response. Faults modify a response plan
/// that starts out correct; the ones that act on different parts compose.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Range ignored: `200` with the whole body.
    IgnoreRange,
    /// `206` whose bytes start at 0 whatever the Range asked (honest Content-Range
    /// `0-…`, as long as was asked).
    RangeFromZero,
    /// `206` with at most `max` bytes from the asked start (honest Content-Range).
    ShortRange { max: u64 },
    /// The Content-Range start is off by `shift` bytes; the body is the asked bytes.
    ContentRangeShift { shift: i64 },
    /// The Content-Range complete length is `total` (the body is right).
    ContentRangeTotal { total: u64 },
    /// The Content-Range complete length is unknown: `bytes a-b/*` (RFC 9110 §14.4; the
    /// body is right).
    ContentRangeUnknownTotal,
    /// `416 Range Not Satisfiable` with `Content-Range: bytes */N` (N = real size).
    Unsatisfiable,
    /// Close the connection after `after` body bytes (0 = right after the head).
    Close { after: u64, how: Close },
    /// Close at a random body offset (seeded per request); `how` random when None.
    CloseRandom { how: Option<Close> },
    /// Send the head, then nothing for `secs` seconds, then the body.
    StallAfterHead { secs: u64 },
    /// Read the request and never answer: the connection stays open, silent, until the
    /// client closes it.
    NoResponse,
    /// Send `after` body bytes, then nothing for `secs` seconds, then the rest.
    StallMidBody { after: u64, secs: u64 },
    /// Answer with this status (no body but a short text), optionally Retry-After.
    Status { code: u16, retry_after: Option<RetryAfter> },
    /// A redirect; in `location`, `{base}` becomes this server's `scheme://host:port`
    /// and `{authority}` its `host:port`.
    Redirect { code: u16, location: String },
    /// Chunked body (no Content-Length), `chunk` bytes a chunk, optional chunk
    /// extensions (`;name=value;flag`) and trailer fields.
    Chunked {
        chunk: usize,
        extensions: bool,
        trailers: bool,
    },
    /// Chunked body *and* a Content-Length of the unencoded size.
    LengthAndChunked,
    /// A second Content-Length field with this value (after the right one).
    ConflictingLength { second: u64 },
    /// The same Content-Length twice (`Content-Length: n` two times).
    RepeatedLength,
    /// No Content-Length: the body ends when the connection closes (`Connection: close`).
    /// Over TLS the end is a close_notify unless [`Fault::NoCloseNotify`] also applies.
    NoLength,
    /// Over TLS: end a close-delimited body (and any close) with a bare FIN.
    NoCloseNotify,
    /// Set the validator: `ETag: "<value>"`.
    ETag(String),
    /// Set `Last-Modified` (raw value).
    LastModified(String),
    /// Serve a different file from now on: the body generated from `seed` (same size).
    Content { seed: u64 },
    /// An extra header field.
    Header(String, String),
    /// `Connection: close` and close after the response.
    ConnectionClose,
    /// Close the connection as `how` once the whole response is out, though its head said
    /// `Connection: keep-alive` (a server that closes after every response and says
    /// nothing). Fires where the response ends.
    CloseAfter { how: Close },
    /// Read the request and close the connection as `how` without a byte of answer: what a
    /// client meets when its request crosses the server's close of an idle kept-alive
    /// connection. Fires at the asked start.
    Unanswered { how: Close },
    /// Replace the status line with this text (no CRLF).
    StatusLine(String),
    /// Insert a folded field (obs-fold: `X-Folded: a` + CRLF + ` b`).
    ObsFold,
    /// Insert a field whose value contains a bare CR.
    BareCr,
    /// Pad the head beyond `bytes` bytes with `X-Pad-<i>` fields of 1000 bytes.
    HugeHead { bytes: usize },
    /// Add `n` extra small fields.
    ManyFields { n: usize },
    /// A `206` in `multipart/byteranges` form (RFC 9110 §14.6), as Apache Traffic Server
    /// answers a single range; the part's Content-Range is the one the plan would send
    /// (so [`Fault::ContentRangeShift`] composes with it). No effect on other statuses.
    Multipart(Multipart),
    /// With [`Builder::cap`]: the request stops counting toward the cap once `after` body
    /// bytes are written *and* the cap has turned a request away, while the rest of its
    /// body still goes out at [`Builder::rate`]. A response the server is done with whose
    /// tail is still on its way: nginx's `limit_conn` lets a request go when its last byte
    /// is in the kernel's buffers (its `limit_rate` sends a second's worth ahead), which a
    /// slow or far client reads well after. Fires where it lets go.
    LeaveCap { after: u64 },
    /// Runs the test's `Hook` once the request is read, before any byte of the answer
    /// goes out (the answer unchanged): what the test does there happens after the client
    /// sent the request and before it learns anything of the answer — no timing.
    Before(Hook),
}

/// A test's own step for [`Fault::Before`].
#[derive(Clone)]
pub struct Hook(pub Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hook")
    }
}

/// The shape of a [`Fault::Multipart`] answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Multipart {
    /// One part: `--B`, its Content-Type and Content-Range, the bytes, `--B--`.
    One,
    /// The range split in two parts (when it holds 2 bytes or more).
    Two,
    /// `Content-Type: multipart/byteranges` without a boundary parameter.
    NoBoundary,
    /// The body's delimiter names another boundary than the Content-Type.
    WrongBoundary,
}

/// One request as the server read it.
#[derive(Clone, Debug)]
pub struct Request {
    /// 1-based arrival number over all connections.
    pub n: u64,
    /// Connection id (1-based, in accept order).
    pub conn: u64,
    /// 1-based number of the request on its connection.
    pub conn_seq: u64,
    /// `GET`, `HEAD`, …
    pub method: String,
    /// Request-target as sent (`/a/b?q`).
    pub target: String,
    /// The Range field value, if any.
    pub range: Option<String>,
    /// All fields, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// When the head was read.
    pub at: Instant,
}

impl Request {
    /// The target without the query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }

    /// First value of a field (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    /// Start offset of a `bytes=a-…` Range, if any.
    pub fn range_start(&self) -> Option<u64> {
        parse_range_spec(self.range.as_deref()?).and_then(|(a, _)| a)
    }

    /// True when this request asks for byte `at` of a `size`-byte file (no Range: the
    /// whole file).
    pub fn covers(&self, at: u64, size: u64) -> bool {
        match self.range.as_deref().map(parse_range_spec) {
            None | Some(None) => true,
            Some(Some((Some(a), b))) => a <= at && b.is_none_or(|b| at <= b),
            Some(Some((None, Some(n)))) => size.saturating_sub(n) <= at,
            Some(Some((None, None))) => true,
        }
    }

    /// End offset (inclusive) of a `bytes=a-b` Range, if any.
    pub fn range_end(&self) -> Option<u64> {
        parse_range_spec(self.range.as_deref()?).and_then(|(_, b)| b)
    }
}

/// One fault that took effect on a request (the server's fired-faults counter).
#[derive(Clone, Debug)]
pub struct Fired {
    /// The rule: 0-based, in the order the rules were added to the [`Builder`].
    pub rule: usize,
    /// The request it struck.
    pub request: Request,
    /// File offset where it struck: the start of the asked range for a fault of the
    /// head or of the whole response (status, Content-Range, framing, content, …); the
    /// first byte not sent for a cut, a stall or a short 206.
    pub at: u64,
}

/// Builder: `FaultServer::builder().size(..).tls().fault(..).start()`.
pub struct Builder {
    size: u64,
    seed: u64,
    tls: bool,
    rules: Vec<(When, Fault)>,
    etag: Option<String>,
    rate: Option<u64>,
    listen_after: Option<Duration>,
    cap: Option<u64>,
    cap_status: u16,
    close_lag: Duration,
    idle_timeout: Option<Duration>,
}

impl Builder {
    /// Body size in bytes (default 1 MiB).
    pub fn size(mut self, size: u64) -> Builder {
        self.size = size;
        self
    }

    /// Seed of the body content and of every random choice (default 1).
    pub fn seed(mut self, seed: u64) -> Builder {
        self.seed = seed;
        self
    }

    /// Serve HTTPS (certificate for localhost / 127.0.0.1 / ::1 from a test CA).
    pub fn tls(mut self) -> Builder {
        self.tls = true;
        self
    }

    /// HTTPS when `on`.
    pub fn tls_if(mut self, on: bool) -> Builder {
        self.tls = on;
        self
    }

    /// Default validator sent on every response: `ETag: "<value>"` (default none).
    pub fn etag(mut self, value: &str) -> Builder {
        self.etag = Some(value.to_owned());
        self
    }

    /// Sends every body at most `bytes_per_sec` fast (each write of 64 KiB or less waits
    /// its turn; no burst at the start, unlike nginx's `limit_rate`), so that what
    /// [`FaultServer::sent`] counts is about what the client read (default: unpaced).
    pub fn rate(mut self, bytes_per_sec: u64) -> Builder {
        self.rate = Some(bytes_per_sec.max(1));
        self
    }

    /// Listens only `delay` after [`Builder::start`]: until then connects to its port (picked
    /// free beforehand) are refused (ECONNREFUSED), as from a server that is restarting.
    pub fn listen_after(mut self, delay: Duration) -> Builder {
        self.listen_after = Some(delay);
        self
    }

    /// A per-client connection cap, as nginx's `limit_conn n` (the test client is the only
    /// client): a request whose head arrives while `n` others are served is answered `503`
    /// (no Retry-After), 100 ms later (so that the heads of the ones served go first). A request is served from its head until its last body byte is
    /// written (or it fails), unless [`Fault::LeaveCap`] lets it go earlier. See
    /// [`FaultServer::refused`], [`FaultServer::peak_bodies`].
    pub fn cap(mut self, n: u64) -> Builder {
        self.cap = Some(n);
        self
    }

    /// A closed connection counts as open ([`When::Crowded`]) this much longer: a server
    /// that sees a client's close late (its thread not yet scheduled).
    pub fn close_lag(mut self, lag: Duration) -> Builder {
        self.close_lag = lag;
        self
    }

    /// Closes a kept-alive connection ([`Close::Drop`]) on which no new request began
    /// within `idle` of the last response (nginx's `keepalive_timeout`); counted in
    /// [`FaultServer::idle_closes`].
    pub fn idle_timeout(mut self, idle: Duration) -> Builder {
        self.idle_timeout = Some(idle);
        self
    }

    /// The status [`Builder::cap`] turns requests away with (default 503; 429 as nginx
    /// `limit_conn_status 429`).
    pub fn cap_status(mut self, code: u16) -> Builder {
        self.cap_status = code;
        self
    }

    /// A fault on every request.
    pub fn fault(self, fault: Fault) -> Builder {
        self.fault_on(When::Always, fault)
    }

    /// A fault on the requests `when` selects.
    pub fn fault_on(mut self, when: When, fault: Fault) -> Builder {
        self.rules.push((when, fault));
        self
    }

    /// Binds `127.0.0.1:0` and starts the accept thread (with [`Builder::listen_after`]:
    /// picks the port now, binds it later).
    pub fn start(self) -> FaultServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the fault server");
        let addr = listener.local_addr().unwrap();
        // Listening later: the port is let go now and bound again when the delay is over.
        let listener = self.listen_after.is_none().then_some(listener);
        let dir = tempfile::Builder::new()
            .prefix("ringdl-fault-")
            .tempdir()
            .expect("fault server temp dir");
        let (ca_pem, tls_config) = if self.tls {
            let (p, c) = tls::make(dir.path());
            (Some(p), Some(c))
        } else {
            (None, None)
        };
        let scheme = if self.tls { "https" } else { "http" };
        let body = Arc::new(content(self.size, self.seed));
        let sha256 = hex(&Sha256::digest(&*body));
        let shared = Arc::new(Shared {
            size: self.size,
            seed: self.seed,
            base: format!("{scheme}://{addr}"),
            body: body.clone(),
            alt: Mutex::new(Vec::new()),
            spent: self.rules.iter().map(|_| AtomicBool::new(false)).collect(),
            rules: self.rules,
            etag: self.etag,
            rate: self.rate,
            cap: self.cap,
            cap_status: self.cap_status,
            close_lag: self.close_lag,
            idle_timeout: self.idle_timeout,
            idle_closes: AtomicU64::new(0),
            served: Mutex::new(Served::default()),
            sent: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
            next_req: AtomicU64::new(1),
            stop: AtomicBool::new(false),
            conns: AtomicU64::new(0),
            open: AtomicU64::new(0),
            first_at: Mutex::new(None),
            fired: Mutex::new(Vec::new()),
        });
        let sh = shared.clone();
        let delay = self.listen_after;
        let accept = match (listener, delay) {
            (Some(listener), _) => thread::spawn(move || accept_loop(listener, sh, tls_config)),
            (None, delay) => thread::spawn(move || {
                thread::sleep(delay.unwrap_or_default());
                let listener = TcpListener::bind(addr).expect("binding the fault server's port later");
                accept_loop(listener, sh, tls_config)
            }),
        };
        FaultServer {
            addr,
            scheme,
            shared,
            body,
            sha256,
            ca_pem,
            _dir: dir,
            accept: Some(accept),
        }
    }
}

/// A running fault server; stops (and removes its temp dir) when dropped.
pub struct FaultServer {
    addr: SocketAddr,
    scheme: &'static str,
    shared: Arc<Shared>,
    body: Arc<Vec<u8>>,
    sha256: String,
    ca_pem: Option<PathBuf>,
    _dir: tempfile::TempDir,
    accept: Option<thread::JoinHandle<()>>,
}

impl FaultServer {
    /// A builder with defaults: 1 MiB, seed 1, plain HTTP, no faults.
    pub fn builder() -> Builder {
        Builder {
            size: 1 << 20,
            seed: 1,
            tls: false,
            rules: Vec::new(),
            etag: None,
            rate: None,
            listen_after: None,
            cap: None,
            cap_status: 503,
            close_lag: Duration::ZERO,
            idle_timeout: None,
        }
    }

    /// Per request that got body bytes, in arrival order: the file offset of its first
    /// body byte and the body bytes written to its socket (what the client read, plus
    /// what the kernel still held when it closed).
    pub fn sent(&self) -> Vec<(u64, u64)> {
        let mut v = self.shared.sent.lock().unwrap().clone();
        v.sort_unstable_by_key(|e| e.0);
        v.into_iter().map(|(_, start, n)| (start, n)).collect()
    }

    /// `scheme://127.0.0.1:port/<path>` (`path` without the leading slash).
    pub fn url(&self, path: &str) -> String {
        format!("{}/{}", self.shared.base, path.trim_start_matches('/'))
    }

    /// `scheme://127.0.0.1:port`.
    pub fn base(&self) -> &str {
        &self.shared.base
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// True for HTTPS.
    pub fn is_tls(&self) -> bool {
        self.scheme == "https"
    }

    /// CA PEM for `--ca-certificate` (HTTPS servers only).
    #[track_caller]
    pub fn ca_pem(&self) -> &Path {
        self.ca_pem.as_deref().expect("ca_pem() of a plain-HTTP fault server")
    }

    /// The body served (before any [`Fault::Content`]).
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Body size.
    pub fn size(&self) -> u64 {
        self.shared.size
    }

    /// Lower-case hex SHA-256 of [`FaultServer::body`].
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.log.lock().unwrap().clone()
    }

    /// Requests [`Builder::cap`] turned away (answered 503) so far.
    pub fn refused(&self) -> u64 {
        self.shared.served.lock().unwrap().refused
    }

    /// How many requests for `path` [`Builder::cap`] turned away.
    pub fn refused_for(&self, path: &str) -> usize {
        let s = self.shared.served.lock().unwrap();
        s.refused_paths.iter().filter(|p| *p == path).count()
    }

    /// The most response bodies the server was writing at once (with [`Builder::cap`]),
    /// those [`Fault::LeaveCap`] let go of included: what the client sees arriving at once.
    /// (The cap's own count never exceeds its `n`.)
    pub fn peak_bodies(&self) -> u64 {
        self.shared.served.lock().unwrap().peak_bodies
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.conns.load(Ordering::SeqCst)
    }

    /// Kept-alive connections [`Builder::idle_timeout`] closed so far.
    pub fn idle_closes(&self) -> u64 {
        self.shared.idle_closes.load(Ordering::SeqCst)
    }

    /// Every fault that took effect so far, in order.
    pub fn fired(&self) -> Vec<Fired> {
        self.shared.fired.lock().unwrap().clone()
    }

    /// The faults rule `rule` (0-based, in builder order) fired.
    pub fn fired_on(&self, rule: usize) -> Vec<Fired> {
        self.fired().into_iter().filter(|f| f.rule == rule).collect()
    }

    /// True when a request after the one `f` struck asks for the byte it struck at.
    pub fn asked_again(&self, f: &Fired) -> bool {
        self.requests()
            .iter()
            .any(|r| r.n > f.request.n && r.covers(f.at, self.size()))
    }

    /// Asserts that every rule fired at least once: a fault test whose fault never fired
    /// tested nothing (choose requests that will exist: see `cut_requests` in faults.rs).
    #[track_caller]
    pub fn assert_all_fired(&self) {
        let fired = self.fired();
        let silent: Vec<String> = (0..self.shared.rules.len())
            .filter(|i| !fired.iter().any(|f| f.rule == *i))
            .map(|i| format!("rule {i}: {:?} on {:?}", self.shared.rules[i].1, self.shared.rules[i].0))
            .collect();
        assert!(
            silent.is_empty(),
            "faults that never fired (the test tested nothing):\n{}\n--- requests ---\n{}",
            silent.join("\n"),
            self.describe()
        );
    }

    /// Asserts that rule `rule` fired and that, after each time it did, a later request
    /// asked again for the byte it struck: the fault was retried, not ignored. Returns
    /// how many times it fired.
    #[track_caller]
    pub fn assert_retried(&self, rule: usize) -> usize {
        let fired = self.fired_on(rule);
        assert!(!fired.is_empty(), "rule {rule} never fired\n{}", self.describe());
        for f in &fired {
            assert!(
                self.asked_again(f),
                "rule {rule} struck request #{} at byte {} and no later request asked for that byte again: \
                 the fault was ignored, not retried\n{}",
                f.request.n,
                f.at,
                self.describe()
            );
        }
        fired.len()
    }

    /// The request log as one line per request (for assertion messages); a long log
    /// is cut to its first and last 25 requests.
    pub fn describe(&self) -> String {
        let reqs = self.requests();
        let fired = self.fired();
        let n = reqs.len();
        reqs.iter()
            .enumerate()
            .filter(|(i, _)| n <= 60 || *i < 25 || *i >= n - 25)
            .map(|(i, r)| {
                (
                    if n > 60 && i == n - 25 {
                        format!("… {} more …\n", n - 50)
                    } else {
                        String::new()
                    },
                    r,
                )
            })
            .map(|(gap, r)| {
                gap + &format!(
                    "#{} conn {}.{} {} {} range={:?}{}",
                    r.n,
                    r.conn,
                    r.conn_seq,
                    r.method,
                    r.target,
                    r.range,
                    fired
                        .iter()
                        .filter(|f| f.request.n == r.n)
                        .map(|f| format!(" FAULT rule {} at {}", f.rule, f.at))
                        .collect::<String>()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for FaultServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

/// The deterministic body of `size` bytes for `seed` (xorshift64*, little-endian words).
pub fn content(size: u64, seed: u64) -> Vec<u8> {
    let mut rng = XorShift::new(seed.wrapping_add(0x0F0F_1234));
    let mut v = vec![0u8; size as usize];
    for w in v.chunks_mut(8) {
        let x = rng.next_u64().to_le_bytes();
        w.copy_from_slice(&x[..w.len()]);
    }
    v
}

/// Lower-case hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// IMF-fixdate (RFC 9110 §5.6.7) of a time: `Sun, 06 Nov 1994 08:49:37 GMT`.
pub fn http_date(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).unwrap().as_secs();
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Civil from days (H. Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let wd = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days.rem_euclid(7)) as usize];
    let mon = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(m - 1) as usize];
    format!(
        "{wd}, {d:02} {mon} {y} {:02}:{:02}:{:02} GMT",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

// ---------------------------------------------------------------------------
// Internals

struct Shared {
    size: u64,
    seed: u64,
    base: String,
    body: Arc<Vec<u8>>,
    /// Bodies of [`Fault::Content`] seeds, generated on first use.
    alt: Mutex<Vec<(u64, Arc<Vec<u8>>)>>,
    rules: Vec<(When, Fault)>,
    /// Per rule: a [`When::Once`] rule that already took effect.
    spent: Vec<AtomicBool>,
    etag: Option<String>,
    /// [`Builder::rate`].
    rate: Option<u64>,
    /// [`Builder::cap`], and the status it answers with ([`Builder::cap_status`]).
    cap: Option<u64>,
    cap_status: u16,
    /// [`Builder::close_lag`].
    close_lag: Duration,
    /// [`Builder::idle_timeout`], and the connections it closed.
    idle_timeout: Option<Duration>,
    idle_closes: AtomicU64,
    /// The cap's count and what it saw.
    served: Mutex<Served>,
    /// Per request: (number, first file offset, body bytes written).
    sent: Mutex<Vec<(u64, u64, u64)>>,
    log: Mutex<Vec<Request>>,
    next_req: AtomicU64,
    stop: AtomicBool,
    conns: AtomicU64,
    /// Connections open now (accepted, not yet closed by either side).
    open: AtomicU64,
    /// When the first request arrived ([`When::Within`]).
    first_at: Mutex<Option<Instant>>,
    /// Every fault that took effect, in order.
    fired: Mutex<Vec<Fired>>,
}

impl Shared {
    fn alt_body(&self, seed: u64) -> Arc<Vec<u8>> {
        let mut alt = self.alt.lock().unwrap();
        if let Some((_, b)) = alt.iter().find(|(s, _)| *s == seed) {
            return b.clone();
        }
        let b = Arc::new(content(self.size, seed));
        alt.push((seed, b.clone()));
        b
    }

    /// `n` more body bytes of request `req` (whose body starts at file offset `start`)
    /// went to its socket.
    fn count_sent(&self, req: u64, start: u64, n: u64) {
        let mut sent = self.sent.lock().unwrap();
        match sent.iter_mut().find(|e| e.0 == req) {
            Some(e) => e.2 += n,
            None => sent.push((req, start, n)),
        }
    }

    /// Records that rule `rule` took effect on `req` at file offset `at`.
    fn fire(&self, rule: usize, req: &Request, at: u64) {
        self.fired.lock().unwrap().push(Fired {
            rule,
            request: req.clone(),
            at,
        });
    }

    fn fire_opt(&self, rule: Option<usize>, req: &Request, at: u64) {
        if let Some(rule) = rule {
            self.fire(rule, req, at);
        }
    }

    /// Sleeps `d` in small steps; false when the server is stopping.
    fn sleep(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        while Instant::now() < end {
            if self.stop.load(Ordering::SeqCst) {
                return false;
            }
            thread::sleep(Duration::from_millis(20));
        }
        true
    }
}

/// What [`Builder::cap`] counts.
#[derive(Default)]
struct Served {
    /// Requests the cap counts now.
    counted: u64,
    /// Bodies being written now (counted ones and those let go).
    bodies: u64,
    /// The most `bodies` at once.
    peak_bodies: u64,
    /// Requests turned away.
    refused: u64,
    /// The paths of the requests turned away, in order.
    refused_paths: Vec<String>,
}

/// One request admitted under [`Builder::cap`]: counted until [`Admitted::leave`] or drop,
/// its body until drop.
struct Admitted<'a> {
    sh: &'a Shared,
    counted: bool,
}

impl<'a> Admitted<'a> {
    /// Admits `req` under the cap, or None when `cap` others are served (counted refused).
    fn try_new(sh: &'a Shared, cap: u64, path: &str) -> Option<Admitted<'a>> {
        let mut s = sh.served.lock().unwrap();
        if s.counted >= cap {
            s.refused += 1;
            s.refused_paths.push(path.to_owned());
            return None;
        }
        s.counted += 1;
        s.bodies += 1;
        s.peak_bodies = s.peak_bodies.max(s.bodies);
        Some(Admitted { sh, counted: true })
    }

    /// Stops counting toward the cap (the body still runs); true when it did now.
    fn leave(&mut self) -> bool {
        let mut s = self.sh.served.lock().unwrap();
        if !self.counted || s.refused == 0 {
            return false;
        }
        s.counted -= 1;
        self.counted = false;
        true
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let mut s = self.sh.served.lock().unwrap();
        s.bodies -= 1;
        if self.counted {
            s.counted -= 1;
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn accept_loop(listener: TcpListener, sh: Arc<Shared>, tls: Option<Arc<ServerConfig>>) {
    // Non-blocking accept polled every 2 ms: stopping never depends on being able to
    // connect to ourselves (a client that floods connections can exhaust ports).
    listener.set_nonblocking(true).expect("non-blocking listener");
    loop {
        if sh.stop.load(Ordering::SeqCst) {
            return;
        }
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(_) => {
                thread::sleep(Duration::from_millis(2));
                continue;
            }
        };
        let _ = stream.set_nonblocking(false);
        let id = sh.conns.fetch_add(1, Ordering::SeqCst) + 1;
        sh.open.fetch_add(1, Ordering::SeqCst);
        let sh = sh.clone();
        let tls = tls.clone();
        thread::spawn(move || {
            let _ = stream.set_nodelay(true);
            let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
            let conn = match tls {
                Some(cfg) => match ServerConnection::new(cfg) {
                    Ok(c) => Conn::Tls(Box::new(StreamOwned::new(c, stream))),
                    Err(_) => {
                        sh.open.fetch_sub(1, Ordering::SeqCst);
                        return;
                    }
                },
                None => Conn::Plain(stream),
            };
            let _ = serve(conn, id, &sh);
            thread::sleep(sh.close_lag);
            sh.open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

enum Conn {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ServerConnection, TcpStream>>),
}

impl Conn {
    fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => &s.sock,
        }
    }

    /// Closes as asked; `notify` false suppresses TLS close_notify.
    fn close(mut self, how: Close) {
        let _ = self.flush();
        match how {
            Close::Rst => {
                let _ = rustix::net::sockopt::set_socket_linger(self.tcp(), Some(Duration::ZERO));
            }
            Close::Clean => {
                if let Conn::Tls(s) = &mut self {
                    s.conn.send_close_notify();
                    let _ = s.flush();
                }
                let _ = self.tcp().shutdown(Shutdown::Write);
                // Give the peer a moment to read before the socket goes away.
                drain_briefly(self.tcp());
            }
            Close::Fin => {
                let _ = self.tcp().shutdown(Shutdown::Write);
                drain_briefly(self.tcp());
            }
            Close::Drop => {}
        }
    }
}

/// After our FIN, read (and discard) what the client still sends for a short while,
/// so closing never turns into an RST because of unread data.
fn drain_briefly(s: &TcpStream) {
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 4096];
    let mut s = s;
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

/// Reads one request head; None on EOF before any byte.
fn read_head(r: &mut BufReader<Conn>) -> io::Result<Option<Vec<String>>> {
    let mut lines = Vec::new();
    let mut total = 0;
    loop {
        let mut line = Vec::new();
        let n = r.read_until(b'\n', &mut line)?;
        if n == 0 {
            return if lines.is_empty() {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        total += n;
        if total > 64 * 1024 {
            return Err(io::Error::other("request head too large"));
        }
        let line = String::from_utf8_lossy(&line).trim_end_matches(['\r', '\n']).to_owned();
        if line.is_empty() {
            if lines.is_empty() {
                continue;
            }
            return Ok(Some(lines));
        }
        lines.push(line);
    }
}

/// `bytes=a-b` → (Some(a), Some(b)); `bytes=a-` → (Some(a), None); `bytes=-n` →
/// (None, Some(n)). None for anything else (several ranges included).
fn parse_range_spec(v: &str) -> Option<(Option<u64>, Option<u64>)> {
    let spec = v.trim().strip_prefix("bytes=")?.trim();
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    let a = if a.is_empty() { None } else { Some(a.parse().ok()?) };
    let b = if b.is_empty() { None } else { Some(b.parse().ok()?) };
    if a.is_none() && b.is_none() {
        return None;
    }
    Some((a, b))
}

/// How the body is framed on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Framing {
    Length,
    Chunked {
        chunk: usize,
        extensions: bool,
        trailers: bool,
    },
    LengthAndChunked,
    Close,
}

/// A response before it is sent: starts correct, faults edit it.
#[derive(Clone)]
struct Plan {
    status: u16,
    /// Bytes of `body` to send (`start..end`).
    start: u64,
    end: u64,
    body: Arc<Vec<u8>>,
    /// Content-Range to send (`first`, `last`, `total`), None for none.
    content_range: Option<String>,
    framing: Framing,
    /// Extra Content-Length fields (conflicting / repeated).
    extra_lengths: Vec<u64>,
    fields: Vec<(String, String)>,
    status_line: Option<String>,
    head_mangles: Vec<Fault>,
    keep_alive: bool,
    close_notify: bool,
    cut: Option<(u64, Close)>,
    stall_after_head: Option<Duration>,
    silent: bool,
    stall_mid: Option<(u64, Duration)>,
    /// A 206 sent as `multipart/byteranges`.
    multipart: Option<Multipart>,
    /// A short text body instead of file bytes (errors, redirects).
    text: Option<String>,
    /// Start of the asked range (0 without a usable Range): where a head fault strikes.
    asked_start: u64,
    /// Rules that changed this plan and the file offset each strikes at: they fire
    /// when the head is sent.
    fired: Vec<(usize, u64)>,
    /// The rule behind `cut`, `stall_after_head`, `stall_mid`: each fires only when
    /// the response reaches it.
    cut_rule: Option<usize>,
    stall_head_rule: Option<usize>,
    stall_mid_rule: Option<usize>,
    /// [`Fault::LeaveCap`]: after this many body bytes, and its rule.
    leave_cap: Option<(u64, usize)>,
    /// [`Fault::CloseAfter`]: how, and its rule.
    close_after: Option<(Close, usize)>,
    /// [`Fault::Unanswered`]: how, and its rule.
    unanswered: Option<(Close, usize)>,
}

impl Plan {
    /// Everything a fault can change, as text, to tell whether a rule changed the plan.
    fn signature(&self) -> String {
        format!(
            "{:?} {} {}..{} {:p} {:?} {:?} {:?} {:?} {:?} {:?} {} {} {:?} {:?} {} {:?} {:?}",
            self.multipart,
            self.status,
            self.start,
            self.end,
            Arc::as_ptr(&self.body),
            self.content_range,
            self.framing,
            self.extra_lengths,
            self.fields,
            self.status_line,
            self.head_mangles,
            self.keep_alive,
            self.close_notify,
            self.cut,
            self.stall_after_head,
            self.silent,
            self.stall_mid,
            self.text,
        )
    }
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Whatever",
    }
}

fn matches(sh: &Shared, when: &When, req: &Request, partial_range: Option<u64>) -> bool {
    match when {
        When::Within(d) => {
            let first = *sh.first_at.lock().unwrap().get_or_insert(req.at);
            req.at.duration_since(first) < *d
        }
        When::Crowded(n) => {
            thread::sleep(Duration::from_millis(50));
            sh.open.load(Ordering::SeqCst) > *n
        }
        When::Always => true,
        When::Request(n) => req.n == *n,
        When::Requests(v) => v.contains(&req.n),
        When::From(n) => req.n >= *n,
        When::Path(p) => req.path() == p,
        When::Kept => req.conn_seq > 1,
        When::Segment => partial_range.is_some_and(|a| a != 0),
        When::RangeFrom(n) => partial_range.is_some_and(|a| a >= *n),
        When::And(a, b) => matches(sh, a, req, partial_range) && matches(sh, b, req, partial_range),
        When::Once(w) => matches(sh, w, req, partial_range),
    }
}

fn plan(sh: &Shared, req: &Request) -> Plan {
    let size = sh.size;
    let range = req.range.as_deref().and_then(parse_range_spec);
    let mut p = Plan {
        status: 200,
        start: 0,
        end: size,
        body: sh.body.clone(),
        content_range: None,
        framing: Framing::Length,
        extra_lengths: Vec::new(),
        fields: Vec::new(),
        status_line: None,
        head_mangles: Vec::new(),
        keep_alive: !req
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close")),
        close_notify: true,
        cut: None,
        stall_after_head: None,
        silent: false,
        stall_mid: None,
        multipart: None,
        text: None,
        asked_start: 0,
        fired: Vec::new(),
        cut_rule: None,
        stall_head_rule: None,
        stall_mid_rule: None,
        leave_cap: None,
        close_after: None,
        unanswered: None,
    };
    if let Some(tag) = &sh.etag {
        p.fields.push(("ETag".into(), format!("\"{tag}\"")));
    }
    // The asked range, resolved against the size: Ok(Some(a..b)), Ok(None) when no
    // (usable) Range, Err(()) when unsatisfiable.
    let asked: Result<Option<(u64, u64)>, ()> = match range {
        None => Ok(None),
        Some((Some(a), b)) => {
            if a >= size {
                Err(())
            } else {
                Ok(Some((a, b.map_or(size, |b| (b + 1).min(size)))))
            }
        }
        Some((None, Some(n))) => {
            if n == 0 || size == 0 {
                Err(())
            } else {
                Ok(Some((size - n.min(size), size)))
            }
        }
        Some((None, None)) => Ok(None),
    };
    match asked {
        Ok(Some((a, b))) if a < b => {
            p.status = 206;
            p.start = a;
            p.end = b;
        }
        Ok(_) => {}
        Err(()) => {
            p.status = 416;
            p.start = 0;
            p.end = 0;
            p.content_range = Some(format!("bytes */{size}"));
        }
    }
    let partial_start = match asked {
        Ok(Some((a, _))) => Some(a),
        _ => None,
    };
    p.asked_start = partial_start.unwrap_or(0);
    for (i, (when, fault)) in sh.rules.iter().enumerate() {
        if !matches(sh, when, req, partial_start) {
            continue;
        }
        let once = matches!(when, When::Once(_));
        if once && sh.spent[i].load(Ordering::SeqCst) {
            continue;
        }
        let saved = once.then(|| p.clone());
        let before = p.signature();
        apply(sh, req, &mut p, fault);
        let deferred = matches!(
            fault,
            Fault::Close { .. }
                | Fault::CloseRandom { .. }
                | Fault::StallAfterHead { .. }
                | Fault::StallMidBody { .. }
                | Fault::LeaveCap { .. }
                | Fault::CloseAfter { .. }
                | Fault::Unanswered { .. }
        );
        if let Some(saved) = saved {
            // Spent only where it took effect, and by one request only.
            let took = deferred || p.signature() != before;
            if !took || sh.spent[i].swap(true, Ordering::SeqCst) {
                p = saved;
                continue;
            }
        }
        match fault {
            Fault::Close { .. } | Fault::CloseRandom { .. } => p.cut_rule = Some(i),
            Fault::StallAfterHead { .. } => p.stall_head_rule = Some(i),
            Fault::StallMidBody { .. } => p.stall_mid_rule = Some(i),
            Fault::LeaveCap { after } => p.leave_cap = Some((*after, i)),
            Fault::CloseAfter { how } => p.close_after = Some((*how, i)),
            Fault::Unanswered { how } => p.unanswered = Some((*how, i)),
            // A short 206 strikes where its bytes stop; other head faults at the asked start.
            Fault::ShortRange { .. } if p.signature() != before => p.fired.push((i, p.end)),
            _ if p.signature() != before => p.fired.push((i, p.asked_start)),
            _ => {}
        }
    }
    if p.status == 206 && p.content_range.is_none() {
        p.content_range = Some(format!("bytes {}-{}/{size}", p.start, p.end - 1));
    }
    p
}

fn apply(sh: &Shared, req: &Request, p: &mut Plan, fault: &Fault) {
    let size = sh.size;
    match fault {
        Fault::IgnoreRange => {
            p.status = 200;
            p.start = 0;
            p.end = size;
            p.content_range = None;
        }
        Fault::RangeFromZero => {
            if p.status == 206 {
                let len = p.end - p.start;
                p.start = 0;
                p.end = len;
                p.content_range = None;
            }
        }
        Fault::ShortRange { max } => {
            if p.status == 206 {
                p.end = p.end.min(p.start + (*max).max(1));
                p.content_range = None;
            }
        }
        Fault::ContentRangeShift { shift } => {
            if p.status == 206 {
                let first = (p.start as i64 + shift).max(0) as u64;
                let last = first + (p.end - p.start) - 1;
                p.content_range = Some(format!("bytes {first}-{last}/{size}"));
            }
        }
        Fault::ContentRangeTotal { total } => {
            if p.status == 206 {
                p.content_range = Some(format!("bytes {}-{}/{total}", p.start, p.end - 1));
            }
        }
        Fault::ContentRangeUnknownTotal => {
            if p.status == 206 {
                p.content_range = Some(format!("bytes {}-{}/*", p.start, p.end - 1));
            }
        }
        Fault::Unsatisfiable => {
            p.status = 416;
            p.start = 0;
            p.end = 0;
            p.content_range = Some(format!("bytes */{size}"));
        }
        Fault::Close { after, how } => p.cut = Some((*after, *how)),
        Fault::CloseRandom { how } => {
            let mut rng = XorShift::new(sh.seed ^ req.n.wrapping_mul(0x9FB2_1C65_1E98_DF25) ^ 0xC105E);
            let len = p.end - p.start;
            let at = rng.below(len.max(1));
            let how = how.unwrap_or(if rng.below(2) == 0 { Close::Fin } else { Close::Rst });
            p.cut = Some((at, how));
        }
        Fault::StallAfterHead { secs } => p.stall_after_head = Some(Duration::from_secs(*secs)),
        Fault::NoResponse => p.silent = true,
        Fault::Before(hook) => (hook.0)(),
        Fault::StallMidBody { after, secs } => p.stall_mid = Some((*after, Duration::from_secs(*secs))),
        Fault::Status { code, retry_after } => {
            p.status = *code;
            p.start = 0;
            p.end = 0;
            p.content_range = None;
            p.text = Some(format!("{code} {}\n", reason(*code)));
            if let Some(ra) = retry_after {
                let v = match ra {
                    RetryAfter::Seconds(s) => s.to_string(),
                    RetryAfter::DateIn(s) => http_date(SystemTime::now() + Duration::from_secs(*s)),
                    RetryAfter::Raw(s) => s.clone(),
                };
                p.fields.push(("Retry-After".into(), v));
            }
        }
        Fault::Redirect { code, location } => {
            p.status = *code;
            p.start = 0;
            p.end = 0;
            p.content_range = None;
            p.text = Some("moved\n".into());
            p.fields.push((
                "Location".into(),
                location
                    .replace("{base}", &sh.base)
                    .replace("{authority}", sh.base.split_once("://").map_or("", |(_, a)| a)),
            ));
        }
        Fault::Chunked {
            chunk,
            extensions,
            trailers,
        } => {
            p.framing = Framing::Chunked {
                chunk: (*chunk).max(1),
                extensions: *extensions,
                trailers: *trailers,
            }
        }
        Fault::LengthAndChunked => p.framing = Framing::LengthAndChunked,
        Fault::ConflictingLength { second } => p.extra_lengths.push(*second),
        Fault::RepeatedLength => p.extra_lengths.push(u64::MAX),
        Fault::NoLength => {
            p.framing = Framing::Close;
            p.keep_alive = false;
        }
        Fault::NoCloseNotify => p.close_notify = false,
        Fault::ETag(v) => {
            p.fields.retain(|(k, _)| k != "ETag");
            p.fields.push(("ETag".into(), format!("\"{v}\"")));
        }
        Fault::LastModified(v) => p.fields.push(("Last-Modified".into(), v.clone())),
        Fault::Content { seed } => p.body = sh.alt_body(*seed),
        Fault::Header(k, v) => p.fields.push((k.clone(), v.clone())),
        Fault::ConnectionClose => p.keep_alive = false,
        Fault::StatusLine(s) => p.status_line = Some(s.clone()),
        Fault::ObsFold | Fault::BareCr | Fault::HugeHead { .. } | Fault::ManyFields { .. } => {
            p.head_mangles.push(fault.clone())
        }
        Fault::Multipart(m) => {
            if p.status == 206 {
                p.multipart = Some(*m);
            }
        }
        Fault::LeaveCap { .. } | Fault::CloseAfter { .. } | Fault::Unanswered { .. } => {}
    }
}

/// Serves requests on one connection until EOF, an error or a close fault.
fn serve(conn: Conn, id: u64, sh: &Shared) -> io::Result<()> {
    let mut r = BufReader::with_capacity(16 * 1024, conn);
    let mut seq = 0;
    loop {
        if seq > 0
            && let Some(idle) = sh.idle_timeout
            && !next_request_within(&mut r, idle)
        {
            sh.idle_closes.fetch_add(1, Ordering::SeqCst);
            r.into_inner().close(Close::Drop);
            return Ok(());
        }
        let Some(lines) = read_head(&mut r)? else {
            return Ok(());
        };
        seq += 1;
        let mut parts = lines[0].split_whitespace();
        let method = parts.next().unwrap_or("").to_owned();
        let target = parts.next().unwrap_or("").to_owned();
        let headers: Vec<(String, String)> = lines[1..]
            .iter()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let range = headers.iter().find(|(k, _)| k == "range").map(|(_, v)| v.clone());
        let req = Request {
            n: sh.next_req.fetch_add(1, Ordering::SeqCst),
            conn: id,
            conn_seq: seq,
            method,
            target,
            range,
            headers,
            at: Instant::now(),
        };
        sh.first_at.lock().unwrap().get_or_insert(req.at);
        sh.log.lock().unwrap().push(req.clone());
        let mut p = plan(sh, &req);
        // A per-client cap: admitted (counted while served), or turned away with a 503.
        let mut admitted = None;
        if let Some(cap) = sh.cap {
            admitted = Admitted::try_new(sh, cap, req.path());
            if admitted.is_none() {
                let busy = Fault::Status {
                    code: sh.cap_status,
                    retry_after: None,
                };
                apply(sh, &req, &mut p, &busy);
                p.leave_cap = None;
                // The heads of the requests it serves, read before this one, go first.
                if !sh.sleep(Duration::from_millis(100)) {
                    return Ok(());
                }
            }
        }
        if let Some((how, rule)) = p.unanswered {
            sh.fire(rule, &req, p.asked_start);
            r.into_inner().close(how);
            return Ok(());
        }
        if p.silent {
            // Hold the connection open without a byte until the client gives up.
            let mut sink = [0u8; 4096];
            while matches!(r.read(&mut sink), Ok(n) if n > 0) {}
            return Ok(());
        }
        let head_only = req.method == "HEAD";
        let conn = r.get_mut();
        if let Some(how) = respond(conn, sh, &req, &p, head_only, admitted.as_mut())? {
            r.into_inner().close(how);
            return Ok(());
        }
        if !p.keep_alive {
            let how = if p.close_notify { Close::Clean } else { Close::Fin };
            r.into_inner().close(how);
            return Ok(());
        }
        if let Some((how, rule)) = p.close_after {
            sh.fire(rule, &req, p.end);
            r.into_inner().close(how);
            return Ok(());
        }
    }
}

/// Whether a byte of the next request arrives on `r` within `idle` (or is buffered):
/// false when the wait times out (or the client closed, or it failed).
fn next_request_within(r: &mut BufReader<Conn>, idle: Duration) -> bool {
    if !r.buffer().is_empty() {
        return true;
    }
    let _ = r.get_ref().tcp().set_read_timeout(Some(idle));
    let came = matches!(r.fill_buf(), Ok(b) if !b.is_empty());
    let _ = r.get_ref().tcp().set_read_timeout(Some(Duration::from_secs(30)));
    came
}

/// Writes one response; Some(how) when the connection must be closed now (a cut).
fn respond(
    conn: &mut Conn,
    sh: &Shared,
    req: &Request,
    p: &Plan,
    head_only: bool,
    mut admitted: Option<&mut Admitted>,
) -> io::Result<Option<Close>> {
    let text = p.text.as_ref().map(|t| t.as_bytes().to_vec());
    let mut body: &[u8] = match &text {
        Some(t) => t,
        None => &p.body[p.start as usize..p.end as usize],
    };
    let multipart = p.multipart.filter(|_| p.status == 206);
    let mp_body: Vec<u8>;
    let mut content_range = p.content_range.clone();
    if let Some(m) = multipart {
        mp_body = multipart_body(p, body, m);
        body = &mp_body;
        content_range = None;
    }
    let mut head = String::new();
    match &p.status_line {
        Some(l) => head.push_str(l),
        None => head.push_str(&format!("HTTP/1.1 {} {}", p.status, reason(p.status))),
    }
    head.push_str("\r\n");
    head.push_str("Server: ringdl-fault-server\r\n");
    head.push_str(&format!("Date: {}\r\n", http_date(SystemTime::now())));
    // A `Fault::Header("Content-Type", …)` replaces the default.
    match multipart {
        Some(Multipart::NoBoundary) => head.push_str("Content-Type: multipart/byteranges\r\n"),
        Some(_) => head.push_str(&format!("Content-Type: multipart/byteranges; boundary={BOUNDARY}\r\n")),
        None if !p.fields.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) => {
            head.push_str("Content-Type: application/octet-stream\r\n")
        }
        None => {}
    }
    if p.status == 200 || p.status == 206 {
        head.push_str("Accept-Ranges: bytes\r\n");
    }
    if let Some(cr) = &content_range {
        head.push_str(&format!("Content-Range: {cr}\r\n"));
    }
    match p.framing {
        Framing::Length => head.push_str(&format!("Content-Length: {}\r\n", body.len())),
        Framing::Chunked { trailers, .. } => {
            head.push_str("Transfer-Encoding: chunked\r\n");
            if trailers {
                head.push_str("Trailer: X-Checksum, X-Note\r\n");
            }
        }
        Framing::LengthAndChunked => {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
            head.push_str("Transfer-Encoding: chunked\r\n");
        }
        Framing::Close => {}
    }
    for &l in &p.extra_lengths {
        let v = if l == u64::MAX { body.len() as u64 } else { l };
        head.push_str(&format!("Content-Length: {v}\r\n"));
    }
    for (k, v) in &p.fields {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    for m in &p.head_mangles {
        match m {
            Fault::ObsFold => head.push_str("X-Folded: first part\r\n  continued after obs-fold\r\n"),
            Fault::BareCr => head.push_str("X-Bare-Cr: a\rb\r\n"),
            Fault::HugeHead { bytes } => {
                let pad = "p".repeat(1000);
                let mut i = 0;
                while head.len() <= *bytes {
                    head.push_str(&format!("X-Pad-{i}: {pad}\r\n"));
                    i += 1;
                }
            }
            Fault::ManyFields { n } => {
                for i in 0..*n {
                    head.push_str(&format!("X-Field-{i}: {i}\r\n"));
                }
            }
            _ => {}
        }
    }
    if !p.keep_alive {
        head.push_str("Connection: close\r\n");
    } else {
        head.push_str("Connection: keep-alive\r\n");
    }
    head.push_str("\r\n");
    // Recorded before the head goes out: a client that acts on the head (exits, say) may
    // be checked by the test before this thread runs again.
    for &(rule, at) in &p.fired {
        sh.fire(rule, req, at);
    }
    conn.write_all(head.as_bytes())?;
    conn.flush()?;
    if let Some(d) = p.stall_after_head {
        sh.fire_opt(p.stall_head_rule, req, p.start);
        if !sh.sleep(d) {
            return Ok(Some(Close::Rst));
        }
    }
    if head_only {
        return Ok(None);
    }
    // The wire bytes of the body (chunk framing included), then cut/stall offsets
    // count *payload* bytes for Length/Close and wire bytes for chunked (close
    // enough: they are about where the connection breaks).
    let wire: Vec<u8>;
    let wire_body: &[u8] = match p.framing {
        Framing::Length | Framing::Close => body,
        Framing::Chunked {
            chunk,
            extensions,
            trailers,
        } => {
            wire = encode_chunked(body, chunk, extensions, trailers);
            &wire
        }
        Framing::LengthAndChunked => {
            wire = encode_chunked(body, 64 * 1024, false, false);
            &wire
        }
    };
    let mut sent: u64 = 0;
    let total = wire_body.len() as u64;
    // The file offset of the first byte not yet sent (chunked: wire bytes scaled to payload).
    let file_at = |sent: u64| p.start + sent * body.len() as u64 / total.max(1);
    let cut_at = p.cut.map(|(n, _)| n.min(total));
    let mut stalled = false;
    let mut next_slot = Instant::now();
    while sent < total || cut_at == Some(sent) {
        if cut_at == Some(sent) {
            sh.fire_opt(p.cut_rule, req, file_at(sent));
            return Ok(p.cut.map(|(_, how)| how));
        }
        if let Some((at, d)) = p.stall_mid
            && !stalled
            && sent >= at.min(total)
        {
            stalled = true;
            conn.flush()?;
            sh.fire_opt(p.stall_mid_rule, req, file_at(sent));
            if !sh.sleep(d) {
                return Ok(Some(Close::Rst));
            }
        }
        let mut next = (sent + 64 * 1024).min(total);
        if let Some(c) = cut_at
            && c > sent
        {
            next = next.min(c);
        }
        if let Some((at, _)) = p.stall_mid
            && !stalled
            && at > sent
        {
            next = next.min(at);
        }
        if let Some(rate) = sh.rate {
            // Paced: this write goes when the one before has had its time (after a stall
            // the pace starts again, without catching up).
            let now = Instant::now();
            if next_slot > now && !sh.sleep(next_slot - now) {
                return Ok(Some(Close::Rst));
            }
            next_slot = next_slot.max(now) + Duration::from_secs_f64((next - sent) as f64 / rate as f64);
        }
        conn.write_all(&wire_body[sent as usize..next as usize])?;
        sh.count_sent(req.n, p.start, next - sent);
        sent = next;
        if let (Some((after, rule)), Some(a)) = (p.leave_cap, admitted.as_deref_mut())
            && sent >= after
            && a.leave()
        {
            sh.fire(rule, req, file_at(sent));
        }
    }
    conn.flush()?;
    if p.framing == Framing::Close {
        let how = if p.close_notify { Close::Clean } else { Close::Fin };
        return Ok(Some(how));
    }
    Ok(None)
}

/// The boundary of [`Fault::Multipart`] answers (ATS uses a long random one like it).
const BOUNDARY: &str = "RINGDL_FAULT_3d6b6a416f9b5b1c";

/// The `multipart/byteranges` body of a 206 whose bytes are `bytes` (file offsets
/// `p.start..p.end`), in the shape `m` asks.
fn multipart_body(p: &Plan, bytes: &[u8], m: Multipart) -> Vec<u8> {
    let total = p.body.len();
    let boundary = match m {
        Multipart::WrongBoundary => "SOMETHING_ELSE",
        _ => BOUNDARY,
    };
    let mut parts = vec![(p.content_range.clone().unwrap_or_default(), bytes)];
    if m == Multipart::Two && bytes.len() >= 2 {
        let mid = bytes.len() / 2;
        let (a, b) = (p.start, p.start + mid as u64);
        parts = vec![
            (format!("bytes {a}-{}/{total}", b - 1), &bytes[..mid]),
            (format!("bytes {b}-{}/{total}", p.end - 1), &bytes[mid..]),
        ];
    }
    let mut out = Vec::with_capacity(bytes.len() + 256);
    for (cr, data) in parts {
        out.extend_from_slice(
            format!("--{boundary}\r\nContent-Type: application/octet-stream\r\nContent-Range: {cr}\r\n\r\n").as_bytes(),
        );
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    out
}

fn encode_chunked(body: &[u8], chunk: usize, extensions: bool, trailers: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + body.len() / chunk * 40 + 64);
    for (i, c) in body.chunks(chunk).enumerate() {
        if extensions {
            out.extend_from_slice(format!("{:X};ext-{i}=\"v;al\\\"ue\";flag\r\n", c.len()).as_bytes());
        } else {
            out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        }
        out.extend_from_slice(c);
        out.extend_from_slice(b"\r\n");
    }
    if extensions {
        out.extend_from_slice(b"0;last=yes\r\n");
    } else {
        out.extend_from_slice(b"0\r\n");
    }
    if trailers {
        out.extend_from_slice(b"X-Checksum: sha256=abc\r\nX-Note: trailer field\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}
