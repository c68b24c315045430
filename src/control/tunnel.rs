//! Tunnels and TLS on a new connection: the `CONNECT` tunnel each https connection opens
//! through an HTTP proxy before its TLS handshake (RFC 9110 §9.3.6), or SOCKS5's
//! ([`crate::control::socks`]), then the TLS session with the origin.

use crate::control::origin::Origin;
use crate::control::{Conn, Fail, St, Tls, Tunnel};
use crate::error::Kind;
use http::{Header, Status, Url};

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
        let (len, code, reason) = match http::parse_head(&rbuf[c.input_start..c.input_end], &mut headers) {
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
                if c.input_end - c.input_start >= rbuf.len() {
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
        c.input_start += len;
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
        c.tls = Tls::Rustls(Box::new(conn));
    }
    Ok(())
}
