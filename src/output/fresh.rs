//! Fetch only if changed: the validator files of `--etag-compare` / `--etag-save`
//! (curl's options) and the output's modification time for `-N` (wget's timestamping).
//! The conditional request itself is [`http::Condition`]; this room reads what it is
//! built from and writes what the next run compares.

use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use crate::err;
use crate::error::Result;

/// The `If-None-Match` condition from `--etag-compare FILE`: the entity-tag the file
/// holds (whitespace and one trailing newline trimmed). `Ok(None)` when the file does
/// not exist or is empty — then the request goes unconditional, as curl does.
///
/// # Errors
/// [`crate::error::Kind::LocalIo`] when the file exists but cannot be read;
/// [`crate::error::Kind::Usage`] when it holds something that is not one entity-tag
/// (RFC 9110 §8.8.3), named with the file.
pub fn etag_condition(file: &Path) -> Result<Option<http::Condition>> {
    let text = match std::fs::read(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(err!(LocalIo, "--etag-compare {}: {e}", file.display())),
    };
    let text = String::from_utf8_lossy(&text);
    if text.trim().is_empty() {
        return Ok(None);
    }
    http::Condition::if_none_match(&text)
        .map(Some)
        .map_err(|e| err!(Usage, "--etag-compare {}: {e}", file.display()))
}

/// The `If-Modified-Since` condition for `-N`: the modification time of `output` (whole
/// seconds, UTC), or `None` when it does not exist (then the request goes unconditional).
///
/// # Errors
/// [`crate::error::Kind::LocalIo`] when `output` exists but is not a regular file, or
/// its time is before 1970.
pub fn mtime_condition(output: &Path) -> Result<Option<http::Condition>> {
    let md = match std::fs::metadata(output) {
        Ok(m) => m,
        Err(_) => return Ok(None),
    };
    if !md.is_file() {
        return Err(err!(
            Usage,
            "-N compares the modification time of a regular file: {} is not one",
            output.display()
        ));
    }
    let secs = md
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs())
        .ok_or_else(|| err!(LocalIo, "-N: {} has no modification time after 1970", output.display()))?;
    Ok(Some(http::Condition::IfModifiedSince(secs)))
}

/// Writes `etag` (an entity-tag as the server sent it, or nothing) and a newline to `file`
/// atomically: `FILE.ringdl.tmp`, fsync(2), rename(2). A kill at any moment leaves the old
/// file or the new one. An empty file means "no validator": the next `--etag-compare`
/// sends no condition.
///
/// # Errors
/// [`crate::error::Kind::LocalIo`] naming the file; the temporary file is removed.
pub fn save_etag(file: &Path, etag: Option<&[u8]>) -> Result<()> {
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(".ringdl.tmp");
    let tmp = PathBuf::from(tmp);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        if let Some(tag) = etag {
            f.write_all(tag)?;
            f.write_all(b"\n")?;
        }
        f.sync_all()?;
        std::fs::rename(&tmp, file)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        err!(LocalIo, "--etag-save {}: {e}", file.display())
    })
}

/// The extended attribute (xattr(7), `user.` namespace) in which a file that landed for
/// an update job (`-N`, `--etag-save`) records its size in bytes, decimal: the size a
/// later `-N`/`--etag-compare` checks before it lets a 304 keep the file.
const LANDED_SIZE: &str = "user.ringdl.size";

/// Records `size` (bytes) on the open output as the size it landed with
/// ([`LANDED_SIZE`]), before it is renamed into place. Best effort: a filesystem without
/// user xattrs (EOPNOTSUPP; tmpfs before 6.6, some FUSE), or a full one, records nothing,
/// and the file's size is then not checked before a condition ([`cut_since_landing`]).
/// fsetxattr(2).
pub fn record_landed_size(fd: impl AsFd, size: u64) {
    let _ = rustix::fs::fsetxattr(
        fd,
        LANDED_SIZE,
        size.to_string().as_bytes(),
        rustix::fs::XattrFlags::empty(),
    );
}

/// The output's size now and the size it landed with, when both are known and differ:
/// the file was cut, extended or overwritten since ringdl put it there, and a condition
/// (`If-None-Match`, `If-Modified-Since`) would let a 304 keep it as it is. `None` when
/// they agree or nothing was recorded ([`record_landed_size`]). getxattr(2).
pub fn cut_since_landing(output: &Path) -> Option<(u64, u64)> {
    let md = std::fs::metadata(output).ok().filter(std::fs::Metadata::is_file)?;
    let mut buf = [0u8; 24];
    let n = rustix::fs::getxattr(output, LANDED_SIZE, &mut buf).ok()?;
    let landed: u64 = std::str::from_utf8(&buf[..n]).ok()?.parse().ok()?;
    (landed != md.len()).then_some((md.len(), landed))
}

/// Sets the modification (and access) time of the open output to `secs` since the epoch
/// (`-N`: the server's Last-Modified, as wget does), before it is renamed into place.
///
/// # Errors
/// [`crate::error::Kind::LocalIo`] when futimens(2) fails.
pub fn set_mtime(fd: impl AsFd, secs: u64, what: &str) -> Result<()> {
    let t = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: secs as i64,
            tv_nsec: 0,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: secs as i64,
            tv_nsec: 0,
        },
    };
    rustix::fs::futimens(fd, &t).map_err(|e| err!(LocalIo, "{what}: set the modification time: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ringdl-fresh-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_saved_etag_is_compared_as_saved_and_a_missing_or_empty_file_is_no_condition() {
        let d = dir("etag");
        let f = d.join("etag");
        assert_eq!(etag_condition(&f).unwrap(), None);
        save_etag(&f, Some(b"\"692d-1000\"")).unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"\"692d-1000\"\n");
        assert!(!d.join("etag.ringdl.tmp").exists());
        assert_eq!(
            etag_condition(&f).unwrap(),
            Some(http::Condition::IfNoneMatch("\"692d-1000\"".into()))
        );
        save_etag(&f, None).unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"");
        assert_eq!(etag_condition(&f).unwrap(), None);
        std::fs::write(&f, "not an etag\n").unwrap();
        let e = etag_condition(&f).unwrap_err();
        assert_eq!(e.kind, crate::error::Kind::Usage);
        assert!(e.msg.contains("not an entity-tag"), "{}", e.msg);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn save_into_a_missing_directory_fails_and_leaves_nothing() {
        let d = dir("nodir");
        let f = d.join("missing").join("etag");
        let e = save_etag(&f, Some(b"\"a\"")).unwrap_err();
        assert_eq!(e.kind, crate::error::Kind::LocalIo);
        assert!(e.msg.contains("--etag-save"), "{}", e.msg);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn mtime_round_trips_through_the_condition() {
        let d = dir("mtime");
        let f = d.join("out");
        assert_eq!(mtime_condition(&f).unwrap(), None);
        let file = std::fs::File::create(&f).unwrap();
        set_mtime(&file, 784_111_777, "out").unwrap();
        assert_eq!(
            mtime_condition(&f).unwrap(),
            Some(http::Condition::IfModifiedSince(784_111_777))
        );
        assert_eq!(mtime_condition(&d).unwrap_err().kind, crate::error::Kind::Usage);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
