//! The programs of the model's processes: detached and attached submitters, spawned runners,
//! reconcilers and cancellers. One call of [`SlotModel::step`] is one locked section, i.e. one
//! call of a core step (`tollgate_core::slots::steps`), or one effect performed outside the lock
//! (a spawn, a kill, a command that runs), as the shell's driver performs them. The model types no
//! sequence of primitives itself: what follows a step is decided by the effect it returns.

use super::broken::{
    enqueue_dropped, keep_superseded, park_bound_row_of_dead_reserver, release_even_after_bind,
    restore_cancelled_rows, signal_dispatchers_too, take_over_unconditionally, EveryoneAlive,
    VariantRules,
};
use super::config::{SlotConfig, Variant, LATE_MILLIS};
use super::state::{
    event, token_from_counter, turn_bit, violation, Pc, ProcKind, ProcTable, SlotState, Then, Work,
};
use super::SlotModel;
use tollgate_core::admission::Strategy;
use tollgate_core::slots::steps::{
    attached_start, cancel, handoff_publish_first, handoff_publish_second, reconcile,
    reconcile_with, runner_finish, runner_take_over, spawn_failed, submit, work_started,
    AttachedEffect, AttachedInput, CancelSelection, FinishInput, Handoff, ReconcileEffect,
    ReconcileInput, SubmitEffect, SubmitInput, TakeOverEffect, TakeOverInput,
};
use tollgate_core::slots::{ProcessIdentity, SlotError, SlotToken, TurnKey};

impl SlotModel {
    pub(super) fn rules(&self) -> VariantRules {
        VariantRules(self.cfg.variant)
    }

    /// The fresh token a section is given: the model's next one, or (ReusesLastToken) the last
    /// one installed.
    fn offered_token(&self, st: &SlotState) -> SlotToken {
        match self.cfg.variant {
            // BUG: the token source repeats the last token it handed out.
            Variant::ReusesLastToken if st.next_token > 1 => token_from_counter(st.next_token - 1),
            _ => st.fresh_token(),
        }
    }

    /// The cap a submit is given.
    fn submit_cap(&self) -> usize {
        match self.cfg.variant {
            // BUG: the submit sees every slot taken.
            Variant::SubmitSeesNoSlot => 0,
            // BUG: the submit sees a free slot whatever the cap.
            Variant::SubmitStartsEverything => self.cfg.cap + 8,
            _ => self.cfg.cap,
        }
    }

    /// The strategy a submit is given for a task of `strategy`.
    fn submit_strategy(&self, strategy: Strategy) -> Strategy {
        match self.cfg.variant {
            // BUG: the submit lets every turn of every task run at once.
            Variant::SubmitStartsEverything => Strategy::Concurrent {
                max: tollgate_core::admission::MAX_CONCURRENT,
            },
            _ => strategy,
        }
    }

    /// The cap a finishing runner or a reconcile is given, when either may start a parked row.
    fn start_cap(&self) -> usize {
        match self.cfg.variant {
            // BUG: a parked row never starts after its submit: finish and reconcile see no slot.
            Variant::StartsNoParkedRow => 0,
            _ => self.cfg.cap,
        }
    }

    /// A step that reserved a slot handed back `handoff`: note its token and go spawn.
    fn hold(&self, st: &mut SlotState, role: usize, handoff: Handoff, then: Then) {
        // S11: no step reserves a slot for a turn that already ended (reconcile must remove a
        // dead runner's row whose turn has a result, never start it again).
        if st.ended & turn_bit(handoff.key()) != 0 {
            st.violations |= violation::ENDED_RAN;
        }
        st.note_installed(handoff.token());
        st.roles[role].pc = Pc::Spawn { handoff, then };
    }

    /// `steps::spawn_failed` for a handoff whose spawn failed.
    pub(super) fn release(&self, st: &mut SlotState, handoff: Handoff) -> bool {
        let before = st.queue.clone();
        let key = handoff.key().clone();
        let token = handoff.token();
        let bound_live_child = before
            .row(&key)
            .and_then(|r| r.slot_reservation.as_ref())
            .and_then(|r| r.child)
            .is_some_and(|c| st.procs.iter().any(|p| p.alive && p.id == c));
        let mut released = spawn_failed(&mut st.queue, handoff.clone());
        if !released && self.cfg.variant == Variant::ReleaseAfterBind {
            released = release_even_after_bind(&mut st.queue, &handoff);
        }
        if bound_live_child && st.queue != before {
            st.violations |= violation::BOUND_CHILD_DROPPED;
        }
        st.check_token_call(&key, token, &before, released);
        released
    }

    /// A detached submit: the turn's record and `steps::submit` in one section.
    fn submit(&self, st: &mut SlotState, role: usize, submitter: usize, index: usize, then: Then) {
        let me = st.me(role);
        let key = self.cfg.script(submitter, index);
        let strategy = self.cfg.strategy(&key.task);
        let now = SlotConfig::clock_millis(st.recorded.count_ones());
        st.recorded |= turn_bit(&key);
        let before = st.queue.clone();
        let fresh = self.offered_token(st);
        let result = {
            let SlotState {
                queue,
                procs,
                works,
                ..
            } = &mut *st;
            submit(
                queue,
                SubmitInput {
                    key: &key,
                    me,
                    fresh_token: fresh,
                    now_millis: now,
                    cap: self.submit_cap(),
                    strategy: self.submit_strategy(strategy),
                    liveness: &ProcTable { procs, works },
                },
            )
        };
        let mut decision = match result {
            Ok(decision) => decision,
            Err(_) => {
                st.violations |= violation::CORE_ERROR;
                st.finish_role(role, then);
                return;
            }
        };
        if self.cfg.variant == Variant::EnqueuesAtOwnClock {
            // BUG: the new row keeps the submitter's clock even when it runs behind the last row.
            if let Ok(row) = st.queue.row_mut(&key) {
                row.enqueued_at_millis = now;
            }
        }
        if self.cfg.variant == Variant::QueueKeepsTwoWaiters && strategy == Strategy::Queue {
            keep_superseded(&mut st.queue, &before, &mut decision);
        }
        if self.cfg.variant == Variant::DropEnqueues
            && matches!(decision.effect, SubmitEffect::Dropped { .. })
            && enqueue_dropped(&mut st.queue, &key, me, now).is_err()
        {
            st.violations |= violation::CORE_ERROR;
        }
        check_strategy(st, &before, &key, strategy);
        for gone in &decision.superseded {
            st.events |= event::SUPERSEDED;
            st.ended |= turn_bit(gone);
        }
        match decision.effect {
            SubmitEffect::Spawn(handoff) => {
                st.events |= event::ACQUIRED;
                self.hold(st, role, handoff, then);
            }
            SubmitEffect::Park => {
                st.events |= event::SATURATED;
                st.finish_role(role, then);
            }
            SubmitEffect::Pending => {
                st.events |= event::PENDING;
                st.finish_role(role, then);
            }
            SubmitEffect::Wait { .. } => {
                st.events |= event::WAIT;
                st.finish_role(role, then);
            }
            SubmitEffect::Dropped { .. } => {
                st.events |= event::DROPPED;
                st.ended |= turn_bit(&key);
                st.finish_role(role, then);
            }
        }
    }

    /// An attached start: the turn's record and `steps::attached_start` in one section.
    fn attach(&self, st: &mut SlotState, role: usize, submitter: usize, index: usize, then: Then) {
        let me = st.me(role);
        let key = self.cfg.script(submitter, index);
        let strategy = self.cfg.strategy(&key.task);
        let now = SlotConfig::clock_millis(st.recorded.count_ones());
        st.recorded |= turn_bit(&key);
        let fresh = self.offered_token(st);
        let active_before = active_rows(&st.queue, &key.task);
        let before = st.queue.clone();
        let given = match (self.cfg.variant, strategy) {
            // BUG: the attached start sees no running limit.
            (Variant::AttachedIgnoresStrategy, s) if s != Strategy::Drop => Strategy::Concurrent {
                max: tollgate_core::admission::MAX_CONCURRENT,
            },
            _ => strategy,
        };
        let SlotState {
            queue,
            procs,
            works,
            ..
        } = &mut *st;
        let result = attached_start(
            queue,
            AttachedInput {
                key: &key,
                me,
                fresh_token: fresh,
                now_millis: now,
                strategy: given,
                liveness: &ProcTable { procs, works },
            },
        );
        let result = match result {
            // BUG: the driver never runs an attached start: it waits as if the task were full.
            Ok(AttachedEffect::Run { .. }) if self.cfg.variant == Variant::AttachedNeverRuns => {
                st.queue = before;
                Ok(AttachedEffect::Wait {
                    running: key.clone(),
                })
            }
            other => other,
        };
        match result {
            Ok(AttachedEffect::Run { work }) => {
                st.events |= event::ATTACHED_RUN;
                // S10 for the attached start: it never takes its task past its running limit.
                let active = active_rows(&st.queue, &key.task);
                if active > active_before.max(strategy.max_running()) {
                    st.violations |= violation::STRATEGY;
                }
                st.note_installed(work.token());
                st.roles[role].pc = Pc::StartWork {
                    key,
                    work,
                    detached: false,
                    then,
                };
            }
            Ok(AttachedEffect::Dropped { .. }) => {
                st.events |= event::DROPPED;
                st.ended |= turn_bit(&key);
                st.finish_role(role, then);
            }
            // The task's running limit is reached: the foreground submitter tries again later
            // (its step stays where it is).
            Ok(AttachedEffect::Wait { .. }) => st.events |= event::ATTACHED_WAIT,
            Err(_) => {
                st.violations |= violation::CORE_ERROR;
                st.finish_role(role, then);
            }
        }
    }

    fn take_over(&self, st: &mut SlotState, role: usize, key: TurnKey, token: SlotToken) {
        let me = st.me(role);
        let before = st.queue.clone();
        let settled = (st.ran | st.cancelled) & turn_bit(&key) != 0;
        let (procs, works) = (st.procs.clone(), st.works.clone());
        let liveness = ProcTable {
            procs: &procs,
            works: &works,
        };
        let mut outcome = runner_take_over(
            &mut st.queue,
            TakeOverInput {
                key: &key,
                token,
                me,
                settled,
                cgroup: None,
                liveness: &liveness,
            },
        );
        let refused = matches!(
            outcome,
            Ok(TakeOverEffect::Refused { .. }) | Err(SlotError::TokenMismatch { .. })
        );
        if refused && self.cfg.variant == Variant::UnconditionalTakeOver {
            outcome = take_over_unconditionally(&mut st.queue, &key, token, me, &liveness);
        }
        let running = matches!(
            outcome,
            Ok(TakeOverEffect::Run { .. }
                | TakeOverEffect::AlreadySettled
                | TakeOverEffect::Cancelled)
        );
        // The recorded runner repeating its take-over with the token the second publish cleared
        // may act (spec/slots.md, "Take-over"): it records the work it is about to start, and
        // nothing else may change.
        let repeat = before.runner(&key).map(|r| r.identity) == Some(me);
        let compared = if repeat && running {
            let mut with_work = before.clone();
            with_work.works.clone_from(&st.queue.works);
            with_work
        } else {
            before
        };
        st.check_token_call(&key, token, &compared, running);
        match outcome {
            Ok(TakeOverEffect::Run { work }) => {
                st.roles[role].pc = Pc::StartWork {
                    key,
                    work,
                    detached: true,
                    then: Then::Exit,
                };
            }
            Ok(TakeOverEffect::AlreadySettled) => {
                st.events |= event::ALREADY_SETTLED;
                st.roles[role].pc = Pc::Written {
                    key,
                    then: Then::Exit,
                };
            }
            Ok(TakeOverEffect::Cancelled) => {
                // The cancel recorded on the row is honoured before anything is spawned; the
                // runner writes the cancelled record in its finishing section.
                st.events |= event::CANCEL_HONOURED;
                st.roles[role].pc = Pc::Written {
                    key,
                    then: Then::Exit,
                };
            }
            Ok(TakeOverEffect::Refused { .. }) | Err(_) => st.roles[role].pc = Pc::Done,
        }
    }

    /// A spawn that succeeds: a new runner process whose program starts at its take-over.
    pub(super) fn spawn_child(
        &self,
        st: &mut SlotState,
        role: usize,
        pid: Option<u32>,
        masks_older: bool,
    ) -> ProcessIdentity {
        let Pc::Spawn { handoff, .. } = st.roles[role].pc.clone() else {
            unreachable!("spawn_child is only called for a role holding a slot");
        };
        let proc = st.new_proc(ProcKind::Runner, pid, masks_older);
        st.roles.push(super::state::Role {
            proc,
            pc: Pc::TakeOver {
                key: handoff.key().clone(),
                token: handoff.token(),
            },
        });
        st.procs[proc as usize].id
    }

    fn reconcile(&self, st: &mut SlotState, role: usize) {
        let me = st.me(role);
        let fresh = self.offered_token(st);
        let mut records = st.turn_records(&self.cfg);
        if self.cfg.variant == Variant::SkipOrphanRequeue {
            // BUG: the shell reads no record of a turn without a row (no orphan candidates).
            records.retain(|key, _| st.queue.row(key).is_some());
        }
        let strategies = self.cfg.strategies();
        let (procs, works) = (st.procs.clone(), st.works.clone());
        let liveness = ProcTable {
            procs: &procs,
            works: &works,
        };
        let input = ReconcileInput {
            me,
            fresh_token: fresh,
            now_millis: LATE_MILLIS,
            cap: self.start_cap(),
            strategies: &strategies,
            records: &records,
            liveness: &liveness,
        };
        let outcome = match self.cfg.variant {
            Variant::OccupancyPerReserverPid
            | Variant::ExcludeDropsReservations
            | Variant::ReconcileExcludesItself => {
                reconcile_with(&self.rules(), &mut st.queue, input)
            }
            Variant::ParksBoundRowOfDeadReserver => {
                match park_bound_row_of_dead_reserver(&mut st.queue, &liveness) {
                    Some(key) => Ok(ReconcileEffect::Parked { key }),
                    None => reconcile(&mut st.queue, input),
                }
            }
            Variant::ReconcileSeesEveryoneAlive => reconcile(
                &mut st.queue,
                ReconcileInput {
                    me,
                    fresh_token: fresh,
                    now_millis: LATE_MILLIS,
                    cap: self.start_cap(),
                    strategies: &strategies,
                    records: &records,
                    // BUG: reconcile sees every process and every work alive.
                    liveness: &EveryoneAlive,
                },
            ),
            _ => reconcile(&mut st.queue, input),
        };
        match outcome {
            Ok(ReconcileEffect::Spawn { handoff, replaced }) => {
                if replaced.is_some() {
                    st.events |= event::REPLACED;
                }
                self.hold(st, role, handoff, Then::Reconcile);
            }
            Ok(ReconcileEffect::Kill { work, .. }) => {
                st.events |= event::KILL;
                if self.cfg.variant == Variant::ReplaceWithoutKill {
                    // BUG: the driver forgets the work instead of killing it.
                    st.queue.works.retain(|w| w.id != work.id);
                } else {
                    st.roles[role].pc = Pc::Kill {
                        works: vec![work.id],
                        then: Then::Reconcile,
                    };
                }
            }
            Ok(ReconcileEffect::Requeued { .. }) => st.events |= event::REQUEUED,
            // No model turn loses its record, so nothing is forgotten.
            Ok(ReconcileEffect::Forgotten { .. }) => st.violations |= violation::CORE_ERROR,
            Ok(ReconcileEffect::Saturated | ReconcileEffect::Idle) => st.roles[role].pc = Pc::Done,
            Ok(
                ReconcileEffect::CompletedHandoff { .. }
                | ReconcileEffect::Parked { .. }
                | ReconcileEffect::Removed { .. },
            ) => {}
            Err(_) => {
                st.violations |= violation::CORE_ERROR;
                st.roles[role].pc = Pc::Done;
            }
        }
    }

    fn cancel(&self, st: &mut SlotState, role: usize) {
        let before = st.queue.clone();
        let task = match self.cfg.variant {
            // BUG: the cancel names a task that has no turns.
            Variant::CancelSelectsNothing => "nothing".to_string(),
            _ => SlotModel::first_task(),
        };
        let (procs, works) = (st.procs.clone(), st.works.clone());
        let table = ProcTable {
            procs: &procs,
            works: &works,
        };
        let mut effect = cancel(&mut st.queue, CancelSelection::Task(&task), &table);
        if self.cfg.variant == Variant::CancelSignalsDispatchers {
            signal_dispatchers_too(&before, &mut effect, &table);
        }
        // S13: whom the driver would signal is the turn's executor, never a dispatcher.
        if effect
            .signal
            .iter()
            .any(|(key, id)| !st.may_be_signalled_for(id, key))
        {
            st.violations |= violation::SIGNALLED_DISPATCHER;
        }
        for key in &effect.removed {
            st.events |= event::CANCEL_REMOVED;
            st.ended |= turn_bit(key);
            // The shell ends the turn as cancelled unless its record already has a result (a
            // runner that wrote it and died before leaving).
            if st.ran & turn_bit(key) == 0 {
                st.cancelled |= turn_bit(key);
            }
        }
        if self.cfg.variant == Variant::CancelLeavesRow {
            restore_cancelled_rows(&mut st.queue, &before, &effect.removed);
        }
        // The signalled executors record the cancellation and leave by the normal finishing
        // path; in the model they run on to their end, which is the same path. The dispatchers
        // of the recorded rows go on with their handoffs; their runners honour the request.
        if effect.again() {
            st.events |= event::CANCEL_KILL;
            st.roles[role].pc = Pc::Kill {
                works: effect.kill.iter().map(|w| w.id).collect(),
                then: Then::Cancel,
            };
        } else {
            st.roles[role].pc = Pc::Done;
        }
    }

    fn first_task() -> String {
        super::config::SlotConfig::task_name(0)
    }

    /// The work's command starts (the work is alive from now on) and `steps::work_started`
    /// records it.
    /// The runner (detached or attached) starts the turn's command: its work runs, and the
    /// section right after the spawn records the leader (`work_started`, also for an attached
    /// run: production's `run_work` records it for both), unless `start` says the command could
    /// not start or its leader could not be read.
    pub(super) fn start_work(&self, st: &mut SlotState, role: usize, start: CommandStart) {
        let Pc::StartWork {
            key,
            work,
            detached,
            then,
        } = st.roles[role].pc.clone()
        else {
            unreachable!("start_work is only called for a role about to start its command");
        };
        if st.ended & turn_bit(&key) != 0 {
            st.violations |= violation::ENDED_RAN;
        }
        if start == CommandStart::Unstartable {
            // No process exists; the runner writes the unstartable result and leaves.
            st.ran |= turn_bit(&key);
            st.ended |= turn_bit(&key);
            st.roles[role].pc = Pc::Written { key, then };
            return;
        }
        st.works.push(Work {
            id: work,
            key: key.clone(),
            detached,
        });
        if start == CommandStart::Started {
            let me = st.me(role);
            let recorded_as = match self.cfg.variant {
                // BUG: the leader is recorded under the next turn's key.
                Variant::LeaderUnderAnotherTurn => TurnKey::new(key.task.clone(), key.turn + 1),
                _ => key.clone(),
            };
            if work_started(&mut st.queue, &recorded_as, work, me).is_err() {
                st.violations |= violation::CORE_ERROR;
            }
        }
        st.roles[role].pc = Pc::Running { key, work, then };
    }

    pub(super) fn step(&self, st: &mut SlotState, role: usize) {
        let pc = st.roles[role].pc.clone();
        let me = st.me(role);
        let submitter = match st.proc_of(role).kind {
            ProcKind::Submitter(s) => s as usize,
            ProcKind::Attached(a) => self.cfg.submitters + a as usize,
            _ => 0,
        };
        let next_of = |next: u8, then: fn(u8) -> Then| {
            if u32::from(next) + 1 < self.cfg.turns {
                then(next + 1)
            } else {
                Then::Exit
            }
        };
        match pc {
            Pc::Submit { next } => {
                let then = next_of(next, Then::Submit);
                self.submit(st, role, submitter, next as usize, then);
            }
            Pc::SubmitOne { index } => {
                self.submit(st, role, submitter, index as usize, Then::Exit);
            }
            Pc::Attach { next } => {
                let then = next_of(next, Then::Attach);
                self.attach(st, role, submitter, next as usize, then);
            }
            Pc::Spawn { handoff, then } => {
                let child = self.spawn_child(st, role, None, false);
                st.roles[role].pc = Pc::Bind {
                    handoff,
                    child,
                    then,
                };
            }
            Pc::Release { handoff, then } => {
                self.release(st, handoff);
                st.finish_role(role, then);
            }
            Pc::Bind {
                handoff,
                child,
                then,
            } => {
                let before = st.queue.clone();
                let (key, token) = (handoff.key().clone(), handoff.token());
                let (snapshot, reserver) = (handoff.snapshot().clone(), handoff.reserver());
                let result = handoff_publish_first(&mut st.queue, handoff, child);
                st.check_token_call(&key, token, &before, result.is_ok());
                match result {
                    // The two publishes in one section: nothing can come between them.
                    Ok(bound) if self.cfg.variant == Variant::PublishesInOneSection => {
                        let before = st.queue.clone();
                        let result = handoff_publish_second(&mut st.queue, bound);
                        st.check_token_call(&key, token, &before, result.is_ok());
                        st.finish_role(role, then);
                    }
                    Ok(bound) => {
                        st.roles[role].pc = Pc::Handoff {
                            bound,
                            snapshot,
                            reserver,
                            then,
                        }
                    }
                    Err(_) => st.finish_role(role, then),
                }
            }
            Pc::Handoff { bound, then, .. } => {
                let before = st.queue.clone();
                let (key, token) = (bound.key().clone(), bound.token());
                let result = handoff_publish_second(&mut st.queue, bound);
                st.check_token_call(&key, token, &before, result.is_ok());
                st.finish_role(role, then);
            }
            Pc::TakeOver { key, token } => self.take_over(st, role, key, token),
            Pc::StartWork { .. } => self.start_work(st, role, CommandStart::Started),
            Pc::Running { key, work, then } => {
                // The command exits (the runner kills what is left of its work) and the result
                // is written. An executor that a cancel signalled (the cancel recorded the
                // request on the row in the same section) kills its work first instead: the
                // command did not run to its end, and the turn is recorded cancelled.
                let stopped = st.queue.row(&key).is_some_and(|r| r.cancel_requested);
                st.works.retain(|w| w.id != work);
                if stopped {
                    st.events |= event::CANCEL_STOPPED;
                    st.cancelled |= turn_bit(&key);
                } else {
                    st.ran |= turn_bit(&key);
                }
                st.ended |= turn_bit(&key);
                st.roles[role].pc = Pc::Written { key, then };
            }
            Pc::Written { key, then } => {
                let bit = turn_bit(&key);
                let requested = st.queue.row(&key).is_some_and(|r| r.cancel_requested);
                if requested && (st.ran | st.cancelled) & bit == 0 {
                    // A runner that honoured the cancel at its take-over: the record it writes
                    // with leaving (one section) says cancelled.
                    st.cancelled |= bit;
                    st.ended |= bit;
                }
                if self.cfg.variant == Variant::CancelledAfterCompletion
                    && st.queue.row(&key).is_some_and(|r| r.cancel_requested)
                {
                    // BUG: the outcome follows the request, not what the command did.
                    st.cancelled |= turn_bit(&key);
                }
                let fresh = self.offered_token(st);
                let strategies = self.cfg.strategies();
                let (procs, works) = (st.procs.clone(), st.works.clone());
                let outcome = runner_finish(
                    &mut st.queue,
                    FinishInput {
                        key: &key,
                        me,
                        fresh_token: fresh,
                        now_millis: LATE_MILLIS,
                        cap: self.start_cap(),
                        strategies: &strategies,
                        liveness: &ProcTable {
                            procs: &procs,
                            works: &works,
                        },
                    },
                );
                if self.cfg.variant == Variant::QueueIdsRestart && st.queue.entries.is_empty() {
                    // BUG: an empty queue hands its ids out again from the start.
                    st.queue.next_queue_id = 1;
                }
                match outcome {
                    Ok(Some(handoff)) => self.hold(st, role, handoff, then),
                    Ok(None) => st.finish_role(role, then),
                    // Refused if it no longer dispatches the row (a reconciler replaced it).
                    Err(SlotError::NotOwner { .. }) => st.roles[role].pc = Pc::Done,
                    Err(_) => {
                        st.violations |= violation::CORE_ERROR;
                        st.roles[role].pc = Pc::Done;
                    }
                }
            }
            Pc::Reconcile => self.reconcile(st, role),
            Pc::Kill { works, then } => {
                st.works.retain(|w| !works.contains(&w.id));
                st.finish_role(role, then);
            }
            Pc::Cancel => self.cancel(st, role),
            Pc::Done => {}
        }
    }
}

/// S10 over one submit section: under `queue`/`debounce` the task never holds more waiters than
/// before and at most one more than none (the new waiter replaces the old); under `drop` a task
/// that had a row is left exactly as it was.
fn check_strategy(
    st: &mut SlotState,
    before: &tollgate_core::slots::QueueState,
    key: &TurnKey,
    strategy: Strategy,
) {
    let rows = |q: &tollgate_core::slots::QueueState, parked_only: bool| {
        q.entries
            .iter()
            .filter(|e| e.key.task == key.task)
            .filter(|e| !parked_only || matches!(e.state, tollgate_core::slots::RowState::Parked))
            .count()
    };
    let broken = match strategy {
        Strategy::Queue | Strategy::Debounce { .. } => {
            rows(&st.queue, true) > rows(before, true).max(1)
        }
        Strategy::Drop => {
            let task_rows = |q: &tollgate_core::slots::QueueState| {
                q.entries
                    .iter()
                    .filter(|e| e.key.task == key.task)
                    .cloned()
                    .collect::<Vec<_>>()
            };
            rows(before, false) > 0 && task_rows(&st.queue) != task_rows(before)
        }
        Strategy::Concurrent { .. } => false,
    };
    if broken {
        st.violations |= violation::STRATEGY;
    }
}

/// The task's rows that are not parked (running, being started, or held by their submitter).
fn active_rows(queue: &tollgate_core::slots::QueueState, task: &str) -> usize {
    queue
        .entries
        .iter()
        .filter(|e| {
            e.key.task == task && !matches!(e.state, tollgate_core::slots::RowState::Parked)
        })
        .count()
}

/// How a runner's command starts (production's `execute_turn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CommandStart {
    /// It started and its leader was recorded.
    Started,
    /// It started; its leader's identity could not be read, so none is recorded.
    LeaderUnread,
    /// It could not start: nothing runs.
    Unstartable,
}
