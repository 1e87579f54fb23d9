//! The programs of the model's processes: submitters, spawned runners and reconcilers. One call of
//! [`SlotModel::step`] is one critical section under the queue lock (or one step outside it, such
//! as a spawn), so other processes interleave between them.

use super::broken::*;
use super::config::*;
use super::state::*;
use super::SlotModel;
use tollgate_core::slots::{
    complete_runner_spawn_first, complete_runner_spawn_second, enqueue, finish_turn, park,
    reconcile_step_with, release_runner_slot, reserve_runner_slot_with, start_next_parked_with,
    take_over_reserved_slot, token_fenced_row_after_bind, EnqueueOutcome, ProcessIdentity,
    ReconcileStep, ReserveOutcome, SlotToken, StartNext, TakeOver, TurnKey,
};

impl SlotModel {
    pub(super) fn rules(&self) -> VariantRules {
        VariantRules(self.cfg.variant)
    }

    pub(super) fn release(
        &self,
        st: &mut SlotState,
        key: &TurnKey,
        token: SlotToken,
        me: ProcessIdentity,
    ) -> bool {
        let before = st.queue.clone();
        let bound_live_child = before
            .row(key)
            .and_then(|r| r.slot_reservation.as_ref())
            .and_then(|r| r.child)
            .is_some_and(|c| st.procs.iter().any(|p| p.alive && p.id == c));
        let released = match self.cfg.variant {
            Variant::ReleaseAfterBind => release_even_after_bind(&mut st.queue, key, token, me),
            _ => release_runner_slot(&mut st.queue, key, token, me),
        };
        if bound_live_child && st.queue != before {
            st.violations |= violation::BOUND_CHILD_DROPPED;
        }
        st.check_token_call(key, token, &before, released);
        released
    }

    /// L1 of a detached submit.
    pub(super) fn submit(
        &self,
        st: &mut SlotState,
        role: usize,
        submitter: usize,
        key: TurnKey,
        then: Then,
    ) {
        let me = st.me(role);
        if st.finished_turns & turn_bit(&key) != 0 {
            st.finish_role(role, then);
            return;
        }
        let before = st.queue.clone();
        match enqueue(&mut st.queue, &key, me, self.cfg.clock_millis(submitter)) {
            Ok(EnqueueOutcome::AlreadyQueued { .. }) if st.queue != before => {
                st.violations |= violation::FIFO;
            }
            Ok(_) => {}
            Err(_) => {
                st.violations |= violation::CORE_ERROR;
                st.finish_role(role, then);
                return;
            }
        }
        let fresh = st.fresh_token();
        let outcome = {
            let SlotState { queue, procs, .. } = &mut *st;
            reserve_runner_slot_with(
                &self.rules(),
                queue,
                &key,
                me,
                None,
                self.cfg.cap,
                fresh,
                &ProcTable(procs),
            )
        };
        match outcome {
            Ok(ReserveOutcome::Acquired { token, stolen }) => {
                st.events |= if stolen.is_some() {
                    event::STEAL
                } else {
                    event::ACQUIRED
                };
                st.note_installed(token);
                match st.snapshot(&key) {
                    Some(snapshot) => {
                        st.roles[role].pc = Pc::Spawn {
                            key,
                            token,
                            snapshot,
                            then,
                        }
                    }
                    None => {
                        st.violations |= violation::CORE_ERROR;
                        st.finish_role(role, then);
                    }
                }
            }
            Ok(ReserveOutcome::Saturated) => {
                st.events |= event::SATURATED;
                if park(&mut st.queue, &key).is_err() {
                    st.violations |= violation::CORE_ERROR;
                }
                st.finish_role(role, then);
            }
            Ok(ReserveOutcome::Pending { token }) => {
                st.events |= if token.is_some() {
                    event::PENDING_LIVE_TOKEN
                } else {
                    event::PENDING_NIL
                };
                st.finish_role(role, then);
            }
            Err(_) => {
                st.violations |= violation::CORE_ERROR;
                st.finish_role(role, then);
            }
        }
    }

    pub(super) fn take_over(
        &self,
        st: &mut SlotState,
        role: usize,
        key: TurnKey,
        token: SlotToken,
    ) {
        let me = st.me(role);
        let before = st.queue.clone();
        let outcome = {
            let SlotState { queue, procs, .. } = &mut *st;
            match self.cfg.variant {
                Variant::UnconditionalTakeOver => {
                    take_over_unconditionally(queue, &key, me, &ProcTable(procs))
                }
                _ => take_over_reserved_slot(queue, &key, token, me, &ProcTable(procs)),
            }
        };
        let running = matches!(outcome, Ok(TakeOver::Running { .. }));
        st.check_token_call(&key, token, &before, running);
        match outcome {
            Ok(TakeOver::Running {
                adopted_dead_parent,
            }) => {
                if adopted_dead_parent {
                    st.events |= event::TAKEOVER_DEAD_PARENT;
                }
                match st.queue.row(&key) {
                    Some(row) => {
                        let queue_id = row.queue_id;
                        st.roles[role].pc = Pc::Running { key, queue_id };
                    }
                    None => {
                        st.violations |= violation::CORE_ERROR;
                        st.roles[role].pc = Pc::Done;
                    }
                }
            }
            Ok(TakeOver::Refused { .. }) | Err(_) => st.roles[role].pc = Pc::Done,
        }
    }

    pub(super) fn spawn_child(
        &self,
        st: &mut SlotState,
        role: usize,
        pid: Option<u32>,
        masks_older: bool,
    ) -> ProcessIdentity {
        let Pc::Spawn { key, token, .. } = st.roles[role].pc.clone() else {
            unreachable!("spawn_child is only called for a role holding a slot");
        };
        let proc = st.new_proc(ProcKind::Runner, pid, masks_older);
        st.roles.push(Role {
            proc,
            pc: Pc::TakeOver { key, token },
        });
        st.procs[proc as usize].id
    }

    pub(super) fn step(&self, st: &mut SlotState, role: usize) {
        let pc = st.roles[role].pc.clone();
        let me = st.me(role);
        match pc {
            Pc::Submit { next } => {
                let ProcKind::Submitter(submitter) = st.proc_of(role).kind else {
                    unreachable!("only submitters submit");
                };
                let submitter = submitter as usize;
                let key = self.cfg.script(submitter, next as usize);
                let then = if (next as u32) + 1 < self.cfg.turns {
                    Then::Submit(next + 1)
                } else {
                    Then::Exit
                };
                self.submit(st, role, submitter, key, then);
            }
            Pc::SubmitOne { turn } => {
                let ProcKind::Submitter(submitter) = st.proc_of(role).kind else {
                    unreachable!("only submitters submit");
                };
                self.submit(
                    st,
                    role,
                    submitter as usize,
                    TurnKey::new(TASK, turn),
                    Then::Exit,
                );
            }
            Pc::Spawn {
                key,
                token,
                snapshot,
                then,
            } => {
                let child = self.spawn_child(st, role, None, false);
                st.roles[role].pc = Pc::Bind {
                    key,
                    token,
                    child,
                    snapshot,
                    then,
                };
            }
            Pc::Release { key, token, then } => {
                self.release(st, &key, token, me);
                st.finish_role(role, then);
            }
            Pc::Bind {
                key,
                token,
                child,
                snapshot,
                then,
            } => {
                let before = st.queue.clone();
                let result = complete_runner_spawn_first(&mut st.queue, &key, token, child);
                st.check_token_call(&key, token, &before, result.is_ok());
                if result.is_ok() {
                    st.roles[role].pc = Pc::Handoff {
                        key,
                        token,
                        child,
                        snapshot,
                        then,
                    };
                } else {
                    st.finish_role(role, then);
                }
            }
            Pc::Handoff {
                key,
                token,
                child,
                snapshot,
                then,
            } => {
                let before = st.queue.clone();
                let result =
                    token_fenced_row_after_bind(&snapshot, token, child).and_then(|expected| {
                        complete_runner_spawn_second(&mut st.queue, &expected, child, false)
                    });
                st.check_token_call(&key, token, &before, result.is_ok());
                st.finish_role(role, then);
            }
            Pc::TakeOver { key, token } => self.take_over(st, role, key, token),
            Pc::Running { key, queue_id } => {
                if let Err(at) = st.settled.binary_search(&queue_id) {
                    st.settled.insert(at, queue_id);
                }
                st.finished_turns |= turn_bit(&key);
                st.roles[role].pc = Pc::Written { key };
            }
            Pc::Written { key } => {
                if finish_turn(&mut st.queue, &key, me).is_err() {
                    st.roles[role].pc = Pc::Done;
                    return;
                }
                let fresh = st.fresh_token();
                let outcome = {
                    let SlotState { queue, procs, .. } = &mut *st;
                    start_next_parked_with(
                        &self.rules(),
                        queue,
                        me,
                        Some(me.pid),
                        self.cfg.cap,
                        fresh,
                        &ProcTable(procs),
                    )
                };
                match outcome {
                    Ok(StartNext::Acquired { key, token }) => {
                        st.note_installed(token);
                        match st.snapshot(&key) {
                            Some(snapshot) => {
                                st.roles[role].pc = Pc::Spawn {
                                    key,
                                    token,
                                    snapshot,
                                    then: Then::Exit,
                                }
                            }
                            None => {
                                st.violations |= violation::CORE_ERROR;
                                st.roles[role].pc = Pc::Done;
                            }
                        }
                    }
                    Ok(_) => st.roles[role].pc = Pc::Done,
                    Err(_) => {
                        st.violations |= violation::CORE_ERROR;
                        st.roles[role].pc = Pc::Done;
                    }
                }
            }
            Pc::Reconcile => {
                let fresh = st.fresh_token();
                let settled = st.settled_keys();
                let outcome = {
                    let SlotState { queue, procs, .. } = &mut *st;
                    reconcile_step_with(
                        &self.rules(),
                        queue,
                        me,
                        self.cfg.cap,
                        fresh,
                        &ProcTable(procs),
                        &|key: &TurnKey| settled.contains(key),
                    )
                };
                match outcome {
                    Ok(ReconcileStep::Spawn { key, token, .. }) => {
                        st.note_installed(token);
                        match st.snapshot(&key) {
                            Some(snapshot) => {
                                st.roles[role].pc = Pc::Spawn {
                                    key,
                                    token,
                                    snapshot,
                                    then: Then::Reconcile,
                                }
                            }
                            None => {
                                st.violations |= violation::CORE_ERROR;
                                st.roles[role].pc = Pc::Done;
                            }
                        }
                    }
                    Ok(ReconcileStep::Idle) | Ok(ReconcileStep::Saturated) => {
                        st.roles[role].pc = Pc::Done;
                    }
                    Ok(_) => {}
                    Err(_) => {
                        st.violations |= violation::CORE_ERROR;
                        st.roles[role].pc = Pc::Done;
                    }
                }
            }
            Pc::Done => {}
        }
    }
}
