//! The execution model (`model/src/execution.rs`, spec/execution.md, D1-D7) checked exhaustively
//! against the production core (`tollgate_core::execution`), and its teeth: every property has a
//! broken variant under which the checker must find it broken (an `always`) or never reach it (a
//! `sometimes` example), by name. The CI configurations' unique state counts are pinned
//! (`TOLLGATE_MODEL_REPIN=1` reports them without asserting).
#![cfg(feature = "model-check")]

#[path = "common/teeth.rs"]
mod teeth;
use stateright::{Checker, Model};
use std::collections::BTreeSet;
use std::time::Instant;
use tollgate::model::execution::{names, small_model, ExecutionModel, Variant};
use tollgate::protocol::execution::Lane;

fn check(model: ExecutionModel, label: &str, unique_states: usize) {
    let started = Instant::now();
    let checker = model.checker().spawn_bfs().join();
    tollgate::model::report(&format!(
        "execution model {label}: {} unique states ({} generated), {:.1?}",
        checker.unique_state_count(),
        checker.state_count(),
        started.elapsed()
    ));
    checker.assert_properties();
    if !std::env::var("TOLLGATE_MODEL_REPIN").is_ok_and(|v| v == "1") {
        assert_eq!(
            checker.unique_state_count(),
            unique_states,
            "{label}: the state space changed; if that is intended, pin the new count"
        );
    }
}

/// Every configuration CI checks: three items (unkillable, normal, ignores SIGTERM), two jobs, a
/// ceiling; the scored lane, and the playbook lane with an interrupt at any point.
fn ci_configs() -> Vec<(ExecutionModel, &'static str)> {
    vec![
        (
            small_model(Lane::Scored, Variant::Production, false),
            "scored",
        ),
        (
            small_model(Lane::Playbook, Variant::Production, true),
            "playbook+interrupt",
        ),
    ]
}

#[test]
fn execution_model_scored_holds() {
    check(
        small_model(Lane::Scored, Variant::Production, false),
        "scored",
        36_783,
    );
}

#[test]
fn execution_model_playbook_with_interrupt_holds() {
    check(
        small_model(Lane::Playbook, Variant::Production, true),
        "playbook+interrupt",
        100_375,
    );
}

// ---------------------------------------------------------------------------------------------
// Teeth.
// ---------------------------------------------------------------------------------------------

/// One tooth: a broken variant in a configuration the production core passes above, the
/// properties the checker must find broken, and the examples it must never reach.
struct Tooth {
    model: ExecutionModel,
    breaks: &'static [&'static str],
    unreached: &'static [&'static str],
}

/// The teeth of `variant` (no wildcard: a new variant does not build without its teeth).
fn teeth(variant: Variant) -> Vec<Tooth> {
    let tooth = |lane, breaks, unreached| Tooth {
        model: small_model(lane, variant, false),
        breaks,
        unreached,
    };
    match variant {
        Variant::Production => Vec::new(),
        Variant::ScoredInSettleOrder => vec![tooth(Lane::Scored, &[names::D2], &[])],
        Variant::WorkerOwnsWorktree => vec![tooth(
            Lane::Playbook,
            &[names::D6, names::D6_QUIESCENT],
            &[],
        )],
        Variant::DriverRepeatsRelease => vec![tooth(Lane::Playbook, &[names::D1], &[])],
        Variant::AbandonIgnored => vec![tooth(Lane::Playbook, &[names::D1_QUIESCENT], &[])],
        Variant::PlaybookInDeclarationOrder => vec![tooth(Lane::Playbook, &[names::D3], &[])],
        Variant::LastRowLost => vec![tooth(Lane::Scored, &[names::D4], &[])],
        Variant::LateResultMisrouted => vec![tooth(Lane::Playbook, &[names::D5], &[])],
        Variant::GraceTripled => vec![tooth(Lane::Playbook, &[names::D7], &[])],
        Variant::KillsAlwaysLand => vec![tooth(Lane::Playbook, &[], &[names::ABANDONED])],
        Variant::RowsAtTheEnd => vec![tooth(Lane::Playbook, &[], &[names::ROW_WHILE_RUNNING])],
        Variant::SweepNeverRuns => vec![tooth(
            Lane::Playbook,
            &[names::D6_QUIESCENT],
            &[names::SWEPT],
        )],
        Variant::NoCeiling => vec![tooth(Lane::Playbook, &[], &[names::CEILING])],
    }
}

/// Runs each tooth of `variant` to completion: every property in `breaks` has a counterexample
/// (printed), and no example in `unreached` is reached.
fn bites(variant: Variant) {
    for Tooth {
        model,
        breaks,
        unreached,
    } in teeth(variant)
    {
        let started = Instant::now();
        let listed: BTreeSet<&str> = model.properties().iter().map(|p| p.name).collect();
        for name in breaks.iter().chain(unreached) {
            assert!(
                listed.contains(name),
                "{variant:?}: \"{name}\" is not a property"
            );
        }
        let checker = model.checker().spawn_bfs().join();
        assert!(checker.is_done(), "{variant:?}: the check did not complete");
        for name in breaks {
            let path = checker.discovery(name).unwrap_or_else(|| {
                panic!(
                    "{variant:?}: the broken variant was NOT caught: no counterexample for \
                     \"{name}\" in {} states",
                    checker.unique_state_count()
                )
            });
            eprintln!("\"{name}\" broken: {:?}", path.into_actions());
        }
        for name in unreached {
            if let Some(path) = checker.discovery(name) {
                panic!(
                    "{variant:?}: the example \"{name}\" was reached although the variant rules \
                     it out: {:?}",
                    path.into_actions()
                );
            }
        }
        tollgate::model::report(&format!(
            "execution teeth: {variant:?} caught: broken {breaks:?}, never reached {unreached:?} \
             ({} states, {:.1?})",
            checker.unique_state_count(),
            started.elapsed()
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
    teeth_scored_rows_in_settle_order_break_d2 => ScoredInSettleOrder,
    teeth_a_worker_owning_its_worktree_breaks_d6 => WorkerOwnsWorktree,
    teeth_a_release_performed_twice_breaks_d1 => DriverRepeatsRelease,
    teeth_an_ignored_abandonment_breaks_d1 => AbandonIgnored,
    teeth_playbook_rows_in_declaration_order_break_d3 => PlaybookInDeclarationOrder,
    teeth_a_lost_last_row_breaks_d4 => LastRowLost,
    teeth_a_misrouted_late_result_breaks_d5 => LateResultMisrouted,
    teeth_a_tripled_grace_breaks_d7 => GraceTripled,
    teeth_kills_that_always_land_abandon_nothing => KillsAlwaysLand,
    teeth_rows_held_to_the_end_are_never_out_early => RowsAtTheEnd,
    teeth_no_sweep_breaks_d6_and_sweeps_nothing => SweepNeverRuns,
    teeth_no_ceiling_never_ends_a_run_by_it => NoCeiling,
}

/// The guard: every property of the execution model has a tooth that names it, and every broken
/// variant has its test above.
#[test]
fn every_property_has_a_tooth() {
    let mut listed: BTreeSet<&'static str> = BTreeSet::new();
    for (model, _) in ci_configs() {
        listed.extend(model.properties().iter().map(|p| p.name));
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
