//! A seed: a local file or block device read with O_DIRECT (no page cache grows however
//! large it is), scanned front to back for an index's pieces, then read back piece by
//! piece through a window of aligned blocks.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use super::{Found, Index};

/// Bytes read per pread(2) while scanning, and the read-back window (a multiple of every
/// logical block size).
const BLOCK: usize = 1 << 20;
/// O_DIRECT's alignment of offsets and lengths, bytes (the largest logical block size).
const ALIGN: u64 = 4096;

/// An open seed.
pub struct Seed {
    pub path: PathBuf,
    fd: OwnedFd,
    /// Its size, bytes.
    pub len: u64,
    /// Opened with O_DIRECT (reads aligned), or buffered where the filesystem refuses it.
    direct: bool,
    /// Its device and inode (a block device: its rdev), to refuse the target itself.
    pub id: (u64, u64),
    /// The read-back window: `win` holds the seed's bytes from `win_at`, `win_len` of them.
    win: uring::Buf,
    win_at: u64,
    win_len: usize,
}

impl Seed {
    /// Opens `path` read-only, O_DIRECT when it is taken (open(2) EINVAL: buffered).
    ///
    /// # Errors
    /// A message naming the seed when it cannot be opened, is not a regular file or block
    /// device, or its size cannot be read.
    pub fn open(path: &Path) -> Result<Seed, String> {
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        let name = path.display();
        let (fd, direct) = match rustix::fs::open(path, flags | OFlags::DIRECT, Mode::empty()) {
            Ok(fd) => (fd, true),
            Err(rustix::io::Errno::INVAL) => (
                rustix::fs::open(path, flags, Mode::empty()).map_err(|e| format!("seed {name}: {e}"))?,
                false,
            ),
            Err(e) => return Err(format!("seed {name}: {e}")),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| format!("seed {name}: {e}"))?;
        let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
        let (len, id) = match kind {
            rustix::fs::FileType::RegularFile => (st.st_size as u64, (st.st_dev, st.st_ino)),
            rustix::fs::FileType::BlockDevice => {
                let len =
                    rustix::fs::seek(&fd, rustix::fs::SeekFrom::End(0)).map_err(|e| format!("seed {name}: {e}"))?;
                (len, (st.st_rdev, 0))
            }
            _ => return Err(format!("seed {name}: not a regular file or a block device")),
        };
        let pool = uring::BufPool::new(BLOCK, 1).map_err(|e| format!("seed buffer: {e}"))?;
        let win = pool.alloc().ok_or("seed buffer: none free")?;
        Ok(Seed {
            path: path.to_path_buf(),
            fd,
            len,
            direct,
            id,
            win,
            win_at: 0,
            win_len: 0,
        })
    }

    /// Streams the whole seed through `index`'s scanner. Returns, per piece, where it was
    /// found.
    ///
    /// # Errors
    /// A message naming the seed and offset when a read fails.
    pub fn scan(&mut self, index: &dyn Index) -> Result<Vec<Option<Found>>, String> {
        let mut scanner = index.scanner();
        let mut at = 0;
        while at < self.len {
            let n = self.fill(at)?;
            scanner.feed(&self.win[..n]);
            at += n as u64;
        }
        Ok(scanner.finish())
    }

    /// Reads the window from `at` (aligned): returns the bytes it holds (fewer at the end).
    fn fill(&mut self, at: u64) -> Result<usize, String> {
        let want = (self.len - at).min(BLOCK as u64) as usize;
        let ask = if self.direct {
            (want as u64).next_multiple_of(ALIGN) as usize
        } else {
            want
        };
        let mut got = 0;
        self.win_len = 0;
        while got < want {
            match rustix::io::pread(&self.fd, &mut self.win[got..ask], at + got as u64) {
                Ok(0) => {
                    return Err(format!(
                        "seed {}: ends at byte {} (its size was {})",
                        self.path.display(),
                        at + got as u64,
                        self.len
                    ));
                }
                Ok(n) => got += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    return Err(format!(
                        "seed {}: read at byte {}: {e}",
                        self.path.display(),
                        at + got as u64
                    ));
                }
            }
        }
        self.win_at = at;
        self.win_len = want;
        Ok(want)
    }

    /// Copies the seed's bytes `[at, at + len)` into `out` (cleared first).
    ///
    /// # Errors
    /// A message when the range runs past the seed's end or a read fails.
    pub fn read(&mut self, at: u64, len: u64, out: &mut Vec<u8>) -> Result<(), String> {
        out.clear();
        if at.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(format!(
                "seed {}: bytes {at}+{len} are past its end ({} bytes): was it changed?",
                self.path.display(),
                self.len
            ));
        }
        let (mut at, end) = (at, at + len);
        while at < end {
            let inside = at >= self.win_at && at < self.win_at + self.win_len as u64;
            if !inside {
                let from = at - at % ALIGN;
                self.fill(from)?;
            }
            let from = (at - self.win_at) as usize;
            let to = ((end - self.win_at) as usize).min(self.win_len);
            out.extend_from_slice(&self.win[from..to]);
            at = self.win_at + to as u64;
        }
        Ok(())
    }
}
