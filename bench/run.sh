#!/usr/bin/env bash
# Benchmark ringdl against aria2c, axel, curl and wget on a loopback nginx.
#
#   ./bench/run.sh                                   # 1 GiB, HTTPS and HTTP, -x 4, 5 runs
#   ./bench/run.sh --size 64M,256M,1G,4G --connections 1,4,16,64 --proto https,http
#   ./bench/run.sh --shaped --size 1G                # nginx limit_rate 12500k per connection
#   RINGDL=/path/to/ringdl ./bench/run.sh ...        # skip the build, use that binary
#
# Installs what is missing (apt: nginx-light aria2 axel curl wget time openssl
# musl-tools), builds the static release binary (as ./scripts/demo.sh does) unless
# RINGDL or --ringdl is given, then runs bench/bench.py (Python 3 standard library) with
# the arguments given here (defaults: --proto https,http --runs 5). Needs root (drop_caches).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib.sh
source "$here/../scripts/lib.sh"
cd "$(repo_root)"

[ "$(id -u)" -eq 0 ] || die "the benchmark drops the page cache before every run: run it as root"
command -v python3 >/dev/null 2>&1 || die "python3 (3.11+) is needed: apt-get install -y python3"

ensure_tools /usr/sbin/nginx:nginx-light aria2c:aria2 axel:axel curl:curl wget:wget \
    /usr/bin/time:time openssl:openssl findmnt:util-linux fincore:util-linux

have_ringdl=0
[ -n "${RINGDL:-}" ] && have_ringdl=1
for a in "$@"; do
    case $a in --ringdl | --ringdl=*) have_ringdl=1 ;; esac
done
extra=()
if [ "$have_ringdl" -eq 0 ]; then
    ensure_tools musl-gcc:musl-tools
    extra=(--ringdl "$(build_static)")
fi

# Defaults only when the caller did not choose.
case " $* " in *" --proto"*) ;; *) extra+=(--proto "https,http") ;; esac
exec python3 "$here/bench.py" "${extra[@]}" "$@"
