//! `--threads N`: reactors on N threads, each with its own ring, pools and connections,
//! sharing one file's ranges by messages (src/event/threads.rs). Bytes compared by
//! SHA-256 against real nginx and the fault server; the other reactors' work is seen in
//! `-v`'s "N reactors: K parts to the other thread(s), B bytes landed there".

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::fault::{Close, Fault, FaultServer, When};
use crate::util::{self, HANG, MIB, TestDir, XorShift, exit, nginx, part_path, sha256_file};

/// The "N reactors: K parts …, B bytes landed there" line of `-v`: (N, K, B).
fn reactors_line(stderr: &str) -> Option<(usize, usize, u64)> {
    stderr.lines().find_map(|l| {
        let rest = l.strip_prefix("ringdl: ")?;
        let (n, rest) = rest
            .split_once(" reactors: ")
            .or_else(|| rest.split_once(" reactor: "))?;
        // (A file among several in flight: its notes start with its name.)
        let n = n.rsplit(": ").next()?;
        // ("K part(s) to the other thread" or "to other threads".)
        let (k, rest) = rest.split_once(" parts to ").or_else(|| rest.split_once(" part to "))?;
        let (_, rest) = rest.split_once("other thread")?;
        let rest = rest.trim_start_matches('s').strip_prefix(", ")?;
        let (b, _) = rest.split_once(" bytes landed there")?;
        Some((n.parse().ok()?, k.parse().ok()?, b.parse().ok()?))
    })
}

/// The `range START END` lines of a control file (src/output/resume.rs).
fn control_ranges(path: &Path) -> Vec<(u64, u64)> {
    let Ok(text) = fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| l.strip_prefix("range "))
        .filter_map(|r| {
            let (a, b) = r.split_once(' ')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect()
}

/// Bytes of `ranges` within `[from, to)`.
fn bytes_within(ranges: &[(u64, u64)], from: u64, to: u64) -> u64 {
    ranges.iter().map(|&(a, b)| b.min(to).saturating_sub(a.max(from))).sum()
}

/// The `-c` run's summary says it fetched at most the `size - kept` bytes the control
/// file did not name ("done: N bytes (M fetched now, the rest resumed)").
#[track_caller]
fn assert_fetched_only_the_rest(summary: &str, size: u64, kept: u64) {
    let fetched: u64 = summary
        .split_once(" bytes (")
        .and_then(|(_, r)| r.split_once(" fetched now")?.0.parse().ok())
        .unwrap_or_else(|| panic!("nothing resumed: {summary}"));
    assert!(fetched <= size - kept, "kept {kept}, yet fetched {fetched}: {summary}");
}

/// Every range the control file names holds the source's bytes in the `.part`: the
/// control file names only what landed, whichever reactor wrote it.
#[track_caller]
fn assert_ranges_hold_the_source(ranges: &[(u64, u64)], part: &Path, source: &Path) {
    let got = fs::read(part).unwrap_or_else(|e| panic!("{}: {e}", part.display()));
    let want = fs::read(source).unwrap();
    for &(a, b) in ranges {
        let (a, b) = (a as usize, b as usize);
        assert!(b <= got.len(), "range {a}-{b} past the .part's {} bytes", got.len());
        assert!(
            got[a..b] == want[a..b],
            "the control file names bytes {a}-{b}, but the .part does not hold them"
        );
    }
}

/// Exact bytes at `--threads 1, 2, 4` with `-x 1, 4, 16`, over HTTP and HTTPS (the epoll
/// pass of scripts/test.sh runs it on epoll too). With more than one reactor and
/// connection, the others fetched parts and landed bytes; with one of either, none did.
#[test]
fn every_thread_and_connection_count_lands_exact_bytes() {
    let n = nginx();
    let f = n.file(16 * MIB);
    for https in [false, true] {
        for threads in [1usize, 2, 4] {
            for x in [1usize, 4, 16] {
                let dir = TestDir::new("threads-matrix");
                let out = dir.join("out.bin");
                let mut cmd = dir.ringdl();
                cmd.args(["-v", "--threads", &threads.to_string(), "-x", &x.to_string()])
                    .args(["--min-split-size", "1M", "-o"])
                    .arg(&out);
                if https {
                    cmd.arg("--ca-certificate").arg(n.ca_pem()).arg(n.https_url(&f.name));
                } else {
                    cmd.arg(n.http_url(&f.name));
                }
                let o = cmd.run();
                let what = format!("https {https}, --threads {threads}, -x {x}");
                o.assert_success();
                let err = o.stderr_text();
                assert_eq!(sha256_file(&out), f.sha256, "{what}: WRONG BYTES\n{err}");
                assert!(!part_path(&out).exists(), "{what}: .part left");
                let reactors = threads.min(x);
                match reactors_line(&err) {
                    Some((r, parts, bytes)) => {
                        assert!(reactors > 1, "{what}: spread over {r} reactors\n{err}");
                        assert_eq!(r, reactors, "{what}\n{err}");
                        assert!(parts >= 1 && bytes > 0 && bytes < f.size, "{what}\n{err}");
                    }
                    None => assert!(reactors == 1, "{what}: no other reactor fetched a part\n{err}"),
                }
            }
        }
    }
}

/// A list of `files` (URL, output name) as `-i` reads it.
fn write_list(dir: &TestDir, files: &[(String, String)]) -> std::path::PathBuf {
    let list = dir.join("list.txt");
    let text: String = files.iter().map(|(u, o)| format!("{u}\n  out={o}\n")).collect();
    fs::write(&list, text).unwrap();
    list
}

/// `run.json`'s files: (output name, reactor, bytes fetched).
fn placed(dir: &TestDir) -> Vec<(String, u64, u64)> {
    let text = fs::read_to_string(dir.join("run.json")).expect("run.json");
    let j: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    j["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no files: {text}"))
        .iter()
        .map(|f| {
            let out = f["output"].as_str().unwrap_or_default();
            let name = Path::new(out).file_name().map(|n| n.to_string_lossy().into_owned());
            (
                name.unwrap_or_default(),
                f["reactor"].as_u64().unwrap_or_else(|| panic!("no reactor: {f}")),
                f["fetched"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// A list at `--threads 4 -j 4`, over HTTP and HTTPS: whole files are placed on the
/// reactors (the first four one on each: `--json`'s `reactor` is 0, 1, 2 and 3), each
/// with its own connections, and every file lands exact.
#[test]
fn a_list_places_its_files_on_every_reactor() {
    let n = nginx();
    let sizes = [16 * MIB, 4 * MIB, MIB + 1, 4097, 16 * MIB, 4 * MIB, MIB + 1, 4096];
    for https in [false, true] {
        let dir = TestDir::new("threads-place");
        let files: Vec<(String, String)> = sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| {
                let f = n.file(size);
                let url = if https {
                    n.https_url(&f.name)
                } else {
                    n.http_url(&f.name)
                };
                (url, format!("f{i}.bin"))
            })
            .collect();
        let list = write_list(&dir, &files);
        let o = dir
            .ringdl()
            .args(["-v", "--threads", "4", "-j", "4", "-x", "4", "--json", "run.json", "-d"])
            .arg(dir.path())
            .arg("--ca-certificate")
            .arg(n.ca_pem())
            .arg("-i")
            .arg(&list)
            .run();
        o.assert_success();
        let err = o.stderr_text();
        for (i, &size) in sizes.iter().enumerate() {
            let out = dir.join(format!("f{i}.bin"));
            assert_eq!(sha256_file(&out), n.file(size).sha256, "https {https}: f{i}.bin\n{err}");
        }
        let on: std::collections::BTreeSet<u64> = placed(&dir).iter().map(|p| p.1).collect();
        assert_eq!(
            on,
            (0..4).collect(),
            "https {https}: the files ran on reactors {on:?}\n{err}"
        );
    }
}

/// Starts a list of four paced 100 MiB files at `--threads 4 -j 4 -x 2` (one on each
/// reactor: see `a_list_places_its_files_on_every_reactor`) and stops it with `signal`
/// once every file's control file names at least 1 MiB. Gives back the run and the
/// outputs.
fn stop_paced_list(dir: &TestDir, signal: &str) -> (util::Output, Vec<std::path::PathBuf>) {
    let n = nginx();
    let f = n.file(100 * MIB);
    let files: Vec<(String, String)> = (0..4).map(|i| (n.paced_url(&f.name), format!("f{i}.bin"))).collect();
    let list = write_list(dir, &files);
    let outs: Vec<_> = (0..4).map(|i| dir.join(format!("f{i}.bin"))).collect();
    let controls: Vec<_> = (0..4).map(|i| dir.join(format!("f{i}.bin.part.ringdl"))).collect();
    let o = dir
        .ringdl()
        .args([
            "--threads",
            "4",
            "-j",
            "4",
            "-x",
            "2",
            "--min-split-size",
            "1M",
            "--json",
            "run.json",
            "-d",
        ])
        .arg(dir.path())
        .arg("-i")
        .arg(&list)
        .run_with(|pid| {
            let t = Instant::now();
            let enough = || {
                controls
                    .iter()
                    .all(|c| bytes_within(&control_ranges(c), 0, u64::MAX) >= MIB)
            };
            while !enough() && t.elapsed() < HANG {
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = Command::new("kill").args([signal, &pid.to_string()]).status();
        });
    (o, outs)
}

/// What each stopped file's control file names (its bytes checked against the source),
/// then `-c` of the same list: every file exact, each fetching only what its control file
/// did not name.
fn resume_list_exactly(dir: &TestDir, outs: &[std::path::PathBuf], stopped: &str) {
    let n = nginx();
    let f = n.file(100 * MIB);
    let mut kept = Vec::new();
    for out in outs {
        let control = std::path::PathBuf::from(format!("{}.part.ringdl", out.display()));
        let ranges = control_ranges(&control);
        let k: u64 = ranges.iter().map(|r| r.1 - r.0).sum();
        assert!(k >= MIB, "{}: {ranges:?}\n{stopped}", out.display());
        assert_ranges_hold_the_source(&ranges, &part_path(out), &n.www().join(&f.name));
        kept.push(k);
    }
    let files: Vec<(String, String)> = (0..4).map(|i| (n.http_url(&f.name), format!("f{i}.bin"))).collect();
    let list = write_list(dir, &files);
    let o = dir
        .ringdl()
        .args(["-c", "--threads", "4", "-j", "4", "-x", "2", "--json", "run.json", "-d"])
        .arg(dir.path())
        .arg("-i")
        .arg(&list)
        .run();
    o.assert_success();
    let err = o.stderr_text();
    for out in outs {
        assert_eq!(sha256_file(out), f.sha256, "{}\n{err}", out.display());
    }
    for (name, _, fetched) in placed(dir) {
        let i: usize = name.trim_start_matches('f').trim_end_matches(".bin").parse().unwrap();
        assert!(
            fetched <= f.size - kept[i],
            "{name}: kept {}, yet fetched {fetched}\n{err}",
            kept[i]
        );
    }
}

/// SIGINT while a list's files run on four reactors: exit 8, the run's line names file 1,
/// each file (three of them on the helpers: `--json`'s `reactor`) keeps a `.part` and a
/// control file naming only bytes it holds, and `-c` fetches only the rest of each, to
/// the exact bytes.
#[test]
fn sigint_mid_list_with_threads_leaves_every_file_resumable() {
    let dir = TestDir::new("threads-list-sigint");
    let (o, outs) = stop_paced_list(&dir, "-INT");
    o.assert_code(exit::INTERRUPTED);
    let err = o.stderr_text();
    // The run's line names the first file in list order, though the one on the run's own
    // reactor (the fourth) ends first (it named "file 4": the trial).
    assert!(err.contains("(first: file 1, exit 8)"), "{err}");
    let on: std::collections::BTreeSet<u64> = placed(&dir).iter().map(|p| p.1).collect();
    assert_eq!(on, (0..4).collect(), "the files ran on reactors {on:?}\n{err}");
    resume_list_exactly(&dir, &outs, &err);
}

/// Runs `cmd` with every loop's tick 10 s long (`RINGDL_TICK_MS`) and sends it SIGINT
/// after 1.5 s: its output, and how long it took to end after the signal.
fn sigint_under_a_10_s_tick(cmd: &mut util::TestCommand) -> (util::Output, Duration) {
    let mut since = None;
    let o = cmd.env("RINGDL_TICK_MS", "10000").run_with(|pid| {
        std::thread::sleep(Duration::from_millis(1500));
        since = Some(Instant::now());
        let _ = Command::new("kill").args(["-INT", &pid.to_string()]).status();
    });
    (o, since.expect("signalled").elapsed())
}

/// SIGINT while a list's file runs on the other reactor: the run's reactor posts the stop
/// and wakes that reactor's ring, so the run does not wait for its tick (made 10 s long,
/// `RINGDL_TICK_MS`; each file, one connection at 4 MiB/s, would take 25 s). The run ends
/// within 5 s of the signal (without the wake-up about 8.5 s later), and each file keeps
/// a control file naming bytes its `.part` holds.
#[test]
fn sigint_mid_list_does_not_wait_for_the_other_reactors_tick() {
    let n = nginx();
    let dir = TestDir::new("threads-list-sigint-nudge");
    let f = n.file(100 * MIB);
    let files: Vec<(String, String)> = (0..2).map(|i| (n.paced_url(&f.name), format!("f{i}.bin"))).collect();
    let list = write_list(&dir, &files);
    let (o, took) = sigint_under_a_10_s_tick(
        dir.ringdl()
            .args(["--threads", "2", "-j", "2", "-x", "1", "--json", "run.json", "-d"])
            .arg(dir.path())
            .arg("-i")
            .arg(&list),
    );
    o.assert_code(exit::INTERRUPTED);
    let err = o.stderr_text();
    assert!(
        took < Duration::from_secs(5),
        "the run took {took:?} after SIGINT: the other reactor waited for its tick\n{err}"
    );
    let on: std::collections::BTreeSet<u64> = placed(&dir).iter().map(|p| p.1).collect();
    assert_eq!(on, (0..2).collect(), "the files ran on reactors {on:?}\n{err}");
    for i in 0..2 {
        let out = dir.join(format!("f{i}.bin"));
        let ranges = control_ranges(&dir.join(format!("f{i}.bin.part.ringdl")));
        assert!(bytes_within(&ranges, 0, f.size) >= MIB, "file {i}: {ranges:?}\n{err}");
        assert_ranges_hold_the_source(&ranges, &part_path(&out), &n.www().join(&f.name));
    }
}

/// kill -9 while a list's files run on four reactors: each file's control file names
/// only bytes its `.part` holds (the helpers' loops keep their own), and `-c` fetches
/// only the rest, to the exact bytes.
#[test]
fn kill_9_mid_list_with_threads_leaves_control_files_naming_only_landed_bytes() {
    let dir = TestDir::new("threads-list-kill9");
    let (o, outs) = stop_paced_list(&dir, "-9");
    assert_ne!(o.code(), Some(0), "the list ended before its kill");
    resume_list_exactly(&dir, &outs, &o.stderr_text());
}

/// `--max-connections-per-host` over a list's files placed on four reactors: the server
/// allows 3 bodies at once and turns a fourth away; ringdl, told 3, is never turned away
/// and never has more than 3 bodies coming — the files on the helpers count toward the
/// cap, with the idle connections each reactor keeps — and every file lands exact.
#[test]
fn the_per_host_cap_holds_over_files_placed_on_reactors() {
    let srv = FaultServer::builder().size(4 * MIB).rate(8 * MIB).cap(3).start();
    let dir = TestDir::new("threads-place-cap");
    let files: Vec<(String, String)> = (0..8)
        .map(|i| (srv.url(&format!("f{i}.bin")), format!("f{i}.bin")))
        .collect();
    let list = write_list(&dir, &files);
    let o = dir
        .ringdl()
        .args([
            "-v",
            "--threads",
            "4",
            "-j",
            "4",
            "-x",
            "4",
            "--max-connections-per-host",
            "3",
            "--json",
            "run.json",
            "-d",
        ])
        .arg(dir.path())
        .arg("-i")
        .arg(&list)
        .run();
    let err = o.stderr_text();
    o.assert_success();
    for i in 0..8 {
        assert_eq!(
            sha256_file(&dir.join(format!("f{i}.bin"))),
            srv.sha256(),
            "f{i}.bin\n{err}"
        );
    }
    let on: std::collections::BTreeSet<u64> = placed(&dir).iter().map(|p| p.1).collect();
    assert!(on.len() >= 2, "no file was placed on another reactor: {on:?}\n{err}");
    assert_eq!(srv.refused(), 0, "the server turned connections away\n{err}");
    assert!(srv.peak_bodies() <= 3, "{} bodies at once\n{err}", srv.peak_bodies());
}

/// `--threads 2 -j 4`: the helper runs its share of `-j` at once, two files on lanes of
/// its one ring, as the run's reactor runs the other two (a helper ran one file at a time:
/// the run's reactor took three of four). Then under a server cap of 3, with two files on
/// the helper: the cap counts every reactor's requests once (the helper counts its own
/// files', the run's reactor posts each placed file those of the other reactors). At
/// `--max-connections-per-host 3 -x 1` the server never turns one away; at
/// `--max-connections-per-host 8 -x 2` it does, and every file learns that it allows 3
/// (none a lower count, from requests of another reactor left out). Every file lands exact.
#[test]
fn a_helper_runs_its_share_of_the_files_at_once() {
    // (-x, --max-connections-per-host, files; the server's cap, 3 unless -x 2's 8.)
    for (x, most, files) in [(2usize, 8usize, 4usize), (1, 3, 6), (2, 8, 4)] {
        let first = files == 4 && most == 8 && x == 2;
        let cap = if first { 8 } else { 3 };
        let srv = FaultServer::builder().size(4 * MIB).rate(2 * MIB).cap(cap).start();
        let dir = TestDir::new("threads-share");
        let list: Vec<(String, String)> = (0..files)
            .map(|i| (srv.url(&format!("f{i}.bin")), format!("f{i}.bin")))
            .collect();
        let list = write_list(&dir, &list);
        let o = dir
            .ringdl()
            .args(["-v", "--threads", "2", "-j", "4", "-x", &x.to_string()])
            .args(["--max-connections-per-host", &most.to_string()])
            .args(["--min-split-size", "1M", "--json", "run.json", "-d"])
            .arg(dir.path())
            .arg("-i")
            .arg(&list)
            .run();
        let err = o.stderr_text();
        o.assert_success();
        let case = format!("-x {x} --max-connections-per-host {most}, server cap {cap}");
        for i in 0..files {
            let out = dir.join(format!("f{i}.bin"));
            assert_eq!(sha256_file(&out), srv.sha256(), "{case}: f{i}.bin\n{err}");
        }
        assert!(
            srv.peak_bodies() <= cap,
            "{case}: {} bodies at once\n{err}",
            srv.peak_bodies()
        );
        let mut on: Vec<u64> = placed(&dir).iter().map(|p| p.1).collect();
        on.sort_unstable();
        if most == 3 {
            assert_eq!(srv.refused(), 0, "{case}: the server turned connections away\n{err}");
        } else if !first {
            assert!(srv.refused() > 0, "{case}: the server turned nothing away\n{err}");
            assert!(on.contains(&1), "{case}: no file on the helper {on:?}\n{err}");
            for low in ["server allows 1 ", "server allows 2 "] {
                assert!(!err.contains(low), "{case}: a file learned a cap below 3\n{err}");
            }
        }
        if first {
            // (All four start in the run's first turn: the helper, here, the helper, here.)
            assert_eq!(on, [0, 0, 1, 1], "the files ran on reactors {on:?}\n{err}");
        }
    }
}

/// `--threads 2 -j 3` over four paced files: no more than `-j` `.part` files are open at
/// once (the run asked its list for a fourth ahead, to tell whether a file is alone in
/// flight, while three were in flight: its `.part` sat open, its transfer waiting for a
/// lane).
#[test]
fn a_list_with_threads_opens_no_more_than_j_files() {
    let n = nginx();
    let f = n.file(16 * MIB);
    let dir = TestDir::new("threads-open-j");
    let files: Vec<(String, String)> = (0..4).map(|i| (n.paced_url(&f.name), format!("f{i}.bin"))).collect();
    let list = write_list(&dir, &files);
    let parts = |d: &Path| {
        fs::read_dir(d)
            .map(|r| {
                r.filter_map(std::result::Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".part"))
                    .count()
            })
            .unwrap_or(0)
    };
    let mut most = 0;
    let o = dir
        .ringdl()
        .args(["--threads", "2", "-j", "3", "-x", "1", "-d"])
        .arg(dir.path())
        .arg("-i")
        .arg(&list)
        .run_with(|pid| {
            // (Three files at 4 MiB/s each take 4 s: watched for the first 1.5 s.)
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(1500) {
                most = most.max(parts(dir.path()));
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = Command::new("kill").args(["-INT", &pid.to_string()]).status();
        });
    let err = o.stderr_text();
    o.assert_code(exit::INTERRUPTED);
    assert_eq!(most, 3, "{most} .part files open at once at -j 3\n{err}");
}

/// A list whose first file redirects while the second fails before it starts (its
/// output is a directory): the first starts again after its redirect, on another lane, and
/// spreads again while its first lane still drains; it lands exact (it once failed with
/// "no block for the reactors' eventfd": one block per reactor).
#[test]
fn a_redirected_file_of_a_list_spreads_again() {
    let srv = FaultServer::builder()
        .size(16 * MIB)
        .fault_on(
            When::path("/redir-a"),
            Fault::Redirect {
                code: 302,
                location: "{base}/a.bin".to_owned(),
            },
        )
        .start();
    let dir = TestDir::new("threads-redirect");
    fs::create_dir(dir.join("b.bin")).unwrap();
    let list = dir.join("list.txt");
    fs::write(
        &list,
        format!(
            "{}\n  out=a.bin\n{}\n  out=b.bin\n",
            srv.url("redir-a"),
            srv.url("b.bin")
        ),
    )
    .unwrap();
    let o = dir
        .ringdl()
        .args(["-v", "--threads", "2", "-x", "4", "--min-split-size", "1M", "-d"])
        .arg(dir.path())
        .arg("-i")
        .arg(&list)
        .run();
    let err = o.stderr_text();
    assert!(!err.contains("no block"), "{err}");
    assert_eq!(sha256_file(&dir.join("a.bin")), srv.sha256(), "{err}");
    assert_eq!(
        o.code(),
        Some(exit::LOCAL_IO),
        "b.bin is a directory: its line fails\n{err}"
    );
    assert!(err.contains("b.bin is a directory"), "{err}");
    let (r, parts, _) = reactors_line(&err).unwrap_or_else(|| panic!("a.bin did not spread\n{err}"));
    assert!(r == 2 && parts >= 1, "{err}");
}

/// `--threads 2 -j 3 -x 4`, 1 MiB splits: the shape of the respread tests below.
const RESPREAD: [&str; 8] = ["--threads", "2", "-j", "3", "-x", "4", "--min-split-size", "1M"];

/// The respread tests' list: two small files (`small0.bin`, `small1.bin`) from `small`,
/// and `large.bin` from `large` at place `at` (1: started on the run's reactor; 0: placed
/// on the helper, the first file going to the helper).
fn respread_list(dir: &TestDir, small: &FaultServer, large: &FaultServer, at: usize) -> std::path::PathBuf {
    let mut files: Vec<(String, String)> = (0..2)
        .map(|i| (small.url(&format!("s{i}.bin")), format!("small{i}.bin")))
        .collect();
    files.insert(at, (large.url("large.bin"), "large.bin".to_owned()));
    write_list(dir, &files)
}

/// A list at `--threads 2 -j 3` of two small files and a large paced one (4 MiB/s per
/// connection, a validator): once the small ones are done and none is left to start, the
/// large one runs alone on one reactor. It is stopped and started again at once from what
/// landed, spread over both reactors (src/event/many/respread.rs); it lands exact, the
/// other reactor fetched some of it, and its summary counts both transfers' bytes. The
/// large file is second in the list (started on the run's reactor) and first (placed on
/// the helper): both ways back.
#[test]
fn a_large_file_left_alone_in_a_list_starts_again_spread() {
    let small = FaultServer::builder().size(MIB + 1).etag("small").start();
    let large = FaultServer::builder()
        .size(16 * MIB)
        .rate(4 * MIB)
        .etag("large")
        .start();
    for at in [1usize, 0] {
        let dir = TestDir::new("threads-respread");
        let list = respread_list(&dir, &small, &large, at);
        let o = dir
            .ringdl()
            .arg("-v")
            .args(RESPREAD)
            .args(["--json", "run.json", "-d"])
            .arg(dir.path())
            .arg("-i")
            .arg(&list)
            .run();
        let err = o.stderr_text();
        let case = format!("the large file at {at}");
        o.assert_success();
        assert_eq!(sha256_file(&dir.join("large.bin")), large.sha256(), "{case}\n{err}");
        for i in 0..2 {
            assert_eq!(
                sha256_file(&dir.join(format!("small{i}.bin"))),
                small.sha256(),
                "{case}\n{err}"
            );
        }
        assert!(
            err.contains("large.bin: --threads: alone in flight with about "),
            "{case}: the large file was not started again\n{err}"
        );
        let (r, parts, bytes) = reactors_line(&err).unwrap_or_else(|| panic!("{case}: it did not spread\n{err}"));
        assert!(r == 2 && parts >= 1 && bytes > 0, "{case}\n{err}");
        let fetched = placed(&dir).iter().find(|p| p.0 == "large.bin").map(|p| p.2);
        assert!(
            fetched.is_some_and(|b| b >= large.size()),
            "{case}: fetched {fetched:?} of {}\n{err}",
            large.size()
        );
        assert!(!part_path(&dir.join("large.bin")).exists(), "{case}: .part left");
    }
}

/// The large file left alone (see above) from a server that allows 2 connections: its
/// first transfer learns that from the refusals; its resume, started at once, opens only
/// 2, one per reactor: the run's reactor uses no connection but its first (what a stopped
/// transfer's origins taught stays with its reactor: it was dropped with an interrupted
/// transfer's connections, and the resume took 4, 2 on each). Lands exact.
#[test]
fn a_file_started_again_spread_keeps_the_cap_its_server_was_seen_allowing() {
    // (The small files take a second: the large one's first transfer learns the cap.)
    let small = FaultServer::builder().size(MIB + 1).rate(MIB).etag("small").start();
    let large = FaultServer::builder()
        .size(32 * MIB)
        .rate(4 * MIB)
        .cap(2)
        .etag("large")
        .start();
    let dir = TestDir::new("threads-respread-cap");
    let list = respread_list(&dir, &small, &large, 1);
    let o = dir
        .ringdl()
        .arg("-v")
        .args(RESPREAD)
        .arg("-d")
        .arg(dir.path())
        .arg("-i")
        .arg(&list)
        .run();
    let err = o.stderr_text();
    o.assert_success();
    assert_eq!(sha256_file(&dir.join("large.bin")), large.sha256(), "{err}");
    let (before, after) = err
        .split_once("starting it again, spread over the reactors")
        .unwrap_or_else(|| panic!("the large file was not started again\n{err}"));
    assert!(before.contains(" 503 "), "no refusal before the restart\n{err}");
    // (Two connections over two reactors: the run's reactor uses its connection 0 alone.)
    let second: Vec<&str> = after
        .lines()
        .filter(|l| {
            l.starts_with("ringdl: large.bin: connection ") && !l.starts_with("ringdl: large.bin: connection 0")
        })
        .collect();
    assert!(
        second.is_empty(),
        "the resume opened more than its share: {second:?}\n{err}"
    );
    assert!(
        large.peak_bodies() <= 2,
        "{} bodies at once\n{err}",
        large.peak_bodies()
    );
}

/// SIGINT around the restart of a large file left alone (see above): 0 to 450 ms after
/// the small files landed (here the restart came 200-300 ms after them: it waits for a
/// byte of the large file to land and for its helper's report), so before the restart,
/// around its stop and resume, and as the resume spreads. Each run exits interrupted and
/// says the large file was interrupted (none counts it "not started", which dropped it
/// from the results when the signal came during its stop); `-c` then lands it exact.
#[test]
fn sigint_around_the_restart_of_a_file_left_alone_leaves_it_resumable() {
    let small = FaultServer::builder().size(MIB + 1).etag("small").start();
    let large = FaultServer::builder()
        .size(16 * MIB)
        .rate(4 * MIB)
        .etag("large")
        .start();
    let mut restarted = 0;
    for delay in [0u64, 50, 150, 200, 230, 260, 290, 320, 450] {
        let dir = TestDir::new("threads-respread-int");
        let list = respread_list(&dir, &small, &large, 0);
        let o = dir
            .ringdl()
            .args(RESPREAD)
            .arg("-d")
            .arg(dir.path())
            .arg("-i")
            .arg(&list)
            .run_with(|pid| {
                let t = Instant::now();
                while !(dir.join("small0.bin").exists() && dir.join("small1.bin").exists()) && t.elapsed() < HANG {
                    std::thread::sleep(Duration::from_micros(200));
                }
                std::thread::sleep(Duration::from_millis(delay));
                let _ = Command::new("kill").args(["-INT", &pid.to_string()]).status();
            });
        let err = o.stderr_text();
        let case = format!("SIGINT {delay} ms after the small files");
        o.assert_code(exit::INTERRUPTED);
        assert!(
            !err.contains("not started"),
            "{case}: a file counted not started\n{err}"
        );
        assert!(
            err.lines()
                .any(|l| l.contains("large.bin") && l.contains("interrupted")),
            "{case}: the large file was not said interrupted\n{err}"
        );
        restarted += usize::from(err.contains("starting it again, spread over the reactors"));
        let again = dir
            .ringdl()
            .args(RESPREAD)
            .arg("-d")
            .arg(dir.path())
            .arg("-c")
            .arg("-i")
            .arg(&list)
            .run();
        again.assert_success();
        assert_eq!(sha256_file(&dir.join("large.bin")), large.sha256(), "{case}\n{err}");
    }
    assert!(restarted > 0, "no run got to the restart before its SIGINT");
}

/// Starts a paced 100 MiB download at `--threads 2 -x 4` and stops it with `signal` once
/// the control file names at least 1 MiB of the file's last quarter: the ranges the
/// other reactor fetches first (it takes segments from the back of the queue), landed
/// while the owner's own connections are still in the first half. Gives back the run.
fn stop_paced_download(dir: &TestDir, signal: &str) -> (util::Output, u64) {
    let n = nginx();
    let f = n.file(100 * MIB);
    let out = dir.join("out.bin");
    let control = dir.join("out.bin.part.ringdl");
    let quarter = f.size / 4 * 3;
    let o = dir
        .ringdl()
        .args(["--threads", "2", "-x", "4", "--min-split-size", "1M", "-o"])
        .arg(&out)
        .arg(n.paced_url(&f.name))
        .run_with(|pid| {
            let t = Instant::now();
            while bytes_within(&control_ranges(&control), quarter, f.size) < MIB && t.elapsed() < HANG {
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = Command::new("kill").args([signal, &pid.to_string()]).status();
        });
    (o, f.size)
}

/// kill -9 while both reactors write: the control file names only bytes the `.part`
/// holds (the other reactor's ranges among them), and `-c` at `--threads 2` fetches only
/// the rest, to the exact bytes.
#[test]
fn kill_9_with_threads_leaves_a_control_file_naming_only_landed_bytes() {
    let n = nginx();
    let dir = TestDir::new("threads-kill9");
    let (killed, size) = stop_paced_download(&dir, "-9");
    assert_ne!(killed.code(), Some(0), "the download ended before its kill");
    let f = n.file(size);
    let out = dir.join("out.bin");
    let ranges = control_ranges(&dir.join("out.bin.part.ringdl"));
    assert!(
        bytes_within(&ranges, size / 4 * 3, size) >= MIB,
        "no range of the other reactor's: {ranges:?}"
    );
    assert_ranges_hold_the_source(&ranges, &part_path(&out), &n.www().join(&f.name));
    let o = dir
        .ringdl()
        .args(["-c", "--threads", "2", "-x", "4", "--min-split-size", "1M", "-o"])
        .arg(&out)
        .arg(n.http_url(&f.name))
        .run();
    o.assert_success();
    assert_eq!(sha256_file(&out), f.sha256, "{}", o.stderr_text());
    let kept: u64 = ranges.iter().map(|r| r.1 - r.0).sum();
    assert_fetched_only_the_rest(&o.summary(), size, kept);
}

/// SIGINT while both reactors write: exit 8, a `.part` and a control file that name the
/// other reactor's ranges too, and `-c` fetches only what is missing.
#[test]
fn sigint_with_threads_leaves_a_resumable_part() {
    let n = nginx();
    let dir = TestDir::new("threads-sigint");
    let (o, size) = stop_paced_download(&dir, "-INT");
    o.assert_code(exit::INTERRUPTED);
    let f = n.file(size);
    let out = dir.join("out.bin");
    let ranges = control_ranges(&dir.join("out.bin.part.ringdl"));
    let kept: u64 = ranges.iter().map(|r| r.1 - r.0).sum();
    assert!(
        bytes_within(&ranges, size / 4 * 3, size) >= MIB,
        "the other reactor's ranges are not kept: {ranges:?}\n{}",
        o.stderr_text()
    );
    assert_ranges_hold_the_source(&ranges, &part_path(&out), &n.www().join(&f.name));
    let again = dir
        .ringdl()
        .args(["-c", "--threads", "2", "-x", "4", "-o"])
        .arg(&out)
        .arg(n.http_url(&f.name))
        .run();
    again.assert_success();
    assert_eq!(sha256_file(&out), f.sha256, "{}", again.stderr_text());
    assert_fetched_only_the_rest(&again.summary(), size, kept);
}

/// SIGINT at `--threads 2` while the other reactor fetches its part: the owner's stop
/// wakes that reactor's ring (its eventfd), so the run does not wait for that reactor's
/// tick. The tick is made 10 s long (`RINGDL_TICK_MS`) and the other reactor's part
/// (the back half, one connection at 4 MiB/s) takes longer than that: the run must end
/// within 5 s of the signal (without the wake-up it ends about 8.5 s later, at that
/// reactor's first tick), and the control file still names that reactor's ranges.
#[test]
fn sigint_with_threads_does_not_wait_for_the_other_reactors_tick() {
    let n = nginx();
    let dir = TestDir::new("threads-sigint-nudge");
    let f = n.file(100 * MIB);
    let out = dir.join("out.bin");
    // (Both reactors fetch after 1.5 s; the run would take 12.5 s.)
    let (o, took) = sigint_under_a_10_s_tick(
        dir.ringdl()
            .args(["--threads", "2", "-x", "2", "--min-split-size", "40M", "-o"])
            .arg(&out)
            .arg(n.paced_url(&f.name)),
    );
    o.assert_code(exit::INTERRUPTED);
    assert!(
        took < Duration::from_secs(5),
        "the run took {took:?} after SIGINT: the other reactor waited for its tick\n{}",
        o.stderr_text()
    );
    let ranges = control_ranges(&dir.join("out.bin.part.ringdl"));
    assert!(
        bytes_within(&ranges, f.size / 2, f.size) >= MIB,
        "the other reactor's ranges are not kept: {ranges:?}\n{}",
        o.stderr_text()
    );
    assert_ranges_hold_the_source(&ranges, &part_path(&out), &n.www().join(&f.name));
}

/// A fault on the other reactor's connection: the first answer for the file's last part
/// (which the other reactor takes first) names the wrong range (Content-Range off by
/// 4 KiB). That reactor gives the part up, its rest goes back to the owner's queue with a
/// try counted, and a reactor fetches it again: exact bytes, over HTTP and HTTPS.
#[test]
fn a_part_that_fails_on_another_reactor_goes_back_and_lands() {
    for tls in [false, true] {
        let size = 32 * MIB;
        let srv = FaultServer::builder()
            .size(size)
            .tls_if(tls)
            .fault_on(
                When::Once(Box::new(When::RangeFrom(24 * MIB))),
                Fault::ContentRangeShift { shift: 4096 },
            )
            .start();
        let r = util::get(
            "threads-part-fault",
            &srv,
            &["-v", "--threads", "2", "--min-split-size", "1M", "--retry-wait", "0.1"],
        );
        r.assert_exact(&srv);
        let err = r.o.stderr_text();
        assert!(
            err.contains("reactor 1's part failed"),
            "the fault did not hit the other reactor\n{}",
            r.explain(&srv)
        );
        // The cut request's range was asked for again.
        let reqs = srv.requests();
        let cut = reqs
            .iter()
            .find(|q| q.range_start().is_some_and(|a| a >= 24 * MIB))
            .and_then(|q| q.range_start())
            .unwrap();
        assert!(
            reqs.iter()
                .filter(|q| q.range_start().is_some_and(|a| a <= cut))
                .count()
                >= 2
                && reqs.iter().filter(|q| q.range_start() == Some(cut)).count() >= 1,
            "{}",
            r.explain(&srv)
        );
        let (_, parts, _) = reactors_line(&err).unwrap_or_else(|| panic!("{}", r.explain(&srv)));
        assert!(parts >= 2, "the part was not handed out again: {}", r.explain(&srv));
    }
}

/// One of the stress tests' faults, at random: a cut at a random point, a 503, or an RST
/// after up to 256 KiB of the body.
fn random_fault(rng: &mut XorShift) -> Fault {
    match rng.below(3) {
        0 => Fault::CloseRandom { how: None },
        1 => Fault::Status {
            code: 503,
            retry_after: None,
        },
        _ => Fault::Close {
            after: rng.below(256 << 10),
            how: Close::Rst,
        },
    }
}

/// Stress: 50 short downloads at `--threads 4 -x 8` against fault servers that cut,
/// stall or refuse random requests: every run lands the exact bytes.
#[test]
fn fifty_short_downloads_at_threads_4_with_random_faults_land_every_byte() {
    let mut rng = XorShift::new(0x7_4EAD);
    for iter in 0..50 {
        let size = (2 + rng.below(10)) * MIB + rng.below(MIB);
        let mut b = FaultServer::builder().size(size).seed(iter + 1).tls_if(iter % 3 == 0);
        for _ in 0..3 {
            let req = 2 + rng.below(12);
            b = b.fault_on(When::Request(req), random_fault(&mut rng));
        }
        let srv = b.start();
        let r = util::get(
            "threads-stress",
            &srv,
            &[
                "--threads",
                "4",
                "-x",
                "8",
                "--min-split-size",
                "256K",
                "--retry-wait",
                "0.05",
            ],
        );
        assert_eq!(r.o.code(), Some(0), "iteration {iter}\n{}", r.explain(&srv));
        assert_eq!(
            sha256_file(&r.out),
            srv.sha256(),
            "iteration {iter}: WRONG BYTES\n{}",
            r.explain(&srv)
        );
    }
}

/// Stress for lists: 12 lists of 6–9 files at `--threads 3 -j 6 -x 2` (two files on each
/// helper at once) against fault servers that cut, refuse or reset random requests: every
/// file of every list lands exact, and the faults fired (each list's server is checked).
#[test]
fn twelve_lists_at_threads_3_with_random_faults_land_every_file() {
    let mut rng = XorShift::new(0x11_57);
    let mut fired = 0;
    for iter in 0..12 {
        let size = MIB + rng.below(2 * MIB);
        let files = 6 + rng.below(4) as usize;
        let mut b = FaultServer::builder().size(size).seed(iter + 1).tls_if(iter % 3 == 0);
        for _ in 0..4 {
            let req = 2 + rng.below(3 * files as u64);
            b = b.fault_on(When::Request(req), random_fault(&mut rng));
        }
        let srv = b.start();
        let dir = TestDir::new("threads-list-stress");
        let list: Vec<(String, String)> = (0..files)
            .map(|i| (srv.url(&format!("f{i}.bin")), format!("f{i}.bin")))
            .collect();
        let list = write_list(&dir, &list);
        let mut cmd = dir.ringdl();
        cmd.args(["--threads", "3", "-j", "6", "-x", "2", "--min-split-size", "256K"])
            .args(["--retry-wait", "0.05", "--json", "run.json", "-d"])
            .arg(dir.path())
            .arg("-i")
            .arg(&list);
        if iter % 3 == 0 {
            cmd.arg("--ca-certificate").arg(srv.ca_pem());
        }
        let o = cmd.run();
        let err = o.stderr_text();
        assert_eq!(o.code(), Some(0), "iteration {iter}\n{err}");
        for i in 0..files {
            let out = dir.join(format!("f{i}.bin"));
            assert_eq!(
                sha256_file(&out),
                srv.sha256(),
                "iteration {iter}: f{i}.bin WRONG BYTES\n{err}"
            );
        }
        let on: std::collections::BTreeSet<u64> = placed(&dir).iter().map(|p| p.1).collect();
        assert!(
            on.len() >= 2,
            "iteration {iter}: the files ran on reactors {on:?}\n{err}"
        );
        fired += srv.fired().len();
    }
    assert!(fired >= 12, "only {fired} faults fired over the 12 lists");
}

/// The CPUs a thread may run on (`Cpus_allowed_list` of /proc/PID/task/TID/status).
fn cpus_allowed(task: &Path) -> Option<String> {
    let status = fs::read_to_string(task.join("status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_owned())
}

/// `--pin` at `--threads 2`: while the download runs, the main reactor's thread is on the
/// first CPU the process may use and the helper's (`ringdl-r1`) on the second, one CPU
/// each; without `--pin` neither is restricted. Bytes exact.
#[test]
fn pin_puts_each_reactor_on_its_own_cpu() {
    let n = nginx();
    let f = n.file(16 * MIB);
    let mine = cpus_allowed(Path::new("/proc/thread-self")).unwrap();
    let cpus: Vec<usize> = fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| {
            v.trim()
                .split(',')
                .flat_map(|r| match r.split_once('-') {
                    Some((a, b)) => (a.parse().unwrap()..=b.parse().unwrap()).collect::<Vec<usize>>(),
                    None => vec![r.parse().unwrap()],
                })
                .collect()
        })
        .unwrap();
    for pin in [true, false] {
        let dir = TestDir::new("threads-pin");
        let out = dir.join("out.bin");
        let mut seen: Vec<(String, String)> = Vec::new();
        let mut cmd = dir.ringdl();
        cmd.args(["--threads", "2", "-x", "4", "--min-split-size", "1M", "-o"])
            .arg(&out);
        if pin {
            cmd.arg("--pin");
        }
        let o = cmd.arg(n.paced_url(&f.name)).run_with(|pid| {
            let t = Instant::now();
            // Until the helper's thread is there and has fetched a while.
            while t.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(300));
                let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
                    break;
                };
                seen = tasks
                    .flatten()
                    .filter_map(|e| {
                        let comm = fs::read_to_string(e.path().join("comm")).ok()?;
                        Some((comm.trim().to_owned(), cpus_allowed(&e.path())?))
                    })
                    .collect();
                if seen.iter().any(|(c, _)| c == "ringdl-r1") {
                    break;
                }
            }
        });
        o.assert_success();
        assert_eq!(sha256_file(&out), f.sha256);
        let main = seen.iter().find(|(c, _)| c == "ringdl").map(|s| s.1.clone());
        let helper = seen.iter().find(|(c, _)| c == "ringdl-r1").map(|s| s.1.clone());
        assert!(helper.is_some(), "no helper thread seen: {seen:?}");
        if pin {
            assert_eq!(main, Some(cpus[0].to_string()), "{seen:?}");
            assert_eq!(helper, Some(cpus[1 % cpus.len()].to_string()), "{seen:?}");
        } else {
            assert_eq!(main.as_deref(), Some(mine.as_str()), "{seen:?}");
            assert_eq!(helper.as_deref(), Some(mine.as_str()), "{seen:?}");
        }
    }
}

/// `--max-connections-per-host 2` at `--threads 4 -x 8`: the reactors' connections
/// together stay under it (the server turns a third one away, and none is turned away).
/// Before the cap was shared out, each extra reactor opened one more connection.
#[test]
fn the_per_host_cap_holds_over_all_reactors() {
    let srv = FaultServer::builder().size(16 * MIB).rate(8 * MIB).cap(2).start();
    let r = util::get(
        "threads-per-host",
        &srv,
        &[
            "--threads",
            "4",
            "-x",
            "8",
            "--max-connections-per-host",
            "2",
            "--min-split-size",
            "1M",
        ],
    );
    r.assert_exact(&srv);
    assert_eq!(
        srv.refused(),
        0,
        "the server turned connections away\n{}",
        r.explain(&srv)
    );
    assert!(srv.peak_bodies() <= 2, "{}", r.explain(&srv));
}

/// Work stealing between reactors, by message: a helper's part outlasts the owner's own
/// segments (its body stalls 6 s). The owner, idle, asks the helper for some back; the
/// helper cuts its running body and says which bytes it gave ("reactor 1: gives bytes
/// A-B back"); the owner asks the server for them on its own connection, and the bytes
/// are exact. Seen failing with the ask never sent. (With a 4 s stall it failed once
/// under a loaded machine: the owner's own 3 MiB took longer than the stall, so nothing
/// was left to ask for.)
#[test]
fn an_idle_owner_takes_back_the_rest_of_a_slow_part() {
    for tls in [false, true] {
        let size = 8 * MIB;
        let srv = FaultServer::builder()
            .size(size)
            .rate(4 * MIB)
            .tls_if(tls)
            .fault_on(
                When::Once(Box::new(When::RangeFrom(7 * MIB))),
                Fault::StallMidBody {
                    after: 64 << 10,
                    secs: 6,
                },
            )
            .start();
        let r = util::get(
            "threads-give-back",
            &srv,
            // (The stall is not cut short by the stall timeout: the owner has the time to ask.)
            &[
                "-vv",
                "--threads",
                "2",
                "-x",
                "2",
                "--min-split-size",
                "1M",
                "--stall-timeout",
                "30",
            ],
        );
        r.assert_exact(&srv);
        let err = r.o.stderr_text();
        // The helper took the stalled segment, and gave some of it back.
        assert!(
            err.contains("reactor 1: connection 0: GET bytes 7340032-"),
            "the slow segment was not the helper's\n{}",
            r.explain(&srv)
        );
        let given: Vec<u64> = err
            .lines()
            .filter_map(|l| {
                l.split_once("reactor 1: gives bytes ")?
                    .1
                    .split_once('-')?
                    .0
                    .parse()
                    .ok()
            })
            .collect();
        assert!(!given.is_empty(), "nothing was given back\n{}", r.explain(&srv));
        // The owner (not "reactor 1:") asked for each given range, and the helper never
        // again asked for a byte of it.
        for a in &given {
            assert!(
                err.lines()
                    .any(|l| !l.contains("reactor 1:") && l.contains(&format!(": GET bytes {a}-"))),
                "bytes from {a} were given back but the owner did not ask for them\n{}",
                r.explain(&srv)
            );
            let after = err
                .lines()
                .skip_while(|l| !l.contains(&format!("reactor 1: gives bytes {a}-")));
            for l in after.filter(|l| l.contains("reactor 1: connection ")) {
                let Some((x, y)) = l.split_once("GET bytes ").and_then(|(_, r)| r.split_once('-')) else {
                    continue;
                };
                let (x, y): (u64, u64) = (x.parse().unwrap(), y.trim().parse().unwrap());
                assert!(
                    !(x..=y).contains(a),
                    "the helper asked for given bytes {a} again: {l}\n{}",
                    r.explain(&srv)
                );
            }
        }
    }
}

/// A helper's part is fetched over all the connections it was given: its first request
/// asks for one connection's share of the part, not the whole part (which left its other
/// connections idle, and a slow link at `--threads 2` slower than at one thread: 12 MiB
/// at 256 KiB/s a connection, `-x 8`, took 16.4 s against 6.4 s). Seen failing with the
/// first request covering the part.
#[test]
fn a_part_spreads_over_the_helpers_connections() {
    let size = 12 * MIB;
    let srv = FaultServer::builder().size(size).rate(2 * MIB).start();
    let r = util::get(
        "threads-part-spreads",
        &srv,
        &[
            "-vv",
            "--threads",
            "2",
            "-x",
            "8",
            "--min-split-size",
            "1M",
            "--json",
            "-",
        ],
    );
    r.assert_exact(&srv);
    let err = r.o.stderr_text();
    // `--json` says what `-v` says of the reactors.
    let j: serde_json::Value =
        serde_json::from_slice(&r.o.stdout).unwrap_or_else(|e| panic!("{e}\n{}", r.explain(&srv)));
    let (n, parts, bytes) = reactors_line(&err).unwrap_or_else(|| panic!("{}", r.explain(&srv)));
    assert_eq!(j["reactors"], n as u64, "{j}");
    assert_eq!(j["parts"], parts as u64, "{j}");
    assert_eq!(j["other_reactors_bytes"], bytes, "{j}");
    assert!(n == 2 && parts >= 1 && bytes > 0, "{j}");
    let helper_conns: std::collections::BTreeSet<&str> = err
        .lines()
        .filter_map(|l| l.split_once("reactor 1: connection ")?.1.split_once(": GET bytes "))
        .map(|(c, _)| c)
        .collect();
    assert!(
        helper_conns.len() >= 3,
        "the helper used connections {helper_conns:?} of its 4\n{}",
        r.explain(&srv)
    );
}

/// Stress for work stealing between reactors: 12 downloads whose late ranges stall once
/// each (1–3 s, three of them), some with a connection cut at random, at `--threads 2`
/// and 3, `-x 2`, 4 and 6: every run lands the exact bytes, and the owner was given
/// bytes back in some of them. (The review of the give-back ran it 50 times: 49 gives,
/// every byte exact.)
#[test]
fn stalled_parts_given_back_at_random_land_every_byte() {
    let mut rng = XorShift::new(0x61_7E);
    let mut gives = 0usize;
    for iter in 0..12u64 {
        let size = (3 + rng.below(6)) * MIB + rng.below(MIB);
        let mut b = FaultServer::builder()
            .size(size)
            .seed(iter + 7)
            .rate(2 * MIB + rng.below(4 * MIB))
            .tls_if(iter % 3 == 1);
        for k in 0..3u64 {
            let from = size - (1 + k) * size / 5 - rng.below(size / 5);
            b = b.fault_on(
                When::Once(Box::new(When::RangeFrom(from))),
                Fault::StallMidBody {
                    after: rng.below(512 << 10),
                    secs: 1 + rng.below(3),
                },
            );
        }
        if rng.below(2) == 0 {
            b = b.fault_on(When::Request(3 + rng.below(8)), Fault::CloseRandom { how: None });
        }
        let srv = b.start();
        let threads = ["2", "3"][(iter % 2) as usize];
        let x = ["2", "4", "6"][(iter % 3) as usize];
        let r = util::get(
            "threads-give-stress",
            &srv,
            &[
                "-v",
                "--threads",
                threads,
                "-x",
                x,
                "--min-split-size",
                "512K",
                "--retry-wait",
                "0.05",
                "--max-tries",
                "20",
            ],
        );
        assert_eq!(r.o.code(), Some(0), "iteration {iter}\n{}", r.explain(&srv));
        assert_eq!(
            sha256_file(&r.out),
            srv.sha256(),
            "iteration {iter}\n{}",
            r.explain(&srv)
        );
        gives +=
            r.o.stderr_text()
                .lines()
                .filter(|l| l.contains(": gives bytes "))
                .count();
    }
    assert!(gives > 0, "no part gave bytes back");
}

/// What does not spread counts one reactor and, where `--threads` cannot apply, `-v`
/// says why: a server that ignores ranges (`reactors` 1 and no parts in `--json`, no
/// "N reactors" line: they once counted the threads started), `--limit-rate` ("runs on
/// one reactor (--limit-rate)") and `-x 1` (it was silent). Seen failing with the
/// threads counted, and without the `-x 1` note.
#[test]
fn a_file_that_does_not_spread_counts_one_reactor_and_says_why() {
    let json = |r: &util::Run, srv: &FaultServer| -> serde_json::Value {
        serde_json::from_slice(&r.o.stdout).unwrap_or_else(|e| panic!("{e}\n{}", r.explain(srv)))
    };
    let srv = FaultServer::builder().size(4 * MIB).fault(Fault::IgnoreRange).start();
    let r = util::get(
        "threads-no-ranges",
        &srv,
        &["-v", "--threads", "2", "-x", "4", "--json", "-"],
    );
    r.assert_exact(&srv);
    let j = json(&r, &srv);
    assert_eq!((j["reactors"].as_u64(), j["parts"].as_u64()), (Some(1), Some(0)), "{j}");
    assert_eq!(j["other_reactors_bytes"], 0, "{j}");
    assert!(reactors_line(&r.o.stderr_text()).is_none(), "{}", r.explain(&srv));

    let srv = FaultServer::builder().size(4 * MIB).start();
    let r = util::get(
        "threads-limit-rate",
        &srv,
        &["-v", "--threads", "2", "-x", "4", "--limit-rate", "64M", "--json", "-"],
    );
    r.assert_exact(&srv);
    assert!(
        r.o.stderr_text()
            .contains("--threads: this file runs on one reactor (--limit-rate)"),
        "{}",
        r.explain(&srv)
    );
    assert_eq!(json(&r, &srv)["reactors"], 1);

    let r = util::get("threads-x1", &srv, &["-v", "--threads", "4", "-x", "1", "--json", "-"]);
    r.assert_exact(&srv);
    assert!(
        r.o.stderr_text()
            .contains("--threads: this file runs on one reactor (-x 1)"),
        "{}",
        r.explain(&srv)
    );
    assert_eq!(json(&r, &srv)["reactors"], 1);
}

/// The progress line of a file spread over two reactors counts every reactor's
/// connections with a body coming: "2 conn" at `-x 2` (it said "1 conn", the owner's).
/// Lines every 200 ms (`RINGDL_LINE_MS`): one sample at 5 s could fall in the moment the
/// helper's connection waits between two parts, and then rightly say "1 conn".
#[test]
fn a_spread_files_progress_line_counts_every_reactors_connections() {
    let n = nginx();
    let f = n.file(16 * MIB);
    let dir = TestDir::new("threads-progress-conns");
    let out = dir.join("out.bin");
    let o = dir
        .ringdl()
        .env("RINGDL_LINE_MS", "200")
        .args(["-v", "--threads", "2", "-x", "2", "--min-split-size", "1M", "-o"])
        .arg(&out)
        .arg(n.paced_url(&f.name))
        .run();
    o.assert_success();
    let err = o.stderr_text();
    assert_eq!(sha256_file(&out), f.sha256, "{err}");
    assert!(err.contains("2 reactors: "), "not spread\n{err}");
    let conns: Vec<&str> = err
        .lines()
        .filter(|l| l.ends_with(" conn"))
        .filter_map(|l| l.rsplit("  ").next())
        .collect();
    assert!(conns.len() >= 2, "too few progress lines\n{err}");
    assert!(conns.contains(&"2 conn"), "the lines counted {conns:?}\n{err}");
}

/// A list whose first file leaves its helper's connections idle, filling the per-host
/// cap, while the next file waits for room: once nothing is in flight the idle ones are
/// closed (the helper's by message) and the file starts. It hung (4 runs of 5, the
/// review): only a file placed on that helper could have taken them.
#[test]
fn idle_connections_on_a_helper_never_keep_a_waiting_file_from_starting() {
    let n = nginx();
    let (big, small) = (n.file(16 * MIB), n.file(4097));
    for round in 0..3 {
        let dir = TestDir::new("threads-idle-cap");
        let files = [
            (n.http_url(&big.name), "big.bin".to_owned()),
            (n.http_url(&small.name), "small.bin".to_owned()),
        ];
        let list = write_list(&dir, &files);
        let o = dir
            .ringdl()
            .args([
                "-v",
                "--threads",
                "2",
                "-j",
                "2",
                "-x",
                "4",
                "--max-connections-per-host",
                "4",
                "--min-split-size",
                "1M",
                "--json",
                "run.json",
                "-d",
            ])
            .arg(dir.path())
            .arg("-i")
            .arg(&list)
            .timeout(Duration::from_secs(30))
            .run();
        let err = o.stderr_text();
        o.assert_success();
        assert_eq!(sha256_file(&dir.join("big.bin")), big.sha256, "round {round}\n{err}");
        assert_eq!(
            sha256_file(&dir.join("small.bin")),
            small.sha256,
            "round {round}\n{err}"
        );
        let on: Vec<u64> = placed(&dir).iter().map(|p| p.1).collect();
        assert!(on.contains(&1), "round {round}: no file on the helper {on:?}\n{err}");
    }
}

/// A list whose paced file runs on the helper while the run's reactor reads its own
/// checksummed file back: the helpers' wake-up that came during the read-back is read
/// again, so the helper's file ends when it is done (it waited for an unrelated wake-up,
/// 2 runs of 3 in the review, until a signal).
#[test]
fn a_helpers_end_during_a_read_back_here_is_not_missed() {
    let n = nginx();
    let (paced, checked) = (n.file(16 * MIB), n.file(100 * MIB));
    for round in 0..3 {
        let dir = TestDir::new("threads-readback-bell");
        let list = dir.join("list.txt");
        fs::write(
            &list,
            format!(
                "{}\n  out=paced.bin\n{}\n  out=checked.bin\n  checksum=sha-256={}\n",
                n.paced_url(&paced.name),
                n.http_url(&checked.name),
                checked.sha256
            ),
        )
        .unwrap();
        let t = Instant::now();
        let o = dir
            .ringdl()
            .args(["--threads", "2", "-j", "2", "-x", "2", "--json", "run.json", "-d"])
            .arg(dir.path())
            .arg("-i")
            .arg(&list)
            .timeout(Duration::from_secs(60))
            .run();
        let took = t.elapsed();
        let err = o.stderr_text();
        o.assert_success();
        assert_eq!(sha256_file(&dir.join("paced.bin")), paced.sha256, "{err}");
        assert_eq!(sha256_file(&dir.join("checked.bin")), checked.sha256, "{err}");
        let on: Vec<(String, u64, u64)> = placed(&dir);
        assert!(
            on.iter().any(|p| p.0 == "paced.bin" && p.1 == 1),
            "round {round}: the paced file was not the helper's: {on:?}\n{err}"
        );
        // (The paced file takes about 2 s at 4 MiB/s a connection.)
        assert!(took < Duration::from_secs(20), "round {round}: took {took:?}\n{err}");
    }
}

/// A file worth fewer connections than `-x` (by `--min-split-size`) still spreads: 32 MiB
/// at the default 4 MiB split is worth 8 connections, and at `--threads 2 -x 16` they are
/// shared out 4 + 4 over both reactors (`reactors` 2 in `--json`, 8 connections in all).
/// The owner once took every connection the file was worth, up to its share of `-x` (8),
/// before a helper got one: one reactor, the helper idle.
#[test]
fn a_file_worth_fewer_connections_than_x_still_spreads() {
    // (Paced at 4 MiB/s a response: every connection the file is worth finds work.)
    let srv = FaultServer::builder().size(32 * MIB).rate(4 * MIB).start();
    let r = util::get(
        "threads-worth-fewer",
        &srv,
        &["-v", "--threads", "2", "-x", "16", "--json", "-"],
    );
    r.assert_exact(&srv);
    let err = r.o.stderr_text();
    let j: serde_json::Value =
        serde_json::from_slice(&r.o.stdout).unwrap_or_else(|e| panic!("{e}\n{}", r.explain(&srv)));
    assert_eq!(j["reactors"], 2, "{j}\n{}", r.explain(&srv));
    assert_eq!(j["connections"], 8, "{j}\n{}", r.explain(&srv));
    let (n, parts, bytes) = reactors_line(&err).unwrap_or_else(|| panic!("{}", r.explain(&srv)));
    assert!(n == 2 && parts >= 1 && bytes > 0, "{}", r.explain(&srv));
}

/// A resume whose gaps are scattered (1 MiB missing of every 3 MiB, as a kill -9 of a
/// download over several connections leaves) spreads over every connection of every
/// reactor: at `--threads 2 -x 4` the server serves 4 bodies at once, 2 of them the
/// helper's. A part was once one gap (queued segments taken only while contiguous), so a
/// helper ran its parts one gap at a time on one connection: 3 of 4 connections, and the
/// resume slower than at one thread (57 s against 48 s in a trial).
#[test]
fn a_resume_with_scattered_gaps_spreads_over_every_connection() {
    let size = 24 * MIB;
    // (A cap the run never reaches: the server counts the bodies it writes at once.)
    let srv = FaultServer::builder().size(size).rate(MIB).cap(8).start();
    let dir = TestDir::new("threads-scattered-resume");
    let out = dir.join("out.bin");
    let url = srv.url("file.bin");
    // The `.part` holds the file but for 8 gaps: [3k + 1, 3k + 2) MiB.
    let gaps: Vec<(u64, u64)> = (0..8).map(|k| ((3 * k + 1) * MIB, (3 * k + 2) * MIB)).collect();
    let mut part = srv.body().to_vec();
    let mut control = format!("ringdl-control 1\nurl {url}\ntotal {size}\n");
    let mut at = 0;
    for &(a, b) in &gaps {
        part[a as usize..b as usize].fill(0);
        control += &format!("range {at} {a}\n");
        at = b;
    }
    control += &format!("range {at} {size}\n");
    fs::write(part_path(&out), &part).unwrap();
    fs::write(dir.join("out.bin.part.ringdl"), control).unwrap();
    let o = dir
        .ringdl()
        .timeout(HANG)
        .args([
            "-c",
            "-vv",
            "--threads",
            "2",
            "-x",
            "4",
            "--min-split-size",
            "1M",
            "--stall-timeout",
            "5",
            "-o",
        ])
        .arg(&out)
        .arg(&url)
        .run();
    let explain = || format!("{}\n--- requests ---\n{}", o.stderr_text(), srv.describe());
    assert_eq!(o.code(), Some(0), "{}", explain());
    assert_eq!(sha256_file(&out), srv.sha256(), "{}", explain());
    // Only the gaps were asked for.
    let asked: u64 = srv.sent().iter().map(|r| r.1).sum();
    assert!(
        asked <= 8 * MIB + 64 * 1024,
        "sent {asked} bytes for 8 MiB of gaps\n{}",
        explain()
    );
    let err = o.stderr_text();
    let helper_conns: std::collections::BTreeSet<&str> = err
        .lines()
        .filter_map(|l| l.split_once("reactor 1: connection ")?.1.split_once(": GET bytes "))
        .map(|(c, _)| c)
        .collect();
    assert!(
        helper_conns.len() >= 2,
        "the helper used connections {helper_conns:?} of its 2\n{}",
        explain()
    );
    assert!(
        srv.peak_bodies() >= 4,
        "at most {} bodies at once\n{}",
        srv.peak_bodies(),
        explain()
    );
}

/// Free bytes (for root) on the file system holding `path`, by statvfs(2).
fn free_bytes(path: &Path) -> u64 {
    let st = rustix::fs::statvfs(path).unwrap_or_else(|e| panic!("statvfs {}: {e}", path.display()));
    st.f_bfree * st.f_frsize
}

/// A helper reactor's write fails: at `--threads 2 -x 2` the owner's one connection is held
/// by the server (its response stalls after 1 MiB) while the helper fetches its part of a
/// 32 MiB file into an ext2 file system with 4 MiB free, so the disk fills on the helper's
/// writes ("reactor 1's part failed (disk full …)"). (ext2, not tmpfs: tmpfs preallocates,
/// and its fallocate(2) of the whole file fails before any write.) Once the failure is said
/// the test frees the space; the owner's held request is reset (`--stall-timeout 2`) and
/// its connection fetches the rest, the helper's included, at 16 MiB/s; kill -9 once the
/// control file names half the file. The control file must name only bytes the `.part`
/// holds, and `-c` then fetches only the rest, to the exact file. (A helper that told its
/// writes as landed when submitted, not completed, names the failed write's range, which
/// holds no byte of the file.)
#[test]
fn kill_9_after_a_helpers_failed_write_leaves_a_control_file_naming_only_landed_bytes() {
    if !util::is_root() {
        util::skip("mounting a loop file system needs root");
        return;
    }
    let size = 32 * MIB;
    let srv = FaultServer::builder()
        .size(size)
        .rate(16 * MIB)
        .fault_on(When::Request(1), Fault::StallMidBody { after: MIB, secs: 30 })
        .start();
    let dir = TestDir::new("threads-helper-enospc");
    let (img, mnt) = (dir.join("fs.img"), dir.join("mnt"));
    fs::create_dir_all(&mnt).unwrap();
    fs::File::create(&img).unwrap().set_len(48 * MIB).unwrap();
    // (/sbin: root's PATH has it, another's may not; scripts/test.sh installs e2fsprogs.)
    let mk = Command::new("/sbin/mkfs.ext2")
        .args(["-q", "-F", "-m", "0"])
        .arg(&img)
        .output()
        .unwrap_or_else(|e| panic!("/sbin/mkfs.ext2 (e2fsprogs): {e}"));
    assert!(
        mk.status.success(),
        "mkfs.ext2: {}",
        String::from_utf8_lossy(&mk.stderr)
    );
    // Unmounted at the end; the test fails if the file system is still busy then.
    let mut mount = match util::Mount::image("ext2", &img, &mnt) {
        Ok(m) => m,
        Err(e) => {
            util::skip(&e);
            return;
        }
    };
    let filler = mnt.join("filler");
    let free = free_bytes(&mnt);
    assert!(free > 40 * MIB, "{free} bytes free on a 48 MiB ext2");
    fs::write(&filler, vec![7u8; (free - 4 * MIB) as usize]).unwrap();
    let out = mnt.join("out.bin");
    let control = dir.join("mnt/out.bin.part.ringdl");
    let args = |cmd: &mut util::TestCommand| {
        cmd.args(["--threads", "2", "-x", "2", "--min-split-size", "1M", "-v", "-o"])
            .arg(&out)
            .arg(srv.url("file.bin"));
    };

    // stderr into a file outside the full file system, read while the run goes on.
    let err_path = dir.join("stderr.txt");
    let mut cmd = dir.ringdl();
    args(cmd.args(["--stall-timeout", "2"]));
    let mut child = cmd
        .command_mut()
        .stdout(std::process::Stdio::null())
        .stderr(fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let said = || fs::read_to_string(&err_path).unwrap_or_default();
    let ended = |child: &mut std::process::Child| child.try_wait().unwrap().is_some();
    while !said().contains("reactor 1's part failed") && !ended(&mut child) && t.elapsed() < HANG {
        std::thread::sleep(Duration::from_millis(5));
    }
    // Space again: the owner's writes land, and its control file is saved.
    fs::remove_file(&filler).unwrap();
    let named = || control_ranges(&control).iter().map(|r| r.1 - r.0).sum::<u64>();
    while named() < size / 2 && !ended(&mut child) && t.elapsed() < HANG {
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let status = child.wait().unwrap();
    let ranges = control_ranges(&control);
    let err = said();
    let explain = || format!("{status}\n{ranges:?}\n{err}\n{}", srv.describe());
    // The scenario: the disk filled on the helper's write, and the run was killed while
    // the owner fetched the rest.
    assert!(
        err.lines()
            .any(|l| l.contains("reactor 1's part failed (disk full at offset ")),
        "the helper's write did not fail\n{}",
        explain()
    );
    assert!(
        status.code().is_none() && named() >= size / 2,
        "the run ended before its kill\n{}",
        explain()
    );
    let source = dir.join("source.bin");
    fs::write(&source, srv.body()).unwrap();
    assert_ranges_hold_the_source(&ranges, &part_path(&out), &source);

    let mut again = dir.ringdl();
    again.timeout(HANG).arg("-c");
    args(&mut again);
    let o = again.run();
    o.assert_success();
    assert_eq!(util::sha256_file_apart(&out), srv.sha256(), "{}", o.stderr_text());
    let kept: u64 = ranges.iter().map(|r| r.1 - r.0).sum();
    assert_fetched_only_the_rest(&o.summary(), size, kept);
    mount.unmount().unwrap();
}
