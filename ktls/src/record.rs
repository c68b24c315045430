//! What a non-data record read from a kTLS RX socket says.
//!
//! With kTLS RX the kernel strips the record framing (and, for TLS 1.3, the inner content
//! type and padding) and reports the content type in a cmsg ([`record_type`](crate::record_type)).
//! A record that is not application data stops `splice` (EINVAL) and plain `recv` (EIO)
//! until it is read with `recvmsg` and a control buffer; its plaintext is then decoded
//! here. Source: RFC 8446 §5.1, §6, §4.6; RFC 5246 §7.2.

/// TLS content types (RFC 8446 §5.1, RFC 5246 §6.2.1).
pub mod content_type {
    /// change_cipher_spec (20).
    pub const CHANGE_CIPHER_SPEC: u8 = 20;
    /// alert (21).
    pub const ALERT: u8 = 21;
    /// handshake (22).
    pub const HANDSHAKE: u8 = 22;
    /// application_data (23).
    pub const APPLICATION_DATA: u8 = 23;
}

/// A non-data record's plaintext, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NonData {
    /// An alert: level 1 warning, 2 fatal; description 0 is close_notify (the peer's clean
    /// end of stream), anything fatal ends the connection.
    Alert {
        /// AlertLevel: 1 warning, 2 fatal.
        level: u8,
        /// AlertDescription (0 close_notify, 20 bad_record_mac, ...).
        description: u8,
    },
    /// Handshake messages (TLS 1.3 after the handshake: NewSessionTicket 4, KeyUpdate 24),
    /// the record's whole plaintext; split with [`handshake_messages`].
    Handshake(Vec<u8>),
}

/// Why a record could not be decoded as [`NonData`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// Content type 23: application data is body bytes, not a control record.
    ApplicationData,
    /// An alert record whose plaintext is not exactly two bytes.
    BadAlert,
    /// change_cipher_spec (20) or an unknown content type: not valid once kTLS runs.
    Unexpected(u8),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::ApplicationData => f.write_str("application data is not a control record"),
            DecodeError::BadAlert => f.write_str("alert record is not two bytes"),
            DecodeError::Unexpected(t) => write!(f, "unexpected record content type {t}"),
        }
    }
}

impl std::error::Error for DecodeError {}

impl NonData {
    /// Decodes the plaintext `payload` of one record of `content_type` (from
    /// [`record_type`](crate::record_type)).
    ///
    /// # Errors
    /// [`DecodeError`]: application data, a malformed alert, or another content type.
    pub fn decode(content_type: u8, payload: &[u8]) -> Result<Self, DecodeError> {
        match content_type {
            content_type::ALERT => match *payload {
                [level, description] => Ok(NonData::Alert { level, description }),
                _ => Err(DecodeError::BadAlert),
            },
            content_type::HANDSHAKE => Ok(NonData::Handshake(payload.to_vec())),
            content_type::APPLICATION_DATA => Err(DecodeError::ApplicationData),
            other => Err(DecodeError::Unexpected(other)),
        }
    }

    /// Whether this is the peer's close_notify alert (description 0): a clean end of the
    /// stream, as opposed to a truncation.
    #[must_use]
    pub fn is_close_notify(&self) -> bool {
        matches!(self, NonData::Alert { description: 0, .. })
    }
}

/// Handshake message types seen after a TLS 1.3 handshake (RFC 8446 §4).
pub mod handshake_type {
    /// NewSessionTicket (4): hand the body to `KernelConnection::handle_new_session_ticket`.
    pub const NEW_SESSION_TICKET: u8 = 4;
    /// KeyUpdate (24): body is one byte, 1 = update_requested. RX must be rekeyed with
    /// `KernelConnection::update_rx_secret` + [`install_rx`](crate::install_rx), and on
    /// update_requested TX with [`send_key_update`](crate::send_key_update) +
    /// `update_tx_secret` + [`install_tx`](crate::install_tx) (Linux 6.14+; before that,
    /// the connection cannot continue under kTLS).
    pub const KEY_UPDATE: u8 = 24;
}

/// One handshake message: its type and body (without the 4-byte `msg_type || length`
/// header, as `KernelConnection::handle_new_session_ticket` wants it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandshakeMessage<'a> {
    /// HandshakeType (see [`handshake_type`]).
    pub typ: u8,
    /// The message body.
    pub body: &'a [u8],
}

/// Iterates over the handshake messages in a handshake record's plaintext. Yields
/// `Err(rest)` once, with the unparsed tail, when the last message is incomplete (a message
/// split across records; the caller prepends it to the next record's plaintext).
pub fn handshake_messages(payload: &[u8]) -> impl Iterator<Item = Result<HandshakeMessage<'_>, &[u8]>> {
    let mut rest = payload;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let parsed = match *rest {
            [typ, a, b, c, ref tail @ ..] => {
                let len = u32::from_be_bytes([0, a, b, c]) as usize;
                tail.get(..len)
                    .map(|body| (HandshakeMessage { typ, body }, &tail[len..]))
            }
            _ => None,
        };
        match parsed {
            Some((msg, tail)) => {
                rest = tail;
                Some(Ok(msg))
            }
            None => {
                let partial = rest;
                rest = &[];
                Some(Err(partial))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_notify() {
        let a = NonData::decode(21, &[1, 0]).unwrap();
        assert_eq!(
            a,
            NonData::Alert {
                level: 1,
                description: 0
            }
        );
        assert!(a.is_close_notify());
        let fatal = NonData::decode(21, &[2, 20]).unwrap();
        assert!(!fatal.is_close_notify());
    }

    #[test]
    fn bad_alerts_and_types() {
        assert_eq!(NonData::decode(21, &[1]), Err(DecodeError::BadAlert));
        assert_eq!(NonData::decode(21, &[1, 0, 0]), Err(DecodeError::BadAlert));
        assert_eq!(NonData::decode(23, b"x"), Err(DecodeError::ApplicationData));
        assert_eq!(NonData::decode(20, &[1]), Err(DecodeError::Unexpected(20)));
        assert_eq!(NonData::decode(99, &[]), Err(DecodeError::Unexpected(99)));
    }

    #[test]
    fn handshake_split_into_messages() {
        // NewSessionTicket with a 3-byte body, then KeyUpdate(update_requested).
        let rec = [4, 0, 0, 3, 9, 8, 7, 24, 0, 0, 1, 1];
        let NonData::Handshake(p) = NonData::decode(22, &rec).unwrap() else {
            panic!()
        };
        let msgs: Vec<_> = handshake_messages(&p).collect();
        assert_eq!(
            msgs,
            [
                Ok(HandshakeMessage {
                    typ: 4,
                    body: &[9, 8, 7]
                }),
                Ok(HandshakeMessage { typ: 24, body: &[1] }),
            ]
        );
    }

    #[test]
    fn incomplete_tail_is_reported_once() {
        let rec = [24, 0, 0, 1, 0, 4, 0, 0, 9, 1]; // KeyUpdate, then 4 of 9+4 bytes
        let msgs: Vec<_> = handshake_messages(&rec).collect();
        assert_eq!(msgs, [Ok(HandshakeMessage { typ: 24, body: &[0] }), Err(&rec[5..])]);
        assert_eq!(handshake_messages(&[4, 0]).collect::<Vec<_>>(), [Err(&[4u8, 0][..])]);
        assert_eq!(handshake_messages(&[]).count(), 0);
    }

    #[test]
    fn decode_errors_say_what_is_wrong() {
        assert_eq!(
            DecodeError::ApplicationData.to_string(),
            "application data is not a control record"
        );
        assert_eq!(DecodeError::BadAlert.to_string(), "alert record is not two bytes");
        assert_eq!(
            DecodeError::Unexpected(20).to_string(),
            "unexpected record content type 20"
        );
    }
}
