//! The one integration-test binary (ripgrep's layout): every behaviour-test file is a
//! module here, so the fixtures in [`util`] and [`fault`] are shared (nginx starts once
//! per run) and a helper used by one file is not dead code in another.
//!
//! Test names are `<file>::<test>`: `cargo test --release --test tests -- faults::` runs
//! the fault-injection tests, `-- soak::kill_9` one soak.

mod fault;
mod util;

mod blockdev;
mod delta;
mod delta_report;
mod delta_zck;
mod delta_zsync;
mod download;
mod faults;
mod fresh;
mod fuzz_corpus;
mod keepalive;
mod limit_rate;
mod list;
mod mirrors;
mod multipart;
mod proxy;
mod reach;
mod seccomp;
mod signature;
mod soak;
mod socks;
mod soft_tls;
mod static_binary;
mod teardown;
mod threads;
mod trust;
mod users;
mod vm;
