//! The software record layer (`ktls::soft`, engine direct) against a rustls server on this
//! host: every suite it supports on TLS 1.3 and TLS 1.2, NewSessionTickets, KeyUpdates in
//! the middle of a body (taken in place, answered, no reconnect), and the ways a server
//! ends a connection. The server is `vm_server` (`tests/vm/server.rs`, the kTLS VM's),
//! whose knobs make what nginx never sends; each case compares SHA-256 and the server's
//! own log (what it sent, what the client answered) with ringdl's summary, so a silent
//! fallback to rustls' copying path, a missed KeyUpdate or a reconnect fails the case.
//!
//! The server binary is `RINGDL_VM_SERVER_BIN` (the static build `scripts/test.sh` makes)
//! when set, else the example Cargo built beside these tests (`cargo test` builds
//! examples).

use crate::util;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use util::{MIB, TestDir, sha256_file, write_random_file};

/// `vm_server`: `RINGDL_VM_SERVER_BIN`, else the example beside these tests (`cargo test`
/// without `--test` builds examples), else built now ([`util::cargo_build`]) — never a
/// skip.
fn server_bin() -> Option<PathBuf> {
    if let Some(b) = std::env::var_os("RINGDL_VM_SERVER_BIN") {
        return Some(PathBuf::from(b));
    }
    let bin = util::ringdl_bin().parent()?.join("examples/vm_server");
    if bin.exists() {
        return Some(bin);
    }
    let target = util::cargo_build(&["-p", "ringdl", "--example", "vm_server"], &[]);
    let bin = target.join("release/examples/vm_server");
    assert!(bin.exists(), "cargo built no {}", bin.display());
    Some(bin)
}

/// A running `vm_server -v` serving `root` on a free loopback port; stderr in a file.
struct Server {
    child: Child,
    port: u16,
    ca: PathBuf,
    log: PathBuf,
}

impl Server {
    fn start(bin: &Path, dir: &TestDir, root: &Path, opts: &[&str]) -> Server {
        let port = util::free_port(false);
        let (ca, log) = (dir.join("ca.pem"), dir.join("server.log"));
        let child = Command::new(bin)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--root"])
            .arg(root)
            .arg("--ca-out")
            .arg(&ca)
            .arg("-v")
            .args(opts)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let mut s = Server { child, port, ca, log };
        let until = Instant::now() + Duration::from_secs(20);
        while !s.ca.exists() {
            if let Ok(Some(st)) = s.child.try_wait() {
                panic!("vm_server exited ({st}):\n{}", s.log_text());
            }
            assert!(Instant::now() < until, "vm_server not ready:\n{}", s.log_text());
            thread::sleep(Duration::from_millis(20));
        }
        s
    }

    fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log once every accepted connection has printed its `closed` line (ringdl has
    /// exited, so each ends within moments).
    fn settled_log(&self) -> String {
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let log = self.log_text();
            let count = |what: &str| log.lines().filter(|l| l.contains(what)).count();
            if count(": accepted") == count(": closed ") || Instant::now() > until {
                return log;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sums the number after `key ` on every `closed` line of the server's log.
fn closed_sum(log: &str, key: &str) -> usize {
    log.lines()
        .filter(|l| l.contains(": closed "))
        .map(|l| {
            let rest = l
                .split_once(&format!(" {key} "))
                .unwrap_or_else(|| panic!("no `{key}` in {l}"))
                .1;
            rest.split(' ').next().unwrap().parse::<usize>().unwrap()
        })
        .sum()
}

/// One download of a `size`-byte file from a `vm_server` started with `opts`, the software
/// record layer on, engine direct, `-x conns`. Returns the summary and the server's log.
fn soft_case(name: &str, size: u64, opts: &[&str], conns: &str) -> Option<(String, String)> {
    let bin = server_bin()?;
    let dir = TestDir::new(&format!("soft-{name}"));
    let root = dir.join("srv");
    fs::create_dir(&root).unwrap();
    let sha = write_random_file(&root.join("payload.bin"), size, size ^ 0x50f7);
    let srv = Server::start(&bin, &dir, &root, opts);
    let out = dir.join("out.bin");
    let o = dir
        .ringdl()
        .env("RINGDL_SOFT_TLS", "1")
        .args(["--engine", "direct", "-v", "-x", conns, "--ca-certificate"])
        .arg(&srv.ca)
        .arg("-o")
        .arg(&out)
        .arg(format!("https://127.0.0.1:{}/payload.bin", srv.port))
        .run();
    let log = srv.settled_log();
    if o.code() != Some(0) {
        eprintln!("{name}: server log:\n{log}");
    }
    o.assert_success();
    assert_eq!(sha256_file(&out), sha, "{name}: the bytes differ");
    let summary = o.summary();
    let (opened, of) = opened_in_place(&summary);
    // Every connection that got a request was handed off; one still in its handshake when
    // the download ended was accepted by the server but never reached the hand-off.
    let accepted = log.lines().filter(|l| l.contains(": accepted")).count();
    let served = log
        .lines()
        .filter(|l| l.contains(": closed ") && !l.contains(" requests 0 "))
        .count();
    assert!(
        opened >= 1 && opened == of && (served..=accepted).contains(&of),
        "{name}: records opened in place on {opened} of {of} TLS connections, the server \
         served {served} and accepted {accepted}: {summary}\nserver:\n{log}"
    );
    Some((summary, log))
}

/// `(A, B)` of the summary's `TLS records opened in place on A of B TLS connections`.
fn opened_in_place(summary: &str) -> (usize, usize) {
    let rest = summary
        .split_once("TLS records opened in place on ")
        .unwrap_or_else(|| panic!("not opened in place: {summary}"))
        .1;
    let mut words = rest.split(' ');
    let a = words.next().unwrap().parse().unwrap();
    assert_eq!(words.next(), Some("of"), "{summary}");
    let b = words.next().unwrap().parse().unwrap();
    (a, b)
}

/// Every suite of both versions, records opened in place on every connection.
#[test]
fn every_suite_opens_in_place() {
    for tls in ["1.3", "1.2"] {
        for suite in ["aes128gcm", "aes256gcm", "chacha20"] {
            let name = format!("tls{}-{suite}", tls.replace('.', ""));
            let Some((_, log)) = soft_case(&name, 8 * MIB + 12345, &["--tls", tls, "--suite", suite], "4") else {
                return;
            };
            let want = format!("TLSv{}", tls.replace('.', "_"));
            let closed: Vec<&str> = log.lines().filter(|l| l.contains(": closed ")).collect();
            assert!(
                !closed.is_empty() && closed.iter().all(|l| l.contains(&want)),
                "{name}: the server did not speak {want}:\n{log}"
            );
        }
    }
}

/// TLS 1.3 KeyUpdates in the middle of bodies (one every 1 MiB a connection sends, each
/// asking for ours): every one the server sent is taken in place (the summary's count),
/// each was answered with our own KeyUpdate (the server counts those it read), and no
/// connection was made again for it. At `--threads 2` (scripts/test.sh's pass) the
/// helper's count is in the summary too (it was left out: "3 KeyUpdates" of 8), and
/// the bodies split so that the server sends fewer (7 seen): at least 4 are asked.
#[test]
fn key_updates_are_taken_in_place_and_answered() {
    let Some((summary, log)) = soft_case(
        "keyupdate",
        16 * MIB + 12345,
        &["--tls", "1.3", "--key-update-every", "1048576"],
        "4",
    ) else {
        return;
    };
    let sent = log.lines().filter(|l| l.contains("KeyUpdate sent")).count();
    assert!(sent >= 4, "the server sent {sent} KeyUpdates:\n{log}");
    assert!(
        summary.contains(&format!("{sent} KeyUpdates taken in place")),
        "server sent {sent}: {summary}"
    );
    assert_eq!(closed_sum(&log, "key-updates"), sent, "{log}");
    assert_eq!(
        closed_sum(&log, "client-key-updates"),
        sent,
        "each KeyUpdate asked for ours:\n{log}"
    );
    assert!(!summary.contains("retr"), "a KeyUpdate cost a retry: {summary}");
    let (_, of) = opened_in_place(&summary);
    let slots: usize = summary
        .split(", ")
        .find_map(|w| w.strip_suffix(" connections")?.parse().ok())
        .unwrap_or_else(|| panic!("no connection count: {summary}"));
    assert_eq!(of, slots, "a KeyUpdate cost a connection: {summary}\n{log}");
}

/// NewSessionTickets after the handshake (TLS 1.3) go to rustls; none is data.
#[test]
fn tickets_are_not_data() {
    for tickets in ["0", "4"] {
        if soft_case(
            &format!("tickets{tickets}"),
            4 * MIB + 777,
            &["--tls", "1.3", "--tickets", tickets],
            "2",
        )
        .is_none()
        {
            return;
        }
    }
}

/// One response per connection, ended by close_notify or a bare FIN, and small records
/// (1000-byte writes): the body is exact either way.
#[test]
fn closes_and_small_records() {
    for (name, opts) in [
        ("notify", &["--conn-close", "--close", "notify"][..]),
        ("fin", &["--conn-close", "--close", "fin"][..]),
        ("small-records", &["--chunk", "1000"][..]),
    ] {
        for tls in ["1.3", "1.2"] {
            let mut all = vec!["--tls", tls];
            all.extend_from_slice(opts);
            if soft_case(&format!("{name}-{tls}"), 4 * MIB + 4321, &all, "4").is_none() {
                return;
            }
        }
    }
}
