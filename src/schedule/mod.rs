//! Segments: the byte ranges handed to connections, their tries, and the record of which
//! ranges have landed on disk.

use std::collections::VecDeque;

pub mod pace;
pub mod queue;
pub mod retry;
pub mod steal;

/// Bytes the first request asks for (`Range: bytes=0-4194303`): enough to learn the total
/// size and validator and to keep connection 1 busy while the others start.
pub const FIRST_SEGMENT: u64 = 4 << 20;
/// Default `--min-split-size`, bytes: the first request's size. A file the first request
/// covers is one connection's (another would only split that request); each further
/// connection gets at least as much as the first request asks for.
pub const MIN_SPLIT_SIZE: u64 = FIRST_SEGMENT;
/// Smallest planned segment, bytes.
const MIN_SEGMENT: u64 = 1 << 20;
/// Largest planned segment, bytes.
const MAX_SEGMENT: u64 = 256 << 20;

/// Rounds `v` down to a multiple of `align` (a power of two).
pub fn align_down(v: u64, align: u64) -> u64 {
    v & !(align - 1)
}

/// Rounds `v` up to a multiple of `align` (a power of two).
///
/// # Panics
/// On overflow past `u64::MAX` (offsets that large are refused when a response is parsed).
pub fn align_up(v: u64, align: u64) -> u64 {
    v.checked_add(align - 1).expect("offset overflow") & !(align - 1)
}

/// A byte range `[start, end)` of the file still to fetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// First byte, a multiple of the output alignment.
    pub start: u64,
    /// One past the last byte; a multiple of the alignment or the file size.
    pub end: u64,
    /// Failed attempts so far.
    pub tries: u32,
    /// The free retry is used: a kept-alive connection that the server had closed while
    /// it was idle fails before the first byte of the reply, which is no failed try once
    /// per segment.
    pub grace: bool,
}

/// How many connections a download opens once the first answer told its size: one per
/// `min_split` bytes of the `remaining` ones (at least one), at most `max` (`-x`), and at
/// least one per mirror (`mirrors`; each mirror's first answer is checked against the
/// others), never more than `max`. Before that answer, and for a file of unknown size or
/// a server without ranges, a download opens one connection per mirror.
pub fn connections_for(remaining: u64, min_split: u64, max: usize, mirrors: usize) -> usize {
    let by_size = usize::try_from(remaining.div_ceil(min_split.max(1)).max(1)).unwrap_or(usize::MAX);
    by_size.min(max).max(mirrors.min(max))
}

impl Segment {
    /// What is left of this segment when its connection is released from a mirror that
    /// was dropped: `[from, end)`, where `from` is the first byte (file offset) not on its
    /// way to the file (0 when the server serves no ranges: a stream can only start over),
    /// with fresh tries, since the mirror it goes to next has spent none of them. The free
    /// retry ([`Segment::grace`]) is kept.
    pub fn released(self, from: u64, ranges: bool) -> Segment {
        Segment {
            start: if ranges { from } else { 0 },
            tries: 0,
            ..self
        }
    }
}

/// A planned segment is at least this fraction of a connection's share of the planned
/// bytes (and at least [`MIN_SEGMENT`]): the last ones are this short, so the connections
/// end within about this fraction of the transfer's time of each other.
const TAIL_PARTS: u64 = 64;

/// Splits `[start, total)` into segments for `connections` connections, on `align`
/// boundaries, in guided sizes (factoring: Hummel, Schonberg, Flynn, CACM 35(8), 1992):
/// rounds of `connections` segments, each round's segments together half of what is left
/// (within [`MIN_SEGMENT`]..=[`MAX_SEGMENT`]), down to a floor of 1/[`TAIL_PARTS`] of a
/// connection's share. Free connections take them in order, so one that started late (it
/// carried the first request) or runs slower takes fewer of the large ones, and the short
/// last ones even out the ends: all connections end within about one floor segment's time
/// (1/64 of the transfer's) of each other, with about `7 × connections` requests.
pub fn plan(start: u64, total: u64, connections: usize, align: u64) -> VecDeque<Segment> {
    let mut q = VecDeque::new();
    if start >= total {
        return q;
    }
    let p = connections.max(1) as u64;
    let floor = (total - start).div_ceil(p * TAIL_PARTS).clamp(MIN_SEGMENT, MAX_SEGMENT);
    let mut s = start;
    while s < total {
        let size = align_up((total - s).div_ceil(2 * p).clamp(floor, MAX_SEGMENT), align);
        for _ in 0..p {
            if s >= total {
                break;
            }
            let e = s.saturating_add(size).min(total);
            q.push_back(Segment {
                start: s,
                end: e,
                tries: 0,
                grace: false,
            });
            s = e;
        }
    }
    q
}

/// Plans the ranges of `[start, total)` that `landed` does not cover, with gap edges widened
/// to `align` (re-fetching a few bytes is cheaper than an unaligned O_DIRECT write).
pub fn plan_missing(landed: &Landed, start: u64, total: u64, connections: usize, align: u64) -> VecDeque<Segment> {
    let mut gaps = Vec::new();
    let mut at = start;
    for &(a, b) in &landed.ranges {
        if b <= at {
            continue;
        }
        if a > at {
            gaps.push((at, a.min(total)));
        }
        at = at.max(b);
    }
    if at < total {
        gaps.push((at, total));
    }
    let missing: u64 = gaps.iter().map(|g| g.1 - g.0).sum();
    let mut q = VecDeque::new();
    let per = missing.div_ceil(connections as u64 * 4).clamp(MIN_SEGMENT, MAX_SEGMENT);
    let size = align_up(per, align);
    for (a, b) in gaps {
        let a = align_down(a, align);
        let b = align_up(b, align).min(total);
        let mut s = a;
        while s < b {
            let e = s.saturating_add(size).min(b);
            q.push_back(Segment {
                start: s,
                end: e,
                tries: 0,
                grace: false,
            });
            s = e;
        }
    }
    q
}

/// Ranges that have been written, merged; tells whether the file is complete.
#[derive(Clone, Default, Debug)]
pub struct Landed {
    /// Sorted, disjoint, non-adjacent `[start, end)` ranges.
    ranges: Vec<(u64, u64)>,
}

impl Landed {
    /// Records `[start, end)` as written (overlaps and repeats are fine).
    pub fn add(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let i = self.ranges.partition_point(|r| r.1 < start);
        let mut s = start;
        let mut e = end;
        let mut j = i;
        while j < self.ranges.len() && self.ranges[j].0 <= e {
            s = s.min(self.ranges[j].0);
            e = e.max(self.ranges[j].1);
            j += 1;
        }
        self.ranges.splice(i..j, [(s, e)]);
    }

    /// Whether exactly `[0, total)` has been written (a zero-length file is complete).
    pub fn is_complete(&self, total: u64) -> bool {
        total == 0 || self.ranges == [(0, total)]
    }

    /// Starts from ranges read back from a control file.
    pub fn from_ranges(ranges: &[(u64, u64)]) -> Landed {
        let mut l = Landed::default();
        for &(a, b) in ranges {
            l.add(a, b);
        }
        l
    }

    /// The merged ranges, sorted.
    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges
    }

    /// Total bytes covered.
    pub fn bytes(&self) -> u64 {
        self.ranges.iter().map(|r| r.1 - r.0).sum()
    }

    /// The ranges of `self` outside `skip`, each moved down by the bytes of `skip` before
    /// it: where they lie once `skip`'s ranges are cut out of the file, neighbours merged.
    /// A partial fetch's progress counts only the ranges it fetches, laid end to end
    /// ([`crate::config::Config::fetch_only`]: `skip` is what it does not fetch).
    pub fn squeezed(&self, skip: &Landed) -> Vec<(u64, u64)> {
        let keep = skip.gaps_in(0, u64::MAX);
        let (mut before, mut k) = (0, 0);
        let mut out: Vec<(u64, u64)> = Vec::new();
        for (s, e) in self.within(&keep) {
            // (A range of `skip` lies wholly before or after a range kept.)
            while k < skip.ranges.len() && skip.ranges[k].1 <= s {
                before += skip.ranges[k].1 - skip.ranges[k].0;
                k += 1;
            }
            let (a, b) = (s - before, e - before);
            match out.last_mut() {
                Some(last) if last.1 == a => last.1 = b,
                _ => out.push((a, b)),
            }
        }
        out
    }

    /// The parts of `want` (sorted, disjoint `[start, end)` ranges) covered, sorted.
    pub fn within(&self, want: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for &(ws, we) in want {
            for &(s, e) in &self.ranges[self.ranges.partition_point(|r| r.1 <= ws)..] {
                if s >= we {
                    break;
                }
                out.push((s.max(ws), e.min(we)));
            }
        }
        out
    }

    /// Everything of `[0, total)` outside `want` (sorted, disjoint ranges), as landed: a
    /// partial fetch's holes count as done ([`crate::config::Config::fetch_only`]).
    pub fn outside(want: &[(u64, u64)], total: u64) -> Landed {
        Landed::from_ranges(&Landed::from_ranges(want).gaps_in(0, total))
    }

    /// The ranges of `[start, end)` not covered, sorted.
    pub fn gaps_in(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut gaps = Vec::new();
        let mut at = start;
        for &(s, e) in &self.ranges[self.ranges.partition_point(|r| r.1 <= start)..] {
            if s >= end {
                break;
            }
            if s > at {
                gaps.push((at, s));
            }
            at = at.max(e);
        }
        if at < end {
            gaps.push((at, end));
        }
        gaps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_keeps_only_the_wanted_parts_and_outside_is_the_rest() {
        let l = Landed::from_ranges(&[(0, 15), (25, 100)]);
        assert_eq!(
            l.within(&[(10, 30), (40, 50), (120, 130)]),
            [(10, 15), (25, 30), (40, 50)]
        );
        let holes = Landed::outside(&[(10, 30), (40, 50)], 60);
        assert_eq!(holes.ranges(), [(0, 10), (30, 40), (50, 60)]);
        assert_eq!(Landed::outside(&[(0, 60)], 60).bytes(), 0);
    }

    #[test]
    fn squeezed_lays_the_ranges_outside_skip_end_to_end() {
        // A partial fetch of [10, 30) and [40, 50) of 60 bytes: its holes count as landed.
        let skip = Landed::outside(&[(10, 30), (40, 50)], 60);
        let mut l = skip.clone();
        assert_eq!(l.squeezed(&skip), [], "nothing of the fetch landed");
        l.add(12, 20);
        l.add(40, 50);
        assert_eq!(l.squeezed(&skip), [(2, 10), (20, 30)]);
        l.add(20, 30);
        assert_eq!(l.squeezed(&skip), [(2, 30)], "neighbours once cut out are merged");
        l.add(10, 12);
        assert_eq!(l.squeezed(&skip), [(0, 30)]);
        assert_eq!(
            Landed::from_ranges(&[(5, 7)]).squeezed(&Landed::default()),
            [(5, 7)],
            "nothing skipped"
        );
    }

    #[test]
    fn gaps_in_a_range_are_what_no_landed_range_covers() {
        let l = Landed::from_ranges(&[(10, 20), (30, 40), (50, 60)]);
        assert_eq!(l.gaps_in(0, 70), [(0, 10), (20, 30), (40, 50), (60, 70)]);
        assert_eq!(l.gaps_in(15, 35), [(20, 30)]);
        assert_eq!(l.gaps_in(20, 30), [(20, 30)], "edges touching landed ranges");
        assert_eq!(l.gaps_in(32, 38), [], "inside one landed range");
        assert_eq!(l.gaps_in(55, 100), [(60, 100)]);
        assert_eq!(Landed::default().gaps_in(5, 9), [(5, 9)]);
    }

    #[test]
    fn connections_open_one_per_min_split_up_to_x_and_one_per_mirror() {
        const M: u64 = 1 << 20;
        assert_eq!(connections_for(M, 4 * M, 4, 1), 1, "1 MiB: the first connection alone");
        assert_eq!(connections_for(4 * M, 4 * M, 4, 1), 1);
        assert_eq!(connections_for(4 * M + 1, 4 * M, 4, 1), 2);
        assert_eq!(connections_for(16 * M, 4 * M, 4, 1), 4);
        assert_eq!(connections_for(1 << 40, 4 * M, 4, 1), 4, "never more than -x");
        assert_eq!(connections_for(0, 4 * M, 4, 1), 1, "nothing left: still the first");
        assert_eq!(connections_for(M, 4 * M, 4, 3), 3, "each mirror its first connection");
        assert_eq!(connections_for(M, 4 * M, 2, 3), 2, "but never more than -x");
        assert_eq!(connections_for(8 * M, 0, 4, 1), 4, "a zero split is one byte");
    }

    /// `release_conn` (a dropped mirror's connection): the segment goes back from where its
    /// bytes stopped, not from its start (which fetched landed bytes again), and with fresh
    /// tries (the tries spent on the dropped mirror made the one left give up sooner).
    #[test]
    fn a_released_segment_goes_on_from_where_it_got_with_fresh_tries() {
        let seg = Segment {
            start: 1 << 20,
            end: 5 << 20,
            tries: 2,
            grace: true,
        };
        let r = seg.released(3 << 20, true);
        assert_eq!(
            r,
            Segment {
                start: 3 << 20,
                end: 5 << 20,
                tries: 0,
                grace: true
            }
        );
        // No ranges: a stream starts over from byte 0.
        assert_eq!(seg.released(3 << 20, false).start, 0);
    }

    #[test]
    fn plan_covers_exactly_on_aligned_boundaries() {
        for (start, total, n) in [
            (0, 1, 1),
            (4 << 20, 1 << 30, 4),
            (4096, 100 << 20, 16),
            (0, (1 << 20) + 1, 64),
        ] {
            let q = plan(start, total, n, 4096);
            assert_eq!(q.front().unwrap().start, start);
            assert_eq!(q.back().unwrap().end, total);
            for w in q.iter().collect::<Vec<_>>().windows(2) {
                assert_eq!(w[0].end, w[1].start);
                assert_eq!(w[0].end % 4096, 0);
            }
        }
        assert!(plan(10, 10, 4, 4096).is_empty());
    }

    #[test]
    fn plan_missing_fills_only_the_gaps() {
        let l = Landed::from_ranges(&[(0, 8192), (1 << 20, 3 << 20)]);
        let q = plan_missing(&l, 4096, 4 << 20, 1, 4096);
        let covered: Vec<(u64, u64)> = q.iter().map(|s| (s.start, s.end)).collect();
        assert_eq!(covered.first().unwrap().0, 8192);
        let mut all = Landed::from_ranges(&covered);
        all.add(0, 8192);
        all.add(1 << 20, 3 << 20);
        assert!(all.is_complete(4 << 20));
        assert!(q.iter().all(|s| s.end <= 1 << 20 || s.start >= 3 << 20));
        assert!(plan_missing(&Landed::from_ranges(&[(0, 100)]), 0, 100, 4, 4096).is_empty());
    }

    const MIB: u64 = 1 << 20;

    fn sizes(q: &VecDeque<Segment>) -> Vec<u64> {
        q.iter().map(|s| s.end - s.start).collect()
    }

    #[test]
    fn the_first_request_asks_for_4_mib() {
        assert_eq!(FIRST_SEGMENT, 4_194_304, "Range: bytes=0-4194303");
    }

    #[test]
    fn plan_halves_what_is_left_each_round_down_to_a_floor() {
        // 256 MiB over 4 connections: rounds of 4 segments, each round half of what is
        // left (32, 16, 8, 4, 2, 1 MiB), then the floor (1/64 of a share: 1 MiB).
        let want: Vec<u64> = [32, 16, 8, 4, 2, 1, 1].iter().flat_map(|&m| [m * MIB; 4]).collect();
        assert_eq!(sizes(&plan(0, 256 * MIB, 4, 4096)), want);
        // Sized by what is left after `start`: the same from 64 MiB on.
        assert_eq!(sizes(&plan(64 * MIB, 320 * MIB, 4, 4096)), want);
        // Small: never below 1 MiB (8 MiB over 4 connections: 1 MiB pieces).
        assert_eq!(sizes(&plan(0, 8 * MIB, 4, 4096)), vec![MIB; 8]);
        // Large: never above 256 MiB (4 GiB, one connection: 256 MiB until half of
        // what is left is less).
        let q = plan(0, 4096 * MIB, 1, 4096);
        assert_eq!(sizes(&q)[..9], [256 * MIB; 9]);
        assert!(sizes(&q).windows(2).all(|w| w[0] >= w[1]), "sizes never grow");
        assert_eq!(*sizes(&q).last().unwrap(), 64 * MIB, "the floor: 4 GiB / 64");
        // The size is rounded up to the alignment; the last one ends at the file's end.
        let q = plan(4096, 4096 + 16 * MIB + 10, 1, 4096);
        assert_eq!(q[0].end - q[0].start, 8 * MIB + 4096);
        assert_eq!(q.back().unwrap().end, 4096 + 16 * MIB + 10);
        assert!(q.iter().all(|s| s.tries == 0 && !s.grace));
    }

    /// When each connection ends if free connections take the queue in order: connection
    /// `k` is free from `free[k]` and moves `rate[k]` bytes per unit of time.
    fn ends(q: &VecDeque<Segment>, mut free: Vec<f64>, rate: &[f64]) -> Vec<f64> {
        for s in q {
            let k = (0..free.len()).min_by(|&a, &b| free[a].total_cmp(&free[b])).unwrap();
            free[k] += (s.end - s.start) as f64 / rate[k];
        }
        free
    }

    fn spread(v: &[f64]) -> f64 {
        v.iter().copied().fold(f64::MIN, f64::max) - v.iter().copied().fold(f64::MAX, f64::min)
    }

    #[test]
    fn connections_that_start_late_or_run_slower_end_with_the_others() {
        let m = MIB as f64;
        // The first request's connection starts 4 MiB late (it carried bytes 0..4 MiB):
        // the ends differ by at most the floor (1 MiB), not by its head start.
        let q = plan(4 * MIB, 256 * MIB, 4, 4096);
        let e = ends(&q, vec![4.0 * m, 0.0, 0.0, 0.0], &[1.0; 4]);
        assert!(spread(&e) <= m, "{e:?}");
        // Rates 10 % apart (servers shaping each connection a little differently).
        let e = ends(&q, vec![4.0 * m, 0.0, 0.0, 0.0], &[1.0, 0.9, 0.95, 1.0]);
        assert!(spread(&e) <= m / 0.9, "{e:?}");
        // 16 connections over 1 GiB, one starting late.
        let q = plan(4 * MIB, 1024 * MIB, 16, 4096);
        let mut free = vec![0.0; 16];
        free[0] = 4.0 * m;
        let e = ends(&q, free, &[1.0; 16]);
        assert!(spread(&e) <= m, "{e:?}");
    }

    #[test]
    fn align_rounds_to_powers_of_two() {
        assert_eq!(align_down(8191, 4096), 4096);
        assert_eq!(align_down(8192, 4096), 8192);
        assert_eq!(align_down(5, 1), 5);
        assert_eq!(align_up(4097, 4096), 8192);
        assert_eq!(align_up(8192, 4096), 8192);
        assert_eq!(align_up(0, 4096), 0);
        assert_eq!(align_up(5, 1), 5);
    }

    #[test]
    fn plan_missing_widens_gap_edges_to_the_alignment_and_sizes_by_what_is_missing() {
        // Landed [0, 5000) and [9000, 20000): the gap [5000, 9000) is asked as
        // [4096, 12288), the tail [20000, 30000) as [16384, 30000).
        let l = Landed::from_ranges(&[(0, 5000), (9000, 20000)]);
        let q = plan_missing(&l, 0, 30_000, 4, 4096);
        let got: Vec<(u64, u64)> = q.iter().map(|s| (s.start, s.end)).collect();
        assert_eq!(got, vec![(4096, 12288), (16384, 30000)]);
        // A resume point at the start of a landed range: nothing there to fetch.
        let l = Landed::from_ranges(&[(5000, 20000)]);
        assert!(plan_missing(&l, 5000, 20000, 1, 4096).is_empty());
        // Segment size from the missing bytes (36 MiB over 1 connection: 9 MiB), not
        // from the file (100 MiB would give 25 MiB).
        let l = Landed::from_ranges(&[(0, 64 * MIB)]);
        let q = plan_missing(&l, 0, 100 * MIB, 1, 4096);
        assert_eq!(sizes(&q), vec![9 * MIB; 4]);
        assert_eq!(q[0].start, 64 * MIB);
    }

    #[test]
    fn an_empty_range_lands_nothing() {
        let mut l = Landed::default();
        l.add(5, 5);
        l.add(9, 3);
        assert!(l.ranges().is_empty());
        assert_eq!(l.bytes(), 0);
        l.add(0, 10);
        l.add(10, 10);
        assert_eq!(l.ranges(), &[(0, 10)]);
    }

    /// The `scheduler` fuzz target's properties over its committed corpus: nothing lost,
    /// no overlap, tries bounded, every download ends.
    #[test]
    fn the_scheduler_corpus_keeps_its_properties() {
        crate::replay_corpus("scheduler", crate::fuzz_props::scheduler);
    }

    #[test]
    fn landed_merges() {
        let mut l = Landed::default();
        l.add(4096, 8192);
        assert!(!l.is_complete(8192));
        l.add(0, 4096);
        assert!(l.is_complete(8192));
        l.add(0, 100);
        assert!(l.is_complete(8192));
        l.add(10000, 20000);
        assert_eq!(l.bytes(), 8192 + 10000);
        assert!(!l.is_complete(20000));
        l.add(8192, 10000);
        assert!(l.is_complete(20000));
        assert!(Landed::default().is_complete(0));
    }
}
