//! Failed connects: a connection that failed with no request on it is counted against
//! its origin when it ends a round of connects over the origin's addresses (the origin
//! is then held, and one connection tries alone after it), else against its slot.

use std::time::Duration;

use super::{Counted, jitter};
use crate::control::{Fail, St};
use crate::event::Loop;
use crate::report::Note;
use crate::schedule::retry;

/// First wait after a round of refused connects, seconds (then doubled per round, with
/// jitter 0.75–1.25), holding the origin: 0.15 + 0.3 + 0.6 + 1.2 s before the fifth round,
/// each ended by the first 250 ms tick after it (0.25, 0.25–0.5, 0.5–0.75, 1–1.5 s), waits
/// out a server that restarts for up to 2 s, while a port where nothing listens still
/// fails in 2–3 s.
pub(crate) const REFUSED_WAIT: f64 = 0.15;

impl Loop<'_> {
    /// Connection `i` failed with `f` and no request on it (a connect, a TLS handshake, a
    /// proxy's answer): counted against the origin when it ends a round of connects over
    /// its addresses, else against the slot. Nothing is counted for a slot to be parked.
    pub(super) fn count_connection_failure(&mut self, i: usize, k: usize, f: &Fail, capped: bool) -> Counted {
        let mut counted = Counted {
            crowded: false,
            tries: 0,
            seg_wait: None,
            origin_wait: None,
        };
        if capped {
            return counted;
        }
        // A failed connect that ends a round over the addresses is about the origin (a
        // server restarting, a wrong port): one count and one hold for every connection
        // to it, however many saw it (see `origin_connect_failed`).
        let n_addrs = self.shared.origin(k).addrs.len();
        let c = &self.conns[i];
        let round_over = c.st == St::Connecting && c.failed_connects.is_multiple_of(n_addrs);
        self.shared.transfer.retries += 1;
        self.shared.report.note(Note::ConnectionFailed {
            conn: i,
            why: f.msg.clone(),
        });
        if round_over {
            counted.origin_wait = Some(self.origin_connect_failed(k, f));
            counted.tries = self.shared.transfer.mirrors[k].connects_failed;
        } else {
            // No request was lost, but a server that accepts and then fails every connection
            // must not keep us busy forever: count these too.
            self.conns[i].failures += 1;
            counted.tries = self.conns[i].failures;
        }
        counted
    }

    /// A round of connects to mirror `k` failed (`f`): counts it once per hold (connects
    /// that were already under way when another one's failure set the hold bring no news)
    /// and holds the origin for its backoff: no connection to `k` connects or sends a
    /// request before it has passed, and then one connection tries alone
    /// ([`Loop::may_connect`]). Returns how long the origin is held from now (zero when
    /// this failure was already counted).
    ///
    /// The waits: a refused (or reset) connect, [`REFUSED_WAIT`] s doubled per round
    /// (2–3 s over 5 rounds, each wait ended by the next tick: a server that restarts is
    /// waited out, a wrong port still fails fast); a timed-out or unreachable one, `--retry-wait` doubled; each
    /// times 0.75–1.25 (one timer for every connection, so little jitter is needed).
    fn origin_connect_failed(&mut self, k: usize, f: &Fail) -> Duration {
        let now = self.shared.transfer.started.elapsed();
        if self.shared.transfer.plan.held(now, k) {
            return Duration::ZERO;
        }
        let m = &mut self.shared.transfer.mirrors[k];
        m.connects_failed += 1;
        let base = if f.busy || f.refused {
            self.shared.opts.retry_wait_s.min(REFUSED_WAIT)
        } else {
            self.shared.opts.retry_wait_s
        };
        let wait = retry::backoff(base, m.connects_failed, 0.25 + jitter() / 2.0).max(f.delay.unwrap_or_default());
        self.shared.transfer.plan.hold(k, now + wait);
        wait
    }

    /// May closed connection `i` connect now? Not while its origin is held; and while the
    /// origin's last round of connects failed, only when no other connection to it is
    /// connecting (one tries alone: a refusing server is asked once per round, not once
    /// per connection).
    pub(crate) fn may_connect(&self, i: usize) -> bool {
        let k = self.conns[i].mirror;
        if self
            .shared
            .transfer
            .plan
            .held(self.shared.transfer.started.elapsed(), k)
        {
            return false;
        }
        self.shared.transfer.mirrors[k].connects_failed == 0
            || !self
                .conns
                .iter()
                .enumerate()
                .any(|(j, o)| j != i && o.mirror == k && o.st == St::Connecting)
    }
}
