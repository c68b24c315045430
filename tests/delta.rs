//! `--seed`: delta updates from indexes made by the real tools (`zck -u` and `zsyncmake`)
//! served by the test nginx. An old image (the seed) and a new one that differs in 20
//! places of 4 KiB; checked: the target lands exact (SHA-256) from the seed plus the
//! fetched pieces, and fetches a small part of the file (the `--json` delta object says
//! how much); an old `.zck` as seed; a chunk corrupted on the server is refused with no
//! output left; `--max-delta-bytes` refuses a delta that is larger; a seed that is the
//! target is refused; a signature over the index is checked before any piece; a seed
//! that shares nothing still lands the target (everything fetched).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{MIB, TestDir, XorShift, nginx, part_path, sha256_file};

/// `--checksum` / digest mismatch.
const CHECKSUM: i32 = 9;
/// Signature not verified.
const SIGNATURE: i32 = 10;
/// A delta refused as asked.
const DELTA: i32 = 11;
/// Bad usage.
const USAGE: i32 = 2;

/// Size of the test images.
pub(crate) const SIZE: u64 = 24 * MIB;
/// Places changed between the old and the new image, and bytes changed at each.
const EDITS: u64 = 20;
const EDIT_LEN: usize = 4096;

/// A served directory with the old image (the seed), the new one and their indexes.
pub(crate) struct Site {
    pub(crate) dir: TestDir,
    pub(crate) www: PathBuf,
    name: String,
    /// SHA-256 of the new image.
    pub(crate) sha: String,
}

/// Runs a tool; panics with its output when it fails.
pub(crate) fn tool(program: &str, args: &[&str], cwd: &Path) {
    let o = Command::new(program)
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e} (run ./scripts/test.sh: it installs zchunk and zsync)"));
    assert!(
        o.status.success(),
        "{program} {args:?}: {}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

impl Site {
    /// `old.img` (random), `new.img` (old with [`EDITS`] places rewritten), `new.img.zck`
    /// (`zck -u`), `old.img.zck`, `new.img.zsync` (`zsyncmake`), under `delta-<name>/`.
    pub(crate) fn new(name: &str) -> Site {
        Site::with_edits(name, EDITS)
    }

    /// As [`Site::new`], with `edits` places of [`EDIT_LEN`] bytes rewritten.
    pub(crate) fn with_edits(name: &str, edits: u64) -> Site {
        let www = nginx().www().join(format!("delta-{name}"));
        let _ = std::fs::remove_dir_all(&www);
        std::fs::create_dir_all(&www).unwrap();
        let mut rng = XorShift::new(42);
        let mut old = vec![0u8; SIZE as usize];
        rng.fill(&mut old);
        let mut new = old.clone();
        for k in 0..edits {
            let at = (SIZE / edits * k + rng.below(SIZE / edits - EDIT_LEN as u64)) as usize;
            rng.fill(&mut new[at..at + EDIT_LEN]);
        }
        std::fs::write(www.join("old.img"), &old).unwrap();
        std::fs::write(www.join("new.img"), &new).unwrap();
        tool("/usr/bin/zck", &["-u", "-o", "new.img.zck", "new.img"], &www);
        tool("/usr/bin/zck", &["-u", "-o", "old.img.zck", "old.img"], &www);
        tool(
            "/usr/bin/zsyncmake",
            &["-u", "new.img", "-o", "new.img.zsync", "new.img"],
            &www,
        );
        let sha = sha256_file(&www.join("new.img"));
        Site {
            dir: TestDir::new(&format!("delta_{name}")),
            www,
            name: name.to_owned(),
            sha,
        }
    }

    pub(crate) fn url(&self, file: &str) -> String {
        nginx().http_url(&format!("delta-{}/{file}", self.name))
    }

    pub(crate) fn served(&self, file: &str) -> PathBuf {
        self.www.join(file)
    }

    pub(crate) fn out(&self) -> PathBuf {
        self.dir.join("new.img")
    }

    /// `ringdl -x 4 --json J -o OUT --seed SEED… extra URL`.
    pub(crate) fn fetch(&self, seeds: &[&Path], index: &str, extra: &[&str]) -> crate::util::Output {
        let mut c = self.dir.ringdl();
        c.args(["-x", "4", "--json"]).arg(self.dir.join("record.json"));
        c.arg("-o").arg(self.out());
        for s in seeds {
            c.arg("--seed").arg(s);
        }
        c.args(extra).arg(self.url(index)).run()
    }

    /// The `--json` record's `delta` object.
    pub(crate) fn delta(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.dir.join("record.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["delta"].clone()
    }

    /// The target landed exact; no `.part`, no staging file left.
    pub(crate) fn assert_landed(&self, o: &crate::util::Output) {
        o.assert_success();
        assert_eq!(sha256_file(&self.out()), self.sha, "{}", o.stderr_text());
        assert!(!part_path(&self.out()).exists());
        assert!(!self.dir.join("new.img.delta.part").exists(), "staging file left");
    }

    /// Nothing at the target's name, no `.part` of it.
    pub(crate) fn assert_no_output(&self, o: &crate::util::Output) {
        assert!(!self.out().exists(), "{}", o.stderr_text());
        assert!(!part_path(&self.out()).exists(), "{}", o.stderr_text());
    }
}

/// The delta fetched less than `most` of the full download and reused the rest.
fn assert_small(delta: &serde_json::Value, most: f64) {
    let fetched = delta["fetched_bytes"].as_u64().unwrap() as f64;
    let full = delta["full_bytes"].as_u64().unwrap() as f64;
    assert!(fetched < full * most, "fetched {fetched} of {full}: {delta}");
    assert!(delta["reused_bytes"].as_u64().unwrap() > SIZE / 2, "{delta}");
    assert_eq!(delta["target_bytes"].as_u64(), Some(SIZE), "{delta}");
}

#[test]
fn zchunk_from_a_plain_seed_fetches_only_the_changed_chunks() {
    let s = Site::new("zck-plain");
    let o = s.fetch(&[&s.served("old.img")], "new.img.zck", &[]);
    s.assert_landed(&o);
    let d = s.delta();
    assert_eq!(d["format"], "zchunk", "{d}");
    assert_small(&d, 0.10);
}

#[test]
fn zchunk_from_an_old_zck_seed() {
    let s = Site::new("zck-old");
    let o = s.fetch(&[&s.served("old.img.zck")], "new.img.zck", &[]);
    s.assert_landed(&o);
    assert_small(&s.delta(), 0.10);
}

#[test]
fn zsync_from_a_plain_seed_fetches_only_the_changed_blocks() {
    let s = Site::new("zsync-plain");
    let o = s.fetch(&[&s.served("old.img")], "new.img.zsync", &[]);
    s.assert_landed(&o);
    let d = s.delta();
    assert_eq!(d["format"], "zsync", "{d}");
    assert_small(&d, 0.10);
}

#[test]
fn a_seed_that_shares_nothing_still_lands_the_target() {
    let s = Site::new("unrelated");
    let other = s.dir.join("other.img");
    crate::util::write_random_file(&other, 3 * MIB, 7);
    for index in ["new.img.zck", "new.img.zsync"] {
        let o = s.fetch(&[&other], index, &[]);
        s.assert_landed(&o);
        assert_eq!(s.delta()["reused_bytes"].as_u64(), Some(0));
        std::fs::remove_file(s.out()).unwrap();
    }
}

#[test]
fn a_corrupted_chunk_on_the_server_is_refused_and_nothing_lands() {
    let s = Site::new("corrupt");
    // The last chunk of the new .zck is fetched (the edits reach the image's last part):
    // flip a byte inside the data section's last 4 KiB.
    let zck = s.served("new.img.zck");
    let mut bytes = std::fs::read(&zck).unwrap();
    let at = bytes.len() - 1000;
    bytes[at] ^= 0x55;
    std::fs::write(s.served("bad.img.zck"), &bytes).unwrap();
    let other = s.dir.join("other.img");
    crate::util::write_random_file(&other, MIB, 9);
    let o = s.fetch(&[&other], "bad.img.zck", &[]);
    o.assert_code(CHECKSUM);
    let err = o.stderr_text();
    assert!(err.contains("fetched twice"), "{err}");
    assert!(err.contains("chunk"), "the chunk is named: {err}");
    s.assert_no_output(&o);
}

#[test]
fn a_delta_over_max_delta_bytes_is_refused_before_it_is_fetched() {
    let s = Site::new("bound");
    let other = s.dir.join("other.img");
    crate::util::write_random_file(&other, MIB, 11);
    let o = s.fetch(&[&other], "new.img.zck", &["--max-delta-bytes", "10%"]);
    o.assert_code(DELTA);
    assert!(o.stderr_text().contains("--max-delta-bytes"), "{}", o.stderr_text());
    s.assert_no_output(&o);
    // The real delta is far below 10 %: it lands.
    let o = s.fetch(&[&s.served("old.img")], "new.img.zck", &["--max-delta-bytes", "10%"]);
    s.assert_landed(&o);
}

#[test]
fn a_seed_that_is_the_target_is_refused() {
    let s = Site::new("inplace");
    std::fs::copy(s.served("old.img"), s.out()).unwrap();
    let o = s.fetch(&[&s.out()], "new.img.zck", &["--force"]);
    o.assert_code(USAGE);
    assert!(o.stderr_text().contains("is the target"), "{}", o.stderr_text());
    // --offset is for a device: a file target refuses it.
    let o = s.fetch(&[&s.served("old.img")], "new.img.zck", &["--force", "--offset", "4096"]);
    o.assert_code(USAGE);
    assert_eq!(
        sha256_file(&s.out()),
        sha256_file(&s.served("old.img")),
        "the seed was not touched"
    );
}

#[test]
fn a_signature_over_the_index_is_checked_before_any_piece() {
    let s = Site::new("signed");
    let key = s.dir.join("key");
    tool(
        "/usr/bin/ssh-keygen",
        &["-q", "-t", "ed25519", "-N", "", "-f", key.to_str().unwrap()],
        s.dir.path(),
    );
    // The index a zchunk signature covers: the .zck's lead and header.
    let zck = std::fs::read(s.served("new.img.zck")).unwrap();
    let len = ringdl::delta::zck::head_len(&zck).unwrap().unwrap() as usize;
    let head = s.dir.join("new.img.zck.head");
    std::fs::write(&head, &zck[..len]).unwrap();
    let sign = |file: &Path| {
        tool(
            "/usr/bin/ssh-keygen",
            &[
                "-q",
                "-Y",
                "sign",
                "-n",
                "file",
                "-f",
                key.to_str().unwrap(),
                file.to_str().unwrap(),
            ],
            s.dir.path(),
        );
        PathBuf::from(format!("{}.sig", file.display()))
    };
    let sig = sign(&head);
    let pubkey = s.dir.join("key.pub");
    let seed = s.served("old.img");
    let args = |sig: &Path| {
        vec![
            "--signature".to_owned(),
            sig.display().to_string(),
            "--trusted-key".to_owned(),
            pubkey.display().to_string(),
        ]
    };
    let a = args(&sig);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = s.fetch(&[&seed], "new.img.zck", &a);
    s.assert_landed(&o);
    assert_eq!(s.delta()["index_signed"], true);
    std::fs::remove_file(s.out()).unwrap();
    // The .zsync's signature covers the control file itself; a signature over other
    // bytes fails (exit 10) and fetches no block.
    let zsync_sig = sign(&s.served("new.img.zsync"));
    let a = args(&zsync_sig);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = s.fetch(&[&seed], "new.img.zsync", &a);
    s.assert_landed(&o);
    std::fs::remove_file(s.out()).unwrap();
    let o = s.fetch(&[&seed], "new.img.zck", &a);
    o.assert_code(SIGNATURE);
    s.assert_no_output(&o);
    assert_eq!(s.delta()["index_signed"], false, "a signature that failed");
}

#[test]
fn a_delta_killed_mid_fetch_resumes_without_fetching_again_what_landed() {
    let s = Site::new("resume");
    let other = s.dir.join("other.img");
    let had = kill_mid_fetch(&s, &other, "new.img.zck");
    // No target; its `.part` (locked from the start) holds nothing yet.
    assert!(!s.out().exists());
    assert_eq!(std::fs::metadata(part_path(&s.out())).map_or(0, |m| m.len()), 0);
    let o = s.fetch(&[&other], "new.img.zck", &[]);
    s.assert_landed(&o);
    let d = s.delta();
    let full = d["full_bytes"].as_u64().unwrap();
    let fetched = d["fetched_bytes"].as_u64().unwrap();
    assert!(
        fetched + had <= full + 64 * 1024,
        "the second run fetched {fetched} of {full} with {had} already staged: {d}"
    );
}

/// Bytes a control file's `range` lines name.
pub(crate) fn staged(control: &str) -> u64 {
    control
        .lines()
        .filter_map(|l| l.strip_prefix("range "))
        .map(|r| {
            let (a, b) = r.split_once(' ').unwrap();
            b.parse::<u64>().unwrap() - a.parse::<u64>().unwrap()
        })
        .sum()
}

#[test]
fn a_delta_onto_a_loop_device_at_an_offset_is_exact_and_touches_nothing_else() {
    let s = Site::new("device");
    let Some(dev) = crate::blockdev::LoopDev::attach(&s.dir, SIZE + 4 * MIB, 5) else {
        return;
    };
    let before = dev.read(0, SIZE + 4 * MIB);
    let offset = MIB;
    for index in ["new.img.zck", "new.img.zsync"] {
        let mut c = s.dir.ringdl();
        c.args(["-x", "4", "--offset", &offset.to_string(), "--control"])
            .arg(s.dir.join("image.control"))
            .arg("-o")
            .arg(&dev.dev)
            .arg("--seed")
            .arg(s.served("old.img"))
            .arg(s.url(index));
        c.run().assert_success();
        let image = dev.read(offset, SIZE);
        assert_eq!(
            crate::util::sha256_bytes(&image),
            s.sha,
            "{index}: the image at the offset"
        );
        let after = dev.read(0, SIZE + 4 * MIB);
        assert_eq!(after[..offset as usize], before[..offset as usize], "before the offset");
        assert_eq!(
            after[(offset + SIZE) as usize..],
            before[(offset + SIZE) as usize..],
            "after the image"
        );
        assert!(!s.dir.join("image.control.delta.part").exists(), "staging file left");
    }
}

#[test]
fn a_server_without_ranges_fails_unless_allow_full() {
    let s = Site::new("norange");
    let url = nginx().norange_url("delta-norange/new.img.zck");
    let run = |extra: &[&str]| {
        let mut c = s.dir.ringdl();
        c.args(["-x", "4", "-o"])
            .arg(s.out())
            .arg("--seed")
            .arg(s.served("old.img"))
            .args(extra)
            .arg(&url);
        c.run()
    };
    let o = run(&[]);
    o.assert_code(DELTA);
    assert!(o.stderr_text().contains("--allow-full"), "{}", o.stderr_text());
    s.assert_no_output(&o);
    assert!(
        !s.dir.join("new.img.delta.part").exists(),
        "a refused delta stages nothing"
    );
    // The whole file is still held to --max-delta-bytes: refused before a byte lands.
    let o = run(&["--allow-full", "--max-delta-bytes", "1M"]);
    o.assert_code(DELTA);
    s.assert_no_output(&o);
    let o = run(&["--allow-full"]);
    s.assert_landed(&o);
}

#[test]
fn a_zsync_file_whose_url_points_elsewhere_is_refused() {
    let s = Site::new("elsewhere");
    tool(
        "/usr/bin/zsyncmake",
        &["-u", "http://192.0.2.1/new.img", "-o", "far.zsync", "new.img"],
        &s.www,
    );
    let o = s.fetch(&[&s.served("old.img")], "far.zsync", &[]);
    o.assert_code(6);
    assert!(o.stderr_text().contains("points elsewhere"), "{}", o.stderr_text());
    s.assert_no_output(&o);
}

/// A delta hashes on a helper thread when the process may run on two CPUs (`-v` says so),
/// inline when it is pinned to one (`taskset -c 0`), and `--threads 1` changes neither:
/// the same exact target every way, for both formats.
#[test]
fn a_delta_hashes_on_a_helper_thread_or_inline_and_lands_the_same_bytes() {
    let two = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    for (name, index) in [("zck", "new.img.zck"), ("zsync", "new.img.zsync")] {
        let s = Site::new(&format!("helper-{name}"));
        let o = s.fetch(&[&s.served("old.img")], index, &["-v", "--threads", "1"]);
        s.assert_landed(&o);
        let err = o.stderr_text();
        let said = if two {
            "(hashing on a helper thread)"
        } else {
            "(hashing inline: one CPU)"
        };
        assert!(err.contains(said), "{name}: {err}");
        std::fs::remove_file(s.out()).unwrap();

        let mut c = crate::util::TestCommand::new("taskset");
        c.scrub_env().current_dir(s.dir.path());
        c.args(["-c", "0"]).arg(crate::util::ringdl_bin());
        c.args(["-v", "-x", "4", "-o"]).arg(s.out());
        c.arg("--seed").arg(s.served("old.img")).arg(s.url(index));
        let o = c.run();
        s.assert_landed(&o);
        let err = o.stderr_text();
        assert!(
            err.contains("(hashing inline: one CPU)"),
            "{name} pinned to CPU 0: {err}"
        );
    }
}

/// The number of ranges the plan line says the delta fetches (`… in R range(s)`).
pub(crate) fn planned_ranges(stderr: &str) -> u64 {
    let at = stderr
        .find(" range(s)")
        .unwrap_or_else(|| panic!("no plan line: {stderr}"));
    let digits: String = stderr[..at].chars().rev().take_while(char::is_ascii_digit).collect();
    digits.chars().rev().collect::<String>().parse().unwrap()
}

/// The delta's HTTP requests (`--json` delta `requests`) and those of the run's transfer.
fn requests(s: &Site) -> (u64, u64) {
    let text = std::fs::read_to_string(s.dir.join("record.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    (
        v["delta"]["requests"].as_u64().unwrap(),
        v["requests"].as_u64().unwrap_or(0),
    )
}

/// A partial fetch asks several ranges per request (RFC 9110 §14.1.2) where nginx answers
/// `multipart/byteranges`: 20 changed places at `-x 1` cost a handful of requests, not one
/// per range, over HTTP and HTTPS, for zchunk and zsync; the target lands exact.
#[test]
fn a_delta_asks_many_ranges_per_request() {
    let s = Site::new("multirange");
    for (index, url) in [
        ("new.img.zck", s.url("new.img.zck")),
        ("new.img.zsync", s.url("new.img.zsync")),
        ("new.img.zck", nginx().https_url("delta-multirange/new.img.zck")),
    ] {
        let _ = std::fs::remove_file(s.out());
        let mut c = s.dir.ringdl();
        c.args(["-x", "1", "-v", "--json"]).arg(s.dir.join("record.json"));
        c.arg("-o").arg(s.out()).arg("--seed").arg(s.served("old.img"));
        c.arg("--ca-certificate").arg(nginx().ca_pem());
        let o = c.arg(&url).run();
        s.assert_landed(&o);
        let ranges = planned_ranges(&o.stderr_text());
        let (delta, _) = requests(&s);
        assert!(ranges >= 20, "{index}: {ranges} ranges: {}", o.stderr_text());
        // The index (1-2 requests), the first range alone, then the rest in one request.
        assert!(
            delta <= 5,
            "{index}: {delta} requests for {ranges} ranges: {}",
            o.stderr_text()
        );
        assert!(!o.stderr_text().contains("step down"), "{}", o.stderr_text());
    }
}

/// A server that answers a multi-range request with the whole file (nginx `max_ranges 1`:
/// 200) is asked one range per request from then on: the answer's body is not read, no
/// try is spent, `-v` says so, and the target lands exact with one request per range.
#[test]
fn a_server_that_refuses_many_ranges_is_asked_one_per_request() {
    let s = Site::new("onerange");
    for index in ["new.img.zck", "new.img.zsync"] {
        let _ = std::fs::remove_file(s.out());
        let url = nginx().http_url(&format!("one-range/delta-onerange/{index}"));
        let mut c = s.dir.ringdl();
        c.args(["-x", "1", "-v", "--json"]).arg(s.dir.join("record.json"));
        c.arg("-o").arg(s.out()).arg("--seed").arg(s.served("old.img"));
        let o = c.arg(&url).run();
        s.assert_landed(&o);
        let err = o.stderr_text();
        assert!(
            err.contains("multi-range step down") && err.contains("got 200"),
            "{index}: {err}"
        );
        assert_eq!(err.matches("multi-range step down").count(), 1, "{index}: once: {err}");
        assert!(!err.contains("retry"), "{index}: no try spent: {err}");
        let ranges = planned_ranges(&err);
        let (delta, _) = requests(&s);
        // The index, one request per range, and the refused multi-range request.
        assert!(
            delta > ranges && delta <= ranges + 3,
            "{index}: {delta} requests for {ranges} ranges: {err}"
        );
    }
}

/// Reads one request's head from `r`: the ranges its `Range: bytes=` field asks of a
/// `len`-byte file (an open end or a last byte past the end clamped to `len - 1`; none
/// without the field), or `None` once the client closed the connection.
pub(crate) fn read_ranges(r: &mut impl std::io::BufRead, len: usize) -> Option<Vec<(usize, usize)>> {
    let mut ranges = Vec::new();
    let mut line = String::new();
    while r.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("range: bytes=") {
            for r in v.trim().split(',') {
                let (a, b) = r.split_once('-').unwrap();
                let a: usize = a.parse().unwrap();
                let b = b.parse().unwrap_or(len - 1).min(len - 1);
                ranges.push((a, b));
            }
        }
        line.clear();
    }
    (!line.is_empty()).then_some(ranges)
}

/// A server that serves `file` honestly to single-range requests and, to a multi-range
/// one, a `multipart/byteranges` 206 that is either a lie (`chunked` false: its first part
/// says Content-Range `first+4096-…`, a range not asked) or true but sent with chunked
/// transfer coding (`chunked`), which ringdl does not read. Counts those answers.
fn lying_server(file: PathBuf, chunked: bool) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufReader, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let lies = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = lies.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (data, lies) = (std::fs::read(&file).unwrap(), counted.clone());
            std::thread::spawn(move || {
                let mut r = BufReader::new(stream.try_clone().unwrap());
                let mut w = stream;
                loop {
                    let Some(ranges) = read_ranges(&mut r, data.len()) else {
                        return;
                    };
                    let total = data.len();
                    let mut out = Vec::new();
                    if let [(a, b)] = ranges[..] {
                        write!(out, "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {a}-{b}/{total}\r\nContent-Length: {}\r\n\r\n", b - a + 1).unwrap();
                        out.extend_from_slice(&data[a..=b]);
                    } else {
                        lies.fetch_add(1, Ordering::SeqCst);
                        let mut body = Vec::new();
                        for (k, &(a, b)) in ranges.iter().enumerate() {
                            let (a, b) = if k == 0 && !chunked {
                                (a + 4096, b + 4096)
                            } else {
                                (a, b)
                            };
                            write!(body, "\r\n--L\r\nContent-Range: bytes {a}-{b}/{total}\r\n\r\n").unwrap();
                            body.extend_from_slice(&data[a..=b]);
                        }
                        body.extend_from_slice(b"\r\n--L--\r\n");
                        if chunked {
                            write!(out, "HTTP/1.1 206 Partial Content\r\nContent-Type: multipart/byteranges; boundary=L\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n", body.len()).unwrap();
                            out.extend_from_slice(&body);
                            out.extend_from_slice(b"\r\n0\r\n\r\n");
                        } else {
                            write!(out, "HTTP/1.1 206 Partial Content\r\nContent-Type: multipart/byteranges; boundary=L\r\nContent-Length: {}\r\n\r\n", body.len()).unwrap();
                            out.extend_from_slice(&body);
                        }
                    }
                    if w.write_all(&out).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, lies)
}

/// A multipart answer whose part carries a range the request did not ask for is refused
/// with a clear error; the runs it held, a try spent, are asked again one per request
/// (this server answers those honestly), so the delta lands exact — every piece checked
/// against the index.
#[test]
fn a_multipart_part_of_a_range_not_asked_is_refused_and_asked_again_alone() {
    let s = Site::new("lying");
    let (port, lies) = lying_server(s.served("new.img.zck"), false);
    let mut c = s.dir.ringdl();
    c.args(["-v", "-x", "1", "--max-tries", "2", "--retry-wait", "0", "-o"])
        .arg(s.out())
        .arg("--seed")
        .arg(s.served("old.img"));
    let o = c.arg(format!("http://127.0.0.1:{port}/new.img.zck")).run();
    s.assert_landed(&o);
    assert!(
        o.stderr_text().contains("which is not what was asked"),
        "{}",
        o.stderr_text()
    );
    assert_eq!(
        lies.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the lie was told once"
    );
}

/// A `.zck` made without `-u` has no uncompressed-chunk digests: a plain seed can never
/// match it. The delta still lands (a full fetch of the chunks, exit 0), but a warning
/// says so without `-v`, and why; `--checksum` is checked and the record says so.
#[test]
fn a_zck_without_uncompressed_digests_warns_that_a_plain_seed_cannot_match() {
    let s = Site::new("nou");
    tool("/usr/bin/zck", &["-o", "nou.img.zck", "new.img"], &s.www);
    let sum = format!("sha-256={}", s.sha);
    let o = s.fetch(&[&s.served("old.img")], "nou.img.zck", &["--checksum", &sum]);
    s.assert_landed(&o);
    let err = o.stderr_text();
    assert!(
        err.contains("warning: delta: nothing of the target was found") && err.contains("zck -u"),
        "{err}"
    );
    let text = std::fs::read_to_string(s.dir.join("record.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["checksum_verified"], serde_json::Value::Bool(true), "{text}");
    assert_eq!(v["delta"]["reused_bytes"].as_u64(), Some(0), "{text}");
    // With -u and the same seed: pieces found, no warning.
    let o = s.fetch(&[&s.served("old.img")], "new.img.zck", &["--force"]);
    s.assert_landed(&o);
    assert!(!o.stderr_text().contains("warning: delta"), "{}", o.stderr_text());
}

/// The delta's own staging file given as a seed is refused before anything is written
/// into it: the user's file keeps every byte.
#[test]
fn a_seed_that_is_the_staging_file_is_refused_and_kept() {
    let s = Site::new("seedstaging");
    let staging = s.dir.join("new.img.delta.part");
    std::fs::copy(s.served("old.img"), &staging).unwrap();
    let o = s.fetch(&[&staging], "new.img.zck", &[]);
    o.assert_code(USAGE);
    assert!(o.stderr_text().contains("staging file"), "{}", o.stderr_text());
    assert_eq!(
        sha256_file(&staging),
        sha256_file(&s.served("old.img")),
        "the seed was cut"
    );
    s.assert_no_output(&o);
}

/// `--seed` with the image's own URL (not an index): a usage error that names what
/// `--seed` takes, and no staging file left behind.
#[test]
fn a_url_that_is_not_an_index_is_a_usage_error() {
    let s = Site::new("notindex");
    let o = s.fetch(&[&s.served("old.img")], "new.img", &[]);
    o.assert_code(USAGE);
    assert!(o.stderr_text().contains("this is neither"), "{}", o.stderr_text());
    assert!(!s.dir.join("new.img.delta.part").exists(), "staging file left");
    assert!(
        !s.dir.join("new.img.delta.part.ringdl").exists(),
        "staging control file left"
    );
    s.assert_no_output(&o);
}

/// Kills a delta from a seed that shares nothing (`other`, made here) once its staging
/// file's control file names more than 2 MiB; returns the bytes it named.
fn kill_mid_fetch(s: &Site, other: &Path, index: &str) -> u64 {
    let control = s.dir.join("new.img.delta.part.ringdl");
    crate::util::write_random_file(other, MIB, 13);
    let mut c = s.dir.ringdl();
    c.args(["-x", "2", "--limit-rate", "4M", "-o"])
        .arg(s.out())
        .arg("--seed")
        .arg(other)
        .arg(s.url(index));
    let killed = c.run_with(|pid| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            let text = std::fs::read_to_string(&control).unwrap_or_default();
            if staged(&text) > 2 * MIB {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    });
    assert_ne!(
        killed.code(),
        Some(0),
        "killed before its end: {}",
        killed.stderr_text()
    );
    let had = staged(&std::fs::read_to_string(&control).unwrap());
    assert!(had > 2 * MIB, "the kill came after pieces landed ({had} bytes)");
    had
}

/// `--no-continue` starts a delta over: what a killed run staged is fetched again.
#[test]
fn no_continue_starts_a_delta_over_without_its_staging_file() {
    let s = Site::new("nocontinue");
    let other = s.dir.join("other.img");
    let had = kill_mid_fetch(&s, &other, "new.img.zsync");
    let o = s.fetch(&[&other], "new.img.zsync", &["--no-continue"]);
    s.assert_landed(&o);
    let d = s.delta();
    let full = d["full_bytes"].as_u64().unwrap();
    let fetched = d["fetched_bytes"].as_u64().unwrap();
    assert!(
        fetched >= full,
        "--no-continue fetched {fetched} of {full} with {had} staged before: {d}"
    );
}

/// A SIGTERM while the seeds are scanned (outside the event loop) stops the run with exit
/// 8 once the scan step ends, naming the step; nothing is fetched or written.
#[test]
fn a_sigterm_during_the_scan_stops_the_delta() {
    let s = Site::new("sigscan");
    // A large sparse seed: its scan lasts seconds (zeros hashed chunk by chunk).
    let seed = s.dir.join("zeros.img");
    std::fs::File::create(&seed).unwrap().set_len(2048 * MIB).unwrap();
    let staging = s.dir.join("new.img.delta.part");
    let mut c = s.dir.ringdl();
    c.args(["-x", "2", "-o"])
        .arg(s.out())
        .arg("--seed")
        .arg(&seed)
        .arg(s.url("new.img.zck"));
    let o = c.run_with(|pid| {
        // The header is staged before the scan starts: then the scan runs.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !staging.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    });
    o.assert_code(8);
    assert!(
        o.stderr_text()
            .contains("interrupted by SIGTERM while the seeds were scanned"),
        "{}",
        o.stderr_text()
    );
    s.assert_no_output(&o);
}

/// An image larger than the block device holds from `--offset` is refused before the
/// seeds are scanned, with exit 7, and the device is left as it was; a delta that lands
/// on a device says in its record that the device holds no unverified bytes.
#[test]
fn a_device_too_small_for_the_image_is_refused_before_the_scan() {
    let s = Site::new("smalldev");
    let Some(dev) = crate::blockdev::LoopDev::attach(&s.dir, SIZE / 2, 7) else {
        return;
    };
    let before = dev.read(0, SIZE / 2);
    let mut c = s.dir.ringdl();
    c.args(["-v", "--control"])
        .arg(s.dir.join("image.control"))
        .arg("-o")
        .arg(&dev.dev)
        .arg("--seed")
        .arg(s.served("old.img"))
        .arg(s.url("new.img.zck"));
    let o = c.run();
    o.assert_code(7);
    let err = o.stderr_text();
    assert!(err.contains("does not fit in the block device"), "{err}");
    assert!(!err.contains("scanned"), "refused only after the scan: {err}");
    assert_eq!(dev.read(0, SIZE / 2), before, "the device was written");

    // (Another directory: each loop device has its own backing file.)
    let other = TestDir::new("delta_smalldev_big");
    let Some(big) = crate::blockdev::LoopDev::attach(&other, SIZE, 8) else {
        return;
    };
    let mut c = s.dir.ringdl();
    c.args(["--json"]).arg(s.dir.join("dev.json"));
    c.args(["--control"])
        .arg(s.dir.join("image2.control"))
        .arg("-o")
        .arg(&big.dev);
    c.arg("--seed").arg(s.served("old.img")).arg(s.url("new.img.zck"));
    c.run().assert_success();
    assert_eq!(crate::util::sha256_bytes(&big.read(0, SIZE)), s.sha);
    let text = std::fs::read_to_string(s.dir.join("dev.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v["device_holds_unverified_bytes"],
        serde_json::Value::Bool(false),
        "{text}"
    );
}

/// A multi-range request answered with a multipart body ringdl does not read (chunked
/// transfer coding) steps down to one range per request, no try spent: the delta lands
/// exact, and `-v` says why it stepped down.
#[test]
fn a_multipart_answer_that_cannot_be_read_steps_down_to_single_ranges() {
    let s = Site::new("chunkedparts");
    let (port, answers) = lying_server(s.served("new.img.zck"), true);
    let mut c = s.dir.ringdl();
    c.args(["-v", "-x", "1", "--max-tries", "1", "-o"])
        .arg(s.out())
        .arg("--seed")
        .arg(s.served("old.img"));
    let o = c.arg(format!("http://127.0.0.1:{port}/new.img.zck")).run();
    s.assert_landed(&o);
    assert!(
        answers.load(std::sync::atomic::Ordering::SeqCst) >= 1,
        "no chunked multipart answer was sent"
    );
    let err = o.stderr_text();
    assert!(err.contains("multi-range step down"), "{err}");
}

/// A target larger than its file system's free space: the run stops before a byte of the
/// target is written (its `.part` is preallocated: fallocate(2) meets ENOSPC and says how
/// much is free), exit 7, no `.part` left, the staged pieces kept; with more room the
/// same command lands it exact.
#[test]
fn a_target_larger_than_the_free_space_is_refused_before_its_writes() {
    if !crate::util::is_root() {
        crate::util::skip("mounting a small tmpfs needs root");
        return;
    }
    let s = Site::new("nospace");
    let mnt = s.dir.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mount = match crate::util::Mount::new("tmpfs", "size=16m", &mnt) {
        Ok(m) => m,
        Err(e) => {
            crate::util::skip(&e);
            return;
        }
    };
    let out = mnt.join("new.img");
    let run = || {
        s.dir
            .ringdl()
            .args(["-x", "4", "--seed"])
            .arg(s.served("old.img"))
            .arg("-o")
            .arg(&out)
            .arg(s.url("new.img.zsync"))
            .run()
    };
    let o = run();
    o.assert_code(7);
    let err = o.stderr_text();
    assert!(
        err.contains(&format!("fallocate of the target's {SIZE} bytes"))
            && err.contains("bytes free on its file system"),
        "unclear message: {err}"
    );
    assert!(!out.exists(), "{err}");
    assert!(!part_path(&out).exists(), "a .part left after the full disk: {err}");
    assert!(
        mnt.join("new.img.delta.part").exists(),
        "the staged pieces were not kept: {err}"
    );
    assert!(mount.remount("size=64m"), "remount with more space");
    let o = run();
    o.assert_success();
    // (Read by a child: this process holds nothing of the filesystem `mount` unmounts.)
    assert_eq!(crate::util::sha256_file_apart(&out), s.sha, "{}", o.stderr_text());
    assert!(!mnt.join("new.img.delta.part").exists(), "staging file left");
    drop(mount);
}

/// An empty image (its index made by the real tools) lands as an empty file from a seed,
/// in either format: nothing to reserve, fetch or write.
#[test]
fn an_empty_image_lands_empty() {
    let s = Site::new("empty");
    std::fs::write(s.served("empty.img"), b"").unwrap();
    tool("/usr/bin/zck", &["-u", "-o", "empty.img.zck", "empty.img"], &s.www);
    tool(
        "/usr/bin/zsyncmake",
        &["-u", "empty.img", "-o", "empty.img.zsync", "empty.img"],
        &s.www,
    );
    for index in ["empty.img.zck", "empty.img.zsync"] {
        let o = s.fetch(&[&s.served("old.img")], index, &[]);
        o.assert_success();
        assert_eq!(
            std::fs::metadata(s.out()).unwrap().len(),
            0,
            "{index}: {}",
            o.stderr_text()
        );
        assert!(!part_path(&s.out()).exists(), "{index}");
        std::fs::remove_file(s.out()).unwrap();
    }
}
