//! A helper's run of the whole files the run's reactor placed on it (`--threads` with
//! `-j` ≥ 2): they run as the run's reactor runs its own ([`run_many`], a lane of its
//! ring each), with its own ring, pools and connections (kept for the next files it is
//! given), each file's control file, final fsync and read-back. A helper runs at most
//! its share of `-j` (`-j` over the reactors, rounded up) at once. The messages are
//! [`crate::event::wire`]'s (its `whole.rs`).

use std::os::fd::{OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};

use crate::control::origin::OriginKey;
use crate::error::Result;
use crate::event::wire::{Order, Report, WholeLink, WholeOrder, WholeReport, tell};
use crate::event::{Outcome, Reactor, Start, Summary};
use crate::reactors::lanes::{Feed, Many, run_many};
use crate::report::Progress;

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
            whole: Some(WholeLink::new(
                lending,
                self.tx.clone(),
                Arc::clone(self.bell),
                w.posted,
                w.most,
            )),
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
        lanes: w.shape.lanes,
        connections: w.shape.connections.max(w.most),
        splice: w.shape.splice,
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
