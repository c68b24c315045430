//! The kernel ABI of kTLS: `include/uapi/linux/tls.h` constants and `crypto_info` layouts,
//! and the one raw `setsockopt(2)` the crate needs.
//!
//! linux-raw-sys 0.12 has `SOL_TLS` and `TCP_ULP` but none of `linux/tls.h`, and rustix has
//! no TLS socket options (and its `sendmsg` takes only SCM_RIGHTS / SCM_CREDENTIALS control
//! messages), so the structs are mirrored here and checked by size/offset tests.
//!
//! # Safety
//! The only unsafe code is the `setsockopt` call in [`setsockopt`] and the `sendmsg` call in
//! [`sendmsg_record`]: each passes pointers and lengths taken from live slices, which the
//! kernel only reads during the call.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::raw::{c_int, c_void};

use rustix::io::Errno;

/// `SOL_TCP` (6): socket-option level of `TCP_ULP`.
pub(crate) const SOL_TCP: c_int = linux_raw_sys::net::IPPROTO_TCP as c_int;
/// `TCP_ULP` (31): attach an upper-layer protocol by name (Linux 4.13+).
pub(crate) const TCP_ULP: c_int = linux_raw_sys::net::TCP_ULP as c_int;
/// `SOL_TLS` (282): socket-option and cmsg level of kTLS.
pub const SOL_TLS: c_int = linux_raw_sys::net::SOL_TLS as c_int;

/// `TLS_TX` (1): install the transmit `crypto_info` (Linux 4.13+).
pub(crate) const TLS_TX: c_int = 1;
/// `TLS_RX` (2): install the receive `crypto_info` (Linux 4.17+).
pub(crate) const TLS_RX: c_int = 2;
/// `TLS_TX_ZEROCOPY_RO` (3): sendfile may encrypt page-cache pages in place (Linux 5.19+).
#[allow(dead_code)]
pub(crate) const TLS_TX_ZEROCOPY_RO: c_int = 3;
/// `TLS_RX_EXPECT_NO_PAD` (4): TLS 1.3 records carry no padding (Linux 6.0+).
pub(crate) const TLS_RX_EXPECT_NO_PAD: c_int = 4;

/// `TLS_SET_RECORD_TYPE` (1): sendmsg cmsg type, one byte, the record's content type.
pub const TLS_SET_RECORD_TYPE: c_int = 1;
/// `TLS_GET_RECORD_TYPE` (2): recvmsg cmsg type, one byte, the record's content type.
pub const TLS_GET_RECORD_TYPE: c_int = 2;

/// `TLS_1_2_VERSION` (0x0303).
pub(crate) const TLS_1_2_VERSION: u16 = 0x0303;
/// `TLS_1_3_VERSION` (0x0304).
pub(crate) const TLS_1_3_VERSION: u16 = 0x0304;

/// `TLS_CIPHER_AES_GCM_128` (51).
pub(crate) const TLS_CIPHER_AES_GCM_128: u16 = 51;
/// `TLS_CIPHER_AES_GCM_256` (52), Linux 5.1+.
pub(crate) const TLS_CIPHER_AES_GCM_256: u16 = 52;
/// `TLS_CIPHER_CHACHA20_POLY1305` (54), Linux 5.11+.
pub(crate) const TLS_CIPHER_CHACHA20_POLY1305: u16 = 54;

/// `struct tls_crypto_info`: the common header of every `crypto_info`.
#[repr(C)]
#[allow(dead_code)]
pub(crate) struct TlsCryptoInfo {
    pub version: u16,
    pub cipher_type: u16,
}

/// `struct tls12_crypto_info_aes_gcm_128` (40 bytes). The layout reference for encoding;
/// the bytes themselves live in [`crate::CryptoInfo`].
#[repr(C)]
#[allow(dead_code)]
pub(crate) struct AesGcm128 {
    pub info: TlsCryptoInfo,
    pub iv: [u8; 8],
    pub key: [u8; 16],
    pub salt: [u8; 4],
    pub rec_seq: [u8; 8],
}

/// `struct tls12_crypto_info_aes_gcm_256` (56 bytes).
#[repr(C)]
#[allow(dead_code)]
pub(crate) struct AesGcm256 {
    pub info: TlsCryptoInfo,
    pub iv: [u8; 8],
    pub key: [u8; 32],
    pub salt: [u8; 4],
    pub rec_seq: [u8; 8],
}

/// `struct tls12_crypto_info_chacha20_poly1305` (56 bytes; `salt[0]`).
#[repr(C)]
#[allow(dead_code)]
pub(crate) struct Chacha20Poly1305 {
    pub info: TlsCryptoInfo,
    pub iv: [u8; 12],
    pub key: [u8; 32],
    pub salt: [u8; 0],
    pub rec_seq: [u8; 8],
}

// The C library is linked by std on every Linux target; setsockopt has this exact signature
// in glibc and musl (socklen_t is u32 on Linux).
unsafe extern "C" {
    #[link_name = "setsockopt"]
    fn c_setsockopt(fd: c_int, level: c_int, name: c_int, value: *const c_void, len: u32) -> c_int;
}

/// `struct iovec`.
#[repr(C)]
struct IoVec {
    base: *const c_void,
    len: usize,
}

/// `struct msghdr` (x86_64 and every other 64-bit Linux ABI: 56 bytes).
#[repr(C)]
struct MsgHdr {
    name: *const c_void,
    namelen: u32,
    iov: *const IoVec,
    iovlen: usize,
    control: *const c_void,
    controllen: usize,
    flags: c_int,
}

/// `MSG_DONTWAIT`: fail with EAGAIN instead of blocking.
pub(crate) const MSG_DONTWAIT: c_int = linux_raw_sys::net::MSG_DONTWAIT as c_int;

unsafe extern "C" {
    #[link_name = "sendmsg"]
    fn c_sendmsg(fd: c_int, msg: *const MsgHdr, flags: c_int) -> isize;
}

/// `sendmsg(fd, {iov: data, control: control}, flags)`: returns the bytes sent.
pub(crate) fn sendmsg_record(fd: BorrowedFd<'_>, data: &[u8], control: &[u8], flags: c_int) -> Result<usize, Errno> {
    let iov = IoVec {
        base: data.as_ptr().cast(),
        len: data.len(),
    };
    let msg = MsgHdr {
        name: std::ptr::null(),
        namelen: 0,
        iov: &iov,
        iovlen: 1,
        control: control.as_ptr().cast(),
        controllen: control.len(),
        flags: 0,
    };
    // SAFETY: `msg`, `iov`, `data` and `control` are live for the whole call and describe
    // exactly `data.len()` and `control.len()` initialised bytes; sendmsg(2) only reads them
    // (no name: `name` null with length 0); `fd` is borrowed, so it stays open.
    let rc = unsafe { c_sendmsg(fd.as_raw_fd(), &msg, flags) };
    if rc >= 0 {
        Ok(rc as usize)
    } else {
        Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO))
    }
}

/// `setsockopt(fd, level, name, value, value.len())`.
pub(crate) fn setsockopt(fd: BorrowedFd<'_>, level: c_int, name: c_int, value: &[u8]) -> Result<(), Errno> {
    let len = u32::try_from(value.len()).map_err(|_| Errno::INVAL)?;
    // SAFETY: `value` is a live, initialised slice of exactly `len` bytes for the whole call,
    // and setsockopt(2) only reads `len` bytes from it; `fd` is borrowed, so it stays open.
    let rc = unsafe { c_setsockopt(fd.as_raw_fd(), level, name, value.as_ptr().cast(), len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn uapi_sizes_and_offsets() {
        assert_eq!(size_of::<TlsCryptoInfo>(), 4);
        assert_eq!(size_of::<AesGcm128>(), 40);
        assert_eq!(offset_of!(AesGcm128, iv), 4);
        assert_eq!(offset_of!(AesGcm128, key), 12);
        assert_eq!(offset_of!(AesGcm128, salt), 28);
        assert_eq!(offset_of!(AesGcm128, rec_seq), 32);
        assert_eq!(size_of::<AesGcm256>(), 56);
        assert_eq!(offset_of!(AesGcm256, iv), 4);
        assert_eq!(offset_of!(AesGcm256, key), 12);
        assert_eq!(offset_of!(AesGcm256, salt), 44);
        assert_eq!(offset_of!(AesGcm256, rec_seq), 48);
        assert_eq!(size_of::<Chacha20Poly1305>(), 56);
        assert_eq!(offset_of!(Chacha20Poly1305, iv), 4);
        assert_eq!(offset_of!(Chacha20Poly1305, key), 16);
        assert_eq!(offset_of!(Chacha20Poly1305, rec_seq), 48);
    }

    #[test]
    fn msghdr_matches_linux_raw_sys() {
        use linux_raw_sys::net::msghdr;
        assert_eq!(size_of::<MsgHdr>(), size_of::<msghdr>());
        assert_eq!(offset_of!(MsgHdr, iov), offset_of!(msghdr, msg_iov));
        assert_eq!(offset_of!(MsgHdr, iovlen), offset_of!(msghdr, msg_iovlen));
        assert_eq!(offset_of!(MsgHdr, control), offset_of!(msghdr, msg_control));
        assert_eq!(offset_of!(MsgHdr, controllen), offset_of!(msghdr, msg_controllen));
        assert_eq!(offset_of!(MsgHdr, flags), offset_of!(msghdr, msg_flags));
        assert_eq!(size_of::<IoVec>(), 2 * size_of::<usize>());
    }

    #[test]
    fn constants_match_linux_raw_sys() {
        assert_eq!(SOL_TCP, 6);
        assert_eq!(TCP_ULP, 31);
        assert_eq!(SOL_TLS, 282);
    }
}
