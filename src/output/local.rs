//! An output's file system: whether it is a local disk one, where a metadata call such
//! as fallocate(2) waits on no server or daemon and may be made on the reactor's thread,
//! and whether it is full.
//!
//! Sources: statfs(2) (`f_type`), statvfs(3), linux/magic.h.

use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::Mutex;

/// Local disk file systems (statfs(2) `f_type`): ext2/3/4, XFS, Btrfs, F2FS, tmpfs. Not
/// NFS (4.2's fallocate asks the server), FUSE (its daemon), CIFS (its server), nor
/// overlayfs or any other not named (what lies under it is not known here).
pub(crate) const LOCAL_DISK: [u32; 5] = [
    linux_raw_sys::general::EXT4_SUPER_MAGIC,
    linux_raw_sys::general::XFS_SUPER_MAGIC,
    linux_raw_sys::general::BTRFS_SUPER_MAGIC,
    linux_raw_sys::general::F2FS_SUPER_MAGIC,
    linux_raw_sys::general::TMPFS_MAGIC,
];

/// The devices whose file system was asked (`st_dev`, local), for the run.
static KNOWN: Mutex<Vec<(u64, bool)>> = Mutex::new(Vec::new());

/// Whether the file open as `fd`, on device `dev` (`st_dev`), is on a [`LOCAL_DISK`] file
/// system: fstatfs(2) once per device in a run (a list's files share a few); false when
/// fstatfs fails.
pub(crate) fn on_local_disk(fd: BorrowedFd<'_>, dev: u64) -> bool {
    let mut known = KNOWN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(&(_, local)) = known.iter().find(|k| k.0 == dev) {
        return local;
    }
    let local = is_local_disk(fd);
    known.push((dev, local));
    local
}

/// Whether the file open as `fd` is on a [`LOCAL_DISK`] file system (fstatfs(2); false
/// when it fails), asked anew.
pub(crate) fn is_local_disk(fd: BorrowedFd<'_>) -> bool {
    rustix::fs::fstatfs(fd).is_ok_and(|fs| LOCAL_DISK.contains(&(fs.f_type as u32)))
}

/// Free bytes below which a file system that refused a file (ENOSPC) is full for the
/// files after it too: one write block ([`crate::engine::blocks::WRITE_BLOCK`]). With more
/// free, only a file too large for what is left failed, and smaller ones may still fit.
const FULL_BELOW: u64 = 256 << 10;

/// Whether the file system that holds `path` (statvfs(3) of its directory: `f_bavail ·
/// f_frsize`, what an unprivileged writer may use) has less than [`FULL_BELOW`] bytes
/// free; true when statvfs fails (the ENOSPC stands).
pub(crate) fn is_full(path: &Path) -> bool {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    rustix::fs::statvfs(dir).map_or(true, |v| v.f_bavail.saturating_mul(v.f_frsize) < FULL_BELOW)
}
