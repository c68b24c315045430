//! The lock on `FILE.part` ([`lock_part`]): taken before anything reads the control file
//! or touches the `.part`.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use super::{Output, part_path, same_inode, special};
use crate::err;
use crate::error::Result;

/// An exclusive flock(2) on `FILE.part`, held for the whole run: a second ringdl on the
/// same output stops at once instead of truncating the bytes the first is writing (and
/// the first would then rename a file full of zeros).
pub struct PartLock {
    fd: OwnedFd,
    part: PathBuf,
    /// This run created the `.part` (empty): it removes it if it stops before any byte.
    pub created: bool,
}

impl PartLock {
    /// Removes the `.part` this run created, if it is still the locked inode and empty.
    pub fn remove_if_unused(&self) {
        if self.created
            && rustix::fs::fstat(&self.fd).is_ok_and(|st| st.st_size == 0)
            && same_inode(&self.fd, &self.part)
        {
            let _ = std::fs::remove_file(&self.part);
        }
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
/// another process holds the lock (EWOULDBLOCK).
pub fn lock_part(final_path: Option<&Path>, force: bool, resume: bool) -> Result<Option<PartLock>> {
    let Some(path) = final_path else { return Ok(None) };
    if special(path).is_some() || std::fs::metadata(path).is_ok_and(|md| md.file_type().is_dir()) {
        return Ok(None);
    }
    let part = part_path(path);
    if resume && !force && std::fs::symlink_metadata(path).is_ok() && std::fs::symlink_metadata(&part).is_err() {
        return Err(err!(
            LocalIo,
            "{} exists and there is no .part to resume: it looks complete (use --force to download it again)",
            path.display()
        ));
    }
    Output::check_free(path, force)?;
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let mode = Mode::from_raw_mode(0o644);
    // A lock on an inode that another run unlinked meanwhile protects nothing: check that
    // the path still names it, else start again.
    for _ in 0..8 {
        let (fd, created) = match rustix::fs::open(&part, flags | OFlags::EXCL, mode) {
            Ok(fd) => (fd, true),
            Err(rustix::io::Errno::EXIST) => (
                rustix::fs::open(&part, flags, mode)
                    .map_err(|e| err!(LocalIo, "cannot open {}: {e}", part.display()))?,
                false,
            ),
            Err(e) => return Err(err!(LocalIo, "cannot create {}: {e}", part.display())),
        };
        let lock = PartLock {
            fd,
            part: part.clone(),
            created,
        };
        match rustix::fs::flock(&lock.fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) if same_inode(&lock.fd, &part) => return Ok(Some(lock)),
            Ok(()) => continue,
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(err!(
                    LocalIo,
                    "{} is being written by another ringdl (it holds a lock on it)",
                    part.display()
                ));
            }
            Err(rustix::io::Errno::NOLCK | rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOSYS) => {
                return Ok(Some(lock));
            }
            Err(e) => {
                lock.remove_if_unused();
                return Err(err!(LocalIo, "flock {}: {e}", part.display()));
            }
        }
    }
    Err(err!(
        LocalIo,
        "{} keeps being replaced by another process",
        part.display()
    ))
}
