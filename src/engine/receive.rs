//! Where a connection's next socket read goes ([`Sink::recv`]): engine `splice`'s pipe,
//! straight into the body's write block (plain HTTP and kTLS RX: plaintext; the software
//! record layer: ciphertext opened there in place), or the connection's read block (a
//! response head, rustls' records, a TLS record cut by a write block's end). The answer is
//! the operation to submit and the `--limit-rate` tokens it took.

use std::ops::Range;
use std::os::fd::RawFd;

use uring::{Buf, Op};

use super::place::{Delimiter, Placer};
use super::record::SoftTls;
use super::sink::Sink;
use super::splice::Pipe;
use super::write::SPLICE_F_MOVE;
use crate::err;
use crate::error::Error;

/// What the socket carries for the body.
pub(crate) enum Wire<'a> {
    /// Plaintext: plain HTTP, or TLS the kernel opens (kTLS RX).
    Plain,
    /// Records the software record layer opens in place.
    Records(&'a mut SoftTls),
    /// Records rustls opens (from the read block).
    Rustls,
}

/// A connection's receive side, lent to [`Sink::recv`].
pub(crate) struct Receiver<'a> {
    /// The socket.
    pub(crate) fd: RawFd,
    pub(crate) wire: Wire<'a>,
    /// The body's placer, while a response is read.
    pub(crate) placer: Option<&'a mut Placer>,
    /// Engine `splice`: the connection's pipe (made on first use).
    pub(crate) pipe: &'a mut Option<Pipe>,
    /// The read block (taken out when the read goes there), unprocessed input in
    /// `read[*lo..*hi]`.
    pub(crate) read: &'a mut Option<Buf>,
    pub(crate) lo: &'a mut usize,
    pub(crate) hi: &'a mut usize,
}

/// Where the read goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecvInto {
    /// The connection's read block.
    ReadBlock,
    /// The body's write block.
    WriteBlock,
    /// Engine `splice`: the connection's pipe.
    Pipe,
}

/// What [`Sink::recv`] decided.
pub(crate) enum Recv {
    /// Submit `op`: a read into `into`, which took `tokens` from the `--limit-rate`
    /// bucket.
    Post { op: Op, into: RecvInto, tokens: u64 },
    /// The write pool is empty: wait for a block.
    WaitForBlock,
    /// The pipe is full: its drain drives the connection again.
    PipeFull,
}

/// Why no read can be posted.
pub(crate) enum Refused {
    /// The connection cannot go on (a TLS record larger than the read block): retry the
    /// segment elsewhere.
    Retry(Error),
    /// The transfer cannot go on (no pipe).
    Fatal(Error),
}

impl Sink {
    /// The next socket read of connection `r`, at most `budget` bytes (`--limit-rate`;
    /// `usize::MAX`: none); `splice` is engine `splice` (`splice_chunk` bytes at most per
    /// SPLICE).
    ///
    /// # Errors
    /// See [`Refused`].
    pub(crate) fn recv(
        &mut self,
        r: Receiver<'_>,
        splice: bool,
        splice_chunk: usize,
        budget: usize,
    ) -> Result<Recv, Refused> {
        let Receiver {
            fd,
            wire,
            placer,
            pipe,
            read,
            lo,
            hi,
        } = r;
        let length = placer.as_ref().and_then(|p| match p.delimiter() {
            Some(Delimiter::Length(rem)) => Some(*rem),
            _ => None,
        });
        match (wire, placer, length) {
            // Engine splice: socket → pipe while the pipe has room; its drain empties it to
            // the file.
            (Wire::Plain, Some(placer), Some(rem)) if splice => {
                self.recv_into_pipe(fd, placer, pipe, rem, splice_chunk.min(budget))
            }
            // Plain HTTP with a known length: receive straight into the write block.
            (Wire::Plain, Some(placer), Some(_)) => {
                let Some((buf, range)) = placer.recv_target(&mut self.blocks()) else {
                    return Ok(Recv::WaitForBlock);
                };
                Ok(self.recv_into_block(fd, buf, range, budget))
            }
            // Software TLS with a known length and nothing waiting in the read block:
            // receive ciphertext straight into the write block, where its records are
            // opened in place.
            (Wire::Records(soft), Some(placer), Some(_)) if *lo == *hi => {
                let from = soft.cipher.map(|(_, hi)| hi);
                let Some((buf, range)) = placer.cipher_target(&mut self.blocks(), from) else {
                    return Ok(Recv::WaitForBlock);
                };
                soft.cipher = Some((soft.cipher.map_or(range.start, |(src, _)| src), range.start));
                Ok(self.recv_into_block(fd, buf, range, budget))
            }
            // With the body's length known: the body bytes not yet landed (software TLS).
            (Wire::Records(_), _, rem) => self.recv_into_read_block(fd, read, lo, hi, rem, budget),
            _ => self.recv_into_read_block(fd, read, lo, hi, None, budget),
        }
    }

    /// Engine splice: a SPLICE socket → `pipe` of at most `most` bytes and the `rem` the
    /// body still has, the pipe made on first use and placed at the body's position when
    /// empty.
    fn recv_into_pipe(
        &mut self,
        fd: RawFd,
        placer: &Placer,
        pipe: &mut Option<Pipe>,
        rem: u64,
        most: usize,
    ) -> Result<Recv, Refused> {
        if pipe.is_none() {
            *pipe = Some(Pipe::new().map_err(|e| Refused::Fatal(err!(LocalIo, "pipe: {e}")))?);
        }
        let pipe = pipe.as_mut().expect("pipe just ensured");
        if pipe.held == 0 && !pipe.draining {
            pipe.file_pos = placer.pos();
        }
        if pipe.room() == 0 {
            return Ok(Recv::PipeFull);
        }
        let len = (pipe.room() as u64).min(rem).min(most as u64) as u32;
        let op = Op::Splice {
            fd_in: fd,
            off_in: None,
            fd_out: pipe.wr(),
            off_out: None,
            len,
            flags: SPLICE_F_MOVE,
        };
        let tokens = self.pace_take(u64::from(len));
        Ok(Recv::Post {
            op,
            into: RecvInto::Pipe,
            tokens,
        })
    }

    /// RECV straight into `buf[range]`, a write block, capped at the `--limit-rate`
    /// `budget` (`usize::MAX`: none), as every other socket read.
    fn recv_into_block(&mut self, fd: RawFd, buf: Buf, range: Range<usize>, budget: usize) -> Recv {
        let range = range.start..range.end.min(range.start.saturating_add(budget));
        let tokens = self.pace_take(range.len() as u64);
        Recv::Post {
            op: Op::Recv {
                fd,
                buf,
                range,
                flags: 0,
            },
            into: RecvInto::WriteBlock,
            tokens,
        }
    }

    /// RECV into the read block after its unprocessed input (moved to the start when it
    /// reaches the end). Under the software record layer with `soft_rem` body bytes left,
    /// a record that straddled a write block's end is read only to its end (and the next
    /// one when the body surely has it), then reads go back to the write block.
    fn recv_into_read_block(
        &mut self,
        fd: RawFd,
        read: &mut Option<Buf>,
        lo: &mut usize,
        hi: &mut usize,
        soft_rem: Option<u64>,
        budget: usize,
    ) -> Result<Recv, Refused> {
        let mut rbuf = read.take().expect("idle connection holds its read block");
        if *lo == *hi {
            *lo = 0;
            *hi = 0;
        } else if *hi == rbuf.len() {
            rbuf.copy_within(*lo..*hi, 0);
            *hi -= *lo;
            *lo = 0;
        }
        if *hi == rbuf.len() {
            *read = Some(rbuf);
            return Err(Refused::Retry(err!(
                Protocol,
                "a TLS record larger than the read block"
            )));
        }
        let mut range = *hi..rbuf.len().min(hi.saturating_add(budget));
        if let Some(rem) = soft_rem {
            let (need, known) = match ktls::soft::record_len(&rbuf[*lo..*hi]) {
                Ok(Some(n)) => (n, true),
                Ok(None) => (ktls::soft::HEADER_LEN, false),
                Err(_) => (range.end - *lo, false), // the record's opening reports it
            };
            // The rest of this record, and the next one too when the body surely has it:
            // a record cut by a write block's end is followed by one that would otherwise
            // be received into the few hundred bytes left in that block, then in two more
            // reads here (4 RECVs per block instead of 2). The next record is guessed to be
            // as long as this one (servers send full records); the read stays within the
            // body (`rem` plaintext bytes are at least as many wire bytes from `lo`), and
            // a wrong guess only leaves a partial record here, read like any other.
            let ahead = if known && rem >= 2 * need as u64 { need } else { 0 };
            range.end = range.end.min((*lo + need + ahead).max(*hi + 1));
        }
        let tokens = self.pace_take(range.len() as u64);
        Ok(Recv::Post {
            op: Op::Recv {
                fd,
                buf: rbuf,
                range,
                flags: 0,
            },
            into: RecvInto::ReadBlock,
            tokens,
        })
    }
}
