//! Exhaustive checks of the fleet dedupe model (`model/src/fleet_dedupe.rs`): two (or three)
//! `serve` instances of one PostgreSQL queue share one mark table and one queue; the same
//! identity is delivered to any of them in any interleaving, redelivered, after a serve crashed
//! before or after its commit, after its mark expired. Each serve decides with the core's gate
//! steps and submit step. A6, A3 and A2 fleet-wide hold; each broken variant (a check-then-insert
//! that is not atomic, the mark inserted after the ack, the mark committed before the turn's
//! transaction) is caught with a counterexample. Unique state counts are pinned. Larger
//! configurations run with `TOLLGATE_MODEL_FULL=1`.
#![cfg(feature = "model-check")]

use stateright::{Checker, HasDiscoveries, Model};
use std::collections::BTreeSet;
use std::time::Instant;
use tollgate::model::fleet_dedupe::{describe, FleetDedupeConfig, FleetDedupeModel, Variant};

fn check(cfg: FleetDedupeConfig, expected_states: usize) {
    let states = check_unpinned(cfg.clone());
    assert_eq!(states, expected_states, "the state space of {cfg} changed");
}

fn check_unpinned(cfg: FleetDedupeConfig) -> usize {
    let started = Instant::now();
    let checker = FleetDedupeModel::new(cfg.clone())
        .checker()
        .spawn_dfs()
        .join();
    tollgate::model::report(&format!(
        "fleet dedupe {cfg}: {} unique states, depth {}, {:.1?}",
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    ));
    checker.assert_properties();
    checker.unique_state_count()
}

fn full_run() -> bool {
    std::env::var("TOLLGATE_MODEL_FULL").is_ok_and(|v| v == "1")
}

/// One event delivered three times to two serves (at once, and redelivered after an answer),
/// and a second event twice: the table decides between the serves.
#[test]
fn two_serves_two_identities_redelivered() {
    check(FleetDedupeConfig::new(2, vec![3, 2]), 86_163);
}

/// A serve dies at any step (before its commit, after it and before its answer, after its
/// answer) and restarts from the table's live marks; a transaction may fail (withdraw).
#[test]
fn two_serves_with_a_crash_and_failing_commits() {
    check(
        FleetDedupeConfig::new(2, vec![3, 1])
            .with_crashes(2)
            .with_commit_failures(),
        476_066,
    );
}

/// Marks expire: a redelivery after the TTL is a new turn, one within it never is.
#[test]
fn two_serves_marks_expire() {
    check(
        FleetDedupeConfig::new(2, vec![3])
            .with_expiry(2, 3)
            .with_crashes(1),
        133_342,
    );
}

#[test]
fn full_three_serves_a_crash_failing_commits_and_expiry() {
    if !full_run() {
        eprintln!("larger fleet dedupe configurations skipped (set TOLLGATE_MODEL_FULL=1)");
        return;
    }
    check_unpinned(
        FleetDedupeConfig::new(3, vec![3])
            .with_crashes(1)
            .with_commit_failures()
            .with_expiry(2, 3),
    );
}

// ---------------------------------------------------------------------------------------------
// Teeth.
// ---------------------------------------------------------------------------------------------

fn expect_caught(cfg: FleetDedupeConfig, variant: Variant) {
    let broken: BTreeSet<&'static str> = variant.breaks().iter().copied().collect();
    assert!(!broken.is_empty(), "{variant:?} is not a broken variant");
    let cfg = cfg.with_variant(variant);
    let started = Instant::now();
    let model = FleetDedupeModel::new(cfg.clone());
    let checker = FleetDedupeModel::new(cfg.clone())
        .checker()
        .finish_when(HasDiscoveries::AllOf(broken.clone()))
        .spawn_dfs()
        .join();
    for property in broken {
        let path = checker.discovery(property).unwrap_or_else(|| {
            panic!("{variant:?}: the checker found no counterexample for {property:?} in {cfg}")
        });
        let condition = model.property(property).condition;
        let mut trail = path.into_vec();
        let first_bad = trail
            .iter()
            .position(|(state, _)| !condition(&model, state))
            .expect("a counterexample trail holds a violating state");
        trail.truncate(first_bad + 1);
        trail[first_bad].1 = None;
        tollgate::model::report(&format!(
            "fleet dedupe teeth: {variant:?} caught by {property:?} after {} unique states, {:.1?}",
            checker.unique_state_count(),
            started.elapsed(),
        ));
        eprintln!("trail:\n{}", describe(&model, &trail));
    }
}

/// Two serves both read "absent" before either inserts: two turns for one identity.
#[test]
fn teeth_check_then_insert_is_caught() {
    expect_caught(
        FleetDedupeConfig::new(2, vec![3, 1]),
        Variant::CheckThenInsert,
    );
}

/// The mark lands with the 200: another serve's commit in between queues a second turn.
#[test]
fn teeth_mark_after_ack_is_caught() {
    expect_caught(FleetDedupeConfig::new(2, vec![3, 1]), Variant::MarkAfterAck);
}

/// The mark commits alone, the serve dies before the turn's transaction: the other serve
/// answers the redelivery `duplicate` for an event nothing will run.
#[test]
fn teeth_mark_in_its_own_transaction_is_caught() {
    expect_caught(
        FleetDedupeConfig::new(2, vec![3])
            .with_crashes(1)
            .with_commit_failures(),
        Variant::MarkInOwnTransaction,
    );
}

#[test]
fn the_teeth_list_is_complete() {
    assert_eq!(Variant::BROKEN.len(), 3);
    for variant in Variant::BROKEN {
        assert!(!variant.breaks().is_empty());
    }
}
