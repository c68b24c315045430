//! Finished files made durable together: a thread of the run's reactor calls syncfs(2)
//! once per file system for a batch of files whose bytes are all in, instead of one
//! fsync(2) each (group commit). On a file system without a journal each fsync writes
//! its inode and flushes the device's cache on its own; syncfs writes the batch's inodes
//! and flushes once.
//!
//! A file's writeback errors reach syncfs through its file system's error sequence
//! (`errseq_t`, Linux 5.8: syncfs reports an error met since the descriptor it is called
//! on was opened, or not yet seen by anyone): each file system's syncfs is called on the
//! batch's descriptor opened first ([`Member::opened`]), so an error met by any member's
//! writeback since that member was opened is reported to all of that file system's
//! members.
//!
//! The thread owns duplicates of the members' descriptors (closed when their batch is
//! done), answers through a channel and rings an eventfd that the reactor READs on its
//! ring. It ends when the [`Syncer`] is dropped (joined there: nothing of it outlives
//! the run).
//!
//! Sources: syncfs(2), errseq (Documentation/core-api/errseq.rst), eventfd(2).

use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::sync::mpsc::{Receiver, Sender, channel};
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

/// The sync thread, its channels and its eventfd.
pub(crate) struct Syncer {
    to: Option<Sender<Vec<Member>>>,
    back: Receiver<Vec<(usize, i32)>>,
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
        let (to, from) = channel::<Vec<Member>>();
        let (answer, back) = channel();
        let thread = std::thread::Builder::new()
            .name("ringdl-sync".to_owned())
            .spawn(move || {
                while let Ok(batch) = from.recv() {
                    if answer.send(sync_batch(batch)).is_err() {
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

    /// The results of the batches done since the last call: each member's key and the
    /// syncfs(2) result of its file system (0, or a negated errno).
    pub(crate) fn results(&self) -> Vec<(usize, i32)> {
        self.back.try_iter().flatten().collect()
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

/// One syncfs(2) per file system of `batch` (its members grouped by fstat(2)'s `st_dev`),
/// on the member opened first; every member gets its file system's result. A member
/// whose fstat fails gets that error.
fn sync_batch(batch: Vec<Member>) -> Vec<(usize, i32)> {
    let negated = |e: rustix::io::Errno| -e.raw_os_error();
    let mut devs: Vec<(u64, usize)> = Vec::new();
    let mut out = Vec::with_capacity(batch.len());
    let mut on: Vec<Option<u64>> = Vec::with_capacity(batch.len());
    for (i, m) in batch.iter().enumerate() {
        match rustix::fs::fstat(&m.fd) {
            Ok(st) => {
                let dev = st.st_dev;
                match devs.iter_mut().find(|d| d.0 == dev) {
                    Some(d) if batch[d.1].opened <= m.opened => {}
                    Some(d) => d.1 = i,
                    None => devs.push((dev, i)),
                }
                on.push(Some(dev));
            }
            Err(e) => {
                out.push((m.key, negated(e)));
                on.push(None);
            }
        }
    }
    for (dev, first) in devs {
        let r = rustix::fs::syncfs(&batch[first].fd).map_or_else(negated, |()| 0);
        for (m, _) in batch.iter().zip(&on).filter(|(_, d)| **d == Some(dev)) {
            out.push((m.key, r));
        }
    }
    out
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
        let mut r = s.results();
        r.sort_unstable();
        assert_eq!(r, vec![(10, 0), (11, 0)]);
        drop(s);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
