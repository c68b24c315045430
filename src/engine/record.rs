//! The software record layer's receive path ([`SoftTls`]): the server's TLS records opened
//! in place (`ktls::soft`), in the write block a RECV filled (each record's plaintext
//! shifted left to its file position: no compaction copy) or in the read block, and the
//! non-data records routed (tickets and KeyUpdate to rustls, close_notify, alerts). Our
//! records are sealed here too.
//!
//! A received byte under it: RECV of ciphertext into the write block
//! ([`super::receive`]) → [`SoftTls::open_in_block`] opens every whole record there and
//! lands its plaintext ([`Placer::landed`]) → the block fills and joins the write queue.
//! A record cut by the block's end moves to the read block, where
//! [`SoftTls::open_next`] opens it and the caller places its content.

use std::ops::Range;

use rustls::client::ClientConnectionData;
use rustls::kernel::KernelConnection;

use super::place::{Blocks, Fed, PlaceError, Placer};
use crate::err;
use crate::error::Error;

/// A connection's TLS after the hand-off to the software record layer: the server's
/// records are opened in place (`ktls::soft`), ours sealed; rustls keeps what
/// post-handshake messages need.
pub(crate) struct SoftTls {
    opener: ktls::soft::RecordOpener,
    sealer: ktls::soft::RecordSealer,
    kconn: KernelConnection<ClientConnectionData>,
    /// Ciphertext received into the current write block and not yet opened:
    /// `block[src..hi]` (`src` at or after the block's fill). While a RECV into the block
    /// is out, `hi` is where that RECV started.
    pub(crate) cipher: Option<(usize, usize)>,
}

/// One direction's sequence number and traffic secret.
pub(crate) type Direction = (u64, rustls::ConnectionTrafficSecrets);

/// What one record opened was, apart from its content.
pub(crate) enum Opened {
    /// Application data: its plaintext is at this range of the buffer it was opened in.
    Data(Range<usize>),
    /// A post-handshake message rustls took (a ticket).
    Control,
    /// A KeyUpdate: the RX key is the next one. `answered`: the server asked for ours,
    /// which is sealed onto the caller's output (send it), and our TX key is the next one
    /// too.
    Rekeyed { answered: bool },
    /// close_notify.
    Closed,
}

/// What [`SoftTls::open_in_block`] did to a write block.
pub(crate) struct BlockOpened {
    /// What placing the opened plaintext said (`Ok(Fed::More)` when `failed`).
    pub(crate) fed: Result<Fed, PlaceError>,
    /// KeyUpdates taken.
    pub(crate) rekeys: usize,
    /// close_notify came: the stream ends cleanly.
    pub(crate) closed: bool,
    /// A record that failed, or a control record the connection cannot go on after: a
    /// `Tls` or `Protocol` error, the segment is retried elsewhere.
    pub(crate) failed: Option<Error>,
    /// Bytes after the last whole record moved to the read block's start (a record cut by
    /// the block's end, or what came after the body).
    pub(crate) carried: Option<usize>,
}

/// A TLS failure of `what`: a `Tls` error.
fn tls_error(what: &str, e: &dyn std::fmt::Display) -> Error {
    err!(Tls, "TLS {what}: {e}")
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
    ) -> Result<SoftTls, ktls::Error> {
        Ok(SoftTls {
            opener: ktls::soft::RecordOpener::new(version, rx_seq, rx)?,
            sealer: ktls::soft::RecordSealer::new(version, tx_seq, tx)?,
            kconn,
            cipher: None,
        })
    }

    /// Seals `plain` (a request) as application data onto `out`.
    ///
    /// # Errors
    /// A `Tls` error from the sealer.
    pub(crate) fn seal_request(&mut self, plain: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        self.sealer
            .seal(ktls::content_type::APPLICATION_DATA, plain, out)
            .map_err(|e| tls_error("request", &e))
    }

    /// Routes a non-data record's content (tickets, KeyUpdate to rustls; close_notify;
    /// alerts); our KeyUpdate, when the server asks for it, is sealed onto `out`.
    fn route(&mut self, out: &mut Vec<u8>, typ: u8, content: &[u8]) -> Result<Opened, Error> {
        if typ == ktls::content_type::HANDSHAKE {
            let p = self
                .opener
                .handshake(&mut self.kconn, content)
                .map_err(|e| tls_error("post-handshake message", &e))?;
            if p.key_update == Some(true) {
                // RFC 8446 §4.6.3: our KeyUpdate under the current key, then the next key.
                self.sealer
                    .seal(ktls::content_type::HANDSHAKE, &ktls::key_update_message(false), out)
                    .map_err(|e| tls_error("KeyUpdate", &e))?;
                let (seq, tx) = self.kconn.update_tx_secret().map_err(|e| tls_error("KeyUpdate", &e))?;
                self.sealer.rekey(seq, tx).map_err(|e| tls_error("KeyUpdate", &e))?;
            }
            return Ok(match p.key_update {
                Some(answered) => Opened::Rekeyed { answered },
                None => Opened::Control,
            });
        }
        match ktls::NonData::decode(typ, content) {
            Ok(rec) if rec.is_close_notify() => Ok(Opened::Closed),
            Ok(rec) => Err(err!(Tls, "TLS alert from the server: {rec:?}")),
            Err(e) => Err(tls_error("record", &e)),
        }
    }

    /// Opens the next whole record of the buffered ciphertext `read[*lo..hi]` in place
    /// (no shift: its content stays where its ciphertext was) and moves `lo` past it;
    /// routes a non-data record (a KeyUpdate answer sealed onto `out`). `None`: no whole
    /// record is buffered.
    ///
    /// # Errors
    /// A record that fails (authentication, size, type), an alert, a post-handshake
    /// message rustls refuses: a `Tls` error, the connection cannot go on.
    pub(crate) fn open_next(
        &mut self,
        read: &mut [u8],
        lo: &mut usize,
        hi: usize,
        out: &mut Vec<u8>,
    ) -> Result<Option<Opened>, Error> {
        let dst = *lo + self.opener.prefix_len();
        let Some(o) = self
            .opener
            .open(&mut read[..hi], *lo, dst)
            .map_err(|e| tls_error("record", &e))?
        else {
            return Ok(None);
        };
        *lo += o.wire;
        let content = dst..dst + o.len;
        if o.typ == ktls::content_type::APPLICATION_DATA {
            return Ok(Some(Opened::Data(content)));
        }
        let content = read[content].to_vec();
        self.route(out, o.typ, &content).map(Some)
    }

    /// A RECV of `n` bytes of ciphertext into the write block `buf` (given back to
    /// `placer`) completed (`n` is 0 at the end of the stream or on an error): opens every
    /// whole record there in place, its content landing at the block's fill (the body's
    /// file position), routes control records (a KeyUpdate answer sealed onto `out`), and
    /// keeps a partial record in the block while the block has room for more; a record
    /// that reaches the block's end, or anything after the body, moves to `read` (the
    /// read block: the only bytes copied).
    pub(crate) fn open_in_block(
        &mut self,
        placer: &mut Placer,
        blocks: &mut Blocks<'_>,
        buf: uring::Buf,
        n: usize,
        read: &mut [u8],
        out: &mut Vec<u8>,
    ) -> BlockOpened {
        let (mut src, hi) = self.cipher.take().expect("a RECV into the block was out");
        let end = hi + n;
        let mut done = BlockOpened {
            fed: Ok(Fed::More),
            rekeys: 0,
            closed: false,
            failed: None,
            carried: None,
        };
        placer.cipher_returned(buf);
        if let Err(e) = self.open_records(placer, &mut src, end, out, &mut done) {
            done.failed = Some(e);
            return done;
        }
        let body_on = !placer.is_done() && !done.closed;
        let cut_short = placer.is_done() && placer.overrun();
        if src < end
            && let Some((block, _)) = placer.block_mut()
        {
            if body_on && end < block.len() {
                self.cipher = Some((src, end));
            } else if !cut_short {
                // (A body cut short by work stealing leaves the rest of its response
                // unread: the connection closes, nothing after it matters.)
                let k = end - src;
                if k > read.len() {
                    done.failed = Some(err!(
                        Protocol,
                        "more TLS records after the body than the read block holds"
                    ));
                    return done;
                }
                read[..k].copy_from_slice(&block[src..end]);
                done.carried = Some(k);
            }
        }
        if n > 0 {
            done.fed = placer.settle(blocks);
        }
        done
    }

    /// Opens the whole records of `block[*src..end]` in place while the body goes on,
    /// landing application data and routing the rest (counted in `done`).
    fn open_records(
        &mut self,
        placer: &mut Placer,
        src: &mut usize,
        end: usize,
        out: &mut Vec<u8>,
        done: &mut BlockOpened,
    ) -> Result<(), Error> {
        while !placer.is_done() && *src < end {
            let Some((block, fill)) = placer.block_mut() else { break };
            let Some(o) = self
                .opener
                .open(&mut block[..end], *src, fill)
                .map_err(|e| err!(Tls, "TLS record: {e}"))?
            else {
                break;
            };
            *src += o.wire;
            if o.typ == ktls::content_type::APPLICATION_DATA {
                placer.landed(o.len);
                continue;
            }
            let content = block[fill..fill + o.len].to_vec();
            match self.route(out, o.typ, &content)? {
                Opened::Closed => {
                    done.closed = true;
                    break;
                }
                Opened::Rekeyed { .. } => done.rekeys += 1,
                Opened::Control | Opened::Data(_) => {}
            }
        }
        Ok(())
    }
}
