//! A 206 Partial Content answer (RFC 9110 §15.3.7, §14.4): to the first request it gives
//! the file's size and the plan of segments (resumed where a saved state agrees); to a
//! later one it must carry the size, validator and range its mirror was accepted with.

use super::{HeadAction, accept_reference, kept_as_is, protocol, take_disposition, within_bound};
use crate::control::ctx::Ctx;
use crate::control::{Fail, Job};
use crate::engine::blocks::align_down;
use crate::engine::place::{Delimiter, content_range_fits};
use crate::error::Kind;
use crate::report::Note;
use crate::schedule::{self, Landed, Segment};
use crate::transfer::mirror::{Standing, Validators};
use http::{ChunkedDecoder, ContentRange, Framing};
use std::collections::VecDeque;

/// The byte range a 206 carries: first, last and the complete length (`None` for `*`).
type Carried = (u64, u64, Option<u64>);

/// A 206 to `job`: checked against the request and the reference ([`plan_from_first`] for
/// the first request, [`check_later`] for the others), then its body is set up
/// ([`begin_body`]). `part`, `framing`, `validator`: as [`super::on_head`] read them.
pub(super) fn on_partial(
    job: &mut Job,
    shared: &mut Ctx<'_>,
    resp: &http::Response<'_, '_>,
    part: Option<(&http::Part<'_, '_>, &[u8])>,
    framing: Framing,
    validator: Option<Vec<u8>>,
) -> std::result::Result<HeadAction, Fail> {
    let url = shared.url(job.mirror);
    let host = url.host();
    let (first, last, complete) = carried(resp, part, host)?;
    let Some(complete) = complete else {
        return Err(unknown_total(job, shared, host, first, last));
    };
    if job.probe {
        if first != job.seg.start {
            return Err(protocol(
                host,
                format!(
                    "asked for bytes from {}, got Content-Range {first}-{last}",
                    job.seg.start
                ),
            ));
        }
        within_bound(shared.opts, complete)?;
        if shared.opts.kept == Some(complete) && shared.transfer.part.is_none() {
            return kept_as_is(job, shared);
        }
        plan_from_first(job, shared, resp, last, complete, validator)?;
    } else {
        check_later(job, shared, resp, (first, last, complete), &validator)?;
    }
    begin_body(job, part, framing, host, first, last)
}

/// The range a 206 carries: its part's Content-Range in `multipart/byteranges` form (one
/// in the response's own head is one a server must not send with multipart, RFC 9110
/// §14.6), else the response's.
fn carried(
    resp: &http::Response<'_, '_>,
    part: Option<(&http::Part<'_, '_>, &[u8])>,
    host: &str,
) -> std::result::Result<Carried, Fail> {
    if let Some((p, _)) = part {
        return Ok((p.first, p.last, p.complete));
    }
    let cr = resp
        .content_range()
        .map_err(|e| protocol(host, format!("bad Content-Range: {e}")))?;
    let Some(ContentRange::Bytes { first, last, complete }) = cr else {
        return Err(protocol(host, "206 without a byte Content-Range".into()));
    };
    Ok((first, last, complete))
}

/// A 206 with no complete length (`bytes first-last/*`, RFC 9110 §14.4 allows it): no size
/// to plan segments with. To the first request the transfer asks again without Range,
/// for the whole file on one connection; else it is a protocol failure.
fn unknown_total(job: &Job, shared: &mut Ctx<'_>, host: &str, first: u64, last: u64) -> Fail {
    if job.probe && !shared.transfer.plain_get {
        shared.transfer.plain_get = true;
        shared.report.note(Note::UnknownTotal {
            host: host.to_string(),
            first,
            last,
        });
        return Fail::retry(
            Kind::HttpStatus,
            format!("{host}: 206 with an unknown complete length (bytes {first}-{last}/*)"),
        );
    }
    protocol(host, "206 with an unknown complete length (bytes a-b/*)".into())
}

/// The first answer, a 206 up to `last` of a `complete`-byte file: the size, ranges and
/// reference are set, the first segment ends where the answer does, and the rest is
/// planned ([`rest_to_fetch`]) over as many connections as it is worth.
fn plan_from_first(
    job: &mut Job,
    shared: &mut Ctx<'_>,
    resp: &http::Response<'_, '_>,
    last: u64,
    complete: u64,
    validator: Option<Vec<u8>>,
) -> std::result::Result<(), Fail> {
    shared.transfer.total = Some(complete);
    shared.transfer.ranges = true;
    // (A part of another reactor's transfer: the owner preallocated.)
    // (A partial fetch leaves holes: nothing is preallocated.)
    shared.transfer.need_fallocate = shared.transfer.part.is_none() && shared.opts.fetch_only.is_none();
    // The rest is planned from an aligned offset: a server that caps range replies
    // at an odd size must not make later O_DIRECT writes unaligned.
    let first_end = if last + 1 >= complete {
        complete
    } else if shared.transfer.direct {
        align_down(last + 1, shared.transfer.align)
    } else {
        last + 1
    };
    job.seg.end = first_end;
    take_disposition(shared, resp)?;
    let queue = rest_to_fetch(job, shared, first_end, complete, &validator)?;
    shared.transfer.plan.set_queue(queue);
    // The size is known and ranges are served: open as many connections as the
    // bytes still to fetch are worth (opened = used).
    shared.transfer.wanted = schedule::connections_for(
        complete.saturating_sub(shared.transfer.landed.bytes()),
        shared.opts.min_split_size,
        shared.opts.connections,
        shared.transfer.mirrors.len(),
    );
    accept_reference(job.mirror, shared, resp, &validator);
    shared.transfer.validator = validator;
    let segments = shared.transfer.plan.queued();
    shared.report.note(Note::Planned {
        total: complete,
        segments,
    });
    Ok(())
}

/// The segments after the first answer (which ends at `first_end`) of a `complete`-byte
/// file: what a saved state lacks when its size and validator agree, everything but the
/// first answer when the file changed since (fatal for a part of another reactor's file,
/// whose bytes must be of the owner's file), else the whole rest. A partial fetch
/// ([`crate::config::Config::fetch_only`]) counts everything outside its ranges as landed.
fn rest_to_fetch(
    job: &Job,
    shared: &mut Ctx<'_>,
    first_end: u64,
    complete: u64,
    validator: &Option<Vec<u8>>,
) -> std::result::Result<VecDeque<Segment>, Fail> {
    let holes = shared
        .opts
        .fetch_only
        .as_deref()
        .map(|want| Landed::outside(want, complete));
    // What is on disk already (a valid saved state), and the first answer's range.
    let this_answer = (job.seg.start, first_end);
    let mut landed = match shared.transfer.resume.take() {
        Some(st) if st.total == complete && st.validator == *validator => {
            let landed = Landed::from_ranges(&st.ranges);
            if holes.is_none() {
                // (A partial fetch's caller says what it reuses.)
                shared.report.note(Note::Resuming {
                    have: landed.bytes(),
                    total: complete,
                });
            }
            landed
        }
        Some(st) => {
            let what = if st.total != complete {
                format!("size {} -> {complete}", st.total)
            } else {
                "validator differs".to_owned()
            };
            if shared.transfer.part.is_some() {
                // A part's bytes must be of the owner's file: it ends the part
                // (and the owner's transfer, which cannot use them).
                shared.transfer.changed = true;
                return Err(Fail::fatal(
                    Kind::Protocol,
                    format!(
                        "{}: the file changed while it was fetched ({what})",
                        shared.url(job.mirror).host()
                    ),
                ));
            }
            shared.report.note(Note::Changed { what });
            Landed::default()
        }
        None if holes.is_none() => {
            return Ok(schedule::plan(
                first_end,
                complete,
                shared.opts.connections,
                shared.transfer.align,
            ));
        }
        None => Landed::default(),
    };
    // A partial fetch's holes count as landed; those that hold nothing are never recorded
    // (`Loop::save_control`): what landed before stays in the control file.
    if let Some(holes) = &holes {
        let empty = holes.within(Landed::outside(landed.ranges(), complete).ranges());
        for &(a, b) in holes.ranges() {
            landed.add(a, b);
        }
        shared.transfer.holes = Some(Landed::from_ranges(&empty));
        shared.transfer.skipped = Some(holes.clone());
    }
    let mut planned = landed.clone();
    planned.add(this_answer.0, this_answer.1);
    shared.transfer.landed = landed;
    Ok(schedule::plan_missing(
        &planned,
        0,
        complete,
        shared.opts.connections,
        shared.transfer.align,
    ))
}

/// A 206 to a later request, carrying `(first, last, complete)`: its mirror's first
/// answer must agree with the reference ([`first_answer_of_mirror`]), and every answer
/// must keep the file's size and validator (else the file changed: fatal) and carry the
/// range asked for.
fn check_later(
    job: &Job,
    shared: &mut Ctx<'_>,
    resp: &http::Response<'_, '_>,
    (first, last, complete): (u64, u64, u64),
    validator: &Option<Vec<u8>>,
) -> std::result::Result<(), Fail> {
    let url = shared.url(job.mirror);
    let host = url.host();
    first_answer_of_mirror(job, shared, resp, complete, validator)?;
    if Some(complete) != shared.transfer.total {
        shared.transfer.changed = true;
        return Err(Fail::fatal(
            Kind::Protocol,
            format!(
                "{host}: the file size changed from {} to {complete} during the download",
                shared.transfer.total.unwrap_or(0)
            ),
        ));
    }
    let known = &shared.transfer.mirrors[job.mirror].validator;
    if validator.is_some() && known.is_some() && validator != known {
        shared.transfer.changed = true;
        return Err(Fail::fatal(
            Kind::Protocol,
            format!("{host}: the file changed during the download (validator differs)"),
        ));
    }
    if let Some(m) = &job.multi {
        // (A part not asked: the runs are asked again one per request, no try spent.)
        return m.check_part(first, last).map_err(|why| {
            let mut f = protocol(host, why);
            f.step_down = true;
            f
        });
    }
    if !content_range_fits(first, last, job.placer.pos(), job.seg.end) {
        return Err(protocol(
            host,
            format!(
                "asked for bytes {}-{}, got Content-Range {first}-{last}",
                job.placer.pos(),
                job.seg.end - 1
            ),
        ));
    }
    Ok(())
}

/// The first answer (a 206 for `complete` bytes) of a mirror that is not the reference:
/// it must serve the reference's size, and its validators must agree with the
/// reference's unless a `--checksum` will prove the bytes. `Err` fails it for good (the
/// mirror is dropped while another is left).
fn first_answer_of_mirror(
    job: &Job,
    shared: &mut Ctx<'_>,
    resp: &http::Response<'_, '_>,
    complete: u64,
    validator: &Option<Vec<u8>>,
) -> std::result::Result<(), Fail> {
    let k = job.mirror;
    if shared.transfer.mirrors[k].standing == Standing::Accepted {
        return Ok(());
    }
    let url = shared.url(k);
    let host = url.host();
    let Some(r) = shared.transfer.reference else {
        // (Only the first request goes out before the reference answered.)
        return Err(Fail::retry(
            Kind::Protocol,
            format!("{host}: answered before the reference mirror did"),
        ));
    };
    let total = shared.transfer.total.unwrap_or(0);
    if complete != total {
        let mut f = Fail::fatal(
            Kind::Protocol,
            format!("{host}: size {complete} differs from the reference's {total}"),
        );
        if crate::transfer::mirror::names_differ(&shared.transfer.mirrors[k].url, &shared.transfer.mirrors[r].url) {
            f.hint = crate::transfer::mirror::DIFFERENT_FILES_HINT;
        }
        return Err(f);
    }
    let validators = Validators::of(resp);
    if shared.opts.checksum.is_none()
        && let Err(why) = validators.agree_with(&shared.transfer.mirrors[r].validators)
    {
        let mut f = Fail::fatal(Kind::Protocol, format!("{host}: {why}"));
        f.hint = crate::transfer::mirror::CHECKSUM_HINT;
        return Err(f);
    }
    let m = &mut shared.transfer.mirrors[k];
    m.standing = Standing::Accepted;
    m.validators = validators;
    m.validator = validator.clone();
    let url = m.url.clone();
    shared.report.note(Note::MirrorAccepted { url });
    Ok(())
}

/// The body of a 206 carrying bytes `first..=last`: delimited by its Content-Length or
/// chunked coding (a length must match the range), or, in `multipart/byteranges` form,
/// exactly the part's bytes. The one part of an answer to a single range: its closing
/// delimiter stays unread, so the connection is closed instead of reused. The parts of an
/// answer to several ranges are walked to the close delimiter: the connection is kept
/// when that ends the answer at its Content-Length ([`crate::control::multi::Multi::ended`]).
fn begin_body(
    job: &mut Job,
    part: Option<(&http::Part<'_, '_>, &[u8])>,
    framing: Framing,
    host: &str,
    first: u64,
    last: u64,
) -> std::result::Result<HeadAction, Fail> {
    let n = last - first + 1;
    if job.multi.is_some() {
        // A multi-range request: the part (checked against what was asked) goes where it
        // says; a multipart answer's further parts follow it (`body::walk_parts`).
        crate::control::body::begin_part(job, first, last);
        if let Some((p, boundary)) = part {
            if matches!(framing, Framing::Chunked) {
                job.keep_alive = false;
                // (Asked again one range per request, no try spent.)
                let mut f = protocol(
                    host,
                    "206 in multipart/byteranges form with chunked transfer coding (not supported)".into(),
                );
                f.step_down = true;
                return Err(f);
            }
            let m = job.multi.as_mut().expect("checked");
            m.boundary = boundary.to_vec();
            // (Its length tells whether the close delimiter ends it: then it is kept alive.)
            m.body = match framing {
                Framing::Length(l) => Some(l),
                _ => None,
            };
            m.walked += p.head_len as u64;
            return Ok(HeadAction::Body);
        }
    }
    if let Some((p, boundary)) = part {
        job.keep_alive = false;
        return match framing {
            Framing::Length(l) if !p.is_whole_body(l, boundary) => Err(protocol(
                host,
                format!(
                    "206 in multipart/byteranges form with Content-Length {l}: more than the one part \
                     asked for ({n} bytes, Content-Range {first}-{last}, and its closing boundary)"
                ),
            )),
            Framing::Chunked => Err(protocol(
                host,
                "206 in multipart/byteranges form with chunked transfer coding (not supported)".into(),
            )),
            _ => {
                job.placer.begin(Delimiter::Length(n), last + 1);
                Ok(HeadAction::Body)
            }
        };
    }
    let delim = match framing {
        Framing::Chunked => Delimiter::Chunked(ChunkedDecoder::new()),
        Framing::Length(l) if l != n => {
            return Err(protocol(
                host,
                format!("Content-Length {l} does not match Content-Range {first}-{last}"),
            ));
        }
        _ => Delimiter::Length(n),
    };
    job.placer.begin(delim, last + 1);
    Ok(HeadAction::Body)
}
