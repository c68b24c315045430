//! A seed: a local file or block device read with O_DIRECT (no page cache grows however
//! large it is), scanned front to back for an index's pieces, then read back piece by
//! piece through a window of aligned blocks.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use uring::{Buf, BufPool, Op, Ring};

use super::{Finds, Index, Scanner, Split};

/// Bytes per read, and the read-back window (a multiple of every logical block size).
const BLOCK: usize = 256 << 10;
/// The same for a file read back in pieces here and there (a delta's staging file).
const SMALL_BLOCK: usize = 64 << 10;
/// Reads in flight ahead of the one consumed, when reading front to back: with [`BLOCK`],
/// 1.25 MiB of buffers a seed.
const AHEAD: usize = 4;
/// O_DIRECT's alignment of offsets and lengths, bytes (the largest logical block size).
const ALIGN: u64 = 4096;

/// An open seed (or any file read back the same way: a delta's staging file).
pub struct Seed {
    pub path: PathBuf,
    fd: OwnedFd,
    /// Its size, bytes.
    pub len: u64,
    /// Bytes per read ([`BLOCK`] or [`SMALL_BLOCK`]).
    block: usize,
    /// Opened with O_DIRECT (reads aligned), or buffered where the filesystem refuses it.
    direct: bool,
    /// Its device and inode (a block device: its rdev), to refuse the target itself.
    pub id: (u64, u64),
    /// The window: `win` holds the seed's bytes from `win_at`, `win_len` of them.
    win: Buf,
    win_at: u64,
    win_len: usize,
    /// Reads ahead of the window: the ring, and each read's offset and block once done.
    ring: Ring,
    ahead: VecDeque<Ahead>,
    spare: Vec<Buf>,
    /// The backend its ring is of (a second reader of the same seed is made alike).
    io: crate::config::IoChoice,
}

/// A seed at least this large is searched in two halves at once when a helper pays and
/// its format can split its search ([`Index::split_scanners`]).
const SPLIT_MIN: u64 = 16 << 20;

/// A read ahead: a block's bytes (fewer at the end) from `at`; `done` once completed.
struct Ahead {
    at: u64,
    done: Option<(Buf, i32)>,
}

impl Seed {
    /// Opens `path` read-only, O_DIRECT when it is taken (open(2) EINVAL: buffered), with
    /// a ring of the backend `io` for its reads ahead.
    ///
    /// # Errors
    /// A message naming the seed when it cannot be opened, is not a regular file or block
    /// device, or its size cannot be read; the ring's or buffers' setup error.
    pub fn open(path: &Path, io: crate::config::IoChoice) -> Result<Seed, String> {
        Seed::open_with(path, io, BLOCK, AHEAD + 1)
    }

    /// As [`Seed::open`], with reads of 64 KiB (a quarter MiB of buffers, not 2 MiB): for
    /// a file read back in scattered pieces, a delta's staging file.
    ///
    /// # Errors
    /// As [`Seed::open`].
    pub fn open_small(path: &Path, io: crate::config::IoChoice) -> Result<Seed, String> {
        Seed::open_with(path, io, SMALL_BLOCK, AHEAD + 1)
    }

    /// As [`Seed::open`], with reads of `block` bytes and `bufs` (≥ 2) of them: one the
    /// window, the others reads ahead.
    fn open_with(path: &Path, io: crate::config::IoChoice, block: usize, bufs: usize) -> Result<Seed, String> {
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
        let pool = BufPool::new(block, bufs.max(2)).map_err(|e| format!("seed buffers: {e}"))?;
        let mut spare: Vec<Buf> = std::iter::from_fn(|| pool.alloc()).collect();
        let win = spare.pop().ok_or("seed buffers: none")?;
        let ring = crate::io::build_ring(io, 8, false, false, 0)
            .map_err(|e| format!("seed {name}: {e}"))?
            .ring;
        Ok(Seed {
            path: path.to_path_buf(),
            fd,
            len,
            block,
            direct,
            id,
            win,
            win_at: 0,
            win_len: 0,
            ring,
            ahead: VecDeque::new(),
            spare,
            io,
        })
    }

    /// Streams the whole seed through `index`'s scanner, reading ahead while it hashes (on
    /// a helper thread too, when one pays: [`super::pipe::helper_pays`]).
    /// Returns, per piece, where it was found.
    ///
    /// # Errors
    /// A message naming the seed and offset when a read fails.
    pub fn scan(&mut self, index: &dyn Index) -> Result<Finds, String> {
        let helper = super::pipe::helper_pays();
        let mid = (self.len / 2) - (self.len / 2) % self.block as u64;
        if helper && self.len >= SPLIT_MIN {
            let n = self.fill(0)?;
            if let Some(split) = index.split_scanners(self.len, mid, &self.win[..n]) {
                return self.scan_split(split);
            }
        }
        std::thread::scope(|scope| {
            let mut scanner = index.scanner(helper.then_some(scope));
            self.stream(0, self.len, scanner.as_mut())?;
            Ok(scanner.finish())
        })
    }

    /// The search in two halves: the first on this thread, the second on a scoped thread
    /// with a reader of its own (joined on every path).
    fn scan_split(&mut self, split: Split<'_>) -> Result<Finds, String> {
        let Split {
            mut first,
            first_end,
            mut second,
            second_start,
        } = split;
        let (path, io, block, len) = (self.path.clone(), self.io, self.block, self.len);
        std::thread::scope(|scope| {
            // (Its reader is made on its thread: a ring stays with the thread that made it.)
            let late = scope.spawn(move || -> Result<Finds, String> {
                // (Two reads ahead, not four: the two halves' reads together keep the
                // disk as busy, in less memory.)
                let mut other = Seed::open_with(&path, io, block, 3)?;
                if other.len != len {
                    return Err(format!("seed {}: its size changed during its scan", path.display()));
                }
                other.stream(second_start, len, second.as_mut())?;
                Ok(second.finish())
            });
            // (The first half dropped before the join on an error: the second may wait on
            // it to say where they met.)
            let early = match self.stream(0, first_end, first.as_mut()) {
                Ok(()) => Ok(first.finish()),
                Err(e) => {
                    drop(first);
                    Err(e)
                }
            };
            let late = late.join().map_err(|_| super::pipe::HELPER_GONE.to_owned())?;
            let mut found = early?;
            found.merge_later(late?);
            Ok(found)
        })
    }

    /// Feeds the seed's bytes `[from, to)` (`from` a multiple of the block) to `scanner`.
    fn stream(&mut self, from: u64, to: u64, scanner: &mut dyn Scanner) -> Result<(), String> {
        let mut at = from;
        while at < to && scanner.wants_more() {
            let n = if self.win_len > 0 && self.win_at == at {
                self.win_len
            } else {
                self.fill(at)?
            };
            let n = n.min((to - at) as usize);
            scanner.feed(&self.win[..n]);
            at += n as u64;
        }
        Ok(())
    }

    /// Makes the window the seed's bytes from `at` (aligned): the read ahead of `at` when
    /// there is one, else a read now; then reads ahead of it. Returns the bytes it holds
    /// (fewer at the end).
    fn fill(&mut self, at: u64) -> Result<usize, String> {
        let want = (self.len - at).min(self.block as u64) as usize;
        // Reads ahead before `at` (or all, when none starts there) are dropped.
        while self.ahead.front().is_some_and(|a| a.at != at) {
            let (buf, _) = self.wait_front()?;
            self.spare.push(buf);
        }
        if self.ahead.is_empty() {
            self.read_ahead(at)?;
        }
        let (buf, res) = self.wait_front()?;
        let buf = self.complete_short(buf, res, at, want)?;
        self.spare.push(std::mem::replace(&mut self.win, buf));
        self.win_at = at;
        self.win_len = want;
        let mut next = self.ahead.back().map_or(at, |a| a.at) + self.block as u64;
        let mut queued = false;
        while self.ahead.len() < AHEAD && next < self.len && !self.spare.is_empty() {
            self.read_ahead(next)?;
            next += self.block as u64;
            queued = true;
        }
        if queued {
            // Submitted now, not at the next wait: the reads run while this block is used.
            self.ring
                .submit()
                .map_err(|e| format!("seed {}: io_uring_enter: {e}", self.path.display()))?;
        }
        Ok(want)
    }

    /// Queues the read of the block at `at`.
    fn read_ahead(&mut self, at: u64) -> Result<(), String> {
        let buf = self.spare.pop().ok_or("seed: no free read buffer")?;
        let want = (self.len - at).min(self.block as u64) as usize;
        let ask = if self.direct {
            (want as u64).next_multiple_of(ALIGN) as usize
        } else {
            want
        };
        let op = Op::Read {
            fd: self.fd.as_raw_fd(),
            buf,
            range: 0..ask,
            offset: at,
        };
        self.ring
            .push(op, at)
            .map_err(|_| format!("seed {}: the read ring is full", self.path.display()))?;
        self.ahead.push_back(Ahead { at, done: None });
        Ok(())
    }

    /// Waits for the front read ahead; returns its block and result.
    fn wait_front(&mut self) -> Result<(Buf, i32), String> {
        loop {
            if let Some(done) = self.ahead.front_mut().and_then(|a| a.done.take()) {
                self.ahead.pop_front();
                return Ok(done);
            }
            self.ring
                .submit_and_wait(1)
                .map_err(|e| format!("seed {}: io_uring_enter: {e}", self.path.display()))?;
            while let Some(c) = self.ring.next_completion() {
                let buf = c.buf.ok_or("seed: a read came back without its block")?;
                if let Some(a) = self.ahead.iter_mut().find(|a| a.at == c.tag) {
                    a.done = Some((buf, c.result));
                }
            }
        }
    }

    /// A read's block once it holds `want` bytes from `at`: a failed read is an error, a
    /// short one is completed with pread(2).
    fn complete_short(&mut self, mut buf: Buf, res: i32, at: u64, want: usize) -> Result<Buf, String> {
        if res < 0 {
            let e = rustix::io::Errno::from_raw_os_error(-res);
            return Err(format!("seed {}: read at byte {at}: {e}", self.path.display()));
        }
        let mut got = res as usize;
        while got < want {
            match rustix::io::pread(
                &self.fd,
                &mut buf[got..want.next_multiple_of(ALIGN as usize)],
                at + got as u64,
            ) {
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
        Ok(buf)
    }

    /// Copies the seed's bytes `[at, at + len)` into `out` (cleared first).
    ///
    /// # Errors
    /// A message when the range runs past the seed's end or a read fails.
    pub fn read(&mut self, at: u64, len: u64, out: &mut Vec<u8>) -> Result<(), String> {
        out.clear();
        self.append(at, len, out)
    }

    /// Appends the seed's bytes `[at, at + len)` to `out`.
    ///
    /// # Errors
    /// As [`Seed::read`].
    pub fn append(&mut self, at: u64, len: u64, out: &mut Vec<u8>) -> Result<(), String> {
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
                // The read ahead that holds `at`, else the aligned block from it.
                let from = (self.ahead.iter().map(|a| a.at))
                    .find(|&a| at >= a && at < a + self.block as u64)
                    .unwrap_or(at - at % ALIGN);
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
