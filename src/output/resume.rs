//! The control file `FILE.part.ringdl`: what a later `-c` needs to resume `FILE.part`
//! without trusting a single byte it cannot account for.
//!
//! Text, one field per line: `ringdl-control 1`, `url URL`, `total BYTES`,
//! `validator HEX` (optional: ETag or Last-Modified bytes), then `range START END` for each
//! written `[START, END)`. Written atomically: a temporary file, fsync(2), rename(2), so a
//! kill -9 at any moment leaves either the old or the new file, never a torn one. Ranges
//! are recorded only after their writes completed (and, for periodic saves, after an
//! fdatasync of the `.part`), so every range it names is on disk.
//!
//! A short file ([`SHORT`] bytes or less) keeps none: it comes in one request and lands
//! in one write block, and a run stopped before its end leaves a `.part` that the next
//! run starts over (with or without `-c`), never a control file to trust or remove.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const MAGIC: &str = "ringdl-control 1";

/// Files of at most this many bytes keep no control file (docs/guide/resume.md): one
/// write block ([`crate::engine::blocks::WRITE_BLOCK`]), fetched again whole in less time
/// than a control file's create, fsync and rename cost beside every file of a list.
pub const SHORT: u64 = 256 << 10;

/// What a control file records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    /// The URL as given (redirects are followed again on resume).
    pub url: String,
    /// Size of the file in bytes.
    pub total: u64,
    /// ETag or Last-Modified value of the file when the download started.
    pub validator: Option<Vec<u8>>,
    /// Written ranges `[start, end)`, sorted and disjoint.
    pub ranges: Vec<(u64, u64)>,
    /// A block-device output: the device and `--offset` the ranges are relative to
    /// (`target /dev/sdb2 1048576`); a resume elsewhere would put bytes in the wrong place.
    pub target: Option<String>,
}

/// `FILE.part` → `FILE.part.ringdl`.
pub fn path_for(part: &Path) -> PathBuf {
    let mut p = part.as_os_str().to_owned();
    p.push(".ringdl");
    PathBuf::from(p)
}

/// Reads a control file: `Ok(None)` when there is none.
///
/// # Errors
/// A message when the file exists but cannot be read or parsed.
pub fn load(path: &Path) -> Result<Option<State>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    parse(&text).map(Some).map_err(|m| format!("{}: {m}", path.display()))
}

fn parse(text: &str) -> Result<State, String> {
    let mut lines = text.lines();
    if lines.next() != Some(MAGIC) {
        return Err("not a ringdl control file".into());
    }
    let mut st = State::default();
    let mut total = None;
    for line in lines {
        let (key, val) = line.split_once(' ').ok_or_else(|| format!("bad line {line:?}"))?;
        let num = |s: &str| s.parse::<u64>().map_err(|_| format!("bad number in {line:?}"));
        match key {
            "url" => st.url = val.to_owned(),
            "target" => st.target = Some(val.to_owned()),
            "total" => total = Some(num(val)?),
            "validator" => st.validator = Some(unhex(val).ok_or_else(|| format!("bad validator {val:?}"))?),
            "range" => {
                let (a, b) = val.split_once(' ').ok_or_else(|| format!("bad range {line:?}"))?;
                let (a, b) = (num(a)?, num(b)?);
                if a >= b || st.ranges.last().is_some_and(|r| r.1 > a) {
                    return Err(format!("ranges out of order at {line:?}"));
                }
                st.ranges.push((a, b));
            }
            _ => return Err(format!("unknown field {key:?}")),
        }
    }
    st.total = total.ok_or("no total")?;
    if st.ranges.last().is_some_and(|r| r.1 > st.total) {
        return Err("a range past the end of the file".into());
    }
    Ok(st)
}

/// Which file a control file is, as this run wrote it: device, inode, size and
/// modification time (a file rewritten in place since is not the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
}

impl FileId {
    fn of(m: &std::fs::Metadata) -> FileId {
        FileId {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
        }
    }
}

/// Writes `st` atomically to `path` (temporary file, fsync, rename). Returns the written
/// file's [`FileId`], by which [`remove_if_ours`] knows it later.
///
/// # Errors
/// The I/O error, with the path.
pub fn save(path: &Path, st: &State) -> Result<FileId, String> {
    let mut text = format!("{MAGIC}\nurl {}\ntotal {}\n", st.url, st.total);
    if let Some(v) = &st.validator {
        text += &format!("validator {}\n", hex(v));
    }
    if let Some(t) = &st.target {
        text += &format!("target {t}\n");
    }
    for (a, b) in &st.ranges {
        text += &format!("range {a} {b}\n");
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let write = || -> std::io::Result<FileId> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        let id = FileId::of(&f.metadata()?);
        std::fs::rename(&tmp, path)?;
        Ok(id)
    };
    write().map_err(|e| {
        // A full disk (or any failure) must not leave a temporary control file behind.
        let _ = std::fs::remove_file(&tmp);
        format!("control file {}: {e}", path.display())
    })
}

/// Removes the control file (after a complete download, or one whose bytes failed their
/// signature or checksum).
pub fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
}

/// The [`FileId`] of the file at `path` now (`None`: none there).
pub fn id_of(path: &Path) -> Option<FileId> {
    std::fs::symlink_metadata(path).ok().map(|m| FileId::of(&m))
}

/// Removes the control file at `path` only if it is file `id` (the one this run last
/// saved, [`save`]): a `.part` replaced under the run leaves this run's control file
/// naming bytes that no name reaches now, and another run's (saved over it) alone.
pub fn remove_if_ours(path: &Path, id: Option<FileId>) {
    let here = id_of(path);
    if here.is_some() && here == id {
        remove(path);
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.part.ringdl");
        let st = State {
            url: "https://h/f?x=1 2".into(),
            total: 1 << 33,
            validator: Some(b"\"abc\"".to_vec()),
            ranges: vec![(0, 4096), (8192, 1 << 33)],
            target: Some("/dev/loop0 1048576".into()),
        };
        save(&p, &st).unwrap();
        assert_eq!(load(&p).unwrap(), Some(st));
        assert_eq!(load(&dir.path().join("none")).unwrap(), None);
    }

    #[test]
    fn garbage_is_an_error_not_a_resume() {
        for bad in [
            "",
            "ringdl-control 2\ntotal 1\n",
            "ringdl-control 1\nurl x\n",
            "ringdl-control 1\ntotal 10\nrange 5 3\n",
            "ringdl-control 1\ntotal 10\nrange 0 4\nrange 2 6\n",
            "ringdl-control 1\ntotal 10\nrange 0 11\n",
            "ringdl-control 1\ntotal 10\nvalidator 0g\n",
            "ringdl-control 1\ntotal x\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
