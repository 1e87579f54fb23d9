//! A home in memory for the core's section tests: the queue, the turn and task records, the
//! folders a removal cut short left behind, and the fleet's lease table, driven the way the
//! shell's one section runner drives a section ([`decide`]): the part of the queue the section
//! names is loaded, the records its step asks for are read from here, a step that asks for more
//! of the queue runs again on what it names, and the decision's writes are applied in the order
//! the store applies them ([`Writes::in_order`]). Every read round and every load is kept, so a
//! test can hold a section to the reads it promises (spec/steps.md).

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use tollgate_core::admission::{EventIdentity, Strategy};
use tollgate_core::fleet::{FleetView, HostId, Lease, LeaseTable, LeaseTiming};
use tollgate_core::records::{TaskRecord, TurnRecord};
use tollgate_core::section::{decide, Need, RecordWrite, Records, Section, TurnSlot, Undecided};
use tollgate_core::section::{Step, Writes};
use tollgate_core::slots::sections::{Placement, SubmitSection, Submitted};
use tollgate_core::slots::steps::{merge, project, Loaded, Reads, Schedule};
use tollgate_core::slots::{
    Liveness, Observation, ProcessIdentity, QueueState, SlotToken, TurnKey, WorkId, WorkRecord,
};
use tollgate_core::turns::NewTurn;
use uuid::Uuid;

/// Which processes and works are alive, and whether this host is drained.
#[derive(Default)]
pub struct World {
    pub live: BTreeSet<ProcessIdentity>,
    pub live_works: BTreeSet<WorkId>,
    pub drained: bool,
}

impl Liveness for World {
    fn observe(&self, identity: &ProcessIdentity) -> Observation {
        if self.live.contains(identity) {
            Observation::Matching
        } else {
            Observation::Gone
        }
    }

    fn observe_work(&self, work: &WorkRecord) -> Observation {
        if self.live_works.contains(&work.id) {
            Observation::Matching
        } else {
            Observation::Gone
        }
    }

    fn may_start(&self) -> bool {
        !self.drained
    }
}

pub fn id(pid: u32) -> ProcessIdentity {
    ProcessIdentity {
        pid,
        start_time_micros: u64::from(pid) * 10,
    }
}

pub fn token(n: u128) -> SlotToken {
    SlotToken::new(Uuid::from_u128(0x7000_8000_0000_0000_0000 | n)).expect("a non-nil token")
}

pub fn argv(words: &[&str]) -> Vec<OsString> {
    words.iter().map(OsString::from).collect()
}

/// A fleet of this host `here`, the other hosts' leases in `leases`, at `now_db_millis`.
pub fn fleet(here: &str, leases: LeaseTable, now_db_millis: u64) -> FleetView {
    FleetView {
        host: HostId::new(here).expect("a host name"),
        timing: LeaseTiming::DEFAULT,
        leases,
        now_db_millis,
        may_start: true,
    }
}

/// A lease of `process` on `host` until `expires_at_db_millis`.
pub fn lease(host: &str, process: ProcessIdentity, expires_at_db_millis: u64) -> Lease {
    Lease {
        holder: tollgate_core::fleet::FleetIdentity {
            host: HostId::new(host).expect("a host name"),
            process,
        },
        expires_at_db_millis,
    }
}

/// What one section did: its decision and how it got there.
#[derive(Debug)]
pub struct Ran<E> {
    pub effect: E,
    pub writes: Writes,
    /// What the step asked for in each read round of the attempt that decided, in order.
    pub rounds: Vec<Need>,
    /// What each attempt loaded of the queue: the section's own reads first, then each widening.
    pub loads: Vec<Reads>,
}

/// Why a section stayed undecided, with what each of its attempts loaded of the queue.
pub type NotDecided = (Undecided<Option<usize>>, Vec<Reads>);

/// The most times a section is loaded: its part, the part a step can then name, the whole queue.
const MAX_LOADS: usize = 3;

#[derive(Clone, Debug, Default)]
pub struct Home {
    pub queue: QueueState,
    pub turns: BTreeMap<TurnKey, TurnRecord>,
    pub tasks: BTreeMap<String, TaskRecord>,
    /// Task folders left without a record (a removal cut short).
    pub leftover_tasks: BTreeSet<String>,
    /// Turn folders left without a record.
    pub leftover_turns: BTreeSet<TurnKey>,
    pub leases: LeaseTable,
    /// serve's mark table: when each identity's mark expires.
    pub marks: BTreeMap<EventIdentity, u64>,
    /// serve's kept payloads, by delivery id.
    pub payloads: BTreeMap<String, (TurnKey, Vec<u8>)>,
    /// Delivery ids whose payload write the store refuses (a value the database refuses).
    pub refused_payloads: BTreeSet<String>,
    /// Tasks whose record cannot be read (corrupt): a read asking for one fails, naming the
    /// write group that asked.
    pub unreadable_tasks: BTreeSet<String>,
}

impl Home {
    /// Reads what `need` names into `records`, as a store does inside the section.
    pub fn read(&self, need: &Need, records: &mut Records) {
        for task in &need.tasks {
            let record = self.tasks.get(task).cloned();
            let dir = record.is_some()
                || self.leftover_tasks.contains(task)
                || self.turns.keys().any(|k| &k.task == task);
            records.put_task(task.clone(), record, dir);
        }
        for task in &need.numbers {
            let numbers = self
                .turns
                .keys()
                .chain(&self.leftover_turns)
                .filter(|k| &k.task == task)
                .map(|k| k.turn)
                .collect();
            records.put_numbers(task.clone(), numbers);
        }
        for key in &need.turns {
            let slot = match self.turns.get(key) {
                Some(record) => TurnSlot::Record(Box::new(record.clone())),
                None if self.leftover_turns.contains(key) => TurnSlot::Leftover,
                None => TurnSlot::Free,
            };
            records.put_turn(key.clone(), slot);
        }
        for identity in &need.marks {
            records.put_mark(identity.clone(), self.marks.get(identity).copied());
        }
    }

    /// Decides `section` as the shell's runner does, without applying it: the queue after it
    /// (the part merged back) and what it did; `Err` when the section stays undecided, with what
    /// each attempt loaded.
    pub fn decide<X: Section>(
        &self,
        section: &X,
        world: &World,
        fleet: Option<&FleetView>,
    ) -> Result<(QueueState, Ran<X::Effect>), NotDecided> {
        let fleet = fleet.cloned().map(|mut f| {
            f.leases = self.leases.clone();
            f
        });
        let mut reads = section.reads();
        let mut loads = Vec::new();
        let mut rounds = Vec::new();
        while loads.len() < MAX_LOADS {
            loads.push(reads.clone());
            rounds.clear();
            let (part, loaded) = match &reads {
                Reads::Everything => (self.queue.clone(), Loaded::Whole),
                Reads::Part(named) => (
                    project(&self.queue, named),
                    Loaded::Part {
                        reads: named.clone(),
                        queue_rows: self.queue.entries.len(),
                    },
                ),
            };
            let decided = decide(
                section,
                &part,
                &loaded,
                world,
                fleet.as_ref(),
                |need, into| {
                    rounds.push(need.clone());
                    if need.tasks.iter().any(|t| self.unreadable_tasks.contains(t)) {
                        return Err(need.group);
                    }
                    self.read(need, into);
                    Ok(())
                },
            );
            match decided {
                Ok((after, Step { writes, effect })) => {
                    let queue = match loaded {
                        Loaded::Whole => after,
                        Loaded::Part { .. } => {
                            let mut full = self.queue.clone();
                            merge(&mut full, &part, &after);
                            full
                        }
                    };
                    let ran = Ran {
                        effect,
                        writes,
                        rounds,
                        loads,
                    };
                    return Ok((queue, ran));
                }
                Err(Undecided::Widen(next)) => reads = next,
                Err(other) => return Err((other, loads)),
            }
        }
        panic!("the section asked for more of the queue after {MAX_LOADS} loads: {loads:?}");
    }

    /// Decides `section` and applies its decision to this home.
    pub fn run<X: Section>(
        &mut self,
        section: &X,
        world: &World,
        fleet: Option<&FleetView>,
    ) -> Ran<X::Effect>
    where
        X::Effect: std::fmt::Debug,
    {
        let (queue, ran) = match self.decide(section, world, fleet) {
            Ok(decided) => decided,
            Err((undecided, loads)) => {
                panic!("the section stayed undecided: {undecided:?} (loaded {loads:?})")
            }
        };
        self.queue = queue;
        self.apply(&ran.writes);
        ran
    }

    /// Decides `section` and applies its decision as the shell's runner does with write groups:
    /// a group the store refuses ([`Home::refused_payloads`]) rolls everything back and the
    /// section runs again told so ([`Section::without_group`]). The decision that committed, and
    /// the groups refused on the way.
    pub fn run_grouped<X: Section>(
        &mut self,
        section: X,
        world: &World,
    ) -> (Ran<X::Effect>, Vec<usize>) {
        let mut section = section;
        let mut refused = Vec::new();
        loop {
            let (queue, ran) = match self.decide(&section, world, None) {
                Ok(decided) => decided,
                Err((Undecided::Read(Some(group)), _)) => {
                    refused.push(group);
                    section = section
                        .without_group(group, format!("group {group} unreadable"))
                        .expect("an unreadable group runs again");
                    continue;
                }
                Err((undecided, loads)) => {
                    panic!("the section stayed undecided: {undecided:?} (loaded {loads:?})")
                }
            };
            let mut after = self.clone();
            after.queue = queue;
            match after.try_apply(&ran.writes) {
                Ok(()) => {
                    *self = after;
                    return (ran, refused);
                }
                Err(group) => {
                    refused.push(group);
                    section = section
                        .without_group(group, format!("group {group} refused"))
                        .expect("a refused group runs again");
                }
            }
        }
    }

    /// Applies `writes` and then each group; `Err` names the first group refused (what was
    /// applied is then the caller's to throw away).
    fn try_apply(&mut self, writes: &Writes) -> Result<(), usize> {
        self.apply(writes);
        for (index, group) in writes.groups.iter().enumerate() {
            if group
                .payloads
                .iter()
                .any(|p| self.refused_payloads.contains(&p.delivery))
            {
                return Err(index);
            }
            self.apply(group);
        }
        Ok(())
    }

    /// Applies `writes` (not its groups) in the order a store does; a mark over a live one
    /// fails the test (the table's unique key would refuse it).
    pub fn apply(&mut self, writes: &Writes) {
        for write in writes.in_order() {
            match write {
                RecordWrite::Task(task) => {
                    self.leftover_tasks.remove(&task.name);
                    self.tasks.insert(task.name.clone(), task.clone());
                }
                RecordWrite::Turn(turn) => {
                    if turn.create {
                        assert!(
                            !self.turns.contains_key(&turn.record.key),
                            "a new turn over a record"
                        );
                    }
                    self.leftover_turns.remove(&turn.record.key);
                    self.turns
                        .insert(turn.record.key.clone(), turn.record.clone());
                }
                RecordWrite::RemoveTurn(key) => {
                    self.turns.remove(key);
                }
                RecordWrite::RemoveTask(task) => {
                    self.tasks.remove(task);
                }
            }
        }
        if let Some(leases) = &writes.leases {
            self.leases = leases.clone();
        }
        for mark in &writes.marks {
            if let Some(expires) = self.marks.get(&mark.identity) {
                assert!(
                    *expires <= mark.marked_at_millis,
                    "a mark written over a live one: {mark:?}"
                );
            }
            self.marks
                .insert(mark.identity.clone(), mark.expires_at_millis);
        }
        for payload in &writes.payloads {
            self.payloads.insert(
                payload.delivery.clone(),
                (payload.key.clone(), payload.body.clone()),
            );
        }
    }

    pub fn turn(&self, key: &TurnKey) -> &TurnRecord {
        self.turns
            .get(key)
            .unwrap_or_else(|| panic!("no record of {key}"))
    }
}

/// A detached submit of `new` to `task` by `me` at `now_millis`, on one slot.
pub fn submit_to<'a>(
    task: Option<&'a str>,
    new: &'a NewTurn,
    me: ProcessIdentity,
    n: u128,
    now_millis: u64,
) -> SubmitSection<'a> {
    SubmitSection {
        task,
        fallback_task: "fallback",
        planned: task,
        strategy: None,
        new,
        schedule: Schedule::default(),
        me,
        fresh_token: token(n),
        now_millis,
        cap: 1,
    }
}

/// Submits a turn of `true` to `task` with `strategy`; what the submit decided.
pub fn submit(
    home: &mut Home,
    world: &World,
    task: &str,
    strategy: Option<Strategy>,
    n: u128,
    now_millis: u64,
) -> Ran<Submitted> {
    let new = NewTurn {
        argv: argv(&["true"]),
        ..NewTurn::default()
    };
    let section = SubmitSection {
        strategy,
        ..submit_to(Some(task), &new, id(1), n, now_millis)
    };
    home.run(&section, world, None)
}

/// The key of a submit that placed its turn with a spawn.
pub fn spawned(submitted: &Submitted) -> &TurnKey {
    assert!(
        matches!(submitted.placement, Placement::Spawn(_)),
        "{submitted:?}"
    );
    &submitted.key
}

/// Hands `submitted`'s spawn to runner `child` (both publishes) and lets it take its slot over
/// and record its start, with `world` seeing `child` alive: the turn runs as the returned work.
pub fn start(
    home: &mut Home,
    world: &mut World,
    submitted: &Submitted,
    child: ProcessIdentity,
    fleet: Option<&FleetView>,
) -> WorkId {
    use tollgate_core::slots::sections::{PublishFirst, PublishSecond, TakeOverSection};
    use tollgate_core::slots::steps::TakeOverEffect;
    let Placement::Spawn(handoff) = &submitted.placement else {
        panic!("not a spawn: {submitted:?}");
    };
    world.live.insert(child);
    let first = PublishFirst {
        handoff: handoff.clone(),
        child,
    };
    let bound = home
        .run(&first, world, fleet)
        .effect
        .expect("the first publish");
    let token = bound.token();
    home.run(&PublishSecond { bound }, world, fleet)
        .effect
        .expect("the second publish");
    let take_over = TakeOverSection {
        key: &submitted.key,
        token,
        me: child,
        cgroup: None,
        record_started: true,
        now_millis: 2_000,
    };
    match home.run(&take_over, world, fleet).effect.0 {
        TakeOverEffect::Run { work } => work,
        other => panic!("the take-over did not run: {other:?}"),
    }
}

/// The first record of turn `key` (of `true`) with short id `id`, as a submit writes it.
pub fn record(key: &TurnKey, id: u64) -> TurnRecord {
    let empty = Records::default();
    let mut draft = tollgate_core::section::Draft::new(&empty);
    let new = NewTurn {
        argv: argv(&["true"]),
        ..NewTurn::default()
    };
    tollgate_core::turns::create_turn(&mut draft, key.clone(), new, Some(id), 0)
        .expect("a valid record")
}

/// A task record of `name` whose counter says `next_turn`.
pub fn task(name: &str, next_turn: u32, strategy: Strategy) -> TaskRecord {
    TaskRecord {
        version: tollgate_core::records::TASK_FORMAT_VERSION,
        name: name.to_string(),
        created_at_millis: 0,
        next_turn,
        strategy,
    }
}
