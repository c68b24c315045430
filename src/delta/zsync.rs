//! zsync control files (`*.zsync`, made by `zsyncmake` 0.6.2): the header, the block sums,
//! the rolling search of a seed.
//!
//! A control file is a text header (`zsync:`, `Filename:`, `MTime:`, `Blocksize:`,
//! `Length:`, `Hash-Lengths:`, `URL:`…, `SHA-1:`; the rules in `zsync/header.rs`: a
//! header zsync 0.6.2 does not know is refused unless `Safe:` lists it, gzip mode is
//! refused, `SHA-256:` and the newer `File-Hash:` are read) ended by an empty line, then
//! one record per block of the target: the last `rsum_bytes` bytes of the block's rolling
//! sum (`a` then `b`, 16 bits each, big-endian) and the first `checksum_bytes` bytes of
//! its MD4. The last block is zero-padded to `Blocksize` for both sums. Sources: zsync
//! 0.6.2 `c/make.c` (`write_block_sums`, `fcopy_hashes`), `c/libzsync/zsync.c`
//! (`zsync_begin`, `zsync_read_blocksums`), the format's `SPEC.md`.
//!
//! A piece is one block, fetched as is: the target and remote ranges are the same.
//! [`Index::scanner`] searches a seed at every byte offset as zsync's client does
//! (`zsync/scan.rs`). An empty target (`Length: 0`, which zsync's client refuses) has no
//! blocks.

mod header;
mod scan;
mod table;
#[cfg(test)]
mod tests;

use md4::{Digest, Md4};

use super::{Index, Piece, Scanner};

pub use header::MAX_BLOCK_SIZE;

/// A parsed zsync control file. Offsets and lengths in bytes.
#[derive(Debug)]
pub struct Zsync {
    filename: Option<String>,
    mtime: Option<String>,
    urls: Vec<String>,
    block_size: u64,
    length: u64,
    seq_matches: u8,
    rsum_bytes: u8,
    checksum_bytes: u8,
    /// Per block: the stored rolling sum, `a << 16 | b` with the bytes the file leaves out
    /// zero (so it is the full sum masked by `rsum_mask`).
    rsums: Vec<u32>,
    /// Per block, `checksum_bytes` bytes: the start of the MD4 of the zero-padded block.
    checksums: Vec<u8>,
    sha1: Option<[u8; 20]>,
    sha256: Option<[u8; 32]>,
}

impl Zsync {
    /// Parses a control file.
    ///
    /// The block sums must be exactly `ceil(Length / Blocksize)` records of
    /// `rsum_bytes + checksum_bytes` bytes: their number is bounded by the body's size
    /// before anything is allocated, so a lying `Length:` is an error, not an allocation.
    ///
    /// # Errors
    /// A message naming what is wrong and where: the header (a line, by number), or a body
    /// that holds fewer (truncated) or more records than `Length:` and `Blocksize:` say.
    pub fn parse(control: &[u8]) -> Result<Zsync, String> {
        let (h, start) = header::parse(control)?;
        let body = &control[start..];
        let entry = usize::from(h.rsum_bytes) + usize::from(h.checksum_bytes);
        let blocks = h.length / h.block_size + u64::from(h.length % h.block_size != 0);
        let need = blocks.checked_mul(entry as u64);
        if need != Some(body.len() as u64) {
            let need = need.map_or_else(|| "more than 2^64".to_owned(), |n| n.to_string());
            let what = if (body.len() as u64) < blocks.saturating_mul(entry as u64) {
                "truncated"
            } else {
                "bytes after the last block sum"
            };
            return Err(format!(
                "zsync control file: {what}: Length {} in blocks of {} is {blocks} block sums of \
                 {entry} bytes ({need} bytes), the body after the header holds {} (at offset {start})",
                h.length,
                h.block_size,
                body.len()
            ));
        }
        let blocks = body.len() / entry;
        if blocks > i32::MAX as usize {
            return Err(format!("zsync control file: {blocks} blocks (zsync's limit: 2^31 - 1)"));
        }
        let rsum_len = usize::from(h.rsum_bytes);
        let mut rsums = Vec::with_capacity(blocks);
        let mut checksums = Vec::with_capacity(blocks * usize::from(h.checksum_bytes));
        for record in body.chunks_exact(entry) {
            rsums.push(record[..rsum_len].iter().fold(0u32, |v, &b| v << 8 | u32::from(b)));
            checksums.extend_from_slice(&record[rsum_len..]);
        }
        Ok(Zsync {
            filename: h.filename,
            mtime: h.mtime,
            urls: h.urls,
            block_size: h.block_size,
            length: h.length,
            seq_matches: h.seq_matches,
            rsum_bytes: h.rsum_bytes,
            checksum_bytes: h.checksum_bytes,
            rsums,
            checksums,
            sha1: h.sha1,
            sha256: h.sha256,
        })
    }

    /// Every block as a [`Piece`] (made for the asking: [`Index::piece`] makes one).
    pub fn pieces(&self) -> Vec<Piece> {
        (0..self.piece_count()).map(|i| self.piece(i)).collect()
    }

    /// Every `URL:` of the file, in file order, as written (possibly relative to the
    /// control file's URL; possibly none).
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// `Filename:` as written: untrusted (may hold `/` or `..`): sanitize before use.
    pub fn filename(&self) -> Option<&str> {
        self.filename.as_deref()
    }

    /// `MTime:` as written (RFC 1123, e.g. `Sun, 06 Dec 2026 03:34:36 +0000`).
    pub fn mtime(&self) -> Option<&str> {
        self.mtime.as_deref()
    }

    /// `Blocksize:`, bytes: a power of two, at most [`MAX_BLOCK_SIZE`].
    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    /// `Hash-Lengths:` as `(seq_matches, rsum_bytes, checksum_bytes)` (1 ..= 2, 1 ..= 4,
    /// 3 ..= 16; `(1, 4, 16)` when the header is absent).
    pub fn hash_lengths(&self) -> (u8, u8, u8) {
        (self.seq_matches, self.rsum_bytes, self.checksum_bytes)
    }

    /// The bits of a rolling sum `a << 16 | b` the file stores: its last `rsum_bytes`
    /// bytes. zsync 0.6.2 compares all 16 bits of `b` even when one byte is stored
    /// (`Hash-Lengths: _,1,_`, which `zsyncmake` never writes); this reader compares the
    /// byte stored.
    fn rsum_mask(&self) -> u32 {
        u32::MAX >> (32 - 8 * u32::from(self.rsum_bytes))
    }

    /// Block `i`'s stored MD4 prefix.
    fn checksum(&self, i: usize) -> &[u8] {
        let n = usize::from(self.checksum_bytes);
        &self.checksums[i * n..(i + 1) * n]
    }

    /// Whether `bytes` (at most a block) zero-padded to the block size have block `i`'s
    /// stored MD4 prefix.
    fn strong_matches(&self, i: usize, bytes: &[u8]) -> bool {
        let mut md4 = Md4::new();
        md4.update(bytes);
        let mut pad = self.block_size as usize - bytes.len();
        const ZEROS: [u8; 4096] = [0; 4096];
        while pad > 0 {
            let n = pad.min(ZEROS.len());
            md4.update(&ZEROS[..n]);
            pad -= n;
        }
        md4.finalize()[..usize::from(self.checksum_bytes)] == *self.checksum(i)
    }
}

/// The most blocks a target may have for its seed's search to be split in two halves:
/// 2^18 (1 GiB in 4 KiB blocks), whose second half's filter and found set take some
/// 1 MiB (the table of blocks and the finds are shared).
const SPLIT_MAX_BLOCKS: usize = 1 << 18;

impl Index for Zsync {
    fn target_len(&self) -> u64 {
        self.length
    }

    fn piece_count(&self) -> usize {
        self.rsums.len()
    }

    /// Block `i`: `Blocksize` bytes at `i * Blocksize` (the last one shorter), the same in
    /// the target and the remote file.
    fn piece(&self, i: usize) -> Piece {
        assert!(i < self.rsums.len(), "zsync: no block {i}");
        let target_start = i as u64 * self.block_size;
        let target_len = self.block_size.min(self.length - target_start);
        Piece {
            target_start,
            target_len,
            remote_start: target_start,
            remote_len: target_len,
        }
    }

    /// Copies block `i` (`fetched` must be its `remote_len` bytes) into `out` after
    /// checking its MD4 prefix (over the block zero-padded to `Blocksize`).
    fn open_fetched(&self, i: usize, fetched: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        out.clear();
        if i >= self.piece_count() {
            return Err(format!("zsync: no block {i} (the file has {})", self.piece_count()));
        }
        let p = self.piece(i);
        if fetched.len() as u64 != p.remote_len {
            return Err(format!(
                "zsync block {i} at offset {}: {} bytes fetched, the block has {}",
                p.target_start,
                fetched.len(),
                p.remote_len
            ));
        }
        if !self.strong_matches(i, fetched) {
            return Err(format!(
                "zsync block {i} at offset {} ({} bytes): MD4 does not match the control file",
                p.target_start, p.target_len
            ));
        }
        out.extend_from_slice(fetched);
        Ok(())
    }

    fn matches(&self, i: usize, bytes: &[u8]) -> bool {
        i < self.piece_count() && bytes.len() as u64 == self.piece(i).target_len && self.strong_matches(i, bytes)
    }

    fn scanner<'s, 'e>(&'s self, _helper: Option<&'s std::thread::Scope<'s, 'e>>) -> Box<dyn Scanner + 's> {
        Box::new(scan::ZsyncScanner::new(self))
    }

    /// The first half examines the windows before `mid` (fed a window's span past it),
    /// the second those from `mid` on: every window one scan examines is examined by one
    /// half, a block straddling `mid` by the first. A match moves a scan past the blocks
    /// it matched, so the second half (starting afresh at `mid`) may look at offsets the
    /// one scan jumped over; what it finds there is checked by MD4 all the same.
    ///
    /// The halves share one table of blocks (read-only) and one record of where each
    /// block was found; each has its own filter in front of the table and its own found
    /// set, 4 to 8 bytes a block: a target of more than [`SPLIT_MAX_BLOCKS`] blocks is
    /// searched on one thread, in less memory.
    fn split_scanners<'s>(&'s self, len: u64, mid: u64, _head: &[u8]) -> Option<crate::delta::Split<'s>> {
        if self.rsums.len() > SPLIT_MAX_BLOCKS {
            return None;
        }
        let shared = scan::Shared::of(self);
        let second = scan::ZsyncScanner::part(self, shared.clone(), mid, None);
        let first = scan::ZsyncScanner::part(self, shared, 0, Some(mid));
        let first_end = (mid + first.context() as u64).min(len);
        Some(crate::delta::Split {
            first: Box::new(first),
            first_end,
            second: Box::new(second),
            second_start: mid,
        })
    }

    /// `SHA-1:` and, when present, `SHA-256:` (either may be absent).
    fn whole_digests(&self) -> Vec<(&'static ring::digest::Algorithm, Vec<u8>)> {
        let mut v = Vec::new();
        if let Some(d) = self.sha1 {
            v.push((&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, d.to_vec()));
        }
        if let Some(d) = self.sha256 {
            v.push((&ring::digest::SHA256, d.to_vec()));
        }
        v
    }
}
