//! zchunk (`zchunk_format.txt`; files made by `zck`): the lead, the header and its index,
//! the automatic chunker, chunks decoded and checked.
//!
//! A `.zck` file is a lead (ID `\0ZCK1`, the header checksum's type, the header's size,
//! the header checksum), a header (preface: data checksum, flags, compression type,
//! optional elements, index size; index: chunk checksum type, chunk count, one entry per
//! chunk; signatures) and the chunks, each compressed on its own. Entry 0 is the
//! dictionary (lengths 0 when there is none); the others are the data chunks, in order.
//! With flag 2 (`zck -u`) each entry carries the uncompressed chunk's checksum too, so a
//! plain seed (an image, a partition) cut with zck's own chunker ([`Chunker`]) can be
//! matched chunk for chunk.
//!
//! [`Zck`] is the [`Index`]: its pieces are the data chunks, target offsets the running
//! sum of uncompressed lengths, remote offsets the data's start (lead + header) plus the
//! running sum of compressed lengths (the dictionary's first).

mod chunker;
mod header;
mod scan;
mod zstd;

use std::sync::{Mutex, PoisonError};

use ring::digest;
use ruzstd::decoding::FrameDecoder;

use super::{Index, Piece, Scanner};

pub use chunker::{Chunker, MAX_CHUNK, MIN_CHUNK};

/// The largest header (lead included) taken, bytes: a 1 GiB image cut by zck into 32 KiB
/// chunks with both checksums has a 2.3 MiB header.
pub const MAX_HEAD_LEN: usize = 64 << 20;
/// The largest uncompressed data chunk taken, bytes: zck's automatic chunks are at most
/// [`MAX_CHUNK`] (128 KiB), its manual ones at most 10 MiB (`CHUNK_DEFAULT_MAX`).
pub const MAX_CHUNK_LEN: u64 = 16 << 20;
/// The largest uncompressed dictionary taken, bytes (zstd's trained ones are ~100 KiB).
pub const MAX_DICT_LEN: u64 = 16 << 20;

/// A checksum type of the lead or the index (`zchunk_format.txt`, "Checksum type",
/// "Chunk checksum type"): the digest is the first [`HashType::digest_len`] bytes of
/// [`HashType::algorithm`]'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashType {
    /// 0: SHA-1, 20 bytes.
    Sha1,
    /// 1: SHA-256, 32 bytes.
    Sha256,
    /// 2: SHA-512, 64 bytes.
    Sha512,
    /// 3: SHA-512/128: SHA-512's first 16 bytes (not FIPS SHA-512/t; `src/lib/hash/hash.c`).
    Sha512_128,
}

impl HashType {
    fn from_id(id: u64) -> Option<HashType> {
        Some(match id {
            0 => HashType::Sha1,
            1 => HashType::Sha256,
            2 => HashType::Sha512,
            3 => HashType::Sha512_128,
            _ => return None,
        })
    }

    /// The algorithm whose digest, cut to [`HashType::digest_len`] bytes, is this one's.
    pub fn algorithm(self) -> &'static digest::Algorithm {
        match self {
            HashType::Sha1 => &digest::SHA1_FOR_LEGACY_USE_ONLY,
            HashType::Sha256 => &digest::SHA256,
            HashType::Sha512 | HashType::Sha512_128 => &digest::SHA512,
        }
    }

    /// The digest's length, bytes.
    pub fn digest_len(self) -> usize {
        match self {
            HashType::Sha1 => 20,
            HashType::Sha256 => 32,
            HashType::Sha512 => 64,
            HashType::Sha512_128 => 16,
        }
    }

    /// The name zck prints.
    pub fn name(self) -> &'static str {
        match self {
            HashType::Sha1 => "SHA-1",
            HashType::Sha256 => "SHA-256",
            HashType::Sha512 => "SHA-512",
            HashType::Sha512_128 => "SHA-512/128",
        }
    }

    /// Whether `bytes` digest to `expected`.
    fn check(self, bytes: &[u8], expected: &[u8]) -> bool {
        let d = digest::digest(self.algorithm(), bytes);
        d.as_ref()[..self.digest_len()] == *expected
    }
}

/// How the chunks are stored (`zchunk_format.txt`, "Compression type").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// 0: as they are.
    None,
    /// 2: one zstd frame each.
    Zstd,
}

impl Compression {
    fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Zstd => "zstd",
        }
    }
}

/// The dictionary chunk: where it is, its compressed checksum, its uncompressed length.
struct Dict {
    remote: (u64, u64),
    digest: Vec<u8>,
    len: u64,
}

/// A parsed zchunk header: the target's pieces and their checksums.
pub struct Zck {
    head_len: u64,
    /// Where the data ends: the whole file's length.
    data_end: u64,
    header_hash: HashType,
    header_digest: Vec<u8>,
    /// Absent with flag 2 (zck writes zeros and checks nothing).
    data_digest: Option<Vec<u8>>,
    compression: Compression,
    chunk_hash: HashType,
    /// Has a dictionary that decoding needs (zstd, nonzero length).
    dict: Option<Dict>,
    /// The dictionary, uncompressed, once [`Index::take_always`] has checked it.
    dict_bytes: Option<Vec<u8>>,
    pieces: Vec<Piece>,
    /// Each piece's compressed checksum, [`HashType::digest_len`] bytes each, in piece order.
    digests: Vec<u8>,
    /// Each piece's uncompressed checksum, likewise; empty without flag 2.
    uncompressed_digests: Vec<u8>,
    /// A decoder to reuse (with the dictionary loaded), and the dictionary's ID in it.
    decoder: Mutex<Option<(FrameDecoder, Option<u32>)>>,
}

/// The length of lead + header of the `.zck` file that starts with `prefix` (bytes), or
/// `None` when `prefix` is too short to tell (the lead is 5 + up to 20 + 20 or 32 bytes).
///
/// # Errors
/// When `prefix` is not a zchunk file's start (no `\0ZCK1`; a detached header `\0ZHR1`
/// has no chunks), names an unknown checksum type, or a header larger than
/// [`MAX_HEAD_LEN`].
pub fn head_len(prefix: &[u8]) -> Result<Option<u64>, String> {
    Ok(header::lead(prefix)?.map(|l| (l.len + l.header_len) as u64))
}

/// Recomputes the header checksum of `head` (lead + header, as [`head_len`] measures it)
/// in place: for tests and fuzzing, to make an edited header whole again.
///
/// # Errors
/// As [`head_len`], and when `head` is shorter than its header.
pub fn reseal(head: &mut [u8]) -> Result<(), String> {
    let lead = header::lead(head)?.ok_or("the zchunk lead is cut short")?;
    let end = lead.len + lead.header_len;
    if head.len() < end {
        return Err(format!("the zchunk header is cut short: {} of {end} bytes", head.len()));
    }
    let d = header_checksum(head, &lead);
    let at = lead.len - lead.hash.digest_len();
    head[at..lead.len].copy_from_slice(&d.as_ref()[..lead.hash.digest_len()]);
    Ok(())
}

/// The header checksum: everything from the file's start to the header's end but the
/// checksum itself (`read_header_from_file`).
fn header_checksum(head: &[u8], lead: &header::Lead) -> digest::Digest {
    let mut ctx = digest::Context::new(lead.hash.algorithm());
    ctx.update(&head[..lead.len - lead.hash.digest_len()]);
    ctx.update(&head[lead.len..lead.len + lead.header_len]);
    ctx.finish()
}

/// The lead and body of `head` once its header checksum is checked.
fn checked_body(head: &[u8]) -> Result<(header::Lead, header::Body<'_>), String> {
    let lead = header::lead(head)?.ok_or_else(|| format!("zchunk lead cut short: {} bytes", head.len()))?;
    let end = lead.len + lead.header_len;
    if head.len() < end {
        return Err(format!("zchunk header cut short: {} of its {end} bytes", head.len()));
    }
    let head = &head[..end];
    let stored = &head[lead.len - lead.hash.digest_len()..lead.len];
    if header_checksum(head, &lead).as_ref()[..lead.hash.digest_len()] != *stored {
        return Err(format!(
            "zchunk header checksum ({}) does not match: the header is corrupt or was changed",
            lead.hash.name()
        ));
    }
    let body = header::body(head, &lead)?;
    Ok((lead, body))
}

/// Where the data chunks of the `.zck` that starts with `head` are, `(start, len)` of
/// each as stored, in order: what [`Zck::parse`] checks, without keeping the digests
/// (an old `.zck` seed's chunks are only located by it).
///
/// # Errors
/// As [`Zck::parse`].
pub fn chunk_spans(head: &[u8]) -> Result<Vec<(u64, u64)>, String> {
    let (lead, body) = checked_body(head)?;
    let mut remote = (lead.len + lead.header_len) as u64;
    let mut spans = Vec::with_capacity(body.entries.len().saturating_sub(1));
    for (n, e) in body.entries.iter().enumerate() {
        header::check_entry(n, e, body.compression)?;
        if n > 0 {
            spans.push((remote, e.comp_len));
        }
        remote = remote
            .checked_add(e.comp_len)
            .ok_or_else(|| format!("zchunk chunk {n}: the file's length overflows"))?;
    }
    Ok(spans)
}

impl Zck {
    /// Parses `head`, a `.zck` file's first [`head_len`] bytes or more (the rest is not
    /// read), and checks the header checksum.
    ///
    /// # Errors
    /// A message naming what is wrong and where: not a zchunk file, a truncated header,
    /// a header checksum that does not match, data streams or unknown flags, a compression
    /// other than zstd or none, an unknown checksum type, an index that runs past its size
    /// or whose count disagrees, a chunk length beyond [`MAX_CHUNK_LEN`] (the dictionary's
    /// beyond [`MAX_DICT_LEN`]) or beyond what its compression can make of it.
    pub fn parse(head: &[u8]) -> Result<Zck, String> {
        let (lead, body) = checked_body(head)?;
        let end = lead.len + lead.header_len;
        let stored = &head[lead.len - lead.hash.digest_len()..lead.len];
        let mut z = Zck {
            head_len: end as u64,
            data_end: end as u64,
            header_hash: lead.hash,
            header_digest: stored.to_vec(),
            data_digest: (!body.uncompressed).then(|| body.data_digest.to_vec()),
            compression: body.compression,
            chunk_hash: body.chunk_hash,
            dict: None,
            dict_bytes: None,
            pieces: Vec::with_capacity(body.entries.len() - 1),
            digests: Vec::with_capacity((body.entries.len() - 1) * body.chunk_hash.digest_len()),
            uncompressed_digests: Vec::new(),
            decoder: Mutex::new(None),
        };
        let (mut target, mut remote) = (0u64, end as u64);
        for (n, e) in body.entries.iter().enumerate() {
            header::check_entry(n, e, body.compression)?;
            let next = remote
                .checked_add(e.comp_len)
                .ok_or_else(|| format!("zchunk chunk {n}: the file's length overflows"))?;
            if n == 0 {
                if e.comp_len > 0 && body.compression == Compression::Zstd {
                    z.dict = Some(Dict {
                        remote: (remote, next),
                        digest: e.digest.to_vec(),
                        len: e.len,
                    });
                }
            } else {
                z.pieces.push(Piece {
                    target_start: target,
                    target_len: e.len,
                    remote_start: remote,
                    remote_len: e.comp_len,
                });
                z.digests.extend_from_slice(e.digest);
                z.uncompressed_digests.extend_from_slice(e.uncompressed_digest);
                target = target
                    .checked_add(e.len)
                    .ok_or_else(|| format!("zchunk chunk {n}: the target's length overflows"))?;
            }
            remote = next;
        }
        z.data_end = remote;
        Ok(z)
    }

    /// The pieces ([`Index::piece`]), in target order.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// Lead + header, bytes: where the data (dictionary, then chunks) starts.
    pub fn head_len(&self) -> u64 {
        self.head_len
    }

    /// The whole `.zck` file's length, bytes: what a full download costs.
    pub fn file_len(&self) -> u64 {
        self.data_end
    }

    /// The header checksum (the lead's): type and digest. Pinning it pins the whole index.
    pub fn header_digest(&self) -> (HashType, &[u8]) {
        (self.header_hash, &self.header_digest)
    }

    /// The data checksum: over the file's data as stored (compressed dictionary and
    /// chunks, from [`Zck::head_len`] to the end), not over the target. `None` when the
    /// file has uncompressed checksums (flag 2): zck then writes zeros and each chunk's
    /// checksum stands instead.
    pub fn data_digest(&self) -> Option<(HashType, &[u8])> {
        self.data_digest.as_deref().map(|d| (self.header_hash, d))
    }

    /// Whether the index carries uncompressed chunk checksums (flag 2, `zck -u`): plain
    /// seeds can be matched only then.
    pub fn has_uncompressed_digests(&self) -> bool {
        !self.uncompressed_digests.is_empty()
    }

    /// The chunk checksum type.
    pub fn chunk_hash(&self) -> HashType {
        self.chunk_hash
    }

    /// How the chunks are stored.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// Piece `i`'s compressed checksum.
    fn digest(&self, i: usize) -> &[u8] {
        let d = self.chunk_hash.digest_len();
        &self.digests[i * d..(i + 1) * d]
    }

    /// Piece `i`'s uncompressed checksum (empty without flag 2).
    fn uncompressed_digest(&self, i: usize) -> &[u8] {
        let d = self.chunk_hash.digest_len();
        self.uncompressed_digests.get(i * d..(i + 1) * d).unwrap_or(&[])
    }

    /// Names piece `i` in messages: zck's chunk number and where it goes.
    fn what(&self, i: usize) -> String {
        let p = &self.pieces[i];
        format!(
            "zchunk chunk {} (target bytes {}..{})",
            i + 1,
            p.target_start,
            p.target_start + p.target_len
        )
    }

    /// Decodes `src` into `out` (appended) with the loaded dictionary, at most `max` bytes.
    fn decode(&self, src: &[u8], max: u64, out: &mut Vec<u8>) -> Result<(), String> {
        // One decoder is kept for reuse; a caller that finds it busy makes its own.
        let mut fresh = None;
        let mut guard = self.decoder.try_lock().ok();
        let slot = match guard.as_deref_mut() {
            Some(slot) => slot,
            None => &mut fresh,
        };
        if slot.is_none() {
            let mut d = FrameDecoder::new();
            let id = match &self.dict_bytes {
                Some(dict) => Some(zstd::load_dict(&mut d, dict)?),
                None => None,
            };
            *slot = Some((d, id));
        }
        let (d, id) = slot.as_mut().ok_or("no decoder")?;
        zstd::decode(d, *id, src, max, out)
    }
}

impl Index for Zck {
    fn target_len(&self) -> u64 {
        self.pieces.last().map_or(0, |p| p.target_start + p.target_len)
    }

    fn piece_count(&self) -> usize {
        self.pieces.len()
    }

    fn piece(&self, i: usize) -> Piece {
        self.pieces[i]
    }

    /// The dictionary chunk, when the file has one and its chunks need it (zstd).
    fn always_fetch(&self) -> Option<(u64, u64)> {
        self.dict.as_ref().map(|d| d.remote)
    }

    /// Checks the dictionary chunk against its compressed checksum (its uncompressed one,
    /// zck's digest of nothing, is not a check), decodes it and keeps it for the chunks.
    fn take_always(&mut self, bytes: &[u8]) -> Result<(), String> {
        let Some(dict) = &self.dict else {
            return if bytes.is_empty() {
                Ok(())
            } else {
                Err("this zchunk file has no dictionary to take".into())
            };
        };
        let want = dict.remote.1 - dict.remote.0;
        if bytes.len() as u64 != want {
            return Err(format!(
                "zchunk dictionary: {} bytes where the index says {want}",
                bytes.len()
            ));
        }
        if !self.chunk_hash.check(bytes, &dict.digest) {
            return Err(format!(
                "zchunk dictionary: its {} checksum does not match",
                self.chunk_hash.name()
            ));
        }
        let mut out = Vec::with_capacity(dict.len as usize);
        zstd::decode(&mut FrameDecoder::new(), None, bytes, dict.len, &mut out)
            .map_err(|e| format!("zchunk dictionary: {e}"))?;
        if out.len() as u64 != dict.len {
            return Err(format!(
                "zchunk dictionary: {} bytes decoded where the index says {}",
                out.len(),
                dict.len
            ));
        }
        self.dict_bytes = Some(out);
        *self.decoder.lock().unwrap_or_else(PoisonError::into_inner) = None;
        Ok(())
    }

    /// Checks `fetched` against the compressed checksum (when the index has a nonzero
    /// one) before decoding it, decodes it (at most the declared length), and checks the
    /// result against the uncompressed checksum when the index has those.
    fn open_fetched(&self, i: usize, fetched: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        out.clear();
        let p = self.pieces.get(i).ok_or_else(|| format!("zchunk: no piece {i}"))?;
        if fetched.len() as u64 != p.remote_len {
            return Err(format!(
                "{}: {} bytes where the index says {}",
                self.what(i),
                fetched.len(),
                p.remote_len
            ));
        }
        let digest = self.digest(i);
        if digest.iter().any(|&b| b != 0) && !self.chunk_hash.check(fetched, digest) {
            return Err(format!(
                "{}: its {} checksum does not match",
                self.what(i),
                self.chunk_hash.name()
            ));
        }
        match self.compression {
            Compression::None => out.extend_from_slice(fetched),
            Compression::Zstd => {
                if self.dict.is_some() && self.dict_bytes.is_none() {
                    return Err(format!("{}: the dictionary has not been taken yet", self.what(i)));
                }
                out.reserve_exact(p.target_len as usize);
                if let Err(e) = self.decode(fetched, p.target_len, out) {
                    out.clear();
                    return Err(format!("{}: {e}", self.what(i)));
                }
            }
        }
        let bad = if out.len() as u64 != p.target_len {
            Some(format!(
                "{} bytes decoded where the index says {}",
                out.len(),
                p.target_len
            ))
        } else if self.has_uncompressed_digests() && !self.chunk_hash.check(out, self.uncompressed_digest(i)) {
            Some(format!(
                "its uncompressed {} checksum does not match",
                self.chunk_hash.name()
            ))
        } else {
            None
        };
        if let Some(e) = bad {
            out.clear();
            return Err(format!("{}: {e}", self.what(i)));
        }
        Ok(())
    }

    /// Length and uncompressed checksum; always false without uncompressed checksums.
    fn matches(&self, i: usize, bytes: &[u8]) -> bool {
        self.has_uncompressed_digests()
            && self.pieces.get(i).is_some_and(|p| p.target_len == bytes.len() as u64)
            && self.chunk_hash.check(bytes, self.uncompressed_digest(i))
    }

    /// Streams a seed: a `.zck` (it starts with `\0ZCK1`) is matched by compressed chunk,
    /// anything else is cut with zck's chunker and matched by uncompressed checksum — which
    /// a file without uncompressed checksums (made without `zck -u`) does not have: such a
    /// plain seed finds nothing. How, in `zck/scan.rs`.
    fn scanner<'s, 'e>(&'s self, helper: Option<&'s std::thread::Scope<'s, 'e>>) -> Box<dyn Scanner + 's> {
        Box::new(scan::SeedScanner::new(self, helper))
    }

    /// A plain seed (not an older `.zck`) when the index has uncompressed checksums:
    /// [`scan::SeedScanner::halves`], whose first half ends where it meets the second.
    fn split_scanners<'s>(&'s self, len: u64, mid: u64, head: &[u8]) -> Option<crate::delta::Split<'s>> {
        if head.starts_with(header::MAGIC) || head.len() < header::MAGIC.len() || !self.has_uncompressed_digests() {
            return None;
        }
        let (first, second) = scan::SeedScanner::halves(self, mid);
        Some(crate::delta::Split {
            first: Box::new(first),
            first_end: len,
            second: Box::new(second),
            second_start: mid,
        })
    }
}

#[cfg(test)]
mod tests;
