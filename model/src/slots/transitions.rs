//! One action applied to a state: a role's step, a spawn fault, a crash, a pid reuse, a reconciler
//! starting; then the checks that compare the state before and after, and the state reduction.

use super::actions::SlotAction;
use super::state::*;
use super::SlotModel;
use std::collections::BTreeSet;
use tollgate_core::slots::{
    Liveness, Observation, ProcessIdentity, QueueState, RowState, SlotToken,
};

impl SlotModel {
    /// Applies `action` to a copy of `last`, then runs the transition checks.
    pub(super) fn apply(&self, last: &SlotState, action: &SlotAction) -> SlotState {
        let mut st = last.clone();
        let mut clean_pass = false;
        match *action {
            SlotAction::Step { role } => {
                let role = role as usize;
                let was_reconcile = st.roles[role].pc == Pc::Reconcile;
                self.step(&mut st, role);
                clean_pass = was_reconcile && st.roles[role].pc == Pc::Done;
                let proc = st.roles[role].proc;
                st.reap(proc);
            }
            SlotAction::CommandUnstartable { role } | SlotAction::LeaderUnread { role } => {
                let role = role as usize;
                let start = if matches!(action, SlotAction::CommandUnstartable { .. }) {
                    super::actors::CommandStart::Unstartable
                } else {
                    super::actors::CommandStart::LeaderUnread
                };
                self.start_work(&mut st, role, start);
                let proc = st.roles[role].proc;
                st.reap(proc);
            }
            SlotAction::SpawnFails { role } | SlotAction::SpawnUnrecorded { role } => {
                let role = role as usize;
                st.crashes_left -= 1;
                if matches!(action, SlotAction::SpawnUnrecorded { .. }) {
                    self.spawn_child(&mut st, role, None, false);
                }
                let Pc::Spawn { handoff, then } = st.roles[role].pc.clone() else {
                    unreachable!("spawn faults are only offered to roles holding a slot");
                };
                st.roles[role].pc = Pc::Release { handoff, then };
            }
            SlotAction::SpawnOnReusedPid {
                role,
                pid,
                ambiguous,
            } => {
                let role = role as usize;
                st.reuses_left -= 1;
                let Pc::Spawn { handoff, then } = st.roles[role].pc.clone() else {
                    unreachable!("spawns are only offered to roles holding a slot");
                };
                let child = self.spawn_child(&mut st, role, Some(pid), ambiguous);
                st.roles[role].pc = Pc::Bind {
                    handoff,
                    child,
                    then,
                };
            }
            SlotAction::Crash { proc } => {
                st.crashes_left -= 1;
                st.procs[proc as usize].alive = false;
                for index in 0..st.roles.len() {
                    if st.roles[index].proc != proc {
                        continue;
                    }
                    match &st.roles[index].pc {
                        Pc::Handoff { bound, .. } => {
                            st.events |= event::CRASH_BETWEEN_PUBLISHES;
                            if let Some(row) = st.queue.row(bound.key()) {
                                st.orphaned_handoffs.push((
                                    row.queue_id,
                                    bound.token(),
                                    bound.child(),
                                ));
                            }
                        }
                        // A submitter dies inside its section after writing the turn's record,
                        // before the queue is published: the turn is an orphan (S9).
                        Pc::Submit { next: index } | Pc::SubmitOne { index } => {
                            if let ProcKind::Submitter(s) = st.procs[proc as usize].kind {
                                let key = self.cfg.script(s as usize, *index as usize);
                                st.recorded |= turn_bit(&key);
                            }
                        }
                        _ => {}
                    }
                    st.roles[index].pc = Pc::Done;
                }
            }
            SlotAction::ReusePid { pid, ambiguous } => {
                st.reuses_left -= 1;
                st.new_proc(ProcKind::Unrelated, Some(pid), ambiguous);
            }
            SlotAction::UnrelatedExits { proc } => {
                st.procs[proc as usize].alive = false;
            }
            SlotAction::StartReconciler => {
                if st.others_active() {
                    st.reconciles_left -= 1;
                }
                let proc = st.new_proc(ProcKind::Reconciler, None, false);
                st.roles.push(Role {
                    proc,
                    pc: Pc::Reconcile,
                });
            }
            SlotAction::StartCanceller => {
                st.cancels_left -= 1;
                let proc = st.new_proc(ProcKind::Canceller, None, false);
                st.roles.push(Role {
                    proc,
                    pc: Pc::Cancel,
                });
            }
            SlotAction::RunnerReconciles { role } => {
                st.reconciles_left -= 1;
                let proc = st.roles[role as usize].proc;
                st.roles.push(Role {
                    proc,
                    pc: Pc::Reconcile,
                });
            }
        }
        self.check_transition(last, &mut st);
        st.reconciled_clean = clean_pass;
        Self::normalize(&mut st);
        st
    }

    /// Checks that compare the state before and after one step.
    pub(super) fn check_transition(&self, before: &SlotState, st: &mut SlotState) {
        // S3: tokens that left the queue are retired for good.
        let after: BTreeSet<SlotToken> = tokens_of(&st.queue).collect();
        for token in tokens_of(&before.queue) {
            if !after.contains(&token) && !st.retired.contains(&token) {
                st.retired.push(token);
            }
        }
        // S4: a reservation with a live bound child only goes when that child is the runner.
        for entry in &before.queue.entries {
            let Some(child) = entry.slot_reservation.as_ref().and_then(|r| r.child) else {
                continue;
            };
            if !st.procs.iter().any(|p| p.alive && p.id == child) {
                continue;
            }
            let Some(row) = st.queue.row(&entry.key) else {
                continue;
            };
            let still_bound = row
                .slot_reservation
                .as_ref()
                .is_some_and(|r| r.child == Some(child));
            let is_runner = st.queue.runner(&entry.key).map(|r| r.identity) == Some(child);
            if !still_bound && !is_runner {
                st.violations |= violation::BOUND_CHILD_DROPPED;
            }
        }
        // S7: queue ids are never handed out twice.
        if st.queue.next_queue_id < before.queue.next_queue_id {
            st.violations |= violation::FIFO;
        }
        // S9: a row only leaves once its turn ended (ran, superseded or cancelled).
        for entry in &before.queue.entries {
            if st.queue.row(&entry.key).map(|r| r.queue_id) != Some(entry.queue_id)
                && st.ended & turn_bit(&entry.key) == 0
            {
                st.violations |= violation::TURN_LOST;
            }
        }
    }

    /// Forgets what can no longer matter, so histories that differ only there meet in one state:
    /// finished roles, dead processes nothing refers to, results of rows that left, retired
    /// tokens no role holds, and handoffs whose child died or whose row left.
    ///
    /// Sound because a forgotten identity is never observed again (the core only observes
    /// identities found in the queue or passed in by a role), a forgotten token is never passed to
    /// the core again, and new processes get start times above any kept one on the same pid.
    pub(super) fn normalize(st: &mut SlotState) {
        st.roles.retain(|r| r.pc != Pc::Done);
        let mut referenced: BTreeSet<ProcessIdentity> = BTreeSet::new();
        let mut held: BTreeSet<SlotToken> = BTreeSet::new();
        for e in &st.queue.entries {
            match e.state {
                RowState::Waiting {
                    enqueue_owner,
                    owner,
                } => {
                    referenced.insert(enqueue_owner);
                    referenced.insert(owner);
                }
                RowState::Dispatching { dispatch_owner } => {
                    referenced.insert(dispatch_owner);
                }
                RowState::Parked => {}
            }
            if let Some(r) = &e.slot_reservation {
                referenced.insert(r.reserver);
                referenced.extend(r.child);
            }
        }
        referenced.extend(st.queue.runners.iter().map(|r| r.identity));
        for w in &st.queue.works {
            referenced.insert(w.runner);
            referenced.extend(w.leader);
        }
        for role in &st.roles {
            match &role.pc {
                Pc::Spawn { handoff, .. } | Pc::Release { handoff, .. } => {
                    held.insert(handoff.token());
                    referenced.insert(handoff.reserver());
                    referenced.extend(identities_of(handoff.snapshot()));
                }
                Pc::Bind { handoff, child, .. } => {
                    held.insert(handoff.token());
                    referenced.insert(*child);
                    referenced.insert(handoff.reserver());
                    referenced.extend(identities_of(handoff.snapshot()));
                }
                Pc::Handoff {
                    bound,
                    snapshot,
                    reserver,
                    ..
                } => {
                    held.insert(bound.token());
                    referenced.insert(bound.child());
                    referenced.insert(*reserver);
                    referenced.extend(identities_of(snapshot));
                }
                Pc::TakeOver { token, .. } => {
                    held.insert(*token);
                }
                _ => {}
            }
        }
        let table = ProcTable {
            procs: &st.procs,
            works: &st.works,
        };
        let queue = &st.queue;
        st.orphaned_handoffs.retain(|(queue_id, _, child)| {
            table.observe(child) == Observation::Matching
                && queue.entries.iter().any(|e| e.queue_id == *queue_id)
        });
        referenced.extend(st.orphaned_handoffs.iter().map(|(_, _, c)| *c));
        st.retired.retain(|t| held.contains(t));
        // Drop unreferenced dead processes and renumber the roles' process indices.
        let mut remap = vec![u8::MAX; st.procs.len()];
        let mut kept = Vec::with_capacity(st.procs.len());
        for (index, p) in st.procs.iter().enumerate() {
            if p.alive || referenced.contains(&p.id) {
                remap[index] = kept.len() as u8;
                kept.push(p.clone());
            }
        }
        st.procs = kept;
        for role in &mut st.roles {
            role.proc = remap[role.proc as usize];
        }
    }

    pub(super) fn initial_state(&self) -> SlotState {
        let mut st = SlotState {
            queue: QueueState::default(),
            procs: Vec::new(),
            works: Vec::new(),
            roles: Vec::new(),
            next_token: 1,
            retired: Vec::new(),
            orphaned_handoffs: Vec::new(),
            recorded: 0,
            ran: 0,
            ended: 0,
            cancelled: 0,
            crashes_left: self.cfg.crash_budget,
            reuses_left: self.cfg.reuse_budget,
            reconciles_left: self.cfg.reconcile_budget,
            cancels_left: self.cfg.cancel_budget,
            reconciled_clean: false,
            events: 0,
            violations: 0,
            submitters: self.cfg.symmetric(),
            canonical: None,
        };
        for submitter in 0..self.cfg.submitters {
            let proc = st.new_proc(ProcKind::Submitter(submitter as u8), None, false);
            if self.cfg.concurrent_submissions {
                for index in 0..self.cfg.turns as u8 {
                    st.roles.push(Role {
                        proc,
                        pc: Pc::SubmitOne { index },
                    });
                }
            } else {
                st.roles.push(Role {
                    proc,
                    pc: Pc::Submit { next: 0 },
                });
            }
        }
        for attached in 0..self.cfg.attached {
            let proc = st.new_proc(ProcKind::Attached(attached as u8), None, false);
            st.roles.push(Role {
                proc,
                pc: Pc::Attach { next: 0 },
            });
        }
        st
    }
}
