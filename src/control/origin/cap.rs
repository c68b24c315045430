//! The connection cap of one origin: how many connections may be open to its server at
//! once, and whether one more may open. The places that ask whether one more may open —
//! a transfer's slot about to connect (the loop's `origin_room`), a file about
//! to start on a lane or be placed on a helper, a running file that may grow — ask an
//! [`OriginCap`]; a transfer spread over reactors takes its share of the configured bound
//! with [`shares`].
//!
//! A cap has two bounds:
//! - the *configured* one, `--max-connections-per-host` (under `--threads`, each
//!   reactor's share of it: [`OriginCap::share`]); it counts the connections on this
//!   reactor's ring;
//! - the *learned* one, what the server was seen allowing when it turned an extra
//!   connection away ([`super::Origin::allows`]: the most seen, at least 1; kept with the
//!   origin for the run's later files, and the most any reactor saw); it counts every
//!   request to the server, on any ring and any reactor.
//!
//! What counts against them: the connections a transfer has open, the requests the other
//! transfers on the ring have on the wire ([`super::Origin::others`]) and those of the
//! transfer's other reactors ([`super::Origin::remote`]); for a file about to start, the
//! slots the running files hold and the idle connections kept to the origin on every
//! reactor (of which the file takes those on its own reactor first: lent, not new).

/// The two bounds on the connections to one origin (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OriginCap {
    /// `--max-connections-per-host` (this reactor's share of it).
    configured: usize,
    /// What the server was seen allowing, if it turned a connection away.
    learned: Option<usize>,
}

impl OriginCap {
    /// The cap of `configured` connections (`--max-connections-per-host`), lowered to
    /// `learned` when the server was seen allowing no more.
    pub(crate) fn new(configured: usize, learned: Option<usize>) -> OriginCap {
        OriginCap { configured, learned }
    }

    /// The most connections at once to the origin: the lower of the two bounds.
    pub(crate) fn limit(&self) -> usize {
        self.learned.unwrap_or(usize::MAX).min(self.configured)
    }

    /// Whether one more connection may open, with `open` of the transfer's own on this
    /// ring, `others` requests of the other transfers on the ring and `elsewhere` those
    /// outside the transfer's own connections here (the other transfers' and its other
    /// reactors': [`super::Origin::elsewhere`]). The configured bound counts this ring's;
    /// the learned one counts every reactor's.
    pub(crate) fn may_open_one(&self, open: usize, others: usize, elsewhere: usize) -> bool {
        open + others < self.configured && open + elsewhere < self.learned.unwrap_or(usize::MAX)
    }

    /// Connection slots a file to the origin may have: the room left under the cap by
    /// the `held` slots of the running files and the `idle` connections kept to it on
    /// every reactor, of which `takes_idle` are ones it takes (on its own reactor) rather
    /// than open anew. For a running file, the room beyond the slots it holds.
    pub(crate) fn room(&self, held: usize, idle: usize, takes_idle: usize) -> usize {
        let cap = self.limit();
        (cap + takes_idle).saturating_sub(held + idle).min(cap)
    }

    /// The slots a file of `connections` (`-x`) that has `n` may grow to: its `-x` under
    /// the cap, never fewer than it has.
    pub(crate) fn most(&self, connections: usize, n: usize) -> usize {
        connections.min(self.limit()).max(n)
    }

    /// What the server allows after it turned a connection away while it served `took`:
    /// the most seen so far (`seen`) or now, at least 1.
    pub(crate) fn learn(seen: Option<usize>, took: usize) -> usize {
        seen.unwrap_or(0).max(took).max(1)
    }

    /// What two reactors (or transfers) learned of one server, together: the most either
    /// saw it take.
    pub(crate) fn most_seen(a: Option<usize>, b: Option<usize>) -> Option<usize> {
        a.into_iter().chain(b).max()
    }

    /// A reactor's share of `--max-connections-per-host` (`configured`) when it has `own`
    /// of the transfer's connections (`--threads`): the reactors' together stay under it.
    pub(crate) fn share(configured: usize, own: usize) -> usize {
        configured.min(own)
    }
}

/// Connections per reactor when `connections` are spread over `threads` reactors: the
/// owner's first, each at least one; fewer reactors than `threads` when there are fewer
/// connections. `[x / t + 1, …, x / t]`.
pub(crate) fn shares(connections: usize, threads: usize) -> Vec<usize> {
    let t = threads.min(connections).max(1);
    (0..t)
        .map(|k| connections / t + usize::from(k < connections % t))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{OriginCap, shares};

    #[test]
    fn connections_are_shared_out_owner_first_and_never_zero() {
        assert_eq!(shares(4, 2), [2, 2]);
        assert_eq!(shares(5, 2), [3, 2]);
        assert_eq!(shares(16, 4), [4, 4, 4, 4]);
        assert_eq!(shares(1, 4), [1], "one connection: one reactor");
        assert_eq!(shares(3, 8), [1, 1, 1]);
        assert_eq!(shares(4, 1), [4]);
    }

    #[test]
    fn one_more_opens_under_both_bounds_each_counting_its_own() {
        let c = OriginCap::new(4, Some(3));
        assert!(c.may_open_one(2, 0, 0));
        // (The configured bound counts this ring's: the other reactors' do not.)
        assert!(!c.may_open_one(2, 2, 2));
        assert!(!c.may_open_one(1, 0, 2), "the learned bound counts every reactor's");
        assert!(OriginCap::new(4, None).may_open_one(3, 0, 10));
    }

    #[test]
    fn room_counts_held_slots_and_idle_connections_but_lends_the_idle_ones_it_takes() {
        let c = OriginCap::new(4, None);
        assert_eq!(c.room(0, 0, 0), 4);
        assert_eq!(c.room(3, 0, 0), 1);
        assert_eq!(c.room(2, 2, 0), 0);
        assert_eq!(c.room(2, 2, 2), 2, "the idle connections it takes are its own");
        assert_eq!(OriginCap::new(8, Some(2)).room(0, 0, 5), 2, "never more than the cap");
    }

    #[test]
    fn what_is_learned_is_the_most_seen_and_at_least_one() {
        assert_eq!(OriginCap::learn(None, 0), 1);
        assert_eq!(OriginCap::learn(Some(3), 2), 3);
        assert_eq!(OriginCap::most_seen(Some(2), None), Some(2));
        assert_eq!(OriginCap::most_seen(Some(2), Some(5)), Some(5));
        assert_eq!(OriginCap::new(16, Some(3)).most(8, 1), 3);
        assert_eq!(OriginCap::new(16, Some(3)).most(8, 5), 5);
        assert_eq!(OriginCap::share(16, 3), 3);
    }
}
