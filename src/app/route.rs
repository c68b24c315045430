//! How each URL of a file is reached: its credentials, its request fields per hop, its
//! proxy, addresses and TLS configuration; and a mirror left out before the transfer.

use crate::config::Config;
use crate::control::origin::OriginKey;
use crate::control::{headers, proxy, resolve, tls};
use crate::err;
use crate::error::Result;
use crate::event as download;
use crate::report::Progress;

/// Every URL given, parsed, with the credentials it may carry (`--user`, else its own
/// userinfo; see [`crate::config::MirrorUrl`]).
///
/// # Errors
/// `Usage` for a URL that does not parse, naming it.
pub(super) fn given_urls(opts: &Config) -> Result<Vec<(http::Url, Option<crate::config::Credentials>)>> {
    let first = std::iter::once((&opts.url, opts.credentials.clone()));
    let rest = opts.mirrors.iter().map(|m| (&m.url, m.credentials.clone()));
    first
        .chain(rest)
        .map(|(u, c)| {
            let url = http::Url::parse(u).map_err(|e| err!(Usage, "bad URL {u:?}: {e}"))?;
            Ok((url, c))
        })
        .collect()
}

/// The extra request fields for `url`, a hop from `first` (a URL given): `-H` and the
/// credentials, those that carry secrets only on `first`'s origin. Says with `-v` what is
/// left out, with `-vv` what is sent (secrets redacted).
pub(super) fn hop_headers(
    opts: &Config,
    credentials: Option<&crate::config::Credentials>,
    first: &http::Url,
    url: &http::Url,
) -> Vec<(String, String)> {
    let (headers, dropped) = headers::for_hop(opts, credentials, first, url);
    if !dropped.is_empty() && opts.verbose > 0 {
        eprintln!(
            "ringdl: not sending {} to {} (another origin than {})",
            dropped.join(", "),
            url,
            first
        );
    }
    if opts.verbose > 1 {
        for (name, value) in &headers {
            // An empty value sends no field (curl's `-H 'Name:'`): say so, not "Name: ".
            if value.trim_matches([' ', '\t']).is_empty() {
                eprintln!("ringdl: header {name}: (empty: not sent)");
            } else {
                eprintln!("ringdl: header {name}: {}", headers::shown(name, value));
            }
        }
    }
    headers
}

/// A mirror left out before the download (its name does not resolve, its redirect is
/// refused): said, and kept for the summary.
pub(super) fn leave_out(url: http::Url, why: String, progress: &mut Progress) -> crate::report::MirrorReport {
    progress.note(crate::report::Note::MirrorDropped {
        url: url.to_string(),
        why: why.clone(),
        hint: "",
    });
    crate::report::MirrorReport {
        url: url.to_string(),
        bytes: 0,
        dropped: Some(why),
    }
}

/// How to reach `url`: the proxy for its host, the addresses to connect to, its origin
/// key, and for https the TLS configuration of that key (from `tls_configs`: connections
/// and sessions are shared only under one key).
///
/// # Errors
/// `Network` when the name (or the proxy's) does not resolve; `Usage` for a bad proxy;
/// `LocalIo` when `--ca-certificate` cannot be read.
pub(super) fn mirror_route(
    url: &http::Url,
    headers: &[(String, String)],
    opts: &Config,
    tls_configs: &mut tls::Configs,
) -> Result<download::mirrors::MirrorRoute> {
    // Chosen again for every URL: a redirect to another host may go another way.
    let proxy = match proxy::choose(
        url,
        opts.proxy.as_deref(),
        opts.noproxy.as_deref(),
        opts.proxy_user.as_ref(),
        |k| std::env::var(k).ok(),
    )? {
        Ok(p) => {
            if opts.verbose > 0 {
                let how = match p.url.scheme() {
                    http::ProxyScheme::Socks5h => {
                        format!(": a SOCKS5 tunnel per connection, the proxy resolves {}", url.host())
                    }
                    http::ProxyScheme::Socks5 => {
                        format!(": a SOCKS5 tunnel per connection, {} resolved here", url.host())
                    }
                    http::ProxyScheme::Http if p.tunnel => ": a CONNECT tunnel per connection".to_owned(),
                    http::ProxyScheme::Http => ": requests in absolute-form".to_owned(),
                };
                eprintln!("ringdl: proxy {} (from {}){how}", p.url, p.source);
            }
            Some(p)
        }
        Err(why) => {
            if opts.verbose > 0 {
                match why {
                    proxy::Direct::Exempt(src) => eprintln!("ringdl: {} matches {src}: no proxy", url.host()),
                    proxy::Direct::Disabled(src) => eprintln!("ringdl: {src} is empty: no proxy"),
                    proxy::Direct::NoProxy => {}
                }
            }
            None
        }
    };
    // socks5:// (not socks5h://): the origin's name is resolved here (with --resolve), and
    // the proxy is given the first address; the proxy connects to it.
    let mut proxy = proxy;
    if let Some(socks) = proxy
        .as_mut()
        .filter(|p| p.url.scheme() == http::ProxyScheme::Socks5)
        .and_then(|p| p.socks.as_mut())
    {
        let target = resolve::resolve(url.host(), url.port(), &opts.resolve, opts.verbose)?;
        socks.target = target.first().copied();
    }
    // Through a proxy only the proxy's name is resolved (but see socks5:// above): the
    // proxy resolves the origin.
    let (host, port) = match &proxy {
        Some(p) => (p.url.host(), p.url.port()),
        None => (url.host(), url.port()),
    };
    // (--resolve applies to the proxy's name as to any other.)
    let addrs = resolve::resolve(host, port, &opts.resolve, opts.verbose).map_err(|mut e| {
        if proxy.is_some() {
            e.msg = format!("proxy: {}", e.msg);
        }
        e
    })?;
    let settings = (url.scheme() == http::Scheme::Https).then(|| tls::Settings::of(opts));
    let key = OriginKey::new(url, proxy.as_ref(), settings.as_ref());
    let tls = tls_configs.for_origin(&key, opts.verbose)?;
    Ok(download::mirrors::MirrorRoute {
        url: url.clone(),
        headers: headers.to_vec(),
        tls,
        key,
        route: proxy::Route { addrs, proxy },
    })
}
