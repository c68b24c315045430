//! Unit tests: pure, on committed files made by `zck` (the fuzz corpus's whole files).

use super::*;
use crate::delta::Found;

#[test]
fn repeated_byte_never_matches() {
    for b in 0..=255u8 {
        assert_ne!(chunker::repeated_byte_hash(b) & chunker::MASK, 0, "byte {b:#x}");
    }
}

/// Bytes `0..n` of the test pattern: xorshift64* from `seed` (tests/util's `XorShift`).
fn pattern(n: usize, seed: u64) -> Vec<u8> {
    let mut x = (seed ^ 0x9E37_79B9_7F4A_7C15).max(1);
    let mut v = Vec::with_capacity(n + 8);
    while v.len() < n {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        v.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    v.truncate(n);
    v
}

/// A chunk-start case where zck's double push matters: 9000 bytes of [`pattern`] (seed
/// 77) with bytes 8149, 8150 set so the hash matches at byte 8150 (too early to cut: the
/// byte is pushed twice), and bytes 8191, 8192 set so that the window holding it twice
/// matches at 8192: the first chunk is 8192 bytes. tests/delta_zck.rs checks zck agrees.
pub fn repush_case() -> Vec<u8> {
    let mut data = pattern(9000, 77);
    (data[8149], data[8150], data[8191], data[8192]) = (82, 29, 193, 51);
    data
}

#[test]
fn repush_case_pushes_twice_then_cuts() {
    let data = repush_case();
    let mut c = chunker::Chunker::new();
    assert!(c.next_cut(&data[..8150]).is_none());
    assert!(c.push(data[8150]), "the hash matches at byte 8150");
    assert!(c.chunk_len() < MIN_CHUNK);
    assert_eq!(chunker::chunk_lengths(&data), [8192, 9000 - 8192]);
}

#[test]
fn fuzz_corpus_replays() {
    crate::replay_corpus("zck_header", crate::fuzz_props::zck_header);
}

/// A corpus file (`fuzz/corpus/zck_header/`, made by zck 1.2.3 or edited from one: see
/// `fuzz_props::zck_header`).
fn corpus(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus/zck_header")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Parses a whole file.
fn parse_file(file: &[u8]) -> Zck {
    let n = head_len(file).unwrap().unwrap() as usize;
    Zck::parse(&file[..n]).unwrap()
}

/// The bytes of `file` in `start..start + len`.
fn at(file: &[u8], start: u64, len: u64) -> &[u8] {
    &file[start as usize..(start + len) as usize]
}

/// Every piece opened from `file` (the dictionary taken first), concatenated.
fn decode_file(z: &mut Zck, file: &[u8]) -> Vec<u8> {
    if let Some((a, b)) = z.always_fetch() {
        z.take_always(at(file, a, b - a)).unwrap();
    }
    let mut target = Vec::new();
    let mut out = Vec::new();
    for (i, p) in z.pieces().iter().enumerate() {
        z.open_fetched(i, at(file, p.remote_start, p.remote_len), &mut out)
            .unwrap();
        target.extend_from_slice(&out);
    }
    target
}

/// Scans `seed` fed `step` bytes at a time, hashing inline and again on a helper thread:
/// both find the same.
fn scan(z: &Zck, seed: &[u8], step: usize) -> Vec<Option<Found>> {
    let mut s = z.scanner(None);
    for part in seed.chunks(step) {
        s.feed(part);
    }
    let inline = s.finish();
    let helped = std::thread::scope(|scope| {
        let mut s = z.scanner(Some(scope));
        for part in seed.chunks(step) {
            s.feed(part);
        }
        s.finish()
    });
    assert_eq!(helped, inline, "hashed on a helper thread");
    inline.to_vec()
}

#[test]
fn compressed_integers() {
    let read = |b: &[u8]| header::ci(b, &mut 0, "n");
    assert_eq!(read(&[0x80]), Ok(Some(0)));
    assert_eq!(read(&[0xff]), Ok(Some(127)));
    assert_eq!(read(&[0x00, 0x81]), Ok(Some(128)));
    assert_eq!(
        read(&[0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x81]),
        Ok(Some(u64::MAX))
    );
    assert_eq!(read(&[0x7f, 0x7f]), Ok(None), "cut short");
    assert!(
        read(&[0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x82])
            .unwrap_err()
            .contains("64 bits")
    );
    assert!(read(&[0; 11]).unwrap_err().contains("longer than 10"));
    let mut pos = 1;
    assert_eq!(header::ci(&[0, 0x85, 0x81], &mut pos, "n"), Ok(Some(5)));
    assert_eq!(pos, 2);
}

#[test]
fn a_zck_u_file_decodes_and_is_found_in_its_target_and_in_itself() {
    let file = corpus("text-u.zck");
    let mut z = parse_file(&file);
    assert!(z.has_uncompressed_digests() && z.data_digest().is_none());
    assert_eq!((z.chunk_hash(), z.compression()), (HashType::Sha256, Compression::Zstd));
    assert_eq!(z.header_digest().0, HashType::Sha256);
    assert_eq!(z.file_len(), file.len() as u64);
    assert_eq!(z.always_fetch(), None);
    assert_eq!(z.pieces().len(), 5);
    let target = decode_file(&mut z, &file);
    assert_eq!(target.len() as u64, z.target_len());
    for (i, p) in z.pieces().iter().enumerate() {
        assert!(z.matches(i, at(&target, p.target_start, p.target_len)));
        assert!(!z.matches(i, at(&target, p.target_start, p.target_len - 1)));
    }
    // The target as a plain seed: every piece where it is; the file itself: where stored.
    let plain: Vec<_> = z.pieces().iter().map(|p| Some(Found::Target(p.target_start))).collect();
    let stored: Vec<_> = z.pieces().iter().map(|p| Some(Found::Remote(p.remote_start))).collect();
    for step in [target.len(), 65536, 4097, 7, 1] {
        assert_eq!(scan(&z, &target, step), plain, "plain seed fed {step} at a time");
        assert_eq!(scan(&z, &file, step), stored, ".zck seed fed {step} at a time");
    }
    // A byte in front: the first chunk holds it, the others are found one byte further.
    let mut shifted = vec![b'x'];
    shifted.extend_from_slice(&target);
    let found = scan(&z, &shifted, 4096);
    let mut want: Vec<_> = z
        .pieces()
        .iter()
        .map(|p| Some(Found::Target(p.target_start + 1)))
        .collect();
    want[0] = None;
    assert_eq!(found, want);
    // Nothing of it in the empty seed, in four bytes, in zeros.
    assert!(scan(&z, b"", 1).iter().all(Option::is_none));
    assert!(scan(&z, b"\0ZCK", 1).iter().all(Option::is_none));
    assert!(scan(&z, &[0; 300_000], 65536).iter().all(Option::is_none));
}

#[test]
fn a_file_without_u_finds_nothing_in_a_plain_seed_but_its_chunks_in_another_zck() {
    let plain_file = corpus("text.zck");
    let mut z = parse_file(&plain_file);
    assert!(!z.has_uncompressed_digests());
    assert_eq!(z.chunk_hash(), HashType::Sha512_128);
    let (h, d) = z.data_digest().unwrap();
    let all = ring::digest::digest(h.algorithm(), &plain_file[z.head_len() as usize..]);
    assert_eq!(
        &all.as_ref()[..h.digest_len()],
        d,
        "the data checksum covers the stored data"
    );
    let target = decode_file(&mut z, &plain_file);
    let u_file = corpus("text-u.zck");
    assert_eq!(target, decode_file(&mut parse_file(&u_file), &u_file));
    assert!(
        !z.matches(0, at(&target, 0, z.pieces()[0].target_len)),
        "no uncompressed checksum to match"
    );
    assert!(scan(&z, &target, 4096).iter().all(Option::is_none));
    // The -u file stores the same compressed chunks (checksummed with SHA-256 there): found
    // by hashing them with this index's SHA-512/128.
    let u = parse_file(&u_file);
    let want: Vec<_> = u.pieces().iter().map(|p| Some(Found::Remote(p.remote_start))).collect();
    assert_eq!(scan(&z, &u_file, 1000), want);
}

#[test]
fn other_forms_decode_to_the_same_target() {
    let text_file = corpus("text.zck");
    let target = decode_file(&mut parse_file(&text_file), &text_file);
    for name in [
        "text-dict-u.zck",
        "text.sha1-chunks.zck",
        "text.sha1-lead.zck",
        "text-u.optsig.zck",
    ] {
        let file = corpus(name);
        let mut z = parse_file(&file);
        assert_eq!(decode_file(&mut z, &file), target, "{name}");
    }
    let z = parse_file(&corpus("text.sha1-chunks.zck"));
    assert_eq!(z.chunk_hash(), HashType::Sha1);
    let z = parse_file(&corpus("text.sha1-lead.zck"));
    assert_eq!(z.header_digest().0, HashType::Sha1);
    let file = corpus("rand-none-u.zck");
    let mut z = parse_file(&file);
    assert_eq!(z.compression(), Compression::None);
    assert_eq!(decode_file(&mut z, &file).len(), 30000);
}

#[test]
fn the_dictionary_is_taken_checked_before_any_chunk() {
    let file = corpus("text-dict-u.zck");
    let mut z = parse_file(&file);
    let (a, b) = z.always_fetch().expect("a dictionary");
    assert_eq!(a, z.head_len());
    let p = z.pieces()[0];
    assert_eq!(p.remote_start, b);
    let mut out = Vec::new();
    let e = z
        .open_fetched(0, at(&file, p.remote_start, p.remote_len), &mut out)
        .unwrap_err();
    assert!(e.contains("dictionary has not been taken"), "{e}");
    let mut dict = at(&file, a, b - a).to_vec();
    dict[3] ^= 1;
    assert!(z.take_always(&dict).unwrap_err().contains("checksum"));
    assert!(
        z.take_always(&dict[1..])
            .unwrap_err()
            .contains("bytes where the index says")
    );
    dict[3] ^= 1;
    z.take_always(&dict).unwrap();
    z.open_fetched(0, at(&file, p.remote_start, p.remote_len), &mut out)
        .unwrap();
    assert!(z.matches(0, &out));
}

#[test]
fn a_lying_length_is_refused_naming_the_chunk() {
    // Chunk 2's uncompressed length 1000 bytes short (resealed): it decodes to more.
    let file = corpus("text-u.lying.zck");
    let z = parse_file(&file);
    let p = z.pieces()[1];
    let mut out = Vec::new();
    let e = z
        .open_fetched(1, at(&file, p.remote_start, p.remote_len), &mut out)
        .unwrap_err();
    assert!(
        e.starts_with(&format!("zchunk chunk 2 (target bytes {}..", p.target_start)),
        "{e}"
    );
    assert!(e.contains("more than its"), "{e}");
    assert!(out.is_empty());
}

#[test]
fn malformed_headers_are_refused_saying_what() {
    let cases = [
        ("streams.head", "data streams"),
        ("comp1.head", "compression type 1 is not supported"),
        ("count.head", "7 chunks, where its 410 bytes hold 1 to 6"),
        ("detached.head", "detached"),
        ("huge.lead", "a header of 1099511627776 bytes"),
        ("text-u.flipped.head", "header checksum (SHA-256) does not match"),
        ("text-u.truncated", "cut short: 300 of its 487 bytes"),
        ("text-u.lead", "cut short: 45 of its 487 bytes"),
    ];
    for (name, want) in cases {
        let e = Zck::parse(&corpus(name))
            .err()
            .unwrap_or_else(|| panic!("{name} parsed"));
        assert!(e.contains(want), "{name}: {e}");
    }
    assert!(head_len(b"PK\x03\x04").unwrap_err().contains("not a zchunk file"));
    assert_eq!(head_len(b"\0ZC"), Ok(None));
    assert_eq!(head_len(b""), Ok(None));
    assert!(head_len(b"\0ZCK1\x85").unwrap_err().contains("unknown checksum type 5"));
}

/// Appends `v` as a compressed integer.
fn ci_enc(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let b = (v % 128) as u8;
        v /= 128;
        if v == 0 {
            out.push(b | 0x80);
            return;
        }
        out.push(b);
    }
}

fn digest_of(h: HashType, bytes: &[u8]) -> Vec<u8> {
    ring::digest::digest(h.algorithm(), bytes).as_ref()[..h.digest_len()].to_vec()
}

/// An index entry as written: stored bytes, uncompressed length and checksums.
struct Made {
    stored: Vec<u8>,
    len: u64,
    digest: Vec<u8>,
    uncompressed_digest: Vec<u8>,
}

/// An entry for `stored` bytes that decode to `plain` (SHA-256 checksums).
fn made(stored: &[u8], plain: &[u8]) -> Made {
    Made {
        stored: stored.to_vec(),
        len: plain.len() as u64,
        digest: digest_of(HashType::Sha256, stored),
        uncompressed_digest: digest_of(HashType::Sha256, plain),
    }
}

/// A whole file as zck lays it out (SHA-256 everywhere, flag 2 set, no dictionary unless
/// the first entry has bytes), with `count` in the index and `flags` | 4.
fn build(flags: u64, compression: u64, count: u64, entries: &[Made]) -> Vec<u8> {
    let mut index = Vec::new();
    ci_enc(1, &mut index);
    ci_enc(count, &mut index);
    for e in entries {
        index.extend_from_slice(&e.digest);
        index.extend_from_slice(&e.uncompressed_digest);
        ci_enc(e.stored.len() as u64, &mut index);
        ci_enc(e.len, &mut index);
    }
    let mut header = vec![0; 32];
    ci_enc(flags | 4, &mut header);
    ci_enc(compression, &mut header);
    ci_enc(index.len() as u64, &mut header);
    header.extend_from_slice(&index);
    ci_enc(0, &mut header);
    let mut file = b"\0ZCK1".to_vec();
    ci_enc(1, &mut file);
    ci_enc(header.len() as u64, &mut file);
    file.extend_from_slice(&[0; 32]);
    file.extend_from_slice(&header);
    for e in entries {
        file.extend_from_slice(&e.stored);
    }
    reseal(&mut file).unwrap();
    file
}

/// The dictionary entry of a file without one.
fn no_dict() -> Made {
    Made {
        stored: Vec::new(),
        len: 0,
        digest: vec![0; 32],
        uncompressed_digest: vec![0; 32],
    }
}

#[test]
fn built_files_parse_and_lengths_beyond_their_bounds_are_refused() {
    let a = made(b"hello, ", b"hello, ");
    let b = made(b"world", b"world");
    let file = build(0, 0, 3, &[no_dict(), a, b]);
    let mut z = parse_file(&file);
    assert_eq!(decode_file(&mut z, &file), b"hello, world");
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            build(0, 0, 2, &[no_dict(), made(b"a", b"a"), made(b"b", b"b")]),
            "more chunks than its count, 2",
        ),
        (
            build(0, 0, 4, &[no_dict(), made(b"a", b"a"), made(b"b", b"b")]),
            "4 chunks, where its 200 bytes hold 1 to 3",
        ),
        (
            build(8, 0, 2, &[no_dict(), made(b"a", b"a")]),
            "unknown flags set (0x8)",
        ),
        (build(1, 0, 2, &[no_dict(), made(b"a", b"a")]), "data streams"),
        (build(0, 0, 2, &[no_dict(), made(b"", b"")]), "chunk 1: empty"),
        (
            build(0, 0, 2, &[no_dict(), made(b"ab", b"a")]),
            "chunk 1: 2 compressed bytes for 1 uncompressed",
        ),
        (
            build(0, 2, 2, &[no_dict(), made(&[0; 1100], b"a")]),
            "chunk 1: 1100 compressed bytes for 1 uncompressed (zstd: at most 1025)",
        ),
    ];
    for (file, want) in cases {
        let e = Zck::parse(&file)
            .err()
            .unwrap_or_else(|| panic!("parsed, where {want}"));
        assert!(e.contains(want), "{e}: not {want}");
    }
    // A chunk longer than MAX_CHUNK_LEN: its length alone, no bytes (refused before them).
    let mut big = made(b"x", b"x");
    big.len = MAX_CHUNK_LEN + 1;
    let e = Zck::parse(&build(0, 2, 2, &[no_dict(), big])).err().unwrap();
    assert!(
        e.contains(&format!("chunk 1: {} bytes uncompressed", MAX_CHUNK_LEN + 1)),
        "{e}"
    );
    // An index size past the header's end.
    let mut file = build(0, 0, 2, &[no_dict(), made(b"a", b"a")]);
    let at = file.iter().position(|&x| x == 0x84).unwrap() + 1; // flags 4, then compression 0
    assert_eq!(file[at], 0x80);
    file[at + 1] += 60;
    reseal(&mut file).unwrap();
    let e = Zck::parse(&file).err().unwrap();
    assert!(
        e.contains("the index") && e.contains("runs past the header's end"),
        "{e}"
    );
}

/// A zstd frame (RFC 8878 §3.1.1) of `blocks` RLE blocks of 128 KiB each (`byte` repeated),
/// with window descriptor `window` (exponent << 3), no content size.
fn rle_frame(blocks: usize, byte: u8, window: u8) -> Vec<u8> {
    let mut f = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, window];
    for k in 0..blocks {
        let last = u32::from(k + 1 == blocks);
        let header = (131_072u32 << 3) | (1 << 1) | last;
        f.extend_from_slice(&header.to_le_bytes()[..3]);
        f.push(byte);
    }
    f
}

#[test]
fn a_chunk_that_decodes_to_more_than_declared_stops_at_its_length() {
    // 400 blocks: 50 MiB from 1606 bytes, declared 1000 bytes.
    let bomb = rle_frame(400, b'z', 7 << 3);
    let mut e = made(&bomb, b"z");
    e.len = 1000;
    let file = build(0, 2, 2, &[no_dict(), e]);
    let z = parse_file(&file);
    let p = z.pieces()[0];
    let mut out = Vec::new();
    let err = z
        .open_fetched(0, at(&file, p.remote_start, p.remote_len), &mut out)
        .unwrap_err();
    assert!(err.contains("decodes to more than its 1000 bytes"), "{err}");
    assert!(out.capacity() < 1 << 20, "{} bytes of capacity", out.capacity());
    // A frame asking for a 1 TiB window: refused, not allocated.
    let huge = rle_frame(1, b'z', 30 << 3);
    let file = build(0, 2, 2, &[no_dict(), made(&huge, &[b'z'; 131_072])]);
    let z = parse_file(&file);
    let p = z.pieces()[0];
    let err = z
        .open_fetched(0, at(&file, p.remote_start, p.remote_len), &mut out)
        .unwrap_err();
    assert!(err.contains("zchunk chunk 1 (target bytes 0..131072): zstd"), "{err}");
    // The honest one decodes.
    let ok = rle_frame(1, b'z', 7 << 3);
    let file = build(0, 2, 2, &[no_dict(), made(&ok, &[b'z'; 131_072])]);
    let mut z = parse_file(&file);
    assert_eq!(decode_file(&mut z, &file), [b'z'; 131_072]);
}

#[test]
fn an_index_can_be_shared_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Zck>();
}

#[test]
fn a_changed_chunk_byte_is_refused_before_decoding() {
    for name in ["text.zck", "text-u.zck", "rand-none-u.zck"] {
        let file = corpus(name);
        let z = parse_file(&file);
        let i = z.pieces().len() - 1;
        let p = z.pieces()[i];
        let mut fetched = at(&file, p.remote_start, p.remote_len).to_vec();
        let last = fetched.len() - 1;
        fetched[last] ^= 0x40;
        let mut out = Vec::new();
        let e = z.open_fetched(i, &fetched, &mut out).unwrap_err();
        let (from, to) = (p.target_start, p.target_start + p.target_len);
        let want = format!(
            "zchunk chunk {} (target bytes {from}..{to}): its {} checksum does not match",
            i + 1,
            z.chunk_hash().name()
        );
        assert_eq!(e, want, "{name}");
        assert!(out.is_empty());
    }
}

/// A `zck -u`-like index of `data` (its chunks as zck cuts them, stored uncompressed).
fn index_of(data: &[u8]) -> Zck {
    let mut entries = vec![no_dict()];
    let mut at = 0;
    for len in chunker::chunk_lengths(data) {
        let c = &data[at..at + len as usize];
        entries.push(made(c, c));
        at += len as usize;
    }
    let n = entries.len() as u64;
    parse_file(&build(0, 0, n, &entries))
}

#[test]
fn a_split_scan_finds_what_one_scan_finds() {
    let target = pattern(12 << 20, 3);
    let z = index_of(&target);
    // Seeds: the target itself; edited (bytes changed, inserted, removed: cuts shift);
    // with a stretch repeated twice (a piece found in both halves: the first place kept).
    let mut edited = target.clone();
    for (k, at) in [700_000usize, 3_000_000, 6_300_000, 6_400_000, 9_000_000]
        .into_iter()
        .enumerate()
    {
        edited[at] ^= 0x55;
        edited
            .splice(at + 100..at + 100, pattern(777 * (k + 1), k as u64))
            .for_each(drop);
    }
    edited.drain(8_000_000..8_050_000);
    let mut repeated = target[..7 << 20].to_vec();
    repeated.extend_from_slice(&target[1 << 20..5 << 20]);
    repeated.extend_from_slice(&pattern(1 << 20, 9));
    for seed in [&target, &edited, &repeated] {
        let one = scan(&z, seed, 1 << 18);
        assert!(one.iter().filter(|f| f.is_some()).count() > 100);
        // Cuts of one chunker over the seed: a split right at one (the halves meet at
        // once), and one 8191 bytes before one (the second half's chunk is too short to
        // end there, so its cuts differ from the first half's for a while).
        let cuts: Vec<usize> = chunker::chunk_lengths(seed)
            .iter()
            .scan(0, |at, &n| {
                *at += n as usize;
                Some(*at)
            })
            .collect();
        let near = cuts[cuts.len() / 2];
        let mut met = 0;
        for mid in [1 << 20, (6 << 20) + 12_345, seed.len() - 40_000, near, near - 8191] {
            let (got, stopped) = crate::delta::scan_split_bytes(&z, seed, mid, 100_003).unwrap();
            assert_eq!(got.to_vec(), one, "seed of {} bytes split at {mid}", seed.len());
            met += usize::from(stopped);
        }
        assert!(met >= 4, "the first half met the second {met} times in 5");
    }
    // A seed that is a .zck, or a target without uncompressed checksums: no split.
    assert!(crate::delta::scan_split_bytes(&z, b"\0ZCK1 and more", 4, 4).is_none());
}
