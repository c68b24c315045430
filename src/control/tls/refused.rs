//! Certificates refused for a weakness of their own (a SHA-1 or MD5 signature, a small RSA
//! key), named in words: the certificate's common name and what is wrong, where rustls
//! and webpki give only an algorithm identifier's bytes or "BadSignature".

use std::sync::Arc;

use rustls::pki_types::CertificateDer;

use super::x509;

/// webpki refused a signature algorithm of the chain: when a certificate of it is
/// signed with a hash ringdl refuses (SHA-1, MD5), says which one and with what.
pub(super) fn name_weak_signature(
    e: rustls::Error,
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
) -> rustls::Error {
    use rustls::CertificateError as C;
    if !matches!(
        e,
        rustls::Error::InvalidCertificate(C::UnsupportedSignatureAlgorithmContext { .. })
    ) {
        return e;
    }
    let chain = std::iter::once((true, end_entity)).chain(intermediates.iter().map(|c| (false, c)));
    for (leaf, cert) in chain {
        if let Some(id) = x509::identity(cert.as_ref())
            && let Some(hash) = id.weak_hash
        {
            let refused = Refused::WeakSignature {
                leaf,
                common_name: id.common_name,
                hash,
            };
            return C::Other(rustls::OtherError(Arc::new(refused))).into();
        }
    }
    e
}

/// A handshake signature that did not verify: when the server key is RSA under 2048 bits
/// (ring verifies 2048 to 8192), says so; the chain itself was fine.
pub(super) fn name_small_key(e: rustls::Error, cert: &CertificateDer<'_>) -> rustls::Error {
    use rustls::CertificateError as C;
    if !matches!(e, rustls::Error::InvalidCertificate(C::BadSignature)) {
        return e;
    }
    match x509::identity(cert.as_ref()) {
        Some(id) if id.rsa_bits.is_some_and(|b| b < 2048) => {
            let refused = Refused::SmallKey {
                common_name: id.common_name,
                bits: id.rsa_bits.unwrap_or(0),
            };
            C::Other(rustls::OtherError(Arc::new(refused))).into()
        }
        _ => e,
    }
}

/// A certificate refused for a weakness of its own, in words.
#[derive(Debug)]
pub enum Refused {
    /// A certificate of the chain is signed with a broken hash (RFC 9155: no SHA-1 or
    /// MD5 signatures in TLS 1.2 and 1.3).
    WeakSignature {
        /// The server's own certificate (else an intermediate).
        leaf: bool,
        common_name: Option<String>,
        /// `SHA-1`, `MD5`, `MD2`.
        hash: &'static str,
    },
    /// The server's RSA key is under 2048 bits.
    SmallKey { common_name: Option<String>, bits: usize },
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cn = |c: &Option<String>| c.as_ref().map_or_else(String::new, |c| format!(" CN={c}"));
        match self {
            Refused::WeakSignature {
                leaf,
                common_name,
                hash,
            } => write!(
                f,
                "the {} certificate{} is signed with {hash} (refused): {hash} signatures can be forged",
                if *leaf { "server" } else { "intermediate" },
                cn(common_name)
            ),
            Refused::SmallKey { common_name, bits } => write!(
                f,
                "server key RSA-{bits} is too small (certificate{}; ringdl accepts RSA keys of 2048 bits or more)",
                cn(common_name)
            ),
        }
    }
}

impl std::error::Error for Refused {}
