//! Which pieces come from seeds and which are fetched, and the remote ranges that fetch
//! them: neighbours coalesced, small gaps between them bridged (one request costs more
//! than re-fetching a few KiB).

use super::{Finds, Found, Index};

/// Gaps between two fetched ranges up to this many bytes are fetched too: the engine
/// widens every range to its 4 KiB O_DIRECT alignment anyway, and a request's head both
/// ways costs more than the rest of a block.
pub const BRIDGE: u64 = 4 << 10;

/// Where each piece of the target comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum From {
    /// Seed `seed` (its index among `--seed`s) holds it ([`Found`]).
    Seed(usize, Found),
    /// It is fetched.
    Fetched,
}

/// `seed_of` for a fetched piece; seeds from this index on are not used.
const FETCHED: u8 = u8::MAX;

/// A delta's plan: each piece's source and the remote ranges to fetch. Per piece it
/// keeps one byte (which seed) besides the seeds' own [`Finds`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Per piece, in the index's order: the seed that gives it, or [`FETCHED`].
    seed_of: Vec<u8>,
    /// Each seed's scan.
    finds: Vec<Finds>,
    /// Remote `[start, end)` ranges to fetch, sorted, disjoint, gaps over [`BRIDGE`].
    pub ranges: Vec<(u64, u64)>,
    /// Target bytes the seeds give.
    pub reused: u64,
    /// Target bytes of the fetched pieces.
    pub fetched_target: u64,
}

impl Plan {
    /// The plan for `index` given what each seed's scan found (`found[s]`: seed `s`; the
    /// first seed that has a piece gives it; seeds past the 255th are not used), plus the
    /// index's always fetched range.
    pub fn of(index: &dyn Index, found: Vec<Finds>, bridge: u64) -> Plan {
        let mut plan = Plan {
            seed_of: Vec::with_capacity(index.piece_count()),
            finds: found,
            ..Plan::default()
        };
        plan.finds.truncate(usize::from(FETCHED));
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for i in 0..index.piece_count() {
            let p = index.piece(i);
            match plan.finds.iter().position(|f| f.get(i).is_some()) {
                Some(s) => {
                    plan.seed_of.push(s as u8);
                    plan.reused += p.target_len;
                }
                None => {
                    plan.seed_of.push(FETCHED);
                    plan.fetched_target += p.target_len;
                    let r = (p.remote_start, p.remote_start + p.remote_len);
                    // (Pieces come in remote order: neighbours merge as they come.)
                    match ranges.last_mut() {
                        Some(last) if last.1 == r.0 => last.1 = r.1,
                        _ => ranges.push(r),
                    }
                }
            }
        }
        ranges.extend(index.always_fetch());
        ranges.sort_unstable();
        plan.ranges = coalesce(&ranges, bridge);
        plan
    }

    /// Pieces.
    pub fn len(&self) -> usize {
        self.seed_of.len()
    }

    /// No pieces.
    pub fn is_empty(&self) -> bool {
        self.seed_of.is_empty()
    }

    /// Where piece `i` comes from.
    pub fn from(&self, i: usize) -> From {
        match self.seed_of[i] {
            FETCHED => From::Fetched,
            s => match self.finds[usize::from(s)].get(i) {
                Some(at) => From::Seed(usize::from(s), at),
                None => From::Fetched,
            },
        }
    }

    /// Whether some piece is fetched.
    pub fn any_fetched(&self) -> bool {
        self.seed_of.contains(&FETCHED)
    }

    /// Remote bytes the ranges cover.
    pub fn bytes(&self) -> u64 {
        self.ranges.iter().map(|r| r.1 - r.0).sum()
    }
}

/// Sorted ranges merged where they touch, overlap or lie at most `bridge` bytes apart;
/// empty ranges dropped.
pub fn coalesce(sorted: &[(u64, u64)], bridge: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &(a, b) in sorted.iter().filter(|r| r.0 < r.1) {
        match out.last_mut() {
            Some(last) if a <= last.1.saturating_add(bridge) => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_merge_and_small_gaps_are_bridged() {
        let r = [(0, 10), (10, 20), (25, 30), (100, 110), (105, 120), (200, 200)];
        assert_eq!(coalesce(&r, 5), [(0, 30), (100, 120)]);
        assert_eq!(coalesce(&r, 0), [(0, 20), (25, 30), (100, 120)]);
        assert_eq!(coalesce(&r, 80), [(0, 120)]);
    }
}
