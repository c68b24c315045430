//! Messages between reactors (`--threads N`): every order, report, shared flag and
//! wake-up that crosses a thread, and the channels and eventfds that carry them. Each
//! reactor (its own thread, ring, pools and connections) shares nothing else with the
//! others.
//!
//! Who is who: the run's reactor (thread 0) starts the *helpers* ([`Helpers`], the
//! threads themselves are `crate::reactors`'); a transfer that spreads is their *owner*
//! while it runs: the helpers are lent to it ([`Helpers::lend`] gives its
//! [`crate::event::owner::Remote`] their channels), and come back at its end.
//!
//! The protocol:
//! - **Orders, owner/run → helper** ([`Order`], one `mpsc` channel per helper):
//!   [`Order::Part`], a run of queued segments `[start, end)` of the owner's transfer
//!   ([`PartOrder`]: the helper fetches it as a transfer of its own, over its own
//!   connections, into the same file; its first answer must carry the owner's size and
//!   validator); [`Order::Whole`], a list's whole file placed on the helper (`-j` ≥ 2,
//!   [`WholeOrder`]); [`Order::Forget`], close the idle connections kept to an origin.
//!   A helper waits on its channel between parts; placed files take new orders between
//!   two waits of their ring.
//! - **Reports, helper → owner/run** ([`Report`], one `mpsc` channel all helpers share):
//!   what of a part landed (on a tick, 250 ms, when that grew or its requests on the
//!   wire changed, and at its end), a cap met, why a part
//!   failed, what it gave back, its notes, that it ended; a placed file's progress,
//!   notes and end ([`WholeReport`]); the idle connections kept after a forget. After
//!   each report the helper writes the *bell* (an eventfd, eventfd(2)), which the owner's
//!   ring READs ([`crate::tag::Tag::Mail`]): its loop wakes on both backends and on any
//!   kernel. (`IORING_OP_MSG_RING`, Linux 5.18+, could post into the owner's completion
//!   queue; the eventfd serves epoll as well.)
//! - **Shared atomics, owner/run → helper**, written by one side, read by the other: a
//!   part's `stop` (the owner ended the transfer, or takes the part back), `give` (a
//!   reactor of the transfer is idle: give back what you can, answered by
//!   [`Report::Gave`]) and `others` (requests the transfer's other reactors have on the
//!   wire, posted each tick: they count toward the server's cap); a placed file's
//!   [`PostedToPlaced`] (`stop`, `others`, `wake`, `more`).
//! - **The nudge, owner/run → helper**: each helper has an eventfd of its own
//!   ([`nudge`]); the side that posts a stop, or places a file, writes it, and a READ of
//!   it on the helper's ring ([`crate::tag::Tag::Nudge`]) completes at once, so the
//!   helper reads its stop flags then rather than on its next tick. Files placed on a
//!   helper share its ring: its reactor's own lane holds the one READ. The other posted
//!   values (a give-back, the others' requests, slots) are read on the helper's tick and
//!   after its waits. A nudge that comes while the helper is between transfers stays in
//!   the eventfd's count: the next READ completes at once, finds no stop and READs again.
//! - **Numbers**: each lending and placement has a number ([`Helpers::next_placement`]);
//!   a late report of an earlier one is never applied to the next.
//!
//! The loop's side of these messages is [`PartLink`] (a part, on the helper),
//! [`WholeLink`] (a placed file, on the helper) and the owner's `Remote`.

mod part;
mod whole;

pub(crate) use part::{PartFile, PartFlags, PartLink, PartOrder};
pub(crate) use whole::{PlacedShape, PostedToPlaced, WholeLink, WholeOrder, WholeReport};

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;

use crate::control::origin::OriginKey;
use crate::err;
use crate::error::{Error, Result};
use crate::event::Summary;
use crate::report::Note;

/// The helper reactors of a run (threads started on the first transfer that spreads, kept
/// for the next; joined when the run's [`crate::event::Reactor`] goes).
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

/// The owner's ends of the channels of the helpers lent to its transfer
/// ([`Helpers::lend`]), until [`Helpers::give_back`].
pub(crate) struct Lent {
    /// This lending's number: reports of others are dropped.
    pub(crate) lending: u64,
    orders: Vec<Sender<Order>>,
    /// Per helper, its eventfd ([`nudge`]).
    pub(crate) nudges: Vec<Arc<OwnedFd>>,
    inbox: Receiver<Report>,
    /// The eventfd the helpers write after each report (the owner's ring READs it).
    pub(crate) bell: RawFd,
}

impl Lent {
    /// Sends `order` to helper `h` (0-based); false when its thread is gone.
    pub(crate) fn send(&self, h: usize, order: Order) -> bool {
        self.orders[h].send(order).is_ok()
    }

    /// The next report, if one came.
    pub(crate) fn try_report(&self) -> Option<Report> {
        self.inbox.try_recv().ok()
    }

    /// The next report, waiting at most `wait`.
    ///
    /// # Errors
    /// As [`Receiver::recv_timeout`]: none came in time, or every helper is gone.
    pub(crate) fn report_within(&self, wait: std::time::Duration) -> std::result::Result<Report, RecvTimeoutError> {
        self.inbox.recv_timeout(wait)
    }
}

/// What a helper thread is given by [`Helpers::spawn`]: its number (1-based: reactor 0 is
/// the run's), its end of the channels and the eventfds.
pub(crate) struct HelperEnds {
    pub(crate) helper: usize,
    /// `--pin`: the thread pins itself to its own CPU.
    pub(crate) pin: bool,
    pub(crate) orders: Receiver<Order>,
    pub(crate) reports: Sender<Report>,
    /// The eventfd the helpers write after each report.
    pub(crate) bell: Arc<OwnedFd>,
    /// This helper's own eventfd ([`nudge`]).
    pub(crate) nudge: Arc<OwnedFd>,
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

/// A helper's message to the owner.
pub(crate) enum Report {
    /// These ranges of the part lent as `lending` are written (each write's completion came).
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
    /// Starts `n` helper reactors, each a thread running `body` with its ends of the
    /// channels (`pin`: each pins itself to its own CPU, `--pin`).
    ///
    /// # Errors
    /// `LocalIo` when eventfd(2) or a thread's creation fails.
    pub(crate) fn spawn(n: usize, pin: bool, body: fn(HelperEnds)) -> Result<Helpers> {
        let bell = Arc::new(eventfd()?);
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
            // (The thread holds its eventfd too: it outlives the Worker, dropped before
            // the join.)
            let nudge = Arc::new(eventfd()?);
            let ends = HelperEnds {
                helper: k,
                pin,
                orders: rx,
                reports: tx.clone(),
                bell: Arc::clone(&helpers.bell),
                nudge: Arc::clone(&nudge),
            };
            let thread = std::thread::Builder::new()
                .name(format!("ringdl-r{k}"))
                .spawn(move || body(ends))
                .map_err(|e| err!(LocalIo, "starting reactor thread {k}: {e}"))?;
            helpers.workers.push(Worker {
                orders,
                nudge,
                thread: Some(thread),
            });
        }
        Ok(helpers)
    }

    /// The channels of the first `helpers` helpers, lent to one transfer: `None` when
    /// another has them.
    pub(crate) fn lend(&mut self, helpers: usize) -> Option<Lent> {
        let inbox = self.inbox.take()?;
        self.lendings += 1;
        let lent = &self.workers[..helpers.min(self.workers.len())];
        Some(Lent {
            lending: self.lendings,
            orders: lent.iter().map(|w| w.orders.clone()).collect(),
            nudges: lent.iter().map(|w| Arc::clone(&w.nudge)).collect(),
            inbox,
            bell: self.bell.as_raw_fd(),
        })
    }

    /// The lent channels back, at the transfer's end.
    pub(crate) fn give_back(&mut self, lent: Lent) {
        self.inbox = Some(lent.inbox);
    }

    /// Whether a transfer has them (its [`crate::event::owner::Remote`] holds their channels).
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

impl Helpers {
    /// The next placement's number (from the lendings' count).
    pub(crate) fn next_placement(&mut self) -> u64 {
        self.lendings += 1;
        self.lendings
    }

    /// Asks helper `helper` (1-based) to close its idle connections to origin `key`;
    /// false when its thread is gone.
    pub(crate) fn forget(&self, helper: usize, key: &OriginKey) -> bool {
        helper
            .checked_sub(1)
            .and_then(|h| self.workers.get(h))
            .is_some_and(|w| w.orders.send(Order::Forget { key: key.to_owned() }).is_ok())
    }

    /// Places `order` on its helper and wakes the helper's ring (it may be running files
    /// placed before: it takes the order between two waits); gives the order back when
    /// that helper's thread is gone.
    pub(crate) fn place(&self, order: WholeOrder) -> std::result::Result<(), Box<WholeOrder>> {
        let Some(w) = order.helper.checked_sub(1).and_then(|h| self.workers.get(h)) else {
            return Err(Box::new(order));
        };
        w.orders.send(Order::Whole(Box::new(order))).map_err(|e| match e.0 {
            Order::Whole(o) => o,
            Order::Part(_) | Order::Forget { .. } => unreachable!("sent a whole transfer"),
        })?;
        nudge(&w.nudge);
        Ok(())
    }

    /// What the helpers reported since last asked (none while a transfer has them lent:
    /// its own loop reads them).
    pub(crate) fn reports(&self) -> Vec<Report> {
        self.inbox
            .as_ref()
            .map(|rx| rx.try_iter().collect())
            .unwrap_or_default()
    }

    /// The next report, waiting at most `wait` (none while a transfer has them lent, or
    /// when none came).
    pub(crate) fn report_within(&self, wait: std::time::Duration) -> Option<Report> {
        self.inbox.as_ref()?.recv_timeout(wait).ok()
    }

    /// The eventfd the helpers write after each report.
    pub(crate) fn bell_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&*self.bell)
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

/// Sends `r` to the owner and rings its eventfd.
pub(crate) fn tell(tx: &Sender<Report>, bell: &OwnedFd, r: Report) {
    if tx.send(r).is_ok() {
        nudge(bell);
    }
}

/// An eventfd (eventfd(2), close-on-exec): a helper's, or the bell the helpers ring.
///
/// # Errors
/// `LocalIo` when the kernel refuses it.
pub(crate) fn eventfd() -> Result<OwnedFd> {
    rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).map_err(|e| err!(LocalIo, "eventfd: {e}"))
}

/// Adds 1 to eventfd `fd`'s count, waking the ring that READs it: a helper's, after a
/// stop was posted to it (a full count — never, at one write per stop — or a closed
/// helper loses nothing: its tick reads the flag too), or the run's bell after a report.
pub(crate) fn nudge(fd: &OwnedFd) {
    let _ = rustix::io::write(fd.as_fd(), &1u64.to_ne_bytes());
}
