//! `-j`: idle connections kept by the reactor go to the running transfers that would open
//! new ones to the same origins, before they open them.

use super::{Running, Slot};
use crate::event::Reactor;

/// A transfer that would open another connection takes one another left idle to the same
/// origin first (a large file after small ones); those served nothing by any origin go
/// first (a running file would otherwise take the connection one with none waits for).
/// (The drive loop adopts again before each step: connections a transfer that ended
/// earlier in the same pass left.)
pub(super) fn adopt_idle(slots: &mut [Slot<'_>], reactor: &mut Reactor) {
    let mut lanes: Vec<(bool, usize)> = slots
        .iter()
        .enumerate()
        .filter_map(|(lane, s)| match s {
            Slot::Busy(r) => Some((
                (0..r.transfer_loop.shared.origins.len()).any(|o| r.transfer_loop.serving(o) > 0),
                lane,
            )),
            _ => None,
        })
        .collect();
    lanes.sort_unstable();
    for (_, lane) in lanes {
        if let Slot::Busy(r) = &mut slots[lane] {
            adopt(r, reactor);
        }
    }
}

/// Transfer `r` takes the idle connections to its origins it would open new ones for.
pub(super) fn adopt(r: &mut Running<'_>, reactor: &mut Reactor) {
    if r.failed.is_some()
        || r.syncing
        || r.released
        || r.transfer_loop.shared.fatal.is_some()
        || r.transfer_loop.shared.transfer.redirect.is_some()
    {
        return;
    }
    while let Some((i, o)) = r.transfer_loop.would_connect() {
        let key = r.transfer_loop.end_state.key(o);
        let Some(c) = reactor.take_idle(key, 1, r.transfer_loop.end_state.engine).pop() else {
            // Idle ones it cannot take (set up for another engine) were counted as its own
            // by `room_under_caps`: one closes for the connection it opens.
            reactor.forget_one_idle(key);
            break;
        };
        r.transfer_loop.adopt(i, c);
    }
}
