//! zchunk's automatic chunker, boundary for boundary: a buzhash over the last 48 bytes
//! fed, a cut where its low 15 bits are zero, chunks of 8 KiB to 128 KiB
//! (`src/lib/comp/comp.c`: `comp_init`, `zck_write`, `zck_end_chunk`;
//! `src/lib/buzhash/buzhash.c`; `DEFAULT_BUZHASH_WIDTH`, `DEFAULT_BUZHASH_BITS`,
//! `CHUNK_DEFAULT_MIN`/`MAX` in `src/lib/zck_private.h`).
//!
//! What `zck_write` does, byte by byte, with `len` the bytes already in the current chunk:
//! the next byte `b` is pushed into the hash; when the hash matches (a full window whose
//! low bits are zero) or `len` has reached the maximum, the chunk would end before `b`.
//! If it is then shorter than the minimum it goes on, and `b` is pushed *again* (the
//! window then holds `b` twice); otherwise the chunk ends, the hash starts empty and `b`
//! is pushed into it as the next chunk's first byte. Otherwise `b` joins the chunk. The
//! last chunk is what remains at the end. The hash depends only on the bytes pushed, so
//! how the input is split into writes (zck reads 32 KiB at a time) changes nothing.

/// Bytes the buzhash covers (`DEFAULT_BUZHASH_WIDTH`).
pub const WINDOW: usize = 48;
/// A cut where `hash & MASK == 0`: 15 bits (`DEFAULT_BUZHASH_BITS`), 32 KiB on average.
pub const MASK: u32 = (1 << 15) - 1;
/// A matching hash does not end a chunk shorter than this: `(MASK + 1) / 4` (zck's
/// `chunk_auto_min`; its `CHUNK_DEFAULT_MIN` of 1 is smaller).
pub const MIN_CHUNK: u64 = (MASK as u64 + 1) / 4;
/// A chunk ends at this length whatever the hash: `(MASK + 1) * 4` (zck's
/// `chunk_auto_max`; its `CHUNK_DEFAULT_MAX` of 10 MiB is larger).
pub const MAX_CHUNK: u64 = (MASK as u64 + 1) * 4;

/// buzhash's table (`buzhash_table` in `buzhash.c`): one 32-bit word per byte value.
#[rustfmt::skip]
const TABLE: [u32; 256] = [
    0x458b_e752, 0xc107_48cc, 0xfbbc_dbb8, 0x6ded_5b68, 0xb10a_82b5, 0x20d7_5648, 0xdfc5_665f, 0xa842_8801,
    0x7ebf_5191, 0x8411_35c7, 0x65cc_53b3, 0x280a_597c, 0x16f6_0255, 0xc78c_bc3e, 0x2944_15f5, 0xb938_d494,
    0xec85_c4e6, 0xb7d3_3edc, 0xe549_b544, 0xfded_a5aa, 0x882b_f287, 0x3116_737c, 0x0556_9956, 0xe8cc_1f68,
    0x0806_ac5e, 0x22a1_4443, 0x1529_7e10, 0x50d0_90e7, 0x4ba6_0f6f, 0xefd9_f1a7, 0x5c5c_885c, 0x8248_2f93,
    0x9bfd_7c64, 0x0b3e_7276, 0xf268_8e77, 0x8fad_8abc, 0xb050_9568, 0xf1ad_a29f, 0xa53e_fdfe, 0xcb2b_1d00,
    0xf2a9_e986, 0x6463_432b, 0x9509_4051, 0x5a22_3ad2, 0x9be8_401b, 0x61e5_79cb, 0x1a55_6a14, 0x5840_fdc2,
    0x9261_ddf6, 0xcde0_02bb, 0x5243_2bb0, 0xbf17_373e, 0x7b7c_222f, 0x2955_ed16, 0x9f10_ca59, 0xe840_c4c9,
    0xccab_d806, 0x1454_3f34, 0x1462_417a, 0x0d4a_1f9c, 0x087e_d925, 0xd7f8_f24c, 0x7338_c425, 0xcf86_c8f5,
    0xb191_65cd, 0x9891_c393, 0x3253_84ac, 0x0308_459d, 0x8614_1d7e, 0xc922_116a, 0xe2ff_a6b6, 0x53f5_2aed,
    0x2cd8_6197, 0xf5b9_f498, 0xbf31_9c8f, 0xe041_1fae, 0x977e_b18c, 0xd877_0976, 0x9833_466a, 0xc674_df7f,
    0x8c29_7d45, 0x8ca4_8d26, 0xc49e_d8e2, 0x7344_f874, 0x556f_79c7, 0x6b25_eaed, 0xa03e_2b42, 0xf68f_66a4,
    0x8e8b_09a2, 0xf2e0_e62a, 0x0d3a_9806, 0x9729_e493, 0x8c72_b0fc, 0x160b_94f6, 0x450e_4d3d, 0x7a32_0e85,
    0xbef8_f0e1, 0x21d7_3653, 0x4e3d_977a, 0x1e7b_3929, 0x1cc6_c719, 0xbe47_8d53, 0x8d75_2809, 0xe6d8_c2c6,
    0x275f_0892, 0xc8ac_c273, 0x4cc2_1580, 0xecc4_a617, 0xf5f7_be70, 0xe795_248a, 0x375a_2fe9, 0x4255_70b6,
    0x8898_dcf8, 0xdc2d_97c4, 0x0106_114b, 0x364d_c22f, 0x1e0c_ad1f, 0xbe63_803c, 0x5f69_fac2, 0x4d5a_fa6f,
    0x1bc0_dfb5, 0xfb27_3589, 0x0ea4_7f7b, 0x3c1c_2b50, 0x21b2_a932, 0x6b12_23fd, 0x2fe7_06a8, 0xf9bd_6ce2,
    0xa268_e64e, 0xe987_f486, 0x3eac_f563, 0x1ca2_018c, 0x65e1_8228, 0x2207_360a, 0x57cf_1715, 0x34c3_7d2b,
    0x1f8f_3cde, 0x93b6_57cf, 0x31a0_19fd, 0xe69e_b729, 0x8bca_7b9b, 0x4c9d_5bed, 0x277e_beaf, 0xe0d8_f8ae,
    0xd150_821c, 0x3138_1871, 0xafc3_f1b0, 0x927d_b328, 0xe95e_ffac, 0x305a_47bd, 0x426b_a35b, 0x1233_af3f,
    0x686a_5b83, 0x50e0_72e5, 0xd9d3_bb2a, 0x8bef_c475, 0x487f_0de6, 0xc88d_ff89, 0xbd66_4d5e, 0x971b_5d18,
    0x63b1_4847, 0xd7d3_c1ce, 0x7f58_3cf3, 0x72cb_cb09, 0xc0d0_a81c, 0x7fa3_429b, 0xe915_8a1b, 0x225e_a19a,
    0xd8ca_9ea3, 0xc763_b282, 0xbb0c_6341, 0x020b_8293, 0xd4cd_299d, 0x58cf_a7f8, 0x91b4_ee53, 0x37e4_d140,
    0x95ec_764c, 0x30f7_6b06, 0x5ee6_8d24, 0x679c_8661, 0xa419_79c2, 0xf2b6_1284, 0x4fac_1475, 0x0adb_49f9,
    0x1972_7a23, 0x15a7_e374, 0xc43a_18d5, 0x3fb1_aa73, 0x342f_c615, 0x924c_0793, 0xbee2_d7f0, 0x8a27_9de9,
    0x4aa2_d70c, 0xe24d_d37f, 0xbe86_2c0b, 0x177c_22c2, 0x5388_e5ee, 0xcd8a_7510, 0xf901_b4fd, 0xdbc1_3dbc,
    0x6c0b_ae5b, 0x64ef_e8c7, 0x48b0_2079, 0x8033_1a49, 0xca3d_8ae6, 0xf354_6190, 0xfed7_108b, 0xc49b_941b,
    0x32ba_f4a9, 0xeb83_3a4a, 0x88a3_f1a5, 0x3a91_ce0a, 0x3cc2_7da1, 0x7112_e684, 0x4a30_96b1, 0x3794_574c,
    0xa3c8_b6f3, 0x1d21_3941, 0x6e0a_2e00, 0x2334_79f1, 0x0f4c_d82f, 0x6093_edd2, 0x5d7d_209e, 0x464f_e319,
    0xd4dc_ac9e, 0x0db8_45cb, 0xfb5e_4bc3, 0xe025_6ce1, 0x09fb_4ed1, 0x0914_be1e, 0xa5bd_b2c3, 0xc6eb_57bb,
    0x3032_0350, 0x3f39_7e91, 0xa677_91bc, 0x86bc_0e2c, 0xefa0_a7e2, 0xe9ff_7543, 0xe733_612c, 0xd185_897b,
    0x329e_5388, 0x91dd_236b, 0x2ecb_0d93, 0xf4d8_2a3d, 0x35b5_c03f, 0xe4e6_06f0, 0x05b2_1843, 0x37b4_5964,
    0x5eff_22f4, 0x6027_f4cc, 0x7717_8b3c, 0xae50_7131, 0x7bf7_cabc, 0xf9c1_8d66, 0x593a_de65, 0xd95d_df11,
];

/// The table rotated left by the window's length (48 mod 32 = 16): a byte's term when it
/// leaves the window.
const TABLE_OUT: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = TABLE[i].rotate_left((WINDOW % 32) as u32);
        i += 1;
    }
    t
};

/// Rolls hash `h`, over a full window that is `data[start - WINDOW..start]`, through
/// `data[start..end]` until a byte's push matches: that byte's index, and the hash then
/// (or at `end`). The byte leaving the window is read from `data`, not from the ring.
fn roll(data: &[u8], start: usize, end: usize, mut h: u32) -> (Option<usize>, u32) {
    let hit = data[start - WINDOW..end - WINDOW]
        .iter()
        .zip(&data[start..end])
        .position(|(&old, &b)| {
            h = h.rotate_left(1) ^ TABLE_OUT[usize::from(old)] ^ TABLE[usize::from(b)];
            h & MASK == 0
        });
    (hit.map(|k| start + k), h)
}

/// The chunker's state between feeds: the hash's window and value, and the current
/// chunk's length so far.
#[derive(Clone)]
pub struct Chunker {
    /// The last [`WINDOW`] bytes pushed, a ring; `window[pos]` is the oldest once full.
    window: [u8; WINDOW],
    pos: usize,
    /// Bytes pushed since the hash last started empty, up to [`WINDOW`].
    fill: usize,
    /// XOR over the window of each byte's table word rotated left by its age (0 = newest).
    hash: u32,
    /// Bytes of the current chunk so far.
    len: u64,
}

impl Default for Chunker {
    fn default() -> Chunker {
        Chunker::new()
    }
}

impl Chunker {
    /// A chunker at the start of a stream.
    pub fn new() -> Chunker {
        Chunker {
            window: [0; WINDOW],
            pos: 0,
            fill: 0,
            hash: 0,
            len: 0,
        }
    }

    /// Bytes of the current chunk so far (those fed since the last cut).
    pub fn chunk_len(&self) -> u64 {
        self.len
    }

    /// Pushes `b` into the hash; whether the hash now matches (a full window, low bits 0).
    #[inline(always)]
    pub(super) fn push(&mut self, b: u8) -> bool {
        if self.fill < WINDOW {
            self.window[self.fill] = b;
            self.fill += 1;
            // A byte entering a partial window is rotated by its age once the window is
            // full, as `buzhash_update` does; zck reports no match until then.
            self.hash ^= TABLE[usize::from(b)].rotate_left(((WINDOW - self.fill) % 32) as u32);
            return self.fill == WINDOW && self.hash & MASK == 0;
        }
        let old = self.window[self.pos];
        self.window[self.pos] = b;
        self.pos = if self.pos + 1 == WINDOW { 0 } else { self.pos + 1 };
        self.hash = self.hash.rotate_left(1) ^ TABLE_OUT[usize::from(old)] ^ TABLE[usize::from(b)];
        self.hash & MASK == 0
    }

    /// Takes `data`, the stream's next bytes, up to the next cut: `Some((k, len))` when
    /// the current chunk, `len` bytes, ends before `data[k]` (the chunker is then at a new
    /// chunk's start, `data[k..]` not yet taken: feed it again), `None` when every byte
    /// joined the current chunk.
    pub fn next_cut(&mut self, data: &[u8]) -> Option<(usize, u64)> {
        let mut i = 0;
        // How many of the bytes just taken from `data` are the window's newest, in order:
        // from WINDOW on, the byte leaving the window is `data[i - WINDOW]`.
        let mut synced = 0;
        while i < data.len() {
            if self.len >= MAX_CHUNK {
                // data[i]'s push would be undone by the cut's reset: skip it.
                return Some((i, self.restart()));
            }
            let room = usize::try_from(MAX_CHUNK - self.len).unwrap_or(usize::MAX);
            let end = data.len().min(i.saturating_add(room));
            let start = i;
            let matched = if self.fill == WINDOW && synced >= WINDOW {
                let hit = self.roll(data, start, end);
                i = hit.unwrap_or(end);
                hit.is_some()
            } else {
                // Through the ring, until the window is the data's last WINDOW bytes.
                let stop = end.min(start + WINDOW.saturating_sub(synced).max(1));
                while i < stop && !self.push(data[i]) {
                    i += 1;
                }
                i < stop
            };
            self.len += (i - start) as u64;
            synced += i - start;
            if !matched {
                continue;
            }
            // data[i]'s push matched.
            if self.len >= MIN_CHUNK {
                return Some((i, self.restart()));
            }
            self.repush(data[i]);
            synced = 0;
            self.len += 1;
            i += 1;
        }
        None
    }

    /// The fast path, over a full window that is `data[start - WINDOW..start]`: pushes
    /// `data[start..end]` until one matches; its index (pushed), or `None`. Leaves the
    /// ring holding the window.
    fn roll(&mut self, data: &[u8], start: usize, end: usize) -> Option<usize> {
        let (hit, h) = roll(data, start, end, self.hash);
        self.hash = h;
        let last = hit.map_or(end, |i| i + 1);
        self.window.copy_from_slice(&data[last - WINDOW..last]);
        self.pos = 0;
        hit
    }

    /// After `b`'s push matched in a chunk too short to end: pushes `b` again while it
    /// matches, as `zck_write` does. A window of one repeated byte never matches (see the
    /// tests), so this ends after at most [`WINDOW`] pushes; the bound keeps it so.
    fn repush(&mut self, b: u8) {
        for _ in 0..=WINDOW {
            if !self.push(b) {
                return;
            }
        }
    }

    /// Ends the current chunk: the hash starts empty (`buzhash_reset`). Returns the ended
    /// chunk's length.
    fn restart(&mut self) -> u64 {
        let len = self.len;
        self.fill = 0;
        self.pos = 0;
        self.hash = 0;
        self.len = 0;
        len
    }
}

/// The lengths of the chunks zck cuts `data` into (the last one what remains).
#[cfg(test)]
pub fn chunk_lengths(data: &[u8]) -> Vec<u64> {
    let mut c = Chunker::new();
    let mut out = Vec::new();
    let mut rest = data;
    while let Some((k, len)) = c.next_cut(rest) {
        out.push(len);
        rest = &rest[k..];
    }
    if c.chunk_len() > 0 {
        out.push(c.chunk_len());
    }
    out
}

/// The hash of a window holding `b` [`WINDOW`] times.
#[cfg(test)]
pub fn repeated_byte_hash(b: u8) -> u32 {
    let mut c = Chunker::new();
    for _ in 0..WINDOW {
        c.push(b);
    }
    c.hash
}
