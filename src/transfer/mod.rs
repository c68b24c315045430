//! Transfers: one output each, and what the download knows of it — the plan of ranges
//! still to fetch and the ranges landed (`schedule/`), the size and validator the server
//! answered with, the mirrors it is fetched from and their standing, the resume state,
//! the counts for its summary. A transfer is state fed by the loop's events; it holds no
//! ring, connection or buffer, so one loop can carry several and a transfer does not
//! assume it shares a ring with any other.

pub(crate) mod mirror;

use std::rc::Rc;
use std::time::{Duration, Instant};

use http::Url;

use crate::output::Output;
use crate::output::device::Room;
use crate::output::resume::State;
use crate::schedule::Landed;
use crate::schedule::queue::Plan;
use mirror::Mirror;

/// One output's download state.
pub(crate) struct Transfer {
    /// The output's alignment for O_DIRECT writes, bytes (1 when buffered).
    pub(crate) align: u64,
    /// Writes bypass the page cache (O_DIRECT).
    pub(crate) direct: bool,
    /// The output takes bytes in order only (standard output, a FIFO).
    pub(crate) sequential: bool,
    /// The output is a regular file (a `.part` to truncate, sync and rename).
    pub(crate) file: bool,
    /// The output (a block device's [`Room`]: every write goes at `room.base` + its
    /// offset, within `room.len`).
    pub(crate) out: Rc<Output>,
    /// The output in messages ("standard output", "the FIFO out.bin").
    pub(crate) out_name: String,
    /// Which range goes out next: the first request (from 0, or the first byte a resumed
    /// `.part` lacks, to [`crate::schedule::FIRST_SEGMENT`] later or where the `.part` has
    /// bytes again), then the planned segments; Retry-After holds.
    pub(crate) plan: Plan,
    /// When the download started (the plan's clock).
    pub(crate) started: Instant,
    /// The server serves byte ranges (RFC 9110 §14): segments go out as ranged requests.
    pub(crate) ranges: bool,
    /// The file's size, bytes, once an answer said it.
    pub(crate) total: Option<u64>,
    /// The validator (strong or weak ETag, else Last-Modified) later answers must carry.
    pub(crate) validator: Option<Vec<u8>>,
    /// Ranges on disk (written, or synced for the control file).
    pub(crate) landed: Landed,
    /// Body bytes received, bytes.
    pub(crate) received: u64,
    /// A mirror's first answer redirected here (3xx with Location) ...
    pub(crate) redirect: Option<Url>,
    /// ... and the mirror it is for.
    pub(crate) redirect_mirror: usize,
    /// The size is known and the output wants a FALLOCATE.
    pub(crate) need_fallocate: bool,
    /// Control-file state to validate against the first 206.
    pub(crate) resume: Option<State>,
    /// The Content-Disposition file name the server suggested.
    pub(crate) disposition: Option<String>,
    /// The file on the server changed under the download: what is kept is of the old one.
    pub(crate) changed: bool,
    /// The server turned extra connections away: the number it allows (for the summary),
    /// counting every request to it (other files' too).
    pub(crate) capped_at: Option<usize>,
    /// Of [`Transfer::capped_at`], those this transfer's own (on every reactor it spreads
    /// over), when the server was seen allowing that many.
    pub(crate) capped_own: usize,
    /// The server turned this transfer away before it received any byte, while no
    /// request of it was served (its cap held by other files or clients) ...
    pub(crate) refused_first: bool,
    /// ... and the time from its start to its first body byte then (for the summary:
    /// its rate is of the time after).
    pub(crate) waited: std::time::Duration,
    /// Failed attempts tried again, and work-stealing splits (for the summary).
    pub(crate) retries: u64,
    /// Requests sent (HTTP requests for body bytes, each try counted).
    pub(crate) requests: u64,
    /// A partial fetch ([`crate::config::Config::fetch_only`]): the ranges counted in
    /// `landed` that hold nothing (outside what it fetches, and not landed before).
    pub(crate) holes: Option<crate::schedule::Landed>,
    /// A partial fetch: everything outside the ranges it fetches (counted in `landed`
    /// whether it holds bytes or not), cut out of what the progress line counts.
    pub(crate) skipped: Option<crate::schedule::Landed>,
    /// Requests sent again, no try spent, because their kept-alive connection was closed
    /// before any byte of the answer (for the summary).
    pub(crate) resent: u64,
    pub(crate) steals: u64,
    /// The first 206 had no complete length (`bytes a-b/*`): requests go without Range.
    pub(crate) plain_get: bool,
    /// Every URL of the file, in the order given (one without mirrors).
    pub(crate) mirrors: Vec<Mirror>,
    /// The mirror whose first answer came first (in the order given): the others must
    /// agree with it.
    pub(crate) reference: Option<usize>,
    /// The first request's precondition held: 304 Not Modified, nothing to fetch.
    pub(crate) not_modified: bool,
    /// Connection slots that may open a connection (each reconnects after a failure by its
    /// own rules): one per mirror until the first answer tells the size, then
    /// [`crate::schedule::connections_for`] (`--min-split-size`). A run opens no connection
    /// it does not use.
    pub(crate) wanted: usize,
    /// `--threads`: this transfer fetches only `[start, end)` of the file for the reactor
    /// that owns it (its first answer must match the owner's size and validator; no
    /// preallocation, no sync, no rename).
    pub(crate) part: Option<(u64, u64)>,
}

/// [`Transfer::shown`]: bytes in place, of the size when known, and where they lie.
pub(crate) type Shown<'a> = (u64, Option<u64>, std::borrow::Cow<'a, [(u64, u64)]>);

impl Transfer {
    /// A transfer's state before its first answer: to `out`, over `mirrors`, its plan the
    /// first request's byte range `first` (`start`, `end`), `wanted` connections to open at
    /// first; `part`: the byte range of another reactor's transfer this one fetches, if it
    /// is such a part (`--threads`).
    pub(crate) fn new(
        out: &Rc<Output>,
        resume: Option<State>,
        mirrors: Vec<Mirror>,
        first: (u64, u64),
        wanted: usize,
        part: Option<(u64, u64)>,
    ) -> Transfer {
        Transfer {
            align: out.align,
            direct: out.direct,
            sequential: out.sequential,
            file: out.part.is_some(),
            out: Rc::clone(out),
            out_name: out.describe(),
            plan: Plan::new(first.0, first.1),
            started: Instant::now(),
            ranges: false,
            total: None,
            validator: None,
            landed: Landed::default(),
            received: 0,
            redirect: None,
            redirect_mirror: 0,
            need_fallocate: false,
            resume,
            disposition: None,
            changed: false,
            capped_at: None,
            capped_own: 0,
            refused_first: false,
            waited: Duration::ZERO,
            retries: 0,
            requests: 0,
            holes: None,
            skipped: None,
            resent: 0,
            steals: 0,
            plain_get: false,
            mirrors,
            reference: None,
            not_modified: false,
            wanted,
            part,
        }
    }

    /// The server turned a request away while it served `using` of them, `own` of which
    /// this transfer's: kept when it is the most seen (for the summary and `-v`).
    pub(crate) fn saw_cap(&mut self, using: usize, own: usize) {
        let most = self.capped_at.unwrap_or(0);
        if using > most {
            self.capped_own = own;
        } else if using == most {
            self.capped_own = self.capped_own.max(own);
        }
        self.capped_at = Some(most.max(using));
    }

    /// The block device's room, when the output is one.
    pub(crate) fn room(&self) -> Option<&Room> {
        self.out.room.as_ref()
    }

    /// What the progress line and a failure's "kept" count: bytes in place, of the size
    /// when known, and where they lie (sorted `[start, end)` ranges, for the map). A
    /// partial fetch counts only the ranges it fetches, laid end to end: its holes hold
    /// no byte of it, and what it has of its ranges from an earlier run counts.
    pub(crate) fn shown(&self) -> Shown<'_> {
        match &self.skipped {
            None => (
                self.landed.bytes(),
                self.total,
                std::borrow::Cow::Borrowed(self.landed.ranges()),
            ),
            Some(skip) => {
                let ranges = self.landed.squeezed(skip);
                let have = ranges.iter().map(|r| r.1 - r.0).sum();
                let total = self.total.map(|t| t.saturating_sub(skip.bytes()));
                (have, total, std::borrow::Cow::Owned(ranges))
            }
        }
    }
}
