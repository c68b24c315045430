//! Command line: options (lexopt), help and version text.

use std::path::PathBuf;

use crate::config::{
    Checksum, Config, Credentials, IoChoice, MAX_CONNECTIONS, MAX_PER_HOST, MirrorUrl, OutputTarget, Resolve,
};
use crate::engine::EngineKind;
use crate::err;
use crate::error::Result;

/// What the command line asks for.
pub enum Command {
    /// Download with these options.
    Download(Box<Config>),
    /// `-i` or `-Z`: several files, one after another; the options apply to each (its
    /// URLs are not set yet: see [`set_urls`]).
    Files(Box<Config>, Files),
    /// Print help and exit 0.
    Help,
    /// Print the version and exit 0.
    Version,
}

/// Several files in one run (`-i`, `-Z`).
#[derive(Debug, Default)]
pub struct Files {
    /// `-i FILE`: the list to read (`-` = standard input).
    pub input: Option<PathBuf>,
    /// The files given on the command line, each as its URLs (one file of mirrors, or
    /// with `-Z` one file per URL); they come before the list's.
    pub given: Vec<Vec<String>>,
    /// `--fail-fast`: stop at the first file that fails.
    pub fail_fast: bool,
    /// `-j N`: files in flight at once (None: [`DEFAULT_JOBS`]).
    pub jobs: Option<usize>,
}

/// Files in flight at once without `-j` (aria2c's default).
pub const DEFAULT_JOBS: usize = 5;
/// The most `-j` takes (each file in flight holds its own write blocks).
pub const MAX_JOBS: usize = 64;
/// Most reactor threads (`--threads`).
pub const MAX_THREADS: usize = 64;

/// The `--help` text.
pub const HELP: &str = "\
ringdl - download files over HTTP or HTTPS through io_uring, O_DIRECT and rustls:
one file or many (-i LIST, -Z URL...), each over up to -x Range connections

Usage: ringdl [OPTIONS] URL [MIRROR-URL...]
       ringdl [OPTIONS] -Z URL...          (each URL its own file)
       ringdl [OPTIONS] -i LIST            (the files of a list)

More than one URL: mirrors of one file (as aria2c takes them). Connections are spread
over them; the first URL names the output; a mirror whose size or validator (ETag, else
Last-Modified; any validator with --checksum) differs from the first that answers, or
that fails, is dropped with a note. See docs/guide/mirrors.md.

Several files (up to -j at once; the options below apply to each):
  -i, --input-file FILE     fetch the files listed in FILE ('-' = standard input),
                            aria2c's format: a line of TAB-separated URLs (mirrors of one
                            file), then indented key=value lines for that file: out=,
                            dir=, checksum=ALG=HEX, header=, connections=; # comments
  -Z, --force-sequential    each URL on the command line is its own file (without -Z,
                            several URLs are mirrors of one file)
  -d, --dir DIR             where names without a directory go (created if missing)
  -j, --max-concurrent-downloads N
                            files in flight at once, 1-64 (default 5, as aria2c);
                            their connections count together against
                            --max-connections-per-host
      --fail-fast           stop at the first file that fails (default: fetch the
                            others, exit with the first failure's code)

Output:
  -o, --output FILE         write to FILE ('-' = standard output); default: the URL's
                            last path segment in the current directory
      --force               replace FILE if it exists
  -c, --continue            resume FILE.part from its control file (FILE.part.ringdl);
                            without -c ringdl resumes too when that control file is
                            there, and starts over when it is not valid
      --no-continue         start over even when FILE.part can be resumed (so does
                            --force)
      --content-disposition name the file from Content-Disposition (base name only)
      --checksum ALG=HEX    verify sha-256 or sha-512 (also sha256, sha512) before the
                            rename
      --checksum-file FILE  take the digest from a SHA256SUMS / SHA512SUMS file: the line
                            for the output's file name (or the URL's); none = error
                            before the download
      --signature FILE|URL  a detached signature (SSHSIG from ssh-keygen -Y sign, signify
                            / usign, minisign) over the file, or over --checksum-file when
                            one is given; checked before the rename (exit 10 if it fails)
      --trusted-key FILE    a key the signature may come from (repeatable): an OpenSSH
                            public key or allowed-signers file, a signify or minisign .pub
      --signature-namespace NAME
                            the SSHSIG namespace to require (default file)

      --etag-compare FILE   send the ETag saved in FILE as If-None-Match while the
                            output is there; 304 Not Modified leaves it untouched
                            (checked against --checksum, --signature) and exits 0
                            (a missing or empty FILE: no condition)
      --etag-save FILE      when the file has landed, save its ETag in FILE
  -N, --timestamping        send If-Modified-Since from the output's modification
                            time; set that time from Last-Modified when it lands
      --offset BYTES        block-device output: write the image at this offset (a
                            multiple of the logical block size)
      --control FILE        block-device output: keep the control file for -c here

Connections and I/O:
  -x, --connections N       concurrent Range connections, 1-64 (default 4)
      --threads N|auto      reactors on N threads, each with its own ring, buffers
                            and connections, sharing a file's ranges; -x (and
                            --max-connections-per-host) is shared out over them, so
                            a file spreads over at most -x; only a regular file from one
                            URL served in ranges spreads (not -o -, FIFOs, devices,
                            mirrors, --limit-rate); a list at -j 2+ places whole
                            files on them instead (-j shared over them; a large file
                            left alone starts again from what landed, spread);
                            auto: the CPUs the process may use; 1-64 (default 1)
      --pin                 each reactor's thread on its own CPU of those the
                            process may use (sched_setaffinity); off by default
      --min-split-size SIZE open one connection per SIZE bytes still to fetch, up to
                            -x: the first connection alone learns the size; 512K, 4M,
                            1G (powers of 1024; 4K to 1G; default 4M)
      --max-connections-per-host N
                            most connections open at once to one server (scheme,
                            host, port, proxy), over its mirrors and the files in
                            flight, 1-64 (default 16); a
                            server's own cap, learned from a 503, holds for the
                            run's later files too
      --engine NAME         auto | direct | buffered | splice | ktls-direct (default auto:
                            ktls-direct when the kernel has kTLS, else direct)
      --io NAME             auto | uring | epoll (default auto: io_uring, epoll where
                            io_uring is refused, e.g. by a container's seccomp profile)
      --sqpoll              io_uring: a kernel thread polls the submission queue
                            (IORING_SETUP_SQPOLL, Linux 5.13+ unprivileged): fewer
                            syscalls, one more busy core while data flows; not with
                            --io epoll (docs/design.md \"Copy budget\" has the costs)
      --limit-rate RATE     most bytes/s for the whole download (all connections):
                            500K, 10M, 1G (powers of 1024); default: no limit
      --buf-size BYTES      splice: most bytes per socket->pipe SPLICE (default 1048576)
      --write-threshold B   splice: bytes held in the pipe before writing (default 1048576)

Network:
      --proxy URL           proxy: [SCHEME://][user:password@]host[:port] (port
                            default 1080). SCHEME http (default; https goes through
                            a CONNECT tunnel), socks5 (SOCKS5, names resolved here)
                            or socks5h (the proxy resolves them); \"\" = none.
                            Default: the environment, as curl reads it (https_proxy,
                            http_proxy, all_proxy; upper case too, except HTTP_PROXY)
      --proxy-user USER:PASSWORD
                            the proxy's credentials (HTTP Basic, or SOCKS5 username/
                            password), apart from the proxy URL (over its
                            user:password@); never printed
      --noproxy LIST        hosts that go direct: comma-separated names (suffix
                            match), IP addresses, CIDR networks, or '*'; default
                            no_proxy / NO_PROXY
      --resolve HOST:PORT:ADDR[,ADDR...]
                            connect to these addresses for HOST:PORT, not the resolver's
                            (repeatable; the name still goes in Host, SNI and the check)
      --connect-timeout S   seconds to wait for a TCP connect, fractions allowed (default 30)
      --stall-timeout S     reset a connection that moves no byte for S seconds, fractions
                            allowed (default 60)
      --max-tries N         attempts per segment before giving up (default 5)
      --retry-wait S        first wait before a retry in seconds, doubled per try, at
                            most 30 (default 0.5)
      --max-redirects N     redirects to follow (default 10)
      --allow-downgrade     follow a redirect from https to http

Request:
  -H, --header 'NAME: VALUE'
                            send this request header (repeatable); 'NAME:' with no value
                            removes User-Agent or Accept. Authorization and Cookie go only
                            to the URL's origin, never after a redirect to another one
  -A, --user-agent STR      User-Agent to send (default ringdl/VERSION; '' sends none)
  -u, --user USER:PASSWORD  Basic authentication (also from https://USER:PASSWORD@host/,
                            percent-decoded); sent only to the URL's origin

TLS:
  -k, --insecure            do not verify the server certificate (prints a warning)
      --ca-certificate FILE trust the PEM certificates in FILE as well
      --pinnedpubkey sha256//BASE64[;sha256//BASE64...]
                            the server key must have one of these SHA-256 hashes
                            (SubjectPublicKeyInfo); checked with -k too

Reporting:
  -q, --quiet               no progress line, no summary
  -v, --verbose             say more (engine choice, segments, retries); repeat for more
      --json FILE           at the end, success or failure, write one JSON object (size,
                            bytes fetched, seconds, rate, engine, TLS, connections, retries,
                            redirects, checksum, exit code, error) to FILE ('-' = standard
                            output, when the data goes to a file)
  -h, --help                print this help
  -V, --version             print the version

Trust: bundled Mozilla roots (webpki-roots), plus SSL_CERT_FILE and SSL_CERT_DIR,
plus --ca-certificate (CAs, or the server's own certificate). The host name is checked
against the certificate's names whatever the anchor; only -k skips it.

Exit status: 0 ok, 1 internal error, 2 usage, 3 network, 4 TLS, 5 HTTP status,
6 protocol violation, 7 local I/O, 8 interrupted, 9 checksum mismatch,
10 signature not verified.
The manual: man ./ringdl.1 (in the source tree).
";

/// Parses `args` (without the program name).
///
/// # Errors
/// [`crate::error::Kind::Usage`] for unknown options, missing or bad values, and a missing URL.
pub fn parse(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<Command> {
    use lexopt::prelude::*;
    let mut p = lexopt::Parser::from_args(args);
    let mut urls: Vec<String> = Vec::new();
    let mut files = Files::default();
    let mut each = false;
    let mut o = Config {
        url: String::new(),
        mirrors: Vec::new(),
        output: OutputTarget::Default,
        dir: None,
        connections: 4,
        threads: 1,
        min_split_size: crate::schedule::MIN_SPLIT_SIZE,
        max_per_host: MAX_PER_HOST,
        engine: None,
        io: IoChoice::Auto,
        sqpoll: false,
        pin: false,
        insecure: false,
        ca_certificate: None,
        pinned_public_keys: Vec::new(),
        force: false,
        quiet: false,
        verbose: 0,
        max_tries: 5,
        connect_timeout_s: 30.0,
        stall_timeout_s: 60.0,
        resume: false,
        no_continue: false,
        max_redirects: 10,
        allow_downgrade: false,
        retry_wait_s: 0.5,
        checksum: None,
        content_disposition: false,
        splice_chunk: 1 << 20,
        write_threshold: 1 << 20,
        proxy: None,
        noproxy: None,
        proxy_user: None,
        limit_rate: None,
        resolve: Vec::new(),
        headers: Vec::new(),
        credentials: None,
        json: None,
        checksum_file: None,
        etag_compare: None,
        etag_save: None,
        timestamping: false,
        condition: None,
        kept: None,
        replace: false,
        offset: 0,
        control: None,
        signature: None,
        trusted_keys: Vec::new(),
        signature_namespace: "file".to_owned(),
        size_bound: None,
    };
    let usage = |e: lexopt::Error| err!(Usage, "{e} (see ringdl --help)");
    while let Some(arg) = p.next().map_err(usage)? {
        match arg {
            Short('h') | Long("help") => return Ok(Command::Help),
            Short('i') | Long("input-file") => files.input = Some(path_value(&mut p, "-i")?),
            Short('Z') | Long("force-sequential") => each = true,
            Short('d') | Long("dir") => o.dir = Some(path_value(&mut p, "-d")?),
            Long("fail-fast") => files.fail_fast = true,
            Short('j') | Long("max-concurrent-downloads") => {
                let n: usize = number(&mut p, "-j")?;
                if !(1..=MAX_JOBS).contains(&n) {
                    return Err(err!(Usage, "-j must be 1 to {MAX_JOBS}, not {n}"));
                }
                files.jobs = Some(n);
            }
            Short('V') | Long("version") => return Ok(Command::Version),
            Short('o') | Long("output") => {
                let v = p.value().map_err(usage)?;
                if v.is_empty() {
                    return Err(err!(Usage, "-o needs a file name"));
                }
                o.output = if v == "-" {
                    OutputTarget::Stdout
                } else {
                    OutputTarget::File(PathBuf::from(v))
                };
            }
            Short('x') | Long("connections") => {
                let n: usize = number(&mut p, "--connections")?;
                if !(1..=MAX_CONNECTIONS).contains(&n) {
                    return Err(err!(Usage, "--connections must be 1 to {MAX_CONNECTIONS}, not {n}"));
                }
                o.connections = n;
            }
            Long("threads") => {
                let v = p.value().map_err(usage)?;
                let s = v.to_string_lossy();
                o.threads = if s.eq_ignore_ascii_case("auto") {
                    std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS))
                } else {
                    match s.parse::<usize>() {
                        Ok(n) if (1..=MAX_THREADS).contains(&n) => n,
                        _ => return Err(err!(Usage, "--threads must be 1 to {MAX_THREADS} or auto, not {s:?}")),
                    }
                };
            }
            Long("engine") => {
                let v = p.value().map_err(usage)?;
                o.engine = match v.to_str() {
                    Some("auto") => None,
                    name => Some(name.and_then(EngineKind::from_name).ok_or_else(|| {
                        err!(
                            Usage,
                            "--engine must be auto, direct, buffered, splice or ktls-direct, not {}",
                            v.to_string_lossy()
                        )
                    })?),
                };
            }
            Long("io") => {
                let v = p.value().map_err(usage)?;
                o.io = match v.to_str() {
                    Some("auto") => IoChoice::Auto,
                    Some("uring" | "io_uring") => IoChoice::Uring,
                    Some("epoll") => IoChoice::Epoll,
                    _ => {
                        return Err(err!(
                            Usage,
                            "--io must be auto, uring or epoll, not {}",
                            v.to_string_lossy()
                        ));
                    }
                };
            }
            Long("sqpoll") => o.sqpoll = true,
            Long("pin") => o.pin = true,
            Short('k') | Long("insecure") => o.insecure = true,
            Long("ca-certificate") => o.ca_certificate = Some(p.value().map_err(usage)?.into()),
            Long("pinnedpubkey") => {
                let v = p.value().map_err(usage)?;
                o.pinned_public_keys = crate::control::tls::parse_pins(&v.to_string_lossy())?;
            }
            Long("force") => o.force = true,
            Short('q') | Long("quiet") => o.quiet = true,
            Short('v') | Long("verbose") => o.verbose = o.verbose.saturating_add(1),
            Long("max-tries") => {
                o.max_tries = number(&mut p, "--max-tries")?;
                if o.max_tries == 0 {
                    return Err(err!(Usage, "--max-tries must be at least 1"));
                }
            }
            Long("connect-timeout") => o.connect_timeout_s = timeout(&mut p, "--connect-timeout")?,
            Long("stall-timeout") => o.stall_timeout_s = timeout(&mut p, "--stall-timeout")?,
            Short('c') | Long("continue") => o.resume = true,
            Long("no-continue") => o.no_continue = true,
            Long("max-redirects") => o.max_redirects = number(&mut p, "--max-redirects")?,
            Long("allow-downgrade") => o.allow_downgrade = true,
            Long("retry-wait") => {
                let v: f64 = number(&mut p, "--retry-wait")?;
                if !(0.0..=3600.0).contains(&v) {
                    return Err(err!(Usage, "--retry-wait must be 0 to 3600 seconds"));
                }
                o.retry_wait_s = v;
            }
            Long("checksum") => {
                let v = p.value().map_err(usage)?;
                o.checksum = Some(Checksum::parse(&v.to_string_lossy())?);
            }
            Long("content-disposition") => o.content_disposition = true,
            Long("proxy") => o.proxy = Some(utf8(p.value().map_err(usage)?, "--proxy")?),
            Long("limit-rate") => o.limit_rate = Some(rate(&utf8(p.value().map_err(usage)?, "--limit-rate")?)?),
            Long("max-connections-per-host") => {
                let n: usize = number(&mut p, "--max-connections-per-host")?;
                if !(1..=MAX_CONNECTIONS).contains(&n) {
                    return Err(err!(
                        Usage,
                        "--max-connections-per-host must be 1 to {MAX_CONNECTIONS}, not {n}"
                    ));
                }
                o.max_per_host = n;
            }
            Long("min-split-size") => {
                o.min_split_size = split_size(&utf8(p.value().map_err(usage)?, "--min-split-size")?)?;
            }
            Long("noproxy") => o.noproxy = Some(utf8(p.value().map_err(usage)?, "--noproxy")?),
            Long("resolve") => {
                let v = p.value().map_err(usage)?;
                o.resolve.push(Resolve::parse(&v.to_string_lossy())?);
            }
            Long("checksum-file") => o.checksum_file = Some(p.value().map_err(usage)?.into()),
            Long("etag-compare") => o.etag_compare = Some(path_value(&mut p, "--etag-compare")?),
            Long("etag-save") => o.etag_save = Some(path_value(&mut p, "--etag-save")?),
            Short('N') | Long("timestamping") => o.timestamping = true,
            Long("offset") => o.offset = number(&mut p, "--offset")?,
            Long("control") => o.control = Some(path_value(&mut p, "--control")?),
            Long("signature") => o.signature = Some(utf8(p.value().map_err(usage)?, "--signature")?),
            Long("trusted-key") => o.trusted_keys.push(p.value().map_err(usage)?.into()),
            Long("signature-namespace") => {
                o.signature_namespace = utf8(p.value().map_err(usage)?, "--signature-namespace")?;
                if o.signature_namespace.is_empty() {
                    return Err(err!(Usage, "--signature-namespace: the namespace may not be empty"));
                }
            }
            Long("json") => {
                let v = p.value().map_err(usage)?;
                if v.is_empty() {
                    return Err(err!(Usage, "--json needs a file name ('-' = standard output)"));
                }
                o.json = Some(PathBuf::from(v));
            }
            Short('H') | Long("header") => {
                let v = p.value().map_err(usage)?;
                let v = v
                    .into_string()
                    .map_err(|_| err!(Usage, "-H: the header is not valid UTF-8"))?;
                let (name, value) = v
                    .split_once(':')
                    .ok_or_else(|| err!(Usage, "-H wants 'Name: value', not {v:?}"))?;
                add_header(&mut o.headers, name, value.trim_matches([' ', '\t']))?;
            }
            Short('A') | Long("user-agent") => {
                let v = p.value().map_err(usage)?;
                let v = v
                    .into_string()
                    .map_err(|_| err!(Usage, "--user-agent is not valid UTF-8"))?;
                add_header(&mut o.headers, "User-Agent", &v)?;
            }
            Short('u') | Long("user") => o.credentials = Some(user_password(&mut p, "--user")?),
            Long("proxy-user") => o.proxy_user = Some(user_password(&mut p, "--proxy-user")?),
            Long("buf-size") => o.splice_chunk = size(number(&mut p, "--buf-size")?, "--buf-size")?,
            Long("write-threshold") => {
                o.write_threshold = size(number(&mut p, "--write-threshold")?, "--write-threshold")?
            }
            Value(v) => urls.push(
                v.into_string()
                    .map_err(|v| err!(Usage, "URL is not valid UTF-8: {}", v.to_string_lossy()))?,
            ),
            _ => return Err(usage(arg.unexpected())),
        }
    }
    if o.output == OutputTarget::Stdout && o.json.as_deref() == Some(std::path::Path::new("-")) {
        return Err(err!(
            Usage,
            "--json - and -o - both want standard output: give --json a file"
        ));
    }
    if o.sqpoll && o.io == IoChoice::Epoll {
        return Err(err!(
            Usage,
            "--sqpoll is an io_uring setup flag: it cannot go with --io epoll"
        ));
    }
    if o.resume && o.no_continue {
        return Err(err!(Usage, "give -c or --no-continue, not both"));
    }
    if o.timestamping && o.etag_compare.is_some() {
        return Err(err!(
            Usage,
            "give -N or --etag-compare, not both (a server ignores If-Modified-Since when If-None-Match is sent)"
        ));
    }
    if o.timestamping && o.output == OutputTarget::Stdout {
        return Err(err!(
            Usage,
            "-N compares the output file's time: it cannot go with -o -"
        ));
    }
    if o.checksum.is_some() && o.checksum_file.is_some() {
        return Err(err!(Usage, "give --checksum or --checksum-file, not both"));
    }
    if o.signature.is_some() == o.trusted_keys.is_empty() {
        return Err(err!(
            Usage,
            "--signature and --trusted-key go together: a signature is checked against the keys you trust"
        ));
    }
    if files.input.is_some() || each {
        refuse_with_files(&o)?;
        if urls.is_empty() && files.input.is_none() {
            return Err(err!(Usage, "missing URL (see ringdl --help)"));
        }
        files.given = match each {
            true => urls.into_iter().map(|u| vec![u]).collect(),
            false if urls.is_empty() => Vec::new(),
            false => vec![urls],
        };
        return Ok(Command::Files(Box::new(o), files));
    }
    if urls.is_empty() {
        return Err(err!(Usage, "missing URL (see ringdl --help)"));
    }
    set_urls(&mut o, urls);
    Ok(Command::Download(Box::new(o)))
}

/// Sets the URL and the mirrors of `o` (which has none yet) from `urls` (at least one).
/// Credentials never stay in a URL: it is printed and saved in the control file.
/// `--user` (already in `o`) goes to every URL; a URL's own userinfo only to that URL.
pub(crate) fn set_urls(o: &mut Config, urls: Vec<String>) {
    let mut urls = urls.into_iter();
    let url = urls.next().unwrap_or_default();
    let given = o.credentials.clone();
    let (url, userinfo) = http::split_userinfo(&url);
    o.url = url;
    if o.credentials.is_none()
        && let Some((user, password)) = userinfo
    {
        o.credentials = Some(Credentials { user, password });
    }
    o.mirrors.clear();
    for m in urls {
        let (url, userinfo) = http::split_userinfo(&m);
        let own = userinfo.map(|(user, password)| Credentials { user, password });
        o.mirrors.push(MirrorUrl {
            url,
            credentials: given.clone().or(own),
        });
    }
}

/// The options that name one file, refused with `-i` / `-Z` (exit 2): each file of a run
/// needs its own name, digest, signature, validator file or device place.
///
/// # Errors
/// [`crate::error::Kind::Usage`] naming the option and what to use instead.
fn refuse_with_files(o: &Config) -> Result<()> {
    let one_file = [
        (
            o.output != OutputTarget::Default,
            "-o",
            "give each file its name with out= in a list (-i)",
        ),
        (
            o.checksum.is_some(),
            "--checksum",
            "give each file its digest with checksum= in a list, or use --checksum-file",
        ),
        (
            o.signature.is_some(),
            "--signature",
            "fetch and check the signed file in a run of its own",
        ),
        (
            o.etag_compare.is_some() || o.etag_save.is_some(),
            "--etag-compare/--etag-save",
            "they keep one file's ETag",
        ),
        (
            o.offset != 0 || o.control.is_some(),
            "--offset/--control",
            "a block device takes one image",
        ),
    ];
    match one_file.iter().find(|(given, ..)| *given) {
        Some((_, name, instead)) => Err(err!(
            Usage,
            "{name} names one file: it cannot go with several files (-i, -Z); {instead}"
        )),
        None => Ok(()),
    }
}

/// `--limit-rate` as curl takes it: bytes per second, with an optional suffix `K`, `M` or
/// `G` (either case; powers of 1024); fractions allowed (`1.5M`).
///
/// # Errors
/// [`crate::error::Kind::Usage`] for anything else, and for a rate below 1 byte/s.
fn rate(v: &str) -> Result<u64> {
    let bytes = scaled(v).ok_or_else(|| err!(Usage, "--limit-rate: {v:?} is not a rate (bytes/s: 500K, 10M, 1G)"))?;
    // NaN is in no range: it fails too.
    if bytes >= 1e18 {
        return Err(err!(Usage, "--limit-rate {v:?} is too large (at most 1e18 bytes/s)"));
    }
    if !(1.0..1e18).contains(&bytes) {
        return Err(err!(Usage, "--limit-rate must be at least 1 byte/s, not {v:?}"));
    }
    Ok(bytes as u64)
}

/// A number with an optional suffix `K`, `M` or `G` (either case; powers of 1024),
/// fractions allowed (`1.5M`), as a number of units; `None` when it is not one.
fn scaled(v: &str) -> Option<f64> {
    let (num, mult) = match v.as_bytes().last().map(u8::to_ascii_lowercase) {
        Some(b'k') => (&v[..v.len() - 1], 1u64 << 10),
        Some(b'm') => (&v[..v.len() - 1], 1 << 20),
        Some(b'g') => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    num.parse::<f64>().ok().map(|n| n * mult as f64)
}

/// `--min-split-size` as aria2c takes it: bytes, with an optional suffix `K`, `M` or `G`
/// (powers of 1024), from 4096 (a block) to 1 GiB.
///
/// # Errors
/// [`crate::error::Kind::Usage`] for anything else.
fn split_size(v: &str) -> Result<u64> {
    let bytes = scaled(v).ok_or_else(|| err!(Usage, "--min-split-size: {v:?} is not a size (bytes: 512K, 4M, 1G)"))?;
    // NaN is in no range: it fails too.
    if !(4096.0..=f64::from(1u32 << 30)).contains(&bytes) {
        return Err(err!(Usage, "--min-split-size must be 4K to 1G, not {v:?}"));
    }
    Ok(bytes as u64)
}

/// The value of option `name` as a file name (not empty).
fn path_value(p: &mut lexopt::Parser, name: &str) -> Result<PathBuf> {
    let v = p.value().map_err(|e| err!(Usage, "{e} (see ringdl --help)"))?;
    if v.is_empty() {
        return Err(err!(Usage, "{name} needs a file name"));
    }
    Ok(PathBuf::from(v))
}

/// The value of option `name` as UTF-8 text.
fn utf8(v: std::ffi::OsString, name: &str) -> Result<String> {
    v.into_string()
        .map_err(|v| err!(Usage, "{name}: not valid UTF-8: {}", v.to_string_lossy()))
}

/// Adds `-H NAME: VALUE` (or `--user-agent`) to `headers`, checked by
/// [`http::check_field`]; a `User-Agent` or `Accept` replaces an earlier one (each
/// replaces a standard field of the request).
///
/// # Errors
/// [`crate::error::Kind::Usage`] naming the header (never its value, which may be a
/// secret) for a malformed name, a field ringdl writes itself, or a control character.
pub(crate) fn add_header(headers: &mut Vec<(String, String)>, name: &str, value: &str) -> Result<()> {
    http::check_field(name, value).map_err(|e| err!(Usage, "-H {name:?}: {e}"))?;
    if ["User-Agent", "Accept"].iter().any(|f| f.eq_ignore_ascii_case(name)) {
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    }
    headers.push((name.to_owned(), value.to_owned()));
    Ok(())
}

/// The value of option `name` as a number.
fn number<T: std::str::FromStr>(p: &mut lexopt::Parser, name: &str) -> Result<T> {
    let v = p.value().map_err(|e| err!(Usage, "{e} (see ringdl --help)"))?;
    let s = v.to_string_lossy();
    s.parse()
        .map_err(|_| err!(Usage, "{name}: {s:?} is not a valid number"))
}

/// The value of option `name` as `USER:PASSWORD` (split at the first `:`, RFC 7617 §2:
/// a user-id has none), as bytes. Never echoed in an error.
fn user_password(p: &mut lexopt::Parser, name: &str) -> Result<Credentials> {
    use std::os::unix::ffi::OsStrExt;
    let v = p.value().map_err(|e| err!(Usage, "{e} (see ringdl --help)"))?;
    let b = v.as_bytes();
    let at = b
        .iter()
        .position(|&c| c == b':')
        .ok_or_else(|| err!(Usage, "{name} wants USER:PASSWORD"))?;
    Ok(Credentials {
        user: b[..at].to_vec(),
        password: b[at + 1..].to_vec(),
    })
}

fn size(v: usize, name: &str) -> Result<usize> {
    if !(4096..=1 << 30).contains(&v) {
        return Err(err!(Usage, "{name} must be 4096 to 1073741824 bytes"));
    }
    Ok(v)
}

/// Largest `--connect-timeout` / `--stall-timeout` (seconds, about 11.6 days): far
/// beyond any use, and small enough for `Duration::from_secs_f64`.
pub const MAX_TIMEOUT_S: f64 = 1_000_000.0;

/// The value of timeout option `name` in seconds: a decimal number (`30`, `1.5`,
/// `0.25`), more than 0 and at most [`MAX_TIMEOUT_S`].
///
/// # Errors
/// [`crate::error::Kind::Usage`] for a value that is not a number, zero, negative, NaN,
/// infinite or too large.
fn timeout(p: &mut lexopt::Parser, name: &str) -> Result<f64> {
    let v: f64 = number(p, name)?;
    // Written so that NaN fails too.
    if !(v > 0.0 && v <= MAX_TIMEOUT_S) {
        return Err(err!(
            Usage,
            "{name} must be more than 0 and at most {MAX_TIMEOUT_S} seconds, not {v}"
        ));
    }
    Ok(v)
}

#[cfg(test)]
mod tests;
