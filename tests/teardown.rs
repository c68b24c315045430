//! Nothing of ringdl's outlives it: right after ringdl exits — after a success, a failure
//! or SIGINT, on io_uring (with and without SQPOLL) and on epoll — `umount` of the
//! filesystem that holds the output succeeds at once (no sleep, no retry). Appliance
//! scripts run exactly `ringdl … && umount …` and `ringdl … && reboot`.
//!
//! (Before the fix, io_uring's fixed-file table kept the output open until the kernel's
//! asynchronous ring teardown dropped it from a kworker: `umount` said "target is busy" in
//! 30 of 30 runs, for 20–40 ms after the exit. Later, rarely, on a loaded machine: a
//! request an io-wq worker freed after ringdl saw its completion. Since then ringdl waits
//! before its exit until the output's open file description is closed everywhere:
//! `output::closes`.)

use std::time::Duration;

use crate::util::{self, MIB, TestCommand, TestDir, exit, is_root, nginx, ringdl_bin};

/// Runs after a success per backend: the race it catches was lost in every run, so 20
/// runs leave no doubt either way.
const SUCCESSES: usize = 20;
/// Runs after a failure and after SIGINT per backend.
const FAILURES: usize = 5;

/// One backend: `ringdl --io IO [--sqpoll]`, and what the summary then says.
struct Backend {
    args: &'static [&'static str],
    summary: &'static str,
}

const URING: Backend = Backend {
    args: &["--io", "uring"],
    summary: "I/O io_uring,",
};
const SQPOLL: Backend = Backend {
    args: &["--io", "uring", "--sqpoll"],
    summary: "I/O io_uring (SQPOLL),",
};
const EPOLL: Backend = Backend {
    args: &["--io", "epoll"],
    summary: "I/O epoll,",
};

/// ringdl on `backend` exactly (not the one `RINGDL_TEST_IO` forces: this test covers
/// each backend in every run), `-x 4 -v`, into `out`.
fn ringdl(backend: &Backend, out: &std::path::Path) -> TestCommand {
    let mut cmd = TestCommand::new(ringdl_bin());
    cmd.scrub_env()
        .args(backend.args)
        .args(["-x", "4", "-v", "--force", "-o"])
        .arg(out);
    cmd
}

/// Mounts a tmpfs in the test's own directory, then for each kind of exit downloads into
/// it and unmounts the moment ringdl has exited; the unmount must succeed every time.
fn check(name: &str, backend: &Backend) {
    if !is_root() {
        util::skip("mounting a tmpfs needs root");
        return;
    }
    let n = nginx();
    let file = n.file(4 * MIB);
    let big = n.file(16 * MIB);
    let dir = TestDir::new(name);
    let mnt = dir.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = mnt.join("fw.bin");
    let mount = |what: &str, i: usize| {
        util::Mount::new("tmpfs", "size=64m", &mnt).unwrap_or_else(|e| panic!("{what} run {i}: {e}"))
    };

    // Success: exact bytes (ringdl's own --checksum read-back, so the test opens nothing
    // on the filesystem before the unmount), then unmount at once.
    for i in 0..SUCCESSES {
        let mut m = mount("success", i);
        let o = ringdl(backend, &out)
            .arg(format!("--checksum=sha256={}", file.sha256))
            .arg(n.http_url(&file.name))
            .run();
        let unmounted = m.unmount();
        o.assert_success();
        let summary = o.summary();
        assert!(summary.contains(backend.summary), "run {i}: {summary}");
        if backend.summary.starts_with("I/O io_uring") {
            // The case that raced: the output was in the ring's fixed-file table.
            assert!(
                o.stderr_text()
                    .contains("ops on the registered output (writes, fallocate, fsync)"),
                "run {i}: the output was not a registered file\n{}",
                o.stderr_text()
            );
        }
        unmounted.unwrap_or_else(|e| panic!("success run {i}: {e}"));
    }

    // Failure after every byte was written: a checksum that cannot match (exit 9).
    let wrong = "0".repeat(64);
    for i in 0..FAILURES {
        let mut m = mount("checksum-failure", i);
        let o = ringdl(backend, &out)
            .arg(format!("--checksum=sha256={wrong}"))
            .arg(n.http_url(&file.name))
            .run();
        let unmounted = m.unmount();
        o.assert_code(9);
        unmounted.unwrap_or_else(|e| panic!("checksum-failure run {i}: {e}"));
    }

    // SIGINT mid-download (16 MiB at 8 MiB/s, interrupted after 0.4 s): exit 8.
    for i in 0..FAILURES {
        let mut m = mount("sigint", i);
        let o = ringdl(backend, &out)
            .args(["--limit-rate", "8M"])
            .arg(n.http_url(&big.name))
            .timeout(Duration::from_secs(60))
            .run_with(|pid| {
                std::thread::sleep(Duration::from_millis(400));
                let _ = std::process::Command::new("kill")
                    .args(["-INT", &pid.to_string()])
                    .status();
            });
        let unmounted = m.unmount();
        o.assert_code(exit::INTERRUPTED);
        assert!(
            o.stderr_text().contains("interrupted"),
            "sigint run {i}: {}",
            o.stderr_text()
        );
        unmounted.unwrap_or_else(|e| panic!("sigint run {i}: {e}"));
    }
}

#[test]
fn unmount_right_after_exit_io_uring() {
    check("teardown_uring", &URING);
}

#[test]
fn unmount_right_after_exit_io_uring_sqpoll() {
    check("teardown_sqpoll", &SQPOLL);
}

#[test]
fn unmount_right_after_exit_epoll() {
    check("teardown_epoll", &EPOLL);
}
