//! TLS material for the fault server: the harness's test CA and `localhost` /
//! `127.0.0.1` / `::1` leaf (`util::make_tls`, rcgen), loaded into a rustls server config.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Generates the CA and the leaf into `dir` (the CA PEM at `dir/ca.pem` for
/// `--ca-certificate`) and returns its path with the server config.
pub fn make(dir: &Path) -> (PathBuf, Arc<ServerConfig>) {
    let ca_path = crate::util::make_tls(dir);
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("server.pem"))
        .expect("reading server.pem")
        .collect::<Result<_, _>>()
        .expect("parsing server.pem");
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).expect("reading server.key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server certificate");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    (ca_path, Arc::new(config))
}
