//! How a section observes processes and whether it may start turns (spec/fleet.md): on a fleet a
//! process (or a work's runner) that another host leases is live until its lease expires, this
//! host's own processes are asked of this host's observer, and a host starts turns only while
//! neither the fleet nor its own observer says it is drained; on one host the observer alone.

mod common;

use common::{fleet, id, World};
use tollgate_core::fleet::{FleetView, LeaseTable};
use tollgate_core::section::{Records, SectionLiveness, View};
use tollgate_core::slots::steps::Loaded;
use tollgate_core::slots::{Liveness, Observation, TurnKey, WorkId, WorkRecord};

const NOW_DB: u64 = 50_000;

fn leases() -> LeaseTable {
    LeaseTable {
        leases: vec![
            common::lease("there", id(10), NOW_DB),
            common::lease("there", id(11), NOW_DB - 1),
            common::lease("here", id(12), NOW_DB + 1_000),
        ],
    }
}

fn work_of(runner: u32) -> WorkRecord {
    WorkRecord {
        key: TurnKey::new("a", 1),
        id: WorkId::from_token(common::token(u128::from(runner))),
        runner: id(runner),
        leader: None,
        cgroup: None,
    }
}

#[test]
fn on_a_fleet_a_remote_lease_keeps_its_process_live_until_it_expires() {
    let view = fleet("here", leases(), NOW_DB);
    let mut local = World::default();
    local.live.insert(id(13));
    let liveness = SectionLiveness::new(&local, Some(&view));
    assert_eq!(
        liveness.observe(&id(10)),
        Observation::Matching,
        "leased up to now"
    );
    assert_eq!(
        liveness.observe(&id(11)),
        Observation::Gone,
        "its lease expired"
    );
    assert_eq!(
        liveness.observe(&id(12)),
        Observation::Gone,
        "this host's own process is asked of this host"
    );
    assert_eq!(liveness.observe(&id(13)), Observation::Matching);
    assert_eq!(liveness.observe(&id(14)), Observation::Gone);
}

#[test]
fn on_a_fleet_a_work_is_live_while_its_runners_remote_lease_is() {
    let view = fleet("here", leases(), NOW_DB);
    let mut local = World::default();
    local.live_works.insert(work_of(13).id);
    let liveness = SectionLiveness::new(&local, Some(&view));
    assert_eq!(liveness.observe_work(&work_of(10)), Observation::Matching);
    assert_eq!(liveness.observe_work(&work_of(11)), Observation::Gone);
    assert_eq!(liveness.observe_work(&work_of(12)), Observation::Gone);
    assert_eq!(liveness.observe_work(&work_of(13)), Observation::Matching);
}

#[test]
fn a_host_starts_turns_only_while_neither_the_fleet_nor_its_observer_says_drained() {
    for (fleet_may_start, locally_drained, may_start) in [
        (true, false, true),
        (false, false, false),
        (true, true, false),
        (false, true, false),
    ] {
        let view = FleetView {
            may_start: fleet_may_start,
            ..fleet("here", LeaseTable::default(), NOW_DB)
        };
        let local = World {
            drained: locally_drained,
            ..World::default()
        };
        let liveness = SectionLiveness::new(&local, Some(&view));
        assert_eq!(
            liveness.may_start(),
            may_start,
            "fleet says {fleet_may_start}, drained here: {locally_drained}"
        );
        let records = Records::default();
        let section = View {
            loaded: &Loaded::Whole,
            records: &records,
            liveness: &local,
            fleet: Some(&view),
        };
        assert_eq!(section.liveness().may_start(), may_start);
    }
    for drained in [false, true] {
        let local = World {
            drained,
            ..World::default()
        };
        assert_eq!(SectionLiveness::new(&local, None).may_start(), !drained);
        let records = Records::default();
        let section = View {
            loaded: &Loaded::Whole,
            records: &records,
            liveness: &local,
            fleet: None,
        };
        assert_eq!(
            section.liveness().may_start(),
            !drained,
            "one host without a fleet starts turns unless it is drained itself"
        );
    }
}
