//! The tick: stall detection, the periodic fdatasync and control-file save, progress.

use crate::control::St;
use crate::error::Result;
use crate::event::{CONTROL_INTERVAL, Loop};
use crate::output::resume::State;
use crate::report::Note;
use crate::tag::Tag;
use std::time::{Duration, Instant};
use uring::Op;

impl Loop<'_> {
    pub(crate) fn on_tick(&mut self) -> Result<()> {
        let serving = self.serving(0);
        if let Some(p) = self.part.as_mut() {
            // A helper's part: what landed goes to the owner; the owner may have ended.
            p.tell_landed(&self.shared.transfer.landed, serving);
            self.posted_stop();
            self.give_to_owner();
        }
        self.tell_placed();
        self.share_serving();
        let window = self.rate_mark.0.elapsed();
        if window >= Duration::from_millis(500) {
            self.recent_rate = (self.shared.transfer.received - self.rate_mark.1) as f64 / window.as_secs_f64();
            self.rate_mark = (Instant::now(), self.shared.transfer.received);
        }
        let stall = Duration::from_secs_f64(self.shared.opts.stall_timeout_s);
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            if c.busy() && matches!(c.st, St::Open | St::Tunnel) && c.last_io.elapsed() > stall {
                self.cancel_op(i)?;
            }
        }
        // Every CONTROL_INTERVAL: make what landed durable (fdatasync on the ring), then record it.
        let landed = self.shared.transfer.landed.bytes();
        if self.control.is_some()
            && self.keeps_control()
            && self.sync_snapshot.is_none()
            && landed != self.saved_bytes
            && self.shared.transfer.plan.is_planned()
            && self.shared.transfer.ranges
            && self.last_sync.elapsed() >= CONTROL_INTERVAL
        {
            self.last_sync = Instant::now();
            self.saved_bytes = landed;
            self.sync_snapshot = Some(self.shared.transfer.landed.ranges().to_vec());
            self.push(
                Op::Fsync {
                    fd: self.sink.out_fd,
                    datasync: true,
                },
                Tag::Control.encode(),
            )?;
        }
        if self.shared.opts.verbose > 2 {
            for (i, c) in self.conns.iter().enumerate() {
                let state = format!(
                    "[{i}] {:?} op={:?} job={:?} wb={:?} spill={} pipe={:?} waiting={}",
                    c.st,
                    c.op,
                    c.rx.job
                        .as_ref()
                        .map(|j| (j.seg.start, j.seg.end, j.placer.pos(), j.placer.end())),
                    c.rx.job.as_ref().and_then(|j| j.placer.block()),
                    c.rx.job.as_ref().map_or(0, |j| j.placer.spill_len()),
                    c.pipe.as_ref().map(|p| (p.held, p.draining, p.file_pos)),
                    c.waiting
                );
                self.shared.report.note(Note::State(state));
            }
            let state = format!(
                "queue={} to_write={} writes={} landed={}",
                self.shared.transfer.plan.queued(),
                self.sink.to_write.len(),
                self.sink.writes_in_flight,
                self.shared.transfer.landed.bytes()
            );
            self.shared.report.note(Note::State(state));
        }
        let live = self.live();
        let (have, total, where_) = self.shared.transfer.shown();
        self.shared.report.update(
            have,
            self.shared.transfer.received,
            total,
            live,
            self.started.elapsed(),
            &where_,
        );
        Ok(())
    }

    /// Removes this run's last control file when its `.part` is known to be another file
    /// now ([`crate::output::Output::part_replaced`]): it names bytes that no name reaches.
    /// A control file another run saved there since is left alone; once done, this run
    /// owns no control file (a later call removes nothing).
    pub(crate) fn disown_control(&mut self) {
        if let Some(c) = &self.control
            && self.shared.transfer.out.part_replaced()
        {
            crate::output::resume::remove_if_ours(c, self.control_id.take());
        }
    }

    /// Whether this transfer's output keeps a control file: not a short file's
    /// ([`crate::output::resume::SHORT`]: started over instead), unless a caller reads it
    /// (`keep_part`) or it is a block device's image (`--control`).
    pub(crate) fn keeps_control(&self) -> bool {
        let t = &self.shared.transfer;
        self.shared.opts.keep_part || t.room().is_some() || t.total.is_none_or(|n| n > crate::output::resume::SHORT)
    }

    /// Writes the control file: `ranges` (made durable by an fdatasync), or everything that
    /// has landed (at exit, after the writes in flight were reaped or abandoned).
    /// Returns whether the control file was written: not when the `.part` is no longer
    /// this run's ([`crate::output::Output::owns_part`]), which also ends the run.
    pub(crate) fn save_control(&mut self, ranges: Option<Vec<(u64, u64)>>) -> bool {
        let (Some(path), Some(total), true) = (
            &self.control,
            self.shared.transfer.total,
            ((self.shared.transfer.plan.is_planned() && self.shared.transfer.ranges) || self.shared.opts.keep_part)
                && self.keeps_control(),
        ) else {
            return false;
        };
        if !self.shared.transfer.out.owns_part() {
            // The `.part` was removed, or made again by another run, whose control file
            // may be there now: nothing of this run's goes into it, and the run ends (its
            // bytes go into a file no name reaches). A name that cannot be read just now
            // (EIO, ESTALE) tells nothing: this save waits for the next.
            if self.shared.transfer.out.part_replaced() {
                if self.shared.fatal.is_none() {
                    self.shared.fatal = self.shared.transfer.out.still_ours().err();
                }
                self.disown_control();
            }
            return false;
        }
        let ranges = ranges.unwrap_or_else(|| self.shared.transfer.landed.ranges().to_vec());
        // A partial fetch's holes count as landed but hold nothing: not recorded.
        let ranges = match &self.shared.transfer.holes {
            Some(holes) => crate::schedule::Landed::from_ranges(&ranges)
                .within(crate::schedule::Landed::outside(holes.ranges(), total).ranges()),
            None => ranges,
        };
        let st = State {
            url: self.shared.opts.url.clone(),
            total,
            validator: self.shared.transfer.validator.clone(),
            ranges,
            target: self.shared.transfer.room().map(|r| r.target(&self.shared.opts)),
        };
        match crate::output::resume::save(path, &st) {
            Ok(id) => {
                self.control_id = Some(id);
                true
            }
            Err(m) => {
                self.shared.report.note(Note::ControlNotSaved { why: m.to_string() });
                false
            }
        }
    }
}
