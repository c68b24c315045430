#!/usr/bin/env bash
# The test command: installs what the tests need (only when missing), then
# formatting, clippy, the static musl build and the whole test suite in release mode.
#
#   ./scripts/test.sh            # everything
#   ./scripts/test.sh -- NAME    # extra arguments go to `cargo test` (e.g. a filter)
#
# Debian/Ubuntu with rustup and cargo; runs as root or with sudo for apt-get.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$(repo_root)"

[ "${1:-}" = "--" ] && shift

# The verdict, always the last line: every `test result:` line cargo printed is summed
# (passed, failed, ignored) and the step that failed, if one did, is named. `.ci/run`
# and a developer read the same line.
results=$(mktemp "${TMPDIR:-/tmp}/ringdl-test-results.XXXXXX")
step="setup"
verdict() {
    local rc=$? sums
    sums=$(awk '/^test result: /{for(i=1;i<=NF;i++){v=$i+0; if($(i+1)~/^passed/)p+=v; if($(i+1)~/^failed/)f+=v; if($(i+1)~/^ignored/)g+=v}} END{printf "%d passed, %d failed, %d ignored", p, f, g}' "$results")
    rm -f "$results"
    if [ "$rc" -eq 0 ]; then
        printf 'test.sh: all steps passed: %s\n' "$sums"
    else
        printf 'test.sh: FAILED in step "%s" (exit %d): %s\n' "$step" "$rc" "$sums"
    fi
}
trap verdict EXIT
# Runs a cargo test command, its output also kept for the verdict.
run_tests() { "$@" 2>&1 | tee -a "$results"; }

# Tools the tests and the static build use, and the Debian package of each.
# (nginx-light pulls nginx; util-linux provides setpriv, prlimit, flock and mount; tinyproxy is
# the real HTTP proxy of the proxy tests, started by them, never as a service.)
ensure_tools \
    /usr/sbin/nginx:nginx-light \
    /usr/bin/tinyproxy:tinyproxy \
    /usr/bin/microsocks:microsocks \
    musl-gcc:musl-tools \
    curl:curl \
    /etc/ssl/certs/ca-certificates.crt:ca-certificates \
    setpriv:util-linux \
    prlimit:util-linux \
    flock:util-linux \
    mount:mount \
    /sbin/mkfs.ext2:e2fsprogs \
    openssl:openssl \
    qemu-system-x86_64:qemu-system-x86 \
    cpio:cpio \
    /var/lib/dpkg/info/busybox-static.list:busybox-static \
    /usr/bin/ssh-keygen:openssh-client \
    /usr/bin/signify-openbsd:signify-openbsd \
    /usr/bin/minisign:minisign \
    /usr/bin/strace:strace \
    /usr/bin/zck:zchunk \
    /usr/bin/zsyncmake:zsync

if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    command -v rustup >/dev/null 2>&1 || die "cargo fmt / cargo clippy missing and no rustup"
    rustup component add rustfmt clippy
fi

log "toolchain: $(rustc --version); $(/usr/sbin/nginx -v 2>&1)"

step="cargo fmt --check"
log "cargo fmt --check"
cargo fmt --all -- --check

step="cargo clippy"
log "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

step="shape"
log "the house's shape (scripts/shape.py: functions over 120 lines, glob imports, event/'s share, circles)"
python3 scripts/shape.py

step="static build"
RINGDL_STATIC_BIN="$(build_static)"
export RINGDL_STATIC_BIN
log "static binary: $RINGDL_STATIC_BIN"

# The kTLS VM tests (tests/vm.rs -> tests/vm/run.sh --kernel 6.1, then --kernel current):
# qemu TCG booting Debian's 6.1 kernel and the current one pinned in tests/vm/run.sh, with
# tls.ko, the static ringdl and a static rustls test server inside.
log "building the VM test server and seccomp_exec (examples, $MUSL_TARGET)"
CC_x86_64_unknown_linux_musl=musl-gcc \
    cargo build --release --target "$MUSL_TARGET" -p ringdl --example vm_server --example seccomp_exec >&2
RINGDL_VM_SERVER_BIN="$(target_dir)/$MUSL_TARGET/release/examples/vm_server"
RINGDL_VM_SECCOMP_BIN="$(target_dir)/$MUSL_TARGET/release/examples/seccomp_exec"
export RINGDL_VM_SERVER_BIN RINGDL_VM_SECCOMP_BIN
: "${RINGDL_VM_TESTS:=1}"
export RINGDL_VM_TESTS

# Fuzzing, short pass (issue 5): every target for a few seconds on nightly; the corpus is
# also replayed on stable by tests/fuzz_corpus.rs. The long run: fuzz/run.sh 1800.
step="fuzz short pass"
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
    log "fuzz: short pass (${RINGDL_FUZZ_SECONDS:-10} s per target)"
    sh fuzz/run.sh "${RINGDL_FUZZ_SECONDS:-10}"
else
    log "fuzz: no nightly toolchain here; short pass skipped (the corpus replay still runs)"
fi

# The corpus replay with overflow checks on, as the fuzzer runs (a release build wraps
# silently): the dev/test profile, one more build of the workspace (~3 min on 2 cores);
# under --release below the test is listed as ignored.
step="fuzz corpus replay"
log "fuzz corpus replay with overflow checks (test profile)"
run_tests cargo test --test tests -- fuzz_corpus::

step="cargo test (release)"
log "cargo test (release)"
run_tests cargo test --workspace --release --no-fail-fast "$@"

# The kTLS VM cases are #[ignore]d for a plain `cargo test` (they boot qemu for minutes):
# run here unless RINGDL_VM_TESTS=0 or a filter was given.
if [ "$RINGDL_VM_TESTS" != 0 ] && [ "$#" -eq 0 ]; then
    step="kTLS VM cases"
    log "kTLS VM cases (tests/vm/run.sh under qemu)"
    run_tests cargo test --release --no-fail-fast --test tests -- --ignored vm::
fi

# The same download, fault and list suites on the epoll backend (issue 12; lists since
# -j runs files at once on one ring; threads since --threads runs a ring per thread):
# every ringdl run gets --io epoll, and the summary check asserts it ran there.
step="cargo test (release) on epoll"
log "cargo test (release) on the epoll backend: download, fault, list and thread suites"
run_tests env RINGDL_TEST_IO=epoll cargo test --release --no-fail-fast --test tests -- download:: faults:: list:: threads:: "$@"

# The download, fault, list and software-record-layer suites again at --threads 2
# (issue 24): every ringdl run gets --threads 2, so a file of more than one segment
# spreads over a second reactor, and a list's files are placed on both.
step="cargo test (release) at --threads 2"
log "cargo test (release) at --threads 2: download, fault, list and soft TLS suites"
run_tests env RINGDL_TEST_THREADS=2 cargo test --release --no-fail-fast --test tests -- download:: faults:: list:: soft_tls:: "$@"
