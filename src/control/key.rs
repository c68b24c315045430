//! The origin key: what a kept-alive connection, a TLS session and what was learned of a
//! server are looked up by ([`OriginKey`]), with the TLS settings that are part of it
//! ([`Settings`]). Below both the origins (`control::origin`) and the TLS configurations
//! (`control::tls`, which keeps one per key).

use std::path::PathBuf;

use http::Url;

use crate::config::Config;
use crate::control::proxy::Proxy;

/// What a kept-alive connection, a TLS session and what was learned of a server are
/// looked up by: the origin as the URL names it (RFC 6454 §4: scheme, host, port), the
/// route to it (the proxy) and the TLS settings its connections are verified with. Two
/// URLs share a connection or a session only when their keys are equal.
///
/// The host is the URL's (lowercased, as [`Url`] stores it), never an address it
/// resolves to: a certificate is checked for the host name a connection was opened for,
/// and a connection (or a resumed session, which checks no certificate) opened for
/// `localhost` is no proof for `127.0.0.1` even when both reach one server. The proxy
/// counts with its scheme, host, port, whether it tunnels, and its credentials (by their
/// SHA-256 only, so that the key never holds a secret). The TLS settings are those that
/// make the verifier ([`Settings`]); `None` for plain http.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct OriginKey {
    scheme: http::Scheme,
    host: String,
    port: u16,
    proxy: Option<ProxyRoute>,
    tls: Option<Settings>,
}

/// The proxy part of an [`OriginKey`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ProxyRoute {
    /// `SCHEME://host:port` (credentials hidden, as [`http::ProxyUrl`] shows it).
    url: String,
    tunnel: bool,
    /// SHA-256 of the credentials sent to the proxy (`Proxy-Authorization`, SOCKS5
    /// user and password), when there are any.
    credentials: Option<[u8; 32]>,
}

impl OriginKey {
    /// The key of `url` reached through `proxy` (`None`: direct), verified with `tls`
    /// (https; `None` for plain http).
    pub(crate) fn new(url: &Url, proxy: Option<&Proxy>, tls: Option<&Settings>) -> OriginKey {
        let proxy = proxy.map(|p| {
            let mut secret = Vec::new();
            if let Some(a) = &p.authorization {
                secret.extend_from_slice(b"authorization\0");
                secret.extend_from_slice(a.as_bytes());
            }
            if let Some((user, password)) = p.socks.as_ref().and_then(|s| s.credentials.as_ref()) {
                secret.extend_from_slice(b"\0socks\0");
                secret.extend_from_slice(&(user.len() as u64).to_be_bytes());
                secret.extend_from_slice(user);
                secret.extend_from_slice(password);
            }
            let credentials = (!secret.is_empty()).then(|| {
                let d = ring::digest::digest(&ring::digest::SHA256, &secret);
                <[u8; 32]>::try_from(d.as_ref()).expect("SHA-256 is 32 bytes")
            });
            ProxyRoute {
                url: p.url.to_string(),
                tunnel: p.tunnel,
                credentials,
            }
        });
        OriginKey {
            scheme: url.scheme(),
            host: url.host().to_ascii_lowercase(),
            port: url.port(),
            proxy,
            tls: tls.cloned(),
        }
    }

    /// The TLS settings of an https origin (`None` for plain http).
    pub(crate) fn tls(&self) -> Option<&Settings> {
        self.tls.as_ref()
    }
}

/// What makes a run's certificate verifier: `--ca-certificate`, `--pinnedpubkey`, `-k`
/// (`SSL_CERT_FILE` and `SSL_CERT_DIR` are the process's, the same for every file). Part
/// of every https [`OriginKey`]: a connection or a session verified under one set of
/// settings is never used under another (a `-k` connection is no proof for a verified
/// file, nor one checked against one CA for a file that names another).
/// (`Default`: verified against the trust store alone, no pins.)
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Settings {
    /// `--ca-certificate`'s path (read once per run, when its configuration is made).
    pub ca_file: Option<PathBuf>,
    /// `--pinnedpubkey`: SHA-256 of SubjectPublicKeyInfo DER, in the order given.
    pub pins: Vec<[u8; 32]>,
    /// `-k`.
    pub insecure: bool,
}

impl Settings {
    /// The TLS settings `opts` asks for.
    pub fn of(opts: &Config) -> Settings {
        Settings {
            ca_file: opts.ca_certificate.clone(),
            pins: opts.pinned_public_keys.clone(),
            insecure: opts.insecure,
        }
    }
}
