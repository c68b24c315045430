//! `--checksum`: the digest of the finished `.part`, read back once through the ring
//! (O_DIRECT when the download used it, so verifying does not fill the page cache either).

use std::collections::BTreeMap;
use std::path::Path;

use ring::digest::{Algorithm, Context, Digest};
use rustix::fs::{Mode, OFlags};
use uring::{BufPool, Op, Ring};

use crate::engine::blocks::align_up;
use crate::err;
use crate::error::Result;
use crate::tag::Tag;

/// Reads in flight while hashing.
const DEPTH: usize = 4;

/// Reads `total` bytes of `path` from offset `base` (a block device's `--offset`; 0 for a
/// file) in pool-block reads (up to four in flight) and hashes them in file order.
///
/// # Errors
/// [`crate::error::Kind::LocalIo`] when the file cannot be opened or read, or is shorter
/// than `total`.
pub fn file_digest(
    ring: &mut Ring,
    pool: &BufPool,
    path: &Path,
    direct: bool,
    base: u64,
    total: u64,
    alg: &'static Algorithm,
) -> Result<Digest> {
    let mut flags = OFlags::RDONLY | OFlags::CLOEXEC;
    if direct {
        flags |= OFlags::DIRECT;
    }
    let fd =
        rustix::fs::open(path, flags, Mode::empty()).map_err(|e| err!(LocalIo, "verify {}: {e}", path.display()))?;
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    let bs = pool.block_size() as u64;
    let blocks = total.div_ceil(bs);
    let mut ctx = Context::new(alg);
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
            let Some(Tag::Verify(idx)) = Tag::decode(c.tag) else {
                continue;
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
            ctx.update(&buf[..len]);
            next_hash += 1;
        }
    }
    Ok(ctx.finish())
}
