//! The origins' caps over the transfers in flight: what each transfer's origins serve for
//! the others ([`share_origins`]), the room a starting transfer has under them
//! ([`room`]), the room a running one takes once others ended ([`grow`]), and the slots
//! parked on a cap woken when a transfer to their origin ends ([`wake_parked`]).

use std::sync::atomic::Ordering;

use super::Slot;
use super::placing::Placed;
use crate::event::reactor::Reactor;

/// Tells each transfer how many requests the others have being served by each of its
/// origins — answered, a body coming ([`crate::control::origin::Origin::others`]), on
/// this reactor or placed on another: a server's cap counts them all, so a refusal while
/// another transfer is served is a cap (no failed try), what the server allows is learned
/// with them, and no transfer opens past it.
pub(super) fn share_origins(slots: &mut [Slot<'_>]) {
    let mut totals: Vec<(String, usize)> = Vec::new();
    let mut add = |key: &str, n: usize| match totals.iter_mut().find(|(k, _)| k == key) {
        Some(t) => t.1 += n,
        None => totals.push((key.to_owned(), n)),
    };
    for s in slots.iter() {
        match s {
            Slot::Busy(r) => {
                for o in 0..r.dl.sh.origins.len() {
                    add(r.dl.fin.key(o), r.dl.serving(o));
                }
            }
            Slot::Away(a) => {
                if let Some(k) = a.keys.first() {
                    add(k, a.serving);
                }
            }
            _ => {}
        }
    }
    let all = |key: &str| totals.iter().find(|(k, _)| k == key).map_or(0, |t| t.1);
    for s in slots.iter_mut() {
        match s {
            Slot::Busy(r) => {
                for o in 0..r.dl.sh.origins.len() {
                    let own = r.dl.serving(o);
                    r.dl.sh.origins[o].others = all(r.dl.fin.key(o)) - own;
                }
            }
            Slot::Away(a) => {
                let others = a.keys.first().map_or(0, |k| all(k) - a.serving);
                a.posted.others.store(others, Ordering::Release);
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
pub(super) fn room(
    keys: &[String],
    max_per_host: usize,
    takes: usize,
    (slots, reactor): (&[Slot<'_>], &Reactor),
    (on, placed): (usize, &Placed),
) -> usize {
    keys.iter()
        .map(|k| {
            // (What a server allows is the most any transfer saw it take, here or on
            // another reactor.)
            let learned = placed.learned.iter().find(|(x, _)| x == k).map(|x| x.1);
            let cap = reactor
                .allows(k)
                .into_iter()
                .chain(learned)
                .max()
                .unwrap_or(usize::MAX)
                .min(max_per_host);
            let held: usize = slots
                .iter()
                .filter_map(|s| match s {
                    Slot::Busy(r) if r.keys.contains(k) => Some(r.held()),
                    Slot::Away(a) if a.keys.contains(k) => Some(a.held),
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
            (cap + idle_on(on).min(takes)).saturating_sub(held + idle).min(cap)
        })
        .min()
        .unwrap_or(0)
}

/// Running transfers that started with fewer connection slots than they are worth (their
/// origins' caps were held by others then) take the room left since: more slots, up to
/// the connections their bytes are worth and `-x`, each with a read block of the reactor's
/// pool ([`crate::event::Loop::grow`]). Called only while no file waits to start (the room
/// is a waiting file's first). Not for a file spread over reactors (its slots are `-x`
/// already) nor one placed on another reactor.
pub(super) fn grow(slots: &mut [Slot<'_>], reactor: &Reactor, placed: &Placed) {
    for lane in 0..slots.len() {
        let Slot::Busy(r) = &slots[lane] else { continue };
        let tr = &r.dl.sh.tr;
        // (What the bytes still to fetch are worth now, not at its first answer.)
        let left = tr.total.unwrap_or(0).saturating_sub(tr.landed.bytes());
        let o = &r.dl.sh.opts;
        let worth = tr.wanted.min(crate::schedule::connections_for(
            left,
            o.min_split_size,
            o.connections,
            tr.mirrors.len(),
        ));
        if r.n >= worth
            || r.syncing
            || r.failed.is_some()
            || r.dl.remote.is_some()
            || tr.total.is_none()
            || r.dl.sh.fatal.is_some()
            || !r.dl.wants_connection()
        {
            continue;
        }
        // (Its own held slots are among those `room` counts: what it gives is room beyond
        // them. Idle connections kept to its origins count as its to take: the adopt loop
        // of `turns`, right after this, takes them before the new slots open anything.)
        let more = room(
            &r.keys,
            r.dl.sh.opts.max_per_host,
            worth - r.n,
            (slots, reactor),
            (0, placed),
        )
        .min(worth - r.n);
        if more == 0 {
            continue;
        }
        if let Slot::Busy(r) = &mut slots[lane] {
            r.n += r.dl.grow(more, reactor);
        }
    }
}

/// A transfer to the origins `keys` ended (its connections to them closed or went idle):
/// the running transfers' slots parked on those origins' caps by our own backoff ask again
/// now ([`crate::event::Loop::wake_parked`]), not up to [`crate::event::retry::CAP_RETRY_MOST`]
/// later. Transfers served nothing by an origin go first: when one has slots parked on it,
/// only such transfers' slots are woken (a running file's parked slot would otherwise take
/// the room a file that has no connection waits for).
pub(super) fn wake_parked(slots: &mut [Slot<'_>], keys: &[String]) {
    for key in keys {
        let parked: Vec<(usize, usize, bool)> = slots
            .iter()
            .enumerate()
            .filter_map(|(lane, s)| match s {
                Slot::Busy(r) => r.dl.parked_on(key).map(|o| (lane, o, r.dl.serving(o) == 0)),
                _ => None,
            })
            .collect();
        let starving = parked.iter().any(|p| p.2);
        for (lane, o, none) in parked {
            if let Slot::Busy(r) = &mut slots[lane]
                && (none || !starving)
            {
                r.dl.wake_parked(o);
            }
        }
    }
}
