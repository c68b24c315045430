//! Shared harness for the behaviour tests (ripgrep-style `tests/util`).
//!
//! - [`TestDir`]: one temporary directory per test, removed when the test ends.
//! - [`TestCommand`]: runs the `ringdl` binary (or any program) with a timeout and
//!   returns exit status, stdout and stderr.
//! - [`sha256_file`], [`sha256_bytes`], [`write_random_file`]: exact-bytes checks on
//!   deterministic pseudo-random content (seeded xorshift, written in 1 MiB chunks).
//! - [`nginx`]: one nginx per test process (HTTP, HTTPS, TLS 1.2-only HTTPS and a
//!   `max_ranges 0` server) on free loopback ports, serving every size in
//!   [`SERVED_SIZES`] from a temporary document root. It stops, and its directory is
//!   removed, when the test process exits (see [`Nginx`] for how).
//!
//! Every function panics with context instead of returning errors: a harness
//! failure is a test failure, never a silent pass.
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::fault::FaultServer;

/// 1 KiB in bytes.
pub const KIB: u64 = 1024;
/// 1 MiB in bytes.
pub const MIB: u64 = 1024 * 1024;

/// Sizes (bytes) of the files the nginx fixture serves, each generated once per
/// process as `size-<bytes>.bin`.
pub const SERVED_SIZES: &[u64] = &[0, 1, 4095, 4096, 4097, MIB + 1, 4 * MIB, 16 * MIB, 100 * MIB];

/// How long a single command may run before the harness kills it (ms).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(180);

/// What to tell a developer whose machine lacks a test dependency.
pub const INSTALL_HINT: &str = "run ./scripts/test.sh (it installs nginx-light, curl, \
                                util-linux, openssl and musl-tools when missing)";

// ---------------------------------------------------------------------------
// Temporary directories

/// A directory private to one test, removed (recursively) on drop.
pub struct TestDir {
    dir: tempfile::TempDir,
}

impl TestDir {
    /// Creates `$TMPDIR/ringdl-test-<name>-XXXXXX`.
    pub fn new(name: &str) -> TestDir {
        let dir = tempfile::Builder::new()
            .prefix(&format!("ringdl-test-{name}-"))
            .tempdir()
            .unwrap_or_else(|e| panic!("creating temp dir for test {name}: {e}"));
        TestDir { dir }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `path()/rel`.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// A `ringdl` command whose current directory is this directory.
    pub fn ringdl(&self) -> TestCommand {
        let mut cmd = TestCommand::ringdl();
        cmd.current_dir(self.path());
        cmd
    }
}

// ---------------------------------------------------------------------------
// Running commands

/// Bytes covered more than once by `spans` (`[start, end)` each), counted once per
/// extra cover: what a server sent twice, given each request's span of bytes sent.
pub fn sent_twice(spans: &[(u64, u64)]) -> u64 {
    spans
        .iter()
        .enumerate()
        .map(|(k, &(a, b))| {
            spans[k + 1..]
                .iter()
                .map(|&(c, d)| b.min(d).saturating_sub(a.max(c)))
                .sum::<u64>()
        })
        .sum()
}

/// Path of the `ringdl` binary Cargo built for these tests.
pub fn ringdl_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ringdl"))
}

/// Environment variables removed from every `ringdl` run so the host cannot change
/// what a test means (trust store, proxies).
const SCRUBBED_ENV: &[&str] = &[
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "http_proxy",
    "HTTP_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "no_proxy",
    "NO_PROXY",
];

/// The I/O backend every `ringdl` run of the tests is forced to: `RINGDL_TEST_IO`
/// (`uring` or `epoll`); unset or empty = ringdl's own choice (`auto`).
pub fn test_io() -> Option<&'static str> {
    static IO: OnceLock<Option<String>> = OnceLock::new();
    IO.get_or_init(|| {
        let v = std::env::var("RINGDL_TEST_IO").ok().filter(|v| !v.is_empty())?;
        assert!(
            v == "uring" || v == "epoll",
            "RINGDL_TEST_IO must be uring or epoll, not {v:?}"
        );
        Some(v)
    })
    .as_deref()
}

/// The reactor threads every `ringdl` run of the tests is given: `RINGDL_TEST_THREADS`
/// (1 to 64); unset or empty = ringdl's default (one).
pub fn test_threads() -> Option<&'static str> {
    static THREADS: OnceLock<Option<String>> = OnceLock::new();
    THREADS
        .get_or_init(|| {
            let v = std::env::var("RINGDL_TEST_THREADS").ok().filter(|v| !v.is_empty())?;
            assert!(
                v.parse::<usize>().is_ok_and(|n| (1..=64).contains(&n)),
                "RINGDL_TEST_THREADS must be 1 to 64, not {v:?}"
            );
            Some(v)
        })
        .as_deref()
}

/// `["--io", backend]` when [`test_io`] forces one, and `["--threads", n]` when
/// [`test_threads`] does, else nothing: for tests that run a copy of the binary through
/// another program (prlimit, setpriv, the seccomp helper).
pub fn io_args() -> Vec<&'static str> {
    let mut a = test_io().map_or_else(Vec::new, |io| vec!["--io", io]);
    if let Some(t) = test_threads() {
        a.extend(["--threads", t]);
    }
    a
}

/// A command with a timeout whose output is captured.
pub struct TestCommand {
    cmd: Command,
    timeout: Duration,
}

impl TestCommand {
    /// Any program; stdin is `/dev/null`.
    pub fn new(program: impl AsRef<OsStr>) -> TestCommand {
        let mut cmd = Command::new(program);
        cmd.stdin(Stdio::null());
        TestCommand {
            cmd,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The `ringdl` binary with a scrubbed environment (see [`SCRUBBED_ENV`]), on the I/O
    /// backend [`test_io`] names (`--io epoll` when `RINGDL_TEST_IO=epoll`), with the
    /// reactor threads [`test_threads`] names.
    pub fn ringdl() -> TestCommand {
        let mut cmd = TestCommand::new(ringdl_bin());
        cmd.scrub_env();
        cmd.args(io_args());
        cmd
    }

    /// Removes [`SCRUBBED_ENV`] (trust store and proxy variables).
    pub fn scrub_env(&mut self) -> &mut TestCommand {
        for var in SCRUBBED_ENV {
            self.cmd.env_remove(var);
        }
        self
    }

    /// The underlying [`Command`] (for what this wrapper does not cover, e.g. a
    /// `pre_exec` hook).
    pub fn command_mut(&mut self) -> &mut Command {
        &mut self.cmd
    }

    /// Appends one argument.
    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut TestCommand {
        self.cmd.arg(arg);
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(&mut self, args: I) -> &mut TestCommand
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.cmd.args(args);
        self
    }

    /// Sets an environment variable.
    pub fn env(&mut self, key: impl AsRef<OsStr>, val: impl AsRef<OsStr>) -> &mut TestCommand {
        self.cmd.env(key, val);
        self
    }

    /// Sets the working directory.
    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut TestCommand {
        self.cmd.current_dir(dir);
        self
    }

    /// Overrides the default timeout (180 s).
    pub fn timeout(&mut self, timeout: Duration) -> &mut TestCommand {
        self.timeout = timeout;
        self
    }

    /// Runs to completion.
    ///
    /// # Panics
    /// If the program cannot be started or outlives the timeout (it is killed).
    pub fn run(&mut self) -> Output {
        self.run_with(|_| {})
    }

    /// Runs to completion, calling `during(pid)` on this thread right after the start
    /// (to send a signal, for instance).
    pub fn run_with(&mut self, during: impl FnOnce(u32)) -> Output {
        let desc = format!("{:?}", self.cmd);
        self.cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = self.cmd.spawn().unwrap_or_else(|e| panic!("starting {desc}: {e}"));
        let stdout = drain(child.stdout.take().expect("piped stdout"));
        let stderr = drain(child.stderr.take().expect("piped stderr"));
        during(child.id());
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let err = String::from_utf8_lossy(&stderr.join().unwrap_or_default()).into_owned();
                    panic!(
                        "{desc} still running after {:?}: killed\n--- stderr ---\n{}",
                        self.timeout,
                        tail(&err)
                    );
                }
                Err(e) => panic!("waiting for {desc}: {e}"),
            }
        };
        Output {
            desc,
            status,
            stdout: stdout.join().expect("stdout reader panicked"),
            stderr: stderr.join().expect("stderr reader panicked"),
        }
    }
}

/// Reads a pipe to its end on a thread (so a chatty child never blocks on a full pipe).
fn drain(mut pipe: impl Read + Send + 'static) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        buf
    })
}

/// The last 4000 characters of a log, enough to explain a failure.
fn tail(s: &str) -> &str {
    let mut start = s.len().saturating_sub(4000);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// What a finished command did.
pub struct Output {
    /// The command line, for messages.
    pub desc: String,
    /// Exit status.
    pub status: ExitStatus,
    /// Everything written to stdout.
    pub stdout: Vec<u8>,
    /// Everything written to stderr.
    pub stderr: Vec<u8>,
}

/// Prefix of the one summary line `ringdl` prints on success (unless `-q`).
pub const SUMMARY_PREFIX: &str = "ringdl: done:";

impl Output {
    /// Exit code, `None` when killed by a signal.
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Stderr as text (lossy).
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// Stdout as text (lossy).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    fn explain(&self) -> String {
        format!(
            "command: {}\nstatus: {}\nstdout: {} bytes\n--- stderr ---\n{}",
            self.desc,
            self.status,
            self.stdout.len(),
            tail(&self.stderr_text())
        )
    }

    /// Asserts exit code 0.
    #[track_caller]
    pub fn assert_success(&self) -> &Output {
        self.assert_code(0)
    }

    /// Asserts the exit code.
    #[track_caller]
    pub fn assert_code(&self, code: i32) -> &Output {
        assert_eq!(self.code(), Some(code), "expected exit code {code}\n{}", self.explain());
        self
    }

    /// Stderr lines that start with [`SUMMARY_PREFIX`].
    pub fn summary_lines(&self) -> Vec<String> {
        self.stderr_text()
            .lines()
            .filter(|l| l.starts_with(SUMMARY_PREFIX))
            .map(str::to_owned)
            .collect()
    }

    /// The summary line; asserts there is exactly one and that it names an engine.
    #[track_caller]
    pub fn summary(&self) -> String {
        let lines = self.summary_lines();
        assert_eq!(
            lines.len(),
            1,
            "expected exactly one `{SUMMARY_PREFIX}` line\n{}",
            self.explain()
        );
        let line = lines.into_iter().next().unwrap();
        assert!(
            line.contains("engine direct") || line.contains("engine buffered"),
            "summary names no engine (`engine direct` / `engine buffered`): {line}"
        );
        let io = match test_io() {
            Some("epoll") => "I/O epoll",
            Some(_) => "I/O io_uring",
            None => "I/O ",
        };
        assert!(line.contains(io), "summary does not name `{io}`: {line}");
        line
    }
}

// ---------------------------------------------------------------------------
// Exit codes

/// Exit codes of the CLI contract (README, "Exit status").
pub mod exit {
    /// Bad option or URL.
    pub const USAGE: i32 = 2;
    /// Name resolution, connect, or a connection lost more than `--max-tries` times.
    pub const NETWORK: i32 = 3;
    /// Handshake failure, untrusted certificate.
    pub const TLS: i32 = 4;
    /// The server answered 4xx/5xx.
    pub const HTTP_STATUS: i32 = 5;
    /// Protocol violation (malformed head, wrong Content-Range, file changed, …).
    pub const PROTOCOL: i32 = 6;
    /// Local I/O: output exists, cannot create or write, disk full, engine refused, …
    pub const LOCAL_IO: i32 = 7;
    /// SIGINT or SIGTERM.
    pub const INTERRUPTED: i32 = 8;
}

// ---------------------------------------------------------------------------
// Runs against a fault server

/// A run against a fault server that takes longer than this is a hang.
pub const HANG: Duration = Duration::from_secs(25);

/// One ringdl run against a fault server.
pub struct Run {
    /// The test's directory (holds `out.bin`).
    pub dir: TestDir,
    /// `dir/out.bin`.
    pub out: PathBuf,
    /// What ringdl did.
    pub o: Output,
    /// Wall time of the run.
    pub took: Duration,
}

/// Runs `ringdl -x 4 --stall-timeout 2 --connect-timeout 2 -o out.bin [extra] URL`
/// (plus `--ca-certificate` for HTTPS).
pub fn run(test: &str, srv: &FaultServer, url: &str, extra: &[&str]) -> Run {
    let dir = TestDir::new(test);
    let out = dir.join("out.bin");
    let mut cmd = dir.ringdl();
    cmd.timeout(HANG)
        .args(["-x", "4", "--stall-timeout", "2", "--connect-timeout", "2", "-o"])
        .arg(&out);
    // RINGDL_FAULT_ARGS="-vv" adds arguments to every run (debugging).
    if let Ok(extra) = std::env::var("RINGDL_FAULT_ARGS") {
        cmd.args(extra.split_whitespace());
    }
    if srv.is_tls() {
        cmd.arg("--ca-certificate").arg(srv.ca_pem());
    }
    cmd.args(extra).arg(url);
    let t = Instant::now();
    // A hang panics inside the runner: show what the server saw before unwinding.
    let o = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cmd.run())) {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "HANG: ringdl killed after {:?}\n--- requests ---\n{}",
                t.elapsed(),
                srv.describe()
            );
            std::panic::resume_unwind(e)
        }
    };
    Run {
        dir,
        out,
        o,
        took: t.elapsed(),
    }
}

/// `run` on `srv.url("file.bin")`.
pub fn get(test: &str, srv: &FaultServer, extra: &[&str]) -> Run {
    run(test, srv, &srv.url("file.bin"), extra)
}

impl Run {
    pub fn explain(&self, srv: &FaultServer) -> String {
        format!(
            "exit {:?} after {:?}\n--- stderr ---\n{}\n--- requests ---\n{}",
            self.o.code(),
            self.took,
            self.o.stderr_text(),
            srv.describe()
        )
    }

    /// Exit 0, FILE holds exactly `sha` (and `size` bytes), no FILE.part; every fault
    /// rule fired ([`FaultServer::assert_all_fired`]).
    #[track_caller]
    pub fn assert_bytes(&self, srv: &FaultServer, size: u64, sha: &str) {
        srv.assert_all_fired();
        assert_eq!(self.o.code(), Some(0), "expected success\n{}", self.explain(srv));
        let len = fs::metadata(&self.out).map(|m| m.len()).unwrap_or_else(|e| {
            panic!("exit 0 but no output file ({e})\n{}", self.explain(srv));
        });
        assert_eq!(
            len,
            size,
            "exit 0 with a wrong size: WRONG BYTES\n{}",
            self.explain(srv)
        );
        assert_eq!(
            sha256_file(&self.out),
            sha,
            "exit 0 with wrong content: WRONG BYTES\n{}",
            self.explain(srv)
        );
        assert!(!exists(&part_path(&self.out)), "FILE.part left after success");
    }

    /// Exit 0 with the server's body.
    #[track_caller]
    pub fn assert_exact(&self, srv: &FaultServer) {
        self.assert_bytes(srv, srv.size(), srv.sha256());
    }

    /// Exit `code` and no FILE (a `.part` may stay); every fault rule fired.
    #[track_caller]
    pub fn assert_fails(&self, srv: &FaultServer, code: i32) {
        srv.assert_all_fired();
        assert_eq!(self.o.code(), Some(code), "expected exit {code}\n{}", self.explain(srv));
        assert!(
            !exists(&self.out),
            "exit {code} but FILE exists (only a complete exact file may be at FILE)"
        );
        let err = self.o.stderr_text();
        assert!(
            err.lines().any(|l| l.starts_with("ringdl: ") && l.len() > 10),
            "failure without a message on stderr:\n{err}"
        );
        // One URL: no mirror to have been left (`no_mirror_left` adds it with mirrors only).
        assert!(!err.contains("no mirror left"), "{err}");
    }

    /// Either exact bytes `sha` with exit 0, or exit `code` without FILE: the two
    /// outcomes issue 4 allows for a fault (never wrong bytes).
    #[track_caller]
    pub fn assert_bytes_or_fails(&self, srv: &FaultServer, size: u64, sha: &str, code: i32) {
        if self.o.code() == Some(0) {
            self.assert_bytes(srv, size, sha);
        } else {
            self.assert_fails(srv, code);
        }
    }
}

// ---------------------------------------------------------------------------
// Bytes: SHA-256 and deterministic random content

/// Lower-case hex SHA-256 of a byte slice.
pub fn sha256_bytes(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// SHA-256 of a file as hex, read by a child process (`sha256sum`): a test that unmounts
/// the file's filesystem right after must not hold it open itself — a process another
/// test thread forks meanwhile would inherit the descriptor until its exec, and the
/// unmount would find the filesystem busy.
pub fn sha256_file_apart(path: &Path) -> String {
    let o = Command::new("sha256sum")
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("sha256sum {}: {e}", path.display()));
    assert!(
        o.status.success(),
        "sha256sum {}: {}",
        path.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Lower-case hex SHA-256 of a file, read in 1 MiB chunks.
pub fn sha256_file(path: &Path) -> String {
    let mut file = File::open(path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; MIB as usize];
    loop {
        let n = file
            .read(&mut buf)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        if n == 0 {
            return hex(&hasher.finalize());
        }
        hasher.update(&buf[..n]);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// xorshift64* (Vigna): fast, seedable, good enough to make every byte matter.
pub struct XorShift(u64);

impl XorShift {
    /// A generator for `seed` (any value, zero included).
    pub fn new(seed: u64) -> XorShift {
        XorShift((seed ^ 0x9E37_79B9_7F4A_7C15).max(1))
    }

    /// Next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n` (0 when `n` is 0); modulo bias is irrelevant here.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// Fills `buf` (any length).
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut words = buf.chunks_exact_mut(8);
        for w in &mut words {
            w.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rest = words.into_remainder();
        let last = self.next_u64().to_le_bytes();
        rest.copy_from_slice(&last[..rest.len()]);
    }
}

/// Writes `size` pseudo-random bytes (seeded, so reproducible) to `path` in 1 MiB
/// chunks; returns their SHA-256.
pub fn write_random_file(path: &Path, size: u64, seed: u64) -> String {
    let mut file = File::create(path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
    let mut rng = XorShift::new(seed);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; MIB as usize];
    let mut left = size;
    while left > 0 {
        let n = left.min(MIB) as usize;
        rng.fill(&mut buf[..n]);
        hasher.update(&buf[..n]);
        file.write_all(&buf[..n])
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        left -= n as u64;
    }
    hex(&hasher.finalize())
}

// ---------------------------------------------------------------------------
// Host facts

/// Effective uid, from `/proc/self/status` (no libc).
pub fn euid() -> u32 {
    static EUID: OnceLock<u32> = OnceLock::new();
    *EUID.get_or_init(|| {
        let status = fs::read_to_string("/proc/self/status").expect("reading /proc/self/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|e| e.parse().ok())
            .expect("no effective uid in /proc/self/status")
    })
}

/// True when the tests run as root.
pub fn is_root() -> bool {
    euid() == 0
}

/// A test whose host lacks what it needs (root, IPv6 on loopback, a tool) did not run,
/// and a test that did not run must not look green: this FAILS it with the reason. Only
/// with `RINGDL_ALLOW_SKIPS=1` (a developer who knows the machine lacks it) does the
/// caller return and the test pass, said loudly on stderr; under `CI=true` never. What a
/// test can build itself (the test servers, the static binary) it builds instead
/// ([`cargo_build`]).
///
/// # Panics
/// Unless `RINGDL_ALLOW_SKIPS=1` and not `CI=true`.
#[track_caller]
pub fn skip(reason: &str) {
    let name = thread::current().name().unwrap_or("a test").to_owned();
    if std::env::var_os("CI").is_some_and(|v| v == "true") {
        panic!("CI=true: this test may not skip: {reason}");
    }
    if std::env::var_os("RINGDL_ALLOW_SKIPS").is_none_or(|v| v != "1") {
        panic!(
            "NOT RUN (counted as a failure): {reason}. Give the machine what it lacks, or set \
             RINGDL_ALLOW_SKIPS=1 to let {name} pass without running"
        );
    }
    // Straight to fd 2, past the test harness's capture of `eprintln!`: seen even when
    // the test passes.
    let _ = writeln!(
        std::io::stderr(),
        "*** SKIPPED {name} (passes without running: RINGDL_ALLOW_SKIPS=1): {reason}"
    );
}

/// Builds what a test needs with `cargo build --release ARGS` (extra `env`), once per
/// test run, into a target directory of its own (`<target>/nested`): `cargo test` holds the
/// lock of its own target directory while tests run, so a build there would wait forever.
/// Returns that target directory. The first build compiles the dependencies again (a few
/// minutes on 2 cores); later runs reuse them.
///
/// # Panics
/// When cargo fails (its stderr's tail in the message).
pub fn cargo_build(args: &[&str], env: &[(&str, &str)]) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let target = ringdl_bin()
        .parent()
        .and_then(Path::parent)
        .expect("the ringdl binary lives in <target>/release")
        .join("nested");
    let key = format!("{args:?} {env:?}");
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if built.contains(&key) {
        return target;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let _ = writeln!(
        std::io::stderr(),
        "building for the tests: cargo build --release {} (into {})",
        args.join(" "),
        target.display()
    );
    let out = Command::new(cargo)
        .args(["build", "--release"])
        .args(args)
        .envs(env.iter().copied())
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running cargo build {args:?}: {e}"));
    assert!(
        out.status.success(),
        "cargo build --release {args:?} failed ({}):\n{}",
        out.status,
        tail(&String::from_utf8_lossy(&out.stderr))
    );
    built.push(key);
    target
}

/// True when `program --version` (or `-V`) starts; used to skip or fail clearly.
pub fn have_program(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// A filesystem a test mounted on a directory of its own (root only). Dropping it
/// unmounts, and a failed unmount FAILS the test: something — ringdl's ring, a thread, an
/// fd — still holds the filesystem, which is a bug, and a mount must not be left behind
/// (after a failure the mount is detached lazily, `umount -l`, so nothing stays).
pub struct Mount {
    point: PathBuf,
    mounted: bool,
}

impl Mount {
    /// `mount -t FSTYPE -o OPTIONS FSTYPE POINT`.
    ///
    /// # Errors
    /// mount(8)'s words when it refuses (no such filesystem, not root).
    pub fn new(fstype: &str, options: &str, point: &Path) -> Result<Mount, String> {
        let o = Command::new("mount")
            .args(["-t", fstype, "-o", options, fstype])
            .arg(point)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "mount -t {fstype} {}: {}",
                point.display(),
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        }
        Ok(Mount {
            point: point.to_owned(),
            mounted: true,
        })
    }

    /// `mount -t FSTYPE -o loop IMAGE POINT`: a filesystem image on a loop device, which
    /// mount(8) sets up and umount(8) detaches (autoclear).
    ///
    /// # Errors
    /// mount(8)'s words when it refuses (no loop devices, not root).
    pub fn image(fstype: &str, image: &Path, point: &Path) -> Result<Mount, String> {
        let o = Command::new("mount")
            .args(["-t", fstype, "-o", "loop"])
            .arg(image)
            .arg(point)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "mount -t {fstype} -o loop {}: {}",
                image.display(),
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        }
        Ok(Mount {
            point: point.to_owned(),
            mounted: true,
        })
    }

    /// `mount -o remount,OPTIONS`; true when it worked.
    pub fn remount(&self, options: &str) -> bool {
        Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(&self.point)
            .status()
            .is_ok_and(|s| s.success())
    }

    /// umount(8) once, now — no retry, no wait.
    ///
    /// # Errors
    /// umount's words ("target is busy") when the filesystem is still in use; it stays
    /// mounted (dropping the `Mount` then fails the test).
    pub fn unmount(&mut self) -> Result<(), String> {
        if !self.mounted {
            return Ok(());
        }
        let o = Command::new("umount")
            .arg(&self.point)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("umount: {e}"))?;
        if o.status.success() {
            self.mounted = false;
            return Ok(());
        }
        Err(format!(
            "umount {}: {} ({})",
            self.point.display(),
            String::from_utf8_lossy(&o.stderr).trim(),
            o.status
        ))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Err(e) = self.unmount() {
            let _ = Command::new("umount").arg("-l").arg(&self.point).status();
            if thread::panicking() {
                let _ = writeln!(std::io::stderr(), "{e} (detached with umount -l)");
            } else {
                panic!("{e}: the filesystem is still held after the test (detached with umount -l)");
            }
        }
    }
}

/// Filesystem type of the mount holding `path` (`ext4`, `tmpfs`, `ramfs`, …), from
/// `/proc/self/mountinfo` (proc(5)): the longest mount point that is a prefix of the
/// canonical path wins; for stacked mounts the last entry wins.
pub fn fs_type(path: &Path) -> Option<String> {
    let path = path.canonicalize().ok()?;
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut best: Option<(usize, String)> = None;
    for line in info.lines() {
        let (left, right) = line.split_once(" - ")?;
        let mount_point = unescape_mountinfo(left.split(' ').nth(4)?);
        let fstype = right.split(' ').next()?.to_owned();
        if path.starts_with(&mount_point) {
            let depth = Path::new(&mount_point).components().count();
            if best.as_ref().is_none_or(|(d, _)| depth >= *d) {
                best = Some((depth, fstype));
            }
        }
    }
    best.map(|(_, t)| t)
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() && b[i + 1..i + 4].iter().all(|d| (b'0'..=b'7').contains(d)) {
            let digit = |k: usize| u32::from(b[i + k] - b'0');
            out.push((digit(1) * 64 + digit(2) * 8 + digit(3)) as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// True when `path` is on a filesystem known to accept O_DIRECT (ext4, xfs, btrfs),
/// where `--engine auto` must pick `direct`. Elsewhere (tmpfs, overlayfs, 9p, …) the
/// tests accept either engine.
pub fn surely_supports_o_direct(path: &Path) -> bool {
    matches!(fs_type(path).as_deref(), Some("ext4" | "xfs" | "btrfs"))
}

/// A loopback TCP port that nothing listens on right now (bind to port 0, read the
/// port, close). With `also_v6`, the same port is free on `[::1]` too.
pub fn free_port(also_v6: bool) -> u16 {
    for _ in 0..100 {
        let v4 = TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
        let port = v4.local_addr().unwrap().port();
        if !also_v6 || TcpListener::bind(SocketAddr::from((Ipv6Addr::LOCALHOST, port))).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port found in 100 tries");
}

/// True when `127.0.0.1:port` or `[::1]:port` accepts a TCP connection.
fn accepts(port: u16) -> bool {
    let try_at = |a: SocketAddr| TcpStream::connect_timeout(&a, Duration::from_millis(200)).is_ok();
    try_at(SocketAddr::from(([127, 0, 0, 1], port))) || try_at(SocketAddr::from((Ipv6Addr::LOCALHOST, port)))
}

// ---------------------------------------------------------------------------
// A tiny HTTP/1.1 client, only to test the harness itself

/// A raw response: status code, lower-cased headers, body.
pub struct RawResponse {
    /// Status code.
    pub status: u16,
    /// Header fields, names lower-cased.
    pub headers: BTreeMap<String, String>,
    /// Body bytes (everything after the head; the request asks for `Connection: close`).
    pub body: Vec<u8>,
}

/// `GET path` on `127.0.0.1:port` over plain TCP with `Connection: close`.
pub fn http_get_raw(port: u16, path: &str, extra_headers: &[(&str, &str)]) -> RawResponse {
    let mut stream =
        TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("connecting to 127.0.0.1:{port}: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (k, v) in extra_headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).unwrap();
    let mut all = Vec::new();
    stream.read_to_end(&mut all).unwrap();
    let end = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("no end of response head");
    let head = String::from_utf8_lossy(&all[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line in {head:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    RawResponse {
        status,
        headers,
        body: all[end + 4..].to_vec(),
    }
}

// ---------------------------------------------------------------------------
// The nginx fixture

/// One file the fixture serves.
pub struct ServedFile {
    /// URL path segment and file name: `size-<bytes>.bin`.
    pub name: String,
    /// Bytes.
    pub size: u64,
    /// Lower-case hex SHA-256 of the content.
    pub sha256: String,
}

/// The nginx serving this test process.
///
/// Lifetime: nginx runs with `daemon off` under a small `sh` wrapper whose stdin is
/// a pipe from this process. A watcher in the wrapper blocks on that pipe; the write
/// end lives in a `static` and is never closed, so EOF arrives exactly when the test
/// process exits (normally, by panic, or by a signal). The watcher then sends SIGTERM
/// to nginx (which stops its workers), the wrapper waits for it and removes the
/// fixture directory. Nothing is left behind after `cargo test`.
pub struct Nginx {
    /// Plain HTTP on `127.0.0.1` (and `[::1]` when [`Nginx::ipv6`]).
    pub http_port: u16,
    /// HTTPS (TLS 1.2 and 1.3).
    pub https_port: u16,
    /// HTTPS limited to TLS 1.2.
    pub tls12_port: u16,
    /// Plain HTTP with `max_ranges 0`: Range requests get the whole file with 200.
    pub norange_port: u16,
    /// True when the servers also listen on `[::1]`.
    pub ipv6: bool,
    /// Plain HTTP on `[::1]` only (on `127.0.0.1` when the host has no IPv6: see
    /// [`Nginx::ipv6`]): a host name whose IPv4 address refuses.
    pub v6only_port: u16,
    /// HTTPS on `127.0.0.1` only: a host name whose IPv6 address refuses.
    pub v4only_port: u16,
    /// HTTPS on `[::1]` only (as [`Nginx::v6only_port`]), for the one test that
    /// blackholes `127.0.0.1` on this port.
    pub v6only_https_port: u16,
    base: PathBuf,
    /// This start's run dir (config, logs).
    run: PathBuf,
    ca_pem: PathBuf,
    files: Vec<ServedFile>,
    /// Keeps the wrapper alive: dropping the stdin (only at process exit) stops nginx.
    _lifeline: Mutex<(Child, ChildStdin)>,
}

/// nginx binary, overridable with `RINGDL_TEST_NGINX`.
fn nginx_bin() -> PathBuf {
    std::env::var_os("RINGDL_TEST_NGINX")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/sbin/nginx"))
}

/// The process-wide nginx, started on first use.
///
/// # Panics
/// When nginx is missing or does not start: the message says how to fix it.
pub fn nginx() -> &'static Nginx {
    static NGINX: OnceLock<Nginx> = OnceLock::new();
    NGINX.get_or_init(Nginx::start)
}

/// The wrapper; `$1` nginx, `$2` run dir (prefix, conf, logs), `$3` fixture dir.
/// The watcher reads fd 3 (our pipe) and only ever signals nginx while the wrapper
/// has not reaped it, so a recycled pid is never hit.
const WRAPPER: &str = r#"
exec 3<&0 0</dev/null
"$1" -p "$2/" -c "$2/nginx.conf" -e "$2/error.log" -g 'daemon off;' 3<&- &
pid=$!
( cat <&3 >/dev/null; : > "$2/stopping"; kill -TERM "$pid" 2>/dev/null ) &
watcher=$!
exec 3<&-
wait "$pid"
rc=$?
if [ -e "$2/stopping" ]; then
    rm -rf -- "$3"
else
    kill "$watcher" 2>/dev/null
fi
exit "$rc"
"#;

enum StartError {
    /// A port was taken between choosing it and nginx binding it: try other ports.
    PortTaken,
    Fatal(String),
}

impl Nginx {
    fn start() -> Nginx {
        let bin = nginx_bin();
        if !bin.exists() {
            panic!(
                "nginx not found at {}: the behaviour tests need a real nginx; {INSTALL_HINT} \
                 (or set RINGDL_TEST_NGINX)",
                bin.display()
            );
        }
        let base = tempfile::Builder::new()
            .prefix("ringdl-nginx-")
            .tempdir()
            .expect("creating the nginx fixture dir")
            .keep();
        let www = base.join("www");
        fs::create_dir(&www).unwrap();
        let files = SERVED_SIZES
            .iter()
            .map(|&size| {
                let name = format!("size-{size}.bin");
                let sha256 = write_random_file(&www.join(&name), size, size);
                ServedFile { name, size, sha256 }
            })
            .collect();
        let tls = base.join("tls");
        fs::create_dir(&tls).unwrap();
        let ca_pem = make_tls(&tls);
        let ipv6 = TcpListener::bind(SocketAddr::from((Ipv6Addr::LOCALHOST, 0))).is_ok();
        let modules = nginx_modules(&bin);

        for attempt in 1..=8 {
            let run = base.join(format!("run-{attempt}"));
            fs::create_dir_all(run.join("tmp")).unwrap();
            let ports = [(); 7].map(|_| free_port(ipv6));
            if ports.iter().collect::<std::collections::HashSet<_>>().len() != ports.len() {
                continue;
            }
            let conf = nginx_conf(&run, &www, &tls, ports, ipv6, &modules);
            fs::write(run.join("nginx.conf"), conf).unwrap();
            if let Some((child, stdin)) = spawn_nginx("ringdl-test-nginx", "nginx", &bin, &run, &base, &ports) {
                let [
                    http_port,
                    https_port,
                    tls12_port,
                    norange_port,
                    v6only_port,
                    v4only_port,
                    v6only_https_port,
                ] = ports;
                return Nginx {
                    http_port,
                    https_port,
                    tls12_port,
                    norange_port,
                    ipv6,
                    v6only_port,
                    v4only_port,
                    v6only_https_port,
                    base,
                    run,
                    ca_pem,
                    files,
                    _lifeline: Mutex::new((child, stdin)),
                };
            }
        }
        let _ = fs::remove_dir_all(&base);
        panic!("nginx: ports kept being taken, gave up after 8 attempts");
    }

    /// The file of `size` bytes (one of [`SERVED_SIZES`]).
    #[track_caller]
    pub fn file(&self, size: u64) -> &ServedFile {
        self.files
            .iter()
            .find(|f| f.size == size)
            .unwrap_or_else(|| panic!("the fixture serves no {size}-byte file: add it to SERVED_SIZES"))
    }

    /// The document root.
    pub fn www(&self) -> PathBuf {
        self.base.join("www")
    }

    /// PEM of the CA that issued the HTTPS servers' certificate (`--ca-certificate`).
    pub fn ca_pem(&self) -> &Path {
        &self.ca_pem
    }

    /// `http://127.0.0.1:<http_port>/<path>`.
    pub fn http_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.http_port)
    }

    /// `https://127.0.0.1:<https_port>/<path>`.
    pub fn https_url(&self, path: &str) -> String {
        self.https_url_host("127.0.0.1", path)
    }

    /// `https://<host>:<https_port>/<path>` (`localhost`, `127.0.0.1`, `[::1]`).
    pub fn https_url_host(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}/{path}", self.https_port)
    }

    /// `https://127.0.0.1:<tls12_port>/<path>` (TLS 1.2 only).
    pub fn tls12_url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}/{path}", self.tls12_port)
    }

    /// `http://127.0.0.1:<norange_port>/<path>` (`max_ranges 0`).
    pub fn norange_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.norange_port)
    }

    /// `http://127.0.0.1:<http_port>/paced/<path>`: the same files at 4 MiB/s per connection.
    pub fn paced_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/paced/{path}", self.http_port)
    }

    /// `https://127.0.0.1:<https_port>/paced/<path>`: the same files at 4 MiB/s per connection.
    pub fn paced_https_url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}/paced/{path}", self.https_port)
    }

    /// `http://127.0.0.1:<http_port>/capped-retry-after/<path>`: as [`Nginx::capped_url`]
    /// (own zone), and the 503 beyond two connections says `Retry-After: 60`.
    pub fn capped_retry_after_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/capped-retry-after/{path}", self.http_port)
    }

    /// `http://127.0.0.1:<http_port>/capped/<path>` (or https): the same files at 512 KiB/s
    /// per connection, and `limit_conn 2`: a third concurrent request from this client
    /// gets 503 (a server that caps connections per client).
    pub fn capped_url(&self, path: &str, https: bool) -> String {
        if https {
            format!("https://127.0.0.1:{}/capped/{path}", self.https_port)
        } else {
            format!("http://127.0.0.1:{}/capped/{path}", self.http_port)
        }
    }

    /// Body bytes sent (`$body_bytes_sent` of nginx's combined format, after the request
    /// line and the status) for each request in the main access log whose line contains
    /// `needle`, in log order. nginx writes a line when a request ends, aborted ones too.
    pub fn bytes_served(&self, needle: &str) -> Vec<u64> {
        fs::read_to_string(self.run.join("access.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(needle))
            .map(|l| {
                let after = l.split('"').nth(2).unwrap_or_else(|| panic!("access log line: {l}"));
                after
                    .split_whitespace()
                    .nth(1)
                    .and_then(|b| b.parse().ok())
                    .unwrap_or_else(|| panic!("no body bytes in access log line: {l}"))
            })
            .collect()
    }

    /// The lines of `users.log` (format `users`: host:port, request URI, then
    /// `auth=[..] cookie=[..] ua=[..] token=[..]`, `-` for a missing field) that hold
    /// `needle`: what the header and redirect locations (`/auth/`, `/token/`,
    /// `/to-other/`, `/to-same/`, `/open/`) received.
    pub fn users_log(&self, needle: &str) -> Vec<String> {
        fs::read_to_string(self.run.join("users.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }

    /// What the `/slow/` locations (HTTP and HTTPS) sent for `path`: per request, the
    /// first byte asked for (0 without Range) and the body bytes nginx sent
    /// (`$body_bytes_sent`: what it wrote to the socket, including what the client left
    /// unread when it closed). A line is written when its request ends.
    pub fn slow_sent(&self, path: &str) -> Vec<(u64, u64)> {
        let uri = format!("/slow/{path} ");
        fs::read_to_string(self.run.join("sent.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut f = l.strip_prefix(&uri)?.split(' ');
                let _status = f.next()?;
                let sent = f.next()?.parse().ok()?;
                let start = f
                    .next()
                    .and_then(|r| r.strip_prefix("bytes="))
                    .and_then(|r| r.split('-').next())
                    .and_then(|a| a.parse().ok())
                    .unwrap_or(0);
                Some((start, sent))
            })
            .collect()
    }

    /// `https://127.0.0.1:<https_port>/slow/<path>`: the same files at 256 KiB/s.
    pub fn slow_https_url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}/slow/{path}", self.https_port)
    }

    /// The lines of the main `access.log` (nginx's `combined` format: the client's
    /// address first, then the request line) that hold `needle`.
    pub fn access_log(&self, needle: &str) -> Vec<String> {
        fs::read_to_string(self.run.join("access.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }

    /// The connections the `/conn/` and `/once/` locations (HTTP and HTTPS; `/once/` closes
    /// each connection after one response) served requests whose URI starts with
    /// `prefix` on: per request, nginx's connection serial number (`$connection`, unique
    /// per accepted connection) and the URI, in the order the requests ended.
    pub fn conn_log(&self, prefix: &str) -> Vec<(u64, String)> {
        fs::read_to_string(self.run.join("conn.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut f = l.split(' ');
                let conn = f.next()?.parse().ok()?;
                let _requests = f.next()?;
                let uri = f.next()?;
                uri.starts_with(prefix).then(|| (conn, uri.to_owned()))
            })
            .collect()
    }

    /// `http://127.0.0.1:<http_port>/slow/<path>`: the same files at 256 KiB/s.
    pub fn slow_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/slow/{path}", self.http_port)
    }
}

/// Generates a CA and a leaf for `localhost`, `127.0.0.1` and `::1` (rcgen, ECDSA
/// P-256) into `dir`: `ca.pem`, `server.pem` (leaf + CA), `server.key`. Returns the
/// CA path. A separate CA (rather than a self-signed leaf) keeps webpki happy: it
/// refuses a CA certificate used as an end entity.
pub fn make_tls(dir: &Path) -> PathBuf {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.distinguished_name.push(DnType::CommonName, "ringdl test CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).expect("generating the test CA");

    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    let mut leaf_params = CertificateParams::new(names).unwrap();
    leaf_params.distinguished_name.push(DnType::CommonName, "localhost");
    leaf_params.is_ca = IsCa::ExplicitNoCa;
    leaf_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = leaf_params
        .signed_by(&leaf_key, &ca)
        .expect("signing the server certificate");

    let ca_path = dir.join("ca.pem");
    fs::write(&ca_path, ca.pem()).unwrap();
    fs::write(dir.join("server.pem"), leaf.pem() + &ca.pem()).unwrap();
    fs::write(dir.join("server.key"), leaf_key.serialize_pem()).unwrap();
    ca_path
}

/// Temp-path directives this nginx knows (each module with a temp path may be
/// compiled out; an unknown directive would stop nginx).
fn nginx_modules(bin: &Path) -> Vec<&'static str> {
    let out = Command::new(bin)
        .arg("-V")
        .output()
        .unwrap_or_else(|e| panic!("running {} -V: {e}", bin.display()));
    let text = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    ["proxy", "fastcgi", "uwsgi", "scgi"]
        .into_iter()
        .filter(|m| !text.contains(&format!("--without-http_{m}_module")))
        .collect()
}

/// The credentials `/auth/` requires: `alice` / `p@ss:w0rd%`, as Basic (RFC 7617).
pub const USERS_BASIC: &str = "YWxpY2U6cEBzczp3MHJkJQ==";

fn nginx_conf(
    run: &Path,
    www: &Path,
    tls: &Path,
    [http, https, tls12, norange, v6only, v4only, v6only_https]: [u16; 7],
    ipv6: bool,
    modules: &[&str],
) -> String {
    let run = run.display();
    let tls = tls.display();
    let listen = |port: u16, extra: &str| {
        let mut s = format!("listen 127.0.0.1:{port}{extra};");
        if ipv6 {
            s.push_str(&format!(" listen [::1]:{port}{extra};"));
        }
        s
    };
    let temp_paths: String = modules
        .iter()
        .map(|m| format!("    {m}_temp_path \"{run}/tmp/{m}\";\n"))
        .collect();
    // Workers must read files in a root-owned 0700 temp dir: run them as root then.
    let user = if is_root() { "user root;" } else { "" };
    format!(
        r#"{user}
worker_processes 2;
pid "{run}/nginx.pid";
error_log "{run}/error.log" warn;
events {{ worker_connections 1024; }}
http {{
    access_log "{run}/access.log";
    client_body_temp_path "{run}/tmp/client_body";
{temp_paths}    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    server_tokens off;
    keepalive_timeout 60s;
    keepalive_requests 100000;
    limit_conn_zone $binary_remote_addr zone=cap_http:1m;
    limit_conn_zone $binary_remote_addr zone=cap_https:1m;
    limit_conn_zone $binary_remote_addr zone=cap_ra:1m;
    log_format users '$host:$server_port $request_uri auth=[$http_authorization] cookie=[$http_cookie] ua=[$http_user_agent] token=[$http_x_token]';
    log_format sent '$request_uri $status $body_bytes_sent $http_range';
    log_format conn '$connection $connection_requests $request_uri $status';
    root "{www}";
    ssl_certificate "{tls}/server.pem";
    ssl_certificate_key "{tls}/server.key";
    server {{
        {http_listen}
        location /slow/ {{ alias "{www}/"; limit_rate 256k; access_log "{run}/sent.log" sent; }}
        location /paced/ {{ alias "{www}/"; limit_rate 4m; }}
        location /conn/ {{ alias "{www}/"; access_log "{run}/conn.log" conn; }}
        location /once/ {{ alias "{www}/"; access_log "{run}/conn.log" conn; keepalive_timeout 0; }}
        location /capped/ {{ alias "{www}/"; limit_rate 512k; limit_conn cap_http 2; }}
        location /paced-conn/ {{ alias "{www}/"; limit_rate 4m; access_log "{run}/conn.log" conn; }}
        location /capped-retry-after/ {{
            alias "{www}/"; limit_rate 512k; limit_conn cap_ra 2; error_page 503 @retry_after;
        }}
        location @retry_after {{ add_header Retry-After 60 always; return 503; }}
        # Basic alice / p@ss:w0rd%  (tests::users)
        location /auth/ {{
            alias "{www}/"; access_log "{run}/users.log" users;
            if ($http_authorization != "Basic {basic}") {{ return 401; }}
        }}
        location /token/ {{
            alias "{www}/"; access_log "{run}/users.log" users;
            if ($http_x_token != "t0k3n") {{ return 403; }}
        }}
        location ~ ^/to-other/(.*)$ {{
            access_log "{run}/users.log" users; return 302 http://localhost:{http}/open/$1$is_args$args;
        }}
        location ~ ^/to-same/(.*)$ {{ access_log "{run}/users.log" users; return 302 /auth/$1$is_args$args; }}
        location /open/ {{ alias "{www}/"; access_log "{run}/users.log" users; }}
        # A multi-range request is answered 200 with the whole file (nginx: max_ranges).
        location /one-range/ {{ alias "{www}/"; max_ranges 1; }}
    }}
    server {{
        {https_listen}
        ssl_protocols TLSv1.2 TLSv1.3;
        location /slow/ {{ alias "{www}/"; limit_rate 256k; access_log "{run}/sent.log" sent; }}
        location /paced/ {{ alias "{www}/"; limit_rate 4m; }}
        location /conn/ {{ alias "{www}/"; access_log "{run}/conn.log" conn; }}
        location /once/ {{ alias "{www}/"; access_log "{run}/conn.log" conn; keepalive_timeout 0; }}
        location /capped/ {{ alias "{www}/"; limit_rate 512k; limit_conn cap_https 2; }}
    }}
    server {{
        {tls12_listen}
        ssl_protocols TLSv1.2;
    }}
    server {{
        {norange_listen}
        max_ranges 0;
    }}
    server {{
        {v6only_listen}
    }}
    server {{
        listen 127.0.0.1:{v4only} ssl;
    }}
    server {{
        {v6only_https_listen}
    }}
}}
"#,
        www = www.display(),
        http_listen = listen(http, ""),
        https_listen = listen(https, " ssl"),
        tls12_listen = listen(tls12, " ssl"),
        norange_listen = listen(norange, ""),
        v6only_listen = if ipv6 {
            format!("listen [::1]:{v6only};")
        } else {
            format!("listen 127.0.0.1:{v6only};")
        },
        v6only_https_listen = if ipv6 {
            format!("listen [::1]:{v6only_https} ssl;")
        } else {
            format!("listen 127.0.0.1:{v6only_https} ssl;")
        },
        basic = USERS_BASIC,
    )
}

/// Waits until nginx wrote its pid file (it does so after binding every listening
/// socket) and every port accepts a connection.
/// Starts nginx with `run/nginx.conf` through [`WRAPPER`] (`tag` names the shell in `ps`)
/// and waits until it listens on `ports`. `None`: a port was taken meanwhile (try other
/// ports). Panics, after removing `base`, when nginx cannot start at all (`what` names it).
fn spawn_nginx(
    tag: &str,
    what: &str,
    bin: &Path,
    run: &Path,
    base: &Path,
    ports: &[u16],
) -> Option<(Child, ChildStdin)> {
    let log = File::create(run.join("wrapper.log")).unwrap();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(WRAPPER)
        .arg(tag)
        .arg(bin)
        .arg(run)
        .arg(base)
        .stdin(Stdio::piped())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("starting sh for nginx: {e}"));
    let stdin = child.stdin.take().unwrap();
    match wait_ready(&mut child, run, ports) {
        Ok(()) => Some((child, stdin)),
        Err(e) => {
            drop(stdin);
            let _ = child.kill();
            let _ = child.wait();
            if let StartError::Fatal(msg) = e {
                let _ = fs::remove_dir_all(base);
                panic!("{what} did not start: {msg}\n({INSTALL_HINT})");
            }
            None
        }
    }
}

/// `n` free loopback ports, all different (`None`: two came out equal; try again).
fn distinct_ports(n: usize, also_v6: bool) -> Option<Vec<u16>> {
    let ports: Vec<u16> = (0..n).map(|_| free_port(also_v6)).collect();
    let set: std::collections::HashSet<_> = ports.iter().collect();
    (set.len() == n).then_some(ports)
}

/// The start of an nginx config whose pid, logs and temp paths are all under `run`, up to
/// and inside `http {` (the caller adds its fields and servers, then the closing brace).
fn conf_head(run: &Path, modules: &[&str]) -> String {
    let temp_paths: String = modules
        .iter()
        .map(|m| format!("    {m}_temp_path \"{}/tmp/{m}\";\n", run.display()))
        .collect();
    let user = if is_root() { "user root;" } else { "" };
    format!(
        "{user}\nworker_processes 1;\npid \"{run}/nginx.pid\";\nerror_log \"{run}/error.log\" warn;\n\
         events {{ worker_connections 256; }}\nhttp {{\n    \
         client_body_temp_path \"{run}/tmp/client_body\";\n{temp_paths}    \
         default_type application/octet-stream;\n    server_tokens off;\n",
        run = run.display(),
    )
}

fn wait_ready(child: &mut Child, run: &Path, ports: &[u16]) -> Result<(), StartError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let log = || {
        let read = |name: &str| fs::read_to_string(run.join(name)).unwrap_or_default();
        format!("{}{}", read("error.log"), read("wrapper.log"))
    };
    loop {
        if let Some(status) = child.try_wait().expect("waiting for the nginx wrapper") {
            let log = log();
            if log.contains("Address already in use") {
                return Err(StartError::PortTaken);
            }
            return Err(StartError::Fatal(format!(
                "nginx exited with {status}; config {}:\n{log}",
                run.join("nginx.conf").display()
            )));
        }
        let pid_written = fs::read_to_string(run.join("nginx.pid")).is_ok_and(|p| !p.trim().is_empty());
        if pid_written && ports.iter().all(|&p| accepts(p)) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(StartError::Fatal(format!("not ready after 30 s:\n{}", log())));
        }
        thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------
// HTTPS servers with certificates of the test's choosing

/// One HTTPS server of a [`CertServers`]: a name for the test, the PEM chain nginx
/// presents (leaf first) and the PEM private key of the leaf.
#[derive(Clone)]
pub struct CertServer {
    /// The test's name for this server (`other-name`, `expired`, …).
    pub label: String,
    /// `ssl_certificate`: leaf first, then any intermediates.
    pub chain_pem: String,
    /// `ssl_certificate_key`.
    pub key_pem: String,
}

/// A second nginx serving the fixture's document root over HTTPS, one port per
/// certificate (an IP literal sends no SNI, so each certificate needs its own port).
/// Its lifetime works as the [`Nginx`] fixture's: it stops when the test process exits.
pub struct CertServers {
    base: PathBuf,
    /// Where this nginx writes (`access.log`).
    run: PathBuf,
    ports: Vec<(String, u16)>,
    /// Keeps the wrapper alive: dropping the stdin (only at process exit) stops nginx.
    _lifeline: Mutex<(Child, ChildStdin)>,
}

impl CertServers {
    /// Starts nginx with one `listen … ssl` server per entry of `servers`, serving
    /// `www` (usually [`Nginx::www`]).
    ///
    /// # Panics
    /// When nginx does not start (the message holds its log).
    pub fn start(www: &Path, servers: &[CertServer]) -> CertServers {
        CertServers::start_with(www, servers, &[])
    }

    /// As [`CertServers::start`], with `extra[k]` (when there is one) added to server
    /// `k`'s block: `ssl_protocols TLSv1.2; ssl_ciphers AES128-SHA;`.
    ///
    /// # Panics
    /// When nginx does not start (the message holds its log).
    pub fn start_with(www: &Path, servers: &[CertServer], extra: &[&str]) -> CertServers {
        let base = tempfile::Builder::new()
            .prefix("ringdl-nginx-certs-")
            .tempdir()
            .expect("creating the cert servers dir")
            .keep();
        for s in servers {
            fs::write(base.join(format!("{}.pem", s.label)), &s.chain_pem).unwrap();
            fs::write(base.join(format!("{}.key", s.label)), &s.key_pem).unwrap();
        }
        let bin = nginx_bin();
        let ipv6 = TcpListener::bind(SocketAddr::from((Ipv6Addr::LOCALHOST, 0))).is_ok();
        let modules = nginx_modules(&bin);
        for attempt in 1..=8 {
            let run = base.join(format!("run-{attempt}"));
            fs::create_dir_all(run.join("tmp")).unwrap();
            let Some(ports) = distinct_ports(servers.len(), ipv6) else {
                continue;
            };
            let mut conf = conf_head(&run, &modules);
            conf.push_str(&format!(
                "    log_format tls '$server_port $connection $ssl_session_reused $request_uri $status';\n    \
                 access_log \"{}/access.log\" tls;\n    root \"{}\";\n",
                run.display(),
                www.display()
            ));
            for (k, (s, port)) in servers.iter().zip(&ports).enumerate() {
                let mut listen = format!("listen 127.0.0.1:{port} ssl;");
                if ipv6 {
                    listen.push_str(&format!(" listen [::1]:{port} ssl;"));
                }
                conf.push_str(&format!(
                    "    server {{ {listen} ssl_certificate \"{b}/{l}.pem\"; ssl_certificate_key \"{b}/{l}.key\"; {e} }}\n",
                    b = base.display(),
                    l = s.label,
                    e = extra.get(k).copied().unwrap_or("")
                ));
            }
            conf.push_str("}\n");
            fs::write(run.join("nginx.conf"), conf).unwrap();
            if let Some((child, stdin)) = spawn_nginx(
                "ringdl-test-nginx-certs",
                "nginx (cert servers)",
                &bin,
                &run,
                &base,
                &ports,
            ) {
                return CertServers {
                    base,
                    run,
                    ports: servers.iter().map(|s| s.label.clone()).zip(ports).collect(),
                    _lifeline: Mutex::new((child, stdin)),
                };
            }
        }
        let _ = fs::remove_dir_all(&base);
        panic!("nginx (cert servers): ports kept being taken, gave up after 8 attempts");
    }

    /// A directory for the test's own files (anchors to give with `--ca-certificate`),
    /// removed with the servers at process exit. It also holds `<label>.pem`, each
    /// server's chain.
    pub fn dir(&self) -> &Path {
        &self.base
    }

    /// The requests the server labelled `label` answered, in the order they ended: per
    /// request nginx's connection serial number (`$connection`, unique per accepted
    /// connection), whether the TLS session was resumed (`$ssl_session_reused`: `r`
    /// resumed, `.` a full handshake), the request URI and the status.
    #[track_caller]
    pub fn log(&self, label: &str) -> Vec<(u64, bool, String, u16)> {
        let port = self.port(label).to_string();
        fs::read_to_string(self.run.join("access.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                let [p, conn, reused, uri, status] = f[..] else {
                    return None;
                };
                (p == port).then(|| {
                    (
                        conn.parse().expect("$connection"),
                        reused == "r",
                        uri.to_owned(),
                        status.parse().expect("$status"),
                    )
                })
            })
            .collect()
    }

    /// The port of the server labelled `label`.
    #[track_caller]
    pub fn port(&self, label: &str) -> u16 {
        self.ports
            .iter()
            .find(|(l, _)| l == label)
            .unwrap_or_else(|| panic!("no cert server labelled {label:?}"))
            .1
    }

    /// `https://<host>:<port of label>/<path>` (`host`: `127.0.0.1`, `localhost`, `[::1]`).
    #[track_caller]
    pub fn url(&self, label: &str, host: &str, path: &str) -> String {
        format!("https://{host}:{}/{path}", self.port(label))
    }
}

// ---------------------------------------------------------------------------
// Small file helpers

/// Asserts `path` holds exactly the bytes of `file`.
#[track_caller]
pub fn assert_same_bytes(path: &Path, file: &ServedFile) {
    let meta = fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(meta.len(), file.size, "size of {}", path.display());
    assert_eq!(
        sha256_file(path),
        file.sha256,
        "SHA-256 of {} differs from {}",
        path.display(),
        file.name
    );
}

/// `FILE.part` for `FILE`.
pub fn part_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".part");
    PathBuf::from(s)
}

/// Sets Unix permission bits.
pub fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

/// True when something (file, dir, dangling symlink) is at `path`.
pub fn exists(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

// ---------------------------------------------------------------------------
// Mirror sites (tests::mirrors)

/// One site of [`MirrorSites`]: a document root, plain HTTP or HTTPS.
pub struct MirrorSite {
    /// Directory served as `/`.
    pub root: PathBuf,
    /// HTTPS with the fixture's certificate ([`Nginx::ca_pem`] verifies it).
    pub tls: bool,
    /// nginx `limit_rate` per connection (`"1m"`), if any.
    pub limit_rate: Option<&'static str>,
}

/// A separate nginx with one server per [`MirrorSite`], each on its own loopback port
/// and with its own access log (`$status $http_range`), so a test can count what each
/// mirror served. It stops when the test process exits, as the [`Nginx`] fixture does.
pub struct MirrorSites {
    run: PathBuf,
    /// The port of each site, in the order given.
    pub ports: Vec<u16>,
    tls: Vec<bool>,
    _lifeline: Mutex<(Child, ChildStdin)>,
}

impl MirrorSites {
    /// Starts nginx for `sites`.
    ///
    /// # Panics
    /// When nginx does not start (the message holds its log).
    pub fn start(sites: &[MirrorSite]) -> MirrorSites {
        let fixture = nginx();
        let tls_dir = fixture.base.join("tls");
        let base = tempfile::Builder::new()
            .prefix("ringdl-nginx-mirrors-")
            .tempdir()
            .expect("creating the mirror sites dir")
            .keep();
        let bin = nginx_bin();
        let modules = nginx_modules(&bin);
        for attempt in 1..=8 {
            let run = base.join(format!("run-{attempt}"));
            fs::create_dir_all(run.join("tmp")).unwrap();
            let Some(ports) = distinct_ports(sites.len(), false) else {
                continue;
            };
            let mut conf = conf_head(&run, &modules);
            conf.push_str(&format!(
                "    keepalive_requests 100000;\n    log_format ranges '$status $http_range';\n    \
                 ssl_certificate \"{tls}/server.pem\";\n    ssl_certificate_key \"{tls}/server.key\";\n",
                tls = tls_dir.display(),
            ));
            for (k, (s, port)) in sites.iter().zip(&ports).enumerate() {
                conf.push_str(&format!(
                    "    server {{ listen 127.0.0.1:{port}{ssl}; root \"{root}\"; access_log \"{run}/site-{k}.log\" ranges;{rate} }}\n",
                    ssl = if s.tls { " ssl" } else { "" },
                    rate = s.limit_rate.map_or(String::new(), |r| format!(" limit_rate {r};")),
                    root = s.root.display(),
                    run = run.display(),
                ));
            }
            conf.push_str("}\n");
            fs::write(run.join("nginx.conf"), conf).unwrap();
            if let Some((child, stdin)) = spawn_nginx(
                "ringdl-test-nginx-mirrors",
                "nginx (mirror sites)",
                &bin,
                &run,
                &base,
                &ports,
            ) {
                return MirrorSites {
                    run,
                    ports,
                    tls: sites.iter().map(|s| s.tls).collect(),
                    _lifeline: Mutex::new((child, stdin)),
                };
            }
        }
        let _ = fs::remove_dir_all(&base);
        panic!("nginx (mirror sites): ports kept being taken, gave up after 8 attempts");
    }

    /// `http(s)://127.0.0.1:<port of site k>/<path>`.
    pub fn url(&self, k: usize, path: &str) -> String {
        let scheme = if self.tls[k] { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}/{path}", self.ports[k])
    }

    /// Site `k`'s access log: one `(status, Range header)` per request (`-` for none).
    pub fn requests(&self, k: usize) -> Vec<(u16, String)> {
        fs::read_to_string(self.run.join(format!("site-{k}.log")))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (status, range) = l.split_once(' ')?;
                Some((status.parse().ok()?, range.to_owned()))
            })
            .collect()
    }

    /// How many 206 answers site `k` sent.
    pub fn ranges_served(&self, k: usize) -> usize {
        self.requests(k).iter().filter(|(s, _)| *s == 206).count()
    }
}
