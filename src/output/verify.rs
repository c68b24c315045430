//! `--checksum` and `--signature`: the digests of the finished `.part`, read back once through the ring
//! (O_DIRECT when the download used it, so verifying does not fill the page cache either).

use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::path::Path;

use ring::digest::{Algorithm, Context, Digest};
use rustix::fs::{Mode, OFlags};
use uring::{BufPool, Op};

use crate::lane::LaneRing;

use crate::engine::blocks::align_up;
use crate::err;
use crate::error::Result;
use crate::tag::Tag;

/// Reads in flight while hashing.
pub(crate) const DEPTH: usize = 4;

/// What `--signature` needs from the file: a digest, or the bytes (`None`: more than
/// [`crate::signature::MAX_MESSAGE`]).
pub type Signed = Option<Vec<u8>>;

/// What the finished `.part` (`path`, opened O_DIRECT when `direct`, or read through the
/// output's own descriptor `readable` ([`crate::output::Output::readable`]); `total`
/// bytes from offset `base`: a block device's `--offset`, 0 for a file) owes
/// in one read-back: the `--checksum` digest (`checksum`) and what `--signature` needs
/// (`signed`: a SHA-256/512 or BLAKE2b-512, or the bytes themselves; `Some(None)` when
/// they are more than [`crate::signature::MAX_MESSAGE`]). A SIGINT/SIGTERM that completes
/// on the ring meanwhile is named in `interrupted` (the read-back goes on: the file is whole).
///
/// # Errors
/// [`crate::error::Kind::LocalIo`] when the file cannot be opened or read, or is shorter
/// than `total`; nothing is read when neither is asked for.
pub fn digests(
    ring: &LaneRing<'_>,
    pool: &BufPool,
    (path, readable, direct, base, total): (&Path, Option<BorrowedFd<'_>>, bool, u64, u64),
    checksum: Option<&'static Algorithm>,
    signed: Option<crate::signature::Input>,
    interrupted: &mut Option<&'static str>,
) -> Result<(Option<Digest>, Option<Signed>)> {
    if checksum.is_none() && signed.is_none() {
        return Ok((None, None));
    }
    let mut ctx = checksum.map(Context::new);
    let mut pre = signed.map(crate::signature::Prehasher::new);
    read_back(ring, pool, (path, readable, direct, base, total), interrupted, |b| {
        if let Some(c) = &mut ctx {
            c.update(b);
        }
        if let Some(p) = &mut pre {
            p.update(b);
        }
    })?;
    Ok((ctx.map(Context::finish), pre.map(crate::signature::Prehasher::finish)))
}

/// Reads `total` bytes of `path` in pool-block reads (up to four in flight) and gives them
/// to `f` in file order.
fn read_back(
    ring: &LaneRing<'_>,
    pool: &BufPool,
    (path, readable, direct, base, total): (&Path, Option<BorrowedFd<'_>>, bool, u64, u64),
    interrupted: &mut Option<&'static str>,
    mut f: impl FnMut(&[u8]),
) -> Result<()> {
    let mut flags = OFlags::RDONLY | OFlags::CLOEXEC;
    if direct {
        flags |= OFlags::DIRECT;
    }
    // The output's own description when it reads (no other open of the file for the
    // kernel to close late: `closes`), else the path opened anew.
    let fd = match readable {
        Some(fd) => fd.try_clone_to_owned(),
        None => rustix::fs::open(path, flags, Mode::empty()).map_err(std::io::Error::from),
    }
    .map_err(|e| err!(LocalIo, "verify {}: {e}", path.display()))?;
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    let bs = pool.block_size() as u64;
    let blocks = total.div_ceil(bs);
    let (mut next_read, mut next_hash, mut in_flight) = (0u64, 0u64, 0usize);
    let mut done = BTreeMap::new();
    while next_hash < blocks {
        while next_read < blocks && in_flight < DEPTH {
            let Some(buf) = pool.alloc() else { break };
            let off = next_read * bs;
            let want = (total - off).min(bs);
            // O_DIRECT reads must be aligned too: the tail read asks for a whole block and gets a short count.
            let len = align_up(want, 4096).min(bs) as usize;
            ring.push(
                Op::Read {
                    fd: raw,
                    buf,
                    range: 0..len,
                    offset: base + off,
                },
                Tag::Verify(next_read as usize).encode(),
            )
            .map_err(|_| err!(Internal, "submission queue full while verifying"))?;
            next_read += 1;
            in_flight += 1;
        }
        ring.submit_and_wait(1)
            .map_err(|e| err!(LocalIo, "io_uring_enter: {e}"))?;
        while let Some(c) = ring.next_completion() {
            let idx = match Tag::decode(c.tag) {
                Some(Tag::Verify(idx)) => idx,
                Some(Tag::Signal) => {
                    *interrupted = Some(crate::tag::signal_name(c.buf.as_deref()));
                    continue;
                }
                _ => continue,
            };
            in_flight -= 1;
            let idx = idx as u64;
            let want = (total - idx * bs).min(bs);
            if c.result < 0 {
                let e = rustix::io::Errno::from_raw_os_error(-c.result);
                return Err(err!(
                    LocalIo,
                    "verify {}: read at offset {}: {e}",
                    path.display(),
                    base + idx * bs
                ));
            }
            if (c.result as u64) < want {
                return Err(err!(
                    LocalIo,
                    "verify {}: the file ends before byte {}",
                    path.display(),
                    idx * bs + want
                ));
            }
            done.insert(idx, (c.buf.expect("a read carries its block"), want as usize));
        }
        while let Some((buf, len)) = done.remove(&next_hash) {
            f(&buf[..len]);
            next_hash += 1;
        }
    }
    Ok(())
}
