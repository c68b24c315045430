//! The kTLS hand-off (TLS_TX/TLS_RX from rustls' secrets) and non-data records read with
//! RECVMSG (alerts, NewSessionTicket, KeyUpdate).

use crate::control::*;
use crate::error::Kind;
use crate::event::*;
use crate::report::Note;
use crate::tag::Tag;
use std::os::fd::AsRawFd;
use std::time::Instant;
use uring::Op;

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
fn ktls_rekey(
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

impl Loop<'_> {
    /// Installs kernel TLS on connection `i` (TX and RX) from rustls' secrets; from here on
    /// the socket carries plaintext. A refusal before the secrets are taken keeps the
    /// connection in user-space TLS (same bytes, engine direct for it).
    pub(crate) fn hand_off(&mut self, i: usize) -> std::result::Result<(), Fail> {
        use std::os::fd::AsFd;
        let c = &mut self.conns[i];
        let tls = c.tls.take().expect("hand-off of a TLS connection");
        let fd = c.fd.as_ref().expect("open connection has a socket");
        let refuse = |why: String| why;
        let refused = match tls.negotiated_cipher_suite() {
            Some(suite) if !ktls::offloadable(suite) => {
                Some(refuse(format!("cipher suite {:?} is not offloadable", suite.suite())))
            }
            None => Some(refuse("no cipher suite".into())),
            Some(_) => ktls::install_ulp(fd.as_fd()).err().map(|e| format!("{e}")),
        };
        if let Some(why) = refused {
            self.sh.report.note(Note::KtlsRefused {
                conn: i,
                why: why.clone(),
            });
            self.sh.ktls_refused.get_or_insert(why);
            c.tls = Some(tls);
            c.no_ktls = true;
            return Ok(());
        }
        let version = tls.protocol_version().expect("a finished handshake has a version");
        let (secrets, kconn) = (*tls)
            .dangerous_into_kernel_connection()
            .map_err(|e| Fail::retry(Kind::Tls, format!("kTLS hand-off: {e}")))?;
        let (tx_seq, tx) = secrets.tx;
        let (rx_seq, rx) = secrets.rx;
        ktls::install_tx(fd.as_fd(), version, tx_seq, tx)
            .map_err(|e| Fail::retry(Kind::Tls, format!("kTLS TX: {e}")))?;
        ktls::install_rx(fd.as_fd(), version, rx_seq, rx)
            .map_err(|e| Fail::retry(Kind::Tls, format!("kTLS RX: {e}")))?;
        if version == rustls::ProtocolVersion::TLSv1_3 {
            // Linux 6.0+: decrypt whole records straight into our buffer; older kernels say no.
            let _ = ktls::set_rx_expect_no_pad(fd.as_fd());
        }
        c.kconn = Some(kconn);
        c.out = std::mem::take(&mut c.pending_request);
        self.sh.ktls_conns += 1;
        self.sh.report.note(Note::KtlsOn { conn: i });
        Ok(())
    }

    /// Reads the non-data TLS record at the head of a kTLS socket (RECV said EIO, SPLICE
    /// said EINVAL): RECVMSG with room for the TLS_GET_RECORD_TYPE control message.
    pub(crate) fn read_record(&mut self, i: usize) -> std::result::Result<(), Fail> {
        let c = &mut self.conns[i];
        let fd = c.fd.as_ref().expect("open connection has a socket").as_raw_fd();
        let mut rbuf = c.rbuf.take().expect("idle connection holds its read block");
        if c.rlo == c.rhi {
            c.rlo = 0;
            c.rhi = 0;
        } else if c.rlo > 0 {
            rbuf.copy_within(c.rlo..c.rhi, 0);
            c.rhi -= c.rlo;
            c.rlo = 0;
        }
        let range = c.rhi..rbuf.len();
        c.op = InFlight::RecvMsg;
        c.last_io = Instant::now();
        let op = Op::RecvMsg {
            fd,
            buf: rbuf,
            range,
            control_len: ktls::CMSG_SPACE_RECORD_TYPE,
            flags: 0,
        };
        self.ring
            .push(op, Tag::Conn(i).encode())
            .map_err(|_| Fail::fatal(Kind::Internal, "submission queue full"))
    }

    /// A RECVMSG under kTLS completed: application data joins the read block; an alert or
    /// handshake record is handled here.
    pub(crate) fn record_completion(&mut self, i: usize, res: i32, control: Vec<u8>) -> std::result::Result<(), Fail> {
        let c = &mut self.conns[i];
        if res < 0 {
            return Err(self.io_fail(i, "recvmsg", res));
        }
        if res == 0 {
            c.eof = true;
            return Ok(());
        }
        let n = res as usize;
        let Some(typ) = ktls::record_type(&control) else {
            return Err(Fail::retry(Kind::Tls, "kTLS RECVMSG returned no record type"));
        };
        if typ == ktls::content_type::APPLICATION_DATA {
            c.rhi += n;
            return Ok(());
        }
        let rbuf = c.rbuf.as_ref().expect("read block back");
        let payload = rbuf[c.rhi..c.rhi + n].to_vec();
        match ktls::NonData::decode(typ, &payload) {
            Ok(rec) if rec.is_close_notify() => {
                c.eof = true;
                c.clean_close = true;
                Ok(())
            }
            Ok(ktls::NonData::Alert { level, description }) => Err(Fail::retry(
                Kind::Tls,
                format!("TLS alert from the server (level {level}, description {description})"),
            )),
            Ok(ktls::NonData::Handshake(bytes)) => {
                for m in ktls::handshake_messages(&bytes) {
                    let m =
                        m.map_err(|_| Fail::retry(Kind::Tls, "a handshake message split across records under kTLS"))?;
                    match m.typ {
                        ktls::handshake_type::NEW_SESSION_TICKET => {
                            let res = c.kconn.as_mut().map(|k| k.handle_new_session_ticket(m.body));
                            self.sh.report.note(Note::Ticket {
                                conn: i,
                                ignored: res.and_then(|r| r.err()).map(|e| e.to_string()),
                            });
                        }
                        // Linux 6.14+ takes the next keys in place; before, a new connection
                        // carries the rest of the segment.
                        ktls::handshake_type::KEY_UPDATE => {
                            let fd = c.fd.as_ref().expect("open connection has a socket");
                            let kconn = c.kconn.as_mut().expect("a kTLS record comes from a kTLS connection");
                            match ktls_rekey(fd, kconn, m.body) {
                                Ok(tx) => {
                                    self.sh.ktls_rekeys += 1;
                                    self.sh.report.note(Note::Rekeyed { conn: i, tx });
                                }
                                Err(why) => {
                                    return Err(Fail::retry(
                                        Kind::Network,
                                        format!(
                                            "the server updated its TLS keys (KeyUpdate) and kTLS cannot take \
                                             them in place ({why}): continuing on a new connection"
                                        ),
                                    ));
                                }
                            }
                        }
                        t => {
                            return Err(Fail::retry(
                                Kind::Tls,
                                format!("unexpected TLS handshake message {t} after the handshake"),
                            ));
                        }
                    }
                }
                Ok(())
            }
            Err(e) => Err(Fail::retry(Kind::Tls, format!("kTLS record: {e}"))),
        }
    }
}
