//! The loop's side as a helper (`--threads`): a part it fetches for its owner gives some
//! back when asked; a placed transfer reads what the run's reactor posted and tells its
//! progress; the helper's eventfd READ (the nudge, [`crate::event::wire`]) ends a
//! stopped transfer at once.

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;

use uring::{Completion, Op};

use crate::err;
use crate::error::Result;
use crate::event::Loop;
use crate::event::wire::{PartLink, WholeReport};
use crate::report::Note;
use crate::tag::Tag;

impl Loop<'_> {
    /// A helper's part whose owner asked for some of it back (a reactor of the transfer is
    /// idle): the back half of what its queue holds, or with the queue empty the second
    /// half of its largest running body worth a second request (work stealing between
    /// reactors, asked by message). The range leaves this loop's plan and counts as landed
    /// here (its transfer ends without it); the owner queues it ([`crate::event::wire::Report::Gave`]).
    pub(crate) fn give_to_owner(&mut self) {
        if !self.part.as_ref().is_some_and(PartLink::asked) {
            return;
        }
        let now = self.shared.transfer.started.elapsed();
        let queued: u64 = self.shared.transfer.plan.segments().map(|s| s.end - s.start).sum();
        let taken = if self.shared.fatal.is_some() || !self.shared.transfer.plan.is_planned() {
            None
        } else if queued > 0 {
            // (Contiguous: the owner queues what it is given as one segment.)
            self.shared
                .transfer
                .plan
                .take_back(queued.div_ceil(2), now, false)
                .map(|t| (t.start, t.end, t.tries))
        } else {
            self.steal_victim(None)
                .and_then(|(v, at)| self.split_off(v, at))
                .map(|s| (s.start, s.end, s.tries))
        };
        if let Some((first, end, _)) = taken {
            self.shared.transfer.landed.add(first, end);
            self.shared.report.note(Note::GaveBack { first, last: end - 1 });
        }
        if let Some(p) = self.part.as_mut() {
            p.tell_gave(taken.map(|t| (t.0, t.1)), taken.map_or(0, |t| t.2));
        }
    }
}

impl Loop<'_> {
    /// Each tick of a placed transfer: a signal the run's reactor posted ends it; its
    /// progress goes to the run's reactor.
    pub(crate) fn tell_placed(&mut self) {
        if self.whole.is_none() {
            return;
        }
        self.posted_stop();
        self.tell_flight();
    }

    /// The requests the transfers on other reactors have on the wire to this placed
    /// transfer's origin, as last posted (0 for one not placed). Its helper adds those of
    /// its other files ([`crate::reactors::lanes`]'s `share_origins`, each turn).
    pub(crate) fn posted_others(&self) -> usize {
        self.whole
            .as_ref()
            .map_or(0, |w| w.posted.others.load(Ordering::Acquire))
    }

    /// Each turn of a placed transfer: a posted stop ends it (one that started after its
    /// helper's eventfd was read for it — the order's wake-up and the stop's taken as one,
    /// or its order waiting for a lane — has no other wake-up left to read it), a posted
    /// wake ends its parked slots' waits, and posted slots are added; its requests
    /// served, and whether a slot is parked, go to the run's reactor as soon as they
    /// change (a server's refusal is judged by them all: a stale count learns a cap too
    /// low).
    pub(crate) fn sync_placed(&mut self) {
        if self.whole.is_none() {
            return;
        }
        self.posted_stop();
        let Some(w) = self.whole.as_ref().filter(|_| self.shared.fatal.is_none()) else {
            return;
        };
        let wake = w.posted.wake.swap(false, Ordering::AcqRel);
        let more = w.posted.more.swap(0, Ordering::AcqRel);
        let pool = w.pool.clone().filter(|_| more > 0);
        let most = w.most;
        let told = w.told;
        if wake {
            // (One place freed: its one slot asks.)
            for o in 0..self.shared.origins.len() {
                self.wake_parked(o, 1);
            }
        }
        // (Room for a transfer that can use it: served in ranges, with work for another
        // connection, within what its ring was sized for.)
        let room = most.saturating_sub(self.conns.len());
        let pool = pool.filter(|_| self.shared.transfer.ranges && self.wants_connection() && room > 0);
        if let Some(pool) = pool {
            // Room other files left: more slots, and as many more it may open (its `-x`
            // was the slots it started with; what its bytes are worth still bounds them).
            self.grow(more.min(room), &pool);
            let left = self
                .shared
                .transfer
                .total
                .unwrap_or(0)
                .saturating_sub(self.shared.transfer.landed.bytes());
            let worth = crate::schedule::connections_for(
                left,
                self.shared.opts.min_split_size,
                self.conns.len(),
                self.shared.transfer.mirrors.len(),
            );
            self.shared.transfer.wanted = self.shared.transfer.wanted.max(worth);
        }
        // (A slot parked on the cap is told at once: a wake the run's reactor deals out
        // when another file ends goes to parked files, served-nothing ones first.)
        if (self.serving(0), self.parked()) != told {
            self.tell_flight();
        }
    }

    /// Tells the run's reactor what its line shows of this transfer, the requests the
    /// server serves of it and the slots it holds.
    fn tell_flight(&mut self) {
        let (serving, parked) = (self.serving(0), self.parked());
        let what = WholeReport::Flight {
            flight: self.flight(),
            serving,
            held: self.held(self.conns.len()),
            slots: self.conns.len(),
            parked,
        };
        let Some(w) = self.whole.as_mut() else {
            return;
        };
        w.told = (serving, parked);
        w.tell(what);
    }
}

impl Loop<'_> {
    /// The helper's eventfd when this loop runs a part (placed transfers share a ring:
    /// its reactor's lane READs it for them all, [`crate::reactors::lanes`]).
    fn nudge_fd(&self) -> Option<RawFd> {
        self.part.as_ref().map(|p| p.nudge)
    }

    /// READs the helper's eventfd into `buf` (8 bytes), when this loop has one.
    pub(crate) fn arm_nudge(&mut self, buf: uring::Buf) -> Result<()> {
        let Some(fd) = self.nudge_fd() else {
            return Ok(());
        };
        self.read_eventfd(fd, buf, Tag::Nudge)
    }

    /// READs eventfd `fd`'s count (eventfd(2): 8 bytes) into `buf`, tagged `tag`.
    pub(crate) fn read_eventfd(&mut self, fd: RawFd, buf: uring::Buf, tag: Tag) -> Result<()> {
        self.push(
            Op::Read {
                fd,
                buf,
                range: 0..8,
                offset: u64::MAX,
            },
            tag.encode(),
        )
    }

    /// The eventfd READ completed: a stop posted to this transfer ends it now (as its
    /// tick would); otherwise the READ goes again (also after EINTR or EAGAIN). Another
    /// failure (ECANCELED at the loop's end) is not renewed: the tick still reads the
    /// flags.
    pub(crate) fn on_nudge(&mut self, c: Completion) -> Result<()> {
        use rustix::io::Errno;
        if c.result < 0 {
            let again = [Errno::INTR, Errno::AGAIN]
                .map(|e| -e.raw_os_error())
                .contains(&c.result);
            return match c.buf {
                Some(buf) if again && self.shared.fatal.is_none() => self.arm_nudge(buf),
                _ => Ok(()),
            };
        }
        self.posted_stop();
        match c.buf {
            Some(buf) if self.shared.fatal.is_none() => self.arm_nudge(buf),
            _ => Ok(()),
        }
    }

    /// A stop posted to this loop's part (its owner ended the transfer) or placed
    /// transfer (a signal, or the run's failure) ends it as `Interrupted`.
    pub(crate) fn posted_stop(&mut self) {
        if self.shared.fatal.is_some() {
            return;
        }
        if self.part.as_ref().is_some_and(PartLink::stopped) {
            self.shared.fatal = Some(err!(Interrupted, "the reactor that owns the transfer ended it"));
        } else if let Some(name) = self.whole.as_ref().and_then(|w| w.posted.stop.get()) {
            self.shared.fatal = Some(err!(Interrupted, "interrupted by {name}"));
        }
    }
}
