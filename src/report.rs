//! Progress line on a terminal, and the one-line summary.

use std::io::Write;
use std::time::Duration;

/// Draws `\r`-updated progress on stderr when it is a terminal and not `--quiet`.
pub struct Progress {
    visible: bool,
    drawn: bool,
    last: u64,
    last_t: Duration,
    rate: f64,
}

impl Progress {
    /// Progress for this run: shown only on a TTY and without `quiet`.
    pub fn new(quiet: bool) -> Progress {
        let visible = !quiet && std::io::IsTerminal::is_terminal(&std::io::stderr());
        Progress {
            visible,
            drawn: false,
            last: 0,
            last_t: Duration::ZERO,
            rate: 0.0,
        }
    }

    /// Redraws: bytes so far, of `total` when known, rate (smoothed), ETA, live connections.
    pub fn update(&mut self, bytes: u64, total: Option<u64>, live: usize, elapsed: Duration) {
        let dt = (elapsed - self.last_t).as_secs_f64();
        if dt > 0.0 {
            let inst = (bytes - self.last.min(bytes)) as f64 / dt;
            self.rate = if self.rate == 0.0 {
                inst
            } else {
                0.7 * self.rate + 0.3 * inst
            };
            self.last = bytes;
            self.last_t = elapsed;
        }
        if !self.visible {
            return;
        }
        let mut line = match total {
            Some(t) if t > 0 => format!(
                "{:5.1}% {} / {}",
                bytes as f64 * 100.0 / t as f64,
                human(bytes),
                human(t)
            ),
            _ => human(bytes),
        };
        line += &format!("  {}/s", human(self.rate as u64));
        if let Some(t) = total
            && self.rate > 0.0
            && t > bytes
        {
            line += &format!("  ETA {}", duration((t - bytes) as f64 / self.rate));
        }
        line += &format!("  {live} conn");
        eprint!("\r{line:<64}");
        let _ = std::io::stderr().flush();
        self.drawn = true;
    }

    /// Erases the progress line before the summary or an error.
    pub fn clear(&mut self) {
        if self.drawn {
            eprint!("\r{:<64}\r", "");
            self.drawn = false;
        }
    }
}

/// `1.5 GiB`, `312.0 KiB`, `17 B`.
pub fn human(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < U.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", U[u])
    }
}

fn duration(s: f64) -> String {
    let s = s.round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s / 60 % 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn human_units() {
        assert_eq!(super::human(17), "17 B");
        assert_eq!(super::human(1536), "1.5 KiB");
        assert_eq!(super::human(1 << 30), "1.0 GiB");
        assert_eq!(super::duration(3725.0), "1h02m");
    }
}
