//! Proxies: which proxy a URL goes through (`--proxy`, `--noproxy` and the environment,
//! read as curl reads it) and the route to an origin. The tunnels through them are in
//! [`crate::control::tunnel`] (HTTP `CONNECT`) and [`crate::control::socks`] (SOCKS5).

use crate::control::Fail;
use crate::err;
use crate::error::{Kind, Result};
use http::{ProxyUrl, Url};

/// The proxy one download goes through.
#[derive(Clone, Debug)]
pub struct Proxy {
    /// Where the proxy listens; its Display hides the credentials.
    pub url: ProxyUrl,
    /// `Basic base64(user:password)` (RFC 7617), sent as `Proxy-Authorization` (HTTP
    /// proxies only).
    pub authorization: Option<String>,
    /// Each connection opens a tunnel to the origin first: a `CONNECT` for an https
    /// origin through an HTTP proxy, a SOCKS5 CONNECT for any origin through a SOCKS5
    /// proxy. False for plain http through an HTTP proxy: requests go to the proxy in
    /// absolute-form.
    pub tunnel: bool,
    /// SOCKS5 (`socks5://`, `socks5h://`): the user name and password (RFC 1929), and,
    /// for `socks5://`, the origin's address resolved here (set by the caller).
    pub socks: Option<Socks>,
    /// Where the proxy came from: `--proxy`, `https_proxy`, `ALL_PROXY`...
    pub source: &'static str,
}

/// What a SOCKS5 proxy is told: credentials and the destination's address.
#[derive(Clone)]
pub struct Socks {
    /// User name and password (RFC 1929), from `--proxy-user` or the proxy URL.
    pub credentials: Option<(Vec<u8>, Vec<u8>)>,
    /// `socks5://`: the origin's address, resolved here; `None` for `socks5h://` (the
    /// proxy resolves the name).
    pub target: Option<std::net::SocketAddr>,
}

impl std::fmt::Debug for Socks {
    /// Never shows the credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Socks")
            .field("credentials", &self.credentials.as_ref().map(|_| "***"))
            .field("target", &self.target)
            .finish()
    }
}

/// Where a download's connections go: the addresses to connect to (the proxy's when
/// there is one), and the proxy.
#[derive(Clone)]
pub struct Route {
    /// Resolved addresses, tried in order.
    pub addrs: Vec<std::net::SocketAddr>,
    /// The proxy in between, if any.
    pub proxy: Option<Proxy>,
}

/// What decided that a URL goes direct.
#[derive(Debug, PartialEq, Eq)]
pub enum Direct {
    /// No proxy is configured for the scheme.
    NoProxy,
    /// The host matches `--noproxy` or `no_proxy` (names the source).
    Exempt(&'static str),
    /// `--proxy ""` or an empty proxy variable (names it).
    Disabled(&'static str),
}

/// Picks the proxy for `url` as curl does (`lib/url.c`, `detect_proxy`):
///
/// 1. The no-proxy list is `--noproxy` when given, else `no_proxy`, else `NO_PROXY`
///    (see [`http::no_proxy_matches`]); a matching host goes direct, also past `--proxy`.
/// 2. `--proxy URL` when given (`""` = no proxy).
/// 3. The environment: `http_proxy` for http (lower case only: a CGI program gets the
///    client's `Proxy:` request header as `HTTP_PROXY`, the "httpoxy" hole, so curl
///    ignores the upper-case form), `https_proxy` then `HTTPS_PROXY` for https, then
///    `all_proxy`, then `ALL_PROXY`. The first variable that is set decides; set and
///    empty means no proxy.
///
/// The proxy URL's scheme says how: `http://` (or none), `socks5://`, `socks5h://`
/// (as curl, also when the variable is `https_proxy` or `http_proxy`).
///
/// `proxy_user` (`--proxy-user USER:PASSWORD`, curl's flag) gives the proxy's
/// credentials (Basic for HTTP, RFC 1929 for SOCKS5) apart from its URL, and wins over
/// the URL's userinfo. `env` looks a variable up (`std::env::var` in the program, a
/// table in tests).
///
/// # Errors
/// [`Kind::Usage`] for a proxy URL that does not parse or has another scheme, or SOCKS5
/// credentials longer than 255 bytes.
pub fn choose(
    url: &Url,
    proxy: Option<&str>,
    noproxy: Option<&str>,
    proxy_user: Option<&crate::config::Credentials>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<std::result::Result<Proxy, Direct>> {
    let (list, list_src) = match noproxy {
        Some(l) => (Some(l.to_owned()), "--noproxy"),
        None => match env("no_proxy") {
            Some(l) => (Some(l), "no_proxy"),
            None => (env("NO_PROXY"), "NO_PROXY"),
        },
    };
    if let Some(list) = list
        && http::no_proxy_matches(&list, url.host())
    {
        return Ok(Err(Direct::Exempt(list_src)));
    }
    let https = url.scheme() == http::Scheme::Https;
    let (value, source) = match proxy {
        Some(p) => (p.to_owned(), "--proxy"),
        None => {
            let names: &[&'static str] = if https {
                &["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]
            } else {
                &["http_proxy", "all_proxy", "ALL_PROXY"]
            };
            match names.iter().find_map(|&n| env(n).map(|v| (v, n))) {
                Some(found) => found,
                None => return Ok(Err(Direct::NoProxy)),
            }
        }
    };
    if value.trim().is_empty() {
        return Ok(Err(Direct::Disabled(source)));
    }
    let parsed = ProxyUrl::parse(&value).map_err(|e| err!(Usage, "bad proxy in {source}: {e}"))?;
    let credentials = match proxy_user {
        Some(c) => Some((c.user.clone(), c.password.clone())),
        None => parsed
            .credentials()
            .map(|(u, p)| (u.as_bytes().to_vec(), p.as_bytes().to_vec())),
    };
    if parsed.scheme() != http::ProxyScheme::Http {
        if credentials
            .as_ref()
            .is_some_and(|(u, p)| u.is_empty() || u.len() > 255 || p.len() > 255)
        {
            return Err(err!(
                Usage,
                "proxy {parsed} (from {source}): {}",
                http::Socks5Error::CredentialsTooLong
            ));
        }
        return Ok(Ok(Proxy {
            url: parsed,
            authorization: None,
            tunnel: true,
            socks: Some(Socks {
                credentials,
                target: None,
            }),
            source,
        }));
    }
    let authorization =
        credentials.map(|(u, p)| format!("Basic {}", crate::base64::encode(&[&u[..], b":", &p[..]].concat())));
    Ok(Ok(Proxy {
        url: parsed,
        authorization,
        tunnel: https,
        socks: None,
        source,
    }))
}

impl Proxy {
    /// The proxy answered 407 Proxy Authentication Required (RFC 9110 §15.5.8) to the
    /// `CONNECT` or to a request in absolute-form, or 401 to the `CONNECT`. Not worth a
    /// retry.
    pub(crate) fn auth_failure(&self, code: u16, reason: &str) -> Fail {
        let hint = if self.authorization.is_some() {
            "it rejected the user name and password"
        } else {
            "give them with --proxy-user USER:PASSWORD or in the proxy URL: http://user:password@host:port"
        };
        Fail::fatal(
            Kind::HttpStatus,
            format!("proxy {} wants authentication ({code} {reason}): {hint}", self.url),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(
        url: &str,
        proxy: Option<&str>,
        noproxy: Option<&str>,
        env: &[(&str, &str)],
    ) -> std::result::Result<Proxy, Direct> {
        let url = Url::parse(url).unwrap();
        choose(&url, proxy, noproxy, None, |k| {
            env.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
        })
        .unwrap()
    }

    #[test]
    fn environment_as_curl_reads_it() {
        let p = pick("http://h/f", None, None, &[("http_proxy", "p:3128")]).unwrap();
        assert_eq!((p.url.port(), p.source, p.tunnel), (3128, "http_proxy", false));
        // Upper-case HTTP_PROXY is ignored (httpoxy); ALL_PROXY is not.
        assert_eq!(
            pick("http://h/f", None, None, &[("HTTP_PROXY", "p")]).unwrap_err(),
            Direct::NoProxy
        );
        let p = pick("http://h/f", None, None, &[("HTTP_PROXY", "p"), ("ALL_PROXY", "a")]).unwrap();
        assert_eq!((p.url.host(), p.source), ("a", "ALL_PROXY"));
        let p = pick(
            "https://h/f",
            None,
            None,
            &[("HTTPS_PROXY", "u:pw@s"), ("all_proxy", "a")],
        )
        .unwrap();
        assert_eq!((p.url.host(), p.source, p.tunnel), ("s", "HTTPS_PROXY", true));
        assert_eq!(p.authorization.as_deref(), Some("Basic dTpwdw=="));
        let p = pick("https://h/f", None, None, &[("https_proxy", "x"), ("HTTPS_PROXY", "y")]).unwrap();
        assert_eq!(p.url.host(), "x");
        // --proxy wins over the environment; "" means none.
        let p = pick("https://h/f", Some("o:1"), None, &[("https_proxy", "x")]).unwrap();
        assert_eq!((p.url.host(), p.source), ("o", "--proxy"));
        assert_eq!(
            pick("https://h/f", Some(""), None, &[("https_proxy", "x")]).unwrap_err(),
            Direct::Disabled("--proxy")
        );
        assert_eq!(
            pick("https://h/f", None, None, &[("https_proxy", ""), ("all_proxy", "a")]).unwrap_err(),
            Direct::Disabled("https_proxy")
        );
        // no_proxy applies to --proxy too; --noproxy replaces the variable.
        let env = [("https_proxy", "x"), ("no_proxy", "h,other"), ("NO_PROXY", "zzz")];
        assert_eq!(
            pick("https://a.h/f", Some("o"), None, &env).unwrap_err(),
            Direct::Exempt("no_proxy")
        );
        assert_eq!(pick("https://zzz/f", None, None, &env).unwrap().url.host(), "x");
        assert_eq!(
            pick(
                "https://zzz/f",
                None,
                None,
                &[("https_proxy", "x"), ("NO_PROXY", "zzz")]
            )
            .unwrap_err(),
            Direct::Exempt("NO_PROXY")
        );
        assert_eq!(pick("https://a.h/f", None, Some("b"), &env).unwrap().url.host(), "x");
        assert_eq!(
            pick("https://b/f", None, Some("b"), &env).unwrap_err(),
            Direct::Exempt("--noproxy")
        );
        assert_eq!(
            pick(
                "http://10.1.2.3/f",
                None,
                None,
                &[("http_proxy", "x"), ("no_proxy", "10.0.0.0/8")]
            )
            .unwrap_err(),
            Direct::Exempt("no_proxy")
        );
        let p = pick("http://h/f", None, None, &[("http_proxy", "socks5h://u:pw@s")]).unwrap();
        assert_eq!((p.url.host(), p.url.port(), p.tunnel), ("s", 1080, true));
        let socks = p.socks.expect("a SOCKS5 proxy");
        assert_eq!(socks.credentials, Some((b"u".to_vec(), b"pw".to_vec())));
        assert_eq!(p.authorization, None);
        assert!(!format!("{socks:?}").contains("pw"));
        let p = pick("https://h/f", None, None, &[("ALL_PROXY", "socks5://s:9")]).unwrap();
        assert_eq!((p.source, p.tunnel, p.socks.is_some()), ("ALL_PROXY", true, true));
        let bad = choose(
            &Url::parse("http://h/").unwrap(),
            Some("socks4://s"),
            None,
            None,
            |_| None,
        );
        assert_eq!(bad.err().map(|e| e.kind), Some(Kind::Usage));
    }

    #[test]
    fn proxy_user_wins_over_the_urls_userinfo() {
        let url = Url::parse("https://h/f").unwrap();
        let c = crate::config::Credentials {
            user: b"alice".to_vec(),
            password: b"p@ss:w".to_vec(),
        };
        let env = |k: &str| (k == "https_proxy").then(|| "u:pw@s:3128".to_owned());
        let p = choose(&url, None, None, Some(&c), env).unwrap().unwrap();
        // base64("alice:p@ss:w")
        assert_eq!(p.authorization.as_deref(), Some("Basic YWxpY2U6cEBzczp3"));
        let p = choose(&url, Some("s:3128"), None, Some(&c), |_| None).unwrap().unwrap();
        assert_eq!(p.authorization.as_deref(), Some("Basic YWxpY2U6cEBzczp3"));
        let p = choose(&url, None, None, None, env).unwrap().unwrap();
        assert_eq!(p.authorization.as_deref(), Some("Basic dTpwdw=="));
    }
}
