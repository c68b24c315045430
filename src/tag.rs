//! What each operation on the ring is for: the tag of its SQE, encoded and decoded in one
//! place (the event loop's, the writer's and `--checksum`'s read-back).
//!
//! Layout of the `u64` given to [`uring::Ring::push`] (the ring keeps it beside the op and
//! gives it back in the completion): the kind in bits 32..64, an index (connection, write
//! slot, read number) in bits 0..32.

/// The purpose of one operation in flight; [`Tag::encode`] gives the ring's `user_data`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tag {
    /// CONNECT, SEND, RECV, RECVMSG or socket → pipe SPLICE of connection `i`.
    Conn(usize),
    /// WRITE(_FIXED) of write slot `i`.
    Write(usize),
    /// The loop's periodic TIMEOUT.
    Tick,
    /// The FALLOCATE of the whole file once its size is known.
    Fallocate,
    /// A final fsync (0) or the fdatasync before a fatal error's control file (1).
    Fsync(u32),
    /// A completion nobody waits for (CLOSE, ASYNC_CANCEL, a wake-up TIMEOUT).
    Ignore,
    /// The signalfd READ: SIGINT or SIGTERM arrived.
    Signal,
    /// The periodic fdatasync after which the control file is saved.
    Control,
    /// `--checksum`: read-back number `i` of the finished file.
    Verify(usize),
    /// Engine `splice`: the pipe → file SPLICE of connection `i`.
    Drain(usize),
    /// `--limit-rate`: the TIMEOUT after which connections waiting for the bucket read again.
    Pace,
    /// `--threads`: the READ of the eventfd that rings when another reactor sent this one
    /// a message (what its part of a transfer landed, that it ended).
    Mail,
    /// `--threads`, on a helper: the READ of its own eventfd, which the reactor that gave
    /// it the part or placed transfer rings after posting a stop to it.
    Nudge,
    /// A list's run: the READ of the eventfd its sync thread rings after syncing a batch of
    /// finished files ([`crate::output::syncer`]).
    Synced,
}

/// The signal a [`Tag::Signal`] completion's siginfo names, for messages (SIGTERM, else
/// SIGINT: the only two the signalfd takes).
pub(crate) fn signal_name(siginfo: Option<&[u8]>) -> &'static str {
    match siginfo.and_then(uring::signal::signo) {
        Some(15) => "SIGTERM",
        _ => "SIGINT",
    }
}

const KIND_SHIFT: u32 = 32;
const INDEX_MASK: u64 = 0xffff_ffff;

impl Tag {
    /// The `user_data` for [`uring::Ring::push`].
    ///
    /// # Panics
    /// When an index does not fit 32 bits (connections ≤ 64, slots ≤ 64: never).
    pub(crate) fn encode(self) -> u64 {
        let (kind, index) = match self {
            Tag::Conn(i) => (1, i),
            Tag::Write(i) => (2, i),
            Tag::Tick => (3, 0),
            Tag::Fallocate => (4, 0),
            Tag::Fsync(i) => (5, i as usize),
            Tag::Ignore => (6, 0),
            Tag::Signal => (7, 0),
            Tag::Control => (8, 0),
            Tag::Verify(i) => (9, i),
            Tag::Drain(i) => (10, i),
            Tag::Pace => (11, 0),
            Tag::Mail => (12, 0),
            Tag::Nudge => (13, 0),
            Tag::Synced => (14, 0),
        };
        let index = u32::try_from(index).expect("tag index fits 32 bits");
        (kind << KIND_SHIFT) | u64::from(index)
    }

    /// The tag a completion carries back; `None` for a `user_data` no [`Tag`] encodes.
    pub(crate) fn decode(user_data: u64) -> Option<Tag> {
        let index = (user_data & INDEX_MASK) as usize;
        Some(match user_data >> KIND_SHIFT {
            1 => Tag::Conn(index),
            2 => Tag::Write(index),
            3 => Tag::Tick,
            4 => Tag::Fallocate,
            5 => Tag::Fsync(index as u32),
            6 => Tag::Ignore,
            7 => Tag::Signal,
            8 => Tag::Control,
            9 => Tag::Verify(index),
            10 => Tag::Drain(index),
            11 => Tag::Pace,
            12 => Tag::Mail,
            13 => Tag::Nudge,
            14 => Tag::Synced,
            _ => return None,
        })
    }
}

impl From<Tag> for u64 {
    fn from(t: Tag) -> u64 {
        t.encode()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tag_round_trips() {
        for t in [
            Tag::Conn(0),
            Tag::Conn(63),
            Tag::Write(17),
            Tag::Tick,
            Tag::Fallocate,
            Tag::Fsync(0),
            Tag::Fsync(1),
            Tag::Ignore,
            Tag::Signal,
            Tag::Control,
            Tag::Verify(u32::MAX as usize),
            Tag::Drain(5),
            Tag::Pace,
            Tag::Mail,
            Tag::Nudge,
            Tag::Synced,
        ] {
            assert_eq!(Tag::decode(t.encode()), Some(t));
        }
        assert_eq!(Tag::decode(0), None);
        assert_eq!(Tag::decode(15 << 32), None);
    }
}
