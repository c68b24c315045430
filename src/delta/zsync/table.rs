//! The lookup structures of a scan: the blocks by their weak sums (a bit filter in
//! front of a bucketed table), and the set of blocks already found.
//!
//! zsync 0.6.2 (`c/librcksum/hash.c`) keeps a 1-bit-per-value filter and chained hash
//! buckets keyed on part of the weak sums, and unlinks a block from its chain once it
//! has the block's data; a chain lists its blocks in ascending order. This table holds
//! the same blocks in the same order, keyed on the whole weak key, so the blocks a
//! window's key reaches are exactly zsync's (which compares the whole weak sums itself).

/// Spreads a weak key over 64 bits; the filter's bit and the bucket are its top bits.
#[inline(always)]
pub fn hash(key: u64) -> u64 {
    (key ^ (key >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Blocks by weak key: a filter of `2^k` bits (about 32 per block, at most 2^24 = 2 MiB)
/// where a clear bit means no block has a key of that hash, and buckets listing the
/// blocks (ascending) whose key hashes there.
pub struct Table {
    bits: Vec<u64>,
    bit_shift: u32,
    bucket_shift: u32,
    /// Bucket `b`'s blocks are `ids[starts[b]..ends[b]]`; `ends` shrinks as blocks are
    /// dropped (found).
    starts: Vec<u32>,
    ends: Vec<u32>,
    /// Block ids, grouped by bucket, ascending within one.
    pub ids: Vec<u32>,
}

impl Table {
    /// A table of the blocks `0..n`, block `i` under the weak key `key(i)`.
    pub fn new(n: u32, key: impl Fn(u32) -> u64) -> Table {
        let log = (u64::from(n).max(2) - 1).ilog2() + 1; // ceil(log2(n)), at least 1
        let bucket_bits = log;
        let filter_bits = (log + 5).clamp(6, 24);
        let buckets = 1usize << bucket_bits;
        let bucket_shift = 64 - bucket_bits;
        let mut starts = vec![0u32; buckets + 1];
        for i in 0..n {
            starts[(hash(key(i)) >> bucket_shift) as usize + 1] += 1;
        }
        for b in 0..buckets {
            starts[b + 1] += starts[b];
        }
        let mut ends = starts[..buckets].to_vec();
        let mut ids = vec![0u32; n as usize];
        let mut bits = vec![0u64; 1 << (filter_bits - 6)];
        let bit_shift = 64 - filter_bits;
        for i in 0..n {
            let h = hash(key(i));
            let b = (h >> bucket_shift) as usize;
            ids[ends[b] as usize] = i;
            ends[b] += 1;
            let bit = h >> bit_shift;
            bits[(bit >> 6) as usize] |= 1 << (bit & 63);
        }
        starts.truncate(buckets);
        Table {
            bits,
            bit_shift,
            bucket_shift,
            starts,
            ends,
            ids,
        }
    }

    /// False when no block has a key hashing to `h`.
    #[inline(always)]
    pub fn maybe(&self, h: u64) -> bool {
        let bit = h >> self.bit_shift;
        self.bits[(bit >> 6) as usize] >> (bit & 63) & 1 != 0
    }

    /// The bucket of hash `h` and its range in [`Table::ids`].
    pub fn bucket(&self, h: u64) -> (usize, usize, usize) {
        let b = (h >> self.bucket_shift) as usize;
        (b, self.starts[b] as usize, self.ends[b] as usize)
    }

    /// Bucket `b` now ends at `end` (its blocks from `end` on were dropped).
    pub fn shorten(&mut self, b: usize, end: usize) {
        self.ends[b] = end as u32;
    }
}

/// The blocks found so far, with a summary level so the next found block after one is
/// found in O(n / 4096) words.
pub struct Known {
    words: Vec<u64>,
    /// Bit `k` set when `words[k]` is not zero.
    summary: Vec<u64>,
    n: u32,
}

impl Known {
    /// No block of `0..n` found.
    pub fn new(n: u32) -> Known {
        let words = (n as usize).div_ceil(64);
        Known {
            words: vec![0; words],
            summary: vec![0; words.div_ceil(64)],
            n,
        }
    }

    /// Whether block `i` was found.
    #[inline]
    pub fn get(&self, i: u32) -> bool {
        self.words[(i >> 6) as usize] >> (i & 63) & 1 != 0
    }

    /// Marks block `i` found.
    pub fn set(&mut self, i: u32) {
        let w = (i >> 6) as usize;
        self.words[w] |= 1 << (i & 63);
        self.summary[w >> 6] |= 1 << (w & 63);
    }

    /// The first found block at or after `i`, or `n` when there is none (zsync's
    /// `next_known_block`).
    pub fn next_from(&self, i: u32) -> u32 {
        if i >= self.n {
            return self.n;
        }
        let w = (i >> 6) as usize;
        let here = self.words[w] & (u64::MAX << (i & 63));
        if here != 0 {
            return (w as u32) << 6 | here.trailing_zeros();
        }
        let next = w + 1;
        let mut s = next >> 6;
        let mut bits = match self.summary.get(s) {
            Some(&v) => v & u64::MAX.checked_shl((next & 63) as u32).unwrap_or(0),
            None => return self.n,
        };
        loop {
            if bits != 0 {
                let word = s << 6 | bits.trailing_zeros() as usize;
                return ((word as u32) << 6 | self.words[word].trailing_zeros()).min(self.n);
            }
            s += 1;
            match self.summary.get(s) {
                Some(&v) => bits = v,
                None => return self.n,
            }
        }
    }
}
