//! Origins: where connections go. An origin is a server as RFC 6454 §4 names one (scheme,
//! host, port) together with the way to it: the proxy route, the TLS client configuration
//! and the server name it verifies, the resolved addresses and where Happy Eyeballs
//! (RFC 8305) stands on them. Connections belong to an origin; a file's URLs (its mirrors)
//! each name the origin they are fetched from, so nothing is swapped in and out when a
//! connection of another mirror is handled.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use http::Url;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;

use crate::control::proxy::{Proxy, Route};
use crate::error::Result;

/// One origin and the state of the connects to it.
pub(crate) struct Origin {
    /// The proxy in between (`addrs` are then its addresses), or `None` for direct.
    pub(crate) proxy: Option<Proxy>,
    /// The TLS client configuration for https (its session cache resumes sessions across
    /// the origin's connections, RFC 8446 §2.2).
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
}

impl Origin {
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
        })
    }

    /// Whether connections go through a tunnel (HTTP CONNECT or SOCKS5) before their own
    /// TLS and requests.
    pub(crate) fn tunnel(&self) -> bool {
        self.proxy.as_ref().is_some_and(|p| p.tunnel)
    }

    /// Whether requests go to a forwarding HTTP proxy (plain http through `--proxy`):
    /// absolute-form request targets, one request per connection.
    pub(crate) fn forwarding(&self) -> Option<&Proxy> {
        self.proxy.as_ref().filter(|p| !p.tunnel)
    }
}
