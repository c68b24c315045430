#!/usr/bin/env bash
# VM tests: kTLS needs a kernel with tls.ko, which the host may not have. Boots Debian's
# linux-image-6.1.0-*-amd64 (unpacked into a cache, never installed) under qemu TCG with
# a busybox initramfs that holds the static ringdl, an HTTPS test server
# (tests/vm/server.rs) and the kTLS modules, runs the cases of tests/vm/init.sh and
# fails unless every enabled case prints `RINGDL-VM <case> PASS`.
#
#   tests/vm/run.sh                 # the enabled cases
#   RINGDL_VM_KTLS=0 tests/vm/run.sh       # only the user-space TLS cases
#   RINGDL_VM_ONLY='ktls-splice' tests/vm/run.sh   # only cases matching this ERE
#
# Environment:
#   RINGDL_STATIC_BIN      static ringdl (default: build it, as scripts/test.sh does)
#   RINGDL_VM_SERVER_BIN   static vm_server (default: build the example for musl)
#   RINGDL_VM_CACHE        kernel cache (default /var/tmp/ringdl-vm)
#   RINGDL_VM_KERNEL_PKG   Debian kernel package (default: newest linux-image-6.1.0-N-amd64)
#   RINGDL_VM_TIMEOUT      seconds for the whole VM run (default 300)
#   RINGDL_VM_PAYLOAD      payload bytes (default 4 MiB + 12345)
#   RINGDL_VM_LOG          console log path (default: $RINGDL_VM_CACHE/console.log)
#   RINGDL_VM_SMP          guest CPUs (default 2)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=../../scripts/lib.sh
source "$here/../../scripts/lib.sh"
cd "$(repo_root)"

cache=${RINGDL_VM_CACHE:-/var/tmp/ringdl-vm}
timeout_s=${RINGDL_VM_TIMEOUT:-300}
payload=${RINGDL_VM_PAYLOAD:-$((4 * 1024 * 1024 + 12345))}
console_log=${RINGDL_VM_LOG:-$cache/console.log}
smp=${RINGDL_VM_SMP:-2}

# ---------------------------------------------------------------------------------------
# Cases: NAME|vm_server OPTIONS|ringdl OPTIONS|EXPECT (an ERE that `ringdl -v` output must
# match; empty for none). Every download fetches /payload.bin into ext4 (O_DIRECT works)
# and compares SHA-256. `tls-module` is special: /sys/module/tls after the insmods.
CASES=(
    "tls-module|||"
    "https13-direct|--tls 1.3|--engine direct -x 4|"
    "https12-direct|--tls 1.2|--engine direct -x 4|"
    "https13-direct-x1-chacha20|--tls 1.3 --suite chacha20|--engine direct -x 1|"
)

# KTLS_CASES: the kTLS engines. EXPECT requires the summary to say kTLS really ran
# ("engine splice (kTLS on N of M connections)"), so a silent fallback to user-space TLS
# fails the case. RINGDL_VM_KTLS=0 skips them. Server knobs: top of tests/vm/server.rs.
# Kernel 6.1: a TLS 1.3 KeyUpdate kills a kTLS RX connection (rekey needs 6.14), so the
# keyupdate cases pass only if ringdl retries the rest of the segment on a new connection
# (each connection gets one KeyUpdate after 512 KiB of body).
KTLS_CASES=(
    # auto must pick a kTLS engine on a kernel that has kTLS.
    "ktls-auto-tls13|--tls 1.3|-x 4|engine ktls-direct \\(kTLS on [1-9]"
    "ktls-auto-tls12|--tls 1.2|-x 2|engine ktls-direct \\(kTLS on [1-9]"
)
for engine in splice ktls-direct; do
    for tls in 1.3 1.2; do
        for suite in aes128gcm aes256gcm chacha20; do
            KTLS_CASES+=("ktls-$engine-tls${tls/./}-$suite|--tls $tls --suite $suite|--engine $engine -x 4|engine $engine \(kTLS on [1-9]")
        done
    done
    KTLS_CASES+=(
        # NewSessionTickets (TLS 1.3 handshake records) after the handshake, before the body:
        # ringdl -v names each one it read under kTLS (none when the server sends none).
        "ktls-$engine-tickets0|--tls 1.3 --tickets 0|--engine $engine -x 4|engine $engine \(kTLS on [1-9] && !NewSessionTicket under kTLS"
        "ktls-$engine-tickets4|--tls 1.3 --tickets 4|--engine $engine -x 4|engine $engine \(kTLS on [1-9] && NewSessionTicket under kTLS"
        # KeyUpdate mid-body: the server must have sent one (its log counts them) and ringdl
        # must have met it under kTLS and gone on with the rest on a new connection.
        "ktls-$engine-keyupdate|--tls 1.3 --key-update-after 524288|--engine $engine -x 4|engine $engine \(kTLS on [1-9] && KeyUpdate\): continuing on a new connection; retrying bytes|key-updates [1-9]"
        # One response per connection, then close_notify / bare FIN / RST.
        "ktls-$engine-tls13-close-notify|--tls 1.3 --conn-close --close notify|--engine $engine -x 4|engine $engine \(kTLS on [1-9]"
        "ktls-$engine-tls13-close-fin|--tls 1.3 --conn-close --close fin|--engine $engine -x 4|engine $engine \(kTLS on [1-9]"
        "ktls-$engine-tls12-close-notify|--tls 1.2 --conn-close --close notify|--engine $engine -x 4|engine $engine \(kTLS on [1-9]"
        "ktls-$engine-tls12-close-fin|--tls 1.2 --conn-close --close fin|--engine $engine -x 4|engine $engine \(kTLS on [1-9]"
        # Odd record sizes: 1000-byte writes make many small records.
        "ktls-$engine-small-records|--tls 1.3 --chunk 1000|--engine $engine -x 2|engine $engine \(kTLS on [1-9]"
    )
done
# ---------------------------------------------------------------------------------------

# Modules for kTLS (DESIGN.md order), then ChaCha20-Poly1305 and CCM for the other
# ciphers, then the output filesystem (loop + ext4) and netem for later WAN tests. Each
# one's `depends=` (from its .modinfo) is loaded first. `?` marks an optional module.
MODULES=(
    gf128mul ghash-generic ctr gcm cryptd crypto_simd aesni-intel ghash-clmulni-intel
    ?libchacha ?chacha_generic ?chacha-x86_64 ?libpoly1305 ?poly1305_generic
    ?poly1305-x86_64 ?chacha20poly1305 ?ccm
    tls
    ?crc32c_generic ?crc32c-intel loop ext4 ?sch_netem
)

cases=("${CASES[@]}")
[ "${RINGDL_VM_KTLS:-1}" = 1 ] && cases+=("${KTLS_CASES[@]}")
if [ -n "${RINGDL_VM_ONLY:-}" ]; then
    sel=()
    for c in "${cases[@]}"; do [[ ${c%%|*} =~ $RINGDL_VM_ONLY ]] && sel+=("$c"); done
    cases=("${sel[@]}")
fi
[ "${#cases[@]}" -gt 0 ] || die "no case selected"

t_start=$SECONDS

# --- host tools ---------------------------------------------------------------------------
ensure_tools qemu-system-x86_64:qemu-system-x86 cpio:cpio gzip:gzip dpkg-deb:dpkg \
    /var/lib/dpkg/info/busybox-static.list:busybox-static
busybox=/bin/busybox
[ -x "$busybox" ] || busybox=/usr/bin/busybox
[ -x "$busybox" ] || die "busybox-static installed but no /bin/busybox"

# --- kernel -------------------------------------------------------------------------------
as_root mkdir -p "$cache"
newest_kernel_pkg() {
    apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' 2>/dev/null |
        awk '{ print $1 }' | sort -V | tail -n 1
}
pkg=${RINGDL_VM_KERNEL_PKG:-}
if [ -z "$pkg" ]; then
    pkg=$(newest_kernel_pkg)
    if [ -z "$pkg" ] && command -v apt-get >/dev/null 2>&1; then
        log "apt-get update (looking for linux-image-6.1.0-*-amd64)"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 || true
        pkg=$(newest_kernel_pkg)
    fi
    if [ -z "$pkg" ]; then
        # Offline: the newest one already unpacked.
        pkg=$(find "$cache" -maxdepth 1 -name 'linux-image-6.1.0-*-amd64' -printf '%f\n' 2>/dev/null |
            sort -V | tail -n 1)
    fi
    [ -n "$pkg" ] || die "apt offers no linux-image-6.1.0-*-amd64 (Debian 12 bookworm main)"
fi
kdir=$cache/$pkg
if ! compgen -G "$kdir/boot/vmlinuz-*" >/dev/null; then
    log "fetching $pkg (apt-get download, unpacked into $kdir, not installed)"
    dl=$(mktemp -d "$cache/dl.XXXXXX")
    # _apt cannot write into a root-owned mktemp dir: let it.
    chmod 0777 "$dl"
    (cd "$dl" && as_root apt-get download -q "$pkg" >&2)
    deb=$(compgen -G "$dl/${pkg}_*.deb" | head -n 1)
    [ -n "$deb" ] || die "apt-get download $pkg produced no .deb"
    as_root rm -rf "$kdir.tmp"
    as_root dpkg-deb -x "$deb" "$kdir.tmp"
    dpkg-deb -f "$deb" Version | as_root tee "$kdir.tmp/.deb-version" >/dev/null
    as_root mv "$kdir.tmp" "$kdir"
    as_root rm -rf "$dl"
    # Older unpacked kernels are dead weight (≈ 400 MB each).
    for old in "$cache"/linux-image-6.1.0-*-amd64; do
        [ "$old" = "$kdir" ] || as_root rm -rf "$old"
    done
fi
vmlinuz=$(compgen -G "$kdir/boot/vmlinuz-*" | head -n 1)
kver=${vmlinuz##*/vmlinuz-}
moddir=$kdir/lib/modules/$kver/kernel
[ -d "$moddir" ] || die "no module tree at $moddir"
kpkgver=$(cat "$kdir/.deb-version" 2>/dev/null || true)
log "kernel $pkg ($kver${kpkgver:+, $kpkgver})"

# --- binaries -----------------------------------------------------------------------------
# Under `cargo test` the environment carries the test's CARGO_MANIFEST_DIR, CARGO_PKG_*...:
# a nested cargo build would see them as changed build-script inputs (ring tracks
# CARGO_MANIFEST_DIR) and rebuild the world, then again on the next plain build.
for v in $(compgen -e); do
    case $v in
        CARGO_MANIFEST_* | CARGO_PKG_* | CARGO_CRATE_NAME | CARGO_BIN_* | CARGO_PRIMARY_PACKAGE | \
            CARGO_TARGET_TMPDIR | CARGO_RUSTC_CURRENT_DIR) unset "$v" ;;
    esac
done
ringdl_bin=${RINGDL_STATIC_BIN:-}
[ -n "$ringdl_bin" ] || ringdl_bin=$(build_static)
[ -x "$ringdl_bin" ] || die "RINGDL_STATIC_BIN=$ringdl_bin is not an executable"
server_bin=${RINGDL_VM_SERVER_BIN:-}
if [ -z "$server_bin" ]; then
    ensure_musl_target
    log "building the VM test server (example vm_server, release, $MUSL_TARGET)"
    CC_x86_64_unknown_linux_musl=musl-gcc \
        cargo build --release --target "$MUSL_TARGET" -p ringdl --example vm_server >&2
    server_bin=$(target_dir)/$MUSL_TARGET/release/examples/vm_server
fi
[ -x "$server_bin" ] || die "vm_server not found at $server_bin"

# --- initramfs ----------------------------------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/ringdl-vm.XXXXXX")
qpid=""
cleanup() {
    [ -n "$qpid" ] && kill "$qpid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
root=$work/root
mkdir -p "$root"/{bin,lib/modules,proc,sys,dev,tmp,srv,mnt}

cp "$busybox" "$root/bin/busybox"
for applet in $("$busybox" --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
done
# Line tables are of no use in the guest and cost TCG boot time (initrd unpacking).
if command -v strip >/dev/null 2>&1; then
    strip -o "$root/bin/ringdl" "$ringdl_bin"
    strip -o "$root/bin/vm_server" "$server_bin"
else
    cp "$ringdl_bin" "$root/bin/ringdl"
    cp "$server_bin" "$root/bin/vm_server"
fi
install -m 0755 "$here/init.sh" "$root/init"
printf '%s\n' "$payload" >"$root/payload_size"
printf '%s\n' "${cases[@]}" >"$root/cases"

# Module name → file (names compare with - and _ alike, as the kernel does).
declare -A modfile=()
while IFS= read -r f; do
    n=${f##*/}
    n=${n%.ko}
    modfile[${n//-/_}]=$f
done < <(find "$moddir" -name '*.ko')
declare -A loaded=()
order=()
add_module() { # NAME OPTIONAL
    local key=${1//-/_} f dep deps
    [ -n "${loaded[$key]:-}" ] && return 0
    f=${modfile[$key]:-}
    if [ -z "$f" ]; then
        [ "$2" = 1 ] && { log "optional module $1 not in $kver"; return 0; }
        die "module $1 not in $kver"
    fi
    loaded[$key]=1
    deps=$(tr '\0' '\n' <"$f" | sed -n 's/^depends=//p' | head -n 1)
    for dep in ${deps//,/ }; do add_module "$dep" 0; done
    cp "$f" "$root/lib/modules/"
    order+=("$(basename "$f" .ko)")
}
for m in "${MODULES[@]}"; do
    if [[ $m == \?* ]]; then add_module "${m#\?}" 1; else add_module "$m" 0; fi
done
printf '%s\n' "${order[@]}" >"$root/modules.order"

(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 >"$work/initrd.gz"
log "initramfs $(du -h "$work/initrd.gz" | cut -f1): ${#order[@]} modules, ${#cases[@]} cases"

# --- boot ---------------------------------------------------------------------------------
mkdir -p "$(dirname "$console_log")"
log "booting (TCG, timeout ${timeout_s}s), console → $console_log"
t_boot=$SECONDS
# The console (minus CRs and SeaBIOS's terminal escapes) goes to the log; the RINGDL-VM
# and `vm:` lines also to stderr, live.
set +e
timeout --kill-after=10 "$timeout_s" qemu-system-x86_64 -accel tcg -cpu max -smp "$smp" -m 512 \
    -nographic -no-reboot -nic none \
    -kernel "$vmlinuz" -initrd "$work/initrd.gz" \
    -append "console=ttyS0 quiet panic=-1" </dev/null |
    sed -u -E $'s/\r//g; s/\e(\\[[0-9;?]*[A-Za-z]|c)//g' | tee "$console_log" |
    grep --line-buffered -E '^RINGDL-VM|vm: ' >&2
rc=${PIPESTATUS[0]}
set -e
vm_s=$((SECONDS - t_boot))

# --- verdict ------------------------------------------------------------------------------
fail=0
[ "$rc" -eq 0 ] || { log "qemu exited with $rc (124: timeout after ${timeout_s}s)"; fail=1; }
grep -q '^RINGDL-VM-END' "$console_log" || { log "the VM never printed RINGDL-VM-END"; fail=1; }
grep -q '^RINGDL-VM init FAIL' "$console_log" && fail=1
for c in "${cases[@]}"; do
    name=${c%%|*}
    if ! grep -q "^RINGDL-VM $name PASS" "$console_log"; then
        log "case $name did not pass"
        fail=1
    fi
done
log "VM ${vm_s}s, total $((SECONDS - t_start))s"
if [ "$fail" -ne 0 ]; then
    log "FAILED; the whole console is in $console_log"
    exit 1
fi
log "all ${#cases[@]} VM cases passed ($pkg)"
