//! loom races of the admission gate (`src/gate.rs`): the production gate and permits, with the
//! mutex from `tollgate::sync` switched to loom's.
#![cfg(tollgate_loom)]

use tollgate::gate::{Gate, GateDecision};
use tollgate::protocol::admission::{
    Dispatch, EventIdentity, Limits, Outcome, RejectReason, Tenant,
};
use tollgate::sync::thread;

fn tenant() -> Tenant {
    Tenant::new("generic", "acme")
}

/// A1, A5: concurrent admits and settles never exceed the cap, and every admitted delivery gives
/// its capacity back exactly once (settled or dropped), so nothing leaks.
#[test]
fn concurrent_admits_and_settles_never_exceed_the_cap_or_leak() {
    loom::model(|| {
        let gate = Gate::new(Limits::new(1, 0).expect("limits"), 60_000);
        let handles: Vec<_> = (0..2)
            .map(|i| {
                let gate = gate.clone();
                thread::spawn(move || {
                    let identity = EventIdentity(format!("e{i}"));
                    match gate.deliver(&tenant(), &identity, Dispatch::Deferred, 0) {
                        GateDecision::Accepted(permit) => {
                            assert!(gate.retained() <= 1, "A1: over the cap");
                            if i == 0 {
                                assert!(permit.settle(Outcome::Completed));
                            } else {
                                drop(permit); // abandoned: the drop settles it
                            }
                            true
                        }
                        GateDecision::Rejected(reason) => {
                            assert_eq!(reason, RejectReason::AtCapacity);
                            false
                        }
                        GateDecision::Duplicate => panic!("distinct identities"),
                    }
                })
            })
            .collect();
        let accepted = handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .filter(|a| *a)
            .count();
        assert!(accepted >= 1, "the first delivery always fits");
        assert_eq!(gate.retained(), 0, "A5: capacity leaked");
        let stats = gate.stats();
        assert_eq!(stats.admitted as usize, accepted);
        assert_eq!(stats.outcomes.values().sum::<u64>() as usize, accepted);
    });
}

/// A3: shutdown racing an admit: a late admit is rejected, and an admitted delivery ends either by
/// its own settle or as handed off at shutdown, never both and never neither.
#[test]
fn shutdown_racing_admits_rejects_late_admits_and_loses_nothing() {
    loom::model(|| {
        let gate = Gate::new(Limits::new(2, 0).expect("limits"), 60_000);
        let g = gate.clone();
        let worker = thread::spawn(move || {
            match g.deliver(&tenant(), &EventIdentity("e".into()), Dispatch::Deferred, 0) {
                GateDecision::Accepted(permit) => Some(permit.settle(Outcome::Completed)),
                GateDecision::Rejected(reason) => {
                    assert_eq!(reason, RejectReason::ShuttingDown);
                    None
                }
                GateDecision::Duplicate => panic!("one delivery"),
            }
        });
        let g = gate.clone();
        let shutdown = thread::spawn(move || {
            g.begin_shutdown();
            g.hand_off_remaining().len()
        });
        let settled_by_worker = worker.join().expect("worker");
        let handed_off = shutdown.join().expect("shutdown");
        let stats = gate.stats();
        match settled_by_worker {
            None => {
                assert_eq!(stats.admitted, 0);
                assert_eq!(handed_off, 0);
            }
            Some(true) => assert_eq!(stats.outcomes.get("completed"), Some(&1)),
            Some(false) => assert_eq!(stats.outcomes.get("handed-off-at-shutdown"), Some(&1)),
        }
        assert_eq!(
            stats.outcomes.values().sum::<u64>(),
            stats.admitted,
            "A3: an admitted delivery without an outcome"
        );
        assert_eq!(gate.retained(), 0);
        // After shutdown, every admit is refused.
        assert!(matches!(
            gate.deliver(&tenant(), &EventIdentity("late".into()), Dispatch::Sync, 0),
            GateDecision::Rejected(RejectReason::ShuttingDown)
        ));
    });
}
