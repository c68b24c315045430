//! `--threads`, the owner's side: the helpers lent to one transfer ([`Remote`]), the
//! parts handed out ([`Loop::hand_out`]), the helpers' reports applied, the requests
//! served shared out, and the parts stopped when the transfer ends.

use std::sync::Arc;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use crate::control::origin::shares;
use crate::err;
use crate::error::Result;
use crate::event::Loop;
use crate::event::Summary;
use crate::event::mirrors::MirrorRoute;
use crate::event::wire::{Helpers, Lent, Order, PartFile, PartFlags, PartOrder};
use crate::report::Note;
use crate::schedule::Segment;
use crate::schedule::queue::Taken;
use crate::tag::Tag;

/// How long an ending owner waits for its helpers to stop their parts and report what
/// landed (each settles its writes within 10 s and checks its stop flag every tick).
const STOP_WAIT: Duration = Duration::from_secs(15);

/// How often at most a part out on a helper is asked for some of it back while it finds
/// nothing worth giving.
const ASK_AGAIN: Duration = Duration::from_millis(500);

/// How long a part out on a helper may go without landing a byte or having a request
/// served while its owner has nothing left to do, before the owner takes it back.
const RECALL: Duration = Duration::from_secs(1);

mod apply;
mod ask;

/// What a helper's parts counted, for the owner's summary. Connections are the most one
/// part used on each helper (a helper keeps its connections for its next part, whose
/// summary counts them again). Those that went to TLS, kTLS or the software record layer
/// count reconnects too: each part's hand-offs are summed, and the connections a part
/// found kept open ([`Summary::kept`]) count only in the helper's first part of the file
/// (later, they are the ones its parts before opened; a connection a placed file left idle
/// and a later part took is then not counted). Handshakes, KeyUpdates taken, retries and
/// splits are summed.
#[derive(Default)]
pub(crate) struct Counts {
    /// Per helper, its connections.
    conns: Vec<HelperConns>,
    tls_full: usize,
    tls_resumed: usize,
    /// KeyUpdates taken under kTLS, and by the software record layer.
    ktls_rekeys: usize,
    soft_rekeys: usize,
    retries: u64,
    resent: u64,
    steals: u64,
}

/// One helper's connections over the parts of one file.
#[derive(Clone, Copy, Default)]
struct HelperConns {
    /// The most one part used.
    most: usize,
    /// Those that went to TLS, to kTLS and to the software record layer (reconnects
    /// included).
    tls: usize,
    ktls: usize,
    soft: usize,
}

impl Counts {
    fn count(&mut self, helper: usize, s: &Summary) {
        if self.conns.len() < helper {
            self.conns.resize(helper, HelperConns::default());
        }
        let c = &mut self.conns[helper - 1];
        let first = c.most == 0;
        c.most = c.most.max(s.connections);
        // (The connections a part found kept open count in the helper's first part only.)
        let [kept_tls, kept_ktls, kept_soft] = s.kept;
        let add = |have: &mut usize, part: usize, kept: usize| {
            *have += if first { part } else { part.saturating_sub(kept) };
        };
        add(&mut c.tls, s.tls_conns, kept_tls);
        add(&mut c.ktls, s.ktls_conns, kept_ktls);
        add(&mut c.soft, s.soft_conns, kept_soft);
        self.tls_full += s.tls_full;
        self.tls_resumed += s.tls_resumed;
        self.ktls_rekeys += s.ktls_rekeys;
        self.soft_rekeys += s.soft_rekeys;
        self.retries += s.retries;
        self.resent += s.resent;
        self.steals += s.steals;
    }

    /// Adds the helpers' counts to the owner's summary `s`.
    pub(crate) fn add_to(&self, s: &mut Summary) {
        let sum = |f: fn(&HelperConns) -> usize| self.conns.iter().map(f).sum::<usize>();
        s.connections += sum(|c| c.most);
        s.tls_conns += sum(|c| c.tls);
        s.ktls_conns += sum(|c| c.ktls);
        s.soft_conns += sum(|c| c.soft);
        s.tls_full += self.tls_full;
        s.tls_resumed += self.tls_resumed;
        s.ktls_rekeys += self.ktls_rekeys;
        s.soft_rekeys += self.soft_rekeys;
        s.retries += self.retries;
        s.resent += self.resent;
        s.steals += self.steals;
    }
}

/// The helpers lent to one transfer for its run (`None` when another has them), as its
/// owner's [`Remote`]. `shares`: connections per reactor (the owner's first), at most one
/// per helper running and the owner; `mail`: the block of the owner's eventfd READ.
pub(crate) fn lend(
    helpers: &mut Helpers,
    mut shares: Vec<usize>,
    routes: Vec<MirrorRoute>,
    mail: uring::Buf,
) -> Option<Remote> {
    shares.truncate(helpers.len() + 1);
    let n = shares.len() - 1;
    let lent = helpers.lend(n)?;
    Some(Remote {
        lent,
        mail: Some(mail),
        shares,
        allot: None,
        routes: Some(routes),
        file: None,
        parts: (0..n).map(|_| None).collect(),
        landed_by: vec![0; n],
        by_others: 0,
        given: 0,
        counts: Counts::default(),
    })
}

/// A part out on a helper, as its owner sees it.
struct Out {
    range: (u64, u64),
    /// Ranges of `range` not the part's ([`PartOrder`]'s holes): never a gap of
    /// its end.
    holes: Vec<(u64, u64)>,
    tries: u32,
    /// What it shares with its helper: its stop, an ask to give some back
    /// ([`crate::event::wire::Report::Gave`]), the others' requests.
    flags: PartFlags,
    /// When it was last asked, until it answers (`asked.1`: answered).
    asked: Option<(Instant, bool)>,
    /// What of it the helper gave back (queued here): never a gap of its end.
    given: Vec<(u64, u64)>,
    /// Bytes of it landed so far.
    landed: u64,
    /// Its requests the server serves, as last told.
    serving: usize,
    /// When it last moved: bytes landed, or a request served.
    moved: Instant,
    /// Why it failed, as its helper said ([`crate::event::wire::Report::Blame`]).
    counted: Option<(u64, u64)>,
    changed: bool,
    /// The wait its helper judged for that failure, and whether it holds the origin.
    wait: Duration,
    hold: bool,
}

/// The owner's side: the helpers lent to one transfer.
pub(crate) struct Remote {
    /// The helpers' channels, lent.
    lent: Lent,
    /// The eventfd READ's block, until the first READ takes it (each completion gives it
    /// back for the next).
    mail: Option<uring::Buf>,
    /// Connections per reactor (index 0: the owner's).
    shares: Vec<usize>,
    /// Per helper: the connections it may open for this transfer, set at the first
    /// hand-out: what the file is worth over every reactor (`--min-split-size`: a run
    /// opens no connection it does not use), shared out as `-x` is ([`shares`]),
    /// the owner's part first (its `wanted` lowered to it).
    allot: Option<Vec<usize>>,
    /// The transfer's routes, until its first answer made the part file.
    routes: Option<Vec<MirrorRoute>>,
    file: Option<Arc<PartFile>>,
    /// Per helper: the part it has.
    parts: Vec<Option<Out>>,
    /// Per helper: bytes it landed.
    landed_by: Vec<u64>,
    /// Bytes the helpers landed, and parts handed out (for the summary).
    pub(crate) by_others: u64,
    pub(crate) given: usize,
    /// What the helpers' parts counted.
    pub(crate) counts: Counts,
}

impl Remote {
    /// The helpers' channels, to give back at the transfer's end.
    pub(crate) fn into_lent(self) -> Lent {
        self.lent
    }

    /// A part is out on a helper.
    pub(crate) fn busy(&self) -> bool {
        self.parts.iter().any(Option::is_some)
    }

    /// Reactors that fetched bytes of the file: the owner, and each helper that landed
    /// some.
    pub(crate) fn reactors(&self) -> usize {
        1 + self.landed_by.iter().filter(|&&b| b > 0).count()
    }

    /// The helper threads lent (the other reactors).
    pub(crate) fn helpers(&self) -> usize {
        self.lent.nudges.len()
    }

    /// The owner's connections.
    pub(crate) fn own(&self) -> usize {
        self.shares[0]
    }

    /// The helpers' requests the server serves now, as last told (their connections with
    /// a body coming, for the progress line).
    pub(crate) fn serving(&self) -> usize {
        self.parts.iter().flatten().map(|o| o.serving).sum()
    }
}

impl Loop<'_> {
    /// The first READ of the eventfd the helpers ring (a transfer that has them).
    pub(crate) fn arm_mail(&mut self, buf: Option<uring::Buf>) -> Result<()> {
        let Some(r) = &self.remote else {
            return Ok(());
        };
        let fd = r.lent.bell;
        let Some(buf) = buf.or_else(|| self.remote.as_mut().and_then(|r| r.mail.take())) else {
            return Err(err!(Internal, "no block for the reactors' eventfd"));
        };
        self.read_eventfd(fd, buf, Tag::Mail)
    }

    /// Gives each free helper a part of the queue, once the first answer planned it (a
    /// regular file served in ranges, no failure pending).
    pub(crate) fn hand_out(&mut self) -> Result<()> {
        let transfer = &self.shared.transfer;
        if self.remote.is_none()
            || !transfer.plan.is_planned()
            || !transfer.ranges
            || !transfer.file
            || transfer.plain_get
            || self.shared.fatal.is_some()
        {
            return Ok(());
        }
        let now = transfer.started.elapsed();
        let remaining = transfer.total.unwrap_or(0).saturating_sub(transfer.landed.bytes());
        let (min_split, own) = (self.shared.opts.min_split_size, transfer.wanted);
        let opened = self.conns.iter().filter(|c| c.engaged).count();
        let Some(r) = self.remote.as_mut() else {
            return Ok(());
        };
        if r.allot.is_none() {
            // The connections the file is worth over every reactor, shared out as `-x`
            // is (the owner's first): a file worth fewer than `-x` still spreads. The
            // owner keeps its part of them, or what it opened already (this runs before
            // `kick`, so that is its first connection alone).
            let all = crate::schedule::connections_for(remaining, min_split, r.shares.iter().sum(), 1);
            let split = shares(all, r.shares.len());
            let mine = split[0].max(opened).min(own);
            self.shared.transfer.wanted = mine;
            let mut left = all.saturating_sub(mine);
            r.allot = Some(
                (1..r.shares.len())
                    .map(|h| {
                        let a = split.get(h).copied().unwrap_or(0).min(r.shares[h]).min(left);
                        left -= a;
                        a
                    })
                    .collect(),
            );
        }
        let transfer = &self.shared.transfer;
        let Some(allot) = r.allot.as_mut() else {
            return Ok(());
        };
        // A part that has not moved for RECALL while this reactor has nothing to do (its
        // helper's connections parked under a cap or a Retry-After, or stalled) comes
        // back: the helper stops it, its rest goes back to the queue with no try counted,
        // and that helper takes no more of this transfer. (Work stealing between
        // reactors the other way: this one takes a part back.)
        if transfer.plan.is_drained() && self.conns.iter().all(|c| c.rx.job.is_none()) {
            for (h, out) in r.parts.iter().enumerate() {
                if let Some(out) = out.as_ref().filter(|o| o.serving == 0 && o.moved.elapsed() >= RECALL) {
                    out.flags.stop();
                    allot[h] = 0;
                }
            }
        }
        // (While the origin is held — a Retry-After, a 503 or 429 — no part goes either.)
        if transfer.plan.held(now, 0) {
            return Ok(());
        }
        let free: Vec<(usize, usize)> = (0..r.parts.len())
            .filter(|&h| r.parts[h].is_none() && allot[h] > 0)
            .map(|h| (h, allot[h]))
            .collect();
        for (h, share) in free {
            // As many bytes as the helper's connections are worth (`--min-split-size`
            // each); with the queue empty, the second half of the largest running body
            // (work stealing between reactors).
            let queued: u64 = self.shared.transfer.plan.segments().map(|s| s.end - s.start).sum();
            let all: usize = self.remote.as_ref().map_or(1, |r| r.shares.iter().sum());
            let want = (share as u64 * self.shared.opts.min_split_size).max(queued * share as u64 / (2 * all as u64));
            // (Scattered: a resume's gaps go out together, one part over the helper's
            // connections, not one gap at a time over one of them.)
            let taken = match self.shared.transfer.plan.take_back(want, now, true) {
                Some(t) => Some((t, None)),
                // (Only while every slot of this reactor has a body to read or will carry
                // nothing more: an idle or connecting one of its own takes the split
                // itself, and so does one not opened yet that may open. Handed out first,
                // the split left that slot's new connection nothing worth stealing: an
                // unused connection.)
                None if self.shared.transfer.plan.is_drained()
                    && self.conns.iter().all(|c| c.rx.job.is_some() || self.gone(c)) =>
                {
                    self.steal_victim(None)
                        .and_then(|(v, at)| Some((v, self.split_off(v, at)?)))
                        .map(|(v, s)| (Taken::from(s), Some(v)))
                }
                None => None,
            };
            let Some((t, from)) = taken else {
                break;
            };
            let (a, b) = (t.start, t.end);
            if !self.send_part(h, share, &t)? {
                // The helper's thread is gone (or the output cannot be shared): its share
                // stays with the owner (each taken segment, front first as they were).
                for (s, e) in t.segments().into_iter().rev() {
                    self.shared.transfer.plan.requeue(seg(s, e, t.tries), false);
                }
            } else if let Some(from) = from {
                self.shared.report.note(Note::StealToReactor {
                    reactor: h + 1,
                    from,
                    first: a,
                    last: b - 1,
                });
            }
        }
        self.ask_back();
        Ok(())
    }

    /// Sends part `t` (its segments tried `t.tries` times) to helper `h` (0-based) with
    /// `share` connections; false when it cannot go.
    fn send_part(&mut self, h: usize, share: usize, t: &Taken) -> Result<bool> {
        let (range, tries) = ((t.start, t.end), t.tries);
        let own = self.serving(0);
        let transfer = &self.shared.transfer;
        let (Some(total), Some(r)) = (transfer.total, self.remote.as_mut()) else {
            return Ok(false);
        };
        if r.file.is_none() {
            let Some(part_out) = transfer.out.part_of()? else {
                return Ok(false);
            };
            let mut o = (*self.shared.opts).clone();
            o.checksum = None;
            (o.condition, o.kept) = (None, None);
            o.etag_save = None;
            o.json = None;
            o.limit_rate = None;
            // A part ends at its first counted failure: its owner counts the tries and
            // gives the rest to whichever reactor is free.
            o.max_tries = 1;
            r.file = Some(Arc::new(PartFile {
                routes: r.routes.take().unwrap_or_default(),
                opts: o,
                out: part_out,
                engine: self.end_state.engine.0,
                ktls: self.end_state.engine.1,
                total,
                validator: transfer.validator.clone(),
            }));
        }
        // (What the others have on the wire now; the owner posts it again each tick.)
        let helpers: usize = r.parts.iter().flatten().map(|o| o.serving).sum();
        let flags = PartFlags::new(own + helpers, Arc::clone(&r.lent.nudges[h]));
        let file = Arc::clone(r.file.as_ref().expect("made above"));
        let order = PartOrder::new((r.lent.lending, h + 1), file, range, t.holes.clone(), share, &flags);
        if !r.lent.send(h, Order::Part(order)) {
            return Ok(false);
        }
        r.given += 1;
        r.parts[h] = Some(Out {
            range,
            holes: t.holes.clone(),
            tries,
            flags,
            asked: None,
            given: Vec::new(),
            landed: 0,
            serving: 0,
            moved: Instant::now(),
            counted: None,
            changed: false,
            wait: Duration::ZERO,
            hold: false,
        });
        Ok(true)
    }

    /// The eventfd rang: what the helpers reported is applied, and the READ goes again.
    pub(crate) fn on_mail(&mut self, buf: Option<uring::Buf>) -> Result<()> {
        self.drain_mail();
        self.arm_mail(buf)
    }

    /// Applies what the helpers reported so far (also when the run's reactor took the
    /// eventfd's wake-up: [`crate::reactors::lanes`] READs it too while it places files).
    pub(crate) fn drain_mail(&mut self) {
        while let Some(m) = self.remote.as_ref().and_then(|r| r.lent.try_report()) {
            self.apply(m);
        }
        self.share_serving();
    }

    /// Each turn of a transfer spread over reactors: the requests served are shared out at
    /// once when they change (a cap's refusal is judged by them); what landed goes each
    /// tick ([`Loop::on_tick`]).
    pub(crate) fn sync_reactors(&mut self) {
        self.sync_placed();
        if self.remote.is_none() && self.part.is_none() {
            return;
        }
        let serving = self.serving(0);
        if let Some(p) = self.part.as_mut().filter(|p| p.serving_changed(serving)) {
            p.tell_landed(&self.shared.transfer.landed, serving);
        }
        self.share_serving();
    }

    /// The requests each reactor of the transfer has on the wire, shared out (each tick
    /// and after reports): this reactor counts its helpers' toward the server's cap, and
    /// each helper is posted the owner's and the other helpers'. A helper counts the
    /// owner's in its own [`crate::control::origin::Origin::remote`] ([`Loop::on_tick`]).
    pub(crate) fn share_serving(&mut self) {
        if let Some(p) = &self.part {
            let others = p.others();
            for o in &mut self.shared.origins {
                o.remote = others;
            }
            return;
        }
        let own = self.serving(0);
        let Some(r) = &self.remote else {
            return;
        };
        let helpers: usize = r.parts.iter().flatten().map(|o| o.serving).sum();
        for out in r.parts.iter().flatten() {
            out.flags.post_others(own + helpers - out.serving);
        }
        for o in &mut self.shared.origins {
            o.remote = helpers;
        }
    }

    /// Stops the parts out on helpers and waits (at most [`STOP_WAIT`]) until each said
    /// what it landed and that it ended: the control file and the `.part` then hold every
    /// byte a helper wrote. A helper that does not answer is said in a note.
    pub(crate) fn stop_parts(&mut self) {
        let Some(r) = self.remote.as_ref() else {
            return;
        };
        for out in r.parts.iter().flatten() {
            out.flags.stop();
        }
        let deadline = Instant::now() + STOP_WAIT;
        while self.remote.as_ref().is_some_and(Remote::busy) {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = match self.remote.as_ref().map(|r| r.lent.report_within(left)) {
                Some(Ok(m)) => m,
                Some(Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected)) | None => {
                    self.shared.report.note(Note::WritesPending);
                    return;
                }
            };
            self.apply(m);
        }
    }
}

fn seg(start: u64, end: u64, tries: u32) -> Segment {
    Segment {
        start,
        end,
        tries,
        grace: false,
    }
}

#[cfg(test)]
mod tests {
    use super::Counts;
    use crate::event::Summary;
    use crate::report::summary::tests::summary;

    /// A part's summary: `tls` hand-offs and first uses, `kept` of them kept from before.
    fn part(conns: usize, tls: usize, kept: usize) -> Summary {
        let mut s = summary("TLSv1.3 TLS13_AES_256_GCM_SHA384", 0, tls);
        s.connections = conns;
        s.soft_conns = tls;
        s.kept = [kept, 0, kept];
        s
    }

    /// A helper's connections are summed over its parts, not the most of one part: a
    /// second part that reconnected counts its new connections (the server served 3,
    /// not "2 of 2 TLS connections"), and a connection kept between parts counts once.
    #[test]
    fn a_helpers_reconnects_count_and_its_kept_connections_count_once() {
        let mut c = Counts::default();
        c.count(1, &part(2, 2, 0));
        // One connection kept from the part before; the other was closed by the server
        // and this part opened it twice.
        c.count(1, &part(2, 3, 1));
        // Helper 2's first part found a connection kept from another file: it counts.
        c.count(2, &part(1, 1, 1));
        let mut s = summary("TLSv1.3 TLS13_AES_256_GCM_SHA384", 0, 1);
        s.soft_conns = 1;
        c.add_to(&mut s);
        assert_eq!(
            (s.connections, s.tls_conns, s.soft_conns),
            (1 + 2 + 1, 1 + 4 + 1, 1 + 4 + 1)
        );
    }
}
