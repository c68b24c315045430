//! Handing segments to connections: the first request, the queue, work stealing, and
//! reopening connections while work is left.

use crate::control::origin::QUICK_CLOSE;
use crate::control::{Conn, Fail, Job, Peek, St};
use crate::engine::place::{Delimiter, Placer};
use crate::error::Result;
use crate::event::Loop;
use crate::report::Note;
use crate::schedule::{Segment, steal};
use http::{ByteRange, Request};
use std::time::{Duration, Instant};

impl Loop<'_> {
    /// Gives an idle open connection its next request; true when it got one.
    pub(crate) fn assign(&mut self, i: usize) -> std::result::Result<bool, Fail> {
        // A pipe still holding the previous range must empty first: its bytes are contiguous.
        if self.conns[i].pipe.as_ref().is_some_and(|p| !p.is_idle()) {
            return Ok(false);
        }
        // The first request goes to the first mirror given that is left.
        if !self.shared.transfer.plan.is_planned() && self.probe_mirror() != Some(self.conns[i].mirror) {
            return Ok(false);
        }
        let now = self.shared.transfer.started.elapsed();
        let origin = self.conns[i].mirror;
        let (seg, probe) = if let Some(next) = self.shared.transfer.plan.next(now, origin) {
            next
        } else if !self.shared.transfer.plan.held(now, origin)
            && let Some(s) = self.steal(i)
        {
            (s, false)
        } else {
            return Ok(false);
        };
        if self.conns[i].requests > 0 && self.stale(i) {
            // (The segment goes first to the next connection free: this one is gone.)
            self.shared.transfer.plan.requeue(seg, probe);
            self.recycle(i)?;
            return Ok(false);
        }
        let runs = self.more_runs(i, seg, probe, now);
        self.start_job(i, seg, probe);
        if runs.len() > 1 {
            self.ask_runs(i, &runs);
        }
        Ok(true)
    }

    /// A partial fetch ([`crate::config::Config::fetch_only`]) asks several queued runs
    /// in one request: with `seg` just taken by connection `i`, its share of the queue
    /// (what is queued spread over the connections the transfer wants that carry no
    /// request now), at most its mirror's
    /// [`ranges_per_request`](crate::transfer::mirror::Mirror::ranges_per_request), the
    /// `Range` line within [`MAX_RANGE_LINE`](crate::control::multi::MAX_RANGE_LINE).
    /// Returns the runs, sorted (`seg` alone for any other request).
    fn more_runs(&mut self, i: usize, seg: Segment, probe: bool, now: Duration) -> Vec<Segment> {
        let per_request = self.shared.transfer.mirrors[self.conns[i].mirror].ranges_per_request;
        if probe
            || per_request < 2
            || self.shared.opts.fetch_only.is_none()
            || !self.shared.transfer.ranges
            || self.shared.splice
            || self.shared.transfer.part.is_some()
            || self.shared.transfer.plan.queued() == 0
        {
            return vec![seg];
        }
        let busy = self.conns.iter().filter(|c| c.rx.job.is_some()).count();
        let takers = self.shared.transfer.wanted.saturating_sub(busy).max(1);
        let share = (self.shared.transfer.plan.queued() + 1).div_ceil(takers);
        let most = share.min(per_request).saturating_sub(1);
        self.shared
            .transfer
            .plan
            .take_more(seg, most, now, crate::control::multi::MAX_RANGE_LINE)
    }

    /// Connection `i`'s request (just started for the first of `runs`) asks for all of
    /// `runs`: its head is written again with the byte-range set.
    fn ask_runs(&mut self, i: usize, runs: &[Segment]) {
        let (multi, set) = crate::control::multi::Multi::new(runs);
        let c = &mut self.conns[i];
        let k = c.mirror;
        let job = c.rx.job.as_mut().expect("a job just started");
        // (Until a part comes, the job's segment is the first range asked.)
        job.seg = Segment {
            start: multi.asked[0].0,
            end: multi.asked[0].1,
            tries: runs.iter().map(|s| s.tries).max().unwrap_or(0),
            grace: runs.iter().all(|s| s.grace),
        };
        job.placer = Placer::new(job.seg.start, job.seg.end).with_source(k);
        let req = self.request_head(k, None, &set);
        let c = &mut self.conns[i];
        c.rx.job.as_mut().expect("a job just started").multi = Some(Box::new(multi));
        if c.tls.in_user_space() {
            c.pending_request = req;
        } else {
            c.out = req;
        }
    }

    /// Whether kept-alive connection `i` (idle, its `requests` all answered) can no longer
    /// carry a request ([`Conn::peek_idle`]): said at `-v`. Its origin learns how the
    /// server keeps connections: one closed by the server within [`QUICK_CLOSE`] of its
    /// first response, before any carried a second, shows a server that closes after
    /// every response; a later close (an idle timeout) or unread bytes teach nothing.
    fn stale(&mut self, i: usize) -> bool {
        let c = &self.conns[i];
        let (k, served) = (c.mirror, c.requests);
        let quick = c.idle_since.is_some_and(|t| t.elapsed() < QUICK_CLOSE);
        let peek = c.peek_idle();
        let origin = self.shared.origin_mut(k);
        origin.keeps = match peek {
            Peek::Closed if quick => origin.keeps.closed_after(served),
            Peek::Open => origin.keeps.served(served),
            Peek::Closed | Peek::Unusable => origin.keeps,
        };
        if peek != Peek::Open {
            self.shared.report.note(Note::StaleClosed { conn: i });
        }
        peek != Peek::Open
    }

    /// The running body with the most bytes still to come, if splitting it is worth a
    /// request: (connection, split point: aligned, inside what is still to come).
    /// A helper's part is split by its own idle connections too, and when its owner asks
    /// for some back ([`Loop::give_to_owner`]).
    pub(crate) fn steal_victim(&self, thief: Option<usize>) -> Option<(usize, u64)> {
        if !self.shared.transfer.plan.is_planned()
            || !self.shared.transfer.ranges
            || self.shared.splice
            || self.shared.transfer.sequential
        {
            return None;
        }
        let align = self.shared.transfer.align;
        let busy = self.conns.iter().filter(|c| c.rx.job.is_some()).count().max(1);
        let ran = self.started.elapsed().as_secs_f64();
        let rate = if self.recent_rate > 0.0 {
            self.recent_rate
        } else if ran > 0.0 {
            self.shared.transfer.received as f64 / ran
        } else {
            0.0
        };
        let fallback = rate / busy as f64;
        let (v, rem) = self
            .conns
            .iter()
            .enumerate()
            .filter(|&(j, _)| Some(j) != thief)
            .filter_map(|(j, c)| {
                let job = c.rx.job.as_ref()?;
                let body = steal::Body {
                    remaining: job.placer.remaining(),
                    moved: job.placer.pos().saturating_sub(job.seg.start),
                    ttfb: job.first_byte.map(|f| f.saturating_duration_since(job.started)),
                    ran: job.first_byte.map_or(Duration::ZERO, |f| f.elapsed()),
                };
                // (A part of a multi-range answer is followed by the next part: not split.)
                (matches!(job.placer.delimiter(), Some(Delimiter::Length(_)))
                    && job.multi.is_none()
                    && steal::worth_stealing(&body, fallback))
                .then_some((j, body.remaining))
            })
            .max_by_key(|&(_, rem)| rem)?;
        let job = self.conns[v].rx.job.as_ref()?;
        steal::split_point(job.placer.pos(), job.placer.end(), rem, job.seg.end, align).map(|at| (v, at))
    }

    /// Work stealing: with the queue empty, connection `thief` takes the second half of
    /// the largest running body (from an aligned offset); the victim stops there and its
    /// connection is not reused (the rest of its response is not read). Without this the
    /// last segments keep one connection busy while the others idle.
    pub(crate) fn steal(&mut self, thief: usize) -> Option<Segment> {
        let (v, at) = self.steal_victim(Some(thief))?;
        let seg = self.split_off(v, at)?;
        self.shared.report.note(Note::Steal {
            conn: thief,
            from: v,
            first: seg.start,
            last: seg.end - 1,
        });
        Some(seg)
    }

    /// Connection `v`'s running body stops at `at` (aligned, inside what is still to
    /// come): the rest, `[at, end)`, for another connection or reactor. The stolen half
    /// keeps the segment's tries: a split is not a fresh budget.
    pub(crate) fn split_off(&mut self, v: usize, at: u64) -> Option<Segment> {
        let job = self.conns[v].rx.job.as_mut()?;
        if !job.placer.shrink(at) {
            return None;
        }
        let seg = Segment {
            start: at,
            end: job.seg.end,
            tries: job.seg.tries,
            grace: job.seg.grace,
        };
        job.seg.end = at;
        self.shared.transfer.steals += 1;
        Some(seg)
    }

    pub(crate) fn start_job(&mut self, i: usize, seg: Segment, probe: bool) {
        let c = &mut self.conns[i];
        let k = c.mirror;
        if !self.shared.used[i] && c.requests > 0 {
            // A connection kept open from the transfer before, used here for the first
            // time: its TLS counts for this transfer's summary (it made no handshake).
            let kept = [c.tls.is_on(), c.tls.is_kernel(), c.tls.is_soft()].map(usize::from);
            self.shared.tls_conns += kept[0];
            self.shared.ktls_conns += kept[1];
            self.shared.soft_conns += kept[2];
            for (n, k) in self.shared.kept.iter_mut().zip(kept) {
                *n += k;
            }
        }
        if !self.shared.used[i] {
            // (Served in the transfer before, not yet in this one.)
            c.rx.served = false;
        }
        self.shared.used[i] = true;
        // A request on a connection that sat idle may meet the server's keep-alive close: a
        // failure before any byte then does not count as a try.
        c.idle_before = c.idle_since.map_or(Duration::ZERO, |t| t.elapsed());
        c.reused = c.requests > 0 || c.idle_before > Duration::from_secs(1);
        c.idle_since = None;
        c.requests += 1;
        self.shared.transfer.requests += 1;
        if !c.capped {
            // (Its request before was served: a refusal of this one is the first again.)
            c.refusals = 0;
        }
        c.capped = false;
        // The first request, and every request once ranges are known to work, asks for its
        // segment; a server without ranges gets a plain GET.
        let range = ((probe && !self.shared.transfer.plain_get) || self.shared.transfer.ranges)
            .then(|| ByteRange::FromTo(seg.start, seg.end - 1));
        let req = self.request_head(k, range, &[]);
        let c = &mut self.conns[i];
        self.shared.report.note(Note::Request {
            conn: i,
            first: seg.start,
            last: seg.end.saturating_sub(1),
        });
        c.rx.job = Some(Job {
            seg,
            mirror: c.mirror,
            probe,
            placer: Placer::new(seg.start, seg.end).with_source(c.mirror),
            keep_alive: true,
            got_bytes: false,
            started: Instant::now(),
            first_byte: None,
            multi: None,
        });
        c.rx.head.clear();
        c.rx.extra = false;
        if c.tls.in_user_space() {
            c.pending_request = req;
        } else {
            c.out = req;
        }
    }

    /// The request head to mirror `k` for `range`, or for the byte-range set `ranges`
    /// (inclusive offsets) when not empty: the mirror's headers, its precondition on its
    /// first request, absolute-form with the proxy's credentials through a forwarding proxy.
    fn request_head(&self, k: usize, range: Option<ByteRange>, ranges: &[(u64, u64)]) -> Vec<u8> {
        let mut req = Vec::with_capacity(256);
        let mut extra: Vec<(&str, &str)> = self.shared.transfer.mirrors[k]
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        // Fetch only if changed: the precondition goes with each mirror's first request.
        let condition = (self.shared.transfer.mirrors[k].standing == crate::transfer::mirror::Standing::Pending)
            .then(|| self.shared.opts.condition.as_ref().map(http::Condition::field))
            .flatten();
        if let Some((name, value)) = &condition {
            extra.push((name, value));
        }
        let request = Request {
            url: self.shared.url(k),
            range,
            ranges,
            user_agent: crate::control::USER_AGENT,
            extra_headers: &extra,
        };
        match self.shared.origin(k).forwarding() {
            // Plain http through a proxy: absolute-form, with the proxy's credentials.
            Some(p) => http::write_proxied_request(&request, p.authorization.as_deref(), &mut req)
                .expect("the program's own request and a checked authorization are valid"),
            None => request.write_to(&mut req),
        }
        req
    }

    /// Work exists that an idle connection could take.
    pub(crate) fn wants_connection(&self) -> bool {
        self.shared.transfer.plan.has_work() || self.steal_victim(None).is_some()
    }

    /// `k` more connection slots (a transfer that started with fewer than it is worth,
    /// given room under its origins' caps that another transfer's end left), each on the
    /// mirror left with the fewest (never a dropped one) and with a read block of its
    /// reactor's read `pool`; its write slots grow to match. Returns how many it got: fewer
    /// when the pool is short (the run's reactor sizes it for `-j` transfers of `-x`
    /// connections; a helper for what the placed file may grow to, unless that would have
    /// closed the connections it kept idle, or the blocks could not be mapped).
    pub(crate) fn grow(&mut self, k: usize, pool: &uring::BufPool) -> usize {
        let mut got = 0;
        while got < k {
            let Some(block) = pool.alloc() else { break };
            self.conns.push(Conn::new(block));
            self.shared.used.push(false);
            self.reassign(self.conns.len() - 1);
            got += 1;
        }
        let w = crate::event::reactor::write_slots(self.conns.len());
        if self.sink.slots.len() < w {
            self.sink.slots.resize_with(w, || None);
        }
        got
    }

    /// Slots parked on origin `key`'s cap that a wake would make ask sooner: the index of
    /// the transfer's origin when it has one.
    pub(crate) fn parked_on(&self, key: &crate::control::origin::OriginKey) -> Option<usize> {
        let o = (0..self.shared.origins.len()).find(|&o| self.end_state.key(o) == key)?;
        self.parked_at(o).then_some(o)
    }

    /// Whether any slot is parked on a cap of its origin, a wake would make it ask sooner.
    pub(crate) fn parked(&self) -> bool {
        (0..self.shared.origins.len()).any(|o| self.parked_at(o))
    }

    /// Whether a slot is parked on origin `o`'s cap, a wake would make it ask sooner.
    fn parked_at(&self, o: usize) -> bool {
        let now = Instant::now();
        self.conns.iter().any(|c| self.waits_on_cap(c, o, now))
    }

    /// Another transfer's connections to origin `o` ended (its room under the server's cap
    /// freed): up to `n` of this transfer's slots parked on it ask again now, not at the end
    /// of our own backoff; those still inside the server's Retry-After ask when it ends, and
    /// take none of the `n`. Returns how many ask now.
    pub(crate) fn wake_parked(&mut self, o: usize, n: usize) -> usize {
        let now = Instant::now();
        let mut woken = 0;
        for i in 0..self.conns.len() {
            if !self.waits_on_cap(&self.conns[i], o, now) {
                continue;
            }
            let c = &mut self.conns[i];
            match c.retry_until.filter(|&t| t > now) {
                Some(t) => c.not_before = Some(t),
                None if woken < n => {
                    c.not_before = Some(now);
                    woken += 1;
                }
                None => {}
            }
        }
        woken
    }

    /// Slot `c` is parked on origin `o`'s cap, not asking yet, and would ask sooner if
    /// woken (its wait goes past the server's Retry-After).
    fn waits_on_cap(&self, c: &Conn, o: usize, now: Instant) -> bool {
        let earliest = c.retry_until.map_or(now, |t| t.max(now));
        c.capped
            && !c.dead
            && c.st == St::Closed
            && c.not_before.is_some_and(|t| t > earliest)
            && self.shared.transfer.mirrors[c.mirror].origin == o
    }

    /// Room for another connection: fewer slots opened one than [`crate::transfer::Transfer::wanted`].
    pub(crate) fn room(&self) -> bool {
        self.conns.iter().filter(|c| c.engaged).count() < self.shared.transfer.wanted
    }

    /// May slot `i` open a connection as far as the count goes: it opened one before (it
    /// reconnects), or there is [room](Loop::room) and its origin has room for one more
    /// ([`Loop::origin_room`]).
    pub(crate) fn may_open(&self, i: usize) -> bool {
        self.conns[i].engaged || (self.room() && self.origin_room(self.conns[i].mirror))
    }

    /// Mirror `k`'s origin takes one more connection: fewer slots to it opened one than
    /// `--max-connections-per-host` and than what the server allowed when it last turned
    /// one away ([`Origin::allows`](crate::control::origin::Origin::allows), learned by
    /// this transfer or one before it). Slots to an origin are those of mirrors on it.
    pub(crate) fn origin_room(&self, k: usize) -> bool {
        let origin = self.shared.transfer.mirrors[k].origin;
        let o = self.shared.origin(k);
        let open = self
            .conns
            .iter()
            .filter(|c| c.engaged && !c.dead && self.shared.transfer.mirrors[c.mirror].origin == origin)
            .count();
        // With the requests other transfers have on the wire to it (`Origin::others`).
        // `--max-connections-per-host` is shared out over the reactors (`--threads`): this
        // reactor's share counts only this ring's; what the server allows counts every
        // reactor's (`Origin::remote`).
        o.cap(self.shared.opts.max_per_host)
            .may_open_one(open, o.others, o.elsewhere())
    }

    /// Slot `c` will carry nothing more: it gave up, waits for a race it will not run, or
    /// never opened a connection and the download (or its origin) wants no more.
    pub(crate) fn gone(&self, c: &Conn) -> bool {
        c.dead || c.deferred || !(c.engaged || (self.room() && self.origin_room(c.mirror)))
    }

    /// Hands queued segments to idle connections and reopens closed ones while work is left.
    pub(crate) fn kick(&mut self) -> Result<()> {
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            if c.deferred && c.st == St::Closed {
                // Racing the next address (no address proven yet) is Happy Eyeballs; once
                // one is, a deferred slot opens only when the download wants it.
                let k = c.mirror;
                let racing = !self.shared.origin(k).addr_proven;
                if let Some(a) = self
                    .next_attempt(k)
                    .filter(|_| self.may_connect(i) && (racing || self.may_open(i)))
                {
                    self.shared.origin_mut(k).addr_next = a;
                    self.connect(i)?;
                }
                continue;
            }
            if c.busy() || c.dead || c.rx.job.is_some() || c.not_before.is_some_and(|t| t > Instant::now()) {
                continue;
            }
            let single = self.shared.transfer.plan.is_planned() && !self.shared.transfer.ranges;
            match c.st {
                St::Open if single && self.shared.transfer.plan.queued() == 0 => self.close(i),
                St::Open if self.wants_connection() => {
                    self.after(i, Ok(()))?;
                }
                St::Closed
                    if self.wants_connection()
                        && !(single && self.conns.iter().any(|c| c.st != St::Closed))
                        && self.may_connect(i)
                        && self.may_open(i) =>
                {
                    self.conns[i].not_before = None;
                    self.connect(i)?;
                }
                _ => {}
            }
        }
        Ok(())
    }
}
