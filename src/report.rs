//! What the user sees while a download runs: the progress line on a terminal, the
//! [`Note`]s the event loop and the control plane report (typed events; this module
//! decides which `-v` level shows each and prints it, erasing the progress line first),
//! and the `--json` record written at the end.

use std::io::Write;

use std::time::Duration;

mod bar;
mod json;
mod note;
pub(crate) mod summary;

pub(crate) use json::push_json_string;
pub use json::{MirrorReport, Record, RunTotals};
pub use note::{Level, Note};
pub use summary::Summary;

/// Time constant of the rate shown, seconds: an exponentially weighted rate over about
/// this long (bytes land in bursts of write blocks; a per-tick rate swings 2x and more).
pub const RATE_WINDOW: f64 = 5.0;

/// How often a progress line is printed when stderr is not a terminal (a log, a pipe).
pub const LINE_EVERY: Duration = Duration::from_secs(5);

/// [`LINE_EVERY`], or what the test knob `RINGDL_LINE_MS` (100–60000) says: a test that
/// reads what the lines count takes many samples instead of one at 5 s, which may fall in
/// the few milliseconds a connection waits between two requests.
fn line_every() -> Duration {
    static EVERY: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *EVERY.get_or_init(|| {
        let ms = std::env::var("RINGDL_LINE_MS").ok().and_then(|v| v.parse::<u64>().ok());
        ms.map_or(LINE_EVERY, |m| Duration::from_millis(m.clamp(100, 60_000)))
    })
}

/// The download's rate, smoothed: the average since the start for the first
/// [`RATE_WINDOW`] seconds, then an exponentially weighted moving average with that time
/// constant (each sample weighs `1 - exp(-dt / RATE_WINDOW)`), so ticks of any spacing
/// weigh by the time they cover.
#[derive(Clone, Debug, Default)]
pub struct Rate {
    last: u64,
    last_t: Duration,
    rate: f64,
}

impl Rate {
    /// Feeds `bytes` fetched in all by `elapsed`; returns the smoothed rate, bytes/s.
    pub fn update(&mut self, bytes: u64, elapsed: Duration) -> f64 {
        let dt = elapsed.saturating_sub(self.last_t).as_secs_f64();
        if dt > 0.0 {
            let t = elapsed.as_secs_f64();
            self.rate = if t <= RATE_WINDOW {
                bytes as f64 / t
            } else {
                let inst = bytes.saturating_sub(self.last) as f64 / dt;
                self.rate + (1.0 - (-dt / RATE_WINDOW).exp()) * (inst - self.rate)
            };
            self.last = bytes;
            self.last_t = elapsed;
        }
        self.rate
    }
}

/// Progress on stderr unless `--quiet`: on a terminal a line redrawn in place each tick
/// with a map of where the bytes are (see [`bar::fit`]), fitted to the terminal's width;
/// one line of numbers every [`LINE_EVERY`] otherwise; and the [`Note`]s this run's `-v`
/// count shows.
pub struct Progress {
    tty: bool,
    quiet: bool,
    verbose: u8,
    /// Columns the last drawn line took (0: none on the screen).
    drawn: usize,
    rate: Rate,
    next_line: Duration,
    /// Several files in the run: files done before this one and the run's count.
    files: Option<(usize, usize)>,
    /// No progress line (several files in flight: the run draws one for all).
    no_line: bool,
    /// Said after the numbers where the line has room (the files in flight).
    tail: String,
    /// Said before each note: the file's name when several files are in flight (the
    /// notes of one run of several interleave).
    label: Option<String>,
    /// Notes go here instead of standard error (another reactor's part of a transfer:
    /// its owner says them), and no line is drawn.
    forward: Option<Box<dyn FnMut(Note)>>,
}

/// Whether standard error is a terminal (isatty(3): an ioctl(2) TCGETS), asked once per
/// run: every file of a list makes its own [`Progress`].
fn stderr_is_terminal() -> bool {
    static TTY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TTY.get_or_init(|| std::io::IsTerminal::is_terminal(&std::io::stderr()))
}

impl Progress {
    /// Progress for this run: none with `quiet`; notes up to `verbose` (the number of `-v`).
    pub fn new(quiet: bool, verbose: u8) -> Progress {
        Progress {
            tty: stderr_is_terminal(),
            quiet,
            verbose,
            drawn: 0,
            rate: Rate::default(),
            next_line: line_every(),
            files: None,
            no_line: false,
            tail: String::new(),
            label: None,
            forward: None,
        }
    }

    /// Progress that draws nothing and hands every note to `forward` (`--threads`: a
    /// helper reactor's part, whose owner says its notes).
    pub fn forwarding(forward: Box<dyn FnMut(Note)>) -> Progress {
        Progress {
            forward: Some(forward),
            ..Progress::new(true, 0)
        }
    }

    /// What the next lines say after the numbers, when there is room (on a terminal,
    /// within its width; in a log, always): the files in flight of a run of several.
    pub fn tail(&mut self, tail: String) {
        self.tail = tail;
    }

    /// Each note starts with `name: ` (a file among several in flight).
    pub fn label(&mut self, name: String) {
        self.label = Some(name);
    }

    /// Says `line` on stderr as a note is said (after the file's name among several).
    pub fn say(&mut self, line: &str) {
        self.clear();
        match &self.label {
            Some(name) => eprintln!("ringdl: {name}: {line}"),
            None => eprintln!("ringdl: {line}"),
        }
    }

    /// Draws no progress line (notes are still said): the run draws one for its files.
    pub fn lines_off(&mut self) {
        self.no_line = true;
    }

    /// Several files in one run: `done` of `total` landed or failed before this one; the
    /// line starts with `[done/total files]`.
    pub fn files(&mut self, done: usize, total: usize) {
        self.files = Some((done, total));
    }

    /// Called each tick: `have` bytes of the file in place (resumed ones included) of
    /// `total` when known, `fetched` by this run (the rate's base), `live` connections;
    /// `landed` is where the bytes in place are (sorted, disjoint `[start, end)` ranges).
    pub fn update(
        &mut self,
        have: u64,
        fetched: u64,
        total: Option<u64>,
        live: usize,
        elapsed: Duration,
        landed: &[(u64, u64)],
    ) {
        let rate = self.rate.update(fetched, elapsed);
        if self.quiet || self.no_line || (!self.tty && elapsed < self.next_line) {
            return;
        }
        let mut line = line(have, total, rate, live);
        if let Some((done, n)) = self.files {
            line = format!("[{done}/{n} files] {line}");
        }
        if self.tty {
            // TIOCGWINSZ each redraw (a few a second): a resized terminal is followed.
            let width = rustix::termios::tcgetwinsize(std::io::stderr())
                .map_or(80, |w| usize::from(w.ws_col))
                .clamp(20, 1000);
            let mut line = bar::fit(&line, landed, total, width);
            let free = line.len() - line.trim_end().len();
            if !self.tail.is_empty() && free > self.tail.chars().count() + 2 {
                let used = line.trim_end().chars().count();
                let room = width.saturating_sub(1);
                line = format!("{}  {}", line.trim_end(), self.tail);
                line.extend(std::iter::repeat_n(
                    ' ',
                    room.saturating_sub(used + 2 + self.tail.chars().count()),
                ));
            }
            eprint!("\r{line}");
            let _ = std::io::stderr().flush();
            self.drawn = line.chars().count();
        } else {
            if !self.tail.is_empty() {
                line = format!("{line}; in flight: {}", self.tail);
            }
            eprintln!("ringdl: {line}");
            self.next_line = elapsed + line_every();
        }
    }

    /// Prints `note` on stderr if this run's `-q`/`-v` shows it (see [`Note::level`]).
    pub fn note(&mut self, note: Note) {
        if let Some(f) = self.forward.as_mut() {
            f(note);
            return;
        }
        let shown = match note.level() {
            Level::Warning => true,
            Level::Info => !self.quiet || self.verbose > 0,
            Level::Verbose(n) => self.verbose >= n,
        };
        if shown {
            self.say(&note.to_string());
        }
    }

    /// Erases the progress line before the summary or an error.
    pub fn clear(&mut self) {
        if self.drawn > 0 {
            eprint!("\r{:<w$}\r", "", w = self.drawn);
            self.drawn = 0;
        }
    }
}

/// One transfer in flight, for the run's progress line.
#[derive(Clone, Debug, Default)]
pub struct Flight {
    /// The file's name (its last path component, without `.part`).
    pub name: String,
    /// Bytes of the file in place (resumed ones included), of `total` when known.
    pub have: u64,
    pub total: Option<u64>,
    /// Body bytes this run received.
    pub fetched: u64,
    /// Connections with a request in flight.
    pub live: usize,
    /// Its transfer may spread over other reactors if started again now: planned from a
    /// regular file served in ranges with a validator (RFC 9110 §8.8), as a resume needs.
    /// (Whether its run allows spreading — one mirror, no `--limit-rate`, a file output —
    /// is the run's to tell.)
    pub ranged: bool,
}

impl Flight {
    /// The name the line shows for output `path`: its last component, without `.part`
    /// (the whole of `path` when it has none).
    pub fn name_of(path: &str) -> String {
        std::path::Path::new(path)
            .file_name()
            .map(|n| n.to_string_lossy().trim_end_matches(".part").to_owned())
            .unwrap_or_else(|| path.to_owned())
    }
}

/// The progress line: `have` of `total` (percent), rate, ETA, connections.
fn line(have: u64, total: Option<u64>, rate: f64, live: usize) -> String {
    let mut line = match total {
        Some(t) if t > 0 => format!(
            "{:5.1}% {} / {}",
            have.min(t) as f64 * 100.0 / t as f64,
            human(have),
            human(t)
        ),
        _ => human(have),
    };
    line += &format!("  {}/s", human(rate as u64));
    if let Some(t) = total
        && rate > 0.0
        && t > have
    {
        line += &format!("  ETA {}", duration((t - have) as f64 / rate));
    }
    line += &format!("  {live} conn");
    line
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
mod tests;
