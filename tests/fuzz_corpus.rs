//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/*`) through the same property
//! checks the libFuzzer targets assert (`fuzz/props.rs`), on stable Rust: every seed and
//! every past finding stays checked in `cargo test` without nightly or cargo-fuzz.
//!
//! With overflow checks on, as the fuzzer runs (`--debug-assertions`): a release build
//! wraps integer overflow silently, so a replay there would pass inputs the fuzzer
//! fails (`parse_decimal` with plain `* 10 +` passed a release replay). The test runs
//! under the dev/test profile (`cargo test --test tests -- fuzz_corpus`, which
//! `scripts/test.sh` runs) and is ignored, with that reason, under `--release`.

#[path = "../fuzz/props.rs"]
mod props;

use std::path::Path;

#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "needs overflow checks: cargo test --test tests -- fuzz_corpus (dev profile; scripts/test.sh runs it)"
)]
fn corpus_replays_without_property_failures() {
    // The profile turns overflow checks on for every crate of the workspace, the one
    // under test included: prove it here.
    let max = std::hint::black_box(u64::MAX);
    assert!(
        std::panic::catch_unwind(|| max + std::hint::black_box(1)).is_err(),
        "overflow checks are off in this build: the replay would miss integer overflow"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut total = 0;
    let mut failed = Vec::new();
    for &(target, check) in props::TARGETS {
        let dir = root.join(target);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file() && !p.file_name().unwrap().to_string_lossy().starts_with('.'))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{}: no seeds", dir.display());
        for file in &files {
            let data = std::fs::read(file).unwrap();
            if std::panic::catch_unwind(|| check(&data)).is_err() {
                failed.push(format!("{target}: {}", file.display()));
            }
        }
        total += files.len();
        eprintln!("{target}: {} inputs", files.len());
    }
    eprintln!("{total} corpus inputs replayed");
    assert!(
        failed.is_empty(),
        "property failures (messages above):\n{}",
        failed.join("\n")
    );
}
