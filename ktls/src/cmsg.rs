//! The record-type control message of kTLS: `recvmsg` reports each record's content type as
//! a cmsg (`SOL_TLS`, `TLS_GET_RECORD_TYPE`, one byte); `sendmsg` takes one
//! (`TLS_SET_RECORD_TYPE`) to send a non-data record such as close_notify.
//!
//! The layout is the kernel's `struct cmsghdr { size_t cmsg_len; int cmsg_level; int
//! cmsg_type; }` followed by data, each cmsg padded to `sizeof(size_t)` (`CMSG_ALIGN`).
//! Parsing is over plain bytes with `from_ne_bytes`: no alignment is assumed and no unsafe
//! code is needed.
//!
//! Source: cmsg(3), `include/linux/socket.h`, kernel `Documentation/networking/tls.rst`.

use crate::sys::{SOL_TLS, TLS_GET_RECORD_TYPE, TLS_SET_RECORD_TYPE};

/// `sizeof(struct cmsghdr)`: 16 bytes on 64-bit Linux, 12 on 32-bit.
const HDR: usize = size_of::<linux_raw_sys::net::cmsghdr>();

/// `CMSG_ALIGN(len)`: round up to `sizeof(size_t)`.
const fn align(len: usize) -> usize {
    (len + size_of::<usize>() - 1) & !(size_of::<usize>() - 1)
}

/// `CMSG_SPACE(1)` in bytes (24 on 64-bit Linux): the control buffer to give `recvmsg`
/// for the record type, and the size of [`record_type_cmsg`].
pub const CMSG_SPACE_RECORD_TYPE: usize = align(HDR) + align(1);

/// `CMSG_LEN(1)`: the `cmsg_len` of a record-type cmsg.
const CMSG_LEN_RECORD_TYPE: usize = align(HDR) + 1;

/// The content type in a control buffer filled by `recvmsg(2)` on a kTLS RX socket: the
/// data byte of the first cmsg with level `SOL_TLS` (282) and type `TLS_GET_RECORD_TYPE`
/// (2). Pass exactly the `msg_controllen` bytes the kernel returned.
///
/// Returns `None` when there is no such cmsg or the buffer is truncated or malformed
/// (`cmsg_len` shorter than the header or past the end); never panics, never reads out of
/// bounds. Values: see [`content_type`](crate::content_type).
#[must_use]
pub fn record_type(control: &[u8]) -> Option<u8> {
    let mut off = 0usize;
    loop {
        let hdr = control.get(off..off.checked_add(HDR)?)?;
        let len = usize::from_ne_bytes(hdr[..size_of::<usize>()].try_into().ok()?);
        let level = i32::from_ne_bytes(hdr[size_of::<usize>()..][..4].try_into().ok()?);
        let typ = i32::from_ne_bytes(hdr[size_of::<usize>() + 4..][..4].try_into().ok()?);
        if len < HDR {
            return None; // CMSG_NXTHDR stops here too
        }
        let data = control.get(off + align(HDR)..off.checked_add(len)?)?;
        if level == SOL_TLS && typ == TLS_GET_RECORD_TYPE {
            return data.first().copied();
        }
        off = off.checked_add(align(len))?;
    }
}

/// A control buffer for `sendmsg(2)` that sends the data as one record of `content_type`
/// (`SOL_TLS`, `TLS_SET_RECORD_TYPE`), e.g. an alert (21) for close_notify. Set
/// `msg_controllen` to [`CMSG_SPACE_RECORD_TYPE`].
#[must_use]
pub fn record_type_cmsg(content_type: u8) -> [u8; CMSG_SPACE_RECORD_TYPE] {
    let mut buf = [0u8; CMSG_SPACE_RECORD_TYPE];
    let u = size_of::<usize>();
    buf[..u].copy_from_slice(&CMSG_LEN_RECORD_TYPE.to_ne_bytes());
    buf[u..u + 4].copy_from_slice(&SOL_TLS.to_ne_bytes());
    buf[u + 4..u + 8].copy_from_slice(&TLS_SET_RECORD_TYPE.to_ne_bytes());
    buf[align(HDR)] = content_type;
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One cmsg as the kernel's put_cmsg writes it, padded to CMSG_ALIGN.
    fn cmsg(level: i32, typ: i32, data: &[u8]) -> Vec<u8> {
        let len = align(HDR) + data.len();
        let mut v = Vec::new();
        v.extend_from_slice(&len.to_ne_bytes());
        v.extend_from_slice(&level.to_ne_bytes());
        v.extend_from_slice(&typ.to_ne_bytes());
        v.extend_from_slice(data);
        v.resize(align(len), 0);
        v
    }

    #[test]
    fn sizes_match_cmsg_macros() {
        #[cfg(target_pointer_width = "64")]
        {
            assert_eq!(HDR, 16);
            assert_eq!(CMSG_SPACE_RECORD_TYPE, 24);
            assert_eq!(CMSG_LEN_RECORD_TYPE, 17);
        }
    }

    #[test]
    fn valid_record_type() {
        assert_eq!(record_type(&cmsg(282, 2, &[21])), Some(21));
        assert_eq!(record_type(&cmsg(282, 2, &[23])), Some(23));
    }

    #[test]
    fn encoder_round_trips_through_the_parser_shape() {
        let mut b = record_type_cmsg(21);
        assert_eq!(b.to_vec(), cmsg(282, 1, &[21]));
        // Same bytes with the GET type parse back.
        b[size_of::<usize>() + 4..size_of::<usize>() + 8].copy_from_slice(&2i32.to_ne_bytes());
        assert_eq!(record_type(&b), Some(21));
    }

    #[test]
    fn wrong_level_or_type_is_none() {
        assert_eq!(record_type(&cmsg(1, 2, &[21])), None); // SOL_SOCKET
        assert_eq!(record_type(&cmsg(282, 1, &[21])), None); // SET, not GET
        assert_eq!(record_type(&[]), None);
    }

    #[test]
    fn second_of_several_cmsgs() {
        let mut b = cmsg(1, 29, &[0; 12]); // e.g. SO_TIMESTAMPNS-like payload
        b.extend(cmsg(282, 2, &[22]));
        assert_eq!(record_type(&b), Some(22));
        let mut b = cmsg(282, 2, &[20]);
        b.extend(cmsg(282, 2, &[23]));
        assert_eq!(record_type(&b), Some(20), "the first one wins");
    }

    #[test]
    fn truncated_and_garbage_never_panic() {
        let good = cmsg(282, 2, &[21]);
        for n in 0..good.len() {
            let r = record_type(&good[..n]);
            // 17 bytes (CMSG_LEN) is enough for the data byte; fewer is not.
            assert_eq!(r, if n >= CMSG_LEN_RECORD_TYPE { Some(21) } else { None }, "n={n}");
        }
        // cmsg_len 0 (would loop forever if not stopped), huge, and past the end.
        for len in [0usize, 1, HDR - 1, usize::MAX, usize::MAX - 7, 1000] {
            let mut b = cmsg(282, 2, &[21]);
            b[..size_of::<usize>()].copy_from_slice(&len.to_ne_bytes());
            assert_eq!(record_type(&b), None, "len={len}");
        }
        // cmsg_len == header: no data byte.
        let mut b = cmsg(282, 2, &[]);
        b.extend_from_slice(&[0; 8]);
        assert_eq!(record_type(&b), None);
        // Pseudo-random garbage.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20_000 {
            let mut buf = [0u8; 64];
            for byte in &mut buf {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *byte = x as u8;
            }
            let n = (x % 65) as usize;
            let _ = record_type(&buf[..n]);
        }
    }

    /// A cmsg with no data (`cmsg_len` = header only) is valid and is skipped
    /// (mutation testing found the `<` of the header check unpinned).
    #[test]
    fn a_cmsg_without_data_is_skipped() {
        let mut b = cmsg(1, 7, &[]);
        b.extend(cmsg(282, 2, &[22]));
        assert_eq!(record_type(&b), Some(22));
    }
}
