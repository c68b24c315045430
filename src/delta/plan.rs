//! Which pieces come from seeds and which are fetched, and the remote ranges that fetch
//! them: neighbours coalesced, small gaps between them bridged (one request costs more
//! than re-fetching a few KiB).

use super::{Found, Index};

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

/// A delta's plan: each piece's source and the remote ranges to fetch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Per piece, in the index's order.
    pub from: Vec<From>,
    /// Remote `[start, end)` ranges to fetch, sorted, disjoint, gaps over [`BRIDGE`].
    pub ranges: Vec<(u64, u64)>,
    /// Target bytes the seeds give.
    pub reused: u64,
    /// Target bytes of the fetched pieces.
    pub fetched_target: u64,
}

impl Plan {
    /// The plan for `index` given what each seed's scan found (`found[s][i]`: seed `s`,
    /// piece `i`; the first seed that has a piece gives it), plus the index's always
    /// fetched range.
    pub fn of(index: &dyn Index, found: &[Vec<Option<Found>>], bridge: u64) -> Plan {
        let mut plan = Plan::default();
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for (i, p) in index.pieces().iter().enumerate() {
            let hit = found
                .iter()
                .enumerate()
                .find_map(|(s, f)| f.get(i).copied().flatten().map(|at| (s, at)));
            match hit {
                Some((s, at)) => {
                    plan.from.push(From::Seed(s, at));
                    plan.reused += p.target_len;
                }
                None => {
                    plan.from.push(From::Fetched);
                    plan.fetched_target += p.target_len;
                    ranges.push((p.remote_start, p.remote_start + p.remote_len));
                }
            }
        }
        ranges.extend(index.always_fetch());
        ranges.sort_unstable();
        plan.ranges = coalesce(&ranges, bridge);
        plan
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
