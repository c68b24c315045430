//! One download: the event loop over one io_uring, the connections (control plane:
//! connect → TLS handshake → request → response head → validation) and the body path
//! (data plane: compaction into aligned write blocks, writes at segment offsets).
//!
//! Every socket and file operation is an SQE on the ring; the loop makes one
//! `io_uring_enter` per turn that submits and waits. Each connection has at most one
//! operation (CONNECT, SEND or RECV) in flight; write blocks have their own.

pub(crate) mod assign;
mod conn;
mod handoff;
pub mod many;
pub mod mirrors;
mod pipe;
mod reactor;
mod recv;
pub(crate) mod retry;
mod summary;
mod tick;
mod writer;

pub use reactor::Reactor;
pub use summary::Summary;

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use http::Url;
use uring::{BufPool, Completion, Op};

use crate::config::Config;
use crate::control::origin::Origin;
use crate::control::*;
use crate::engine::EngineKind;
use crate::engine::blocks::{WriteBlock, align_down, write_block};
use crate::engine::splice::Pipe;
use crate::err;
use crate::error::{Error, Result};
use crate::lane::{LaneRing, RingCell};
use crate::output::Output;
use crate::output::resume::State;
use crate::report::{Note, Progress};
use crate::schedule::queue::Plan;
use crate::schedule::{FIRST_SEGMENT, Landed};
use crate::tag::Tag;
use crate::transfer::Transfer;
use writer::*;

/// Read block per connection, bytes: holds a response head or ≥ 3 whole TLS records.
pub(crate) const READ_BLOCK: usize = 64 << 10;

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

/// Run-wide state the connections share: the report, the options, the write pool, the
/// engine's switches and counts, the origins — and the transfer.
pub(crate) struct Shared {
    /// Progress and notes: everything the loop has to say goes through it.
    pub(crate) report: Progress,
    pub(crate) opts: Rc<Config>,
    pub(crate) pool: BufPool,
    /// Full or final blocks waiting for a write SQE.
    pub(crate) to_write: VecDeque<WriteBlock>,
    pub(crate) fatal: Option<Error>,
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
    /// Which connection slots sent a request (for the summary's count).
    pub(crate) used: Vec<bool>,
    /// The origins the mirrors are fetched from (each mirror names its own).
    pub(crate) origins: Vec<Origin>,
    /// The file being fetched.
    pub(crate) tr: Transfer,
}

/// Runs transfer `st` alone on the ring of `reactor` (SIGINT/SIGTERM read from
/// `signals`): into its output from the URLs of its mirrors (one, or several serving the
/// same file: see [`mirrors`]), on connections `reactor` kept open from the transfers
/// before it where they go to the same origins; the connections this one leaves open and
/// idle are kept in `reactor` for the next (only when it is [`Outcome::Done`]). Gives
/// back the transfer's report, and what a failed transfer knew (for `--json`: `bytes` is
/// then what the `.part` holds, not the file's size).
///
/// The result's error is any [`Kind`]: the first fatal failure of a connection, a refused
/// ring, a failed write; with several mirrors, a server's failure only once no mirror is
/// left.
pub fn run(
    st: Start,
    signals: Option<RawFd>,
    reactor: &mut Reactor,
) -> (Result<Outcome>, Progress, Option<Box<Summary>>) {
    let n = st.opts.connections;
    let (chosen, entries, splice) =
        match reactor.take_ring(&st.opts, reactor::ring_entries(n), st.engine == EngineKind::Splice) {
            Ok(r) => r,
            Err(e) => return (Err(e), st.report, None),
        };
    let cell = RingCell::new(chosen);
    let r = match start_on(st, reactor, cell.lane(0), n, signals, true) {
        Ok(mut dl) => {
            let r = dl.event_loop();
            end(dl, r, reactor)
        }
        Err((e, report)) => (Err(e), report, None),
    };
    reactor.give_back((cell.into_inner(), entries, splice));
    if !matches!(r.0, Ok(Outcome::Done(_))) {
        reactor.reset();
    }
    r
}

/// One transfer to start: its mirrors, options, output, resume state and report.
pub struct Start {
    /// Its URLs (one, or mirrors of one file).
    pub mirrors: Vec<mirrors::MirrorRoute>,
    /// Its options.
    pub opts: Rc<Config>,
    /// The open output.
    pub out: Rc<Output>,
    /// State read from the control file (`-c`), validated against the server's answer.
    pub resume: Option<State>,
    /// The control file to keep current (None for standard output).
    pub control: Option<PathBuf>,
    /// The engine that moves body bytes.
    pub engine: EngineKind,
    /// Hand TLS connections to the kernel (kTLS) once their handshake is done.
    pub ktls: bool,
    /// `--signature` over the file: what its verification needs from its bytes.
    pub signed: Option<crate::signature::Input>,
    /// Its progress and notes (given back at its end).
    pub report: Progress,
}

/// What only the end of a transfer needs.
pub(crate) struct Fin {
    out: Rc<Output>,
    resuming: bool,
    io: String,
    registered: bool,
    /// Fixed-file ops counted before the transfer, when its output is a fixed file.
    fixed_before: Option<u64>,
    sqpoll_tid: Option<u32>,
    signed: Option<crate::signature::Input>,
    /// The origin key of each of the transfer's origins.
    keys: Vec<String>,
}

/// Builds the loop of transfer `st` on lane `ring` with `n` connection slots (idle
/// connections `reactor` kept to its origins first) and starts it: its tick, the signal
/// READ when `signals` is given, its first connects; `alone`: no other transfer shares the
/// ring (its output may then be the ring's fixed file). On failure the report comes back.
pub(crate) fn start_on<'c>(
    st: Start,
    reactor: &mut Reactor,
    ring: LaneRing<'c>,
    n: usize,
    signals: Option<RawFd>,
    alone: bool,
) -> std::result::Result<Loop<'c>, (Error, Progress)> {
    let Start {
        mirrors,
        opts,
        out,
        resume,
        control,
        engine,
        ktls,
        signed,
        report,
    } = st;
    let m = mirrors.len();
    let mut states = Vec::with_capacity(m);
    let mut origins = Vec::with_capacity(m);
    let mut keys = Vec::with_capacity(m);
    let mut kept_tls_info = Vec::with_capacity(m);
    // Mirrors on one origin (scheme, host, port, route) share it and its caps.
    for route in mirrors {
        let fresh = match Origin::new(&route.url, route.tls, route.route) {
            Ok(o) => o,
            Err(e) => return Err((e, report)),
        };
        let key = reactor::origin_key(&route.url, &fresh);
        let o = match keys.iter().position(|k| *k == key) {
            Some(o) => o,
            None => {
                let (origin, tls_info) = reactor.origin(&key, fresh);
                origins.push(origin);
                keys.push(key);
                kept_tls_info.push(tls_info);
                keys.len() - 1
            }
        };
        states.push(crate::transfer::mirror::Mirror::new(route.url, route.headers, o));
    }
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

    let block = write_block().max(out.align as usize);
    let wcount = reactor::write_slots(n);
    let (io, sqpoll_tid) = ring.cell().with(|c| (c.label.clone(), c.sqpoll_tid));
    let (rpool, wpool) = match reactor.pools(ring.lane(), READ_BLOCK, n, block, wcount) {
        Ok(p) => p,
        Err(e) => return Err((e, report)),
    };
    // Connections the transfers before left open to these origins go first (keep-alive,
    // RFC 9112 §9.3); the others are closed.
    let mut kept: Vec<Conn> = Vec::new();
    let mut tls_info = None;
    for (o, key) in keys.iter().enumerate() {
        let k = states.iter().position(|s| s.origin == o).unwrap_or(0); // (its first mirror)
        for mut c in reactor.take_idle(key, n - kept.len(), (engine, ktls)) {
            c.mirror = k;
            tls_info = tls_info.or_else(|| kept_tls_info[o].clone());
            kept.push(c);
        }
    }
    let mut report = report;
    // Registered once with the kept ring (again only when the pools or the ring are new).
    let registered = reactor.register_pools(ring.cell(), &mut report);
    // The output fd as fixed file 0 (a transfer alone on its ring): its WRITE_FIXED,
    // FALLOCATE and FSYNC skip the per-op fget/fput. Measurement knob RINGDL_FIXED_FILES=0
    // leaves it unregistered.
    let fixed_before = (alone && std::env::var_os("RINGDL_FIXED_FILES").is_none_or(|v| v != "0"))
        .then(|| {
            ring.cell().with(|c| {
                (c.ring.backend() == uring::Backend::Uring && c.ring.register_files(&[out.fd.as_raw_fd()]).is_ok())
                    .then(|| c.ring.fixed_file_ops())
            })
        })
        .flatten();
    // The new connections are spread over the mirrors in turn (idle connections kept to
    // other origins give their read blocks back if these need them).
    let fresh = n - kept.len();
    reactor.free_blocks(&rpool, fresh);
    let conns: Vec<Conn> = kept
        .into_iter()
        .chain((0..fresh).map(|i| {
            let mut c = Conn::new(rpool.alloc().expect("one read block per connection"));
            c.mirror = i % m;
            c
        }))
        .collect();
    let tr = Transfer {
        align: out.align,
        direct: out.direct,
        sequential: out.sequential,
        file: out.part.is_some(),
        out: Rc::clone(&out),
        out_name: out.describe(),
        plan: Plan::new(resume_start, resume_end),
        started: Instant::now(),
        ranges: false,
        total: None,
        validator: None,
        landed: Landed::default(),
        received: 0,
        redirect: None,
        redirect_mirror: 0,
        need_fallocate: false,
        resume,
        disposition: None,
        changed: false,
        capped_at: None,
        retries: 0,
        steals: 0,
        plain_get: false,
        mirrors: states,
        reference: None,
        not_modified: false,
        wanted: m.min(n),
    };
    let stream_digest = opts
        .checksum
        .as_ref()
        .filter(|_| out.sequential)
        .map(|c| ring::digest::Context::new(c.algorithm));
    let pace = opts
        .limit_rate
        .map(|r| crate::schedule::pace::Bucket::new(r, Duration::ZERO));
    let sh = Shared {
        report,
        opts,
        pool: wpool,
        to_write: VecDeque::new(),
        fatal: None,
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
        origins,
        tr,
    };
    let mut dl = Loop {
        ring,
        conns,
        sh,
        out_fd: out.fd.as_raw_fd(),
        slots: (0..wcount).map(|_| None).collect(),
        writes_in_flight: 0,
        waiting: VecDeque::new(),
        started: Instant::now(),
        tls_info,
        interrupted: None,
        tick: Duration::from_millis(250),
        control,
        saved_bytes: 0,
        sync_snapshot: None,
        recent_rate: 0.0,
        rate_mark: (Instant::now(), 0),
        last_sync: Instant::now(),
        emitted: 0,
        stream_digest,
        pace,
        paced: VecDeque::new(),
        pace_timer: false,
        fin: Fin {
            out,
            resuming,
            io,
            registered,
            fixed_before,
            sqpoll_tid,
            signed,
            keys,
        },
    };
    match dl.begin(reactor, signals) {
        Ok(()) => Ok(dl),
        Err(e) => Err((e, std::mem::replace(&mut dl.sh.report, Progress::new(true, 0)))),
    }
}

impl Loop<'_> {
    /// The first ops: the tick, the signalfd READ (when `signals`), the first connects.
    fn begin(&mut self, reactor: &mut Reactor, signals: Option<RawFd>) -> Result<()> {
        self.push(Op::Timeout { after: self.tick }, Tag::Tick.encode())?;
        // SIGINT/SIGTERM arrive as a READ completion on the signalfd.
        if let Some(fd) = signals {
            let sigpool = reactor.signal_block()?;
            if let Some(buf) = sigpool.alloc() {
                self.push(
                    Op::Read {
                        fd,
                        buf,
                        range: 0..uring::signal::SIGINFO_SIZE,
                        offset: u64::MAX,
                    },
                    Tag::Signal.encode(),
                )?;
            }
        }
        // Each mirror's first connection connects now, unless a connection kept from the
        // transfer before is open to its origin; the others wait for the first answer
        // (`kick`: as many as the size is worth, see `Transfer::wanted`). One name with
        // several addresses: the first connect goes alone; another races the next address
        // after its head start (RFC 8305 §5).
        let m = self.sh.tr.mirrors.len();
        let mut started: Vec<bool> = (0..m)
            .map(|k| self.conns.iter().any(|c| c.mirror == k && c.st == St::Open))
            .collect();
        for i in 0..self.conns.len() {
            if self.conns[i].st == St::Open {
                continue;
            }
            let k = self.conns[i].mirror;
            if !started[k] {
                self.connect(i)?;
            } else if self.addr_count(k) > 1 {
                self.conns[i].deferred = true;
            }
            started[k] = true;
        }
        Ok(())
    }
}

/// Ends the transfer of `dl` after its loop returned `r`: a failure keeps what landed
/// (control file, `.part`) and says how to resume; a success truncates, syncs and reads
/// the file back for its checksum or signature, and keeps its idle connections and
/// origins in `reactor`. Gives back the transfer's report, and what a failed transfer
/// knew (for `--json`).
pub(crate) fn end(
    mut dl: Loop<'_>,
    r: Result<Option<(usize, Url)>>,
    reactor: &mut Reactor,
) -> (Result<Outcome>, Progress, Option<Box<Summary>>) {
    let mut failed = None;
    let r = end_inner(&mut dl, r, reactor, &mut failed);
    (r, std::mem::replace(&mut dl.sh.report, Progress::new(true, 0)), failed)
}

fn end_inner(
    dl: &mut Loop<'_>,
    r: Result<Option<(usize, Url)>>,
    reactor: &mut Reactor,
    failed: &mut Option<Box<Summary>>,
) -> Result<Outcome> {
    let out = Rc::clone(&dl.fin.out);
    let opts = Rc::clone(&dl.sh.opts);
    let io = dl.fin.io.clone();
    let registered = dl.fin.registered;
    match r {
        Ok(Some((mirror, to))) => {
            if dl.sh.tr.mirrors.len() > 1 {
                // A mirror's redirect may come while bytes are on their way to the file:
                // they land before the ring goes (the next run fetches them again).
                dl.settle();
            }
            return Ok(Outcome::Redirect { mirror, to });
        }
        Ok(None) if dl.sh.tr.not_modified => {
            dl.sh.report.clear();
            return Ok(Outcome::NotModified {
                mirror: dl.sh.tr.reference.unwrap_or(0),
            });
        }
        Ok(None) => {
            if let Some(n) = dl.sh.tr.capped_at {
                dl.sh.report.note(Note::Allowed { connections: n });
            }
        }
        Err(mut e) => {
            // Let the writes in flight land first, then keep what landed: a later `-c`
            // resumes from the control file. A `.part` that holds nothing (only
            // preallocated zeros) is removed.
            dl.settle();
            let mut saved = false;
            if dl.sh.tr.landed.bytes() == 0 && !dl.fin.resuming {
                out.remove_part();
            } else if dl.writes_in_flight > 0 {
                // Writes that did not complete in settle()'s 10 s: an fdatasync could hang
                // as long. The control file keeps its last (synced) state.
                dl.sh.report.note(Note::WritesPending);
            } else if dl.control.is_some() && (dl.sh.tr.file || out.room.is_some()) {
                // The control file may only name bytes that are on disk: fdatasync first.
                // If that fails, the control file keeps its last (synced) state.
                match dl.wait_for(
                    Op::Fsync {
                        fd: dl.out_fd,
                        datasync: true,
                    },
                    Tag::Fsync(1).encode(),
                ) {
                    Ok(r) if r >= 0 => saved = dl.save_control(None) && dl.sh.tr.landed.bytes() > 0,
                    _ => dl.sh.report.note(Note::SyncFailed),
                }
            }
            if let Some(part) = &out.part
                && !dl.sh.tr.changed
            {
                if saved {
                    e.msg.push_str(&format!(
                        "; {} of {} bytes kept in {}: run the same command again to fetch only the rest",
                        dl.sh.tr.landed.bytes(),
                        dl.sh.tr.total.unwrap_or(0),
                        part.display()
                    ));
                } else if dl.sh.tr.landed.bytes() > 0 && dl.sh.tr.plan.is_planned() && !dl.sh.tr.ranges {
                    e.msg.push_str(&format!(
                        "; {} bytes kept in {}, but the server does not serve ranges: a new run starts over",
                        dl.sh.tr.landed.bytes(),
                        part.display()
                    ));
                }
            }
            dl.sh.report.clear();
            *failed = Some(Box::new(dl.summary(dl.sh.tr.landed.bytes(), io, registered, None)));
            return Err(e);
        }
    }
    let total = dl.sh.tr.total.unwrap_or(dl.sh.tr.received);
    if !dl.sh.tr.landed.is_complete(total) {
        return Err(err!(
            Internal,
            "download ended with {} of {total} bytes on disk",
            dl.sh.tr.landed.bytes()
        ));
    }
    if dl.sh.tr.file || out.room.is_some() {
        if dl.sh.tr.file {
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
            &dl.ring,
            &dl.sh.pool,
            (part, out.direct, base, total),
            opts.checksum.as_ref().map(|c| c.algorithm),
            dl.fin.signed.take(),
            &mut dl.interrupted,
        )?,
        (Some(_), None) => (dl.stream_digest.take().map(|d| d.finish()), None),
        _ => (None, None),
    };
    if let Some(before) = dl.fin.fixed_before {
        let ops = dl.ring.fixed_file_ops() - before;
        dl.sh.report.note(Note::FixedFileOps { ops });
    }
    if opts.verbose > 0
        && let Some(cpu) = dl.fin.sqpoll_tid.and_then(crate::io::thread_cpu)
    {
        // Not in the process's rusage until the thread exits: say it here.
        dl.sh.report.note(Note::SqpollCpu { cpu });
    }
    let info = dl.tls_info.clone();
    let mut summary = dl.summary(total, io, registered, digest);
    summary.signed = signed;
    if dl.interrupted.is_some() {
        reactor.interrupted = dl.interrupted;
    }
    // What this transfer leaves open goes to the next one from the same origin.
    let keys = std::mem::take(&mut dl.fin.keys);
    let conns = std::mem::take(&mut dl.conns)
        .into_iter()
        .map(|c| (keys[dl.sh.tr.mirrors[c.mirror].origin].clone(), c))
        .collect();
    let origins = keys.into_iter().zip(std::mem::take(&mut dl.sh.origins)).collect();
    reactor.keep(origins, info, conns);
    Ok(Outcome::Done(Box::new(summary)))
}

pub(crate) struct Loop<'a> {
    /// This transfer's lane of the reactor's ring.
    pub(crate) ring: LaneRing<'a>,
    pub(crate) conns: Vec<Conn>,
    pub(crate) sh: Shared,
    /// What only the transfer's end needs.
    pub(crate) fin: Fin,
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
    /// SIGINT/SIGTERM came while the loop was no longer running (the final fsync or
    /// read-back): the file lands, and the run stops before the next.
    pub(crate) interrupted: Option<&'static str>,
}

impl Shared {
    /// Mirror `k`'s URL.
    pub(crate) fn url(&self, k: usize) -> &Url {
        &self.tr.mirrors[k].target
    }

    /// Mirror `k`'s origin.
    pub(crate) fn origin(&self, k: usize) -> &Origin {
        &self.origins[self.tr.mirrors[k].origin]
    }

    /// Mirror `k`'s origin, to update its Happy Eyeballs state.
    pub(crate) fn origin_mut(&mut self, k: usize) -> &mut Origin {
        &mut self.origins[self.tr.mirrors[k].origin]
    }
}

pub(crate) fn errno(res: i32) -> rustix::io::Errno {
    rustix::io::Errno::from_raw_os_error(-res)
}

impl Loop<'_> {
    /// Runs until every segment has landed (`Ok(None)`), a mirror's first response
    /// redirects (`Ok(Some((mirror, url)))`), or a fatal failure.
    pub(crate) fn event_loop(&mut self) -> Result<Option<(usize, Url)>> {
        loop {
            if let Some(r) = self.step() {
                return r;
            }
            self.ring
                .submit_and_wait(1)
                .map_err(|e| err!(LocalIo, "io_uring_enter: {e}"))?;
            while let Some(c) = self.ring.next_completion() {
                self.complete(c)?;
            }
        }
    }

    /// One turn's work after the completions were handled: opens and assigns what the plan
    /// and the caps allow, queues writes; the loop's end when there is one (as
    /// [`Loop::event_loop`] returns it), else `None`.
    pub(crate) fn step(&mut self) -> Option<Result<Option<(usize, Url)>>> {
        if let Err(e) = self.kick().and_then(|()| self.flush_writes()) {
            return Some(Err(e));
        }
        if let Some(e) = self.sh.fatal.take() {
            return Some(Err(e));
        }
        if let Some(u) = self.sh.tr.redirect.take() {
            return Some(Ok(Some((self.sh.tr.redirect_mirror, u))));
        }
        self.finished().then_some(Ok(None))
    }

    /// Submits one operation and waits for its completion (end of the download only:
    /// other completions that arrive meanwhile are dropped, but a signal is remembered in
    /// [`Loop::interrupted`]).
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
                if c.tag == Tag::Signal.encode() {
                    self.interrupted = Some(crate::tag::signal_name(c.buf.as_deref()));
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
        self.sh.tr.plan.is_drained()
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
                        self.sh.tr.total.unwrap_or(0)
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
                let name = crate::tag::signal_name(c.buf.as_deref());
                self.sh.fatal = Some(err!(Interrupted, "interrupted by {name}"));
            }
            _ => {}
        }
        Ok(())
    }

    /// Handles a connection's failure, or drives it on.
    pub(crate) fn after(&mut self, i: usize, r: std::result::Result<(), Fail>) -> Result<()> {
        if self.sh.tr.mirrors[self.conns[i].mirror].standing == crate::transfer::mirror::Standing::Dropped {
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
