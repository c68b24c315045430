//! The client's side of a SOCKS5 handshake: method negotiation and the CONNECT command
//! (RFC 1928), with username/password authentication (RFC 1929). Pure code over byte
//! slices: [`Socks5Handshake::advance`] consumes what the proxy sent and appends what to
//! send next; the caller moves the bytes.

use core::fmt;
use std::net::SocketAddr;

use crate::response::Status;

/// SOCKS protocol version 5 (RFC 1928 §3).
const VERSION: u8 = 5;
/// METHOD `X'00'` NO AUTHENTICATION REQUIRED (RFC 1928 §3).
const NO_AUTH: u8 = 0x00;
/// METHOD `X'02'` USERNAME/PASSWORD (RFC 1928 §3, RFC 1929).
const USER_PASS: u8 = 0x02;
/// METHOD `X'FF'` NO ACCEPTABLE METHODS (RFC 1928 §3).
const NO_ACCEPTABLE: u8 = 0xff;
/// Version of the username/password subnegotiation (RFC 1929 §2).
const AUTH_VERSION: u8 = 0x01;
/// CMD `X'01'` CONNECT (RFC 1928 §4).
const CMD_CONNECT: u8 = 0x01;
/// ATYP values (RFC 1928 §5): IP V4 address, DOMAINNAME, IP V6 address.
const ATYP_V4: u8 = 0x01;
const ATYP_DOMAIN: u8 = 0x03;
const ATYP_V6: u8 = 0x04;

/// Where the proxy is asked to connect (DST.ADDR and DST.PORT, RFC 1928 §4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Socks5Target {
    /// An address resolved by the client (`socks5://`): ATYP 1 or 4.
    Addr(SocketAddr),
    /// A host name the proxy resolves (`socks5h://`): ATYP 3, 1-255 bytes.
    Domain(String, u16),
}

impl fmt::Display for Socks5Target {
    /// `host:port`, an IPv6 address in brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Socks5Target::Addr(a) => write!(f, "{a}"),
            Socks5Target::Domain(h, p) => write!(f, "{h}:{p}"),
        }
    }
}

/// A SOCKS5 reply code (REP, RFC 1928 §6); `0` is success.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Socks5Reply(pub u8);

impl Socks5Reply {
    /// The code's meaning as RFC 1928 §6 names it (`"connection refused"`).
    pub fn words(self) -> &'static str {
        match self.0 {
            0 => "succeeded",
            1 => "general SOCKS server failure",
            2 => "connection not allowed by ruleset",
            3 => "network unreachable",
            4 => "host unreachable",
            5 => "connection refused",
            6 => "TTL expired",
            7 => "command not supported",
            8 => "address type not supported",
            _ => "unassigned reply code",
        }
    }

    /// A failure that may pass on a later try (server failure, unreachable, refused, TTL
    /// expired), as an HTTP proxy's 502/503/504; the others (not allowed, command or
    /// address type not supported, unassigned) will not change.
    pub fn is_transient(self) -> bool {
        matches!(self.0, 1 | 3..=6)
    }
}

impl fmt::Display for Socks5Reply {
    /// `connection refused (reply 5)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (reply {})", self.words(), self.0)
    }
}

/// Why a SOCKS5 handshake failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Socks5Error {
    /// The answer's version byte is not 5 (not a SOCKS5 server: an HTTP proxy answers
    /// `H`). Holds the byte.
    NotSocks5(u8),
    /// METHOD `X'FF'`: the proxy accepts none of the methods offered. Holds whether
    /// username/password was among them.
    NoAcceptableMethod {
        /// Username/password (method 2) was offered.
        offered_password: bool,
    },
    /// The proxy chose a method that was not offered. Holds it.
    UnexpectedMethod(u8),
    /// The username/password subnegotiation failed: the STATUS (RFC 1929 §2), not 0.
    AuthRefused(u8),
    /// The username/password answer's version is not 1. Holds it.
    BadAuthVersion(u8),
    /// The CONNECT reply's code is not success (RFC 1928 §6).
    Refused(Socks5Reply),
    /// The reply's ATYP is none of 1, 3, 4. Holds it.
    BadAddressType(u8),
    /// A user name of 0 or more than 255 bytes, or a password of more than 255 (RFC 1929:
    /// one length byte each).
    CredentialsTooLong,
    /// A host name of 0 or more than 255 bytes (RFC 1928 §5: one length byte).
    BadDomain,
}

impl fmt::Display for Socks5Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Socks5Error::NotSocks5(v) => write!(f, "not a SOCKS5 answer (version byte {v:#04x}, not 0x05)"),
            Socks5Error::NoAcceptableMethod { offered_password: true } => {
                f.write_str("accepts neither no authentication nor username/password")
            }
            Socks5Error::NoAcceptableMethod {
                offered_password: false,
            } => f.write_str("wants authentication (no acceptable method without a user name and password)"),
            Socks5Error::UnexpectedMethod(m) => {
                write!(f, "chose authentication method {m:#04x}, which was not offered")
            }
            Socks5Error::AuthRefused(s) => write!(f, "refused the user name and password (RFC 1929 status {s})"),
            Socks5Error::BadAuthVersion(v) => write!(f, "malformed username/password answer (version {v})"),
            Socks5Error::Refused(r) => write!(f, "{r}"),
            Socks5Error::BadAddressType(t) => write!(f, "malformed reply (address type {t})"),
            Socks5Error::CredentialsTooLong => {
                f.write_str("user name must be 1-255 bytes and password at most 255 (RFC 1929)")
            }
            Socks5Error::BadDomain => f.write_str("host name must be 1-255 bytes (RFC 1928)"),
        }
    }
}

impl std::error::Error for Socks5Error {}

/// Parses the method selection message (`VER METHOD`, RFC 1928 §3): the method chosen.
///
/// # Errors
/// [`Socks5Error::NotSocks5`].
pub fn parse_socks5_method(input: &[u8]) -> Result<Status<(usize, u8)>, Socks5Error> {
    match input {
        [] => Ok(Status::Partial),
        [v, ..] if *v != VERSION => Err(Socks5Error::NotSocks5(*v)),
        [_] => Ok(Status::Partial),
        [_, m, ..] => Ok(Status::Complete((2, *m))),
    }
}

/// Parses the username/password status (`VER STATUS`, RFC 1929 §2): bytes consumed.
///
/// # Errors
/// [`Socks5Error::BadAuthVersion`]; [`Socks5Error::AuthRefused`] for a status not 0.
pub fn parse_socks5_auth(input: &[u8]) -> Result<Status<usize>, Socks5Error> {
    match input {
        [] => Ok(Status::Partial),
        // Some servers answer with version 5 here; the status is what counts.
        [v, ..] if *v != AUTH_VERSION && *v != VERSION => Err(Socks5Error::BadAuthVersion(*v)),
        [_] => Ok(Status::Partial),
        [_, 0, ..] => Ok(Status::Complete(2)),
        [_, s, ..] => Err(Socks5Error::AuthRefused(*s)),
    }
}

/// Parses the reply to CONNECT (`VER REP RSV ATYP BND.ADDR BND.PORT`, RFC 1928 §6):
/// the bytes it takes. A failure code is an error as soon as its byte has arrived
/// (servers close right after a failed reply, sometimes without the address).
///
/// # Errors
/// [`Socks5Error::NotSocks5`], [`Socks5Error::Refused`], [`Socks5Error::BadAddressType`].
pub fn parse_socks5_reply(input: &[u8]) -> Result<Status<usize>, Socks5Error> {
    if let Some(&v) = input.first()
        && v != VERSION
    {
        return Err(Socks5Error::NotSocks5(v));
    }
    if let Some(&rep) = input.get(1)
        && rep != 0
    {
        return Err(Socks5Error::Refused(Socks5Reply(rep)));
    }
    let Some(&atyp) = input.get(3) else {
        return Ok(Status::Partial);
    };
    let len = match atyp {
        ATYP_V4 => 4 + 4 + 2,
        ATYP_V6 => 4 + 16 + 2,
        ATYP_DOMAIN => match input.get(4) {
            Some(&n) => 4 + 1 + usize::from(n) + 2,
            None => return Ok(Status::Partial),
        },
        t => return Err(Socks5Error::BadAddressType(t)),
    };
    Ok(if input.len() >= len {
        Status::Complete(len)
    } else {
        Status::Partial
    })
}

/// Appends the CONNECT request for `target` (RFC 1928 §4).
///
/// # Errors
/// [`Socks5Error::BadDomain`] for a host name of 0 or more than 255 bytes; `out` is then
/// left unchanged.
pub fn write_socks5_connect(target: &Socks5Target, out: &mut Vec<u8>) -> Result<(), Socks5Error> {
    let (addr, port): (Vec<u8>, u16) = match target {
        Socks5Target::Addr(SocketAddr::V4(a)) => ([&[ATYP_V4][..], &a.ip().octets()].concat(), a.port()),
        Socks5Target::Addr(SocketAddr::V6(a)) => ([&[ATYP_V6][..], &a.ip().octets()].concat(), a.port()),
        Socks5Target::Domain(h, p) => {
            let n = u8::try_from(h.len())
                .ok()
                .filter(|&n| n > 0)
                .ok_or(Socks5Error::BadDomain)?;
            ([&[ATYP_DOMAIN, n][..], h.as_bytes()].concat(), *p)
        }
    };
    out.extend_from_slice(&[VERSION, CMD_CONNECT, 0]);
    out.extend_from_slice(&addr);
    out.extend_from_slice(&port.to_be_bytes());
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Method,
    Auth,
    Connect,
    Open,
}

/// What [`Socks5Handshake::advance`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Socks5Step {
    /// The proxy's answer is incomplete: read more, then call again with all of it.
    NeedMore,
    /// Took this many bytes of the input and appended the next message to `out`: send
    /// it, then read the answer.
    Send(usize),
    /// The tunnel is open after this many bytes of the input (what follows belongs to
    /// the destination).
    Open(usize),
}

/// One client's SOCKS5 handshake: greeting, optional username/password, CONNECT.
pub struct Socks5Handshake {
    phase: Phase,
    target: Socks5Target,
    // INVARIANT: user 1-255 bytes, password 0-255 bytes.
    credentials: Option<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for Socks5Handshake {
    /// Never shows the credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Socks5Handshake")
            .field("phase", &self.phase)
            .field("target", &self.target)
            .field("credentials", &self.credentials.as_ref().map(|_| "***"))
            .finish()
    }
}

impl Socks5Handshake {
    /// Starts a handshake for `target` and appends the greeting to `out`: methods
    /// no-authentication and, with `credentials` (user, password), username/password
    /// (RFC 1928 §3).
    ///
    /// # Errors
    /// [`Socks5Error::CredentialsTooLong`], [`Socks5Error::BadDomain`] (checked before
    /// anything is sent); `out` is then left unchanged.
    pub fn start(
        target: Socks5Target,
        credentials: Option<(Vec<u8>, Vec<u8>)>,
        out: &mut Vec<u8>,
    ) -> Result<Socks5Handshake, Socks5Error> {
        if let Some((u, p)) = &credentials
            && (u.is_empty() || u.len() > 255 || p.len() > 255)
        {
            return Err(Socks5Error::CredentialsTooLong);
        }
        if let Socks5Target::Domain(h, _) = &target
            && (h.is_empty() || h.len() > 255)
        {
            return Err(Socks5Error::BadDomain);
        }
        if credentials.is_some() {
            out.extend_from_slice(&[VERSION, 2, NO_AUTH, USER_PASS]);
        } else {
            out.extend_from_slice(&[VERSION, 1, NO_AUTH]);
        }
        Ok(Socks5Handshake {
            phase: Phase::Method,
            target,
            credentials,
        })
    }

    /// Where the proxy is asked to connect.
    pub fn target(&self) -> &Socks5Target {
        &self.target
    }

    /// The step the handshake is at, in words: `method negotiation`, `authentication`,
    /// `CONNECT`, `open`.
    pub fn phase(&self) -> &'static str {
        match self.phase {
            Phase::Method => "method negotiation",
            Phase::Auth => "authentication",
            Phase::Connect => "CONNECT",
            Phase::Open => "open",
        }
    }

    /// Takes the proxy's bytes received since the last step (`input`; give all of them
    /// again after [`Socks5Step::NeedMore`]) and appends the next message to `out`.
    ///
    /// # Errors
    /// Any [`Socks5Error`] of the answer; the handshake is then over.
    ///
    /// # Panics
    /// When called again after [`Socks5Step::Open`].
    pub fn advance(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<Socks5Step, Socks5Error> {
        match self.phase {
            Phase::Method => {
                let Status::Complete((n, method)) = parse_socks5_method(input)? else {
                    return Ok(Socks5Step::NeedMore);
                };
                match (method, &self.credentials) {
                    (NO_AUTH, _) => {}
                    (USER_PASS, Some((u, p))) => {
                        // INVARIANT (start): both lengths fit one byte.
                        out.push(AUTH_VERSION);
                        out.push(u.len() as u8);
                        out.extend_from_slice(u);
                        out.push(p.len() as u8);
                        out.extend_from_slice(p);
                        self.phase = Phase::Auth;
                        return Ok(Socks5Step::Send(n));
                    }
                    (NO_ACCEPTABLE, c) => {
                        return Err(Socks5Error::NoAcceptableMethod {
                            offered_password: c.is_some(),
                        });
                    }
                    (m, _) => return Err(Socks5Error::UnexpectedMethod(m)),
                }
                write_socks5_connect(&self.target, out)?;
                self.phase = Phase::Connect;
                Ok(Socks5Step::Send(n))
            }
            Phase::Auth => {
                let Status::Complete(n) = parse_socks5_auth(input)? else {
                    return Ok(Socks5Step::NeedMore);
                };
                write_socks5_connect(&self.target, out)?;
                self.phase = Phase::Connect;
                Ok(Socks5Step::Send(n))
            }
            Phase::Connect => {
                let Status::Complete(n) = parse_socks5_reply(input)? else {
                    return Ok(Socks5Step::NeedMore);
                };
                self.phase = Phase::Open;
                Ok(Socks5Step::Open(n))
            }
            Phase::Open => panic!("the SOCKS5 handshake is already over"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domain() -> Socks5Target {
        Socks5Target::Domain("localhost".into(), 8443)
    }

    #[test]
    fn no_auth_handshake_with_a_domain() {
        let mut out = Vec::new();
        let mut h = Socks5Handshake::start(domain(), None, &mut out).unwrap();
        assert_eq!(out, [5, 1, 0]);
        out.clear();
        assert_eq!(h.advance(&[5], &mut out), Ok(Socks5Step::NeedMore));
        assert_eq!(h.advance(&[5, 0], &mut out), Ok(Socks5Step::Send(2)));
        assert_eq!(out, b"\x05\x01\x00\x03\x09localhost\x20\xfb");
        out.clear();
        let reply = [5, 0, 0, 1, 127, 0, 0, 1, 0x1f, 0x90, b'x'];
        for cut in 0..10 {
            assert_eq!(h.advance(&reply[..cut], &mut out), Ok(Socks5Step::NeedMore), "{cut}");
        }
        assert_eq!(h.advance(&reply, &mut out), Ok(Socks5Step::Open(10)));
        assert!(out.is_empty());
        assert_eq!(h.phase(), "open");
    }

    #[test]
    fn password_handshake_with_addresses() {
        let mut out = Vec::new();
        let t = Socks5Target::Addr("[::1]:443".parse().unwrap());
        let mut h = Socks5Handshake::start(t, Some((b"al".to_vec(), b"pw!".to_vec())), &mut out).unwrap();
        assert_eq!(out, [5, 2, 0, 2]);
        out.clear();
        assert_eq!(h.advance(&[5, 2], &mut out), Ok(Socks5Step::Send(2)));
        assert_eq!(out, b"\x01\x02al\x03pw!");
        assert_eq!(h.phase(), "authentication");
        out.clear();
        assert_eq!(h.advance(&[1, 0], &mut out), Ok(Socks5Step::Send(2)));
        let mut want = vec![5, 1, 0, 4];
        want.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
        want.extend_from_slice(&[1, 0xbb]);
        assert_eq!(out, want);
        out.clear();
        let mut reply = vec![5, 0, 0, 3, 4];
        reply.extend_from_slice(b"host\x00\x50");
        assert_eq!(h.advance(&reply[..reply.len() - 1], &mut out), Ok(Socks5Step::NeedMore));
        assert_eq!(h.advance(&reply, &mut out), Ok(Socks5Step::Open(reply.len())));

        let mut out = Vec::new();
        let t = Socks5Target::Addr("10.1.2.3:80".parse().unwrap());
        write_socks5_connect(&t, &mut out).unwrap();
        assert_eq!(out, [5, 1, 0, 1, 10, 1, 2, 3, 0, 80]);
    }

    #[test]
    fn refusals_are_errors_in_words() {
        let mut out = Vec::new();
        let mut h = Socks5Handshake::start(domain(), None, &mut out).unwrap();
        assert_eq!(
            h.advance(&[5, 0xff], &mut out),
            Err(Socks5Error::NoAcceptableMethod {
                offered_password: false
            })
        );
        let mut h = Socks5Handshake::start(domain(), None, &mut out).unwrap();
        assert_eq!(h.advance(&[5, 2], &mut out), Err(Socks5Error::UnexpectedMethod(2)));
        let mut h = Socks5Handshake::start(domain(), None, &mut out).unwrap();
        assert_eq!(h.advance(b"HTTP/1.1 400", &mut out), Err(Socks5Error::NotSocks5(b'H')));
        let mut h = Socks5Handshake::start(domain(), Some((b"u".to_vec(), vec![])), &mut out).unwrap();
        h.advance(&[5, 2], &mut out).unwrap();
        assert_eq!(h.advance(&[1, 1], &mut out), Err(Socks5Error::AuthRefused(1)));
        let mut h = Socks5Handshake::start(domain(), None, &mut out).unwrap();
        h.advance(&[5, 0], &mut out).unwrap();
        // A failure code counts as soon as it arrives.
        let e = h.advance(&[5, 5], &mut out).unwrap_err();
        assert_eq!(e, Socks5Error::Refused(Socks5Reply(5)));
        assert_eq!(e.to_string(), "connection refused (reply 5)");
        assert!(Socks5Reply(4).is_transient() && !Socks5Reply(2).is_transient());
        assert_eq!(Socks5Reply(9).words(), "unassigned reply code");
        assert_eq!(parse_socks5_reply(&[5, 0, 0, 7]), Err(Socks5Error::BadAddressType(7)));

        let long = "a".repeat(256);
        let mut out = b"keep".to_vec();
        let t = Socks5Target::Domain(long.clone(), 1);
        assert_eq!(
            Socks5Handshake::start(t, None, &mut out).unwrap_err(),
            Socks5Error::BadDomain
        );
        let c = Some((long.into_bytes(), vec![]));
        assert_eq!(
            Socks5Handshake::start(domain(), c, &mut out).unwrap_err(),
            Socks5Error::CredentialsTooLong
        );
        assert_eq!(out, b"keep");
        let dbg = format!(
            "{:?}",
            Socks5Handshake::start(domain(), Some((b"u".to_vec(), b"secret".to_vec())), &mut out).unwrap()
        );
        assert!(!dbg.contains("secret"), "{dbg}");
    }
}
