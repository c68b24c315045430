//! What the command prepares and finishes for update jobs: the conditional first request
//! (`--etag-compare`, `-N`) and what lands after it (`--etag-save`, the output's time),
//! and block-device outputs (`--offset`, `--control`). docs/guide/updates.md "Updates:
//! signatures, fetch-if-changed, block devices".

use std::path::{Path, PathBuf};

use crate::config::{Config, OutputTarget};
use crate::engine::EngineKind;
use crate::err;
use crate::error::Result;
use crate::output::resume::{self, State};
use crate::output::{Output, device, fresh};

/// Checks the options that belong to one kind of output, and reads the precondition of
/// the first request (`opts.condition`). `device`: the output is a block device.
/// `-N` and `--etag-compare` replace the output when the server sends a changed file
/// (as wget and curl do): they imply `--force`, as [`Config::replace`] does (a list's
/// file already there). The user's own `--force` is read before this.
///
/// # Errors
/// [`crate::error::Kind::Usage`] for `--offset`/`--control` without a block device, `-c`
/// on a device without `--control`, an engine that cannot write a device, a compare file
/// that holds no entity-tag; [`crate::error::Kind::LocalIo`] for a file that cannot be read.
pub(super) fn prepare(opts: &mut Config, final_path: Option<&Path>, device: bool) -> Result<()> {
    if device {
        if opts.resume && opts.control.is_none() {
            return Err(err!(
                Usage,
                "-c on a block device needs --control FILE: a device has no directory for its control file"
            ));
        }
        if let Some(e @ (EngineKind::Buffered | EngineKind::Splice)) = opts.engine {
            return Err(err!(
                Usage,
                "--engine {} writes through the page cache: a block device is written with O_DIRECT (--engine direct)",
                e.name()
            ));
        }
        if opts.control.is_none() && opts.verbose > 0 {
            eprintln!(
                "ringdl: no --control FILE: this download to a block device keeps no control file (it cannot be resumed)"
            );
        }
    } else {
        if opts.offset != 0 {
            return Err(err!(Usage, "--offset is for a block-device output (-o /dev/...)"));
        }
        if opts.control.is_some() {
            return Err(err!(
                Usage,
                "--control is for a block-device output; a file keeps FILE.part.ringdl"
            ));
        }
    }
    opts.condition = match (&opts.etag_compare, opts.timestamping, final_path) {
        (Some(f), _, _) => fresh::etag_condition(f)?.filter(|_| speaks_for(opts, final_path, device, f)),
        (None, true, Some(p)) if !device => fresh::mtime_condition(p)?,
        _ => None,
    };
    if let Some(p) = final_path.filter(|_| opts.condition.is_some() && !device)
        && let Some((now, landed)) = fresh::cut_since_landing(p)
    {
        // A 304 keeps what is there: a file cut or overwritten since it landed is fetched.
        if !opts.quiet {
            eprintln!(
                "ringdl: note: {} is {now} bytes, {landed} when it landed: the first request is unconditional",
                p.display()
            );
        }
        opts.condition = None;
    }
    if opts.etag_compare.is_some() || opts.timestamping || opts.replace {
        opts.force = true;
    }
    if opts.verbose > 0 {
        match opts.condition.as_ref().map(http::Condition::field) {
            Some((name, value)) => eprintln!("ringdl: first request conditional: {name}: {value}"),
            None if opts.etag_compare.is_some() || opts.timestamping => {
                eprintln!("ringdl: nothing to compare with yet: the first request is unconditional")
            }
            None => {}
        }
    }
    Ok(())
}

/// Whether `--etag-compare FILE`'s entity-tag (`f`) may go out as a condition: only while
/// the file it speaks for is there whole — a regular file at `final_path`, not only its
/// `.part` —, since a 304 keeps what is there (`-N` has the same rule from the output's
/// time). Standard output has no such file (a 304 would write nothing): never sent
/// there. A block device is
/// there, but how much of its image is whole cannot be told: with `--checksum` or
/// `--signature` to check, it is fetched unconditionally, and so it is while its
/// `--control` file is there (an image a run left unfinished: said under `-v`). Said on
/// stderr when the tag is left unsent (not with `-q`).
fn speaks_for(opts: &Config, final_path: Option<&Path>, device: bool, f: &Path) -> bool {
    let Some(p) = final_path else {
        if !opts.quiet {
            eprintln!(
                "ringdl: note: --etag-compare {} not sent: standard output keeps no file a 304 would leave; the request is unconditional",
                f.display()
            );
        }
        return false;
    };
    let (there, why) = if device {
        let checks = opts.checksum.is_some() || opts.checksum_file.is_some() || opts.signature.is_some();
        if let Some(c) = opts.control.as_deref().filter(|c| std::fs::symlink_metadata(c).is_ok()) {
            if opts.verbose > 0 {
                eprintln!(
                    "ringdl: note: --etag-compare {} not sent: --control {} is there, the image on {} is unfinished; the request is unconditional",
                    f.display(),
                    c.display(),
                    p.display()
                );
            }
            return false;
        }
        (
            !checks,
            format!(
                "the image on {} is checked (--checksum, --signature) only as it is fetched",
                p.display()
            ),
        )
    } else {
        let there = std::fs::metadata(p).is_ok_and(|m| m.is_file());
        (
            there,
            format!("{} is not there (a 304 would leave no file)", p.display()),
        )
    };
    if !there && !opts.quiet {
        eprintln!(
            "ringdl: note: --etag-compare {} not sent: {why}; the request is unconditional",
            f.display()
        );
    }
    there
}

/// `-c` on a block device: the control file at `--control` `path`, if it describes this
/// URL and an image that fits `room`. Any doubt means starting from zero, said on stderr
/// (not with `-q`).
pub(super) fn device_resume(path: &Path, opts: &Config, room: &device::Room) -> Option<State> {
    macro_rules! say {
        ($($t:tt)*) => {
            if !opts.quiet {
                eprintln!($($t)*);
            }
        };
    }
    let (url, target) = (&opts.url, room.target(opts));
    match resume::load(path) {
        Ok(Some(st)) if st.target.as_ref() != Some(&target) => {
            say!(
                "ringdl: {} was written for {}, not {target} (device and --offset): starting from zero",
                path.display(),
                st.target.as_deref().unwrap_or("a file")
            );
            None
        }
        Ok(Some(st)) if st.url != *url => {
            say!("ringdl: {} belongs to {}: starting from zero", path.display(), st.url);
            None
        }
        Ok(Some(st)) if st.total > room.len => {
            say!(
                "ringdl: {} describes a {}-byte image, larger than the device's room ({} bytes): starting from zero",
                path.display(),
                st.total,
                room.len
            );
            None
        }
        Ok(Some(st)) => Some(st),
        Ok(None) => {
            say!("ringdl: no control file {}: starting from zero", path.display());
            None
        }
        Err(m) => {
            say!("ringdl: {m}: starting from zero");
            None
        }
    }
}

/// A 304 to the conditional first request: says so (unless `-q`); nothing was written.
pub(super) fn say_not_modified(opts: &Config, out: &Output, from: &http::Url) {
    if opts.quiet {
        return;
    }
    let what = match (&out.final_path, &opts.output) {
        (_, OutputTarget::Stdout) | (None, _) => "nothing written".to_owned(),
        (Some(p), _) => format!("{} left as it is", p.display()),
    };
    eprintln!(
        "ringdl: not modified: 304 from {from} ({}); {what}",
        condition_text(opts)
    );
}

/// The condition of the first request as its field (`If-None-Match: "…"`), for messages.
pub(super) fn condition_text(opts: &Config) -> String {
    opts.condition
        .as_ref()
        .map(|c| {
            let (n, v) = c.field();
            format!("{n}: {v}")
        })
        .unwrap_or_default()
}

/// Before the rename: `-N` sets the output's modification time from the server's
/// Last-Modified (a regular file only), and an update job (`-N`, `--etag-save`) records
/// the `size` (bytes) it landed with, which the next run's condition checks
/// ([`fresh::cut_since_landing`]).
///
/// # Errors
/// [`crate::error::Kind::LocalIo`] when futimens(2) fails.
pub(super) fn before_commit(opts: &Config, out: &Output, last_modified: Option<&[u8]>, size: u64) -> Result<()> {
    if (opts.timestamping || opts.etag_save.is_some()) && out.part.is_some() {
        fresh::record_landed_size(&out.fd, size);
    }
    if opts.timestamping
        && out.part.is_some()
        && let Some(t) = last_modified.and_then(http::parse_http_date)
    {
        fresh::set_mtime(&out.fd, t, &out.describe())?;
    }
    Ok(())
}

/// Once the file has landed: `--etag-save` writes its strong ETag (or an empty file when
/// the server sent none).
///
/// # Errors
/// [`crate::error::Kind::LocalIo`] naming the file (the download itself has landed).
pub(super) fn after_landing(opts: &Config, etag: Option<&[u8]>) -> Result<()> {
    let Some(f) = &opts.etag_save else { return Ok(()) };
    if etag.is_none() && opts.verbose > 0 {
        eprintln!("ringdl: the server sent no strong ETag: {} left empty", f.display());
    }
    fresh::save_etag(f, etag).map_err(|mut e| {
        e.msg.push_str(" (the download itself landed)");
        e
    })
}

/// The control file of this run: `FILE.part.ringdl` beside a regular file's `.part`,
/// `--control` for a block device, none for a stream.
pub(super) fn control_path(opts: &Config, final_path: Option<&Path>, device: bool) -> Option<PathBuf> {
    if device {
        return opts.control.clone();
    }
    final_path.map(|p| resume::path_for(&crate::output::part_path(p)))
}
