#!/usr/bin/env bash
# Demo: build the static binary, serve a 1 GiB random file over HTTPS from a local
# nginx, download it with 4 connections and check its SHA-256.
#
#   ./scripts/demo.sh
#
# Work dir: ${RINGDL_DEMO_DIR:-/tmp/ringdl-demo} (the 1 GiB source, its SHA-256 and
# the TLS files are kept there for the next run; the downloaded copy is removed unless
# RINGDL_DEMO_KEEP=1). Port: first free one from ${RINGDL_DEMO_PORT:-8443}.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$(repo_root)"

ensure_tools /usr/sbin/nginx:nginx-light musl-gcc:musl-tools openssl:openssl \
    sha256sum:coreutils

bin=$(build_static)

work=${RINGDL_DEMO_DIR:-/tmp/ringdl-demo}
mkdir -p "$work/www" "$work/tls" "$work/nginx/tmp" "$work/out"
work=$(cd "$work" && pwd)
src=$work/www/1g.bin

# 1 GiB of random bytes, generated once.
if [ "$(stat -c %s "$src" 2>/dev/null || echo 0)" != 1073741824 ] || [ ! -s "$src.sha256" ]; then
    log "generating $src (1 GiB from /dev/urandom)"
    head -c 1G /dev/urandom >"$src.tmp"
    mv "$src.tmp" "$src"
    (cd "$work/www" && sha256sum 1g.bin >1g.bin.sha256)
fi
expected=$(cut -d' ' -f1 "$src.sha256")

# A CA and a server certificate for localhost / 127.0.0.1 / ::1 (rustls refuses a
# self-signed CA certificate used directly as the server's).
tls=$work/tls
if [ ! -s "$tls/ca.pem" ] || [ ! -s "$tls/server.pem" ] || [ ! -s "$tls/server.key" ]; then
    log "generating a demo CA and server certificate in $tls"
    cat >"$tls/ca.cnf" <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = ringdl demo CA
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
EOF
    cat >"$tls/server.ext" <<'EOF'
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost,IP:127.0.0.1,IP:::1
authorityKeyIdentifier = keyid
EOF
    openssl req -x509 -new -config "$tls/ca.cnf" -extensions v3_ca \
        -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$tls/ca.key" -out "$tls/ca.pem" -days 3650 2>/dev/null
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$tls/server.key" -out "$tls/server.csr" -subj /CN=localhost 2>/dev/null
    openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" \
        -set_serial "0x$(openssl rand -hex 8)" -days 365 -extfile "$tls/server.ext" \
        -out "$tls/server.crt" 2>/dev/null
    cat "$tls/server.crt" "$tls/ca.pem" >"$tls/server.pem"
fi

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port=${RINGDL_DEMO_PORT:-8443}
while port_in_use "$port"; do port=$((port + 1)); done

user=""
[ "$(id -u)" -eq 0 ] && user="user root;"
ngx=$work/nginx
cat >"$ngx/nginx.conf" <<EOF
$user
worker_processes 2;
pid "$ngx/nginx.pid";
error_log "$ngx/error.log" warn;
events { worker_connections 1024; }
http {
    access_log "$ngx/access.log";
    client_body_temp_path "$ngx/tmp/client_body";
    proxy_temp_path "$ngx/tmp/proxy";
    fastcgi_temp_path "$ngx/tmp/fastcgi";
    uwsgi_temp_path "$ngx/tmp/uwsgi";
    scgi_temp_path "$ngx/tmp/scgi";
    default_type application/octet-stream;
    sendfile on;
    server {
        listen 127.0.0.1:$port ssl;
        ssl_certificate "$tls/server.pem";
        ssl_certificate_key "$tls/server.key";
        root "$work/www";
    }
}
EOF

rm -f "$ngx/nginx.pid"
/usr/sbin/nginx -p "$ngx/" -c "$ngx/nginx.conf" -e "$ngx/error.log" -g 'daemon off;' </dev/null &
nginx_pid=$!
out=$work/out/1g.bin
cleanup() {
    if kill "$nginx_pid" 2>/dev/null; then wait "$nginx_pid" 2>/dev/null || true; fi
    [ "${RINGDL_DEMO_KEEP:-0}" = 1 ] || rm -f "$out" "$out.part"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for _ in $(seq 100); do
    [ -s "$ngx/nginx.pid" ] && port_in_use "$port" && break
    kill -0 "$nginx_pid" 2>/dev/null || die "nginx did not start: $(cat "$ngx/error.log")"
    sleep 0.1
done
port_in_use "$port" || die "nginx not listening on $port: $(cat "$ngx/error.log")"

url=https://127.0.0.1:$port/1g.bin
log "ringdl -x 4 --ca-certificate $tls/ca.pem $url -o $out"
rm -f "$out" "$out.part"
"$bin" -x 4 --ca-certificate "$tls/ca.pem" "$url" -o "$out" --force

[ -f "$out" ] || die "ringdl exited 0 but wrote no $out"
actual=$(sha256sum "$out" | cut -d' ' -f1)
if [ "$actual" != "$expected" ]; then
    die "SHA-256 mismatch: got $actual, expected $expected"
fi
log "SHA-256 OK: $actual"
