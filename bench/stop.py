#!/usr/bin/env python3
"""How long each tool takes to stop on SIGINT mid-download, and whether it resumes exact.

Per run: the tool fetches a random file from the same loopback nginx as bench.py, from
its shaped server (`--rate` per connection, so the download is mid-way when the signal
comes); after a random 0.5–1.5 s it gets SIGINT, and the time from the signal to its
exit is taken (monotonic clock, `Popen.wait`). Then its own resume command fetches the
rest from the unshaped server, and the output's SHA-256 must be the source's. Tools
interleaved (the order rotates each round), `--runs` rounds, medians:

- ringdl `-x N --threads T` (one row per `--threads`; with `--before PATH`, the same rows
  of that binary too, interleaved: a before/after in one run), resumed with `-c`;
- aria2c `-x N -s N`, resumed with `-c` (its `.aria2` control file);
- curl `-o FILE`, resumed with `-C -`; wget `-O FILE`, resumed with `-c`.

Python 3.11 standard library; the tools above. No page cache is dropped: this measures
a stop, not a transfer.

    python3 bench/stop.py --proto https,http --threads 1,2 --runs 10
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as b  # noqa: E402  (the fixtures and helpers of the one-file benchmark)


def commands(tool: str, args, url: str, out: Path, ca: Path, resume: bool) -> list[str]:
    """The argv that fetches `url` to `out` (`resume`: that resumes it)."""
    n = str(args.connections)
    if tool.startswith("ringdl"):
        threads = tool.rsplit("-t", 1)[1]
        binary = args.before if tool.startswith("ringdl-before") else args.ringdl
        return [binary, "-q", "-x", n, "--threads", threads, "--ca-certificate", str(ca),
                *(["-c"] if resume else []), "-o", str(out), url]
    if tool == "aria2c":
        return [b.find_cmd("aria2c") or "aria2c", "-q", "-x", n, "-s", n, "--min-split-size=1M",
                f"--ca-certificate={ca}", "--allow-overwrite=false", "--auto-file-renaming=false",
                *(["-c"] if resume else []), "-d", str(out.parent), "-o", out.name, url]
    if tool == "curl":
        return ["curl", "-sS", "--cacert", str(ca), *(["-C", "-"] if resume else []), "-o", str(out), url]
    if tool == "wget":
        return ["wget", "-q", f"--ca-certificate={ca}", *(["-c"] if resume else []), "-O", str(out), url]
    raise ValueError(tool)


def clean(out: Path) -> None:
    for p in out.parent.glob(out.name + "*"):
        p.unlink()


def run_once(args, tool: str, urls: tuple[str, str], out: Path, ca: Path, digest: str, log: Path) -> dict:
    clean(out)
    r = {"tool": tool}
    with log.open("w") as lf:
        p = subprocess.Popen(commands(tool, args, urls[0], out, ca, False), stdout=lf, stderr=lf)
        time.sleep(random.uniform(0.5, 1.5))
        if p.poll() is not None:
            return {**r, "error": f"ended before the signal (exit {p.returncode}; a larger --size?)"}
        t = time.monotonic()
        p.send_signal(signal.SIGINT)
        try:
            r["exit"] = p.wait(args.timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            return {**r, "error": f"still running {args.timeout} s after SIGINT"}
        r["stop_ms"] = (time.monotonic() - t) * 1000
        again = subprocess.run(commands(tool, args, urls[1], out, ca, True), stdout=lf, stderr=lf,
                               timeout=args.timeout, check=False)
    if again.returncode != 0:
        return {**r, "error": f"the resume exited {again.returncode} (log {log})"}
    if b.sha256_file(out) != digest:
        return {**r, "error": f"the resumed file's SHA-256 differs (log {log})"}
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=b.parse_size, default=b.parse_size("256M"))
    ap.add_argument("--connections", "-x", type=int, default=4)
    ap.add_argument("--threads", type=b.csv_list(int), default=[1, 2], help="ringdl rows (default 1,2)")
    ap.add_argument("--proto", type=b.csv_list(str), default=["https"])
    ap.add_argument("--tools", type=b.csv_list(str), default=["ringdl", "aria2c", "curl", "wget"])
    ap.add_argument("--rate", default="4m", help="nginx limit_rate per connection (default 4m)")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--ringdl", help="the ringdl binary (default: the static release build)")
    ap.add_argument("--before", help="a second ringdl binary: rows ringdl-before-tT beside ringdl-tT")
    ap.add_argument("--work", type=Path, default=Path("/var/tmp/ringdl-bench/work"))
    ap.add_argument("--out-dir", type=Path, default=Path("/var/tmp/ringdl-bench/out"))
    ap.add_argument("--results", type=Path, default=Path("/var/tmp/ringdl-bench/results"))
    ap.add_argument("--port", type=int, default=18500)
    ap.add_argument("--timeout", type=int, default=600)
    args = ap.parse_args()
    if not args.ringdl:
        cand = b.REPO / "target/x86_64-unknown-linux-musl/release/ringdl"
        args.ringdl = str(cand) if cand.exists() else None
    if "ringdl" in args.tools and not (args.ringdl and os.access(args.ringdl, os.X_OK)):
        b.die("no ringdl binary: build it or pass --ringdl PATH")
    tools = [t for t in args.tools if t != "ringdl"]
    if "ringdl" in args.tools:
        tools = [f"ringdl-t{t}" for t in args.threads] + tools
        if args.before:
            tools = [f"ringdl-before-t{t}" for t in args.threads] + tools
    for t in tools:
        if not t.startswith("ringdl") and not b.find_cmd(t):
            b.die(f"{t} is not installed (apt: {'aria2' if t == 'aria2c' else t})")
    args.work, args.out_dir = args.work.resolve(), args.out_dir.resolve()
    www, tls, logs = args.work / "www", args.work / "tls", args.work / "logs"
    for d in (www, logs, args.out_dir, args.results):
        d.mkdir(parents=True, exist_ok=True)
    b.ensure_tls(tls)
    src, digest = b.ensure_source(www, args.size)
    nginx = b.Nginx(args.work, www, tls, args.port, args.rate)
    nginx.start()
    stamp = dt.datetime.now().astimezone()
    m = b.machine_info(args.out_dir)
    md = [f"# ringdl stop benchmark {stamp.isoformat(timespec='seconds')}", "",
          f"- machine: {m['nproc']} CPUs, {m['cpu_model']}, kernel {m['kernel']}; output fs: {m['output_fs']}",
          f"- ringdl: {args.ringdl} (git {b.git_rev()}); {b.fmt_size(args.size)}, -x {args.connections}, "
          f"limit_rate {args.rate} per connection",
          f"- method: SIGINT 0.5–1.5 s into the download, time from the signal to the exit (monotonic), "
          f"then the tool's resume from the unshaped server, SHA-256 checked; tools interleaved, "
          f"{args.runs} rounds, medians"]
    failures = 0
    try:
        for proto in args.proto:
            urls = tuple(f"{proto}://127.0.0.1:{nginx.ports[k]}/{src.name}" for k in (f"{proto}-shaped", proto))
            runs = []
            for i in range(args.runs):
                k = i % len(tools)
                for tool in tools[k:] + tools[:k]:
                    r = run_once(args, tool, urls, args.out_dir / f"stop-{tool}.bin", tls / "ca.pem", digest,
                                 logs / f"stop-{proto}-{tool}-{i}.log")
                    runs.append(r)
                    if "error" in r:
                        failures += 1
                        b.log(f"  FAILED {tool}: {r['error']}")
                    else:
                        b.log(f"  {tool:<10} stop {r['stop_ms']:7.1f} ms  exit {r['exit']}  resumed exact")
            md += ["", f"## {proto.upper()}", "", "| tool | stop after SIGINT, median (min–max) | exit | resumed exact |",
                   "| --- | --- | --- | --- |"]
            for tool in tools:
                ok = [r for r in runs if r["tool"] == tool and "error" not in r]
                ms = [r["stop_ms"] for r in ok]
                codes = sorted({r["exit"] for r in ok})
                stop = f"{b.median(ms):.1f} ms ({min(ms):.1f}–{max(ms):.1f})" if ms else "FAILED"
                n = sum(1 for r in runs if r["tool"] == tool)
                md.append(f"| {tool} | {stop} | {', '.join(map(str, codes))} | {len(ok)} of {n} |")
    finally:
        nginx.stop()
    text = "\n".join(md) + "\n"
    base = args.results / f"stop-{stamp.strftime('%Y%m%d-%H%M%S')}"
    base.with_suffix(".md").write_text(text)
    print(text)
    b.log(f"wrote {base}.md")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
