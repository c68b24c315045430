//! Images written to block devices (docs/guide/block-devices.md "Images to block
//! devices"): loop devices (`losetup -f --show`) on sparse files in each test's own
//! directory, filled with a pattern first, so every test can check both the image's
//! bytes at `--offset` (SHA-256 of that range read back from the device) and that every
//! byte outside it is still the pattern. A [`LoopDev`] guard detaches the device even
//! when the test fails, and fails the test when `losetup -d` does. Needs root and loop
//! devices: without them the tests skip loudly through [`crate::util::skip`] (a failure
//! under CI=true).

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::fault::{Fault, FaultServer};
use crate::util::{self, MIB, TestDir, nginx, sha256_bytes, skip, test_io, write_random_file};

/// A loop device over a file; detached on drop.
pub(crate) struct LoopDev {
    pub(crate) dev: String,
    backing: PathBuf,
}

impl LoopDev {
    /// A loop device over a new `size`-byte file in `dir`, every byte of it from the
    /// seeded pattern; `None` (after a loud skip) without root or loop devices.
    pub(crate) fn attach(dir: &TestDir, size: u64, seed: u64) -> Option<LoopDev> {
        if !util::is_root() {
            skip("block-device outputs need root (losetup)");
            return None;
        }
        if !Path::new("/dev/loop-control").exists() || !util::have_program("losetup") {
            skip("no loop devices here (/dev/loop-control, losetup)");
            return None;
        }
        let backing = dir.join("device.img");
        write_random_file(&backing, size, seed);
        let out = Command::new("losetup")
            .arg("-f")
            .arg("--show")
            .arg(&backing)
            .output()
            .unwrap();
        if !out.status.success() {
            skip(&format!(
                "losetup -f --show failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            return None;
        }
        let dev = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        assert!(dev.starts_with("/dev/loop"), "losetup printed {dev:?}");
        Some(LoopDev { dev, backing })
    }

    /// `len` bytes of the device from `at` (read through the device node).
    pub(crate) fn read(&self, at: u64, len: u64) -> Vec<u8> {
        let mut f = File::open(&self.dev).unwrap();
        f.seek(SeekFrom::Start(at)).unwrap();
        let mut v = vec![0; len as usize];
        f.read_exact(&mut v).unwrap();
        v
    }

    /// The SHA-256 of the whole device.
    fn sha(&self) -> String {
        let len = fs::metadata(&self.backing).unwrap().len();
        sha256_bytes(&self.read(0, len))
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        let st = Command::new("losetup").arg("-d").arg(&self.dev).status();
        if !st.as_ref().is_ok_and(|s| s.success()) {
            if std::thread::panicking() {
                eprintln!("*** losetup -d {} failed: {st:?}", self.dev);
            } else {
                panic!("losetup -d {} failed: {st:?}", self.dev);
            }
        }
    }
}

/// The pattern a device of `size` bytes was filled with ([`write_random_file`]'s bytes).
fn pattern(size: u64, seed: u64) -> Vec<u8> {
    let dir = TestDir::new("pattern");
    let p = dir.join("p");
    write_random_file(&p, size, seed);
    fs::read(p).unwrap()
}

/// Asserts the device holds `image` at `offset` and the pattern everywhere else.
#[track_caller]
fn assert_image_at(dev: &LoopDev, pat: &[u8], offset: u64, image: &[u8]) {
    let all = dev.read(0, pat.len() as u64);
    let (o, e) = (offset as usize, offset as usize + image.len());
    assert_eq!(
        sha256_bytes(&all[o..e]),
        sha256_bytes(image),
        "the image's bytes at offset {offset}"
    );
    assert!(all[..o] == pat[..o], "bytes before the image changed");
    let after = all[e..].iter().zip(&pat[e..]).position(|(a, b)| a != b);
    assert_eq!(
        after, None,
        "a byte after the image changed (at {:?} past its end)",
        after
    );
}

/// The `--json -` record a run printed.
#[track_caller]
fn record(o: &util::Output) -> serde_json::Value {
    let text = o.stdout_text();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The I/O backends to run: the one RINGDL_TEST_IO forces, else both.
fn backends() -> Vec<Option<&'static str>> {
    match test_io() {
        Some(_) => vec![None],
        None => vec![Some("uring"), Some("epoll")],
    }
}

/// A file of `size` bytes in nginx's root under this test's own name: (name, bytes).
fn serve(name: &str, size: u64, seed: u64) -> (String, Vec<u8>) {
    let name = format!("blockdev-{name}-{}.bin", std::process::id());
    let p = nginx().www().join(&name);
    write_random_file(&p, size, seed);
    (name.clone(), fs::read(p).unwrap())
}

#[test]
fn image_lands_at_the_offset_and_nothing_outside_it_changes() {
    let dir = TestDir::new("blockdev-offset");
    let dev_size = 32 * MIB;
    let Some(dev) = LoopDev::attach(&dir, dev_size, 901) else {
        return;
    };
    let pat = pattern(dev_size, 901);
    // Not a multiple of 512: the last block is read from the device and written back
    // around the image's last bytes.
    let (name, image) = serve("offset", 8 * MIB + 1000, 902);
    let offset = MIB + 512;
    for io in backends() {
        for x in ["1", "4", "16"] {
            // Back to the pattern before each run, so each run proves its own bytes.
            let mut f = fs::OpenOptions::new().write(true).open(&dev.dev).unwrap();
            std::io::Write::write_all(&mut f, &pat).unwrap();
            f.sync_all().unwrap();
            drop(f);
            let mut cmd = dir.ringdl();
            if let Some(io) = io {
                cmd.args(["--io", io]);
            }
            // Several connections split the image only when the first one has not fetched it
            // all before they open: at 4 MiB/s per connection (`/paced/`) it has not.
            let url = if x == "1" {
                nginx().http_url(&name)
            } else {
                nginx().paced_url(&name)
            };
            let o = cmd
                .args(["-v", "-x", x, "--offset", &offset.to_string(), "-o", &dev.dev])
                .arg(url)
                .run();
            o.assert_success();
            let summary = o.summary();
            assert!(summary.contains("engine direct"), "{io:?} -x {x}: {summary}");
            let conns = if x == "1" { "1 connection" } else { "connections" };
            assert!(summary.contains(conns), "{io:?} -x {x}: {summary}");
            assert!(
                o.stderr_text().contains("O_DIRECT, 512-byte alignment"),
                "{}",
                o.stderr_text()
            );
            assert_image_at(&dev, &pat, offset, &image);
        }
    }
    assert!(
        !dir.path()
            .read_dir()
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().contains(".part"))
    );
    let _ = fs::remove_file(nginx().www().join(&name));
}

#[test]
fn an_image_larger_than_the_room_is_refused_before_any_write() {
    let dir = TestDir::new("blockdev-large");
    let Some(dev) = LoopDev::attach(&dir, 8 * MIB, 903) else {
        return;
    };
    let before = dev.sha();
    let n = nginx();
    // 16 MiB onto 8 MiB; and 4 MiB at an offset that leaves 4 MiB - 512 bytes.
    for (file, offset) in [(n.file(16 * MIB), 0u64), (n.file(4 * MIB), 4 * MIB + 512)] {
        let o = dir
            .ringdl()
            .args(["-x", "4", "--offset", &offset.to_string(), "-o", &dev.dev])
            .arg(n.http_url(&file.name))
            .run();
        o.assert_code(7);
        let e = o.stderr_text();
        assert!(e.contains("does not fit") && e.contains("nothing was written"), "{e}");
        assert_eq!(dev.sha(), before, "the device changed");
    }
}

#[test]
fn an_image_of_unknown_size_stops_at_the_device_end_and_says_it_is_incomplete() {
    let dir = TestDir::new("blockdev-chunked");
    let dev_size = 4 * MIB;
    let Some(dev) = LoopDev::attach(&dir, dev_size, 904) else {
        return;
    };
    let pat = pattern(dev_size, 904);
    // 200 without ranges, chunked: no size before the body.
    let srv = FaultServer::builder()
        .size(6 * MIB)
        .fault(Fault::IgnoreRange)
        .fault(Fault::Chunked {
            chunk: 65536,
            extensions: false,
            trailers: false,
        })
        .start();
    let offset = MIB;
    let o = dir
        .ringdl()
        .args(["--json", "-", "--offset", &offset.to_string(), "-o", &dev.dev])
        .arg(srv.url("img.bin"))
        .run();
    o.assert_code(7);
    let e = o.stderr_text();
    assert!(e.contains("goes past the end") && e.contains("incomplete image"), "{e}");
    assert_eq!(e.matches("incomplete image").count(), 1, "said once: {e}");
    let j = record(&o);
    assert_eq!(j["device_holds_unverified_bytes"], true, "{j}");
    // Nothing before the offset changed; what landed is the image's head, and nothing
    // past the device's end was attempted (the device is its size).
    let all = dev.read(0, dev_size);
    assert!(all[..offset as usize] == pat[..offset as usize]);
    let landed = &all[offset as usize..];
    let body = srv.body();
    let same = landed.iter().zip(body).take_while(|(a, b)| a == b).count();
    assert!(same > 0, "no byte of the image landed");
}

#[test]
fn checksum_is_verified_by_reading_the_device_back() {
    let dir = TestDir::new("blockdev-checksum");
    let dev_size = 16 * MIB;
    let Some(dev) = LoopDev::attach(&dir, dev_size, 905) else {
        return;
    };
    let pat = pattern(dev_size, 905);
    let n = nginx();
    let f = n.file(4 * MIB);
    let image = fs::read(n.www().join(&f.name)).unwrap();
    let offset = 2 * MIB;
    // (Named by a symbolic link, as /dev/disk/by-partlabel/… names a partition: the
    // read-back opens the device the link leads to.)
    let link = dir.join("rootfs-b");
    std::os::unix::fs::symlink(&dev.dev, &link).unwrap();
    let good = dir
        .ringdl()
        .args(["-x", "4", "--json", "-", "--offset", &offset.to_string(), "--checksum"])
        .arg(format!("sha-256={}", f.sha256))
        .arg("-o")
        .arg(&link)
        .arg(n.http_url(&f.name))
        .run();
    good.assert_success();
    assert!(good.summary().contains("sha-256 verified"), "{}", good.summary());
    assert_eq!(record(&good)["device_holds_unverified_bytes"], false);
    assert_image_at(&dev, &pat, offset, &image);
    let wrong = "0".repeat(64);
    let bad = dir
        .ringdl()
        .args(["-x", "4", "--json", "-", "--offset", &offset.to_string(), "--checksum"])
        .arg(format!("sha-256={wrong}"))
        .args(["-o", &dev.dev])
        .arg(n.http_url(&f.name))
        .run();
    bad.assert_code(9);
    let e = bad.stderr_text();
    assert!(
        e.contains(&format!("got {}", f.sha256)) && e.contains("failed verification"),
        "{e}"
    );
    let j = record(&bad);
    assert_eq!(j["checksum_verified"], false, "{j}");
    assert_eq!(j["device_holds_unverified_bytes"], true, "{j}");
}

#[test]
fn bad_device_options_are_usage_errors_that_touch_nothing() {
    let dir = TestDir::new("blockdev-usage");
    let Some(dev) = LoopDev::attach(&dir, 4 * MIB, 906) else {
        return;
    };
    let before = dev.sha();
    let url = nginx().http_url(&nginx().file(4096).name);
    for (args, says) in [
        (vec!["--offset", "1000"], "not a multiple of the logical block size"),
        (vec!["--offset", "4194304"], "past the end"),
        (vec!["-c"], "needs --control"),
        (vec!["--engine", "buffered"], "O_DIRECT"),
    ] {
        let o = dir.ringdl().args(&args).args(["-o", &dev.dev]).arg(&url).run();
        o.assert_code(2);
        assert!(o.stderr_text().contains(says), "{args:?}: {}", o.stderr_text());
    }
    assert_eq!(dev.sha(), before);
    // And --offset / --control on a regular file.
    let o = dir.ringdl().args(["--offset", "512", "-o", "f"]).arg(&url).run();
    o.assert_code(2);
}

#[test]
fn kill_9_then_continue_with_control_is_exact() {
    let dir = TestDir::new("blockdev-kill9");
    let dev_size = 32 * MIB;
    let Some(dev) = LoopDev::attach(&dir, dev_size, 907) else {
        return;
    };
    let pat = pattern(dev_size, 907);
    let n = nginx();
    let f = n.file(16 * MIB);
    let image = fs::read(n.www().join(&f.name)).unwrap();
    let control = dir.join("image.control");
    let offset = 4 * MIB;
    let args = |c: bool| {
        let mut v = vec!["-x", "4", "--offset", "4194304", "--control"];
        if c {
            v.insert(0, "-c");
        }
        v
    };
    let killed = dir
        .ringdl()
        .args(args(false))
        .arg(&control)
        .args(["-o", &dev.dev])
        .arg(n.paced_url(&f.name))
        .run_with(|pid| {
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while fs::read_to_string(&control).map_or(0, |t| t.matches("range ").count()) == 0
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(100));
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        });
    assert_ne!(
        killed.code(),
        Some(0),
        "the download ended before its kill: {}",
        killed.stderr_text()
    );
    assert!(control.exists(), "no control file at --control");
    let o = dir
        .ringdl()
        .args(args(true))
        .arg(&control)
        .args(["-o", &dev.dev])
        .arg(n.paced_url(&f.name))
        .run();
    o.assert_success();
    let summary = o.summary();
    assert!(summary.contains("fetched now, the rest resumed"), "{summary}");
    assert_image_at(&dev, &pat, offset, &image);
    assert!(!control.exists(), "the control file outlived the finished image");
}

/// `--signature` over an image written to a device can only be checked once the image is
/// on it: a bad signature (exit 10) leaves the unverified bytes there, and the message and
/// `--json`'s `device_holds_unverified_bytes` say so; a good one says the device holds
/// none. (minisign, prehashed: the signature is checked from the device read back.)
#[test]
fn a_bad_signature_leaves_unverified_bytes_on_the_device_and_says_so() {
    let dir = TestDir::new("blockdev-signature");
    let dev_size = 8 * MIB;
    let Some(dev) = LoopDev::attach(&dir, dev_size, 908) else {
        return;
    };
    let pat = pattern(dev_size, 908);
    let (name, image) = serve("signature", 2 * MIB + 700, 909);
    let served = nginx().www().join(&name);
    let key = crate::signature::minisign_key(dir.path(), "release");
    let sig = dir.join("image.minisig");
    crate::signature::minisign_sign(&key, &served, &sig, false);
    let offset = MIB;
    let run = || {
        let o = dir
            .ringdl()
            .args(["-x", "4", "--json", "-", "--offset", &offset.to_string()])
            .arg("--signature")
            .arg(&sig)
            .arg("--trusted-key")
            .arg(&key)
            .args(["-o", &dev.dev])
            .arg(nginx().http_url(&name))
            .run();
        let j = record(&o);
        (o, j)
    };
    let (good, j) = run();
    good.assert_success();
    assert_eq!(j["signature"]["verified"], true, "{j}");
    assert_eq!(j["device_holds_unverified_bytes"], false, "{j}");
    assert_image_at(&dev, &pat, offset, &image);

    // The served image changed after it was signed: written, then refused.
    let mut changed = image.clone();
    changed[image.len() / 2] ^= 0x40;
    fs::write(&served, &changed).unwrap();
    let (bad, j) = run();
    bad.assert_code(10);
    let e = bad.stderr_text();
    assert!(
        e.contains("BAD signature") && e.contains(&format!("the block device {} now holds unverified bytes", dev.dev)),
        "{e}"
    );
    assert_eq!(j["exit_code"], 10, "{j}");
    assert_eq!(j["signature"]["verified"], false, "{j}");
    assert_eq!(j["device_holds_unverified_bytes"], true, "{j}");
    assert_image_at(&dev, &pat, offset, &changed);
    let _ = fs::remove_file(served);
}

/// `--etag-compare` to a device whose `--control` file is there (a run left its image
/// unfinished: killed mid-way over a torn image) sends no condition: the image is fetched
/// whole, exact. It once sent the saved tag, got 304 and ended 0 over the torn image.
#[test]
fn etag_compare_over_an_unfinished_image_sends_no_condition() {
    let dir = TestDir::new("blockdev-etag-unfinished");
    let dev_size = 24 * MIB;
    let Some(dev) = LoopDev::attach(&dir, dev_size, 911) else {
        return;
    };
    let pat = pattern(dev_size, 911);
    let n = nginx();
    let f = n.file(16 * MIB);
    let image = fs::read(n.www().join(&f.name)).unwrap();
    let control = dir.join("image.control");
    let etag = dir.join("image.etag");
    let run = |extra: &[&str], url: &str| {
        let mut c = dir.ringdl();
        c.args(["-x", "4", "--control"])
            .arg(&control)
            .args(extra)
            .args(["-o", &dev.dev])
            .arg(url);
        c
    };
    run(&["--etag-save", "image.etag"], &n.http_url(&f.name))
        .run()
        .assert_success();
    assert!(fs::read_to_string(&etag).unwrap().starts_with('"'));
    // The image torn: zeros over it, then a run killed once part of it landed again.
    fs::OpenOptions::new()
        .write(true)
        .open(&dev.dev)
        .unwrap()
        .write_all(&vec![0; image.len()])
        .unwrap();
    let killed = run(&[], &n.paced_url(&f.name)).run_with(|pid| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while fs::read_to_string(&control).map_or(0, |t| t.matches("range ").count()) == 0
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    });
    assert_ne!(
        killed.code(),
        Some(0),
        "ended before its kill: {}",
        killed.stderr_text()
    );
    assert!(control.exists(), "no control file at --control");
    let o = run(&["-v", "--etag-compare", "image.etag"], &n.http_url(&f.name)).run();
    let err = o.stderr_text();
    o.assert_success();
    assert!(!err.contains("not modified"), "{err}");
    assert!(err.contains("is unfinished; the request is unconditional"), "{err}");
    assert_image_at(&dev, &pat, 0, &image);
}
