//! A delta's staging file: remote byte ranges fetched by the app's own download (Range
//! requests over `-x` connections, retries, TLS, resume) into `STAGING.part` at their own
//! offsets, its control file recording what landed ([`Config::fetch_only`],
//! [`Config::keep_part`]).

use std::path::{Path, PathBuf};

use crate::config::{Config, OutputTarget};
use crate::err;
use crate::error::{Kind, Result};
use crate::output::resume::{self, State};
use crate::report::Record;

/// The staging file of one remote file and what was fetched into it by this run.
pub(super) struct Staging {
    /// `STAGING` (the download's output name); the bytes are in `STAGING.part`.
    pub(super) path: PathBuf,
    /// The URL its bytes come from.
    pub(super) url: String,
    /// Body bytes and requests this run's fetches took.
    pub(super) fetched: u64,
    pub(super) requests: u64,
    /// The whole file was fetched into it in this run (a server without ranges,
    /// `--allow-full`): later fetches have nothing to add.
    pub(super) whole: bool,
    /// The most bytes a whole download may have (`--max-delta-bytes` with `--allow-full`).
    pub(super) bound: Option<u64>,
    /// Why the delta was refused (exit 11), set where it was.
    pub(super) refused: Option<super::report::Refused>,
}

impl Staging {
    pub(super) fn new(path: PathBuf, url: String) -> Staging {
        Staging {
            path,
            url,
            fetched: 0,
            requests: 0,
            whole: false,
            bound: None,
            refused: None,
        }
    }

    /// `STAGING.part`, where the bytes are.
    pub(super) fn part(&self) -> PathBuf {
        crate::output::part_path(&self.path)
    }

    fn control(&self) -> PathBuf {
        resume::path_for(&self.part())
    }

    /// What the control file says landed (size, validator, ranges); `None` before the
    /// first fetch.
    ///
    /// # Errors
    /// `LocalIo` when the control file cannot be read or parsed.
    pub(super) fn state(&self) -> Result<Option<State>> {
        resume::load(&self.control()).map_err(|e| err!(LocalIo, "{e}"))
    }

    /// Fetches `want` (sorted, disjoint remote ranges; `None`: the whole file, which only
    /// `--allow-full` asks) into the staging file, with the options of `opts` that shape
    /// the requests; what landed before (same size and validator) is not fetched again.
    /// Returns the control file's state after it.
    ///
    /// # Errors
    /// What the download fails with; `Internal` when it left no control file.
    pub(super) fn fetch(
        &mut self,
        opts: &Config,
        want: Option<Vec<(u64, u64)>>,
        quiet: bool,
        per_run: &mut super::super::PerRun,
    ) -> Result<State> {
        if self.whole
            && let Some(st) = self.state()?
        {
            return Ok(st);
        }
        let mut sub = sub_options(opts, &self.url, &self.path, want, quiet);
        sub.size_bound = self.bound.map(|b| (b, bound_reason(b)));
        let mut record = Record::default();
        let got = super::super::run(sub, &mut record, per_run);
        self.fetched += record.fetched.unwrap_or(0);
        self.requests += record.requests.unwrap_or(0);
        got?;
        self.state()?
            .ok_or_else(|| err!(Internal, "{}: no control file after its fetch", self.part().display()))
    }

    /// Forgets the ranges `bad` (their bytes failed their digest): the next fetch takes
    /// them again.
    ///
    /// # Errors
    /// `LocalIo` when the control file cannot be read or written.
    pub(super) fn forget(&self, bad: &[(u64, u64)]) -> Result<()> {
        let Some(mut st) = self.state()? else {
            return Ok(());
        };
        let keep = crate::schedule::Landed::outside(bad, st.total);
        st.ranges = crate::schedule::Landed::from_ranges(&st.ranges).within(keep.ranges());
        resume::save(&self.control(), &st).map_err(|e| err!(LocalIo, "{e}"))?;
        Ok(())
    }

    /// A staging file that is a symbolic link is refused before anything is fetched: the
    /// fetched pieces are never written through one (the `.part` is opened `O_NOFOLLOW`).
    ///
    /// # Errors
    /// `LocalIo` naming the link and where it points.
    pub(super) fn refuse_link(&self) -> Result<()> {
        let part = self.part();
        match std::fs::symlink_metadata(&part) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&part).map_or_else(|_| "?".to_owned(), |t| t.display().to_string());
                Err(err!(
                    LocalIo,
                    "the delta's staging file {} is a symbolic link (to {to}): refused, fetched pieces are never \
                     written through a link; remove it (or give -o another name)",
                    part.display()
                ))
            }
            _ => Ok(()),
        }
    }

    /// Removes the staging file and its control file (the target landed).
    pub(super) fn remove(&self) {
        resume::remove(&self.control());
        let _ = std::fs::remove_file(self.part());
    }
}

/// The options of one fetch into the staging file `path`: the file's request options
/// (proxy, TLS, headers, connections, timeouts, tries), none of its output, check or
/// condition options.
fn sub_options(opts: &Config, url: &str, path: &Path, want: Option<Vec<(u64, u64)>>, quiet: bool) -> Box<Config> {
    let mut sub = Box::new(opts.clone());
    sub.url = url.to_owned();
    sub.mirrors.clear();
    sub.seeds.clear();
    sub.output = OutputTarget::File(path.to_path_buf());
    sub.dir = None;
    sub.threads = 1;
    (sub.resume, sub.force, sub.quiet, sub.content_disposition) = (true, false, quiet, false);
    (sub.checksum, sub.checksum_file, sub.signature, sub.json) = (None, None, None, None);
    (sub.etag_compare, sub.etag_save, sub.timestamping, sub.condition) = (None, None, false, None);
    (sub.kept, sub.replace, sub.offset, sub.control) = (None, false, 0, None);
    sub.trusted_keys.clear();
    sub.size_bound = None;
    sub.fetch_only = want;
    sub.keep_part = true;
    sub
}

/// Why a whole download of more than `most` bytes is refused (`--max-delta-bytes`).
pub(super) fn bound_reason(most: u64) -> String {
    format!("--max-delta-bytes allows {most} bytes for this delta")
}

/// Whether `e` is a server's refusal of ranges (a 200 to a Range request), which
/// `--allow-full` turns into a whole download.
pub(super) fn is_no_ranges(e: &crate::error::Error) -> bool {
    e.kind == Kind::Protocol && e.msg.contains(crate::control::NO_RANGES)
}
