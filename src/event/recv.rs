//! The loop's side of a connection's socket reads: the data path picks where the next
//! read goes ([`crate::engine::receive`]: pipe, write block, or read block) within the
//! `--limit-rate` budget, and this submits it as the connection's one operation.

use std::os::fd::AsRawFd;
use std::time::Instant;

use crate::control::{Conn, Fail, InFlight, Tls};
use crate::engine::receive::{Receiver, Recv, RecvInto, Refused, Wire};
use crate::error::Kind;
use crate::event::Loop;
use crate::tag::Tag;

impl Loop<'_> {
    /// Posts the socket read that connection `i`'s state asks for, or parks it: for the
    /// `--limit-rate` bucket, for a write block, or for its pipe to drain.
    pub(crate) fn post_recv(&mut self, i: usize) -> std::result::Result<(), Fail> {
        // `--limit-rate`: the most this read may ask for, or wait for the bucket.
        let now = self.started.elapsed();
        let Some(budget) = self
            .sink
            .pace_budget(&self.ring, now, i)
            .map_err(|e| Fail::fatal(e.kind, e.msg))?
        else {
            return Ok(());
        };
        let budget = usize::try_from(budget).unwrap_or(usize::MAX);
        let Conn {
            fd,
            tls,
            rx,
            pipe,
            rbuf,
            input_start,
            input_end,
            ..
        } = &mut self.conns[i];
        // Records opened in place keep only the body's bytes: the part of a multipart
        // answer is followed by the next part's head, so its records are opened in the
        // read block instead.
        let parts = rx
            .job
            .as_ref()
            .is_some_and(|j| j.multi.as_ref().is_some_and(|m| !m.boundary.is_empty()));
        let wire = match tls {
            Tls::Soft(_) if parts => Wire::Rustls,
            Tls::Soft(soft) => Wire::Records(soft),
            Tls::Rustls(_) | Tls::RustlsKept(_) => Wire::Rustls,
            Tls::Off | Tls::Kernel(_) => Wire::Plain,
        };
        let receiver = Receiver {
            fd: fd.as_ref().expect("open connection has a socket").as_raw_fd(),
            wire,
            placer: rx.job.as_mut().map(|j| &mut j.placer),
            pipe,
            read: rbuf,
            lo: input_start,
            hi: input_end,
        };
        let recv = self
            .sink
            .recv(receiver, self.shared.splice, self.shared.opts.splice_chunk, budget);
        let (op, into, tokens) = match recv {
            Ok(Recv::Post { op, into, tokens }) => (op, into, tokens),
            // Full: the pipe → file completion drives this connection again.
            Ok(Recv::PipeFull) => return Ok(()),
            Ok(Recv::WaitForBlock) => {
                self.wait_for_block(i);
                return Ok(());
            }
            Err(Refused::Retry(e)) => return Err(Fail::retry(e.kind, e.msg)),
            Err(Refused::Fatal(e)) => return Err(Fail::fatal(e.kind, e.msg)),
        };
        let c = &mut self.conns[i];
        c.op = match into {
            RecvInto::ReadBlock => InFlight::Recv,
            RecvInto::WriteBlock => InFlight::RecvDirect,
            RecvInto::Pipe => InFlight::Splice,
        };
        c.last_io = Instant::now();
        c.pace_taken = tokens;
        self.ring
            .push(op, Tag::Conn(i).encode())
            .map_err(|_| Fail::fatal(Kind::Internal, "submission queue full"))
    }

    /// Parks connection `i` until a write block is free (once, however often it asks).
    pub(crate) fn wait_for_block(&mut self, i: usize) {
        self.sink.wait_for_block(i, &mut self.conns[i].waiting);
    }
}
