//! Behaviour tests: the real `ringdl` binary against a real nginx, bytes compared by
//! SHA-256. The CLI contract they rely on is the documented one: options in
//! docs/options.md, the summary line in docs/guide/progress-and-json.md, exit codes in
//! README.md "Exit status"; the fixture is in `util/mod.rs`.
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
    cmd.arg("-v").arg("-x").arg(conns.to_string()).arg("-o").arg(&out);
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
    // On io_uring the output file is registered (IORING_REGISTER_FILES) and its writes,
    // fallocate and fsync go out with IOSQE_FIXED_FILE: -v counts them.
    if summary.contains("I/O io_uring") {
        let err = o.stderr_text();
        let n: u64 = err
            .lines()
            .find_map(|l| {
                l.strip_prefix("ringdl: ")?
                    .strip_suffix(" ops on the registered output (writes, fallocate, fsync)")?
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no registered-files count on io_uring: {err}"));
        assert!(n >= 1, "{err}");
    }
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
// Host names and certificates given with --ca-certificate (issue 10, kind 2)
//
// Each server certificate below is given itself with --ca-certificate, in two forms:
// `-ca` is self-signed with CA:TRUE (what `openssl req -x509` makes; webpki refuses it
// as an end entity, so ringdl trusts it as its own anchor) and `-ee` is self-signed
// with CA:FALSE (webpki verifies it against itself). Both must check the host name,
// the validity period and the key usage, as curl --cacert does.

mod own_certificates {
    use std::net::TcpListener;
    use std::path::PathBuf;
    use std::sync::{Arc, OnceLock};
    use std::thread;
    use std::time::Duration;

    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose, SanType, date_time_ymd,
    };

    use super::exit;
    use crate::util::{CertServer, CertServers, MIB, Output, TestDir, assert_same_bytes, exists, nginx};

    /// The two forms of a self-signed server certificate.
    const FORMS: [&str; 2] = ["ca", "ee"];

    /// How each case's certificate differs from a valid one for localhost and 127.0.0.1.
    fn case(name: &str, p: &mut CertificateParams) {
        let dns = |n: &str| SanType::DnsName(n.try_into().unwrap());
        let ip = |a: [u8; 4]| SanType::IpAddress(std::net::IpAddr::from(a));
        match name {
            "right-name" => {}
            "other-name" => p.subject_alt_names = vec![dns("other.example")],
            "dns-only" => p.subject_alt_names = vec![dns("localhost")],
            "ip-only" => p.subject_alt_names = vec![ip([127, 0, 0, 1])],
            // A dNSName that spells an address is not an iPAddress SAN (RFC 6125 §6.2.1).
            "dns-spelling-ip" => p.subject_alt_names = vec![dns("127.0.0.1")],
            "expired" => {
                p.not_before = date_time_ymd(2000, 1, 1);
                p.not_after = date_time_ymd(2001, 1, 1);
            }
            "not-yet-valid" => {
                p.not_before = date_time_ymd(2090, 1, 1);
                p.not_after = date_time_ymd(2091, 1, 1);
            }
            "client-auth-only" => p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth],
            "key-usage-with-digital-signature" => {
                p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyCertSign];
            }
            _ => unreachable!("{name}"),
        }
    }

    const CASES: &[&str] = &[
        "right-name",
        "other-name",
        "dns-only",
        "ip-only",
        "dns-spelling-ip",
        "expired",
        "not-yet-valid",
        "client-auth-only",
        "key-usage-with-digital-signature",
    ];

    /// The servers: `<case>-<form>` for every case and form, plus `issued-right` and
    /// `issued-other` (leaves for localhost/127.0.0.1 and for other.example, issued by a
    /// CA whose certificate is `ca.pem` in [`CertServers::dir`]).
    fn servers() -> &'static CertServers {
        static SERVERS: OnceLock<CertServers> = OnceLock::new();
        SERVERS.get_or_init(|| {
            let mut servers = Vec::new();
            for &name in CASES {
                for form in FORMS {
                    let mut p = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
                    p.distinguished_name.push(DnType::CommonName, name);
                    p.is_ca = if form == "ca" {
                        IsCa::Ca(BasicConstraints::Unconstrained)
                    } else {
                        IsCa::ExplicitNoCa
                    };
                    case(name, &mut p);
                    let key = KeyPair::generate().unwrap();
                    let cert = p.self_signed(&key).unwrap();
                    servers.push(CertServer {
                        label: format!("{name}-{form}"),
                        chain_pem: cert.pem(),
                        key_pem: key.serialize_pem(),
                    });
                }
            }
            let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
            ca_params
                .distinguished_name
                .push(DnType::CommonName, "ringdl host-name test CA");
            ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
            let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
            for (label, names) in [
                ("issued-right", vec!["localhost", "127.0.0.1"]),
                ("issued-other", vec!["other.example"]),
            ] {
                let mut p = CertificateParams::new(names.into_iter().map(str::to_owned).collect::<Vec<_>>()).unwrap();
                p.is_ca = IsCa::ExplicitNoCa;
                p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
                let key = KeyPair::generate().unwrap();
                let leaf = p.signed_by(&key, &ca).unwrap();
                servers.push(CertServer {
                    label: label.to_owned(),
                    chain_pem: leaf.pem() + &ca.pem(),
                    key_pem: key.serialize_pem(),
                });
            }
            let s = CertServers::start(&nginx().www(), &servers);
            std::fs::write(s.dir().join("ca.pem"), ca.pem()).unwrap();
            // Each issued leaf alone, to be given as its own anchor (no chain to a given CA).
            for label in ["issued-right", "issued-other"] {
                let chain = std::fs::read_to_string(s.dir().join(format!("{label}.pem"))).unwrap();
                let end = chain.find("-----END CERTIFICATE-----").unwrap() + "-----END CERTIFICATE-----\n".len();
                std::fs::write(s.dir().join(format!("{label}-leaf.pem")), &chain[..end]).unwrap();
            }
            s
        })
    }

    /// Downloads the 4097-byte file from server `label` at `host`, giving `anchor`
    /// (a file in [`CertServers::dir`]) with --ca-certificate.
    fn fetch(test: &str, label: &str, host: &str, anchor: &str) -> (Output, TestDir, PathBuf) {
        let s = servers();
        let file = nginx().file(4097);
        let dir = TestDir::new(test);
        let out = dir.join("out.bin");
        let o = dir
            .ringdl()
            .arg("--ca-certificate")
            .arg(s.dir().join(anchor))
            .arg("-o")
            .arg(&out)
            .arg(s.url(label, host, &file.name))
            .run();
        (o, dir, out)
    }

    /// Server `<case>-<form>` at `host`, its own certificate given: exact bytes.
    #[track_caller]
    fn accepted(case: &str, form: &str, host: &str) {
        let label = format!("{case}-{form}");
        let (o, _dir, out) = fetch(&label, &label, host, &format!("{label}.pem"));
        o.assert_success();
        assert_same_bytes(&out, nginx().file(4097));
    }

    /// Server `label` at `host` with `anchor` given: exit 4, no file, and a message
    /// holding every string of `says`.
    #[track_caller]
    fn refused(label: &str, host: &str, anchor: &str, says: &[&str]) {
        let (o, _dir, out) = fetch(label, label, host, anchor);
        o.assert_code(exit::TLS);
        let err = o.stderr_text();
        for s in says {
            assert!(
                err.contains(s),
                "{label} at {host}: the message does not say {s:?}:\n{err}"
            );
        }
        assert!(
            !exists(&out),
            "{label} at {host}: FILE created although the certificate was refused"
        );
    }

    /// Server `<case>-<form>` at `host`, its own certificate given: refused.
    #[track_caller]
    fn refused_own(case: &str, form: &str, host: &str, says: &[&str]) {
        let label = format!("{case}-{form}");
        refused(&label, host, &format!("{label}.pem"), says);
    }

    #[test]
    fn own_certificate_for_another_name_is_refused() {
        for form in FORMS {
            refused_own(
                "other-name",
                form,
                "127.0.0.1",
                &["not valid for the IP address 127.0.0.1: it names DNS:other.example"],
            );
            refused_own(
                "other-name",
                form,
                "localhost",
                &["not valid for the host name localhost: it names DNS:other.example"],
            );
        }
    }

    #[test]
    fn own_certificate_with_matching_names_downloads_exact_bytes() {
        let file = nginx().file(MIB + 1);
        for form in FORMS {
            for host in ["127.0.0.1", "localhost"] {
                accepted("right-name", form, host);
            }
            // Several connections, each verifying the certificate.
            let label = format!("right-name-{form}");
            let s = servers();
            let dir = TestDir::new(&label);
            let out = dir.join("out.bin");
            let o = dir
                .ringdl()
                .args(["-x", "4", "-v", "--ca-certificate"])
                .arg(s.dir().join(format!("{label}.pem")))
                .arg("-o")
                .arg(&out)
                .arg(s.url(&label, "localhost", &file.name))
                .run();
            o.assert_success();
            assert_same_bytes(&out, file);
            if form == "ca" {
                assert_eq!(
                    o.stderr_text().matches("trusted as its own anchor").count(),
                    1,
                    "-v says once that the certificate is its own anchor:\n{}",
                    o.stderr_text()
                );
            }
        }
    }

    #[test]
    fn ip_literal_is_checked_against_ip_sans_and_dns_names_against_dns_sans() {
        for form in FORMS {
            refused_own(
                "dns-only",
                form,
                "127.0.0.1",
                &["IP address 127.0.0.1: it names DNS:localhost"],
            );
            accepted("dns-only", form, "localhost");
            accepted("ip-only", form, "127.0.0.1");
            refused_own(
                "ip-only",
                form,
                "localhost",
                &["host name localhost: it names IP:127.0.0.1"],
            );
            refused_own(
                "dns-spelling-ip",
                form,
                "127.0.0.1",
                &["IP address 127.0.0.1: it names DNS:127.0.0.1"],
            );
        }
    }

    #[test]
    fn own_certificate_expired_is_refused() {
        for form in FORMS {
            refused_own("expired", form, "localhost", &["has expired", "2001-01-01"]);
        }
    }

    #[test]
    fn own_certificate_not_yet_valid_is_refused() {
        for form in FORMS {
            refused_own("not-yet-valid", form, "localhost", &["not valid yet", "2090-01-01"]);
        }
    }

    #[test]
    fn own_certificate_for_client_auth_only_is_refused() {
        for form in FORMS {
            refused_own(
                "client-auth-only",
                form,
                "localhost",
                &["not for TLS servers", "client authentication"],
            );
        }
    }

    /// A rustls server on 127.0.0.1 that presents `cert_pem` and only shakes hands;
    /// returns its port. nginx cannot serve this case: OpenSSL will not sign with a
    /// key whose keyUsage lacks digitalSignature. Its threads end with the test process.
    fn handshake_only_server(cert_pem: &str, key_pem: &str) -> u16 {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let cert = CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap();
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(vec![cert], key)
                .unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                let config = config.clone();
                thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
                    let mut conn = rustls::ServerConnection::new(config).unwrap();
                    while conn.is_handshaking() && conn.complete_io(&mut stream).is_ok() {}
                });
            }
        });
        port
    }

    #[test]
    fn own_certificate_whose_key_usage_forbids_signing_is_refused() {
        for form in FORMS {
            let mut p = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
            p.is_ca = if form == "ca" {
                IsCa::Ca(BasicConstraints::Unconstrained)
            } else {
                IsCa::ExplicitNoCa
            };
            p.key_usages = vec![KeyUsagePurpose::KeyCertSign];
            let key = KeyPair::generate().unwrap();
            let cert = p.self_signed(&key).unwrap();
            let port = handshake_only_server(&cert.pem(), &key.serialize_pem());
            let dir = TestDir::new(&format!("key-cert-sign-only-{form}"));
            let anchor = dir.join("anchor.pem");
            std::fs::write(&anchor, cert.pem()).unwrap();
            let out = dir.join("out.bin");
            let o = dir
                .ringdl()
                .arg("--ca-certificate")
                .arg(&anchor)
                .arg("-o")
                .arg(&out)
                .arg(format!("https://127.0.0.1:{port}/size-4097.bin"))
                .run();
            o.assert_code(exit::TLS);
            let err = o.stderr_text();
            for s in ["not for TLS servers", "digitalSignature"] {
                assert!(err.contains(s), "{form}: the message does not say {s:?}:\n{err}");
            }
            assert!(
                !exists(&out),
                "{form}: FILE created although the certificate was refused"
            );
        }
    }

    #[test]
    fn own_certificate_whose_key_usage_allows_signing_is_accepted() {
        for form in FORMS {
            accepted("key-usage-with-digital-signature", form, "localhost");
        }
    }

    /// curl's `sha256//` pin of the key of server `label`, computed as curl's manual
    /// says (openssl pkey | openssl dgst | base64): an independent check of ringdl's.
    fn pin_of(label: &str) -> String {
        let key = servers().dir().join(format!("{label}.key"));
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg("openssl pkey -in \"$1\" -pubout -outform der | openssl dgst -sha256 -binary | base64")
            .arg("sh")
            .arg(&key)
            .output()
            .expect("running openssl");
        let b64 = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        assert!(
            out.status.success() && b64.len() == 44,
            "openssl gave no pin ({}): {}",
            crate::util::INSTALL_HINT,
            String::from_utf8_lossy(&out.stderr)
        );
        format!("sha256//{b64}")
    }

    /// Downloads the 4097-byte file from server `label` at localhost with `args` before
    /// the URL.
    fn fetch_with(test: &str, label: &str, args: &[&str]) -> (Output, TestDir, PathBuf) {
        let s = servers();
        let file = nginx().file(4097);
        let dir = TestDir::new(test);
        let out = dir.join("out.bin");
        let o = dir
            .ringdl()
            .args(args)
            .arg("-o")
            .arg(&out)
            .arg(s.url(label, "localhost", &file.name))
            .run();
        (o, dir, out)
    }

    #[test]
    fn pinned_public_key_is_checked_besides_the_certificate_and_alone_with_k() {
        let s = servers();
        let right = pin_of("right-name-ee");
        let other = pin_of("other-name-ee");
        let anchor = s.dir().join("right-name-ee.pem");
        let anchor = anchor.to_str().unwrap();
        let file = nginx().file(4097);

        // The right key, alone or in a list: exact bytes; -v says what was checked.
        for pins in [right.clone(), format!("{other};{right}")] {
            let (o, _dir, out) = fetch_with(
                "pin-right",
                "right-name-ee",
                &["-v", "--ca-certificate", anchor, "--pinnedpubkey", &pins],
            );
            o.assert_success();
            assert_same_bytes(&out, file);
            let said = format!(
                "--pinnedpubkey: the server key {right} is pinned; certificate chain, validity and host name checked as well"
            );
            assert!(o.stderr_text().contains(&said), "no {said:?} in:\n{}", o.stderr_text());
        }
        // Another key: refused, and the message gives the server's pin.
        let (o, _dir, out) = fetch_with(
            "pin-wrong",
            "right-name-ee",
            &["--ca-certificate", anchor, "--pinnedpubkey", &other],
        );
        o.assert_code(exit::TLS);
        let said = format!("the server key is not one --pinnedpubkey names (the server key is {right})");
        assert!(o.stderr_text().contains(&said), "no {said:?} in:\n{}", o.stderr_text());
        assert!(!exists(&out));
        // The right key does not stand in for the host name.
        let other_anchor = s.dir().join("other-name-ee.pem");
        let (o, _dir, out) = fetch_with(
            "pin-other-name",
            "other-name-ee",
            &[
                "--ca-certificate",
                other_anchor.to_str().unwrap(),
                "--pinnedpubkey",
                &other,
            ],
        );
        o.assert_code(exit::TLS);
        assert!(
            o.stderr_text().contains("not valid for the host name localhost"),
            "{}",
            o.stderr_text()
        );
        assert!(!exists(&out));
        // With -k the pin is all that is checked, and -v says so.
        let (o, _dir, out) = fetch_with("pin-k", "other-name-ee", &["-k", "-v", "--pinnedpubkey", &other]);
        o.assert_success();
        assert_same_bytes(&out, file);
        assert!(
            o.stderr_text().contains("host name NOT checked (-k)"),
            "{}",
            o.stderr_text()
        );
        let (o, _dir, out) = fetch_with("pin-k-wrong", "other-name-ee", &["-k", "--pinnedpubkey", &right]);
        o.assert_code(exit::TLS);
        assert!(!exists(&out));
        // Not a sha256// pin: a usage error.
        let (o, _dir, _out) = fetch_with("pin-bad", "right-name-ee", &["--pinnedpubkey", "sha256//abc"]);
        o.assert_code(exit::USAGE);
    }

    #[test]
    fn issued_certificate_is_checked_for_the_host_name_under_its_ca_or_alone() {
        // The issuing CA given: the usual chain.
        for host in ["127.0.0.1", "localhost"] {
            let (o, _dir, out) = fetch("issued-right", "issued-right", host, "ca.pem");
            o.assert_success();
            assert_same_bytes(&out, nginx().file(4097));
            refused(
                "issued-other",
                host,
                "ca.pem",
                &["not valid for", "it names DNS:other.example"],
            );
        }
        // The leaf alone given (no chain to a given CA: its own anchor, as curl's partial chains).
        let (o, _dir, out) = fetch("issued-leaf", "issued-right", "localhost", "issued-right-leaf.pem");
        o.assert_success();
        assert_same_bytes(&out, nginx().file(4097));
        refused(
            "issued-other",
            "localhost",
            "issued-other-leaf.pem",
            &["not valid for the host name localhost: it names DNS:other.example"],
        );
    }
}

#[test]
fn https_to_a_plain_http_port_says_so_and_exits_4() {
    let n = nginx();
    let file = n.file(4097);
    let dir = TestDir::new("https-to-http");
    let out = dir.join("out.bin");
    let url = format!("https://127.0.0.1:{}/{}", n.http_port, file.name);
    let o = dir.ringdl().arg("-o").arg(&out).arg(&url).run();
    o.assert_code(exit::TLS);
    let err = o.stderr_text();
    let hint = format!(
        "the server answered in plain HTTP, not TLS (try http://127.0.0.1:{}/{})",
        n.http_port, file.name
    );
    assert!(err.contains(&hint), "no {hint:?} in:\n{err}");
    assert!(!err.contains("InvalidContentType"), "rustls' words leak:\n{err}");
    assert!(!exists(&out), "FILE created");
}

/// The other way round: http:// to nginx's TLS port gets `400` ("The plain HTTP request
/// was sent to HTTPS port"); the error says which URL to try (exit 5, nothing written).
#[test]
fn http_to_a_tls_port_says_to_try_https() {
    let n = nginx();
    let file = n.file(4097);
    let dir = TestDir::new("http-to-https");
    let out = dir.join("out.bin");
    let url = format!("http://127.0.0.1:{}/{}", n.https_port, file.name);
    let o = dir.ringdl().arg("-o").arg(&out).arg(&url).run();
    o.assert_code(exit::HTTP_STATUS);
    let err = o.stderr_text();
    let hint = format!(
        "HTTP 400 Bad Request for {url} (if that port speaks TLS, try https://127.0.0.1:{}/{})",
        n.https_port, file.name
    );
    assert!(err.contains(&hint), "no {hint:?} in:\n{err}");
    assert!(!exists(&out), "FILE created");
}

#[test]
fn missing_ssl_cert_file_and_dir_warn_once_and_the_other_anchors_serve() {
    let n = nginx();
    let file = n.file(MIB + 1);
    let dir = TestDir::new("ssl-cert-missing");
    let missing_file = dir.join("no-such-bundle.pem");
    let missing_dir = dir.join("no-such-dir");
    // Missing SSL_CERT_FILE and one missing SSL_CERT_DIR entry; the CA in --ca-certificate.
    let out = dir.join("out.bin");
    let o = dir
        .ringdl()
        .env("SSL_CERT_FILE", &missing_file)
        .env("SSL_CERT_DIR", &missing_dir)
        .args(["-x", "4", "--ca-certificate"])
        .arg(n.ca_pem())
        .arg("-o")
        .arg(&out)
        .arg(n.https_url(&file.name))
        .run();
    o.assert_success();
    assert_same_bytes(&out, file);
    let err = o.stderr_text();
    for name in [
        format!("warning: SSL_CERT_FILE={}", missing_file.display()),
        format!("warning: SSL_CERT_DIR {}", missing_dir.display()),
    ] {
        assert_eq!(err.matches(&name).count(), 1, "expected one {name:?} warning:\n{err}");
    }
    // Missing SSL_CERT_FILE; the CA in an SSL_CERT_DIR directory after a missing one.
    let certs = dir.join("certs");
    fs::create_dir(&certs).unwrap();
    fs::copy(n.ca_pem(), certs.join("ringdl-test-ca.pem")).unwrap();
    let out = dir.join("out2.bin");
    let dirs = std::env::join_paths([&missing_dir, &certs]).unwrap();
    let o = dir
        .ringdl()
        .env("SSL_CERT_FILE", &missing_file)
        .env("SSL_CERT_DIR", &dirs)
        .arg("-o")
        .arg(&out)
        .arg(n.https_url(&file.name))
        .run();
    o.assert_success();
    assert_same_bytes(&out, file);
    assert_eq!(
        o.stderr_text().matches("warning: SSL_CERT").count(),
        2,
        "{}",
        o.stderr_text()
    );
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

/// A `.part` left without a control file is started over, and said so ("exists:
/// starting over"; with `-c`, "no control file …: starting from zero") — except under
/// `-q`, which prints nothing on success.
#[test]
fn quiet_says_nothing_when_it_starts_a_part_over() {
    let n = nginx();
    let file = n.file(MIB + 1);
    let dir = TestDir::new("quiet-part");
    let out = dir.join("out.bin");
    for (quiet, resume) in [(false, false), (true, false), (false, true), (true, true)] {
        let _ = std::fs::remove_file(&out);
        std::fs::write(part_path(&out), vec![0x5a; 8192]).unwrap();
        let mut cmd = dir.ringdl();
        if quiet {
            cmd.arg("-q");
        }
        if resume {
            cmd.arg("-c");
        }
        let o = cmd.arg("-o").arg(&out).arg(n.http_url(&file.name)).run();
        o.assert_success();
        assert_same_bytes(&out, file);
        let err = o.stderr_text();
        let said = if resume {
            "starting from zero"
        } else {
            "exists: starting over"
        };
        if quiet {
            assert!(err.is_empty(), "-q{} printed: {err}", if resume { " -c" } else { "" });
        } else {
            assert!(err.contains(said), "{err}");
        }
    }
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

#[test]
fn ramfs_output_falls_back_to_buffered() {
    if !is_root() {
        util::skip("mounting ramfs needs root");
        return;
    }
    let dir = TestDir::new("ramfs");
    let mnt = dir.join("ramfs");
    fs::create_dir(&mnt).unwrap();
    // Unmounted at the end; the test fails if the filesystem is still busy then.
    let mut mount = match util::Mount::new("ramfs", "mode=0755", &mnt) {
        Ok(m) => m,
        Err(e) => {
            util::skip(&e);
            return;
        }
    };
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
    // (Read by a child: this process holds nothing of the filesystem it unmounts.)
    assert_eq!(fs::metadata(&out).unwrap().len(), file.size);
    assert_eq!(util::sha256_file_apart(&out), file.sha256);
    let summary = o.summary();
    assert!(
        summary.contains("engine buffered"),
        "ramfs refuses O_DIRECT, expected `engine buffered`: {summary}"
    );
    // Right after ringdl exited: nothing of it holds the filesystem.
    mount.unmount().unwrap();
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

/// Work stealing: a 4 MiB file at 256 KiB/s per connection with -x 4 is all in the first
/// request (`bytes=0-4194303`); the three other connections have nothing planned and must
/// split it. Exact bytes, the verbose log shows a split happened, and each split took the
/// work away (issue 22 §6): nginx's log of what it sent shows no byte sent twice beyond
/// [`STEAL_SLACK`]. (The rate is low so that nginx sends little ahead of what ringdl
/// reads: `limit_rate` lets a response send its first second's worth at once.)
fn idle_connections_split_running_segments(scheme: Scheme) {
    let n = nginx();
    let size = 4 * MIB;
    // A file of its own, so the log lines are this test's.
    let name = format!("steal-{scheme:?}.bin");
    let sha = write_random_file(&n.www().join(&name), size, 0x57EA1 + scheme as u64);
    let dir = TestDir::new(&format!("steal-{scheme:?}"));
    let out = dir.join("out.bin");
    let url = match scheme {
        Scheme::Http => n.slow_url(&name),
        Scheme::Https => n.slow_https_url(&name),
    };
    let o = dir
        .ringdl()
        // 4 MiB is split over four connections only with a split of 1 MiB (the default
        // 4 MiB opens one): the three idle ones must steal from the first request.
        .args(["-x", "4", "--min-split-size", "1M", "-v", "--ca-certificate"])
        .arg(n.ca_pem())
        .arg("-o")
        .arg(&out)
        .arg(url)
        .run();
    o.assert_code(0);
    assert_eq!(sha256_file(&out), sha);
    let log = o.stderr_text();
    assert!(log.contains(" takes bytes "), "no running segment was split:\n{log}");
    assert!(!log.contains("retrying"), "a retry fetches bytes again:\n{log}");
    // nginx writes a request's log line when it ends, for a victim when nginx next
    // writes to the socket ringdl closed: wait for the first request and every thief's.
    let requests = 1 + log.matches(" takes bytes ").count();
    let t = std::time::Instant::now();
    while n.slow_sent(&name).len() < requests && t.elapsed() < Duration::from_secs(10) {
        thread::sleep(Duration::from_millis(50));
    }
    thread::sleep(Duration::from_millis(300));
    // Each request's bytes as sent: [start, start + sent). A victim that was not shortened
    // sends the rest of its range, the thief's part again.
    let mut spans: Vec<(u64, u64)> = n.slow_sent(&name).iter().map(|&(a, b)| (a, a + b)).collect();
    spans.sort_unstable();
    let total: u64 = spans.iter().map(|s| s.1 - s.0).sum();
    let twice = util::sent_twice(&spans);
    eprintln!("{scheme:?}: {twice} bytes sent twice, {total} in all for {size}");
    assert!(
        twice <= STEAL_SLACK && total <= size + STEAL_SLACK,
        "{twice} bytes sent twice, {total} sent in all for {size} in {} requests (first spans {:?})\n{log}",
        spans.len(),
        &spans[..spans.len().min(12)]
    );
}

/// Bytes the splits may cost beyond the file: what nginx had written into a victim's
/// socket past the split point when ringdl stopped reading it there (up to a second's
/// worth, 256 KiB, at a response's start, where the first splits come; 272 KiB seen with
/// a 2 MiB file). A victim that goes on to its end costs megabytes.
const STEAL_SLACK: u64 = 512 << 10;

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

/// `-c` waiting for the lock of a run that then finishes the file (renames its `.part`
/// to FILE and lets go): it says the file looks complete, as `-c` over a finished file
/// does, and leaves no `.part` (it once made a new one and ended with "exists (use
/// --force to replace it)"). The other run is a shell holding the `.part`'s lock with
/// flock(1): it renames the `.part` only once ringdl has it open (waiting for the lock).
#[test]
fn c_waiting_for_a_run_that_finishes_says_the_file_looks_complete() {
    let n = nginx();
    let file = n.file(4097);
    let dir = TestDir::new("lock-finished");
    let out = dir.join("out.bin");
    let part = part_path(&out);
    let (held, go) = (dir.join("held"), dir.join("go"));
    fs::write(&part, b"the other run's finished bytes").unwrap();
    let script = "exec 9<\"$0\"; flock -x 9; : > \"$2\"; \
                  while [ ! -e \"$3\" ]; do sleep 0.01; done; mv \"$0\" \"$1\"";
    let mut other = Command::new("sh")
        .args(["-c", script])
        .args([&part, &out, &held, &go])
        .spawn()
        .expect("sh and flock(1) from util-linux");
    let t = std::time::Instant::now();
    while !exists(&held) && t.elapsed() < Duration::from_secs(10) {
        thread::sleep(Duration::from_millis(5));
    }
    assert!(exists(&held), "flock(1) did not take the lock");
    let o = dir
        .ringdl()
        .args(["-c", "-o"])
        .arg(&out)
        .arg(n.http_url(&file.name))
        .run_with(|pid| {
            // (ringdl has the `.part` open: it waits for the lock, which goes with the
            // rename.)
            let fds = format!("/proc/{pid}/fd");
            let t = std::time::Instant::now();
            while !fs::read_dir(&fds)
                .map(|d| d.flatten().any(|e| fs::read_link(e.path()).is_ok_and(|l| l == part)))
                .unwrap_or(false)
                && t.elapsed() < Duration::from_secs(10)
            {
                thread::sleep(Duration::from_millis(1));
            }
            fs::write(&go, b"").unwrap();
        });
    assert!(other.wait().unwrap().success());
    o.assert_code(exit::LOCAL_IO);
    let err = o.stderr_text();
    assert!(err.contains("there is no .part to resume: it looks complete"), "{err}");
    assert!(!exists(&part), "a .part was left: {err}");
    assert_eq!(fs::read(&out).unwrap(), b"the other run's finished bytes");
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
        .args(util::io_args())
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
    // buffers are not registered (the summary says so), and the bytes are still exact. On
    // the epoll backend nothing is ever registered (plain syscalls): there is nothing to
    // fall back from, and the summary does not mention buffers.
    let summary = o.summary();
    assert!(
        util::test_io() == Some("epoll") || summary.contains(", unregistered buffers"),
        "with 64 KiB of RLIMIT_MEMLOCK the buffers cannot be registered, yet the summary \
         does not say `unregistered buffers`: {summary}"
    );
}

/// Issue 10, kind 4: nginx with `limit_conn 2` answers a third concurrent request from
/// this client with 503. `-x 4` must not spend the segments' tries on that: it goes on
/// with the two connections the server allows, says so, and lands exact bytes.
fn capped_server(https: bool) {
    let ng = nginx();
    // 4 MiB at 512 KiB/s: the first request covers the file, the idle connections split
    // it (work stealing), and the third and fourth concurrent requests meet the cap.
    let f = ng.file(4 * MIB);
    let dir = TestDir::new(if https { "capped-https" } else { "capped-http" });
    let out = dir.join("out.bin");
    let mut cmd = dir.ringdl();
    // 4 MiB is worth four connections only with a split of 1 MiB (the default 4 MiB opens one).
    cmd.args(["-v", "-x", "4", "--min-split-size", "1M", "--max-tries", "2", "-o"])
        .arg(&out);
    if https {
        cmd.arg("--ca-certificate").arg(ng.ca_pem());
    }
    let o = cmd.arg(ng.capped_url(&f.name, https)).run();
    o.assert_success();
    assert_same_bytes(&out, f);
    let err = o.stderr_text();
    assert!(err.contains("503"), "the cap never fired (no 503 seen):\n{err}");
    // The cap is `limit_conn 2`: ringdl says 2, counting the connections whose body had
    // started before the refused request went out and that go on (not a work-stealing
    // victim finishing its shortened range, which once read "allows 3"; rare here, so
    // faults::server_allows_n_is_counted_at_the_refusal_… pins that case deterministically).
    // With a second reactor (RINGDL_TEST_THREADS), a refusal met by a helper's
    // connection is judged by the owner's connections as the owner posted them at its last
    // turn: one whose body started since is not among them, and the count may be one low
    // (seen: "reactor 1: connection 0: HTTP 503 …", then "server allows 1"; 1 to 3 runs in
    // 20 of this test at --threads 2, before this session's changes too). Low is a cap
    // learned conservatively, never one over the server's; the exact count is pinned on one
    // reactor (the io_uring and epoll passes).
    let spread = util::test_threads().is_some_and(|t| t != "1");
    let allowed: &[u64] = if spread { &[2, 1] } else { &[2] };
    let said = |n: u64| {
        let s = if n == 1 { "" } else { "s" };
        err.contains(&format!("server allows {n} connection{s}: using {n}"))
    };
    assert!(allowed.iter().any(|&n| said(n)), "{err}");
    assert!(
        !err.contains("server allows 3") && !err.contains("server allows 4"),
        "{err}"
    );
    let summary = o.summary();
    assert!(
        allowed
            .iter()
            .any(|n| summary.contains(&format!("(the server allows {n})"))),
        "{summary}"
    );
}

#[test]
fn a_server_capping_connections_per_client_lowers_concurrency_http() {
    capped_server(false);
}

#[test]
fn a_server_capping_connections_per_client_lowers_concurrency_https() {
    capped_server(true);
}

/// A per-client cap whose 503 carries `Retry-After: 60`: the extra connection is parked
/// (it waits at least that long), but the two connections the server allows keep taking
/// segments. (The Retry-After of the turned-away connection held every new request of
/// every connection for 60 s: 4 MiB took over a minute instead of about 4 s, and with
/// all connections idle after the hold their next 503s spent tries.)
#[test]
fn a_capped_connections_retry_after_does_not_hold_the_others() {
    let ng = nginx();
    let f = ng.file(4 * MIB);
    let dir = TestDir::new("capped-retry-after");
    let out = dir.join("out.bin");
    let t0 = std::time::Instant::now();
    let o = dir
        .ringdl()
        .args(["-v", "-x", "4", "--min-split-size", "1M", "-o"])
        .arg(&out)
        .arg(ng.capped_retry_after_url(&f.name))
        .timeout(Duration::from_secs(180))
        .run();
    let took = t0.elapsed();
    o.assert_success();
    assert_same_bytes(&out, f);
    let err = o.stderr_text();
    assert!(err.contains("503"), "the cap never fired (no 503 seen):\n{err}");
    // 4 MiB at 2 x 512 KiB/s is about 4 s; one 60 s hold is far beyond this bound.
    assert!(
        took < Duration::from_secs(40),
        "took {took:?}: the cap's Retry-After held the connections that download\n{err}"
    );
}

// Issue 10, kind 1: outputs that cannot take writes at offsets get bytes only in order.

/// `-x 4 -o FIFO`: the reader sees the exact file (several connections wrote blocks in
/// arrival order before), one connection, and the summary says why.
#[test]
fn a_fifo_output_gets_exact_bytes_in_order() {
    let ng = nginx();
    let f = ng.file(100 * MIB);
    let dir = TestDir::new("fifo-out");
    let fifo = dir.join("out.fifo");
    let st = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(st.success());
    let reader = {
        let fifo = fifo.clone();
        thread::spawn(move || {
            let bytes = fs::read(&fifo).expect("read the FIFO");
            (bytes.len() as u64, sha256_bytes(&bytes))
        })
    };
    let o = dir
        .ringdl()
        .args(["-x", "4", "-o"])
        .arg(&fifo)
        .arg(ng.http_url(&f.name))
        .run();
    o.assert_success();
    let (len, sha) = reader.join().expect("reader");
    assert_eq!(len, f.size);
    assert_eq!(sha, f.sha256, "the FIFO got the file's bytes out of order");
    assert!(
        o.summary().contains("1 connection (in order to the FIFO"),
        "{}",
        o.summary()
    );
    let md = fs::symlink_metadata(&fifo).expect("the FIFO is still there");
    use std::os::unix::fs::FileTypeExt;
    assert!(md.file_type().is_fifo());
    assert!(!exists(&part_path(&fifo)), "no .part beside a FIFO");
}

/// `-o /dev/stdout > file` and `-o /proc/self/fd/1 > file`, with `--force` too: the
/// bytes land through standard output, in order; /dev/stdout is never replaced (as root,
/// following the old "exists (use --force)" hint renamed the .part over it).
#[test]
fn dev_stdout_redirected_to_a_file_is_written_through_never_replaced() {
    let ng = nginx();
    let f = ng.file(100 * MIB);
    let dir = TestDir::new("dev-stdout");
    let before = fs::read_link("/dev/stdout").ok();
    for (i, (path, force)) in [("/dev/stdout", false), ("/dev/stdout", true), ("/proc/self/fd/1", true)]
        .into_iter()
        .enumerate()
    {
        let file = dir.join(format!("redirected-{i}.bin"));
        let mut cmd = Command::new(util::ringdl_bin());
        cmd.current_dir(dir.path()).args(["-x", "4", "-o", path]);
        if force {
            cmd.arg("--force");
        }
        let out = cmd
            .arg(ng.http_url(&f.name))
            .stdout(fs::File::create(&file).unwrap())
            .output()
            .expect("run ringdl");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{path} force={force}: {err}");
        assert_same_bytes(&file, f);
        assert!(err.contains("1 connection (in order to standard output)"), "{err}");
    }
    assert_eq!(fs::read_link("/dev/stdout").ok(), before, "/dev/stdout was replaced");
    assert!(!exists(Path::new("/dev/stdout.part")));
}

/// `-o /dev/null` stays a write-through sink for every connection; forced engines that
/// need a regular file answer the same way (exit 7) for splice, direct and ktls-direct.
#[test]
fn dev_null_is_a_sink_and_forced_file_engines_refuse_it_alike() {
    let ng = nginx();
    let f = ng.file(4 * MIB);
    let dir = TestDir::new("dev-null");
    let o = dir
        .ringdl()
        .args(["-x", "4", "-o", "/dev/null"])
        .arg(ng.http_url(&f.name))
        .run();
    o.assert_success();
    assert!(o.summary().contains("/dev/null"), "{}", o.summary());
    for engine in ["direct", "splice"] {
        let o = dir
            .ringdl()
            .args(["--engine", engine, "-o", "/dev/null"])
            .arg(ng.http_url(&f.name))
            .run();
        o.assert_code(exit::LOCAL_IO);
        let err = o.stderr_text();
        assert!(
            err.contains(&format!(
                "--engine {engine} needs a regular file, not the character device /dev/null"
            )),
            "{err}"
        );
    }
    assert!(!exists(Path::new("/dev/null.part")));
}

/// `-o DIR` (an existing directory), with or without `--force`: refused at once (exit 7,
/// "is a directory") before any byte is fetched, and no `DIR.part` is left. (With
/// `--force` it downloaded the whole file into `DIR.part`, failed the rename with EISDIR
/// and left the `.part` without its control file.)
#[test]
fn a_directory_output_is_refused_before_the_download_even_with_force() {
    let ng = nginx();
    let f = ng.file(4 * MIB);
    let dir = TestDir::new("dir-out");
    let target = dir.join("adir");
    fs::create_dir(&target).unwrap();
    for force in [false, true] {
        let mut cmd = dir.ringdl();
        cmd.arg("-o").arg(&target);
        if force {
            cmd.arg("--force");
        }
        let o = cmd.arg(ng.http_url(&f.name)).run();
        o.assert_code(exit::LOCAL_IO);
        let err = o.stderr_text();
        assert!(err.contains("is a directory"), "force={force}: {err}");
        assert!(
            !exists(&part_path(&target)),
            "force={force}: a .part beside the directory"
        );
        assert!(fs::metadata(&target).unwrap().is_dir());
    }
}

/// `-o FIFO` with no reader yet: SIGINT still stops ringdl (exit 8) and the FIFO stays.
/// (open(2) of a FIFO for writing blocks until a reader comes, and SIGINT/SIGTERM were
/// already blocked for the signalfd: only SIGKILL ended it.)
#[test]
fn a_fifo_without_a_reader_can_still_be_interrupted() {
    let ng = nginx();
    let f = ng.file(4 * MIB);
    let dir = TestDir::new("fifo-no-reader");
    let fifo = dir.join("out.fifo");
    let st = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(st.success());
    let o = dir
        .ringdl()
        .args(["-o"])
        .arg(&fifo)
        .arg(ng.http_url(&f.name))
        .timeout(Duration::from_secs(20))
        .run_with(|pid| {
            thread::sleep(Duration::from_millis(500));
            let _ = Command::new("sh")
                .args(["-c", "kill -INT \"$0\"", &pid.to_string()])
                .status();
        });
    o.assert_code(exit::INTERRUPTED);
    let err = o.stderr_text();
    assert!(err.contains("waiting for a reader"), "{err}");
    use std::os::unix::fs::FileTypeExt;
    assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
}

/// `-q -o FIFO` whose reader comes after 0.5 s: ringdl waits for it without saying so
/// (without `-q` it says "waiting for a reader"), and the reader gets the exact bytes.
#[test]
fn quiet_waits_for_a_fifo_s_reader_without_saying_so() {
    let ng = nginx();
    let f = ng.file(4 * MIB);
    let dir = TestDir::new("fifo-quiet");
    let fifo = dir.join("out.fifo");
    let st = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(st.success());
    let mut reader = None;
    let o = dir
        .ringdl()
        .args(["-q", "-o"])
        .arg(&fifo)
        .arg(ng.http_url(&f.name))
        .timeout(Duration::from_secs(20))
        .run_with(|_| {
            thread::sleep(Duration::from_millis(500));
            let fifo = fifo.clone();
            reader = Some(thread::spawn(move || fs::read(fifo).expect("read the FIFO")));
        });
    o.assert_success();
    let got = reader.expect("reader started").join().unwrap();
    assert_eq!(sha256_bytes(&got), f.sha256);
    assert!(o.stderr_text().is_empty(), "-q printed: {}", o.stderr_text());
}

/// stderr that is not a terminal (a log, CI) gets a progress line every 5 s, with the
/// smoothed rate: 4 MiB at 256 KiB/s per connection (nginx `limit_rate 256k`) on two
/// connections takes about 8 s, so one such line, its rate near 512 KiB/s.
#[test]
fn progress_lines_go_to_a_log_every_few_seconds() {
    let n = nginx();
    let file = n.file(4 * MIB);
    let dir = TestDir::new("progress-log");
    let out = dir.join("out.bin");
    let o = dir
        .ringdl()
        .args(["-x", "2", "--min-split-size", "2M", "-o"])
        .arg(&out)
        .arg(n.slow_url(&file.name))
        .run();
    o.assert_code(0);
    assert_same_bytes(&out, file);
    let log = o.stderr_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("% ") && l.ends_with(" conn"))
        .collect();
    assert!(!lines.is_empty(), "no progress line in an 8 s download:\n{log}");
    for l in &lines {
        assert!(l.starts_with("ringdl: ") && l.contains(" / 4.0 MiB  "), "{l}");
        let rate = l.split("  ").find(|w| w.ends_with("/s")).expect("a rate");
        let kib: f64 = match rate.trim_end_matches("/s").split_once(' ') {
            Some((v, "KiB")) => v.parse().unwrap(),
            Some((v, "MiB")) => v.parse::<f64>().unwrap() * 1024.0,
            _ => panic!("rate {rate}: {l}"),
        };
        assert!(
            (256.0..1024.0).contains(&kib),
            "rate {rate} for a 512 KiB/s download: {l}"
        );
    }
}

/// The software record layer (the default without kTLS; engine direct): after the handshake
/// each connection's records are opened in place by `ktls::soft` instead of rustls, over
/// TLS 1.3 and TLS 1.2, with several kept-alive requests per connection (sealed by the same
/// layer). The summary names it, so a silent fallback to rustls shows.
#[test]
fn https_soft_tls_records_opened_in_place() {
    let n = nginx();
    let file = n.file(100 * MIB);
    for (name, url) in [("tls13", n.https_url(&file.name)), ("tls12", n.tls12_url(&file.name))] {
        let dir = TestDir::new(&format!("soft-tls-{name}"));
        let out = dir.join("out.bin");
        let o = dir
            .ringdl()
            .env("RINGDL_SOFT_TLS", "1")
            .args(["-x", "4", "-v", "--ca-certificate"])
            .arg(n.ca_pem())
            .arg("-o")
            .arg(&out)
            .arg(&url)
            .run();
        o.assert_success();
        assert_same_bytes(&out, file);
        // Every connection's records opened in place: "on N of N", N the hand-offs `-v`
        // said (4, or more when one reconnected: at `--threads 2` a connection whose body
        // was split off is not reused, and its slot opens another).
        let summary = o.summary();
        let err = o.stderr_text();
        let handed = err
            .lines()
            .filter(|l| l.contains("TLS records opened in place (software record layer)"))
            .count();
        assert!(
            handed >= 4
                && summary.contains(&format!(
                    "TLS records opened in place on {handed} of {handed} TLS connections"
                )),
            "{name}: {summary}\n{err}"
        );
    }
}

// ---------------------------------------------------------------------------
// --sqpoll: the ring's submission queue polled by a kernel thread

/// `--sqpoll -x 4 -v`: exact bytes, and the summary says the ring runs with a SQPOLL
/// thread (seen in /proc/self/task, not just asked for), whose CPU `-v` reports. Under
/// `RINGDL_TEST_IO=epoll` the pair is a usage error instead.
fn check_sqpoll(test: &str, scheme: Scheme) {
    let n = nginx();
    let file = n.file(16 * MIB);
    let dir = TestDir::new(test);
    let out = dir.join(&file.name);
    let mut cmd = dir.ringdl();
    cmd.args(["--sqpoll", "-v", "-x", "4", "-o"]).arg(&out);
    match scheme {
        Scheme::Http => cmd.arg(n.http_url(&file.name)),
        Scheme::Https => cmd.arg("--ca-certificate").arg(n.ca_pem()).arg(n.https_url(&file.name)),
    };
    let o = cmd.run();
    if util::test_io() == Some("epoll") {
        assert_eq!(o.code(), Some(2), "--sqpoll --io epoll: {}", o.stderr_text());
        assert!(o.stderr_text().contains("--sqpoll"), "{}", o.stderr_text());
        assert!(!exists(&out));
        return;
    }
    o.assert_success();
    assert_same_bytes(&out, file);
    let summary = o.summary();
    assert!(summary.contains("I/O io_uring (SQPOLL)"), "no SQPOLL ring: {summary}");
    assert!(o.stderr_text().contains("SQPOLL thread CPU"), "{}", o.stderr_text());
}

#[test]
fn http_sqpoll_x4() {
    check_sqpoll("http_sqpoll_x4", Scheme::Http);
}

#[test]
fn https_sqpoll_x4() {
    check_sqpoll("https_sqpoll_x4", Scheme::Https);
}

/// `--sqpoll --io epoll` is a usage error (exit 2) that names the option, and writes nothing.
#[test]
fn sqpoll_with_epoll_is_a_usage_error() {
    let n = nginx();
    let file = n.file(MIB + 1);
    let dir = TestDir::new("sqpoll_with_epoll_is_a_usage_error");
    let out = dir.join(&file.name);
    let o = dir
        .ringdl()
        .args(["--io", "epoll", "--sqpoll", "-o"])
        .arg(&out)
        .arg(n.http_url(&file.name))
        .run();
    assert_eq!(o.code(), Some(2), "{}", o.stderr_text());
    assert!(o.stderr_text().contains("--sqpoll"), "{}", o.stderr_text());
    assert!(!exists(&out) && !exists(&part_path(&out)));
}
