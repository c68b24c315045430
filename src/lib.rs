//! ringdl as a library: every room of the downloader — the event loop, the control
//! plane, the scheduler, the engines, the output — behind one entry point, [`main`]. The
//! `ringdl` binary is that call; `fuzz/` and the corpus replay (`tests/fuzz_corpus.rs`)
//! drive [`engine`] directly, the very code that places body bytes at file offsets.
//!
//! Arrows point down only: `app` (CLI → config) → `event` (the loop) → `control`,
//! `schedule`, `engine` → `output` → `uring`; `http` does no I/O; `schedule` and
//! `engine::select` are pure. `report` is a leaf both `app` and the loop print through:
//! the loop hands it typed `report::Note`s and it decides what `-q`/`-v` shows.

#![forbid(unsafe_code)]

// std's print macros panic when the stream is gone (`ringdl ... 2>&1 | head`), and with
// panic = abort that is a SIGABRT in the middle of a download. Messages are best effort:
// these shadow std's for the whole crate (textual macro scope: defined before the modules).
macro_rules! eprintln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}
macro_rules! eprint {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($t)*);
    }};
}
macro_rules! println {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}
macro_rules! print {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}

mod app;
mod base64;
mod cli;
mod config;
mod control;
pub mod delta;
pub mod engine;
mod error;
mod event;
pub mod input;
mod io;
mod lane;
mod output;
mod reactors;
mod report;
pub mod schedule;
pub mod signature;
mod signed;
mod tag;
mod transfer;

pub use app::main;

// The fuzz properties (`fuzz/props.rs`, which names this crate `ringdl`), for the unit
// tests that replay the corpora of the pure rooms: `compaction` (engine::place) and
// `scheduler` (schedule). In the unit tests they run for every `cargo test --lib`, and
// cargo-mutants (`scripts/mutants.sh place|schedule`, unit tests only) sees them.
#[cfg(test)]
extern crate self as ringdl;
#[cfg(test)]
#[path = "../fuzz/props.rs"]
mod fuzz_props;

/// Replays every committed input of fuzz target `target` (`fuzz/corpus/<target>/*`)
/// through its property `check`; panics naming the inputs that fail.
#[cfg(test)]
fn replay_corpus(target: &str, check: fuzz_props::Check) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: no inputs", dir.display());
    let failed: Vec<String> = files
        .iter()
        .filter(|f| {
            let data = std::fs::read(f).unwrap();
            std::panic::catch_unwind(|| check(&data)).is_err()
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        failed.is_empty(),
        "{target}: property failures (messages above):\n{}",
        failed.join("\n")
    );
}
