//! The header fields a request carries beyond the standard ones: `-H` (`--user-agent`
//! is parsed into one), Basic credentials (RFC 7617), and which of them may follow a
//! redirect to another origin. `app/route.rs` asks per hop; `event/assign.rs`
//! `start_job` puts them on the request that `http::Request` writes.

use http::Url;

use crate::config::{Config, Credentials};

/// Fields that carry credentials: sent only to the origin the user named, and never
/// printed (curl's CVE-2018-1000007 and CVE-2022-27776 class).
pub(crate) const SECRET_FIELDS: [&str; 3] = ["Authorization", "Cookie", "Proxy-Authorization"];

/// Whether `name` is one of [`SECRET_FIELDS`] (field names are case-insensitive,
/// RFC 9110 §5.1).
pub(crate) fn is_secret(name: &str) -> bool {
    SECRET_FIELDS.iter().any(|s| s.eq_ignore_ascii_case(name))
}

/// The same origin (RFC 6454 §4: scheme, host and port).
pub(crate) fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme() && a.host() == b.host() && a.port() == b.port()
}

/// The extra fields for requests to `url` when the user named `first`: every `-H` in
/// order, then `Authorization: Basic …` from `credentials` (`--user`, else `first`'s own
/// userinfo) unless a `-H Authorization` is given. On another origin than `first`'s the [`SECRET_FIELDS`] and
/// the credentials are left out; the second value names what was left out.
pub(crate) fn for_hop(
    opts: &Config,
    credentials: Option<&Credentials>,
    first: &Url,
    url: &Url,
) -> (Vec<(String, String)>, Vec<String>) {
    let trusted = same_origin(first, url);
    let mut send = Vec::with_capacity(opts.headers.len() + 1);
    let mut dropped = Vec::new();
    for (name, value) in &opts.headers {
        if !trusted && is_secret(name) {
            dropped.push(name.clone());
        } else {
            send.push((name.clone(), value.clone()));
        }
    }
    if let Some(c) = credentials
        && !opts
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("Authorization"))
    {
        if trusted {
            let mut pair = Vec::with_capacity(c.user.len() + 1 + c.password.len());
            pair.extend_from_slice(&c.user);
            pair.push(b':');
            pair.extend_from_slice(&c.password);
            send.push((
                "Authorization".to_owned(),
                format!("Basic {}", crate::base64::encode(&pair)),
            ));
        } else {
            dropped.push("the credentials".to_owned());
        }
    }
    (send, dropped)
}

/// The value as `-v` may print it: `<redacted>` for [`SECRET_FIELDS`].
pub(crate) fn shown(name: &str, value: &str) -> String {
    if is_secret(name) {
        "<redacted>".to_owned()
    } else {
        value.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Command, parse};

    fn opts(args: &[&str]) -> Config {
        match parse(args.iter().map(std::ffi::OsString::from)) {
            Ok(Command::Download(o)) => *o,
            _ => panic!("not a download"),
        }
    }

    #[test]
    fn credentials_and_secret_fields_stay_on_the_origin() {
        let o = opts(&["-H", "Cookie: c=1", "-H", "X-A: 1", "http://u:p@h:8080/f"]);
        let first = Url::parse(&o.url).unwrap();
        let (send, dropped) = for_hop(&o, o.credentials.as_ref(), &first, &first.join(b"/g").unwrap());
        let basic = ("Authorization".to_owned(), "Basic dTpw".to_owned());
        assert_eq!(send[2], basic);
        assert_eq!(send.len(), 3);
        assert!(dropped.is_empty());
        for other in ["http://h:8081/f", "https://h:8080/f", "http://g:8080/f"] {
            let (send, dropped) = for_hop(&o, o.credentials.as_ref(), &first, &Url::parse(other).unwrap());
            assert_eq!(send, [("X-A".to_owned(), "1".to_owned())], "{other}");
            assert_eq!(dropped, ["Cookie", "the credentials"], "{other}");
        }
        // A -H Authorization replaces the credentials.
        let o = opts(&["-H", "authorization: Bearer t", "-u", "a:b", "http://h/"]);
        let first = Url::parse(&o.url).unwrap();
        let (send, _) = for_hop(&o, o.credentials.as_ref(), &first, &first);
        assert_eq!(send, [("authorization".to_owned(), "Bearer t".to_owned())]);
        assert_eq!(shown("AUTHORIZATION", "Bearer t"), "<redacted>");
        assert_eq!(shown("X-A", "1"), "1");
    }
}
