//! A delta's target written front to back: each piece from its seed or from the staging
//! file, checked against its digest just before its write, the whole checked at the end
//! (the format's digests and `--checksum`) before the rename.

use super::Target;
use crate::config::Config;
use crate::delta::plan::{From, Plan};
use crate::delta::seed::Seed;
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
        ImageWriter::file(&target.path, opts.io)?
    };
    let mut wholes: Vec<Whole> = index
        .whole_digests()
        .into_iter()
        .map(|(alg, want)| (ring::digest::Context::new(alg), want, "the index's"))
        .collect();
    if let Some(c) = &opts.checksum {
        wholes.push((
            ring::digest::Context::new(c.algorithm),
            c.expected.clone(),
            "--checksum's",
        ));
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
    let finished = writer.finish()?;
    for (ctx, want, whose) in wholes {
        if ctx.finish().as_ref() != want.as_slice() {
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
type Whole = (ring::digest::Context, Vec<u8>, &'static str);

/// Every piece in target order, checked, pushed to `writer` and into `wholes`.
fn pieces(
    io: crate::config::IoChoice,
    index: &dyn Index,
    plan: &Plan,
    seeds: &mut [Seed],
    staging: &super::Staging,
    writer: &mut ImageWriter,
    wholes: &mut [Whole],
) -> Result<()> {
    let mut staged = if plan.from.contains(&From::Fetched) {
        Some(Seed::open(&staging.part(), io).map_err(|e| err!(LocalIo, "{e}"))?)
    } else {
        None
    };
    let (mut raw, mut piece) = (Vec::new(), Vec::new());
    // A piece found in a seed matched its digest when it was found; it is checked again
    // before its write unless the whole target is checked before it counts (zsync's
    // SHA-1): a seed changed since its scan is caught either way.
    let recheck = wholes.is_empty() || index.whole_digests().is_empty();
    for (i, from) in plan.from.iter().enumerate() {
        let p = index.pieces()[i];
        match *from {
            From::Seed(s, Found::Target(at)) => {
                seeds[s]
                    .read(at, p.target_len, &mut piece)
                    .map_err(|e| err!(LocalIo, "{e}"))?;
                if recheck && !index.matches(i, &piece) {
                    return Err(err!(
                        Checksum,
                        "seed {}: the piece at its byte {at} (target byte {}) no longer matches its digest: was \
                         the seed changed during the update? (a file target is not renamed; a device holds the \
                         pieces written before it)",
                        seeds[s].path.display(),
                        p.target_start
                    ));
                }
            }
            From::Seed(s, Found::Remote(at)) => {
                seeds[s]
                    .read(at, p.remote_len, &mut raw)
                    .map_err(|e| err!(LocalIo, "{e}"))?;
                index
                    .open_fetched(i, &raw, &mut piece)
                    .map_err(|e| err!(Checksum, "seed {}: {e}", seeds[s].path.display()))?;
            }
            From::Fetched => {
                let reader = staged.as_mut().ok_or_else(|| err!(Internal, "no staging file"))?;
                reader
                    .read(p.remote_start, p.remote_len, &mut raw)
                    .map_err(|e| err!(LocalIo, "{e}"))?;
                index
                    .open_fetched(i, &raw, &mut piece)
                    .map_err(|e| err!(Checksum, "{}: {e}", staging.part().display()))?;
            }
        }
        for (ctx, _, _) in wholes.iter_mut() {
            ctx.update(&piece);
        }
        writer.push(&piece)?;
    }
    Ok(())
}
