//! SSHSIG: OpenSSH's detached signatures (`ssh-keygen -Y sign -n NAMESPACE -f KEY FILE` →
//! `FILE.sig`), as `PROTOCOL.sshsig` (openssh-portable) defines them.
//!
//! The armored blob is `SSHSIG` ‖ uint32 version (1) ‖ string publickey ‖ string namespace
//! ‖ string reserved ‖ string hash_algorithm (`sha256`, `sha512`) ‖ string signature
//! (RFC 4251 §5 `string`s). The signature covers `SSHSIG` ‖ string namespace ‖ string
//! reserved ‖ string hash_algorithm ‖ string H(message): a file of any size is verified
//! from its digest. Keys: `ssh-ed25519` (RFC 8709), `ecdsa-sha2-nistp256/384` (RFC 5656),
//! `ssh-rsa` signing `rsa-sha2-256/512` (RFC 8332). Trusted keys come as OpenSSH public
//! keys or `ssh-keygen(1)` ALLOWED SIGNERS lines (`namespaces="…"` honoured;
//! `cert-authority` lines never match: certificates are not taken).

use ring::signature as sig;

use super::{Input, Malformed, Refused, TrustedKey, Verified};

/// The armor's first line.
pub const BEGIN: &str = "-----BEGIN SSH SIGNATURE-----";
/// The armor's last line.
pub const END: &str = "-----END SSH SIGNATURE-----";
/// The blob's and the signed data's first six bytes.
pub const MAGIC: &[u8; 6] = b"SSHSIG";

/// A parsed SSHSIG blob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// The signer's public key blob (RFC 4253 §6.6 encoding).
    pub public_key: Vec<u8>,
    /// What the signature is for (`file` for `ssh-keygen -Y sign -n file`).
    pub namespace: Vec<u8>,
    /// Reserved, signed, ignored.
    pub reserved: Vec<u8>,
    /// `sha256` or `sha512`.
    pub hash_algorithm: String,
    /// The SSH signature blob: string format ‖ string bytes.
    pub signature: Vec<u8>,
}

/// A reader of RFC 4251 §5 `uint32` and `string`.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn u32(&mut self) -> Result<u32, Malformed> {
        let (n, rest) = self.0.split_first_chunk::<4>().ok_or(Malformed("sshsig: truncated"))?;
        self.0 = rest;
        Ok(u32::from_be_bytes(*n))
    }
    fn string(&mut self) -> Result<&'a [u8], Malformed> {
        let n = self.u32()? as usize;
        if n > self.0.len() {
            return Err(Malformed("sshsig: truncated"));
        }
        let (s, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(s)
    }
    fn end(&self) -> Result<(), Malformed> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(Malformed("sshsig: bytes after the last field"))
        }
    }
}

/// Appends an RFC 4251 `string`.
fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s);
}

/// Parses an armored signature (the `.sig` file of `ssh-keygen -Y sign`).
///
/// # Errors
/// [`Malformed`]: no header or footer (a truncated file), bad base64, a bad blob.
pub fn parse_armored(text: &str) -> Result<Signature, Malformed> {
    let body = text
        .trim()
        .strip_prefix(BEGIN)
        .ok_or(Malformed("sshsig: no -----BEGIN SSH SIGNATURE----- line"))?;
    let body = body
        .strip_suffix(END)
        .ok_or(Malformed("sshsig: truncated: no -----END SSH SIGNATURE----- line"))?;
    let b64: String = body.split_whitespace().collect();
    let blob = super::base64(&b64).map_err(|_| Malformed("sshsig: the armored blob is not base64"))?;
    parse_blob(&blob)
}

/// Parses the blob inside the armor.
///
/// # Errors
/// [`Malformed`]: not `SSHSIG`, a version other than 1, an empty namespace, a hash other
/// than sha256/sha512, truncated fields or trailing bytes.
pub fn parse_blob(blob: &[u8]) -> Result<Signature, Malformed> {
    let rest = blob
        .strip_prefix(MAGIC)
        .ok_or(Malformed("sshsig: the blob does not start with SSHSIG"))?;
    let mut r = Reader(rest);
    if r.u32()? != 1 {
        return Err(Malformed("sshsig: version is not 1"));
    }
    let public_key = r.string()?.to_vec();
    let namespace = r.string()?.to_vec();
    let reserved = r.string()?.to_vec();
    let hash_algorithm = match r.string()? {
        b"sha256" => "sha256",
        b"sha512" => "sha512",
        _ => return Err(Malformed("sshsig: hash algorithm is neither sha256 nor sha512")),
    };
    let signature = r.string()?.to_vec();
    r.end()?;
    if namespace.is_empty() {
        return Err(Malformed("sshsig: empty namespace"));
    }
    Ok(Signature {
        public_key,
        namespace,
        reserved,
        hash_algorithm: hash_algorithm.to_owned(),
        signature,
    })
}

impl Signature {
    /// The blob again ([`parse_blob`] of it gives `self`).
    pub fn encode_blob(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&1u32.to_be_bytes());
        put_string(&mut out, &self.public_key);
        put_string(&mut out, &self.namespace);
        put_string(&mut out, &self.reserved);
        put_string(&mut out, self.hash_algorithm.as_bytes());
        put_string(&mut out, &self.signature);
        out
    }

    /// The digest the signature covers.
    pub fn input(&self) -> Input {
        if self.hash_algorithm == "sha256" {
            Input::Sha256
        } else {
            Input::Sha512
        }
    }

    /// What was signed, given H(message) `digest`.
    pub fn signed_data(&self, digest: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        put_string(&mut out, &self.namespace);
        put_string(&mut out, &self.reserved);
        put_string(&mut out, self.hash_algorithm.as_bytes());
        put_string(&mut out, digest);
        out
    }

    /// Verifies over H(message) `digest` with the trusted key of the same blob, for
    /// `namespace`.
    ///
    /// # Errors
    /// [`Refused::Namespace`], [`Refused::UnknownKey`], [`Refused::NotAllowed`],
    /// [`Refused::Bad`] (also for a key type or signature format not taken here).
    pub fn verify(&self, keys: &[TrustedKey], namespace: &str, digest: &[u8]) -> Result<Verified, Refused> {
        let (signer, fp) = self.signer(keys, namespace)?;
        if !verify_blob(&self.public_key, &self.signature, &self.signed_data(digest)) {
            return Err(Refused::Bad(fp));
        }
        Ok(Verified {
            format: super::Format::Sshsig,
            key: fp,
            principals: signer.principals.clone(),
        })
    }

    /// The trusted key that may have made this signature for `namespace`, and its
    /// fingerprint: what is refused whatever the bytes.
    ///
    /// # Errors
    /// [`Refused::Namespace`], [`Refused::UnknownKey`], [`Refused::NotAllowed`].
    pub fn signer<'k>(&self, keys: &'k [TrustedKey], namespace: &str) -> Result<(&'k AllowedSigner, String), Refused> {
        let fp = fingerprint(&self.public_key);
        if self.namespace != namespace.as_bytes() {
            return Err(Refused::Namespace {
                key: fp,
                got: String::from_utf8_lossy(&self.namespace).into_owned(),
                want: namespace.to_owned(),
            });
        }
        let signer = self.trusted(keys).ok_or_else(|| Refused::UnknownKey(fp.clone()))?;
        if let Some(allowed) = &signer.namespaces
            && !allowed
                .iter()
                .any(|p| pattern_match(p.as_bytes(), namespace.as_bytes()))
        {
            return Err(Refused::NotAllowed {
                key: fp,
                namespace: namespace.to_owned(),
            });
        }
        Ok((signer, fp))
    }

    /// The trusted key (a plain key or allowed-signers line, not a CA) whose blob is the
    /// signature's.
    pub fn trusted<'k>(&self, keys: &'k [TrustedKey]) -> Option<&'k AllowedSigner> {
        keys.iter().find_map(|k| match k {
            TrustedKey::Ssh(s) if !s.cert_authority && s.blob == self.public_key => Some(s),
            _ => None,
        })
    }
}

/// `SHA256:` and the unpadded base64 of the key blob's SHA-256, as `ssh-keygen -l` prints.
pub fn fingerprint(blob: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, blob);
    format!("SHA256:{}", crate::base64::encode(d.as_ref()).trim_end_matches('='))
}

/// Verifies SSH signature blob `signature` (string format ‖ string bytes) over `data`
/// with public key blob `key`. False for anything not verified, malformed, or not taken
/// (ssh-rsa with SHA-1, nistp521, security keys).
pub fn verify_blob(key: &[u8], signature: &[u8], data: &[u8]) -> bool {
    let ok = || -> Result<bool, Malformed> {
        let mut k = Reader(key);
        let key_type = k.string()?;
        let mut s = Reader(signature);
        let format = s.string()?;
        let bytes = s.string()?;
        s.end()?;
        Ok(match (key_type, format) {
            (b"ssh-ed25519", b"ssh-ed25519") => {
                let pk = k.string()?;
                k.end()?;
                super::ed25519(pk, data, bytes)
            }
            (b"ecdsa-sha2-nistp256", b"ecdsa-sha2-nistp256") => ecdsa(&mut k, b"nistp256", 32, bytes, data)?,
            (b"ecdsa-sha2-nistp384", b"ecdsa-sha2-nistp384") => ecdsa(&mut k, b"nistp384", 48, bytes, data)?,
            (b"ssh-rsa", b"rsa-sha2-256" | b"rsa-sha2-512") => {
                let e = strip_zeros(k.string()?);
                let n = strip_zeros(k.string()?);
                k.end()?;
                let alg = if format == b"rsa-sha2-256" {
                    &sig::RSA_PKCS1_2048_8192_SHA256
                } else {
                    &sig::RSA_PKCS1_2048_8192_SHA512
                };
                sig::RsaPublicKeyComponents { n, e }.verify(alg, data, bytes).is_ok()
            }
            _ => false,
        })
    };
    ok().unwrap_or(false)
}

/// RFC 5656 §3.1.2: string curve ‖ string Q; the signature is mpint r ‖ mpint s, made
/// fixed-width (`len` bytes each) for `ring`.
fn ecdsa(k: &mut Reader, curve: &[u8], len: usize, bytes: &[u8], data: &[u8]) -> Result<bool, Malformed> {
    if k.string()? != curve {
        return Ok(false);
    }
    let q = k.string()?;
    k.end()?;
    let mut s = Reader(bytes);
    let (r_int, s_int) = (strip_zeros(s.string()?), strip_zeros(s.string()?));
    s.end()?;
    if r_int.len() > len || s_int.len() > len {
        return Ok(false);
    }
    let mut fixed = vec![0u8; 2 * len];
    fixed[len - r_int.len()..len].copy_from_slice(r_int);
    fixed[2 * len - s_int.len()..].copy_from_slice(s_int);
    let alg = if len == 32 {
        &sig::ECDSA_P256_SHA256_FIXED
    } else {
        &sig::ECDSA_P384_SHA384_FIXED
    };
    Ok(sig::UnparsedPublicKey::new(alg, q).verify(data, &fixed).is_ok())
}

/// An mpint's magnitude without its leading zero bytes.
fn strip_zeros(b: &[u8]) -> &[u8] {
    let i = b.iter().position(|&x| x != 0).unwrap_or(b.len());
    &b[i..]
}

/// One trusted OpenSSH key: a public-key line (any principal, any namespace) or an
/// allowed-signers line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedSigner {
    /// The principals (`user@example.com,*@example.org`), `None` for a bare public key.
    pub principals: Option<String>,
    /// `namespaces="file,git"`: the namespaces this key may sign (patterns), `None` = any.
    pub namespaces: Option<Vec<String>>,
    /// `cert-authority`: the key signs certificates (not taken here: never matches).
    pub cert_authority: bool,
    /// The key type named on the line (`ssh-ed25519`).
    pub key_type: String,
    /// The key blob (base64-decoded).
    pub blob: Vec<u8>,
}

/// Whether `t` names an SSH public key type.
fn is_key_type(t: &str) -> bool {
    matches!(
        t,
        "ssh-ed25519" | "ssh-rsa" | "ecdsa-sha2-nistp256" | "ecdsa-sha2-nistp384" | "ecdsa-sha2-nistp521"
    ) || t.starts_with("sk-")
        || t.ends_with("@openssh.com")
}

/// Splits at unquoted whitespace (`"` quotes, as in allowed-signers options).
fn tokens(line: &str) -> Vec<&str> {
    let (mut out, mut start, mut quoted) = (Vec::new(), None, false);
    for (i, c) in line.char_indices() {
        if c == '"' {
            quoted = !quoted;
        }
        if c.is_ascii_whitespace() && !quoted {
            if let Some(s) = start.take() {
                out.push(&line[s..i]);
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        out.push(&line[s..]);
    }
    out
}

/// Splits options at unquoted commas.
fn options(s: &str) -> Vec<&str> {
    let (mut out, mut start, mut quoted) = (Vec::new(), 0, false);
    for (i, c) in s.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// Parses one OpenSSH public-key line (`ssh-ed25519 AAAA… comment`) or allowed-signers line
/// (`principals [options] keytype base64 [comment]`, `ssh-keygen(1)` ALLOWED SIGNERS).
///
/// # Errors
/// [`Malformed`]: no key type, bad base64, a blob whose type differs from the line's, an
/// unknown option.
pub fn parse_allowed_signer(line: &str) -> Result<AllowedSigner, Malformed> {
    let t = tokens(line);
    let mut signer = AllowedSigner {
        principals: None,
        namespaces: None,
        cert_authority: false,
        key_type: String::new(),
        blob: Vec::new(),
    };
    let at = t.iter().position(|x| is_key_type(x)).ok_or(Malformed(
        "ssh key: no key type (ssh-ed25519, ecdsa-sha2-nistp256, ssh-rsa, …) on the line",
    ))?;
    match at {
        0 => {}
        1 | 2 => {
            signer.principals = Some(t[0].trim_matches('"').to_owned());
            if at == 2 {
                for o in options(t[1]) {
                    let (name, value) = o.split_once('=').unwrap_or((o, ""));
                    let value = value.trim_matches('"');
                    match name.to_ascii_lowercase().as_str() {
                        "cert-authority" => signer.cert_authority = true,
                        "namespaces" => signer.namespaces = Some(value.split(',').map(str::to_owned).collect()),
                        // Validity windows: a key inside them is trusted as any other.
                        "valid-after" | "valid-before" => {}
                        _ => return Err(Malformed("allowed signers: unknown option")),
                    }
                }
            }
        }
        _ => {
            return Err(Malformed(
                "allowed signers: more than principals and options before the key type",
            ));
        }
    }
    signer.key_type = t[at].to_owned();
    let b64 = t
        .get(at + 1)
        .ok_or(Malformed("ssh key: no base64 key after the key type"))?;
    signer.blob = super::base64(b64).map_err(|_| Malformed("ssh key: the key is not base64"))?;
    let mut r = Reader(&signer.blob);
    if r.string().ok() != Some(signer.key_type.as_bytes()) {
        return Err(Malformed("ssh key: the key blob's type differs from the line's"));
    }
    // The fields of the types taken here (others are kept, and never verify).
    let whole = match signer.key_type.as_str() {
        "ssh-ed25519" => r.string().is_ok_and(|k| k.len() == 32),
        "ecdsa-sha2-nistp256" | "ecdsa-sha2-nistp384" => r.string().is_ok() && r.string().is_ok(),
        "ssh-rsa" => r.string().is_ok() && r.string().is_ok(),
        _ => return Ok(signer),
    };
    if !whole || r.end().is_err() {
        return Err(Malformed(
            "ssh key: the key blob is truncated or has bytes after its fields",
        ));
    }
    Ok(signer)
}

/// OpenSSH pattern matching (`match_pattern`): `*` any run, `?` one byte; iterative,
/// O(len(p) × len(s)).
fn pattern_match(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si, mut star, mut mark) = (0, 0, None, 0);
    while si < s.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}
