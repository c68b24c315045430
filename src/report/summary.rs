//! What one download reports at its end: the summary line and `--json`
//! ([`Summary`], gathered by the loop that ran it).

use std::time::Duration;

use crate::engine::EngineKind;

/// What the summary line reports.
pub struct Summary {
    /// The file's size, bytes.
    pub bytes: u64,
    /// Body bytes this run received (less than `bytes` after a resume).
    pub fetched: u64,
    /// Connection slots that were served a response (those the server only turned away
    /// are not counted); at least 1.
    pub connections: usize,
    /// The mirror (index in the URLs given to [`crate::reactors::run`]) whose first answer planned the
    /// segments; `None` when none answered (or with one URL before its first answer).
    pub reference: Option<usize>,
    /// `TLSv1.3 TLS13_AES_256_GCM_SHA384`, or `plain`.
    pub tls: String,
    /// Wall time of the transfer.
    pub elapsed: Duration,
    /// Of `elapsed`, the time before its first body byte when the server turned it away
    /// until then (its connection cap held by others); zero otherwise.
    pub waited: Duration,
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
    /// Of `tls_conns`, `ktls_conns` and `soft_conns`, in that order: connections kept open
    /// from the transfer before and first used here (no handshake of this transfer). A
    /// `--threads` helper's parts of one file count each connection once with them.
    pub kept: [usize; 3],
    /// TLS handshakes completed in full (certificate verified), and by resuming a session
    /// of an earlier connection (a TLS 1.3 ticket or a TLS 1.2 session; RFC 8446 §2.2).
    pub tls_full: usize,
    pub tls_resumed: usize,
    /// The server turned extra connections away (503, refused connects): how many it
    /// allowed.
    pub capped_at: Option<usize>,
    /// The I/O backend: `io_uring`, `epoll (io_uring refused: EPERM)`.
    pub io: String,
    /// Failed attempts that were tried again (a segment requeued, a connection reopened).
    pub retries: u64,
    /// HTTP requests sent.
    pub requests: u64,
    /// Requests sent again, no try spent, after their kept-alive connection was closed
    /// before any byte of the answer (not in `retries`).
    pub resent: u64,
    /// Work-stealing splits (an idle connection took the second half of a running body).
    pub steals: u64,
    /// `--threads`: the reactors that fetched the file (1: it ran on one), the parts
    /// handed to the others, and the bytes they landed.
    pub reactors: usize,
    pub parts: usize,
    pub other_reactors_bytes: u64,
    /// `--threads`: the reactor the file ran on (0: the run's own; a list's files are
    /// placed on the others while several are in flight).
    pub reactor: usize,
    /// What each mirror served, in the order given (empty with one URL).
    pub mirrors: Vec<crate::report::MirrorReport>,
    /// The reference's strong `ETag` and `Last-Modified`, as sent (`--etag-save`, `-N`).
    pub etag: Option<Vec<u8>>,
    /// (See `etag`.)
    pub last_modified: Option<Vec<u8>>,
    /// What `--signature` needs from the file (its digest, or its bytes), read back
    /// with the checksum's (`Some(None)`: bytes over [`crate::signature::MAX_MESSAGE`]).
    pub signed: Option<Option<Vec<u8>>>,
    /// Which file the transfer's last saved control file is
    /// ([`crate::output::resume::remove_if_ours`]).
    pub control_id: Option<crate::output::resume::FileId>,
    /// A failed transfer's writes did not all complete within its settling time (its
    /// control file keeps its last synced state; those writes may still land).
    pub writes_pending: bool,
}

impl Summary {
    /// The engine as the summary line names it: the engine that ran (`engine`, as
    /// selected; `note` is the selection's note), then what carried TLS — the kernel
    /// (kTLS, on however many connections it took, whatever the engine: `buffered` and
    /// `direct` hand connections to kTLS too), the software record layer, or why kTLS
    /// was refused where it was tried.
    pub fn engine_label(&self, engine: EngineKind, note: &str) -> String {
        let tls = self.tls != "plain";
        let tried = matches!(engine, EngineKind::KtlsDirect | EngineKind::Splice) || self.ktls_refused.is_some();
        match engine {
            // (The note is about TLS: a redirect may have ended on plain http.)
            _ if !tls => engine.name().to_owned(),
            _ if self.ktls_conns > 0 => format!(
                "{} (kTLS on {} of {} TLS connections{})",
                engine.name(),
                self.ktls_conns,
                self.tls_conns,
                match self.ktls_rekeys {
                    0 => String::new(),
                    1 => ", 1 KeyUpdate rekeyed in place".to_owned(),
                    n => format!(", {n} KeyUpdates rekeyed in place"),
                }
            ),
            _ if tried => {
                let why = self.ktls_refused.as_deref().unwrap_or("no connection handed off");
                let ran = match engine {
                    EngineKind::KtlsDirect => "direct",
                    e => e.name(),
                };
                format!("{ran} (kTLS refused: {why}; user-space TLS)")
            }
            EngineKind::Direct if self.soft_conns > 0 => format!(
                "{} (TLS records opened in place on {} of {} TLS connections{})",
                engine.name(),
                self.soft_conns,
                self.tls_conns,
                match self.soft_rekeys {
                    0 => String::new(),
                    1 => ", 1 KeyUpdate taken in place".to_owned(),
                    n => format!(", {n} KeyUpdates taken in place"),
                }
            ),
            _ => format!("{}{note}", engine.name()),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn summary(tls: &str, ktls: usize, tls_conns: usize) -> Summary {
        Summary {
            bytes: 1,
            fetched: 1,
            connections: tls_conns.max(1),
            reference: None,
            tls: tls.to_owned(),
            elapsed: Duration::ZERO,
            waited: Duration::ZERO,
            registered: true,
            digest: None,
            disposition: None,
            ktls_conns: ktls,
            ktls_refused: None,
            ktls_rekeys: 0,
            soft_conns: 0,
            soft_rekeys: 0,
            tls_conns,
            kept: [0; 3],
            tls_full: tls_conns,
            tls_resumed: 0,
            etag: None,
            last_modified: None,
            signed: None,
            control_id: None,
            writes_pending: false,
            capped_at: None,
            io: "io_uring".to_owned(),
            retries: 0,
            requests: 0,
            resent: 0,
            steals: 0,
            reactors: 1,
            parts: 0,
            other_reactors_bytes: 0,
            reactor: 0,
            mirrors: Vec::new(),
        }
    }

    const TLS13: &str = "TLSv1.3 TLS13_AES_256_GCM_SHA384";

    /// Issue 22: on a 6.1 kernel with /tmp on tmpfs, `--engine auto` ran `buffered` with
    /// the kernel decrypting every connection, and the summary did not say kTLS.
    #[test]
    fn ktls_is_named_whatever_the_engine() {
        for engine in [
            EngineKind::Buffered,
            EngineKind::Direct,
            EngineKind::KtlsDirect,
            EngineKind::Splice,
        ] {
            let s = summary(TLS13, 4, 4);
            assert_eq!(
                s.engine_label(engine, ""),
                format!("{} (kTLS on 4 of 4 TLS connections)", engine.name())
            );
        }
        let mut s = summary(TLS13, 3, 4);
        s.ktls_rekeys = 2;
        assert_eq!(
            s.engine_label(EngineKind::Buffered, ""),
            "buffered (kTLS on 3 of 4 TLS connections, 2 KeyUpdates rekeyed in place)"
        );
    }

    #[test]
    fn ktls_refused_says_why_and_what_ran() {
        let mut s = summary(TLS13, 0, 4);
        assert_eq!(
            s.engine_label(EngineKind::KtlsDirect, ""),
            "direct (kTLS refused: no connection handed off; user-space TLS)"
        );
        s.ktls_refused = Some("TCP_ULP: ENOENT".to_owned());
        assert_eq!(
            s.engine_label(EngineKind::Splice, ""),
            "splice (kTLS refused: TCP_ULP: ENOENT; user-space TLS)"
        );
        assert_eq!(
            s.engine_label(EngineKind::Buffered, ""),
            "buffered (kTLS refused: TCP_ULP: ENOENT; user-space TLS)"
        );
    }

    #[test]
    fn user_space_tls_and_plain() {
        let mut s = summary(TLS13, 0, 4);
        assert_eq!(s.engine_label(EngineKind::Buffered, ""), "buffered");
        assert_eq!(
            s.engine_label(EngineKind::Direct, " (no kTLS on this kernel: user-space TLS)"),
            "direct (no kTLS on this kernel: user-space TLS)"
        );
        s.soft_conns = 4;
        assert_eq!(
            s.engine_label(EngineKind::Direct, ""),
            "direct (TLS records opened in place on 4 of 4 TLS connections)"
        );
        let plain = summary("plain", 0, 0);
        assert_eq!(plain.engine_label(EngineKind::Splice, " (x)"), "splice");
        assert_eq!(plain.engine_label(EngineKind::Buffered, " (x)"), "buffered");
    }
}
