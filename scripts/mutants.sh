#!/usr/bin/env bash
# Mutation testing (issue 16): cargo-mutants changes the code one small edit at a time
# (a `<` for a `<=`, a function body for `Default::default()`, …) and runs the tests;
# a mutant the tests do not catch is a behaviour no test pins. Not part of CI (it takes
# tens of minutes per place); installs cargo-mutants only when it is missing.
#
#   ./scripts/mutants.sh            # every place below but loop, one after the other
#   ./scripts/mutants.sh http       # one place: http | ktls | place | schedule | output | loop
#   ./scripts/mutants.sh place --iterate   # extra arguments go to every cargo mutants run
#
# Places and the tests each runs:
#   http   the http crate (URL, request, response head, Content-Range, chunked, …):
#          its unit tests
#   ktls   the ktls crate's record-type cmsg decoding and non-data records
#          (ktls/src/cmsg.rs, ktls/src/record.rs): its unit tests
#   place  the direct engine's compaction (src/engine/place.rs): the binary crate's
#          unit tests (`--lib`)
#   schedule  the pure scheduler (src/schedule/*.rs: plan, queue, retry, steal): the
#          binary crate's unit tests (`--lib`)
#   output the sync thread and the exit wait (src/output/syncer.rs, src/output/closes.rs):
#          their unit tests (`--lib`, `output::syncer` and `output::closes`)
#   loop   a sample of the event loop's mirror code (src/event/mirrors.rs: drops_mirror,
#          mirror_failing, no_mirror_left, reassign, release_conn, Validators::agree_with,
#          31 mutants): the integration tests `mirrors::` (real nginx and fault servers).
#          Not in the default list: each mutant builds every test target and runs the
#          mirrors tests (25 s clean, up to the 240 s timeout when a mutant hangs a
#          download); about 2-5 min a mutant on 2 busy cores, 1.5-2.5 h in all.
#
# Results: mutants.out/<place>/ (caught.txt, missed.txt, unviable.txt, timeout.txt);
# the counts and every missed mutant that is equivalent are in mutants.md.
# MUTANTS_JOBS (default 1) builds that many mutants at once. The dependencies are built
# once per place in target/mutants-<place> (CARGO_TARGET_DIR), not again in every run's
# copy of the tree. One directory per place: cargo names the test binary by the path
# relative to the workspace, so two runs sharing a directory overwrite each other's.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$(repo_root)"

command -v cargo-mutants >/dev/null 2>&1 || cargo install --locked cargo-mutants

run_place() {
    local place=$1 args test_args
    case $place in
        http) args=(--package ringdl-http) ;;
        ktls) args=(--package ktls --file ktls/src/cmsg.rs --file ktls/src/record.rs) ;;
        place) args=(--package ringdl --file src/engine/place.rs) ;;
        schedule) args=(--package ringdl --file 'src/schedule/*.rs') ;;
        output) args=(--package ringdl --file src/output/syncer.rs --file src/output/closes.rs) ;;
        loop)
            args=(--package ringdl --file src/event/mirrors.rs --timeout 240
                --re "in (Validators::agree_with|Loop<'a>::(drops_mirror|mirror_failing|no_mirror_left|reassign|release_conn))\$")
            ;;
        *) die "unknown place '$place' (http, ktls, place, schedule, output or loop)" ;;
    esac
    log "cargo mutants: $place"
    mkdir -p "mutants.out"
    # cargo-mutants exits 2 when mutants were missed, 3 on timeouts: report, do not stop.
    local rc=0
    case $place in
        # --lib for the build and the test run alike: only the unit tests, no integration
        # test binary built per mutant.
        place | schedule) test_args=(--cargo-arg=--lib) ;;
        # (Only these two modules' tests: the file tests of the rest add nothing here.)
        output) test_args=(--cargo-arg=--lib -- -- output::syncer output::closes) ;;
        # After `--`: cargo test's arguments, then the test binary's (its name filter).
        # The build step still builds every test target (cargo-mutants 27 passes these to
        # the test step only).
        loop) test_args=(-- --test tests -- mirrors::) ;;
        *) test_args=() ;;
    esac
    CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target/mutants-$place}" \
        cargo mutants --jobs "${MUTANTS_JOBS:-1}" --output "mutants.out/$place" "${args[@]}" \
        "${extra[@]}" "${test_args[@]}" || rc=$?
    case $rc in
        0 | 2 | 3) ;;
        *) die "cargo mutants failed on $place (exit $rc)" ;;
    esac
    local d="mutants.out/$place/mutants.out" f
    for f in caught missed unviable timeout; do
        printf '%s %s: %s\n' "$place" "$f" "$(wc -l <"$d/$f.txt" 2>/dev/null || echo 0)"
    done
}

places=()
extra=()
for a in "$@"; do
    case $a in
        -*) extra+=("$a") ;;
        *) places+=("$a") ;;
    esac
done
[ ${#places[@]} -gt 0 ] || places=(http ktls place schedule output)
for p in "${places[@]}"; do run_place "$p"; done
