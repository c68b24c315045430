//! One download: the event loop over one io_uring, the connections (control plane:
//! connect → TLS handshake → request → response head → validation) and the body path
//! (data plane: compaction into aligned write blocks, writes at segment offsets).
//!
//! Every socket and file operation is an SQE on the ring; the loop makes one
//! `io_uring_enter` per turn that submits and waits. Each connection has at most one
//! operation (CONNECT, SEND or RECV) in flight; write blocks have their own.

pub(crate) mod assign;
pub mod mirrors;
pub(crate) mod retry;
mod summary;
mod tick;

pub use summary::Summary;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Url;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use uring::{BufPool, Completion, Op, Ring};

use crate::config::Config;
use crate::control::*;
use crate::engine::EngineKind;
use crate::engine::blocks::{WriteBlock, align_down, write_block};
use crate::engine::splice::Pipe;
use crate::engine::writer::*;
use crate::err;
use crate::error::{Error, Result};
use crate::output::Output;
use crate::output::resume::State;
use crate::report::{Note, Progress};
use crate::schedule::queue::Plan;
use crate::schedule::{FIRST_SEGMENT, Landed};
use crate::tag::Tag;

/// Read block per connection, bytes: holds a response head or ≥ 3 whole TLS records.
pub(crate) const READ_BLOCK: usize = 64 << 10;

/// Largest response head we accept (RFC 9112 leaves it to us).
pub(crate) const MAX_HEAD: usize = http::MAX_HEAD;

/// RFC 8305 §5 "Connection Attempt Delay": how long a connect to one address runs
/// alone before the next address (the other family first) gets an attempt of its own.
pub(crate) const ATTEMPT_DELAY: Duration = Duration::from_millis(250);

/// How often the control file is brought up to date (after an fdatasync of the `.part`):
/// at most this much work is fetched again after a kill -9.
pub(crate) const CONTROL_INTERVAL: Duration = Duration::from_millis(250);

/// How a finished download went.
pub enum Outcome {
    /// Every byte landed; the file is complete and synced.
    Done(Box<Summary>),
    /// The first response of mirror `mirror` (index in the URLs given) redirected to `to`
    /// (3xx with Location).
    Redirect { mirror: usize, to: Url },
    /// The first request was conditional and mirror `mirror` answered 304 Not Modified:
    /// nothing was written.
    NotModified { mirror: usize },
}

/// Download-wide state the connections share.
pub(crate) struct Shared<'a> {
    /// Progress and notes: everything the loop has to say goes through it.
    pub(crate) report: &'a mut Progress,
    pub(crate) url: &'a Url,
    pub(crate) opts: &'a Config,
    pub(crate) pool: BufPool,
    pub(crate) align: u64,
    pub(crate) direct: bool,
    pub(crate) sequential: bool,
    pub(crate) file: bool,
    /// Which range goes out next: the first request (from 0, or the first byte a resumed
    /// `.part` lacks, to [`FIRST_SEGMENT`] later or where the `.part` has bytes again), then
    /// the planned segments; Retry-After holds.
    pub(crate) plan: Plan,
    /// When the download started (the plan's clock).
    pub(crate) started: Instant,
    pub(crate) ranges: bool,
    pub(crate) total: Option<u64>,
    pub(crate) validator: Option<Vec<u8>>,
    /// Full or final blocks waiting for a write SQE.
    pub(crate) to_write: VecDeque<WriteBlock>,
    pub(crate) landed: Landed,
    pub(crate) received: u64,
    pub(crate) fatal: Option<Error>,
    pub(crate) redirect: Option<Url>,
    pub(crate) need_fallocate: bool,
    /// Engine `splice`: bodies go socket → pipe → file.
    pub(crate) splice: bool,
    /// Hand finished TLS handshakes to the kernel.
    pub(crate) ktls: bool,
    /// Connections handed to kTLS.
    pub(crate) ktls_conns: usize,
    /// Why a hand-off was refused (the connection went on in user space).
    pub(crate) ktls_refused: Option<String>,
    /// KeyUpdates rekeyed in place under kTLS.
    pub(crate) ktls_rekeys: usize,
    /// Connections handed to the software record layer.
    pub(crate) soft_conns: usize,
    /// KeyUpdates the software record layer took in place.
    pub(crate) soft_rekeys: usize,
    /// TLS connections that reached the hand-off (reconnects included).
    pub(crate) tls_conns: usize,
    /// TLS handshakes completed in full, and by resuming a session (RFC 8446 §2.2).
    pub(crate) tls_full: usize,
    pub(crate) tls_resumed: usize,
    pub(crate) used: Vec<bool>,
    /// Control-file state to validate against the first 206.
    pub(crate) resume: Option<State>,
    pub(crate) disposition: Option<String>,
    /// The file on the server changed under the download: what is kept is of the old one.
    pub(crate) changed: bool,
    /// The server turned extra connections away: the number it allows (for the summary).
    pub(crate) capped_at: Option<usize>,
    /// The output in messages ("standard output", "the FIFO out.bin").
    pub(crate) out_name: String,
    /// The HTTP proxy the connections go through (`addrs` are its addresses).
    pub(crate) proxy: Option<crate::control::proxy::Proxy>,
    /// Extra request fields for this URL (`-H`, credentials), already checked.
    pub(crate) headers: &'a [(String, String)],
    /// Failed attempts tried again, and work-stealing splits (for the summary).
    pub(crate) retries: u64,
    pub(crate) steals: u64,
    /// The first 206 had no complete length (`bytes a-b/*`): requests go without Range.
    pub(crate) plain_get: bool,
    /// Every URL of the file, in the order given (one without mirrors).
    pub(crate) mirrors: Vec<mirrors::Mirror>,
    /// The mirror whose first answer came first (in the order given): the others must
    /// agree with it.
    pub(crate) reference: Option<usize>,
    /// The mirror [`Shared::redirect`] is for.
    pub(crate) redirect_mirror: usize,
    /// The first request's precondition held: 304 Not Modified, nothing to fetch.
    pub(crate) not_modified: bool,
    /// A block-device output: every write goes at `room.base` + its offset, within `room.len`.
    pub(crate) room: Option<&'a crate::output::device::Room>,
    /// Connection slots that may open a connection (each reconnects after a failure by its
    /// own rules): one per mirror until the first answer tells the size, then
    /// [`crate::schedule::connections_for`] (`--min-split-size`). A run opens no connection
    /// it does not use.
    pub(crate) wanted: usize,
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
    /// Where a failed download leaves what it knew at the failure (for `--json`): `bytes`
    /// is then what the `.part` holds, not the file's size.
    pub failed: &'a mut Option<Box<Summary>>,
    /// `--signature` over the file: what its verification needs from the file's bytes,
    /// computed in the checksum's read-back ([`Summary::signed`]).
    pub signed: Option<crate::signature::Input>,
}

/// Runs one download into `out` from the URLs of `mirrors` (one, or several serving the
/// same file: see [`mirrors`]).
///
/// # Errors
/// Any [`Kind`]: the first fatal failure of a connection, a refused ring, a failed write;
/// with several mirrors, a server's failure only once no mirror is left.
pub fn run<'a>(
    mirrors: Vec<mirrors::MirrorRoute<'a>>,
    opts: &'a Config,
    target: Target<'a>,
    progress: &'a mut Progress,
) -> Result<Outcome> {
    let Target {
        out,
        resume,
        control,
        signals,
        engine,
        ktls,
        failed,
        signed,
    } = target;
    let states: Vec<mirrors::Mirror> = mirrors.iter().map(|m| mirrors::Mirror::new(m.url)).collect();
    let m = mirrors.len();
    let mut ways = mirrors.into_iter().map(mirrors::Way::new).collect::<Result<Vec<_>>>()?;
    // The first mirror's way starts in the loop's fields.
    let (url, headers, proxy, tls, server_name, addrs) = ways[0].take();
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
    let block = write_block().max(out.align as usize);
    let wcount = (2 * n + 2).clamp(6, 64);
    // A CONNECT with its LINK_TIMEOUT, or a SEND/RECV, per connection; a Happy Eyeballs
    // wake-up per connect; the write slots; the tick, signal, fallocate, fsync, cancels.
    let entries = (3 * n + wcount + 8).next_power_of_two() as u32;
    let crate::io::Chosen {
        mut ring,
        label: io,
        sqpoll_tid,
    } = crate::io::build_ring(opts.io, entries, splice, opts.sqpoll, opts.verbose)?;
    let rpool =
        BufPool::new(READ_BLOCK, n).map_err(|e| err!(LocalIo, "read blocks ({n} x {READ_BLOCK} bytes): {e}"))?;
    let wpool =
        BufPool::new(block, wcount).map_err(|e| err!(LocalIo, "write blocks ({wcount} x {block} bytes): {e}"))?;
    let registered = match ring.register_pools(&[&rpool, &wpool]) {
        Ok(()) => true,
        Err(e) => {
            progress.note(Note::Unregistered { why: e.to_string() });
            false
        }
    };
    // The output fd as fixed file 0: its WRITE_FIXED, FALLOCATE and FSYNC skip the per-op
    // fget/fput. Measurement knob RINGDL_FIXED_FILES=0 leaves it unregistered.
    let fixed_files = std::env::var_os("RINGDL_FIXED_FILES").is_none_or(|v| v != "0")
        && ring.backend() == uring::Backend::Uring
        && ring.register_files(&[out.fd.as_raw_fd()]).is_ok();
    // The connections are spread over the mirrors in turn.
    let conns = (0..n)
        .map(|i| {
            let mut c = Conn::new(rpool.alloc().expect("one read block per connection"));
            c.mirror = i % m;
            c
        })
        .collect();
    let sh = Shared {
        report: progress,
        url,
        opts,
        pool: wpool,
        align: out.align,
        direct: out.direct,
        sequential: out.sequential,
        file: out.part.is_some(),
        plan: Plan::new(resume_start, resume_end),
        started: Instant::now(),
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
        ktls_rekeys: 0,
        soft_conns: 0,
        soft_rekeys: 0,
        tls_conns: 0,
        tls_full: 0,
        tls_resumed: 0,
        used: vec![false; n],
        resume,
        disposition: None,
        changed: false,
        capped_at: None,
        out_name: out.describe(),
        proxy,
        headers,
        retries: 0,
        steals: 0,
        plain_get: false,
        mirrors: states,
        reference: None,
        redirect_mirror: 0,
        not_modified: false,
        room: out.room.as_ref(),
        wanted: m.min(n),
    };
    let mut dl = Loop {
        ring,
        conns,
        sh,
        tls,
        server_name,
        addrs,
        addr_next: 0,
        addr_proven: false,
        attempt_started: None,
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
        pace: opts
            .limit_rate
            .map(|r| crate::schedule::pace::Bucket::new(r, Duration::ZERO)),
        paced: VecDeque::new(),
        pace_timer: false,
        ways,
        active: 0,
    };
    dl.push(Op::Timeout { after: dl.tick }, Tag::Tick.encode())?;
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
            Tag::Signal.encode(),
        )?;
    }
    // Each mirror's first connection connects now; the others wait for the first answer
    // (`kick`: as many as the size is worth, see `Shared::wanted`). One name with several
    // addresses: the first connect goes alone; another races the next address after its
    // head start (RFC 8305 §5).
    for i in 0..n {
        let k = dl.conns[i].mirror;
        if i < m {
            dl.connect(i)?;
        } else if dl.addr_count(k) > 1 {
            dl.conns[i].deferred = true;
        }
    }
    match dl.event_loop() {
        Ok(Some((mirror, to))) => {
            if dl.sh.mirrors.len() > 1 {
                // A mirror's redirect may come while bytes are on their way to the file:
                // they land before the ring goes (the next run fetches them again).
                dl.settle();
            }
            return Ok(Outcome::Redirect { mirror, to });
        }
        Ok(None) if dl.sh.not_modified => {
            dl.sh.report.clear();
            return Ok(Outcome::NotModified {
                mirror: dl.sh.reference.unwrap_or(0),
            });
        }
        Ok(None) => {
            if let Some(n) = dl.sh.capped_at {
                dl.sh.report.note(Note::Allowed { connections: n });
            }
        }
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
                dl.sh.report.note(Note::WritesPending);
            } else if dl.control.is_some() && (dl.sh.file || out.room.is_some()) {
                // The control file may only name bytes that are on disk: fdatasync first.
                // If that fails, the control file keeps its last (synced) state.
                match dl.wait_for(
                    Op::Fsync {
                        fd: dl.out_fd,
                        datasync: true,
                    },
                    Tag::Fsync(1).encode(),
                ) {
                    Ok(r) if r >= 0 => saved = dl.save_control(None) && dl.sh.landed.bytes() > 0,
                    _ => dl.sh.report.note(Note::SyncFailed),
                }
            }
            if let Some(part) = &out.part
                && !dl.sh.changed
            {
                if saved {
                    e.msg.push_str(&format!(
                        "; {} of {} bytes kept in {}: run the same command again to fetch only the rest",
                        dl.sh.landed.bytes(),
                        dl.sh.total.unwrap_or(0),
                        part.display()
                    ));
                } else if dl.sh.landed.bytes() > 0 && dl.sh.plan.is_planned() && !dl.sh.ranges {
                    e.msg.push_str(&format!(
                        "; {} bytes kept in {}, but the server does not serve ranges: a new run starts over",
                        dl.sh.landed.bytes(),
                        part.display()
                    ));
                }
            }
            dl.sh.report.clear();
            *failed = Some(Box::new(dl.summary(dl.sh.landed.bytes(), io, registered, None)));
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
    if dl.sh.file || out.room.is_some() {
        if dl.sh.file {
            out.truncate(total)?;
        }
        let r = dl.wait_for(
            Op::Fsync {
                fd: dl.out_fd,
                datasync: false,
            },
            Tag::Fsync(0).encode(),
        )?;
        if r < 0 {
            return Err(err!(LocalIo, "fsync {}: {}", out.describe(), errno(r)));
        }
    }
    dl.sh.report.clear();
    let (digest, signed) = match (&opts.checksum, out.read_back()) {
        (_, Some((part, base))) => crate::output::verify::digests(
            &mut dl.ring,
            &dl.sh.pool,
            (part, out.direct, base, total),
            opts.checksum.as_ref().map(|c| c.algorithm),
            signed,
        )?,
        (Some(_), None) => (dl.stream_digest.take().map(|d| d.finish()), None),
        _ => (None, None),
    };
    if fixed_files {
        let ops = dl.ring.fixed_file_ops();
        dl.sh.report.note(Note::FixedFileOps { ops });
    }
    if opts.verbose > 0
        && let Some(cpu) = sqpoll_tid.and_then(crate::io::thread_cpu)
    {
        // Not in the process's rusage until the thread exits: say it here.
        dl.sh.report.note(Note::SqpollCpu { cpu });
    }
    let mut summary = dl.summary(total, io, registered, digest);
    summary.signed = signed;
    Ok(Outcome::Done(Box::new(summary)))
}

pub(crate) struct Loop<'a> {
    pub(crate) ring: Ring,
    pub(crate) conns: Vec<Conn>,
    pub(crate) sh: Shared<'a>,
    pub(crate) tls: Option<Arc<ClientConfig>>,
    pub(crate) server_name: Option<ServerName<'static>>,
    /// Where to connect, families interleaved (RFC 8305 §4); at least one.
    pub(crate) addrs: Vec<SocketAddr>,
    /// The address the next connect goes to: the last one a connect went through
    /// (`addr_proven`), or the next one after those that failed.
    pub(crate) addr_next: usize,
    pub(crate) addr_proven: bool,
    /// When the newest connect started while no address was proven (Happy Eyeballs).
    pub(crate) attempt_started: Option<Instant>,
    pub(crate) out_fd: RawFd,
    pub(crate) slots: Vec<Option<WriteSlot>>,
    pub(crate) writes_in_flight: usize,
    /// Connections stopped because the write pool was empty.
    pub(crate) waiting: VecDeque<usize>,
    pub(crate) started: Instant,
    pub(crate) tls_info: Option<String>,
    pub(crate) tick: Duration,
    /// The control file, kept current while the download runs.
    pub(crate) control: Option<PathBuf>,
    /// Bytes covered by the last saved control file.
    pub(crate) saved_bytes: u64,
    /// Ranges that an fdatasync in flight will make durable; saved when it completes.
    pub(crate) sync_snapshot: Option<Vec<(u64, u64)>>,
    /// The download's rate over the last half second or so, bytes/s (work stealing), and
    /// where that window started.
    pub(crate) recent_rate: f64,
    pub(crate) rate_mark: (Instant, u64),
    /// When the last periodic fdatasync for the control file was pushed.
    pub(crate) last_sync: Instant,
    /// Bytes queued to a sequential output (standard output, a FIFO) so far.
    pub(crate) emitted: u64,
    /// In-order digest of what goes to standard output (`--checksum` with `-o -`).
    pub(crate) stream_digest: Option<ring::digest::Context>,
    /// `--limit-rate`: the download's token bucket (its clock: `started.elapsed()`).
    pub(crate) pace: Option<crate::schedule::pace::Bucket>,
    /// Connections waiting for the bucket before their next socket read.
    pub(crate) paced: VecDeque<usize>,
    /// The [`Tag::Pace`] TIMEOUT is in flight.
    pub(crate) pace_timer: bool,
    /// Each mirror's way to its server; the active one's pieces are in the fields above
    /// (`sh.url`, `sh.headers`, `sh.proxy`, `tls`, `server_name`, `addrs`, …).
    pub(crate) ways: Vec<mirrors::Way<'a>>,
    /// The mirror whose way is in the loop's fields.
    pub(crate) active: usize,
}

pub(crate) fn errno(res: i32) -> rustix::io::Errno {
    rustix::io::Errno::from_raw_os_error(-res)
}

impl Loop<'_> {
    /// Runs until every segment has landed (`Ok(None)`), a mirror's first response
    /// redirects (`Ok(Some((mirror, url)))`), or a fatal failure.
    pub(crate) fn event_loop(&mut self) -> Result<Option<(usize, Url)>> {
        loop {
            self.kick()?;
            self.flush_writes()?;
            if let Some(e) = self.sh.fatal.take() {
                return Err(e);
            }
            if let Some(u) = self.sh.redirect.take() {
                return Ok(Some((self.sh.redirect_mirror, u)));
            }
            if self.finished() {
                return Ok(None);
            }
            self.ring
                .submit_and_wait(1)
                .map_err(|e| err!(LocalIo, "io_uring_enter: {e}"))?;
            while let Some(c) = self.ring.next_completion() {
                self.complete(c)?;
            }
        }
    }

    /// Submits one operation and waits for its completion (end of the download only:
    /// other completions that arrive meanwhile are dropped).
    pub(crate) fn wait_for(&mut self, op: Op, tag: u64) -> Result<i32> {
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

    /// Cancels connection `i`'s operation in flight (once): its completion then comes back
    /// with -ECANCELED, and with it the connection's buffer.
    pub(crate) fn cancel_op(&mut self, i: usize) -> Result<()> {
        if self.conns[i].cancel_sent {
            return Ok(());
        }
        self.conns[i].cancel_sent = true;
        self.push(
            Op::Cancel {
                target_tag: Tag::Conn(i).encode(),
            },
            Tag::Ignore.encode(),
        )
    }

    pub(crate) fn push(&mut self, op: Op, tag: u64) -> Result<()> {
        self.ring
            .push(op, tag)
            .map_err(|_| err!(Internal, "submission queue full (ring sized too small)"))
    }

    /// All segments fetched and written.
    pub(crate) fn finished(&self) -> bool {
        self.sh.plan.is_drained()
            && self
                .conns
                .iter()
                .all(|c| c.rx.job.is_none() && c.pipe.as_ref().is_none_or(Pipe::is_idle))
            && self.sh.to_write.is_empty()
            && self.writes_in_flight == 0
    }

    pub(crate) fn complete(&mut self, c: Completion) -> Result<()> {
        match Tag::decode(c.tag) {
            Some(Tag::Conn(i)) => {
                self.enter_conn(i);
                let r = self.conn_completion(i, c);
                self.after(i, r)?;
            }
            Some(Tag::Write(s)) => self.write_completion(s, c)?,
            Some(Tag::Drain(i)) => self.drain_completion(i, c.result)?,
            Some(Tag::Pace) => {
                // The bucket has refilled: the connections that waited read again (each
                // asks the bucket anew, and waits again when it is still short).
                self.pace_timer = false;
                while let Some(i) = self.paced.pop_front() {
                    if !self.conns[i].busy() {
                        self.after(i, Ok(()))?;
                    }
                }
            }
            Some(Tag::Tick) => {
                self.on_tick()?;
                self.push(Op::Timeout { after: self.tick }, Tag::Tick.encode())?;
            }
            Some(Tag::Fallocate) if c.result < 0 => {
                let e = errno(c.result);
                if e == rustix::io::Errno::NOSPC || e == rustix::io::Errno::FBIG {
                    self.sh.fatal = Some(err!(
                        LocalIo,
                        "not enough space for {} bytes: {e}",
                        self.sh.total.unwrap_or(0)
                    ));
                } else {
                    self.sh.report.note(Note::NoPreallocation { why: e.to_string() });
                }
            }
            Some(Tag::Control) => {
                let snap = self.sync_snapshot.take();
                if c.result >= 0 {
                    self.save_control(snap);
                }
            }
            Some(Tag::Signal) => {
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
    pub(crate) fn after(&mut self, i: usize, r: std::result::Result<(), Fail>) -> Result<()> {
        self.enter_conn(i);
        if self.sh.mirrors[self.conns[i].mirror].standing == mirrors::Standing::Dropped {
            // A completion that was in the ring when the mirror was dropped: nothing it
            // brought is placed (a response head is not even parsed), see `release_conn`.
            return self.release_conn(i);
        }
        let r = r.and_then(|()| self.drive(i));
        if let Err(f) = r {
            self.fail(i, f)?;
        }
        Ok(())
    }
}
