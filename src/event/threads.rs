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
//! A helper waits on its channel between parts. During a part it reads the part's stop
//! flag on each tick, and at once when the owner writes the helper's own eventfd after
//! setting it ([`nudge`]).

use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use super::mirrors::MirrorRoute;
use super::{Outcome, Reactor, Start, Summary};
use crate::config::Config;
use crate::control::origin::OriginKey;
use crate::engine::EngineKind;
use crate::err;
use crate::error::{Error, Result};
use crate::output::Output;
use crate::output::resume::State;
use crate::report::{Note, Progress};
use crate::schedule::Landed;

mod nudge;
mod owner;
mod whole;
pub(crate) use owner::Remote;
pub(crate) use whole::{Posted, WholeLink, WholeOrder, WholeReport};

/// `--pin`: the calling thread on the `k`-th of the CPUs the process could use when
/// ringdl first pinned (modulo their count), by sched_setaffinity(2). Returns the CPU, or
/// `None` when the kernel refused (the thread then runs where the scheduler puts it).
pub(crate) fn pin(k: usize) -> Option<usize> {
    use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};
    static ALLOWED: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    // (Read once, before any thread is pinned: a thread inherits its creator's mask.)
    let cpus = ALLOWED.get_or_init(|| {
        sched_getaffinity(None).map_or_else(
            |_| Vec::new(),
            |set| (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect(),
        )
    });
    let cpu = *cpus.get(k % cpus.len().max(1))?;
    let mut set = CpuSet::new();
    set.set(cpu);
    sched_setaffinity(None, &set).ok().map(|()| cpu)
}

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
    /// Lendings and placements so far (their numbers: a late report of one is never
    /// taken for another's).
    lendings: u64,
}

struct Worker {
    orders: Sender<Order>,
    /// Its eventfd, written after a stop is posted to its transfer ([`nudge`]).
    nudge: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

/// What a helper is given to fetch.
pub(crate) enum Order {
    /// A part of a transfer its owner runs (one file spread over reactors).
    Part(PartOrder),
    /// A whole transfer (a list's file placed on this reactor, `-j` ≥ 2).
    Whole(Box<WholeOrder>),
    /// Close the idle connections kept to origin `key` (the run's caps need the room for
    /// a file that cannot start), and say what stays idle ([`Report::Idle`]).
    Forget { key: OriginKey },
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
    /// Ranges of `range` that are not the part's (landed before, or the owner's), sorted:
    /// a resume's scattered gaps go out as one part.
    holes: Vec<(u64, u64)>,
    /// Connections the helper opens for it.
    connections: usize,
    /// Set by the owner when the transfer ends before the part.
    stop: Arc<AtomicBool>,
    /// Set by the owner when a reactor of the transfer is idle: the helper gives back
    /// what it can of the part ([`Report::Gave`]).
    give: Arc<AtomicBool>,
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

/// What a helper's parts counted, for the owner's summary. Connections are the most one
/// part used on each helper (a helper keeps its connections for its next part, whose
/// summary counts them again). Those that went to TLS, kTLS or the software record layer
/// count reconnects too: each part's hand-offs are summed, and the connections a part
/// found kept open ([`Summary::kept`]) count only in the helper's first part of the file
/// (later, they are the ones its parts before opened; a connection a placed file left idle
/// and a later part took is then not counted). Handshakes, KeyUpdates taken, retries and
/// splits are summed.
#[derive(Default)]
pub(crate) struct Counts {
    /// Per helper: connections, TLS ones, kTLS ones, software record layer ones.
    conns: Vec<[usize; 4]>,
    tls_full: usize,
    tls_resumed: usize,
    /// KeyUpdates taken under kTLS, and by the software record layer.
    ktls_rekeys: usize,
    soft_rekeys: usize,
    retries: u64,
    resent: u64,
    steals: u64,
}

impl Counts {
    fn count(&mut self, helper: usize, s: &Summary) {
        if self.conns.len() < helper {
            self.conns.resize(helper, [0; 4]);
        }
        let c = &mut self.conns[helper - 1];
        let first = c[0] == 0;
        c[0] = c[0].max(s.connections);
        for ((have, part), kept) in c[1..]
            .iter_mut()
            .zip([s.tls_conns, s.ktls_conns, s.soft_conns])
            .zip(s.kept)
        {
            *have += if first { part } else { part.saturating_sub(kept) };
        }
        self.tls_full += s.tls_full;
        self.tls_resumed += s.tls_resumed;
        self.ktls_rekeys += s.ktls_rekeys;
        self.soft_rekeys += s.soft_rekeys;
        self.retries += s.retries;
        self.resent += s.resent;
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
        s.ktls_rekeys += self.ktls_rekeys;
        s.soft_rekeys += self.soft_rekeys;
        s.retries += self.retries;
        s.resent += self.resent;
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
        /// The wait the helper judged for that failure ([`crate::schedule::retry::wait`]:
        /// its backoff, at least the server's Retry-After), and whether it holds the
        /// origin (a 503 or 429), for the owner to wait out as one reactor does.
        wait: std::time::Duration,
        hold: bool,
    },
    /// Asked to give back ([`PartLink::asked`]): `range` of the part, tried `tries` times,
    /// is no longer the helper's (`None`: nothing was worth giving). The helper never
    /// writes into it afterwards.
    Gave {
        lending: u64,
        helper: usize,
        range: Option<(u64, u64)>,
        tries: u32,
    },
    /// A note of the part's transfer, for the owner to say.
    Note { lending: u64, helper: usize, note: Note },
    /// A whole transfer placed on the helper ([`Order::Whole`]; `lending` is its
    /// placement's number): its progress, notes and end.
    Whole { lending: u64, what: WholeReport },
    /// The idle connections the helper keeps, per origin key, after an
    /// [`Order::Forget`].
    Idle {
        helper: usize,
        idle: Vec<(OriginKey, usize)>,
    },
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
    pub(crate) fn spawn(n: usize, pin_them: bool) -> Result<Helpers> {
        let bell = Arc::new(nudge::eventfd()?);
        let (tx, inbox) = channel();
        // (Built as it goes: on a failure, dropping it joins the threads already started.)
        let mut helpers = Helpers {
            workers: Vec::with_capacity(n),
            inbox: Some(inbox),
            bell,
            lendings: 0,
        };
        for k in 1..=n {
            let (orders, rx) = channel::<Order>();
            let (tx, bell) = (tx.clone(), Arc::clone(&helpers.bell));
            // (The thread holds its eventfd too: it outlives the Worker, dropped before
            // the join.)
            let nudge = Arc::new(nudge::eventfd()?);
            let own = Arc::clone(&nudge);
            let thread = std::thread::Builder::new()
                .name(format!("ringdl-r{k}"))
                .spawn(move || {
                    if pin_them {
                        pin(k);
                    }
                    helper(k, &rx, &tx, (&bell, &own));
                })
                .map_err(|e| err!(LocalIo, "starting reactor thread {k}: {e}"))?;
            helpers.workers.push(Worker {
                orders,
                nudge,
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

    /// Helper `helper`'s (1-based) eventfd, which wakes its ring after a stop was posted
    /// to its transfer.
    pub(crate) fn nudge(&self, helper: usize) -> Option<Arc<OwnedFd>> {
        let w = self.workers.get(helper.checked_sub(1)?)?;
        Some(Arc::clone(&w.nudge))
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

/// A helper thread: its own reactor, one part after another, or the whole transfers placed
/// on it (several at once), until its channel closes; `bell` rings the run's reactor, `nudge` is this helper's eventfd.
fn helper(k: usize, orders: &Receiver<Order>, tx: &Sender<Report>, (bell, nudge): (&Arc<OwnedFd>, &Arc<OwnedFd>)) {
    let nudge = std::os::fd::AsRawFd::as_raw_fd(&**nudge);
    let mut reactor = Reactor::default();
    let mut held = None;
    while let Some(order) = held.take().or_else(|| orders.recv().ok()) {
        let p = match order {
            Order::Part(p) => p,
            Order::Whole(w) => {
                held = whole::run_placed(&mut reactor, w, orders, (tx, bell, nudge));
                continue;
            }
            Order::Forget { key } => {
                reactor.forget_idle(&key);
                let idle = reactor.idle_counts();
                tell(tx, bell, Report::Idle { helper: k, idle });
                continue;
            }
        };
        let (lending, helper, range) = (p.lending, p.helper, p.range);
        let (r, summary) = run_part(&mut reactor, p, tx, (bell, nudge));
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
        nudge::nudge(bell);
    }
}

/// Fetches part `p` on `reactor`: a transfer whose resume state says that everything but
/// the part is on disk, so that its first answer is checked against the owner's size and
/// validator and only the part is planned; `nudge` is the helper's eventfd.
fn run_part(
    reactor: &mut Reactor,
    p: PartOrder,
    tx: &Sender<Report>,
    (bell, nudge): (&Arc<OwnedFd>, std::os::fd::RawFd),
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
    let mut ranges = Vec::with_capacity(p.holes.len() + 2);
    if a > 0 {
        ranges.push((0, a));
    }
    ranges.extend(p.holes.iter().copied());
    if b < f.total {
        ranges.push((b, f.total));
    }
    let mut opts = f.opts.clone();
    opts.connections = p.connections;
    // (Its share of --max-connections-per-host too: the reactors' connections together
    // stay under it.)
    opts.max_per_host = opts.max_per_host.min(p.connections);
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
            not_ours: Landed::from_ranges(&p.holes),
            tx: tx.clone(),
            bell: Arc::clone(bell),
            stop: p.stop,
            nudge,
            give: p.give,
            others: p.others,
            told: (0, 0),
            counted: None,
            server_wait: (std::time::Duration::ZERO, false),
        }),
        whole: None,
    };
    match super::run(st, None, reactor) {
        (Ok(Outcome::Done(s)), _, _) => (Ok(()), Some(s)),
        (Ok(Outcome::Redirect { to, .. }), _, s) => (Err(err!(Protocol, "a part's request was redirected to {to}")), s),
        (Ok(Outcome::NotModified { .. }), _, s) => (Err(err!(Protocol, "a part's request was answered 304")), s),
        (Ok(Outcome::Recalled), _, s) => (Err(err!(Internal, "a part was stopped to start again")), s),
        (Err(e), _, s) => (Err(e), s),
    }
}

impl super::Loop<'_> {
    /// A helper's part whose owner asked for some of it back (a reactor of the transfer is
    /// idle): the back half of what its queue holds, or with the queue empty the second
    /// half of its largest running body worth a second request (work stealing between
    /// reactors, asked by message). The range leaves this loop's plan and counts as landed
    /// here (its transfer ends without it); the owner queues it ([`Report::Gave`]).
    pub(crate) fn give_to_owner(&mut self) {
        if !self.part.as_ref().is_some_and(PartLink::asked) {
            return;
        }
        let now = self.sh.tr.started.elapsed();
        let queued: u64 = self.sh.tr.plan.segments().map(|s| s.end - s.start).sum();
        let taken = if self.sh.fatal.is_some() || !self.sh.tr.plan.is_planned() {
            None
        } else if queued > 0 {
            // (Contiguous: the owner queues what it is given as one segment.)
            self.sh
                .tr
                .plan
                .take_back(queued.div_ceil(2), now, false)
                .map(|t| (t.start, t.end, t.tries))
        } else {
            self.steal_victim(None)
                .and_then(|(v, at)| self.split_off(v, at))
                .map(|s| (s.start, s.end, s.tries))
        };
        if let Some((first, end, _)) = taken {
            self.sh.tr.landed.add(first, end);
            self.sh.report.note(Note::GaveBack { first, last: end - 1 });
        }
        if let Some(p) = self.part.as_mut() {
            p.tell_gave(taken.map(|t| (t.0, t.1)), taken.map_or(0, |t| t.2));
        }
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
    /// Ranges of `range` that are not the part's: its holes ([`PartOrder::holes`]) and
    /// what it gave back to the owner ([`Report::Gave`]). In this loop's landed ranges
    /// (its resume state, or added when given: its transfer ends without them), never
    /// told as landed.
    not_ours: Landed,
    tx: Sender<Report>,
    bell: Arc<OwnedFd>,
    stop: Arc<AtomicBool>,
    /// The helper's eventfd, which the owner writes after setting `stop`.
    nudge: std::os::fd::RawFd,
    give: Arc<AtomicBool>,
    others: Arc<AtomicUsize>,
    /// Bytes of the part told as landed so far, and requests told as served.
    told: (u64, usize),
    /// The segment whose failure spent the part's try (set by the retry logic).
    pub(crate) counted: Option<(u64, u64)>,
    /// The wait judged for that failure, and whether it holds the origin (set with it).
    pub(crate) server_wait: (std::time::Duration, bool),
}

impl PartLink {
    /// `[start, end)` of the file this loop fetches for its owner.
    pub(crate) fn range(&self) -> (u64, u64) {
        self.range
    }

    /// Bytes of the part: its range less its holes (and what it gave back).
    pub(crate) fn bytes(&self) -> u64 {
        self.range.1 - self.range.0 - self.not_ours.bytes()
    }

    /// Tells the owner what of the part has landed and how many of this reactor's requests
    /// the server serves (`serving`), when either changed.
    pub(crate) fn tell_landed(&mut self, landed: &Landed, serving: usize) {
        // (One sweep: each landed range within the part, less what is not the part's.)
        let (a, b) = self.range;
        let ranges: Vec<(u64, u64)> = landed
            .ranges()
            .iter()
            .filter(|&&(s, e)| s < b && e > a)
            .flat_map(|&(s, e)| self.not_ours.gaps_in(s.max(a), e.min(b)))
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
                    wait: self.server_wait.0,
                    hold: self.server_wait.1,
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

    /// Whether the owner asked for some of the part back (each ask answered once, by
    /// [`PartLink::tell_gave`]).
    pub(crate) fn asked(&self) -> bool {
        self.give.swap(false, Ordering::AcqRel)
    }

    /// Tells the owner that `range` (tried `tries` times) is no longer this part's, or that
    /// nothing was worth giving (`None`). The range must already be out of this loop's
    /// plan and in its landed ranges (its transfer ends without it).
    pub(crate) fn tell_gave(&mut self, range: Option<(u64, u64)>, tries: u32) {
        if let Some((s, e)) = range {
            self.not_ours.add(s, e);
        }
        tell(
            &self.tx,
            &self.bell,
            Report::Gave {
                lending: self.lending,
                helper: self.helper,
                range,
                tries,
            },
        );
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

#[cfg(test)]
mod tests {
    use super::{Counts, shares};
    use crate::event::Summary;
    use crate::event::summary::tests::summary;

    /// A part's summary: `tls` hand-offs and first uses, `kept` of them kept from before.
    fn part(conns: usize, tls: usize, kept: usize) -> Summary {
        let mut s = summary("TLSv1.3 TLS13_AES_256_GCM_SHA384", 0, tls);
        s.connections = conns;
        s.soft_conns = tls;
        s.kept = [kept, 0, kept];
        s
    }

    /// `soft_tls::closes_and_small_records` at `--threads 2` once read "2 of 2 TLS
    /// connections" where the server had served 3: a helper's second part reconnected,
    /// and the most of one part was taken for the helper's count.
    #[test]
    fn a_helpers_reconnects_count_and_its_kept_connections_count_once() {
        let mut c = Counts::default();
        c.count(1, &part(2, 2, 0));
        // One connection kept from the part before; the other was closed by the server
        // and this part opened it twice.
        c.count(1, &part(2, 3, 1));
        // Helper 2's first part found a connection kept from another file: it counts.
        c.count(2, &part(1, 1, 1));
        let mut s = summary("TLSv1.3 TLS13_AES_256_GCM_SHA384", 0, 1);
        s.soft_conns = 1;
        c.add_to(&mut s);
        assert_eq!(
            (s.connections, s.tls_conns, s.soft_conns),
            (1 + 2 + 1, 1 + 4 + 1, 1 + 4 + 1)
        );
    }

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
