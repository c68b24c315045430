//! Which range an idle connection asks for next: the first request until it is answered,
//! then the planned segments in order, failed ones first again. A wait belongs to what
//! failed: a segment that failed waits out its backoff whatever connection asks for it,
//! and a server-wide answer (503, 429, a Retry-After) holds every request to that origin
//! (a mirror). Pure: time is given as the duration since the download started.

use std::collections::VecDeque;
use std::time::Duration;

use super::Segment;

/// The segments still to hand out, and the first request's state.
///
/// INVARIANT: before [`Plan::set_queue`] (the first reply) the queue is empty and only the
/// first request is handed out; after it, the first request is never handed out again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Planned segments waiting for a connection, in file order except that failed ones go
    /// to the front; each with the time before which no connection may ask for it.
    queue: VecDeque<(Segment, Duration)>,
    /// The first request: its range, tries and free retry.
    probe: Segment,
    /// No connection asks for the first request again before this time (its backoff).
    probe_not_before: Duration,
    /// A connection carries the first request now.
    probe_out: bool,
    /// The first reply came: size and range support are known, the queue is planned.
    planned: bool,
    /// Per origin (index: the mirror, in the order given): no new request to it before
    /// this time since the download started (its backoff after a 503 or 429, a Retry-After).
    holds: Vec<Duration>,
}

impl Plan {
    /// A plan whose first request asks for `[start, end)` (bytes): from 0, or from the first
    /// byte a resumed `.part` lacks.
    pub fn new(start: u64, end: u64) -> Plan {
        Plan {
            queue: VecDeque::new(),
            probe: Segment {
                start,
                end,
                tries: 0,
                grace: false,
            },
            probe_not_before: Duration::ZERO,
            probe_out: false,
            planned: false,
            holds: Vec::new(),
        }
    }

    /// The next range for an idle connection to `origin` at `now` and whether it is the
    /// first request; `None` while `origin` is held, while the first request is out and
    /// unanswered or waits out its backoff, or when no queued segment may go yet (the
    /// first one whose wait has passed goes; work stealing may then split a running body).
    pub fn next(&mut self, now: Duration, origin: usize) -> Option<(Segment, bool)> {
        if self.held(now, origin) {
            return None;
        }
        if !self.planned {
            if self.probe_out || self.probe_not_before > now {
                return None;
            }
            self.probe_out = true;
            return Some((self.probe, true));
        }
        let k = self.queue.iter().position(|&(_, t)| t <= now)?;
        self.queue.remove(k).map(|(s, _)| (s, false))
    }

    /// More queued segments for the request that took `first` ([`Plan::next`]): up to
    /// `most` of those free to go at `now`, in queue order, each ending at or before the
    /// next byte range line would pass `line` bytes (`a-b,` per range, decimal). Returns
    /// them with `first`, sorted by start (one request asks them all: a multi-range
    /// request, RFC 9110 §14.1.2). Only segments no try was spent on go together (a
    /// failure counts a try on every segment of its request); `first` with tries spent
    /// goes alone.
    pub fn take_more(&mut self, first: Segment, most: usize, now: Duration, line: usize) -> Vec<Segment> {
        let width = |s: &Segment| format!("{}-{},", s.start, s.end - 1).len();
        let mut used = width(&first);
        let mut taken = vec![first];
        if first.tries > 0 {
            // A run that failed before is asked alone: its tries are its own.
            return taken;
        }
        let mut k = 0;
        while taken.len() <= most && k < self.queue.len() {
            let (s, t) = self.queue[k];
            if t > now || s.tries > 0 || used + width(&s) > line {
                k += 1;
                continue;
            }
            used += width(&s);
            taken.push(s);
            self.queue.remove(k);
        }
        taken.sort_by_key(|s| s.start);
        taken
    }

    /// New requests to `origin` wait until `until` (its backoff after a server-wide answer,
    /// a Retry-After); a hold is never shortened.
    pub fn hold(&mut self, origin: usize, until: Duration) {
        if self.holds.len() <= origin {
            self.holds.resize(origin + 1, Duration::ZERO);
        }
        self.holds[origin] = self.holds[origin].max(until);
    }

    /// Requests to `origin` are held at `now`.
    pub fn held(&self, now: Duration, origin: usize) -> bool {
        self.holds.get(origin).is_some_and(|&t| t > now)
    }

    /// Work is waiting for a connection: the first request, or queued segments.
    pub fn has_work(&self) -> bool {
        (!self.planned && !self.probe_out) || !self.queue.is_empty()
    }

    /// The first reply came.
    pub fn is_planned(&self) -> bool {
        self.planned
    }

    /// Segments waiting.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Every planned segment was handed out (the download ends when they all land).
    pub fn is_drained(&self) -> bool {
        self.planned && self.queue.is_empty()
    }

    /// The first reply planned the rest: `queue` (empty for one stream without ranges,
    /// or a file the first reply covers).
    pub fn set_queue(&mut self, queue: VecDeque<Segment>) {
        self.planned = true;
        self.probe_out = false;
        self.queue = queue.into_iter().map(|s| (s, Duration::ZERO)).collect();
    }

    /// The first request starts over at `[start, end)` (a resume point past a shrunk file);
    /// its tries are kept.
    pub fn restart_probe(&mut self, start: u64, end: u64) {
        self.probe.start = start;
        self.probe.end = end;
    }

    /// A request failed or ended short: what is left of it, `seg` (with its tries as
    /// counted), goes first again. Before the first reply, the first request is asked
    /// again (its own range, `seg`'s tries); an empty remainder is dropped.
    pub fn requeue(&mut self, seg: Segment, probe: bool) {
        self.requeue_after(seg, probe, Duration::ZERO);
    }

    /// [`Plan::requeue`], and no connection asks for `seg` again before `not_before` (its
    /// backoff, a Retry-After): the wait belongs to the segment, not to the connection
    /// that saw it fail.
    pub fn requeue_after(&mut self, seg: Segment, probe: bool, not_before: Duration) {
        if probe && !self.planned {
            self.probe_out = false;
            self.probe.tries = seg.tries;
            self.probe.grace = seg.grace;
            self.probe_not_before = not_before;
        } else if seg.start < seg.end {
            self.queue.push_front((seg, not_before));
        }
    }

    /// Queued segments for another reactor (`--threads`), taken from the back of the queue
    /// (this reactor's connections take from the front) while they are free to go at
    /// `now`, fewer than `want` bytes are taken, and each ends where the next one starts
    /// (`scattered`: at or before, tried as often as those taken: the bytes between are
    /// the [`Taken::holes`], as a resume's scattered gaps leave them). `None` when the queue's last segment must
    /// still wait, or the queue is empty. About half the queued bytes go at most (the last
    /// segment always; another only while its middle lies in the back half of the queued
    /// bytes), so the owner's own connections keep work while the queue is long: counted
    /// in bytes, not segments, as the planned sizes shrink toward the back ([`super::plan`]).
    pub fn take_back(&mut self, want: u64, now: Duration, scattered: bool) -> Option<Taken> {
        let queued: u64 = self.segments().map(|s| s.end - s.start).sum();
        let &(last, t) = self.queue.back()?;
        if t > now {
            return None;
        }
        self.queue.pop_back();
        let mut taken = Taken {
            start: last.start,
            end: last.end,
            holes: Vec::new(),
            tries: last.tries,
        };
        let mut bytes = last.end - last.start;
        while bytes < want {
            match self.queue.back() {
                // (A scattered segment only with as many tries: the part's segments go
                // back with the most any had, so an unrelated retried one would spend
                // the others' budget.)
                Some(&(s, t))
                    if t <= now
                        && 2 * bytes + (s.end - s.start) <= queued
                        && (s.end == taken.start || scattered && s.end < taken.start && s.tries == taken.tries) =>
                {
                    self.queue.pop_back();
                    if s.end < taken.start {
                        taken.holes.push((s.end, taken.start));
                    }
                    taken.start = s.start;
                    taken.tries = taken.tries.max(s.tries);
                    bytes += s.end - s.start;
                }
                _ => break,
            }
        }
        taken.holes.reverse();
        Some(taken)
    }

    /// The queued segments, in the order they will be handed out.
    pub fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.queue.iter().map(|(s, _)| s)
    }
}

/// Queued segments taken for another reactor ([`Plan::take_back`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taken {
    /// Bytes: the first taken segment's start.
    pub start: u64,
    /// Bytes: the last taken segment's end.
    pub end: u64,
    /// `[start, end)` ranges between the taken segments, sorted: not theirs (landed
    /// before, or queued or running here). Empty unless taken `scattered`.
    pub holes: Vec<(u64, u64)>,
    /// The most tries any taken segment has had.
    pub tries: u32,
}

impl From<Segment> for Taken {
    /// One segment, no holes.
    fn from(s: Segment) -> Taken {
        Taken {
            start: s.start,
            end: s.end,
            holes: Vec::new(),
            tries: s.tries,
        }
    }
}

impl Taken {
    /// Bytes of the taken segments: `[start, end)` less the holes.
    pub fn bytes(&self) -> u64 {
        self.end - self.start - self.holes.iter().map(|h| h.1 - h.0).sum::<u64>()
    }

    /// The taken runs, `[start, end)` less the holes, sorted.
    pub fn segments(&self) -> Vec<(u64, u64)> {
        let mut at = self.start;
        let mut runs = Vec::with_capacity(self.holes.len() + 1);
        for &(s, e) in &self.holes {
            runs.push((at, s));
            at = e;
        }
        runs.push((at, self.end));
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Duration = Duration::ZERO;

    #[test]
    fn take_more_takes_up_to_most_of_those_free_sorted_within_the_line() {
        let mut p = Plan::new(0, 10);
        p.set_queue((1..8).map(|k| seg(k * 100, k * 100 + 10)).collect());
        p.requeue_after(seg(50, 60), false, Duration::from_secs(5));
        let (first, _) = p.next(T0, 0).unwrap();
        assert_eq!(first, seg(100, 110), "the waiting one is skipped");
        let got = p.take_more(seg(900, 910), 3, T0, 1000);
        let starts: Vec<u64> = got.iter().map(|s| s.start).collect();
        assert_eq!(starts, [200, 300, 400, 900], "three more, sorted");
        assert_eq!(p.queued(), 4, "the waiting one and three left");
        // The line bound: "500-509," is 8 bytes; with 16 there is room for one more.
        let got = p.take_more(seg(900, 910), 10, T0, 16);
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn a_segment_that_spent_a_try_is_asked_alone() {
        let mut p = Plan::new(0, 10);
        let tried = Segment {
            tries: 2,
            ..seg(300, 310)
        };
        p.set_queue([seg(100, 110), tried, seg(500, 510)].into_iter().collect());
        let got = p.take_more(
            Segment {
                tries: 1,
                ..seg(900, 910)
            },
            10,
            T0,
            1000,
        );
        assert_eq!(got.len(), 1, "a first segment with a try spent takes no company");
        let got = p.take_more(seg(900, 910), 10, T0, 1000);
        let starts: Vec<u64> = got.iter().map(|s| s.start).collect();
        assert_eq!(
            starts,
            [100, 500, 900],
            "the tried one is left for a request of its own"
        );
        assert_eq!(p.queued(), 1);
    }

    fn seg(start: u64, end: u64) -> Segment {
        Segment {
            start,
            end,
            tries: 0,
            grace: false,
        }
    }

    #[test]
    fn the_first_request_goes_out_once_until_it_fails_or_is_answered() {
        let mut p = Plan::new(0, 100);
        assert!(p.has_work());
        assert_eq!(p.next(T0, 0), Some((seg(0, 100), true)));
        assert!(!p.has_work());
        assert_eq!(p.next(T0, 0), None);
        // Failed: asked again with its tries, from its own start.
        p.requeue(
            Segment {
                start: 40,
                tries: 1,
                ..seg(0, 100)
            },
            true,
        );
        assert_eq!(
            p.next(T0, 0),
            Some((
                Segment {
                    tries: 1,
                    ..seg(0, 100)
                },
                true
            ))
        );
        p.set_queue(VecDeque::from([seg(100, 200), seg(200, 300)]));
        assert!(p.is_planned() && p.has_work());
        assert_eq!(p.next(T0, 0), Some((seg(100, 200), false)));
        // A failed segment goes first again; an empty remainder is dropped.
        p.requeue(seg(150, 200), false);
        p.requeue(seg(200, 200), false);
        assert_eq!(p.next(T0, 0), Some((seg(150, 200), false)));
        assert_eq!(p.next(T0, 0), Some((seg(200, 300), false)));
        assert_eq!(p.next(T0, 0), None);
        assert!(p.is_drained());
    }

    #[test]
    fn queue_state_is_reported_as_it_is() {
        let mut p = Plan::new(0, 100);
        assert!(!p.is_drained(), "nothing planned yet");
        assert_eq!(p.queued(), 0);
        p.next(T0, 0);
        p.set_queue(VecDeque::from([seg(100, 200), seg(200, 300)]));
        assert_eq!(p.queued(), 2);
        assert_eq!(
            p.segments().copied().collect::<Vec<_>>(),
            vec![seg(100, 200), seg(200, 300)]
        );
        assert!(p.has_work() && !p.is_drained());
        p.next(T0, 0);
        p.next(T0, 0);
        assert_eq!(p.queued(), 0);
        assert!(!p.has_work(), "planned, queue empty: no work");
        assert!(p.is_drained());
    }

    #[test]
    fn a_first_request_that_fails_after_the_first_reply_is_queued_like_any_segment() {
        let mut p = Plan::new(0, 4096);
        let (s, probe) = p.next(T0, 0).unwrap();
        assert!(probe);
        p.set_queue(VecDeque::new());
        // Its body broke at 1000 (the reply came, so the plan is made).
        p.requeue(
            Segment {
                start: 1000,
                tries: 1,
                ..s
            },
            true,
        );
        assert_eq!(
            p.next(T0, 0),
            Some((
                Segment {
                    start: 1000,
                    tries: 1,
                    ..seg(0, 4096)
                },
                false
            ))
        );
    }

    #[test]
    fn a_hold_stops_every_new_request_to_its_origin_until_it_passes() {
        let mut p = Plan::new(0, 100);
        p.hold(0, Duration::from_secs(5));
        p.hold(0, Duration::from_secs(2)); // never shortened
        assert!(p.held(Duration::from_secs(4), 0));
        assert_eq!(p.next(Duration::from_secs(4), 0), None);
        assert!(p.next(Duration::from_secs(5), 0).is_some());
        // Another origin (a mirror) is not held by it.
        let mut p = Plan::new(0, 100);
        p.hold(1, Duration::from_secs(5));
        assert!(!p.held(T0, 0) && p.held(T0, 1) && !p.held(T0, 2));
        assert_eq!(p.next(T0, 1), None);
        assert!(p.next(T0, 0).is_some());
    }

    #[test]
    fn a_failed_first_request_waits_out_its_backoff_whatever_connection_asks() {
        let mut p = Plan::new(0, 100);
        let (s, _) = p.next(T0, 0).unwrap();
        let wait = Duration::from_millis(500);
        p.requeue_after(Segment { tries: 1, ..s }, true, wait);
        assert!(p.has_work(), "the first request is still to do");
        for now in [T0, Duration::from_millis(499)] {
            for origin in [0, 1] {
                assert_eq!(p.next(now, origin), None, "asked again at {now:?}");
            }
        }
        assert_eq!(
            p.next(wait, 0),
            Some((
                Segment {
                    tries: 1,
                    ..seg(0, 100)
                },
                true
            ))
        );
    }

    #[test]
    fn a_waiting_segment_lets_the_others_go_and_goes_first_once_its_wait_passed() {
        let mut p = Plan::new(0, 100);
        p.next(T0, 0);
        p.set_queue(VecDeque::from([seg(100, 200), seg(200, 300)]));
        let (s, _) = p.next(T0, 0).unwrap();
        let wait = Duration::from_secs(1);
        p.requeue_after(Segment { tries: 1, ..s }, false, wait);
        // Before its wait: the next segment that may go goes instead.
        assert_eq!(p.next(T0, 0), Some((seg(200, 300), false)));
        assert_eq!(p.next(T0, 0), None);
        assert!(p.has_work() && !p.is_drained(), "the waiting segment is still work");
        assert_eq!(p.segments().count(), 1);
        assert_eq!(
            p.next(wait, 0),
            Some((
                Segment {
                    tries: 1,
                    ..seg(100, 200)
                },
                false
            ))
        );
        assert!(p.is_drained());
    }

    #[test]
    fn a_restarted_first_request_keeps_its_tries() {
        let mut p = Plan::new(4096, 8192);
        let (s, _) = p.next(T0, 0).unwrap();
        p.restart_probe(0, 100);
        p.requeue(Segment { tries: 1, ..s }, true);
        assert_eq!(
            p.next(T0, 0),
            Some((
                Segment {
                    tries: 1,
                    ..seg(0, 100)
                },
                true
            ))
        );
    }

    #[test]
    fn another_reactor_takes_contiguous_segments_from_the_back() {
        let mut p = Plan::new(0, 10);
        p.set_queue(
            [seg(10, 20), seg(20, 30), seg(30, 40), seg(40, 50)]
                .into_iter()
                .collect(),
        );
        // At most half the queue, from the back, merged; no more than is wanted.
        assert_eq!(p.take_back(1000, T0, false), Some(taken(30, 50, 0)));
        p.set_queue(
            [seg(10, 20), seg(20, 30), seg(30, 40), seg(40, 50)]
                .into_iter()
                .collect(),
        );
        assert_eq!(p.take_back(10, T0, false), Some(taken(40, 50, 0)));
        assert_eq!(p.take_back(11, T0, false), Some(taken(20, 40, 0)));
        p.set_queue([seg(10, 20), seg(20, 30)].into_iter().collect());
        assert_eq!(p.segments().map(|s| s.start).collect::<Vec<_>>(), [10, 20]);
        // A failed segment requeued at the front keeps its tries; a gap stops the run.
        let mut f = seg(60, 70);
        f.tries = 2;
        p.requeue(f, false);
        assert_eq!(p.take_back(30, T0, false), Some(taken(10, 30, 0)));
        assert_eq!(p.take_back(30, T0, false), Some(taken(60, 70, 2)));
        assert_eq!(p.take_back(30, T0, false), None);
        // A segment that waits out its backoff stays.
        p.requeue_after(seg(0, 5), false, Duration::from_secs(1));
        assert_eq!(p.take_back(1, T0, false), None);
        assert_eq!(p.take_back(1, Duration::from_secs(2), false), Some(taken(0, 5, 0)));
    }

    #[test]
    fn another_reactor_takes_half_the_queued_bytes_not_half_the_segments() {
        // Sizes shrinking toward the back (8, 4, 2, 1, 1), as planned: half the bytes is
        // four of the five segments (half the count, three, would be 4 bytes of 16).
        let mut p = Plan::new(0, 10);
        p.set_queue(
            [seg(0, 8), seg(8, 12), seg(12, 14), seg(14, 15), seg(15, 16)]
                .into_iter()
                .collect(),
        );
        assert_eq!(p.take_back(1000, T0, false), Some(taken(8, 16, 0)));
        assert_eq!(p.segments().map(|s| (s.start, s.end)).collect::<Vec<_>>(), [(0, 8)]);
        // One large segment at the front stays the owner's: (8, 1, 1) gives the two 1s.
        p.set_queue([seg(0, 8), seg(8, 9), seg(9, 10)].into_iter().collect());
        assert_eq!(p.take_back(1000, T0, false), Some(taken(8, 10, 0)));
    }

    fn taken(start: u64, end: u64, tries: u32) -> Taken {
        Taken {
            start,
            end,
            holes: Vec::new(),
            tries,
        }
    }

    #[test]
    fn another_reactor_takes_scattered_segments_with_their_holes() {
        // A resume's gaps: [10, 20), [30, 40), [40, 50), [70, 80).
        let mut p = Plan::new(0, 10);
        p.set_queue(
            [seg(10, 20), seg(30, 40), seg(40, 50), seg(70, 80)]
                .into_iter()
                .collect(),
        );
        // Not scattered: the last segment alone (the one before it does not end at 70).
        let mut q = p.clone();
        assert_eq!(q.take_back(30, T0, false), Some(taken(70, 80, 0)));
        // Scattered: the wanted bytes are the segments', not the span's; the holes
        // between them.
        let t = p.take_back(20, T0, true).unwrap();
        assert_eq!(
            t,
            Taken {
                start: 40,
                end: 80,
                holes: vec![(50, 70)],
                tries: 0
            }
        );
        assert_eq!(t.bytes(), 20);
        assert_eq!(t.segments(), [(40, 50), (70, 80)]);
        assert_eq!(
            p.segments().map(|s| (s.start, s.end)).collect::<Vec<_>>(),
            [(10, 20), (30, 40)]
        );
        // Several holes, sorted; at most half the queue (two of four segments).
        p.set_queue([seg(0, 5), seg(10, 20), seg(30, 40), seg(60, 70)].into_iter().collect());
        let t = p.take_back(1000, T0, true).unwrap();
        assert_eq!((t.start, t.end, t.holes.clone()), (30, 70, vec![(40, 60)]));
        // (Then half of the two left: one segment.)
        assert_eq!(p.take_back(1000, T0, true), Some(taken(10, 20, 0)));
        // A segment requeued at the front (out of the file's order) is not merged.
        p.set_queue(VecDeque::new());
        p.requeue(seg(30, 40), false);
        p.requeue(seg(60, 70), false);
        assert_eq!(p.take_back(1000, T0, true), Some(taken(30, 40, 0)));
        assert_eq!(p.take_back(1000, T0, true), Some(taken(60, 70, 0)));
        // Nor one tried more often than those taken (its tries would spread to them).
        let mut tried = seg(30, 40);
        tried.tries = 2;
        p.set_queue([seg(0, 5), seg(10, 15), tried, seg(50, 60)].into_iter().collect());
        let t = p.take_back(1000, T0, true).unwrap();
        assert_eq!((t.start, t.end, t.tries), (50, 60, 0));
    }
}
