//! What a run reads before it fetches anything: the line of a `--checksum-file` for this
//! output, and the control file of a `.part` to resume.

use crate::error::Result;
use crate::output::resume;

/// `--checksum-file`: the digest for the output's file name, else the URL's, read before
/// anything is fetched.
///
/// # Errors
/// [`crate::error::Kind::LocalIo`] when the file cannot be read; `Usage` when no line
/// names the file ([`crate::config::Checksum::from_sums`]).
pub(super) fn checksum_from_file(
    text: &[u8],
    sums: &str,
    output: Option<&std::path::Path>,
    url: &http::Url,
) -> Result<crate::config::Checksum> {
    let from_output = output
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned());
    let from_url = url.file_name_decoded();
    let mut names: Vec<&str> = Vec::new();
    for n in [from_output.as_deref(), from_url.as_deref()].into_iter().flatten() {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    crate::config::Checksum::from_sums(&crate::config::sums_text(text), &names, sums)
}

/// Reads the control file for `-c`; any doubt means starting from zero, said on stderr
/// (not with `quiet`: `-q`).
pub(super) fn load_resume(control: &std::path::Path, url: &str, quiet: bool) -> Option<resume::State> {
    macro_rules! say {
        ($($t:tt)*) => {
            if !quiet {
                eprintln!($($t)*);
            }
        };
    }
    let part = control.with_extension("");
    let part_len = std::fs::metadata(&part).map(|m| m.len()).ok();
    match resume::load(control) {
        // The ranges are only as good as the file they describe: it must still be there,
        // at least as long as the last range.
        Ok(Some(st)) if part_len.is_none_or(|l| st.ranges.last().is_some_and(|r| r.1 > l)) => {
            say!(
                "ringdl: {} is missing or shorter than {} says: starting from zero",
                part.display(),
                control.display()
            );
            None
        }
        Ok(Some(st)) if st.url == url => Some(st),
        // Another URL (a mirror, say) may resume only when the server's validator will
        // prove it is the same file; without one, size alone proves nothing.
        Ok(Some(st)) if st.validator.is_some() => {
            say!(
                "ringdl: {} was written for {}; resuming only if this server's validator matches",
                control.display(),
                st.url
            );
            Some(st)
        }
        Ok(Some(st)) => {
            say!(
                "ringdl: {} belongs to {} and has no validator: starting from zero",
                control.display(),
                st.url
            );
            None
        }
        Ok(None) => {
            // (An empty `.part` is the one this run's lock just created.)
            if std::fs::metadata(&part).is_ok_and(|m| m.len() > 0) {
                say!("ringdl: no control file {}: starting from zero", control.display());
            }
            None
        }
        Err(m) => {
            say!("ringdl: {m}: starting from zero");
            None
        }
    }
}
