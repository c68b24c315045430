//! The I/O backend (`--io`): io_uring, or epoll where the kernel refuses io_uring.
//!
//! Code above this point does not know which one runs: both are a [`uring::Ring`].

use rustix::io::Errno;
use uring::{Backend, Ring, RingBuilder};

use crate::config::IoChoice;
use crate::err;
use crate::error::Result;

/// The ring the download runs on, and how the summary names it
/// (`io_uring`, `epoll (io_uring refused: EPERM)`).
pub struct Chosen {
    /// The ring.
    pub ring: Ring,
    /// The backend and, for an automatic fallback, why.
    pub label: String,
}

/// Builds the ring for `choice` with `entries` SQ entries; `splice` says whether the
/// engine needs IORING_OP_SPLICE. `auto` tries io_uring and falls back to epoll when setup
/// fails with ENOSYS / EPERM / EINVAL / ENOMEM ([`uring::falls_back`]), when the kernel has
/// no probe (before 5.6), or when the probe lacks an op the engine uses; `-v` says so.
///
/// # Errors
/// [`crate::error::Kind::LocalIo`] (exit 7): `--io uring` refused or lacking an op, or a
/// ring that cannot be built at all.
pub fn build_ring(choice: IoChoice, entries: u32, splice: bool, verbose: u8) -> Result<Chosen> {
    let uring = RingBuilder::new(entries)
        .single_issuer(true)
        .defer_taskrun(true)
        .coop_taskrun(true);
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
        });
    }
    let why = match uring.build() {
        Ok(ring) => match ring.probe() {
            Ok(p) => match p.lacks_owned_ops(splice) {
                None => {
                    return Ok(Chosen {
                        ring,
                        label: "io_uring".to_owned(),
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
        eprintln!("ringdl: {why}{hint}: using epoll");
    }
    Ok(Chosen {
        ring: epoll()?,
        label: format!("epoll ({why})"),
    })
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
        let c = build_ring(IoChoice::Epoll, 8, true, 0).unwrap();
        assert_eq!(c.ring.backend(), Backend::Epoll);
        assert_eq!(c.label, "epoll");
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
