//! ringdl: download one file over HTTP or HTTPS with N Range connections, from one thread
//! and one io_uring, landing exact bytes with O_DIRECT. Everything is in the library.

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    ringdl::main()
}
