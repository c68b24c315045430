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
mod cli;
mod config;
mod control;
pub mod engine;
mod error;
mod event;
mod io;
mod output;
mod report;
pub mod schedule;
mod tag;

pub use app::main;
