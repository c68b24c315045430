//! End-to-end check of the secret → `crypto_info` mapping without a kTLS kernel: a real
//! in-memory rustls handshake, then records decrypted (RX) and produced (TX) the way
//! `net/tls/tls_sw.c` does it, reading key, salt, iv and rec_seq only from the encoded
//! `crypto_info` bytes at the uapi offsets. If the mapping were wrong, ring would refuse
//! the tag or rustls the record.

use std::io::{Read, Write};
use std::sync::Arc;

use ring::aead;
use rustls::crypto::ring as provider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection, SupportedCipherSuite};

use crate::crypto_info::{CryptoInfo, Direction};

/// The fields of an encoded `crypto_info`, read back at the uapi offsets.
struct Fields {
    version: u16,
    cipher: u16,
    key: Vec<u8>,
    /// `salt || iv`: the kernel's 12-byte nonce buffer.
    nonce_base: [u8; 12],
    rec_seq: u64,
}

fn fields(b: &[u8]) -> Fields {
    let version = u16::from_ne_bytes([b[0], b[1]]);
    let cipher = u16::from_ne_bytes([b[2], b[3]]);
    let mut nonce_base = [0u8; 12];
    let (key, seq) = match cipher {
        51 => {
            nonce_base[..4].copy_from_slice(&b[28..32]);
            nonce_base[4..].copy_from_slice(&b[4..12]);
            (b[12..28].to_vec(), &b[32..40])
        }
        52 => {
            nonce_base[..4].copy_from_slice(&b[44..48]);
            nonce_base[4..].copy_from_slice(&b[4..12]);
            (b[12..44].to_vec(), &b[48..56])
        }
        54 => {
            nonce_base.copy_from_slice(&b[4..16]);
            (b[16..48].to_vec(), &b[48..56])
        }
        c => panic!("cipher {c}"),
    };
    Fields {
        version,
        cipher,
        key,
        nonce_base,
        rec_seq: u64::from_be_bytes(seq.try_into().unwrap()),
    }
}

impl Fields {
    fn key(&self) -> aead::LessSafeKey {
        let alg = match self.cipher {
            51 => &aead::AES_128_GCM,
            52 => &aead::AES_256_GCM,
            _ => &aead::CHACHA20_POLY1305,
        };
        aead::LessSafeKey::new(aead::UnboundKey::new(alg, &self.key).unwrap())
    }

    /// TLS 1.2 AES-GCM carries an explicit nonce; TLS 1.3 and ChaCha20 XOR rec_seq in.
    fn explicit(&self) -> bool {
        self.version == 0x0303 && self.cipher != 54
    }

    fn xor_seq(&self, seq: u64) -> [u8; 12] {
        let mut n = self.nonce_base;
        for (i, s) in seq.to_be_bytes().iter().enumerate() {
            n[4 + i] ^= s;
        }
        n
    }

    fn aad(&self, seq: u64, header: &[u8; 5], plain_len: usize) -> Vec<u8> {
        if self.version == 0x0304 {
            header.to_vec()
        } else {
            let mut a = seq.to_be_bytes().to_vec();
            a.extend_from_slice(&header[..3]);
            a.extend_from_slice(&(plain_len as u16).to_be_bytes());
            a
        }
    }

    /// What the kernel's RX does with one record at `self.rec_seq + k`.
    fn decrypt(&self, k: u64, record: &[u8]) -> (u8, Vec<u8>) {
        let seq = self.rec_seq + k;
        let header: [u8; 5] = record[..5].try_into().unwrap();
        let body = &record[5..5 + u16::from_be_bytes([header[3], header[4]]) as usize];
        let (nonce, mut ct) = if self.explicit() {
            let mut n = self.nonce_base;
            n[4..].copy_from_slice(&body[..8]);
            (n, body[8..].to_vec())
        } else {
            (self.xor_seq(seq), body.to_vec())
        };
        let aad = self.aad(seq, &header, ct.len() - 16);
        let plain = self
            .key()
            .open_in_place(aead::Nonce::assume_unique_for_key(nonce), aead::Aad::from(aad), &mut ct)
            .expect("kernel-style RX decrypt")
            .to_vec();
        if self.version == 0x0304 {
            let end = plain.iter().rposition(|&b| b != 0).unwrap();
            (plain[end], plain[..end].to_vec())
        } else {
            (header[0], plain)
        }
    }

    /// What the kernel's TX does for the `k`-th record after install.
    fn encrypt(&self, k: u64, typ: u8, data: &[u8]) -> Vec<u8> {
        let seq = self.rec_seq + k;
        let mut plain = data.to_vec();
        let outer = if self.version == 0x0304 {
            plain.push(typ);
            23
        } else {
            typ
        };
        let (nonce, explicit) = if self.explicit() {
            // tls_advance_record_sn: the 8-byte iv is a big-endian counter.
            let start = u64::from_be_bytes(self.nonce_base[4..].try_into().unwrap());
            let e = start.wrapping_add(k).to_be_bytes();
            let mut n = self.nonce_base;
            n[4..].copy_from_slice(&e);
            (n, e.to_vec())
        } else {
            (self.xor_seq(seq), Vec::new())
        };
        let len = explicit.len() + plain.len() + 16;
        let header = [outer, 3, 3, (len >> 8) as u8, len as u8];
        let aad = self.aad(seq, &header, data.len());
        self.key()
            .seal_in_place_append_tag(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(aad),
                &mut plain,
            )
            .unwrap();
        let mut rec = header.to_vec();
        rec.extend(explicit);
        rec.extend(plain);
        rec
    }
}

pub(crate) fn configs(suite: SupportedCipherSuite) -> (Arc<ClientConfig>, Arc<ServerConfig>) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let cert = CertificateDer::from(ck.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
    let prov = Arc::new(rustls::crypto::CryptoProvider {
        cipher_suites: vec![suite],
        ..provider::default_provider()
    });
    let versions = [suite.version()];
    let server = ServerConfig::builder_with_provider(prov.clone())
        .with_protocol_versions(&versions)
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let mut client = ClientConfig::builder_with_provider(prov)
        .with_protocol_versions(&versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.enable_secret_extraction = true;
    (Arc::new(client), Arc::new(server))
}

fn pump(from: &mut impl WriteTls, to: &mut impl ReadTls) {
    let mut buf = Vec::new();
    while from.wants() {
        from.drain(&mut buf);
    }
    let mut rd = &buf[..];
    while !rd.is_empty() {
        to.feed(&mut rd);
    }
}

trait WriteTls {
    fn wants(&self) -> bool;
    fn drain(&mut self, out: &mut Vec<u8>);
}
trait ReadTls {
    fn feed(&mut self, input: &mut &[u8]);
}
macro_rules! tls_io {
    ($t:ty) => {
        impl WriteTls for $t {
            fn wants(&self) -> bool {
                self.wants_write()
            }
            fn drain(&mut self, out: &mut Vec<u8>) {
                self.write_tls(out).unwrap();
            }
        }
        impl ReadTls for $t {
            fn feed(&mut self, input: &mut &[u8]) {
                self.read_tls(input).unwrap();
                self.process_new_packets().unwrap();
            }
        }
    };
}
tls_io!(ClientConnection);
tls_io!(ServerConnection);

fn check(suite: SupportedCipherSuite) {
    let (cc, sc) = configs(suite);
    let mut client = ClientConnection::new(cc, ServerName::try_from("localhost").unwrap()).unwrap();
    let mut server = ServerConnection::new(sc).unwrap();
    while client.is_handshaking() || server.is_handshaking() {
        pump(&mut client, &mut server);
        pump(&mut server, &mut client);
    }
    pump(&mut server, &mut client); // TLS 1.3 tickets: rx seq > 0 on the client
    let version = client.protocol_version().unwrap();

    // RX: the server's next two records, decrypted as the kernel would.
    server.writer().write_all(b"hello kernel").unwrap();
    let mut wire = Vec::new();
    server.write_tls(&mut wire).unwrap();
    server.writer().write_all(b"second").unwrap();
    let mut wire2 = Vec::new();
    server.write_tls(&mut wire2).unwrap();

    let secrets = client.dangerous_extract_secrets().unwrap();
    let (rx_seq, rx) = secrets.rx;
    let (tx_seq, tx) = secrets.tx;
    eprintln!("{suite:?}: rx seq {rx_seq}, tx seq {tx_seq}");
    let rx_info = CryptoInfo::new(Direction::Rx, version, rx_seq, &rx).unwrap();
    let f = fields(rx_info.as_bytes());
    assert_eq!(
        f.decrypt(0, &wire),
        (23, b"hello kernel".to_vec()),
        "{suite:?} rx seq {rx_seq}"
    );
    assert_eq!(f.decrypt(1, &wire2), (23, b"second".to_vec()), "{suite:?}");

    // TX: records the kernel would make, accepted by the rustls server; then close_notify.
    let tx_info = CryptoInfo::new(Direction::Tx, version, tx_seq, &tx).unwrap();
    let f = fields(tx_info.as_bytes());
    let mut recs = f.encrypt(0, 23, b"GET / HTTP/1.1\r\n");
    recs.extend(f.encrypt(1, 23, b"\r\n"));
    recs.extend(f.encrypt(2, 21, &[1, 0]));
    let mut rd = &recs[..];
    while !rd.is_empty() {
        server.feed(&mut rd);
    }
    let mut got = Vec::new();
    server.reader().read_to_end(&mut got).unwrap(); // Ok at close_notify
    assert_eq!(got, b"GET / HTTP/1.1\r\n\r\n", "{suite:?} tx seq {tx_seq}");
}

#[test]
fn every_offloadable_suite_round_trips_like_the_kernel() {
    use provider::cipher_suite as cs;
    for suite in [
        cs::TLS13_AES_128_GCM_SHA256,
        cs::TLS13_AES_256_GCM_SHA384,
        cs::TLS13_CHACHA20_POLY1305_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ] {
        assert!(crate::offloadable(suite));
        check(suite);
    }
}
