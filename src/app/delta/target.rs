//! Where a delta's target goes (a file, or a block device at `--offset`) and where its
//! fetched bytes stage.

use std::path::PathBuf;

use super::Format;
use crate::config::Config;
use crate::err;
use crate::error::Result;

/// Where a delta's target goes and where its fetched bytes stage.
pub(super) struct Target {
    /// The file's final name, or the block device.
    pub(super) path: PathBuf,
    /// A block device (the image goes at `--offset`).
    pub(super) device: bool,
    /// The staging file's name (`FILE.delta`; for a device: beside `--control`, or in the
    /// temporary directory).
    pub(super) staging: PathBuf,
}

impl Target {
    /// The target of `opts` for the index at `url`: `-o`, else the URL's name without its
    /// `.zck` (zchunk: the uncompressed file) or `.zsync`.
    pub(super) fn of(opts: &Config, url: &http::Url, format: &Format) -> Result<Target> {
        let path = match &opts.output {
            crate::config::OutputTarget::File(p) => super::super::in_dir(opts.dir.as_deref(), p.clone()),
            _ => {
                let name = url.file_name_decoded().unwrap_or_default();
                let suffix = match format {
                    Format::Zchunk => ".zck",
                    Format::Zsync => ".zsync",
                };
                let name = name.strip_suffix(suffix).filter(|n| !n.is_empty()).ok_or_else(|| {
                    err!(
                        Usage,
                        "{url}: cannot name the target from the URL ({suffix} expected): give -o"
                    )
                })?;
                super::super::in_dir(
                    opts.dir.as_deref(),
                    PathBuf::from(crate::output::fit_name(name.to_owned())),
                )
            }
        };
        let device = crate::output::device::is_block_device(&path);
        if !device && (opts.offset != 0 || opts.control.is_some()) {
            return Err(err!(
                Usage,
                "--offset and --control are for a block-device target, not {}",
                path.display()
            ));
        }
        if device && opts.resume && opts.control.is_none() {
            // As for a plain image: -c promises a resume, and without --control the staging
            // file would be in the temporary directory, which a power cut may empty.
            return Err(err!(
                Usage,
                "-c on a block device needs --control FILE: a delta's staging file goes beside it (without \
                 --control it is in the temporary directory, and a rerun without -c reuses it only while it is there)"
            ));
        }
        if !device && path.exists() && !opts.force {
            return Err(err!(LocalIo, "{} exists (use --force to replace it)", path.display()));
        }
        let staging = match (device, &opts.control) {
            (false, _) => {
                let mut s = path.clone().into_os_string();
                s.push(".delta");
                PathBuf::from(s)
            }
            (true, Some(c)) => {
                let mut s = c.clone().into_os_string();
                s.push(".delta");
                PathBuf::from(s)
            }
            (true, None) => {
                let name: String = path.display().to_string().replace('/', "_");
                std::env::temp_dir().join(format!("ringdl-delta{name}-{}", opts.offset))
            }
        };
        Ok(Target { path, device, staging })
    }

    /// The target's identity (device, inode; a block device: its rdev) if it exists.
    pub(super) fn id(&self) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&self.path).ok()?;
        Some(if self.device { (m.rdev(), 0) } else { (m.dev(), m.ino()) })
    }
}
