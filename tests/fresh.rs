//! Fetch only if changed (docs/guide/fetch-if-changed.md "Fetch only if changed"):
//! `--etag-save` / `--etag-compare` (curl's) and `-N` (wget's timestamping) against the
//! real test nginx, which answers `If-None-Match` and `If-Modified-Since` with 304 for
//! static files. Each test proves the 304 in nginx's access log (status 304, 0 body
//! bytes, one request) and that the output kept its bytes and modification time; then
//! changes the file on the server and sees the new bytes land.

use std::fs;
use std::path::Path;
use std::time::SystemTime;

use crate::util::{HANG, KIB, MIB, TestDir, exit, nginx, sha256_bytes, sha256_file, write_random_file};

/// A file of `size` bytes in nginx's document root under a name of this test's own;
/// returns its name and SHA-256.
fn serve(name: &str, size: u64, seed: u64) -> (String, String) {
    let name = format!("fresh-{name}-{}.bin", std::process::id());
    let sha = write_random_file(&nginx().www().join(&name), size, seed);
    (name, sha)
}

/// The access-log lines of requests for `name` (and how many there were before).
fn log_lines(name: &str) -> Vec<String> {
    nginx().access_log(&format!("GET /{name} "))
}

/// The status and body bytes of a `combined` access-log line.
fn status_and_bytes(line: &str) -> (u16, u64) {
    let after = line
        .split("\" ")
        .nth(1)
        .unwrap_or_else(|| panic!("no status in {line:?}"));
    let mut it = after.split_whitespace();
    let status = it
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{line:?}"));
    let bytes = it
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{line:?}"));
    (status, bytes)
}

fn mtime(p: &Path) -> SystemTime {
    fs::metadata(p).unwrap().modified().unwrap()
}

/// Sets `p`'s modification time to `secs` since the epoch (touch(1), so the server's
/// Last-Modified and ETag change deterministically).
fn touch(p: &Path, secs: u64) {
    let st = std::process::Command::new("touch")
        .arg("-d")
        .arg(format!("@{secs}"))
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success(), "touch {p:?}");
}

#[test]
fn etag_saved_then_304_leaves_the_output_untouched_then_a_change_lands() {
    let n = nginx();
    let (name, sha) = serve("etag", 3 * MIB + 5, 71);
    let dir = TestDir::new("fresh-etag");
    let out = dir.join("image.bin");
    let etag = dir.join("image.etag");
    let url = n.http_url(&name);
    // First run: no etag file yet, so no condition; the ETag is saved once the file landed.
    let o = dir
        .ringdl()
        .args(["-v", "-x", "4", "--etag-compare"])
        .arg(&etag)
        .arg("--etag-save")
        .arg(&etag)
        .arg("-o")
        .arg(&out)
        .arg(&url)
        .run();
    o.assert_success();
    assert!(
        o.stderr_text().contains("the first request is unconditional"),
        "{}",
        o.stderr_text()
    );
    assert_eq!(sha256_file(&out), sha);
    let saved = fs::read_to_string(&etag).unwrap();
    assert!(
        saved.starts_with('"') && saved.ends_with("\"\n"),
        "saved ETag {saved:?}"
    );
    // Second run: If-None-Match → 304; the output keeps its bytes and its time.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let before = (sha256_file(&out), mtime(&out));
    let logged = log_lines(&name).len();
    let json = dir.join("run.json");
    let o = dir
        .ringdl()
        .args(["-x", "4", "--etag-compare"])
        .arg(&etag)
        .arg("--etag-save")
        .arg(&etag)
        .arg("--json")
        .arg(&json)
        .arg("-o")
        .arg(&out)
        .arg(&url)
        .run();
    o.assert_success();
    assert!(o.stderr_text().contains("not modified: 304"), "{}", o.stderr_text());
    assert_eq!((sha256_file(&out), mtime(&out)), before, "a 304 touched the output");
    assert!(!dir.join("image.bin.part").exists(), "a 304 left a .part");
    assert_eq!(fs::read_to_string(&etag).unwrap(), saved, "a 304 rewrote the etag file");
    let j = fs::read_to_string(&json).unwrap();
    assert!(
        j.contains("\"not_modified\":true") && j.contains("\"fetched\":0"),
        "{j}"
    );
    let new_lines = log_lines(&name)[logged..].to_vec();
    assert_eq!(
        new_lines.len(),
        1,
        "one request, nothing fetched after it: {new_lines:?}"
    );
    assert_eq!(status_and_bytes(&new_lines[0]), (304, 0), "{new_lines:?}");
    // The file changes on the server (another size, so another ETag): 206 and new bytes.
    let sha2 = write_random_file(&n.www().join(&name), 2 * MIB + 9, 72);
    let logged = log_lines(&name).len();
    let o = dir
        .ringdl()
        .args(["-x", "4", "--etag-compare"])
        .arg(&etag)
        .arg("--etag-save")
        .arg(&etag)
        .arg("-o")
        .arg(&out)
        .arg(&url)
        .run();
    o.assert_success();
    assert_eq!(sha256_file(&out), sha2);
    let saved2 = fs::read_to_string(&etag).unwrap();
    assert_ne!(saved2, saved, "the new ETag was not saved");
    let first = &log_lines(&name)[logged];
    assert_eq!(status_and_bytes(first).0, 206, "{first}");
    let _ = fs::remove_file(n.www().join(&name));
}

#[test]
fn a_missing_or_empty_compare_file_means_an_unconditional_request() {
    let n = nginx();
    let (name, sha) = serve("missing", MIB, 73);
    let dir = TestDir::new("fresh-missing");
    let out = dir.join("f.bin");
    for compare in ["does-not-exist", "empty"] {
        if compare == "empty" {
            fs::write(dir.join("empty"), "").unwrap();
        }
        let logged = log_lines(&name).len();
        let o = dir
            .ringdl()
            .args(["-x", "2", "--etag-compare", compare, "-o"])
            .arg(&out)
            .arg(n.http_url(&name))
            .run();
        // (An existing output is replaced: -N and --etag-compare imply --force.)
        o.assert_success();
        assert_eq!(sha256_file(&out), sha);
        let lines = log_lines(&name)[logged..].to_vec();
        assert!(
            lines.iter().all(|l| status_and_bytes(l).0 == 206) && !lines.is_empty(),
            "{compare}: {lines:?}"
        );
    }
    let _ = fs::remove_file(n.www().join(&name));
}

#[test]
fn an_etag_file_holding_no_entity_tag_is_a_usage_error_before_any_request() {
    let n = nginx();
    let dir = TestDir::new("fresh-garbage");
    fs::write(dir.join("etag"), "abc\r\nX-Injected: 1\n").unwrap();
    let o = dir
        .ringdl()
        .args(["--etag-compare", "etag", "-o", "f"])
        .arg(n.http_url(&n.file(4096).name))
        .run();
    o.assert_code(2);
    assert!(o.stderr_text().contains("not an entity-tag"), "{}", o.stderr_text());
    assert!(!dir.join("f").exists() && !dir.join("f.part").exists());
}

#[test]
fn timestamping_sends_if_modified_since_and_sets_the_time_from_last_modified() {
    let n = nginx();
    let (name, sha) = serve("n", 2 * MIB + 1, 74);
    let served = n.www().join(&name);
    touch(&served, 1_700_000_000);
    let dir = TestDir::new("fresh-n");
    let out = dir.join("f.bin");
    let o = dir
        .ringdl()
        .args(["-N", "-x", "4", "-o"])
        .arg(&out)
        .arg(n.http_url(&name))
        .run();
    o.assert_success();
    assert_eq!(sha256_file(&out), sha);
    let t = mtime(&out).duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    assert_eq!(t, 1_700_000_000, "the output's time is not the server's Last-Modified");
    // Unchanged on the server: 304, nothing touched.
    let logged = log_lines(&name).len();
    let o = dir
        .ringdl()
        .args(["-N", "-x", "4", "--json", "-", "-o"])
        .arg(&out)
        .arg(n.http_url(&name))
        .run();
    o.assert_success();
    assert!(o.stdout_text().contains("\"not_modified\":true"), "{}", o.stdout_text());
    assert_eq!(sha256_file(&out), sha);
    let lines = log_lines(&name)[logged..].to_vec();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(status_and_bytes(&lines[0]), (304, 0), "{lines:?}");
    // Newer on the server: the new bytes and the new time.
    let sha2 = write_random_file(&served, 2 * MIB + 1, 75);
    touch(&served, 1_700_000_600);
    let o = dir
        .ringdl()
        .args(["-N", "-x", "4", "-o"])
        .arg(&out)
        .arg(n.http_url(&name))
        .run();
    o.assert_success();
    assert_eq!(sha256_file(&out), sha2);
    let t = mtime(&out).duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    assert_eq!(t, 1_700_000_600);
    let _ = fs::remove_file(&served);
}

/// `-N` over a list (`-Z`) run again: each file there is asked about (a 304 each), not refused
/// as existing (a list's check for files already there once came first).
#[test]
fn timestamping_a_list_run_again_asks_for_each_file() {
    let n = nginx();
    let names: Vec<(String, String)> = (0..2).map(|k| serve(&format!("n-list{k}"), MIB + 1, 80 + k)).collect();
    let dir = TestDir::new("fresh-n-list");
    let run = || {
        let mut c = dir.ringdl();
        c.args(["-N", "-Z", "-d", "got"]);
        for (name, _) in &names {
            c.arg(n.http_url(name));
        }
        c.run()
    };
    run().assert_success();
    let logged: Vec<usize> = names.iter().map(|(name, _)| log_lines(name).len()).collect();
    let o = run();
    o.assert_success();
    for ((name, sha), before) in names.iter().zip(logged) {
        assert_eq!(sha256_file(&dir.join("got").join(name)), *sha);
        let lines = log_lines(name)[before..].to_vec();
        assert_eq!(lines.len(), 1, "{name}: {lines:?}\n{}", o.stderr_text());
        assert_eq!(status_and_bytes(&lines[0]), (304, 0), "{lines:?}");
    }
}

#[test]
fn with_mirrors_a_304_to_the_first_request_fetches_from_none() {
    let n = nginx();
    let (name, sha) = serve("mirrors", 4 * MIB, 76);
    let dir = TestDir::new("fresh-mirrors");
    let out = dir.join("f.bin");
    let etag = dir.join("etag");
    // The same file through two origins of the same nginx (http and https).
    let urls = [n.http_url(&name), n.https_url(&name)];
    let run = |dir: &TestDir| {
        dir.ringdl()
            .args(["-x", "4", "--ca-certificate"])
            .arg(n.ca_pem())
            .arg("--etag-compare")
            .arg(&etag)
            .arg("--etag-save")
            .arg(&etag)
            .arg("-o")
            .arg(&out)
            .args(&urls)
            .run()
    };
    run(&dir).assert_success();
    assert_eq!(sha256_file(&out), sha);
    let logged = log_lines(&name).len();
    let o = run(&dir);
    o.assert_success();
    assert!(o.stderr_text().contains("not modified"), "{}", o.stderr_text());
    let lines = log_lines(&name)[logged..].to_vec();
    assert_eq!(lines.len(), 1, "only the first request, to the first mirror: {lines:?}");
    assert_eq!(status_and_bytes(&lines[0]), (304, 0));
    let _ = fs::remove_file(n.www().join(&name));
}

/// `--etag-compare` with the output gone (issue 40, "silent successes", 1): the saved
/// tag is not sent, since a 304 would leave no file — the request goes unconditional and
/// the file lands (it once got a 304, "left as it is", exit 0 and no file). Then a run
/// interrupted (SIGINT) with its `.part` and control file kept, the output gone: the same
/// `--etag-compare` run resumes the `.part` (it was once dropped on the way to the 304).
#[test]
fn etag_compare_with_the_output_gone_fetches_it_and_resumes_a_part() {
    let n = nginx();
    let (name, sha) = serve("gone", 512 * KIB + 7, 81);
    let dir = TestDir::new("fresh-gone");
    let out = dir.join("img");
    let etag = dir.join("img.etag");
    let run = |url: &str| {
        let mut c = dir.ringdl();
        c.args(["--etag-compare", "img.etag", "--etag-save", "img.etag", "-o", "img"])
            .arg(url);
        c
    };
    run(&n.http_url(&name)).run().assert_success();
    assert_eq!(sha256_file(&out), sha);
    assert!(fs::metadata(&etag).unwrap().len() > 2, "no ETag saved");
    fs::remove_file(&out).unwrap();
    let logged = log_lines(&name).len();
    let o = run(&n.http_url(&name)).run();
    let err = o.stderr_text();
    o.assert_success();
    assert!(out.exists(), "exit 0 and no file\n{err}");
    assert_eq!(sha256_file(&out), sha, "{err}");
    assert!(
        err.contains("--etag-compare img.etag not sent: img is not there") && !err.contains("not modified"),
        "{err}"
    );
    let lines = log_lines(&name)[logged..].to_vec();
    assert!(
        !lines.is_empty() && lines.iter().all(|l| status_and_bytes(l).0 == 206),
        "{lines:?}"
    );

    // Interrupted at 256 KiB/s once its control file names landed bytes.
    fs::remove_file(&out).unwrap();
    let control = dir.join("img.part.ringdl");
    let first = run(&n.slow_url(&name)).run_with(|pid| {
        let t = std::time::Instant::now();
        while !control.exists() && t.elapsed() < HANG {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        let _ = std::process::Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status();
    });
    first.assert_code(exit::INTERRUPTED);
    assert!(
        control.exists() && dir.join("img.part").exists(),
        "{}",
        first.stderr_text()
    );
    let before = n.slow_sent(&name).len();
    let o = run(&n.slow_url(&name)).run();
    let err = o.stderr_text();
    o.assert_success();
    assert!(out.exists(), "exit 0 and no file\n{err}");
    assert_eq!(sha256_file(&out), sha, "{err}");
    assert!(err.contains("resuming:"), "the .part was not resumed\n{err}");
    let sent = n.slow_sent(&name)[before..].to_vec();
    assert!(
        !sent.is_empty() && sent.iter().all(|r| r.0 > 0),
        "fetched from the start: {sent:?}\n{err}"
    );
    assert!(!control.exists() && !dir.join("img.part").exists());
    let _ = fs::remove_file(n.www().join(&name));
}

/// A 304 with `--checksum` (issue 40, "silent successes", 2): the kept file is read back
/// and checked as a fetched one is — exit 9 when it was corrupted on disk (it once ended
/// 0, `checksum_verified: null`), `checksum_verified: true` when it matches; the same with
/// `-N`. The corrupted file is left as it is.
#[test]
fn a_304_checks_the_kept_file_against_its_checksum() {
    let n = nginx();
    let (name, sha) = serve("kept-sum", 300 * KIB + 3, 82);
    let dir = TestDir::new("fresh-kept-sum");
    let out = dir.join("img");
    let sum = format!("sha-256={sha}");
    let run = |cond: &[&str]| {
        dir.ringdl()
            .args(cond)
            .args(["--checksum", &sum, "--json", "run.json", "-o", "img"])
            .arg(n.http_url(&name))
            .run()
    };
    let json = || fs::read_to_string(dir.join("run.json")).unwrap();
    let etag = ["--etag-compare", "img.etag", "--etag-save", "img.etag"];
    run(&etag).assert_success();
    // (-N fetches it once more, to give it the server's time.)
    run(&["-N"]).assert_success();
    assert_eq!(sha256_file(&out), sha);
    // Unchanged: 304, and the kept file verified.
    let o = run(&etag);
    o.assert_success();
    let j = json();
    assert!(
        j.contains("\"not_modified\":true") && j.contains("\"checksum_verified\":true"),
        "{j}\n{}",
        o.stderr_text()
    );
    // One byte changed on disk, same size and time: the 304 keeps it, the check fails.
    let mut bytes = fs::read(&out).unwrap();
    bytes[1000] ^= 0x5a;
    let t = fs::metadata(&out).unwrap().modified().unwrap();
    fs::write(&out, &bytes).unwrap();
    fs::File::options()
        .write(true)
        .open(&out)
        .unwrap()
        .set_modified(t)
        .unwrap();
    let bad = sha256_bytes(&bytes);
    for cond in [&etag[..], &["-N"][..]] {
        let logged = log_lines(&name).len();
        let o = run(cond);
        let err = o.stderr_text();
        o.assert_code(9);
        assert!(
            err.contains(&format!("sha-256 mismatch: expected {sha}, got {bad}")) && err.contains("304 Not Modified"),
            "{cond:?}: {err}"
        );
        let j = json();
        assert!(
            j.contains("\"not_modified\":true") && j.contains("\"checksum_verified\":false"),
            "{cond:?}: {j}"
        );
        let lines = log_lines(&name)[logged..].to_vec();
        assert_eq!(lines.len(), 1, "{cond:?}: {lines:?}");
        assert_eq!(status_and_bytes(&lines[0]), (304, 0), "{cond:?}: {lines:?}");
        assert_eq!(sha256_file(&out), bad, "{cond:?}: the kept file was touched");
    }
    let _ = fs::remove_file(n.www().join(&name));
}

/// A file cut since it landed (trial of issue 40): `--etag-save` and `-N` record the size
/// a file landed with, and the next `--etag-compare` / `-N` sends no condition for a file
/// of another size — a 304 would keep the cut file, exit 0. The file is fetched again,
/// exact, and the note says why. (`-N`: its time is set back to the server's, as
/// `touch -r` would, so only the size tells.)
#[test]
fn a_file_cut_since_it_landed_is_fetched_again_not_kept_by_a_304() {
    let n = nginx();
    let (name, sha) = serve("cut-since", 300 * KIB + 11, 83);
    for args in [&["--etag-compare", "img.etag", "--etag-save", "img.etag"][..], &["-N"]] {
        let dir = TestDir::new("fresh-cut-since");
        let out = dir.join("img");
        let run = || {
            let mut c = dir.ringdl();
            c.args(args).args(["-o", "img"]).arg(n.http_url(&name));
            c.run()
        };
        run().assert_success();
        assert_eq!(sha256_file(&out), sha);
        let landed = mtime(&out);
        fs::OpenOptions::new()
            .write(true)
            .open(&out)
            .unwrap()
            .set_len(1000)
            .unwrap();
        fs::File::options()
            .write(true)
            .open(&out)
            .unwrap()
            .set_modified(landed)
            .unwrap();
        let logged = log_lines(&name).len();
        let o = run();
        let err = o.stderr_text();
        o.assert_success();
        assert_eq!(sha256_file(&out), sha, "{args:?}: the cut file was kept\n{err}");
        assert!(err.contains("img is 1000 bytes, "), "{args:?}: {err}");
        let lines = log_lines(&name)[logged..].to_vec();
        assert!(
            !lines.is_empty() && lines.iter().all(|l| status_and_bytes(l).0 != 304),
            "{args:?}: {lines:?}"
        );
    }
    let _ = fs::remove_file(n.www().join(&name));
}

/// `-o -` with `--etag-compare` (issue 40 review): standard output keeps no file a 304
/// would leave, so the saved tag is not sent — the body comes on stdout, exact, and a
/// `--checksum` is checked over it (exit 9 when wrong). The tag once went out: 304,
/// nothing written, exit 0 with the checksum never looked at.
#[test]
fn etag_compare_to_standard_output_sends_no_condition() {
    let n = nginx();
    let (name, sha) = serve("stdout-etag", 200 * KIB + 5, 83);
    let dir = TestDir::new("fresh-stdout-etag");
    dir.ringdl()
        .args(["--etag-save", "e.tag", "-o", "img"])
        .arg(n.http_url(&name))
        .run()
        .assert_success();
    assert!(fs::read_to_string(dir.join("e.tag")).unwrap().starts_with('"'));
    let run = |sum: &str| {
        dir.ringdl()
            .args(["--etag-compare", "e.tag", "--checksum", sum, "-o", "-"])
            .arg(n.http_url(&name))
            .run()
    };
    let logged = log_lines(&name).len();
    let o = run(&format!("sha-256={sha}"));
    let err = o.stderr_text();
    o.assert_success();
    assert_eq!(sha256_bytes(&o.stdout), sha, "{err}");
    let lines = log_lines(&name)[logged..].to_vec();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_ne!(status_and_bytes(&lines[0]).0, 304, "{lines:?}\n{err}");
    let wrong = "0".repeat(64);
    let o = run(&format!("sha-256={wrong}"));
    o.assert_code(9);
    let _ = fs::remove_file(n.www().join(&name));
}
