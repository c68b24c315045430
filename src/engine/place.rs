//! The receive side of the block engines: a response body placed at its file offsets in
//! write blocks (the compaction copy of engine `direct`), the framing that says where the
//! body ends (RFC 9112 §6.3), and what a response that ends short leaves to write.
//!
//! Pure state over a [`BufPool`]: no socket, no ring. The transfer's data path
//! (`super::sink::Sink`) lends it the pool and the write queue; it is fed plaintext
//! (decrypted TLS records, or plain reads), lets a RECV fill its block directly, and the
//! sink submits the blocks it queues. `fuzz/` drives the same code with random record sizes
//! and read splits (target `compaction`).

use std::collections::VecDeque;
use std::fmt;
use std::ops::Range;

use http::{ChunkedDecoder, ChunkedError};
use uring::{Buf, BufPool};

use super::blocks::{WriteBlock, align_down};

/// How the response body is delimited (RFC 9112 §6.3).
pub enum Delimiter {
    /// Content-Length (or a 206's Content-Range): bytes still to come.
    Length(u64),
    /// Transfer-Encoding: chunked.
    Chunked(ChunkedDecoder),
    /// Until the connection closes (HTTP/1.0 style; over TLS only with close_notify).
    Close,
}

/// Where the body's blocks come from and go to: the write pool and the queue of blocks
/// waiting for a write SQE (shared by every connection: full blocks as they fill, and the
/// last, possibly partial, block of a response from [`Placer::release`]).
pub struct Blocks<'a> {
    /// The write pool; an empty pool is backpressure ([`Fed::Blocked`]).
    pub pool: &'a BufPool,
    /// Blocks ready to write. Every block's `off` is the file offset of its first byte.
    pub queue: &'a mut VecDeque<WriteBlock>,
}

/// What feeding the body left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fed {
    /// All input placed; the body goes on.
    More,
    /// The write pool is empty: input is held ([`Placer::has_spill`]) until a block is
    /// free, then [`Placer::retry_spill`] places it.
    Blocked,
    /// The body is complete: [`Placer::release`] queues its last block.
    Done,
}

/// A body that does not fit its framing or its range. Retrying the request is the cure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlaceError {
    /// The chunked framing is malformed.
    Chunked(ChunkedError),
    /// A chunk carries bytes past the end the response promised (a 206's Content-Range):
    /// they would land on another segment's offsets.
    PastRange {
        /// The response's end (exclusive file offset).
        end: u64,
    },
    /// The chunked body ended before its Content-Range did.
    ShortChunked {
        /// File offset where the body ended.
        at: u64,
        /// Where Content-Range said it ends.
        end: u64,
    },
    /// The chunked decoder consumed nothing from non-empty input (a decoder bug).
    NoProgress,
}

impl fmt::Display for PlaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlaceError::Chunked(e) => write!(f, "bad chunked body: {e}"),
            PlaceError::PastRange { .. } => f.write_str("chunked body longer than its Content-Range"),
            PlaceError::ShortChunked { at, end } => {
                write!(f, "chunked body ends at byte {at}, Content-Range said {end}")
            }
            PlaceError::NoProgress => f.write_str("chunked decoder made no progress"),
        }
    }
}

impl std::error::Error for PlaceError {}

/// True when a 206 answers the range asked: its Content-Range `first-last` (inclusive)
/// starts at `pos`, the next byte the placer lands, and ends before `end`, the segment's
/// exclusive end. A range that starts elsewhere would put right bytes at wrong offsets
/// (RFC 9110 §14.4). The engine's check, shared with the `content_range` fuzz target.
pub fn content_range_fits(first: u64, last: u64, pos: u64, end: u64) -> bool {
    first == pos && last < end
}

/// One response body on its way to the file.
///
/// INVARIANT: `pos <= end`; while a block is held, `block.off + block.fill == pos` (the
/// block ends where the next body byte goes) unless bytes went elsewhere
/// ([`Placer::advance`], engine splice). A block is taken only at `pos`, so when the
/// response starts on an aligned offset every block starts aligned (blocks are multiples
/// of the alignment).
///
/// After an error the placer is only good for [`Placer::release`].
pub struct Placer {
    pos: u64,
    end: u64,
    delim: Option<Delimiter>,
    wb: Option<WriteBlock>,
    /// Body bytes received while the pool was empty, not yet placed.
    spill: Vec<u8>,
    /// Bytes came after the body's end: the connection cannot carry another request.
    overrun: bool,
    /// The source the body comes from ([`WriteBlock::source`] of its blocks).
    source: usize,
}

impl Placer {
    /// A response expected to carry file bytes `start..end`; its framing comes with the
    /// head ([`Placer::begin`]).
    pub fn new(start: u64, end: u64) -> Placer {
        Placer {
            pos: start,
            end,
            delim: None,
            wb: None,
            spill: Vec::new(),
            overrun: false,
            source: 0,
        }
    }

    /// The body comes from source `source` (a mirror's index): its write blocks carry it
    /// ([`WriteBlock::source`]).
    #[must_use]
    pub fn with_source(mut self, source: usize) -> Placer {
        self.source = source;
        self
    }

    /// The head is parsed: the body is framed by `delim` and carries bytes up to `end`
    /// (exclusive; `u64::MAX` when unknown: a chunked or close-delimited 200).
    pub fn begin(&mut self, delim: Delimiter, end: u64) {
        self.delim = Some(delim);
        self.end = end;
    }

    /// File offset of the next body byte.
    pub fn pos(&self) -> u64 {
        self.pos
    }

    /// End of the bytes this response may carry (exclusive file offset); `u64::MAX` while
    /// unknown (a chunked 200 learns it at its last chunk, a close-delimited body never).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The framing, once the head is parsed.
    pub fn delimiter(&self) -> Option<&Delimiter> {
        self.delim.as_ref()
    }

    /// Input is held back by an empty pool.
    pub fn has_spill(&self) -> bool {
        !self.spill.is_empty()
    }

    /// Bytes of input held back by an empty pool.
    pub fn spill_len(&self) -> usize {
        self.spill.len()
    }

    /// Bytes came after the body's end.
    pub fn overrun(&self) -> bool {
        self.overrun
    }

    /// The block being filled: (file offset, bytes filled).
    pub fn block(&self) -> Option<(u64, usize)> {
        self.wb.as_ref().map(|w| (w.off, w.fill))
    }

    /// The body is complete (its length reached, or the last chunk read).
    pub fn is_done(&self) -> bool {
        match &self.delim {
            Some(Delimiter::Length(0)) => true,
            Some(Delimiter::Chunked(d)) => d.is_done(),
            _ => false,
        }
    }

    /// Places received body bytes (plaintext). Input after held input is held too, so
    /// bytes land in order. Bytes after the body's end are dropped and flag
    /// [`Placer::overrun`].
    ///
    /// # Errors
    /// [`PlaceError`]: the chunked framing is malformed ([`PlaceError::Chunked`]), carries
    /// bytes past `end` ([`PlaceError::PastRange`]) or ends before it
    /// ([`PlaceError::ShortChunked`]).
    ///
    /// # Panics
    /// With non-empty `data` before [`Placer::begin`].
    pub fn feed(&mut self, data: &[u8], blocks: &mut Blocks<'_>) -> Result<Fed, PlaceError> {
        if !self.spill.is_empty() {
            self.spill.extend_from_slice(data);
            return Ok(Fed::Blocked);
        }
        let taken = self.place(data, blocks)?;
        if taken < data.len() {
            self.spill.extend_from_slice(&data[taken..]);
            return Ok(Fed::Blocked);
        }
        self.settle(blocks)
    }

    /// Places held input after a block was freed.
    ///
    /// # Errors
    /// As [`Placer::feed`].
    pub fn retry_spill(&mut self, blocks: &mut Blocks<'_>) -> Result<Fed, PlaceError> {
        let spill = std::mem::take(&mut self.spill);
        let r = self.place(&spill, blocks);
        self.spill = spill;
        let taken = r?;
        self.spill.drain(..taken);
        if !self.spill.is_empty() {
            return Ok(Fed::Blocked);
        }
        self.settle(blocks)
    }

    /// The plain path of a Content-Length body: the block's buffer and the byte range of
    /// it a RECV may fill straight from the socket (`range.start` is the block's fill,
    /// i.e. file offset `pos`; at most the bytes the body still owes). The buffer is out
    /// of the block until [`Placer::recv_done`] gives it back. `None`: the pool is empty
    /// (a full block may have been queued; wait for a write to complete), or the body is
    /// not length-delimited.
    ///
    /// # Panics
    /// While an earlier target is still out.
    pub fn recv_target(&mut self, blocks: &mut Blocks<'_>) -> Option<(Buf, Range<usize>)> {
        let Some(Delimiter::Length(rem)) = self.delim else {
            return None;
        };
        assert!(
            self.wb.as_ref().is_none_or(|wb| wb.buf.is_some()),
            "recv_target while a RECV target is out"
        );
        if self.wb.as_ref().is_none_or(|wb| wb.is_full()) && !self.next_block(blocks) {
            return None;
        }
        let wb = self.wb.as_mut().expect("block just ensured");
        let len = (wb.room() as u64).min(rem) as usize;
        let buf = wb.buf.take().expect("a held block has its buffer");
        Some((buf, wb.fill..wb.fill + len))
    }

    /// A RECV from [`Placer::recv_target`] completed with `n` bytes (0 on EOF or error):
    /// the buffer goes back into the block and the body advances. Bytes past the body's
    /// end (it was [shrunk](Placer::shrink) while the RECV was in flight) are not kept.
    /// Call [`Placer::settle`] next when `n > 0`.
    ///
    /// # Panics
    /// Without a block waiting for its buffer, or when `n` exceeds the buffer's room.
    pub fn recv_done(&mut self, buf: Buf, n: usize) {
        let wb = self.wb.as_mut().expect("a RECV target was handed out");
        assert!(wb.buf.is_none(), "recv_done without recv_target");
        assert!(wb.fill + n <= buf.len(), "RECV past its block");
        let keep = match self.delim {
            Some(Delimiter::Length(rem)) => (n as u64).min(rem) as usize,
            _ => n,
        };
        if keep < n {
            self.overrun = true;
        }
        wb.buf = Some(buf);
        wb.fill += keep;
        self.advance(keep);
    }

    /// The software TLS path of a Content-Length body: the block's buffer and the range a
    /// RECV of *ciphertext* may fill, from `from` (where ciphertext already waiting in the
    /// block ends; `None` when none waits: the block's fill) to the block's end. Records
    /// opened there move their content left to the fill ([`Placer::landed`]). The buffer
    /// is out of the block until [`Placer::cipher_returned`]. `None`: the pool is empty or
    /// the body is not length-delimited.
    ///
    /// # Panics
    /// While an earlier target is still out; with `from` before the fill or at the end.
    pub fn cipher_target(&mut self, blocks: &mut Blocks<'_>, from: Option<usize>) -> Option<(Buf, Range<usize>)> {
        let Some(Delimiter::Length(_)) = self.delim else {
            return None;
        };
        assert!(
            self.wb.as_ref().is_none_or(|wb| wb.buf.is_some()),
            "cipher_target while a RECV target is out"
        );
        if from.is_none() && self.wb.as_ref().is_none_or(|wb| wb.is_full()) && !self.next_block(blocks) {
            return None;
        }
        let wb = self.wb.as_mut().expect("block just ensured");
        let buf = wb.buf.take().expect("a held block has its buffer");
        let (start, len) = (from.unwrap_or(wb.fill), buf.len());
        assert!(start >= wb.fill && start < len, "ciphertext outside the block's room");
        Some((buf, start..len))
    }

    /// A RECV from [`Placer::cipher_target`] completed: the buffer goes back into the
    /// block; nothing advances until records are opened ([`Placer::landed`]).
    ///
    /// # Panics
    /// Without a block waiting for its buffer.
    pub fn cipher_returned(&mut self, buf: Buf) {
        let wb = self.wb.as_mut().expect("a RECV target was handed out");
        assert!(wb.buf.is_none(), "cipher_returned without cipher_target");
        wb.buf = Some(buf);
    }

    /// The held block's buffer and fill (bytes of body in it), to open records in place.
    pub fn block_mut(&mut self) -> Option<(&mut [u8], usize)> {
        let wb = self.wb.as_mut()?;
        let fill = wb.fill;
        wb.buf.as_deref_mut().map(|b| (b, fill))
    }

    /// `n` bytes of a Content-Length body were opened in place at the block's fill: they
    /// count as landed, up to what the body still owes (the rest flags
    /// [`Placer::overrun`]). Returns the bytes kept. Call [`Placer::settle`] next.
    ///
    /// # Panics
    /// Without a held block, or when `n` passes the block's end.
    pub fn landed(&mut self, n: usize) -> usize {
        let keep = match self.delim {
            Some(Delimiter::Length(rem)) => (n as u64).min(rem) as usize,
            _ => n,
        };
        if keep < n {
            self.overrun = true;
        }
        let wb = self.wb.as_mut().expect("landed without a block");
        assert!(
            wb.fill + keep <= wb.buf.as_ref().map_or(0, |b| b.len()),
            "landed past the block"
        );
        wb.fill += keep;
        self.advance(keep);
        keep
    }

    /// Work stealing: the body stops at `at` (an aligned offset inside what is still to
    /// come) and another request fetches the rest. Only a Content-Length body in
    /// progress can shrink; the response's bytes past `at` are not kept, so the connection
    /// cannot carry another request ([`Placer::overrun`]). Returns whether it shrank.
    pub fn shrink(&mut self, at: u64) -> bool {
        let Some(Delimiter::Length(rem)) = self.delim.as_mut() else {
            return false;
        };
        if at <= self.pos || at >= self.end {
            return false;
        }
        *rem -= self.end - at;
        self.end = at;
        self.overrun = true;
        true
    }

    /// Bytes the body still owes before its end.
    pub fn remaining(&self) -> u64 {
        self.end.saturating_sub(self.pos)
    }

    /// `n` body bytes of a Content-Length body went past the block (engine splice:
    /// socket → pipe); the block keeps what it holds. (A RECV into the block reports
    /// through [`Placer::recv_done`], which advances.)
    ///
    /// # Panics
    /// When `n` exceeds the bytes the body still owes.
    pub fn advance(&mut self, n: usize) {
        self.pos += n as u64;
        if let Some(Delimiter::Length(rem)) = self.delim.as_mut() {
            *rem = rem.checked_sub(n as u64).expect("advance past the body's end");
        }
    }

    /// After bytes arrived: queues the block if it is full and the body goes on, and says
    /// whether the body is complete (a chunked 200 learns its `end` here).
    ///
    /// # Errors
    /// [`PlaceError::ShortChunked`]: the last chunk came before `end`.
    pub fn settle(&mut self, blocks: &mut Blocks<'_>) -> Result<Fed, PlaceError> {
        let done = self.is_done();
        if !done {
            if self.wb.as_ref().is_some_and(|wb| wb.is_full()) {
                let wb = self.wb.take().expect("full block");
                blocks.queue.push_back(wb);
            }
            return Ok(Fed::More);
        }
        if matches!(self.delim, Some(Delimiter::Chunked(_))) {
            if self.end == u64::MAX {
                self.end = self.pos;
            } else if self.pos != self.end {
                return Err(PlaceError::ShortChunked {
                    at: self.pos,
                    end: self.end,
                });
            }
        }
        Ok(Fed::Done)
    }

    /// The response ended, complete or not: queues what the block holds and drops held
    /// input. With `trim = Some(align)` (O_DIRECT, not the file's end) only the aligned
    /// part of the block is kept. Returns the file offset from which the rest must be
    /// fetched again (`pos`, or the trimmed block's end: aligned, since blocks start
    /// aligned). Call it with no RECV target out.
    pub fn release(&mut self, trim: Option<u64>, queue: &mut VecDeque<WriteBlock>) -> u64 {
        let mut from = self.pos;
        if let Some(mut wb) = self.wb.take() {
            debug_assert!(wb.buf.is_some(), "release while a RECV target is out");
            if let Some(align) = trim {
                debug_assert!(wb.off.is_multiple_of(align), "unaligned block at {}", wb.off);
                let keep = align_down(wb.fill as u64, align) as usize;
                from = wb.off + keep as u64;
                wb.fill = keep;
            }
            if wb.fill > 0 {
                queue.push_back(wb);
            }
        }
        self.spill.clear();
        from
    }

    /// The body's source was disqualified (a dropped mirror): drops the block being
    /// filled and held input, unqueued and unwritten. Returns the file offset from which
    /// this response's bytes are not queued: the dropped block's start, else `pos`. (The
    /// blocks it queued before carry its [`WriteBlock::source`]: the caller drops those.)
    /// Call it with no RECV target out.
    pub fn discard(&mut self) -> u64 {
        self.spill.clear();
        match self.wb.take() {
            Some(wb) => {
                debug_assert!(wb.buf.is_some(), "discard while a RECV target is out");
                wb.off
            }
            None => self.pos,
        }
    }

    /// Queues the current block and takes a fresh one at `pos`.
    fn next_block(&mut self, blocks: &mut Blocks<'_>) -> bool {
        if let Some(wb) = self.wb.take()
            && wb.fill > 0
        {
            blocks.queue.push_back(wb);
        }
        let Some(buf) = blocks.pool.alloc() else { return false };
        let mut wb = WriteBlock::new(buf, self.pos);
        wb.source = self.source;
        self.wb = Some(wb);
        true
    }

    /// The compaction copy: body bytes of `data` into blocks; returns how many bytes of
    /// `data` were taken (fewer when the pool runs empty; all of it past the body's end).
    fn place(&mut self, data: &[u8], blocks: &mut Blocks<'_>) -> Result<usize, PlaceError> {
        let mut taken = 0;
        while taken < data.len() {
            if matches!(self.delim, Some(Delimiter::Length(0))) {
                self.overrun = true;
                return Ok(data.len());
            }
            if self.wb.as_ref().is_none_or(|wb| wb.is_full()) && !self.next_block(blocks) {
                return Ok(taken);
            }
            let wb = self.wb.as_mut().expect("block just ensured");
            let input = &data[taken..];
            let room = wb.room();
            let placed = match self.delim.as_mut().expect("place after the head") {
                Delimiter::Length(rem) => {
                    let n = (input.len() as u64).min(*rem).min(room as u64) as usize;
                    wb.compact(&input[..n]);
                    *rem -= n as u64;
                    taken += n;
                    n
                }
                Delimiter::Close => {
                    let n = input.len().min(room);
                    wb.compact(&input[..n]);
                    taken += n;
                    n
                }
                Delimiter::Chunked(dec) => {
                    // Offer at most `room` bytes so any data range fits the block.
                    let lim = input.len().min(room);
                    let step = dec.step(&input[..lim]).map_err(PlaceError::Chunked)?;
                    let mut n = 0;
                    if let Some(r) = step.data {
                        // Never place a byte past what Content-Range promised: it would
                        // land on another segment's offsets.
                        if r.len() as u64 > self.end - self.pos {
                            return Err(PlaceError::PastRange { end: self.end });
                        }
                        n = wb.compact(&input[r]);
                    }
                    taken += step.consumed;
                    if step.done {
                        if taken < data.len() {
                            self.overrun = true;
                        }
                        taken = data.len();
                    } else if step.consumed == 0 {
                        return Err(PlaceError::NoProgress);
                    }
                    n
                }
            };
            self.pos += placed as u64;
        }
        Ok(taken)
    }
}

#[cfg(test)]
mod tests;
