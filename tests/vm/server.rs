//! `vm_server`: the HTTPS test server of the VM kTLS tests (`tests/vm/run.sh`).
//!
//! Built as a static musl example of the root package and copied into the initramfs:
//!
//! ```text
//! CC_x86_64_unknown_linux_musl=musl-gcc cargo build --release \
//!     --target x86_64-unknown-linux-musl --example vm_server
//! ```
//!
//! Serves the files of `--root` over HTTPS (HTTP/1.1, keep-alive, GET and HEAD, one
//! `Range: bytes=` range → 206 with Content-Range, 416 `bytes */N` when unsatisfiable),
//! one thread per connection. It makes its own CA and a leaf for `localhost`,
//! `127.0.0.1` and `::1` (rcgen, ECDSA P-256) at start, writes the CA PEM to `--ca-out`
//! (for `ringdl --ca-certificate`) only once it listens: the file's existence is the
//! "ready" signal.
//!
//! The knobs the kTLS cases need, each per connection:
//!
//! ```text
//! --listen ADDR            127.0.0.1:8443
//! --root DIR               /srv
//! --ca-out FILE            /tmp/ca.pem
//! --tls 1.2|1.3|all        protocol versions offered (default all)
//! --suite NAME[,NAME..]    cipher suites: aes128gcm, aes256gcm, chacha20 (for every
//!                          offered version), or full rustls names such as
//!                          TLS13_AES_256_GCM_SHA384 (default: all of rustls/ring)
//! --tickets N              TLS 1.3 NewSessionTickets after the handshake (default 2;
//!                          the client must offer psk_dhe_ke)
//! --key-update-after N     TLS 1.3: after N body bytes on a connection, send a
//!                          KeyUpdate (rustls refresh_traffic_keys), mid-body
//! --key-updates K          repeat: K KeyUpdates, one every N body bytes (default 1)
//! --key-update-every N     TLS 1.3: a KeyUpdate whenever N body bytes went out on the
//!                          connection since its last one, but only before the middle of
//!                          a response (else at the next response's second write): a
//!                          client that splits a running body (work stealing) still
//!                          reads every KeyUpdate sent, so the counts can be compared
//! --close notify|fin|rst   how the server ends a connection: close_notify then FIN
//!                          (default), bare FIN, or RST (SO_LINGER 0)
//! --conn-close             answer with `Connection: close` and end the connection
//!                          after every response
//! --chunk N                plaintext bytes per write (default 16384: one full record)
//! -v                       one line per connection on stderr (version, suite, bytes)
//! ```
//!
//! Every KeyUpdate sent is one `vm_server: conn N: KeyUpdate sent` line on stderr (with or
//! without -v). rustls sends them with `update_requested` (`refresh_traffic_keys`), so the
//! client must answer with its own; the server counts the client's records of exactly 22
//! bytes (TLS 1.3: 5-byte KeyUpdate + content type + 16-byte tag; requests are longer,
//! close_notify is 19) and reports them as `client-key-updates` in the line each connection
//! prints when it is closed (`vm_server: conn N: closed ...`, after `conn N: accepted`).

use std::fs;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::process::exit;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned, SupportedProtocolVersion};

/// How the server ends a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Close {
    /// close_notify alert, then FIN.
    Notify,
    /// FIN without close_notify (a truncation attack, or a sloppy server).
    Fin,
    /// RST: SO_LINGER with a zero timeout, then close.
    Rst,
}

/// The command line.
#[derive(Clone, Debug)]
struct Opts {
    listen: String,
    root: PathBuf,
    ca_out: PathBuf,
    tls: String,
    suites: Vec<String>,
    tickets: usize,
    key_update_after: u64,
    key_updates: u32,
    key_update_every: u64,
    close: Close,
    conn_close: bool,
    chunk: usize,
    verbose: bool,
}

fn usage(msg: &str) -> ! {
    eprintln!("vm_server: {msg}\nsee the comment at the top of tests/vm/server.rs for the options");
    exit(2)
}

fn parse_args() -> Opts {
    let mut o = Opts {
        listen: "127.0.0.1:8443".into(),
        root: "/srv".into(),
        ca_out: "/tmp/ca.pem".into(),
        tls: "all".into(),
        suites: Vec::new(),
        tickets: 2,
        key_update_after: 0,
        key_updates: 1,
        key_update_every: 0,
        close: Close::Notify,
        conn_close: false,
        chunk: 16384,
        verbose: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage(&format!("{a} wants a value")));
        fn num<T: std::str::FromStr>(name: &str, v: String) -> T {
            v.parse()
                .unwrap_or_else(|_| usage(&format!("{name}: not a number: {v}")))
        }
        match a.as_str() {
            "--listen" => o.listen = val(),
            "--root" => o.root = val().into(),
            "--ca-out" => o.ca_out = val().into(),
            "--tls" => o.tls = val(),
            "--suite" => o.suites = val().split(',').map(str::to_owned).collect(),
            "--tickets" => o.tickets = num("--tickets", val()),
            "--key-update-after" => o.key_update_after = num("--key-update-after", val()),
            "--key-updates" => o.key_updates = num("--key-updates", val()),
            "--key-update-every" => o.key_update_every = num("--key-update-every", val()),
            "--close" => {
                o.close = match val().as_str() {
                    "notify" => Close::Notify,
                    "fin" => Close::Fin,
                    "rst" => Close::Rst,
                    v => usage(&format!("--close: notify, fin or rst, not {v}")),
                }
            }
            "--conn-close" => o.conn_close = true,
            "--chunk" => o.chunk = num::<usize>("--chunk", val()).max(1),
            "-v" => o.verbose = true,
            _ => usage(&format!("unknown argument {a}")),
        }
    }
    o
}

/// The rustls server config the options ask for, with a fresh CA (written to `ca_out`
/// by the caller once listening) and leaf.
fn server_config(o: &Opts) -> (Arc<ServerConfig>, String) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "ringdl VM test CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).expect("generating the CA");
    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    let mut leaf_params = CertificateParams::new(names).unwrap();
    leaf_params.distinguished_name.push(DnType::CommonName, "localhost");
    leaf_params.is_ca = IsCa::ExplicitNoCa;
    leaf_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = leaf_params.signed_by(&leaf_key, &ca).expect("signing the leaf");

    let versions: Vec<&'static SupportedProtocolVersion> = match o.tls.as_str() {
        "1.2" => vec![&rustls::version::TLS12],
        "1.3" => vec![&rustls::version::TLS13],
        "all" => vec![&rustls::version::TLS13, &rustls::version::TLS12],
        v => usage(&format!("--tls: 1.2, 1.3 or all, not {v}")),
    };
    let mut provider = rustls::crypto::ring::default_provider();
    if !o.suites.is_empty() {
        let wanted = |name: &str| {
            o.suites.iter().any(|s| {
                let part = match s.to_ascii_lowercase().as_str() {
                    "aes128gcm" | "aes-128-gcm" => "_AES_128_GCM_".to_owned(),
                    "aes256gcm" | "aes-256-gcm" => "_AES_256_GCM_".to_owned(),
                    "chacha20" | "chacha20-poly1305" => "_CHACHA20_POLY1305_".to_owned(),
                    _ => return name.eq_ignore_ascii_case(s),
                };
                name.contains(&part)
            })
        };
        provider.cipher_suites.retain(|cs| wanted(&format!("{:?}", cs.suite())));
        if provider.cipher_suites.is_empty() {
            usage(&format!("--suite {}: no rustls suite matches", o.suites.join(",")));
        }
    }
    // The suites this server can pick: the versions offered, an ECDSA certificate.
    let names: Vec<String> = provider
        .cipher_suites
        .iter()
        .filter(|cs| versions.iter().any(|v| v.version == cs.version().version))
        .map(|cs| format!("{:?}", cs.suite()))
        .filter(|n| !n.contains("_RSA_"))
        .collect();
    let chain: Vec<CertificateDer<'static>> = vec![leaf.der().clone(), ca.der().clone()];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let mut config = ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&versions)
        .unwrap_or_else(|e| usage(&format!("--tls {} with these suites: {e}", o.tls)))
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server certificate");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.send_tls13_tickets = o.tickets;
    if o.verbose {
        eprintln!(
            "vm_server: tls {} suites {} tickets {} key-update-after {} x{} key-update-every {} close {:?}{}",
            o.tls,
            names.join(","),
            o.tickets,
            o.key_update_after,
            o.key_updates,
            o.key_update_every,
            o.close,
            if o.conn_close { " conn-close" } else { "" }
        );
    }
    (Arc::new(config), ca.pem())
}

fn main() {
    let o = Arc::new(parse_args());
    let (config, ca_pem) = server_config(&o);
    let listener = TcpListener::bind(&o.listen).unwrap_or_else(|e| {
        eprintln!("vm_server: bind {}: {e}", o.listen);
        exit(1)
    });
    // Ready signal: the CA file appears (atomically) once the socket listens.
    let tmp = o.ca_out.with_extension("tmp");
    fs::write(&tmp, ca_pem)
        .and_then(|()| fs::rename(&tmp, &o.ca_out))
        .unwrap_or_else(|e| {
            eprintln!("vm_server: writing {}: {e}", o.ca_out.display());
            exit(1)
        });
    for (id, sock) in listener.incoming().enumerate() {
        let Ok(sock) = sock else { continue };
        let (config, o) = (config.clone(), o.clone());
        thread::spawn(move || serve(id, sock, config, &o));
    }
}

/// Per-connection state the log line reports.
#[derive(Default)]
struct Stats {
    id: usize,
    requests: u32,
    body_bytes: u64,
    key_updates: u32,
    /// Body bytes since the last KeyUpdate (`--key-update-every`).
    since_key_update: u64,
}

/// The client's side of a TCP connection, with its TLS records counted as they are read
/// (record framing only: 5-byte header, then `length` bytes).
struct Counted {
    sock: TcpStream,
    /// Header bytes of the record being read (up to 5).
    hdr: Vec<u8>,
    /// Bytes of the current record's body still to come.
    body_left: usize,
    /// Records of exactly 22 bytes: TLS 1.3 KeyUpdates (see the top of the file).
    key_updates: u32,
}

impl Counted {
    fn count(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.body_left > 0 {
                let n = self.body_left.min(data.len());
                self.body_left -= n;
                data = &data[n..];
                continue;
            }
            let n = (5 - self.hdr.len()).min(data.len());
            self.hdr.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.hdr.len() == 5 {
                self.body_left = usize::from(u16::from_be_bytes([self.hdr[3], self.hdr[4]]));
                if self.hdr[0] == 23 && self.body_left == 22 {
                    self.key_updates += 1;
                }
                self.hdr.clear();
            }
        }
    }
}

impl Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.sock.read(buf)?;
        self.count(&buf[..n]);
        Ok(n)
    }
}

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.sock.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.sock.flush()
    }
}

fn serve(id: usize, sock: TcpStream, config: Arc<ServerConfig>, o: &Opts) {
    let _ = sock.set_nodelay(true);
    let _ = sock.set_read_timeout(Some(Duration::from_secs(120)));
    let conn = match ServerConnection::new(config) {
        Ok(c) => c,
        Err(e) => return eprintln!("vm_server: conn {id}: {e}"),
    };
    eprintln!("vm_server: conn {id}: accepted");
    let sock = Counted {
        sock,
        hdr: Vec::with_capacity(5),
        body_left: 0,
        key_updates: 0,
    };
    let mut tls = StreamOwned::new(conn, sock);
    let mut st = Stats { id, ..Stats::default() };
    let res = requests(&mut tls, o, &mut st);
    let end = match &res {
        Ok(()) => "ok".to_owned(),
        Err(e) => e.to_string(),
    };
    close(&mut tls, o);
    eprintln!(
        "vm_server: conn {id}: closed {:?} {:?} requests {} body {} key-updates {} client-key-updates {} end {end}",
        tls.conn.protocol_version(),
        tls.conn.negotiated_cipher_suite().map(|s| s.suite()),
        st.requests,
        st.body_bytes,
        st.key_updates,
        tls.sock.key_updates,
    );
}

/// Ends the connection the way `--close` says, then reads until the client's FIN.
fn close(tls: &mut StreamOwned<ServerConnection, Counted>, o: &Opts) {
    match o.close {
        Close::Notify => {
            tls.conn.send_close_notify();
            let _ = tls.flush();
            let _ = tls.sock.sock.shutdown(Shutdown::Write);
        }
        Close::Fin => {
            let _ = tls.sock.sock.shutdown(Shutdown::Write);
        }
        Close::Rst => {
            let _ = rustix::net::sockopt::set_socket_linger(&tls.sock.sock, Some(Duration::ZERO));
            return; // dropping the socket with linger 0 sends RST
        }
    }
    // Let the client read everything before the socket goes: drain until its FIN (the
    // records still count).
    let mut sink = [0u8; 4096];
    let _ = tls.sock.sock.set_read_timeout(Some(Duration::from_secs(10)));
    while matches!(tls.sock.read(&mut sink), Ok(n) if n > 0) {}
}

/// Serves requests until the client closes, asks `Connection: close`, or `--conn-close`.
fn requests(tls: &mut StreamOwned<ServerConnection, Counted>, o: &Opts, st: &mut Stats) -> io::Result<()> {
    let mut buf = Vec::with_capacity(8192);
    loop {
        // Read one request head.
        let end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            if buf.len() > 65536 {
                return Err(io::Error::other("request head over 64 KiB"));
            }
            let mut chunk = [0u8; 4096];
            let n = match tls.read(&mut chunk) {
                Ok(n) => n,
                // A client that closes without close_notify between requests: fine.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && buf.is_empty() => 0,
                Err(e) => return Err(e),
            };
            if n == 0 {
                return if buf.is_empty() {
                    Ok(())
                } else {
                    Err(io::Error::other("EOF inside a request head"))
                };
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        st.requests += 1;
        let keep = respond(tls, &head, o, st)?;
        tls.flush()?;
        if !keep || o.conn_close {
            return Ok(());
        }
    }
}

/// Answers one request; returns whether the connection stays open.
fn respond(tls: &mut StreamOwned<ServerConnection, Counted>, head: &str, o: &Opts, st: &mut Stats) -> io::Result<bool> {
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let (method, target) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    let mut range = None;
    let mut keep = true;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else { continue };
        let v = v.trim();
        if k.eq_ignore_ascii_case("range") {
            range = Some(v.to_owned());
        } else if k.eq_ignore_ascii_case("connection") && v.eq_ignore_ascii_case("close") {
            keep = false;
        }
    }
    let keep = keep && !o.conn_close;
    let conn_hdr = if keep { "keep-alive" } else { "close" };
    let simple = |tls: &mut StreamOwned<ServerConnection, Counted>, status: &str, extra: &str| {
        let body = format!("{status}\n");
        let h = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: {conn_hdr}\r\n{extra}\r\n",
            body.len()
        );
        tls.write_all(h.as_bytes())?;
        if method != "HEAD" {
            tls.write_all(body.as_bytes())?;
        }
        Ok::<bool, io::Error>(keep)
    };
    if method != "GET" && method != "HEAD" {
        return simple(tls, "405 Method Not Allowed", "Allow: GET, HEAD\r\n");
    }
    let Some(path) = local_path(&o.root, target) else {
        return simple(tls, "404 Not Found", "");
    };
    let Ok(mut file) = fs::File::open(&path) else {
        return simple(tls, "404 Not Found", "");
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return simple(tls, "404 Not Found", "");
    }
    let size = meta.len();
    let etag = format!(
        "\"{:x}-{:x}\"",
        size,
        meta.modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs())
    );
    let (status, first, last) = match range.as_deref().map(|r| parse_range(r, size)) {
        None | Some(Range::Ignore) => ("200 OK", 0, size.wrapping_sub(1)),
        Some(Range::Bytes(a, b)) => ("206 Partial Content", a, b),
        Some(Range::Unsatisfiable) => {
            return simple(
                tls,
                "416 Range Not Satisfiable",
                &format!("Content-Range: bytes */{size}\r\n"),
            );
        }
    };
    let len = if size == 0 { 0 } else { last - first + 1 };
    let mut h = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {len}\r\nAccept-Ranges: bytes\r\nETag: {etag}\r\n\
         Content-Type: application/octet-stream\r\nConnection: {conn_hdr}\r\n"
    );
    if status.starts_with("206") {
        h.push_str(&format!("Content-Range: bytes {first}-{last}/{size}\r\n"));
    }
    h.push_str("\r\n");
    tls.write_all(h.as_bytes())?;
    if method == "HEAD" || len == 0 {
        return Ok(keep);
    }
    io::Seek::seek(&mut file, io::SeekFrom::Start(first))?;
    let mut left = len;
    let mut chunk = vec![0u8; o.chunk];
    let mut writes = 0u32;
    while left > 0 {
        // --key-update-every: due, and still before the middle of this response (never
        // before its first write: mid-body).
        if o.key_update_every > 0 && st.since_key_update >= o.key_update_every && writes > 0 && len - left < len / 2 {
            key_update(tls, st)?;
        }
        writes += 1;
        // Cut the write at the next KeyUpdate point, if any.
        let mut n = left.min(chunk.len() as u64);
        let next_ku = if o.key_update_after > 0 && st.key_updates < o.key_updates {
            Some(o.key_update_after * u64::from(st.key_updates + 1))
        } else {
            None
        };
        if let Some(at) = next_ku {
            n = n.min(at.saturating_sub(st.body_bytes).max(1));
        }
        let n = usize::try_from(n).unwrap();
        file.read_exact(&mut chunk[..n])?;
        tls.write_all(&chunk[..n])?;
        st.body_bytes += n as u64;
        st.since_key_update += n as u64;
        left -= n as u64;
        if next_ku.is_some_and(|at| st.body_bytes >= at) {
            key_update(tls, st)?;
        }
    }
    Ok(keep)
}

/// Sends a KeyUpdate (update_requested: rustls `refresh_traffic_keys`) after what was
/// written so far, and says so on stderr.
fn key_update(tls: &mut StreamOwned<ServerConnection, Counted>, st: &mut Stats) -> io::Result<()> {
    tls.flush()?;
    tls.conn
        .refresh_traffic_keys()
        .map_err(|e| io::Error::other(format!("KeyUpdate: {e}")))?;
    tls.flush()?;
    st.key_updates += 1;
    st.since_key_update = 0;
    eprintln!(
        "vm_server: conn {}: KeyUpdate sent after {} body bytes",
        st.id, st.body_bytes
    );
    Ok(())
}

/// What a `Range` header asks.
enum Range {
    /// Not a single `bytes=` range this server understands: answer 200 with everything.
    Ignore,
    /// First and last byte, inclusive, clamped to the file.
    Bytes(u64, u64),
    /// 416.
    Unsatisfiable,
}

fn parse_range(v: &str, size: u64) -> Range {
    let Some(spec) = v.strip_prefix("bytes=") else {
        return Range::Ignore;
    };
    if spec.contains(',') {
        return Range::Ignore;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return Range::Ignore;
    };
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() {
        // Suffix: the last N bytes.
        return match b.parse::<u64>() {
            Ok(0) => Range::Unsatisfiable,
            Ok(n) if size > 0 => Range::Bytes(size.saturating_sub(n), size - 1),
            Ok(_) => Range::Unsatisfiable,
            Err(_) => Range::Ignore,
        };
    }
    let Ok(first) = a.parse::<u64>() else {
        return Range::Ignore;
    };
    let last = if b.is_empty() {
        u64::MAX
    } else {
        match b.parse::<u64>() {
            Ok(l) if l >= first => l,
            _ => return Range::Ignore,
        }
    };
    if first >= size {
        return Range::Unsatisfiable;
    }
    Range::Bytes(first, last.min(size - 1))
}

/// Maps a request target to a file under `root`; None for anything that escapes it.
fn local_path(root: &Path, target: &str) -> Option<PathBuf> {
    let path = target.split(['?', '#']).next()?;
    let rel = Path::new(path.strip_prefix('/')?);
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return None;
    }
    Some(root.join(rel))
}
