//! The helper reactors' threads (`--threads N`): each runs its own [`Reactor`] — one part
//! of a spread transfer after another ([`run_part`]), or the whole files the run's reactor
//! places on it ([`placed`]) — until its channel closes. The messages they exchange with
//! the owner are [`crate::event::wire`]'s.

use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::mpsc::Sender;

use crate::control::origin::OriginCap;
use crate::err;
use crate::error::Result;
use crate::event::wire::{HelperEnds, Order, PartLink, PartOrder, Report, tell};
use crate::event::{Outcome, Reactor, Start, Summary};
use crate::output::resume::State;
use crate::report::{Note, Progress};

mod placed;

/// A helper thread: its own reactor, one part after another, or the whole transfers placed
/// on it (several at once), until its channel closes; `bell` rings the run's reactor, `nudge` is this helper's eventfd.
pub(crate) fn helper(ends: HelperEnds) {
    let HelperEnds {
        helper: k,
        pin,
        orders,
        reports,
        bell,
        nudge,
    } = ends;
    if pin {
        super::pin(k);
    }
    let (orders, tx, bell) = (&orders, &reports, &bell);
    let nudge = std::os::fd::AsRawFd::as_raw_fd(&*nudge);
    let mut reactor = Reactor::default();
    let mut held = None;
    while let Some(order) = held.take().or_else(|| orders.recv().ok()) {
        let p = match order {
            Order::Part(p) => p,
            Order::Whole(w) => {
                held = placed::run_placed(&mut reactor, w, orders, (tx, bell, nudge));
                continue;
            }
            Order::Forget { key } => {
                reactor.forget_idle(&key);
                let idle = reactor.idle_counts();
                tell(tx, bell, Report::Idle { helper: k, idle });
                continue;
            }
        };
        let (lending, helper, range) = (p.lending, p.helper, p.range);
        let (r, summary) = run_part(&mut reactor, p, tx, (bell, nudge));
        tell(
            tx,
            bell,
            Report::Ended {
                lending,
                helper,
                range,
                error: r.err(),
                summary,
            },
        );
    }
}

/// Fetches part `p` on `reactor`: a transfer whose resume state says that everything but
/// the part is on disk, so that its first answer is checked against the owner's size and
/// validator and only the part is planned; `nudge` is the helper's eventfd.
fn run_part(
    reactor: &mut Reactor,
    p: PartOrder,
    tx: &Sender<Report>,
    (bell, nudge): (&Arc<OwnedFd>, std::os::fd::RawFd),
) -> (Result<()>, Option<Box<Summary>>) {
    let f = &p.file;
    let out = match f.out.part_of() {
        Ok(Some(out)) => out,
        Ok(None) => {
            return (
                Err(err!(Internal, "a part of an output that is not a regular file")),
                None,
            );
        }
        Err(e) => return (Err(e), None),
    };
    let (a, b) = p.range;
    let mut ranges = Vec::with_capacity(p.holes.len() + 2);
    if a > 0 {
        ranges.push((0, a));
    }
    ranges.extend(p.holes.iter().copied());
    if b < f.total {
        ranges.push((b, f.total));
    }
    let mut opts = f.opts.clone();
    opts.connections = p.connections;
    // (Its share of --max-connections-per-host too: the reactors' connections together
    // stay under it.)
    opts.max_per_host = OriginCap::share(opts.max_per_host, p.connections);
    opts.threads = 1;
    let st = Start {
        mirrors: f.routes.clone(),
        opts: Rc::new(opts),
        out: Rc::new(out),
        resume: Some(State {
            url: f.opts.url.clone(),
            total: f.total,
            validator: f.validator.clone(),
            ranges,
            target: None,
        }),
        control: None,
        engine: f.engine,
        ktls: f.ktls,
        signed: None,
        report: forward_notes(p.lending, p.helper, tx.clone(), Arc::clone(bell)),
        part: Some(PartLink::new(&p, tx.clone(), Arc::clone(bell), nudge)),
        whole: None,
    };
    match super::run(st, None, reactor) {
        (Ok(Outcome::Done(s)), _, _) => (Ok(()), Some(s)),
        (Ok(Outcome::Redirect { to, .. }), _, s) => (Err(err!(Protocol, "a part's request was redirected to {to}")), s),
        (Ok(Outcome::NotModified { .. }), _, s) => (Err(err!(Protocol, "a part's request was answered 304")), s),
        (Ok(Outcome::Recalled), _, s) => (Err(err!(Internal, "a part was stopped to start again")), s),
        (Err(e), _, s) => (Err(e), s),
    }
}

/// A part's progress: its notes go to the owner, which says them (prefixed "reactor N:"),
/// except those about the part's own plan (its "resume" of the rest of the file).
fn forward_notes(lending: u64, helper: usize, tx: Sender<Report>, bell: Arc<OwnedFd>) -> Progress {
    Progress::forwarding(Box::new(move |note| {
        if !matches!(
            note,
            Note::Resuming { .. }
                | Note::Planned { .. }
                | Note::FixedFileOps { .. }
                | Note::SqpollCpu { .. }
                | Note::NoPreallocation { .. }
        ) {
            tell(&tx, &bell, Report::Note { lending, helper, note });
        }
    }))
}
