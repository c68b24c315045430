//! What outlives one transfer: the buffer pools, the origins (addresses proven by Happy
//! Eyeballs, TLS configuration) and the connections left open and idle by the last
//! transfer (HTTP/1.1 persistent connections, RFC 9112 §9.3), kept for the next transfer
//! from the same origin. A run of many files passes one [`Reactor`] to each
//! [`crate::event::run`]; a run of one file makes one and drops it.
//!
//! The ring itself is made per transfer (its setup is tens of microseconds; the pools,
//! whose pages are the costly part, are reused and registered with each ring).

use uring::BufPool;

use crate::control::origin::Origin;
use crate::control::{Conn, St};
use crate::engine::EngineKind;
use crate::err;
use crate::error::Result;

/// Most idle connections kept between transfers, over every origin (each holds a socket
/// and a read block): a run over many servers keeps the most recent ones.
pub(crate) const MAX_IDLE: usize = 8;

/// Kept-alive state between transfers (one per thread; nothing in it is shared).
#[derive(Default)]
pub struct Reactor {
    /// Read blocks (one per connection) and write blocks, sized for the largest transfer
    /// so far.
    pools: Option<(BufPool, BufPool)>,
    /// Origins by [`origin_key`], with the TLS version and suite their last handshake
    /// agreed (for the summary of a transfer that makes none).
    origins: Vec<(String, Origin, Option<String>)>,
    /// Idle open connections and the origin each is connected to.
    idle: Vec<(String, Conn)>,
    /// The engine and kTLS switch the idle connections were set up for.
    engine: Option<(EngineKind, bool)>,
    /// SIGINT or SIGTERM arrived while nothing was waiting for it (a transfer's last
    /// fsync or read-back): the run stops before the next transfer.
    pub(crate) interrupted: Option<&'static str>,
}

/// What identifies an origin and the route to it: scheme, host, port (RFC 6454 §4) and
/// the proxy in between.
pub(crate) fn origin_key(url: &http::Url, origin: &Origin) -> String {
    let proxy = origin.proxy.as_ref().map(|p| p.url.to_string()).unwrap_or_default();
    format!("{:?}://{}:{} {proxy}", url.scheme(), url.host(), url.port())
}

impl Reactor {
    /// A reactor with nothing kept yet.
    pub fn new() -> Reactor {
        Reactor::default()
    }

    /// Read and write pools with at least `n` read blocks of `read` bytes (and
    /// [`MAX_IDLE`] more, for the idle connections kept to other origins) and `wcount`
    /// write blocks of `block` bytes: the kept ones when they are large enough.
    ///
    /// # Errors
    /// `LocalIo` when the blocks cannot be mapped.
    pub(crate) fn pools(&mut self, read: usize, n: usize, block: usize, wcount: usize) -> Result<(BufPool, BufPool)> {
        if let Some((r, w)) = &self.pools
            && r.block_size() == read
            && r.count() >= n + MAX_IDLE
            && w.block_size() == block
            && w.count() >= wcount
        {
            return Ok((r.clone(), w.clone()));
        }
        // Connections kept hold blocks of the old pool: they go with it.
        self.idle.clear();
        let count = n + MAX_IDLE;
        let r = BufPool::new(read, count).map_err(|e| err!(LocalIo, "read blocks ({count} x {read} bytes): {e}"))?;
        let w =
            BufPool::new(block, wcount).map_err(|e| err!(LocalIo, "write blocks ({wcount} x {block} bytes): {e}"))?;
        self.pools = Some((r.clone(), w.clone()));
        Ok((r, w))
    }

    /// The origin kept under `key`, or `fresh`; with it the TLS summary of its last
    /// handshake.
    pub(crate) fn origin(&mut self, key: &str, fresh: Origin) -> (Origin, Option<String>) {
        match self.origins.iter().position(|(k, ..)| k == key) {
            Some(at) => {
                let (_, mut kept, tls_info) = self.origins.swap_remove(at);
                // The route's addresses and TLS configuration are this transfer's; where
                // Happy Eyeballs stands is kept while the addresses are the same.
                if kept.addrs != fresh.addrs {
                    kept.addr_next = 0;
                    kept.addr_proven = false;
                    kept.attempt_started = None;
                }
                kept.addrs = fresh.addrs;
                kept.proxy = fresh.proxy;
                kept.tls = fresh.tls;
                kept.server_name = fresh.server_name;
                (kept, tls_info)
            }
            None => (fresh, None),
        }
    }

    /// Idle connections to the origin `key`, at most `max`, for a transfer with `engine`
    /// (connections set up for another engine are closed).
    pub(crate) fn take_idle(&mut self, key: &str, max: usize, engine: (EngineKind, bool)) -> Vec<Conn> {
        if self.engine.is_some_and(|e| e != engine) {
            self.idle.clear();
        }
        self.engine = Some(engine);
        let mut taken = Vec::new();
        let mut i = 0;
        while i < self.idle.len() && taken.len() < max {
            if self.idle[i].0 == key {
                taken.push(self.idle.swap_remove(i).1);
            } else {
                i += 1;
            }
        }
        taken
    }

    /// Closes idle connections to other origins, oldest first, until `pool` has `want`
    /// free read blocks for the transfer's new connections.
    pub(crate) fn free_blocks(&mut self, pool: &BufPool, want: usize) {
        while pool.available() < want && !self.idle.is_empty() {
            self.idle.remove(0);
        }
    }

    /// Keeps what a finished transfer leaves: its origins (under their keys, with the TLS
    /// summary) and each connection that can carry another request — open, nothing in
    /// flight, no job, no unread input, no pipe holding bytes, not closed by the peer.
    pub(crate) fn keep(
        &mut self,
        origins: Vec<(String, Origin)>,
        tls_info: Option<String>,
        conns: Vec<(String, Conn)>,
    ) {
        for (key, conn) in conns {
            let reusable = conn.st == St::Open
                && !conn.busy()
                && conn.rx.job.is_none()
                && !conn.rx.extra
                && !conn.eof
                && !conn.dead
                && conn.rlo == conn.rhi
                && conn.out.is_empty()
                && conn.pending_request.is_empty()
                && conn.pipe.as_ref().is_none_or(|p| p.is_idle() && p.held == 0);
            if reusable {
                self.idle.push((key, conn));
            }
        }
        if self.idle.len() > MAX_IDLE {
            let extra = self.idle.len() - MAX_IDLE;
            self.idle.drain(..extra);
        }
        for (key, origin) in origins {
            self.origins.retain(|(k, ..)| *k != key);
            self.origins.push((key, origin, tls_info.clone()));
        }
    }

    /// Forgets every connection (a transfer failed or was cut short: what its connections
    /// were doing is unknown).
    pub(crate) fn reset(&mut self) {
        self.idle.clear();
    }
}
