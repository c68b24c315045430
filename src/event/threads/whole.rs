//! `--threads` with a list at `-j` ≥ 2: whole transfers placed on the helper reactors.
//!
//! The run's reactor (the one that drives the list, [`crate::event::many`]) keeps each
//! placed file's report, its place among the files in flight and its share of the
//! per-origin caps; the helper runs the files placed on it as the run's reactor runs its
//! own ([`run_many`], a lane of its ring each): its own ring, pools and connections (kept
//! for the next files it is given), each file's control file, final fsync and read-back.
//! A helper runs at most its share of `-j` (`-j` over the reactors, rounded up) at once.
//! The messages:
//! - to the helper, an [`Order::Whole`](super::Order::Whole) with the transfer's `Send`
//!   pieces (its output a duplicate descriptor of the same `.part`) and the connection
//!   slots the caps left it, and a [`Posted`] the run's reactor writes: a signal that
//!   stops the run, and the requests the transfers on *other* reactors have on the wire
//!   to the file's origin (they count toward its caps; the helper counts its own). The
//!   helper's eventfd is written after each order and each stop: its ring wakes for
//!   them;
//! - back, a [`WholeReport`]: each tick what the run's progress line shows of it, each
//!   note as it comes (said by the run's reactor with the file's report), and its end —
//!   the outcome, what a failed transfer knew, the connections its reactor keeps idle and
//!   the cap it learned. A file that landed has its descriptor of the output closed by
//!   then, so the run's reactor may rename the file.

use std::os::fd::{OwnedFd, RawFd};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, OnceLock};

use super::{Helpers, Order, Report, tell};
use crate::config::Config;
use crate::control::origin::OriginKey;
use crate::engine::EngineKind;
use crate::error::Result;
use crate::event::many::{Feed, Many, run_many};
use crate::event::mirrors::MirrorRoute;
use crate::event::{Loop, Outcome, Reactor, Start, Summary};
use crate::output::Output;
use crate::output::resume::State;
use crate::report::{Flight, Note, Progress};

/// A whole transfer for a helper: what its [`Start`] holds but its report, which stays
/// with the run's reactor (notes come back as [`WholeReport::Note`]).
pub(crate) struct WholeOrder {
    /// This placement's number (from the lendings' count: a late report of a lending is
    /// never taken for it).
    pub(crate) placement: u64,
    /// The helper's number (1-based).
    pub(crate) helper: usize,
    pub(crate) mirrors: Vec<MirrorRoute>,
    /// Its options: `connections` is the slots the caps left it.
    pub(crate) opts: Config,
    /// A duplicate of the file's output (the same `.part`, [`Output::duplicate`]).
    pub(crate) out: Output,
    pub(crate) resume: Option<State>,
    pub(crate) control: Option<PathBuf>,
    pub(crate) engine: EngineKind,
    pub(crate) ktls: bool,
    pub(crate) signed: Option<crate::signature::Input>,
    pub(crate) posted: Arc<Posted>,
    /// The slots it may grow to (its `-x` under `--max-connections-per-host` and the cap
    /// learned for its server): at most the `-x` of `shape`, which the helper's ring and
    /// pools are sized for.
    pub(crate) most: usize,
    /// The shape of the helper's run of placed files (the run's `-j` shared over the
    /// reactors, the largest `-x`, whether a file may splice): its ring and pools are
    /// sized for it when this order starts it.
    pub(crate) shape: (usize, usize, bool),
}

/// What the run's reactor posts to a placed transfer: `stop` is read at once (its helper's
/// eventfd is written: [`Posted::post_stop`]), at each of its turns and on its tick
/// (250 ms), the rest after each of its waits.
#[derive(Default)]
pub(crate) struct Posted {
    /// SIGINT or SIGTERM came, or the run failed: the transfer ends as `Interrupted` by
    /// it, keeping its `.part` and control file.
    pub(crate) stop: OnceLock<&'static str>,
    /// The eventfd of the helper it is placed on ([`super::nudge`]).
    pub(crate) nudge: Option<Arc<OwnedFd>>,
    /// Requests the run's other transfers have on the wire to the file's origin
    /// ([`crate::control::origin::Origin::others`]).
    pub(crate) others: AtomicUsize,
    /// Another transfer to the file's origin ended: its slots parked on the origin's cap
    /// ask again now ([`Loop::wake_parked`]); read after each of its waits.
    pub(crate) wake: AtomicBool,
    /// Connection slots the run's reactor gave it beyond those it started with (room that
    /// other files' ends left under the origin's caps): read after its next wait, and
    /// added ([`Loop::grow`]) as far as its ring, its pool and its work allow (the rest is
    /// dropped: its next [`WholeReport::Flight`] says the slots it has).
    pub(crate) more: AtomicUsize,
}

impl Posted {
    /// Ends the placed transfer as `Interrupted` by `why` (the first reason posted
    /// stays), and wakes its helper's ring to read it now.
    pub(crate) fn post_stop(&self, why: &'static str) {
        let _ = self.stop.set(why);
        if let Some(fd) = &self.nudge {
            super::nudge::nudge(fd);
        }
    }
}

/// A helper's message about a whole transfer.
pub(crate) enum WholeReport {
    /// Each tick: what the run's line shows of it, the requests of it the server serves
    /// now, the connection slots it holds against its origin's caps and those it has, and
    /// whether a slot of it is parked on a cap ([`Loop::parked`]).
    Flight {
        flight: Flight,
        serving: usize,
        held: usize,
        slots: usize,
        parked: bool,
    },
    /// A note of the transfer, for its report.
    Note(Note),
    /// It ended (what [`crate::event::run`] gave back), and what its reactor keeps: idle
    /// connections per origin key, and the cap learned for the file's origin.
    Ended {
        result: Result<Outcome>,
        failed: Option<Box<Summary>>,
        idle: Vec<(OriginKey, usize)>,
        allows: Option<usize>,
    },
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
        super::nudge::nudge(&w.nudge);
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

/// The files the run's reactor placed on a helper, as the [`Feed`] of the helper's own
/// [`run_many`]: each [`Order::Whole`] taken from the helper's channel starts on a lane of
/// its ring (with the slots the run's reactor gave it: the caps are counted there), and
/// each end goes back as a [`WholeReport::Ended`]. Another order (a part of a lone file,
/// or a [`Order::Forget`], sent only while the helper runs no file) ends the run of
/// placed files and waits in `held` for the helper's loop.
struct Placements<'a> {
    orders: &'a Receiver<Order>,
    tx: &'a Sender<Report>,
    bell: &'a Arc<OwnedFd>,
    /// The order the helper's loop took from the channel.
    first: Option<Box<WholeOrder>>,
    /// An order that is not a whole transfer, for the helper's loop once the files end.
    held: Option<Order>,
    /// The placements started and not ended, with their origin's key.
    running: Vec<(u64, Option<OriginKey>)>,
}

impl Placements<'_> {
    /// The transfer of placed file `w`: its notes go to the run's reactor.
    fn start(&self, w: WholeOrder) -> Start {
        let lending = w.placement;
        let (ftx, fbell) = (self.tx.clone(), Arc::clone(self.bell));
        Start {
            mirrors: w.mirrors,
            opts: Rc::new(w.opts),
            out: Rc::new(w.out),
            resume: w.resume,
            control: w.control,
            engine: w.engine,
            ktls: w.ktls,
            signed: w.signed,
            report: Progress::forwarding(Box::new(move |note| {
                tell(
                    &ftx,
                    &fbell,
                    Report::Whole {
                        lending,
                        what: WholeReport::Note(note),
                    },
                );
            })),
            part: None,
            whole: Some(WholeLink {
                lending,
                tx: self.tx.clone(),
                bell: Arc::clone(self.bell),
                posted: w.posted,
                told: (0, false),
                pool: None,
                most: w.most,
            }),
        }
    }

    /// Says placement `lending`'s end and forgets it.
    fn tell_ended(&mut self, lending: u64, r: (Result<Outcome>, Option<Box<Summary>>), reactor: Option<&Reactor>) {
        let key = self
            .running
            .iter()
            .position(|p| p.0 == lending)
            .and_then(|i| self.running.swap_remove(i).1);
        tell_ended(self.tx, self.bell, lending, r, reactor, key.as_ref());
    }
}

impl Feed for Placements<'_> {
    fn next(&mut self) -> Option<(usize, Start)> {
        let w = match self.first.take() {
            Some(w) => w,
            None if self.held.is_some() => return None,
            None => match self.orders.try_recv() {
                Ok(Order::Whole(w)) => w,
                Ok(o) => {
                    self.held = Some(o);
                    return None;
                }
                Err(_) => return None,
            },
        };
        let key = w.mirrors.first().map(|r| r.key.clone());
        self.running.push((w.placement, key));
        let id = usize::try_from(w.placement).unwrap_or(usize::MAX);
        Some((id, self.start(*w)))
    }

    fn ended(
        &mut self,
        id: usize,
        r: Result<Outcome>,
        _report: Progress,
        failed: Option<Box<Summary>>,
        reactor: &Reactor,
    ) -> Option<Start> {
        // (A redirect goes back too: the run's reactor places the file again.)
        self.tell_ended(id as u64, (r, failed), Some(reactor));
        None
    }

    fn progress(&mut self, _: &[crate::report::Flight], _: std::time::Duration) {
        // (Each placed transfer tells its own on its tick: [`Loop::tell_placed`].)
    }

    fn stopping(&self) -> bool {
        false
    }

    fn unstarted(&mut self, id: usize, _st: Start) {
        let e = crate::err!(Interrupted, "the reactor stopped before the file started");
        self.tell_ended(id as u64, (Err(e), None), None);
    }
}

/// Runs placed transfer `w` on the helper's `reactor`, beside the others the run's
/// reactor places on it while it runs (up to the lanes `w` says), until none runs and
/// none waits in `orders`. Gives back an order taken from `orders` that is not a whole
/// transfer. `nudge` is the helper's eventfd: a new order or a posted stop wakes its ring.
pub(super) fn run_placed(
    reactor: &mut Reactor,
    w: Box<WholeOrder>,
    orders: &Receiver<Order>,
    (tx, bell, nudge): (&Sender<Report>, &Arc<OwnedFd>, RawFd),
) -> Option<Order> {
    let opts = w.opts.clone();
    let many = Many {
        lanes: w.shape.0,
        connections: w.shape.1.max(w.most),
        splice: w.shape.2,
        signals: None,
        threads: 1,
        pin: false,
        placed: Some(nudge),
    };
    let mut feed = Placements {
        orders,
        tx,
        bell,
        first: Some(w),
        held: None,
        running: Vec::new(),
    };
    if let Err(e) = run_many(&mut feed, &opts, &many, reactor) {
        // (The files it took end with the failure: the run's reactor waits for each.)
        let lendings: Vec<u64> = feed.running.iter().map(|p| p.0).collect();
        let first = feed.first.take().map(|w| w.placement);
        for lending in lendings.into_iter().chain(first) {
            let e = crate::error::Error::new(e.kind, e.msg.clone());
            feed.tell_ended(lending, (Err(e), None), None);
        }
        reactor.reset();
    }
    feed.held
}

/// Says placement `lending`'s end: its outcome (or its error and what the failed transfer
/// knew), the connections `reactor` keeps idle and the cap learned for origin `key`.
fn tell_ended(
    tx: &Sender<Report>,
    bell: &Arc<OwnedFd>,
    lending: u64,
    (result, failed): (Result<Outcome>, Option<Box<Summary>>),
    reactor: Option<&Reactor>,
    key: Option<&OriginKey>,
) {
    let allows = key.zip(reactor).and_then(|(k, r)| r.allows(k));
    let idle = reactor.map(Reactor::idle_counts).unwrap_or_default();
    tell(
        tx,
        bell,
        Report::Whole {
            lending,
            what: WholeReport::Ended {
                result,
                failed,
                idle,
                allows,
            },
        },
    );
}

/// A placed transfer's side of its messages, in the loop that runs it.
pub(crate) struct WholeLink {
    lending: u64,
    tx: Sender<Report>,
    bell: Arc<OwnedFd>,
    pub(super) posted: Arc<Posted>,
    /// Its requests the server serves, and whether a slot is parked on a cap, as last
    /// told.
    told: (usize, bool),
    /// The reactor's read pool, which the slots it is given later take their blocks from.
    pool: Option<uring::BufPool>,
    /// The slots it may grow to, which its ring and pools are sized for.
    pub(crate) most: usize,
}

impl WholeLink {
    /// The link with the read pool of the reactor the transfer runs on.
    pub(crate) fn with_pool(self, pool: uring::BufPool) -> WholeLink {
        WholeLink {
            pool: Some(pool),
            ..self
        }
    }
}

impl Loop<'_> {
    /// Each tick of a placed transfer: a signal the run's reactor posted ends it; its
    /// progress goes to the run's reactor.
    pub(crate) fn tell_placed(&mut self) {
        if self.whole.is_none() {
            return;
        }
        self.posted_stop();
        self.tell_flight();
    }

    /// The requests the transfers on other reactors have on the wire to this placed
    /// transfer's origin, as last posted (0 for one not placed). Its helper adds those of
    /// its other files ([`crate::event::many`]'s `share_origins`, each turn).
    pub(crate) fn posted_others(&self) -> usize {
        self.whole
            .as_ref()
            .map_or(0, |w| w.posted.others.load(Ordering::Acquire))
    }

    /// Each turn of a placed transfer: a posted stop ends it (one that started after its
    /// helper's eventfd was read for it — the order's wake-up and the stop's taken as one,
    /// or its order waiting for a lane — has no other wake-up left to read it), a posted
    /// wake ends its parked slots' waits, and posted slots are added; its requests
    /// served, and whether a slot is parked, go to the run's reactor as soon as they
    /// change (a server's refusal is judged by them all: a stale count learns a cap too
    /// low).
    pub(crate) fn sync_placed(&mut self) {
        if self.whole.is_none() {
            return;
        }
        self.posted_stop();
        let Some(w) = self.whole.as_ref().filter(|_| self.sh.fatal.is_none()) else {
            return;
        };
        let wake = w.posted.wake.swap(false, Ordering::AcqRel);
        let more = w.posted.more.swap(0, Ordering::AcqRel);
        let pool = w.pool.clone().filter(|_| more > 0);
        let most = w.most;
        let told = w.told;
        if wake {
            // (One place freed: its one slot asks.)
            for o in 0..self.sh.origins.len() {
                self.wake_parked(o, 1);
            }
        }
        // (Room for a transfer that can use it: served in ranges, with work for another
        // connection, within what its ring was sized for.)
        let room = most.saturating_sub(self.conns.len());
        let pool = pool.filter(|_| self.sh.tr.ranges && self.wants_connection() && room > 0);
        if let Some(pool) = pool {
            // Room other files left: more slots, and as many more it may open (its `-x`
            // was the slots it started with; what its bytes are worth still bounds them).
            self.grow(more.min(room), &pool);
            let left = self.sh.tr.total.unwrap_or(0).saturating_sub(self.sh.tr.landed.bytes());
            let worth = crate::schedule::connections_for(
                left,
                self.sh.opts.min_split_size,
                self.conns.len(),
                self.sh.tr.mirrors.len(),
            );
            self.sh.tr.wanted = self.sh.tr.wanted.max(worth);
        }
        // (A slot parked on the cap is told at once: a wake the run's reactor deals out
        // when another file ends goes to parked files, served-nothing ones first.)
        if (self.serving(0), self.parked()) != told {
            self.tell_flight();
        }
    }

    /// Tells the run's reactor what its line shows of this transfer, the requests the
    /// server serves of it and the slots it holds.
    fn tell_flight(&mut self) {
        let (serving, parked) = (self.serving(0), self.parked());
        let what = WholeReport::Flight {
            flight: self.flight(),
            serving,
            held: self.held(self.conns.len()),
            slots: self.conns.len(),
            parked,
        };
        let Some(w) = self.whole.as_mut() else {
            return;
        };
        w.told = (serving, parked);
        tell(
            &w.tx,
            &w.bell,
            Report::Whole {
                lending: w.lending,
                what,
            },
        );
    }
}
