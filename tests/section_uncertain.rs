//! A commit whose outcome is unknown (spec/store.md, "An uncertain commit"): the section runner
//! keeps the effect its step decided, so `submit` names the turn that may be queued instead of
//! saying nothing changed; any other failure says nothing was queued, with no turn named.

mod common;

use common::sections::{one_slot_with, submit_true};
use std::sync::atomic::{AtomicBool, Ordering};
use tollgate::dispatch::DispatchError;
use tollgate::process::ProcLiveness;
use tollgate::protocol::fleet::FleetView;
use tollgate::protocol::slots::steps::{Loaded, Reads};
use tollgate::protocol::slots::{ProcessIdentity, QueueState, TurnKey};
use tollgate::queue::{Commit, HomeStore, RecordTx, Store, StoreError};
use tollgate::runtime::Runtime;
use tollgate::submit::{decide_submit, Sequencing};

/// The home's store, whose sections run and commit as usual and then report the commit as
/// uncertain (`uncertain`) or as failed with nothing changed.
struct Failing {
    inner: HomeStore,
    uncertain: AtomicBool,
}

impl Failing {
    fn failure(&self) -> StoreError {
        let plain = StoreError::Database {
            path: "test".into(),
            detail: "the commit failed".into(),
        };
        if self.uncertain.load(Ordering::Relaxed) {
            StoreError::Uncertain {
                source: Box::new(plain),
            }
        } else {
            plain
        }
    }
}

impl Store for Failing {
    fn load(&self) -> Result<QueueState, StoreError> {
        self.inner.load()
    }

    fn transact_as<R, E>(
        &self,
        commit: Commit,
        change: impl FnOnce(&mut QueueState) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        self.inner.transact_as(commit, change)
    }

    fn transact_reading<R, E>(
        &self,
        commit: Commit,
        reads: &Reads,
        change: impl FnOnce(&mut QueueState, &Loaded) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        self.inner.transact_reading(commit, reads, change)
    }

    fn transact_section<R, E>(
        &self,
        commit: Commit,
        reads: &Reads,
        change: impl FnOnce(
            &mut QueueState,
            &Loaded,
            &mut Option<FleetView>,
            &mut RecordTx<'_>,
        ) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        self.inner.transact_section(commit, reads, change)?;
        Err(self.failure().into())
    }
}

fn runtime(dir: &std::path::Path, uncertain: bool) -> Runtime<ProcLiveness, Failing> {
    one_slot_with(dir, |inner| Failing {
        inner,
        uncertain: AtomicBool::new(uncertain),
    })
}

fn me() -> ProcessIdentity {
    tollgate::process::self_identity().expect("this test's identity")
}

#[test]
fn an_uncertain_commit_names_the_turn_that_may_be_queued() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime(dir.path(), true);
    match decide_submit(&rt, me(), &submit_true("job"), &Sequencing::default()) {
        Err(DispatchError::StateUnknown { key, id, what }) => {
            assert_eq!(key, TurnKey::new("job", 1));
            assert_eq!(id, 1, "the id its row got");
            assert!(what.contains("may or may not"), "{what}");
        }
        other => panic!("not reported as unknown: {other:?}"),
    }
}

#[test]
fn a_failed_commit_names_no_turn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime(dir.path(), false);
    match decide_submit(&rt, me(), &submit_true("job"), &Sequencing::default()) {
        Err(DispatchError::StateUnknown { .. }) => panic!("a plain failure reported as unknown"),
        Err(e) => assert!(e.to_string().contains("nothing was changed"), "{e}"),
        Ok(done) => panic!("reported as queued: {done:?}"),
    }
}
