//! How far the section runner widens (spec/steps.md, "One section runner"): a step that says its
//! part does not suffice runs again on what it names, at most `MAX_PART_RUNS` times on parts and
//! then once on the whole queue; a step that asks for more of the whole queue is an error at once,
//! never a loop.

mod common;

use common::sections::one_slot;
use std::cell::Cell;
use tollgate::protocol::section::{Commit, Halt, Section, Step, Unread, View};
use tollgate::protocol::slots::steps::{QueueReads, Reads};
use tollgate::protocol::slots::{Liveness, QueueState};

/// A step that always asks for `next` of the queue, counting the loads it was run on.
struct AlwaysWider {
    next: Reads,
    whole: Cell<usize>,
    parts: Cell<usize>,
}

impl AlwaysWider {
    fn new(next: Reads) -> Self {
        Self {
            next,
            whole: Cell::new(0),
            parts: Cell::new(0),
        }
    }
}

impl Section for AlwaysWider {
    type Effect = ();

    fn commit(&self) -> Commit {
        Commit::Internal
    }

    fn reads(&self) -> Reads {
        Reads::Part(QueueReads::default())
    }

    fn step<L: Liveness>(
        &self,
        _part: &mut QueueState,
        view: &View<'_, L>,
    ) -> Result<Step<()>, Halt> {
        match view.loaded {
            tollgate::protocol::slots::steps::Loaded::Whole => self.whole.set(self.whole.get() + 1),
            _ => self.parts.set(self.parts.get() + 1),
        }
        // A runner that never moves on to the whole queue fails here, not by hanging the suite.
        assert!(
            self.parts.get() <= 100,
            "the section runner widened part after part without a bound"
        );
        Err(Halt::Unread(Unread::Queue(self.next.clone())))
    }
}

#[test]
fn a_step_asking_for_more_of_the_whole_queue_fails_after_one_run_on_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = one_slot(dir.path());
    let section = AlwaysWider::new(Reads::Everything);
    let err = tollgate::section::run(&rt, &section).expect_err("never decides");
    assert!(
        err.to_string().contains("whole queue asked to read more"),
        "{err}"
    );
    assert_eq!((section.parts.get(), section.whole.get()), (1, 1));
}

#[test]
fn a_step_widening_part_after_part_runs_on_the_whole_queue_last() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = one_slot(dir.path());
    let section = AlwaysWider::new(Reads::Part(QueueReads {
        tasks: ["other".to_string()].into_iter().collect(),
        ..QueueReads::default()
    }));
    let err = tollgate::section::run(&rt, &section).expect_err("never decides");
    assert!(
        err.to_string().contains("whole queue asked to read more"),
        "{err}"
    );
    assert_eq!(
        (section.parts.get(), section.whole.get()),
        (tollgate::section::MAX_PART_RUNS, 1),
        "its parts, then the whole queue once"
    );
}
