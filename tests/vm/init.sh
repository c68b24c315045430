#!/bin/sh
# /init of the ringdl VM test initramfs (busybox ash; PID 1). tests/vm/run.sh copies it
# in with:
#   /modules.order   kernel module file names (no .ko), dependency order, one a line
#   /cases           NAME|SERVER OPTIONS|RINGDL OPTIONS|EXPECT|SERVER EXPECT|FLAGS
#                    EXPECT: EREs on `ringdl -v` output, SERVER EXPECT: on `vm_server -v`
#                    output; several joined by ` && ` must all match, `!ERE` must not
#                    (FLAGS: see the case list in run.sh)
#   /bin/ringdl, /bin/vm_server, /bin/seccomp_exec, /bin/busybox and its applet links
# (no /etc/ssl, no SSL_CERT_FILE/DIR: the image has no CA files)
# and reads /payload_size and /payload_big_size. Prints one `RINGDL-VM <case> PASS|FAIL <detail>` line per case
# on the console (ttyS0), then `RINGDL-VM-END`, then powers off.

export PATH=/bin
mkdir -p /proc /sys /dev /tmp /srv /mnt
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
# /tmp is a tmpfs, as on most systems (O_DIRECT there needs 6.6+).
mount -t tmpfs tmp /tmp
exec </dev/console >/dev/console 2>&1

say() { echo "vm: $*"; }
result() { echo "RINGDL-VM $1 $2 $3"; }
# Seconds since boot with centiseconds, for timings.
now() { cut -d' ' -f1 /proc/uptime; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
die() {
    echo "RINGDL-VM init FAIL $*"
    echo "RINGDL-VM-END"
    poweroff -f
}

say "kernel $(uname -r), $(nproc) cpu, $(awk '/MemTotal/ { print $2 / 1024 " MiB" }' /proc/meminfo)"

# Modules, in dependency order. "File exists" means built in or already loaded.
modfail=""
while read -r m; do
    [ -n "$m" ] || continue
    if ! out=$(insmod "/lib/modules/$m.ko" 2>&1); then
        case "$out" in
            *"File exists"*) ;;
            *) modfail="$modfail $m"; say "insmod $m: $out" ;;
        esac
    fi
done </modules.order
ip link set lo up || die "ip link set lo up"

# Output filesystem: ext2 (mounted by the ext4 driver) on a loop device over a tmpfs
# file. tmpfs before 6.6 and ramfs refuse O_DIRECT; ext4 takes it.
truncate -s 256M /tmp/disk.img
mke2fs -F -b 4096 -m 0 /tmp/disk.img >/dev/null 2>&1 || die "mke2fs"
losetup /dev/loop0 /tmp/disk.img || die "losetup (loop.ko loaded?)"
mount -t ext4 /dev/loop0 /mnt || die "mount ext4 on /dev/loop0"

# The payload: random, a few MiB (TCG is slow), not a multiple of 4096 (the last
# O_DIRECT block is padded then truncated).
size=$(cat /payload_size)
head -c "$size" /dev/urandom >/srv/payload.bin
want=$(sha256sum /srv/payload.bin | cut -d' ' -f1)
say "payload $size bytes sha256 $want"
# The 16 MiB payload only when a case asks for it (TCG is slow).
want_big=""
if grep -q '|[^|]*big[^|]*$' /cases; then
    size_big=$(cat /payload_big_size)
    head -c "$size_big" /dev/urandom >/srv/payload_big.bin
    want_big=$(sha256sum /srv/payload_big.bin | cut -d' ' -f1)
    say "payload_big $size_big bytes sha256 $want_big"
fi

port=8440
spid=""

start_server() { # OPTIONS...: starts vm_server on a new port, waits for its CA file
    port=$((port + 1))
    rm -f /tmp/ca.pem
    # shellcheck disable=SC2068
    vm_server --listen "127.0.0.1:$port" --root /srv --ca-out /tmp/ca.pem -v $@ </dev/null >/tmp/server.log 2>&1 &
    spid=$!
    i=0
    while [ ! -e /tmp/ca.pem ]; do
        kill -0 "$spid" 2>/dev/null || return 1
        i=$((i + 1))
        [ "$i" -lt 300 ] || return 1
        usleep 100000
    done
}

stop_server() {
    [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
    spid=""
}

# expect_all FILE EXPECT: empty when every ERE of EXPECT (joined by ` && `, `!` negates)
# holds on FILE, else the first that does not.
expect_all() {
    rest=$2
    while [ -n "$rest" ]; do
        one=${rest%% && *}
        if [ "$one" = "$rest" ]; then rest=""; else rest=${rest#* && }; fi
        case "$one" in
            !*) grep -Eq -e "${one#!}" "$1" && { echo "$one"; return; } ;;
            *) grep -Eq -e "$one" "$1" || { echo "$one"; return; } ;;
        esac
    done
}

tail_log() { # FILE PREFIX: the last lines of FILE on the console
    tail -n 8 "$1" | while IFS= read -r l; do say "$2: $l"; done
}

case_tls_module() {
    if [ -d /sys/module/tls ]; then
        result "$1" PASS "/sys/module/tls present${modfail:+; failed:$modfail}"
    else
        result "$1" FAIL "no /sys/module/tls; failed modules:${modfail:- none}"
    fi
}

# Waits (≤ 10 s) until every connection vm_server accepted has logged `closed` (its
# counts are final then).
wait_server_closed() {
    i=0
    while [ "$(grep -c ': accepted$' /tmp/server.log)" -gt "$(grep -c ': closed ' /tmp/server.log)" ]; do
        i=$((i + 1))
        [ "$i" -lt 100 ] || return 1
        usleep 100000
    done
}

case_download() { # NAME SERVER_OPTS RINGDL_OPTS EXPECT SERVER_EXPECT FLAGS
    name=$1 sopts=$2 ropts=$3 expect=$4 sexpect=$5 flags=$6
    file=payload.bin want_sum=$want outdir=/mnt kucount=0
    ca="--ca-certificate /tmp/ca.pem" want_rc=0 wrap="" uring_off=0
    for f in $flags; do
        case $f in
            big) file=payload_big.bin want_sum=$want_big ;;
            out=*) outdir=${f#out=} ;;
            ku-count) kucount=1 ;;
            no-ca) ca="" ;;
            rc=*) want_rc=${f#rc=} ;;
            seccomp) wrap=seccomp_exec ;;
            uring-off) uring_off=1 ;;
        esac
    done
    if [ -z "$ca" ] && { [ -e /etc/ssl ] || [ -n "${SSL_CERT_FILE:-}${SSL_CERT_DIR:-}" ]; }; then
        result "$name" FAIL "no-ca: this image has CA files (/etc/ssl or SSL_CERT_FILE/DIR)"
        return
    fi
    if [ "$uring_off" -eq 1 ]; then
        # Linux 6.6+: 2 = io_uring_setup fails with EPERM for every process.
        if ! echo 2 >/proc/sys/kernel/io_uring_disabled 2>/dev/null ||
            [ "$(cat /proc/sys/kernel/io_uring_disabled)" != 2 ]; then
            result "$name" FAIL "cannot set kernel.io_uring_disabled=2 on $(uname -r)"
            return
        fi
    fi
    # shellcheck disable=SC2086
    if ! start_server $sopts; then
        tail_log /tmp/server.log server
        result "$name" FAIL "server did not start ($sopts)"
        stop_server
        return
    fi
    out=$outdir/$name.bin
    rm -f "$out" "$out.part"
    t0=$(now)
    # shellcheck disable=SC2086
    timeout 120 $wrap ringdl "https://127.0.0.1:$port/$file" -o "$out" \
        $ca -v $ropts </dev/null >/tmp/ringdl.log 2>&1
    rc=$?
    secs=$(elapsed "$t0")
    [ "$uring_off" -eq 0 ] || echo 0 >/proc/sys/kernel/io_uring_disabled
    ok=1
    ku=""
    if [ "$kucount" -eq 1 ]; then
        # Every KeyUpdate the server sent was taken in place (ringdl's summary), and the
        # client answered each (update_requested) with its own; no retry on a new connection.
        wait_server_closed || say "vm_server connections still open after 10 s"
        sent=$(grep -c 'KeyUpdate sent' /tmp/server.log)
        rekeyed=$(grep -Eo '[0-9]+ KeyUpdates? rekeyed in place' /tmp/ringdl.log | tail -n 1 | cut -d' ' -f1)
        answered=$(sed -n 's/.* client-key-updates \([0-9]*\) .*/\1/p' /tmp/server.log | awk '{ s += $1 } END { print s + 0 }')
        ku="; KeyUpdates: server sent $sent, ringdl rekeyed ${rekeyed:-0} in place, client answered $answered"
        if [ "$sent" -eq 0 ] || [ "$sent" != "${rekeyed:-0}" ] || [ "$sent" != "$answered" ]; then
            ok=0
        fi
        if grep -q 'new connection' /tmp/ringdl.log; then
            ok=0
            ku="$ku; ringdl reconnected"
        fi
        # Connections opened (handed to kTLS) == -x. Work stealing (ktls-direct) may open
        # one more per split: the victim stops reading and its slot may reconnect.
        x=$(echo "$ropts" | sed -n 's/.*-x \([0-9]*\).*/\1/p')
        opened=$(grep -Eo 'kTLS on [0-9]+ of' /tmp/ringdl.log | tail -n 1 | cut -d' ' -f3)
        steals=$(grep -c 'takes bytes' /tmp/ringdl.log)
        ku="$ku; connections opened ${opened:-?} (-x $x, $steals steals)"
        if [ -z "$opened" ] || [ "$opened" -lt "$x" ] || [ "$opened" -gt $((x + steals)) ]; then
            ok=0
        fi
    fi
    stop_server
    got=$( [ -f "$out" ] && sha256sum "$out" | cut -d' ' -f1)
    detail="rc=$rc ${secs}s$ku"
    [ "$rc" -eq "$want_rc" ] || { ok=0; detail="$detail (want rc=$want_rc)"; }
    if [ "$want_rc" -ne 0 ]; then
        # A failure that must leave nothing behind.
        if [ -e "$out" ] || [ -e "$out.part" ]; then
            ok=0
            detail="$detail; output left behind"
        fi
    elif [ "$got" = "$want_sum" ]; then
        detail="$detail sha256 ok"
    else
        ok=0
        detail="$detail sha256 ${got:-missing}"
    fi
    miss=$(expect_all /tmp/ringdl.log "$expect")
    if [ -n "$miss" ]; then
        ok=0
        detail="$detail; ringdl -v output fails /$miss/"
    fi
    miss=$(expect_all /tmp/server.log "$sexpect")
    if [ -n "$miss" ]; then
        ok=0
        detail="$detail; server log fails /$miss/"
    fi
    # What this kernel did with the first KeyUpdate (in place, or a new connection).
    kline=$(grep -m 1 'KeyUpdate' /tmp/ringdl.log | cut -c 1-240)
    [ -z "$kline" ] || detail="$detail; first KeyUpdate: ${kline#ringdl: }"
    if [ "$ok" -eq 1 ]; then
        result "$name" PASS "$detail"
    else
        tail_log /tmp/ringdl.log ringdl
        tail_log /tmp/server.log server
        result "$name" FAIL "$detail"
    fi
    rm -f "$out" "$out.part"
}

while IFS='|' read -r name sopts ropts expect sexpect flags; do
    case "$name" in
        "" | "#"*) continue ;;
        tls-module) case_tls_module "$name" ;;
        *) case_download "$name" "$sopts" "$ropts" "$expect" "$sexpect" "$flags" ;;
    esac
done </cases

echo "RINGDL-VM-END"
sync
umount /mnt 2>/dev/null
poweroff -f
