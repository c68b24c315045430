//! A 206 in `multipart/byteranges` form with one part (issue 15: Apache Traffic Server
//! answers a single Range request this way): ringdl takes the part on every engine the
//! host runs, and refuses what it cannot trust (two parts, a missing or wrong boundary, a
//! part whose Content-Range is not the range asked) like any other bad 206: retried,
//! then exit 6. The fault server counts the multipart answers it served.
//!
//! Engines here: `direct`, `buffered` and `splice` over http; `direct` (rustls),
//! `buffered` and `direct` with the software record layer (`RINGDL_SOFT_TLS=1`) over
//! https. The kTLS engines need kernel TLS, which only the VM has (tests/vm).

use crate::fault::{Fault, FaultServer, Multipart, When};
use crate::util::{HANG, MIB, TestDir, exit, get, sha256_file};

/// (scheme is https, `--engine`, RINGDL_SOFT_TLS=1, what the summary names).
const ENGINES: &[(bool, &str, bool, &str)] = &[
    (false, "direct", false, "engine direct"),
    (false, "buffered", false, "engine buffered"),
    (false, "splice", false, "engine splice"),
    (true, "direct", false, "engine direct"),
    (true, "buffered", false, "engine buffered"),
    (true, "direct", true, "TLS records opened in place"),
];

#[test]
fn one_part_206_gives_exact_bytes_on_every_engine() {
    for &(tls, engine, soft, names) in ENGINES {
        for x in ["1", "4"] {
            let srv = FaultServer::builder()
                .size(9 * MIB + 12345)
                .tls_if(tls)
                .etag("mp")
                .fault(Fault::Multipart(Multipart::One))
                .start();
            let what = format!(
                "{} engine {engine}{} -x {x}",
                if tls { "https" } else { "http" },
                if soft { " (soft TLS)" } else { "" }
            );
            let dir = TestDir::new(&format!("multipart-{engine}-{tls}-{soft}-{x}"));
            let out = dir.join("out.bin");
            let mut cmd = dir.ringdl();
            cmd.timeout(HANG)
                .args(["-x", x, "--engine", engine, "--stall-timeout", "5", "-o"])
                .arg(&out);
            if soft {
                cmd.env("RINGDL_SOFT_TLS", "1");
            }
            if tls {
                cmd.arg("--ca-certificate").arg(srv.ca_pem());
            }
            let o = cmd.arg(srv.url("file.bin")).run();
            assert_eq!(o.code(), Some(0), "{what}\n{}\n{}", o.stderr_text(), srv.describe());
            assert_eq!(
                sha256_file(&out),
                srv.sha256(),
                "{what}: WRONG BYTES\n{}",
                srv.describe()
            );
            let summary = o.summary_lines().join("\n");
            assert!(summary.contains(names), "{what}: {summary}");
            // Every request was a range, and every answer multipart: the count proves
            // the parts were really served (and taken, as the bytes are right).
            let reqs = srv.requests();
            let served = srv.fired_on(0).len();
            assert_eq!(served, reqs.len(), "{what}: multipart answers\n{}", srv.describe());
            assert!(
                served >= 3,
                "{what}: only {served} multipart answers\n{}",
                srv.describe()
            );
        }
    }
}

#[test]
fn two_parts_once_on_a_segment_is_retried() {
    let srv = FaultServer::builder()
        .size(6 * MIB)
        .fault(Fault::Multipart(Multipart::One))
        .fault_on(When::Once(Box::new(When::Segment)), Fault::Multipart(Multipart::Two))
        .start();
    get("multipart-two-once", &srv, &[]).assert_exact(&srv);
    srv.assert_retried(1);
}

/// A bad multipart answer on every segment: retried a bounded number of times, then
/// exit 6 with a message naming the fault.
fn always_refused(test: &str, tls: bool, faults: &[Fault], says: &str) {
    let mut b = FaultServer::builder().size(6 * MIB).tls_if(tls);
    for f in faults {
        b = b.fault_on(When::Segment, f.clone());
    }
    let srv = b.start();
    let r = get(test, &srv, &["--max-tries", "3"]);
    r.assert_fails(&srv, exit::PROTOCOL);
    let err = r.o.stderr_text();
    assert!(err.contains(says), "{test}: expected {says:?} in\n{err}");
    let segment_requests = srv.requests().iter().filter(|q| q.range_start() != Some(0)).count();
    assert!(
        segment_requests <= 3 * 4,
        "{test}: {segment_requests} segment requests: not bounded by --max-tries\n{}",
        srv.describe()
    );
}

#[test]
fn two_parts_always_exit_6() {
    for tls in [false, true] {
        always_refused(
            "multipart-two",
            tls,
            &[Fault::Multipart(Multipart::Two)],
            "more than the one part asked for",
        );
    }
}

#[test]
fn missing_boundary_exits_6() {
    always_refused(
        "multipart-no-boundary",
        false,
        &[Fault::Multipart(Multipart::NoBoundary)],
        "multipart/byteranges without a boundary",
    );
}

#[test]
fn wrong_boundary_exits_6() {
    always_refused(
        "multipart-wrong-boundary",
        true,
        &[Fault::Multipart(Multipart::WrongBoundary)],
        "multipart body does not start with its boundary",
    );
}

#[test]
fn part_content_range_not_the_range_asked_exits_6() {
    always_refused(
        "multipart-cr-shift",
        false,
        &[
            Fault::ContentRangeShift { shift: -4096 },
            Fault::Multipart(Multipart::One),
        ],
        "got Content-Range",
    );
}

#[test]
fn part_content_range_wrong_once_is_retried() {
    let srv = FaultServer::builder()
        .size(6 * MIB)
        .fault(Fault::Multipart(Multipart::One))
        .fault_on(
            When::Once(Box::new(When::Segment)),
            Fault::ContentRangeShift { shift: -4096 },
        )
        .start();
    get("multipart-cr-once", &srv, &[]).assert_exact(&srv);
    // The bytes were right: only a retry shows the part's Content-Range was checked.
    srv.assert_retried(1);
}

/// Without a Content-Length (the body ends when the connection closes) the part's own
/// Content-Range says where its bytes end: ringdl reads those and closes.
#[test]
fn one_part_without_content_length_gives_exact_bytes() {
    for tls in [false, true] {
        let srv = FaultServer::builder()
            .size(6 * MIB + 3)
            .tls_if(tls)
            .fault(Fault::Multipart(Multipart::One))
            .fault(Fault::NoLength)
            .start();
        get("multipart-no-length", &srv, &[]).assert_exact(&srv);
        assert_eq!(srv.fired_on(0).len(), srv.requests().len(), "{}", srv.describe());
    }
}
