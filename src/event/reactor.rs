//! What outlives one transfer: the buffer pools, the origins (addresses proven by Happy
//! Eyeballs, TLS configuration) and the connections left open and idle by the last
//! transfer (HTTP/1.1 persistent connections, RFC 9112 §9.3), kept for the next transfer
//! from the same origin. A run of many files passes one [`Reactor`] to each
//! [`crate::reactors::run`]; a run of one file makes one and drops it.
//!
//! The ring is kept too, with the write pool registered with it once (IORING_REGISTER_BUFFERS
//! pins their pages: the costliest part of a small file's setup) and the signalfd's read
//! block. Between transfers the ring holds nothing of a transfer: [`Reactor::give_back`]
//! cancels every op still in flight and waits for its completion, and lets go of the
//! output registered as a fixed file — a later transfer's completion can never be taken
//! for an earlier one's, and a finished output is not held open.

use std::time::{Duration, Instant};

use uring::{BufPool, Ring};

use crate::config::Config;
use crate::control::origin::{Origin, OriginKey};
use crate::control::{Conn, St};
use crate::engine::EngineKind;
use crate::err;
use crate::error::Result;
use crate::io::Chosen;
use crate::tag::Tag;

/// Most idle connections kept between transfers, over every origin (each holds a socket
/// and a read block): a run over many servers keeps the most recent ones.
pub(crate) const MAX_IDLE: usize = 8;

/// How long [`Reactor::give_back`] waits for the ops it cancelled; a ring whose ops do
/// not all come back by then is dropped (its `Drop` waits again, then leaks what the
/// kernel may still write into).
const SETTLE: Duration = Duration::from_secs(10);

/// The ring kept between transfers and what it was built for.
struct Kept {
    chosen: Chosen,
    /// SQ entries asked for.
    entries: u32,
    /// Probed for IORING_OP_SPLICE (engine `splice`).
    splice: bool,
}

/// Kept-alive state between transfers (one per thread; nothing in it is shared).
#[derive(Default)]
pub struct Reactor {
    /// The ring, between transfers (a transfer holds it while it runs).
    ring: Option<Kept>,
    /// The signalfd READ's block (one siginfo).
    signal_block: Option<BufPool>,
    /// Read blocks (one per connection, over every transfer at once) ...
    read: Option<BufPool>,
    /// ... and the write blocks the lanes share, sized for the largest run so far ...
    write: Option<BufPool>,
    /// ... and the blocks a finished file is read back into (`--checksum`,
    /// `--signature`): its own, never waiting for blocks other transfers hold.
    verify: Option<BufPool>,
    /// Origins by their [`OriginKey`], with the TLS version and suite their last handshake
    /// agreed (for the summary of a transfer that makes none).
    origins: Vec<(OriginKey, Origin, Option<String>)>,
    /// Idle open connections and the key of the origin each was opened for (the only
    /// thing a connection is found again by: see [`OriginKey`]).
    idle: Vec<(OriginKey, Conn, (EngineKind, bool))>,
    /// Most idle connections kept: [`MAX_IDLE`], or the lanes of a run of many files when
    /// more (each file in flight leaves its connection for the next).
    max_idle: usize,
    /// SIGINT or SIGTERM arrived while nothing was waiting for it (a transfer's last
    /// fsync or read-back): the run stops before the next transfer.
    pub(crate) interrupted: Option<&'static str>,
    /// `--threads`: the other reactors, on their threads (started by the first transfer
    /// that spreads over them).
    helpers: Option<super::wire::Helpers>,
    /// The block of the READ of the eventfd the helpers ring.
    mail_block: Option<BufPool>,
}

/// Write slots (and blocks) of a transfer over `n` connections.
pub(crate) fn write_slots(n: usize) -> usize {
    (2 * n + 2).clamp(6, 64)
}

/// Write blocks of a run of `lanes` transfers at once over `n` connections each: one
/// transfer's [`write_slots`] and two more per other lane, and at least one per
/// connection and two more (a connection receiving straight into a block holds one while
/// it waits for its server: fewer blocks than connections would let slow servers' files
/// starve a fast one's).
pub(crate) fn write_blocks(lanes: usize, n: usize) -> usize {
    (write_slots(n) + 2 * lanes.saturating_sub(1)).max(lanes * n + 2)
}

/// SQ entries for a transfer over `n` connections: a CONNECT with its LINK_TIMEOUT, or a
/// SEND/RECV, per connection; a Happy Eyeballs wake-up per connect; the write slots; the
/// tick, signal, fallocate, fsync, cancels.
pub(crate) fn ring_entries(n: usize) -> u32 {
    (3 * n + write_slots(n) + 8).next_power_of_two() as u32
}

impl Reactor {
    /// What the server of origin `key` was seen allowing (connections at once), if it
    /// turned one away in an earlier transfer.
    pub(crate) fn allows(&self, key: &OriginKey) -> Option<usize> {
        self.origins
            .iter()
            .find(|(k, ..)| k == key)
            .and_then(|(_, o, _)| o.allows)
    }

    /// Most idle connections kept (see [`Reactor::size_pools`]).
    fn idle_cap(&self) -> usize {
        self.max_idle.max(MAX_IDLE)
    }

    /// Idle connections kept to origin `key`.
    pub(crate) fn idle_to(&self, key: &OriginKey) -> usize {
        self.idle.iter().filter(|(k, ..)| k == key).count()
    }

    /// Closes the oldest idle connection kept to origin `key`, if there is one.
    pub(crate) fn forget_one_idle(&mut self, key: &OriginKey) {
        if let Some(i) = self.idle.iter().position(|(k, ..)| k == key) {
            self.idle.remove(i);
        }
    }

    /// Closes the idle connections kept to origin `key`.
    pub(crate) fn forget_idle(&mut self, key: &OriginKey) {
        self.idle.retain(|(k, ..)| k != key);
    }

    /// Idle connections kept, per origin key.
    pub(crate) fn idle_counts(&self) -> Vec<(OriginKey, usize)> {
        let mut counts: Vec<(OriginKey, usize)> = Vec::new();
        for (k, ..) in &self.idle {
            match counts.iter_mut().find(|(c, _)| c == k) {
                Some(c) => c.1 += 1,
                None => counts.push((k.clone(), 1)),
            }
        }
        counts
    }

    /// The helpers, when they run (none is started here).
    pub(crate) fn helpers_running(&self) -> Option<&super::wire::Helpers> {
        self.helpers.as_ref()
    }

    /// (See [`Reactor::helpers_running`].)
    pub(crate) fn helpers_running_mut(&mut self) -> Option<&mut super::wire::Helpers> {
        self.helpers.as_mut()
    }

    /// A reactor with nothing kept yet.
    pub fn new() -> Reactor {
        Reactor::default()
    }

    /// The ring for a transfer that needs `entries` SQ entries (and IORING_OP_SPLICE when
    /// `splice`): the kept one when it is large enough and was probed for what this one
    /// needs, else a new one ([`crate::io::build_ring`] with `opts.io`, `opts.sqpoll`).
    /// The transfer gives it back with [`Reactor::give_back`].
    ///
    /// # Errors
    /// As [`crate::io::build_ring`] (`LocalIo`).
    pub(crate) fn take_ring(&mut self, opts: &Config, entries: u32, splice: bool) -> Result<(Chosen, u32, bool)> {
        if let Some(k) = self.ring.take() {
            if k.entries >= entries && (k.splice || !splice) {
                return Ok((k.chosen, k.entries, k.splice));
            }
            // Too small, or not probed for SPLICE: a new one (the old one's pools
            // registration goes with it).
            drop(k);
        }
        let chosen = crate::io::build_ring(opts.io, entries, splice, opts.sqpoll, opts.verbose)?;
        Ok((chosen, entries, splice))
    }

    /// Takes back the ring a transfer ran on, holding nothing of it: every op still in
    /// flight (a connection's RECV, the tick, the signalfd READ) is cancelled and reaped,
    /// a signal whose READ completed meanwhile is kept in [`Reactor::interrupted`], and
    /// the fixed-file table (the transfer's output) is unregistered. A ring that does not
    /// settle within [`SETTLE`] is dropped, not kept.
    pub(crate) fn give_back(&mut self, (mut chosen, entries, splice): (Chosen, u32, bool)) {
        let ring = &mut chosen.ring;
        if settle(ring, &mut self.interrupted) && ring.unregister_files().is_ok() {
            self.ring = Some(Kept {
                chosen,
                entries,
                splice,
            });
        }
    }

    /// The blocks the eventfd READs of `--threads` and of a list's sync thread go into
    /// (one pool per reactor, kept).
    ///
    /// # Errors
    /// `LocalIo` when it cannot be mapped.
    pub(crate) fn mail_block(&mut self) -> Result<BufPool> {
        if let Some(p) = &self.mail_block {
            return Ok(p.clone());
        }
        // (A lane that ended may still hold a block in its cancelled READ while the next
        // transfer spreads: a few blocks, and none free means the next runs alone.)
        let p = BufPool::new(4096, 4).map_err(|e| err!(LocalIo, "eventfd buffer: {e}"))?;
        self.mail_block = Some(p.clone());
        Ok(p)
    }

    /// `--threads`: `n` helper reactors, started now unless some run already (more are
    /// started only while none is lent: a transfer holds their channels), each a thread
    /// running `body`; `pin`: helper `k` on the `k`-th CPU the process may use (`--pin`).
    ///
    /// # Errors
    /// `LocalIo` when eventfd(2) or a thread's creation fails.
    pub(crate) fn helpers(
        &mut self,
        n: usize,
        pin: bool,
        body: fn(super::wire::HelperEnds),
    ) -> Result<&mut super::wire::Helpers> {
        if self.helpers.as_ref().is_none_or(|h| h.len() < n && !h.lent()) {
            self.helpers = None; // (joins the fewer ones first)
            self.helpers = Some(super::wire::Helpers::spawn(n, pin, body)?);
        }
        Ok(self.helpers.as_mut().expect("started above"))
    }

    /// The helpers lent to a transfer, back at its end.
    pub(crate) fn helpers_back(&mut self, remote: super::owner::Remote) {
        if let Some(h) = self.helpers.as_mut() {
            h.give_back(remote.into_lent());
        }
    }

    /// The block the signalfd READ goes into (one per reactor, kept).
    ///
    /// # Errors
    /// `LocalIo` when it cannot be mapped.
    pub(crate) fn signal_block(&mut self) -> Result<BufPool> {
        if let Some(p) = &self.signal_block {
            return Ok(p.clone());
        }
        let p = BufPool::new(4096, 1).map_err(|e| err!(LocalIo, "signal buffer: {e}"))?;
        self.signal_block = Some(p.clone());
        Ok(p)
    }

    /// Sizes the pools for `lanes` transfers at once of `n` connections each, with write
    /// blocks of `block` bytes: one read pool of `lanes · n` blocks (and as many more as
    /// idle connections are kept: [`MAX_IDLE`], or `lanes` when more), and one write pool
    /// the lanes share, of [`write_blocks`]`(lanes, n)` blocks (what one transfer of `n`
    /// connections keeps in flight, and two more per other lane: a file in flight beside
    /// others holds a block filling and one being written, and the memory of a run does
    /// not grow with `-j` as one pool per lane made it). The kept pools serve when they
    /// are large enough.
    ///
    /// # Errors
    /// `LocalIo` when the blocks cannot be mapped.
    pub(crate) fn size_pools(&mut self, lanes: usize, n: usize, block: usize) -> Result<()> {
        self.size_read_pool(lanes, n)?;
        self.size_write_pool(lanes, n, block)
    }

    /// The read pool of [`Reactor::size_pools`] alone (a new one closes the connections
    /// kept idle: they hold blocks of the old one).
    ///
    /// # Errors
    /// `LocalIo` when the blocks cannot be mapped.
    pub(crate) fn size_read_pool(&mut self, lanes: usize, n: usize) -> Result<()> {
        let read = crate::event::READ_BLOCK;
        self.max_idle = MAX_IDLE.max(lanes);
        let count = lanes * n + self.idle_cap();
        if self.read.as_ref().is_none_or(|r| r.count() < count) {
            // Connections kept hold blocks of the old pool: they go with it.
            self.idle.clear();
            self.read = Some(
                BufPool::new(read, count).map_err(|e| err!(LocalIo, "read blocks ({count} x {read} bytes): {e}"))?,
            );
        }
        Ok(())
    }

    /// The write pool of [`Reactor::size_pools`] alone.
    ///
    /// # Errors
    /// `LocalIo` when the blocks cannot be mapped.
    pub(crate) fn size_write_pool(&mut self, lanes: usize, n: usize, block: usize) -> Result<()> {
        let wcount = write_blocks(lanes, n);
        if self
            .write
            .as_ref()
            .is_none_or(|w| w.block_size() != block || w.count() < wcount)
        {
            self.write = Some(
                BufPool::new(block, wcount)
                    .map_err(|e| err!(LocalIo, "write blocks ({wcount} x {block} bytes): {e}"))?,
            );
        }
        Ok(())
    }

    /// The read pool and the write pool (sized for `n` connections and `wcount` write
    /// blocks of `block` bytes: made now when [`Reactor::size_pools`] did not).
    ///
    /// # Errors
    /// `LocalIo` when the blocks cannot be mapped.
    pub(crate) fn pools(&mut self, read: usize, n: usize, block: usize, wcount: usize) -> Result<(BufPool, BufPool)> {
        let fits = self
            .read
            .as_ref()
            .is_some_and(|r| r.block_size() == read && r.count() >= n + self.idle_cap())
            && self
                .write
                .as_ref()
                .is_some_and(|w| w.block_size() == block && w.count() >= wcount);
        if !fits {
            self.size_pools(1, n, block)?;
        }
        let r = self.read.clone().expect("sized above");
        let w = self.write.clone().expect("sized above");
        Ok((r, w))
    }

    /// The read-back pool: [`crate::output::verify::DEPTH`] blocks of `block` bytes.
    ///
    /// # Errors
    /// `LocalIo` when the blocks cannot be mapped.
    pub(crate) fn verify_pool(&mut self, block: usize) -> Result<BufPool> {
        let depth = crate::output::verify::DEPTH;
        if let Some(p) = self.verify.as_ref().filter(|p| p.block_size() == block) {
            return Ok(p.clone());
        }
        let p =
            BufPool::new(block, depth).map_err(|e| err!(LocalIo, "read-back blocks ({depth} x {block} bytes): {e}"))?;
        self.verify = Some(p.clone());
        Ok(p)
    }

    /// Registers the write pool with the ring of `cell` (IORING_REGISTER_BUFFERS) unless it
    /// already is; a refusal is said in `report` once and the writes go unregistered.
    /// Returns whether it is registered.
    ///
    /// The read pool is not registered: its blocks only take RECVs, which have no fixed
    /// form, and registering pins (and so makes resident) every page of the pool — 12 ×
    /// 64 KiB at `-x 4`, most of which a download never touches (a plain HTTP connection
    /// reads only its response heads there).
    pub(crate) fn register_pools(
        &mut self,
        cell: &crate::lane::RingCell,
        report: &mut crate::report::Progress,
    ) -> bool {
        let pools: Vec<&BufPool> = self.write.iter().collect();
        if pools.iter().all(|p| p.is_registered()) {
            return true;
        }
        match cell.with(|c| c.ring.register_pools(&pools)) {
            Ok(()) => true,
            Err(e) => {
                report.note(crate::report::Note::Unregistered { why: e.to_string() });
                false
            }
        }
    }

    /// The origin kept under `key`, or `fresh`; with it the TLS summary of its last
    /// handshake.
    pub(crate) fn origin(&mut self, key: &OriginKey, fresh: Origin) -> (Origin, Option<String>) {
        match self.origins.iter().position(|(k, ..)| k == key) {
            Some(at) => {
                // (A copy: transfers running at once each hold one; the reactor's stays for
                // the caps of those that start meanwhile.)
                let (_, mut kept, tls_info) = self.origins[at].clone();
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
                // (The other transfers' requests on the wire are counted for this one as it
                // runs, from none: those kept are another transfer's, as they last were.)
                kept.others = fresh.others;
                kept.remote = fresh.remote;
                (kept, tls_info)
            }
            None => (fresh, None),
        }
    }

    /// Idle connections to the origin `key` set up for `engine` (its engine and kTLS
    /// switch), at most `max`.
    pub(crate) fn take_idle(&mut self, key: &OriginKey, max: usize, engine: (EngineKind, bool)) -> Vec<Conn> {
        let mut taken = Vec::new();
        let mut i = 0;
        while i < self.idle.len() && taken.len() < max {
            if self.idle[i].0 == *key && self.idle[i].2 == engine {
                taken.push(self.idle.swap_remove(i).1);
            } else {
                i += 1;
            }
        }
        taken
    }

    /// The read pool (a running transfer's new connection slots take their blocks from it),
    /// once sized.
    pub(crate) fn read_pool(&self) -> Option<&BufPool> {
        self.read.as_ref()
    }

    /// Closes idle connections to other origins, oldest first, until `pool` has `want`
    /// free read blocks for the transfer's new connections.
    pub(crate) fn free_blocks(&mut self, pool: &BufPool, want: usize) {
        while pool.available() < want && !self.idle.is_empty() {
            self.idle.remove(0);
        }
    }

    /// Keeps what a finished transfer leaves: its origins (under their keys, with the TLS
    /// summary) and each connection (set up for `engine`) that can carry another request —
    /// open, nothing in flight, no job, no unread input, no pipe holding bytes, not closed
    /// by the peer, to an origin whose server keeps connections
    /// ([`Origin::reuses`]). (Whether the server closed one while it sat here is seen
    /// when it is taken for a request: [`crate::control::Conn::peek_idle`].)
    pub(crate) fn keep(
        &mut self,
        origins: Vec<(OriginKey, Origin)>,
        tls_info: Option<String>,
        conns: Vec<(OriginKey, Conn)>,
        engine: (EngineKind, bool),
    ) {
        for (key, mut origin) in origins {
            // A cap another transfer on the origin learned meanwhile is not forgotten, nor
            // how its server keeps connections.
            if let Some((_, old, _)) = self.origins.iter().find(|(k, ..)| *k == key) {
                origin.allows = origin.allows.or(old.allows);
                origin.keeps = origin.keeps.merge(old.keeps);
            }
            self.origins.retain(|(k, ..)| *k != key);
            self.origins.push((key, origin, tls_info.clone()));
        }
        // A connection that carried two responses shows a server that keeps them: a later
        // close on that origin is an idle timeout, not a close after every response.
        // (Open with no job: every request on it was answered.)
        for (key, conn) in conns.iter().filter(|(_, c)| c.st == St::Open && c.rx.job.is_none()) {
            if let Some((_, o, _)) = self.origins.iter_mut().find(|(k, ..)| k == key) {
                o.keeps = o.keeps.served(conn.requests);
            }
        }
        // (No connection is kept to a server seen closing after every response.)
        let reuses = |key: &OriginKey| {
            self.origins
                .iter()
                .find(|(k, ..)| k == key)
                .is_none_or(|(_, o, _)| o.reuses())
        };
        let closes: Vec<OriginKey> = self
            .idle_counts()
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| !reuses(k))
            .collect();
        self.idle.retain(|(k, ..)| !closes.contains(k));
        for (key, conn) in conns {
            let reusable = conn.st == St::Open
                && !conn.busy()
                && conn.rx.job.is_none()
                && !conn.rx.extra
                && !conn.eof
                && !conn.dead
                && conn.input_start == conn.input_end
                && conn.out.is_empty()
                && conn.pending_request.is_empty()
                && conn.pipe.as_ref().is_none_or(|p| p.is_idle() && p.held == 0)
                && reuses(&key);
            if reusable {
                self.idle.push((key, conn, engine));
            }
        }
        if self.idle.len() > self.idle_cap() {
            let extra = self.idle.len() - self.idle_cap();
            self.idle.drain(..extra);
        }
    }

    /// Forgets every connection (a transfer failed or was cut short: what its connections
    /// were doing is unknown).
    pub(crate) fn reset(&mut self) {
        self.idle.clear();
    }
}

/// Cancels every op in flight on `ring` and reaps them all (at most [`SETTLE`]); a
/// signalfd READ that completed with a siginfo names its signal in `interrupted`.
/// Returns whether none is left in flight.
fn settle(ring: &mut Ring, interrupted: &mut Option<&'static str>) -> bool {
    if ring.in_flight() == 0 {
        return true;
    }
    if ring.cancel_all().is_err() {
        return false;
    }
    let deadline = Instant::now() + SETTLE;
    while ring.in_flight() > 0 {
        if Instant::now() >= deadline || ring.submit_and_wait(1).is_err() {
            return false;
        }
        while let Some(c) = ring.next_completion() {
            if crate::lane::split(c.tag).1 == Tag::Signal.encode() && c.result > 0 {
                *interrupted = Some(crate::tag::signal_name(c.buf.as_deref()));
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::tls::Settings;

    /// An open connection, idle, as a finished transfer leaves it (no socket).
    fn open_conn(pool: &BufPool) -> Conn {
        let mut c = Conn::new(pool.alloc().expect("a free block"));
        c.st = St::Open;
        c
    }

    #[test]
    fn an_idle_connection_is_found_only_by_its_whole_origin_key() {
        let verified = Settings::default();
        let insecure = Settings {
            insecure: true,
            ..verified.clone()
        };
        let key = |url: &str, tls: &Settings| OriginKey::new(&http::Url::parse(url).unwrap(), None, Some(tls));
        let engine = (EngineKind::Direct, false);
        let pool = BufPool::new(4096, 4).unwrap();
        let mut r = Reactor::new();
        let mine = key("https://localhost:8443/a", &verified);
        r.keep(Vec::new(), None, vec![(mine.clone(), open_conn(&pool))], engine);
        // The same address by another name, the same name under -k, another port: none.
        for other in [
            key("https://127.0.0.1:8443/a", &verified),
            key("https://localhost:8443/a", &insecure),
            key("https://localhost:8444/a", &verified),
        ] {
            assert_eq!(r.idle_to(&other), 0, "{other:?}");
            assert!(
                r.take_idle(&other, 4, engine).is_empty(),
                "{other:?} took {mine:?}'s connection"
            );
        }
        // Its own key (another path, the host in capitals) finds it.
        let same = key("https://LOCALHOST:8443/b", &verified);
        assert_eq!(r.take_idle(&same, 4, engine).len(), 1);
    }
}
