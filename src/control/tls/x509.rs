//! The X.509 fields a certificate trusted as its own anchor is checked against, which
//! webpki does not expose: the validity period and the key usage / extended key usage
//! extensions (RFC 5280 §4.1.2.5, §4.2.1.3, §4.2.1.12); and, for refusal messages, the
//! subject's common name, the signature's hash and the RSA key size. A DER reader over the bytes, no
//! allocation but the EKU list and the common name.

/// What the self-anchor check needs from a certificate.
#[derive(Debug, PartialEq, Eq)]
pub struct Facts<'a> {
    /// `notBefore`, seconds since the Unix epoch (UTC).
    pub not_before: u64,
    /// `notAfter`, seconds since the Unix epoch (UTC).
    pub not_after: u64,
    /// The keyUsage bits, first octet then second (`0x8000` = digitalSignature, bit 0 of
    /// RFC 5280's KeyUsage); `None` when the extension is absent.
    pub key_usage: Option<u16>,
    /// The extKeyUsage KeyPurposeId OIDs (DER content octets); `None` when absent.
    pub ext_key_usage: Option<Vec<&'a [u8]>>,
}

/// keyUsage bits of which a TLS server key needs one: digitalSignature (bit 0),
/// keyEncipherment (bit 2), keyAgreement (bit 4) — OpenSSL's `KU_TLS`, which curl and
/// wget apply. (RFC 8446 §4.4.2.2 asks digitalSignature of a signing key, but RSA
/// certificates with only keyEncipherment are still served and OpenSSL accepts them.)
pub const KU_TLS: u16 = 0x8000 | 0x2000 | 0x0800;
/// id-kp-serverAuth, 1.3.6.1.5.5.7.3.1 (RFC 5280 §4.2.1.12).
pub const OID_SERVER_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
/// id-kp-clientAuth, 1.3.6.1.5.5.7.3.2.
pub const OID_CLIENT_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02];
/// anyExtendedKeyUsage, 2.5.29.37.0.
pub const OID_ANY_EKU: &[u8] = &[0x55, 0x1d, 0x25, 0x00];
const OID_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x0f];
const OID_EXT_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x25];

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const INTEGER: u8 = 0x02;
const BOOLEAN: u8 = 0x01;
const BIT_STRING: u8 = 0x03;
const OCTET_STRING: u8 = 0x04;
const OID: u8 = 0x06;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
const VERSION: u8 = 0xa0;
const EXTENSIONS: u8 = 0xa3;

/// Reads the validity period and the usage extensions of a DER certificate.
///
/// `None` when the bytes are not a certificate this reader understands (indefinite or
/// over-long lengths, a time that is not `YYMMDDHHMMSSZ` / `YYYYMMDDHHMMSSZ`, a
/// truncated element); the caller treats that as a bad certificate.
pub fn facts(cert: &[u8]) -> Option<Facts<'_>> {
    let certificate = Der(cert).expect(SEQUENCE)?;
    let mut tbs = Der(Der(certificate).expect(SEQUENCE)?);
    if tbs.peek() == Some(VERSION) {
        tbs.read()?;
    }
    tbs.expect(INTEGER)?; // serialNumber
    tbs.expect(SEQUENCE)?; // signature
    tbs.expect(SEQUENCE)?; // issuer
    let mut validity = Der(tbs.expect(SEQUENCE)?);
    let not_before = time(validity.read()?)?;
    let not_after = time(validity.read()?)?;
    tbs.expect(SEQUENCE)?; // subject
    tbs.expect(SEQUENCE)?; // subjectPublicKeyInfo
    let mut facts = Facts {
        not_before,
        not_after,
        key_usage: None,
        ext_key_usage: None,
    };
    while let Some((tag, value)) = tbs.read() {
        if tag != EXTENSIONS {
            continue; // issuerUniqueID, subjectUniqueID
        }
        let mut list = Der(Der(value).expect(SEQUENCE)?);
        while !list.0.is_empty() {
            let mut ext = Der(list.expect(SEQUENCE)?);
            let id = ext.expect(OID)?;
            if ext.peek() == Some(BOOLEAN) {
                ext.read()?;
            }
            let inner = ext.expect(OCTET_STRING)?;
            if id == OID_KEY_USAGE {
                let bits = Der(inner).expect(BIT_STRING)?;
                let (&_unused, octets) = bits.split_first()?;
                let first = u16::from(octets.first().copied().unwrap_or(0));
                let second = u16::from(octets.get(1).copied().unwrap_or(0));
                facts.key_usage = Some(first << 8 | second);
            } else if id == OID_EXT_KEY_USAGE {
                let mut purposes = Der(Der(inner).expect(SEQUENCE)?);
                let mut oids = Vec::new();
                while !purposes.0.is_empty() {
                    oids.push(purposes.expect(OID)?);
                }
                facts.ext_key_usage = Some(oids);
            }
        }
    }
    Some(facts)
}

/// What a refusal message names of a certificate: its subject's common name, the hash
/// of its signature algorithm when that is one ringdl refuses, the size of an RSA key.
#[derive(Debug, PartialEq, Eq)]
pub struct Identity {
    /// The subject's first commonName (RFC 5280 §4.1.2.6, OID 2.5.4.3), lossy UTF-8.
    pub common_name: Option<String>,
    /// `SHA-1`, `MD5`, `MD2` when the certificate is signed with that hash (the outer
    /// signatureAlgorithm, RFC 5280 §4.1.1.2); `None` for any other algorithm.
    pub weak_hash: Option<&'static str>,
    /// The modulus size in bits of an rsaEncryption subjectPublicKey (RFC 8017 A.1.1).
    pub rsa_bits: Option<usize>,
}

/// id-at-commonName, 2.5.4.3.
const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
/// rsaEncryption, 1.2.840.113549.1.1.1.
const OID_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];

/// The hash of a signature algorithm ringdl refuses, by its OID: md2/md5/sha1 with RSA
/// (1.2.840.113549.1.1.2/4/5), ecdsa-with-SHA1 (1.2.840.10045.4.1), dsa-with-sha1
/// (1.2.840.10040.4.3), sha1WithRSA (1.3.14.3.2.29).
pub fn weak_hash(oid: &[u8]) -> Option<&'static str> {
    const PKCS1: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01];
    match oid {
        [p @ .., 2] if p == PKCS1 => Some("MD2"),
        [p @ .., 4] if p == PKCS1 => Some("MD5"),
        [p @ .., 5] if p == PKCS1 => Some("SHA-1"),
        [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01] | [0x2a, 0x86, 0x48, 0xce, 0x38, 0x04, 0x03] => Some("SHA-1"),
        [0x2b, 0x0e, 0x03, 0x02, 0x1d] => Some("SHA-1"),
        _ => None,
    }
}

/// Reads [`Identity`] from a DER certificate; `None` when it does not parse.
pub fn identity(cert: &[u8]) -> Option<Identity> {
    let mut certificate = Der(Der(cert).expect(SEQUENCE)?);
    let mut tbs = Der(certificate.expect(SEQUENCE)?);
    let signature_oid = Der(certificate.expect(SEQUENCE)?).expect(OID)?;
    if tbs.peek() == Some(VERSION) {
        tbs.read()?;
    }
    tbs.expect(INTEGER)?; // serialNumber
    tbs.expect(SEQUENCE)?; // signature
    tbs.expect(SEQUENCE)?; // issuer
    tbs.expect(SEQUENCE)?; // validity
    let mut subject = Der(tbs.expect(SEQUENCE)?);
    let mut common_name = None;
    while common_name.is_none() && !subject.0.is_empty() {
        let mut rdn = Der(subject.expect(SET)?);
        while !rdn.0.is_empty() {
            let mut atv = Der(rdn.expect(SEQUENCE)?);
            if atv.expect(OID)? == OID_COMMON_NAME {
                common_name = Some(String::from_utf8_lossy(atv.read()?.1).into_owned());
                break;
            }
        }
    }
    let mut spki = Der(tbs.expect(SEQUENCE)?);
    let key_oid = Der(spki.expect(SEQUENCE)?).expect(OID)?;
    let rsa_bits = if key_oid == OID_RSA {
        let bits = spki.expect(BIT_STRING)?;
        let mut key = Der(Der(bits.get(1..)?).expect(SEQUENCE)?);
        let modulus = key.expect(INTEGER)?;
        let start = modulus.iter().position(|&b| b != 0)?;
        let m = &modulus[start..];
        Some(m.len() * 8 - m[0].leading_zeros() as usize)
    } else {
        None
    };
    Some(Identity {
        common_name,
        weak_hash: weak_hash(signature_oid),
        rsa_bits,
    })
}

/// The arcs of an OID's content octets (`2b 06 01 …` → `[1, 3, 6, 1, …]`), for messages.
pub fn oid_arcs(oid: &[u8]) -> Vec<usize> {
    let mut arcs = Vec::new();
    let mut value = 0usize;
    for &b in oid {
        value = value.saturating_mul(128).saturating_add(usize::from(b & 0x7f));
        if b & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (value / 40).min(2);
                arcs.push(first);
                arcs.push(value - first * 40);
            } else {
                arcs.push(value);
            }
            value = 0;
        }
    }
    arcs
}

/// A DER element stream (X.690 §10: definite lengths only).
struct Der<'a>(&'a [u8]);

impl<'a> Der<'a> {
    fn peek(&self) -> Option<u8> {
        self.0.first().copied()
    }

    /// The next element's tag and content octets.
    fn read(&mut self) -> Option<(u8, &'a [u8])> {
        let (&tag, rest) = self.0.split_first()?;
        let (&first, mut rest) = rest.split_first()?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let len = rest[..n].iter().fold(0usize, |acc, &b| acc << 8 | usize::from(b));
            rest = &rest[n..];
            len
        };
        if rest.len() < len {
            return None;
        }
        let (value, tail) = rest.split_at(len);
        self.0 = tail;
        Some((tag, value))
    }

    /// The next element's content octets when its tag is `tag`.
    fn expect(&mut self, tag: u8) -> Option<&'a [u8]> {
        match self.read()? {
            (t, value) if t == tag => Some(value),
            _ => None,
        }
    }
}

/// UTCTime (`YYMMDDHHMMSSZ`, years 1950-2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`),
/// RFC 5280 §4.1.2.5, as seconds since the Unix epoch.
fn time((tag, value): (u8, &[u8])) -> Option<u64> {
    let digits = value.strip_suffix(b"Z")?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let num = |s: &[u8]| s.iter().fold(0u64, |acc, &d| acc * 10 + u64::from(d - b'0'));
    let (year, rest) = match (tag, digits.len()) {
        (UTC_TIME, 12) => {
            let yy = num(&digits[..2]);
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &digits[2..])
        }
        (GENERALIZED_TIME, 14) => (num(&digits[..4]), &digits[4..]),
        _ => return None,
    };
    let [month, day, hour, minute, second] = [0, 2, 4, 6, 8].map(|i| num(&rest[i..i + 2]));
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day)?;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
}

/// `YYYY-MM-DD HH:MM:SS UTC` for seconds since the Unix epoch (H. Hinnant's
/// `civil_from_days`), for messages.
pub fn utc(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = http::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's `days_from_civil`);
/// `None` before 1970.
fn days_from_civil(year: u64, month: u64, day: u64) -> Option<u64> {
    let y = if month <= 2 { year.checked_sub(1)? } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).checked_sub(719_468)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose, date_time_ymd};

    fn cert(edit: impl FnOnce(&mut CertificateParams)) -> Vec<u8> {
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        edit(&mut params);
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn identity_names_the_subject_and_key() {
        let der = cert(|p| {
            p.distinguished_name.push(rcgen::DnType::OrganizationName, "org");
            p.distinguished_name.push(rcgen::DnType::CommonName, "leaf.example");
        });
        let id = identity(&der).expect("parses");
        assert_eq!(id.common_name.as_deref(), Some("leaf.example"));
        // rcgen signs with ECDSA P-256 / SHA-256: not refused, not RSA.
        assert_eq!((id.weak_hash, id.rsa_bits), (None, None));
        let sha1_rsa = [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05];
        assert_eq!(weak_hash(&sha1_rsa), Some("SHA-1"));
        assert_eq!(
            weak_hash(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x04]),
            Some("MD5")
        );
        assert_eq!(weak_hash(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b]), None);
        for cut in 0..der.len() {
            let _ = identity(&der[..cut]);
        }
    }

    #[test]
    fn validity_in_both_time_forms() {
        // rcgen writes UTCTime before 2050 and GeneralizedTime from 2050 (RFC 5280).
        let der = cert(|p| {
            p.not_before = date_time_ymd(1999, 12, 31);
            p.not_after = date_time_ymd(2051, 3, 1);
        });
        let f = facts(&der).expect("parsed");
        assert_eq!(f.not_before, 946_598_400);
        assert_eq!(f.not_after, 2_561_241_600);
        assert_eq!((f.key_usage, f.ext_key_usage), (None, None));
    }

    #[test]
    fn usage_extensions() {
        let der = cert(|p| {
            p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth, ExtendedKeyUsagePurpose::ServerAuth];
        });
        let f = facts(&der).expect("parsed");
        // digitalSignature is bit 0 (0x8000), keyCertSign bit 5 (0x0400).
        assert_eq!(f.key_usage, Some(0x8000 | 0x0400));
        assert_eq!(f.ext_key_usage, Some(vec![OID_CLIENT_AUTH, OID_SERVER_AUTH]));
        assert_eq!(oid_arcs(OID_SERVER_AUTH), [1, 3, 6, 1, 5, 5, 7, 3, 1]);
        assert_eq!(oid_arcs(OID_ANY_EKU), [2, 5, 29, 37, 0]);
    }

    #[test]
    fn any_prefix_or_byte_change_never_panics() {
        let der = cert(|p| {
            p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        });
        for cut in 0..der.len() {
            let _ = facts(&der[..cut]);
        }
        let mut bytes = der.clone();
        for i in 0..bytes.len() {
            for x in [0x01, 0x80, 0xff] {
                bytes[i] ^= x;
                if let Some(f) = facts(&bytes) {
                    let _ = (utc(f.not_before), utc(f.not_after));
                    f.ext_key_usage.iter().flatten().for_each(|o| drop(oid_arcs(o)));
                }
                bytes[i] ^= x;
            }
        }
    }

    #[test]
    fn truncated_or_garbage_is_refused() {
        let der = cert(|_| {});
        for cut in [0, 1, 10, der.len() / 2, der.len() - 1] {
            assert_eq!(facts(&der[..cut]), None, "cut at {cut}");
        }
        assert_eq!(facts(b"\x30\x80\x00\x00"), None);
        assert_eq!(time((UTC_TIME, b"991301000000Z")), None);
        assert_eq!(time((GENERALIZED_TIME, b"19700101000000")), None);
        assert_eq!(time((GENERALIZED_TIME, b"19700101000000Z")), Some(0));
        assert_eq!(time((UTC_TIME, b"000229235959Z")), Some(951_868_799));
        assert_eq!(utc(951_868_799), "2000-02-29 23:59:59 UTC");
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(2_561_241_600), "2051-03-01 00:00:00 UTC");
    }
}
