//! ringdl: download files over HTTP or HTTPS, each over up to N Range connections, on
//! io_uring (or epoll) reactors — one per thread with `--threads` —, landing exact bytes
//! with O_DIRECT. Everything is in the library.

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    ringdl::main()
}
