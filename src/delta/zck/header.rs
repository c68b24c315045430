//! The lead, preface, index and signatures of a zchunk file (`zchunk_format.txt`; read as
//! `src/lib/header.c`, `src/lib/index/index_read.c` and `src/lib/compint.c` do), every
//! length checked against the bytes that hold it.

use super::{Compression, HashType, MAX_CHUNK_LEN, MAX_DICT_LEN, MAX_HEAD_LEN};

/// A full file's lead ID.
pub const MAGIC: &[u8; 5] = b"\0ZCK1";
/// A detached header's lead ID (the header alone, without chunks).
const DETACHED_MAGIC: &[u8; 5] = b"\0ZHR1";
/// The longest compressed integer: 64 bits in 7-bit groups.
const MAX_CI_BYTES: usize = 10;

/// A compressed integer (`(ci)`): 7 bits a byte, least significant first, the last byte
/// with its top bit set. `Ok(None)` when `buf` ends before its last byte.
pub(super) fn ci(buf: &[u8], pos: &mut usize, what: &str) -> Result<Option<u64>, String> {
    let mut value: u64 = 0;
    for k in 0..MAX_CI_BYTES {
        let Some(&b) = buf.get(*pos + k) else { return Ok(None) };
        let group = u64::from(b & 0x7f);
        let shifted = group << (7 * k);
        if k == MAX_CI_BYTES - 1 && group > 1 {
            return Err(format!("zchunk header byte {}: {what} does not fit 64 bits", *pos));
        }
        value |= shifted;
        if b & 0x80 != 0 {
            *pos += k + 1;
            return Ok(Some(value));
        }
    }
    Err(format!(
        "zchunk header byte {}: {what} is longer than {MAX_CI_BYTES} bytes",
        *pos
    ))
}

/// [`ci`] where the whole header is at hand: its end is an error.
fn ci_in(buf: &[u8], pos: &mut usize, what: &str) -> Result<u64, String> {
    let at = *pos;
    ci(buf, pos, what)?.ok_or_else(|| format!("zchunk header byte {at}: {what} runs past the header's end"))
}

/// `n` bytes at `pos` within `buf`, advancing `pos`.
fn take<'a>(buf: &'a [u8], pos: &mut usize, n: u64, what: &str) -> Result<&'a [u8], String> {
    let end = usize::try_from(n)
        .ok()
        .and_then(|n| pos.checked_add(n))
        .filter(|&end| end <= buf.len())
        .ok_or_else(|| {
            format!(
                "zchunk header byte {}: {what} ({n} bytes) runs past the header's end",
                *pos
            )
        })?;
    let bytes = &buf[*pos..end];
    *pos = end;
    Ok(bytes)
}

/// The lead, as read.
pub struct Lead {
    /// The lead's length, bytes: ID, checksum type, header size, header checksum (its
    /// last `hash.digest_len()` bytes).
    pub len: usize,
    /// The header's length after the lead, bytes.
    pub header_len: usize,
    /// The header (and data) checksum's type.
    pub hash: HashType,
}

/// Reads the lead from `prefix`: `Ok(None)` when `prefix` ends first.
pub fn lead(prefix: &[u8]) -> Result<Option<Lead>, String> {
    let n = prefix.len().min(MAGIC.len());
    if prefix[..n] != MAGIC[..n] {
        if prefix.starts_with(DETACHED_MAGIC) {
            return Err("a detached zchunk header (lead \\0ZHR1): the chunks are not in this file".into());
        }
        return Err("not a zchunk file: it does not start with the lead \\0ZCK1".into());
    }
    if n < MAGIC.len() {
        return Ok(None);
    }
    let mut pos = MAGIC.len();
    let Some(kind) = ci(prefix, &mut pos, "the checksum type")? else {
        return Ok(None);
    };
    let hash = HashType::from_id(kind).ok_or_else(|| format!("zchunk lead: unknown checksum type {kind}"))?;
    let Some(header_len) = ci(prefix, &mut pos, "the header size")? else {
        return Ok(None);
    };
    let len = pos + hash.digest_len();
    let header_len = usize::try_from(header_len)
        .ok()
        .filter(|&h| h <= MAX_HEAD_LEN - len)
        .ok_or_else(|| format!("zchunk lead: a header of {header_len} bytes (more than {MAX_HEAD_LEN})"))?;
    Ok(Some(Lead { len, header_len, hash }))
}

/// One index entry: digests and lengths.
pub struct Entry<'a> {
    pub digest: &'a [u8],
    /// Empty unless the file has uncompressed digests.
    pub uncompressed_digest: &'a [u8],
    pub comp_len: u64,
    pub len: u64,
}

/// The preface and index, as read (lengths checked by [`check_entry`]).
pub struct Body<'a> {
    pub data_digest: &'a [u8],
    pub uncompressed: bool,
    pub compression: Compression,
    pub chunk_hash: HashType,
    pub entries: Vec<Entry<'a>>,
}

/// Reads preface, index and signatures from `head` (lead and header, checksum checked).
pub fn body<'a>(head: &'a [u8], lead: &Lead) -> Result<Body<'a>, String> {
    let mut pos = lead.len;
    let data_digest = take(head, &mut pos, lead.hash.digest_len() as u64, "the data checksum")?;
    let flags = ci_in(head, &mut pos, "the flags")?;
    if flags & 1 != 0 {
        return Err("zchunk flags: data streams (flag 0) are not supported".into());
    }
    if flags & !0b110 != 0 {
        return Err(format!("zchunk flags: unknown flags set ({:#x})", flags & !0b110));
    }
    let kind = ci_in(head, &mut pos, "the compression type")?;
    let compression = match kind {
        0 => Compression::None,
        2 => Compression::Zstd,
        _ => {
            return Err(format!(
                "zchunk compression type {kind} is not supported (only zstd, 2, and none, 0)"
            ));
        }
    };
    if flags & 2 != 0 {
        let count = ci_in(head, &mut pos, "the optional element count")?;
        for _ in 0..count {
            // Each element takes at least two bytes: the loop ends at the header's end.
            let _id = ci_in(head, &mut pos, "an optional element's ID")?;
            let size = ci_in(head, &mut pos, "an optional element's size")?;
            take(head, &mut pos, size, "an optional element")?;
        }
    }
    let index_len = ci_in(head, &mut pos, "the index size")?;
    let index = take(head, &mut pos, index_len, "the index")?;
    let (chunk_hash, entries) = index_entries(index, flags & 4 != 0, pos - index.len())?;
    let count = ci_in(head, &mut pos, "the signature count")?;
    for _ in 0..count {
        let _kind = ci_in(head, &mut pos, "a signature's type")?;
        let size = ci_in(head, &mut pos, "a signature's size")?;
        take(head, &mut pos, size, "a signature")?;
    }
    // Bytes after the signatures are left alone, as zck does (they are in the checksum).
    Ok(Body {
        data_digest,
        uncompressed: flags & 4 != 0,
        compression,
        chunk_hash,
        entries,
    })
}

/// The index's entries (`index` starts at header byte `at`, for messages).
fn index_entries(index: &[u8], uncompressed: bool, at: usize) -> Result<(HashType, Vec<Entry<'_>>), String> {
    let mut pos = 0;
    let kind = ci_in(index, &mut pos, "the chunk checksum type")?;
    let chunk_hash =
        HashType::from_id(kind).ok_or_else(|| format!("zchunk index: unknown chunk checksum type {kind}"))?;
    let count = ci_in(index, &mut pos, "the chunk count")?;
    let d = chunk_hash.digest_len() as u64;
    let each = if uncompressed { 2 * d } else { d } + 2;
    let room = (index.len() - pos) as u64 / each;
    if count == 0 || count > room {
        return Err(format!(
            "zchunk index: {count} chunks, where its {} bytes hold 1 to {room}",
            index.len()
        ));
    }
    let mut entries = Vec::with_capacity(count as usize);
    while pos < index.len() {
        let digest = take(index, &mut pos, d, "a chunk checksum")?;
        let uncompressed_digest = if uncompressed {
            take(index, &mut pos, d, "a chunk checksum")?
        } else {
            &[]
        };
        let comp_len = ci_in(index, &mut pos, "a chunk's length")?;
        let len = ci_in(index, &mut pos, "a chunk's uncompressed length")?;
        entries.push(Entry {
            digest,
            uncompressed_digest,
            comp_len,
            len,
        });
        if entries.len() as u64 > count {
            return Err(format!(
                "zchunk index byte {}: more chunks than its count, {count}",
                at + pos
            ));
        }
    }
    if entries.len() as u64 != count {
        return Err(format!(
            "zchunk index: {} chunks where its count says {count}",
            entries.len()
        ));
    }
    Ok((chunk_hash, entries))
}

/// Checks entry `n`'s lengths (`n` 0: the dictionary) against what its compression can
/// give, so no length from the header asks for more than a chunk holds.
pub fn check_entry(n: usize, e: &Entry<'_>, compression: Compression) -> Result<(), String> {
    let max = if n == 0 { MAX_DICT_LEN } else { MAX_CHUNK_LEN };
    if e.len > max {
        return Err(format!(
            "zchunk chunk {n}: {} bytes uncompressed (more than {max})",
            e.len
        ));
    }
    if n > 0 && (e.len == 0 || e.comp_len == 0) {
        return Err(format!(
            "zchunk chunk {n}: empty ({} bytes, {} compressed)",
            e.len, e.comp_len
        ));
    }
    if (e.len == 0) != (e.comp_len == 0) {
        return Err(format!(
            "zchunk chunk {n}: {} bytes from {} compressed",
            e.len, e.comp_len
        ));
    }
    let bound = match compression {
        Compression::None => e.len,
        // ZSTD_compressBound: len + len/256 + at most 64; frames made otherwise take more
        // only by a few bytes a 128 KiB block.
        Compression::Zstd => e.len + e.len / 128 + 1024,
    };
    if e.comp_len > bound {
        return Err(format!(
            "zchunk chunk {n}: {} compressed bytes for {} uncompressed ({}: at most {bound})",
            e.comp_len,
            e.len,
            compression.name()
        ));
    }
    if compression == Compression::None && e.comp_len != e.len {
        return Err(format!(
            "zchunk chunk {n}: {} stored bytes for {} uncompressed",
            e.comp_len, e.len
        ));
    }
    Ok(())
}
