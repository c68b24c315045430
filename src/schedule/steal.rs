//! Work stealing, the decisions: whether a running body is worth a second connection, and
//! where to split it. Pure: times and rates come from the caller.

use std::time::Duration;

use super::align_up;

/// A body is split only when the rest would take at least this long at its rate.
pub const STEAL_TIME: Duration = Duration::from_millis(200);
/// A body's own rate is trusted once it has run this long; before, the download's rate per
/// busy connection stands in.
pub const STEAL_RATE_AFTER: Duration = Duration::from_millis(200);
/// Never split below this many bytes left: each half must be worth a request (and the
/// victim's reconnect).
pub const STEAL_FLOOR: u64 = 256 << 10;

/// A running body, as work stealing sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Body {
    /// Bytes still to come.
    pub remaining: u64,
    /// Bytes it moved since its first body byte.
    pub moved: u64,
    /// Time from its request to its first body byte; `None` while no byte came.
    pub ttfb: Option<Duration>,
    /// Time since its first body byte.
    pub ran: Duration,
}

/// Whether `body` is worth a second connection: its rest would take at least
/// [`STEAL_TIME`], and at least twice the time it waited for its first byte (the thief
/// waits about as long), at its own rate once it ran [`STEAL_RATE_AFTER`], else at
/// `fallback` (the download's recent rate per busy connection, bytes/s).
pub fn worth_stealing(body: &Body, fallback: f64) -> bool {
    let rem = body.remaining;
    if rem < STEAL_FLOOR {
        return false;
    }
    let Some(ttfb) = body.ttfb else {
        // No byte yet (a slow first byte): nothing to go by but the bytes.
        return rem >= 8 * STEAL_FLOOR;
    };
    let rate = if body.ran >= STEAL_RATE_AFTER && body.moved > 0 {
        body.moved as f64 / body.ran.as_secs_f64()
    } else {
        fallback
    };
    if rate <= 0.0 {
        return rem >= 8 * STEAL_FLOOR;
    }
    let need = STEAL_TIME.max(2 * ttfb);
    rem as f64 >= need.as_secs_f64() * rate
}

/// Where to split a body at `pos` that ends at `end` with `remaining` bytes to come: the
/// aligned middle of what is left, strictly inside `(pos, end)` and not past `seg_end`.
pub fn split_point(pos: u64, end: u64, remaining: u64, seg_end: u64, align: u64) -> Option<u64> {
    let at = align_up(pos + remaining / 2, align);
    (pos < at && at < end && at <= seg_end).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn body(remaining: u64, moved: u64, ttfb_ms: Option<u64>, ran_ms: u64) -> Body {
        Body {
            remaining,
            moved,
            ttfb: ttfb_ms.map(Duration::from_millis),
            ran: Duration::from_millis(ran_ms),
        }
    }

    #[test]
    fn below_the_floor_never_and_without_a_byte_only_when_large() {
        assert!(!worth_stealing(&body(STEAL_FLOOR - 1, 0, Some(1), 1000), 1e9));
        assert!(!worth_stealing(&body(8 * STEAL_FLOOR - 1, 0, None, 0), 1e9));
        assert!(worth_stealing(&body(8 * STEAL_FLOOR, 0, None, 0), 0.0));
    }

    #[test]
    fn the_bodys_own_rate_decides_once_it_ran_long_enough() {
        // 1 MiB/s for 1 s: 300 KiB left take 0.29 s ≥ 0.2 s: split.
        assert!(worth_stealing(&body(300 << 10, MIB, Some(10), 1000), 0.0));
        // 100 MiB/s: the same 300 KiB take 3 ms: not worth a request.
        assert!(!worth_stealing(&body(300 << 10, 100 * MIB, Some(10), 1000), 0.0));
        // A slow first byte (0.5 s) asks for ≥ 1 s of work left.
        assert!(!worth_stealing(&body(512 << 10, MIB, Some(500), 1000), 0.0));
        assert!(worth_stealing(&body(2 * MIB, MIB, Some(500), 1000), 0.0));
    }

    #[test]
    fn a_young_body_is_judged_at_the_fallback_rate() {
        // Ran 100 ms: its own rate (huge) is not trusted yet; the fallback (1 MiB/s) is.
        assert!(worth_stealing(&body(300 << 10, 100 * MIB, Some(10), 100), MIB as f64));
        assert!(!worth_stealing(&body(300 << 10, 0, Some(10), 100), 100.0 * MIB as f64));
    }

    #[test]
    fn edges_of_the_rules() {
        // Exactly the floor is not below it: a slow body (100 KiB/s) of 256 KiB splits.
        assert!(worth_stealing(&body(STEAL_FLOOR, 100 << 10, Some(10), 1000), 0.0));
        // No rate at all (young body, no fallback): only by the bytes, 2 MiB or more.
        assert!(worth_stealing(&body(8 * STEAL_FLOOR, 0, Some(10), 100), 0.0));
        assert!(!worth_stealing(&body(8 * STEAL_FLOOR - 1, 0, Some(10), 100), 0.0));
        assert!(!worth_stealing(&body(STEAL_FLOOR, 0, Some(10), 100), 0.0));
        // Ran long but moved nothing: its own rate (0) is no rate; the fallback decides.
        assert!(worth_stealing(&body(300 << 10, 0, Some(10), 1000), MIB as f64));
        // Ran exactly STEAL_RATE_AFTER: its own rate (10 MiB/s: 300 KiB take 29 ms) is
        // trusted over the slow fallback.
        assert!(!worth_stealing(&body(300 << 10, 2 * MIB, Some(10), 200), 1024.0));
        // The rest takes exactly twice the first byte's wait (0.5 s at 1 MiB/s): split.
        assert!(worth_stealing(&body(512 << 10, MIB, Some(250), 1000), 0.0));
    }

    #[test]
    fn the_split_may_end_exactly_at_the_segments_end_but_never_at_pos() {
        assert_eq!(split_point(0, 8 * MIB, 8 * MIB, 4 * MIB, 4096), Some(4 * MIB));
        // Less than two bytes left at an aligned pos: the middle is pos itself.
        assert_eq!(split_point(4096, 4097, 1, 4097, 4096), None);
    }

    #[test]
    fn the_split_is_aligned_and_strictly_inside() {
        assert_eq!(split_point(0, 8 * MIB, 8 * MIB, 8 * MIB, 4096), Some(4 * MIB));
        assert_eq!(split_point(1, 8 * MIB, 8 * MIB - 1, 8 * MIB, 4096), Some(4 * MIB));
        // Nothing aligned strictly inside a body of less than one block.
        assert_eq!(split_point(0, 4096, 4096, 4096, 4096), None);
        // Never past the segment's end (a body already shrunk).
        assert_eq!(split_point(0, 8 * MIB, 8 * MIB, 3 * MIB, 4096), None);
    }
}
