//! Reach: ringdl on hosts where one address family does not work (Happy Eyeballs-lite,
//! RFC 8305), with `--resolve` giving a name both families. The servers are the fixture's
//! nginx ports that listen on one family only; the bytes are compared by SHA-256.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use crate::util::{MIB, TestDir, assert_same_bytes, nginx, skip};

/// Downloads `url` with `--resolve localhost:PORT:ADDRS` and `-v`; returns stderr.
fn fetch(dir: &TestDir, name: &str, url: &str, resolve: &str, conns: &str, extra: &[&str]) -> String {
    let n = nginx();
    let out = dir.join(name);
    let o = dir
        .ringdl()
        .args(["-v", "-x", conns, "--resolve", resolve, "--ca-certificate"])
        .arg(n.ca_pem())
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg(url)
        .run();
    o.assert_success();
    o.summary();
    assert_same_bytes(&out, n.file(4 * MIB));
    o.stderr_text()
}

/// Lines of `text` that contain `needle`.
fn count(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

#[test]
fn ipv6_only_server_a_name_resolving_ipv4_first_falls_back_to_ipv6() {
    let n = nginx();
    if !n.ipv6 {
        skip("no IPv6 on loopback");
        return;
    }
    let p = n.v6only_port;
    let file = n.file(4 * MIB);
    let dir = TestDir::new("reach-v6only");
    let url = format!("http://localhost:{p}/{}", file.name);
    for conns in ["1", "4"] {
        let err = fetch(
            &dir,
            &format!("x{conns}.bin"),
            &url,
            &format!("localhost:{p}:127.0.0.1,::1"),
            conns,
            &[],
        );
        assert!(
            err.contains("localhost is 127.0.0.1, ::1 (--resolve)"),
            "-v names the addresses: {err}"
        );
        assert!(
            err.lines()
                .any(|l| l.contains(&format!("connect to 127.0.0.1:{p}: Connection refused"))
                    && l.ends_with(&format!("; trying IPv6 next: [::1]:{p}"))),
            "-x {conns}: the refused IPv4 connect names the IPv6 address tried next: {err}"
        );
        assert!(
            err.contains(&format!(
                "connected to [::1]:{p} (IPv6): the other connections go there too"
            )),
            "-x {conns}: {err}"
        );
        // The family that failed is paid for once, not once per connection.
        assert_eq!(
            count(&err, &format!("connect to 127.0.0.1:{p}")),
            1,
            "-x {conns}: IPv4 tried more than once: {err}"
        );
    }
}

#[test]
fn ipv4_only_https_server_a_name_resolving_ipv6_first_falls_back_to_ipv4() {
    let n = nginx();
    if !n.ipv6 {
        skip("no IPv6 on loopback");
        return;
    }
    let p = n.v4only_port;
    let file = n.file(4 * MIB);
    let dir = TestDir::new("reach-v4only");
    let url = format!("https://localhost:{p}/{}", file.name);
    let err = fetch(
        &dir,
        "x4.bin",
        &url,
        &format!("localhost:{p}:[::1],127.0.0.1"),
        "4",
        &[],
    );
    assert!(
        err.lines()
            .any(|l| l.contains(&format!("connect to [::1]:{p}: Connection refused"))
                && l.ends_with(&format!("; trying IPv4 next: 127.0.0.1:{p}"))),
        "the refused IPv6 connect names the IPv4 address tried next: {err}"
    );
    assert!(err.contains(&format!("connected to 127.0.0.1:{p} (IPv4)")), "{err}");
    assert_eq!(
        count(&err, &format!("connect to [::1]:{p}")),
        1,
        "IPv6 tried more than once: {err}"
    );
}

/// A TCP listener on `127.0.0.1:port` whose accept queue is full: the kernel drops
/// further SYNs (tcp_abort_on_overflow = 0, the default), so a connect to it hangs as to
/// a blackholed address. Returns the listener and the connection that fills the queue.
fn blackhole_v4(port: u16) -> (OwnedFd, std::net::TcpStream) {
    use rustix::net::{AddressFamily, SocketType, bind, listen, socket};
    let l = socket(AddressFamily::INET, SocketType::STREAM, None).expect("socket");
    rustix::net::sockopt::set_socket_reuseaddr(&l, true).unwrap();
    bind(&l, &SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))).expect("binding the blackhole");
    listen(&l, 0).expect("listen");
    let filler = std::net::TcpStream::connect(("127.0.0.1", port)).expect("filling the accept queue");
    // Proof that it is a blackhole now: another connect gets no answer.
    let probe =
        std::net::TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], port)), Duration::from_millis(500));
    assert!(probe.is_err(), "the full accept queue still answered a connect");
    (l, filler)
}

#[test]
fn a_blackholed_ipv4_address_gets_a_head_start_not_the_connect_timeout() {
    let n = nginx();
    if !n.ipv6 {
        skip("no IPv6 on loopback");
        return;
    }
    // nginx listens on [::1] only; 127.0.0.1 on the same port drops every SYN.
    let p = n.v6only_https_port;
    let _hole = blackhole_v4(p);
    let file = n.file(4 * MIB);
    let dir = TestDir::new("reach-blackhole");
    let url = format!("https://localhost:{p}/{}", file.name);
    let t = Instant::now();
    let err = fetch(
        &dir,
        "x4.bin",
        &url,
        &format!("localhost:{p}:127.0.0.1,::1"),
        "4",
        &["-v", "--connect-timeout", "20"],
    );
    let took = t.elapsed();
    // Sequential fallback would wait out the 20 s connect timeout first.
    assert!(
        took < Duration::from_secs(8),
        "took {took:?}: the IPv6 attempt did not start after the head start: {err}"
    );
    assert!(err.contains(&format!("connected to [::1]:{p} (IPv6)")), "{err}");
    assert!(
        err.contains(&format!("connect to 127.0.0.1:{p} abandoned: [::1]:{p} answered first")),
        "the IPv4 attempt is called off once IPv6 answered: {err}"
    );
}

/// The `N` of `ringdl: N trust anchors bundled` in `-v` output.
fn bundled_anchors(err: &str) -> Option<usize> {
    err.lines()
        .find_map(|l| {
            l.strip_prefix("ringdl: ")?
                .strip_suffix(" trust anchors bundled (webpki-roots, Mozilla)")
        })
        .and_then(|n| n.parse().ok())
}

/// A host with no CA files at all (no `SSL_CERT_FILE`/`SSL_CERT_DIR`, or ones that name
/// nothing): ringdl does not fail on the missing files, verifies against the bundled
/// Mozilla roots, and so refuses the fixture's private CA as an unknown issuer (exit 4).
/// The VM repeats this in an initramfs without `/etc/ssl` (`tests/vm/run.sh`, case
/// `no-ca-files-bundled-roots`).
#[test]
fn no_ca_files_the_bundled_roots_load_and_a_private_ca_is_an_unknown_issuer() {
    let n = nginx();
    let file = n.file(4097);
    let dir = TestDir::new("reach-no-ca");
    let empty = dir.join("empty-dir");
    std::fs::create_dir(&empty).unwrap();
    let missing = dir.join("no-such-bundle.pem");
    let envs: [&[(&str, &std::path::Path)]; 2] = [&[], &[("SSL_CERT_FILE", &missing), ("SSL_CERT_DIR", &empty)]];
    for (i, env) in envs.into_iter().enumerate() {
        let out = dir.join(format!("out-{i}.bin"));
        let mut cmd = dir.ringdl();
        for (k, v) in env {
            cmd.env(k, v);
        }
        let o = cmd.arg("-v").arg("-o").arg(&out).arg(n.https_url(&file.name)).run();
        o.assert_code(crate::util::exit::TLS);
        let err = o.stderr_text();
        let bundled = bundled_anchors(&err);
        assert!(
            bundled.is_some_and(|b| b >= 100),
            "case {i}: -v does not say the bundled roots (100 or more) were loaded: {err}"
        );
        assert!(
            err.contains("not trusted (unknown issuer)"),
            "case {i}: the private CA is not refused as an unknown issuer: {err}"
        );
        assert!(!out.exists(), "case {i}: an output was left");
    }
}
