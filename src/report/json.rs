//! The `--json` record: what one run reports at its end, success or failure, as one JSON
//! object on one line (RFC 8259), written by a small writer of our own (no serde at run
//! time).

/// What `--json FILE` reports about one run, filled as the run learns it; `None` is
/// written as `null` (not known: the run failed before it learned it, or it does not
/// apply, as the TLS fields of a plain-http download).
#[derive(Debug, Default)]
pub struct Record {
    /// `--json`: where the record goes (`-` = standard output); `None` = no record.
    pub json: Option<std::path::PathBuf>,
    /// The URL given, without credentials.
    pub url: Option<String>,
    /// The further URLs given (mirrors), without credentials.
    pub mirror_urls: Vec<String>,
    /// What each URL served, with mirrors (empty with one URL).
    pub mirrors: Vec<MirrorReport>,
    /// The URL the body came from, after redirects.
    pub final_url: Option<String>,
    /// The output file (`None` for standard output).
    pub output: Option<String>,
    /// The file's size, bytes.
    pub bytes: Option<u64>,
    /// Body bytes this run fetched (less than `bytes` after a resume).
    pub fetched: Option<u64>,
    /// Wall time of the transfer, seconds (of the whole run when it failed).
    pub seconds: Option<f64>,
    /// Of `seconds`, the start the server turned the transfer away (its connections taken
    /// by others) before its first body byte; 0 when it did not.
    pub waited_seconds: Option<f64>,
    /// Engine that ran: `direct`, `ktls-direct`, `splice`, `buffered`.
    pub engine: Option<String>,
    /// I/O backend: `io_uring` or `epoll`.
    pub io: Option<String>,
    /// TLS version (`TLSv1.3`, `TLSv1.2`).
    pub tls_version: Option<String>,
    /// TLS cipher suite (`TLS13_AES_256_GCM_SHA384`).
    pub tls_suite: Option<String>,
    /// Connections handed to kTLS.
    pub ktls_connections: Option<u64>,
    /// Connections whose TLS records the software record layer opened in place.
    pub records_in_place_connections: Option<u64>,
    /// TLS connections that reached the hand-off after their handshake (reconnects
    /// included): the "of M" of the two counts above.
    pub tls_connections: Option<u64>,
    /// TLS handshakes in full, and resumed (a session of an earlier connection).
    pub tls_full_handshakes: Option<u64>,
    pub tls_resumed_handshakes: Option<u64>,
    /// Connections that were served a response (not those only turned away).
    pub connections: Option<u64>,
    /// Failed attempts tried again (a segment requeued, a connection reopened).
    pub retries: Option<u64>,
    /// HTTP requests sent.
    pub requests: Option<u64>,
    /// A delta update (`--seed`): its object ([`crate::app`]'s delta report), raw JSON.
    pub delta: Option<String>,
    /// Requests sent again at once, no try spent, because the kept-alive connection they
    /// went on was closed before any byte of the answer (RFC 9112 §9.3.1); not in
    /// `retries`.
    pub resent: Option<u64>,
    /// Work-stealing splits.
    pub steals: Option<u64>,
    /// `--threads`: reactors that fetched the file, parts handed to the others, bytes
    /// they landed.
    pub reactors: Option<u64>,
    pub parts: Option<u64>,
    pub other_reactors_bytes: Option<u64>,
    /// `--threads`: the reactor the file ran on (0: the run's own; a list places files on
    /// the others).
    pub reactor: Option<u64>,
    /// Redirects followed.
    pub redirects: u64,
    /// `--checksum` matched (`true`), did not (`false`), or none was asked (`None`).
    pub checksum_verified: Option<bool>,
    /// The conditional first request got 304 Not Modified, or a list's file already there
    /// was kept because its size is the server's (the size alone: only a `--checksum`
    /// proves its content): nothing was fetched.
    pub not_modified: bool,
    /// Block-device output only (`None` otherwise, and not written): `true` when the run
    /// wrote bytes onto the device that are not a verified image (a signature or checksum
    /// that failed after the write, or an image that stopped short), `false` when it did
    /// not (the run ended 0, or wrote nothing).
    pub device_holds_unverified_bytes: Option<bool>,
    /// `--signature` (or a PGP signature seen and not checked): a JSON object.
    pub signature: Option<String>,
}

impl Record {
    /// The record as one JSON object (RFC 8259) on one line, with the run's exit code
    /// and error message (`null` on success), newline-terminated.
    pub fn to_json(&self, exit_code: u8, error: Option<&str>) -> String {
        let mut o = JsonObject::default();
        let urls: Vec<String> = self.url.iter().chain(&self.mirror_urls).cloned().collect();
        o.strs("urls", &urls);
        o.str("final_url", self.final_url.as_deref());
        o.str("output", self.output.as_deref());
        o.u64("bytes", self.bytes);
        o.u64("fetched", self.fetched);
        o.f64("seconds", self.seconds);
        o.f64("waited_seconds", self.waited_seconds);
        let served = self.seconds.map(|s| s - self.waited_seconds.unwrap_or(0.0));
        let rate = match (self.fetched, served) {
            (Some(b), Some(s)) if s > 0.0 => Some(b as f64 / s),
            _ => None,
        };
        o.f64("rate", rate);
        o.str("engine", self.engine.as_deref());
        o.str("io", self.io.as_deref());
        o.str("tls_version", self.tls_version.as_deref());
        o.str("tls_suite", self.tls_suite.as_deref());
        o.u64("ktls_connections", self.ktls_connections);
        o.u64("records_in_place_connections", self.records_in_place_connections);
        o.u64("tls_connections", self.tls_connections);
        o.u64("tls_full_handshakes", self.tls_full_handshakes);
        o.u64("tls_resumed_handshakes", self.tls_resumed_handshakes);
        o.u64("connections", self.connections);
        o.u64("retries", self.retries);
        o.u64("requests", self.requests);
        o.u64("resent", self.resent);
        o.u64("steals", self.steals);
        o.u64("reactors", self.reactors);
        o.u64("parts", self.parts);
        o.u64("other_reactors_bytes", self.other_reactors_bytes);
        o.u64("reactor", self.reactor);
        o.u64("redirects", Some(self.redirects));
        o.bool("checksum_verified", self.checksum_verified);
        o.bool("not_modified", Some(self.not_modified));
        if self.device_holds_unverified_bytes.is_some() {
            o.bool("device_holds_unverified_bytes", self.device_holds_unverified_bytes);
        }
        if let Some(delta) = &self.delta {
            o.raw("delta", delta);
        }
        if let Some(sig) = &self.signature {
            o.raw("signature", sig);
        }
        if !self.mirrors.is_empty() {
            let items: Vec<String> = self.mirrors.iter().map(MirrorReport::to_json).collect();
            o.raw("mirrors", &format!("[{}]", items.join(",")));
        }
        o.u64("exit_code", Some(u64::from(exit_code)));
        o.str("error", error);
        o.finish()
    }
}

/// What one URL of a download with mirrors served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirrorReport {
    /// The URL (after redirects), without credentials.
    pub url: String,
    /// Body bytes it delivered.
    pub bytes: u64,
    /// Why it was dropped, if it was.
    pub dropped: Option<String>,
}

impl MirrorReport {
    /// `{"url":…,"used":…,"bytes":…,"dropped_reason":…}` (`used`: it served bytes).
    fn to_json(&self) -> String {
        let mut o = JsonObject::default();
        o.str("url", Some(&self.url));
        o.bool("used", Some(self.bytes > 0));
        o.u64("bytes", Some(self.bytes));
        o.str("dropped_reason", self.dropped.as_deref());
        o.finish().trim_end().to_owned()
    }
}

/// What `--json` reports about a run of several files (`-i`, `-Z`): one object per file
/// tried ([`Record::to_json`], unchanged) and the run's totals.
#[derive(Debug, Default)]
pub struct RunTotals {
    /// Files in the run (the list's and the command line's).
    pub files: u64,
    /// Files that landed, or were already there and kept (a list's file of the same size
    /// as on the server, or a 304).
    pub ok: u64,
    /// Of `ok`, the files already there and kept: nothing of them fetched.
    pub already_there: u64,
    /// Files that failed.
    pub failed: u64,
    /// Files not tried: after SIGINT, or after a failure with `--fail-fast`.
    pub not_started: u64,
    /// Size of the files that landed, bytes.
    pub bytes: u64,
    /// Body bytes fetched by this run, over every file tried.
    pub fetched: u64,
    /// Wall time of the run, seconds.
    pub seconds: f64,
    /// TLS handshakes in full and resumed, over every file tried.
    pub tls_full_handshakes: u64,
    pub tls_resumed_handshakes: u64,
}

impl RunTotals {
    /// `{"files":[FILE,…],"run":{…,"exit_code":N,"error":…}}` on one line,
    /// newline-terminated: `files` holds each file's object as [`Record::to_json`] wrote
    /// it; `error` is why no file was tried (a bad list line, a refused option), else null.
    pub fn to_json(&self, files: &[String], exit_code: u8, error: Option<&str>) -> String {
        let mut run = JsonObject::default();
        run.u64("files", Some(self.files));
        run.u64("ok", Some(self.ok));
        run.u64("already_there", Some(self.already_there));
        run.u64("failed", Some(self.failed));
        run.u64("not_started", Some(self.not_started));
        run.u64("bytes", Some(self.bytes));
        run.u64("fetched", Some(self.fetched));
        run.f64("seconds", Some(self.seconds));
        run.f64("rate", (self.seconds > 0.0).then(|| self.fetched as f64 / self.seconds));
        run.u64("tls_full_handshakes", Some(self.tls_full_handshakes));
        run.u64("tls_resumed_handshakes", Some(self.tls_resumed_handshakes));
        run.u64("exit_code", Some(exit_code.into()));
        run.str("error", error);
        let list: Vec<&str> = files.iter().map(|f| f.trim_end()).collect();
        let mut o = JsonObject::default();
        o.raw("files", &format!("[{}]", list.join(",")));
        o.raw("run", run.finish().trim_end());
        o.finish()
    }
}

/// A flat JSON object written by hand (RFC 8259): string, number, boolean and `null`
/// members, and arrays of strings.
#[derive(Default)]
struct JsonObject {
    buf: String,
}

impl JsonObject {
    fn key(&mut self, k: &str) {
        self.buf.push(if self.buf.is_empty() { '{' } else { ',' });
        push_json_string(&mut self.buf, k);
        self.buf.push(':');
    }
    fn str(&mut self, k: &str, v: Option<&str>) {
        self.key(k);
        match v {
            Some(v) => push_json_string(&mut self.buf, v),
            None => self.buf.push_str("null"),
        }
    }
    fn strs(&mut self, k: &str, v: &[String]) {
        self.key(k);
        self.buf.push('[');
        for (i, s) in v.iter().enumerate() {
            if i > 0 {
                self.buf.push(',');
            }
            push_json_string(&mut self.buf, s);
        }
        self.buf.push(']');
    }
    /// `v` is already JSON (an array of objects).
    fn raw(&mut self, k: &str, v: &str) {
        self.key(k);
        self.buf.push_str(v);
    }
    fn u64(&mut self, k: &str, v: Option<u64>) {
        self.key(k);
        match v {
            Some(v) => self.buf.push_str(&v.to_string()),
            None => self.buf.push_str("null"),
        }
    }
    /// Six decimals (seconds to the microsecond); NaN and infinities (no JSON number) as `null`.
    fn f64(&mut self, k: &str, v: Option<f64>) {
        self.key(k);
        match v.filter(|v| v.is_finite()) {
            Some(v) => self.buf.push_str(&format!("{v:.6}")),
            None => self.buf.push_str("null"),
        }
    }
    fn bool(&mut self, k: &str, v: Option<bool>) {
        self.key(k);
        self.buf.push_str(match v {
            Some(true) => "true",
            Some(false) => "false",
            None => "null",
        });
    }
    fn finish(mut self) -> String {
        if self.buf.is_empty() {
            self.buf.push('{');
        }
        self.buf.push_str("}\n");
        self.buf
    }
}

/// Appends `s` as a JSON string (RFC 8259 §7): `"` and `\\` escaped, control
/// characters as `\n`, `\r`, `\t` or `\u00XX`; everything else as UTF-8.
pub(crate) fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}
