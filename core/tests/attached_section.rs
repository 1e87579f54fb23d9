//! The attached (`submit --attach`) start section (spec/slots.md, "Attached runs";
//! spec/fleet.md): the submitter runs its turn at once when the task has room, waits for the
//! task's running turn when it has none, waits for the host when it is drained, and on a fleet
//! takes its own lease in the same section, leaving the other hosts' leases as they were.

mod common;

use common::{argv, fleet, id, lease, submit, Home, World};
use tollgate_core::fleet::{FleetIdentity, HostId, LeaseTable};
use tollgate_core::slots::sections::{AttachedSection, AttachedStart};
use tollgate_core::slots::TurnKey;
use tollgate_core::turns::NewTurn;

const NOW_DB: u64 = 50_000;

fn attached_new() -> NewTurn {
    NewTurn {
        argv: argv(&["true"]),
        attached: true,
        ..NewTurn::default()
    }
}

fn attached_to<'a>(task: &'a str, new: &'a NewTurn) -> AttachedSection<'a> {
    AttachedSection {
        task: Some(task),
        fallback_task: "fallback",
        strategy: None,
        new,
        created: None,
        me: id(200),
        fresh_token: common::token(200),
        now_millis: 1_000,
    }
}

#[test]
fn an_attached_submit_to_a_free_task_runs_at_once_recorded_as_its_runner() {
    let mut home = Home::default();
    let mut world = World::default();
    world.live.insert(id(200));
    let new = attached_new();
    let ran = home.run(&attached_to("fg", &new), &world, None);
    assert!(
        matches!(ran.effect.start, AttachedStart::Run { .. }),
        "{:?}",
        ran.effect
    );
    let turn = home.turn(&TurnKey::new("fg", 1));
    assert_eq!(turn.runner, Some(id(200)));
    assert_eq!(turn.started_at_millis, Some(1_000));
    assert_eq!(&ran.effect.turn, turn);
    assert_eq!(ran.writes.leases, None, "one host has no leases");
}

#[test]
fn an_attached_submit_waits_for_the_running_turn_of_its_task() {
    let mut home = Home::default();
    let mut world = World::default();
    let running = submit(&mut home, &world, "fg", None, 1, 500).effect.key;
    world.live.insert(id(1));
    world.live.insert(id(200));
    let new = attached_new();
    let ran = home.run(&attached_to("fg", &new), &world, None);
    assert_eq!(ran.effect.start, AttachedStart::WaitFor { running });
    assert_eq!(ran.effect.turn.started_at_millis, None);
}

#[test]
fn an_attached_submit_on_a_drained_host_waits_for_the_host() {
    let mut home = Home::default();
    let world = World {
        drained: true,
        ..World::default()
    };
    let new = attached_new();
    let ran = home.run(&attached_to("fg", &new), &world, None);
    assert_eq!(ran.effect.start, AttachedStart::WaitDrained);
    assert_eq!(home.turn(&TurnKey::new("fg", 1)).started_at_millis, None);
}

#[test]
fn on_a_fleet_an_attached_run_takes_its_lease_in_the_same_section_keeping_the_others() {
    let other = lease("there", id(500), NOW_DB + 60_000);
    let mut home = Home::default();
    home.leases.leases.push(other.clone());
    let mut world = World::default();
    world.live.insert(id(200));
    let view = fleet("here", LeaseTable::default(), NOW_DB);
    let new = attached_new();
    let ran = home.run(&attached_to("fg", &new), &world, Some(&view));
    assert!(
        matches!(ran.effect.start, AttachedStart::Run { .. }),
        "{:?}",
        ran.effect
    );
    let me = FleetIdentity {
        host: HostId::new("here").expect("a host"),
        process: id(200),
    };
    assert!(home.leases.lease_of(&me).is_some(), "{:?}", home.leases);
    assert!(home.leases.leases.contains(&other), "{:?}", home.leases);
    assert_eq!(home.leases.leases.len(), 2);
    assert_eq!(ran.effect.turn.host, Some(me.host));
}
