# Shared by scripts/test.sh and scripts/demo.sh; source it, do not run it.
# shellcheck shell=bash
# Expects `set -euo pipefail` in the caller.

MUSL_TARGET=x86_64-unknown-linux-musl

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Repository root (this file lives in scripts/).
repo_root() { cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd; }

# Runs a command as root: directly when we are root, else through sudo.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root (or sudo) to run: $*"
    fi
}

# ensure_tools "cmd:package" ...: installs (apt, non-interactive) the packages whose
# command is missing; does nothing, quickly, when every command is present. A command
# given as an absolute path is checked for existence.
ensure_tools() {
    local missing=() pair cmd pkg
    for pair in "$@"; do
        cmd=${pair%%:*}
        pkg=${pair#*:}
        if [[ $cmd == /* ]]; then
            [ -e "$cmd" ] && continue
        else
            command -v "$cmd" >/dev/null 2>&1 && continue
        fi
        missing+=("$pkg")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    # Unique package names, stable order.
    mapfile -t missing < <(printf '%s\n' "${missing[@]}" | awk '!seen[$0]++')
    command -v apt-get >/dev/null 2>&1 ||
        die "missing packages ${missing[*]} and no apt-get: install them by hand"
    log "installing ${missing[*]}"
    # Keep the nginx package from starting a system nginx (port 80) on install:
    # policy-rc.d exit 101 tells invoke-rc.d / deb-systemd-invoke "do not start". Only
    # when no policy exists, removed right after; a system nginx already running is left
    # alone.
    local policy=/usr/sbin/policy-rc.d added_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
        as_root chmod 0755 "$policy"
        added_policy=1
    fi
    local rc=0
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q || rc=$?
    if [ "$rc" -eq 0 ]; then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            --no-install-recommends "${missing[@]}" || rc=$?
    fi
    [ "$added_policy" -eq 1 ] && as_root rm -f "$policy"
    [ "$rc" -eq 0 ] || die "apt-get failed ($rc) installing ${missing[*]}"
}

# Services: the scripts never stop, start or reconfigure one. The tests and the demo run
# their own nginx (own config, pid file, logs and temp paths in a work directory, free
# loopback ports) beside any system nginx, and stop only the process they started.

# Adds the musl target when rustup manages the toolchain.
ensure_musl_target() {
    if command -v rustup >/dev/null 2>&1; then
        rustup target list --installed | grep -qx "$MUSL_TARGET" ||
            rustup target add "$MUSL_TARGET"
    fi
}

# Cargo's target directory (CARGO_TARGET_DIR or <root>/target).
target_dir() { printf '%s\n' "${CARGO_TARGET_DIR:-$(repo_root)/target}"; }

# Builds the static release binary; prints its path on stdout.
build_static() {
    ensure_musl_target
    log "building the static binary (release, $MUSL_TARGET)"
    # ring compiles C and assembly: musl-gcc from musl-tools.
    CC_x86_64_unknown_linux_musl=musl-gcc \
        cargo build --release --target "$MUSL_TARGET" -p ringdl --bin ringdl >&2
    local bin
    bin="$(target_dir)/$MUSL_TARGET/release/ringdl"
    [ -x "$bin" ] || die "static binary not found at $bin"
    printf '%s\n' "$bin"
}
