//! The software record layer: what `tls.ko` does after the hand-off, in user space, with
//! `ring`'s AEAD, for hosts without kernel TLS.
//!
//! After a rustls handshake the traffic secrets are taken the same way as for kTLS
//! (`dangerous_into_kernel_connection`, see the crate docs). [`RecordOpener`] then opens
//! the peer's records **in place**: a record received at some offset of a buffer is
//! authenticated and decrypted with one `LessSafeKey::open_within`, which shifts the
//! plaintext left to a destination offset of the same buffer — where the caller wants it
//! to land (for ringdl: its file position inside an O_DIRECT write block). No copy besides
//! the AEAD's own pass. [`RecordSealer`] encrypts our records (a request on a kept-alive
//! connection, a KeyUpdate).
//!
//! # Record protection
//! - TLS 1.3 (RFC 8446 §5.2–5.3): header `23, 0x0303, length`; nonce = `iv XOR pad64(seq)`;
//!   AAD = the 5-byte header as received; plaintext = content ‖ type ‖ zero padding; at
//!   most 2^14 + 256 bytes of ciphertext and 2^14 of content.
//! - TLS 1.2 AES-GCM (RFC 5288 §3, RFC 5246 §6.2.3.3): record = 8-byte explicit nonce ‖
//!   ciphertext ‖ tag; nonce = `iv[0..4] ‖ explicit`; AAD = `seq ‖ type ‖ version ‖
//!   plaintext length`. We send `explicit = iv[4..12] XOR seq`, as rustls does, so the
//!   records sealed here continue rustls' nonces and never repeat one.
//! - TLS 1.2 ChaCha20-Poly1305 (RFC 7905 §2): no explicit nonce; nonce = `iv XOR
//!   pad64(seq)`; AAD as for AES-GCM.
//!
//! Sequence numbers count records under the current key (from the value rustls hands over)
//! and restart at 0 after a TLS 1.3 KeyUpdate ([`RecordOpener::rekey`]).
//!
//! # What a record's failure means
//! Any [`RecordError`] is fatal for the connection (RFC 8446 §5.2: `bad_record_mac`,
//! `record_overflow`, `unexpected_message`). A record that fails authentication reports no
//! plaintext: nothing before the destination offset is touched, and what `open_within`
//! left after it is garbage the caller must not count.
//!
//! # Key material
//! The keys live in `ring`'s `LessSafeKey` (expanded AES / ChaCha keys; ring does not zero
//! them on drop). The 12-byte IV is zeroed on drop (`zeroize`). The rustls secrets are
//! taken by value and dropped (rustls zeroes its `AeadKey`).

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use rustls::{ConnectionTrafficSecrets, ProtocolVersion};
use zeroize::Zeroize;

use crate::error::Error;
use crate::record::content_type;

/// Bytes of a record header: type, version (2), length (2).
pub const HEADER_LEN: usize = 5;
/// Bytes of an AEAD tag (all three ciphers).
pub const TAG_LEN: usize = 16;
/// The largest plaintext fragment a record may carry: 2^14 bytes (RFC 8446 §5.1, RFC 5246
/// §6.2.1).
pub const MAX_FRAGMENT_LEN: usize = 1 << 14;
/// The largest TLS 1.3 `TLSCiphertext.length`: 2^14 + 256 (RFC 8446 §5.2).
pub const MAX_CIPHERTEXT_LEN_TLS13: usize = MAX_FRAGMENT_LEN + 256;
/// The largest TLS 1.2 `TLSCiphertext.length`: 2^14 + 2048 (RFC 5246 §6.2.3).
pub const MAX_CIPHERTEXT_LEN_TLS12: usize = MAX_FRAGMENT_LEN + 2048;
/// The largest whole record on the wire, header included, for either version.
pub const MAX_RECORD_LEN: usize = HEADER_LEN + MAX_CIPHERTEXT_LEN_TLS12;

/// Why a record cannot be opened (or sealed). Each is fatal for the connection; the alert
/// RFC 8446 §6.2 names is in [`RecordError::alert`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordError {
    /// The tag did not authenticate the record under this key and sequence number
    /// (tampered, truncated by a wrong length, or out of order): `bad_record_mac`.
    Decrypt,
    /// The header's length is above the version's limit (2^14 + 256 for TLS 1.3, 2^14 +
    /// 2048 for TLS 1.2), too short to hold the explicit nonce and tag, the opened TLS 1.3
    /// inner plaintext (padding included) is above 2^14 + 1 bytes (RFC 8446 §5.4), or the
    /// content above 2^14 bytes: `record_overflow`.
    Overflow {
        /// The offending length in bytes (header length or content length).
        len: usize,
    },
    /// A content type not allowed once the traffic keys run: an outer type other than 23
    /// in TLS 1.3, change_cipher_spec, or an unknown type: `unexpected_message`.
    UnexpectedType(u8),
    /// A TLS 1.3 plaintext made only of zeros: no inner content type (RFC 8446 §5.4).
    NoContentType,
    /// An empty alert or handshake fragment (RFC 8446 §5.1, RFC 5246 §6.2.1).
    EmptyFragment(u8),
    /// The sequence number would pass 2^64 − 1 (RFC 8446 §5.3: rekey or close first).
    SequenceExhausted,
    /// The destination offset lies after the record's ciphertext: `open_within` only
    /// shifts left. A caller bug, not the peer's.
    Destination {
        /// The destination offset asked for.
        dst: usize,
        /// The offset of the record's first byte.
        src: usize,
    },
}

impl RecordError {
    /// The AlertDescription this error corresponds to (RFC 8446 §6.2): 20 bad_record_mac,
    /// 22 record_overflow, 10 unexpected_message, 80 internal_error.
    #[must_use]
    pub fn alert(self) -> u8 {
        match self {
            RecordError::Decrypt => 20,
            RecordError::Overflow { .. } => 22,
            RecordError::UnexpectedType(_) | RecordError::NoContentType | RecordError::EmptyFragment(_) => 10,
            RecordError::SequenceExhausted | RecordError::Destination { .. } => 80,
        }
    }
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::Decrypt => f.write_str("a TLS record failed authentication (bad_record_mac)"),
            RecordError::Overflow { len } => {
                write!(f, "a TLS record of {len} bytes is over the limit (record_overflow)")
            }
            RecordError::UnexpectedType(t) => write!(f, "unexpected TLS record content type {t}"),
            RecordError::NoContentType => f.write_str("a TLS 1.3 record without a content type (all padding)"),
            RecordError::EmptyFragment(t) => write!(f, "an empty TLS record of content type {t}"),
            RecordError::SequenceExhausted => f.write_str("TLS record sequence number exhausted"),
            RecordError::Destination { dst, src } => {
                write!(
                    f,
                    "record opened at {src} cannot land at {dst}: only a left shift is possible"
                )
            }
        }
    }
}

impl std::error::Error for RecordError {}

/// How a suite protects its records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    /// TLS 1.3, any of the three AEADs.
    Tls13,
    /// TLS 1.2 AES-GCM: 8-byte explicit nonce in each record.
    Tls12Explicit,
    /// TLS 1.2 ChaCha20-Poly1305: implicit nonce.
    Tls12Implicit,
}

impl Scheme {
    /// Bytes between the header and the ciphertext.
    fn explicit_len(self) -> usize {
        match self {
            Scheme::Tls12Explicit => 8,
            _ => 0,
        }
    }

    fn max_ciphertext_len(self) -> usize {
        match self {
            Scheme::Tls13 => MAX_CIPHERTEXT_LEN_TLS13,
            _ => MAX_CIPHERTEXT_LEN_TLS12,
        }
    }
}

/// One direction's key, IV, scheme and sequence number.
///
/// INVARIANT: `key`'s algorithm is the one `secrets` named when built; `iv` is the
/// 12-byte rustls IV of that key.
struct Keys {
    key: LessSafeKey,
    iv: [u8; 12],
    scheme: Scheme,
    /// The sequence number of the next record under this key.
    seq: u64,
}

impl Keys {
    fn new(version: ProtocolVersion, seq: u64, secrets: ConnectionTrafficSecrets) -> Result<Keys, Error> {
        let tls13 = match version {
            ProtocolVersion::TLSv1_3 => true,
            ProtocolVersion::TLSv1_2 => false,
            other => return Err(Error::Version(u16::from(other))),
        };
        let (alg, key, iv, chacha) = match &secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv, false),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv, false),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (&aead::CHACHA20_POLY1305, key, iv, true),
            _ => return Err(Error::Cipher),
        };
        let key = UnboundKey::new(alg, key.as_ref()).map_err(|_| Error::Cipher)?;
        let iv: [u8; 12] = iv.as_ref().try_into().map_err(|_| Error::Cipher)?;
        let scheme = match (tls13, chacha) {
            (true, _) => Scheme::Tls13,
            (false, false) => Scheme::Tls12Explicit,
            (false, true) => Scheme::Tls12Implicit,
        };
        Ok(Keys {
            key: LessSafeKey::new(key),
            iv,
            scheme,
            seq,
        })
    }

    /// `iv XOR pad64(seq)` (RFC 8446 §5.3, RFC 7905 §2).
    fn xor_nonce(&self, seq: u64) -> Nonce {
        let mut n = self.iv;
        for (b, s) in n[4..].iter_mut().zip(seq.to_be_bytes()) {
            *b ^= s;
        }
        Nonce::assume_unique_for_key(n)
    }

    /// The TLS 1.2 AAD: `seq ‖ type ‖ version ‖ plaintext length` (RFC 5246 §6.2.3.3).
    fn tls12_aad(seq: u64, header: &[u8; HEADER_LEN], plain_len: usize) -> [u8; 13] {
        let mut a = [0; 13];
        a[..8].copy_from_slice(&seq.to_be_bytes());
        a[8..11].copy_from_slice(&header[..3]);
        a[11..].copy_from_slice(&(plain_len as u16).to_be_bytes());
        a
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        self.iv.zeroize();
    }
}

/// The length of the whole record (header included, bytes) that starts `head`, from its
/// header alone, or `None` while fewer than [`HEADER_LEN`] bytes are there. No key needed:
/// a receive loop uses it to know how many bytes to wait for.
///
/// # Errors
/// [`RecordError::Overflow`] when the header's length is above 2^14 + 2048 (the larger,
/// TLS 1.2, limit; [`RecordOpener::open`] applies the version's own).
pub fn record_len(head: &[u8]) -> Result<Option<usize>, RecordError> {
    let Some(h) = head.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let len = usize::from(u16::from_be_bytes([h[3], h[4]]));
    if len > MAX_CIPHERTEXT_LEN_TLS12 {
        return Err(RecordError::Overflow { len });
    }
    Ok(Some(HEADER_LEN + len))
}

/// One record opened by [`RecordOpener::open`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opened {
    /// The content type: 23 application_data, 22 handshake (NewSessionTicket, KeyUpdate),
    /// 21 alert. For TLS 1.3 the inner type.
    pub typ: u8,
    /// Bytes of content now at the destination offset (padding and inner type excluded).
    pub len: usize,
    /// Bytes the record took in the buffer from its first header byte: the source offset
    /// of the next record is `src + wire`.
    pub wire: usize,
}

/// The receive side: opens the peer's records in place, in order.
pub struct RecordOpener {
    keys: Keys,
    /// The start of a handshake message whose end is in a later record (RFC 8446 §5.1:
    /// messages may span records, no other record type may come between).
    pending: Vec<u8>,
}

/// The longest handshake message [`RecordOpener::handshake`] reassembles across records, in
/// bytes (a NewSessionTicket is a few hundred; RFC 8446 allows 2^24).
pub const MAX_HANDSHAKE_MESSAGE: usize = 1 << 16;

impl std::fmt::Debug for RecordOpener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordOpener")
            .field("scheme", &self.keys.scheme)
            .field("seq", &self.keys.seq)
            .finish_non_exhaustive()
    }
}

impl RecordOpener {
    /// A receive side for `version` from the peer's (server's) traffic secrets, as
    /// rustls' `ExtractedSecrets::rx` gives them: `seq` is the sequence number of the next
    /// record to open. The secrets are consumed.
    ///
    /// # Errors
    /// [`Error::Version`] for anything but TLS 1.2 / 1.3; [`Error::Cipher`] for a cipher
    /// other than AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305 (fall back to rustls).
    pub fn new(version: ProtocolVersion, seq: u64, secrets: ConnectionTrafficSecrets) -> Result<Self, Error> {
        Ok(RecordOpener {
            keys: Keys::new(version, seq, secrets)?,
            pending: Vec::new(),
        })
    }

    /// Takes the peer's next traffic key after a TLS 1.3 KeyUpdate (RFC 8446 §4.6.3), as
    /// `KernelConnection::update_rx_secret` gives it (`seq` 0). Version and cipher stay.
    ///
    /// # Errors
    /// [`Error::Version`] on a TLS 1.2 connection (no KeyUpdate there); [`Error::Cipher`]
    /// when the cipher changed.
    pub fn rekey(&mut self, seq: u64, secrets: ConnectionTrafficSecrets) -> Result<(), Error> {
        if self.keys.scheme != Scheme::Tls13 {
            return Err(Error::Version(u16::from(ProtocolVersion::TLSv1_2)));
        }
        let keys = Keys::new(ProtocolVersion::TLSv1_3, seq, secrets)?;
        if keys.key.algorithm() != self.keys.key.algorithm() {
            return Err(Error::Cipher);
        }
        self.keys = keys;
        Ok(())
    }

    /// The sequence number of the next record.
    #[must_use]
    pub fn seq(&self) -> u64 {
        self.keys.seq
    }

    /// Bytes between a record's first byte and its first ciphertext byte: 5, or 13 for TLS
    /// 1.2 AES-GCM (explicit nonce). Plaintext can land at most this far after `src`.
    #[must_use]
    pub fn prefix_len(&self) -> usize {
        HEADER_LEN + self.keys.scheme.explicit_len()
    }

    /// Bytes a record adds to its content at most, besides padding: prefix, tag, and the
    /// TLS 1.3 inner type (5 + 16 + 1 = 22 for TLS 1.3, 29 for TLS 1.2 AES-GCM, 21 for TLS
    /// 1.2 ChaCha20-Poly1305).
    #[must_use]
    pub fn overhead(&self) -> usize {
        self.prefix_len() + TAG_LEN + usize::from(self.keys.scheme == Scheme::Tls13)
    }

    /// Opens the record that starts at `buf[src]` and moves its content to `buf[dst..]`
    /// (a left shift within `buf`: `dst <= src + prefix_len()`), with one
    /// `open_within` (authenticate and decrypt in place). `Ok(None)` while `buf[src..]`
    /// does not hold the whole record yet (nothing is touched, the sequence number stays).
    ///
    /// On success the content is `buf[dst..dst + len]`, the sequence number advances, and
    /// the bytes of `buf` after the content up to `src + wire` are garbage. TLS 1.3 zero
    /// padding is stripped and the inner type returned.
    ///
    /// # Errors
    /// [`RecordError`]: fatal for the connection. The sequence number does not advance,
    /// `buf[..dst]` is untouched, and no content is reported; `buf[dst..src + wire]` may
    /// have been overwritten.
    pub fn open(&mut self, buf: &mut [u8], src: usize, dst: usize) -> Result<Option<Opened>, RecordError> {
        let Some(wire) = record_len(buf.get(src..).unwrap_or_default())? else {
            return Ok(None);
        };
        let keys = &self.keys;
        let header: [u8; HEADER_LEN] = buf[src..src + HEADER_LEN].try_into().expect("record_len saw a header");
        let body_len = wire - HEADER_LEN;
        let explicit = keys.scheme.explicit_len();
        let outer = header[0];
        match (keys.scheme, outer) {
            (Scheme::Tls13, content_type::APPLICATION_DATA) => {}
            (Scheme::Tls13, t) => return Err(RecordError::UnexpectedType(t)),
            (_, content_type::APPLICATION_DATA | content_type::HANDSHAKE | content_type::ALERT) => {}
            (_, t) => return Err(RecordError::UnexpectedType(t)),
        }
        if body_len > keys.scheme.max_ciphertext_len() || body_len < explicit + TAG_LEN {
            return Err(RecordError::Overflow { len: body_len });
        }
        if buf.len() - src < wire {
            return Ok(None);
        }
        let start = src + HEADER_LEN + explicit;
        if dst > start {
            return Err(RecordError::Destination { dst, src });
        }
        let seq = keys.seq;
        let next = seq.checked_add(1).ok_or(RecordError::SequenceExhausted)?;
        let ct_len = body_len - explicit - TAG_LEN;
        if keys.scheme != Scheme::Tls13 && ct_len > MAX_FRAGMENT_LEN {
            return Err(RecordError::Overflow { len: ct_len });
        }
        let nonce = match keys.scheme {
            Scheme::Tls12Explicit => {
                let mut n = keys.iv;
                n[4..].copy_from_slice(&buf[src + HEADER_LEN..start]);
                Nonce::assume_unique_for_key(n)
            }
            _ => keys.xor_nonce(seq),
        };
        let in_out = &mut buf[dst..src + wire];
        let opened = match keys.scheme {
            Scheme::Tls13 => keys.key.open_within(nonce, Aad::from(header), in_out, start - dst..),
            _ => keys.key.open_within(
                nonce,
                Aad::from(Keys::tls12_aad(seq, &header, ct_len)),
                in_out,
                start - dst..,
            ),
        };
        let plain = opened.map_err(|_| RecordError::Decrypt)?;
        let (typ, len) = if keys.scheme == Scheme::Tls13 {
            // RFC 8446 §5.4: the whole TLSInnerPlaintext (content, type, padding) is at most
            // 2^14 + 1 bytes; the type is the last non-zero byte, zeros after it padding.
            if plain.len() > MAX_FRAGMENT_LEN + 1 {
                return Err(RecordError::Overflow { len: plain.len() });
            }
            let at = plain.iter().rposition(|&b| b != 0).ok_or(RecordError::NoContentType)?;
            (plain[at], at)
        } else {
            (outer, plain.len())
        };
        if len > MAX_FRAGMENT_LEN {
            return Err(RecordError::Overflow { len });
        }
        match typ {
            t if t != content_type::HANDSHAKE && !self.pending.is_empty() => {
                return Err(RecordError::UnexpectedType(t));
            }
            content_type::APPLICATION_DATA => {}
            content_type::HANDSHAKE | content_type::ALERT if len == 0 => return Err(RecordError::EmptyFragment(typ)),
            content_type::HANDSHAKE | content_type::ALERT => {}
            t => return Err(RecordError::UnexpectedType(t)),
        }
        self.keys.seq = next;
        Ok(Some(Opened { typ, len, wire }))
    }
}

/// What a handshake record received after the handshake asked for, once
/// [`RecordOpener::handshake`] handled it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PostHandshake {
    /// NewSessionTicket messages handed to rustls (TLS 1.3, RFC 8446 §4.6.1).
    pub tickets: usize,
    /// A KeyUpdate was taken (the opener now runs on the peer's next key); `Some(true)`
    /// when the peer set `update_requested`: seal our own KeyUpdate under the current TX
    /// key, then [`RecordSealer::rekey`] with `update_tx_secret` (RFC 8446 §4.6.3).
    pub key_update: Option<bool>,
}

impl RecordOpener {
    /// Handles the plaintext of one handshake record opened after the handshake, the way
    /// the kTLS path does: each NewSessionTicket goes to
    /// `KernelConnection::handle_new_session_ticket`; a KeyUpdate (RFC 8446 §4.6.3), which
    /// must end its record (§5.1), rekeys this opener with `update_rx_secret` (sequence 0);
    /// a TLS 1.2 HelloRequest is ignored (no renegotiation, as rustls' own client does).
    /// A message that continues in the next record is kept (up to
    /// [`MAX_HANDSHAKE_MESSAGE`] bytes) and completed by the next handshake record; until
    /// then [`open`](Self::open) refuses any other record type.
    ///
    /// # Errors
    /// rustls' error for a ticket it refuses, a malformed KeyUpdate or one that does not
    /// end its record (`InvalidMessage::InvalidKeyUpdate`), a message longer than
    /// [`MAX_HANDSHAKE_MESSAGE`] (`InvalidMessage::HandshakePayloadTooLarge`) or any other
    /// handshake message (`InappropriateHandshakeMessage`). Fatal for the connection.
    pub fn handshake(
        &mut self,
        kconn: &mut rustls::kernel::KernelConnection<rustls::client::ClientConnectionData>,
        payload: &[u8],
    ) -> Result<PostHandshake, rustls::Error> {
        use crate::record::{handshake_messages, handshake_type};
        use rustls::{Error as E, HandshakeType, InvalidMessage};
        let mut out = PostHandshake::default();
        let joined;
        let payload = if self.pending.is_empty() {
            payload
        } else {
            joined = [std::mem::take(&mut self.pending).as_slice(), payload].concat();
            &joined[..]
        };
        for m in handshake_messages(payload) {
            let m = match m {
                Ok(m) => m,
                Err(tail) => {
                    let declared = match *tail {
                        [_, a, b, c, ..] => u32::from_be_bytes([0, a, b, c]) as usize,
                        _ => 0,
                    };
                    if out.key_update.is_some() || declared + 4 > MAX_HANDSHAKE_MESSAGE {
                        return Err(E::InvalidMessage(if out.key_update.is_some() {
                            InvalidMessage::InvalidKeyUpdate
                        } else {
                            InvalidMessage::HandshakePayloadTooLarge
                        }));
                    }
                    self.pending = tail.to_vec();
                    break;
                }
            };
            if out.key_update.is_some() {
                // Bytes after a KeyUpdate would be under the old key: not allowed.
                return Err(E::InvalidMessage(InvalidMessage::InvalidKeyUpdate));
            }
            match (m.typ, self.keys.scheme) {
                (handshake_type::NEW_SESSION_TICKET, Scheme::Tls13) => {
                    kconn.handle_new_session_ticket(m.body)?;
                    out.tickets += 1;
                }
                (handshake_type::KEY_UPDATE, Scheme::Tls13) => {
                    let requested = match m.body {
                        [0] => false,
                        [1] => true,
                        _ => return Err(E::InvalidMessage(InvalidMessage::InvalidKeyUpdate)),
                    };
                    let (seq, secrets) = kconn.update_rx_secret()?;
                    self.rekey(seq, secrets)
                        .map_err(|e| E::General(format!("KeyUpdate: {e}")))?;
                    out.key_update = Some(requested);
                }
                (0, Scheme::Tls12Explicit | Scheme::Tls12Implicit) if m.body.is_empty() => {}
                (t, _) => {
                    return Err(E::InappropriateHandshakeMessage {
                        expect_types: vec![HandshakeType::NewSessionTicket, HandshakeType::KeyUpdate],
                        got_type: HandshakeType::from(t),
                    });
                }
            }
        }
        Ok(out)
    }
}

/// The send side: seals our records (requests, KeyUpdate, close_notify).
pub struct RecordSealer {
    keys: Keys,
}

impl std::fmt::Debug for RecordSealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordSealer")
            .field("scheme", &self.keys.scheme)
            .field("seq", &self.keys.seq)
            .finish_non_exhaustive()
    }
}

impl RecordSealer {
    /// A send side for `version` from our (client's) traffic secrets, as rustls'
    /// `ExtractedSecrets::tx` gives them: `seq` is the sequence number of the next record
    /// to seal. The secrets are consumed.
    ///
    /// # Errors
    /// As [`RecordOpener::new`].
    pub fn new(version: ProtocolVersion, seq: u64, secrets: ConnectionTrafficSecrets) -> Result<Self, Error> {
        Ok(RecordSealer {
            keys: Keys::new(version, seq, secrets)?,
        })
    }

    /// Takes our next traffic key after we sent a KeyUpdate (RFC 8446 §4.6.3), as
    /// `KernelConnection::update_tx_secret` gives it (`seq` 0). Seal the KeyUpdate itself
    /// under the old key first.
    ///
    /// # Errors
    /// As [`RecordOpener::rekey`].
    pub fn rekey(&mut self, seq: u64, secrets: ConnectionTrafficSecrets) -> Result<(), Error> {
        if self.keys.scheme != Scheme::Tls13 {
            return Err(Error::Version(u16::from(ProtocolVersion::TLSv1_2)));
        }
        let keys = Keys::new(ProtocolVersion::TLSv1_3, seq, secrets)?;
        if keys.key.algorithm() != self.keys.key.algorithm() {
            return Err(Error::Cipher);
        }
        self.keys = keys;
        Ok(())
    }

    /// The sequence number of the next record.
    #[must_use]
    pub fn seq(&self) -> u64 {
        self.keys.seq
    }

    /// Seals `content` of content type `typ` (21, 22 or 23) as records of at most 2^14
    /// content bytes each, appended to `out` (header, explicit nonce, ciphertext, tag).
    /// Empty `content` makes one empty record (application data only). No padding.
    ///
    /// # Errors
    /// [`RecordError::UnexpectedType`] for another type, [`RecordError::EmptyFragment`]
    /// for an empty alert or handshake, [`RecordError::SequenceExhausted`]. `out` keeps
    /// the records sealed before the error.
    pub fn seal(&mut self, typ: u8, content: &[u8], out: &mut Vec<u8>) -> Result<(), RecordError> {
        match typ {
            content_type::APPLICATION_DATA => {}
            content_type::HANDSHAKE | content_type::ALERT if content.is_empty() => {
                return Err(RecordError::EmptyFragment(typ));
            }
            content_type::HANDSHAKE | content_type::ALERT => {}
            t => return Err(RecordError::UnexpectedType(t)),
        }
        let mut chunks = content.chunks(MAX_FRAGMENT_LEN);
        let first = chunks.next().unwrap_or_default();
        for chunk in std::iter::once(first).chain(chunks) {
            self.seal_one(typ, chunk, out)?;
        }
        Ok(())
    }

    fn seal_one(&mut self, typ: u8, chunk: &[u8], out: &mut Vec<u8>) -> Result<(), RecordError> {
        let keys = &self.keys;
        let seq = keys.seq;
        let next = seq.checked_add(1).ok_or(RecordError::SequenceExhausted)?;
        let explicit = keys.scheme.explicit_len();
        let inner = usize::from(keys.scheme == Scheme::Tls13);
        let body_len = explicit + chunk.len() + inner + TAG_LEN;
        let outer = if keys.scheme == Scheme::Tls13 {
            content_type::APPLICATION_DATA
        } else {
            typ
        };
        let header = [outer, 3, 3, (body_len >> 8) as u8, body_len as u8];
        let record_start = out.len();
        out.extend_from_slice(&header);
        let nonce = match keys.scheme {
            Scheme::Tls12Explicit => {
                // rustls' choice (RFC 5288 leaves it to the sender): iv[4..12] XOR seq.
                let mut n = keys.iv;
                for (b, s) in n[4..].iter_mut().zip(seq.to_be_bytes()) {
                    *b ^= s;
                }
                out.extend_from_slice(&n[4..]);
                Nonce::assume_unique_for_key(n)
            }
            _ => keys.xor_nonce(seq),
        };
        let ct_start = out.len();
        out.extend_from_slice(chunk);
        if inner == 1 {
            out.push(typ);
        }
        let aad = match keys.scheme {
            Scheme::Tls13 => {
                let mut a = [0; 13];
                a[..HEADER_LEN].copy_from_slice(&header);
                (a, HEADER_LEN)
            }
            _ => (Keys::tls12_aad(seq, &header, chunk.len()), 13),
        };
        let tag = keys
            .key
            .seal_in_place_separate_tag(nonce, Aad::from(&aad.0[..aad.1]), &mut out[ct_start..])
            .map_err(|_| RecordError::Overflow { len: chunk.len() })?;
        out.extend_from_slice(tag.as_ref());
        debug_assert_eq!(out.len() - record_start, HEADER_LEN + body_len);
        self.keys.seq = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
