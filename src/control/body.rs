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
    if fed == Fed::Done {
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
