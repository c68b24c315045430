#!/usr/bin/env python3
"""Delta updates side by side: ringdl --seed against zckdl -s and zsync -i.

Issue 42's benchmark. An image of `--size` random bytes (old.img) and a new version
(new.img) with `--changed` of it (3 %) replaced by fresh random bytes in `--places` (20)
contiguous runs, one per twentieth of the image; then, as a release host would make them,
`zck -u new.img`, `zck -u old.img` and `zsyncmake -u new.img -o new.img.zsync new.img`.
All of it is made once under `<work>/www/delta-<size>/` and kept, with a manifest of the
runs' offsets and every file's SHA-256.

The same loopback nginx as bench.py (HTTP and HTTPS, the bench CA) serves them, and each
tool updates old -> new, interleaved (order rotated each round), `--runs` times:

- `ringdl -x N --seed old.img -o OUT URL/new.img.zck --json J` (a plain image as seed),
- `ringdl -x N --seed old.img.zck -o OUT URL/new.img.zck --json J` (an old .zck as seed),
- `zckdl -s old.img.zck URL/new.img.zck` (its output is new.img.zck itself, in its cwd),
- `ringdl -x N --seed old.img -o OUT URL/new.img.zsync --json J`,
- `zsync -q -i old.img -o OUT URL/new.img.zsync` (HTTP only: zsync 0.6.2 has no HTTPS).

zckdl has no CA option and libcurl reads no CA variable from the environment, so over
HTTPS it runs in a private mount namespace (`unshare -m`) where a copy of the system CA
bundle with the bench CA appended is bind-mounted over /etc/ssl/certs/ca-certificates.crt:
it verifies the server as it would in the field, and nothing changes outside its
namespace.

Before every run: the output directory removed, `sync`, `echo 3 > /proc/sys/vm/drop_caches`
(the seed is read cold, as on an appliance after boot), the served files read back (the
server side hot and equal for all) and `TOOL --version` (its executable cached). Per run,
as bench.py measures: wall, user + system CPU (wait4 of `/usr/bin/time TOOL`), peak RSS
(GNU time's report of the tool), page-cache growth, the bytes nginx sent
($body_bytes_sent summed) and its requests for that run (its access log), ringdl's own
`--json` delta record, and the output's SHA-256 (new.img for ringdl and zsync, the served
new.img.zck for zckdl): a wrong digest fails the run loudly and the exit status.

Medians; ratios: bytes fetched over the reference client's for the same format (zckdl for
.zck rows, zsync for .zsync rows), wall over the faster reference client's in the same
table. Python 3.11 standard library; root (drop_caches, the mount namespace).

    python3 bench/delta.py --size 1G --runs 5 --proto http,https
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as b  # noqa: E402  (nginx, CA, cache drop, machine facts, helpers)

GIB = 1 << 30
# Commands the benchmark needs -> Debian package.
NEEDS = {"nginx": "nginx-light", "openssl": "openssl", b.GNU_TIME: "time", "zck": "zchunk",
         "zckdl": "zchunk", "zsync": "zsync", "zsyncmake": "zsync", "sync": "coreutils",
         "unshare": "util-linux", "mount": "mount", "fincore": "util-linux",
         "findmnt": "util-linux"}
TOOLS = ("ringdl-zck", "ringdl-zck-zckseed", "zckdl", "ringdl-zsync", "zsync")
BEFORE = ("before-zck", "before-zck-zckseed", "before-zsync")
SYSTEM_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


# ---------------------------------------------------------------- fixtures


def run_tool(argv: list[str], cwd: Path) -> None:
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        b.die(f"{' '.join(argv)} (in {cwd}) failed: {(r.stdout + r.stderr).strip()[-2000:]}")


def ensure_images(www: Path, size: int, changed: float, places: int) -> dict:
    """old.img, new.img (`changed` of `size` replaced in `places` contiguous runs, one at a
    random offset within each 1/places of the image), new.img.zck and old.img.zck
    (`zck -u`), new.img.zsync (`zsyncmake -u new.img`), made once in www/delta-SIZE/;
    returns the manifest: dir, the runs, and each file's size and SHA-256."""
    d = www / f"delta-{b.size_tag(size)}"
    manifest = d / "manifest.json"
    names = ("old.img", "new.img", "old.img.zck", "new.img.zck", "new.img.zsync")
    run_len = int(size * changed / places)
    if manifest.exists():
        m = json.loads(manifest.read_text())
        if (m.get("size") == size and m.get("run_bytes") == run_len and len(m.get("runs", ())) == places
                and all((d / n).exists() and (d / n).stat().st_size == m["bytes"][n] for n in names)):
            m["dir"] = d
            return m
    seg = size // places
    if run_len < 1 or run_len > seg:
        b.die(f"--changed {changed} in {places} places does not fit {b.fmt_size(size)}")
    d.mkdir(parents=True, exist_ok=True)
    b.log(f"generating {d}/old.img ({b.fmt_size(size)} from /dev/urandom) and new.img "
          f"({places} runs of {run_len} bytes replaced)")
    rng = random.Random(size)  # placement reproducible per size; the bytes are random
    runs = [[i * seg + rng.randrange(seg - run_len + 1), run_len] for i in range(places)]
    with open("/dev/urandom", "rb", buffering=0) as rnd:
        with open(d / "old.img.tmp", "wb") as f:
            left = size
            while left:
                chunk = rnd.read(min(left, 1 << 20))
                f.write(chunk)
                left -= len(chunk)
        shutil.copyfile(d / "old.img.tmp", d / "new.img.tmp")
        with open(d / "new.img.tmp", "r+b") as f:
            for off, n in runs:
                f.seek(off)
                left = n
                while left:
                    chunk = rnd.read(min(left, 1 << 20))
                    f.write(chunk)
                    left -= len(chunk)
    for n in ("old.img", "new.img"):
        (d / f"{n}.tmp").rename(d / n)
        (d / f"{n}.zck").unlink(missing_ok=True)
    b.log("zck -u new.img; zck -u old.img; zsyncmake -u new.img -o new.img.zsync new.img")
    run_tool(["zck", "-u", "new.img"], d)
    run_tool(["zck", "-u", "old.img"], d)
    run_tool(["zsyncmake", "-u", "new.img", "-o", "new.img.zsync", "new.img"], d)
    m = {"size": size, "changed": changed, "places": places, "run_bytes": run_len, "runs": runs,
         "bytes": {n: (d / n).stat().st_size for n in names},
         "sha256": {n: b.sha256_file(d / n) for n in names}}
    manifest.write_text(json.dumps(m, indent=1) + "\n")
    m["dir"] = d
    return m


def ensure_bundle(tls: Path) -> Path:
    """The system CA bundle with the bench CA appended: what zckdl sees in its namespace."""
    bundle = tls / "bundle-with-bench-ca.crt"
    ca = (tls / "ca.pem").read_bytes()
    system = SYSTEM_BUNDLE.read_bytes() if SYSTEM_BUNDLE.exists() else b""
    bundle.write_bytes(system + b"\n" + ca)
    return bundle


# ---------------------------------------------------------------- rows


@dataclass
class Row:
    key: str  # --tools name
    name: str  # label in the table
    kind: str  # ringdl | ref
    fmt: str  # zck | zsync
    seed: str  # file name in the fixture dir
    index: str  # the URL's file name (new.img.zck or new.img.zsync)
    out: str  # the output's file name in the run's directory
    expect: str  # the fixture file the output must equal
    argv_fn: object  # (base_url, fixture_dir, out_dir, json_path) -> argv
    version_argv: list[str]
    https: bool = True  # can it run over HTTPS here
    wrap: list[str] | None = None  # prefix before GNU time (zckdl's CA namespace)
    note: str = ""


def build_rows(args, proto: str, ca: Path, bundle: Path) -> list[Row]:
    https = proto == "https"
    rows = []
    binaries = [("ringdl", args.ringdl, "")]
    if args.before:
        binaries.append(("before", args.before, " (before)"))
    for prefix, binary, tag in binaries:
        for fmt, seed, suffix in (("zck", "old.img", ""), ("zck", "old.img.zck", "-zckseed"),
                                  ("zsync", "old.img", "")):
            key = f"{prefix}-{fmt}{suffix}"
            if key not in args.tools:
                continue
            index = f"new.img.{fmt}"

            def argv(base, fx, out, js, binary=binary, seed=seed, index=index):
                a = [binary, "-x", str(args.connections), "--seed", str(fx / seed),
                     "-o", str(out / "new.img"), "--json", str(js)]
                if https:
                    a += ["--ca-certificate", str(ca)]
                return a + [f"{base}/{index}"]

            rows.append(Row(key, f"ringdl{tag} -x {args.connections} --seed {seed} ← .{fmt}", "ringdl",
                            fmt, seed, index, "new.img", "new.img", argv, [binary, "--version"]))
    if "zckdl" in args.tools:
        def argv(base, fx, out, js):
            return ["zckdl", "-q", "-s", str(fx / "old.img.zck"), f"{base}/new.img.zck"]

        note = "output: new.img.zck"
        wrap = None
        if https:
            wrap = ["unshare", "-m", "sh", "-c",
                    f'mount --bind "$0" {SYSTEM_BUNDLE} && exec "$@"', str(bundle)]
            note += "; HTTPS: bench CA bind-mounted over the system bundle (unshare -m)"
        rows.append(Row("zckdl", "zckdl -s old.img.zck ← .zck", "ref", "zck", "old.img.zck",
                        "new.img.zck", "new.img.zck", "new.img.zck", argv, ["zckdl", "--version"],
                        wrap=wrap, note=note))
    if "zsync" in args.tools:
        def argv(base, fx, out, js):
            return ["zsync", "-q", "-i", str(fx / "old.img"), "-o", str(out / "new.img"),
                    f"{base}/new.img.zsync"]

        rows.append(Row("zsync", "zsync -i old.img ← .zsync", "ref", "zsync", "old.img", "new.img.zsync",
                        "new.img", "new.img", argv, ["zsync", "-V"], https=False,
                        note="HTTP only: zsync 0.6.2 has no HTTPS"))
    return rows


# ---------------------------------------------------------------- one run


def ringdl_delta(js: Path) -> dict | None:
    try:
        return json.loads(js.read_text()).get("delta")
    except (OSError, ValueError, AttributeError):
        return None


def spawn_timed(args, full: list[str], cwd: Path, log_path: Path, timeout: int):
    """Runs `full` in its own session, stdout+stderr to the log; (exit code or None on
    timeout, rusage of it and its children, wall seconds)."""
    def on_alarm(signum, frame):
        raise TimeoutError

    old = signal.signal(signal.SIGALRM, on_alarm)
    with open(log_path, "a") as lf:
        t0 = time.monotonic()
        p = subprocess.Popen(full, cwd=cwd, stdin=subprocess.DEVNULL, stdout=lf,
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            signal.alarm(timeout)
            _, status, ru = os.wait4(p.pid, 0)
            signal.alarm(0)
            rc = os.waitstatus_to_exitcode(status)
        except BaseException as e:  # TimeoutError or KeyboardInterrupt
            signal.alarm(0)
            os.killpg(p.pid, signal.SIGKILL)
            _, status, ru = os.wait4(p.pid, 0)
            p.returncode = -9
            if not isinstance(e, TimeoutError):
                raise
            rc = None
        finally:
            signal.signal(signal.SIGALRM, old)
        wall = time.monotonic() - t0
    p.returncode = -9 if rc is None else rc  # reaped by wait4 already
    return rc, ru, wall


def run_once(args, row: Row, base: str, fx: dict, nginx: b.Nginx, log_path: Path) -> dict:
    d = fx["dir"]
    out = args.out_dir / f"delta-{row.key}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    js = log_path.with_suffix(".json")
    js.unlink(missing_ok=True)
    if not args.no_drop:
        b.drop_caches()
    served = [row.index] + (["new.img"] if row.fmt == "zsync" else [])
    for n in served:
        b.pre_read(d / n)  # the server side hot and equal for all
    subprocess.run(row.version_argv, capture_output=True)
    subprocess.run([b.GNU_TIME, "--version"], capture_output=True)
    if row.wrap:
        subprocess.run(["unshare", "--version"], capture_output=True)
        subprocess.run(["mount", "--version"], capture_output=True)
    argv = row.argv_fn(base, d, out, js)
    time_file = log_path.with_suffix(".time")
    full = (row.wrap or []) + [b.GNU_TIME, "-o", str(time_file), "-f", "%e %U %S %M %R %F %x"] + argv
    log_path.write_text("$ " + " ".join(full) + "\n")
    off = nginx.log_offset()
    load = b.loadavg()
    cached0 = b.meminfo()["Cached"]
    busy0 = b.system_busy_s()
    rc, ru, wall = spawn_timed(args, full, out, log_path, args.timeout_for(fx["size"]))
    busy = b.system_busy_s() - busy0
    cached1 = b.meminfo()["Cached"]
    target = out / row.out
    out_res = b.resident_mib(target)
    seed_res = b.resident_mib(d / row.seed)
    t1 = time.monotonic()
    subprocess.run(["sync"], check=True)
    sync_s = time.monotonic() - t1
    server = nginx.log_since(off)
    server.pop("detail", None)
    r = {"tool": row.name, "key": row.key, "argv": full, "exit": rc, "wall_s": round(wall, 4),
         "user_s": round(ru.ru_utime, 4), "sys_s": round(ru.ru_stime, 4),
         "cpu_s": round(ru.ru_utime + ru.ru_stime, 4), "system_busy_s": round(busy, 2),
         "cache_growth_mib": round((cached1 - cached0) / 1024, 1), "output_cached_mib": out_res,
         "seed_cached_mib": seed_res,
         "sync_after_s": round(sync_s, 3), "loadavg_before": load, "log": str(log_path),
         "bytes_sent": server["bytes_sent"], "requests": server["requests"], "server": server}
    try:
        last = time_file.read_text().strip().splitlines()[-1].split()
        r.update({"max_rss_kib": int(last[3]), "minor_faults": int(last[4]),
                  "major_faults": int(last[5])})
    except (OSError, IndexError, ValueError) as e:
        r["error"] = f"cannot read GNU time output: {e}"
    if row.kind == "ringdl":
        r["ringdl_delta"] = ringdl_delta(js)
        r["ringdl_lines"] = re.findall(r"ringdl: (?:delta|done).*", log_path.read_text(errors="replace"))
    problems = [r["error"]] if "error" in r else []
    if rc is None:
        problems.append(f"TIMEOUT after {args.timeout_for(fx['size'])} s (killed)")
    elif rc != 0:
        problems.append(f"exit status {rc}")
    want_size, want = fx["bytes"][row.expect], fx["sha256"][row.expect]
    if not target.exists():
        problems.append(f"no output {target.name}")
    elif target.stat().st_size != want_size:
        problems.append(f"{target.name}: size {target.stat().st_size} != {want_size}")
    else:
        got = b.sha256_file(target)
        r["sha256"] = got
        if got != want:
            problems.append(f"{target.name}: SHA-256 MISMATCH {got} != {want} ({row.expect})")
    if problems:
        r["error"] = "; ".join(problems)
    shutil.rmtree(out, ignore_errors=True)
    return r


# ---------------------------------------------------------------- report


def summarize(runs: list[dict], rows: list[Row], fx: dict) -> list[dict]:
    out = []
    for row in rows:
        mine = [r for r in runs if r["key"] == row.key]
        ok = [r for r in mine if "error" not in r]
        s = {"tool": row.name, "key": row.key, "kind": row.kind, "fmt": row.fmt, "seed": row.seed,
             "note": row.note, "runs": len(mine), "ok": len(ok),
             "seed_bytes": fx["bytes"][row.seed]}
        for k in ("wall_s", "user_s", "sys_s", "cpu_s", "system_busy_s", "max_rss_kib",
                  "cache_growth_mib", "seed_cached_mib", "output_cached_mib", "sync_after_s",
                  "bytes_sent", "requests"):
            s[k] = b.median([r.get(k) for r in ok])
        s["wall_all_s"] = [r["wall_s"] for r in ok]
        s["cpu_per_gib_seed_s"] = (None if s["cpu_s"] is None
                                   else round(s["cpu_s"] / (s["seed_bytes"] / GIB), 3))
        own = [r["ringdl_delta"] for r in ok if r.get("ringdl_delta")]
        if own:
            s["ringdl_delta"] = {k: b.median([o.get(k) for o in own]) for k in
                                 ("fetched_bytes", "requests", "reused_bytes", "full_bytes")}
        out.append(s)
    return out


def add_ratios(configs: list[dict]) -> None:
    """Bytes over the same format's reference client (in this table; for zsync over HTTPS,
    the HTTP table's: zsync has no HTTPS, and the bytes do not depend on the protocol) and
    wall over the faster reference client in this table."""
    refs = {}
    for c in configs:
        for s in c["summary"]:
            if s["kind"] == "ref" and s["bytes_sent"] is not None:
                refs[(c["proto"], c["size"], s["fmt"])] = s
    for c in configs:
        here = [s for s in c["summary"] if s["kind"] == "ref" and s["wall_s"] is not None]
        fastest = min(here, key=lambda s: s["wall_s"]) if here else None
        for s in c["summary"]:
            ref = refs.get((c["proto"], c["size"], s["fmt"]))
            other = "http" if c["proto"] == "https" else "https"
            if ref is None and (other, c["size"], s["fmt"]) in refs:
                ref = refs[(other, c["size"], s["fmt"])]
                s["bytes_ref_other_proto"] = other
            if ref and s["bytes_sent"] is not None and ref["bytes_sent"]:
                s["bytes_ratio_ref"] = round(s["bytes_sent"] / ref["bytes_sent"], 3)
                s["bytes_ref"] = ref["tool"]
            if fastest and s["wall_s"] is not None:
                s["wall_ratio_faster_ref"] = round(s["wall_s"] / fastest["wall_s"], 3)
                s["wall_ref"] = fastest["tool"]
        c["faster_ref"] = fastest["tool"] if fastest else None


def markdown_table(c: dict) -> str:
    out = ["| tool | wall s | CPU s | CPU s / GiB seed | max RSS MiB | cache growth MiB | "
           "seed / output cached MiB | fetched MiB | requests | fetched / ref | wall / faster ref |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in c["summary"]:
        name = f"**{s['tool']}**" if s["kind"] == "ringdl" else s["tool"]
        if s["note"]:
            name += f" ({s['note']})"
        if s["runs"] == 0:
            out.append(f"| {name} | — | — | — | — | — | — | — | — | — | — |")
            continue
        if s["ok"] < s["runs"]:
            name += f" — **FAILED {s['runs'] - s['ok']}/{s['runs']}**"
        rss = None if s["max_rss_kib"] is None else s["max_rss_kib"] / 1024
        mib = None if s["bytes_sent"] is None else s["bytes_sent"] / (1 << 20)
        br = b.f2(s.get("bytes_ratio_ref"), 3)
        if s.get("bytes_ref_other_proto"):
            br += f" (vs {s['bytes_ref_other_proto'].upper()})"
        out.append(f"| {name} | {b.f2(s['wall_s'])} | {b.f2(s['cpu_s'])} | {b.f2(s['cpu_per_gib_seed_s'])} | "
                   f"{b.f2(rss, 1)} | {b.f2(s['cache_growth_mib'], 0)} | "
                   f"{b.f2(s['seed_cached_mib'], 0)} / {b.f2(s['output_cached_mib'], 0)} | {b.f2(mib)} | "
                   f"{b.f2(s['requests'], 0)} | {br} | {b.f2(s.get('wall_ratio_faster_ref'))} |")
    own = [s for s in c["summary"] if s.get("ringdl_delta")]
    if own:
        out += ["", "ringdl's own `--json` delta record (medians; fetched above is nginx's count):", ""]
        for s in own:
            o = s["ringdl_delta"]
            out.append(f"- {s['tool']}: fetched_bytes {b.f2(o['fetched_bytes'], 0)}, requests "
                       f"{b.f2(o['requests'], 0)}, reused_bytes {b.f2(o['reused_bytes'], 0)}, full_bytes "
                       f"{b.f2(o['full_bytes'], 0)}" + ("" if o["fetched_bytes"] == s["bytes_sent"] else
                                                      f" — nginx sent {b.f2(s['bytes_sent'], 0)} B in "
                                                      f"{b.f2(s['requests'], 0)} requests"))
    return "\n".join(out)


def method_text(args) -> str:
    drop = "`sync; echo 3 > /proc/sys/vm/drop_caches`" if not args.no_drop else "NO cache drop (--no-drop)"
    return (f"Loopback nginx (bench.py's: HTTP and HTTPS, TLS 1.2+1.3, sendfile, 2 workers) serving the "
            f"fixtures from {args.work}/www/delta-SIZE/; outputs to {args.out_dir}, removed after each run. "
            f"Tools interleaved (order rotated each round), {args.runs} runs each. Before every run: {drop} "
            f"(seeds cold), the served files read back (server hot), `TOOL --version`. Wall: monotonic "
            f"clock around the spawn; CPU: user+sys from wait4 of `/usr/bin/time TOOL` (for zckdl over "
            f"HTTPS also its `unshare`/`sh`/`mount` wrapper, a few ms); max RSS: GNU time's report of the "
            f"tool; cache growth: `Cached` after minus before; fetched and requests: nginx's access log "
            f"for the run ($body_bytes_sent summed, multipart framing included); seed / output cached: "
            f"their resident pages right after exit (fincore; the seed was cold); CPU / GiB seed: CPU "
            f"over the seed's size. Every output SHA-256-checked. Medians. fetched / ref: over the same "
            f"format's reference client (zckdl for .zck, zsync for .zsync); wall / faster ref: over the "
            f"faster reference client's median wall in the same table.")


# ---------------------------------------------------------------- main


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=b.csv_list(b.parse_size), default=[GIB],
                    help="image size(s), comma-separated, e.g. 256M,1G (default 1G)")
    ap.add_argument("--changed", type=float, default=0.03,
                    help="fraction of the image replaced in the new version (default 0.03)")
    ap.add_argument("--places", type=int, default=20, help="contiguous runs it is replaced in (default 20)")
    ap.add_argument("--connections", "-x", type=int, default=4, help="ringdl's -x (default 4)")
    ap.add_argument("--proto", type=b.csv_list(str), default=["http", "https"],
                    help="http, https or both (default http,https; zsync runs over HTTP only)")
    ap.add_argument("--tools", type=b.csv_list(str), default=list(TOOLS),
                    help="rows to run (default all): " + ",".join(TOOLS + BEFORE)
                    + " (before-*: with --before, added by default)")
    ap.add_argument("--runs", type=int, default=5, help="runs per row and configuration (default 5)")
    ap.add_argument("--ringdl", default=os.environ.get("RINGDL"),
                    help="ringdl binary (default: $RINGDL, else target/release/ringdl)")
    ap.add_argument("--before", help="a second ringdl binary: its rows (before-*) run interleaved "
                                     "with the others, a before/after in one run")
    ap.add_argument("--work", type=Path, default=Path("/var/tmp/ringdl-bench/work"),
                    help="fixtures (kept), TLS files, nginx, logs (default /var/tmp/ringdl-bench/work)")
    ap.add_argument("--out-dir", type=Path, default=Path("/var/tmp/ringdl-bench/out"),
                    help="where outputs land (default /var/tmp/ringdl-bench/out)")
    ap.add_argument("--results", type=Path, default=Path("/var/tmp/ringdl-bench/results"))
    ap.add_argument("--port", type=int, default=18600, help="first port to try for nginx (default 18600)")
    ap.add_argument("--timeout", type=int, default=0,
                    help="seconds per run before it is killed and failed (0 = 60 + 1 per 2 MiB of image)")
    ap.add_argument("--no-drop", action="store_true", help="do not drop caches (numbers not comparable)")
    ap.add_argument("--label", default="", help="free text stored in the report header")
    args = ap.parse_args()
    args.timeout_for = lambda size: args.timeout or 60 + size // (2 << 20)
    if args.before and args.tools == list(TOOLS):
        args.tools += list(BEFORE)
    for t in args.tools:
        if t not in TOOLS + BEFORE:
            b.die(f"unknown tool {t!r} (known: {', '.join(TOOLS + BEFORE)})")
    for p in args.proto:
        if p not in ("http", "https"):
            b.die(f"unknown proto {p!r}")
    if args.runs < 1:
        b.die("--runs must be >= 1")
    if os.geteuid() != 0:
        b.die("needs root: the page cache is dropped before every run, and zckdl's HTTPS runs "
              "in a mount namespace")
    need = {"nginx", "openssl", b.GNU_TIME, "sync", "zck", "zsyncmake", "fincore", "findmnt"}
    need |= {t for t in args.tools if t in ("zckdl", "zsync")}
    if "zckdl" in args.tools and "https" in args.proto:
        need |= {"unshare", "mount"}
    missing = sorted({NEEDS[c] for c in need if not b.find_cmd(c)})
    if missing:
        b.die(f"missing: {' '.join(missing)}\n  install: apt-get install -y {' '.join(missing)}")
    if not args.ringdl:
        cand = [b.REPO / "target/release/ringdl", b.REPO / "target/x86_64-unknown-linux-musl/release/ringdl"]
        args.ringdl = next((str(c) for c in cand if c.exists()), None)
    if not args.ringdl or not os.access(args.ringdl, os.X_OK):
        b.die("no ringdl binary: build it (cargo build --release) or pass --ringdl PATH")
    args.ringdl = str(Path(args.ringdl).resolve())
    if any(t.startswith("before") for t in args.tools):
        if not (args.before and os.access(args.before, os.X_OK)):
            b.die("the before-* rows need --before PATH")
        args.before = str(Path(args.before).resolve())
    args.work, args.out_dir = args.work.resolve(), args.out_dir.resolve()
    return args


def header(args) -> dict:
    stamp = dt.datetime.now().astimezone()
    bin_info = lambda p: {"path": p, "version": b.tool_version([p, "--version"]),  # noqa: E731
                          "binary_mtime": dt.datetime.fromtimestamp(os.stat(p).st_mtime)
                          .astimezone().isoformat(timespec="seconds")}
    return {
        "date": stamp.isoformat(timespec="seconds"), "_stamp": stamp,
        "machine": b.machine_info(args.out_dir),
        "ringdl": {**bin_info(args.ringdl), "git": b.git_rev()},
        "before": bin_info(args.before) if args.before else None,
        "versions": {t: b.tool_version(a) for t, a in {
            "zck": ["zck", "--version"], "zckdl": ["zckdl", "--version"], "zsync": ["zsync", "-V"],
            "zsyncmake": ["zsyncmake", "-V"], "nginx": [b.find_cmd("nginx") or "nginx", "-v"],
            "curl (zckdl's libcurl)": ["curl", "--version"]}.items()},
        "method": method_text(args), "label": args.label, "argv": sys.argv,
        "loadavg_start": Path("/proc/loadavg").read_text().split()[:3],
    }


def run_config(args, c: dict, rows: list[Row], fx: dict, nginx: b.Nginx, logs: Path) -> int:
    """`--runs` rounds of every row, order rotated; returns the failures."""
    failures, runs = 0, c["runs_detail"]
    for i in range(args.runs):
        k = i % len(rows)
        for row in rows[k:] + rows[:k]:
            lp = logs / f"delta-{c['proto']}-{b.size_tag(c['size'])}-{row.key}-{i}.log"
            r = run_once(args, row, c["base"], fx, nginx, lp)
            r["round"] = i
            runs.append(r)
            if "error" in r:
                failures += 1
                print(f"\n!!!!! FAILED: {row.name} run {i}: {r['error']}\n!!!!! log: {lp}\n"
                      + "".join(lp.read_text(errors="replace").splitlines(True)[-15:]),
                      file=sys.stderr, flush=True)
            else:
                own = r.get("ringdl_delta") or {}
                own_txt = (f"  (ringdl: fetched {own.get('fetched_bytes')} in {own.get('requests')} req, "
                           f"reused {own.get('reused_bytes')})" if own else "")
                b.log(f"  {row.name:<44} wall {r['wall_s']:6.2f} s  cpu {r['cpu_s']:6.2f} s  rss "
                      f"{r.get('max_rss_kib', 0) / 1024:6.1f} MiB  cache {r['cache_growth_mib']:+7.0f} MiB  "
                      f"sent {r['bytes_sent']} B in {r['requests']} req{own_txt}  load {r['loadavg_before']}")
    return failures


def main() -> int:
    args = parse_args()
    www, tls, logs = args.work / "www", args.work / "tls", args.work / "logs"
    for d in (www, logs, args.out_dir, args.results):
        d.mkdir(parents=True, exist_ok=True)
    b.ensure_tls(tls)
    ca, bundle = tls / "ca.pem", ensure_bundle(tls)
    fixtures = {s: ensure_images(www, s, args.changed, args.places) for s in args.size}
    h = header(args)
    stamp = h.pop("_stamp")
    nginx = b.Nginx(args.work, www, tls, args.port, "12500k")
    nginx.start()
    configs, failures = [], 0
    try:
        for proto in args.proto:
            for size in args.size:
                fx = fixtures[size]
                rows = build_rows(args, proto, ca, bundle)
                skipped = [r for r in rows if proto == "https" and not r.https]
                rows = [r for r in rows if r not in skipped]
                rel = fx["dir"].relative_to(www)
                c = {"proto": proto, "size": size, "runs": args.runs,
                     "base": f"{proto}://127.0.0.1:{nginx.ports[proto]}/{rel}", "runs_detail": [],
                     "fixture": {k: v for k, v in fx.items() if k != "dir"}}
                configs.append(c)
                b.log(f"config: {proto.upper()}, {b.fmt_size(size)}, {args.runs} runs"
                      + (f" (not over HTTPS: {', '.join(r.name for r in skipped)})" if skipped else ""))
                c["_rows"] = rows + skipped
                failures += run_config(args, c, rows, fx, nginx, logs)
    except KeyboardInterrupt:
        b.log("interrupted: writing what was measured")
        failures += 1
    finally:
        nginx.stop()
    for c in configs:
        c["summary"] = summarize(c["runs_detail"], c.pop("_rows"), fixtures[c["size"]])
    add_ratios(configs)
    h["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    report = {**h, "configs": configs, "failures": failures}
    m = h["machine"]
    md = [f"# ringdl delta benchmark {h['date']}", "",
          f"- machine: {m['nproc']} CPUs, {m['cpu_model']}, {m['mem_total_gib']} GiB, kernel {m['kernel']}; "
          f"output fs: {m['output_fs']}",
          f"- ringdl: {h['ringdl']['path']}, {h['ringdl']['version']}, built {h['ringdl']['binary_mtime']} "
          f"(tree now: git {h['ringdl']['git']})"
          + (f"; before: {h['before']['path']}, built {h['before']['binary_mtime']}" if h["before"] else ""),
          "- others: " + "; ".join(f"{k}: {v}" for k, v in h["versions"].items()),
          f"- load average: start {' '.join(h['loadavg_start'])}, end {' '.join(h['loadavg_end'])}",
          f"- method: {h['method']}"]
    if args.label:
        md.append(f"- label: {args.label}")
    for c in configs:
        fx = c["fixture"]
        md += ["", f"## {c['proto'].upper()}, {b.fmt_size(c['size'])} image, {fx['places']} runs of "
                   f"{fx['run_bytes']} bytes changed ({fx['changed']:.0%}), {c['runs']} runs", "",
               f"Seeds: old.img {fx['bytes']['old.img']} B, old.img.zck {fx['bytes']['old.img.zck']} B; "
               f"served: new.img.zck {fx['bytes']['new.img.zck']} B, new.img.zsync "
               f"{fx['bytes']['new.img.zsync']} B. Faster reference client here: {c['faster_ref'] or '—'}.",
               "", markdown_table(c)]
    if failures:
        md += ["", f"**{failures} run(s) FAILED** — see the logs named in the JSON."]
    text = "\n".join(md) + "\n"
    base = args.results / f"delta-{stamp.strftime('%Y%m%d-%H%M%S')}"
    base.with_suffix(".json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    base.with_suffix(".md").write_text(text)
    print(text)
    b.log(f"wrote {base}.json and {base}.md")
    if failures:
        print(f"error: {failures} run(s) FAILED", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
