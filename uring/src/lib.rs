//! ringdl's own io_uring: setup, mmapped SQ/CQ rings, one builder per
//! `IORING_OP_*`, registered buffers, probe, and a safe owned-buffer layer.
//!
//! All of ringdl's unsafe code lives here. Layers, bottom up:
//!
//! - [`Sqe`] / [`Cqe`] and flag sets: the kernel ABI (`include/uapi/linux/io_uring.h`).
//! - [`opcode`]: one builder per op, `build()` → [`Sqe`].
//! - [`RawRing`]: io_uring_setup(2), mmaps, `unsafe push_raw`, one
//!   io_uring_enter(2) per submit-and-wait (by the ring fd's registered index where
//!   the kernel allows, 5.18), CQEs reaped without a syscall.
//! - [`RingBuilder`]: setup flags with clean fallback, [`Ring::granted`].
//! - [`BufPool`] / [`Buf`] / [`Ring`] / [`Op`]: ops own their memory until
//!   their [`Completion`] gives it back. This is what the binary uses. A
//!   [`Ring`] runs on io_uring or, where io_uring is refused, on epoll(7)
//!   with each op as its plain syscall ([`Backend`]); the API is the same.
//!
//! Sources: io_uring_setup(2), io_uring_enter(2), io_uring_register(2) and
//! the kernel's `io_uring/` directory; minimum kernel versions are on each item.
#![deny(missing_docs, clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]
// Unsafe code only in the modules that say `#![allow(unsafe_code)]`, each with a
// `# Safety` note naming its invariant: buf, epoll, mmap, raw, ring, signal.
#![deny(unsafe_code)]

mod buf;
mod epoll;
mod files;
mod mmap;
pub mod opcode;
mod raw;
mod ring;
pub mod signal;
mod sys;

pub use buf::{Buf, BufPool};
pub use raw::{Backend, Probe, RawRing, RingBuilder, SqFull, falls_back, iovec, is_refused};
pub use ring::{Completion, Op, PushError, Ring};
pub use sys::{Cqe, Features, SetupFlags, Sqe, SqeFlags, Timespec};
