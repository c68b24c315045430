//! Several transfers at once on one reactor (`-j N`): each runs on its own lane of the
//! reactor's one ring ([`crate::lane`]), with its own write pool, write slots, tick and
//! control file; the read pool, the idle connections and the origins are the reactor's.
//!
//! The files come from a [`Feed`] (the run's list): [`run_many`] asks it for the next
//! transfer whenever a lane is free and the transfer's origins have room under their
//! caps, hands it each transfer's end (a redirect, or a file stopped to start again
//! spread, [`respread`], is started again on a lane: the feed says so by returning the
//! new start), and shows it the run's progress. Nothing here
//! reaches into the feed's state; the feed never sees a lane.
//!
//! Per-origin caps hold across transfers: a transfer starts with as many connection slots
//! as its origins have left (`--max-connections-per-host`, or less when a server was seen
//! turning connections away), counting the slots the running transfers hold — all of
//! them until a transfer knows its size, then only those it uses (see
//! [`crate::schedule::connections_for`]) — and the idle connections kept to them.
//!
//! SIGINT/SIGTERM (the signalfd READ on the reactor's own lane) ends every running
//! transfer as `Interrupted` (each keeps its `.part` and control file) and starts no more.
//!
//! `--threads N` with `-j` ≥ 2: a file may be placed whole on a helper reactor instead of
//! a lane (`reactors/helpers/placed.rs` runs it there; the messages are
//! [`crate::event::wire`]'s); its slot here keeps its report, its
//! place among the files in flight and its share of the caps, from the helper's reports
//! (read after each wait; the helpers' eventfd READ, also on the reactor's own lane,
//! wakes the run).

use std::os::fd::RawFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

mod adopt;
mod caps;
mod placing;
mod respread;
mod run_lane;
mod steps;
mod sync;

use adopt::adopt_idle;
use caps::{grow_running, room_under_caps, share_origins};
use placing::{HelperLedger, Placement, forget_idle, on_report, place, reactor_for, take_reports};
use run_lane::{on_run_lane, on_signal, read_eventfd, read_signal};
use steps::step_lanes;
use sync::SyncGroup;

use crate::config::Config;
use crate::control::origin::OriginKey;
use crate::engine::blocks::write_block;
use crate::err;
use crate::error::Result;
use crate::event::reactor::{self, Reactor};
use crate::event::wire::PlacedShape;
use crate::event::{Loop, Outcome, Start, Summary, start_on};
use crate::lane::{RUN_LANE, RingCell};
use crate::output::Output;
use crate::report::Progress;
use crate::tag::Tag;

/// Where the files of a run come from, and where their ends go.
pub trait Feed {
    /// The next file to start (an id of the feed's choosing, and its transfer), or `None`
    /// when there is none left to start.
    fn next(&mut self) -> Option<(usize, Start)>;
    /// File `id`'s transfer ended with `r`; its report comes back, and with a failure what
    /// the transfer knew (for `--json`), and the reactor it ran on as it is after it (the
    /// connections it keeps idle, the caps it learned). A redirect to follow, or a file
    /// stopped to start again spread ([`Outcome::Recalled`]), comes back as its new start.
    fn ended(
        &mut self,
        id: usize,
        r: Result<Outcome>,
        report: Progress,
        failed: Option<Box<Summary>>,
        reactor: &Reactor,
    ) -> Option<Start>;
    /// The transfers in flight (a few times a second).
    fn progress(&mut self, flights: &[Flight], elapsed: Duration);
    /// No more files are to start (`--fail-fast` after a failure): one handed over and
    /// waiting for room goes back with [`Feed::unstarted`].
    fn stopping(&self) -> bool;
    /// File `id`'s transfer `st` was handed over but never started (the run was
    /// interrupted, or is stopping): it counts as not started (one to start again after
    /// [`Outcome::Recalled`] ran, and ends interrupted).
    fn unstarted(&mut self, id: usize, st: Start);
}

pub use crate::report::Flight;

/// The shape of a run of many files.
pub struct Many {
    /// Files in flight at once (`-j`).
    pub lanes: usize,
    /// Connection slots per file at most (the largest `-x` of the list).
    pub connections: usize,
    /// Some file may use the `splice` engine (the ring is probed for IORING_OP_SPLICE).
    pub splice: bool,
    /// signalfd for SIGINT/SIGTERM.
    pub signals: Option<RawFd>,
    /// `--threads`: reactors (with `lanes` ≥ 2 the files are placed on them).
    pub threads: usize,
    /// `--pin`: each reactor's thread on its own CPU.
    pub pin: bool,
    /// This reactor is a helper running files the run's reactor placed on it (`--threads`,
    /// [`crate::event::wire`]): each comes with the connection slots the caps left it
    /// (counted there, over every reactor), a file ended is not followed by another of
    /// this run once none is in the feed (the run ends; the helper waits for its next
    /// order), and this eventfd READ on the reactor's lane wakes it for a new file or a
    /// posted stop.
    pub placed: Option<RawFd>,
}

/// A transfer on its lane.
struct Running<'c> {
    id: usize,
    transfer_loop: Loop<'c>,
    /// Its origins' keys, and its connection slots.
    keys: Vec<OriginKey>,
    n: usize,
    /// A completion's handling failed: the transfer ends with it.
    failed: Option<crate::error::Error>,
    /// Its bytes are all in; it waits for its sync ([`Loop::ready_to_sync`], [`SyncGroup`]).
    syncing: bool,
    /// Its connections went to the reactor once its bytes were all off the wire, while
    /// they are written or synced ([`Loop::received`], [`Loop::hand_back_idle`]): it holds
    /// no connection slot, nor a place among the `-j` files in flight.
    released: bool,
    /// It started on one reactor, as one of several files in flight, though it may spread
    /// ([`crate::reactors::may_spread`]); it was stopped to start again spread, alone in flight now
    /// ([`respread::recall_alone`]).
    respreads: bool,
    recalled: bool,
}

impl Running<'_> {
    /// Connection slots it holds against its origins' caps ([`Loop::held`]).
    fn held(&self) -> usize {
        if self.released {
            0
        } else {
            self.transfer_loop.held(self.n)
        }
    }
}

/// Lane state between transfers.
enum Slot<'c> {
    Free,
    Busy(Box<Running<'c>>),
    /// Its transfer runs on a helper reactor.
    Placed(Box<Placement>),
    /// Its transfer ended; its ops are cancelled and not all back yet (with the output
    /// when writes were still in flight: an epoll worker may still write to its fd).
    Draining {
        _hold: Option<Rc<Output>>,
    },
}

/// Runs the files `feed` gives, `many.lanes` at once, on the ring and connections of
/// `reactor`. Returns the signal that stopped the run, if one did.
///
/// # Errors
/// `LocalIo` when the ring cannot be built or waited on, or the pools not mapped (a
/// file's own failure goes to [`Feed::ended`], never here).
pub fn run_many(
    feed: &mut dyn Feed,
    opts: &Config,
    many: &Many,
    reactor: &mut Reactor,
) -> Result<Option<&'static str>> {
    let lanes = many.lanes.clamp(1, usize::from(RUN_LANE));
    let n = many.connections.max(1);
    let syncing = syncing_lanes(lanes);
    let entries =
        (reactor::ring_entries(n) as usize * lanes + SYNCING_ENTRIES * syncing + 8).next_power_of_two() as u32;
    let (chosen, entries, splice) = reactor.take_ring(opts, entries, many.splice)?;
    // (The pools are sized for `lanes`: a file that handed its connections back holds no
    // read block, and only the write blocks still being written, which the next files'
    // connections wait for when the shared write pool runs short.)
    reactor.size_pools(lanes, n, write_block())?;
    let cell = RingCell::new(chosen);
    // (Its eventfd, READ on the ring, stays open until the ring's ops are settled.)
    let mut syncs = SyncGroup::default();
    let r = drive(feed, &cell, lanes, many, reactor, &mut syncs);
    reactor.give_back((cell.into_inner(), entries, splice));
    drop(syncs);
    r
}

/// Lanes beyond `-j` (`lanes`) for files whose bytes are all in and whose final sync
/// runs (or waits for the run's next group: [`SyncGroup`]) while the next files of the
/// list start on their connections: each sync waits for the disk, and a file waiting
/// there would otherwise keep its place and connection idle. At most `RUN_LANE` lanes in
/// all.
fn syncing_lanes(lanes: usize) -> usize {
    (3 * lanes).max(8).min(usize::from(RUN_LANE) - lanes)
}

/// SQ entries a syncing lane may need at once: its fsync, its tick and their cancels.
const SYNCING_ENTRIES: usize = 4;

/// How long a run that failed waits for the files placed on other reactors to stop and
/// say how they ended (each checks its stop on its tick and settles its writes within
/// 10 s).
const STOP_WAIT: Duration = Duration::from_secs(15);

fn drive(
    feed: &mut dyn Feed,
    cell: &RingCell,
    lanes: usize,
    many: &Many,
    reactor: &mut Reactor,
    syncs: &mut SyncGroup,
) -> Result<Option<&'static str>> {
    let mut slots: Vec<Slot<'_>> = (0..lanes + syncing_lanes(lanes)).map(|_| Slot::Free).collect();
    let threads = many.threads.max(1);
    let mut placed = HelperLedger {
        idle: vec![Vec::new(); threads],
        learned: Vec::new(),
        forgetting: vec![false; threads],
        shape: PlacedShape {
            lanes: lanes.div_ceil(threads),
            connections: many.connections.max(1),
            splice: many.splice,
        },
    };
    // Files handed over that wait for a lane and room under their caps, in order (a
    // redirect to follow goes first).
    let mut waiting = Waiting::new();
    let r = turns(
        feed,
        cell,
        many,
        reactor,
        (&mut slots, &mut waiting),
        &mut placed,
        syncs,
    );
    if r.is_err() {
        // The files placed on other reactors stop too, and their ends go to the feed: none
        // runs on unseen, nor keeps a helper's thread (joined when the run ends) busy. The
        // files waiting go back as not started.
        for s in &slots {
            if let Slot::Placed(a) = s {
                a.posted.post_stop("the run's failure");
            }
        }
        let deadline = Instant::now() + STOP_WAIT;
        while slots.iter().any(|s| matches!(s, Slot::Placed(_))) {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(m) = reactor.helpers_running().and_then(|h| h.report_within(left)) else {
                break;
            };
            on_report(
                feed,
                m,
                (&mut slots, reactor),
                &mut waiting,
                &mut placed,
                Some("the run's failure"),
            );
        }
        while let Some((id, st)) = waiting.pop_front() {
            feed.unstarted(id, st);
        }
    }
    r
}

/// Files handed over that wait for a lane and room under their caps, in order.
type Waiting = std::collections::VecDeque<(usize, Start)>;

/// What the run's turns carry from one to the next.
struct TurnState {
    /// The feed has no file left to give (asked again each turn on a helper).
    exhausted: bool,
    /// The signal that stopped the run, if one did.
    interrupted: Option<&'static str>,
    /// `--threads` with several files in flight: whole files are placed on the reactors.
    placing: bool,
    /// Reactors (`--threads`), at least one.
    threads: usize,
}

/// The run's turns, until every file ended (the signal that stopped it, if one did).
fn turns<'c>(
    feed: &mut dyn Feed,
    cell: &'c RingCell,
    many: &Many,
    reactor: &mut Reactor,
    (slots, waiting): (&mut [Slot<'c>], &mut Waiting),
    placed: &mut HelperLedger,
    syncs: &mut SyncGroup,
) -> Result<Option<&'static str>> {
    let started = Instant::now();
    let mut next_progress = started;
    let placing = arm_run_lane(cell, many, reactor, many.lanes)?;
    let mut state = TurnState {
        exhausted: false,
        interrupted: None,
        placing,
        threads: many.threads.max(1),
    };
    loop {
        // (A helper asks its feed again each turn: files are placed on it as it runs.)
        if many.placed.is_some() && waiting.is_empty() {
            state.exhausted = false;
        }
        // What the helpers said of the files placed on them.
        if placing {
            take_reports(feed, reactor, slots, waiting, placed, state.interrupted);
        }
        // A signal taken while a lane waited for its own completion (its fsync or
        // read-back) stops the run before another file starts; the helpers' wake-up
        // taken then is read again.
        while let Some(c) = cell.take_stashed(RUN_LANE) {
            if Tag::decode(c.tag) == Some(Tag::Synced) {
                syncs.on_done(cell, c, slots);
            } else {
                on_run_lane(cell, (many, reactor), c, slots, &mut state.interrupted)?;
            }
        }
        // A file handed over but not started goes back when the run stops.
        if state.interrupted.is_some() || feed.stopping() {
            while let Some((id, st)) = waiting.pop_front() {
                feed.unstarted(id, st);
            }
        }
        start_files(feed, cell, (many, reactor), (slots, waiting), placed, &mut state);
        // The room files that ended left goes to those running once none waits for it
        // (on a helper, the run's reactor posts it).
        if state.interrupted.is_none() && waiting.is_empty() && state.exhausted && many.placed.is_none() {
            // (With `--threads`, a large file left alone in flight starts again spread over
            // the reactors first: [`respread`].)
            if placing && !feed.stopping() {
                respread::recall_alone(slots, state.threads);
            }
            grow_running(slots, reactor, placed);
        }
        share_origins(slots);
        adopt_idle(slots, reactor);
        syncs.take_results(slots);
        let freed = step_lanes(feed, cell, reactor, (slots, waiting), (state.interrupted, syncs))?;
        syncs.start(cell, reactor, slots);
        let idle = slots.iter().all(|s| matches!(s, Slot::Free));
        if idle && waiting.is_empty() && (state.exhausted || state.interrupted.is_some()) {
            // (A signal that came meanwhile is said all the same.)
            while let Some(c) = cell.take_stashed(RUN_LANE) {
                if Tag::decode(c.tag) == Some(Tag::Signal) {
                    on_signal(cell, None, c, slots, &mut state.interrupted)?;
                }
            }
            return Ok(state.interrupted);
        }
        if Instant::now() >= next_progress {
            next_progress = Instant::now() + Duration::from_millis(250);
            show_progress(feed, slots, started);
        }
        if freed {
            // A lane came free (or a redirect waits): start the next file before waiting.
            continue;
        }
        cell.submit_and_wait(1)
            .map_err(|e| err!(LocalIo, "io_uring_enter: {e}"))?;
        if placing || many.placed.is_some() {
            // (A transfer here judges a refusal by the requests of those placed elsewhere
            // as they are now, not as they were when the run went to wait. Those on this
            // reactor were counted at the top of the turn: nothing here changed them.)
            if placing {
                take_reports(feed, reactor, slots, waiting, placed, state.interrupted);
            }
            share_origins(slots);
        }
        reap(cell, (many, reactor), slots, &mut state.interrupted, syncs)?;
    }
}

/// The READs of the reactor's own lane: the signalfd's, a helper's own eventfd (files are
/// placed on it), and with `--threads` and several `lanes` the bell the helpers ring
/// (started now). Returns whether files are placed on the helpers.
fn arm_run_lane(cell: &RingCell, many: &Many, reactor: &mut Reactor, lanes: usize) -> Result<bool> {
    if let Some(fd) = many.signals {
        let block = reactor.signal_block()?;
        if let Some(buf) = block.alloc() {
            read_signal(cell, fd, buf)?;
        }
    }
    // (A helper has no signalfd: its signal block takes its eventfd's count.)
    if let Some(fd) = many.placed
        && let Some(buf) = reactor.signal_block()?.alloc()
    {
        read_eventfd(cell, fd, buf, Tag::Nudge)?;
    }
    // `--threads` with several files in flight: whole files are placed on the reactors
    // (the one that runs the fewest takes the next: [`reactor_for`]); a
    // file alone in flight, with none to come after it, spreads its segments over them
    // instead ([`super::spread`]).
    let threads = many.threads.max(1);
    let placing = threads > 1 && lanes > 1;
    if placing {
        let bell = reactor
            .helpers(threads - 1, many.pin, super::helpers::helper)?
            .bell_fd();
        let Some(buf) = reactor.mail_block()?.alloc() else {
            return Err(err!(Internal, "no block for the reactors' eventfd"));
        };
        read_eventfd(cell, bell, buf, Tag::Mail)?;
    }
    Ok(placing)
}

/// Starts what the free lanes and the origins' caps have room for: files that waited
/// first, then the feed's next; a file with no room under its caps waits at the front.
fn start_files<'c>(
    feed: &mut dyn Feed,
    cell: &'c RingCell,
    (many, reactor): (&Many, &mut Reactor),
    (slots, waiting): (&mut [Slot<'c>], &mut Waiting),
    placed: &mut HelperLedger,
    state: &mut TurnState,
) {
    let placing = state.placing;
    while state.interrupted.is_none() {
        // (`-j` files in flight or draining, not counting those that only wait for their
        // fsync: a draining lane's cancelled receives still hold read blocks, and the
        // pools are sized for `-j` lanes.)
        if slots
            .iter()
            .filter(|s| !matches!(s, Slot::Free) && !released(s))
            .count()
            >= many.lanes.max(1)
        {
            break;
        }
        let Some(lane) = slots.iter().position(|s| matches!(s, Slot::Free)) else {
            break;
        };
        let next = match waiting.pop_front() {
            Some(w) => Some(w),
            None if state.exhausted => None,
            None => feed.next(),
        };
        let Some((id, st)) = next else {
            state.exhausted = true;
            break;
        };
        // (Whether another file comes after it: one alone in flight spreads. Asked only
        // with none in flight, the one case where it decides: the feed opens the file it
        // gives, and no more than `-j` are open at once.)
        let none_in_flight = slots.iter().all(|s| !in_flight(s));
        if placing && waiting.is_empty() && !state.exhausted && none_in_flight {
            match feed.next() {
                Some(w) => waiting.push_back(w),
                None => state.exhausted = true,
            }
        }
        let alone = waiting.is_empty() && state.exhausted && none_in_flight;
        let keys: Vec<OriginKey> = st.mirrors.iter().map(|r| r.key.clone()).collect();
        let on = if placing && !alone {
            reactor_for(&st, &keys, (slots, reactor), state.threads, placed)
        } else {
            0
        };
        // (The idle connections on its reactor are its own to take: one at its start,
        // the others as it opens more, before any new one; below. A file placed on a
        // helper comes with its slots.)
        let takes = st.opts.connections;
        let n = if many.placed.is_some() {
            st.opts.connections
        } else {
            st.opts.connections.min(room_under_caps(
                &keys,
                st.opts.max_per_host,
                takes.min(st.opts.connections),
                (slots, reactor),
                (on, placed),
            ))
        };
        if n == 0 {
            // Its origins' caps are taken by the transfers running: it waits for one
            // of them to end. With none running, idle connections kept to its origins
            // fill them (another reactor's, which only a file placed there could
            // take): they are closed, here at once, on the helpers by message (it
            // starts when they said so).
            if !slots.iter().any(in_flight) {
                forget_idle(&keys, &|_| true, reactor, placed);
            }
            waiting.push_front((id, st));
            break;
        }
        if on == 0 {
            start(feed, cell, slots, lane, (id, st), keys, (n, !placing || alone), reactor);
        } else {
            place(feed, slots, lane, (id, st), keys, (n, on), reactor, placed);
        }
    }
}

/// Shows the feed the transfers in flight, here and placed on other reactors.
fn show_progress(feed: &mut dyn Feed, slots: &[Slot<'_>], started: Instant) {
    let flights: Vec<Flight> = slots
        .iter()
        .filter_map(|s| match s {
            Slot::Busy(r) => Some(r.transfer_loop.flight()),
            Slot::Placed(a) => Some(a.flight.clone()),
            _ => None,
        })
        .collect();
    feed.progress(&flights, started.elapsed());
}

/// Hands each completion reaped to its lane's transfer (the reactor's own lane: the
/// signal, the nudge, the helpers' bell); a lane that drained comes free.
fn reap(
    cell: &RingCell,
    (many, reactor): (&Many, &mut Reactor),
    slots: &mut [Slot<'_>],
    interrupted: &mut Option<&'static str>,
    syncs: &mut SyncGroup,
) -> Result<()> {
    while let Some((lane, c)) = cell.next_any() {
        if lane == RUN_LANE {
            if Tag::decode(c.tag) == Some(Tag::Synced) {
                syncs.on_done(cell, c, slots);
            } else {
                on_run_lane(cell, (many, reactor), c, slots, interrupted)?;
            }
            continue;
        }
        match slots.get_mut(usize::from(lane)) {
            Some(Slot::Busy(r)) => {
                if let Err(e) = r.transfer_loop.complete(c) {
                    // The transfer ends with it before another completion is taken:
                    // its end reaps what is left of its own (its writes) itself.
                    r.failed = Some(e);
                    break;
                }
            }
            Some(s @ Slot::Draining { .. }) if cell.in_flight(lane) == 0 => *s = Slot::Free,
            _ => {}
        }
    }
    Ok(())
}

/// Starts transfer `st` of file `id` on lane `lane` with `n` connection slots (`spreads`:
/// it may spread over the other reactors); a transfer that cannot start ends at once
/// (its failure goes to the feed).
#[allow(clippy::too_many_arguments)]
fn start<'c>(
    feed: &mut dyn Feed,
    cell: &'c RingCell,
    slots: &mut [Slot<'c>],
    lane: usize,
    (id, st): (usize, Start),
    keys: Vec<OriginKey>,
    (n, spreads): (usize, bool),
    reactor: &mut Reactor,
) {
    // `--threads`: a file in flight may spread over the other reactors while no other
    // holds them; its slot still counts all `n` connections under the caps (the other
    // reactors' among them). One that does not may later, alone in flight
    // ([`respread`]).
    let mut st = st;
    let may = st.opts.threads > 1 && super::may_spread(&st, st.opts.connections).is_ok();
    let remote = match super::spread(&mut st, n, reactor, spreads) {
        Ok(r) => r,
        Err(e) => {
            let _ = feed.ended(id, Err(e), st.report, None, reactor);
            return;
        }
    };
    let own = if remote.is_some() { st.opts.connections } else { n };
    match start_on(st, reactor, cell.lane(lane as u8), own, None, false) {
        Ok(mut transfer) => {
            transfer.remote = remote;
            if let Err(e) = transfer.arm_mail(None) {
                transfer.shared.fatal.get_or_insert(e);
            }
            slots[lane] = Slot::Busy(Box::new(Running {
                id,
                transfer_loop: transfer,
                keys,
                n,
                failed: None,
                syncing: false,
                released: false,
                respreads: may && !spreads,
                recalled: false,
            }));
        }
        Err(b) => {
            if let Some(rm) = remote {
                reactor.helpers_back(rm);
            }
            let (e, report) = *b;
            // (Nothing of it is on the ring: its lane stays free.)
            let _ = cell.cancel_lane(lane as u8);
            if cell.in_flight(lane as u8) > 0 {
                slots[lane] = Slot::Draining { _hold: None };
            }
            // (A transfer that did not start has no redirect to follow.)
            let _ = feed.ended(id, Err(e), report, None, reactor);
        }
    }
}

/// A transfer in flight (here or placed on another reactor).
fn in_flight(s: &Slot<'_>) -> bool {
    matches!(s, Slot::Busy(_) | Slot::Placed(_))
}

/// A transfer that only waits for its fsync, its connections handed back
/// ([`Loop::hand_back_idle`]).
fn released(s: &Slot<'_>) -> bool {
    matches!(s, Slot::Busy(r) if r.released)
}
