//! A transfer's start and end on its lane of the reactor's ring: [`start_on`] builds its
//! loop (origins, connections kept from the transfers before, pools, its plan from the
//! resume state) and sends its first ops; [`end`] (in `finish`) keeps what a failed
//! transfer landed (control file, `.part`) or truncates, syncs and reads back a finished
//! one, and gives the reactor its idle connections and origins.

use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use uring::{BufPool, Op};

use super::reactor::{self, Reactor};
use super::wire::PartLink;
use super::{Loop, READ_BLOCK, Shared, mirrors};
use crate::config::Config;
use crate::control::origin::{Origin, OriginKey};
use crate::control::{Conn, St};
use crate::engine::EngineKind;
use crate::engine::blocks::{align_down, write_block};
use crate::engine::sink::Sink;
use crate::error::{Error, Result};
use crate::lane::LaneRing;
use crate::output::Output;
use crate::output::resume::State;
use crate::report::Progress;
use crate::schedule::pace::Bucket;
use crate::schedule::{FIRST_SEGMENT, align_up};
use crate::tag::Tag;
use crate::transfer::Transfer;
use crate::transfer::mirror::Mirror;

mod finish;
pub(crate) use finish::end;

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
    pub(crate) part: Option<PartLink>,
    /// `--threads`: a whole transfer placed on this reactor by the one that runs the list.
    pub(crate) whole: Option<super::wire::WholeLink>,
}

/// What only the end of a transfer needs.
pub(crate) struct EndState {
    out: Rc<Output>,
    resuming: bool,
    ring: RingFacts,
    signed: Option<crate::signature::Input>,
    /// The origin key of each of the transfer's origins.
    keys: Vec<OriginKey>,
    /// The engine and kTLS switch its connections are set up for.
    pub(crate) engine: (EngineKind, bool),
    /// The final sync ran beside other transfers: its result (0 or a negated errno), and
    /// whether it was the syncfs(2) of a group ([`Loop::ready_to_sync`],
    /// [`Loop::push_fsync`], [`Loop::synced_elsewhere`]).
    pub(crate) synced: Option<(i32, bool)>,
    /// Connections that served it, counted when they went to the reactor while its fsync
    /// ran ([`Loop::hand_back_idle`]); `None` while it holds them.
    pub(crate) served: Option<usize>,
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
fn first_request(resume: Option<&State>, part: Option<&PartLink>, kept: bool, align: u64, n: usize) -> (u64, u64) {
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

/// A partial fetch's first request seen as a resume ([`first_request`]): what is outside
/// `want` counts as landed, with what the saved state has (the size is the state's, or
/// unknown until the first answer).
fn as_landed(want: &[(u64, u64)], resume: Option<&State>) -> State {
    let total = resume.map_or(u64::MAX, |st| st.total);
    let mut landed = crate::schedule::Landed::outside(want, total);
    for &(a, b) in resume.map_or(&[][..], |st| &st.ranges[..]) {
        landed.add(a, b);
    }
    State {
        total,
        ranges: landed.ranges().to_vec(),
        ..State::default()
    }
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
    let wanted = opts.fetch_only.as_deref().map(|want| as_landed(want, resume.as_ref()));
    let first = first_request(
        wanted.as_ref().or(resume.as_ref()),
        part.as_ref(),
        opts.kept.is_some(),
        out.align,
        n,
    );
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
    let transfer = Transfer::new(
        &out,
        resume,
        all.mirrors,
        first,
        m.min(n),
        part.as_ref().map(PartLink::range),
    );
    // (A stream's checksum is computed as its bytes go out: it cannot be read back.)
    let stream_digest = opts.checksum.as_ref().filter(|_| out.sequential);
    let stream_digest = stream_digest.map(|c| ring::digest::Context::new(c.algorithm));
    let pace = opts.limit_rate.map(|r| Bucket::new(r, Duration::ZERO));
    let shared = Shared {
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
        transfer,
    };
    // (This run holds the `.part`'s lock: a control file there now is the one it resumes
    // from, or its own last save before a redirect.)
    let control_id = out.control_id(control.as_deref());
    let mut transfer_loop = Loop {
        ring,
        conns,
        shared,
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
        end_state: EndState {
            out,
            resuming,
            ring: ring_facts,
            signed,
            keys: all.keys,
            engine: (engine, ktls),
            synced: None,
            served: None,
        },
    };
    match transfer_loop.begin(reactor, signals) {
        Ok(()) => Ok(transfer_loop),
        Err(e) => Err(Box::new((
            e,
            std::mem::replace(&mut transfer_loop.shared.report, Progress::new(true, 0)),
        ))),
    }
}

impl EndState {
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
        let m = self.shared.transfer.mirrors.len();
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
