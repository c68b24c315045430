//! Mirrors: one file from several URLs (aria2c's feature). The first URL in the given
//! order whose first answer (the probe) comes is the *reference*; every other mirror's
//! first answer must agree with it (the same size, and the same strong ETag — else the
//! same Last-Modified — unless a `--checksum` will prove the bytes) before it gets
//! segments. A mirror that disagrees, cannot be reached, or keeps failing is *dropped*:
//! its unfinished segments go back to the queue for the others, and its connections move
//! to the mirrors left. The download fails only when no mirror is left.
//!
//! Each mirror names its URL, its request fields and its origin
//! ([`crate::control::origin::Origin`]: addresses, Happy Eyeballs, proxy, TLS): a
//! connection's mirror says where everything it needs is, and nothing is swapped.

use std::sync::Arc;

use http::Url;
use rustls::ClientConfig;

use crate::control::proxy::Route;
use crate::error::{Kind, Result};
use crate::event::Loop;
use crate::report::{MirrorReport, Note};
use crate::schedule::Segment;
use crate::transfer::mirror::Standing;

/// One URL of the file and how to reach it, as the command prepared it.
#[derive(Clone)]
pub struct MirrorRoute {
    /// The URL (after the redirects followed so far).
    pub url: Url,
    /// Extra request fields for this URL: `-H`, and credentials on its origin.
    pub headers: Vec<(String, String)>,
    /// The TLS client configuration for an https URL (its origin key's: see
    /// [`crate::control::tls::Configs`]).
    pub tls: Option<Arc<ClientConfig>>,
    /// What its connections, sessions and learned caps are kept and found again by.
    pub(crate) key: crate::control::origin::OriginKey,
    /// Addresses and proxy (chosen for this URL's host).
    pub route: Route,
}

impl Loop<'_> {
    /// How many addresses mirror `k`'s origin has.
    pub(crate) fn addr_count(&self, k: usize) -> usize {
        self.shared.origin(k).addrs.len()
    }

    /// The mirror the first request goes to: the first one given that is not dropped.
    pub(crate) fn probe_mirror(&self) -> Option<usize> {
        self.shared
            .transfer
            .mirrors
            .iter()
            .position(|m| m.standing != Standing::Dropped)
    }

    /// A failure of `kind` on mirror `k` drops that mirror instead of failing the
    /// download: there are mirrors, another one is left, and the failure is the server's
    /// (not the disk's, not an interrupt).
    pub(crate) fn drops_mirror(&self, k: usize, kind: Kind) -> bool {
        let left = self
            .shared
            .transfer
            .mirrors
            .iter()
            .enumerate()
            .filter(|&(j, m)| j != k && m.standing != Standing::Dropped)
            .count();
        left > 0 && matches!(kind, Kind::Network | Kind::Tls | Kind::Protocol | Kind::HttpStatus)
    }

    /// Leaves mirror `k` out: says why, moves its connections (and their unfinished
    /// segments) to the mirrors left.
    pub(crate) fn drop_mirror(&mut self, k: usize, why: String, hint: &'static str) -> Result<()> {
        let m = &mut self.shared.transfer.mirrors[k];
        if m.standing == Standing::Dropped {
            return Ok(());
        }
        m.standing = Standing::Dropped;
        m.dropped = Some(why.clone());
        let url = m.url.clone();
        // What a dropped mirror served differently is no change of the file.
        self.shared.transfer.changed = false;
        self.shared.report.note(Note::MirrorDropped { url, why, hint });
        self.discard_queued(k);
        for j in 0..self.conns.len() {
            if self.conns[j].mirror == k {
                self.release_conn(j)?;
            }
        }
        Ok(())
    }

    /// Connection `j` is on a dropped mirror: not another byte of that mirror's is written.
    /// What its job holds and did not hand to the kernel yet (the block being filled, input
    /// held back) is discarded, and the segment goes back to the queue from the first byte
    /// not on its way to the file, with fresh tries (another mirror takes it); the
    /// connection moves to the mirror with the fewest connections. A connection with an
    /// operation in flight is cancelled first; its completion brings it back here (see
    /// [`Loop::after`]), and what that completion carried is discarded too.
    ///
    /// Bytes in a splice pipe are the kernel's already, like a write in flight: they land,
    /// with the block before them. Every byte placed passed its answer's check
    /// (`control::response`), so what lands is the file's.
    pub(crate) fn release_conn(&mut self, j: usize) -> Result<()> {
        if self.conns[j].busy() {
            return self.cancel_op(j);
        }
        let k = self.conns[j].mirror;
        // A completion that came before the cancel may have queued a full block.
        self.discard_queued(k);
        if let Some(mut job) = self.conns[j].rx.job.take() {
            let piped = self.conns[j].pipe.as_ref().is_some_and(|p| !p.is_idle());
            let from = if piped {
                let trim = self.shared.transfer.direct.then_some(self.shared.transfer.align);
                self.sink.release(&mut job.placer, trim)
            } else {
                job.placer.discard()
            };
            // (A multi-range request's runs not received go back with it.)
            for s in job.owed(from).into_iter().rev() {
                let s = s.released(s.start, self.shared.transfer.ranges);
                self.shared.transfer.plan.requeue(s, job.probe);
            }
        }
        self.drain(j)?;
        self.close(j);
        self.reassign(j);
        Ok(())
    }

    /// Mirror `k` was dropped: its blocks waiting for a write SQE are discarded (never
    /// written) and their ranges go back to the queue, lowest offset first. (A write
    /// already submitted lands: its bytes passed their answer's check.)
    fn discard_queued(&mut self, k: usize) {
        if !self.sink.to_write.iter().any(|wb| wb.source == k) {
            return;
        }
        let mut dropped: Vec<(u64, u64)> = Vec::new();
        self.sink.to_write.retain(|wb| {
            if wb.source == k {
                dropped.push((wb.off, wb.off + wb.fill as u64));
                false
            } else {
                true
            }
        });
        dropped.sort_unstable_by_key(|r| std::cmp::Reverse(r.0));
        for (start, end) in dropped {
            self.shared.transfer.plan.requeue(
                Segment {
                    start,
                    end,
                    tries: 0,
                    grace: false,
                },
                false,
            );
        }
    }

    /// Moves closed connection `j` to the mirror left with the fewest connections (the
    /// first given on a tie); with none left it stays dead.
    pub(crate) fn reassign(&mut self, j: usize) {
        let counts: Vec<usize> = (0..self.shared.transfer.mirrors.len())
            .map(|k| {
                self.conns
                    .iter()
                    .enumerate()
                    .filter(|&(o, c)| o != j && c.mirror == k)
                    .count()
            })
            .collect();
        let to = self
            .shared
            .transfer
            .mirrors
            .iter()
            .enumerate()
            .filter(|(_, m)| m.standing != Standing::Dropped)
            .min_by_key(|&(k, _)| counts[k])
            .map(|(k, _)| k);
        let c = &mut self.conns[j];
        match to {
            Some(k) => {
                c.mirror = k;
                c.dead = false;
                c.deferred = false;
                c.capped = false;
                c.failed_connects = 0;
                c.failures = 0;
                c.not_before = None;
            }
            None => c.dead = true,
        }
    }

    /// A try on mirror `k` failed (`counted`: it moved nothing forward): the reason to
    /// drop the mirror once `--max-tries` such tries came in a row and another mirror is
    /// left. A try that moved bytes forward starts the count again.
    pub(crate) fn mirror_failing(&mut self, k: usize, counted: bool, f: &crate::control::Fail) -> Option<String> {
        let max = self.shared.opts.max_tries;
        let m = &mut self.shared.transfer.mirrors[k];
        m.failures = if counted { m.failures + 1 } else { 0 };
        let failures = m.failures;
        (failures >= max && self.drops_mirror(k, f.kind))
            .then(|| format!("{} ({failures} failed tries in a row)", f.msg))
    }

    /// `msg` of the failure that ends the download, and with mirrors, when every other
    /// one was dropped, that none is left.
    pub(crate) fn no_mirror_left(&self, msg: String) -> String {
        let left = self
            .shared
            .transfer
            .mirrors
            .iter()
            .filter(|m| m.standing != Standing::Dropped)
            .count();
        if self.shared.transfer.mirrors.len() < 2 || left > 1 {
            return msg;
        }
        format!("{msg}; no mirror left (the others were dropped)")
    }

    /// Every connection of mirror `k` gave up: it cannot be reached.
    pub(crate) fn mirror_unreachable(&self, k: usize) -> bool {
        self.conns.iter().filter(|c| c.mirror == k).all(|c| self.gone(c))
    }

    /// What each mirror served, for the summary (empty with one URL).
    pub(crate) fn mirror_reports(&self) -> Vec<MirrorReport> {
        if self.shared.transfer.mirrors.len() < 2 {
            return Vec::new();
        }
        self.shared
            .transfer
            .mirrors
            .iter()
            .map(|m| MirrorReport {
                url: m.url.clone(),
                bytes: m.bytes,
                dropped: m.dropped.clone(),
            })
            .collect()
    }
}
