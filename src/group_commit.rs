//! Group commit: many callers' jobs made durable by one worker in one batch (one transaction, one
//! fsync), each caller answered only after its batch was committed (spec/ingress.md, "Group
//! commit").
//!
//! Why a worker thread and not "whoever holds the lock commits for everyone": the batch is a
//! blocking database transaction, and the callers are request handlers; one dedicated thread
//! keeps at most one transaction of this process open, and every caller that arrives while one
//! is being committed lands in the next batch, which is what makes the fsync shared.
//!
//! Bounds: at most `capacity` jobs wait (a caller waits at most its `timeout` for room, then is
//! refused: the sender is told to retry, nothing was done); a batch takes at most `max_batch`.
//! Every job gets exactly one reply: the batch's result, or [`Lost`] when the worker dropped it
//! without one (it ended or panicked), so a caller's wait ends whenever the worker does.
//!
//! Synchronisation comes from `crate::sync`, so loom races this very code
//! (`loom-tests/tests/group_commit.rs`).

use crate::sync::{lock, Arc, Condvar, Mutex};
use std::collections::VecDeque;
use std::time::Duration;

/// The worker dropped the job without answering it (it ended or panicked): nothing is known to
/// be durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the group committer ended before it answered")]
pub struct Lost;

/// Why a job was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the group commit queue stayed full for the whole wait")]
    Full,
    #[error("the group committer has stopped")]
    Closed,
}

struct Slot<R> {
    value: Mutex<Option<Result<R, Lost>>>,
    filled: Condvar,
}

/// The worker's half of one job's reply; dropping it unanswered answers [`Lost`].
pub struct Reply<R> {
    slot: Option<Arc<Slot<R>>>,
}

impl<R> Reply<R> {
    fn fill(&mut self, value: Result<R, Lost>) {
        if let Some(slot) = self.slot.take() {
            *lock(&slot.value) = Some(value);
            slot.filled.notify_all();
        }
    }

    /// Answers the job.
    pub fn send(mut self, value: R) {
        self.fill(Ok(value));
    }
}

impl<R> Drop for Reply<R> {
    fn drop(&mut self) {
        self.fill(Err(Lost));
    }
}

/// The caller's half: waits for the reply.
pub struct Ticket<R> {
    slot: Arc<Slot<R>>,
}

impl<R> Ticket<R> {
    /// Waits until the worker answered (its batch committed or failed) or dropped the job.
    /// Bounded by the worker: it answers every job it took, or drops it.
    pub fn wait(self) -> Result<R, Lost> {
        let mut value = lock(&self.slot.value);
        loop {
            if let Some(value) = value.take() {
                return value;
            }
            value = match self.slot.filled.wait(value) {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            };
        }
    }
}

struct Queue<J, R> {
    jobs: VecDeque<(J, Reply<R>)>,
    closed: bool,
}

struct Shared<J, R> {
    queue: Mutex<Queue<J, R>>,
    /// Signalled when a job arrives or the queue closes (the worker waits on it).
    work: Condvar,
    /// Signalled when the worker took jobs out (callers waiting for room wait on it).
    room: Condvar,
    capacity: usize,
    max_batch: usize,
}

/// The callers' handle (clones share one queue).
pub struct Committer<J, R> {
    shared: Arc<Shared<J, R>>,
}

impl<J, R> Clone for Committer<J, R> {
    fn clone(&self) -> Self {
        Committer {
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The worker's handle: [`Worker::run`] on its own thread.
pub struct Worker<J, R> {
    shared: Arc<Shared<J, R>>,
}

/// A queue of at most `capacity` waiting jobs, committed in batches of at most `max_batch`
/// (both at least 1).
pub fn channel<J, R>(capacity: usize, max_batch: usize) -> (Committer<J, R>, Worker<J, R>) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue {
            jobs: VecDeque::new(),
            closed: false,
        }),
        work: Condvar::new(),
        room: Condvar::new(),
        capacity: capacity.max(1),
        max_batch: max_batch.max(1),
    });
    (
        Committer {
            shared: Arc::clone(&shared),
        },
        Worker { shared },
    )
}

impl<J, R> Committer<J, R> {
    /// Queues `job`, waiting at most `timeout` for room. The ticket answers once its batch was
    /// committed.
    pub fn submit(&self, job: J, timeout: Duration) -> Result<Ticket<R>, Refused> {
        let shared = &self.shared;
        let mut queue = lock(&shared.queue);
        let mut waited = false;
        while queue.jobs.len() >= shared.capacity && !queue.closed {
            if waited {
                return Err(Refused::Full);
            }
            // One bounded wait: a spurious or early wake-up re-checks, then gives up.
            let (guard, _) = match shared.room.wait_timeout(queue, timeout) {
                Ok(pair) => pair,
                Err(poisoned) => poisoned.into_inner(),
            };
            queue = guard;
            waited = true;
        }
        if queue.closed {
            return Err(Refused::Closed);
        }
        let slot = Arc::new(Slot {
            value: Mutex::new(None),
            filled: Condvar::new(),
        });
        queue.jobs.push_back((
            job,
            Reply {
                slot: Some(Arc::clone(&slot)),
            },
        ));
        drop(queue);
        shared.work.notify_one();
        Ok(Ticket { slot })
    }

    /// Refuses every later job; the worker commits what is queued, then returns.
    pub fn close(&self) {
        lock(&self.shared.queue).closed = true;
        self.shared.work.notify_all();
        self.shared.room.notify_all();
    }

    /// Jobs waiting for a batch now.
    pub fn waiting(&self) -> usize {
        lock(&self.shared.queue).jobs.len()
    }
}

/// However the worker ends (its loop returned, or `commit` panicked), the queue closes and every
/// job still waiting is answered [`Lost`]: no caller waits for a worker that is gone.
impl<J, R> Drop for Worker<J, R> {
    fn drop(&mut self) {
        let left: Vec<(J, Reply<R>)> = {
            let mut queue = lock(&self.shared.queue);
            queue.closed = true;
            queue.jobs.drain(..).collect()
        };
        self.shared.room.notify_all();
        drop(left);
    }
}

impl<J, R> Worker<J, R> {
    /// Takes every waiting job (at most `max_batch`) as one batch, hands it to `commit`, answers
    /// each job with its result, then hands `after` what `commit` left to do once everyone is
    /// answered; until the queue is closed and empty. `commit` returns one result per job, in
    /// order; a job it gives no result for is answered [`Lost`].
    pub fn run<F>(&self, mut commit: impl FnMut(Vec<J>) -> (Vec<R>, F), mut after: impl FnMut(F)) {
        loop {
            let batch: Vec<(J, Reply<R>)> = {
                let mut queue = lock(&self.shared.queue);
                while queue.jobs.is_empty() && !queue.closed {
                    queue = match self.shared.work.wait(queue) {
                        Ok(guard) => guard,
                        Err(poisoned) => poisoned.into_inner(),
                    };
                }
                if queue.jobs.is_empty() {
                    return;
                }
                let take = queue.jobs.len().min(self.shared.max_batch);
                queue.jobs.drain(..take).collect()
            };
            self.shared.room.notify_all();
            let (jobs, replies): (Vec<J>, Vec<Reply<R>>) = batch.into_iter().unzip();
            let (results, then) = commit(jobs);
            for (reply, result) in replies.into_iter().zip(results) {
                reply.send(result);
            }
            // Replies without a result (a short `results`) dropped above: answered Lost.
            after(then);
        }
    }
}
