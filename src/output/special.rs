//! Outputs that are not regular files — FIFOs, character and block devices, sockets,
//! descriptors reached through `/dev/stdout` or `/proc/self/fd/N` — told apart, and a FIFO
//! opened for writing without blocking the process.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use crate::err;
use crate::error::Result;

/// An output that is not a regular file: it takes bytes only in order (or discards them),
/// has no `.part`, and is never replaced, not even with `--force`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Special {
    /// What it is, for messages: "standard output", "the FIFO out", "the character
    /// device /dev/tty".
    pub what: String,
    /// Discards what it is given (`/dev/null`, `/dev/zero`): any order will do, so every
    /// connection may write at its own offset.
    pub sink: bool,
    /// A descriptor this process already has open (`/dev/stdout`, `/proc/self/fd/1`,
    /// `/dev/fd/2`): written through a duplicate, so its position and `O_APPEND` are
    /// kept, as the shell set them.
    pub fd: Option<i32>,
}

/// Classifies `-o PATH` (or the default name) when it names something other than a
/// regular file or nothing: a FIFO, a character or block device, a socket, or an open
/// descriptor reached through `/dev/stdout`, `/dev/fd/N` or `/proc/self/fd/N` (whatever
/// that descriptor is — `-o /dev/stdout > file` must not replace /dev/stdout).
/// `None`: a regular file, a directory (refused later) or a path that does not exist.
pub fn special(path: &Path) -> Option<Special> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    // Follow the symbolic links one by one: a link into /proc/<pid>/fd is a descriptor.
    let own_fds = PathBuf::from(format!("/proc/{}/fd", std::process::id()));
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        if let (Some(parent), Some(name)) = (p.parent(), p.file_name())
            && let Ok(n) = name.to_string_lossy().parse::<i32>()
            && std::fs::canonicalize(if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            })
            .is_ok_and(|d| d == own_fds)
        {
            let what = match n {
                1 => "standard output".to_owned(),
                2 => "standard error".to_owned(),
                n => format!("descriptor {n} ({})", path.display()),
            };
            let sink = std::fs::metadata(&p).is_ok_and(|m| m.file_type().is_char_device() && is_sink(m.rdev()));
            return Some(Special {
                what,
                sink,
                fd: Some(n),
            });
        }
        match std::fs::read_link(&p) {
            Ok(t) if t.is_absolute() => p = t,
            Ok(t) => p = p.parent().unwrap_or(Path::new("")).join(t),
            Err(_) => break,
        }
    }
    let md = std::fs::metadata(path).ok()?;
    let ft = md.file_type();
    let kind = if ft.is_fifo() {
        "FIFO"
    } else if ft.is_char_device() {
        "character device"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_socket() {
        "socket"
    } else {
        return None;
    };
    Some(Special {
        what: format!("the {kind} {}", path.display()),
        sink: ft.is_char_device() && is_sink(md.rdev()),
        fd: None,
    })
}

/// `/dev/null` (1:3) and `/dev/zero` (1:5) discard what is written (devices(7)).
fn is_sink(rdev: u64) -> bool {
    let (major, minor) = (rustix::fs::major(rdev), rustix::fs::minor(rdev));
    major == 1 && (minor == 3 || minor == 5)
}

/// Opens a FIFO, device or socket path for writing (`flags`), without blocking the
/// process: open(2) of a FIFO for writing waits for a reader, and SIGINT/SIGTERM are
/// already blocked for the signalfd, so a plain open would leave only SIGKILL. The open
/// is O_NONBLOCK (fifo(7): ENXIO while no reader); until a reader comes ringdl says it
/// waits (when `say`: not with `-q`; `what` names the output) and polls `signals` every
/// 100 ms. `signals` `None`: no wait (a list's file, whose wait would hold every other
/// file of the run): a FIFO with no reader is an error at once. O_NONBLOCK is cleared
/// once open.
///
/// # Errors
/// [`crate::error::Kind::LocalIo`] when open(2) fails otherwise (a socket path: ENXIO,
/// unix(7) sockets cannot be opened), or a FIFO has no reader and `signals` is `None`;
/// [`crate::error::Kind::Interrupted`] on a signal.
pub(super) fn open_waiting(
    p: &Path,
    flags: OFlags,
    (what, say): (&str, bool),
    signals: Option<BorrowedFd<'_>>,
) -> Result<OwnedFd> {
    use std::os::unix::fs::FileTypeExt;
    let mut said = !say;
    loop {
        match rustix::fs::open(p, flags | OFlags::NONBLOCK, Mode::empty()) {
            Ok(fd) => {
                let fl = rustix::fs::fcntl_getfl(&fd).map_err(|e| err!(LocalIo, "{what}: F_GETFL: {e}"))?;
                rustix::fs::fcntl_setfl(&fd, fl - OFlags::NONBLOCK)
                    .map_err(|e| err!(LocalIo, "{what}: F_SETFL: {e}"))?;
                return Ok(fd);
            }
            Err(rustix::io::Errno::NXIO) if std::fs::metadata(p).is_ok_and(|m| m.file_type().is_fifo()) => {
                if !said {
                    eprintln!("ringdl: waiting for a reader on {what}");
                    said = true;
                }
                let Some(sig) = signals else {
                    return Err(err!(
                        LocalIo,
                        "{what} has no reader: a list's file is written to a FIFO only while one reads it (not waited for: the other files would wait too)"
                    ));
                };
                let mut pfd = [rustix::event::PollFd::new(&sig, rustix::event::PollFlags::IN)];
                let t = rustix::time::Timespec {
                    tv_sec: 0,
                    tv_nsec: 100_000_000,
                };
                match rustix::event::poll(&mut pfd, Some(&t)) {
                    Ok(0) | Err(rustix::io::Errno::INTR) => continue,
                    Ok(_) => {
                        let name = uring::signal::read_name(sig);
                        return Err(err!(
                            Interrupted,
                            "interrupted by {name} while waiting for a reader on {what}"
                        ));
                    }
                    Err(e) => return Err(err!(LocalIo, "poll: {e}")),
                }
            }
            Err(rustix::io::Errno::NXIO) if std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket()) => {
                return Err(err!(
                    LocalIo,
                    "cannot open {what}: a socket file cannot be opened (unix(7)); connect to it and pipe, e.g. -o - | socat - UNIX-CONNECT:{}",
                    p.display()
                ));
            }
            Err(e) => return Err(err!(LocalIo, "cannot open {}: {e}", p.display())),
        }
    }
}
