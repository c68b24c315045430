//! HTTP proxies: the proxy URL, `no_proxy` matching as curl does it, the `CONNECT`
//! request (RFC 9110 §9.3.6, RFC 9112 §3.2.3) and requests in absolute-form for a
//! forwarding proxy (RFC 9112 §3.2.2).

use core::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::request::{Request, RequestError};
use crate::url::{Url, UrlError, percent_decode};

/// The port of a proxy URL that names none, as curl assumes.
pub const DEFAULT_PROXY_PORT: u16 = 1080;

/// Why a proxy URL was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxyError {
    /// A scheme other than `http`, `socks5` and `socks5h` (`https://` TLS to the proxy,
    /// `socks4://` and `socks4a://` are not supported).
    UnsupportedScheme,
    /// The host or port after the credentials is not valid (as in a [`Url`]).
    Host(UrlError),
    /// Control characters in the decoded user name or password.
    InvalidCredentials,
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyError::UnsupportedScheme => {
                f.write_str("unsupported proxy scheme: only http://, socks5:// and socks5h:// proxies are supported")
            }
            ProxyError::Host(e) => write!(f, "{e}"),
            ProxyError::InvalidCredentials => f.write_str("control character in proxy user name or password"),
        }
    }
}

impl std::error::Error for ProxyError {}

/// How ringdl talks to a proxy, from its URL's scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyScheme {
    /// `http://`: HTTP, a `CONNECT` tunnel for https (RFC 9110 §9.3.6), absolute-form
    /// requests for http.
    Http,
    /// `socks5://`: SOCKS5 (RFC 1928), the client resolves the destination's name.
    Socks5,
    /// `socks5h://`: SOCKS5, the proxy resolves the name (sent as ATYP 3, DOMAINNAME).
    Socks5h,
}

impl ProxyScheme {
    /// `http`, `socks5` or `socks5h`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProxyScheme::Http => "http",
            ProxyScheme::Socks5 => "socks5",
            ProxyScheme::Socks5h => "socks5h",
        }
    }
}

/// A proxy: `[SCHEME://][user[:password]@]host[:port][/]`, SCHEME `http`, `socks5` or
/// `socks5h` (case-insensitive).
///
/// Without a scheme the proxy speaks HTTP, without a port it listens on
/// [`DEFAULT_PROXY_PORT`] (curl's rules). User and password are percent-decoded; a path
/// is ignored. [`fmt::Display`] never shows the credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyUrl {
    // INVARIANT: scheme http, path "/", the port explicit (the proxy's own scheme is
    // `scheme`).
    origin: Url,
    scheme: ProxyScheme,
    user: Option<String>,
    password: Option<String>,
}

impl ProxyUrl {
    /// Parses a proxy URL as curl's `--proxy` and `http_proxy` take it.
    ///
    /// # Errors
    /// [`ProxyError::UnsupportedScheme`] for `https://`, `socks4://` and the like;
    /// [`ProxyError::Host`] for a bad host or port; [`ProxyError::InvalidCredentials`].
    pub fn parse(s: &str) -> Result<ProxyUrl, ProxyError> {
        let s = s.trim();
        let (scheme, rest) = match s.find("://") {
            Some(i) => {
                let name = &s[..i];
                let scheme = [ProxyScheme::Http, ProxyScheme::Socks5, ProxyScheme::Socks5h]
                    .into_iter()
                    .find(|k| name.eq_ignore_ascii_case(k.as_str()))
                    .ok_or(ProxyError::UnsupportedScheme)?;
                (scheme, &s[i + 3..])
            }
            None => (ProxyScheme::Http, s),
        };
        let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
        let (userinfo, hostport) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        let has_port = match hostport.rfind(']') {
            Some(close) => hostport[close..].contains(':'),
            None => hostport.contains(':'),
        };
        let url = if has_port {
            format!("http://{hostport}/")
        } else {
            format!("http://{hostport}:{DEFAULT_PROXY_PORT}/")
        };
        let origin = Url::parse(&url).map_err(ProxyError::Host)?;
        let decode = |b: &str| -> Result<String, ProxyError> {
            let v = String::from_utf8_lossy(&percent_decode(b.as_bytes())).into_owned();
            if v.chars().any(char::is_control) {
                return Err(ProxyError::InvalidCredentials);
            }
            Ok(v)
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(ui) => match ui.split_once(':') {
                Some((u, p)) => (Some(decode(u)?), Some(decode(p)?)),
                None => (Some(decode(ui)?), None),
            },
        };
        Ok(ProxyUrl {
            origin,
            scheme,
            user,
            password,
        })
    }

    /// How the proxy is spoken to.
    pub fn scheme(&self) -> ProxyScheme {
        self.scheme
    }

    /// The proxy's host: a name, an IPv4 address, or an IPv6 address without brackets.
    pub fn host(&self) -> &str {
        self.origin.host()
    }

    /// The proxy's TCP port.
    pub fn port(&self) -> u16 {
        self.origin.port()
    }

    /// The user name and password (empty when the URL has none after the user), when
    /// the URL has credentials.
    pub fn credentials(&self) -> Option<(&str, &str)> {
        self.user
            .as_deref()
            .map(|u| (u, self.password.as_deref().unwrap_or("")))
    }
}

impl fmt::Display for ProxyUrl {
    /// `SCHEME://host:port`, or `SCHEME://***@host:port` when the URL has credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.scheme.as_str())?;
        f.write_str("://")?;
        if self.user.is_some() {
            f.write_str("***@")?;
        }
        f.write_str(&authority(&self.origin))
    }
}

impl fmt::Debug for ProxyUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Whether `host` (a URL's host: a name, an IPv4 address, or an IPv6 address with or
/// without brackets) is exempt from the proxy by `no_proxy`, as curl ≥ 7.86 decides it
/// (`lib/noproxy.c`):
///
/// * the list is exactly `*`: every host;
/// * entries are separated by commas and blanks;
/// * a name matches an entry equal to it or to one of its parent domains
///   (`example.com` and `.example.com` both match `example.com` and `www.example.com`,
///   not `notexample.com`), case-insensitively, trailing dots ignored;
/// * an IP address matches an entry that is the same address, or a network in CIDR
///   form (`10.0.0.0/8`, `fd00::/8`) that contains it. Names are not resolved.
pub fn no_proxy_matches(no_proxy: &str, host: &str) -> bool {
    let list = no_proxy.trim();
    if list == "*" {
        return true;
    }
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    enum Kind {
        Name,
        V4(Ipv4Addr),
        V6(Ipv6Addr),
    }
    let kind = if let Ok(a) = bare.parse::<Ipv4Addr>() {
        Kind::V4(a)
    } else if let Ok(a) = bare.parse::<Ipv6Addr>() {
        Kind::V6(a)
    } else {
        Kind::Name
    };
    let name = bare.strip_suffix('.').unwrap_or(bare);
    list.split([',', ' ', '\t'])
        .filter(|t| !t.is_empty())
        .any(|token| match kind {
            Kind::Name => {
                let t = token.strip_suffix('.').unwrap_or(token);
                let t = t.strip_prefix('.').unwrap_or(t);
                if t.is_empty() || t.len() > name.len() {
                    false
                } else if t.len() == name.len() {
                    t.eq_ignore_ascii_case(name)
                } else {
                    let cut = name.len() - t.len();
                    name.as_bytes()[cut - 1] == b'.' && name[cut..].eq_ignore_ascii_case(t)
                }
            }
            Kind::V4(a) => cidr_match(token, 32, |net| {
                net.parse::<Ipv4Addr>()
                    .ok()
                    .map(|n| (u128::from(u32::from(n)) << 96, u128::from(u32::from(a)) << 96))
            }),
            Kind::V6(a) => cidr_match(token, 128, |net| {
                net.parse::<Ipv6Addr>().ok().map(|n| (u128::from(n), u128::from(a)))
            }),
        })
}

/// `network[/bits]` contains the address: `parse` gives (network, address), both
/// left-aligned in 128 bits. As curl: no or zero bits means the whole address; more
/// bits than the family has never matches.
fn cidr_match(token: &str, width: u32, parse: impl Fn(&str) -> Option<(u128, u128)>) -> bool {
    let (net, bits) = match token.split_once('/') {
        Some((n, b)) => match b.parse::<u32>() {
            Ok(b) => (n, b),
            Err(_) => return false,
        },
        None => (token, 0),
    };
    if bits > width {
        return false;
    }
    let bits = if bits == 0 { width } else { bits };
    let Some((n, a)) = parse(net) else {
        return false;
    };
    let mask = u128::MAX << (128 - bits);
    (n ^ a) & mask == 0
}

/// `host:port` with the port always present and an IPv6 host in brackets (RFC 9112
/// §3.2.3 authority-form).
pub fn authority(url: &Url) -> String {
    if url.is_ipv6() {
        format!("[{}]:{}", url.host(), url.port())
    } else {
        format!("{}:{}", url.host(), url.port())
    }
}

/// Appends a `CONNECT` request that asks a proxy for a tunnel to `target`'s host and
/// port (RFC 9110 §9.3.6; authority-form, RFC 9112 §3.2.3: the port always present):
///
/// ```text
/// CONNECT host:port HTTP/1.1\r\n
/// Host: host:port\r\n
/// User-Agent: ..\r\n                (when not empty)
/// Proxy-Authorization: ..\r\n       (when given)
/// \r\n
/// ```
///
/// # Errors
/// [`RequestError::InvalidHeaderValue`] when the user agent or the authorization holds
/// a control character; `out` is then left unchanged.
pub fn write_connect_request(
    target: &Url,
    user_agent: &str,
    proxy_authorization: Option<&str>,
    out: &mut Vec<u8>,
) -> Result<(), RequestError> {
    let ok = |v: &str| v.bytes().all(|b| b == b'\t' || (b >= b' ' && b != 0x7f));
    if !ok(user_agent) || !proxy_authorization.is_none_or(ok) {
        return Err(RequestError::InvalidHeaderValue);
    }
    let authority = authority(target);
    out.extend_from_slice(b"CONNECT ");
    out.extend_from_slice(authority.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(authority.as_bytes());
    out.extend_from_slice(b"\r\n");
    if !user_agent.is_empty() {
        out.extend_from_slice(b"User-Agent: ");
        out.extend_from_slice(user_agent.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if let Some(v) = proxy_authorization {
        out.extend_from_slice(b"Proxy-Authorization: ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// Appends `request` as a forwarding proxy takes it: the request-target in
/// absolute-form (`GET http://host[:port]/path HTTP/1.1`, RFC 9112 §3.2.2), the same
/// fields, and `Proxy-Authorization` (RFC 9110 §11.7.2) last when given.
///
/// # Errors
/// As [`Request::try_write_to`], and [`RequestError::InvalidHeaderValue`] for a control
/// character in the authorization; `out` is then left unchanged.
pub fn write_proxied_request(
    request: &Request<'_>,
    proxy_authorization: Option<&str>,
    out: &mut Vec<u8>,
) -> Result<(), RequestError> {
    if proxy_authorization.is_some_and(|v| v.bytes().any(|b| b != b'\t' && (b < b' ' || b == 0x7f))) {
        return Err(RequestError::InvalidHeaderValue);
    }
    let mut head = Vec::with_capacity(256);
    request.try_write_to(&mut head)?;
    // The head is "METHOD /origin-form HTTP/1.1\r\n...\r\n\r\n".
    let target = head.iter().position(|&b| b == b' ').map_or(0, |i| i + 1);
    let at = out.len();
    out.extend_from_slice(&head[..target]);
    out.extend_from_slice(request.url.scheme().as_str().as_bytes());
    out.extend_from_slice(b"://");
    request.url.write_host_header(out);
    out.extend_from_slice(&head[target..head.len() - 2]);
    if let Some(v) = proxy_authorization {
        out.extend_from_slice(b"Proxy-Authorization: ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    debug_assert!(out[at..].ends_with(b"\r\n\r\n"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::ByteRange;

    #[test]
    fn parses_proxy_urls_like_curl() {
        let p = ProxyUrl::parse("proxy.example").unwrap();
        assert_eq!((p.host(), p.port(), p.credentials()), ("proxy.example", 1080, None));
        let p = ProxyUrl::parse("http://u%40x:p%3Aw@10.0.0.1:3128/").unwrap();
        assert_eq!((p.host(), p.port()), ("10.0.0.1", 3128));
        assert_eq!(p.credentials(), Some(("u@x", "p:w")));
        assert_eq!(p.to_string(), "http://***@10.0.0.1:3128");
        let p = ProxyUrl::parse("HTTP://[::1]:80").unwrap();
        assert_eq!((p.host(), p.port()), ("::1", 80));
        assert_eq!(p.to_string(), "http://[::1]:80");
        let p = ProxyUrl::parse("http://user@[::1]").unwrap();
        assert_eq!((p.port(), p.credentials()), (1080, Some(("user", ""))));
        assert_eq!(p.to_string(), "http://***@[::1]:1080");
        let p = ProxyUrl::parse("SOCKS5h://u:p%40@[::1]:9050").unwrap();
        assert_eq!((p.scheme(), p.host(), p.port()), (ProxyScheme::Socks5h, "::1", 9050));
        assert_eq!(p.credentials(), Some(("u", "p@")));
        assert_eq!(p.to_string(), "socks5h://***@[::1]:9050");
        let p = ProxyUrl::parse("socks5://127.0.0.1").unwrap();
        assert_eq!((p.scheme(), p.port()), (ProxyScheme::Socks5, 1080));
        assert_eq!(p.to_string(), "socks5://127.0.0.1:1080");
        for bad in [
            "https://p:3128",
            "socks4://p",
            "socks4a://p:1",
            "socks5h://",
            "http://",
            "http://p:x",
            "http://p:0",
            "http://a b",
        ] {
            assert!(ProxyUrl::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(ProxyUrl::parse("http://a%0a:b@p"), Err(ProxyError::InvalidCredentials));
        assert_eq!(ProxyUrl::parse("socks://p"), Err(ProxyError::UnsupportedScheme));
    }

    #[test]
    fn no_proxy_like_curl() {
        let yes = [
            ("*", "anything.example"),
            ("example.com", "example.com"),
            ("example.com", "www.example.com"),
            (".example.com", "www.example.com"),
            (".example.com", "example.com"),
            ("EXAMPLE.com.", "a.b.example.COM"),
            ("example.com", "www.example.com."),
            ("foo, bar ,example.com", "x.example.com"),
            ("a b\texample.com", "example.com"),
            ("localhost,127.0.0.1", "127.0.0.1"),
            ("10.0.0.0/8", "10.200.3.4"),
            ("192.168.1.0/24", "192.168.1.255"),
            ("::1", "::1"),
            ("::1", "[::1]"),
            ("fd00::/8", "fd12:3456::1"),
            ("127.0.0.1/0", "127.0.0.1"),
        ];
        for (list, host) in yes {
            assert!(no_proxy_matches(list, host), "{list:?} {host:?}");
        }
        let no = [
            ("", "example.com"),
            ("example.com", "notexample.com"),
            ("www.example.com", "example.com"),
            ("*.example.com", "www.example.com"),
            ("a,*", "b"),
            ("10.0.0.0/8", "11.0.0.1"),
            ("10.0.0.0/33", "10.0.0.1"),
            ("10.0.0.0/x", "10.0.0.1"),
            ("127.0.0.0", "127.0.0.1"),
            ("localhost", "127.0.0.1"),
            ("127.0.0.1", "localhost"),
            ("fd00::/8", "fe80::1"),
            ("10.0.0.0/8", "::ffff:10.0.0.1"),
            (".", "example.com"),
        ];
        for (list, host) in no {
            assert!(!no_proxy_matches(list, host), "{list:?} {host:?}");
        }
    }

    #[test]
    fn connect_request_is_authority_form_with_port() {
        let mut out = Vec::new();
        let url = Url::parse("https://example.com/f").unwrap();
        write_connect_request(&url, "ua", Some("Basic dTpw"), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nUser-Agent: ua\r\n\
             Proxy-Authorization: Basic dTpw\r\n\r\n"
        );
        for (u, want) in [
            ("https://[::1]:8443/", "CONNECT [::1]:8443 HTTP"),
            ("https://[::1]/", "CONNECT [::1]:443 HTTP"),
            ("https://h:443/", "CONNECT h:443 HTTP"),
            ("http://h/", "CONNECT h:80 HTTP"),
        ] {
            let mut out = Vec::new();
            write_connect_request(&Url::parse(u).unwrap(), "", None, &mut out).unwrap();
            assert!(String::from_utf8(out).unwrap().starts_with(want), "{u}");
        }
        let mut out = b"keep".to_vec();
        assert_eq!(
            write_connect_request(&url, "ua", Some("x\r\nEvil: 1"), &mut out),
            Err(RequestError::InvalidHeaderValue)
        );
        assert_eq!(out, b"keep");
    }

    #[test]
    fn proxied_request_is_absolute_form() {
        let url = Url::parse("http://example.com:8080/a/b?c#frag").unwrap();
        let req = Request {
            url: &url,
            range: Some(ByteRange::FromTo(0, 9)),
            ranges: &[],
            user_agent: "ua",
            extra_headers: &[],
        };
        let mut out = Vec::new();
        write_proxied_request(&req, Some("Basic dTpw"), &mut out).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(
            s.starts_with("GET http://example.com:8080/a/b?c HTTP/1.1\r\nHost: example.com:8080\r\n"),
            "{s}"
        );
        assert!(
            s.ends_with("Range: bytes=0-9\r\nProxy-Authorization: Basic dTpw\r\n\r\n"),
            "{s}"
        );
        let mut out = Vec::new();
        write_proxied_request(&req, None, &mut out).unwrap();
        assert!(!String::from_utf8(out).unwrap().contains("Proxy-Authorization"));
        let mut out = b"keep".to_vec();
        assert!(write_proxied_request(&req, Some("a\nb"), &mut out).is_err());
        assert_eq!(out, b"keep");
    }
}
