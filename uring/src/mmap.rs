//! An owned memory mapping: `NonNull + len`, unmapped in `Drop`.
//!
//! # Safety
//!
//! The mapping is created by mmap(2) with the length it records and unmapped once in
//! `Drop`; pointers handed out are `ptr + offset` with `offset` checked below that length.
#![allow(unsafe_code)]

use core::ffi::c_void;
use core::ptr::NonNull;
use std::io;
use std::os::fd::AsFd;

use rustix::mm::{MapFlags, ProtFlags};

/// One mapping made by mmap(2), unmapped by munmap(2) when dropped.
///
/// INVARIANT: `ptr..ptr+len` is a live mapping created by this value and
/// unmapped only by its `Drop`.
#[derive(Debug)]
pub(crate) struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mmap {
    /// Maps `len` bytes of the io_uring fd at `offset` (`IORING_OFF_*`),
    /// shared and populated, as io_uring_setup(2) describes.
    pub(crate) fn ring(fd: impl AsFd, len: usize, offset: u64) -> io::Result<Mmap> {
        // SAFETY: a null hint lets the kernel pick a fresh range, so no existing
        // Rust object is overlapped; `len` and `offset` come from the kernel's
        // io_uring_params, which bound the region the fd exposes.
        let p = unsafe {
            rustix::mm::mmap(
                core::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED | MapFlags::POPULATE,
                fd,
                offset,
            )?
        };
        Ok(Mmap::from_raw(p, len))
    }

    /// Maps `len` bytes of private anonymous memory (zeroed, not populated).
    pub(crate) fn anonymous(len: usize) -> io::Result<Mmap> {
        // SAFETY: a null hint lets the kernel pick a fresh range, so no existing
        // Rust object is overlapped.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                core::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )?
        };
        Ok(Mmap::from_raw(p, len))
    }

    fn from_raw(p: *mut c_void, len: usize) -> Mmap {
        // mmap never returns NULL on success (MAP_FIXED is not used).
        let ptr = NonNull::new(p.cast::<u8>()).expect("mmap returned NULL");
        Mmap { ptr, len }
    }

    /// The first byte of the mapping.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The mapping's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// A pointer `offset` bytes into the mapping.
    ///
    /// # Panics
    /// When `offset` is not inside the mapping (a kernel-reported offset that
    /// disagrees with the mapped length).
    pub(crate) fn offset(&self, offset: u32) -> *mut u8 {
        let offset = offset as usize;
        assert!(
            offset < self.len,
            "ring offset {offset} outside mmap of {} bytes",
            self.len
        );
        // SAFETY: offset < len was just checked, so the result stays inside
        // the mapping (INVARIANT of Mmap).
        unsafe { self.ptr.as_ptr().add(offset) }
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: INVARIANT: ptr/len is our live mapping; every user of this
        // memory (rings, pools) holds the Mmap and drops its pointers with it.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
