#!/usr/bin/env python3
"""A list of small files from a server that closes every connection after its response
without saying so (no `Connection: close`): ringdl against curl (issue 40).

A loopback HTTP/1.1 server (Python's ThreadingHTTPServer, one thread per connection,
single byte ranges: without them ringdl keeps no connection) serves `--files` random files
of 16-64 KiB and closes each connection once its response is out, though the response
says nothing of it. Each tool fetches the whole list in one
command, interleaved, `--runs` times:

- ringdl `-Z -j J -d OUT URL…`,
- curl `-Z --parallel-max J --remote-name-all --output-dir OUT URL…`.

Per run: wall (monotonic), the exit status, and the SHA-256 of every output file (a
mismatch or a failure stops the script). Medians, and ringdl's ratio to curl. Python 3.11
standard library; no root needed (the files are small and hot in the page cache).

    python3 bench/closes.py --ringdl target/release/ringdl --files 50 -j 8 --runs 5
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import os
import random
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path


class Closing(http.server.BaseHTTPRequestHandler):
    """Serves `root` over HTTP/1.1 with single byte ranges (206, Content-Range, as ringdl's
    first request asks) and closes after every response, silently."""

    protocol_version = "HTTP/1.1"
    root = Path(".")

    def do_GET(self) -> None:
        path = self.root / self.path.lstrip("/")
        if "/" in self.path.lstrip("/") or not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        first, last, status = 0, len(data) - 1, 200
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if m and int(m.group(1)) < len(data):
            first = int(m.group(1))
            last = min(int(m.group(2)), last) if m.group(2) else last
            status = 206
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(last - first + 1))
        if status == 206:
            self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
        self.end_headers()
        self.wfile.write(data[first : last + 1])
        # (Said as keep-alive; closed all the same once the response is out.)
        self.close_connection = True

    def log_message(self, *args) -> None:  # quiet
        pass


def serve(root: Path) -> tuple[http.server.ThreadingHTTPServer, int]:
    handler = type("Handler", (Closing,), {"root": root})
    # (The default listen backlog of 5 drops SYNs of 8 connects at once: a 1 s
    # retransmission that would time the kernel, not the tools.)
    http.server.ThreadingHTTPServer.request_queue_size = 128
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, srv.server_address[1]


def check(out: Path, digests: dict[str, str]) -> None:
    for name, want in digests.items():
        got = hashlib.sha256((out / name).read_bytes()).hexdigest()
        if got != want:
            raise SystemExit(f"{out / name}: wrong bytes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ringdl", default="target/release/ringdl")
    ap.add_argument("--curl", default="curl")
    ap.add_argument("--files", type=int, default=50)
    ap.add_argument("-j", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ringdl-closes-"))
    try:
        root = work / "www"
        root.mkdir()
        rnd = random.Random(40)
        digests = {}
        for i in range(a.files):
            data = os.urandom(rnd.randrange(16 << 10, 64 << 10))
            name = f"f{i:03d}.bin"
            (root / name).write_bytes(data)
            digests[name] = hashlib.sha256(data).hexdigest()
        srv, port = serve(root)
        urls = [f"http://127.0.0.1:{port}/{n}" for n in digests]
        tools = {
            "ringdl": lambda out: [a.ringdl, "-q", "-Z", "-j", str(a.j), "-d", str(out), *urls],
            "curl": lambda out: [
                a.curl, "-s", "-f", "-Z", "--parallel-max", str(a.j), "--remote-name-all",
                "--output-dir", str(out), *urls,
            ],
        }
        walls: dict[str, list[float]] = {t: [] for t in tools}
        for run in range(a.runs):
            for tool, argv in tools.items():
                out = work / f"out-{tool}-{run}"
                out.mkdir()
                t = time.monotonic()
                r = subprocess.run(argv(out), capture_output=True, text=True)
                walls[tool].append(time.monotonic() - t)
                if r.returncode != 0:
                    raise SystemExit(f"{tool} exit {r.returncode}: {r.stderr[-2000:]}")
                check(out, digests)
                shutil.rmtree(out)
        srv.shutdown()
        med = {t: statistics.median(w) for t, w in walls.items()}
        for t, w in walls.items():
            print(f"{t:7} median {med[t]:.3f} s  runs {' '.join(f'{x:.3f}' for x in w)}")
        print(f"ringdl / curl: {med['ringdl'] / med['curl']:.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
