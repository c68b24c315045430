//! A transfer's start and end on its lane of the reactor's ring: [`start_on`] builds its
//! loop (origins, connections kept from the transfers before, pools, its plan from the
//! resume state) and sends its first ops; [`end`] keeps what a failed transfer landed
//! (control file, `.part`) or truncates, syncs and reads back a finished one, and gives
//! the reactor its idle connections and origins.

use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use http::Url;
use uring::{BufPool, Op};

use super::reactor::{self, Reactor};
use super::{Loop, Outcome, READ_BLOCK, Shared, Summary, errno, mirrors};
use crate::config::Config;
use crate::control::origin::{Origin, OriginKey};
use crate::control::{Conn, St};
use crate::engine::EngineKind;
use crate::engine::blocks::{align_down, write_block};
use crate::engine::sink::Sink;
use crate::err;
use crate::error::{Error, Result};
use crate::lane::LaneRing;
use crate::output::Output;
use crate::output::resume::State;
use crate::report::{Note, Progress};
use crate::schedule::pace::Bucket;
use crate::schedule::queue::Plan;
use crate::schedule::{FIRST_SEGMENT, Landed, align_up};
use crate::tag::Tag;
use crate::transfer::Transfer;
use crate::transfer::mirror::Mirror;

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
    /// `--threads`: a part of another reactor's transfer (None for a transfer of its own).
    pub(crate) part: Option<super::threads::PartLink>,
    /// `--threads`: a whole transfer placed on this reactor by the one that runs the list.
    pub(crate) whole: Option<super::threads::WholeLink>,
}

/// What only the end of a transfer needs.
pub(crate) struct Fin {
    out: Rc<Output>,
    resuming: bool,
    ring: RingFacts,
    signed: Option<crate::signature::Input>,
    /// The origin key of each of the transfer's origins.
    keys: Vec<OriginKey>,
    /// The engine and kTLS switch its connections are set up for.
    pub(crate) engine: (EngineKind, bool),
    /// The final fsync ran on the ring beside other transfers: its result
    /// ([`Loop::begin_sync`]).
    pub(crate) synced: Option<i32>,
}

/// The origins of a transfer's mirrors: mirrors under one origin key (scheme, host, port,
/// route, TLS settings) share the origin, its connections and its caps.
struct Origins {
    /// Each mirror, with the index of its origin.
    mirrors: Vec<Mirror>,
    /// Each origin: the reactor's (what earlier transfers learned) or a new one.
    origins: Vec<Origin>,
    /// The key of each origin.
    keys: Vec<OriginKey>,
    /// What the reactor knows of each origin's TLS session (`-v`'s line), if anything.
    tls_info: Vec<Option<String>>,
}

impl Origins {
    /// The origins of `routes`, taken from `reactor` where it knows them.
    ///
    /// # Errors
    /// What [`Origin::new`] returns for a route it cannot use.
    fn of(routes: Vec<mirrors::MirrorRoute>, reactor: &mut Reactor) -> Result<Self> {
        let m = routes.len();
        let mut all = Origins {
            mirrors: Vec::with_capacity(m),
            origins: Vec::with_capacity(m),
            keys: Vec::with_capacity(m),
            tls_info: Vec::with_capacity(m),
        };
        for route in routes {
            let key = route.key;
            let fresh = Origin::new(&route.url, route.tls, route.route)?;
            let o = match all.keys.iter().position(|k| *k == key) {
                Some(o) => o,
                None => {
                    let (origin, tls_info) = reactor.origin(&key, fresh);
                    all.origins.push(origin);
                    all.keys.push(key);
                    all.tls_info.push(tls_info);
                    all.keys.len() - 1
                }
            };
            all.mirrors.push(Mirror::new(route.url, route.headers, o));
        }
        Ok(all)
    }
}

/// The byte range the transfer's first request asks for, `(start, end)`, on `n`
/// connections with output alignment `align`: a resumed download asks first for the
/// first block it lacks, not for byte 0 again, and only up to where the `.part` has bytes
/// again; a helper's part (`--threads`) asks first for its share of one connection (its
/// other connections take the rest once the answer planned it); a file already there
/// (`kept`) is asked for its size with one block (the answer most likely keeps it, and
/// its body is then left unread); else [`FIRST_SEGMENT`].
fn first_request(
    resume: Option<&State>,
    part: Option<&super::threads::PartLink>,
    kept: bool,
    align: u64,
    n: usize,
) -> (u64, u64) {
    let start = resume.map_or(0, |st| {
        let first_gap = match st.ranges.first() {
            Some(&(0, e)) => e,
            _ => 0,
        };
        align_down(first_gap.min(st.total.saturating_sub(1)), align)
    });
    let first = part.map_or(FIRST_SEGMENT, |p| {
        align_up(p.bytes().div_ceil(n.max(1) as u64), align).min(FIRST_SEGMENT)
    });
    let first = if kept { align } else { first };
    let end = resume
        .and_then(|st| st.ranges.iter().map(|r| r.0).find(|&s| s > start))
        .map_or(start + first, |next| next.min(start + first))
        .min(resume.map_or(u64::MAX, |st| st.total));
    (start, end)
}

/// The `n` connection slots of a transfer: up to `take` connections the transfers before
/// left open to its origins first (keep-alive, RFC 9112 §9.3; the others are closed),
/// each on its origin's first mirror, then new ones spread over the `m` mirrors in turn,
/// each with a read block of `rpool` (idle connections kept to other origins give their
/// read blocks back if these need them). Also returns the TLS line of the first origin a
/// kept connection came from.
fn connection_slots(
    reactor: &mut Reactor,
    all: &Origins,
    take: usize,
    engine: (EngineKind, bool),
    rpool: &BufPool,
    n: usize,
) -> (Vec<Conn>, Option<String>) {
    let mut kept: Vec<Conn> = Vec::new();
    let mut tls_info = None;
    for (o, key) in all.keys.iter().enumerate() {
        let k = all.mirrors.iter().position(|s| s.origin == o).unwrap_or(0); // (its first mirror)
        for mut c in reactor.take_idle(key, take.saturating_sub(kept.len()), engine) {
            c.mirror = k;
            tls_info = tls_info.or_else(|| all.tls_info[o].clone());
            kept.push(c);
        }
    }
    let m = all.mirrors.len();
    let fresh = n - kept.len();
    reactor.free_blocks(rpool, fresh);
    let conns = kept
        .into_iter()
        .chain((0..fresh).map(|i| {
            let mut c = Conn::new(rpool.alloc().expect("one read block per connection"));
            c.mirror = i % m;
            c
        }))
        .collect();
    (conns, tls_info)
}

/// The output fd as fixed file 0 of `ring` (a transfer `alone` on its ring): its
/// WRITE_FIXED, FALLOCATE and FSYNC skip the per-op fget/fput. Returns the ring's count
/// of fixed-file ops before the transfer when it was registered. Measurement knob
/// `RINGDL_FIXED_FILES=0` leaves it unregistered.
fn register_output(ring: &LaneRing<'_>, out: &Output, alone: bool) -> Option<u64> {
    (alone && std::env::var_os("RINGDL_FIXED_FILES").is_none_or(|v| v != "0"))
        .then(|| {
            ring.cell().with(|c| {
                (c.ring.backend() == uring::Backend::Uring && c.ring.register_files(&[out.fd.as_raw_fd()]).is_ok())
                    .then(|| c.ring.fixed_file_ops())
            })
        })
        .flatten()
}

/// A transfer's state before its first answer: to `out`, over `mirrors`, its plan the
/// first request `first` (see [`first_request`]), `wanted` connections to open at first.
fn new_transfer(
    out: &Rc<Output>,
    resume: Option<State>,
    mirrors: Vec<Mirror>,
    first: (u64, u64),
    wanted: usize,
    part: Option<&super::threads::PartLink>,
) -> Transfer {
    Transfer {
        align: out.align,
        direct: out.direct,
        sequential: out.sequential,
        file: out.part.is_some(),
        out: Rc::clone(out),
        out_name: out.describe(),
        plan: Plan::new(first.0, first.1),
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
        capped_own: 0,
        refused_first: false,
        waited: Duration::ZERO,
        retries: 0,
        resent: 0,
        steals: 0,
        plain_get: false,
        mirrors,
        reference: None,
        not_modified: false,
        wanted,
        part: part.map(super::threads::PartLink::range),
    }
}

/// What a transfer's summary says of its ring ([`RingFacts::of`]).
struct RingFacts {
    /// The ring's label (`io_uring`, `epoll`, with its setup).
    io: String,
    /// The transfer's buffers are registered with the ring.
    registered: bool,
    /// Fixed-file ops counted before the transfer, when its output is a fixed file.
    fixed_before: Option<u64>,
    /// The ring's SQPOLL thread, whose CPU time `-v` says.
    sqpoll_tid: Option<u32>,
}

impl RingFacts {
    /// Sets up `ring` for a transfer to `out` (`alone` on it or not) and says what it is:
    /// the pools `reactor` gave it registered (once with the kept ring, again only when
    /// the pools or the ring are new), the output fd its fixed file when alone
    /// ([`register_output`]).
    fn of(reactor: &mut Reactor, ring: &LaneRing<'_>, out: &Output, alone: bool, report: &mut Progress) -> Self {
        let (io, sqpoll_tid) = ring.cell().with(|c| (c.label.clone(), c.sqpoll_tid));
        let registered = reactor.register_pools(ring.cell(), report);
        RingFacts {
            io,
            registered,
            fixed_before: register_output(ring, out, alone),
            sqpoll_tid,
        }
    }
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
) -> std::result::Result<Loop<'c>, Box<(Error, Progress)>> {
    let Start {
        mirrors,
        opts,
        out,
        resume,
        control,
        engine,
        ktls,
        signed,
        mut report,
        part,
        whole,
    } = st;
    let m = mirrors.len();
    let all = match Origins::of(mirrors, reactor) {
        Ok(all) => all,
        Err(e) => return Err(Box::new((e, report))),
    };
    let resuming = resume.is_some();
    let first = first_request(resume.as_ref(), part.as_ref(), opts.kept.is_some(), out.align, n);
    let block = write_block().max(out.align as usize);
    let wcount = reactor::write_slots(n);
    let (rpool, wpool) = match reactor.pools(READ_BLOCK, n, block, wcount) {
        Ok(p) => p,
        Err(e) => return Err(Box::new((e, report))),
    };
    // Beside other transfers a transfer takes only the kept connections it uses before its
    // size is known (one per mirror): the rest stay for the transfers that start next,
    // not held idle by this one.
    let take = if alone { n } else { m.min(n) };
    let (conns, tls_info) = connection_slots(reactor, &all, take, (engine, ktls), &rpool, n);
    let ring_facts = RingFacts::of(reactor, &ring, &out, alone, &mut report);
    let tr = new_transfer(&out, resume, all.mirrors, first, m.min(n), part.as_ref());
    // (A stream's checksum is computed as its bytes go out: it cannot be read back.)
    let stream_digest = opts.checksum.as_ref().filter(|_| out.sequential);
    let stream_digest = stream_digest.map(|c| ring::digest::Context::new(c.algorithm));
    let pace = opts.limit_rate.map(|r| Bucket::new(r, Duration::ZERO));
    let sh = Shared {
        report,
        opts,
        fatal: None,
        splice: engine == EngineKind::Splice,
        ktls,
        ktls_conns: 0,
        ktls_refused: None,
        ktls_rekeys: 0,
        soft_conns: 0,
        soft_rekeys: 0,
        tls_conns: 0,
        kept: [0; 3],
        tls_full: 0,
        tls_resumed: 0,
        used: vec![false; n],
        origins: all.origins,
        tr,
    };
    // (This run holds the `.part`'s lock: a control file there now is the one it resumes
    // from, or its own last save before a redirect.)
    let control_id = control.as_deref().and_then(crate::output::resume::id_of);
    let mut dl = Loop {
        ring,
        conns,
        sh,
        sink: Sink::new(wpool, out.fd.as_raw_fd(), wcount, stream_digest, pace),
        started: Instant::now(),
        tls_info,
        interrupted: None,
        remote: None,
        part,
        // (A placed transfer grows from this reactor's read pool when told to.)
        whole: whole.map(|w| w.with_pool(rpool.clone())),
        tick: tick(),
        control,
        saved_bytes: 0,
        control_id,
        sync_snapshot: None,
        recent_rate: 0.0,
        rate_mark: (Instant::now(), 0),
        last_sync: Instant::now(),
        fin: Fin {
            out,
            resuming,
            ring: ring_facts,
            signed,
            keys: all.keys,
            engine: (engine, ktls),
            synced: None,
        },
    };
    match dl.begin(reactor, signals) {
        Ok(()) => Ok(dl),
        Err(e) => Err(Box::new((
            e,
            std::mem::replace(&mut dl.sh.report, Progress::new(true, 0)),
        ))),
    }
}

impl Fin {
    /// The key of the transfer's origin `o`.
    pub(crate) fn key(&self, o: usize) -> &OriginKey {
        &self.keys[o]
    }
}

/// The loop's tick, 250 ms: stall checks, progress, the control-file saves (at most one per
/// tick), the end of a retry's wait (`not_before` has no timer of its own), a helper's
/// reports and give-backs. Test knob `RINGDL_TICK_MS` (10–60000) sets another for every
/// loop on every reactor: `tests/threads.rs` makes it long to show that a helper's stop
/// does not wait for its tick.
fn tick() -> Duration {
    static TICK: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *TICK.get_or_init(|| {
        let ms = std::env::var("RINGDL_TICK_MS").ok().and_then(|v| v.parse::<u64>().ok());
        Duration::from_millis(ms.map_or(250, |m| m.clamp(10, 60_000)))
    })
}

impl Loop<'_> {
    /// A finished transfer's output truncated to its size and its fsync pushed, so that
    /// the other transfers on the ring go on while the disk syncs; its completion lands in
    /// [`Fin::synced`] and [`end`] goes on from there. Returns whether the fsync was
    /// pushed (not for outputs that are not files, nor when bytes are missing: [`end`]
    /// says so).
    ///
    /// # Errors
    /// `LocalIo` when the truncation fails; `Internal` when the SQ is full.
    pub(crate) fn begin_sync(&mut self) -> Result<bool> {
        let total = self.sh.tr.total.unwrap_or(self.sh.tr.received);
        let out = Rc::clone(&self.fin.out);
        if !(self.sh.tr.file || out.room.is_some()) || !self.sh.tr.landed.is_complete(total) {
            return Ok(false);
        }
        if self.sh.tr.file {
            out.truncate(total)?;
        }
        self.push(
            Op::Fsync {
                fd: self.sink.out_fd,
                datasync: false,
            },
            Tag::Fsync(0).encode(),
        )?;
        Ok(true)
    }

    /// The first ops: the tick, the signalfd READ (when `signals`) or a helper's eventfd
    /// READ, the first connects.
    fn begin(&mut self, reactor: &mut Reactor, signals: Option<RawFd>) -> Result<()> {
        self.push(Op::Timeout { after: self.tick }, Tag::Tick.encode())?;
        // (A part of another reactor's transfer: the requests the others have on the wire
        // count toward the server's cap from the first connect.)
        self.share_serving();
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
        // A helper's part: its eventfd wakes it for a posted stop (the signal block is free
        // on a helper, which never READs the signalfd). Without the block (not mapped), the
        // tick reads the stop. (Placed transfers: their reactor's lane READs it.)
        if signals.is_none()
            && self.part.is_some()
            && let Some(buf) = reactor.signal_block().ok().and_then(|p| p.alloc())
        {
            self.arm_nudge(buf)?;
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

/// A 304 kept the output's file: read back for `--checksum` and `--signature` as a
/// fetched one is (`None` when neither is asked, or when the output is not a regular
/// file: a stream had nothing written, and a device to be checked is not asked with a
/// condition).
///
/// # Errors
/// `LocalIo` when the kept file cannot be read (gone since the request, say).
fn read_kept(dl: &mut Loop<'_>, reactor: &mut Reactor) -> Result<Option<Box<super::Kept>>> {
    let out = Rc::clone(&dl.fin.out);
    let checksum = dl.sh.opts.checksum.as_ref().map(|c| c.algorithm);
    let signed = dl.fin.signed.take();
    let Some(path) = out.final_path.as_deref().filter(|_| out.part.is_some()) else {
        return Ok(None);
    };
    if checksum.is_none() && signed.is_none() {
        return Ok(None);
    }
    let bytes = std::fs::metadata(path)
        .map_err(|e| err!(LocalIo, "{}, kept by a 304: {e}", path.display()))?
        .len();
    let (digest, signed) = crate::output::verify::digests(
        &dl.ring,
        &reactor.verify_pool(dl.sink.pool.block_size())?,
        (path, None, out.direct, 0, bytes),
        checksum,
        signed,
        &mut dl.interrupted,
    )?;
    if dl.interrupted.is_some() {
        reactor.interrupted = dl.interrupted;
    }
    Ok(Some(Box::new(super::Kept { bytes, digest, signed })))
}

/// What [`end`] gives back: the outcome, the report, what a failed transfer knew, and the
/// output while writes are in flight.
pub(crate) type Ended = (Result<Outcome>, Progress, Option<Box<Summary>>, Option<Rc<Output>>);

/// Ends the transfer of `dl` after its loop returned `r`: a failure keeps what landed
/// (control file, `.part`) and says how to resume; a success truncates, syncs and reads
/// the file back for its checksum or signature, and keeps its idle connections and
/// origins in `reactor`. Gives back the transfer's report, what a failed transfer knew
/// (for `--json`), and the output when writes are still in flight (to be kept open until
/// they are reaped: an epoll worker writes to the fd number).
pub(crate) fn end(mut dl: Loop<'_>, r: Result<Option<(usize, Url)>>, reactor: &mut Reactor) -> Ended {
    let mut failed = None;
    let r = end_inner(&mut dl, r, reactor, &mut failed);
    if let Some(rm) = dl.remote.take() {
        reactor.helpers_back(rm);
    }
    if let Some(p) = dl.part.as_mut() {
        // What of a helper's part landed, to its owner before the part's end is said.
        p.tell_landed(&dl.sh.tr.landed, 0);
        p.tell_blame(dl.sh.tr.changed);
    }
    let hold = (dl.sink.writes_in_flight > 0).then(|| Rc::clone(&dl.fin.out));
    (
        r,
        std::mem::replace(&mut dl.sh.report, Progress::new(true, 0)),
        failed,
        hold,
    )
}

/// What the loop's result `r` means for the transfer of `dl`: a redirect, a 304 that kept
/// the file, a failure ([`end_failed`], its summary in `failed`) or a finished download
/// ([`end_finished`]).
fn end_inner(
    dl: &mut Loop<'_>,
    r: Result<Option<(usize, Url)>>,
    reactor: &mut Reactor,
    failed: &mut Option<Box<Summary>>,
) -> Result<Outcome> {
    match r {
        Ok(Some((mirror, to))) => {
            dl.stop_parts();
            if dl.sh.tr.mirrors.len() > 1 {
                // A mirror's redirect may come while bytes are on their way to the file:
                // they land before the ring goes (the next run fetches them again).
                dl.settle();
            }
            Ok(Outcome::Redirect { mirror, to })
        }
        Ok(None) if dl.sh.tr.not_modified => {
            dl.sh.report.clear();
            let kept = read_kept(dl, reactor)?;
            Ok(Outcome::NotModified {
                mirror: dl.sh.tr.reference.unwrap_or(0),
                kept,
            })
        }
        Ok(None) => {
            if let Some(n) = dl.sh.tr.capped_at {
                dl.sh.report.note(Note::Allowed {
                    connections: n,
                    own: dl.sh.tr.capped_own.min(n),
                });
            }
            if let Some(rm) = dl.remote.as_ref().filter(|rm| rm.given > 0) {
                dl.sh.report.note(Note::Reactors {
                    reactors: rm.reactors(),
                    others: rm.helpers(),
                    parts: rm.given,
                    bytes: rm.by_others,
                });
            }
            end_finished(dl, reactor)
        }
        Err(e) => Err(end_failed(dl, e, reactor, failed)),
    }
}

/// The transfer of `dl` failed with `e`: parts out on other reactors stop first and say
/// what they landed, the writes in flight land, and what landed is kept for a later run
/// ([`keep_landed`]); `e` comes back saying what was kept, and `failed` gets the summary.
fn end_failed(dl: &mut Loop<'_>, mut e: Error, reactor: &mut Reactor, failed: &mut Option<Box<Summary>>) -> Error {
    let out = Rc::clone(&dl.fin.out);
    dl.stop_parts();
    dl.settle();
    let saved = keep_landed(dl, &out);
    dl.disown_control();
    // A resume stopped before its first answer: its control file, untouched (it
    // saves only once planned), still names what landed before.
    let before = dl
        .sh
        .tr
        .resume
        .as_ref()
        .filter(|_| dl.sh.tr.landed.bytes() == 0)
        .map(|st| (st.ranges.iter().map(|r| r.1 - r.0).sum::<u64>(), st.total))
        .filter(|b| b.0 > 0);
    if let Some(part) = &out.part
        && !dl.sh.tr.changed
    {
        let kept = if saved {
            Some((dl.sh.tr.landed.bytes(), dl.sh.tr.total.unwrap_or(0)))
        } else {
            before
        };
        if let Some((have, total)) = kept {
            e.msg.push_str(&format!(
                "; {have} of {total} bytes kept in {}: run the same command again to fetch only the rest",
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
    let (io, registered) = (dl.fin.ring.io.clone(), dl.fin.ring.registered);
    let mut s = dl.summary(before.map_or(dl.sh.tr.landed.bytes(), |b| b.0), io, registered, None);
    s.writes_pending = dl.sink.writes_in_flight > 0;
    if e.kind == crate::error::Kind::Interrupted {
        // (Cut short, not failed: what its origins taught — the cap a server was
        // seen allowing, a proven address — holds for the file's resume in this run
        // (`Outcome::Recalled`) and the files after it. Its connections close.)
        let keys = std::mem::take(&mut dl.fin.keys);
        let origins = keys.into_iter().zip(std::mem::take(&mut dl.sh.origins)).collect();
        reactor.keep(origins, dl.tls_info.clone(), Vec::new(), dl.fin.engine);
    }
    *failed = Some(Box::new(s));
    e
}

/// A failed transfer's bytes on `out`, kept for a later `-c`: a `.part` that holds
/// nothing (only preallocated zeros) is removed; else the control file is saved once an
/// fdatasync proved the bytes it names are on disk (it keeps its last synced state when
/// writes are still pending or the sync fails). Returns whether it was saved with bytes.
fn keep_landed(dl: &mut Loop<'_>, out: &Output) -> bool {
    if dl.sh.tr.landed.bytes() == 0 && !dl.fin.resuming {
        out.remove_part();
    } else if dl.sink.writes_in_flight > 0 {
        // Writes that did not complete in settle()'s 10 s: an fdatasync could hang
        // as long.
        dl.sh.report.note(Note::WritesPending);
    } else if dl.control.is_some() && (dl.sh.tr.file || out.room.is_some()) && out.owns_part() {
        // (A `.part` replaced under the run is another's: its control file too.)
        match dl.wait_for(
            Op::Fsync {
                fd: dl.sink.out_fd,
                datasync: true,
            },
            Tag::Fsync(1).encode(),
        ) {
            Ok(r) if r >= 0 => return dl.save_control(None) && dl.sh.tr.landed.bytes() > 0,
            _ => dl.sh.report.note(Note::SyncFailed),
        }
    }
    false
}

/// The transfer of `dl` finished: its output is complete, truncated and synced
/// ([`sync_output`]), read back for `--checksum` and `--signature`, and what it leaves
/// open goes to `reactor` for the next transfer from the same origin.
fn end_finished(dl: &mut Loop<'_>, reactor: &mut Reactor) -> Result<Outcome> {
    let out = Rc::clone(&dl.fin.out);
    let opts = Rc::clone(&dl.sh.opts);
    let total = dl.sh.tr.total.unwrap_or(dl.sh.tr.received);
    if !dl.sh.tr.landed.is_complete(total) {
        return Err(err!(
            Internal,
            "download ended with {} of {total} bytes on disk",
            dl.sh.tr.landed.bytes()
        ));
    }
    // (Read back, renamed or resumed by its name, a replaced `.part` is another file.)
    out.still_ours().inspect_err(|_| dl.disown_control())?;
    sync_output(dl, &out, total)?;
    dl.sh.report.clear();
    let (digest, signed) = match (&opts.checksum, out.read_back()) {
        (_, Some((part, base))) => crate::output::verify::digests(
            &dl.ring,
            // (Its own blocks: the write pool may be held by other transfers' connections.)
            &reactor.verify_pool(dl.sink.pool.block_size())?,
            (part, out.readable(), out.direct, base, total),
            opts.checksum.as_ref().map(|c| c.algorithm),
            dl.fin.signed.take(),
            &mut dl.interrupted,
        )?,
        (Some(_), None) => (dl.sink.stream_digest.take().map(|d| d.finish()), None),
        _ => (None, None),
    };
    if let Some(before) = dl.fin.ring.fixed_before {
        let ops = dl.ring.fixed_file_ops() - before;
        dl.sh.report.note(Note::FixedFileOps { ops });
    }
    if opts.verbose > 0
        && let Some(cpu) = dl.fin.ring.sqpoll_tid.and_then(crate::io::thread_cpu)
    {
        // Not in the process's rusage until the thread exits: say it here.
        dl.sh.report.note(Note::SqpollCpu { cpu });
    }
    let info = dl.tls_info.clone();
    let (io, registered) = (dl.fin.ring.io.clone(), dl.fin.ring.registered);
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
    reactor.keep(origins, info, conns, dl.fin.engine);
    Ok(Outcome::Done(Box::new(summary)))
}

/// A file (or device) output of `total` bytes truncated to its size and fsynced, unless
/// the reactor already did so beside other transfers ([`Loop::begin_sync`]).
///
/// # Errors
/// `LocalIo` when the truncation or the fsync fails.
fn sync_output(dl: &mut Loop<'_>, out: &Output, total: u64) -> Result<()> {
    if !(dl.sh.tr.file || out.room.is_some()) {
        return Ok(());
    }
    let r = match dl.fin.synced.take() {
        Some(r) => r,
        None => {
            if dl.sh.tr.file {
                out.truncate(total)?;
            }
            dl.wait_for(
                Op::Fsync {
                    fd: dl.sink.out_fd,
                    datasync: false,
                },
                Tag::Fsync(0).encode(),
            )?
        }
    };
    if r < 0 {
        return Err(err!(LocalIo, "fsync {}: {}", out.describe(), errno(r)));
    }
    Ok(())
}
