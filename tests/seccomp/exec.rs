//! `seccomp_exec COMMAND [ARGS...]`: runs COMMAND with io_uring refused by a seccomp
//! filter (EPERM for io_uring_setup / io_uring_enter / io_uring_register), as in a default
//! Docker ≥ 25 or containerd 2.0 container. For trying and benchmarking ringdl's epoll
//! fallback by hand:
//!
//! ```sh
//! cargo build --release --example seccomp_exec
//! target/release/examples/seccomp_exec ringdl -v https://host/file
//! ```

use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

#[path = "filter.rs"]
mod filter;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(program) = args.next() else {
        eprintln!("usage: seccomp_exec COMMAND [ARGS...]");
        return ExitCode::from(2);
    };
    if let Err(e) = filter::deny_io_uring() {
        eprintln!("seccomp_exec: installing the filter: {e}");
        return ExitCode::from(126);
    }
    let e = Command::new(&program).args(args).exec();
    eprintln!("seccomp_exec: {}: {e}", program.to_string_lossy());
    ExitCode::from(127)
}
