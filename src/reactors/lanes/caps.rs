//! The origins' caps over the transfers in flight: what each transfer's origins serve for
//! the others ([`share_origins`]), the room a starting transfer has under them
//! ([`room_under_caps`]), the room a running one takes once others ended
//! ([`grow_running`]), and the slots parked on a cap woken when a transfer to their origin
//! ends ([`wake_parked`]). Each origin's cap itself is one
//! [`crate::control::origin::OriginCap`].

use std::sync::atomic::Ordering;

use super::Slot;
use super::placing::HelperLedger;
use crate::control::origin::{OriginCap, OriginKey};
use crate::event::Reactor;

/// Tells each transfer how many requests the others have being served by each of its
/// origins — answered, a body coming ([`crate::control::origin::Origin::others`]), on
/// this reactor or placed on another: a server's cap counts them all, so a refusal while
/// another transfer is served is a cap (no failed try), what the server allows is learned
/// with them, and no transfer opens past it. A file placed on a helper is posted those of
/// the transfers on other reactors (its helper adds its own files', here too: those of a
/// placed transfer's [`PostedToPlaced::others`](crate::event::wire::PostedToPlaced) are added).
pub(super) fn share_origins(slots: &mut [Slot<'_>]) {
    let mut totals: Vec<(OriginKey, usize)> = Vec::new();
    let mut add = |key: &OriginKey, n: usize| match totals.iter_mut().find(|(k, _)| k == key) {
        Some(t) => t.1 += n,
        None => totals.push((key.to_owned(), n)),
    };
    for s in slots.iter() {
        match s {
            Slot::Busy(r) => {
                for o in 0..r.transfer_loop.shared.origins.len() {
                    add(r.transfer_loop.end_state.key(o), r.transfer_loop.serving(o));
                }
            }
            Slot::Placed(a) => {
                if let Some(k) = a.keys.first() {
                    add(k, a.serving);
                }
            }
            _ => {}
        }
    }
    let all = |key: &OriginKey| totals.iter().find(|(k, _)| k == key).map_or(0, |t| t.1);
    // (The requests of the files on helper `h` to `key`: its helper counts them.)
    let on_helper = |slots: &[Slot<'_>], h: usize, key: &OriginKey| -> usize {
        slots
            .iter()
            .filter_map(|s| match s {
                Slot::Placed(a) if a.helper == h && a.keys.first().is_some_and(|k| k == key) => Some(a.serving),
                _ => None,
            })
            .sum()
    };
    for lane in 0..slots.len() {
        let others = match &slots[lane] {
            Slot::Placed(a) => a.keys.first().map(|k| all(k) - on_helper(slots, a.helper, k)),
            _ => None,
        };
        match &mut slots[lane] {
            Slot::Busy(r) => {
                let placed = r.transfer_loop.posted_others();
                for o in 0..r.transfer_loop.shared.origins.len() {
                    let own = r.transfer_loop.serving(o);
                    r.transfer_loop.shared.origins[o].others = all(r.transfer_loop.end_state.key(o)) - own + placed;
                }
            }
            Slot::Placed(a) => {
                a.posted.others.store(others.unwrap_or(0), Ordering::Release);
            }
            _ => {}
        }
    }
}

/// Connection slots a transfer to the origins `keys` may have on reactor `on` (0: this
/// one): the least room left under any of their caps (`max_per_host`, or what the server
/// was seen allowing), counting the slots the running transfers hold — here and placed
/// on other reactors — and the idle connections kept to them on every reactor (of which
/// it takes at most `takes` of those on its own, before it opens any). For a running
/// transfer (among `slots`), the room beyond the slots it holds.
pub(super) fn room_under_caps(
    keys: &[OriginKey],
    max_per_host: usize,
    takes: usize,
    (slots, reactor): (&[Slot<'_>], &Reactor),
    (on, placed): (usize, &HelperLedger),
) -> usize {
    keys.iter()
        .map(|k| {
            // (What a server allows is the most any transfer saw it take, here or on
            // another reactor.)
            let cap = OriginCap::new(max_per_host, placed.learned(k, reactor));
            let held: usize = slots
                .iter()
                .filter_map(|s| match s {
                    Slot::Busy(r) if r.keys.contains(k) => Some(r.held()),
                    Slot::Placed(a) if a.keys.contains(k) => Some(a.held),
                    _ => None,
                })
                .sum();
            let idle_on = |r: usize| {
                if r == 0 {
                    reactor.idle_to(k)
                } else {
                    placed.idle_on(r, k)
                }
            };
            let idle: usize = (0..placed.idle.len().max(1)).map(idle_on).sum();
            // Open after it starts: the others' slots, the idle connections it leaves, and
            // its own (of which `takes` are idle ones it takes, not new).
            cap.room(held, idle, idle_on(on).min(takes))
        })
        .min()
        .unwrap_or(0)
}

/// Running transfers that started with fewer connection slots than they are worth (their
/// origins' caps were held by others then) take the room left since: more slots, up to
/// the connections their bytes are worth and `-x`, each with a read block of its reactor's
/// pool ([`crate::event::Loop::grow`]; one placed on another reactor is posted how many,
/// [`crate::event::wire::PostedToPlaced::more`]). Called only while no file waits to start (the
/// room is a waiting file's first). Not for a file spread over reactors (its slots are
/// `-x` already).
pub(super) fn grow_running(slots: &mut [Slot<'_>], reactor: &mut Reactor, placed: &mut HelperLedger) {
    for lane in 0..slots.len() {
        let Some(g) = growth(&slots[lane]) else { continue };
        let idle: Vec<usize> = (0..placed.idle.len().max(1))
            .filter(|&r| {
                g.keys
                    .iter()
                    .any(|k| useless_idle(k, (r, g.on), slots, reactor, placed))
            })
            .collect();
        if !idle.is_empty() {
            // Idle connections kept to its origins on other reactors count toward the caps
            // (the server may count them), and no file there takes them: they close, and the
            // room they held is this transfer's at a later turn.
            super::placing::forget_idle(&g.keys, &|r| idle.contains(&r), reactor, placed);
            continue;
        }
        // (Its own held slots are among those `room_under_caps` counts: what it gives is
        // room beyond them. Idle connections kept to its origins on its reactor count as
        // its to take: the adopt loop of `turns`, right after this, takes them before the
        // new slots open anything.)
        // (A file placed on a helper opens new connections only: the idle ones there are
        // not its to take.)
        let takes = if g.on == 0 { g.worth - g.n } else { 0 };
        let more = room_under_caps(&g.keys, g.max_per_host, takes, (slots, reactor), (g.on, placed)).min(g.worth - g.n);
        if more == 0 {
            continue;
        }
        match &mut slots[lane] {
            Slot::Busy(r) => {
                if let Some(pool) = reactor.read_pool() {
                    r.n += r.transfer_loop.grow(more, pool);
                }
            }
            Slot::Placed(a) => {
                a.posted.more.fetch_add(more, Ordering::AcqRel);
                a.n += more;
                // (Held from now on: its next flight says so too.)
                a.held += more;
            }
            _ => {}
        }
    }
}

/// What a running transfer could grow to.
struct Growth {
    /// The reactor it runs on, its origins, the slots it has and those its bytes are worth.
    on: usize,
    keys: Vec<OriginKey>,
    n: usize,
    worth: usize,
    max_per_host: usize,
}

/// How far the transfer in `slot` could grow: the connections the bytes it has still to
/// fetch are worth (as [`crate::schedule::connections_for`] counts them, up to its `-x`),
/// when more than the slots it has; none for one whose size is not known yet, that is
/// ending, spread over reactors or has no work for another connection.
fn growth(slot: &Slot<'_>) -> Option<Growth> {
    let g = match slot {
        Slot::Placed(a) => {
            // (As last told: its size known, what is in place.)
            let left = a.flight.total?.saturating_sub(a.flight.have);
            Growth {
                on: a.helper,
                keys: a.keys.clone(),
                n: a.n,
                worth: crate::schedule::connections_for(left, a.min_split, a.most, 1),
                max_per_host: a.max_per_host,
            }
        }
        Slot::Busy(r) => {
            let transfer = &r.transfer_loop.shared.transfer;
            let o = &r.transfer_loop.shared.opts;
            if r.syncing
                || r.released
                || r.failed.is_some()
                || r.transfer_loop.remote.is_some()
                || r.transfer_loop.shared.fatal.is_some()
                || !r.transfer_loop.wants_connection()
            {
                return None;
            }
            // (What the bytes still to fetch are worth now, not at its first answer.)
            let left = transfer.total?.saturating_sub(transfer.landed.bytes());
            Growth {
                on: 0,
                keys: r.keys.clone(),
                n: r.n,
                worth: transfer.wanted.min(crate::schedule::connections_for(
                    left,
                    o.min_split_size,
                    o.connections,
                    transfer.mirrors.len(),
                )),
                max_per_host: o.max_per_host,
            }
        }
        _ => return None,
    };
    (g.worth > g.n).then_some(g)
}

/// A transfer to the origins `keys` that held `freed` connection slots ended (its
/// connections to them closed or went idle): as many of the running transfers' slots
/// parked on those origins' caps ask again now (those inside a Retry-After when it ends)
/// ([`crate::event::Loop::wake_parked`]; a transfer placed on another reactor by a posted
/// wake), not up to [`crate::event::retry::CAP_RETRY_MOST`] later. Transfers served
/// nothing by an origin go first (a running file's parked slot would otherwise take the
/// room a file that has no connection waits for). `on`: the helper the transfer ran on (0:
/// this reactor); that helper woke its own files' slots.
pub(super) fn wake_parked(slots: &mut [Slot<'_>], keys: &[OriginKey], freed: usize, on: usize) {
    for key in keys {
        // (lane, the transfer's index of the origin — none for a placed one —, served nothing)
        let mut parked: Vec<(usize, Option<usize>, bool)> = slots
            .iter()
            .enumerate()
            .filter_map(|(lane, s)| match s {
                Slot::Busy(r) => r
                    .transfer_loop
                    .parked_on(key)
                    .map(|o| (lane, Some(o), r.transfer_loop.serving(o) == 0)),
                // (A file on the helper the ended one ran on was woken there.)
                Slot::Placed(a) if a.parked && a.keys.contains(key) && (on == 0 || a.helper != on) => {
                    Some((lane, None, a.serving == 0))
                }
                _ => None,
            })
            .collect();
        parked.sort_by_key(|p| !p.2);
        let mut left = freed.max(1);
        for (lane, o, _) in parked {
            if left == 0 {
                break;
            }
            match (&mut slots[lane], o) {
                (Slot::Busy(r), Some(o)) => left -= r.transfer_loop.wake_parked(o, left).min(left),
                (Slot::Placed(a), None) => {
                    // (How many it has parked is not known here: one place, one slot.)
                    a.posted.wake.store(true, Ordering::Release);
                    a.parked = false;
                    left -= 1;
                }
                _ => {}
            }
        }
    }
}

/// Reactor `r` (not `on`, the growing transfer's) keeps connections idle to origin `key`
/// that no transfer there takes and that it can close now: this one with no transfer to
/// `key` running here, a helper running no file (it reads orders between files) and not
/// asked already.
fn useless_idle(
    key: &OriginKey,
    (r, on): (usize, usize),
    slots: &[Slot<'_>],
    reactor: &Reactor,
    placed: &HelperLedger,
) -> bool {
    if r == on {
        return false;
    }
    if r == 0 {
        return reactor.idle_to(key) > 0
            && !slots
                .iter()
                .any(|s| matches!(s, Slot::Busy(b) if b.keys.iter().any(|k| k == key)));
    }
    placed.idle_on(r, key) > 0
        && !placed.forgetting[r]
        && !slots.iter().any(|s| matches!(s, Slot::Placed(a) if a.helper == r))
}
