//! The dependencies-and-retries model (`model/src/slots/deps.rs`) checked exhaustively against
//! the production core's section steps (R1..R3, spec/invariants.md), and its teeth: every property has a
//! broken variant under which the checker must find it broken (an `always`) or never reach it (a
//! `sometimes` example), by name.
#![cfg(feature = "model-check")]

#[path = "common/teeth.rs"]
mod teeth;
use stateright::{Checker, Expectation, Model};
use std::collections::BTreeSet;
use std::time::Instant;
use tollgate::model::slots::deps::{names, DepsConfig, DepsModel, DepsVariant};

fn cfg(attempts: u32, crash_budget: u8, variant: DepsVariant) -> DepsConfig {
    DepsConfig {
        attempts,
        crash_budget,
        variant,
    }
}

/// Checks `cfg` to completion, asserts every property (no counterexample, every example
/// reached) and the pinned unique state count (`TOLLGATE_MODEL_REPIN=1` only reports it).
fn check(cfg: DepsConfig, unique_states: usize) {
    let started = Instant::now();
    let checker = DepsModel::new(cfg.clone()).checker().spawn_bfs().join();
    tollgate::model::report(&format!(
        "deps model {cfg}: {} unique states ({} generated), max depth {}, {:.1?}",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        started.elapsed()
    ));
    assert!(checker.is_done(), "the check of {cfg} did not complete");
    for property in checker.model().properties() {
        match (property.expectation, checker.discovery(property.name)) {
            (Expectation::Sometimes, None) => {
                panic!("{cfg}: no example reached for \"{}\"", property.name)
            }
            (Expectation::Always, Some(path)) => panic!(
                "{cfg}: counterexample for \"{}\": {:?}",
                property.name,
                path.into_actions()
            ),
            _ => {}
        }
    }
    if std::env::var("TOLLGATE_MODEL_REPIN").is_ok_and(|v| v == "1") {
        return;
    }
    assert_eq!(
        checker.unique_state_count(),
        unique_states,
        "{cfg}: the state space changed; if that is intended, pin the new count"
    );
}

/// Every configuration CI checks.
fn ci_configs() -> Vec<DepsConfig> {
    vec![
        cfg(2, 1, DepsVariant::Production),
        cfg(3, 2, DepsVariant::Production),
    ]
}

// The counts fell (307 and 2 076 before) when a turn settled dependency-failed at its submit
// began to spend the id it was created with (`spend_queue_id`): the states where B was decided at
// once and those where it was held and then settled now agree on the queue's counter.
// They rose (297 and 2 040 before) when the model began to run the core's section steps on the
// core's records: a state now holds every record field the sections write (the task's turn
// counter, which a crash after its write moves past a number; the started record's runner, which
// differs between a turn's first run and its run again after a crash; ids, exit codes), which
// the old projection of a record (outcome, started, plan, retry_of, retried_as) merged, and the
// runner keeps the record its take-over returned; a crash inside the finish now falls after each
// of the section's real writes in the store's order (counter, result, retry's record: three
// points, where the re-typed finish had two in another order).
#[test]
fn r_two_attempts_one_crash() {
    check(cfg(2, 1, DepsVariant::Production), 382);
}

#[test]
fn r_three_attempts_two_crashes() {
    check(cfg(3, 2, DepsVariant::Production), 3_996);
}

// ---------------------------------------------------------------------------------------------
// Teeth.
// ---------------------------------------------------------------------------------------------

/// One tooth: a broken variant in a configuration the production core passes above, the
/// properties the checker must find broken, and the examples it must never reach.
struct Tooth {
    cfg: DepsConfig,
    breaks: &'static [&'static str],
    unreached: &'static [&'static str],
}

/// The teeth of `variant` (no wildcard: a new variant does not build without its teeth).
fn teeth(variant: DepsVariant) -> Vec<Tooth> {
    let tooth = |attempts, crashes, breaks, unreached| Tooth {
        cfg: cfg(attempts, crashes, variant),
        breaks,
        unreached,
    };
    match variant {
        DepsVariant::Production => Vec::new(),
        DepsVariant::IgnoreDependencies => vec![tooth(2, 0, &[names::R1], &[])],
        DepsVariant::RequeueAfterCommit => vec![tooth(2, 1, &[names::R3], &[])],
        DepsVariant::NoSettleOnFailure => vec![tooth(1, 0, &[names::R2], &[])],
        DepsVariant::FailureCountsAsSuccess => {
            vec![tooth(1, 0, &[names::R2], &[names::DEPENDENCY_FAILED])]
        }
        // The finish that failed died after writing the retry's record; reconcile's departure
        // writes another.
        DepsVariant::RetryNotReused => vec![tooth(2, 1, &[names::R3], &[])],
        DepsVariant::NoRetry => vec![tooth(2, 0, &[names::R3], &[names::RETRIED_SUCCESS])],
        DepsVariant::FinishesAsAnotherProcess => vec![tooth(1, 0, &[names::CORE], &[])],
    }
}

/// Runs each tooth of `variant` to completion: every property in `breaks` must have a
/// counterexample and no example in `unreached` may be reached.
fn bites(variant: DepsVariant) {
    for Tooth {
        cfg,
        breaks,
        unreached,
    } in teeth(variant)
    {
        let model = DepsModel::new(cfg.clone());
        let listed: BTreeSet<&str> = model.properties().iter().map(|p| p.name).collect();
        for name in breaks.iter().chain(unreached) {
            assert!(
                listed.contains(name),
                "{cfg}: \"{name}\" is not a property of it"
            );
        }
        let checker = model.checker().spawn_bfs().join();
        assert!(checker.is_done(), "{cfg}: the check did not complete");
        for name in breaks {
            let path = checker.discovery(name).unwrap_or_else(|| {
                panic!(
                    "{cfg}: the broken variant was not caught by \"{name}\" ({} states)",
                    checker.unique_state_count()
                )
            });
            tollgate::model::report(&format!(
                "deps model {cfg}: \"{name}\" fails as it must: {:?}",
                path.into_actions()
            ));
        }
        for name in unreached {
            if let Some(path) = checker.discovery(name) {
                panic!(
                    "{cfg}: the example \"{name}\" was reached although the variant rules it out: \
                     {:?}",
                    path.into_actions()
                );
            }
        }
    }
}

/// One `#[test]` per broken variant, and the list of the variants they cover.
macro_rules! teeth_tests {
    ($($test:ident => $variant:ident,)*) => {
        $(
            #[test]
            fn $test() {
                bites(DepsVariant::$variant);
            }
        )*
        const TESTED: &[DepsVariant] = &[$(DepsVariant::$variant),*];
    };
}

teeth_tests! {
    teeth_ignoring_dependencies_breaks_r1 => IgnoreDependencies,
    teeth_requeueing_after_the_commit_breaks_r3 => RequeueAfterCommit,
    teeth_settling_no_dependent_breaks_r2 => NoSettleOnFailure,
    teeth_a_failure_read_as_a_success_breaks_r2 => FailureCountsAsSuccess,
    teeth_a_retry_record_not_reused_breaks_r3 => RetryNotReused,
    teeth_no_retry_breaks_r3 => NoRetry,
    teeth_a_finish_by_another_process_breaks_core => FinishesAsAnotherProcess,
}

/// The guard: every property of the deps model has a tooth that names it, and every broken
/// variant has its test above.
#[test]
fn every_property_has_a_tooth() {
    let mut listed: BTreeSet<&'static str> = BTreeSet::new();
    let configs = ci_configs().into_iter().chain(
        DepsVariant::BROKEN
            .into_iter()
            .flat_map(|v| teeth(v).into_iter().map(|t| t.cfg)),
    );
    for cfg in configs {
        listed.extend(DepsModel::new(cfg).properties().iter().map(|p| p.name));
    }
    teeth::assert_every_property_has_a_tooth(
        &DepsVariant::BROKEN,
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
