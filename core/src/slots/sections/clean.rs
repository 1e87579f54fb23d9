//! `clean` (README, `tollgate clean`; spec/steps.md): which ended turns and emptied tasks go, decided under
//! the queue lock on the whole queue and the records, so that a turn whose row is still in the
//! queue is never removed (its runner has not left yet, even when its record already holds an
//! outcome) and a task goes only with its last turn.

use crate::records::TurnRecord;
use crate::section::{Commit, Draft, Halt, Need, Section, Step, View};
use crate::slots::steps::Reads;
use crate::slots::{Liveness, QueueState, TurnKey};
use std::cmp::Reverse;

/// Which tasks a clean looks at.
#[derive(Clone, Copy, Debug)]
pub enum CleanScope<'a> {
    /// One task the user named: a name without a record is refused.
    Task(&'a str),
    /// These tasks (every task of the home, as listed before the section).
    Tasks(&'a [String]),
}

/// The clean's input.
#[derive(Clone, Copy, Debug)]
pub struct CleanSection<'a> {
    pub scope: CleanScope<'a>,
    /// The newest ended turns kept, across the tasks of the scope.
    pub keep: usize,
    /// Only turns that ended at or before this time go (`--older-than`).
    pub ended_before_millis: Option<u64>,
    /// Decide, and write nothing.
    pub dry_run: bool,
}

/// What a clean removed (or, on a dry run, would remove).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// Newest first.
    pub turns: Vec<TurnKey>,
    pub tasks: Vec<String>,
}

/// The clean's effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CleanEffect {
    /// The task the user named has no record: nothing changed.
    UnknownTask(String),
    Cleaned(Cleaned),
}

impl Section for CleanSection<'_> {
    type Effect = CleanEffect;

    /// What was removed is printed: a promise like a submit's.
    fn commit(&self) -> Commit {
        Commit::Promise
    }

    /// Every row of the tasks may hold a turn back; the rows are read whole.
    fn reads(&self) -> Reads {
        Reads::Everything
    }

    fn step<L: Liveness>(
        &self,
        part: &mut QueueState,
        view: &View<'_, L>,
    ) -> Result<Step<CleanEffect>, Halt> {
        clean(part, view, *self)
    }
}

/// The clean section on the whole queue `state` (left unchanged: clean removes records only).
pub fn clean<L: Liveness>(
    state: &QueueState,
    view: &View<'_, L>,
    input: CleanSection<'_>,
) -> Result<Step<CleanEffect>, Halt> {
    let named;
    let tasks: &[String] = match input.scope {
        CleanScope::Task(name) => {
            named = [name.to_string()];
            &named
        }
        CleanScope::Tasks(tasks) => tasks,
    };
    let mut draft = Draft::new(view.records);
    let mut need = Need::default();
    need.tasks.extend(tasks.iter().cloned());
    need.numbers.extend(tasks.iter().cloned());
    draft.require(&need)?;
    if let CleanScope::Task(name) = input.scope {
        if draft.task(name)?.is_none() {
            return Ok(draft.finish(CleanEffect::UnknownTask(name.to_string())));
        }
    }
    // A turn with a row is neither read nor removed.
    let mut turns = Need::default();
    for task in tasks {
        turns.turns.extend(
            draft
                .numbers(task)?
                .into_iter()
                .map(|n| TurnKey::new(task.clone(), n))
                .filter(|key| state.row(key).is_none()),
        );
    }
    draft.require(&turns)?;
    let removed = removable(view, &turns, input)?;
    let mut cleaned = Cleaned {
        turns: removed,
        tasks: Vec::new(),
    };
    for task in tasks {
        if task_stays(state, &draft, &turns, &cleaned.turns, task)? {
            continue;
        }
        cleaned.tasks.push(task.clone());
    }
    debug_assert!(
        cleaned.turns.iter().all(|k| state.row(k).is_none()),
        "clean removes a turn that has a row"
    );
    if !input.dry_run {
        for key in &cleaned.turns {
            draft.remove_turn(key.clone());
        }
        for task in &cleaned.tasks {
            draft.remove_task(task.clone());
        }
    }
    Ok(draft.finish(CleanEffect::Cleaned(cleaned)))
}

/// The ended turns among `read` that the clean removes: newest first across the tasks (by id;
/// turns from before ids by their submit time), past the `keep` newest, ended before the cutoff.
fn removable<L: Liveness>(
    view: &View<'_, L>,
    read: &Need,
    input: CleanSection<'_>,
) -> Result<Vec<TurnKey>, Halt> {
    let mut ended: Vec<&TurnRecord> = Vec::new();
    for key in &read.turns {
        if let Some(record) = view.records.turn(key)?.filter(|r| r.is_settled()) {
            ended.push(record);
        }
    }
    ended.sort_by_key(|t| Reverse((t.id.unwrap_or(0), t.submitted_at_millis, t.key.clone())));
    Ok(ended
        .into_iter()
        .skip(input.keep)
        .filter(|t| {
            input
                .ended_before_millis
                .is_none_or(|c| t.ended_at_millis.is_some_and(|e| e <= c))
        })
        .map(|t| t.key.clone())
        .collect())
}

/// Whether `task` keeps its record after the clean: it still has a turn (a record not removed, or
/// a row), or it holds a setting (a pause, a strategy other than the default).
fn task_stays(
    state: &QueueState,
    draft: &Draft<'_>,
    read: &Need,
    removed: &[TurnKey],
    task: &str,
) -> Result<bool, Halt> {
    if state.entries.iter().any(|e| e.key.task == task) || state.paused.tasks.contains(task) {
        return Ok(true);
    }
    if draft
        .task(task)?
        .is_some_and(|t| t.strategy != Default::default())
    {
        return Ok(true);
    }
    for key in read.turns.iter().filter(|k| k.task == task) {
        if draft.turn(key)?.is_some() && !removed.contains(key) {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::Strategy;
    use crate::records::{TaskRecord, TurnOutcome, TASK_FORMAT_VERSION};
    use crate::section::{decide, Records, TurnSlot, Writes};
    use crate::slots::steps::Loaded;
    use crate::slots::{enqueue, Observation, ProcessIdentity, WorkRecord};
    use crate::turns::{create_turn, NewTurn};

    struct NoneAlive;

    impl Liveness for NoneAlive {
        fn observe(&self, _: &ProcessIdentity) -> Observation {
            Observation::Gone
        }

        fn observe_work(&self, _: &WorkRecord) -> Observation {
            Observation::Gone
        }
    }

    fn me() -> ProcessIdentity {
        ProcessIdentity {
            pid: 7,
            start_time_micros: 7,
        }
    }

    /// Records of `turns` (`(task, turn, id, ended)`) and of their tasks, read whole.
    fn records(turns: &[(&str, u32, u64, bool)], strategies: &[(&str, Strategy)]) -> Records {
        let mut records = Records::default();
        let mut tasks: Vec<&str> = turns.iter().map(|t| t.0).collect();
        tasks.dedup();
        for task in tasks {
            let strategy = strategies
                .iter()
                .find(|(t, _)| *t == task)
                .map_or_else(Strategy::default, |(_, s)| *s);
            let numbers: Vec<u32> = turns.iter().filter(|t| t.0 == task).map(|t| t.1).collect();
            records.put_task(
                task.to_string(),
                Some(TaskRecord {
                    version: TASK_FORMAT_VERSION,
                    name: task.to_string(),
                    created_at_millis: 0,
                    next_turn: numbers.iter().max().map_or(1, |n| n + 1),
                    strategy,
                }),
                true,
            );
            records.put_numbers(task.to_string(), numbers);
        }
        for &(task, turn, id, ended) in turns {
            let key = TurnKey::new(task, turn);
            let empty = Records::default();
            let mut draft = Draft::new(&empty);
            let mut record = create_turn(&mut draft, key.clone(), NewTurn::default(), Some(id), 0)
                .expect("a record");
            if ended {
                record.outcome = Some(TurnOutcome::Completed);
                record.ended_at_millis = Some(id * 1_000);
            }
            records.put_turn(key, TurnSlot::Record(Box::new(record)));
        }
        records
    }

    /// Decides the section the way the section runner does ([`decide`]), the records it asks
    /// for read from `all`.
    fn run(state: &QueueState, all: &Records, input: CleanSection<'_>) -> (CleanEffect, Writes) {
        let read = |need: &Need, read: &mut Records| -> Result<(), ()> {
            for task in need.tasks.iter().chain(&need.numbers) {
                let record = all.task(task).map_err(|_| ())?.cloned();
                read.put_task(task.clone(), record, true);
                let numbers = all.numbers(task).map_err(|_| ())?.to_vec();
                read.put_numbers(task.clone(), numbers);
            }
            for key in &need.turns {
                let slot = all.slot(key).cloned().unwrap_or(TurnSlot::Free);
                read.put_turn(key.clone(), slot);
            }
            Ok(())
        };
        match decide(&input, state, &Loaded::Whole, &NoneAlive, None, read) {
            Ok((after, step)) => {
                assert_eq!(&after, state, "clean changes no row");
                (step.effect, step.writes)
            }
            Err(other) => panic!("clean undecided: {other:?}"),
        }
    }

    fn everything(tasks: &[String], keep: usize) -> CleanSection<'_> {
        CleanSection {
            scope: CleanScope::Tasks(tasks),
            keep,
            ended_before_millis: None,
            dry_run: false,
        }
    }

    fn cleaned(effect: CleanEffect) -> Cleaned {
        match effect {
            CleanEffect::Cleaned(cleaned) => cleaned,
            CleanEffect::UnknownTask(task) => panic!("unknown task {task}"),
        }
    }

    #[test]
    fn a_turn_with_a_row_is_never_removed_even_with_an_outcome() {
        // Turn a:2 has its outcome recorded but its runner has not left the queue yet.
        let all = records(&[("a", 1, 1, true), ("a", 2, 2, true)], &[]);
        let mut state = QueueState::default();
        enqueue(&mut state, &TurnKey::new("a", 2), me(), 0).expect("enqueue");
        let tasks = vec!["a".to_string()];
        let (effect, writes) = run(&state, &all, everything(&tasks, 0));
        let cleaned = cleaned(effect);
        assert_eq!(cleaned.turns, [TurnKey::new("a", 1)]);
        assert!(cleaned.tasks.is_empty(), "a task with a row stays");
        assert_eq!(writes.removed_turns.len(), 1);
        assert!(writes.removed_tasks.is_empty());
    }

    #[test]
    fn keep_counts_across_tasks_newest_id_first_and_emptied_tasks_go() {
        let all = records(
            &[("a", 1, 1, true), ("b", 1, 2, true), ("c", 1, 3, true)],
            &[],
        );
        let tasks = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let cleaned = cleaned(run(&QueueState::default(), &all, everything(&tasks, 1)).0);
        assert_eq!(cleaned.turns, [TurnKey::new("b", 1), TurnKey::new("a", 1)]);
        assert_eq!(cleaned.tasks, ["a", "b"], "c keeps its newest turn");
    }

    #[test]
    fn a_task_with_a_setting_or_an_unended_turn_stays() {
        let all = records(
            &[
                ("drop", 1, 1, true),
                ("paused", 1, 2, true),
                ("open", 1, 3, false),
            ],
            &[("drop", Strategy::Drop)],
        );
        let mut state = QueueState::default();
        state.paused.tasks.insert("paused".to_string());
        let tasks = vec!["drop".into(), "paused".into(), "open".into()];
        let cleaned = cleaned(run(&state, &all, everything(&tasks, 0)).0);
        assert_eq!(
            cleaned.turns,
            [TurnKey::new("paused", 1), TurnKey::new("drop", 1)]
        );
        assert!(cleaned.tasks.is_empty(), "{:?}", cleaned.tasks);
    }

    #[test]
    fn older_than_and_a_dry_run() {
        let all = records(&[("a", 1, 1, true), ("a", 2, 5, true)], &[]);
        let tasks = vec!["a".to_string()];
        let input = CleanSection {
            ended_before_millis: Some(2_000),
            dry_run: true,
            ..everything(&tasks, 0)
        };
        let (effect, writes) = run(&QueueState::default(), &all, input);
        assert_eq!(cleaned(effect).turns, [TurnKey::new("a", 1)]);
        assert!(writes.is_empty(), "a dry run writes nothing: {writes:?}");
    }

    #[test]
    fn a_named_task_without_a_record_is_refused_and_nothing_is_written() {
        let mut all = records(&[("a", 1, 1, true)], &[]);
        all.put_task("ghost".to_string(), None, false);
        all.put_numbers("ghost".to_string(), Vec::new());
        let input = CleanSection {
            scope: CleanScope::Task("ghost"),
            keep: 0,
            ended_before_millis: None,
            dry_run: false,
        };
        let (effect, writes) = run(&QueueState::default(), &all, input);
        assert_eq!(effect, CleanEffect::UnknownTask("ghost".to_string()));
        assert!(writes.is_empty());
    }
}
