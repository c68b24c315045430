//! The options of a delta update (`--seed`, `--max-delta-bytes`, `--allow-full`; "Delta
//! updates:" in `--help`).

use lexopt::Arg::{self, Long};
use lexopt::Parser;

use super::{path_value, scaled, usage, utf8};
use crate::config::{Config, DeltaBound};
use crate::err;
use crate::error::Result;

/// Applies `arg` when it is an option of delta updates ("Delta updates:" in `--help`),
/// reading its value from `p`. Returns whether it was one.
///
/// # Errors
/// [`crate::error::Kind::Usage`] for a missing or bad value.
pub(super) fn delta_option(arg: &Arg<'_>, p: &mut Parser, o: &mut Config) -> Result<bool> {
    match arg {
        Long("seed") => o.seeds.push(path_value(p, "--seed")?),
        Long("max-delta-bytes") => {
            let v = utf8(p.value().map_err(usage)?, "--max-delta-bytes")?;
            o.max_delta = Some(delta_bound(&v)?);
        }
        Long("allow-full") => o.allow_full = true,
        _ => return Ok(false),
    }
    Ok(true)
}

/// `--max-delta-bytes`: bytes with an optional `K`, `M` or `G` (powers of 1024), or a
/// percentage of the full download (`10%`).
///
/// # Errors
/// [`crate::error::Kind::Usage`] for anything else.
fn delta_bound(v: &str) -> Result<DeltaBound> {
    let bad = || {
        err!(
            Usage,
            "--max-delta-bytes: {v:?} is neither bytes (50M) nor a percentage (10%)"
        )
    };
    if let Some(p) = v.strip_suffix('%') {
        let p: f64 = p.parse().map_err(|_| bad())?;
        return match (0.0..=100.0).contains(&p) {
            true => Ok(DeltaBound::Percent(p)),
            false => Err(err!(Usage, "--max-delta-bytes: a percentage is 0 to 100, not {v:?}")),
        };
    }
    let bytes = scaled(v).ok_or_else(bad)?;
    if !(0.0..1e18).contains(&bytes) {
        return Err(bad());
    }
    Ok(DeltaBound::Bytes(bytes as u64))
}
