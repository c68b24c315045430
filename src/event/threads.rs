//! Reactors on other threads (`--threads N`): each has its own ring (io_uring or epoll),
//! buffer pools, write slots and connections, and shares nothing with the others; they
//! talk by messages.
//!
//! One reactor, the one a transfer started on, is its *owner*: it holds the transfer's
//! plan, landed ranges, validator and control file. When another reactor (a *helper*) is
//! free, the owner gives it a *part*: a run of queued segments, `[start, end)`. The helper
//! fetches the part as a transfer of its own, over its own connections, into the same
//! file (a duplicate descriptor, writes at the part's offsets with the owner's O_DIRECT
//! alignment). Its first answer must carry the owner's size and validator, as a resumed
//! download's must. It tells the owner what of the part landed, every tick (250 ms) and
//! at its end, then that it ended. The owner adds those ranges to its landed ones, so its
//! control file names them once its fdatasync covered them. What a helper did not land
//! goes back to the owner's queue, for its own connections or another helper, with a try
//! counted when the part failed.
//!
//! Messages: a channel each way (std `mpsc`). After each message a helper writes the
//! owner's eventfd (eventfd(2)), which the owner's ring READs, so the owner's loop wakes
//! on both backends and on any kernel. `IORING_OP_MSG_RING` (Linux 5.18+) could post the
//! wake-up straight into the owner's completion queue; the eventfd serves epoll as well.
//! A helper waits on its channel between parts. During a part it checks the part's stop
//! flag on each tick.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use uring::Op;

use super::mirrors::MirrorRoute;
use super::{Loop, Outcome, Reactor, Start, Summary};
use crate::config::Config;
use crate::engine::EngineKind;
use crate::err;
use crate::error::{Error, Kind, Result};
use crate::output::Output;
use crate::output::resume::State;
use crate::report::{Note, Progress};
use crate::schedule::{Landed, Segment, align_down, align_up};
use crate::tag::Tag;

/// How long an ending owner waits for its helpers to stop their parts and report what
/// landed (each settles its writes within 10 s and checks its stop flag every tick).
const STOP_WAIT: Duration = Duration::from_secs(15);

/// How long a part out on a helper may go without landing a byte or having a request
/// served while its owner has nothing left to do, before the owner takes it back.
const RECALL: Duration = Duration::from_secs(1);

/// Connections per reactor when `connections` are spread over `threads` reactors: the
/// owner's first, each at least one; fewer reactors than `threads` when there are fewer
/// connections. `[x / t + 1, …, x / t]`.
pub(crate) fn shares(connections: usize, threads: usize) -> Vec<usize> {
    let t = threads.min(connections).max(1);
    (0..t)
        .map(|k| connections / t + usize::from(k < connections % t))
        .collect()
}

/// The helper reactors of a run (threads started on the first transfer that spreads, kept
/// for the next; joined when the run's [`Reactor`] goes).
pub(crate) struct Helpers {
    workers: Vec<Worker>,
    /// What the helpers report; lent to the transfer that owns the parts.
    inbox: Option<Receiver<Report>>,
    /// Rings after each report (the owner's ring READs it).
    bell: Arc<OwnedFd>,
    /// Lendings so far.
    lendings: u64,
}

struct Worker {
    orders: Sender<PartOrder>,
    thread: Option<JoinHandle<()>>,
}

/// A part handed to a helper.
pub(crate) struct PartOrder {
    /// The lending it belongs to ([`Remote::lending`]): a late report of an earlier
    /// transfer's part is never applied to the next one.
    lending: u64,
    /// The helper's number (1-based: reactor 0 is the owner).
    helper: usize,
    file: Arc<PartFile>,
    /// `[start, end)`, bytes: aligned starts; the end aligned or the file's end.
    range: (u64, u64),
    /// Connections the helper opens for it.
    connections: usize,
    /// Set by the owner when the transfer ends before the part.
    stop: Arc<AtomicBool>,
    /// Requests the transfer's other reactors have on the wire to its origin, posted by
    /// the owner each tick (they count toward the server's cap: [`Origin::remote`]).
    ///
    /// [`Origin::remote`]: crate::control::origin::Origin::remote
    others: Arc<AtomicUsize>,
}

/// What every part of one transfer shares: where and what to fetch.
pub(crate) struct PartFile {
    routes: Vec<MirrorRoute>,
    opts: Config,
    out: Output,
    engine: EngineKind,
    ktls: bool,
    total: u64,
    validator: Option<Vec<u8>>,
}

/// What a helper's parts counted, for the owner's summary. Connections, and those that
/// went to kTLS or the software record layer, are the most one part used on each helper
/// (a helper keeps its connections for its next part, whose summary counts them again);
/// handshakes, retries and splits are summed.
#[derive(Default)]
pub(crate) struct Counts {
    /// Per helper: connections, TLS ones, kTLS ones, software record layer ones.
    conns: Vec<[usize; 4]>,
    tls_full: usize,
    tls_resumed: usize,
    retries: u64,
    steals: u64,
}

impl Counts {
    fn count(&mut self, helper: usize, s: &Summary) {
        if self.conns.len() < helper {
            self.conns.resize(helper, [0; 4]);
        }
        let c = &mut self.conns[helper - 1];
        for (have, part) in c
            .iter_mut()
            .zip([s.connections, s.tls_conns, s.ktls_conns, s.soft_conns])
        {
            *have = (*have).max(part);
        }
        self.tls_full += s.tls_full;
        self.tls_resumed += s.tls_resumed;
        self.retries += s.retries;
        self.steals += s.steals;
    }

    /// Adds the helpers' counts to the owner's summary `s`.
    pub(crate) fn add_to(&self, s: &mut Summary) {
        let sum = |k: usize| self.conns.iter().map(|c| c[k]).sum::<usize>();
        s.connections += sum(0);
        s.tls_conns += sum(1);
        s.ktls_conns += sum(2);
        s.soft_conns += sum(3);
        s.tls_full += self.tls_full;
        s.tls_resumed += self.tls_resumed;
        s.retries += self.retries;
        s.steals += self.steals;
    }
}

/// A helper's message to the owner.
pub(crate) enum Report {
    /// These ranges of part `range` are written (each write's completion came).
    Landed {
        lending: u64,
        helper: usize,
        ranges: Vec<(u64, u64)>,
        /// The helper's requests the server is serving now.
        serving: usize,
    },
    /// The server turned one of the helper's connections away while it had `serving` of
    /// its own served (a per-client cap: the owner counts what it allows).
    Capped {
        lending: u64,
        helper: usize,
        serving: usize,
        proxy: bool,
    },
    /// Why the part is about to end: the segment whose try was counted (its failure spent
    /// the part's one try; `None`: no one segment's), and whether the file changed on the
    /// server (its size or validator is not the owner's).
    Blame {
        lending: u64,
        helper: usize,
        counted: Option<(u64, u64)>,
        changed: bool,
    },
    /// A note of the part's transfer, for the owner to say.
    Note { lending: u64, helper: usize, note: Note },
    /// The part ended: every byte landed (`None`), or why not.
    Ended {
        lending: u64,
        helper: usize,
        range: (u64, u64),
        error: Option<Error>,
        /// What the part's transfer counted (none when it could not start).
        summary: Option<Box<Summary>>,
    },
}

impl Helpers {
    /// Starts `n` helper reactors.
    ///
    /// # Errors
    /// `LocalIo` when eventfd(2) or a thread's creation fails.
    pub(crate) fn spawn(n: usize) -> Result<Helpers> {
        let bell = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC)
            .map_err(|e| err!(LocalIo, "eventfd: {e}"))?;
        let bell = Arc::new(bell);
        let (tx, inbox) = channel();
        // (Built as it goes: on a failure, dropping it joins the threads already started.)
        let mut helpers = Helpers {
            workers: Vec::with_capacity(n),
            inbox: Some(inbox),
            bell,
            lendings: 0,
        };
        for k in 1..=n {
            let (orders, rx) = channel::<PartOrder>();
            let (tx, bell) = (tx.clone(), Arc::clone(&helpers.bell));
            let thread = std::thread::Builder::new()
                .name(format!("ringdl-r{k}"))
                .spawn(move || helper(&rx, &tx, &bell))
                .map_err(|e| err!(LocalIo, "starting reactor thread {k}: {e}"))?;
            helpers.workers.push(Worker {
                orders,
                thread: Some(thread),
            });
        }
        Ok(helpers)
    }

    /// Whether a transfer has them (its [`Remote`] holds their channels).
    pub(crate) fn lent(&self) -> bool {
        self.inbox.is_none()
    }

    /// How many helpers run.
    pub(crate) fn len(&self) -> usize {
        self.workers.len()
    }

    /// The helpers lent to one transfer for its run: `None` when another has them.
    /// `shares`: connections per reactor (the owner's first), at most one per helper
    /// running and the owner; `mail`: the block of the owner's eventfd READ.
    pub(crate) fn lend(
        &mut self,
        mut shares: Vec<usize>,
        routes: Vec<MirrorRoute>,
        mail: uring::Buf,
    ) -> Option<Remote> {
        let inbox = self.inbox.take()?;
        self.lendings += 1;
        shares.truncate(self.workers.len() + 1);
        let helpers = shares.len() - 1;
        Some(Remote {
            lending: self.lendings,
            orders: self.workers[..helpers].iter().map(|w| w.orders.clone()).collect(),
            inbox,
            bell: self.bell.as_raw_fd(),
            mail: Some(mail),
            shares,
            allot: None,
            routes: Some(routes),
            file: None,
            parts: (0..helpers).map(|_| None).collect(),
            by_others: 0,
            given: 0,
            counts: Counts::default(),
        })
    }

    /// The lent inbox back, at the transfer's end.
    pub(crate) fn give_back(&mut self, remote: Remote) {
        self.inbox = Some(remote.inbox);
    }
}

impl Drop for Helpers {
    fn drop(&mut self) {
        // Closing each helper's channel ends its thread after its part.
        let threads: Vec<_> = self.workers.iter_mut().filter_map(|w| w.thread.take()).collect();
        self.workers.clear();
        for t in threads {
            let _ = t.join();
        }
    }
}

/// A helper thread: its own reactor, one part after another until its channel closes.
fn helper(orders: &Receiver<PartOrder>, tx: &Sender<Report>, bell: &Arc<OwnedFd>) {
    let mut reactor = Reactor::default();
    while let Ok(p) = orders.recv() {
        let (lending, helper, range) = (p.lending, p.helper, p.range);
        let (r, summary) = run_part(&mut reactor, p, tx, bell);
        tell(
            tx,
            bell,
            Report::Ended {
                lending,
                helper,
                range,
                error: r.err(),
                summary,
            },
        );
    }
}

/// Sends `r` to the owner and rings its eventfd.
fn tell(tx: &Sender<Report>, bell: &OwnedFd, r: Report) {
    if tx.send(r).is_ok() {
        let _ = rustix::io::write(bell.as_fd(), &1u64.to_ne_bytes());
    }
}

/// Fetches part `p` on `reactor`: a transfer whose resume state says that everything but
/// the part is on disk, so that its first answer is checked against the owner's size and
/// validator and only the part is planned.
fn run_part(
    reactor: &mut Reactor,
    p: PartOrder,
    tx: &Sender<Report>,
    bell: &Arc<OwnedFd>,
) -> (Result<()>, Option<Box<Summary>>) {
    let f = &p.file;
    let out = match f.out.part_of() {
        Ok(Some(out)) => out,
        Ok(None) => {
            return (
                Err(err!(Internal, "a part of an output that is not a regular file")),
                None,
            );
        }
        Err(e) => return (Err(e), None),
    };
    let (a, b) = p.range;
    let mut ranges = Vec::with_capacity(2);
    if a > 0 {
        ranges.push((0, a));
    }
    if b < f.total {
        ranges.push((b, f.total));
    }
    let mut opts = f.opts.clone();
    opts.connections = p.connections;
    opts.threads = 1;
    let st = Start {
        mirrors: f.routes.clone(),
        opts: Rc::new(opts),
        out: Rc::new(out),
        resume: Some(State {
            url: f.opts.url.clone(),
            total: f.total,
            validator: f.validator.clone(),
            ranges,
            target: None,
        }),
        control: None,
        engine: f.engine,
        ktls: f.ktls,
        signed: None,
        report: forward_notes(p.lending, p.helper, tx.clone(), Arc::clone(bell)),
        part: Some(PartLink {
            lending: p.lending,
            helper: p.helper,
            range: p.range,
            tx: tx.clone(),
            bell: Arc::clone(bell),
            stop: p.stop,
            others: p.others,
            told: (0, 0),
            counted: None,
        }),
    };
    match super::run(st, None, reactor) {
        (Ok(Outcome::Done(s)), _, _) => (Ok(()), Some(s)),
        (Ok(Outcome::Redirect { to, .. }), _, s) => (Err(err!(Protocol, "a part's request was redirected to {to}")), s),
        (Ok(Outcome::NotModified { .. }), _, s) => (Err(err!(Protocol, "a part's request was answered 304")), s),
        (Err(e), _, s) => (Err(e), s),
    }
}

/// A part's progress: its notes go to the owner, which says them (prefixed "reactor N:"),
/// except those about the part's own plan (its "resume" of the rest of the file).
fn forward_notes(lending: u64, helper: usize, tx: Sender<Report>, bell: Arc<OwnedFd>) -> Progress {
    Progress::forwarding(Box::new(move |note| {
        if !matches!(
            note,
            Note::Resuming { .. }
                | Note::Planned { .. }
                | Note::FixedFileOps { .. }
                | Note::SqpollCpu { .. }
                | Note::NoPreallocation { .. }
        ) {
            tell(&tx, &bell, Report::Note { lending, helper, note });
        }
    }))
}

/// A helper's side of a part, in the loop that fetches it.
pub(crate) struct PartLink {
    lending: u64,
    helper: usize,
    range: (u64, u64),
    tx: Sender<Report>,
    bell: Arc<OwnedFd>,
    stop: Arc<AtomicBool>,
    others: Arc<AtomicUsize>,
    /// Bytes of the part told as landed so far, and requests told as served.
    told: (u64, usize),
    /// The segment whose failure spent the part's try (set by the retry logic).
    pub(crate) counted: Option<(u64, u64)>,
}

impl PartLink {
    /// `[start, end)` of the file this loop fetches for its owner.
    pub(crate) fn range(&self) -> (u64, u64) {
        self.range
    }

    /// Tells the owner what of the part has landed and how many of this reactor's requests
    /// the server serves (`serving`), when either changed.
    pub(crate) fn tell_landed(&mut self, landed: &Landed, serving: usize) {
        let (a, b) = self.range;
        let ranges: Vec<(u64, u64)> = landed
            .ranges()
            .iter()
            .filter_map(|&(s, e)| {
                let (s, e) = (s.max(a), e.min(b));
                (s < e).then_some((s, e))
            })
            .collect();
        let bytes: u64 = ranges.iter().map(|r| r.1 - r.0).sum();
        if bytes > self.told.0 || serving != self.told.1 {
            self.told = (bytes, serving);
            tell(
                &self.tx,
                &self.bell,
                Report::Landed {
                    lending: self.lending,
                    helper: self.helper,
                    ranges,
                    serving,
                },
            );
        }
    }

    /// At the part's end: tells the owner why it failed (see [`Report::Blame`]), when it did.
    pub(crate) fn tell_blame(&mut self, changed: bool) {
        if self.counted.is_some() || changed {
            tell(
                &self.tx,
                &self.bell,
                Report::Blame {
                    lending: self.lending,
                    helper: self.helper,
                    counted: self.counted,
                    changed,
                },
            );
        }
    }

    /// Tells the owner that the server turned one of this part's connections away while
    /// `serving` of its others were served (`proxy`: a proxy refused a tunnel).
    pub(crate) fn tell_capped(&mut self, serving: usize, proxy: bool) {
        tell(
            &self.tx,
            &self.bell,
            Report::Capped {
                lending: self.lending,
                helper: self.helper,
                serving,
                proxy,
            },
        );
    }

    /// Whether the requests this part's reactor has served changed since last told.
    pub(crate) fn serving_changed(&self, serving: usize) -> bool {
        serving != self.told.1
    }

    /// Requests the transfer's other reactors have on the wire, as the owner last posted.
    pub(crate) fn others(&self) -> usize {
        self.others.load(Ordering::Acquire)
    }

    /// The owner ended the transfer: the part stops.
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}

/// A part out on a helper, as its owner sees it.
struct Out {
    range: (u64, u64),
    tries: u32,
    stop: Arc<AtomicBool>,
    others: Arc<AtomicUsize>,
    /// Bytes of it landed so far.
    landed: u64,
    /// Its requests the server serves, as last told.
    serving: usize,
    /// When it last moved: bytes landed, or a request served.
    moved: Instant,
    /// Why it failed, as its helper said ([`Report::Blame`]).
    counted: Option<(u64, u64)>,
    changed: bool,
}

/// The owner's side: the helpers lent to one transfer.
pub(crate) struct Remote {
    /// This lending's number: reports of others are dropped.
    lending: u64,
    orders: Vec<Sender<PartOrder>>,
    inbox: Receiver<Report>,
    bell: RawFd,
    /// The eventfd READ's block, until the first READ takes it (each completion gives it
    /// back for the next).
    mail: Option<uring::Buf>,
    /// Connections per reactor (index 0: the owner's).
    shares: Vec<usize>,
    /// Per helper: the connections it may open for this transfer, set at the first
    /// hand-out from what the file is worth over every reactor (`--min-split-size`: a
    /// run opens no connection it does not use) less what the owner opened.
    allot: Option<Vec<usize>>,
    /// The transfer's routes, until its first answer made the part file.
    routes: Option<Vec<MirrorRoute>>,
    file: Option<Arc<PartFile>>,
    /// Per helper: the part it has.
    parts: Vec<Option<Out>>,
    /// Bytes the helpers landed, and parts handed out (for the summary).
    pub(crate) by_others: u64,
    pub(crate) given: usize,
    /// What the helpers' parts counted.
    pub(crate) counts: Counts,
}

impl Remote {
    /// A part is out on a helper.
    pub(crate) fn busy(&self) -> bool {
        self.parts.iter().any(Option::is_some)
    }

    /// Reactors in all (the owner's and the helpers').
    pub(crate) fn reactors(&self) -> usize {
        self.shares.len()
    }

    /// The owner's connections.
    pub(crate) fn own(&self) -> usize {
        self.shares[0]
    }
}

impl Loop<'_> {
    /// The first READ of the eventfd the helpers ring (a transfer that has them).
    pub(crate) fn arm_mail(&mut self, buf: Option<uring::Buf>) -> Result<()> {
        let Some(r) = &self.remote else {
            return Ok(());
        };
        let fd = r.bell;
        let Some(buf) = buf.or_else(|| self.remote.as_mut().and_then(|r| r.mail.take())) else {
            return Err(err!(Internal, "no block for the reactors' eventfd"));
        };
        self.push(
            Op::Read {
                fd,
                buf,
                range: 0..8,
                offset: u64::MAX,
            },
            Tag::Mail.encode(),
        )
    }

    /// Gives each free helper a part of the queue, once the first answer planned it (a
    /// regular file served in ranges, no failure pending).
    pub(crate) fn hand_out(&mut self) -> Result<()> {
        let tr = &self.sh.tr;
        if self.remote.is_none()
            || !tr.plan.is_planned()
            || !tr.ranges
            || !tr.file
            || tr.plain_get
            || self.sh.fatal.is_some()
        {
            return Ok(());
        }
        let now = tr.started.elapsed();
        let remaining = tr.total.unwrap_or(0).saturating_sub(tr.landed.bytes());
        let (min_split, own) = (self.sh.opts.min_split_size, tr.wanted);
        let Some(r) = self.remote.as_mut() else {
            return Ok(());
        };
        let allot = r.allot.get_or_insert_with(|| {
            let all = crate::schedule::connections_for(remaining, min_split, r.shares.iter().sum(), 1);
            let mut left = all.saturating_sub(own);
            r.shares[1..]
                .iter()
                .map(|&s| {
                    let a = s.min(left);
                    left -= a;
                    a
                })
                .collect()
        });
        // A part that has not moved for RECALL while this reactor has nothing to do (its
        // helper's connections parked under a cap or a Retry-After, or stalled) comes
        // back: the helper stops it, its rest goes back to the queue with no try counted,
        // and that helper takes no more of this transfer. (Work stealing between
        // reactors the other way: this one takes a part back.)
        if tr.plan.is_drained() && self.conns.iter().all(|c| c.rx.job.is_none()) {
            for (h, out) in r.parts.iter().enumerate() {
                if let Some(out) = out.as_ref().filter(|o| o.serving == 0 && o.moved.elapsed() >= RECALL) {
                    out.stop.store(true, Ordering::Release);
                    allot[h] = 0;
                }
            }
        }
        // (While the origin is held — a Retry-After, a 503 or 429 — no part goes either.)
        if tr.plan.held(now, 0) {
            return Ok(());
        }
        let free: Vec<(usize, usize)> = (0..r.parts.len())
            .filter(|&h| r.parts[h].is_none() && allot[h] > 0)
            .map(|h| (h, allot[h]))
            .collect();
        for (h, share) in free {
            // As many bytes as the helper's connections are worth (`--min-split-size`
            // each); with the queue empty, the second half of the largest running body
            // (work stealing between reactors).
            let queued: u64 = self.sh.tr.plan.segments().map(|s| s.end - s.start).sum();
            let all: usize = self.remote.as_ref().map_or(1, |r| r.shares.iter().sum());
            let want = (share as u64 * self.sh.opts.min_split_size).max(queued * share as u64 / (2 * all as u64));
            let taken = match self.sh.tr.plan.take_back(want, now) {
                Some(t) => Some(t),
                None if self.sh.tr.plan.is_drained() => self
                    .steal_victim(None)
                    .and_then(|(v, at)| self.split_off(v, at))
                    .map(|s| (s.start, s.end, s.tries)),
                None => None,
            };
            let Some((a, b, tries)) = taken else {
                break;
            };
            if !self.send_part(h, share, (a, b), tries)? {
                // The helper's thread is gone (or the output cannot be shared): its share
                // stays with the owner.
                self.sh.tr.plan.requeue(seg(a, b, tries), false);
            }
        }
        Ok(())
    }

    /// Sends part `range` (its segments tried `tries` times) to helper `h` (0-based) with
    /// `share` connections; false when it cannot go.
    fn send_part(&mut self, h: usize, share: usize, range: (u64, u64), tries: u32) -> Result<bool> {
        let own = self.serving(0);
        let tr = &self.sh.tr;
        let (Some(total), Some(r)) = (tr.total, self.remote.as_mut()) else {
            return Ok(false);
        };
        if r.file.is_none() {
            let Some(part_out) = tr.out.part_of()? else {
                return Ok(false);
            };
            let mut o = (*self.sh.opts).clone();
            o.checksum = None;
            o.condition = None;
            o.etag_save = None;
            o.json = None;
            o.limit_rate = None;
            // A part ends at its first counted failure: its owner counts the tries and
            // gives the rest to whichever reactor is free.
            o.max_tries = 1;
            r.file = Some(Arc::new(PartFile {
                routes: r.routes.take().unwrap_or_default(),
                opts: o,
                out: part_out,
                engine: self.fin.engine.0,
                ktls: self.fin.engine.1,
                total,
                validator: tr.validator.clone(),
            }));
        }
        let stop = Arc::new(AtomicBool::new(false));
        // (What the others have on the wire now; the owner posts it again each tick.)
        let helpers: usize = r.parts.iter().flatten().map(|o| o.serving).sum();
        let others = Arc::new(AtomicUsize::new(own + helpers));
        let order = PartOrder {
            lending: r.lending,
            helper: h + 1,
            file: Arc::clone(r.file.as_ref().expect("made above")),
            range,
            connections: share,
            stop: Arc::clone(&stop),
            others: Arc::clone(&others),
        };
        if r.orders[h].send(order).is_err() {
            return Ok(false);
        }
        r.given += 1;
        r.parts[h] = Some(Out {
            range,
            tries,
            stop,
            others,
            landed: 0,
            serving: 0,
            moved: Instant::now(),
            counted: None,
            changed: false,
        });
        Ok(true)
    }

    /// The eventfd rang: what the helpers reported is applied, and the READ goes again.
    pub(crate) fn on_mail(&mut self, buf: Option<uring::Buf>) -> Result<()> {
        while let Some(m) = self.remote.as_ref().and_then(|r| r.inbox.try_recv().ok()) {
            self.apply(m);
        }
        self.share_serving();
        self.arm_mail(buf)
    }

    /// Each turn of a transfer spread over reactors: the requests served are shared out at
    /// once when they change (a cap's refusal is judged by them); what landed goes each
    /// tick ([`Loop::on_tick`]).
    pub(crate) fn sync_reactors(&mut self) {
        if self.remote.is_none() && self.part.is_none() {
            return;
        }
        let serving = self.serving(0);
        if let Some(p) = self.part.as_mut().filter(|p| p.serving_changed(serving)) {
            p.tell_landed(&self.sh.tr.landed, serving);
        }
        self.share_serving();
    }

    /// The requests each reactor of the transfer has on the wire, shared out (each tick
    /// and after reports): this reactor counts its helpers' toward the server's cap, and
    /// each helper is posted the owner's and the other helpers'. A helper counts the
    /// owner's in its own [`crate::control::origin::Origin::remote`] ([`Loop::on_tick`]).
    pub(crate) fn share_serving(&mut self) {
        if let Some(p) = &self.part {
            let others = p.others();
            for o in &mut self.sh.origins {
                o.remote = others;
            }
            return;
        }
        let own = self.serving(0);
        let Some(r) = &self.remote else {
            return;
        };
        let helpers: usize = r.parts.iter().flatten().map(|o| o.serving).sum();
        for out in r.parts.iter().flatten() {
            out.others.store(own + helpers - out.serving, Ordering::Release);
        }
        for o in &mut self.sh.origins {
            o.remote = helpers;
        }
    }

    /// One helper's report.
    fn apply(&mut self, m: Report) {
        let Some(r) = self.remote.as_mut() else {
            return;
        };
        let lending = match &m {
            Report::Landed { lending, .. }
            | Report::Ended { lending, .. }
            | Report::Note { lending, .. }
            | Report::Capped { lending, .. }
            | Report::Blame { lending, .. } => *lending,
        };
        if lending != r.lending {
            return;
        }
        match m {
            Report::Note { helper, note, .. } => self.sh.report.note(Note::OnReactor {
                reactor: helper,
                note: Box::new(note),
            }),
            Report::Blame {
                helper,
                counted,
                changed,
                ..
            } => {
                if let Some(out) = r.parts.get_mut(helper - 1).and_then(Option::as_mut) {
                    out.counted = counted;
                    out.changed = changed;
                }
            }
            Report::Capped {
                helper, serving, proxy, ..
            } => {
                // What the server was serving when it turned the helper away: the owner's
                // requests, the other helpers' (as they last said) and the helper's own.
                let others: usize = r
                    .parts
                    .iter()
                    .enumerate()
                    .filter(|&(h, _)| h + 1 != helper)
                    .filter_map(|(_, o)| o.as_ref().map(|o| o.serving))
                    .sum();
                let own = self.serving(0);
                let using = (own + others + serving).max(1);
                self.sh.tr.capped_at = Some(self.sh.tr.capped_at.unwrap_or(0).max(using));
                // (As for one reactor: a refusal while a single other request was served
                // may be a passing 503, not a cap of one.)
                if proxy || serving > 0 || own + others >= 2 {
                    self.learn_cap(0, using);
                }
            }
            Report::Landed {
                helper,
                ranges,
                serving,
                ..
            } => {
                let Some(out) = r.parts.get_mut(helper - 1).and_then(Option::as_mut) else {
                    return;
                };
                out.serving = serving;
                let bytes: u64 = ranges.iter().map(|x| x.1 - x.0).sum();
                let more = bytes.saturating_sub(out.landed);
                if more > 0 || serving > 0 {
                    out.moved = Instant::now();
                }
                out.landed = out.landed.max(bytes);
                r.by_others += more;
                self.sh.tr.received += more;
                for (s, e) in ranges {
                    self.sh.tr.landed.add(s, e);
                }
            }
            Report::Ended {
                helper,
                range,
                error,
                summary,
                ..
            } => {
                if let Some(s) = &summary {
                    r.counts.count(helper, s);
                }
                let Some(out) = r.parts.get_mut(helper - 1).and_then(Option::take) else {
                    return;
                };
                debug_assert_eq!(out.range, range);
                // What of the part is not on disk goes back to the queue (edges widened
                // to the alignment: fetching a few bytes again beats an unaligned write).
                let align = self.sh.tr.align;
                let total = self.sh.tr.total.unwrap_or(range.1);
                let mut gaps = Vec::new();
                let mut at = range.0;
                for &(s, e) in self.sh.tr.landed.ranges() {
                    if e <= at || s >= range.1 {
                        continue;
                    }
                    if s > at {
                        gaps.push((at, s));
                    }
                    at = at.max(e);
                }
                if at < range.1 {
                    gaps.push((at, range.1));
                }
                // A helper gives a part up at its first counted failure: the segment that
                // failed spends a try (the whole rest when no one segment's did), the rest
                // of the part goes back with the tries it had. An Interrupted part was
                // stopped by this owner (ending, or taking it back).
                let failed = error.as_ref().filter(|e| e.kind != Kind::Interrupted);
                let mut not_before = self.sh.tr.started.elapsed();
                let mut counted = None;
                if let Some(e) = failed {
                    self.sh.report.note(Note::PartFailed {
                        reactor: helper,
                        why: e.msg.clone(),
                    });
                    if out.changed {
                        // Its bytes are not of the owner's file, and neither is the server's.
                        self.sh.tr.changed = true;
                        self.sh.fatal.get_or_insert(Error {
                            kind: Kind::Protocol,
                            msg: format!("reactor {helper}: {}", e.msg),
                        });
                    } else if matches!(e.kind, Kind::LocalIo | Kind::Internal) {
                        // This reactor could not do it (its ring, a descriptor, its
                        // memory): it takes no more of this transfer, and no try is spent.
                        if let Some(a) = r.allot.as_mut().and_then(|a| a.get_mut(helper - 1)) {
                            *a = 0;
                        }
                    } else {
                        counted = Some(out.counted.unwrap_or(range));
                        let tries = out.tries + 1;
                        if tries >= self.sh.opts.max_tries && !gaps.is_empty() {
                            let msg = format!(
                                "reactor {helper}: bytes {}-{}: {} (gave up after {})",
                                range.0,
                                range.1 - 1,
                                e.msg,
                                crate::schedule::retry::n_tries(tries)
                            );
                            self.sh.fatal.get_or_insert(Error { kind: e.kind, msg });
                        }
                        let jitter = f64::from(self.started.elapsed().subsec_nanos() % 1000) / 1000.0;
                        not_before += crate::schedule::retry::backoff(self.sh.opts.retry_wait_s, tries, jitter);
                    }
                }
                let now = self.sh.tr.started.elapsed();
                for &(s, e) in gaps.iter().rev() {
                    let (s, e) = (align_down(s, align), align_up(e, align).min(total));
                    // Cut at the counted segment's edges (aligned: segment bounds are).
                    let mut cuts = vec![s, e];
                    if let Some((cs, ce)) = counted {
                        cuts.extend([cs, ce].into_iter().filter(|&x| x > s && x < e));
                    }
                    cuts.sort_unstable();
                    for w in cuts.windows(2).rev() {
                        let hit = counted.is_some_and(|(cs, ce)| w[0] < ce && w[1] > cs);
                        let tries = out.tries + u32::from(hit);
                        let wait = if hit { not_before } else { now };
                        self.sh.tr.plan.requeue_after(seg(w[0], w[1], tries), false, wait);
                    }
                }
            }
        }
    }

    /// Stops the parts out on helpers and waits (at most [`STOP_WAIT`]) until each said
    /// what it landed and that it ended: the control file and the `.part` then hold every
    /// byte a helper wrote. A helper that does not answer is said in a note.
    pub(crate) fn stop_parts(&mut self) {
        let Some(r) = self.remote.as_ref() else {
            return;
        };
        for out in r.parts.iter().flatten() {
            out.stop.store(true, Ordering::Release);
        }
        let deadline = Instant::now() + STOP_WAIT;
        while self.remote.as_ref().is_some_and(Remote::busy) {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = match self.remote.as_ref().map(|r| r.inbox.recv_timeout(left)) {
                Some(Ok(m)) => m,
                Some(Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected)) | None => {
                    self.sh.report.note(Note::WritesPending);
                    return;
                }
            };
            self.apply(m);
        }
    }
}

fn seg(start: u64, end: u64, tries: u32) -> Segment {
    Segment {
        start,
        end,
        tries,
        grace: false,
    }
}

#[cfg(test)]
mod tests {
    use super::shares;

    #[test]
    fn connections_are_shared_out_owner_first_and_never_zero() {
        assert_eq!(shares(4, 2), [2, 2]);
        assert_eq!(shares(5, 2), [3, 2]);
        assert_eq!(shares(16, 4), [4, 4, 4, 4]);
        assert_eq!(shares(1, 4), [1], "one connection: one reactor");
        assert_eq!(shares(3, 8), [1, 1, 1]);
        assert_eq!(shares(4, 1), [4]);
    }
}
