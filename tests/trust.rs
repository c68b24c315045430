//! TLS trust and handshakes: the trust store is loaded once, only when a certificate must
//! be verified (never under `-k`), a file named by both `SSL_CERT_FILE` and `SSL_CERT_DIR`
//! (or reached by a symlink or a hard link) is read once; sessions are resumed across
//! the connections of a run and counted, but only under their origin key (host name as
//! in the URL, port): neither a session nor a kept-alive connection made for one name
//! serves another name of the same address; certificates refused for a weakness of their own
//! are said in words. Certificates are made at test time with `openssl` and served by
//! nginx ([`CertServers`]).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{CertServer, CertServers, MIB, Output, ServedFile, TestDir, assert_same_bytes, exit, nginx};

/// Runs `openssl ARGS` in `dir`; panics with its stderr when it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let o = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("running openssl: {e}"));
    assert!(
        o.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A CA made with openssl in `dir` (`ca.pem`, `ca.key`), and `ext.cnf` for server
/// certificates (localhost, 127.0.0.1; serverAuth).
fn make_ca(dir: &Path) -> PathBuf {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-subj",
            "/CN=ringdl trust test CA",
            "-days",
            "30",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
        ],
    );
    fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n",
    )
    .unwrap();
    dir.join("ca.pem")
}

/// A server certificate for `CN=cn` with a new `key` (`rsa:2048`), signed by the CA of
/// [`make_ca`] with `digest` (`-sha256`): (certificate PEM, key PEM).
fn leaf(dir: &Path, cn: &str, key: &str, digest: &str) -> (String, String) {
    let (k, csr, pem) = (format!("{cn}.key"), format!("{cn}.csr"), format!("{cn}.pem"));
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            key,
            "-nodes",
            "-keyout",
            &k,
            "-out",
            &csr,
            "-subj",
            &format!("/CN={cn}"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "30",
            digest,
            "-extfile",
            "ext.cnf",
        ],
    );
    (
        fs::read_to_string(dir.join(pem)).unwrap(),
        fs::read_to_string(dir.join(k)).unwrap(),
    )
}

/// A self-signed certificate (`CN=cn`, EC P-256) with `comment` bytes of nsComment.
fn self_signed(dir: &Path, cn: &str, comment: usize) -> String {
    let out = format!("{cn}.pem");
    let mut args = vec![
        "req".to_owned(),
        "-x509".into(),
        "-newkey".into(),
        "ec".into(),
        "-pkeyopt".into(),
        "ec_paramgen_curve:P-256".into(),
        "-nodes".into(),
        "-keyout".into(),
        format!("{cn}.key"),
        "-out".into(),
        out.clone(),
        "-subj".into(),
        format!("/CN={cn}"),
        "-days".into(),
        "30".into(),
    ];
    if comment > 0 {
        args.push("-addext".into());
        args.push(format!("nsComment={}", "x".repeat(comment)));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    openssl(dir, &args);
    fs::read_to_string(dir.join(out)).unwrap()
}

/// Each refusal kind against a real nginx: exit 4, the reason in words naming the
/// certificate, none of rustls' internal names; the same CA and file through a sound
/// certificate download fine (the refusal is the certificate's, not the setup's).
#[test]
fn tls_refusals_say_the_reason_in_words() {
    let n = nginx();
    let file = n.file(4097);
    let dir = TestDir::new("tls_refusals");
    let ca = make_ca(dir.path());
    let (good, good_key) = leaf(dir.path(), "good.test", "rsa:2048", "-sha256");
    let (small, small_key) = leaf(dir.path(), "small-key.test", "rsa:1024", "-sha256");
    let (sha1, sha1_key) = leaf(dir.path(), "sha1-signed.test", "rsa:2048", "-sha1");
    // 10 certificates of ~8 KiB after the leaf: a certificate message of ~80 KiB.
    let filler = self_signed(dir.path(), "filler", 8000);
    let huge = format!("{good}{}", filler.repeat(10));
    let server = |label: &str, chain: &str, key: &str| CertServer {
        label: label.into(),
        chain_pem: chain.into(),
        key_pem: key.into(),
    };
    // Debian's OpenSSL refuses to load SHA-1 and RSA-1024 certificates at its default
    // security level: level 0 for those two servers.
    let weak = "ssl_ciphers DEFAULT:@SECLEVEL=0;";
    let servers = CertServers::start_with(
        &n.www(),
        &[
            server("good", &good, &good_key),
            server("small", &small, &small_key),
            server("sha1", &sha1, &sha1_key),
            server("ciphers", &good, &good_key),
            server("huge", &huge, &good_key),
        ],
        &["", weak, weak, "ssl_protocols TLSv1.2; ssl_ciphers AES128-SHA;", ""],
    );
    let run = |label: &str| {
        let out = dir.join(format!("{label}.bin"));
        let o = dir
            .ringdl()
            .arg("--ca-certificate")
            .arg(&ca)
            .arg("-o")
            .arg(&out)
            .arg(servers.url(label, "localhost", &file.name))
            .run();
        (o, out)
    };
    let (o, out) = run("good");
    o.assert_success();
    assert_same_bytes(&out, file);
    for (label, words) in [
        (
            "small",
            "server key RSA-1024 is too small (certificate CN=small-key.test; ringdl accepts RSA keys of 2048 bits or more)",
        ),
        (
            "sha1",
            "the server certificate CN=sha1-signed.test is signed with SHA-1 (refused)",
        ),
        (
            "ciphers",
            "the server offers no TLS 1.2/1.3 cipher suite ringdl accepts",
        ),
        ("huge", "the server sent a certificate message larger than 64 KiB"),
    ] {
        let (o, out) = run(label);
        o.assert_code(exit::TLS);
        let err = o.stderr_text();
        assert!(err.contains(words), "{label}: {err}");
        for internal in [
            "UnsupportedSignatureAlgorithm",
            "BadSignature",
            "HandshakePayloadTooLarge",
            "[6, 9, 42",
        ] {
            assert!(!err.contains(internal), "{label}: rustls' internals printed: {err}");
        }
        assert!(err.len() < 400, "{label}: {} bytes of message: {err}", err.len());
        assert!(!out.exists(), "{label}: an output was left");
    }
}

/// `-k`: nothing of the trust store is read. The variables name a missing file and a
/// missing directory: reading them would warn (as `download::missing_ssl_cert_file…`
/// shows), and `-v` would count anchors.
#[test]
fn insecure_reads_no_trust_store() {
    let n = nginx();
    let file = n.file(MIB + 1);
    let dir = TestDir::new("trust_insecure");
    let out = dir.join("out.bin");
    let o = dir
        .ringdl()
        .env("SSL_CERT_FILE", dir.join("no-such-bundle.pem"))
        .env("SSL_CERT_DIR", dir.join("no-such-dir"))
        .args(["-k", "-v", "-x", "4", "-o"])
        .arg(&out)
        .arg(n.https_url(&file.name))
        .run();
    o.assert_success();
    assert_same_bytes(&out, file);
    let err = o.stderr_text();
    assert!(
        !err.contains("SSL_CERT") && !err.contains("trust anchor"),
        "-k read the trust store: {err}"
    );
}

/// `SSL_CERT_FILE` names a bundle that is also in `SSL_CERT_DIR`, beside a symlink and a
/// hard link to it (the `/etc/ssl/certs` layout), a copy of one of its certificates and
/// another certificate: the bundle is read once, the copy is read but adds nothing, the
/// store is loaded once for four connections, and not at all for plain http.
#[test]
fn a_store_named_by_both_variables_is_read_once() {
    let n = nginx();
    let file = n.file(4 * MIB);
    let dir = TestDir::new("trust_once");
    let pki = dir.join("pki");
    fs::create_dir(&pki).unwrap();
    let own_ca = fs::read_to_string(make_ca(&pki)).unwrap();
    let other = self_signed(&pki, "other-ca", 0);
    let certs = dir.join("certs");
    fs::create_dir(&certs).unwrap();
    let fixture_ca = fs::read_to_string(n.ca_pem()).unwrap();
    let bundle = certs.join("bundle.pem");
    fs::write(&bundle, format!("{fixture_ca}{own_ca}")).unwrap();
    std::os::unix::fs::symlink("bundle.pem", certs.join("0123abcd.0")).unwrap();
    fs::hard_link(&bundle, certs.join("hard.pem")).unwrap();
    fs::write(certs.join("copy.pem"), &fixture_ca).unwrap();
    fs::write(certs.join("other.pem"), &other).unwrap();
    let out = dir.join("out.bin");
    let o = dir
        .ringdl()
        .env("SSL_CERT_FILE", &bundle)
        .env("SSL_CERT_DIR", &certs)
        .args(["-v", "-x", "4", "--ca-certificate"])
        .arg(n.ca_pem())
        .arg("-o")
        .arg(&out)
        .arg(n.https_url(&file.name))
        .run();
    o.assert_success();
    assert_same_bytes(&out, file);
    let err = o.stderr_text();
    for line in [
        format!(
            "ringdl: SSL_CERT_FILE={}: 1 file read, 2 certificates, 2 trust anchors added",
            bundle.display()
        ),
        format!(
            "ringdl: SSL_CERT_DIR {}: 2 files read, 3 skipped (a file read already, under another name), \
             2 certificates, 1 trust anchor added",
            certs.display()
        ),
        format!(
            "ringdl: --ca-certificate {}: 1 certificate, 0 trust anchors added",
            n.ca_pem().display()
        ),
    ] {
        assert_eq!(
            err.lines().filter(|l| *l == line).count(),
            1,
            "want once: {line}\n{err}"
        );
    }
    let bundled: usize = err
        .lines()
        .find_map(|l| {
            l.strip_prefix("ringdl: ")?
                .strip_suffix(" trust anchors bundled (webpki-roots, Mozilla)")
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no bundled count: {err}"));
    assert_eq!(
        err.lines()
            .filter(|l| l.ends_with(" trust anchors in all"))
            .collect::<Vec<_>>(),
        [format!("ringdl: {} trust anchors in all", bundled + 3)],
        "{err}"
    );
    // Plain http verifies no certificate: nothing is read.
    let o = dir
        .ringdl()
        .env("SSL_CERT_FILE", &bundle)
        .env("SSL_CERT_DIR", &certs)
        .args(["-v", "--force", "-o"])
        .arg(&out)
        .arg(n.http_url(&file.name))
        .run();
    o.assert_success();
    assert!(!o.stderr_text().contains("trust anchor"), "{}", o.stderr_text());
}

/// Connections of one run share the TLS session cache: against nginx's `limit_conn 2`
/// at `-x 4`, the turned-away connections reconnect and resume a session (TLS 1.3
/// tickets from the first connections). `-v` and `--json` count full and resumed
/// handshakes, and agree.
#[test]
fn tls_sessions_resume_across_connections_and_are_counted() {
    let n = nginx();
    let file = n.file(4 * MIB);
    let dir = TestDir::new("trust_resume");
    let out = dir.join("out.bin");
    let o = dir
        .ringdl()
        // (The first request covers the 4 MiB file: the other connections open to steal
        // from it only with a split size below it.)
        .args([
            "-v",
            "-x",
            "4",
            "--min-split-size",
            "512K",
            "--json",
            "-",
            "--ca-certificate",
        ])
        .arg(n.ca_pem())
        .arg("-o")
        .arg(&out)
        .arg(n.capped_url(&file.name, true))
        .run();
    o.assert_success();
    assert_same_bytes(&out, file);
    let j: serde_json::Value =
        serde_json::from_str(o.stdout_text().trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {}", o.stdout_text()));
    let full = j["tls_full_handshakes"].as_u64().expect("tls_full_handshakes");
    let resumed = j["tls_resumed_handshakes"].as_u64().expect("tls_resumed_handshakes");
    let err = o.stderr_text();
    assert!(
        err.contains(&format!("ringdl: TLS handshakes: {full} full, {resumed} resumed")),
        "-v and --json disagree ({full} full, {resumed} resumed): {err}"
    );
    assert!(full >= 1, "no full handshake: {j}");
    assert!(
        resumed >= 1,
        "no session resumed in {} handshakes: {err}",
        full + resumed
    );
    let tls_conns = j["tls_connections"].as_u64().expect("tls_connections");
    assert!(
        full + resumed >= tls_conns,
        "{full} + {resumed} handshakes for {tls_conns} TLS connections"
    );
    // Plain http: no TLS fields.
    let o = dir
        .ringdl()
        .args(["--json", "-", "--force", "-o"])
        .arg(&out)
        .arg(n.http_url(&file.name))
        .run();
    o.assert_success();
    let j: serde_json::Value = serde_json::from_str(o.stdout_text().trim()).unwrap();
    assert!(
        j["tls_full_handshakes"].is_null() && j["tls_resumed_handshakes"].is_null(),
        "{j}"
    );
}

/// A certificate for `names` only (`DNS:…`/`IP:…` entries), signed by a CA made in
/// `dir`: (CA path, the server labelled `label` with that certificate).
pub(crate) fn server_for(dir: &Path, label: &str, names: &str) -> (PathBuf, CertServer) {
    let ca = make_ca(dir);
    fs::write(
        dir.join("ext.cnf"),
        format!("subjectAltName={names}\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n"),
    )
    .unwrap();
    let (chain_pem, key_pem) = leaf(dir, label, "rsa:2048", "-sha256");
    let server = CertServer {
        label: label.into(),
        chain_pem,
        key_pem,
    };
    (ca, server)
}

/// The run of `a`, `c` (for `localhost`) and `b` (for `127.0.0.1`) against a certificate
/// for `localhost` only: exit 4 naming the address, `a` and `c` exact in `got/`, `b`
/// never landed.
#[track_caller]
pub(crate) fn assert_only_localhost_landed(o: &Output, dir: &TestDir, a: &ServedFile, c: &ServedFile, b: &ServedFile) {
    o.assert_code(exit::TLS);
    let err = o.stderr_text();
    assert!(
        err.contains("not valid for the IP address 127.0.0.1: it names DNS:localhost"),
        "{err}"
    );
    assert_same_bytes(&dir.join("got").join(&a.name), a);
    assert_same_bytes(&dir.join("got").join(&c.name), c);
    assert!(
        !dir.join("got").join(&b.name).exists(),
        "the 127.0.0.1 file landed: {err}"
    );
}

/// A kept-alive connection belongs to the host name it was opened for, not to the address
/// it reached: with a certificate for `localhost` only and `localhost` resolving to
/// 127.0.0.1, `https://127.0.0.1:P/` after two `https://localhost:P/` files on that same
/// server makes its own handshake and fails its certificate check (exit 4, naming the
/// address), without a request on the connection the `localhost` files left open (nor a
/// resumed session, which would check no certificate). The `localhost` files land exact,
/// the second on the first one's connection (keep-alive works here: the refusal is the
/// name's).
#[test]
fn a_connection_for_one_host_name_is_never_reused_for_another() {
    let n = nginx();
    let (a, c, b) = (n.file(4097), n.file(MIB + 1), n.file(4096));
    let dir = TestDir::new("trust_reuse_by_name");
    let (ca, server) = server_for(dir.path(), "named", "DNS:localhost");
    let servers = CertServers::start(&n.www(), &[server]);
    let port = servers.port("named");
    let o = dir
        .ringdl()
        .args(["-j", "1", "-x", "1", "-Z", "-d", "got", "--resolve"])
        .arg(format!("localhost:{port}:127.0.0.1"))
        .arg("--ca-certificate")
        .arg(&ca)
        .arg(servers.url("named", "localhost", &a.name))
        .arg(servers.url("named", "localhost", &c.name))
        .arg(servers.url("named", "127.0.0.1", &b.name))
        .run();
    crate::trust::assert_only_localhost_landed(&o, &dir, a, c, b);
    let log = servers.log("named");
    let uris: Vec<&str> = log.iter().map(|(_, _, uri, _)| uri.as_str()).collect();
    assert_eq!(
        uris,
        [format!("/{}", a.name), format!("/{}", c.name)],
        "requests other than the localhost files': {log:?}"
    );
    assert_eq!(
        log[0].0, log[1].0,
        "the localhost files did not share a connection: {log:?}"
    );
}

/// A TLS session is resumed only under the host name it was made for: `a.test` and
/// `b.test` (`--resolve`d to one address, one server, one certificate naming both, nginx
/// closing each connection after its response) each make a full handshake first, whatever
/// the other left in the session cache; the same name again resumes its own session (the
/// server takes resumption: the full handshakes are the client's choice). Every file
/// lands exact.
#[test]
fn a_tls_session_is_resumed_only_for_its_own_host_name() {
    let n = nginx();
    let files = [n.file(4097), n.file(4096), n.file(MIB + 1), n.file(4095)];
    let dir = TestDir::new("trust_resume_by_name");
    let (ca, server) = server_for(dir.path(), "names", "DNS:a.test,DNS:b.test");
    let servers = CertServers::start_with(&n.www(), &[server], &["keepalive_timeout 0;"]);
    let port = servers.port("names");
    let hosts = ["a.test", "a.test", "b.test", "b.test"];
    let o = dir
        .ringdl()
        .args(["-j", "1", "-x", "1", "-Z", "-d", "got", "--resolve"])
        .arg(format!("a.test:{port}:127.0.0.1"))
        .arg("--resolve")
        .arg(format!("b.test:{port}:127.0.0.1"))
        .arg("--ca-certificate")
        .arg(&ca)
        .args(hosts.iter().zip(&files).map(|(h, f)| servers.url("names", h, &f.name)))
        .run();
    o.assert_success();
    for f in &files {
        assert_same_bytes(&dir.join("got").join(&f.name), f);
    }
    let log = servers.log("names");
    let seen: Vec<(String, bool)> = log.iter().map(|(_, r, uri, _)| (uri.clone(), *r)).collect();
    let want: Vec<(String, bool)> = files
        .iter()
        .zip([false, true, false, true])
        .map(|(f, r)| (format!("/{}", f.name), r))
        .collect();
    assert_eq!(seen, want, "(URI, session resumed) per request, in order: {log:?}");
    let mut conns: Vec<u64> = log.iter().map(|(c, ..)| *c).collect();
    conns.dedup();
    assert_eq!(conns.len(), 4, "a connection served two files: {log:?}");
}

/// A TLS session is resumed only on the port it was made for: two servers of `a.test`
/// on two ports sharing one session ticket key (each would take the other's tickets),
/// nginx closing each connection after its response: the second port's file makes a full
/// handshake; the first port again resumes (the session was there to offer).
#[test]
fn a_tls_session_is_not_offered_to_another_port() {
    let n = nginx();
    let files = [n.file(4097), n.file(4096), n.file(4095)];
    let dir = TestDir::new("trust_resume_by_port");
    let (ca, one) = server_for(dir.path(), "one", "DNS:a.test");
    let two = CertServer {
        label: "two".into(),
        ..one.clone()
    };
    let ticket_key = dir.join("ticket.key");
    crate::util::write_random_file(&ticket_key, 80, 40);
    let extra = format!(
        "keepalive_timeout 0; ssl_session_ticket_key \"{}\";",
        ticket_key.display()
    );
    let servers = CertServers::start_with(&n.www(), &[one, two], &[&extra, &extra]);
    let (p1, p2) = (servers.port("one"), servers.port("two"));
    let o = dir
        .ringdl()
        .args(["-j", "1", "-x", "1", "-Z", "-d", "got", "--resolve"])
        .arg(format!("a.test:{p1}:127.0.0.1"))
        .arg("--resolve")
        .arg(format!("a.test:{p2}:127.0.0.1"))
        .arg("--ca-certificate")
        .arg(&ca)
        .arg(servers.url("one", "a.test", &files[0].name))
        .arg(servers.url("two", "a.test", &files[1].name))
        .arg(servers.url("one", "a.test", &files[2].name))
        .run();
    o.assert_success();
    for f in &files {
        assert_same_bytes(&dir.join("got").join(&f.name), f);
    }
    let resumed = |label: &str| -> Vec<(String, bool)> {
        servers.log(label).into_iter().map(|(_, r, uri, _)| (uri, r)).collect()
    };
    assert_eq!(
        resumed("one"),
        [
            (format!("/{}", files[0].name), false),
            (format!("/{}", files[2].name), true)
        ]
    );
    assert_eq!(
        resumed("two"),
        [(format!("/{}", files[1].name), false)],
        "a session of port {p1} resumed on {p2}"
    );
}
