//! Soak loops of issue 4, bounded for CI: kill -9 at random moments then `-c`, and an
//! output filesystem that fills up. Every surviving result must be byte-exact.

use std::process::Command;
use std::time::Duration;

use crate::util::{self, MIB, TestDir, XorShift, is_root, nginx, sha256_file};

/// The bytes a run fetched itself, from its summary `done: N bytes (M fetched now, the
/// rest resumed)`; `None` when it fetched all N (no such parenthesis).
fn fetched_now(summary: &str) -> Option<u64> {
    let (_, rest) = summary.split_once(" bytes (")?;
    let (m, rest) = rest.split_once(" fetched now, the rest resumed)")?;
    assert!(!rest.is_empty(), "summary cut short: {summary}");
    Some(
        m.parse()
            .unwrap_or_else(|e| panic!("fetched-now figure {m:?} in {summary:?}: {e}")),
    )
}

/// 50 × (start, kill -9 at a random moment, then `-c` to the end): 50/50 exact, and at
/// least 8 of the `-c` runs really reused bytes (fetched fewer than the file holds).
#[test]
fn kill_9_at_random_moments_then_resume_is_exact() {
    let ng = nginx();
    let f = ng.file(4 * MIB);
    // 4 MiB/s per connection (the first request covers the whole 4 MiB file): a download
    // takes about a second, so kills land everywhere from the first request to the last
    // write, and the control file (saved every 250 ms) is often there to resume from.
    let url = ng.paced_url(&f.name);
    let mut rng = XorShift::new(0x9_50A4);
    let (mut resumed, mut reused) = (0, 0);
    for iter in 0..50 {
        let dir = TestDir::new("kill9");
        let out = dir.join("out.bin");
        let kill_after = Duration::from_millis(20 + rng.next_u64() % 900);
        let killed = dir
            .ringdl()
            .args(["-q", "-x", "4", "-o"])
            .arg(&out)
            .arg(&url)
            .run_with(|pid| {
                std::thread::sleep(kill_after);
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            });
        let finished_anyway = killed.code() == Some(0);
        let o = dir.ringdl().args(["-c", "-x", "4", "-o"]).arg(&out).arg(&url).run();
        if !finished_anyway {
            o.assert_success();
        }
        // A resume counts only when the run fetched fewer bytes than the file: "resuming:"
        // is printed when the control file is accepted, before any byte is fetched.
        if !finished_anyway {
            let summary = o.summary();
            assert!(
                summary.starts_with(&format!("ringdl: done: {} bytes", f.size)),
                "iteration {iter}: {summary}"
            );
            if let Some(m) = fetched_now(&summary) {
                assert!(m < f.size, "iteration {iter}: {summary}");
                resumed += 1;
                reused += f.size - m;
            }
        }
        assert_eq!(
            sha256_file(&out),
            f.sha256,
            "iteration {iter}: killed after {kill_after:?}"
        );
        assert!(!dir.join("out.bin.part").exists(), "iteration {iter}: .part left");
        assert!(
            !dir.join("out.bin.part.ringdl").exists(),
            "iteration {iter}: control file left"
        );
    }
    // The loop must exercise resuming, not only restarting from zero (measured: 12 of 50;
    // a resume that fetches everything again gives 0).
    eprintln!("{resumed} of 50 runs resumed, reusing {reused} bytes in all");
    assert!(
        resumed >= 8,
        "only {resumed} of 50 runs fetched less than the file (bytes reused from the .part)"
    );
}

/// A full filesystem: a clear local-I/O error (exit 7), no file at the final name; after
/// space is freed, `-c` lands exact bytes.
#[test]
fn full_filesystem_fails_clearly_then_resume_is_exact() {
    if !is_root() {
        util::skip("mounting a small tmpfs needs root");
        return;
    }
    let ng = nginx();
    let f = ng.file(100 * MIB);
    let dir = TestDir::new("fullfs");
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mount = |opts: &str| {
        Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
            .arg(&mnt)
            .status()
            .unwrap()
    };
    if !mount("size=40m").success() {
        util::skip("mount -t tmpfs failed");
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _guard = Unmount(mnt.clone());
    let out = mnt.join("out.bin");
    let o = dir
        .ringdl()
        .args(["-x", "4", "-o"])
        .arg(&out)
        .arg(ng.http_url(&f.name))
        .run();
    o.assert_code(7);
    let err = o.stderr_text();
    assert!(
        err.contains("space") || err.contains("disk full"),
        "unclear message: {err}"
    );
    assert!(!out.exists(), "no file at the final name after a full disk");
    assert!(
        !mnt.join("out.bin.part.ringdl.tmp").exists(),
        "a temporary control file was left after the full disk"
    );
    assert!(
        Command::new("mount")
            .args(["-o", "remount,size=200m"])
            .arg(&mnt)
            .status()
            .unwrap()
            .success(),
        "remount with more space"
    );
    dir.ringdl()
        .args(["-c", "-x", "4", "-o"])
        .arg(&out)
        .arg(ng.http_url(&f.name))
        .run()
        .assert_success();
    assert_eq!(sha256_file(&out), f.sha256);
}

/// Review finding: `-c` with a control file whose `.part` is gone (or shorter than its
/// ranges) must start from zero, not trust ranges that read back as zeros.
#[test]
fn regression_resume_refuses_a_control_file_without_its_part() {
    let ng = nginx();
    let f = ng.file(4 * MIB);
    let url = ng.http_url(&f.name);
    let dir = TestDir::new("stalecontrol");
    let out = dir.join("out.bin");
    let control = dir.join("out.bin.part.ringdl");
    let claim = format!("ringdl-control 1\nurl {url}\ntotal {}\nrange 0 2097152\n", 4 * MIB);
    std::fs::write(&control, &claim).unwrap();
    dir.ringdl()
        .args(["-c", "-o"])
        .arg(&out)
        .arg(&url)
        .run()
        .assert_success();
    assert_eq!(
        sha256_file(&out),
        f.sha256,
        "no .part: the claimed ranges are not on disk"
    );
    // A short .part is no better.
    std::fs::remove_file(&out).unwrap();
    std::fs::write(dir.join("out.bin.part"), vec![0u8; 4096]).unwrap();
    std::fs::write(&control, &claim).unwrap();
    dir.ringdl()
        .args(["-c", "-o"])
        .arg(&out)
        .arg(&url)
        .run()
        .assert_success();
    assert_eq!(sha256_file(&out), f.sha256, "short .part");
}

/// Review finding: a run without `-c` starts over and must remove the old control file
/// first, or a crash before its first save leaves old ranges over new bytes.
#[test]
fn regression_restart_without_continue_removes_the_old_control_file() {
    let ng = nginx();
    let f = ng.file(4 * MIB);
    let dir = TestDir::new("restart");
    let out = dir.join("out.bin");
    let control = dir.join("out.bin.part.ringdl");
    std::fs::write(dir.join("out.bin.part"), vec![7u8; (4 * MIB) as usize]).unwrap();
    std::fs::write(
        &control,
        format!("ringdl-control 1\nurl x\ntotal {}\nrange 0 4194304\n", 4 * MIB),
    )
    .unwrap();
    // Killed at once: the old control file must already be gone.
    dir.ringdl()
        .args(["-q", "-o"])
        .arg(&out)
        .arg(ng.paced_url(&f.name))
        .run_with(|pid| {
            std::thread::sleep(Duration::from_millis(100));
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        });
    assert!(!control.exists(), "the stale control file survived a restart");
}
