#!/bin/sh
# Fuzzes every target in turn for SECONDS each (default 20: the short CI pass, ~10 × 20 s
# plus one ~2 min build) and prints libFuzzer's execution count per target.
#
#   fuzz/run.sh            # CI: 20 s per target
#   fuzz/run.sh 1800       # long run: 30 min per target, one at a time (~5 h)
#
# Needs `cargo install cargo-fuzz` and a nightly toolchain. Targets are safe Rust, so no
# sanitizer (twice the speed); debug assertions on, so integer overflow panics. New
# inputs go to a scratch directory, never into the committed fuzz/corpus/<target>/.
# A failure leaves its input in fuzz/artifacts/<target>/: minimize it with
# `cargo +nightly fuzz tmin -s none -a <target> <file>`, then copy it into
# fuzz/corpus/<target>/ so tests/fuzz_corpus.rs replays it on stable.
set -u
cd "$(dirname "$0")"
secs=${1:-20}
flags="--sanitizer none --debug-assertions"
cargo +nightly fuzz build $flags || exit 1
status=0
for t in $(cargo +nightly fuzz list); do
    scratch=$(mktemp -d)
    if cargo +nightly fuzz run $flags "$t" "$scratch" "corpus/$t" -- \
        -max_total_time="$secs" -print_final_stats=1 >"$scratch.log" 2>&1; then
        result=ok
    else
        result=FAILED
        status=1
        grep -E "panicked|Test unit written|SUMMARY" "$scratch.log" | head -5
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch.log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$scratch.log")
    printf '%-18s %-6s %12s execs %8s/s\n' "$t" "$result" "${execs:-?}" "${rate:-?}"
    rm -rf "$scratch" "$scratch.log"
done
exit $status
