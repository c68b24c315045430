//! The reactor's own lane of a run of many files: the signalfd READ (SIGINT/SIGTERM end
//! every transfer), the helpers' eventfd READ (their reports) and, on a helper, its own
//! eventfd READ (a new file placed on it, or a posted stop).

use std::os::fd::RawFd;

use uring::Op;

use super::placing::on_bell;
use super::{Many, Slot};
use crate::err;
use crate::error::Result;
use crate::event::Reactor;
use crate::lane::{RUN_LANE, RingCell};
use crate::tag::Tag;

/// A completion of the reactor's own lane: the signalfd's READ ([`on_signal`]), the
/// helpers' eventfd's ([`on_bell`]) or, on a helper, its own eventfd's ([`on_nudge`]).
pub(super) fn on_run_lane(
    cell: &RingCell,
    (many, reactor): (&Many, &Reactor),
    c: uring::Completion,
    slots: &mut [Slot<'_>],
    interrupted: &mut Option<&'static str>,
) -> Result<()> {
    match Tag::decode(c.tag) {
        Some(Tag::Mail) => on_bell(cell, reactor, c, slots),
        Some(Tag::Nudge) => on_nudge(cell, many.placed, c, slots),
        _ => on_signal(cell, many.signals, c, slots, interrupted),
    }
}

/// Reads the next SIGINT/SIGTERM from signalfd `fd` into `buf` (on the reactor's lane).
pub(super) fn read_signal(cell: &RingCell, fd: RawFd, buf: uring::Buf) -> Result<()> {
    cell.lane(RUN_LANE)
        .push(
            Op::Read {
                fd,
                buf,
                range: 0..uring::signal::SIGINFO_SIZE,
                offset: u64::MAX,
            },
            Tag::Signal.encode(),
        )
        .map_err(|_| err!(Internal, "submission queue full (ring sized too small)"))
}

/// READs eventfd `fd`'s count (eventfd(2): 8 bytes) into `buf` on the reactor's lane,
/// tagged `tag`: the helpers' bell ([`Tag::Mail`]: a helper reported) or, on a helper, its
/// own eventfd ([`Tag::Nudge`]: a file placed on it, or a stop posted).
pub(super) fn read_eventfd(cell: &RingCell, fd: RawFd, buf: uring::Buf, tag: Tag) -> Result<()> {
    cell.lane(RUN_LANE)
        .push(
            Op::Read {
                fd,
                buf,
                range: 0..8,
                offset: u64::MAX,
            },
            tag.encode(),
        )
        .map_err(|_| err!(Internal, "submission queue full (ring sized too small)"))
}

/// A helper's eventfd READ completed (a file was placed on it, or a stop posted): each
/// placed transfer reads its stop now, the new files start at the turn's top, and the
/// READ goes again (also after EINTR or EAGAIN; another failure is not renewed: the
/// transfers' ticks read their stops, and the run asks its feed each turn).
fn on_nudge(cell: &RingCell, fd: Option<RawFd>, c: uring::Completion, slots: &mut [Slot<'_>]) -> Result<()> {
    use rustix::io::Errno;
    let again = c.result >= 0
        || [Errno::INTR, Errno::AGAIN]
            .map(|e| -e.raw_os_error())
            .contains(&c.result);
    for s in slots.iter_mut() {
        if let Slot::Busy(r) = s {
            r.transfer_loop.posted_stop();
        }
    }
    match (again, c.buf, fd) {
        (true, Some(buf), Some(fd)) => read_eventfd(cell, fd, buf, Tag::Nudge),
        _ => Ok(()),
    }
}

/// A completion of the reactor's own lane: a signal ends every transfer in flight as
/// `Interrupted` (each keeps its `.part` and control file), and the signalfd is read
/// again (from `signals`) for the next one.
pub(super) fn on_signal(
    cell: &RingCell,
    signals: Option<RawFd>,
    c: uring::Completion,
    slots: &mut [Slot<'_>],
    interrupted: &mut Option<&'static str>,
) -> Result<()> {
    if Tag::decode(c.tag) != Some(Tag::Signal) {
        return Ok(());
    }
    if c.result <= 0 {
        // (A failed or cancelled read: read again, or a later Ctrl-C would go unseen.)
        return match (signals, c.buf) {
            (Some(fd), Some(buf)) if c.result != -(rustix::io::Errno::CANCELED.raw_os_error()) => {
                read_signal(cell, fd, buf)
            }
            _ => Ok(()),
        };
    }
    let name = crate::tag::signal_name(c.buf.as_deref());
    *interrupted = Some(name);
    for s in slots.iter_mut() {
        match s {
            Slot::Busy(r) => r.transfer_loop.shared.fatal = Some(err!(Interrupted, "interrupted by {name}")),
            // (Its reactor's ring is woken to end it, keeping its `.part` and control file.)
            Slot::Placed(a) => {
                a.posted.post_stop(name);
            }
            _ => {}
        }
    }
    match (signals, c.buf) {
        (Some(fd), Some(buf)) => read_signal(cell, fd, buf),
        _ => Ok(()),
    }
}
