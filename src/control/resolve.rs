//! Resolve: the URL's host to the addresses to connect to, `--resolve` first, then the
//! system resolver (musl's `getaddrinfo`: `/etc/hosts`, then DNS); ordered for Happy
//! Eyeballs (RFC 8305 §4: the families interleaved, the resolver's first one first).

use std::net::{SocketAddr, ToSocketAddrs};

use crate::config::Resolve;
use crate::err;
use crate::error::Result;

/// The addresses for `host:port`, families interleaved (see [`interleave`]). With
/// `verbose`, one line says where they came from when there is more than one.
///
/// # Errors
/// [`crate::error::Kind::Network`] when the resolver fails or answers nothing.
pub(crate) fn resolve(host: &str, port: u16, overrides: &[Resolve], verbose: u8) -> Result<Vec<SocketAddr>> {
    let (addrs, from): (Vec<SocketAddr>, &str) = match overrides
        .iter()
        .rev()
        .find(|r| r.port == port && r.host.eq_ignore_ascii_case(host))
    {
        Some(r) => (
            r.addrs.iter().map(|&ip| SocketAddr::new(ip, port)).collect(),
            "--resolve",
        ),
        None => (
            (host, port)
                .to_socket_addrs()
                .map_err(|e| err!(Network, "cannot resolve {host}: {e}"))?
                .collect(),
            "the resolver",
        ),
    };
    if addrs.is_empty() {
        return Err(err!(Network, "{host} has no address"));
    }
    let addrs = interleave(addrs);
    if verbose > 0 && addrs.len() > 1 {
        let list: Vec<String> = addrs.iter().map(|a| a.ip().to_string()).collect();
        eprintln!("ringdl: {host} is {} ({from})", list.join(", "));
    }
    Ok(addrs)
}

/// RFC 8305 §4: the first address's family first, then the families taking turns
/// (`v6a, v6b, v4a` → `v6a, v4a, v6b`); duplicates dropped, each family's order kept.
pub(crate) fn interleave(addrs: Vec<SocketAddr>) -> Vec<SocketAddr> {
    let mut seen = Vec::with_capacity(addrs.len());
    for a in addrs {
        if !seen.contains(&a) {
            seen.push(a);
        }
    }
    let Some(first) = seen.first().copied() else {
        return seen;
    };
    let (mut a, mut b): (Vec<_>, Vec<_>) = seen.into_iter().partition(|x| x.is_ipv6() == first.is_ipv6());
    let mut out = Vec::with_capacity(a.len() + b.len());
    a.reverse();
    b.reverse();
    while !a.is_empty() || !b.is_empty() {
        out.extend(a.pop());
        out.extend(b.pop());
    }
    out
}

/// `IPv4` or `IPv6`, for messages.
pub(crate) fn family(a: &SocketAddr) -> &'static str {
    if a.is_ipv4() { "IPv4" } else { "IPv6" }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn families_take_turns_first_family_first() {
        let got = interleave(vec![
            sa("[::1]:80"),
            sa("[::2]:80"),
            sa("[::3]:80"),
            sa("10.0.0.1:80"),
            sa("[::1]:80"),
        ]);
        assert_eq!(got, [sa("[::1]:80"), sa("10.0.0.1:80"), sa("[::2]:80"), sa("[::3]:80")]);
        let got = interleave(vec![sa("10.0.0.1:80"), sa("10.0.0.2:80"), sa("[::1]:80")]);
        assert_eq!(got, [sa("10.0.0.1:80"), sa("[::1]:80"), sa("10.0.0.2:80")]);
        assert!(interleave(vec![]).is_empty());
    }

    #[test]
    fn resolve_overrides_name_and_port_only() {
        let r = Resolve {
            host: "dual.test".into(),
            port: 8080,
            addrs: vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()],
        };
        let got = resolve("DUAL.test", 8080, std::slice::from_ref(&r), 0).unwrap();
        assert_eq!(got, [sa("127.0.0.1:8080"), sa("[::1]:8080")]);
        // Another port goes to the resolver (an IP literal resolves to itself).
        let got = resolve("127.0.0.2", 80, &[r], 0).unwrap();
        assert_eq!(got, [sa("127.0.0.2:80")]);
    }
}
