//! ringdl where io_uring is refused: the binary runs under a real seccomp filter that
//! makes io_uring_setup / io_uring_enter / io_uring_register fail with EPERM (what the
//! default profiles of Docker ≥ 25 and containerd 2.0 do), falls back to the epoll backend,
//! says so in the summary, and still lands exact bytes and resumes after SIGINT.
//!
//! The binary is `RINGDL_STATIC_BIN` (the static musl build `scripts/test.sh` makes) when
//! set, else the one Cargo built for these tests.

use crate::util;

#[path = "seccomp/filter.rs"]
mod filter;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::thread;
use std::time::Duration;

use util::{MIB, TestCommand, TestDir, assert_same_bytes, exists, nginx, part_path};

const LOCAL_IO: i32 = 7;
const INTERRUPTED: i32 = 8;
/// What the summary says after the automatic fallback under the filter.
const FELL_BACK: &str = "I/O epoll (io_uring refused: EPERM)";

fn binary() -> PathBuf {
    match std::env::var_os("RINGDL_STATIC_BIN") {
        Some(b) => PathBuf::from(b),
        None => {
            eprintln!("note: RINGDL_STATIC_BIN unset: testing the Cargo-built (dynamic) binary");
            util::ringdl_bin().to_path_buf()
        }
    }
}

/// The binary, run in `dir` with io_uring refused by seccomp (no `--io`: ringdl chooses).
fn under_filter(dir: &TestDir) -> TestCommand {
    let mut cmd = TestCommand::new(binary());
    cmd.scrub_env();
    cmd.command_mut().current_dir(dir.path());
    // SAFETY: the hook runs in the child between fork and exec; deny_io_uring only makes
    // two prctl(2) calls (async-signal-safe, no allocation, no lock).
    unsafe {
        cmd.command_mut().pre_exec(filter::deny_io_uring);
    }
    cmd
}

#[test]
fn the_filter_refuses_io_uring_and_forced_uring_exits_7() {
    let n = nginx();
    let file = n.file(4096);
    let dir = TestDir::new("seccomp-forced");
    let out = dir.join("out.bin");
    let o = under_filter(&dir)
        .args(["--io", "uring", "-o"])
        .arg(&out)
        .arg(n.http_url(&file.name))
        .run();
    o.assert_code(LOCAL_IO);
    let err = o.stderr_text();
    assert!(err.contains("Operation not permitted"), "{err}");
    assert!(err.contains("--io epoll"), "the message names the way out: {err}");
    assert!(!exists(&out));
}

#[test]
fn http_and_https_x1_x4_x16_exact_bytes_on_epoll() {
    let n = nginx();
    let file = n.file(4 * MIB);
    for https in [false, true] {
        for conns in ["1", "4", "16"] {
            let dir = TestDir::new("seccomp-dl");
            let out = dir.join("out.bin");
            let mut cmd = under_filter(&dir);
            cmd.args(["-v", "-x", conns, "-o"]).arg(&out);
            if https {
                cmd.arg("--ca-certificate").arg(n.ca_pem()).arg(n.https_url(&file.name));
            } else {
                cmd.arg(n.http_url(&file.name));
            }
            let o = cmd.run();
            o.assert_success();
            assert_same_bytes(&out, file);
            let summary = o.summary();
            assert!(summary.contains(FELL_BACK), "https {https} -x {conns}: {summary}");
            assert!(
                o.stderr_text().contains("io_uring refused: EPERM: using epoll"),
                "-v says why: {}",
                o.stderr_text()
            );
        }
    }
}

#[test]
fn sigint_then_continue_resumes_exact_bytes_on_epoll() {
    let n = nginx();
    for https in [false, true] {
        // HTTP: 4 MiB at 256 KiB/s per connection (about 4 s with -x 4); HTTPS: 100 MiB at
        // 4 MiB/s per connection (about 6 s). Interrupted after 1 s either way.
        let file = n.file(if https { 100 * MIB } else { 4 * MIB });
        let dir = TestDir::new("seccomp-resume");
        let out = dir.join("out.bin");
        let ca = ["--ca-certificate".into(), n.ca_pem().as_os_str().to_owned()];
        let (slow, fast) = if https {
            (n.paced_https_url(&file.name), n.https_url(&file.name))
        } else {
            (n.slow_url(&file.name), n.http_url(&file.name))
        };
        let mut cmd = under_filter(&dir);
        cmd.args(["-x", "4"]).args(&ca).arg("-o").arg(&out).arg(&slow);
        let o = cmd.run_with(|pid| {
            thread::sleep(Duration::from_secs(1));
            // The shell's builtin kill: /bin/kill (procps) may be absent.
            let _ = Command::new("sh")
                .args(["-c", "kill -INT \"$0\"", &pid.to_string()])
                .status();
        });
        o.assert_code(INTERRUPTED);
        assert!(!exists(&out), "FILE exists after an interrupted download");
        assert!(exists(&part_path(&out)), "the .part stays for -c\n{}", o.stderr_text());
        let o = under_filter(&dir)
            .args(["-c", "-x", "4"])
            .args(&ca)
            .arg("-o")
            .arg(&out)
            .arg(&fast)
            .run();
        o.assert_success();
        assert_same_bytes(&out, file);
        let summary = o.summary();
        assert!(summary.contains(FELL_BACK), "{summary}");
        assert!(
            summary.contains("fetched now, the rest resumed"),
            "https {https}: {summary}"
        );
    }
}

#[test]
fn engines_splice_and_buffered_run_on_epoll() {
    let n = nginx();
    let file = n.file(100 * MIB);
    for engine in ["splice", "buffered"] {
        let dir = TestDir::new("seccomp-engine");
        let out = dir.join("out.bin");
        let o = under_filter(&dir)
            .args(["--engine", engine, "-x", "4", "-o"])
            .arg(&out)
            .arg(n.http_url(&file.name))
            .run();
        o.assert_success();
        assert_same_bytes(&out, file);
        let lines = o.summary_lines();
        assert_eq!(lines.len(), 1, "{}", o.stderr_text());
        assert!(
            lines[0].contains(&format!("engine {engine}")) && lines[0].contains(FELL_BACK),
            "{}",
            lines[0]
        );
    }
}
