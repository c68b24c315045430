//! The TLS client configurations of a run and their session stores: one verifier per set
//! of TLS settings, one session store per origin key. A session (RFC 8446 §2.2, RFC 5077)
//! is resumed only by a connection of the origin key it was made for: a resumed
//! handshake checks no certificate, so a session is proof only for the host name, port,
//! route and settings its full handshake was verified for.

use std::sync::Arc;

use rustls::ClientConfig;
use rustls::client::Resumption;

use crate::control::key::{OriginKey, Settings};
use crate::error::Result;

/// Origins whose configurations (and so sessions) a run keeps: the most recently used
/// ones (rustls' own cache keeps 32 server names by default).
const MAX_ORIGINS: usize = 32;

/// The size of each origin's session cache ([`Resumption::in_memory_sessions`]: keyed by
/// server name, which in one origin's cache is always its host; rustls keeps up to this
/// many TLS 1.3 tickets per name, a few come per connection and each is used once).
const MAX_SESSIONS: usize = 8;

/// The TLS client configurations of a run (see [`super::client_config`]): one base per
/// [`Settings`] — its verifier, whose trust store is loaded once — and from it one per
/// https [`OriginKey`], which differs from the base only in its session store of its own.
#[derive(Default)]
pub struct Configs {
    bases: Vec<(Settings, Arc<ClientConfig>)>,
    /// Least recently used first, at most [`MAX_ORIGINS`].
    origins: Vec<(OriginKey, Arc<ClientConfig>)>,
}

impl Configs {
    /// The configuration connections to `key` use, `None` for plain http (a key without
    /// TLS settings). The same `Arc` for equal keys while it is kept, so connections to an
    /// origin resume each other's sessions; a new one (with no session) for any other key.
    ///
    /// # Errors
    /// As [`super::client_config`]: `LocalIo` when `--ca-certificate` cannot be read.
    pub(crate) fn for_origin(&mut self, key: &OriginKey, verbose: u8) -> Result<Option<Arc<ClientConfig>>> {
        let Some(settings) = key.tls() else {
            return Ok(None);
        };
        if let Some(at) = self.origins.iter().position(|(k, _)| k == key) {
            let kept = self.origins.remove(at);
            let config = kept.1.clone();
            self.origins.push(kept);
            return Ok(Some(config));
        }
        let base = match self.bases.iter().find(|(s, _)| s == settings) {
            Some((_, b)) => b.clone(),
            None => {
                let b = super::client_config(settings.ca_file.as_deref(), &settings.pins, settings.insecure, verbose)?;
                self.bases.push((settings.clone(), b.clone()));
                b
            }
        };
        let mut config = ClientConfig::clone(&base);
        // rustls' own cache, keyed by server name: in a store of one key, always its host.
        config.resumption = Resumption::in_memory_sessions(MAX_SESSIONS);
        let config = Arc::new(config);
        if self.origins.len() >= MAX_ORIGINS {
            self.origins.remove(0);
        }
        self.origins.push((key.clone(), config.clone()));
        Ok(Some(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::proxy::Proxy;

    fn key(url: &str, proxy: Option<&Proxy>, settings: &Settings) -> OriginKey {
        let url = http::Url::parse(url).unwrap();
        let https = url.scheme() == http::Scheme::Https;
        OriginKey::new(&url, proxy, https.then_some(settings))
    }

    fn proxy(url: &str, authorization: Option<&str>) -> Proxy {
        Proxy {
            url: http::ProxyUrl::parse(url).unwrap(),
            authorization: authorization.map(str::to_owned),
            tunnel: true,
            socks: None,
            source: "--proxy",
        }
    }

    #[test]
    fn one_configuration_per_origin_key_and_one_verifier_per_settings() {
        let verified = Settings::default();
        let insecure = Settings {
            insecure: true,
            ..verified.clone()
        };
        let pinned = Settings {
            pins: vec![[7; 32]],
            ..verified.clone()
        };
        let mut c = Configs::default();
        let mut get = |k: &OriginKey| c.for_origin(k, 0).unwrap().expect("https");
        let a = key("https://localhost:8443/a", None, &verified);
        let first = get(&a);
        // The same key (another path, the host in capitals): the same configuration.
        assert!(Arc::ptr_eq(
            &first,
            &get(&key("https://LocalHost:8443/b", None, &verified))
        ));
        // Any other part of the key: a configuration (and a session store) of its own.
        let p = proxy("http://127.0.0.1:3128", None);
        let other = [
            key("https://127.0.0.1:8443/a", None, &verified),
            key("https://localhost:8444/a", None, &verified),
            key("https://localhost:8443/a", Some(&p), &verified),
            key(
                "https://localhost:8443/a",
                Some(&proxy("http://127.0.0.1:3128", Some("Basic eDp5"))),
                &verified,
            ),
            key("https://localhost:8443/a", None, &insecure),
            key("https://localhost:8443/a", None, &pinned),
        ];
        for k in &other {
            assert_ne!(*k, a);
            assert!(!Arc::ptr_eq(&first, &get(k)), "{k:?} shares the configuration of {a:?}");
        }
        assert!(
            c.for_origin(&key("http://localhost:8443/a", None, &verified), 0)
                .unwrap()
                .is_none()
        );
        // Three settings: three verifiers (trust stores), whatever the number of origins.
        assert_eq!(c.bases.len(), 3);
        assert_eq!(c.origins.len(), 1 + other.len());
    }

    #[test]
    fn the_configurations_kept_are_the_most_recently_used() {
        let s = Settings::default();
        let mut c = Configs::default();
        let k = |n: usize| key(&format!("https://h{n}.example/"), None, &s);
        let first = c.for_origin(&k(0), 0).unwrap().unwrap();
        for n in 1..MAX_ORIGINS + 5 {
            c.for_origin(&k(n), 0).unwrap();
            // (Origin 0 stays in use throughout.)
            assert!(Arc::ptr_eq(&first, &c.for_origin(&k(0), 0).unwrap().unwrap()));
        }
        assert_eq!(c.origins.len(), MAX_ORIGINS);
        assert!(!c.origins.iter().any(|(key, _)| *key == k(1)));
    }
}
