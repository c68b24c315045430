//! Engine `splice` (seed 000): SPLICE socket → pipe, and a decoupled SPLICE pipe → file at
//! the segment offset, so a slow disk never stops the socket while the pipe has room.
//! Needs plaintext on the socket: plain HTTP, or HTTPS with kTLS RX. Writes go through the
//! page cache (pipe → O_DIRECT file fails with EINVAL for unaligned pipe buffers).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Pipe size asked for with F_SETPIPE_SZ; unprivileged callers get at most
/// /proc/sys/fs/pipe-max-size (1 MiB by default), root may get more.
pub const PIPE_WANT: usize = 16 << 20;

/// One connection's pipe and what it holds.
pub struct Pipe {
    rd: OwnedFd,
    wr: OwnedFd,
    /// Capacity granted by the kernel, bytes.
    pub cap: usize,
    /// Bytes spliced in and not yet spliced out.
    pub held: usize,
    /// File offset of the first held byte.
    pub file_pos: u64,
    /// A pipe → file SPLICE is in flight.
    pub draining: bool,
}

impl Pipe {
    /// Creates a pipe and grows it toward [`PIPE_WANT`] (fcntl(2) F_SETPIPE_SZ, Linux 2.6.35).
    ///
    /// # Errors
    /// pipe2(2) failures (EMFILE, ENFILE).
    pub fn new() -> std::io::Result<Pipe> {
        let (rd, wr) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let mut cap = 64 << 10;
        let mut want = PIPE_WANT;
        while want > cap {
            match rustix::pipe::fcntl_setpipe_size(&wr, want) {
                Ok(n) => {
                    cap = n;
                    break;
                }
                // EPERM above pipe-max-size without CAP_SYS_RESOURCE; ENOMEM/EBUSY: try smaller.
                Err(_) => want /= 2,
            }
        }
        Ok(Pipe {
            rd,
            wr,
            cap,
            held: 0,
            file_pos: 0,
            draining: false,
        })
    }

    /// Read end.
    pub fn rd(&self) -> RawFd {
        self.rd.as_raw_fd()
    }

    /// Write end.
    pub fn wr(&self) -> RawFd {
        self.wr.as_raw_fd()
    }

    /// Room left, bytes.
    pub fn room(&self) -> usize {
        self.cap - self.held
    }

    /// Empty and idle: the connection may start a request for another range.
    pub fn is_idle(&self) -> bool {
        self.held == 0 && !self.draining
    }
}
