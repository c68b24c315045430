//! A list's whole file placed on a helper (`--threads` with `-j` ≥ 2): the order
//! ([`WholeOrder`]: the transfer's `Send` pieces, its output a duplicate descriptor of the
//! same `.part`, and the connection slots the caps left it), what the run's reactor posts
//! to it ([`PostedToPlaced`]), what the helper reports of it ([`WholeReport`]: each tick
//! its progress line, each note, its end) and its side of the messages ([`WholeLink`]).
//! The run's reactor keeps the file's report, its place among the files in flight and its
//! share of the caps. A file that landed has its descriptor of the output closed before
//! its end is told, so the run's reactor may rename the file.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::mpsc::Sender;
use std::sync::{Arc, OnceLock};

use super::Report;
use crate::config::Config;
use crate::control::origin::OriginKey;
use crate::engine::EngineKind;
use crate::error::Result;
use crate::event::mirrors::MirrorRoute;
use crate::event::{Outcome, Summary};
use crate::output::Output;
use crate::output::resume::State;
use crate::report::{Flight, Note};

/// A whole transfer for a helper: what its [`crate::event::Start`] holds but its report, which stays
/// with the run's reactor (notes come back as [`WholeReport::Note`]).
pub(crate) struct WholeOrder {
    /// This placement's number (from the lendings' count: a late report of a lending is
    /// never taken for it).
    pub(crate) placement: u64,
    /// The helper's number (1-based).
    pub(crate) helper: usize,
    pub(crate) mirrors: Vec<MirrorRoute>,
    /// Its options: `connections` is the slots the caps left it.
    pub(crate) opts: Config,
    /// A duplicate of the file's output (the same `.part`, [`Output::duplicate`]).
    pub(crate) out: Output,
    pub(crate) resume: Option<State>,
    pub(crate) control: Option<PathBuf>,
    pub(crate) engine: EngineKind,
    pub(crate) ktls: bool,
    pub(crate) signed: Option<crate::signature::Input>,
    pub(crate) posted: Arc<PostedToPlaced>,
    /// The slots it may grow to (its `-x` under `--max-connections-per-host` and the cap
    /// learned for its server): at most the `-x` of `shape`, which the helper's ring and
    /// pools are sized for.
    pub(crate) most: usize,
    /// The shape of the helper's run of placed files (the run's `-j` shared over the
    /// reactors, the largest `-x`, whether a file may splice): its ring and pools are
    /// sized for it when this order starts it.
    pub(crate) shape: PlacedShape,
}

/// The shape of a helper's run of placed files: its ring and pools are sized for it.
#[derive(Clone, Copy)]
pub(crate) struct PlacedShape {
    /// Files it runs at once at most: the run's `-j` shared over the reactors, rounded up.
    pub(crate) lanes: usize,
    /// Connection slots per file at most: the largest `-x` of the list.
    pub(crate) connections: usize,
    /// Some file may use the `splice` engine.
    pub(crate) splice: bool,
}

/// What the run's reactor posts to a placed transfer: `stop` is read at once (its helper's
/// eventfd is written: [`PostedToPlaced::post_stop`]), at each of its turns and on its tick
/// (250 ms), the rest after each of its waits.
#[derive(Default)]
pub(crate) struct PostedToPlaced {
    /// SIGINT or SIGTERM came, or the run failed: the transfer ends as `Interrupted` by
    /// it, keeping its `.part` and control file.
    pub(crate) stop: OnceLock<&'static str>,
    /// The eventfd of the helper it is placed on ([`super::nudge`](super::nudge())).
    pub(crate) nudge: Option<Arc<OwnedFd>>,
    /// Requests the run's other transfers have on the wire to the file's origin
    /// ([`crate::control::origin::Origin::others`]).
    pub(crate) others: AtomicUsize,
    /// Another transfer to the file's origin ended: its slots parked on the origin's cap
    /// ask again now ([`crate::event::Loop::wake_parked`]); read after each of its waits.
    pub(crate) wake: AtomicBool,
    /// Connection slots the run's reactor gave it beyond those it started with (room that
    /// other files' ends left under the origin's caps): read after its next wait, and
    /// added ([`crate::event::Loop::grow`]) as far as its ring, its pool and its work allow (the rest is
    /// dropped: its next [`WholeReport::Flight`] says the slots it has).
    pub(crate) more: AtomicUsize,
}

impl PostedToPlaced {
    /// Ends the placed transfer as `Interrupted` by `why` (the first reason posted
    /// stays), and wakes its helper's ring to read it now.
    pub(crate) fn post_stop(&self, why: &'static str) {
        let _ = self.stop.set(why);
        if let Some(fd) = &self.nudge {
            super::nudge(fd);
        }
    }
}

/// A helper's message about a whole transfer.
pub(crate) enum WholeReport {
    /// Each tick: what the run's line shows of it, the requests of it the server serves
    /// now, the connection slots it holds against its origin's caps and those it has, and
    /// whether a slot of it is parked on a cap ([`crate::event::Loop::parked`]).
    Flight {
        flight: Flight,
        serving: usize,
        held: usize,
        slots: usize,
        parked: bool,
    },
    /// A note of the transfer, for its report.
    Note(Note),
    /// It ended (what [`crate::reactors::run`] gave back), and what its reactor keeps: idle
    /// connections per origin key, and the cap learned for the file's origin.
    Ended {
        result: Result<Outcome>,
        failed: Option<Box<Summary>>,
        idle: Vec<(OriginKey, usize)>,
        allows: Option<usize>,
    },
}

/// A placed transfer's side of its messages, in the loop that runs it.
pub(crate) struct WholeLink {
    lending: u64,
    tx: Sender<Report>,
    bell: Arc<OwnedFd>,
    pub(crate) posted: Arc<PostedToPlaced>,
    /// Its requests the server serves, and whether a slot is parked on a cap, as last
    /// told.
    pub(crate) told: (usize, bool),
    /// The reactor's read pool, which the slots it is given later take their blocks from.
    pub(crate) pool: Option<uring::BufPool>,
    /// The slots it may grow to, which its ring and pools are sized for.
    pub(crate) most: usize,
}

impl WholeLink {
    /// The placed transfer `lending`'s side: its reports go on `tx`, each followed by a
    /// write of `bell`; `most`: the slots it may grow to.
    pub(crate) fn new(
        lending: u64,
        tx: Sender<Report>,
        bell: Arc<OwnedFd>,
        posted: Arc<PostedToPlaced>,
        most: usize,
    ) -> WholeLink {
        WholeLink {
            lending,
            tx,
            bell,
            posted,
            told: (0, false),
            pool: None,
            most,
        }
    }

    /// Tells the run's reactor `what` of this placed transfer.
    pub(crate) fn tell(&self, what: WholeReport) {
        super::tell(
            &self.tx,
            &self.bell,
            Report::Whole {
                lending: self.lending,
                what,
            },
        );
    }

    /// The link with the read pool of the reactor the transfer runs on.
    pub(crate) fn with_pool(self, pool: uring::BufPool) -> WholeLink {
        WholeLink {
            pool: Some(pool),
            ..self
        }
    }
}
