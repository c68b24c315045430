//! `--threads`: a helper's ring woken when its part or placed transfer is told to stop.
//!
//! The flags another reactor posts to a helper's transfer (a part's stop, a placed file's
//! stop: [`super::PartOrder`], [`super::Posted`]) used to be read only on the helper's tick
//! (250 ms), so SIGINT at `--threads 2` took up to a tick to end a run. Each helper now
//! has an eventfd (eventfd(2)) of its own: the reactor that posts a stop writes it, and a
//! READ of it on the helper's ring (both backends, any kernel; [`Tag::Nudge`]) completes
//! at once, so the helper reads the flags then. The files placed on a helper share its
//! ring ([`crate::event::many`]): its reactor's lane holds the one READ, reads every
//! placed file's stop flag when it completes, and takes the new orders on its next turn
//! (the run's reactor writes the eventfd after each order too). The other posted values (a give-back, the
//! requests of the other reactors, slots) are still read on its tick and after its waits:
//! how a helper judges a server's refusal depends on them, and that stays as it was.
//!
//! A nudge that comes while the helper is between transfers stays in the eventfd's count:
//! the next transfer's (or run's) first READ completes at once, finds no stop and READs
//! again.

use std::os::fd::{AsFd, OwnedFd, RawFd};

use uring::{Completion, Op};

use crate::err;
use crate::error::Result;
use crate::event::Loop;
use crate::tag::Tag;

/// An eventfd (eventfd(2), close-on-exec): a helper's, or the bell the helpers ring.
///
/// # Errors
/// `LocalIo` when the kernel refuses it.
pub(super) fn eventfd() -> Result<OwnedFd> {
    rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).map_err(|e| err!(LocalIo, "eventfd: {e}"))
}

/// Adds 1 to eventfd `fd`'s count, waking the ring that READs it: a helper's, after a
/// stop was posted to it (a full count — never, at one write per stop — or a closed
/// helper loses nothing: its tick reads the flag too), or the run's bell after a report.
pub(crate) fn nudge(fd: &OwnedFd) {
    let _ = rustix::io::write(fd.as_fd(), &1u64.to_ne_bytes());
}

impl Loop<'_> {
    /// The helper's eventfd when this loop runs a part (placed transfers share a ring:
    /// its reactor's lane READs it for them all, [`crate::event::many`]).
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
                Some(buf) if again && self.sh.fatal.is_none() => self.arm_nudge(buf),
                _ => Ok(()),
            };
        }
        self.posted_stop();
        match c.buf {
            Some(buf) if self.sh.fatal.is_none() => self.arm_nudge(buf),
            _ => Ok(()),
        }
    }

    /// A stop posted to this loop's part (its owner ended the transfer) or placed
    /// transfer (a signal, or the run's failure) ends it as `Interrupted`.
    pub(crate) fn posted_stop(&mut self) {
        if self.sh.fatal.is_some() {
            return;
        }
        if self.part.as_ref().is_some_and(super::PartLink::stopped) {
            self.sh.fatal = Some(err!(Interrupted, "the reactor that owns the transfer ended it"));
        } else if let Some(name) = self.whole.as_ref().and_then(|w| w.posted.stop.get()) {
            self.sh.fatal = Some(err!(Interrupted, "interrupted by {name}"));
        }
    }
}
