//! An image written front to back in large aligned blocks (a delta's target): `FILE.part`
//! renamed into place once complete, or a block device at `--offset`. O_DIRECT where the
//! filesystem takes it, so a 1 GiB target leaves no page cache behind; the writes go on a
//! ring of their own while the next block fills (write-behind, [`WRITES`] at a time).

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use super::device::{self, Room};
use crate::err;
use crate::error::Result;

/// Bytes gathered before one write (a multiple of every logical block size): large
/// enough that O_DIRECT writes stream, small enough for a delta's 16 MiB.
pub const WRITE_BLOCK: usize = 512 << 10;
/// Writes in flight while the next block fills.
pub const WRITES: usize = 2;

/// A target written in order: [`ImageWriter::push`] appends, [`ImageWriter::finish`] writes
/// the tail, sets the size and syncs.
pub struct ImageWriter {
    fd: OwnedFd,
    /// O_DIRECT: every write is a whole number of `align` blocks from an aligned buffer.
    direct: bool,
    align: u64,
    /// Where the image starts in `fd` (a device's `--offset`; 0 for a file).
    base: u64,
    /// The device's room (its tail block is read back around the image's last bytes).
    room: Option<Room>,
    buf: uring::Buf,
    /// Bytes of `buf` filled.
    filled: usize,
    /// Image bytes handed to writes so far (`buf` holds the next ones).
    written: u64,
    /// The ring the writes go on, the blocks free, and the writes in flight (offset, length).
    ring: uring::Ring,
    spare: Vec<uring::Buf>,
    in_flight: Vec<(u64, usize)>,
    /// `FILE.part` and `FILE`, for a file target.
    part: Option<(PathBuf, PathBuf)>,
}

impl ImageWriter {
    /// Opens `FILE.part` (created or truncated) for a file image of `len` bytes, O_DIRECT
    /// when the filesystem takes it (open(2): EINVAL on tmpfs and others: buffered then),
    /// and reserves its `len` bytes ([`preallocate`]).
    ///
    /// # Errors
    /// `LocalIo` when the `.part` cannot be opened, its bytes reserved (ENOSPC: the bytes
    /// free named; the `.part` removed) or the buffer mapped.
    pub fn file(final_path: &Path, len: u64, io: crate::config::IoChoice) -> Result<ImageWriter> {
        let part = super::part_path(final_path);
        // (Never through a symbolic link: the `.part` is the run's own, locked by it.)
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let mode = Mode::from_raw_mode(0o644);
        let (fd, direct) = match rustix::fs::open(&part, flags | OFlags::DIRECT, mode) {
            Ok(fd) => (fd, true),
            Err(rustix::io::Errno::INVAL) => (
                rustix::fs::open(&part, flags, mode).map_err(|e| err!(LocalIo, "{}: {e}", part.display()))?,
                false,
            ),
            Err(e) => return Err(err!(LocalIo, "{}: {e}", part.display())),
        };
        if let Err(e) = preallocate(&fd, len) {
            // (ext4 and XFS keep what a failed fallocate reserved: given back first, the
            // free space said is what the file system has without this target.)
            let _ = rustix::fs::ftruncate(&fd, 0);
            let free = rustix::fs::fstatvfs(&fd).map(|v| v.f_bavail.saturating_mul(v.f_frsize));
            let _ = std::fs::remove_file(&part);
            return Err(err!(
                LocalIo,
                "{}: fallocate of the target's {len} bytes: {e}{}",
                part.display(),
                free.map_or(String::new(), |f| format!(
                    " ({f} bytes free on its file system: free space first)"
                ))
            ));
        }
        ImageWriter::over(fd, (direct, 4096), 0, None, Some((part, final_path.to_path_buf())), io)
    }

    /// Opens the block device `path` for an image at `offset` ([`device::open`]: O_DIRECT,
    /// O_EXCL, the offset a multiple of the logical block size).
    ///
    /// # Errors
    /// What [`device::open`] returns; `Usage` when `len` bytes do not fit after `offset`.
    pub fn device(path: &Path, offset: u64, len: u64, io: crate::config::IoChoice) -> Result<ImageWriter> {
        let (fd, room) = device::open(path, offset)?;
        if let Some(why) = room.refuse(len, &format!("the block device {}", path.display())) {
            return Err(err!(LocalIo, "{why}"));
        }
        let align = room.block;
        ImageWriter::over(fd, (true, align), offset, Some(room), None, io)
    }

    fn over(
        fd: OwnedFd,
        (direct, align): (bool, u64),
        base: u64,
        room: Option<Room>,
        part: Option<(PathBuf, PathBuf)>,
        io: crate::config::IoChoice,
    ) -> Result<ImageWriter> {
        let pool = uring::BufPool::new(WRITE_BLOCK, WRITES + 1).map_err(|e| err!(LocalIo, "write buffers: {e}"))?;
        let mut spare: Vec<uring::Buf> = std::iter::from_fn(|| pool.alloc()).collect();
        let buf = spare.pop().ok_or_else(|| err!(Internal, "write buffers: none free"))?;
        let ring = crate::io::build_ring(io, 8, false, false, 0)?.ring;
        Ok(ImageWriter {
            fd,
            direct,
            align,
            base,
            room,
            buf,
            filled: 0,
            written: 0,
            ring,
            spare,
            in_flight: Vec::new(),
            part,
        })
    }

    /// What is written, for messages: the `.part` or the device.
    pub fn describe(&self) -> String {
        match &self.part {
            Some((part, _)) => part.display().to_string(),
            None => "the device".to_owned(),
        }
    }

    /// Appends `bytes` to the image, writing each full buffer.
    ///
    /// # Errors
    /// `LocalIo` when a write fails or is short (ENOSPC named).
    pub fn push(&mut self, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let n = bytes.len().min(WRITE_BLOCK - self.filled);
            self.buf[self.filled..self.filled + n].copy_from_slice(&bytes[..n]);
            self.filled += n;
            bytes = &bytes[n..];
            if self.filled == WRITE_BLOCK {
                self.write_out(WRITE_BLOCK)?;
            }
        }
        Ok(())
    }

    /// Hands `buf[..len]` to a write at the image's next offset and takes a free block
    /// (waiting for a write to complete when none is free).
    fn write_out(&mut self, len: usize) -> Result<()> {
        let at = self.base + self.written;
        while self.spare.is_empty() {
            self.reap(1)?;
        }
        let next = self
            .spare
            .pop()
            .ok_or_else(|| err!(Internal, "write buffers: none free"))?;
        let buf = std::mem::replace(&mut self.buf, next);
        let op = uring::Op::Write {
            fd: self.fd.as_raw_fd(),
            buf,
            range: 0..len,
            offset: at,
        };
        if self.ring.push(op, at).is_err() {
            return Err(err!(Internal, "{}: the write ring is full", self.describe()));
        }
        // Submitted now, not when a block is next waited for: the write runs while the
        // next block fills.
        self.ring
            .submit()
            .map_err(|e| err!(LocalIo, "{}: io_uring_enter: {e}", self.describe()))?;
        self.in_flight.push((at, len));
        self.written += len as u64;
        self.filled = 0;
        Ok(())
    }

    /// Waits for at least `want` writes to complete; a short write is completed with
    /// pwrite(2), a failed one is an error (ENOSPC named).
    fn reap(&mut self, want: usize) -> Result<()> {
        self.ring
            .submit_and_wait(want)
            .map_err(|e| err!(LocalIo, "{}: io_uring_enter: {e}", self.describe()))?;
        while let Some(c) = self.ring.next_completion() {
            let buf = c
                .buf
                .ok_or_else(|| err!(Internal, "a write came back without its block"))?;
            let Some(k) = self.in_flight.iter().position(|w| w.0 == c.tag) else {
                continue;
            };
            let (at, len) = self.in_flight.swap_remove(k);
            if c.result < 0 {
                let e = rustix::io::Errno::from_raw_os_error(-c.result);
                return Err(err!(LocalIo, "{}: write at byte {at}: {e}", self.describe()));
            }
            let mut done = c.result as usize;
            while done < len {
                match rustix::io::pwrite(&self.fd, &buf[done..len], at + done as u64) {
                    Ok(0) => return Err(err!(LocalIo, "{}: write returned 0 at byte {at}", self.describe())),
                    Ok(n) => done += n,
                    Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(err!(LocalIo, "{}: write at byte {at}: {e}", self.describe())),
                }
            }
            self.spare.push(buf);
        }
        Ok(())
    }

    /// Image bytes pushed so far.
    pub fn pushed(&self) -> u64 {
        self.written + self.filled as u64
    }

    /// Gives up the image: a file's `.part` is removed (a device keeps what was written:
    /// only pieces that passed their check).
    pub fn abandon(self) {
        if let Some((part, _)) = &self.part {
            let _ = std::fs::remove_file(part);
        }
    }

    /// Writes the last bytes (padded to the alignment: a file is truncated back to its
    /// size, a device's bytes after the image are read first and written back), then
    /// fsync(2). Returns the `.part` and final name of a file image (renamed by
    /// [`ImageWriter::commit`]).
    ///
    /// # Errors
    /// `LocalIo` when a write, ftruncate or fsync fails.
    pub fn finish(mut self) -> Result<Finished> {
        let total = self.pushed();
        let tail = self.filled;
        while !self.in_flight.is_empty() {
            self.reap(1)?;
        }
        if tail > 0 {
            let padded = if self.direct {
                (tail as u64).next_multiple_of(self.align) as usize
            } else {
                tail
            };
            if padded > tail {
                self.buf[tail..padded].fill(0);
                if let Some(room) = &self.room {
                    room.read_tail(self.base + total, &mut self.buf[tail..padded])?;
                }
            }
            self.write_out(padded)?;
            while !self.in_flight.is_empty() {
                self.reap(1)?;
            }
            self.written = total;
        }
        if self.part.is_some() {
            rustix::fs::ftruncate(&self.fd, total)
                .map_err(|e| err!(LocalIo, "{}: ftruncate to {total} bytes: {e}", self.describe()))?;
        }
        rustix::fs::fsync(&self.fd).map_err(|e| err!(LocalIo, "fsync {}: {e}", self.describe()))?;
        Ok(Finished { part: self.part })
    }
}

/// Reserves `len` bytes of `fd` (fallocate(2), the size set): a full disk is told before
/// a byte is written, and ext4 then takes each O_DIRECT write as an overwrite of
/// allocated blocks, issued at once under a shared lock, where a write past the file's
/// end is handed to an io_uring worker thread and the writes go one at a time (io_uring
/// serializes its workers' writes to one file). A filesystem without fallocate
/// (EOPNOTSUPP) is written without; an empty image reserves nothing.
///
/// # Errors
/// fallocate(2)'s other errors (ENOSPC).
fn preallocate(fd: &OwnedFd, len: u64) -> rustix::io::Result<()> {
    if len == 0 {
        // (fallocate(2) takes no empty range: EINVAL.)
        return Ok(());
    }
    match rustix::fs::fallocate(fd, rustix::fs::FallocateFlags::empty(), 0, len) {
        Ok(()) | Err(rustix::io::Errno::OPNOTSUPP) => Ok(()),
        Err(e) => Err(e),
    }
}

/// A finished image: a file's `.part` still to rename.
pub struct Finished {
    part: Option<(PathBuf, PathBuf)>,
}

impl Finished {
    /// Renames a file image's `.part` to its name (replacing it only with `force`) and
    /// fsyncs the directory; a device's image is already in place.
    ///
    /// # Errors
    /// `LocalIo` when the rename or the directory's fsync fails.
    pub fn commit(self, force: bool) -> Result<()> {
        let Some((part, final_path)) = self.part else {
            return Ok(());
        };
        let flags = if force {
            rustix::fs::RenameFlags::empty()
        } else {
            rustix::fs::RenameFlags::NOREPLACE
        };
        rustix::fs::renameat_with(rustix::fs::CWD, &part, rustix::fs::CWD, &final_path, flags).map_err(|e| {
            err!(
                LocalIo,
                "rename {} to {}: {e}{}",
                part.display(),
                final_path.display(),
                if e == rustix::io::Errno::EXIST {
                    " (use --force)"
                } else {
                    ""
                }
            )
        })?;
        let dir = final_path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        super::sync_dir(dir)
    }

    /// Removes a file image's `.part` (the image failed a check after it was written).
    pub fn discard(self) {
        if let Some((part, _)) = self.part {
            let _ = std::fs::remove_file(part);
        }
    }
}
