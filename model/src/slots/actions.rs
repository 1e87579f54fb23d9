//! What can happen next in a state: the stateright `Model` (actions offered, properties listed).

use super::properties::*;
use super::state::*;
use super::SlotModel;
use stateright::{Model, Property};
use tollgate_core::admission::Strategy;

/// One step of the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SlotAction {
    /// The role's next step; for a role holding a slot, a spawn that succeeds on a fresh pid.
    Step { role: u8 },
    /// The spawn fails; the reserver releases its slot.
    SpawnFails { role: u8 },
    /// The child starts but the reserver cannot record its identity and releases as on a failure.
    SpawnUnrecorded { role: u8 },
    /// The spawn succeeds on a reused pid.
    SpawnOnReusedPid { role: u8, pid: u32, ambiguous: bool },
    /// A model process dies (all its roles stop).
    Crash { proc: u8 },
    /// An unrelated process takes a dead pid.
    ReusePid { pid: u32, ambiguous: bool },
    /// An unrelated process exits.
    UnrelatedExits { proc: u8 },
    /// A `tollgate reconcile` process starts.
    StartReconciler,
    /// A runner whose command runs starts a reconcile pass on the side.
    RunnerReconciles { role: u8 },
    /// A `tollgate cancel job` process starts.
    StartCanceller,
    /// The role's command cannot start (`execute_turn` returns unstartable before any process
    /// exists): no work runs, no leader is recorded; the result is written and the runner leaves.
    CommandUnstartable { role: u8 },
    /// The role's command starts but its leader's identity cannot be read: the work runs and no
    /// leader is recorded (`work_started` is not called).
    LeaderUnread { role: u8 },
}

/// Every example (`sometimes` property) of the slot model and the event bit it waits for.
const EXAMPLES: [(&str, u32); 12] = [
    (names::ACQUIRED, event::ACQUIRED),
    (names::SATURATED, event::SATURATED),
    (names::WAIT, event::WAIT),
    (names::SUPERSEDED, event::SUPERSEDED),
    (names::DROPPED, event::DROPPED),
    (names::KILL, event::KILL),
    (names::REPLACED, event::REPLACED),
    (names::REQUEUED, event::REQUEUED),
    (names::CRASH_BETWEEN, event::CRASH_BETWEEN_PUBLISHES),
    (names::ATTACHED_RUN, event::ATTACHED_RUN),
    (names::ATTACHED_WAIT, event::ATTACHED_WAIT),
    (names::CANCEL_REMOVED, event::CANCEL_REMOVED),
];

/// The event bit the example named `name` waits for.
pub fn example_event(name: &str) -> Option<u32> {
    EXAMPLES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, bit)| *bit)
}

/// The example `$name`: a state whose path produced its event (the bit [`example_event`] gives,
/// so the property and [`SlotModel::example_generated`] read one table).
macro_rules! event_property {
    ($name:expr) => {
        Property::<SlotModel>::sometimes($name, |_, st: &SlotState| {
            example_event($name).is_some_and(|bit| st.events & bit != 0)
        })
    };
}

impl Model for SlotModel {
    type State = SlotState;
    type Action = SlotAction;

    fn init_states(&self) -> Vec<SlotState> {
        vec![self.initial_state()]
    }

    fn actions(&self, st: &SlotState, actions: &mut Vec<SlotAction>) {
        // A state that already breaks a safety property ends its path, so the trail the checker
        // reports stops at the first violation instead of running on past it.
        if st.violations != 0 || !s1_cap(self, st) || !s2_one_work_per_turn(self, st) {
            return;
        }
        let free_pids = st.free_pids();
        for (index, role) in st.roles.iter().enumerate() {
            if !st.role_live(index) {
                continue;
            }
            let index = index as u8;
            actions.push(SlotAction::Step { role: index });
            if self.cfg.command_faults && matches!(role.pc, Pc::StartWork { .. }) {
                actions.push(SlotAction::CommandUnstartable { role: index });
                actions.push(SlotAction::LeaderUnread { role: index });
            }
            if matches!(role.pc, Pc::Spawn { .. }) {
                if st.crashes_left > 0 {
                    actions.push(SlotAction::SpawnFails { role: index });
                    actions.push(SlotAction::SpawnUnrecorded { role: index });
                }
                if self.cfg.children_reuse_pids && st.reuses_left > 0 {
                    for &pid in &free_pids {
                        for ambiguous in [false, true] {
                            actions.push(SlotAction::SpawnOnReusedPid {
                                role: index,
                                pid,
                                ambiguous,
                            });
                        }
                    }
                }
            }
            if self.cfg.runner_reconciles
                && st.reconciles_left > 0
                && matches!(role.pc, Pc::Running { .. })
                && !st
                    .roles
                    .iter()
                    .any(|r| r.proc == role.proc && r.pc == Pc::Reconcile)
                && !st.reconciler_running()
            {
                actions.push(SlotAction::RunnerReconciles { role: index });
            }
        }
        if st.crashes_left > 0 {
            for (index, p) in st.procs.iter().enumerate() {
                // A detached submitter about to submit dies inside the section, after writing the
                // turn's record (an orphan for reconcile). An attached one dying before its
                // section only means fewer submissions, which smaller configurations cover.
                let holds_something = st.roles.iter().any(|r| {
                    r.proc as usize == index && !matches!(r.pc, Pc::Done | Pc::Attach { .. })
                });
                if p.alive && p.kind != ProcKind::Unrelated && holds_something {
                    actions.push(SlotAction::Crash { proc: index as u8 });
                }
            }
        }
        let others_active = st.others_active();
        // An unrelated process on a dead pid only matters when observations of the old identity
        // come back ambiguous: observed `Gone`, it is indistinguishable from no reuse at all.
        if others_active && st.reuses_left > 0 {
            for &pid in &free_pids {
                actions.push(SlotAction::ReusePid {
                    pid,
                    ambiguous: true,
                });
            }
        }
        for (index, p) in st.procs.iter().enumerate() {
            if p.alive && p.kind == ProcKind::Unrelated {
                actions.push(SlotAction::UnrelatedExits { proc: index as u8 });
            }
        }
        let side_reconcile = st
            .roles
            .iter()
            .any(|r| r.pc == Pc::Reconcile && st.procs[r.proc as usize].alive);
        if !st.reconciler_running() && !side_reconcile {
            let unrelated_alive = st
                .procs
                .iter()
                .any(|p| p.alive && p.kind == ProcKind::Unrelated);
            let budgeted = others_active && st.reconciles_left > 0;
            let final_pass = !others_active && !unrelated_alive && !st.reconciled_clean;
            if budgeted || final_pass {
                actions.push(SlotAction::StartReconciler);
            }
        }
        let canceller_running = st
            .procs
            .iter()
            .any(|p| p.alive && p.kind == ProcKind::Canceller);
        if others_active && st.cancels_left > 0 && !canceller_running {
            actions.push(SlotAction::StartCanceller);
        }
    }

    fn next_state(&self, last: &SlotState, action: SlotAction) -> Option<SlotState> {
        let next = self.apply(last, &action);
        self.events_generated
            .fetch_or(next.events, std::sync::atomic::Ordering::Relaxed);
        Some(next)
    }

    fn format_action(&self, action: &SlotAction) -> String {
        format!("{action:?}")
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let cfg = &self.cfg;
        let mut props = vec![
            Property::always(names::S1, s1_cap),
            Property::always(names::S2, s2_one_work_per_turn),
            Property::always(names::S3, s3_retired_token),
            Property::always(names::S4, s4_bound_child),
            Property::always(names::S5, s5_crash_between_publishes),
            Property::always(names::S6, s6_no_parked_with_free_slot),
            Property::always(names::S7, s7_fifo),
            Property::always(names::S8, s8_tokens_fresh),
            Property::always(names::S9, s9_every_turn_ends),
            Property::always(names::S10, s10_strategies),
            Property::always(names::S11, s11_ended_never_runs),
            Property::always(names::S12, s12_cancelled_never_completed),
            Property::always(names::S13, s13_cancel_signals_only_executors),
            Property::always(names::CORE, core_accepts_shell_calls),
        ];
        // The examples each configuration must reach: those its shape makes possible.
        // Under `debounce` a submit never starts its turn (the quiet period must pass first).
        let starts = cfg
            .tasks
            .iter()
            .any(|s| !matches!(s, Strategy::Debounce { .. }));
        if cfg.submitters > 0 && starts {
            props.push(event_property!(names::ACQUIRED));
        }
        let submissions = cfg.submitters * cfg.turns as usize;
        // The cap parks a turn only where a task lets more turns run than there are slots.
        let beyond_cap = cfg.tasks.iter().any(|s| s.max_running() > cfg.cap);
        if beyond_cap && submissions > cfg.cap {
            props.push(event_property!(names::SATURATED));
        }
        let waits = |s: &Strategy| match s {
            Strategy::Drop => false,
            Strategy::Queue | Strategy::Debounce { .. } => true,
            Strategy::Concurrent { max } => (*max as usize) < submissions,
        };
        if cfg.tasks.iter().any(waits) && submissions > 1 {
            props.push(event_property!(names::WAIT));
        }
        let one_waiter = |s: &Strategy| matches!(s, Strategy::Queue | Strategy::Debounce { .. });
        if cfg.has_strategy(one_waiter) && cfg.submitters * cfg.turns as usize > 2 {
            props.push(event_property!(names::SUPERSEDED));
        }
        if cfg.has_strategy(|s| matches!(s, Strategy::Drop)) {
            props.push(event_property!(names::DROPPED));
        }
        if cfg.crash_budget > 0 {
            props.push(event_property!(names::KILL));
            props.push(event_property!(names::REPLACED));
            props.push(event_property!(names::REQUEUED));
            props.push(event_property!(names::CRASH_BETWEEN));
        }
        if cfg.attached > 0 {
            props.push(event_property!(names::ATTACHED_RUN));
        }
        let limited = cfg
            .tasks
            .iter()
            .any(|s| *s != Strategy::Drop && s.max_running() == 1);
        if cfg.attached > 0 && limited {
            props.push(event_property!(names::ATTACHED_WAIT));
        }
        if cfg.cancel_budget > 0 {
            props.push(event_property!(names::CANCEL_REMOVED));
        }
        props
    }
}
