//! Progress line on a terminal, the one-line summary, and the `--json` record.

use std::io::Write;
use std::time::Duration;

/// Draws `\r`-updated progress on stderr when it is a terminal and not `--quiet`.
pub struct Progress {
    visible: bool,
    drawn: bool,
    last: u64,
    last_t: Duration,
    rate: f64,
}

impl Progress {
    /// Progress for this run: shown only on a TTY and without `quiet`.
    pub fn new(quiet: bool) -> Progress {
        let visible = !quiet && std::io::IsTerminal::is_terminal(&std::io::stderr());
        Progress {
            visible,
            drawn: false,
            last: 0,
            last_t: Duration::ZERO,
            rate: 0.0,
        }
    }

    /// Redraws: bytes so far, of `total` when known, rate (smoothed), ETA, live connections.
    pub fn update(&mut self, bytes: u64, total: Option<u64>, live: usize, elapsed: Duration) {
        let dt = (elapsed - self.last_t).as_secs_f64();
        if dt > 0.0 {
            let inst = (bytes - self.last.min(bytes)) as f64 / dt;
            self.rate = if self.rate == 0.0 {
                inst
            } else {
                0.7 * self.rate + 0.3 * inst
            };
            self.last = bytes;
            self.last_t = elapsed;
        }
        if !self.visible {
            return;
        }
        let mut line = match total {
            Some(t) if t > 0 => format!(
                "{:5.1}% {} / {}",
                bytes as f64 * 100.0 / t as f64,
                human(bytes),
                human(t)
            ),
            _ => human(bytes),
        };
        line += &format!("  {}/s", human(self.rate as u64));
        if let Some(t) = total
            && self.rate > 0.0
            && t > bytes
        {
            line += &format!("  ETA {}", duration((t - bytes) as f64 / self.rate));
        }
        line += &format!("  {live} conn");
        eprint!("\r{line:<64}");
        let _ = std::io::stderr().flush();
        self.drawn = true;
    }

    /// Erases the progress line before the summary or an error.
    pub fn clear(&mut self) {
        if self.drawn {
            eprint!("\r{:<64}\r", "");
            self.drawn = false;
        }
    }
}

/// `1.5 GiB`, `312.0 KiB`, `17 B`.
pub fn human(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < U.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", U[u])
    }
}

fn duration(s: f64) -> String {
    let s = s.round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s / 60 % 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// What `--json FILE` reports about one run, filled as the run learns it; `None` is
/// written as `null` (not known: the run failed before it learned it, or it does not
/// apply, as the TLS fields of a plain-http download).
#[derive(Debug, Default)]
pub struct Record {
    /// `--json`: where the record goes (`-` = standard output); `None` = no record.
    pub json: Option<std::path::PathBuf>,
    /// The URL given, without credentials.
    pub url: Option<String>,
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
    /// Engine that ran: `direct`, `ktls-direct`, `splice`, `buffered`.
    pub engine: Option<String>,
    /// I/O backend: `io_uring` or `epoll`.
    pub io: Option<String>,
    /// TLS version (`TLSv1_3`).
    pub tls_version: Option<String>,
    /// TLS cipher suite (`TLS13_AES_256_GCM_SHA384`).
    pub tls_suite: Option<String>,
    /// Connections handed to kTLS.
    pub ktls_connections: Option<u64>,
    /// Connections that carried a request.
    pub connections: Option<u64>,
    /// Failed attempts tried again (a segment requeued, a connection reopened).
    pub retries: Option<u64>,
    /// Work-stealing splits.
    pub steals: Option<u64>,
    /// Redirects followed.
    pub redirects: u64,
    /// `--checksum` matched (`true`), did not (`false`), or none was asked (`None`).
    pub checksum_verified: Option<bool>,
}

impl Record {
    /// The record as one JSON object (RFC 8259) on one line, with the run's exit code
    /// and error message (`null` on success), newline-terminated.
    pub fn to_json(&self, exit_code: u8, error: Option<&str>) -> String {
        let mut o = JsonObject::default();
        o.strs("urls", self.url.as_slice());
        o.str("final_url", self.final_url.as_deref());
        o.str("output", self.output.as_deref());
        o.u64("bytes", self.bytes);
        o.u64("fetched", self.fetched);
        o.f64("seconds", self.seconds);
        let rate = match (self.fetched, self.seconds) {
            (Some(b), Some(s)) if s > 0.0 => Some(b as f64 / s),
            _ => None,
        };
        o.f64("rate", rate);
        o.str("engine", self.engine.as_deref());
        o.str("io", self.io.as_deref());
        o.str("tls_version", self.tls_version.as_deref());
        o.str("tls_suite", self.tls_suite.as_deref());
        o.u64("ktls_connections", self.ktls_connections);
        o.u64("connections", self.connections);
        o.u64("retries", self.retries);
        o.u64("steals", self.steals);
        o.u64("redirects", Some(self.redirects));
        o.bool("checksum_verified", self.checksum_verified);
        o.u64("exit_code", Some(u64::from(exit_code)));
        o.str("error", error);
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
fn push_json_string(out: &mut String, s: &str) {
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

#[cfg(test)]
mod tests {
    #[test]
    fn json_strings_are_escaped() {
        let mut s = String::new();
        super::push_json_string(&mut s, "a\"b\\c\nd\re\tf\u{1}g\u{7f}é");
        assert_eq!(s, r#""a\"b\\c\nd\re\tf\u0001g\u007fé""#);
        let r = super::Record {
            url: Some("http://h/\"x\"".to_owned()),
            bytes: Some(10),
            fetched: Some(5),
            seconds: Some(2.0),
            checksum_verified: Some(false),
            ..Default::default()
        };
        let j = r.to_json(9, Some("sha-256 mismatch"));
        assert!(j.starts_with(r#"{"urls":["http://h/\"x\""],"final_url":null,"#), "{j}");
        assert!(
            j.contains(r#""bytes":10,"fetched":5,"seconds":2.000000,"rate":2.500000,"#),
            "{j}"
        );
        assert!(
            j.ends_with(
                r#""checksum_verified":false,"exit_code":9,"error":"sha-256 mismatch"}
"#
            ),
            "{j}"
        );
    }

    #[test]
    fn human_units() {
        assert_eq!(super::human(17), "17 B");
        assert_eq!(super::human(1536), "1.5 KiB");
        assert_eq!(super::human(1 << 30), "1.0 GiB");
        assert_eq!(super::duration(3725.0), "1h02m");
    }
}
