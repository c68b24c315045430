//! Try accounting: whether a failed attempt spends one of its segment's tries, how long the
//! segment (and, for a server-wide answer, its origin) then waits, and how long a
//! connection slot waits before it reconnects. Pure: the caller says what happened (and
//! gives the jitter and the time); nothing here reads a clock or touches a socket.

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
    /// The request went on a connection that had already carried a whole response (kept
    /// alive, RFC 9112 §9.3).
    pub kept: bool,
    /// The connection was closed under the request: end of stream, ECONNRESET or EPIPE.
    pub closed: bool,
    /// The connection moved no byte for `--stall-timeout`.
    pub stalled: bool,
    /// The server turned the connection away: a 503 status, a refused or reset connect.
    pub busy: bool,
    /// Another connection is receiving a body right now.
    pub others_progress: bool,
    /// Another transfer on the ring is being served by the same origin (`-j`): a refusal
    /// is the server's cap also before this transfer's first answer (not a reset of a
    /// reused connection: that is the keep-alive close; a status answer on one is a cap).
    pub others_served: bool,
    /// The server turned the request away with a status (503, 429), not a reset: on a
    /// reused connection too it is no keep-alive close.
    pub answered: bool,
    /// The first reply came (size and range support are known).
    pub planned: bool,
    /// The refusal came while other connections to the same target are open: a proxy
    /// that refuses an extra `CONNECT` tunnel. A cap by itself, whatever the others do.
    pub extra: bool,
    /// Other connections to the same origin sit open with no request: a server that counts
    /// idle keep-alive connections toward its per-client cap turns the busy one away.
    pub idle_others: bool,
    /// The answer asked for a wait (Retry-After). Without one the backoff is short anyway,
    /// and closing the idle connections would cost the concurrency for a brief outage.
    pub asked_wait: bool,
}

/// How a failed attempt is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A server's per-client connection cap: the slot waits and asks again; no try spent.
    Parked,
    /// The only busy connection was turned away while idle ones to the same origin stay
    /// open (a server may count them toward its per-client cap): the idle ones close, and
    /// the segment waits its backoff, not a Retry-After beyond [`MAX_BACKOFF_S`] (which was
    /// about the crowd). One of the segment's tries is spent.
    Crowded,
    /// The attempt moved ≥ [`MIN_PROGRESS`] forward: no try spent.
    Progress,
    /// A kept-alive connection the server closed while it was idle: the segment's one free
    /// retry ([`Segment::grace`]).
    FreeRetry,
    /// A connection that had carried a whole response was closed under the next request
    /// before any byte of its answer ([`resend`]): the request goes again at once on
    /// another connection, no try spent.
    Resent,
    /// One of the segment's tries is spent.
    Counted,
}

/// Whether the server turned an extra connection away while others download: that lowers
/// the concurrency instead of spending tries (also for a slot with no request, whose
/// connect was refused). A kept-alive connection closed under its request ([`resend`]) is
/// the server's idle close, not a cap.
pub fn parked(a: &Attempt) -> bool {
    !resend(a)
        && a.busy
        && ((a.planned && a.others_progress) || (a.others_served && (!a.reused || a.answered)) || a.extra)
}

/// Whether a failed request is sent again at once, with no try spent and no wait: it went
/// on a connection that had carried a whole response, and that connection was closed
/// (end of stream, ECONNRESET, EPIPE) before any byte of the answer came — the server
/// closed the idle connection as the request crossed it (RFC 9112 §9.3.1: a client may
/// send an idempotent request again when its connection closed before the answer; GET is
/// idempotent, RFC 9110 §9.2.2). A stall or a status answer always counts.
///
/// Bounded per connection, not per request: the connection closes with the failure, so
/// each kept-alive connection gives at most one free re-send, and only after it served a
/// whole response; free re-sends never outnumber the responses the server gave. (A request
/// may meet two such connections in a row when several sat idle: each close was the
/// server's, not the request's.)
pub fn resend(a: &Attempt) -> bool {
    a.kept && a.closed && a.silent && !a.stalled && !a.answered
}

/// Judges a failed attempt on `seg` and counts it there (`tries`, `grace`).
///
/// A stall always counts (a server that accepts and never answers must run out of tries,
/// whatever connection the request went on); the idle-close grace is once per segment.
pub fn judge(seg: &mut Segment, a: &Attempt) -> Verdict {
    if resend(a) {
        return Verdict::Resent;
    }
    if parked(a) {
        return Verdict::Parked;
    }
    if a.busy && a.idle_others && a.asked_wait && !a.others_progress {
        seg.tries += 1;
        return Verdict::Crowded;
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

/// How long a failed attempt's segment waits before any connection asks for it again, and
/// whether the same wait holds every request to its origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    /// No connection asks for the segment before this much time has passed.
    pub segment: Duration,
    /// The answer was about the server, not the request (a 503 or 429, a refused
    /// connect): no request goes to that origin (the server, or that mirror) before
    /// `segment` has passed either.
    pub origin: bool,
}

/// The wait after attempt verdict `v` on a segment now at `tries` (as counted): a counted
/// try waits [`backoff`]`(base_s, tries, jitter)`, at least `retry_after` (the server's
/// Retry-After); a crowded one its backoff, and a Retry-After only up to
/// [`MAX_BACKOFF_S`] (a longer one was about the idle connections it closed); a free retry or progress goes again at once unless a
/// Retry-After says otherwise; a parked attempt puts no wait on the segment (the
/// connections the server allows take it). `server_wide`: a counted try's wait holds the
/// origin (RFC 9110 §15.6.4 503, RFC 6585 §4 429).
pub fn wait(
    v: Verdict,
    base_s: f64,
    tries: u32,
    jitter: f64,
    retry_after: Option<Duration>,
    server_wide: bool,
) -> Wait {
    let segment = match v {
        Verdict::Parked => Duration::ZERO,
        // A Retry-After longer than the longest backoff was about the crowd just closed.
        Verdict::Crowded => backoff(base_s, tries, jitter).max(
            retry_after
                .filter(|d| d.as_secs_f64() <= MAX_BACKOFF_S)
                .unwrap_or_default(),
        ),
        Verdict::Progress | Verdict::FreeRetry => retry_after.unwrap_or_default(),
        Verdict::Resent => Duration::ZERO,
        Verdict::Counted => backoff(base_s, tries, jitter).max(retry_after.unwrap_or_default()),
    };
    Wait {
        segment,
        origin: server_wide && matches!(v, Verdict::Counted) && !segment.is_zero(),
    }
}

/// A connection turned away, as `-v` says it: by whom, and with how many the download goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cap {
    /// A proxy refused an extra `CONNECT` tunnel (else the server an extra connection).
    pub proxy: bool,
    /// Idle connections closed because the server counts them toward its cap
    /// ([`Verdict::Crowded`]); 0 for a cap on extra connections.
    pub closed: usize,
    /// Connections that go on (the server's: other files' requests to it count too).
    pub using: usize,
    /// Of `using`, the other files' (0 for a file alone).
    pub theirs: usize,
    /// Times in a row the server turned this slot away, this one included (0: idle
    /// connections closed, no slot turned away); a repeat is said at `-vv`.
    pub refusals: u32,
    /// How long the slot waits before it asks again (unless a connection to the origin
    /// ends first).
    pub wait: std::time::Duration,
}

impl std::fmt::Display for Cap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let going = match self.theirs {
            0 => format!("going on with {}", self.using),
            // (None of them this file's: it has nothing to go on with.)
            t if t >= self.using => match self.using {
                1 => "this file waits (the 1 connection serves another file)".to_owned(),
                n => format!("this file waits (the {n} connections serve other files)"),
            },
            1 => format!("going on with {} (1 of them another file's)", self.using),
            t => format!("going on with {} ({t} of them other files')", self.using),
        };
        if self.refusals > 1 {
            let who = if self.proxy { "the proxy" } else { "the server" };
            return write!(
                f,
                "{who} turned it away {} times in a row; {going}, asking again in {} s",
                self.refusals,
                self.wait.as_secs()
            );
        }
        match (self.closed, self.proxy) {
            (0, false) => write!(f, "the server turns extra connections away; {going}"),
            (0, true) => write!(f, "the proxy turns extra tunnels away; {going}"),
            (1, _) => write!(f, "1 idle connection stayed open: closed it; {going}"),
            (n, _) => write!(f, "{n} idle connections stayed open: closed them; {going}"),
        }
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
    fn a_kept_connection_closed_before_its_answer_resends_free_every_time() {
        let closed = Attempt {
            kept: true,
            reused: true,
            closed: true,
            silent: true,
            // (A reset before any answer reads as a refusal too: it is no cap here.)
            busy: true,
            planned: true,
            others_progress: true,
            ..Attempt::default()
        };
        let mut s = seg();
        for _ in 0..3 {
            assert_eq!(judge(&mut s, &closed), Verdict::Resent);
            assert!(!parked(&closed));
        }
        assert_eq!((s.tries, s.grace), (0, false));
        assert_eq!(wait(Verdict::Resent, 0.5, 0, 0.5, None, true).segment, Duration::ZERO);
        // A byte of the answer came, a stall, a status, a fresh connection, or a failure
        // other than a close: not a re-send.
        for a in [
            Attempt {
                silent: false,
                ..closed
            },
            Attempt {
                stalled: true,
                ..closed
            },
            Attempt {
                answered: true,
                ..closed
            },
            Attempt { kept: false, ..closed },
            Attempt {
                closed: false,
                ..closed
            },
        ] {
            assert_ne!(judge(&mut seg(), &a), Verdict::Resent, "{a:?}");
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
        // Another transfer served (`-j`): a reset of a reused connection may be its
        // keep-alive close, a 503 on it is the cap.
        let beside = Attempt {
            others_served: true,
            ..a
        };
        assert_eq!(judge(&mut seg(), &beside), Verdict::Counted);
        let answered = Attempt {
            answered: true,
            ..beside
        };
        assert_eq!(judge(&mut seg(), &answered), Verdict::Parked);
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
    fn a_refused_extra_tunnel_is_a_cap_even_before_the_first_reply() {
        let a = Attempt {
            busy: true,
            extra: true,
            ..Attempt::default()
        };
        let mut s = seg();
        assert_eq!(judge(&mut s, &a), Verdict::Parked);
        assert_eq!(s.tries, 0);
        // Not turned away (busy unset): no cap, whatever else is open.
        let mut s = seg();
        assert_eq!(judge(&mut s, &Attempt { busy: false, ..a }), Verdict::Counted);
    }

    #[test]
    fn a_busy_answer_with_idle_connections_open_is_crowding() {
        let a = Attempt {
            busy: true,
            idle_others: true,
            asked_wait: true,
            planned: false,
            ..Attempt::default()
        };
        let mut s = seg();
        assert_eq!(judge(&mut s, &a), Verdict::Crowded);
        assert_eq!((s.tries, s.grace), (1, false), "a try is spent: bounded as every retry");
        // While others download it is the ordinary cap; with no idle connection, or an
        // answer that is not a refusal, a try is spent.
        let mut s = seg();
        let cap = Attempt {
            planned: true,
            others_progress: true,
            ..a
        };
        assert_eq!(judge(&mut s, &cap), Verdict::Parked);
        for b in [
            Attempt {
                idle_others: false,
                ..a
            },
            Attempt { busy: false, ..a },
            Attempt { asked_wait: false, ..a },
        ] {
            let mut s = seg();
            assert_eq!(judge(&mut s, &b), Verdict::Counted, "{b:?}");
        }
    }

    #[test]
    fn a_counted_try_waits_its_backoff_and_a_server_wide_answer_holds_the_origin() {
        let half = 0.5;
        // Counted: the backoff for the try number, at least the Retry-After.
        let w = wait(Verdict::Counted, 0.5, 1, half, None, false);
        assert_eq!(
            w,
            Wait {
                segment: Duration::from_secs_f64(0.5),
                origin: false
            }
        );
        let w = wait(Verdict::Counted, 0.5, 3, half, None, true);
        assert_eq!(
            w,
            Wait {
                segment: Duration::from_secs(2),
                origin: true
            }
        );
        let w = wait(Verdict::Counted, 0.5, 1, half, Some(Duration::from_secs(7)), true);
        assert_eq!(
            w,
            Wait {
                segment: Duration::from_secs(7),
                origin: true
            }
        );
        // No wait configured and no Retry-After: nothing to hold.
        let w = wait(Verdict::Counted, 0.0, 1, half, None, true);
        assert_eq!(
            w,
            Wait {
                segment: Duration::ZERO,
                origin: false
            }
        );
        // A cap puts no wait on the segment and holds no origin; crowding waits the
        // backoff, not the Retry-After, and holds no origin either.
        let w = wait(Verdict::Parked, 0.5, 4, half, Some(Duration::from_secs(60)), true);
        assert_eq!(
            w,
            Wait {
                segment: Duration::ZERO,
                origin: false
            }
        );
        let w = wait(Verdict::Crowded, 0.5, 1, half, Some(Duration::from_secs(60)), true);
        assert_eq!(
            w,
            Wait {
                segment: Duration::from_secs_f64(0.5),
                origin: false
            }
        );
        // ... but a short Retry-After is honoured.
        let w = wait(Verdict::Crowded, 0.5, 1, half, Some(Duration::from_secs(2)), true);
        assert_eq!(w.segment, Duration::from_secs(2));
        assert!(!w.origin);
        // Progress and a free retry: at once, or after the Retry-After for the segment.
        assert_eq!(
            wait(Verdict::Progress, 0.5, 2, half, None, true).segment,
            Duration::ZERO
        );
        let w = wait(Verdict::FreeRetry, 0.5, 0, half, Some(Duration::from_secs(1)), false);
        assert_eq!(
            w,
            Wait {
                segment: Duration::from_secs(1),
                origin: false
            }
        );
    }

    #[test]
    fn a_cap_is_said_by_whom_and_how_many_go_on() {
        let cap = |proxy, closed, using| {
            Cap {
                proxy,
                closed,
                using,
                theirs: 0,
                refusals: u32::from(closed == 0),
                wait: Duration::from_secs(2),
            }
            .to_string()
        };
        assert_eq!(
            cap(false, 0, 2),
            "the server turns extra connections away; going on with 2"
        );
        assert_eq!(cap(true, 0, 2), "the proxy turns extra tunnels away; going on with 2");
        assert_eq!(
            cap(false, 1, 1),
            "1 idle connection stayed open: closed it; going on with 1"
        );
        assert_eq!(
            cap(false, 3, 1),
            "3 idle connections stayed open: closed them; going on with 1"
        );
        let again = Cap {
            proxy: false,
            closed: 0,
            using: 2,
            theirs: 0,
            refusals: 3,
            wait: Duration::from_secs(8),
        };
        assert_eq!(
            again.to_string(),
            "the server turned it away 3 times in a row; going on with 2, asking again in 8 s"
        );
        let shared = Cap {
            refusals: 1,
            theirs: 2,
            ..again
        };
        assert_eq!(
            shared.to_string(),
            "the server turns extra connections away; this file waits (the 2 connections serve other files)"
        );
        let one_of_them = Cap { theirs: 1, ..shared };
        assert_eq!(
            one_of_them.to_string(),
            "the server turns extra connections away; going on with 2 (1 of them another file's)"
        );
        let alone = Cap {
            using: 1,
            theirs: 1,
            ..again
        };
        assert_eq!(
            alone.to_string(),
            "the server turned it away 3 times in a row; this file waits (the 1 connection serves another \
             file), asking again in 8 s"
        );
    }

    #[test]
    fn tries_are_named_in_words() {
        assert_eq!(n_tries(1), "1 try");
        assert_eq!(n_tries(3), "3 tries");
    }
}
