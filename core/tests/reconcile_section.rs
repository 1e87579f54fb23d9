//! The reconcile section (spec/slots.md, "Reconcile"): the row of a runner that died after
//! recording its outcome is removed, not run again, because the section reads that row's record
//! before it decides; and a parked row starts on a free slot.

mod common;

use common::{id, start, submit, Home, World};
use tollgate_core::records::TurnOutcome;
use tollgate_core::slots::sections::{Placement, ReconcileSection};
use tollgate_core::slots::steps::ReconcileEffect;

fn reconcile_of(candidates: &[tollgate_core::slots::TurnKey], n: u128) -> ReconcileSection<'_> {
    ReconcileSection {
        me: id(9),
        fresh_token: common::token(900 + n),
        now_millis: 9_000,
        cap: 1,
        orphan_candidates: candidates,
    }
}

/// Reconcile sections until one says it is done; their effects.
fn pass(home: &mut Home, world: &World) -> Vec<ReconcileEffect> {
    let mut effects = Vec::new();
    for n in 0..10 {
        let effect = home.run(&reconcile_of(&[], n), world, None).effect.effect;
        let last = effect.is_final();
        effects.push(effect);
        if last {
            return effects;
        }
    }
    panic!("reconcile did not settle: {effects:?}");
}

#[test]
fn the_row_of_a_runner_that_died_after_recording_its_outcome_is_removed_not_run_again() {
    let mut home = Home::default();
    let mut world = World::default();
    let submitted = submit(&mut home, &world, "a", None, 1, 1_000).effect;
    start(&mut home, &mut world, &submitted, id(100), None);
    let key = submitted.key.clone();
    let mut turn = home.turn(&key).clone();
    turn.outcome = Some(TurnOutcome::Completed);
    turn.exit_code = Some(0);
    turn.ended_at_millis = Some(3_000);
    home.turns.insert(key.clone(), turn);
    world.live.clear();
    let effects = pass(&mut home, &world);
    assert!(
        effects.contains(&ReconcileEffect::Removed { key: key.clone() }),
        "{effects:?}"
    );
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, ReconcileEffect::Spawn { .. })),
        "{effects:?}"
    );
    assert!(home.queue.row(&key).is_none());
    assert_eq!(home.turn(&key).outcome, Some(TurnOutcome::Completed));
}

#[test]
fn a_parked_row_starts_on_a_free_slot() {
    let mut home = Home::default();
    let drained = World {
        drained: true,
        ..World::default()
    };
    let parked = submit(&mut home, &drained, "a", None, 1, 1_000).effect;
    assert_eq!(parked.placement, Placement::Park);
    let effect = home
        .run(&reconcile_of(&[], 0), &World::default(), None)
        .effect
        .effect;
    let ReconcileEffect::Spawn { handoff, replaced } = &effect else {
        panic!("{effect:?}");
    };
    assert_eq!(handoff.key(), &parked.key);
    assert_eq!(*replaced, None);
}
