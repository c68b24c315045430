//! What users of a downloader expect (issue 15): request headers and Basic credentials
//! (`-H`, `--user-agent`, `--user`, URL userinfo) and that credentials never follow a
//! redirect to another origin; against the real nginx, whose `users.log` records the
//! `Authorization`, `Cookie`, `User-Agent` and `X-Token` each request carried.

use crate::util::{MIB, TestDir, USERS_BASIC, assert_same_bytes, exit, nginx};

/// The URL of the served `size`-byte file under `location`, with a query `tag` that
/// finds this test's lines in `users.log`.
fn url(location: &str, size: u64, tag: &str) -> String {
    let n = nginx();
    n.http_url(&format!("{location}/{}?{tag}", n.file(size).name))
}

#[test]
fn basic_credentials_from_the_url_are_percent_decoded_and_never_printed() {
    let n = nginx();
    let file = n.file(MIB + 1);
    let dir = TestDir::new("users_basic_url");
    let out = dir.join("out.bin");
    let with = url("auth", MIB + 1, "basic-url").replace("http://", "http://alice:p%40ss%3Aw0rd%25@");
    let o = dir.ringdl().args(["-x", "4", "-vv", "-o"]).arg(&out).arg(&with).run();
    o.assert_success();
    assert_same_bytes(&out, file);
    let err = o.stderr_text();
    assert!(err.contains("header Authorization: <redacted>"), "{err}");
    for secret in [USERS_BASIC, "w0rd", "alice:"] {
        assert!(!err.contains(secret), "-vv printed {secret:?}:\n{err}");
    }
    let lines = n.users_log("basic-url");
    assert!(
        !lines.is_empty() && lines.iter().all(|l| l.contains(&format!("auth=[Basic {USERS_BASIC}]"))),
        "{lines:?}"
    );
    // Without credentials the location answers 401: exit 5, nothing kept.
    let out2 = dir.join("out2.bin");
    let o = dir
        .ringdl()
        .arg("-o")
        .arg(&out2)
        .arg(url("auth", MIB + 1, "basic-none"))
        .run();
    o.assert_code(exit::HTTP_STATUS);
    assert!(o.stderr_text().contains("401"), "{}", o.stderr_text());
}

#[test]
fn user_option_sends_basic_credentials() {
    let n = nginx();
    let file = n.file(4 * MIB);
    let dir = TestDir::new("users_basic_opt");
    let out = dir.join("out.bin");
    let o = dir
        .ringdl()
        .args(["-x", "4", "--user", "alice:p@ss:w0rd%", "-o"])
        .arg(&out)
        .arg(url("auth", 4 * MIB, "basic-opt"))
        .run();
    o.assert_success();
    assert_same_bytes(&out, file);
    // A wrong password: 401.
    let o = dir
        .ringdl()
        .args(["--user", "alice:wrong", "-o"])
        .arg(dir.join("wrong.bin"))
        .arg(url("auth", 4 * MIB, "basic-wrong"))
        .run();
    o.assert_code(exit::HTTP_STATUS);
}

#[test]
fn header_and_user_agent_options_reach_the_server() {
    let n = nginx();
    let file = n.file(MIB + 1);
    let dir = TestDir::new("users_header");
    let out = dir.join("out.bin");
    let o = dir
        .ringdl()
        .args([
            "-x",
            "4",
            "-H",
            "X-Token:  t0k3n",
            "--user-agent",
            "fw-updater/2.1",
            "-o",
        ])
        .arg(&out)
        .arg(url("token", MIB + 1, "hdr-ok"))
        .run();
    o.assert_success();
    assert_same_bytes(&out, file);
    let lines = n.users_log("hdr-ok");
    assert!(
        !lines.is_empty()
            && lines
                .iter()
                .all(|l| l.contains("token=[t0k3n]") && l.contains("ua=[fw-updater/2.1]")),
        "{lines:?}"
    );
    // Without the header: 403.
    dir.ringdl()
        .arg("-o")
        .arg(dir.join("no.bin"))
        .arg(url("token", MIB + 1, "hdr-none"))
        .run()
        .assert_code(exit::HTTP_STATUS);
    // Injection and malformed names are usage errors before any request (a NUL cannot
    // be in an argument; the unit tests of cli.rs and http check it).
    for bad in [
        "X-Token: t0k3n\r\nX-Evil: 1",
        "X-Token: a\nb",
        "X Token: t",
        "NoColon",
        "Host: x",
    ] {
        let o = dir
            .ringdl()
            .arg("-H")
            .arg(bad)
            .arg("-o")
            .arg(dir.join("bad.bin"))
            .arg(url("token", MIB + 1, "hdr-bad"))
            .run();
        o.assert_code(exit::USAGE);
        assert!(o.stderr_text().contains("-H"), "{}", o.stderr_text());
    }
    assert!(
        n.users_log("hdr-bad").is_empty(),
        "a rejected header still made a request"
    );
}

/// curl's CVE-2018-1000007 class: `127.0.0.1` redirects to `localhost` (another
/// origin); the credentials and the `Authorization`/`Cookie` given with `-H` must not
/// follow, an ordinary `-H` field does.
#[test]
fn credentials_and_cookies_do_not_follow_a_redirect_to_another_origin() {
    let n = nginx();
    let file = n.file(MIB + 1);
    let dir = TestDir::new("users_redirect_other");
    let out = dir.join("out.bin");
    let with = url("to-other", MIB + 1, "cross-origin").replace("http://", "http://alice:p%40ss%3Aw0rd%25@");
    let o = dir
        .ringdl()
        .args([
            "-x",
            "4",
            "-v",
            "-H",
            "Cookie: session=s3cr3t",
            "-H",
            "X-Token: t0k3n",
            "-o",
        ])
        .arg(&out)
        .arg(&with)
        .run();
    o.assert_success();
    assert_same_bytes(&out, file);
    let lines = n.users_log("cross-origin");
    let first: Vec<_> = lines.iter().filter(|l| l.contains("/to-other/")).collect();
    let after: Vec<_> = lines.iter().filter(|l| l.contains("/open/")).collect();
    // The first origin got them (so the check below is not vacuous) ...
    assert!(
        !first.is_empty() && first.iter().all(|l| l.contains("auth=[Basic ") && l.contains("s3cr3t")),
        "{lines:?}"
    );
    // ... the other origin did not, but got the ordinary field.
    assert!(!after.is_empty(), "no request reached the redirect target: {lines:?}");
    for l in &after {
        assert!(l.starts_with("localhost:"), "{l}");
        assert!(
            l.contains("auth=[-]") && l.contains("cookie=[-]"),
            "credentials followed: {l}"
        );
        assert!(l.contains("token=[t0k3n]"), "{l}");
    }
    let err = o.stderr_text();
    assert!(err.contains("not sending Cookie, the credentials"), "{err}");
    assert!(!err.contains("s3cr3t"), "{err}");
}

/// A redirect on the same origin keeps the credentials (the target requires them).
#[test]
fn credentials_follow_a_redirect_on_the_same_origin() {
    let n = nginx();
    let file = n.file(MIB + 1);
    let dir = TestDir::new("users_redirect_same");
    let out = dir.join("out.bin");
    let o = dir
        .ringdl()
        .args(["-x", "4", "-u", "alice:p@ss:w0rd%", "-o"])
        .arg(&out)
        .arg(url("to-same", MIB + 1, "same-origin"))
        .run();
    o.assert_success();
    assert_same_bytes(&out, file);
}
