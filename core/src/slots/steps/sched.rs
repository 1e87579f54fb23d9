//! The scheduling steps (spec/slots.md, "Scheduling"): a submit's [`Schedule`] and the resume
//! section, which lifts a pause and starts what may start now, up to the free slots.

use super::{Handoff, HeldBack};
use crate::admission::Strategy;
use crate::scopes::start_filter;
use crate::slots::order::{unpause, PauseScope};
use crate::slots::reserve::{start_next_parked_general, StartNext};
use crate::slots::{held_back, SlotToken};
use crate::slots::{Liveness, ProcessIdentity, ProductionRules, QueueState, RowState, SlotError};
use std::collections::BTreeMap;
#[cfg(test)]
use std::collections::BTreeSet;

/// When and in which order a new turn may start: `submit --priority`, `--delay`/`--at`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Schedule {
    /// Among parked rows that may start, the highest priority starts first (0 by default).
    pub priority: i32,
    /// The row may not start before this time (0: at once). Stored as the row's
    /// `ready_at_millis`, which a debounce deadline also uses: the later of the two holds.
    pub not_before_millis: u64,
}

/// What a resume section knows.
#[derive(Clone, Copy, Debug)]
pub struct ResumeInput<'a, L: Liveness> {
    pub scope: PauseScope<'a>,
    pub me: ProcessIdentity,
    /// One fresh token per slot the section may reserve (the shell passes `workers` of them):
    /// each started row gets its own.
    pub fresh_tokens: &'a [SlotToken],
    pub now_millis: u64,
    pub cap: usize,
    /// The strategies of the tasks with parked rows (see `strategies_needed`).
    pub strategies: &'a BTreeMap<String, Strategy>,
    pub liveness: &'a L,
}

/// What the shell does after a resume.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResumeEffect {
    /// Whether a pause was lifted (resuming what was not paused changes nothing).
    pub changed: bool,
    /// Rows reserved for runners, highest priority first: spawn each and hand it off.
    pub spawn: Vec<Handoff>,
    /// The earliest not-before time of a parked row nothing else holds back: the shell starts a
    /// waker for it (a row submitted while paused got none).
    pub wake_at_millis: Option<u64>,
}

/// The resume section: lift the pause of `scope`, then start parked rows in scheduling order
/// (the same start-next as a finishing runner's, [`start_next_parked_general`]) while slots are
/// free and tokens last. On an `Err` the state is as it was.
pub fn resume<L: Liveness>(
    state: &mut QueueState,
    input: ResumeInput<'_, L>,
) -> Result<ResumeEffect, SlotError> {
    let before = state.clone();
    let result = resume_inner(state, input);
    if result.is_err() {
        *state = before;
    }
    result
}

fn resume_inner<L: Liveness>(
    state: &mut QueueState,
    input: ResumeInput<'_, L>,
) -> Result<ResumeEffect, SlotError> {
    let changed = unpause(state, input.scope);
    let filter = start_filter(input.strategies, input.now_millis);
    let mut spawn = Vec::new();
    for &token in input.fresh_tokens {
        match start_next_parked_general(
            &ProductionRules,
            state,
            input.me,
            None,
            input.cap,
            token,
            input.liveness,
            &filter,
        )? {
            StartNext::Acquired { key, token } => {
                spawn.push(Handoff::reserved(state, &key, token, input.me)?);
            }
            StartNext::Saturated | StartNext::NoneParked => break,
        }
    }
    let wake_at_millis = state
        .entries
        .iter()
        .filter(|e| matches!(e.state, RowState::Parked))
        .filter_map(
            |e| match held_back(state, &e.key.task, e.ready_at_millis, input.now_millis) {
                Some(HeldBack::NotBefore { ready_at_millis }) => Some(ready_at_millis),
                _ => None,
            },
        )
        .min();
    Ok(ResumeEffect {
        changed,
        spawn,
        wake_at_millis,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{submit_scheduled, SubmitEffect, SubmitInput};
    use super::*;
    use crate::slots::order::pause;
    use crate::slots::{Observation, TurnKey};
    use uuid::Uuid;

    fn live(_: &ProcessIdentity) -> Observation {
        Observation::Matching
    }

    const ME: ProcessIdentity = ProcessIdentity {
        pid: 7,
        start_time_micros: 70,
    };

    fn token(n: u128) -> SlotToken {
        SlotToken::new(Uuid::from_u128(0x7000_8000_0000_0000_0000 | n)).unwrap()
    }

    fn submit_at(
        state: &mut QueueState,
        key: &TurnKey,
        cap: usize,
        schedule: Schedule,
    ) -> super::super::SubmitDecision {
        submit_scheduled(
            state,
            SubmitInput {
                key,
                me: ME,
                fresh_token: token(u128::from(key.turn) + 100 * key.task.len() as u128),
                now_millis: 1_000,
                cap,
                strategy: Strategy::Concurrent { max: 10 },
                liveness: &live,
            },
            schedule,
        )
        .unwrap()
    }

    fn resume_all(state: &mut QueueState, cap: usize, now_millis: u64) -> ResumeEffect {
        let tokens: Vec<SlotToken> = (900..900 + cap as u128).map(token).collect();
        let strategies: BTreeMap<String, Strategy> = state
            .entries
            .iter()
            .map(|e| (e.key.task.clone(), Strategy::Concurrent { max: 10 }))
            .collect();
        resume(
            state,
            ResumeInput {
                scope: PauseScope::Home,
                me: ME,
                fresh_tokens: &tokens,
                now_millis,
                cap,
                strategies: &strategies,
                liveness: &live,
            },
        )
        .unwrap()
    }

    fn key(turn: u32) -> TurnKey {
        TurnKey::new("job", turn)
    }

    #[test]
    fn q1_a_paused_submit_is_parked_without_a_waker_and_resume_starts_it() {
        let mut state = QueueState::default();
        pause(&mut state, PauseScope::Home).unwrap();
        let decision = submit_at(&mut state, &key(1), 4, Schedule::default());
        assert_eq!(decision.held, Some(HeldBack::Paused));
        assert_eq!(
            decision.effect,
            SubmitEffect::Wait {
                ready_at_millis: 0,
                wake_at_millis: None
            }
        );
        assert!(matches!(state.entries[0].state, RowState::Parked));
        let effect = resume_all(&mut state, 4, 1_000);
        assert!(effect.changed);
        let started: Vec<&TurnKey> = effect.spawn.iter().map(|h| h.key()).collect();
        assert_eq!(started, vec![&key(1)]);
        assert!(state.paused.is_empty());
    }

    #[test]
    fn q3_resume_starts_the_highest_priorities_up_to_the_free_slots() {
        let mut state = QueueState::default();
        pause(&mut state, PauseScope::Home).unwrap();
        for (turn, priority) in [(1, 0), (2, 5), (3, -1), (4, 5)] {
            let schedule = Schedule {
                priority,
                not_before_millis: 0,
            };
            submit_at(&mut state, &key(turn), 2, schedule);
        }
        let effect = resume_all(&mut state, 2, 1_000);
        let started: Vec<u32> = effect.spawn.iter().map(|h| h.key().turn).collect();
        assert_eq!(
            started,
            vec![2, 4],
            "priority 5 first, FIFO among them, two slots"
        );
        let tokens: BTreeSet<SlotToken> = effect.spawn.iter().map(|h| h.token()).collect();
        assert_eq!(tokens.len(), 2, "each start has its own token");
    }

    #[test]
    fn q2_a_delayed_submit_waits_with_a_waker_and_starts_only_when_due() {
        let mut state = QueueState::default();
        let schedule = Schedule {
            priority: 0,
            not_before_millis: 5_000,
        };
        let decision = submit_at(&mut state, &key(1), 4, schedule);
        assert_eq!(
            decision.effect,
            SubmitEffect::Wait {
                ready_at_millis: 5_000,
                wake_at_millis: Some(5_000)
            }
        );
        assert_eq!(
            decision.held,
            Some(HeldBack::NotBefore {
                ready_at_millis: 5_000
            })
        );
        let early = resume_all(&mut state, 4, 4_999);
        assert!(early.spawn.is_empty());
        assert_eq!(early.wake_at_millis, Some(5_000));
        let due = resume_all(&mut state, 4, 5_000);
        assert_eq!(due.spawn.len(), 1);
        assert_eq!(due.wake_at_millis, None);
    }

    /// A pause holds a delayed row without a waker (it would wake to a pause); resume spawns the
    /// waker for the time still ahead.
    #[test]
    fn q1_a_paused_delayed_submit_gets_its_waker_only_at_resume() {
        let mut state = QueueState::default();
        pause(&mut state, PauseScope::Home).unwrap();
        let schedule = Schedule {
            priority: 0,
            not_before_millis: 5_000,
        };
        let decision = submit_at(&mut state, &key(1), 4, schedule);
        assert_eq!(decision.held, Some(HeldBack::Paused));
        assert_eq!(
            decision.effect,
            SubmitEffect::Wait {
                ready_at_millis: 5_000,
                wake_at_millis: None
            }
        );
        let resumed = resume_all(&mut state, 4, 1_000);
        assert!(resumed.spawn.is_empty(), "not due yet");
        assert_eq!(resumed.wake_at_millis, Some(5_000));
    }

    #[test]
    fn a_paused_task_holds_only_its_rows() {
        let mut state = QueueState::default();
        pause(&mut state, PauseScope::Task("job")).unwrap();
        let held = submit_at(&mut state, &key(1), 4, Schedule::default());
        assert_eq!(held.held, Some(HeldBack::Paused));
        let other = submit_at(
            &mut state,
            &TurnKey::new("other", 1),
            4,
            Schedule::default(),
        );
        assert!(matches!(other.effect, SubmitEffect::Spawn(_)));
        assert_eq!(other.held, None);
    }
}
