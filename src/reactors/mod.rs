//! What drives several transfer loops ([`crate::event::Loop`]): one transfer on its
//! reactor, spread over the helper reactors when `--threads N` lets it ([`run`],
//! [`spread`]); the `-j` files of a list on the lanes of one reactor's ring ([`lanes`]);
//! the helper reactors' threads ([`helpers`]). Everything here drives `event`'s loops
//! and talks to the other reactors through [`crate::event::wire`]; `event` never
//! reaches up here.

mod helpers;
pub mod lanes;

use std::os::fd::RawFd;
use std::rc::Rc;

use crate::control::origin::{OriginCap, shares};
use crate::engine::EngineKind;
use crate::error::Result;
use crate::event::owner::{self, Remote};
use crate::event::reactor::ring_entries;
use crate::event::{Outcome, Reactor, Start, Summary, end, start_on};
use crate::lane::RingCell;
use crate::report::Progress;

/// Runs transfer `st` alone on the ring of `reactor` (SIGINT/SIGTERM read from
/// `signals`): into its output from the URLs of its mirrors (one, or several serving the
/// same file: see [`crate::event::mirrors`]), on connections `reactor` kept open from the transfers
/// before it where they go to the same origins; the connections this one leaves open and
/// idle are kept in `reactor` for the next (only when it is [`Outcome::Done`]). Gives
/// back the transfer's report, and what a failed transfer knew (for `--json`: `bytes` is
/// then what the `.part` holds, not the file's size).
///
/// The result's error is any [`crate::error::Kind`]: the first fatal failure of a connection, a refused
/// ring, a failed write; with several mirrors, a server's failure only once no mirror is
/// left.
pub fn run(
    st: Start,
    signals: Option<RawFd>,
    reactor: &mut Reactor,
) -> (Result<Outcome>, Progress, Option<Box<Summary>>) {
    let mut st = st;
    let n = st.opts.connections;
    let remote = match spread(&mut st, n, reactor, true) {
        Ok(r) => r,
        Err(e) => return (Err(e), st.report, None),
    };
    let n = st.opts.connections;
    // (A file placed on a helper may grow to more slots than it starts with; a ring that
    // large refused, it keeps those it starts with.)
    let ring_n = st.whole.as_ref().map_or(n, |w| w.most.max(n));
    let splice = st.engine == EngineKind::Splice;
    let ring = match reactor.take_ring(&st.opts, ring_entries(ring_n), splice) {
        Err(_) if ring_n > n => {
            if let Some(w) = st.whole.as_mut() {
                w.most = 0;
            }
            reactor.take_ring(&st.opts, ring_entries(n), splice)
        }
        r => r,
    };
    let (chosen, entries, splice) = match ring {
        Ok(r) => r,
        Err(e) => {
            if let Some(rm) = remote {
                reactor.helpers_back(rm);
            }
            return (Err(e), st.report, None);
        }
    };
    let cell = RingCell::new(chosen);
    let r = match start_on(st, reactor, cell.lane(0), n, signals, true) {
        Ok(mut transfer_loop) => {
            transfer_loop.remote = remote;
            let r = transfer_loop.arm_mail(None).and_then(|()| transfer_loop.event_loop());
            // (Writes still in flight are reaped by give_back below; the caller holds
            // the output until then.)
            let (r, report, failed, _hold) = end(transfer_loop, r, reactor);
            (r, report, failed)
        }
        Err(b) => {
            if let Some(rm) = remote {
                reactor.helpers_back(rm);
            }
            (Err(b.0), b.1, None)
        }
    };
    reactor.give_back((cell.into_inner(), entries, splice));
    if !matches!(r.0, Ok(Outcome::Done(_))) {
        reactor.reset();
    }
    r
}

/// `--threads N`: when transfer `st` spreads over other reactors (`spreads`: the run
/// lets it — a list places whole files on them instead while several are in flight; a
/// regular file from one URL, more than one of its `n` connections, no `--limit-rate`),
/// its options keep the owner's share of the `n` and the helpers come back lent to it;
/// `None` when it runs on this reactor alone (also while another transfer has the
/// helpers).
///
/// # Errors
/// `LocalIo` when the helper threads or their eventfd cannot be made, or its block mapped.
pub(crate) fn spread(st: &mut Start, n: usize, reactor: &mut Reactor, spreads: bool) -> Result<Option<Remote>> {
    let opts = &st.opts;
    if opts.pin && st.part.is_none() && st.whole.is_none() {
        // `--pin`: this reactor's thread on the first CPU the process may use.
        pin(0);
    }
    if !spreads {
        return Ok(None);
    }
    let shares = match may_spread(st, n) {
        Ok(shares) => shares,
        Err(why) => {
            if let Some(why) = why {
                st.report.note(crate::report::Note::OneReactor { why });
            }
            return Ok(None);
        }
    };
    let Some(mail) = reactor.mail_block()?.alloc() else {
        return Ok(None);
    };
    // (As many as --threads asks, once: files with fewer connections use fewer of them.)
    let helpers = reactor.helpers(opts.threads - 1, opts.pin, helpers::helper)?;
    let mut o = (**opts).clone();
    let Some(remote) = owner::lend(helpers, shares, st.mirrors.clone(), mail) else {
        return Ok(None);
    };
    o.connections = remote.own();
    o.max_per_host = OriginCap::share(o.max_per_host, remote.own());
    st.opts = Rc::new(o);
    Ok(Some(remote))
}

/// Whether transfer `st`, with `n` connection slots, may spread over other reactors
/// (`--threads N`): its connections per reactor ([`shares`], the owner's first),
/// or `Err` with why not, to say (`-x 1`, several mirrors, `--limit-rate`,
/// a block device, an output that is not a regular file), or `None` when nothing is said
/// (one connection under `--max-connections-per-host`, a part of another reactor's file
/// or a placed one, an output that takes bytes only in order).
pub(crate) fn may_spread(st: &Start, n: usize) -> std::result::Result<Vec<usize>, Option<&'static str>> {
    let opts = &st.opts;
    // (-x, and --max-connections-per-host, shared out: every reactor's connections count.)
    let shares = shares(n.min(opts.connections).min(opts.max_per_host), opts.threads);
    if shares.len() < 2 && opts.threads > 1 && opts.connections == 1 && st.part.is_none() && st.whole.is_none() {
        // (`-x` is shared out over the reactors: one connection is one reactor's.)
        return Err(Some("-x 1"));
    }
    if shares.len() < 2 || st.part.is_some() || st.whole.is_some() || st.out.sequential {
        return Err(None);
    }
    if st.mirrors.len() != 1 {
        Err(Some("several mirrors"))
    } else if opts.limit_rate.is_some() {
        Err(Some("--limit-rate"))
    } else if st.out.room.is_some() {
        Err(Some("a block device"))
    } else if st.out.part.is_none() {
        Err(Some("the output is not a regular file"))
    } else {
        Ok(shares)
    }
}

/// `--pin`: the calling thread on the `k`-th of the CPUs the process could use when
/// ringdl first pinned (modulo their count), by sched_setaffinity(2). Returns the CPU, or
/// `None` when the kernel refused (the thread then runs where the scheduler puts it).
pub(crate) fn pin(k: usize) -> Option<usize> {
    use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};
    static ALLOWED: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    // (Read once, before any thread is pinned: a thread inherits its creator's mask.)
    let cpus = ALLOWED.get_or_init(|| {
        sched_getaffinity(None).map_or_else(
            |_| Vec::new(),
            |set| (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect(),
        )
    });
    let cpu = *cpus.get(k % cpus.len().max(1))?;
    let mut set = CpuSet::new();
    set.set(cpu);
    sched_setaffinity(None, &set).ok().map(|()| cpu)
}
