//! What a running download reports ([`Note`]) and who sees it ([`Level`]): each note's
//! text, and the level that decides whether `-q`, the default or `-v` shows it.

use crate::schedule::retry::Cap;

/// Who sees a [`Note`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Always, even with `-q`: the resume state or the outcome is not what was asked.
    Warning,
    /// Unless `-q`.
    Info,
    /// With at least this many `-v`.
    Verbose(u8),
}

/// Something a running download reports: connection `conn` numbers from 0; byte ranges
/// are inclusive (`first`-`last`), as in `Content-Range`.
#[derive(Clone, Debug, PartialEq)]
pub enum Note {
    /// io_uring buffer registration refused (RLIMIT_MEMLOCK): plain READ/WRITE/RECV.
    Unregistered { why: String },
    /// fallocate(2) refused for a reason other than ENOSPC: no preallocation.
    NoPreallocation { why: String },
    /// A request goes out (`-vv`).
    Request { conn: usize, first: u64, last: u64 },
    /// A partial fetch's multi-range request to `host` for `asked` ranges got `answer`
    /// (fewer parts, a 200, a 416): `now` ranges per request from then on (`-v`).
    StepDown {
        host: String,
        asked: usize,
        answer: String,
        now: usize,
    },
    /// Work stealing: `conn` takes the end of `from`'s range.
    Steal {
        conn: usize,
        from: usize,
        first: u64,
        last: u64,
    },
    /// A failed response or connection; its range is asked again (`attempt` counts from 1).
    Retry {
        conn: usize,
        why: String,
        first: u64,
        last: u64,
        attempt: u32,
    },
    /// Happy Eyeballs (RFC 8305): the first address that took a connect, not the first
    /// tried; every later connect goes there.
    Connected {
        addr: std::net::SocketAddr,
        family: &'static str,
    },
    /// A racing connect called off because another address answered first (`-vv`).
    Abandoned {
        conn: usize,
        addr: std::net::SocketAddr,
        winner: std::net::SocketAddr,
    },
    /// A kept-alive connection was closed under its request before any byte of the answer
    /// (the server's idle close): the request goes again at once on another connection,
    /// no try spent (RFC 9112 §9.3.1).
    Resent {
        conn: usize,
        why: String,
        first: u64,
        last: u64,
    },
    /// A kept-alive connection the server closed while it sat idle, found before a
    /// request went on it: a new one is opened instead.
    StaleClosed { conn: usize },
    /// A connection failed with no range to retry.
    ConnectionFailed { conn: usize, why: String },
    /// The server (or proxy) turned a connection away: see [`Cap`].
    Capped { conn: usize, why: String, cap: Cap },
    /// At the end: the most connections the server let download at once (`own`: this file's).
    Allowed { connections: usize, own: usize },
    /// kTLS not used on this connection (suite, kernel); it stays in user-space TLS.
    KtlsRefused { conn: usize, why: String },
    /// TLS handed to the kernel after the handshake.
    KtlsOn { conn: usize },
    /// The software record layer cannot take this suite: rustls decrypts (copying).
    SoftRefused { conn: usize, why: String },
    /// The software record layer opens this connection's records in place.
    SoftOn { conn: usize },
    /// A NewSessionTicket read under kTLS; `ignored` says why rustls did not take it.
    Ticket { conn: usize, ignored: Option<String> },
    /// A KeyUpdate taken in place by kTLS (Linux 6.14+); `tx` = our keys too.
    Rekeyed { conn: usize, tx: bool },
    /// `-c`: the control file's ranges are valid for this server's file.
    Resuming { have: u64, total: u64 },
    /// The first response: the size and the segments planned after it.
    Planned { total: u64, segments: usize },
    /// `-c`, but the file changed on the server (`what`: size or validator): from zero.
    Changed { what: String },
    /// A mirror is left out for the rest of the download; its unfinished segments go to
    /// the other mirrors. `hint` is said after the reason.
    MirrorDropped {
        url: String,
        why: String,
        hint: &'static str,
    },
    /// A mirror's first answer agreed with the reference's (size and validator, or a
    /// `--checksum` is given): it gets its share of the connections (`-v`).
    MirrorAccepted { url: String },
    /// `-c`, but the server ignores ranges: from zero.
    NoRangesNoResume,
    /// The first 206 had no complete length (`bytes first-last/*`, RFC 9110 §14.4): asked
    /// again without Range, on one connection.
    UnknownTotal { host: String, first: u64, last: u64 },
    /// The server ignores ranges: the download goes on one connection.
    NoRanges,
    /// `-c`, but the file is now shorter than the resumed part: from zero.
    Shrunk,
    /// Writes still in flight at exit: the control file keeps its older state.
    WritesPending,
    /// The fdatasync before saving the control file failed: it keeps its older state.
    SyncFailed,
    /// The control file could not be written.
    ControlNotSaved { why: String },
    /// The loop's state, each tick (`-vvv`, for debugging).
    State(String),
    /// `--threads`: reactor `reactor`'s part of the file failed; what it did not land goes
    /// back to the owner's queue.
    PartFailed { reactor: usize, why: String },
    /// `--threads`: this reactor's part gave bytes `first..=last` back to the reactor that
    /// owns the file, which asked (one of its reactors was idle).
    GaveBack { first: u64, last: u64 },
    /// `--threads`: work stealing between reactors: reactor `reactor` (a helper, free)
    /// takes the end of connection `from`'s range on the reactor that owns the file.
    StealToReactor {
        reactor: usize,
        from: usize,
        first: u64,
        last: u64,
    },
    /// `--threads`: a note of reactor `reactor`'s part of the file (its connection numbers
    /// are its own).
    OnReactor { reactor: usize, note: Box<Note> },
    /// `--threads N`: this file runs on one reactor, because of `why` (what does not
    /// spread: mirrors, `--limit-rate`, a block device, an output that is not a file).
    OneReactor { why: &'static str },
    /// `--threads N`, a list: this file is alone in flight with `left` bytes still to come
    /// and nothing after it; its transfer stops (what landed stays, as at SIGINT) and
    /// starts again at once, spread over the reactors.
    Respread { left: u64 },
    /// `--threads`: `reactors` landed bytes; `parts` went to the `others` helpers lent.
    Reactors {
        reactors: usize,
        others: usize,
        parts: usize,
        bytes: u64,
    },
    /// At the end: ops that went out on the registered output fd (`IOSQE_FIXED_FILE`).
    FixedFileOps { ops: u64 },
    /// A list's file made durable on the sync thread with `others` files that finished
    /// beside it, by `syncfs` syncfs(2) calls (one per file system that allows it; the
    /// other files fsynced each: [`crate::output::syncer`]).
    SyncedTogether { others: usize, syncfs: usize },
    /// A list's file made durable alone, by its own fsync(2) on its ring: no other sync
    /// ran when it finished, so none waited to join it ([`SyncedTogether`]'s other case).
    ///
    /// [`SyncedTogether`]: Note::SyncedTogether
    SyncedAlone,
    /// At the end: the SQPOLL thread's own CPU time (`--sqpoll`; not in the process's
    /// rusage until the thread exits).
    SqpollCpu { cpu: std::time::Duration },
}

impl Note {
    /// Who sees it.
    pub fn level(&self) -> Level {
        match self {
            Note::OnReactor { note, .. } => note.level(),
            Note::Request { .. } | Note::Abandoned { .. } => Level::Verbose(2),
            Note::Capped { cap, .. } if cap.refusals > 1 => Level::Verbose(2),
            Note::State(_) => Level::Verbose(3),
            Note::Resuming { .. } | Note::Respread { .. } => Level::Info,
            Note::Changed { .. }
            | Note::MirrorDropped { .. }
            | Note::NoRangesNoResume
            | Note::Shrunk
            | Note::WritesPending
            | Note::SyncFailed
            | Note::ControlNotSaved { .. } => Level::Warning,
            _ => Level::Verbose(1),
        }
    }
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Note::Request { .. }
            | Note::Steal { .. }
            | Note::Retry { .. }
            | Note::Resent { .. }
            | Note::StaleClosed { .. }
            | Note::ConnectionFailed { .. }
            | Note::Connected { .. }
            | Note::Abandoned { .. }
            | Note::Capped { .. }
            | Note::KtlsRefused { .. }
            | Note::SoftRefused { .. }
            | Note::SoftOn { .. }
            | Note::KtlsOn { .. }
            | Note::Ticket { .. }
            | Note::Rekeyed { .. } => self.connection_text(f),
            Note::PartFailed { .. }
            | Note::GaveBack { .. }
            | Note::StealToReactor { .. }
            | Note::OnReactor { .. }
            | Note::OneReactor { .. }
            | Note::Respread { .. }
            | Note::Reactors { .. } => self.reactor_text(f),
            Note::Unregistered { why } => {
                write!(
                    f,
                    "registering buffers failed ({why}; RLIMIT_MEMLOCK?): using plain READ/WRITE/RECV"
                )
            }
            Note::NoPreallocation { why } => write!(f, "fallocate: {why} (continuing without preallocation)"),
            Note::Allowed { connections: n, own } => {
                let s = if *n == 1 { "" } else { "s" };
                if own >= n {
                    write!(f, "server allows {n} connection{s}: using {n}")
                } else {
                    write!(f, "server allows {n} connection{s}, shared with other files")
                }
            }
            Note::Resuming { have, total } => write!(f, "resuming: {have} of {total} bytes already in place"),
            Note::StepDown {
                host,
                asked,
                answer,
                now,
            } => {
                let per = if *now == 1 {
                    "one range per request".to_owned()
                } else {
                    format!("at most {now} ranges per request")
                };
                write!(
                    f,
                    "{host}: multi-range step down: a request for {asked} ranges got {answer}; asking {per} from now on"
                )
            }
            Note::FixedFileOps { ops } => write!(f, "{ops} ops on the registered output (writes, fallocate, fsync)"),
            Note::SyncedTogether { others, syncfs } => write!(
                f,
                "synced with {others} other finished files: {}",
                match syncfs {
                    0 => "an fsync(2) each".to_owned(),
                    1 => "one syncfs(2)".to_owned(),
                    n => format!("{n} syncfs(2), one per file system"),
                }
            ),
            Note::SyncedAlone => f.write_str("synced alone: fsync(2)"),
            Note::SqpollCpu { cpu } => write!(f, "SQPOLL thread CPU {:.2} s", cpu.as_secs_f64()),
            Note::Planned { total, segments } => write!(
                f,
                "{total} bytes, ranges supported, {segments} segment{} after the first",
                if *segments == 1 { "" } else { "s" }
            ),
            Note::Changed { what } => write!(f, "the file on the server changed ({what}): starting from zero"),
            Note::MirrorDropped { url, why, hint } => write!(f, "mirror {url} dropped: {why}{hint}"),
            Note::MirrorAccepted { url } => write!(f, "mirror {url} agrees with the reference: used"),
            Note::NoRangesNoResume => {
                f.write_str("the server does not serve ranges: cannot resume, starting from zero")
            }
            Note::UnknownTotal { host, first, last } => write!(
                f,
                "{host}: 206 with an unknown complete length (bytes {first}-{last}/*): asking again without Range, one connection"
            ),
            Note::NoRanges => f.write_str("the server does not serve ranges: one connection"),
            Note::Shrunk => f.write_str("the file on the server is shorter than the resumed part: starting from zero"),
            Note::WritesPending => f.write_str("warning: writes still pending: the resume state is older"),
            Note::SyncFailed => f.write_str("warning: fdatasync of the partial file failed: the resume state is older"),
            Note::ControlNotSaved { why } => write!(f, "warning: {why}"),
            Note::State(s) => f.write_str(s),
        }
    }
}

impl Note {
    /// The text of a note about one connection (`connection N: ...`).
    fn connection_text(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Note::Request { conn, first, last } => write!(f, "connection {conn}: GET bytes {first}-{last}"),
            Note::Steal {
                conn,
                from,
                first,
                last,
            } => {
                write!(
                    f,
                    "connection {conn}: takes bytes {first}-{last} from connection {from}"
                )
            }
            Note::Retry {
                conn,
                why,
                first,
                last,
                attempt,
            } => {
                write!(
                    f,
                    "connection {conn}: {why}; retrying bytes {first}-{last} (try {attempt})"
                )
            }
            Note::Resent { conn, why, first, last } => write!(
                f,
                "connection {conn}: {why} (kept-alive connection closed by the server); sending bytes \
             {first}-{last} again on another, no try spent"
            ),
            Note::StaleClosed { conn } => write!(
                f,
                "connection {conn}: kept-alive connection closed by the server while idle; opening a new one"
            ),
            Note::ConnectionFailed { conn, why } => write!(f, "connection {conn}: {why}"),
            Note::Connected { addr, family } => {
                write!(f, "connected to {addr} ({family}): the other connections go there too")
            }
            Note::Abandoned { conn, addr, winner } => {
                write!(
                    f,
                    "connection {conn}: connect to {addr} abandoned: {winner} answered first"
                )
            }
            Note::Capped { conn, why, cap } => write!(f, "connection {conn}: {why}: {cap}"),
            Note::KtlsRefused { conn, why } => {
                write!(f, "connection {conn}: kTLS refused ({why}): staying in user-space TLS")
            }
            Note::SoftRefused { conn, why } => write!(f, "connection {conn}: {why}: staying in rustls"),
            Note::SoftOn { conn } => {
                write!(
                    f,
                    "connection {conn}: TLS records opened in place (software record layer)"
                )
            }
            Note::KtlsOn { conn } => write!(f, "connection {conn}: TLS handed to the kernel (kTLS TX+RX)"),
            Note::Ticket { conn, ignored: Some(e) } => write!(f, "connection {conn}: session ticket ignored: {e}"),
            Note::Ticket { conn, ignored: None } => write!(f, "connection {conn}: NewSessionTicket under kTLS"),
            Note::Rekeyed { conn, tx } => write!(
                f,
                "connection {conn}: KeyUpdate: kTLS rekeyed in place ({})",
                if *tx { "RX and TX, as the server asked" } else { "RX" }
            ),
            _ => unreachable!("not a connection's note"),
        }
    }

    /// The text of a note about the reactors of a `--threads` run.
    fn reactor_text(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Note::PartFailed { reactor, why } => {
                write!(
                    f,
                    "warning: reactor {reactor}'s part failed ({why}): its rest goes back to the queue"
                )
            }
            Note::GaveBack { first, last } => {
                write!(f, "gives bytes {first}-{last} back to the reactor that owns the file")
            }
            Note::StealToReactor {
                reactor,
                from,
                first,
                last,
            } => write!(f, "reactor {reactor} takes bytes {first}-{last} from connection {from}"),
            Note::OnReactor { reactor, note } => write!(f, "reactor {reactor}: {note}"),
            Note::OneReactor { why } => write!(f, "--threads: this file runs on one reactor ({why})"),
            Note::Respread { left } => write!(
                f,
                "--threads: alone in flight with about {left} bytes to come: starting it again, spread over the reactors (what landed stays)"
            ),
            Note::Reactors {
                reactors,
                others,
                parts,
                bytes,
            } => {
                // (Not every helper lent need have had a part: with several, no count.)
                let s = |n: usize| if n == 1 { "" } else { "s" };
                let (rs, ps) = (s(*reactors), s(*parts));
                let to = ["other threads", "the other thread"][usize::from(*others == 1)];
                write!(
                    f,
                    "{reactors} reactor{rs}: {parts} part{ps} to {to}, {bytes} bytes landed there"
                )
            }
            _ => unreachable!("not a reactor's note"),
        }
    }
}
