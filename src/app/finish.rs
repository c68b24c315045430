//! The last step of one file, once its transfer is done: the record, the signature and
//! the checksum checked, the rename into place, the validators saved, the summary line.
//! (Separate from the transfer so that a reactor running many files can finish each as
//! it completes.)

use std::path::Path;

use super::{in_dir, updates};
use crate::config::{Config, OutputTarget};
use crate::engine::EngineKind;
use crate::err;
use crate::error::{Kind, Result};
use crate::event as download;
use crate::output::{self, Output, resume};
use crate::report::{self as progress, MirrorReport, Record};

/// What [`finish`] needs from the steps before it.
pub(super) struct Landing<'a> {
    /// The file's options.
    pub(super) opts: &'a Config,
    /// `--signature`'s plan (keys and signature, loaded before the transfer).
    pub(super) plan: Option<&'a crate::signed::Plan>,
    /// The control file of the `.part` (removed once the file landed, or when its bytes
    /// failed their signature or checksum: a later run starts over).
    pub(super) control: Option<&'a Path>,
    /// The output when it is not a regular file (standard output, a FIFO…).
    pub(super) special: Option<&'a output::Special>,
    /// The engine chosen, and the note of why (summary line).
    pub(super) engine: EngineKind,
    pub(super) engine_note: &'static str,
    /// The URL the body came from (the reference mirror's, after redirects), and the
    /// redirects followed to it.
    pub(super) url: &'a http::Url,
    pub(super) redirects: u32,
    /// Mirrors left out before the transfer.
    pub(super) left_out: &'a [MirrorReport],
    /// In a list, the directories whose fsync makes the run's renames durable, done
    /// together ([`super::PerRun::renamed`]); `None`: the directory is synced at once.
    pub(super) renamed: Option<&'a mut super::Renamed>,
    /// The file's progress, which says `-v`'s lines (after its name among several files).
    pub(super) progress: &'a mut crate::report::Progress,
}

/// What the read-back of a file gave its checks: the `--checksum` digest, and what
/// `--signature` needs ([`download::Summary::signed`]).
pub(super) struct Owed<'a> {
    pub(super) digest: Option<&'a [u8]>,
    pub(super) signed: Option<&'a Option<Vec<u8>>>,
}

/// The checks a file owes before it counts as exact, in this order: its signature
/// (`plan`, when over the file), then its `--checksum`, over what its read-back gave
/// (`owed`); a fetched `.part` before its rename, and a file a 304 kept alike. `record`
/// says what was checked (`checksum_verified`, `signature`). `name`: the file for
/// messages; `notes`: what a signature's failure and a checksum's add (where the bytes
/// stay).
///
/// # Errors
/// `Signature` (exit 10) or `Checksum` (exit 9) naming the file and the note; `Internal`
/// when a checksum is asked and nothing was read back.
pub(super) fn verify(
    opts: &Config,
    plan: Option<&crate::signed::Plan>,
    owed: Owed<'_>,
    (name, notes): (&str, (String, String)),
    record: &mut Record,
) -> Result<()> {
    record.checksum_verified = match (&opts.checksum, owed.digest) {
        (Some(want), Some(got)) => Some(want.expected == got),
        // Never "verified" when nothing was read back.
        (Some(_), None) => return Err(err!(Internal, "--checksum: no digest of {name}")),
        _ => None,
    };
    if let (Some(p), Some(input)) = (plan, owed.signed) {
        p.check(input.as_deref(), name, opts, &mut record.signature)
            .map_err(|mut e| {
                e.msg.push_str(&format!(" ({})", notes.0));
                e
            })?;
    }
    if let (Some(want), Some(got)) = (&opts.checksum, owed.digest)
        && want.expected != got
    {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        return Err(err!(
            Checksum,
            "{} mismatch: expected {}, got {} ({})",
            want.name,
            hex(&want.expected),
            hex(got),
            notes.1
        ));
    }
    Ok(())
}

/// Finishes the file whose transfer `s` wrote `out`: fills `record`, checks the
/// signature and the checksum, renames the `.part` into place, saves the validators,
/// removes the control file and prints the summary line.
///
/// # Errors
/// `Signature` (the `.part` kept, or the device said to hold unverified bytes; its control
/// file removed), `Checksum` (the `.part` kept, or a device's image said to have failed;
/// the control file removed), `LocalIo`
/// for the rename or a validator file.
pub(super) fn finish(s: Box<download::Summary>, out: &mut Output, l: Landing<'_>, record: &mut Record) -> Result<()> {
    let Landing {
        opts,
        plan,
        control,
        special,
        engine,
        engine_note,
        url,
        redirects,
        left_out,
        renamed,
        progress,
    } = l;
    record.fill(url, engine, &s);
    record.redirects = redirects.into();
    record.mirrors = s.mirrors.clone();
    record.mirrors.extend(left_out.iter().cloned());
    // (A `.part` replaced during the run is another's: not its bytes to rename, nor a
    // control file another run saved there to remove; this run's own goes.)
    out.still_ours().inspect_err(|_| {
        if let Some(c) = control {
            resume::remove_if_ours(c, s.control_id);
        }
    })?;
    // Bytes that failed verification stay for inspection, but their control file goes: a
    // later run, with or without `-c`, starts over instead of keeping them (a resume would
    // fetch only what the last save missed and fail the same way again).
    let unresumable = || {
        if let Some(c) = control {
            resume::remove(c);
        }
    };
    // Before the rename: bytes that fail stay in the `.part`. A device is written in
    // place: the bytes that failed are already its contents, and nothing but the exit
    // status keeps a caller off them.
    let name = out.describe();
    let on_device = out.room.is_some();
    let owed = Owed {
        digest: s.digest.as_ref().map(AsRef::as_ref),
        signed: s.signed.as_ref(),
    };
    let notes = (
        match on_device {
            true => format!("{name} now holds unverified bytes: do not switch to it or boot it"),
            false => format!("data kept in {name}, not renamed"),
        },
        match out.room {
            Some(_) => format!("{name} now holds an image that failed verification"),
            None => format!("data kept in {name}; a new run starts over"),
        },
    );
    verify(opts, plan, owed, (&name, notes), record).inspect_err(|e| {
        if matches!(e.kind, Kind::Signature | Kind::Checksum) {
            unresumable();
            if on_device {
                record.device_holds_unverified_bytes = Some(true);
            }
        }
    })?;
    if opts.keep_part {
        // (A delta's staging file: its caller reads the `.part` and its control file.)
        return Ok(());
    }
    if let (Some(name), OutputTarget::Default) = (&s.disposition, &opts.output) {
        let p = in_dir(opts.dir.as_deref(), std::path::PathBuf::from(name));
        Output::check_free(&p, opts.force)?;
        out.final_path = Some(p);
    }
    updates::before_commit(opts, out, s.last_modified.as_deref(), s.bytes)?;
    // (The transfer knows the control file there: the one it resumed from, or its own last
    // save; none for a file that never had one.)
    if let Some(dir) = out.commit(control.filter(|_| s.control_id.is_some()))? {
        match renamed {
            Some(r) => r.add(dir),
            None => output::sync_dir(&dir)?,
        }
    }
    updates::after_landing(opts, s.etag.as_deref())?;
    record.output = out.final_path.as_ref().map(|p| p.display().to_string());
    if opts.verbose > 0 && s.tls != "plain" {
        // Connections to one origin share the run's TLS configuration and its session
        // cache: after the first full handshake, tickets let the next ones resume.
        progress.say(&format!(
            "TLS handshakes: {} full, {} resumed",
            s.tls_full, s.tls_resumed
        ));
    }
    if !opts.quiet {
        say_done(&s, opts, out, record, special, (engine, engine_note));
    }
    Ok(())
}

/// The summary line of a file that landed (`ringdl: done: …`), on stderr.
fn say_done(
    s: &download::Summary,
    opts: &Config,
    out: &Output,
    record: &Record,
    special: Option<&output::Special>,
    (engine, engine_note): (EngineKind, &'static str),
) {
    let secs = s.elapsed.as_secs_f64();
    // The rate of what this run fetched (a resume fetched only the rest), over the time
    // it was served (not the start the server turned away).
    let waited = s.waited.as_secs_f64();
    let served = secs - waited;
    let rate = if served > 0.0 { s.fetched as f64 / served } else { 0.0 };
    eprintln!(
        "ringdl: done: {} bytes{} in {secs:.2} s{}, {}/s, engine {}, I/O {}, {} connection{}{}{}, {}{}{}, {}",
        s.bytes,
        if s.fetched < s.bytes {
            format!(" ({} fetched now, the rest resumed)", s.fetched)
        } else {
            String::new()
        },
        if waited > 0.0 {
            format!(" (the first {waited:.2} s turned away: the server's connections were taken)")
        } else {
            String::new()
        },
        progress::human(rate as u64),
        s.engine_label(engine, engine_note),
        s.io,
        s.connections,
        if s.connections == 1 { "" } else { "s" },
        super::mirrors_served(&record.mirrors),
        match (special, s.capped_at) {
            (Some(sp), _) if !sp.sink => format!(" (in order to {})", sp.what),
            (_, Some(n)) => format!(" (the server allows {n})"),
            _ => String::new(),
        },
        s.tls,
        if s.registered { "" } else { ", unregistered buffers" },
        opts.checksum
            .as_ref()
            .map_or(String::new(), |c| format!(", {} verified", c.name)),
        out.final_path
            .as_ref()
            .map_or_else(|| "standard output".to_owned(), |p| p.display().to_string()),
    );
}
