#!/usr/bin/env python3
"""System calls per file of a list: `strace -f -c` over ringdl (and, to compare, other
ringdl binaries and curl) fetching one set of files from the bench's loopback nginx.

Each tool fetches the set (`--set 1000x64K`, made once as many.py makes it) in one
command under `strace -f -c -o FILE`; the summary's calls (and failed calls) per
syscall are divided by the number of files, and printed side by side, one column per
tool, sorted by the first tool's count, with a `total` row (every syscall, the ring's
`io_uring_enter` included). Every output is SHA-256-checked: a run with a wrong file
fails loudly. No caches are dropped (this counts calls, it does not time them); strace
slows every call, so its times mean nothing here and are not shown.

    python3 bench/syscalls.py --ringdl target/release/ringdl --before /tmp/ringdl-main
    python3 bench/syscalls.py --tools ringdl,curl --set 100x1M --proto http

Python 3.11 standard library, strace, nginx (bench.py's fixtures).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as b  # noqa: E402
import many  # noqa: E402

# `% time seconds usecs/call calls errors syscall`; errors may be empty.
LINE = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(\d+)?\s*(\w+)\s*$")


def parse_summary(text: str) -> dict[str, tuple[int, int]]:
    """strace -c's table: syscall -> (calls, errors), the `total` row included."""
    out = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            out[m.group(3)] = (int(m.group(1)), int(m.group(2) or 0))
    return out


def argv_of(tool: str, binary: str, jobs: int, listfile: Path, urls: list[str], out: Path, ca: Path,
            https: bool) -> list[str]:
    if tool == "curl":
        return ["curl", "-sS", "--fail", "-Z", "--parallel-max", str(jobs), *(["--cacert", str(ca)] if https else []),
                "--remote-name-all", "--output-dir", str(out), *urls]
    return [binary, "-q", "-i", str(listfile), "-j", str(jobs), "-d", str(out),
            *(["--ca-certificate", str(ca)] if https else [])]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", type=many.parse_set, default=(1000, 64 << 10), help="COUNTxSIZE (default 1000x64K)")
    ap.add_argument("--proto", choices=("https", "http"), default="https")
    ap.add_argument("--jobs", "-j", type=int, default=4)
    ap.add_argument("--ringdl", default=str(b.REPO / "target/release/ringdl"))
    ap.add_argument("--before", help="a second ringdl binary: the column `before`")
    ap.add_argument("--tools", type=b.csv_list(str), default=None,
                    help="columns: ringdl, before, curl (default ringdl, before when given, curl)")
    ap.add_argument("--work", type=Path, default=Path("/var/tmp/ringdl-bench/work"))
    ap.add_argument("--out-dir", type=Path, default=Path("/var/tmp/ringdl-bench/out"))
    ap.add_argument("--port", type=int, default=18500)
    ap.add_argument("--json", type=Path, help="also write the counts here")
    args = ap.parse_args()
    tools = args.tools or ["ringdl", *(["before"] if args.before else []), "curl"]
    if "before" in tools and not args.before:
        b.die("the column before needs --before PATH")
    for t, path in (("ringdl", args.ringdl), ("before", args.before)):
        if t in tools and not (path and os.access(path, os.X_OK)):
            b.die(f"no {t} binary at {path}")
    if not shutil.which("strace"):
        b.die("strace is not installed")
    args.work, args.out_dir = args.work.resolve(), args.out_dir.resolve()
    www, tls = args.work / "www", args.work / "tls"
    for d in (www, args.out_dir):
        d.mkdir(parents=True, exist_ok=True)
    b.ensure_tls(tls)
    count, size = args.set
    srcdir, digests = many.ensure_set(www, count, size)
    nginx = b.Nginx(args.work, www, tls, args.port, "12500k")
    nginx.start()
    https = args.proto == "https"
    rel = srcdir.relative_to(www)
    urls = [f"{args.proto}://127.0.0.1:{nginx.ports[args.proto]}/{rel}/{n}" for n in digests]
    listfile = args.work / f"list-{rel}-{args.proto}-syscalls.txt"
    listfile.write_text("\n".join(urls) + "\n")
    counts: dict[str, dict[str, tuple[int, int]]] = {}
    try:
        for tool in tools:
            out = args.out_dir / f"syscalls-{tool}"
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            binary = args.before if tool == "before" else args.ringdl
            summary = args.work / f"strace-{tool}.txt"
            argv = ["strace", "-f", "-c", "-o", str(summary),
                    *argv_of(tool, binary, args.jobs, listfile, urls, out, tls / "ca.pem", https)]
            b.log(f"{tool}: {' '.join(argv[:10])} …")
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                b.die(f"{tool} exited {r.returncode}: {r.stderr[-2000:]}")
            bad = [n for n, d in digests.items() if not (out / n).exists() or b.sha256_file(out / n) != d]
            if bad:
                b.die(f"{tool}: {len(bad)} of {count} files missing or wrong (first: {bad[0]})")
            counts[tool] = parse_summary(summary.read_text())
            shutil.rmtree(out, ignore_errors=True)
    finally:
        nginx.stop()
    names = sorted({n for c in counts.values() for n in c} - {"total"},
                   key=lambda n: (-max(c.get(n, (0, 0))[0] for c in counts.values()), n))
    head = f"System calls per file: {count} × {b.fmt_size(size)} over {args.proto.upper()}, -j {args.jobs} " \
           f"(strace -f -c; calls per file, failed calls in brackets)"
    lines = [head, "", "| syscall | " + " | ".join(tools) + " |", "| --- |" + " --- |" * len(tools)]

    def cell(c, n):
        calls, errs = c.get(n, (0, 0))
        if calls == 0:
            return "—"
        return f"{calls / count:.2f}" + (f" ({errs / count:.2f})" if errs else "")

    for n in ["total", *names]:
        label = "**total**" if n == "total" else n
        lines.append(f"| {label} | " + " | ".join(cell(counts[t], n) for t in tools) + " |")
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps({"set": [count, size], "proto": args.proto, "jobs": args.jobs,
                                         "counts": counts}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
