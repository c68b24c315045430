//! Response heads: parsing, status and Content-Range validation, the plan after the first
//! reply, redirects, Retry-After, Content-Disposition.

use crate::control::body::*;
use crate::control::ctx::Ctx;
use crate::control::*;
use crate::engine::blocks::align_down;
use crate::engine::place::{Delimiter, Placer, content_range_fits};
use crate::error::Kind;
use crate::output::Output;
use crate::report::Note;
use crate::schedule::{self, FIRST_SEGMENT, Landed};
use crate::transfer::mirror::{Standing, Validators};
use http::{ChunkedDecoder, ContentRange, Framing, Header, MAX_HEAD, Status};
use std::collections::VecDeque;
use std::time::Duration;

/// Feeds received plaintext to the receive side: head first, then the body.
pub(crate) fn feed(rx: &mut Rx, sh: &mut Ctx<'_>, data: &[u8]) -> std::result::Result<(), Fail> {
    if data.is_empty() {
        return Ok(());
    }
    let Some(job) = rx.job.as_mut() else {
        rx.extra = true;
        return Ok(());
    };
    if job.placer.delimiter().is_some() {
        with_placer(rx, sh, |p, blocks| p.feed(data, blocks))?;
        return Ok(());
    }
    let url = &*sh.url(job.mirror);
    rx.head.extend_from_slice(data);
    loop {
        let mut headers = [Header { name: "", value: &[] }; http::MAX_FIELDS];
        let (len, action) = match http::parse_head(&rx.head, &mut headers) {
            Ok(Status::Partial) => {
                if rx.head.len() > MAX_HEAD {
                    return Err(Fail::fatal(
                        Kind::Protocol,
                        format!("response head from {} is larger than {MAX_HEAD} bytes", url.host()),
                    ));
                }
                return Ok(());
            }
            Ok(Status::Complete((len, resp))) => {
                let mut part_headers = [Header::EMPTY; http::MAX_PART_FIELDS];
                match one_part(url, &resp, &rx.head[len..], &mut part_headers)? {
                    None => (len, on_head(job, sh, &resp, None)?),
                    Some(Status::Complete((part, boundary))) => {
                        (len + part.head_len, on_head(job, sh, &resp, Some((&part, boundary)))?)
                    }
                    Some(Status::Partial) => {
                        // (The part's header block has its own limit: http::MAX_PART_HEAD.)
                        return Ok(());
                    }
                }
            }
            Err(e) => {
                return Err(Fail::retry(
                    Kind::Protocol,
                    format!("malformed response head from {}: {e}", url.host()),
                ));
            }
        };
        match action {
            HeadAction::Interim => {
                rx.head.drain(..len);
                continue;
            }
            HeadAction::Body => {
                let rest = rx.head.split_off(len);
                rx.head.clear();
                // Also with no bytes yet: an empty body is complete right away.
                with_placer(rx, sh, |p, blocks| p.feed(&rest, blocks))?;
                return Ok(());
            }
            HeadAction::Complete => {
                rx.head.clear();
                rx.extra = true;
                finish_job(rx, sh);
                return Ok(());
            }
        }
    }
}

/// The one part of a multipart 206 and the response's boundary.
type OnePart<'b, 'h> = (http::Part<'b, 'h>, &'b [u8]);

/// A 206 in `multipart/byteranges` form (RFC 9110 §14.6; Apache Traffic Server answers a
/// single range this way): the head of its one part, read from `body` (the bytes after
/// the response head) as an extension of the head, and the boundary. `None` for any other
/// response; [`Status::Partial`] while the part's header block is incomplete.
///
/// # Errors
/// A retryable [`Kind::Protocol`] failure for a missing or garbled boundary, a body that
/// does not start with it, no part, or a malformed part header or Content-Range.
fn one_part<'b, 'h>(
    url: &http::Url,
    resp: &http::Response<'b, '_>,
    body: &'b [u8],
    headers: &'h mut [Header<'b>],
) -> std::result::Result<Option<Status<OnePart<'b, 'h>>>, Fail> {
    if resp.code != 206 {
        return Ok(None);
    }
    let bad = |e: http::PartError| {
        Fail::retry(
            Kind::Protocol,
            format!("{}: 206 in multipart/byteranges form: {e}", url.host()),
        )
    };
    let Some(boundary) = resp
        .header("content-type")
        .map(http::byteranges_boundary)
        .transpose()
        .map_err(bad)?
        .flatten()
    else {
        return Ok(None);
    };
    Ok(Some(
        match http::parse_byteranges_part(body, boundary, headers).map_err(bad)? {
            Status::Complete(part) => Status::Complete((part, boundary)),
            Status::Partial => Status::Partial,
        },
    ))
}

pub(crate) enum HeadAction {
    /// 1xx: another head follows.
    Interim,
    /// Body bytes follow.
    Body,
    /// Nothing to write (empty file); the connection is not reused.
    Complete,
}

/// Mirror `k` answered the first request: it is the reference the others must agree with.
fn accept_reference(k: usize, sh: &mut Ctx<'_>, resp: &http::Response<'_, '_>, validator: &Option<Vec<u8>>) {
    let m = &mut sh.tr.mirrors[k];
    m.standing = Standing::Accepted;
    m.validators = Validators::of(resp);
    m.validator = validator.clone();
    sh.tr.reference = Some(k);
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

/// Validates a response head against the request (RFC 9110 §14.4, §15) and sets up the body.
/// `part`: the one part of a 206 in `multipart/byteranges` form and the boundary
/// ([`one_part`]); its Content-Range stands for the response's, and the body is its bytes.
///
/// Every answer is accepted here before a byte of its body is placed: one of a dropped
/// mirror never; a mirror's first answer only once its size and validators agree with
/// the reference's ([`first_answer_of_mirror`]), which decides its standing right then;
/// every later one only with the size and validator its mirror was accepted with, and the
/// Content-Range asked for. A refused answer's body is not read.
pub(crate) fn on_head(
    job: &mut Job,
    sh: &mut Ctx<'_>,
    resp: &http::Response<'_, '_>,
    part: Option<(&http::Part<'_, '_>, &[u8])>,
) -> std::result::Result<HeadAction, Fail> {
    let url = sh.url(job.mirror);
    let host = url.host();
    let proto = |m: String| Fail::retry(Kind::Protocol, format!("{host}: {m}"));
    let code = resp.code;
    if sh.tr.mirrors[job.mirror].standing == Standing::Dropped {
        // No byte of a dropped mirror's is placed, whatever it answers (the failure
        // releases the connection: `Loop::release_conn`).
        return Err(Fail::fatal(
            Kind::Protocol,
            format!("{host}: an answer of a dropped mirror"),
        ));
    }
    if (100..200).contains(&code) {
        return Ok(HeadAction::Interim);
    }
    if resp.version == 0
        || resp
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case(b"close"))
    {
        job.keep_alive = false;
    }
    // A forwarding proxy's client connection carries one request: tinyproxy, for one,
    // closes it after each response and says nothing (no `Connection: close`), and a
    // request on it would die before its head. (A CONNECT tunnel stays open.) A server
    // seen doing the same gets the same.
    if !sh.origin(job.mirror).reuses() {
        job.keep_alive = false;
    }
    let framing = resp
        .body_framing(false)
        .map_err(|e| proto(format!("bad body framing: {e}")))?;
    let validator = resp.validator().map(|v| match v {
        http::Validator::ETag { value, .. } => value.to_vec(),
        http::Validator::LastModified(v) => v.to_vec(),
    });
    match code {
        206 => {
            let (first, last, complete) = match part {
                // (A Content-Range in the response's own head is one a server must not
                // send with multipart (RFC 9110 §14.6): the part's is the one that counts.)
                Some((p, _)) => (p.first, p.last, p.complete),
                None => {
                    let cr = resp
                        .content_range()
                        .map_err(|e| proto(format!("bad Content-Range: {e}")))?;
                    let Some(ContentRange::Bytes { first, last, complete }) = cr else {
                        return Err(proto("206 without a byte Content-Range".into()));
                    };
                    (first, last, complete)
                }
            };
            let Some(complete) = complete else {
                if job.probe && !sh.tr.plain_get {
                    // No size to plan segments with (RFC 9110 §14.4 allows `*`): ask again
                    // without Range, for the whole file on one connection.
                    sh.tr.plain_get = true;
                    sh.report.note(Note::UnknownTotal {
                        host: host.to_string(),
                        first,
                        last,
                    });
                    return Err(Fail::retry(
                        Kind::HttpStatus,
                        format!("{host}: 206 with an unknown complete length (bytes {first}-{last}/*)"),
                    ));
                }
                return Err(proto("206 with an unknown complete length (bytes a-b/*)".into()));
            };
            if job.probe {
                if first != job.seg.start {
                    return Err(proto(format!(
                        "asked for bytes from {}, got Content-Range {first}-{last}",
                        job.seg.start
                    )));
                }
                within_bound(sh.opts, complete)?;
                if sh.opts.kept == Some(complete) && sh.tr.part.is_none() {
                    return kept_as_is(job, sh);
                }
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
                let queue = match sh.tr.resume.take() {
                    Some(st) if st.total == complete && st.validator == validator => {
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
                                format!("{host}: the file changed while it was fetched ({what})"),
                            ));
                        }
                        sh.report.note(Note::Changed { what });
                        // Everything but what this first reply carries.
                        let got = Landed::from_ranges(&[(job.seg.start, first_end)]);
                        schedule::plan_missing(&got, 0, complete, sh.opts.connections, sh.tr.align)
                    }
                    None => schedule::plan(first_end, complete, sh.opts.connections, sh.tr.align),
                };
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
            } else {
                first_answer_of_mirror(job, sh, resp, complete, &validator)?;
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
                if validator.is_some() && known.is_some() && validator != *known {
                    sh.tr.changed = true;
                    return Err(Fail::fatal(
                        Kind::Protocol,
                        format!("{host}: the file changed during the download (validator differs)"),
                    ));
                }
                if !content_range_fits(first, last, job.placer.pos(), job.seg.end) {
                    return Err(proto(format!(
                        "asked for bytes {}-{}, got Content-Range {first}-{last}",
                        job.placer.pos(),
                        job.seg.end - 1
                    )));
                }
            }
            let n = last - first + 1;
            if let Some((p, boundary)) = part {
                // The engine reads exactly the part's bytes; the closing delimiter after
                // them stays unread, so the connection is closed instead of reused.
                job.keep_alive = false;
                return match framing {
                    Framing::Length(l) if !p.is_whole_body(l, boundary) => Err(proto(format!(
                        "206 in multipart/byteranges form with Content-Length {l}: more than the one part \
                         asked for ({n} bytes, Content-Range {first}-{last}, and its closing boundary)"
                    ))),
                    Framing::Chunked => Err(proto(
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
                    return Err(proto(format!(
                        "Content-Length {l} does not match Content-Range {first}-{last}"
                    )));
                }
                _ => Delimiter::Length(n),
            };
            job.placer.begin(delim, last + 1);
            Ok(HeadAction::Body)
        }
        200 => {
            // Not the segment: often an error page or a captive portal sent with 200.
            let not_that_range = || {
                let ctype = resp
                    .header("content-type")
                    .map_or_else(|| "none".to_owned(), |v| format!("{:?}", String::from_utf8_lossy(v)));
                let length = match framing {
                    Framing::Length(l) => format!("Content-Length {l}"),
                    Framing::Chunked => "chunked".to_owned(),
                    Framing::Close => "no length".to_owned(),
                    Framing::NoBody => "no body".to_owned(),
                };
                let total = sh.tr.total.or(sh.tr.resume.as_ref().map(|r| r.total)).unwrap_or(0);
                format!(
                    "answered 200 (Content-Type {ctype}, {length}) to a Range request for bytes {}-{} \
                     of a {total}-byte file: not that range",
                    job.seg.start,
                    job.seg.end - 1,
                )
            };
            if sh.tr.part.is_some() {
                // (A part of another reactor's file: said as on one reactor.)
                return Err(Fail::fatal(Kind::Protocol, format!("{host}: {}", not_that_range())));
            }
            if !job.probe && sh.tr.ranges && sh.tr.mirrors[job.mirror].standing == Standing::Pending {
                return Err(Fail::fatal(
                    Kind::Protocol,
                    format!("{host}: does not serve ranges (answered 200 to a Range request) while the reference does"),
                ));
            }
            if !job.probe && sh.tr.ranges {
                return Err(proto(not_that_range()));
            }
            if job.probe && matches!(framing, Framing::Length(l) if sh.opts.kept == Some(l)) {
                return kept_as_is(job, sh);
            }
            if sh.tr.resume.take().is_some() {
                sh.report.note(Note::NoRangesNoResume);
            }
            take_disposition(sh, resp)?;
            sh.tr.ranges = false;
            sh.tr.plan.set_queue(VecDeque::new());
            accept_reference(job.mirror, sh, resp, &validator);
            sh.tr.validator = validator;
            job.probe = false;
            job.seg.start = 0;
            let (delim, end) = match framing {
                Framing::Length(l) => {
                    within_bound(sh.opts, l)?;
                    sh.tr.total = Some(l);
                    sh.tr.need_fallocate = true;
                    (Delimiter::Length(l), l)
                }
                Framing::Chunked => (Delimiter::Chunked(ChunkedDecoder::new()), u64::MAX),
                Framing::Close => (Delimiter::Close, u64::MAX),
                Framing::NoBody => {
                    sh.tr.total = Some(0);
                    (Delimiter::Length(0), 0)
                }
            };
            job.seg.end = end;
            job.placer = Placer::new(0, end).with_source(job.mirror);
            job.placer.begin(delim, end);
            sh.report.note(Note::NoRanges);
            Ok(HeadAction::Body)
        }
        416 if job.probe && sh.tr.part.is_some() => Err(Fail::fatal(
            Kind::Protocol,
            format!("{host}: 416 for a part of the file: it shrank while it was fetched"),
        )),
        416 if job.probe && job.seg.start > 0 => {
            // The resume point lies past the end: the file shrank. Start over from zero.
            sh.tr.resume = None;
            sh.tr.plan.restart_probe(0, FIRST_SEGMENT);
            sh.report.note(Note::Shrunk);
            Err(Fail::retry(
                Kind::HttpStatus,
                format!("{host}: 416 for the resume point"),
            ))
        }
        416 if job.probe => match resp.content_range() {
            Ok(Some(ContentRange::Unsatisfied { complete: 0 })) => {
                sh.tr.total = Some(0);
                sh.tr.plan.set_queue(VecDeque::new());
                job.placer = Placer::new(0, 0).with_source(job.mirror);
                job.seg.end = 0;
                Ok(HeadAction::Complete)
            }
            _ => Err(Fail::fatal(
                Kind::Protocol,
                format!("{host}: 416 Range Not Satisfiable for bytes=0-"),
            )),
        },
        304 if sh.opts.condition.is_some() => not_modified(job, sh),
        301 | 302 | 303 | 307 | 308 if job.probe || sh.tr.mirrors[job.mirror].standing == Standing::Pending => {
            let Some(loc) = resp.header("location") else {
                return Err(Fail::fatal(
                    Kind::Protocol,
                    format!("{host}: {code} redirect without Location"),
                ));
            };
            let to = url.join(loc).map_err(|e| {
                // Credentials in it are refused, and never printed.
                let shown = match http::split_userinfo(&String::from_utf8_lossy(loc)) {
                    (rest, Some(_)) => rest.replacen("://", "://***@", 1),
                    (all, None) => all,
                };
                Fail::fatal(Kind::Protocol, format!("{host}: bad Location {shown:?}: {e}"))
            })?;
            sh.tr.redirect = Some(to);
            sh.tr.redirect_mirror = job.mirror;
            Ok(HeadAction::Complete)
        }
        408 | 429 | 500 | 502 | 503 | 504 => {
            // Transient: wait (Retry-After, capped at 5 minutes) and try again.
            let wait = match resp.retry_after() {
                Some(http::RetryAfter::Seconds(s)) => Some(Duration::from_secs(s.min(300))),
                Some(http::RetryAfter::Date(d)) => http::parse_http_date(d).map(|at| {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    Duration::from_secs(at.saturating_sub(now).min(300))
                }),
                None => None,
            };
            // The wait is applied when the loop judges the failure: the segment waits, and a
            // 503 or 429 (about the server, not the request) holds every request to this
            // origin; only the connection turned away waits when the server merely caps
            // connections (a 503 while others download).
            let f = Fail {
                delay: wait,
                ..Fail::retry(
                    Kind::HttpStatus,
                    format!("HTTP {code} {} for {}", String::from_utf8_lossy(resp.reason), url),
                )
            };
            Err(match code {
                503 => f.busy(),
                // Without Retry-After a 429 may be a connection cap as a 503 is (nginx
                // `limit_conn_status 429`); with one it limits the client's requests
                // (RFC 6585 §4): its wait holds the origin.
                429 if f.delay.is_none() => f.busy(),
                429 => f.server_wide(),
                _ => f,
            })
        }
        // (A SOCKS5 proxy never answers in HTTP: a 407 through it is the origin's.)
        407 if sh.origin(job.mirror).proxy.as_ref().is_some_and(|p| p.socks.is_none()) => {
            let p = sh.origin(job.mirror).proxy.as_ref().expect("checked");
            Err(p.auth_failure(code, &String::from_utf8_lossy(resp.reason)))
        }
        400..=599 => {
            // A TLS server that got plain HTTP answers 400 (nginx: "The plain HTTP request
            // was sent to HTTPS port"): say what to try, as the other way round does.
            let forwarding = sh.origin(job.mirror).forwarding();
            let hint = if code == 400 && url.scheme() == http::Scheme::Http {
                format!(
                    " (if that port speaks TLS, try https://{}{})",
                    http::authority(&url),
                    url.path_and_query()
                )
            } else if let Some(p) = forwarding.filter(|p| code == 401 && p.authorization.is_some()) {
                // The answer came through the proxy, and some proxies (tinyproxy 1.11)
                // refuse wrong proxy credentials on a plain request with 401, not 407.
                format!(
                    " (through proxy {}, which was sent its user name and password: the proxy may be the one refusing them)",
                    p.url
                )
            } else {
                String::new()
            };
            let mut f = Fail::fatal(
                Kind::HttpStatus,
                format!("HTTP {code} {} for {}{hint}", String::from_utf8_lossy(resp.reason), url),
            );
            // A mirror that cannot serve a range of the reference's is shorter than it.
            if code == 416
                && let Some(r) = sh.tr.reference.filter(|&r| r != job.mirror)
                && crate::transfer::mirror::names_differ(&sh.tr.mirrors[job.mirror].url, &sh.tr.mirrors[r].url)
            {
                f.hint = crate::transfer::mirror::DIFFERENT_FILES_HINT;
            }
            Err(f)
        }
        _ => Err(Fail::fatal(
            Kind::Protocol,
            format!("{host}: unexpected status {code} for a download"),
        )),
    }
}

/// 304 Not Modified (RFC 9110 §15.4.5) to a conditional request. To the download's first
/// request: the precondition held, nothing is fetched from any mirror and the output is
/// left as it is. To another mirror's first request, after the reference sent the file:
/// that mirror still serves the copy the saved validator names (fatal: it is dropped).
fn not_modified(job: &mut Job, sh: &mut Ctx<'_>) -> std::result::Result<HeadAction, Fail> {
    if !job.probe {
        return Err(Fail::fatal(
            Kind::Protocol,
            format!(
                "{}: 304 Not Modified: it still serves the copy the saved validator names, while the reference sent a changed file",
                sh.url(job.mirror).host()
            ),
        ));
    }
    sh.tr.reference = Some(job.mirror);
    sh.tr.not_modified = true;
    sh.tr.total = Some(0);
    sh.tr.plan.set_queue(VecDeque::new());
    job.placer = Placer::new(0, 0);
    job.seg.end = 0;
    Ok(HeadAction::Complete)
}

/// The first answer gives the size of the file a list found already there
/// ([`crate::config::Config::kept`]): it is kept as a 304 keeps one — on the size alone,
/// no validator to compare (a `--checksum` read back proves the content) —, and the body
/// of this answer is left unread (the connection is not reused).
fn kept_as_is(job: &mut Job, sh: &mut Ctx<'_>) -> std::result::Result<HeadAction, Fail> {
    job.keep_alive = false;
    not_modified(job, sh)
}

/// `--content-disposition`: takes a sanitized base name (shortened to fit, see
/// [`crate::output::fit_name`]) from the first response, and checks it is free before
/// a byte of the body is fetched.
///
/// # Errors
/// [`Kind::LocalIo`] (fatal) when the name exists (without `--force`) or is a device,
/// FIFO or socket.
pub(crate) fn take_disposition(sh: &mut Ctx<'_>, resp: &http::Response<'_, '_>) -> std::result::Result<(), Fail> {
    if sh.opts.content_disposition
        && let Some(v) = resp.header("content-disposition")
    {
        sh.tr.disposition = http::content_disposition_filename(v).map(crate::output::fit_name);
        if let Some(name) = &sh.tr.disposition {
            Output::check_free(std::path::Path::new(name), sh.opts.force)
                .map_err(|e| Fail::fatal(e.kind, format!("Content-Disposition names {name:?}: {}", e.msg)))?;
        }
    }
    Ok(())
}

/// A size over [`crate::config::Config::size_bound`] (a raw-message signature must hold
/// the file in memory) fails the download before a body byte is written (exit 2).
fn within_bound(opts: &crate::config::Config, size: u64) -> std::result::Result<(), Fail> {
    match &opts.size_bound {
        Some((max, why)) if size > *max => Err(Fail::fatal(
            Kind::Usage,
            format!("the file is {size} bytes, more than {max}: {why}"),
        )),
        _ => Ok(()),
    }
}
