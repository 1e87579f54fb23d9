//! loom races of the admission gate (`src/gate.rs`): the production gate and permits, with the
//! mutex from `tollgate::sync` switched to loom's.
#![cfg(tollgate_loom)]

use tollgate::gate::{Gate, GateDecision};
use tollgate::protocol::admission::{
    Dispatch, EventIdentity, Limits, Outcome, RejectReason, Retained, Tenant, TurnAtStart,
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
                        GateDecision::Duplicate | GateDecision::InFlight => {
                            panic!("distinct identities")
                        }
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
                GateDecision::Duplicate | GateDecision::InFlight => panic!("one delivery"),
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

/// A2, A1 (serve): a delivery whose turn could not be created is withdrawn (mark forgotten,
/// capacity released) while its redelivery races it. The redelivery is refused (cap), a duplicate
/// (still marked) or accepted; after both, the identity is marked iff some delivery of it is still
/// accepted, and a re-adopted delivery never pushes retention over the cap.
#[test]
fn withdraw_racing_a_redelivery_and_a_readopt_never_loses_the_identity_or_exceeds_the_cap() {
    loom::model(|| {
        let gate = Gate::new(Limits::new(1, 0).expect("limits"), 60_000);
        let e = EventIdentity("e".into());
        let first = match gate.deliver(&tenant(), &e, Dispatch::Deferred, 0) {
            GateDecision::Accepted(permit) => permit,
            _ => panic!("the first delivery fits"),
        };
        let g = gate.clone();
        let withdrawing =
            thread::spawn(move || assert!(first.withdraw(&EventIdentity("e".into()))));
        let g2 = gate.clone();
        let redelivery = thread::spawn(move || {
            match g2.deliver(&tenant(), &EventIdentity("e".into()), Dispatch::Deferred, 1) {
                GateDecision::Accepted(permit) => Some(permit),
                GateDecision::Duplicate | GateDecision::InFlight | GateDecision::Rejected(_) => {
                    None
                }
            }
        });
        let readopt = thread::spawn(move || {
            let retained = Retained {
                tenant: tenant(),
                identity: EventIdentity("r".into()),
                admitted_at_millis: 0,
                handed_off: false,
                turn: TurnAtStart::Held,
            };
            let permit = g.readopt(&retained, 60_000).permit;
            assert!(g.retained() <= 1, "A1: over the cap");
            permit
        });
        withdrawing.join().expect("withdraw");
        let again = redelivery.join().expect("redelivery");
        let readopted = readopt.join().expect("readopt");
        assert!(gate.retained() <= 1);
        assert!(
            again.is_none() || readopted.is_none(),
            "A1: two held at cap 1"
        );
        let accepted_again = again.is_some();
        drop(again);
        drop(readopted);
        assert_eq!(gate.retained(), 0, "A5: capacity leaked");
        // If the redelivery was not accepted, the withdrawn identity is not left marked.
        let third = gate.deliver(&tenant(), &e, Dispatch::Deferred, 2);
        match third {
            GateDecision::Accepted(_) => assert!(!accepted_again),
            GateDecision::Duplicate => assert!(accepted_again),
            GateDecision::Rejected(reason) => panic!("capacity is free: {reason:?}"),
            GateDecision::InFlight => panic!("nothing is in flight any more"),
        }
    });
}
