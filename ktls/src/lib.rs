//! kTLS install for ringdl: hand a TCP socket's TLS records to the kernel after a rustls
//! handshake, and read what the kernel reports about non-data records.
//!
//! # Order of operations (RX; TX is the same with [`install_tx`])
//!
//! 1. [`offloadable`] on the negotiated suite, and [`install_ulp`] on the socket, *before*
//!    the rustls connection is consumed: both can say "no kTLS" while falling back to
//!    user-space TLS is still possible (`Error::Unsupported` with ENOENT when tls.ko is not
//!    loaded; only CAP_NET_ADMIN callers make the kernel auto-load it).
//! 2. `UnbufferedClientConnection::dangerous_into_kernel_connection` (rustls 0.23.27+,
//!    secret extraction enabled in the `ClientConfig`) → `ExtractedSecrets { rx: (seq,
//!    secrets), .. }` and a `KernelConnection`. `seq` counts the records rustls already
//!    decrypted under this key; the handoff must land on a record boundary, with no
//!    ciphertext rustls has read but not decrypted.
//! 3. [`install_rx`] with the negotiated version, `seq` and the secrets; for TLS 1.3 then
//!    [`set_rx_expect_no_pad`] (optional, Linux 6.0+).
//! 4. Read with `recvmsg` and a [`CMSG_SPACE_RECORD_TYPE`] control buffer whenever
//!    `splice` fails with EINVAL or `recv` with EIO: [`record_type`] says which record is at
//!    the head, [`NonData::decode`] what it says.
//!
//! # TLS 1.3 KeyUpdate (RFC 8446 §4.6.3)
//! A KeyUpdate from the peer reaches user space as a handshake record (step 4). Since Linux
//! 6.14 the kernel then pauses decryption (reads fail with EKEYEXPIRED) until the next key
//! is installed with [`install_rx`] again: `KernelConnection::update_rx_secret` gives it,
//! with sequence number 0. If the peer set `update_requested`, answer with
//! [`send_key_update`]`(fd, false)` (sent under the old TX key) and then [`install_tx`] with
//! `KernelConnection::update_tx_secret`. Before 6.14 a second `TLS_RX` / `TLS_TX` fails
//! with EBUSY: the connection cannot go on under kTLS. Try it, do not compare versions:
//! distributions backport. Version and cipher cannot change on rekey (EINVAL).
//!
//! # Kernel versions
//! TCP_ULP / TLS_TX 4.13, TLS_RX 4.17, TLS 1.3 and AES-256-GCM 5.1, ChaCha20-Poly1305 5.11,
//! TLS_TX_ZEROCOPY_RO 5.19, TLS_RX_EXPECT_NO_PAD 6.0, TLS 1.3 rekey (reinstalling TLS_RX /
//! TLS_TX after KeyUpdate) 6.14.
//!
//! # Key material
//! The `crypto_info` bytes are built on the stack and zeroed (volatile, `zeroize`) as soon
//! as `setsockopt` returns, whatever it returned. The secrets are taken by value and
//! dropped on return: rustls zeroes the `AeadKey` on drop; its `Iv` type has no zeroing
//! drop (the IV is not a key, but it is derived from the traffic secret).
//!
//! Source: kernel `Documentation/networking/tls.rst`, `include/uapi/linux/tls.h`,
//! `net/tls/tls_main.c`, `net/tls/tls_sw.c`, `tools/testing/selftests/net/tls.c`.
#![deny(missing_docs, clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_code)]

mod cmsg;
mod crypto_info;
mod error;
mod record;
pub mod soft;
mod sys;

#[cfg(test)]
mod kernel_emulation;

use std::os::fd::{AsFd, BorrowedFd};

use rustix::io::Errno;
use rustls::{ConnectionTrafficSecrets, ProtocolVersion};

pub use cmsg::{CMSG_SPACE_RECORD_TYPE, record_type, record_type_cmsg};
pub use crypto_info::offloadable;
pub use error::{Error, Op};
pub use record::{DecodeError, HandshakeMessage, NonData, content_type, handshake_messages, handshake_type};
pub use sys::{SOL_TLS, TLS_GET_RECORD_TYPE, TLS_SET_RECORD_TYPE};

use crypto_info::{CryptoInfo, Direction};

/// What [`probe`] found out about kTLS on this kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Support {
    /// The `tls` ULP is registered (module loaded or built in): installs should work for
    /// the ciphers this kernel has.
    Available,
    /// `TCP_ULP "tls"` gives ENOENT: no tls.ko loaded (or not built), and this caller
    /// cannot make the kernel load it. Use user-space TLS.
    Absent,
    /// Something else got in the way (socket creation refused by seccomp, an errno this
    /// crate does not expect); install anyway and fall back on error.
    Unknown(Errno),
}

/// Whether kTLS looks available: one throwaway unconnected TCP socket and one
/// `setsockopt(TCP_ULP, "tls")` on it, ≈ 2 syscalls, no network traffic.
///
/// The kernel looks the ULP up by name first (ENOENT when it is not registered and cannot
/// be auto-loaded), then refuses an unconnected socket (ENOTCONN, Linux 5.2+ for TLS):
/// ENOTCONN or success therefore mean "registered". More reliable than looking for
/// `/sys/module/tls`, which a built-in `CONFIG_TLS=y` need not create. A CAP_NET_ADMIN
/// caller may auto-load tls.ko by probing.
#[must_use]
pub fn probe() -> Support {
    use rustix::net::{AddressFamily, SocketType, socket};
    let sock = match socket(AddressFamily::INET, SocketType::STREAM, None) {
        Ok(s) => s,
        Err(e) => return Support::Unknown(e),
    };
    match sys::setsockopt(sock.as_fd(), sys::SOL_TCP, sys::TCP_ULP, b"tls") {
        Ok(()) => Support::Available,
        Err(Errno::NOTCONN) => Support::Available,
        Err(Errno::NOENT) => Support::Absent,
        Err(e) => Support::Unknown(e),
    }
}

/// Attaches the `tls` upper-layer protocol to an established TCP socket:
/// `setsockopt(SOL_TCP, TCP_ULP, "tls")` (Linux 4.13+). Idempotent: EEXIST (already
/// attached) is success. Does not change what reads and writes do until a direction is
/// installed; on error the socket is unchanged and stays usable.
///
/// # Errors
/// [`Error::Unsupported`] with ENOENT when tls.ko is not loaded and cannot be auto-loaded
/// (the common case for an ordinary user); [`Error::Io`] otherwise (ENOTCONN: not
/// established).
pub fn install_ulp(fd: BorrowedFd<'_>) -> Result<(), Error> {
    match sys::setsockopt(fd, sys::SOL_TCP, sys::TCP_ULP, b"tls") {
        Ok(()) | Err(Errno::EXIST) => Ok(()),
        Err(e) => Err(Error::from_errno(Op::Ulp, e)),
    }
}

/// Installs the receive keys: [`install_ulp`], then `setsockopt(SOL_TLS, TLS_RX,
/// crypto_info)` (Linux 4.17+). From then on reads return plaintext of the record with
/// sequence number `seq` onwards.
///
/// `version` is the negotiated version (TLS 1.2 or 1.3), `seq` the sequence number of the
/// next record to decrypt, `secrets` the peer's (server's) traffic secrets, as rustls'
/// `ExtractedSecrets::rx` or `KernelConnection::update_rx_secret` (after a KeyUpdate,
/// Linux 6.14+) give them. The secrets are consumed and dropped here.
///
/// # Errors
/// [`Error::Version`] / [`Error::Cipher`] before any syscall; [`Error::Unsupported`] when
/// the kernel has no kTLS or not this cipher (ENOENT, ENOPROTOOPT, EOPNOTSUPP);
/// [`Error::Io`] otherwise (EINVAL: cipher/version unknown to this kernel; EBUSY: RX already
/// installed on a kernel without rekey).
pub fn install_rx(
    fd: BorrowedFd<'_>,
    version: ProtocolVersion,
    seq: u64,
    secrets: ConnectionTrafficSecrets,
) -> Result<(), Error> {
    install(fd, Direction::Rx, version, seq, secrets)
}

/// Installs the transmit keys: [`install_ulp`], then `setsockopt(SOL_TLS, TLS_TX,
/// crypto_info)` (Linux 4.13+). From then on writes are encrypted as application-data
/// records starting at sequence number `seq`; other record types go through `sendmsg`
/// with [`record_type_cmsg`].
///
/// `secrets` are our (client's) traffic secrets, as `ExtractedSecrets::tx` gives them.
/// For TLS 1.2 AES-GCM the kernel's first explicit nonce is chosen so that it never meets
/// one rustls used (see the module docs of `crypto_info`).
///
/// # Errors
/// As [`install_rx`].
pub fn install_tx(
    fd: BorrowedFd<'_>,
    version: ProtocolVersion,
    seq: u64,
    secrets: ConnectionTrafficSecrets,
) -> Result<(), Error> {
    install(fd, Direction::Tx, version, seq, secrets)
}

fn install(
    fd: BorrowedFd<'_>,
    direction: Direction,
    version: ProtocolVersion,
    seq: u64,
    secrets: ConnectionTrafficSecrets,
) -> Result<(), Error> {
    let info = CryptoInfo::new(direction, version, seq, &secrets)?;
    drop(secrets);
    install_ulp(fd)?;
    let (name, op) = match direction {
        Direction::Rx => (sys::TLS_RX, Op::Rx),
        Direction::Tx => (sys::TLS_TX, Op::Tx),
    };
    let r = sys::setsockopt(fd, sys::SOL_TLS, name, info.as_bytes());
    drop(info); // zeroes the key bytes
    r.map_err(|e| Error::from_errno(op, e))
}

/// The TLS 1.3 KeyUpdate handshake message (RFC 8446 §4.6.3): `msg_type` 24, a 3-byte
/// length of 1, and `request_update` (1 = update_requested, 0 = update_not_requested).
#[must_use]
pub const fn key_update_message(update_requested: bool) -> [u8; 5] {
    [record::handshake_type::KEY_UPDATE, 0, 0, 1, update_requested as u8]
}

/// Sends a TLS 1.3 KeyUpdate on a socket with kTLS TX installed: one `sendmsg` of
/// [`key_update_message`] with a `TLS_SET_RECORD_TYPE` control message of 22 (handshake),
/// so the kernel encrypts it as its own handshake record under the *current* TX key
/// (kernel `Documentation/networking/tls.rst`, "TLS 1.3 Key Updates";
/// `tools/testing/selftests/net/tls.c`, `tls_send_keyupdate`). Install the next TX key
/// with [`install_tx`] right after it (Linux 6.14+), before any other write.
///
/// Non-blocking (`MSG_DONTWAIT`): 5 bytes of plaintext (≈ 27 on the wire) on a connection
/// whose send buffer holds at most a request.
///
/// # Errors
/// [`Error::Io`] with [`Op::KeyUpdate`]: EAGAIN when the send buffer is full, EBADMSG /
/// EIO when TX is not installed or the socket broke, or a short send (EMSGSIZE).
pub fn send_key_update(fd: BorrowedFd<'_>, update_requested: bool) -> Result<(), Error> {
    let msg = key_update_message(update_requested);
    let control = record_type_cmsg(content_type::HANDSHAKE);
    match sys::sendmsg_record(fd, &msg, &control, sys::MSG_DONTWAIT) {
        Ok(n) if n == msg.len() => Ok(()),
        Ok(_) => Err(Error::Io {
            op: Op::KeyUpdate,
            errno: Errno::MSGSIZE,
        }),
        Err(e) => Err(Error::from_errno(Op::KeyUpdate, e)),
    }
}

/// Tells the kernel that the peer's TLS 1.3 records carry no padding
/// (`setsockopt(SOL_TLS, TLS_RX_EXPECT_NO_PAD, 1)`, Linux 6.0+), so it can decrypt a whole
/// record straight into the user buffer. Call after [`install_rx`], TLS 1.3 only. If a
/// padded record arrives anyway the kernel re-decrypts it the slow way (and stops
/// expecting); nothing breaks. Failure is not fatal: ignore the error beyond logging it.
///
/// # Errors
/// [`Error::Unsupported`] (ENOPROTOOPT) before Linux 6.0; [`Error::Io`] with EINVAL for TLS
/// 1.2 or when RX is not installed.
pub fn set_rx_expect_no_pad(fd: BorrowedFd<'_>) -> Result<(), Error> {
    sys::setsockopt(fd, sys::SOL_TLS, sys::TLS_RX_EXPECT_NO_PAD, &1u32.to_ne_bytes())
        .map_err(|e| Error::from_errno(Op::RxExpectNoPad, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::crypto::cipher::{AeadKey, Iv};
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    fn secrets() -> ConnectionTrafficSecrets {
        ConnectionTrafficSecrets::Aes256Gcm {
            key: AeadKey::from([7; 32]),
            iv: Iv::new([1; 12]),
        }
    }

    #[test]
    fn probe_does_not_panic() {
        let s = probe();
        eprintln!("kTLS probe: {s:?}");
        if std::path::Path::new("/sys/module/tls").exists() {
            assert_eq!(s, Support::Available);
        }
    }

    #[test]
    fn install_rx_on_loopback_falls_back_cleanly() {
        let (mut c, mut s) = pair();
        match install_rx(c.as_fd(), ProtocolVersion::TLSv1_3, 0, secrets()) {
            Err(e @ Error::Unsupported { op: Op::Ulp, errno }) => {
                assert_eq!(errno, Errno::NOENT);
                assert!(e.is_fallback());
                eprintln!("expected on a host without kTLS: {e}");
            }
            Ok(()) => {
                eprintln!("skipping socket check: this kernel has kTLS (garbage keys installed)");
                return;
            }
            Err(e) => panic!("unexpected: {e:?}"),
        }
        // The socket is still a plain TCP socket both ways.
        s.write_all(b"ping").unwrap();
        let mut b = [0; 4];
        c.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"ping");
        c.write_all(b"pong").unwrap();
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"pong");
        // Trying again (and TX, and no-pad) gives the same answer, never a panic.
        assert!(install_tx(c.as_fd(), ProtocolVersion::TLSv1_2, 5, secrets()).is_err());
        assert!(set_rx_expect_no_pad(c.as_fd()).is_err());
    }

    #[test]
    fn install_ulp_on_unconnected_socket_is_an_error_not_a_panic() {
        let sock =
            rustix::net::socket(rustix::net::AddressFamily::INET, rustix::net::SocketType::STREAM, None).unwrap();
        let e = install_ulp(sock.as_fd()).unwrap_err();
        // ENOENT without kTLS, ENOTCONN with it.
        assert!(matches!(
            e,
            Error::Unsupported {
                errno: Errno::NOENT,
                ..
            } | Error::Io {
                errno: Errno::NOTCONN,
                ..
            }
        ));
    }

    #[test]
    fn bad_version_makes_no_syscall() {
        let (c, _s) = pair();
        let e = install_rx(c.as_fd(), ProtocolVersion::TLSv1_1, 0, secrets()).unwrap_err();
        assert_eq!(e, Error::Version(0x0302));
        assert!(e.is_fallback());
    }

    #[test]
    fn key_update_message_bytes() {
        // RFC 8446 §4: msg_type 24 (key_update), uint24 length 1, KeyUpdateRequest.
        assert_eq!(key_update_message(false), [0x18, 0, 0, 1, 0]);
        assert_eq!(key_update_message(true), [0x18, 0, 0, 1, 1]);
        // What this crate decodes on the way in is what it sends.
        let msg = key_update_message(true);
        let m = handshake_messages(&msg).next().unwrap().unwrap();
        assert_eq!((m.typ, m.body), (handshake_type::KEY_UPDATE, &[1u8][..]));
    }

    #[test]
    fn send_key_update_without_ktls_is_an_error_not_a_panic() {
        // Without TX installed the record-type cmsg is not SOL_TLS's business: the kernel
        // either refuses it or sends 5 plain bytes; either way no panic, and on a kernel
        // without kTLS the peer sees exactly the message.
        let (c, mut s) = pair();
        match send_key_update(c.as_fd(), false) {
            Ok(()) => {
                let mut b = [0; 5];
                s.read_exact(&mut b).unwrap();
                assert_eq!(b, key_update_message(false));
            }
            Err(e) => eprintln!("sendmsg with a TLS record-type cmsg on plain TCP: {e}"),
        }
    }

    #[test]
    fn io_error_conversion_keeps_errno() {
        let e = Error::Unsupported {
            op: Op::Ulp,
            errno: Errno::NOENT,
        };
        let io: std::io::Error = e.into();
        assert_eq!(io.raw_os_error(), Some(2));
    }
}
