//! `--limit-rate`: a token bucket for the whole download, across connections. Pure: the
//! caller gives the clock; the event loop refills it on its tick and asks it before each
//! socket read (RECV or SPLICE), so pacing rides on the ring's timers, never on a sleep.
//!
//! The bucket starts empty, and a read takes its tokens when it is posted ([`Bucket::take`])
//! and gives back what it did not fill at its completion ([`Bucket::give_back`]): a first
//! burst, or several connections granted the same tokens before any read completed, would
//! push a short download over the rate (1 MiB at 2 MiB/s came at 1.2 x with a bucket
//! that started full and paid at completion).

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
    /// An empty bucket for `rate` bytes/s (at least 1), at time `now` (any monotonic
    /// origin): the first read waits for [`MIN_READ`] bytes' worth of time.
    pub fn new(rate: u64, now: Duration) -> Bucket {
        let rate = rate.max(1);
        let cap = (rate as f64 * BURST.as_secs_f64()).floor().max(MIN_READ as f64);
        Bucket {
            rate,
            tokens: 0.0,
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

    /// A read of up to `n` bytes was posted: it takes their tokens now, so the next
    /// connection that asks finds them gone.
    pub fn take(&mut self, n: u64) {
        self.tokens -= n as f64;
    }

    /// A read that [took](Bucket::take) more than it filled gives `n` tokens back (never
    /// above the bucket's size).
    pub fn give_back(&mut self, n: u64) {
        self.tokens = (self.tokens + n as f64).min(self.cap);
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
        // An empty bucket: nothing until the clock moves, then what the time earned.
        assert_eq!(b.allow(ms(0), 1 << 30), None);
        assert_eq!(b.allow(ms(10), 1 << 30), Some(rate / 100));
        // After a long wait, at most the burst.
        let first = b.allow(ms(5000), 1 << 30).unwrap();
        assert_eq!(first, (rate as f64 * 0.1) as u64);
        b.take(first);
        assert_eq!(b.allow(ms(5000), 1 << 30), None);
        // Greedy reader ticking every 10 ms for 10 s reads ≈ rate · 10 s.
        let mut read = 0;
        for t in 1..=1000 {
            if let Some(n) = b.allow(ms(5000 + 10 * t), 64 << 10) {
                b.take(n);
                read += n;
            }
        }
        let want = 10 * rate;
        assert!(read.abs_diff(want) < MIN_READ * 2 + rate / 100, "{read} vs {want}");
        // Small reads are not cut below MIN_READ; the debt is paid back first.
        let mut b = Bucket::new(1000, ms(0));
        assert_eq!(b.allow(ms(1), 1 << 20), Some(MIN_READ));
        b.take(MIN_READ);
        b.take(MIN_READ);
        assert_eq!(b.allow(ms(3000), 100), None);
        assert_eq!(b.allow(ms(8300), 100), Some(100));
    }

    #[test]
    fn tokens_taken_at_posting_are_not_granted_twice() {
        let ms = Duration::from_millis;
        let rate = 1 << 20;
        let mut b = Bucket::new(rate, ms(0));
        // (A full bucket: its size is a whole number of bytes.) Four connections ask at the
        // same moment: the first takes what there is, the
        // others wait (granted at completion, each would have read the same tokens).
        let n = b.allow(ms(500), u64::MAX).unwrap();
        b.take(n);
        for _ in 0..3 {
            assert_eq!(b.allow(ms(500), u64::MAX), None);
        }
        // The read filled a quarter: the rest comes back, for the next one.
        b.give_back(n - n / 4);
        assert_eq!(b.allow(ms(500), u64::MAX), Some(n - n / 4));
        // Never above the bucket's size.
        b.give_back(u64::MAX / 2);
        assert_eq!(b.allow(ms(500), u64::MAX), Some((rate as f64 * 0.1) as u64));
    }
}
