//! Work handed to a second thread in order and handed back in order: a delta's hashing
//! (a seed's chunks while the next are cut, the target's digests while it is read and
//! written) runs beside the thread that reads, cuts and writes.
//!
//! The helper is a scoped thread (`std::thread::scope`): it cannot outlive the scope that
//! made it, which joins it on every path, an error's included. Both channels are bounded
//! by the pipe's depth and at most that many jobs are in flight, so neither side blocks
//! on a full channel and memory stays `depth + 1` jobs. Without a helper (a process that
//! may run on one CPU only) the work runs inline, in the same order.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::Scope;

/// Whether a helper thread pays: the process may run on two CPUs or more
/// (`sched_getaffinity(2)`, as `std::thread::available_parallelism` reads it).
pub fn helper_pays() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2)
}

/// Jobs of type `J` worked on in order, by a helper thread or inline.
pub struct Pipe<'s, J> {
    how: How<'s, J>,
    depth: usize,
    /// Jobs handed on and not yet handed back.
    in_flight: usize,
}

enum How<'s, J> {
    Helper {
        to: SyncSender<J>,
        back: Receiver<J>,
    },
    Inline {
        work: Box<dyn FnMut(&mut J) + Send + 's>,
        done: VecDeque<J>,
    },
}

/// The helper stopped before handing a job back (it panicked).
pub const HELPER_GONE: &str = "the delta's helper thread stopped";

impl<'s, J: Send + 's> Pipe<'s, J> {
    /// A pipe of at most `depth` (≥ 1) jobs in flight whose jobs `work` takes, on a
    /// thread of `scope` when given, else inline.
    pub fn new<'e>(scope: Option<&'s Scope<'s, 'e>>, depth: usize, mut work: impl FnMut(&mut J) + Send + 's) -> Self {
        let depth = depth.max(1);
        let how = match scope {
            Some(scope) => {
                let (to, jobs) = sync_channel::<J>(depth);
                let (done, back) = sync_channel::<J>(depth);
                scope.spawn(move || {
                    for mut job in jobs {
                        work(&mut job);
                        if done.send(job).is_err() {
                            break;
                        }
                    }
                });
                How::Helper { to, back }
            }
            None => How::Inline {
                work: Box::new(work),
                done: VecDeque::new(),
            },
        };
        Pipe {
            how,
            depth,
            in_flight: 0,
        }
    }

    /// Whether the jobs go to a helper thread.
    pub fn helped(&self) -> bool {
        matches!(self.how, How::Helper { .. })
    }

    /// Hands `job` on; returns the oldest job done once `depth` are in flight.
    ///
    /// # Errors
    /// [`HELPER_GONE`].
    pub fn push(&mut self, mut job: J) -> Result<Option<J>, &'static str> {
        match &mut self.how {
            How::Helper { to, .. } => to.send(job).map_err(|_| HELPER_GONE)?,
            How::Inline { work, done } => {
                work(&mut job);
                done.push_back(job);
            }
        }
        self.in_flight += 1;
        if self.in_flight > self.depth - 1 {
            return self.next_done();
        }
        Ok(None)
    }

    /// The oldest job in flight, once done (waiting for it); `None` when none is.
    ///
    /// # Errors
    /// [`HELPER_GONE`].
    pub fn next_done(&mut self) -> Result<Option<J>, &'static str> {
        if self.in_flight == 0 {
            return Ok(None);
        }
        self.in_flight -= 1;
        match &mut self.how {
            How::Helper { back, .. } => back.recv().map(Some).map_err(|_| HELPER_GONE),
            How::Inline { done, .. } => Ok(done.pop_front()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_come_back_in_order_with_and_without_a_helper() {
        for helped in [false, true] {
            let mut seen = Vec::new();
            let mut total = 0u64;
            let main = std::thread::current().id();
            std::thread::scope(|s| {
                let mut pipe = Pipe::new(helped.then_some(s), 3, |j: &mut (u64, bool)| {
                    total += j.0;
                    j.1 = std::thread::current().id() != main;
                });
                assert_eq!(pipe.helped(), helped);
                for i in 0..100u64 {
                    if let Some(j) = pipe.push((i, false)).unwrap() {
                        seen.push(j);
                    }
                }
                while let Some(j) = pipe.next_done().unwrap() {
                    seen.push(j);
                }
            });
            assert_eq!(
                seen.iter().map(|j| j.0).collect::<Vec<_>>(),
                (0..100).collect::<Vec<_>>()
            );
            assert!(seen.iter().all(|j| j.1 == helped), "worked on the helper: {helped}");
            assert_eq!(total, 4950);
        }
    }

    #[test]
    fn a_pipe_dropped_with_jobs_in_flight_lets_its_scope_end() {
        std::thread::scope(|s| {
            let mut pipe = Pipe::new(Some(s), 2, |j: &mut Vec<u8>| j.push(1));
            pipe.push(vec![0]).unwrap();
            pipe.push(vec![0]).unwrap();
            // Dropped here, one job in flight and one done unread: the helper's send or
            // receive fails and it returns; the scope joins it.
        });
    }
}
