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
    sh: &mut Ctx<'_>,
    resp: &http::Response<'_, '_>,
    part: Option<(&http::Part<'_, '_>, &[u8])>,
    framing: Framing,
    validator: Option<Vec<u8>>,
) -> std::result::Result<HeadAction, Fail> {
    let url = sh.url(job.mirror);
    let host = url.host();
    let (first, last, complete) = carried(resp, part, host)?;
    let Some(complete) = complete else {
        return Err(unknown_total(job, sh, host, first, last));
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
        within_bound(sh.opts, complete)?;
        if sh.opts.kept == Some(complete) && sh.tr.part.is_none() {
            return kept_as_is(job, sh);
        }
        plan_from_first(job, sh, resp, last, complete, validator)?;
    } else {
        check_later(job, sh, resp, (first, last, complete), &validator)?;
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
fn unknown_total(job: &Job, sh: &mut Ctx<'_>, host: &str, first: u64, last: u64) -> Fail {
    if job.probe && !sh.tr.plain_get {
        sh.tr.plain_get = true;
        sh.report.note(Note::UnknownTotal {
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
    sh: &mut Ctx<'_>,
    resp: &http::Response<'_, '_>,
    last: u64,
    complete: u64,
    validator: Option<Vec<u8>>,
) -> std::result::Result<(), Fail> {
    sh.tr.total = Some(complete);
    sh.tr.ranges = true;
    // (A part of another reactor's transfer: the owner preallocated.)
    sh.tr.need_fallocate = sh.tr.part.is_none();
    // The rest is planned from an aligned offset: a server that caps range replies
    // at an odd size must not make later O_DIRECT writes unaligned.
    let first_end = if last + 1 >= complete {
        complete
    } else if sh.tr.direct {
        align_down(last + 1, sh.tr.align)
    } else {
        last + 1
    };
    job.seg.end = first_end;
    take_disposition(sh, resp)?;
    let queue = rest_to_fetch(job, sh, first_end, complete, &validator)?;
    sh.tr.plan.set_queue(queue);
    // The size is known and ranges are served: open as many connections as the
    // bytes still to fetch are worth (opened = used).
    sh.tr.wanted = schedule::connections_for(
        complete.saturating_sub(sh.tr.landed.bytes()),
        sh.opts.min_split_size,
        sh.opts.connections,
        sh.tr.mirrors.len(),
    );
    accept_reference(job.mirror, sh, resp, &validator);
    sh.tr.validator = validator;
    let segments = sh.tr.plan.queued();
    sh.report.note(Note::Planned {
        total: complete,
        segments,
    });
    Ok(())
}

/// The segments after the first answer (which ends at `first_end`) of a `complete`-byte
/// file: what a saved state lacks when its size and validator agree, everything but the
/// first answer when the file changed since (fatal for a part of another reactor's file,
/// whose bytes must be of the owner's file), else the whole rest.
fn rest_to_fetch(
    job: &Job,
    sh: &mut Ctx<'_>,
    first_end: u64,
    complete: u64,
    validator: &Option<Vec<u8>>,
) -> std::result::Result<VecDeque<Segment>, Fail> {
    Ok(match sh.tr.resume.take() {
        Some(st) if st.total == complete && st.validator == *validator => {
            sh.tr.landed = Landed::from_ranges(&st.ranges);
            sh.report.note(Note::Resuming {
                have: sh.tr.landed.bytes(),
                total: complete,
            });
            schedule::plan_missing(&sh.tr.landed, first_end, complete, sh.opts.connections, sh.tr.align)
        }
        Some(st) => {
            let what = if st.total != complete {
                format!("size {} -> {complete}", st.total)
            } else {
                "validator differs".to_owned()
            };
            if sh.tr.part.is_some() {
                // A part's bytes must be of the owner's file: it ends the part
                // (and the owner's transfer, which cannot use them).
                sh.tr.changed = true;
                return Err(Fail::fatal(
                    Kind::Protocol,
                    format!(
                        "{}: the file changed while it was fetched ({what})",
                        sh.url(job.mirror).host()
                    ),
                ));
            }
            sh.report.note(Note::Changed { what });
            // Everything but what this first reply carries.
            let got = Landed::from_ranges(&[(job.seg.start, first_end)]);
            schedule::plan_missing(&got, 0, complete, sh.opts.connections, sh.tr.align)
        }
        None => schedule::plan(first_end, complete, sh.opts.connections, sh.tr.align),
    })
}

/// A 206 to a later request, carrying `(first, last, complete)`: its mirror's first
/// answer must agree with the reference ([`first_answer_of_mirror`]), and every answer
/// must keep the file's size and validator (else the file changed: fatal) and carry the
/// range asked for.
fn check_later(
    job: &Job,
    sh: &mut Ctx<'_>,
    resp: &http::Response<'_, '_>,
    (first, last, complete): (u64, u64, u64),
    validator: &Option<Vec<u8>>,
) -> std::result::Result<(), Fail> {
    let url = sh.url(job.mirror);
    let host = url.host();
    first_answer_of_mirror(job, sh, resp, complete, validator)?;
    if Some(complete) != sh.tr.total {
        sh.tr.changed = true;
        return Err(Fail::fatal(
            Kind::Protocol,
            format!(
                "{host}: the file size changed from {} to {complete} during the download",
                sh.tr.total.unwrap_or(0)
            ),
        ));
    }
    let known = &sh.tr.mirrors[job.mirror].validator;
    if validator.is_some() && known.is_some() && validator != known {
        sh.tr.changed = true;
        return Err(Fail::fatal(
            Kind::Protocol,
            format!("{host}: the file changed during the download (validator differs)"),
        ));
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
    sh: &mut Ctx<'_>,
    resp: &http::Response<'_, '_>,
    complete: u64,
    validator: &Option<Vec<u8>>,
) -> std::result::Result<(), Fail> {
    let k = job.mirror;
    if sh.tr.mirrors[k].standing == Standing::Accepted {
        return Ok(());
    }
    let url = sh.url(k);
    let host = url.host();
    let Some(r) = sh.tr.reference else {
        // (Only the first request goes out before the reference answered.)
        return Err(Fail::retry(
            Kind::Protocol,
            format!("{host}: answered before the reference mirror did"),
        ));
    };
    let total = sh.tr.total.unwrap_or(0);
    if complete != total {
        let mut f = Fail::fatal(
            Kind::Protocol,
            format!("{host}: size {complete} differs from the reference's {total}"),
        );
        if crate::transfer::mirror::names_differ(&sh.tr.mirrors[k].url, &sh.tr.mirrors[r].url) {
            f.hint = crate::transfer::mirror::DIFFERENT_FILES_HINT;
        }
        return Err(f);
    }
    let validators = Validators::of(resp);
    if sh.opts.checksum.is_none()
        && let Err(why) = validators.agree_with(&sh.tr.mirrors[r].validators)
    {
        let mut f = Fail::fatal(Kind::Protocol, format!("{host}: {why}"));
        f.hint = crate::transfer::mirror::CHECKSUM_HINT;
        return Err(f);
    }
    let m = &mut sh.tr.mirrors[k];
    m.standing = Standing::Accepted;
    m.validators = validators;
    m.validator = validator.clone();
    let url = m.url.clone();
    sh.report.note(Note::MirrorAccepted { url });
    Ok(())
}

/// The body of a 206 carrying bytes `first..=last`: delimited by its Content-Length or
/// chunked coding (a length must match the range), or, in `multipart/byteranges` form,
/// exactly the part's bytes — the closing delimiter after them stays unread, so the
/// connection is closed instead of reused.
fn begin_body(
    job: &mut Job,
    part: Option<(&http::Part<'_, '_>, &[u8])>,
    framing: Framing,
    host: &str,
    first: u64,
    last: u64,
) -> std::result::Result<HeadAction, Fail> {
    let n = last - first + 1;
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
