//! Which range an idle connection asks for next: the first request until it is answered,
//! then the planned segments in order, failed ones first again. Pure: time is given as the
//! duration since the download started.

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
    /// to the front.
    queue: VecDeque<Segment>,
    /// The first request: its range, tries and free retry.
    probe: Segment,
    /// A connection carries the first request now.
    probe_out: bool,
    /// The first reply came: size and range support are known, the queue is planned.
    planned: bool,
    /// No new request before this time since the download started (Retry-After).
    hold_until: Option<Duration>,
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
            probe_out: false,
            planned: false,
            hold_until: None,
        }
    }

    /// The next range for an idle connection at `now` and whether it is the first request;
    /// `None` while requests are held, while the first request is out and unanswered, or
    /// when the queue is empty (work stealing may then split a running body).
    pub fn next(&mut self, now: Duration) -> Option<(Segment, bool)> {
        if self.held(now) {
            return None;
        }
        if !self.planned {
            if self.probe_out {
                return None;
            }
            self.probe_out = true;
            return Some((self.probe, true));
        }
        self.queue.pop_front().map(|s| (s, false))
    }

    /// New requests wait until `until` (e.g. a Retry-After).
    pub fn hold(&mut self, until: Duration) {
        self.hold_until = Some(self.hold_until.map_or(until, |u| u.max(until)));
    }

    /// Requests are held at `now`.
    pub fn held(&self, now: Duration) -> bool {
        self.hold_until.is_some_and(|t| t > now)
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
        self.queue = queue;
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
        if probe && !self.planned {
            self.probe_out = false;
            self.probe.tries = seg.tries;
            self.probe.grace = seg.grace;
        } else if seg.start < seg.end {
            self.queue.push_front(seg);
        }
    }

    /// The queued segments, in the order they will be handed out.
    pub fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.queue.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Duration = Duration::ZERO;

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
        assert_eq!(p.next(T0), Some((seg(0, 100), true)));
        assert!(!p.has_work());
        assert_eq!(p.next(T0), None);
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
            p.next(T0),
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
        assert_eq!(p.next(T0), Some((seg(100, 200), false)));
        // A failed segment goes first again; an empty remainder is dropped.
        p.requeue(seg(150, 200), false);
        p.requeue(seg(200, 200), false);
        assert_eq!(p.next(T0), Some((seg(150, 200), false)));
        assert_eq!(p.next(T0), Some((seg(200, 300), false)));
        assert_eq!(p.next(T0), None);
        assert!(p.is_drained());
    }

    #[test]
    fn queue_state_is_reported_as_it_is() {
        let mut p = Plan::new(0, 100);
        assert!(!p.is_drained(), "nothing planned yet");
        assert_eq!(p.queued(), 0);
        p.next(T0);
        p.set_queue(VecDeque::from([seg(100, 200), seg(200, 300)]));
        assert_eq!(p.queued(), 2);
        assert_eq!(
            p.segments().copied().collect::<Vec<_>>(),
            vec![seg(100, 200), seg(200, 300)]
        );
        assert!(p.has_work() && !p.is_drained());
        p.next(T0);
        p.next(T0);
        assert_eq!(p.queued(), 0);
        assert!(!p.has_work(), "planned, queue empty: no work");
        assert!(p.is_drained());
    }

    #[test]
    fn a_first_request_that_fails_after_the_first_reply_is_queued_like_any_segment() {
        let mut p = Plan::new(0, 4096);
        let (s, probe) = p.next(T0).unwrap();
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
            p.next(T0),
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
    fn a_hold_stops_every_new_request_until_it_passes() {
        let mut p = Plan::new(0, 100);
        p.hold(Duration::from_secs(5));
        p.hold(Duration::from_secs(2)); // never shortened
        assert_eq!(p.next(Duration::from_secs(4)), None);
        assert!(p.next(Duration::from_secs(5)).is_some());
    }

    #[test]
    fn a_restarted_first_request_keeps_its_tries() {
        let mut p = Plan::new(4096, 8192);
        let (s, _) = p.next(T0).unwrap();
        p.restart_probe(0, 100);
        p.requeue(Segment { tries: 1, ..s }, true);
        assert_eq!(
            p.next(T0),
            Some((
                Segment {
                    tries: 1,
                    ..seg(0, 100)
                },
                true
            ))
        );
    }
}
