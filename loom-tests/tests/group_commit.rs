//! loom races of the group committer (`src/group_commit.rs`, spec/ingress.md "Group commit"):
//! the production queue, tickets and worker, with `tollgate::sync` switched to loom's.
#![cfg(tollgate_loom)]

use std::time::Duration;
use tollgate::group_commit::{self, Lost, Refused};
use tollgate::sync::{lock, thread, Arc, Mutex};

/// Every caller is answered exactly its own job's result, and only after the batch holding its
/// job was committed (made "durable"); batches never exceed `max_batch`; the worker ends once
/// the queue is closed and drained. Two callers and the worker: bounded to 3 preemptions (the
/// full space of three threads on these condvars runs for hours; loom's bound keeps every
/// interleaving with at most 3 forced switches, which covers each caller arriving before,
/// during and after a batch).
#[test]
fn each_caller_is_answered_after_its_batch_committed() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let (committer, worker) = group_commit::channel::<u32, u32>(2, 2);
        let durable = Arc::new(Mutex::new(Vec::<u32>::new()));
        let worker = {
            let durable = Arc::clone(&durable);
            thread::spawn(move || {
                worker.run(
                    |batch: Vec<u32>| {
                        assert!(batch.len() <= 2, "a batch over max_batch");
                        lock(&durable).extend(&batch);
                        (batch.iter().map(|j| j * 10).collect(), ())
                    },
                    |()| {},
                )
            })
        };
        let callers: Vec<_> = (1..=2u32)
            .map(|job| {
                let committer = committer.clone();
                let durable = Arc::clone(&durable);
                thread::spawn(move || {
                    let ticket = committer
                        .submit(job, Duration::from_secs(1))
                        .expect("room for both");
                    let answer = ticket.wait().expect("answered");
                    assert_eq!(answer, job * 10, "its own result");
                    assert!(
                        lock(&durable).contains(&job),
                        "answered before it was durable"
                    );
                })
            })
            .collect();
        for caller in callers {
            caller.join().expect("caller");
        }
        committer.close();
        worker.join().expect("worker");
        let mut done = lock(&durable).clone();
        done.sort_unstable();
        assert_eq!(done, vec![1, 2], "each job committed exactly once");
    });
}

/// A job the worker gives no result for is answered `Lost` (never left waiting), and a job
/// submitted after `close` is refused.
#[test]
fn a_job_without_a_result_is_answered_lost_and_a_closed_queue_refuses() {
    loom::model(|| {
        let (committer, worker) = group_commit::channel::<u32, u32>(1, 1);
        let worker = thread::spawn(move || worker.run(|_batch| (Vec::new(), ()), |()| {}));
        let caller = {
            let committer = committer.clone();
            thread::spawn(move || match committer.submit(7, Duration::from_secs(1)) {
                Ok(ticket) => assert_eq!(ticket.wait(), Err(Lost)),
                Err(refused) => assert_eq!(refused, Refused::Closed),
            })
        };
        committer.close();
        caller.join().expect("caller");
        worker.join().expect("worker");
        assert!(matches!(
            committer.submit(8, Duration::from_secs(1)),
            Err(Refused::Closed)
        ));
    });
}
