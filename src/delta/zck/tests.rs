//! Unit tests: pure, on committed files made by `zck` (the fuzz corpus's whole files).

use super::*;

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
    assert!(c.len() < MIN_CHUNK);
    assert_eq!(chunker::chunk_lengths(&data), [8192, 9000 - 8192]);
}
