//! A request for several byte ranges (RFC 9110 §14.1.2) in a partial fetch
//! ([`crate::config::Config::fetch_only`]): the runs asked, the parts received, which part
//! may come next, and what is still owed when the answer ends or fails. Pure state: the
//! body's bytes go through the usual placer, one part at a time
//! ([`crate::control::body`]).
//!
//! The server may answer with a `multipart/byteranges` 206 of one part per range (RFC
//! 9110 §14.6), in any order, or merge neighbouring ranges into one part (only the bytes
//! between asked ranges may come with them); with one part only, or a single-range 206, it
//! served fewer than asked: what it sent is kept, the rest is asked again with fewer
//! ranges per request (its mirror's [`crate::transfer::mirror::Mirror::ranges_per_request`] halves). A 200 or 416 to a multi-range request refuses them: one range per request
//! from then on.

use crate::schedule::{Landed, Segment};

/// The longest `Range` field value written (bytes): well under nginx's default
/// `large_client_header_buffers` line of 8 KiB.
pub(crate) const MAX_RANGE_LINE: usize = 4096;

/// What a multi-range request asked for and what of it came.
#[derive(Debug)]
pub(crate) struct Multi {
    /// The runs asked, `[start, end)` bytes, sorted, disjoint and not adjacent.
    pub(crate) asked: Vec<(u64, u64)>,
    /// What came whole: parts placed to their end (ranges of `asked`, and bytes between
    /// them a merged part carried).
    pub(crate) done: Landed,
    /// The response's boundary (a `multipart/byteranges` 206); empty for a single-range
    /// 206 (one part: its whole body).
    pub(crate) boundary: Vec<u8>,
    /// A part's bytes are being placed (the job's segment is its range); false before the
    /// first part and between parts.
    pub(crate) in_part: bool,
    /// Parts received (begun).
    pub(crate) parts: usize,
    /// A `multipart/byteranges` answer's Content-Length, and the bytes of it walked so far
    /// (part heads and part bytes): when its close delimiter ends exactly at that length,
    /// the answer was read whole (`whole`) and the connection can carry the next request
    /// (RFC 9110 §14.6, RFC 2046 §5.1.1: the body ends after the close delimiter).
    pub(crate) body: Option<u64>,
    pub(crate) walked: u64,
    pub(crate) whole: bool,
}

impl Multi {
    /// A request for `runs` (`[start, end)` segments, sorted by start, disjoint):
    /// neighbours that touch or overlap are asked as one range. Returns the state and the request's
    /// byte-range set, inclusive offsets.
    pub(crate) fn new(runs: &[Segment]) -> (Multi, Vec<(u64, u64)>) {
        let mut asked: Vec<(u64, u64)> = Vec::with_capacity(runs.len());
        for s in runs {
            match asked.last_mut() {
                // (Touching or overlapping: widened gap edges can overlap by a block.)
                Some(last) if last.1 >= s.start => last.1 = last.1.max(s.end),
                _ => asked.push((s.start, s.end)),
            }
        }
        let set = asked.iter().map(|&(a, b)| (a, b - 1)).collect();
        let m = Multi {
            asked,
            done: Landed::default(),
            boundary: Vec::new(),
            in_part: false,
            parts: 0,
            body: None,
            walked: 0,
            whole: false,
        };
        (m, set)
    }

    /// Whether a part carrying bytes `first..=last` may come now: it starts where an
    /// asked range starts, ends inside an asked range, carries nothing outside the asked
    /// ranges but the bytes between them, and nothing received already.
    ///
    /// # Errors
    /// Why not, in words (for the failure's message).
    pub(crate) fn check_part(&self, first: u64, last: u64) -> Result<(), String> {
        let end = last.saturating_add(1);
        let set = || {
            let v: Vec<String> = self.asked.iter().map(|&(a, b)| format!("{a}-{}", b - 1)).collect();
            v.join(",")
        };
        let starts = self.asked.iter().any(|&(a, _)| a == first);
        let ends = self.asked.iter().any(|&(a, b)| a < end && end <= b);
        if !starts || !ends {
            return Err(format!(
                "a part carries bytes {first}-{last}, which is not what was asked (bytes={})",
                set()
            ));
        }
        if !self.done.within(&[(first, end)]).is_empty() {
            return Err(format!("a part carries bytes {first}-{last} a second time"));
        }
        Ok(())
    }

    /// The runs still owed, `[start, end)`: the asked ones less what came whole, less
    /// `[part.start, from)` of a part cut short (its bytes up to `from` are on their way
    /// to the file).
    pub(crate) fn owed(&self, part: Option<(u64, u64)>) -> Vec<(u64, u64)> {
        let mut have = self.done.clone();
        if let Some((a, from)) = part {
            have.add(a, from);
        }
        let mut out = Vec::new();
        for &(a, b) in &self.asked {
            out.extend(have.gaps_in(a, b));
        }
        out
    }

    /// The close delimiter was read and `rest` bytes of the body came after the last part's
    /// bytes (the delimiter and any epilogue): the answer was read whole when they end it
    /// at its Content-Length exactly (none known: never).
    pub(crate) fn ended(&mut self, rest: usize) {
        self.whole = self.body == Some(self.walked + rest as u64);
    }

    /// Whether the connection must close after this answer: a multipart answer not read
    /// to its end (a single-range 206 is delimited as any other).
    pub(crate) fn unread(&self) -> bool {
        !self.boundary.is_empty() && !self.whole
    }

    /// The ranges per request to ask from now on, after an answer that carried `parts`
    /// parts and left `owed` runs of the `asked` ones: fewer (half, at least one) when it
    /// served fewer than asked; `None` when it served them all.
    pub(crate) fn step_down(&self, current: usize, owed: usize) -> Option<usize> {
        (self.asked.len() > 1 && owed > 0 && self.parts < self.asked.len())
            .then(|| (current.min(self.asked.len()) / 2).max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_that_touch_or_overlap_are_asked_as_one_range() {
        let (m, set) = Multi::new(&[seg(0, 8192), seg(4096, 12288), seg(12288, 16384), seg(20480, 24576)]);
        assert_eq!(m.asked, [(0, 16384), (20480, 24576)]);
        assert_eq!(set, [(0, 16383), (20480, 24575)]);
        let (m, _) = Multi::new(&[seg(0, 8192), seg(100, 200)]);
        assert_eq!(m.asked, [(0, 8192)], "one inside the other");
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
    fn neighbours_are_one_range_and_the_set_is_inclusive() {
        let (m, set) = Multi::new(&[seg(0, 10), seg(10, 20), seg(40, 50)]);
        assert_eq!(m.asked, [(0, 20), (40, 50)]);
        assert_eq!(set, [(0, 19), (40, 49)]);
    }

    #[test]
    fn a_part_must_be_what_was_asked_or_a_merge_of_it() {
        let (mut m, _) = Multi::new(&[seg(0, 10), seg(20, 30), seg(40, 50)]);
        assert!(m.check_part(20, 29).is_ok());
        assert!(m.check_part(0, 49).is_ok(), "all merged, with the bytes between");
        assert!(m.check_part(0, 4).is_ok(), "cut short: the rest is owed");
        assert!(m.check_part(5, 9).is_err(), "not where a range starts");
        assert!(m.check_part(20, 35).is_err(), "ends between ranges");
        assert!(m.check_part(40, 50).is_err(), "past the last range");
        m.done.add(20, 30);
        assert!(m.check_part(20, 29).is_err(), "a second time");
        assert!(m.check_part(0, 29).is_err(), "a merge over a part received");
        assert_eq!(m.owed(Some((40, 44))), [(0, 10), (44, 50)]);
        assert_eq!(m.owed(None), [(0, 10), (40, 50)]);
    }

    #[test]
    fn fewer_parts_than_ranges_halve_the_ranges_per_request_down_to_one() {
        let (mut m, _) = Multi::new(&[seg(0, 10), seg(20, 30), seg(40, 50)]);
        m.parts = 1;
        assert_eq!(m.step_down(crate::transfer::mirror::MAX_RANGES_PER_REQUEST, 2), Some(1));
        assert_eq!(
            m.step_down(crate::transfer::mirror::MAX_RANGES_PER_REQUEST, 0),
            None,
            "merged: all came"
        );
        m.parts = 3;
        assert_eq!(
            m.step_down(crate::transfer::mirror::MAX_RANGES_PER_REQUEST, 1),
            None,
            "every part came, one cut short"
        );
        let runs: Vec<Segment> = (0..20).map(|k| seg(k * 100, k * 100 + 10)).collect();
        let (mut m, _) = Multi::new(&runs);
        m.parts = 1;
        assert_eq!(
            m.step_down(crate::transfer::mirror::MAX_RANGES_PER_REQUEST, 19),
            Some(10)
        );
        assert_eq!(m.step_down(10, 19), Some(5));
    }
}
