//! What one download reports at its end (the summary line, `--json`), and where the loop
//! gathers it — after success, and after a failure for what it knew then.

use std::time::Duration;

use crate::event::Loop;

/// What the summary line reports.
pub struct Summary {
    /// The file's size, bytes.
    pub bytes: u64,
    /// Body bytes this run received (less than `bytes` after a resume).
    pub fetched: u64,
    /// Connections that carried a request.
    pub connections: usize,
    /// The mirror (index in the URLs given to [`run`]) whose first answer planned the
    /// segments; `None` when none answered (or with one URL before its first answer).
    pub reference: Option<usize>,
    /// `TLSv1_3 TLS13_AES_256_GCM_SHA384`, or `plain`.
    pub tls: String,
    /// Wall time of the transfer.
    pub elapsed: Duration,
    /// Registered buffers (READ_FIXED/WRITE_FIXED) were used.
    pub registered: bool,
    /// Digest of the whole file when `--checksum` asked for one.
    pub digest: Option<ring::digest::Digest>,
    /// A sanitized file name from Content-Disposition (`--content-disposition`).
    pub disposition: Option<String>,
    /// Connections whose TLS was handed to the kernel.
    pub ktls_conns: usize,
    /// Why a kTLS hand-off was refused, if one was.
    pub ktls_refused: Option<String>,
    /// TLS 1.3 KeyUpdates from the server that kTLS took in place (new RX key, and TX when
    /// asked; Linux 6.14+) instead of a new connection.
    pub ktls_rekeys: usize,
    /// Connections whose TLS records the software record layer opened in place
    /// (the default where kTLS does not run; `RINGDL_SOFT_TLS=0` turns it off).
    pub soft_conns: usize,
    /// TLS 1.3 KeyUpdates the software record layer took in place.
    pub soft_rekeys: usize,
    /// TLS connections that reached the hand-off after their handshake (to kTLS or the
    /// software record layer), reconnects included: the "of M" of the engine's note.
    pub tls_conns: usize,
    /// The server turned extra connections away (503, refused connects): how many it
    /// allowed.
    pub capped_at: Option<usize>,
    /// The I/O backend: `io_uring`, `epoll (io_uring refused: EPERM)`.
    pub io: String,
    /// Failed attempts that were tried again (a segment requeued, a connection reopened).
    pub retries: u64,
    /// Work-stealing splits (an idle connection took the second half of a running body).
    pub steals: u64,
    /// What each mirror served, in the order given (empty with one URL).
    pub mirrors: Vec<crate::report::MirrorReport>,
    /// What `--signature` needs from the file (its digest, or its bytes), read back
    /// with the checksum's (`Some(None)`: bytes over [`crate::signature::MAX_MESSAGE`]).
    pub signed: Option<Option<Vec<u8>>>,
}

impl Loop<'_> {
    /// What the download knows now, `bytes` being the file's size (or, after a failure,
    /// what the `.part` holds).
    pub(super) fn summary(
        &mut self,
        bytes: u64,
        io: String,
        registered: bool,
        digest: Option<ring::digest::Digest>,
    ) -> Summary {
        Summary {
            bytes,
            fetched: self.sh.received,
            connections: self.sh.used.iter().filter(|u| **u).count().max(1),
            reference: self.sh.reference,
            tls: self.tls_info.take().unwrap_or_else(|| "plain".to_owned()),
            elapsed: self.started.elapsed(),
            registered,
            digest,
            disposition: self.sh.disposition.take(),
            ktls_conns: self.sh.ktls_conns,
            ktls_refused: self.sh.ktls_refused.take(),
            ktls_rekeys: self.sh.ktls_rekeys,
            soft_conns: self.sh.soft_conns,
            soft_rekeys: self.sh.soft_rekeys,
            tls_conns: self.sh.tls_conns,
            capped_at: self.sh.capped_at,
            io,
            retries: self.sh.retries,
            steals: self.sh.steals,
            mirrors: self.mirror_reports(),
            signed: None,
        }
    }
}
