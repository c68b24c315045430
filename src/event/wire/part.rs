//! A part of one transfer fetched by a helper: the order ([`PartOrder`], [`PartFile`])
//! and the helper's side of its messages ([`PartLink`]). The protocol is in
//! [`super`]'s docs.

use std::os::fd::{OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;

use super::{Report, tell};
use crate::config::Config;
use crate::engine::EngineKind;
use crate::event::mirrors::MirrorRoute;
use crate::output::Output;
use crate::schedule::Landed;

/// A part handed to a helper.
pub(crate) struct PartOrder {
    /// The lending it belongs to (`Remote`'s lending): a late report of an earlier
    /// transfer's part is never applied to the next one.
    pub(crate) lending: u64,
    /// The helper's number (1-based: reactor 0 is the owner).
    pub(crate) helper: usize,
    pub(crate) file: Arc<PartFile>,
    /// `[start, end)`, bytes: aligned starts; the end aligned or the file's end.
    pub(crate) range: (u64, u64),
    /// Ranges of `range` that are not the part's (landed before, or the owner's), sorted:
    /// a resume's scattered gaps go out as one part.
    pub(crate) holes: Vec<(u64, u64)>,
    /// Connections the helper opens for it.
    pub(crate) connections: usize,
    /// Set by the owner when the transfer ends before the part.
    stop: Arc<AtomicBool>,
    /// Set by the owner when a reactor of the transfer is idle: the helper gives back
    /// what it can of the part ([`Report::Gave`]).
    give: Arc<AtomicBool>,
    /// Requests the transfer's other reactors have on the wire to its origin, posted by
    /// the owner each tick (they count toward the server's cap: [`Origin::remote`]).
    ///
    /// [`Origin::remote`]: crate::control::origin::Origin::remote
    others: Arc<AtomicUsize>,
}

impl PartOrder {
    /// Part `range` of lending `lending` for helper `helper` (1-based) over `connections`,
    /// less its `holes`, sharing `flags` with its owner.
    pub(crate) fn new(
        (lending, helper): (u64, usize),
        file: Arc<PartFile>,
        range: (u64, u64),
        holes: Vec<(u64, u64)>,
        connections: usize,
        flags: &PartFlags,
    ) -> PartOrder {
        PartOrder {
            lending,
            helper,
            file,
            range,
            holes,
            connections,
            stop: Arc::clone(&flags.stop),
            give: Arc::clone(&flags.give),
            others: Arc::clone(&flags.others),
        }
    }
}

/// The owner's side of the flags it shares with the helper fetching a part: written
/// here, read by the helper's loop ([`PartLink`]).
pub(crate) struct PartFlags {
    stop: Arc<AtomicBool>,
    give: Arc<AtomicBool>,
    others: Arc<AtomicUsize>,
    /// The helper's eventfd, written after `stop` is set.
    nudge: Arc<OwnedFd>,
}

impl PartFlags {
    /// Flags for a part going to the helper whose eventfd is `nudge`, with `others`
    /// requests on the wire elsewhere now.
    pub(crate) fn new(others: usize, nudge: Arc<OwnedFd>) -> PartFlags {
        PartFlags {
            stop: Arc::new(AtomicBool::new(false)),
            give: Arc::new(AtomicBool::new(false)),
            others: Arc::new(AtomicUsize::new(others)),
            nudge,
        }
    }

    /// Stops the part: its helper ends it at once (its eventfd is written), or on its
    /// tick. Once: a recall asks on every turn until the part's end is told.
    pub(crate) fn stop(&self) {
        if !self.stop.swap(true, Ordering::AcqRel) {
            super::nudge(&self.nudge);
        }
    }

    /// Asks the helper for some of the part back ([`Report::Gave`] answers).
    pub(crate) fn ask_give(&self) {
        self.give.store(true, Ordering::Release);
    }

    /// Posts the requests the transfer's other reactors have on the wire.
    pub(crate) fn post_others(&self, n: usize) {
        self.others.store(n, Ordering::Release);
    }
}

/// What every part of one transfer shares: where and what to fetch.
pub(crate) struct PartFile {
    pub(crate) routes: Vec<MirrorRoute>,
    pub(crate) opts: Config,
    pub(crate) out: Output,
    pub(crate) engine: EngineKind,
    pub(crate) ktls: bool,
    pub(crate) total: u64,
    pub(crate) validator: Option<Vec<u8>>,
}

/// A helper's side of a part, in the loop that fetches it.
pub(crate) struct PartLink {
    lending: u64,
    helper: usize,
    range: (u64, u64),
    /// Ranges of `range` that are not the part's: its holes ([`PartOrder::holes`]) and
    /// what it gave back to the owner ([`Report::Gave`]). In this loop's landed ranges
    /// (its resume state, or added when given: its transfer ends without them), never
    /// told as landed.
    not_ours: Landed,
    tx: Sender<Report>,
    bell: Arc<OwnedFd>,
    stop: Arc<AtomicBool>,
    /// The helper's eventfd, which the owner writes after setting `stop`.
    pub(crate) nudge: RawFd,
    give: Arc<AtomicBool>,
    others: Arc<AtomicUsize>,
    /// Bytes of the part told as landed so far, and requests told as served.
    told: (u64, usize),
    /// The segment whose failure spent the part's try (set by the retry logic).
    pub(crate) counted: Option<(u64, u64)>,
    /// The wait judged for that failure, and whether it holds the origin (set with it).
    pub(crate) server_wait: (std::time::Duration, bool),
}

impl PartLink {
    /// The helper's side of part `p`: its reports go on `tx`, each followed by a write of
    /// `bell`; `nudge` is the helper's own eventfd.
    pub(crate) fn new(p: &PartOrder, tx: Sender<Report>, bell: Arc<OwnedFd>, nudge: RawFd) -> PartLink {
        PartLink {
            lending: p.lending,
            helper: p.helper,
            range: p.range,
            not_ours: Landed::from_ranges(&p.holes),
            tx,
            bell,
            stop: Arc::clone(&p.stop),
            nudge,
            give: Arc::clone(&p.give),
            others: Arc::clone(&p.others),
            told: (0, 0),
            counted: None,
            server_wait: (std::time::Duration::ZERO, false),
        }
    }

    /// `[start, end)` of the file this loop fetches for its owner.
    pub(crate) fn range(&self) -> (u64, u64) {
        self.range
    }

    /// Bytes of the part: its range less its holes (and what it gave back).
    pub(crate) fn bytes(&self) -> u64 {
        self.range.1 - self.range.0 - self.not_ours.bytes()
    }

    /// Tells the owner what of the part has landed and how many of this reactor's requests
    /// the server serves (`serving`), when either changed.
    pub(crate) fn tell_landed(&mut self, landed: &Landed, serving: usize) {
        // (One sweep: each landed range within the part, less what is not the part's.)
        let (a, b) = self.range;
        let ranges: Vec<(u64, u64)> = landed
            .ranges()
            .iter()
            .filter(|&&(s, e)| s < b && e > a)
            .flat_map(|&(s, e)| self.not_ours.gaps_in(s.max(a), e.min(b)))
            .collect();
        let bytes: u64 = ranges.iter().map(|r| r.1 - r.0).sum();
        if bytes > self.told.0 || serving != self.told.1 {
            self.told = (bytes, serving);
            tell(
                &self.tx,
                &self.bell,
                Report::Landed {
                    lending: self.lending,
                    helper: self.helper,
                    ranges,
                    serving,
                },
            );
        }
    }

    /// At the part's end: tells the owner why it failed (see [`Report::Blame`]), when it did.
    pub(crate) fn tell_blame(&mut self, changed: bool) {
        if self.counted.is_some() || changed {
            tell(
                &self.tx,
                &self.bell,
                Report::Blame {
                    lending: self.lending,
                    helper: self.helper,
                    counted: self.counted,
                    changed,
                    wait: self.server_wait.0,
                    hold: self.server_wait.1,
                },
            );
        }
    }

    /// Tells the owner that the server turned one of this part's connections away while
    /// `serving` of its others were served (`proxy`: a proxy refused a tunnel).
    pub(crate) fn tell_capped(&mut self, serving: usize, proxy: bool) {
        tell(
            &self.tx,
            &self.bell,
            Report::Capped {
                lending: self.lending,
                helper: self.helper,
                serving,
                proxy,
            },
        );
    }

    /// Whether the requests this part's reactor has served changed since last told.
    pub(crate) fn serving_changed(&self, serving: usize) -> bool {
        serving != self.told.1
    }

    /// Whether the owner asked for some of the part back (each ask answered once, by
    /// [`PartLink::tell_gave`]).
    pub(crate) fn asked(&self) -> bool {
        self.give.swap(false, Ordering::AcqRel)
    }

    /// Tells the owner that `range` (tried `tries` times) is no longer this part's, or that
    /// nothing was worth giving (`None`). The range must already be out of this loop's
    /// plan and in its landed ranges (its transfer ends without it).
    pub(crate) fn tell_gave(&mut self, range: Option<(u64, u64)>, tries: u32) {
        if let Some((s, e)) = range {
            self.not_ours.add(s, e);
        }
        tell(
            &self.tx,
            &self.bell,
            Report::Gave {
                lending: self.lending,
                helper: self.helper,
                range,
                tries,
            },
        );
    }

    /// Requests the transfer's other reactors have on the wire, as the owner last posted.
    pub(crate) fn others(&self) -> usize {
        self.others.load(Ordering::Acquire)
    }

    /// The owner ended the transfer: the part stops.
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}
