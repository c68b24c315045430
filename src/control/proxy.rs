//! Proxies: which proxy a URL goes through (`--proxy`, `--noproxy` and the environment,
//! read as curl reads it), and the `CONNECT` tunnel each https connection opens through
//! an HTTP proxy before its TLS handshake (RFC 9110 §9.3.6). SOCKS5 tunnels are in
//! [`crate::control::socks`].

use crate::control::origin::Origin;
use crate::control::*;
use crate::err;
use crate::error::{Kind, Result};
use http::{Header, ProxyUrl, Status, Url};

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

/// Where a tunnel's opening stands after the proxy's answer ([`tunnel_answer`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Tunnel {
    /// The answer is incomplete: post a RECV.
    NeedMore,
    /// The next handshake message is queued in the connection's `out` (SOCKS5): send it.
    Sent,
    /// The tunnel is open (bytes after the answer stay for the origin): start TLS.
    Open,
}

/// Connection `i` (`c`) is connected to `origin`'s proxy: queue its `CONNECT` for `url`'s
/// origin (RFC 9110 §9.3.6), or its SOCKS5 greeting.
///
/// # Errors
/// A fatal `Usage` failure for a request that cannot be written.
pub(crate) fn start_tunnel(c: &mut Conn, origin: &Origin, url: &Url) -> std::result::Result<(), Fail> {
    let proxy = origin.proxy.as_ref().expect("a tunnel needs a proxy");
    if proxy.socks.is_some() {
        return crate::control::socks::start_socks(c, proxy, url);
    }
    c.st = St::Tunnel;
    c.out.clear();
    http::write_connect_request(
        url,
        crate::control::USER_AGENT,
        proxy.authorization.as_deref(),
        &mut c.out,
    )
    .map_err(|e| Fail::fatal(Kind::Usage, format!("CONNECT request: {e}")))
}

/// The proxy's answer on connection `i` (`c`), from its read block: a 2xx to `CONNECT`
/// (or SOCKS5's success) opens the tunnel, an incomplete head asks for more, anything else
/// fails the connection with the proxy's status. `others_open`: other connections to the
/// same origin are open or opening tunnels (a refusal is then the proxy's cap on tunnels
/// per client, not an error).
///
/// # Errors
/// The failure of the connection, with the proxy's answer in words.
pub(crate) fn tunnel_answer(
    c: &mut Conn,
    i: usize,
    origin: &Origin,
    url: &Url,
    verbose: u8,
    others_open: bool,
) -> std::result::Result<Tunnel, Fail> {
    let proxy = origin.proxy.as_ref().expect("a tunnel needs a proxy");
    if c.socks.is_some() {
        return crate::control::socks::socks_answer(c, i, proxy, verbose);
    }
    let target = http::authority(url);
    loop {
        let rbuf = c.rbuf.as_ref().expect("idle connection holds its read block");
        let mut headers = [Header::EMPTY; http::MAX_FIELDS];
        let (len, code, reason) = match http::parse_head(&rbuf[c.rlo..c.rhi], &mut headers) {
            Ok(Status::Partial) => {
                if c.eof {
                    return Err(Fail::retry(
                        Kind::Network,
                        format!(
                            "proxy {} closed the connection before answering CONNECT {target}",
                            proxy.url
                        ),
                    ));
                }
                // (The read block holds the whole answer or the answer is refused.)
                if c.rhi - c.rlo >= rbuf.len() {
                    return Err(Fail::fatal(
                        Kind::Protocol,
                        format!("proxy {}: CONNECT answer larger than {} bytes", proxy.url, rbuf.len()),
                    ));
                }
                return Ok(Tunnel::NeedMore);
            }
            Ok(Status::Complete((len, r))) => (len, r.code, String::from_utf8_lossy(r.reason).into_owned()),
            Err(e) => {
                return Err(Fail::fatal(
                    Kind::Protocol,
                    format!("proxy {}: malformed answer to CONNECT {target}: {e}", proxy.url),
                ));
            }
        };
        c.rlo += len;
        match code {
            100..=199 => continue,
            200..=299 => {
                c.st = St::Open;
                if verbose > 1 {
                    eprintln!(
                        "ringdl: connection {i}: tunnel to {target} through {} is open",
                        proxy.url
                    );
                }
                return Ok(Tunnel::Open);
            }
            // Only the proxy answers a CONNECT: its 401 (tinyproxy's answer to wrong
            // credentials) means the same as a 407.
            401 | 407 => return Err(proxy.auth_failure(code, &reason)),
            408 | 429 | 500 | 502 | 503 | 504 => {
                return Err(Fail::retry(
                    Kind::HttpStatus,
                    format!("proxy {}: CONNECT {target} answered {code} {reason}", proxy.url),
                ));
            }
            _ => {
                let msg = format!("proxy {} refused CONNECT {target}: {code} {reason}", proxy.url);
                // A refusal of an extra tunnel while others to the same target are open
                // is the proxy's cap on tunnels per client (squid's `maxconn` ACL answers
                // 403): fewer tunnels, not an error. The first tunnel's refusal is one:
                // a refusal while the others still wait for their answer is judged as a
                // cap, and the last of a proxy that refuses every tunnel ends it.
                if others_open {
                    let mut f = Fail::retry(Kind::HttpStatus, msg).busy();
                    f.extra = true;
                    return Err(f);
                }
                return Err(Fail::fatal(Kind::HttpStatus, msg));
            }
        }
    }
}

/// Connection `c` reaches `origin` (directly, or through an open tunnel): an https origin
/// gets its TLS session here (SNI and verification for the origin's server name).
///
/// # Errors
/// A fatal `Tls` failure when rustls refuses the configuration.
pub(crate) fn start_tls(c: &mut Conn, origin: &Origin) -> std::result::Result<(), Fail> {
    if let (Some(cfg), Some(name)) = (&origin.tls, &origin.server_name) {
        let conn = rustls::client::UnbufferedClientConnection::new(cfg.clone(), name.clone())
            .map_err(|e| Fail::fatal(Kind::Tls, format!("TLS: {e}")))?;
        c.tls = Some(Box::new(conn));
    }
    Ok(())
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
