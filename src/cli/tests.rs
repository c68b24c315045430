//! Unit tests of the command line (`super`): options, usage errors, and that `--help`,
//! `ringdl.1` and the options table of docs/options.md name the same options.

use super::*;

fn p(args: &[&str]) -> Result<Command> {
    parse(args.iter().map(std::ffi::OsString::from))
}

#[test]
fn defaults_and_options() {
    let Command::Download(o) = p(&["-x", "16", "-o", "out.bin", "--engine", "buffered", "http://h/f"]).unwrap() else {
        panic!("not a download");
    };
    assert_eq!(o.connections, 16);
    assert_eq!(o.output, OutputTarget::File("out.bin".into()));
    assert_eq!(o.engine, Some(EngineKind::Buffered));
    assert_eq!(o.io, IoChoice::Auto);
    let Command::Download(o) = p(&["--io", "epoll", "http://h/f"]).unwrap() else {
        panic!("download")
    };
    assert_eq!(o.io, IoChoice::Epoll);
    assert!(!o.sqpoll);
    let Command::Download(o) = p(&["--sqpoll", "--io", "uring", "http://h/f"]).unwrap() else {
        panic!("download")
    };
    assert!(o.sqpoll && o.io == IoChoice::Uring);
    assert_eq!(o.url, "http://h/f");
    let Command::Download(o) = p(&["http://h/f", "-o", "-"]).unwrap() else {
        panic!("not a download");
    };
    assert_eq!(o.output, OutputTarget::Stdout);
    assert_eq!(o.connections, 4);
}

#[test]
fn usage_errors() {
    for args in [
        &[][..],
        &["-x", "0", "u"],
        &["-x", "65", "u"],
        &["--bogus", "u"],
        &["--engine", "x", "u"],
        &["--io", "poll", "u"],
        &["--sqpoll", "--io", "epoll", "u"],
        &["--io", "epoll", "--sqpoll", "u"],
        &["-c", "--no-continue", "u"],
    ] {
        let e = p(args).err().unwrap_or_else(|| panic!("{args:?} accepted"));
        assert_eq!(e.kind, crate::error::Kind::Usage, "{args:?}");
    }
    assert!(matches!(p(&["-h"]), Ok(Command::Help)));
}

#[test]
fn mirrors_keep_their_own_userinfo_and_share_user() {
    let Command::Download(o) = p(&["http://a:1@h/f", "http://g/f", "https://b:2@k/f"]).unwrap() else {
        panic!("not a download");
    };
    assert_eq!(o.url, "http://h/f");
    assert_eq!(o.credentials.as_ref().unwrap().user, b"a");
    let m: Vec<_> = o
        .mirrors
        .iter()
        .map(|m| (m.url.as_str(), m.credentials.as_ref().map(|c| c.user.clone())))
        .collect();
    assert_eq!(m, [("http://g/f", None), ("https://k/f", Some(b"b".to_vec()))]);
    // --user goes to every URL given, before or after them on the line.
    let Command::Download(o) = p(&["http://a:1@h/f", "https://b:2@k/f", "-u", "u:p"]).unwrap() else {
        panic!("not a download");
    };
    assert_eq!(o.credentials.as_ref().unwrap().user, b"u");
    assert_eq!(o.mirrors[0].credentials.as_ref().unwrap().user, b"u");
}

#[test]
fn headers_user_agent_and_credentials() {
    let Command::Download(o) = p(&[
        "-H",
        "X-Token:  t0k3n ",
        "-A",
        "first",
        "--header",
        "user-agent: second",
        "-H",
        "X-Token: again",
        "https://al%40ice:p%3Ass@h/f",
    ])
    .unwrap() else {
        panic!("not a download");
    };
    assert_eq!(o.url, "https://h/f");
    let h: Vec<_> = o.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    assert_eq!(
        h,
        [("X-Token", "t0k3n"), ("user-agent", "second"), ("X-Token", "again")]
    );
    let c = o.credentials.as_ref().unwrap();
    assert_eq!((&c.user[..], &c.password[..]), (&b"al@ice"[..], &b"p:ss"[..]));
    assert!(!format!("{o:?}").contains("p:ss"));
    // --user wins over the URL's userinfo.
    let Command::Download(o) = p(&["-u", "bob:x:y", "http://a:b@h/"]).unwrap() else {
        panic!("not a download");
    };
    let c = o.credentials.unwrap();
    assert_eq!((&c.user[..], &c.password[..]), (&b"bob"[..], &b"x:y"[..]));
    assert_eq!(o.url, "http://h/");
    for bad in [
        &["-H", "X-A: a\r\nX-B: b", "u"][..],
        &["-H", "X-A: a\nb", "u"],
        &["-H", "X-A: a\0b", "u"],
        &["-H", "X A: b", "u"],
        &["-H", ": b", "u"],
        &["-H", "NoColon", "u"],
        &["-H", "Host: evil", "u"],
        &["-H", "Range: bytes=0-", "u"],
        &["-A", "a\rb", "u"],
        &["-u", "nocolon", "u"],
        &["--json", "-", "-o", "-", "u"],
        &["--json", "", "u"],
        &["--checksum-file", "S", "--checksum", "sha256=00", "u"],
    ] {
        let e = p(bad).err().unwrap_or_else(|| panic!("{bad:?} accepted"));
        assert_eq!(e.kind, crate::error::Kind::Usage, "{bad:?}");
    }
}

#[test]
fn timeouts_take_fractional_seconds() {
    let Command::Download(o) = p(&["--connect-timeout", "1.5", "--stall-timeout", "0.5", "u"]).unwrap() else {
        panic!("not a download");
    };
    assert_eq!((o.connect_timeout_s, o.stall_timeout_s), (1.5, 0.5));
    let Command::Download(o) = p(&["--connect-timeout", "7", "--stall-timeout", "1e3", "u"]).unwrap() else {
        panic!("not a download");
    };
    assert_eq!((o.connect_timeout_s, o.stall_timeout_s), (7.0, 1000.0));
    for opt in ["--connect-timeout", "--stall-timeout"] {
        for bad in [
            "0", "-1", "-0.5", "NaN", "nan", "inf", "-inf", "infinity", "1e300", "1000001", "", "1,5", "x",
        ] {
            let e = p(&[opt, bad, "u"])
                .err()
                .unwrap_or_else(|| panic!("{opt} {bad:?} accepted"));
            assert_eq!(e.kind, crate::error::Kind::Usage, "{opt} {bad:?}");
        }
    }
    assert!(matches!(p(&["-V"]), Ok(Command::Version)));
}

#[test]
fn limit_rate_like_curl() {
    for (v, want) in [
        ("1000", 1000),
        ("500K", 500 << 10),
        ("10m", 10 << 20),
        ("1G", 1 << 30),
        ("1.5k", 1536),
    ] {
        let Command::Download(o) = p(&["--limit-rate", v, "u"]).unwrap() else {
            panic!("not a download");
        };
        assert_eq!(o.limit_rate, Some(want), "{v}");
    }
    for bad in ["0", "0K", "-1M", "x", "", "K", "10T", "nan", "inf"] {
        let e = p(&["--limit-rate", bad, "u"])
            .err()
            .unwrap_or_else(|| panic!("{bad:?} accepted"));
        assert_eq!(e.kind, crate::error::Kind::Usage, "{bad:?}");
    }
    // Too large is said as such, not as "at least 1 byte/s".
    for big in ["99999999999G", "1e30", "inf"] {
        let e = p(&["--limit-rate", big, "u"]).err().unwrap();
        assert!(e.to_string().contains("too large"), "{big}: {e}");
    }
}

#[test]
fn resolve_takes_curls_syntax() {
    let Command::Download(o) = p(&[
        "--resolve",
        "Example.org:443:127.0.0.1,[::1]",
        "--resolve",
        "[::1]:80:::2",
        "u",
    ])
    .unwrap() else {
        panic!("not a download");
    };
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    assert_eq!(
        o.resolve,
        [
            Resolve {
                host: "example.org".into(),
                port: 443,
                addrs: vec![ip("127.0.0.1"), ip("::1")]
            },
            Resolve {
                host: "::1".into(),
                port: 80,
                addrs: vec![ip("::2")]
            },
        ]
    );
    for bad in [
        "h",
        "h:443",
        "h:443:",
        ":443:1.2.3.4",
        "h:0:1.2.3.4",
        "h:x:1.2.3.4",
        "h:443:name",
        "[::1:80:::1",
    ] {
        let e = p(&["--resolve", bad, "u"])
            .err()
            .unwrap_or_else(|| panic!("--resolve {bad:?} accepted"));
        assert_eq!(e.kind, crate::error::Kind::Usage, "{bad:?}");
    }
}

#[test]
fn proxy_user_is_user_colon_password_and_never_echoed() {
    let Command::Download(o) = p(&["--proxy-user", "al:p@ss:w", "http://h/f"]).unwrap() else {
        panic!("not a download")
    };
    let c = o.proxy_user.expect("--proxy-user taken");
    assert_eq!((&c.user[..], &c.password[..]), (&b"al"[..], &b"p@ss:w"[..]));
    assert!(o.credentials.is_none(), "--proxy-user is not --user");
    let e = p(&["--proxy-user", "s3cr3t", "http://h/f"])
        .err()
        .expect("no colon accepted");
    assert_eq!(e.kind, crate::error::Kind::Usage);
    assert!(
        e.msg.contains("--proxy-user wants USER:PASSWORD") && !e.msg.contains("s3cr3t"),
        "{}",
        e.msg
    );
}

/// Every long option `--help` lists is in the manual page and in docs/options.md's
/// table, and the manual names no option `--help` does not list.
#[test]
fn help_manual_and_options_doc_name_the_same_options() {
    let longs = |text: &str, dash: &str| {
        let mut v: Vec<String> = text
            .match_indices(dash)
            .map(|(i, _)| {
                let rest = &text[i + dash.len()..];
                let rest = rest.replace("\\-", "-");
                rest.chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '-')
                    .collect::<String>()
            })
            .filter(|n| n.len() > 1 && !n.starts_with('-'))
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let help = longs(HELP, "--");
    let man = longs(include_str!("../../ringdl.1"), "\\-\\-");
    let options_doc = include_str!("../../docs/options.md");
    assert!(help.len() > 30, "{help:?}");
    for o in &help {
        assert!(man.contains(o), "--{o} is in --help but not in ringdl.1");
        assert!(
            options_doc.contains(&format!("`--{o}")) || options_doc.contains(&format!(", --{o}")),
            "--{o} is in --help but not in docs/options.md"
        );
    }
    for o in &man {
        assert!(help.contains(o), "ringdl.1 names --{o}, which --help does not list");
    }
}

#[test]
fn signature_and_trusted_key_go_together() {
    let e = p(&["--signature", "f.sig", "http://h/f"]).err().unwrap();
    assert!(e.msg.contains("--trusted-key"), "{}", e.msg);
    assert!(p(&["--trusted-key", "k.pub", "http://h/f"]).is_err());
    assert!(p(&["--signature-namespace", "", "http://h/f"]).is_err());
    let Command::Download(o) = p(&[
        "--signature",
        "https://h/f.sig",
        "--trusted-key",
        "a",
        "--trusted-key",
        "b",
        "u",
    ])
    .unwrap() else {
        panic!()
    };
    assert_eq!(o.trusted_keys.len(), 2);
    assert_eq!(o.signature_namespace, "file");
}

#[test]
fn several_files_z_i_d_and_what_they_refuse() {
    // -Z: one file per URL; without it, mirrors of one file (as before).
    let Command::Files(o, f) = p(&["-Z", "-d", "dl", "http://h/a", "http://h/b", "--fail-fast"]).unwrap() else {
        panic!("-Z is several files")
    };
    assert_eq!(f.given, [vec!["http://h/a".to_owned()], vec!["http://h/b".to_owned()]]);
    assert!(f.fail_fast && f.input.is_none());
    assert_eq!(o.dir.as_deref(), Some(std::path::Path::new("dl")));
    let Command::Download(o) = p(&["http://h/a", "http://h/b"]).unwrap() else {
        panic!("two URLs without -Z are one file")
    };
    assert_eq!(o.mirrors.len(), 1);
    // -i with URLs: theirs first, as one file of mirrors.
    let Command::Files(_, f) = p(&["-i", "-", "http://h/a", "http://g/a"]).unwrap() else {
        panic!()
    };
    assert_eq!(f.input.as_deref(), Some(std::path::Path::new("-")));
    assert_eq!(f.given.len(), 1);
    assert!(p(&["-Z"]).is_err(), "-Z needs a URL");
    for bad in [
        &["-o", "x"][..],
        &["-o", "-"],
        &["--etag-save", "e"],
        &["--control", "c"],
    ] {
        let mut args = vec!["-i", "l.txt"];
        args.extend_from_slice(bad);
        let e = p(&args).err().unwrap();
        assert!(e.msg.contains("names one file"), "{bad:?}: {}", e.msg);
    }
    // --user goes to every URL of a file; a URL's userinfo only to its own.
    let (_, f) = match p(&["-Z", "http://a:b@h/x"]).unwrap() {
        Command::Files(o, f) => (o, f),
        _ => panic!(),
    };
    let mut o = Config::clone(&p_base());
    set_urls(&mut o, f.given[0].clone());
    assert_eq!(o.url, "http://h/x");
    assert_eq!(o.credentials.as_ref().map(|c| c.user.clone()), Some(b"a".to_vec()));
}

/// A `Config` with the defaults (as `-Z` leaves it before its URLs are set).
fn p_base() -> Box<Config> {
    match p(&["-Z", "http://h/x"]).unwrap() {
        Command::Files(o, _) => o,
        _ => panic!(),
    }
}
