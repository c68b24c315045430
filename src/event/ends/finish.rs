//! A transfer's end: [`end`] keeps what a failed transfer landed (control file, `.part`)
//! or truncates, syncs and reads back a finished one ([`Loop::ready_to_sync`] readies the
//! sync beside other transfers on the ring), and gives the reactor its idle connections
//! and origins.

use std::os::fd::AsFd;
use std::rc::Rc;

use http::Url;
use uring::Op;

use crate::err;
use crate::error::{Error, Result};
use crate::event::reactor::Reactor;
use crate::event::{Kept, Loop, Outcome, Summary, errno};
use crate::output::Output;
use crate::output::verify::Expect;
use crate::report::{Note, Progress};
use crate::tag::Tag;

impl Loop<'_> {
    /// A finished transfer's output truncated to its size, ready for its final sync
    /// ([`Loop::push_fsync`], or one syncfs(2) with other files: the list's sync group),
    /// so that the other transfers on the ring go on while the disk syncs; the sync's
    /// result lands in [`super::EndState::synced`] and [`end`] goes on from there. Returns
    /// whether it is to be synced (not outputs that are not files, nor when bytes are
    /// missing: [`end`] says so).
    ///
    /// # Errors
    /// `LocalIo` when the truncation fails.
    pub(crate) fn ready_to_sync(&mut self) -> Result<bool> {
        let total = self.shared.transfer.total.unwrap_or(self.shared.transfer.received);
        let out = Rc::clone(&self.end_state.out);
        if !(self.shared.transfer.file || out.room.is_some()) || !self.shared.transfer.landed.is_complete(total) {
            return Ok(false);
        }
        if self.shared.transfer.file {
            out.truncate(total)?;
        }
        Ok(true)
    }

    /// Pushes the final fsync of an output [`Loop::ready_to_sync`] readied; its completion
    /// lands in [`super::EndState::synced`].
    ///
    /// # Errors
    /// `Internal` when the SQ is full.
    pub(crate) fn push_fsync(&mut self) -> Result<()> {
        self.push(
            Op::Fsync {
                fd: self.sink.out_fd,
                datasync: false,
            },
            Tag::Fsync(0).encode(),
        )
    }

    /// A sync of its output done elsewhere (the list's sync group, with `others` files,
    /// by `syncfs` syncfs(2) calls) ended with `result` (0, or a negated errno), as the
    /// completion of [`Loop::push_fsync`] would.
    pub(crate) fn synced_elsewhere(&mut self, result: i32, others: usize, syncfs: usize) {
        self.end_state.synced = Some((result, true));
        if result >= 0 {
            self.shared.report.note(Note::SyncedTogether { others, syncfs });
        }
    }

    /// Its output is a regular file (not a stream, nor a block device's room).
    pub(crate) fn writes_a_file(&self) -> bool {
        self.shared.transfer.file
    }

    /// The output, for a sync done elsewhere.
    pub(crate) fn output(&self) -> &Output {
        &self.end_state.out
    }
}

impl Loop<'_> {
    /// A transfer whose bytes are all off the wire ([`Loop::received`]) gives its
    /// connections to `reactor` at once, while its last writes and its sync run (as [`end`]
    /// would after them), so that the next file of a list takes them instead of waiting
    /// for the disk. Only when none has an op in flight
    /// (their completions come to this transfer by index); returns whether they went.
    /// The origins go too (what the reactor knows of them is merged, not replaced; not
    /// again at the end).
    pub(crate) fn hand_back_idle(&mut self, reactor: &mut Reactor) -> bool {
        if self.end_state.served.is_some() || self.conns.iter().any(crate::control::Conn::busy) {
            return false;
        }
        self.end_state.served = Some(self.served_connections());
        // (Connections waiting for a block or for the rate bucket are indexes into the
        // connections that go now.)
        self.sink.waiting.clear();
        self.sink.paced.clear();
        let keys = &self.end_state.keys;
        let mirrors = &self.shared.transfer.mirrors;
        let conns = std::mem::take(&mut self.conns)
            .into_iter()
            .map(|c| (keys[mirrors[c.mirror].origin].clone(), c))
            .collect();
        let origins = keys.iter().cloned().zip(self.shared.origins.iter().cloned()).collect();
        reactor.keep(origins, self.tls_info.clone(), conns, self.end_state.engine);
        true
    }
}

/// A 304 kept the output's file: read back for `--checksum` and `--signature` as a
/// fetched one is (`None` when neither is asked, or when the output is not a regular
/// file: a stream had nothing written, and a device to be checked is not asked with a
/// condition).
///
/// # Errors
/// `LocalIo` when the kept file cannot be read (gone since the request, say).
fn read_kept(transfer_loop: &mut Loop<'_>, reactor: &mut Reactor) -> Result<Option<Box<Kept>>> {
    let out = Rc::clone(&transfer_loop.end_state.out);
    let checksum = transfer_loop.shared.opts.checksum.as_ref().map(|c| c.algorithm);
    let signed = transfer_loop.end_state.signed.take();
    let Some(path) = out.final_path.as_deref().filter(|_| out.part.is_some()) else {
        return Ok(None);
    };
    if checksum.is_none() && signed.is_none() {
        return Ok(None);
    }
    // (Opened once, its size read from the descriptor: no name looked at twice.)
    let (fd, bytes) = crate::output::verify::open_again(path, out.direct, Expect::Regular)?;
    let (digest, signed) = crate::output::verify::digests(
        &transfer_loop.ring,
        &reactor.verify_pool(transfer_loop.sink.pool.block_size())?,
        (path, Some(fd.as_fd()), out.direct, 0, bytes),
        Expect::Regular,
        checksum,
        signed,
        &mut transfer_loop.interrupted,
    )?;
    if transfer_loop.interrupted.is_some() {
        reactor.interrupted = transfer_loop.interrupted;
    }
    Ok(Some(Box::new(Kept { bytes, digest, signed })))
}

/// What the name of `out`'s read-back must still hold when it is opened anew (its
/// descriptor does not read): the file written ([`Output::identity`]); not asked (no
/// fstat(2)) when the descriptor reads.
///
/// # Errors
/// `LocalIo` when fstat(2) of the output fails.
fn read_back_expect(out: &Output) -> Result<Expect> {
    if out.readable().is_some() {
        return Ok(Expect::Regular);
    }
    out.identity()
        .ok_or_else(|| err!(LocalIo, "{}: fstat of the output failed", out.describe()))
}

/// What [`end`] gives back: the outcome, the report, what a failed transfer knew, and the
/// output while writes are in flight.
pub(crate) type Ended = (Result<Outcome>, Progress, Option<Box<Summary>>, Option<Rc<Output>>);

/// Ends the transfer of `transfer_loop` after its loop returned `r`: a failure keeps what landed
/// (control file, `.part`) and says how to resume; a success truncates, syncs and reads
/// the file back for its checksum or signature, and keeps its idle connections and
/// origins in `reactor`. Gives back the transfer's report, what a failed transfer knew
/// (for `--json`), and the output when writes are still in flight (to be kept open until
/// they are reaped: an epoll worker writes to the fd number).
pub(crate) fn end(mut transfer_loop: Loop<'_>, r: Result<Option<(usize, Url)>>, reactor: &mut Reactor) -> Ended {
    let mut failed = None;
    let r = end_inner(&mut transfer_loop, r, reactor, &mut failed);
    if let Some(rm) = transfer_loop.remote.take() {
        reactor.helpers_back(rm);
    }
    if let Some(p) = transfer_loop.part.as_mut() {
        // What of a helper's part landed, to its owner before the part's end is said.
        p.tell_landed(&transfer_loop.shared.transfer.landed, 0);
        p.tell_blame(transfer_loop.shared.transfer.changed);
    }
    let hold = (transfer_loop.sink.writes_in_flight > 0).then(|| Rc::clone(&transfer_loop.end_state.out));
    (
        r,
        std::mem::replace(&mut transfer_loop.shared.report, Progress::new(true, 0)),
        failed,
        hold,
    )
}

/// What the loop's result `r` means for the transfer of `transfer_loop`: a redirect, a 304 that kept
/// the file, a failure ([`end_failed`], its summary in `failed`) or a finished download
/// ([`end_finished`]).
fn end_inner(
    transfer_loop: &mut Loop<'_>,
    r: Result<Option<(usize, Url)>>,
    reactor: &mut Reactor,
    failed: &mut Option<Box<Summary>>,
) -> Result<Outcome> {
    match r {
        Ok(Some((mirror, to))) => {
            transfer_loop.stop_parts();
            if transfer_loop.shared.transfer.mirrors.len() > 1 {
                // A mirror's redirect may come while bytes are on their way to the file:
                // they land before the ring goes (the next run fetches them again).
                transfer_loop.settle();
            }
            Ok(Outcome::Redirect { mirror, to })
        }
        Ok(None) if transfer_loop.shared.transfer.not_modified => {
            transfer_loop.shared.report.clear();
            let kept = read_kept(transfer_loop, reactor)?;
            let size = kept.as_ref().map(|k| k.bytes).or(transfer_loop.shared.opts.kept);
            let (io, registered) = (
                transfer_loop.end_state.ring.io.clone(),
                transfer_loop.end_state.ring.registered && !transfer_loop.sink.pool.pin_failed(),
            );
            // (The check went over a connection: `--json` counts it, its requests and
            // handshakes, as a fetched file's.)
            let summary = Box::new(transfer_loop.summary(size.unwrap_or(0), io, registered, None));
            Ok(Outcome::NotModified {
                mirror: transfer_loop.shared.transfer.reference.unwrap_or(0),
                kept,
                summary,
            })
        }
        Ok(None) => {
            if let Some(n) = transfer_loop.shared.transfer.capped_at {
                transfer_loop.shared.report.note(Note::Allowed {
                    connections: n,
                    own: transfer_loop.shared.transfer.capped_own.min(n),
                });
            }
            if let Some(rm) = transfer_loop.remote.as_ref().filter(|rm| rm.given > 0) {
                transfer_loop.shared.report.note(Note::Reactors {
                    reactors: rm.reactors(),
                    others: rm.helpers(),
                    parts: rm.given,
                    bytes: rm.by_others,
                });
            }
            end_finished(transfer_loop, reactor)
        }
        Err(e) => Err(end_failed(transfer_loop, e, reactor, failed)),
    }
}

/// What a control file `st` read to resume names: bytes landed of the file's size, or, for
/// a partial fetch of `want` (sorted `[start, end)` ranges), of those ranges only.
fn kept_before(st: &crate::output::resume::State, want: Option<&[(u64, u64)]>) -> (u64, u64) {
    let bytes = |r: &[(u64, u64)]| r.iter().map(|r| r.1 - r.0).sum::<u64>();
    match want {
        None => (bytes(&st.ranges), st.total),
        Some(want) => {
            let want = crate::schedule::Landed::from_ranges(&[(0, st.total)]).within(want);
            let have = crate::schedule::Landed::from_ranges(&st.ranges).within(&want);
            (bytes(&have), bytes(&want))
        }
    }
}

/// The transfer of `transfer_loop` failed with `e`: parts out on other reactors stop first and say
/// what they landed, the writes in flight land, and what landed is kept for a later run
/// ([`keep_landed`]); `e` comes back saying what was kept, and `failed` gets the summary.
fn end_failed(
    transfer_loop: &mut Loop<'_>,
    mut e: Error,
    reactor: &mut Reactor,
    failed: &mut Option<Box<Summary>>,
) -> Error {
    let out = Rc::clone(&transfer_loop.end_state.out);
    transfer_loop.stop_parts();
    transfer_loop.settle();
    if e.no_space {
        // Said now, every write in flight landed (or failed) and the other reactors' parts
        // stopped: the bytes not landed, as the "kept" count below sees them.
        let (have, total, _) = transfer_loop.shared.transfer.shown();
        e.msg.push_str(&out.space_hint(total.unwrap_or(0).saturating_sub(have)));
    }
    let saved = keep_landed(transfer_loop, &out);
    transfer_loop.disown_control();
    // A resume stopped before its first answer: its control file, untouched (it
    // saves only once planned), still names what landed before.
    let want = transfer_loop.shared.opts.fetch_only.as_deref();
    let before = transfer_loop
        .shared
        .transfer
        .resume
        .as_ref()
        .filter(|_| transfer_loop.shared.transfer.landed.bytes() == 0)
        .map(|st| kept_before(st, want))
        .filter(|b| b.0 > 0);
    if let Some(part) = &out.part
        && !transfer_loop.shared.transfer.changed
    {
        let kept = if saved {
            let (have, total, _) = transfer_loop.shared.transfer.shown();
            Some((have, total.unwrap_or(0)))
        } else {
            before
        };
        if let Some((have, total)) = kept {
            // (A partial fetch counts the bytes of its own ranges, not its holes.)
            let the = if want.is_some() { "the " } else { "" };
            let asked = if want.is_some() { " asked" } else { "" };
            e.msg.push_str(&format!(
                "; {have} of {the}{total} bytes{asked} kept in {}: run the same command again to fetch only the rest",
                part.display()
            ));
        } else if transfer_loop.shared.transfer.landed.bytes() > 0
            && transfer_loop.shared.transfer.plan.is_planned()
            && !transfer_loop.shared.transfer.ranges
        {
            e.msg.push_str(&format!(
                "; {} bytes kept in {}, but the server does not serve ranges: a new run starts over",
                transfer_loop.shared.transfer.landed.bytes(),
                part.display()
            ));
        }
    }
    transfer_loop.shared.report.clear();
    let (io, registered) = (
        transfer_loop.end_state.ring.io.clone(),
        // (A write block that could not be pinned later left the pool unregistered.)
        transfer_loop.end_state.ring.registered && !transfer_loop.sink.pool.pin_failed(),
    );
    let mut s = transfer_loop.summary(
        before.map_or(transfer_loop.shared.transfer.landed.bytes(), |b| b.0),
        io,
        registered,
        None,
    );
    s.writes_pending = transfer_loop.sink.writes_in_flight > 0;
    if e.kind == crate::error::Kind::Interrupted && transfer_loop.end_state.served.is_none() {
        // (Cut short, not failed: what its origins taught — the cap a server was
        // seen allowing, a proven address — holds for the file's resume in this run
        // (`Outcome::Recalled`) and the files after it. Its connections close. A transfer
        // that handed its connections back gave its origins then: a second copy would
        // undo what later files taught the reactor.)
        let keys = std::mem::take(&mut transfer_loop.end_state.keys);
        let origins = keys
            .into_iter()
            .zip(std::mem::take(&mut transfer_loop.shared.origins))
            .collect();
        reactor.keep(
            origins,
            transfer_loop.tls_info.clone(),
            Vec::new(),
            transfer_loop.end_state.engine,
        );
    }
    *failed = Some(Box::new(s));
    e
}

/// A failed transfer's bytes on `out`, kept for a later `-c`: a `.part` that holds
/// nothing (only preallocated zeros) is removed; else the control file is saved once an
/// fdatasync proved the bytes it names are on disk (it keeps its last synced state when
/// writes are still pending or the sync fails). Returns whether it was saved with bytes.
fn keep_landed(transfer_loop: &mut Loop<'_>, out: &Output) -> bool {
    if transfer_loop.shared.transfer.landed.bytes() == 0 && !transfer_loop.end_state.resuming {
        out.remove_part();
    } else if transfer_loop.sink.writes_in_flight > 0 {
        // Writes that did not complete in settle()'s 10 s: an fdatasync could hang
        // as long.
        transfer_loop.shared.report.note(Note::WritesPending);
    } else if transfer_loop.control.is_some()
        && transfer_loop.keeps_control()
        && (transfer_loop.shared.transfer.file || out.room.is_some())
        && out.owns_part()
    {
        // (A `.part` replaced under the run is another's: its control file too.)
        match transfer_loop.wait_for(
            Op::Fsync {
                fd: transfer_loop.sink.out_fd,
                datasync: true,
            },
            Tag::Fsync(1).encode(),
        ) {
            Ok(r) if r >= 0 => {
                return transfer_loop.save_control(None) && transfer_loop.shared.transfer.landed.bytes() > 0;
            }
            _ => transfer_loop.shared.report.note(Note::SyncFailed),
        }
    }
    false
}

/// The transfer of `transfer_loop` finished: its output is complete, truncated and synced
/// ([`sync_output`]), read back for `--checksum` and `--signature`, and what it leaves
/// open goes to `reactor` for the next transfer from the same origin.
fn end_finished(transfer_loop: &mut Loop<'_>, reactor: &mut Reactor) -> Result<Outcome> {
    let out = Rc::clone(&transfer_loop.end_state.out);
    let opts = Rc::clone(&transfer_loop.shared.opts);
    let total = transfer_loop
        .shared
        .transfer
        .total
        .unwrap_or(transfer_loop.shared.transfer.received);
    if !transfer_loop.shared.transfer.landed.is_complete(total) {
        return Err(err!(
            Internal,
            "download ended with {} of {total} bytes on disk",
            transfer_loop.shared.transfer.landed.bytes()
        ));
    }
    // (Resumed by its name, a replaced `.part` is another file: a caller that goes on
    // from its control file learns it here. The rename's own check is the last step's,
    // next to the rename: `app::finish`.)
    if opts.keep_part {
        out.still_ours().inspect_err(|_| transfer_loop.disown_control())?;
    }
    sync_output(transfer_loop, &out, total)?;
    if opts.keep_part && !transfer_loop.save_control(None) {
        // (The caller goes on from the control file: without it nothing is known.)
        return Err(err!(LocalIo, "{}: its control file could not be saved", out.describe()));
    }
    transfer_loop.shared.report.clear();
    let (digest, signed) = match (&opts.checksum, out.read_back()) {
        (_, Some((part, base))) => crate::output::verify::digests(
            &transfer_loop.ring,
            // (Its own blocks: the write pool may be held by other transfers' connections.)
            &reactor.verify_pool(transfer_loop.sink.pool.block_size())?,
            (part, out.readable(), out.direct, base, total),
            read_back_expect(&out)?,
            opts.checksum.as_ref().map(|c| c.algorithm),
            transfer_loop.end_state.signed.take(),
            &mut transfer_loop.interrupted,
        )?,
        (Some(_), None) => (transfer_loop.sink.stream_digest.take().map(|d| d.finish()), None),
        _ => (None, None),
    };
    if let Some(before) = transfer_loop.end_state.ring.fixed_before {
        let ops = transfer_loop.ring.fixed_file_ops() - before;
        transfer_loop.shared.report.note(Note::FixedFileOps { ops });
    }
    if opts.verbose > 0
        && let Some(cpu) = transfer_loop.end_state.ring.sqpoll_tid.and_then(crate::io::thread_cpu)
    {
        // Not in the process's rusage until the thread exits: say it here.
        transfer_loop.shared.report.note(Note::SqpollCpu { cpu });
    }
    let info = transfer_loop.tls_info.clone();
    let (io, registered) = (
        transfer_loop.end_state.ring.io.clone(),
        // (A write block that could not be pinned later left the pool unregistered.)
        transfer_loop.end_state.ring.registered && !transfer_loop.sink.pool.pin_failed(),
    );
    let mut summary = transfer_loop.summary(total, io, registered, digest);
    summary.signed = signed;
    if transfer_loop.interrupted.is_some() {
        reactor.interrupted = transfer_loop.interrupted;
    }
    // What this transfer leaves open goes to the next one from the same origin (already
    // gone when it handed its connections back during its fsync: what it knew then is
    // all it learned, and a second copy would undo what a later file taught the reactor).
    if transfer_loop.end_state.served.is_some() {
        return Ok(Outcome::Done(Box::new(summary)));
    }
    let keys = std::mem::take(&mut transfer_loop.end_state.keys);
    let conns = std::mem::take(&mut transfer_loop.conns)
        .into_iter()
        .map(|c| (keys[transfer_loop.shared.transfer.mirrors[c.mirror].origin].clone(), c))
        .collect();
    let origins = keys
        .into_iter()
        .zip(std::mem::take(&mut transfer_loop.shared.origins))
        .collect();
    reactor.keep(origins, info, conns, transfer_loop.end_state.engine);
    Ok(Outcome::Done(Box::new(summary)))
}

/// A file (or device) output of `total` bytes truncated to its size and fsynced, unless
/// the run of a list already did so beside other transfers ([`Loop::ready_to_sync`]).
///
/// # Errors
/// `LocalIo` when the truncation or the fsync fails.
fn sync_output(transfer_loop: &mut Loop<'_>, out: &Output, total: u64) -> Result<()> {
    if !(transfer_loop.shared.transfer.file || out.room.is_some()) {
        return Ok(());
    }
    let (r, group) = match transfer_loop.end_state.synced.take() {
        Some(r) => r,
        None => {
            if transfer_loop.shared.transfer.file {
                out.truncate(total)?;
            }
            let r = transfer_loop.wait_for(
                Op::Fsync {
                    fd: transfer_loop.sink.out_fd,
                    datasync: false,
                },
                Tag::Fsync(0).encode(),
            )?;
            (r, false)
        }
    };
    if r < 0 {
        let how = if group {
            "sync (its group's syncfs, then its own fsync) of"
        } else {
            "fsync"
        };
        return Err(err!(
            LocalIo,
            "{how} {}: {} (not renamed: its bytes may not be on disk)",
            out.describe(),
            errno(r)
        ));
    }
    Ok(())
}
