//! The rolling search of a seed for a control file's blocks, as zsync 0.6.2's client
//! does it (`rcksum_submit_source_data` and `check_checksums_on_hash_chain` in
//! `c/librcksum/rsum.c`; the technical paper's section on the rsync algorithm).
//!
//! A window of `seq_matches` blocks slides over the seed one byte at a time, its weak
//! sums (`a` = Σ bytes, `b` = Σ (Blocksize − k)·byte_k, mod 2^16, per block) rolled
//! forward in O(1). At each offset:
//! - right after a match that may go on (`next_match`), only the next target block is
//!   tried against the window's first block (weak sum, then MD4);
//! - else the window's weak key (with `seq_matches` = 2: both blocks' sums, so block `i`
//!   is a candidate only with block `i + 1` after it; the last block is never one) goes
//!   through the filter and the table, and each not-yet-found candidate whose weak sums
//!   agree is checked by MD4, the second block too with `seq_matches` = 2. Every
//!   candidate that passes is taken (duplicates in the target all at once): with two
//!   blocks, both, unless the second was already found; the match goes on to the block
//!   after the pair unless that one is found or past the end (zsync's `next_known`,
//!   computed when the pair is taken and kept for the run).
//! - A match moves the window past the blocks it matched (one for a continued run, else
//!   `seq_matches`); no match moves it one byte.
//!
//! The seed's end is padded with zeros for `seq_matches` blocks, and a window starts at
//! every offset before the end, so the last, short block is found zero-padded as its
//! sums were made. One difference: a block found where it runs past the seed's end (its
//! tail matched the padding) is taken as found, as zsync does, but reported as not found,
//! since its bytes are not all in the seed.
//!
//! Memory: the seed passes through a buffer of `seq_matches` blocks plus
//! max(256 KiB, a block); fed bytes are copied once into it. Per block of the target:
//! 12 to 20 bytes of table and filter (2 MiB of filter at most), 8 of result.

use super::Zsync;
use super::table::{Filter, Known, Table, hash};

use crate::delta::{Finds, Scanner};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use md4::{Digest, Md4};

/// `found` for a block not found.
const NONE: u64 = u64::MAX;
/// `found` for a block found running past the seed's end (reported as not found).
const BEYOND: u64 = u64::MAX - 1;
/// Bytes the buffer takes beyond the window before it is scanned.
const CHUNK: usize = 1 << 18;

/// The weak sums of the window's two blocks (the second unused with `seq_matches` = 1).
/// zsync keeps them mod 2^16; here they are rolled in 32 bits, of which only the low 16
/// are right and used.
#[derive(Clone, Copy, Debug)]
struct Sums {
    a0: u32,
    b0: u32,
    a1: u32,
    b1: u32,
}

/// The per-scan constants the inner loop needs.
#[derive(Clone, Copy)]
struct Shape {
    bs: usize,
    rsum_bytes: u8,
    mask: u32,
    seq2: bool,
}

impl Shape {
    /// `a << 16 | b` of one block's sums, as stored: masked to the stored bytes.
    #[inline(always)]
    fn weak(self, a: u32, b: u32) -> u32 {
        (a << 16 | (b & 0xffff)) & self.mask
    }

    /// The window's weak sums as stored (the second 0 with one-block windows).
    #[inline(always)]
    fn key(self, s: &Sums) -> (u32, u32) {
        let w1 = if self.seq2 { self.weak(s.a1, s.b1) } else { 0 };
        (self.weak(s.a0, s.b0), w1)
    }

    /// The window's span: `seq_matches` blocks.
    fn context(self) -> usize {
        if self.seq2 { 2 * self.bs } else { self.bs }
    }
}

/// One block's weak sums (zsync's `rcksum_calc_rsum_block`), mod 2^16 as zsync keeps
/// them: `a` = Σ d_k and `b` = Σ (len − k)·d_k = len·a − Σ k·d_k, two sums without a
/// chain from byte to byte, in 16-bit lanes (the compiler vectorizes them).
fn block_sums(block: &[u8]) -> (u32, u32) {
    let (mut a, mut kd) = (0u16, 0u16);
    for (k, &d) in block.iter().enumerate() {
        a = a.wrapping_add(u16::from(d));
        kd = kd.wrapping_add((k as u16).wrapping_mul(u16::from(d)));
    }
    let b = (block.len() as u16).wrapping_mul(a).wrapping_sub(kd);
    (u32::from(a), u32::from(b))
}

/// Moves `(a, b)` one byte on: `old` leaves, `new` enters; `bs` is the block size.
#[inline(always)]
fn roll(a: &mut u32, b: &mut u32, old: u8, new: u8, bs: u32) {
    *a = a.wrapping_add(u32::from(new)).wrapping_sub(u32::from(old));
    *b = b.wrapping_add(*a).wrapping_sub(u32::from(old).wrapping_mul(bs));
}

/// One block's sums as stored with `R` = `rsum_bytes`: the last `R` bytes of
/// `a << 16 | b` (16-bit `a` and `b`); [`Shape::weak`] for a constant `R`.
#[inline(always)]
fn weak_r<const R: u8>(a: u32, b: u32) -> u32 {
    match R {
        1 => b & 0xff,
        2 => b & 0xffff,
        3 => (a & 0xff) << 16 | (b & 0xffff),
        _ => a << 16 | (b & 0xffff),
    }
}

/// From window `x` of `data` (up to `end`, exclusive), rolls until a window whose sums
/// hash the filter lets through; returns that window, its sums and hash, or `end` with
/// the sums rolled to it. `data` holds `end + context` bytes at least. Made for each
/// `rsum_bytes` (`R`) and `seq_matches` (`SEQ2`): the inner loop of the whole search.
fn seek(table: &Filter, sh: Shape, data: &[u8], x: usize, end: usize, s: Sums) -> (usize, Sums, u32) {
    match (sh.rsum_bytes, sh.seq2) {
        (1, false) => seek_with::<1, false>(table, sh.bs, data, x, end, s),
        (2, false) => seek_with::<2, false>(table, sh.bs, data, x, end, s),
        (3, false) => seek_with::<3, false>(table, sh.bs, data, x, end, s),
        (_, false) => seek_with::<4, false>(table, sh.bs, data, x, end, s),
        (1, true) => seek_with::<1, true>(table, sh.bs, data, x, end, s),
        (2, true) => seek_with::<2, true>(table, sh.bs, data, x, end, s),
        (3, true) => seek_with::<3, true>(table, sh.bs, data, x, end, s),
        (_, true) => seek_with::<4, true>(table, sh.bs, data, x, end, s),
    }
}

#[inline(never)]
fn seek_with<const R: u8, const SEQ2: bool>(
    table: &Filter,
    bs: usize,
    data: &[u8],
    x: usize,
    end: usize,
    s: Sums,
) -> (usize, Sums, u32) {
    let Sums {
        mut a0,
        mut b0,
        mut a1,
        mut b1,
    } = s;
    let n = end - x;
    let bs32 = bs as u32;
    if SEQ2 {
        let lanes = data[x..x + n]
            .iter()
            .zip(&data[x + bs..x + bs + n])
            .zip(&data[x + 2 * bs..x + 2 * bs + n]);
        for (i, ((&old, &mid), &new)) in lanes.enumerate() {
            let h = hash(weak_r::<R>(a0, b0), weak_r::<R>(a1, b1));
            if table.maybe(h) {
                return (x + i, Sums { a0, b0, a1, b1 }, h);
            }
            roll(&mut a0, &mut b0, old, mid, bs32);
            roll(&mut a1, &mut b1, mid, new, bs32);
        }
    } else {
        let lanes = data[x..x + n].iter().zip(&data[x + bs..x + bs + n]);
        for (i, (&old, &new)) in lanes.enumerate() {
            let h = hash(weak_r::<R>(a0, b0), 0);
            if table.maybe(h) {
                return (x + i, Sums { a0, b0, a1, b1 }, h);
            }
            roll(&mut a0, &mut b0, old, new, bs32);
        }
    }
    (end, Sums { a0, b0, a1, b1 }, 0)
}

/// The stored sums block `id` is a candidate under: its own and, with two-block windows,
/// its successor's (else 0).
fn block_sums_stored(z: &Zsync, seq2: bool, id: u32) -> (u32, u32) {
    let w1 = if seq2 { z.rsums[id as usize + 1] } else { 0 };
    (z.rsums[id as usize], w1)
}

/// What the scans of one seed share: the table of blocks by weak sums (read-only) and
/// where each block was found (either half of a split search writes it); and a filter,
/// which each scan has its own copy of.
#[derive(Clone)]
pub struct Shared {
    table: Arc<Table>,
    found: Arc<Vec<AtomicU64>>,
    filter: Filter,
}

impl Shared {
    /// The table of `z`'s candidate blocks, its full filter, no block found.
    pub fn of(z: &Zsync) -> Shared {
        let seq2 = z.seq_matches == 2;
        let n = z.rsums.len() as u32;
        let candidates = if seq2 { n.saturating_sub(1) } else { n };
        let (table, filter) = Table::new(candidates, |i| block_sums_stored(z, seq2, i));
        Shared {
            table: Arc::new(table),
            found: Arc::new((0..n).map(|_| AtomicU64::new(NONE)).collect()),
            filter,
        }
    }
}

/// Searches one seed for a [`Zsync`]'s blocks (see the module's text).
pub struct ZsyncScanner<'a> {
    z: &'a Zsync,
    sh: Shape,
    /// Nothing can be found (no block is a candidate): bytes are only counted.
    idle: bool,
    /// The blocks by weak sums and where they were found, shared with the other half of
    /// a split search; this scan's filter in front of the table.
    table: Arc<Table>,
    found: Arc<Vec<AtomicU64>>,
    filter: Filter,
    known: Known,
    /// Seed bytes from offset `base`; the window to examine next starts at `x`.
    buf: Vec<u8>,
    cap: usize,
    base: u64,
    x: usize,
    /// The sums of window `x`, when known.
    sums: Option<Sums>,
    /// The sums of window `x`'s first block, when known (a run went on by one block:
    /// they were the second block's).
    first: Option<(u32, u32)>,
    /// The block to try first at window `x`: a match's run going on.
    next_match: Option<u32>,
    /// The first block found at or after the run's first when it began.
    run_next_known: u32,
    /// The seed offset of the byte after the last one fed (bytes fed start at the
    /// scanner's first offset).
    fed: u64,
    /// Windows are examined only before this seed offset (the first half of a split
    /// search: the bytes after it are fed only for the windows that start before it).
    stop: Option<u64>,
}

impl<'a> ZsyncScanner<'a> {
    /// A scanner of `z`'s blocks.
    pub fn new(z: &'a Zsync) -> ZsyncScanner<'a> {
        ZsyncScanner::part(z, Shared::of(z), 0, None)
    }

    /// A scanner of `z`'s blocks in part of a seed: fed the seed's bytes from offset
    /// `start` on, it examines the windows that start at `start` and after, before
    /// `stop` when given (it must then be fed [`ZsyncScanner::context`] bytes past
    /// `stop`, or up to the seed's end); `shared` is [`Shared::of`] `z` (a clone for each
    /// half of a split search).
    pub fn part(z: &'a Zsync, shared: Shared, start: u64, stop: Option<u64>) -> ZsyncScanner<'a> {
        let n = z.rsums.len() as u32;
        let bs = z.block_size as usize;
        let sh = Shape {
            bs,
            rsum_bytes: z.rsum_bytes,
            mask: z.rsum_mask(),
            seq2: z.seq_matches == 2,
        };
        let candidates = if sh.seq2 { n.saturating_sub(1) } else { n };
        let cap = sh.context() + CHUNK.max(bs);
        ZsyncScanner {
            z,
            sh,
            idle: candidates == 0,
            table: shared.table,
            found: shared.found,
            filter: shared.filter,
            known: Known::new(n),
            buf: Vec::with_capacity(if candidates == 0 { 0 } else { cap }),
            cap,
            base: start,
            x: 0,
            sums: None,
            first: None,
            next_match: None,
            run_next_known: n,
            fed: start,
            stop,
        }
    }

    /// The bytes a window spans: `seq_matches` blocks.
    pub fn context(&self) -> usize {
        self.sh.context()
    }

    /// The buffer's windows to examine: those before `end` and before `stop`.
    fn window_end(&self, end: usize) -> usize {
        match self.stop {
            Some(stop) => end.min(usize::try_from(stop.saturating_sub(self.base)).unwrap_or(usize::MAX)),
            None => end,
        }
    }

    /// Examines the windows `x..end` of the buffer (which holds `end + context` bytes).
    fn process(&mut self, end: usize) {
        let data = std::mem::take(&mut self.buf);
        let sh = self.sh;
        let mut x = self.x;
        while x < end {
            let s = match self.sums {
                Some(s) => s,
                None => self.sums_at(&data, x),
            };
            if let Some(j) = self.next_match.take()
                && self.continue_run(&data, x, &s, j)
            {
                x += sh.bs;
                self.sums = None;
                self.first = Some((s.a1, s.b1));
                continue;
            }
            let (at, mut s, h) = seek(&self.filter, sh, &data, x, end, s);
            x = at;
            if x == end {
                self.sums = Some(s);
                break;
            }
            if self.candidates(&data, x, &s, h) {
                x += sh.context();
                self.sums = None;
                continue;
            }
            roll(&mut s.a0, &mut s.b0, data[x], data[x + sh.bs], sh.bs as u32);
            if sh.seq2 {
                roll(&mut s.a1, &mut s.b1, data[x + sh.bs], data[x + 2 * sh.bs], sh.bs as u32);
            }
            self.sums = Some(s);
            x += 1;
        }
        self.x = x;
        self.buf = data;
    }

    /// The sums of window `x`, computed afresh (but for the first block's, when known).
    fn sums_at(&mut self, data: &[u8], x: usize) -> Sums {
        let bs = self.sh.bs;
        let (a0, b0) = match self.first.take() {
            Some(first) => first,
            None => block_sums(&data[x..x + bs]),
        };
        let (a1, b1) = if self.sh.seq2 {
            block_sums(&data[x + bs..x + 2 * bs])
        } else {
            (0, 0)
        };
        Sums { a0, b0, a1, b1 }
    }

    /// Tries block `j` (a run going on) at window `x`'s first block; takes it on a match.
    fn continue_run(&mut self, data: &[u8], x: usize, s: &Sums, j: u32) -> bool {
        let bs = self.sh.bs;
        if self.z.rsums[j as usize] != self.sh.weak(s.a0, s.b0) || !self.z.strong_matches(j as usize, &data[x..x + bs])
        {
            return false;
        }
        self.take(j, x);
        if self.run_next_known > j + 1 {
            self.next_match = Some(j + 1);
        }
        true
    }

    /// Checks every candidate of hash `h` not yet found (ascending) at window `x`;
    /// takes each that matches; the bucket's filter word is made again from the blocks
    /// it has left not found. True when one matched.
    fn candidates(&mut self, data: &[u8], x: usize, s: &Sums, h: u32) -> bool {
        let key = self.sh.key(s);
        let (b, start, end) = self.table.bucket(h);
        let mut window_md4: [Option<[u8; 16]>; 2] = [None, None];
        let (mut matched, mut stale) = (false, false);
        for k in start..end {
            let id = self.table.ids[k];
            if self.known.get(id) {
                stale = true;
                continue;
            }
            if self.block_key(id) == key && self.strong(data, x, id, &mut window_md4) {
                matched = true;
                self.take_match(id, x);
            }
        }
        if matched || stale {
            let (z, seq2, known) = (self.z, self.sh.seq2, &self.known);
            let left = self.table.ids[start..end].iter().copied().filter(|&i| !known.get(i));
            self.filter.refill(b, left, |i| block_sums_stored(z, seq2, i));
        }
        matched
    }

    /// The weak sums block `id` (and its successor, with two blocks) is stored under.
    fn block_key(&self, id: u32) -> (u32, u32) {
        block_sums_stored(self.z, self.sh.seq2, id)
    }

    /// Whether window `x`'s blocks have the MD4 prefixes of `id` (and `id + 1` with two
    /// blocks); each window block's MD4 is computed once.
    fn strong(&self, data: &[u8], x: usize, id: u32, md4: &mut [Option<[u8; 16]>; 2]) -> bool {
        let bs = self.sh.bs;
        let blocks = if self.sh.seq2 { 2 } else { 1 };
        (0..blocks).all(|k| {
            let sum = *md4[k].get_or_insert_with(|| Md4::digest(&data[x + k * bs..x + (k + 1) * bs]).into());
            sum[..usize::from(self.z.checksum_bytes)] == *self.z.checksum(id as usize + k)
        })
    }

    /// Takes a table match of `id` at window `x` (zsync's rule for how many blocks are
    /// written and whether the run goes on).
    fn take_match(&mut self, id: u32, x: usize) {
        if !self.sh.seq2 {
            self.take(id, x);
            return;
        }
        let next_known = self.known.next_from(id);
        let upto = next_known.min(id + 2);
        for k in id..upto {
            self.take(k, x + (k - id) as usize * self.sh.bs);
        }
        if next_known > id + 2 {
            self.next_match = Some(id + 2);
            self.run_next_known = next_known;
        }
    }

    /// Block `id`'s bytes are at buffer offset `at`: marks it found. The first place is
    /// kept: the lowest offset, as a scan takes a block once and moves forward, and a
    /// split search's first half finds before its second ([`BEYOND`], at the seed's end,
    /// is above every offset and below [`NONE`]).
    fn take(&mut self, id: u32, at: usize) {
        self.known.set(id);
        let off = self.base + at as u64;
        let len = crate::delta::Index::piece(self.z, id as usize).target_len;
        let at = if off + len <= self.fed { off } else { BEYOND };
        self.found[id as usize].fetch_min(at, Ordering::Relaxed);
    }
}

#[cfg(test)]
impl ZsyncScanner<'_> {
    /// The seed buffer's capacity, bytes.
    pub fn buffer_capacity(&self) -> usize {
        self.buf.capacity()
    }
}

impl Scanner for ZsyncScanner<'_> {
    fn feed(&mut self, mut bytes: &[u8]) {
        self.fed += bytes.len() as u64;
        if self.idle {
            return;
        }
        while !bytes.is_empty() {
            let n = (self.cap - self.buf.len()).min(bytes.len());
            self.buf.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.buf.len() == self.cap {
                self.process(self.window_end(self.cap - self.sh.context()));
                if self.stop.is_some_and(|s| self.base + self.x as u64 >= s) {
                    // Every window before `stop` examined: the rest is only counted.
                    self.idle = true;
                    self.buf = Vec::new();
                    return;
                }
                self.buf.drain(..self.x);
                self.base += self.x as u64;
                self.x = 0;
            }
        }
    }

    fn finish(mut self: Box<Self>) -> Finds {
        if !self.idle {
            let end = self.buf.len();
            self.buf.resize(end + self.sh.context(), 0);
            self.process(self.window_end(end));
        }
        let ZsyncScanner { found, .. } = *self;
        // (The half of a split search that finishes last returns the finds of both; the
        // other none, which [`Finds::merge_later`] takes for "see the other's".)
        let Some(found) = Arc::into_inner(found) else {
            return Finds::default();
        };
        // (Collected in place: an atomic and its value have one size.)
        let found = found
            .into_iter()
            .map(|f| match f.into_inner() {
                BEYOND => NONE,
                at => at,
            })
            .collect();
        Finds::from_targets(found)
    }
}
