//! Behaviour tests: the real `ringdl` binary against a real nginx, bytes compared by
//! SHA-256. The CLI contract they rely on (options, summary line, exit codes) is the
//! one in the README; the fixture is in `util/mod.rs`.
//!
//! Tests named `harness_*` check the fixture itself and pass without `ringdl`.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::Duration;

use crate::util::{
    self, MIB, TestCommand, TestDir, assert_same_bytes, chmod, exists, exit, fs_type, have_program, http_get_raw,
    is_root, nginx, part_path, sha256_bytes, sha256_file, surely_supports_o_direct, write_random_file,
};

#[derive(Clone, Copy, Debug)]
enum Scheme {
    Http,
    Https,
}

/// Asserts what `--engine auto` must report for an output in `dir`: `direct` where
/// O_DIRECT is known to work, otherwise either engine.
#[track_caller]
fn assert_auto_engine(summary: &str, dir: &Path) {
    if surely_supports_o_direct(dir) {
        assert!(
            summary.contains("engine direct"),
            "output on {:?} accepts O_DIRECT, expected `engine direct`: {summary}",
            fs_type(dir)
        );
    }
}

/// Downloads the served file of `size` bytes with `-x conns` into a fresh dir and
/// checks bytes, summary, engine and that no `.part` is left.
fn check_download(test: &str, scheme: Scheme, size: u64, conns: u32) {
    let n = nginx();
    let file = n.file(size);
    let dir = TestDir::new(test);
    let out = dir.join(&file.name);
    let mut cmd = dir.ringdl();
    cmd.arg("-x").arg(conns.to_string()).arg("-o").arg(&out);
    match scheme {
        Scheme::Http => cmd.arg(n.http_url(&file.name)),
        Scheme::Https => cmd.arg("--ca-certificate").arg(n.ca_pem()).arg(n.https_url(&file.name)),
    };
    let o = cmd.run();
    o.assert_success();
    assert_same_bytes(&out, file);
    assert!(!exists(&part_path(&out)), "FILE.part left after success");
    let summary = o.summary();
    assert!(
        summary.starts_with(&format!("ringdl: done: {size} bytes")),
        "summary does not start with the byte count {size}: {summary}"
    );
    match scheme {
        Scheme::Http => assert!(summary.contains("plain"), "HTTP summary lacks `plain`: {summary}"),
        Scheme::Https => assert!(!summary.contains(", plain,"), "HTTPS summary says plain: {summary}"),
    }
    assert_auto_engine(&summary, dir.path());
}

/// One `#[test]` per (scheme, size, connections) so failures name the case and the
/// cases run in parallel.
macro_rules! download_tests {
    ($($name:ident: $scheme:ident, $size:expr, $conns:expr;)*) => {
        $(
            #[test]
            fn $name() {
                check_download(stringify!($name), Scheme::$scheme, $size, $conns);
            }
        )*
    };
}

// Every size over both schemes; connections rotate through 1, 4 and 16 (16 on a
// 1-byte file: more connections than bytes).
download_tests! {
    http_0_bytes_x1: Http, 0, 1;
    http_1_byte_x4: Http, 1, 4;
    http_4095_bytes_x16: Http, 4095, 16;
    http_4096_bytes_x1: Http, 4096, 1;
    http_4097_bytes_x4: Http, 4097, 4;
    http_1mib_plus_1_x16: Http, MIB + 1, 16;
    http_100mib_x4: Http, 100 * MIB, 4;
    https_0_bytes_x4: Https, 0, 4;
    https_1_byte_x16: Https, 1, 16;
    https_4095_bytes_x1: Https, 4095, 1;
    https_4096_bytes_x16: Https, 4096, 16;
    https_4097_bytes_x1: Https, 4097, 1;
    https_1mib_plus_1_x4: Https, MIB + 1, 4;
    https_100mib_x1: Https, 100 * MIB, 1;
    https_100mib_x4: Https, 100 * MIB, 4;
    https_100mib_x16: Https, 100 * MIB, 16;
}

// ---------------------------------------------------------------------------
// The harness itself (these pass without ringdl)

#[test]
fn harness_nginx_serves_exact_bytes() {
    let n = nginx();
    for size in [0, 4097, MIB + 1] {
        let file = n.file(size);
        let r = http_get_raw(n.http_port, &format!("/{}", file.name), &[]);
        assert_eq!(r.status, 200, "{}", file.name);
        assert_eq!(r.headers.get("content-length"), Some(&size.to_string()));
        assert_eq!(sha256_bytes(&r.body), file.sha256, "{}", file.name);
        assert_eq!(sha256_file(&n.www().join(&file.name)), file.sha256, "document root");
    }
    let file = n.file(4097);
    let range = [("Range", "bytes=4096-")];
    let r = http_get_raw(n.http_port, &format!("/{}", file.name), &range);
    assert_eq!(r.status, 206, "ranges work on the HTTP server");
    assert_eq!(r.body.len(), 1);
    let r = http_get_raw(n.norange_port, &format!("/{}", file.name), &range);
    assert_eq!(r.status, 200, "the max_ranges 0 server ignores Range");
    assert_eq!(sha256_bytes(&r.body), file.sha256);
    let r = http_get_raw(n.http_port, "/no-such-file.bin", &[]);
    assert_eq!(r.status, 404);
}

#[test]
fn harness_nginx_serves_https_to_curl() {
    assert!(have_program("curl"), "curl not found: {}", util::INSTALL_HINT);
    let n = nginx();
    let file = n.file(MIB + 1);
    let dir = TestDir::new("harness-curl");
    let mut urls = vec![
        n.https_url(&file.name),
        n.https_url_host("localhost", &file.name),
        n.tls12_url(&file.name),
    ];
    if n.ipv6 {
        urls.push(n.https_url_host("[::1]", &file.name));
    }
    for (i, url) in urls.iter().enumerate() {
        let out = dir.join(format!("curl-{i}.bin"));
        TestCommand::new("curl")
            .args(["-sS", "--fail", "--cacert"])
            .arg(n.ca_pem())
            .arg("-o")
            .arg(&out)
            .arg(url)
            .run()
            .assert_success();
        assert_same_bytes(&out, file);
    }
    // Without the CA the certificate is untrusted (curl exit 60): the exit-4 test
    // below means something.
    TestCommand::new("curl")
        .args(["-sS", "-o", "/dev/null"])
        .arg(n.https_url(&file.name))
        .scrub_env()
        .run()
        .assert_code(60);
}

#[test]
fn harness_random_files_are_deterministic() {
    let dir = TestDir::new("harness-random");
    let (a, b, c) = (dir.join("a"), dir.join("b"), dir.join("c"));
    let sha_a = write_random_file(&a, 3 * MIB + 5, 7);
    assert_eq!(write_random_file(&b, 3 * MIB + 5, 7), sha_a);
    assert_ne!(write_random_file(&c, 3 * MIB + 5, 8), sha_a);
    assert_eq!(fs::metadata(&a).unwrap().len(), 3 * MIB + 5);
    assert_eq!(sha256_file(&a), sha_a);
}

// ---------------------------------------------------------------------------
// Servers and trust

#[test]
fn ranges_refused_server_gives_exact_bytes() {
    let n = nginx();
    let file = n.file(4 * MIB);
    let dir = TestDir::new("norange");
    let out = dir.join("out.bin");
    let o = dir
        .ringdl()
        .args(["-x", "4", "-o"])
        .arg(&out)
        .arg(n.norange_url(&file.name))
        .run();
    o.assert_success();
    assert_same_bytes(&out, file);
    o.summary();
}

#[test]
fn http_404_exits_5_and_writes_no_file() {
    let n = nginx();
    let dir = TestDir::new("404");
    let out = dir.join("missing.bin");
    let o = dir.ringdl().arg("-o").arg(&out).arg(n.http_url("missing.bin")).run();
    o.assert_code(exit::HTTP_STATUS);
    assert!(!exists(&out), "FILE created for a 404");
    let part = part_path(&out);
    if exists(&part) {
        assert_eq!(
            fs::metadata(&part).unwrap().len(),
            0,
            "FILE.part holds bytes after a 404"
        );
    }
    assert!(o.summary_lines().is_empty(), "a failure printed a success summary");
}

#[test]
fn https_404_to_stdout_exits_5_and_prints_no_body() {
    let n = nginx();
    let dir = TestDir::new("404-stdout");
    let o = dir
        .ringdl()
        .args(["-o", "-", "--ca-certificate"])
        .arg(n.ca_pem())
        .arg(n.https_url("missing.bin"))
        .run();
    o.assert_code(exit::HTTP_STATUS);
    assert!(o.stdout.is_empty(), "the 404 body went to stdout");
}

#[test]
fn https_untrusted_certificate_exits_4() {
    let n = nginx();
    let file = n.file(4097);
    let dir = TestDir::new("untrusted");
    let out = dir.join("out.bin");
    let o = dir.ringdl().arg("-o").arg(&out).arg(n.https_url(&file.name)).run();
    o.assert_code(exit::TLS);
    assert!(!exists(&out), "FILE created although the certificate is untrusted");
}

#[test]
fn https_ca_certificate_by_name_and_ipv6() {
    let n = nginx();
    let file = n.file(MIB + 1);
    let dir = TestDir::new("ca-cert");
    let mut hosts = vec!["localhost"];
    if n.ipv6 {
        hosts.push("[::1]");
    }
    for (i, host) in hosts.into_iter().enumerate() {
        let out = dir.join(format!("out-{i}.bin"));
        let o = dir
            .ringdl()
            .args(["-x", "4", "--ca-certificate"])
            .arg(n.ca_pem())
            .arg("-o")
            .arg(&out)
            .arg(n.https_url_host(host, &file.name))
            .run();
        o.assert_success();
        assert_same_bytes(&out, file);
    }
}

#[test]
fn https_tls12_only_server() {
    let n = nginx();
    let file = n.file(MIB + 1);
    let dir = TestDir::new("tls12");
    let out = dir.join("out.bin");
    dir.ringdl()
        .args(["-x", "4", "--ca-certificate"])
        .arg(n.ca_pem())
        .arg("-o")
        .arg(&out)
        .arg(n.tls12_url(&file.name))
        .run()
        .assert_success();
    assert_same_bytes(&out, file);
}

#[test]
fn https_insecure_succeeds_with_a_warning() {
    let n = nginx();
    let file = n.file(4097);
    let dir = TestDir::new("insecure");
    let out = dir.join("out.bin");
    let o = dir
        .ringdl()
        .arg("-k")
        .arg("-o")
        .arg(&out)
        .arg(n.https_url(&file.name))
        .run();
    o.assert_success();
    assert_same_bytes(&out, file);
    assert!(
        o.stderr_text().to_lowercase().contains("warn"),
        "-k printed no warning:\n{}",
        o.stderr_text()
    );
}

#[test]
fn ssl_cert_file_env_is_trusted() {
    let n = nginx();
    let file = n.file(4097);
    let dir = TestDir::new("ssl-cert-file");
    let out = dir.join("out.bin");
    dir.ringdl()
        .env("SSL_CERT_FILE", n.ca_pem())
        .arg("-o")
        .arg(&out)
        .arg(n.https_url(&file.name))
        .run()
        .assert_success();
    assert_same_bytes(&out, file);
}

#[test]
fn ssl_cert_dir_env_is_trusted() {
    let n = nginx();
    let file = n.file(4097);
    let dir = TestDir::new("ssl-cert-dir");
    let certs = dir.join("certs");
    fs::create_dir(&certs).unwrap();
    fs::copy(n.ca_pem(), certs.join("ringdl-test-ca.pem")).unwrap();
    // Also the OpenSSL `<subject hash>.0` name, for implementations that look up by hash.
    if let Ok(o) = Command::new("openssl")
        .args(["x509", "-noout", "-subject_hash", "-in"])
        .arg(n.ca_pem())
        .output()
    {
        let hash = String::from_utf8_lossy(&o.stdout).trim().to_owned();
        if o.status.success() && !hash.is_empty() {
            fs::copy(n.ca_pem(), certs.join(format!("{hash}.0"))).unwrap();
        }
    }
    let out = dir.join("out.bin");
    dir.ringdl()
        .env("SSL_CERT_DIR", &certs)
        .arg("-o")
        .arg(&out)
        .arg(n.https_url(&file.name))
        .run()
        .assert_success();
    assert_same_bytes(&out, file);
}

// ---------------------------------------------------------------------------
// Output handling

#[test]
fn stdout_output_gives_exact_bytes() {
    let n = nginx();
    let file = n.file(4 * MIB);
    let dir = TestDir::new("stdout");
    let o = dir
        .ringdl()
        .args(["-x", "4", "-o", "-", "--ca-certificate"])
        .arg(n.ca_pem())
        .arg(n.https_url(&file.name))
        .run();
    o.assert_success();
    assert_eq!(o.stdout.len() as u64, file.size, "bytes on stdout");
    assert_eq!(sha256_bytes(&o.stdout), file.sha256, "SHA-256 of stdout");
    assert!(!exists(&dir.join("-")), "`-o -` created a file named -");
    let summary = o.summary();
    assert!(
        summary.contains(" 1 connection"),
        "`-o -` must use 1 connection: {summary}"
    );
}

#[test]
fn existing_output_without_force_exits_7_and_is_untouched() {
    let n = nginx();
    let file = n.file(4097);
    let dir = TestDir::new("exists");
    let out = dir.join("out.bin");
    fs::write(&out, b"keep me\n").unwrap();
    let o = dir.ringdl().arg("-o").arg(&out).arg(n.http_url(&file.name)).run();
    o.assert_code(exit::LOCAL_IO);
    assert_eq!(fs::read(&out).unwrap(), b"keep me\n", "FILE changed without --force");
    assert!(!exists(&part_path(&out)), "a .part was created for an existing FILE");
    // -c on a finished download says so.
    let o = dir
        .ringdl()
        .args(["-c", "-o"])
        .arg(&out)
        .arg(n.http_url(&file.name))
        .run();
    o.assert_code(exit::LOCAL_IO);
    assert!(o.stderr_text().contains("it looks complete"), "{}", o.stderr_text());
}

#[test]
fn force_replaces_existing_output() {
    let n = nginx();
    let file = n.file(MIB + 1);
    let dir = TestDir::new("force");
    let out = dir.join("out.bin");
    fs::write(&out, vec![b'x'; 3 * MIB as usize]).unwrap();
    dir.ringdl()
        .args(["--force", "-o"])
        .arg(&out)
        .arg(n.http_url(&file.name))
        .run()
        .assert_success();
    assert_same_bytes(&out, file);
}

#[test]
fn default_output_name_is_last_path_segment_in_cwd() {
    let n = nginx();
    let file = n.file(4097);
    let dir = TestDir::new("default-name");
    dir.ringdl().arg(n.http_url(&file.name)).run().assert_success();
    assert_same_bytes(&dir.join(&file.name), file);
}

#[test]
fn default_output_name_ignores_the_query() {
    let n = nginx();
    let file = n.file(4097);
    let dir = TestDir::new("default-name-query");
    dir.ringdl()
        .arg(n.http_url(&format!("{}?token=abc", file.name)))
        .run()
        .assert_success();
    assert_same_bytes(&dir.join(&file.name), file);
}

#[test]
fn quiet_prints_no_summary() {
    let n = nginx();
    let file = n.file(4097);
    let dir = TestDir::new("quiet");
    let out = dir.join("out.bin");
    let o = dir
        .ringdl()
        .arg("-q")
        .arg("-o")
        .arg(&out)
        .arg(n.http_url(&file.name))
        .run();
    o.assert_success();
    assert_same_bytes(&out, file);
    assert!(
        o.summary_lines().is_empty(),
        "-q printed a summary:\n{}",
        o.stderr_text()
    );
}

// ---------------------------------------------------------------------------
// Engines

#[test]
fn engine_buffered_when_forced() {
    let n = nginx();
    let file = n.file(MIB + 1);
    let dir = TestDir::new("engine-buffered");
    let out = dir.join("out.bin");
    let o = dir
        .ringdl()
        .args(["--engine", "buffered", "-x", "4", "--ca-certificate"])
        .arg(n.ca_pem())
        .arg("-o")
        .arg(&out)
        .arg(n.https_url(&file.name))
        .run();
    o.assert_success();
    assert_same_bytes(&out, file);
    let summary = o.summary();
    assert!(summary.contains("engine buffered"), "{summary}");
}

#[test]
fn engine_direct_when_forced_on_a_direct_capable_fs() {
    let dir = TestDir::new("engine-direct");
    if !surely_supports_o_direct(dir.path()) {
        util::skip(&format!(
            "{} is on {:?}, not ext4/xfs/btrfs",
            dir.path().display(),
            fs_type(dir.path())
        ));
        return;
    }
    let n = nginx();
    let file = n.file(4 * MIB);
    let out = dir.join("out.bin");
    let o = dir
        .ringdl()
        .args(["--engine", "direct", "-x", "4", "-o"])
        .arg(&out)
        .arg(n.http_url(&file.name))
        .run();
    o.assert_success();
    assert_same_bytes(&out, file);
    let summary = o.summary();
    assert!(summary.contains("engine direct"), "{summary}");
}

/// Unmounts on drop, so a failing test leaves no mount behind.
struct Mount<'a>(&'a Path);

impl Drop for Mount<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

#[test]
fn ramfs_output_falls_back_to_buffered() {
    if !is_root() {
        util::skip("mounting ramfs needs root");
        return;
    }
    let dir = TestDir::new("ramfs");
    let mnt = dir.join("ramfs");
    fs::create_dir(&mnt).unwrap();
    match Command::new("mount").args(["-t", "ramfs", "ramfs"]).arg(&mnt).status() {
        Ok(s) if s.success() => {}
        other => {
            util::skip(&format!("mount -t ramfs failed: {other:?}"));
            return;
        }
    }
    let _mount = Mount(&mnt);
    assert_eq!(fs_type(&mnt).as_deref(), Some("ramfs"));
    let n = nginx();
    let file = n.file(MIB + 1);
    let out = mnt.join("out.bin");
    let o = dir
        .ringdl()
        .args(["-x", "4", "-o"])
        .arg(&out)
        .arg(n.http_url(&file.name))
        .run();
    o.assert_success();
    assert_same_bytes(&out, file);
    let summary = o.summary();
    assert!(
        summary.contains("engine buffered"),
        "ramfs refuses O_DIRECT, expected `engine buffered`: {summary}"
    );
}

// ---------------------------------------------------------------------------
// Errors and signals

#[test]
fn usage_errors_exit_2() {
    let url = "http://127.0.0.1:9/x.bin";
    let cases: &[&[&str]] = &[
        &[],
        &["-x", "0", url],
        &["-x", "many", url],
        &["--no-such-option", url],
        &["--engine", "warp", url],
        &["-o"],
    ];
    let dir = TestDir::new("usage");
    for args in cases {
        dir.ringdl().args(*args).run().assert_code(exit::USAGE);
    }
}

#[test]
fn help_and_version_exit_0() {
    let dir = TestDir::new("help");
    for flag in ["-h", "--help"] {
        let o = dir.ringdl().arg(flag).run();
        o.assert_success();
        assert!(
            o.stdout_text().contains("--connections"),
            "{flag} does not list options"
        );
    }
    for flag in ["-V", "--version"] {
        let o = dir.ringdl().arg(flag).run();
        o.assert_success();
        assert!(o.stdout_text().contains("ringdl"), "{flag}: {}", o.stdout_text());
    }
}

#[test]
fn connection_refused_exits_3() {
    let port = util::free_port(false);
    let dir = TestDir::new("refused");
    let out = dir.join("out.bin");
    dir.ringdl()
        .arg("-o")
        .arg(&out)
        .arg(format!("http://127.0.0.1:{port}/x.bin"))
        .run()
        .assert_code(exit::NETWORK);
    assert!(!exists(&out));
}

#[test]
fn unresolvable_host_exits_3() {
    // RFC 6761: `.invalid` never resolves.
    let dir = TestDir::new("nxdomain");
    dir.ringdl()
        .args(["-o", "out.bin", "http://ringdl-test.invalid/x.bin"])
        .run()
        .assert_code(exit::NETWORK);
}

/// Work stealing: a 4 MiB file at 4 MiB/s per connection with -x 4 is all in the first
/// request (`bytes=0-4194303`); the three other connections have nothing planned and must
/// split it. Exact bytes, and the verbose log shows a split happened.
fn idle_connections_split_running_segments(scheme: Scheme) {
    let n = nginx();
    let file = n.file(4 * MIB);
    let dir = TestDir::new(&format!("steal-{scheme:?}"));
    let out = dir.join("out.bin");
    let url = match scheme {
        Scheme::Http => n.paced_url(&file.name),
        Scheme::Https => n.paced_https_url(&file.name),
    };
    let o = dir
        .ringdl()
        .args(["-x", "4", "-v", "--ca-certificate"])
        .arg(n.ca_pem())
        .arg("-o")
        .arg(&out)
        .arg(url)
        .run();
    o.assert_code(0);
    assert_same_bytes(&out, file);
    let log = o.stderr_text();
    assert!(log.contains(" takes bytes "), "no running segment was split:\n{log}");
}

#[test]
fn idle_connections_split_running_segments_http() {
    idle_connections_split_running_segments(Scheme::Http);
}

#[test]
fn idle_connections_split_running_segments_https() {
    idle_connections_split_running_segments(Scheme::Https);
}

#[test]
fn a_second_run_on_the_same_output_stops_and_the_first_lands_exact_bytes() {
    let n = nginx();
    let file = n.file(4 * MIB);
    let dir = TestDir::new("lock");
    let out = dir.join("out.bin");
    let second = std::cell::RefCell::new(None);
    // 4 MiB at 256 KiB/s per connection: ~4 s with -x 4; the second run starts after 0.5 s.
    let first = dir
        .ringdl()
        .args(["-x", "4", "-o"])
        .arg(&out)
        .arg(n.slow_url(&file.name))
        .run_with(|_| {
            thread::sleep(Duration::from_millis(500));
            *second.borrow_mut() = Some(
                dir.ringdl()
                    .args(["-x", "4", "-o"])
                    .arg(&out)
                    .arg(n.http_url(&file.name))
                    .run(),
            );
        });
    let second = second.into_inner().expect("second run");
    second.assert_code(exit::LOCAL_IO);
    let err = second.stderr_text();
    assert!(err.contains("being written by another ringdl"), "{err}");
    assert!(
        !err.contains("starting over"),
        "the second run touched the .part: {err}"
    );
    first.assert_code(0);
    assert_same_bytes(&out, file);
}

#[test]
fn a_refused_engine_leaves_an_existing_partial_download_alone() {
    let n = nginx();
    let file = n.file(4097);
    let dir = TestDir::new("refused-engine");
    let out = dir.join("out.bin");
    let part = part_path(&out);
    let control = format!("{}.ringdl", part.display());
    fs::write(&part, b"partial bytes").unwrap();
    fs::write(&control, b"not parsed: the run stops first").unwrap();
    // ktls-direct is for https: a usage error, before the output is touched.
    let o = dir
        .ringdl()
        .args(["--engine", "ktls-direct", "-o"])
        .arg(&out)
        .arg(n.http_url(&file.name))
        .run();
    o.assert_code(exit::USAGE);
    assert_eq!(fs::read(&part).unwrap(), b"partial bytes", ".part changed");
    assert!(exists(Path::new(&control)), "control file removed");
}

#[test]
fn sigint_exits_8_and_leaves_no_file() {
    let n = nginx();
    let file = n.file(4 * MIB);
    let dir = TestDir::new("sigint");
    let out = dir.join("out.bin");
    // 4 MiB at 256 KiB/s per connection: about 4 s with -x 4, interrupted after 1 s.
    let o = dir
        .ringdl()
        .args(["-x", "4", "-o"])
        .arg(&out)
        .arg(n.slow_url(&file.name))
        .run_with(|pid| {
            thread::sleep(Duration::from_secs(1));
            // The shell's builtin kill: /bin/kill (procps) may be absent.
            let _ = Command::new("sh")
                .args(["-c", "kill -INT \"$0\"", &pid.to_string()])
                .status();
        });
    o.assert_code(exit::INTERRUPTED);
    assert!(!exists(&out), "FILE exists after an interrupted download");
}

// ---------------------------------------------------------------------------
// Ordinary users

#[test]
fn ordinary_user_with_64k_memlock_downloads_over_https() {
    if !have_program("prlimit") {
        util::skip(&format!("prlimit (util-linux) missing; {}", util::INSTALL_HINT));
        return;
    }
    if is_root() && !have_program("setpriv") {
        util::skip(&format!("setpriv (util-linux) missing; {}", util::INSTALL_HINT));
        return;
    }
    let n = nginx();
    let file = n.file(4 * MIB);
    let dir = TestDir::new("nobody");
    // nobody must reach the binary, the CA and a writable output dir.
    chmod(dir.path(), 0o755);
    let bin = dir.join("ringdl");
    fs::copy(util::ringdl_bin(), &bin).unwrap();
    chmod(&bin, 0o755);
    let ca = dir.join("ca.pem");
    fs::copy(n.ca_pem(), &ca).unwrap();
    chmod(&ca, 0o644);
    let out_dir = dir.join("out");
    fs::create_dir(&out_dir).unwrap();
    chmod(&out_dir, 0o777);
    let out = out_dir.join("out.bin");

    // Many distributions give ordinary users 64 KiB of RLIMIT_MEMLOCK: registered
    // buffers fail and ringdl must fall back, not fail.
    let mut cmd = TestCommand::new("prlimit");
    cmd.arg("--memlock=65536:65536").arg("--");
    if is_root() {
        cmd.args(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
    }
    let o = cmd
        .arg(&bin)
        .args(["-x", "4", "--ca-certificate"])
        .arg(&ca)
        .arg("-o")
        .arg(&out)
        .arg(n.https_url(&file.name))
        .current_dir(&out_dir)
        .scrub_env()
        .run();
    o.assert_success();
    assert_same_bytes(&out, file);
    // The fallback this test is named for: 64 KiB cannot pin the write pool, so the
    // buffers are not registered (the summary says so), and the bytes are still exact.
    let summary = o.summary();
    assert!(
        summary.contains(", unregistered buffers"),
        "with 64 KiB of RLIMIT_MEMLOCK the buffers cannot be registered, yet the summary \
         does not say `unregistered buffers`: {summary}"
    );
}
