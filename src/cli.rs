//! Command line: options (lexopt), help and version text.

use std::path::PathBuf;

use crate::config::{
    Checksum, Config, Credentials, IoChoice, MAX_CONNECTIONS, MAX_PER_HOST, MirrorUrl, OutputTarget, Resolve,
};
use crate::engine::EngineKind;
use crate::err;
use crate::error::Result;
use lexopt::Arg::{self, Long, Short, Value};
use lexopt::Parser;

mod delta;
mod help;
pub use help::HELP;

/// What the command line asks for.
pub enum Command {
    /// Download with these options.
    Download(Box<Config>),
    /// `-i` or `-Z`: several files, up to `-j` at once; the options apply to each (its
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

/// Parses `args` (without the program name).
///
/// # Errors
/// [`crate::error::Kind::Usage`] for unknown options, missing or bad values, and a missing URL.
pub fn parse(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<Command> {
    let mut p = Parser::from_args(args);
    let mut urls: Vec<String> = Vec::new();
    let mut files = Files::default();
    let mut each = false;
    let mut o = defaults();
    while let Some(arg) = p.next().map_err(usage)? {
        let name = match arg {
            Short('h') | Long("help") => return Ok(Command::Help),
            Short('V') | Long("version") => return Ok(Command::Version),
            Value(v) => {
                let url = v
                    .into_string()
                    .map_err(|v| err!(Usage, "URL is not valid UTF-8: {}", v.to_string_lossy()))?;
                urls.push(url);
                continue;
            }
            Short(c) => Name::Short(c),
            Long(l) => Name::Long(l.to_owned()),
        };
        let arg = name.arg();
        let known = files_option(&arg, &mut p, &mut files, &mut each, &mut o)?
            || output_option(&arg, &mut p, &mut o)?
            || delta::delta_option(&arg, &mut p, &mut o)?
            || io_option(&arg, &mut p, &mut o)?
            || network_option(&arg, &mut p, &mut o)?
            || request_option(&arg, &mut p, &mut o)?
            || tls_option(&arg, &mut p, &mut o)?
            || reporting_option(&arg, &mut p, &mut o)?;
        if !known {
            return Err(usage(arg.unexpected()));
        }
    }
    refuse_conflicts(&o)?;
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

/// An option's name as lexopt gave it, owned: its value is then read from the parser.
enum Name {
    Short(char),
    Long(String),
}

impl Name {
    /// The option as lexopt's [`Arg`], to match and to report as unexpected.
    fn arg(&self) -> Arg<'_> {
        match self {
            Name::Short(c) => Short(*c),
            Name::Long(l) => Long(l),
        }
    }
}

/// A lexopt error as a usage error (exit 2) that points at `--help`.
fn usage(e: lexopt::Error) -> crate::error::Error {
    err!(Usage, "{e} (see ringdl --help)")
}

/// The options before the command line sets any.
fn defaults() -> Config {
    Config {
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
        seeds: Vec::new(),
        max_delta: None,
        allow_full: false,
        fetch_only: None,
        keep_part: false,
    }
}

/// Options that cannot go together.
///
/// # Errors
/// [`crate::error::Kind::Usage`] naming the two.
fn refuse_conflicts(o: &Config) -> Result<()> {
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
    if o.seeds.is_empty() && (o.max_delta.is_some() || o.allow_full) {
        return Err(err!(
            Usage,
            "--max-delta-bytes and --allow-full shape a delta update: they need --seed"
        ));
    }
    if o.signature.is_some() == o.trusted_keys.is_empty() {
        return Err(err!(
            Usage,
            "--signature and --trusted-key go together: a signature is checked against the keys you trust"
        ));
    }
    Ok(())
}

/// Applies `arg` when it is an option of the files of a run (`-i`, `-Z`, `-d`, `-j`, `--fail-fast`: "Several files" in `--help`), reading its value from `p`.
/// Returns whether it was one.
///
/// # Errors
/// [`crate::error::Kind::Usage`] for a missing or bad value.
fn files_option(arg: &Arg<'_>, p: &mut Parser, files: &mut Files, each: &mut bool, o: &mut Config) -> Result<bool> {
    match arg {
        Short('i') | Long("input-file") => files.input = Some(path_value(p, "-i")?),
        Short('Z') | Long("force-sequential") => *each = true,
        Short('d') | Long("dir") => o.dir = Some(path_value(p, "-d")?),
        Long("fail-fast") => files.fail_fast = true,
        Short('j') | Long("max-concurrent-downloads") => {
            let n: usize = number(p, "-j")?;
            if !(1..=MAX_JOBS).contains(&n) {
                return Err(err!(Usage, "-j must be 1 to {MAX_JOBS}, not {n}"));
            }
            files.jobs = Some(n);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Applies `arg` when it is an option of the output, its resume, digest, signature and validators ("Output:" in `--help`), reading its value from `p`.
/// Returns whether it was one.
///
/// # Errors
/// [`crate::error::Kind::Usage`] for a missing or bad value.
fn output_option(arg: &Arg<'_>, p: &mut Parser, o: &mut Config) -> Result<bool> {
    match arg {
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
        Long("force") => o.force = true,
        Short('c') | Long("continue") => o.resume = true,
        Long("no-continue") => o.no_continue = true,
        Long("content-disposition") => o.content_disposition = true,
        Long("checksum") => {
            let v = p.value().map_err(usage)?;
            o.checksum = Some(Checksum::parse(&v.to_string_lossy())?);
        }
        Long("checksum-file") => o.checksum_file = Some(p.value().map_err(usage)?.into()),
        Long("signature") => o.signature = Some(utf8(p.value().map_err(usage)?, "--signature")?),
        Long("trusted-key") => o.trusted_keys.push(p.value().map_err(usage)?.into()),
        Long("signature-namespace") => {
            o.signature_namespace = utf8(p.value().map_err(usage)?, "--signature-namespace")?;
            if o.signature_namespace.is_empty() {
                return Err(err!(Usage, "--signature-namespace: the namespace may not be empty"));
            }
        }
        Long("etag-compare") => o.etag_compare = Some(path_value(p, "--etag-compare")?),
        Long("etag-save") => o.etag_save = Some(path_value(p, "--etag-save")?),
        Short('N') | Long("timestamping") => o.timestamping = true,
        Long("offset") => o.offset = number(p, "--offset")?,
        Long("control") => o.control = Some(path_value(p, "--control")?),
        _ => return Ok(false),
    }
    Ok(true)
}

/// Applies `arg` when it is an option of connections, threads, engine and I/O ("Connections and I/O:" in `--help`), reading its value from `p`.
/// Returns whether it was one.
///
/// # Errors
/// [`crate::error::Kind::Usage`] for a missing or bad value.
fn io_option(arg: &Arg<'_>, p: &mut Parser, o: &mut Config) -> Result<bool> {
    match arg {
        Short('x') | Long("connections") => {
            let n: usize = number(p, "--connections")?;
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
        Long("pin") => o.pin = true,
        Long("min-split-size") => {
            o.min_split_size = split_size(&utf8(p.value().map_err(usage)?, "--min-split-size")?)?;
        }
        Long("max-connections-per-host") => {
            let n: usize = number(p, "--max-connections-per-host")?;
            if !(1..=MAX_CONNECTIONS).contains(&n) {
                return Err(err!(
                    Usage,
                    "--max-connections-per-host must be 1 to {MAX_CONNECTIONS}, not {n}"
                ));
            }
            o.max_per_host = n;
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
        Long("limit-rate") => o.limit_rate = Some(rate(&utf8(p.value().map_err(usage)?, "--limit-rate")?)?),
        Long("buf-size") => o.splice_chunk = size(number(p, "--buf-size")?, "--buf-size")?,
        Long("write-threshold") => o.write_threshold = size(number(p, "--write-threshold")?, "--write-threshold")?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// Applies `arg` when it is an option of proxies, addresses, timeouts, retries and redirects ("Network:" in `--help`), reading its value from `p`.
/// Returns whether it was one.
///
/// # Errors
/// [`crate::error::Kind::Usage`] for a missing or bad value.
fn network_option(arg: &Arg<'_>, p: &mut Parser, o: &mut Config) -> Result<bool> {
    match arg {
        Long("proxy") => o.proxy = Some(utf8(p.value().map_err(usage)?, "--proxy")?),
        Long("proxy-user") => o.proxy_user = Some(user_password(p, "--proxy-user")?),
        Long("noproxy") => o.noproxy = Some(utf8(p.value().map_err(usage)?, "--noproxy")?),
        Long("resolve") => {
            let v = p.value().map_err(usage)?;
            o.resolve.push(Resolve::parse(&v.to_string_lossy())?);
        }
        Long("connect-timeout") => o.connect_timeout_s = timeout(p, "--connect-timeout")?,
        Long("stall-timeout") => o.stall_timeout_s = timeout(p, "--stall-timeout")?,
        Long("max-tries") => {
            o.max_tries = number(p, "--max-tries")?;
            if o.max_tries == 0 {
                return Err(err!(Usage, "--max-tries must be at least 1"));
            }
        }
        Long("retry-wait") => {
            let v: f64 = number(p, "--retry-wait")?;
            if !(0.0..=3600.0).contains(&v) {
                return Err(err!(Usage, "--retry-wait must be 0 to 3600 seconds"));
            }
            o.retry_wait_s = v;
        }
        Long("max-redirects") => o.max_redirects = number(p, "--max-redirects")?,
        Long("allow-downgrade") => o.allow_downgrade = true,
        _ => return Ok(false),
    }
    Ok(true)
}

/// Applies `arg` when it is an option of headers and credentials of the request ("Request:" in `--help`), reading its value from `p`.
/// Returns whether it was one.
///
/// # Errors
/// [`crate::error::Kind::Usage`] for a missing or bad value.
fn request_option(arg: &Arg<'_>, p: &mut Parser, o: &mut Config) -> Result<bool> {
    match arg {
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
        Short('u') | Long("user") => o.credentials = Some(user_password(p, "--user")?),
        _ => return Ok(false),
    }
    Ok(true)
}

/// Applies `arg` when it is an option of certificate checks ("TLS:" in `--help`), reading its value from `p`.
/// Returns whether it was one.
///
/// # Errors
/// [`crate::error::Kind::Usage`] for a missing or bad value.
fn tls_option(arg: &Arg<'_>, p: &mut Parser, o: &mut Config) -> Result<bool> {
    match arg {
        Short('k') | Long("insecure") => o.insecure = true,
        Long("ca-certificate") => o.ca_certificate = Some(p.value().map_err(usage)?.into()),
        Long("pinnedpubkey") => {
            let v = p.value().map_err(usage)?;
            o.pinned_public_keys = crate::control::tls::parse_pins(&v.to_string_lossy())?;
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Applies `arg` when it is an option of what is said (`-q`, `-v`, `--json`: "Reporting:" in `--help`), reading its value from `p`.
/// Returns whether it was one.
///
/// # Errors
/// [`crate::error::Kind::Usage`] for a missing or bad value.
fn reporting_option(arg: &Arg<'_>, p: &mut Parser, o: &mut Config) -> Result<bool> {
    match arg {
        Short('q') | Long("quiet") => o.quiet = true,
        Short('v') | Long("verbose") => o.verbose = o.verbose.saturating_add(1),
        Long("json") => {
            let v = p.value().map_err(usage)?;
            if v.is_empty() {
                return Err(err!(Usage, "--json needs a file name ('-' = standard output)"));
            }
            o.json = Some(PathBuf::from(v));
        }
        _ => return Ok(false),
    }
    Ok(true)
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
        (
            !o.seeds.is_empty(),
            "--seed",
            "a delta update makes one target: run one per file",
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
