//! Response heads: parsing, status and Content-Range validation, the plan after the first
//! reply, redirects, Retry-After, Content-Disposition.

use crate::control::body::{feed_part, finish_job};
use crate::control::ctx::Ctx;
use crate::control::{Fail, Job, Rx};
use crate::engine::place::{Delimiter, Placer};
use crate::error::Kind;
use crate::output::Output;
use crate::report::Note;
use crate::schedule::FIRST_SEGMENT;
use crate::transfer::mirror::{Standing, Validators};
use http::{ChunkedDecoder, ContentRange, Framing, Header, MAX_HEAD, Status};
use std::collections::VecDeque;
use std::time::Duration;

mod partial;

/// Feeds received plaintext to the receive side: head first, then the body.
pub(crate) fn feed(rx: &mut Rx, shared: &mut Ctx<'_>, data: &[u8]) -> std::result::Result<(), Fail> {
    if data.is_empty() {
        return Ok(());
    }
    let Some(job) = rx.job.as_mut() else {
        rx.extra = true;
        return Ok(());
    };
    if job.placer.delimiter().is_some() || job.multi.as_ref().is_some_and(|m| !m.boundary.is_empty()) {
        return feed_part(rx, shared, data);
    }
    let url = &*shared.url(job.mirror);
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
                // A multi-range request's multipart answer that cannot be read: asked
                // again one range per request (no try spent).
                let part = one_part(url, &resp, &rx.head[len..], &mut part_headers).map_err(|mut f| {
                    f.step_down = job.multi.is_some();
                    f
                })?;
                match part {
                    None => (len, on_head(job, shared, &resp, None)?),
                    Some(Status::Complete((part, boundary))) => (
                        len + part.head_len,
                        on_head(job, shared, &resp, Some((&part, boundary)))?,
                    ),
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
                feed_part(rx, shared, &rest)?;
                return Ok(());
            }
            HeadAction::Complete => {
                rx.head.clear();
                rx.extra = true;
                finish_job(rx, shared);
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
fn accept_reference(k: usize, shared: &mut Ctx<'_>, resp: &http::Response<'_, '_>, validator: &Option<Vec<u8>>) {
    let m = &mut shared.transfer.mirrors[k];
    m.standing = Standing::Accepted;
    m.validators = Validators::of(resp);
    m.validator = validator.clone();
    shared.transfer.reference = Some(k);
}

/// A retryable [`Kind::Protocol`] failure `m` of the server at `host`.
fn protocol(host: &str, m: String) -> Fail {
    Fail::retry(Kind::Protocol, format!("{host}: {m}"))
}

/// Validates a response head against the request (RFC 9110 §14.4, §15) and sets up the body.
/// `part`: the one part of a 206 in `multipart/byteranges` form and the boundary
/// ([`one_part`]); its Content-Range stands for the response's, and the body is its bytes.
///
/// Every answer is accepted here before a byte of its body is placed: one of a dropped
/// mirror never; a mirror's first answer only once its size and validators agree with
/// the reference's, which decides its standing right then; every later one only with the
/// size and validator its mirror was accepted with, and the Content-Range asked for. A
/// refused answer's body is not read.
///
/// The status decides: 206 a range ([`partial::on_partial`]), 200 the whole file
/// ([`on_whole`]), 416 to the first request a file shorter than asked
/// ([`on_unsatisfiable`]), 304 to a conditional request [`not_modified`], a redirect a new
/// URL ([`on_redirect`]), 408/429/5xx a wait and a retry ([`transient`]), any other 4xx
/// or 5xx the end ([`refused`]).
pub(crate) fn on_head(
    job: &mut Job,
    shared: &mut Ctx<'_>,
    resp: &http::Response<'_, '_>,
    part: Option<(&http::Part<'_, '_>, &[u8])>,
) -> std::result::Result<HeadAction, Fail> {
    let url = shared.url(job.mirror);
    let host = url.host();
    let code = resp.code;
    if shared.transfer.mirrors[job.mirror].standing == Standing::Dropped {
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
    if !shared.origin(job.mirror).reuses() {
        job.keep_alive = false;
    }
    let framing = resp
        .body_framing(false)
        .map_err(|e| protocol(host, format!("bad body framing: {e}")))?;
    let validator = resp.validator().map(|v| match v {
        http::Validator::ETag { value, .. } => value.to_vec(),
        http::Validator::LastModified(v) => v.to_vec(),
    });
    match code {
        206 => partial::on_partial(job, shared, resp, part, framing, validator),
        200 => on_whole(job, shared, resp, framing, validator),
        416 if job.probe => on_unsatisfiable(job, shared, resp),
        416 if job.multi.is_some() => Err(refuses_multi(job, shared, "416")),
        304 if shared.opts.condition.is_some() => not_modified(job, shared),
        301 | 302 | 303 | 307 | 308
            if job.probe || shared.transfer.mirrors[job.mirror].standing == Standing::Pending =>
        {
            on_redirect(job, shared, resp, &url)
        }
        408 | 429 | 500 | 502 | 503 | 504 => Err(transient(resp, &url)),
        // (A SOCKS5 proxy never answers in HTTP: a 407 through it is the origin's.)
        407 if shared
            .origin(job.mirror)
            .proxy
            .as_ref()
            .is_some_and(|p| p.socks.is_none()) =>
        {
            let p = shared.origin(job.mirror).proxy.as_ref().expect("checked");
            Err(p.auth_failure(code, &String::from_utf8_lossy(resp.reason)))
        }
        400..=599 => Err(refused(job, shared, resp, &url)),
        _ => Err(Fail::fatal(
            Kind::Protocol,
            format!("{host}: unexpected status {code} for a download"),
        )),
    }
}

/// 200 to a Range request: the server sends the whole file. To the first request the
/// download goes on as one stream without ranges (resume and the plan dropped); to a
/// later one it is not the range asked for (often an error page or a captive portal
/// sent with 200), and a mirror not yet accepted is dropped for it.
fn on_whole(
    job: &mut Job,
    shared: &mut Ctx<'_>,
    resp: &http::Response<'_, '_>,
    framing: Framing,
    validator: Option<Vec<u8>>,
) -> std::result::Result<HeadAction, Fail> {
    let url = shared.url(job.mirror);
    let host = url.host();
    if job.multi.is_some() {
        return Err(refuses_multi(job, shared, "200 (the whole file)"));
    }
    if shared.transfer.part.is_some() {
        // (A part of another reactor's file: said as on one reactor.)
        return Err(Fail::fatal(
            Kind::Protocol,
            format!("{host}: {}", not_that_range(job, shared, resp, framing)),
        ));
    }
    if !job.probe && shared.transfer.ranges && shared.transfer.mirrors[job.mirror].standing == Standing::Pending {
        return Err(Fail::fatal(
            Kind::Protocol,
            format!("{host}: does not serve ranges (answered 200 to a Range request) while the reference does"),
        ));
    }
    if !job.probe && shared.transfer.ranges {
        return Err(protocol(host, not_that_range(job, shared, resp, framing)));
    }
    if shared.opts.fetch_only.is_some() {
        // A delta asks for some ranges only: the whole file is not what it wants.
        return Err(Fail::fatal(
            Kind::Protocol,
            format!("{host}: {}", crate::control::NO_RANGES),
        ));
    }
    if job.probe && matches!(framing, Framing::Length(l) if shared.opts.kept == Some(l)) {
        return kept_as_is(job, shared);
    }
    if shared.transfer.resume.take().is_some() {
        shared.report.note(Note::NoRangesNoResume);
    }
    take_disposition(shared, resp)?;
    shared.transfer.ranges = false;
    shared.transfer.plan.set_queue(VecDeque::new());
    accept_reference(job.mirror, shared, resp, &validator);
    shared.transfer.validator = validator;
    job.probe = false;
    job.seg.start = 0;
    let (delim, end) = match framing {
        Framing::Length(l) => {
            within_bound(shared.opts, l)?;
            shared.transfer.total = Some(l);
            shared.transfer.need_fallocate = true;
            (Delimiter::Length(l), l)
        }
        Framing::Chunked => (Delimiter::Chunked(ChunkedDecoder::new()), u64::MAX),
        Framing::Close => (Delimiter::Close, u64::MAX),
        Framing::NoBody => {
            shared.transfer.total = Some(0);
            (Delimiter::Length(0), 0)
        }
    };
    job.seg.end = end;
    job.placer = Placer::new(0, end).with_source(job.mirror);
    job.placer.begin(delim, end);
    shared.report.note(Note::NoRanges);
    Ok(HeadAction::Body)
}

/// A multi-range request answered with `answer` (a 200 or 416: the server refuses
/// several ranges per request, as nginx's `max_ranges` does): its body is not read, the
/// mirror is asked one range per request from now on, and the runs go back to the queue
/// with no try spent ([`Fail::step_down`]).
fn refuses_multi(job: &Job, shared: &mut Ctx<'_>, answer: &str) -> Fail {
    let host = shared.url(job.mirror).host().to_owned();
    let asked = job.multi.as_ref().map_or(0, |m| m.asked.len());
    shared.transfer.mirrors[job.mirror].ranges_per_request = 1;
    shared.report.note(Note::StepDown {
        host: host.clone(),
        asked,
        answer: answer.to_owned(),
        now: 1,
    });
    let mut f = Fail::retry(
        Kind::HttpStatus,
        format!("{host}: answered {answer} to a request for {asked} byte ranges"),
    );
    f.step_down = true;
    f
}

/// Why a 200 to a later request is refused: what it carries (Content-Type, length) beside
/// the range and the file size asked for.
fn not_that_range(job: &Job, shared: &Ctx<'_>, resp: &http::Response<'_, '_>, framing: Framing) -> String {
    let ctype = resp
        .header("content-type")
        .map_or_else(|| "none".to_owned(), |v| format!("{:?}", String::from_utf8_lossy(v)));
    let length = match framing {
        Framing::Length(l) => format!("Content-Length {l}"),
        Framing::Chunked => "chunked".to_owned(),
        Framing::Close => "no length".to_owned(),
        Framing::NoBody => "no body".to_owned(),
    };
    let total = shared
        .transfer
        .total
        .or(shared.transfer.resume.as_ref().map(|r| r.total))
        .unwrap_or(0);
    format!(
        "answered 200 (Content-Type {ctype}, {length}) to a Range request for bytes {}-{} \
         of a {total}-byte file: not that range",
        job.seg.start,
        job.seg.end - 1,
    )
}

/// 416 Range Not Satisfiable to the first request: for a part of another reactor's file,
/// the file shrank (fatal); for a resume point, the file shrank and the download starts
/// over from zero; for `bytes=0-`, an empty file when it says so (`*/0`).
fn on_unsatisfiable(
    job: &mut Job,
    shared: &mut Ctx<'_>,
    resp: &http::Response<'_, '_>,
) -> std::result::Result<HeadAction, Fail> {
    let host = shared.url(job.mirror).host().to_owned();
    if shared.transfer.part.is_some() {
        return Err(Fail::fatal(
            Kind::Protocol,
            format!("{host}: 416 for a part of the file: it shrank while it was fetched"),
        ));
    }
    if job.seg.start > 0 {
        // The resume point lies past the end: the file shrank. Start over from zero.
        shared.transfer.resume = None;
        shared.transfer.plan.restart_probe(0, FIRST_SEGMENT);
        shared.report.note(Note::Shrunk);
        return Err(Fail::retry(
            Kind::HttpStatus,
            format!("{host}: 416 for the resume point"),
        ));
    }
    match resp.content_range() {
        Ok(Some(ContentRange::Unsatisfied { complete: 0 })) => {
            shared.transfer.total = Some(0);
            shared.transfer.plan.set_queue(VecDeque::new());
            job.placer = Placer::new(0, 0).with_source(job.mirror);
            job.seg.end = 0;
            Ok(HeadAction::Complete)
        }
        _ => Err(Fail::fatal(
            Kind::Protocol,
            format!("{host}: 416 Range Not Satisfiable for bytes=0-"),
        )),
    }
}

/// A redirect (301, 302, 303, 307, 308) to the first request of a mirror: its Location,
/// resolved against `url`, is where the transfer asks next.
fn on_redirect(
    job: &Job,
    shared: &mut Ctx<'_>,
    resp: &http::Response<'_, '_>,
    url: &http::Url,
) -> std::result::Result<HeadAction, Fail> {
    let host = url.host();
    let Some(loc) = resp.header("location") else {
        return Err(Fail::fatal(
            Kind::Protocol,
            format!("{host}: {} redirect without Location", resp.code),
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
    shared.transfer.redirect = Some(to);
    shared.transfer.redirect_mirror = job.mirror;
    Ok(HeadAction::Complete)
}

/// A transient answer (408, 429, 500, 502, 503, 504) for `url`: a retry after its
/// Retry-After (capped at 5 minutes).
///
/// The wait is applied when the loop judges the failure: the segment waits, and a 503 or
/// 429 (about the server, not the request) holds every request to this origin; only the
/// connection turned away waits when the server merely caps connections (a 503 while
/// others download).
fn transient(resp: &http::Response<'_, '_>, url: &http::Url) -> Fail {
    let code = resp.code;
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
    let f = Fail {
        delay: wait,
        ..Fail::retry(
            Kind::HttpStatus,
            format!("HTTP {code} {} for {}", String::from_utf8_lossy(resp.reason), url),
        )
    };
    match code {
        503 => f.busy(),
        // Without Retry-After a 429 may be a connection cap as a 503 is (nginx
        // `limit_conn_status 429`); with one it limits the client's requests
        // (RFC 6585 §4): its wait holds the origin.
        429 if f.delay.is_none() => f.busy(),
        429 => f.server_wide(),
        _ => f,
    }
}

/// Any other 4xx or 5xx for `url`: the end of this mirror (fatal), with a hint where the
/// status suggests one.
fn refused(job: &Job, shared: &Ctx<'_>, resp: &http::Response<'_, '_>, url: &http::Url) -> Fail {
    let code = resp.code;
    // A TLS server that got plain HTTP answers 400 (nginx: "The plain HTTP request
    // was sent to HTTPS port"): say what to try, as the other way round does.
    let forwarding = shared.origin(job.mirror).forwarding();
    let hint = if code == 400 && url.scheme() == http::Scheme::Http {
        format!(
            " (if that port speaks TLS, try https://{}{})",
            http::authority(url),
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
        && let Some(r) = shared.transfer.reference.filter(|&r| r != job.mirror)
        && crate::transfer::mirror::names_differ(
            &shared.transfer.mirrors[job.mirror].url,
            &shared.transfer.mirrors[r].url,
        )
    {
        f.hint = crate::transfer::mirror::DIFFERENT_FILES_HINT;
    }
    f
}

/// 304 Not Modified (RFC 9110 §15.4.5) to a conditional request. To the download's first
/// request: the precondition held, nothing is fetched from any mirror and the output is
/// left as it is. To another mirror's first request, after the reference sent the file:
/// that mirror still serves the copy the saved validator names (fatal: it is dropped).
fn not_modified(job: &mut Job, shared: &mut Ctx<'_>) -> std::result::Result<HeadAction, Fail> {
    if !job.probe {
        return Err(Fail::fatal(
            Kind::Protocol,
            format!(
                "{}: 304 Not Modified: it still serves the copy the saved validator names, while the reference sent a changed file",
                shared.url(job.mirror).host()
            ),
        ));
    }
    shared.transfer.reference = Some(job.mirror);
    shared.transfer.not_modified = true;
    shared.transfer.total = Some(0);
    shared.transfer.plan.set_queue(VecDeque::new());
    job.placer = Placer::new(0, 0);
    job.seg.end = 0;
    Ok(HeadAction::Complete)
}

/// The first answer gives the size of the file a list found already there
/// ([`crate::config::Config::kept`]): it is kept as a 304 keeps one — on the size alone,
/// no validator to compare (a `--checksum` read back proves the content) —, and the body
/// of this answer is left unread (the connection is not reused).
fn kept_as_is(job: &mut Job, shared: &mut Ctx<'_>) -> std::result::Result<HeadAction, Fail> {
    job.keep_alive = false;
    not_modified(job, shared)
}

/// `--content-disposition`: takes a sanitized base name (shortened to fit, see
/// [`crate::output::fit_name`]) from the first response, and checks it is free before
/// a byte of the body is fetched.
///
/// # Errors
/// [`Kind::LocalIo`] (fatal) when the name exists (without `--force`) or is a device,
/// FIFO or socket.
pub(crate) fn take_disposition(shared: &mut Ctx<'_>, resp: &http::Response<'_, '_>) -> std::result::Result<(), Fail> {
    if shared.opts.content_disposition
        && let Some(v) = resp.header("content-disposition")
    {
        shared.transfer.disposition = http::content_disposition_filename(v).map(crate::output::fit_name);
        if let Some(name) = &shared.transfer.disposition {
            Output::check_free(std::path::Path::new(name), shared.opts.force)
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
