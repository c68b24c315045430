//! A list's finished files made durable as a group (group commit): while one sync runs,
//! the files that finish beside it wait, and then go together — one syncfs(2) per file
//! system on the run's sync thread ([`crate::output::syncer`]) instead of an fsync(2)
//! each. A file that finishes alone, with no sync running, is fsynced alone on the ring
//! (a lone file does not wait for what other programs left unwritten on its file system).
//!
//! Each file is renamed into place only after its sync's result (its lane ends then, as
//! after its own fsync), so a crash never leaves a final name on bytes not yet durable.
//! Where the thread, its eventfd READ or a descriptor's duplicate cannot be had, the
//! files are fsynced alone on the ring, as before the group.

use super::run_lane::read_eventfd;
use super::{Running, Slot};
use crate::event::Reactor;
use crate::lane::RingCell;
use crate::output::syncer::{Answer, Member, Syncer};
use crate::tag::Tag;

/// The run's sync group: files waiting for their sync, and the sync in flight.
#[derive(Default)]
pub(super) struct SyncGroup {
    /// Started at the first batch of two files or more; its eventfd READ is on the
    /// reactor's lane while it lives.
    syncer: Option<Syncer>,
    /// The thread or its READ could not be started: each file is fsynced alone.
    refused: bool,
    /// Files (lane, file id) whose bytes are all in, waiting for the next sync.
    pending: Vec<(usize, usize)>,
    flight: Flight,
}

/// The sync in flight.
#[derive(Default)]
enum Flight {
    #[default]
    Idle,
    /// One file's fsync on its lane.
    One(usize, usize),
    /// A batch on the sync thread: its members (lane, file id) by key.
    Batch(Vec<(usize, usize)>),
}

/// The transfer on `lane` if it is file `id` and still waits for its sync.
fn member<'a, 'c>(slots: &'a mut [Slot<'c>], lane: usize, id: usize) -> Option<&'a mut Running<'c>> {
    match slots.get_mut(lane) {
        Some(Slot::Busy(r)) if r.id == id && r.syncing && r.transfer_loop.end_state.synced.is_none() => Some(r),
        _ => None,
    }
}

/// Pushes the fsync of the transfer on `lane` (file `id`) on the ring; a full SQ ends it.
fn fsync_alone(slots: &mut [Slot<'_>], lane: usize, id: usize) {
    if let Some(r) = member(slots, lane, id)
        && let Err(e) = r.transfer_loop.push_fsync()
    {
        r.failed = Some(e);
    }
}

impl SyncGroup {
    /// The transfer `r` on `lane` has all its bytes in and its output readied
    /// ([`crate::event::Loop::ready_to_sync`]): a regular file waits for the next sync;
    /// another output (a block device's room) is fsynced alone at once (its fsync flushes
    /// the device's cache; a syncfs would reach only the file system its node is on).
    pub(super) fn join(&mut self, lane: usize, r: &mut Running<'_>) {
        if r.transfer_loop.writes_a_file() {
            self.pending.push((lane, r.id));
        } else if let Err(e) = r.transfer_loop.push_fsync() {
            r.failed = Some(e);
        }
    }

    /// Starts the next sync when none runs: one waiting file alone on its lane, several
    /// as a batch on the sync thread (started now if it is not yet).
    pub(super) fn start(&mut self, cell: &RingCell, reactor: &mut Reactor, slots: &mut [Slot<'_>]) {
        if let Flight::One(lane, id) = self.flight
            && member(slots, lane, id).is_none()
        {
            self.flight = Flight::Idle;
        }
        if !matches!(self.flight, Flight::Idle) {
            return;
        }
        self.pending.retain(|&(lane, id)| member(slots, lane, id).is_some());
        match self.pending.len() {
            0 => {}
            1 if !self.refused => {
                let (lane, id) = self.pending.pop().expect("one");
                fsync_alone(slots, lane, id);
                self.flight = Flight::One(lane, id);
            }
            _ if self.refused || !self.arm(cell, reactor) => {
                self.refused = true;
                for (lane, id) in std::mem::take(&mut self.pending) {
                    fsync_alone(slots, lane, id);
                }
            }
            _ => self.send(slots),
        }
    }

    /// Sends the waiting files to the sync thread (a file whose descriptor cannot be
    /// duplicated is fsynced alone).
    fn send(&mut self, slots: &mut [Slot<'_>]) {
        let mut batch = Vec::with_capacity(self.pending.len());
        let mut keys = Vec::with_capacity(self.pending.len());
        for (lane, id) in std::mem::take(&mut self.pending) {
            let Some(r) = member(slots, lane, id) else { continue };
            let out = r.transfer_loop.output();
            match out.fd.try_clone() {
                Ok(fd) => {
                    batch.push(Member {
                        key: keys.len(),
                        fd,
                        opened: out.opened,
                    });
                    keys.push((lane, id));
                }
                Err(_) => fsync_alone(slots, lane, id),
            }
        }
        let Some(syncer) = self.syncer.as_ref().filter(|_| !batch.is_empty()) else {
            return;
        };
        match syncer.send(batch) {
            Ok(()) => self.flight = Flight::Batch(keys),
            Err(_) => {
                // (The thread is gone: each alone from now on.)
                self.refused = true;
                for (lane, id) in keys {
                    fsync_alone(slots, lane, id);
                }
            }
        }
    }

    /// The sync thread, started with its eventfd READ on the reactor's lane unless it
    /// runs already. Returns whether it runs.
    fn arm(&mut self, cell: &RingCell, reactor: &mut Reactor) -> bool {
        if self.syncer.is_some() {
            return true;
        }
        let Ok(syncer) = Syncer::start() else { return false };
        let Some(buf) = reactor.mail_block().ok().and_then(|p| p.alloc()) else {
            return false;
        };
        if read_eventfd(cell, syncer.bell(), buf, Tag::Synced).is_err() {
            return false;
        }
        self.syncer = Some(syncer);
        true
    }

    /// The sync thread's eventfd READ completed (`c`): the batch's results go to its
    /// files ([`SyncGroup::take_results`]), and the READ goes again (after a count, EINTR
    /// or EAGAIN; another failure, or a cancel, leaves the group without it: the next
    /// files go alone).
    pub(super) fn on_done(&mut self, cell: &RingCell, c: uring::Completion, slots: &mut [Slot<'_>]) {
        use rustix::io::Errno;
        self.take_results(slots);
        let Some(syncer) = &self.syncer else { return };
        let again = c.result >= 0
            || [Errno::INTR, Errno::AGAIN]
                .map(|e| -e.raw_os_error())
                .contains(&c.result);
        let renewed = match c.buf {
            Some(buf) if again => read_eventfd(cell, syncer.bell(), buf, Tag::Synced).is_ok(),
            _ => false,
        };
        if !renewed {
            // (No READ wakes the run now: a batch in flight is answered at a later turn —
            // its files' ticks wake the ring.)
            self.refused = true;
        }
    }

    /// The answer to the batch in flight, when the thread gave it: each file ends as after
    /// its own fsync ([`crate::event::Loop::synced_elsewhere`]); a file the answer does
    /// not name, or every file when the thread is gone, is fsynced alone on the ring.
    /// Called at each turn (a channel's `try_recv`), for a READ that could not be renewed.
    pub(super) fn take_results(&mut self, slots: &mut [Slot<'_>]) {
        let Some(syncer) = &self.syncer else { return };
        if !matches!(self.flight, Flight::Batch(_)) {
            return;
        }
        let (results, calls) = match syncer.answer() {
            Answer::NotYet => return,
            Answer::Done(results, calls) => (results, calls),
            Answer::Gone => {
                self.refused = true;
                (Vec::new(), 0)
            }
        };
        let Flight::Batch(keys) = std::mem::take(&mut self.flight) else {
            return;
        };
        let mut answered = vec![false; keys.len()];
        for (key, result) in results {
            if let Some(&(lane, id)) = keys.get(key)
                && let Some(r) = member(slots, lane, id)
            {
                answered[key] = true;
                r.transfer_loop.synced_elsewhere(result, keys.len() - 1, calls);
            }
        }
        for (&(lane, id), _) in keys.iter().zip(answered).filter(|(_, a)| !a) {
            fsync_alone(slots, lane, id);
        }
    }
}
