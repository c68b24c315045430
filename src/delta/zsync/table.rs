//! The lookup structures of a scan: the blocks by their weak sums (a bit filter in
//! front of a bucketed table), and the set of blocks already found.
//!
//! zsync 0.6.2 (`c/librcksum/hash.c`) keeps a 1-bit-per-value filter and chained hash
//! buckets keyed on part of the weak sums, and unlinks a block from its chain once it
//! has the block's data; a chain lists its blocks in ascending order. This table holds
//! the same blocks in the same order, keyed on the whole weak key, so the blocks a
//! window's key reaches are exactly zsync's (which compares the whole weak sums itself).

/// Spreads a window's weak sums (as stored: masked) over 32 bits; the bucket (and its
/// filter word) is from its top bits, the filter's two bits in the word its low 12.
#[inline(always)]
pub fn hash(w0: u32, w1: u32) -> u32 {
    (w0.wrapping_mul(0x9E37_79B1) ^ w1).wrapping_mul(0x85EB_CA77)
}

/// The two bits hash `h` sets in its filter word.
#[inline(always)]
fn filter_bits(h: u32) -> u64 {
    1 << (h & 63) | 1 << (h >> 6 & 63)
}

/// The bucket (filter word) of hash `h` among `len`: its top bits scaled (a multiply, no
/// shift by a variable amount, which costs three micro-ops on many x86 cores).
#[inline(always)]
fn word_index(h: u32, len: usize) -> usize {
    ((u64::from(h) * len as u64) >> 32) as usize
}

/// Blocks by weak sums, in buckets by hash (ascending within one): about one or two
/// blocks a bucket. Read-only once made, so the two halves of a split search share one
/// (behind an `Arc`); each scan keeps its own [`Filter`] in front of it.
pub struct Table {
    /// Bucket `b`'s blocks are `ids[starts[b]..starts[b + 1]]`.
    starts: Vec<u32>,
    /// Block ids, grouped by bucket, ascending within one.
    pub ids: Vec<u32>,
}

/// One scan's filter in front of a [`Table`]: a word per bucket, two bits set in it per
/// block (a blocked Bloom filter) that lets through under 1 % of the windows that match
/// no block. A bucket's word is made again from the blocks the scan has not found yet
/// when it finds one, so the windows of a region already found (a run of zeros) stop at
/// the filter. At most 2^18 buckets: 2 MiB.
#[derive(Clone)]
pub struct Filter {
    words: Vec<u64>,
}

impl Table {
    /// A table of the blocks `0..n`, block `i` under the weak sums `sums(i)` (the second
    /// 0 when windows are one block), and the filter of all its blocks.
    pub fn new(n: u32, sums: impl Fn(u32) -> (u32, u32)) -> (Table, Filter) {
        let log = (u64::from(n).max(2) - 1).ilog2() + 1; // ceil(log2(n)), at least 1
        let buckets = 1usize << (log.clamp(5, 19) - 1);
        let mut starts = vec![0u32; buckets + 1];
        for i in 0..n {
            let (w0, w1) = sums(i);
            starts[word_index(hash(w0, w1), buckets) + 1] += 1;
        }
        for b in 0..buckets {
            starts[b + 1] += starts[b];
        }
        let mut ends = starts[..buckets].to_vec();
        let mut ids = vec![0u32; n as usize];
        let mut words = vec![0u64; buckets];
        for i in 0..n {
            let (w0, w1) = sums(i);
            let h = hash(w0, w1);
            let b = word_index(h, buckets);
            ids[ends[b] as usize] = i;
            ends[b] += 1;
            words[b] |= filter_bits(h);
        }
        (Table { starts, ids }, Filter { words })
    }

    /// The bucket of hash `h` and its range in [`Table::ids`].
    pub fn bucket(&self, h: u32) -> (usize, usize, usize) {
        let b = word_index(h, self.starts.len() - 1);
        (b, self.starts[b] as usize, self.starts[b + 1] as usize)
    }
}

impl Filter {
    /// False when no block left in the filter has sums hashing to `h`.
    #[inline(always)]
    pub fn maybe(&self, h: u32) -> bool {
        let w = self.words[word_index(h, self.words.len())];
        w >> (h & 63) & 1 != 0 && w >> (h >> 6 & 63) & 1 != 0
    }

    /// Bucket `b`'s word made again from the blocks `left` (`sums` as for [`Table::new`]).
    pub fn refill(&mut self, b: usize, left: impl Iterator<Item = u32>, sums: impl Fn(u32) -> (u32, u32)) {
        self.words[b] = left
            .map(|i| {
                let (w0, w1) = sums(i);
                filter_bits(hash(w0, w1))
            })
            .fold(0, |w, bits| w | bits);
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
            Some(&v) => v & (u64::MAX << (next & 63)),
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
