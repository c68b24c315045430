//! Several files in one run (`-i LIST`, `-Z URL...`): every file is checked before any
//! request (the list's lines, the URLs, two files that would write one path: [`plan`]),
//! then up to `-j` files are in flight at once on the reactor's lanes
//! ([`crate::reactors::lanes::run_many`] asks [`ListRun`] for the next file and tells it each
//! end). Each file goes with its [`options`] through the one-file path's steps: prepare —
//! the output and resume state —, fetch — its transfer on a lane —, finish — the
//! checksum, the rename, the summary — as it completes. What is per run is made once and
//! shared: the signal fd and the TLS client configuration (its session cache resumes
//! sessions across files), in [`PerRun`].
//!
//! A failed file does not stop the others (but with `--fail-fast`); SIGINT/SIGTERM stop
//! the run: the files in flight keep their `.part` and control files, later files are
//! not started. Exit status: 0 when every file landed, else the first failure's code.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use super::fetch::{Fetching, Next};
use super::{PerRun, file_json, in_dir, json_writable, prepare, write_json};
use crate::cli::{self, Files};
use crate::config::{Config, OutputTarget};
use crate::engine::EngineKind;
use crate::err;
use crate::error::{Kind, Result};
use crate::event as download;
use crate::input::{self, Entry};
use crate::output;
use crate::reactors::lanes::{Feed, Flight, Many, run_many};
use crate::report::{self as progress, Progress, Record, RunTotals};

/// One file of the run, checked: where it was given, its entry, where it lands. (Its
/// options, a copy of the command line's, are made again at its turn: a long list holds
/// entries, not copies of the options.)
pub(super) struct Job {
    /// `LIST, line N` or `command line, file N` (for messages).
    pub(super) origin: String,
    /// Its URLs and the options over the command line's.
    pub(super) entry: Entry,
    /// Where it lands (`None` with `--content-disposition` and no `out=`: named by the
    /// server, known only after the transfer).
    pub(super) path: Option<PathBuf>,
}

/// Runs the files of `files` with the options of `base`; returns the exit code.
pub(super) fn main(base: Box<Config>, files: Files) -> u8 {
    let started = Instant::now();
    let jobs = match plan(&base, &files) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("ringdl: {e}");
            // (No file was tried: the record says why, with the run's exit code.)
            let code = e.kind.exit_code();
            if let Some(dest) = &base.json {
                let _ = write_json(dest, &RunTotals::default().to_json(&[], code, Some(&e.to_string())));
            }
            return code;
        }
    };
    if let Some(p) = base.json.as_ref() {
        // A record that cannot be written is found out now, not after the downloads.
        if let Err(e) = json_writable(p) {
            eprintln!("ringdl: --json {}: {e}", p.display());
            return Kind::LocalIo.exit_code();
        }
    }
    let mut per_run = match PerRun::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ringdl: {e}");
            return e.kind.exit_code();
        }
    };
    per_run.renamed = Some(super::Renamed::default());
    let n = jobs.len();
    // Names from Content-Disposition are known only at the end (two files in flight could
    // take one name).
    let lanes = if base.content_disposition {
        1
    } else {
        files.jobs.unwrap_or(cli::DEFAULT_JOBS).min(n.max(1))
    };
    let many = Many {
        lanes,
        connections: jobs
            .iter()
            .filter_map(|j| j.entry.connections)
            .fold(base.connections, usize::max),
        splice: base.engine != Some(EngineKind::Direct),
        signals: Some(per_run.signals.as_raw_fd()),
        threads: base.threads,
        pin: base.pin,
        placed: None,
    };
    let mut reactor = std::mem::take(&mut per_run.reactor);
    let mut list = ListRun {
        base: &base,
        n,
        lanes,
        fail_fast: files.fail_fast,
        jobs: jobs.into_iter().enumerate(),
        per_run,
        flying: HashMap::new(),
        totals: RunTotals {
            files: n as u64,
            ..RunTotals::default()
        },
        objects: Vec::new(),
        first_failure: None,
        stop: None,
        taken: 0,
        done: 0,
        line: Progress::new(base.quiet, base.verbose),
    };
    let signal = match run_many(&mut list, &base, &many, &mut reactor) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ringdl: {e}");
            list.first_failure.get_or_insert((e.kind.exit_code(), list.taken));
            None
        }
    };
    list.line.clear();
    conclude(&base, list, signal, started)
}

/// The end of a run of files: an interruption by `signal` said (the first file not
/// started is blamed), the files not started counted, the renames made durable, the
/// totals said and written to `--json` (objects in the list's order). Returns the exit
/// code: the first failure's, else 0.
fn conclude(base: &Config, list: ListRun<'_>, signal: Option<&'static str>, started: Instant) -> u8 {
    let n = list.n;
    let ListRun {
        mut per_run,
        mut totals,
        mut objects,
        mut first_failure,
        mut stop,
        taken,
        ..
    } = list;
    if let Some(name) = signal {
        if first_failure.is_none_or(|(c, _)| c != Kind::Interrupted.exit_code()) && taken < n {
            // Every file in flight landed; the run stops before the next, which it blames.
            eprintln!(
                "ringdl: interrupted by {name} after file {taken} of {n}; run the same command again to fetch the rest",
            );
            first_failure.get_or_insert((Kind::Interrupted.exit_code(), taken));
        }
        stop = Some("interrupted");
    }
    totals.not_started = (n - taken) as u64;
    if let Some(why) = stop
        && totals.not_started > 0
        && !base.quiet
    {
        eprintln!("ringdl: {} not started ({why})", plural(totals.not_started, "file"));
    }
    // The renames are durable before the run says how it went.
    if let Some(Err(e)) = per_run.renamed.as_mut().map(|r| r.sync(true)) {
        eprintln!("ringdl: {e}");
        first_failure.get_or_insert((e.kind.exit_code(), n.saturating_sub(1)));
    }
    totals.seconds = started.elapsed().as_secs_f64();
    let code = first_failure.map_or(0, |(c, _)| c);
    if !base.quiet || code != 0 {
        say_totals(&totals, first_failure);
    }
    // In the list's order, whatever order they ended in.
    objects.sort_by_key(|o| o.0);
    let objects: Vec<String> = objects.into_iter().map(|o| o.1).collect();
    match &base.json {
        Some(dest) if write_json(dest, &totals.to_json(&objects, code, None)).is_err() && code == 0 => {
            Kind::LocalIo.exit_code()
        }
        _ => code,
    }
}

/// A file whose transfer is on a lane: its fetch step, its record, where it was given.
struct Flying {
    f: Fetching,
    record: Record,
    origin: String,
    url: String,
    started: Instant,
}

/// The run of a list, as the reactor's [`Feed`]: files are prepared as lanes come free,
/// and counted, reported and recorded as they end.
struct ListRun<'b> {
    base: &'b Config,
    n: usize,
    lanes: usize,
    fail_fast: bool,
    jobs: std::iter::Enumerate<std::vec::IntoIter<Job>>,
    per_run: PerRun,
    flying: HashMap<usize, Flying>,
    totals: RunTotals,
    /// Each file's `--json` object, by its place in the list.
    objects: Vec<(usize, String)>,
    /// The first failure's exit code and file.
    first_failure: Option<(u8, usize)>,
    /// Why no more files start (`--fail-fast`, `interrupted`).
    stop: Option<&'static str>,
    /// Files taken from the list (started, or ended before a transfer), and ended.
    taken: usize,
    done: usize,
    /// The run's progress line (several files in flight).
    line: Progress,
}

impl ListRun<'_> {
    /// File `k` (given at `origin`, first URL `url`) ended with `result`.
    fn ended(&mut self, k: usize, origin: &str, url: &str, mut record: Record, result: Result<()>, started: Instant) {
        let n = self.n;
        self.done += 1;
        let code = match &result {
            Ok(()) => 0,
            Err(e) => {
                self.line.clear();
                eprintln!("ringdl: [{}/{n}] {url} ({origin}): {e}", k + 1);
                e.kind.exit_code()
            }
        };
        let totals = &mut self.totals;
        totals.fetched += record.fetched.unwrap_or(0);
        totals.tls_full_handshakes += record.tls_full_handshakes.unwrap_or(0);
        totals.tls_resumed_handshakes += record.tls_resumed_handshakes.unwrap_or(0);
        if code == 0 {
            totals.ok += 1;
            if record.not_modified {
                totals.already_there += 1;
            }
            totals.bytes += record.bytes.unwrap_or(0);
        } else {
            totals.failed += 1;
            // (The earliest in the list when several fail at once — files on other
            // reactors may end before an earlier one —; once interrupted, the run's code
            // stays the interrupt's.)
            let interrupted = Kind::Interrupted.exit_code();
            match self.first_failure {
                Some((_, j)) if j < k => {}
                Some((c, _)) if c == interrupted && code != interrupted => {}
                _ => self.first_failure = Some((code, k)),
            }
        }
        if self.base.json.is_some() {
            self.objects.push((k, file_json(&mut record, &result, code, started)));
        }
        if let Some(Err(e)) = self.per_run.renamed.as_mut().map(|r| r.sync(false)) {
            eprintln!("ringdl: {e}");
            self.first_failure.get_or_insert((e.kind.exit_code(), k));
        }
        if result.as_ref().is_err_and(|e| e.kind == Kind::Interrupted) {
            self.stop = Some("interrupted");
        } else if code != 0 && self.fail_fast {
            self.stop.get_or_insert("--fail-fast");
        } else if result.as_ref().is_err_and(|e| e.no_space)
            && record
                .output
                .as_deref()
                .is_none_or(|p| crate::output::is_full(std::path::Path::new(p)))
        {
            // (Every later file would fail the same way and fetch its bytes for nothing;
            // with space left, only a file too large for it failed: the next may fit.)
            self.stop.get_or_insert("the disk is full");
        }
    }
}

impl Feed for ListRun<'_> {
    fn next(&mut self) -> Option<(usize, download::Start)> {
        loop {
            if self.stop.is_some() {
                return None;
            }
            let (k, job) = self.jobs.next()?;
            self.taken += 1;
            let n = self.n;
            let started = Instant::now();
            let mut record = Record::default();
            // (Checked by `plan` already: the same entry gives the same options.)
            let made = options(self.base, &job.origin, &job.entry);
            let url = made.as_ref().map_or_else(|_| String::new(), |(o, _)| o.url.clone());
            let (mut opts, _) = match made {
                Ok(m) => m,
                Err(e) => {
                    self.ended(k, &job.origin, &url, record, Err(e), started);
                    continue;
                }
            };
            // A file there is checked against the server's size (and its checksum) before
            // it counts as done, fetched again over it when it does not match; an
            // unfinished `.part` beside it resumes and then replaces it.
            // (One lstat(2) of the name: nothing there answers every check of it.)
            let seen = job.path.as_deref().map(|p| output::Seen::of(Some(p)));
            match already_there(
                &opts,
                job.path.as_deref().filter(|_| seen != Some(output::Seen::Nothing)),
            ) {
                Some(There::Landed(size)) => (opts.kept, opts.replace) = (Some(size), true),
                Some(There::Unfinished) => opts.replace = true,
                None => {}
            }
            // (The run's record is written at its end: none per file.)
            opts.json = None;
            self.per_run.files = Some((self.done, n));
            let lines_off = self.lanes > 1;
            let files = self.per_run.files;
            let begun = prepare(opts, &mut record, &mut self.per_run, seen).and_then(|p| {
                let mut f = Fetching::new(p, files, lines_off);
                f.start(&mut self.per_run).map(|st| (f, st))
            });
            match begun {
                Ok((f, st)) => {
                    let flying = Flying {
                        f,
                        record,
                        origin: job.origin,
                        url,
                        started,
                    };
                    self.flying.insert(k, flying);
                    return Some((k, st));
                }
                Err(e) => self.ended(k, &job.origin, &url, record, Err(e), started),
            }
        }
    }

    fn ended(
        &mut self,
        id: usize,
        r: Result<download::Outcome>,
        report: Progress,
        failed: Option<Box<download::Summary>>,
        _reactor: &download::Reactor,
    ) -> Option<download::Start> {
        // The run's line goes before the file's summary or error is said.
        self.line.clear();
        let mut fl = self.flying.remove(&id)?;
        match fl.f.ended(r, report, failed, &mut fl.record, &mut self.per_run) {
            Next::Again(st) => {
                self.flying.insert(id, fl);
                Some(*st)
            }
            Next::Done(result) => {
                let Flying {
                    f,
                    record,
                    origin,
                    url,
                    started,
                } = fl;
                // The file's lock and output go before the next file may take its name.
                drop(f);
                ListRun::ended(self, id, &origin, &url, record, result, started);
                None
            }
        }
    }

    fn stopping(&self) -> bool {
        self.stop.is_some()
    }

    fn unstarted(&mut self, id: usize, st: download::Start) {
        drop(st);
        let Some(fl) = self.flying.remove(&id) else {
            self.taken -= 1;
            return;
        };
        let Flying {
            f,
            mut record,
            origin,
            url,
            started,
        } = fl;
        match f.unstarted(&mut record) {
            // (It ran, and was to start again spread: it ends interrupted, not unstarted.)
            Some(e) => ListRun::ended(self, id, &origin, &url, record, Err(e), started),
            None => self.taken -= 1,
        }
    }

    fn progress(&mut self, flights: &[Flight], elapsed: Duration) {
        if self.lanes < 2 {
            return;
        }
        let have = flights.iter().map(|f| f.have).sum();
        let fetched = self.totals.fetched + flights.iter().map(|f| f.fetched).sum::<u64>();
        let total = flights.iter().map(|f| f.total).sum::<Option<u64>>();
        let live = flights.iter().map(|f| f.live).sum();
        self.line.files(self.done, self.n);
        // The files in flight, where the line has room for them.
        let names: Vec<String> = flights
            .iter()
            .map(|f| match f.total {
                Some(t) if t > 0 => format!("{} {}%", f.name, f.have.min(t) * 100 / t),
                _ => f.name.clone(),
            })
            .collect();
        self.line.tail(names.join(", "));
        // (The map shows the share of the files in flight that is in place.)
        self.line.update(have, fetched, total, live, elapsed, &[(0, have)]);
    }
}

/// The run's line: files ok / failed / not started, bytes, time, rate.
fn say_totals(t: &RunTotals, first_failure: Option<(u8, usize)>) {
    let rate = if t.seconds > 0.0 {
        t.fetched as f64 / t.seconds
    } else {
        0.0
    };
    eprintln!(
        "ringdl: {} of {}: {} ok{}, {} failed{}{}; {} fetched in {:.2} s, {}/s",
        plural(t.ok + t.failed, "file"),
        t.files,
        t.ok,
        if t.already_there > 0 {
            format!(" ({} already there, same size as on the server)", t.already_there)
        } else {
            String::new()
        },
        t.failed,
        first_failure.map_or(String::new(), |(c, k)| format!(" (first: file {}, exit {c})", k + 1)),
        if t.not_started > 0 {
            format!(", {} not started", t.not_started)
        } else {
            String::new()
        },
        progress::human(t.fetched),
        t.seconds,
        progress::human(rate as u64),
    );
}

/// `1 file`, `3 files`.
fn plural(n: u64, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// Every file of the run, checked before any request: the list read and parsed, each
/// file's options made ([`options`]), and no two files writing one path. An entry that
/// asks again for a file an earlier one asks for ([`same_request`], one path) is left
/// out, said on stderr (not with `-q`).
///
/// # Errors
/// `Usage` (exit 2) for a malformed line, a bad URL or two different files with one path;
/// `LocalIo` when the list cannot be read.
pub(super) fn plan(base: &Config, files: &Files) -> Result<Vec<Job>> {
    let mut entries: Vec<(String, Entry)> = files
        .given
        .iter()
        .enumerate()
        .map(|(k, urls)| {
            let entry = Entry {
                line: 0,
                urls: urls.clone(),
                out: None,
                dir: None,
                checksum: None,
                headers: Vec::new(),
                connections: None,
            };
            (format!("command line, file {}", k + 1), entry)
        })
        .collect();
    if let Some(list) = &files.input {
        let (bytes, source) = if list.as_os_str() == "-" {
            let mut b = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut b)
                .map_err(|e| err!(LocalIo, "-i -: standard input: {e}"))?;
            (b, "standard input".to_owned())
        } else {
            let b = std::fs::read(list).map_err(|e| err!(LocalIo, "-i {}: {e}", list.display()))?;
            (b, list.display().to_string())
        };
        for e in input::parse(&bytes, &source)? {
            entries.push((format!("{source}, line {}", e.line), e));
        }
    }
    let mut jobs: Vec<Job> = Vec::with_capacity(entries.len());
    let mut paths: HashMap<PathBuf, usize> = HashMap::new();
    let mut keys = Keys::default();
    for (origin, entry) in entries {
        let (_, path) = options(base, &origin, &entry)?;
        let job = Job { origin, entry, path };
        if let Some(p) = &job.path {
            let key = keys.of(p);
            if let Some(&other) = paths.get(&key) {
                if same_request(&jobs[other].entry, &job.entry) {
                    // The same file asked twice (as wget and aria2c take it): fetched once.
                    if !base.quiet {
                        eprintln!(
                            "ringdl: note: {} asks again for {} of {}: fetched once",
                            job.origin,
                            p.display(),
                            jobs[other].origin
                        );
                    }
                    continue;
                }
                return Err(err!(
                    Usage,
                    "{} and {} would both write {} (give one of them another name with out=, or -o on its own run)",
                    jobs[other].origin,
                    job.origin,
                    p.display()
                ));
            }
            paths.insert(key, jobs.len());
        } else if let Some(other) = jobs
            .iter()
            .position(|o| o.path.is_none() && o.entry.dir == job.entry.dir && same_request(&o.entry, &job.entry))
        {
            // Named by the server (`--content-disposition`): the same request twice is
            // one file too, fetched once (its name is known only after its transfer).
            if !base.quiet {
                eprintln!(
                    "ringdl: note: {} asks again for {} of {}: fetched once",
                    job.origin, job.entry.urls[0], jobs[other].origin
                );
            }
            continue;
        }
        jobs.push(job);
    }
    Ok(jobs)
}

/// Whether two entries that write one path ask for the same file the same way: the same
/// URLs (mirrors in the same order), checksum, headers and connections (`out=` and `dir=`
/// may be spelled differently: their path is the same already).
fn same_request(a: &Entry, b: &Entry) -> bool {
    a.urls == b.urls && a.checksum == b.checksum && a.headers == b.headers && a.connections == b.connections
}

/// The options of one file: `base` (the command line's) with its URLs and its entry's
/// options over them (`out=`, `dir=` over `-d`, `checksum=` over `--checksum-file`,
/// `header=` after `-H`, `connections=` over `-x`), and the path it will write (`None`
/// when the server names it: `--content-disposition` without `out=`).
///
/// # Errors
/// `Usage` naming `origin` for a URL that does not parse, or a header.
fn options(base: &Config, origin: &str, e: &Entry) -> Result<(Box<Config>, Option<PathBuf>)> {
    let mut o = Box::new(base.clone());
    cli::set_urls(&mut o, e.urls.clone());
    for u in std::iter::once(&o.url).chain(o.mirrors.iter().map(|m| &m.url)) {
        http::Url::parse(u).map_err(|why| err!(Usage, "{origin}: bad URL {u:?}: {why}"))?;
    }
    if let Some(d) = &e.dir {
        o.dir = Some(d.clone());
    }
    if let Some(out) = &e.out {
        o.output = OutputTarget::File(out.clone());
    }
    if let Some(c) = &e.checksum {
        o.checksum = Some(c.clone());
        o.checksum_file = None;
    }
    for (name, value) in &e.headers {
        cli::add_header(&mut o.headers, name, value).map_err(|mut err| {
            err.msg = format!("{origin}: {}", err.msg);
            err
        })?;
    }
    if let Some(c) = e.connections {
        o.connections = c;
    }
    let url = http::Url::parse(&o.url).map_err(|why| err!(Usage, "{origin}: bad URL: {why}"))?;
    let named_later = o.content_disposition && o.output == OutputTarget::Default;
    let path = output::final_path(&o.output, &url)
        .filter(|_| !named_later)
        .map(|p| in_dir(o.dir.as_deref(), p));
    Ok((o, path))
}

/// `p` as a key that two spellings of one path share (`./a`, `a`, `$PWD/a`, `d/../d/a`):
/// absolute, its directory resolved by the file system (realpath(3): symlinks and `..`)
/// when it exists, else lexically (`.` left out, `..` takes the component before it).
#[cfg(test)]
fn same_file(p: &Path) -> PathBuf {
    Keys::default().of(p)
}

/// [`same_file`] for the paths of one list: the working directory read once
/// (getcwd(3)), each directory resolved once (realpath(3) reads every component's link:
/// a readlink(2) each).
#[derive(Default)]
struct Keys {
    cwd: Option<PathBuf>,
    dirs: HashMap<PathBuf, Option<PathBuf>>,
}

impl Keys {
    fn of(&mut self, p: &Path) -> PathBuf {
        let abs = match p.is_absolute() {
            true => p.to_path_buf(),
            false => self
                .cwd
                .get_or_insert_with(|| std::env::current_dir().unwrap_or_default())
                .join(p),
        };
        if let (Some(dir), Some(name)) = (abs.parent(), abs.file_name()) {
            let real = self
                .dirs
                .entry(dir.to_path_buf())
                .or_insert_with(|| std::fs::canonicalize(dir).ok());
            if let Some(real) = real {
                return real.join(name);
            }
        }
        let mut key = PathBuf::new();
        for c in abs.components() {
            match c {
                Component::CurDir => {}
                Component::ParentDir => {
                    key.pop();
                }
                c => key.push(c),
            }
        }
        key
    }
}

/// What an earlier run left of a list's file at `path`.
#[derive(Debug, PartialEq, Eq)]
enum There {
    /// The file landed (a regular file, no unfinished `.part` beside it): its size, bytes.
    Landed(u64),
    /// The file is there and an unfinished `.part` beside it (a file fetched again over
    /// it, stopped): the `.part` resumes, and replaces the file once complete.
    Unfinished,
}

/// What of the file of `path` an earlier run left ([`There`]); `None` when it is not
/// there (or not a regular file), with `--force` (fetched again) and with `-N` or
/// `--etag-compare` (which ask the server about the file there by their own condition).
/// An empty `.part` without its control file (left by a run killed before a byte landed)
/// counts as no `.part`.
fn already_there(o: &Config, path: Option<&Path>) -> Option<There> {
    let path = path.filter(|_| !o.force && !o.timestamping && o.etag_compare.is_none())?;
    let meta = std::fs::metadata(path).ok().filter(std::fs::Metadata::is_file)?;
    let part = output::part_path(path);
    let unfinished = match std::fs::symlink_metadata(&part) {
        Ok(p) => p.len() > 0 || std::fs::symlink_metadata(output::resume::path_for(&part)).is_ok(),
        Err(_) => false,
    };
    Some(if unfinished {
        There::Unfinished
    } else {
        There::Landed(meta.len())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_path_is_one_path_however_spelled() {
        assert_eq!(same_file(Path::new("a")), same_file(Path::new("./a")));
        assert_eq!(same_file(Path::new("d/./a")), same_file(Path::new("d/a")));
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(same_file(Path::new("a")), same_file(&cwd.join("a")));
        assert_ne!(same_file(Path::new("a")), same_file(Path::new("d/a")));
    }

    #[test]
    fn a_file_under_a_directory_is_named_without_dot_components() {
        // (As strings: `Path`'s equality skips `.` components itself.)
        let named = |d: Option<&str>, p: &str| in_dir(d.map(Path::new), PathBuf::from(p)).into_os_string();
        assert_eq!(named(Some("out2"), "./a.bin"), "out2/a.bin");
        assert_eq!(named(Some("out2"), "./-"), "out2/-");
        assert_eq!(named(Some("out2"), "x/./y"), "out2/x/y");
        assert_eq!(named(Some("out2"), "/abs/a"), "/abs/a");
        assert_eq!(named(None, "./a"), "./a", "no -d: as given");
    }
}
