//! The writer: queued write blocks submitted in order as WRITE(_FIXED) at their offsets
//! (in order, one at a time, for a stream), short writes resubmitted, a block device's
//! end kept, and engine `splice`'s pipe → file SPLICE. Each completion's handler says what
//! happened ([`Written`], an error) and the loop acts on it.

use uring::{Completion, Op};

use super::blocks::align_up;
use super::sink::Sink;
use super::splice::Pipe;
use crate::err;
use crate::error::{Error, Result};
use crate::lane::LaneRing;
use crate::output::device::Room;
use crate::tag::Tag;
use crate::transfer::Transfer;

/// SPLICE_F_MOVE (splice(2)): move pages instead of copying when the kernel can.
pub(crate) const SPLICE_F_MOVE: u32 = 1;

/// Largest preallocation made by fallocate(2) on the reactor's own thread, bytes, on a
/// local disk file system ([`crate::output::Output::on_local_disk`]: elsewhere the call
/// may wait on a server or a daemon); a larger one, or one elsewhere, goes on the ring. io_uring runs every FALLOCATE on an io-wq worker (it may block:
/// io_uring/sync.c), so each costs a worker's wake-up and a completion handed back to the
/// reactor, a wake-up of its own when it sleeps: per small file of a list, more than the
/// call. On ext4 here one of up to 64 MiB takes 10–30 µs (median of 15; 256 MiB: 0.46 ms,
/// up to 5 ms; 1 GiB: 1.4 ms), so the line is drawn below those.
pub(crate) const INLINE_FALLOCATE: u64 = 32 << 20;

/// What [`Sink::flush`] did besides submitting writes.
pub(crate) struct Flushed {
    /// The error that ends the transfer when the output cannot take what is queued (a
    /// block device's end).
    pub(crate) ended: Option<Error>,
    /// The result of the preallocation made in place ([`INLINE_FALLOCATE`]): 0, or a
    /// negated errno, as the FALLOCATE's completion would carry.
    pub(crate) fallocated: Option<i32>,
}

/// One write in flight.
pub(crate) struct WriteSlot {
    pub(crate) off: u64,
    /// Bytes submitted (padded to the alignment for the last O_DIRECT block).
    pub(crate) len: usize,
    /// Real body bytes in the block.
    pub(crate) fill: usize,
    /// Bytes the kernel has written so far.
    pub(crate) done: usize,
}

/// What a write's completion did.
pub(crate) enum Written {
    /// The rest of a short write was submitted again.
    Pending,
    /// The block landed: it is free again (connections waiting for one may go on).
    Landed,
    /// The write failed: the transfer cannot go on.
    Failed(Error),
}

/// Pushes `op` with `tag` on `ring`.
///
/// # Errors
/// `Internal` when the submission queue is full (the ring was sized too small).
fn push(ring: &LaneRing<'_>, op: Op, tag: u64) -> Result<()> {
    ring.push(op, tag)
        .map_err(|_| err!(Internal, "submission queue full (ring sized too small)"))
}

impl Sink {
    /// Submits queued blocks on `ring` (in order, one at a time, for a stream), after the
    /// preallocation a new file of known size asks for first (fallocate(2) in place up to
    /// [`INLINE_FALLOCATE`] bytes, else a FALLOCATE on the ring). Returns what happened
    /// besides ([`Flushed`]); when the preallocation in place failed, before any write.
    ///
    /// # Errors
    /// A full submission queue, or a failed read of a device's tail for the padding.
    pub(crate) fn flush(&mut self, ring: &LaneRing<'_>, transfer: &mut Transfer) -> Result<Flushed> {
        let mut fallocated = None;
        if transfer.need_fallocate {
            transfer.need_fallocate = false;
            if let Some(total) = transfer.total.filter(|t| *t > 0 && transfer.file) {
                transfer.out.grows_to(total);
                if total <= INLINE_FALLOCATE && transfer.out.on_local_disk() {
                    let done = rustix::fs::fallocate(&transfer.out.fd, rustix::fs::FallocateFlags::empty(), 0, total);
                    if let Err(e) = done {
                        // (Judged before any write goes: ENOSPC ends the transfer, a
                        // refusal lets the writes go on a next flush.)
                        return Ok(Flushed {
                            ended: None,
                            fallocated: Some(-e.raw_os_error()),
                        });
                    }
                    fallocated = Some(0);
                } else {
                    let op = Op::Fallocate {
                        fd: self.out_fd,
                        mode: 0,
                        offset: 0,
                        len: total,
                    };
                    push(ring, op, Tag::Fallocate.encode())?;
                }
            }
        }
        while !self.to_write.is_empty() {
            if transfer.sequential && self.writes_in_flight > 0 {
                break;
            }
            if let Some(room) = transfer.room()
                && let Some(why) = self.beyond_room(transfer, room)
            {
                // Nothing past the device's end, and nothing at all of an image that
                // cannot fit: what is queued is dropped (not counted as landed).
                self.to_write.clear();
                return Ok(Flushed {
                    ended: Some(why),
                    fallocated,
                });
            }
            let Some(s) = self.slots.iter().position(Option::is_none) else {
                break;
            };
            self.submit_next(ring, transfer, s)?;
        }
        Ok(Flushed {
            ended: None,
            fallocated,
        })
    }

    /// Submits the first queued block as write slot `s`.
    fn submit_next(&mut self, ring: &LaneRing<'_>, transfer: &Transfer, s: usize) -> Result<()> {
        let mut wb = self.to_write.pop_front().expect("non-empty");
        let mut buf = wb.buf.take().expect("queued block has its buffer");
        let mut len = wb.fill;
        if transfer.direct && !(len as u64).is_multiple_of(transfer.align) {
            // Only the file's last block may be short: pad it, ftruncate fixes the size.
            // On a device the pad is what the device holds there (read first).
            let padded = align_up(len as u64, transfer.align) as usize;
            match transfer.room() {
                Some(room) => room.read_tail(room.base + wb.off + len as u64, &mut buf[len..padded])?,
                None => buf[len..padded].fill(0),
            }
            len = padded;
        }
        if wb.fill == 0 {
            return Ok(());
        }
        if let Some(d) = self.stream_digest.as_mut() {
            d.update(&buf[..wb.fill]);
        }
        if transfer.sequential {
            self.emitted += wb.fill as u64;
        }
        let offset = if transfer.sequential {
            u64::MAX
        } else {
            transfer.room().map_or(0, |r| r.base) + wb.off
        };
        self.slots[s] = Some(WriteSlot {
            off: wb.off,
            len,
            fill: wb.fill,
            done: 0,
        });
        self.writes_in_flight += 1;
        if !transfer.sequential {
            transfer.out.grows_to(offset + len as u64);
        }
        let op = Op::Write {
            fd: self.out_fd,
            buf,
            range: 0..len,
            offset,
        };
        push(ring, op, Tag::Write(s).encode())
    }

    /// A block device's limit: an image whose known size exceeds the room (refused before
    /// its first write), or a block of an image of unknown size that would cross the
    /// device's end. The fatal error to raise, or `None`.
    fn beyond_room(&self, transfer: &Transfer, room: &Room) -> Option<Error> {
        let what = &transfer.out_name;
        if let Some(total) = transfer.total {
            return room.refuse(total, what).map(|m| err!(LocalIo, "{m}"));
        }
        let wb = self.to_write.front()?;
        let end = wb.off + align_up(wb.fill as u64, transfer.align);
        // (What the device holds then is said once the transfer has ended, from the bytes
        // that landed: `app::fetch`.)
        (end > room.len).then(|| {
            err!(
                LocalIo,
                "the image (unknown size) goes past the end of {what} ({} bytes from offset {})",
                room.len,
                room.base
            )
        })
    }

    /// The write of slot `s` completed (`c`): what landed is added to `transfer.landed`; a short
    /// write's rest is submitted again on `ring`.
    ///
    /// # Errors
    /// A full submission queue.
    pub(crate) fn write_done(
        &mut self,
        ring: &LaneRing<'_>,
        transfer: &mut Transfer,
        s: usize,
        c: Completion,
    ) -> Result<Written> {
        let buf = c.buf.expect("a write carries its block");
        let slot = self.slots[s].as_mut().expect("write slot in use");
        if c.result < 0 {
            self.writes_in_flight -= 1;
            let e = rustix::io::Errno::from_raw_os_error(-c.result);
            // (ENOSPC: how much is still to land is added once the other writes in flight
            // have landed: `event::ends::finish`.)
            let what = if e == rustix::io::Errno::NOSPC {
                "disk full"
            } else {
                "write failed"
            };
            let failed = err!(
                LocalIo,
                "{what} at offset {} ({} bytes): {e}",
                slot.off + slot.done as u64,
                slot.len - slot.done
            );
            return Ok(Written::Failed(if e == rustix::io::Errno::NOSPC {
                failed.out_of_space()
            } else {
                failed
            }));
        }
        slot.done += c.result as usize;
        if c.result == 0 || slot.done < slot.len {
            if c.result == 0 || (transfer.direct && !(slot.done as u64).is_multiple_of(transfer.align)) {
                self.writes_in_flight -= 1;
                return Ok(Written::Failed(err!(
                    LocalIo,
                    "short write at offset {}: {} of {} bytes",
                    slot.off,
                    slot.done,
                    slot.len
                )));
            }
            let offset = if transfer.sequential {
                u64::MAX
            } else {
                transfer.room().map_or(0, |r| r.base) + slot.off + slot.done as u64
            };
            let range = slot.done..slot.len;
            let op = Op::Write {
                fd: self.out_fd,
                buf,
                range,
                offset,
            };
            push(ring, op, c.tag)?;
            return Ok(Written::Pending);
        }
        let slot = self.slots[s].take().expect("write slot in use");
        self.writes_in_flight -= 1;
        transfer.landed.add(slot.off, slot.off + slot.fill as u64);
        drop(buf);
        Ok(Written::Landed)
    }

    /// While the transfer settles after a fatal error: the write of slot `s` completed
    /// with `res`; a whole write counts as landed, nothing is submitted again.
    pub(crate) fn write_reaped(&mut self, transfer: &mut Transfer, s: usize, res: i32) {
        if let Some(slot) = self.slots[s].take() {
            self.writes_in_flight -= 1;
            if res >= 0 && slot.done + res as usize >= slot.len {
                transfer.landed.add(slot.off, slot.off + slot.fill as u64);
            }
        }
    }

    /// Engine splice: SPLICE `pipe` → file at the held bytes' offset (pushed on `ring`
    /// with `tag`) once the pipe holds `write_threshold` bytes, is full, or holds the end
    /// of the response (`ending`: the body is complete or the socket at its end).
    ///
    /// # Errors
    /// A full submission queue.
    pub(crate) fn drain(
        &self,
        ring: &LaneRing<'_>,
        pipe: &mut Pipe,
        tag: u64,
        write_threshold: usize,
        ending: bool,
    ) -> Result<()> {
        if pipe.draining || pipe.held == 0 {
            return Ok(());
        }
        // A pipe fills by slots (pages), not bytes: spliced socket data may use a page per
        // MSS-sized fragment, so wait for at most an eighth of the byte capacity, or a socket
        // SPLICE could block on a pipe that is "full" while we wait for the threshold.
        let threshold = write_threshold.min(pipe.cap / 8);
        if pipe.held < threshold && pipe.room() > 0 && !ending {
            return Ok(());
        }
        pipe.draining = true;
        let op = Op::Splice {
            fd_in: pipe.rd(),
            off_in: None,
            fd_out: self.out_fd,
            off_out: Some(pipe.file_pos),
            len: pipe.held.min(u32::MAX as usize) as u32,
            flags: SPLICE_F_MOVE,
        };
        push(ring, op, tag)
    }

    /// A pipe → file SPLICE of `pipe` completed with `res`: what it moved is added to
    /// `transfer.landed`. Returns the error that ends the transfer when it failed or moved
    /// nothing.
    pub(crate) fn drained(&mut self, transfer: &mut Transfer, pipe: &mut Pipe, res: i32) -> Option<Error> {
        pipe.draining = false;
        if res <= 0 {
            let at = pipe.file_pos;
            let e = if res == 0 {
                "nothing written".to_owned()
            } else {
                rustix::io::Errno::from_raw_os_error(-res).to_string()
            };
            return Some(err!(LocalIo, "splice to {} at offset {at}: {e}", transfer.out_name));
        }
        let n = res as usize;
        transfer.out.grows_to(pipe.file_pos + n as u64);
        transfer.landed.add(pipe.file_pos, pipe.file_pos + n as u64);
        pipe.file_pos += n as u64;
        pipe.held -= n;
        None
    }

    /// While the transfer settles after a fatal error: a pipe → file SPLICE of `pipe`
    /// completed with `res`; what it moved counts as landed.
    pub(crate) fn drain_reaped(transfer: &mut Transfer, pipe: &mut Pipe, res: i32) {
        pipe.draining = false;
        if res > 0 {
            transfer.landed.add(pipe.file_pos, pipe.file_pos + res as u64);
        }
    }
}
