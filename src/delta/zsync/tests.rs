//! Unit tests: control files made here the way `zsyncmake` 0.6.2 makes them (the
//! integration tests, `tests/delta_zsync.rs`, use the real tool), scans checked against a
//! plain model of zsync's rules (sums from scratch at every offset, every block a
//! candidate), and the corpus of the `zsync_control` fuzz target.

use super::table::{Known, Table};
use super::*;
use crate::delta::{Found, Index};

/// xorshift64*: test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn bytes(&mut self, n: usize, alphabet: u8) -> Vec<u8> {
        (0..n)
            .map(|_| match alphabet {
                0 => self.next() as u8,
                k => (self.next() % u64::from(k)) as u8,
            })
            .collect()
    }
}

/// `(a, b)` of a block zero-padded to `bs`, mod 2^16 (zsync's `rcksum_calc_rsum_block`).
fn rsum(block: &[u8], bs: usize) -> (u16, u16) {
    let mut padded = block.to_vec();
    padded.resize(bs, 0);
    let a = padded.iter().fold(0u16, |a, &c| a.wrapping_add(u16::from(c)));
    let b = padded.iter().enumerate().fold(0u16, |b, (i, &c)| {
        b.wrapping_add(((bs - i) as u16).wrapping_mul(u16::from(c)))
    });
    (a, b)
}

fn md4_padded(block: &[u8], bs: usize) -> [u8; 16] {
    let mut padded = block.to_vec();
    padded.resize(bs, 0);
    Md4::digest(&padded).into()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A control file for `data` as `zsyncmake` writes it, with the given `Hash-Lengths`.
fn make(data: &[u8], bs: usize, (seq, rsum_bytes, cksum): (u8, u8, u8)) -> Vec<u8> {
    let sha1 = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, data);
    let mut out = format!(
        "zsync: 0.6.2\nFilename: t.bin\nMTime: Sun, 06 Dec 2026 03:34:36 +0000\nBlocksize: {bs}\n\
         Length: {}\nHash-Lengths: {seq},{rsum_bytes},{cksum}\nURL: t.bin\nSHA-1: {}\n\n",
        data.len(),
        hex(sha1.as_ref())
    )
    .into_bytes();
    for block in data.chunks(bs) {
        let (a, b) = rsum(block, bs);
        let r = [(a >> 8) as u8, a as u8, (b >> 8) as u8, b as u8];
        out.extend_from_slice(&r[4 - usize::from(rsum_bytes)..]);
        out.extend_from_slice(&md4_padded(block, bs)[..usize::from(cksum)]);
    }
    out
}

/// The header of a control file (up to the empty line) with `body` after it.
fn with_header(header: &str, body: &[u8]) -> Vec<u8> {
    let mut v = header.as_bytes().to_vec();
    v.extend_from_slice(body);
    v
}

fn scan_chunks(z: &Zsync, seed: &[u8], mut chunk: impl FnMut(usize) -> usize) -> Vec<Option<Found>> {
    let mut s = z.scanner(None);
    let mut at = 0;
    let mut k = 0;
    while at < seed.len() {
        let n = chunk(k).clamp(1, seed.len() - at);
        s.feed(&seed[at..at + n]);
        at += n;
        k += 1;
    }
    s.finish().to_vec()
}

fn scan(z: &Zsync, seed: &[u8]) -> Vec<Option<Found>> {
    scan_chunks(z, seed, |_| usize::MAX)
}

/// zsync's rules without its machinery: the sums computed afresh at every offset, every
/// block not yet found a candidate in ascending order, the seed zero-padded.
fn model(z: &Zsync, seed: &[u8]) -> Vec<Option<Found>> {
    let bs = z.block_size as usize;
    let seq2 = z.seq_matches == 2;
    let context = if seq2 { 2 * bs } else { bs };
    let n = z.rsums.len();
    let mut data = seed.to_vec();
    data.resize(seed.len() + context, 0);
    // a(x) and b(x) from prefix sums of d_k and k·d_k (mod 2^64, compared mod 2^16).
    let (mut p1, mut p2) = (vec![0u64], vec![0u64]);
    for (k, &d) in data.iter().enumerate() {
        p1.push(p1[k].wrapping_add(u64::from(d)));
        p2.push(p2[k].wrapping_add(k as u64 * u64::from(d)));
    }
    let weak = |at: usize| {
        let a = p1[at + bs].wrapping_sub(p1[at]);
        let b = ((bs + at) as u64)
            .wrapping_mul(a)
            .wrapping_sub(p2[at + bs].wrapping_sub(p2[at]));
        ((a as u32 & 0xffff) << 16 | (b as u32 & 0xffff)) & z.rsum_mask()
    };
    let strong = |at: usize, id: usize| z.strong_matches(id, &data[at..at + bs]);
    let mut known = vec![false; n];
    let mut found = vec![None; n];
    let mut take = |id: usize, at: usize, known: &mut Vec<bool>| {
        known[id] = true;
        if found[id].is_none() {
            found[id] = Some((at + z.piece(id).target_len as usize <= seed.len()).then_some(at));
        }
    };
    // Every block that may start a match, by its stored sums (and its successor's).
    let mut by_sums: std::collections::HashMap<(u32, u32), Vec<usize>> = Default::default();
    for id in 0..if seq2 { n.saturating_sub(1) } else { n } {
        let w1 = if seq2 { z.rsums[id + 1] } else { 0 };
        by_sums.entry((z.rsums[id], w1)).or_default().push(id);
    }
    let (mut x, mut next_match, mut run_next_known) = (0, None, n);
    while x < seed.len() {
        if let Some(j) = next_match.take()
            && z.rsums[j] == weak(x)
            && strong(x, j)
        {
            take(j, x, &mut known);
            next_match = (run_next_known > j + 1).then_some(j + 1);
            x += bs;
            continue;
        }
        let mut matched = false;
        let (w0, w1) = (weak(x), if seq2 { weak(x + bs) } else { 0 });
        for &id in by_sums.get(&(w0, w1)).map_or(&[][..], Vec::as_slice) {
            let ok = !known[id] && strong(x, id) && (!seq2 || strong(x + bs, id + 1));
            if !ok {
                continue;
            }
            matched = true;
            if !seq2 {
                take(id, x, &mut known);
                continue;
            }
            let next_known = (id..n).find(|&k| known[k]).unwrap_or(n);
            for k in id..next_known.min(id + 2) {
                take(k, x + (k - id) * bs, &mut known);
            }
            if next_known > id + 2 {
                next_match = Some(id + 2);
                run_next_known = next_known;
            }
        }
        x += if matched { context } else { 1 };
    }
    found
        .into_iter()
        .map(|f| f.flatten().map(|o| Found::Target(o as u64)))
        .collect()
}

/// Rebuilds the target from the seed's found blocks and `original`'s other blocks.
fn assemble(z: &Zsync, found: &[Option<Found>], seed: &[u8], original: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for (p, f) in z.pieces().iter().zip(found) {
        let (s, l) = (p.target_start as usize, p.target_len as usize);
        match f {
            Some(Found::Target(o)) => out.extend_from_slice(&seed[*o as usize..*o as usize + l]),
            _ => out.extend_from_slice(&original[s..s + l]),
        }
    }
    out
}

#[test]
fn parses_header_and_block_sums() {
    let data = Rng(1).bytes(10_000, 0);
    let z = Zsync::parse(&make(&data, 2048, (2, 2, 3))).unwrap();
    assert_eq!(z.urls(), ["t.bin"]);
    assert_eq!(z.filename(), Some("t.bin"));
    assert_eq!(z.mtime(), Some("Sun, 06 Dec 2026 03:34:36 +0000"));
    assert_eq!(z.block_size(), 2048);
    assert_eq!(z.hash_lengths(), (2, 2, 3));
    assert_eq!(z.target_len(), 10_000);
    let p = z.pieces();
    assert_eq!(p.len(), 5);
    assert_eq!(
        p[4],
        Piece {
            target_start: 8192,
            target_len: 1808,
            remote_start: 8192,
            remote_len: 1808
        }
    );
    assert!(
        p.windows(2)
            .all(|w| w[0].target_start + w[0].target_len == w[1].target_start)
    );
    assert!(
        p.iter()
            .all(|p| p.remote_start == p.target_start && p.remote_len == p.target_len)
    );
    let (_, b) = rsum(&data[..2048], 2048);
    assert_eq!(z.rsums[0], u32::from(b), "rsum_bytes 2 keeps b alone");
    let sha1 = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &data);
    let d = z.whole_digests();
    assert_eq!(d.len(), 1);
    assert!(std::ptr::eq(d[0].0, &ring::digest::SHA1_FOR_LEGACY_USE_ONLY));
    assert_eq!(d[0].1, sha1.as_ref());
}

#[test]
fn optional_headers_and_defaults() {
    let data = Rng(2).bytes(3000, 0);
    let full = make(&data, 1024, (1, 4, 16));
    let body = &full[full.windows(2).position(|w| w == b"\n\n").unwrap() + 2..];
    let sha256 = hex(ring::digest::digest(&ring::digest::SHA256, &data).as_ref());
    let text = format!(
        "zsync: 0.8.0\nSafe: Foo,Bar-Baz\nBlocksize: 1024\nLength: 3000\nFoo: x\nURL: http://a/t\n\
         URL: t\nStrong-Hash-Algorithm: MD4\nFile-Hash: SHA-256:{sha256}\r\nBar-Baz: y \n\n"
    );
    let z = Zsync::parse(&with_header(&text, body)).unwrap();
    assert_eq!(z.hash_lengths(), (1, 4, 16), "no Hash-Lengths: zsync's defaults");
    assert_eq!(z.urls(), ["http://a/t", "t"]);
    assert_eq!(z.filename(), None);
    let d = z.whole_digests();
    assert_eq!(d.len(), 1);
    assert!(std::ptr::eq(d[0].0, &ring::digest::SHA256));
    assert_eq!(hex(&d[0].1), sha256);
    // zsyncmake's space-separated Safe list, with its stray colon.
    let text = "zsync: 0.6.2\nSafe: Z-Filename Recompress MTime:\nZ-Filename: t.gz\nBlocksize: 1024\n\
                Length: 3000\nHash-Lengths: 1,4,16\n\n";
    assert!(Zsync::parse(&with_header(text, body)).is_ok());
    // An empty target: no blocks.
    let z = Zsync::parse(&make(b"", 2048, (1, 2, 3))).unwrap();
    assert!(z.pieces().is_empty());
    assert_eq!(scan(&z, b"abc"), []);
}

#[test]
fn refuses_bad_headers() {
    let body = &make(&[7; 100], 2048, (1, 4, 16))[..];
    let body = &body[body.windows(2).position(|w| w == b"\n\n").unwrap() + 2..];
    let base = "Blocksize: 2048\nLength: 100\n";
    let cases: &[(&str, &str)] = &[
        ("", "empty"),
        (
            "zsync: 0.6.2\nBlocksize: 2048\nLength: 100\n",
            "truncated in the header",
        ),
        ("\n", "line 1 is empty"),
        ("Blocksize: 2048\nzsync: 0.6.2\n\n", "line 1 is \"Blocksize:\""),
        ("GIF89a\n\n", "not a zsync control file"),
        ("zsync: 0.0.4\nBlocksize: 2048\nLength: 100\n\n", "0.0.4"),
        ("zsync: 0.6.2\nMin-Version: 0.7.0\n", "needs zsync 0.7.0"),
        ("zsync: 0.6.2\nLength: 100\n\n", "no Blocksize:"),
        ("zsync: 0.6.2\nBlocksize: 2048\n\n", "no Length:"),
        ("zsync: 0.6.2\nBlocksize: 1000\nLength: 100\n\n", "not a power of two"),
        ("zsync: 0.6.2\nBlocksize: 0\nLength: 100\n\n", "not a power of two"),
        (
            "zsync: 0.6.2\nBlocksize: 33554432\nLength: 100\n\n",
            "not a power of two from 1 to",
        ),
        ("zsync: 0.6.2\nBlocksize: 2048\nLength: -1\n\n", "not a decimal number"),
        (
            "zsync: 0.6.2\nBlocksize: 2048\nLength: 99999999999999999999999\n\n",
            "too large",
        ),
        ("zsync: 0.6.2\nBlocksize: 2048\nBlocksize: 2048\n", "given twice"),
        ("zsync: 0.6.2\nHash-Lengths: 3,4,16\n", "seq_matches 3"),
        ("zsync: 0.6.2\nHash-Lengths: 2,0,16\n", "rsum_bytes 0"),
        ("zsync: 0.6.2\nHash-Lengths: 2,4,17\n", "checksum_bytes 17"),
        ("zsync: 0.6.2\nHash-Lengths: 2,4\n", "three numbers"),
        ("zsync: 0.6.2\nHash-Lengths: 2,4,16,1\n", "three numbers"),
        ("zsync: 0.6.2\nSHA-1: abc\n", "not 40 hex digits"),
        (
            "zsync: 0.6.2\nSHA-1: zz39a3ee5e6b4b0d3255bfef95601890afd80709\n",
            "not hex",
        ),
        ("zsync: 0.6.2\nFile-Hash: MD5:00\n", "not SHA-1:HEX or SHA-256:HEX"),
        (
            "zsync: 0.6.2\nStrong-Hash-Algorithm: SHA-224\n",
            "not supported (MD4 only)",
        ),
        ("zsync: 0.6.2\nZ-URL: t.gz\n", "gzip mode"),
        ("zsync: 0.6.2\nZ-Map2: 3\n", "gzip mode"),
        (
            "zsync: 0.6.2\nSafe: Recompress\nRecompress: 1f8b x --best\n",
            "gzip mode",
        ),
        (
            "zsync: 0.6.2\nX-Future: 1\nBlocksize: 2048\nLength: 100\n\n",
            "line 2: unknown header \"X-Future\"",
        ),
        (
            "zsync: 0.6.2\nSafe: X-Futur\nX-Future: 1\nBlocksize: 2048\nLength: 100\n\n",
            "unknown header",
        ),
        ("zsync: 0.6.2\nBlocksize 2048\n", "line 2: not \"Key: value\""),
        ("zsync: 0.6.2\nBlocksize:2048\n", "line 2: not \"Key: value\""),
        ("zsync: 0.6.2\nURL: \u{0}\u{1}\n", "truncated"),
        (
            "zsync: 0.6.2\n\r\nBlocksize: 2048\nLength: 100\n\n",
            "line 2: not \"Key: value\"",
        ),
    ];
    for (header, want) in cases {
        let input = if header.ends_with("\n\n") {
            with_header(header, body)
        } else {
            header.as_bytes().to_vec()
        };
        let err = Zsync::parse(&input)
            .err()
            .unwrap_or_else(|| panic!("{header:?} parsed"));
        assert!(err.contains(want), "{header:?}: {err:?} does not say {want:?}");
    }
    let bad_utf8 = with_header("zsync: 0.6.2\nFilename: \u{e9}\n", b"");
    let bad_utf8 = [&bad_utf8[..23], &[0xff], &bad_utf8[23..]].concat();
    assert!(Zsync::parse(&bad_utf8).unwrap_err().contains("line 2: not UTF-8"));
    let _ = base;
}

#[test]
fn body_must_hold_exactly_the_blocks() {
    let data = Rng(3).bytes(10_000, 0);
    let full = make(&data, 2048, (2, 3, 5));
    assert!(Zsync::parse(&full).is_ok());
    let header_end = full.windows(2).position(|w| w == b"\n\n").unwrap() + 2;
    assert_eq!(full.len() - header_end, 5 * 8);
    for cut in [1, 8, 39] {
        let err = Zsync::parse(&full[..full.len() - cut]).unwrap_err();
        assert!(err.contains("truncated") && err.contains("40 bytes"), "{err}");
    }
    let mut long = full.clone();
    long.push(0);
    let err = Zsync::parse(&long).unwrap_err();
    assert!(err.contains("bytes after the last block sum"), "{err}");
    // A lying Length: far more blocks than the body holds is an error, not an allocation.
    let text = String::from_utf8_lossy(&full[..header_end]).replace("Length: 10000", "Length: 18446744073709551615");
    let err = Zsync::parse(&with_header(&text, &full[header_end..])).unwrap_err();
    assert!(
        err.contains("truncated") && err.contains("9007199254740992 block sums"),
        "{err}"
    );
    let text = String::from_utf8_lossy(&full[..header_end]).replace("Length: 10000", "Length: 8192");
    let err = Zsync::parse(&with_header(&text, &full[header_end..])).unwrap_err();
    assert!(err.contains("bytes after the last block sum"), "{err}");
}

#[test]
fn open_fetched_checks_the_block() {
    let data = Rng(4).bytes(5000, 0);
    let z = Zsync::parse(&make(&data, 1024, (2, 2, 4))).unwrap();
    let mut out = vec![1, 2, 3];
    for (i, p) in z.pieces().iter().enumerate() {
        let block = &data[p.target_start as usize..][..p.target_len as usize];
        z.open_fetched(i, block, &mut out).unwrap();
        assert_eq!(out, block);
        assert!(z.matches(i, block));
    }
    let mut bad = data[4096..].to_vec();
    bad[100] ^= 0x20;
    let err = z.open_fetched(4, &bad, &mut out).unwrap_err();
    assert!(err.contains("block 4 at offset 4096") && err.contains("MD4"), "{err}");
    assert!(out.is_empty(), "a refused block leaves nothing in out");
    assert!(!z.matches(4, &bad));
    let err = z.open_fetched(4, &data[4096..4999], &mut out).unwrap_err();
    assert!(err.contains("903 bytes fetched, the block has 904"), "{err}");
    assert!(!z.matches(4, &data[4096..4999]));
    // The last block zero-padded is not the block: its length is checked.
    let mut padded = data[4096..].to_vec();
    padded.resize(1024, 0);
    assert!(!z.matches(4, &padded));
    assert!(z.open_fetched(5, &[], &mut out).unwrap_err().contains("no block 5"));
    assert!(!z.matches(5, &[]));
}

#[test]
fn original_as_seed_finds_every_block_in_place() {
    for (len, bs, lengths) in [
        (10_000, 2048, (2, 2, 3)),
        (65_536, 1024, (2, 3, 5)),
        (2048, 2048, (1, 2, 4)),
        (777, 2048, (1, 2, 4)),
        (100_001, 4096, (2, 4, 16)),
        (5000, 512, (1, 4, 8)),
    ] {
        let data = Rng(len as u64).bytes(len, 0);
        let z = Zsync::parse(&make(&data, bs, lengths)).unwrap();
        let found = scan(&z, &data);
        let want: Vec<_> = z.pieces().iter().map(|p| Some(Found::Target(p.target_start))).collect();
        assert_eq!(found, want, "len {len} bs {bs}");
    }
}

#[test]
fn edited_seed_finds_the_blocks_zsync_would() {
    let data = Rng(5).bytes(300_000, 0);
    let z = Zsync::parse(&make(&data, 2048, (2, 2, 3))).unwrap();
    let mut seed = data.clone();
    seed[5000] ^= 1; // block 2
    seed[150_000] ^= 0x80; // block 73
    seed.splice(100_000..100_000, *b"xyz"); // shifts what follows
    seed.drain(200_003..200_103); // and back
    let found = scan(&z, &seed);
    assert_eq!(found, model(&z, &seed));
    let missing: Vec<usize> = (0..found.len()).filter(|&i| found[i].is_none()).collect();
    // Only the blocks holding an edit are lost: after each, the byte-by-byte search meets
    // the next pair of intact blocks where it starts, shifted or not.
    assert_eq!(missing, [2, 48, 73, 97], "{found:?}");
    assert_eq!(
        found[49],
        Some(Found::Target(49 * 2048 + 3)),
        "shifted by the insertion"
    );
    assert_eq!(
        found[98],
        Some(Found::Target(98 * 2048 + 3 - 100)),
        "and by the deletion"
    );
    assert_eq!(assemble(&z, &found, &seed, &data), data);
}

#[test]
fn chunk_sizes_do_not_matter() {
    // Over 700 kB, the seed passes through the scanner's buffer (256 KiB and a window)
    // three times, whatever the feeds.
    let data = Rng(6).bytes(700_000, 0);
    for lengths in [(2, 2, 3), (1, 4, 16)] {
        let z = Zsync::parse(&make(&data, 512, lengths)).unwrap();
        let mut seed = data.clone();
        seed.splice(9000..9000, [1, 2, 3, 4, 5]);
        seed[20_000] ^= 1;
        seed.drain(30_000..30_500);
        seed[262_000..263_000].fill(0);
        seed.splice(524_000..524_000, [9; 700]);
        let whole = scan(&z, &seed);
        assert_eq!(whole, model(&z, &seed));
        assert_eq!(scan_chunks(&z, &seed, |_| 1), whole);
        assert_eq!(scan_chunks(&z, &seed, |_| 7), whole);
        assert_eq!(scan_chunks(&z, &seed, |k| [4093, 1, 512, 1024, 3][k % 5]), whole);
        let mut rng = Rng(9);
        assert_eq!(scan_chunks(&z, &seed, |_| rng.below(3000) + 1), whole);
        assert!(whole.iter().filter(|f| f.is_some()).count() > 1300);
    }
}

#[test]
fn matches_the_model_on_repetitive_data() {
    // Small alphabets, short blocks and short weak sums: duplicate blocks, weak-sum
    // collisions, runs through blocks found earlier, the zero padding at the seed's end.
    let mut rng = Rng(7);
    for case in 0..300 {
        let bs = 1 << (rng.below(4) + 2);
        let alphabet = [2, 3, 0][rng.below(3)];
        let len = rng.below(40 * bs) + 1;
        let mut data = rng.bytes(len, alphabet);
        if rng.below(3) == 0 {
            let n = data.len();
            data[rng.below(n)..].fill(0);
        }
        let seq = if rng.below(4) == 0 { 1 } else { 2 };
        let lengths = (seq, rng.below(4) as u8 + 1, 3);
        let z = Zsync::parse(&make(&data, bs, lengths)).unwrap();
        let mut seed = data.clone();
        for _ in 0..rng.below(4) {
            let at = rng.below(seed.len() + 1);
            match rng.below(3) {
                0 => {
                    let n = rng.below(bs * 2) + 1;
                    seed.splice(at..at, rng.bytes(n, alphabet)).for_each(drop)
                }
                1 => seed.drain(at..(at + rng.below(bs * 2)).min(seed.len())).for_each(drop),
                _ => seed.truncate(at),
            }
        }
        let want = model(&z, &seed);
        let got = scan_chunks(&z, &seed, |k| [1, 3, bs, 1000][k % 4]);
        assert_eq!(got, want, "case {case}: bs {bs} lengths {lengths:?}");
        for (i, f) in got.iter().enumerate() {
            if let Some(Found::Target(o)) = f {
                let p = z.pieces()[i];
                assert!(z.matches(i, &seed[*o as usize..(*o + p.target_len) as usize]));
            }
        }
    }
}

#[test]
fn a_run_stops_at_a_block_found_before_it_began() {
    // Target A B C D E F. The seed holds D E, then the target: D E is found first (its
    // run fails at A); A B starts a run that may go on only up to D, the first found block
    // after A when it began; from D on the search goes byte by byte, finds no pair of
    // blocks not found, and F, the last block, can only be the second of a pair: zsync
    // does not reuse F.
    let bs = 64;
    let data = Rng(13).bytes(6 * bs, 0);
    let z = Zsync::parse(&make(&data, bs, (2, 4, 16))).unwrap();
    let seed = [&data[3 * bs..5 * bs], &data[..]].concat();
    let found = scan(&z, &seed);
    let at = |k: usize| Some(Found::Target(k as u64));
    assert_eq!(found, [at(2 * bs), at(3 * bs), at(4 * bs), at(0), at(bs), None]);
    assert_eq!(model(&z, &seed), found);
}

#[test]
fn block_past_the_seed_end_is_not_reported() {
    // Target: two random blocks then a block of zeros. A seed ending just after the first
    // two blocks matches the third in its zero padding: taken (as zsync does) but its
    // bytes are not in the seed.
    let bs = 256;
    let mut data = Rng(8).bytes(2 * bs, 0);
    data.resize(3 * bs, 0);
    let z = Zsync::parse(&make(&data, bs, (2, 4, 16))).unwrap();
    let found = scan(&z, &data[..2 * bs + 10]);
    assert_eq!(found, [Some(Found::Target(0)), Some(Found::Target(bs as u64)), None]);
    assert_eq!(model(&z, &data[..2 * bs + 10]), found);
    assert_eq!(scan(&z, &data)[2], Some(Found::Target(2 * bs as u64)));
}

#[test]
fn memory_stays_bounded() {
    let data = Rng(10).bytes(8192, 0);
    let z = Zsync::parse(&make(&data, 1024, (2, 2, 4))).unwrap();
    let mut s = scan::ZsyncScanner::new(&z);
    let junk = Rng(11).bytes(4 << 20, 0);
    for piece in junk.chunks(1 << 20) {
        crate::delta::Scanner::feed(&mut s, piece);
    }
    assert!(s.buffer_capacity() <= 2048 + (1 << 18), "{}", s.buffer_capacity());
}

#[test]
fn next_known_block() {
    let mut rng = Rng(12);
    for n in [1u32, 63, 64, 65, 4095, 4096, 4097, 10_000] {
        let mut k = Known::new(n);
        let mut naive = vec![false; n as usize];
        for round in 0..40 {
            if round > 0 {
                let i = rng.below(n as usize);
                k.set(i as u32);
                naive[i] = true;
            }
            for _ in 0..50 {
                let i = rng.below(n as usize + 2) as u32;
                let want = (i..n).find(|&j| naive[j as usize]).unwrap_or(n);
                assert_eq!(k.next_from(i), want, "n {n} from {i}");
                if i < n {
                    assert_eq!(k.get(i), naive[i as usize]);
                }
            }
        }
    }
}

#[test]
fn table_lists_each_block_under_its_sums() {
    let sums: Vec<(u32, u32)> = (0..1000u32).map(|i| (i % 37, i % 37 + 1)).collect();
    let (t, f) = Table::new(1000, |i| sums[i as usize]);
    for (i, &(w0, w1)) in sums.iter().enumerate() {
        let h = super::table::hash(w0, w1);
        assert!(f.maybe(h));
        let (_, start, end) = t.bucket(h);
        let ids = &t.ids[start..end];
        assert!(ids.contains(&(i as u32)));
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ascending");
    }
    let misses = (0..100_000u32)
        .filter(|&k| f.maybe(super::table::hash(k + 1000, k)))
        .count();
    assert!(misses < 1000, "the filter lets {misses} of 100000 through");
    // A bucket's word made again from the blocks left: their sums still pass, the found
    // ones' no longer (unless they share both bits), an empty bucket passes nothing; a
    // copy of the filter (the other half of a split search) keeps its own word.
    let mut f = f;
    let other = f.clone();
    let h = super::table::hash(sums[5].0, sums[5].1);
    let (b, start, end) = t.bucket(h);
    let kept: Vec<u32> = t.ids[start..end].iter().copied().filter(|&i| i % 37 != 5).collect();
    f.refill(b, kept.iter().copied(), |i| sums[i as usize]);
    for &i in &kept {
        assert!(f.maybe(super::table::hash(sums[i as usize].0, sums[i as usize].1)));
    }
    f.refill(b, std::iter::empty(), |i| sums[i as usize]);
    assert!(
        !f.maybe(h),
        "an emptied bucket's word still lets its blocks' sums through"
    );
    assert!((0..100_000u32).all(|k| t.bucket(k).0 != b || !f.maybe(k)));
    assert!(other.maybe(h), "the copy's word changed with the original's");
}

#[test]
fn fuzz_corpus_replays() {
    crate::replay_corpus("zsync_control", crate::fuzz_props::zsync_control);
}

#[test]
fn a_split_scan_finds_the_blocks_one_scan_finds() {
    let data = Rng(11).bytes(3_000_000, 0);
    for lengths in [(2, 2, 3), (1, 4, 16)] {
        let z = Zsync::parse(&make(&data, 2048, lengths)).unwrap();
        let mut seed = data.clone();
        seed[5000] ^= 1;
        seed.splice(1_000_000..1_000_000, *b"xyz");
        seed.drain(1_600_000..1_600_100);
        seed[2_500_000..2_510_000].fill(0);
        // A stretch repeated: found in both halves, the first place kept.
        seed.extend_from_slice(&data[100_000..400_000]);
        let one = scan(&z, &seed);
        for mid in [4096, 1_000_001, 1_499_999, seed.len() / 2, seed.len() - 3000] {
            let (got, _) = crate::delta::scan_split_bytes(&z, &seed, mid, 65_537).unwrap();
            let got = got.to_vec();
            assert_eq!(
                got.len(),
                one.len(),
                "{lengths:?} split at {mid}: the finds of both halves"
            );
            for (i, (g, o)) in got.iter().zip(&one).enumerate() {
                assert_eq!(g.is_some(), o.is_some(), "{lengths:?} split at {mid}: block {i}");
                if let Some(Found::Target(at)) = g {
                    let p = z.pieces()[i];
                    assert!(z.matches(i, &seed[*at as usize..(*at + p.target_len) as usize]));
                    if (50..190).contains(&i) {
                        assert!(*at < 2_000_000, "block {i}: the first place kept");
                    }
                }
            }
        }
    }
}
