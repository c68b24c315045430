//! A connection's TLS after the handshake: what the hand-off takes from rustls (its
//! traffic secrets), a KeyUpdate under kTLS, and the software record layer driven over the
//! read block (the records are opened by [`crate::engine::record`]). The hand-off on the
//! ring and RECVMSG of non-data records are the loop's (src/event/handoff.rs).

use std::os::fd::OwnedFd;

use rustls::client::ClientConnectionData;
use rustls::kernel::KernelConnection;

use crate::control::ctx::Ctx;
use crate::control::response::feed;
use crate::control::{Conn, Fail, Pumped};
use crate::engine::record::{Direction, Opened};
use crate::error::Kind;

/// A TLS 1.3 KeyUpdate under kTLS (RFC 8446 §4.6.3), `body` its one-byte
/// `request_update`: installs the server's next traffic key for RX (sequence 0) and, when
/// the server asked (`update_requested`), sends our own KeyUpdate under the old TX key and
/// installs our next TX key. Returns whether TX was rekeyed too. Linux 6.14+: an older
/// kernel refuses the second `TLS_RX` with EBUSY, which is how this finds out (tried, not
/// looked up by version: distributions backport).
///
/// # Errors
/// Why the connection cannot go on (the caller retries on a new connection): a malformed
/// KeyUpdate, TLS 1.2, a kernel without rekey, a failed send.
pub(crate) fn ktls_rekey(
    fd: &OwnedFd,
    kconn: &mut KernelConnection<ClientConnectionData>,
    body: &[u8],
) -> std::result::Result<bool, String> {
    use std::os::fd::AsFd;
    let update_requested = match body {
        [0] => false,
        [1] => true,
        _ => return Err(format!("a malformed KeyUpdate ({} bytes)", body.len())),
    };
    let version = kconn.protocol_version();
    let (seq, rx) = kconn.update_rx_secret().map_err(|e| format!("rustls: {e}"))?;
    // (TLS_RX_EXPECT_NO_PAD belongs to the socket, not the key: it stays set.)
    ktls::install_rx(fd.as_fd(), version, seq, rx).map_err(|e| e.to_string())?;
    if !update_requested {
        return Ok(false);
    }
    ktls::send_key_update(fd.as_fd(), false).map_err(|e| e.to_string())?;
    let (seq, tx) = kconn.update_tx_secret().map_err(|e| format!("rustls: {e}"))?;
    ktls::install_tx(fd.as_fd(), version, seq, tx).map_err(|e| e.to_string())?;
    Ok(true)
}

/// Whether the software record layer takes over TLS after the handshake where kTLS does
/// not: yes unless `RINGDL_SOFT_TLS=0` (read once; a knob for benchmarks and for ruling
/// the layer out when a server misbehaves: rustls then decrypts, copying).
pub(crate) fn soft_tls_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("RINGDL_SOFT_TLS").is_none_or(|v| v != "0"))
}

/// Runs the software record layer over the buffered ciphertext `rbuf[input_start..input_end]`: seals a
/// waiting request, has the layer open each whole record in place
/// ([`crate::engine::record::SoftTls::open_next`]) and gives application data to the receive side; tickets and
/// KeyUpdate go to rustls, close_notify ends the stream.
///
/// # Errors
/// A record that fails (authentication, size, type), an alert, a post-handshake message
/// rustls refuses: the connection cannot go on, the segment is retried elsewhere.
pub(crate) fn pump_soft(c: &mut Conn, shared: &mut Ctx<'_>) -> std::result::Result<Pumped, Fail> {
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
    let soft = tls.soft_mut().expect("pump_soft on a soft-TLS connection");
    let retry = |e: crate::error::Error| Fail::retry(e.kind, e.msg);
    if !pending_request.is_empty() {
        soft.seal_request(pending_request, out).map_err(retry)?;
        pending_request.clear();
        return Ok(Pumped::Again);
    }
    let rbuf = rbuf.as_mut().expect("idle connection holds its read block");
    loop {
        let Some(opened) = soft.open_next(rbuf, input_start, *input_end, out).map_err(retry)? else {
            return Ok(Pumped::NeedData);
        };
        match opened {
            Opened::Data(content) => {
                feed(rx, shared, &rbuf[content])?;
                if rx.job.as_ref().is_some_and(|j| j.placer.has_spill()) {
                    return Ok(Pumped::Blocked);
                }
            }
            Opened::Control => {}
            Opened::Rekeyed { answered } => {
                *shared.soft_rekeys += 1;
                if answered {
                    return Ok(Pumped::Again);
                }
            }
            Opened::Closed => {
                *clean_close = true;
                return Ok(Pumped::PeerClosed);
            }
        }
    }
}

/// rustls' traffic secrets after a finished handshake (TX, RX) and the connection state
/// that handles post-handshake messages from then on; `what` names the hand-off in errors.
pub(crate) fn into_secrets(
    tls: Box<rustls::client::UnbufferedClientConnection>,
    what: &str,
) -> std::result::Result<
    (
        rustls::ProtocolVersion,
        Direction,
        Direction,
        KernelConnection<ClientConnectionData>,
    ),
    Fail,
> {
    let version = tls.protocol_version().expect("a finished handshake has a version");
    let (secrets, kconn) = (*tls)
        .dangerous_into_kernel_connection()
        .map_err(|e| Fail::retry(Kind::Tls, format!("{what}: {e}")))?;
    Ok((version, secrets.tx, secrets.rx, kconn))
}
