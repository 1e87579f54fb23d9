//! The batch execution protocol (spec/execution.md): one run of a pack, as a value you feed events
//! to.
//!
//! [`Execution`] knows every item's lifecycle (pending, running, killing, settled), the run's
//! ceiling and graces, and the lane. The shell tells it what happened ([`Execution::take_next`] when
//! it may start an item, [`Execution::on_worker_result`], [`Execution::on_tick`],
//! [`Execution::on_interrupt`], the worktree reports) and carries out the [`Action`]s it returns;
//! rows come out of [`Execution::poll_rows`] in the lane's order. "Now" is always an argument in
//! milliseconds since the run started; nothing here reads a clock, a file or a process.
//!
//! Settlement happens exactly once per item: a second settle (a late result from an abandoned
//! worker, a duplicate report) is refused with an [`ExecError`] and leaves the value unchanged.

use serde::{Deserialize, Serialize};

/// The pack's explicit bound on items; the core refuses more.
pub const MAX_ITEMS: usize = 10_000;

/// How rows are ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Lane {
    /// Declaration order; the settled prefix streams as soon as it is complete.
    #[default]
    Scored,
    /// Settle order; each row is released the moment its item settles.
    Playbook,
}

/// The terminal outcome of one item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// The command exited 0 before any kill.
    Passed,
    /// The command exited non-zero (or died of a signal, or could not be spawned) before any kill.
    Failed,
    /// The item's deadline (clamped to the ceiling) passed; it was killed and its worker reported.
    TimedOut,
    /// Killed, and its worker still had not reported after term grace plus join grace.
    Abandoned,
    /// Never started (the run ended first) or stopped because the run was interrupted.
    Cancelled,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed-out",
            Outcome::Abandoned => "abandoned",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// Why the run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    Completed,
    Ceiling,
    Interrupted,
}

impl EndReason {
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Completed => "completed",
            EndReason::Ceiling => "ceiling",
            EndReason::Interrupted => "interrupted",
        }
    }
}

/// The signal a kill step sends to an item's whole tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KillSignal {
    Term,
    Kill,
}

/// How an item's command ended, as its worker saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
    /// The command could not be started (or its worker could not wait for it).
    SpawnFailed,
}

/// One item's settled row.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Row {
    pub index: usize,
    pub outcome: Outcome,
    pub exit: Option<ExitStatus>,
    /// `None` when the item never started.
    pub started_at_millis: Option<u64>,
    pub ended_at_millis: u64,
}

impl Row {
    pub fn duration_millis(&self) -> u64 {
        self.started_at_millis
            .map_or(0, |s| self.ended_at_millis.saturating_sub(s))
    }
}

/// What one item asks of the core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ItemSpec {
    /// Relative to the item's start; clamped to the run ceiling. `None`: only the ceiling.
    pub deadline_millis: Option<u64>,
    /// The item runs in its own worktree, which the run (never the worker) removes.
    pub worktree: bool,
}

/// The run's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Relative to the run's start. `None`: no ceiling.
    pub ceiling_millis: Option<u64>,
    /// After SIGTERM, how long before SIGKILL.
    pub term_grace_millis: u64,
    /// After SIGKILL, how long the run waits for the worker before abandoning it.
    pub join_grace_millis: u64,
    /// Items running at once (killing ones included). At least 1.
    pub jobs: usize,
    pub lane: Lane,
}

/// What the worktree of an item needs from the shell when the item settles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorktreeStep {
    /// The item has no worktree (or it was never created).
    None,
    /// The run removes it now, then reports [`Execution::on_worktree_removed`] or
    /// [`Execution::on_worktree_kept`].
    Remove,
    /// An abandoned worker may still be inside: record it on the durable sweep list, do not remove.
    List,
}

/// What the shell must do after an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Send `signal` to the item's whole process tree.
    Kill { index: usize, signal: KillSignal },
    /// The item settled with its worker joined: clean up what is left of its tree, then its
    /// worktree as `worktree` says.
    Release {
        index: usize,
        worktree: WorktreeStep,
    },
    /// The item settled as abandoned: stop waiting for its worker (leave the thread behind, drop
    /// its late result) and handle its worktree as `worktree` says.
    Abandon {
        index: usize,
        worktree: WorktreeStep,
    },
}

/// Why the core refused an event. Each refusal leaves the [`Execution`] unchanged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    #[error("EXEC_TOO_MANY_ITEMS: {given} items; a pack holds at most {limit}")]
    TooManyItems { given: usize, limit: usize },
    #[error("EXEC_NO_JOBS: jobs must be at least 1")]
    NoJobs,
    #[error("EXEC_ITEM_UNKNOWN: no item {index}")]
    UnknownItem { index: usize },
    #[error("EXEC_ITEM_NOT_STARTED: item {index} has not started")]
    NotStarted { index: usize },
    #[error("EXEC_ITEM_ALREADY_SETTLED: item {index} already settled as {outcome:?}")]
    AlreadySettled { index: usize, outcome: Outcome },
    #[error("EXEC_WORKTREE_NOT_RELEASED: item {index}'s worktree is not awaiting removal")]
    WorktreeNotReleased { index: usize },
}

/// Why an item is being killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum KillCause {
    Deadline,
    Interrupt,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum ItemState {
    Pending,
    Running {
        started_at_millis: u64,
        deadline_at_millis: Option<u64>,
    },
    Killing {
        started_at_millis: u64,
        cause: KillCause,
        signal: KillSignal,
        signal_at_millis: u64,
    },
    Settled,
}

/// Where an item's worktree is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorktreeState {
    /// No worktree (not asked for, or the item never started).
    Absent,
    /// Exists; the item's process may be inside.
    Held,
    /// The run was told to remove it and has not reported yet.
    Removing,
    /// The run removed it.
    Removed,
    /// On the durable sweep list; `tollgate sweep` removes it once nothing holds it.
    Listed,
}

/// One run of a pack.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Execution {
    specs: Vec<ItemSpec>,
    limits: Limits,
    states: Vec<ItemState>,
    worktrees: Vec<WorktreeState>,
    rows: Vec<Option<Row>>,
    /// Indices in the order they settled (bounded by the number of items).
    settle_order: Vec<usize>,
    /// Rows handed out by [`Execution::poll_rows`] so far.
    released: usize,
    /// First index that may still be pending.
    next_pending: usize,
    /// Items running or killing.
    active: usize,
    unsettled: usize,
    /// Set when the ceiling or an interrupt stopped the run.
    stop: Option<EndReason>,
}

impl Execution {
    /// A run of `specs` that starts at time 0.
    pub fn new(specs: Vec<ItemSpec>, limits: Limits) -> Result<Self, ExecError> {
        if specs.len() > MAX_ITEMS {
            return Err(ExecError::TooManyItems {
                given: specs.len(),
                limit: MAX_ITEMS,
            });
        }
        if limits.jobs == 0 {
            return Err(ExecError::NoJobs);
        }
        let n = specs.len();
        Ok(Execution {
            specs,
            limits,
            states: vec![ItemState::Pending; n],
            worktrees: vec![WorktreeState::Absent; n],
            rows: vec![None; n],
            settle_order: Vec::with_capacity(n),
            released: 0,
            next_pending: 0,
            active: 0,
            unsettled: n,
            stop: None,
        })
    }

    pub fn len(&self) -> usize {
        self.specs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The next item to start, recorded as running from `now_millis`; `None` when all `jobs` are
    /// busy, nothing is pending, or the run is stopping. The shell starts it (or reports
    /// [`ExitStatus::SpawnFailed`]).
    pub fn take_next(&mut self, now_millis: u64) -> Option<usize> {
        if self.stop.is_some() || self.active >= self.limits.jobs || self.ceiling_passed(now_millis)
        {
            return None;
        }
        let index = self.next_pending;
        if index >= self.states.len() {
            return None;
        }
        let ceiling_at = self.limits.ceiling_millis;
        let own = self.specs[index]
            .deadline_millis
            .map(|d| now_millis.saturating_add(d));
        let deadline_at_millis = match (own, ceiling_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.states[index] = ItemState::Running {
            started_at_millis: now_millis,
            deadline_at_millis,
        };
        if self.specs[index].worktree {
            self.worktrees[index] = WorktreeState::Held;
        }
        self.next_pending += 1;
        self.active += 1;
        Some(index)
    }

    /// The worker of `index` reports how its command ended. Refused (and nothing changes) when the
    /// item is unknown, not started, or already settled (an abandoned worker's late result).
    pub fn on_worker_result(
        &mut self,
        index: usize,
        now_millis: u64,
        exit: ExitStatus,
    ) -> Result<Vec<Action>, ExecError> {
        let state = *self
            .states
            .get(index)
            .ok_or(ExecError::UnknownItem { index })?;
        let (started, outcome) = match state {
            ItemState::Pending => return Err(ExecError::NotStarted { index }),
            ItemState::Settled => {
                return Err(ExecError::AlreadySettled {
                    index,
                    outcome: self.outcome(index).unwrap_or(Outcome::Cancelled),
                })
            }
            ItemState::Running {
                started_at_millis, ..
            } => {
                let outcome = if exit == ExitStatus::Code(0) {
                    Outcome::Passed
                } else {
                    Outcome::Failed
                };
                (started_at_millis, outcome)
            }
            ItemState::Killing {
                started_at_millis,
                cause,
                ..
            } => {
                let outcome = match cause {
                    KillCause::Deadline => Outcome::TimedOut,
                    KillCause::Interrupt => Outcome::Cancelled,
                };
                (started_at_millis, outcome)
            }
        };
        let row = Row {
            index,
            outcome,
            exit: Some(exit),
            started_at_millis: Some(started),
            ended_at_millis: now_millis.max(started),
        };
        let worktree = self.settle(row, WorktreeStep::Remove);
        Ok(vec![Action::Release { index, worktree }])
    }

    /// Time passed: kill items past their deadline, escalate after the term grace, abandon after
    /// the join grace, stop the run at the ceiling.
    pub fn on_tick(&mut self, now_millis: u64) -> Vec<Action> {
        let mut actions = Vec::new();
        if self.stop.is_none() && self.unsettled > 0 && self.ceiling_passed(now_millis) {
            self.stop = Some(EndReason::Ceiling);
            self.stop_all(now_millis, KillCause::Deadline, &mut actions);
        }
        for index in 0..self.states.len() {
            match self.states[index] {
                ItemState::Running {
                    started_at_millis,
                    deadline_at_millis: Some(deadline),
                } if now_millis >= deadline => {
                    self.states[index] = ItemState::Killing {
                        started_at_millis,
                        cause: KillCause::Deadline,
                        signal: KillSignal::Term,
                        signal_at_millis: now_millis,
                    };
                    actions.push(Action::Kill {
                        index,
                        signal: KillSignal::Term,
                    });
                }
                ItemState::Killing {
                    started_at_millis,
                    cause,
                    signal: KillSignal::Term,
                    signal_at_millis,
                } if now_millis
                    >= signal_at_millis.saturating_add(self.limits.term_grace_millis) =>
                {
                    self.states[index] = ItemState::Killing {
                        started_at_millis,
                        cause,
                        signal: KillSignal::Kill,
                        signal_at_millis: now_millis,
                    };
                    actions.push(Action::Kill {
                        index,
                        signal: KillSignal::Kill,
                    });
                }
                ItemState::Killing {
                    started_at_millis,
                    signal: KillSignal::Kill,
                    signal_at_millis,
                    ..
                } if now_millis
                    >= signal_at_millis.saturating_add(self.limits.join_grace_millis) =>
                {
                    let row = Row {
                        index,
                        outcome: Outcome::Abandoned,
                        exit: None,
                        started_at_millis: Some(started_at_millis),
                        ended_at_millis: now_millis,
                    };
                    let worktree = self.settle(row, WorktreeStep::List);
                    actions.push(Action::Abandon { index, worktree });
                }
                _ => {}
            }
        }
        actions
    }

    /// SIGINT/SIGTERM reached the run: cancel what has not started and kill what runs. A second
    /// interrupt (or one after the ceiling) changes nothing.
    pub fn on_interrupt(&mut self, now_millis: u64) -> Vec<Action> {
        let mut actions = Vec::new();
        if self.stop.is_none() && self.unsettled > 0 {
            self.stop = Some(EndReason::Interrupted);
            self.stop_all(now_millis, KillCause::Interrupt, &mut actions);
        }
        actions
    }

    /// The run removed the worktree it was told to remove.
    pub fn on_worktree_removed(&mut self, index: usize) -> Result<(), ExecError> {
        self.worktree_report(index, WorktreeState::Removed)
    }

    /// The run could not remove the worktree; it is now on the sweep list.
    pub fn on_worktree_kept(&mut self, index: usize) -> Result<(), ExecError> {
        self.worktree_report(index, WorktreeState::Listed)
    }

    /// Rows the lane allows out now, each exactly once over the run.
    pub fn poll_rows(&mut self) -> Vec<Row> {
        let mut out = Vec::new();
        match self.limits.lane {
            Lane::Playbook => {
                while let Some(&index) = self.settle_order.get(self.released) {
                    if let Some(row) = &self.rows[index] {
                        out.push(row.clone());
                    }
                    self.released += 1;
                }
            }
            Lane::Scored => {
                while let Some(Some(row)) = self.rows.get(self.released) {
                    out.push(row.clone());
                    self.released += 1;
                }
            }
        }
        out
    }

    /// The earliest time at which [`Execution::on_tick`] has something to do.
    pub fn next_deadline_millis(&self) -> Option<u64> {
        let mut next: Option<u64> = None;
        let mut consider = |t: u64| next = Some(next.map_or(t, |n| n.min(t)));
        if self.stop.is_none() && self.unsettled > 0 {
            if let Some(c) = self.limits.ceiling_millis {
                consider(c);
            }
        }
        for state in &self.states {
            match *state {
                ItemState::Running {
                    deadline_at_millis: Some(d),
                    ..
                } => consider(d),
                ItemState::Killing {
                    signal: KillSignal::Term,
                    signal_at_millis,
                    ..
                } => consider(signal_at_millis.saturating_add(self.limits.term_grace_millis)),
                ItemState::Killing {
                    signal: KillSignal::Kill,
                    signal_at_millis,
                    ..
                } => consider(signal_at_millis.saturating_add(self.limits.join_grace_millis)),
                _ => {}
            }
        }
        next
    }

    /// `Some` once every item has settled: the run is over, for this reason.
    pub fn end_reason(&self) -> Option<EndReason> {
        (self.unsettled == 0).then(|| self.stop.unwrap_or(EndReason::Completed))
    }

    /// Why the run is stopping early, if it is.
    pub fn stopping(&self) -> Option<EndReason> {
        self.stop
    }

    pub fn outcome(&self, index: usize) -> Option<Outcome> {
        self.rows.get(index)?.as_ref().map(|r| r.outcome)
    }

    pub fn row(&self, index: usize) -> Option<&Row> {
        self.rows.get(index)?.as_ref()
    }

    pub fn worktree(&self, index: usize) -> Option<WorktreeState> {
        self.worktrees.get(index).copied()
    }

    /// Indices in the order they settled.
    pub fn settle_order(&self) -> &[usize] {
        &self.settle_order
    }

    /// Items that are running or being killed.
    pub fn active(&self) -> usize {
        self.active
    }

    /// Settled items per outcome.
    pub fn counts(&self) -> Counts {
        let mut counts = Counts::default();
        for outcome in self.rows.iter().flatten().map(|r| r.outcome) {
            match outcome {
                Outcome::Passed => counts.passed += 1,
                Outcome::Failed => counts.failed += 1,
                Outcome::TimedOut => counts.timed_out += 1,
                Outcome::Abandoned => counts.abandoned += 1,
                Outcome::Cancelled => counts.cancelled += 1,
            }
        }
        counts
    }

    fn ceiling_passed(&self, now_millis: u64) -> bool {
        self.limits.ceiling_millis.is_some_and(|c| now_millis >= c)
    }

    fn stop_all(&mut self, now_millis: u64, cause: KillCause, actions: &mut Vec<Action>) {
        for index in 0..self.states.len() {
            match self.states[index] {
                ItemState::Pending => {
                    let row = Row {
                        index,
                        outcome: Outcome::Cancelled,
                        exit: None,
                        started_at_millis: None,
                        ended_at_millis: now_millis,
                    };
                    let worktree = self.settle(row, WorktreeStep::None);
                    actions.push(Action::Release { index, worktree });
                }
                ItemState::Running {
                    started_at_millis, ..
                } => {
                    self.states[index] = ItemState::Killing {
                        started_at_millis,
                        cause,
                        signal: KillSignal::Term,
                        signal_at_millis: now_millis,
                    };
                    actions.push(Action::Kill {
                        index,
                        signal: KillSignal::Term,
                    });
                }
                ItemState::Killing { .. } | ItemState::Settled => {}
            }
        }
        self.next_pending = self.states.len();
    }

    /// The only place an item becomes settled. Callers have checked it is not settled yet.
    fn settle(&mut self, row: Row, wanted: WorktreeStep) -> WorktreeStep {
        let index = row.index;
        let was_active = matches!(
            self.states[index],
            ItemState::Running { .. } | ItemState::Killing { .. }
        );
        if was_active {
            self.active -= 1;
        }
        self.states[index] = ItemState::Settled;
        self.rows[index] = Some(row);
        self.settle_order.push(index);
        self.unsettled -= 1;
        if self.worktrees[index] != WorktreeState::Held {
            return WorktreeStep::None;
        }
        match wanted {
            WorktreeStep::Remove => self.worktrees[index] = WorktreeState::Removing,
            WorktreeStep::List => self.worktrees[index] = WorktreeState::Listed,
            WorktreeStep::None => {}
        }
        wanted
    }

    fn worktree_report(&mut self, index: usize, to: WorktreeState) -> Result<(), ExecError> {
        match self.worktrees.get(index) {
            None => Err(ExecError::UnknownItem { index }),
            Some(WorktreeState::Removing) => {
                self.worktrees[index] = to;
                Ok(())
            }
            Some(_) => Err(ExecError::WorktreeNotReleased { index }),
        }
    }
}

/// Settled items per outcome (the `run_ended` event's counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Counts {
    pub passed: usize,
    pub failed: usize,
    pub timed_out: usize,
    pub abandoned: usize,
    pub cancelled: usize,
}

/// One entry of the durable sweep list, as the sweep decides on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SweepDecision {
    /// Nothing holds it any more: remove it and drop the entry.
    Remove,
    /// A live process is still inside: keep the entry for a later sweep.
    Keep,
}

/// The sweep's rule: a listed worktree is removed only once no live process holds it.
pub fn sweep_decision(held_by_live_process: bool) -> SweepDecision {
    if held_by_live_process {
        SweepDecision::Keep
    } else {
        SweepDecision::Remove
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(jobs: usize, lane: Lane) -> Limits {
        Limits {
            ceiling_millis: Some(100),
            term_grace_millis: 10,
            join_grace_millis: 10,
            jobs,
            lane,
        }
    }

    #[test]
    fn second_settle_is_refused_and_changes_nothing() {
        let mut e = Execution::new(vec![ItemSpec::default()], limits(1, Lane::Scored)).unwrap();
        assert_eq!(e.take_next(0), Some(0));
        e.on_worker_result(0, 5, ExitStatus::Code(0)).unwrap();
        let before = e.clone();
        let err = e.on_worker_result(0, 6, ExitStatus::Code(1)).unwrap_err();
        assert!(matches!(err, ExecError::AlreadySettled { index: 0, .. }));
        assert_eq!(e, before);
    }

    #[test]
    fn deadline_is_clamped_to_ceiling_and_escalates_to_abandon() {
        let spec = ItemSpec {
            deadline_millis: Some(1_000),
            worktree: true,
        };
        let mut e = Execution::new(vec![spec], limits(1, Lane::Playbook)).unwrap();
        e.take_next(0);
        assert_eq!(e.next_deadline_millis(), Some(100));
        assert!(e.on_tick(99).is_empty());
        assert_eq!(
            e.on_tick(100),
            vec![Action::Kill {
                index: 0,
                signal: KillSignal::Term
            }]
        );
        assert_eq!(
            e.on_tick(110),
            vec![Action::Kill {
                index: 0,
                signal: KillSignal::Kill
            }]
        );
        assert_eq!(
            e.on_tick(120),
            vec![Action::Abandon {
                index: 0,
                worktree: WorktreeStep::List
            }]
        );
        assert_eq!(e.end_reason(), Some(EndReason::Ceiling));
        assert_eq!(e.worktree(0), Some(WorktreeState::Listed));
        let before = e.clone();
        assert!(e.on_worker_result(0, 130, ExitStatus::Code(0)).is_err());
        assert_eq!(e, before);
    }

    #[test]
    fn scored_streams_the_settled_prefix() {
        let specs = vec![ItemSpec::default(); 3];
        let mut e = Execution::new(specs, limits(3, Lane::Scored)).unwrap();
        for _ in 0..3 {
            e.take_next(0);
        }
        e.on_worker_result(2, 1, ExitStatus::Code(0)).unwrap();
        assert!(e.poll_rows().is_empty());
        e.on_worker_result(0, 2, ExitStatus::Code(0)).unwrap();
        assert_eq!(
            e.poll_rows().iter().map(|r| r.index).collect::<Vec<_>>(),
            [0]
        );
        e.on_worker_result(1, 3, ExitStatus::Code(1)).unwrap();
        assert_eq!(
            e.poll_rows().iter().map(|r| r.index).collect::<Vec<_>>(),
            [1, 2]
        );
        assert_eq!(e.end_reason(), Some(EndReason::Completed));
    }

    #[test]
    fn interrupt_cancels_pending_and_kills_running() {
        let specs = vec![ItemSpec::default(); 2];
        let mut e = Execution::new(specs, limits(1, Lane::Playbook)).unwrap();
        e.take_next(0);
        let actions = e.on_interrupt(5);
        assert!(actions.contains(&Action::Kill {
            index: 0,
            signal: KillSignal::Term
        }));
        assert_eq!(e.outcome(1), Some(Outcome::Cancelled));
        e.on_worker_result(0, 6, ExitStatus::Signal(15)).unwrap();
        assert_eq!(e.outcome(0), Some(Outcome::Cancelled));
        assert_eq!(e.end_reason(), Some(EndReason::Interrupted));
    }
}
