//! A transfer's event loop ([`Loop`]) on its lane of a reactor's io_uring: the
//! connections (control plane: connect → TLS handshake → request → response head →
//! validation, `crate::control`) and, per transfer, the data path it drives
//! (`crate::engine::sink`: where reads go, write blocks, writes at segment offsets),
//! and what its [`Reactor`] lends it. What drives several loops is [`crate::reactors`];
//! messages between reactors are [`wire`]'s, a loop's sides of them [`owner`], [`helper`].
//!
//! Every socket and file operation is an SQE on the ring; the loop makes one
//! `io_uring_enter` per turn that submits and waits. Each connection has at most one
//! operation (CONNECT, SEND or RECV) in flight; write blocks have their own. A received
//! byte: its completion comes to [`Loop::complete`] → the connection's handler
//! (`conn.rs`) → the read block (a head, rustls' records) or, for a body, the job's
//! framing (`control/body.rs`) and the sink (placed or opened in place into a write
//! block) → a WRITE the sink submits → its completion back here.

pub(crate) mod assign;
mod conn;
mod ends;
mod flight;
mod handoff;
mod helper;
pub mod mirrors;
pub(crate) mod owner;
pub(crate) mod reactor;
mod recv;
pub(crate) mod retry;
mod summary;
mod tick;
pub(crate) mod wire;
mod writer;

pub use crate::report::Summary;
pub use ends::Start;
pub(crate) use ends::{EndState, end, start_on};
pub use reactor::Reactor;

use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use http::Url;
use uring::{Completion, Op};

use crate::config::Config;
use crate::control::origin::Origin;
use crate::control::{Conn, Fail, St};
use crate::engine::sink::Sink;
use crate::engine::splice::Pipe;
use crate::err;
use crate::error::{Error, Result};
use crate::lane::LaneRing;
use crate::report::{Note, Progress};
use crate::tag::Tag;
use crate::transfer::Transfer;

/// Read block per connection, bytes: holds a response head or ≥ 3 whole TLS records.
pub(crate) const READ_BLOCK: usize = 64 << 10;

/// How often the control file is brought up to date (after an fdatasync of the `.part`):
/// at most this much work is fetched again after a kill -9.
pub(crate) const CONTROL_INTERVAL: Duration = Duration::from_millis(250);

/// How a finished download went.
pub enum Outcome {
    /// Every byte landed; the file is complete and synced.
    Done(Box<Summary>),
    /// The first response of mirror `mirror` (index in the URLs given) redirected to `to`
    /// (3xx with Location).
    Redirect { mirror: usize, to: Url },
    /// The first request was conditional and mirror `mirror` answered 304 Not Modified,
    /// or a list's file already there has the size mirror `mirror` gives (the size alone,
    /// [`crate::config::Config::kept`]): nothing was written. `kept`: the file kept, read
    /// back for `--checksum` or `--signature` as a fetched one is (`None` when neither is
    /// asked). `summary`: what the check cost (its connections, requests, handshakes) for
    /// `--json`; its `bytes` the file's size, `fetched` what came of the answer's body.
    NotModified {
        mirror: usize,
        kept: Option<Box<Kept>>,
        summary: Box<Summary>,
    },
    /// `--threads N`, a list: the run stopped this transfer to start the file again spread
    /// over the reactors, alone in flight now (`crate::reactors::lanes`'s `respread.rs`). What landed
    /// is kept and its control file names it, as at SIGINT: the feed starts it again
    /// from there.
    Recalled,
}

/// The file a 304 kept (or a list's file kept on its size), read back once through the ring (O_DIRECT where the output takes
/// it) as a finished `.part` is ([`crate::output::verify::digests`]).
pub struct Kept {
    /// Its size, bytes.
    pub bytes: u64,
    /// The `--checksum` digest of its bytes.
    pub digest: Option<ring::digest::Digest>,
    /// What `--signature` needs of them (as [`Summary::signed`]).
    pub signed: Option<Option<Vec<u8>>>,
}

/// Run-wide state the connections share: the report, the options, the engine's switches
/// and counts, the origins — and the transfer. (The data path's state is the loop's
/// [`Sink`].)
pub(crate) struct Shared {
    /// Progress and notes: everything the loop has to say goes through it.
    pub(crate) report: Progress,
    pub(crate) opts: Rc<Config>,
    /// Set when the transfer cannot go on: the loop ends with it at the end of the turn.
    pub(crate) fatal: Option<Error>,
    /// Engine `splice`: bodies go socket → pipe → file.
    pub(crate) splice: bool,
    /// Hand finished TLS handshakes to the kernel.
    pub(crate) ktls: bool,
    /// Connections handed to kTLS.
    pub(crate) ktls_conns: usize,
    /// Why a hand-off was refused (the connection went on in user space).
    pub(crate) ktls_refused: Option<String>,
    /// KeyUpdates rekeyed in place under kTLS.
    pub(crate) ktls_rekeys: usize,
    /// Connections handed to the software record layer.
    pub(crate) soft_conns: usize,
    /// KeyUpdates the software record layer took in place.
    pub(crate) soft_rekeys: usize,
    /// TLS connections that reached the hand-off (reconnects included).
    pub(crate) tls_conns: usize,
    /// Of `tls_conns`, `ktls_conns` and `soft_conns`: connections kept open from the
    /// transfer before, counted at their first request here ([`Summary::kept`]).
    pub(crate) kept: [usize; 3],
    /// TLS handshakes completed in full, and by resuming a session (RFC 8446 §2.2).
    pub(crate) tls_full: usize,
    pub(crate) tls_resumed: usize,
    /// Which connection slots sent a request (for the summary's count).
    pub(crate) used: Vec<bool>,
    /// The origins the mirrors are fetched from (each mirror names its own).
    pub(crate) origins: Vec<Origin>,
    /// The file being fetched.
    pub(crate) transfer: Transfer,
}

/// One transfer's loop: its connections, what they share, and its data path.
pub(crate) struct Loop<'a> {
    /// This transfer's lane of the reactor's ring.
    pub(crate) ring: LaneRing<'a>,
    pub(crate) conns: Vec<Conn>,
    pub(crate) shared: Shared,
    /// What only the transfer's end needs.
    pub(crate) end_state: EndState,
    /// The data path: write pool, queued blocks, writes in flight, the output, the pace.
    pub(crate) sink: Sink,
    pub(crate) started: Instant,
    pub(crate) tls_info: Option<String>,
    pub(crate) tick: Duration,
    /// The control file, kept current while the download runs.
    pub(crate) control: Option<PathBuf>,
    /// Bytes covered by the last saved control file.
    pub(crate) saved_bytes: u64,
    /// Which file the last saved control file is (a `.part` replaced under the run
    /// leaves it naming bytes no name reaches: [`Loop::disown_control`]).
    pub(crate) control_id: Option<crate::output::resume::FileId>,
    /// Ranges that an fdatasync in flight will make durable; saved when it completes.
    pub(crate) sync_snapshot: Option<Vec<(u64, u64)>>,
    /// The download's rate over the last half second or so, bytes/s (work stealing), and
    /// where that window started.
    pub(crate) recent_rate: f64,
    pub(crate) rate_mark: (Instant, u64),
    /// When the last periodic fdatasync for the control file was pushed.
    pub(crate) last_sync: Instant,
    /// SIGINT/SIGTERM came while the loop was no longer running (the final fsync or
    /// read-back): the file lands, and the run stops before the next.
    pub(crate) interrupted: Option<&'static str>,
    /// `--threads`: the other reactors this transfer hands parts to (its owner's side) ...
    pub(crate) remote: Option<owner::Remote>,
    /// ... or the owner this loop fetches a part for (a helper's side) ...
    pub(crate) part: Option<wire::PartLink>,
    /// ... or the reactor that placed this whole transfer here (a helper's side).
    pub(crate) whole: Option<wire::WholeLink>,
}

impl Shared {
    /// Mirror `k`'s URL.
    pub(crate) fn url(&self, k: usize) -> &Url {
        &self.transfer.mirrors[k].target
    }

    /// Mirror `k`'s origin.
    pub(crate) fn origin(&self, k: usize) -> &Origin {
        &self.origins[self.transfer.mirrors[k].origin]
    }

    /// Mirror `k`'s origin, to update its Happy Eyeballs state.
    pub(crate) fn origin_mut(&mut self, k: usize) -> &mut Origin {
        &mut self.origins[self.transfer.mirrors[k].origin]
    }
}

pub(crate) fn errno(res: i32) -> rustix::io::Errno {
    rustix::io::Errno::from_raw_os_error(-res)
}

impl Loop<'_> {
    /// Runs until every segment has landed (`Ok(None)`), a mirror's first response
    /// redirects (`Ok(Some((mirror, url)))`), or a fatal failure.
    pub(crate) fn event_loop(&mut self) -> Result<Option<(usize, Url)>> {
        loop {
            if let Some(r) = self.step() {
                return r;
            }
            self.ring
                .submit_and_wait(1)
                .map_err(|e| err!(LocalIo, "io_uring_enter: {e}"))?;
            // (A placed transfer judges a refusal by the other transfers' requests as
            // they are now, not as they were when it went to wait.)
            self.sync_placed();
            while let Some(c) = self.ring.next_completion() {
                self.complete(c)?;
            }
        }
    }

    /// One turn's work after the completions were handled: opens and assigns what the plan
    /// and the caps allow, queues writes; the loop's end when there is one (as
    /// [`Loop::event_loop`] returns it), else `None`.
    pub(crate) fn step(&mut self) -> Option<Result<Option<(usize, Url)>>> {
        self.sync_reactors();
        if let Err(e) = self
            .hand_out()
            .and_then(|()| self.kick())
            .and_then(|()| self.flush_writes())
        {
            return Some(Err(e));
        }
        if let Some(e) = self.shared.fatal.take() {
            return Some(Err(e));
        }
        if let Some(u) = self.shared.transfer.redirect.take() {
            return Some(Ok(Some((self.shared.transfer.redirect_mirror, u))));
        }
        self.finished().then_some(Ok(None))
    }

    /// Submits one operation and waits for its completion (end of the download only:
    /// other completions that arrive meanwhile are dropped, but a signal is remembered in
    /// [`Loop::interrupted`]).
    pub(crate) fn wait_for(&mut self, op: Op, tag: u64) -> Result<i32> {
        self.push(op, tag)?;
        loop {
            self.ring
                .submit_and_wait(1)
                .map_err(|e| err!(LocalIo, "io_uring_enter: {e}"))?;
            while let Some(c) = self.ring.next_completion() {
                if c.tag == tag {
                    return Ok(c.result);
                }
                if c.tag == Tag::Signal.encode() {
                    self.interrupted = Some(crate::tag::signal_name(c.buf.as_deref()));
                }
            }
        }
    }

    /// Cancels connection `i`'s operation in flight (once): its completion then comes back
    /// with -ECANCELED, and with it the connection's buffer.
    pub(crate) fn cancel_op(&mut self, i: usize) -> Result<()> {
        if self.conns[i].cancel_sent {
            return Ok(());
        }
        self.conns[i].cancel_sent = true;
        self.push(
            Op::Cancel {
                target_tag: Tag::Conn(i).encode(),
            },
            Tag::Ignore.encode(),
        )
    }

    pub(crate) fn push(&mut self, op: Op, tag: u64) -> Result<()> {
        self.ring
            .push(op, tag)
            .map_err(|_| err!(Internal, "submission queue full (ring sized too small)"))
    }

    /// Requests of this transfer to its origin `o` that the server is serving: on open
    /// connections whose answer came (its head, or body bytes).
    pub(crate) fn serving(&self, o: usize) -> usize {
        self.conns
            .iter()
            .filter(|c| {
                c.st == St::Open
                    && self.shared.transfer.mirrors[c.mirror].origin == o
                    && c.rx
                        .job
                        .as_ref()
                        .is_some_and(|jb| jb.got_bytes || jb.placer.delimiter().is_some())
            })
            .count()
    }

    /// All segments fetched and written.
    pub(crate) fn finished(&self) -> bool {
        self.received() && self.sink.is_idle()
    }

    /// Every byte of the transfer came off its connections: its plan is drained, no
    /// connection has a receive job or bytes in its pipe, no part is out on another
    /// reactor. Some may still be on their way to the disk ([`Loop::finished`] waits for
    /// those); its connections are free for another transfer.
    pub(crate) fn received(&self) -> bool {
        self.shared.transfer.plan.is_drained()
            && self
                .conns
                .iter()
                .all(|c| c.rx.job.is_none() && c.pipe.as_ref().is_none_or(Pipe::is_idle))
            && !self.remote.as_ref().is_some_and(owner::Remote::busy)
    }

    pub(crate) fn complete(&mut self, c: Completion) -> Result<()> {
        match Tag::decode(c.tag) {
            Some(Tag::Conn(i)) => {
                let r = self.conn_completion(i, c);
                self.after(i, r)?;
            }
            Some(Tag::Write(s)) => self.write_completion(s, c)?,
            Some(Tag::Drain(i)) => self.drain_completion(i, c.result)?,
            Some(Tag::Pace) => {
                // The bucket has refilled: the connections that waited read again (each
                // asks the bucket anew, and waits again when it is still short).
                self.sink.pace_timer = false;
                while let Some(i) = self.sink.paced.pop_front() {
                    if !self.conns[i].busy() {
                        self.after(i, Ok(()))?;
                    }
                }
            }
            Some(Tag::Tick) => {
                self.on_tick()?;
                self.push(Op::Timeout { after: self.tick }, Tag::Tick.encode())?;
            }
            Some(Tag::Fallocate) if c.result < 0 => self.fallocate_failed(c.result),
            Some(Tag::Control) => {
                let snap = self.sync_snapshot.take();
                if c.result >= 0 {
                    self.save_control(snap);
                }
            }
            Some(Tag::Fsync(0)) => {
                // (Only [`Loop::push_fsync`]'s: `wait_for` takes its own completion.)
                self.end_state.synced = Some((c.result, false));
                if c.result >= 0 {
                    self.shared.report.note(Note::SyncedAlone);
                }
            }
            Some(Tag::Mail) if c.result >= 0 => self.on_mail(c.buf)?,
            Some(Tag::Mail) => {
                return Err(err!(LocalIo, "reading the reactors' eventfd: {}", errno(c.result)));
            }
            Some(Tag::Nudge) => self.on_nudge(c)?,
            Some(Tag::Signal) => {
                let name = crate::tag::signal_name(c.buf.as_deref());
                self.shared.fatal = Some(err!(Interrupted, "interrupted by {name}"));
            }
            _ => {}
        }
        Ok(())
    }

    /// Handles a connection's failure, or drives it on.
    pub(crate) fn after(&mut self, i: usize, r: std::result::Result<(), Fail>) -> Result<()> {
        if self.shared.transfer.mirrors[self.conns[i].mirror].standing == crate::transfer::mirror::Standing::Dropped {
            // A completion that was in the ring when the mirror was dropped: nothing it
            // brought is placed (a response head is not even parsed), see `release_conn`.
            return self.release_conn(i);
        }
        let r = r.and_then(|()| self.drive(i));
        if let Err(f) = r {
            self.fail(i, f)?;
        }
        Ok(())
    }
}
