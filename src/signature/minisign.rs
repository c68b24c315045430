//! minisign signatures (`minisign -S -s KEY -m FILE` → `FILE.minisig`).
//!
//! Four lines: `untrusted comment: …`; base64 of the algorithm (`ED`: Ed25519 over the
//! BLAKE2b-512 of the message, minisign's default; `Ed`: over the message itself, legacy
//! `-l`) ‖ key id (8 bytes) ‖ signature (64 bytes); `trusted comment: …`; base64 of the
//! global signature, Ed25519 over signature ‖ trusted-comment bytes, which proves the
//! trusted comment. The public key is `Ed` ‖ key id ‖ 32-byte key
//! ([`super::parse_ed_key`]). Source: jedisct1/minisign `src/minisign.c`
//! (`verify`, `sig_load`) and its README's format section.

use super::{COMMENT, Malformed, Refused, TrustedKey, Verified};

/// The third line's prefix.
pub const TRUSTED: &str = "trusted comment: ";

/// A parsed `.minisig`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// The text after `untrusted comment: ` (covered by nothing).
    pub untrusted: String,
    /// `ED` (true: over BLAKE2b-512 of the message) or `Ed` (false: over the message).
    pub prehashed: bool,
    /// The signing key's id.
    pub key_id: [u8; 8],
    /// Ed25519 over the message or its BLAKE2b-512.
    pub sig: [u8; 64],
    /// The text after `trusted comment: `.
    pub trusted: String,
    /// Ed25519 over `sig` ‖ `trusted`.
    pub global: [u8; 64],
}

/// The most a comment may hold, bytes (minisign's COMMENTMAXBYTES).
const COMMENT_MAX: usize = 1024;

/// Parses a `.minisig` file.
///
/// # Errors
/// [`Malformed`] naming the missing or bad line (a truncated file lacks one).
pub fn parse(text: &str) -> Result<Signature, Malformed> {
    let mut lines = text.split('\n').map(|l| l.trim_end_matches('\r'));
    let untrusted = lines
        .next()
        .and_then(|l| l.strip_prefix(COMMENT))
        .ok_or(Malformed("minisign: no \"untrusted comment:\" line"))?;
    let untrusted = untrusted.strip_prefix(' ').unwrap_or(untrusted);
    let sig_line = lines
        .next()
        .ok_or(Malformed("minisign: truncated: no signature line"))?;
    let raw = super::base64(sig_line).map_err(|_| Malformed("minisign: the signature line is not base64"))?;
    if raw.len() != 74 {
        return Err(Malformed(
            "minisign: the signature is not 74 bytes (algorithm, key id, 64-byte signature): truncated?",
        ));
    }
    let prehashed = match &raw[..2] {
        b"ED" => true,
        b"Ed" => false,
        _ => return Err(Malformed("minisign: unknown signature algorithm (not ED or Ed)")),
    };
    let trusted = lines
        .next()
        .and_then(|l| l.strip_prefix(TRUSTED))
        .ok_or(Malformed("minisign: truncated: no \"trusted comment: \" line"))?;
    let global_line = lines
        .next()
        .filter(|l| !l.is_empty())
        .ok_or(Malformed("minisign: truncated: no global signature line"))?;
    let global = super::base64(global_line).map_err(|_| Malformed("minisign: the global signature is not base64"))?;
    if global.len() != 64 {
        return Err(Malformed("minisign: the global signature is not 64 bytes: truncated?"));
    }
    if lines.any(|l| !l.trim().is_empty()) {
        return Err(Malformed("minisign: text after the global signature"));
    }
    if untrusted.len() > COMMENT_MAX || trusted.len() > COMMENT_MAX {
        return Err(Malformed("minisign: a comment is longer than 1024 bytes"));
    }
    Ok(Signature {
        untrusted: untrusted.to_owned(),
        prehashed,
        key_id: raw[2..10].try_into().expect("8 bytes"),
        sig: raw[10..].try_into().expect("64 bytes"),
        trusted: trusted.to_owned(),
        global: global.try_into().expect("64 bytes"),
    })
}

impl Signature {
    /// The `.minisig` file again.
    pub fn encode(&self) -> String {
        let mut raw = if self.prehashed { b"ED".to_vec() } else { b"Ed".to_vec() };
        raw.extend_from_slice(&self.key_id);
        raw.extend_from_slice(&self.sig);
        let b64 = crate::base64::encode;
        format!(
            "{COMMENT} {}\n{}\n{TRUSTED}{}\n{}\n",
            self.untrusted,
            b64(&raw),
            self.trusted,
            b64(&self.global)
        )
    }

    /// Verifies over `input` (the BLAKE2b-512 of the message when prehashed, else the
    /// message), then the global signature over the trusted comment.
    ///
    /// # Errors
    /// [`Refused::UnknownKey`], [`Refused::Bad`], [`Refused::TrustedComment`].
    pub fn verify(&self, keys: &[TrustedKey], input: &[u8]) -> Result<Verified, Refused> {
        let (key, id) = self.signer(keys)?;
        if !super::ed25519(&key.key, input, &self.sig) {
            return Err(Refused::Bad(id));
        }
        Ok(Verified {
            format: super::Format::Minisign,
            key: id,
            principals: None,
        })
    }

    /// The trusted key of this signature's key id, and the id as minisign prints it, once
    /// the global signature over the trusted comment verifies (it covers the signature,
    /// not the file): what is refused whatever the bytes.
    ///
    /// # Errors
    /// [`Refused::UnknownKey`], [`Refused::TrustedComment`].
    pub fn signer<'k>(&self, keys: &'k [TrustedKey]) -> Result<(&'k super::EdKey, String), Refused> {
        let id = super::key_id(&self.key_id);
        let key = super::ed_key(keys, &self.key_id).ok_or_else(|| Refused::UnknownKey(id.clone()))?;
        let mut signed = self.sig.to_vec();
        signed.extend_from_slice(self.trusted.as_bytes());
        if !super::ed25519(&key.key, &signed, &self.global) {
            return Err(Refused::TrustedComment(id));
        }
        Ok((key, id))
    }
}
