//! Where the loop gathers what one download reports at its end ([`Summary`], the summary
//! line and `--json`) — after success, and after a failure for what it knew then.

use crate::event::Loop;
use crate::report::Summary;

impl Loop<'_> {
    /// Connections that carried a response of this transfer (those handed to the reactor
    /// while its fsync ran were counted then: [`Loop::hand_back_idle`]).
    pub(crate) fn served_connections(&self) -> usize {
        let here = (self.shared.used.iter().zip(&self.conns))
            .filter(|(u, c)| **u && c.rx.served)
            .count();
        here + self.end_state.served.unwrap_or(0)
    }

    /// What the download knows now, `bytes` being the file's size (or, after a failure,
    /// what the `.part` holds).
    pub(super) fn summary(
        &mut self,
        bytes: u64,
        io: String,
        registered: bool,
        digest: Option<ring::digest::Digest>,
    ) -> Summary {
        let mut s = Summary {
            bytes,
            fetched: self.shared.transfer.received,
            connections: self.served_connections().max(1),
            reference: self.shared.transfer.reference,
            tls: self.tls_info.take().unwrap_or_else(|| "plain".to_owned()),
            elapsed: self.started.elapsed(),
            waited: self.shared.transfer.waited,
            registered,
            digest,
            disposition: self.shared.transfer.disposition.take(),
            ktls_conns: self.shared.ktls_conns,
            ktls_refused: self.shared.ktls_refused.take(),
            ktls_rekeys: self.shared.ktls_rekeys,
            soft_conns: self.shared.soft_conns,
            soft_rekeys: self.shared.soft_rekeys,
            tls_conns: self.shared.tls_conns,
            kept: self.shared.kept,
            tls_full: self.shared.tls_full,
            tls_resumed: self.shared.tls_resumed,
            capped_at: self.shared.transfer.capped_at,
            io,
            retries: self.shared.transfer.retries,
            requests: self.shared.transfer.requests,
            resent: self.shared.transfer.resent,
            steals: self.shared.transfer.steals,
            reactors: 1,
            parts: 0,
            other_reactors_bytes: 0,
            reactor: 0,
            mirrors: self.mirror_reports(),
            etag: self
                .shared
                .transfer
                .reference
                .and_then(|k| self.shared.transfer.mirrors[k].validators.etag.clone()),
            last_modified: self
                .shared
                .transfer
                .reference
                .and_then(|k| self.shared.transfer.mirrors[k].validators.last_modified.clone()),
            signed: None,
            control_id: self.control_id,
            writes_pending: false,
        };
        if let Some(r) = &self.remote {
            // `--threads`: the other reactors' connections and handshakes count too.
            r.counts.add_to(&mut s);
            s.reactors = r.reactors();
            s.parts = r.given;
            s.other_reactors_bytes = r.by_others;
        }
        s
    }
}
