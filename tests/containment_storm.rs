//! Crash storm (issue "Turn containment", acceptance 2): seeded rounds of SIGKILLs at random
//! moments to submitters, runners, reconcilers and turn commands, each turn's work a tree with a
//! child and a `setsid` grandchild. An independent `/proc` sampler counts live *works* (distinct
//! `COPY=<leader pid>` values among the test's tagged processes, grandchildren included), and the
//! peak never exceeds `workers`. After the storm, `reconcile` and `cancel` leave nothing alive.
//!
//! `TOLLGATE_STORM_ROUNDS` (default 200 per containment path) and `TOLLGATE_STORM_SEED` choose the
//! size and the seed; the test prints both, so a failure reproduces. The random pauses are the
//! fault injection's timing (when a SIGKILL lands), never a wait for something to happen: every
//! wait here is a bounded poll of observable state.

mod common;

use common::containment::{no_cgroup_value, paths, runners, sigkill, tagged, Reaper, Sampler};
use common::storm::{env_u64, Rng};
use common::{describe, BIN};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const WORKERS: usize = 2;
const DEFAULT_ROUNDS: u64 = 200;
const DEFAULT_SEED: u64 = 0x5eed_7011_6a7e;

struct Storm<'a> {
    home: &'a Path,
    tag: String,
    force_subreaper: bool,
    rng: Rng,
    submitted: usize,
    killed: [usize; 4],
    /// Every runner pid seen (their works' groups are named after them).
    runner_pids: std::collections::BTreeSet<i32>,
}

fn command(home: &Path, force_subreaper: bool, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("--home")
        .arg(home)
        .args(args)
        .env("TOLLGATE_NO_CGROUP", no_cgroup_value(force_subreaper))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

fn run(home: &Path, force_subreaper: bool, args: &[&str]) -> Output {
    let mut cmd = command(home, force_subreaper, args);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.output().expect("run tollgate")
}

impl Storm<'_> {
    /// A pause of up to `max_micros`: when the next SIGKILL lands.
    fn pause(&mut self, max_micros: u64) {
        std::thread::sleep(Duration::from_micros(self.rng.below(max_micros)));
    }

    /// Starts `child` and, half the time, SIGKILLs it at a random moment; reaps it either way.
    fn maybe_kill(&mut self, mut child: Child, kind: usize) {
        if self.rng.below(2) == 0 {
            self.pause(30_000);
            sigkill(child.id() as i32);
            self.killed[kind] += 1;
        }
        let _ = child.wait();
    }

    fn submit(&mut self) {
        self.submitted += 1;
        let task = format!("t{}", self.submitted);
        let tag_env = format!("TEST_TAG={}", self.tag);
        // A tree: the leader, a child, and a setsid grandchild, all carrying COPY.
        let script = "export COPY=$$; sleep 0.3 & setsid sh -c 'sleep 0.4' & sleep 0.2; wait";
        let child = command(
            self.home,
            self.force_subreaper,
            &[
                "submit", "--task", &task, "--env", &tag_env, "--", "sh", "-c", script,
            ],
        )
        .spawn()
        .expect("spawn submit");
        self.maybe_kill(child, 0);
    }

    fn reconcile(&mut self) {
        let child = command(self.home, self.force_subreaper, &["reconcile"])
            .spawn()
            .expect("spawn reconcile");
        self.maybe_kill(child, 2);
    }

    fn kill_a_runner(&mut self) {
        let live = runners(self.home);
        if !live.is_empty() {
            sigkill(live[self.rng.below(live.len() as u64) as usize]);
            self.killed[1] += 1;
        }
    }

    fn kill_a_command(&mut self) {
        let live = tagged(&self.tag);
        if !live.is_empty() {
            sigkill(live[self.rng.below(live.len() as u64) as usize]);
            self.killed[3] += 1;
        }
    }
}

fn storm(path: &str, force_subreaper: bool, rounds: u64, seed: u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    let tag = common::containment::unique_tag("storm");
    let _reaper = Reaper::new(&tag);
    let init = run(
        &home,
        force_subreaper,
        &["init", "--workers", &WORKERS.to_string()],
    );
    assert!(init.status.success(), "{}", describe(&init));
    let sampler = Sampler::start(&tag);
    let started = Instant::now();
    let mut storm = Storm {
        home: &home,
        tag: tag.clone(),
        force_subreaper,
        rng: Rng(seed | 1),
        submitted: 0,
        killed: [0; 4],
        runner_pids: std::collections::BTreeSet::new(),
    };
    for _ in 0..rounds {
        storm.runner_pids.extend(runners(&home));
        match storm.rng.below(10) {
            0..=3 => storm.submit(),
            4 | 5 => storm.kill_a_runner(),
            6 | 7 => storm.reconcile(),
            _ => storm.kill_a_command(),
        }
        let seen = sampler.report();
        assert!(
            seen.peak_copies <= WORKERS,
            "{path}, seed {seed}: {} live works with {WORKERS} workers: {seen:?}",
            seen.peak_copies
        );
    }
    let storm_took = started.elapsed();
    // Repair what the storm left, then end everything: nothing of any tree may survive.
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let out = run(&home, force_subreaper, &["reconcile"]);
        assert!(out.status.success(), "{}", describe(&out));
        for i in 1..=storm.submitted {
            let _ = run(&home, force_subreaper, &["cancel", &format!("t{i}")]);
        }
        // Read through the library: `status` would repair what it looks at.
        let queue = {
            let config = tollgate::config::Config::load(&home.join("tollgate.toml"))
                .expect("config")
                .unwrap_or_default();
            tollgate::queue::HomeStore::for_home(&tollgate::home::Home::at(&home), &config)
                .load()
                .expect("load the queue")
        };
        let empty = queue.entries.is_empty();
        storm.runner_pids.extend(runners(&home));
        if tagged(&tag).is_empty() && runners(&home).is_empty() && empty {
            break;
        }
        assert!(
            Instant::now() < until,
            "{path}, seed {seed}: after the storm, still alive {:?}, runners {:?}, queue {queue:?}",
            tagged(&tag),
            runners(&home)
        );
    }
    let report = sampler.finish();
    if !force_subreaper {
        // The runners SIGKILLed while their works then ended by themselves left empty groups;
        // the repair after `status` removes those of dead owners.
        let out = run(&home, force_subreaper, &["status"]);
        assert!(out.status.success(), "{}", describe(&out));
        let mut ours = Vec::new();
        for entry in std::fs::read_dir("/sys/fs/cgroup/unified")
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            let owner = name
                .strip_prefix("tollgate-")
                .and_then(|r| r.split('-').next())
                .and_then(|p| p.parse::<i32>().ok());
            if name.contains("-work-") && owner.is_some_and(|p| storm.runner_pids.contains(&p)) {
                ours.push(name);
            }
        }
        assert!(
            ours.is_empty(),
            "{path}: groups left by this storm's runners: {ours:?}"
        );
    }
    eprintln!(
        "{path} path, seed {seed:#x}, {rounds} rounds in {storm_took:?}: {} submits, SIGKILLs \
         submitters {} runners {} reconcilers {} commands {}; sampler {report:?}",
        storm.submitted, storm.killed[0], storm.killed[1], storm.killed[2], storm.killed[3]
    );
    assert!(
        report.peak_copies <= WORKERS,
        "{path}, seed {seed}: peak {} live works with {WORKERS} workers",
        report.peak_copies
    );
    assert!(report.peak_copies >= 1, "no work ever ran: {report:?}");
    assert!(
        storm.killed.iter().all(|&k| k > 0),
        "{path}: some kind of process was never killed: {:?}",
        storm.killed
    );
}

#[test]
fn a_crash_storm_never_runs_more_works_than_workers() {
    let rounds = env_u64("TOLLGATE_STORM_ROUNDS", DEFAULT_ROUNDS);
    let seed = env_u64("TOLLGATE_STORM_SEED", DEFAULT_SEED);
    for (path, force_subreaper) in paths() {
        storm(path, force_subreaper, rounds, seed);
    }
}
