//! Searching a seed for a [`Zck`]'s pieces as its bytes stream by, as `zckdl -s` does
//! (`src/zck_dl.c`, `src/lib/dl/dl.c`: chunks of a source `.zck` matched by checksum;
//! `zck_cmp_uncomp.c`: a plain source cut with the chunker and matched by uncompressed
//! checksum).
//!
//! - A seed that starts with `\0ZCK1` is an older `.zck`: its header is read (and checked)
//!   as it streams, then each of its data chunks as stored is hashed with the target's
//!   chunk checksum type and looked up among the target's compressed checksums: a match
//!   is the very bytes the server holds, so the piece is [`Found::Remote`] there (decoded
//!   with the target's own dictionary: the seed's does not matter).
//! - Any other seed (an image, a partition) is cut with zck's chunker ([`Chunker`]) and
//!   each chunk hashed and looked up among the target's uncompressed checksums:
//!   [`Found::Target`]. A target without them (made without `zck -u`) finds nothing in a
//!   plain seed: it is then not even cut.
//!
//! A chunk is hashed only when some piece has its length. Memory: the current chunk's
//! bytes when it spans two feeds (at most [`MAX_CHUNK`], 128 KiB), and a `.zck` seed's
//! header.

use ring::digest;

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::Scope;

use super::chunker::{Chunker, MAX_CHUNK};
use super::header::MAGIC;
use super::{HashType, Zck};
use crate::delta::pipe::Pipe;
use crate::delta::{Finds, Found, Piece, Scanner};

/// The pieces' checksums, sorted for lookup: `(first 8 bytes, piece)`; and the lengths
/// that have one.
struct Lookup<'a> {
    hash: HashType,
    digests: &'a [u8],
    keys: Vec<(u64, u32)>,
    lens: Vec<u64>,
}

impl<'a> Lookup<'a> {
    /// Over `digests` (one per piece, flat), a piece's length being `len(piece)`; all-zero
    /// checksums are left out (zchunk's "none").
    fn new(zck: &'a Zck, digests: &'a [u8], len: fn(&Piece) -> u64) -> Lookup<'a> {
        let d = zck.chunk_hash.digest_len();
        let mut keys = Vec::new();
        let mut lens = Vec::new();
        for (i, (dig, p)) in digests.chunks_exact(d).zip(&zck.pieces).enumerate() {
            if dig.iter().any(|&b| b != 0) {
                keys.push((key(dig), i as u32));
                lens.push(len(p));
            }
        }
        keys.sort_unstable();
        lens.sort_unstable();
        lens.dedup();
        Lookup {
            hash: zck.chunk_hash,
            digests,
            keys,
            lens,
        }
    }

    /// Whether some piece is `len` bytes long.
    fn wants(&self, len: u64) -> bool {
        self.lens.binary_search(&len).is_ok()
    }

    /// Each piece whose checksum is `dig` (the full digest compared).
    fn find(&self, dig: &[u8], mut each: impl FnMut(usize)) {
        let d = self.hash.digest_len();
        let k = key(dig);
        let from = self.keys.partition_point(|&(x, _)| x < k);
        for &(x, i) in &self.keys[from..] {
            if x != k {
                break;
            }
            let i = i as usize;
            if self.digests[i * d..(i + 1) * d] == *dig {
                each(i);
            }
        }
    }

    fn context(&self) -> digest::Context {
        digest::Context::new(self.hash.algorithm())
    }
}

/// A checksum's first 8 bytes (every type has 16 or more).
fn key(dig: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&dig[..8]);
    u64::from_le_bytes(b)
}

/// Records `found` for each piece `lookup` finds with checksum `dig`, where none was.
fn record(lookup: &Lookup<'_>, dig: &digest::Digest, at: Found, found: &mut Finds) {
    lookup.find(&dig.as_ref()[..lookup.hash.digest_len()], |i| {
        found.keep_first(i, at);
    });
}

/// Bytes of chunks gathered before they go to be hashed as one job.
const JOB: usize = 256 << 10;
/// Jobs in flight to the hashing helper (the one filling aside).
const DEPTH: usize = 2;

/// Chunks of a plain seed on their way to be hashed: their bytes back to back, each one's
/// seed offset and length, and once hashed their digests.
#[derive(Default)]
struct Job {
    bytes: Vec<u8>,
    chunks: Vec<(u64, usize)>,
    digests: Vec<digest::Digest>,
}

impl Job {
    /// The helper's part: each chunk's digest.
    fn hash(&mut self, alg: &'static digest::Algorithm) {
        let mut at = 0;
        for &(_, len) in &self.chunks {
            self.digests.push(digest::digest(alg, &self.bytes[at..at + len]));
            at += len;
        }
    }
}

/// A plain seed cut with zck's chunker; the chunks some piece has the length of are
/// hashed on the pipe (a helper thread while this one cuts the next, or inline).
struct Plain<'a> {
    chunker: Chunker,
    /// The current chunk's bytes from earlier feeds.
    pending: Vec<u8>,
    /// The seed offset where the current chunk starts.
    start: u64,
    lookup: Lookup<'a>,
    pipe: Pipe<'a, Job>,
    job: Job,
    spare: Option<Job>,
    /// Its part in a search split in two halves.
    role: Role,
}

/// A plain seed's search in two halves, each on its thread. zck's chunker is in the same
/// state after every cut (the hash empty, the chunk's length 0), as the second half's is
/// at its start: where the first half cuts at an offset the second half cut at too, both
/// cut the same from there on, and the chunks of the two are those of one search over the
/// whole seed. So the first half goes on past the middle until it cuts where the second
/// did (within [`SYNC_SPAN`] of its start: else it goes on to the end alone and the
/// second's finds are dropped), and the second keeps the finds of its chunks from there.
enum Role {
    Whole,
    /// The first half: the middle, the second half's cuts once they come, and where the
    /// two met (sent to the second half; the sender dropped when they do not meet).
    First {
        mid: u64,
        cuts: Receiver<Vec<u64>>,
        theirs: Option<Vec<u64>>,
        met: Option<SyncSender<u64>>,
        done: bool,
    },
    /// The second half, from `start`: its cuts within [`SYNC_SPAN`] (sent once known), the
    /// finds of its chunks there `(piece, offset)`, and where the first half met it.
    Second {
        start: u64,
        cuts: Vec<u64>,
        send: Option<SyncSender<Vec<u64>>>,
        early: Vec<(usize, u64)>,
        met: Receiver<u64>,
    },
}

/// How far past its start the second half's cuts are looked at for the first half's.
const SYNC_SPAN: u64 = 4 << 20;

impl Plain<'_> {
    fn feed(&mut self, mut data: &[u8], found: &mut Finds) {
        if self.met() {
            return;
        }
        while let Some((k, len)) = self.chunker.next_cut(data) {
            if self.pending.is_empty() {
                self.chunk(&data[..k], len, found);
            } else {
                let mut bytes = std::mem::take(&mut self.pending);
                bytes.extend_from_slice(&data[..k]);
                self.chunk(&bytes, len, found);
                bytes.clear();
                self.pending = bytes;
            }
            data = &data[k..];
            if self.at_cut() {
                return;
            }
        }
        self.pending.extend_from_slice(data);
    }

    /// Whether the first half met the second's cuts (its search is over).
    fn met(&self) -> bool {
        matches!(self.role, Role::First { done: true, .. })
    }

    /// A cut at `self.start`: the second half notes it (and sends its cuts once past
    /// [`SYNC_SPAN`]); the first half past the middle looks for it among the second's.
    /// True when the first half met the second.
    fn at_cut(&mut self) -> bool {
        let at = self.start;
        match &mut self.role {
            Role::Whole => false,
            Role::Second { start, cuts, send, .. } => {
                if at < *start + SYNC_SPAN {
                    cuts.push(at);
                } else if let Some(tx) = send.take() {
                    let _ = tx.send(std::mem::take(cuts));
                }
                false
            }
            Role::First {
                mid,
                cuts,
                theirs,
                met,
                done,
            } => {
                if at < *mid || met.is_none() {
                    return false;
                }
                if theirs.is_none() {
                    // (The second half gone, a read error: this half goes on alone.)
                    *theirs = Some(cuts.recv().unwrap_or_default());
                }
                let list = theirs.as_deref().unwrap_or_default();
                if list.binary_search(&at).is_ok() {
                    if let Some(tx) = met.take() {
                        *done = tx.send(at).is_ok();
                    }
                } else if list.last().is_none_or(|&last| at > last) {
                    *met = None;
                }
                *done
            }
        }
    }

    /// A chunk of the seed, `len` bytes (`bytes`), starting at `self.start`.
    fn chunk(&mut self, bytes: &[u8], len: u64, found: &mut Finds) {
        debug_assert_eq!(bytes.len() as u64, len);
        if self.lookup.wants(len) {
            self.job.bytes.extend_from_slice(bytes);
            self.job.chunks.push((self.start, bytes.len()));
            if self.job.bytes.len() >= JOB {
                let next = self.spare.take().unwrap_or_default();
                let job = std::mem::replace(&mut self.job, next);
                // (A helper gone, which only a panic does: its chunks count as not found.)
                if let Ok(Some(done)) = self.pipe.push(job) {
                    self.record(done, found);
                }
            }
        }
        self.start += len;
    }

    /// A job hashed: each chunk's digest looked up; the job kept for reuse. The second
    /// half keeps its first chunks' finds aside, until it knows where the first met it.
    fn record(&mut self, mut done: Job, found: &mut Finds) {
        for (&(at, _), dig) in done.chunks.iter().zip(&done.digests) {
            match &mut self.role {
                Role::Second { start, early, .. } if at < *start + SYNC_SPAN => {
                    let d = self.lookup.hash.digest_len();
                    self.lookup.find(&dig.as_ref()[..d], |i| early.push((i, at)));
                }
                _ => record(&self.lookup, dig, Found::Target(at), found),
            }
        }
        done.bytes.clear();
        done.chunks.clear();
        done.digests.clear();
        self.spare = Some(done);
    }

    fn finish(mut self, found: &mut Finds) {
        let last = std::mem::take(&mut self.pending);
        if !last.is_empty() && !self.met() {
            self.chunk(&last, last.len() as u64, found);
        }
        let job = std::mem::take(&mut self.job);
        if !job.chunks.is_empty()
            && let Ok(Some(done)) = self.pipe.push(job)
        {
            self.record(done, found);
        }
        while let Ok(Some(done)) = self.pipe.next_done() {
            self.record(done, found);
        }
        if let Role::Second {
            cuts, send, early, met, ..
        } = self.role
        {
            if let Some(tx) = send {
                let _ = tx.send(cuts);
            }
            // Where the first half met this one: its finds from there, in order; else
            // (the first went on to the end alone) none.
            let mine = std::mem::replace(found, Finds::new(found.len()));
            if let Ok(at) = met.recv() {
                for (i, o) in early.into_iter().filter(|&(_, o)| o >= at) {
                    found.keep_first(i, Found::Target(o));
                }
                found.merge_later(mine);
            }
        }
    }
}

/// A `.zck` seed: its header first, then its chunks as stored.
struct ZckSeed<'a> {
    /// The header's bytes so far; emptied once parsed.
    head: Vec<u8>,
    /// The seed's data chunks, `(start, len)` in the seed, in order, once parsed.
    chunks: Vec<(u64, u64)>,
    /// The next of `chunks` to reach or the one being read.
    next: usize,
    /// The seed offset of the next byte fed.
    offset: u64,
    /// The current chunk's checksum so far, when some piece has its length.
    ctx: Option<digest::Context>,
    lookup: Lookup<'a>,
    /// The header did not parse: nothing more to find.
    dead: bool,
}

impl ZckSeed<'_> {
    fn feed(&mut self, mut data: &[u8], found: &mut Finds) {
        if self.dead {
            return;
        }
        if self.chunks.is_empty() && !self.take_head(&mut data) {
            return;
        }
        while !data.is_empty() && self.next < self.chunks.len() {
            let (start, len) = self.chunks[self.next];
            if self.offset < start {
                // The dictionary (or bytes between chunks): skipped.
                let n = usize::try_from(start - self.offset).map_or(data.len(), |n| n.min(data.len()));
                self.offset += n as u64;
                data = &data[n..];
                continue;
            }
            if self.offset == start && self.lookup.wants(len) {
                self.ctx = Some(self.lookup.context());
            }
            let end = start + len;
            let n = usize::try_from(end - self.offset).map_or(data.len(), |n| n.min(data.len()));
            if let Some(ctx) = &mut self.ctx {
                ctx.update(&data[..n]);
            }
            self.offset += n as u64;
            data = &data[n..];
            if self.offset == end {
                if let Some(ctx) = self.ctx.take() {
                    let dig = ctx.finish();
                    record(&self.lookup, &dig, Found::Remote(start), found);
                }
                self.next += 1;
            }
        }
        self.offset += data.len() as u64;
    }

    /// Takes header bytes from `data` (advancing it); true once the header is parsed and
    /// `chunks` known (or false: more bytes needed, or `dead`).
    fn take_head(&mut self, data: &mut &[u8]) -> bool {
        let need = loop {
            match super::head_len(&self.head) {
                Ok(Some(n)) => break n as usize,
                Ok(None) if !data.is_empty() => {
                    self.head.push(data[0]);
                    *data = &data[1..];
                }
                Ok(None) => return false,
                Err(_) => {
                    self.dead = true;
                    return false;
                }
            }
        };
        self.head.reserve_exact(need.saturating_sub(self.head.len()));
        let n = need.saturating_sub(self.head.len()).min(data.len());
        self.head.extend_from_slice(&data[..n]);
        *data = &data[n..];
        if self.head.len() < need {
            return false;
        }
        let parsed = super::chunk_spans(&self.head);
        self.offset = self.head.len() as u64;
        self.head = Vec::new();
        match parsed {
            Ok(chunks) => {
                self.chunks = chunks;
                self.dead = self.chunks.is_empty();
                !self.dead
            }
            Err(_) => {
                self.dead = true;
                false
            }
        }
    }
}

/// What a seed turned out to be.
enum Kind<'a> {
    /// Fewer than 5 bytes seen: its first bytes.
    Unknown(Vec<u8>),
    Plain(Box<Plain<'a>>),
    Zck(Box<ZckSeed<'a>>),
    /// A plain seed for a target without uncompressed checksums.
    Nothing,
}

/// The [`Scanner`] of [`Zck::scanner`](crate::delta::Index::scanner).
pub struct SeedScanner<'a, 'e> {
    zck: &'a Zck,
    helper: Option<&'a Scope<'a, 'e>>,
    kind: Kind<'a>,
    found: Finds,
    /// Its part in a split search, for a plain seed.
    role: Option<Role>,
}

impl<'a, 'e> SeedScanner<'a, 'e> {
    /// A scanner of `zck`'s pieces; a plain seed's chunks are hashed on a thread of
    /// `helper` when given.
    pub fn new(zck: &'a Zck, helper: Option<&'a Scope<'a, 'e>>) -> SeedScanner<'a, 'e> {
        SeedScanner {
            zck,
            helper,
            kind: Kind::Unknown(Vec::with_capacity(MAGIC.len())),
            found: Finds::new(zck.pieces.len()),
            role: None,
        }
    }

    /// The two halves of a plain seed's search, the second from `mid` (see [`Role`]):
    /// each hashes its chunks itself (the two threads are the CPUs).
    pub fn halves(zck: &'a Zck, mid: u64) -> (SeedScanner<'a, 'e>, SeedScanner<'a, 'e>) {
        let (cuts_tx, cuts) = sync_channel(1);
        let (met_tx, met) = sync_channel(1);
        let mut first = SeedScanner::new(zck, None);
        first.role = Some(Role::First {
            mid,
            cuts,
            theirs: None,
            met: Some(met_tx),
            done: false,
        });
        let mut second = SeedScanner::new(zck, None);
        second.role = Some(Role::Second {
            start: mid,
            cuts: Vec::new(),
            send: Some(cuts_tx),
            early: Vec::new(),
            met,
        });
        second.decide(b"");
        if let Kind::Plain(p) = &mut second.kind {
            p.start = mid;
        }
        (first, second)
    }

    /// Decides what the seed is from its first bytes `first`.
    fn decide(&mut self, first: &[u8]) {
        let z = self.zck;
        self.kind = if first == MAGIC {
            Kind::Zck(Box::new(ZckSeed {
                head: Vec::new(),
                chunks: Vec::new(),
                next: 0,
                offset: 0,
                ctx: None,
                lookup: Lookup::new(z, &z.digests, |p| p.remote_len),
                dead: false,
            }))
        } else if z.has_uncompressed_digests() || matches!(self.role, Some(Role::Second { .. })) {
            Kind::Plain(Box::new(Plain {
                chunker: Chunker::new(),
                pending: Vec::with_capacity(MAX_CHUNK as usize),
                start: 0,
                lookup: Lookup::new(z, &z.uncompressed_digests, |p| p.target_len),
                // (Inline, a job is done when pushed: one in flight is enough.)
                pipe: Pipe::new(
                    self.helper,
                    if self.helper.is_some() { DEPTH } else { 1 },
                    move |j: &mut Job| j.hash(z.chunk_hash.algorithm()),
                ),
                job: Job::default(),
                spare: None,
                role: self.role.take().unwrap_or(Role::Whole),
            }))
        } else {
            Kind::Nothing
        };
    }
}

impl Scanner for SeedScanner<'_, '_> {
    fn feed(&mut self, mut bytes: &[u8]) {
        if let Kind::Unknown(first) = &mut self.kind {
            let n = (MAGIC.len() - first.len()).min(bytes.len());
            first.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if first.len() < MAGIC.len() {
                return;
            }
            let first = std::mem::take(first);
            self.decide(&first);
            self.feed_known(&first);
        }
        self.feed_known(bytes);
    }

    fn wants_more(&self) -> bool {
        !matches!(&self.kind, Kind::Plain(p) if p.met())
    }

    fn finish(mut self: Box<Self>) -> Finds {
        if let Kind::Unknown(first) = &mut self.kind {
            let first = std::mem::take(first);
            self.decide(b"");
            self.feed_known(&first);
        }
        let mut found = std::mem::take(&mut self.found);
        if let Kind::Plain(p) = std::mem::replace(&mut self.kind, Kind::Nothing) {
            p.finish(&mut found);
        }
        found
    }
}

impl SeedScanner<'_, '_> {
    fn feed_known(&mut self, bytes: &[u8]) {
        match &mut self.kind {
            Kind::Plain(p) => p.feed(bytes, &mut self.found),
            Kind::Zck(z) => z.feed(bytes, &mut self.found),
            Kind::Unknown(_) | Kind::Nothing => {}
        }
    }
}
