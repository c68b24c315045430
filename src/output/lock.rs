//! The lock on `FILE.part` ([`lock_part`]): taken before anything reads the control file
//! or touches the `.part`, held by the one open file description every write, the
//! read-back and the io_uring requests of the run go through.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use super::{FileKey, Output, Seen, described, inode_at, open_part, part_path, special};
use crate::err;
use crate::error::Result;

/// An exclusive flock(2) on `FILE.part`, held for the whole run and until the kernel has
/// let go of the output (its descriptor is the output's: [`Output::open`]): a second ringdl on the same output stops
/// (within [`LOCK_WAIT`]) instead of truncating the bytes the first is writing (and the
/// first would then rename a file full of zeros).
pub struct PartLock {
    /// The `.part`'s one open (read-write where the user may read it), until the output
    /// takes it ([`Output::open`]); O_DIRECT when [`lock_part_as`] was asked for it.
    pub(super) fd: Option<OwnedFd>,
    pub(super) part: PathBuf,
    /// This run created the `.part` (empty): it removes it if it stops before any byte.
    pub created: bool,
    /// How the descriptor was opened: O_DIRECT, its alignment in bytes, and whether it
    /// reads as well (`O_RDWR`).
    pub(super) direct: bool,
    pub(super) align: u64,
    pub(super) reads: bool,
    /// The `.part`'s identity and its size in bytes when the lock was taken (`None`: not
    /// read, by [`lock_part`]).
    pub(super) id: Option<FileKey>,
    pub(super) len: u64,
    /// Its place in the order of the process's outputs ([`Output::opened`]).
    pub(super) opened: u64,
}

impl PartLock {
    /// Removes the `.part` this run created, if it is still the locked inode and empty
    /// (while the lock holds its descriptor: once the output took it, the output's
    /// [`Output::discard_if_empty`] does this).
    pub fn remove_if_unused(&self) {
        let Some(fd) = &self.fd else { return };
        if self.created
            && rustix::fs::fstat(fd).is_ok_and(|st| st.st_size == 0)
            && inode_at(fd, self.id, &self.part).unwrap_or(false)
        {
            let _ = std::fs::remove_file(&self.part);
        }
    }

    /// The lock, its `.part` watched for the last close ([`super::closes::watch`]).
    fn watched(self) -> Self {
        super::closes::watch(&self.part, self.id);
        self
    }
}

impl Output {
    /// Whether the `.part`'s name is known to hold another file now: removed (ENOENT), or
    /// another inode. Not on any other error of statat(2) (EIO, ESTALE: nothing known).
    pub fn part_replaced(&self) -> bool {
        let Some(part) = &self.part else { return false };
        matches!(
            inode_at(&self.fd, self.id, part),
            Ok(false) | Err(rustix::io::Errno::NOENT)
        )
    }

    /// The output's descriptor when its description reads as well (the lock's, taken by
    /// [`Output::open`]:
    /// the `.part`'s read-back goes through it); `None` for one opened write-only.
    pub fn readable(&self) -> Option<BorrowedFd<'_>> {
        let reads = match self.reads {
            Some(r) => r,
            None => rustix::fs::fcntl_getfl(&self.fd).ok()? & OFlags::RWMODE == OFlags::RDWR,
        };
        reads.then(|| self.fd.as_fd())
    }

    /// What a read-back that opens [`Output::read_back`]'s path anew must find there: this
    /// output's file type and `(st_dev, st_ino)` (one fstat(2) of its descriptor: the
    /// `.part` it wrote, or the device). `None` when fstat(2) fails.
    pub fn identity(&self) -> Option<crate::output::verify::Expect> {
        let st = rustix::fs::fstat(&self.fd).ok()?;
        let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
        Some(crate::output::verify::Expect::Same((st.st_dev, st.st_ino), kind))
    }
}

/// Takes the lock on `FILE.part` (created empty if absent) before anything reads the
/// control file or touches the `.part`. `None` for outputs that have no `.part`: standard
/// output, an existing device, FIFO or socket, a directory (refused later by
/// [`Output::open`]). On a filesystem without locks (ENOLCK, EOPNOTSUPP) the run goes on
/// unprotected.
///
/// # Errors
/// [`crate::error::Kind::LocalIo`]: `FILE` exists (without `force`; with `resume` the
/// message says a finished download looks complete), the `.part` cannot be created, or
/// another process holds the lock (EWOULDBLOCK, still after [`LOCK_WAIT`]).
pub fn lock_part(final_path: Option<&Path>, force: bool, resume: bool) -> Result<Option<PartLock>> {
    lock_part_as(final_path, (force, resume), Seen::Something, false)
}

/// [`lock_part`], the `.part` opened once for the whole download: O_DIRECT when `direct`
/// is asked and the filesystem takes it (the descriptor [`Output::open`] then takes, with
/// its alignment from statx(2) STATX_DIOALIGN). `seen`: what one lstat(2) of the final
/// name found just before ([`Seen::Nothing`]: the checks of the name are skipped the
/// first time; they are made if the lock has to be asked for again).
///
/// # Errors
/// As [`lock_part`].
pub fn lock_part_as(
    final_path: Option<&Path>,
    (force, resume): (bool, bool),
    seen: Seen,
    direct: bool,
) -> Result<Option<PartLock>> {
    let Some(path) = final_path else { return Ok(None) };
    if seen == Seen::Something
        && (special(path).is_some() || std::fs::metadata(path).is_ok_and(|md| md.file_type().is_dir()))
    {
        return Ok(None);
    }
    let part = part_path(path);
    // (Read and write: the read-back goes through this description too.)
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let mode = Mode::from_raw_mode(0o644);
    // A lock on an inode that another run unlinked or renamed meanwhile protects nothing:
    // check that the path still names it, else start again (from the checks: the other
    // run may have finished the file while this one waited for its lock).
    for round in 0..8 {
        if round > 0 || seen == Seen::Something {
            if resume && !force && std::fs::symlink_metadata(path).is_ok() && std::fs::symlink_metadata(&part).is_err()
            {
                return Err(err!(
                    LocalIo,
                    "{} exists and there is no .part to resume: it looks complete (use --force to download it again)",
                    path.display()
                ));
            }
            Output::check_free(path, force)?;
        }
        let mut lock = open_locked(&part, flags, mode, direct)?;
        let waited = match flock_waiting(lock.fd.as_ref().expect("just opened")) {
            Ok(w) => w,
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(err!(
                    LocalIo,
                    "{} is being written by another ringdl (it holds a lock on it)",
                    part.display()
                ));
            }
            Err(rustix::io::Errno::NOLCK | rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOSYS) => {
                return Ok(Some(lock.watched()));
            }
            Err(e) => {
                lock.remove_if_unused();
                return Err(err!(LocalIo, "flock {}: {e}", part.display()));
            }
        };
        let fd = lock.fd.as_ref().expect("just opened");
        if waited {
            // (The name may have been given to another file meanwhile; the size too.)
            match described(fd) {
                Ok(d) => (lock.id, lock.len) = (Some(d.key), d.len),
                Err(_) => lock.id = None,
            }
        }
        if inode_at(fd, lock.id, &part).unwrap_or(false) {
            return Ok(Some(lock.watched()));
        }
    }
    Err(err!(
        LocalIo,
        "{} keeps being replaced by another process",
        part.display()
    ))
}

/// Why `part` could not be opened: a symbolic link there (the ELOOP of `O_NOFOLLOW`,
/// open(2)) is said as such, not as a loop.
fn open_failed(part: &Path, e: rustix::io::Errno) -> crate::error::Error {
    if e == rustix::io::Errno::LOOP && std::fs::symlink_metadata(part).is_ok_and(|m| m.file_type().is_symlink()) {
        return err!(
            LocalIo,
            "cannot open {}: it is a symbolic link, and ringdl never writes a .part through one (remove it)",
            part.display()
        );
    }
    err!(LocalIo, "cannot open {}: {e}", part.display())
}

/// Opens (or creates, O_EXCL first: `created` says which) `part` for [`lock_part_as`]:
/// read-write where the user may read it, else write-only; O_DIRECT as [`open_part`].
fn open_locked(part: &Path, flags: OFlags, mode: Mode, direct: bool) -> Result<PartLock> {
    let mut reads = true;
    let (opened, created) = match open_part(part, flags | OFlags::EXCL, mode, direct) {
        Ok(o) => (o, true),
        Err(rustix::io::Errno::EXIST) => (
            // (A `.part` this user may write but not read: opened write-only; a
            // `--checksum` read-back of it then fails as it did before.)
            open_part(part, flags, mode, direct)
                .or_else(|e| match e {
                    rustix::io::Errno::ACCESS => {
                        reads = false;
                        open_part(part, (flags - OFlags::RDWR) | OFlags::WRONLY, mode, direct)
                    }
                    e => Err(e),
                })
                .map_err(|e| open_failed(part, e))?,
            false,
        ),
        Err(e) => return Err(err!(LocalIo, "cannot create {}: {e}", part.display())),
    };
    let (fd, direct, align, d) = opened;
    Ok(PartLock {
        fd: Some(fd),
        part: part.to_path_buf(),
        created,
        direct,
        align,
        reads,
        id: d.as_ref().map(|d| d.key),
        len: d.map_or(0, |d| d.len),
        opened: super::next_opened(),
    })
}

/// How long a lock that another description holds is asked for again before it is
/// believed: a ringdl that was just killed holds it until the kernel has torn down its
/// io_uring, whose fixed file is the locked description (20–40 ms after the exit here,
/// more on a loaded machine). In a list this is a wait of the whole run's loop, so short.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// An exclusive flock(2) on `fd`, asked for every 10 ms while another description holds
/// it (EWOULDBLOCK), for at most [`LOCK_WAIT`]. `Ok(true)`: it was held by another at
/// first (so the file may have changed meanwhile).
fn flock_waiting(fd: &OwnedFd) -> rustix::io::Result<bool> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    let mut waited = false;
    loop {
        match rustix::fs::flock(fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Err(rustix::io::Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => {
                waited = true;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            r => return r.map(|()| waited),
        }
    }
}
