//! The rustls unbuffered client driven over the ring: handshake, records in, the request out.

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, UnbufferedStatus};

use crate::control::ctx::Ctx;
use crate::control::response::feed;
use crate::control::{Conn, Fail, Pumped, Rx, Tls};
use crate::error::Kind;

/// Runs rustls over the buffered ciphertext: handshake messages out, application data to
/// the receive side. Stops when input runs out, bytes must be sent, or the pool is empty;
/// names the negotiated version and suite in `tls_info` once the handshake is done.
pub(crate) fn pump_tls(
    c: &mut Conn,
    shared: &mut Ctx<'_>,
    tls_info: &mut Option<String>,
) -> std::result::Result<Pumped, Fail> {
    let url = shared.url(c.mirror);
    let Conn {
        tls,
        rbuf,
        input_start,
        input_end,
        out,
        pending_request,
        rx,
        clean_close,
        ..
    } = c;
    let (session, kept) = match tls {
        Tls::Rustls(session) => (session, false),
        Tls::RustlsKept(session) => (session, true),
        _ => unreachable!("pump_tls on a rustls connection"),
    };
    // kTLS, or else the software record layer when switched on: both take the secrets at a
    // record boundary once the handshake is done (not when the hand-off was refused).
    let hand_off = (shared.ktls || crate::control::handoff::soft_tls_enabled()) && !kept;
    let rbuf = rbuf.as_mut().expect("idle connection holds its read block");
    let handshaking = session.is_handshaking();
    let mut counted = false;
    loop {
        let UnbufferedStatus { discard, state } = session.process_tls_records(&mut rbuf[*input_start..*input_end]);
        let state = match state {
            Ok(s) => s,
            Err(e) => return Err(refused(e, handshaking, &url, &rbuf[*input_start..*input_end])),
        };
        let side = Side {
            out,
            pending_request,
            rx,
            hand_off,
            at_boundary: *input_start + discard == *input_end,
        };
        let step = on_state(state, side, shared, |e| record_fail(e, handshaking, &url))?;
        *input_start += discard + step.discard;
        if handshaking && !counted && !session.is_handshaking() {
            counted = true;
            if session.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                *shared.tls_resumed += 1;
            } else {
                *shared.tls_full += 1;
            }
        }
        if step.handshake_done && tls_info.is_none() {
            *tls_info = Some(negotiated(session));
        }
        if let Some(p) = step.next {
            if matches!(p, Pumped::PeerClosed) {
                *clean_close = true;
            }
            return Ok(p);
        }
    }
}

/// What one rustls state may touch of the connection.
struct Side<'a> {
    /// Bytes to send.
    out: &'a mut Vec<u8>,
    /// A plaintext request waiting for the session to take application data.
    pending_request: &'a mut Vec<u8>,
    rx: &'a mut Rx,
    /// The secrets go to kTLS or the software record layer once the handshake is done.
    hand_off: bool,
    /// Every buffered record is processed (a hand-off may happen only there).
    at_boundary: bool,
}

/// What handling one rustls state did.
struct Step {
    /// What to return, or `None` to run rustls again.
    next: Option<Pumped>,
    /// Bytes of input the records read in this state used.
    discard: usize,
    /// The handshake is done (application data may be written).
    handshake_done: bool,
}

/// Handles one rustls state: encodes handshake bytes onto `out`, encrypts the waiting
/// request, hands off at a record boundary, or feeds received records to the response.
fn on_state(
    state: ConnectionState<'_, '_, ClientConnectionData>,
    side: Side<'_>,
    shared: &mut Ctx<'_>,
    fail: impl Fn(rustls::Error) -> Fail,
) -> std::result::Result<Step, Fail> {
    let Side {
        out,
        pending_request,
        rx,
        hand_off,
        at_boundary,
    } = side;
    let mut step = Step {
        next: None,
        discard: 0,
        handshake_done: false,
    };
    step.next = match state {
        ConnectionState::EncodeTlsData(mut enc) => {
            let at = out.len();
            out.resize(at + 4096, 0);
            loop {
                match enc.encode(&mut out[at..]) {
                    Ok(n) => {
                        out.truncate(at + n);
                        break;
                    }
                    Err(EncodeError::InsufficientSize(s)) => out.resize(at + s.required_size, 0),
                    Err(e) => return Err(Fail::fatal(Kind::Internal, format!("TLS encode: {e}"))),
                }
            }
            None
        }
        ConnectionState::TransmitTlsData(mut t) => {
            // With a hand-off the request waits for it: the kernel or the record layer
            // encrypts it.
            if !pending_request.is_empty()
                && !hand_off
                && let Some(mut w) = t.may_encrypt_app_data()
            {
                encrypt(&mut w, pending_request, out)?;
            }
            t.done();
            Some(Pumped::Again)
        }
        ConnectionState::BlockedHandshake => Some(Pumped::NeedData),
        ConnectionState::WriteTraffic(mut w) => {
            step.handshake_done = true;
            if hand_off {
                // Hand off on a record boundary, with nothing of ours still to send.
                if at_boundary && out.is_empty() {
                    Some(Pumped::HandOff)
                } else if !out.is_empty() {
                    Some(Pumped::Again)
                } else {
                    Some(Pumped::NeedData)
                }
            } else if pending_request.is_empty() {
                Some(Pumped::NeedData)
            } else {
                encrypt(&mut w, pending_request, out)?;
                Some(Pumped::Again)
            }
        }
        ConnectionState::ReadTraffic(mut r) => {
            let mut blocked = false;
            while let Some(rec) = r.next_record() {
                let rec = rec.map_err(&fail)?;
                step.discard += rec.discard;
                feed(rx, shared, rec.payload)?;
                if rx.job.as_ref().is_some_and(|j| j.placer.has_spill()) {
                    blocked = true;
                    break;
                }
            }
            if blocked {
                Some(Pumped::Blocked)
            } else {
                Some(Pumped::Again)
            }
        }
        ConnectionState::PeerClosed | ConnectionState::Closed => Some(Pumped::PeerClosed),
        _ => Some(Pumped::NeedData),
    };
    Ok(step)
}

/// A rustls error: during the handshake with `url` the download cannot go on (and a
/// plain HTTP answer to the ClientHello in `received` is said so); after it, the segment
/// is retried.
fn refused(e: rustls::Error, handshaking: bool, url: &http::Url, received: &[u8]) -> Fail {
    if handshaking && crate::control::tls::is_plain_http_answer(&e, received) {
        let why = crate::control::tls::plain_http_message(url);
        return Fail::fatal(Kind::Tls, format!("TLS handshake with {}: {why}", url.host()));
    }
    record_fail(e, handshaking, url)
}

/// A failed record from `url`: fatal during the handshake, retried after it.
fn record_fail(e: rustls::Error, handshaking: bool, url: &http::Url) -> Fail {
    if handshaking {
        Fail::fatal(
            Kind::Tls,
            format!(
                "TLS handshake with {}: {}",
                url.host(),
                crate::control::tls::explain(&e)
            ),
        )
    } else {
        Fail::retry(Kind::Tls, format!("TLS: {e}"))
    }
}

/// The negotiated version and cipher suite, as the summary names them.
fn negotiated(session: &UnbufferedClientConnection) -> String {
    let v = session.protocol_version().map(version_name).unwrap_or_default();
    let s = session
        .negotiated_cipher_suite()
        .map(|s| format!("{:?}", s.suite()))
        .unwrap_or_default();
    format!("{v} {s}")
}

pub(crate) fn encrypt(
    w: &mut rustls::unbuffered::WriteTraffic<'_, rustls::client::ClientConnectionData>,
    plain: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> std::result::Result<(), Fail> {
    let at = out.len();
    out.resize(at + plain.len() + 256, 0);
    loop {
        match w.encrypt(plain, &mut out[at..]) {
            Ok(n) => {
                out.truncate(at + n);
                plain.clear();
                return Ok(());
            }
            Err(EncryptError::InsufficientSize(s)) => out.resize(at + s.required_size, 0),
            Err(e) => return Err(Fail::retry(Kind::Tls, format!("TLS encrypt: {e}"))),
        }
    }
}

/// The TLS version as OpenSSL, curl and wget print it (`TLSv1.3`, `TLSv1.2`), not
/// rustls' Rust name (`TLSv1_3`).
pub(crate) fn version_name(v: rustls::ProtocolVersion) -> String {
    match v {
        rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3".to_owned(),
        rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2".to_owned(),
        other => format!("{other:?}").replace('_', "."),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tls_versions_are_named_as_other_tools_name_them() {
        assert_eq!(super::version_name(rustls::ProtocolVersion::TLSv1_3), "TLSv1.3");
        assert_eq!(super::version_name(rustls::ProtocolVersion::TLSv1_2), "TLSv1.2");
        assert_eq!(super::version_name(rustls::ProtocolVersion::TLSv1_1), "TLSv1.1");
    }
}
