//! Control plane, per connection: connect, the TLS session over the ring, the kTLS
//! hand-off and its non-data records, the request, the response head and its validation.

pub(crate) mod body;
pub(crate) mod ctx;
pub(crate) mod handoff;
pub(crate) mod headers;
pub(crate) mod key;
pub(crate) mod multi;
pub(crate) mod origin;
pub(crate) mod proxy;
pub(crate) mod resolve;
pub(crate) mod response;
pub(crate) mod session;
mod socks;
pub(crate) mod tls;
pub(crate) mod tunnel;

use crate::engine::place::Placer;
use crate::engine::record::SoftTls;
use crate::engine::splice::Pipe;
use crate::error::Kind;
use crate::schedule::Segment;
use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::kernel::KernelConnection;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};
use uring::Buf;

/// Sent as User-Agent.
pub(crate) const USER_AGENT: &str = concat!("ringdl/", env!("CARGO_PKG_VERSION"));

/// What a partial fetch ([`crate::config::Config::fetch_only`]) fails with when the server
/// answers a Range request with the whole file (200): the app may then fetch it whole.
pub(crate) const NO_RANGES: &str = "does not serve byte ranges (answered 200 to a Range request), which a delta needs";

/// Why a connection's work stopped.
pub(crate) struct Fail {
    pub(crate) kind: Kind,
    pub(crate) msg: String,
    /// Worth trying the segment again on a new connection.
    pub(crate) retry: bool,
    /// Wait at least this long first (Retry-After).
    pub(crate) delay: Option<Duration>,
    /// The connection moved no byte for `--stall-timeout`: always a counted try (a
    /// server that accepts and never answers must run out of tries).
    pub(crate) stalled: bool,
    /// The server turned this connection away (a 503 status, a refused or reset
    /// connect): while other connections make progress this lowers the concurrency
    /// instead of spending the segment's tries.
    pub(crate) busy: bool,
    /// A connect was refused (or reset): nothing listens there, so its retries start with
    /// short waits.
    pub(crate) refused: bool,
    /// The answer is about the server, not this request (a 503 or 429, a refused or reset
    /// connect): the wait after it holds every request to that origin, not only this
    /// segment.
    pub(crate) server_wide: bool,
    /// Refused while other connections to the same target are open (a proxy's cap on
    /// `CONNECT` tunnels per client): a cap by itself, the download goes on with fewer.
    pub(crate) extra: bool,
    /// Said after the message when the failure drops a mirror (how to use it anyway).
    pub(crate) hint: &'static str,
    /// The connection was closed under the request: end of stream, ECONNRESET or EPIPE on
    /// its send or receive (on a kept-alive connection with no byte of the answer come,
    /// the server's close of an idle connection, RFC 9112 §9.3.1).
    pub(crate) closed: bool,
    /// The server refused a multi-range request (a 200 or 416 to it): its runs are asked
    /// again one range per request, no try spent, on a new connection (the answer's body
    /// is not read).
    pub(crate) step_down: bool,
}

impl Fail {
    pub(crate) fn retry(kind: Kind, msg: impl Into<String>) -> Fail {
        Fail {
            kind,
            msg: msg.into(),
            retry: true,
            delay: None,
            stalled: false,
            busy: false,
            refused: false,
            server_wide: false,
            extra: false,
            hint: "",
            closed: false,
            step_down: false,
        }
    }
    pub(crate) fn fatal(kind: Kind, msg: impl Into<String>) -> Fail {
        Fail {
            kind,
            msg: msg.into(),
            retry: false,
            delay: None,
            stalled: false,
            busy: false,
            refused: false,
            server_wide: false,
            extra: false,
            hint: "",
            closed: false,
            step_down: false,
        }
    }
    /// The server turned this connection away (see [`Fail::busy`]); that is about the
    /// server, so it is server-wide too.
    pub(crate) fn busy(mut self) -> Fail {
        self.busy = true;
        self.server_wide = true;
        self
    }
    /// The connection was closed under the request (see [`Fail::closed`]).
    pub(crate) fn closed(mut self) -> Fail {
        self.closed = true;
        self
    }
    /// The answer is about the server (a 429 with Retry-After): its wait holds the origin.
    pub(crate) fn server_wide(mut self) -> Fail {
        self.server_wide = true;
        self
    }
}

/// What running the TLS layer (rustls, or the software record layer) over the buffered
/// input did; the loop drives the connection on from it.
pub(crate) enum Pumped {
    /// State changed (bytes to send, a job finished): drive again.
    Again,
    /// Everything buffered is processed; more input is needed.
    NeedData,
    /// The write pool is empty; plaintext is held in the spill.
    Blocked,
    /// close_notify received.
    PeerClosed,
    /// The handshake is done on a record boundary: install kTLS now.
    HandOff,
}

/// Where a tunnel's opening stands after the proxy's answer ([`tunnel::tunnel_answer`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Tunnel {
    /// The answer is incomplete: post a RECV.
    NeedMore,
    /// The next handshake message is queued in the connection's `out` (SOCKS5): send it.
    Sent,
    /// The tunnel is open (bytes after the answer stay for the origin): start TLS.
    Open,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum St {
    /// No socket.
    Closed,
    /// CONNECT in flight.
    Connecting,
    /// Connected to the proxy; its `CONNECT` (or a SOCKS5 handshake message) is being
    /// sent, or its answer awaited.
    Tunnel,
    /// Connected (TLS may still be handshaking).
    Open,
}

/// A request on a connection: the segment it asked for and the response state.
pub(crate) struct Job {
    pub(crate) seg: Segment,
    /// The mirror (index in the URLs given) the request went to.
    pub(crate) mirror: usize,
    /// The first request of the download (learns size, validator, range support).
    pub(crate) probe: bool,
    /// The body's way to the file: position, framing (once the head is parsed), the
    /// write block being filled, input held while the pool is empty.
    pub(crate) placer: Placer,
    pub(crate) keep_alive: bool,
    /// A body byte arrived for this job (retries on reused connections do not count otherwise).
    pub(crate) got_bytes: bool,
    /// When the request was started, and when its first body byte came (work stealing).
    pub(crate) started: Instant,
    pub(crate) first_byte: Option<Instant>,
    /// A request for several ranges ([`multi::Multi`]): `seg` is the part being placed
    /// (before the first part: the first range asked).
    pub(crate) multi: Option<Box<multi::Multi>>,
}

impl Job {
    /// The runs still owed once the body stopped with its bytes on their way up to `from`
    /// (the placer released there): `[from, seg.end)`, or for a multi-range request every
    /// asked run not received ([`multi::Multi::owed`]). Each keeps the job's tries.
    pub(crate) fn owed(&self, from: u64) -> Vec<Segment> {
        let runs = match &self.multi {
            Some(m) => m.owed(m.in_part.then_some((self.seg.start, from))),
            None => vec![(from, self.seg.end)],
        };
        runs.into_iter()
            .filter(|r| r.0 < r.1)
            .map(|(start, end)| Segment { start, end, ..self.seg })
            .collect()
    }
}

/// A connection's TLS: one mode at a time, so no two can be set together.
pub(crate) enum Tls {
    /// No TLS (yet): plain HTTP, or an https connection before its handshake (connect,
    /// proxy tunnel).
    Off,
    /// rustls runs the session: the handshake, then records until the hand-off.
    Rustls(Box<UnbufferedClientConnection>),
    /// rustls keeps the session to its end: the hand-off was refused (same bytes, with
    /// rustls' copies).
    RustlsKept(Box<UnbufferedClientConnection>),
    /// kTLS is installed: the socket yields plaintext; rustls keeps only what
    /// post-handshake messages need (session tickets, KeyUpdate).
    Kernel(Box<KernelConnection<ClientConnectionData>>),
    /// The software record layer runs this connection's TLS (the default without kTLS):
    /// records opened in place by `ktls::soft`, rustls keeps only the post-handshake state.
    Soft(Box<SoftTls>),
}

impl Tls {
    /// Any TLS runs on the connection.
    pub(crate) fn is_on(&self) -> bool {
        !matches!(self, Tls::Off)
    }

    /// TLS runs in user space: rustls or the software record layer (not kTLS).
    pub(crate) fn in_user_space(&self) -> bool {
        matches!(self, Tls::Rustls(_) | Tls::RustlsKept(_) | Tls::Soft(_))
    }

    /// kTLS is installed.
    pub(crate) fn is_kernel(&self) -> bool {
        matches!(self, Tls::Kernel(_))
    }

    /// The software record layer runs it.
    pub(crate) fn is_soft(&self) -> bool {
        matches!(self, Tls::Soft(_))
    }

    /// The TLS handshake is still running.
    pub(crate) fn is_handshaking(&self) -> bool {
        match self {
            Tls::Rustls(s) | Tls::RustlsKept(s) => s.is_handshaking(),
            _ => false,
        }
    }

    /// The software record layer, when it runs the connection.
    pub(crate) fn soft_mut(&mut self) -> Option<&mut SoftTls> {
        match self {
            Tls::Soft(soft) => Some(soft),
            _ => None,
        }
    }

    /// The kTLS connection's post-handshake state, when kTLS is installed.
    pub(crate) fn kernel_mut(&mut self) -> Option<&mut KernelConnection<ClientConnectionData>> {
        match self {
            Tls::Kernel(k) => Some(k),
            _ => None,
        }
    }
}

/// Receive side of a connection: head accumulation, then the job's body.
#[derive(Default)]
pub(crate) struct Rx {
    pub(crate) job: Option<Job>,
    pub(crate) head: Vec<u8>,
    /// More bytes came than the response carries: the connection cannot be reused.
    pub(crate) extra: bool,
    /// A response of this transfer's was served on the slot (a body byte came, or a job
    /// finished): a slot the server only turned away carried no download.
    pub(crate) served: bool,
}

/// The operation a connection has in flight (each has at most one), which says what its
/// completion means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InFlight {
    /// None: the connection may be driven.
    Idle,
    /// CONNECT (with its LINK_TIMEOUT).
    Connect,
    /// SEND of the connection's `out` bytes.
    Send,
    /// RECV into the read block (TLS records, or a response head).
    Recv,
    /// RECV straight into the job's write block (plain HTTP, kTLS RX): no compaction copy.
    RecvDirect,
    /// Engine `splice`: socket → pipe SPLICE.
    Splice,
    /// kTLS: RECVMSG of a non-data record (alert, NewSessionTicket, KeyUpdate).
    RecvMsg,
}

impl Conn {
    /// An operation is in flight: its completion comes before anything else is pushed.
    pub(crate) fn busy(&self) -> bool {
        self.op != InFlight::Idle
    }

    /// What one look at an idle kept-alive connection (open, nothing in flight, every
    /// response on it read) finds: one non-blocking `recv(2)` with `MSG_PEEK |
    /// MSG_DONTWAIT` of at most one byte. `EAGAIN` is an open connection with nothing to
    /// read ([`Peek::Open`]); end of stream, `ECONNRESET` or `EPIPE` the server's close
    /// ([`Peek::Closed`]); bytes nobody asked for (a TLS record that arrived after the
    /// answer: close_notify, an alert, a late NewSessionTicket — under TLS 1.3 every one of
    /// them has outer type 23, RFC 8446 §5.2, so they cannot be told apart unopened) or any
    /// other error (under kTLS a pending control record fails a peek without a cmsg
    /// buffer) a connection not to reuse that says nothing of the server
    /// ([`Peek::Unusable`]). The socket is a plain fd whatever the ring backend (io_uring
    /// or epoll). RFC 9112 §9.3: a server may close an idle connection at any time.
    pub(crate) fn peek_idle(&self) -> Peek {
        let Some(fd) = self.fd.as_ref() else {
            return Peek::Unusable;
        };
        let mut byte = [0u8; 1];
        let flags = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
        loop {
            return match rustix::net::recv(fd, &mut byte, flags) {
                Err(rustix::io::Errno::AGAIN) => Peek::Open,
                Err(rustix::io::Errno::INTR) => continue,
                Ok((_, 0)) | Err(rustix::io::Errno::CONNRESET | rustix::io::Errno::PIPE) => Peek::Closed,
                _ => Peek::Unusable,
            };
        }
    }
}

/// What [`Conn::peek_idle`] found on an idle kept-alive connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Peek {
    /// Open, nothing to read: it can carry the next request.
    Open,
    /// The server closed it (end of stream or a reset).
    Closed,
    /// Bytes nobody asked for, or an error: not to reuse, and no news of the server.
    Unusable,
}

pub(crate) struct Conn {
    pub(crate) st: St,
    /// `--limit-rate`: tokens the socket read in flight took from the bucket when it was
    /// posted; what it does not use goes back at its completion.
    pub(crate) pace_taken: u64,
    /// The mirror (index in the URLs given) this connection goes to.
    pub(crate) mirror: usize,
    pub(crate) fd: Option<OwnedFd>,
    /// Connects that failed on this slot (bounds its tries: `--max-tries` per address).
    pub(crate) failed_connects: usize,
    /// Index in its origin's addresses ([`Origin::addrs`](crate::control::origin::Origin::addrs)) of this slot's current (or last)
    /// connect.
    pub(crate) addr: usize,
    /// Not connected yet: waits for the download's first connect to answer, or for its
    /// turn to race the next address (Happy Eyeballs, RFC 8305 §5: the loop's
    /// connects decide when).
    pub(crate) deferred: bool,
    /// This slot opened a connection: it counts toward [`Transfer::wanted`](crate::transfer::Transfer::wanted) and reconnects
    /// after a failure by its own rules. (A slot that lost a Happy Eyeballs race is not.)
    pub(crate) engaged: bool,
    /// The connection's TLS, one mode at a time.
    pub(crate) tls: Tls,
    /// The SOCKS5 handshake while the tunnel is being opened (`St::Tunnel`).
    pub(crate) socks: Option<Box<http::Socks5Handshake>>,
    /// The read block: a response head, TLS records (taken out while a RECV fills it).
    pub(crate) rbuf: Option<Buf>,
    /// Received input not processed yet is `rbuf[input_start..input_end]`.
    pub(crate) input_start: usize,
    pub(crate) input_end: usize,
    /// Bytes to send (TLS records or a plain request).
    pub(crate) out: Vec<u8>,
    /// A plaintext request waiting for the TLS connection to accept application data.
    pub(crate) pending_request: Vec<u8>,
    /// The one operation in flight on this connection, if any.
    pub(crate) op: InFlight,
    /// Parked in the loop's queue of connections waiting for a free write block.
    pub(crate) waiting: bool,
    /// Consecutive failures without a response head (handshake, connect, early close).
    pub(crate) failures: u32,
    /// Open with nothing to do since this instant.
    pub(crate) idle_since: Option<Instant>,
    /// How long it sat idle before its current request (zero for its first).
    pub(crate) idle_before: Duration,
    /// Engine `splice`: this connection's pipe.
    pub(crate) pipe: Option<Pipe>,
    pub(crate) cancel_sent: bool,
    pub(crate) eof: bool,
    /// The current request is not the first on this connection (keep-alive reuse), or it
    /// sat open and idle before it.
    pub(crate) reused: bool,
    /// Requests started on this connection.
    pub(crate) requests: u32,
    /// close_notify was received.
    pub(crate) clean_close: bool,
    /// Gave up on this slot: every address failed `--max-tries` times.
    pub(crate) dead: bool,
    /// The server turned this slot's last request away while others made progress (a
    /// per-client connection cap): it asks again after the cap's wait (2 s, or a longer
    /// Retry-After).
    pub(crate) capped: bool,
    /// When the slot was last parked ([`Conn::capped`] set): a request sent before then, or
    /// less than `LATE_CLOSE` after, may have met a server that still counted this slot
    /// (cleared once a refusal was judged so).
    pub(crate) parked_at: Option<Instant>,
    /// Times in a row the server turned this slot away (parked it): 0 again when a request
    /// starts after one that was not turned away, or when the slot is parked with idle
    /// ones the server counted.
    pub(crate) refusals: u32,
    /// The end of the Retry-After the server gave with its refusal, if any: a parked slot
    /// woken when another transfer to its origin ends (on this reactor, or placed on
    /// another) still waits until then.
    pub(crate) retry_until: Option<Instant>,
    /// Backoff: do not reconnect before this instant.
    pub(crate) not_before: Option<Instant>,
    pub(crate) last_io: Instant,
    pub(crate) rx: Rx,
}

impl Conn {
    pub(crate) fn new(rbuf: Buf) -> Conn {
        Conn {
            st: St::Closed,
            pace_taken: 0,
            mirror: 0,
            fd: None,
            failed_connects: 0,
            addr: 0,
            deferred: false,
            engaged: false,
            tls: Tls::Off,
            socks: None,
            rbuf: Some(rbuf),
            input_start: 0,
            input_end: 0,
            out: Vec::new(),
            pending_request: Vec::new(),
            op: InFlight::Idle,
            waiting: false,
            failures: 0,
            idle_since: None,
            idle_before: Duration::ZERO,
            pipe: None,
            cancel_sent: false,
            eof: false,
            reused: false,
            requests: 0,
            clean_close: false,
            dead: false,
            capped: false,
            parked_at: None,
            refusals: 0,
            retry_until: None,
            not_before: None,
            last_io: Instant::now(),
            rx: Rx::default(),
        }
    }
}
