//! zchunk (`ringdl::delta::zck`) against files made by the real `zck` (Debian's zchunk):
//! our chunker cuts where zck cuts (random, text-like, zero-filled and mixed files);
//! every chunk of `zck`, `zck -u`, `--compression-format=none`, `-h sha512` and `-D dict`
//! (a trained dictionary from `zck_gen_zdict`, and a raw one) files decodes, and their
//! concatenation is the original exactly; a seed that is an edited copy finds exactly the
//! chunks zck's own index of that copy shares with the target, at offsets holding those
//! bytes, whatever the feed sizes, and so does an older `.zck` as seed; a corrupted header
//! checksum, a truncated header and a corrupted chunk byte are refused with a message
//! naming them. `scan_speed` measures the plain-seed scan on 256 MiB (release).

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use ringdl::delta::zck::{self, Chunker, Zck};
use ringdl::delta::{Found, Index, Piece};

use crate::util::{MIB, TestDir, XorShift};

const ZCK: &str = "/usr/bin/zck";
const ZCK_GEN_ZDICT: &str = "/usr/bin/zck_gen_zdict";

/// Runs `zck ARGS -o OUT IN`; returns OUT's bytes.
fn zck_make(input: &Path, out: &Path, args: &[&str]) -> Vec<u8> {
    assert!(
        Path::new(ZCK).exists(),
        "{ZCK} is missing: apt-get install zchunk (scripts/test.sh does)"
    );
    let st = Command::new(ZCK)
        .args(args)
        .arg("-o")
        .arg(out)
        .arg(input)
        .status()
        .unwrap_or_else(|e| panic!("running {ZCK}: {e}"));
    assert!(st.success(), "zck {args:?} {} failed: {st}", input.display());
    std::fs::read(out).unwrap()
}

/// Random bytes.
fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    XorShift::new(seed).fill(&mut v);
    v
}

/// Text-like bytes: lines of words from a small vocabulary, numbers, repeats.
fn text(len: usize, seed: u64) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "the",
        "chunk",
        "of",
        "zchunk",
        "index",
        "header",
        "seed",
        "delta",
        "image",
        "update",
        "<package>",
        "</package>",
        "name=",
        "version",
        "\"1.2.3\"",
        "arch",
        "x86_64",
        "noarch",
        "files",
        "/usr/bin/",
    ];
    let mut rng = XorShift::new(seed);
    let mut v = Vec::with_capacity(len + 64);
    while v.len() < len {
        let n = 3 + rng.below(12);
        for _ in 0..n {
            v.extend_from_slice(WORDS[rng.below(WORDS.len() as u64) as usize].as_bytes());
            v.push(b' ');
        }
        v.extend_from_slice(format!("{}\n", rng.below(100_000)).as_bytes());
    }
    v.truncate(len);
    v
}

/// Random blocks, zero runs and text, interleaved: a filesystem image's shape.
fn mixed(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = XorShift::new(seed);
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        let n = (4096 + rng.below(300_000)) as usize;
        match rng.below(3) {
            0 => v.extend(random(n, rng.next_u64())),
            1 => v.resize(v.len() + n, 0),
            _ => v.extend(text(n, rng.next_u64())),
        }
    }
    v.truncate(len);
    v
}

/// 9000 random bytes (seed 77) where zck's hash matches at byte 8150, before the 8 KiB
/// minimum, so zck pushes that byte into its window a second time, and matches again at
/// byte 8192 only because the window holds it twice: the first chunk is 8192 bytes
/// (found by search; the unit test `repush_case_pushes_twice_then_cuts` shows the match
/// at 8150).
fn repush_case() -> Vec<u8> {
    let mut data = random(9000, 77);
    (data[8149], data[8150], data[8191], data[8192]) = (82, 29, 193, 51);
    data
}

/// The chunk lengths our chunker cuts `data` into, fed `step` bytes at a time.
fn cut(data: &[u8], step: usize) -> Vec<u64> {
    let mut c = Chunker::new();
    let mut out = Vec::new();
    for mut part in data.chunks(step) {
        while let Some((k, len)) = c.next_cut(part) {
            out.push(len);
            part = &part[k..];
        }
    }
    if c.chunk_len() > 0 {
        out.push(c.chunk_len());
    }
    out
}

/// A parsed index over a whole `.zck` file's bytes.
fn parse(file: &[u8]) -> Zck {
    let n = zck::head_len(file).unwrap().expect("a whole lead") as usize;
    Zck::parse(&file[..n]).unwrap_or_else(|e| panic!("parsing a header zck made: {e}"))
}

/// The target as the index decodes it from the whole file: every chunk opened in turn.
fn decode_all(z: &mut Zck, file: &[u8]) -> Vec<u8> {
    if let Some((a, b)) = z.always_fetch() {
        z.take_always(&file[a as usize..b as usize]).unwrap();
    }
    let mut target = Vec::new();
    let mut out = Vec::new();
    for (i, p) in z.pieces().iter().enumerate() {
        let fetched = &file[p.remote_start as usize..(p.remote_start + p.remote_len) as usize];
        z.open_fetched(i, fetched, &mut out)
            .unwrap_or_else(|e| panic!("chunk {i}: {e}"));
        assert_eq!(out.len() as u64, p.target_len);
        assert!(
            !z.has_uncompressed_digests() || z.matches(i, &out),
            "piece {i} does not match its own bytes"
        );
        target.extend_from_slice(&out);
    }
    target
}

#[test]
fn chunker_cuts_where_zck_cuts() {
    let dir = TestDir::new("zck-chunker");
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("random", random(3 * MIB as usize + 12345, 1)),
        ("text", text(2 * MIB as usize + 777, 2)),
        ("zeros", vec![0u8; MIB as usize + 5]),
        ("mixed", mixed(6 * MIB as usize, 3)),
        ("small", random(9000, 4)),
        ("tiny", b"hello".to_vec()),
        ("repush", repush_case()),
    ];
    for (name, data) in &files {
        let path = dir.join(name);
        std::fs::write(&path, data).unwrap();
        let file = zck_make(
            &path,
            &dir.join(format!("{name}.zck")),
            &["-u", "--compression-format=none"],
        );
        let z = parse(&file);
        let theirs: Vec<u64> = z.pieces().iter().map(|p| p.target_len).collect();
        assert!(theirs.len() > 1 || data.len() < 200_000, "{name}: zck made one chunk");
        for step in [data.len().max(1), 1 << 20, 4099, 1] {
            let ours = cut(data, step);
            let first_diff = ours.iter().zip(&theirs).position(|(a, b)| a != b);
            assert!(
                ours == theirs,
                "{name}, fed {step} bytes at a time: {} chunks where zck cut {}; first difference at chunk {first_diff:?}",
                ours.len(),
                theirs.len()
            );
        }
        if *name == "repush" {
            assert_eq!(
                theirs,
                [8192, 9000 - 8192],
                "zck cuts the crafted case where it was crafted to"
            );
        }
        eprintln!("{name}: {} bytes, {} chunks, as zck cut them", data.len(), theirs.len());
    }
}

/// Makes `name.zck` from `data` with each of zck's forms; with `-D` a dictionary trained
/// by `zck_gen_zdict` on the `-u` file, and a raw one (the first 64 KiB of `data`).
fn variants(dir: &TestDir, name: &str, data: &[u8]) -> Vec<(String, Vec<u8>)> {
    let input = dir.join(name);
    std::fs::write(&input, data).unwrap();
    let mut out = Vec::new();
    let forms: &[&[&str]] = &[
        &[],
        &["-u"],
        &["--compression-format=none"],
        &["-u", "--compression-format=none"],
        &["-h", "sha512"],
        &["-h", "sha256", "-u"],
    ];
    for (k, args) in forms.iter().enumerate() {
        let file = zck_make(&input, &dir.join(format!("{name}.{k}.zck")), args);
        out.push((format!("{name} {args:?}"), file));
    }
    // zck_gen_zdict writes <name>.zdict from the chunks of a .zck, with zstd's trainer.
    let u = dir.join(format!("{name}.1.zck"));
    let st = Command::new(ZCK_GEN_ZDICT)
        .arg(&u)
        .current_dir(dir.path())
        .status()
        .unwrap();
    assert!(st.success(), "zck_gen_zdict failed: {st}");
    let trained = dir.join(format!("{name}.1.zdict"));
    assert!(trained.exists(), "zck_gen_zdict wrote no {}", trained.display());
    let raw = dir.join(format!("{name}.raw-dict"));
    std::fs::write(&raw, &data[..data.len().min(65536)]).unwrap();
    for (tag, dict) in [("trained", &trained), ("raw", &raw)] {
        for args in [&["-u"][..], &[]] {
            let mut a = vec!["-D", dict.to_str().unwrap()];
            a.extend_from_slice(args);
            let file = zck_make(&input, &dir.join(format!("{name}.{tag}{}.zck", args.len())), &a);
            out.push((format!("{name} -D {tag} {args:?}"), file));
        }
    }
    out
}

#[test]
fn every_chunk_decodes_to_the_original() {
    let dir = TestDir::new("zck-decode");
    for (name, data) in [
        ("text", text(3 * MIB as usize, 5)),
        ("mixed", mixed(3 * MIB as usize, 6)),
    ] {
        for (what, file) in variants(&dir, name, &data) {
            let mut z = parse(&file);
            assert_eq!(z.file_len(), file.len() as u64, "{what}: the file's length");
            assert_eq!(z.target_len(), data.len() as u64, "{what}: the target's length");
            let dict = z.always_fetch();
            assert_eq!(dict.is_some(), what.contains("-D"), "{what}: the dictionary");
            let target = decode_all(&mut z, &file);
            assert!(
                target == data,
                "{what}: the chunks decode to other bytes than the original"
            );
            // The data checksum is over the data as stored; absent with -u.
            match z.data_digest() {
                Some((h, d)) => {
                    let all = ring::digest::digest(h.algorithm(), &file[z.head_len() as usize..]);
                    assert_eq!(&all.as_ref()[..h.digest_len()], d, "{what}: data checksum");
                    assert!(!z.has_uncompressed_digests(), "{what}");
                }
                None => assert!(z.has_uncompressed_digests(), "{what}"),
            }
            eprintln!(
                "{what}: {} chunks, {} bytes of header, ok",
                z.pieces().len(),
                z.head_len()
            );
        }
    }
}

/// One row of `zck_read_header -c`: compressed checksum, uncompressed checksum (empty
/// without -u), start, compressed and uncompressed length. Row 0 is the dictionary.
struct Row {
    digest: String,
    uncompressed: String,
    comp_len: u64,
    len: u64,
}

/// The chunk table zck's own reader prints for `file`.
fn read_header(file: &Path) -> Vec<Row> {
    let out = Command::new("/usr/bin/zck_read_header")
        .arg("-c")
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "zck_read_header -c {} failed", file.display());
    let mut rows = Vec::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let t: Vec<&str> = line.split_whitespace().collect();
        if t.len() < 5 || t[0].parse::<u64>().is_err() {
            continue;
        }
        let n = t.len();
        rows.push(Row {
            digest: t[1].to_owned(),
            uncompressed: if n == 6 { t[2].to_owned() } else { String::new() },
            comp_len: t[n - 2].parse().unwrap(),
            len: t[n - 1].parse().unwrap(),
        });
    }
    assert!(
        !rows.is_empty(),
        "no chunk rows from zck_read_header -c {}",
        file.display()
    );
    rows
}

/// `data` with 6 places changed: overwritten, a few bytes inserted, a few deleted.
fn edit(data: &[u8], seed: u64) -> Vec<u8> {
    let mut rng = XorShift::new(seed);
    let mut out = data.to_vec();
    for k in 0..6u64 {
        let at = (k as usize * out.len() / 6) + rng.below(out.len() as u64 / 12) as usize;
        let n = 1024 + rng.below(3 * 1024) as usize;
        let (del, ins) = match k % 3 {
            0 => (n, n),
            1 => (0, n / 4),
            _ => (n / 4, 0),
        };
        out.splice(at..at + del, random(ins, rng.next_u64()));
    }
    out
}

/// Scans `seed` with `z`'s scanner fed `step` bytes at a time.
fn scan(z: &Zck, seed: &[u8], step: usize) -> Vec<Option<Found>> {
    let mut s = z.scanner(None);
    for part in seed.chunks(step.max(1)) {
        s.feed(part);
    }
    let inline = s.finish();
    // The same chunks hashed on a helper thread (as a run on two CPUs does) find the same.
    let helped = std::thread::scope(|scope| {
        let mut s = z.scanner(Some(scope));
        for part in seed.chunks(step.max(1)) {
            s.feed(part);
        }
        s.finish()
    });
    assert_eq!(helped, inline, "hashed on a helper thread");
    inline.to_vec()
}

/// Checks that `found` (from scanning `seed` for `z`, whose target is `data`) holds
/// exactly the pieces in `expected`, each at an offset where the seed holds its bytes
/// (Target) or its compressed chunk (Remote); returns how many.
fn check_found(z: &Zck, data: &[u8], seed: &[u8], found: &[Option<Found>], expected: &HashSet<usize>) -> usize {
    assert_eq!(found.len(), z.pieces().len());
    let mut out = Vec::new();
    for (i, (f, p)) in found.iter().zip(z.pieces()).enumerate() {
        assert_eq!(
            f.is_some(),
            expected.contains(&i),
            "piece {i} ({p:?}): found {f:?}, expected {}",
            expected.contains(&i)
        );
        let want = &data[p.target_start as usize..(p.target_start + p.target_len) as usize];
        match *f {
            Some(Found::Target(at)) => {
                assert!(
                    seed[at as usize..].starts_with(want),
                    "piece {i}: the seed at {at} holds other bytes"
                )
            }
            Some(Found::Remote(at)) => {
                let fetched = &seed[at as usize..(at + p.remote_len) as usize];
                z.open_fetched(i, fetched, &mut out)
                    .unwrap_or_else(|e| panic!("piece {i} from the seed: {e}"));
                assert!(
                    out == want,
                    "piece {i}: the seed's chunk at {at} decodes to other bytes"
                );
            }
            None => {}
        }
    }
    expected.len()
}

#[test]
fn an_edited_copy_finds_exactly_the_unchanged_chunks() {
    let dir = TestDir::new("zck-scan");
    let data = mixed(8 * MIB as usize, 7);
    let seed = edit(&data, 8);
    std::fs::write(dir.join("new"), &data).unwrap();
    std::fs::write(dir.join("old"), &seed).unwrap();
    let target_file = zck_make(&dir.join("new"), &dir.join("new.zck"), &["-u"]);
    let old_u = zck_make(&dir.join("old"), &dir.join("old.u.zck"), &["-u"]);
    let old_zck = zck_make(&dir.join("old"), &dir.join("old.zck"), &[]);
    let z = parse(&target_file);
    let theirs = read_header(&dir.join("new.zck"));
    let old_rows = read_header(&dir.join("old.u.zck"));
    assert_eq!(theirs.len(), z.pieces().len() + 1, "zck_read_header's chunk count");
    for (r, p) in theirs[1..].iter().zip(z.pieces()) {
        assert_eq!(
            (r.comp_len, r.len),
            (p.remote_len, p.target_len),
            "zck_read_header's lengths"
        );
    }
    // What zck's own index of the old copy shares with the new file: by uncompressed
    // checksum for a plain seed, by compressed checksum for the old .zck.
    let old_plain: HashSet<&str> = old_rows[1..].iter().map(|r| r.uncompressed.as_str()).collect();
    let old_comp: HashSet<&str> = old_rows[1..].iter().map(|r| r.digest.as_str()).collect();
    let by_plain: HashSet<usize> = (0..z.pieces().len())
        .filter(|&i| old_plain.contains(theirs[i + 1].uncompressed.as_str()))
        .collect();
    let by_comp: HashSet<usize> = (0..z.pieces().len())
        .filter(|&i| old_comp.contains(theirs[i + 1].digest.as_str()))
        .collect();
    assert_eq!(by_plain, by_comp, "zck compresses equal chunks equally");
    let total = z.pieces().len();
    assert!(
        by_plain.len() + 18 >= total && by_plain.len() + 6 <= total,
        "{} of {total} chunks shared",
        by_plain.len()
    );

    let whole = scan(&z, &seed, seed.len());
    let n = check_found(&z, &data, &seed, &whole, &by_plain);
    for step in [MIB as usize, 65536 + 7, 4099, 1] {
        assert_eq!(scan(&z, &seed, step), whole, "plain seed fed {step} bytes at a time");
    }
    eprintln!("plain seed: {n} of {total} chunks found, as zck's index of the seed says");

    for (what, old) in [("old.zck", &old_zck), ("old.u.zck", &old_u)] {
        let whole = scan(&z, old, old.len());
        let n = check_found(&z, &data, old, &whole, &by_comp);
        for step in [MIB as usize, 4099, 1] {
            assert_eq!(scan(&z, old, step), whole, "{what} as seed fed {step} bytes at a time");
        }
        eprintln!("{what} as seed: {n} of {total} chunks found");
    }

    // Without -u: a plain seed finds nothing, an older .zck still finds its chunks.
    let plain_file = zck_make(&dir.join("new"), &dir.join("new.plain.zck"), &[]);
    let z0 = parse(&plain_file);
    assert!(!z0.has_uncompressed_digests());
    assert!(
        scan(&z0, &seed, MIB as usize).iter().all(Option::is_none),
        "a plain seed matched without -u"
    );
    let found = scan(&z0, &old_zck, MIB as usize);
    check_found(&z0, &data, &old_zck, &found, &by_comp);
}

#[test]
fn a_corrupt_or_truncated_header_is_refused() {
    let dir = TestDir::new("zck-header");
    let data = text(MIB as usize, 9);
    std::fs::write(dir.join("f"), &data).unwrap();
    for args in [&["-u"][..], &[]] {
        let file = zck_make(&dir.join("f"), &dir.join("f.zck"), args);
        let n = zck::head_len(&file).unwrap().unwrap() as usize;
        assert!(Zck::parse(&file[..n]).is_ok());
        // Every prefix of the lead tells "not yet", never a wrong length.
        for k in 0..n {
            match zck::head_len(&file[..k]) {
                Ok(None) => {}
                Ok(Some(m)) => assert_eq!(m as usize, n, "head_len of {k} bytes"),
                Err(e) => panic!("head_len of a {k}-byte prefix: {e}"),
            }
        }
        // A byte changed anywhere in the header (the checksum included): refused.
        for at in [0usize, 5, 7, 20, 60, n / 2, n - 1] {
            let mut bad = file[..n].to_vec();
            bad[at] ^= 0x20;
            let e = Zck::parse(&bad)
                .err()
                .unwrap_or_else(|| panic!("{args:?}: byte {at} changed, parsed"));
            assert!(
                e.contains("checksum") || e.contains("zchunk file") || e.contains("lead") || e.contains("header"),
                "byte {at}: {e}"
            );
            if at >= 8 {
                assert!(e.contains("header checksum"), "byte {at} changed: {e}");
            }
        }
        // Truncated: a byte short, half, the lead alone.
        for k in [n - 1, n / 2, 40] {
            let e = Zck::parse(&file[..k])
                .err()
                .unwrap_or_else(|| panic!("{k} of {n} bytes parsed"));
            assert!(e.contains("cut short"), "{k} of {n} bytes: {e}");
        }
        assert!(
            zck::head_len(b"\x7fELF\x02\x01\x01")
                .unwrap_err()
                .contains("not a zchunk file")
        );
    }
}

#[test]
fn a_corrupt_chunk_is_refused_naming_it() {
    let dir = TestDir::new("zck-chunk");
    let data = mixed(2 * MIB as usize, 10);
    std::fs::write(dir.join("f"), &data).unwrap();
    for args in [&["-u"][..], &[], &["-u", "--compression-format=none"]] {
        let file = zck_make(&dir.join("f"), &dir.join("f.zck"), args);
        let z = parse(&file);
        let mut out = Vec::new();
        for i in [0, z.pieces().len() / 2, z.pieces().len() - 1] {
            let p: Piece = z.pieces()[i];
            let mut fetched = file[p.remote_start as usize..(p.remote_start + p.remote_len) as usize].to_vec();
            z.open_fetched(i, &fetched, &mut out).unwrap();
            fetched[p.remote_len as usize / 2] ^= 1;
            let e = z.open_fetched(i, &fetched, &mut out).unwrap_err();
            let name = format!("chunk {} (target bytes {}..", i + 1, p.target_start);
            assert!(e.contains(&name) && e.contains("checksum"), "{args:?}: {e}");
            assert!(out.is_empty(), "bytes left in out after a refused chunk");
            let mut want = data[p.target_start as usize..(p.target_start + p.target_len) as usize].to_vec();
            assert_eq!(
                z.matches(i, &want),
                z.has_uncompressed_digests(),
                "{args:?}: piece {i}'s own bytes"
            );
            want[0] ^= 1;
            assert!(!z.matches(i, &want), "{args:?}: piece {i} matches a changed byte");
            let e = z.open_fetched(i, &fetched[1..], &mut out).unwrap_err();
            assert!(e.contains("bytes where the index says"), "{e}");
        }
    }
}

/// This thread's CPU time (user + system), seconds, from `/proc/thread-self/stat`
/// (clock ticks, 100 a second): the machine may be shared, so wall time alone says little.
fn thread_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let f: Vec<&str> = stat.rsplit(')').next().unwrap().split_whitespace().collect();
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0
}

/// Measures the plain-seed scan: 256 MiB of random bytes (a seed that matches every chunk
/// of its `zck -u` index: every chunk cut and hashed) in release builds, 16 MiB
/// otherwise, fed 4 MiB at a time. Prints MiB/s of wall and of CPU time; release builds
/// must reach 200 MiB per CPU second. A measurement (speed is measured in benchmarks,
/// not in the suite): `cargo test --release --test tests -- delta_zck::scan_speed
/// --ignored --nocapture`.
#[test]
#[ignore = "a measurement: run it by name with --ignored --nocapture (release build)"]
fn scan_speed() {
    let dir = TestDir::new("zck-speed");
    let size = if cfg!(debug_assertions) { 16 } else { 256 } * MIB as usize;
    let data = random(size, 11);
    std::fs::write(dir.join("f"), &data).unwrap();
    let file = zck_make(&dir.join("f"), &dir.join("f.zck"), &["-u", "--compression-format=none"]);
    let z = parse(&file);
    let mib = size as f64 / MIB as f64;
    let (t, cpu) = (Instant::now(), thread_cpu());
    let found = scan(&z, &data, 4 * MIB as usize);
    let (wall, cpu) = (t.elapsed().as_secs_f64(), thread_cpu() - cpu);
    assert!(found.iter().all(Option::is_some));
    let rate = mib / cpu.max(0.01);
    eprintln!(
        "plain seed scan, {mib} MiB, {} chunks: {wall:.3} s wall ({:.0} MiB/s), {cpu:.2} s CPU ({rate:.0} MiB/s)",
        found.len(),
        mib / wall
    );
    // The parts: zck's chunker alone, SHA-256 alone (ring).
    let cpu0 = thread_cpu();
    let n = cut(&data, 4 * MIB as usize).len();
    let cpu1 = thread_cpu();
    let _ = ring::digest::digest(&ring::digest::SHA256, &data);
    let cpu2 = thread_cpu();
    eprintln!(
        "  chunker alone ({n} chunks): {:.2} s CPU; SHA-256 alone: {:.2} s CPU",
        cpu1 - cpu0,
        cpu2 - cpu1
    );
    // Without -u a plain seed is not even cut.
    let z0 = parse(&zck_make(
        &dir.join("f"),
        &dir.join("f0.zck"),
        &["--compression-format=none"],
    ));
    let t = Instant::now();
    assert!(scan(&z0, &data, 4 * MIB as usize).iter().all(Option::is_none));
    eprintln!("  without -u: {:.3} s wall", t.elapsed().as_secs_f64());
    if !cfg!(debug_assertions) {
        assert!(rate >= 200.0, "plain seed scan at {rate:.0} MiB per CPU second");
    }
}
