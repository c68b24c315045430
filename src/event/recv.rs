//! Receive paths into the write blocks: `direct` (read block, compaction), plain HTTP and
//! `ktls-direct` (RECV straight into the block), and `--limit-rate`'s budget per read.

use crate::control::*;
use crate::engine::place::{Blocks, Delimiter};
use crate::engine::splice::Pipe;
use crate::error::Kind;
use crate::event::pipe::*;
use crate::event::*;
use crate::tag::Tag;
use std::os::fd::AsRawFd;
use std::time::Instant;
use uring::Op;

impl Loop<'_> {
    /// Posts the RECV that the connection's state asks for.
    pub(crate) fn post_recv(&mut self, i: usize) -> std::result::Result<(), Fail> {
        // `--limit-rate`: the most this read may ask for, or wait for the bucket.
        let Some(budget) = self.pace_budget(i)? else {
            return Ok(());
        };
        let budget = usize::try_from(budget).unwrap_or(usize::MAX);
        let c = &mut self.conns[i];
        let fd = c.fd.as_ref().expect("open connection has a socket").as_raw_fd();
        // Engine splice: socket → pipe while the pipe has room; `drain` empties it to the file.
        if self.sh.splice
            && c.tls.is_none()
            && c.soft.is_none()
            && let Some(Delimiter::Length(rem)) = c.rx.job.as_ref().and_then(|j| j.placer.delimiter())
        {
            let rem = *rem;
            if c.pipe.is_none() {
                c.pipe = Some(Pipe::new().map_err(|e| Fail::fatal(Kind::LocalIo, format!("pipe: {e}")))?);
            }
            let pipe = c.pipe.as_mut().expect("pipe just ensured");
            if pipe.held == 0 && !pipe.draining {
                pipe.file_pos = c.rx.job.as_ref().expect("job").placer.pos();
            }
            if pipe.room() == 0 {
                // Full: the pipe → file completion drives this connection again.
                return Ok(());
            }
            let len = (pipe.room() as u64)
                .min(rem)
                .min(self.sh.opts.splice_chunk as u64)
                .min(budget as u64) as u32;
            let op = Op::Splice {
                fd_in: fd,
                off_in: None,
                fd_out: pipe.wr(),
                off_out: None,
                len,
                flags: SPLICE_F_MOVE,
            };
            c.op = InFlight::Splice;
            c.last_io = Instant::now();
            if let Some(bucket) = self.pace.as_mut() {
                bucket.take(u64::from(len));
                c.pace_taken = u64::from(len);
            }
            return self
                .ring
                .push(op, Tag::Conn(i).encode())
                .map_err(|_| Fail::fatal(Kind::Internal, "submission queue full"));
        }
        // Plain HTTP with a known length: receive straight into the write block.
        if c.tls.is_none()
            && c.soft.is_none()
            && let Some(job) = c.rx.job.as_mut()
            && let Some(Delimiter::Length(_)) = job.placer.delimiter()
        {
            let mut blocks = Blocks {
                pool: &self.sh.pool,
                queue: &mut self.sh.to_write,
            };
            let Some((buf, range)) = job.placer.recv_target(&mut blocks) else {
                self.wait_for_block(i);
                return Ok(());
            };
            return self.recv_into_block(i, fd, buf, range, budget);
        }
        // Software TLS with a known length and nothing waiting in the read block: receive
        // ciphertext straight into the write block, where its records are opened in place.
        if let Some(soft) = c.soft.as_mut()
            && c.rlo == c.rhi
            && let Some(job) = c.rx.job.as_mut()
            && let Some(Delimiter::Length(_)) = job.placer.delimiter()
        {
            let mut blocks = Blocks {
                pool: &self.sh.pool,
                queue: &mut self.sh.to_write,
            };
            let from = soft.cipher.map(|(_, hi)| hi);
            let Some((buf, range)) = job.placer.cipher_target(&mut blocks, from) else {
                self.wait_for_block(i);
                return Ok(());
            };
            soft.cipher = Some((soft.cipher.map_or(range.start, |(src, _)| src), range.start));
            return self.recv_into_block(i, fd, buf, range, budget);
        }
        // A record that straddled a write block's end waits in the read block: receive only
        // the rest of it there (its content is copied into the blocks), then go back to
        // the write block.
        // With the body's length known: the body bytes not yet landed (software TLS).
        let soft_rem = match c.rx.job.as_ref().and_then(|j| j.placer.delimiter()) {
            Some(Delimiter::Length(rem)) if c.soft.is_some() => Some(*rem),
            _ => None,
        };
        let mut rbuf = c.rbuf.take().expect("idle connection holds its read block");
        if c.rlo == c.rhi {
            c.rlo = 0;
            c.rhi = 0;
        } else if c.rhi == rbuf.len() {
            rbuf.copy_within(c.rlo..c.rhi, 0);
            c.rhi -= c.rlo;
            c.rlo = 0;
        }
        if c.rhi == rbuf.len() {
            c.rbuf = Some(rbuf);
            return Err(Fail::retry(Kind::Protocol, "a TLS record larger than the read block"));
        }
        let mut range = c.rhi..rbuf.len().min(c.rhi.saturating_add(budget));
        if let Some(rem) = soft_rem {
            let (need, known) = match ktls::soft::record_len(&rbuf[c.rlo..c.rhi]) {
                Ok(Some(n)) => (n, true),
                Ok(None) => (ktls::soft::HEADER_LEN, false),
                Err(_) => (range.end - c.rlo, false), // pump_soft reports it
            };
            // The rest of this record, and the next one too when the body surely has it:
            // a record cut by a write block's end is followed by one that would otherwise
            // be received into the few hundred bytes left in that block, then in two more
            // reads here (4 RECVs per block instead of 2). The next record is guessed to be
            // as long as this one (servers send full records); the read stays within the
            // body (`rem` plaintext bytes are at least as many wire bytes from `rlo`), and
            // a wrong guess only leaves a partial record here, read like any other.
            let ahead = if known && rem >= 2 * need as u64 { need } else { 0 };
            range.end = range.end.min((c.rlo + need + ahead).max(c.rhi + 1));
        }
        c.op = InFlight::Recv;
        c.last_io = Instant::now();
        if let Some(bucket) = self.pace.as_mut() {
            bucket.take(range.len() as u64);
            c.pace_taken = range.len() as u64;
        }
        self.ring
            .push(
                Op::Recv {
                    fd,
                    buf: rbuf,
                    range,
                    flags: 0,
                },
                Tag::Conn(i).encode(),
            )
            .map_err(|_| Fail::fatal(Kind::Internal, "submission queue full"))
    }

    /// RECV on connection `i` straight into `buf[range]`, a write block, capped at the
    /// `--limit-rate` budget (`usize::MAX`: none), as every other socket read.
    fn recv_into_block(
        &mut self,
        i: usize,
        fd: std::os::fd::RawFd,
        buf: uring::Buf,
        range: std::ops::Range<usize>,
        budget: usize,
    ) -> std::result::Result<(), Fail> {
        let range = range.start..range.end.min(range.start.saturating_add(budget));
        let c = &mut self.conns[i];
        c.op = InFlight::RecvDirect;
        c.last_io = Instant::now();
        if let Some(bucket) = self.pace.as_mut() {
            bucket.take(range.len() as u64);
            c.pace_taken = range.len() as u64;
        }
        self.ring
            .push(
                Op::Recv {
                    fd,
                    buf,
                    range,
                    flags: 0,
                },
                Tag::Conn(i).encode(),
            )
            .map_err(|_| Fail::fatal(Kind::Internal, "submission queue full"))
    }

    /// `--limit-rate`: how many bytes connection `i` may read now (`u64::MAX` without a
    /// limit), or `None` when the bucket is spent: the connection then waits in `paced`
    /// for the [`Tag::Pace`] TIMEOUT, pushed once for all waiters.
    fn pace_budget(&mut self, i: usize) -> std::result::Result<Option<u64>, Fail> {
        let now = self.started.elapsed();
        let Some(bucket) = self.pace.as_mut() else {
            return Ok(Some(u64::MAX));
        };
        if let Some(n) = bucket.allow(now, u64::MAX) {
            return Ok(Some(n));
        }
        let after = bucket.wait();
        if !self.paced.contains(&i) {
            self.paced.push_back(i);
        }
        if !self.pace_timer {
            self.pace_timer = true;
            self.ring
                .push(Op::Timeout { after }, Tag::Pace.encode())
                .map_err(|_| Fail::fatal(Kind::Internal, "submission queue full"))?;
        }
        Ok(None)
    }

    /// Parks connection `i` until a write block is free (once, however often it asks).
    pub(crate) fn wait_for_block(&mut self, i: usize) {
        if !self.conns[i].waiting {
            self.conns[i].waiting = true;
            self.waiting.push_back(i);
        }
    }
}
