//! `--checksum` and `--signature`: the digests of the finished `.part`, read back once through the ring
//! (O_DIRECT when the download used it, so verifying does not fill the page cache either).

use std::collections::BTreeMap;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

use ring::digest::{Algorithm, Context, Digest};
use rustix::fs::{FileType, Mode, OFlags};
use uring::{BufPool, Op};

use crate::lane::LaneRing;

use crate::engine::blocks::align_up;
use crate::err;
use crate::error::Result;
use crate::output::FileKey;
use crate::tag::Tag;

/// Reads in flight while hashing.
pub(crate) const DEPTH: usize = 4;

/// What `--signature` needs from the file: a digest, or the bytes (`None`: more than
/// [`crate::signature::MAX_MESSAGE`]).
pub type Signed = Option<Vec<u8>>;

/// What the finished `.part` (`path`, opened O_DIRECT when `direct`, or read through the
/// output's own descriptor `readable` ([`crate::output::Output::readable`]); `total`
/// bytes from offset `base`: a block device's `--offset`, 0 for a file; `expect`: what
/// `path` must still hold when it is opened anew, [`open_again`]) owes
/// in one read-back: the `--checksum` digest (`checksum`) and what `--signature` needs
/// (`signed`: a SHA-256/512 or BLAKE2b-512, or the bytes themselves; `Some(None)` when
/// they are more than [`crate::signature::MAX_MESSAGE`]). A SIGINT/SIGTERM that completes
/// on the ring meanwhile is named in `interrupted` (the read-back goes on: the file is whole).
///
/// # Errors
/// [`crate::error::Kind::LocalIo`] when the file cannot be opened or read, or is shorter
/// than `total`, or `path` (opened anew when `readable` is `None`) no longer holds what
/// `expect` names ([`open_again`]); nothing is read when neither is asked for.
pub fn digests(
    ring: &LaneRing<'_>,
    pool: &BufPool,
    (path, readable, direct, base, total): (&Path, Option<BorrowedFd<'_>>, bool, u64, u64),
    expect: Expect,
    checksum: Option<&'static Algorithm>,
    signed: Option<crate::signature::Input>,
    interrupted: &mut Option<&'static str>,
) -> Result<(Option<Digest>, Option<Signed>)> {
    if checksum.is_none() && signed.is_none() {
        return Ok((None, None));
    }
    let mut ctx = checksum.map(Context::new);
    let mut pre = signed.map(crate::signature::Prehasher::new);
    read_back(
        ring,
        pool,
        (path, readable, direct, base, total),
        expect,
        interrupted,
        |b| {
            if let Some(c) = &mut ctx {
                c.update(b);
            }
            if let Some(p) = &mut pre {
                p.update(b);
            }
        },
    )?;
    Ok((ctx.map(Context::finish), pre.map(crate::signature::Prehasher::finish)))
}

/// What a read-back that opens its file anew by path must find there: the output's own
/// file (its type and `(st_dev, st_ino)`: [`crate::output::Output::identity`]), or, for a
/// file a 304 or a list kept, any regular file (nothing of it was opened before).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    Same(FileKey, FileType),
    Regular,
}

/// Opens `path` anew for a read-back, O_RDONLY, O_DIRECT when `direct` and the file
/// system takes it, and checks that it holds what `expect` names. Symbolic links are
/// followed (a device named by a `/dev/disk/by-*` link, a kept file the user linked), as
/// the checks before the download followed them. What the name leads to is judged by
/// stat(2) before it is opened, so that a FIFO, socket or character device swapped in is
/// not opened at all; it is opened with O_NONBLOCK (open(2)), so that one swapped in
/// between the two opens at once instead of blocking the reactor until a writer comes;
/// and fstat(2) of the descriptor must find the file stat(2) judged. O_NONBLOCK is
/// cleared again (fcntl(2) F_SETFL) once the checks passed, as a ring read of a regular
/// file with it gives EAGAIN on a page-cache miss (io_uring's `REQ_F_NOWAIT`). Returns
/// the descriptor and the file's size in bytes.
///
/// # Errors
/// [`crate::error::Kind::LocalIo`] naming `path` when it cannot be opened, or when it
/// was replaced: another type of file, or another inode than `expect`'s.
pub(crate) fn open_again(path: &Path, direct: bool, expect: Expect) -> Result<(OwnedFd, u64)> {
    let replaced = |now: &str| {
        err!(
            LocalIo,
            "verify {}: it was replaced ({now}) since ringdl checked it: not read back, nothing renamed",
            path.display()
        )
    };
    let judge = |st: &rustix::fs::Stat| {
        let kind = FileType::from_raw_mode(st.st_mode);
        match expect {
            Expect::Regular if kind != FileType::RegularFile => Err(replaced(&what(kind))),
            Expect::Same(_, want) if kind != want => Err(replaced(&what(kind))),
            Expect::Same(id, _) if id != (st.st_dev, st.st_ino) => Err(replaced("another file now")),
            _ => Ok(()),
        }
    };
    let before = rustix::fs::stat(path).map_err(|e| err!(LocalIo, "verify {}: {e}", path.display()))?;
    judge(&before)?;
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let fd =
        rustix::fs::open(path, flags, Mode::empty()).map_err(|e| err!(LocalIo, "verify {}: {e}", path.display()))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| err!(LocalIo, "verify {}: fstat: {e}", path.display()))?;
    judge(&st)?;
    if (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino) {
        return Err(replaced("another file now"));
    }
    let set = |f| rustix::fs::fcntl_setfl(&fd, f);
    // (O_DIRECT refused by F_SETFL, EINVAL: the file system does not take it; read through the cache.)
    let set = if direct {
        set(OFlags::DIRECT).or_else(|_| set(OFlags::empty()))
    } else {
        set(OFlags::empty())
    };
    set.map_err(|e| err!(LocalIo, "verify {}: fcntl: {e}", path.display()))?;
    Ok((fd, st.st_size as u64))
}

/// A file type as messages name it ("a FIFO now").
fn what(kind: FileType) -> String {
    let name = match kind {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "a file of unknown type",
    };
    format!("{name} now")
}

/// Reads `total` bytes of `path` in pool-block reads (up to four in flight) and gives them
/// to `f` in file order: through `readable` when given, else `path` opened anew and
/// checked against `expect` ([`open_again`]).
fn read_back(
    ring: &LaneRing<'_>,
    pool: &BufPool,
    (path, readable, direct, base, total): (&Path, Option<BorrowedFd<'_>>, bool, u64, u64),
    expect: Expect,
    interrupted: &mut Option<&'static str>,
    mut f: impl FnMut(&[u8]),
) -> Result<()> {
    // The output's own description when it reads (no other open of the file for the
    // kernel to close late: `closes`), else the path opened anew.
    let fd = match readable {
        Some(fd) => fd
            .try_clone_to_owned()
            .map_err(|e| err!(LocalIo, "verify {}: {e}", path.display()))?,
        None => open_again(path, direct, expect)?.0,
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The `.part` a read-back opens anew by its name ([`Expect::Same`]): itself passes
    /// (its size read from the descriptor); a FIFO swapped in opens at once (O_NONBLOCK,
    /// no writer) and is refused by its type, a symbolic link is not followed, and another
    /// regular file renamed over it is refused by its inode.
    #[test]
    fn a_read_back_opened_anew_refuses_what_replaced_the_file() {
        let d = std::env::temp_dir().join(format!("ringdl-verify-again-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let (part, other) = (d.join("f.part"), d.join("other"));
        std::fs::write(&part, b"landed bytes").unwrap();
        let st = rustix::fs::stat(&part).unwrap();
        // (A second name keeps the inode: freed, its number could be the next file's.)
        std::fs::hard_link(&part, d.join("keep")).unwrap();
        let expect = Expect::Same((st.st_dev, st.st_ino), FileType::RegularFile);
        let (_, size) = open_again(&part, false, expect).unwrap();
        assert_eq!(size, 12);
        let refused = |why: &str| {
            let e = open_again(&part, false, expect).unwrap_err();
            assert!(e.msg.contains(&format!("it was replaced ({why})")), "{}", e.msg);
            assert!(e.msg.contains(&part.display().to_string()), "{}", e.msg);
        };
        std::fs::write(&other, b"landed bytes").unwrap();
        std::fs::rename(&other, &part).unwrap();
        refused("another file now");
        std::fs::remove_file(&part).unwrap();
        rustix::fs::mknodat(rustix::fs::CWD, &part, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
        refused("a FIFO now");
        // (A symbolic link is followed: to another file it is another file, to a FIFO a
        // FIFO, to the output's own file that file.)
        std::fs::remove_file(&part).unwrap();
        std::fs::write(&other, b"landed bytes").unwrap();
        std::os::unix::fs::symlink(&other, &part).unwrap();
        refused("another file now");
        std::fs::remove_file(&part).unwrap();
        let fifo = d.join("fifo");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
        std::os::unix::fs::symlink(&fifo, &part).unwrap();
        refused("a FIFO now");
        std::fs::remove_file(&part).unwrap();
        let own = rustix::fs::stat(&other).unwrap();
        std::os::unix::fs::symlink(&other, &part).unwrap();
        let (_, size) = open_again(
            &part,
            false,
            Expect::Same((own.st_dev, own.st_ino), FileType::RegularFile),
        )
        .unwrap();
        assert_eq!(size, 12);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
