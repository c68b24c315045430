#!/usr/bin/env python3
"""Where a small file's time goes between ringdl and nginx: a kernel trace of one run.

Runs COMMAND (a ringdl list run against a local nginx, e.g. the one `many.py` starts)
under `perf record -a` with the tracepoints of ringdl's ring (io_uring:io_uring_submit_req,
io_uring_complete, io_uring_task_add) and of nginx's system calls (its read(2) of a
request, its write(2)s of the TLS records of a response), then prints, as medians
(p10, p90) over the run's requests:

- ringdl's request sent (the SEND's completion) → nginx has read it: the server's wake-up,
- nginx's request read → its response's last record written: the server's service,
- nginx's last write → the next request read: the server waiting for ringdl,
- the response's bytes arrived (the armed RECV's poll fired: io_uring_task_add) → the
  RECV completes on ringdl's ring: ringdl busy elsewhere or waking up,
- the latest RECV completion → the next SEND submitted: ringdl's turnaround between
  files (the next file's preparation is in it).

The response's last record is recognised by its size (`--last-record`, bytes: the last
TLS record nginx writes for a file; 306 for a 64 KiB file with nginx's default headers
over TLS 1.3) and a request by its read(2) size (`--request`: ringdl's request line and
headers). Root (perf). Sources: perf-record(1), perf-script(1), the io_uring and syscalls
tracepoints (`perf list io_uring:*`).

    python3 bench/chain.py --request 177 --last-record 306 -- \\
        ringdl -q -i LIST -j 4 -d OUT --ca-certificate CA
"""

from __future__ import annotations

import argparse
import bisect
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

EVENTS = [
    "io_uring:io_uring_submit_req", "io_uring:io_uring_complete", "io_uring:io_uring_task_add",
    "syscalls:sys_exit_read", "syscalls:sys_enter_write",
]
LINE = re.compile(r"\s*(\S+)\s+\d+\s+\[\d+\]\s+(\d+\.\d+):\s+(\S+):\s*(.*)")


def parse(text: str, request: int, last_record: int) -> dict[str, list[float]]:
    """The event times of one trace (`perf script` output), by kind."""
    ops: dict[str, str] = {}
    t: dict[str, list] = {"send": [], "recv": [], "submit_send": [], "read": [], "last_write": [], "arrived": []}
    for line in text.splitlines():
        m = LINE.match(line)
        if not m or m.group(1) == "perf":
            continue
        comm, at, name, rest = m.group(1), float(m.group(2)), m.group(3), m.group(4)
        if name == "io_uring:io_uring_submit_req":
            u = re.search(r"user_data (0x[0-9a-f]+), opcode (\w+)", rest)
            if u:
                ops[u.group(1)] = u.group(2)
                if u.group(2) == "SEND":
                    t["submit_send"].append(at)
        elif name == "io_uring:io_uring_complete":
            u = re.search(r"user_data (0x[0-9a-f]+), result (-?\d+)", rest)
            if u and ops.get(u.group(1)) == "SEND" and int(u.group(2)) == request:
                t["send"].append(at)
            elif u and ops.get(u.group(1)) == "RECV" and int(u.group(2)) > 0:
                t["recv"].append((at, u.group(1)))
        elif name == "io_uring:io_uring_task_add" and comm == "nginx":
            u = re.search(r"user_data (0x[0-9a-f]+)", rest)
            if u:
                t["arrived"].append((at, u.group(1)))
        elif name == "syscalls:sys_exit_read" and comm == "nginx" and rest.strip() == hex(request):
            t["read"].append(at)
        elif name == "syscalls:sys_enter_write" and comm == "nginx" and f"count: {last_record:#010x}" in rest:
            t["last_write"].append(at)
    return t


def after(xs: list[float], ys: list[float]) -> list[float]:
    """For each y, the time since the latest x before it."""
    out = []
    for y in ys:
        i = bisect.bisect_left(xs, y)
        if i > 0:
            out.append(y - xs[i - 1])
    return out


def until(xs: list[float], ys: list[float]) -> list[float]:
    """For each x, the time until the first y after it."""
    out = []
    for x in xs:
        i = bisect.bisect_right(ys, x)
        if i < len(ys):
            out.append(ys[i] - x)
    return out


def line(name: str, v: list[float]) -> str:
    if not v:
        return f"{name}: no samples"
    v = sorted(v)
    us = lambda x: f"{x * 1e6:.0f}"  # noqa: E731
    return (f"{name}: median {us(statistics.median(v))} µs, p10 {us(v[len(v) // 10])}, "
            f"p90 {us(v[len(v) * 9 // 10])} (n {len(v)})")


def report(t: dict[str, list]) -> list[str]:
    done = {ud: at for at, ud in t["recv"]}
    recvs = sorted(at for at, _ in t["recv"])
    return [
        line("request sent -> nginx has read it", after(sorted(t["send"]), t["read"])),
        line("nginx read the request -> wrote its last record", until(t["read"], sorted(t["last_write"]))),
        line("nginx's last record -> its next request read", until(sorted(t["last_write"]), t["read"])),
        line("bytes arrived -> ringdl's RECV completes",
             [done[ud] - at for at, ud in t["arrived"] if ud in done and done[ud] >= at]),
        line("ringdl's latest RECV -> its next SEND submitted", after(recvs, sorted(t["submit_send"]))),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--request", type=int, required=True, help="bytes of one request as nginx reads it")
    ap.add_argument("--last-record", type=int, required=True, help="bytes of a response's last TLS record")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS…")
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("no command")
    with tempfile.TemporaryDirectory(prefix="ringdl-chain-") as d:
        data = Path(d) / "perf.data"
        ev = [x for e in EVENTS for x in ("-e", e)]
        rec = subprocess.run(["perf", "record", "-a", "-q", "-o", str(data), *ev, "--", *cmd])
        if rec.returncode != 0:
            print(f"chain.py: the command (or perf) exited with {rec.returncode}", file=sys.stderr)
            return 1
        text = subprocess.run(["perf", "script", "-i", str(data)], capture_output=True, text=True, check=True).stdout
    for out in report(parse(text, args.request, args.last_record)):
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
