//! The slot model and a canceller racing runners (issue "Turn containment", cancel): S12 — a turn
//! recorded `cancelled` never had its work run to its end — and S13 — a cancel signals only the
//! turn's executor, never a dispatcher handing its row off — hold on every state of a small
//! configuration with a crash and a cancel, the two cancel paths (honoured at the take-over before
//! anything is spawned; a signalled runner stopping its running work) are reachable, and the
//! broken variants that record `cancelled` from the request instead of from what happened, or
//! signal a row's dispatcher, are caught with a counterexample.
#![cfg(feature = "model-check")]

use stateright::{Checker, Expectation, HasDiscoveries, Model};
use std::collections::BTreeSet;
use tollgate::model::slots::{
    event, names, random_walk, render_trail, SlotConfig, SlotModel, Variant,
};
use tollgate::protocol::admission::{Strategy, MAX_CONCURRENT};

fn cancel_config() -> SlotConfig {
    let unbounded = Strategy::Concurrent {
        max: MAX_CONCURRENT,
    };
    let mut cfg = SlotConfig::new(2, 1, 1).with_tasks(vec![unbounded, unbounded]);
    cfg.crash_budget = 1;
    cfg.reuse_budget = 0;
    cfg.reconcile_budget = 0;
    cfg.cancel_budget = 1;
    cfg
}

#[test]
fn s12_holds_with_a_canceller_racing_runners_and_a_crash() {
    let cfg = cancel_config();
    let checker = SlotModel::new(cfg.clone()).checker().spawn_dfs().join();
    assert!(checker.is_done());
    for property in checker.model().properties() {
        if let (Expectation::Always, Some(path)) =
            (property.expectation, checker.discovery(property.name))
        {
            panic!(
                "{cfg}: counterexample for \"{}\":\n{}",
                property.name,
                render_trail(path.into_vec()).join("\n")
            );
        }
    }
    eprintln!(
        "{cfg}: {} unique states, S12 holds",
        checker.unique_state_count()
    );
}

#[test]
fn both_cancel_paths_are_reachable() {
    let cfg = cancel_config().without_faults();
    let (mut honoured, mut stopped) = (false, false);
    for seed in 0..5_000u64 {
        for (_, state) in random_walk(cfg.clone(), seed, 80) {
            honoured |= state.events & event::CANCEL_HONOURED != 0;
            stopped |= state.events & event::CANCEL_STOPPED != 0;
        }
        if honoured && stopped {
            return;
        }
    }
    panic!("unreached: honoured at take-over {honoured}, signalled runner stopped {stopped}");
}

#[test]
fn teeth_recording_cancelled_from_the_request_breaks_s12() {
    let cfg = cancel_config()
        .without_faults()
        .with_variant(Variant::CancelledAfterCompletion);
    let checker = SlotModel::new(cfg.clone())
        .checker()
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([names::S12])))
        .spawn_bfs()
        .join();
    let path = checker
        .discovery(names::S12)
        .unwrap_or_else(|| panic!("{cfg}: the broken runner was NOT caught"));
    eprintln!("{}", render_trail(path.into_vec()).join("\n"));
}

/// S13: the step as it was before (a row's live acting holder or bound child taken for its
/// executor) signals a finishing runner that is starting the cancelled task's parked row.
#[test]
fn teeth_signalling_a_dispatcher_breaks_s13() {
    let cfg = cancel_config()
        .without_faults()
        .with_variant(Variant::CancelSignalsDispatchers);
    let checker = SlotModel::new(cfg.clone())
        .checker()
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([names::S13])))
        .spawn_bfs()
        .join();
    let path = checker
        .discovery(names::S13)
        .unwrap_or_else(|| panic!("{cfg}: the cancel that signals dispatchers was NOT caught"));
    eprintln!("{}", render_trail(path.into_vec()).join("\n"));
}
