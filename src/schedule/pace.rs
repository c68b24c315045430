//! `--limit-rate`: a token bucket for the whole download, across connections. Pure: the
//! caller gives the clock; the event loop refills it on its tick and asks it before each
//! socket read (RECV or SPLICE), so pacing rides on the ring's timers, never on a sleep.

use std::time::Duration;

/// Smallest read a paced connection posts, bytes: reads far smaller than a TLS record
/// would only cost completions.
pub const MIN_READ: u64 = 4096;

/// How much the bucket holds at most, as time at the full rate: a connection that waited
/// gets at most this burst.
pub const BURST: Duration = Duration::from_millis(100);

/// A token bucket of `rate` bytes per second.
#[derive(Clone, Debug)]
pub struct Bucket {
    /// Bytes per second.
    rate: u64,
    /// Bytes that may be read now; below zero after a read larger than the tokens were
    /// (a read is never cut below [`MIN_READ`]).
    tokens: f64,
    /// Most tokens held: [`BURST`] at `rate`, at least [`MIN_READ`].
    cap: f64,
    /// Clock of the last refill.
    last: Duration,
}

impl Bucket {
    /// A full bucket for `rate` bytes/s (at least 1), at time `now` (any monotonic origin).
    pub fn new(rate: u64, now: Duration) -> Bucket {
        let rate = rate.max(1);
        let cap = (rate as f64 * BURST.as_secs_f64()).floor().max(MIN_READ as f64);
        Bucket {
            rate,
            tokens: cap,
            cap,
            last: now,
        }
    }

    /// Adds the tokens earned since the last refill.
    pub fn refill(&mut self, now: Duration) {
        let dt = now.saturating_sub(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + dt * self.rate as f64).min(self.cap);
    }

    /// How many bytes a read may ask for now (at most `want`, at least [`MIN_READ`] or
    /// `want`, whichever is smaller), or `None` when the budget is spent: the connection
    /// waits for a refill.
    pub fn allow(&mut self, now: Duration, want: u64) -> Option<u64> {
        self.refill(now);
        if self.tokens <= 0.0 {
            return None;
        }
        Some(want.min((self.tokens as u64).max(MIN_READ)))
    }

    /// How long until a read of [`MIN_READ`] bytes is allowed again (at least 1 ms).
    pub fn wait(&self) -> Duration {
        let short = MIN_READ as f64 - self.tokens;
        Duration::from_secs_f64((short / self.rate as f64).clamp(0.001, BURST.as_secs_f64()))
    }

    /// `n` bytes were read.
    pub fn spend(&mut self, n: u64) {
        self.tokens -= n as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paces_to_the_rate_over_time() {
        let ms = Duration::from_millis;
        let rate = 1 << 20;
        let mut b = Bucket::new(rate, ms(0));
        // A full bucket: one burst, then nothing until the clock moves.
        let first = b.allow(ms(0), 1 << 30).unwrap();
        assert_eq!(first, (rate as f64 * 0.1) as u64);
        b.spend(first);
        assert_eq!(b.allow(ms(0), 1 << 30), None);
        // Greedy reader ticking every 10 ms for 10 s reads ≈ rate · 10 s (+ the first burst).
        let mut read = first;
        for t in 1..=1000 {
            if let Some(n) = b.allow(ms(10 * t), 64 << 10) {
                b.spend(n);
                read += n;
            }
        }
        let want = 10 * rate + first;
        assert!(read.abs_diff(want) < MIN_READ * 2 + rate / 100, "{read} vs {want}");
        // Small reads are not cut below MIN_READ; the debt is paid back first.
        let mut b = Bucket::new(1000, ms(0));
        assert_eq!(b.allow(ms(0), 1 << 20), Some(MIN_READ));
        b.spend(MIN_READ);
        b.spend(MIN_READ);
        assert_eq!(b.allow(ms(3000), 100), None);
        assert_eq!(b.allow(ms(4200), 100), Some(100));
    }
}
