//! The slot model and a canceller racing runners (issue "Turn containment", cancel): S12 — a turn
//! recorded `cancelled` never had its work run to its end — and S13 — a cancel signals only the
//! turn's executor, never a dispatcher handing its row off — hold on every state of a small
//! configuration with a crash and a cancel, and the two cancel paths (honoured at the take-over
//! before anything is spawned; a signalled runner stopping its running work) are reachable. The
//! broken variants that record `cancelled` from the request instead of from what happened, or
//! signal a row's dispatcher, are teeth of the slot model (`tests/model_slots.rs`,
//! `teeth_recording_cancelled_from_the_request_breaks_s12`,
//! `teeth_signalling_a_dispatcher_breaks_s13`).
#![cfg(feature = "model-check")]

use stateright::{Checker, Expectation, Model};
use tollgate::model::slots::{event, random_walk, render_trail, SlotConfig, SlotModel};
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
    let checker = SlotModel::new(cfg.clone())
        .checker()
        .symmetry()
        .spawn_dfs()
        .join();
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
        "{cfg}: {} unique states with symmetry, S12 holds",
        checker.unique_state_count()
    );
    // The configuration of `tests/model_slots.rs`'s "cancel", whose count (and the full state
    // space's, 32 911) it pins too.
    assert_eq!(
        checker.unique_state_count(),
        7_790,
        "{cfg}: the state space changed"
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
