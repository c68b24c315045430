//! A job's body bytes: placed into the write blocks by the transfer's data path
//! ([`crate::engine::sink::Sink::place`]), counted for the transfer, its mirror and the
//! job, and the body's end (the sink queues the last block; what the response did not
//! cover is queued again in the plan).

use crate::control::ctx::Ctx;
use crate::control::{Fail, Rx};
use crate::engine::place::{Blocks, Delimiter, Fed, PlaceError, Placer};
use crate::err;
use crate::error::Kind;
use crate::schedule::Segment;
use std::time::Instant;

/// Runs `f` on the job's body with the transfer's write pool and queue (the sink counts
/// what it placed for the transfer and the mirror), marks the job and its connection
/// served, and finishes the job when the body is complete. Returns what `f` said.
pub(crate) fn with_placer(
    rx: &mut Rx,
    shared: &mut Ctx<'_>,
    f: impl FnOnce(&mut Placer, &mut Blocks<'_>) -> std::result::Result<Fed, PlaceError>,
) -> std::result::Result<Fed, Fail> {
    let job = rx.job.as_mut().expect("body bytes for a job");
    let (r, moved) = shared.sink.place(&mut job.placer, shared.transfer, job.mirror, f);
    job.got_bytes |= moved > 0;
    rx.served |= moved > 0;
    if moved > 0 && job.first_byte.is_none() {
        job.first_byte = Some(Instant::now());
    }
    let fed = r.map_err(|e| {
        let kind = if e == PlaceError::NoProgress {
            Kind::Internal
        } else {
            Kind::Protocol
        };
        Fail::retry(kind, e.to_string())
    })?;
    let parts = job.multi.as_ref().is_some_and(|m| !m.boundary.is_empty());
    if fed == Fed::Done && parts {
        part_done(rx, shared);
        walk_parts(rx, shared)?;
    } else if fed == Fed::Done {
        if matches!(job.placer.delimiter(), Some(Delimiter::Chunked(_))) && !shared.transfer.ranges {
            // A chunked 200 tells the file size only at its end.
            shared.transfer.total = Some(job.placer.pos());
        }
        finish_job(rx, shared);
    }
    Ok(fed)
}

/// The response body is complete: the sink queues the last block; what the response did
/// not cover is requeued (a segment out of tries sets [`Ctx::gave_up`]).
pub(crate) fn finish_job(rx: &mut Rx, shared: &mut Ctx<'_>) {
    rx.served = true;
    let mut job = rx.job.take().expect("finish_job with a job");
    let end = job.placer.pos();
    let file_end = shared.transfer.total.is_some_and(|t| end >= t);
    if job.placer.overrun() {
        rx.extra = true;
    }
    // A short response that ended inside a block (O_DIRECT): keep the aligned part, fetch
    // the rest again. The file's last block is kept whole (padded when written).
    let trim = (shared.transfer.direct && !file_end).then_some(shared.transfer.align);
    let requeue_from = shared.sink.release(&mut job.placer, trim);
    if let Some(m) = &job.multi {
        finish_multi(&job, shared, requeue_from);
        if !job.keep_alive || m.unread() {
            rx.extra = true;
        }
        return;
    }
    let seg_end = if shared.transfer.ranges {
        job.seg.end
    } else {
        shared.transfer.total.unwrap_or(end)
    };
    if requeue_from < seg_end && !file_end {
        // A short reply that moved nothing (aligned) forward counts as a failed try.
        let tries = if requeue_from > job.seg.start {
            job.seg.tries
        } else {
            job.seg.tries + 1
        };
        if tries >= shared.opts.max_tries {
            shared.gave_up = Some(err!(
                Protocol,
                "{}: replies to bytes {}-{} stop short at {end} (gave up after {})",
                shared.url(job.mirror).host(),
                job.seg.start,
                seg_end - 1,
                crate::schedule::retry::n_tries(tries)
            ));
        }
        shared.transfer.plan.requeue(
            Segment {
                start: requeue_from,
                end: seg_end,
                tries,
                grace: job.seg.grace,
            },
            false,
        );
    }
    if !job.keep_alive {
        rx.extra = true;
    }
}

/// A multi-range request's answer ended (its close delimiter, its one part's end, or the
/// connection's end between parts): the runs not received go back to the queue, with a
/// try counted when no byte came (bounded by `--max-tries` as any short reply); when it
/// served fewer ranges than asked its origin is asked fewer per request from now on.
fn finish_multi(job: &crate::control::Job, shared: &mut Ctx<'_>, requeue_from: u64) {
    let m = job.multi.as_ref().expect("a multi-range job");
    let owed = job.owed(requeue_from);
    let mirror = &mut shared.transfer.mirrors[job.mirror];
    if let Some(k) = m.step_down(mirror.ranges_per_request, owed.len()) {
        mirror.ranges_per_request = mirror.ranges_per_request.min(k);
        let host = shared.url(job.mirror).host().to_owned();
        shared.report.note(crate::report::Note::StepDown {
            host,
            asked: m.asked.len(),
            answer: format!("{} part(s)", m.parts),
            now: k,
        });
    }
    // A try counts when nothing of what was asked came.
    let owed_bytes: u64 = owed.iter().map(|s| s.end - s.start).sum();
    let moved = owed_bytes < m.asked.iter().map(|r| r.1 - r.0).sum::<u64>();
    let tries = if moved { job.seg.tries } else { job.seg.tries + 1 };
    if !owed.is_empty() && tries >= shared.opts.max_tries {
        shared.gave_up = Some(err!(
            Protocol,
            "{}: replies to a request for {} byte ranges stop short, {} range(s) not received (gave up after {})",
            shared.url(job.mirror).host(),
            m.asked.len(),
            owed.len(),
            crate::schedule::retry::n_tries(tries)
        ));
    }
    for s in owed.into_iter().rev() {
        shared.transfer.plan.requeue(Segment { tries, ..s }, false);
    }
}

/// A part of a `multipart/byteranges` body is complete: its last block is queued, what
/// it carried counts as received whole, and the job waits for the next part's head or
/// the close delimiter ([`walk_parts`]).
fn part_done(rx: &mut Rx, shared: &mut Ctx<'_>) {
    let job = rx.job.as_mut().expect("a part's end with a job");
    let file_end = shared.transfer.total.is_some_and(|t| job.placer.pos() >= t);
    let trim = (shared.transfer.direct && !file_end).then_some(shared.transfer.align);
    let from = shared.sink.release(&mut job.placer, trim);
    let m = job.multi.as_mut().expect("a multi-range job");
    m.done.add(job.seg.start, from);
    m.in_part = false;
    job.placer = Placer::new(from, from).with_source(job.mirror);
}

/// Between the parts of a multi-range answer, `rx.head` holds what came after the last
/// part's bytes: the next part's head (its bytes placed like any body's, checked against
/// what was asked first), or the close delimiter, which ends the job.
///
/// # Errors
/// A retryable [`Kind::Protocol`] failure for a malformed delimiter or part head, a part
/// of a range not asked or asked a second time, or a part of another file size.
pub(crate) fn walk_parts(rx: &mut Rx, shared: &mut Ctx<'_>) -> std::result::Result<(), Fail> {
    let Some(job) = rx.job.as_mut() else { return Ok(()) };
    let Some(m) = job.multi.as_mut().filter(|m| !m.in_part) else {
        return Ok(());
    };
    let host = shared.url(job.mirror).host().to_owned();
    // A multipart answer that cannot be walked or lies about its parts: what came stays,
    // the rest is asked again one range per request, no try spent.
    let bad = |what: String| {
        let mut f = Fail::retry(Kind::Protocol, format!("{host}: multipart/byteranges answer: {what}"));
        f.step_down = true;
        f
    };
    let mut headers = [http::Header::EMPTY; http::MAX_PART_FIELDS];
    let (first, last, head_len) = match http::next_byteranges_part(&rx.head, &m.boundary, &mut headers) {
        Err(e) => return Err(bad(e.to_string())),
        Ok(http::Status::Partial) => return Ok(()),
        Ok(http::Status::Complete(http::Walk::End { .. })) => {
            m.ended(rx.head.len());
            rx.head.clear();
            finish_job(rx, shared);
            return Ok(());
        }
        Ok(http::Status::Complete(http::Walk::Part(p))) => {
            if p.complete.is_some_and(|c| Some(c) != shared.transfer.total) {
                return Err(bad(format!(
                    "a part of a {}-byte file, not of {} bytes",
                    p.complete.unwrap_or(0),
                    shared.transfer.total.unwrap_or(0)
                )));
            }
            (p.first, p.last, p.head_len)
        }
    };
    m.check_part(first, last).map_err(bad)?;
    m.walked += head_len as u64;
    begin_part(job, first, last);
    let rest = rx.head.split_off(head_len);
    rx.head.clear();
    feed_part(rx, shared, &rest)
}

/// The job's next body bytes are those of part `first..=last` of its multi-range answer.
pub(crate) fn begin_part(job: &mut crate::control::Job, first: u64, last: u64) {
    let m = job.multi.as_mut().expect("a multi-range job");
    m.in_part = true;
    m.parts += 1;
    m.walked += last - first + 1;
    job.seg = Segment {
        start: first,
        end: last + 1,
        ..job.seg
    };
    job.placer = Placer::new(first, last + 1).with_source(job.mirror);
    job.placer.begin(Delimiter::Length(last - first + 1), last + 1);
}

/// Body bytes of a job: all of them to the placer, except in a multipart answer of
/// several parts, where only the part's own bytes go there and what follows them waits
/// in `rx.head` for the next part's head ([`walk_parts`]).
///
/// # Errors
/// As [`with_placer`] and [`walk_parts`].
pub(crate) fn feed_part(rx: &mut Rx, shared: &mut Ctx<'_>, data: &[u8]) -> std::result::Result<(), Fail> {
    let job = rx.job.as_mut().expect("body bytes for a job");
    let parts = job.multi.as_ref().is_some_and(|m| !m.boundary.is_empty());
    if !parts {
        with_placer(rx, shared, |p, blocks| p.feed(data, blocks))?;
        return Ok(());
    }
    if !job.multi.as_ref().is_some_and(|m| m.in_part) {
        rx.head.extend_from_slice(data);
        return walk_parts(rx, shared);
    }
    let owed = job.placer.remaining().saturating_sub(job.placer.spill_len() as u64);
    let n = usize::try_from(owed).unwrap_or(usize::MAX).min(data.len());
    // What follows the part's bytes waits for its end (a full write pool may hold them).
    rx.head.extend_from_slice(&data[n..]);
    with_placer(rx, shared, |p, blocks| p.feed(&data[..n], blocks))?;
    Ok(())
}
