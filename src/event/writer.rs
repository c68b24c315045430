//! The writer: write blocks queued in order, WRITE(_FIXED) at their offsets (or in order for
//! a stream), short writes, and settling what is in flight after a fatal error.

use crate::control::InFlight;
use crate::engine::blocks::align_up;
use crate::err;
use crate::error::Result;
use crate::event::*;
use crate::tag::Tag;
use std::time::{Duration, Instant};
use uring::{Completion, Op};

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

impl Loop<'_> {
    /// After a fatal error: submits the blocks already filled and waits (≤ 10 s) for every
    /// write and pipe drain in flight, recording what lands, so the control file covers
    /// all the bytes that reached the file. Connections are not driven any more.
    pub(crate) fn settle(&mut self) {
        // What connections hold in their blocks is good too: queue it (the aligned part,
        // under O_DIRECT), except where a RECV into the block is in flight, except for a
        // dropped mirror's (not another byte of it is written: `Loop::release_conn`), and
        // except for standard output, which only takes bytes in order.
        if !self.sh.tr.sequential {
            let trim = self.sh.tr.direct.then_some(self.sh.tr.align);
            for c in &mut self.conns {
                if c.op != InFlight::RecvDirect
                    && self.sh.tr.mirrors[c.mirror].standing != crate::transfer::mirror::Standing::Dropped
                    && let Some(job) = c.rx.job.as_mut()
                {
                    job.placer.release(trim, &mut self.sh.to_write);
                }
            }
        }
        let limit = Duration::from_secs(10);
        let deadline = Instant::now() + limit;
        // Wakes the wait below at the deadline even if no write ever completes.
        let _ = self.push(Op::Timeout { after: limit }, Tag::Ignore.encode());
        let busy =
            |l: &Self| l.writes_in_flight > 0 || l.conns.iter().any(|c| c.pipe.as_ref().is_some_and(|p| p.draining));
        loop {
            // Every write slot may be taken: submit the rest of the queue as slots free up.
            let _ = self.flush_writes();
            if !busy(self) || Instant::now() >= deadline {
                break;
            }
            if self.ring.submit_and_wait(1).is_err() {
                return;
            }
            while let Some(c) = self.ring.next_completion() {
                match Tag::decode(c.tag) {
                    Some(Tag::Write(idx)) => {
                        if let Some(slot) = self.slots[idx].take() {
                            self.writes_in_flight -= 1;
                            if c.result >= 0 && slot.done + c.result as usize >= slot.len {
                                self.sh.tr.landed.add(slot.off, slot.off + slot.fill as u64);
                            }
                        }
                    }
                    Some(Tag::Drain(idx)) => {
                        if let Some(p) = self.conns[idx].pipe.as_mut() {
                            p.draining = false;
                            if c.result > 0 {
                                self.sh.tr.landed.add(p.file_pos, p.file_pos + c.result as u64);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    pub(crate) fn write_completion(&mut self, s: usize, c: Completion) -> Result<()> {
        let buf = c.buf.expect("a write carries its block");
        let slot = self.slots[s].as_mut().expect("write slot in use");
        if c.result < 0 {
            self.writes_in_flight -= 1;
            let e = errno(c.result);
            let (what, hint) = if e == rustix::io::Errno::NOSPC {
                let need = self
                    .sh
                    .tr
                    .total
                    .map_or(0, |t| t.saturating_sub(self.sh.tr.landed.bytes()));
                ("disk full", self.sh.tr.out.space_hint(need))
            } else {
                ("write failed", String::new())
            };
            self.sh.fatal = Some(err!(
                LocalIo,
                "{what} at offset {} ({} bytes): {e}{hint}",
                slot.off + slot.done as u64,
                slot.len - slot.done
            ));
            return Ok(());
        }
        slot.done += c.result as usize;
        if c.result == 0 || slot.done < slot.len {
            if c.result == 0 || (self.sh.tr.direct && !(slot.done as u64).is_multiple_of(self.sh.tr.align)) {
                self.writes_in_flight -= 1;
                self.sh.fatal = Some(err!(
                    LocalIo,
                    "short write at offset {}: {} of {} bytes",
                    slot.off,
                    slot.done,
                    slot.len
                ));
                return Ok(());
            }
            let off = if self.sh.tr.sequential {
                u64::MAX
            } else {
                self.sh.tr.room().map_or(0, |r| r.base) + slot.off + slot.done as u64
            };
            let range = slot.done..slot.len;
            return self.push(
                Op::Write {
                    fd: self.out_fd,
                    buf,
                    range,
                    offset: off,
                },
                c.tag,
            );
        }
        let slot = self.slots[s].take().expect("write slot in use");
        self.writes_in_flight -= 1;
        self.sh.tr.landed.add(slot.off, slot.off + slot.fill as u64);
        drop(buf);
        // A block is free again: wake connections that waited for one.
        self.wake_waiting()
    }

    /// Drives on the connections that waited for a write block (one is free: this
    /// transfer's write completed, or, with transfers sharing the pool, another's).
    pub(crate) fn wake_waiting(&mut self) -> Result<()> {
        let waiting: Vec<usize> = self.waiting.drain(..).collect();
        for i in waiting {
            self.conns[i].waiting = false;
            self.after(i, Ok(()))?;
        }
        Ok(())
    }

    /// Submits queued blocks (in order, one at a time, for standard output).
    pub(crate) fn flush_writes(&mut self) -> Result<()> {
        if self.sh.tr.need_fallocate {
            self.sh.tr.need_fallocate = false;
            if let Some(total) = self.sh.tr.total.filter(|t| *t > 0 && self.sh.tr.file) {
                self.push(
                    Op::Fallocate {
                        fd: self.out_fd,
                        mode: 0,
                        offset: 0,
                        len: total,
                    },
                    Tag::Fallocate.encode(),
                )?;
            }
        }
        while !self.sh.to_write.is_empty() {
            if self.sh.tr.sequential && self.writes_in_flight > 0 {
                break;
            }
            if let Some(room) = self.sh.tr.room()
                && let Some(why) = self.beyond_room(room)
            {
                // Nothing past the device's end, and nothing at all of an image that
                // cannot fit: what is queued is dropped (not counted as landed).
                self.sh.to_write.clear();
                self.sh.fatal.get_or_insert(why);
                break;
            }
            let Some(s) = self.slots.iter().position(Option::is_none) else {
                break;
            };
            let mut wb = self.sh.to_write.pop_front().expect("non-empty");
            let mut buf = wb.buf.take().expect("queued block has its buffer");
            let mut len = wb.fill;
            if self.sh.tr.direct && !(len as u64).is_multiple_of(self.sh.tr.align) {
                // Only the file's last block may be short: pad it, ftruncate fixes the size.
                // On a device the pad is what the device holds there (read first).
                let padded = align_up(len as u64, self.sh.tr.align) as usize;
                match self.sh.tr.room() {
                    Some(room) => room.read_tail(room.base + wb.off + len as u64, &mut buf[len..padded])?,
                    None => buf[len..padded].fill(0),
                }
                len = padded;
            }
            if wb.fill == 0 {
                continue;
            }
            if let Some(d) = self.stream_digest.as_mut() {
                d.update(&buf[..wb.fill]);
            }
            if self.sh.tr.sequential {
                self.emitted += wb.fill as u64;
            }
            let offset = if self.sh.tr.sequential {
                u64::MAX
            } else {
                self.sh.tr.room().map_or(0, |r| r.base) + wb.off
            };
            self.slots[s] = Some(WriteSlot {
                off: wb.off,
                len,
                fill: wb.fill,
                done: 0,
            });
            self.writes_in_flight += 1;
            self.push(
                Op::Write {
                    fd: self.out_fd,
                    buf,
                    range: 0..len,
                    offset,
                },
                Tag::Write(s).encode(),
            )?;
        }
        Ok(())
    }

    /// A block device's limit: an image whose known size exceeds the room (refused before
    /// its first write), or a block of an image of unknown size that would cross the
    /// device's end. The fatal error to raise, or `None`.
    fn beyond_room(&self, room: &crate::output::device::Room) -> Option<crate::error::Error> {
        let what = &self.sh.tr.out_name;
        if let Some(total) = self.sh.tr.total {
            return room.refuse(total, what).map(|m| err!(LocalIo, "{m}"));
        }
        let wb = self.sh.to_write.front()?;
        let end = wb.off + align_up(wb.fill as u64, self.sh.tr.align);
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
}
