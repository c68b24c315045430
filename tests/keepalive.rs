//! Kept-alive connections the server already closed (issue 40): a list of small files
//! against servers that close connections ringdl keeps for the next file — after every
//! response without `Connection: close`, after an idle timeout, or as the next request
//! crosses the close. Every file lands exact, no try is spent (`--json`: `retries` 0 for
//! every file), and the server's counters prove the closes happened.

use std::fs;

use crate::fault::{Close, Fault, FaultServer, When, content, sha256_hex};
use crate::util::{HANG, KIB, Output, TestDir, sha256_file};

/// A server whose path `/<prefix><k>.bin` serves `size` bytes of its own content (seed
/// [`seed`]`(prefix, k)`), for `k` in `0..n`, with `extra` rules and `tls`.
fn server(
    prefix: &str,
    n: u64,
    size: u64,
    tls: bool,
    extra: impl FnOnce(crate::fault::Builder) -> crate::fault::Builder,
) -> FaultServer {
    let mut b = FaultServer::builder().size(size).tls_if(tls);
    for k in 0..n {
        b = b.fault_on(
            When::path(&format!("/{prefix}{k}.bin")),
            Fault::Content { seed: seed(prefix, k) },
        );
    }
    extra(b).start()
}

/// The content seed of file `<prefix><k>.bin`.
fn seed(prefix: &str, k: u64) -> u64 {
    100 + k + 1000 * prefix.len() as u64
}

/// `ringdl -v -j J -Z -d got --json run.json [args] URL…` for `files` (server, prefix, k).
fn run_list(dir: &TestDir, files: &[(&FaultServer, &str, u64)], j: &str, args: &[&str]) -> Output {
    let mut cmd = dir.ringdl();
    cmd.timeout(HANG)
        .args(["-v", "-j", j, "-Z", "-d", "got", "--json", "run.json"]);
    if let Some((srv, ..)) = files.iter().find(|(s, ..)| s.is_tls()) {
        cmd.arg("--ca-certificate").arg(srv.ca_pem());
    }
    cmd.args(args);
    cmd.args(
        files
            .iter()
            .map(|(srv, prefix, k)| srv.url(&format!("/{prefix}{k}.bin"))),
    );
    let o = cmd.run();
    // (A hang is the runner's panic; a failure shows what the servers saw.)
    if o.code() != Some(0) {
        for (srv, ..) in files.iter().take(1) {
            eprintln!("--- requests ---\n{}", srv.describe());
        }
    }
    o
}

/// Files `0..n` of `srv` under `prefix`.
fn files<'a>(srv: &'a FaultServer, prefix: &'a str, n: std::ops::Range<u64>) -> Vec<(&'a FaultServer, &'a str, u64)> {
    n.map(|k| (srv, prefix, k)).collect()
}

/// Exit 0, each `got/<prefix><k>.bin` holds its own bytes, and no file spent a try
/// (`retries` 0 in every `--json` record). Returns the `resent` counts summed.
#[track_caller]
fn assert_exact_no_try(dir: &TestDir, o: &Output, files: &[(&FaultServer, &str, u64)]) -> u64 {
    let err = o.stderr_text();
    assert_eq!(o.code(), Some(0), "expected exit 0\n{err}");
    for &(srv, prefix, k) in files {
        let want = sha256_hex(&content(srv.size(), seed(prefix, k)));
        let name = format!("{prefix}{k}.bin");
        assert_eq!(
            sha256_file(&dir.join("got").join(&name)),
            want,
            "{name}: WRONG BYTES\n{err}"
        );
    }
    let text = fs::read_to_string(dir.join("run.json")).expect("run.json");
    let j: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("run.json: {e}: {text}"));
    let records = j["files"].as_array().expect("files");
    assert_eq!(records.len(), files.len(), "{text}");
    let tried: Vec<String> = records
        .iter()
        .filter(|f| f["retries"] != 0)
        .map(|f| format!("{} retries {}", f["output"], f["retries"]))
        .collect();
    assert!(
        tried.is_empty(),
        "tries spent on closed kept-alive connections: {tried:?}\n{err}"
    );
    assert!(!err.contains("retrying bytes"), "{err}");
    records.iter().map(|f| f["resent"].as_u64().unwrap_or(0)).sum()
}

/// The lines of `-v` that say a kept-alive connection was found closed before a request
/// went on it (`idle`: the peek), or was closed under its request (`resent`).
fn stale_notes(o: &Output) -> (usize, usize) {
    let err = o.stderr_text();
    let count = |what: &str| err.lines().filter(|l| l.contains(what)).count();
    (
        count("kept-alive connection closed by the server while idle"),
        count("(kept-alive connection closed by the server); sending bytes"),
    )
}

/// 50 small files at `-j 8` from a server that closes each connection right after its
/// response although the head said `Connection: keep-alive` (plain: close(2); HTTPS:
/// close_notify, then FIN): every file lands exact and no try is spent. The server saw
/// every connection close after its one response (the rule fired once per response), and
/// ringdl learned it: it found only a few closed kept-alive connections (those of the
/// files in flight before the lesson), not one per file.
#[test]
fn a_server_closing_after_every_response_costs_no_try() {
    for (tls, how) in [(false, Close::Drop), (true, Close::Clean)] {
        let n = 50;
        let srv = server("f", n, 48 * KIB, tls, |b| b.fault(Fault::CloseAfter { how }));
        let dir = TestDir::new("keepalive-closes");
        let list = files(&srv, "f", 0..n);
        let o = run_list(&dir, &list, "8", &[]);
        assert_exact_no_try(&dir, &o, &list);
        let err = o.stderr_text();
        let closes = srv.fired_on(n as usize).len();
        let reqs = srv.requests();
        assert_eq!(
            closes,
            reqs.len(),
            "tls {tls}: a response not followed by a close\n{err}"
        );
        assert!(closes >= n as usize, "tls {tls}: {closes} closes\n{err}");
        assert!(
            reqs.iter().all(|r| r.conn_seq == 1),
            "tls {tls}: a second request on a connection\n{}",
            srv.describe()
        );
        let (idle, resent) = stale_notes(&o);
        assert!(
            idle + resent <= 2 * 8,
            "tls {tls}: {idle} + {resent} closed kept-alive connections met: not learned\n{err}"
        );
    }
}

/// 50 small files at `-j 8`, 46 from a server that closes a kept-alive connection idle
/// for 0.3 s (as nginx `keepalive_timeout 300ms`) and sends each body in 0.5 s, 4 from
/// another whose files are slow (2 s without a byte mid-body). While the slow files hold
/// four lanes, the first server's files run on four: half of its connections wait idle
/// past the timeout, and the files after find them closed. Every file lands exact and no
/// try is spent; the server closed idle connections, and ringdl found closed ones before
/// a request went on them.
#[test]
fn an_idle_timeout_while_other_files_are_slow_costs_no_try() {
    let idle = server("a", 46, 68 * KIB, false, |b| {
        b.rate(128 * KIB).idle_timeout(std::time::Duration::from_millis(300))
    });
    let slow = server("b", 4, 48 * KIB, false, |b| {
        b.fault(Fault::StallMidBody {
            after: 16 * KIB,
            secs: 2,
        })
    });
    let dir = TestDir::new("keepalive-idle");
    let mut list = files(&idle, "a", 0..8);
    list.extend(files(&slow, "b", 0..4));
    list.extend(files(&idle, "a", 8..46));
    let o = run_list(&dir, &list, "8", &[]);
    assert_exact_no_try(&dir, &o, &list);
    let err = o.stderr_text();
    assert!(
        idle.idle_closes() > 0,
        "no idle connection was closed: tested nothing\n{err}"
    );
    let (found, _) = stale_notes(&o);
    assert!(
        found > 0,
        "no kept-alive connection found closed before its request\n{err}"
    );
}

/// A request crossing the server's close of its kept-alive connection (the server reads
/// it and closes without a byte of answer: FIN, or RST) is sent again at once, no try
/// spent: `--json` counts each as `resent`, as many as the server left unanswered.
#[test]
fn a_request_crossing_the_servers_close_is_sent_again_without_a_try() {
    for (tls, how) in [(false, Close::Drop), (false, Close::Rst), (true, Close::Drop)] {
        let n = 20;
        let srv = server("f", n, 32 * KIB, tls, |b| {
            b.fault_on(When::Kept, Fault::Unanswered { how })
        });
        let dir = TestDir::new("keepalive-crossing");
        let list = files(&srv, "f", 0..n);
        let o = run_list(&dir, &list, "4", &[]);
        let resent = assert_exact_no_try(&dir, &o, &list);
        let err = o.stderr_text();
        let unanswered = srv.fired_on(n as usize).len() as u64;
        assert!(unanswered > 0, "tls {tls} {how:?}: no request crossed a close\n{err}");
        assert_eq!(
            resent, unanswered,
            "tls {tls} {how:?}: each unanswered request sent again\n{err}"
        );
    }
}

/// A server that keeps connections but closes one idle for 1.5 s (an idle timeout, as
/// Apache's 5 s or nginx's 75 s after a long file elsewhere) is not taken for one that
/// closes after every response: at `-j 1`, the connection of `a0` sits idle through a
/// slow file of another server, is found closed, and `a1`…`a5` then share one new
/// connection (two in all), not one each (six).
#[test]
fn an_idle_timeout_after_one_response_is_not_taken_for_a_close_after_every_response() {
    let kept = server("a", 6, 32 * KIB, false, |b| {
        b.idle_timeout(std::time::Duration::from_millis(1500))
    });
    let slow = server("b", 1, 48 * KIB, false, |b| {
        b.fault(Fault::StallMidBody {
            after: 16 * KIB,
            secs: 3,
        })
    });
    let dir = TestDir::new("keepalive-idle-not-learned");
    let mut list = files(&kept, "a", 0..1);
    list.extend(files(&slow, "b", 0..1));
    list.extend(files(&kept, "a", 1..6));
    let o = run_list(&dir, &list, "1", &["-x", "1", "--stall-timeout", "10"]);
    assert_exact_no_try(&dir, &o, &list);
    let err = o.stderr_text();
    assert!(
        kept.idle_closes() > 0,
        "no idle connection was closed: tested nothing\n{err}"
    );
    assert_eq!(
        kept.connections(),
        2,
        "a1-a5 each on a connection of its own: an idle timeout was taken for a close after every response\n{err}"
    );
}
