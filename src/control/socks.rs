//! SOCKS5 tunnels (RFC 1928, username/password per RFC 1929): each connection to a
//! `socks5://` or `socks5h://` proxy runs the handshake of [`http::Socks5Handshake`]
//! over the ring (SEND of its messages, RECV of the proxy's answers into the read block),
//! then the origin's TLS (or plain HTTP) inside the tunnel.

use crate::control::proxy::Proxy;
use crate::control::{Conn, Fail, St, Tunnel};
use crate::error::Kind;
use http::{Socks5Error, Socks5Step, Socks5Target, Url};

/// Connection `c` is connected to the SOCKS5 `proxy`: queue its greeting for `url`'s
/// origin.
pub(crate) fn start_socks(c: &mut Conn, proxy: &Proxy, url: &Url) -> std::result::Result<(), Fail> {
    let socks = proxy.socks.as_ref().expect("a SOCKS5 proxy");
    let target = match socks.target {
        Some(addr) => Socks5Target::Addr(addr),
        None => Socks5Target::Domain(url.host().to_owned(), url.port()),
    };
    c.st = St::Tunnel;
    c.out.clear();
    let hs = http::Socks5Handshake::start(target, socks.credentials.clone(), &mut c.out)
        .map_err(|e| Fail::fatal(Kind::Usage, format!("proxy {}: {e}", proxy.url)))?;
    c.socks = Some(Box::new(hs));
    Ok(())
}

/// The SOCKS5 proxy's answer on connection `i`, from its read block: the next message
/// is queued, or the tunnel opens (TLS with the origin starts; bytes after the reply
/// stay for it), or an incomplete answer asks for more. A refusal fails the connection
/// with the proxy's reason in words: worth a retry for a transient reply code (as an
/// HTTP proxy's 502/503/504), not for the others, nor for refused credentials.
pub(crate) fn socks_answer(c: &mut Conn, i: usize, proxy: &Proxy, verbose: u8) -> std::result::Result<Tunnel, Fail> {
    let hs = c.socks.as_mut().expect("a SOCKS5 handshake");
    let target = hs.target().to_string();
    let phase = hs.phase();
    let rbuf = c.rbuf.as_ref().expect("idle connection holds its read block");
    let step = hs.advance(&rbuf[c.input_start..c.input_end], &mut c.out);
    match step {
        Ok(Socks5Step::NeedMore) => {
            if c.eof {
                return Err(Fail::retry(
                    Kind::Network,
                    format!(
                        "proxy {} closed the connection during SOCKS5 {phase} (to {target})",
                        proxy.url
                    ),
                ));
            }
            Ok(Tunnel::NeedMore)
        }
        Ok(Socks5Step::Send(n)) => {
            c.input_start += n;
            Ok(Tunnel::Sent)
        }
        Ok(Socks5Step::Open(n)) => {
            c.input_start += n;
            c.socks = None;
            c.st = St::Open;
            if verbose > 1 {
                eprintln!(
                    "ringdl: connection {i}: SOCKS5 tunnel to {target} through {} is open",
                    proxy.url
                );
            }
            Ok(Tunnel::Open)
        }
        Err(e) => {
            let msg = match e {
                Socks5Error::Refused(r) => {
                    format!("proxy {} refused SOCKS5 CONNECT {target}: {r}", proxy.url)
                }
                Socks5Error::NoAcceptableMethod {
                    offered_password: false,
                } => format!(
                    "proxy {}: {e}: give them with --proxy-user USER:PASSWORD or in the proxy URL: \
                         {}://user:password@host:port",
                    proxy.url,
                    proxy.url.scheme().as_str()
                ),
                e => format!("proxy {}: {e}", proxy.url),
            };
            Err(match e {
                Socks5Error::Refused(r) if r.is_transient() => Fail::retry(Kind::HttpStatus, msg),
                Socks5Error::Refused(_)
                | Socks5Error::NoAcceptableMethod { .. }
                | Socks5Error::AuthRefused(_)
                | Socks5Error::UnexpectedMethod(_) => Fail::fatal(Kind::HttpStatus, msg),
                _ => Fail::fatal(Kind::Protocol, msg),
            })
        }
    }
}
