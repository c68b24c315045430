//! Detached signatures (`--signature`, `--trusted-key`): parsers and verification, pure
//! functions over bytes — no I/O. The app reads the files, the output's read-back feeds
//! [`Prehasher`] the downloaded bytes, and [`verify`] answers which key signed them.
//!
//! Three formats, each told apart by its own framing ([`parse`]):
//! - **SSHSIG** ([`sshsig`]): `ssh-keygen -Y sign`, OpenSSH `PROTOCOL.sshsig`: an armored
//!   blob whose signature covers a SHA-256 or SHA-512 of the message, so a file of any size
//!   is verified from its digest.
//! - **signify / usign** ([`signify`]): OpenBSD `signify(1)`, OpenWrt `usign`: Ed25519
//!   over the whole message (held in memory: at most [`MAX_MESSAGE`] bytes).
//! - **minisign** ([`minisign`]): `minisign(1)`: Ed25519 over BLAKE2b-512 of the message
//!   (`ED`, the default) or over the message itself (`Ed`, legacy `-l`), plus a global
//!   signature over the trusted comment.
//!
//! Every signature is verified with `ring` (Ed25519, ECDSA P-256/P-384, RSA PKCS#1 v1.5).

pub mod minisign;
pub mod signify;
pub mod sshsig;

use std::fmt;

/// The most a raw-message signature (signify, minisign `-l`) may cover, bytes: the whole
/// message is held in memory to verify it (64 MiB).
pub const MAX_MESSAGE: u64 = 64 << 20;

/// The most a signature or trusted-key file may hold, bytes (64 KiB): every format's
/// files are a few hundred bytes.
pub const MAX_FILE: u64 = 64 << 10;

/// Which format a signature came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenSSH `PROTOCOL.sshsig`.
    Sshsig,
    /// OpenBSD signify / OpenWrt usign.
    Signify,
    /// minisign.
    Minisign,
}

impl Format {
    /// `sshsig`, `signify`, `minisign` (as `--json` says it).
    pub fn name(self) -> &'static str {
        match self {
            Format::Sshsig => "sshsig",
            Format::Signify => "signify",
            Format::Minisign => "minisign",
        }
    }
}

/// What a signature's verification needs from the signed bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// Their SHA-256 (SSHSIG `sha256`).
    Sha256,
    /// Their SHA-512 (SSHSIG `sha512`).
    Sha512,
    /// Their BLAKE2b-512 (minisign `ED`).
    Blake2b512,
    /// The bytes themselves, at most [`MAX_MESSAGE`] (signify, minisign `Ed`).
    Message,
}

/// Computes an [`Input`] from bytes fed in order (the read-back of a downloaded file, or a
/// checksum file in memory).
pub enum Prehasher {
    /// SHA-256 or SHA-512 (`ring`).
    Ring(ring::digest::Context),
    /// BLAKE2b-512 (RustCrypto `blake2`).
    Blake2b(Box<blake2::Blake2b512>),
    /// The message itself, up to [`MAX_MESSAGE`] bytes.
    Message(Vec<u8>),
    /// A message that grew past [`MAX_MESSAGE`]: dropped, never verified.
    TooLarge,
}

impl Prehasher {
    /// A prehasher for `input`.
    pub fn new(input: Input) -> Prehasher {
        match input {
            Input::Sha256 => Prehasher::Ring(ring::digest::Context::new(&ring::digest::SHA256)),
            Input::Sha512 => Prehasher::Ring(ring::digest::Context::new(&ring::digest::SHA512)),
            Input::Blake2b512 => Prehasher::Blake2b(Box::default()),
            Input::Message => Prehasher::Message(Vec::new()),
        }
    }

    /// Feeds the next bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Prehasher::Ring(c) => c.update(bytes),
            Prehasher::Blake2b(b) => blake2::Digest::update(b.as_mut(), bytes),
            Prehasher::Message(m) if (m.len() + bytes.len()) as u64 <= MAX_MESSAGE => m.extend_from_slice(bytes),
            Prehasher::Message(_) | Prehasher::TooLarge => *self = Prehasher::TooLarge,
        }
    }

    /// The digest (or the message) to give [`verify`]; `None` for a message over
    /// [`MAX_MESSAGE`].
    pub fn finish(self) -> Option<Vec<u8>> {
        match self {
            Prehasher::Ring(c) => Some(c.finish().as_ref().to_vec()),
            Prehasher::Blake2b(b) => Some(blake2::Digest::finalize(*b).to_vec()),
            Prehasher::Message(m) => Some(m),
            Prehasher::TooLarge => None,
        }
    }
}

/// `input` computed over `bytes` in memory; `None` for a message over [`MAX_MESSAGE`].
pub fn prehash(input: Input, bytes: &[u8]) -> Option<Vec<u8>> {
    let mut h = Prehasher::new(input);
    h.update(bytes);
    h.finish()
}

/// A parsed detached signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signature {
    /// `-----BEGIN SSH SIGNATURE-----`.
    Sshsig(sshsig::Signature),
    /// `untrusted comment:` + base64 of `Ed` ‖ keynum ‖ signature.
    Signify(signify::Signature),
    /// `untrusted comment:`, base64 signature, `trusted comment:`, base64 global signature.
    Minisign(minisign::Signature),
}

impl Signature {
    /// Its format.
    pub fn format(&self) -> Format {
        match self {
            Signature::Sshsig(_) => Format::Sshsig,
            Signature::Signify(_) => Format::Signify,
            Signature::Minisign(_) => Format::Minisign,
        }
    }

    /// What [`verify`] needs from the signed bytes.
    pub fn input(&self) -> Input {
        match self {
            Signature::Sshsig(s) => s.input(),
            Signature::Signify(_) => Input::Message,
            Signature::Minisign(m) if m.prehashed => Input::Blake2b512,
            Signature::Minisign(_) => Input::Message,
        }
    }
}

/// Why bytes are not a signature or a key: what was expected, lowercase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// Detects the format from the framing and parses a signature file.
///
/// # Errors
/// [`Malformed`] naming what is missing or wrong (a truncated file, bad base64, an unknown
/// algorithm).
pub fn parse(bytes: &[u8]) -> Result<Signature, Malformed> {
    let text = std::str::from_utf8(bytes).map_err(|_| Malformed("a signature file is text (not UTF-8 here)"))?;
    let t = text.trim_start();
    if t.starts_with(sshsig::BEGIN) {
        return sshsig::parse_armored(t).map(Signature::Sshsig);
    }
    if t.starts_with(COMMENT) {
        return if t.lines().any(|l| l.starts_with(minisign::TRUSTED)) {
            minisign::parse(t).map(Signature::Minisign)
        } else {
            signify::parse(t).map(Signature::Signify)
        };
    }
    Err(Malformed(
        "not a signature: neither -----BEGIN SSH SIGNATURE----- (ssh-keygen -Y sign) nor \
         \"untrusted comment:\" (signify, minisign)",
    ))
}

/// The first line of signify and minisign files.
pub const COMMENT: &str = "untrusted comment:";

/// An Ed25519 key named by an 8-byte key number (signify's keynum, minisign's key id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdKey {
    /// Key number / key id, as stored.
    pub id: [u8; 8],
    /// The public key.
    pub key: [u8; 32],
}

/// Lowercase hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A key id as minisign prints it (`minisign public key 1C8B…` in its `.pub`): the 8 bytes
/// as a little-endian u64, upper-case hex without leading zeros.
pub fn key_id(id: &[u8; 8]) -> String {
    format!("{:X}", u64::from_le_bytes(*id))
}

/// A public key `--trusted-key` named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrustedKey {
    /// signify / minisign: `Ed` ‖ keynum ‖ key.
    Ed(EdKey),
    /// An OpenSSH public key or allowed-signers line.
    Ssh(sshsig::AllowedSigner),
}

/// Parses a trusted-key file: a signify or minisign public key (`untrusted comment:` then
/// base64, or the base64 line alone), or OpenSSH public keys / allowed-signers lines
/// (`ssh-keygen(1)` ALLOWED SIGNERS), one per line.
///
/// # Errors
/// [`Malformed`] for a line that is none of these, or a file with no key.
pub fn parse_keys(bytes: &[u8]) -> Result<Vec<TrustedKey>, Malformed> {
    let text = std::str::from_utf8(bytes).map_err(|_| Malformed("a key file is text (not UTF-8 here)"))?;
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let Some(first) = lines.first() else {
        return Err(Malformed("no key in the file"));
    };
    if first.starts_with(COMMENT) || (lines.len() == 1 && !first.contains(' ')) {
        let b64 = if first.starts_with(COMMENT) {
            lines
                .get(1)
                .ok_or(Malformed("no base64 line after the untrusted comment"))?
        } else {
            first
        };
        return parse_ed_key(b64).map(|k| vec![TrustedKey::Ed(k)]);
    }
    lines
        .iter()
        .map(|l| sshsig::parse_allowed_signer(l).map(TrustedKey::Ssh))
        .collect()
}

/// `Ed` ‖ 8-byte key number ‖ 32-byte Ed25519 key, base64: the public key of signify and
/// minisign.
///
/// # Errors
/// [`Malformed`] for bad base64, another algorithm or another length.
pub fn parse_ed_key(b64: &str) -> Result<EdKey, Malformed> {
    let raw = base64(b64)?;
    if raw.len() != 42 || &raw[..2] != b"Ed" {
        return Err(Malformed(
            "a signify/minisign public key is base64 of \"Ed\", an 8-byte key number and 32 bytes",
        ));
    }
    Ok(EdKey {
        id: raw[2..10].try_into().expect("8 bytes"),
        key: raw[10..].try_into().expect("32 bytes"),
    })
}

/// Base64 (RFC 4648 §4) of one line.
pub(crate) fn base64(s: &str) -> Result<Vec<u8>, Malformed> {
    crate::base64::decode(s.trim()).ok_or(Malformed("bad base64"))
}

/// Which key verified a signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The signature's format.
    pub format: Format,
    /// The key: `SHA256:…` (OpenSSH fingerprint) or the 16-hex-digit key id.
    pub key: String,
    /// The allowed-signers principals of that key, if any.
    pub principals: Option<String>,
}

/// Why a well-formed signature does not verify.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// No trusted key has the signature's key (id or fingerprint).
    UnknownKey(String),
    /// The key is trusted, but the signature does not verify over these bytes.
    Bad(String),
    /// SSHSIG: the signature's namespace is not the one asked for.
    Namespace {
        /// The signing key's fingerprint.
        key: String,
        /// The namespace in the signature.
        got: String,
        /// The one asked for (`--signature-namespace`).
        want: String,
    },
    /// SSHSIG: the allowed-signers line of the key does not allow this namespace.
    NotAllowed {
        /// The key's fingerprint.
        key: String,
        /// The namespace.
        namespace: String,
    },
    /// minisign: the trusted comment's global signature does not verify.
    TrustedComment(String),
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::UnknownKey(k) => write!(f, "signed by key {k}, which no --trusted-key holds"),
            Refused::Bad(k) => write!(f, "BAD signature: it does not verify with key {k}"),
            Refused::Namespace { key, got, want } => {
                write!(
                    f,
                    "signed by key {key} for namespace {got:?}, not {want:?} (--signature-namespace)"
                )
            }
            Refused::NotAllowed { key, namespace } => {
                write!(
                    f,
                    "key {key} is not allowed to sign namespace {namespace:?} (its namespaces= option)"
                )
            }
            Refused::TrustedComment(k) => {
                write!(
                    f,
                    "BAD signature: the trusted comment's global signature does not verify with key {k}"
                )
            }
        }
    }
}

/// Verifies `sig` over `input` (what [`Signature::input`] asked for, computed over the
/// signed bytes) with one of `keys`; `namespace` applies to SSHSIG.
///
/// # Errors
/// [`Refused`]: no such trusted key, a bad signature, the wrong namespace.
pub fn verify(sig: &Signature, keys: &[TrustedKey], namespace: &str, input: &[u8]) -> Result<Verified, Refused> {
    match sig {
        Signature::Sshsig(s) => s.verify(keys, namespace, input),
        Signature::Signify(s) => s.verify(keys, input),
        Signature::Minisign(s) => s.verify(keys, input),
    }
}

/// What [`verify`] refuses whatever the bytes it is given: a key no `keys` holds, another
/// SSHSIG namespace or one the signer is not allowed, a minisign trusted comment that does
/// not verify. Checked before the download, so that none is fetched for nothing.
///
/// # Errors
/// Those [`Refused`] (never [`Refused::Bad`]).
pub fn signer_known(sig: &Signature, keys: &[TrustedKey], namespace: &str) -> Result<(), Refused> {
    match sig {
        Signature::Sshsig(s) => s.signer(keys, namespace).map(drop),
        Signature::Signify(s) => s.signer(keys).map(drop),
        Signature::Minisign(s) => s.signer(keys).map(drop),
    }
}

/// The allowed-signers principals of the trusted SSH key that `sig` names (`None`: not
/// SSHSIG, no such key, a bare public key): said with a refusal as with a success.
pub fn principals(sig: &Signature, keys: &[TrustedKey]) -> Option<String> {
    match sig {
        Signature::Sshsig(s) => s.trusted(keys)?.principals.clone(),
        _ => None,
    }
}

/// Ed25519 (RFC 8032) of `msg` by `key`.
pub(crate) fn ed25519(key: &[u8], msg: &[u8], sig: &[u8]) -> bool {
    ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, key)
        .verify(msg, sig)
        .is_ok()
}

/// The trusted Ed key with key number `id`.
pub(crate) fn ed_key<'k>(keys: &'k [TrustedKey], id: &[u8; 8]) -> Option<&'k EdKey> {
    keys.iter().find_map(|k| match k {
        TrustedKey::Ed(e) if &e.id == id => Some(e),
        _ => None,
    })
}

#[cfg(test)]
mod tests;
