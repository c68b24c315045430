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

/// The bytes of `[start, end)` ranges a control file (`FILE.part.ringdl`) names: `range
/// START END` lines, written only for bytes already on disk (src/output/resume.rs); 0 while
/// there is no file (or a torn read, which the atomic rename rules out).
fn control_file_bytes(path: &std::path::Path) -> u64 {
    let Ok(text) = std::fs::read_to_string(path) else {
        return 0;
    };
    text.lines()
        .filter_map(|l| l.strip_prefix("range "))
        .filter_map(|r| {
            let (a, b) = r.split_once(' ')?;
            Some(b.parse::<u64>().ok()?.saturating_sub(a.parse().ok()?))
        })
        .sum()
}

/// Process `pid` is running: it exists and is no zombie (`/proc/PID/stat`, proc(5)).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// 50 × (start, kill -9, then `-c` to the end): 50/50 exact. Even iterations kill a 4 MiB
/// download at a random moment (20–920 ms: anywhere from the first request to the last
/// write); odd ones kill a 16 MiB download by bytes landed, once the control file names
/// at least 256 KiB (and then after 0–100 ms more), so each of those `-c` runs must reuse
/// bytes (fetch fewer than the file holds). The server paces 4 MiB/s per connection: 16 MiB
/// takes ≥ 1 s even on 4 connections, the first control save comes at 0.25 s, so the
/// download is still running at the kill; 23 of the 25 are required (2 spare for a
/// machine so loaded that a save comes late).
#[test]
fn kill_9_at_random_moments_then_resume_is_exact() {
    let ng = nginx();
    let f4 = ng.file(4 * MIB);
    let f16 = ng.file(16 * MIB);
    let mut rng = XorShift::new(0x9_50A4);
    let (mut resumed, mut reused, mut by_bytes_killed) = (0, 0, 0);
    for iter in 0..50 {
        let dir = TestDir::new("kill9");
        let out = dir.join("out.bin");
        let by_bytes = iter % 2 == 1;
        let f = if by_bytes { &f16 } else { &f4 };
        let url = ng.paced_url(&f.name);
        let kill_after = Duration::from_millis(20 + rng.next_u64() % 900);
        let extra = Duration::from_millis(rng.next_u64() % 100);
        let control = dir.join("out.bin.part.ringdl");
        let json = dir.join("run.json");
        let killed = dir
            .ringdl()
            .args(["-q", "-x", "4", "--json"])
            .arg(&json)
            .arg("-o")
            .arg(&out)
            .arg(&url)
            .run_with(|pid| {
                if by_bytes {
                    // Poll until the control file names 256 KiB on disk (or the run ended:
                    // a zombie until run_with reaps it; or 10 s).
                    let deadline = std::time::Instant::now() + Duration::from_secs(10);
                    while control_file_bytes(&control) < 256 << 10
                        && running(pid)
                        && std::time::Instant::now() < deadline
                    {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    std::thread::sleep(extra);
                } else {
                    std::thread::sleep(kill_after);
                }
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            });
        // Done before the kill landed: exit 0, or killed after the rename to the final name
        // (no .part left: `-c` then says the file looks complete).
        let finished_anyway = killed.code() == Some(0) || (out.exists() && !dir.join("out.bin.part").exists());
        if by_bytes && finished_anyway {
            eprintln!(
                "iteration {iter}: the download ended before its kill ({} bytes named by the control file)",
                control_file_bytes(&control)
            );
        }
        if !finished_anyway {
            // `--json` is written at the end only: a killed run leaves no (empty) record.
            assert!(!json.exists(), "iteration {iter}: a killed run left {}", json.display());
        }
        let o = dir
            .ringdl()
            .args(["-c", "-x", "4", "--json"])
            .arg(&json)
            .arg("-o")
            .arg(&out)
            .arg(&url)
            .run();
        if !finished_anyway {
            o.assert_success();
            let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
            assert_eq!(j["exit_code"], 0, "iteration {iter}: {j}");
        }
        // A resume counts only when the run fetched fewer bytes than the file (the done line
        // says how many it fetched now).
        if !finished_anyway {
            let summary = o.summary();
            assert!(
                summary.starts_with(&format!("ringdl: done: {} bytes", f.size)),
                "iteration {iter}: {summary}"
            );
            let fetched = fetched_now(&summary);
            if by_bytes {
                by_bytes_killed += 1;
                // Killed after the control file named ≥ 256 KiB on disk: those bytes are kept.
                let m = fetched.unwrap_or_else(|| {
                    panic!("iteration {iter}: killed with ≥ 256 KiB on disk, yet all fetched again: {summary}")
                });
                assert!(m <= f.size - (256 << 10), "iteration {iter}: {summary}");
            }
            if let Some(m) = fetched {
                assert!(m < f.size, "iteration {iter}: {summary}");
                resumed += 1;
                reused += f.size - m;
            }
        }
        assert_eq!(
            sha256_file(&out),
            f.sha256,
            "iteration {iter}: killed after {}",
            if by_bytes {
                format!("≥ 256 KiB landed + {extra:?}")
            } else {
                format!("{kill_after:?}")
            }
        );
        assert!(!dir.join("out.bin.part").exists(), "iteration {iter}: .part left");
        assert!(!control.exists(), "iteration {iter}: control file left");
    }
    // The loop must exercise resuming, not only restarting from zero: every kill by bytes
    // landed resumed (checked above); a resume that fetches everything again fails there.
    eprintln!(
        "{resumed} of 50 runs resumed, reusing {reused} bytes in all; {by_bytes_killed} of 25 killed by bytes landed"
    );
    assert!(
        by_bytes_killed >= 23,
        "only {by_bytes_killed} of 25 downloads were still running when the control file named 256 KiB"
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
    // Unmounted at the end; the test fails if the filesystem is still busy then.
    let mut mount = match util::Mount::new("tmpfs", "size=40m", &mnt) {
        Ok(m) => m,
        Err(e) => {
            util::skip(&e);
            return;
        }
    };
    let out = mnt.join("out.bin");
    let o = dir
        .ringdl()
        .args(["-x", "4", "-o"])
        .arg(&out)
        .arg(ng.http_url(&f.name))
        .run();
    o.assert_code(7);
    let err = o.stderr_text();
    // (tmpfs preallocates: the fallocate(2) of the whole file meets ENOSPC, or a write
    // that was already on its way does.)
    assert!(
        (err.contains("not enough space for 104857600 bytes") || err.contains("disk full at offset "))
            && err.contains("bytes still to land,")
            && err.contains(" free on its file system: free space first"),
        "unclear message: {err}"
    );
    assert!(!out.exists(), "no file at the final name after a full disk");
    assert!(
        !mnt.join("out.bin.part.ringdl.tmp").exists(),
        "a temporary control file was left after the full disk"
    );
    assert!(mount.remount("size=200m"), "remount with more space");
    dir.ringdl()
        .args(["-c", "-x", "4", "-o"])
        .arg(&out)
        .arg(ng.http_url(&f.name))
        .run()
        .assert_success();
    assert_eq!(util::sha256_file_apart(&out), f.sha256);
    mount.unmount().unwrap();
}

/// A disk that fills up while bytes land (ext2 has no fallocate(2), so nothing is
/// preallocated and a write meets ENOSPC): a 24 MiB ext2 image holding a 12 MiB filler,
/// a 16 MiB download. Exit 7; the message says the disk is full, how many bytes are still
/// to land and how many are free (fewer than the filesystem's size less the filler); no
/// file at the final name. Once the filler is removed, `-c` lands the exact bytes.
#[test]
fn a_disk_filling_up_mid_download_says_how_much_space_is_missing() {
    if !is_root() {
        util::skip("mounting a loop filesystem needs root");
        return;
    }
    let ng = nginx();
    let f = ng.file(16 * MIB);
    let dir = TestDir::new("fullext2");
    let (img, mnt) = (dir.join("fs.img"), dir.join("mnt"));
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::File::create(&img).unwrap().set_len(24 * MIB).unwrap();
    // (/sbin: root's PATH has it, another's may not; scripts/test.sh installs e2fsprogs.)
    let mk = Command::new("/sbin/mkfs.ext2")
        .args(["-q", "-F"])
        .arg(&img)
        .output()
        .unwrap_or_else(|e| panic!("/sbin/mkfs.ext2 (e2fsprogs): {e}"));
    assert!(
        mk.status.success(),
        "mkfs.ext2: {}",
        String::from_utf8_lossy(&mk.stderr)
    );
    // Unmounted at the end; the test fails if the filesystem is still busy then.
    let mut mount = match util::Mount::image("ext2", &img, &mnt) {
        Ok(m) => m,
        Err(e) => {
            util::skip(&e);
            return;
        }
    };
    let filler = mnt.join("filler");
    std::fs::write(&filler, vec![7u8; 12 * MIB as usize]).unwrap();
    let out = mnt.join("out.bin");
    let run = |extra: &[&str]| {
        dir.ringdl()
            .args(extra)
            .args(["-x", "4", "--min-split-size", "1M", "-v", "-o"])
            .arg(&out)
            .arg(ng.http_url(&f.name))
            .arg("--json")
            .arg(dir.join("run.json"))
            .run()
    };
    let o = run(&[]);
    let err = o.stderr_text();
    o.assert_code(7);
    assert!(
        err.contains("fallocate: "),
        "ext2 preallocated: the test needs the write path\n{err}"
    );
    let msg = err
        .lines()
        .find(|l| l.contains("disk full at offset "))
        .unwrap_or_else(|| panic!("no disk-full message\n{err}"));
    let free: u64 = msg
        .split_once(" bytes still to land, ")
        .and_then(|(_, r)| r.split_once(" free on its file system: free space first"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("the message says nothing of the space: {msg}"));
    assert!(
        free < 12 * MIB,
        "{free} bytes free beside a 12 MiB filler on 24 MiB: {msg}"
    );
    // The bytes still to land are the file's less what landed — `bytes` in `--json`, the
    // transfer's landed record once every write in flight came back — none counted twice.
    let need: u64 = msg
        .split_once(" bytes still to land, ")
        .and_then(|(head, _)| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no bytes still to land: {msg}"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    let landed = json["bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no bytes landed in {json}"));
    assert!(landed > 0 && landed < 16 * MIB, "{json}");
    assert_eq!(need, 16 * MIB - landed, "{msg}\n{json}");
    // (The .part reaches at least as far as what landed: it is sparse where a write failed.)
    assert!(
        std::fs::metadata(mnt.join("out.bin.part")).unwrap().len() >= landed,
        "{msg}"
    );
    assert!(!out.exists(), "no file at the final name after a full disk");
    // Space freed: the same command with -c lands the exact bytes.
    std::fs::remove_file(&filler).unwrap();
    let again = run(&["-c"]);
    again.assert_success();
    assert_eq!(util::sha256_file_apart(&out), f.sha256, "{}", again.stderr_text());
    mount.unmount().unwrap();
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

/// Interrupts a download of `url` into `out` at 6 MiB/s with SIGINT after 1.2 s:
/// exit 8, a `.part` and a control file that names some bytes but not all. Returns the
/// bytes the control file names.
fn interrupted(dir: &TestDir, out: &std::path::Path, url: &str, total: u64) -> u64 {
    let o = dir
        .ringdl()
        .args(["-x", "2", "--limit-rate", "6M", "-o"])
        .arg(out)
        .arg(url)
        .timeout(Duration::from_secs(60))
        .run_with(|pid| {
            std::thread::sleep(Duration::from_millis(1200));
            let _ = Command::new("kill").args(["-INT", &pid.to_string()]).status();
        });
    o.assert_code(util::exit::INTERRUPTED);
    let control = format!("{}.ringdl", util::part_path(out).display());
    let kept = control_file_bytes(std::path::Path::new(&control));
    assert!(
        (1..total).contains(&kept),
        "the interrupted run kept {kept} of {total} bytes\n{}",
        o.stderr_text()
    );
    kept
}

/// Issue 22: running again WITHOUT `-c` over a `.part` whose control file is valid resumes
/// (as aria2c does): nginx's access log shows that the second run was sent only the
/// missing bytes, and the file is exact. `--no-continue` starts over: every byte is sent
/// again.
#[test]
fn resume_is_the_default_and_no_continue_starts_over() {
    let ng = nginx();
    let f = ng.file(16 * MIB);
    let total = f.size;
    let dir = TestDir::new("resume_default");
    let out = dir.join("out.bin");
    // A query of this test's own to find its lines in the access log.
    let tag = "resume-default-issue22";
    let url = format!("{}?{tag}", ng.http_url(&f.name));
    // What nginx logged so far (it logs an aborted request when its connection closes).
    let logged = || {
        std::thread::sleep(Duration::from_millis(300));
        ng.bytes_served(tag).len()
    };

    let kept = interrupted(&dir, &out, &url, total);
    let before = logged();
    let o = dir.ringdl().args(["-x", "2", "-o"]).arg(&out).arg(&url).run();
    o.assert_success();
    assert_eq!(sha256_file(&out), f.sha256);
    let err = o.stderr_text();
    assert!(
        err.contains(&format!("{} has a control file", util::part_path(&out).display()))
            && err.contains(&format!("{kept} of {total} bytes kept")),
        "{err}"
    );
    // (Said once before the request, once when the server's answer matched: "resuming"
    // only the second time.)
    assert_eq!(err.matches("resuming").count(), 1, "{err}");
    let served: u64 = ng.bytes_served(tag)[before..].iter().sum();
    // Only what was missing, give or take the blocks at the edges of each gap (and what a
    // work-stealing split leaves in flight).
    assert!(
        served >= total - kept && served <= total - kept + 512 * 1024,
        "the run without -c was sent {served} bytes; {} were missing\n{err}",
        total - kept
    );
    assert!(fetched_now(&o.summary()).is_some(), "{}", o.summary());

    // --no-continue: every byte again, and it says so.
    std::fs::remove_file(&out).unwrap();
    interrupted(&dir, &out, &url, total);
    let before = logged();
    let o = dir
        .ringdl()
        .args(["-x", "2", "--no-continue", "-o"])
        .arg(&out)
        .arg(&url)
        .run();
    o.assert_success();
    assert_eq!(sha256_file(&out), f.sha256);
    assert!(o.stderr_text().contains("exists: starting over"), "{}", o.stderr_text());
    let served: u64 = ng.bytes_served(tag)[before..].iter().sum();
    assert!(served >= total, "--no-continue was sent {served} of {total} bytes");
    assert_eq!(fetched_now(&o.summary()), None, "{}", o.summary());
}

/// A small file's fallocate(2) made on the reactor's thread (not a FALLOCATE on the ring,
/// `INLINE_FALLOCATE`), run under strace with `errno` injected into it: the trace shows
/// the injected call, and the run's output.
fn with_fallocate_failing(test: &str, errno: &str) -> (TestDir, std::path::PathBuf, util::Output, String) {
    let ng = nginx();
    let f = ng.file(4 * MIB);
    let dir = TestDir::new(test);
    let out = dir.join("small.bin");
    let o = util::TestCommand::new("strace")
        .args(["-f", "-o", "trace.txt", "-e", "trace=fallocate"])
        .args(["-e", &format!("inject=fallocate:error={errno}")])
        .arg(util::ringdl_bin())
        .args(["-v", "-o"])
        .arg(&out)
        .arg(ng.http_url(&f.name))
        .current_dir(dir.path())
        .timeout(Duration::from_secs(60))
        .run();
    let trace = std::fs::read_to_string(dir.join("trace.txt")).unwrap();
    assert!(
        trace
            .lines()
            .any(|l| l.contains("fallocate(") && l.contains("(INJECTED)")),
        "the 4 MiB file's fallocate(2) was not a system call of ringdl's: {trace}"
    );
    (dir, out, o, f.sha256.clone())
}

/// On a file system not known to be a local disk one (overlayfs here: what lies under it
/// is not known; NFS or FUSE would wait on a server or a daemon) a small file's
/// preallocation is not made on the reactor's thread but on the ring: strace sees no
/// fallocate(2), and the bytes land exact.
#[test]
fn a_small_file_on_a_file_system_not_known_local_is_preallocated_on_the_ring() {
    if !is_root() {
        util::skip("mounting an overlay needs root");
        return;
    }
    let ng = nginx();
    let f = ng.file(4 * MIB);
    let dir = TestDir::new("falloc-overlay");
    let (lower, upper, work, mnt) = (dir.join("lower"), dir.join("upper"), dir.join("work"), dir.join("mnt"));
    for d in [&lower, &upper, &work, &mnt] {
        std::fs::create_dir_all(d).unwrap();
    }
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    );
    // Unmounted at the end; the test fails if the file system is still busy then.
    let mut mount = match util::Mount::new("overlay", &opts, &mnt) {
        Ok(m) => m,
        Err(e) => {
            util::skip(&e);
            return;
        }
    };
    let out = mnt.join("small.bin");
    let o = util::TestCommand::new("strace")
        .args(["-f", "-o", "trace.txt", "-e", "trace=fallocate"])
        .arg(util::ringdl_bin())
        .args(["-o"])
        .arg(&out)
        .arg(ng.http_url(&f.name))
        .current_dir(dir.path())
        .timeout(Duration::from_secs(60))
        .run();
    o.assert_success();
    let trace = std::fs::read_to_string(dir.join("trace.txt")).unwrap();
    assert!(
        !trace.contains("fallocate("),
        "a fallocate(2) on the reactor's thread on overlayfs: {trace}"
    );
    assert_eq!(util::sha256_file_apart(&out), f.sha256);
    mount.unmount().unwrap();
}

/// A small file's preallocation in place meets ENOSPC: exit 7, the message says the disk
/// is full for the file's size and how much is still to land, and nothing is at the final
/// name.
#[test]
fn a_small_files_preallocation_meeting_a_full_disk_fails_clearly() {
    let (_dir, out, o, _) = with_fallocate_failing("falloc-enospc", "ENOSPC");
    let err = o.stderr_text();
    o.assert_code(7);
    assert!(
        err.contains("not enough space for 4194304 bytes") && err.contains("free space first"),
        "unclear message: {err}"
    );
    assert!(!out.exists(), "a file at the final name after a full disk\n{err}");
}

/// A small file's preallocation refused (EOPNOTSUPP, as on ext2 or FUSE) is said at `-v`
/// and the bytes land without it, exact, exit 0.
#[test]
fn a_small_files_preallocation_refused_is_said_and_its_bytes_land() {
    let (_dir, out, o, sha) = with_fallocate_failing("falloc-eopnotsupp", "EOPNOTSUPP");
    let err = o.stderr_text();
    o.assert_success();
    assert!(
        err.lines()
            .any(|l| l.starts_with("ringdl: fallocate: Operation not supported")
                && l.ends_with("(continuing without preallocation)")),
        "the refusal was not said: {err}"
    );
    assert_eq!(sha256_file(&out), sha);
}
