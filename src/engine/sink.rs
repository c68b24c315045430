//! The data path's state for one transfer ([`Sink`]): the write pool and the queue of full
//! blocks, the write slots in flight, the output descriptor, the in-order digest of a
//! stream, the `--limit-rate` bucket, and the connections waiting for a block or for the
//! bucket.
//!
//! A received byte: the loop asks the sink where a connection's next RECV goes
//! ([`super::receive`]); the completion's bytes are placed (or, under the software record
//! layer, opened in place: [`super::record`]) into a write block through
//! [`Sink::blocks`]; a full block joins `to_write`; [`Sink::flush`] submits it as a WRITE
//! and [`Sink::write_done`] says what its completion did. The sink returns what happened
//! (a block landed, an error), the loop acts on it; it never sees the loop.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::time::Duration;

use uring::{BufPool, Op};

use super::blocks::WriteBlock;
use super::place::{Blocks, Fed, PlaceError, Placer};
use crate::err;
use crate::error::Result;
use crate::lane::LaneRing;
use crate::schedule::pace::Bucket;
use crate::tag::Tag;
use crate::transfer::Transfer;

pub(crate) use super::write::{WriteSlot, Written};

/// The data path of one transfer: where its body bytes wait, and how fast they may come.
pub(crate) struct Sink {
    /// The write blocks' pool (body bytes go into its blocks).
    pub(crate) pool: BufPool,
    /// Full or final blocks waiting for a write SQE, in order.
    pub(crate) to_write: VecDeque<WriteBlock>,
    /// The output: a file, a block device, or a stream (standard output, a FIFO).
    pub(crate) out_fd: RawFd,
    /// One entry per write that may be in flight (`Tag::Write(index)`).
    pub(crate) slots: Vec<Option<WriteSlot>>,
    pub(crate) writes_in_flight: usize,
    /// Connections stopped because the write pool was empty, in the order they stopped.
    pub(crate) waiting: VecDeque<usize>,
    /// Bytes queued to a sequential output (standard output, a FIFO) so far.
    pub(crate) emitted: u64,
    /// In-order digest of what goes to standard output (`--checksum` with `-o -`).
    pub(crate) stream_digest: Option<ring::digest::Context>,
    /// `--limit-rate`: the download's token bucket (its clock: the transfer's start).
    pub(crate) pace: Option<Bucket>,
    /// Connections waiting for the bucket before their next socket read.
    pub(crate) paced: VecDeque<usize>,
    /// The [`Tag::Pace`] TIMEOUT is in flight.
    pub(crate) pace_timer: bool,
}

impl Sink {
    /// The data path of a transfer writing to `out_fd` from blocks of `pool`, with
    /// `write_slots` writes at most in flight; `stream_digest` for `--checksum` of a
    /// stream, `pace` for `--limit-rate`.
    pub(crate) fn new(
        pool: BufPool,
        out_fd: RawFd,
        write_slots: usize,
        stream_digest: Option<ring::digest::Context>,
        pace: Option<Bucket>,
    ) -> Sink {
        Sink {
            pool,
            to_write: VecDeque::new(),
            out_fd,
            slots: (0..write_slots).map(|_| None).collect(),
            writes_in_flight: 0,
            waiting: VecDeque::new(),
            emitted: 0,
            stream_digest,
            pace,
            paced: VecDeque::new(),
            pace_timer: false,
        }
    }

    /// The pool and the write queue, for a [`Placer`] to take blocks from and queue full
    /// ones on.
    pub(crate) fn blocks(&mut self) -> Blocks<'_> {
        Blocks {
            pool: &self.pool,
            queue: &mut self.to_write,
        }
    }

    /// Runs `f` on the placer of a body from `transfer`'s mirror `mirror` with the pool and the
    /// write queue, and counts the bytes the body moved forward as received (for the
    /// transfer and the mirror). Returns what `f` said and those bytes.
    pub(crate) fn place(
        &mut self,
        placer: &mut Placer,
        transfer: &mut Transfer,
        mirror: usize,
        f: impl FnOnce(&mut Placer, &mut Blocks<'_>) -> std::result::Result<Fed, PlaceError>,
    ) -> (std::result::Result<Fed, PlaceError>, u64) {
        let before = placer.pos();
        let r = f(placer, &mut self.blocks());
        let moved = placer.pos() - before;
        if moved > 0 && transfer.received == 0 && transfer.refused_first {
            // (Turned away first: the time until its first body byte, for the summary.)
            transfer.waited = transfer.started.elapsed();
        }
        transfer.received += moved;
        transfer.mirrors[mirror].bytes += moved;
        (r, moved)
    }

    /// A body ended (complete or not): queues what its block holds (the aligned part with
    /// `trim = Some(align)`). Returns the file offset from which the rest is fetched again
    /// ([`Placer::release`]).
    pub(crate) fn release(&mut self, placer: &mut Placer, trim: Option<u64>) -> u64 {
        placer.release(trim, &mut self.to_write)
    }

    /// Parks connection `i` until a write block is free (once, however often it asks:
    /// `parked` is the connection's own mark).
    pub(crate) fn wait_for_block(&mut self, i: usize, parked: &mut bool) {
        if !*parked {
            *parked = true;
            self.waiting.push_back(i);
        }
    }

    /// Nothing queued and no write in flight.
    pub(crate) fn is_idle(&self) -> bool {
        self.to_write.is_empty() && self.writes_in_flight == 0
    }

    /// `--limit-rate`: how many bytes connection `i` may read now (`u64::MAX` without a
    /// limit; `now` is the transfer's age), or `None` when the bucket is spent: the
    /// connection then waits in `paced` for the [`Tag::Pace`] TIMEOUT, pushed on `ring`
    /// once for all waiters.
    ///
    /// # Errors
    /// `Internal` when the submission queue is full.
    pub(crate) fn pace_budget(&mut self, ring: &LaneRing<'_>, now: Duration, i: usize) -> Result<Option<u64>> {
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
            ring.push(Op::Timeout { after }, Tag::Pace.encode())
                .map_err(|_| err!(Internal, "submission queue full"))?;
        }
        Ok(None)
    }

    /// A socket read of `len` bytes is posted: takes them from the bucket. Returns the
    /// tokens taken (0 without `--limit-rate`), for [`Sink::pace_settle`].
    pub(crate) fn pace_take(&mut self, len: u64) -> u64 {
        match self.pace.as_mut() {
            Some(bucket) => {
                bucket.take(len);
                len
            }
            None => 0,
        }
    }

    /// A socket read completed with `res`: a paced read gives back the `taken` tokens it
    /// did not fill; one not paced in advance (`unpaced`: a RECVMSG of a kTLS record) pays
    /// for what it got now.
    pub(crate) fn pace_settle(&mut self, taken: u64, res: i32, unpaced: bool) {
        let Some(bucket) = self.pace.as_mut() else { return };
        let got = u64::try_from(res).unwrap_or(0);
        if taken > 0 {
            bucket.give_back(taken.saturating_sub(got));
        } else if got > 0 && unpaced {
            bucket.take(got);
        }
    }
}
