//! The safe owned-buffer layer: ops own their memory until their completion.
//!
//! # Safety
//!
//! Each pushed SQE points only into memory its slot owns (the op's [`crate::Buf`], `Vec` or
//! sockaddr) from push until its CQE is reaped; a ring dropped with ops in flight cancels
//! them and leaks, rather than frees, memory the kernel might still write.
#![allow(unsafe_code)]

use core::cell::UnsafeCell;
use core::ops::Range;
use core::sync::atomic::{AtomicU64, Ordering};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{IntoRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::time::{Duration, Instant};

use linux_raw_sys::general::iovec;
use linux_raw_sys::io_uring as sys;
use linux_raw_sys::net::msghdr;
use rustix::io::Errno;

use crate::buf::{Buf, BufPool, PoolInner, Registration};
use crate::epoll::EpollRing;
use crate::opcode;
use crate::raw::{Backend, Probe, RawRing, RingBuilder};
use crate::sys::{Features, SetupFlags, Sqe, SqeFlags, Timespec};

/// `user_data` bit marking the CQE of an internal LINK_TIMEOUT (slot in the low bits).
const LINK_BIT: u64 = 1 << 63;
/// `user_data` bit marking ring-internal requests (drop-time cancel and timer).
const INTERNAL_BIT: u64 = 1 << 62;
const INTERNAL_CANCEL: u64 = INTERNAL_BIT | 1;
const INTERNAL_TIMER: u64 = INTERNAL_BIT | 2;
/// An ASYNC_CANCEL target that never matches (the tag was not in flight).
const NO_SUCH_OP: u64 = INTERNAL_BIT | 3;
/// Generations use bits 32..62 of `user_data`.
const GEN_MASK: u32 = (1 << 30) - 1;
/// How long Drop waits for cancelled ops.
const DROP_WAIT: Duration = Duration::from_secs(1);
/// The timer that wakes the drop-time wait; a static, so the pointer the
/// kernel reads stays valid however late it reads it.
static DRAIN_TICK: Timespec = Timespec {
    tv_sec: 0,
    tv_nsec: 20_000_000,
};

static NEXT_RING_ID: AtomicU64 = AtomicU64::new(1);

/// One operation with the memory it needs, for [`Ring::push`].
///
/// Buffers are moved into the ring and given back in the [`Completion`].
/// Ranges are checked at push: a range outside the buffer, or longer than
/// `u32::MAX` bytes, is [`PushError::BadRange`] (no panic).
#[derive(Debug)]
pub enum Op {
    /// `IORING_OP_NOP` (5.1): completes with 0.
    Nop,
    /// READ_FIXED (5.1) when `buf`'s pool is registered with this ring, else
    /// READ (5.6): pread(2) into `buf[range]` at file `offset` (bytes).
    Read {
        /// File to read.
        fd: RawFd,
        /// Destination block.
        buf: Buf,
        /// Byte range of `buf` to fill.
        range: Range<usize>,
        /// File offset in bytes (`u64::MAX` = current position).
        offset: u64,
    },
    /// WRITE_FIXED (5.1) when registered, else WRITE (5.6): pwrite(2) from
    /// `buf[range]` at file `offset` (bytes).
    Write {
        /// File to write.
        fd: RawFd,
        /// Source block.
        buf: Buf,
        /// Byte range of `buf` to write.
        range: Range<usize>,
        /// File offset in bytes (`u64::MAX` = current position).
        offset: u64,
    },
    /// `IORING_OP_RECV` (5.6): recv(2) into `buf[range]`.
    Recv {
        /// Socket.
        fd: RawFd,
        /// Destination block.
        buf: Buf,
        /// Byte range of `buf` to fill.
        range: Range<usize>,
        /// `MSG_*` flags.
        flags: u32,
    },
    /// `IORING_OP_SEND` (5.6): send(2) of `data[range]`; `data` is owned by
    /// the ring until the completion.
    Send {
        /// Socket.
        fd: RawFd,
        /// Bytes to send.
        data: Vec<u8>,
        /// Byte range of `data` to send.
        range: Range<usize>,
        /// `MSG_*` flags (`MSG_NOSIGNAL` is sensible).
        flags: u32,
    },
    /// `IORING_OP_RECVMSG` (5.3): recvmsg(2) into `buf[range]` with
    /// `control_len` bytes of cmsg space, returned in [`Completion::control`]
    /// (kTLS record types: SOL_TLS / TLS_GET_RECORD_TYPE).
    RecvMsg {
        /// Socket.
        fd: RawFd,
        /// Destination block.
        buf: Buf,
        /// Byte range of `buf` to fill.
        range: Range<usize>,
        /// Control-message space in bytes.
        control_len: usize,
        /// `MSG_*` flags.
        flags: u32,
    },
    /// `IORING_OP_CONNECT` (5.5): connect(2); the sockaddr is kept in the ring
    /// until the completion.
    Connect {
        /// Socket.
        fd: RawFd,
        /// Peer address.
        addr: SocketAddr,
    },
    /// `IORING_OP_CLOSE` (5.6): close(2); the ring takes the fd.
    Close {
        /// Descriptor to close.
        fd: OwnedFd,
    },
    /// `IORING_OP_FALLOCATE` (5.6): fallocate(2) of `len` bytes at `offset`.
    Fallocate {
        /// File.
        fd: RawFd,
        /// `FALLOC_FL_*` mode.
        mode: i32,
        /// Start in bytes.
        offset: u64,
        /// Length in bytes.
        len: u64,
    },
    /// `IORING_OP_FSYNC` (5.1): fsync(2), or fdatasync(2) when `datasync`.
    Fsync {
        /// File.
        fd: RawFd,
        /// fdatasync semantics.
        datasync: bool,
    },
    /// `IORING_OP_TIMEOUT` (5.4): completes with `-ETIME` after `after`.
    Timeout {
        /// Relative delay.
        after: Duration,
    },
    /// `IORING_OP_ASYNC_CANCEL` (5.5) of the in-flight op pushed with
    /// `target_tag` (the first found if several share it): 0, `-ENOENT`
    /// (not in flight), `-EALREADY` (running; cancellation attempted).
    Cancel {
        /// Tag of the op to cancel.
        target_tag: u64,
    },
    /// `IORING_OP_SPLICE` (5.7): splice(2) of up to `len` bytes; one side must be a pipe.
    Splice {
        /// Source.
        fd_in: RawFd,
        /// Source offset in bytes; `None` for pipes and sockets.
        off_in: Option<u64>,
        /// Destination.
        fd_out: RawFd,
        /// Destination offset in bytes; `None` for pipes and sockets.
        off_out: Option<u64>,
        /// Bytes to move at most.
        len: u32,
        /// `SPLICE_F_*` flags.
        flags: u32,
    },
}

/// The outcome of one op, with the memory it carried given back.
#[derive(Debug)]
pub struct Completion {
    /// The tag given to [`Ring::push`].
    pub tag: u64,
    /// CQE `res`: bytes or `-errno`.
    pub result: i32,
    /// CQE `flags` (`IORING_CQE_F_*`).
    pub flags: u32,
    /// The [`Buf`] the op carried.
    pub buf: Option<Buf>,
    /// The `Vec` a [`Op::Send`] carried.
    pub data: Option<Vec<u8>>,
    /// [`Op::RecvMsg`]: control bytes actually received (truncated to `msg_controllen`).
    pub control: Option<Vec<u8>>,
    /// [`Op::RecvMsg`]: `msghdr.msg_flags` after completion (`MSG_CTRUNC`, ...), else 0.
    pub msg_flags: i32,
}

/// Why [`Ring::push`] refused an op; the op comes back.
#[derive(Debug)]
#[non_exhaustive]
pub enum PushError {
    /// No room in the SQ ring, the slot table or the CQ budget: submit, reap
    /// completions, then push again.
    Full {
        /// The op, untouched.
        op: Op,
        /// Its tag.
        tag: u64,
    },
    /// `range` lies outside the op's buffer, or is longer than `u32::MAX` bytes.
    BadRange {
        /// The op, untouched.
        op: Op,
        /// Its tag.
        tag: u64,
    },
}

impl PushError {
    /// The op and tag that were refused.
    pub fn into_op(self) -> (Op, u64) {
        match self {
            PushError::Full { op, tag } | PushError::BadRange { op, tag } => (op, tag),
        }
    }
}

impl core::fmt::Display for PushError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            PushError::Full { .. } => "ring full",
            PushError::BadRange { .. } => "range outside the op's buffer",
        })
    }
}

impl std::error::Error for PushError {}

/// Memory the kernel reads (and for RECVMSG writes) while an op is in flight.
#[repr(C)]
struct Args {
    ts: Timespec,
    link_ts: Timespec,
    addr: SockAddrBuf,
    msg: msghdr,
    iov: iovec,
}

impl Args {
    fn new() -> UnsafeCell<Args> {
        UnsafeCell::new(Args {
            ts: Timespec::default(),
            link_ts: Timespec::default(),
            addr: SockAddrBuf([0; 28]),
            msg: msghdr {
                msg_name: core::ptr::null_mut(),
                msg_namelen: 0,
                msg_iov: core::ptr::null_mut(),
                msg_iovlen: 0,
                msg_control: core::ptr::null_mut(),
                msg_controllen: 0,
                msg_flags: 0,
            },
            iov: iovec {
                iov_base: core::ptr::null_mut(),
                iov_len: 0,
            },
        })
    }
}

/// Room for a `sockaddr_in6` (28 bytes), aligned for either family.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct SockAddrBuf([u8; 28]);

/// What an in-flight op owns.
enum Payload {
    None,
    Buf(Buf),
    Data(Vec<u8>),
    RecvMsg { buf: Buf, control: Vec<u8> },
}

struct Slot {
    tag: u64,
    generation: u32,
    /// CQEs still expected (op + link timeout); 0 = free.
    pending: u8,
    /// The op's own CQE was reaped (only its link timeout may remain).
    op_done: bool,
    /// Drop-time per-op cancel already pushed.
    cancel_sent: bool,
    payload: Payload,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            tag: 0,
            generation: 0,
            pending: 0,
            op_done: true,
            cancel_sent: false,
            payload: Payload::None,
        }
    }

    fn user_data(&self, idx: usize) -> u64 {
        (u64::from(self.generation) << 32) | idx as u64
    }
}

/// The io_uring backend of [`Ring`].
///
/// One thread (`!Send`). In-flight ops are bounded by a slot table of
/// CQ-entries size allocated at build, so the CQ never overflows.
pub(crate) struct UringRing {
    /// Bookkeeping per in-flight op; index = low 32 bits of `user_data`.
    slots: Box<[Slot]>,
    /// Memory the kernel reads (and for RECVMSG writes) per slot, kept apart
    /// from `slots` so no `&mut Slot` ever covers memory the kernel may write.
    /// INVARIANT: never resized after build (pointers into it are in flight);
    /// while `slots[i].pending > 0` the kernel may access `args[i]`, and Rust
    /// touches it only when the slot is free or its op's CQE has been reaped.
    args: Box<[UnsafeCell<Args>]>,
    /// Free slot indices; capacity = slots.len(), so pushes never reallocate.
    free: Vec<u32>,
    /// CQEs reaped to relieve back-pressure, not yet handed out.
    ready: VecDeque<Completion>,
    in_flight: usize,
    /// CQEs the kernel still owes us (ops + link timeouts); ≤ cq entries.
    cqes_outstanding: usize,
    pools: Vec<Rc<PoolInner>>,
    /// The fixed-file table: `files[i]` is the fd registered at index i.
    files: Vec<RawFd>,
    /// Ops submitted with IOSQE_FIXED_FILE.
    fixed_file_ops: u64,
    id: u64,
    raw: RawRing,
}

impl core::fmt::Debug for UringRing {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("UringRing")
            .field("raw", &self.raw)
            .field("in_flight", &self.in_flight)
            .field("cqes_outstanding", &self.cqes_outstanding)
            .finish_non_exhaustive()
    }
}

impl RingBuilder {
    /// Creates the ring of the chosen [`Backend`] and its slot table
    /// (capacity = CQ entries: twice the entries rounded up to a power of two
    /// unless [`RingBuilder::cq_entries`] says otherwise).
    ///
    /// # Errors
    /// [`Backend::Uring`]: as [`RingBuilder::build_raw`]; check
    /// [`crate::is_refused`] / [`crate::falls_back`] to tell "io_uring refused
    /// by the kernel" apart. [`Backend::Epoll`]: epoll_create1(2) errors
    /// (EMFILE, ENFILE, ENOMEM); InvalidInput when CQ entries < entries.
    pub fn build(&self) -> io::Result<Ring> {
        let inner = match self.backend {
            Backend::Uring => Inner::Uring(self.build_uring()?),
            Backend::Epoll => Inner::Epoll(EpollRing::new(self.entries, self.cq_entries)?),
        };
        Ok(Ring { inner })
    }

    fn build_uring(&self) -> io::Result<UringRing> {
        let raw = self.build_raw()?;
        let cap = raw.cq_entries() as usize;
        let slots: Box<[Slot]> = (0..cap).map(|_| Slot::new()).collect();
        let args: Box<[UnsafeCell<Args>]> = (0..cap).map(|_| Args::new()).collect();
        let free: Vec<u32> = (0..cap as u32).rev().collect();
        Ok(UringRing {
            slots,
            args,
            free,
            ready: VecDeque::with_capacity(cap),
            in_flight: 0,
            cqes_outstanding: 0,
            pools: Vec::new(),
            files: Vec::new(),
            fixed_file_ops: 0,
            id: NEXT_RING_ID.fetch_add(1, Ordering::Relaxed),
            raw,
        })
    }
}

pub(crate) fn range_ok(range: &Range<usize>, len: usize) -> bool {
    range.start <= range.end && range.end <= len && range.end - range.start <= u32::MAX as usize
}

impl Op {
    /// Every byte range the op carries lies inside its buffer and fits a `u32` length
    /// (checked at push by both backends: [`PushError::BadRange`] otherwise).
    pub(crate) fn ranges_ok(&self) -> bool {
        match self {
            Op::Read { buf, range, .. }
            | Op::Write { buf, range, .. }
            | Op::Recv { buf, range, .. }
            | Op::RecvMsg { buf, range, .. } => range_ok(range, buf.len()),
            Op::Send { data, range, .. } => range_ok(range, data.len()),
            _ => true,
        }
    }
}

/// Writes `addr` as `sockaddr_in` / `sockaddr_in6`; returns its length in bytes.
fn encode_sockaddr(addr: &SocketAddr, out: &mut SockAddrBuf) -> u32 {
    let b = &mut out.0;
    *b = [0; 28];
    match addr {
        SocketAddr::V4(a) => {
            b[0..2].copy_from_slice(&(linux_raw_sys::net::AF_INET as u16).to_ne_bytes());
            b[2..4].copy_from_slice(&a.port().to_be_bytes());
            b[4..8].copy_from_slice(&a.ip().octets());
            16
        }
        SocketAddr::V6(a) => {
            b[0..2].copy_from_slice(&(linux_raw_sys::net::AF_INET6 as u16).to_ne_bytes());
            b[2..4].copy_from_slice(&a.port().to_be_bytes());
            b[4..8].copy_from_slice(&a.flowinfo().to_be_bytes());
            b[8..24].copy_from_slice(&a.ip().octets());
            b[24..28].copy_from_slice(&a.scope_id().to_ne_bytes());
            28
        }
    }
}

impl UringRing {
    /// The setup flags the kernel granted (a subset of those asked for).
    pub fn granted(&self) -> SetupFlags {
        self.raw.granted()
    }

    /// The `IORING_FEAT_*` bits of the running kernel.
    pub fn features(&self) -> Features {
        self.raw.features()
    }

    /// SQ ring size in entries.
    pub fn sq_entries(&self) -> usize {
        self.raw.sq_entries() as usize
    }

    /// Most ops in flight at once (the slot table, = CQ entries).
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Ops pushed whose completion has not been returned yet (internal link
    /// timeouts not counted).
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Which opcodes the kernel supports (IORING_REGISTER_PROBE, 5.6).
    ///
    /// # Errors
    /// EINVAL before 5.6.
    pub fn probe(&self) -> io::Result<Probe> {
        self.raw.probe()
    }

    /// Registers each pool's whole region as one fixed buffer
    /// (IORING_REGISTER_BUFFERS, one call, index = position in `pools`).
    ///
    /// Registering again replaces the previous set (IORING_UNREGISTER_BUFFERS
    /// first). A pool is registered with at most one ring at a time. The ring
    /// keeps the pools mapped while registered.
    ///
    /// # Errors
    /// ENOMEM (RLIMIT_MEMLOCK), EPERM, EFAULT, EINVAL (a pool over 1 GiB),
    /// InvalidInput (more than 65536 pools); the pools then stay unregistered
    /// and ops use plain READ/WRITE.
    pub fn register_pools(&mut self, pools: &[&BufPool]) -> io::Result<()> {
        if pools.len() > usize::from(u16::MAX) + 1 {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        if !self.pools.is_empty() {
            self.forget_registrations();
            match self.raw.unregister_buffers() {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(Errno::NXIO.raw_os_error()) => {}
                Err(e) => return Err(e),
            }
        }
        // Each block its own slot of a sparse table, pinned at its first fixed op (5.19):
        // a run that uses few blocks of a large pool pins only those.
        let blocks: usize = pools.iter().map(|p| p.count()).sum();
        if let Ok(n) = u16::try_from(blocks)
            && self.raw.register_buffers_sparse(u32::from(n)).is_ok()
        {
            let mut first = 0u16;
            for p in pools {
                p.inner().set_registration(Some(Registration {
                    ring_id: self.id,
                    index: first,
                    per_block: true,
                }));
                first += p.count() as u16;
                self.pools.push(Rc::clone(p.inner()));
            }
            return Ok(());
        }
        let iovecs: Vec<iovec> = pools
            .iter()
            .map(|p| {
                let (base, len) = p.inner().region();
                iovec {
                    iov_base: base.cast(),
                    iov_len: len as _,
                }
            })
            .collect();
        // SAFETY: each iovec is a pool's whole mmap; `self.pools` keeps an Rc
        // to every pool, so the mappings outlive the registration (dropped with
        // the ring or replaced above). Rust holds no reference into a block
        // while a fixed op writes it: the Buf is moved into the slot table.
        unsafe { self.raw.register_buffers(&iovecs)? };
        for (i, p) in pools.iter().enumerate() {
            p.inner().set_registration(Some(Registration {
                ring_id: self.id,
                index: i as u16,
                per_block: false,
            }));
            self.pools.push(Rc::clone(p.inner()));
        }
        Ok(())
    }

    /// Registers `fds` as the fixed-file table (IORING_REGISTER_FILES, 5.1),
    /// replacing any table registered before; from then on ops on those fds go
    /// out with IOSQE_FIXED_FILE and the table index (no fget/fput per op).
    ///
    /// The table keeps each file open until the ring is dropped or the table
    /// replaced: closing a registered fd does not close its file.
    ///
    /// # Errors
    /// As [`RawRing::register_files`]; the table is then empty and ops use plain fds.
    pub fn register_files(&mut self, fds: &[RawFd]) -> io::Result<()> {
        if !self.files.is_empty() {
            self.files.clear();
            self.raw.unregister_files()?;
        }
        self.raw.register_files(fds)?;
        self.files = fds.to_vec();
        Ok(())
    }

    /// Ops submitted with IOSQE_FIXED_FILE so far.
    pub fn fixed_file_ops(&self) -> u64 {
        self.fixed_file_ops
    }

    /// Drops the fixed-file table (IORING_UNREGISTER_FILES, 5.1), if one is
    /// registered: the ring lets go of those files now. Before 6.13 the kernel
    /// waits for ops that still use the table, so call it with none in flight.
    ///
    /// # Errors
    /// As [`RawRing::unregister_files`]; the table is then forgotten here all the same.
    pub fn unregister_files(&mut self) -> io::Result<()> {
        if self.files.is_empty() {
            return Ok(());
        }
        self.files.clear();
        self.raw.unregister_files()
    }

    /// Asks the kernel to cancel every op in flight: one IORING_OP_ASYNC_CANCEL
    /// (5.5) per op by its user_data, queued: the cancels go to the kernel with the
    /// next submit, which is the caller's wait for their completions (an enter of its
    /// own here cost one io_uring_enter(2) per file of a list), or at once when they
    /// leave less than half the SQ free. Each op then completes as
    /// usual (through [`UringRing::next_completion`]), with `-ECANCELED` or with the
    /// result it reached first; a file write already running in io-wq completes on
    /// its own.
    ///
    /// # Errors
    /// io_uring_enter(2) errors of the submits made when the SQ fills.
    pub fn cancel_all(&mut self) -> io::Result<()> {
        self.cancel_where(&|_| true)
    }

    /// [`UringRing::cancel_all`] for the ops whose tag `which` accepts.
    ///
    /// # Errors
    /// As [`UringRing::cancel_all`].
    pub fn cancel_where(&mut self, which: &dyn Fn(u64) -> bool) -> io::Result<()> {
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            if s.pending == 0 || s.op_done || s.cancel_sent || !which(s.tag) {
                continue;
            }
            let sqe = opcode::AsyncCancel::new(s.user_data(i))
                .build()
                .user_data(INTERNAL_CANCEL);
            // SAFETY: ASYNC_CANCEL carries no pointer.
            while unsafe { self.raw.push_raw(&sqe) }.is_err() {
                // SQ full: hand what is queued to the kernel and go on.
                self.raw.submit()?;
            }
            self.slots[i].cancel_sent = true;
        }
        if self.raw.sq_space() * 2 < self.raw.sq_entries() as usize {
            // Over half the SQ waits: submit now, leaving room for what the caller
            // pushes before its wait.
            self.raw.submit()?;
        }
        Ok(())
    }

    fn forget_registrations(&mut self) {
        for p in self.pools.drain(..) {
            if p.registration().map(|r| r.ring_id) == Some(self.id) {
                p.set_registration(None);
            }
        }
    }

    /// The fixed-buffer index of `buf` for an op on `len` bytes of it, if its pool is
    /// registered with this ring. A block of a per-block registration is put in the table
    /// (IORING_REGISTER_BUFFERS_UPDATE: pinned from then on, the whole block) at its first
    /// op over the whole block; an op on less of a block not yet there goes out
    /// unregistered (the kernel pins its pages for that op alone), so that a run of small
    /// files keeps resident only the pages it wrote. A block that cannot be put there
    /// (ENOMEM) goes out unregistered, as do the pool's later ones.
    fn fixed_index(&mut self, buf: &Buf, len: usize) -> Option<u16> {
        let pool = buf.pool();
        let r = pool.registration().filter(|r| r.ring_id == self.id)?;
        if !r.per_block {
            return Some(r.index);
        }
        let b = buf.index();
        let slot = r.index + b as u16;
        if !pool.is_pinned(b) {
            if len < buf.len() {
                return None;
            }
            let (base, len) = pool.block_region(b);
            let iov = iovec {
                iov_base: base.cast(),
                iov_len: len as _,
            };
            // SAFETY: the block lies in the pool's mmap, which `self.pools` keeps mapped
            // while the table holds it (until unregistered with the ring); Rust holds no
            // reference into it while a fixed op writes it (the Buf moves into the slot).
            match unsafe { self.raw.update_buffer(u32::from(slot), &iov) } {
                Ok(()) => pool.set_pinned(b),
                Err(_) => {
                    pool.set_registration(None);
                    pool.set_pin_failed();
                    return None;
                }
            }
        }
        Some(slot)
    }

    /// [`Ring::push`] (`timeout` = None) and [`Ring::push_with_timeout`].
    pub(crate) fn push_inner(&mut self, op: Op, tag: u64, timeout: Option<Duration>) -> Result<(), PushError> {
        if !op.ranges_ok() {
            return Err(PushError::BadRange { op, tag });
        }
        let need = 1 + usize::from(timeout.is_some());
        if self.free.is_empty() || self.raw.sq_space() < need || self.cqes_outstanding + need > self.slots.len() {
            return Err(PushError::Full { op, tag });
        }
        let cancel_target = match &op {
            Op::Cancel { target_tag } => self
                .slots
                .iter()
                .enumerate()
                .find(|(_, s)| s.pending > 0 && !s.op_done && s.tag == *target_tag)
                .map_or(NO_SUCH_OP, |(i, s)| s.user_data(i)),
            _ => NO_SUCH_OP,
        };
        let fixed = match &op {
            Op::Read { buf, range, .. } | Op::Write { buf, range, .. } => self.fixed_index(buf, range.len()),
            _ => None,
        };
        // The fixed-file index of the fd an op targets (the ops whose `fd` is their file).
        let fixed_file = match &op {
            Op::Read { fd, .. }
            | Op::Write { fd, .. }
            | Op::Recv { fd, .. }
            | Op::Send { fd, .. }
            | Op::RecvMsg { fd, .. }
            | Op::Fallocate { fd, .. }
            | Op::Fsync { fd, .. } => self.files.iter().position(|f| f == fd),
            _ => None,
        };
        let idx = self.free.pop().expect("free slot checked above") as usize;
        let slot = &mut self.slots[idx];
        slot.generation = (slot.generation + 1) & GEN_MASK;
        slot.tag = tag;
        slot.op_done = false;
        slot.cancel_sent = false;
        let ud = slot.user_data(idx);
        let args = self.args[idx].get();
        let sqe = match op {
            Op::Nop => opcode::Nop::new().build(),
            Op::Read { fd, buf, range, offset } => {
                // SAFETY: range_ok checked start <= end <= buf.len(), so the pointer
                // stays inside the block.
                let p = unsafe { buf.as_mut_ptr_inner().add(range.start) };
                let len = range.len() as u32;
                slot.payload = Payload::Buf(buf);
                match fixed {
                    Some(i) => opcode::ReadFixed::new(fd, p, len, i).offset(offset).build(),
                    None => opcode::Read::new(fd, p, len).offset(offset).build(),
                }
            }
            Op::Write { fd, buf, range, offset } => {
                // SAFETY: range_ok checked start <= end <= buf.len(), so the pointer
                // stays inside the block.
                let p = unsafe { buf.as_mut_ptr_inner().add(range.start) };
                let len = range.len() as u32;
                slot.payload = Payload::Buf(buf);
                match fixed {
                    Some(i) => opcode::WriteFixed::new(fd, p, len, i).offset(offset).build(),
                    None => opcode::Write::new(fd, p, len).offset(offset).build(),
                }
            }
            Op::Recv { fd, buf, range, flags } => {
                // SAFETY: range_ok checked start <= end <= buf.len(), so the pointer
                // stays inside the block.
                let p = unsafe { buf.as_mut_ptr_inner().add(range.start) };
                let len = range.len() as u32;
                slot.payload = Payload::Buf(buf);
                opcode::Recv::new(fd, p, len).flags(flags).build()
            }
            Op::Send { fd, data, range, flags } => {
                let p = data[range.clone()].as_ptr();
                let len = range.len() as u32;
                // Moving the Vec does not move its heap buffer.
                slot.payload = Payload::Data(data);
                opcode::Send::new(fd, p, len).flags(flags).build()
            }
            Op::RecvMsg {
                fd,
                buf,
                range,
                control_len,
                flags,
            } => {
                let mut control = vec![0u8; control_len];
                // SAFETY: range_ok checked start <= end <= buf.len(), so the pointer
                // stays inside the block.
                let p = unsafe { buf.as_mut_ptr_inner().add(range.start) };
                // SAFETY: the slot is free (popped from `free`), so by the
                // INVARIANT of `UringRing::args` the kernel does not touch `args` and we may write it.
                unsafe {
                    (*args).iov = iovec {
                        iov_base: p.cast(),
                        iov_len: range.len() as _,
                    };
                    (*args).msg = msghdr {
                        msg_name: core::ptr::null_mut(),
                        msg_namelen: 0,
                        msg_iov: (&raw mut (*args).iov).cast(),
                        msg_iovlen: 1,
                        msg_control: if control_len == 0 {
                            core::ptr::null_mut()
                        } else {
                            control.as_mut_ptr().cast()
                        },
                        msg_controllen: control_len as _,
                        msg_flags: 0,
                    };
                }
                slot.payload = Payload::RecvMsg { buf, control };
                // SAFETY: `args` points into `UringRing::args`, valid for the ring's life;
                // `&raw mut` only computes the field address, no reference is made.
                let msg = unsafe { &raw mut (*args).msg };
                opcode::RecvMsg::new(fd, msg).flags(flags).build()
            }
            Op::Connect { fd, addr } => {
                // SAFETY: slot is free (INVARIANT of `UringRing::args`): we may write `args`.
                let (p, len) = unsafe {
                    let len = encode_sockaddr(&addr, &mut (*args).addr);
                    ((&raw const (*args).addr).cast::<u8>(), len)
                };
                opcode::Connect::new(fd, p, len).build()
            }
            Op::Close { fd } => opcode::Close::new(fd.into_raw_fd()).build(),
            Op::Fallocate { fd, mode, offset, len } => {
                opcode::Fallocate::new(fd, len).offset(offset).mode(mode).build()
            }
            Op::Fsync { fd, datasync } => opcode::Fsync::new(fd).datasync(datasync).build(),
            Op::Timeout { after } => {
                // SAFETY: slot is free (INVARIANT of `UringRing::args`): we may write `args`.
                let ts = unsafe {
                    (*args).ts = Timespec::from(after);
                    &raw const (*args).ts
                };
                opcode::Timeout::new(ts).build()
            }
            Op::Cancel { .. } => opcode::AsyncCancel::new(cancel_target).build(),
            Op::Splice {
                fd_in,
                off_in,
                fd_out,
                off_out,
                len,
                flags,
            } => opcode::Splice::new(fd_in, off_in, fd_out, off_out, len)
                .flags(flags)
                .build(),
        };
        let sqe = match fixed_file {
            Some(i) => {
                self.fixed_file_ops += 1;
                let mut s = sqe.flags(sqe.get_flags() | SqeFlags::FIXED_FILE);
                s.fd = i as i32;
                s
            }
            None => sqe,
        };
        let mut sqes = [sqe.user_data(ud), Sqe::default()];
        let n = if let Some(t) = timeout {
            sqes[0] = sqes[0].flags(sqes[0].get_flags() | SqeFlags::IO_LINK);
            // SAFETY: slot is free (INVARIANT of `UringRing::args`): we may write `args`.
            let ts = unsafe {
                (*args).link_ts = Timespec::from(t);
                &raw const (*args).link_ts
            };
            sqes[1] = opcode::LinkTimeout::new(ts).build().user_data(ud | LINK_BIT);
            2
        } else {
            1
        };
        slot.pending = n as u8;
        // SAFETY: every pointer in these SQEs points into the slot's `args`
        // (the table is never resized) or into memory the slot's payload owns
        // (Buf block, Vec heap buffer); the slot is released only once all
        // `pending` CQEs are reaped, and Drop leaks it if that cannot be confirmed.
        let pushed = unsafe { self.raw.push_raw_many(&sqes[..n]) };
        debug_assert!(pushed.is_ok(), "SQ space checked above");
        self.in_flight += 1;
        self.cqes_outstanding += n;
        Ok(())
    }

    /// Submits pending SQEs and waits until at least `want` CQEs are ready,
    /// in one io_uring_enter(2) (`IORING_ENTER_GETEVENTS`).
    ///
    /// `want` is capped at the CQEs still owed, so it never waits forever;
    /// some of those may be internal (link timeouts), so
    /// [`Ring::next_completion`] may then yield fewer than `want`. Returns the
    /// number of SQEs submitted.
    ///
    /// # Errors
    /// EINTR is `Ok(0)` (call again). EBUSY / EAGAIN (CQ overflow) are handled
    /// by reaping into an internal queue and retrying. Other io_uring_enter(2)
    /// errors are returned.
    pub fn submit_and_wait(&mut self, want: usize) -> io::Result<usize> {
        let mut want = want.saturating_sub(self.ready.len()).min(self.cqes_outstanding);
        let mut tries = 0;
        loop {
            match self.raw.submit_and_wait(want) {
                Ok(n) => return Ok(n),
                Err(e)
                    if tries < 3
                        && (e.raw_os_error() == Some(Errno::BUSY.raw_os_error())
                            || e.raw_os_error() == Some(Errno::AGAIN.raw_os_error())) =>
                {
                    tries += 1;
                    while let Some(cqe) = self.raw.next_cqe() {
                        if let Some(c) = self.complete(cqe) {
                            self.ready.push_back(c);
                        }
                    }
                    want = want.saturating_sub(self.ready.len()).min(self.cqes_outstanding);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Reaps one completion, no syscall; `None` when none is ready.
    pub fn next_completion(&mut self) -> Option<Completion> {
        if let Some(c) = self.ready.pop_front() {
            return Some(c);
        }
        while let Some(cqe) = self.raw.next_cqe() {
            if let Some(c) = self.complete(cqe) {
                return Some(c);
            }
        }
        None
    }

    /// Accounts one CQE; returns the user-visible completion, if any.
    fn complete(&mut self, cqe: crate::sys::Cqe) -> Option<Completion> {
        let ud = cqe.user_data;
        if ud & INTERNAL_BIT != 0 {
            return None;
        }
        let idx = (ud & 0xFFFF_FFFF) as usize;
        let slot = self.slots.get_mut(idx)?;
        if slot.pending == 0 || slot.user_data(idx) != ud & !LINK_BIT {
            debug_assert!(false, "CQE for a free slot: {ud:#x}");
            return None;
        }
        slot.pending -= 1;
        self.cqes_outstanding -= 1;
        let out = if ud & LINK_BIT != 0 {
            None
        } else {
            slot.op_done = true;
            self.in_flight -= 1;
            let mut c = Completion {
                tag: slot.tag,
                result: cqe.res,
                flags: cqe.flags,
                buf: None,
                data: None,
                control: None,
                msg_flags: 0,
            };
            match core::mem::replace(&mut slot.payload, Payload::None) {
                Payload::None => {}
                Payload::Buf(b) => c.buf = Some(b),
                Payload::Data(d) => c.data = Some(d),
                Payload::RecvMsg { buf, mut control } => {
                    // SAFETY: the RECVMSG CQE was reaped, so the kernel is done
                    // writing `msg` (INVARIANT of `UringRing::args`); read by value, no reference kept.
                    let (clen, mflags) = unsafe {
                        let msg = &raw const (*self.args[idx].get()).msg;
                        ((*msg).msg_controllen, (*msg).msg_flags)
                    };
                    control.truncate(clen);
                    c.buf = Some(buf);
                    c.control = Some(control);
                    c.msg_flags = mflags as i32;
                }
            }
            Some(c)
        };
        if slot.pending == 0 {
            self.free.push(idx as u32);
        }
        out
    }

    /// Cancels everything in flight and waits (at most `limit`) for every
    /// CQE still owed. Returns whether all arrived.
    fn cancel_all_and_wait(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut any_sent = false;
        let mut per_op = false;
        let mut timer_armed = false;
        loop {
            while let Some(cqe) = self.raw.next_cqe() {
                match cqe.user_data {
                    INTERNAL_CANCEL if cqe.res == -Errno::INVAL.raw_os_error() => per_op = true,
                    INTERNAL_TIMER => timer_armed = false,
                    _ => drop(self.complete(cqe)),
                }
            }
            if self.cqes_outstanding == 0 {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            if !any_sent {
                let sqe = opcode::AsyncCancel::new(0)
                    .flags(sys::IORING_ASYNC_CANCEL_ANY | sys::IORING_ASYNC_CANCEL_ALL)
                    .build()
                    .user_data(INTERNAL_CANCEL);
                // SAFETY: ASYNC_CANCEL carries no pointer.
                any_sent = unsafe { self.raw.push_raw(&sqe) }.is_ok();
            }
            if per_op {
                for i in 0..self.slots.len() {
                    let s = &self.slots[i];
                    if s.pending == 0 || s.op_done || s.cancel_sent {
                        continue;
                    }
                    let sqe = opcode::AsyncCancel::new(s.user_data(i))
                        .build()
                        .user_data(INTERNAL_CANCEL);
                    // SAFETY: ASYNC_CANCEL carries no pointer.
                    if unsafe { self.raw.push_raw(&sqe) }.is_err() {
                        break;
                    }
                    self.slots[i].cancel_sent = true;
                }
            }
            if !timer_armed {
                let sqe = opcode::Timeout::new(&DRAIN_TICK).build().user_data(INTERNAL_TIMER);
                // SAFETY: the timespec is a static, valid forever.
                timer_armed = unsafe { self.raw.push_raw(&sqe) }.is_ok();
            }
            match self.raw.submit_and_wait(1) {
                Ok(_) => {}
                Err(e)
                    if e.raw_os_error() == Some(Errno::BUSY.raw_os_error())
                        || e.raw_os_error() == Some(Errno::AGAIN.raw_os_error()) => {}
                Err(_) => return false,
            }
        }
    }
}

impl Drop for UringRing {
    fn drop(&mut self) {
        let settled = (self.cqes_outstanding == 0 && self.raw.sq_pending() == 0) || self.cancel_all_and_wait(DROP_WAIT);
        if !settled {
            // Some op did not confirm completion: the kernel may still write
            // into its buffer, msghdr or control Vec (an io-wq worker mid-read
            // keeps doing so after close(2) of the ring). Freeing that memory
            // could hand it to new owners under the kernel's writes, so leak
            // the slot table with every Buf / Vec it holds instead.
            core::mem::forget(core::mem::take(&mut self.slots));
            core::mem::forget(core::mem::take(&mut self.args));
        }
        self.release_registrations(settled);
        // Fields drop next: the slot table (if not leaked), then `raw`, which
        // unmaps its rings before closing the fd.
    }
}

impl UringRing {
    /// Gives back, before the ring fd closes, what the ring holds of the process: the
    /// fixed-file table (a reference to each file, so to its filesystem) and the fixed
    /// buffers (pinned pages). close(2) of the last ring fd only queues the ring's
    /// teardown (io_ring_exit_work on a kernel workqueue); that work drops the table's
    /// file references from a kworker, whose fput(2) goes to the delayed-fput list, so the
    /// output stayed open — `umount` of its filesystem failed with EBUSY — for 20–40 ms
    /// after ringdl exited. IORING_UNREGISTER_FILES from this thread instead drops them
    /// now: the last fput runs as task work before the syscall returns to user space, so
    /// the file is closed when this function returns (io_uring/rsrc.c,
    /// io_sqe_files_unregister; fs/file_table.c, fput). Only when every op has
    /// completed (`settled`): before 6.13 unregistering waits for requests that still use
    /// the table, which an op that ignored its cancel could make endless.
    fn release_registrations(&mut self, settled: bool) {
        if settled {
            if !self.files.is_empty() {
                self.files.clear();
                // ENXIO: no table; EINTR (a signal while an older kernel waits for the
                // table's users): the close of the ring fd drops it, as before.
                let _ = self.raw.unregister_files();
            }
            // Before `pools` lets go of the mappings the registration pins.
            if !self.pools.is_empty() {
                let _ = self.raw.unregister_buffers();
            }
        }
        self.forget_registrations();
    }
}

/// Ops with owned buffers over one of two backends: the safe layer the binary uses.
///
/// [`Backend::Uring`] submits SQEs to an io_uring; [`Backend::Epoll`] runs
/// each op as its plain syscall and waits for sockets and pipes with
/// epoll(7). Both give the same [`Completion`]s (result = bytes or
/// `-errno`, buffers given back) and the same guarantees:
///
/// - every pushed op completes exactly once, also when cancelled
///   ([`Op::Cancel`]: the target completes with `-ECANCELED`) or timed out
///   ([`Ring::push_with_timeout`]: `-ECANCELED`; [`Op::Timeout`]: `-ETIME`);
/// - nothing runs before the next [`Ring::submit`] / [`Ring::submit_and_wait`],
///   and completions are handed out by [`Ring::next_completion`] only;
/// - no order among completions is promised beyond that (io_uring posts
///   them as they finish; epoll completes file ops at submit, in push order,
///   and socket/pipe ops when they become ready).
///
/// One thread (`!Send`). In-flight ops are bounded by [`Ring::capacity`].
pub struct Ring {
    inner: Inner,
}

enum Inner {
    Uring(UringRing),
    Epoll(EpollRing),
}

impl core::fmt::Debug for Ring {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match &self.inner {
            Inner::Uring(r) => r.fmt(f),
            Inner::Epoll(r) => r.fmt(f),
        }
    }
}

/// Calls the same method on whichever backend runs.
macro_rules! both {
    ($self:ident, $r:ident => $e:expr) => {
        match &$self.inner {
            Inner::Uring($r) => $e,
            Inner::Epoll($r) => $e,
        }
    };
    (mut $self:ident, $r:ident => $e:expr) => {
        match &mut $self.inner {
            Inner::Uring($r) => $e,
            Inner::Epoll($r) => $e,
        }
    };
}

impl Ring {
    /// Which backend runs this ring's ops.
    pub fn backend(&self) -> Backend {
        match self.inner {
            Inner::Uring(_) => Backend::Uring,
            Inner::Epoll(_) => Backend::Epoll,
        }
    }

    /// The setup flags the kernel granted (a subset of those asked for;
    /// empty on [`Backend::Epoll`]).
    pub fn granted(&self) -> SetupFlags {
        match &self.inner {
            Inner::Uring(r) => r.granted(),
            Inner::Epoll(_) => SetupFlags::empty(),
        }
    }

    /// The `IORING_FEAT_*` bits of the running kernel (empty on [`Backend::Epoll`]).
    pub fn features(&self) -> Features {
        match &self.inner {
            Inner::Uring(r) => r.features(),
            Inner::Epoll(_) => Features::empty(),
        }
    }

    /// SQ size in entries: ops (a linked timeout counts as one more) that
    /// can be pushed between two submits.
    pub fn sq_entries(&self) -> usize {
        both!(self, r => r.sq_entries())
    }

    /// Most ops in flight at once (the slot table, = CQ entries).
    pub fn capacity(&self) -> usize {
        both!(self, r => r.capacity())
    }

    /// Ops pushed whose completion has not been reaped yet (internal link
    /// timeouts not counted).
    pub fn in_flight(&self) -> usize {
        both!(self, r => r.in_flight())
    }

    /// Which opcodes the backend runs: IORING_REGISTER_PROBE (5.6) on
    /// io_uring; on epoll, the opcodes of every [`Op`] (plus LINK_TIMEOUT).
    ///
    /// # Errors
    /// EINVAL before 5.6 (io_uring).
    pub fn probe(&self) -> io::Result<Probe> {
        match &self.inner {
            Inner::Uring(r) => r.probe(),
            Inner::Epoll(_) => Ok(EpollRing::probe()),
        }
    }

    /// Registers each pool's whole region as one fixed buffer
    /// (IORING_REGISTER_BUFFERS, one call, index = position in `pools`).
    ///
    /// Registering again replaces the previous set (IORING_UNREGISTER_BUFFERS
    /// first). A pool is registered with at most one ring at a time. The ring
    /// keeps the pools mapped while registered. On [`Backend::Epoll`] this is
    /// a no-op that succeeds: pread(2)/pwrite(2) need no registration, and
    /// the pools stay unregistered ([`BufPool::is_registered`] is false).
    ///
    /// # Errors
    /// ENOMEM (RLIMIT_MEMLOCK), EPERM, EFAULT, EINVAL (a pool over 1 GiB),
    /// InvalidInput (more than 65536 pools); the pools then stay unregistered
    /// and ops use plain READ/WRITE.
    pub fn register_pools(&mut self, pools: &[&BufPool]) -> io::Result<()> {
        match &mut self.inner {
            Inner::Uring(r) => r.register_pools(pools),
            Inner::Epoll(_) => Ok(()),
        }
    }

    /// Registers `fds` as io_uring's fixed-file table (IORING_REGISTER_FILES,
    /// 5.1): ops on them then skip the kernel's per-op file lookup and
    /// reference count (IOSQE_FIXED_FILE). Each file stays open while
    /// registered, whatever happens to its fd, until the ring is dropped.
    ///
    /// # Errors
    /// [`Backend::Epoll`]: `Unsupported` (plain syscalls have no table).
    /// io_uring: EBADF, EMFILE, EINVAL, ENOMEM; ops then use plain fds.
    pub fn register_files(&mut self, fds: &[RawFd]) -> io::Result<()> {
        match &mut self.inner {
            Inner::Uring(r) => r.register_files(fds),
            Inner::Epoll(_) => Err(io::ErrorKind::Unsupported.into()),
        }
    }

    /// Drops the fixed-file table registered by [`Ring::register_files`], if any:
    /// the ring no longer holds those files open (IORING_UNREGISTER_FILES, 5.1).
    /// Call it with no op in flight on them (before 6.13 the kernel waits for
    /// those). A no-op on [`Backend::Epoll`].
    ///
    /// # Errors
    /// io_uring_register(2)'s (EINTR while an older kernel waits); the table is
    /// forgotten on this side all the same, and ops use plain fds.
    pub fn unregister_files(&mut self) -> io::Result<()> {
        match &mut self.inner {
            Inner::Uring(r) => r.unregister_files(),
            Inner::Epoll(_) => Ok(()),
        }
    }

    /// Cancels every op in flight (io_uring: one IORING_OP_ASYNC_CANCEL per op,
    /// 5.5; epoll: ops waiting for readiness or a deadline end at once, queued
    /// ones without running). io_uring queues the cancels for the next
    /// [`Ring::submit`] / [`Ring::submit_and_wait`]. Each still completes exactly once, through
    /// [`Ring::next_completion`], with `-ECANCELED` or the result it reached first
    /// — a file op already running (io-wq, an epoll file worker) completes on its
    /// own. For a ring kept from one job to the next: cancel, then reap until
    /// [`Ring::in_flight`] is 0.
    ///
    /// # Errors
    /// io_uring_enter(2) errors of the submits made meanwhile.
    pub fn cancel_all(&mut self) -> io::Result<()> {
        match &mut self.inner {
            Inner::Uring(r) => r.cancel_all(),
            Inner::Epoll(r) => {
                r.cancel_all();
                Ok(())
            }
        }
    }

    /// [`Ring::cancel_all`] for the ops whose tag (the `tag` given at push) `which`
    /// accepts: one tenant of a shared ring ends its own ops and no other's.
    ///
    /// # Errors
    /// As [`Ring::cancel_all`].
    pub fn cancel_where(&mut self, which: &dyn Fn(u64) -> bool) -> io::Result<()> {
        match &mut self.inner {
            Inner::Uring(r) => r.cancel_where(which),
            Inner::Epoll(r) => {
                r.cancel_where(which);
                Ok(())
            }
        }
    }

    /// Ops submitted with IOSQE_FIXED_FILE (registered files) so far; 0 on epoll.
    pub fn fixed_file_ops(&self) -> u64 {
        match &self.inner {
            Inner::Uring(r) => r.fixed_file_ops(),
            Inner::Epoll(_) => 0,
        }
    }

    /// Queues `op` with `tag`; it runs at the next [`Ring::submit`] /
    /// [`Ring::submit_and_wait`].
    ///
    /// The fds an op names must stay open until its completion is reaped.
    /// On [`Backend::Epoll`], [`Op::Connect`] sets O_NONBLOCK on its socket,
    /// and [`Op::Splice`] on its sides that have no offset (sockets, pipes).
    ///
    /// # Errors
    /// [`PushError::Full`] (SQ, slot table or CQ budget exhausted) and
    /// [`PushError::BadRange`]; both give the op back.
    pub fn push(&mut self, op: Op, tag: u64) -> Result<(), PushError> {
        both!(mut self, r => r.push_inner(op, tag, None))
    }

    /// Pushes `op` linked to a timeout of `timeout` (io_uring: IOSQE_IO_LINK +
    /// IORING_OP_LINK_TIMEOUT, 5.5; epoll: a deadline folded into
    /// epoll_wait's timeout). The timeout's own completion is consumed inside
    /// the ring; when it fires first, the op completes with `-ECANCELED` (or
    /// the error the op itself reached first). Needs 2 SQ entries and 2 CQEs
    /// of budget.
    ///
    /// # Errors
    /// As [`Ring::push`].
    pub fn push_with_timeout(&mut self, op: Op, tag: u64, timeout: Duration) -> Result<(), PushError> {
        both!(mut self, r => r.push_inner(op, tag, Some(timeout)))
    }

    /// Submits what was pushed and waits until at least `want` completions
    /// are ready (io_uring: one io_uring_enter(2) with GETEVENTS; epoll: the
    /// queued ops run, then epoll_wait(2) until enough complete or a
    /// deadline passes).
    ///
    /// `want` is capped at the completions still owed, so it never waits
    /// forever; some of those may be internal (link timeouts), so
    /// [`Ring::next_completion`] may then yield fewer than `want`. Returns the
    /// number of entries submitted.
    ///
    /// # Errors
    /// EINTR is `Ok(0)` on io_uring (call again). EBUSY / EAGAIN (CQ
    /// overflow) are handled by reaping into an internal queue and retrying.
    /// Other io_uring_enter(2) / epoll_wait(2) errors are returned.
    pub fn submit_and_wait(&mut self, want: usize) -> io::Result<usize> {
        both!(mut self, r => r.submit_and_wait(want))
    }

    /// Submits what was pushed without waiting (see [`Ring::submit_and_wait`]).
    ///
    /// # Errors
    /// As [`Ring::submit_and_wait`].
    pub fn submit(&mut self) -> io::Result<usize> {
        self.submit_and_wait(0)
    }

    /// Reaps one completion, no syscall; `None` when none is ready.
    pub fn next_completion(&mut self) -> Option<Completion> {
        both!(mut self, r => r.next_completion())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_encoding() {
        let mut b = SockAddrBuf([0xff; 28]);
        let n = encode_sockaddr(&"127.0.0.1:8080".parse().unwrap(), &mut b);
        assert_eq!(n, 16);
        assert_eq!(&b.0[..8], &[2, 0, 0x1f, 0x90, 127, 0, 0, 1]);
        assert!(b.0[8..].iter().all(|&x| x == 0));
        let n = encode_sockaddr(&"[::1]:443".parse().unwrap(), &mut b);
        assert_eq!(n, 28);
        assert_eq!(&b.0[..4], &[10, 0, 0x01, 0xbb]);
        assert_eq!(b.0[23], 1);
    }

    #[test]
    fn ranges() {
        assert!(range_ok(&(0..4096), 4096));
        assert!(range_ok(&(4096..4096), 4096));
        assert!(!range_ok(&(0..4097), 4096));
        #[allow(clippy::reversed_empty_ranges)]
        let r = 10..5;
        assert!(!range_ok(&r, 4096));
    }

    /// A cancel waits in the SQ for the caller's wait (no io_uring_enter of its own)
    /// unless it leaves less than half the SQ free; the wait then submits it and the
    /// op comes back cancelled.
    #[test]
    fn cancels_go_with_the_next_wait() {
        let mut r = RingBuilder::new(8).build_uring().unwrap();
        for tag in 0..2 {
            r.push_inner(
                Op::Timeout {
                    after: Duration::from_secs(60),
                },
                tag,
                None,
            )
            .unwrap();
        }
        r.raw.submit().unwrap();
        r.cancel_where(&|tag| tag == 0).unwrap();
        assert_eq!(r.raw.sq_pending(), 1, "the cancel was entered on its own");
        r.submit_and_wait(1).unwrap();
        let c = loop {
            if let Some(c) = r.next_completion() {
                break c;
            }
            r.submit_and_wait(1).unwrap();
        };
        assert_eq!((c.tag, c.result), (0, -Errno::CANCELED.raw_os_error()));
        // Five more ops and their cancels fill the SQ past half: submitted at once.
        for tag in 2..7 {
            r.push_inner(
                Op::Timeout {
                    after: Duration::from_secs(60),
                },
                tag,
                None,
            )
            .unwrap();
        }
        r.raw.submit().unwrap();
        r.cancel_all().unwrap();
        assert_eq!(r.raw.sq_pending(), 0);
        let mut cancelled = 0;
        while cancelled < 6 {
            r.submit_and_wait(1).unwrap();
            while let Some(c) = r.next_completion() {
                assert_eq!(c.result, -Errno::CANCELED.raw_os_error());
                cancelled += 1;
            }
        }
    }

    /// A pool registered block by block (5.19 sparse table) pins a block only at its
    /// first op over the whole block: an op on part of a block not yet pinned goes out as
    /// a plain WRITE (it still succeeds once the kernel's table is gone), a whole-block
    /// one puts the block in the table and goes out as WRITE_FIXED (it fails then).
    #[test]
    fn a_block_is_pinned_at_its_first_whole_block_write_only() {
        use std::os::fd::AsRawFd;
        let path = format!("/var/tmp/uring-unit-pinned-{}", std::process::id());
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let _ = std::fs::remove_file(&path);
        let mut r = RingBuilder::new(8).build_uring().unwrap();
        let pool = BufPool::new(4096, 2).unwrap();
        r.register_pools(&[&pool]).unwrap();
        if !pool.inner().registration().is_some_and(|g| g.per_block) {
            eprintln!("skipped: no sparse buffer table before Linux 5.19");
            return;
        }
        let fd = f.as_raw_fd();
        let write = |r: &mut UringRing, len: usize, tag: u64| {
            r.push_inner(
                Op::Write {
                    fd,
                    buf: pool.alloc().unwrap(),
                    range: 0..len,
                    offset: 0,
                },
                tag,
                None,
            )
            .unwrap();
            loop {
                if let Some(c) = r.next_completion() {
                    return c.result;
                }
                r.submit_and_wait(1).unwrap();
            }
        };
        assert_eq!(write(&mut r, 512, 1), 512);
        assert!(!pool.inner().is_pinned(0), "a partial write pinned its block");
        assert_eq!(write(&mut r, 4096, 2), 4096);
        assert!(pool.inner().is_pinned(0), "a whole-block write did not pin its block");
        r.raw.unregister_buffers().unwrap();
        assert!(write(&mut r, 4096, 3) < 0, "a pinned block goes out as WRITE_FIXED");
        // (Block 0 held: the next write takes block 1, never pinned.)
        let hold = pool.alloc().unwrap();
        assert_eq!(
            write(&mut r, 512, 4),
            512,
            "a partial write of a block not pinned goes out plain"
        );
        drop(hold);
    }

    /// Proves registered pools go through READ_FIXED / WRITE_FIXED: once the
    /// kernel's registration is pulled from under the ring, those ops fail
    /// (a plain READ/WRITE would still succeed).
    #[test]
    fn registered_pool_uses_fixed_opcodes() {
        use std::os::fd::AsRawFd;
        let path = format!("/var/tmp/uring-unit-fixed-{}", std::process::id());
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let _ = std::fs::remove_file(&path);
        let mut r = RingBuilder::new(8).build_uring().unwrap();
        let pool = BufPool::new(4096, 2).unwrap();
        r.register_pools(&[&pool]).unwrap();
        let fd = f.as_raw_fd();
        let wait = |r: &mut UringRing| loop {
            if let Some(c) = r.next_completion() {
                return c;
            }
            r.submit_and_wait(1).unwrap();
        };
        r.push_inner(
            Op::Write {
                fd,
                buf: pool.alloc().unwrap(),
                range: 0..4096,
                offset: 0,
            },
            1,
            None,
        )
        .unwrap();
        assert_eq!(wait(&mut r).result, 4096);
        r.raw.unregister_buffers().unwrap();
        r.push_inner(
            Op::Write {
                fd,
                buf: pool.alloc().unwrap(),
                range: 0..4096,
                offset: 0,
            },
            2,
            None,
        )
        .unwrap();
        assert!(wait(&mut r).result < 0, "WRITE_FIXED without registration fails");
        r.push_inner(
            Op::Read {
                fd,
                buf: pool.alloc().unwrap(),
                range: 0..4096,
                offset: 0,
            },
            3,
            None,
        )
        .unwrap();
        assert!(wait(&mut r).result < 0, "READ_FIXED without registration fails");
        // An unregistered pool on the same ring takes plain READ.
        let plain = BufPool::new(4096, 1).unwrap();
        r.push_inner(
            Op::Read {
                fd,
                buf: plain.alloc().unwrap(),
                range: 0..4096,
                offset: 0,
            },
            4,
            None,
        )
        .unwrap();
        assert_eq!(wait(&mut r).result, 4096);
    }

    #[test]
    fn args_layout() {
        assert_eq!(size_of::<SockAddrBuf>() % 4, 0);
        assert!(size_of::<SockAddrBuf>() >= size_of::<linux_raw_sys::net::sockaddr_in6>());
    }
}
