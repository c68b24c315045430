//! A `CONNECT` proxy for the tests (RFC 9110 §9.3.6) that caps tunnels per client the way
//! squid's `acl … maxconn N` + `http_access deny` does: a `CONNECT` beyond `N` open
//! tunnels from the client is answered `403 Forbidden`. It records every `CONNECT` head
//! (what reached this hop), may require `Proxy-Authorization`, and tunnels only to
//! loopback.
//!
//! Why not a real one: Debian's tinyproxy 1.11 at `MaxClients` leaves the extra
//! connection unanswered ("Maximum number of connections reached. Refusing new
//! connections." in its log, nothing on the socket), not a 403; squid is not installed
//! here, and its package starts the system's squid service when installed.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// One `CONNECT` head as the proxy read it, and what it answered.
#[derive(Clone, Debug)]
pub struct Connect {
    /// The request target (`host:port`).
    pub target: String,
    /// All fields, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The status it answered: 200, 403 (over the cap), 407 (credentials).
    pub status: u16,
}

impl Connect {
    /// First value of a field (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }
}

struct Shared {
    cap: usize,
    /// The `Proxy-Authorization` value it requires, if any.
    auth: Option<String>,
    open: AtomicUsize,
    most_open: AtomicUsize,
    log: Mutex<Vec<Connect>>,
    stop: AtomicBool,
}

/// A running proxy on `127.0.0.1:port`; stops when dropped.
pub struct ConnectProxy {
    port: u16,
    shared: Arc<Shared>,
    accept: Option<thread::JoinHandle<()>>,
}

impl ConnectProxy {
    /// Starts a proxy that allows `cap` open tunnels per client (0: refuses every one) and
    /// requires `Proxy-Authorization: <auth>` when `auth` is given (else 407).
    pub fn start(cap: usize, auth: Option<&str>) -> ConnectProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the CONNECT proxy");
        listener.set_nonblocking(true).expect("non-blocking listener");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            cap,
            auth: auth.map(str::to_owned),
            open: AtomicUsize::new(0),
            most_open: AtomicUsize::new(0),
            log: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let sh = shared.clone();
        let accept = thread::spawn(move || {
            while !sh.stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let sh = sh.clone();
                        thread::spawn(move || {
                            let _ = serve(s, &sh);
                        });
                    }
                    Err(_) => thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        ConnectProxy {
            port,
            shared,
            accept: Some(accept),
        }
    }

    /// `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Every `CONNECT` so far, in arrival order.
    pub fn connects(&self) -> Vec<Connect> {
        self.shared.log.lock().unwrap().clone()
    }

    /// `CONNECT`s answered 403 because the client had `cap` tunnels open.
    pub fn refused(&self) -> usize {
        self.connects().iter().filter(|c| c.status == 403).count()
    }

    /// The most tunnels that were open at once.
    pub fn most_open(&self) -> usize {
        self.shared.most_open.load(Ordering::SeqCst)
    }
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

/// Reads the `CONNECT` head; answers it; on 200 copies bytes both ways until both ends close.
fn serve(client: TcpStream, sh: &Shared) -> io::Result<()> {
    client.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut r = BufReader::new(client.try_clone()?);
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let line = line.trim_end_matches(['\r', '\n']).to_owned();
        if line.is_empty() {
            break;
        }
        lines.push(line);
    }
    let mut w = client;
    let mut parts = lines[0].split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or("").to_owned());
    let headers: Vec<(String, String)> = lines[1..]
        .iter()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut rec = Connect {
        target: target.clone(),
        headers,
        status: 200,
    };
    let loopback = target.starts_with("127.0.0.1:") || target.starts_with("localhost:");
    let answer = |w: &mut TcpStream, status: u16, reason: &str, extra: &str| {
        let _ = write!(
            w,
            "HTTP/1.1 {status} {reason}\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n"
        );
        let _ = w.shutdown(Shutdown::Write);
    };
    if method != "CONNECT" || !loopback {
        rec.status = 403;
        sh.log.lock().unwrap().push(rec);
        answer(&mut w, 403, "Forbidden", "");
        return Ok(());
    }
    if sh.auth.is_some() && rec.header("proxy-authorization") != sh.auth.as_deref() {
        rec.status = 407;
        sh.log.lock().unwrap().push(rec);
        answer(
            &mut w,
            407,
            "Proxy Authentication Required",
            "Proxy-Authenticate: Basic realm=\"test\"\r\n",
        );
        return Ok(());
    }
    // Count this tunnel only if it fits under the cap (squid's maxconn counts the client's
    // open connections).
    let fits = sh
        .open
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < sh.cap).then_some(n + 1))
        .is_ok();
    if !fits {
        rec.status = 403;
        sh.log.lock().unwrap().push(rec);
        answer(&mut w, 403, "Forbidden", "");
        return Ok(());
    }
    sh.most_open.fetch_max(sh.open.load(Ordering::SeqCst), Ordering::SeqCst);
    sh.log.lock().unwrap().push(rec);
    let result = tunnel(r, w, &target);
    sh.open.fetch_sub(1, Ordering::SeqCst);
    result
}

/// Connects to `target`, answers 200 and copies both ways (what the client sent after its
/// head first).
fn tunnel(r: BufReader<TcpStream>, mut w: TcpStream, target: &str) -> io::Result<()> {
    let up = match TcpStream::connect(target) {
        Ok(s) => s,
        Err(_) => {
            let _ = w.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            return Ok(());
        }
    };
    w.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")?;
    r.get_ref().set_read_timeout(None)?;
    let mut up_w = up.try_clone()?;
    up_w.write_all(r.buffer())?;
    let mut up_r = up;
    let down = thread::spawn(move || {
        let _ = io::copy(&mut up_r, &mut w);
        let _ = w.shutdown(Shutdown::Write);
    });
    let mut client = r.into_inner();
    let _ = io::copy(&mut client, &mut up_w);
    let _ = up_w.shutdown(Shutdown::Write);
    let _ = down.join();
    Ok(())
}
