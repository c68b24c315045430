//! The raw ring: io_uring_setup(2), the mmapped SQ/CQ rings and SQE array,
//! io_uring_enter(2) and io_uring_register(2).
//!
//! # Safety
//!
//! The SQ/CQ ring memory is shared with the kernel: every offset comes from the
//! `io_uring_params` that io_uring_setup(2) filled in, and head/tail are read and written
//! with the acquire/release orderings the kernel's barriers pair with. An SQE's pointers
//! are the caller's to keep valid (`unsafe fn push_raw`).
#![allow(unsafe_code)]

use core::sync::atomic::{AtomicU32, Ordering, fence};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use linux_raw_sys::io_uring as sys;
use rustix::io::Errno;
use rustix::io_uring::{
    IoringEnterFlags, IoringRegisterOp, IoringSetupFlags, io_uring_enter, io_uring_params, io_uring_register,
    io_uring_setup,
};

use crate::mmap::Mmap;
use crate::sys::{Cqe, Features, SetupFlags, Sqe};

/// `struct iovec` as IORING_REGISTER_BUFFERS reads it.
pub use linux_raw_sys::general::iovec;

/// The SQ ring has no free entry: submit (and reap) first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqFull;

impl core::fmt::Display for SqFull {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("submission queue full")
    }
}

impl std::error::Error for SqFull {}

/// True when `err` (from [`RingBuilder::build`]) means the kernel refuses
/// io_uring as such: ENOSYS (not built in) or EPERM (`kernel.io_uring_disabled`,
/// seccomp in containers).
///
/// Source: io_uring_setup(2), Documentation/admin-guide/sysctl/kernel.rst.
pub fn is_refused(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(e) if e == Errno::NOSYS.raw_os_error() || e == Errno::PERM.raw_os_error())
}

/// Which kernel interface runs a [`crate::Ring`]'s ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// io_uring (5.6+ for every op of the owned layer; SPLICE 5.7).
    #[default]
    Uring,
    /// Readiness: each op as its plain syscall, non-blocking sockets and pipes
    /// waited on with epoll(7). Runs where io_uring is refused (seccomp,
    /// `kernel.io_uring_disabled`).
    Epoll,
}

impl Backend {
    /// `"io_uring"` or `"epoll"`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Uring => "io_uring",
            Backend::Epoll => "epoll",
        }
    }
}

/// True when `err` (from [`RingBuilder::build`] with [`Backend::Uring`]) is
/// a reason to run on [`Backend::Epoll`] instead: ENOSYS (not built in),
/// EPERM (`kernel.io_uring_disabled`, seccomp), EINVAL (a kernel too old for
/// the setup asked for) or ENOMEM (RLIMIT_MEMLOCK charged for the rings
/// before 5.12, or no memory). Returns the errno.
///
/// Source: io_uring_setup(2) ERRORS.
pub fn falls_back(err: &io::Error) -> Option<Errno> {
    let e = Errno::from_io_error(err)?;
    [Errno::NOSYS, Errno::PERM, Errno::INVAL, Errno::NOMEM]
        .contains(&e)
        .then_some(e)
}

/// Setup parameters for a ring: backend, entries, optional setup flags.
///
/// Each optional flag falls back when the kernel refuses it (EINVAL, EPERM):
/// first DEFER_TASKRUN is dropped, then SINGLE_ISSUER and COOP_TASKRUN, then
/// SQPOLL. [`Ring::granted`](crate::Ring::granted) says what was kept. The
/// setup flags mean nothing to [`Backend::Epoll`].
#[derive(Debug, Clone)]
pub struct RingBuilder {
    pub(crate) backend: Backend,
    pub(crate) entries: u32,
    pub(crate) cq_entries: Option<u32>,
    sqpoll_idle_ms: Option<u32>,
    single_issuer: bool,
    defer_taskrun: bool,
    coop_taskrun: bool,
    register_ring_fd: bool,
}

impl RingBuilder {
    /// A ring with `entries` SQ entries (rounded up to a power of two by the
    /// kernel, clamped to its maximum of 32768) and, by default, twice as many
    /// CQ entries.
    pub fn new(entries: u32) -> RingBuilder {
        RingBuilder {
            backend: Backend::Uring,
            entries,
            cq_entries: None,
            sqpoll_idle_ms: None,
            single_issuer: false,
            defer_taskrun: false,
            coop_taskrun: false,
            register_ring_fd: true,
        }
    }

    /// Chooses the backend (default [`Backend::Uring`]).
    pub fn backend(mut self, backend: Backend) -> RingBuilder {
        self.backend = backend;
        self
    }

    /// Asks for `IORING_SETUP_SQPOLL` (5.1; unprivileged since 5.13): a kernel
    /// thread submits, sleeping after `idle_ms` milliseconds without work.
    pub fn sqpoll(mut self, idle_ms: u32) -> RingBuilder {
        self.sqpoll_idle_ms = Some(idle_ms);
        self
    }

    /// Asks for `IORING_SETUP_SINGLE_ISSUER` (6.0).
    pub fn single_issuer(mut self, on: bool) -> RingBuilder {
        self.single_issuer = on;
        self
    }

    /// Asks for `IORING_SETUP_DEFER_TASKRUN` (6.1); implies SINGLE_ISSUER.
    /// Completions are then posted only inside `submit_and_wait`.
    pub fn defer_taskrun(mut self, on: bool) -> RingBuilder {
        self.defer_taskrun = on;
        self
    }

    /// Asks for `IORING_SETUP_COOP_TASKRUN` (5.19) with `TASKRUN_FLAG`.
    pub fn coop_taskrun(mut self, on: bool) -> RingBuilder {
        self.coop_taskrun = on;
        self
    }

    /// Whether to register the ring's fd with the building thread
    /// (`IORING_REGISTER_RING_FDS`, 5.18) so that each io_uring_enter(2) names it by
    /// index (`IORING_ENTER_REGISTERED_RING`) and the kernel skips the fdget/fdput of
    /// the ring file. Default on; a kernel that refuses (EINVAL before 5.18, EBUSY
    /// with the thread's 16 slots taken) leaves the ring entering by its plain fd.
    pub fn register_ring_fd(mut self, on: bool) -> RingBuilder {
        self.register_ring_fd = on;
        self
    }

    /// Sets the CQ size (`IORING_SETUP_CQSIZE`, 5.5); must be ≥ entries.
    pub fn cq_entries(mut self, cq_entries: u32) -> RingBuilder {
        self.cq_entries = Some(cq_entries);
        self
    }

    /// The flag sets tried in order, most wanted first.
    fn attempts(&self) -> Vec<SetupFlags> {
        let mut base = SetupFlags::CLAMP;
        if self.cq_entries.is_some() {
            base |= SetupFlags::CQSIZE;
        }
        let mut want = base;
        if self.sqpoll_idle_ms.is_some() {
            want |= SetupFlags::SQPOLL;
        }
        if self.single_issuer || self.defer_taskrun {
            want |= SetupFlags::SINGLE_ISSUER;
        }
        if self.defer_taskrun {
            want |= SetupFlags::DEFER_TASKRUN | SetupFlags::TASKRUN_FLAG;
        }
        if self.coop_taskrun {
            want |= SetupFlags::COOP_TASKRUN | SetupFlags::TASKRUN_FLAG;
        }
        let no_defer = if self.coop_taskrun {
            want.difference(SetupFlags::DEFER_TASKRUN)
        } else {
            want.difference(SetupFlags::DEFER_TASKRUN | SetupFlags::TASKRUN_FLAG)
        };
        let no_issuer =
            no_defer.difference(SetupFlags::SINGLE_ISSUER | SetupFlags::COOP_TASKRUN | SetupFlags::TASKRUN_FLAG);
        let no_sqpoll = no_issuer.difference(SetupFlags::SQPOLL);
        let plain = base.difference(SetupFlags::CLAMP);
        let mut out: Vec<SetupFlags> = Vec::with_capacity(5);
        for f in [want, no_defer, no_issuer, no_sqpoll, plain] {
            if out.last() != Some(&f) {
                out.push(f);
            }
        }
        out
    }

    /// Creates the raw ring (no slot table, no safe layer).
    ///
    /// # Errors
    /// The error of the last setup attempt: ENOSYS / EPERM when io_uring is
    /// refused ([`is_refused`]), ENOMEM (memlock or memory), EINVAL (bad
    /// sizes), or an mmap(2) error.
    pub fn build_raw(&self) -> io::Result<RawRing> {
        let mut last = io::Error::from(io::ErrorKind::InvalidInput);
        for flags in self.attempts() {
            match RawRing::setup(self.entries, flags, self.cq_entries, self.sqpoll_idle_ms) {
                Ok(mut ring) => {
                    if self.register_ring_fd {
                        // A refusal only costs the fdget/fdput it would have saved.
                        let _ = ring.register_ring_fd();
                    }
                    return Ok(ring);
                }
                Err(e) if e == Errno::INVAL || e == Errno::PERM => last = e.into(),
                Err(e) => return Err(e.into()),
            }
        }
        Err(last)
    }
}

/// Pointers into the mmapped SQ ring.
///
/// INVARIANT: every pointer points into `RawRing::sq_map` (or the SQE map)
/// at the offsets the kernel gave in `io_sqring_offsets`, so they are valid
/// and aligned for as long as the owning `RawRing` lives.
#[derive(Debug)]
struct SqPtrs {
    head: *const AtomicU32,
    tail: *const AtomicU32,
    flags: *const AtomicU32,
    mask: u32,
    entries: u32,
    sqes: *mut Sqe,
    /// Our copy of the tail: SQEs up to here are written, not yet published.
    local_tail: u32,
}

/// Pointers into the mmapped CQ ring. INVARIANT as for [`SqPtrs`].
#[derive(Debug)]
struct CqPtrs {
    head: *const AtomicU32,
    tail: *const AtomicU32,
    mask: u32,
    entries: u32,
    cqes: *const Cqe,
    /// Our copy of the head (we are its only writer).
    local_head: u32,
}

/// An io_uring instance: fd, mmapped rings, SQE array. Single-threaded.
///
/// Built by [`RingBuilder::build_raw`]; the safe [`crate::Ring`] wraps one.
/// Sources: io_uring_setup(2), io_uring_enter(2), io_uring_register(2).
#[derive(Debug)]
pub struct RawRing {
    sq: SqPtrs,
    cq: CqPtrs,
    // Drop order is declaration order: the three mappings are unmapped before
    // `fd` closes. Unmapping first makes close(2) drop the last reference to
    // the ring file, so the kernel tears the ring down (cancelling whatever is
    // left and freeing its pages) at that close, and no pointer into the
    // rings outlives the descriptor that names them.
    #[expect(dead_code, reason = "held only to be unmapped in Drop")]
    sqes_map: Mmap,
    #[expect(dead_code, reason = "held only to be unmapped in Drop")]
    cq_map: Option<Mmap>,
    #[expect(dead_code, reason = "held only to be unmapped in Drop")]
    sq_map: Mmap,
    fd: OwnedFd,
    granted: SetupFlags,
    features: Features,
    /// The ring's slot in the building thread's registered-ring table
    /// (IORING_REGISTER_RING_FDS), which io_uring_enter(2) then takes instead of
    /// the fd. The table is per task (`current->io_uring`); a `RawRing` is not
    /// `Send`, so every enter, and the unregister in `Drop`, runs on that thread.
    enter_index: Option<u32>,
}

impl RawRing {
    fn setup(
        entries: u32,
        flags: SetupFlags,
        cq_entries: Option<u32>,
        sqpoll_idle_ms: Option<u32>,
    ) -> Result<RawRing, Errno> {
        let mut p = io_uring_params::default();
        p.flags = IoringSetupFlags::from_bits_retain(flags.bits());
        if flags.contains(SetupFlags::CQSIZE) {
            p.cq_entries = cq_entries.unwrap_or(entries.saturating_mul(2));
        }
        if flags.contains(SetupFlags::SQPOLL) {
            p.sq_thread_idle = sqpoll_idle_ms.unwrap_or(0);
        }
        // SAFETY: `p` is a valid, exclusively borrowed io_uring_params; none of
        // the flags we set (ATTACH_WQ, NO_MMAP) makes the kernel read a
        // pointer or fd from it.
        let fd = unsafe { io_uring_setup(entries, &mut p)? };
        let features = Features::from_bits_retain(p.features.bits());
        let sq_len = p.sq_off.array as usize + p.sq_entries as usize * 4;
        let cq_len = p.cq_off.cqes as usize + p.cq_entries as usize * size_of::<Cqe>();
        let single = features.contains(Features::SINGLE_MMAP);
        let sq_map_len = if single { sq_len.max(cq_len) } else { sq_len };
        let errno = |e: io::Error| Errno::from_io_error(&e).unwrap_or(Errno::NOMEM);
        let sq_map = Mmap::ring(&fd, sq_map_len, u64::from(sys::IORING_OFF_SQ_RING)).map_err(errno)?;
        let cq_map = if single {
            None
        } else {
            Some(Mmap::ring(&fd, cq_len, u64::from(sys::IORING_OFF_CQ_RING)).map_err(errno)?)
        };
        let sqes_map = Mmap::ring(
            &fd,
            p.sq_entries as usize * size_of::<Sqe>(),
            u64::from(sys::IORING_OFF_SQES),
        )
        .map_err(errno)?;
        let cqm = cq_map.as_ref().unwrap_or(&sq_map);
        let u32_at = |m: &Mmap, off: u32| {
            // SAFETY: `off` is a kernel-given offset of a u32 field inside `m`
            // (Mmap::offset asserts it is in bounds).
            unsafe { m.offset(off).cast::<u32>().read() }
        };
        let sq = SqPtrs {
            head: sq_map.offset(p.sq_off.head).cast(),
            tail: sq_map.offset(p.sq_off.tail).cast(),
            flags: sq_map.offset(p.sq_off.flags).cast(),
            mask: u32_at(&sq_map, p.sq_off.ring_mask),
            entries: u32_at(&sq_map, p.sq_off.ring_entries),
            sqes: sqes_map.as_ptr().cast(),
            local_tail: 0,
        };
        let cq = CqPtrs {
            head: cqm.offset(p.cq_off.head).cast(),
            tail: cqm.offset(p.cq_off.tail).cast(),
            mask: u32_at(cqm, p.cq_off.ring_mask),
            entries: u32_at(cqm, p.cq_off.ring_entries),
            cqes: cqm.offset(p.cq_off.cqes).cast(),
            local_head: 0,
        };
        let array = sq_map.offset(p.sq_off.array).cast::<u32>();
        for i in 0..sq.entries {
            // SAFETY: the SQ index array has `sq_entries` u32 slots starting at
            // `sq_off.array`, all inside `sq_map` (sq_len was computed from
            // them); the kernel reads it only after we publish a tail.
            unsafe { array.add(i as usize).write(i) };
        }
        Ok(RawRing {
            sq,
            cq,
            sqes_map,
            cq_map,
            sq_map,
            fd,
            granted: flags,
            features,
            enter_index: None,
        })
    }

    /// The setup flags the kernel accepted.
    pub fn granted(&self) -> SetupFlags {
        self.granted
    }

    /// The `IORING_FEAT_*` bits the kernel reported.
    pub fn features(&self) -> Features {
        self.features
    }

    /// SQ ring size in entries.
    pub fn sq_entries(&self) -> u32 {
        self.sq.entries
    }

    /// CQ ring size in entries.
    pub fn cq_entries(&self) -> u32 {
        self.cq.entries
    }

    fn sq_head(&self) -> u32 {
        // SAFETY: INVARIANT of SqPtrs. Acquire pairs with the kernel's
        // smp_store_release of sq.head in io_commit_sqring(): once we see the
        // new head, the kernel has finished reading those SQE slots.
        unsafe { (*self.sq.head).load(Ordering::Acquire) }
    }

    fn sq_flags(&self) -> u32 {
        // SAFETY: INVARIANT of SqPtrs; the flags word is read-only for us.
        unsafe { (*self.sq.flags).load(Ordering::Relaxed) }
    }

    /// Free SQ entries (entries not yet consumed by the kernel count as used).
    pub fn sq_space(&self) -> usize {
        (self.sq.entries - self.sq.local_tail.wrapping_sub(self.sq_head())) as usize
    }

    /// SQEs written and not yet consumed by the kernel.
    pub fn sq_pending(&self) -> usize {
        self.sq.local_tail.wrapping_sub(self.sq_head()) as usize
    }

    /// Copies `sqe` into the next SQ slot; it is published at the next submit.
    ///
    /// # Errors
    /// [`SqFull`] when no slot is free.
    ///
    /// # Safety
    /// Every pointer in the SQE (buffer, msghdr, sockaddr, timespec) must stay
    /// valid, and not be otherwise accessed where the kernel writes, until its
    /// CQE is reaped; every fd must stay open until then.
    pub unsafe fn push_raw(&mut self, sqe: &Sqe) -> Result<(), SqFull> {
        // SAFETY: the caller's contract is forwarded unchanged.
        unsafe { self.push_raw_many(core::slice::from_ref(sqe)) }
    }

    /// Copies all of `sqes` into consecutive SQ slots, or none of them (for
    /// linked chains, which must be published together).
    ///
    /// # Errors
    /// [`SqFull`] when fewer than `sqes.len()` slots are free.
    ///
    /// # Safety
    /// As for [`RawRing::push_raw`], for each SQE.
    pub unsafe fn push_raw_many(&mut self, sqes: &[Sqe]) -> Result<(), SqFull> {
        if self.sq_space() < sqes.len() {
            return Err(SqFull);
        }
        for sqe in sqes {
            let idx = (self.sq.local_tail & self.sq.mask) as usize;
            // SAFETY: idx ≤ mask < sq entries, so the slot lies in the SQE map
            // (INVARIANT of SqPtrs); sq_space() > 0 proved (Acquire head) that
            // the kernel no longer reads this slot.
            unsafe { self.sq.sqes.add(idx).write(*sqe) };
            self.sq.local_tail = self.sq.local_tail.wrapping_add(1);
        }
        Ok(())
    }

    /// Publishes the SQEs written so far.
    fn flush_sq(&mut self) {
        // SAFETY: INVARIANT of SqPtrs. Release pairs with the kernel's
        // smp_load_acquire of sq.tail in io_sqring_entries(): the SQE contents
        // written above are visible before the new tail.
        unsafe { (*self.sq.tail).store(self.sq.local_tail, Ordering::Release) };
    }

    /// With SQPOLL: whether the poller thread sleeps and needs IORING_ENTER_SQ_WAKEUP.
    fn sq_needs_wakeup(&self) -> bool {
        // The full fence pairs with the smp_mb__after_atomic() the SQPOLL
        // thread issues after setting IORING_SQ_NEED_WAKEUP (io_uring/sqpoll.c):
        // either it sees our new tail, or we see the flag.
        fence(Ordering::SeqCst);
        self.sq_flags() & sys::IORING_SQ_NEED_WAKEUP != 0
    }

    /// Whether CQEs wait in the kernel (overflow list, deferred task work)
    /// and only an io_uring_enter(GETEVENTS) posts them.
    fn cq_needs_flush(&self) -> bool {
        self.sq_flags() & (sys::IORING_SQ_CQ_OVERFLOW | sys::IORING_SQ_TASKRUN) != 0
    }

    /// CQEs posted and not yet reaped.
    pub fn cq_ready(&self) -> usize {
        // SAFETY: INVARIANT of CqPtrs. Acquire pairs with the kernel's
        // smp_store_release of cq.tail in io_commit_cqring(): CQE contents up
        // to the tail are visible.
        let tail = unsafe { (*self.cq.tail).load(Ordering::Acquire) };
        tail.wrapping_sub(self.cq.local_head) as usize
    }

    /// Reaps one CQE, no syscall.
    pub fn next_cqe(&mut self) -> Option<Cqe> {
        if self.cq_ready() == 0 {
            return None;
        }
        let idx = (self.cq.local_head & self.cq.mask) as usize;
        // SAFETY: idx ≤ mask < cq entries lies in the CQE array (INVARIANT of
        // CqPtrs); cq_ready() > 0 (Acquire tail) proved the kernel wrote it.
        let cqe = unsafe { self.cq.cqes.add(idx).read() };
        self.cq.local_head = self.cq.local_head.wrapping_add(1);
        // SAFETY: INVARIANT of CqPtrs. Release pairs with the kernel's
        // READ_ONCE/acquire of cq.head when it checks for free CQ space: our
        // read of the slot above happens before the kernel may reuse it.
        unsafe { (*self.cq.head).store(self.cq.local_head, Ordering::Release) };
        Some(cqe)
    }

    /// Publishes pending SQEs and waits for `want` CQEs, in one
    /// io_uring_enter(2) (`IORING_ENTER_GETEVENTS`, `min_complete = want`).
    ///
    /// Returns the number of SQEs submitted. Makes no syscall when there is
    /// nothing to submit and `want` CQEs are already posted; with SQPOLL it
    /// enters only to wake the poller (`IORING_SQ_NEED_WAKEUP`) or to wait.
    ///
    /// # Errors
    /// EINTR is `Ok(0)` (call again). EBUSY / EAGAIN mean CQ overflow
    /// back-pressure: reap CQEs, then call again. Others: EBADF, EFAULT,
    /// EINVAL as io_uring_enter(2) lists them.
    pub fn submit_and_wait(&mut self, want: usize) -> io::Result<usize> {
        self.flush_sq();
        let pending = self.sq_pending();
        let want = u32::try_from(want).unwrap_or(u32::MAX);
        let flush = self.cq_needs_flush();
        if want > 0 && pending == 0 && !flush && self.cq_ready() >= want as usize {
            return Ok(0);
        }
        let mut flags = IoringEnterFlags::empty();
        if want > 0 || flush {
            flags |= IoringEnterFlags::GETEVENTS;
        }
        if self.granted.contains(SetupFlags::SQPOLL) {
            if self.sq_needs_wakeup() {
                flags |= IoringEnterFlags::SQ_WAKEUP;
            } else if flags.is_empty() {
                return Ok(pending);
            }
        } else if pending == 0 && flags.is_empty() {
            return Ok(0);
        }
        match self.enter(pending as u32, want, flags) {
            Ok(n) => Ok(n as usize),
            Err(Errno::INTR) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// One io_uring_enter(2): by the registered index when there is one, else by the
    /// fd. EBADF on the index (the slot was unregistered behind our back) drops the
    /// index and enters by the fd: the kernel looks the ring up before it reads any
    /// SQE (io_uring/io_uring.c, io_uring_enter), so nothing was submitted yet.
    fn enter(&mut self, to_submit: u32, want: u32, flags: IoringEnterFlags) -> Result<u32, Errno> {
        if let Some(index) = self.enter_index {
            // SAFETY: with IORING_ENTER_REGISTERED_RING the kernel reads the fd
            // argument as an index into this thread's ring table, never as a file
            // descriptor; rustix passes it through as the raw integer and nothing
            // else sees the BorrowedFd, which dies with this statement. The index
            // (< 16) is never -1. No EXT_ARG flag, so no argument pointer is read;
            // the SQEs it consumes were pushed under push_raw's contract.
            let r = unsafe {
                io_uring_enter(
                    BorrowedFd::borrow_raw(index as RawFd),
                    to_submit,
                    want,
                    flags | IoringEnterFlags::REGISTERED_RING,
                )
            };
            if r != Err(Errno::BADF) {
                return r;
            }
            self.enter_index = None;
        }
        // SAFETY: no EXT_ARG flag, so the kernel reads no argument pointer;
        // the SQEs it consumes were pushed under push_raw's contract.
        unsafe { io_uring_enter(&self.fd, to_submit, want, flags) }
    }

    /// Registers the ring's fd in this thread's registered-ring table
    /// (IORING_REGISTER_RING_FDS, 5.18, offset -1: the kernel picks a free slot) and
    /// enters by that index from then on. Returns the index.
    ///
    /// # Errors
    /// EINVAL before 5.18 (unknown opcode), EBUSY when the thread's 16 slots
    /// (IO_RINGFD_REG_MAX) are taken, ENOMEM; the ring then enters by its fd.
    pub fn register_ring_fd(&mut self) -> io::Result<u32> {
        if let Some(i) = self.enter_index {
            return Ok(i);
        }
        let mut up = sys::io_uring_rsrc_update {
            offset: u32::MAX,
            resv: 0,
            data: self.fd.as_raw_fd() as u64,
        };
        // SAFETY: `up` is one live, exclusively borrowed io_uring_rsrc_update
        // (nr_args 1); the kernel reads the fd from it and writes the chosen slot
        // back into `offset` during the call only.
        let n = unsafe { io_uring_register(&self.fd, IoringRegisterOp::RegisterRingFds, (&raw mut up).cast(), 1)? };
        if n != 1 {
            return Err(io::ErrorKind::Other.into());
        }
        self.enter_index = Some(up.offset);
        Ok(up.offset)
    }

    /// The ring's index in this thread's registered-ring table, if it enters by one.
    pub fn registered_ring(&self) -> Option<u32> {
        self.enter_index
    }

    /// Publishes pending SQEs without waiting (see [`RawRing::submit_and_wait`]).
    ///
    /// # Errors
    /// As [`RawRing::submit_and_wait`].
    pub fn submit(&mut self) -> io::Result<usize> {
        self.submit_and_wait(0)
    }

    /// Registers `iovecs` as fixed buffers 0..n (IORING_REGISTER_BUFFERS, 5.1).
    ///
    /// # Errors
    /// ENOMEM (RLIMIT_MEMLOCK, 5.12+ accounting), EFAULT (unmapped or
    /// file-backed memory), EBUSY (already registered), EINVAL (a buffer over 1 GiB).
    ///
    /// # Safety
    /// Each iovec must describe memory that stays mapped while registered and
    /// that Rust code does not hold references into while READ_FIXED ops write it.
    pub unsafe fn register_buffers(&mut self, iovecs: &[iovec]) -> io::Result<()> {
        let n = u32::try_from(iovecs.len()).map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: `iovecs` is a live slice of n iovecs; the kernel copies the
        // array during the call and pins the memory it describes, which the
        // caller promised stays valid.
        unsafe { io_uring_register(&self.fd, IoringRegisterOp::RegisterBuffers, iovecs.as_ptr().cast(), n)? };
        Ok(())
    }

    /// Registers a sparse table of `n` fixed buffers, every slot empty
    /// (IORING_REGISTER_BUFFERS2 with IORING_RSRC_REGISTER_SPARSE, 5.19): buffers go in
    /// one at a time ([`RawRing::update_buffer`]), each pinned only from then on.
    ///
    /// # Errors
    /// EINVAL before 5.19 (the caller registers whole buffers then); EBUSY (already
    /// registered); ENOMEM.
    pub fn register_buffers_sparse(&mut self, n: u32) -> io::Result<()> {
        let mut reg = rustix::io_uring::io_uring_rsrc_register::default();
        reg.nr = n;
        reg.flags = rustix::io_uring::IoringRsrcFlags::REGISTER_SPARSE;
        let size = core::mem::size_of_val(&reg) as u32;
        // SAFETY: `reg` is a live io_uring_rsrc_register whose size is passed as nr_args;
        // with REGISTER_SPARSE the kernel reads no iovec (data and tags are null).
        unsafe {
            io_uring_register(
                &self.fd,
                IoringRegisterOp::RegisterBuffers2,
                (&raw const reg).cast(),
                size,
            )?
        };
        Ok(())
    }

    /// Puts `iov` in fixed-buffer slot `slot` of a sparse table
    /// (IORING_REGISTER_BUFFERS_UPDATE, 5.13): its pages are pinned from now on.
    ///
    /// # Errors
    /// EINVAL (slot out of the table), EFAULT, ENOMEM (RLIMIT_MEMLOCK).
    ///
    /// # Safety
    /// As [`RawRing::register_buffers`], for the memory `iov` describes.
    pub unsafe fn update_buffer(&mut self, slot: u32, iov: &iovec) -> io::Result<()> {
        let mut up = rustix::io_uring::io_uring_rsrc_update2::default();
        up.offset = slot;
        up.data = rustix::io_uring::io_uring_ptr::new((iov as *const iovec).cast_mut().cast());
        up.nr = 1;
        let size = core::mem::size_of_val(&up) as u32;
        // SAFETY: `up` is a live io_uring_rsrc_update2 (size passed as nr_args) whose data
        // points at one live iovec; the kernel copies both during the call and pins the
        // memory, which the caller promised stays valid.
        unsafe {
            io_uring_register(
                &self.fd,
                IoringRegisterOp::RegisterBuffersUpdate,
                (&raw const up).cast(),
                size,
            )?
        };
        Ok(())
    }

    /// Registers `fds` as the fixed-file table, index = position
    /// (IORING_REGISTER_FILES, 5.1; `-1` = an empty slot, 5.5). The table holds a
    /// reference to each file until it is unregistered or the ring is closed.
    ///
    /// # Errors
    /// EBUSY (a table is registered), EBADF (a bad fd), EMFILE (over
    /// RLIMIT_NOFILE), EINVAL (empty or over 2^20 entries), ENOMEM.
    pub fn register_files(&mut self, fds: &[RawFd]) -> io::Result<()> {
        let n = u32::try_from(fds.len()).map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: `fds` is a live slice of n i32s; the kernel copies it during the
        // call and takes its own reference to each file, so no pointer outlives the call.
        unsafe { io_uring_register(&self.fd, IoringRegisterOp::RegisterFiles, fds.as_ptr().cast(), n)? };
        Ok(())
    }

    /// Drops the fixed-file table (IORING_UNREGISTER_FILES, 5.1).
    ///
    /// # Errors
    /// ENXIO when none is registered.
    pub fn unregister_files(&mut self) -> io::Result<()> {
        // SAFETY: UNREGISTER_FILES takes no argument pointer (null, 0).
        unsafe { io_uring_register(&self.fd, IoringRegisterOp::UnregisterFiles, core::ptr::null(), 0)? };
        Ok(())
    }

    /// Drops all fixed buffers (IORING_UNREGISTER_BUFFERS, 5.1).
    ///
    /// # Errors
    /// ENXIO when none are registered.
    pub fn unregister_buffers(&mut self) -> io::Result<()> {
        // SAFETY: UNREGISTER_BUFFERS takes no argument pointer (null, 0).
        unsafe { io_uring_register(&self.fd, IoringRegisterOp::UnregisterBuffers, core::ptr::null(), 0)? };
        Ok(())
    }

    /// Asks which opcodes the kernel supports (IORING_REGISTER_PROBE, 5.6).
    ///
    /// # Errors
    /// EINVAL before 5.6.
    pub fn probe(&self) -> io::Result<Probe> {
        let mut buf = Box::new(ProbeBuf {
            last_op: 0,
            ops_len: 0,
            resv: 0,
            resv2: [0; 3],
            ops: [ProbeOp {
                op: 0,
                resv: 0,
                flags: 0,
                resv2: 0,
            }; PROBE_OPS],
        });
        // SAFETY: `buf` is a zeroed io_uring_probe with room for PROBE_OPS
        // io_uring_probe_op entries, exactly what nr_args tells the kernel; it
        // is written during the call only.
        unsafe {
            io_uring_register(
                &self.fd,
                IoringRegisterOp::RegisterProbe,
                (&raw mut *buf).cast(),
                PROBE_OPS as u32,
            )?
        };
        let mut supported = [0u64; 4];
        for o in &buf.ops[..usize::from(buf.ops_len)] {
            if u32::from(o.flags) & sys::IO_URING_OP_SUPPORTED != 0 {
                supported[usize::from(o.op / 64)] |= 1 << (o.op % 64);
            }
        }
        Ok(Probe {
            last_op: buf.last_op,
            supported,
        })
    }
}

impl Drop for RawRing {
    /// Gives the thread's registered-ring slot back (IORING_UNREGISTER_RING_FDS),
    /// else it keeps a reference to the ring file, and so the whole ring, until
    /// the thread exits. Runs before the fields drop (unmap, then close).
    fn drop(&mut self) {
        if let Some(index) = self.enter_index.take() {
            let mut up = sys::io_uring_rsrc_update {
                offset: index,
                resv: 0,
                data: 0,
            };
            // SAFETY: `up` is one live io_uring_rsrc_update (nr_args 1) naming the
            // slot this ring registered on this thread (RawRing is not Send); the
            // kernel reads it during the call only.
            let _ =
                unsafe { io_uring_register(&self.fd, IoringRegisterOp::UnregisterRingFds, (&raw mut up).cast(), 1) };
        }
    }
}

impl AsFd for RawRing {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for RawRing {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

const PROBE_OPS: usize = 256;

/// `struct io_uring_probe` with a 256-entry `ops` array.
#[repr(C)]
struct ProbeBuf {
    last_op: u8,
    ops_len: u8,
    resv: u16,
    resv2: [u32; 3],
    ops: [ProbeOp; PROBE_OPS],
}

/// `struct io_uring_probe_op`.
#[repr(C)]
#[derive(Clone, Copy)]
struct ProbeOp {
    op: u8,
    resv: u8,
    flags: u16,
    resv2: u32,
}

/// Which `IORING_OP_*` the running kernel supports (IORING_REGISTER_PROBE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    last_op: u8,
    supported: [u64; 4],
}

impl Probe {
    /// True when `opcode` (an `opcode::*::CODE`) has `IO_URING_OP_SUPPORTED`.
    pub fn supports(&self, opcode: u8) -> bool {
        self.supported[usize::from(opcode / 64)] & (1 << (opcode % 64)) != 0
    }

    /// The highest opcode the kernel knows (`last_op`).
    pub fn last_op(&self) -> u8 {
        self.last_op
    }

    /// A probe that supports exactly `codes` (what the epoll backend runs).
    pub(crate) fn from_codes(codes: &[u8]) -> Probe {
        let mut p = Probe {
            last_op: 0,
            supported: [0; 4],
        };
        for &c in codes {
            p.supported[usize::from(c / 64)] |= 1 << (c % 64);
            p.last_op = p.last_op.max(c);
        }
        p
    }

    /// The first opcode [`crate::Ring`]'s ops need that this kernel lacks, by
    /// name (`"IORING_OP_RECV"`); SPLICE only when `splice`. `None` = all there.
    pub fn lacks_owned_ops(&self, splice: bool) -> Option<&'static str> {
        use crate::opcode::*;
        let need: [(u8, &'static str); 16] = [
            (Nop::CODE, "IORING_OP_NOP"),
            (Read::CODE, "IORING_OP_READ"),
            (Write::CODE, "IORING_OP_WRITE"),
            (ReadFixed::CODE, "IORING_OP_READ_FIXED"),
            (WriteFixed::CODE, "IORING_OP_WRITE_FIXED"),
            (Recv::CODE, "IORING_OP_RECV"),
            (Send::CODE, "IORING_OP_SEND"),
            (RecvMsg::CODE, "IORING_OP_RECVMSG"),
            (Connect::CODE, "IORING_OP_CONNECT"),
            (Close::CODE, "IORING_OP_CLOSE"),
            (Fallocate::CODE, "IORING_OP_FALLOCATE"),
            (Fsync::CODE, "IORING_OP_FSYNC"),
            (Timeout::CODE, "IORING_OP_TIMEOUT"),
            (LinkTimeout::CODE, "IORING_OP_LINK_TIMEOUT"),
            (AsyncCancel::CODE, "IORING_OP_ASYNC_CANCEL"),
            (Splice::CODE, "IORING_OP_SPLICE"),
        ];
        need.iter()
            .filter(|(c, _)| splice || *c != Splice::CODE)
            .find(|(c, _)| !self.supports(*c))
            .map(|(_, n)| *n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opcode;

    #[test]
    fn probe_abi() {
        assert_eq!(size_of::<ProbeBuf>(), size_of::<sys::io_uring_probe>() + PROBE_OPS * 8);
        assert_eq!(size_of::<ProbeOp>(), size_of::<sys::io_uring_probe_op>());
    }

    #[test]
    fn raw_nop_round_trip() {
        let mut ring = RingBuilder::new(4).build_raw().expect("io_uring_setup");
        assert_eq!(ring.sq_entries(), 4);
        assert!(ring.cq_entries() >= 8);
        for i in 0..4u64 {
            // SAFETY: a NOP carries no pointers.
            unsafe { ring.push_raw(&opcode::Nop::new().build().user_data(i)).unwrap() };
        }
        // SAFETY: as above.
        assert_eq!(unsafe { ring.push_raw(&opcode::Nop::new().build()) }, Err(SqFull));
        assert_eq!(ring.submit_and_wait(4).unwrap(), 4);
        let mut seen: Vec<u64> = std::iter::from_fn(|| ring.next_cqe()).map(|c| c.user_data).collect();
        seen.sort_unstable();
        assert_eq!(seen, [0, 1, 2, 3]);
        assert_eq!(ring.sq_space(), 4);
        // Nothing to submit and nothing wanted: no syscall, Ok(0).
        assert_eq!(ring.submit().unwrap(), 0);
    }

    /// Submits `n` NOPs and reaps them: the ring enters and completes.
    fn nops(ring: &mut RawRing, n: u64) {
        for i in 0..n {
            // SAFETY: a NOP carries no pointers.
            unsafe { ring.push_raw(&opcode::Nop::new().build().user_data(i)).unwrap() };
        }
        assert_eq!(ring.submit_and_wait(n as usize).unwrap(), n as usize);
        assert_eq!(std::iter::from_fn(|| ring.next_cqe()).count() as u64, n);
    }

    /// The ring enters by its registered index: once the slot is unregistered behind
    /// its back, the next enter meets EBADF, drops the index and goes on by the fd.
    /// (Were it entering by the fd all along, the index would survive.)
    #[test]
    fn enters_by_the_registered_index() {
        let mut ring = RingBuilder::new(4).build_raw().unwrap();
        let index = ring.registered_ring().expect("IORING_REGISTER_RING_FDS (5.18) refused");
        nops(&mut ring, 2);
        assert_eq!(ring.registered_ring(), Some(index));
        let mut up = sys::io_uring_rsrc_update {
            offset: index,
            resv: 0,
            data: 0,
        };
        // SAFETY: one live io_uring_rsrc_update, read during the call only.
        unsafe { io_uring_register(&ring.fd, IoringRegisterOp::UnregisterRingFds, (&raw mut up).cast(), 1) }.unwrap();
        nops(&mut ring, 3);
        assert_eq!(ring.registered_ring(), None);
        assert_eq!(
            RingBuilder::new(4)
                .register_ring_fd(false)
                .build_raw()
                .unwrap()
                .registered_ring(),
            None
        );
    }

    /// A kernel that refuses the registration (here: EBUSY, the thread's 16 slots
    /// taken; EINVAL before 5.18 goes the same way) leaves a ring that enters by its
    /// fd; a dropped ring gives its slot back.
    #[test]
    fn registration_refused_falls_back_to_the_fd() {
        std::thread::spawn(|| {
            let mut held: Vec<RawRing> = (0..16).map(|_| RingBuilder::new(2).build_raw().unwrap()).collect();
            assert!(held.iter().all(|r| r.registered_ring().is_some()));
            let mut refused = RingBuilder::new(2).build_raw().unwrap();
            assert_eq!(refused.registered_ring(), None);
            assert_eq!(
                refused.register_ring_fd().unwrap_err().raw_os_error(),
                Some(Errno::BUSY.raw_os_error())
            );
            nops(&mut refused, 2);
            let freed = held.pop().unwrap().registered_ring();
            let mut next = RingBuilder::new(2).build_raw().unwrap();
            assert_eq!(next.registered_ring(), freed);
            nops(&mut next, 2);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn probe_reports_read_fixed() {
        let ring = RingBuilder::new(2).build_raw().unwrap();
        let p = ring.probe().unwrap();
        assert!(p.supports(opcode::ReadFixed::CODE));
        assert!(p.supports(opcode::Nop::CODE));
        assert!(!p.supports(255));
        assert!(p.last_op() >= opcode::Splice::CODE);
    }

    #[test]
    fn attempts_drop_in_order() {
        let b = RingBuilder::new(8)
            .sqpoll(10)
            .single_issuer(true)
            .defer_taskrun(true)
            .coop_taskrun(true);
        let a = b.attempts();
        assert!(a[0].contains(SetupFlags::DEFER_TASKRUN | SetupFlags::SQPOLL));
        assert!(!a[1].contains(SetupFlags::DEFER_TASKRUN) && a[1].contains(SetupFlags::SINGLE_ISSUER));
        assert!(!a[2].intersects(SetupFlags::SINGLE_ISSUER | SetupFlags::COOP_TASKRUN));
        assert!(a[2].contains(SetupFlags::SQPOLL));
        assert!(!a[3].contains(SetupFlags::SQPOLL));
        assert!(a.last().unwrap().is_empty());
    }

    #[test]
    fn refused_errors() {
        assert!(is_refused(&io::Error::from_raw_os_error(Errno::NOSYS.raw_os_error())));
        assert!(is_refused(&io::Error::from_raw_os_error(Errno::PERM.raw_os_error())));
        assert!(!is_refused(&io::Error::from_raw_os_error(Errno::NOMEM.raw_os_error())));
    }
}
