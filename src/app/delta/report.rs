//! What a delta did or learned, for its summary line and `--json`'s `delta` object: filled
//! step by step, so that a delta refused or failed still reports what it knew then.

/// Why a delta was refused (exit 11), as `--json`'s `delta.refused` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// More than `--max-delta-bytes` allows (the pieces, or the whole file).
    MaxDeltaBytes,
    /// The server serves no ranges, and `--allow-full` was not given.
    NoRanges,
}

/// What a delta did, for its summary line and `--json`.
pub(super) struct Report {
    /// `zchunk` or `zsync`.
    pub(super) format: &'static str,
    pub(super) seeds: usize,
    /// The target's size, bytes, once the index told it.
    pub(super) target_len: Option<u64>,
    /// What a full download would fetch, bytes, once the index told it.
    pub(super) full: Option<u64>,
    /// Target bytes the seeds gave, and the bytes of the ranges to fetch (the plan's, before
    /// alignment; the whole file with `--allow-full`), once the seeds were scanned.
    pub(super) reused: Option<u64>,
    pub(super) needed: Option<u64>,
    /// The whole file was fetched (a server without ranges, `--allow-full`): the seeds
    /// gave nothing.
    pub(super) whole: bool,
    /// Body bytes and requests of every fetch of the run (index, pieces, a re-fetch).
    pub(super) fetched: u64,
    pub(super) requests: u64,
    /// `--signature` over the index was checked and good.
    pub(super) signed: bool,
    pub(super) refused: Option<Refused>,
}

impl Report {
    pub(super) fn new(format: &'static str, seeds: usize) -> Report {
        Report {
            format,
            seeds,
            target_len: None,
            full: None,
            reused: None,
            needed: None,
            whole: false,
            fetched: 0,
            requests: 0,
            signed: false,
            refused: None,
        }
    }

    /// The summary line's text after `done: FILE: ` (a delta that landed).
    pub(super) fn line(&self) -> String {
        let whole = match self.whole {
            true => ", the whole file (--allow-full)",
            false => "",
        };
        format!(
            "{} bytes ({}): {} reused from {} seed(s), {} fetched in {} request(s){whole} (a full download: {} bytes)",
            self.target_len.unwrap_or(0),
            self.format,
            self.reused.unwrap_or(0),
            self.seeds,
            self.fetched,
            self.requests,
            self.full.unwrap_or(0)
        )
    }

    /// The `delta` object: `null` for what the run did not learn; `refused` says why a
    /// delta was refused (exit 11): `max_delta_bytes` or `no_ranges`, else `null`.
    pub(super) fn json(&self) -> String {
        let n = |v: Option<u64>| v.map_or_else(|| "null".to_owned(), |v| v.to_string());
        let refused = match self.refused {
            Some(Refused::MaxDeltaBytes) => "\"max_delta_bytes\"",
            Some(Refused::NoRanges) => "\"no_ranges\"",
            None => "null",
        };
        format!(
            "{{\"format\":\"{}\",\"seeds\":{},\"target_bytes\":{},\"reused_bytes\":{},\"needed_bytes\":{},\
             \"fetched_bytes\":{},\"requests\":{},\"full_bytes\":{},\"whole_file\":{},\"index_signed\":{},\
             \"refused\":{refused}}}",
            self.format,
            self.seeds,
            n(self.target_len),
            n(self.reused),
            n(self.needed),
            self.fetched,
            self.requests,
            n(self.full),
            self.whole,
            self.signed
        )
    }
}
