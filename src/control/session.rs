//! The rustls unbuffered client driven over the ring: handshake, records in, the request out.

use crate::control::ctx::Ctx;
use crate::control::response::*;
use crate::control::*;
use crate::error::Kind;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, UnbufferedStatus};

/// Runs rustls over the buffered ciphertext: handshake messages out, application data to
/// the receive side. Stops when input runs out, bytes must be sent, or the pool is empty.
pub(crate) fn pump_tls(
    c: &mut Conn,
    sh: &mut Ctx<'_>,
    tls_info: &mut Option<String>,
) -> std::result::Result<Pumped, Fail> {
    let url = sh.url(c.mirror);
    let Conn {
        tls,
        rbuf,
        rlo,
        rhi,
        out,
        pending_request,
        rx,
        clean_close,
        no_ktls,
        ..
    } = c;
    // kTLS, or else the software record layer when switched on: both take the secrets at a
    // record boundary once the handshake is done.
    let want_ktls = (sh.ktls || crate::control::handoff::soft_tls_enabled()) && !*no_ktls;
    let tls = tls.as_mut().expect("pump_tls on a TLS connection");
    let rbuf = rbuf.as_mut().expect("idle connection holds its read block");
    let handshaking = tls.is_handshaking();
    let tls_fail = |e: rustls::Error| {
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
    };
    let mut counted = false;
    loop {
        let mut handshake_done = false;
        let UnbufferedStatus { mut discard, state } = tls.process_tls_records(&mut rbuf[*rlo..*rhi]);
        let state = match state {
            Ok(s) => s,
            Err(e) => {
                if handshaking && crate::control::tls::is_plain_http_answer(&e, &rbuf[*rlo..*rhi]) {
                    let why = crate::control::tls::plain_http_message(&url);
                    return Err(Fail::fatal(
                        Kind::Tls,
                        format!("TLS handshake with {}: {why}", url.host()),
                    ));
                }
                return Err(tls_fail(e));
            }
        };
        let next = match state {
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
                // With kTLS the request waits for the hand-off: the kernel encrypts it.
                if !pending_request.is_empty()
                    && !want_ktls
                    && let Some(mut w) = t.may_encrypt_app_data()
                {
                    encrypt(&mut w, pending_request, out)?;
                }
                t.done();
                Some(Pumped::Again)
            }
            ConnectionState::BlockedHandshake => Some(Pumped::NeedData),
            ConnectionState::WriteTraffic(mut w) => {
                handshake_done = true;
                if want_ktls {
                    // Hand off on a record boundary, with nothing of ours still to send.
                    if *rlo + discard == *rhi && out.is_empty() {
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
                    let rec = rec.map_err(tls_fail)?;
                    discard += rec.discard;
                    feed(rx, sh, rec.payload)?;
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
        *rlo += discard;
        if handshaking && !counted && !tls.is_handshaking() {
            counted = true;
            if tls.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                *sh.tls_resumed += 1;
            } else {
                *sh.tls_full += 1;
            }
        }
        if handshake_done && tls_info.is_none() {
            let v = tls.protocol_version().map(version_name).unwrap_or_default();
            let s = tls
                .negotiated_cipher_suite()
                .map(|s| format!("{:?}", s.suite()))
                .unwrap_or_default();
            *tls_info = Some(format!("{v} {s}"));
        }
        if let Some(p) = next {
            if matches!(p, Pumped::PeerClosed) {
                *clean_close = true;
            }
            return Ok(p);
        }
    }
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
