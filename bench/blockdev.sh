#!/bin/bash
# Writing an image to a block device: ringdl -x 4 against `curl | dd oflag=direct` and
# against `curl -o FILE && dd`, interleaved, page cache dropped before each run.
# Usage (root): bench/blockdev.sh URL /dev/loopN [RUNS] [RINGDL]
# Prints per run: wall s, user s, sys s (client side: curl+dd together), and the growth of
# Cached+Buffers in /proc/meminfo (KiB; includes the server's file pages when the server
# is on this host, and the loop device's backing file unless it runs --direct-io=on).
set -eu
URL=$1 DEV=$2 RUNS=${3:-3} RINGDL=${4:-target/release/ringdl}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pc() { awk '/^(Cached|Buffers):/ {s+=$2} END {print s}' /proc/meminfo; }
for r in $(seq "$RUNS"); do
  for t in ringdl curl-dd curl-then-dd; do
    sync; echo 3 > /proc/sys/vm/drop_caches; sleep 1
    b=$(pc)
    case $t in
      ringdl) cmd="$RINGDL -q -x 4 -o $DEV $URL";;
      curl-dd) cmd="curl -s -o - $URL | dd of=$DEV bs=1M oflag=direct status=none";;
      curl-then-dd) cmd="curl -s -o $TMP/img $URL && dd if=$TMP/img of=$DEV bs=1M status=none && sync";;
    esac
    /usr/bin/time -f "%e %U %S" -o "$TMP/t" bash -c "$cmd" || echo "FAILED: $t"
    echo "$t run=$r wall_user_sys=$(cat "$TMP/t") pagecache_delta_kib=$(( $(pc) - b ))"
    rm -f "$TMP/img"
  done
done
