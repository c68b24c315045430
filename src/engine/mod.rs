//! Data-plane engines: how body bytes go from the socket to the output.
//!
//! `direct` (seed 001): user-space TLS (or plain), plaintext compacted into aligned write
//! blocks, written with O_DIRECT (WRITE_FIXED when the pool is registered). Plain HTTP
//! receives straight into the write blocks, with no compaction copy.
//! `buffered`: the same blocks written through the page cache, for filesystems that refuse
//! O_DIRECT (ramfs, tmpfs before 6.6) and for standard output.
//!
//! A transfer's data path is one `sink::Sink`: a received byte goes from the loop's
//! completion (where the RECV went: `receive`) through its connection's body
//! (`control/body.rs`: the job's framing and count, which lends the bytes on) to the
//! sink (placed: [`place`]; opened in place under the software record layer:
//! `record`), into a write block on the sink's queue, and out as a WRITE the sink
//! submits (`write`); each step returns what happened to the loop. The engine never reaches the loop or the connection's control
//! state.

pub mod blocks;
pub mod place;
pub(crate) mod receive;
pub(crate) mod record;
pub mod select;
pub(crate) mod sink;
pub mod splice;
pub(crate) mod write;

/// The engine that ran; named in the summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// Aligned blocks, O_DIRECT writes.
    Direct,
    /// Writes through the page cache (or to a pipe).
    Buffered,
    /// SPLICE socket → pipe → file (plain HTTP, or kTLS).
    Splice,
    /// kTLS RX: RECV of plaintext straight into aligned write blocks, O_DIRECT writes; no
    /// user-space decryption, no compaction copy.
    KtlsDirect,
}

impl EngineKind {
    /// The name used by `--engine` and the summary.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Direct => "direct",
            EngineKind::Buffered => "buffered",
            EngineKind::Splice => "splice",
            EngineKind::KtlsDirect => "ktls-direct",
        }
    }

    /// The engine `--engine NAME` names (`auto` is `None` one level up, not an engine).
    pub fn from_name(name: &str) -> Option<EngineKind> {
        [
            EngineKind::Direct,
            EngineKind::Buffered,
            EngineKind::Splice,
            EngineKind::KtlsDirect,
        ]
        .into_iter()
        .find(|k| k.name() == name)
    }
}
