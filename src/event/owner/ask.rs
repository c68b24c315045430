//! `--threads`, the owner's side: work stealing between reactors asked by message (a
//! part out on a helper gives some of itself back, [`Loop::give_to_owner`]).

use std::time::Instant;

use super::{ASK_AGAIN, Out};
use crate::event::Loop;

impl Loop<'_> {
    /// With nothing queued and no body of its own worth splitting, while a connection of
    /// this reactor or a free helper has nothing to do, the part out on a helper with the
    /// most left to land is asked for some of it back (work stealing between reactors, by
    /// message: the helper splits its own bodies, [`Loop::give_to_owner`]). One ask per
    /// part at a time, and at most every [`ASK_AGAIN`] while it finds nothing worth giving.
    pub(super) fn ask_back(&mut self) {
        let transfer = &self.shared.transfer;
        if !transfer.plan.is_drained()
            || transfer.plan.held(transfer.started.elapsed(), 0)
            || self.shared.fatal.is_some()
        {
            return;
        }
        let Some(r) = self.remote.as_ref() else {
            return;
        };
        // (A slot parked under a cap, or one the caps would not let open, is not idle.)
        let now = Instant::now();
        let idle_here = self.conns.iter().enumerate().any(|(i, c)| {
            c.rx.job.is_none()
                && !c.dead
                && !c.capped
                && c.not_before.is_none_or(|t| t <= now)
                && (c.st == crate::control::St::Open || self.may_open(i))
        });
        let allot = r.allot.as_deref().unwrap_or(&[]);
        let idle_helper = (0..r.parts.len()).any(|h| r.parts[h].is_none() && allot.get(h).is_some_and(|&a| a > 0));
        if !(idle_here || idle_helper) || r.parts.iter().flatten().any(|o| o.asked.is_some_and(|a| !a.1)) {
            return;
        }
        if self.steal_victim(None).is_some() {
            // (This reactor's own connections split their bodies first.)
            return;
        }
        let left = |o: &Out| {
            let g: u64 = o.given.iter().chain(&o.holes).map(|x| x.1 - x.0).sum();
            (o.range.1 - o.range.0).saturating_sub(o.landed + g)
        };
        let Some(k) = (0..r.parts.len())
            .filter_map(|k| Some((k, r.parts[k].as_ref()?)))
            .filter(|(_, o)| o.asked.is_none_or(|a| a.0.elapsed() >= ASK_AGAIN))
            .filter(|(_, o)| left(o) >= 2 * crate::schedule::steal::STEAL_FLOOR)
            .max_by_key(|(_, o)| left(o))
            .map(|(k, _)| k)
        else {
            return;
        };
        if let Some(o) = self.remote.as_mut().and_then(|r| r.parts[k].as_mut()) {
            o.flags.ask_give();
            o.asked = Some((Instant::now(), false));
        }
    }
}
