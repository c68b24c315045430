#!/usr/bin/env python3
"""Side-by-side download benchmark: ringdl against aria2c, axel, curl and wget.

Starts its own nginx on loopback (HTTP and HTTPS with a throw-away CA, TLS 1.2 and 1.3),
serves a random file from the work directory and downloads it with every tool,
interleaved, N runs each. Before every run: `sync`, `echo 3 > /proc/sys/vm/drop_caches`,
a full read of the source (so the server side is hot and equal for everyone) and a
`--version` run of the tool under test (so its executable and libraries are in the page
cache and do not count as cache growth).

Per run, measured on the exec'd tool: wall (monotonic clock around the spawn), user and
system CPU (os.wait4 of the /usr/bin/time wrapper, microseconds; includes about 1 ms of
GNU time itself), peak RSS and minor faults (GNU time's report of its child, the tool
alone: os.wait4 of a child spawned straight from Python would report Python's own RSS,
because Linux carries the pre-exec high-water mark into ru_maxrss), page-cache growth
(`Cached` in /proc/meminfo right after exit minus right before spawn), the time a `sync`
takes afterwards (write-back the tool left behind), and SHA-256 of the output (a
mismatch fails the run loudly and the exit status).

Python 3.11 standard library only. Needs root (drop_caches). Example:

    python3 bench/bench.py --size 1G --connections 4 --runs 5 --proto https,http

See `--help` and bench/README.md.
"""

from __future__ import annotations

import argparse
import html
import datetime as dt
import hashlib
import json
import os
import platform
import re
import shutil
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PEERS = ("aria2c", "axel", "curl", "wget")
ALL_TOOLS = ("ringdl",) + PEERS
FLOORS = ("floor-curl-null", "floor-dd-direct")
GNU_TIME = "/usr/bin/time"
# Commands the benchmark needs -> Debian package.
NEEDS = {
    "nginx": "nginx-light",
    "openssl": "openssl",
    GNU_TIME: "time",
    "aria2c": "aria2",
    "axel": "axel",
    "curl": "curl",
    "wget": "wget",
    "dd": "coreutils",
    "sync": "coreutils",
    "fincore": "util-linux",
    "findmnt": "util-linux",
}
ARIA2_MAX_CONN = 16  # aria2c refuses -x/-s above 16


def log(msg: str) -> None:
    print(f"==> {msg}", file=sys.stderr, flush=True)


def die(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)\s*([KMGT]?)(i?B?)?", text.strip(), re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 64M, 1G, 4G)")
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    return int(m.group(1)) * mult[m.group(2).upper()]


def fmt_size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def size_tag(n: int) -> str:
    return fmt_size(n).replace(" ", "").replace("iB", "").lower()


def csv_list(conv):
    def parse(text: str):
        return [conv(x) for x in text.split(",") if x.strip()]

    return parse


def find_cmd(name: str) -> str | None:
    if name.startswith("/"):
        return name if os.access(name, os.X_OK) else None
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.access(p, os.X_OK)), None
    )


# ---------------------------------------------------------------- machine facts


def machine_info(out_dir: Path) -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = meminfo()
    fs = subprocess.run(
        ["findmnt", "-n", "-o", "SOURCE,FSTYPE,OPTIONS", "--target", str(out_dir)],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "cpu_model": cpu,
        "mem_total_gib": round(mem.get("MemTotal", 0) / (1 << 20), 1),
        "output_fs": fs,
        "hostname": socket.gethostname(),
    }


def tool_version(argv: list[str]) -> str:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"? ({e})"
    text = (r.stdout + r.stderr).strip().splitlines()
    line = text[0].strip() if text else "?"
    return line if len(line) <= 60 else line[:57] + "..."


def git_rev() -> str:
    r = subprocess.run(
        ["git", "-C", str(REPO), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
    )
    return r.stdout.strip() or "?"


def meminfo() -> dict[str, int]:
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        k, v = line.split(":", 1)
        out[k] = int(v.split()[0])  # KiB
    return out


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


# ---------------------------------------------------------------- fixtures


def ensure_source(www: Path, size: int) -> tuple[Path, str]:
    """A random file of `size` bytes, generated once and kept with its SHA-256."""
    src = www / f"src-{size_tag(size)}.bin"
    sidecar = src.with_name(src.name + ".sha256")
    if src.exists() and src.stat().st_size == size and sidecar.exists():
        return src, sidecar.read_text().split()[0]
    log(f"generating {src} ({fmt_size(size)} from /dev/urandom)")
    tmp = src.with_name(src.name + ".tmp")
    h = hashlib.sha256()
    left = size
    with open("/dev/urandom", "rb", buffering=0) as rnd, open(tmp, "wb") as f:
        while left:
            chunk = rnd.read(min(left, 1 << 20))
            h.update(chunk)
            f.write(chunk)
            left -= len(chunk)
    tmp.rename(src)
    digest = h.hexdigest()
    sidecar.write_text(f"{digest}  {src.name}\n")
    return src, digest


def ensure_tls(tls: Path) -> None:
    """A CA and a server certificate for localhost / 127.0.0.1 / ::1 (rustls refuses a
    self-signed CA certificate used directly as the server's)."""
    names = ("ca.pem", "server.pem", "server.key")
    if all((tls / n).exists() and (tls / n).stat().st_size > 0 for n in names):
        return
    log(f"generating a CA and a server certificate in {tls}")
    tls.mkdir(parents=True, exist_ok=True)
    (tls / "ca.cnf").write_text(
        "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = ringdl bench CA\n"
        "[v3_ca]\nbasicConstraints = critical,CA:TRUE\n"
        "keyUsage = critical,keyCertSign,cRLSign\nsubjectKeyIdentifier = hash\n"
    )
    (tls / "server.ext").write_text(
        "basicConstraints = critical,CA:FALSE\nkeyUsage = critical,digitalSignature\n"
        "extendedKeyUsage = serverAuth\nsubjectAltName = DNS:localhost,IP:127.0.0.1,IP:::1\n"
        "authorityKeyIdentifier = keyid\n"
    )

    def ossl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ossl("req", "-x509", "-new", "-config", f"{tls}/ca.cnf", "-extensions", "v3_ca",
         "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", f"{tls}/ca.key", "-out", f"{tls}/ca.pem", "-days", "3650")
    ossl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", f"{tls}/server.key", "-out", f"{tls}/server.csr", "-subj", "/CN=localhost")
    ossl("x509", "-req", "-in", f"{tls}/server.csr", "-CA", f"{tls}/ca.pem",
         "-CAkey", f"{tls}/ca.key", "-set_serial", "0x" + os.urandom(8).hex(),
         "-days", "365", "-extfile", f"{tls}/server.ext", "-out", f"{tls}/server.crt")
    (tls / "server.pem").write_bytes((tls / "server.crt").read_bytes() + (tls / "ca.pem").read_bytes())


def free_port(start: int) -> int:
    port = start
    while port < 65535:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                port += 1
    die("no free port")
    return 0


class Nginx:
    """One nginx with four servers: HTTP and HTTPS, plain and shaped (limit_rate)."""

    # The first four fields feed log_since's totals; connection, end time, duration and
    # Range give the per-request timeline (--timeline) of each run.
    LOG_FORMAT = ('$ssl_protocol $ssl_cipher $status $body_bytes_sent $connection $msec '
                  '$request_time "$http_range" "$http_user_agent"')

    def __init__(self, work: Path, www: Path, tls: Path, base_port: int, rate: str):
        self.dir = work / "nginx"
        (self.dir / "tmp").mkdir(parents=True, exist_ok=True)
        self.access_log = self.dir / "access.log"
        self.ports = {}
        p = base_port
        for key in ("http", "https", "http-shaped", "https-shaped"):
            p = free_port(p)
            self.ports[key] = p
            p += 1
        user = "user root;" if os.geteuid() == 0 else ""
        servers = []
        for key, port in self.ports.items():
            ssl = key.startswith("https")
            servers.append(
                f"""    server {{
        listen 127.0.0.1:{port}{' ssl' if ssl else ''};
        {f'ssl_certificate "{tls}/server.pem"; ssl_certificate_key "{tls}/server.key";' if ssl else ''}
        {f'limit_rate {rate};' if key.endswith('shaped') else ''}
        root "{www}";
    }}"""
            )
        servers_text = "\n".join(servers)
        conf = f"""{user}
worker_processes 2;
pid "{self.dir}/nginx.pid";
error_log "{self.dir}/error.log" warn;
events {{ worker_connections 1024; }}
http {{
    log_format bench '{self.LOG_FORMAT}';
    access_log "{self.access_log}" bench;
    client_body_temp_path "{self.dir}/tmp/client_body";
    proxy_temp_path "{self.dir}/tmp/proxy";
    fastcgi_temp_path "{self.dir}/tmp/fastcgi";
    uwsgi_temp_path "{self.dir}/tmp/uwsgi";
    scgi_temp_path "{self.dir}/tmp/scgi";
    default_type application/octet-stream;
    sendfile on;
    keepalive_requests 10000;
    ssl_protocols TLSv1.2 TLSv1.3;
{servers_text}
}}
"""
        self.conf = self.dir / "nginx.conf"
        self.conf.write_text(conf)
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        (self.dir / "nginx.pid").unlink(missing_ok=True)
        self.access_log.write_text("")
        nginx = find_cmd("nginx")
        self.proc = subprocess.Popen(
            [nginx, "-p", f"{self.dir}/", "-c", str(self.conf), "-e", f"{self.dir}/error.log",
             "-g", "daemon off;"],
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                die(f"nginx exited: {(self.dir / 'error.log').read_text()[-2000:]}")
            try:
                for port in self.ports.values():
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        die("nginx did not start listening")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful: finish, then exit
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_offset(self) -> int:
        return self.access_log.stat().st_size

    def log_since(self, offset: int) -> dict:
        """Requests, bytes sent, the TLS parameters and each request's timing (nginx
        connection serial, start and end as Unix seconds, bytes, Range) logged since
        `offset`."""
        with open(self.access_log, "rb") as f:
            f.seek(offset)
            lines = f.read().decode(errors="replace").splitlines()
        tls, statuses, sent, detail = set(), {}, 0, []
        for line in lines:
            parts = line.split(" ", 7)
            if len(parts) < 8:
                continue
            proto, cipher, status, nbytes, conn, msec, rtime, rest = parts
            if proto != "-":
                tls.add(f"{proto} {cipher}")
            statuses[status] = statuses.get(status, 0) + 1
            n = int(nbytes) if nbytes.isdigit() else 0
            sent += n
            try:
                end, dur = float(msec), float(rtime)
            except ValueError:
                continue
            rng = rest.split('"')[1] if rest.count('"') >= 2 else ""
            detail.append({"conn": int(conn), "start": round(end - dur, 3), "end": end,
                           "bytes": n, "status": status, "range": rng})
        return {"requests": len(lines), "statuses": statuses, "bytes_sent": sent,
                "tls": sorted(tls), "detail": detail}


def timeline_stats(detail: list[dict], spawned: float) -> dict:
    """From the per-request log of one run (`spawned`: Unix time of the spawn): when the
    first request started and the last one ended, the tail — from the moment the
    first connection finished its last request to the end, while others still ran — and
    the gaps: the time connections sat between two of their requests (a request's end as
    nginx logged it to the next one's start on the same connection), summed; and one
    connection's rate (bytes/s over its requests of 1 MiB or more)."""
    if not detail:
        return {}
    last_end, moved = {}, {}
    for d in detail:
        last_end[d["conn"]] = max(last_end.get(d["conn"], 0.0), d["end"])
        moved[d["conn"]] = moved.get(d["conn"], 0) + d["bytes"]
    first = min(d["start"] for d in detail)
    end = max(last_end.values())
    # The tail counts connections that carried a body (1 MiB or more): axel's first
    # connection only reads the head and closes.
    carried = [e for k, e in last_end.items() if moved[k] >= 1 << 20] or list(last_end.values())
    gaps, prev = 0.0, {}
    for d in sorted(detail, key=lambda d: (d["conn"], d["start"])):
        if d["conn"] in prev:
            gaps += max(d["start"] - prev[d["conn"]], 0.0)
        prev[d["conn"]] = d["end"]
    # What one connection got: bytes over the time its requests ran, over requests of
    # 1 MiB or more (a probe, a head-only request or a 1-byte range says nothing).
    big = [d for d in detail if d["bytes"] >= 1 << 20]
    ran = sum(d["end"] - d["start"] for d in big)
    rate = sum(d["bytes"] for d in big) / ran if ran > 0 else None
    return {"first_request_s": round(first - spawned, 3), "last_byte_s": round(end - spawned, 3),
            "tail_s": round(end - min(carried), 3), "gaps_s": round(gaps, 3),
            "connections": len(last_end), "requests": len(detail),
            "conn_rate_bps": None if rate is None else round(rate)}


def timeline_svg(detail: list[dict], spawned: float, wall: float, title: str) -> str:
    """A Gantt chart of one run: a lane per server-side connection, a bar per request
    (start to end as nginx logged them), labelled with its MiB; time 0 = the spawn, the
    dashed line = the tool's exit."""
    conns = sorted({d["conn"] for d in detail})
    lane, left, top, width = 22, 70, 34, 760
    scale = width / max(wall, 0.001)
    h = top + lane * len(conns) + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 20}" height="{h}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="16" font-size="13">{html.escape(title)}</text>']
    for i, c in enumerate(conns):
        y = top + i * lane
        out.append(f'<text x="4" y="{y + 14}">conn {i + 1}</text>')
        for d in (d for d in detail if d["conn"] == c):
            x0 = left + max(d["start"] - spawned, 0) * scale
            x1 = left + max(d["end"] - spawned, 0) * scale
            fill = "#4a7ebb" if d["status"].startswith("2") else "#c0504d"
            out.append(f'<rect x="{x0:.1f}" y="{y + 2}" width="{max(x1 - x0, 1):.1f}" '
                       f'height="{lane - 6}" fill="{fill}" stroke="white"/>')
            if x1 - x0 > 34:
                out.append(f'<text x="{x0 + 3:.1f}" y="{y + 14}" fill="white">'
                           f'{d["bytes"] / 2**20:.1f}M</text>')
    yb = top + lane * len(conns) + 8
    step = 0.5 if wall <= 8 else (1 if wall <= 20 else 5)
    t = 0.0
    while t <= wall + 1e-9:
        x = left + t * scale
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{yb}" stroke="#ddd"/>')
        out.append(f'<text x="{x - 6:.1f}" y="{yb + 14}">{t:g}s</text>')
        t += step
    xe = left + wall * scale
    out.append(f'<line x1="{xe:.1f}" y1="{top - 4}" x2="{xe:.1f}" y2="{yb}" stroke="black" '
               f'stroke-dasharray="4 3"/>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- tools


@dataclass
class Variant:
    name: str  # label in the table
    kind: str  # ringdl | peer | floor
    tool: str  # aria2c, curl, ...
    argv_fn: object  # (url, out_path) -> argv
    version_argv: list[str]
    out_is_file: bool = True
    note: str = ""
    env: dict | None = None  # extra environment (--ringdl-variant)


def parse_ringdl_variant(spec: str) -> tuple[str, dict, list[str]]:
    """`LABEL:TOKENS` -> (label, env, extra args): tokens like `RINGDL_BLOCK_KIB=1024`
    (upper-case name, `=`) go to the environment, the rest (`--sqpoll`) to the argv."""
    label, _, rest = spec.partition(":")
    env, extra = {}, []
    for tok in shlex.split(rest):
        if re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", tok):
            k, _, v = tok.partition("=")
            env[k] = v
        else:
            extra.append(tok)
    return label or rest, env, extra


def system_busy_s() -> float:
    """Busy CPU seconds of the whole machine so far (/proc/stat `cpu`: all but idle and
    iowait, USER_HZ = 100): counts kernel threads such as io_uring's SQPOLL poller too."""
    f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(f[:8]) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK")


def build_variants(args, ca: Path, conns: int, proto: str) -> list[Variant]:
    https = proto == "https"
    v: list[Variant] = []
    for tool in args.tools:
        if tool == "ringdl":
            kinds = [("", {}, [])] + [parse_ringdl_variant(x) for x in args.ringdl_variant]
            for eng in args.engine:
                for io in args.io:
                    for threads in args.threads:
                        for label, env, extra in kinds:
                            # RINGDL=PATH in a variant runs another binary (a before/after
                            # in one run).
                            env = dict(env)
                            binary = env.pop("RINGDL", args.ringdl)

                            def argv(url, out, eng=eng, io=io, extra=extra, threads=threads, binary=binary):
                                a = [binary, "-x", str(conns), "--engine", eng, "--io", io,
                                     "--force", *extra, "-o", str(out)]
                                if threads != 1:
                                    a[1:1] = ["--threads", str(threads)]
                                if https:
                                    a += ["--ca-certificate", str(ca)]
                                return a + [url]

                            io_name = "" if args.io == ["auto"] else f" --io {io}"
                            t_name = "" if args.threads == [1] else f" --threads {threads}"
                            tag = f" [{label}]" if label else ""
                            v.append(Variant(f"ringdl -x {conns}{t_name} --engine {eng}{io_name}{tag}",
                                             "ringdl", "ringdl", argv, [binary, "--version"],
                                             env=env or None))
        elif tool == "aria2c":
            n = min(conns, ARIA2_MAX_CONN)

            def argv(url, out, n=n):
                # --min-split-size=1M: the default (20M) would give a 64 MiB file at most
                # 3 pieces whatever -s says.
                a = ["aria2c", "-q", "-x", str(n), "-s", str(n), "--min-split-size=1M",
                     "--allow-overwrite=true", "--auto-file-renaming=false",
                     "--console-log-level=warn", "--summary-interval=0",
                     "-d", str(out.parent), "-o", out.name]
                if https:
                    a += [f"--ca-certificate={ca}"]
                return a + [url]

            note = f"capped at -x {ARIA2_MAX_CONN}" if conns > ARIA2_MAX_CONN else ""
            v.append(Variant(f"aria2c -x {n} -s {n}", "peer", "aria2c", argv,
                             ["aria2c", "--version"], note=note))
        elif tool == "axel":
            def argv(url, out):
                # axel has no CA option: -k (no verification) for HTTPS.
                return ["axel", "-q", "-n", str(conns)] + (["-k"] if https else []) + [
                    "-o", str(out), url]

            v.append(Variant(f"axel -n {conns}" + (" -k" if https else ""), "peer", "axel", argv,
                             ["axel", "--version"],
                             note="-k: certificate not verified" if https else ""))
        elif tool == "curl":
            def argv(url, out):
                return ["curl", "-sS", "--fail"] + (["--cacert", str(ca)] if https else []) + [
                    "-o", str(out), url]

            v.append(Variant("curl", "peer", "curl", argv, ["curl", "--version"]))
        elif tool == "wget":
            def argv(url, out):
                return ["wget", "-q"] + ([f"--ca-certificate={ca}"] if https else []) + [
                    "-O", str(out), url]

            v.append(Variant("wget", "peer", "wget", argv, ["wget", "--version"]))
    if args.floor:
        def argv(url, out):
            return ["curl", "-sS", "--fail"] + (["--cacert", str(ca)] if https else []) + [
                "-o", "/dev/null", url]

        v.append(Variant("floor: curl -o /dev/null", "floor", "curl", argv, ["curl", "--version"],
                         out_is_file=False, note="receive" + (" + decrypt" if https else "") + " only"))

        def argv(url, out):
            return ["dd", f"if={args._src}", f"of={out}", "oflag=direct", "bs=1M", "status=none"]

        v.append(Variant("floor: dd oflag=direct bs=1M", "floor", "dd", argv, ["dd", "--version"],
                         note="hot source -> disk, no network"))
    return v


# ---------------------------------------------------------------- one run


def drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def pre_read(path: Path) -> None:
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(1 << 20)
        while f.readinto(buf):
            pass


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def resident_mib(path: Path) -> float | None:
    """Page-cache pages of one file (util-linux fincore): immune to other processes'
    caching, unlike the global `Cached` delta."""
    if not path.exists():
        return None
    r = subprocess.run(["fincore", "-b", "-n", "-r", "-o", "RES", str(path)],
                       capture_output=True, text=True)
    try:
        return round(int(r.stdout.split()[0]) / (1 << 20), 1)
    except (IndexError, ValueError):
        return None


def cleanup_outputs(out: Path) -> None:
    for p in (out, out.with_name(out.name + ".part"), out.with_name(out.name + ".aria2"),
              out.with_name(out.name + ".st")):
        p.unlink(missing_ok=True)


def run_once(args, var: Variant, url: str, out: Path, src: Path, digest: str, size: int,
             nginx: Nginx, log_path: Path) -> dict:
    cleanup_outputs(out)
    if not args.no_drop:
        drop_caches()
    pre_read(src)  # server side hot and equal for everyone
    subprocess.run(var.version_argv, capture_output=True)  # tool binary + libraries cached
    subprocess.run([GNU_TIME, "--version"], capture_output=True)
    argv = var.argv_fn(url, out)
    time_file = log_path.with_suffix(".time")
    full = [GNU_TIME, "-o", str(time_file), "-f", "%e %U %S %M %R %F %x"] + argv
    exe = full[0]
    off = nginx.log_offset()
    load = loadavg()
    cached0 = meminfo()["Cached"]
    with open(log_path, "w") as lf:
        lf.write("$ " + " ".join(argv) + "\n")
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(log_path), os.O_WRONLY | os.O_APPEND, 0),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    def on_alarm(signum, frame):
        raise TimeoutError

    old = signal.signal(signal.SIGALRM, on_alarm)
    timed_out = False
    t0 = time.monotonic()
    # setsid: the tool gets its own process group, so a timeout or ^C can end all of it.
    env = {**os.environ, **var.env} if var.env else os.environ
    busy0 = system_busy_s()
    spawned = time.time()
    pid = os.posix_spawn(exe, full, env, file_actions=actions, setsid=True)
    try:
        signal.alarm(args.timeout_for(size))
        _, status, ru = os.wait4(pid, 0)
        signal.alarm(0)
    except BaseException as e:  # TimeoutError or KeyboardInterrupt
        signal.alarm(0)
        os.killpg(pid, signal.SIGKILL)
        _, status, ru = os.wait4(pid, 0)
        if not isinstance(e, TimeoutError):
            cleanup_outputs(out)
            raise
        timed_out = True
    finally:
        signal.signal(signal.SIGALRM, old)
    wall = time.monotonic() - t0
    busy = system_busy_s() - busy0
    cached1 = meminfo()["Cached"]
    out_res = resident_mib(out) if var.out_is_file else 0.0
    t1 = time.monotonic()
    subprocess.run(["sync"], check=True)
    sync_s = time.monotonic() - t1
    rc = os.waitstatus_to_exitcode(status)
    r = {
        "tool": var.name,
        "argv": argv,
        "exit": rc,
        "wall_s": round(wall, 4),
        "user_s": round(ru.ru_utime, 4),
        "sys_s": round(ru.ru_stime, 4),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 4),
        "system_busy_s": round(busy, 2),
        "cache_growth_mib": round((cached1 - cached0) / 1024, 1),
        "output_cached_mib": out_res,
        "sync_after_s": round(sync_s, 3),
        "loadavg_before": load,
        "log": str(log_path),
    }
    try:
        last = time_file.read_text().strip().splitlines()[-1].split()
        r.update({"time_wall_s": float(last[0]), "time_user_s": float(last[1]),
                  "time_sys_s": float(last[2]), "max_rss_kib": int(last[3]),
                  "minor_faults": int(last[4]), "major_faults": int(last[5])})
    except (OSError, IndexError, ValueError) as e:
        r["error"] = f"cannot read GNU time output: {e}"
    r["server"] = nginx.log_since(off)
    r["spawned_unix"] = spawned
    r["timeline"] = timeline_stats(r["server"]["detail"], spawned)
    m = re.search(r"ringdl: done: .*", log_path.read_text(errors="replace"))
    if m:
        r["ringdl_summary"] = m.group(0)
    problems = []
    if timed_out:
        problems.append(f"TIMEOUT after {args.timeout_for(size)} s (killed)")
    elif rc != 0:
        problems.append(f"exit status {rc}")
    if var.out_is_file:
        if not out.exists():
            problems.append("no output file")
        else:
            got_size = out.stat().st_size
            if got_size != size:
                problems.append(f"size {got_size} != {size}")
            elif args.verify:
                got = sha256_file(out)
                r["sha256"] = got
                if got != digest:
                    problems.append(f"SHA-256 MISMATCH {got} != {digest}")
    if problems:
        r["error"] = "; ".join(problems)
    cleanup_outputs(out)
    return r


# ---------------------------------------------------------------- report


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(runs: list[dict], variants: list[Variant]) -> list[dict]:
    rows = []
    for var in variants:
        mine = [r for r in runs if r["tool"] == var.name]
        ok = [r for r in mine if "error" not in r]
        row = {"tool": var.name, "kind": var.kind, "note": var.note, "runs": len(mine),
               "ok": len(ok)}
        for k in ("wall_s", "user_s", "sys_s", "cpu_s", "system_busy_s", "max_rss_kib", "minor_faults",
                  "cache_growth_mib", "output_cached_mib", "sync_after_s"):
            row[k] = median([r.get(k) for r in ok])
        row["wall_all_s"] = [r["wall_s"] for r in ok]
        row["cpu_all_s"] = [r["cpu_s"] for r in ok]
        rows.append(row)
    peers = [r for r in rows if r["kind"] == "peer" and r["cpu_s"] is not None]
    best_cpu = min(peers, key=lambda r: r["cpu_s"]) if peers else None
    best_wall = min(peers, key=lambda r: r["wall_s"]) if peers else None
    for r in rows:
        if best_cpu and r["cpu_s"] is not None and best_cpu["cpu_s"] > 0:
            r["cpu_ratio_best_peer"] = round(r["cpu_s"] / best_cpu["cpu_s"], 3)
            r["best_peer_cpu"] = best_cpu["tool"]
        if best_wall and r["wall_s"] is not None and best_wall["wall_s"] > 0:
            r["wall_ratio_best_peer"] = round(r["wall_s"] / best_wall["wall_s"], 3)
            r["best_peer_wall"] = best_wall["tool"]
    return rows


def f2(x, nd=2):
    return "—" if x is None else f"{x:.{nd}f}"


def markdown_table(rows: list[dict]) -> str:
    out = ["| tool | wall s | user s | sys s | CPU s | machine busy s | max RSS MiB | minor faults | "
           "cache growth MiB | output cached MiB | CPU / best peer | sync after s |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        name = r["tool"] if r["kind"] != "ringdl" else f"**{r['tool']}**"
        if r["note"]:
            name += f" ({r['note']})"
        if r["ok"] < r["runs"]:
            name += f" — **FAILED {r['runs'] - r['ok']}/{r['runs']}**"
        rss = None if r["max_rss_kib"] is None else r["max_rss_kib"] / 1024
        ratio = r.get("cpu_ratio_best_peer")
        out.append(
            f"| {name} | {f2(r['wall_s'])} | {f2(r['user_s'])} | {f2(r['sys_s'])} | "
            f"{f2(r['cpu_s'])} | {f2(r.get('system_busy_s'))} | {f2(rss, 1)} | "
            f"{'—' if r['minor_faults'] is None else int(r['minor_faults'])} | "
            f"{f2(r['cache_growth_mib'], 0)} | {f2(r['output_cached_mib'], 0)} | "
            f"{f2(ratio)} | {f2(r['sync_after_s'])} |"
        )
    return "\n".join(out)


def median_runs(c: dict) -> dict:
    """Each tool's run with the median wall time among its successful runs."""
    by_tool: dict = {}
    for r in c["runs_detail"]:
        if "error" not in r:
            by_tool.setdefault(r["tool"], []).append(r)
    return {t: sorted(rs, key=lambda r: r["wall_s"])[(len(rs) - 1) // 2] for t, rs in by_tool.items()}


def timeline_table(c: dict) -> str:
    """Where each tool's wall time went, medians over its successful runs, from nginx's
    per-request log: when the first request reached the server, when the last byte left
    it, the tail (first connection done → last byte), the gaps between a connection's
    requests (summed over connections), requests and connections; on a shaped link the
    ideal at `limit_rate`, what one connection got of it, and the ideal at that rate."""
    out = ["| tool | first request s | last byte s | tail s | gaps s | requests | connections | ideal s "
           "| rate / limit | ideal at that rate s |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    ideal, limit = "—", None
    if c["shaped"] and c["rate"]:
        limit = parse_size(c["rate"])
        ideal = f2(c["size"] / (limit * c["connections"]))
    by_tool: dict = {}
    for r in c["runs_detail"]:
        if "error" not in r and r.get("timeline"):
            by_tool.setdefault(r["tool"], []).append(r["timeline"])
    for tool, ts in by_tool.items():
        med = {k: median([t.get(k) for t in ts]) for k in
               ("first_request_s", "last_byte_s", "tail_s", "gaps_s", "requests", "connections",
                "conn_rate_bps")}
        # The server's own pace: what a connection of this tool got (median over runs),
        # and the time the file takes at that rate on every connection asked for.
        rate = med["conn_rate_bps"]
        ratio = f2(rate / limit) if rate and limit else "—"
        at_rate = f2(c["size"] / (rate * c["connections"])) if rate and limit else "—"
        out.append(f"| {tool} | {f2(med['first_request_s'], 3)} | {f2(med['last_byte_s'])} | "
                   f"{f2(med['tail_s'])} | {f2(med['gaps_s'], 3)} | {f2(med['requests'], 0)} | "
                   f"{f2(med['connections'], 0)} | {ideal} | {ratio} | {at_rate} |")
    return "\n".join(out)


def config_title(c: dict) -> str:
    if "server_tls" not in c:
        tls = "TLS: see table" if c["proto"] == "https" else "plain"
    else:
        tls = ", ".join(c["server_tls"]) or "plain"
    shaped = f", shaped limit_rate {c['rate']} per connection" if c["shaped"] else ""
    return (f"{c['proto'].upper()}, {fmt_size(c['size'])}, {c['connections']} connections"
            f"{shaped}, {c['runs']} runs ({tls})")


def method_text(args) -> str:
    drop = ("`sync; echo 3 > /proc/sys/vm/drop_caches`" if not args.no_drop
            else "NO cache drop (--no-drop)")
    return (
        f"Loopback nginx (HTTP and HTTPS, TLS 1.2+1.3, sendfile on, 2 workers) serving a "
        f"random file from {args.work}; outputs to {args.out_dir}, deleted after each run. "
        f"Tools interleaved (order rotated each round), {args.runs} runs each. Before every "
        f"run: {drop}, full read of the source (server side hot), `TOOL --version` "
        f"(executable cached). Wall: monotonic clock around the spawn; user/sys: wait4 of "
        f"`/usr/bin/time TOOL` (includes ≈1 ms of GNU time); max RSS and minor faults: GNU "
        f"time's report of the tool; cache growth: `Cached` in /proc/meminfo after minus "
        f"before (the source is already cached, so nginx's reads are excluded; other "
        f"processes' caching is included); output cached: the output file's resident pages "
        f"(fincore) right after exit; sync after: "
        f"a `sync` right after exit (write-back the tool left to the kernel, not in its "
        f"CPU). Every output is SHA-256-checked. Medians; CPU / best peer = median CPU over "
        f"the lowest median CPU of aria2c, axel, curl, wget (floors and ringdl excluded)."
    )


# ---------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
    )
    ap.add_argument("--size", type=csv_list(parse_size), default=[1 << 30],
                    help="file size(s), comma-separated, e.g. 64M,256M,1G,4G (default 1G)")
    ap.add_argument("--connections", "-x", type=csv_list(int), default=[4],
                    help="connection count(s) for ringdl/aria2c/axel, e.g. 1,4,16,64 (default 4)")
    ap.add_argument("--proto", type=csv_list(str), default=["https"],
                    help="http, https or both: https,http (default https)")
    ap.add_argument("--engine", type=csv_list(str), default=["direct"],
                    help="ringdl engine(s), e.g. direct,buffered, passed to --engine (default direct)")
    ap.add_argument("--io", type=csv_list(str), default=["auto"],
                    help="ringdl I/O backend(s), e.g. uring,epoll, passed to --io (default auto)")
    ap.add_argument("--threads", type=csv_list(int), default=[1],
                    help="ringdl reactor threads, e.g. 1,2,4,8, passed to --threads (default 1): "
                         "the sweep for machines with more cores")
    ap.add_argument("--ringdl-variant", action="append", default=[], metavar="LABEL:TOKENS",
                    help="an extra ringdl row: LABEL:'RINGDL_BLOCK_KIB=1024 --sqpoll' "
                         "(NAME=VALUE tokens go to its environment, the rest to its argv; "
                         "RINGDL=PATH runs another binary, for a before/after in one run; repeatable)")
    ap.add_argument("--tools", type=csv_list(str), default=list(ALL_TOOLS),
                    help="tools to run (default all): " + ",".join(ALL_TOOLS))
    ap.add_argument("--runs", type=int, default=5, help="runs per tool and configuration (default 5)")
    ap.add_argument("--timeline", action="store_true",
                    help="write an SVG timeline (requests per connection, from nginx's log) of each "
                         "tool's median run beside the report; shaped configurations always get the "
                         "timeline table")
    ap.add_argument("--shaped", action="store_true",
                    help="shaped link: nginx limit_rate per connection (--rate)")
    ap.add_argument("--both-links", action="store_true",
                    help="run every configuration unshaped and shaped")
    ap.add_argument("--rate", default="12500k",
                    help="nginx limit_rate for --shaped (default 12500k = 100 Mbit/s per connection)")
    ap.add_argument("--no-floor", dest="floor", action="store_false",
                    help="skip the floor lines (curl -o /dev/null, dd oflag=direct)")
    ap.add_argument("--no-verify", dest="verify", action="store_false",
                    help="skip SHA-256 of outputs (size is still checked)")
    ap.add_argument("--no-drop", action="store_true",
                    help="do not sync+drop caches before runs (no root needed; numbers "
                         "not comparable)")
    ap.add_argument("--ringdl", default=os.environ.get("RINGDL"),
                    help="ringdl binary (default: $RINGDL, else target/release/ringdl)")
    ap.add_argument("--work", type=Path, default=Path("/var/tmp/ringdl-bench/work"),
                    help="work dir: sources (kept across invocations), TLS files, nginx, logs "
                         "(default /var/tmp/ringdl-bench/work)")
    ap.add_argument("--out-dir", type=Path, default=Path("/var/tmp/ringdl-bench/out"),
                    help="download target dir, on the disk you want to measure "
                         "(default /var/tmp/ringdl-bench/out)")
    ap.add_argument("--results", type=Path, default=Path("/var/tmp/ringdl-bench/results"),
                    help="where the JSON and Markdown reports go (default /var/tmp/ringdl-bench/results)")
    ap.add_argument("--port", type=int, default=18080, help="first port to try for nginx (default 18080)")
    ap.add_argument("--timeout", type=int, default=0,
                    help="seconds per run before the tool is killed and the run failed "
                         "(0 = 60 + 1 per 2 MiB of file)")
    ap.add_argument("--label", default="", help="free text stored in the report header")
    args = ap.parse_args()
    args.timeout_for = lambda size: args.timeout or 60 + size // (2 << 20)

    for t in args.tools:
        if t not in ALL_TOOLS:
            die(f"unknown tool {t!r} (known: {', '.join(ALL_TOOLS)})")
    for p in args.proto:
        if p not in ("http", "https"):
            die(f"unknown proto {p!r}")
    for c in args.connections:
        if not 1 <= c <= 64:
            die(f"connections must be 1..64, got {c}")
    if args.runs < 1:
        die("--runs must be >= 1")
    if not args.no_drop and os.geteuid() != 0:
        die("dropping caches needs root: run as root (or sudo), or pass --no-drop")

    # What must be installed.
    need = {"nginx", "openssl", GNU_TIME, "sync", "fincore", "findmnt"}
    need |= {t for t in args.tools if t != "ringdl"}
    if args.floor:
        need |= {"curl", "dd"}
    missing = sorted({NEEDS[c] for c in need if not find_cmd(c)})
    if missing:
        die(f"missing: {' '.join(missing)}\n  install: apt-get install -y {' '.join(missing)}"
            f"\n  (or run ./bench/run.sh, which installs them)")
    if "ringdl" in args.tools:
        if not args.ringdl:
            cand = [REPO / "target/release/ringdl",
                    REPO / "target/x86_64-unknown-linux-musl/release/ringdl"]
            args.ringdl = next((str(c) for c in cand if c.exists()), None)
        if not args.ringdl or not os.access(args.ringdl, os.X_OK):
            die("no ringdl binary: build it (cargo build --release) or pass --ringdl PATH")
        args.ringdl = str(Path(args.ringdl).resolve())

    args.work = args.work.resolve()
    args.out_dir = args.out_dir.resolve()
    www, tls, logs = args.work / "www", args.work / "tls", args.work / "logs"
    for d in (www, logs, args.out_dir, args.results):
        d.mkdir(parents=True, exist_ok=True)
    ensure_tls(tls)
    ca = tls / "ca.pem"
    sources = {s: ensure_source(www, s) for s in args.size}

    stamp = dt.datetime.now().astimezone()
    header = {
        "date": stamp.isoformat(timespec="seconds"),
        "machine": machine_info(args.out_dir),
        "ringdl": {"path": args.ringdl, "version": tool_version([args.ringdl, "--version"])
                   if args.ringdl else None, "git": git_rev(),
                   "binary_mtime": dt.datetime.fromtimestamp(os.stat(args.ringdl).st_mtime)
                   .astimezone().isoformat(timespec="seconds") if args.ringdl else None},
        "versions": {t: tool_version(a) for t, a in {
            "aria2c": ["aria2c", "--version"], "axel": ["axel", "--version"],
            "curl": ["curl", "--version"], "wget": ["wget", "--version"],
            "nginx": [find_cmd("nginx") or "nginx", "-v"], "openssl": ["openssl", "version"],
        }.items()},
        "method": method_text(args),
        "label": args.label,
        "argv": sys.argv,
    }
    header["loadavg_start"] = Path("/proc/loadavg").read_text().split()[:3]

    nginx = Nginx(args.work, www, tls, args.port, args.rate)
    nginx.start()
    links = [False, True] if args.both_links else [args.shaped]
    configs, failures = [], 0
    try:
        for shaped in links:
            for proto in args.proto:
                for size in args.size:
                    src, digest = sources[size]
                    args._src = src
                    for conns in args.connections:
                        key = proto + ("-shaped" if shaped else "")
                        url = f"{proto}://127.0.0.1:{nginx.ports[key]}/{src.name}"
                        variants = build_variants(args, ca, conns, proto)
                        c = {"proto": proto, "size": size, "connections": conns,
                             "shaped": shaped, "rate": args.rate if shaped else None,
                             "runs": args.runs, "url": url}
                        log(f"config: {config_title(c)}")
                        runs = []
                        c["runs_detail"], c["_variants"] = runs, variants
                        configs.append(c)
                        for i in range(args.runs):
                            k = i % len(variants)
                            order = variants[k:] + variants[:k]  # rotate: no fixed first slot
                            for var in order:
                                tag = re.sub(r"[^a-z0-9]+", "-", var.name.lower()).strip("-")
                                lp = logs / f"{key}-{size_tag(size)}-x{conns}-{tag}-{i}.log"
                                out = args.out_dir / f"out-{tag}.bin"
                                r = run_once(args, var, url, out, src, digest, size, nginx, lp)
                                r["round"] = i
                                runs.append(r)
                                if "error" in r:
                                    failures += 1
                                    print(f"\n!!!!! FAILED: {var.name} run {i}: {r['error']}\n"
                                          f"!!!!! log: {lp}\n"
                                          + "".join(lp.read_text(errors="replace")
                                                    .splitlines(True)[-15:]),
                                          file=sys.stderr, flush=True)
                                else:
                                    log(f"  {var.name:<40} wall {r['wall_s']:.2f} s  "
                                        f"cpu {r['cpu_s']:.2f} s  busy {r['system_busy_s']:.2f} s  rss "
                                        f"{r.get('max_rss_kib', 0) / 1024:.1f} MiB  cache "
                                        f"{r['cache_growth_mib']:+.0f} MiB (output {r['output_cached_mib']} MiB)"
                                        f"  load {r['loadavg_before']}")
    except KeyboardInterrupt:
        log("interrupted: writing what was measured")
        failures += 1
    finally:
        nginx.stop()
    for c in configs:
        runs = c["runs_detail"]
        c["server_tls"] = sorted({t for r in runs for t in r["server"]["tls"]})
        c["summary"] = summarize(runs, c.pop("_variants"))

    header["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    report = {**header, "configs": configs, "failures": failures}
    m = header["machine"]
    md = [f"# ringdl benchmark {header['date']}", "",
          f"- machine: {m['nproc']} CPUs, {m['cpu_model']}, {m['mem_total_gib']} GiB, "
          f"kernel {m['kernel']}; output fs: {m['output_fs']}",
          f"- ringdl: {header['ringdl']['path']}, {header['ringdl']['version']}, built "
          f"{header['ringdl']['binary_mtime']} (tree now: git {header['ringdl']['git']})",
          "- peers: "
          + "; ".join(f"{k}: {v}" for k, v in header["versions"].items()),
          f"- load average: start {' '.join(header['loadavg_start'])}, end "
          f"{' '.join(header['loadavg_end'])}",
          f"- method: {header['method']}"]
    if args.label:
        md.append(f"- label: {args.label}")
    for c in configs:
        md += ["", f"## {config_title(c)}", "", markdown_table(c["summary"])]
        if c["shaped"] or args.timeline:
            md += ["", timeline_table(c)]
    if failures:
        md += ["", f"**{failures} run(s) FAILED** — see the logs named in the JSON."]
    text = "\n".join(md) + "\n"
    base = args.results / f"bench-{stamp.strftime('%Y%m%d-%H%M%S')}"
    if args.timeline:
        for c in configs:
            for name, run in median_runs(c).items():
                tag = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
                key = c["proto"] + ("-shaped" if c["shaped"] else "")
                svg = Path(f"{base}-{key}-{size_tag(c['size'])}-x{c['connections']}-{tag}.svg")
                shaped = f", limit_rate {c['rate']}" if c["shaped"] else ""
                title = (f"{name} — {c['proto'].upper()} {fmt_size(c['size'])}, {c['connections']} "
                         f"connections{shaped}: median run, wall {run['wall_s']:.2f} s")
                svg.write_text(timeline_svg(run["server"]["detail"], run["spawned_unix"],
                                            run["wall_s"], title))
                log(f"timeline: {svg}")
    base.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    base.with_suffix(".md").write_text(text)
    print(text)
    log(f"wrote {base}.json and {base}.md")
    if failures:
        print(f"error: {failures} run(s) FAILED", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
