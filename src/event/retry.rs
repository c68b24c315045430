//! A connection's failure: what landed is kept, the rest of its segment requeued, the try
//! counted (or not), the slot backed off, parked (a server's connection cap) or given up.

use crate::control::origin::QUICK_CLOSE;
use crate::control::{Fail, Job, St};
use crate::err;
use crate::error::{Error, Kind, Result};
use crate::event::Loop;
use crate::report::Note;
use crate::schedule::Segment;
use crate::schedule::retry::{self, Attempt, Cap, Verdict, n_tries};
use crate::transfer::mirror::Standing;
use std::time::{Duration, Instant};

mod connects;
pub(crate) use connects::REFUSED_WAIT;

/// A slot the server turned away (a per-client connection cap) asks again after this;
/// turned away again, after twice as long, up to [`CAP_RETRY_MOST`] ([`parked_wait`]).
pub(crate) const CAP_RETRY: Duration = Duration::from_secs(2);

/// The longest a parked slot waits before it asks again: a slot whose transfer is served
/// by the origin waits this long at most, and is woken sooner when another transfer to
/// the origin ends ([`Loop::wake_parked`]; a transfer served nothing asks every
/// [`CAP_RETRY`]).
pub(crate) const CAP_RETRY_MOST: Duration = Duration::from_secs(16);

/// How long a slot turned away `refusals` times in a row (1 or more) waits before it asks
/// again: 2, 4, 8, then 16 s.
pub(crate) fn parked_wait(refusals: u32) -> Duration {
    (CAP_RETRY * 2u32.pow(refusals.clamp(1, 4) - 1)).min(CAP_RETRY_MOST)
}

/// How late a server may see a close of ours: a request sent less than this after slots
/// to its origin were parked may have met a count that still held them ([`Loop::fail`]).
pub(crate) const LATE_CLOSE: Duration = Duration::from_secs(1);

/// A jitter in `[0, 1)` for [`retry::backoff`], from the clock's nanoseconds.
fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    f64::from(nanos % 1000) / 1000.0
}

/// What the other connections to a failed connection's origin were doing when it failed
/// ([`Loop::scene`]).
struct Scene {
    /// The failure as [`retry`] judges it.
    attempt: Attempt,
    /// Slots to the origin parked since the failed request went out, or just before it
    /// (less than [`LATE_CLOSE`]).
    crowd: Vec<usize>,
    /// Idle connections to the origin open beside the failed one.
    idle: Vec<usize>,
}

/// How a failure was counted, for the wait of the slot that failed ([`Loop::back_off`]).
struct Counted {
    /// Our own crowd turned it away ([`Verdict::Crowded`]).
    crowded: bool,
    /// The tries the count stands at: the segment's, the origin's failed rounds of
    /// connects, or the slot's failures without a request.
    tries: u32,
    /// The failed segment's wait, which the slot waits too before it reconnects.
    seg_wait: Option<Duration>,
    /// How long a failed round of connects holds the origin.
    origin_wait: Option<Duration>,
}

impl Loop<'_> {
    /// How many connections to mirror `k`'s origin the server was serving when it turned connection
    /// `i` away: those other than `i` that are open and whose answer was accepted (its
    /// head, or body bytes, came), not ones whose request is still unanswered. Counted when
    /// the refusal comes, not on every tick: a count of every connection receiving would
    /// include a response the server has finished on its side (its tail still on its way
    /// here) and overstate the cap by one.
    pub(crate) fn allowed(&self, k: usize, i: usize) -> usize {
        // (The other transfers' requests to the origin count too: `Origin::others`.)
        self.shared.origin(k).elsewhere()
            + self
                .conns
                .iter()
                .enumerate()
                .filter(|&(j, c)| j != i && self.same_origin(c.mirror, k) && c.st == St::Open && !c.capped)
                .filter_map(|(_, c)| c.rx.job.as_ref())
                .filter(|jb| jb.got_bytes || jb.placer.delimiter().is_some())
                .count()
    }

    /// Mirror `k`'s server turned a connection away while it served `took`: what its origin
    /// allows is the most seen over this transfer's refusals (at least 1), kept with the
    /// origin for the run's later files ([`Loop::origin_room`]).
    pub(crate) fn learn_cap(&mut self, k: usize, took: usize) {
        let seen = &mut self.shared.transfer.mirrors[k].allows_seen;
        let most = crate::control::origin::OriginCap::learn(*seen, took);
        *seen = Some(most);
        self.shared.origin_mut(k).allows = Some(most);
    }

    /// A connection failed: keep the aligned bytes it placed, requeue the rest of its
    /// segment, close it, and reconnect when work is left.
    ///
    /// The decision, in order: a dropped mirror's connection is released; a failure not
    /// worth a retry ends the mirror or the transfer ([`Loop::give_up`]); an operation in
    /// flight is cancelled first (its buffer comes back with the completion); a kept-alive
    /// connection closed under an unanswered request sends it again ([`Loop::resend`]).
    /// Otherwise the failure is counted — with its request ([`Loop::requeue_failed`]) or
    /// without ([`Loop::count_connection_failure`]) —, a crowd of our own connections is
    /// thinned ([`Loop::ease_crowd`]), and the slot is parked under a connection cap
    /// ([`Loop::park`]) or waits before it reconnects ([`Loop::back_off`]).
    pub(crate) fn fail(&mut self, i: usize, f: Fail) -> Result<()> {
        let k = self.conns[i].mirror;
        if self.shared.transfer.mirrors[k].standing == Standing::Dropped {
            // Its mirror was dropped while an operation was in flight.
            return self.release_conn(i);
        }
        if !f.retry {
            return self.give_up(k, f.kind, f.msg, f.hint, None);
        }
        if self.conns[i].busy() {
            // Wait for the in-flight operation: its buffer comes back with the completion.
            return self.cancel_op(i);
        }
        if f.step_down {
            return self.step_down(i, &f);
        }
        let scene = self.scene(i, k, &f);
        if retry::resend(&scene.attempt) {
            return self.resend(i, &f);
        }
        let capped = retry::parked(&scene.attempt);
        let connect_failed = self.conns[i].st == St::Connecting;
        let counted = match self.conns[i].rx.job.take() {
            Some(job) => match self.requeue_failed(i, k, job, &f, scene.attempt, capped)? {
                Some(counted) => counted,
                None => return Ok(()),
            },
            None => self.count_connection_failure(i, k, &f, capped),
        };
        if counted.crowded {
            self.ease_crowd(i, k, &f, &scene);
        }
        // Bytes already spliced into this slot's pipe are good: let them reach the file.
        self.drain(i)?;
        self.close(i);
        if capped {
            return self.park(i, k, &f, counted.crowded);
        }
        self.back_off(i, k, &f, connect_failed, &counted)
    }

    /// The failure `msg` (of kind `kind`) ends mirror `k` while another mirror is left —
    /// which takes `seg` (with its probe flag) with fresh tries — or else the transfer.
    fn give_up(
        &mut self,
        k: usize,
        kind: Kind,
        msg: String,
        hint: &'static str,
        seg: Option<(Segment, bool)>,
    ) -> Result<()> {
        if self.drops_mirror(k, kind) {
            if let Some((seg, probe)) = seg {
                self.shared.transfer.plan.requeue(Segment { tries: 0, ..seg }, probe);
            }
            return self.drop_mirror(k, msg, hint);
        }
        self.shared.fatal = Some(Error::new(kind, self.no_mirror_left(msg)));
        Ok(())
    }

    /// What the other connections to mirror `k`'s origin were doing when connection `i`
    /// failed with `f`, and the attempt [`retry`] judges.
    fn scene(&self, i: usize, k: usize, f: &Fail) -> Scene {
        // A server that caps connections per client turns the extra ones away (503, a
        // refused or reset connect) while the others run: that lowers the concurrency, it
        // is no failed try, and the download goes on with the connections it has.
        // Another connection to the origin is being served: receiving a body, open after
        // an answer on it (between two requests: the server took it and keeps it), or
        // with its request on the wire once the first answer came (the server counts it;
        // its answer may be sitting unread beside this one).
        let planned = self.shared.transfer.plan.is_planned();
        let others_progress = self.conns.iter().enumerate().any(|(j, o)| {
            j != i
                && o.mirror == k
                && !o.capped
                && match o.rx.job.as_ref() {
                    Some(jb) => jb.got_bytes || (o.st == St::Open && (o.requests > 1 || planned)),
                    None => o.st == St::Open && o.requests > 0,
                }
        });
        // (A spread transfer's requests on its other reactors are its own too: `remote`.)
        let others_progress = others_progress || self.shared.origin(k).remote > 0;
        // Slots to the origin parked since this request went out, or just before (less
        // than [`LATE_CLOSE`]): the server may still have counted them when it judged this
        // one (it turned them away at about the same moment, and sees a close only when
        // its thread for it runs), so a refusal of this one is about our own crowd, as
        // with idle ones: a try and a short backoff, not a long Retry-After on the origin.
        let sent = self.conns[i].rx.job.as_ref().map(|jb| jb.started);
        let crowd: Vec<usize> = match sent {
            Some(t) => (0..self.conns.len())
                .filter(|&j| {
                    let o = &self.conns[j];
                    j != i
                        && self.same_origin(o.mirror, k)
                        && o.capped
                        && o.parked_at.is_some_and(|p| p + LATE_CLOSE >= t)
                })
                .collect(),
            None => Vec::new(),
        };
        let idle = self.idle_to(k, i);
        // Nothing of the answer came: no head byte, no body byte.
        let silent = self.conns[i]
            .rx
            .job
            .as_ref()
            .is_some_and(|jb| !jb.got_bytes && jb.placer.delimiter().is_none())
            && self.conns[i].rx.head.is_empty();
        let attempt = Attempt {
            busy: f.busy,
            stalled: f.stalled,
            others_progress,
            others_served: self.shared.origin(k).elsewhere() > 0,
            planned,
            ranges: self.shared.transfer.ranges,
            reused: self.conns[i].reused,
            // (Its requests count the one that failed: more than one, and one before it
            // was answered whole, or the connection would have closed then.)
            kept: self.conns[i].requests > 1,
            closed: f.closed,
            silent,
            extra: f.extra,
            idle_others: !crowd.is_empty() || !idle.is_empty(),
            answered: f.kind == Kind::HttpStatus,
            asked_wait: f.delay.is_some(),
            ..Attempt::default()
        };
        Scene { attempt, crowd, idle }
    }

    /// Connection `i`'s request `job` failed with `f`: the bytes that landed are kept, the
    /// rest of its segment is judged ([`retry::judge`]) and requeued after its wait, or the
    /// failure ends the mirror or the transfer (`None`: nothing more for this slot to do).
    fn requeue_failed(
        &mut self,
        i: usize,
        k: usize,
        mut job: Job,
        f: &Fail,
        attempt: Attempt,
        capped: bool,
    ) -> Result<Option<Counted>> {
        // O_DIRECT keeps the aligned part of the block and fetches the rest again.
        // Buffered and splice keep every byte: under splice the block holds only what
        // came with the head, and the pipe (drained by `fail`) holds the rest, so the
        // retry starts at the body's position.
        let trim = self.shared.transfer.direct.then_some(self.shared.transfer.align);
        let from = self.sink.release(&mut job.placer, trim);
        // A multi-range request: the first run it still owes is judged as the segment
        // that failed, the others go back beside it with the tries they had; what of it
        // came counts as progress.
        let mut progressed = 0;
        let from = match job.multi.as_ref() {
            Some(m) => {
                let owed = job.owed(from);
                let asked: u64 = m.asked.iter().map(|r| r.1 - r.0).sum();
                progressed = asked.saturating_sub(owed.iter().map(|s| s.end - s.start).sum());
                let Some((&first, others)) = owed.split_first() else {
                    // (Everything asked came: the failure took nothing.)
                    let tries = job.seg.tries;
                    return Ok(Some(Counted {
                        crowded: false,
                        tries,
                        seg_wait: None,
                        origin_wait: None,
                    }));
                };
                for &s in others.iter().rev() {
                    self.shared.transfer.plan.requeue(s, false);
                }
                job.seg = first;
                first.start
            }
            None => from,
        };
        if job.probe && !self.shared.transfer.plan.is_planned() && matches!(f.kind, Kind::Protocol | Kind::Tls) {
            self.give_up(k, f.kind, f.msg.clone(), "", Some((job.seg, true)))?;
            return Ok(None);
        }
        let Some(mut seg) = self.again_from(job.seg, from, &f.msg) else {
            return Ok(None);
        };
        // A try counts when the attempt moved nothing forward: a connection that dies
        // after delivering bytes (a KeyUpdate under kTLS, a flaky link) is progress, and
        // the file size bounds how often that can happen (see retry::judge).
        let advanced = seg.start.saturating_sub(job.seg.start) + progressed;
        let tries_before = seg.tries;
        let verdict = retry::judge(&mut seg, &Attempt { advanced, ..attempt });
        if let Some(why) = self.mirror_failing(k, seg.tries > tries_before, f) {
            // Another mirror takes the segment, with the tries it had.
            self.shared.transfer.plan.requeue(
                Segment {
                    tries: tries_before,
                    ..seg
                },
                job.probe,
            );
            self.drop_mirror(k, why, "")?;
            return Ok(None);
        }
        // The wait belongs to what failed: the segment waits it out whatever connection
        // asks for it next, and a server-wide answer (503, 429) holds every request to
        // this origin too. Under a connection cap only the connection turned away waits
        // (`Loop::park`); the ones the server allows go on, this segment included.
        let w = retry::wait(
            verdict,
            self.shared.opts.retry_wait_s,
            seg.tries,
            jitter(),
            f.delay,
            f.server_wide,
        );
        if seg.tries >= self.shared.opts.max_tries {
            if let Some(p) = self.part.as_mut() {
                // (A helper's part: this segment spent the part's try, and the owner
                // learns the wait this reactor would have given it: a Retry-After about a
                // crowd of idle connections is not the server's, see retry::wait.)
                p.counted = Some((seg.start, seg.end));
                p.server_wait = (w.segment, w.origin);
            }
            let msg = format!("{} (gave up after {})", f.msg, n_tries(seg.tries));
            self.give_up(k, f.kind, msg, "", Some((seg, job.probe)))?;
            return Ok(None);
        }
        if !capped {
            self.shared.report.note(Note::Retry {
                conn: i,
                why: f.msg.clone(),
                first: seg.start,
                last: seg.end - 1,
                attempt: seg.tries + 1,
            });
            self.shared.transfer.retries += 1;
        }
        let until = self.shared.transfer.started.elapsed() + w.segment;
        if w.origin {
            self.shared.transfer.plan.hold(k, until);
        }
        let counted = Counted {
            crowded: verdict == Verdict::Crowded,
            tries: seg.tries,
            seg_wait: (!capped).then_some(w.segment),
            origin_wait: None,
        };
        self.shared.transfer.plan.requeue_after(seg, job.probe, until);
        Ok(Some(counted))
    }

    /// Connection `i` was turned away by our own crowd ([`Verdict::Crowded`]): the slots
    /// just parked that crowded it are not counted so again, and the idle connections open
    /// beside it close and wait as parked ones do.
    fn ease_crowd(&mut self, i: usize, k: usize, f: &Fail, scene: &Scene) {
        // Once per parking: a later refusal is the server's own answer (a server that
        // turns every request away is asked once more, not at each backoff).
        for &j in &scene.crowd {
            self.conns[j].parked_at = None;
        }
        // (Crowded by parked slots alone, the segment's short backoff is all.)
        let idle = &scene.idle;
        if idle.is_empty() {
            return;
        }
        // The server counts the idle connections toward its cap: they close and wait as
        // parked ones do (its Retry-After, at least 2 s); the download goes on with fewer.
        // What the server took: the connections it was serving and the idle ones it
        // counted (kept with the origin: later files open no more).
        let took = self.allowed(k, i) + idle.len();
        let back = Instant::now() + CAP_RETRY.max(f.delay.unwrap_or_default());
        for &j in idle {
            self.close(j);
            let o = &mut self.conns[j];
            o.capped = true;
            o.parked_at = Some(Instant::now());
            o.not_before = Some(back);
            // (Parked afresh: no refusal of its own yet.)
            o.refusals = 0;
            o.retry_until = f.delay.map(|d| Instant::now() + d);
        }
        let using = self
            .conns
            .iter()
            .filter(|o| o.mirror == k && !o.capped && !o.dead)
            .count();
        self.shared.report.note(Note::Capped {
            conn: i,
            why: f.msg.clone(),
            cap: Cap {
                proxy: false,
                closed: idle.len(),
                using,
                theirs: 0,
                refusals: 0,
                wait: CAP_RETRY,
            },
        });
        let o = self.shared.origin(k);
        self.shared.transfer.saw_cap(using + o.elsewhere(), using + o.remote);
        self.learn_cap(k, took);
    }

    /// Connection `i` (closed) was turned away by a connection cap: it asks again later (a
    /// cap can be brief: the server may still count a request we abandoned) while the
    /// others carry the download, and what the server allows is said and learned.
    fn park(&mut self, i: usize, k: usize, f: &Fail, crowded: bool) -> Result<()> {
        // (A transfer served nothing by the origin keeps asking every 2 s: its asking is
        // how it gets going, whatever wakes it or not.)
        let starved = self.serving(self.shared.transfer.mirrors[k].origin) == 0 && self.shared.origin(k).remote == 0;
        if starved && self.shared.transfer.received == 0 {
            self.shared.transfer.refused_first = true;
        }
        let c = &mut self.conns[i];
        c.refusals += 1;
        let again = if starved { CAP_RETRY } else { parked_wait(c.refusals) }.max(f.delay.unwrap_or_default());
        c.capped = true;
        c.parked_at = Some(Instant::now());
        c.not_before = Some(Instant::now() + again);
        // (A Retry-After is the server's: a wake does not cut it short.)
        c.retry_until = f.delay.map(|d| Instant::now() + d);
        let refusals = c.refusals;
        // A helper reactor's part: the owner sees every reactor's requests and counts
        // what the server allows (`Loop::on_capped`, event/owner/apply.rs); this slot asks again later
        // as any parked one.
        let helper = self.part.is_some();
        let using = if f.extra && !helper {
            // A proxy's tunnel cap shows before any body runs: count the open tunnels.
            self.conns.iter().filter(|o| o.mirror == k && o.st == St::Open).count()
        } else {
            // Parked means another connection downloads: at least one goes on (on a
            // helper, what goes on is every reactor's requests, not only this one's).
            self.allowed(k, i).max(1)
        };
        if helper {
            let own = self.allowed(k, i) - self.shared.origin(k).elsewhere();
            if let Some(p) = self.part.as_mut() {
                p.tell_capped(own, f.extra);
            }
        }
        self.shared.report.note(Note::Capped {
            conn: i,
            why: f.msg.clone(),
            cap: Cap {
                proxy: f.extra,
                closed: 0,
                using,
                // (A proxy's count is this transfer's tunnels.)
                theirs: if f.extra {
                    0
                } else {
                    self.shared.origin(k).others.min(using)
                },
                refusals,
                wait: again,
            },
        });
        if helper {
            return Ok(());
        }
        // A refusal while only another transfer's single request was served may be a
        // passing 503, not a cap of one: that is not learned for the whole run.
        let others = self.shared.origin(k).elsewhere();
        let own = self.allowed(k, i) - others;
        let theirs = if f.extra { 0 } else { self.shared.origin(k).others };
        self.shared.transfer.saw_cap(using, using.saturating_sub(theirs));
        if !crowded && (f.extra || own > 0 || others >= 2) {
            self.learn_cap(k, using);
        }
        Ok(())
    }

    /// Connection `i` (closed) failed with `f`, counted as `counted`: it stops for good when
    /// every address had its chances (the origin's connects failed `--max-tries` rounds, or
    /// the slot's own tries ran out), else it waits before it reconnects (`kick` reopens it).
    fn back_off(&mut self, i: usize, k: usize, f: &Fail, connect_failed: bool, counted: &Counted) -> Result<()> {
        let max = self.shared.opts.max_tries;
        let n_addrs = self.shared.origin(k).addrs.len();
        let unreachable = counted.origin_wait.is_some() && counted.tries >= max;
        if unreachable {
            // The origin's connects failed `--max-tries` rounds in a row: no connection to it
            // that is not open tries again (the open ones go on).
            for o in self
                .conns
                .iter_mut()
                .filter(|o| o.mirror == k && o.st == St::Closed && !o.busy())
            {
                o.dead = true;
                o.deferred = false;
            }
        }
        let c = &mut self.conns[i];
        if unreachable || (connect_failed && c.failed_connects >= n_addrs * max as usize) || c.failures >= max {
            // Every address had its chances: this slot stops; the download fails when no
            // connection is left.
            c.dead = true;
            if self.mirror_unreachable(k) && self.drops_mirror(k, f.kind) {
                let why = format!(
                    "cannot be reached: {} (gave up after {})",
                    f.msg,
                    n_tries(self.shared.opts.max_tries)
                );
                return self.drop_mirror(k, why, "");
            }
            if self.conns.iter().all(|c| self.gone(c)) {
                let msg = format!("{} (gave up after {})", f.msg, n_tries(self.shared.opts.max_tries));
                self.shared.fatal = Some(Error::new(f.kind, self.no_mirror_left(msg)));
            }
            return Ok(());
        }
        // Exponential backoff with jitter before this slot reconnects. A refused connect
        // (nothing listening) is answered at once, and waiting long for it only delays the
        // error: its waits start short (a wrong port fails in 2–3 s).
        if connect_failed && !f.busy && !c.failed_connects.is_multiple_of(n_addrs) {
            // An address this slot has not tried in this round: at once (RFC 8305 §5).
            c.not_before = None;
            return Ok(());
        }
        let wait = match counted.seg_wait.or(counted.origin_wait) {
            Some(w) => w,
            None => {
                let (base, attempt) = if connect_failed {
                    let base = if f.busy || f.refused {
                        self.shared.opts.retry_wait_s.min(REFUSED_WAIT)
                    } else {
                        self.shared.opts.retry_wait_s
                    };
                    // One wait per round over the addresses.
                    (base, (c.failed_connects / n_addrs) as u32)
                } else {
                    (self.shared.opts.retry_wait_s, counted.tries)
                };
                retry::backoff(base, attempt, jitter()).max(f.delay.unwrap_or_default())
            }
        };
        c.not_before = Some(Instant::now() + wait);
        Ok(())
    }

    /// Segment `seg` to ask again from `from` (the last aligned offset that landed; zero
    /// without Range support, where a stream can only start again from the top), or
    /// `None` with the transfer's failure set (`why` first) when the output is sequential
    /// (a pipe) and bytes past that start already went to it.
    fn again_from(&mut self, mut seg: Segment, from: u64, why: &str) -> Option<Segment> {
        seg.start = if self.shared.transfer.ranges { from } else { 0 };
        if self.shared.transfer.sequential && seg.start < self.sink.emitted {
            self.shared.fatal = Some(err!(
                Network,
                "{why}; cannot start over: {} bytes already went to {}",
                self.sink.emitted,
                self.shared.transfer.out_name
            ));
            return None;
        }
        Some(seg)
    }

    /// Connection `i`, kept alive after a whole response, was closed under its request
    /// before any byte of the answer ([`retry::resend`]): the request goes again at once
    /// (its segment first in the queue, no try spent, no wait), and the slot opens a new
    /// connection at once. Its origin learns how its server keeps connections
    /// ([`KeepAlive::closed_after`](crate::control::origin::KeepAlive::closed_after)): one
    /// that closes within [`QUICK_CLOSE`] of every response gets no more reuse.
    fn resend(&mut self, i: usize, f: &Fail) -> Result<()> {
        let c = &mut self.conns[i];
        let k = c.mirror;
        let served = c.requests - 1;
        let mut job = c.rx.job.take().expect("a re-sent request has a job");
        let trim = self.shared.transfer.direct.then_some(self.shared.transfer.align);
        let from = self.sink.release(&mut job.placer, trim);
        if job.multi.is_some() {
            // (Nothing of the answer came: every run asked goes again, the first last.)
            for s in job.owed(from).into_iter().skip(1).rev() {
                self.shared.transfer.plan.requeue(s, false);
            }
        }
        // (Nothing of the answer came: it starts where it did, or at zero without ranges.)
        let Some(seg) = self.again_from(job.seg, from, &f.msg) else {
            return Ok(());
        };
        self.shared.report.note(Note::Resent {
            conn: i,
            why: f.msg.clone(),
            first: seg.start,
            last: seg.end - 1,
        });
        self.shared.transfer.resent += 1;
        // (A close after a longer idle is the server's idle timeout: no news.)
        if self.conns[i].idle_before < QUICK_CLOSE {
            let origin = self.shared.origin_mut(k);
            origin.keeps = origin.keeps.closed_after(served);
        }
        self.shared.transfer.plan.requeue(seg, job.probe);
        self.drain(i)?;
        self.close(i);
        self.conns[i].not_before = None;
        Ok(())
    }

    /// Connection `i`'s multi-range request was refused (a 200 or 416, or a multipart
    /// answer ringdl cannot read: [`Fail::step_down`]; its mirror now asks one range per
    /// request): its runs go back to the queue as they
    /// were (no try spent, no wait), the answer's body is not read (the connection
    /// closes), and the slot opens a new one at once.
    fn step_down(&mut self, i: usize, f: &Fail) -> Result<()> {
        if let Some(mut job) = self.conns[i].rx.job.take() {
            let asked = job.multi.as_ref().map_or(0, |m| m.asked.len());
            let mirror = &mut self.shared.transfer.mirrors[job.mirror];
            if mirror.ranges_per_request > 1 {
                // (Refused by what the answer carried, not by its status: said here.)
                mirror.ranges_per_request = 1;
                let host = self.shared.url(job.mirror).host().to_owned();
                self.shared.report.note(Note::StepDown {
                    host,
                    asked,
                    answer: f.msg.clone(),
                    now: 1,
                });
            }
            let from = self.sink.release(&mut job.placer, None);
            for s in job.owed(from).into_iter().rev() {
                self.shared.transfer.plan.requeue(s, false);
            }
        }
        self.drain(i)?;
        self.close(i);
        self.conns[i].not_before = None;
        Ok(())
    }

    /// Mirrors `a` and `b` are on one origin (the server counts their connections together).
    pub(crate) fn same_origin(&self, a: usize, b: usize) -> bool {
        self.shared.transfer.mirrors[a].origin == self.shared.transfer.mirrors[b].origin
    }

    /// Connections to mirror `k`'s origin other than `i` that sit open with no request and nothing
    /// in flight (a keep-alive connection waiting for work).
    fn idle_to(&self, k: usize, i: usize) -> Vec<usize> {
        self.conns
            .iter()
            .enumerate()
            .filter(|&(j, o)| {
                j != i
                    && self.same_origin(o.mirror, k)
                    && o.st == St::Open
                    && o.rx.job.is_none()
                    && !o.busy()
                    && o.pipe.as_ref().is_none_or(crate::engine::splice::Pipe::is_idle)
            })
            .map(|(j, _)| j)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_turned_away_again_waits_twice_as_long_up_to_16_s() {
        let secs: Vec<u64> = (1..=6).map(|n| parked_wait(n).as_secs()).collect();
        assert_eq!(secs, [2, 4, 8, 16, 16, 16]);
        // (Never called with 0: the first refusal is 1.)
        assert_eq!(parked_wait(0), CAP_RETRY);
    }

    #[test]
    fn a_slot_turned_away_again_is_said_at_vv_and_a_shared_cap_as_shared() {
        // A parked slot turned away again is said at -vv; its first refusal at -v.
        let capped = |refusals| Note::Capped {
            conn: 1,
            why: "HTTP 503".into(),
            cap: Cap {
                proxy: false,
                closed: 0,
                using: 2,
                theirs: 0,
                refusals,
                wait: Duration::from_secs(4),
            },
        };
        assert_eq!(capped(1).level(), crate::report::Level::Verbose(1));
        assert_eq!(capped(2).level(), crate::report::Level::Verbose(2));
        let allowed = |own| Note::Allowed { connections: 2, own }.to_string();
        assert_eq!(allowed(2), "server allows 2 connections: using 2");
        assert_eq!(allowed(1), "server allows 2 connections, shared with other files");
    }
}
