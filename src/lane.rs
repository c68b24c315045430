//! One ring, several tenants: the transfers a reactor runs at once (`-j`) each push and
//! reap through a [`LaneRing`], their own view of the reactor's one ring ([`RingCell`]).
//!
//! A lane's number rides in the top bits of every tag it pushes ([`LANE_SHIFT`]) and is
//! taken off the completion before the lane sees it, so each transfer's tags ([`crate::tag`])
//! stay its own: two transfers' `Conn(0)` never meet. A lane that waits for one of its own
//! completions (the end of a transfer: its fsync, its checksum's read-back) keeps the
//! completions of the other lanes that arrive meanwhile in the cell's stash, in order;
//! the reactor hands them to their lanes afterwards. Nothing is dropped, and a lane never
//! sees another's completion.
//!
//! Single-threaded, like the ring: a `RefCell` around it, borrowed only inside each call.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;

use uring::{Completion, Op, PushError};

use crate::io::Chosen;

/// Where a lane's number sits in a tag: bits 56..64 (the tags of [`crate::tag`] use 0..48).
pub(crate) const LANE_SHIFT: u32 = 56;
/// The lanes a cell serves (the last, [`RUN_LANE`], is the reactor's own: the signalfd).
pub(crate) const LANES: usize = 256;
/// The reactor's own lane: ops of the run, not of a transfer (the signalfd READ).
pub(crate) const RUN_LANE: u8 = 255;
const TAG_MASK: u64 = (1 << LANE_SHIFT) - 1;

/// The tag `tag` of lane `lane`, as the ring carries it.
pub(crate) fn on_lane(lane: u8, tag: u64) -> u64 {
    debug_assert_eq!(tag & !TAG_MASK, 0, "tag bits collide with the lane's");
    (u64::from(lane) << LANE_SHIFT) | tag
}

/// The lane and the tag a ring's `user_data` carries.
pub(crate) fn split(user_data: u64) -> (u8, u64) {
    ((user_data >> LANE_SHIFT) as u8, user_data & TAG_MASK)
}

/// The reactor's ring, lent to its lanes.
pub(crate) struct RingCell {
    chosen: RefCell<Chosen>,
    /// Completions reaped by one lane's wait that belong to other lanes (tags still
    /// carrying their lane), in the order the ring gave them.
    stash: RefCell<VecDeque<Completion>>,
    /// Per lane: ops pushed whose completion has not been handed to the lane yet.
    in_flight: RefCell<Vec<u32>>,
    /// The stash holds at least one completion (a lane's wait must not block then).
    stashed: Cell<usize>,
}

impl RingCell {
    /// Lends `chosen`'s ring to lanes until [`RingCell::into_inner`].
    pub(crate) fn new(chosen: Chosen) -> RingCell {
        RingCell {
            chosen: RefCell::new(chosen),
            stash: RefCell::new(VecDeque::new()),
            in_flight: RefCell::new(vec![0; LANES]),
            stashed: Cell::new(0),
        }
    }

    /// The ring back, with whatever is still in flight on it (the caller settles it).
    pub(crate) fn into_inner(self) -> Chosen {
        self.chosen.into_inner()
    }

    /// Lane `lane`'s view of the ring.
    pub(crate) fn lane(&self, lane: u8) -> LaneRing<'_> {
        LaneRing { cell: self, lane }
    }

    /// The ring as a whole, for what is not per lane (registering pools, the label).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Chosen) -> R) -> R {
        f(&mut self.chosen.borrow_mut())
    }

    /// Ops of lane `lane` not yet handed back to it.
    pub(crate) fn in_flight(&self, lane: u8) -> u32 {
        self.in_flight.borrow()[usize::from(lane)]
    }

    /// Submits what is queued and waits for at least `want` completions — at once when
    /// the stash holds some.
    ///
    /// # Errors
    /// io_uring_enter(2) (or epoll_wait(2)) errors.
    pub(crate) fn submit_and_wait(&self, want: usize) -> io::Result<usize> {
        let mut c = self.chosen.borrow_mut();
        if self.stashed.get() > 0 {
            c.ring.submit()
        } else {
            c.ring.submit_and_wait(want)
        }
    }

    /// The next completion of any lane (the stash first), with its lane; its tag is the
    /// lane's own.
    pub(crate) fn next_any(&self) -> Option<(u8, Completion)> {
        let c = match self.stash.borrow_mut().pop_front() {
            Some(c) => {
                self.stashed.set(self.stashed.get() - 1);
                c
            }
            None => self.chosen.borrow_mut().ring.next_completion()?,
        };
        Some(self.deliver(c))
    }

    fn deliver(&self, mut c: Completion) -> (u8, Completion) {
        let (lane, tag) = split(c.tag);
        c.tag = tag;
        let mut n = self.in_flight.borrow_mut();
        n[usize::from(lane)] = n[usize::from(lane)].saturating_sub(1);
        (lane, c)
    }

    /// A completion of lane `lane` that another lane's wait stashed, if any (its tag the
    /// lane's own).
    pub(crate) fn take_stashed(&self, lane: u8) -> Option<Completion> {
        if self.stashed.get() == 0 {
            return None;
        }
        let mut stash = self.stash.borrow_mut();
        let at = stash.iter().position(|c| split(c.tag).0 == lane)?;
        let c = stash.remove(at).expect("position is in the stash");
        drop(stash);
        self.stashed.set(self.stashed.get() - 1);
        Some(self.deliver(c).1)
    }

    /// Cancels every op of lane `lane` still in flight (each still completes once).
    ///
    /// # Errors
    /// As [`uring::Ring::cancel_where`].
    pub(crate) fn cancel_lane(&self, lane: u8) -> io::Result<()> {
        self.chosen.borrow_mut().ring.cancel_where(&|tag| split(tag).0 == lane)
    }
}

/// One lane's view of the reactor's ring: what it pushes carries its lane, what it reaps
/// is its own. The same calls as [`uring::Ring`]'s.
#[derive(Clone, Copy)]
pub(crate) struct LaneRing<'c> {
    cell: &'c RingCell,
    lane: u8,
}

impl<'c> LaneRing<'c> {
    /// The cell this lane is a view of.
    pub(crate) fn cell(&self) -> &'c RingCell {
        self.cell
    }

    /// As [`uring::Ring::push`], the tag marked with this lane.
    ///
    /// # Errors
    /// As [`uring::Ring::push`] (the op comes back in the error).
    pub(crate) fn push(&self, op: Op, tag: u64) -> Result<(), PushError> {
        let op = self.own(op);
        self.cell.chosen.borrow_mut().ring.push(op, on_lane(self.lane, tag))?;
        self.cell.in_flight.borrow_mut()[usize::from(self.lane)] += 1;
        Ok(())
    }

    /// As [`uring::Ring::push_with_timeout`], the tag marked with this lane.
    ///
    /// # Errors
    /// As [`uring::Ring::push_with_timeout`].
    pub(crate) fn push_with_timeout(&self, op: Op, tag: u64, timeout: std::time::Duration) -> Result<(), PushError> {
        let op = self.own(op);
        self.cell
            .chosen
            .borrow_mut()
            .ring
            .push_with_timeout(op, on_lane(self.lane, tag), timeout)?;
        self.cell.in_flight.borrow_mut()[usize::from(self.lane)] += 1;
        Ok(())
    }

    /// `op` with the tags it names (an ASYNC_CANCEL's target) on this lane.
    fn own(&self, op: Op) -> Op {
        match op {
            Op::Cancel { target_tag } => Op::Cancel {
                target_tag: on_lane(self.lane, target_tag),
            },
            op => op,
        }
    }

    /// As [`uring::Ring::submit_and_wait`]; returns at once when a completion of this
    /// lane is in the stash.
    ///
    /// # Errors
    /// As [`uring::Ring::submit_and_wait`].
    pub(crate) fn submit_and_wait(&self, want: usize) -> io::Result<usize> {
        let mine = self.cell.stashed.get() > 0 && self.cell.stash.borrow().iter().any(|c| split(c.tag).0 == self.lane);
        let mut c = self.cell.chosen.borrow_mut();
        if mine {
            c.ring.submit()
        } else {
            c.ring.submit_and_wait(want)
        }
    }

    /// This lane's next completion (its tag without the lane); other lanes' completions
    /// reaped on the way go to the stash.
    pub(crate) fn next_completion(&self) -> Option<Completion> {
        if self.cell.stashed.get() > 0 {
            let mut stash = self.cell.stash.borrow_mut();
            if let Some(at) = stash.iter().position(|c| split(c.tag).0 == self.lane) {
                let c = stash.remove(at).expect("position is in the stash");
                drop(stash);
                self.cell.stashed.set(self.cell.stashed.get() - 1);
                return Some(self.cell.deliver(c).1);
            }
        }
        loop {
            let c = self.cell.chosen.borrow_mut().ring.next_completion()?;
            if split(c.tag).0 == self.lane {
                return Some(self.cell.deliver(c).1);
            }
            self.cell.stash.borrow_mut().push_back(c);
            self.cell.stashed.set(self.cell.stashed.get() + 1);
        }
    }

    /// As [`uring::Ring::fixed_file_ops`].
    pub(crate) fn fixed_file_ops(&self) -> u64 {
        self.cell.chosen.borrow().ring.fixed_file_ops()
    }
}
