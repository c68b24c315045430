#!/usr/bin/env bash
# VM tests: kTLS needs a kernel with tls.ko, which the host may not have. Boots a Debian
# kernel package (unpacked into a cache, never installed) under qemu TCG with a busybox
# initramfs that holds the static ringdl, an HTTPS test server (tests/vm/server.rs) and
# the kTLS modules, runs the cases of tests/vm/init.sh and fails unless every enabled case
# prints `RINGDL-VM <case> PASS`.
#
#   tests/vm/run.sh                        # kernel 6.1, the enabled cases
#   tests/vm/run.sh --kernel current       # the pinned current kernel (CURRENT_KERNEL_PKG)
#   RINGDL_VM_KTLS=0 tests/vm/run.sh       # only the user-space TLS cases
#   RINGDL_VM_ONLY='ktls-splice' tests/vm/run.sh   # only cases matching this ERE
#
# Kernels (--kernel, or RINGDL_VM_KERNEL):
#   6.1      the newest linux-image-6.1.0-N-amd64 the machine's own apt offers (Debian 12
#            bookworm main). A TLS 1.3 KeyUpdate ends a kTLS connection: ringdl reconnects.
#   current  CURRENT_KERNEL_PKG below, from CURRENT_KERNEL_SUITE through a private apt
#            configuration in the run's work directory (the machine's apt sources are not
#            touched). Rekeys kTLS in place (6.14+), tmpfs takes O_DIRECT (6.6+): the
#            rekey-* and auto-tmp cases run here only.
#
# Environment:
#   RINGDL_STATIC_BIN      static ringdl (default: build it, as scripts/test.sh does)
#   RINGDL_VM_SERVER_BIN   static vm_server (default: build the example for musl)
#   RINGDL_VM_SECCOMP_BIN  static seccomp_exec (default: build the example for musl)
#   RINGDL_VM_CACHE        kernel cache (default /var/tmp/ringdl-vm), one directory per
#                          package name; runs in parallel share only finished entries
#   RINGDL_VM_KERNEL_PKG   Debian kernel package instead of the kernel's default
#   RINGDL_VM_MIRROR       Debian mirror for `current` (default http://deb.debian.org/debian)
#   RINGDL_VM_TIMEOUT      seconds for the whole VM run (default 300; current: 600)
#   RINGDL_VM_PAYLOAD      payload bytes (default 4 MiB + 12345)
#   RINGDL_VM_LOG          console log path (default: a new file per run under
#                          $RINGDL_VM_CACHE/logs, removed when every case passed)
#   RINGDL_VM_SMP          guest CPUs (default 2)
set -euo pipefail

# The current kernel: the one place its package is pinned. trixie-backports ships
# 6.16 ... 7.x; from 7.x on linux-image-* is a meta package over linux-binary-* (the
# kernel) and linux-modules-* (the .ko.xz tree), which the fetch below follows.
CURRENT_KERNEL_PKG=linux-image-7.3.4+deb13-amd64
CURRENT_KERNEL_SUITE=trixie-backports

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=../../scripts/lib.sh
source "$here/../../scripts/lib.sh"
cd "$(repo_root)"

kernel=${RINGDL_VM_KERNEL:-6.1}
while [ $# -gt 0 ]; do
    case $1 in
        --kernel) kernel=${2:?--kernel wants 6.1 or current}; shift 2 ;;
        --kernel=*) kernel=${1#--kernel=}; shift ;;
        *) die "unknown argument $1 (see the top of $0)" ;;
    esac
done
case $kernel in
    6.1 | current) ;;
    *) die "--kernel: 6.1 or current, not $kernel" ;;
esac

cache=${RINGDL_VM_CACHE:-/var/tmp/ringdl-vm}
if [ "$kernel" = current ]; then timeout_s=${RINGDL_VM_TIMEOUT:-600}; else timeout_s=${RINGDL_VM_TIMEOUT:-300}; fi
payload=${RINGDL_VM_PAYLOAD:-$((4 * 1024 * 1024 + 12345))}
# The rekey cases' body: KeyUpdate every 1 MiB on 16 MiB (flag `big`).
payload_big=$((16 * 1024 * 1024 + 12345))
smp=${RINGDL_VM_SMP:-2}

# ---------------------------------------------------------------------------------------
# Cases: NAME|vm_server OPTIONS|ringdl OPTIONS|EXPECT|SERVER EXPECT|FLAGS. EXPECT: EREs
# that `ringdl -v` output must match, SERVER EXPECT: on `vm_server -v` output (several
# joined by ` && ` must all match, `!ERE` must not; empty for none). Every download fetches /payload.bin into ext4
# (O_DIRECT works) and compares SHA-256. FLAGS (space-separated, optional): `big` fetches
# the 16 MiB payload instead; `out=DIR` writes there instead of the ext4 mount; `ku-count`
# requires the KeyUpdates vm_server sent == those ringdl rekeyed in place (its summary) ==
# the KeyUpdates the client answered with (the server's count), and no reconnect.
# `no-ca` runs ringdl without --ca-certificate (and fails the case if the image has
# /etc/ssl or SSL_CERT_FILE/DIR); `rc=N` wants exit code N and no output left (no SHA-256
# then); `seccomp` runs ringdl under seccomp_exec (io_uring_* refused with EPERM, as in a
# default container); `uring-off` sets kernel.io_uring_disabled=2 (6.6+) for the case.
# `tls-module` is special: /sys/module/tls after the insmods.
CASES=(
    "tls-module|||"
    "https13-direct|--tls 1.3|--engine direct -x 4|"
    "https12-direct|--tls 1.2|--engine direct -x 4|"
    "https13-direct-x1-chacha20|--tls 1.3 --suite chacha20|--engine direct -x 1|"
    # No CA file anywhere in the image: ringdl loads its bundled roots, reads no missing
    # file, and so refuses the server's private CA as an unknown issuer (exit 4, TLS).
    "no-ca-files-bundled-roots|--tls 1.3|-x 1|[1-9][0-9]{2,} trust anchors bundled && not trusted \(unknown issuer\) && !SSL_CERT||no-ca rc=4"
)

# KTLS_CASES: the kTLS engines. EXPECT requires the summary to say kTLS really ran
# ("engine splice (kTLS on N of M TLS connections)"), so a silent fallback to user-space TLS
# fails the case. RINGDL_VM_KTLS=0 skips them. Server knobs: top of tests/vm/server.rs.
# Kernel 6.1: a TLS 1.3 KeyUpdate kills a kTLS RX connection (rekey needs 6.14), so the
# keyupdate cases pass only if ringdl retries the rest of the segment on a new connection
# (each connection gets one KeyUpdate after 512 KiB of body); the current kernel must
# rekey in place instead.
if [ "$kernel" = current ]; then
    ku_expect='KeyUpdates? rekeyed in place'
else
    ku_expect='KeyUpdate\) and kTLS cannot take them in place.*continuing on a new connection'
fi
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
        # must have met it under kTLS (rekeyed in place, or gone on with the rest on a new
        # connection, as this kernel allows).
        "ktls-$engine-keyupdate|--tls 1.3 --key-update-after 524288|--engine $engine -x 4|engine $engine \(kTLS on [1-9] && $ku_expect|key-updates [1-9]"
        # One response per connection, then close_notify / bare FIN / RST.
        "ktls-$engine-tls13-close-notify|--tls 1.3 --conn-close --close notify|--engine $engine -x 4|engine $engine \(kTLS on [1-9]"
        "ktls-$engine-tls13-close-fin|--tls 1.3 --conn-close --close fin|--engine $engine -x 4|engine $engine \(kTLS on [1-9]"
        "ktls-$engine-tls12-close-notify|--tls 1.2 --conn-close --close notify|--engine $engine -x 4|engine $engine \(kTLS on [1-9]"
        "ktls-$engine-tls12-close-fin|--tls 1.2 --conn-close --close fin|--engine $engine -x 4|engine $engine \(kTLS on [1-9]"
        # Odd record sizes: 1000-byte writes make many small records.
        "ktls-$engine-small-records|--tls 1.3 --chunk 1000|--engine $engine -x 2|engine $engine \(kTLS on [1-9]"
    )
done
if [ "$kernel" = current ]; then
    # Rekey in place: a KeyUpdate (update_requested, as rustls sends it) every 1 MiB of
    # body per connection on 16 MiB, each suite, both kTLS engines: exact bytes, every
    # KeyUpdate taken in place (counted on both sides) and connections opened == -x (plus
    # at most one per work-stealing split under ktls-direct: see `ku-count` in init.sh).
    for engine in ktls-direct splice; do
        for suite in aes128gcm aes256gcm chacha20; do
            KTLS_CASES+=("rekey-$engine-$suite|--tls 1.3 --suite $suite --key-update-every 1048576|--engine $engine -x 4|engine $engine \(kTLS on [0-9]+ of [0-9]+ TLS connections, [0-9]+ KeyUpdates rekeyed in place\)||big ku-count")
        done
    done
    KTLS_CASES+=(
        # update_requested: one connection, one KeyUpdate after 256 KiB, then the requests
        # for the other segments go out under the new TX key (the server must decrypt them).
        "rekey-update-requested-x1|--tls 1.3 --key-update-after 262144|--engine ktls-direct -x 1|engine ktls-direct \(kTLS on 1 of 1 TLS connections, 1 KeyUpdate rekeyed in place\)||ku-count"
        # tmpfs takes O_DIRECT since 6.6: auto picks ktls-direct on the VM's /tmp.
        "auto-tmp|--tls 1.3|-x 4|engine ktls-direct \(kTLS on [1-9]||out=/tmp"
    )
else
    KTLS_CASES+=(
        # tmpfs refuses O_DIRECT before 6.6: auto runs `buffered` on the VM's /tmp, with
        # the kernel still decrypting, and the summary must say so (issue 22).
        "auto-tmp-buffered|--tls 1.3|-x 4|engine buffered \(kTLS on [1-9]||out=/tmp"
    )
fi
# io_uring refused, kTLS still there (it needs no io_uring): the epoll backend, each kTLS
# engine, and (current) a KeyUpdate taken in place. The current kernel (6.6+) refuses
# io_uring with the sysctl kernel.io_uring_disabled=2; 6.1 has no such sysctl, so there
# the seccomp filter of tests/seccomp refuses it, as a default container profile does.
nouring_io='I/O epoll \(io_uring refused: EPERM\)'
if [ "$kernel" = current ]; then nouring=uring-off; else nouring=seccomp; fi
KTLS_CASES+=(
    "nouring-$nouring-auto|--tls 1.3|-x 4|$nouring_io && engine ktls-direct \(kTLS on [1-9]||$nouring"
    "nouring-$nouring-ktls-direct-tls12|--tls 1.2 --suite aes256gcm|--engine ktls-direct -x 4|$nouring_io && engine ktls-direct \(kTLS on [1-9]||$nouring"
    "nouring-$nouring-splice|--tls 1.3 --suite chacha20|--engine splice -x 4|$nouring_io && engine splice \(kTLS on [1-9]||$nouring"
    "nouring-$nouring-direct|--tls 1.3|--engine direct -x 4|$nouring_io && engine direct|!kTLS|$nouring"
)
if [ "$kernel" = current ]; then
    KTLS_CASES+=(
        "nouring-$nouring-rekey|--tls 1.3 --key-update-after 262144|--engine ktls-direct -x 1|$nouring_io && engine ktls-direct \(kTLS on 1 of 1 TLS connections, 1 KeyUpdate rekeyed in place\)||ku-count $nouring"
    )
fi
# ---------------------------------------------------------------------------------------

# Modules for kTLS (DESIGN.md order), then ChaCha20-Poly1305 and CCM for the other
# ciphers, then the output filesystem (loop + ext4) and netem for later WAN tests. Each
# one's `depends=` (from its .modinfo) is loaded first. `?` marks an optional module: newer
# kernels build some in (gf128mul, ctr) or fold them into others (ghash-generic, cryptd,
# crypto_simd, the x86 ChaCha/Poly1305 glue in 6.15+; `chacha` is the 7.x template). A
# cipher that is missing anyway shows up as a failed case, not here.
MODULES=(
    ?gf128mul ?ghash-generic ?ctr ?gcm ?cryptd ?crypto_simd ?aesni-intel ?ghash-clmulni-intel
    ?libchacha ?chacha_generic ?chacha ?chacha-x86_64 ?libpoly1305 ?poly1305_generic
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
    xz:xz-utils zstd:zstd /var/lib/dpkg/info/busybox-static.list:busybox-static
busybox=/bin/busybox
[ -x "$busybox" ] || busybox=/usr/bin/busybox
[ -x "$busybox" ] || die "busybox-static installed but no /bin/busybox"

# --- work directory, console log -----------------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/ringdl-vm.XXXXXX")
qpid=""
cleanup() {
    [ -n "$qpid" ] && kill "$qpid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
as_root mkdir -p "$cache"
as_root mkdir -p -m 1777 "$cache/logs"
if [ -n "${RINGDL_VM_LOG:-}" ]; then
    console_log=$RINGDL_VM_LOG
    keep_log=1
else
    # One file per run: two runs on this machine (two checkouts, two kernels) never write
    # the same log. Logs of failed runs stay a week.
    find "$cache/logs" -name 'console-*.log' -mtime +7 -delete 2>/dev/null || true
    console_log=$(mktemp --suffix=.log "$cache/logs/console-$kernel.XXXXXX")
    keep_log=0
fi

# --- kernel -------------------------------------------------------------------------------
# apt for CURRENT_KERNEL_SUITE: sources, lists, cache and status all under $work (apt-get
# -o Dir::...), signed by the Debian archive keyring; the machine's apt is not touched.
apt_private=()
private_apt() {
    local d=$work/apt
    mkdir -p "$d/etc/sources.list.d" "$d/etc/preferences.d" "$d/state/lists/partial" \
        "$d/cache/archives/partial"
    : >"$d/status"
    printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n' \
        "${RINGDL_VM_MIRROR:-http://deb.debian.org/debian}" "$CURRENT_KERNEL_SUITE" >"$d/etc/sources.list"
    # _apt (apt's download sandbox user) writes into partial/.
    chmod 0755 "$work"
    chmod -R a+rwX "$d"
    apt_private=(
        -o "Dir::Etc::sourcelist=$d/etc/sources.list" -o "Dir::Etc::sourceparts=$d/etc/sources.list.d"
        -o "Dir::Etc::preferences=$d/etc/preferences" -o "Dir::Etc::preferencesparts=$d/etc/preferences.d"
        -o "Dir::State=$d/state" -o "Dir::State::status=$d/status" -o "Dir::Cache=$d/cache"
        -o "APT::Architecture=amd64" -o "APT::Architectures::=amd64"
    )
    ensure_tools /usr/share/keyrings/debian-archive-keyring.gpg:debian-archive-keyring
    log "apt-get update ($CURRENT_KERNEL_SUITE, private configuration in $d)"
    as_root apt-get "${apt_private[@]}" update -q >&2 || die "apt-get update for $CURRENT_KERNEL_SUITE failed"
}

newest_kernel_pkg() {
    apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' 2>/dev/null |
        awk '{ print $1 }' | sort -V | tail -n 1
}
if [ "$kernel" = current ]; then
    pkg=${RINGDL_VM_KERNEL_PKG:-$CURRENT_KERNEL_PKG}
    family='linux-image-*+deb13-amd64'
else
    family='linux-image-6.1.0-*-amd64'
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
            pkg=$(find "$cache" -maxdepth 1 -name "$family" -printf '%f\n' 2>/dev/null |
                sort -V | tail -n 1)
        fi
        [ -n "$pkg" ] || die "apt offers no linux-image-6.1.0-*-amd64 (Debian 12 bookworm main)"
    fi
fi
kdir=$cache/$pkg
find_vmlinuz() { # DIR: boot/vmlinuz-VER (up to 6.x) or usr/lib/modules/VER/vmlinuz (7.x)
    compgen -G "$1/boot/vmlinuz-*" | head -n 1 ||
        compgen -G "$1/usr/lib/modules/*/vmlinuz" | head -n 1 || true
}
if [ -z "$(find_vmlinuz "$kdir")" ]; then
    [ "$kernel" = current ] && private_apt
    log "fetching $pkg (apt-get download, unpacked into $kdir, not installed)"
    dl=$(mktemp -d "$cache/dl.XXXXXX")
    # _apt cannot write into a root-owned mktemp dir: let it.
    chmod 0777 "$dl"
    fetch_deb() { # PACKAGE: download and unpack into $dl/x
        (cd "$dl" && as_root apt-get "${apt_private[@]}" download -q "$1" >&2) || die "apt-get download $1 failed"
        local deb
        deb=$(compgen -G "$dl/${1}_*.deb" | head -n 1) || die "apt-get download $1 produced no .deb"
        as_root dpkg-deb -x "$deb" "$dl/x"
        dpkg-deb -f "$deb" Version | as_root tee "$dl/x/.deb-version" >/dev/null
        as_root rm -f "$deb"
    }
    fetch_deb "$pkg"
    if [ -z "$(find_vmlinuz "$dl/x")" ]; then
        # A meta package (7.x): the kernel and the modules are its dependencies.
        fetch_deb "linux-binary-${pkg#linux-image-}"
        fetch_deb "linux-modules-${pkg#linux-image-}"
    fi
    [ -n "$(find_vmlinuz "$dl/x")" ] || die "$pkg (and its linux-binary/linux-modules) hold no vmlinuz"
    # rename(2) is atomic: a parallel run that finished first keeps its copy.
    as_root mv -T "$dl/x" "$kdir" 2>/dev/null || log "$kdir appeared meanwhile (a parallel run): using it"
    as_root rm -rf "$dl"
    # Older unpacked kernels of the same family are dead weight (≈ 400 MB each).
    for old in "$cache"/$family; do
        [ "$old" = "$kdir" ] || [ ! -d "$old" ] || as_root rm -rf "$old"
    done
fi
vmlinuz=$(find_vmlinuz "$kdir")
case $vmlinuz in
    */boot/vmlinuz-*) kver=${vmlinuz##*/vmlinuz-} ;;
    *) kver=$(basename "$(dirname "$vmlinuz")") ;;
esac
moddir=""
for d in "$kdir/lib/modules/$kver/kernel" "$kdir/usr/lib/modules/$kver/kernel"; do
    [ -d "$d" ] && moddir=$d
done
[ -n "$moddir" ] || die "no module tree for $kver under $kdir"
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
seccomp_bin=${RINGDL_VM_SECCOMP_BIN:-}
if [ -z "$server_bin" ] || [ -z "$seccomp_bin" ]; then
    ensure_musl_target
    log "building the VM test server and seccomp_exec (examples, release, $MUSL_TARGET)"
    CC_x86_64_unknown_linux_musl=musl-gcc \
        cargo build --release --target "$MUSL_TARGET" -p ringdl --example vm_server --example seccomp_exec >&2
    [ -n "$server_bin" ] || server_bin=$(target_dir)/$MUSL_TARGET/release/examples/vm_server
    [ -n "$seccomp_bin" ] || seccomp_bin=$(target_dir)/$MUSL_TARGET/release/examples/seccomp_exec
fi
[ -x "$server_bin" ] || die "vm_server not found at $server_bin"
[ -x "$seccomp_bin" ] || die "seccomp_exec not found at $seccomp_bin"

# --- initramfs ----------------------------------------------------------------------------
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
    strip -o "$root/bin/seccomp_exec" "$seccomp_bin"
else
    cp "$ringdl_bin" "$root/bin/ringdl"
    cp "$server_bin" "$root/bin/vm_server"
    cp "$seccomp_bin" "$root/bin/seccomp_exec"
fi
install -m 0755 "$here/init.sh" "$root/init"
printf '%s\n' "$payload" >"$root/payload_size"
printf '%s\n' "$payload_big" >"$root/payload_big_size"
printf '%s\n' "${cases[@]}" >"$root/cases"

# Module name → file (names compare with - and _ alike, as the kernel does). Newer kernels
# ship .ko.xz (or .ko.zst): they go into the initramfs decompressed (busybox insmod reads
# plain .ko), and `depends=` is read from the decompressed .modinfo, which is what
# `depmod -b` would put in modules.dep.
declare -A modfile=()
while IFS= read -r f; do
    n=${f##*/}
    n=${n%.xz}
    n=${n%.zst}
    n=${n%.ko}
    modfile[${n//-/_}]=$f
done < <(find "$moddir" -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst')
mkdir -p "$work/ko"
plain_ko() { # FILE: path of the uncompressed module
    case $1 in
        *.ko.xz) xz -dc "$1" >"$work/ko/m.ko" && echo "$work/ko/m.ko" ;;
        *.ko.zst) zstd -qdc "$1" >"$work/ko/m.ko" && echo "$work/ko/m.ko" ;;
        *) echo "$1" ;;
    esac
}
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
    local name=${f##*/} ko
    name=${name%.xz}
    name=${name%.zst}
    name=${name%.ko}
    ko=$(plain_ko "$f")
    cp "$ko" "$root/lib/modules/$name.ko"
    deps=$(tr '\0' '\n' <"$root/lib/modules/$name.ko" | sed -n 's/^depends=//p' | head -n 1)
    for dep in ${deps//,/ }; do add_module "$dep" 0; done
    order+=("$name")
}
for m in "${MODULES[@]}"; do
    if [[ $m == \?* ]]; then add_module "${m#\?}" 1; else add_module "$m" 0; fi
done
printf '%s\n' "${order[@]}" >"$root/modules.order"

(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 >"$work/initrd.gz"
log "initramfs $(du -h "$work/initrd.gz" | cut -f1): ${#order[@]} modules, ${#cases[@]} cases"

# --- boot ---------------------------------------------------------------------------------
mkdir -p "$(dirname "$console_log")"
log "booting $kver (TCG, timeout ${timeout_s}s), console → $console_log"
t_boot=$SECONDS
# The console (minus CRs and SeaBIOS's terminal escapes) goes to the log; the RINGDL-VM
# and `vm:` lines also to stderr, live. A guest kernel that panics while it boots, before
# the init printed a line (seen once with 7.3 under TCG: an int3 oops in the timer
# interrupt during cryptomgr_test), is booted once more, and the log says so; a panic
# after the init started is a failure like any other.
for boot in 1 2; do
    set +e
    timeout --kill-after=10 "$timeout_s" qemu-system-x86_64 -accel tcg -cpu max -smp "$smp" -m 512 \
        -nographic -no-reboot -nic none \
        -kernel "$vmlinuz" -initrd "$work/initrd.gz" \
        -append "console=ttyS0 quiet panic=-1" </dev/null |
        sed -u -E $'s/\r//g; s/\e(\\[[0-9;?]*[A-Za-z]|c)//g' | tee "$console_log" |
        grep --line-buffered -E '^RINGDL-VM|vm: ' >&2
    rc=${PIPESTATUS[0]}
    set -e
    if [ "$boot" -eq 1 ] && ! grep -q '^RINGDL-VM' "$console_log" && grep -q 'Kernel panic' "$console_log"; then
        cp "$console_log" "$console_log.boot1"
        log "the guest kernel panicked while booting, before the init ran (console kept in $console_log.boot1): booting once more"
        continue
    fi
    break
done
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
log "VM ${vm_s}s, total $((SECONDS - t_start))s (kernel $kernel: $kver)"
if [ "$fail" -ne 0 ]; then
    log "FAILED; the whole console is in $console_log"
    exit 1
fi
[ "$keep_log" = 1 ] || rm -f "$console_log"
log "all ${#cases[@]} VM cases passed ($pkg)"
