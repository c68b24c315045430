//! One step of every transfer of a run of many files: each driven on its lane, a file
//! whose bytes are all off the wire giving its connections and place back, a finished
//! one readied for the run's sync group, and those that ended handed to the feed.

use super::adopt::adopt;
use super::caps::wake_parked;
use super::sync::SyncGroup;
use super::{Feed, Running, Slot, Waiting, respread};
use crate::err;
use crate::error::Result;
use crate::event::end;
use crate::event::reactor::Reactor;
use crate::lane::RingCell;

/// Drives each transfer on its lane one step, and ends those that are done (their ends
/// go to the feed; a redirect or a restart waits at the front). Returns whether a lane
/// came free or a file waits to start again.
pub(super) fn step_lanes<'c>(
    feed: &mut dyn Feed,
    cell: &'c RingCell,
    reactor: &mut Reactor,
    (slots, waiting): (&mut [Slot<'c>], &mut Waiting),
    (interrupted, syncs): (Option<&'static str>, &mut SyncGroup),
) -> Result<bool> {
    let mut freed = false;
    #[allow(clippy::needless_range_loop)] // (the slot is replaced by index)
    for lane in 0..slots.len() {
        let Slot::Busy(r) = &mut slots[lane] else { continue };
        let (was, held, syncing) = (r.released, r.held(), r.syncing);
        let step = step_one(r, reactor);
        if r.syncing && !syncing {
            // Its bytes are all in: it waits for the run's next sync.
            syncs.join(lane, r);
        }
        if r.released && !was {
            // Its connections went idle to the reactor: slots parked on its origins' caps
            // ask now, and a lane may take the next file.
            let keys = r.keys.clone();
            wake_parked(slots, &keys, held, 0);
            freed = true;
        }
        let Some(step) = step else { continue };
        let Slot::Busy(r) = std::mem::replace(&mut slots[lane], Slot::Draining { _hold: None }) else {
            unreachable!("matched Busy above")
        };
        let freed_slots = r.held();
        let (outcome, report, failed, hold) = end(r.transfer_loop, step, reactor);
        let outcome = if r.recalled {
            respread::recalled(outcome, interrupted)
        } else {
            outcome
        };
        // Its connections closed or went idle: slots parked on its origins' caps ask now.
        wake_parked(slots, &r.keys, freed_slots, 0);
        // Its ops still in flight (the tick, reads of connections not kept) come back
        // cancelled before the lane takes another transfer.
        cell.cancel_lane(lane as u8)
            .map_err(|e| err!(LocalIo, "io_uring_enter: {e}"))?;
        if cell.in_flight(lane as u8) == 0 {
            slots[lane] = Slot::Free;
            freed = true;
        } else {
            slots[lane] = Slot::Draining { _hold: hold };
        }
        if let Some(again) = feed.ended(r.id, outcome, report, failed, reactor) {
            waiting.push_front((r.id, again));
            freed = true;
        }
    }
    Ok(freed)
}

/// One step of transfer `r`: its end when it has one (as [`crate::event::Loop::step`]
/// gives it), else `None`. A finished file's output is readied for its sync, which runs
/// beside the other transfers (the run's [`SyncGroup`] starts it).
fn step_one(r: &mut Running<'_>, reactor: &mut Reactor) -> Option<Result<Option<(usize, http::Url)>>> {
    // (Connections a transfer that ended earlier in this pass left idle.)
    adopt(r, reactor);
    // Connections that waited for a write block the lanes share, freed by another.
    if r.failed.is_none()
        && !r.transfer_loop.sink.waiting.is_empty()
        && r.transfer_loop.sink.pool.available() > 0
        && let Err(e) = r.transfer_loop.wake_waiting()
    {
        r.failed = Some(e);
    }
    let step = match r.failed.take() {
        Some(e) => Some(Err(e)),
        None if r.syncing => r.transfer_loop.end_state.synced.is_some().then_some(Ok(None)),
        None => {
            let s = r.transfer_loop.step();
            if s.is_none() && !r.released && r.transfer_loop.received() {
                // Its bytes are all off the wire, some still on their way to the disk:
                // its connections and its place go to the next file now, not after the
                // writes (a new request overlaps them).
                r.released = r.transfer_loop.hand_back_idle(reactor);
            }
            s
        }
    };
    match step {
        Some(Ok(None)) if !r.syncing && !r.transfer_loop.shared.transfer.not_modified => {
            match r.transfer_loop.ready_to_sync() {
                Ok(true) => {
                    r.syncing = true;
                    r.released |= r.transfer_loop.hand_back_idle(reactor);
                    None
                }
                Ok(false) => Some(Ok(None)),
                Err(e) => Some(Err(e)),
            }
        }
        s => s,
    }
}
