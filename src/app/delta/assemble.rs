//! A delta's target written front to back: each piece from its seed or from the staging
//! file, checked against its digest just before its write, the whole checked at the end
//! (the format's digests and `--checksum`) before the rename.

use super::Target;
use crate::config::Config;
use crate::delta::pipe::Pipe;
use crate::delta::plan::{From, Plan};
use crate::delta::seed::Seed;
use crate::delta::sum;
use crate::delta::{Found, Index};
use crate::err;
use crate::error::Result;
use crate::output::image::ImageWriter;

/// Writes the target of `index` as `plan` says, from `seeds` and `staging`'s `.part`.
///
/// # Errors
/// `LocalIo` for a read or a write; `Checksum` for a piece that fails its digest (a seed
/// changed since its scan, or the staging file since its check: the `.part` is removed, a
/// device said to hold unverified bytes only past the pieces written) or a target that
/// fails its whole digest.
pub(super) fn write(
    opts: &Config,
    target: &Target,
    index: &dyn Index,
    plan: &Plan,
    seeds: &mut [Seed],
    staging: &super::Staging,
) -> Result<()> {
    let mut writer = if target.device {
        ImageWriter::device(&target.path, opts.offset, index.target_len(), opts.io)?
    } else {
        ImageWriter::file(&target.path, index.target_len(), opts.io)?
    };
    let mut wholes: Vec<Whole> = index
        .whole_digests()
        .into_iter()
        .map(|(alg, want)| (sum::Whole::new(alg), want, "the index's"))
        .collect();
    if let Some(c) = &opts.checksum {
        wholes.push((sum::Whole::new(c.algorithm), c.expected.clone(), "--checksum's"));
    }
    if let Err(e) = pieces(opts.io, index, plan, seeds, staging, &mut writer, &mut wholes) {
        writer.abandon();
        return Err(e);
    }
    if writer.pushed() != index.target_len() {
        let msg = format!(
            "the target came to {} bytes, its index says {}",
            writer.pushed(),
            index.target_len()
        );
        writer.abandon();
        return Err(err!(Internal, "{msg}"));
    }
    let t = std::time::Instant::now();
    let finished = writer.finish()?;
    super::say_time(opts, "target's tail written and synced", t, 0);
    for (ctx, want, whose) in wholes {
        if ctx.finish() != want {
            finished.discard();
            return Err(err!(
                Checksum,
                "{}: the target does not match {whose} digest; {}",
                target.path.display(),
                if target.device {
                    "the device now holds an image that failed verification"
                } else {
                    "nothing renamed"
                }
            ));
        }
    }
    finished.commit(opts.force)
}

/// A digest of the whole target being computed, the one expected, and whose it is.
type Whole = (sum::Whole, Vec<u8>, &'static str);

/// Target bytes gathered before they go to the helper as one batch (pieces are never
/// split: a larger piece makes its batch larger).
const BATCH: usize = 128 << 10;
/// Batches in flight to the helper (the one filling aside): memory is `DEPTH + 1` batches.
const DEPTH: usize = 2;

/// Consecutive target bytes, whole pieces, on their way: checked (the seed pieces among
/// them, and the whole digests updated) by the helper, then written.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    /// Seed pieces to check again: `(piece, start in bytes, seed, seed offset)`.
    checks: Vec<(usize, usize, usize, u64)>,
    /// The first of `checks` that failed.
    bad: Option<usize>,
}

impl Batch {
    /// The helper's part: each seed piece checked, then (all good) the whole digests.
    fn check(&mut self, index: &dyn Index, wholes: &mut [Whole]) {
        for (k, &(i, start, _, _)) in self.checks.iter().enumerate() {
            let len = index.piece(i).target_len as usize;
            if !index.matches(i, &self.bytes[start..start + len]) {
                self.bad = Some(k);
                return;
            }
        }
        for (ctx, _, _) in wholes.iter_mut() {
            ctx.update(&self.bytes);
        }
    }
}

/// Every piece in target order, checked, pushed to `writer` and into `wholes`: this
/// thread reads and decodes the pieces and writes them, a helper (when one pays) checks
/// the seed pieces again and computes the whole digests, a batch behind.
fn pieces(
    io: crate::config::IoChoice,
    index: &dyn Index,
    plan: &Plan,
    seeds: &mut [Seed],
    staging: &super::Staging,
    writer: &mut ImageWriter,
    wholes: &mut [Whole],
) -> Result<()> {
    let mut staged = if plan.any_fetched() {
        Some(Seed::open_small(&staging.part(), io).map_err(|e| err!(LocalIo, "{e}"))?)
    } else {
        None
    };
    // A piece found in a seed matched its digest when it was found; it is checked again
    // before its write unless the whole target is checked before it counts (zsync's
    // SHA-1): a seed changed since its scan is caught either way.
    let recheck = wholes.is_empty() || index.whole_digests().is_empty();
    let helper = crate::delta::pipe::helper_pays();
    std::thread::scope(|scope| {
        let mut pipe = Pipe::new(helper.then_some(scope), DEPTH, |b: &mut Batch| b.check(index, wholes));
        let (mut raw, mut piece) = (Vec::new(), Vec::new());
        let mut spare: Vec<Batch> = Vec::new();
        let mut batch = Batch::default();
        for i in 0..plan.len() {
            let p = index.piece(i);
            let start = batch.bytes.len();
            match plan.from(i) {
                From::Seed(s, Found::Target(at)) => {
                    seeds[s]
                        .append(at, p.target_len, &mut batch.bytes)
                        .map_err(|e| err!(LocalIo, "{e}"))?;
                    if recheck {
                        batch.checks.push((i, start, s, at));
                    }
                }
                From::Seed(s, Found::Remote(at)) => {
                    seeds[s]
                        .read(at, p.remote_len, &mut raw)
                        .map_err(|e| err!(LocalIo, "{e}"))?;
                    index
                        .open_fetched(i, &raw, &mut piece)
                        .map_err(|e| err!(Checksum, "seed {}: {e}", seeds[s].path.display()))?;
                    batch.bytes.extend_from_slice(&piece);
                }
                From::Fetched => {
                    let reader = staged.as_mut().ok_or_else(|| err!(Internal, "no staging file"))?;
                    reader
                        .read(p.remote_start, p.remote_len, &mut raw)
                        .map_err(|e| err!(LocalIo, "{e}"))?;
                    index
                        .open_fetched(i, &raw, &mut piece)
                        .map_err(|e| err!(Checksum, "{}: {e}", staging.part().display()))?;
                    batch.bytes.extend_from_slice(&piece);
                }
            }
            if batch.bytes.len() >= BATCH {
                let next = spare.pop().unwrap_or_default();
                let done = pipe
                    .push(std::mem::replace(&mut batch, next))
                    .map_err(|e| err!(Internal, "{e}"))?;
                if let Some(done) = done {
                    spare.push(write_checked(done, index, seeds, writer)?);
                }
            }
        }
        if !batch.bytes.is_empty()
            && let Some(done) = pipe.push(batch).map_err(|e| err!(Internal, "{e}"))?
        {
            write_checked(done, index, seeds, writer)?;
        }
        while let Some(done) = pipe.next_done().map_err(|e| err!(Internal, "{e}"))? {
            write_checked(done, index, seeds, writer)?;
        }
        Ok(())
    })
}

/// Writes a batch the helper checked; returns it emptied. A seed piece that failed its
/// check again is an error (nothing of the batch written).
fn write_checked(mut b: Batch, index: &dyn Index, seeds: &[Seed], writer: &mut ImageWriter) -> Result<Batch> {
    if let Some(k) = b.bad {
        let (i, _, s, at) = b.checks[k];
        return Err(err!(
            Checksum,
            "seed {}: the piece at its byte {at} (target byte {}) no longer matches its digest: was \
             the seed changed during the update? (a file target is not renamed; a device holds the \
             pieces written before it)",
            seeds[s].path.display(),
            index.piece(i).target_start
        ));
    }
    writer.push(&b.bytes)?;
    b.bytes.clear();
    b.checks.clear();
    Ok(b)
}
