//! Mirrors (`ringdl URL1 URL2 …`, docs/guide/mirrors.md "Mirrors"): one file from
//! several real nginx servers ([`MirrorSites`], each with its own access log) or fault
//! servers; the bytes compared by SHA-256, and the logs say which mirror served ranges.

use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::fault::{Close, Fault, FaultServer, When};
use crate::util::{
    MIB, MirrorSite, MirrorSites, Output, TestDir, exit, free_port, nginx, sha256_file, write_random_file,
};

const FILE: &str = "file.bin";

/// A document root `dir/name` holding `file.bin` of `size` bytes from `seed`, modified
/// at `mtime` seconds after the epoch (nginx's ETag and Last-Modified come from it).
/// Returns (root, SHA-256).
fn root(dir: &TestDir, name: &str, size: u64, seed: u64, mtime: u64) -> (std::path::PathBuf, String) {
    let root = dir.join(name);
    fs::create_dir_all(&root).unwrap();
    let sha = write_random_file(&root.join(FILE), size, seed);
    set_mtime(&root.join(FILE), mtime);
    (root, sha)
}

fn set_mtime(path: &Path, secs: u64) {
    let f = fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap();
}

fn site(root: &Path, tls: bool) -> MirrorSite {
    MirrorSite {
        root: root.to_owned(),
        tls,
        limit_rate: None,
    }
}

/// Runs ringdl in `dir` with `args` (`-o out.bin --json run.json` added), the fixture's
/// CA trusted.
fn fetch(dir: &TestDir, args: &[&str]) -> Output {
    let ca = nginx().ca_pem().display().to_string();
    let mut cmd = dir.ringdl();
    cmd.args([
        "-o",
        "out.bin",
        "--json",
        "run.json",
        "--ca-certificate",
        &ca,
        "--retry-wait",
        "0",
    ]);
    cmd.args(args);
    cmd.run()
}

/// The `mirrors` array of `run.json`, as (url, used, dropped_reason) text per member.
fn json_mirrors(dir: &TestDir) -> Vec<String> {
    let json = fs::read_to_string(dir.join("run.json")).unwrap();
    let Some(at) = json.find("\"mirrors\":[") else {
        return Vec::new();
    };
    let list = &json[at + 11..];
    let list = &list[..list.find("}]").map_or(0, |e| e + 1)];
    list.split("},{").map(str::to_owned).collect()
}

#[track_caller]
fn assert_exact(dir: &TestDir, out: &Output, sha: &str) {
    out.assert_success();
    assert_eq!(
        sha256_file(&dir.join("out.bin")),
        sha,
        "bytes differ\n{}",
        out.stderr_text()
    );
}

#[test]
fn two_http_mirrors_share_the_file() {
    let dir = TestDir::new("mirrors-two");
    let (www, sha) = root(&dir, "www", 32 * MIB, 71, 1_700_000_000);
    let sites = MirrorSites::start(&[site(&www, false), site(&www, false)]);
    let out = fetch(&dir, &["-x", "4", &sites.url(0, FILE), &sites.url(1, FILE)]);
    assert_exact(&dir, &out, &sha);
    for k in 0..2 {
        assert!(
            sites.ranges_served(k) >= 1,
            "mirror {k} served no range: {:?}\n{}",
            sites.requests(k),
            out.stderr_text()
        );
    }
    assert!(out.summary().contains("from 2 of 2 mirrors"), "{}", out.summary());
    // Each mirror's record, by value: its URL, used, not dropped, and the bytes it served
    // add up to the file (a split may leave a few blocks received twice).
    let j: serde_json::Value = serde_json::from_str(&fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    let mirrors = j["mirrors"].as_array().unwrap_or_else(|| panic!("{j}"));
    assert_eq!(mirrors.len(), 2, "{j}");
    for (k, m) in mirrors.iter().enumerate() {
        assert_eq!(m["url"], sites.url(k, FILE), "{j}");
        assert_eq!(
            (&m["used"], &m["dropped_reason"]),
            (&true.into(), &serde_json::Value::Null),
            "{j}"
        );
        assert_eq!(m["bytes"].as_u64().map(|b| b > 0), Some(true), "{j}");
    }
    let served: u64 = mirrors.iter().filter_map(|m| m["bytes"].as_u64()).sum();
    assert!(
        (32 * MIB..=34 * MIB).contains(&served),
        "the mirrors served {served} bytes: {j}"
    );
    assert_eq!(j["bytes"], 32 * MIB, "{j}");
}

#[test]
fn https_and_http_mirrors_mix() {
    let dir = TestDir::new("mirrors-mix");
    let (www, sha) = root(&dir, "www", 32 * MIB, 72, 1_700_000_000);
    let sites = MirrorSites::start(&[site(&www, true), site(&www, false)]);
    let out = fetch(&dir, &["-x", "4", &sites.url(0, FILE), &sites.url(1, FILE)]);
    assert_exact(&dir, &out, &sha);
    for k in 0..2 {
        assert!(
            sites.ranges_served(k) >= 1,
            "mirror {k} served no range\n{}",
            out.stderr_text()
        );
    }
}

#[test]
fn a_mirror_of_another_size_is_dropped() {
    let dir = TestDir::new("mirrors-size");
    let (good, sha) = root(&dir, "good", 16 * MIB, 73, 1_700_000_000);
    let (other, _) = root(&dir, "other", 16 * MIB + 4096, 73, 1_700_000_000);
    let sites = MirrorSites::start(&[site(&good, false), site(&other, false)]);
    let out = fetch(&dir, &["-x", "4", &sites.url(0, FILE), &sites.url(1, FILE)]);
    assert_exact(&dir, &out, &sha);
    let err = out.stderr_text();
    assert!(
        err.contains(&format!("mirror {} dropped", sites.url(1, FILE))) && err.contains("differs from the reference's"),
        "{err}"
    );
    assert!(sites.ranges_served(0) >= 1, "{err}");
    // The dropped mirror's record, by value: unused, nothing served, the sizes named.
    let j: serde_json::Value = serde_json::from_str(&fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    let (m0, m1) = (&j["mirrors"][0], &j["mirrors"][1]);
    assert_eq!(
        (&m0["url"], &m0["used"]),
        (&sites.url(0, FILE).into(), &true.into()),
        "{j}"
    );
    assert!(m0["dropped_reason"].is_null(), "{j}");
    // Every byte from the other (a split may leave a few blocks received twice).
    assert!(
        m0["bytes"].as_u64().is_some_and(|b| (16 * MIB..=18 * MIB).contains(&b)),
        "{j}"
    );
    assert_eq!(
        (&m1["url"], &m1["used"], &m1["bytes"]),
        (&sites.url(1, FILE).into(), &false.into(), &0.into()),
        "{j}"
    );
    let reason = m1["dropped_reason"].as_str().unwrap_or_else(|| panic!("{j}"));
    assert!(
        reason.ends_with(&format!(
            "size {} differs from the reference's {}",
            16 * MIB + 4096,
            16 * MIB
        )),
        "{j}"
    );
}

#[test]
fn a_dead_mirror_is_dropped() {
    let dir = TestDir::new("mirrors-dead");
    let (www, sha) = root(&dir, "www", 16 * MIB, 74, 1_700_000_000);
    let sites = MirrorSites::start(&[site(&www, false)]);
    let dead = format!("http://127.0.0.1:{}/{FILE}", free_port(false));
    // The dead one first: the first mirror that answers is the reference.
    let out = fetch(&dir, &["-x", "4", &dead, &sites.url(0, FILE)]);
    assert_exact(&dir, &out, &sha);
    let err = out.stderr_text();
    assert!(
        err.contains(&format!("mirror {dead} dropped: cannot be reached")),
        "{err}"
    );
    assert!(out.summary().contains("from 1 of 2 mirrors"), "{}", out.summary());
}

#[test]
fn a_mirror_that_fails_mid_transfer_is_dropped_and_its_segments_refetched() {
    let dir = TestDir::new("mirrors-mid");
    let size = 24 * MIB;
    // Each answer of the good mirror after its first pauses 1 s mid-body: the download
    // lasts long enough for the flaky mirror to be asked again, whatever the load.
    let good = FaultServer::builder()
        .size(size)
        .seed(75)
        .etag("same")
        .fault_on(When::From(2), Fault::StallMidBody { after: 65536, secs: 1 })
        .start();
    // Its first request (the mirror's first answer) is served; every later one is cut
    // right after the head.
    let flaky = FaultServer::builder()
        .size(size)
        .seed(75)
        .etag("same")
        .fault_on(
            When::From(2),
            Fault::Close {
                after: 0,
                how: Close::Rst,
            },
        )
        .start();
    let out = fetch(
        &dir,
        &["-x", "4", "--max-tries", "2", &good.url(FILE), &flaky.url(FILE)],
    );
    assert_exact(&dir, &out, good.sha256());
    let err = out.stderr_text();
    assert!(err.contains(&format!("mirror {} dropped", flaky.url(FILE))), "{err}");
    let cut = flaky.fired_on(0);
    assert!(!cut.is_empty(), "the flaky mirror cut nothing\n{err}");
    let asked = good.requests();
    for f in &cut {
        assert!(
            asked.iter().any(|r| r.covers(f.at, size)),
            "bytes from {} (cut on the flaky mirror) were never asked of the other\n{err}",
            f.at
        );
    }
    // Its connections went to the mirror left: the dropped one saw no connection after
    // the drop beyond those already opening (not one reopened to it per loop turn).
    assert!(
        flaky.connections() <= flaky.requests().len() as u64 + 4,
        "{} connections to the dropped mirror for {} requests\n{err}",
        flaky.connections(),
        flaky.requests().len()
    );
}

/// A mirror is dropped after `--max-tries` failed tries in a row, not at its first: one
/// answer cut after its head is retried and the mirror keeps serving (issue 22 §6: the
/// mutant `failures >= max` → `<` in `mirror_failing` was missed).
#[test]
fn a_mirror_that_fails_once_is_kept() {
    let dir = TestDir::new("mirrors-once");
    let size = 16 * MIB;
    let good = FaultServer::builder().size(size).seed(80).etag("same").start();
    // Its second request (a segment) is cut right after the head; every other is served.
    let flaky = FaultServer::builder()
        .size(size)
        .seed(80)
        .etag("same")
        .fault_on(
            When::Request(2),
            Fault::Close {
                after: 0,
                how: Close::Rst,
            },
        )
        .start();
    let out = fetch(
        &dir,
        &["-x", "4", "--max-tries", "3", &good.url(FILE), &flaky.url(FILE)],
    );
    assert_exact(&dir, &out, good.sha256());
    let err = out.stderr_text();
    assert!(!flaky.fired_on(0).is_empty(), "the flaky mirror cut nothing\n{err}");
    assert!(!err.contains("dropped"), "{err}");
    assert!(
        out.summary().contains("from 2 of 2 mirrors"),
        "{}\n{err}",
        out.summary()
    );
}

#[test]
fn a_validator_mismatch_is_dropped_unless_a_checksum_is_given() {
    let dir = TestDir::new("mirrors-validator");
    let (a, sha) = root(&dir, "a", 32 * MIB, 76, 1_700_000_000);
    // The same bytes, another modification time: another ETag and Last-Modified.
    let (b, _) = root(&dir, "b", 32 * MIB, 76, 1_600_000_000);
    let sites = MirrorSites::start(&[site(&a, false), site(&b, false)]);
    let out = fetch(&dir, &["-x", "4", &sites.url(0, FILE), &sites.url(1, FILE)]);
    assert_exact(&dir, &out, &sha);
    let err = out.stderr_text();
    assert!(
        err.contains(&format!("mirror {} dropped", sites.url(1, FILE)))
            && err.contains("ETag")
            && err.contains("--checksum"),
        "{err}"
    );
    let before = sites.ranges_served(1);
    let sum = format!("sha-256={sha}");
    let out = fetch(
        &dir,
        &[
            "-x",
            "4",
            "--force",
            "--checksum",
            &sum,
            &sites.url(0, FILE),
            &sites.url(1, FILE),
        ],
    );
    assert_exact(&dir, &out, &sha);
    assert!(!out.stderr_text().contains("dropped"), "{}", out.stderr_text());
    assert!(
        sites.ranges_served(1) > before + 1,
        "mirror b served nothing with --checksum"
    );
    assert!(
        json_mirrors(&dir).iter().all(|m| m.contains("\"used\":true")),
        "{:?}",
        json_mirrors(&dir)
    );
}

#[test]
fn no_mirror_left_fails_and_leaves_no_file() {
    let dir = TestDir::new("mirrors-none");
    let a = format!("http://127.0.0.1:{}/{FILE}", free_port(false));
    let b = format!("http://127.0.0.1:{}/{FILE}", free_port(false));
    let out = fetch(&dir, &["-x", "2", &a, &b]);
    out.assert_code(exit::NETWORK);
    assert!(out.stderr_text().contains("no mirror left"), "{}", out.stderr_text());
    assert!(!dir.join("out.bin").exists() && !dir.join("out.bin.part").exists());
}

#[test]
fn an_interrupted_download_from_mirrors_resumes_with_the_same_list() {
    let dir = TestDir::new("mirrors-resume");
    let (www, sha) = root(&dir, "www", 16 * MIB, 77, 1_700_000_000);
    let slow = |tls| MirrorSite {
        limit_rate: Some("1m"),
        ..site(&www, tls)
    };
    let sites = MirrorSites::start(&[slow(false), slow(true)]);
    let urls = [sites.url(0, FILE), sites.url(1, FILE)];
    let ca = nginx().ca_pem().display().to_string();
    // 16 MiB at 1 MiB/s per connection, -x 4: about 4 s; interrupted after 1.5 s.
    let first = dir
        .ringdl()
        .args(["-x", "4", "-o", "out.bin", "--ca-certificate", &ca])
        .args(&urls)
        .run_with(|pid| {
            std::thread::sleep(Duration::from_millis(1500));
            let _ = std::process::Command::new("sh")
                .args(["-c", "kill -INT \"$0\"", &pid.to_string()])
                .status();
        });
    first.assert_code(exit::INTERRUPTED);
    assert!(dir.join("out.bin.part.ringdl").exists(), "{}", first.stderr_text());
    let before: Vec<usize> = (0..2).map(|k| sites.ranges_served(k)).collect();
    let out = dir
        .ringdl()
        .args(["-x", "4", "-c", "-o", "out.bin", "--ca-certificate", &ca])
        .args(&urls)
        .run();
    assert_exact(&dir, &out, &sha);
    let err = out.stderr_text();
    assert!(
        err.contains("resuming:") && !err.contains("starting from zero"),
        "{err}"
    );
    assert!(
        !err.contains("was written for"),
        "the control file names another URL than the first\n{err}"
    );
    for (k, &had) in before.iter().enumerate() {
        assert!(
            sites.ranges_served(k) > had,
            "mirror {k} served nothing after -c\n{err}"
        );
    }
}

#[test]
fn a_mirror_that_redirects_is_followed_and_keeps_its_credentials_home() {
    let dir = TestDir::new("mirrors-redirect");
    let size = 16 * MIB;
    let first = FaultServer::builder().size(size).seed(78).etag("same").start();
    let target = FaultServer::builder().size(size).seed(78).etag("same").start();
    // Another origin (another port): the userinfo of the mirror's URL must not follow.
    let mirror = FaultServer::builder()
        .size(size)
        .seed(78)
        .etag("same")
        .fault_on(
            When::path("/moved.bin"),
            Fault::Redirect {
                code: 302,
                location: target.url(FILE),
            },
        )
        .start();
    let moved = mirror.url("moved.bin").replacen("://", "://bob:s3cret@", 1);
    let out = fetch(&dir, &["-x", "4", &first.url(FILE), &moved]);
    assert_exact(&dir, &out, first.sha256());
    let err = out.stderr_text();
    let asked = target.requests();
    assert!(
        asked.iter().any(|r| r.range_start().is_some()),
        "the redirect target served no range\n{err}"
    );
    assert!(
        mirror.requests().iter().all(|r| r.header("authorization").is_some()),
        "the mirror's own userinfo was not sent to it"
    );
    assert!(
        asked.iter().all(|r| r.header("authorization").is_none()),
        "credentials followed the redirect to another origin"
    );
    assert!(
        first.requests().iter().all(|r| r.header("authorization").is_none()),
        "bob's credentials went to the first URL"
    );
}

/// `final_url` and `redirects` of `--json` are the reference's (the mirror the body came
/// from), not the first URL given when that one was dropped before it answered.
#[test]
fn the_json_final_url_is_the_reference_not_a_dropped_first_url() {
    let dir = TestDir::new("mirrors-final-url");
    let (www, sha) = root(&dir, "www", 4 * MIB, 79, 1_700_000_000);
    let sites = MirrorSites::start(&[site(&www, false), site(&www, false)]);
    let missing = sites.url(0, "missing.bin");
    let good = sites.url(1, FILE);
    let out = fetch(&dir, &["-x", "2", &missing, &good]);
    assert_exact(&dir, &out, &sha);
    let json = fs::read_to_string(dir.join("run.json")).unwrap();
    assert!(
        json.contains(&format!("\"final_url\":\"{good}\"")),
        "final_url should be {good}: {json}"
    );
    assert!(json.contains("\"redirects\":0"), "{json}");
}

/// Runs per variant of the dropped-stale-mirror tests: the race they look for came in
/// most runs before the fix (issue 22 §1), so a handful would do; these many make a
/// pass mean something.
const STALE_RUNS: usize = 15;

/// Issue 22 §1: `good` (the reference, given first) and `stale` serve files of the same
/// size with other bytes and validators that differ; with `-x 8` four connections go to
/// the stale mirror, and all of them have answers in flight when the first one's head
/// drops it. Over [`STALE_RUNS`] runs: exit 0, the stale mirror dropped for `why`, served
/// nothing, and the output equals `good_body` in every 64 KiB block (a block of the stale
/// file's is named as such).
#[track_caller]
fn stale_mirror_writes_nothing(name: &str, good: &str, stale: &str, good_body: &[u8], stale_body: &[u8], why: &str) {
    assert_eq!(good_body.len(), stale_body.len());
    let want = crate::util::sha256_bytes(good_body);
    let mut wrong_runs = Vec::new();
    for run in 0..STALE_RUNS {
        let dir = TestDir::new(&format!("{name}-{run}"));
        // Several connections per mirror (the race needs them): 12 MiB is worth eight
        // only with a split of 1 MiB (the default 4 MiB opens three).
        let out = fetch(&dir, &["-x", "8", "--min-split-size", "1M", good, stale]);
        out.assert_success();
        let err = out.stderr_text();
        assert!(
            err.contains(&format!("mirror {stale} dropped: ")) && err.contains(why),
            "run {run}: no drop for {why:?}\n{err}"
        );
        let got = fs::read(dir.join("out.bin")).unwrap();
        assert_eq!(got.len(), good_body.len(), "run {run}\n{err}");
        let block = 64 << 10;
        let (mut differ, mut stale_blocks) = (0, 0);
        for (at, (g, w)) in got.chunks(block).zip(good_body.chunks(block)).enumerate() {
            if g != w {
                differ += 1;
                if g == &stale_body[at * block..at * block + g.len()] {
                    stale_blocks += 1;
                }
            }
        }
        if differ > 0 || crate::util::sha256_bytes(&got) != want {
            wrong_runs.push(format!(
                "run {run}: {differ} blocks of 64 KiB differ, {stale_blocks} of them the stale file's; summary {:?}",
                out.summary()
            ));
            continue;
        }
        assert!(
            out.summary().contains("from 1 of 2 mirrors"),
            "run {run}: {}\n{err}",
            out.summary()
        );
        let json = json_mirrors(&dir);
        assert!(
            json[1].contains("\"used\":false") && json[1].contains("\"dropped_reason\":\"") && json[1].contains(why),
            "run {run}: {json:?}"
        );
    }
    assert!(
        wrong_runs.is_empty(),
        "{} of {STALE_RUNS} runs put other bytes than the good file's in the output:\n{}",
        wrong_runs.len(),
        wrong_runs.join("\n")
    );
}

/// Size of the stale-mirror tests' file: the first request asks for 4 MiB
/// (`schedule::FIRST_SEGMENT`), the rest is planned in 1 MiB segments, one per connection.
const STALE_SIZE: u64 = 12 * MIB;

#[test]
fn a_stale_mirror_with_another_etag_writes_no_byte() {
    let dir = TestDir::new("mirrors-stale-etag");
    let (good, _) = root(&dir, "good", STALE_SIZE, 81, 1_700_000_000);
    // Other bytes, the same size, an older file: another ETag and Last-Modified.
    let (stale, _) = root(&dir, "stale", STALE_SIZE, 82, 1_600_000_000);
    let sites = MirrorSites::start(&[site(&good, false), site(&stale, false)]);
    let good_body = fs::read(good.join(FILE)).unwrap();
    let stale_body = fs::read(stale.join(FILE)).unwrap();
    stale_mirror_writes_nothing(
        "mirrors-stale-etag",
        &sites.url(0, FILE),
        &sites.url(1, FILE),
        &good_body,
        &stale_body,
        "ETag",
    );
    assert!(
        sites.requests(1).len() >= 2 * STALE_RUNS,
        "the stale mirror was asked too little to race: {:?}",
        sites.requests(1)
    );
}

#[test]
fn a_stale_mirror_without_validators_writes_no_byte() {
    let dir = TestDir::new("mirrors-stale-none");
    let (good, _) = root(&dir, "good", STALE_SIZE, 83, 1_700_000_000);
    let sites = MirrorSites::start(&[site(&good, false)]);
    // No ETag, no Last-Modified: nothing proves it serves the same file.
    let stale = FaultServer::builder().size(STALE_SIZE).seed(84).start();
    let good_body = fs::read(good.join(FILE)).unwrap();
    stale_mirror_writes_nothing(
        "mirrors-stale-none",
        &sites.url(0, FILE),
        &stale.url(FILE),
        &good_body,
        stale.body(),
        "no validator",
    );
    assert!(stale.requests().len() >= 2 * STALE_RUNS, "{}", stale.describe());
}

#[test]
fn a_stale_mirror_with_another_last_modified_writes_no_byte() {
    // Neither sends an ETag: Last-Modified decides.
    let good = FaultServer::builder()
        .size(STALE_SIZE)
        .seed(85)
        .fault(Fault::LastModified("Tue, 14 Nov 2023 22:13:20 GMT".into()))
        .start();
    let stale = FaultServer::builder()
        .size(STALE_SIZE)
        .seed(86)
        .fault(Fault::LastModified("Sun, 13 Sep 2020 12:26:40 GMT".into()))
        .start();
    stale_mirror_writes_nothing(
        "mirrors-stale-lm",
        &good.url(FILE),
        &stale.url(FILE),
        good.body(),
        stale.body(),
        "Last-Modified",
    );
    assert!(stale.requests().len() >= 2 * STALE_RUNS, "{}", stale.describe());
}
