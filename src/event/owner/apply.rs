//! `--threads`, the owner's side: a helper's report applied to the transfer — what landed
//! joins the landed ranges, a cap met is learned, a part's failure is judged and what of
//! it is not on disk goes back to the queue.

use std::time::{Duration, Instant};

use super::{Out, seg};
use crate::error::{Error, Kind};
use crate::event::Loop;
use crate::event::Summary;
use crate::event::wire::Report;
use crate::report::Note;
use crate::schedule::{align_down, align_up};

/// How a part that ended failed, as its owner judges it: the segment that spends a try
/// (the whole rest when no one segment's did), and when its bytes may be asked again.
struct Judged {
    counted: Option<(u64, u64)>,
    not_before: Duration,
}

impl Loop<'_> {
    /// One helper's report (reports of another lending than this transfer's are dropped).
    pub(super) fn apply(&mut self, m: Report) {
        let Some(r) = self.remote.as_ref() else {
            return;
        };
        let lending = match &m {
            Report::Landed { lending, .. }
            | Report::Ended { lending, .. }
            | Report::Note { lending, .. }
            | Report::Capped { lending, .. }
            | Report::Gave { lending, .. }
            | Report::Whole { lending, .. }
            | Report::Blame { lending, .. } => *lending,
            // (Of the run's reactor's, never of a lending.)
            Report::Idle { .. } => return,
        };
        if lending != r.lent.lending {
            return;
        }
        match m {
            // (Whole transfers go to the run's reactor, never to a lending.)
            Report::Whole { .. } | Report::Idle { .. } => {}
            Report::Note { helper, note, .. } => self.shared.report.note(Note::OnReactor {
                reactor: helper,
                note: Box::new(note),
            }),
            Report::Gave {
                helper, range, tries, ..
            } => self.on_gave(helper, range, tries),
            Report::Blame {
                helper,
                counted,
                changed,
                wait,
                hold,
                ..
            } => {
                if let Some(out) = self.out_mut(helper) {
                    out.counted = counted;
                    out.changed = changed;
                    out.wait = wait;
                    out.hold = hold;
                }
            }
            Report::Capped {
                helper, serving, proxy, ..
            } => self.on_capped(helper, serving, proxy),
            Report::Landed {
                helper,
                ranges,
                serving,
                ..
            } => self.on_landed(helper, &ranges, serving),
            Report::Ended {
                helper,
                range,
                error,
                summary,
                ..
            } => self.on_part_ended(helper, range, error.as_ref(), summary.as_deref()),
        }
    }

    /// The part out on helper `helper` (1-based), if it has one.
    fn out_mut(&mut self, helper: usize) -> Option<&mut Out> {
        self.remote.as_mut()?.parts.get_mut(helper.checked_sub(1)?)?.as_mut()
    }

    /// Helper `helper` answered an ask: `range` (tried `tries` times) of its part is this
    /// queue's now, or nothing was worth giving.
    fn on_gave(&mut self, helper: usize, range: Option<(u64, u64)>, tries: u32) {
        let Some(out) = self.out_mut(helper) else {
            return;
        };
        out.asked = out.asked.map(|a| (a.0, true));
        if let Some((a, b)) = range {
            // (The helper writes no byte of it from now on: it is this queue's, with the
            // tries the part had: a helper counts none of its own.)
            out.given.push((a, b));
            let tries = out.tries.max(tries);
            self.shared.transfer.plan.requeue(seg(a, b, tries), false);
        }
    }

    /// The server turned one of helper `helper`'s connections away while it had `serving`
    /// of its own served (`proxy`: a proxy refused a tunnel).
    fn on_capped(&mut self, helper: usize, serving: usize, proxy: bool) {
        let Some(r) = self.remote.as_ref() else {
            return;
        };
        // What the server was serving when it turned the helper away: the owner's
        // requests, the other helpers' (as they last said) and the helper's own.
        let others: usize = r
            .parts
            .iter()
            .enumerate()
            .filter(|&(h, _)| h + 1 != helper)
            .filter_map(|(_, o)| o.as_ref().map(|o| o.serving))
            .sum();
        let own = self.serving(0);
        let using = (own + others + serving).max(1);
        self.shared.transfer.saw_cap(using, using);
        // (As for one reactor: a refusal while a single other request was served may be a
        // passing 503, not a cap of one.)
        if proxy || serving > 0 || own + others >= 2 {
            self.learn_cap(0, using);
        }
    }

    /// Helper `helper` landed `ranges` of its part so far and has `serving` requests served.
    fn on_landed(&mut self, helper: usize, ranges: &[(u64, u64)], serving: usize) {
        let Some(r) = self.remote.as_mut() else {
            return;
        };
        let Some(out) = r.parts.get_mut(helper - 1).and_then(Option::as_mut) else {
            return;
        };
        out.serving = serving;
        let bytes: u64 = ranges.iter().map(|x| x.1 - x.0).sum();
        let more = bytes.saturating_sub(out.landed);
        if more > 0 || serving > 0 {
            out.moved = Instant::now();
        }
        out.landed = out.landed.max(bytes);
        r.by_others += more;
        r.landed_by[helper - 1] += more;
        self.shared.transfer.received += more;
        for &(s, e) in ranges {
            self.shared.transfer.landed.add(s, e);
        }
    }

    /// Helper `helper`'s part `range` ended (`error`: why not every byte landed): what of
    /// it is not on disk goes back to the queue (edges widened to the alignment: fetching
    /// a few bytes again beats an unaligned write), with a try spent as judged.
    fn on_part_ended(&mut self, helper: usize, range: (u64, u64), error: Option<&Error>, summary: Option<&Summary>) {
        let Some(r) = self.remote.as_mut() else {
            return;
        };
        if let Some(s) = summary {
            r.counts.count(helper, s);
        }
        let Some(out) = r.parts.get_mut(helper - 1).and_then(Option::take) else {
            return;
        };
        debug_assert_eq!(out.range, range);
        // (What it gave back is this reactor's queue's, landed or not, and its holes were
        // never its.)
        let mut covered = self.shared.transfer.landed.clone();
        for &(s, e) in out.given.iter().chain(&out.holes) {
            covered.add(s, e);
        }
        let gaps = covered.gaps_in(range.0, range.1);
        // An Interrupted part was stopped by this owner (ending, or taking it back).
        let failed = error.filter(|e| e.kind != Kind::Interrupted);
        let judged = match failed {
            Some(e) => self.judge_part_failure(helper, &out, e, !gaps.is_empty()),
            None => Judged {
                counted: None,
                not_before: self.shared.transfer.started.elapsed(),
            },
        };
        self.requeue_gaps(&gaps, &out, &judged);
    }

    /// Part `out` of helper `helper` failed with `e` (`left`: bytes of it are not on
    /// disk). A helper gives a part up at its first counted failure: the segment that
    /// failed spends a try (the whole rest when no one segment's did), the rest goes back
    /// with the tries it had.
    fn judge_part_failure(&mut self, helper: usize, out: &Out, e: &Error, left: bool) -> Judged {
        let mut judged = Judged {
            counted: None,
            not_before: self.shared.transfer.started.elapsed(),
        };
        self.shared.report.note(Note::PartFailed {
            reactor: helper,
            why: e.msg.clone(),
        });
        if out.changed {
            // Its bytes are not of the owner's file, and neither is the server's.
            self.shared.transfer.changed = true;
            self.shared
                .fatal
                .get_or_insert(Error::new(Kind::Protocol, format!("reactor {helper}: {}", e.msg)));
            return judged;
        }
        if matches!(e.kind, Kind::LocalIo | Kind::Internal) {
            // This reactor could not do it (its ring, a descriptor, its memory): it takes
            // no more of this transfer, and no try is spent.
            let allot = self.remote.as_mut().and_then(|r| r.allot.as_mut());
            if let Some(a) = allot.and_then(|a| a.get_mut(helper - 1)) {
                *a = 0;
            }
            return judged;
        }
        let range = out.range;
        judged.counted = Some(out.counted.unwrap_or(range));
        let tries = out.tries + 1;
        if tries >= self.shared.opts.max_tries && left {
            let msg = format!(
                "reactor {helper}: bytes {}-{}: {} (gave up after {})",
                range.0,
                range.1 - 1,
                e.msg,
                crate::schedule::retry::n_tries(tries)
            );
            self.shared.fatal.get_or_insert(Error::new(e.kind, msg));
        }
        let jitter = f64::from(self.started.elapsed().subsec_nanos() % 1000) / 1000.0;
        // (At least the wait the helper judged, as on one reactor: the server's
        // Retry-After; a 503 or 429 holds the origin for as long, so no reactor asks it
        // earlier.)
        let backoff = crate::schedule::retry::backoff(self.shared.opts.retry_wait_s, tries, jitter);
        judged.not_before += backoff.max(out.wait);
        if out.hold {
            self.shared.transfer.plan.hold(0, judged.not_before);
        }
        judged
    }

    /// Queues `gaps` of ended part `out` again, aligned, cut at the counted segment's
    /// edges: that segment with a try more, not before its wait; the rest at once.
    fn requeue_gaps(&mut self, gaps: &[(u64, u64)], out: &Out, judged: &Judged) {
        let align = self.shared.transfer.align;
        let total = self.shared.transfer.total.unwrap_or(out.range.1);
        let now = self.shared.transfer.started.elapsed();
        let counted = judged.counted;
        for &(s, e) in gaps.iter().rev() {
            let (s, e) = (align_down(s, align), align_up(e, align).min(total));
            // Cut at the counted segment's edges (aligned: segment bounds are).
            let mut cuts = vec![s, e];
            if let Some((cs, ce)) = counted {
                cuts.extend([cs, ce].into_iter().filter(|&x| x > s && x < e));
            }
            cuts.sort_unstable();
            for w in cuts.windows(2).rev() {
                let hit = counted.is_some_and(|(cs, ce)| w[0] < ce && w[1] > cs);
                let tries = out.tries + u32::from(hit);
                let wait = if hit { judged.not_before } else { now };
                self.shared
                    .transfer
                    .plan
                    .requeue_after(seg(w[0], w[1], tries), false, wait);
            }
        }
    }
}
