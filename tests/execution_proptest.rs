//! proptest over the execution core: random event sequences (starts, worker results including
//! late and duplicate ones, ticks, interrupts, worktree reports), then a drain to the end. Checks
//! settle-exactly-once, refusal-leaves-state-unchanged, and the lane orderings.

use proptest::prelude::*;
use tollgate::protocol::execution::{
    Action, ExecError, Execution, ExitStatus, ItemSpec, Lane, Limits, WorktreeStep,
};

#[derive(Clone, Debug)]
enum Op {
    Start,
    Result { index: usize, code: i32 },
    Tick { advance_millis: u64 },
    Interrupt,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Start),
        4 => (0usize..6, 0i32..3).prop_map(|(index, code)| Op::Result { index, code }),
        3 => (0u64..40).prop_map(|advance_millis| Op::Tick { advance_millis }),
        1 => Just(Op::Interrupt),
    ]
}

struct Harness {
    core: Execution,
    now: u64,
    settles: Vec<u32>,
    rows: Vec<usize>,
}

impl Harness {
    fn apply(&mut self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Release { index, worktree } => {
                    self.settles[index] += 1;
                    if worktree == WorktreeStep::Remove {
                        if index % 2 == 0 {
                            self.core.on_worktree_removed(index).unwrap();
                        } else {
                            self.core.on_worktree_kept(index).unwrap();
                        }
                    }
                }
                Action::Abandon { index, .. } => self.settles[index] += 1,
                Action::Kill { .. } => {}
            }
        }
        self.rows
            .extend(self.core.poll_rows().into_iter().map(|r| r.index));
    }

    fn step(&mut self, op: &Op) {
        match *op {
            Op::Start => {
                let _ = self.core.take_next(self.now);
            }
            Op::Result { index, code } => {
                let before = self.core.clone();
                match self
                    .core
                    .on_worker_result(index, self.now, ExitStatus::Code(code))
                {
                    Ok(actions) => self.apply(actions),
                    Err(
                        ExecError::AlreadySettled { .. }
                        | ExecError::NotStarted { .. }
                        | ExecError::UnknownItem { .. },
                    ) => assert_eq!(self.core, before, "a refused event changed the core"),
                    Err(e) => panic!("unexpected {e}"),
                }
            }
            Op::Tick { advance_millis } => {
                self.now += advance_millis;
                let actions = self.core.on_tick(self.now);
                self.apply(actions);
            }
            Op::Interrupt => {
                let actions = self.core.on_interrupt(self.now);
                self.apply(actions);
            }
        }
        let mut seen = vec![false; self.settles.len()];
        for &i in self.core.settle_order() {
            assert!(!seen[i], "item {i} settled twice");
            seen[i] = true;
        }
        assert!(self.settles.iter().all(|&n| n <= 1));
        assert!(self.core.active() <= self.core.limits().jobs);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn settle_once_and_lane_order(
        n in 1usize..6,
        jobs in 1usize..4,
        playbook in any::<bool>(),
        ceiling in proptest::option::of(20u64..200),
        deadlines in proptest::collection::vec(proptest::option::of(5u64..80), 6),
        ops in proptest::collection::vec(op(), 0..60),
    ) {
        let lane = if playbook { Lane::Playbook } else { Lane::Scored };
        let specs = (0..n)
            .map(|i| ItemSpec { deadline_millis: deadlines[i], worktree: i % 3 != 2 })
            .collect();
        let limits = Limits {
            ceiling_millis: ceiling,
            term_grace_millis: 10,
            join_grace_millis: 15,
            jobs,
            lane,
        };
        let mut h = Harness {
            core: Execution::new(specs, limits).unwrap(),
            now: 0,
            settles: vec![0; n],
            rows: Vec::new(),
        };
        for op in &ops {
            h.step(op);
        }
        // Drain: interrupt, then let every worker either report or be abandoned.
        h.step(&Op::Interrupt);
        let mut guard = 0;
        while h.core.end_reason().is_none() {
            guard += 1;
            prop_assert!(guard < 100, "the run did not end");
            h.step(&Op::Tick { advance_millis: 50 });
        }
        prop_assert!(h.settles.iter().all(|&c| c == 1), "{:?}", h.settles);
        prop_assert_eq!(h.rows.len(), n);
        match lane {
            Lane::Scored => prop_assert_eq!(h.rows.clone(), (0..n).collect::<Vec<_>>()),
            Lane::Playbook => prop_assert_eq!(h.rows.as_slice(), h.core.settle_order()),
        }
        // After the end, every further result is refused and changes nothing.
        for i in 0..n {
            let before = h.core.clone();
            prop_assert!(h.core.on_worker_result(i, h.now, ExitStatus::Code(0)).is_err());
            prop_assert_eq!(&h.core, &before);
        }
    }
}
