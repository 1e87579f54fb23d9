//! The section runner's write groups (spec/steps.md, "serve's group commit: one section with write
//! groups"), on a real SQLite home: a group the store refuses rolls the whole transaction back and
//! the section runs again told which group failed, so the other groups commit and nothing of the
//! refused one is kept; a section that cannot run without the group fails whole, writing nothing.

mod common;

use common::sections::one_slot;
use std::collections::BTreeMap;
use tollgate::process::ProcLiveness;
use tollgate::protocol::section::{Commit, Draft, Halt, Records, Section, Step, View, Writes};
use tollgate::protocol::slots::steps::{QueueReads, Reads};
use tollgate::protocol::slots::{Liveness, QueueState, TurnKey};
use tollgate::protocol::turns::NewTurn;
use tollgate::runtime::Runtime;

/// A section whose step writes one new turn record per key, each key its own write group, and
/// answers which groups it was told failed. `reruns`: whether it may run again without a group.
#[derive(Clone)]
struct NewTurns {
    keys: Vec<TurnKey>,
    failed: BTreeMap<usize, String>,
    reruns: bool,
}

impl Section for NewTurns {
    type Effect = BTreeMap<usize, String>;

    fn commit(&self) -> Commit {
        Commit::Internal
    }

    fn reads(&self) -> Reads {
        Reads::Part(QueueReads::default())
    }

    fn step<L: Liveness>(
        &self,
        _part: &mut QueueState,
        _view: &View<'_, L>,
    ) -> Result<Step<Self::Effect>, Halt> {
        let empty = Records::default();
        let groups = self
            .keys
            .iter()
            .enumerate()
            .map(|(index, key)| {
                if self.failed.contains_key(&index) {
                    return Writes::default();
                }
                let mut draft = Draft::new(&empty);
                let new = NewTurn {
                    argv: vec!["true".into()],
                    ..NewTurn::default()
                };
                let record = tollgate::protocol::turns::create_turn(
                    &mut draft,
                    key.clone(),
                    new,
                    Some(u64::from(key.turn)),
                    0,
                )
                .expect("a valid record");
                draft.write_turn(record, true);
                draft.into_writes()
            })
            .collect();
        Ok(Step {
            writes: Writes {
                groups,
                ..Writes::default()
            },
            effect: self.failed.clone(),
        })
    }

    fn without_group(&self, group: usize, error: String) -> Option<Self> {
        if !self.reruns || self.failed.contains_key(&group) {
            return None;
        }
        let mut next = self.clone();
        next.failed.insert(group, error);
        Some(next)
    }
}

fn has_record(rt: &Runtime<ProcLiveness, tollgate::queue::HomeStore>, key: &TurnKey) -> bool {
    tollgate::tasks::load_turn(&rt.home, key)
        .expect("readable")
        .is_some()
}

#[test]
fn a_refused_group_is_rolled_back_alone_and_the_others_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = one_slot(dir.path());
    let taken = TurnKey::new("t", 1);
    let fresh = TurnKey::new("u", 1);
    let first = NewTurns {
        keys: vec![taken.clone()],
        failed: BTreeMap::new(),
        reruns: true,
    };
    let told = tollgate::section::run(&rt, &first).expect("the first record");
    assert!(told.is_empty());
    assert!(has_record(&rt, &taken));

    // Group 1 creates a turn over the record just written: the store refuses it, after group 0
    // was applied in the same transaction.
    let later = TurnKey::new("v", 1);
    let three = NewTurns {
        keys: vec![fresh.clone(), taken.clone(), later.clone()],
        failed: BTreeMap::new(),
        reruns: true,
    };
    let told = tollgate::section::run(&rt, &three).expect("the other groups commit");
    assert_eq!(told.keys().copied().collect::<Vec<_>>(), vec![1]);
    assert!(
        told[&1].contains("tasks/t/turns/1")
            || told[&1].contains("t/1")
            || told[&1].contains("turn 1"),
        "the refusal names the turn: {told:?}"
    );
    assert!(has_record(&rt, &fresh), "group 0 committed");
    assert!(has_record(&rt, &later), "group 2 committed");
}

#[test]
fn a_refused_group_of_a_section_that_cannot_run_without_it_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = one_slot(dir.path());
    let taken = TurnKey::new("t", 1);
    let fresh = TurnKey::new("u", 1);
    tollgate::section::run(
        &rt,
        &NewTurns {
            keys: vec![taken.clone()],
            failed: BTreeMap::new(),
            reruns: false,
        },
    )
    .expect("the first record");
    // Group 0 (a fresh turn) is applied before group 1 is refused: it is rolled back with it.
    let refused = tollgate::section::run(
        &rt,
        &NewTurns {
            keys: vec![fresh.clone(), taken.clone()],
            failed: BTreeMap::new(),
            reruns: false,
        },
    );
    assert!(refused.is_err(), "{refused:?}");
    assert!(
        !has_record(&rt, &fresh),
        "the group applied before the refused one was rolled back with it"
    );
}

/// A section that asks to run again after every refusal of its group, forever.
#[derive(Clone)]
struct Stubborn {
    inner: NewTurns,
    steps: std::rc::Rc<std::cell::Cell<usize>>,
}

impl Section for Stubborn {
    type Effect = BTreeMap<usize, String>;

    fn commit(&self) -> Commit {
        Commit::Internal
    }

    fn reads(&self) -> Reads {
        self.inner.reads()
    }

    fn step<L: Liveness>(
        &self,
        part: &mut QueueState,
        view: &View<'_, L>,
    ) -> Result<Step<Self::Effect>, Halt> {
        self.steps.set(self.steps.get() + 1);
        self.inner.step(part, view)
    }

    fn without_group(&self, _group: usize, _error: String) -> Option<Self> {
        Some(self.clone())
    }
}

/// The reruns are bounded even when a section would run again forever: after
/// `MAX_GROUP_RERUNS` reruns the refusal is the section's error.
#[test]
fn reruns_after_refused_groups_are_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = one_slot(dir.path());
    let taken = TurnKey::new("t", 1);
    let first = NewTurns {
        keys: vec![taken.clone()],
        failed: BTreeMap::new(),
        reruns: false,
    };
    tollgate::section::run(&rt, &first).expect("the first record");
    let stubborn = Stubborn {
        inner: first,
        steps: Default::default(),
    };
    let refused = tollgate::section::run(&rt, &stubborn);
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(
        stubborn.steps.get(),
        tollgate::section::MAX_GROUP_RERUNS + 1,
        "the first run and its bounded reruns"
    );
}
