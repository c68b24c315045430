//! A seccomp filter that refuses io_uring the way container runtimes do: io_uring_setup,
//! io_uring_enter and io_uring_register (x86_64 syscalls 425, 426, 427) fail with EPERM,
//! everything else is allowed. Docker ≥ 25 and containerd 2.0 (Kubernetes `RuntimeDefault`)
//! ship this in their default profiles.
//!
//! Test-only code (the `seccomp` tests and the `seccomp_exec` example share it).
//! Sources: seccomp(2), prctl(2) PR_SET_NO_NEW_PRIVS / PR_SET_SECCOMP, linux/filter.h,
//! linux/seccomp.h, linux/audit.h.

use std::io;
use std::os::raw::{c_int, c_ulong};

/// `struct sock_filter` (linux/filter.h).
#[repr(C)]
struct SockFilter {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

/// `struct sock_fprog` (linux/filter.h).
#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const SockFilter,
}

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x15;
const BPF_RET_K: u16 = 0x06;
/// `offsetof(struct seccomp_data, nr)` / `arch`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;
const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const EPERM: u32 = 1;
const PR_SET_SECCOMP: c_int = 22;
const PR_SET_NO_NEW_PRIVS: c_int = 38;
const SECCOMP_MODE_FILTER: c_ulong = 2;
/// io_uring_setup, io_uring_enter, io_uring_register on x86_64 (and every other
/// architecture that uses the generic syscall table).
pub const IO_URING_SYSCALLS: [u32; 3] = [425, 426, 427];

unsafe extern "C" {
    fn prctl(option: c_int, ...) -> c_int;
}

const fn stmt(code: u16, k: u32) -> SockFilter {
    SockFilter { code, jt: 0, jf: 0, k }
}

const fn jump(k: u32, jt: u8, jf: u8) -> SockFilter {
    SockFilter {
        code: BPF_JMP_JEQ_K,
        jt,
        jf,
        k,
    }
}

/// The filter: on x86_64, the three io_uring syscalls return EPERM; all else runs.
static PROGRAM: [SockFilter; 8] = [
    stmt(BPF_LD_W_ABS, DATA_ARCH),
    jump(AUDIT_ARCH_X86_64, 0, 4), // another arch: allow (insn 6)
    stmt(BPF_LD_W_ABS, DATA_NR),
    jump(IO_URING_SYSCALLS[0], 3, 0), // -> insn 7
    jump(IO_URING_SYSCALLS[1], 2, 0),
    jump(IO_URING_SYSCALLS[2], 1, 0),
    stmt(BPF_RET_K, SECCOMP_RET_ALLOW),
    stmt(BPF_RET_K, SECCOMP_RET_ERRNO | EPERM),
];

/// Installs the filter on the calling thread (inherited by its children and kept across
/// execve(2)). Async-signal-safe: two prctl(2) calls, no allocation, so it may run in a
/// `pre_exec` hook between fork and exec.
///
/// # Errors
/// The errno of prctl(2) (EINVAL: no seccomp in this kernel; EFAULT).
pub fn deny_io_uring() -> io::Result<()> {
    let prog = SockFprog {
        len: PROGRAM.len() as u16,
        filter: PROGRAM.as_ptr(),
    };
    // SAFETY: prctl(2) with PR_SET_NO_NEW_PRIVS takes four unsigned long arguments and reads
    // no memory.
    if unsafe {
        prctl(
            PR_SET_NO_NEW_PRIVS,
            1 as c_ulong,
            0 as c_ulong,
            0 as c_ulong,
            0 as c_ulong,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `prog` points at `PROGRAM` (a static, valid for the whole call) with its exact
    // length; the kernel copies the program during the call.
    if unsafe { prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &raw const prog) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
