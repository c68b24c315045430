//! One error type for the binary: a kind that fixes the exit code, and a message
//! that already carries its context (URL, path, byte offset).

use std::fmt;

/// What went wrong, as far as the exit status is concerned.
///
/// The numbers are part of the command-line interface and documented in
/// README.md "Exit status".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A bug or an impossible state inside ringdl (exit 1).
    Internal,
    /// Bad command line (exit 2).
    Usage,
    /// Name resolution, connect, or a connection lost more often than `--max-tries` allows (exit 3).
    Network,
    /// TLS handshake failure, untrusted certificate, TLS alert (exit 4).
    Tls,
    /// The server answered with a 4xx or 5xx status (exit 5).
    HttpStatus,
    /// The server broke HTTP: malformed head, wrong Content-Range, changed validator (exit 6).
    Protocol,
    /// Local I/O: output exists, cannot open or write, disk full, io_uring refused (exit 7).
    LocalIo,
    /// SIGINT or SIGTERM (exit 8).
    Interrupted,
    /// The file does not match `--checksum` (exit 9).
    Checksum,
    /// `--signature` missing, malformed, by no trusted key, wrong namespace, or bad (exit 10).
    Signature,
    /// A delta update refused as asked: larger than `--max-delta-bytes`, or a server
    /// without ranges and no `--allow-full` (exit 11).
    Delta,
}

impl Kind {
    /// The process exit status for this kind.
    pub fn exit_code(self) -> u8 {
        match self {
            Kind::Internal => 1,
            Kind::Usage => 2,
            Kind::Network => 3,
            Kind::Tls => 4,
            Kind::HttpStatus => 5,
            Kind::Protocol => 6,
            Kind::LocalIo => 7,
            Kind::Interrupted => 8,
            Kind::Checksum => 9,
            Kind::Signature => 10,
            Kind::Delta => 11,
        }
    }
}

/// An error with its exit kind and a message that names what failed and where.
#[derive(Debug)]
pub struct Error {
    /// Decides the exit status.
    pub kind: Kind,
    /// Human-readable, with context; printed as `ringdl: <msg>`.
    pub msg: String,
    /// The output's file system is full (ENOSPC from a write or fallocate(2)): a list
    /// starts no more files ([`Error::out_of_space`]).
    pub no_space: bool,
}

impl Error {
    /// Builds an error of `kind` with message `msg`.
    pub fn new(kind: Kind, msg: impl Into<String>) -> Error {
        Error {
            kind,
            msg: msg.into(),
            no_space: false,
        }
    }

    /// This error, marked as the output's file system being full.
    #[must_use]
    pub fn out_of_space(mut self) -> Error {
        self.no_space = true;
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Error {}

/// Shorthand for results of the binary.
pub type Result<T> = std::result::Result<T, Error>;

/// Builds an [`Error`] with `format!` arguments: `err!(LocalIo, "cannot open {}", path)`.
#[macro_export]
macro_rules! err {
    ($kind:ident, $($arg:tt)*) => {
        $crate::error::Error::new($crate::error::Kind::$kind, format!($($arg)*))
    };
}
