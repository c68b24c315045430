//! Delta updates: a target image assembled from the chunks a local seed already has plus
//! the chunks fetched by Range, each checked against its index's digest before it is
//! written.
//!
//! Two index formats, each behind [`Index`]:
//! - zchunk (`*.zck`, `zchunk_format.txt`; made by `zck`): [`zck`]. The target is the
//!   file's uncompressed content; a piece is one chunk, fetched compressed (zstd) and
//!   decompressed before its digest check.
//! - zsync (`*.zsync` control files made by `zsyncmake`): [`zsync`]. The target is the
//!   file the control file names; a piece is one block, fetched as is.
//!
//! This room is pure but for what [`seed`] reads: formats, scanning, the plan of
//! requests. Fetching and writing are the app's (`app/delta.rs`).

pub mod pipe;
pub mod plan;
pub mod seed;
pub mod sum;
pub mod zck;
pub mod zsync;

/// One piece of the target: where its bytes go and where the bytes that make them are in
/// the remote file. Offsets and lengths in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// First byte of the piece in the target.
    pub target_start: u64,
    /// Its length in the target (uncompressed).
    pub target_len: u64,
    /// First byte of its bytes in the remote file (zchunk: the compressed chunk; zsync:
    /// the same block as in the target).
    pub remote_start: u64,
    /// Their length in the remote file.
    pub remote_len: u64,
}

/// Where a scanner found a piece in a seed (offsets in the seed, bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// The piece's target bytes start at this offset (`target_len` of them).
    Target(u64),
    /// The piece's remote form (zchunk: its compressed chunk, in an older `.zck`) starts
    /// at this offset (`remote_len` of them): it is made with [`Index::open_fetched`].
    Remote(u64),
}

/// Where a scan found each piece of an index, packed in 8 bytes a piece (a 1 GiB image
/// in 4 KiB blocks: 2 MiB): `u64::MAX` not found, else the seed offset with the top bit
/// set for [`Found::Remote`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Finds(Vec<u64>);

impl Finds {
    const NONE: u64 = u64::MAX;
    const REMOTE: u64 = 1 << 63;

    /// `n` pieces, none found.
    pub fn new(n: usize) -> Finds {
        Finds(vec![Finds::NONE; n])
    }

    /// Packed offsets as a scanner keeps them: `u64::MAX` for not found, else a seed
    /// offset (below 2^63) of the piece's target bytes.
    pub fn from_targets(offsets: Vec<u64>) -> Finds {
        debug_assert!(offsets.iter().all(|&o| o == Finds::NONE || o < Finds::REMOTE));
        Finds(offsets)
    }

    /// Pieces.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No pieces.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Where piece `i` was found (`None` also past the end).
    pub fn get(&self, i: usize) -> Option<Found> {
        match self.0.get(i).copied() {
            None | Some(Finds::NONE) => None,
            Some(v) if v & Finds::REMOTE != 0 => Some(Found::Remote(v & !Finds::REMOTE)),
            Some(v) => Some(Found::Target(v)),
        }
    }

    /// Records piece `i` at `at` unless it was found before (the first place is kept).
    /// A seed offset can be no more than 2^63 − 2 (a file's size is below 2^63).
    pub fn keep_first(&mut self, i: usize, at: Found) {
        let v = match at {
            Found::Target(o) => o,
            Found::Remote(o) => o | Finds::REMOTE,
        };
        if self.0[i] == Finds::NONE && v != Finds::NONE {
            self.0[i] = v;
        }
    }

    /// Takes each piece `later` found that this one did not (the first place is kept:
    /// `later` is a scan of bytes after this one's). An empty one (no pieces: the half of
    /// a split search whose finds the other half returned) takes `later` whole.
    pub fn merge_later(&mut self, later: Finds) {
        if self.0.is_empty() {
            *self = later;
            return;
        }
        for (mine, &theirs) in self.0.iter_mut().zip(&later.0) {
            if *mine == Finds::NONE {
                *mine = theirs;
            }
        }
    }

    /// Every piece's place, unpacked (for tests and messages).
    pub fn to_vec(&self) -> Vec<Option<Found>> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }
}

/// What a delta format tells: the target's pieces, how fetched bytes become target bytes
/// and how they are checked, and how a seed is searched.
pub trait Index: Send + Sync {
    /// Size of the target, bytes.
    fn target_len(&self) -> u64;

    /// How many pieces the target has.
    fn piece_count(&self) -> usize;

    /// Piece `i` (below [`Index::piece_count`]; panics past it). The pieces in target
    /// order: piece `i + 1` starts where piece `i` ends, the first at 0, the last ends at
    /// [`Index::target_len`]. Remote ranges are sorted and disjoint.
    fn piece(&self, i: usize) -> Piece;

    /// A remote range every delta fetches whatever the seed holds (zchunk's dictionary),
    /// `(start, end)`; given to [`Index::take_always`] before any piece is opened.
    fn always_fetch(&self) -> Option<(u64, u64)> {
        None
    }

    /// Takes the bytes of [`Index::always_fetch`]'s range.
    ///
    /// # Errors
    /// A message when they do not match their digest or do not decode.
    fn take_always(&mut self, _bytes: &[u8]) -> Result<(), String> {
        Ok(())
    }

    /// Makes piece `i`'s target bytes from its remote bytes `fetched` (`remote_len` of
    /// them) into `out` (cleared first; zchunk: zstd-decompressed) and checks them
    /// against the piece's digest.
    ///
    /// # Errors
    /// A message naming the piece and what failed (decoding, length, digest).
    fn open_fetched(&self, i: usize, fetched: &[u8], out: &mut Vec<u8>) -> Result<(), String>;

    /// Whether `bytes` are piece `i`'s target bytes (length and digest).
    fn matches(&self, i: usize, bytes: &[u8]) -> bool;

    /// A scanner that searches a seed for this index's pieces; it may hash on a helper
    /// thread of `helper` ([`pipe`]), joined when the scope ends.
    fn scanner<'s, 'e>(&'s self, helper: Option<&'s std::thread::Scope<'s, 'e>>) -> Box<dyn Scanner + 's>;

    /// Two scanners that search a seed of `len` bytes in two halves at once, on two
    /// threads ([`Split`]), when the format can split its search at `mid` (a seed offset
    /// below `len`) of a seed that starts with `head`; `None` when it cannot.
    fn split_scanners<'s>(&'s self, _len: u64, _mid: u64, _head: &[u8]) -> Option<Split<'s>> {
        None
    }

    /// Digests of the whole target the format carries (zsync: SHA-1, and SHA-256 when
    /// given), checked once the target is written.
    fn whole_digests(&self) -> Vec<(&'static ring::digest::Algorithm, Vec<u8>)> {
        Vec::new()
    }
}

/// A seed's search in two halves: `first` takes the seed's bytes `[0, first_end)`,
/// `second` its bytes `[second_start, len)`; what `first` finds is kept before what
/// `second` finds ([`Finds::merge_later`]).
pub struct Split<'s> {
    pub first: Box<dyn Scanner + Send + 's>,
    pub first_end: u64,
    pub second: Box<dyn Scanner + Send + 's>,
    pub second_start: u64,
}

/// Searches one seed for an index's pieces as its bytes stream by.
pub trait Scanner {
    /// Takes the seed's next bytes (consecutive from offset 0, in chunks of any size).
    fn feed(&mut self, bytes: &[u8]);

    /// Whether it wants more bytes (a split search's first half may be done before the
    /// seed's end): when not, the bytes after are not read.
    fn wants_more(&self) -> bool {
        true
    }

    /// The seed's end: for each piece, where it was found (the first place), if it was.
    fn finish(self: Box<Self>) -> Finds;
}

/// A split search ([`Index::split_scanners`]) over `seed` in memory, as [`seed::Seed`]
/// runs it, the halves fed `step` bytes at a time on two scoped threads: the finds, and
/// whether the first half stopped before the seed's end. `None`: the index does not split.
#[cfg(test)]
pub fn scan_split_bytes(index: &dyn Index, seed: &[u8], mid: usize, step: usize) -> Option<(Finds, bool)> {
    let split = index.split_scanners(seed.len() as u64, mid as u64, seed)?;
    let feed = |s: &mut dyn Scanner, from: usize, to: usize| {
        let mut at = from;
        while at < to && s.wants_more() {
            let n = step.min(to - at);
            s.feed(&seed[at..at + n]);
            at += n;
        }
        at < to
    };
    let Split {
        mut first,
        first_end,
        mut second,
        second_start,
    } = split;
    std::thread::scope(|scope| {
        let late = scope.spawn(move || {
            feed(second.as_mut(), second_start as usize, seed.len());
            second.finish()
        });
        let stopped = feed(first.as_mut(), 0, first_end as usize);
        let mut found = first.finish();
        found.merge_later(late.join().unwrap());
        Some((found, stopped))
    })
}
