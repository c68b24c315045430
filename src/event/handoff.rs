//! The kTLS hand-off on the ring: rustls' secrets to the kernel (TLS_TX/TLS_RX) or to the
//! software record layer, and non-data records read with RECVMSG under kTLS (alerts,
//! NewSessionTicket, KeyUpdate).

use std::os::fd::AsRawFd;
use std::time::Instant;

use rustls::client::UnbufferedClientConnection;
use uring::Op;

use crate::control::handoff::{into_secrets, ktls_rekey};
use crate::control::{Fail, InFlight, Tls};
use crate::engine::record::SoftTls;
use crate::error::Kind;
use crate::event::Loop;
use crate::report::Note;
use crate::tag::Tag;

/// Takes connection TLS `tls`'s rustls session for the hand-off (leaving no TLS until
/// the hand-off sets the next mode).
fn take_session(tls: &mut Tls) -> Box<UnbufferedClientConnection> {
    match std::mem::replace(tls, Tls::Off) {
        Tls::Rustls(session) => session,
        _ => unreachable!("hand-off of a rustls connection"),
    }
}

impl Loop<'_> {
    /// Keeps connection `i` in rustls (same bytes, with its copies): `note` says why under
    /// `-v`, `why` goes to the summary.
    fn stay_in_rustls(&mut self, i: usize, tls: Box<UnbufferedClientConnection>, note: Note, why: String) {
        self.shared.report.note(note);
        self.shared.ktls_refused.get_or_insert(why);
        self.conns[i].tls = Tls::RustlsKept(tls);
    }

    /// Hands connection `i`'s TLS to the software record layer: rustls' secrets go to
    /// `ktls::soft`, which opens the server's records in place and seals our requests. An
    /// unsupported suite keeps the connection in rustls (same bytes).
    fn hand_off_soft(&mut self, i: usize) -> std::result::Result<(), Fail> {
        let tls = take_session(&mut self.conns[i].tls);
        match tls.negotiated_cipher_suite() {
            Some(suite) if ktls::offloadable(suite) => {}
            other => {
                let why = match other {
                    Some(s) => format!("cipher suite {:?} is not supported by the record layer", s.suite()),
                    None => "no cipher suite".into(),
                };
                let note = Note::SoftRefused {
                    conn: i,
                    why: why.clone(),
                };
                self.stay_in_rustls(i, tls, note, why);
                return Ok(());
            }
        }
        let (version, tx, rx, kconn) = into_secrets(tls, "TLS hand-off")?;
        let soft =
            SoftTls::new(version, tx, rx, kconn).map_err(|e| Fail::retry(Kind::Tls, format!("TLS hand-off: {e}")))?;
        self.conns[i].tls = Tls::Soft(Box::new(soft));
        self.shared.soft_conns += 1;
        self.shared.report.note(Note::SoftOn { conn: i });
        Ok(())
    }

    /// Installs kernel TLS on connection `i` (TX and RX) from rustls' secrets; from here on
    /// the socket carries plaintext. A refusal before the secrets are taken keeps the
    /// connection in user-space TLS (same bytes, engine direct for it). Without kTLS
    /// the software record layer takes the secrets instead (unless `RINGDL_SOFT_TLS=0`).
    pub(crate) fn hand_off(&mut self, i: usize) -> std::result::Result<(), Fail> {
        use std::os::fd::AsFd;
        self.shared.tls_conns += 1;
        if !self.shared.ktls {
            return self.hand_off_soft(i);
        }
        let c = &mut self.conns[i];
        let tls = take_session(&mut c.tls);
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
            let note = Note::KtlsRefused {
                conn: i,
                why: why.clone(),
            };
            self.stay_in_rustls(i, tls, note, why);
            return Ok(());
        }
        let (version, (tx_seq, tx), (rx_seq, rx), kconn) = into_secrets(tls, "kTLS hand-off")?;
        let c = &mut self.conns[i];
        let fd = c.fd.as_ref().expect("open connection has a socket");
        ktls::install_tx(fd.as_fd(), version, tx_seq, tx)
            .map_err(|e| Fail::retry(Kind::Tls, format!("kTLS TX: {e}")))?;
        ktls::install_rx(fd.as_fd(), version, rx_seq, rx)
            .map_err(|e| Fail::retry(Kind::Tls, format!("kTLS RX: {e}")))?;
        if version == rustls::ProtocolVersion::TLSv1_3 {
            // Linux 6.0+: decrypt whole records straight into our buffer; older kernels say no.
            let _ = ktls::set_rx_expect_no_pad(fd.as_fd());
        }
        c.tls = Tls::Kernel(Box::new(kconn));
        c.out = std::mem::take(&mut c.pending_request);
        self.shared.ktls_conns += 1;
        self.shared.report.note(Note::KtlsOn { conn: i });
        Ok(())
    }

    /// Reads the non-data TLS record at the head of a kTLS socket (RECV said EIO, SPLICE
    /// said EINVAL): RECVMSG with room for the TLS_GET_RECORD_TYPE control message.
    pub(crate) fn read_record(&mut self, i: usize) -> std::result::Result<(), Fail> {
        let c = &mut self.conns[i];
        let fd = c.fd.as_ref().expect("open connection has a socket").as_raw_fd();
        let mut rbuf = c.rbuf.take().expect("idle connection holds its read block");
        if c.input_start == c.input_end {
            c.input_start = 0;
            c.input_end = 0;
        } else if c.input_start > 0 {
            rbuf.copy_within(c.input_start..c.input_end, 0);
            c.input_end -= c.input_start;
            c.input_start = 0;
        }
        let range = c.input_end..rbuf.len();
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
            c.input_end += n;
            return Ok(());
        }
        let rbuf = c.rbuf.as_ref().expect("read block back");
        let payload = rbuf[c.input_end..c.input_end + n].to_vec();
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
                            let res = c.tls.kernel_mut().map(|k| k.handle_new_session_ticket(m.body));
                            self.shared.report.note(Note::Ticket {
                                conn: i,
                                ignored: res.and_then(|r| r.err()).map(|e| e.to_string()),
                            });
                        }
                        // Linux 6.14+ takes the next keys in place; before, a new connection
                        // carries the rest of the segment.
                        ktls::handshake_type::KEY_UPDATE => {
                            let fd = c.fd.as_ref().expect("open connection has a socket");
                            let kconn = c.tls.kernel_mut().expect("a kTLS record comes from a kTLS connection");
                            match ktls_rekey(fd, kconn, m.body) {
                                Ok(tx) => {
                                    self.shared.ktls_rekeys += 1;
                                    self.shared.report.note(Note::Rekeyed { conn: i, tx });
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
