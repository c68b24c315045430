//! What one run is asked to do, as the layers below the command line see it: the
//! download's [`Config`] (built by `cli` from the arguments), engine, I/O backend and
//! output choices, and the expected checksum. Nothing below `app` reads the command line.

use std::path::PathBuf;

use crate::err;
use crate::error::Result;

/// Which I/O backend runs the ring (`--io`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoChoice {
    /// io_uring, and epoll where the kernel refuses io_uring or lacks an op.
    Auto,
    /// io_uring only; refused = exit 7.
    Uring,
    /// epoll(7) with plain syscalls.
    Epoll,
}

/// Where the body goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputTarget {
    /// Standard output (`-o -`): one connection, written in order.
    Stdout,
    /// A file path; written as `PATH.part`, renamed when complete.
    File(PathBuf),
    /// Not given: the URL's last path segment (or Content-Disposition's name), in
    /// [`Config::dir`] or else the current directory.
    Default,
}

/// Most connections `-x` (and a list's `connections=`) may ask for.
pub const MAX_CONNECTIONS: usize = 64;

/// `--max-connections-per-host`'s default: aria2c's ceiling for connections to one server
/// (`-x` ≤ 16). RFC 9112 §9.4 asks clients to limit the connections they open to one
/// server and names no number; past 16 a client meets servers' per-client limits (nginx
/// `limit_conn`, S3's request-rate answers) rather than more bandwidth.
pub const MAX_PER_HOST: usize = 16;

/// Everything one download is asked to do (from the command line).
#[derive(Clone, Debug)]
pub struct Config {
    /// The URL to fetch (http or https); with mirrors, the first one given (it names the
    /// output).
    pub url: String,
    /// The further URLs of the same file (aria2c's mirrors), in the order given: each
    /// probed, checked against the first that answers, and given a share of the
    /// connections (docs/guide/mirrors.md "Mirrors").
    pub mirrors: Vec<MirrorUrl>,
    /// `-o/--output`.
    pub output: OutputTarget,
    /// `-d DIR`: where a name without a directory goes (the URL's, Content-Disposition's,
    /// a relative `-o` or `out=`); created when a file is about to be written there.
    pub dir: Option<PathBuf>,
    /// `-x/--connections`: concurrent Range connections, 1..=[`MAX_CONNECTIONS`].
    pub connections: usize,
    /// `--threads N`: reactors, each on its own thread with its own ring, pools and
    /// connections, 1..=64 ([`crate::cli`]'s `auto`: the CPUs the process may use). A
    /// file's ranges are spread over them, `connections` shared out among them.
    pub threads: usize,
    /// `--pin`: each reactor's thread on its own CPU (sched_setaffinity(2)).
    pub pin: bool,
    /// `--min-split-size SIZE` (aria2c's name), bytes, 4096..=1 GiB: a connection beyond
    /// the first opens only for each this many bytes still to fetch (see
    /// [`crate::schedule::connections_for`]).
    pub min_split_size: u64,
    /// `--max-connections-per-host N`, 1..=[`MAX_CONNECTIONS`] (default [`MAX_PER_HOST`]):
    /// most connections open at once to one origin (scheme, host, port and route), over
    /// every mirror on it.
    pub max_per_host: usize,
    /// `--engine`: the engine asked for; `None` = auto (see [`crate::engine::select`]).
    pub engine: Option<crate::engine::EngineKind>,
    /// `--io`.
    pub io: IoChoice,
    /// `--sqpoll`: ask io_uring for a kernel submission-queue poller
    /// (`IORING_SETUP_SQPOLL`); a usage error with `--io epoll`.
    pub sqpoll: bool,
    /// `-k/--insecure`: skip certificate verification.
    pub insecure: bool,
    /// `--ca-certificate FILE`: extra trust anchors (PEM).
    pub ca_certificate: Option<PathBuf>,
    /// `--pinnedpubkey sha256//BASE64[;…]`: SHA-256 digests of SubjectPublicKeyInfo DER;
    /// the server key must be one of them (empty: no pinning).
    pub pinned_public_keys: Vec<[u8; 32]>,
    /// `--force`: replace an existing output file.
    pub force: bool,
    /// `-q/--quiet`: no progress, no summary.
    pub quiet: bool,
    /// `-v/--verbose`: one level per flag.
    pub verbose: u8,
    /// `--max-tries N`: attempts per segment before the download fails.
    pub max_tries: u32,
    /// `--connect-timeout SECONDS`: finite, more than 0, at most [`MAX_TIMEOUT_S`];
    /// fractions allowed (`1.5`).
    pub connect_timeout_s: f64,
    /// `--stall-timeout SECONDS`: a connection that moves no byte this long is reset;
    /// finite, more than 0, at most [`MAX_TIMEOUT_S`]; fractions allowed (`0.5`).
    pub stall_timeout_s: f64,
    /// `-c/--continue`: resume `FILE.part` from its control file (asked for: a `.part`
    /// without one, or a finished `FILE`, is then said; without `-c` a valid control file
    /// resumes too, see [`Config::no_continue`]).
    pub resume: bool,
    /// `--no-continue`: start over even when `FILE.part` has a valid control file (by
    /// default ringdl resumes it, as aria2c does; `--force` starts over too).
    pub no_continue: bool,
    /// `--max-redirects N`.
    pub max_redirects: u32,
    /// `--allow-downgrade`: follow a redirect from https to http.
    pub allow_downgrade: bool,
    /// `--retry-wait SECONDS`: first backoff before a retry; doubles per try, with jitter.
    pub retry_wait_s: f64,
    /// `--checksum ALG=HEX`: verified before the rename.
    pub checksum: Option<Checksum>,
    /// `--content-disposition`: name the file from the Content-Disposition header.
    pub content_disposition: bool,
    /// `--buf-size BYTES`: most bytes one socket → pipe SPLICE moves (engine splice).
    pub splice_chunk: usize,
    /// `--write-threshold BYTES`: bytes held in the pipe before a pipe → file SPLICE.
    pub write_threshold: usize,
    /// `--proxy URL`: the HTTP proxy, over the environment's (`""`: none).
    pub proxy: Option<String>,
    /// `--noproxy LIST`: hosts that go direct, over the environment's `no_proxy`.
    pub noproxy: Option<String>,
    /// `--proxy-user USER:PASSWORD`: the proxy's Basic credentials, over the proxy URL's
    /// userinfo (curl's flag).
    pub proxy_user: Option<Credentials>,
    /// `--limit-rate RATE`: most bytes per second the whole download reads from its
    /// sockets (all connections together), at least 1.
    pub limit_rate: Option<u64>,
    /// `--resolve HOST:PORT:ADDR[,ADDR…]` (repeatable): addresses that replace the
    /// resolver's answer for HOST:PORT.
    pub resolve: Vec<Resolve>,
    /// `-H 'Name: value'` and `--user-agent` (as `User-Agent`), in order, each checked
    /// by [`http::check_field`]; a later `User-Agent` or `Accept` replaces an earlier one.
    pub headers: Vec<(String, String)>,
    /// Basic credentials: `--user USER:PASSWORD`, else the URL's userinfo.
    pub credentials: Option<Credentials>,
    /// `--checksum-file FILE`: a SHA256SUMS / SHA512SUMS file; the line for the output's
    /// name becomes [`Config::checksum`] before the download (see [`Checksum::from_sums`]).
    pub checksum_file: Option<PathBuf>,
    /// `--signature FILE|URL`: a detached signature over the output (or over
    /// `checksum_file`), verified before the rename (see [`crate::signature`]).
    pub signature: Option<String>,
    /// `--trusted-key FILE` (repeatable): the keys `signature` may come from.
    pub trusted_keys: Vec<PathBuf>,
    /// `--signature-namespace NAME`: the SSHSIG namespace required (default `file`).
    pub signature_namespace: String,
    /// Not an option: the most bytes the file may have, with why (a raw-message
    /// signature holds the whole file in memory); a larger Content-Length is refused
    /// (exit 2) before a byte is written.
    pub size_bound: Option<(u64, String)>,
    /// `--seed PATH` (repeatable): local files or block devices a delta update takes the
    /// target's pieces from (`app/delta.rs`); none: no delta.
    pub seeds: Vec<PathBuf>,
    /// `--max-delta-bytes N|P%`: the most remote bytes a delta may fetch.
    pub max_delta: Option<DeltaBound>,
    /// `--allow-full`: a delta whose server serves no ranges may fetch the whole file.
    pub allow_full: bool,
    /// Not an option: a delta's fetch (`app/delta.rs`). Only these byte ranges `[start,
    /// end)` of the remote file (sorted, disjoint; clipped at its end) are fetched, into
    /// the `.part` at their own offsets; the rest of it stays a hole. Ranges are required:
    /// a server that answers 200 fails the transfer (never a whole download), no space is
    /// preallocated, and the control file records only bytes of these ranges.
    pub fetch_only: Option<Vec<(u64, u64)>>,
    /// Not an option: a finished transfer leaves its `.part` and its control file (its
    /// size, validator and the ranges written) for the caller instead of renaming it
    /// (a delta's staging file, fetched in several steps).
    pub keep_part: bool,
    /// `--json FILE`: write the run's record there at the end (`-` = standard output,
    /// only when the data goes elsewhere).
    pub json: Option<PathBuf>,
    /// `--etag-compare FILE` (curl's): the entity-tag saved there goes out as
    /// `If-None-Match` (RFC 9110 §13.1.2); a missing or empty file sends no condition.
    pub etag_compare: Option<PathBuf>,
    /// `--etag-save FILE` (curl's): the strong ETag of the file that landed is written
    /// there (atomically) once it has landed; nothing is written on a 304 or a failure.
    pub etag_save: Option<PathBuf>,
    /// `-N/--timestamping` (wget's): `If-Modified-Since` from the output's modification
    /// time (RFC 9110 §13.1.3), and the output's time set from `Last-Modified` when it lands.
    pub timestamping: bool,
    /// The precondition of the first request to each mirror, read by `app` from
    /// `--etag-compare` or the output for `-N` (`None`: unconditional). A 304 to the
    /// download's first request leaves the output untouched.
    pub condition: Option<http::Condition>,
    /// Not an option: a list's file already there (no `.part` beside it), its size in
    /// bytes. Its first request asks for its first block; the server's size the same, it
    /// is kept and nothing more is fetched ([`crate::event::Outcome::NotModified`]) — on
    /// the size alone (a landed file keeps no validator): only `--checksum`, read back,
    /// proves its content. Another size: it is fetched again over it.
    pub kept: Option<u64>,
    /// Not an option: a list's file already there (kept or unfinished beside it) is
    /// replaced by the new one once that is complete. Unlike `--force` (the user's), a
    /// `.part` with its control file still resumes.
    pub replace: bool,
    /// `--offset BYTES`: where the image starts within a block-device output, bytes; a
    /// multiple of the device's logical block size (0 for any other output).
    pub offset: u64,
    /// `--control FILE`: the control file of a block-device output (a device has no
    /// directory of its own for `DEVICE.part.ringdl`); `-c` on a device needs it.
    pub control: Option<PathBuf>,
}

/// One `--resolve HOST:PORT:ADDR[,ADDR…]` (curl's syntax): connect to these addresses,
/// in this order, when the URL (or a redirect) names HOST:PORT; the request's Host header,
/// TLS SNI and certificate name check still use HOST.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolve {
    /// The host name, lowercased (an IPv6 literal without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// The addresses, in the order given; at least one.
    pub addrs: Vec<std::net::IpAddr>,
}

impl Resolve {
    /// Parses `HOST:PORT:ADDR[,ADDR…]`; an IPv6 address (and an IPv6 literal HOST) may be
    /// written in brackets (`example.org:443:[::1],127.0.0.1`).
    ///
    /// # Errors
    /// [`crate::error::Kind::Usage`] for a missing part, a bad port or a bad address.
    pub fn parse(v: &str) -> Result<Resolve> {
        let bad = |why: &str| err!(Usage, "--resolve {v:?}: {why} (HOST:PORT:ADDR[,ADDR...])");
        let (host, rest) = match v.strip_prefix('[') {
            Some(r) => {
                let (h, rest) = r.split_once(']').ok_or_else(|| bad("no ] after the host"))?;
                (h, rest.strip_prefix(':').ok_or_else(|| bad("no :PORT after the host"))?)
            }
            None => v.split_once(':').ok_or_else(|| bad("no :PORT"))?,
        };
        let (port, list) = rest.split_once(':').ok_or_else(|| bad("no :ADDR"))?;
        if host.is_empty() {
            return Err(bad("empty host"));
        }
        let port: u16 = port
            .parse()
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| bad("the port must be 1 to 65535"))?;
        let addrs = list
            .split(',')
            .map(|a| {
                let a = a.trim();
                let a = a.strip_prefix('[').and_then(|a| a.strip_suffix(']')).unwrap_or(a);
                a.parse::<std::net::IpAddr>()
                    .map_err(|_| bad(&format!("{a:?} is not an IP address")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Resolve {
            host: host.to_ascii_lowercase(),
            port,
            addrs,
        })
    }
}

/// One further URL of the file (a mirror), its userinfo already taken out.
#[derive(Clone, Debug)]
pub struct MirrorUrl {
    /// The URL without userinfo.
    pub url: String,
    /// `--user`, else this URL's own userinfo: sent only to this URL's origin.
    pub credentials: Option<Credentials>,
}

/// A user name and password for Basic authentication (RFC 7617), as bytes (the URL's
/// userinfo is percent-decoded). `Debug` shows neither.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user-id (no `:`, RFC 7617 §2).
    pub user: Vec<u8>,
    /// The password.
    pub password: Vec<u8>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials(<redacted>)")
    }
}

/// `--max-delta-bytes`: the most a delta may fetch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DeltaBound {
    /// At most this many bytes.
    Bytes(u64),
    /// At most this percentage of what a full download would fetch.
    Percent(f64),
}

impl DeltaBound {
    /// The bound in bytes for a file whose full download is `full` bytes.
    pub fn bytes(self, full: u64) -> u64 {
        match self {
            DeltaBound::Bytes(b) => b,
            DeltaBound::Percent(p) => (full as f64 * p / 100.0) as u64,
        }
    }
}

/// An expected digest, `--checksum sha-256=HEX` or `sha-512=HEX`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checksum {
    /// `sha-256` or `sha-512`.
    pub algorithm: &'static ring::digest::Algorithm,
    /// The name as given on the command line, lowercased.
    pub name: &'static str,
    /// Expected digest bytes.
    pub expected: Vec<u8>,
}

impl Checksum {
    /// Parses `sha-256=HEX` / `sha-512=HEX` (also `sha256`, `sha512`; hex in either case).
    ///
    /// # Errors
    /// [`crate::error::Kind::Usage`] for an unknown algorithm or a digest of the wrong length.
    pub fn parse(v: &str) -> Result<Checksum> {
        let (alg, hex) = v
            .split_once('=')
            .ok_or_else(|| err!(Usage, "--checksum wants ALG=HEX, e.g. sha-256=9f86d0..."))?;
        let (algorithm, name) = match alg.to_ascii_lowercase().as_str() {
            "sha-256" | "sha256" => (&ring::digest::SHA256, "sha-256"),
            "sha-512" | "sha512" => (&ring::digest::SHA512, "sha-512"),
            a => return Err(err!(Usage, "--checksum: unknown algorithm {a:?} (sha-256 or sha-512)")),
        };
        let hex = hex.trim();
        if hex.len() != 2 * algorithm.output_len() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(err!(
                Usage,
                "--checksum: a {name} digest is {} hex digits",
                2 * algorithm.output_len()
            ));
        }
        Ok(Checksum::from_hex(algorithm, name, hex))
    }

    /// `hex` (checked: 2 × the algorithm's output length, hex digits) as a checksum.
    fn from_hex(algorithm: &'static ring::digest::Algorithm, name: &'static str, hex: &str) -> Checksum {
        let expected = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex checked"))
            .collect();
        Checksum {
            algorithm,
            name,
            expected,
        }
    }

    /// Picks the line for one of `names` (tried in order: the output's file name, then the
    /// URL's) in a checksum file `text` read from `source`, in the formats `sha256sum` /
    /// `sha512sum` write (GNU coreutils: `HEX  NAME`, `HEX *NAME`, a leading `\` for an
    /// escaped name) and their `--tag` form (`SHA256 (NAME) = HEX`), as Debian, Ubuntu and
    /// Alpine publish them. The digest's length picks the algorithm (64 hex digits:
    /// SHA-256, 128: SHA-512). A line's name matches exactly (a leading `./` ignored) or,
    /// when no line does, by its last path component when only one digest has that name.
    /// Lines that fit no format are skipped.
    ///
    /// # Errors
    /// [`crate::error::Kind::Usage`] when no line names any of `names`, or when lines for
    /// the same name in different directories disagree.
    pub fn from_sums(text: &str, names: &[&str], source: &str) -> Result<Checksum> {
        // A byte-order mark (Notepad, PowerShell) is not part of the first line.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let lines: Vec<(&str, String)> = text.lines().filter_map(sums_line).collect();
        for want in names {
            let exact: Vec<&str> = lines
                .iter()
                .filter(|(_, n)| n.strip_prefix("./").unwrap_or(n) == *want)
                .map(|(h, _)| *h)
                .collect();
            if let Some(first) = exact.first() {
                // Two digests of one length for one name: which is right is not ours to
                // guess (`sha256sum -c` would fail one of them).
                if exact
                    .iter()
                    .any(|h| h.len() == first.len() && !h.eq_ignore_ascii_case(first))
                {
                    return Err(err!(
                        Usage,
                        "--checksum-file {source}: several lines for {want:?} give different digests"
                    ));
                }
                return Ok(Checksum::of_length(first));
            }
            let mut by_base = lines
                .iter()
                .filter(|(_, n)| n.rsplit('/').next() == Some(*want))
                .map(|(h, _)| h.to_ascii_lowercase());
            if let Some(first) = by_base.next() {
                if by_base.any(|h| h != first) {
                    return Err(err!(
                        Usage,
                        "--checksum-file {source}: several lines for {want:?} in different directories disagree"
                    ));
                }
                return Ok(Checksum::of_length(&first));
            }
        }
        Err(err!(
            Usage,
            "--checksum-file {source}: no SHA-256 or SHA-512 line for {} ({} usable line{})",
            names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(" or "),
            lines.len(),
            if lines.len() == 1 { "" } else { "s" }
        ))
    }

    /// A hex digest of 64 or 128 digits (checked by [`sums_line`]).
    fn of_length(hex: &str) -> Checksum {
        if hex.len() == 64 {
            Checksum::from_hex(&ring::digest::SHA256, "sha-256", hex)
        } else {
            Checksum::from_hex(&ring::digest::SHA512, "sha-512", hex)
        }
    }
}

/// A checksum file's bytes as text: UTF-8, with or without a byte-order mark (EF BB BF,
/// which Windows tools write), or UTF-16 with its byte-order mark (FF FE little-endian,
/// FE FF big-endian: what Windows PowerShell 5's `Out-File` and `>` write). Bytes that are
/// not valid in the encoding become U+FFFD, so such a line matches no digest.
pub fn sums_text(bytes: &[u8]) -> String {
    let utf16 = |rest: &[u8], from: fn([u8; 2]) -> u16| {
        let units: Vec<u16> = rest.chunks(2).map(|c| from([c[0], *c.get(1).unwrap_or(&0)])).collect();
        String::from_utf16_lossy(&units)
    };
    match bytes {
        [0xEF, 0xBB, 0xBF, rest @ ..] => String::from_utf8_lossy(rest).into_owned(),
        [0xFF, 0xFE, rest @ ..] => utf16(rest, u16::from_le_bytes),
        [0xFE, 0xFF, rest @ ..] => utf16(rest, u16::from_be_bytes),
        _ => String::from_utf8_lossy(bytes).into_owned(),
    }
}

/// One checksum-file line as (hex digest of 64 or 128 digits, name), or `None`.
fn sums_line(line: &str) -> Option<(&str, String)> {
    let line = line.trim_end_matches('\r');
    let is_digest = |h: &str| (h.len() == 64 || h.len() == 128) && h.bytes().all(|b| b.is_ascii_hexdigit());
    // BSD / --tag: `SHA256 (NAME) = HEX`.
    if let Some((left, hex)) = line.rsplit_once(") = ")
        && let Some((alg, name)) = left.split_once(" (")
        && matches!(alg, "SHA256" | "SHA512")
        && is_digest(hex)
    {
        return Some((hex, name.to_owned()));
    }
    // GNU: `[\]HEX  NAME` or `[\]HEX *NAME` (a `\` escapes `\\` and `\n` in the name).
    let (escaped, line) = match line.strip_prefix('\\') {
        Some(rest) => (true, rest),
        None => (false, line),
    };
    let (hex, rest) = line.split_once(' ')?;
    let name = rest.strip_prefix([' ', '*'])?;
    if !is_digest(hex) || name.is_empty() {
        return None;
    }
    let name = if escaped {
        name.replace("\\n", "\n").replace("\\\\", "\\")
    } else {
        name.to_owned()
    };
    Some((hex, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn sums_files_pick_the_line_by_name_and_length() {
        let b512 = "ab".repeat(64);
        let text = format!(
            "# comment\n\
             {A}  other.iso\n\
             garbage line\n\
             {A}x  bad.iso\n\
             {}  ./fw.bin\r\n\
             {b512} *img.bin\n\
             SHA256 (tagged.bin) = {A}\n\
             \\{A}  back\\\\slash\n\
             {A}  sub/deep.bin\n",
            A.to_uppercase()
        );
        let c = Checksum::from_sums(&text, &["fw.bin"], "SUMS").unwrap();
        assert_eq!((c.name, c.expected.len()), ("sha-256", 32));
        assert_eq!(c.expected[0], 0x9f);
        let c = Checksum::from_sums(&text, &["img.bin"], "SUMS").unwrap();
        assert_eq!((c.name, c.expected), ("sha-512", vec![0xab; 64]));
        assert!(Checksum::from_sums(&text, &["tagged.bin"], "SUMS").is_ok());
        assert!(Checksum::from_sums(&text, &["back\\slash"], "SUMS").is_ok());
        assert!(Checksum::from_sums(&text, &["deep.bin"], "SUMS").is_ok());
        // The second name is tried when the first has no line.
        assert!(Checksum::from_sums(&text, &["out.bin", "other.iso"], "SUMS").is_ok());
        for missing in ["bad.iso", "garbage", "nothing.bin"] {
            let e = Checksum::from_sums(&text, &[missing], "SUMS").unwrap_err();
            assert_eq!(e.kind, crate::error::Kind::Usage);
            assert!(e.msg.contains(missing), "{}", e.msg);
        }
        let clash = format!("{A}  a/x.bin\n{}  b/x.bin\n", "0".repeat(64));
        assert!(Checksum::from_sums(&clash, &["x.bin"], "SUMS").is_err());
        // The same name twice with two SHA-256 digests: refused, whichever comes first;
        // a SHA-256 and a SHA-512 line for one name are no clash.
        let zeros = "0".repeat(64);
        for twice in [
            format!("{A}  x.bin\n{zeros}  x.bin\n"),
            format!("{zeros}  x.bin\n{A}  x.bin\n"),
        ] {
            let e = Checksum::from_sums(&twice, &["x.bin"], "SUMS").unwrap_err();
            assert!(e.msg.contains("different digests"), "{}", e.msg);
        }
        let both = format!("{A}  x.bin\n{b512}  x.bin\n{A}  ./x.bin\n");
        assert_eq!(Checksum::from_sums(&both, &["x.bin"], "SUMS").unwrap().name, "sha-256");
    }

    /// Issue 22: Windows tools write a byte-order mark and upper-case hex; the line for
    /// the file may be the first one, right after the mark.
    #[test]
    fn sums_files_with_a_byte_order_mark_and_upper_case_hex() {
        let upper = A.to_uppercase();
        let want = Checksum::from_sums(&format!("{A}  fw.bin\n"), &["fw.bin"], "SUMS").unwrap();
        let text = format!("{upper} *fw.bin\r\n{}  other.bin\r\n", "0".repeat(64));
        let mut utf8 = b"\xEF\xBB\xBF".to_vec();
        utf8.extend_from_slice(text.as_bytes());
        let mut le = vec![0xFF, 0xFE];
        let mut be = vec![0xFE, 0xFF];
        for u in text.encode_utf16() {
            le.extend_from_slice(&u.to_le_bytes());
            be.extend_from_slice(&u.to_be_bytes());
        }
        for bytes in [&utf8, &le, &be, &text.as_bytes().to_vec()] {
            let got = Checksum::from_sums(&sums_text(bytes), &["fw.bin"], "SUMS").unwrap();
            assert_eq!(got, want);
        }
        // The mark given to from_sums directly (text read some other way).
        let marked = format!("\u{feff}{upper}  fw.bin\n");
        assert_eq!(Checksum::from_sums(&marked, &["fw.bin"], "SUMS").unwrap(), want);
        // The BSD/--tag form, upper-case hex after a mark.
        let tagged = format!("\u{feff}SHA256 (fw.bin) = {upper}\n");
        assert_eq!(Checksum::from_sums(&tagged, &["fw.bin"], "SUMS").unwrap(), want);
        // Without the fix the mark made the first line no line at all.
        assert_eq!(sums_line(&format!("\u{feff}{A}  fw.bin")), None);
        // Invalid bytes are no digest.
        assert!(Checksum::from_sums(&sums_text(&[0xFF, 0xFE, 0x41]), &["fw.bin"], "SUMS").is_err());
    }
}
