//! Write blocks: aligned buffers that collect a segment's bytes in file order, and the
//! compaction copy that fills them.

use uring::Buf;

/// Write block, bytes: one O_DIRECT write (the build-time default; see [`write_block`]).
pub(crate) const WRITE_BLOCK: usize = 256 << 10;

/// The write-block size in bytes: [`WRITE_BLOCK`], or `RINGDL_BLOCK_KIB` KiB (read once;
/// a benchmarking knob, not an option: a power of two from 64 to 4096, anything else is
/// ignored). docs/design.md "Copy budget" has the measurements that chose the default.
pub(crate) fn write_block() -> usize {
    static SIZE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SIZE.get_or_init(|| block_kib(std::env::var("RINGDL_BLOCK_KIB").ok().as_deref()))
}

/// [`write_block`] for the knob's value `v`.
fn block_kib(v: Option<&str>) -> usize {
    match v.and_then(|v| v.trim().parse::<usize>().ok()) {
        Some(k) if k.is_power_of_two() && (64..=4096).contains(&k) => k << 10,
        _ => WRITE_BLOCK,
    }
}

/// A block of the write pool bound to a file offset: `buf[..fill]` holds the bytes of
/// `off..off + fill`.
///
/// INVARIANT: `off` is a multiple of the output alignment; `fill <= buf.len()`.
pub struct WriteBlock {
    /// The pool block (taken out while a RECV fills it).
    pub buf: Option<Buf>,
    /// File offset of `buf[0]`.
    pub off: u64,
    /// Bytes filled so far.
    pub fill: usize,
    /// The source the bytes came from (a mirror's index in the URLs given; 0 with one
    /// URL): a dropped source's blocks are found by it and discarded, never written.
    pub source: usize,
}

impl WriteBlock {
    /// A new, empty block for file offset `off`.
    pub fn new(buf: Buf, off: u64) -> WriteBlock {
        WriteBlock {
            buf: Some(buf),
            off,
            fill: 0,
            source: 0,
        }
    }

    /// Free room in bytes.
    pub fn room(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.len() - self.fill)
    }

    /// Copies as much of `data` as fits (the compaction copy); returns the bytes taken.
    pub fn compact(&mut self, data: &[u8]) -> usize {
        let Some(buf) = self.buf.as_mut() else { return 0 };
        let n = data.len().min(buf.len() - self.fill);
        buf[self.fill..self.fill + n].copy_from_slice(&data[..n]);
        self.fill += n;
        n
    }

    /// Whether the block is full.
    pub fn is_full(&self) -> bool {
        self.room() == 0
    }
}

// Alignment arithmetic lives with the segments it shapes.
pub use crate::schedule::{align_down, align_up};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment() {
        assert_eq!(align_down(4097, 4096), 4096);
        assert_eq!(align_up(4097, 4096), 8192);
        assert_eq!(align_up(0, 4096), 0);
        assert_eq!(align_up(4096, 4096), 4096);
    }

    #[test]
    fn compaction_fills_in_order_and_stops_when_full() {
        let pool = uring::BufPool::new(4096, 1).unwrap();
        let mut b = WriteBlock::new(pool.alloc().unwrap(), 8192);
        let data: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        assert_eq!(b.compact(&data[..1000]), 1000);
        assert_eq!(b.compact(&data[1000..]), 3096);
        assert!(b.is_full());
        assert_eq!(&b.buf.as_ref().unwrap()[..], &data[..4096]);
    }

    #[test]
    fn block_knob_takes_powers_of_two_in_range_only() {
        assert_eq!(block_kib(None), WRITE_BLOCK);
        assert_eq!(block_kib(Some("1024")), 1 << 20);
        assert_eq!(block_kib(Some("64")), 64 << 10);
        for bad in ["", "0", "32", "300", "8192", "1M", "-256"] {
            assert_eq!(block_kib(Some(bad)), WRITE_BLOCK, "{bad}");
        }
    }
}
