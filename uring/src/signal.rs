//! Signals as a file descriptor: block SIGINT/SIGTERM for the thread and read them from a
//! signalfd, so the event loop sees an interrupt as one more completion (a READ of 128
//! bytes, `struct signalfd_siginfo`) instead of a handler running at an arbitrary point.
//!
//! Source: signalfd(2), sigprocmask(2). Linux 2.6.27+ for `SFD_CLOEXEC`.
//!
//! # Safety
//!
//! `sigprocmask(2)` is given a pointer to a signal set on this function's stack, valid
//! for the call.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::raw::{c_int, c_void};

/// `SIGINT` (2).
pub const SIGINT: i32 = 2;
/// `SIGTERM` (15).
pub const SIGTERM: i32 = 15;

/// Size of `struct signalfd_siginfo` in bytes: one READ of a signalfd returns a multiple.
pub const SIGINFO_SIZE: usize = 128;

/// Big enough for the C library's `sigset_t` (glibc and musl: 128 bytes).
#[repr(C)]
struct SigSet([u64; 16]);

// The C library is linked by std on every Linux target; these two symbols exist in glibc and
// musl with these exact signatures.
unsafe extern "C" {
    fn sigprocmask(how: c_int, set: *const c_void, old: *mut c_void) -> c_int;
    fn signalfd(fd: c_int, mask: *const c_void, flags: c_int) -> c_int;
}

const SIG_BLOCK: c_int = 0;
const SFD_CLOEXEC: c_int = 0o2000000;

/// Blocks `signals` for the calling thread and returns a signalfd that reads them.
///
/// Call it before other threads exist (they inherit the mask). A blocked signal stays
/// pending until read, so a Ctrl-C that arrives before the loop starts is not lost.
///
/// # Errors
/// The errno of sigprocmask(2) or signalfd(2); `InvalidInput` for a signal outside 1..=64.
pub fn block_signals(signals: &[i32]) -> io::Result<OwnedFd> {
    let mut set = SigSet([0; 16]);
    for &s in signals {
        if !(1..=64).contains(&s) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "signal number out of range",
            ));
        }
        set.0[0] |= 1 << (s - 1);
    }
    // SAFETY: `set` is a live, initialised buffer at least as large as the C library's
    // sigset_t, read only during the call; `old` may be null per sigprocmask(2).
    if unsafe { sigprocmask(SIG_BLOCK, (&raw const set).cast(), std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above for `set`; fd -1 asks for a new descriptor, which we own on success.
    let fd = unsafe { signalfd(-1, (&raw const set).cast(), SFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: signalfd returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The signal number in a `struct signalfd_siginfo` read from the fd (`ssi_signo`, the
/// first `u32`).
pub fn signo(siginfo: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(siginfo.get(..4)?.try_into().ok()?))
}

/// Reads one pending signal from `fd` (the signalfd(2) of [`block_signals`], readable) and
/// names it: `"SIGTERM"` for [`SIGTERM`], else `"SIGINT"` (the two ringdl blocks).
pub fn read_name(fd: std::os::fd::BorrowedFd<'_>) -> &'static str {
    let mut info = [0u8; SIGINFO_SIZE];
    match rustix::io::read(fd, &mut info).ok().and_then(|_| signo(&info)) {
        Some(n) if n == SIGTERM as u32 => "SIGTERM",
        _ => "SIGINT",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    unsafe extern "C" {
        fn raise(sig: c_int) -> c_int;
    }

    #[test]
    fn raised_signal_is_read_from_the_fd() {
        // SIGUSR2 (12), blocked and raised in this test's own thread only.
        let fd = block_signals(&[12]).unwrap();
        // SAFETY: raise(3) sends to the calling thread, which blocks SIGUSR2 (checked above),
        // so the signal stays pending instead of running the default action.
        assert_eq!(unsafe { raise(12) }, 0);
        let mut f = std::fs::File::from(fd);
        let mut info = [0u8; SIGINFO_SIZE];
        assert_eq!(f.read(&mut info).unwrap(), SIGINFO_SIZE);
        assert_eq!(signo(&info), Some(12));
    }

    #[test]
    fn bad_signal_number_is_refused() {
        assert_eq!(block_signals(&[0]).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert_eq!(block_signals(&[65]).unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }
}
