//! Encoding rustls traffic secrets as a kTLS `crypto_info`.
//!
//! # How the 12-byte rustls IV maps onto `salt` and `iv`
//!
//! rustls hands every AEAD suite a 12-byte `Iv` ([`ConnectionTrafficSecrets`]):
//!
//! - TLS 1.3, any suite: the static `client/server_write_iv` of RFC 8446 §7.3; the
//!   per-record nonce is `iv XOR pad64(seq)` (RFC 8446 §5.3).
//! - TLS 1.2 AES-GCM: `salt (4 bytes of the key block) || 8 more key-block bytes` (rustls
//!   `gcm_iv`); rustls sends `explicit_nonce = iv[4..12] XOR seq` in every record (RFC 5288
//!   leaves the explicit part to the sender as long as it never repeats).
//! - TLS 1.2 ChaCha20-Poly1305: the 12-byte `write_iv`; nonce `iv XOR pad64(seq)` (RFC 7905).
//!
//! The kernel (`net/tls/tls_sw.c`, `include/net/tls.h`) keeps `salt || iv` as one 12-byte
//! nonce buffer and:
//!
//! - TLS 1.3 and ChaCha20 (both versions): XORs `rec_seq` into bytes 4..12 of `salt || iv`
//!   (`tls_xor_iv_with_seq`), so `salt = iv[0..4]`, `iv = iv[4..12]` (ChaCha: `iv` = all 12,
//!   no salt) reproduces the RFC nonce exactly, for RX and TX.
//! - TLS 1.2 AES-GCM RX: reads the 8-byte explicit nonce from each record, so only `salt`
//!   matters; `iv` gets `iv[4..12]` (what rustls/ktls and the kernel selftests do).
//! - TLS 1.2 AES-GCM TX: writes `iv` as the explicit nonce of the first record and then
//!   *increments* it as a 64-bit big-endian counter (`tls_advance_record_sn`), while rustls
//!   XORed the sequence number in. Starting the kernel at `iv[4..12]` (or at `.. XOR seq`)
//!   can repeat a nonce rustls already used under the same key (for `seq = 1`: rustls
//!   used `b` for Finished; the kernel's second record would use `(b ^ 1) + 1 == b` when
//!   `b` is odd) — a GCM nonce reuse. This crate starts the kernel past the aligned block
//!   that holds every `b XOR s, s < seq` (see [`tls12_gcm_tx_explicit_start`]), so kernel
//!   nonces cannot meet rustls' before 2^64 − 2^k records.
//!
//! `rec_seq` is the big-endian 64-bit sequence number of the next record the kernel handles
//! (the AAD of TLS 1.2 and the nonce of TLS 1.3 / ChaCha).

use rustls::{ConnectionTrafficSecrets, ProtocolVersion, SupportedCipherSuite};
use std::mem::offset_of;
use zeroize::Zeroize;

use crate::error::Error;
use crate::sys;

/// Which direction a `crypto_info` is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Records the kernel decrypts (`TLS_RX`).
    Rx,
    /// Records the kernel encrypts (`TLS_TX`).
    Tx,
}

/// The largest `crypto_info` this crate writes (AES-256-GCM and ChaCha20: 56 bytes).
const MAX_LEN: usize = 56;

/// A `tls12_crypto_info_*` struct as the bytes `setsockopt(SOL_TLS, ...)` reads.
///
/// INVARIANT: `len` is the size of the struct named by `buf[2..4]` (40 or 56) and
/// `len <= MAX_LEN`. The key material in `buf` is zeroed on drop.
pub(crate) struct CryptoInfo {
    buf: [u8; MAX_LEN],
    len: usize,
}

impl CryptoInfo {
    /// Encodes `secrets` for `direction`, `version` and the next record's sequence number.
    ///
    /// # Errors
    /// [`Error::Version`] for anything but TLS 1.2 / 1.3; [`Error::Cipher`] for a key of the
    /// wrong length.
    pub(crate) fn new(
        direction: Direction,
        version: ProtocolVersion,
        seq: u64,
        secrets: &ConnectionTrafficSecrets,
    ) -> Result<Self, Error> {
        let version = match version {
            ProtocolVersion::TLSv1_2 => sys::TLS_1_2_VERSION,
            ProtocolVersion::TLSv1_3 => sys::TLS_1_3_VERSION,
            other => return Err(Error::Version(u16::from(other))),
        };
        let (cipher, key, iv) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (sys::TLS_CIPHER_AES_GCM_128, key.as_ref(), iv.as_ref()),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (sys::TLS_CIPHER_AES_GCM_256, key.as_ref(), iv.as_ref()),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (sys::TLS_CIPHER_CHACHA20_POLY1305, key.as_ref(), iv.as_ref())
            }
            _ => return Err(Error::Cipher),
        };
        let iv: &[u8; 12] = iv.try_into().map_err(|_| Error::Cipher)?;
        Self::encode(direction, version, cipher, key, iv, seq)
    }

    /// Writes the struct for `cipher` field by field at the uapi offsets of [`sys`].
    fn encode(
        direction: Direction,
        version: u16,
        cipher: u16,
        key: &[u8],
        iv: &[u8; 12],
        seq: u64,
    ) -> Result<Self, Error> {
        let mut out = CryptoInfo {
            buf: [0; MAX_LEN],
            len: 0,
        };
        out.buf[0..2].copy_from_slice(&version.to_ne_bytes());
        out.buf[2..4].copy_from_slice(&cipher.to_ne_bytes());
        // (struct size, iv offset, key offset, salt offset, rec_seq offset, key length)
        let (len, o_iv, o_key, o_salt, o_seq, key_len) = match cipher {
            sys::TLS_CIPHER_AES_GCM_128 => (
                size_of::<sys::AesGcm128>(),
                offset_of!(sys::AesGcm128, iv),
                offset_of!(sys::AesGcm128, key),
                offset_of!(sys::AesGcm128, salt),
                offset_of!(sys::AesGcm128, rec_seq),
                16,
            ),
            sys::TLS_CIPHER_AES_GCM_256 => (
                size_of::<sys::AesGcm256>(),
                offset_of!(sys::AesGcm256, iv),
                offset_of!(sys::AesGcm256, key),
                offset_of!(sys::AesGcm256, salt),
                offset_of!(sys::AesGcm256, rec_seq),
                32,
            ),
            sys::TLS_CIPHER_CHACHA20_POLY1305 => (
                size_of::<sys::Chacha20Poly1305>(),
                offset_of!(sys::Chacha20Poly1305, iv),
                offset_of!(sys::Chacha20Poly1305, key),
                offset_of!(sys::Chacha20Poly1305, salt),
                offset_of!(sys::Chacha20Poly1305, rec_seq),
                32,
            ),
            _ => return Err(Error::Cipher),
        };
        if key.len() != key_len {
            // `out` is dropped (and wiped) here; nothing secret was written yet.
            return Err(Error::Cipher);
        }
        out.len = len;
        out.buf[o_key..o_key + key_len].copy_from_slice(key);
        out.buf[o_seq..o_seq + 8].copy_from_slice(&seq.to_be_bytes());
        if cipher == sys::TLS_CIPHER_CHACHA20_POLY1305 {
            // salt[0]: the whole 12-byte IV goes in `iv`.
            out.buf[o_iv..o_iv + 12].copy_from_slice(iv);
        } else {
            out.buf[o_salt..o_salt + 4].copy_from_slice(&iv[..4]);
            let mut tail = [0u8; 8];
            tail.copy_from_slice(&iv[4..]);
            if version == sys::TLS_1_2_VERSION && direction == Direction::Tx {
                let start = tls12_gcm_tx_explicit_start(u64::from_be_bytes(tail), seq);
                tail = start.to_be_bytes();
            }
            out.buf[o_iv..o_iv + 8].copy_from_slice(&tail);
            tail.zeroize();
        }
        Ok(out)
    }

    /// The struct as the kernel reads it: 40 bytes (AES-128-GCM) or 56.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Zeroes every byte (volatile writes, not optimised away). Drop calls this.
    pub(crate) fn wipe(&mut self) {
        self.buf.zeroize();
    }
}

impl Drop for CryptoInfo {
    fn drop(&mut self) {
        self.wipe();
    }
}

/// The first TLS 1.2 AES-GCM explicit nonce the kernel should send, given rustls' nonce base
/// `base` (`iv[4..12]` as a big-endian u64) and the next sequence number `seq`.
///
/// rustls used `base ^ s` for every `s < seq`; all of them share the bits of `base` above
/// the lowest `k = bits(seq - 1)` bits. The kernel counts up from the return value, the
/// first value past that aligned block, so its nonces stay outside it until the counter
/// wraps after 2^64 − 2^k records. With `seq == 0` nothing was sent: start at `base`.
pub(crate) fn tls12_gcm_tx_explicit_start(base: u64, seq: u64) -> u64 {
    if seq == 0 {
        return base;
    }
    let bits = u64::BITS - (seq - 1).leading_zeros();
    let mask = if bits >= u64::BITS {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    (base | mask).wrapping_add(1)
}

/// Whether this crate can install `suite` in the kernel: the AEAD is AES-128-GCM,
/// AES-256-GCM or ChaCha20-Poly1305 and the version TLS 1.2 or 1.3.
///
/// Call it *before* `dangerous_into_kernel_connection` / `dangerous_extract_secrets`, which
/// consume the rustls connection. The kernel may still refuse a cipher it was built
/// without (AES-256-GCM needs Linux 5.1+, ChaCha20-Poly1305 5.11+, TLS 1.3 5.1+).
#[must_use]
pub fn offloadable(suite: SupportedCipherSuite) -> bool {
    use rustls::CipherSuite as C;
    matches!(
        suite.suite(),
        C::TLS13_AES_128_GCM_SHA256
            | C::TLS13_AES_256_GCM_SHA384
            | C::TLS13_CHACHA20_POLY1305_SHA256
            | C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
            | C::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
            | C::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
            | C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
            | C::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
            | C::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::crypto::cipher::{AeadKey, Iv};

    const IV: [u8; 12] = [0xA0, 0xA1, 0xA2, 0xA3, 0xB0, 0xB1, 0xB2, 0xB3, 0xB4, 0xB5, 0xB6, 0xB7];

    fn key(n: usize) -> Vec<u8> {
        (1..=n as u8).collect()
    }

    #[test]
    fn aes_128_gcm_tls13_fields() {
        let k = key(16);
        let ci = CryptoInfo::encode(
            Direction::Rx,
            sys::TLS_1_3_VERSION,
            sys::TLS_CIPHER_AES_GCM_128,
            &k,
            &IV,
            0x0102_0304_0506_0708,
        )
        .unwrap();
        let b = ci.as_bytes();
        assert_eq!(b.len(), 40);
        assert_eq!(&b[0..2], &0x0304u16.to_ne_bytes());
        assert_eq!(&b[2..4], &51u16.to_ne_bytes());
        assert_eq!(&b[4..12], &IV[4..]); // iv
        assert_eq!(&b[12..28], &k[..]); // key
        assert_eq!(&b[28..32], &IV[..4]); // salt
        assert_eq!(&b[32..40], &[1, 2, 3, 4, 5, 6, 7, 8]); // rec_seq, big-endian
    }

    #[test]
    fn aes_256_gcm_from_rustls_secrets() {
        let mut raw = [0u8; 32];
        raw.iter_mut().enumerate().for_each(|(i, b)| *b = 0x40 + i as u8);
        let secrets = ConnectionTrafficSecrets::Aes256Gcm {
            key: AeadKey::from(raw),
            iv: Iv::new(IV),
        };
        let ci = CryptoInfo::new(Direction::Rx, ProtocolVersion::TLSv1_2, 7, &secrets).unwrap();
        let b = ci.as_bytes();
        assert_eq!(b.len(), 56);
        assert_eq!(&b[0..2], &0x0303u16.to_ne_bytes());
        assert_eq!(&b[2..4], &52u16.to_ne_bytes());
        assert_eq!(&b[4..12], &IV[4..]);
        assert_eq!(&b[12..44], &raw[..]);
        assert_eq!(&b[44..48], &IV[..4]);
        assert_eq!(&b[48..56], &7u64.to_be_bytes());
    }

    #[test]
    fn chacha20_has_no_salt_and_a_12_byte_iv() {
        let secrets = ConnectionTrafficSecrets::Chacha20Poly1305 {
            key: AeadKey::from([0x11; 32]),
            iv: Iv::new(IV),
        };
        for (v, wire) in [
            (ProtocolVersion::TLSv1_2, 0x0303u16),
            (ProtocolVersion::TLSv1_3, 0x0304),
        ] {
            for dir in [Direction::Rx, Direction::Tx] {
                let ci = CryptoInfo::new(dir, v, 3, &secrets).unwrap();
                let b = ci.as_bytes();
                assert_eq!(b.len(), 56);
                assert_eq!(&b[0..2], &wire.to_ne_bytes());
                assert_eq!(&b[2..4], &54u16.to_ne_bytes());
                assert_eq!(&b[4..16], &IV[..]);
                assert_eq!(&b[16..48], &[0x11; 32]);
                assert_eq!(&b[48..56], &3u64.to_be_bytes());
            }
        }
    }

    #[test]
    fn aes_256_key_in_a_128_slot_is_a_cipher_error() {
        let e = CryptoInfo::encode(
            Direction::Rx,
            sys::TLS_1_3_VERSION,
            sys::TLS_CIPHER_AES_GCM_128,
            &key(32),
            &IV,
            0,
        );
        assert_eq!(e.err(), Some(Error::Cipher));
    }

    #[test]
    fn tls10_is_a_version_error() {
        let secrets = ConnectionTrafficSecrets::Aes256Gcm {
            key: AeadKey::from([0; 32]),
            iv: Iv::new(IV),
        };
        let e = CryptoInfo::new(Direction::Rx, ProtocolVersion::TLSv1_0, 0, &secrets);
        assert_eq!(e.err(), Some(Error::Version(0x0301)));
    }

    #[test]
    fn tls12_gcm_tx_starts_past_every_nonce_rustls_used() {
        assert_eq!(tls12_gcm_tx_explicit_start(0x1234, 0), 0x1234);
        // seq 1: rustls used base itself; start at base + 1 for any base.
        assert_eq!(tls12_gcm_tx_explicit_start(0x1234, 1), 0x1235);
        assert_eq!(tls12_gcm_tx_explicit_start(0x1235, 1), 0x1236);
        for base in [0u64, 1, 0x0F, 0xFFFF_FFFF_FFFF_FFF0, 0x8000_0000_0000_0001, 0xDEAD_BEEF] {
            for seq in 1..70u64 {
                let start = tls12_gcm_tx_explicit_start(base, seq);
                for k in 0..200u64 {
                    let kernel = start.wrapping_add(k);
                    for s in 0..seq {
                        assert_ne!(kernel, base ^ s, "base {base:#x} seq {seq} k {k} s {s}");
                    }
                }
            }
        }
        // The encoded TX struct carries it; RX keeps rustls' base.
        let tx = CryptoInfo::encode(
            Direction::Tx,
            sys::TLS_1_2_VERSION,
            sys::TLS_CIPHER_AES_GCM_128,
            &key(16),
            &IV,
            1,
        )
        .unwrap();
        let want = (u64::from_be_bytes(IV[4..].try_into().unwrap()) + 1).to_be_bytes();
        assert_eq!(&tx.as_bytes()[4..12], &want);
    }

    #[test]
    fn wipe_zeroes_every_byte() {
        let mut ci = CryptoInfo::encode(
            Direction::Rx,
            sys::TLS_1_3_VERSION,
            sys::TLS_CIPHER_AES_GCM_256,
            &key(32),
            &IV,
            9,
        )
        .unwrap();
        assert!(ci.as_bytes().iter().any(|&b| b != 0));
        ci.wipe(); // the body of Drop
        assert!(ci.buf.iter().all(|&b| b == 0));
    }

    #[test]
    fn offloadable_suites() {
        use rustls::crypto::ring::cipher_suite as cs;
        for s in [
            cs::TLS13_AES_128_GCM_SHA256,
            cs::TLS13_AES_256_GCM_SHA384,
            cs::TLS13_CHACHA20_POLY1305_SHA256,
            cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        ] {
            assert!(offloadable(s), "{s:?}");
        }
    }
}
