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

/// The seeds of the signify and minisign targets (made with the real tools by
/// `fuzz/seeds.sh`) hold every form the parsers accept, so the replay above and the
/// fuzzer start from each: signify over a file and over SHA256SUMS, with CRLF line ends
/// and without a last newline, and signify's embedded form (`-e`), which is refused;
/// minisign prehashed (`ED`) and legacy (`Ed`), with the default comments and with
/// comments of one's own, with CRLF and without a last newline. (No overflow checks
/// needed: it runs in every profile.)
#[test]
fn signature_seeds_hold_every_form_the_parsers_accept() {
    use ringdl::signature::{minisign, signify};
    let seeds = |target: &str| -> Vec<(String, String)> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
        let mut v: Vec<(String, String)> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| {
                let p = e.unwrap().path();
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(&p).unwrap())
            })
            .collect();
        v.sort();
        assert!(
            v.len() >= 5,
            "{target}: {} seeds, fewer than 5 (fuzz/seeds.sh)",
            v.len()
        );
        v
    };
    let crlf = |t: &str| t.contains("\r\n");
    let no_newline = |t: &str| !t.ends_with('\n');

    let sf = seeds("signature_signify");
    for (name, text) in &sf {
        match signify::parse(text) {
            Err(e) if name.contains("embedded") => assert!(e.0.contains("signify -e"), "{name}: {e:?}"),
            Ok(_) if name.contains("embedded") => panic!("{name}: an embedded signature parsed"),
            r => assert!(r.is_ok(), "{name}: {r:?}"),
        }
    }
    let forms = |f: &dyn Fn(&str) -> bool| sf.iter().any(|(n, t)| !n.contains("embedded") && f(t));
    assert!(
        forms(&crlf) && forms(&no_newline),
        "signify: no CRLF or no unterminated seed"
    );
    assert!(sf.iter().any(|(n, _)| n.contains("embedded")), "signify: no -e seed");
    assert!(
        sf.iter().any(|(n, _)| n.contains("sha256")),
        "signify: no seed over a SHA256SUMS"
    );

    let mi = seeds("signature_minisign");
    let parsed: Vec<(&str, minisign::Signature)> = mi
        .iter()
        .map(|(n, t)| (t.as_str(), minisign::parse(t).unwrap_or_else(|e| panic!("{n}: {e:?}"))))
        .collect();
    let default = "signature from minisign secret key";
    for prehashed in [true, false] {
        let of = |f: &dyn Fn(&str, &minisign::Signature) -> bool| {
            parsed.iter().any(|(t, s)| s.prehashed == prehashed && f(t, s))
        };
        assert!(
            of(&|_, s| s.untrusted == default),
            "minisign prehashed={prehashed}: no default comments"
        );
        // Own comments: `-c`, and a `-t` with a field minisign's default does not write.
        let own_trusted = |s: &minisign::Signature| {
            s.trusted
                .split('\t')
                .any(|f| !f.starts_with("timestamp:") && !f.starts_with("file:") && f != "hashed")
        };
        assert!(
            of(&|_, s| s.untrusted != default && own_trusted(s)),
            "minisign prehashed={prehashed}: no comments of its own"
        );
    }
    assert!(
        parsed.iter().any(|(t, _)| crlf(t)) && parsed.iter().any(|(t, _)| no_newline(t)),
        "minisign: no CRLF or no unterminated seed"
    );
}
