//! One download: the event loop over one io_uring, the connections (control plane:
//! connect → TLS handshake → request → response head → validation) and the body path
//! (data plane: compaction into aligned write blocks, writes at segment offsets).
//!
//! Every socket and file operation is an SQE on the ring; the loop makes one
//! `io_uring_enter` per turn that submits and waits. Each connection has at most one
//! operation (CONNECT, SEND or RECV) in flight; write blocks have their own.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{ByteRange, ChunkedDecoder, ContentRange, Framing, Header, Request, Status, Url};
use rustls::ClientConfig;
use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::kernel::KernelConnection;
use rustls::pki_types::ServerName;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, UnbufferedStatus};
use uring::{Buf, BufPool, Completion, Op, Ring, RingBuilder};

use crate::cli::Options;
use crate::engine::EngineKind;
use crate::engine::blocks::{WriteBlock, align_down, align_up};
use crate::engine::place::{Blocks, Delimiter, Fed, PlaceError, Placer, content_range_fits};
use crate::engine::splice::Pipe;
use crate::err;
use crate::error::{Error, Kind, Result};
use crate::output::Output;
use crate::progress::Progress;
use crate::resume::State;
use crate::schedule::{self, FIRST_SEGMENT, Landed, Segment};

/// Read block per connection, bytes: holds a response head or ≥ 3 whole TLS records.
const READ_BLOCK: usize = 64 << 10;
/// Write block, bytes: one O_DIRECT write.
const WRITE_BLOCK: usize = 256 << 10;
/// Largest response head we accept (RFC 9112 leaves it to us).
const MAX_HEAD: usize = http::MAX_HEAD;

const TAG_CONN: u64 = 1 << 32;
const TAG_WRITE: u64 = 2 << 32;
const TAG_TICK: u64 = 3 << 32;
const TAG_FALLOCATE: u64 = 4 << 32;
const TAG_FSYNC: u64 = 5 << 32;
const TAG_IGNORE: u64 = 6 << 32;
const TAG_SIGNAL: u64 = 7 << 32;
const TAG_CONTROL: u64 = 8 << 32;
const TAG_DRAIN: u64 = 10 << 32;
/// Work stealing: an idle connection splits a running body when the body would take at
/// least [`STEAL_TIME`] more at its rate (its bytes since the request, once it has run
/// [`STEAL_RATE_AFTER`]; before that, the download's rate per busy connection). Never
/// below [`STEAL_FLOOR`] left: each half must be worth a request (and the victim's
/// reconnect).
const STEAL_TIME: Duration = Duration::from_millis(200);
const STEAL_RATE_AFTER: Duration = Duration::from_millis(200);
const STEAL_FLOOR: u64 = 256 << 10;
/// Bytes an attempt must move forward for its failure not to count as a try: a server
/// that cuts every reply after a few KiB must still run out of tries.
const MIN_PROGRESS: u64 = 64 << 10;
/// How often the control file is brought up to date (after an fdatasync of the `.part`):
/// at most this much work is fetched again after a kill -9.
const CONTROL_INTERVAL: Duration = Duration::from_millis(250);
/// SPLICE_F_MOVE (splice(2)): move pages instead of copying when the kernel can.
const SPLICE_F_MOVE: u32 = 1;
const TAG_KIND: u64 = 0xffff_ffff << 32;

/// How a finished download went.
pub enum Outcome {
    /// Every byte landed; the file is complete and synced.
    Done(Summary),
    /// The first response redirected here (3xx with Location).
    Redirect(Url),
}

/// What the summary line reports.
pub struct Summary {
    /// The file's size, bytes.
    pub bytes: u64,
    /// Body bytes this run received (less than `bytes` after a resume).
    pub fetched: u64,
    /// Connections that carried a request.
    pub connections: usize,
    /// `TLSv1_3 TLS13_AES_256_GCM_SHA384`, or `plain`.
    pub tls: String,
    /// Wall time of the transfer.
    pub elapsed: Duration,
    /// Registered buffers (READ_FIXED/WRITE_FIXED) were used.
    pub registered: bool,
    /// Digest of the whole file when `--checksum` asked for one.
    pub digest: Option<ring::digest::Digest>,
    /// A sanitized file name from Content-Disposition (`--content-disposition`).
    pub disposition: Option<String>,
    /// Connections whose TLS was handed to the kernel.
    pub ktls_conns: usize,
    /// Why a kTLS hand-off was refused, if one was.
    pub ktls_refused: Option<String>,
}

/// Why a connection's work stopped.
struct Fail {
    kind: Kind,
    msg: String,
    /// Worth trying the segment again on a new connection.
    retry: bool,
    /// Wait at least this long first (Retry-After).
    delay: Option<Duration>,
}

impl Fail {
    fn retry(kind: Kind, msg: impl Into<String>) -> Fail {
        Fail {
            kind,
            msg: msg.into(),
            retry: true,
            delay: None,
        }
    }
    fn fatal(kind: Kind, msg: impl Into<String>) -> Fail {
        Fail {
            kind,
            msg: msg.into(),
            retry: false,
            delay: None,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum St {
    /// No socket.
    Closed,
    /// CONNECT in flight.
    Connecting,
    /// Connected (TLS may still be handshaking).
    Open,
}

/// A request on a connection: the segment it asked for and the response state.
struct Job {
    seg: Segment,
    /// The first request of the download (learns size, validator, range support).
    probe: bool,
    /// The body's way to the file: position, framing (once the head is parsed), the
    /// write block being filled, input held while the pool is empty.
    placer: Placer,
    keep_alive: bool,
    /// A body byte arrived for this job (retries on reused connections do not count otherwise).
    got_bytes: bool,
    /// When the request was started, and when its first body byte came (work stealing).
    started: Instant,
    first_byte: Option<Instant>,
}

/// Receive side of a connection: head accumulation, then the job's body.
#[derive(Default)]
struct Rx {
    job: Option<Job>,
    head: Vec<u8>,
    /// More bytes came than the response carries: the connection cannot be reused.
    extra: bool,
}

struct Conn {
    st: St,
    fd: Option<OwnedFd>,
    addr_i: usize,
    tls: Option<Box<UnbufferedClientConnection>>,
    rbuf: Option<Buf>,
    /// Unprocessed input is `rbuf[rlo..rhi]`.
    rlo: usize,
    rhi: usize,
    /// Bytes to send (TLS records or a plain request).
    out: Vec<u8>,
    /// A plaintext request waiting for the TLS connection to accept application data.
    pending_request: Vec<u8>,
    /// An operation is in flight.
    busy: bool,
    /// The in-flight RECV targets the write block (plain fast path).
    recv_direct: bool,
    /// Parked in `Loop::waiting` until a write block is free.
    waiting: bool,
    /// Consecutive failures without a response head (handshake, connect, early close).
    failures: u32,
    /// Open with nothing to do since this instant.
    idle_since: Option<Instant>,
    /// The in-flight operation is a socket → pipe SPLICE.
    splicing: bool,
    /// Engine `splice`: this connection's pipe.
    pipe: Option<Pipe>,
    /// kTLS is installed: the socket yields plaintext; rustls keeps only what post-handshake
    /// messages need (session tickets).
    kconn: Option<KernelConnection<ClientConnectionData>>,
    /// The in-flight operation is a RECVMSG reading a non-data TLS record (kTLS).
    recvmsg: bool,
    /// This connection stays in user-space TLS (its hand-off was refused).
    no_ktls: bool,
    cancel_sent: bool,
    eof: bool,
    /// The current request is not the first on this connection (keep-alive reuse).
    reused: bool,
    /// Requests started on this connection.
    requests: u32,
    /// close_notify was received.
    clean_close: bool,
    /// Gave up on this slot: every address failed `--max-tries` times.
    dead: bool,
    /// Backoff: do not reconnect before this instant.
    not_before: Option<Instant>,
    last_io: Instant,
    rx: Rx,
}

impl Conn {
    fn new(rbuf: Buf) -> Conn {
        Conn {
            st: St::Closed,
            fd: None,
            addr_i: 0,
            tls: None,
            rbuf: Some(rbuf),
            rlo: 0,
            rhi: 0,
            out: Vec::new(),
            pending_request: Vec::new(),
            busy: false,
            recv_direct: false,
            waiting: false,
            failures: 0,
            idle_since: None,
            splicing: false,
            pipe: None,
            kconn: None,
            recvmsg: false,
            no_ktls: false,
            cancel_sent: false,
            eof: false,
            reused: false,
            requests: 0,
            clean_close: false,
            dead: false,
            not_before: None,
            last_io: Instant::now(),
            rx: Rx::default(),
        }
    }
}

/// One write in flight.
struct WriteSlot {
    off: u64,
    /// Bytes submitted (padded to the alignment for the last O_DIRECT block).
    len: usize,
    /// Real body bytes in the block.
    fill: usize,
    /// Bytes the kernel has written so far.
    done: usize,
}

/// Download-wide state the connections share.
struct Shared<'a> {
    url: &'a Url,
    opts: &'a Options,
    pool: BufPool,
    align: u64,
    direct: bool,
    sequential: bool,
    file: bool,
    queue: VecDeque<Segment>,
    probe_assigned: bool,
    /// Failed attempts of the first request.
    probe_tries: u32,
    /// Where the first request starts: 0, or the first byte a resumed `.part` lacks.
    probe_start: u64,
    /// Where it ends: [`FIRST_SEGMENT`] later, or where a resumed `.part` has bytes again.
    probe_end: u64,
    planned: bool,
    ranges: bool,
    total: Option<u64>,
    validator: Option<Vec<u8>>,
    /// Full or final blocks waiting for a write SQE.
    to_write: VecDeque<WriteBlock>,
    landed: Landed,
    received: u64,
    fatal: Option<Error>,
    redirect: Option<Url>,
    need_fallocate: bool,
    /// Engine `splice`: bodies go socket → pipe → file.
    splice: bool,
    /// Hand finished TLS handshakes to the kernel.
    ktls: bool,
    /// Connections handed to kTLS.
    ktls_conns: usize,
    /// Why a hand-off was refused (the connection went on in user space).
    ktls_refused: Option<String>,
    used: Vec<bool>,
    /// Control-file state to validate against the first 206.
    resume: Option<State>,
    /// No new request before this instant (Retry-After of a 503/429).
    hold_until: Option<Instant>,
    disposition: Option<String>,
    /// The file on the server changed under the download: what is kept is of the old one.
    changed: bool,
}

/// Where a download goes and what it resumes.
pub struct Target<'a> {
    /// The open output.
    pub out: &'a Output,
    /// State read from the control file (`-c`), validated against the server's answer.
    pub resume: Option<State>,
    /// The control file to keep current (None for standard output).
    pub control: Option<PathBuf>,
    /// signalfd for SIGINT/SIGTERM.
    pub signals: Option<RawFd>,
    /// The engine that moves body bytes.
    pub engine: EngineKind,
    /// Hand TLS connections to the kernel (kTLS) once their handshake is done.
    pub ktls: bool,
}

/// Runs one download of `url` into `out`.
///
/// # Errors
/// Any [`Kind`]: the first fatal failure of a connection, a refused ring, a failed write.
pub fn run(
    url: &Url,
    opts: &Options,
    tls: Option<Arc<ClientConfig>>,
    addrs: Vec<SocketAddr>,
    target: Target<'_>,
    progress: &mut Progress,
) -> Result<Outcome> {
    let Target {
        out,
        resume,
        control,
        signals,
        engine,
        ktls,
    } = target;
    let resuming = resume.is_some();
    // A resumed download asks first for the first block it lacks, not for byte 0 again.
    let resume_start = resume.as_ref().map_or(0, |st| {
        let first_gap = match st.ranges.first() {
            Some(&(0, e)) => e,
            _ => 0,
        };
        align_down(first_gap.min(st.total.saturating_sub(1)), out.align)
    });
    // ... and only up to where the `.part` has bytes again.
    let resume_end = resume
        .as_ref()
        .and_then(|st| st.ranges.iter().map(|r| r.0).find(|&s| s > resume_start))
        .map_or(resume_start + FIRST_SEGMENT, |next| {
            next.min(resume_start + FIRST_SEGMENT)
        });
    let splice = engine == EngineKind::Splice;

    let n = opts.connections;
    let server_name = match &tls {
        Some(_) => Some(crate::tls::server_name(url.host())?),
        None => None,
    };
    let block = WRITE_BLOCK.max(out.align as usize);
    let wcount = (2 * n + 2).clamp(6, 64);
    let entries = (2 * n + wcount + 8).next_power_of_two() as u32;
    let mut ring = RingBuilder::new(entries)
        .single_issuer(true)
        .defer_taskrun(true)
        .coop_taskrun(true)
        .build()
        .map_err(|e| {
            err!(
                LocalIo,
                "io_uring setup: {e} (io_uring disabled by kernel.io_uring_disabled or seccomp?)"
            )
        })?;
    let rpool =
        BufPool::new(READ_BLOCK, n).map_err(|e| err!(LocalIo, "read blocks ({n} x {READ_BLOCK} bytes): {e}"))?;
    let wpool =
        BufPool::new(block, wcount).map_err(|e| err!(LocalIo, "write blocks ({wcount} x {block} bytes): {e}"))?;
    let registered = match ring.register_pools(&[&rpool, &wpool]) {
        Ok(()) => true,
        Err(e) => {
            if opts.verbose > 0 {
                eprintln!("ringdl: registering buffers failed ({e}; RLIMIT_MEMLOCK?): using plain READ/WRITE/RECV");
            }
            false
        }
    };
    let conns = (0..n)
        .map(|_| Conn::new(rpool.alloc().expect("one read block per connection")))
        .collect();
    let sh = Shared {
        url,
        opts,
        pool: wpool,
        align: out.align,
        direct: out.direct,
        sequential: out.sequential,
        file: out.part.is_some(),
        queue: VecDeque::new(),
        probe_assigned: false,
        probe_tries: 0,
        probe_start: resume_start,
        probe_end: resume_end,
        planned: false,
        ranges: false,
        total: None,
        validator: None,
        to_write: VecDeque::new(),
        landed: Landed::default(),
        received: 0,
        fatal: None,
        redirect: None,
        need_fallocate: false,
        splice,
        ktls,
        ktls_conns: 0,
        ktls_refused: None,
        used: vec![false; n],
        resume,
        hold_until: None,
        disposition: None,
        changed: false,
    };
    let mut dl = Loop {
        ring,
        conns,
        sh,
        tls,
        server_name,
        addrs,
        out_fd: out.fd.as_raw_fd(),
        slots: (0..wcount).map(|_| None).collect(),
        writes_in_flight: 0,
        waiting: VecDeque::new(),
        started: Instant::now(),
        tls_info: None,
        tick: Duration::from_millis(250),
        control,
        saved_bytes: 0,
        sync_snapshot: None,
        recent_rate: 0.0,
        rate_mark: (Instant::now(), 0),
        last_sync: Instant::now(),
        emitted: 0,
        stream_digest: opts
            .checksum
            .as_ref()
            .filter(|_| out.sequential)
            .map(|c| ring::digest::Context::new(c.algorithm)),
    };
    dl.push(Op::Timeout { after: dl.tick }, TAG_TICK)?;
    // SIGINT/SIGTERM arrive as a READ completion on the signalfd.
    let sigpool = BufPool::new(4096, 1).map_err(|e| err!(LocalIo, "signal buffer: {e}"))?;
    if let (Some(fd), Some(buf)) = (signals, sigpool.alloc()) {
        dl.push(
            Op::Read {
                fd,
                buf,
                range: 0..uring::signal::SIGINFO_SIZE,
                offset: u64::MAX,
            },
            TAG_SIGNAL,
        )?;
    }
    for i in 0..n {
        dl.connect(i)?;
    }
    match dl.event_loop(progress) {
        Ok(Some(u)) => return Ok(Outcome::Redirect(u)),
        Ok(None) => {}
        Err(mut e) => {
            // Let the writes in flight land first, then keep what landed: a later `-c`
            // resumes from the control file. A `.part` that holds nothing (only
            // preallocated zeros) is removed.
            dl.settle();
            let mut saved = false;
            if dl.sh.landed.bytes() == 0 && !resuming {
                out.remove_part();
            } else if dl.writes_in_flight > 0 {
                // Writes that did not complete in settle()'s 10 s: an fdatasync could hang
                // as long. The control file keeps its last (synced) state.
                eprintln!("ringdl: warning: writes still pending: the resume state is older");
            } else if dl.control.is_some() && dl.sh.file {
                // The control file may only name bytes that are on disk: fdatasync first.
                // If that fails, the control file keeps its last (synced) state.
                match dl.wait_for(
                    Op::Fsync {
                        fd: dl.out_fd,
                        datasync: true,
                    },
                    TAG_FSYNC | 1,
                ) {
                    Ok(r) if r >= 0 => saved = dl.save_control(None) && dl.sh.landed.bytes() > 0,
                    _ => eprintln!("ringdl: warning: fdatasync of the partial file failed: the resume state is older"),
                }
            }
            if let Some(part) = &out.part
                && !dl.sh.changed
            {
                if saved {
                    e.msg.push_str(&format!(
                        "; {} of {} bytes kept in {}: run again with -c to fetch only the rest",
                        dl.sh.landed.bytes(),
                        dl.sh.total.unwrap_or(0),
                        part.display()
                    ));
                } else if dl.sh.landed.bytes() > 0 && dl.sh.planned && !dl.sh.ranges {
                    e.msg.push_str(&format!(
                        "; {} bytes kept in {}, but the server does not serve ranges: a new run starts over",
                        dl.sh.landed.bytes(),
                        part.display()
                    ));
                }
            }
            progress.clear();
            return Err(e);
        }
    }
    let total = dl.sh.total.unwrap_or(dl.sh.received);
    if !dl.sh.landed.is_complete(total) {
        return Err(err!(
            Internal,
            "download ended with {} of {total} bytes on disk",
            dl.sh.landed.bytes()
        ));
    }
    if dl.sh.file {
        out.truncate(total)?;
        let r = dl.wait_for(
            Op::Fsync {
                fd: dl.out_fd,
                datasync: false,
            },
            TAG_FSYNC,
        )?;
        if r < 0 {
            return Err(err!(LocalIo, "fsync {}: {}", out.describe(), errno(r)));
        }
    }
    progress.clear();
    let digest = match (&opts.checksum, &out.part) {
        (Some(c), Some(part)) => Some(crate::verify::file_digest(
            &mut dl.ring,
            &dl.sh.pool,
            part,
            out.direct,
            total,
            c.algorithm,
        )?),
        (Some(_), None) => dl.stream_digest.take().map(|d| d.finish()),
        _ => None,
    };
    Ok(Outcome::Done(Summary {
        bytes: total,
        fetched: dl.sh.received,
        connections: dl.sh.used.iter().filter(|u| **u).count().max(1),
        tls: dl.tls_info.unwrap_or_else(|| "plain".to_owned()),
        elapsed: dl.started.elapsed(),
        registered,
        digest,
        disposition: dl.sh.disposition.take(),
        ktls_conns: dl.sh.ktls_conns,
        ktls_refused: dl.sh.ktls_refused.take(),
    }))
}

struct Loop<'a> {
    ring: Ring,
    conns: Vec<Conn>,
    sh: Shared<'a>,
    tls: Option<Arc<ClientConfig>>,
    server_name: Option<ServerName<'static>>,
    addrs: Vec<SocketAddr>,
    out_fd: RawFd,
    slots: Vec<Option<WriteSlot>>,
    writes_in_flight: usize,
    /// Connections stopped because the write pool was empty.
    waiting: VecDeque<usize>,
    started: Instant,
    tls_info: Option<String>,
    tick: Duration,
    /// The control file, kept current while the download runs.
    control: Option<PathBuf>,
    /// Bytes covered by the last saved control file.
    saved_bytes: u64,
    /// Ranges that an fdatasync in flight will make durable; saved when it completes.
    sync_snapshot: Option<Vec<(u64, u64)>>,
    /// The download's rate over the last half second or so, bytes/s (work stealing), and
    /// where that window started.
    recent_rate: f64,
    rate_mark: (Instant, u64),
    /// When the last periodic fdatasync for the control file was pushed.
    last_sync: Instant,
    /// Bytes queued to a sequential output (standard output, a FIFO) so far.
    emitted: u64,
    /// In-order digest of what goes to standard output (`--checksum` with `-o -`).
    stream_digest: Option<ring::digest::Context>,
}

/// Whether `rem` bytes left of `job` are worth a second connection: they would take at
/// least [`STEAL_TIME`], and at least twice the time the job waited for its first body
/// byte (the thief waits about as long before its first byte). The rate is the job's own
/// since its first body byte, once it has run [`STEAL_RATE_AFTER`]; before that
/// `fallback`, the download's recent rate per busy connection (bytes/s).
fn worth_stealing(job: &Job, rem: u64, fallback: f64) -> bool {
    if rem < STEAL_FLOOR {
        return false;
    }
    let Some(first) = job.first_byte else {
        // No byte yet (a slow first byte): nothing to go by but the bytes.
        return rem >= 8 * STEAL_FLOOR;
    };
    let ttfb = first.saturating_duration_since(job.started);
    let ran = first.elapsed();
    let moved = job.placer.pos().saturating_sub(job.seg.start);
    let rate = if ran >= STEAL_RATE_AFTER && moved > 0 {
        moved as f64 / ran.as_secs_f64()
    } else {
        fallback
    };
    if rate <= 0.0 {
        return rem >= 8 * STEAL_FLOOR;
    }
    let need = STEAL_TIME.max(2 * ttfb);
    rem as f64 >= need.as_secs_f64() * rate
}

/// "1 try", "3 tries".
fn n_tries(n: u32) -> String {
    if n == 1 {
        "1 try".to_owned()
    } else {
        format!("{n} tries")
    }
}

/// Wait before retry number `attempt` (1-based): `base * 2^(attempt-1)`, capped at 30 s,
/// times a jitter factor in [0.5, 1.5) so connections do not retry in lockstep.
fn backoff(base_s: f64, attempt: u32) -> Duration {
    let exp = base_s * f64::from(1u32 << attempt.saturating_sub(1).min(16));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let jitter = 0.5 + f64::from(nanos % 1000) / 1000.0;
    Duration::from_secs_f64((exp.min(30.0) * jitter).max(0.0))
}

fn errno(res: i32) -> rustix::io::Errno {
    rustix::io::Errno::from_raw_os_error(-res)
}

impl Loop<'_> {
    /// Runs until every segment has landed (`Ok(None)`), the first response redirects
    /// (`Ok(Some(url))`), or a fatal failure.
    fn event_loop(&mut self, progress: &mut Progress) -> Result<Option<Url>> {
        loop {
            self.kick()?;
            self.flush_writes()?;
            if let Some(e) = self.sh.fatal.take() {
                return Err(e);
            }
            if let Some(u) = self.sh.redirect.take() {
                return Ok(Some(u));
            }
            if self.finished() {
                return Ok(None);
            }
            self.ring
                .submit_and_wait(1)
                .map_err(|e| err!(LocalIo, "io_uring_enter: {e}"))?;
            while let Some(c) = self.ring.next_completion() {
                self.complete(c, progress)?;
            }
        }
    }

    /// After a fatal error: submits the blocks already filled and waits (≤ 10 s) for every
    /// write and pipe drain in flight, recording what lands, so the control file covers
    /// all the bytes that reached the file. Connections are not driven any more.
    fn settle(&mut self) {
        // What connections hold in their blocks is good too: queue it (the aligned part,
        // under O_DIRECT), except where a RECV into the block is in flight, and except
        // for standard output, which only takes bytes in order.
        if !self.sh.sequential {
            let trim = self.sh.direct.then_some(self.sh.align);
            for c in &mut self.conns {
                if !c.recv_direct
                    && let Some(job) = c.rx.job.as_mut()
                {
                    job.placer.release(trim, &mut self.sh.to_write);
                }
            }
        }
        let limit = Duration::from_secs(10);
        let deadline = Instant::now() + limit;
        // Wakes the wait below at the deadline even if no write ever completes.
        let _ = self.push(Op::Timeout { after: limit }, TAG_IGNORE);
        let busy =
            |l: &Self| l.writes_in_flight > 0 || l.conns.iter().any(|c| c.pipe.as_ref().is_some_and(|p| p.draining));
        loop {
            // Every write slot may be taken: submit the rest of the queue as slots free up.
            let _ = self.flush_writes();
            if !busy(self) || Instant::now() >= deadline {
                break;
            }
            if self.ring.submit_and_wait(1).is_err() {
                return;
            }
            while let Some(c) = self.ring.next_completion() {
                let idx = (c.tag & 0xffff_ffff) as usize;
                match c.tag & TAG_KIND {
                    TAG_WRITE => {
                        if let Some(slot) = self.slots[idx].take() {
                            self.writes_in_flight -= 1;
                            if c.result >= 0 && slot.done + c.result as usize >= slot.len {
                                self.sh.landed.add(slot.off, slot.off + slot.fill as u64);
                            }
                        }
                    }
                    TAG_DRAIN => {
                        if let Some(p) = self.conns[idx].pipe.as_mut() {
                            p.draining = false;
                            if c.result > 0 {
                                self.sh.landed.add(p.file_pos, p.file_pos + c.result as u64);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// Submits one operation and waits for its completion (end of the download only:
    /// other completions that arrive meanwhile are dropped).
    fn wait_for(&mut self, op: Op, tag: u64) -> Result<i32> {
        self.push(op, tag)?;
        loop {
            self.ring
                .submit_and_wait(1)
                .map_err(|e| err!(LocalIo, "io_uring_enter: {e}"))?;
            while let Some(c) = self.ring.next_completion() {
                if c.tag == tag {
                    return Ok(c.result);
                }
            }
        }
    }

    /// Writes the control file: `ranges` (made durable by an fdatasync), or everything that
    /// has landed (at exit, after the writes in flight were reaped or abandoned).
    /// Returns whether the control file was written.
    fn save_control(&mut self, ranges: Option<Vec<(u64, u64)>>) -> bool {
        let (Some(path), Some(total), true) = (&self.control, self.sh.total, self.sh.planned && self.sh.ranges) else {
            return false;
        };
        let ranges = ranges.unwrap_or_else(|| self.sh.landed.ranges().to_vec());
        let st = State {
            url: self.sh.opts.url.clone(),
            total,
            validator: self.sh.validator.clone(),
            ranges,
        };
        match crate::resume::save(path, &st) {
            Ok(()) => true,
            Err(m) => {
                eprintln!("ringdl: warning: {m}");
                false
            }
        }
    }

    fn push(&mut self, op: Op, tag: u64) -> Result<()> {
        self.ring
            .push(op, tag)
            .map_err(|_| err!(Internal, "submission queue full (ring sized too small)"))
    }

    /// All segments fetched and written.
    fn finished(&self) -> bool {
        self.sh.planned
            && self.sh.queue.is_empty()
            && self
                .conns
                .iter()
                .all(|c| c.rx.job.is_none() && c.pipe.as_ref().is_none_or(Pipe::is_idle))
            && self.sh.to_write.is_empty()
            && self.writes_in_flight == 0
    }

    fn connect(&mut self, i: usize) -> Result<()> {
        let c = &mut self.conns[i];
        let addr = self.addrs[c.addr_i % self.addrs.len()];
        let domain = if addr.is_ipv4() {
            rustix::net::AddressFamily::INET
        } else {
            rustix::net::AddressFamily::INET6
        };
        let fd = rustix::net::socket_with(
            domain,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| err!(LocalIo, "socket: {e}"))?;
        let _ = rustix::net::sockopt::set_tcp_nodelay(&fd, true);
        let raw = fd.as_raw_fd();
        c.fd = Some(fd);
        c.st = St::Connecting;
        c.busy = true;
        c.eof = false;
        c.reused = false;
        c.requests = 0;
        c.clean_close = false;
        c.cancel_sent = false;
        c.rlo = 0;
        c.rhi = 0;
        c.out.clear();
        c.last_io = Instant::now();
        let timeout = Duration::from_secs(self.sh.opts.connect_timeout_s);
        self.ring
            .push_with_timeout(Op::Connect { fd: raw, addr }, TAG_CONN | i as u64, timeout)
            .map_err(|_| err!(Internal, "submission queue full"))
    }

    fn complete(&mut self, c: Completion, progress: &mut Progress) -> Result<()> {
        match c.tag & TAG_KIND {
            TAG_CONN => {
                let i = (c.tag & 0xffff_ffff) as usize;
                let r = self.conn_completion(i, c);
                self.after(i, r)?;
            }
            TAG_WRITE => self.write_completion(c)?,
            TAG_DRAIN => self.drain_completion((c.tag & 0xffff_ffff) as usize, c.result)?,
            TAG_TICK => {
                self.on_tick(progress)?;
                self.push(Op::Timeout { after: self.tick }, TAG_TICK)?;
            }
            TAG_FALLOCATE if c.result < 0 => {
                let e = errno(c.result);
                if e == rustix::io::Errno::NOSPC || e == rustix::io::Errno::FBIG {
                    self.sh.fatal = Some(err!(
                        LocalIo,
                        "not enough space for {} bytes: {e}",
                        self.sh.total.unwrap_or(0)
                    ));
                } else if self.sh.opts.verbose > 0 {
                    eprintln!("ringdl: fallocate: {e} (continuing without preallocation)");
                }
            }
            TAG_CONTROL => {
                let snap = self.sync_snapshot.take();
                if c.result >= 0 {
                    self.save_control(snap);
                }
            }
            TAG_SIGNAL => {
                let name = match c.buf.as_deref().and_then(uring::signal::signo) {
                    Some(15) => "SIGTERM",
                    _ => "SIGINT",
                };
                self.sh.fatal = Some(err!(Interrupted, "interrupted by {name}"));
            }
            _ => {}
        }
        Ok(())
    }

    /// Handles a connection's failure, or drives it on.
    fn after(&mut self, i: usize, r: std::result::Result<(), Fail>) -> Result<()> {
        let r = r.and_then(|()| self.drive(i));
        if let Err(f) = r {
            self.fail(i, f)?;
        }
        Ok(())
    }

    fn conn_completion(&mut self, i: usize, cq: Completion) -> std::result::Result<(), Fail> {
        let c = &mut self.conns[i];
        c.busy = false;
        c.last_io = Instant::now();
        let res = cq.result;
        if let Some(data) = cq.data {
            // A SEND came back: its Vec is the connection's out buffer.
            let mut data = data;
            if res >= 0 && (res as usize) < data.len() {
                data.drain(..res as usize);
                c.out = data;
            } else {
                data.clear();
                c.out = data;
            }
            if res < 0 {
                return Err(self.io_fail(i, "send", res));
            }
            return Ok(());
        }
        if let Some(buf) = cq.buf {
            if c.recvmsg {
                c.recvmsg = false;
                c.rbuf = Some(buf);
                return self.record_completion(i, res, cq.control.unwrap_or_default());
            }
            // kTLS: a non-data record (alert, NewSessionTicket, KeyUpdate) is at the head.
            let non_data = c.kconn.is_some() && res == -rustix::io::Errno::IO.raw_os_error();
            if c.recv_direct {
                c.recv_direct = false;
                let n = if res > 0 { res as usize } else { 0 };
                with_placer(&mut c.rx, &mut self.sh, |p, blocks| {
                    p.recv_done(buf, n);
                    if n > 0 { p.settle(blocks) } else { Ok(Fed::More) }
                })?;
                if non_data {
                    return self.read_record(i);
                }
                if res < 0 {
                    return Err(self.io_fail(i, "recv", res));
                }
                if res == 0 {
                    c.eof = true;
                }
                return Ok(());
            }
            c.rbuf = Some(buf);
            if non_data {
                return self.read_record(i);
            }
            if res < 0 {
                return Err(self.io_fail(i, "recv", res));
            }
            if res > 0 {
                c.failures = 0;
            }
            if res == 0 {
                c.eof = true;
            } else {
                c.rhi += res as usize;
            }
            return Ok(());
        }
        if c.splicing {
            c.splicing = false;
            if c.kconn.is_some() && res == -rustix::io::Errno::INVAL.raw_os_error() {
                // SPLICE stops with EINVAL at a non-data record under kTLS RX.
                return self.read_record(i);
            }
            if res < 0 {
                return Err(self.io_fail(i, "splice", res));
            }
            if res == 0 {
                c.eof = true;
                return Ok(());
            }
            let n = res as usize;
            let pipe = c.pipe.as_mut().expect("a splicing connection has a pipe");
            pipe.held += n;
            with_placer(&mut c.rx, &mut self.sh, |p, _| {
                p.advance(n);
                Ok(Fed::More)
            })?;
            self.drain(i).map_err(|e| Fail::fatal(e.kind, e.msg))?;
            with_placer(&mut self.conns[i].rx, &mut self.sh, Placer::settle)?;
            return Ok(());
        }
        // CONNECT
        if c.st == St::Connecting {
            if res < 0 {
                let e = errno(res);
                let addr = self.addrs[c.addr_i % self.addrs.len()];
                c.addr_i += 1;
                let kind = Kind::Network;
                let msg = if e == rustix::io::Errno::CANCELED {
                    format!(
                        "connect to {addr}: timed out after {} s",
                        self.sh.opts.connect_timeout_s
                    )
                } else {
                    format!("connect to {addr}: {e}")
                };
                return Err(Fail::retry(kind, msg));
            }
            c.st = St::Open;
            if let (Some(cfg), Some(name)) = (&self.tls, &self.server_name) {
                let conn = UnbufferedClientConnection::new(cfg.clone(), name.clone())
                    .map_err(|e| Fail::fatal(Kind::Tls, format!("TLS: {e}")))?;
                c.tls = Some(Box::new(conn));
            }
            return Ok(());
        }
        Ok(())
    }

    fn io_fail(&self, i: usize, what: &str, res: i32) -> Fail {
        let c = &self.conns[i];
        let e = errno(res);
        if e == rustix::io::Errno::CANCELED && c.cancel_sent {
            return Fail::retry(
                Kind::Network,
                format!("no data for {} s: connection reset", self.sh.opts.stall_timeout_s),
            );
        }
        Fail::retry(Kind::Network, format!("{what} from {}: {e}", self.sh.url.host()))
    }

    /// Advances connection `i` until it has an operation in flight or nothing to do.
    fn drive(&mut self, i: usize) -> std::result::Result<(), Fail> {
        loop {
            if self.sh.fatal.is_some() || self.sh.redirect.is_some() {
                return Ok(());
            }
            let c = &mut self.conns[i];
            if c.busy || c.st != St::Open {
                return Ok(());
            }
            if !c.out.is_empty() {
                let fd = c.fd.as_ref().expect("open connection has a socket").as_raw_fd();
                let data = std::mem::take(&mut c.out);
                let len = data.len();
                c.busy = true;
                self.ring
                    .push(
                        Op::Send {
                            fd,
                            data,
                            range: 0..len,
                            flags: rustix::net::SendFlags::NOSIGNAL.bits(),
                        },
                        TAG_CONN | i as u64,
                    )
                    .map_err(|_| Fail::fatal(Kind::Internal, "submission queue full"))?;
                return Ok(());
            }
            // Input held back by an empty write pool goes first.
            if c.rx.job.as_ref().is_some_and(|j| j.placer.has_spill()) {
                if with_placer(&mut c.rx, &mut self.sh, Placer::retry_spill)? == Fed::Blocked {
                    self.wait_for_block(i);
                    return Ok(());
                }
                continue;
            }
            if c.tls.is_some() {
                match pump_tls(c, &mut self.sh, &mut self.tls_info)? {
                    Pumped::Again => continue,
                    Pumped::Blocked => {
                        self.wait_for_block(i);
                        return Ok(());
                    }
                    Pumped::NeedData => {}
                    Pumped::PeerClosed => c.eof = true,
                    Pumped::HandOff => {
                        self.hand_off(i)?;
                        continue;
                    }
                }
            } else if c.rlo < c.rhi {
                let rbuf = c.rbuf.take().expect("idle connection holds its read block");
                let r = feed(&mut c.rx, &mut self.sh, &rbuf[c.rlo..c.rhi]);
                c.rbuf = Some(rbuf);
                c.rlo = c.rhi;
                r?;
                continue;
            }
            let c = &mut self.conns[i];
            let handshaking = c.tls.as_ref().is_some_and(|t| t.is_handshaking());
            if c.eof {
                if c.rx.job.is_some() {
                    return self.on_eof(i);
                }
                if handshaking {
                    return Err(Fail::retry(Kind::Network, "connection closed during the TLS handshake"));
                }
                // An idle keep-alive connection the server closed.
                return self.recycle(i);
            }
            if c.rx.job.is_none() && !handshaking {
                if c.rx.extra {
                    return self.recycle(i);
                }
                if c.idle_since.is_none() {
                    c.idle_since = Some(Instant::now());
                }
                if self.assign(i)? {
                    continue;
                }
                return Ok(());
            }
            if c.rx.job.as_ref().is_some_and(|j| j.placer.has_spill()) {
                self.wait_for_block(i);
                return Ok(());
            }
            return self.post_recv(i);
        }
    }

    /// The peer closed (FIN or TLS close_notify) while a job was open.
    fn on_eof(&mut self, i: usize) -> std::result::Result<(), Fail> {
        let c = &mut self.conns[i];
        let job = c.rx.job.as_ref().expect("on_eof with a job");
        match job.placer.delimiter() {
            Some(Delimiter::Close) if (c.tls.is_some() || c.kconn.is_some()) && !c.clean_close => Err(Fail::retry(
                Kind::Protocol,
                "connection closed without TLS close_notify: the body may be truncated",
            )),
            Some(Delimiter::Close) => {
                self.sh.total = Some(job.placer.pos());
                finish_job(&mut c.rx, &mut self.sh);
                self.recycle(i)
            }
            Some(Delimiter::Length(rem)) => Err(Fail::retry(
                Kind::Network,
                format!("connection closed with {rem} bytes of the response still to come"),
            )),
            Some(Delimiter::Chunked(_)) => Err(Fail::retry(Kind::Network, "connection closed inside a chunked body")),
            None => Err(Fail::retry(Kind::Network, "connection closed before the response head")),
        }
    }

    /// Posts the RECV that the connection's state asks for.
    fn post_recv(&mut self, i: usize) -> std::result::Result<(), Fail> {
        let c = &mut self.conns[i];
        let fd = c.fd.as_ref().expect("open connection has a socket").as_raw_fd();
        // Engine splice: socket → pipe while the pipe has room; `drain` empties it to the file.
        if self.sh.splice
            && c.tls.is_none()
            && let Some(Delimiter::Length(rem)) = c.rx.job.as_ref().and_then(|j| j.placer.delimiter())
        {
            let rem = *rem;
            if c.pipe.is_none() {
                c.pipe = Some(Pipe::new().map_err(|e| Fail::fatal(Kind::LocalIo, format!("pipe: {e}")))?);
            }
            let pipe = c.pipe.as_mut().expect("pipe just ensured");
            if pipe.held == 0 && !pipe.draining {
                pipe.file_pos = c.rx.job.as_ref().expect("job").placer.pos();
            }
            if pipe.room() == 0 {
                // Full: the pipe → file completion drives this connection again.
                return Ok(());
            }
            let len = (pipe.room() as u64).min(rem).min(self.sh.opts.splice_chunk as u64) as u32;
            let op = Op::Splice {
                fd_in: fd,
                off_in: None,
                fd_out: pipe.wr(),
                off_out: None,
                len,
                flags: SPLICE_F_MOVE,
            };
            c.busy = true;
            c.last_io = Instant::now();
            c.splicing = true;
            return self
                .ring
                .push(op, TAG_CONN | i as u64)
                .map_err(|_| Fail::fatal(Kind::Internal, "submission queue full"));
        }
        // Plain HTTP with a known length: receive straight into the write block.
        if c.tls.is_none()
            && let Some(job) = c.rx.job.as_mut()
            && let Some(Delimiter::Length(_)) = job.placer.delimiter()
        {
            let mut blocks = Blocks {
                pool: &self.sh.pool,
                queue: &mut self.sh.to_write,
            };
            let Some((buf, range)) = job.placer.recv_target(&mut blocks) else {
                self.wait_for_block(i);
                return Ok(());
            };
            c.busy = true;
            c.last_io = Instant::now();
            c.recv_direct = true;
            return self
                .ring
                .push(
                    Op::Recv {
                        fd,
                        buf,
                        range,
                        flags: 0,
                    },
                    TAG_CONN | i as u64,
                )
                .map_err(|_| Fail::fatal(Kind::Internal, "submission queue full"));
        }
        let mut rbuf = c.rbuf.take().expect("idle connection holds its read block");
        if c.rlo == c.rhi {
            c.rlo = 0;
            c.rhi = 0;
        } else if c.rhi == rbuf.len() {
            rbuf.copy_within(c.rlo..c.rhi, 0);
            c.rhi -= c.rlo;
            c.rlo = 0;
        }
        if c.rhi == rbuf.len() {
            c.rbuf = Some(rbuf);
            return Err(Fail::retry(Kind::Protocol, "a TLS record larger than the read block"));
        }
        let range = c.rhi..rbuf.len();
        c.busy = true;
        c.last_io = Instant::now();
        self.ring
            .push(
                Op::Recv {
                    fd,
                    buf: rbuf,
                    range,
                    flags: 0,
                },
                TAG_CONN | i as u64,
            )
            .map_err(|_| Fail::fatal(Kind::Internal, "submission queue full"))
    }

    /// Installs kernel TLS on connection `i` (TX and RX) from rustls' secrets; from here on
    /// the socket carries plaintext. A refusal before the secrets are taken keeps the
    /// connection in user-space TLS (same bytes, engine direct for it).
    fn hand_off(&mut self, i: usize) -> std::result::Result<(), Fail> {
        use std::os::fd::AsFd;
        let c = &mut self.conns[i];
        let tls = c.tls.take().expect("hand-off of a TLS connection");
        let fd = c.fd.as_ref().expect("open connection has a socket");
        let refuse = |why: String| why;
        let refused = match tls.negotiated_cipher_suite() {
            Some(suite) if !ktls::offloadable(suite) => {
                Some(refuse(format!("cipher suite {:?} is not offloadable", suite.suite())))
            }
            None => Some(refuse("no cipher suite".into())),
            Some(_) => ktls::install_ulp(fd.as_fd()).err().map(|e| format!("{e}")),
        };
        if let Some(why) = refused {
            if self.sh.opts.verbose > 0 {
                eprintln!("ringdl: connection {i}: kTLS refused ({why}): staying in user-space TLS");
            }
            self.sh.ktls_refused.get_or_insert(why);
            c.tls = Some(tls);
            c.no_ktls = true;
            return Ok(());
        }
        let version = tls.protocol_version().expect("a finished handshake has a version");
        let (secrets, kconn) = (*tls)
            .dangerous_into_kernel_connection()
            .map_err(|e| Fail::retry(Kind::Tls, format!("kTLS hand-off: {e}")))?;
        let (tx_seq, tx) = secrets.tx;
        let (rx_seq, rx) = secrets.rx;
        ktls::install_tx(fd.as_fd(), version, tx_seq, tx)
            .map_err(|e| Fail::retry(Kind::Tls, format!("kTLS TX: {e}")))?;
        ktls::install_rx(fd.as_fd(), version, rx_seq, rx)
            .map_err(|e| Fail::retry(Kind::Tls, format!("kTLS RX: {e}")))?;
        if version == rustls::ProtocolVersion::TLSv1_3 {
            // Linux 6.0+: decrypt whole records straight into our buffer; older kernels say no.
            let _ = ktls::set_rx_expect_no_pad(fd.as_fd());
        }
        c.kconn = Some(kconn);
        c.out = std::mem::take(&mut c.pending_request);
        self.sh.ktls_conns += 1;
        if self.sh.opts.verbose > 0 {
            eprintln!("ringdl: connection {i}: TLS handed to the kernel (kTLS TX+RX)");
        }
        Ok(())
    }

    /// Reads the non-data TLS record at the head of a kTLS socket (RECV said EIO, SPLICE
    /// said EINVAL): RECVMSG with room for the TLS_GET_RECORD_TYPE control message.
    fn read_record(&mut self, i: usize) -> std::result::Result<(), Fail> {
        let c = &mut self.conns[i];
        let fd = c.fd.as_ref().expect("open connection has a socket").as_raw_fd();
        let mut rbuf = c.rbuf.take().expect("idle connection holds its read block");
        if c.rlo == c.rhi {
            c.rlo = 0;
            c.rhi = 0;
        } else if c.rlo > 0 {
            rbuf.copy_within(c.rlo..c.rhi, 0);
            c.rhi -= c.rlo;
            c.rlo = 0;
        }
        let range = c.rhi..rbuf.len();
        c.busy = true;
        c.recvmsg = true;
        c.last_io = Instant::now();
        let op = Op::RecvMsg {
            fd,
            buf: rbuf,
            range,
            control_len: ktls::CMSG_SPACE_RECORD_TYPE,
            flags: 0,
        };
        self.ring
            .push(op, TAG_CONN | i as u64)
            .map_err(|_| Fail::fatal(Kind::Internal, "submission queue full"))
    }

    /// A RECVMSG under kTLS completed: application data joins the read block; an alert or
    /// handshake record is handled here.
    fn record_completion(&mut self, i: usize, res: i32, control: Vec<u8>) -> std::result::Result<(), Fail> {
        let c = &mut self.conns[i];
        if res < 0 {
            return Err(self.io_fail(i, "recvmsg", res));
        }
        if res == 0 {
            c.eof = true;
            return Ok(());
        }
        let n = res as usize;
        let Some(typ) = ktls::record_type(&control) else {
            return Err(Fail::retry(Kind::Tls, "kTLS RECVMSG returned no record type"));
        };
        if typ == ktls::content_type::APPLICATION_DATA {
            c.rhi += n;
            return Ok(());
        }
        let rbuf = c.rbuf.as_ref().expect("read block back");
        let payload = rbuf[c.rhi..c.rhi + n].to_vec();
        match ktls::NonData::decode(typ, &payload) {
            Ok(rec) if rec.is_close_notify() => {
                c.eof = true;
                c.clean_close = true;
                Ok(())
            }
            Ok(ktls::NonData::Alert { level, description }) => Err(Fail::retry(
                Kind::Tls,
                format!("TLS alert from the server (level {level}, description {description})"),
            )),
            Ok(ktls::NonData::Handshake(bytes)) => {
                for m in ktls::handshake_messages(&bytes) {
                    let m =
                        m.map_err(|_| Fail::retry(Kind::Tls, "a handshake message split across records under kTLS"))?;
                    match m.typ {
                        ktls::handshake_type::NEW_SESSION_TICKET => {
                            let res = c.kconn.as_mut().map(|k| k.handle_new_session_ticket(m.body));
                            if self.sh.opts.verbose > 0 {
                                match res {
                                    Some(Err(e)) => eprintln!("ringdl: connection {i}: session ticket ignored: {e}"),
                                    _ => eprintln!("ringdl: connection {i}: NewSessionTicket under kTLS"),
                                }
                            }
                        }
                        // Rekeying kTLS RX needs Linux 6.14 (TLS_RX again after EKEYEXPIRED);
                        // on every kernel the safe answer is a new connection for the rest.
                        ktls::handshake_type::KEY_UPDATE => {
                            return Err(Fail::retry(
                                Kind::Network,
                                "the server updated its TLS keys (KeyUpdate): continuing on a new connection",
                            ));
                        }
                        t => {
                            return Err(Fail::retry(
                                Kind::Tls,
                                format!("unexpected TLS handshake message {t} after the handshake"),
                            ));
                        }
                    }
                }
                Ok(())
            }
            Err(e) => Err(Fail::retry(Kind::Tls, format!("kTLS record: {e}"))),
        }
    }

    /// Parks connection `i` until a write block is free (once, however often it asks).
    fn wait_for_block(&mut self, i: usize) {
        if !self.conns[i].waiting {
            self.conns[i].waiting = true;
            self.waiting.push_back(i);
        }
    }

    /// Engine splice: SPLICE pipe → file at the held bytes' offset once the pipe holds
    /// `--write-threshold` bytes, is full, or holds the end of the response.
    fn drain(&mut self, i: usize) -> Result<()> {
        let c = &mut self.conns[i];
        let body_done =
            c.rx.job
                .as_ref()
                .is_none_or(|j| matches!(j.placer.delimiter(), Some(Delimiter::Length(0))));
        let Some(pipe) = c.pipe.as_mut() else { return Ok(()) };
        if pipe.draining || pipe.held == 0 {
            return Ok(());
        }
        // A pipe fills by slots (pages), not bytes: spliced socket data may use a page per
        // MSS-sized fragment, so wait for at most an eighth of the byte capacity, or a socket
        // SPLICE could block on a pipe that is "full" while we wait for the threshold.
        let threshold = self.sh.opts.write_threshold.min(pipe.cap / 8);
        if pipe.held < threshold && pipe.room() > 0 && !body_done && !c.eof {
            return Ok(());
        }
        pipe.draining = true;
        let op = Op::Splice {
            fd_in: pipe.rd(),
            off_in: None,
            fd_out: self.out_fd,
            off_out: Some(pipe.file_pos),
            len: pipe.held.min(u32::MAX as usize) as u32,
            flags: SPLICE_F_MOVE,
        };
        self.push(op, TAG_DRAIN | i as u64)
    }

    fn drain_completion(&mut self, i: usize, res: i32) -> Result<()> {
        let pipe = self.conns[i].pipe.as_mut().expect("drain of a pipe");
        pipe.draining = false;
        if res <= 0 {
            let at = pipe.file_pos;
            let e = if res == 0 {
                "nothing written".to_owned()
            } else {
                errno(res).to_string()
            };
            self.sh.fatal = Some(err!(LocalIo, "splice to {} at offset {at}: {e}", self.sh.url));
            return Ok(());
        }
        let n = res as usize;
        self.sh.landed.add(pipe.file_pos, pipe.file_pos + n as u64);
        pipe.file_pos += n as u64;
        pipe.held -= n;
        self.drain(i)?;
        self.after(i, Ok(()))
    }

    /// Gives an idle open connection its next request; true when it got one.
    fn assign(&mut self, i: usize) -> std::result::Result<bool, Fail> {
        // A pipe still holding the previous range must empty first: its bytes are contiguous.
        if self.sh.hold_until.is_some_and(|t| t > Instant::now())
            || self.conns[i].pipe.as_ref().is_some_and(|p| !p.is_idle())
        {
            return Ok(false);
        }
        let seg = if !self.sh.probe_assigned {
            self.sh.probe_assigned = true;
            Segment {
                start: self.sh.probe_start,
                end: self.sh.probe_end,
                tries: self.sh.probe_tries,
            }
        } else if let Some(s) = self.sh.queue.pop_front() {
            s
        } else if let Some(s) = self.steal(i) {
            s
        } else {
            return Ok(false);
        };
        self.start_job(i, seg, !self.sh.planned);
        Ok(true)
    }

    /// The running body with the most bytes still to come, if splitting it is worth a
    /// request: (connection, split point: aligned, inside what is still to come).
    fn steal_victim(&self, thief: Option<usize>) -> Option<(usize, u64)> {
        if !self.sh.planned || !self.sh.ranges || self.sh.splice || self.sh.sequential {
            return None;
        }
        let align = self.sh.align;
        let busy = self.conns.iter().filter(|c| c.rx.job.is_some()).count().max(1);
        let ran = self.started.elapsed().as_secs_f64();
        let rate = if self.recent_rate > 0.0 {
            self.recent_rate
        } else if ran > 0.0 {
            self.sh.received as f64 / ran
        } else {
            0.0
        };
        let fallback = rate / busy as f64;
        let (v, rem) = self
            .conns
            .iter()
            .enumerate()
            .filter(|&(j, _)| Some(j) != thief)
            .filter_map(|(j, c)| {
                let job = c.rx.job.as_ref()?;
                let rem = job.placer.remaining();
                (matches!(job.placer.delimiter(), Some(Delimiter::Length(_))) && worth_stealing(job, rem, fallback))
                    .then_some((j, rem))
            })
            .max_by_key(|&(_, rem)| rem)?;
        let job = self.conns[v].rx.job.as_ref()?;
        let (pos, end) = (job.placer.pos(), job.placer.end());
        let at = align_up(pos + rem / 2, align);
        (pos < at && at < end && at <= job.seg.end).then_some((v, at))
    }

    /// Work stealing: with the queue empty, connection `thief` takes the second half of
    /// the largest running body (from an aligned offset); the victim stops there and its
    /// connection is not reused (the rest of its response is not read). Without this the
    /// last segments keep one connection busy while the others idle.
    fn steal(&mut self, thief: usize) -> Option<Segment> {
        let (v, at) = self.steal_victim(Some(thief))?;
        let job = self.conns[v].rx.job.as_mut()?;
        if !job.placer.shrink(at) {
            return None;
        }
        // The stolen half keeps the segment's tries: a split is not a fresh budget.
        let seg = Segment {
            start: at,
            end: job.seg.end,
            tries: job.seg.tries,
        };
        job.seg.end = at;
        if self.sh.opts.verbose > 0 {
            eprintln!(
                "ringdl: connection {thief}: takes bytes {}-{} from connection {v}",
                seg.start,
                seg.end - 1
            );
        }
        Some(seg)
    }

    fn start_job(&mut self, i: usize, seg: Segment, probe: bool) {
        let c = &mut self.conns[i];
        self.sh.used[i] = true;
        // A request on a connection that sat idle may meet the server's keep-alive close: a
        // failure before any byte then does not count as a try.
        c.reused = c.requests > 0 || c.idle_since.is_some_and(|t| t.elapsed() > Duration::from_secs(1));
        c.idle_since = None;
        c.requests += 1;
        // The first request, and every request once ranges are known to work, asks for its
        // segment; a server without ranges gets a plain GET.
        let range = (probe || self.sh.ranges).then(|| ByteRange::FromTo(seg.start, seg.end - 1));
        let mut req = Vec::with_capacity(256);
        Request {
            url: self.sh.url,
            range,
            user_agent: crate::USER_AGENT,
            extra_headers: &[],
        }
        .write_to(&mut req);
        if self.sh.opts.verbose > 1 {
            eprintln!(
                "ringdl: connection {i}: GET bytes {}-{}",
                seg.start,
                seg.end.saturating_sub(1)
            );
        }
        c.rx.job = Some(Job {
            seg,
            probe,
            placer: Placer::new(seg.start, seg.end),
            keep_alive: true,
            got_bytes: false,
            started: Instant::now(),
            first_byte: None,
        });
        c.rx.head.clear();
        c.rx.extra = false;
        if c.tls.is_some() {
            c.pending_request = req;
        } else {
            c.out = req;
        }
    }

    /// Closes a connection that cannot carry another request, and opens a new one when
    /// work is left.
    fn recycle(&mut self, i: usize) -> std::result::Result<(), Fail> {
        self.close(i);
        if self.wants_connection() {
            self.connect(i).map_err(|e| Fail::fatal(e.kind, e.msg))?;
        }
        Ok(())
    }

    /// Work exists that an idle connection could take.
    fn wants_connection(&self) -> bool {
        !self.sh.probe_assigned || !self.sh.queue.is_empty() || self.steal_victim(None).is_some()
    }

    /// Hands queued segments to idle connections and reopens closed ones while work is left.
    fn kick(&mut self) -> Result<()> {
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            if c.busy || c.dead || c.rx.job.is_some() || c.not_before.is_some_and(|t| t > Instant::now()) {
                continue;
            }
            let single = self.sh.planned && !self.sh.ranges;
            match c.st {
                St::Open if single && self.sh.queue.is_empty() => self.close(i),
                St::Open if self.wants_connection() => {
                    self.after(i, Ok(()))?;
                }
                St::Closed if self.wants_connection() && !(single && self.conns.iter().any(|c| c.st != St::Closed)) => {
                    self.conns[i].not_before = None;
                    self.connect(i)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Closes a connection's socket (the CLOSE is an SQE too).
    fn close(&mut self, i: usize) {
        let c = &mut self.conns[i];
        c.st = St::Closed;
        c.busy = false;
        c.tls = None;
        c.kconn = None;
        c.no_ktls = false;
        c.eof = false;
        c.rx.extra = false;
        c.rlo = 0;
        c.rhi = 0;
        c.out.clear();
        c.pending_request.clear();
        if let Some(fd) = c.fd.take() {
            let _ = self.ring.push(Op::Close { fd }, TAG_IGNORE);
        }
    }

    /// A connection failed: keep the aligned bytes it placed, requeue the rest of its
    /// segment, close it, and reconnect when work is left.
    fn fail(&mut self, i: usize, f: Fail) -> Result<()> {
        if !f.retry {
            self.sh.fatal = Some(Error::new(f.kind, f.msg));
            return Ok(());
        }
        if self.conns[i].busy {
            // Wait for the in-flight operation: its buffer comes back with the completion.
            if !self.conns[i].cancel_sent {
                self.conns[i].cancel_sent = true;
                self.push(
                    Op::Cancel {
                        target_tag: TAG_CONN | i as u64,
                    },
                    TAG_IGNORE,
                )?;
            }
            return Ok(());
        }
        let verbose = self.sh.opts.verbose;
        let c = &mut self.conns[i];
        let job = c.rx.job.take();
        let reused = c.reused;
        let tries_seen;
        if let Some(mut job) = job {
            // O_DIRECT keeps the aligned part of the block and fetches the rest again.
            // Buffered and splice keep every byte: under splice the block holds only what
            // came with the head, and the pipe (drained below) holds the rest, so the
            // retry starts at the body's position.
            let trim = self.sh.direct.then_some(self.sh.align);
            let from = job.placer.release(trim, &mut self.sh.to_write);
            if job.probe && !self.sh.planned && matches!(f.kind, Kind::Protocol | Kind::Tls) {
                self.sh.fatal = Some(Error::new(f.kind, f.msg));
                return Ok(());
            }
            let mut seg = job.seg;
            // Without Range support a stream can only start again from zero.
            seg.start = if self.sh.ranges { from } else { 0 };
            if self.sh.sequential && seg.start < self.emitted {
                self.sh.fatal = Some(err!(
                    Network,
                    "{}; cannot start over: {} bytes already went to standard output",
                    f.msg,
                    self.emitted
                ));
                return Ok(());
            }
            // A try counts when the attempt moved nothing forward: a connection that dies
            // after delivering bytes (a KeyUpdate under kTLS, a flaky link) is progress, and
            // the file size bounds how often that can happen. A reused keep-alive connection
            // that fails before any byte is the server's idle close, not a failed try.
            let progressed = seg.start >= job.seg.start + MIN_PROGRESS && self.sh.ranges;
            if !progressed && (job.got_bytes || !reused) {
                seg.tries += 1;
            }
            tries_seen = seg.tries;
            if seg.tries >= self.sh.opts.max_tries {
                self.sh.fatal = Some(Error::new(
                    f.kind,
                    format!("{} (gave up after {})", f.msg, n_tries(seg.tries)),
                ));
                return Ok(());
            }
            if verbose > 0 {
                eprintln!(
                    "ringdl: connection {i}: {}; retrying bytes {}-{} (try {})",
                    f.msg,
                    seg.start,
                    seg.end - 1,
                    seg.tries + 1
                );
            }
            if job.probe && !self.sh.planned {
                self.sh.probe_assigned = false;
                self.sh.probe_tries = seg.tries;
            } else if seg.start < seg.end {
                self.sh.queue.push_front(seg);
            }
        } else {
            // No request was lost, but a server that accepts and then fails every connection
            // must not keep us busy forever: count these too.
            self.conns[i].failures += 1;
            tries_seen = self.conns[i].failures;
            if verbose > 0 {
                eprintln!("ringdl: connection {i}: {}", f.msg);
            }
        }
        // Bytes already spliced into this slot's pipe are good: let them reach the file.
        self.drain(i)?;
        let connect_failed = self.conns[i].st == St::Connecting;
        self.close(i);
        let c = &mut self.conns[i];
        if (connect_failed && c.addr_i >= self.addrs.len() * self.sh.opts.max_tries as usize)
            || c.failures >= self.sh.opts.max_tries
        {
            // Every address had its chances: this slot stops; the download fails when no
            // connection is left.
            c.dead = true;
            if self.conns.iter().all(|c| c.dead) {
                self.sh.fatal = Some(Error::new(
                    f.kind,
                    format!("{} (gave up after {})", f.msg, n_tries(self.sh.opts.max_tries)),
                ));
            }
            return Ok(());
        }
        // Exponential backoff with jitter before this slot reconnects; `kick` reopens it.
        let attempt = if connect_failed { c.addr_i as u32 } else { tries_seen };
        let wait = backoff(self.sh.opts.retry_wait_s, attempt).max(f.delay.unwrap_or_default());
        c.not_before = Some(Instant::now() + wait);
        Ok(())
    }

    fn write_completion(&mut self, c: Completion) -> Result<()> {
        let s = (c.tag & 0xffff_ffff) as usize;
        let buf = c.buf.expect("a write carries its block");
        let slot = self.slots[s].as_mut().expect("write slot in use");
        if c.result < 0 {
            self.writes_in_flight -= 1;
            let e = errno(c.result);
            let what = if e == rustix::io::Errno::NOSPC {
                "disk full"
            } else {
                "write failed"
            };
            self.sh.fatal = Some(err!(
                LocalIo,
                "{what} at offset {} ({} bytes): {e}",
                slot.off + slot.done as u64,
                slot.len - slot.done
            ));
            return Ok(());
        }
        slot.done += c.result as usize;
        if c.result == 0 || slot.done < slot.len {
            if c.result == 0 || (self.sh.direct && !(slot.done as u64).is_multiple_of(self.sh.align)) {
                self.writes_in_flight -= 1;
                self.sh.fatal = Some(err!(
                    LocalIo,
                    "short write at offset {}: {} of {} bytes",
                    slot.off,
                    slot.done,
                    slot.len
                ));
                return Ok(());
            }
            let off = if self.sh.sequential {
                u64::MAX
            } else {
                slot.off + slot.done as u64
            };
            let range = slot.done..slot.len;
            return self.push(
                Op::Write {
                    fd: self.out_fd,
                    buf,
                    range,
                    offset: off,
                },
                c.tag,
            );
        }
        let slot = self.slots[s].take().expect("write slot in use");
        self.writes_in_flight -= 1;
        self.sh.landed.add(slot.off, slot.off + slot.fill as u64);
        drop(buf);
        // A block is free again: wake connections that waited for one.
        let waiting: Vec<usize> = self.waiting.drain(..).collect();
        for i in waiting {
            self.conns[i].waiting = false;
            self.after(i, Ok(()))?;
        }
        Ok(())
    }

    /// Submits queued blocks (in order, one at a time, for standard output).
    fn flush_writes(&mut self) -> Result<()> {
        if self.sh.need_fallocate {
            self.sh.need_fallocate = false;
            if let Some(total) = self.sh.total.filter(|t| *t > 0 && self.sh.file) {
                self.push(
                    Op::Fallocate {
                        fd: self.out_fd,
                        mode: 0,
                        offset: 0,
                        len: total,
                    },
                    TAG_FALLOCATE,
                )?;
            }
        }
        while !self.sh.to_write.is_empty() {
            if self.sh.sequential && self.writes_in_flight > 0 {
                break;
            }
            let Some(s) = self.slots.iter().position(Option::is_none) else {
                break;
            };
            let mut wb = self.sh.to_write.pop_front().expect("non-empty");
            let mut buf = wb.buf.take().expect("queued block has its buffer");
            let mut len = wb.fill;
            if self.sh.direct && !(len as u64).is_multiple_of(self.sh.align) {
                // Only the file's last block may be short: pad it, ftruncate fixes the size.
                let padded = align_up(len as u64, self.sh.align) as usize;
                buf[len..padded].fill(0);
                len = padded;
            }
            if wb.fill == 0 {
                continue;
            }
            if let Some(d) = self.stream_digest.as_mut() {
                d.update(&buf[..wb.fill]);
            }
            if self.sh.sequential {
                self.emitted += wb.fill as u64;
            }
            let offset = if self.sh.sequential { u64::MAX } else { wb.off };
            self.slots[s] = Some(WriteSlot {
                off: wb.off,
                len,
                fill: wb.fill,
                done: 0,
            });
            self.writes_in_flight += 1;
            self.push(
                Op::Write {
                    fd: self.out_fd,
                    buf,
                    range: 0..len,
                    offset,
                },
                TAG_WRITE | s as u64,
            )?;
        }
        Ok(())
    }

    fn on_tick(&mut self, progress: &mut Progress) -> Result<()> {
        let window = self.rate_mark.0.elapsed();
        if window >= Duration::from_millis(500) {
            self.recent_rate = (self.sh.received - self.rate_mark.1) as f64 / window.as_secs_f64();
            self.rate_mark = (Instant::now(), self.sh.received);
        }
        let stall = Duration::from_secs(self.sh.opts.stall_timeout_s);
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            if c.busy && c.st == St::Open && !c.cancel_sent && c.last_io.elapsed() > stall {
                self.conns[i].cancel_sent = true;
                self.push(
                    Op::Cancel {
                        target_tag: TAG_CONN | i as u64,
                    },
                    TAG_IGNORE,
                )?;
            }
        }
        // Every CONTROL_INTERVAL: make what landed durable (fdatasync on the ring), then record it.
        let landed = self.sh.landed.bytes();
        if self.control.is_some()
            && self.sync_snapshot.is_none()
            && landed != self.saved_bytes
            && self.sh.planned
            && self.sh.ranges
            && self.last_sync.elapsed() >= CONTROL_INTERVAL
        {
            self.last_sync = Instant::now();
            self.saved_bytes = landed;
            self.sync_snapshot = Some(self.sh.landed.ranges().to_vec());
            self.push(
                Op::Fsync {
                    fd: self.out_fd,
                    datasync: true,
                },
                TAG_CONTROL,
            )?;
        }
        if self.sh.opts.verbose > 2 {
            for (i, c) in self.conns.iter().enumerate() {
                eprintln!(
                    "ringdl: [{i}] {:?} busy={} job={:?} wb={:?} spill={} pipe={:?} waiting={}",
                    c.st,
                    c.busy,
                    c.rx.job
                        .as_ref()
                        .map(|j| (j.seg.start, j.seg.end, j.placer.pos(), j.placer.end())),
                    c.rx.job.as_ref().and_then(|j| j.placer.block()),
                    c.rx.job.as_ref().map_or(0, |j| j.placer.spill_len()),
                    c.pipe.as_ref().map(|p| (p.held, p.draining, p.file_pos)),
                    c.waiting
                );
            }
            eprintln!(
                "ringdl: queue={} to_write={} writes={} landed={}",
                self.sh.queue.len(),
                self.sh.to_write.len(),
                self.writes_in_flight,
                self.sh.landed.bytes()
            );
        }
        let live = self.conns.iter().filter(|c| c.rx.job.is_some()).count();
        progress.update(self.sh.received, self.sh.total, live, self.started.elapsed());
        Ok(())
    }
}

enum Pumped {
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

/// Runs rustls over the buffered ciphertext: handshake messages out, application data to
/// the receive side. Stops when input runs out, bytes must be sent, or the pool is empty.
fn pump_tls(c: &mut Conn, sh: &mut Shared<'_>, tls_info: &mut Option<String>) -> std::result::Result<Pumped, Fail> {
    let Conn {
        tls,
        rbuf,
        rlo,
        rhi,
        out,
        pending_request,
        rx,
        clean_close,
        no_ktls,
        ..
    } = c;
    let want_ktls = sh.ktls && !*no_ktls;
    let tls = tls.as_mut().expect("pump_tls on a TLS connection");
    let rbuf = rbuf.as_mut().expect("idle connection holds its read block");
    let handshaking = tls.is_handshaking();
    let tls_fail = |e: rustls::Error| {
        if handshaking {
            Fail::fatal(
                Kind::Tls,
                format!("TLS handshake with {}: {}", sh.url.host(), crate::tls::explain(&e)),
            )
        } else {
            Fail::retry(Kind::Tls, format!("TLS: {e}"))
        }
    };
    loop {
        let mut handshake_done = false;
        let UnbufferedStatus { mut discard, state } = tls.process_tls_records(&mut rbuf[*rlo..*rhi]);
        let state = match state {
            Ok(s) => s,
            Err(e) => return Err(tls_fail(e)),
        };
        let next = match state {
            ConnectionState::EncodeTlsData(mut enc) => {
                let at = out.len();
                out.resize(at + 4096, 0);
                loop {
                    match enc.encode(&mut out[at..]) {
                        Ok(n) => {
                            out.truncate(at + n);
                            break;
                        }
                        Err(EncodeError::InsufficientSize(s)) => out.resize(at + s.required_size, 0),
                        Err(e) => return Err(Fail::fatal(Kind::Internal, format!("TLS encode: {e}"))),
                    }
                }
                None
            }
            ConnectionState::TransmitTlsData(mut t) => {
                // With kTLS the request waits for the hand-off: the kernel encrypts it.
                if !pending_request.is_empty()
                    && !want_ktls
                    && let Some(mut w) = t.may_encrypt_app_data()
                {
                    encrypt(&mut w, pending_request, out)?;
                }
                t.done();
                Some(Pumped::Again)
            }
            ConnectionState::BlockedHandshake => Some(Pumped::NeedData),
            ConnectionState::WriteTraffic(mut w) => {
                handshake_done = true;
                if want_ktls {
                    // Hand off on a record boundary, with nothing of ours still to send.
                    if *rlo + discard == *rhi && out.is_empty() {
                        Some(Pumped::HandOff)
                    } else if !out.is_empty() {
                        Some(Pumped::Again)
                    } else {
                        Some(Pumped::NeedData)
                    }
                } else if pending_request.is_empty() {
                    Some(Pumped::NeedData)
                } else {
                    encrypt(&mut w, pending_request, out)?;
                    Some(Pumped::Again)
                }
            }
            ConnectionState::ReadTraffic(mut r) => {
                let mut blocked = false;
                while let Some(rec) = r.next_record() {
                    let rec = rec.map_err(tls_fail)?;
                    discard += rec.discard;
                    feed(rx, sh, rec.payload)?;
                    if rx.job.as_ref().is_some_and(|j| j.placer.has_spill()) {
                        blocked = true;
                        break;
                    }
                }
                if blocked {
                    Some(Pumped::Blocked)
                } else {
                    Some(Pumped::Again)
                }
            }
            ConnectionState::PeerClosed | ConnectionState::Closed => Some(Pumped::PeerClosed),
            _ => Some(Pumped::NeedData),
        };
        *rlo += discard;
        if handshake_done && tls_info.is_none() {
            let v = tls.protocol_version().map(|v| format!("{v:?}")).unwrap_or_default();
            let s = tls
                .negotiated_cipher_suite()
                .map(|s| format!("{:?}", s.suite()))
                .unwrap_or_default();
            *tls_info = Some(format!("{v} {s}"));
        }
        if let Some(p) = next {
            if matches!(p, Pumped::PeerClosed) {
                *clean_close = true;
            }
            return Ok(p);
        }
    }
}

fn encrypt(
    w: &mut rustls::unbuffered::WriteTraffic<'_, rustls::client::ClientConnectionData>,
    plain: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> std::result::Result<(), Fail> {
    let at = out.len();
    out.resize(at + plain.len() + 256, 0);
    loop {
        match w.encrypt(plain, &mut out[at..]) {
            Ok(n) => {
                out.truncate(at + n);
                plain.clear();
                return Ok(());
            }
            Err(EncryptError::InsufficientSize(s)) => out.resize(at + s.required_size, 0),
            Err(e) => return Err(Fail::retry(Kind::Tls, format!("TLS encrypt: {e}"))),
        }
    }
}

/// Feeds received plaintext to the receive side: head first, then the body.
fn feed(rx: &mut Rx, sh: &mut Shared<'_>, data: &[u8]) -> std::result::Result<(), Fail> {
    if data.is_empty() {
        return Ok(());
    }
    let Some(job) = rx.job.as_mut() else {
        rx.extra = true;
        return Ok(());
    };
    if job.placer.delimiter().is_some() {
        with_placer(rx, sh, |p, blocks| p.feed(data, blocks))?;
        return Ok(());
    }
    rx.head.extend_from_slice(data);
    loop {
        let mut headers = [Header { name: "", value: &[] }; http::MAX_FIELDS];
        let (len, action) = match http::parse_head(&rx.head, &mut headers) {
            Ok(Status::Partial) => {
                if rx.head.len() > MAX_HEAD {
                    return Err(Fail::fatal(
                        Kind::Protocol,
                        format!("response head from {} is larger than {MAX_HEAD} bytes", sh.url.host()),
                    ));
                }
                return Ok(());
            }
            Ok(Status::Complete((len, resp))) => (len, on_head(job, sh, &resp)?),
            Err(e) => {
                return Err(Fail::retry(
                    Kind::Protocol,
                    format!("malformed response head from {}: {e}", sh.url.host()),
                ));
            }
        };
        match action {
            HeadAction::Interim => {
                rx.head.drain(..len);
                continue;
            }
            HeadAction::Body => {
                let rest = rx.head.split_off(len);
                rx.head.clear();
                // Also with no bytes yet: an empty body is complete right away.
                with_placer(rx, sh, |p, blocks| p.feed(&rest, blocks))?;
                return Ok(());
            }
            HeadAction::Complete => {
                rx.head.clear();
                rx.extra = true;
                finish_job(rx, sh);
                return Ok(());
            }
        }
    }
}

enum HeadAction {
    /// 1xx: another head follows.
    Interim,
    /// Body bytes follow.
    Body,
    /// Nothing to write (empty file); the connection is not reused.
    Complete,
}

/// Validates a response head against the request (RFC 9110 §14.4, §15) and sets up the body.
fn on_head(job: &mut Job, sh: &mut Shared<'_>, resp: &http::Response<'_, '_>) -> std::result::Result<HeadAction, Fail> {
    let host = sh.url.host();
    let proto = |m: String| Fail::retry(Kind::Protocol, format!("{host}: {m}"));
    let code = resp.code;
    if (100..200).contains(&code) {
        return Ok(HeadAction::Interim);
    }
    if resp.version == 0
        || resp
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case(b"close"))
    {
        job.keep_alive = false;
    }
    let framing = resp
        .body_framing(false)
        .map_err(|e| proto(format!("bad body framing: {e}")))?;
    let validator = resp.validator().map(|v| match v {
        http::Validator::ETag { value, .. } => value.to_vec(),
        http::Validator::LastModified(v) => v.to_vec(),
    });
    match code {
        206 => {
            let cr = resp
                .content_range()
                .map_err(|e| proto(format!("bad Content-Range: {e}")))?;
            let Some(ContentRange::Bytes { first, last, complete }) = cr else {
                return Err(proto("206 without a byte Content-Range".into()));
            };
            let Some(complete) = complete else {
                return Err(proto("206 with an unknown complete length (bytes a-b/*)".into()));
            };
            if job.probe {
                if first != job.seg.start {
                    return Err(proto(format!(
                        "asked for bytes from {}, got Content-Range {first}-{last}",
                        job.seg.start
                    )));
                }
                sh.total = Some(complete);
                sh.ranges = true;
                sh.planned = true;
                sh.need_fallocate = true;
                // The rest is planned from an aligned offset: a server that caps range replies
                // at an odd size must not make later O_DIRECT writes unaligned.
                let first_end = if last + 1 >= complete {
                    complete
                } else if sh.direct {
                    align_down(last + 1, sh.align)
                } else {
                    last + 1
                };
                job.seg.end = first_end;
                take_disposition(sh, resp);
                sh.queue = match sh.resume.take() {
                    Some(st) if st.total == complete && st.validator == validator => {
                        sh.landed = Landed::from_ranges(&st.ranges);
                        if sh.opts.verbose > 0 || !sh.opts.quiet {
                            eprintln!(
                                "ringdl: resuming: {} of {complete} bytes already in place",
                                sh.landed.bytes()
                            );
                        }
                        schedule::plan_missing(&sh.landed, first_end, complete, sh.opts.connections, sh.align)
                    }
                    Some(st) => {
                        let what = if st.total != complete {
                            format!("size {} -> {complete}", st.total)
                        } else {
                            "validator differs".to_owned()
                        };
                        eprintln!("ringdl: the file on the server changed ({what}): starting from zero");
                        // Everything but what this first reply carries.
                        let got = Landed::from_ranges(&[(job.seg.start, first_end)]);
                        schedule::plan_missing(&got, 0, complete, sh.opts.connections, sh.align)
                    }
                    None => schedule::plan(first_end, complete, sh.opts.connections, sh.align),
                };
                sh.validator = validator;
                if sh.opts.verbose > 0 {
                    eprintln!(
                        "ringdl: {complete} bytes, ranges supported, {} segment{} after the first",
                        sh.queue.len(),
                        if sh.queue.len() == 1 { "" } else { "s" }
                    );
                }
            } else {
                if Some(complete) != sh.total {
                    sh.changed = true;
                    return Err(Fail::fatal(
                        Kind::Protocol,
                        format!(
                            "{host}: the file size changed from {} to {complete} during the download",
                            sh.total.unwrap_or(0)
                        ),
                    ));
                }
                if validator.is_some() && sh.validator.is_some() && validator != sh.validator {
                    sh.changed = true;
                    return Err(Fail::fatal(
                        Kind::Protocol,
                        format!("{host}: the file changed during the download (validator differs)"),
                    ));
                }
                if !content_range_fits(first, last, job.placer.pos(), job.seg.end) {
                    return Err(proto(format!(
                        "asked for bytes {}-{}, got Content-Range {first}-{last}",
                        job.placer.pos(),
                        job.seg.end - 1
                    )));
                }
            }
            let n = last - first + 1;
            let delim = match framing {
                Framing::Chunked => Delimiter::Chunked(ChunkedDecoder::new()),
                Framing::Length(l) if l != n => {
                    return Err(proto(format!(
                        "Content-Length {l} does not match Content-Range {first}-{last}"
                    )));
                }
                _ => Delimiter::Length(n),
            };
            job.placer.begin(delim, last + 1);
            Ok(HeadAction::Body)
        }
        200 => {
            if !job.probe && sh.ranges {
                return Err(proto(format!(
                    "answered 200 (whole file) to a Range request for bytes {}-{}",
                    job.seg.start,
                    job.seg.end - 1
                )));
            }
            if sh.resume.take().is_some() {
                eprintln!("ringdl: the server does not serve ranges: cannot resume, starting from zero");
            }
            take_disposition(sh, resp);
            sh.ranges = false;
            sh.planned = true;
            sh.queue.clear();
            sh.validator = validator;
            job.probe = false;
            job.seg.start = 0;
            let (delim, end) = match framing {
                Framing::Length(l) => {
                    sh.total = Some(l);
                    sh.need_fallocate = true;
                    (Delimiter::Length(l), l)
                }
                Framing::Chunked => (Delimiter::Chunked(ChunkedDecoder::new()), u64::MAX),
                Framing::Close => (Delimiter::Close, u64::MAX),
                Framing::NoBody => {
                    sh.total = Some(0);
                    (Delimiter::Length(0), 0)
                }
            };
            job.seg.end = end;
            job.placer = Placer::new(0, end);
            job.placer.begin(delim, end);
            if sh.opts.verbose > 0 {
                eprintln!("ringdl: the server does not serve ranges: one connection");
            }
            Ok(HeadAction::Body)
        }
        416 if job.probe && job.seg.start > 0 => {
            // The resume point lies past the end: the file shrank. Start over from zero.
            sh.resume = None;
            sh.probe_start = 0;
            sh.probe_end = FIRST_SEGMENT;
            eprintln!("ringdl: the file on the server is shorter than the resumed part: starting from zero");
            Err(Fail::retry(
                Kind::HttpStatus,
                format!("{host}: 416 for the resume point"),
            ))
        }
        416 if job.probe => match resp.content_range() {
            Ok(Some(ContentRange::Unsatisfied { complete: 0 })) => {
                sh.total = Some(0);
                sh.planned = true;
                job.placer = Placer::new(0, 0);
                job.seg.end = 0;
                Ok(HeadAction::Complete)
            }
            _ => Err(Fail::fatal(
                Kind::Protocol,
                format!("{host}: 416 Range Not Satisfiable for bytes=0-"),
            )),
        },
        301 | 302 | 303 | 307 | 308 if job.probe => {
            let Some(loc) = resp.header("location") else {
                return Err(Fail::fatal(
                    Kind::Protocol,
                    format!("{host}: {code} redirect without Location"),
                ));
            };
            let to = sh.url.join(loc).map_err(|e| {
                Fail::fatal(
                    Kind::Protocol,
                    format!("{host}: bad Location {:?}: {e}", String::from_utf8_lossy(loc)),
                )
            })?;
            sh.redirect = Some(to);
            Ok(HeadAction::Complete)
        }
        408 | 429 | 500 | 502 | 503 | 504 => {
            // Transient: wait (Retry-After, capped at 5 minutes) and try again.
            let wait = match resp.retry_after() {
                Some(http::RetryAfter::Seconds(s)) => Some(Duration::from_secs(s.min(300))),
                Some(http::RetryAfter::Date(d)) => http::parse_http_date(d).map(|at| {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    Duration::from_secs(at.saturating_sub(now).min(300))
                }),
                None => None,
            };
            if let Some(w) = wait {
                sh.hold_until = Some(Instant::now() + w);
            }
            Err(Fail {
                kind: Kind::HttpStatus,
                msg: format!("HTTP {code} {} for {}", String::from_utf8_lossy(resp.reason), sh.url),
                retry: true,
                delay: wait,
            })
        }
        400..=599 => Err(Fail::fatal(
            Kind::HttpStatus,
            format!("HTTP {code} {} for {}", String::from_utf8_lossy(resp.reason), sh.url),
        )),
        _ => Err(Fail::fatal(
            Kind::Protocol,
            format!("{host}: unexpected status {code} for a download"),
        )),
    }
}

/// `--content-disposition`: remember a sanitized base name from the first response.
fn take_disposition(sh: &mut Shared<'_>, resp: &http::Response<'_, '_>) {
    if sh.opts.content_disposition
        && let Some(v) = resp.header("content-disposition")
    {
        sh.disposition = http::content_disposition_filename(v);
    }
}

/// Runs `f` on the job's body with the shared write pool, counts what it placed, and
/// finishes the job when the body is complete. Returns what `f` said.
fn with_placer(
    rx: &mut Rx,
    sh: &mut Shared<'_>,
    f: impl FnOnce(&mut Placer, &mut Blocks<'_>) -> std::result::Result<Fed, PlaceError>,
) -> std::result::Result<Fed, Fail> {
    let job = rx.job.as_mut().expect("body bytes for a job");
    let before = job.placer.pos();
    let mut blocks = Blocks {
        pool: &sh.pool,
        queue: &mut sh.to_write,
    };
    let r = f(&mut job.placer, &mut blocks);
    let moved = job.placer.pos() - before;
    sh.received += moved;
    job.got_bytes |= moved > 0;
    if moved > 0 && job.first_byte.is_none() {
        job.first_byte = Some(Instant::now());
    }
    let fed = r.map_err(|e| {
        let kind = if e == PlaceError::NoProgress {
            Kind::Internal
        } else {
            Kind::Protocol
        };
        Fail::retry(kind, e.to_string())
    })?;
    if fed == Fed::Done {
        if matches!(job.placer.delimiter(), Some(Delimiter::Chunked(_))) && !sh.ranges {
            // A chunked 200 tells the file size only at its end.
            sh.total = Some(job.placer.pos());
        }
        finish_job(rx, sh);
    }
    Ok(fed)
}

/// The response body is complete: queue the last block and requeue what the response did
/// not cover.
fn finish_job(rx: &mut Rx, sh: &mut Shared<'_>) {
    let mut job = rx.job.take().expect("finish_job with a job");
    let end = job.placer.pos();
    let file_end = sh.total.is_some_and(|t| end >= t);
    if job.placer.overrun() {
        rx.extra = true;
    }
    // A short response that ended inside a block (O_DIRECT): keep the aligned part, fetch
    // the rest again. The file's last block is kept whole (padded when written).
    let trim = (sh.direct && !file_end).then_some(sh.align);
    let requeue_from = job.placer.release(trim, &mut sh.to_write);
    let seg_end = if sh.ranges {
        job.seg.end
    } else {
        sh.total.unwrap_or(end)
    };
    if requeue_from < seg_end && !file_end {
        // A short reply that moved nothing (aligned) forward counts as a failed try.
        let tries = if requeue_from > job.seg.start {
            job.seg.tries
        } else {
            job.seg.tries + 1
        };
        if tries >= sh.opts.max_tries {
            sh.fatal = Some(err!(
                Protocol,
                "{}: replies to bytes {}-{} stop short at {end} (gave up after {})",
                sh.url.host(),
                job.seg.start,
                seg_end - 1,
                n_tries(tries)
            ));
        }
        sh.queue.push_front(Segment {
            start: requeue_from,
            end: seg_end,
            tries,
        });
    }
    if !job.keep_alive {
        rx.extra = true;
    }
}
