//! Mirrors: one file from several URLs (aria2c's feature). The first URL in the given
//! order whose first answer (the probe) comes is the *reference*; every other mirror's
//! first answer must agree with it (the same size, and the same strong ETag — else the
//! same Last-Modified — unless a `--checksum` will prove the bytes) before it gets
//! segments. A mirror that disagrees, cannot be reached, or keeps failing is *dropped*:
//! its unfinished segments go back to the queue for the others, and its connections move
//! to the mirrors left. The download fails only when no mirror is left.
//!
//! The loop's connection machinery (addresses, Happy Eyeballs, proxy, TLS name, request
//! fields) works on one URL at a time: each mirror keeps its own copy in a [`Way`], and
//! [`Loop::enter`] swaps the way of the connection being handled into the loop's fields.
//! With one URL nothing is ever swapped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use http::Url;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;

use crate::control::proxy::{Proxy, Route};
use crate::error::{Kind, Result};
use crate::event::Loop;
use crate::report::{MirrorReport, Note};
use crate::schedule::Segment;

/// Said after dropping a mirror whose validator differs (no `--checksum` was given).
pub(crate) const CHECKSUM_HINT: &str =
    " (with --checksum, mirrors whose validators differ are used: the digest proves the bytes)";

/// One URL of the file and how to reach it, as the command prepared it.
pub struct MirrorRoute<'a> {
    /// The URL (after the redirects followed so far).
    pub url: &'a Url,
    /// Extra request fields for this URL: `-H`, and credentials on its origin.
    pub headers: &'a [(String, String)],
    /// The TLS client configuration for an https URL.
    pub tls: Option<Arc<ClientConfig>>,
    /// Addresses and proxy (chosen for this URL's host).
    pub route: Route,
}

/// A mirror's connection state while another mirror's is in the loop's fields.
pub(crate) struct Way<'a> {
    url: &'a Url,
    headers: &'a [(String, String)],
    proxy: Option<Proxy>,
    tls: Option<Arc<ClientConfig>>,
    server_name: Option<ServerName<'static>>,
    addrs: Vec<SocketAddr>,
    addr_next: usize,
    addr_proven: bool,
    attempt_started: Option<Instant>,
}

impl<'a> Way<'a> {
    /// The way of `m`: its TLS name is checked here (an https URL's host must be a valid
    /// server name).
    ///
    /// # Errors
    /// `Usage` for a host that is no valid TLS server name.
    pub(crate) fn new(m: MirrorRoute<'a>) -> Result<Way<'a>> {
        let server_name = match &m.tls {
            Some(_) => Some(crate::control::tls::server_name(m.url.host())?),
            None => None,
        };
        Ok(Way {
            url: m.url,
            headers: m.headers,
            proxy: m.route.proxy,
            tls: m.tls,
            server_name,
            addrs: m.route.addrs,
            addr_next: 0,
            addr_proven: false,
            attempt_started: None,
        })
    }

    /// Moves the pieces out for the loop's fields, leaving a stand-in: (url, headers,
    /// proxy, tls, server name, addresses).
    #[allow(clippy::type_complexity)]
    pub(crate) fn take(
        &mut self,
    ) -> (
        &'a Url,
        &'a [(String, String)],
        Option<Proxy>,
        Option<Arc<ClientConfig>>,
        Option<ServerName<'static>>,
        Vec<SocketAddr>,
    ) {
        let w = std::mem::replace(self, Way::placeholder(self.url, self.headers));
        (w.url, w.headers, w.proxy, w.tls, w.server_name, w.addrs)
    }

    /// A stand-in for the way that is in the loop's fields.
    fn placeholder(url: &'a Url, headers: &'a [(String, String)]) -> Way<'a> {
        Way {
            url,
            headers,
            proxy: None,
            tls: None,
            server_name: None,
            addrs: Vec::new(),
            addr_next: 0,
            addr_proven: false,
            attempt_started: None,
        }
    }
}

/// Where a mirror stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Its first answer has not come yet.
    Pending,
    /// It agrees with the reference (or is the reference): it serves segments.
    Accepted,
    /// Left out for the rest of the download.
    Dropped,
}

/// A mirror's standing and what it served.
#[derive(Clone, Debug)]
pub(crate) struct Mirror {
    pub(crate) url: String,
    pub(crate) standing: Standing,
    /// The validators of its first answer.
    pub(crate) validators: Validators,
    /// Its first answer's validator as the download compares it (see
    /// [`http::Response::validator`]): later answers must carry the same.
    pub(crate) validator: Option<Vec<u8>>,
    /// Body bytes it delivered.
    pub(crate) bytes: u64,
    /// Counted tries in a row that failed on it (any segment): a mirror that fails
    /// `--max-tries` times in a row is dropped even while each segment's own tries last
    /// (the segments succeed on the other mirrors).
    pub(crate) failures: u32,
    /// Rounds of connects to it that failed in a row (refused, timed out, unreachable),
    /// each counted once however many connections saw it: after `--max-tries` of them it
    /// cannot be reached. A connect that goes through starts the count again.
    pub(crate) connects_failed: u32,
    /// Why it was dropped.
    pub(crate) dropped: Option<String>,
}

impl Mirror {
    pub(crate) fn new(url: &Url) -> Mirror {
        Mirror {
            url: url.to_string(),
            standing: Standing::Pending,
            validators: Validators::default(),
            validator: None,
            bytes: 0,
            failures: 0,
            connects_failed: 0,
            dropped: None,
        }
    }
}

/// The validators of an answer that mirrors are compared by (RFC 9110 §8.8): a strong
/// `ETag` and `Last-Modified`, as sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Validators {
    pub(crate) etag: Option<Vec<u8>>,
    pub(crate) last_modified: Option<Vec<u8>>,
}

impl Validators {
    /// The strong `ETag` (a weak one proves nothing about the bytes, RFC 9110 §8.8.1) and
    /// the `Last-Modified` of `resp`.
    pub(crate) fn of(resp: &http::Response<'_, '_>) -> Validators {
        let etag = match resp.validator() {
            Some(http::Validator::ETag { value, weak: false }) => Some(value.to_vec()),
            _ => None,
        };
        let last_modified = resp
            .header("last-modified")
            .filter(|v| !v.is_empty())
            .map(<[u8]>::to_vec);
        Validators { etag, last_modified }
    }

    /// Whether a mirror with these validators serves the same file as `reference`: both
    /// strong ETags equal, else (one has none) both Last-Modified equal. `Err` says why not.
    pub(crate) fn agree_with(&self, reference: &Validators) -> std::result::Result<(), String> {
        let show = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
        if let (Some(a), Some(b)) = (&self.etag, &reference.etag) {
            return if a == b {
                Ok(())
            } else {
                Err(format!("ETag {} differs from the reference's {}", show(a), show(b)))
            };
        }
        match (&self.last_modified, &reference.last_modified) {
            (Some(a), Some(b)) if a == b => Ok(()),
            (Some(a), Some(b)) => Err(format!(
                "Last-Modified {} differs from the reference's {}",
                show(a),
                show(b)
            )),
            _ => Err("no validator (strong ETag or Last-Modified) to compare with the reference's".to_owned()),
        }
    }
}

impl<'a> Loop<'a> {
    /// Swaps mirror `k`'s way into the loop's fields (the one there goes back to its slot).
    pub(crate) fn enter(&mut self, k: usize) {
        if k == self.active {
            return;
        }
        let from = self.active;
        self.swap_way(from);
        self.swap_way(k);
        self.active = k;
    }

    /// [`Loop::enter`] for connection `i`'s mirror.
    pub(crate) fn enter_conn(&mut self, i: usize) {
        self.enter(self.conns[i].mirror);
    }

    fn swap_way(&mut self, k: usize) {
        let w = &mut self.ways[k];
        std::mem::swap(&mut self.sh.url, &mut w.url);
        std::mem::swap(&mut self.sh.headers, &mut w.headers);
        std::mem::swap(&mut self.sh.proxy, &mut w.proxy);
        std::mem::swap(&mut self.tls, &mut w.tls);
        std::mem::swap(&mut self.server_name, &mut w.server_name);
        std::mem::swap(&mut self.addrs, &mut w.addrs);
        std::mem::swap(&mut self.addr_next, &mut w.addr_next);
        std::mem::swap(&mut self.addr_proven, &mut w.addr_proven);
        std::mem::swap(&mut self.attempt_started, &mut w.attempt_started);
    }

    /// How many addresses mirror `k` has.
    pub(crate) fn addr_count(&self, k: usize) -> usize {
        if k == self.active {
            self.addrs.len()
        } else {
            self.ways[k].addrs.len()
        }
    }

    /// The mirror the first request goes to: the first one given that is not dropped.
    pub(crate) fn probe_mirror(&self) -> Option<usize> {
        self.sh.mirrors.iter().position(|m| m.standing != Standing::Dropped)
    }

    /// A failure of `kind` on mirror `k` drops that mirror instead of failing the
    /// download: there are mirrors, another one is left, and the failure is the server's
    /// (not the disk's, not an interrupt).
    pub(crate) fn drops_mirror(&self, k: usize, kind: Kind) -> bool {
        let left = self
            .sh
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
        let m = &mut self.sh.mirrors[k];
        if m.standing == Standing::Dropped {
            return Ok(());
        }
        m.standing = Standing::Dropped;
        m.dropped = Some(why.clone());
        let url = m.url.clone();
        // What a dropped mirror served differently is no change of the file.
        self.sh.changed = false;
        self.sh.report.note(Note::MirrorDropped { url, why, hint });
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
                let trim = self.sh.direct.then_some(self.sh.align);
                job.placer.release(trim, &mut self.sh.to_write)
            } else {
                job.placer.discard()
            };
            self.sh.plan.requeue(job.seg.released(from, self.sh.ranges), job.probe);
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
        if !self.sh.to_write.iter().any(|wb| wb.source == k) {
            return;
        }
        let mut dropped: Vec<(u64, u64)> = Vec::new();
        self.sh.to_write.retain(|wb| {
            if wb.source == k {
                dropped.push((wb.off, wb.off + wb.fill as u64));
                false
            } else {
                true
            }
        });
        dropped.sort_unstable_by_key(|r| std::cmp::Reverse(r.0));
        for (start, end) in dropped {
            self.sh.plan.requeue(
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
    fn reassign(&mut self, j: usize) {
        let counts: Vec<usize> = (0..self.sh.mirrors.len())
            .map(|k| {
                self.conns
                    .iter()
                    .enumerate()
                    .filter(|&(o, c)| o != j && c.mirror == k)
                    .count()
            })
            .collect();
        let to = self
            .sh
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
                c.addr_i = 0;
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
        let max = self.sh.opts.max_tries;
        let m = &mut self.sh.mirrors[k];
        m.failures = if counted { m.failures + 1 } else { 0 };
        let failures = m.failures;
        (failures >= max && self.drops_mirror(k, f.kind))
            .then(|| format!("{} ({failures} failed tries in a row)", f.msg))
    }

    /// `msg` of the failure that ends the download, and with mirrors, when every other
    /// one was dropped, that none is left.
    pub(crate) fn no_mirror_left(&self, msg: String) -> String {
        let left = self
            .sh
            .mirrors
            .iter()
            .filter(|m| m.standing != Standing::Dropped)
            .count();
        if self.sh.mirrors.len() < 2 || left > 1 {
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
        if self.sh.mirrors.len() < 2 {
            return Vec::new();
        }
        self.sh
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

#[cfg(test)]
mod tests {
    use super::*;

    fn v(etag: Option<&str>, lm: Option<&str>) -> Validators {
        Validators {
            etag: etag.map(|s| s.as_bytes().to_vec()),
            last_modified: lm.map(|s| s.as_bytes().to_vec()),
        }
    }

    #[test]
    fn strong_etags_decide_when_both_have_one() {
        let r = v(Some("\"a\""), Some("Mon"));
        assert!(v(Some("\"a\""), Some("Tue")).agree_with(&r).is_ok());
        let e = v(Some("\"b\""), Some("Mon")).agree_with(&r).unwrap_err();
        assert!(e.contains("ETag \"b\" differs"), "{e}");
    }

    #[test]
    fn last_modified_decides_without_two_etags() {
        let r = v(Some("\"a\""), Some("Mon"));
        assert!(v(None, Some("Mon")).agree_with(&r).is_ok());
        assert!(
            v(None, Some("Tue"))
                .agree_with(&r)
                .unwrap_err()
                .contains("Last-Modified")
        );
        assert!(v(None, None).agree_with(&r).unwrap_err().contains("no validator"));
        assert!(v(Some("\"a\""), None).agree_with(&v(None, None)).is_err());
    }
}
