#!/usr/bin/env python3
"""Many files from one origin: ringdl against curl, wget and aria2c.

Each set (`--sets 100x1M,1000x64K,10x100M`) is N random files of one size, generated
once under the work directory and served by the same loopback nginx as bench.py. Every
tool fetches the whole set in one command, interleaved, `--runs` times:

- curl `--remote-name-all --output-dir OUT URL…` (one process, connections reused),
  and as the tool `curl-Z` the same with `-Z --parallel-max J` (parallel transfers);
  `curl-Z+sync` is curl-Z followed by `sync -f OUT` (syncfs(2) of the output's file
  system): curl's bytes on the disk when the command ends, as ringdl's are (ringdl also
  syncs each file before its rename, which curl has no equivalent of),
- wget `-i LIST -P OUT`,
- aria2c `-i LIST -j J -d OUT` (aria2c's defaults otherwise),
- ringdl `-i LIST -j J -d OUT` when its `--help` names `--input-file`; before that, the
  only way it has: one process per file (`ringdl -o OUT/NAME URL` in a shell loop), and
  the row says so.

Per run: caches dropped and every source file read back (the server side hot), wall
(monotonic), CPU user + system and peak RSS of the whole command and its children (GNU
time), the whole machine's busy CPU time over the run (/proc/stat, all CPUs: it counts the
kernel's flusher threads that write a page-cache client's bytes, and nginx's share, the
same server for every tool), the server's connections (distinct nginx connection serials) and requests, and
the SHA-256 of every output file (a mismatch fails the run and the exit status).
Medians; ratios against curl. Python 3.11 standard library; root (drop_caches).

    python3 bench/many.py --sets 100x1M,1000x64K --proto https --runs 3
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as b  # noqa: E402  (the fixtures and helpers of the one-file benchmark)


def parse_set(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)x(.+)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"bad set {text!r} (e.g. 100x1M)")
    return int(m.group(1)), b.parse_size(m.group(2))


def ensure_set(www: Path, count: int, size: int) -> tuple[Path, dict[str, str]]:
    """`count` random files of `size` bytes in www/many-COUNTxSIZE/, made once, with a
    manifest of their SHA-256."""
    d = www / f"many-{count}x{b.size_tag(size)}"
    manifest = d / "manifest.json"
    if manifest.exists():
        digests = json.loads(manifest.read_text())
        if len(digests) == count and all((d / n).stat().st_size == size for n in digests):
            return d, digests
    b.log(f"generating {count} files of {b.fmt_size(size)} in {d}")
    d.mkdir(parents=True, exist_ok=True)
    digests = {}
    with open("/dev/urandom", "rb", buffering=0) as rnd:
        for i in range(count):
            name = f"f{i:05d}.bin"
            h, left = hashlib.sha256(), size
            with open(d / name, "wb") as f:
                while left:
                    chunk = rnd.read(min(left, 1 << 20))
                    h.update(chunk)
                    f.write(chunk)
                    left -= len(chunk)
            digests[name] = h.hexdigest()
    manifest.write_text(json.dumps(digests))
    return d, digests


def ringdl_has_lists(ringdl: str) -> bool:
    r = subprocess.run([ringdl, "--help"], capture_output=True, text=True)
    return "--input-file" in r.stdout


def ringdl_has_jobs(ringdl: str) -> bool:
    """Whether ringdl runs several files at once (`-j`); before that, a list's files go
    one after another over its kept-alive connections."""
    r = subprocess.run([ringdl, "--help"], capture_output=True, text=True)
    return "--max-concurrent-downloads" in r.stdout or "  -j," in r.stdout


def commands(args, tool: str, urls: list[str], listfile: Path, out: Path, ca: Path,
             https: bool) -> tuple[str, list[str]]:
    """(row label, argv) of `tool` fetching `urls` into `out`. `ringdl@T` (and
    `ringdl-before@T`) is ringdl at `--threads T`."""
    if "@" in tool:
        name, threads = tool.split("@", 1)
        label, argv = commands(args, name, urls, listfile, out, ca, https)
        return (f"{label} --threads {threads}", [*argv, "--threads", threads])
    if tool == "curl-Z":
        # (curl's parallel transfers: -Z with --parallel-max J, connections reused.)
        return (f"curl -Z --parallel-max {args.jobs} --remote-name-all",
                ["curl", "-sS", "--fail", "-Z", "--parallel-max", str(args.jobs),
                 *(["--cacert", str(ca)] if https else []), "--remote-name-all", "--output-dir", str(out), *urls])
    if tool == "curl-Z+sync":
        label, argv = commands(args, "curl-Z", urls, listfile, out, ca, https)
        return (f"{label}, then sync -f", ["sh", "-c", '"$@" && exec sync -f "$0"', str(out), *argv])
    if tool == "curl":
        return ("curl --remote-name-all", ["curl", "-sS", "--fail", *(["--cacert", str(ca)] if https else []),
                                          "--remote-name-all", "--output-dir", str(out), *urls])
    if tool == "wget":
        return ("wget -i", ["wget", "-q", *([f"--ca-certificate={ca}"] if https else []),
                            "-P", str(out), "-i", str(listfile)])
    if tool == "aria2c":
        return (f"aria2c -i -j {args.jobs}",
                ["aria2c", "-q", "-i", str(listfile), "-j", str(args.jobs), "-d", str(out),
                 "--allow-overwrite=true", "--auto-file-renaming=false", "--console-log-level=warn",
                 "--summary-interval=0", *([f"--ca-certificate={ca}"] if https else [])])
    if tool == "ringdl-before":
        # A second ringdl binary (`--before PATH`), run the same way: before/after rows in one run.
        label, argv = commands(argparse.Namespace(**{**vars(args), "ringdl": args.before}), "ringdl", urls, listfile,
                               out, ca, https)
        return (label.replace("ringdl", "ringdl (before)", 1), argv)
    if tool == "ringdl":
        tls = ["--ca-certificate", str(ca)] if https else []
        if args.ringdl_lists and ringdl_has_jobs(args.ringdl):
            return (f"ringdl -i -j {args.jobs}", [args.ringdl, "-q", "-i", str(listfile), "-j", str(args.jobs),
                                                  "-d", str(out), *tls])
        if args.ringdl_lists:
            return ("ringdl -i (one file at a time)", [args.ringdl, "-q", "-i", str(listfile), "-d", str(out), *tls])
        loop = 'o=$1; shift; for u; do "$RINGDL" -q $TLS -o "$o/${u##*/}" "$u" || exit 1; done'
        return ("ringdl, one process per file", ["sh", "-c", loop, "sh", str(out), *urls])
    b.die(f"unknown tool {tool}")
    return ("", [])


def machine_busy_s() -> float:
    """Seconds all CPUs spent busy since boot (/proc/stat `cpu` line: user, nice, system,
    irq, softirq; proc(5)), at the kernel's clock tick (10 ms at USER_HZ 100)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    hz = os.sysconf("SC_CLK_TCK")
    return sum(int(fields[i]) for i in (1, 2, 3, 6, 7)) / hz


def run_once(args, tool: str, urls, listfile, out: Path, ca, https, digests, srcdir, nginx,
             logfile: Path) -> dict:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    if not args.no_drop:
        b.drop_caches()
    for n in digests:
        b.pre_read(srcdir / n)
    label, argv = commands(args, tool, urls, listfile, out, ca, https)
    env = {**os.environ, "RINGDL": args.ringdl, "TLS": f"--ca-certificate {ca}" if https else ""}
    time_file = logfile.with_suffix(".time")
    full = [b.GNU_TIME, "-o", str(time_file), "-f", "%e %U %S %M"] + argv
    off = nginx.log_offset()
    busy0 = machine_busy_s()
    t0 = time.monotonic()
    with open(logfile, "w") as lf:
        lf.write("$ " + " ".join(argv[:12]) + (" …" if len(argv) > 12 else "") + "\n")
        lf.flush()
        # (A blocking wait(2), the timeout a timer's kill: `subprocess.run(timeout=)` polls
        # with sleeps of up to 50 ms, which rounded every wall time up to the next 50 ms.)
        p = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT, env=env)
        timer = threading.Timer(args.timeout, p.kill)
        timer.start()
        rc = p.wait()
        wall = time.monotonic() - t0
        busy = machine_busy_s() - busy0
        if not timer.is_alive():
            rc = "timeout"
        timer.cancel()
    server = nginx.log_since(off)
    r = {"tool": label, "exit": rc, "wall_s": round(wall, 4), "machine_cpu_s": round(busy, 3), "log": str(logfile),
         "requests": server["requests"], "connections": len({d["conn"] for d in server["detail"]}),
         "bytes_sent": server["bytes_sent"], "statuses": server["statuses"]}
    try:
        e, u, s, m = time_file.read_text().strip().splitlines()[-1].split()
        r.update({"user_s": float(u), "sys_s": float(s), "cpu_s": round(float(u) + float(s), 3),
                  "max_rss_kib": int(m)})
    except (OSError, ValueError):
        r["error"] = "cannot read GNU time's report"
    bad = [n for n, d in digests.items() if not (out / n).exists() or b.sha256_file(out / n) != d]
    if rc != 0:
        r["error"] = f"exit status {rc}"
    elif bad:
        r["error"] = f"{len(bad)} of {len(digests)} files missing or wrong (first: {bad[0]})"
    if args.defer_removal:
        # (Removed after the last run: ext4 without a journal keeps an inode deleted in the
        # last 60 s from reuse, and the next run's creates would walk past these.)
        out.rename(args.out_dir / ".removed" / f"{out.name}-{time.monotonic_ns()}")
    else:
        shutil.rmtree(out, ignore_errors=True)
    return r


def table(runs: list[dict]) -> str:
    rows, order = {}, []
    for r in runs:
        if r["tool"] not in rows:
            order.append(r["tool"])
        rows.setdefault(r["tool"], []).append(r)
    med = {}
    for t in order:
        ok = [r for r in rows[t] if "error" not in r]
        med[t] = {k: b.median([r.get(k) for r in ok]) for k in
                  ("wall_s", "cpu_s", "machine_cpu_s", "max_rss_kib", "connections", "requests")}
        med[t]["ok"], med[t]["runs"] = len(ok), len(rows[t])
    # (The ratios' base: the first curl row that leaves its bytes in the page cache, not
    # the one followed by a sync.)
    curl = next((t for t in order if t.startswith("curl") and not t.endswith("then sync -f")), None)
    out = ["| tool | wall s | CPU s | machine CPU s | max RSS MiB | server connections | requests | wall / curl "
           "| CPU / curl | machine CPU / curl |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for t in order:
        m = med[t]
        name = t if not t.startswith("ringdl") else f"**{t}**"
        if m["ok"] < m["runs"]:
            name += f" — **FAILED {m['runs'] - m['ok']}/{m['runs']}**"

        def ratio(k):
            c = med[curl][k] if curl else None
            return "—" if not c or m[k] is None else f"{m[k] / c:.2f}"

        rss = None if m["max_rss_kib"] is None else m["max_rss_kib"] / 1024
        out.append(f"| {name} | {b.f2(m['wall_s'])} | {b.f2(m['cpu_s'])} | {b.f2(m['machine_cpu_s'])} | "
                   f"{b.f2(rss, 1)} | {b.f2(m['connections'], 0)} | {b.f2(m['requests'], 0)} | {ratio('wall_s')} | "
                   f"{ratio('cpu_s')} | {ratio('machine_cpu_s')} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", type=b.csv_list(parse_set), default=[(100, 1 << 20)],
                    help="COUNTxSIZE sets, comma-separated (default 100x1M)")
    ap.add_argument("--proto", type=b.csv_list(str), default=["https"])
    ap.add_argument("--tools", type=b.csv_list(str), default=["ringdl", "curl", "wget", "aria2c"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--jobs", "-j", type=int, default=4, help="files in flight for ringdl and aria2c (default 4)")
    ap.add_argument("--ringdl", help="the ringdl binary (default: the static release build)")
    ap.add_argument("--before", help="a second ringdl binary, run as the tool `ringdl-before` (before/after)")
    ap.add_argument("--threads", type=b.csv_list(int), default=None,
                    help="ringdl rows at each of these --threads (e.g. 1,2); default: ringdl's own default")
    ap.add_argument("--work", type=Path, default=Path("/var/tmp/ringdl-bench/work"))
    ap.add_argument("--out-dir", type=Path, default=Path("/var/tmp/ringdl-bench/out"))
    ap.add_argument("--results", type=Path, default=Path("/var/tmp/ringdl-bench/results"))
    ap.add_argument("--port", type=int, default=18400)
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--no-drop", action="store_true", help="do not drop caches (not root)")
    ap.add_argument("--defer-removal", action="store_true",
                    help="keep every run's outputs until the last run ends, then remove them (the disk "
                         "must hold runs x tools x sets)")
    args = ap.parse_args()
    if os.geteuid() != 0 and not args.no_drop:
        b.die("needs root to drop caches (or --no-drop)")
    if not args.ringdl:
        cand = b.REPO / "target/x86_64-unknown-linux-musl/release/ringdl"
        args.ringdl = str(cand) if cand.exists() else None
    if "ringdl" in args.tools and not (args.ringdl and os.access(args.ringdl, os.X_OK)):
        b.die("no ringdl binary: build it or pass --ringdl PATH")
    args.ringdl = str(Path(args.ringdl).resolve()) if args.ringdl else ""
    if "ringdl-before" in args.tools and not (args.before and os.access(args.before, os.X_OK)):
        b.die("the tool ringdl-before needs --before PATH")
    args.before = str(Path(args.before).resolve()) if args.before else ""
    args.ringdl_lists = "ringdl" in args.tools and ringdl_has_lists(args.ringdl)
    if args.threads:
        # (One row per --threads for each ringdl binary, interleaved with the others.)
        args.tools = [f"{t}@{n}" if t.startswith("ringdl") else t for t in args.tools
                      for n in (args.threads if t.startswith("ringdl") else [None])]
    args.work, args.out_dir = args.work.resolve(), args.out_dir.resolve()
    www, tls, logs = args.work / "www", args.work / "tls", args.work / "logs"
    for d in (www, logs, args.out_dir, args.results):
        d.mkdir(parents=True, exist_ok=True)
    if args.defer_removal:
        (args.out_dir / ".removed").mkdir(exist_ok=True)
    b.ensure_tls(tls)
    sets = {s: ensure_set(www, *s) for s in args.sets}
    nginx = b.Nginx(args.work, www, tls, args.port, "12500k")
    nginx.start()
    stamp = dt.datetime.now().astimezone()
    m = b.machine_info(args.out_dir)
    md = [f"# ringdl many-files benchmark {stamp.isoformat(timespec='seconds')}", "",
          f"- machine: {m['nproc']} CPUs, {m['cpu_model']}, {m['mem_total_gib']} GiB, kernel {m['kernel']}; "
          f"output fs: {m['output_fs']}",
          f"- ringdl: {args.ringdl} (git {b.git_rev()}), lists: "
          f"{'-i' if args.ringdl_lists else 'no -i yet: one process per file'}",
          f"- method: caches dropped and sources read back before each run, tools interleaved "
          f"(rotated), {args.runs} runs, medians; CPU and RSS of the command with its children "
          f"(GNU time); machine CPU: all CPUs' busy time over the run (/proc/stat, includes nginx and the "
          f"kernel's flusher threads); connections and requests from nginx's log; every file SHA-256-checked"]
    report, failures = {"date": stamp.isoformat(), "machine": m, "sets": []}, 0
    try:
        for proto in args.proto:
            https = proto == "https"
            for (count, size), (srcdir, digests) in sets.items():
                rel = srcdir.relative_to(www)
                urls = [f"{proto}://127.0.0.1:{nginx.ports[proto]}/{rel}/{n}" for n in digests]
                listfile = args.work / f"list-{rel}-{proto}.txt"
                listfile.write_text("\n".join(urls) + "\n")
                b.log(f"set {count} x {b.fmt_size(size)} over {proto.upper()}")
                runs = []
                for i in range(args.runs):
                    k = i % len(args.tools)
                    for tool in args.tools[k:] + args.tools[:k]:
                        lf = logs / f"many-{rel}-{proto}-{tool}-{i}.log"
                        r = run_once(args, tool, urls, listfile, args.out_dir / f"many-{tool}", tls / "ca.pem", https,
                                     digests, srcdir, nginx, lf)
                        r["round"] = i
                        runs.append(r)
                        if "error" in r:
                            failures += 1
                            b.log(f"  FAILED {r['tool']}: {r['error']} (log {lf})")
                        else:
                            b.log(f"  {r['tool']:<32} wall {r['wall_s']:.2f} s  cpu {r['cpu_s']:.2f} s  "
                                  f"machine {r['machine_cpu_s']:.2f} s  "
                                  f"rss {r['max_rss_kib'] / 1024:.1f} MiB  {r['connections']} conn  "
                                  f"{r['requests']} req")
                title = f"{proto.upper()}, {count} files of {b.fmt_size(size)}, one origin, {args.runs} runs"
                md += ["", f"## {title}", "", table(runs)]
                report["sets"].append({"title": title, "runs": runs})
    finally:
        nginx.stop()
        if args.defer_removal:
            shutil.rmtree(args.out_dir / ".removed", ignore_errors=True)
    text = "\n".join(md) + "\n"
    base = args.results / f"many-{stamp.strftime('%Y%m%d-%H%M%S')}"
    base.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    base.with_suffix(".md").write_text(text)
    print(text)
    b.log(f"wrote {base}.json and {base}.md")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
