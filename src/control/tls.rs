//! TLS client configuration: rustls with the ring provider, trust anchors from
//! webpki-roots, `SSL_CERT_FILE`, `SSL_CERT_DIR` and `--ca-certificate`.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::err;
use crate::error::Result;

/// Builds the client configuration shared by every connection of a download.
///
/// TLS 1.2 and 1.3, ALPN `http/1.1`. With `insecure`, the certificate chain and name are
/// not checked (handshake signatures still are).
///
/// # Errors
/// [`crate::error::Kind::LocalIo`] when `ca_file` cannot be read or holds no certificate.
pub fn client_config(ca_file: Option<&Path>, insecure: bool, verbose: u8) -> Result<Arc<ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(p) = std::env::var_os("SSL_CERT_FILE") {
        let n = add_pem_file(&mut roots, Path::new(&p));
        if verbose > 0 {
            eprintln!(
                "ringdl: {n} trust anchors from SSL_CERT_FILE={}",
                Path::new(&p).display()
            );
        }
    }
    if let Some(d) = std::env::var_os("SSL_CERT_DIR") {
        for dir in std::env::split_paths(&d) {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            let mut n = 0;
            for e in entries.flatten() {
                n += add_pem_file(&mut roots, &e.path());
            }
            if verbose > 0 {
                eprintln!("ringdl: {n} trust anchors from SSL_CERT_DIR {}", dir.display());
            }
        }
    }
    let mut pinned = Vec::new();
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
        pinned = certs.clone();
        let (added, _) = roots.add_parsable_certificates(certs);
        if added == 0 && pinned.is_empty() {
            return Err(err!(LocalIo, "--ca-certificate {}: no usable certificate", f.display()));
        }
    }
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| err!(Internal, "TLS configuration: {e}"))?;
    let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| err!(LocalIo, "trust anchors: {e}"))?;
    let verifier = Verifier {
        inner,
        pinned,
        insecure,
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

/// Parses every certificate of a PEM file into `roots`; unreadable files count zero.
fn add_pem_file(roots: &mut RootCertStore, path: &Path) -> usize {
    let Ok(iter) = CertificateDer::pem_file_iter(path) else {
        return 0;
    };
    roots.add_parsable_certificates(iter.flatten()).0
}

/// The TLS server name for `host`: an IP address (no SNI is sent) or a DNS name.
///
/// # Errors
/// [`crate::error::Kind::Usage`] when `host` is neither.
pub fn server_name(host: &str) -> Result<ServerName<'static>> {
    ServerName::try_from(host.to_owned()).map_err(|e| err!(Usage, "{host:?} is not a valid TLS server name: {e}"))
}

/// WebPKI verification, plus: a server certificate identical to one given with
/// `--ca-certificate` is trusted as is (curl's `--cacert` accepts a self-signed
/// certificate with CA:TRUE that webpki refuses as an end entity); with `-k` any
/// certificate is accepted. Handshake signatures are always checked against the
/// certificate's key.
#[derive(Debug)]
struct Verifier {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    pinned: Vec<CertificateDer<'static>>,
    insecure: bool,
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
        if self.insecure {
            return Ok(ServerCertVerified::assertion());
        }
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(_) if self.pinned.iter().any(|p| p.as_ref() == end_entity.as_ref()) => {
                Ok(ServerCertVerified::assertion())
            }
            r => r,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A TLS failure in words a user can act on (rustls' Display for the rest).
pub fn explain(e: &rustls::Error) -> String {
    use rustls::{CertificateError as C, Error as E};
    match e {
        E::InvalidCertificate(C::UnknownIssuer) => {
            "the server certificate is not trusted (unknown issuer): add its CA with --ca-certificate FILE, or -k".into()
        }
        E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            "the server certificate is not valid for this host name".into()
        }
        E::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => "the server certificate has expired".into(),
        E::InvalidCertificate(C::NotValidYet | C::NotValidYetContext { .. }) => {
            "the server certificate is not valid yet (check the clock)".into()
        }
        E::InvalidCertificate(C::Other(o)) if format!("{o:?}").contains("CaUsedAsEndEntity") => {
            "the server certificate is a CA certificate (CA:TRUE) used as a server certificate: give that exact certificate with --ca-certificate, or -k".into()
        }
        E::AlertReceived(a) => format!("the server sent TLS alert {a:?}"),
        e => e.to_string(),
    }
}
