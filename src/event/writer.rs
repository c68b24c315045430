//! The loop's side of the writer ([`crate::engine::sink`] does the writing): it submits
//! what the sink queued each turn, hands write and pipe-drain completions to the sink and
//! acts on what they did (a block free again wakes the connections that waited; a failure
//! ends the transfer), and settles what is in flight after a fatal error.

use std::time::{Duration, Instant};

use uring::{Completion, Op};

use crate::control::InFlight;
use crate::engine::place::Delimiter;
use crate::engine::sink::Written;
use crate::err;
use crate::error::Result;
use crate::event::{Loop, errno};
use crate::report::Note;
use crate::tag::Tag;
use crate::transfer::mirror::Standing;

impl Loop<'_> {
    /// After a fatal error: submits the blocks already filled and waits (≤ 10 s) for every
    /// write and pipe drain in flight, recording what lands, so the control file covers
    /// all the bytes that reached the file. Connections are not driven any more.
    pub(crate) fn settle(&mut self) {
        // What connections hold in their blocks is good too: queue it (the aligned part,
        // under O_DIRECT), except where a RECV into the block is in flight, except for a
        // dropped mirror's (not another byte of it is written: `Loop::release_conn`), and
        // except for standard output, which only takes bytes in order.
        if !self.shared.transfer.sequential {
            let trim = self.shared.transfer.direct.then_some(self.shared.transfer.align);
            for c in &mut self.conns {
                if c.op != InFlight::RecvDirect
                    && self.shared.transfer.mirrors[c.mirror].standing != Standing::Dropped
                    && let Some(job) = c.rx.job.as_mut()
                {
                    self.sink.release(&mut job.placer, trim);
                }
            }
        }
        let limit = Duration::from_secs(10);
        let deadline = Instant::now() + limit;
        // Wakes the wait below at the deadline even if no write ever completes.
        let _ = self.push(Op::Timeout { after: limit }, Tag::Ignore.encode());
        let busy = |l: &Self| {
            l.sink.writes_in_flight > 0 || l.conns.iter().any(|c| c.pipe.as_ref().is_some_and(|p| p.draining))
        };
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
                    Some(Tag::Write(s)) => self.sink.write_reaped(&mut self.shared.transfer, s, c.result),
                    Some(Tag::Drain(i)) => {
                        if let Some(pipe) = self.conns[i].pipe.as_mut() {
                            crate::engine::sink::Sink::drain_reaped(&mut self.shared.transfer, pipe, c.result);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// The write of slot `s` completed: a failure ends the transfer; a block that landed
    /// wakes the connections that waited for one.
    pub(crate) fn write_completion(&mut self, s: usize, c: Completion) -> Result<()> {
        match self.sink.write_done(&self.ring, &mut self.shared.transfer, s, c)? {
            Written::Pending => Ok(()),
            Written::Landed => self.wake_waiting(),
            Written::Failed(e) => {
                self.shared.fatal = Some(e);
                Ok(())
            }
        }
    }

    /// Drives on the connections that waited for a write block (one is free: this
    /// transfer's write completed, or, with transfers sharing the pool, another's).
    pub(crate) fn wake_waiting(&mut self) -> Result<()> {
        let waiting: Vec<usize> = self.sink.waiting.drain(..).collect();
        for i in waiting {
            self.conns[i].waiting = false;
            self.after(i, Ok(()))?;
        }
        Ok(())
    }

    /// Submits queued blocks (in order, one at a time, for standard output); a block
    /// device's end reached ends the transfer.
    pub(crate) fn flush_writes(&mut self) -> Result<()> {
        let flushed = self.sink.flush(&self.ring, &mut self.shared.transfer)?;
        if let Some(result) = flushed.fallocated.filter(|r| *r < 0) {
            self.fallocate_failed(result);
            // (Not the end, a refusal: the queued writes go, without the preallocation.)
            return match self.shared.fatal {
                Some(_) => Ok(()),
                None => self.flush_writes(),
            };
        }
        if let Some(why) = flushed.ended {
            self.shared.fatal.get_or_insert(why);
        }
        Ok(())
    }

    /// The output's preallocation (fallocate(2), in place or on the ring) failed with
    /// `result` (a negated errno): no space (ENOSPC) or a file larger than the file system
    /// allows (EFBIG) ends the transfer; anything else (EOPNOTSUPP: ext2, FUSE…) is said
    /// and the writes go on without it.
    pub(crate) fn fallocate_failed(&mut self, result: i32) {
        let e = errno(result);
        if e == rustix::io::Errno::NOSPC || e == rustix::io::Errno::FBIG {
            // (EFBIG: larger than the file system allows a file; no space freed helps.)
            // (ENOSPC: how much is still to land is added once the writes in flight have
            // landed: `ends::finish`.)
            let total = self.shared.transfer.total.unwrap_or(0);
            let failed = err!(LocalIo, "not enough space for {total} bytes: {e}");
            self.shared.fatal = Some(if e == rustix::io::Errno::NOSPC {
                failed.out_of_space()
            } else {
                failed
            });
        } else {
            self.shared.report.note(Note::NoPreallocation { why: e.to_string() });
        }
    }

    /// Engine splice: drains connection `i`'s pipe to the file when it holds enough
    /// ([`crate::engine::sink::Sink::drain`]).
    pub(crate) fn drain(&mut self, i: usize) -> Result<()> {
        let c = &mut self.conns[i];
        let body_done =
            c.rx.job
                .as_ref()
                .is_none_or(|j| matches!(j.placer.delimiter(), Some(Delimiter::Length(0))));
        let Some(pipe) = c.pipe.as_mut() else { return Ok(()) };
        let ending = body_done || c.eof;
        let threshold = self.shared.opts.write_threshold;
        self.sink
            .drain(&self.ring, pipe, Tag::Drain(i).encode(), threshold, ending)
    }

    /// Connection `i`'s pipe → file SPLICE completed with `res`: a failure ends the
    /// transfer; else the pipe drains on and the connection is driven.
    pub(crate) fn drain_completion(&mut self, i: usize, res: i32) -> Result<()> {
        let pipe = self.conns[i].pipe.as_mut().expect("drain of a pipe");
        if let Some(e) = self.sink.drained(&mut self.shared.transfer, pipe, res) {
            self.shared.fatal = Some(e);
            return Ok(());
        }
        self.drain(i)?;
        self.after(i, Ok(()))
    }
}
