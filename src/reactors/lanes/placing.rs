//! `--threads N` with `-j` ≥ 2, the run's side of placing whole files on the helper
//! reactors (`reactors/helpers/placed.rs` is the helper's side): which reactor
//! a file goes to, the order that sends it, the helpers' reports applied to its slot
//! (progress, notes, its end handed to the feed), the idle connections each reactor
//! keeps (closed by message when a file cannot start for them), and the completion of the
//! eventfd READ that wakes the run when a helper reported (its READ: `run_lane.rs`).

use std::sync::Arc;

use super::{Feed, Slot};
use crate::control::origin::{OriginCap, OriginKey};
use crate::err;
use crate::error::Result;
use crate::event::Reactor;
use crate::event::wire::{Helpers, PlacedShape, PostedToPlaced, Report, WholeOrder, WholeReport};
use crate::event::{Outcome, Start};
use crate::lane::RingCell;
use crate::report::{Flight, Progress};
use crate::tag::Tag;

/// A transfer placed on a helper reactor (`--threads`, `-j` ≥ 2): its report stays here,
/// the helper says the rest ([`WholeReport`]).
pub(super) struct Placement {
    pub(super) id: usize,
    /// The helper (1-based) and the placement's number.
    pub(super) helper: usize,
    pub(super) placement: u64,
    pub(super) keys: Vec<OriginKey>,
    pub(super) report: Progress,
    /// As last told (each tick of its loop).
    pub(super) flight: Flight,
    pub(super) serving: usize,
    pub(super) held: usize,
    /// A slot of it is parked on a cap ([`WholeReport::Flight`]).
    pub(super) parked: bool,
    pub(super) posted: Arc<PostedToPlaced>,
    /// Connection slots given it (at its start, and posted since: [`super::caps::grow_running`]),
    /// and what it may grow to: its `-x`, `--min-split-size`, `--max-connections-per-host`.
    pub(super) n: usize,
    pub(super) most: usize,
    pub(super) min_split: u64,
    pub(super) max_per_host: usize,
    /// As [`super::Running`]'s: it may spread, and it was stopped to start again so.
    pub(super) respreads: bool,
    pub(super) recalled: bool,
}

/// What the run's reactor keeps of the reactors it placed files on: per reactor (index
/// 0 unused: the run's own counts are its [`Reactor`]'s), the idle connections each origin
/// has there; and the caps their transfers learned, per origin key.
pub(super) struct HelperLedger {
    pub(super) idle: Vec<Vec<(OriginKey, usize)>>,
    pub(super) learned: Vec<(OriginKey, usize)>,
    /// Per reactor: asked to close idle connections, no answer yet.
    pub(super) forgetting: Vec<bool>,
    /// The shape of each helper's run of placed files ([`WholeOrder::shape`]).
    pub(super) shape: PlacedShape,
}

/// Closes the idle connections kept to the origins `keys` on the reactors `on` picks:
/// this one's (0) at once, each helper's by an [`Order::Forget`](crate::event::wire::Order::Forget)
/// (its [`Report::Idle`] brings the counts left).
pub(super) fn forget_idle(
    keys: &[OriginKey],
    on: &dyn Fn(usize) -> bool,
    reactor: &mut Reactor,
    placed: &mut HelperLedger,
) {
    if on(0) {
        for k in keys {
            reactor.forget_idle(k);
        }
    }
    let Some(h) = reactor.helpers_running() else {
        return;
    };
    for r in 1..placed.idle.len() {
        if !on(r) || placed.forgetting[r] || !keys.iter().any(|k| placed.idle_on(r, k) > 0) {
            continue;
        }
        for k in keys {
            if placed.idle_on(r, k) > 0 && !h.forget(r, k) {
                // (Its thread is gone, and its connections with it.)
                placed.idle[r].retain(|(x, _)| x != k);
            }
        }
        placed.forgetting[r] = placed.idle_on_any(r, keys);
    }
}

impl HelperLedger {
    /// What the server of origin `key` was seen allowing, here or on a helper: the most
    /// any transfer saw it take.
    pub(super) fn learned(&self, key: &OriginKey, reactor: &Reactor) -> Option<usize> {
        let there = self.learned.iter().find(|(x, _)| x == key).map(|x| x.1);
        OriginCap::most_seen(reactor.allows(key), there)
    }

    /// Whether reactor `k` (`k` ≥ 1) has idle connections to any of `keys`.
    pub(super) fn idle_on_any(&self, k: usize, keys: &[OriginKey]) -> bool {
        keys.iter().any(|key| self.idle_on(k, key) > 0)
    }

    /// Idle connections to origin `key` on reactor `k` (`k` ≥ 1).
    pub(super) fn idle_on(&self, k: usize, key: &OriginKey) -> usize {
        self.idle
            .get(k)
            .and_then(|v| v.iter().find(|(x, _)| x == key))
            .map_or(0, |x| x.1)
    }
}

/// The reactor a file (to the origins `keys`) goes to when files are placed: the one that
/// runs the fewest files (a helper at most its share of `-j`, [`HelperLedger::shape`]; this one
/// takes the rest), among those the one with the most idle connections to its origin, a
/// helper before this one (which also drives the list). This one also for a file that
/// cannot run elsewhere (several mirrors, an output that is not a regular file) and while
/// a transfer has the helpers.
pub(super) fn reactor_for(
    st: &Start,
    keys: &[OriginKey],
    (slots, reactor): (&[Slot<'_>], &Reactor),
    threads: usize,
    placed: &HelperLedger,
) -> usize {
    let elsewhere = st.mirrors.len() == 1 && st.out.part.is_some() && st.out.room.is_none() && !st.out.sequential;
    let helpers = reactor.helpers_running().filter(|h| !h.lent()).map_or(0, Helpers::len);
    if !elsewhere {
        return 0;
    }
    let files = |k: usize| {
        slots
            .iter()
            .filter(|s| match s {
                Slot::Placed(a) => a.helper == k,
                Slot::Busy(_) => k == 0,
                _ => false,
            })
            .count()
    };
    let idle = |k: usize| match keys.first() {
        Some(key) if k == 0 => reactor.idle_to(key),
        Some(key) => placed.idle_on(k, key),
        None => 0,
    };
    let per = placed.shape.lanes.max(1);
    (1..=helpers.min(threads.saturating_sub(1)))
        .filter(|&k| files(k) < per)
        .chain([0])
        .min_by_key(|&k| (files(k), std::cmp::Reverse(idle(k)), k == 0))
        .unwrap_or(0)
}

/// Places transfer `st` of file `id` on helper reactor `on` with `n` connection slots,
/// holding lane `lane` for it; a transfer that cannot go ends at once (its failure goes to
/// the feed).
#[allow(clippy::too_many_arguments)]
pub(super) fn place(
    feed: &mut dyn Feed,
    slots: &mut [Slot<'_>],
    lane: usize,
    (id, st): (usize, Start),
    keys: Vec<OriginKey>,
    (n, on): (usize, usize),
    reactor: &mut Reactor,
    placed: &mut HelperLedger,
) {
    // (Alone in flight later, it may start again here, spread: [`super::respread`].)
    let respreads = super::super::may_spread(&st, st.opts.connections).is_ok();
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
        ..
    } = st;
    let dup = match out.duplicate() {
        Ok(Some(d)) => d,
        Ok(None) => {
            let e = err!(Internal, "a placed file's output is not a regular file");
            let _ = feed.ended(id, Err(e), report, None, reactor);
            return;
        }
        Err(e) => {
            let _ = feed.ended(id, Err(e), report, None, reactor);
            return;
        }
    };
    let name = Flight::name_of(&out.describe());
    // (The file's own stays with its feed, which renames it once the helper is done.)
    drop(out);
    let mut o = (*opts).clone();
    // (What it may grow to: its `-x`, under `--max-connections-per-host` and what the
    // server was seen allowing; its helper's ring and pools are sized for that.)
    let learned = keys.first().and_then(|k| placed.learned(k, reactor));
    let most = OriginCap::new(o.max_per_host, learned).most(o.connections, n);
    let (min_split, max_per_host) = (o.min_split_size, o.max_per_host);
    o.connections = n;
    o.threads = 1;
    o.pin = false;
    let Some(helpers) = reactor.helpers_running_mut() else {
        let _ = feed.ended(
            id,
            Err(err!(Internal, "no reactor to place a file on")),
            report,
            None,
            reactor,
        );
        return;
    };
    let posted = Arc::new(PostedToPlaced {
        nudge: helpers.nudge(on),
        ..PostedToPlaced::default()
    });
    let placement = helpers.next_placement();
    let order = WholeOrder {
        placement,
        helper: on,
        mirrors,
        opts: o,
        out: dup,
        resume,
        control,
        engine,
        ktls,
        signed,
        posted: Arc::clone(&posted),
        most,
        shape: placed.shape,
    };
    if helpers.place(order).is_err() {
        let _ = feed.ended(
            id,
            Err(err!(Internal, "reactor {on}'s thread is gone")),
            report,
            None,
            reactor,
        );
        return;
    }
    // (The idle connections it takes there are no longer idle.)
    if let Some(v) = placed.idle.get_mut(on) {
        for (k, c) in v.iter_mut() {
            if keys.contains(k) {
                *c = c.saturating_sub(n);
            }
        }
    }
    slots[lane] = Slot::Placed(Box::new(Placement {
        id,
        helper: on,
        placement,
        keys,
        report,
        flight: Flight {
            name,
            ..Flight::default()
        },
        serving: 0,
        held: n,
        parked: false,
        posted,
        n,
        most,
        min_split,
        max_per_host,
        respreads,
        recalled: false,
    }));
}

/// Applies what the helpers reported of the files placed on them ([`on_report`]).
pub(super) fn take_reports(
    feed: &mut dyn Feed,
    reactor: &Reactor,
    slots: &mut [Slot<'_>],
    waiting: &mut std::collections::VecDeque<(usize, Start)>,
    placed: &mut HelperLedger,
    stop: Option<&str>,
) {
    let reports = reactor.helpers_running().map(Helpers::reports).unwrap_or_default();
    for m in reports {
        on_report(feed, m, (slots, reactor), waiting, placed, stop);
    }
}

/// A helper's report of a file placed on it: its progress and notes, or its end (handed
/// to the feed; a redirect to follow, or a file stopped to start again spread, waits to
/// be started again); or the idle connections it keeps after an
/// [`Order::Forget`](crate::event::wire::Order::Forget). `stop`: what stopped the run, if anything did.
pub(super) fn on_report(
    feed: &mut dyn Feed,
    m: Report,
    (slots, reactor): (&mut [Slot<'_>], &Reactor),
    waiting: &mut std::collections::VecDeque<(usize, Start)>,
    placed: &mut HelperLedger,
    stop: Option<&str>,
) {
    let (lending, what) = match m {
        Report::Whole { lending, what } => (lending, what),
        Report::Idle { helper, idle } => {
            if let Some(v) = placed.idle.get_mut(helper) {
                *v = idle;
                placed.forgetting[helper] = false;
            }
            return;
        }
        _ => return,
    };
    let Some(lane) = slots
        .iter()
        .position(|s| matches!(s, Slot::Placed(a) if a.placement == lending))
    else {
        return;
    };
    let Slot::Placed(a) = &mut slots[lane] else {
        return;
    };
    match what {
        WholeReport::Flight {
            flight,
            serving,
            held,
            slots,
            parked,
        } => {
            a.flight = flight;
            a.serving = serving;
            a.held = held;
            a.parked = parked;
            // (What it has, and what was posted it and not read yet: room it dropped is
            // its to ask for again.)
            a.n = slots + a.posted.more.load(std::sync::atomic::Ordering::Acquire);
        }
        WholeReport::Note(note) => {
            a.report.note(note);
        }
        WholeReport::Ended {
            mut result,
            mut failed,
            idle,
            allows,
        } => {
            let Slot::Placed(a) = std::mem::replace(&mut slots[lane], Slot::Free) else {
                return;
            };
            if let Some(v) = placed.idle.get_mut(a.helper) {
                *v = idle;
            }
            // (What a server allows is the most any transfer saw it take.)
            if let (Some(n), Some(k)) = (allows, a.keys.first()) {
                match placed.learned.iter_mut().find(|(x, _)| x == k) {
                    Some(l) => l.1 = l.1.max(n),
                    None => placed.learned.push((k.clone(), n)),
                }
            }
            if a.recalled {
                result = super::respread::recalled(result, stop);
            }
            if let Ok(Outcome::Done(s)) = &mut result {
                s.reactor = a.helper;
            }
            if let Some(s) = failed.as_mut() {
                s.reactor = a.helper;
            }
            // (Its connections on the helper closed or went idle: the slots parked on its
            // origin ask now, this reactor's and those of files on other helpers; its own
            // helper woke its files there.)
            super::caps::wake_parked(slots, &a.keys, a.held, a.helper);
            if let Some(again) = feed.ended(a.id, result, a.report, failed, reactor) {
                waiting.push_front((a.id, again));
            }
        }
    }
}

/// The helpers' eventfd rang (the reports are read at the loop's top); a transfer here
/// that has the helpers lent reads its own now (its own READ may not see this ring).
pub(super) fn on_bell(cell: &RingCell, reactor: &Reactor, c: uring::Completion, slots: &mut [Slot<'_>]) -> Result<()> {
    if c.result < 0 {
        if c.result == -(rustix::io::Errno::CANCELED.raw_os_error()) {
            return Ok(());
        }
        return Err(err!(
            LocalIo,
            "reading the reactors' eventfd: {}",
            crate::event::errno(c.result)
        ));
    }
    for s in slots.iter_mut() {
        if let Slot::Busy(r) = s
            && r.transfer_loop.remote.is_some()
        {
            r.transfer_loop.drain_mail();
        }
    }
    match (reactor.helpers_running(), c.buf) {
        (Some(h), Some(buf)) => super::run_lane::read_eventfd(cell, h.bell_fd(), buf, Tag::Mail),
        _ => Ok(()),
    }
}
