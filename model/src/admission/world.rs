//! The names the model gives the world's things, and what the core's steps observe of them:
//! event identities and tenants, the processes (serves, runners, work leaders, the waker), a
//! queue key's turn, a row as the properties see it, and who is alive ([`Live`]). One place, so
//! every section and property agrees on which pid is whose.

use super::state::{AdmissionState, Row};
use tollgate_core::admission::{EventIdentity, Tenant};
use tollgate_core::slots::{
    Liveness, Observation, ProcessIdentity, QueueState, RowState, TurnKey, WorkRecord,
};

pub(super) fn identity_of(event: u8) -> EventIdentity {
    EventIdentity(format!("ev{event}"))
}

pub(super) fn tenant_of(tenant: u8) -> Tenant {
    Tenant::new("platform", format!("t{tenant}"))
}

/// Serve start `start`'s process.
pub(super) fn serve_identity(start: u8) -> ProcessIdentity {
    ProcessIdentity {
        pid: 100 + u32::from(start),
        start_time_micros: 1,
    }
}

/// The runner of turn `turn` (a turn gets one runner: runners do not die in this model).
pub(super) fn runner_identity(turn: u8) -> ProcessIdentity {
    ProcessIdentity {
        pid: 1000 + u32::from(turn),
        start_time_micros: 1,
    }
}

/// The process group leader of turn `turn`'s work.
pub(super) fn leader_identity(turn: u8) -> ProcessIdentity {
    ProcessIdentity {
        pid: 2000 + u32::from(turn),
        start_time_micros: 1,
    }
}

/// The debounce waker (`tollgate worker wake`), a process of its own.
pub(super) const WAKER: ProcessIdentity = ProcessIdentity {
    pid: 50,
    start_time_micros: 1,
};

/// The model turn index of a queue key (see [`AdmissionModel::key_of`]).
pub(super) fn turn_of(key: &TurnKey) -> u8 {
    u8::try_from(key.turn.saturating_sub(1)).unwrap_or(u8::MAX)
}

pub(super) fn serve_start_of(identity: &ProcessIdentity) -> Option<u8> {
    identity
        .pid
        .checked_sub(100)
        .and_then(|s| u8::try_from(s).ok())
        .filter(|_| identity.pid < 1000)
}

/// The row of `key` as the properties see it.
pub(super) fn row_of(queue: &QueueState, key: &TurnKey) -> Row {
    let Some(entry) = queue.row(key) else {
        return Row::Gone;
    };
    if queue.runners.iter().any(|r| &r.key == key) {
        return Row::Running;
    }
    match (&entry.state, &entry.slot_reservation) {
        (_, Some(r)) if r.child.is_none() => match serve_start_of(&r.reserver) {
            Some(by) => Row::Reserved { by },
            None => Row::Starting,
        },
        (_, Some(_)) => Row::Starting,
        (RowState::Parked | RowState::Waiting { .. }, None) => Row::Waiting,
        (RowState::Dispatching { .. }, None) => Row::Starting,
    }
}

/// Who is alive, as the core's steps ask: the running serve, the runners of turns whose work
/// started and has not ended, and the acting process itself.
pub(super) struct Live {
    live: Vec<ProcessIdentity>,
}

impl Live {
    pub(super) fn of(st: &AdmissionState, acting: &[ProcessIdentity]) -> Self {
        let mut live: Vec<ProcessIdentity> = acting.to_vec();
        if st.serve.is_some() {
            live.push(serve_identity(st.starts));
        }
        live.extend(
            st.turns
                .iter()
                .enumerate()
                .filter(|(_, t)| t.ran && t.end.is_none())
                .map(|(i, _)| runner_identity(i as u8)),
        );
        Live { live }
    }
}

impl Liveness for Live {
    fn observe(&self, identity: &ProcessIdentity) -> Observation {
        if self.live.contains(identity) {
            Observation::Matching
        } else {
            Observation::Gone
        }
    }

    /// A work lives exactly as long as its runner here (runners do not die in this model).
    fn observe_work(&self, work: &WorkRecord) -> Observation {
        self.observe(&work.runner)
    }
}
