//! Block devices (and partitions) as outputs: an image is written in place with O_DIRECT
//! at the device's logical block size, at `--offset` within it, over several connections
//! like a file — but never truncated, preallocated, given a `.part` or renamed, and never
//! written past its end.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags, SeekFrom};

use crate::err;
use crate::error::Result;

/// Where an image goes on a block device.
#[derive(Debug)]
pub struct Room {
    /// `--offset`: the image's first byte on the device, bytes (a multiple of `block`).
    pub base: u64,
    /// Bytes from `base` to the device's end: the largest image that fits.
    pub len: u64,
    /// The logical block size (BLKSSZGET), bytes: the unit of every O_DIRECT write, and
    /// the only part of the device outside the image that a write may touch (the tail
    /// block is read first and written back around the image's last bytes).
    pub block: u64,
    /// The device opened again for reading (O_RDONLY | O_DIRECT): the tail block's bytes
    /// beyond the image are read through it ([`Room::read_tail`]).
    reader: Option<OwnedFd>,
}

/// Whether `path` (followed) is a block device.
pub fn is_block_device(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device())
}

/// How long an EBUSY open of a device is tried again (see [`open`]).
const BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Opens the block device `path` for an image at `offset`: O_WRONLY | O_DIRECT | O_EXCL
/// (open(2): O_EXCL on a block device fails with EBUSY while it is mounted or held by
/// another exclusive opener), its logical block size from BLKSSZGET (ioctl(2), Linux
/// 2.6+), its size from lseek(2) SEEK_END.
///
/// # Errors
/// [`crate::error::Kind::LocalIo`] when the device cannot be opened (EBUSY: in use), or
/// its size or block size cannot be read; [`crate::error::Kind::Usage`] when `offset` is
/// not a multiple of the logical block size or lies past the device's end.
pub fn open(path: &Path, offset: u64) -> Result<(OwnedFd, Room)> {
    let flags = OFlags::WRONLY | OFlags::DIRECT | OFlags::EXCL | OFlags::CLOEXEC;
    // A ringdl that was just killed holds its exclusive open until the kernel has torn
    // down its io_uring (asynchronously, after the process exit): EBUSY is tried again
    // for up to BUSY_WAIT before it is believed.
    let deadline = std::time::Instant::now() + BUSY_WAIT;
    let opened = loop {
        match rustix::fs::open(path, flags, Mode::empty()) {
            Err(rustix::io::Errno::BUSY) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            r => break r,
        }
    };
    let fd = opened.map_err(|e| {
        let why = if e == rustix::io::Errno::BUSY {
            " (it is in use: mounted, or held by another program)"
        } else {
            ""
        };
        err!(LocalIo, "cannot open the block device {}: {e}{why}", path.display())
    })?;
    let mut room = room_of(&fd, path, offset)?;
    let reader =
        rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECT | OFlags::CLOEXEC, Mode::empty()).map_err(|e| {
            err!(
                LocalIo,
                "cannot open the block device {} for reading: {e}",
                path.display()
            )
        })?;
    room.reader = Some(reader);
    Ok((fd, room))
}

/// The [`Room`] for an image at `offset` on the open device `fd`.
///
/// # Errors
/// As [`open`].
pub fn room_of(fd: impl AsFd, path: &Path, offset: u64) -> Result<Room> {
    let block = rustix::fs::ioctl_blksszget(&fd).map_err(|e| err!(LocalIo, "{}: BLKSSZGET: {e}", path.display()))?;
    let size = rustix::fs::seek(&fd, SeekFrom::End(0)).map_err(|e| err!(LocalIo, "{}: lseek: {e}", path.display()))?;
    room(u64::from(block), size, offset, path)
}

/// [`room_of`] for a device of `size` bytes with logical blocks of `block` bytes.
fn room(block: u64, size: u64, offset: u64, path: &Path) -> Result<Room> {
    let block = block.max(512);
    if !offset.is_multiple_of(block) {
        return Err(err!(
            Usage,
            "--offset {offset} is not a multiple of the logical block size of {} ({block} bytes)",
            path.display()
        ));
    }
    if offset >= size {
        return Err(err!(
            Usage,
            "--offset {offset} is at or past the end of {} ({size} bytes)",
            path.display()
        ));
    }
    Ok(Room {
        base: offset,
        len: size - offset,
        block,
        reader: None,
    })
}

impl Room {
    /// The control file's `target` for this room: the device (as `-o` named it) and the
    /// offset, `"/dev/sdb2 1048576"`.
    pub fn target(&self, opts: &crate::config::Config) -> String {
        let dev = match &opts.output {
            crate::config::OutputTarget::File(p) => p.display().to_string(),
            _ => String::new(),
        };
        format!("{dev} {}", self.base)
    }

    /// Fills `pad` with what the device holds from byte `at` (absolute, inside one logical
    /// block, after the image's last byte): the padded O_DIRECT write of the image's last
    /// block then writes those bytes back unchanged. One aligned pread(2) of that block.
    ///
    /// # Errors
    /// [`crate::error::Kind::LocalIo`] when the block cannot be read whole.
    pub fn read_tail(&self, at: u64, pad: &mut [u8]) -> Result<()> {
        let start = at - at % self.block;
        let from = (at - start) as usize;
        let fail = |why: String| {
            err!(
                LocalIo,
                "read the device's block at {start} (around the image's end): {why}"
            )
        };
        let reader = self
            .reader
            .as_ref()
            .ok_or_else(|| fail("not open for reading".into()))?;
        // (Pool blocks are whole pages; the read is one logical block.)
        let pool =
            uring::BufPool::new(self.block.next_multiple_of(4096) as usize, 1).map_err(|e| fail(e.to_string()))?;
        let mut tmp = pool.alloc().ok_or_else(|| fail("no buffer".into()))?;
        let n = rustix::io::pread(reader, &mut tmp[..self.block as usize], start).map_err(|e| fail(e.to_string()))?;
        if n < from + pad.len() {
            return Err(fail(format!("short read ({n} bytes)")));
        }
        pad.copy_from_slice(&tmp[from..from + pad.len()]);
        Ok(())
    }

    /// The refusal of an image of `total` bytes that does not fit, or `None`.
    pub fn refuse(&self, total: u64, what: &str) -> Option<String> {
        (total > self.len).then(|| {
            format!(
                "the image ({total} bytes) does not fit in {what}: {} bytes from offset {} to its end; nothing was written",
                self.len, self.base
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_must_be_a_block_multiple_inside_the_device() {
        let p = Path::new("/dev/x");
        let r = room(4096, 1 << 20, 8192, p).unwrap();
        assert_eq!((r.base, r.len, r.block), (8192, (1 << 20) - 8192, 4096));
        assert!(
            r.read_tail(8192 + 100, &mut [0u8; 10]).is_err(),
            "no reader: an error, not zeros"
        );
        assert_eq!(room(512, 1 << 20, 512, p).unwrap().len, (1 << 20) - 512);
        let e = room(4096, 1 << 20, 512, p).unwrap_err();
        assert_eq!(e.kind, crate::error::Kind::Usage);
        assert!(e.msg.contains("not a multiple of the logical block size"), "{}", e.msg);
        assert_eq!(
            room(512, 1 << 20, 1 << 20, p).unwrap_err().kind,
            crate::error::Kind::Usage
        );
        // A block size below 512 (never seen) is taken as 512.
        assert_eq!(room(0, 4096, 0, p).unwrap().block, 512);
    }

    #[test]
    fn an_image_larger_than_the_room_is_refused() {
        let r = room(512, 64 << 20, 1 << 20, Path::new("/dev/x")).unwrap();
        assert_eq!(r.refuse(63 << 20, "it"), None);
        let m = r.refuse((63 << 20) + 1, "the block device /dev/x").unwrap();
        assert!(m.contains("does not fit") && m.contains("nothing was written"), "{m}");
    }
}
