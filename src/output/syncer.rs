//! Finished files made durable together: a thread of the run's reactor calls syncfs(2)
//! once per file system for a batch of files whose bytes are all in, instead of one
//! fsync(2) each (group commit). On a file system without a journal each fsync writes
//! its inode and flushes the device's cache on its own; syncfs writes the batch's inodes
//! and flushes once.
//!
//! syncfs stands for fsync only where it is as strong: regular files, on a local file
//! system whose `sync_fs` writes and flushes everything ([`GROUPED`]: ext2/3/4, XFS,
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

/// File systems (statfs(2) `f_type`) whose syncfs writes every dirty inode and page and
/// flushes the device as fsync would: ext2/3/4, XFS, Btrfs, F2FS, tmpfs.
const GROUPED: [u32; 5] = [
    linux_raw_sys::general::EXT4_SUPER_MAGIC,
    linux_raw_sys::general::XFS_SUPER_MAGIC,
    linux_raw_sys::general::BTRFS_SUPER_MAGIC,
    linux_raw_sys::general::F2FS_SUPER_MAGIC,
    linux_raw_sys::general::TMPFS_MAGIC,
];

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
    let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") else {
        return false;
    };
    let mut parts = release.trim().split(['.', '-']).map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (5, 8),
        _ => false,
    }
}

/// The device number of the file system `fd` is on, when syncfs(2) may stand for its
/// fsync: a regular file on a [`GROUPED`] file system (statfs(2) `f_type`). `None`:
/// fsync it.
fn grouped_on(fd: &OwnedFd) -> Option<u64> {
    let st = rustix::fs::fstat(fd).ok()?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return None;
    }
    let fs = rustix::fs::fstatfs(fd).ok()?;
    GROUPED.contains(&(fs.f_type as u32)).then_some(st.st_dev)
}

/// Syncs `batch`: one syncfs(2) per file system for the members [`grouped_on`] one (with
/// `errseq`: the kernel reports writeback errors to syncfs), on the member opened first,
/// each member fsynced on its own when it fails; every other member fsynced on its own.
/// Returns each member's result (0 or a negated errno) and the syncfs calls made.
fn sync_batch(batch: Vec<Member>, errseq: bool) -> (Vec<(usize, i32)>, usize) {
    let negated = |e: rustix::io::Errno| -e.raw_os_error();
    let fsync = |m: &Member| (m.key, rustix::fs::fsync(&m.fd).map_or_else(negated, |()| 0));
    let mut out = Vec::with_capacity(batch.len());
    // (device, members on it, the one opened first)
    let mut groups: Vec<(u64, Vec<usize>, usize)> = Vec::new();
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
            None => out.push(fsync(m)),
        }
    }
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
    /// eventfd rings, and the thread ends with the syncer.
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
}
