//! Try accounting: whether a failed attempt spends one of its segment's tries, and how long
//! a connection slot waits before it reconnects. Pure: the caller says what happened (and
//! gives the jitter); nothing here reads a clock or touches a socket.

use std::time::Duration;

use super::Segment;

/// Bytes an attempt must move forward for its failure not to count as a try: a server
/// that cuts every reply after a few KiB must still run out of tries.
pub const MIN_PROGRESS: u64 = 64 << 10;

/// Longest wait between two tries, seconds.
pub const MAX_BACKOFF_S: f64 = 30.0;

/// What a failed attempt did, as far as its segment's tries are concerned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attempt {
    /// Bytes the segment's start moved forward (landed, from an aligned offset).
    pub advanced: u64,
    /// The server serves ranges (without them a stream starts over: no progress is kept).
    pub ranges: bool,
    /// Nothing of the reply arrived: no head byte, no body byte.
    pub silent: bool,
    /// The request went on a kept-alive connection (one that carried a request before, or
    /// sat open and idle): the server may have closed it meanwhile.
    pub reused: bool,
    /// The connection moved no byte for `--stall-timeout`.
    pub stalled: bool,
    /// The server turned the connection away: a 503 status, a refused or reset connect.
    pub busy: bool,
    /// Another connection is receiving a body right now.
    pub others_progress: bool,
    /// The first reply came (size and range support are known).
    pub planned: bool,
}

/// How a failed attempt is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A server's per-client connection cap: the slot waits and asks again; no try spent.
    Parked,
    /// The attempt moved ≥ [`MIN_PROGRESS`] forward: no try spent.
    Progress,
    /// A kept-alive connection the server closed while it was idle: the segment's one free
    /// retry ([`Segment::grace`]).
    FreeRetry,
    /// One of the segment's tries is spent.
    Counted,
}

/// Whether the server turned an extra connection away while others download: that lowers
/// the concurrency instead of spending tries (also for a slot with no request, whose
/// connect was refused).
pub fn parked(a: &Attempt) -> bool {
    a.busy && a.planned && a.others_progress
}

/// Judges a failed attempt on `seg` and counts it there (`tries`, `grace`).
///
/// A stall always counts (a server that accepts and never answers must run out of tries,
/// whatever connection the request went on); the idle-close grace is once per segment.
pub fn judge(seg: &mut Segment, a: &Attempt) -> Verdict {
    if parked(a) {
        return Verdict::Parked;
    }
    if a.ranges && a.advanced >= MIN_PROGRESS {
        return Verdict::Progress;
    }
    if a.reused && a.silent && !a.stalled && !a.busy && !seg.grace {
        seg.grace = true;
        return Verdict::FreeRetry;
    }
    seg.tries += 1;
    Verdict::Counted
}

/// Wait before retry number `attempt` (1-based): `base_s · 2^(attempt-1)` seconds, capped at
/// [`MAX_BACKOFF_S`], times `0.5 + jitter` (`jitter` in `[0, 1)`) so connections do not
/// retry in lockstep. Negative or NaN bases give zero.
pub fn backoff(base_s: f64, attempt: u32, jitter: f64) -> Duration {
    if base_s.is_nan() || base_s <= 0.0 {
        return Duration::ZERO;
    }
    let exp = base_s * f64::from(1u32 << attempt.saturating_sub(1).min(16));
    let factor = 0.5 + jitter.clamp(0.0, 1.0);
    let s = exp.min(MAX_BACKOFF_S) * factor;
    if s.is_finite() && s > 0.0 {
        Duration::from_secs_f64(s)
    } else {
        Duration::ZERO
    }
}

/// "1 try", "3 tries".
pub fn n_tries(n: u32) -> String {
    if n == 1 {
        "1 try".to_owned()
    } else {
        format!("{n} tries")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg() -> Segment {
        Segment {
            start: 0,
            end: 1 << 20,
            tries: 0,
            grace: false,
        }
    }

    #[test]
    fn a_stall_always_counts_even_on_a_reused_connection() {
        let mut s = seg();
        let a = Attempt {
            silent: true,
            reused: true,
            stalled: true,
            ranges: true,
            planned: true,
            ..Attempt::default()
        };
        for n in 1..=5 {
            assert_eq!(judge(&mut s, &a), Verdict::Counted);
            assert_eq!(s.tries, n);
        }
    }

    #[test]
    fn an_idle_close_is_free_once_per_segment() {
        let mut s = seg();
        let a = Attempt {
            silent: true,
            reused: true,
            ..Attempt::default()
        };
        assert_eq!(judge(&mut s, &a), Verdict::FreeRetry);
        assert_eq!((s.tries, s.grace), (0, true));
        assert_eq!(judge(&mut s, &a), Verdict::Counted);
        assert_eq!(s.tries, 1);
        // Not silent (a head or body byte came), or a fresh connection: counted at once.
        for a in [
            Attempt {
                reused: true,
                ..Attempt::default()
            },
            Attempt {
                silent: true,
                ..Attempt::default()
            },
        ] {
            let mut s = seg();
            assert_eq!(judge(&mut s, &a), Verdict::Counted);
        }
    }

    #[test]
    fn a_cap_parks_only_while_others_download_after_the_first_reply() {
        let busy = Attempt {
            busy: true,
            planned: true,
            others_progress: true,
            ..Attempt::default()
        };
        let mut s = seg();
        assert_eq!(judge(&mut s, &busy), Verdict::Parked);
        assert_eq!((s.tries, s.grace), (0, false));
        for a in [
            Attempt {
                others_progress: false,
                ..busy
            },
            Attempt { planned: false, ..busy },
            Attempt { busy: false, ..busy },
        ] {
            let mut s = seg();
            assert_eq!(judge(&mut s, &a), Verdict::Counted, "{a:?}");
        }
        // A 503 on a reused connection is no idle close.
        let mut s = seg();
        let a = Attempt {
            reused: true,
            silent: true,
            others_progress: false,
            ..busy
        };
        assert_eq!(judge(&mut s, &a), Verdict::Counted);
    }

    #[test]
    fn progress_spends_no_try_but_only_with_ranges_and_enough_bytes() {
        let mut s = seg();
        let a = Attempt {
            advanced: MIN_PROGRESS,
            ranges: true,
            ..Attempt::default()
        };
        assert_eq!(judge(&mut s, &a), Verdict::Progress);
        assert_eq!(s.tries, 0);
        let a = Attempt {
            advanced: MIN_PROGRESS - 1,
            ranges: true,
            ..Attempt::default()
        };
        assert_eq!(judge(&mut s, &a), Verdict::Counted);
        let a = Attempt {
            advanced: 1 << 30,
            ranges: false,
            ..Attempt::default()
        };
        assert_eq!(judge(&mut s, &a), Verdict::Counted);
    }

    #[test]
    fn backoff_doubles_caps_and_jitters_within_half_to_one_and_a_half() {
        assert_eq!(backoff(0.5, 1, 0.5), Duration::from_secs_f64(0.5));
        assert_eq!(backoff(0.5, 3, 0.5), Duration::from_secs_f64(2.0));
        assert_eq!(backoff(0.5, 40, 0.5), Duration::from_secs_f64(MAX_BACKOFF_S));
        assert_eq!(backoff(1.0, 1, 0.0), Duration::from_secs_f64(0.5));
        assert!(backoff(1.0, 1, 0.999) < Duration::from_secs_f64(1.5));
        assert_eq!(backoff(-1.0, 2, 0.5), Duration::ZERO);
        assert_eq!(backoff(f64::NAN, 2, 0.5), Duration::ZERO);
    }

    #[test]
    fn tries_are_named_in_words() {
        assert_eq!(n_tries(1), "1 try");
        assert_eq!(n_tries(3), "3 tries");
    }
}
