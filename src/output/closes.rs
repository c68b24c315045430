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
//! for.
//!
//! Where /proc/locks was seen to name this process's lock on an output as stat(2) spells
//! the file (checked once per filesystem, on its first output: [`Spares::watch`]), no
//! spare is opened: the output's device and inode are kept, and [`settle`] reads
//! /proc/locks for the locks this process still holds on them (one read for all the
//! outputs; a lock there held by another process means ours went, as above). Elsewhere —
//! no /proc, a pid namespace it does not show, a device number it spells otherwise — a
//! spare as above. Not waited for either: a block device, a stream (standard output, a FIFO, `/dev/fd/N`: no
//! `.part`, no lock), a filesystem whose flock cannot tell (ENOLCK, or any error but
//! EWOULDBLOCK).

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use rustix::fs::{FlockOperation, Mode, OFlags, flock};

use super::FileKey;

/// The longest [`settle`] waits: the kernel's own late closes take a few milliseconds.
pub const LIMIT: Duration = Duration::from_secs(1);

/// The run's spares, one per output whose last close is not seen yet.
static SPARES: Mutex<Spares> = Mutex::new(Spares::new());

/// The outputs whose last close is waited for: spare descriptions of locked outputs (no
/// lock of their own), or the device and inode of those whose lock /proc/locks shows.
pub(crate) struct Spares {
    spares: Vec<OwnedFd>,
    /// Outputs watched through /proc/locks: (stat(2) `st_dev`, `st_ino`).
    keys: Vec<FileKey>,
    /// Devices (`st_dev`) whose first output's lock /proc/locks named as this process's
    /// (true), or not (false: spares there).
    devs: Vec<(u64, bool)>,
    /// This process's pid in the namespace of the procfs at /proc ([`my_pid`]), once read.
    me: Option<Option<i64>>,
}

/// Opens a spare of the output at `path`, whose lock the caller has just taken, for
/// [`settle`] (nothing when it cannot be opened); none when /proc/locks shows that lock
/// on the output's file `key` (its device and inode, when known).
pub(crate) fn watch(path: &Path, key: Option<FileKey>) {
    SPARES.lock().unwrap_or_else(PoisonError::into_inner).watch(path, key);
}

/// Waits until every watched output is closed everywhere, at most `limit`. Returns how
/// many still are not.
pub fn settle(limit: Duration) -> usize {
    SPARES.lock().unwrap_or_else(PoisonError::into_inner).settle(limit)
}

impl Spares {
    const fn new() -> Spares {
        Spares {
            spares: Vec::new(),
            keys: Vec::new(),
            devs: Vec::new(),
            me: None,
        }
    }

    /// As [`watch`]. The outputs already closed are forgotten first (a long list holds a
    /// spare or key only for the files not closed yet).
    pub(crate) fn watch(&mut self, path: &Path, key: Option<FileKey>) {
        if let Some(k) = key.filter(|k| self.shown(*k, path)) {
            if self.keys.len() >= KEYS_PRUNE_AT {
                // (Kept when /proc/locks cannot be read just now: settle decides.)
                if let Some(held) = self.held_keys() {
                    self.keys.retain(|k| held.contains(k));
                }
            }
            self.keys.push(k);
            return;
        }
        if self.spares.len() >= PRUNE_AT {
            // (Not asking /proc/locks: a spare still locked is kept, looked at again
            // at the next prune or at the end.)
            self.spares.retain(|s| !unlocked(s));
        }
        // Read-write where it may (an exclusive flock over NFS needs a descriptor open for
        // writing: EBADF otherwise); nothing is written through it.
        let flags = OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK;
        let open = |mode| rustix::fs::open(path, flags | mode, Mode::empty());
        if let Ok(fd) = open(OFlags::RDWR).or_else(|_| open(OFlags::RDONLY)) {
            self.spares.push(fd);
        }
    }

    /// Whether /proc/locks shows the locks on `key`'s device: asked once per device, on
    /// the first output there (at `path`, whose lock this process holds now: seen, or
    /// not), and only for a local file system whose inode numbers are stat(2)'s own
    /// ([`LOCAL`]: over NFS the local record goes before the server's unlock, and
    /// overlayfs or NFS may show another inode number than stat for some files).
    fn shown(&mut self, key: FileKey, path: &Path) -> bool {
        if let Some(&(_, known)) = self.devs.iter().find(|d| d.0 == key.0) {
            return known;
        }
        let local = rustix::fs::statfs(path).is_ok_and(|fs| LOCAL.contains(&(fs.f_type as u32)));
        let seen = local && self.held_keys().is_some_and(|held| held.contains(&key));
        self.devs.push((key.0, seen));
        seen
    }

    /// The watched keys (and a device's first output, while [`Spares::shown`] asks) that
    /// /proc/locks shows a FLOCK of this process on; `None` when it cannot tell (no
    /// /proc/locks, this process not seen in its namespace).
    fn held_keys(&mut self) -> Option<Vec<FileKey>> {
        let me = (*self.me.get_or_insert_with(my_pid))?;
        let text = proc_locks()?;
        Some(
            text.lines()
                .filter_map(flock_holder)
                .filter(|l| l.0 == me)
                .map(|(_, (major, minor), ino)| (rustix::fs::makedev(major, minor), ino))
                .collect(),
        )
    }

    /// As [`settle`].
    pub(crate) fn settle(&mut self, limit: Duration) -> usize {
        let deadline = Instant::now() + limit;
        // (Each look at /proc/locks takes the kernel's lock of every file lock for its
        // read: the looks back off, 1 ms doubling to 16 ms.)
        let mut pause = Duration::from_millis(1);
        loop {
            self.spares.retain(|s| !closed(s));
            if !self.keys.is_empty() {
                // (When /proc/locks cannot be read now, the keys wait for the next look.)
                if let Some(held) = self.held_keys() {
                    self.keys.retain(|k| held.contains(k));
                }
            }
            let open = self.spares.len() + self.keys.len();
            let now = Instant::now();
            if open == 0 || now >= deadline {
                return open;
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(16));
        }
    }
}

/// Local file systems (statfs(2) `f_type`) on which /proc/locks names a flock by the
/// device and inode stat(2) gives, released at the last close: ext2/3/4, XFS, F2FS, tmpfs.
const LOCAL: [u32; 4] = [
    linux_raw_sys::general::EXT4_SUPER_MAGIC,
    linux_raw_sys::general::XFS_SUPER_MAGIC,
    linux_raw_sys::general::F2FS_SUPER_MAGIC,
    linux_raw_sys::general::TMPFS_MAGIC,
];

/// Spares kept before the closed ones are looked for ([`Spares::watch`]): a list's files
/// are pruned in batches, not each time one more starts (a flock(2) of every spare).
const PRUNE_AT: usize = 32;

/// Keys kept before the closed ones are looked for: a key holds no descriptor (16 bytes),
/// and each look reads all of /proc/locks.
const KEYS_PRUNE_AT: usize = 4096;

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
    let Some(me) = my_pid() else {
        return false;
    };
    let Some(text) = proc_locks() else {
        return false;
    };
    let dev = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
    text.lines()
        .filter_map(flock_holder)
        .any(|(pid, d, ino)| d == dev && ino == st.st_ino && pid != me)
}

/// The text of /proc/locks (proc(5)), read in 16 KiB reads (its size reads as 0: a
/// plain read to the end would begin with 32-byte reads); `None` when it cannot be read.
fn proc_locks() -> Option<String> {
    use std::io::Read;
    let mut text = String::with_capacity(16 << 10);
    std::fs::File::open("/proc/locks")
        .ok()?
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// This process's pid in the pid namespace of the procfs at /proc (what /proc/self names
/// there); `None` when there is no /proc or it does not show this process.
fn my_pid() -> Option<i64> {
    std::fs::read_link("/proc/self").ok()?.to_str()?.parse().ok()
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

    /// With `dup` the one description of a watched output still open, `s.settle` waits
    /// its whole limit (200 ms) and says one is open; with `dup` closed from another
    /// thread 100 ms into a 10 s wait, the wait ends then.
    fn waits_for_the_last_close(s: &mut Spares, dup: std::fs::File) {
        let t = Instant::now();
        assert_eq!(s.settle(Duration::from_millis(200)), 1, "only the duplicate's is open");
        assert!(t.elapsed() >= Duration::from_millis(200));
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(dup);
        });
        let t = Instant::now();
        assert_eq!(s.settle(Duration::from_secs(10)), 0);
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        closer.join().unwrap();
    }

    #[test]
    fn a_locked_output_is_waited_for_until_its_last_descriptor_closes() {
        let p = std::env::temp_dir().join(format!("ringdl-closes-{}", std::process::id()));
        std::fs::write(&p, b"x").unwrap();
        let held = std::fs::File::open(&p).unwrap();
        flock(&held, FlockOperation::NonBlockingLockExclusive).unwrap();
        // (A duplicate is the same description: the lock goes only with both.)
        let dup = held.try_clone().unwrap();
        let mut s = Spares::new();
        // (No key: a spare.)
        s.watch(&p, None);
        assert_eq!((s.spares.len(), s.keys.len()), (1, 0));
        drop(held);
        // Closed from another thread while the wait goes on: the wait ends then.
        waits_for_the_last_close(&mut s, dup);
        // Nothing left to wait for: at once.
        assert_eq!(s.settle(Duration::from_secs(10)), 0);
        std::fs::remove_file(&p).unwrap();
    }

    /// Where /proc/locks shows this process's lock as stat(2) spells the file (ext4,
    /// tmpfs), an output is watched by its device and inode, no spare opened, and the wait
    /// still lasts until its last description closes; where it does not, a spare.
    #[test]
    fn an_output_whose_lock_proc_locks_shows_is_waited_for_without_a_spare() {
        let p = std::env::temp_dir().join(format!("ringdl-closes-key-{}", std::process::id()));
        std::fs::write(&p, b"x").unwrap();
        let held = std::fs::File::open(&p).unwrap();
        flock(&held, FlockOperation::NonBlockingLockExclusive).unwrap();
        let dup = held.try_clone().unwrap();
        let st = rustix::fs::fstat(&held).unwrap();
        let key = (st.st_dev, st.st_ino);
        let mut s = Spares::new();
        s.watch(&p, Some(key));
        let shown = proc_locks_shows_mine(&held);
        assert_eq!(
            (s.spares.len(), s.keys.len()),
            if shown { (0, 1) } else { (1, 0) },
            "{}",
            std::fs::read_to_string("/proc/locks").unwrap_or_default()
        );
        // The next output on the device is not asked about again: its key is kept at once.
        let q = p.with_extension("other");
        std::fs::write(&q, b"y").unwrap();
        let other = std::fs::File::open(&q).unwrap();
        flock(&other, FlockOperation::NonBlockingLockExclusive).unwrap();
        let st = rustix::fs::fstat(&other).unwrap();
        s.watch(&q, Some((st.st_dev, st.st_ino)));
        assert_eq!(s.keys.len(), if shown { 2 } else { 0 });
        assert_eq!(s.devs.len(), 1);
        drop(other);
        drop(held);
        waits_for_the_last_close(&mut s, dup);
        std::fs::remove_file(&p).unwrap();
        std::fs::remove_file(&q).unwrap();
    }

    /// Whether `file` is on a [`LOCAL`] file system and /proc/locks has a FLOCK line of this
    /// process (the pid /proc/self names) on it as stat(2) spells it: the text itself, not
    /// [`flock_holder`]'s reading of it.
    fn proc_locks_shows_mine(file: &std::fs::File) -> bool {
        let local = rustix::fs::fstatfs(file).is_ok_and(|fs| LOCAL.contains(&(fs.f_type as u32)));
        let st = rustix::fs::fstat(file).unwrap();
        if !local {
            return false;
        }
        let Some(me) = std::fs::read_link("/proc/self")
            .ok()
            .and_then(|p| p.to_str()?.parse::<u32>().ok())
        else {
            return false;
        };
        let (major, minor) = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
        let id = format!(" {me} {major:02x}:{minor:02x}:{} ", st.st_ino);
        std::fs::read_to_string("/proc/locks").is_ok_and(|t| {
            t.lines()
                .any(|l| l.contains(" FLOCK ") && !l.contains("->") && l.contains(&id))
        })
    }

    /// A file `name` in `dir`, open, with an exclusive flock (the output's lock).
    fn locked(dir: &Path, name: &str) -> (std::path::PathBuf, std::fs::File) {
        let p = dir.join(name);
        std::fs::write(&p, b"x").unwrap();
        let f = std::fs::File::open(&p).unwrap();
        flock(&f, FlockOperation::NonBlockingLockExclusive).unwrap();
        (p, f)
    }

    /// `path`'s device and inode.
    fn key_of(path: &Path) -> FileKey {
        let st = rustix::fs::stat(path).unwrap();
        (st.st_dev, st.st_ino)
    }

    /// The run's own list ([`watch`], [`settle`]): a locked output is counted open, and
    /// once its lock's description closes, nothing is.
    #[test]
    fn the_run_s_outputs_are_watched_until_closed() {
        let dir = tempfile::tempdir().unwrap();
        let (p, held) = locked(dir.path(), "run");
        watch(&p, None);
        assert!(settle(Duration::ZERO) >= 1, "the locked output is not counted");
        drop(held);
        assert_eq!(settle(Duration::from_secs(10)), 0);
    }

    /// The spares are pruned only once [`PRUNE_AT`] are kept, and then only those whose
    /// file no description locks: 32 outputs watched (the first still locked, the others
    /// closed) keep 32 spares; the 33rd leaves the locked one's and its own.
    #[test]
    fn spares_are_pruned_of_closed_outputs_at_prune_at() {
        let dir = tempfile::tempdir().unwrap();
        let (first, held) = locked(dir.path(), "held");
        let mut s = Spares::new();
        s.watch(&first, None);
        for k in 1..PRUNE_AT {
            let (p, f) = locked(dir.path(), &format!("closed{k}"));
            s.watch(&p, None);
            drop(f);
        }
        assert_eq!(s.spares.len(), PRUNE_AT, "pruned before PRUNE_AT");
        let (p, f) = locked(dir.path(), "last");
        s.watch(&p, None);
        assert_eq!(s.spares.len(), 2, "the locked output's spare and the new one");
        assert!(!unlocked(&s.spares[0]) && !unlocked(&s.spares[1]));
        drop((held, f));
        assert_eq!(s.settle(Duration::from_secs(10)), 0);
    }

    /// Where /proc/locks shows the outputs' locks (ext4 or tmpfs: the test directory), the
    /// keys are pruned only once [`KEYS_PRUNE_AT`] are kept, and then only those whose lock
    /// went: a locked output's key, 4094 of a closed one and one more locked are all kept
    /// (4096); at the next output only the two locked ones' and the new one's are.
    #[test]
    fn keys_are_pruned_of_closed_outputs_at_keys_prune_at() {
        // (A tmpfs where there is one: the temporary directory may be on another file system.)
        let dir = tempfile::tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        let (a, held_a) = locked(dir.path(), "a");
        assert!(
            proc_locks_shows_mine(&held_a),
            "NOT RUN (counted as a failure): /proc/locks does not show this process's lock on {} \
             (not ext4, XFS, F2FS or tmpfs, or no /proc)",
            dir.path().display()
        );
        let mut s = Spares::new();
        s.watch(&a, Some(key_of(&a)));
        assert_eq!((s.spares.len(), s.keys.len()), (0, 1));
        let closed = dir.path().join("closed");
        std::fs::write(&closed, b"x").unwrap();
        for _ in 2..KEYS_PRUNE_AT {
            s.watch(&closed, Some(key_of(&closed)));
        }
        let (c, held_c) = locked(dir.path(), "c");
        s.watch(&c, Some(key_of(&c)));
        assert_eq!(s.keys.len(), KEYS_PRUNE_AT, "pruned before KEYS_PRUNE_AT");
        let (d, held_d) = locked(dir.path(), "d");
        s.watch(&d, Some(key_of(&d)));
        assert_eq!(s.keys, vec![key_of(&a), key_of(&c), key_of(&d)]);
        assert!(s.spares.is_empty());
        drop((held_a, held_c, held_d));
        assert_eq!(s.settle(Duration::from_secs(10)), 0);
    }

    /// An output whose lock /proc/locks does not show (here: not locked at all) gets a
    /// spare, not a key, and so does the next one on its device, locked or not.
    #[test]
    fn an_output_whose_lock_proc_locks_does_not_show_gets_a_spare() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("unlocked");
        std::fs::write(&p, b"x").unwrap();
        let mut s = Spares::new();
        s.watch(&p, Some(key_of(&p)));
        assert_eq!((s.spares.len(), s.keys.len()), (1, 0));
        assert_eq!(s.devs, vec![(key_of(&p).0, false)]);
        let (q, held) = locked(dir.path(), "locked");
        s.watch(&q, Some(key_of(&q)));
        assert_eq!((s.spares.len(), s.keys.len()), (2, 0));
        drop(held);
        assert_eq!(s.settle(Duration::from_secs(10)), 0);
    }

    /// A spare is opened read-write (an exclusive flock over NFS needs it), close-on-exec,
    /// non-blocking, and never through a symbolic link (`O_NOFOLLOW`: none opened).
    #[test]
    fn a_spare_is_read_write_close_on_exec_non_blocking_and_no_symlink_s() {
        let dir = tempfile::tempdir().unwrap();
        let (p, held) = locked(dir.path(), "out");
        let mut s = Spares::new();
        s.watch(&p, None);
        let spare = s.spares.first().expect("a spare");
        let fl = rustix::fs::fcntl_getfl(spare).unwrap();
        assert_eq!(fl & OFlags::RWMODE, OFlags::RDWR, "{fl:?}");
        assert!(fl.contains(OFlags::NONBLOCK), "{fl:?}");
        let fd = rustix::io::fcntl_getfd(spare).unwrap();
        assert!(fd.contains(rustix::io::FdFlags::CLOEXEC), "{fd:?}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        s.watch(&link, None);
        assert_eq!(s.spares.len(), 1, "a spare opened through a symbolic link");
        drop(held);
        assert_eq!(s.settle(Duration::from_secs(10)), 0);
    }

    /// The looks back off: a 200 ms wait for an output still locked looks at its lock and
    /// /proc/locks about 17 times (1, 2, 4, 8 ms, then every 16 ms), not in a busy loop:
    /// fewer than 250 read(2) calls on this thread (/proc/thread-self/io `syscr`; each
    /// look reads /proc/locks to its end, 2 or more reads).
    #[test]
    fn the_wait_backs_off() {
        let syscr = || -> Option<u64> {
            let io = std::fs::read_to_string("/proc/thread-self/io").ok()?;
            io.lines().find_map(|l| l.strip_prefix("syscr: "))?.parse().ok()
        };
        let dir = tempfile::tempdir().unwrap();
        let (p, held) = locked(dir.path(), "held");
        let mut s = Spares::new();
        s.watch(&p, None);
        let Some(before) = syscr() else {
            return; // (no per-task I/O accounting in this kernel)
        };
        assert_eq!(s.settle(Duration::from_millis(200)), 1);
        let reads = syscr().unwrap() - before;
        assert!(reads < 250, "{reads} reads in a 200 ms wait");
        drop(held);
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
        let mut s = Spares::new();
        s.watch(&p, None);
        // Another process holds it: a shell that takes it with flock(1) of util-linux on
        // its own descriptor, then becomes `sleep` (killing it lets go of the lock).
        let mut other = std::process::Command::new("sh")
            .args(["-c", "exec 9<>\"$0\"; flock -x 9; exec sleep 20"])
            .arg(&p)
            .spawn()
            .expect("sh and flock(1) from util-linux");
        let t = Instant::now();
        let spare = s.spares.first().expect("a spare");
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
