//! Proxies: the real `ringdl` through a real HTTP proxy (Debian's `tinyproxy`, started
//! here on a free port with its own config, pid file and log in a temp dir) to the
//! nginx fixture; bytes compared by SHA-256, the proxy's log shows the requests went
//! through it.

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::fault::proxy::ConnectProxy;
use crate::fault::{Fault, FaultServer, When};
use crate::util::{self, MIB, TestDir, assert_same_bytes, exit, free_port, nginx};

/// A tinyproxy of this test: killed (the process this struct started, by its pid) and
/// its directory removed on drop.
struct Tinyproxy {
    port: u16,
    dir: tempfile::TempDir,
    child: Child,
}

impl Tinyproxy {
    /// Starts `tinyproxy -d` with `extra` config lines (`BasicAuth u p`, `ConnectPort 443`).
    fn start(extra: &[&str]) -> Tinyproxy {
        let bin = "/usr/bin/tinyproxy";
        assert!(
            PathBuf::from(bin).exists(),
            "tinyproxy not found at {bin}: the proxy tests need it; {}",
            util::INSTALL_HINT
        );
        for _ in 0..5 {
            let dir = tempfile::Builder::new().prefix("ringdl-tinyproxy-").tempdir().unwrap();
            let port = free_port(false);
            let d = dir.path().display();
            let conf = format!(
                "Port {port}\nListen 127.0.0.1\nTimeout 60\nLogFile \"{d}/tinyproxy.log\"\nLogLevel Info\n\
                 PidFile \"{d}/tinyproxy.pid\"\nMaxClients 100\nAllow 127.0.0.1\nDisableViaHeader Yes\n{}\n",
                extra.join("\n")
            );
            fs::write(dir.path().join("tinyproxy.conf"), conf).unwrap();
            let mut child = Command::new(bin)
                .arg("-d")
                .arg("-c")
                .arg(dir.path().join("tinyproxy.conf"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("starting {bin}: {e}"));
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Tinyproxy { port, dir, child };
                }
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("tinyproxy did not start (5 tries)");
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("tinyproxy.log")).unwrap_or_default()
    }

    /// Lines of the log that record a request (`Request (file descriptor N): LINE`).
    fn requests(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter_map(|l| l.split_once("): ").filter(|_| l.contains("Request (file descriptor")))
            .map(|(_, r)| r.to_owned())
            .collect()
    }
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How many connections the summary line says carried a request.
fn connections(summary: &str) -> usize {
    summary
        .split(", ")
        .find_map(|p| p.strip_suffix(" connections").or_else(|| p.strip_suffix(" connection")))
        .and_then(|n| n.split(' ').next_back())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no connection count in {summary}"))
}

#[test]
fn http_and_https_through_tinyproxy_at_x_1_4_16() {
    let n = nginx();
    let file = n.file(100 * MIB);
    let proxy = Tinyproxy::start(&[]);
    for https in [false, true] {
        for x in [1, 4, 16] {
            let dir = TestDir::new("proxy_x");
            let out = dir.join("out.bin");
            let before = proxy.requests().len();
            let mut cmd = dir.ringdl();
            cmd.args(["-v", "-x", &x.to_string(), "-o"]).arg(&out);
            // The engines after the tunnel or through the proxy: the default (direct), and
            // the others once each.
            match (https, x) {
                (false, 4) => cmd.args(["--engine", "splice"]),
                (true, 4) | (false, 16) => cmd.args(["--engine", "buffered"]),
                _ => &mut cmd,
            };
            let url = if https {
                cmd.arg("--ca-certificate").arg(n.ca_pem());
                // From the environment this time, as curl reads it.
                cmd.env("https_proxy", proxy.url());
                n.https_url(&file.name)
            } else {
                cmd.args(["--proxy", &proxy.url()]);
                n.http_url(&file.name)
            };
            let o = cmd.arg(&url).run();
            o.assert_success();
            assert_same_bytes(&out, file);
            let err = o.stderr_text();
            assert!(
                err.contains(&format!("proxy {}", proxy.url())),
                "-v names the proxy: {err}"
            );
            let summary = o.summary_lines().pop().expect("a summary line");
            let used = connections(&summary);
            let reqs = proxy.requests()[before..].to_vec();
            if https {
                let want = format!("CONNECT 127.0.0.1:{} HTTP/1.1", n.https_port);
                let tunnels = reqs.iter().filter(|r| **r == want).count();
                // One tunnel per connection (a reconnect opens another).
                assert!(
                    tunnels >= used && tunnels >= 1,
                    "{tunnels} CONNECTs for {used} connections: {reqs:?}"
                );
                assert!(summary.contains("TLS"), "{summary}");
            } else {
                let want = format!("GET {} HTTP/1.1", n.http_url(&file.name));
                let gets = reqs.iter().filter(|r| **r == want).count();
                assert!(
                    gets >= used && gets >= 1,
                    "{gets} GETs via the proxy for {used} connections: {reqs:?}"
                );
            }
            if x > 1 {
                assert!(used > 1, "-x {x} used {used} connection through the proxy");
            }
        }
    }
}

#[test]
fn a_proxy_that_refuses_connect_to_the_port_names_it() {
    let n = nginx();
    let file = n.file(MIB + 1);
    // Only CONNECT to port 443 is allowed: nginx's port is refused (403).
    let proxy = Tinyproxy::start(&["ConnectPort 443"]);
    let dir = TestDir::new("proxy_refuses_connect");
    let out = dir.join("out.bin");
    let o = dir
        .ringdl()
        .args(["--proxy", &proxy.url(), "-o"])
        .arg(&out)
        .arg("--ca-certificate")
        .arg(n.ca_pem())
        .arg(n.https_url(&file.name))
        .run();
    o.assert_code(exit::HTTP_STATUS);
    let err = o.stderr_text();
    assert!(
        err.contains(&format!(
            "proxy {} refused CONNECT 127.0.0.1:{}: 403",
            proxy.url(),
            n.https_port
        )),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn proxy_auth_required_and_accepted() {
    let n = nginx();
    let file = n.file(4 * MIB);
    let proxy = Tinyproxy::start(&["BasicAuth ringdl s3cr3t"]);
    let with = |cred: &str| format!("http://{cred}@127.0.0.1:{}", proxy.port);
    for https in [false, true] {
        let url = if https {
            n.https_url(&file.name)
        } else {
            n.http_url(&file.name)
        };
        let run = |proxy_url: &str| {
            let dir = TestDir::new("proxy_auth");
            let out = dir.join("out.bin");
            let o = dir
                .ringdl()
                .args(["-vv", "-x", "4", "--proxy", proxy_url, "--ca-certificate"])
                .arg(n.ca_pem())
                .arg("-o")
                .arg(&out)
                .arg(&url)
                .run();
            (o, out, dir)
        };
        // No credentials: 407, said as such, exit code of an HTTP error.
        let (o, out, _d) = run(&proxy.url());
        o.assert_code(exit::HTTP_STATUS);
        let err = o.stderr_text();
        assert!(
            err.contains(&format!("proxy {} wants authentication (407", proxy.url())),
            "{err}"
        );
        assert!(!out.exists());
        // Wrong password: the same, and the message says they were rejected. (tinyproxy
        // 1.11 answers a plain request with wrong proxy credentials 401, not 407.)
        let (o, _, _d) = run(&with("ringdl:wrong"));
        o.assert_code(exit::HTTP_STATUS);
        let err = o.stderr_text();
        assert!(
            err.contains("rejected the user name and password")
                || (!https
                    && err.contains("HTTP 401")
                    && err.contains(&format!(
                        "through proxy http://***@127.0.0.1:{}, which was sent its user name",
                        proxy.port
                    ))),
            "{err}"
        );
        assert!(!o.stderr_text().contains("wrong"), "-vv printed the password");
        // Right ones: the download completes; -vv never prints them.
        let (o, out, _d) = run(&with("ringdl:s3cr3t"));
        o.assert_success();
        assert_same_bytes(&out, file);
        let err = o.stderr_text();
        assert!(
            !err.contains("s3cr3t") && !err.contains("cmluZ2RsOnMzY3IzdA"),
            "credentials printed: {err}"
        );
        assert!(
            err.contains(&format!("proxy http://***@127.0.0.1:{}", proxy.port)),
            "{err}"
        );
    }
}

/// `--proxy-user USER:PASSWORD` (curl's flag): the credentials apart from the proxy URL,
/// accepted by a tinyproxy that requires them, refused without them, winning over the
/// URL's userinfo either way, and never printed by `-vv`.
#[test]
fn proxy_user_gives_the_credentials_apart_from_the_url() {
    let n = nginx();
    let file = n.file(4 * MIB);
    let proxy = Tinyproxy::start(&["BasicAuth ringdl s3cr3t"]);
    let with = |cred: &str| format!("http://{cred}@127.0.0.1:{}", proxy.port);
    for https in [false, true] {
        let url = if https {
            n.https_url(&file.name)
        } else {
            n.http_url(&file.name)
        };
        let run = |proxy_url: &str, user: Option<&str>| {
            let dir = TestDir::new("proxy_user");
            let out = dir.join("out.bin");
            let mut cmd = dir.ringdl();
            cmd.args(["-vv", "-x", "4", "--proxy", proxy_url, "--ca-certificate"])
                .arg(n.ca_pem());
            if let Some(u) = user {
                cmd.args(["--proxy-user", u]);
            }
            let o = cmd.arg("-o").arg(&out).arg(&url).run();
            (o, out, dir)
        };
        let secret_free = |err: &str| {
            assert!(
                !err.contains("s3cr3t") && !err.contains("cmluZ2RsOnMzY3IzdA"),
                "credentials printed: {err}"
            );
        };
        // Without: refused (407).
        let (o, out, _d) = run(&proxy.url(), None);
        o.assert_code(exit::HTTP_STATUS);
        assert!(
            o.stderr_text().contains("wants authentication (407"),
            "{}",
            o.stderr_text()
        );
        assert!(!out.exists());
        // With --proxy-user: accepted.
        let (o, out, _d) = run(&proxy.url(), Some("ringdl:s3cr3t"));
        o.assert_success();
        assert_same_bytes(&out, file);
        secret_free(&o.stderr_text());
        // Over wrong credentials in the URL: --proxy-user wins.
        let (o, out, _d) = run(&with("ringdl:wrong"), Some("ringdl:s3cr3t"));
        o.assert_success();
        assert_same_bytes(&out, file);
        secret_free(&o.stderr_text());
        // And the other way round: right ones in the URL, wrong --proxy-user: refused.
        let (o, out, _d) = run(&with("ringdl:s3cr3t"), Some("ringdl:wrong"));
        o.assert_code(exit::HTTP_STATUS);
        assert!(!out.exists());
        assert!(!o.stderr_text().contains("wrong"), "-vv printed the password");
    }
}

#[test]
fn no_proxy_bypasses_a_dead_proxy() {
    let n = nginx();
    let file = n.file(4 * MIB);
    // Nothing listens here.
    let dead = format!("http://127.0.0.1:{}", free_port(false));
    let run = |env: &[(&str, &str)], args: &[&str], https: bool| {
        let dir = TestDir::new("no_proxy");
        let out = dir.join("out.bin");
        let mut cmd = dir.ringdl();
        cmd.args(["-v", "--max-tries", "2", "--ca-certificate"]).arg(n.ca_pem());
        cmd.args(args).arg("-o").arg(&out);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.arg(if https {
            n.https_url(&file.name)
        } else {
            n.http_url(&file.name)
        });
        let o = cmd.run();
        (o, out, dir)
    };
    for https in [false, true] {
        let var = if https { "https_proxy" } else { "http_proxy" };
        // The dead proxy is really used when nothing exempts the host.
        let (o, _, _d) = run(&[(var, &dead)], &[], https);
        o.assert_code(exit::NETWORK);
        assert!(
            o.stderr_text().contains(&format!("connect to proxy {dead}")),
            "{}",
            o.stderr_text()
        );
        for (env, args) in [
            (
                vec![(var, dead.as_str()), ("no_proxy", "example.com,127.0.0.1")],
                vec![],
            ),
            (vec![(var, dead.as_str()), ("NO_PROXY", "127.0.0.0/8")], vec![]),
            (vec![(var, dead.as_str()), ("no_proxy", "*")], vec![]),
            (vec![], vec!["--proxy", dead.as_str(), "--noproxy", "127.0.0.1"]),
            (vec![("no_proxy", "127.0.0.1")], vec!["--proxy", dead.as_str()]),
        ] {
            let (o, out, _d) = run(&env, &args, https);
            o.assert_success();
            assert_same_bytes(&out, file);
            assert!(o.stderr_text().contains("matches"), "{}", o.stderr_text());
        }
    }
    // HTTP_PROXY (upper case) is not read for http, as curl does not (httpoxy).
    let (o, out, _d) = run(&[("HTTP_PROXY", &dead)], &[], false);
    o.assert_success();
    assert_same_bytes(&out, file);
}

#[test]
fn a_redirect_to_another_host_chooses_the_proxy_again() {
    let proxy = Tinyproxy::start(&[]);
    // https://localhost:P/start redirects to https://127.0.0.1:P/file.bin (the same server).
    let srv = FaultServer::builder()
        .size(3 * MIB)
        .tls()
        .fault_on(
            When::path("/start"),
            Fault::Redirect {
                code: 302,
                location: "{base}/file.bin".into(),
            },
        )
        .start();
    let p = srv.port();
    for (exempt, via, direct) in [
        ("127.0.0.1", "localhost", "127.0.0.1"),
        ("localhost", "127.0.0.1", "localhost"),
    ] {
        let before = proxy.requests().len();
        let dir = TestDir::new("proxy_redirect");
        let out = dir.join("out.bin");
        let o = dir
            .ringdl()
            .args(["-v", "-x", "2", "--ca-certificate"])
            .arg(srv.ca_pem())
            .env("https_proxy", proxy.url())
            .env("no_proxy", exempt)
            .arg("-o")
            .arg(&out)
            .arg(format!("https://localhost:{p}/start"))
            .run();
        o.assert_success();
        assert_eq!(util::sha256_file(&out), srv.sha256());
        let reqs = proxy.requests()[before..].to_vec();
        assert!(
            reqs.iter().any(|r| *r == format!("CONNECT {via}:{p} HTTP/1.1")),
            "no_proxy={exempt}: {via} should go through the proxy: {reqs:?}"
        );
        assert!(
            !reqs.iter().any(|r| r.starts_with(&format!("CONNECT {direct}:"))),
            "no_proxy={exempt}: {direct} should go direct: {reqs:?}"
        );
    }
}

/// Issue 22, item 3: a proxy that answers 403 to a `CONNECT` beyond two open tunnels per
/// client (squid's `acl … maxconn 2`): `-x 6` goes on with the tunnels it has, lands exact
/// bytes, and `-v` says the proxy turns extra tunnels away. (It ended with exit 5, "refused
/// CONNECT … 403", while `-x 2` worked through the same proxy.)
#[test]
fn a_proxy_capping_tunnels_per_client_gives_fewer_tunnels_and_exact_bytes() {
    let srv = FaultServer::builder().size(16 * MIB).tls().start();
    let proxy = ConnectProxy::start(2, None);
    let dir = TestDir::new("proxy_tunnel_cap");
    let out = dir.join("out.bin");
    let o = dir
        .ringdl()
        .args(["-v", "-x", "6", "--proxy", &proxy.url(), "--ca-certificate"])
        .arg(srv.ca_pem())
        .arg("-o")
        .arg(&out)
        .arg(srv.url("file.bin"))
        .run();
    let err = o.stderr_text();
    o.assert_success();
    assert_eq!(util::sha256_file(&out), srv.sha256(), "{err}");
    assert!(proxy.refused() >= 1, "the cap never fired: {:?}", proxy.connects());
    assert!(proxy.most_open() <= 2, "{} tunnels open at once", proxy.most_open());
    assert!(
        err.contains(&format!(
            "proxy {} refused CONNECT 127.0.0.1:{}: 403 Forbidden: the proxy turns extra tunnels away; going on with",
            proxy.url(),
            srv.port()
        )),
        "-v does not say the proxy capped the tunnels:\n{err}"
    );
}

/// Issue 22, item 3: a refusal of the first tunnel (a proxy that refuses every `CONNECT`)
/// stays an error, exit 5, at `-x 1` and `-x 6`, and names the proxy's answer.
#[test]
fn a_proxy_refusing_the_first_tunnel_is_still_an_error() {
    let srv = FaultServer::builder().size(MIB).tls().start();
    let proxy = ConnectProxy::start(0, None);
    for x in ["1", "6"] {
        let dir = TestDir::new("proxy_first_tunnel_refused");
        let out = dir.join("out.bin");
        let o = dir
            .ringdl()
            .args(["-x", x, "--proxy", &proxy.url(), "--ca-certificate"])
            .arg(srv.ca_pem())
            .arg("-o")
            .arg(&out)
            .arg(srv.url("file.bin"))
            .run();
        o.assert_code(exit::HTTP_STATUS);
        let err = o.stderr_text();
        assert!(
            err.contains(&format!(
                "proxy {} refused CONNECT 127.0.0.1:{}: 403 Forbidden",
                proxy.url(),
                srv.port()
            )),
            "-x {x}: {err}"
        );
        assert!(proxy.refused() >= 1);
        assert!(!out.exists());
        assert!(srv.requests().is_empty(), "a request reached the server");
    }
}

/// `Basic base64(user:password)` (RFC 7617) for the two pairs these tests use, as each
/// hop should receive it (encoded by `base64(1)`, not by ringdl's encoder).
fn basic(user_pass: &str) -> String {
    let b64 = match user_pass {
        "ringdl:s3cr3t" => "cmluZ2RsOnMzY3IzdA==",
        "alice:origin-pw" => "YWxpY2U6b3JpZ2luLXB3",
        other => panic!("no encoding for {other}"),
    };
    format!("Basic {b64}")
}

/// Issue 22, item 6: with a password for the proxy and another for the origin, each hop
/// receives only its own. Through a `CONNECT` tunnel (tinyproxy with `BasicAuth`, and the
/// recording proxy of `tests/fault/proxy.rs`, which keeps every `CONNECT` head) the proxy
/// credentials go on each `CONNECT` and never inside the tunnel, and the origin's (`-u`)
/// only inside it; plain http through tinyproxy carries the origin's to the origin and
/// never the proxy's. The fault server records every field that reached the origin.
#[test]
fn each_hop_receives_only_its_own_credentials() {
    let proxy_auth = basic("ringdl:s3cr3t");
    let origin_auth = basic("alice:origin-pw");
    let tiny = Tinyproxy::start(&["BasicAuth ringdl s3cr3t"]);
    let rec = ConnectProxy::start(16, Some(&proxy_auth));
    let run = |srv: &FaultServer, proxy_port: u16| {
        let dir = TestDir::new("proxy_hops");
        let out = dir.join("out.bin");
        let mut cmd = dir.ringdl();
        cmd.args(["-x", "4", "-u", "alice:origin-pw", "--proxy"])
            .arg(format!("http://ringdl:s3cr3t@127.0.0.1:{proxy_port}"));
        if srv.is_tls() {
            cmd.arg("--ca-certificate").arg(srv.ca_pem());
        }
        let o = cmd.arg("-o").arg(&out).arg(srv.url("file.bin")).run();
        o.assert_success();
        assert_eq!(util::sha256_file(&out), srv.sha256(), "{}", o.stderr_text());
    };
    // What reached the origin: its own credentials on every request, never the proxy's.
    let origin_got_only_its_own = |srv: &FaultServer, via: &str| {
        let reqs = srv.requests();
        assert!(!reqs.is_empty());
        for r in &reqs {
            assert_eq!(
                r.header("proxy-authorization"),
                None,
                "{via}: the proxy's credentials reached the origin on {} {}",
                r.method,
                r.target
            );
            assert_eq!(
                r.header("authorization"),
                Some(origin_auth.as_str()),
                "{via}: the origin's credentials missing on {} {}",
                r.method,
                r.target
            );
        }
    };
    // https through the recording proxy: each CONNECT head carries the proxy's
    // credentials, never the origin's.
    let srv = FaultServer::builder().size(8 * MIB).tls().start();
    run(&srv, rec.port());
    let connects = rec.connects();
    assert!(
        !connects.is_empty() && connects.iter().all(|c| c.status == 200),
        "{connects:?}"
    );
    for c in &connects {
        assert_eq!(c.target, format!("127.0.0.1:{}", srv.port()), "{c:?}");
        assert_eq!(c.header("proxy-authorization"), Some(proxy_auth.as_str()), "{c:?}");
        assert_eq!(
            c.header("authorization"),
            None,
            "the origin's credentials on a CONNECT: {c:?}"
        );
    }
    origin_got_only_its_own(&srv, "CONNECT tunnel (recording proxy)");
    // https through tinyproxy (which refuses a CONNECT without them: 407).
    let srv = FaultServer::builder().size(8 * MIB).tls().start();
    run(&srv, tiny.port);
    assert!(
        tiny.requests()
            .iter()
            .any(|r| *r == format!("CONNECT 127.0.0.1:{} HTTP/1.1", srv.port())),
        "{:?}",
        tiny.requests()
    );
    origin_got_only_its_own(&srv, "CONNECT tunnel (tinyproxy)");
    // Plain http through tinyproxy: absolute-form requests to the proxy.
    let srv = FaultServer::builder().size(8 * MIB).start();
    run(&srv, tiny.port);
    assert!(
        tiny.requests()
            .iter()
            .any(|r| r.starts_with(&format!("GET {} ", srv.url("file.bin")))),
        "{:?}",
        tiny.requests()
    );
    origin_got_only_its_own(&srv, "plain http (tinyproxy)");
}

/// Issue 22, item 6: the origin's credentials (`-u`) go only to their origin: a redirect
/// to another port of the same host, or to https on another port, gets none of them (and
/// `-v` says so); a redirect that stays on the origin keeps them. Directly and through a
/// `CONNECT` tunnel.
#[test]
fn origin_credentials_do_not_follow_a_redirect_to_another_port_or_scheme() {
    let origin_auth = basic("alice:origin-pw");
    let rec = ConnectProxy::start(16, None);
    let other_http = FaultServer::builder().size(3 * MIB).seed(2).start();
    let other_https = FaultServer::builder().size(3 * MIB).seed(3).tls().start();
    for (to, via_proxy, https_first) in [
        (&other_http, false, false),
        (&other_https, false, false),
        (&other_https, true, true),
    ] {
        let first = FaultServer::builder()
            .size(3 * MIB)
            .tls_if(https_first)
            .fault_on(
                When::path("/start"),
                Fault::Redirect {
                    code: 302,
                    location: to.url("file.bin"),
                },
            )
            .fault_on(
                When::path("/same"),
                Fault::Redirect {
                    code: 302,
                    location: "/file.bin".into(),
                },
            )
            .start();
        let before = to.requests().len();
        let get = |path: &str| {
            let dir = TestDir::new("redirect_credentials");
            let out = dir.join("out.bin");
            let mut cmd = dir.ringdl();
            // One bundle with both test CAs (the two https servers have one each).
            let mut cas = fs::read(other_https.ca_pem()).unwrap();
            if https_first {
                cas.extend(fs::read(first.ca_pem()).unwrap());
            }
            fs::write(dir.join("cas.pem"), cas).unwrap();
            cmd.args(["-v", "-x", "2", "-u", "alice:origin-pw", "--ca-certificate"])
                .arg(dir.join("cas.pem"));
            if via_proxy {
                cmd.args(["--proxy", &rec.url()]);
            }
            let o = cmd.arg("-o").arg(&out).arg(first.url(path)).run();
            o.assert_success();
            (o, util::sha256_file(&out), dir)
        };
        let case = format!(
            "{} -> {}{}",
            first.base(),
            to.base(),
            if via_proxy { " via proxy" } else { "" }
        );
        // Another origin: the credentials stay behind.
        let (o, sha, _d) = get("start");
        assert_eq!(sha, to.sha256(), "{case}");
        let start = first.requests().into_iter().find(|r| r.path() == "/start").unwrap();
        assert_eq!(
            start.header("authorization"),
            Some(origin_auth.as_str()),
            "{case}: first hop"
        );
        let reached = &to.requests()[before..];
        assert!(!reached.is_empty(), "{case}");
        for r in reached {
            assert_eq!(
                r.header("authorization"),
                None,
                "{case}: the credentials followed the redirect to another origin"
            );
        }
        assert!(
            o.stderr_text().contains("not sending the credentials to"),
            "{case}: {}",
            o.stderr_text()
        );
        // The same origin: they stay on every request.
        let (_o, sha, _d) = get("same");
        assert_eq!(sha, first.sha256(), "{case}");
        let files: Vec<_> = first
            .requests()
            .into_iter()
            .filter(|r| r.path() == "/file.bin")
            .collect();
        assert!(!files.is_empty());
        for r in files {
            assert_eq!(
                r.header("authorization"),
                Some(origin_auth.as_str()),
                "{case}: same origin"
            );
        }
    }
}

/// A tunnel through a proxy belongs to the host name it was opened for: through one
/// tinyproxy (so every connection goes to the same address, the proxy's), with a
/// certificate for `localhost` only, `https://127.0.0.1:P/` after two
/// `https://localhost:P/` files opens its own tunnel and fails its certificate check
/// (exit 4); the `localhost` files land exact, the second in the first one's tunnel.
#[test]
fn a_tunnel_for_one_host_name_is_never_reused_for_another() {
    let n = nginx();
    let (a, c, b) = (n.file(4097), n.file(MIB + 1), n.file(4096));
    let dir = TestDir::new("proxy_reuse_by_name");
    let (ca, server) = crate::trust::server_for(dir.path(), "named", "DNS:localhost");
    let servers = util::CertServers::start(&n.www(), &[server]);
    let port = servers.port("named");
    let proxy = Tinyproxy::start(&[]);
    let o = dir
        .ringdl()
        .args([
            "-j",
            "1",
            "-x",
            "1",
            "-Z",
            "-d",
            "got",
            "--proxy",
            &proxy.url(),
            "--ca-certificate",
        ])
        .arg(&ca)
        .arg(servers.url("named", "localhost", &a.name))
        .arg(servers.url("named", "localhost", &c.name))
        .arg(servers.url("named", "127.0.0.1", &b.name))
        .run();
    crate::trust::assert_only_localhost_landed(&o, &dir, a, c, b);
    let connects: Vec<String> = proxy
        .requests()
        .into_iter()
        .filter(|r| r.starts_with("CONNECT"))
        .collect();
    assert_eq!(
        connects,
        [
            format!("CONNECT localhost:{port} HTTP/1.1"),
            format!("CONNECT 127.0.0.1:{port} HTTP/1.1")
        ],
        "one tunnel per host name"
    );
    let log = servers.log("named");
    let uris: Vec<&str> = log.iter().map(|(_, _, uri, _)| uri.as_str()).collect();
    assert_eq!(uris, [format!("/{}", a.name), format!("/{}", c.name)], "{log:?}");
}
