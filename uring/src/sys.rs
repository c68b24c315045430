//! Kernel ABI: the 64-byte SQE, the 16-byte CQE, and typed flag sets.
//!
//! Layouts follow `struct io_uring_sqe` / `struct io_uring_cqe` in
//! `include/uapi/linux/io_uring.h`; the unit tests compare every offset with
//! linux-raw-sys's bindgen of the same header.

use linux_raw_sys::io_uring as sys;

/// A submission queue entry, `struct io_uring_sqe` (64 bytes).
///
/// Build one with a [`crate::opcode`] builder, then adjust it with
/// [`Sqe::user_data`] and [`Sqe::flags`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sqe {
    /// `opcode`: one of the `IORING_OP_*` numbers.
    pub(crate) opcode: u8,
    /// `flags`: `IOSQE_*` bits.
    pub(crate) flags: u8,
    /// `ioprio` (also `send_flags`/`recv_flags`/`accept_flags`).
    pub(crate) ioprio: u16,
    /// `fd`: the target file descriptor (or fixed-file index).
    pub(crate) fd: i32,
    /// `off` / `addr2`.
    pub(crate) off: u64,
    /// `addr` / `splice_off_in`.
    pub(crate) addr: u64,
    /// `len`.
    pub(crate) len: u32,
    /// The per-opcode flags union (`rw_flags`, `msg_flags`, `timeout_flags`, ...).
    pub(crate) op_flags: u32,
    /// `user_data`: copied verbatim into the CQE.
    pub(crate) user_data: u64,
    /// `buf_index` / `buf_group`.
    pub(crate) buf_index: u16,
    /// `personality`.
    pub(crate) personality: u16,
    /// `splice_fd_in` / `file_index` / `addr_len`.
    pub(crate) splice_fd_in: i32,
    /// `addr3`.
    pub(crate) addr3: u64,
    /// `__pad2[1]`.
    pub(crate) pad2: u64,
}

impl Sqe {
    /// Sets `user_data`, the 64-bit value the kernel copies into this entry's CQE.
    #[must_use]
    pub const fn user_data(mut self, user_data: u64) -> Sqe {
        self.user_data = user_data;
        self
    }

    /// Sets the `IOSQE_*` flags (replacing any set before).
    #[must_use]
    pub const fn flags(mut self, flags: SqeFlags) -> Sqe {
        self.flags = flags.bits();
        self
    }

    /// The opcode (`IORING_OP_*`) of this entry.
    pub const fn opcode(&self) -> u8 {
        self.opcode
    }

    /// The `user_data` this entry carries.
    pub const fn get_user_data(&self) -> u64 {
        self.user_data
    }

    /// The `IOSQE_*` flags this entry carries.
    pub const fn get_flags(&self) -> SqeFlags {
        SqeFlags::from_bits_retain(self.flags)
    }
}

/// A completion queue entry, `struct io_uring_cqe` (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// `user_data` of the SQE this completes.
    pub user_data: u64,
    /// `res`: the operation's result, bytes or `-errno`.
    pub res: i32,
    /// `flags`: `IORING_CQE_F_*` bits.
    pub flags: u32,
}

/// `struct __kernel_timespec`: seconds and nanoseconds, as TIMEOUT and
/// LINK_TIMEOUT read them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timespec {
    /// `tv_sec`: whole seconds.
    pub tv_sec: i64,
    /// `tv_nsec`: nanoseconds, `0..1_000_000_000`.
    pub tv_nsec: i64,
}

impl From<std::time::Duration> for Timespec {
    fn from(d: std::time::Duration) -> Timespec {
        Timespec {
            tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(d.subsec_nanos()),
        }
    }
}

/// Defines a typed flag set over an integer, rustix style: constants drop the
/// C prefix and carry the C name in their doc.
macro_rules! flag_set {
    (
        $(#[$meta:meta])*
        pub struct $name:ident: $ty:ty {
            $( $(#[$fmeta:meta])* const $flag:ident = $value:expr; )*
        }
    ) => {
        $(#[$meta])*
        #[repr(transparent)]
        #[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
        pub struct $name($ty);

        impl $name {
            $( $(#[$fmeta])* pub const $flag: $name = $name($value as $ty); )*

            /// The empty set.
            pub const fn empty() -> $name {
                $name(0)
            }
            /// The raw bits.
            pub const fn bits(self) -> $ty {
                self.0
            }
            /// Wraps raw bits, keeping bits this type has no name for.
            pub const fn from_bits_retain(bits: $ty) -> $name {
                $name(bits)
            }
            /// True when no bit is set.
            pub const fn is_empty(self) -> bool {
                self.0 == 0
            }
            /// True when every bit of `other` is set in `self`.
            pub const fn contains(self, other: $name) -> bool {
                self.0 & other.0 == other.0
            }
            /// True when any bit of `other` is set in `self`.
            pub const fn intersects(self, other: $name) -> bool {
                self.0 & other.0 != 0
            }
            /// `self` with the bits of `other` set.
            #[must_use]
            pub const fn union(self, other: $name) -> $name {
                $name(self.0 | other.0)
            }
            /// `self` with the bits of `other` cleared.
            #[must_use]
            pub const fn difference(self, other: $name) -> $name {
                $name(self.0 & !other.0)
            }
            /// Sets (`on`) or clears the bits of `other`.
            pub fn set(&mut self, other: $name, on: bool) {
                if on { self.0 |= other.0 } else { self.0 &= !other.0 }
            }
        }

        impl core::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, rhs: $name) -> $name {
                $name(self.0 | rhs.0)
            }
        }
        impl core::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: $name) {
                self.0 |= rhs.0;
            }
        }
        impl core::ops::BitAnd for $name {
            type Output = $name;
            fn bitand(self, rhs: $name) -> $name {
                $name(self.0 & rhs.0)
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                let mut rest = self.0;
                let mut first = true;
                f.write_str(concat!(stringify!($name), "("))?;
                $(
                    let v = $value as $ty;
                    if v != 0 && rest & v == v {
                        if !first { f.write_str(" | ")?; }
                        f.write_str(stringify!($flag))?;
                        rest &= !v;
                        first = false;
                    }
                )*
                if rest != 0 {
                    if !first { f.write_str(" | ")?; }
                    write!(f, "{:#x}", rest)?;
                }
                f.write_str(")")
            }
        }
    };
}

flag_set! {
    /// `IORING_SETUP_*` flags passed to io_uring_setup(2) in `io_uring_params.flags`.
    pub struct SetupFlags: u32 {
        /// `IORING_SETUP_IOPOLL` (5.1): busy-poll completions (O_DIRECT block devices only).
        const IOPOLL = sys::IORING_SETUP_IOPOLL;
        /// `IORING_SETUP_SQPOLL` (5.1; unprivileged since 5.13): a kernel thread polls the SQ.
        const SQPOLL = sys::IORING_SETUP_SQPOLL;
        /// `IORING_SETUP_SQ_AFF` (5.1): pin the SQPOLL thread to `sq_thread_cpu`.
        const SQ_AFF = sys::IORING_SETUP_SQ_AFF;
        /// `IORING_SETUP_CQSIZE` (5.5): `cq_entries` is given explicitly.
        const CQSIZE = sys::IORING_SETUP_CQSIZE;
        /// `IORING_SETUP_CLAMP` (5.6): clamp entries to the kernel maximum instead of EINVAL.
        const CLAMP = sys::IORING_SETUP_CLAMP;
        /// `IORING_SETUP_ATTACH_WQ` (5.6): share the io-wq of `wq_fd`.
        const ATTACH_WQ = sys::IORING_SETUP_ATTACH_WQ;
        /// `IORING_SETUP_R_DISABLED` (5.10): start disabled.
        const R_DISABLED = sys::IORING_SETUP_R_DISABLED;
        /// `IORING_SETUP_SUBMIT_ALL` (5.18): keep submitting after an SQE fails.
        const SUBMIT_ALL = sys::IORING_SETUP_SUBMIT_ALL;
        /// `IORING_SETUP_COOP_TASKRUN` (5.19): no IPI to run task work.
        const COOP_TASKRUN = sys::IORING_SETUP_COOP_TASKRUN;
        /// `IORING_SETUP_TASKRUN_FLAG` (5.19): flag `IORING_SQ_TASKRUN` when task work waits.
        const TASKRUN_FLAG = sys::IORING_SETUP_TASKRUN_FLAG;
        /// `IORING_SETUP_SQE128` (5.19): 128-byte SQEs.
        const SQE128 = sys::IORING_SETUP_SQE128;
        /// `IORING_SETUP_CQE32` (5.19): 32-byte CQEs.
        const CQE32 = sys::IORING_SETUP_CQE32;
        /// `IORING_SETUP_SINGLE_ISSUER` (6.0): only one task submits.
        const SINGLE_ISSUER = sys::IORING_SETUP_SINGLE_ISSUER;
        /// `IORING_SETUP_DEFER_TASKRUN` (6.1): run completion work only inside io_uring_enter(GETEVENTS).
        const DEFER_TASKRUN = sys::IORING_SETUP_DEFER_TASKRUN;
        /// `IORING_SETUP_NO_MMAP` (6.5): application-provided ring memory.
        const NO_MMAP = sys::IORING_SETUP_NO_MMAP;
        /// `IORING_SETUP_REGISTERED_FD_ONLY` (6.5).
        const REGISTERED_FD_ONLY = sys::IORING_SETUP_REGISTERED_FD_ONLY;
        /// `IORING_SETUP_NO_SQARRAY` (6.6): no SQ index array.
        const NO_SQARRAY = sys::IORING_SETUP_NO_SQARRAY;
    }
}

flag_set! {
    /// `IOSQE_*` flags of one SQE (`io_uring_sqe.flags`), io_uring_enter(2).
    pub struct SqeFlags: u8 {
        /// `IOSQE_FIXED_FILE` (5.1): `fd` is an index into the registered files.
        const FIXED_FILE = 1 << sys::io_uring_sqe_flags_bit::IOSQE_FIXED_FILE_BIT as u8;
        /// `IOSQE_IO_DRAIN` (5.2): start only after every earlier SQE completed.
        const IO_DRAIN = 1 << sys::io_uring_sqe_flags_bit::IOSQE_IO_DRAIN_BIT as u8;
        /// `IOSQE_IO_LINK` (5.3): the next SQE starts only after this one succeeds.
        const IO_LINK = 1 << sys::io_uring_sqe_flags_bit::IOSQE_IO_LINK_BIT as u8;
        /// `IOSQE_IO_HARDLINK` (5.5): like IO_LINK, but the chain survives failure.
        const IO_HARDLINK = 1 << sys::io_uring_sqe_flags_bit::IOSQE_IO_HARDLINK_BIT as u8;
        /// `IOSQE_ASYNC` (5.6): go straight to io-wq instead of trying non-blocking first.
        const ASYNC = 1 << sys::io_uring_sqe_flags_bit::IOSQE_ASYNC_BIT as u8;
        /// `IOSQE_BUFFER_SELECT` (5.7): pick a provided buffer from `buf_group`.
        const BUFFER_SELECT = 1 << sys::io_uring_sqe_flags_bit::IOSQE_BUFFER_SELECT_BIT as u8;
        /// `IOSQE_CQE_SKIP_SUCCESS` (5.17): no CQE when the op succeeds.
        const CQE_SKIP_SUCCESS = 1 << sys::io_uring_sqe_flags_bit::IOSQE_CQE_SKIP_SUCCESS_BIT as u8;
    }
}

flag_set! {
    /// `IORING_FEAT_*` bits the kernel reports in `io_uring_params.features` (io_uring_setup(2)).
    pub struct Features: u32 {
        /// `IORING_FEAT_SINGLE_MMAP` (5.4): SQ and CQ rings share one mmap.
        const SINGLE_MMAP = sys::IORING_FEAT_SINGLE_MMAP;
        /// `IORING_FEAT_NODROP` (5.5): CQEs are never dropped on overflow (EBUSY back-pressure instead).
        const NODROP = sys::IORING_FEAT_NODROP;
        /// `IORING_FEAT_SUBMIT_STABLE` (5.5): SQE-referenced data is consumed at submit.
        const SUBMIT_STABLE = sys::IORING_FEAT_SUBMIT_STABLE;
        /// `IORING_FEAT_RW_CUR_POS` (5.6): offset -1 means the current file position.
        const RW_CUR_POS = sys::IORING_FEAT_RW_CUR_POS;
        /// `IORING_FEAT_FAST_POLL` (5.7): internal poll for sockets.
        const FAST_POLL = sys::IORING_FEAT_FAST_POLL;
        /// `IORING_FEAT_SQPOLL_NONFIXED` (5.11): SQPOLL works with plain fds.
        const SQPOLL_NONFIXED = sys::IORING_FEAT_SQPOLL_NONFIXED;
        /// `IORING_FEAT_EXT_ARG` (5.11): io_uring_enter takes `io_uring_getevents_arg`.
        const EXT_ARG = sys::IORING_FEAT_EXT_ARG;
        /// `IORING_FEAT_NATIVE_WORKERS` (5.12).
        const NATIVE_WORKERS = sys::IORING_FEAT_NATIVE_WORKERS;
        /// `IORING_FEAT_CQE_SKIP` (5.17).
        const CQE_SKIP = sys::IORING_FEAT_CQE_SKIP;
        /// `IORING_FEAT_LINKED_FILE` (5.17).
        const LINKED_FILE = sys::IORING_FEAT_LINKED_FILE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};
    use linux_raw_sys::io_uring::{io_uring_cqe, io_uring_sqe};

    #[test]
    fn sqe_abi_matches_kernel_header() {
        assert_eq!(size_of::<Sqe>(), 64);
        assert_eq!(size_of::<io_uring_sqe>(), 64);
        assert_eq!(offset_of!(Sqe, opcode), offset_of!(io_uring_sqe, opcode));
        assert_eq!(offset_of!(Sqe, flags), offset_of!(io_uring_sqe, flags));
        assert_eq!(offset_of!(Sqe, ioprio), offset_of!(io_uring_sqe, ioprio));
        assert_eq!(offset_of!(Sqe, fd), offset_of!(io_uring_sqe, fd));
        assert_eq!(offset_of!(Sqe, off), offset_of!(io_uring_sqe, __bindgen_anon_1));
        assert_eq!(offset_of!(Sqe, addr), offset_of!(io_uring_sqe, __bindgen_anon_2));
        assert_eq!(offset_of!(Sqe, len), offset_of!(io_uring_sqe, len));
        assert_eq!(offset_of!(Sqe, op_flags), offset_of!(io_uring_sqe, __bindgen_anon_3));
        assert_eq!(offset_of!(Sqe, user_data), offset_of!(io_uring_sqe, user_data));
        assert_eq!(offset_of!(Sqe, buf_index), offset_of!(io_uring_sqe, __bindgen_anon_4));
        assert_eq!(offset_of!(Sqe, personality), offset_of!(io_uring_sqe, personality));
        assert_eq!(
            offset_of!(Sqe, splice_fd_in),
            offset_of!(io_uring_sqe, __bindgen_anon_5)
        );
        assert_eq!(offset_of!(Sqe, addr3), offset_of!(io_uring_sqe, __bindgen_anon_6));
        // The literal offsets from include/uapi/linux/io_uring.h.
        let lit = [
            offset_of!(Sqe, opcode),
            offset_of!(Sqe, flags),
            offset_of!(Sqe, ioprio),
            offset_of!(Sqe, fd),
            offset_of!(Sqe, off),
            offset_of!(Sqe, addr),
            offset_of!(Sqe, len),
            offset_of!(Sqe, op_flags),
            offset_of!(Sqe, user_data),
            offset_of!(Sqe, buf_index),
            offset_of!(Sqe, personality),
            offset_of!(Sqe, splice_fd_in),
            offset_of!(Sqe, addr3),
        ];
        assert_eq!(lit, [0, 1, 2, 4, 8, 16, 24, 28, 32, 40, 42, 44, 48]);
    }

    #[test]
    fn cqe_abi_matches_kernel_header() {
        assert_eq!(size_of::<Cqe>(), 16);
        assert_eq!(size_of::<io_uring_cqe>(), 16);
        assert_eq!(offset_of!(Cqe, user_data), offset_of!(io_uring_cqe, user_data));
        assert_eq!(offset_of!(Cqe, res), offset_of!(io_uring_cqe, res));
        assert_eq!(offset_of!(Cqe, flags), offset_of!(io_uring_cqe, flags));
        assert_eq!(
            [offset_of!(Cqe, user_data), offset_of!(Cqe, res), offset_of!(Cqe, flags)],
            [0, 8, 12]
        );
    }

    #[test]
    fn timespec_abi() {
        use linux_raw_sys::general::__kernel_timespec;
        assert_eq!(size_of::<Timespec>(), size_of::<__kernel_timespec>());
        assert_eq!(offset_of!(Timespec, tv_nsec), offset_of!(__kernel_timespec, tv_nsec));
        let t = Timespec::from(std::time::Duration::from_millis(1500));
        assert_eq!((t.tv_sec, t.tv_nsec), (1, 500_000_000));
    }

    #[test]
    fn flag_sets() {
        assert_eq!(SqeFlags::IO_LINK.bits(), 4);
        assert_eq!(SqeFlags::FIXED_FILE.bits(), 1);
        assert_eq!(SqeFlags::CQE_SKIP_SUCCESS.bits(), 64);
        let s = SetupFlags::SQPOLL | SetupFlags::SINGLE_ISSUER;
        assert!(s.contains(SetupFlags::SQPOLL));
        assert!(!s.contains(SetupFlags::DEFER_TASKRUN));
        assert_eq!(format!("{s:?}"), "SetupFlags(SQPOLL | SINGLE_ISSUER)");
        assert_eq!(
            format!("{:?}", SetupFlags::from_bits_retain(1 << 30)),
            "SetupFlags(0x40000000)"
        );
        assert_eq!(s.difference(SetupFlags::SQPOLL), SetupFlags::SINGLE_ISSUER);
    }
}
