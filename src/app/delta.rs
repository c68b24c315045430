//! `--seed`: a delta update. The index is fetched by Range (a `.zck`'s lead and header into
//! the staging file, or a `.zsync` control file whole), checked (and its `--signature`),
//! the seeds scanned for its pieces, the missing pieces' remote ranges fetched into the
//! staging file (`FILE.delta.part`, resumable: a later run fetches only what it lacks),
//! every fetched piece checked against its digest, then the target written front to back
//! from seeds and staging — each piece checked again just before its write — checked
//! whole, and renamed into place (or left on the device at `--offset`). A delta is never
//! a silent full download: its size is said before anything is fetched, bounded by
//! `--max-delta-bytes`, and a server without ranges fails unless `--allow-full`.

mod assemble;
mod report;
mod stage;
mod target;

use std::os::fd::AsFd;
use std::path::PathBuf;

use super::PerRun;
use crate::config::Config;
use crate::delta::plan::{self, Plan};
use crate::delta::seed::Seed;
use crate::delta::{Index, zck, zsync};
use crate::err;
use crate::error::Result;
use crate::report::Record;
use report::{Refused, Report};
use stage::Staging;
use target::Target;

/// Bytes of a `.zck` asked first: its lead and, most often, its whole header.
const HEAD_FIRST: u64 = 64 << 10;
/// The largest index taken, bytes (a `.zsync` of a 64 GiB file at 4 KiB blocks holds
/// 16 Mi blocks of at most 20 bytes; a `.zck` header is smaller per chunk).
const MAX_INDEX: u64 = 512 << 20;

/// The index formats, told by the URL (`*.zsync`) or else by the file's lead.
enum Format {
    Zchunk,
    Zsync,
}

/// An index fetched and parsed: the index's bytes (what `--signature` covers) and what a
/// full download would fetch, bytes.
struct Fetched {
    index: Box<dyn Index>,
    bytes: Vec<u8>,
    full: u64,
    /// Why no seed can match this index, when the index itself tells.
    why_none: Option<String>,
}

/// Runs the delta update `opts` asks for (`--seed` given).
///
/// # Errors
/// `Usage` for a refused combination or a seed that is the target; what fetching the
/// index or the pieces fails with; `Protocol` for an index that does not parse or check;
/// `Signature` for an index whose `--signature` fails; `Delta` (exit 11) when the delta is
/// larger than `--max-delta-bytes` or the server serves no ranges without `--allow-full`;
/// `Checksum` when a piece fails its digest twice (nothing written) or the target fails
/// its whole digest (the `.part` removed); `LocalIo` for a seed or the target.
pub(super) fn run(opts: Box<Config>, record: &mut Record, per_run: &mut PerRun) -> Result<()> {
    let started = std::time::Instant::now();
    if let Some(p) = opts.json.as_ref() {
        // A record that cannot be written is found out now, not after the update.
        super::json_writable(p).map_err(|e| err!(LocalIo, "--json {}: {e}", p.display()))?;
    }
    record.json = opts.json.clone();
    refuse(&opts)?;
    let url = http::Url::parse(&opts.url).map_err(|e| err!(Usage, "{}: {e}", opts.url))?;
    let format = if url.path().ends_with(".zsync") {
        Format::Zsync
    } else {
        Format::Zchunk
    };
    let target = Target::of(&opts, &url, &format)?;
    record.url = Some(opts.url.clone());
    record.output = Some(target.path.display().to_string());
    // The target's `.part` is locked for the whole run: a second ringdl on the same target
    // stops instead of truncating it under this one.
    let lock = match target.device {
        true => None,
        false => crate::output::lock_part(Some(&target.path), opts.force, false)?,
    };
    let name = match format {
        Format::Zchunk => "zchunk",
        Format::Zsync => "zsync",
    };
    let mut report = Report::new(name, opts.seeds.len());
    let got = update(&opts, (&url, &format, &target), &mut report, record, per_run);
    // What the delta knew, refused or failed too.
    record.delta = Some(report.json());
    record.fetched = Some(report.fetched);
    record.requests = Some(report.requests);
    if let Err(e) = &got {
        if let Some(lock) = &lock {
            lock.remove_if_unused();
        }
        if e.kind == crate::error::Kind::Delta {
            // (Refused before any piece: nothing staged is worth keeping.)
            Staging::new(target.staging.clone(), String::new()).remove();
        }
    }
    if target.device && record.device_holds_unverified_bytes.is_none() {
        // Only a failure while the target was written leaves unchecked bytes on the device.
        record.device_holds_unverified_bytes = Some(false);
    }
    record.seconds = Some(started.elapsed().as_secs_f64());
    got?;
    // The whole target was checked against --checksum before it landed.
    record.checksum_verified = opts.checksum.as_ref().map(|_| true);
    record.bytes = report.target_len;
    if !opts.quiet {
        eprintln!("ringdl: done: {}: {}", target.path.display(), report.line());
    }
    Ok(())
}

/// The update itself: the index, its signature, the seeds scanned, the plan, the pieces
/// fetched and checked, the target written. `report` gets what it did, or learned before
/// it failed.
fn update(
    opts: &Config,
    (url, format, target): (&http::Url, &Format, &Target),
    report: &mut Report,
    record: &mut Record,
    per_run: &mut PerRun,
) -> Result<()> {
    let mut seeds = open_seeds(opts, target)?;
    let mut staging = Staging::new(target.staging.clone(), String::new());
    staging.refuse_link()?;
    if opts.no_continue {
        // Start over: what an earlier run staged is not used.
        staging.remove();
    }
    let got = steps(
        opts,
        (url, format, target),
        (&mut seeds, &mut staging),
        report,
        record,
        per_run,
    );
    (report.fetched, report.requests, report.refused) = (staging.fetched, staging.requests, staging.refused);
    got?;
    staging.remove();
    Ok(())
}

/// [`update`]'s steps once the seeds are open, fetching into `staging`.
fn steps(
    opts: &Config,
    (url, format, target): (&http::Url, &Format, &Target),
    (seeds, staging): (&mut [Seed], &mut Staging),
    report: &mut Report,
    record: &mut Record,
    per_run: &mut PerRun,
) -> Result<()> {
    let Fetched {
        mut index,
        bytes: index_bytes,
        full,
        why_none,
    } = match format {
        Format::Zchunk => zchunk_index(opts, staging, per_run)?,
        Format::Zsync => zsync_index(opts, url, staging, per_run)?,
    };
    (report.target_len, report.full) = (Some(index.target_len()), Some(full));
    index_signature(opts, &index_bytes, record, per_run)?;
    report.signed = opts.signature.is_some();
    drop(index_bytes);
    if target.device {
        // The slot must hold the image: said before the seeds are scanned.
        let (_, room) = crate::output::device::open(&target.path, opts.offset)?;
        let what = format!("the block device {}", target.path.display());
        if let Some(why) = room.refuse(index.target_len(), &what) {
            return Err(err!(LocalIo, "{why}"));
        }
    }
    let mut found = Vec::new();
    if staging.whole && !opts.quiet {
        // (The index came with the whole file: nothing is left for a seed to give.)
        eprintln!("ringdl: delta: the whole file was fetched (--allow-full): the seeds are not scanned");
    }
    for seed in seeds.iter_mut().filter(|_| !staging.whole) {
        let t = std::time::Instant::now();
        found.push(seed.scan(index.as_ref()).map_err(|e| err!(LocalIo, "{e}"))?);
        say_time(opts, &format!("seed {} scanned", seed.path.display()), t, seed.len);
        stop_if_signalled(
            per_run.signals.as_fd(),
            "while the seeds were scanned (nothing fetched)",
        )?;
    }
    let plan = Plan::of(index.as_ref(), found, plan::BRIDGE);
    (report.reused, report.needed) = (Some(plan.reused), Some(plan.bytes()));
    if !staging.whole {
        say_plan(opts, &plan, index.as_ref(), full, staging)?;
    }
    if plan.reused == 0 && index.target_len() > 0 && !opts.quiet && !staging.whole {
        // Said even without -v: a delta that reuses nothing is a full download.
        eprintln!(
            "ringdl: warning: delta: nothing of the target was found in the seed(s): this fetches all of it; {}",
            why_none
                .as_deref()
                .unwrap_or("is the seed the right image (or partition, at its start)?")
        );
    }
    let t = std::time::Instant::now();
    let whole = staging.whole || fetch_pieces(opts, &plan, full, staging, per_run)?;
    let plan = if whole {
        // The whole file fetched: the target is built from it alone, as a full download.
        (report.whole, report.reused, report.needed) = (true, Some(0), Some(full));
        Plan::of(index.as_ref(), Vec::new(), 0)
    } else {
        plan
    };
    check_fetched(opts, index.as_mut(), &plan, staging, per_run)?;
    say_time(opts, "pieces fetched and checked", t, plan.bytes());
    stop_if_signalled(
        per_run.signals.as_fd(),
        "once the pieces were fetched (kept in the staging file; nothing written)",
    )?;
    // The connections and buffers the fetches kept for a next file: none comes.
    per_run.reactor = crate::event::Reactor::new();
    let t = std::time::Instant::now();
    assemble::write(opts, target, index.as_ref(), &plan, seeds, staging).inspect_err(|_| {
        if target.device {
            record.device_holds_unverified_bytes = Some(true);
        }
    })?;
    let how = match crate::delta::pipe::helper_pays() {
        true => "target written and checked (hashing on a helper thread)",
        false => "target written and checked (hashing inline: one CPU)",
    };
    say_time(opts, how, t, index.target_len());
    Ok(())
}

/// A SIGINT or SIGTERM that arrived during a step outside the event loop (the seeds'
/// scan, the checks, the target's writes): `Interrupted` (exit 8) naming `when`.
/// The signals are blocked and read from `signals` (signalfd(2)); polled, never waited on.
fn stop_if_signalled(signals: std::os::fd::BorrowedFd<'_>, when: &str) -> Result<()> {
    let mut pfd = [rustix::event::PollFd::new(&signals, rustix::event::PollFlags::IN)];
    let zero = rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 };
    if !matches!(rustix::event::poll(&mut pfd, Some(&zero)), Ok(n) if n > 0) {
        return Ok(());
    }
    let name = uring::signal::read_name(signals);
    Err(err!(Interrupted, "interrupted by {name} {when}"))
}

/// With `-v`: how long a step took since `t`, over `bytes` bytes.
pub(super) fn say_time(opts: &Config, what: &str, t: std::time::Instant, bytes: u64) {
    if opts.verbose > 0 && !opts.quiet {
        let s = t.elapsed().as_secs_f64();
        let rate = bytes as f64 / s.max(1e-9) / f64::from(1u32 << 20);
        eprintln!("ringdl: delta: {what} in {s:.3} s ({bytes} bytes, {rate:.0} MiB/s)");
    }
}

/// Options a delta does not take.
fn refuse(opts: &Config) -> Result<()> {
    let no = |what: &str| Err(err!(Usage, "--seed does not go with {what}"));
    if !opts.mirrors.is_empty() {
        return no("mirrors (one URL: the index)");
    }
    if matches!(opts.output, crate::config::OutputTarget::Stdout) {
        return no("-o - (the target is written at offsets, and renamed when checked)");
    }
    if opts.etag_compare.is_some() || opts.timestamping || opts.condition.is_some() {
        return no("--etag-compare or -N (the index tells what changed)");
    }
    if opts.checksum_file.is_some() {
        return no("--checksum-file (give --checksum, or sign the index)");
    }
    Ok(())
}

/// Opens every `--seed`; one that is the target (or its `.part`) is refused: the target is
/// written while seeds are read, and a piece moved in place would be overwritten first.
fn open_seeds(opts: &Config, target: &Target) -> Result<Vec<Seed>> {
    let id_of = |p: PathBuf| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
    };
    let part_id = id_of(crate::output::part_path(&target.path));
    let staging_id = id_of(crate::output::part_path(&target.staging));
    let mut seeds = Vec::new();
    for p in &opts.seeds {
        let seed = Seed::open(p, opts.io).map_err(|e| err!(LocalIo, "{e}"))?;
        if staging_id.is_some() && Some(seed.id) == staging_id {
            return Err(err!(
                Usage,
                "seed {} is the delta's staging file for {} (fetched pieces are written into it): give another seed",
                p.display(),
                target.path.display()
            ));
        }
        if Some(seed.id) == target.id() || Some(seed.id) == part_id {
            return Err(err!(
                Usage,
                "seed {} is the target {} itself: a delta in place would overwrite pieces before they are read (write the other slot, or copy \
                 the seed first)",
                p.display(),
                target.path.display()
            ));
        }
        seeds.push(seed);
    }
    Ok(seeds)
}

/// A `.zck`'s lead and header fetched into the staging file (the first [`HEAD_FIRST`]
/// bytes, then the rest of the header if it is longer), parsed and checked.
fn zchunk_index(opts: &Config, staging: &mut Staging, per_run: &mut PerRun) -> Result<Fetched> {
    staging.url = opts.url.clone();
    let st = match staging.fetch(opts, Some(vec![(0, HEAD_FIRST)]), true, per_run) {
        Err(e) if stage::is_no_ranges(&e) => no_ranges(opts, e, None, staging, per_run)?,
        got => got?,
    };
    let mut reader = Seed::open_small(&staging.part(), opts.io).map_err(|e| err!(LocalIo, "{e}"))?;
    let mut head = Vec::new();
    reader
        .read(0, HEAD_FIRST.min(st.total), &mut head)
        .map_err(|e| err!(LocalIo, "{e}"))?;
    let len = match zck::head_len(&head) {
        Err(e) if !opts.url.ends_with(".zck") => {
            // Not an index at all (an image's own URL, most likely): nothing staged is kept.
            staging.remove();
            return Err(err!(
                Usage,
                "{}: --seed takes the URL of the image's index, a zchunk file (*.zck, made by `zck -u`) or a zsync \
                 control file (*.zsync, made by zsyncmake), and this is neither ({e})",
                opts.url
            ));
        }
        got => got
            .map_err(|e| err!(Protocol, "{}: {e}", opts.url))?
            .ok_or_else(|| err!(Protocol, "{}: not a zchunk file: it ends inside its lead", opts.url))?,
    };
    if len > st.total || len > MAX_INDEX {
        return Err(err!(
            Protocol,
            "{}: the zchunk header claims {len} bytes (the file has {})",
            opts.url,
            st.total
        ));
    }
    if len > HEAD_FIRST {
        staging.fetch(opts, Some(vec![(0, len)]), true, per_run)?;
        let mut reader = Seed::open_small(&staging.part(), opts.io).map_err(|e| err!(LocalIo, "{e}"))?;
        reader.read(0, len, &mut head).map_err(|e| err!(LocalIo, "{e}"))?;
    }
    head.truncate(len as usize);
    let index = match zck::Zck::parse(&head) {
        Ok(index) => index,
        Err(_) => {
            // Bytes a run before staged (or a transfer bent) are not trusted: once more
            // from the server, then the header is what it is.
            staging.forget(&[(0, len)])?;
            staging.fetch(opts, Some(vec![(0, len)]), true, per_run)?;
            let mut reader = Seed::open_small(&staging.part(), opts.io).map_err(|e| err!(LocalIo, "{e}"))?;
            reader.read(0, len, &mut head).map_err(|e| err!(LocalIo, "{e}"))?;
            zck::Zck::parse(&head).map_err(|e| err!(Protocol, "{}: {e}", opts.url))?
        }
    };
    let full = index.file_len();
    if full != st.total {
        return Err(err!(
            Protocol,
            "{}: the server's file has {} bytes, its zchunk header describes {full} (if the header was staged \
             by an earlier run against another file, --no-continue starts the delta over)",
            opts.url,
            st.total
        ));
    }
    let why_none = (!index.has_uncompressed_digests()).then(|| {
        "the .zck carries no uncompressed chunk checksums (made without `zck -u`): only an older .zck can \
         seed it, never a plain image or partition"
            .to_owned()
    });
    Ok(Fetched {
        index: Box::new(index),
        bytes: head,
        full,
        why_none,
    })
}

/// A `.zsync` control file fetched whole and parsed; its data file's URL (relative to the
/// control file's) must be on the same origin.
fn zsync_index(opts: &Config, url: &http::Url, staging: &mut Staging, per_run: &mut PerRun) -> Result<Fetched> {
    let bound = (MAX_INDEX, "a .zsync control file is at most 512 MiB here".to_owned());
    let mut fetched = Record::default();
    let got = crate::signed::fetch_small(&opts.url, opts, bound, |sub| super::run(sub, &mut fetched, per_run));
    staging.fetched += fetched.fetched.unwrap_or(0);
    staging.requests += fetched.requests.unwrap_or(0);
    let bytes = got?;
    let index = zsync::Zsync::parse(&bytes).map_err(|e| err!(Protocol, "{}: {e}", opts.url))?;
    let rel = index
        .urls()
        .first()
        .ok_or_else(|| err!(Protocol, "{}: the control file names no URL for its data", opts.url))?;
    let data = url
        .join(rel.as_bytes())
        .map_err(|e| err!(Protocol, "{}: its URL {rel:?}: {e}", opts.url))?;
    if !crate::control::headers::same_origin(&data, url) {
        return Err(err!(
            Protocol,
            "{}: the control file points elsewhere ({data}): ringdl fetches a delta's blocks only from the \
             control file's own origin",
            opts.url
        ));
    }
    staging.url = data.to_string();
    let full = index.target_len();
    Ok(Fetched {
        index: Box::new(index),
        bytes,
        full,
        why_none: None,
    })
}

/// `--signature` over the index (the `.zck`'s lead and header, or the `.zsync` file): the
/// index is trusted before any piece is fetched, and every piece is checked against it.
fn index_signature(opts: &Config, index: &[u8], record: &mut Record, per_run: &mut PerRun) -> Result<()> {
    let plan = crate::signed::load(opts, |u| {
        let bound = (
            crate::signature::MAX_FILE,
            "a signature file is at most 64 KiB".to_owned(),
        );
        crate::signed::fetch_small(u, opts, bound, |sub| super::run(sub, &mut Record::default(), per_run))
    })?;
    let Some(plan) = plan else {
        return Ok(());
    };
    let input = crate::signature::prehash(plan.sig.input(), index);
    plan.check(input.as_deref(), "the delta's index", opts, &mut record.signature)
}

/// The plan said before anything is fetched (not with `-q`), with what the staging file
/// holds already (a run stopped before: checked again before it is used).
fn say_plan(opts: &Config, plan: &Plan, index: &dyn Index, full: u64, staging: &Staging) -> Result<()> {
    if opts.quiet {
        return Ok(());
    }
    let staged = staging.state()?.map_or(0, |st| {
        let landed = crate::schedule::Landed::from_ranges(&st.ranges).within(&plan.ranges);
        landed.iter().map(|r| r.1 - r.0).sum::<u64>()
    });
    let staged = match staged {
        0 => String::new(),
        n => format!(", {n} of these bytes staged already"),
    };
    let pieces = index.piece_count();
    let reused = (0..plan.len()).filter(|&i| plan.from(i) != plan::From::Fetched).count();
    eprintln!(
        "ringdl: delta: {reused} of {pieces} pieces ({} of {} bytes) found in {} seed(s); fetching {} bytes in {} \
         range(s){staged} (a full download: {full} bytes)",
        plan.reused,
        index.target_len(),
        opts.seeds.len(),
        plan.bytes(),
        plan.ranges.len()
    );
    Ok(())
}

/// Fetches the plan's ranges into the staging file, within `--max-delta-bytes`. A server
/// without ranges: the whole file with `--allow-full` (returns true), else `Delta`.
fn fetch_pieces(opts: &Config, plan: &Plan, full: u64, staging: &mut Staging, per_run: &mut PerRun) -> Result<bool> {
    if let Some(bound) = opts.max_delta {
        let most = bound.bytes(full);
        if plan.bytes() > most {
            staging.refused = Some(Refused::MaxDeltaBytes);
            return Err(err!(
                Delta,
                "the delta needs {} bytes, more than --max-delta-bytes allows ({most} of a full {full})",
                plan.bytes()
            ));
        }
    }
    if plan.ranges.is_empty() {
        return Ok(false);
    }
    match staging.fetch(opts, Some(plan.ranges.clone()), opts.quiet, per_run) {
        Ok(st) if st.total != full => Err(err!(
            Protocol,
            "{}: the server's file has {} bytes, its index describes {full}",
            staging.url,
            st.total
        )),
        Ok(_) => Ok(false),
        Err(e) if stage::is_no_ranges(&e) => no_ranges(opts, e, Some(full), staging, per_run).map(|_| true),
        Err(e) => Err(e),
    }
}

/// A server that answered a Range request with the whole file: with `--allow-full` the
/// whole file (`full` bytes, when known) is fetched into the staging file (its state
/// returned) within `--max-delta-bytes` (a larger Content-Length is refused before a byte
/// lands, an answer without one once it landed), else `Delta`.
fn no_ranges(
    opts: &Config,
    e: crate::error::Error,
    full: Option<u64>,
    staging: &mut Staging,
    per_run: &mut PerRun,
) -> Result<crate::output::resume::State> {
    if !opts.allow_full {
        staging.refused = Some(Refused::NoRanges);
        return Err(err!(
            Delta,
            "{}; --allow-full would fetch the whole file instead",
            e.msg
        ));
    }
    // The whole file is a full download: a percentage under 100 refuses it whatever its
    // size (known here for a `.zsync`'s data, not yet for a `.zck`); bytes bound its size.
    staging.bound = match opts.max_delta {
        None => None,
        Some(crate::config::DeltaBound::Percent(p)) if p >= 100.0 => None,
        Some(crate::config::DeltaBound::Percent(p)) => {
            staging.refused = Some(Refused::MaxDeltaBytes);
            return Err(err!(
                Delta,
                "{}; the whole file is a full download, more than --max-delta-bytes {p}% allows",
                e.msg
            ));
        }
        Some(crate::config::DeltaBound::Bytes(b)) => Some(b),
    };
    if let (Some(most), Some(full)) = (staging.bound, full)
        && full > most
    {
        // (The words of the refusal of a larger Content-Length, `stage::Staging::fetch`.)
        staging.refused = Some(Refused::MaxDeltaBytes);
        return Err(err!(
            Delta,
            "{}; the file is {full} bytes, more than {most}: {}",
            e.msg,
            stage::bound_reason(most)
        ));
    }
    if !opts.quiet {
        // (A `.zck`'s size is known only from the answer: a byte bound is held to it there.)
        let most = match (staging.bound, full) {
            (Some(b), None) => format!(" if it is at most {b} bytes (--max-delta-bytes)"),
            _ => String::new(),
        };
        eprintln!("ringdl: delta: {e}; fetching the whole file (--allow-full){most}");
    }
    let st = staging
        .fetch(opts, None, opts.quiet, per_run)
        .map_err(|refused| match refused.kind {
            // (The size bound's refusal: the whole file is more than the delta may fetch.)
            crate::error::Kind::Usage if staging.bound.is_some() => {
                staging.refused = Some(Refused::MaxDeltaBytes);
                err!(Delta, "{}; {}", e.msg, refused.msg)
            }
            _ => refused,
        })?;
    // (An answer without Content-Length, chunked or ended by the close, is held to the
    // bound once it has landed: larger, it is refused and not used.)
    if let Some(most) = staging.bound
        && st.total > most
    {
        staging.refused = Some(Refused::MaxDeltaBytes);
        return Err(err!(
            Delta,
            "{}; the file is {} bytes, more than {most}: {}",
            e.msg,
            st.total,
            stage::bound_reason(most)
        ));
    }
    staging.whole = true;
    Ok(st)
}

/// Every fetched piece (and the always-fetched range) read back from the staging file and
/// checked; pieces that fail are forgotten and fetched once more, and a piece that fails
/// again ends the delta (`Checksum`, naming it) before anything is written.
fn check_fetched(
    opts: &Config,
    index: &mut dyn Index,
    plan: &Plan,
    staging: &mut Staging,
    per_run: &mut PerRun,
) -> Result<()> {
    if plan.ranges.is_empty() {
        return Ok(());
    }
    let mut reader = Seed::open_small(&staging.part(), opts.io).map_err(|e| err!(LocalIo, "{e}"))?;
    if let Some((a, b)) = index.always_fetch() {
        let mut bytes = Vec::new();
        reader.read(a, b - a, &mut bytes).map_err(|e| err!(LocalIo, "{e}"))?;
        index
            .take_always(&bytes)
            .map_err(|e| err!(Checksum, "{}: {e}", staging.url))?;
    }
    let mut bad = bad_pieces(index, plan, &mut reader)?;
    if bad.is_empty() {
        return Ok(());
    }
    if !opts.quiet {
        eprintln!(
            "ringdl: delta: {} piece(s) failed their digest: fetching them again",
            bad.len()
        );
    }
    let ranges: Vec<(u64, u64)> = bad
        .iter()
        .map(|(i, _)| {
            let p = index.piece(*i);
            (p.remote_start, p.remote_start + p.remote_len)
        })
        .collect();
    let ranges = plan::coalesce(&ranges, 0);
    staging.forget(&ranges)?;
    staging.fetch(opts, Some(ranges), opts.quiet, per_run)?;
    let mut reader = Seed::open_small(&staging.part(), opts.io).map_err(|e| err!(LocalIo, "{e}"))?;
    bad = bad_pieces(index, plan, &mut reader)?;
    match bad.first() {
        None => Ok(()),
        Some((_, why)) => Err(err!(
            Checksum,
            "{}: {why}, fetched twice: the server's file is not what its index says; nothing was written",
            staging.url
        )),
    }
}

/// The fetched pieces of `plan` that fail their check, with why.
fn bad_pieces(index: &dyn Index, plan: &Plan, reader: &mut Seed) -> Result<Vec<(usize, String)>> {
    let (mut fetched, mut out, mut bad) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..plan.len() {
        if plan.from(i) != plan::From::Fetched {
            continue;
        }
        let p = index.piece(i);
        reader
            .read(p.remote_start, p.remote_len, &mut fetched)
            .map_err(|e| err!(LocalIo, "{e}"))?;
        if let Err(why) = index.open_fetched(i, &fetched, &mut out) {
            bad.push((i, why));
        }
    }
    Ok(bad)
}
