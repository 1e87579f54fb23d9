//! The detached submit section (spec/slots.md, "Submit"): name the task (a generated name from
//! the command and the id the turn gets), number the turn, decide its start with the task's
//! strategy, its dependencies and its schedule, write its first record with the id its row got,
//! end it where the decision ends it (dropped, dependency-failed) and end the waiters it
//! superseded, with their departures. On the part of the queue its task needs
//! ([`steps::submit_reads`], or [`steps::submit_line_reads`] for a `concurrent=N` arrival), again
//! on the part of a name it generated, then on the whole queue when the core says so.

use crate::admission::Strategy;
use crate::records::{first_generated_name, TurnOutcome};
use crate::section::{Commit, Draft, Halt, Need, Section, Step, Unread, View};
use crate::slots::departure::{leave, Leave};
use crate::slots::deps::{submit_after, AfterSubmit, Ended};
use crate::slots::order::HeldBack;
use crate::slots::steps::{
    self, Busy, Handoff, Loaded, Reads, Schedule, SubmitEffect, SubmitInput,
};
use crate::slots::{Liveness, ProcessIdentity, QueueState, SlotToken, TurnKey};
use crate::turns::{claim_turn, create_turn, end_dependency_failed, end_unrun, NewTurn};
use std::collections::BTreeMap;

/// Numbered variants of a generated task name tried when it is taken (only after the queue's id
/// counter started again); then the fallback name.
pub const GENERATED_NAME_TRIES: u32 = 100;

/// A detached submit's input.
#[derive(Clone, Copy, Debug)]
pub struct SubmitSection<'a> {
    /// The task given (`None`: a name generated from the command and the turn's id).
    pub task: Option<&'a str>,
    /// The name a generated task takes when every generated one is taken (a fresh random one).
    pub fallback_task: &'a str,
    /// The task name the section's first read is planned for: the given one, or a generated one
    /// guessed from the store's unlocked hint of the next id.
    pub planned: Option<&'a str>,
    /// Sets the task's strategy (kept with the task) before this turn is decided.
    pub strategy: Option<Strategy>,
    pub new: &'a NewTurn,
    pub schedule: Schedule,
    pub me: ProcessIdentity,
    pub fresh_token: SlotToken,
    pub now_millis: u64,
    pub cap: usize,
}

/// Where a detached submit left its turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// A slot is reserved: spawn its runner.
    Spawn(Handoff),
    /// Every slot is busy: the row is parked.
    Park,
    /// Another live process already starts or runs the turn.
    Pending,
    /// Waits in its task's scope, startable from `ready_at_millis`; a waker at `wake_at_millis`.
    Wait {
        ready_at_millis: u64,
        wake_at_millis: Option<u64>,
    },
    /// Refused by the task's `drop` strategy: its turn `running` is in the queue. The new turn
    /// ended dropped; nothing was enqueued.
    Dropped { running: TurnKey, busy: Busy },
    /// Parked until the turns it waits for (`--after`) have left; a waker at its not-before time.
    Held {
        waiting_on: Vec<TurnKey>,
        wake_at_millis: Option<u64>,
    },
    /// Never run: its `--after-success` dependency `cause` did not succeed. The new turn ended
    /// dependency-failed; nothing was enqueued.
    DependencyFailed { cause: TurnKey },
}

impl Placement {
    /// When a waker must start the row (a debounce deadline, a not-before time).
    pub fn wake_at_millis(&self) -> Option<u64> {
        match self {
            Placement::Wait { wake_at_millis, .. } | Placement::Held { wake_at_millis, .. } => {
                *wake_at_millis
            }
            _ => None,
        }
    }
}

/// What a detached submit decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submitted {
    pub key: TurnKey,
    /// The row's id, the turn's short id; 0 when nothing was enqueued.
    pub queue_id: u64,
    pub placement: Placement,
    /// The task's strategy in force for this turn.
    pub strategy: Strategy,
    /// Waiting turns this one replaced; they ended superseded.
    pub superseded: Vec<TurnKey>,
    /// What holds the new row back although its strategy would start it.
    pub held: Option<HeldBack>,
}

impl Section for SubmitSection<'_> {
    type Effect = Submitted;

    /// `submit` says the turn is queued (or started): a promise.
    fn commit(&self) -> Commit {
        Commit::Promise
    }

    /// A named (or guessed) task whose request sets `concurrent=N` or no strategy reads its line
    /// only as far as its first parked row; otherwise every row of its task; the dependencies'
    /// rows either way.
    fn reads(&self) -> Reads {
        Reads::Part(match (self.planned, self.strategy) {
            (Some(task), Some(Strategy::Concurrent { .. }) | None) => {
                steps::submit_line_reads(task, &self.new.after)
            }
            (task, _) => steps::submit_reads(task, &self.new.after),
        })
    }

    fn step<L: Liveness>(
        &self,
        part: &mut QueueState,
        view: &View<'_, L>,
    ) -> Result<Step<Submitted>, Halt> {
        submit(part, view, *self)
    }
}

/// The name of a new turn's task: the `given` one, else `<program>-<id>` with the id the turn
/// gets, or its first numbered variant that is free, or `fallback`.
pub(super) fn task_name(
    draft: &Draft<'_>,
    given: Option<&str>,
    fallback: &str,
    argv: &[std::ffi::OsString],
    id: u64,
) -> Result<String, Unread> {
    if let Some(task) = given {
        return Ok(task.to_string());
    }
    let first = first_generated_name(argv, id);
    if !draft.task_taken(&first)? {
        return Ok(first);
    }
    let variants: Vec<String> = (2..=GENERATED_NAME_TRIES)
        .map(|n| format!("{first}-{n}"))
        .collect();
    draft.require(&Need {
        tasks: variants.iter().cloned().collect(),
        ..Need::default()
    })?;
    for name in variants {
        if !draft.task_taken(&name)? {
            return Ok(name);
        }
    }
    Ok(fallback.to_string())
}

/// How the new turn's dependencies without a row ended, from their records.
fn ended_dependencies(
    draft: &Draft<'_>,
    state: &QueueState,
    input: &SubmitSection<'_>,
) -> Result<BTreeMap<TurnKey, Ended>, Unread> {
    let ended: Vec<&TurnKey> = input
        .new
        .after
        .iter()
        .map(|d| &d.key)
        .filter(|key| state.row(key).is_none())
        .collect();
    draft.require(&Need {
        turns: ended.iter().map(|k| (*k).clone()).collect(),
        ..Need::default()
    })?;
    let mut outcomes = BTreeMap::new();
    for key in ended {
        let outcome = draft.turn(key)?.and_then(|t| t.outcome);
        outcomes.insert(key.clone(), TurnOutcome::ended(outcome));
    }
    Ok(outcomes)
}

/// The part a submit of `task` must run on when `loaded` does not cover it.
fn wider(loaded: &Loaded, task: &str, input: &SubmitSection<'_>) -> Reads {
    match loaded {
        Loaded::Part { reads, .. } if reads.tasks.contains(task) || reads.lines.contains(task) => {
            Reads::Everything
        }
        _ => Reads::Part(steps::submit_reads(Some(task), &input.new.after)),
    }
}

/// The submit section on `state`.
pub fn submit<L: Liveness>(
    state: &mut QueueState,
    view: &View<'_, L>,
    input: SubmitSection<'_>,
) -> Result<Step<Submitted>, Halt> {
    let now = input.now_millis;
    let mut draft = Draft::new(view.records);
    let task = task_name(
        &draft,
        input.task,
        input.fallback_task,
        &input.new.argv,
        state.id_of_next_enqueue(),
    )?;
    if !steps::submit_covers(view.loaded, &task) {
        return Err(Unread::Queue(wider(view.loaded, &task, &input)).into());
    }
    let loaded_rows: Vec<TurnKey> = match view.loaded {
        Loaded::Whole => Vec::new(),
        Loaded::Part { .. } => state.entries.iter().map(|e| e.key.clone()).collect(),
    };
    let (key, strategy) = claim_turn(&mut draft, &task, input.strategy, now)?;
    if !steps::submit_line_suffices(view.loaded, &task, strategy) {
        let named = steps::submit_reads(Some(&task), &input.new.after);
        return Err(Unread::Queue(Reads::Part(named)).into());
    }
    let ended = ended_dependencies(&draft, state, &input)?;
    let decided = decide(state, view, &input, &key, strategy, &ended)?;
    // A turn that never gets a row may still spend an id (one settled dependency-failed at
    // submit), so that its id is never another turn's.
    let id = match &decided {
        AfterSubmit::DependencyFailed { queue_id, .. } => Some(*queue_id),
        _ => state.row(&key).map(|r| r.queue_id),
    };
    create_turn(&mut draft, key.clone(), input.new.clone(), id, now)?;
    let (placement, superseded, held) = place(&mut draft, &key, decided, now)?;
    end_superseded(state, &mut draft, &superseded, input.me, now)?;
    if !steps::submit_stayed_inside(view.loaded, &loaded_rows, state, &superseded) {
        return Err(Unread::Queue(Reads::Everything).into());
    }
    debug_assert!(
        state.row(&key).is_some()
            || matches!(
                placement,
                Placement::Dropped { .. } | Placement::DependencyFailed { .. }
            ),
        "a submit that enqueued nothing ended its turn"
    );
    debug_assert!(state.row(&key).is_none_or(|r| Some(r.queue_id) == id));
    Ok(draft.finish(Submitted {
        key,
        queue_id: id.unwrap_or(0),
        placement,
        strategy,
        superseded,
        held,
    }))
}

/// The core's decision on the new turn `key`: its strategy, its dependencies (`ended`: how those
/// without a row ended), pause and not-before.
fn decide<L: Liveness>(
    state: &mut QueueState,
    view: &View<'_, L>,
    input: &SubmitSection<'_>,
    key: &TurnKey,
    strategy: Strategy,
    ended: &BTreeMap<TurnKey, Ended>,
) -> Result<AfterSubmit, Halt> {
    Ok(submit_after(
        state,
        SubmitInput {
            key,
            me: input.me,
            fresh_token: input.fresh_token,
            now_millis: input.now_millis,
            cap: input.cap,
            strategy,
            liveness: &view.liveness(),
        },
        &input.new.after,
        ended,
        input.schedule,
    )?)
}

/// Where the core's decision leaves the new turn, its record ended where the decision ends it
/// (dropped, dependency-failed): the placement, the waiters it superseded and what holds it back.
fn place(
    draft: &mut Draft<'_>,
    key: &TurnKey,
    decided: AfterSubmit,
    now: u64,
) -> Result<(Placement, Vec<TurnKey>, Option<HeldBack>), Halt> {
    Ok(match decided {
        AfterSubmit::Submitted(decision) => {
            let placement = match decision.effect {
                SubmitEffect::Spawn(handoff) => Placement::Spawn(handoff),
                SubmitEffect::Park => Placement::Park,
                SubmitEffect::Pending => Placement::Pending,
                SubmitEffect::Wait {
                    ready_at_millis,
                    wake_at_millis,
                } => Placement::Wait {
                    ready_at_millis,
                    wake_at_millis,
                },
                SubmitEffect::Dropped { running, busy } => {
                    end_unrun(draft, key, TurnOutcome::Dropped, now)?;
                    Placement::Dropped { running, busy }
                }
            };
            (placement, decision.superseded, decision.held)
        }
        AfterSubmit::Held {
            waiting_on,
            wake_at_millis,
            ..
        } => (
            Placement::Held {
                waiting_on: waiting_on.into_iter().map(|d| d.key).collect(),
                wake_at_millis,
            },
            Vec::new(),
            None,
        ),
        AfterSubmit::DependencyFailed { cause, .. } => {
            end_dependency_failed(draft, key, &cause, now)?;
            (Placement::DependencyFailed { cause }, Vec::new(), None)
        }
    })
}

/// The waiters the new turn replaced end superseded, and their rows depart.
fn end_superseded(
    state: &mut QueueState,
    draft: &mut Draft<'_>,
    superseded: &[TurnKey],
    me: ProcessIdentity,
    now_millis: u64,
) -> Result<(), Halt> {
    draft.require(&Need {
        turns: superseded.iter().cloned().collect(),
        ..Need::default()
    })?;
    for old in superseded {
        end_unrun(draft, old, TurnOutcome::Superseded, now_millis)?;
        leave(
            state,
            draft,
            Leave {
                key: old,
                me,
                now_millis,
            },
        )?;
    }
    Ok(())
}
