//! The software record layer against rustls itself: a real in-memory handshake (an
//! unbuffered client, as ringdl's, and a buffered server), the client's secrets taken with
//! `dangerous_into_kernel_connection`, then the server's records opened in place here and
//! our records accepted by the server.

use std::io::{Read, Write};

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::crypto::ring::cipher_suite as cs;
use rustls::kernel::KernelConnection;
use rustls::pki_types::ServerName;
use rustls::unbuffered::{ConnectionState, UnbufferedStatus};
use rustls::{ProtocolVersion, ServerConnection, SupportedCipherSuite};

use super::*;
use crate::kernel_emulation::configs;
use crate::record::NonData;

const SUITES: [SupportedCipherSuite; 6] = [
    cs::TLS13_AES_128_GCM_SHA256,
    cs::TLS13_AES_256_GCM_SHA384,
    cs::TLS13_CHACHA20_POLY1305_SHA256,
    cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
];

/// The server side after the handshake, and the client's hand-off.
struct Handed {
    server: ServerConnection,
    version: ProtocolVersion,
    opener: RecordOpener,
    sealer: RecordSealer,
    kconn: KernelConnection<ClientConnectionData>,
    /// What the server sent that the client has not processed (TLS 1.3: its tickets).
    wire: Vec<u8>,
}

fn feed(server: &mut ServerConnection, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        server.read_tls(&mut bytes).unwrap();
        server.process_new_packets().unwrap();
    }
}

fn drain(server: &mut ServerConnection, out: &mut Vec<u8>) {
    while server.wants_write() {
        server.write_tls(out).unwrap();
    }
}

fn handshake(suite: SupportedCipherSuite) -> Handed {
    handshake_with(suite, None)
}

/// [`handshake`] with the server's records cut at `max_fragment_size` bytes.
fn handshake_with(suite: SupportedCipherSuite, max_fragment_size: Option<usize>) -> Handed {
    let (cc, sc) = configs(suite);
    let mut sc = (*sc).clone();
    sc.max_fragment_size = max_fragment_size;
    let sc = std::sync::Arc::new(sc);
    let mut client = UnbufferedClientConnection::new(cc, ServerName::try_from("localhost").unwrap()).unwrap();
    let mut server = ServerConnection::new(sc).unwrap();
    let mut incoming = Vec::new();
    let mut to_server = Vec::new();
    loop {
        let mut answer = Vec::new();
        let UnbufferedStatus { discard, state } = client.process_tls_records(&mut incoming);
        let done = match state.unwrap() {
            ConnectionState::EncodeTlsData(mut s) => {
                let mut buf = vec![0; 1 << 16];
                let n = s.encode(&mut buf).unwrap();
                to_server.extend_from_slice(&buf[..n]);
                false
            }
            ConnectionState::TransmitTlsData(s) => {
                s.done();
                false
            }
            ConnectionState::BlockedHandshake => {
                feed(&mut server, &to_server);
                to_server.clear();
                drain(&mut server, &mut answer);
                assert!(!answer.is_empty(), "handshake stalled");
                false
            }
            ConnectionState::WriteTraffic(_) => true,
            _ => panic!("unexpected client state during the handshake"),
        };
        incoming.drain(..discard);
        incoming.extend(answer);
        if done {
            break;
        }
    }
    // The client's Finished; a TLS 1.3 server answers with its tickets.
    feed(&mut server, &to_server);
    drain(&mut server, &mut incoming);
    let version = client.protocol_version().unwrap();
    let (secrets, kconn) = client.dangerous_into_kernel_connection().unwrap();
    let (rx_seq, rx) = secrets.rx;
    let (tx_seq, tx) = secrets.tx;
    Handed {
        server,
        version,
        opener: RecordOpener::new(version, rx_seq, rx).unwrap(),
        sealer: RecordSealer::new(version, tx_seq, tx).unwrap(),
        kconn,
        wire: incoming,
    }
}

/// What a receive loop reports.
#[derive(Debug, Default, PartialEq, Eq)]
struct Received {
    tickets: usize,
    key_updates: usize,
    close_notify: bool,
}

/// Opens every record of `buf` in place, application data landing contiguously from
/// offset 0 (the write block), control records routed as the engine would. Returns the
/// landed length.
fn receive(h: &mut Handed, buf: &mut [u8], got: &mut Received) -> Result<usize, String> {
    let (mut src, mut landed) = (0, 0);
    while src < buf.len() {
        let o = h
            .opener
            .open(buf, src, landed)
            .map_err(|e| e.to_string())?
            .ok_or("truncated record")?;
        src += o.wire;
        match o.typ {
            content_type::APPLICATION_DATA => landed += o.len,
            content_type::HANDSHAKE => {
                let payload = buf[landed..landed + o.len].to_vec();
                let p = h.opener.handshake(&mut h.kconn, &payload).map_err(|e| e.to_string())?;
                got.tickets += p.tickets;
                got.key_updates += usize::from(p.key_update.is_some());
            }
            _ => {
                let a = NonData::decode(o.typ, &buf[landed..landed + o.len]).map_err(|e| e.to_string())?;
                assert!(a.is_close_notify(), "{a:?}");
                got.close_notify = true;
            }
        }
    }
    Ok(landed)
}

fn body(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt)).collect()
}

#[test]
fn server_records_open_in_place_to_exactly_rustls_plaintext() {
    for suite in SUITES {
        let mut h = handshake(suite);
        let tls13 = h.version == ProtocolVersion::TLSv1_3;
        let mut wire = std::mem::take(&mut h.wire);
        let mut want = Vec::new();
        // Sizes around the edges: empty write, 1 byte, one full record, a split one.
        for (k, n) in [1usize, 100, 16384, 16385, 40000, 3].into_iter().enumerate() {
            let b = body(n, k as u8);
            h.server.writer().write_all(&b).unwrap();
            want.extend(b);
            if tls13 && k == 2 {
                h.server.refresh_traffic_keys().unwrap();
            }
            drain(&mut h.server, &mut wire);
        }
        h.server.send_close_notify();
        drain(&mut h.server, &mut wire);

        let mut got = Received::default();
        let landed = receive(&mut h, &mut wire, &mut got).unwrap_or_else(|e| panic!("{suite:?}: {e}"));
        assert_eq!(landed, want.len(), "{suite:?}");
        assert!(wire[..landed] == want[..], "{suite:?}: plaintext differs");
        assert_eq!(
            got,
            Received {
                tickets: if tls13 { 2 } else { 0 },
                key_updates: usize::from(tls13),
                close_notify: true,
            },
            "{suite:?}"
        );
    }
}

#[test]
fn our_records_are_accepted_by_the_rustls_server() {
    for suite in SUITES {
        let mut h = handshake(suite);
        let tls13 = h.version == ProtocolVersion::TLSv1_3;
        let request = body(20000, 7); // two records
        let mut out = Vec::new();
        h.sealer
            .seal(content_type::APPLICATION_DATA, &request, &mut out)
            .unwrap();
        if tls13 {
            // Our KeyUpdate under the old key, then the new key (RFC 8446 §4.6.3).
            h.sealer
                .seal(content_type::HANDSHAKE, &crate::key_update_message(false), &mut out)
                .unwrap();
            let (seq, tx) = h.kconn.update_tx_secret().unwrap();
            h.sealer.rekey(seq, tx).unwrap();
        }
        h.sealer
            .seal(content_type::APPLICATION_DATA, b"after", &mut out)
            .unwrap();
        h.sealer.seal(content_type::ALERT, &[1, 0], &mut out).unwrap();
        feed(&mut h.server, &out);
        let mut got = Vec::new();
        h.server.reader().read_to_end(&mut got).unwrap(); // Ok at close_notify
        let mut want = request.clone();
        want.extend_from_slice(b"after");
        assert!(got == want, "{suite:?}: server read {} bytes", got.len());
    }
}

#[test]
fn every_flipped_bit_is_rejected_and_lands_nothing() {
    for suite in SUITES {
        let mut h = handshake(suite);
        let mut tickets = std::mem::take(&mut h.wire);
        receive(&mut h, &mut tickets, &mut Received::default()).unwrap();
        // Two records: 300 bytes, then 5; every bit of the second is flipped in turn.
        let mut wire = Vec::new();
        h.server.writer().write_all(&body(300, 1)).unwrap();
        drain(&mut h.server, &mut wire);
        let first = wire.len();
        h.server.writer().write_all(b"tail!").unwrap();
        drain(&mut h.server, &mut wire);
        let o = h.opener.open(&mut wire, 0, 0).unwrap().unwrap();
        assert_eq!((o.typ, o.len, o.wire), (23, 300, first));
        let seq = h.opener.seq();
        for bit in 0..(wire.len() - first) * 8 {
            let mut buf = wire.clone();
            buf[first + bit / 8] ^= 1 << (bit % 8);
            match h.opener.open(&mut buf, first, 300) {
                Ok(None) => {
                    // A length grown past the buffer: it waits for bytes that never come,
                    // and the record is never opened.
                    assert!(bit < 40, "{suite:?} bit {bit}");
                }
                Ok(Some(o)) => panic!("{suite:?} bit {bit}: a flipped record opened: {o:?}"),
                Err(_) => {}
            }
            assert_eq!(h.opener.seq(), seq, "{suite:?} bit {bit}: seq moved");
            assert!(buf[..300] == wire[..300], "{suite:?} bit {bit}: landed bytes changed");
        }
        // The failures left the opener as it was: the intact record opens.
        let o = h.opener.open(&mut wire, first, 300).unwrap().unwrap();
        assert_eq!((o.typ, &wire[300..305]), (23, &b"tail!"[..]), "{suite:?}");
    }
}

#[test]
fn records_split_anywhere_wait_for_their_last_byte() {
    let mut h = handshake(cs::TLS13_AES_128_GCM_SHA256);
    let mut wire = std::mem::take(&mut h.wire);
    receive(&mut h, &mut wire, &mut Received::default()).unwrap();
    let mut wire = Vec::new();
    h.server.writer().write_all(b"split me").unwrap();
    drain(&mut h.server, &mut wire);
    for cut in 0..wire.len() {
        let mut part = wire[..cut].to_vec();
        assert_eq!(h.opener.open(&mut part, 0, 0), Ok(None), "cut at {cut}");
        assert!(part == wire[..cut], "a partial record was touched");
    }
    let o = h.opener.open(&mut wire, 0, 0).unwrap().unwrap();
    assert_eq!(&wire[..o.len], b"split me");
}

#[test]
fn destination_past_the_ciphertext_is_refused() {
    let mut h = handshake(cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256);
    let mut wire = Vec::new();
    h.server.writer().write_all(b"x").unwrap();
    drain(&mut h.server, &mut wire);
    assert_eq!(h.opener.prefix_len(), 13);
    assert_eq!(
        h.opener.open(&mut wire, 0, 14),
        Err(RecordError::Destination { dst: 14, src: 0 })
    );
    // Landing right where the ciphertext starts is a shift of zero: allowed.
    let o = h.opener.open(&mut wire, 0, 13).unwrap().unwrap();
    assert_eq!(&wire[13..13 + o.len], b"x");
}

#[test]
fn headers_over_the_limit_and_bad_types_are_refused_before_any_key_is_used() {
    assert_eq!(record_len(&[23, 3, 3]), Ok(None));
    assert_eq!(record_len(&[23, 3, 3, 0x48, 0x00]), Ok(Some(5 + 0x4800)));
    assert_eq!(
        record_len(&[23, 3, 3, 0x48, 0x01]),
        Err(RecordError::Overflow { len: 0x4801 })
    );
    let mut h = handshake(cs::TLS13_CHACHA20_POLY1305_SHA256);
    // 2^14 + 257 bytes of TLS 1.3 ciphertext: over its limit (RFC 8446 §5.2).
    let mut big = vec![0u8; 5 + 16384 + 257];
    big[..5].copy_from_slice(&[23, 3, 3, 0x41, 0x01]);
    assert_eq!(
        h.opener.open(&mut big, 0, 0),
        Err(RecordError::Overflow { len: 16384 + 257 })
    );
    // A plaintext alert after the handshake (outer type 21 under TLS 1.3).
    let mut alert = [21, 3, 3, 0, 2, 1, 0];
    assert_eq!(h.opener.open(&mut alert, 0, 0), Err(RecordError::UnexpectedType(21)));
    // Shorter than a tag.
    let mut short = [23, 3, 3, 0, 15, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(h.opener.open(&mut short, 0, 0), Err(RecordError::Overflow { len: 15 }));
}

/// A TLS 1.3 record sealed by hand with `ring`: content ‖ type ‖ `pad` zeros.
fn padded_tls13_record(key: [u8; 32], iv: [u8; 12], seq: u64, inner: &[u8]) -> Vec<u8> {
    let k = LessSafeKey::new(UnboundKey::new(&aead::CHACHA20_POLY1305, &key).unwrap());
    let mut n = iv;
    for (b, s) in n[4..].iter_mut().zip(seq.to_be_bytes()) {
        *b ^= s;
    }
    let len = inner.len() + TAG_LEN;
    let header = [23, 3, 3, (len >> 8) as u8, len as u8];
    let mut ct = inner.to_vec();
    k.seal_in_place_append_tag(Nonce::assume_unique_for_key(n), Aad::from(header), &mut ct)
        .unwrap();
    let mut rec = header.to_vec();
    rec.extend(ct);
    rec
}

#[test]
fn tls13_padding_is_stripped_and_an_all_zero_plaintext_is_refused() {
    use rustls::crypto::cipher::{AeadKey, Iv};
    let (key, iv) = ([9u8; 32], [3u8; 12]);
    let secrets = || ConnectionTrafficSecrets::Chacha20Poly1305 {
        key: AeadKey::from(key),
        iv: Iv::new(iv),
    };
    let mut opener = RecordOpener::new(ProtocolVersion::TLSv1_3, 5, secrets()).unwrap();
    // "abc", type 23, 100 bytes of padding; then an alert padded to 2^14 + 1 plaintext
    // bytes in all (within the 2^14 + 256 ciphertext limit).
    let mut inner = b"abc\x17".to_vec();
    inner.extend([0; 100]);
    let mut wire = padded_tls13_record(key, iv, 5, &inner);
    let mut alert = vec![2, 40, 21];
    alert.resize(16385, 0);
    wire.extend(padded_tls13_record(key, iv, 6, &alert));
    let o = opener.open(&mut wire, 0, 0).unwrap().unwrap();
    assert_eq!((o.typ, o.len, &wire[..3]), (23, 3, &b"abc"[..]));
    let o = opener.open(&mut wire, o.wire, 3).unwrap().unwrap();
    assert_eq!((o.typ, o.len, &wire[3..5]), (21, 2, &[2u8, 40][..]));
    // Only zeros: no content type (RFC 8446 §5.4).
    let mut zeros = padded_tls13_record(key, iv, 7, &[0; 10]);
    assert_eq!(opener.open(&mut zeros, 0, 0), Err(RecordError::NoContentType));
    // Content over 2^14, and padding that takes the inner plaintext past 2^14 + 1 (RFC
    // 8446 §5.4), though the ciphertext is within 2^14 + 256.
    let mut over = vec![1u8; 16385];
    over.push(23);
    let mut over = padded_tls13_record(key, iv, 7, &over);
    assert_eq!(opener.open(&mut over, 0, 0), Err(RecordError::Overflow { len: 16386 }));
    let mut padded = vec![1u8, 23];
    padded.resize(16386, 0);
    let mut padded = padded_tls13_record(key, iv, 7, &padded);
    assert_eq!(
        opener.open(&mut padded, 0, 0),
        Err(RecordError::Overflow { len: 16386 })
    );
    // An empty handshake record.
    let mut empty = padded_tls13_record(key, iv, 7, &[22, 0, 0]);
    assert_eq!(opener.open(&mut empty, 0, 0), Err(RecordError::EmptyFragment(22)));
    // TLS 1.2 has no KeyUpdate.
    let mut o12 = RecordOpener::new(ProtocolVersion::TLSv1_2, 0, secrets()).unwrap();
    assert!(o12.rekey(0, secrets()).is_err());
}

#[test]
fn tickets_split_across_records_are_reassembled() {
    // 32-byte records (rustls' smallest): each NewSessionTicket spans several records.
    let mut h = handshake_with(cs::TLS13_AES_128_GCM_SHA256, Some(32));
    let mut wire = std::mem::take(&mut h.wire);
    h.server.writer().write_all(b"after the tickets").unwrap();
    drain(&mut h.server, &mut wire);
    let mut got = Received::default();
    let landed = receive(&mut h, &mut wire, &mut got).unwrap();
    assert_eq!(&wire[..landed], b"after the tickets");
    assert_eq!(got.tickets, 2);
}

#[test]
fn data_between_the_parts_of_a_handshake_message_is_refused() {
    use rustls::crypto::cipher::{AeadKey, Iv};
    let mut h = handshake(cs::TLS13_CHACHA20_POLY1305_SHA256); // for its KernelConnection
    let (key, iv) = ([4u8; 32], [5u8; 12]);
    let secrets = ConnectionTrafficSecrets::Chacha20Poly1305 {
        key: AeadKey::from(key),
        iv: Iv::new(iv),
    };
    let mut opener = RecordOpener::new(ProtocolVersion::TLSv1_3, 0, secrets).unwrap();
    // The first 6 of a 14-byte NewSessionTicket, then application data.
    let mut wire = padded_tls13_record(key, iv, 0, &[4, 0, 0, 10, 1, 2, 22]);
    wire.extend(padded_tls13_record(key, iv, 1, b"x\x17"));
    let o = opener.open(&mut wire, 0, 0).unwrap().unwrap();
    assert_eq!((o.typ, o.len), (22, 6));
    let part = wire[..6].to_vec();
    assert_eq!(opener.handshake(&mut h.kconn, &part).unwrap(), PostHandshake::default());
    assert_eq!(opener.open(&mut wire, o.wire, 0), Err(RecordError::UnexpectedType(23)));
}
