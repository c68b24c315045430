//! Finished files made durable together: a thread of the run's reactor calls syncfs(2)
//! once per file system for a batch of files whose bytes are all in, instead of one
//! fsync(2) each (group commit). On a file system without a journal each fsync writes
//! its inode and flushes the device's cache on its own; syncfs writes the batch's inodes
//! and flushes once.
//!
//! syncfs stands for fsync only where it is as strong: regular files, on a local file
//! system whose `sync_fs` writes and flushes everything ([`LOCAL_DISK`](crate::output::local::LOCAL_DISK): ext2/3/4, XFS,
//! Btrfs, F2FS, tmpfs — not FUSE, whose daemon is asked only by fsync, nor CIFS or NFS,
//! nor overlayfs, whose upper files' errors land on another superblock), on Linux ≥ 5.8,
//! where syncfs reports writeback errors (the file system's `errseq_t`: an error met since
//! the descriptor it is called on was opened, or not yet seen by anyone). Each file
//! system's syncfs is called on the batch's descriptor opened first
//! ([`Member::opened`]), so that an error met by any member since it was opened is
//! reported. When syncfs fails, each of its members is fsynced on its own, so that only
//! files whose own writeback failed fail (syncfs also reports other programs' errors).
//! Every other member is fsynced on its own, on the thread.
//!
//! The thread owns duplicates of the members' descriptors (closed when their batch is
//! done), answers each batch once through a channel and rings an eventfd that the reactor
//! READs on its ring. It ends when the [`Syncer`] is dropped (joined there: nothing of it
//! outlives the run).
//!
//! Sources: syncfs(2), fsync(2), statfs(2) (`f_type`), errseq
//! (Documentation/core-api/errseq.rst), eventfd(2).

use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::thread::JoinHandle;

use crate::err;
use crate::error::Result;

/// One file of a batch: its key (the caller's), a duplicate of its descriptor, and the
/// order in which its output was opened ([`super::Output::opened`]).
pub(crate) struct Member {
    pub key: usize,
    pub fd: OwnedFd,
    pub opened: u64,
}

/// What the thread said of the batch in flight.
pub(crate) enum Answer {
    /// Each member's key and its sync's result (0, or a negated errno), and how many
    /// syncfs(2) calls served the batch.
    Done(Vec<(usize, i32)>, usize),
    NotYet,
    /// The thread is gone (it panicked): the batch's members were not synced.
    Gone,
}

/// The sync thread, its channels and its eventfd.
pub(crate) struct Syncer {
    to: Option<Sender<Vec<Member>>>,
    back: Receiver<(Vec<(usize, i32)>, usize)>,
    bell: OwnedFd,
    thread: Option<JoinHandle<()>>,
}

impl Syncer {
    /// Starts the thread.
    ///
    /// # Errors
    /// `LocalIo` when eventfd(2), dup(2) or the thread's creation fails.
    pub(crate) fn start() -> Result<Syncer> {
        let bell = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC)
            .map_err(|e| err!(LocalIo, "eventfd: {e}"))?;
        let ring = bell.try_clone().map_err(|e| err!(LocalIo, "eventfd: dup: {e}"))?;
        let errseq = reports_writeback_errors();
        let (to, from) = channel::<Vec<Member>>();
        let (answer, back) = channel();
        let thread = std::thread::Builder::new()
            .name("ringdl-sync".to_owned())
            .spawn(move || {
                while let Ok(batch) = from.recv() {
                    if answer.send(sync_batch(batch, errseq)).is_err() {
                        break;
                    }
                    let _ = rustix::io::write(ring.as_fd(), &1u64.to_ne_bytes());
                }
            })
            .map_err(|e| err!(LocalIo, "sync thread: {e}"))?;
        Ok(Syncer {
            to: Some(to),
            back,
            bell,
            thread: Some(thread),
        })
    }

    /// The eventfd the thread writes after each batch (eventfd(2): an 8-byte count).
    pub(crate) fn bell(&self) -> RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.bell)
    }

    /// Hands `batch` to the thread. Returns it back when the thread is gone.
    pub(crate) fn send(&self, batch: Vec<Member>) -> std::result::Result<(), Vec<Member>> {
        match &self.to {
            Some(to) => to.send(batch).map_err(|e| e.0),
            None => Err(batch),
        }
    }

    /// The answer to the batch in flight, if the thread gave it (one per batch sent).
    pub(crate) fn answer(&self) -> Answer {
        match self.back.try_recv() {
            Ok((results, syncfs)) => Answer::Done(results, syncfs),
            Err(TryRecvError::Empty) => Answer::NotYet,
            Err(TryRecvError::Disconnected) => Answer::Gone,
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        // Closing the channel ends the thread after the batch it syncs.
        self.to = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Linux ≥ 5.8 (uname(2)'s release, read from `/proc/sys/kernel/osrelease`): syncfs(2)
/// reports writeback errors. Unknown (no /proc) counts as no.
fn reports_writeback_errors() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").is_ok_and(|release| at_least_5_8(&release))
}

/// Whether a kernel release (`6.1.0-13-amd64`, `5.8.0`, a trailing newline allowed) is
/// 5.8 or later; false when its first two fields are not numbers.
fn at_least_5_8(release: &str) -> bool {
    let mut parts = release.trim().split(['.', '-']).map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (5, 8),
        _ => false,
    }
}

/// The device number of the file system `fd` is on, when syncfs(2) may stand for its
/// fsync: a regular file on a [`LOCAL_DISK`](crate::output::local::LOCAL_DISK) file system (statfs(2) `f_type`, asked once per
/// device: [`super::local::on_local_disk`]). `None`: fsync it.
fn grouped_on(fd: &OwnedFd) -> Option<u64> {
    let st = rustix::fs::fstat(fd).ok()?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return None;
    }
    super::local::on_local_disk(fd.as_fd(), st.st_dev).then_some(st.st_dev)
}

/// A file system's members in a batch: its device, the members' indexes in the batch,
/// and the index of the one opened first.
type Group = (u64, Vec<usize>, usize);

/// `batch`'s members [`grouped_on`] a file system, one [`Group`] per device in the order
/// first met, when `errseq`; and the indexes of the others, to be fsynced alone (every
/// member when not `errseq`).
fn by_file_system(batch: &[Member], errseq: bool) -> (Vec<Group>, Vec<usize>) {
    let mut groups: Vec<Group> = Vec::new();
    let mut alone = Vec::new();
    for (i, m) in batch.iter().enumerate() {
        match grouped_on(&m.fd).filter(|_| errseq) {
            Some(dev) => match groups.iter_mut().find(|g| g.0 == dev) {
                Some(g) => {
                    g.1.push(i);
                    if m.opened < batch[g.2].opened {
                        g.2 = i;
                    }
                }
                None => groups.push((dev, vec![i], i)),
            },
            None => alone.push(i),
        }
    }
    (groups, alone)
}

/// Syncs `batch`: one syncfs(2) per file system for the members [`grouped_on`] one (with
/// `errseq`: the kernel reports writeback errors to syncfs), on the member opened first,
/// each member fsynced on its own when it fails; every other member fsynced on its own.
/// Returns each member's result (0 or a negated errno) and the syncfs calls made.
fn sync_batch(batch: Vec<Member>, errseq: bool) -> (Vec<(usize, i32)>, usize) {
    let negated = |e: rustix::io::Errno| -e.raw_os_error();
    let fsync = |m: &Member| (m.key, rustix::fs::fsync(&m.fd).map_or_else(negated, |()| 0));
    let (groups, alone) = by_file_system(&batch, errseq);
    let mut out = Vec::with_capacity(batch.len());
    out.extend(alone.iter().map(|&i| fsync(&batch[i])));
    let calls = groups.len();
    for (_, members, first) in groups {
        match rustix::fs::syncfs(&batch[first].fd) {
            Ok(()) => out.extend(members.iter().map(|&i| (batch[i].key, 0))),
            Err(_) => out.extend(members.iter().map(|&i| fsync(&batch[i]))),
        }
    }
    (out, calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two files of one directory synced in one batch: both get syncfs's result (0), the
    /// eventfd (the descriptor [`Syncer::bell`] gives) rings, and the thread ends with the
    /// syncer.
    #[test]
    fn a_batch_is_synced_and_answered() {
        let dir = std::env::temp_dir().join(format!("ringdl-syncer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files: Vec<_> = (0..2)
            .map(|i| {
                let p = dir.join(format!("f{i}"));
                std::fs::write(&p, b"bytes").unwrap();
                std::fs::File::open(&p).unwrap()
            })
            .collect();
        let s = Syncer::start().unwrap();
        let batch = files
            .iter()
            .enumerate()
            .map(|(i, f)| Member {
                key: 10 + i,
                fd: f.as_fd().try_clone_to_owned().unwrap(),
                opened: 5 - i as u64,
            })
            .collect();
        s.send(batch).map_err(|_| "thread gone").unwrap();
        // (`bell` is the eventfd's descriptor, for the reactor's READ.)
        assert_eq!(s.bell(), std::os::fd::AsRawFd::as_raw_fd(&s.bell));
        let link = std::fs::read_link(format!("/proc/self/fd/{}", s.bell())).unwrap();
        assert_eq!(link.to_str(), Some("anon_inode:[eventfd]"));
        let mut count = [0u8; 8];
        rustix::io::read(&s.bell, &mut count).unwrap();
        assert_eq!(u64::from_ne_bytes(count), 1);
        let Answer::Done(mut r, calls) = s.answer() else {
            panic!("no answer after the bell")
        };
        r.sort_unstable();
        assert_eq!(r, vec![(10, 0), (11, 0)]);
        let grouped =
            reports_writeback_errors() && grouped_on(&files[0].as_fd().try_clone_to_owned().unwrap()).is_some();
        assert_eq!(calls, usize::from(grouped));
        drop(s);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Dropping the syncer waits for the batch in flight: once the drop returns, the batch
    /// was synced and answered (its bell rung), not left to a thread still running.
    #[test]
    fn dropping_the_syncer_waits_for_the_batch_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        // (Bytes to write back: the sync takes a while, the drop comes at once.)
        let files: Vec<_> = (0..4)
            .map(|i| {
                let p = dir.path().join(format!("f{i}"));
                std::fs::write(&p, vec![i as u8; 1 << 20]).unwrap();
                std::fs::File::open(&p).unwrap()
            })
            .collect();
        let s = Syncer::start().unwrap();
        let bell = s.bell.try_clone().unwrap();
        let batch = files
            .iter()
            .enumerate()
            .map(|(i, f)| Member {
                key: i,
                fd: f.as_fd().try_clone_to_owned().unwrap(),
                opened: i as u64,
            })
            .collect();
        s.send(batch).map_err(|_| "thread gone").unwrap();
        drop(s);
        let mut fds = [rustix::event::PollFd::new(&bell, rustix::event::PollFlags::IN)];
        let ready = rustix::event::poll(&mut fds, Some(&rustix::time::Timespec::default())).unwrap();
        assert_eq!(ready, 1, "the bell was not rung when the drop returned");
        let mut count = [0u8; 8];
        rustix::io::read(&bell, &mut count).unwrap();
        assert_eq!(u64::from_ne_bytes(count), 1);
    }

    /// The kernel release as /proc/sys/kernel/osrelease and uname(1) give it: 5.8 and
    /// later report writeback errors to syncfs(2).
    #[test]
    fn kernels_from_5_8_report_writeback_errors() {
        for (release, yes) in [
            ("5.8.0", true),
            ("5.7.19", false),
            ("6.1.0-13-amd64\n", true),
            ("5.10", true),
            ("10.0.0", true),
            ("4.19.0-26-cloud-amd64", false),
            ("5.8-rc1", true),
            ("3.99", false),
            ("5", false),
            ("", false),
            ("five.eight", false),
        ] {
            assert_eq!(at_least_5_8(release), yes, "{release:?}");
        }
        let uname = std::process::Command::new("uname")
            .arg("-r")
            .output()
            .expect("uname(1)");
        let release = String::from_utf8(uname.stdout).unwrap();
        assert_eq!(reports_writeback_errors(), at_least_5_8(&release), "{release}");
    }

    /// A file system of the test's: its directory on the disk (`temp_dir`) or on a tmpfs
    /// (/dev/shm), with whether its statfs(2) `f_type` is one of [`LOCAL_DISK`](crate::output::local::LOCAL_DISK) (`None`: no
    /// /dev/shm here).
    fn a_dir_on(base: &std::path::Path) -> Option<(tempfile::TempDir, bool)> {
        let dir = tempfile::tempdir_in(base).ok()?;
        let f_type = rustix::fs::statfs(dir.path()).unwrap().f_type as u32;
        Some((dir, crate::output::local::LOCAL_DISK.contains(&f_type)))
    }

    /// `path` written, and open.
    fn file_at(path: &std::path::Path) -> OwnedFd {
        std::fs::write(path, b"bytes").unwrap();
        std::fs::File::open(path).unwrap().into()
    }

    /// syncfs stands for fsync only for a regular file on a [`LOCAL_DISK`](crate::output::local::LOCAL_DISK) file system: such a
    /// file gives its file system's device; a directory, a pipe and a regular file of
    /// procfs give none.
    #[test]
    fn only_regular_files_of_grouped_file_systems_are_grouped() {
        let dirs = [a_dir_on(&std::env::temp_dir()), a_dir_on("/dev/shm".as_ref())];
        for (dir, grouped) in dirs.into_iter().flatten() {
            let fd = file_at(&dir.path().join("f"));
            let dev = rustix::fs::fstat(&fd).unwrap().st_dev;
            assert_eq!(grouped_on(&fd), grouped.then_some(dev), "{}", dir.path().display());
            let d: OwnedFd = std::fs::File::open(dir.path()).unwrap().into();
            assert_eq!(grouped_on(&d), None, "a directory");
        }
        let (r, _w) = rustix::pipe::pipe().unwrap();
        assert_eq!(grouped_on(&r), None, "a pipe");
        let proc: OwnedFd = std::fs::File::open("/proc/self/status").unwrap().into();
        assert_eq!(grouped_on(&proc), None, "procfs");
    }

    /// A batch of files on the disk and on a tmpfs, a pipe and a directory: one group per
    /// file system, each synced on its member opened first (lowest `opened`), the pipe and
    /// the directory fsynced alone (the pipe's EINVAL is its result, negated); without
    /// `errseq` every member alone, no syncfs.
    #[test]
    fn a_batch_is_grouped_by_file_system_on_the_member_opened_first() {
        let (disk, disk_grouped) = a_dir_on(&std::env::temp_dir()).unwrap();
        let (shm, shm_grouped) = a_dir_on("/dev/shm".as_ref()).expect("NOT RUN (counted as a failure): no /dev/shm");
        assert!(
            disk_grouped && shm_grouped,
            "NOT RUN (counted as a failure): TMPDIR ({}) is not on ext4, XFS, Btrfs or F2FS, or \
             /dev/shm not a tmpfs",
            std::env::temp_dir().display()
        );
        let (r, _w) = rustix::pipe::pipe().unwrap();
        // (index: what, opened)
        let fds: Vec<(OwnedFd, u64)> = vec![
            (file_at(&disk.path().join("f0")), 7),
            (file_at(&shm.path().join("g0")), 9),
            (r, 1),
            (file_at(&disk.path().join("f1")), 3),
            (file_at(&shm.path().join("g1")), 2),
            (file_at(&disk.path().join("f2")), 5),
            (std::fs::File::open(disk.path()).unwrap().into(), 0),
        ];
        let batch: Vec<Member> = fds
            .into_iter()
            .enumerate()
            .map(|(key, (fd, opened))| Member { key, fd, opened })
            .collect();
        let dev = |i: usize| rustix::fs::fstat(&batch[i].fd).unwrap().st_dev;
        let (groups, alone) = by_file_system(&batch, true);
        assert_eq!(groups, vec![(dev(0), vec![0, 3, 5], 3), (dev(1), vec![1, 4], 4)]);
        assert_eq!(alone, vec![2, 6]);
        assert_eq!(by_file_system(&batch, false), (vec![], (0..7).collect()));
        let einval = -rustix::io::Errno::INVAL.raw_os_error();
        let (mut results, calls) = sync_batch(batch, true);
        results.sort_unstable();
        assert_eq!(
            results,
            vec![(0, 0), (1, 0), (2, einval), (3, 0), (4, 0), (5, 0), (6, 0)]
        );
        assert_eq!(calls, 2);
    }
}
