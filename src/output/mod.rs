//! The output file: O_DIRECT probe, `FILE.part`, exact size, rename when complete.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, CWD, Mode, OFlags, StatxFlags};

use crate::config::OutputTarget;
use crate::err;

pub mod closes;
pub(crate) mod device;
mod dup;
mod lock;
pub use lock::{PartLock, lock_part, lock_part_as};
pub(crate) mod fresh;
pub mod image;
mod local;
pub(crate) use local::is_full;
pub(crate) mod resume;
mod special;
pub(crate) mod syncer;
pub(crate) mod verify;
use crate::error::Result;
use special::open_waiting;
pub use special::{Special, special};

/// Where body bytes land, and how they must be written.
pub struct Output {
    /// The open `.part` file, or a duplicate of standard output.
    pub fd: OwnedFd,
    /// Opened with O_DIRECT: every write is aligned in memory, offset and length to `align`.
    pub direct: bool,
    /// Offset and length alignment in bytes for O_DIRECT writes (a power of two ≥ 4096);
    /// also the granularity of segment boundaries.
    pub align: u64,
    /// Standard output: writes go in order at the current position, one at a time.
    pub sequential: bool,
    /// `FILE.part`, renamed to `final_path` when complete (None for stdout).
    pub part: Option<PathBuf>,
    /// The name the user asked for (None for stdout).
    pub final_path: Option<PathBuf>,
    force: bool,
    /// Not a regular file: what it is, for messages ("the FIFO out", "standard output").
    what: Option<String>,
    /// A block device: where the image goes on it (`--offset`, room, logical block).
    pub room: Option<device::Room>,
    /// Another reactor's duplicate of a regular file's output ([`Output::part_of`]).
    of_part: bool,
    /// The `.part`'s device and inode as this run opened it (statx(2) of the descriptor):
    /// [`Output::owns_part`] compares the name's with it (one statat(2)). `None` when not
    /// known: read by fstat(2) then.
    id: Option<FileKey>,
    /// The description reads as well as writes (`O_RDWR`: the read-back goes through it).
    /// `None`: not known, asked by fcntl(2) F_GETFL.
    reads: Option<bool>,
    /// When it was opened, in the order of this process's outputs (a duplicate keeps its
    /// original's): which of several descriptors saw a file system's errors longest
    /// ([`syncer`]).
    pub(crate) opened: u64,
    /// How far this run's fallocate(2) and writes reach into a `.part` that was empty when
    /// it opened it (created, or started over: its control file removed then), in bytes,
    /// shared by every duplicate of the descriptor ([`Output::grows_to`]); [`UNKNOWN`] for
    /// a `.part` kept (resumed), a stream or a device.
    grown: Arc<AtomicU64>,
}

/// The next [`Output::opened`] number.
fn next_opened() -> u64 {
    static OPENED: AtomicU64 = AtomicU64::new(0);
    OPENED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// [`Output::grown`]'s value when the output did not start empty.
const UNKNOWN: u64 = u64::MAX;

/// A new [`Output::grown`]: 0 for a `.part` that starts empty, else [`UNKNOWN`].
fn grown(empty: bool) -> Arc<AtomicU64> {
    Arc::new(AtomicU64::new(if empty { 0 } else { UNKNOWN }))
}

/// A file's identity: its device and inode numbers (stat(2) `st_dev`, `st_ino`).
pub type FileKey = (u64, u64);

/// What one lstat(2) of an output's final name found, before anything else looks at it.
/// [`Seen::Nothing`] answers every question asked of the name before the download — not
/// a FIFO, a device, a descriptor link, a directory or a file already there — so those
/// checks (a readlink(2) and stat(2) each) are skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// No entry has the name (ENOENT): no file, no symbolic link, not even a dangling one.
    Nothing,
    /// Something has the name, or lstat(2) failed otherwise: every check looks.
    Something,
}

impl Seen {
    /// One lstat(2) of `path` (`None`, standard output: [`Seen::Something`]).
    pub fn of(path: Option<&Path>) -> Seen {
        match path.map(|p| rustix::fs::statat(CWD, p, AtFlags::SYMLINK_NOFOLLOW)) {
            Some(Err(rustix::io::Errno::NOENT)) => Seen::Nothing,
            _ => Seen::Something,
        }
    }
}

/// `FILE` → `FILE.part`, where the bytes land until the download is complete.
pub fn part_path(final_path: &Path) -> PathBuf {
    let mut part = final_path.as_os_str().to_owned();
    part.push(".part");
    PathBuf::from(part)
}

/// The path the download ends at: `-o FILE`, or the URL's sanitized last path segment.
pub fn final_path(target: &OutputTarget, url: &http::Url) -> Option<PathBuf> {
    match target {
        OutputTarget::Stdout => None,
        OutputTarget::File(p) => Some(p.clone()),
        OutputTarget::Default => Some(PathBuf::from(fit_name(
            url.file_name_decoded().unwrap_or_else(|| "index.html".to_owned()),
        ))),
    }
}

/// Longest file name ringdl makes from a URL or Content-Disposition, bytes: NAME_MAX (255)
/// less the longest suffix it adds (`.part.ringdl.tmp`, 16 bytes).
pub const MAX_NAME: usize = 255 - ".part.ringdl.tmp".len();

/// Shortens a file name to at most [`MAX_NAME`] bytes, keeping its extension (up to 16
/// bytes after the last dot) and cutting on a character boundary. Shorter names come
/// back unchanged.
pub fn fit_name(name: String) -> String {
    if name.len() <= MAX_NAME {
        return name;
    }
    let ext = name
        .rfind('.')
        .filter(|&i| i > 0 && name.len() - i <= 16)
        .map_or("", |i| &name[i..]);
    let mut keep = MAX_NAME - ext.len();
    while !name.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}{ext}", &name[..keep])
}

/// Whether `path` (not followed) is the inode open as `fd` (whose identity is `known`
/// when it was read before: then not asked again), or why that cannot be told (the error
/// of fstat(2) or statat(2): ENOENT when nothing has the name).
fn inode_at(fd: &OwnedFd, known: Option<FileKey>, path: &Path) -> rustix::io::Result<bool> {
    let a = match known {
        Some(k) => k,
        None => {
            let st = rustix::fs::fstat(fd)?;
            (st.st_dev, st.st_ino)
        }
    };
    let b = rustix::fs::statat(CWD, path, AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(a == (b.st_dev, b.st_ino))
}

impl Output {
    /// Checks that the final name is free (unless `force`) before any network traffic.
    ///
    /// # Errors
    /// [`crate::error::Kind::LocalIo`] when the file exists and `force` is off, or when it
    /// is a directory or not a regular file (whatever `force`).
    pub fn check_free(path: &Path, force: bool) -> Result<()> {
        if let Some(sp) = special(path) {
            return Err(err!(
                LocalIo,
                "{} is not a regular file ({}): ringdl writes through it but never replaces it, not even with --force",
                path.display(),
                sp.what
            ));
        }
        // (--force cannot help: the rename onto a directory fails, after the whole body.)
        if std::fs::metadata(path).is_ok_and(|md| md.is_dir()) {
            return Err(err!(
                LocalIo,
                "{} is a directory (name a file in it: -o {}/NAME)",
                path.display(),
                path.display()
            ));
        }
        if !force && std::fs::symlink_metadata(path).is_ok() {
            return Err(err!(LocalIo, "{} exists (use --force to replace it)", path.display()));
        }
        Ok(())
    }

    /// Opens the output: a regular file as `PATH.part`, with O_DIRECT when `direct` is asked
    /// and the filesystem takes it (statx STATX_DIOALIGN, Linux 6.1+, gives the alignment;
    /// open(2) EINVAL on ramfs and old tmpfs), else through the page cache — `Output::direct`
    /// says which, and [`crate::engine::select::select`] decides the engine from it.
    ///
    /// `path` None is standard output (`-o -`). A FIFO with no reader yet is waited for (see [`open_waiting`]); `signals` is the
    /// signalfd that SIGINT/SIGTERM arrive on meanwhile (they are blocked); `None` (a
    /// list's file): not waited for, an error. A `.part` that
    /// is not kept (`keep` false) is started over. `tell`: whether that is said (not with
    /// `-c`, whose refusal to resume was said, nor `-q`), and whether the wait for a FIFO's
    /// reader is (not with `-q`). `lock`: the `.part`'s lock ([`lock_part_as`]), whose
    /// descriptor the output takes: the `.part` is not opened again, nor its name checked
    /// again (the lock did that).
    ///
    /// # Errors
    /// [`crate::error::Kind::LocalIo`] when the `.part` file cannot be created;
    /// [`crate::error::Kind::Interrupted`] on SIGINT/SIGTERM while a FIFO has no reader.
    pub fn open(
        path: Option<PathBuf>,
        direct: bool,
        special: Option<&Special>,
        (force, keep): (bool, bool),
        tell: (bool, bool),
        signals: Option<BorrowedFd<'_>>,
        lock: Option<&mut PartLock>,
    ) -> Result<Output> {
        let stream = match (&path, special) {
            (None, _) => Some(Special {
                what: "standard output".to_owned(),
                sink: false,
                fd: Some(1),
            }),
            (Some(_), Some(sp)) => Some(sp.clone()),
            (Some(_), None) => None,
        };
        if let Some(sp) = stream {
            let dup = |fd: std::os::fd::BorrowedFd<'_>| {
                fd.try_clone_to_owned().map_err(|e| err!(LocalIo, "{}: {e}", sp.what))
            };
            let fd = match (sp.fd, &path) {
                (Some(1), _) => dup(std::io::stdout().as_fd())?,
                (Some(2), _) => dup(std::io::stderr().as_fd())?,
                (_, Some(p)) => {
                    // Another descriptor is opened anew through its link; a regular file
                    // behind it is appended to, never overwritten from its start.
                    let mut flags = OFlags::WRONLY | OFlags::CLOEXEC;
                    if sp.fd.is_some() && std::fs::metadata(p).is_ok_and(|m| m.is_file()) {
                        flags |= OFlags::APPEND;
                    }
                    open_waiting(p, flags, (&sp.what, tell.1), signals)?
                }
                (_, None) => unreachable!("only standard output has no path"),
            };
            return Ok(Output {
                fd,
                direct: false,
                align: 4096,
                // A sink takes writes at any offset; everything else only in order.
                sequential: !sp.sink,
                part: None,
                final_path: path,
                force,
                what: Some(sp.what),
                room: None,
                of_part: false,
                id: None,
                reads: None,
                opened: next_opened(),
                grown: grown(false),
            });
        }
        let final_path = path.expect("a regular file has a path");
        if let Some(lock) = lock.filter(|l| l.part == part_path(&final_path) && l.fd.is_some()) {
            return Output::onto(lock, final_path, force, keep, tell.0);
        }
        Output::check_free(&final_path, force)?;
        let part = part_path(&final_path);
        if !keep {
            // (lock_part may have just created it empty.)
            if tell.0 && std::fs::symlink_metadata(&part).is_ok_and(|m| m.len() > 0) {
                eprintln!("ringdl: {} exists: starting over", part.display());
            }
            // A control file must never outlive the bytes it describes: gone before the
            // truncate, so a crash in between leaves nothing a later -c could trust.
            crate::output::resume::remove(&crate::output::resume::path_for(&part));
        }
        let mut flags = OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        if !keep {
            flags |= OFlags::TRUNC;
        }
        let mode = Mode::from_raw_mode(0o644);
        let create_err = |e| err!(LocalIo, "cannot create {}: {e}", part.display());
        let (fd, direct, align, _) = open_part(&part, flags, mode, direct).map_err(create_err)?;
        Ok(Output {
            fd,
            direct,
            align,
            sequential: false,
            part: Some(part),
            final_path: Some(final_path),
            force,
            what: None,
            room: None,
            of_part: false,
            id: None,
            reads: Some(false),
            opened: next_opened(),
            grown: grown(!keep),
        })
    }

    /// The output on the descriptor `lock` holds (its one open of the `.part`, O_DIRECT
    /// as it was opened with: [`lock_part_as`]), taken from it: no other open, no dup(2).
    /// A `.part` that is not kept (`keep` false) is started over: its control file removed
    /// first (it must never outlive the bytes it describes), then ftruncate(2) to 0 when
    /// the lock did not create it empty; `tell`: whether that is said.
    ///
    /// # Errors
    /// [`crate::error::Kind::LocalIo`] when ftruncate(2) fails.
    fn onto(lock: &mut PartLock, final_path: PathBuf, force: bool, keep: bool, tell: bool) -> Result<Output> {
        if !keep {
            if tell && lock.len > 0 {
                eprintln!("ringdl: {} exists: starting over", lock.part.display());
            }
            // (One unlink(2), ENOENT but for a control file left beside a `.part` that is
            // gone or starts over.)
            crate::output::resume::remove(&crate::output::resume::path_for(&lock.part));
        }
        // (A size not read — statx(2) refused — counts as bytes there: the output counts
        // on a `.part` it starts over being empty, and skips the final ftruncate when its
        // own writes reach the size exactly.)
        if !keep && (lock.len > 0 || lock.id.is_none()) {
            let fd = lock.fd.as_ref().expect("checked by the caller");
            rustix::fs::ftruncate(fd, 0)
                .map_err(|e| err!(LocalIo, "cannot start {} over: ftruncate: {e}", lock.part.display()))?;
        }
        let fd = lock.fd.take().expect("checked by the caller");
        Ok(Output {
            fd,
            direct: lock.direct,
            align: lock.align,
            sequential: false,
            part: Some(lock.part.clone()),
            final_path: Some(final_path),
            force,
            what: None,
            room: None,
            of_part: false,
            id: lock.id,
            reads: Some(lock.reads),
            opened: lock.opened,
            grown: grown(!keep),
        })
    }

    /// Opens a block device for an image at `offset` ([`device::open`]): O_DIRECT at its
    /// logical block size, positional writes over any number of connections, no `.part`.
    ///
    /// # Errors
    /// As [`device::open`].
    pub fn open_device(path: PathBuf, offset: u64) -> Result<Output> {
        let (fd, room) = device::open(&path, offset)?;
        Ok(Output {
            fd,
            direct: true,
            align: room.block,
            sequential: false,
            part: None,
            what: Some(format!("the block device {}", path.display())),
            final_path: Some(path),
            force: false,
            room: Some(room),
            of_part: false,
            id: None,
            reads: None,
            opened: next_opened(),
            grown: grown(false),
        })
    }

    /// What a `--checksum` reads back: the `.part`, or the device (from the image's
    /// offset), and that offset in bytes; `None` for a stream.
    pub fn read_back(&self) -> Option<(&Path, u64)> {
        match (&self.part, &self.room, &self.final_path) {
            (Some(p), _, _) => Some((p, 0)),
            (None, Some(r), Some(dev)) => Some((dev, r.base)),
            _ => None,
        }
    }

    /// Sets the exact size, `size` bytes, once every byte of the file has landed: the last
    /// O_DIRECT block was padded to the alignment, or the `.part` held more before.
    /// Nothing to do (no ftruncate(2)) when it is `size` already: it started empty and the
    /// furthest this run's fallocate(2) or writes reached is `size` ([`Output::grows_to`]).
    ///
    /// # Errors
    /// [`crate::error::Kind::LocalIo`] when ftruncate(2) fails.
    pub fn truncate(&self, size: u64) -> Result<()> {
        if self.grown.load(Ordering::Relaxed) == size {
            return Ok(());
        }
        rustix::fs::ftruncate(&self.fd, size)
            .map_err(|e| err!(LocalIo, "{}: ftruncate to {size} bytes: {e}", self.describe()))
    }

    /// Whether the output's file system is a local disk one ([`local::LOCAL_DISK`]:
    /// fstatfs(2) once per device), where fallocate(2) waits on no server or daemon.
    pub(crate) fn on_local_disk(&self) -> bool {
        match self.id {
            Some((dev, _)) => local::on_local_disk(self.fd.as_fd(), dev),
            None => local::is_local_disk(self.fd.as_fd()),
        }
    }

    /// Counts a fallocate(2) or a write of this output (any duplicate's) that reaches `end`
    /// bytes into the file, at the time it is asked for (a write that fails still counts:
    /// [`Output::truncate`] then truncates). Nothing for an output that did not start empty.
    pub(crate) fn grows_to(&self, end: u64) {
        if self.grown.load(Ordering::Relaxed) != UNKNOWN {
            self.grown.fetch_max(end, Ordering::Relaxed);
        }
    }

    /// The identity of the control file at `control` now ([`resume::id_of`], an lstat(2));
    /// `None` when there is none. Not asked beside a `.part` that started empty and holds
    /// nothing yet ([`Output::grows_to`]): its control file was removed when it opened, and
    /// a save names landed bytes.
    pub(crate) fn control_id(&self, control: Option<&Path>) -> Option<resume::FileId> {
        control
            .filter(|_| self.grown.load(Ordering::Relaxed) != 0)
            .and_then(resume::id_of)
    }

    /// Renames `.part` to the final name; the caller has set the size and fsync'd the data.
    /// Without `--force` an existing final name is never replaced (renameat2 RENAME_NOREPLACE).
    /// Returns the directory that holds the new entry: the rename is durable once it is
    /// fsync'd ([`sync_dir`]; the caller may do that for several files at once).
    ///
    /// `control`: the control file when one is there (resumed from, or saved by
    /// this run): it is removed first, so no crash can leave one beside a finished file.
    /// `None` when none was made (a short file: [`crate::output::resume`]): no unlink(2).
    ///
    /// # Errors
    /// [`crate::error::Kind::LocalIo`] when rename fails; the `.part` stays.
    pub fn commit(&self, control: Option<&Path>) -> Result<Option<PathBuf>> {
        // The data is complete and synced: the control file goes first (a block device's
        // `--control` too, which has no rename after it).
        if let Some(c) = control {
            crate::output::resume::remove(c);
        }
        let (Some(part), Some(final_path)) = (&self.part, &self.final_path) else {
            return Ok(None);
        };
        let flags = if self.force {
            rustix::fs::RenameFlags::empty()
        } else {
            rustix::fs::RenameFlags::NOREPLACE
        };
        match rustix::fs::renameat_with(CWD, part, CWD, final_path, flags) {
            Ok(()) => Ok(Some(
                final_path
                    .parent()
                    .filter(|d| !d.as_os_str().is_empty())
                    .unwrap_or(Path::new("."))
                    .to_path_buf(),
            )),
            Err(rustix::io::Errno::EXIST) => Err(err!(
                LocalIo,
                "{} appeared during the download (use --force); data kept in {}",
                final_path.display(),
                part.display()
            )),
            Err(e) => Err(err!(
                LocalIo,
                "rename {} to {}: {e}",
                part.display(),
                final_path.display()
            )),
        }
    }

    /// Removes an empty `.part` (and its control file) left by a download that wrote
    /// nothing (a 404, say).
    pub fn discard_if_empty(&self) {
        if rustix::fs::fstat(&self.fd).is_ok_and(|st| st.st_size == 0) {
            self.remove_part();
        }
    }

    /// Whether `path` still names this output's `.part` (the same inode: a `.part`
    /// removed and made again by another run while this one ran is not ours); true for
    /// an output with no `.part` (a device).
    pub fn owns_part(&self) -> bool {
        self.part
            .as_ref()
            .is_none_or(|part| inode_at(&self.fd, self.id, part).unwrap_or(false))
    }

    /// [`Output::owns_part`], as the error a finished transfer ends with when not.
    ///
    /// # Errors
    /// [`crate::error::Kind::LocalIo`]: the `.part` was replaced during the download.
    pub fn still_ours(&self) -> Result<()> {
        if self.owns_part() {
            return Ok(());
        }
        Err(err!(
            LocalIo,
            "{} was replaced during the download (removed, renamed, or made again by another run): this \
             run's bytes are no longer at that name; nothing renamed",
            self.describe()
        ))
    }

    /// Removes the `.part` and its control file: nothing of value landed.
    pub fn remove_part(&self) {
        // Only while the path still names our (locked) inode: once it is unlinked, another
        // run may already own a new `.part` and control file there. The control file goes
        // first, so it never outlives the bytes it describes.
        if let Some(part) = &self.part
            && inode_at(&self.fd, self.id, part).unwrap_or(false)
        {
            crate::output::resume::remove(&crate::output::resume::path_for(part));
            let _ = std::fs::remove_file(part);
        }
    }

    /// What a full disk's message adds (ENOSPC from a write or fallocate(2)): the bytes
    /// still to land, `need` (the file's size less what landed, counted once the writes
    /// in flight came back: `event::ends::finish`), the bytes free to an unprivileged writer on the output's file
    /// system (fstatvfs(3): `f_bavail · f_frsize`), and that space must be freed first.
    pub fn space_hint(&self, need: u64) -> String {
        match rustix::fs::fstatvfs(&self.fd) {
            Ok(v) => format!(
                "; {need} bytes still to land, {} free on its file system: free space first",
                v.f_bavail.saturating_mul(v.f_frsize)
            ),
            Err(_) => format!("; {need} bytes still to land: free space first"),
        }
    }

    /// The output for messages: the `.part` path or "standard output".
    pub fn describe(&self) -> String {
        match (&self.part, &self.what) {
            (Some(p), _) => p.display().to_string(),
            (None, Some(w)) => w.clone(),
            (None, None) => "standard output".to_owned(),
        }
    }
}

/// Opens `part` with `flags` and `mode`, with O_DIRECT when `direct` is asked and the
/// filesystem takes it (open(2) EINVAL on ramfs and old tmpfs; statx(2) STATX_DIOALIGN 0:
/// then cleared by fcntl(2) F_SETFL). Returns the descriptor, whether it is O_DIRECT, its
/// alignment in bytes, and what the one statx(2) of it read ([`Described`]; `None` when it
/// failed).
pub(super) fn open_part(part: &Path, flags: OFlags, mode: Mode, direct: bool) -> rustix::io::Result<Opened> {
    let (fd, direct) = match direct.then(|| rustix::fs::open(part, flags | OFlags::DIRECT, mode)) {
        Some(Ok(fd)) => (fd, true),
        Some(Err(rustix::io::Errno::INVAL)) | None => (rustix::fs::open(part, flags, mode)?, false),
        Some(Err(e)) => return Err(e),
    };
    let d = described(&fd).ok();
    // O_DIRECT only with a known alignment.
    match d.as_ref().map(|d| d.align) {
        _ if !direct => Ok((fd, false, 4096, d)),
        Some(Some(align)) => Ok((fd, true, align, d)),
        None => Ok((fd, true, 4096, d)),
        Some(None) => {
            let fl = rustix::fs::fcntl_getfl(&fd)?;
            rustix::fs::fcntl_setfl(&fd, fl - OFlags::DIRECT)?;
            Ok((fd, false, 4096, d))
        }
    }
}

/// What [`open_part`] gives: the descriptor, O_DIRECT, the alignment in bytes, its statx.
type Opened = (OwnedFd, bool, u64, Option<Described>);

/// What one statx(2) of an open `.part` tells: its O_DIRECT alignment in bytes (`None`
/// when the filesystem reports O_DIRECT unsupported, stx_dio_offset_align = 0; kernels
/// before 6.1 do not report STATX_DIOALIGN: 4096 is assumed), its identity and its size
/// in bytes.
pub(super) struct Described {
    pub(super) align: Option<u64>,
    pub(super) key: FileKey,
    pub(super) len: u64,
}

/// statx(2) of `fd` (STATX_DIOALIGN, Linux 6.1, with the inode and size).
pub(super) fn described(fd: &OwnedFd) -> rustix::io::Result<Described> {
    let st = rustix::fs::statx(
        fd.as_fd(),
        "",
        AtFlags::EMPTY_PATH,
        StatxFlags::DIOALIGN | StatxFlags::INO | StatxFlags::SIZE,
    )?;
    let align = if st.stx_mask & StatxFlags::DIOALIGN.bits() == 0 {
        Some(4096)
    } else if st.stx_dio_offset_align == 0 || st.stx_dio_mem_align == 0 {
        None
    } else {
        let a = u64::from(st.stx_dio_offset_align.max(st.stx_dio_mem_align)).max(4096);
        a.is_power_of_two().then_some(a)
    };
    let dev = rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor);
    Ok(Described {
        align,
        key: (dev, st.stx_ino),
        len: st.stx_size,
    })
}

/// fsync(2) of directory `dir`: the entries renamed or created in it (rename(2),
/// mkdir(2)) are then durable.
///
/// # Errors
/// `LocalIo` when fsync(2) fails (EIO: what the filesystem had not written may be lost).
/// A directory that cannot be opened (gone, unmounted) has nothing of ours left to sync:
/// `Ok` after a warning on standard error.
pub fn sync_dir(dir: &Path) -> Result<()> {
    match rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()) {
        Ok(d) => rustix::fs::fsync(&d).map_err(|e| {
            err!(
                LocalIo,
                "fsync of directory {}: {e} (what was renamed into it may not survive a crash)",
                dir.display()
            )
        }),
        Err(e) => {
            eprintln!(
                "ringdl: warning: directory {} cannot be synced: {e} (gone or unmounted?)",
                dir.display()
            );
            Ok(())
        }
    }
}

/// `mkdir -p dir`, durable: the directories it creates are made with mkdir(2) and the
/// directory holding each new one is fsync'd, so that a crash cannot take a new directory
/// (and the file later renamed into it) away. (The deepest one is synced after the rename
/// into it.)
///
/// # Errors
/// `LocalIo` naming the directory, for mkdir(2) or fsync(2).
pub fn create_dirs(dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    let mut d = dir;
    while !d.as_os_str().is_empty() && std::fs::symlink_metadata(d).is_err() {
        missing.push(d);
        match d.parent() {
            Some(p) => d = p,
            None => break,
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| err!(LocalIo, "creating {}: {e}", dir.display()))?;
    // The parent of each new directory, from the top one's (it existed) down.
    for new in missing.iter().rev() {
        let parent = new
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        sync_dir(parent)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_name_keeps_short_names_and_the_extension_on_a_char_boundary() {
        assert_eq!(fit_name("a.iso".into()), "a.iso");
        let n = fit_name(format!("{}.tar.gz", "x".repeat(400)));
        assert_eq!(n.len(), MAX_NAME);
        assert!(n.ends_with(".gz") && n.starts_with("xxx"));
        // 'é' is two bytes: the cut never splits it.
        let n = fit_name(format!("{}.bin", "é".repeat(200)));
        assert!(n.len() <= MAX_NAME && n.ends_with(".bin"), "{n}");
        // No extension worth keeping (the "extension" is longer than 16 bytes).
        let n = fit_name(format!("a.{}", "y".repeat(300)));
        assert_eq!(n.len(), MAX_NAME);
    }
}
