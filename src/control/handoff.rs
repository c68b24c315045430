//! A connection's TLS after the handshake: the software record layer (records opened and
//! sealed in place, control records routed), what the hand-off takes from rustls (its
//! traffic secrets) and a KeyUpdate under kTLS. The hand-off on the ring and RECVMSG of
//! non-data records are the loop's (src/event/handoff.rs).

use crate::control::ctx::Ctx;
use crate::control::response::feed;
use crate::control::*;
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

/// A connection's TLS after the hand-off to the software record layer: our records are
/// opened in place (`ktls::soft`), rustls keeps what post-handshake messages need.
pub(crate) struct SoftTls {
    opener: ktls::soft::RecordOpener,
    sealer: ktls::soft::RecordSealer,
    kconn: KernelConnection<ClientConnectionData>,
    /// Ciphertext received into the current write block and not yet opened:
    /// `block[src..hi]` (`src` at or after the block's fill). While a RECV into the block
    /// is out, `hi` is where that RECV started.
    pub(crate) cipher: Option<(usize, usize)>,
}

impl SoftTls {
    /// The record layer for a finished handshake of `version`, from rustls' traffic
    /// secrets: `tx` seals our records, `rx` opens the server's (each with its sequence
    /// number); `kconn` keeps what post-handshake messages need.
    ///
    /// # Errors
    /// A cipher suite `ktls::soft` does not implement, or a key of the wrong size.
    pub(crate) fn new(
        version: rustls::ProtocolVersion,
        (tx_seq, tx): Direction,
        (rx_seq, rx): Direction,
        kconn: KernelConnection<ClientConnectionData>,
    ) -> std::result::Result<SoftTls, ktls::Error> {
        Ok(SoftTls {
            opener: ktls::soft::RecordOpener::new(version, rx_seq, rx)?,
            sealer: ktls::soft::RecordSealer::new(version, tx_seq, tx)?,
            kconn,
            cipher: None,
        })
    }
}

/// What one record opened in a write block was, for [`soft_recv_done`].
enum Routed {
    Control,
    Closed,
    /// A KeyUpdate: the RX key is the next one. `answered`: the server asked for ours,
    /// which is sealed in `out` (send it) and our TX key is the next one too.
    Rekeyed {
        answered: bool,
    },
}

/// Routes a non-data record's content (tickets, KeyUpdate to rustls; close_notify; alerts).
fn route_control(soft: &mut SoftTls, out: &mut Vec<u8>, typ: u8, content: &[u8]) -> std::result::Result<Routed, Fail> {
    let tls_fail = |what: &str, e: &dyn std::fmt::Display| Fail::retry(Kind::Tls, format!("TLS {what}: {e}"));
    if typ == ktls::content_type::HANDSHAKE {
        let p = soft
            .opener
            .handshake(&mut soft.kconn, content)
            .map_err(|e| tls_fail("post-handshake message", &e))?;
        if p.key_update == Some(true) {
            // RFC 8446 §4.6.3: our KeyUpdate under the current key, then the next key.
            soft.sealer
                .seal(ktls::content_type::HANDSHAKE, &ktls::key_update_message(false), out)
                .map_err(|e| tls_fail("KeyUpdate", &e))?;
            let (seq, tx) = soft.kconn.update_tx_secret().map_err(|e| tls_fail("KeyUpdate", &e))?;
            soft.sealer.rekey(seq, tx).map_err(|e| tls_fail("KeyUpdate", &e))?;
        }
        return Ok(match p.key_update {
            Some(answered) => Routed::Rekeyed { answered },
            None => Routed::Control,
        });
    }
    match ktls::NonData::decode(typ, content) {
        Ok(rec) if rec.is_close_notify() => Ok(Routed::Closed),
        Ok(rec) => Err(Fail::retry(Kind::Tls, format!("TLS alert from the server: {rec:?}"))),
        Err(e) => Err(tls_fail("record", &e)),
    }
}

/// A RECV of ciphertext into the write block completed with `res`: opens every whole
/// record there in place, its content landing at the block's fill (the body's file
/// position), routes control records, and keeps a partial record in the block while the
/// block has room for more; a record that reaches the block's end, or anything after the
/// body, moves to the read block (the only bytes copied).
///
/// # Errors
/// As [`pump_soft`], and the RECV's own error.
pub(crate) fn soft_recv_done(
    c: &mut Conn,
    sh: &mut Ctx<'_>,
    buf: uring::Buf,
    res: i32,
) -> std::result::Result<(), Fail> {
    let Conn {
        soft,
        rbuf,
        rlo,
        rhi,
        out,
        rx,
        clean_close,
        eof,
        ..
    } = c;
    let soft = soft.as_mut().expect("a soft-TLS connection");
    let (mut src, hi) = soft.cipher.take().expect("a RECV into the block was out");
    let n = if res > 0 { res as usize } else { 0 };
    let end = hi + n;
    let (mut fail, mut rekeys) = (None, 0);
    let rbuf = rbuf
        .as_mut()
        .expect("the read block stays while a RECV into the write block is out");
    crate::control::body::with_placer(rx, sh, |p, blocks| {
        p.cipher_returned(buf);
        let mut closed = false;
        while !p.is_done() && src < end {
            let Some((block, fill)) = p.block_mut() else { break };
            let o = match soft.opener.open(&mut block[..end], src, fill) {
                Ok(Some(o)) => o,
                Ok(None) => break,
                Err(e) => {
                    fail = Some(Fail::retry(Kind::Tls, format!("TLS record: {e}")));
                    return Ok(crate::engine::place::Fed::More);
                }
            };
            src += o.wire;
            if o.typ == ktls::content_type::APPLICATION_DATA {
                p.landed(o.len);
                continue;
            }
            let content = block[fill..fill + o.len].to_vec();
            match route_control(soft, out, o.typ, &content) {
                Ok(Routed::Closed) => {
                    *clean_close = true;
                    *eof = true;
                    closed = true;
                    break;
                }
                Ok(Routed::Rekeyed { .. }) => rekeys += 1,
                Ok(Routed::Control) => {}
                Err(f) => {
                    fail = Some(f);
                    return Ok(crate::engine::place::Fed::More);
                }
            }
        }
        let body_on = !p.is_done() && !closed;
        let cut_short = p.is_done() && p.overrun();
        if src < end
            && let Some((block, _)) = p.block_mut()
        {
            if body_on && end < block.len() {
                soft.cipher = Some((src, end));
            } else if !cut_short {
                // (A body cut short by work stealing leaves the rest of its response
                // unread: the connection closes, nothing after it matters.)
                let k = end - src;
                if k > rbuf.len() {
                    fail = Some(Fail::retry(
                        Kind::Protocol,
                        "more TLS records after the body than the read block holds",
                    ));
                    return Ok(crate::engine::place::Fed::More);
                }
                rbuf[..k].copy_from_slice(&block[src..end]);
                (*rlo, *rhi) = (0, k);
            }
        }
        if n == 0 {
            Ok(crate::engine::place::Fed::More)
        } else {
            p.settle(blocks)
        }
    })?;
    *sh.soft_rekeys += rekeys;
    if let Some(f) = fail {
        return Err(f);
    }
    if res == 0 {
        *eof = true;
    }
    Ok(())
}

/// Runs the software record layer over the buffered ciphertext `rbuf[rlo..rhi]`: seals a
/// waiting request, opens each whole record in place (no shift: its content stays where
/// its ciphertext was) and gives application data to the receive side; tickets and
/// KeyUpdate go to rustls, close_notify ends the stream.
///
/// # Errors
/// A record that fails (authentication, size, type), an alert, a post-handshake message
/// rustls refuses: the connection cannot go on, the segment is retried elsewhere.
pub(crate) fn pump_soft(c: &mut Conn, sh: &mut Ctx<'_>) -> std::result::Result<Pumped, Fail> {
    let Conn {
        soft,
        rbuf,
        rlo,
        rhi,
        out,
        pending_request,
        rx,
        clean_close,
        ..
    } = c;
    let soft = soft.as_mut().expect("pump_soft on a soft-TLS connection");
    let tls_fail = |what: &str, e: &dyn std::fmt::Display| Fail::retry(Kind::Tls, format!("TLS {what}: {e}"));
    if !pending_request.is_empty() {
        soft.sealer
            .seal(ktls::content_type::APPLICATION_DATA, pending_request, out)
            .map_err(|e| tls_fail("request", &e))?;
        pending_request.clear();
        return Ok(Pumped::Again);
    }
    let rbuf = rbuf.as_mut().expect("idle connection holds its read block");
    loop {
        let dst = *rlo + soft.opener.prefix_len();
        let Some(o) = soft
            .opener
            .open(&mut rbuf[..*rhi], *rlo, dst)
            .map_err(|e| tls_fail("record", &e))?
        else {
            return Ok(Pumped::NeedData);
        };
        *rlo += o.wire;
        let content = dst..dst + o.len;
        match o.typ {
            ktls::content_type::APPLICATION_DATA => {
                feed(rx, sh, &rbuf[content])?;
                if rx.job.as_ref().is_some_and(|j| j.placer.has_spill()) {
                    return Ok(Pumped::Blocked);
                }
            }
            typ => {
                let content = rbuf[content].to_vec();
                match route_control(soft, out, typ, &content)? {
                    Routed::Control => {}
                    Routed::Rekeyed { answered } => {
                        *sh.soft_rekeys += 1;
                        if answered {
                            return Ok(Pumped::Again);
                        }
                    }
                    Routed::Closed => {
                        *clean_close = true;
                        return Ok(Pumped::PeerClosed);
                    }
                }
            }
        }
    }
}

/// One direction's sequence number and traffic secrets.
pub(crate) type Direction = (u64, rustls::ConnectionTrafficSecrets);

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
