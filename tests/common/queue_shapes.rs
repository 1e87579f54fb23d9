//! Queue shapes shared by the store tests (SQLite and PostgreSQL round-trip the same document).

use tollgate::protocol::slots::{
    AfterRule, Dependency, PauseSet, ProcessIdentity, QueueEntry, QueueState, RowState,
    RunnerRecord, RunnerSlotReservation, SlotToken, TurnKey, WorkId, WorkRecord,
};

pub fn id(pid: u32, start_time_micros: u64) -> ProcessIdentity {
    ProcessIdentity {
        pid,
        start_time_micros,
    }
}

/// The queue every store test round-trips: every row state, reservations bound and unbound, runners and works with and
/// without a leader, and values at the ends of their ranges.
pub fn every_shape() -> QueueState {
    let entry = |queue_id, task: &str, state, slot_reservation, ready_at_millis| QueueEntry {
        queue_id,
        key: TurnKey::new(task, 7),
        enqueued_at_millis: 1_700_000_000_000u64.saturating_add(queue_id),
        state,
        slot_reservation,
        ready_at_millis,
        // Odd ids carry a cancel request, so both values round-trip.
        cancel_requested: queue_id % 2 == 1,
        // Priorities at both ends of i32 and in between (migration 2's column).
        priority: match queue_id % 3 {
            0 => i32::MIN,
            1 => i32::MAX,
            _ => -7,
        },
        after: Vec::new(),
    };
    QueueState {
        version: 1,
        next_queue_id: u64::MAX,
        entries: vec![
            entry(
                3,
                "waiting",
                RowState::Waiting {
                    enqueue_owner: id(10, 1),
                    owner: id(11, 2),
                },
                None,
                0,
            ),
            entry(
                5,
                "dispatching",
                RowState::Dispatching {
                    dispatch_owner: id(12, u64::MAX),
                },
                Some(RunnerSlotReservation {
                    reserver: id(12, u64::MAX),
                    token: SlotToken::generate(),
                    child: Some(id(13, 4)),
                }),
                0,
            ),
            entry(
                9,
                "reserved",
                RowState::Dispatching {
                    dispatch_owner: id(14, 5),
                },
                Some(RunnerSlotReservation::new(id(14, 5), SlotToken::generate())),
                u64::MAX - 1,
            ),
            QueueEntry {
                // Dependencies of both rules, in the order given (schema version 3).
                after: vec![
                    Dependency {
                        key: TurnKey::new("waiting", 7),
                        rule: AfterRule::Succeeded,
                    },
                    Dependency {
                        key: TurnKey::new("zz-first", u32::MAX),
                        rule: AfterRule::Ended,
                    },
                ],
                ..entry(u64::MAX - 1, "parked", RowState::Parked, None, 42)
            },
        ],
        runners: vec![
            RunnerRecord {
                key: TurnKey::new("zz-last-first", 1),
                identity: id(20, 6),
                attached: true,
            },
            RunnerRecord {
                key: TurnKey::new("dispatching", 7),
                identity: id(13, 4),
                attached: false,
            },
        ],
        works: vec![
            WorkRecord {
                key: TurnKey::new("dispatching", 7),
                id: WorkId::from_token(SlotToken::generate()),
                runner: id(13, 4),
                leader: Some(id(30, 7)),
                cgroup: Some("/sys/fs/cgroup/unified/tollgate-13-work-x".to_string()),
            },
            WorkRecord {
                key: TurnKey::new("dispatching", 7),
                id: WorkId::from_token(SlotToken::generate()),
                runner: id(13, 4),
                leader: None,
                cgroup: None,
            },
        ],
        // The pause set (migration 2): the home and two tasks.
        paused: PauseSet {
            home: true,
            tasks: ["parked".to_string(), "zz-last-first".to_string()]
                .into_iter()
                .collect(),
        },
    }
}
