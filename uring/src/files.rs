//! File operations of the epoll backend on worker threads, the way io_uring's io-wq runs
//! them: pread(2)/pwrite(2) at an offset (O_DIRECT included), fallocate(2), fsync(2) and
//! fdatasync(2). Without them an O_DIRECT write stalls the one event-loop thread for the
//! device's whole latency, and disk and network stop overlapping.
//!
//! [`Workers`] owns [`WORKERS`] threads (64 KiB stacks) that take [`Job`]s from one queue,
//! run the syscall and send back `(slot, generation, CQE res)`; each result also adds 1 to
//! an eventfd(2) the epoll set watches, so `epoll_wait` wakes for it. Dropping `Workers`
//! closes the queue and joins the threads: every job has finished before it returns.
//!
//! # Safety
//!
//! A [`Job`] carries a raw pointer and length into the block of a [`crate::Buf`] that the
//! submitting slot keeps (in its `Op`) until the job's result has been taken on the loop's
//! thread; the loop's thread does not touch that block meanwhile (the `Ring::push`
//! contract: an op's buffer belongs to the ring until its completion), and the epoll ring
//! drops its `Workers` — joining every thread — before its slots. So the memory a worker
//! reads or writes is mapped, and nothing else accesses it, for the whole syscall. The fd
//! stays open by the same contract.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rustix::io::Errno;

/// Worker threads: two keep two O_DIRECT writes in flight (the device queues both) while a
/// third op waits; more add threads, not throughput, on the devices measured.
pub(crate) const WORKERS: usize = 2;
/// Stack of each worker: the syscalls need little.
const STACK: usize = 64 * 1024;

/// One file syscall. The pointers name `len` bytes of a block the submitting slot owns.
#[derive(Debug)]
pub(crate) enum FileOp {
    /// pread(2) into `ptr[..len]` at `offset`.
    Read {
        fd: RawFd,
        ptr: *mut u8,
        len: usize,
        offset: u64,
    },
    /// pwrite(2) of `ptr[..len]` at `offset`.
    Write {
        fd: RawFd,
        ptr: *const u8,
        len: usize,
        offset: u64,
    },
    /// fsync(2), or fdatasync(2) when `datasync`.
    Fsync { fd: RawFd, datasync: bool },
    /// fallocate(2).
    Fallocate {
        fd: RawFd,
        mode: u32,
        offset: u64,
        len: u64,
    },
}

/// A [`FileOp`] for slot `slot` of generation `generation`.
#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) slot: u32,
    pub(crate) generation: u32,
    pub(crate) op: FileOp,
}

// SAFETY: the pointers in `FileOp` name a block no other thread accesses until the job's
// result is back on the loop's thread (module note); the rest is plain data.
unsafe impl Send for Job {}

/// The worker threads, their queue, and the eventfd that says results are waiting.
#[derive(Debug)]
pub(crate) struct Workers {
    jobs: Option<Sender<Job>>,
    done: Receiver<(u32, u32, i32)>,
    wake: Arc<OwnedFd>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Starts the threads.
    ///
    /// # Errors
    /// eventfd(2) or clone(2) refused (EMFILE, EAGAIN, a seccomp filter).
    pub(crate) fn new() -> io::Result<Workers> {
        let wake = Arc::new(rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )?);
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let (results, done) = mpsc::channel();
        let mut w = Workers {
            jobs: Some(jobs),
            done,
            wake: Arc::clone(&wake),
            threads: Vec::with_capacity(WORKERS),
        };
        for n in 0..WORKERS {
            let (queue, results, wake) = (Arc::clone(&queue), results.clone(), Arc::clone(&wake));
            let t = std::thread::Builder::new()
                .name(format!("ringdl-file-{n}"))
                .stack_size(STACK)
                .spawn(move || work(&queue, &results, &wake))?;
            w.threads.push(t);
        }
        Ok(w)
    }

    /// The eventfd to watch for reading: readable while results wait.
    pub(crate) fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// Queues `job`; returns it when every worker is gone (they never exit early, so only
    /// after a panic in one).
    pub(crate) fn submit(&self, job: Job) -> Result<(), Job> {
        match &self.jobs {
            Some(tx) => tx.send(job).map_err(|e| e.0),
            None => Err(job),
        }
    }

    /// Every result that is back: `(slot, generation, CQE res)`.
    pub(crate) fn results(&self) -> Vec<(u32, u32, i32)> {
        let mut count = [0u8; 8];
        // EAGAIN: nothing was added since the last read; the channel says the rest.
        let _ = rustix::io::read(&*self.wake, &mut count);
        self.done.try_iter().collect()
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        // No more jobs: each thread finishes what is queued, then its recv fails.
        self.jobs = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A worker: runs jobs until the queue closes.
fn work(queue: &Mutex<Receiver<Job>>, results: &Sender<(u32, u32, i32)>, wake: &OwnedFd) {
    loop {
        let job = match queue.lock() {
            Ok(q) => q.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        let res = run(&job.op);
        if results.send((job.slot, job.generation, res)).is_err() {
            return;
        }
        // The counter cannot overflow here: the loop reads it down at each wake.
        let _ = rustix::io::write(wake, &1u64.to_ne_bytes());
    }
}

/// The syscall, as a CQE `res` (bytes, or -errno).
fn run(op: &FileOp) -> i32 {
    let r: Result<usize, Errno> = match *op {
        FileOp::Read { fd, ptr, len, offset } => {
            // SAFETY: `ptr[..len]` is the owning slot's block, untouched by anyone else
            // until this job's result is taken (module note).
            let b = unsafe { core::slice::from_raw_parts_mut(ptr, len) };
            rustix::io::pread(file(fd), b, offset)
        }
        FileOp::Write { fd, ptr, len, offset } => {
            // SAFETY: as for Read; the block is only read here.
            let b = unsafe { core::slice::from_raw_parts(ptr, len) };
            rustix::io::pwrite(file(fd), b, offset)
        }
        FileOp::Fsync { fd, datasync: true } => rustix::fs::fdatasync(file(fd)).map(|()| 0),
        FileOp::Fsync { fd, datasync: false } => rustix::fs::fsync(file(fd)).map(|()| 0),
        FileOp::Fallocate { fd, mode, offset, len } => rustix::fs::fallocate(
            file(fd),
            rustix::fs::FallocateFlags::from_bits_retain(mode),
            offset,
            len,
        )
        .map(|()| 0),
    };
    match r {
        Ok(n) => i32::try_from(n).unwrap_or(i32::MAX),
        Err(e) => -e.raw_os_error(),
    }
}

/// Borrows the fd a job names.
fn file(raw: RawFd) -> BorrowedFd<'static> {
    // SAFETY: the caller of `Ring::push` keeps the fd open until the op's completion is
    // reaped, which is after this job's result is taken (module note).
    unsafe { BorrowedFd::borrow_raw(raw) }
}
