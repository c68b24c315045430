//! zsync control files made by the real `zsyncmake` (Debian's zsync 0.6.2) over files made
//! here, read by `ringdl::delta::zsync`, and seeds searched for their blocks, compared with
//! the real `zsync` client on the same seed. With a control file whose URL is relative and
//! read from disk, `zsync -i SEED` takes what the seed holds and then cannot fetch the
//! rest: it leaves `OUT.part` holding exactly the blocks it reused (the others are holes),
//! or `OUT` when the seed held them all. Checked: every header field and block sum, blocks
//! found in a seed equal to zsync's block for block (edits, shifts, truncation, repeats,
//! zero blocks), the target assembled from them and the original's other blocks has the
//! control file's SHA-1, and damaged control files are refused or refuse the damaged block.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ringdl::delta::zsync::Zsync;
use ringdl::delta::{Found, Index};

use crate::util::{self, TestDir, XorShift};

/// Debian's zsync package (scripts/test.sh installs it).
const ZSYNCMAKE: &str = "/usr/bin/zsyncmake";
const ZSYNC: &str = "/usr/bin/zsync";

fn tools() {
    for t in [ZSYNCMAKE, ZSYNC] {
        assert!(
            Path::new(t).exists(),
            "{t} is missing (apt-get install zsync): {}",
            util::INSTALL_HINT
        );
    }
}

fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0; len];
    XorShift::new(seed).fill(&mut v);
    v
}

/// Writes `data` to `dir/name` and runs `zsyncmake ARGS -o name.zsync name` there;
/// returns the control file.
fn zsyncmake(dir: &Path, name: &str, data: &[u8], args: &[&str]) -> Vec<u8> {
    std::fs::write(dir.join(name), data).unwrap();
    let control = format!("{name}.zsync");
    let out = Command::new(ZSYNCMAKE)
        .args(args)
        .args(["-o", &control, name])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "zsyncmake {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(dir.join(control)).unwrap()
}

/// What the real client reuses from `seed` for `control`: per block, whether `OUT.part`
/// (or `OUT`, when it needed nothing more) holds the block's bytes, and the percentage
/// it printed ("Target N% complete").
fn zsync_reuses(dir: &Path, run: &str, control: &[u8], seed: &[u8], target: &[u8], bs: usize) -> (Vec<bool>, String) {
    let work = dir.join(run);
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("t.zsync"), control).unwrap();
    std::fs::write(work.join("seed"), seed).unwrap();
    let out = Command::new(ZSYNC)
        .args(["-i", "seed", "-o", "out", "t.zsync"])
        .current_dir(&work)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    let percent = said
        .split("Target ")
        .nth(1)
        .and_then(|s| s.split('%').next())
        .unwrap_or_else(|| panic!("zsync said no \"Target N%\": {said}"))
        .to_owned();
    let got: PathBuf = if work.join("out").exists() {
        work.join("out")
    } else {
        work.join("out.part")
    };
    let got = std::fs::read(&got).unwrap_or_else(|e| panic!("{}: {e}; zsync said {said}", got.display()));
    assert_eq!(got.len(), target.len(), "zsync's output length");
    let reused = target.chunks(bs).zip(got.chunks(bs)).map(|(t, g)| t == g).collect();
    (reused, percent)
}

/// zsync's progress figure for `got` of `blocks` blocks (`100.0f * done / total`, `%.1f`).
fn percent(got: usize, blocks: usize) -> String {
    format!("{:.1}", f64::from(100.0f32 * got as f32 / blocks as f32))
}

fn scan_feeds(z: &Zsync, seed: &[u8], feed: usize) -> Vec<Option<Found>> {
    let mut s = z.scanner(None);
    for chunk in seed.chunks(feed) {
        s.feed(chunk);
    }
    s.finish().to_vec()
}

fn scan(z: &Zsync, seed: &[u8]) -> Vec<Option<Found>> {
    scan_feeds(z, seed, 1 << 20)
}

/// The target from the seed's found blocks and `original`'s others.
fn assemble(z: &Zsync, found: &[Option<Found>], seed: &[u8], original: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(original.len());
    for (p, f) in z.pieces().iter().zip(found) {
        let (start, len) = (p.target_start as usize, p.target_len as usize);
        match *f {
            Some(Found::Target(o)) => out.extend_from_slice(&seed[o as usize..o as usize + len]),
            _ => out.extend_from_slice(&original[start..start + len]),
        }
    }
    out
}

fn sha1(data: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, data)
        .as_ref()
        .to_vec()
}

/// The value of header `key` in a control file's text.
fn header<'a>(control: &'a [u8], key: &str) -> Vec<&'a str> {
    let end = control.windows(2).position(|w| w == b"\n\n").unwrap();
    std::str::from_utf8(&control[..end])
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix(": "))
        .collect()
}

#[test]
fn reads_what_zsyncmake_writes() {
    tools();
    let dir = TestDir::new("delta_zsync_reads");
    let cases: &[(usize, &[&str], usize)] = &[
        (300_000, &[], 2048),
        (300_000, &["-b", "4096", "-u", "http://example.com/files/t.bin"], 4096),
        (
            1 << 20,
            &["-b", "2048", "-u", "t.bin", "-u", "https://mirror.example.org/t.bin"],
            2048,
        ),
        (1_000_001, &["-b", "1024"], 1024),
        (2048, &[], 2048),
        (100, &["-b", "512"], 512),
        (0, &[], 2048),
    ];
    for (k, &(len, args, bs)) in cases.iter().enumerate() {
        let data = random(len, k as u64);
        let control = zsyncmake(dir.path(), "t.bin", &data, args);
        let z = Zsync::parse(&control).unwrap_or_else(|e| panic!("case {k}: {e}"));
        assert_eq!(z.block_size(), bs as u64);
        assert_eq!(z.target_len(), len as u64);
        assert_eq!(z.filename(), Some("t.bin"));
        let urls: Vec<&str> = args.chunks(2).filter(|a| a[0] == "-u").map(|a| a[1]).collect();
        assert_eq!(z.urls(), if urls.is_empty() { vec!["t.bin"] } else { urls });
        let (seq, rsum, ck) = z.hash_lengths();
        assert_eq!(header(&control, "Hash-Lengths"), [format!("{seq},{rsum},{ck}")]);
        assert_eq!(seq, if len > bs { 2 } else { 1 }, "zsyncmake's rule");
        assert_eq!(
            z.whole_digests(),
            [(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, sha1(&data))]
        );
        assert_eq!(z.pieces().len(), len.div_ceil(bs));
        let mut out = Vec::new();
        for (i, (p, block)) in z.pieces().iter().zip(data.chunks(bs)).enumerate() {
            assert_eq!((p.target_start, p.target_len), ((i * bs) as u64, block.len() as u64));
            z.open_fetched(i, block, &mut out)
                .unwrap_or_else(|e| panic!("case {k}: {e}"));
            assert_eq!(out, block);
        }
    }
}

#[test]
fn the_original_is_found_whole_in_any_feed_sizes() {
    tools();
    let dir = TestDir::new("delta_zsync_whole");
    for (k, (len, args)) in [
        (300_000, &[][..]),
        (262_144, &["-b", "4096"][..]),
        (7000, &["-b", "512"][..]),
    ]
    .into_iter()
    .enumerate()
    {
        let data = random(len, 100 + k as u64);
        let z = Zsync::parse(&zsyncmake(dir.path(), "t.bin", &data, args)).unwrap();
        let want: Vec<_> = z.pieces().iter().map(|p| Some(Found::Target(p.target_start))).collect();
        for feed in [1 << 20, 4093, 7, 1] {
            if feed == 1 && len > 10_000 {
                continue;
            }
            assert_eq!(scan_feeds(&z, &data, feed), want, "len {len} feed {feed}");
        }
    }
}

/// A seed made from `data` by `edit`.
type Edit = fn(&mut Vec<u8>);

const EDITS: &[(&str, Edit)] = &[
    ("unchanged", |_| {}),
    ("bytes changed in five places", |s| {
        for at in [0, 5000, 150_001, 400_000, 599_999] {
            s[at] ^= 0x55;
        }
    }),
    ("an insertion shifts what follows", |s| {
        s.splice(100_000..100_000, *b"inserted").for_each(drop);
    }),
    ("a deletion shifts what follows", |s| {
        s.drain(200_000..200_777).for_each(drop);
    }),
    ("insert, delete and change", |s| {
        s.splice(50_000..50_000, vec![7; 3000]).for_each(drop);
        s.drain(300_000..301_000).for_each(drop);
        s[450_000] ^= 1;
    }),
    ("truncated inside the last blocks", |s| s.truncate(s.len() - 3000)),
    ("a prefix shifts everything", |s| {
        s.splice(0..0, random(12_345, 77)).for_each(drop);
    }),
    ("two regions swapped", |s| {
        let a: Vec<u8> = s[100_000..200_000].to_vec();
        let b: Vec<u8> = s[300_000..400_000].to_vec();
        s[100_000..200_000].copy_from_slice(&b);
        s[300_000..400_000].copy_from_slice(&a);
    }),
    ("another file", |s| *s = random(s.len(), 78)),
];

#[test]
fn edited_seeds_reuse_what_zsync_reuses() {
    tools();
    let dir = TestDir::new("delta_zsync_edits");
    for (k, (len, args, bs)) in [
        (600_000, &[][..], 2048),
        (600_001, &["-b", "1024"][..], 1024),
        (600_000, &["-b", "4096"][..], 4096),
    ]
    .into_iter()
    .enumerate()
    {
        let data = random(len, 200 + k as u64);
        let control = zsyncmake(dir.path(), "t.bin", &data, args);
        let z = Zsync::parse(&control).unwrap();
        let want_sha1 = &z.whole_digests()[0].1;
        for (e, (what, edit)) in EDITS.iter().enumerate() {
            let mut seed = data.clone();
            edit(&mut seed);
            let found = scan(&z, &seed);
            let ours: Vec<bool> = found.iter().map(Option::is_some).collect();
            let (theirs, said) = zsync_reuses(dir.path(), &format!("run-{k}-{e}"), &control, &seed, &data, bs);
            let got = ours.iter().filter(|&&f| f).count();
            let lost: Vec<usize> = (0..ours.len()).filter(|&i| ours[i] != theirs[i]).collect();
            assert!(
                lost.is_empty(),
                "bs {bs}, {what}: blocks found differently from zsync: {lost:?}"
            );
            assert_eq!(said, percent(got, ours.len()), "bs {bs}, {what}: zsync's count");
            let target = assemble(&z, &found, &seed, &data);
            assert_eq!(&sha1(&target), want_sha1, "bs {bs}, {what}: assembled target");
            eprintln!("bs {bs}, {what}: {got} of {} blocks found, as zsync", ours.len());
        }
    }
}

#[test]
fn repeats_and_zero_blocks_as_zsync() {
    tools();
    let dir = TestDir::new("delta_zsync_repeats");
    // An image-like target: zero blocks, a block-aligned repeat, an unaligned repeat.
    let mut data = random(300_000, 300);
    data[20_480..61_440].fill(0);
    data[100_000..140_000].fill(0);
    let (a, b) = data.split_at_mut(200_000);
    b[..30_000].copy_from_slice(&a[150_000..180_000]);
    data[250_000..260_000].copy_from_slice(&random(10_000, 301));
    data.extend_from_slice(&[0; 5000]);
    let control = zsyncmake(dir.path(), "t.bin", &data, &["-b", "1024"]);
    let z = Zsync::parse(&control).unwrap();
    let bs = 1024;
    let seeds: [(&str, Vec<u8>); 4] = [
        ("itself", data.clone()),
        ("zeros moved", {
            let mut s = data.clone();
            s.drain(30_000..31_000);
            s.extend_from_slice(&[0; 70_000]);
            s
        }),
        ("repeat changed", {
            let mut s = data.clone();
            s[205_000] ^= 1;
            s.splice(0..0, vec![0; 777]).for_each(drop);
            s
        }),
        ("only zeros", vec![0; 100_000]),
    ];
    for (e, (what, seed)) in seeds.iter().enumerate() {
        let found = scan(&z, seed);
        let (theirs, said) = zsync_reuses(dir.path(), &format!("run-{e}"), &control, seed, &data, bs);
        for (i, block) in data.chunks(bs).enumerate() {
            if block.iter().any(|&b| b != 0) {
                assert_eq!(found[i].is_some(), theirs[i], "{what}: block {i}");
            }
        }
        let got = found.iter().filter(|f| f.is_some()).count();
        assert_eq!(said, percent(got, found.len()), "{what}: zsync's count");
        assert_eq!(
            sha1(&assemble(&z, &found, seed, &data)),
            z.whole_digests()[0].1,
            "{what}"
        );
    }
}

#[test]
fn a_run_stops_at_a_block_found_before_it_began() {
    // Target: blocks A B C D E F. Seed: D E, then A B C D E F. zsync finds D E first; A B
    // starts a run that goes on only to D (found before the run began); from there it
    // searches byte by byte for pairs of blocks not yet found, and F, the last, is only
    // ever the second of a pair: zsync does not reuse it, nor does the scanner.
    tools();
    let dir = TestDir::new("delta_zsync_run");
    let data = random(6 * 2048, 600);
    let control = zsyncmake(dir.path(), "t.bin", &data, &[]);
    let z = Zsync::parse(&control).unwrap();
    assert_eq!(z.hash_lengths().0, 2);
    let seed = [&data[3 * 2048..5 * 2048], &data[..]].concat();
    let found = scan(&z, &seed);
    let (theirs, _) = zsync_reuses(dir.path(), "run", &control, &seed, &data, 2048);
    assert_eq!(theirs, [true, true, true, true, true, false]);
    assert_eq!(found.iter().map(Option::is_some).collect::<Vec<_>>(), theirs);
}

#[test]
fn damaged_control_files() {
    tools();
    let dir = TestDir::new("delta_zsync_damaged");
    let data = random(100_000, 400);
    let control = zsyncmake(dir.path(), "t.bin", &data, &[]);
    let body = control.windows(2).position(|w| w == b"\n\n").unwrap() + 2;
    let (_, rsum, ck) = Zsync::parse(&control).unwrap().hash_lengths();
    let entry = usize::from(rsum + ck);

    // A block's MD4 changed: the file still parses, but the block is refused when fetched
    // and not found in a seed, as zsync does not find it.
    let mut bad = control.clone();
    bad[body + 7 * entry + usize::from(rsum)] ^= 0x01;
    let z = Zsync::parse(&bad).unwrap();
    let mut out = Vec::new();
    let err = z.open_fetched(7, &data[7 * 2048..8 * 2048], &mut out).unwrap_err();
    assert!(err.contains("block 7 at offset 14336"), "{err}");
    let found = scan(&z, &data);
    let (theirs, _) = zsync_reuses(dir.path(), "run-md4", &bad, &data, &data, 2048);
    assert_eq!(found.iter().map(Option::is_some).collect::<Vec<_>>(), theirs);
    assert!(found[7].is_none() && found[8].is_some());

    for (what, input, want) in [
        ("body cut by a byte", control[..control.len() - 1].to_vec(), "truncated"),
        ("body cut to its header", control[..body].to_vec(), "truncated"),
        ("header cut", control[..body / 2].to_vec(), "truncated in the header"),
        (
            "a byte more",
            [&control[..], &[0]].concat(),
            "bytes after the last block sum",
        ),
        (
            "a lying Length",
            String::from_utf8_lossy(&control[..body])
                .replace("Length: 100000", "Length: 1000000000000000")
                .into_bytes()
                .into_iter()
                .chain(control[body..].iter().copied())
                .collect(),
            "truncated",
        ),
    ] {
        let err = Zsync::parse(&input).err().unwrap_or_else(|| panic!("{what}: parsed"));
        assert!(err.contains(want), "{what}: {err}");
    }
}

/// Scan speed over 256 MiB seeds (random: none of the blocks, 97 % of them, all of them;
/// zeros), release build: `cargo test --release --test tests --
/// delta_zsync::scan_speed --ignored --nocapture`.
#[test]
#[ignore = "a measurement: run it by name with --ignored --nocapture (release build)"]
fn scan_speed() {
    tools();
    let dir = TestDir::new("delta_zsync_speed");
    let size = 256 << 20;
    let data = random(size, 500);
    let control = zsyncmake(dir.path(), "t.bin", &data, &["-b", "4096"]);
    let z = Zsync::parse(&control).unwrap();
    let mut mostly = data.clone();
    let mut rng = XorShift::new(501);
    for _ in 0..20 {
        let at = rng.below(size as u64 - 300_000) as usize;
        mostly[at..at + 270_000].copy_from_slice(&random(270_000, at as u64));
    }
    let other = random(size, 502);
    // This thread's CPU time, ns (the first field of schedstat): the wall time counts
    // the other tests running beside it.
    let cpu = || -> f64 {
        let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
        s.split_whitespace().next().unwrap().parse::<f64>().unwrap() / 1e9
    };
    let mib = size as f64 / f64::from(1 << 20);
    // A target with runs of zero blocks (40 KiB every 400 KiB) and a seed of zeros: once
    // the runs are found, the zero windows must stop at the filter.
    let mut runs = data.clone();
    for at in (0..size).step_by(409_600) {
        runs[at..(at + 40_960).min(size)].fill(0);
    }
    let z_runs = Zsync::parse(&zsyncmake(dir.path(), "runs.bin", &runs, &["-b", "4096"])).unwrap();
    let zeros = vec![0; size];
    let cases = [
        ("no match", &z, &other),
        ("3 % changed", &z, &mostly),
        ("the original", &z, &data),
        ("zeros, zero runs in the target", &z_runs, &zeros),
    ];
    for (what, z, seed) in cases {
        let (t, c) = (std::time::Instant::now(), cpu());
        let found = scan(z, seed);
        let (wall, secs) = (t.elapsed().as_secs_f64(), cpu() - c);
        let n = found.iter().filter(|f| f.is_some()).count();
        eprintln!(
            "{what}: {n} of {} blocks found, {:.0} MiB/s of CPU ({secs:.2} s; wall {wall:.2} s)",
            found.len(),
            mib / secs
        );
    }
}
