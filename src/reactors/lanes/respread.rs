//! `--threads N`, a list: a file left alone in flight spreads. While several files are in
//! flight each runs whole on one reactor ([`super::placing`]); once the list has no file
//! left to start and one large file still runs, the other reactors idle. That file's
//! transfer is then stopped as at SIGINT (what landed stays, its control file names it),
//! and its feed starts it again at once as a resume ([`Outcome::Recalled`]): alone in
//! flight, the new transfer spreads its segments over every reactor
//! ([`crate::reactors::spread`]).

use super::{Outcome, Slot, in_flight};
use crate::err;
use crate::error::{Kind, Result};
use crate::report::Note;

/// Bytes still to come that make a restart worth it, in `--min-split-size`s per reactor:
/// each reactor then has segments of its own to fetch, and the restart (the bodies in
/// flight dropped, connections opened again) is small beside them.
const SPLITS_PER_REACTOR: u64 = 4;

/// What stopped the transfer, as its end says it ("interrupted by …", then what landed
/// and where): a signal after it takes its place ([`recalled`]).
const RESTART: &str = "a restart to spread over the reactors";

/// The one file in flight, when the list has none left to start, is stopped to start
/// again spread over the `threads` reactors, if it may spread (its `respreads`, decided
/// at its start: one mirror, `-x` above 1, no `--limit-rate`, a regular file)
/// and its transfer may resume so ([`crate::report::Flight::ranged`]) with enough left
/// ([`SPLITS_PER_REACTOR`]). Once per file: a file started again spreads, or runs alone
/// where it is.
pub(super) fn recall_alone(slots: &mut [Slot<'_>], threads: usize) {
    let mut flying = slots.iter_mut().filter(|s| in_flight(s));
    let (Some(s), None) = (flying.next(), flying.next()) else {
        return;
    };
    match s {
        Slot::Busy(r)
            if r.respreads
                && !r.recalled
                && !r.syncing
                && !r.released
                && r.failed.is_none()
                && r.transfer_loop.shared.fatal.is_none()
                && r.transfer_loop.remote.is_none()
                && r.transfer_loop.shared.transfer.redirect.is_none() =>
        {
            let transfer = &r.transfer_loop.shared.transfer;
            match worth(
                (
                    r.transfer_loop.may_resume_spread(),
                    transfer.total,
                    transfer.landed.bytes(),
                ),
                r.transfer_loop.shared.opts.min_split_size,
                threads,
            ) {
                Worth::Restart(left) => {
                    r.recalled = true;
                    r.transfer_loop.shared.report.note(Note::Respread { left });
                    r.transfer_loop.shared.fatal = Some(err!(Interrupted, "interrupted by {RESTART}"));
                }
                Worth::Never => r.respreads = false,
                Worth::NotYet => {}
            }
        }
        Slot::Placed(a) if a.respreads && !a.recalled => {
            let f = &a.flight;
            match worth((f.ranged, f.total, f.have), a.min_split, threads) {
                Worth::Restart(left) => {
                    a.recalled = true;
                    a.report.note(Note::Respread { left });
                    // (Its helper's ring is woken: the transfer ends keeping what landed.)
                    a.posted.post_stop(RESTART);
                }
                Worth::Never => a.respreads = false,
                Worth::NotYet => {}
            }
        }
        _ => {}
    }
}

/// What a restart is worth now.
enum Worth {
    /// Started again, these bytes still to come spread.
    Restart(u64),
    /// Not yet: its first answer, or its first byte on disk, is still to come.
    NotYet,
    /// Never: too little is left (it only shrinks).
    Never,
}

/// What a restart over `threads` reactors with `min_split`-byte splits is worth for a
/// transfer that may resume spread (`ranged`: [`crate::report::Flight::ranged`], its first answer
/// planned) with `have` of `total` bytes landed.
fn worth((ranged, total, have): (bool, Option<u64>, u64), min_split: u64, threads: usize) -> Worth {
    // (Once a byte landed: a transfer that ends with none removes its `.part`.)
    let (true, Some(total)) = (ranged && have > 0, total) else {
        return Worth::NotYet;
    };
    let left = total.saturating_sub(have);
    if left >= SPLITS_PER_REACTOR * min_split.max(1) * threads as u64 {
        Worth::Restart(left)
    } else {
        Worth::Never
    }
}

/// The end `r` of a transfer stopped by [`recall_alone`]: a stop as asked is
/// [`Outcome::Recalled`] (its feed starts it again), unless the run was stopped since
/// (`stop`: the signal's name, or the run's failure): then the file ends interrupted by
/// that (what landed and where, as said). Any other end (it landed, or failed first)
/// stays.
pub(super) fn recalled(r: Result<Outcome>, stop: Option<&str>) -> Result<Outcome> {
    match (r, stop) {
        (Err(e), None) if e.kind == Kind::Interrupted => Ok(Outcome::Recalled),
        (Err(mut e), Some(name)) if e.kind == Kind::Interrupted => {
            e.msg = e.msg.replacen(RESTART, name, 1);
            Err(e)
        }
        (r, _) => r,
    }
}
