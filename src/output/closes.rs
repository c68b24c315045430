//! The last close of each output, waited for before ringdl exits, so that
//! `ringdl … && umount` finds the filesystem free.
//!
//! An io_uring request on a file holds its own reference to it (or, for a registered
//! file, to the table node that holds it) until the request is freed. A request that an
//! io-wq worker ran (a regular file's READ or WRITE that would block: every one, on
//! tmpfs) is freed by whichever of the worker and the ring's thread lets go of it last;
//! when that is the worker, after ringdl saw the completion, the free waits in the ring's
//! task work, and once the ring is closed it runs from a kernel worker (io_uring
//! fallback work, then the delayed fput of fs/file_table.c), milliseconds after ringdl's
//! exit: an `umount` right after it fails with EBUSY.
//!
//! Every write, read-back and io_uring request of a regular output goes through one open
//! file description, the one that holds the run's flock(2) on the `.part`
//! ([`super::PartLock`]), and a flock lock goes only with the last close of its
//! description (`locks_remove_file` in `__fput`, a moment before the filesystem is let
//! go there). So [`settle`] asks, before the exit, for an exclusive flock through another
//! description of each output (a *spare*, opened beside the lock): granted means the
//! file's last close has begun; refused (EWOULDBLOCK) means the kernel (or another
//! ringdl) still holds it, and it asks again every millisecond, at most [`LIMIT`] in all.
//! When /proc/locks (proc(5)) names another process as the holder (a run that resumed the
//! file as soon as this one let go of it), this run's description is closed: not waited
//! for. Not waited for either: a block device, a stream (standard output, a FIFO, `/dev/fd/N`: no
//! `.part`, no lock), a filesystem whose flock cannot tell (ENOLCK, or any error but
//! EWOULDBLOCK).

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use rustix::fs::{FlockOperation, Mode, OFlags, flock};

/// The longest [`settle`] waits: the kernel's own late closes take a few milliseconds.
pub const LIMIT: Duration = Duration::from_secs(1);

/// The run's spares, one per output whose last close is not seen yet.
static SPARES: Mutex<Spares> = Mutex::new(Spares(Vec::new()));

/// Spare descriptions of locked outputs (no lock of their own).
pub(crate) struct Spares(Vec<OwnedFd>);

/// Opens a spare of the output at `path`, whose lock the caller has just taken, for
/// [`settle`]; nothing when it cannot be opened.
pub(crate) fn watch(path: &Path) {
    SPARES.lock().unwrap_or_else(PoisonError::into_inner).watch(path);
}

/// Waits until every watched output is closed everywhere, at most `limit`. Returns how
/// many still are not.
pub fn settle(limit: Duration) -> usize {
    SPARES.lock().unwrap_or_else(PoisonError::into_inner).settle(limit)
}

impl Spares {
    /// As [`watch`]. The outputs already closed are forgotten first (a long list holds a
    /// spare only for the files not closed yet).
    pub(crate) fn watch(&mut self, path: &Path) {
        if self.0.len() >= PRUNE_AT {
            // (Not asking /proc/locks: a spare still locked is kept, looked at again
            // at the next prune or at the end.)
            self.0.retain(|s| !unlocked(s));
        }
        // Read-write where it may (an exclusive flock over NFS needs a descriptor open for
        // writing: EBADF otherwise); nothing is written through it.
        let flags = OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK;
        let open = |mode| rustix::fs::open(path, flags | mode, Mode::empty());
        if let Ok(fd) = open(OFlags::RDWR).or_else(|_| open(OFlags::RDONLY)) {
            self.0.push(fd);
        }
    }

    /// As [`settle`].
    pub(crate) fn settle(&mut self, limit: Duration) -> usize {
        let deadline = Instant::now() + limit;
        loop {
            self.0.retain(|s| !closed(s));
            if self.0.is_empty() || Instant::now() >= deadline {
                return self.0.len();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Spares kept before the closed ones are looked for ([`Spares::watch`]): a list's files
/// are pruned in batches, not each time one more starts (a flock(2) of every spare).
const PRUNE_AT: usize = 32;

/// Whether this run's description of `spare`'s file is closed: no description holds a
/// flock on it any more, or another process's does ([`held_by_another`]: the lock was
/// ours until our last close). True too when it cannot be told (no flock on this
/// filesystem).
fn closed(spare: &OwnedFd) -> bool {
    match flock(spare, FlockOperation::NonBlockingLockExclusive) {
        Err(rustix::io::Errno::WOULDBLOCK) => held_by_another(spare),
        _ => true,
    }
}

/// Whether no description holds a flock on `spare`'s file any more (or it cannot be
/// told): [`closed`] without the look at /proc/locks. The lock it may take goes with the
/// spare's close (the spare is its description's only descriptor).
fn unlocked(spare: &OwnedFd) -> bool {
    !matches!(
        flock(spare, FlockOperation::NonBlockingLockExclusive),
        Err(rustix::io::Errno::WOULDBLOCK)
    )
}

/// Whether /proc/locks names a FLOCK on `spare`'s file (its device and inode) held by a
/// process other than this one. Its pids are those of the pid namespace of the procfs
/// mounted there, which need not be this process's (`unshare -p` without a new /proc), so
/// this process is the pid `/proc/self` names in it. False when it cannot tell: no /proc
/// (an initramfs may have none), this process not seen in it, or a device number that
/// /proc/locks spells otherwise (it gives the superblock's, which stat(2) does not on
/// btrfs subvolumes); then the wait goes on.
fn held_by_another(spare: &OwnedFd) -> bool {
    let Ok(st) = rustix::fs::fstat(spare) else {
        return false;
    };
    let me = std::fs::read_link("/proc/self").ok();
    let Some(me) = me.and_then(|p| p.to_str()?.parse::<i64>().ok()) else {
        return false;
    };
    let Ok(text) = std::fs::read_to_string("/proc/locks") else {
        return false;
    };
    let dev = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
    text.lines()
        .filter_map(flock_holder)
        .any(|(pid, d, ino)| d == dev && ino == st.st_ino && pid != me)
}

/// A held FLOCK line of /proc/locks: its holder's pid (in the pid namespace of that
/// procfs; 0 when the holder is not seen there), its file's device (major, minor) and inode. `None` for other lines: POSIX
/// and OFD locks, and `->` lines (a waiter, not a holder).
/// `1: FLOCK  ADVISORY  WRITE 4242 08:01:1234567 0 EOF`.
fn flock_holder(line: &str) -> Option<(i64, (u32, u32), u64)> {
    let mut f = line.split_whitespace().skip(1);
    if f.next()? != "FLOCK" {
        return None;
    }
    let pid = f.nth(2)?.parse().ok()?;
    let mut id = f.next()?.split(':');
    let major = u32::from_str_radix(id.next()?, 16).ok()?;
    let minor = u32::from_str_radix(id.next()?, 16).ok()?;
    let ino = id.next()?.parse().ok()?;
    Some((pid, (major, minor), ino))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_locked_output_is_waited_for_until_its_last_descriptor_closes() {
        let p = std::env::temp_dir().join(format!("ringdl-closes-{}", std::process::id()));
        std::fs::write(&p, b"x").unwrap();
        let held = std::fs::File::open(&p).unwrap();
        flock(&held, FlockOperation::NonBlockingLockExclusive).unwrap();
        // (A duplicate is the same description: the lock goes only with both.)
        let dup = held.try_clone().unwrap();
        let mut s = Spares(Vec::new());
        s.watch(&p);
        drop(held);
        let t = Instant::now();
        assert_eq!(s.settle(Duration::from_millis(200)), 1);
        assert!(t.elapsed() >= Duration::from_millis(200));
        // Closed from another thread while the wait goes on: the wait ends then.
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(dup);
        });
        let t = Instant::now();
        assert_eq!(s.settle(Duration::from_secs(10)), 0);
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        closer.join().unwrap();
        // Nothing left to wait for: at once.
        assert_eq!(s.settle(Duration::from_secs(10)), 0);
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn a_flock_line_names_its_holder_and_file() {
        let l = "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234567 0 EOF";
        assert_eq!(flock_holder(l), Some((4242, (8, 1), 1_234_567)));
        assert_eq!(
            flock_holder("2: FLOCK  ADVISORY  WRITE 7 fd:1a:99 0 EOF"),
            Some((7, (0xfd, 0x1a), 99))
        );
        assert_eq!(
            flock_holder("1: -> FLOCK  ADVISORY  WRITE 4243 08:01:1234567 0 EOF"),
            None
        );
        assert_eq!(flock_holder("3: POSIX  ADVISORY  WRITE 4242 08:01:1234567 0 EOF"), None);
        assert_eq!(flock_holder("4: OFDLCK ADVISORY  READ  -1 00:05:12 0 EOF"), None);
        assert_eq!(flock_holder(""), None);
    }

    /// Another process holds the lock (a run that took the file over once this one let go
    /// of it): the wait ends at once, not after its whole limit.
    #[test]
    fn another_process_s_lock_is_not_waited_for() {
        let p = std::env::temp_dir().join(format!("ringdl-closes-other-{}", std::process::id()));
        std::fs::write(&p, b"x").unwrap();
        let mut s = Spares(Vec::new());
        s.watch(&p);
        // Another process holds it: a shell that takes it with flock(1) of util-linux on
        // its own descriptor, then becomes `sleep` (killing it lets go of the lock).
        let mut other = std::process::Command::new("sh")
            .args(["-c", "exec 9<>\"$0\"; flock -x 9; exec sleep 20"])
            .arg(&p)
            .spawn()
            .expect("sh and flock(1) from util-linux");
        let t = Instant::now();
        let spare = s.0.first().expect("a spare");
        while !held_by_another(spare) && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            held_by_another(spare),
            "{}",
            std::fs::read_to_string("/proc/locks").unwrap_or_default()
        );
        let t = Instant::now();
        assert_eq!(s.settle(Duration::from_secs(10)), 0);
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        let _ = other.kill();
        let _ = other.wait();
        std::fs::remove_file(&p).unwrap();
    }
}
