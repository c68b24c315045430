//! SOCKS5 proxies: the real `ringdl` through a real SOCKS5 server (Debian's `microsocks`,
//! started here on a free port, its outgoing connections bound to `127.0.0.2` so that
//! nginx's access log shows which requests came through it) to the nginx fixture; bytes
//! compared by SHA-256.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{self, MIB, TestDir, assert_same_bytes, exit, free_port, nginx};

/// The address microsocks connects from: requests that came through it.
const VIA: &str = "127.0.0.2";

/// A microsocks of this test: killed (the process this struct started, by its pid) on drop.
struct Microsocks {
    port: u16,
    child: Child,
}

impl Microsocks {
    /// Starts `microsocks -i 127.0.0.1 -p PORT -b 127.0.0.2` with `extra` arguments
    /// (`-u USER -P PASSWORD`).
    fn start(extra: &[&str]) -> Microsocks {
        let bin = "/usr/bin/microsocks";
        assert!(
            PathBuf::from(bin).exists(),
            "microsocks not found at {bin}: the SOCKS5 tests need it; {}",
            util::INSTALL_HINT
        );
        for _ in 0..5 {
            let port = free_port(false);
            let mut child = Command::new(bin)
                .args(["-i", "127.0.0.1", "-p", &port.to_string(), "-b", VIA])
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("starting {bin}: {e}"));
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Microsocks { port, child };
                }
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("microsocks did not start (5 tries)");
    }

    fn url(&self, scheme: &str) -> String {
        format!("{scheme}://127.0.0.1:{}", self.port)
    }
}

impl Drop for Microsocks {
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

/// Requests for `name` nginx logged from [`VIA`] (through microsocks).
fn via_proxy(name: &str) -> usize {
    nginx()
        .access_log(name)
        .iter()
        .filter(|l| l.starts_with(&format!("{VIA} ")))
        .count()
}

#[test]
fn http_and_https_through_socks5_and_socks5h_at_x_1_and_4() {
    let n = nginx();
    let file = n.file(16 * MIB);
    let proxy = Microsocks::start(&[]);
    let mut round = 0;
    for scheme in ["socks5", "socks5h"] {
        for https in [false, true] {
            for x in [1, 4] {
                round += 1;
                let dir = TestDir::new("socks_x");
                let out = dir.join("out.bin");
                let before = via_proxy(&file.name);
                let mut cmd = dir.ringdl();
                cmd.args(["-v", "-x", &x.to_string(), "-o"]).arg(&out);
                // Both I/O backends (unless the run forces one), and the three ways to
                // name the proxy: --proxy, all_proxy / ALL_PROXY, and the scheme's own
                // variable with a socks URL (curl takes it there too).
                if util::test_io().is_none() {
                    cmd.args(["--io", if round % 2 == 0 { "epoll" } else { "uring" }]);
                }
                let url = if https {
                    cmd.arg("--ca-certificate").arg(n.ca_pem());
                    n.https_url_host("localhost", &file.name)
                } else {
                    format!("http://localhost:{}/{}", n.http_port, file.name)
                };
                match round % 3 {
                    0 => cmd.args(["--proxy", &proxy.url(scheme)]),
                    1 => cmd.env("ALL_PROXY", proxy.url(scheme)),
                    _ => cmd.env(if https { "https_proxy" } else { "http_proxy" }, proxy.url(scheme)),
                };
                let o = cmd.arg(&url).run();
                o.assert_success();
                assert_same_bytes(&out, file);
                let err = o.stderr_text();
                let how = if scheme == "socks5h" {
                    "a SOCKS5 tunnel per connection, the proxy resolves localhost"
                } else {
                    "a SOCKS5 tunnel per connection, localhost resolved here"
                };
                assert!(
                    err.contains(&format!("proxy {} (from ", proxy.url(scheme))) && err.contains(how),
                    "-v names the proxy and how: {err}"
                );
                let summary = o.summary_lines().pop().expect("a summary line");
                let used = connections(&summary);
                let through = via_proxy(&file.name) - before;
                // Every request went through microsocks: at least one per connection.
                assert!(
                    through >= used && through >= 1,
                    "{scheme} https={https} -x {x}: {through} requests via the proxy for {used} connections"
                );
                if x > 1 {
                    assert!(used > 1, "-x {x} used {used} connection through the proxy");
                }
                if https {
                    assert!(summary.contains("TLS"), "{summary}");
                }
            }
        }
    }
}

/// `socks5h://` sends the host name to the proxy (ATYP 3): a name only `--resolve` knows
/// fails there, with the proxy's reply in words; `socks5://` resolves it here and sends
/// the address, and the download works.
#[test]
fn socks5h_sends_the_name_and_socks5_resolves_it_here() {
    let n = nginx();
    let file = n.file(4 * MIB);
    let proxy = Microsocks::start(&[]);
    let name = "ringdl-socks-test.invalid";
    let resolve = format!("{name}:{}:127.0.0.1", n.https_port);
    let url = format!("https://{name}:{}/{}", n.https_port, file.name);
    let run = |scheme: &str| {
        let dir = TestDir::new("socks_names");
        let out = dir.join("out.bin");
        let o = dir
            .ringdl()
            .args(["-v", "-k", "-x", "4", "--max-tries", "2", "--retry-wait", "0.1"])
            .args(["--resolve", &resolve, "--proxy", &proxy.url(scheme), "-o"])
            .arg(&out)
            .arg(&url)
            .run();
        (o, out, dir)
    };
    let before = via_proxy(&file.name);
    let (o, out, _d) = run("socks5");
    o.assert_success();
    assert_same_bytes(&out, file);
    assert!(
        via_proxy(&file.name) > before,
        "socks5: no request came through microsocks"
    );

    let (o, out, _d) = run("socks5h");
    o.assert_code(exit::HTTP_STATUS);
    let err = o.stderr_text();
    assert!(
        err.contains(&format!(
            "proxy {} refused SOCKS5 CONNECT {name}:{}: general SOCKS server failure (reply 1)",
            proxy.url("socks5h"),
            n.https_port
        )),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn socks5_password_required_accepted_and_refused() {
    let n = nginx();
    let file = n.file(4 * MIB);
    let proxy = Microsocks::start(&["-u", "ringdl", "-P", "s3cr3t"]);
    let with = |cred: &str| format!("socks5h://{cred}@127.0.0.1:{}", proxy.port);
    let run = |proxy_url: &str, extra: &[&str]| {
        let dir = TestDir::new("socks_auth");
        let out = dir.join("out.bin");
        let o = dir
            .ringdl()
            .args(["-vv", "-x", "4", "--proxy", proxy_url])
            .args(extra)
            .arg("--ca-certificate")
            .arg(n.ca_pem())
            .arg("-o")
            .arg(&out)
            .arg(n.https_url_host("localhost", &file.name))
            .run();
        (o, out, dir)
    };
    // No credentials: the proxy accepts no method offered; said, exit code of a proxy refusal.
    let (o, out, _d) = run(&proxy.url("socks5h"), &[]);
    o.assert_code(exit::HTTP_STATUS);
    let err = o.stderr_text();
    assert!(
        err.contains(&format!("proxy {}: wants authentication", proxy.url("socks5h"))) && err.contains("--proxy-user"),
        "{err}"
    );
    assert!(!out.exists());
    // Wrong password: refused in words, the password never printed.
    let (o, out, _d) = run(&with("ringdl:wr0ng"), &[]);
    o.assert_code(exit::HTTP_STATUS);
    let err = o.stderr_text();
    assert!(
        err.contains(&format!(
            "proxy socks5h://***@127.0.0.1:{}: refused the user name and password (RFC 1929 status",
            proxy.port
        )),
        "{err}"
    );
    assert!(!err.contains("wr0ng"), "password printed: {err}");
    assert!(!out.exists());
    // Right ones, in the URL and with --proxy-user: exact bytes, never printed.
    for (url, extra) in [
        (with("ringdl:s3cr3t"), &[][..]),
        (proxy.url("socks5"), &["--proxy-user", "ringdl:s3cr3t"][..]),
    ] {
        let before = via_proxy(&file.name);
        let (o, out, _d) = run(&url, extra);
        o.assert_success();
        assert_same_bytes(&out, file);
        assert!(
            !o.stderr_text().contains("s3cr3t"),
            "password printed: {}",
            o.stderr_text()
        );
        assert!(
            via_proxy(&file.name) > before,
            "{url}: no request came through microsocks"
        );
    }
}

/// The proxy's CONNECT to a port where nothing listens: reply 5 in words, a bounded
/// number of tries, the exit code of a proxy refusal, and `--noproxy` still goes direct.
#[test]
fn socks5_connect_refused_names_the_reply_and_noproxy_goes_direct() {
    let n = nginx();
    let file = n.file(MIB + 1);
    let proxy = Microsocks::start(&[]);
    let closed = free_port(false);
    let dir = TestDir::new("socks_refused");
    let out = dir.join("out.bin");
    let o = dir
        .ringdl()
        .args([
            "--max-tries",
            "2",
            "--retry-wait",
            "0.1",
            "--proxy",
            &proxy.url("socks5"),
            "-o",
        ])
        .arg(&out)
        .arg(format!("http://127.0.0.1:{closed}/x.bin"))
        .run();
    o.assert_code(exit::HTTP_STATUS);
    let err = o.stderr_text();
    assert!(
        err.contains(&format!(
            "proxy {} refused SOCKS5 CONNECT 127.0.0.1:{closed}: connection refused (reply 5)",
            proxy.url("socks5")
        )),
        "{err}"
    );
    assert!(!out.exists());

    let before = via_proxy(&file.name);
    let o = dir
        .ringdl()
        .args(["-v", "--noproxy", "127.0.0.1", "-o"])
        .arg(&out)
        .env("all_proxy", proxy.url("socks5h"))
        .arg(n.http_url(&file.name))
        .run();
    o.assert_success();
    assert_same_bytes(&out, file);
    assert!(
        o.stderr_text().contains("127.0.0.1 matches --noproxy: no proxy"),
        "{}",
        o.stderr_text()
    );
    assert_eq!(via_proxy(&file.name), before, "--noproxy went through the proxy");
}
