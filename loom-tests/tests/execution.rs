//! loom races of the production settlement code ([`Settlement`]: the execution core behind
//! `crate::sync::Mutex`). loom cannot time out, so deadlines and the ceiling are driven by threads
//! of their own that call `tick` with the times at which they would fire.
//!
//! Run with `RUSTFLAGS="--cfg tollgate_loom"` (see `.ci/run`).
#![cfg(tollgate_loom)]

use loom::sync::Arc;
use loom::thread;
use tollgate::exec::settlement::Settlement;
use tollgate::protocol::execution::{
    Action, EndReason, ExecError, Execution, ExitStatus, ItemSpec, Lane, Limits, Outcome,
};

fn settlement(n: usize, lane: Lane, deadline: Option<u64>) -> Settlement {
    let specs = vec![
        ItemSpec {
            deadline_millis: deadline,
            worktree: true,
        };
        n
    ];
    let limits = Limits {
        ceiling_millis: Some(20),
        term_grace_millis: 5,
        join_grace_millis: 5,
        jobs: n,
        lane,
    };
    let core = Execution::new(specs, limits).unwrap();
    Settlement::new(core)
}

fn settles(actions: &[Action], index: usize) -> usize {
    actions
        .iter()
        .filter(|a| {
            matches!(a, Action::Release { index: i, .. } | Action::Abandon { index: i, .. } if *i == index)
        })
        .count()
}

/// A worker's result races the deadline driver (term, kill, abandon) and the ceiling.
#[test]
fn worker_result_races_deadline_abandonment_and_ceiling() {
    loom::model(|| {
        let s = Arc::new(settlement(1, Lane::Playbook, Some(10)));
        assert_eq!(s.take_next(0), Some(0));

        let worker = {
            let s = Arc::clone(&s);
            thread::spawn(move || s.worker_result(0, 7, ExitStatus::Code(0)))
        };
        let deadline = {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                let mut all = s.tick(10);
                all.extend(s.tick(15));
                all.extend(s.tick(20));
                all
            })
        };
        let ceiling = {
            let s = Arc::clone(&s);
            thread::spawn(move || s.tick(20))
        };

        let worker = worker.join().unwrap();
        let mut actions = deadline.join().unwrap();
        actions.extend(ceiling.join().unwrap());
        // The deadline and ceiling threads alone may not reach the abandonment (their ticks can
        // interleave so that one sees term at 20 and nothing later); drive the rest of time.
        for now in [25, 30, 35] {
            actions.extend(s.tick(now));
        }
        let from_worker = match &worker {
            Ok(a) => settles(a, 0),
            Err(ExecError::AlreadySettled { .. }) => 0,
            Err(e) => panic!("unexpected refusal {e}"),
        };
        assert_eq!(
            settles(&actions, 0) + from_worker,
            1,
            "settled exactly once"
        );

        let snapshot = s.snapshot();
        let outcome = snapshot.outcome(0).unwrap();
        match &worker {
            Ok(_) => assert!(matches!(outcome, Outcome::Passed | Outcome::TimedOut)),
            // The late result came after the abandonment and changed nothing.
            Err(_) => assert_eq!(outcome, Outcome::Abandoned),
        }
        assert!(s.end_reason().is_some());
        let rows = s.poll_rows();
        assert_eq!(rows.len(), 1);
        assert!(s.poll_rows().is_empty(), "a row is released once");
    });
}

/// Two workers report in the opposite order while the ceiling fires; each thread polls rows after
/// its event. Every row comes out exactly once, and each batch is in declaration order.
#[test]
fn scored_rows_race_workers_and_ceiling() {
    loom::model(|| {
        let s = Arc::new(settlement(2, Lane::Scored, None));
        assert_eq!(s.take_next(0), Some(0));
        assert_eq!(s.take_next(0), Some(1));

        let spawn_worker = |index: usize| {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                let result = s.worker_result(index, 3, ExitStatus::Code(0));
                (result, s.poll_rows())
            })
        };
        let late = spawn_worker(1);
        let early = spawn_worker(0);
        let ceiling = {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                let mut actions = s.tick(20);
                actions.extend(s.tick(25));
                actions.extend(s.tick(30));
                (actions, s.poll_rows())
            })
        };

        let mut batches = Vec::new();
        let mut settled = [0usize; 2];
        for (index, handle) in [(1, late), (0, early)] {
            let (result, rows) = handle.join().unwrap();
            if let Ok(actions) = result {
                settled[index] += settles(&actions, index);
            }
            batches.push(rows);
        }
        let (actions, rows) = ceiling.join().unwrap();
        batches.push(rows);
        for index in 0..2 {
            settled[index] += settles(&actions, index);
        }
        let rest = s.tick(40);
        for index in 0..2 {
            settled[index] += settles(&rest, index);
        }
        batches.push(s.poll_rows());
        assert_eq!(settled, [1, 1]);

        let mut seen: Vec<usize> = Vec::new();
        for batch in &batches {
            let indices: Vec<usize> = batch.iter().map(|r| r.index).collect();
            assert!(indices.windows(2).all(|w| w[0] + 1 == w[1]), "{indices:?}");
            seen.extend(indices);
        }
        seen.sort_unstable();
        assert_eq!(seen, [0, 1], "each row exactly once");
        let reason = s.end_reason().unwrap();
        assert!(matches!(reason, EndReason::Completed | EndReason::Ceiling));
    });
}
