//! `--seed`: what a delta says and keeps, and how it treats its connections. The progress
//! line and the "kept" line after SIGINT count the bytes of the ranges the delta fetches,
//! never its holes; `--allow-full` reports the same for zchunk and zsync (nothing reused,
//! the whole file needed) and holds both to `--max-delta-bytes` alike; a refused delta's
//! `--json` record carries its `delta` object (what it needed, what the seeds held, why
//! refused); `-c` onto a block device without `--control` is refused as a plain image's is;
//! a staging file that is a symbolic link is refused by name; `multipart/byteranges`
//! answers leave their connection kept alive (nginx's per-connection log); a server that
//! answers fewer parts than asked is asked half as many ranges per request.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};

use crate::delta::{SIZE, Site, planned_ranges, read_ranges, staged};
use crate::util::nginx;

/// Bad usage.
const USAGE: i32 = 2;
/// Local I/O.
const LOCAL_IO: i32 = 7;
/// Interrupted.
const INTERRUPTED: i32 = 8;
/// A delta refused as asked.
const DELTA: i32 = 11;

/// `1.4 MiB`, as ringdl's progress line writes a size.
fn human(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut u) = (b as f64, 0);
    while v >= 1024.0 && u < U.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    match u {
        0 => format!("{b} B"),
        _ => format!("{v:.1} {}", U[u]),
    }
}

/// The progress lines of a log (`ringdl:  12.3% A / B  …`): their percentage and `B`.
fn progress_lines(stderr: &str) -> Vec<(f64, String)> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("ringdl:")?.trim_start();
            let (pct, rest) = rest.split_once("% ")?;
            let pct = pct.parse().ok()?;
            let (_, total) = rest.split_once(" / ")?;
            Some((pct, total.split("  ").next()?.to_owned()))
        })
        .collect()
}

/// The bytes the plan line says the delta fetches (`… fetching N bytes in …`).
fn planned_bytes(stderr: &str) -> u64 {
    let at = stderr
        .find("; fetching ")
        .unwrap_or_else(|| panic!("no plan line: {stderr}"))
        + 11;
    let digits: String = stderr[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap()
}

/// `--json`'s record of the last run in `s`'s directory.
fn record(s: &Site) -> serde_json::Value {
    let text = std::fs::read_to_string(s.dir.join("record.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A delta stopped by SIGINT mid-fetch: its progress lines count the bytes of the ranges
/// it fetches (the plan line's) and start low, not at the share of the file its holes
/// make; its "kept" line counts what landed of those ranges, of their total. The rerun
/// lands the target.
#[test]
fn a_delta_counts_only_its_own_ranges_in_progress_and_in_what_it_kept() {
    let s = Site::new("progress");
    let control = s.dir.join("new.img.delta.part.ringdl");
    let mut c = s.dir.ringdl();
    c.env("RINGDL_LINE_MS", "100");
    c.args(["-x", "1", "--limit-rate", "256K", "-o"])
        .arg(s.out())
        .arg("--seed")
        .arg(s.served("old.img"))
        .arg(s.url("new.img.zck"));
    let o = c.run_with(|pid| {
        // The header (its first 64 KiB) is staged first, then the pieces.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            let text = std::fs::read_to_string(&control).unwrap_or_default();
            if staged(&text) > (64 << 10) + (256 << 10) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = Command::new("kill").args(["-INT", &pid.to_string()]).status();
    });
    o.assert_code(INTERRUPTED);
    let err = o.stderr_text();
    let need = planned_bytes(&err);
    let lines = progress_lines(&err);
    assert!(!lines.is_empty(), "no progress line: {err}");
    for (pct, total) in &lines {
        assert_eq!(*total, human(need), "the line counts the delta's {need} bytes: {err}");
        assert!(*pct < 100.0, "{err}");
    }
    assert!(lines[0].0 < 50.0, "the first line starts low: {err}");
    let kept = err
        .split_once("bytes asked kept in")
        .unwrap_or_else(|| panic!("no kept line of the bytes asked: {err}"))
        .0;
    let (have, of) = kept.rsplit_once(" of the ").unwrap();
    let have: u64 = have.rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(of.trim().parse::<u64>().unwrap(), need, "{err}");
    assert!(have > 0 && have < need, "{have} of {need}: {err}");
    let o = s.fetch(&[&s.served("old.img")], "new.img.zck", &[]);
    s.assert_landed(&o);
}

/// `--allow-full` against a server without ranges (nginx `max_ranges 0`): zchunk and zsync
/// refuse a percentage bound under 100 % with the same words (exit 11, nothing written);
/// within the bound both land the target from the whole file and report it alike:
/// nothing reused, the whole file needed, `whole_file` true.
#[test]
fn allow_full_reports_and_bounds_zchunk_and_zsync_alike() {
    let s = Site::new("fullalike");
    let mut refusals = Vec::new();
    for index in ["new.img.zck", "new.img.zsync"] {
        let url = nginx().norange_url(&format!("delta-fullalike/{index}"));
        let run = |extra: &[&str]| {
            let mut c = s.dir.ringdl();
            c.args(["-x", "2", "--json"]).arg(s.dir.join("record.json"));
            c.arg("-o").arg(s.out()).arg("--seed").arg(s.served("old.img"));
            c.args(["--allow-full"]).args(extra).arg(&url).run()
        };
        let o = run(&["--max-delta-bytes", "50%"]);
        o.assert_code(DELTA);
        s.assert_no_output(&o);
        let err = o.stderr_text();
        let line = err
            .lines()
            .find(|l| l.contains("which a delta needs"))
            .unwrap_or_else(|| panic!("{err}"));
        refusals.push(line.split_once("which a delta needs").unwrap().1.to_owned());
        assert_eq!(record(&s)["delta"]["refused"], "max_delta_bytes", "{index}");

        let o = run(&["--max-delta-bytes", "100%"]);
        s.assert_landed(&o);
        let d = s.delta();
        assert_eq!(d["whole_file"], true, "{index}: {d}");
        assert_eq!(d["reused_bytes"].as_u64(), Some(0), "{index}: {d}");
        assert_eq!(d["needed_bytes"], d["full_bytes"], "{index}: {d}");
        assert!(d["fetched_bytes"].as_u64() >= d["full_bytes"].as_u64(), "{index}: {d}");
        assert!(
            o.stderr_text().contains(": 0 reused from 1 seed(s)"),
            "{index}: {}",
            o.stderr_text()
        );
        std::fs::remove_file(s.out()).unwrap();
    }
    assert_eq!(refusals[0], refusals[1], "the same refusal for both formats");
    assert!(refusals[0].contains("--max-delta-bytes 50%"), "{}", refusals[0]);
}

/// A delta refused (exit 11) still writes its `delta` object in `--json`: what it needed,
/// what the seeds held and why it was refused, as far as it got — a `.zsync`'s plan is
/// known before a server without ranges refuses its blocks, a `.zck`'s is not.
#[test]
fn a_refused_delta_reports_what_it_knew_in_json() {
    let s = Site::new("refusedjson");
    let o = s.fetch(&[&s.served("old.img")], "new.img.zck", &["--max-delta-bytes", "16K"]);
    o.assert_code(DELTA);
    let need = planned_bytes(&o.stderr_text());
    let r = record(&s);
    let d = &r["delta"];
    assert_eq!(r["exit_code"].as_u64(), Some(11), "{r}");
    assert_eq!(d["refused"], "max_delta_bytes", "{d}");
    assert_eq!(d["needed_bytes"].as_u64(), Some(need), "{d}");
    assert!(d["reused_bytes"].as_u64().unwrap() > SIZE / 2, "{d}");
    assert_eq!(d["target_bytes"].as_u64(), Some(SIZE), "{d}");
    assert!(d["full_bytes"].as_u64().unwrap() > SIZE, "{d}");
    assert!(d["fetched_bytes"].as_u64().unwrap() > 0, "the header: {d}");
    s.assert_no_output(&o);
    for (index, knows) in [("new.img.zsync", true), ("new.img.zck", false)] {
        let mut c = s.dir.ringdl();
        c.args(["--json"]).arg(s.dir.join("record.json"));
        c.arg("-o").arg(s.out()).arg("--seed").arg(s.served("old.img"));
        let o = c.arg(nginx().norange_url(&format!("delta-refusedjson/{index}"))).run();
        o.assert_code(DELTA);
        let d = s.delta();
        assert_eq!(d["refused"], "no_ranges", "{index}: {d}");
        assert_eq!(d["needed_bytes"].is_u64(), knows, "{index}: {d}");
        assert_eq!(d["target_bytes"].is_u64(), knows, "{index}: {d}");
        assert!(d["requests"].as_u64().unwrap() >= 1, "{index}: {d}");
    }
}

/// `-c` onto a block device without `--control` is a usage error (exit 2) with a delta as
/// without one: a device has no directory for its resume state, and a delta's staging
/// file would be in the temporary directory. The device is not touched.
#[test]
fn c_on_a_device_without_control_is_refused_as_for_a_plain_image() {
    let s = Site::new("devc");
    let Some(dev) = crate::blockdev::LoopDev::attach(&s.dir, SIZE, 3) else {
        return;
    };
    let before = dev.read(0, SIZE);
    for seeded in [true, false] {
        let mut c = s.dir.ringdl();
        c.args(["-c", "-o"]).arg(&dev.dev);
        match seeded {
            true => c.arg("--seed").arg(s.served("old.img")).arg(s.url("new.img.zck")),
            false => c.arg(s.url("new.img")),
        };
        let o = c.run();
        o.assert_code(USAGE);
        assert!(
            o.stderr_text().contains("-c on a block device needs --control"),
            "seeded {seeded}: {}",
            o.stderr_text()
        );
    }
    assert!(dev.read(0, SIZE) == before, "the device was written");
}

/// A staging file (`FILE.delta.part`) that is a symbolic link is refused before anything
/// is fetched, and the message says so (not the bare ELOOP of `O_NOFOLLOW`); so is the
/// target's `.part`. The file they point to keeps its bytes.
#[test]
fn a_staging_file_that_is_a_symlink_is_refused_by_name() {
    let s = Site::new("stagelink");
    let victim = s.dir.join("victim");
    std::fs::write(&victim, b"keep me").unwrap();
    let link = s.dir.join("new.img.delta.part");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let o = s.fetch(&[&s.served("old.img")], "new.img.zck", &[]);
    o.assert_code(LOCAL_IO);
    let err = o.stderr_text();
    assert!(
        err.contains("staging file") && err.contains("is a symbolic link"),
        "{err}"
    );
    assert!(!err.contains("Too many levels"), "{err}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    s.assert_no_output(&o);
    // The target's `.part` as a link: said as such too.
    std::fs::remove_file(&link).unwrap();
    let part = crate::util::part_path(&s.out());
    std::os::unix::fs::symlink(&victim, &part).unwrap();
    let o = s.fetch(&[&s.served("old.img")], "new.img.zck", &[]);
    o.assert_code(LOCAL_IO);
    let err = o.stderr_text();
    assert!(
        err.contains("is a symbolic link") && !err.contains("Too many levels"),
        "{err}"
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    assert!(!s.out().exists(), "{err}");
}

/// Answers in `multipart/byteranges` form end with their close delimiter at their
/// Content-Length (RFC 9110 §14.6, RFC 2046 §5.1.1): the connection carries the next
/// request. A delta of many ranges at `-x 1` asks several multi-range requests, over HTTP
/// and HTTPS, zchunk and zsync — nginx's per-connection log shows them all on one
/// connection, and the target lands exact.
#[test]
fn multipart_answers_leave_their_connection_kept_alive() {
    let s = Site::with_edits("keepmulti", 200);
    let prefix = "/conn/delta-keepmulti/";
    for (https, index) in [(false, "new.img.zck"), (true, "new.img.zsync"), (true, "new.img.zck")] {
        let _ = std::fs::remove_file(s.out());
        let seen = nginx().conn_log(prefix).len();
        let path = format!("conn/delta-keepmulti/{index}");
        let url = match https {
            true => nginx().https_url(&path),
            false => nginx().http_url(&path),
        };
        let mut c = s.dir.ringdl();
        c.args(["-x", "1", "--json"]).arg(s.dir.join("record.json"));
        c.arg("--ca-certificate").arg(nginx().ca_pem());
        c.arg("-o").arg(s.out()).arg("--seed").arg(s.served("old.img"));
        let o = c.arg(&url).run();
        s.assert_landed(&o);
        let ranges = planned_ranges(&o.stderr_text());
        assert!(
            ranges > 64,
            "{index}: {ranges} ranges: more than one multi-range request"
        );
        let requests = s.delta()["requests"].as_u64().unwrap() as usize;
        // (Several ranges per request, more than one such request: else one connection
        // would prove nothing of a multipart answer's end.)
        assert!(
            (requests as u64) < ranges && requests >= 3,
            "{index}: {requests} requests for {ranges} ranges"
        );
        // (nginx logs a request once its answer is out: wait for the last line.)
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut log = nginx().conn_log(prefix)[seen..].to_vec();
        while log.len() < requests && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            log = nginx().conn_log(prefix)[seen..].to_vec();
        }
        assert_eq!(log.len(), requests, "{index}: {log:?}");
        let mut conns: Vec<u64> = log.iter().map(|(c, _)| *c).collect();
        conns.dedup();
        assert_eq!(
            conns.len(),
            1,
            "{index} (https {https}): one connection for every request: {log:?}"
        );
    }
}

/// A server of `file` that answers a request for several ranges with a
/// `multipart/byteranges` 206 of the first `most` of them only (Content-Length, kept
/// alive), and one range with a plain 206. Records how many ranges each request asked.
fn few_parts_server(file: PathBuf, most: usize) -> (u16, Arc<Mutex<Vec<usize>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = asked.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (data, log) = (std::fs::read(&file).unwrap(), log.clone());
            std::thread::spawn(move || serve_few_parts(stream, &data, most, &log));
        }
    });
    (port, asked)
}

/// One connection of [`few_parts_server`].
fn serve_few_parts(stream: std::net::TcpStream, data: &[u8], most: usize, log: &Mutex<Vec<usize>>) {
    let mut r = BufReader::new(stream.try_clone().unwrap());
    let mut w = stream;
    loop {
        let Some(ranges) = read_ranges(&mut r, data.len()) else {
            return;
        };
        log.lock().unwrap().push(ranges.len());
        let total = data.len();
        let mut out = Vec::new();
        if let [(a, b)] = ranges[..] {
            write!(
                out,
                "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {a}-{b}/{total}\r\nContent-Length: {}\r\n\r\n",
                b - a + 1
            )
            .unwrap();
            out.extend_from_slice(&data[a..=b]);
        } else {
            let mut body = Vec::new();
            for &(a, b) in ranges.iter().take(most) {
                write!(body, "\r\n--P\r\nContent-Range: bytes {a}-{b}/{total}\r\n\r\n").unwrap();
                body.extend_from_slice(&data[a..=b]);
            }
            body.extend_from_slice(b"\r\n--P--\r\n");
            write!(
                out,
                "HTTP/1.1 206 Partial Content\r\nContent-Type: multipart/byteranges; boundary=P\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .unwrap();
            out.extend_from_slice(&body);
        }
        if w.write_all(&out).is_err() {
            return;
        }
    }
}

/// A server that answers a multi-range request with fewer parts than asked (here: two)
/// is asked half as many ranges in the next request, down to what it serves: each request
/// after a short answer asks at most half of the one before, `-v` names each step down,
/// and the target lands exact (every piece checked against the index).
#[test]
fn a_server_answering_fewer_parts_is_asked_half_as_many_ranges() {
    let s = Site::new("fewparts");
    let (port, asked) = few_parts_server(s.served("new.img.zck"), 2);
    let mut c = s.dir.ringdl();
    c.args(["-v", "-x", "1", "-o"])
        .arg(s.out())
        .arg("--seed")
        .arg(s.served("old.img"));
    let o = c.arg(format!("http://127.0.0.1:{port}/new.img.zck")).run();
    s.assert_landed(&o);
    let err = o.stderr_text();
    let asked = asked.lock().unwrap().clone();
    let short: Vec<usize> = (0..asked.len()).filter(|&i| asked[i] > 2).collect();
    assert!(short.len() >= 2, "short answers: {asked:?}: {err}");
    for &i in &short {
        if let Some(&next) = asked.get(i + 1) {
            assert!(
                next <= (asked[i] / 2).max(1),
                "after {} ranges answered with 2 parts, {next} asked: {asked:?}",
                asked[i]
            );
        }
    }
    assert!(
        err.matches("multi-range step down").count() >= short.len().min(2),
        "{asked:?}: {err}"
    );
    assert!(!err.contains("retry"), "no try spent: {err}");
}

/// A server of `file` that answers every request with a `200` of the whole file, chunked
/// (no Content-Length, ranges ignored), then closes.
fn chunked_whole_server(file: PathBuf) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let data = std::fs::read(&file).unwrap();
            std::thread::spawn(move || {
                let mut r = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while r.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                    line.clear();
                }
                let mut w = stream;
                let _ = w.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
                for c in data.chunks(64 * 1024) {
                    let _ = write!(w, "{:x}\r\n", c.len());
                    let _ = w.write_all(c);
                    let _ = w.write_all(b"\r\n");
                }
                let _ = w.write_all(b"0\r\n\r\n");
            });
        }
    });
    port
}

/// `--allow-full` with a byte bound holds an answer without Content-Length to it too: a
/// chunked whole `.zck` larger than the bound is refused once landed (exit 11, refused
/// `max_delta_bytes`), nothing written, the staging file removed; within the bound it lands.
#[test]
fn allow_full_holds_a_chunked_whole_file_to_a_byte_bound() {
    let s = Site::new("fullchunked");
    let port = chunked_whole_server(s.served("new.img.zck"));
    let url = format!("http://127.0.0.1:{port}/new.img.zck");
    let full = std::fs::metadata(s.served("new.img.zck")).unwrap().len();
    let run = |bound: u64| {
        let mut c = s.dir.ringdl();
        c.args(["-x", "2", "--json"]).arg(s.dir.join("record.json"));
        c.arg("-o").arg(s.out()).arg("--seed").arg(s.served("old.img"));
        c.args(["--allow-full", "--max-delta-bytes"])
            .arg(bound.to_string())
            .arg(&url)
            .run()
    };
    let o = run(full / 2);
    o.assert_code(DELTA);
    s.assert_no_output(&o);
    let err = o.stderr_text();
    assert!(
        err.contains(&format!("the file is {full} bytes, more than {}", full / 2)),
        "{err}"
    );
    assert_eq!(record(&s)["delta"]["refused"], "max_delta_bytes", "{err}");
    assert!(!s.dir.join("new.img.delta.part").exists(), "staging file left\n{err}");
    let o = run(full);
    s.assert_landed(&o);
}
