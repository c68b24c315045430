//! TLS client configuration: rustls with the ring provider, trust anchors from
//! webpki-roots, `SSL_CERT_FILE`, `SSL_CERT_DIR` and `--ca-certificate`.

mod configs;
mod refused;
mod roots;
mod x509;

pub use crate::control::key::Settings;
pub use configs::Configs;
pub use refused::Refused;
use refused::{name_small_key, name_weak_signature};

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, ExtendedKeyPurpose, SignatureScheme};

use crate::err;
use crate::error::Result;

/// Builds a client configuration: the base of every https origin of a run with these
/// settings (see [`Configs`]: each origin gets a copy with a session store of its own,
/// all sharing this verifier).
///
/// TLS 1.2 and 1.3, ALPN `http/1.1`. Trust anchors (see [`roots::load`]): webpki-roots,
/// then the PEM file `SSL_CERT_FILE` names and the PEM files in each directory of
/// `SSL_CERT_DIR` (a path that cannot be read is reported once on stderr and skipped),
/// then `ca_file` — loaded when the first certificate must be verified, never with
/// `insecure`. The server's host name is checked whatever the anchor (see [`Verifier`]).
/// With `insecure`, the certificate chain and name are not checked (handshake signatures
/// still are). `pins` (`--pinnedpubkey`, see [`parse_pins`]), when not empty: the server
/// key must be one of them, with or without `insecure`.
///
/// # Errors
/// [`crate::error::Kind::LocalIo`] when `ca_file` cannot be read or holds no certificate
/// (read at once, with or without `insecure`: a bad option is said before any request).
pub fn client_config(
    ca_file: Option<&Path>,
    pins: &[[u8; 32]],
    insecure: bool,
    verbose: u8,
) -> Result<Arc<ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut own_anchors = Vec::new();
    if let Some(f) = ca_file {
        let certs: Vec<_> = CertificateDer::pem_file_iter(f)
            .map_err(|e| err!(LocalIo, "--ca-certificate {}: {e}", f.display()))?
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| err!(LocalIo, "--ca-certificate {}: {e}", f.display()))?;
        if certs.is_empty() {
            return Err(err!(
                LocalIo,
                "--ca-certificate {}: no PEM certificate in the file",
                f.display()
            ));
        }
        own_anchors = certs;
    }
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| err!(Internal, "TLS configuration: {e}"))?;
    let verifier = Verifier {
        inner: OnceLock::new(),
        provider: provider.clone(),
        algorithms: provider.signature_verification_algorithms,
        ca_file: ca_file.map(Path::to_path_buf),
        own_anchors,
        pins: pins.to_vec(),
        insecure,
        verbose,
        said_own_anchor: AtomicBool::new(false),
        said_pin: AtomicBool::new(false),
    };
    let mut config = builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // The kTLS hand-off needs the traffic secrets; they never leave the process otherwise.
    config.enable_secret_extraction = true;
    Ok(Arc::new(config))
}

/// The TLS server name for `host`: an IP address (no SNI is sent) or a DNS name.
///
/// # Errors
/// [`crate::error::Kind::Usage`] when `host` is neither.
pub fn server_name(host: &str) -> Result<ServerName<'static>> {
    ServerName::try_from(host.to_owned()).map_err(|e| err!(Usage, "{host:?} is not a valid TLS server name: {e}"))
}

/// The server certificate check: WebPKI (chain to an anchor, validity period,
/// extended key usage, host name), plus one case of its own.
///
/// A server certificate byte-identical to one given with `--ca-certificate` is its own
/// trust anchor, as with curl `--cacert` (OpenSSL's partial chains): webpki refuses a
/// self-signed CA:TRUE certificate as an end entity, and a leaf whose issuer is not
/// given has no chain. Such a certificate passes only when its validity period covers
/// now, its key usage / extended key usage allow a TLS server (see [`check_own_anchor`];
/// the key usage is checked for every certificate, as OpenSSL does) and it names the
/// host (DNS names against dNSName SANs, IP literals against iPAddress SANs; RFC 6125,
/// via webpki). With `-k` any certificate is accepted. With `--pinnedpubkey` the
/// server key must also be a pinned one (with `-k` too: then the pin is all that is
/// checked). Handshake signatures are always checked against the certificate's key.
#[derive(Debug)]
struct Verifier {
    /// WebPKI over the trust store, made on the first certificate to verify (see
    /// [`roots::load`]); the error when it cannot be made.
    inner: OnceLock<std::result::Result<Arc<rustls::client::WebPkiServerVerifier>, rustls::Error>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
    /// The provider's algorithms for handshake signatures (checked with `-k` too).
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
    /// `--ca-certificate`'s path (for `-v`).
    ca_file: Option<std::path::PathBuf>,
    /// The certificates of `--ca-certificate`, DER.
    own_anchors: Vec<CertificateDer<'static>>,
    /// `--pinnedpubkey`: SHA-256 of SubjectPublicKeyInfo DER.
    pins: Vec<[u8; 32]>,
    insecure: bool,
    verbose: u8,
    /// Set once `-v` said that a certificate was trusted as its own anchor.
    said_own_anchor: AtomicBool,
    /// Set once `-v` said that the pinned key matched.
    said_pin: AtomicBool,
}

impl Verifier {
    /// The WebPKI verifier, the trust store loaded on the first call.
    fn webpki(&self) -> std::result::Result<&Arc<rustls::client::WebPkiServerVerifier>, rustls::Error> {
        self.inner
            .get_or_init(|| {
                let file = std::env::var_os("SSL_CERT_FILE").map(std::path::PathBuf::from);
                let dirs: Vec<_> = std::env::var_os("SSL_CERT_DIR")
                    .map(|d| {
                        std::env::split_paths(&d)
                            .filter(|d| !d.as_os_str().is_empty())
                            .collect()
                    })
                    .unwrap_or_default();
                let own = self.ca_file.as_deref().map(|f| (f, &self.own_anchors[..]));
                let roots = roots::load(file.as_deref(), &dirs, own, self.verbose);
                rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), self.provider.clone())
                    .build()
                    .map_err(|e| rustls::Error::General(format!("trust anchors: {e}")))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// WebPKI, or the own-anchor case; see [`Verifier`].
    fn verify_anchored(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self
            .webpki()?
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(_) if self.own_anchors.iter().any(|a| a.as_ref() == end_entity.as_ref()) => {
                check_own_anchor(end_entity, server_name, now)?;
                if self.verbose > 0 && !self.said_own_anchor.swap(true, Ordering::Relaxed) {
                    eprintln!(
                        "ringdl: the server certificate is one given in --ca-certificate: trusted as its own \
                         anchor (validity period, key usage and host name {} checked)",
                        server_name.to_str()
                    );
                }
                Ok(ServerCertVerified::assertion())
            }
            Ok(verified) => {
                // webpki ignores keyUsage; OpenSSL (curl, wget) checks it, and so does
                // the own-anchor case: the same rule for every certificate.
                if let Some(facts) = x509::facts(end_entity.as_ref()) {
                    check_usage(&facts)?;
                }
                Ok(verified)
            }
            Err(e) => Err(e),
        }
    }

    /// `--pinnedpubkey`: the SHA-256 of the certificate's SubjectPublicKeyInfo must be
    /// pinned (curl's `sha256//` pins, RFC 7469 §2.4's hash input).
    fn check_pin(&self, end_entity: &CertificateDer<'_>) -> std::result::Result<(), rustls::Error> {
        if self.pins.is_empty() {
            return Ok(());
        }
        let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
        let digest = ring::digest::digest(&ring::digest::SHA256, parsed.subject_public_key_info().as_ref());
        let pin = format!("sha256//{}", crate::base64::encode(digest.as_ref()));
        if !self.pins.iter().any(|p| p[..] == *digest.as_ref()) {
            return Err(rustls::CertificateError::Other(rustls::OtherError(Arc::new(PinMismatch(pin)))).into());
        }
        if self.verbose > 0 && !self.said_pin.swap(true, Ordering::Relaxed) {
            let also = if self.insecure {
                "certificate chain, validity and host name NOT checked (-k)"
            } else {
                "certificate chain, validity and host name checked as well"
            };
            eprintln!("ringdl: --pinnedpubkey: the server key {pin} is pinned; {also}");
        }
        Ok(())
    }
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let verified = if self.insecure {
            ServerCertVerified::assertion()
        } else {
            self.verify_anchored(end_entity, intermediates, server_name, ocsp_response, now)
                .map_err(|e| name_weak_signature(e, end_entity, intermediates))?
        };
        self.check_pin(end_entity)?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
            .map_err(|e| name_small_key(e, cert))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
            .map_err(|e| name_small_key(e, cert))
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Checks a certificate trusted as its own anchor (see [`Verifier`]): validity period
/// (RFC 5280 §4.1.2.5), key usage ([`check_usage`]), then the host name.
///
/// # Errors
/// The [`rustls::CertificateError`] of the first check that fails; a key usage without a
/// TLS server bit is `Other(`[`KeyUsageRefused`]`)`.
fn check_own_anchor(
    cert: &CertificateDer<'_>,
    server_name: &ServerName<'_>,
    now: UnixTime,
) -> std::result::Result<(), rustls::Error> {
    use rustls::CertificateError as C;
    let at = |secs| UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs));
    let facts = x509::facts(cert.as_ref()).ok_or(C::BadEncoding)?;
    if now.as_secs() < facts.not_before {
        return Err(C::NotValidYetContext {
            time: now,
            not_before: at(facts.not_before),
        }
        .into());
    }
    if now.as_secs() > facts.not_after {
        return Err(C::ExpiredContext {
            time: now,
            not_after: at(facts.not_after),
        }
        .into());
    }
    check_usage(&facts)?;
    let parsed = rustls::server::ParsedCertificate::try_from(cert)?;
    rustls::client::verify_server_name(&parsed, server_name)
}

/// keyUsage (when present: digitalSignature, keyEncipherment or keyAgreement — OpenSSL's
/// rule, RFC 5280 §4.2.1.3) and extKeyUsage (when present: serverAuth or
/// anyExtendedKeyUsage, §4.2.1.12) allow a TLS server key.
///
/// # Errors
/// `Other(`[`KeyUsageRefused`]`)` or `InvalidPurposeContext`.
fn check_usage(facts: &x509::Facts<'_>) -> std::result::Result<(), rustls::Error> {
    use rustls::CertificateError as C;
    if let Some(bits) = facts.key_usage
        && bits & x509::KU_TLS == 0
    {
        return Err(C::Other(rustls::OtherError(Arc::new(KeyUsageRefused))).into());
    }
    if let Some(purposes) = &facts.ext_key_usage
        && !purposes
            .iter()
            .any(|&p| p == x509::OID_SERVER_AUTH || p == x509::OID_ANY_EKU)
    {
        return Err(C::InvalidPurposeContext {
            required: ExtendedKeyPurpose::ServerAuth,
            presented: purposes
                .iter()
                .map(|&p| match p {
                    x509::OID_CLIENT_AUTH => ExtendedKeyPurpose::ClientAuth,
                    p => ExtendedKeyPurpose::Other(x509::oid_arcs(p)),
                })
                .collect(),
        }
        .into());
    }
    Ok(())
}

/// A keyUsage extension with none of digitalSignature, keyEncipherment, keyAgreement:
/// the key may not serve TLS (RFC 5280 §4.2.1.3).
#[derive(Debug)]
pub struct KeyUsageRefused;

impl std::fmt::Display for KeyUsageRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("its key usage allows none of digitalSignature, keyEncipherment, keyAgreement")
    }
}

impl std::error::Error for KeyUsageRefused {}

/// The server key is not one `--pinnedpubkey` names; holds the key's own `sha256//` pin.
#[derive(Debug)]
pub struct PinMismatch(String);

impl std::fmt::Display for PinMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the server key is not one --pinnedpubkey names (the server key is {})",
            self.0
        )
    }
}

impl std::error::Error for PinMismatch {}

/// Parses `--pinnedpubkey` as curl spells it: `sha256//BASE64[;sha256//BASE64…]`, each
/// the base64 (RFC 4648 §4, padding optional) of the SHA-256 of a SubjectPublicKeyInfo
/// DER (`openssl pkey -pubout -outform der | openssl dgst -sha256 -binary | base64`).
/// Key files (curl's other form) are not read.
///
/// # Errors
/// [`crate::error::Kind::Usage`] for an empty list or an item that is not such a hash.
pub fn parse_pins(v: &str) -> Result<Vec<[u8; 32]>> {
    v.split(';')
        .map(|item| {
            item.trim()
                .strip_prefix("sha256//")
                .and_then(crate::base64::decode)
                .and_then(|d| <[u8; 32]>::try_from(d).ok())
                .ok_or_else(|| {
                    err!(
                        Usage,
                        "--pinnedpubkey: {item:?} is not sha256//BASE64 (the base64 SHA-256 of a public key; \
                         several joined with ';')"
                    )
                })
        })
        .collect()
}

/// True when a handshake failed because the server answered in plain HTTP: rustls saw
/// a record of no TLS content type and the bytes received start with `HTTP/`.
pub fn is_plain_http_answer(e: &rustls::Error, received: &[u8]) -> bool {
    matches!(
        e,
        rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType)
    ) && received.starts_with(b"HTTP/")
}

/// The message for [`is_plain_http_answer`]: the same URL over `http://`, port kept.
pub fn plain_http_message(url: &http::Url) -> String {
    format!(
        "the server answered in plain HTTP, not TLS (try http://{}{})",
        http::authority(url),
        url.path_and_query()
    )
}

/// A subject alternative name as webpki's Debug spells it (`DnsName("a.example")`,
/// `IpAddress(127.0.0.1)`), in the `DNS:` / `IP:` form of `openssl x509 -text`.
fn san(debug: &str) -> String {
    if let Some(name) = debug.strip_prefix("DnsName(\"").and_then(|n| n.strip_suffix("\")")) {
        format!("DNS:{name}")
    } else if let Some(ip) = debug.strip_prefix("IpAddress(").and_then(|n| n.strip_suffix(')')) {
        format!("IP:{ip}")
    } else {
        debug.to_owned()
    }
}

/// A TLS failure in words a user can act on (rustls' Display for the rest).
pub fn explain(e: &rustls::Error) -> String {
    use rustls::{CertificateError as C, Error as E};
    match e {
        E::InvalidCertificate(C::UnknownIssuer) => {
            "the server certificate is not trusted (unknown issuer): add its CA with --ca-certificate FILE, or -k".into()
        }
        E::InvalidCertificate(C::NotValidForNameContext { expected, presented }) => {
            let names = if presented.is_empty() {
                "no subject alternative name".to_owned()
            } else {
                presented.iter().map(|n| san(n)).collect::<Vec<_>>().join(", ")
            };
            let what = match expected {
                ServerName::IpAddress(_) => "IP address",
                _ => "host name",
            };
            format!(
                "the server certificate is not valid for the {what} {}: it names {names} \
                 (host names are checked whatever the trust anchor)",
                expected.to_str()
            )
        }
        E::InvalidCertificate(C::NotValidForName) => "the server certificate is not valid for this host name".into(),
        E::InvalidCertificate(C::ExpiredContext { not_after, .. }) => format!(
            "the server certificate has expired (notAfter {})",
            x509::utc(not_after.as_secs())
        ),
        E::InvalidCertificate(C::Expired) => "the server certificate has expired".into(),
        E::InvalidCertificate(C::NotValidYetContext { not_before, .. }) => format!(
            "the server certificate is not valid yet (notBefore {}; check the clock)",
            x509::utc(not_before.as_secs())
        ),
        E::InvalidCertificate(C::NotValidYet) => "the server certificate is not valid yet (check the clock)".into(),
        E::InvalidCertificate(C::InvalidPurposeContext { presented, .. }) => {
            let list: Vec<_> = presented.iter().map(|p| p.to_string()).collect();
            format!(
                "the server certificate is not for TLS servers: its extended key usage allows only {}",
                list.join("; ")
            )
        }
        E::InvalidCertificate(C::InvalidPurpose) => {
            "the server certificate is not for TLS servers (extended key usage)".into()
        }
        E::InvalidCertificate(C::Other(o))
            if o.0.downcast_ref::<PinMismatch>().is_some() || o.0.downcast_ref::<Refused>().is_some() =>
        {
            o.0.to_string()
        }
        E::InvalidCertificate(C::UnsupportedSignatureAlgorithmContext { signature_algorithm_id, .. }) => {
            // The AlgorithmIdentifier's content: the OID's tag, length and octets.
            let arcs = match signature_algorithm_id.as_slice() {
                [0x06, n, rest @ ..] if rest.len() >= usize::from(*n) => x509::oid_arcs(&rest[..usize::from(*n)]),
                _ => Vec::new(),
            };
            let oid: Vec<String> = arcs.iter().map(ToString::to_string).collect();
            format!(
                "a certificate of the chain is signed with an algorithm ringdl does not accept (OID {})",
                oid.join(".")
            )
        }
        E::InvalidMessage(rustls::InvalidMessage::HandshakePayloadTooLarge) => {
            "the server sent a certificate message larger than 64 KiB (its certificate chain is too long; \
             a TLS handshake message may not exceed 64 KiB in ringdl)"
                .into()
        }
        E::AlertReceived(a @ (rustls::AlertDescription::HandshakeFailure | rustls::AlertDescription::InsufficientSecurity)) => {
            format!(
                "the server refused the handshake (TLS alert {a:?}): the server offers no TLS 1.2/1.3 cipher suite \
                 ringdl accepts (ECDHE with AES-GCM or ChaCha20-Poly1305)"
            )
        }
        E::AlertReceived(a @ rustls::AlertDescription::ProtocolVersion) => format!(
            "the server refused the handshake (TLS alert {a:?}): it offers no TLS version ringdl accepts (TLS 1.2, 1.3)"
        ),
        E::PeerIncompatible(p) => format!(
            "the server's TLS is one ringdl does not speak ({p:?}): ringdl accepts TLS 1.2/1.3 with ECDHE and \
             AES-GCM or ChaCha20-Poly1305"
        ),
        E::InvalidCertificate(C::Other(o)) if o.0.downcast_ref::<KeyUsageRefused>().is_some() => {
            format!("the server certificate is not for TLS servers: {}", o.0)
        }
        E::InvalidCertificate(C::Other(o)) if format!("{o:?}").contains("CaUsedAsEndEntity") => {
            "the server certificate is a CA certificate (CA:TRUE) used as a server certificate: give that exact certificate with --ca-certificate, or -k".into()
        }
        E::InvalidMessage(rustls::InvalidMessage::InvalidContentType) => {
            "the server did not answer in TLS (is this port plain HTTP?)".into()
        }
        E::AlertReceived(a) => format!("the server sent TLS alert {a:?}"),
        e => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, date_time_ymd};

    /// A self-signed certificate for localhost and 127.0.0.1, edited by `edit`.
    fn cert(edit: impl FnOnce(&mut CertificateParams)) -> CertificateDer<'static> {
        let mut p = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        p.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        edit(&mut p);
        p.self_signed(&KeyPair::generate().unwrap()).unwrap().der().clone()
    }

    fn check(c: &CertificateDer<'_>, host: &str) -> String {
        let now = UnixTime::since_unix_epoch(std::time::Duration::from_secs(1_800_000_000)); // 2027
        match check_own_anchor(c, &ServerName::try_from(host).unwrap(), now) {
            Ok(()) => "ok".into(),
            Err(e) => explain(&e),
        }
    }

    #[test]
    fn own_anchor_checks_name_validity_and_usage() {
        let good = cert(|_| {});
        assert_eq!(check(&good, "localhost"), "ok");
        assert_eq!(check(&good, "127.0.0.1"), "ok");
        assert!(
            check(&good, "other.example").contains("host name other.example: it names DNS:localhost, IP:127.0.0.1")
        );
        let expired = cert(|p| p.not_after = date_time_ymd(2026, 1, 1));
        assert!(check(&expired, "localhost").contains("expired (notAfter 2026-01-01 00:00:00 UTC)"));
        let early = cert(|p| p.not_before = date_time_ymd(2028, 1, 1));
        assert!(check(&early, "localhost").contains("not valid yet (notBefore 2028-01-01"));
        let client = cert(|p| p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth]);
        assert!(check(&client, "localhost").contains("allows only client authentication"));
        let any = cert(|p| p.extended_key_usages = vec![ExtendedKeyUsagePurpose::Any]);
        assert_eq!(check(&any, "localhost"), "ok");
        let no_sign = cert(|p| p.key_usages = vec![KeyUsagePurpose::KeyCertSign]);
        assert!(check(&no_sign, "localhost").contains("digitalSignature"));
        let sign = cert(|p| p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature]);
        assert_eq!(check(&sign, "localhost"), "ok");
        // OpenSSL's rule, as curl and wget: keyEncipherment alone (old RSA certificates) passes.
        let encipher = cert(|p| p.key_usages = vec![KeyUsagePurpose::KeyEncipherment]);
        assert_eq!(check(&encipher, "localhost"), "ok");
    }

    #[test]
    fn pins_parse_like_curl() {
        let d = [7u8; 32];
        let b = crate::base64::encode(&d);
        assert_eq!(b.len(), 44);
        assert_eq!(parse_pins(&format!("sha256//{b}")).unwrap(), [d]);
        assert_eq!(
            parse_pins(&format!("sha256//{b}; sha256//{}", b.trim_end_matches('='))).unwrap(),
            [d, d]
        );
        for bad in [
            "",
            "sha256//",
            "sha1//AAAA",
            &b,
            "sha256//AAAA",
            &format!("sha256//{b}A"),
            "sha256//!!",
        ] {
            assert!(parse_pins(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn plain_http_answer_names_the_http_url() {
        let e = rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType);
        assert!(is_plain_http_answer(&e, b"HTTP/1.1 400 Bad Request\r\n"));
        assert!(!is_plain_http_answer(&e, b"\x15\x03\x03"));
        let url = http::Url::parse("https://h.example:8080/a/b?c=d").unwrap();
        assert!(plain_http_message(&url).ends_with("(try http://h.example:8080/a/b?c=d)"));
        let url = http::Url::parse("https://[::1]/f").unwrap();
        assert!(plain_http_message(&url).ends_with("(try http://[::1]:443/f)"));
    }
}
