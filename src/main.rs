//! ringdl: download one file over HTTP or HTTPS with N Range connections, from one thread
//! and one io_uring, landing exact bytes with O_DIRECT.
//!
//! Arrows point down: CLI → download (scheduler, control plane, engines) → output → `uring`.

#![forbid(unsafe_code)]

mod cli;
mod download;
mod engine;
mod error;
mod output;
mod progress;
mod schedule;
mod tls;

use std::net::ToSocketAddrs;
use std::os::fd::AsRawFd;
use std::process::ExitCode;

use cli::{Command, Options, OutputTarget};
use download::Outcome;
use error::Result;
use output::Output;
use progress::Progress;

/// Sent as User-Agent.
pub const USER_AGENT: &str = concat!("ringdl/", env!("CARGO_PKG_VERSION"));

/// Redirects followed before giving up.
const MAX_REDIRECTS: u32 = 10;

fn main() -> ExitCode {
    match real_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ringdl: {e}");
            ExitCode::from(e.kind.exit_code())
        }
    }
}

fn real_main() -> Result<()> {
    let mut opts = match cli::parse(std::env::args_os().skip(1))? {
        Command::Help => {
            print!("{}", cli::HELP);
            return Ok(());
        }
        Command::Version => {
            println!("ringdl {}", env!("CARGO_PKG_VERSION"));
            return Ok(());
        }
        Command::Download(o) => o,
    };
    // Before anything else: SIGINT/SIGTERM become a completion on the ring, so an interrupt
    // stops the download between two operations and keeps the `.part` consistent.
    let signals = uring::signal::block_signals(&[uring::signal::SIGINT, uring::signal::SIGTERM])
        .map_err(|e| err!(LocalIo, "signalfd: {e}"))?;
    let mut url = http::Url::parse(&opts.url).map_err(|e| err!(Usage, "bad URL {:?}: {e}", opts.url))?;
    if opts.output == OutputTarget::Stdout {
        opts.connections = 1;
    }
    if opts.insecure {
        eprintln!("ringdl: warning: --insecure: the server certificate is NOT verified");
    }
    let final_path = output::final_path(&opts.output, &url);
    let (out, engine) = Output::open(&opts.output, final_path, opts.engine, opts.force)?;
    if opts.verbose > 0 {
        eprintln!(
            "ringdl: engine {} ({})",
            engine.name(),
            if out.direct {
                format!("O_DIRECT, {}-byte alignment", out.align)
            } else {
                "page cache".to_owned()
            }
        );
    }
    let mut progress = Progress::new(opts.quiet);
    let mut tls_config = None;
    let mut hops = 0;
    loop {
        let r = fetch(&url, &opts, &out, &mut tls_config, &mut progress, signals.as_raw_fd());
        match r {
            Ok(Outcome::Done(s)) => {
                out.commit()?;
                if !opts.quiet {
                    let secs = s.elapsed.as_secs_f64();
                    let rate = if secs > 0.0 { s.bytes as f64 / secs } else { 0.0 };
                    eprintln!(
                        "ringdl: done: {} bytes in {secs:.2} s, {}/s, engine {}, {} connections, {}{}, {}",
                        s.bytes,
                        progress::human(rate as u64),
                        engine.name(),
                        s.connections,
                        s.tls,
                        if s.registered { "" } else { ", unregistered buffers" },
                        out.final_path
                            .as_ref()
                            .map_or_else(|| "standard output".to_owned(), |p| p.display().to_string()),
                    );
                }
                return Ok(());
            }
            Ok(Outcome::Redirect(to)) => {
                hops += 1;
                if hops > MAX_REDIRECTS {
                    out.discard_if_empty();
                    return Err(err!(Protocol, "more than {MAX_REDIRECTS} redirects (last to {to})"));
                }
                if url.scheme() == http::Scheme::Https && to.scheme() == http::Scheme::Http {
                    out.discard_if_empty();
                    return Err(err!(Protocol, "refusing redirect from https to http: {to}"));
                }
                if opts.verbose > 0 {
                    eprintln!("ringdl: redirected to {to}");
                }
                url = to;
            }
            Err(e) => {
                progress.clear();
                out.discard_if_empty();
                return Err(e);
            }
        }
    }
}

/// One attempt at `url`: resolve, then the download loop.
fn fetch(
    url: &http::Url,
    opts: &Options,
    out: &Output,
    tls_config: &mut Option<std::sync::Arc<rustls::ClientConfig>>,
    progress: &mut Progress,
    signals: std::os::fd::RawFd,
) -> Result<Outcome> {
    let addrs: Vec<_> = (url.host(), url.port())
        .to_socket_addrs()
        .map_err(|e| err!(Network, "cannot resolve {}: {e}", url.host()))?
        .collect();
    if addrs.is_empty() {
        return Err(err!(Network, "{} has no address", url.host()));
    }
    let tls = if url.scheme() == http::Scheme::Https {
        if tls_config.is_none() {
            *tls_config = Some(tls::client_config(
                opts.ca_certificate.as_deref(),
                opts.insecure,
                opts.verbose,
            )?);
        }
        tls_config.clone()
    } else {
        None
    };
    download::run(url, opts, tls, addrs, out, progress, Some(signals))
}
