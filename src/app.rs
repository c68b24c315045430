//! The command: options → download → summary, and the exit code. Arrows point down:
//! app → event loop (control, schedule, engines) → output → `uring`.

use std::os::fd::AsFd;
use std::process::ExitCode;

use crate::cli::{self, Command};
use crate::config::{Config, OutputTarget};
use crate::engine::EngineKind;
use crate::engine::select::{self, Sink};
use crate::err;
use crate::error::Result;
use crate::event as download;
use crate::output::{self, Output, Seen};
use crate::report::Record;

mod delta;
mod fetch;
mod finish;
mod inputs;
mod list;
mod route;
mod updates;

use fetch::fetch;
use inputs::{checksum_from_file, load_resume};
use route::given_urls;

/// Runs ringdl with the process arguments; the exit code is documented in README.md
/// "Exit status". Returns once the kernel has closed every output
/// ([`output::closes::settle`], at most [`output::closes::LIMIT`]).
pub fn main() -> ExitCode {
    let (code, quiet) = run_args();
    let open = output::closes::settle(output::closes::LIMIT);
    if open > 0 && !quiet {
        eprintln!(
            "ringdl: note: {open} output file(s) still held open {} s after the end (by the kernel, or another \
             program's lock): unmounting their filesystem may fail for a moment",
            output::closes::LIMIT.as_secs()
        );
    }
    code
}

/// [`main`] before the wait for the outputs' last close; and whether `-q` was given.
fn run_args() -> (ExitCode, bool) {
    let opts = match cli::parse(std::env::args_os().skip(1)) {
        Err(e) => {
            eprintln!("ringdl: {e}");
            return (ExitCode::from(e.kind.exit_code()), false);
        }
        Ok(Command::Help) => {
            print!("{}", cli::HELP);
            return (ExitCode::SUCCESS, false);
        }
        Ok(Command::Version) => {
            println!("ringdl {}", env!("CARGO_PKG_VERSION"));
            return (ExitCode::SUCCESS, false);
        }
        Ok(Command::Files(base, files)) => {
            let quiet = base.quiet;
            return (ExitCode::from(list::main(base, files)), quiet);
        }
        Ok(Command::Download(o)) => o,
    };
    let quiet = opts.quiet;
    let started = std::time::Instant::now();
    let mut record = Record::default();
    let result = PerRun::new().and_then(|mut per_run| run(opts, &mut record, &mut per_run));
    let mut code = exit_code(&result);
    if let Some(dest) = record.json.take() {
        let json = file_json(&mut record, &result, code, started);
        if write_json(&dest, &json).is_err() && code == 0 {
            code = crate::error::Kind::LocalIo.exit_code();
        }
    }
    (ExitCode::from(code), quiet)
}

/// The exit code of one file's `result`, its error said on stderr.
fn exit_code(result: &Result<()>) -> u8 {
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ringdl: {e}");
            e.kind.exit_code()
        }
    }
}

/// One file's `--json` object (see [`Record::to_json`]); a failure before the transfer
/// reports the time since `started`.
fn file_json(record: &mut Record, result: &Result<()>, code: u8, started: std::time::Instant) -> String {
    if result.is_err() && record.seconds.is_none() {
        record.seconds = Some(started.elapsed().as_secs_f64());
    }
    let msg = result.as_ref().err().map(|e| e.to_string());
    record.to_json(code, msg.as_deref())
}

/// Whether `--json`'s `dest` can be written (`-`, standard output, is not checked): an
/// existing regular file is opened for writing (not truncated), a missing one created
/// and removed again, so that a run killed before its end leaves no empty record; for a
/// device or a FIFO only access(2) is asked (opening a FIFO would wait for its reader).
///
/// # Errors
/// What stat(2), open(2), unlink(2) or access(2) returned.
fn json_writable(dest: &std::path::Path) -> std::io::Result<()> {
    use std::fs::OpenOptions;
    if dest.as_os_str() == "-" {
        return Ok(());
    }
    match std::fs::metadata(dest) {
        Ok(m) if m.is_dir() => Err(rustix::io::Errno::ISDIR.into()),
        // (As open(2) will judge it: the effective ids.)
        Ok(m) if !m.is_file() => {
            let (cwd, w) = (rustix::fs::CWD, rustix::fs::Access::WRITE_OK);
            rustix::fs::accessat(cwd, dest, w, rustix::fs::AtFlags::EACCESS).map_err(std::io::Error::from)
        }
        Ok(_) => OpenOptions::new().write(true).open(dest).map(drop),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match OpenOptions::new().write(true).create_new(true).open(dest) {
                Ok(_) => std::fs::remove_file(dest),
                // (A symlink whose target is missing: the target is made and removed again;
                // the end's write makes it.)
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let target = dest
                        .parent()
                        .unwrap_or(std::path::Path::new(""))
                        .join(std::fs::read_link(dest)?);
                    OpenOptions::new().write(true).create_new(true).open(&target)?;
                    std::fs::remove_file(&target)
                }
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Writes `json` to `dest` (`-` = standard output); a failure is said on stderr.
fn write_json(dest: &std::path::Path, json: &str) -> std::io::Result<()> {
    let written = if dest.as_os_str() == "-" {
        std::io::Write::write_all(&mut std::io::stdout().lock(), json.as_bytes())
    } else {
        std::fs::write(dest, json)
    };
    written.inspect_err(|e| eprintln!("ringdl: --json {}: {e}", dest.display()))
}

/// What the files of one run share: the signal fd, the TLS client configurations (one per
/// origin key, kept so that a later file to the same origin resumes its sessions; made at
/// the first https URL of each), and where the current file stands in the run.
pub(crate) struct PerRun {
    /// SIGINT/SIGTERM as a readable fd (blocked from the start, so one that arrives
    /// between files stays pending and stops the next transfer).
    signals: std::os::fd::OwnedFd,
    /// The TLS client configurations of the run's https origins.
    tls: crate::control::tls::Configs,
    /// Several files: files done before this one, and the run's count (progress line).
    files: Option<(usize, usize)>,
    /// Connections, origins and buffers one file leaves for the next (keep-alive).
    reactor: download::Reactor,
    /// Whether the kernel takes TLS sockets (`ktls::probe`, one throwaway socket), once
    /// it was asked.
    ktls: Option<bool>,
    /// Several files: the directories of the files renamed into place whose fsync is
    /// still to come.
    renamed: Option<Renamed>,
    /// The output directories of `-d`/`dir=` made or found there in this run.
    dirs: Dirs,
}

/// The output directories a run has made or found there already ([`output::create_dirs`]):
/// each is looked at once per run, not once per file of a list.
#[derive(Default)]
pub(crate) struct Dirs(Vec<std::path::PathBuf>);

impl Dirs {
    /// `mkdir -p dir`, durable ([`output::create_dirs`]), unless this run did it already.
    ///
    /// # Errors
    /// As [`output::create_dirs`].
    fn made(&mut self, dir: &std::path::Path) -> Result<()> {
        if self.0.iter().any(|d| d == dir) {
            return Ok(());
        }
        output::create_dirs(dir)?;
        // (A list names few directories; a long list of them keeps the last ones.)
        if self.0.len() >= 64 {
            self.0.remove(0);
        }
        self.0.push(dir.to_path_buf());
        Ok(())
    }
}

/// Directories with renames not yet made durable, and since when: a list's files are
/// renamed into place one by one and their directories fsync'd together — at most every
/// [`Renamed::EVERY`] and at the end of the run, before its exit status — instead of one
/// directory fsync per file (1.6 ms each on this machine's ext4).
#[derive(Default)]
pub(crate) struct Renamed {
    dirs: Vec<std::path::PathBuf>,
    since: Option<std::time::Instant>,
}

impl Renamed {
    /// Longest a rename waits for its directory's fsync while the run goes on.
    const EVERY: std::time::Duration = std::time::Duration::from_secs(1);

    fn add(&mut self, dir: std::path::PathBuf) {
        if !self.dirs.contains(&dir) {
            self.dirs.push(dir);
        }
        self.since.get_or_insert_with(std::time::Instant::now);
    }

    /// fsyncs the directories when the oldest rename waits for longer than [`Self::EVERY`]
    /// (or `now`).
    ///
    /// # Errors
    /// The first directory whose fsync failed ([`output::sync_dir`]); the others are
    /// synced all the same.
    fn sync(&mut self, now: bool) -> Result<()> {
        let mut first = Ok(());
        if now || self.since.is_some_and(|t| t.elapsed() >= Self::EVERY) {
            for d in self.dirs.drain(..) {
                if let Err(e) = output::sync_dir(&d)
                    && first.is_ok()
                {
                    first = Err(e);
                }
            }
            self.since = None;
        }
        first
    }
}

impl PerRun {
    /// Blocks SIGINT and SIGTERM and takes them as a signalfd (before anything else: an
    /// interrupt becomes a completion on the ring, so it stops a download between two
    /// operations and keeps the `.part` consistent).
    ///
    /// # Errors
    /// `LocalIo` when signalfd(2) fails.
    fn new() -> Result<PerRun> {
        let signals = uring::signal::block_signals(&[uring::signal::SIGINT, uring::signal::SIGTERM])
            .map_err(|e| err!(LocalIo, "signalfd: {e}"))?;
        Ok(PerRun {
            signals,
            tls: crate::control::tls::Configs::default(),
            files: None,
            reactor: download::Reactor::new(),
            ktls: None,
            renamed: None,
            dirs: Dirs::default(),
        })
    }

    /// Whether this kernel has TLS sockets (probed at the first file that needs to know).
    fn ktls_present(&mut self) -> bool {
        *self
            .ktls
            .get_or_insert_with(|| !matches!(ktls::probe(), ktls::Support::Absent))
    }
}

/// One download as `opts` asks (the command's, or a `--signature` URL's), in three steps:
/// [`prepare`] (names, output, resume state, engine), [`fetch()`] (the transfer, redirects,
/// mirrors left out) and [`finish::finish`] (checks, rename, summary).
fn run(opts: Box<Config>, record: &mut Record, per_run: &mut PerRun) -> Result<()> {
    if !opts.seeds.is_empty() {
        return delta::run(opts, record, per_run);
    }
    let prepared = prepare(opts, record, per_run, None)?;
    fetch(prepared, record, per_run)
}

/// One file made ready for its transfer by [`prepare`].
struct Prepared {
    /// The file's options (`--checksum-file` resolved to its digest, a condition taken).
    opts: Box<Config>,
    /// Each URL given, parsed, with its credentials.
    given: Vec<(http::Url, Option<crate::config::Credentials>)>,
    /// `--signature`'s plan, and what it needs of the file (when it signs the file).
    plan: Option<crate::signed::Plan>,
    signed_input: Option<crate::signature::Input>,
    /// The output when it is not a regular file.
    special: Option<output::Special>,
    /// The lock on the `.part`, held until the file is done.
    lock: Option<output::PartLock>,
    /// The control file, and the state read from it to resume.
    control: Option<std::path::PathBuf>,
    resume_state: Option<crate::output::resume::State>,
    /// The output, opened.
    out: Output,
    /// The engine chosen, whether kTLS is to be tried, and the note of why.
    engine: EngineKind,
    ktls_on: bool,
    engine_note: &'static str,
    /// `-v`'s line on the engine, said when the file starts (after its name, among others).
    engine_line: Option<String>,
}

/// Prepares one file: its name, signature plan and checksum, the lock on its `.part`,
/// its resume state, its output opened and its engine chosen. Nothing is requested
/// (but a `--signature` or key URL, fetched first).
///
/// # Errors
/// `Usage` for a bad URL or a refused combination, `LocalIo` for the output, and what
/// loading a signature or a checksum file returns.
fn prepare(mut opts: Box<Config>, record: &mut Record, per_run: &mut PerRun, seen: Option<Seen>) -> Result<Prepared> {
    if let Some(p) = opts.json.as_ref() {
        // A record that cannot be written is found out now, not after the download.
        json_writable(p).map_err(|e| err!(LocalIo, "--json {}: {e}", p.display()))?;
    }
    record.json = opts.json.clone();
    record.url = Some(opts.url.clone());
    record.mirror_urls = opts.mirrors.iter().map(|m| m.url.clone()).collect();
    let given = given_urls(&opts)?;
    let url = given[0].0.clone();
    warn_before(&opts, &url);
    let final_path = output::final_path(&opts.output, &url).map(|p| in_dir(opts.dir.as_deref(), p));
    record.output = final_path.as_ref().map(|p| p.display().to_string());
    let (plan, signed_input) = load_signature_and_sums(&mut opts, record, per_run, final_path.as_deref(), &url)?;
    // One lstat(2) of the name answers the checks below when nothing has it.
    let seen = seen.unwrap_or_else(|| Seen::of(final_path.as_deref()));
    let device = seen == Seen::Something && final_path.as_deref().is_some_and(output::device::is_block_device);
    // (`-N` and `--etag-compare` imply --force to replace the output; a `.part` with its
    // control file still resumes: only the user's --force starts over.)
    let asked_force = opts.force;
    updates::prepare(&mut opts, final_path.as_deref(), device)?;
    let special = special_output(&mut opts, final_path.as_deref(), device, signed_input.is_some(), seen)?;
    // A forced engine that cannot run here fails before the output is touched (an
    // existing .part and its control file stay). kTLS is probed only where it decides.
    let https = url.scheme() == http::Scheme::Https;
    let ktls_here = select::needs_ktls_probe(opts.engine, https).then(|| per_run.ktls_present());
    let not_a_file = special.as_ref().map(|sp| sp.what.as_str());
    select::refusal(opts.engine, https, ktls_here, not_a_file)?;
    // Held until exit: nothing below may read the control file or touch the `.part` of
    // another ringdl's download.
    if let Some(dir) = final_path
        .as_deref()
        .and_then(|p| p.parent())
        .filter(|_| opts.dir.is_some())
    {
        per_run.dirs.made(dir)?;
    }
    let direct = select::opens_direct(opts.engine);
    let mut lock = output::lock_part_as(final_path.as_deref(), (opts.force, opts.resume), seen, direct)?;
    let control = updates::control_path(&opts, final_path.as_deref(), device);
    // (A `.part` this run just created has nothing to resume: a control file beside it
    // is removed when the output opens.)
    let fresh = lock.as_ref().is_some_and(|l| l.created);
    let implicit = !fresh && resumes_implicitly(&opts, control.as_deref(), device, asked_force, special.is_some());
    let resume_state = match (&control, opts.resume || implicit) {
        (Some(c), true) if !device && !fresh => load_resume(c, &opts.url, opts.quiet),
        _ => None,
    };
    if implicit
        && !opts.quiet
        && let (Some(c), Some(st)) = (&control, &resume_state)
    {
        eprintln!(
            "ringdl: {} has a control file: {} of {} bytes kept, resumed if the server's file is the same (--no-continue starts over)",
            c.with_extension("").display(),
            st.ranges.iter().map(|r| r.1 - r.0).sum::<u64>(),
            st.total
        );
    }
    let out = match final_path.clone().filter(|_| device) {
        Some(dev) => Output::open_device(dev, opts.offset),
        None => Output::open(
            final_path,
            direct,
            special.as_ref().filter(|_| opts.output != OutputTarget::Stdout),
            (opts.force, resume_state.is_some()),
            (!(opts.resume || implicit || opts.quiet), !opts.quiet),
            // (A list's file does not wait for a FIFO's reader: every other file would.)
            Some(per_run.signals.as_fd()).filter(|_| per_run.files.is_none()),
            lock.as_mut(),
        ),
    }
    .inspect_err(|_| {
        // An output that cannot be opened leaves nothing behind.
        if let Some(l) = &lock {
            l.remove_if_unused();
        }
    })?;
    let resume_state = match (&control, &out.room, opts.resume) {
        (Some(c), Some(room), true) => updates::device_resume(c, &opts, room),
        _ => resume_state,
    };
    // A resumed `.part` is checked by its own validator: the rest is fetched whatever
    // changed, so no precondition goes out.
    if resume_state.is_some() && opts.condition.take().is_some() && opts.verbose > 0 {
        eprintln!("ringdl: resuming: the first request is not conditional");
    }
    let (selection, engine_line) = choose_engine(&opts, &out, not_a_file, https, ktls_here)?;
    let select::Selection {
        engine,
        ktls: ktls_on,
        note: engine_note,
    } = selection;
    record.engine = Some(engine.name().to_owned());
    Ok(Prepared {
        opts,
        given,
        plan,
        signed_input,
        special,
        lock,
        control,
        resume_state,
        out,
        engine,
        ktls_on,
        engine_note,
        engine_line,
    })
}

/// What is said before a file is fetched: `--insecure`'s warning, and a note when URLs
/// given as mirrors end in different names (they may be different files: said before the
/// download, since a small file may come whole from the first and the others are then
/// never asked, nothing dropped to hint at it).
fn warn_before(opts: &Config, url: &http::Url) {
    if opts.insecure {
        eprintln!("ringdl: warning: --insecure: the server certificate is NOT verified");
    }
    if !opts.quiet
        && let Some(other) = opts
            .mirrors
            .iter()
            .find(|m| crate::transfer::mirror::names_differ(&opts.url, &m.url))
    {
        eprintln!(
            "ringdl: note: the URLs end in different names ({} and {}): they are taken as mirrors of one file; -Z fetches each URL as its own file",
            url.file_name().unwrap_or_default(),
            http::Url::parse(&other.url)
                .ok()
                .and_then(|u| u.file_name().map(str::to_owned))
                .unwrap_or_default()
        );
    }
}

/// `--signature` (and its keys) read, fetched and parsed before anything else is, and
/// `--checksum-file` read (checked against the signature when it signs that file) into
/// the checksum of the file at `final_path`. Returns the signature's plan and what it
/// needs of the file (when it signs the file).
fn load_signature_and_sums(
    opts: &mut Config,
    record: &mut Record,
    per_run: &mut PerRun,
    final_path: Option<&std::path::Path>,
    url: &http::Url,
) -> Result<(Option<crate::signed::Plan>, Option<crate::signature::Input>)> {
    let plan = crate::signed::load(opts, |u| {
        let bound = (
            crate::signature::MAX_FILE,
            "a signature file is a few hundred bytes (at most 64 KiB here)".to_owned(),
        );
        crate::signed::fetch_small(u, opts, bound, |sub| run(sub, &mut Record::default(), per_run))
    })?;
    if let Some(p) = &plan {
        p.signer_known(opts, &mut record.signature)?;
    }
    let signed_input = plan.as_ref().and_then(|p| p.over_file(opts));
    if let Some(sums) = &opts.checksum_file {
        let text = std::fs::read(sums).map_err(|e| err!(LocalIo, "--checksum-file {}: {e}", sums.display()))?;
        let name = sums.display().to_string();
        match &plan {
            // Over the checksum file: checked now, before a byte of the file is fetched.
            Some(p) => p.check(
                crate::signature::prehash(p.sig.input(), &text).as_deref(),
                &name,
                opts,
                &mut record.signature,
            )?,
            None => crate::signed::pgp_unchecked(&text, &name, &mut record.signature),
        }
        opts.checksum = Some(checksum_from_file(&text, &name, final_path, url)?);
    }
    Ok((plan, signed_input))
}

/// The output when it is not a regular file: standard output, a FIFO, a terminal, a
/// socket, a device. Bytes go to it in order, on one connection (several would deliver
/// blocks out of order); a sink (/dev/null) takes any.
///
/// # Errors
/// `Usage` for a `--signature` over such an output (`signs_file`).
fn special_output(
    opts: &mut Config,
    final_path: Option<&std::path::Path>,
    device: bool,
    signs_file: bool,
    seen: Seen,
) -> Result<Option<output::Special>> {
    let special = match final_path {
        None => Some(output::Special {
            what: "standard output".to_owned(),
            sink: false,
            fd: Some(1),
        }),
        Some(_) if device || seen == Seen::Nothing => None,
        Some(p) => output::special(p),
    };
    if let Some(sp) = special.as_ref().filter(|_| signs_file) {
        return Err(err!(
            Usage,
            "--signature over {}: a signature is checked before the file is renamed into place, \
             so it needs a file output (or sign a checksum file: --checksum-file)",
            sp.what
        ));
    }
    if let Some(sp) = special.as_ref().filter(|sp| !sp.sink) {
        if opts.connections > 1 && opts.verbose > 0 {
            eprintln!(
                "ringdl: {} takes bytes only in order: one connection (not {})",
                sp.what, opts.connections
            );
        }
        opts.connections = 1;
        if opts.resume {
            eprintln!(
                "ringdl: warning: -c has no effect with {} (it cannot be resumed)",
                sp.what
            );
        }
    }
    Ok(special)
}

/// Without -c a `.part` whose control file is there resumes too (aria2c does the same),
/// validated as -c validates; --no-continue or --force (`asked_force`, the user's own)
/// starts over. A device resumes only with -c and --control: its control file is the
/// user's to name.
fn resumes_implicitly(
    opts: &Config,
    control: Option<&std::path::Path>,
    device: bool,
    asked_force: bool,
    special: bool,
) -> bool {
    !device
        && !opts.resume
        && !opts.no_continue
        && !asked_force
        && !special
        && control.is_some_and(|c| std::fs::symlink_metadata(c).is_ok())
}

/// The engine for output `out` (`not_a_file`: what it is when it is not a regular file)
/// and `-v`'s line on it. An engine refused here discards the output when it is empty.
fn choose_engine(
    opts: &Config,
    out: &Output,
    not_a_file: Option<&str>,
    https: bool,
    ktls_here: Option<bool>,
) -> Result<(select::Selection, Option<String>)> {
    let sink = match (&out.part, not_a_file) {
        (None, _) if out.room.is_some() => Sink::File {
            direct: true,
            path: out.final_path.as_deref().expect("a device has a path"),
        },
        (Some(part), _) => Sink::File {
            direct: out.direct,
            path: part,
        },
        (None, what) => Sink::NotAFile(what.unwrap_or("standard output")),
    };
    let selection = match select::select(opts.engine, https, ktls_here, &sink) {
        Ok(s) => s,
        Err(e) => {
            out.discard_if_empty();
            return Err(e);
        }
    };
    let engine_line = (opts.verbose > 0).then(|| {
        let how = if out.direct {
            format!("O_DIRECT, {}-byte alignment", out.align)
        } else {
            "page cache".to_owned()
        };
        format!("engine {} ({how})", selection.engine.name())
    });
    Ok((selection, engine_line))
}

/// `p` in `-d`'s directory `dir` when `p` is relative (as aria2c places `-o` under `-d`).
pub(crate) fn in_dir(dir: Option<&std::path::Path>, p: std::path::PathBuf) -> std::path::PathBuf {
    match dir {
        // (`.` components inside left out: `out=./a` under `-d d` is `d/a`.)
        Some(d) if p.is_relative() && d != std::path::Path::new(".") => d.join(p).components().collect(),
        _ => p,
    }
}

impl Record {
    /// Takes what the finished transfer `s` of `url` learned.
    fn fill(&mut self, url: &http::Url, engine: EngineKind, s: &download::Summary) {
        self.final_url = Some(url.to_string());
        self.bytes = Some(s.bytes);
        self.fetched = Some(s.fetched);
        self.seconds = Some(s.elapsed.as_secs_f64());
        self.waited_seconds = Some(s.waited.as_secs_f64());
        // kTLS refused on every connection: the user-space path of the same engine ran.
        let ran = match engine {
            EngineKind::KtlsDirect if s.ktls_conns == 0 => "direct",
            e => e.name(),
        };
        self.engine = Some(ran.to_owned());
        self.io = s.io.split_whitespace().next().map(str::to_owned);
        if let Some((version, suite)) = s.tls.split_once(' ') {
            self.tls_version = Some(version.to_owned());
            self.tls_suite = Some(suite.to_owned());
        }
        self.ktls_connections = Some(s.ktls_conns as u64);
        self.records_in_place_connections = Some(s.soft_conns as u64);
        self.tls_connections = Some(s.tls_conns as u64);
        if s.tls != "plain" {
            self.tls_full_handshakes = Some(s.tls_full as u64);
            self.tls_resumed_handshakes = Some(s.tls_resumed as u64);
        }
        self.connections = Some(s.connections as u64);
        self.retries = Some(s.retries);
        self.requests = Some(s.requests);
        self.resent = Some(s.resent);
        self.steals = Some(s.steals);
        self.reactors = Some(s.reactors as u64);
        self.parts = Some(s.parts as u64);
        self.other_reactors_bytes = Some(s.other_reactors_bytes);
        self.reactor = Some(s.reactor as u64);
    }
}

/// ` from 2 of 3 mirrors` for the summary line (empty with one URL).
fn mirrors_served(mirrors: &[crate::report::MirrorReport]) -> String {
    if mirrors.is_empty() {
        return String::new();
    }
    let served = mirrors.iter().filter(|m| m.bytes > 0).count();
    format!(" from {served} of {} mirrors", mirrors.len())
}
