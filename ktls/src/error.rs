//! The crate's error type.

use std::fmt;

use rustix::io::Errno;

/// Which kernel call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// `setsockopt(SOL_TCP, TCP_ULP, "tls")`.
    Ulp,
    /// `setsockopt(SOL_TLS, TLS_RX, crypto_info)`.
    Rx,
    /// `setsockopt(SOL_TLS, TLS_TX, crypto_info)`.
    Tx,
    /// `setsockopt(SOL_TLS, TLS_RX_EXPECT_NO_PAD, 1)`.
    RxExpectNoPad,
    /// `sendmsg` of a TLS 1.3 KeyUpdate handshake record (`TLS_SET_RECORD_TYPE` 22).
    KeyUpdate,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Ulp => "TCP_ULP \"tls\"",
            Op::Rx => "TLS_RX",
            Op::Tx => "TLS_TX",
            Op::RxExpectNoPad => "TLS_RX_EXPECT_NO_PAD",
            Op::KeyUpdate => "sendmsg(KeyUpdate)",
        }
    }
}

/// Why kTLS could not be installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// No kTLS here: the kernel has no `tls` module (or cannot load it for this caller), or
    /// lacks the option or cipher. `errno` is ENOENT, ENOPROTOOPT or EOPNOTSUPP. The socket
    /// is unchanged if `op` is [`Op::Ulp`]; the caller falls back to user-space TLS.
    Unsupported {
        /// The call that said no.
        op: Op,
        /// ENOENT, ENOPROTOOPT or EOPNOTSUPP.
        errno: Errno,
    },
    /// The negotiated cipher suite has no kTLS `crypto_info` in this crate (for example a
    /// key of the wrong length); nothing was sent to the kernel.
    Cipher,
    /// The protocol version is neither TLS 1.2 nor TLS 1.3 (the value is the wire version).
    Version(u16),
    /// Any other errno from the kernel (EINVAL for a cipher or version this kernel's kTLS
    /// does not know, EBUSY when the direction is already installed before Linux 6.14,
    /// ENOTCONN on a socket that is not established, ...).
    Io {
        /// The call that failed.
        op: Op,
        /// Its errno.
        errno: Errno,
    },
}

impl Error {
    /// Whether this says "no kTLS for this connection" rather than "something broke": true
    /// for [`Error::Unsupported`], [`Error::Cipher`] and [`Error::Version`]. Falling back
    /// *on the same connection* is only possible before the rustls connection was consumed
    /// (i.e. for [`install_ulp`](crate::install_ulp) and [`offloadable`](crate::offloadable));
    /// afterwards it means: retry the segment on a new connection with user-space TLS.
    #[must_use]
    pub fn is_fallback(&self) -> bool {
        !matches!(self, Error::Io { .. })
    }

    /// Maps an errno from `op` onto `Unsupported` or `Io`.
    pub(crate) fn from_errno(op: Op, errno: Errno) -> Self {
        if errno == Errno::NOENT || errno == Errno::NOPROTOOPT || errno == Errno::OPNOTSUPP {
            Error::Unsupported { op, errno }
        } else {
            Error::Io { op, errno }
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unsupported { op, errno } => {
                write!(f, "no kTLS here: {} failed: {errno}", op.as_str())
            }
            Error::Cipher => f.write_str("cipher suite not offloadable to kTLS"),
            Error::Version(v) => write!(f, "protocol version {v:#06x} not offloadable to kTLS"),
            Error::Io { op, errno } => write!(f, "{} failed: {errno}", op.as_str()),
        }
    }
}

impl std::error::Error for Error {}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Unsupported { errno, .. } | Error::Io { errno, .. } => {
                std::io::Error::from_raw_os_error(errno.raw_os_error())
            }
            Error::Cipher | Error::Version(_) => std::io::Error::new(std::io::ErrorKind::Unsupported, e),
        }
    }
}
