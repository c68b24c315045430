//! A loop as the run of several transfers sees it (`-j`, `--threads`): the line the
//! progress shows of it, the connection slots it holds against its origins' caps, the
//! slot that would open a connection next, and an idle connection another transfer left
//! adopted into a slot.

use std::time::Instant;

use crate::control::St;
use crate::event::Loop;
use crate::event::owner::Remote;
use crate::report::Flight;

impl Loop<'_> {
    /// Connection slots of its `n` it holds against its origins' caps: all of them until
    /// its size is known, then those it may open (and at least those open).
    pub(crate) fn held(&self, n: usize) -> usize {
        let open = self.conns.iter().filter(|c| c.st != St::Closed).count();
        if self.shared.transfer.total.is_some() {
            self.shared.transfer.wanted.min(n).max(open)
        } else {
            n
        }
    }

    /// A connection slot that would open a new connection now (`kick`'s rule: work for
    /// it, room under the transfer's and its origin's counts), and the index of its
    /// origin among the transfer's.
    pub(crate) fn would_connect(&self) -> Option<(usize, usize)> {
        if !self.wants_connection() {
            return None;
        }
        let single = self.shared.transfer.plan.is_planned() && !self.shared.transfer.ranges;
        if single && self.conns.iter().any(|c| c.st != St::Closed) {
            return None;
        }
        let now = Instant::now();
        let i = (0..self.conns.len()).find(|&i| {
            let c = &self.conns[i];
            c.st == St::Closed
                && !c.deferred
                && !c.busy()
                && !c.dead
                && c.rx.job.is_none()
                && c.not_before.is_none_or(|t| t <= now)
                && self.may_connect(i)
                && self.may_open(i)
        })?;
        Some((i, self.shared.transfer.mirrors[self.conns[i].mirror].origin))
    }

    /// Slot `i` takes `conn`, a connection another transfer left open and idle to the same
    /// origin: no connect, no handshake (its slot's unused read block goes back).
    pub(crate) fn adopt(&mut self, i: usize, mut conn: crate::control::Conn) {
        conn.mirror = self.conns[i].mirror;
        conn.engaged = true;
        self.conns[i] = conn;
        // (Its requests are counted for this transfer from now on.)
        self.shared.used[i] = false;
    }

    /// A resume of this transfer could spread over other reactors ([`Flight::ranged`]): its
    /// first answer planned a regular file served in ranges, with a validator and a size,
    /// and it fetches the whole file (not a part of another reactor's), in any order, at
    /// its own pace, with no failure pending.
    pub(crate) fn may_resume_spread(&self) -> bool {
        let transfer = &self.shared.transfer;
        transfer.plan.is_planned()
            && transfer.ranges
            && transfer.file
            && !transfer.sequential
            && !transfer.plain_get
            && !transfer.changed
            && transfer.validator.is_some()
            && transfer.total.is_some()
            && transfer.room().is_none()
            && transfer.part.is_none()
            && self.shared.fatal.is_none()
    }

    /// The connections with a body of this transfer coming: this reactor's, and with
    /// `--threads` the other reactors' the server is serving.
    pub(crate) fn live(&self) -> usize {
        self.conns.iter().filter(|c| c.rx.job.is_some()).count() + self.remote.as_ref().map_or(0, Remote::serving)
    }

    /// What the run's progress line shows of this transfer.
    pub(crate) fn flight(&self) -> Flight {
        // (A partial fetch counts only its own ranges, as the one-file line does.)
        let (have, total, _) = self.shared.transfer.shown();
        Flight {
            name: Flight::name_of(&self.shared.transfer.out_name),
            have,
            total,
            fetched: self.shared.transfer.received,
            live: self.live(),
            ranged: self.may_resume_spread(),
        }
    }
}
