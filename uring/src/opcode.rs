//! One builder per `IORING_OP_*`, tokio-rs/io-uring style.
//!
//! Required arguments go to `new()`, optional ones are chained setters with the
//! kernel's defaults, `build()` returns an [`Sqe`]. Building is safe; the
//! pointers an SQE carries are only trusted when it is pushed with the unsafe
//! [`crate::RawRing::push_raw`]. Field use follows io_uring_enter(2) and
//! `io_uring/*.c` of the kernel.

use std::os::fd::RawFd;

use linux_raw_sys::io_uring::{self as sys, io_uring_op as op};

use crate::sys::{Sqe, Timespec};

macro_rules! code {
    ($name:ident) => {
        op::$name as u8
    };
}

/// `IORING_OP_NOP` (5.1): does nothing; completes with `res = 0`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Nop;

impl Nop {
    /// `IORING_OP_NOP` = 0.
    pub const CODE: u8 = code!(IORING_OP_NOP);
    /// A no-op.
    pub const fn new() -> Nop {
        Nop
    }
    /// The SQE.
    pub fn build(self) -> Sqe {
        Sqe {
            opcode: Self::CODE,
            fd: -1,
            ..Sqe::default()
        }
    }
}

/// `IORING_OP_READ` (5.6): like pread(2) into `buf[..len]` at `offset`.
///
/// Result: bytes read (0 at end of file) or `-errno` (`-EAGAIN` never: io_uring
/// retries internally; `-EINVAL` for a misaligned O_DIRECT read).
#[derive(Debug, Clone, Copy)]
pub struct Read {
    fd: RawFd,
    buf: *mut u8,
    len: u32,
    offset: u64,
    rw_flags: u32,
}

impl Read {
    /// `IORING_OP_READ` = 22.
    pub const CODE: u8 = code!(IORING_OP_READ);
    /// Reads `len` bytes into `buf`; offset defaults to 0.
    pub const fn new(fd: RawFd, buf: *mut u8, len: u32) -> Read {
        Read {
            fd,
            buf,
            len,
            offset: 0,
            rw_flags: 0,
        }
    }
    /// File offset in bytes; `u64::MAX` (-1) means the current position (`IORING_FEAT_RW_CUR_POS`).
    pub const fn offset(mut self, offset: u64) -> Read {
        self.offset = offset;
        self
    }
    /// `RWF_*` flags as for preadv2(2).
    pub const fn rw_flags(mut self, flags: u32) -> Read {
        self.rw_flags = flags;
        self
    }
    /// The SQE.
    pub fn build(self) -> Sqe {
        Sqe {
            opcode: Self::CODE,
            fd: self.fd,
            addr: self.buf as u64,
            len: self.len,
            off: self.offset,
            op_flags: self.rw_flags,
            ..Sqe::default()
        }
    }
}

/// `IORING_OP_WRITE` (5.6): like pwrite(2) from `buf[..len]` at `offset`.
///
/// Result: bytes written or `-errno` (`-EINVAL` for a misaligned O_DIRECT write,
/// `-ENOSPC`).
#[derive(Debug, Clone, Copy)]
pub struct Write {
    fd: RawFd,
    buf: *const u8,
    len: u32,
    offset: u64,
    rw_flags: u32,
}

impl Write {
    /// `IORING_OP_WRITE` = 23.
    pub const CODE: u8 = code!(IORING_OP_WRITE);
    /// Writes `len` bytes from `buf`; offset defaults to 0.
    pub const fn new(fd: RawFd, buf: *const u8, len: u32) -> Write {
        Write {
            fd,
            buf,
            len,
            offset: 0,
            rw_flags: 0,
        }
    }
    /// File offset in bytes; `u64::MAX` (-1) means the current position.
    pub const fn offset(mut self, offset: u64) -> Write {
        self.offset = offset;
        self
    }
    /// `RWF_*` flags as for pwritev2(2).
    pub const fn rw_flags(mut self, flags: u32) -> Write {
        self.rw_flags = flags;
        self
    }
    /// The SQE.
    pub fn build(self) -> Sqe {
        Sqe {
            opcode: Self::CODE,
            fd: self.fd,
            addr: self.buf as u64,
            len: self.len,
            off: self.offset,
            op_flags: self.rw_flags,
            ..Sqe::default()
        }
    }
}

/// `IORING_OP_READ_FIXED` (5.1): pread(2) into a registered buffer.
///
/// `buf..buf+len` must lie inside registered buffer `buf_index`
/// (IORING_REGISTER_BUFFERS). Result: bytes read or `-errno` (`-EFAULT` when
/// the range is outside the registered buffer).
#[derive(Debug, Clone, Copy)]
pub struct ReadFixed {
    fd: RawFd,
    buf: *mut u8,
    len: u32,
    buf_index: u16,
    offset: u64,
    rw_flags: u32,
}

impl ReadFixed {
    /// `IORING_OP_READ_FIXED` = 4.
    pub const CODE: u8 = code!(IORING_OP_READ_FIXED);
    /// Reads `len` bytes into `buf` of registered buffer `buf_index`.
    pub const fn new(fd: RawFd, buf: *mut u8, len: u32, buf_index: u16) -> ReadFixed {
        ReadFixed {
            fd,
            buf,
            len,
            buf_index,
            offset: 0,
            rw_flags: 0,
        }
    }
    /// File offset in bytes; `u64::MAX` (-1) means the current position (sockets, pipes).
    pub const fn offset(mut self, offset: u64) -> ReadFixed {
        self.offset = offset;
        self
    }
    /// `RWF_*` flags.
    pub const fn rw_flags(mut self, flags: u32) -> ReadFixed {
        self.rw_flags = flags;
        self
    }
    /// The SQE.
    pub fn build(self) -> Sqe {
        Sqe {
            opcode: Self::CODE,
            fd: self.fd,
            addr: self.buf as u64,
            len: self.len,
            off: self.offset,
            op_flags: self.rw_flags,
            buf_index: self.buf_index,
            ..Sqe::default()
        }
    }
}

/// `IORING_OP_WRITE_FIXED` (5.1): pwrite(2) from a registered buffer.
///
/// Result: bytes written or `-errno` (`-EFAULT` when outside the registered buffer).
#[derive(Debug, Clone, Copy)]
pub struct WriteFixed {
    fd: RawFd,
    buf: *const u8,
    len: u32,
    buf_index: u16,
    offset: u64,
    rw_flags: u32,
}

impl WriteFixed {
    /// `IORING_OP_WRITE_FIXED` = 5.
    pub const CODE: u8 = code!(IORING_OP_WRITE_FIXED);
    /// Writes `len` bytes from `buf` of registered buffer `buf_index`.
    pub const fn new(fd: RawFd, buf: *const u8, len: u32, buf_index: u16) -> WriteFixed {
        WriteFixed {
            fd,
            buf,
            len,
            buf_index,
            offset: 0,
            rw_flags: 0,
        }
    }
    /// File offset in bytes; `u64::MAX` (-1) means the current position.
    pub const fn offset(mut self, offset: u64) -> WriteFixed {
        self.offset = offset;
        self
    }
    /// `RWF_*` flags.
    pub const fn rw_flags(mut self, flags: u32) -> WriteFixed {
        self.rw_flags = flags;
        self
    }
    /// The SQE.
    pub fn build(self) -> Sqe {
        Sqe {
            opcode: Self::CODE,
            fd: self.fd,
            addr: self.buf as u64,
            len: self.len,
            off: self.offset,
            op_flags: self.rw_flags,
            buf_index: self.buf_index,
            ..Sqe::default()
        }
    }
}

/// `IORING_OP_RECV` (5.6): like recv(2) into `buf[..len]`.
///
/// Result: bytes received (0 = peer closed) or `-errno` (`-ECONNRESET`,
/// `-ECANCELED` when cancelled or its link timeout fired).
#[derive(Debug, Clone, Copy)]
pub struct Recv {
    fd: RawFd,
    buf: *mut u8,
    len: u32,
    flags: u32,
}

impl Recv {
    /// `IORING_OP_RECV` = 27.
    pub const CODE: u8 = code!(IORING_OP_RECV);
    /// Receives up to `len` bytes into `buf`.
    pub const fn new(fd: RawFd, buf: *mut u8, len: u32) -> Recv {
        Recv { fd, buf, len, flags: 0 }
    }
    /// `MSG_*` flags as for recv(2) (`MSG_WAITALL`, ...).
    pub const fn flags(mut self, flags: u32) -> Recv {
        self.flags = flags;
        self
    }
    /// The SQE.
    pub fn build(self) -> Sqe {
        Sqe {
            opcode: Self::CODE,
            fd: self.fd,
            addr: self.buf as u64,
            len: self.len,
            op_flags: self.flags,
            ..Sqe::default()
        }
    }
}

/// `IORING_OP_RECVMSG` (5.3): like recvmsg(2) with a `struct msghdr`.
///
/// The kernel reads `msg` at submission and writes `msg_flags` and
/// `msg_controllen` back at completion. Result: bytes received or `-errno`.
#[derive(Debug, Clone, Copy)]
pub struct RecvMsg {
    fd: RawFd,
    msg: *mut linux_raw_sys::net::msghdr,
    flags: u32,
}

impl RecvMsg {
    /// `IORING_OP_RECVMSG` = 10.
    pub const CODE: u8 = code!(IORING_OP_RECVMSG);
    /// Receives into the buffers `msg` describes.
    pub const fn new(fd: RawFd, msg: *mut linux_raw_sys::net::msghdr) -> RecvMsg {
        RecvMsg { fd, msg, flags: 0 }
    }
    /// `MSG_*` flags as for recvmsg(2).
    pub const fn flags(mut self, flags: u32) -> RecvMsg {
        self.flags = flags;
        self
    }
    /// The SQE.
    pub fn build(self) -> Sqe {
        Sqe {
            opcode: Self::CODE,
            fd: self.fd,
            addr: self.msg as u64,
            len: 1,
            op_flags: self.flags,
            ..Sqe::default()
        }
    }
}

/// `IORING_OP_SEND` (5.6): like send(2) from `buf[..len]`.
///
/// Result: bytes sent (may be short) or `-errno` (`-EPIPE`, `-ECONNRESET`).
#[derive(Debug, Clone, Copy)]
pub struct Send {
    fd: RawFd,
    buf: *const u8,
    len: u32,
    flags: u32,
}

impl Send {
    /// `IORING_OP_SEND` = 26.
    pub const CODE: u8 = code!(IORING_OP_SEND);
    /// Sends `len` bytes from `buf`.
    pub const fn new(fd: RawFd, buf: *const u8, len: u32) -> Send {
        Send { fd, buf, len, flags: 0 }
    }
    /// `MSG_*` flags as for send(2) (`MSG_NOSIGNAL` is sensible).
    pub const fn flags(mut self, flags: u32) -> Send {
        self.flags = flags;
        self
    }
    /// The SQE.
    pub fn build(self) -> Sqe {
        Sqe {
            opcode: Self::CODE,
            fd: self.fd,
            addr: self.buf as u64,
            len: self.len,
            op_flags: self.flags,
            ..Sqe::default()
        }
    }
}

/// `IORING_OP_CONNECT` (5.5): like connect(2) to the sockaddr at `addr`.
///
/// Result: 0 or `-errno` (`-ECONNREFUSED`, `-ETIMEDOUT`, `-ECANCELED`).
#[derive(Debug, Clone, Copy)]
pub struct Connect {
    fd: RawFd,
    addr: *const u8,
    addr_len: u32,
}

impl Connect {
    /// `IORING_OP_CONNECT` = 16.
    pub const CODE: u8 = code!(IORING_OP_CONNECT);
    /// Connects `fd` to the `addr_len`-byte sockaddr at `addr`.
    pub const fn new(fd: RawFd, addr: *const u8, addr_len: u32) -> Connect {
        Connect { fd, addr, addr_len }
    }
    /// The SQE (`addr` = sockaddr pointer, `off` = its length).
    pub fn build(self) -> Sqe {
        Sqe {
            opcode: Self::CODE,
            fd: self.fd,
            addr: self.addr as u64,
            off: u64::from(self.addr_len),
            ..Sqe::default()
        }
    }
}

/// `IORING_OP_CLOSE` (5.6): like close(2).
///
/// Result: 0 or `-errno` (`-EBADF`).
#[derive(Debug, Clone, Copy)]
pub struct Close {
    fd: RawFd,
}

impl Close {
    /// `IORING_OP_CLOSE` = 19.
    pub const CODE: u8 = code!(IORING_OP_CLOSE);
    /// Closes `fd` (the caller gives up ownership of it).
    pub const fn new(fd: RawFd) -> Close {
        Close { fd }
    }
    /// The SQE.
    pub fn build(self) -> Sqe {
        Sqe {
            opcode: Self::CODE,
            fd: self.fd,
            ..Sqe::default()
        }
    }
}

/// `IORING_OP_FALLOCATE` (5.6): like fallocate(2).
///
/// Field use: `len` = mode, `off` = offset, `addr` = length. Result: 0 or
/// `-errno` (`-EOPNOTSUPP`, `-ENOSPC`).
#[derive(Debug, Clone, Copy)]
pub struct Fallocate {
    fd: RawFd,
    len: u64,
    offset: u64,
    mode: i32,
}

impl Fallocate {
    /// `IORING_OP_FALLOCATE` = 17.
    pub const CODE: u8 = code!(IORING_OP_FALLOCATE);
    /// Allocates `len` bytes; offset 0 and mode 0 by default.
    pub const fn new(fd: RawFd, len: u64) -> Fallocate {
        Fallocate {
            fd,
            len,
            offset: 0,
            mode: 0,
        }
    }
    /// Start offset in bytes.
    pub const fn offset(mut self, offset: u64) -> Fallocate {
        self.offset = offset;
        self
    }
    /// `FALLOC_FL_*` mode bits.
    pub const fn mode(mut self, mode: i32) -> Fallocate {
        self.mode = mode;
        self
    }
    /// The SQE.
    pub fn build(self) -> Sqe {
        Sqe {
            opcode: Self::CODE,
            fd: self.fd,
            addr: self.len,
            off: self.offset,
            len: self.mode as u32,
            ..Sqe::default()
        }
    }
}

/// `IORING_OP_FSYNC` (5.1): like fsync(2), or fdatasync(2) with
/// `IORING_FSYNC_DATASYNC`.
///
/// Result: 0 or `-errno` (`-EIO`).
#[derive(Debug, Clone, Copy)]
pub struct Fsync {
    fd: RawFd,
    datasync: bool,
}

impl Fsync {
    /// `IORING_OP_FSYNC` = 3.
    pub const CODE: u8 = code!(IORING_OP_FSYNC);
    /// A full fsync of `fd`.
    pub const fn new(fd: RawFd) -> Fsync {
        Fsync { fd, datasync: false }
    }
    /// `IORING_FSYNC_DATASYNC`: fdatasync(2) semantics.
    pub const fn datasync(mut self, on: bool) -> Fsync {
        self.datasync = on;
        self
    }
    /// The SQE.
    pub fn build(self) -> Sqe {
        Sqe {
            opcode: Self::CODE,
            fd: self.fd,
            op_flags: if self.datasync { sys::IORING_FSYNC_DATASYNC } else { 0 },
            ..Sqe::default()
        }
    }
}

/// `IORING_OP_TIMEOUT` (5.4): completes after a relative (default) or
/// absolute time, or after `count` other completions.
///
/// The kernel copies `*ts` at submission (5.4+). Result: `-ETIME` when the
/// time elapsed, 0 when `count` completions arrived first, `-ECANCELED`.
#[derive(Debug, Clone, Copy)]
pub struct Timeout {
    ts: *const Timespec,
    count: u32,
    flags: u32,
}

impl Timeout {
    /// `IORING_OP_TIMEOUT` = 11.
    pub const CODE: u8 = code!(IORING_OP_TIMEOUT);
    /// A pure timer (`count` 0) reading `*ts`.
    pub const fn new(ts: *const Timespec) -> Timeout {
        Timeout { ts, count: 0, flags: 0 }
    }
    /// Also complete once `count` other CQEs were posted.
    pub const fn count(mut self, count: u32) -> Timeout {
        self.count = count;
        self
    }
    /// `IORING_TIMEOUT_*` flags (`ABS`, `BOOTTIME`, `ETIME_SUCCESS`, ...).
    pub const fn flags(mut self, flags: u32) -> Timeout {
        self.flags = flags;
        self
    }
    /// The SQE.
    pub fn build(self) -> Sqe {
        Sqe {
            opcode: Self::CODE,
            fd: -1,
            addr: self.ts as u64,
            len: 1,
            off: u64::from(self.count),
            op_flags: self.flags,
            ..Sqe::default()
        }
    }
}

/// `IORING_OP_LINK_TIMEOUT` (5.5): bounds the SQE linked (IOSQE_IO_LINK) just before it.
///
/// When it fires the linked op completes with `-ECANCELED` (or its own error)
/// and this SQE with `-ETIME`; when the op finishes first this SQE completes
/// with `-ECANCELED`. Either way it posts its own CQE. The kernel copies `*ts`
/// at submission.
#[derive(Debug, Clone, Copy)]
pub struct LinkTimeout {
    ts: *const Timespec,
    flags: u32,
}

impl LinkTimeout {
    /// `IORING_OP_LINK_TIMEOUT` = 15.
    pub const CODE: u8 = code!(IORING_OP_LINK_TIMEOUT);
    /// A relative timeout reading `*ts`.
    pub const fn new(ts: *const Timespec) -> LinkTimeout {
        LinkTimeout { ts, flags: 0 }
    }
    /// `IORING_TIMEOUT_*` flags.
    pub const fn flags(mut self, flags: u32) -> LinkTimeout {
        self.flags = flags;
        self
    }
    /// The SQE.
    pub fn build(self) -> Sqe {
        Sqe {
            opcode: Self::CODE,
            fd: -1,
            addr: self.ts as u64,
            len: 1,
            op_flags: self.flags,
            ..Sqe::default()
        }
    }
}

/// `IORING_OP_ASYNC_CANCEL` (5.5): cancels the in-flight request whose
/// `user_data` matches (or, with flags, by fd / any / all).
///
/// Result: 0 (found and cancelled), `-ENOENT` (not found), `-EALREADY`
/// (running, cancellation attempted), or the count with `IORING_ASYNC_CANCEL_ALL` (5.19).
#[derive(Debug, Clone, Copy)]
pub struct AsyncCancel {
    user_data: u64,
    flags: u32,
}

impl AsyncCancel {
    /// `IORING_OP_ASYNC_CANCEL` = 14.
    pub const CODE: u8 = code!(IORING_OP_ASYNC_CANCEL);
    /// Cancels the request with this `user_data`.
    pub const fn new(user_data: u64) -> AsyncCancel {
        AsyncCancel { user_data, flags: 0 }
    }
    /// `IORING_ASYNC_CANCEL_*` flags (`ALL`, `ANY`, `FD`: 5.19).
    pub const fn flags(mut self, flags: u32) -> AsyncCancel {
        self.flags = flags;
        self
    }
    /// The SQE.
    pub fn build(self) -> Sqe {
        Sqe {
            opcode: Self::CODE,
            fd: -1,
            addr: self.user_data,
            op_flags: self.flags,
            ..Sqe::default()
        }
    }
}

/// `IORING_OP_SPLICE` (5.7): like splice(2), moving `len` bytes from `fd_in`
/// to `fd_out`; one of them must be a pipe.
///
/// Offsets: `None` (-1) for pipes and sockets. Result: bytes moved (0 = EOF on
/// `fd_in`) or `-errno` (`-EINVAL` e.g. for an unaligned pipe→O_DIRECT file).
#[derive(Debug, Clone, Copy)]
pub struct Splice {
    fd_in: RawFd,
    off_in: Option<u64>,
    fd_out: RawFd,
    off_out: Option<u64>,
    len: u32,
    flags: u32,
}

impl Splice {
    /// `IORING_OP_SPLICE` = 30.
    pub const CODE: u8 = code!(IORING_OP_SPLICE);
    /// `SPLICE_F_FD_IN_FIXED` (1 << 31): `fd_in` is a registered-file index.
    pub const F_FD_IN_FIXED: u32 = sys::SPLICE_F_FD_IN_FIXED;
    /// Moves up to `len` bytes from `fd_in` at `off_in` to `fd_out` at `off_out`.
    pub const fn new(fd_in: RawFd, off_in: Option<u64>, fd_out: RawFd, off_out: Option<u64>, len: u32) -> Splice {
        Splice {
            fd_in,
            off_in,
            fd_out,
            off_out,
            len,
            flags: 0,
        }
    }
    /// `SPLICE_F_*` flags (`SPLICE_F_MOVE`, `SPLICE_F_NONBLOCK`, [`Splice::F_FD_IN_FIXED`]).
    pub const fn flags(mut self, flags: u32) -> Splice {
        self.flags = flags;
        self
    }
    /// The SQE (`fd` = fd_out, `off` = off_out, `splice_off_in`, `splice_fd_in`).
    pub fn build(self) -> Sqe {
        Sqe {
            opcode: Self::CODE,
            fd: self.fd_out,
            off: self.off_out.unwrap_or(u64::MAX),
            addr: self.off_in.unwrap_or(u64::MAX),
            len: self.len,
            op_flags: self.flags,
            splice_fd_in: self.fd_in,
            ..Sqe::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcode_numbers_match_kernel() {
        let codes = [
            (Nop::CODE, 0),
            (Fsync::CODE, 3),
            (ReadFixed::CODE, 4),
            (WriteFixed::CODE, 5),
            (RecvMsg::CODE, 10),
            (Timeout::CODE, 11),
            (AsyncCancel::CODE, 14),
            (LinkTimeout::CODE, 15),
            (Connect::CODE, 16),
            (Fallocate::CODE, 17),
            (Close::CODE, 19),
            (Read::CODE, 22),
            (Write::CODE, 23),
            (Send::CODE, 26),
            (Recv::CODE, 27),
            (Splice::CODE, 30),
        ];
        for (got, want) in codes {
            assert_eq!(got, want);
        }
        assert_eq!(Splice::F_FD_IN_FIXED, 1 << 31);
    }

    #[test]
    fn fallocate_field_use() {
        let s = Fallocate::new(7, 4096).offset(8192).mode(1).build();
        assert_eq!((s.fd, s.len, s.off, s.addr), (7, 1, 8192, 4096));
    }

    #[test]
    fn splice_field_use() {
        let s = Splice::new(3, None, 4, Some(10), 99)
            .flags(Splice::F_FD_IN_FIXED)
            .build();
        assert_eq!((s.fd, s.splice_fd_in, s.addr, s.off, s.len), (4, 3, u64::MAX, 10, 99));
        assert_eq!(s.op_flags, 1 << 31);
    }
}
