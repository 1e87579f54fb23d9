//! Exhaustive checks of the fleet dedupe model (`model/src/fleet_dedupe.rs`): two (or three)
//! `serve` instances of one PostgreSQL queue share one mark table and one queue; the same
//! identity is delivered to any of them in any interleaving, redelivered, after a serve crashed
//! before or after its commit, after its mark expired. Each serve decides with the core's gate
//! steps and submit step. A6, A3 and A2 fleet-wide hold; every property has a deliberately broken
//! variant under which the checker must find it broken (a check-then-insert that is not atomic,
//! the mark inserted after the ack, the mark committed before the turn's transaction, a failed
//! delivery's savepoint released instead of rolled back) or never reach it (a `sometimes`
//! example), by name. Unique state counts are pinned. Larger configurations run with
//! `TOLLGATE_MODEL_FULL=1`.
#![cfg(feature = "model-check")]

#[path = "common/teeth.rs"]
mod teeth;
use stateright::{Checker, HasDiscoveries, Model};
use std::collections::BTreeSet;
use std::time::Instant;
use tollgate::model::fleet_dedupe::{
    describe, names, FleetDedupeConfig, FleetDedupeModel, Variant,
};

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
fn redelivered() -> FleetDedupeConfig {
    FleetDedupeConfig::new(2, vec![3, 2])
}

/// A serve dies at any step (before its commit, after it and before its answer, after its
/// answer) and restarts from the table's live marks; a transaction may fail (withdraw).
fn crashes_and_failing_commits() -> FleetDedupeConfig {
    FleetDedupeConfig::new(2, vec![3, 1])
        .with_crashes(2)
        .with_commit_failures()
}

/// Marks expire: a redelivery after the TTL is a new turn, one within it never is.
fn marks_expire() -> FleetDedupeConfig {
    FleetDedupeConfig::new(2, vec![3])
        .with_expiry(2, 3)
        .with_crashes(1)
}

/// Every configuration CI checks.
fn ci_configs() -> Vec<FleetDedupeConfig> {
    vec![redelivered(), crashes_and_failing_commits(), marks_expire()]
}

#[test]
fn two_serves_two_identities_redelivered() {
    check(redelivered(), 86_163);
}

#[test]
fn two_serves_with_a_crash_and_failing_commits() {
    check(crashes_and_failing_commits(), 476_066);
}

#[test]
fn two_serves_marks_expire() {
    check(marks_expire(), 133_342);
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

/// One tooth: a broken variant in a configuration the production sections pass above, the
/// properties the checker must find broken, and the examples it must never reach.
struct Tooth {
    cfg: FleetDedupeConfig,
    breaks: &'static [&'static str],
    unreached: &'static [&'static str],
}

/// The teeth of `variant` (no wildcard: a new variant does not build without its teeth).
fn teeth(variant: Variant) -> Vec<Tooth> {
    let tooth = |cfg: FleetDedupeConfig, breaks, unreached| Tooth {
        cfg: cfg.with_variant(variant),
        breaks,
        unreached,
    };
    match variant {
        Variant::Production => Vec::new(),
        // Two serves both read "absent" before either inserts: two turns for one identity.
        Variant::CheckThenInsert => vec![tooth(
            FleetDedupeConfig::new(2, vec![3, 1]),
            &[names::A6],
            &[],
        )],
        // The mark lands with the 200: another serve's commit in between queues a second turn.
        Variant::MarkAfterAck => vec![tooth(
            FleetDedupeConfig::new(2, vec![3, 1]),
            &[names::A6],
            &[],
        )],
        // The mark commits alone, the serve dies before the turn's transaction: the other serve
        // answers the redelivery `duplicate` for an event nothing will run.
        Variant::MarkInOwnTransaction => vec![tooth(
            FleetDedupeConfig::new(2, vec![3])
                .with_crashes(1)
                .with_commit_failures(),
            &[names::A2, names::A3],
            &[],
        )],
        Variant::SavepointReleasedOnFailure => vec![tooth(
            FleetDedupeConfig::new(2, vec![2]).with_commit_failures(),
            &[names::A2],
            &[names::WITHDRAWN_RETRY],
        )],
        Variant::OneServeOnly => vec![tooth(
            FleetDedupeConfig::new(2, vec![3]).with_crashes(1),
            &[],
            &[names::BOTH_ANSWER, names::TABLE_DUPLICATE],
        )],
        Variant::CrashesOnlyWhenIdle => vec![tooth(
            FleetDedupeConfig::new(2, vec![3]).with_crashes(1),
            &[],
            &[names::CRASH_AFTER_COMMIT, names::CRASH_BEFORE_COMMIT],
        )],
        Variant::MarksNeverExpire => vec![tooth(marks_expire(), &[], &[names::EXPIRED_AGAIN])],
    }
}

/// Runs each tooth of `variant`: until every property in `breaks` has a counterexample (printing
/// the trail up to its first violating state), and, if the tooth names examples, to completion,
/// which must reach none of them.
fn bites(variant: Variant) {
    for Tooth {
        cfg,
        breaks,
        unreached,
    } in teeth(variant)
    {
        let started = Instant::now();
        let model = FleetDedupeModel::new(cfg.clone());
        let listed: BTreeSet<&str> = model.properties().iter().map(|p| p.name).collect();
        for name in breaks.iter().chain(unreached) {
            assert!(
                listed.contains(name),
                "{cfg}: \"{name}\" is not a property of it"
            );
        }
        let builder = FleetDedupeModel::new(cfg.clone()).checker();
        let checker = if unreached.is_empty() {
            builder
                .finish_when(HasDiscoveries::AllOf(breaks.iter().copied().collect()))
                .target_state_count(teeth::STATE_BOUND)
                .spawn_dfs()
                .join()
        } else {
            builder.spawn_dfs().join()
        };
        for &property in breaks {
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
            eprintln!("{property:?} broken:\n{}", describe(&model, &trail));
        }
        if !unreached.is_empty() {
            assert!(checker.is_done(), "{cfg}: the check did not complete");
        }
        for &name in unreached {
            if let Some(path) = checker.discovery(name) {
                panic!(
                    "{cfg}: the example {name:?} was reached although the variant rules it out:\n{}",
                    describe(&model, &path.into_vec())
                );
            }
        }
        tollgate::model::report(&format!(
            "fleet dedupe teeth: {variant:?} caught: broken {breaks:?}, never reached \
             {unreached:?} ({} unique states, {:.1?})",
            checker.unique_state_count(),
            started.elapsed(),
        ));
    }
}

/// One `#[test]` per broken variant, and the list of the variants they cover.
macro_rules! teeth_tests {
    ($($test:ident => $variant:ident,)*) => {
        $(
            #[test]
            fn $test() {
                bites(Variant::$variant);
            }
        )*
        const TESTED: &[Variant] = &[$(Variant::$variant),*];
    };
}

teeth_tests! {
    teeth_check_then_insert_breaks_a6 => CheckThenInsert,
    teeth_mark_after_ack_breaks_a6 => MarkAfterAck,
    teeth_mark_in_its_own_transaction_breaks_a2_and_a3 => MarkInOwnTransaction,
    teeth_a_released_savepoint_breaks_a2 => SavepointReleasedOnFailure,
    teeth_one_serve_only_never_meets_another => OneServeOnly,
    teeth_crashes_only_when_idle_lose_nothing => CrashesOnlyWhenIdle,
    teeth_marks_that_never_expire_accept_nothing_again => MarksNeverExpire,
}

/// The guard: every property of the fleet dedupe model (the union of the property lists of the
/// CI configurations and of the teeth) has a tooth that names it, and every broken variant has
/// its test above.
#[test]
fn every_property_has_a_tooth() {
    let mut listed: BTreeSet<&'static str> = BTreeSet::new();
    let configs = ci_configs().into_iter().chain(
        Variant::BROKEN
            .into_iter()
            .flat_map(|v| teeth(v).into_iter().map(|t| t.cfg)),
    );
    for cfg in configs {
        listed.extend(
            FleetDedupeModel::new(cfg)
                .properties()
                .iter()
                .map(|p| p.name),
        );
    }
    teeth::assert_every_property_has_a_tooth(
        &Variant::BROKEN,
        TESTED,
        |v| {
            teeth(v)
                .into_iter()
                .map(|t| (t.breaks, t.unreached))
                .collect()
        },
        &listed,
    );
}
