//! The I/O backend (`--io`): io_uring, or epoll where the kernel refuses io_uring.
//!
//! Code above this point does not know which one runs: both are a [`uring::Ring`].

use rustix::io::Errno;
use uring::{Backend, Features, Ring, RingBuilder, SetupFlags};

use crate::config::IoChoice;
use crate::err;
use crate::error::Result;

/// `sq_thread_idle` of `--sqpoll`, milliseconds: how long the poller spins without work
/// before it sleeps (and the next submit needs `IORING_ENTER_SQ_WAKEUP`). Longer than
/// the gaps between RECV completions of a running download, short enough that a stalled
/// one does not keep a core busy.
pub const SQPOLL_IDLE_MS: u32 = 50;

/// The ring the download runs on, and how the summary names it
/// (`io_uring`, `io_uring (SQPOLL)`, `epoll (io_uring refused: EPERM)`).
pub struct Chosen {
    /// The ring.
    pub ring: Ring,
    /// The backend and, for an automatic fallback, why.
    pub label: String,
    /// With `--sqpoll`: the poller thread's id (`iou-sqp-PID` in /proc/self/task).
    pub sqpoll_tid: Option<u32>,
}

/// Builds the ring for `choice` with `entries` SQ entries; `splice` says whether the
/// engine needs IORING_OP_SPLICE. `auto` tries io_uring and falls back to epoll when setup
/// fails with ENOSYS / EPERM / EINVAL / ENOMEM ([`uring::falls_back`]), when the kernel has
/// no probe (before 5.6), or when the probe lacks an op the engine uses; `-v` says so.
///
/// # Errors
/// [`crate::error::Kind::LocalIo`] (exit 7): `--io uring` refused or lacking an op, or a
/// ring that cannot be built at all.
///
/// `sqpoll` asks for `IORING_SETUP_SQPOLL` (idle [`SQPOLL_IDLE_MS`]) instead of
/// SINGLE_ISSUER + DEFER_TASKRUN + COOP_TASKRUN, which the kernel refuses beside it
/// (io_uring/io_uring.c: the IPI-saving flags mean nothing with a poller). The label says
/// `(SQPOLL)` only when the poller thread is seen in /proc/self/task; a kernel that
/// refuses it (or lacks IORING_FEAT_SQPOLL_NONFIXED, 5.11) runs without, labelled so.
pub fn build_ring(choice: IoChoice, entries: u32, splice: bool, sqpoll: bool, verbose: u8) -> Result<Chosen> {
    let uring = if sqpoll {
        RingBuilder::new(entries).sqpoll(SQPOLL_IDLE_MS)
    } else {
        RingBuilder::new(entries)
            .single_issuer(true)
            .defer_taskrun(true)
            .coop_taskrun(true)
    };
    let epoll = || -> Result<Ring> {
        RingBuilder::new(entries)
            .backend(Backend::Epoll)
            .build()
            .map_err(|e| err!(LocalIo, "epoll setup: {e}"))
    };
    if choice == IoChoice::Epoll {
        return Ok(Chosen {
            ring: epoll()?,
            label: "epoll".to_owned(),
            sqpoll_tid: None,
        });
    }
    let built = uring.build().and_then(|ring| {
        // SQPOLL with plain (unregistered) fds needs 5.11; before, build without.
        if ring.granted().contains(SetupFlags::SQPOLL) && !ring.features().contains(Features::SQPOLL_NONFIXED) {
            drop(ring);
            return RingBuilder::new(entries).build();
        }
        Ok(ring)
    });
    let why = match built {
        Ok(ring) => match ring.probe() {
            Ok(p) => match p.lacks_owned_ops(splice) {
                None => {
                    let sqpoll_tid = if ring.granted().contains(SetupFlags::SQPOLL) {
                        sqpoll_thread()
                    } else {
                        None
                    };
                    let label = match (sqpoll, sqpoll_tid) {
                        (false, _) => "io_uring".to_owned(),
                        (true, Some(_)) => "io_uring (SQPOLL)".to_owned(),
                        (true, None) => "io_uring (SQPOLL refused)".to_owned(),
                    };
                    if verbose > 0 && sqpoll {
                        match sqpoll_tid {
                            Some(t) => eprintln!("ringdl: io_uring SQPOLL thread {t}, idle {SQPOLL_IDLE_MS} ms"),
                            None => eprintln!("ringdl: --sqpoll: the kernel gave no SQPOLL thread; running without"),
                        }
                    }
                    return Ok(Chosen {
                        ring,
                        label,
                        sqpoll_tid,
                    });
                }
                Some(op) => format!("io_uring lacks {op}"),
            },
            Err(e) => format!("io_uring probe refused: {}", errno_name(&e)),
        },
        Err(e) if choice == IoChoice::Auto && uring::falls_back(&e).is_some() => {
            format!("io_uring refused: {}", errno_name(&e))
        }
        Err(e) => return Err(setup_error(&e)),
    };
    if choice == IoChoice::Uring {
        return Err(err!(LocalIo, "--io uring: {why}"));
    }
    let hint = if why.ends_with("ENOMEM") {
        " (RLIMIT_MEMLOCK too low for the rings on this kernel? ulimit -l)"
    } else {
        ""
    };
    if verbose > 0 {
        eprintln!(
            "ringdl: {why}{hint}: using epoll{}",
            if sqpoll { " (--sqpoll ignored)" } else { "" }
        );
    }
    Ok(Chosen {
        ring: epoll()?,
        label: format!("epoll ({why})"),
        sqpoll_tid: None,
    })
}

/// The id of this process's io_uring SQPOLL thread: the task named `iou-sqp-PID` in
/// /proc/self/task (an io thread of the process since 5.12). The thread names itself when
/// it first runs, so on a busy machine this waits for that, up to half a second. `None`
/// when there is none.
pub fn sqpoll_thread() -> Option<u32> {
    let t0 = std::time::Instant::now();
    loop {
        if let Some(t) = sqpoll_thread_now() {
            return Some(t);
        }
        if t0.elapsed() > std::time::Duration::from_millis(500) {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// [`sqpoll_thread`] without waiting.
fn sqpoll_thread_now() -> Option<u32> {
    std::fs::read_dir("/proc/self/task").ok()?.flatten().find_map(|e| {
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        comm.starts_with("iou-sqp-")
            .then(|| e.file_name().to_str()?.parse().ok())
            .flatten()
    })
}

/// CPU time (user + system) thread `tid` of this process has used so far:
/// /proc/self/task/TID/stat fields 14 and 15 (proc(5)), in USER_HZ = 100 ticks per
/// second (fixed by the Linux ABI). `None` once the thread is gone.
pub fn thread_cpu(tid: u32) -> Option<std::time::Duration> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // Field 2 (comm) is in parentheses and may hold spaces: count after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14, stime 15.
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(std::time::Duration::from_millis(ticks * 10))
}

/// `EPERM`, `ENOMEM`, ...: the errno's name, else the error's text.
fn errno_name(e: &std::io::Error) -> String {
    let Some(n) = Errno::from_io_error(e) else {
        return e.to_string();
    };
    let name = match n {
        Errno::PERM => "EPERM",
        Errno::NOSYS => "ENOSYS",
        Errno::INVAL => "EINVAL",
        Errno::NOMEM => "ENOMEM",
        Errno::MFILE => "EMFILE",
        Errno::NFILE => "ENFILE",
        _ => return e.to_string(),
    };
    name.to_owned()
}

/// The message for an io_uring setup that failed (forced, or an errno auto does not fall
/// back on), with the likely cause.
fn setup_error(e: &std::io::Error) -> crate::error::Error {
    let hint = match Errno::from_io_error(e) {
        Some(Errno::NOMEM) => " (RLIMIT_MEMLOCK too low for the rings on this kernel? ulimit -l; or --io epoll)",
        Some(Errno::PERM | Errno::NOSYS) => {
            " (io_uring disabled by kernel.io_uring_disabled or seccomp? --io epoll runs without it)"
        }
        _ => "",
    };
    err!(LocalIo, "io_uring setup: {e}{hint}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoll_is_built_when_asked() {
        let c = build_ring(IoChoice::Epoll, 8, true, false, 0).unwrap();
        assert_eq!(c.ring.backend(), Backend::Epoll);
        assert_eq!(c.label, "epoll");
    }

    /// The ring gets a poller thread with `--sqpoll`, none without (io_uring is allowed on
    /// the test machines; where it is refused, auto falls back and there is nothing to see).
    #[test]
    fn sqpoll_starts_a_poller_thread() {
        let c = build_ring(IoChoice::Auto, 8, false, true, 0).unwrap();
        if c.ring.backend() == Backend::Uring {
            assert!(c.ring.granted().contains(SetupFlags::SQPOLL), "{:?}", c.ring.granted());
            let tid = c.sqpoll_tid.expect("no iou-sqp thread");
            assert_eq!(c.label, "io_uring (SQPOLL)");
            assert!(thread_cpu(tid).is_some());
            drop(c);
        }
        let plain = build_ring(IoChoice::Auto, 8, false, false, 0).unwrap();
        assert!(plain.sqpoll_tid.is_none() && !plain.ring.granted().contains(SetupFlags::SQPOLL));
    }

    #[test]
    fn setup_errors_name_their_cause() {
        let m = setup_error(&Errno::NOMEM.into()).msg;
        assert!(m.contains("RLIMIT_MEMLOCK"), "{m}");
        let m = setup_error(&Errno::PERM.into()).msg;
        assert!(m.contains("seccomp"), "{m}");
        assert_eq!(errno_name(&Errno::PERM.into()), "EPERM");
    }
}
