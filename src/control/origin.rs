//! Origins: where connections go. An origin is a server as RFC 6454 §4 names one (scheme,
//! host, port) together with the way to it: the proxy route, the TLS client configuration
//! and the server name it verifies, the resolved addresses and where Happy Eyeballs
//! (RFC 8305) stands on them. Connections belong to an origin; a file's URLs (its mirrors)
//! each name the origin they are fetched from, so nothing is swapped in and out when a
//! connection of another mirror is handled.
//!
//! What is kept between transfers (idle connections, what an origin's server was seen
//! allowing, TLS sessions) is found again by an [`OriginKey`] alone.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Url;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;

mod cap;

pub(crate) use cap::{OriginCap, shares};

pub(crate) use crate::control::key::OriginKey;
use crate::control::proxy::{Proxy, Route};
use crate::error::Result;

/// RFC 8305 §5 "Connection Attempt Delay": how long a connect to one address runs
/// alone before the next address (the other family first) gets an attempt of its own.
pub(crate) const ATTEMPT_DELAY: Duration = Duration::from_millis(250);

/// A kept-alive connection the server closed within this of its last response shows a
/// server that closes after every response ([`KeepAlive::closed_after`]); one closed
/// later met an idle timeout (Apache's default is 5 s, nginx's 75 s), which says
/// nothing of the next connection.
pub(crate) const QUICK_CLOSE: Duration = Duration::from_secs(1);

/// One origin and the state of the connects to it.
#[derive(Clone)]
pub(crate) struct Origin {
    /// The proxy in between (`addrs` are then its addresses), or `None` for direct.
    pub(crate) proxy: Option<Proxy>,
    /// The TLS client configuration for https: its origin key's (its session store
    /// resumes sessions across the connections of that key only, RFC 8446 §2.2; see
    /// [`crate::control::tls::Configs`]).
    pub(crate) tls: Option<Arc<ClientConfig>>,
    /// The name the server's certificate must carry (https only).
    pub(crate) server_name: Option<ServerName<'static>>,
    /// Where to connect, families interleaved (RFC 8305 §4); at least one.
    pub(crate) addrs: Vec<SocketAddr>,
    /// The address the next connect goes to: the last one a connect went through
    /// (`addr_proven`), or the next one after those that failed.
    pub(crate) addr_next: usize,
    pub(crate) addr_proven: bool,
    /// When the newest connect started while no address was proven (Happy Eyeballs).
    pub(crate) attempt_started: Option<Instant>,
    /// How many connections at once the server (or the proxy's tunnels) took when it
    /// turned an extra one away (503/429 or a refused CONNECT while others were served):
    /// learned by one transfer, kept with the origin, and no transfer after it opens more.
    pub(crate) allows: Option<usize>,
    /// Requests to this origin that the other transfers on the ring have on the wire (a
    /// body or an answer coming), set by the reactor before each turn (`-j`; 0 for a
    /// transfer alone): they count toward the server's cap as this transfer's own do.
    pub(crate) others: usize,
    /// `--threads`: requests to this origin that the transfer's other reactors have on
    /// the wire (the owner's count of its helpers', or a helper's of the owner's and the
    /// other helpers'), updated each tick; they count toward the server's cap too.
    pub(crate) remote: usize,
    /// Whether the server keeps connections open between requests (RFC 9112 §9.3), as
    /// seen so far (kept with the origin for the run's later files).
    pub(crate) keeps: KeepAlive,
}

/// What an origin's server was seen doing with a connection after a response it sent
/// without `Connection: close`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum KeepAlive {
    /// Nothing seen yet: connections are kept.
    #[default]
    Unknown,
    /// A connection that had served one response was found closed (or closed at its
    /// next request) before any connection carried a second: the server closes after
    /// every response, and its connections are no longer kept.
    Closes,
    /// A connection carried a second response: the server keeps them (one found closed
    /// later timed out idle, and says nothing about the others).
    Keeps,
}

impl KeepAlive {
    /// A kept-alive connection that had served `served` responses was found closed by
    /// the server before its next response came; the server's way so far.
    #[must_use]
    pub(crate) fn closed_after(self, served: u32) -> KeepAlive {
        match self {
            KeepAlive::Unknown if served <= 1 => KeepAlive::Closes,
            _ => self.served(served),
        }
    }

    /// A connection served its `served`-th response (or is about to carry a request
    /// after that many); the server's way so far.
    #[must_use]
    pub(crate) fn served(self, served: u32) -> KeepAlive {
        if served >= 2 { KeepAlive::Keeps } else { self }
    }

    /// What two transfers learned of one origin, together: a connection seen carrying two
    /// responses outweighs one seen closed after its first.
    #[must_use]
    pub(crate) fn merge(self, other: KeepAlive) -> KeepAlive {
        self.max(other)
    }
}

impl Origin {
    /// This origin's connection cap under `configured` (`--max-connections-per-host`, this
    /// reactor's share of it) and what its server was seen allowing.
    pub(crate) fn cap(&self, configured: usize) -> OriginCap {
        OriginCap::new(configured, self.allows)
    }

    /// Requests to this origin on the wire outside the transfer's own connections on this
    /// reactor: the other transfers' ([`Origin::others`]) and its other reactors'
    /// ([`Origin::remote`]).
    pub(crate) fn elsewhere(&self) -> usize {
        self.others + self.remote
    }

    /// The origin of `url` reached by `route`, with `tls` for https.
    ///
    /// # Errors
    /// `Usage` for an https host that is no valid TLS server name.
    pub(crate) fn new(url: &Url, tls: Option<Arc<ClientConfig>>, route: Route) -> Result<Origin> {
        let server_name = match &tls {
            Some(_) => Some(crate::control::tls::server_name(url.host())?),
            None => None,
        };
        Ok(Origin {
            proxy: route.proxy,
            tls,
            server_name,
            addrs: route.addrs,
            addr_next: 0,
            addr_proven: false,
            attempt_started: None,
            allows: None,
            others: 0,
            remote: 0,
            keeps: KeepAlive::Unknown,
        })
    }

    /// Whether a connection to this origin is kept for another request after a response
    /// without `Connection: close`: not through a forwarding proxy (one request per client
    /// connection), not to a server seen closing after every response
    /// ([`KeepAlive::Closes`]).
    pub(crate) fn reuses(&self) -> bool {
        self.forwarding().is_none() && self.keeps != KeepAlive::Closes
    }

    /// Whether connections go through a tunnel (HTTP CONNECT or SOCKS5) before their own
    /// TLS and requests.
    pub(crate) fn tunnel(&self) -> bool {
        self.proxy.as_ref().is_some_and(|p| p.tunnel)
    }

    /// RFC 8305 §5 (Happy Eyeballs v2): the address (index in `addrs`) a connection that
    /// waits for its turn may connect to at `now`, or `None` to wait. `trying`: the
    /// addresses connects to this origin are in flight to; `backing_off`: a connection to
    /// it waits out its backoff after every address failed this round.
    ///
    /// Once an address has taken a connect, every connection goes there. While none has,
    /// one attempt runs at a time: with none in flight, at `addr_next` unless the round is
    /// backing off (the others wait with it rather than each taking its own round now);
    /// else the next address nothing is trying yet, once the newest attempt has gone
    /// [`ATTEMPT_DELAY`] without an answer (its head start).
    pub(crate) fn next_attempt(&self, trying: &[usize], backing_off: bool, now: Instant) -> Option<usize> {
        if self.addr_proven {
            return Some(self.addr_next);
        }
        if trying.is_empty() {
            return (!backing_off).then_some(self.addr_next);
        }
        if self
            .attempt_started
            .is_some_and(|t| now.saturating_duration_since(t) < ATTEMPT_DELAY)
        {
            return None;
        }
        // The first address after the newest attempt's that nothing is trying yet.
        let n = self.addrs.len();
        (1..n).map(|d| (self.addr_next + d) % n).find(|a| !trying.contains(a))
    }

    /// Whether requests go to a forwarding HTTP proxy (plain http through `--proxy`):
    /// absolute-form request targets, one request per connection.
    pub(crate) fn forwarding(&self) -> Option<&Proxy> {
        self.proxy.as_ref().filter(|p| !p.tunnel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An origin of three addresses, families interleaved, nothing proven yet.
    fn origin(addr_next: usize, attempt_started: Option<Instant>) -> Origin {
        Origin {
            proxy: None,
            tls: None,
            server_name: None,
            addrs: ["[::1]:80", "127.0.0.1:80", "[::2]:80"]
                .iter()
                .map(|a| a.parse().unwrap())
                .collect(),
            addr_next,
            addr_proven: false,
            attempt_started,
            allows: None,
            others: 0,
            remote: 0,
            keeps: KeepAlive::Unknown,
        }
    }

    #[test]
    fn a_server_is_taken_to_close_after_every_response_only_before_any_reuse_worked() {
        use KeepAlive::*;
        // Closed after its first response, nothing else seen: closes after every one.
        assert_eq!(Unknown.closed_after(1), Closes);
        // Closed after a second (an idle timeout), or after reuse worked elsewhere: keeps.
        assert_eq!(Unknown.closed_after(2), Keeps);
        assert_eq!(Keeps.closed_after(1), Keeps);
        assert_eq!(Unknown.served(1), Unknown);
        assert_eq!(Unknown.served(2), Keeps);
        assert_eq!(Closes.served(3), Keeps);
        // Two transfers' views: reuse seen working wins.
        assert_eq!(Closes.merge(Keeps), Keeps);
        assert_eq!(Unknown.merge(Closes), Closes);
        let mut o = origin(0, None);
        assert!(o.reuses());
        o.keeps = Closes;
        assert!(!o.reuses());
    }

    #[test]
    fn happy_eyeballs_gives_the_next_address_its_attempt_only_after_the_head_start() {
        let now = Instant::now();
        let early = now - ATTEMPT_DELAY / 2;
        let late = now - ATTEMPT_DELAY * 2;
        // Nothing in flight: the next address, unless the round backs off.
        assert_eq!(origin(1, None).next_attempt(&[], false, now), Some(1));
        assert_eq!(origin(1, Some(late)).next_attempt(&[], true, now), None);
        // One attempt in flight: the others wait out its head start, then take the next
        // address nothing is trying, wrapping round; none is left when all are tried.
        assert_eq!(origin(0, Some(early)).next_attempt(&[0], false, now), None);
        assert_eq!(origin(0, Some(late)).next_attempt(&[0], false, now), Some(1));
        assert_eq!(origin(0, Some(late)).next_attempt(&[0, 1], false, now), Some(2));
        assert_eq!(origin(2, Some(late)).next_attempt(&[2], false, now), Some(0));
        assert_eq!(origin(0, Some(late)).next_attempt(&[0, 1, 2], false, now), None);
        // Proven: every connection goes where a connect went through, at once.
        let mut o = origin(1, Some(early));
        o.addr_proven = true;
        assert_eq!(o.next_attempt(&[0, 1], true, now), Some(1));
    }
}
