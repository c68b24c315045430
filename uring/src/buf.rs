//! Page-aligned pools of equal blocks, handed out as owned [`Buf`]s.
//!
//! # Safety
//!
//! A [`Buf`] is the only handle to its block (the pool's free mask hands each index out
//! once), and its index is below the pool's count, so the pointer `map + index ·
//! block_size` and the slices made from it stay inside the mapping and never alias another
//! live [`Buf`].
#![allow(unsafe_code)]

use core::cell::Cell;
use core::ops::{Deref, DerefMut};
use std::io;
use std::rc::Rc;

use crate::mmap::Mmap;

/// Page size the pool aligns to, bytes.
const PAGE: usize = 4096;
/// Most blocks one pool holds: 64 words of 64 bits.
const MAX_BLOCKS: usize = 4096;

/// Page-aligned pool of `count` equal blocks of `block_size` bytes in one
/// anonymous mmap (MAP_PRIVATE | MAP_ANONYMOUS, not populated).
///
/// Single-threaded (`Rc` inside, `!Send`). Cloning gives another handle to the
/// same pool. The memory stays mapped while any [`Buf`] or handle lives.
#[derive(Debug, Clone)]
pub struct BufPool {
    inner: Rc<PoolInner>,
}

/// Where a pool is registered as a fixed buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Registration {
    /// The [`crate::Ring`] id that registered it.
    pub(crate) ring_id: u64,
    /// Its fixed-buffer index (`buf_index`); with `per_block`, that of its block 0 (block
    /// `b` is `index + b`).
    pub(crate) index: u16,
    /// Each block is its own fixed buffer, put in the ring's sparse table on its first
    /// fixed op ([`PoolInner::pinned`]): the pages of blocks never used are never pinned.
    pub(crate) per_block: bool,
}

#[derive(Debug)]
pub(crate) struct PoolInner {
    map: Mmap,
    block_size: usize,
    count: usize,
    /// Bit `b` of word `w` set = block `64 w + b` is free.
    /// INVARIANT: a block's bit is clear exactly while one `Buf` owns it.
    free: [Cell<u64>; MAX_BLOCKS / 64],
    /// Bit `w` set = `free[w]` is non-zero.
    summary: Cell<u64>,
    available: Cell<usize>,
    registered: Cell<Option<Registration>>,
    /// With a per-block registration: bit `b` of word `w` set = block `64 w + b` is in
    /// the ring's table (pinned).
    pinned: [Cell<u64>; MAX_BLOCKS / 64],
    /// A block could not be pinned (ENOMEM: RLIMIT_MEMLOCK): the registration was
    /// dropped, the pool's ops go unregistered.
    pin_failed: Cell<bool>,
}

impl BufPool {
    /// Maps `count` blocks of `block_size` bytes.
    ///
    /// # Errors
    /// InvalidInput when `block_size` is not a non-zero multiple of 4096 or
    /// `count` is not in 1..=4096; the mmap(2) error (ENOMEM) otherwise.
    pub fn new(block_size: usize, count: usize) -> io::Result<BufPool> {
        if block_size == 0 || !block_size.is_multiple_of(PAGE) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "block size must be a non-zero multiple of 4096 bytes",
            ));
        }
        if !(1..=MAX_BLOCKS).contains(&count) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "block count must be 1..=4096",
            ));
        }
        let len = block_size
            .checked_mul(count)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "pool size overflows"))?;
        let map = Mmap::anonymous(len)?;
        let free: [Cell<u64>; MAX_BLOCKS / 64] = core::array::from_fn(|w| {
            let lo = w * 64;
            let bits = count.saturating_sub(lo).min(64);
            Cell::new(if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 })
        });
        let words = count.div_ceil(64);
        let summary = if words == 64 { u64::MAX } else { (1u64 << words) - 1 };
        Ok(BufPool {
            inner: Rc::new(PoolInner {
                map,
                block_size,
                count,
                free,
                summary: Cell::new(summary),
                available: Cell::new(count),
                registered: Cell::new(None),
                pinned: core::array::from_fn(|_| Cell::new(0)),
                pin_failed: Cell::new(false),
            }),
        })
    }

    /// Takes a free block, O(1) (summary word + trailing_zeros); `None` when exhausted.
    pub fn alloc(&self) -> Option<Buf> {
        let p = &self.inner;
        let s = p.summary.get();
        if s == 0 {
            return None;
        }
        let w = s.trailing_zeros() as usize;
        let word = p.free[w].get();
        let b = word.trailing_zeros() as usize;
        let word = word & !(1 << b);
        p.free[w].set(word);
        if word == 0 {
            p.summary.set(s & !(1 << w));
        }
        p.available.set(p.available.get() - 1);
        Some(Buf {
            pool: Rc::clone(p),
            index: w * 64 + b,
        })
    }

    /// Free blocks.
    pub fn available(&self) -> usize {
        self.inner.available.get()
    }

    /// Bytes per block.
    pub fn block_size(&self) -> usize {
        self.inner.block_size
    }

    /// Blocks in the pool.
    pub fn count(&self) -> usize {
        self.inner.count
    }

    /// True once [`crate::Ring::register_pools`] succeeded for this pool (and
    /// that ring still lives).
    pub fn is_registered(&self) -> bool {
        self.inner.registered.get().is_some()
    }

    /// True once a block of a per-block registration could not be pinned at its first
    /// whole-block op (ENOMEM: over RLIMIT_MEMLOCK, 5.12+ accounting): the registration
    /// was dropped and the pool's ops go unregistered since.
    pub fn pin_failed(&self) -> bool {
        self.inner.pin_failed.get()
    }

    pub(crate) fn inner(&self) -> &Rc<PoolInner> {
        &self.inner
    }
}

impl PoolInner {
    /// The whole region: base pointer and length in bytes.
    pub(crate) fn region(&self) -> (*mut u8, usize) {
        (self.map.as_ptr(), self.map.len())
    }

    pub(crate) fn registration(&self) -> Option<Registration> {
        self.registered.get()
    }

    /// Sets (or clears) where the pool is registered; no block counts as pinned after.
    pub(crate) fn set_registration(&self, r: Option<Registration>) {
        self.registered.set(r);
        for w in &self.pinned {
            w.set(0);
        }
    }

    /// Whether block `index` is in the ring's table (per-block registration).
    pub(crate) fn is_pinned(&self, index: usize) -> bool {
        self.pinned[index / 64].get() & (1 << (index % 64)) != 0
    }

    /// Marks the per-block registration as lost ([`BufPool::pin_failed`]).
    pub(crate) fn set_pin_failed(&self) {
        self.pin_failed.set(true);
    }

    /// Marks block `index` as put in the ring's table.
    pub(crate) fn set_pinned(&self, index: usize) {
        let w = &self.pinned[index / 64];
        w.set(w.get() | 1 << (index % 64));
    }

    /// Block `index`'s memory: base pointer and length in bytes.
    pub(crate) fn block_region(&self, index: usize) -> (*mut u8, usize) {
        // SAFETY: the caller's index comes from a live Buf (INVARIANT: index < count), so
        // index * block_size is inside the mapping of count * block_size bytes.
        (
            unsafe { self.map.as_ptr().add(index * self.block_size) },
            self.block_size,
        )
    }
}

/// One block of a [`BufPool`], owned; returned to its pool when dropped.
///
/// Derefs to the whole block (`[u8]` of `block_size` bytes). `!Send`.
pub struct Buf {
    pool: Rc<PoolInner>,
    /// INVARIANT: `index < pool.count` and the block's free bit is clear.
    index: usize,
}

impl Buf {
    /// The block's first byte (page-aligned).
    pub fn as_ptr(&self) -> *const u8 {
        self.as_mut_ptr_inner()
    }

    /// The block's length in bytes (the pool's block size).
    pub fn len(&self) -> usize {
        self.pool.block_size
    }

    /// Always false: blocks are at least 4096 bytes.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The pool this block belongs to.
    pub(crate) fn pool(&self) -> &Rc<PoolInner> {
        &self.pool
    }

    /// The block's index in its pool.
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// A pointer to the block, valid for writes of `len()` bytes.
    pub(crate) fn as_mut_ptr_inner(&self) -> *mut u8 {
        // SAFETY: INVARIANT: index < count, so index * block_size is inside
        // the pool's mapping of count * block_size bytes.
        unsafe { self.pool.map.as_ptr().add(self.index * self.pool.block_size) }
    }
}

impl core::fmt::Debug for Buf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Buf")
            .field("index", &self.index)
            .field("len", &self.len())
            .finish()
    }
}

impl Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the block is inside the live mapping (held by `pool`), it is
        // initialised (anonymous memory reads as zero), and INVARIANT: only this
        // Buf owns it, so no &mut aliases it. While an op runs, the Buf is held
        // by the ring and no reference is handed out.
        unsafe { core::slice::from_raw_parts(self.as_mut_ptr_inner(), self.len()) }
    }
}

impl DerefMut for Buf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference.
        unsafe { core::slice::from_raw_parts_mut(self.as_mut_ptr_inner(), self.len()) }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        let p = &self.pool;
        let (w, b) = (self.index / 64, self.index % 64);
        p.free[w].set(p.free[w].get() | 1 << b);
        p.summary.set(p.summary.get() | 1 << w);
        p.available.set(p.available.get() + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_sizes() {
        for (bs, n) in [(0, 1), (4095, 1), (4096 + 1, 1), (4096, 0), (4096, 4097)] {
            let e = BufPool::new(bs, n).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bs} x {n}");
        }
    }

    #[test]
    fn exhaustion_and_reuse() {
        let pool = BufPool::new(4096, 130).unwrap();
        assert_eq!((pool.count(), pool.available(), pool.block_size()), (130, 130, 4096));
        let mut bufs: Vec<Buf> = std::iter::from_fn(|| pool.alloc()).collect();
        assert_eq!(bufs.len(), 130);
        assert_eq!(pool.available(), 0);
        assert!(pool.alloc().is_none());
        let mut ptrs: Vec<usize> = bufs.iter().map(|b| b.as_ptr() as usize).collect();
        ptrs.sort_unstable();
        ptrs.dedup();
        assert_eq!(ptrs.len(), 130, "blocks are distinct");
        assert!(ptrs.iter().all(|p| p % 4096 == 0), "page aligned");
        let victim = bufs.swap_remove(77);
        let addr = victim.as_ptr();
        drop(victim);
        assert_eq!(pool.available(), 1);
        let again = pool.alloc().unwrap();
        assert_eq!(again.as_ptr(), addr, "freed block is reused");
        drop(bufs);
        assert_eq!(pool.available(), 129);
        drop(again);
        assert_eq!(pool.available(), 130);
    }

    #[test]
    fn full_pool_of_4096_and_buf_outlives_pool() {
        let pool = BufPool::new(4096, 4096).unwrap();
        let bufs: Vec<Buf> = std::iter::from_fn(|| pool.alloc()).collect();
        assert_eq!(bufs.len(), 4096);
        let mut b = pool.alloc();
        assert!(b.is_none());
        drop(bufs);
        b = pool.alloc();
        drop(pool);
        let mut b = b.unwrap();
        b[4095] = 7;
        assert_eq!(b.len(), 4096);
        assert_eq!(b[4095], 7);
        assert_eq!(b[0], 0);
    }
}
