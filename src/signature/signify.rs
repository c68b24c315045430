//! signify / usign signatures: OpenBSD `signify(1)` (`signify -S -s key.sec -m FILE`) and
//! OpenWrt `usign`, which share the format.
//!
//! A `.sig` file is two lines: `untrusted comment: …` and the base64 of `Ed` ‖ keynum (8
//! bytes) ‖ Ed25519 signature (64 bytes, RFC 8032) over the whole message. The `.pub` file
//! is the same with `Ed` ‖ keynum ‖ the 32-byte key ([`super::parse_ed_key`]); the keynums
//! must match. Source: signify.c (`struct sig`, `struct pubkey`, `verifymsg`).

use super::{COMMENT, Malformed, Refused, TrustedKey, Verified};

/// A detached signify signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// The text after `untrusted comment: ` (not covered by the signature).
    pub comment: String,
    /// The signing key's number.
    pub keynum: [u8; 8],
    /// Ed25519 over the message.
    pub sig: [u8; 64],
}

/// The most an untrusted comment may hold, bytes (signify's COMMENTMAXLEN).
const COMMENT_MAX: usize = 1024;

/// Parses a detached `.sig` file.
///
/// # Errors
/// [`Malformed`]: no comment line, no or bad base64 line, not `Ed`, not 74 bytes, or text
/// after the signature (an embedded-message signature, `signify -S -e`, is not detached).
pub fn parse(text: &str) -> Result<Signature, Malformed> {
    let mut lines = text.split('\n');
    let comment = lines
        .next()
        .and_then(|l| l.strip_prefix(COMMENT))
        .ok_or(Malformed("signify: no \"untrusted comment:\" line"))?;
    let comment = comment.strip_prefix(' ').unwrap_or(comment).trim_end_matches('\r');
    if comment.len() > COMMENT_MAX {
        return Err(Malformed("signify: the untrusted comment is longer than 1024 bytes"));
    }
    let b64 = lines
        .next()
        .filter(|l| !l.trim().is_empty())
        .ok_or(Malformed("signify: truncated: no signature line after the comment"))?;
    if lines.any(|l| !l.trim().is_empty()) {
        return Err(Malformed(
            "signify: text after the signature (an embedded-message signature, signify -e, is not detached)",
        ));
    }
    let raw = super::base64(b64).map_err(|_| Malformed("signify: the signature line is not base64"))?;
    if raw.len() != 74 {
        return Err(Malformed(
            "signify: the signature is not 74 bytes (\"Ed\", keynum, 64-byte signature): truncated?",
        ));
    }
    if &raw[..2] != b"Ed" {
        return Err(Malformed("signify: unknown algorithm (not \"Ed\")"));
    }
    Ok(Signature {
        comment: comment.to_owned(),
        keynum: raw[2..10].try_into().expect("8 bytes"),
        sig: raw[10..].try_into().expect("64 bytes"),
    })
}

impl Signature {
    /// The `.sig` file again (the comment, then base64 of `Ed` ‖ keynum ‖ signature).
    pub fn encode(&self) -> String {
        let mut raw = b"Ed".to_vec();
        raw.extend_from_slice(&self.keynum);
        raw.extend_from_slice(&self.sig);
        format!("{COMMENT} {}\n{}\n", self.comment, crate::base64::encode(&raw))
    }

    /// Verifies over `message` with the trusted key of the same keynum.
    ///
    /// # Errors
    /// [`Refused::UnknownKey`] (no key with this keynum), [`Refused::Bad`].
    pub fn verify(&self, keys: &[TrustedKey], message: &[u8]) -> Result<Verified, Refused> {
        let (key, id) = self.signer(keys)?;
        if !super::ed25519(&key.key, message, &self.sig) {
            return Err(Refused::Bad(id));
        }
        Ok(Verified {
            format: super::Format::Signify,
            key: id,
            principals: None,
        })
    }

    /// The trusted key with this signature's keynum, and its id: what is refused whatever
    /// the bytes.
    ///
    /// # Errors
    /// [`Refused::UnknownKey`].
    pub fn signer<'k>(&self, keys: &'k [TrustedKey]) -> Result<(&'k super::EdKey, String), Refused> {
        let id = super::key_id(&self.keynum);
        let key = super::ed_key(keys, &self.keynum).ok_or_else(|| Refused::UnknownKey(id.clone()))?;
        Ok((key, id))
    }
}
