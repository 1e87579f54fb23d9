//! stateright model of a batch run (spec/execution.md, invariants D1–D7) over the production core
//! [`tollgate_core::execution::Execution`].
//!
//! The model plays the shell and the world: it starts items when the core hands them out, lets
//! workers exit (voluntarily, or after a kill that reaches them), advances time to the core's next
//! deadline, interrupts the run, performs (or fails) the run's worktree removals, lets abandoned
//! workers deliver late results, and runs `tollgate sweep`. Every protocol decision is the core's.
//!
//! Broken variants (model code only) show the checker can fail, each property by name
//! (`tests/model_execution.rs`): [`Variant::ScoredInSettleOrder`] releases scored rows as items
//! settle (D2), [`Variant::WorkerOwnsWorktree`] is the design the execution protocol replaced,
//! where the worker removes its own worktree when it finally exits and abandonment lists nothing
//! (D6), and one variant per other property, listed with [`Variant::BROKEN`].

use stateright::{Model, Property};
use tollgate_core::execution::{
    sweep_decision, Action, Execution, ExitStatus, ItemSpec, KillSignal, Lane, Limits, Outcome,
    SweepDecision, WorktreeState, WorktreeStep,
};

/// How an item's process reacts to kills.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Dies on SIGTERM; may also exit 0 or 1 on its own.
    Normal,
    /// Ignores SIGTERM (a `setsid` grandchild holding the output); dies on SIGKILL.
    IgnoresTerm,
    /// Ignores every kill (uninterruptible sleep, a failed kill); may still exit 0 on its own,
    /// late or not.
    Unkillable,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    Production,
    /// Broken: the scored lane's rows come out in settle order (breaks D2).
    ScoredInSettleOrder,
    /// Broken: abandonment lists nothing; the worker removes its worktree when it exits (breaks
    /// both halves of D6).
    WorkerOwnsWorktree,
    /// Broken: the driver performs each release twice (breaks D1: an item settles twice).
    DriverRepeatsRelease,
    /// Broken: the driver ignores the core's abandonments (breaks D1: in a quiescent state an
    /// abandoned item has not settled).
    AbandonIgnored,
    /// Broken: the playbook lane's rows come out in declaration order (breaks D3).
    PlaybookInDeclarationOrder,
    /// Broken: the driver loses the last row the lane releases (breaks D4: the run ends with a
    /// row unreleased).
    LastRowLost,
    /// Broken: an abandoned worker's late result is delivered under the index of an item still
    /// running, which the core takes (breaks D5).
    LateResultMisrouted,
    /// Broken: the core is given three times the term grace (breaks D7: the run outlasts ceiling
    /// plus graces).
    GraceTripled,
    /// Broken: every kill reaches its process, whatever it ignores, and its death is reported at
    /// once (no item is abandoned).
    KillsAlwaysLand,
    /// Broken: the driver releases the rows only once the run has ended (no row is out while an
    /// item still runs).
    RowsAtTheEnd,
    /// Broken: `tollgate sweep` never runs (no listed worktree is swept; breaks D6's quiescent
    /// half).
    SweepNeverRuns,
    /// Broken: the core is given no ceiling (the ceiling never ends the run).
    NoCeiling,
}

impl Variant {
    pub const BROKEN: [Variant; 12] = [
        Variant::ScoredInSettleOrder,
        Variant::WorkerOwnsWorktree,
        Variant::DriverRepeatsRelease,
        Variant::AbandonIgnored,
        Variant::PlaybookInDeclarationOrder,
        Variant::LastRowLost,
        Variant::LateResultMisrouted,
        Variant::GraceTripled,
        Variant::KillsAlwaysLand,
        Variant::RowsAtTheEnd,
        Variant::SweepNeverRuns,
        Variant::NoCeiling,
    ];
}

/// Property names, as spec/invariants.md names them (the D table).
pub mod names {
    pub const D1: &str = "D1 every item settles at most once";
    pub const D1_QUIESCENT: &str = "D1 in a quiescent state every item has settled once";
    pub const D2: &str = "D2 scored rows come in declaration order";
    pub const D3: &str = "D3 playbook rows come in settle order";
    pub const D4: &str = "D4 a quiescent run has ended with a reason";
    pub const D5: &str = "D5 an abandoned worker never writes run state";
    pub const D6: &str = "D6 a worktree is removed at most once, never by a worker";
    pub const D6_QUIESCENT: &str =
        "D6 in a quiescent state every created worktree was removed once";
    pub const D7: &str = "D7 the run ends by ceiling + term grace + join grace";
    pub const ABANDONED: &str = "an item is abandoned";
    pub const ROW_WHILE_RUNNING: &str = "a row is out while an item still runs";
    pub const SWEPT: &str = "a listed worktree is swept";
    pub const CEILING: &str = "the ceiling ends the run";
}

#[derive(Clone, Debug)]
pub struct ExecutionModel {
    pub kinds: Vec<Kind>,
    pub deadlines_millis: Vec<Option<u64>>,
    pub limits: Limits,
    pub allow_interrupt: bool,
    pub variant: Variant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Worker {
    /// Not started.
    Idle,
    /// Its process runs.
    Running,
    /// A kill reached its process; it will report a signal exit.
    Dying,
    /// Reported (or, abandoned, finally exited); its process is gone.
    Gone,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ExecState {
    pub core: Execution,
    pub now_millis: u64,
    pub workers: Vec<Worker>,
    /// Release/Abandon actions seen per item.
    pub settles: Vec<u8>,
    /// Items in the order the core settled them (from its actions).
    pub settled_seen: Vec<usize>,
    /// Row indices in the order the lane released them.
    pub rows: Vec<usize>,
    /// The run owes a removal (a Release said Remove) not yet performed.
    pub removal_due: Vec<bool>,
    pub removed_by_run: Vec<u8>,
    pub removed_by_sweep: Vec<u8>,
    pub removed_by_worker: Vec<u8>,
    pub listed: Vec<bool>,
    pub abandoned_wrote: bool,
    pub interrupted: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    Start,
    Exit {
        index: usize,
        code: i32,
    },
    Die {
        index: usize,
    },
    /// An abandoned worker's process finally exits and its worker reports.
    LateExit {
        index: usize,
    },
    Advance,
    Interrupt,
    RunRemoves {
        index: usize,
    },
    RunRemoveFails {
        index: usize,
    },
    Sweep {
        index: usize,
    },
}

impl ExecutionModel {
    fn lane_for_core(&self) -> Lane {
        match self.variant {
            Variant::ScoredInSettleOrder => Lane::Playbook,
            Variant::PlaybookInDeclarationOrder => Lane::Scored,
            _ => self.limits.lane,
        }
    }

    /// The limits the core is given: the model's, or a broken variant's.
    fn limits_for_core(&self) -> Limits {
        let mut limits = Limits {
            lane: self.lane_for_core(),
            ..self.limits
        };
        match self.variant {
            Variant::GraceTripled => limits.term_grace_millis *= 3,
            Variant::NoCeiling => limits.ceiling_millis = None,
            _ => {}
        }
        limits
    }

    fn apply(&self, s: &mut ExecState, actions: Vec<Action>) {
        let mut actions = std::collections::VecDeque::from(actions);
        while let Some(action) = actions.pop_front() {
            match action {
                // BUG: the kill reaches every process, whatever it ignores, and its death is
                // reported at once.
                Action::Kill { index, .. }
                    if self.variant == Variant::KillsAlwaysLand
                        && s.workers[index] == Worker::Running =>
                {
                    s.workers[index] = Worker::Gone;
                    if let Ok(more) =
                        s.core
                            .on_worker_result(index, s.now_millis, ExitStatus::Signal(9))
                    {
                        actions.extend(more);
                    }
                }
                Action::Kill { index, signal } => {
                    let dies = match (self.kinds[index], signal) {
                        (Kind::Normal, _) => true,
                        (Kind::IgnoresTerm, KillSignal::Kill) => true,
                        (Kind::IgnoresTerm, KillSignal::Term) | (Kind::Unkillable, _) => false,
                    };
                    if dies && s.workers[index] == Worker::Running {
                        s.workers[index] = Worker::Dying;
                    }
                }
                Action::Release { index, worktree } => {
                    let times = if self.variant == Variant::DriverRepeatsRelease {
                        2
                    } else {
                        1
                    };
                    s.settles[index] = s.settles[index].saturating_add(times);
                    s.settled_seen.push(index);
                    if worktree == WorktreeStep::Remove {
                        s.removal_due[index] = true;
                    }
                }
                Action::Abandon { .. } if self.variant == Variant::AbandonIgnored => {}
                Action::Abandon { index, worktree } => {
                    s.settles[index] = s.settles[index].saturating_add(1);
                    s.settled_seen.push(index);
                    let listed = match self.variant {
                        Variant::WorkerOwnsWorktree => false,
                        _ => worktree == WorktreeStep::List,
                    };
                    if listed {
                        s.listed[index] = true;
                    }
                }
            }
        }
        if self.variant == Variant::RowsAtTheEnd && s.core.end_reason().is_none() {
            return;
        }
        let mut released: Vec<usize> = s
            .core
            .poll_rows()
            .into_iter()
            .map(|row| row.index)
            .collect();
        if self.variant == Variant::LastRowLost && s.rows.len() + released.len() == s.settles.len()
        {
            released.pop();
        }
        s.rows.extend(released);
    }

    /// Whether nothing more can happen.
    pub fn quiescent(&self, s: &ExecState) -> bool {
        let mut steps = Vec::new();
        self.actions(s, &mut steps);
        steps.is_empty()
    }

    fn worker_holds_worktree(&self, s: &ExecState, index: usize) -> bool {
        matches!(s.workers[index], Worker::Running | Worker::Dying)
    }
}

impl Model for ExecutionModel {
    type State = ExecState;
    type Action = Step;

    fn init_states(&self) -> Vec<ExecState> {
        let n = self.kinds.len();
        let specs = (0..n)
            .map(|i| ItemSpec {
                deadline_millis: self.deadlines_millis[i],
                worktree: true,
            })
            .collect();
        let Ok(core) = Execution::new(specs, self.limits_for_core()) else {
            return Vec::new();
        };
        vec![ExecState {
            core,
            now_millis: 0,
            workers: vec![Worker::Idle; n],
            settles: vec![0; n],
            settled_seen: Vec::new(),
            rows: Vec::new(),
            removal_due: vec![false; n],
            removed_by_run: vec![0; n],
            removed_by_sweep: vec![0; n],
            removed_by_worker: vec![0; n],
            listed: vec![false; n],
            abandoned_wrote: false,
            interrupted: false,
        }]
    }

    fn actions(&self, s: &ExecState, out: &mut Vec<Step>) {
        if s.core.clone().take_next(s.now_millis).is_some() {
            out.push(Step::Start);
        }
        for (index, worker) in s.workers.iter().enumerate() {
            let settled = s.core.outcome(index).is_some();
            match worker {
                Worker::Running if !settled => match self.kinds[index] {
                    Kind::Normal => {
                        out.push(Step::Exit { index, code: 0 });
                        out.push(Step::Exit { index, code: 1 });
                    }
                    Kind::IgnoresTerm | Kind::Unkillable => out.push(Step::Exit { index, code: 0 }),
                },
                Worker::Dying if !settled => out.push(Step::Die { index }),
                Worker::Running | Worker::Dying => out.push(Step::LateExit { index }),
                Worker::Idle | Worker::Gone => {}
            }
            if s.removal_due[index] {
                out.push(Step::RunRemoves { index });
                out.push(Step::RunRemoveFails { index });
            }
            if s.listed[index]
                && !self.worker_holds_worktree(s, index)
                && self.variant != Variant::SweepNeverRuns
            {
                out.push(Step::Sweep { index });
            }
        }
        if s.core.next_deadline_millis().is_some() {
            out.push(Step::Advance);
        }
        if self.allow_interrupt && !s.interrupted && s.core.end_reason().is_none() {
            out.push(Step::Interrupt);
        }
    }

    fn next_state(&self, last: &ExecState, step: Step) -> Option<ExecState> {
        let mut s = last.clone();
        match step {
            Step::Start => {
                let index = s.core.take_next(s.now_millis)?;
                s.workers[index] = Worker::Running;
            }
            Step::Exit { index, code } => {
                s.workers[index] = Worker::Gone;
                let actions = s
                    .core
                    .on_worker_result(index, s.now_millis, ExitStatus::Code(code))
                    .ok()?;
                self.apply(&mut s, actions);
            }
            Step::Die { index } => {
                s.workers[index] = Worker::Gone;
                let actions = s
                    .core
                    .on_worker_result(index, s.now_millis, ExitStatus::Signal(9))
                    .ok()?;
                self.apply(&mut s, actions);
            }
            Step::LateExit { index } => {
                s.workers[index] = Worker::Gone;
                let before = s.core.clone();
                // BUG (LateResultMisrouted): delivered under an item that still runs.
                let delivered_as = match self.variant {
                    Variant::LateResultMisrouted => (0..s.workers.len())
                        .find(|&j| {
                            j != index
                                && s.core.outcome(j).is_none()
                                && s.workers[j] == Worker::Running
                        })
                        .unwrap_or(index),
                    _ => index,
                };
                // The shell hands the late result to the core like any other; the core must
                // refuse it and change nothing.
                if s.core
                    .on_worker_result(delivered_as, s.now_millis, ExitStatus::Code(0))
                    .is_ok()
                    || s.core != before
                {
                    s.abandoned_wrote = true;
                }
                if self.variant == Variant::WorkerOwnsWorktree
                    && s.core.worktree(index) != Some(WorktreeState::Absent)
                {
                    s.removed_by_worker[index] = s.removed_by_worker[index].saturating_add(1);
                }
            }
            Step::Advance => {
                let deadline = s.core.next_deadline_millis()?;
                s.now_millis = s.now_millis.max(deadline);
                let actions = s.core.on_tick(s.now_millis);
                self.apply(&mut s, actions);
            }
            Step::Interrupt => {
                s.interrupted = true;
                let actions = s.core.on_interrupt(s.now_millis);
                self.apply(&mut s, actions);
            }
            Step::RunRemoves { index } => {
                s.removal_due[index] = false;
                s.core.on_worktree_removed(index).ok()?;
                s.removed_by_run[index] = s.removed_by_run[index].saturating_add(1);
            }
            Step::RunRemoveFails { index } => {
                s.removal_due[index] = false;
                s.core.on_worktree_kept(index).ok()?;
                s.listed[index] = true;
            }
            Step::Sweep { index } => {
                let held = self.worker_holds_worktree(&s, index);
                match sweep_decision(held) {
                    SweepDecision::Keep => return None,
                    SweepDecision::Remove => {
                        s.listed[index] = false;
                        s.removed_by_sweep[index] = s.removed_by_sweep[index].saturating_add(1);
                    }
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(names::D1, |_, s: &ExecState| {
                let mut seen = vec![false; s.settles.len()];
                s.settles.iter().all(|&n| n <= 1)
                    && s.core
                        .settle_order()
                        .iter()
                        .all(|&i| !std::mem::replace(&mut seen[i], true))
            }),
            Property::always(names::D1_QUIESCENT, |m: &ExecutionModel, s: &ExecState| {
                !m.quiescent(s) || s.settles.iter().all(|&n| n == 1)
            }),
            Property::always(names::D2, |m: &ExecutionModel, s: &ExecState| {
                m.limits.lane != Lane::Scored || s.rows.iter().enumerate().all(|(k, &i)| k == i)
            }),
            Property::always(names::D3, |m: &ExecutionModel, s: &ExecState| {
                m.limits.lane != Lane::Playbook || s.settled_seen.starts_with(&s.rows)
            }),
            Property::always(names::D4, |m: &ExecutionModel, s: &ExecState| {
                !m.quiescent(s)
                    || (s.core.end_reason().is_some() && s.rows.len() == s.settles.len())
            }),
            Property::always(names::D5, |_, s: &ExecState| !s.abandoned_wrote),
            Property::always(names::D6, |_, s: &ExecState| {
                (0..s.settles.len()).all(|i| {
                    s.removed_by_worker[i] == 0 && s.removed_by_run[i] + s.removed_by_sweep[i] <= 1
                })
            }),
            Property::always(names::D6_QUIESCENT, |m: &ExecutionModel, s: &ExecState| {
                !m.quiescent(s)
                    || (0..s.settles.len()).all(|i| {
                        s.core.worktree(i) == Some(WorktreeState::Absent)
                            || s.removed_by_run[i] + s.removed_by_sweep[i] == 1
                    })
            }),
            Property::always(names::D7, |m: &ExecutionModel, s: &ExecState| {
                match m.limits.ceiling_millis {
                    Some(c) => {
                        s.core.end_reason().is_some()
                            || s.now_millis
                                <= c + m.limits.term_grace_millis + m.limits.join_grace_millis
                    }
                    None => true,
                }
            }),
            Property::sometimes(names::ABANDONED, |_, s: &ExecState| {
                (0..s.settles.len()).any(|i| s.core.outcome(i) == Some(Outcome::Abandoned))
            }),
            Property::sometimes(names::ROW_WHILE_RUNNING, |_, s: &ExecState| {
                !s.rows.is_empty() && s.core.active() > 0
            }),
            Property::sometimes(names::SWEPT, |_, s: &ExecState| {
                s.removed_by_sweep.iter().any(|&n| n > 0)
            }),
            Property::sometimes(names::CEILING, |_, s: &ExecState| {
                s.core.end_reason() == Some(tollgate_core::execution::EndReason::Ceiling)
            }),
        ]
    }
}

/// The checked configuration: three items (one of each kind), two jobs, a ceiling.
pub fn small_model(lane: Lane, variant: Variant, allow_interrupt: bool) -> ExecutionModel {
    ExecutionModel {
        kinds: vec![Kind::Unkillable, Kind::Normal, Kind::IgnoresTerm],
        deadlines_millis: vec![Some(4), None, Some(3)],
        limits: Limits {
            ceiling_millis: Some(8),
            term_grace_millis: 2,
            join_grace_millis: 2,
            jobs: 2,
            lane,
        },
        allow_interrupt,
        variant,
    }
}
