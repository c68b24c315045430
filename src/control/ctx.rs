//! What the loop lends a connection's response and body code for one call ([`Ctx`]).

use crate::config::Config;
use crate::control::origin::Origin;
use crate::engine::sink::Sink;
use crate::error::Error;
use crate::report::Progress;
use crate::transfer::Transfer;
use http::Url;

/// What a connection's response and body may read and change, lent by the loop for one
/// call: the transfer it serves, the origins, the options, the report, the data path (body
/// bytes are placed through it), and the TLS counts of the summary. Not the ring, not the
/// other connections: what needs those is returned, and the loop applies it (with
/// [`Ctx::gave_up`]).
pub(crate) struct Ctx<'s> {
    /// Progress and notes.
    pub(crate) report: &'s mut Progress,
    pub(crate) opts: &'s Config,
    /// The transfer's data path: body bytes are placed into its write blocks.
    pub(crate) sink: &'s mut Sink,
    /// Set by the call when the download cannot go on (a segment out of tries): the loop
    /// ends with it once the call returns.
    pub(crate) gave_up: Option<Error>,
    /// The origins the mirrors are fetched from (each mirror names its own).
    pub(crate) origins: &'s [Origin],
    /// The file being fetched.
    pub(crate) transfer: &'s mut Transfer,
    /// Finished handshakes go to kTLS (else to the software record layer, or rustls).
    pub(crate) ktls: bool,
    /// TLS handshakes completed in full, and by resuming a session (RFC 8446 §2.2).
    pub(crate) tls_full: &'s mut usize,
    pub(crate) tls_resumed: &'s mut usize,
    /// KeyUpdates the software record layer took in place (RFC 8446 §4.6.3).
    pub(crate) soft_rekeys: &'s mut usize,
}

impl Ctx<'_> {
    /// Mirror `k`'s URL (a handle: held while the context is changed).
    pub(crate) fn url(&self, k: usize) -> std::rc::Rc<Url> {
        std::rc::Rc::clone(&self.transfer.mirrors[k].target)
    }

    /// Mirror `k`'s origin.
    pub(crate) fn origin(&self, k: usize) -> &Origin {
        &self.origins[self.transfer.mirrors[k].origin]
    }
}
