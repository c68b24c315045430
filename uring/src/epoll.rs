//! The readiness backend of [`crate::Ring`]: each [`Op`] as its plain syscall,
//! sockets and pipes waited on with epoll(7). For hosts where io_uring is
//! refused (seccomp profiles of Docker ≥ 25 / containerd 2.0,
//! `kernel.io_uring_disabled`).
//!
//! Ops start in push order at the next submit. File ops (pread(2)/pwrite(2) at
//! an offset, O_DIRECT included, fallocate(2), fsync(2)) go to worker threads
//! (`files.rs`, as io_uring's io-wq) and complete when their result is back,
//! so the loop keeps receiving while the device writes; where threads cannot
//! be started they run to the end at submit. Socket and pipe ops are tried with
//! `MSG_DONTWAIT` / `SPLICE_F_NONBLOCK` / `RWF_NOWAIT`; one that would block
//! (EAGAIN, a connect in progress) is parked on its fd and tried again when
//! epoll_wait(2) says the fd is ready. [`Op::Timeout`] and link timeouts are
//! deadlines folded into epoll_wait's timeout.
//!
//! Registrations are level-triggered `EPOLLONESHOT` and re-armed per park
//! with EPOLL_CTL_MOD, falling back to ADD on ENOENT (and MOD on EEXIST): an
//! fd closed behind the ring's back, whose number a new socket or pipe took,
//! is registered anew instead of being waited on forever. [`Op::Close`]
//! removes its fd from the epoll set before close(2).
//!
//! Sources: epoll(7), epoll_ctl(2), recv(2), recvmsg(2), send(2), connect(2)
//! (EINPROGRESS, then SO_ERROR), splice(2), preadv2(2) (RWF_NOWAIT, 4.14).
//!
//! # Safety
//!
//! `recvmsg(2)` is called with a `msghdr` whose iovec and control pointers point into the
//! op's own buffer and control `Vec`, which the parked op owns until its completion;
//! `BorrowedFd::borrow_raw` is used only on descriptors an op was pushed with, which the
//! caller keeps open until that op completes (the [`crate::Ring`] contract).
#![allow(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{BorrowedFd, RawFd};
use std::os::raw::c_int;
use std::time::{Duration, Instant};

use linux_raw_sys::general::iovec;
use linux_raw_sys::net::msghdr;
use rustix::event::epoll::{self, EventData, EventFlags};
use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;

use crate::files::{FileOp, Job, Workers};
use crate::ring::{Completion, Op, PushError};
use crate::{Probe, opcode};

/// Events taken per epoll_wait(2).
const MAX_EVENTS: usize = 64;
/// The epoll key of the file workers' eventfd (fds are the other keys, all below 2^31).
const WORKERS_KEY: u64 = u64::MAX;
/// Immediate re-tries of a SPLICE that gave EAGAIN while poll(2) saw both sides ready.
const SPLICE_RETRIES: usize = 3;

// std links the C library on every Linux target; glibc and musl both have this symbol
// with this signature, and both take the kernel's `struct msghdr` layout on x86_64 and
// aarch64 (musl's int + padding fields read the same bytes on little-endian targets).
unsafe extern "C" {
    fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> isize;
}

/// Where a slot is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    /// Pushed, runs at the next submit.
    Queued,
    /// Started, waits for readiness of its fds and/or a deadline.
    Parked,
    /// A file op on a worker thread: completes when its result is back (no
    /// deadline or cancel ends it, as an io-wq write cannot be taken back).
    Worker,
}

/// What one try of an op came to.
enum Step {
    /// Finished: the CQE `res`.
    Done(i32),
    /// Would block: wait until these fds are ready for these events (none: only a deadline).
    Wait([Option<(RawFd, EventFlags)>; 2]),
}

fn wait1(fd: RawFd, ev: EventFlags) -> Step {
    Step::Wait([Some((fd, ev)), None])
}

fn res(r: Result<usize, Errno>) -> Step {
    Step::Done(match r {
        Ok(n) => i32::try_from(n).unwrap_or(i32::MAX),
        Err(e) => -e.raw_os_error(),
    })
}

struct Slot {
    tag: u64,
    generation: u32,
    state: State,
    op: Option<Op>,
    /// [`Op::RecvMsg`]: the control space; `msg_controllen` / `msg_flags` after it ran.
    control: Vec<u8>,
    control_len: usize,
    msg_flags: i32,
    /// The link timeout asked for at push; its deadline once the op started.
    link: Option<Duration>,
    link_deadline: Option<Instant>,
    /// [`Op::Timeout`]: when it fires.
    timer: Option<Instant>,
    /// The op has been tried once (connect in progress; O_NONBLOCK set for a SPLICE).
    started: bool,
    /// The fd cannot be waited on (epoll_ctl EPERM: a regular file): the next try blocks.
    blocking: bool,
    /// [`Op::Cancel`]: the target's slot and generation, found at push.
    cancel_target: Option<(u32, u32)>,
    /// The fds this op is parked on.
    parked_on: [Option<RawFd>; 2],
}

impl Slot {
    fn new() -> Slot {
        Slot {
            tag: 0,
            generation: 0,
            state: State::Free,
            op: None,
            control: Vec::new(),
            control_len: 0,
            msg_flags: 0,
            link: None,
            link_deadline: None,
            timer: None,
            started: false,
            blocking: false,
            cancel_target: None,
            parked_on: [None; 2],
        }
    }

    /// CQE budget this slot holds: the op, plus its link timeout.
    fn units(&self) -> usize {
        1 + usize::from(self.link.is_some())
    }
}

/// What the ring knows of one fd in the epoll set.
#[derive(Default)]
struct FdState {
    /// An ADD succeeded and no Close removed it (a hint: MOD may still say ENOENT).
    added: bool,
    /// Parked slots, in the order they parked.
    parked: Vec<u32>,
}

/// The epoll backend: a slot table like io_uring's, an epoll fd, and a
/// table of the fds that ops wait on.
pub(crate) struct EpollRing {
    ep: std::os::fd::OwnedFd,
    slots: Box<[Slot]>,
    free: Vec<u32>,
    /// Slots pushed, not yet run (push order).
    queued: VecDeque<u32>,
    /// SQ entries the queued ops take (an op with a link timeout takes 2).
    queued_units: usize,
    sq_entries: usize,
    /// Completions not handed out yet, with the CQE budget each still holds.
    ready: VecDeque<(Completion, usize)>,
    /// Ops pushed whose completion has not been handed out (as io_uring: a
    /// posted, unreaped CQE still counts).
    in_flight: usize,
    /// CQE budget held by ops not handed out yet (an op with a link timeout holds 2).
    units_outstanding: usize,
    fds: HashMap<RawFd, FdState>,
    events: Vec<epoll::Event>,
    /// File-op threads, started at the first file op; None after they could not be.
    workers: Option<Workers>,
    workers_refused: bool,
}

impl Drop for EpollRing {
    fn drop(&mut self) {
        // Joins the threads (every job finished) before the slots free the blocks
        // their jobs point into (`files.rs`, # Safety).
        self.workers = None;
    }
}

impl core::fmt::Debug for EpollRing {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("EpollRing")
            .field("capacity", &self.slots.len())
            .field("in_flight", &self.in_flight)
            .field("queued", &self.queued.len())
            .field("fds", &self.fds.len())
            .finish_non_exhaustive()
    }
}

/// Borrows a raw fd an op names.
fn fd(raw: RawFd) -> BorrowedFd<'static> {
    // SAFETY: the caller of `Ring::push` keeps every fd an op names open until
    // its completion is reaped (documented on `Ring::push`), and the borrow
    // lives only for the one syscall made while the op is in flight.
    unsafe { BorrowedFd::borrow_raw(raw) }
}

/// Whether `raw` is ready for `want` now (poll(2), zero timeout); errors and hang-ups count as ready.
fn ready_now(raw: RawFd, want: PollFlags) -> bool {
    let mut p = [PollFd::from_borrowed_fd(fd(raw), want)];
    match rustix::event::poll(&mut p, Some(&rustix::time::Timespec::default())) {
        Ok(_) => !p[0].revents().is_empty(),
        Err(_) => true,
    }
}

impl EpollRing {
    /// An epoll instance and a slot table of `cq_entries` (default: twice
    /// `entries` rounded up to a power of two, as io_uring's CLAMP sizing).
    pub(crate) fn new(entries: u32, cq_entries: Option<u32>) -> io::Result<EpollRing> {
        let sq = entries.clamp(1, 32768).next_power_of_two();
        let cq = match cq_entries {
            Some(c) if c < sq => return Err(io::ErrorKind::InvalidInput.into()),
            Some(c) => c.min(65536).next_power_of_two(),
            None => 2 * sq,
        } as usize;
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        Ok(EpollRing {
            ep,
            slots: (0..cq).map(|_| Slot::new()).collect(),
            free: (0..cq as u32).rev().collect(),
            queued: VecDeque::with_capacity(sq as usize),
            queued_units: 0,
            sq_entries: sq as usize,
            ready: VecDeque::with_capacity(cq),
            in_flight: 0,
            units_outstanding: 0,
            fds: HashMap::new(),
            events: Vec::with_capacity(MAX_EVENTS),
            workers: None,
            workers_refused: false,
        })
    }

    /// The opcodes this backend runs.
    pub(crate) fn probe() -> Probe {
        use opcode::*;
        Probe::from_codes(&[
            Nop::CODE,
            Read::CODE,
            Write::CODE,
            ReadFixed::CODE,
            WriteFixed::CODE,
            Recv::CODE,
            Send::CODE,
            RecvMsg::CODE,
            Connect::CODE,
            Close::CODE,
            Fallocate::CODE,
            Fsync::CODE,
            Timeout::CODE,
            LinkTimeout::CODE,
            AsyncCancel::CODE,
            Splice::CODE,
        ])
    }

    pub(crate) fn sq_entries(&self) -> usize {
        self.sq_entries
    }

    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// As [`crate::Ring::push_with_timeout`] (`timeout` Some) / [`crate::Ring::push`].
    pub(crate) fn push_inner(&mut self, op: Op, tag: u64, timeout: Option<Duration>) -> Result<(), PushError> {
        if !op.ranges_ok() {
            return Err(PushError::BadRange { op, tag });
        }
        let need = 1 + usize::from(timeout.is_some());
        if self.free.is_empty()
            || self.queued_units + need > self.sq_entries
            || self.units_outstanding + need > self.slots.len()
        {
            return Err(PushError::Full { op, tag });
        }
        // As io_uring: the target is the first op in flight with that tag, found now.
        let cancel_target = match &op {
            Op::Cancel { target_tag } => self
                .slots
                .iter()
                .enumerate()
                .find(|(_, s)| s.state != State::Free && s.tag == *target_tag)
                .map(|(i, s)| (i as u32, s.generation)),
            _ => None,
        };
        let idx = self.free.pop().expect("free slot checked above");
        let slot = &mut self.slots[idx as usize];
        slot.generation = slot.generation.wrapping_add(1);
        slot.tag = tag;
        slot.state = State::Queued;
        slot.control_len = 0;
        slot.msg_flags = 0;
        if let Op::RecvMsg { control_len, .. } = &op {
            slot.control = vec![0; *control_len];
            slot.control_len = *control_len;
        }
        slot.op = Some(op);
        slot.link = timeout;
        slot.link_deadline = None;
        slot.timer = None;
        slot.started = false;
        slot.blocking = false;
        slot.cancel_target = cancel_target;
        slot.parked_on = [None; 2];
        self.queued.push_back(idx);
        self.queued_units += need;
        self.units_outstanding += need;
        self.in_flight += 1;
        Ok(())
    }

    /// Runs the queued ops, then waits in epoll_wait(2) until `want`
    /// completions are ready (capped at those still owed) or a deadline passes.
    pub(crate) fn submit_and_wait(&mut self, want: usize) -> io::Result<usize> {
        let submitted = self.queued_units;
        self.queued_units = 0;
        while let Some(idx) = self.queued.pop_front() {
            self.start(idx);
        }
        let target = want.min(self.in_flight);
        loop {
            let now = Instant::now();
            let next = self.expire(now);
            if self.ready.len() >= target {
                return Ok(submitted);
            }
            let timeout = next
                .map(|d| rustix::time::Timespec::try_from(d.saturating_duration_since(now)))
                .transpose()
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
            self.events.clear();
            match epoll::wait(&self.ep, spare(&mut self.events), timeout.as_ref()) {
                Ok(_) => {}
                Err(Errno::INTR) => return Ok(submitted),
                Err(e) => return Err(e.into()),
            }
            let events = core::mem::take(&mut self.events);
            for ev in &events {
                if ev.data.u64() == WORKERS_KEY {
                    self.reap_workers();
                } else {
                    self.wake(ev.data.u64() as RawFd);
                }
            }
            self.events = events;
        }
    }

    pub(crate) fn next_completion(&mut self) -> Option<Completion> {
        let (c, units) = self.ready.pop_front()?;
        self.in_flight -= 1;
        self.units_outstanding -= units;
        Some(c)
    }

    /// Starts slot `idx` at submit.
    fn start(&mut self, idx: u32) {
        let now = Instant::now();
        let slot = &mut self.slots[idx as usize];
        slot.link_deadline = slot.link.map(|d| now + d);
        slot.state = State::Parked;
        match slot.op.take() {
            Some(Op::Timeout { after }) => {
                slot.timer = Some(now + after);
                slot.op = Some(Op::Timeout { after });
            }
            Some(Op::Cancel { target_tag }) => {
                slot.op = Some(Op::Cancel { target_tag });
                let target = slot.cancel_target;
                let r = match target {
                    Some((t, generation)) if self.cancel(t, generation) => 0,
                    _ => -Errno::NOENT.raw_os_error(),
                };
                self.finish(idx, r);
            }
            Some(Op::Close { fd: owned }) => {
                use std::os::fd::AsRawFd;
                let raw = owned.as_raw_fd();
                // Out of the epoll set before close(2): the number may come back as a new fd.
                let _ = epoll::delete(&self.ep, &owned);
                if let Some(st) = self.fds.remove(&raw) {
                    // Ops still waiting on this fd would wait on whatever file takes the number
                    // next: they end here (io_uring would keep them on the closed file).
                    for p in st.parked {
                        self.unpark(p);
                        self.finish(p, -Errno::CANCELED.raw_os_error());
                    }
                }
                drop(owned);
                self.finish(idx, 0);
            }
            op => {
                slot.op = op;
                if !self.hand_to_worker(idx) {
                    self.try_op(idx);
                }
            }
        }
    }

    /// Hands slot `idx`'s op to a file worker if it is a file op (a read or write at an
    /// offset, fallocate, fsync) and the workers run; returns whether it did.
    fn hand_to_worker(&mut self, idx: u32) -> bool {
        let slot = &mut self.slots[idx as usize];
        let op = match slot.op.as_mut() {
            Some(Op::Read { fd, buf, range, offset }) if *offset != u64::MAX => {
                let b = &mut buf[range.clone()];
                FileOp::Read {
                    fd: *fd,
                    ptr: b.as_mut_ptr(),
                    len: b.len(),
                    offset: *offset,
                }
            }
            Some(Op::Write { fd, buf, range, offset }) if *offset != u64::MAX => {
                let b = &buf[range.clone()];
                FileOp::Write {
                    fd: *fd,
                    ptr: b.as_ptr(),
                    len: b.len(),
                    offset: *offset,
                }
            }
            Some(Op::Fsync { fd, datasync }) => FileOp::Fsync {
                fd: *fd,
                datasync: *datasync,
            },
            Some(Op::Fallocate { fd, mode, offset, len }) => FileOp::Fallocate {
                fd: *fd,
                mode: *mode as u32,
                offset: *offset,
                len: *len,
            },
            _ => return false,
        };
        let job = Job {
            slot: idx,
            generation: slot.generation,
            op,
        };
        if self.workers.is_none() && !self.workers_refused {
            match Workers::new().and_then(|w| {
                let key = EventData::new_u64(WORKERS_KEY);
                epoll::add(&self.ep, w.wake_fd(), key, EventFlags::IN)?;
                Ok(w)
            }) {
                Ok(w) => self.workers = Some(w),
                Err(_) => self.workers_refused = true,
            }
        }
        let Some(w) = &self.workers else { return false };
        if w.submit(job).is_err() {
            return false;
        }
        self.slots[idx as usize].state = State::Worker;
        true
    }

    /// Completes the file ops whose results are back.
    fn reap_workers(&mut self) {
        let Some(w) = &self.workers else { return };
        for (idx, generation, res) in w.results() {
            let s = &self.slots[idx as usize];
            if s.state == State::Worker && s.generation == generation {
                self.finish(idx, res);
            }
        }
    }

    /// Tries slot `idx`'s op: finishes it or parks it on its fds.
    fn try_op(&mut self, idx: u32) {
        let step = attempt(&mut self.slots[idx as usize]);
        let waits = match step {
            Step::Done(r) => return self.finish(idx, r),
            Step::Wait(waits) => waits,
        };
        for (raw, ev) in waits.into_iter().flatten() {
            match self.park(idx, raw, ev) {
                Ok(()) => {}
                // Not pollable (a regular file behind a stream read/write): such an fd
                // does not block for long, so the next try is the plain blocking syscall.
                Err(Errno::PERM) if !self.slots[idx as usize].blocking => {
                    self.unpark(idx);
                    self.slots[idx as usize].blocking = true;
                    return self.try_op(idx);
                }
                Err(e) => {
                    self.unpark(idx);
                    return self.finish(idx, -e.raw_os_error());
                }
            }
        }
        // Parked: a readiness event, a deadline or a cancel ends it.
    }

    /// Parks `idx` on `raw` for `ev` and (re-)arms the fd's one-shot registration.
    fn park(&mut self, idx: u32, raw: RawFd, ev: EventFlags) -> Result<(), Errno> {
        let st = self.fds.entry(raw).or_default();
        if !st.parked.contains(&idx) {
            st.parked.push(idx);
        }
        let slot_fds = &mut self.slots[idx as usize].parked_on;
        if !slot_fds.contains(&Some(raw)) {
            let free = slot_fds.iter_mut().find(|f| f.is_none()).expect("two fds at most");
            *free = Some(raw);
        }
        // The registration asks for what every op parked on the fd waits for.
        let mut interest = ev;
        for &p in &self.fds[&raw].parked {
            interest |= self.slots[p as usize].interest_on(raw).unwrap_or(EventFlags::empty());
        }
        let flags = interest | EventFlags::ONESHOT | EventFlags::RDHUP;
        let data = EventData::new_u64(raw as u64);
        let st = self.fds.get_mut(&raw).expect("inserted above");
        let r = if st.added {
            match epoll::modify(&self.ep, fd(raw), data, flags) {
                Err(Errno::NOENT) => epoll::add(&self.ep, fd(raw), data, flags),
                r => r,
            }
        } else {
            match epoll::add(&self.ep, fd(raw), data, flags) {
                Err(Errno::EXIST) => epoll::modify(&self.ep, fd(raw), data, flags),
                r => r,
            }
        };
        if r.is_ok() {
            st.added = true;
        }
        r
    }

    /// Takes `idx` off every fd it is parked on.
    fn unpark(&mut self, idx: u32) {
        let fds = core::mem::take(&mut self.slots[idx as usize].parked_on);
        for raw in fds.into_iter().flatten() {
            if let Some(st) = self.fds.get_mut(&raw) {
                st.parked.retain(|&p| p != idx);
            }
        }
    }

    /// `raw` is ready (or in error): tries again every op parked on it.
    fn wake(&mut self, raw: RawFd) {
        let Some(st) = self.fds.get_mut(&raw) else { return };
        let parked = core::mem::take(&mut st.parked);
        for idx in parked {
            if self.slots[idx as usize].state != State::Parked {
                continue;
            }
            self.unpark(idx);
            self.try_op(idx);
        }
    }

    /// Completes what is due at `now`; returns the earliest deadline left.
    fn expire(&mut self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            if s.state != State::Parked {
                continue;
            }
            if let Some(t) = s.timer
                && t <= now
            {
                self.finish(i as u32, -Errno::TIME.raw_os_error());
                continue;
            }
            if let Some(t) = s.link_deadline
                && t <= now
            {
                self.unpark(i as u32);
                self.finish(i as u32, -Errno::CANCELED.raw_os_error());
                continue;
            }
            for t in [s.timer, s.link_deadline].into_iter().flatten() {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        next
    }

    /// ASYNC_CANCEL of slot `t` if it is still the op found at push and has
    /// not completed: it completes with -ECANCELED first. Returns whether it did.
    /// Ends every op that waits (readiness, a deadline) or has not started, with
    /// `-ECANCELED`; file ops on a worker complete on their own.
    pub(crate) fn cancel_all(&mut self) {
        self.cancel_where(&|_| true);
    }

    /// [`EpollRing::cancel_all`] for the ops whose tag `which` accepts.
    pub(crate) fn cancel_where(&mut self, which: &dyn Fn(u64) -> bool) {
        let queued = core::mem::take(&mut self.queued);
        for idx in queued {
            if !which(self.slots[idx as usize].tag) {
                self.queued.push_back(idx);
                continue;
            }
            self.queued_units -= self.slots[idx as usize].units();
            if matches!(self.slots[idx as usize].op, Some(Op::Close { .. })) {
                // A close runs: its fd leaves the epoll set and the fd table as it should.
                self.start(idx);
            } else {
                self.finish(idx, -Errno::CANCELED.raw_os_error());
            }
        }
        for idx in 0..self.slots.len() as u32 {
            if self.slots[idx as usize].state == State::Parked && which(self.slots[idx as usize].tag) {
                self.unpark(idx);
                self.finish(idx, -Errno::CANCELED.raw_os_error());
            }
        }
    }

    fn cancel(&mut self, t: u32, generation: u32) -> bool {
        let s = &self.slots[t as usize];
        if s.generation != generation || s.state != State::Parked {
            return false;
        }
        self.unpark(t);
        self.finish(t, -Errno::CANCELED.raw_os_error());
        true
    }

    /// Completes slot `idx` with `result`, giving back what the op carried.
    fn finish(&mut self, idx: u32, result: i32) {
        let slot = &mut self.slots[idx as usize];
        debug_assert!(slot.parked_on.iter().all(Option::is_none), "finished while parked");
        let mut c = Completion {
            tag: slot.tag,
            result,
            flags: 0,
            buf: None,
            data: None,
            control: None,
            msg_flags: 0,
        };
        match slot.op.take() {
            Some(Op::Read { buf, .. } | Op::Write { buf, .. } | Op::Recv { buf, .. }) => c.buf = Some(buf),
            Some(Op::Send { data, .. }) => c.data = Some(data),
            Some(Op::RecvMsg { buf, .. }) => {
                let mut control = core::mem::take(&mut slot.control);
                control.truncate(slot.control_len);
                c.buf = Some(buf);
                c.control = Some(control);
                c.msg_flags = slot.msg_flags;
            }
            _ => {}
        }
        let units = slot.units();
        slot.state = State::Free;
        slot.link = None;
        slot.link_deadline = None;
        slot.timer = None;
        self.free.push(idx);
        self.ready.push_back((c, units));
    }
}

/// The spare capacity of `v` as epoll_wait's event buffer.
fn spare(v: &mut Vec<epoll::Event>) -> rustix::buffer::SpareCapacity<'_, epoll::Event> {
    rustix::buffer::spare_capacity(v)
}

impl Slot {
    /// What this slot waits for on `raw`, if it is parked there.
    fn interest_on(&self, raw: RawFd) -> Option<EventFlags> {
        if !self.parked_on.contains(&Some(raw)) {
            return None;
        }
        Some(match self.op.as_ref()? {
            Op::Read { .. } | Op::Recv { .. } | Op::RecvMsg { .. } => EventFlags::IN,
            Op::Write { .. } | Op::Send { .. } | Op::Connect { .. } => EventFlags::OUT,
            Op::Splice { fd_in, .. } if *fd_in == raw => EventFlags::IN,
            Op::Splice { .. } => EventFlags::OUT,
            _ => EventFlags::empty(),
        })
    }
}

/// One try of a started op's syscall.
fn attempt(slot: &mut Slot) -> Step {
    let blocking = slot.blocking;
    let started = core::mem::replace(&mut slot.started, true);
    let op = slot.op.as_mut().expect("a started slot holds its op");
    match op {
        Op::Nop => Step::Done(0),
        Op::Read {
            fd: raw,
            buf,
            range,
            offset,
        } => {
            let b = &mut buf[range.clone()];
            if *offset != u64::MAX || blocking {
                return res(if *offset == u64::MAX {
                    rustix::io::read(fd(*raw), b)
                } else {
                    rustix::io::pread(fd(*raw), b, *offset)
                });
            }
            // A stream (signalfd, pipe, terminal): never block the loop.
            let r = rustix::io::preadv2(
                fd(*raw),
                &mut [io::IoSliceMut::new(b)],
                u64::MAX,
                rustix::io::ReadWriteFlags::NOWAIT,
            );
            match r {
                Err(Errno::AGAIN) => wait1(*raw, EventFlags::IN),
                Err(Errno::OPNOTSUPP) if ready_now(*raw, PollFlags::IN) => res(rustix::io::read(fd(*raw), b)),
                Err(Errno::OPNOTSUPP) => wait1(*raw, EventFlags::IN),
                r => res(r),
            }
        }
        Op::Write {
            fd: raw,
            buf,
            range,
            offset,
        } => {
            let b = &buf[range.clone()];
            if *offset != u64::MAX || blocking {
                return res(if *offset == u64::MAX {
                    rustix::io::write(fd(*raw), b)
                } else {
                    rustix::io::pwrite(fd(*raw), b, *offset)
                });
            }
            let r = rustix::io::pwritev2(
                fd(*raw),
                &[io::IoSlice::new(b)],
                u64::MAX,
                rustix::io::ReadWriteFlags::NOWAIT,
            );
            match r {
                Err(Errno::AGAIN) => wait1(*raw, EventFlags::OUT),
                Err(Errno::OPNOTSUPP) if ready_now(*raw, PollFlags::OUT) => res(rustix::io::write(fd(*raw), b)),
                Err(Errno::OPNOTSUPP) => wait1(*raw, EventFlags::OUT),
                r => res(r),
            }
        }
        Op::Recv {
            fd: raw,
            buf,
            range,
            flags,
        } => {
            let f = rustix::net::RecvFlags::from_bits_retain(*flags) | rustix::net::RecvFlags::DONTWAIT;
            match rustix::net::recv(fd(*raw), &mut buf[range.clone()], f) {
                Err(Errno::AGAIN) => wait1(*raw, EventFlags::IN),
                r => res(r.map(|(n, _)| n)),
            }
        }
        Op::Send {
            fd: raw,
            data,
            range,
            flags,
        } => {
            let f = rustix::net::SendFlags::from_bits_retain(*flags) | rustix::net::SendFlags::DONTWAIT;
            match rustix::net::send(fd(*raw), &data[range.clone()], f) {
                Err(Errno::AGAIN) => wait1(*raw, EventFlags::OUT),
                r => res(r),
            }
        }
        Op::RecvMsg {
            fd: raw,
            buf,
            range,
            control_len,
            flags,
        } => {
            let b = &mut buf[range.clone()];
            let mut iov = iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len() as _,
            };
            let mut msg = msghdr {
                msg_name: core::ptr::null_mut(),
                msg_namelen: 0,
                msg_iov: (&raw mut iov).cast(),
                msg_iovlen: 1,
                msg_control: if *control_len == 0 {
                    core::ptr::null_mut()
                } else {
                    slot.control.as_mut_ptr().cast()
                },
                msg_controllen: *control_len as _,
                msg_flags: 0,
            };
            let f = (*flags | rustix::net::RecvFlags::DONTWAIT.bits()) as c_int;
            // SAFETY: `msg` points at `iov` (a live local naming `b`, a block this op owns)
            // and at `slot.control` (`control_len` bytes, owned by the slot); all outlive the
            // call, and `fd` is open by the contract of `Ring::push`.
            let n = unsafe { recvmsg(*raw, &raw mut msg, f) };
            if n < 0 {
                let e = Errno::from_io_error(&io::Error::last_os_error()).unwrap_or(Errno::IO);
                if e == Errno::AGAIN {
                    return wait1(*raw, EventFlags::IN);
                }
                return Step::Done(-e.raw_os_error());
            }
            slot.control_len = (msg.msg_controllen as usize).min(*control_len);
            slot.msg_flags = msg.msg_flags as i32;
            Step::Done(i32::try_from(n).unwrap_or(i32::MAX))
        }
        Op::Connect { fd: raw, addr } => {
            if !started {
                if let Err(e) = rustix::io::ioctl_fionbio(fd(*raw), true) {
                    return Step::Done(-e.raw_os_error());
                }
                return match rustix::net::connect(fd(*raw), &*addr) {
                    Ok(()) => Step::Done(0),
                    Err(Errno::INPROGRESS | Errno::AGAIN) => wait1(*raw, EventFlags::OUT),
                    Err(e) => Step::Done(-e.raw_os_error()),
                };
            }
            match rustix::net::sockopt::socket_error(fd(*raw)) {
                Ok(Ok(())) if ready_now(*raw, PollFlags::OUT) => Step::Done(0),
                Ok(Ok(())) => wait1(*raw, EventFlags::OUT),
                Ok(Err(e)) | Err(e) => Step::Done(-e.raw_os_error()),
            }
        }
        Op::Fallocate {
            fd: raw,
            mode,
            offset,
            len,
        } => {
            let mode = rustix::fs::FallocateFlags::from_bits_retain(*mode as u32);
            res(rustix::fs::fallocate(fd(*raw), mode, *offset, *len).map(|()| 0))
        }
        Op::Fsync { fd: raw, datasync } => res(if *datasync {
            rustix::fs::fdatasync(fd(*raw))
        } else {
            rustix::fs::fsync(fd(*raw))
        }
        .map(|()| 0)),
        Op::Splice {
            fd_in,
            off_in,
            fd_out,
            off_out,
            len,
            flags,
        } => {
            // The sides without an offset are sockets or pipes: never block on them.
            let sides = [
                off_in.is_none().then_some((*fd_in, PollFlags::IN, EventFlags::IN)),
                off_out.is_none().then_some((*fd_out, PollFlags::OUT, EventFlags::OUT)),
            ];
            if !started {
                for (raw, _, _) in sides.iter().flatten() {
                    let _ = rustix::io::ioctl_fionbio(fd(*raw), true);
                }
            }
            let f = rustix::pipe::SpliceFlags::from_bits_retain(*flags) | rustix::pipe::SpliceFlags::NONBLOCK;
            for _ in 0..SPLICE_RETRIES {
                let (mut oi, mut oo) = (*off_in, *off_out);
                match rustix::pipe::splice(fd(*fd_in), oi.as_mut(), fd(*fd_out), oo.as_mut(), *len as usize, f) {
                    Err(Errno::AGAIN) => {}
                    r => return res(r),
                }
                // Which side would block? Wait for that one (both, when poll says both).
                let mut wait = [None, None];
                for (w, side) in wait.iter_mut().zip(sides) {
                    if let Some((raw, pf, ev)) = side
                        && !ready_now(raw, pf)
                    {
                        *w = Some((raw, ev));
                    }
                }
                if wait.iter().any(Option::is_some) {
                    return Step::Wait(wait);
                }
            }
            Step::Wait(sides.map(|s| s.map(|(raw, _, ev)| (raw, ev))))
        }
        Op::Timeout { .. } | Op::Cancel { .. } | Op::Close { .. } => {
            unreachable!("run by EpollRing::start")
        }
    }
}
