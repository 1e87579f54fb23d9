//! Issue 14's fleet acceptance (spec/fleet.md, "Acceptance"): three "hosts" on this machine
//! (three homes with distinct `host` settings on one PostgreSQL queue), a global cap of 3
//! (`workers = 3` in each), 60 concurrent `tollgate submit` processes spread over the three homes,
//! and seeded SIGKILLs at random moments to submitters and to runners of every host. An
//! independent `/proc` sampler (this test's own thread, matching the test's tag, never tollgate's
//! marker) counts the live works: never more than 3 at one moment (`S1` fleet-wide), never two of
//! one turn (`S2`). Then `reconcile` on each home until the queue drains (bounded), and every
//! accepted turn finished exactly once (nothing lost).
//!
//! What "ran" and "finished" mean here, exactly: each turn's command appends to its own marker
//! file `marks/<task>`. A run that starts writes `start <pid>`, sleeps, and writes `end <pid>`:
//! a run *finished* when its `end` line is there. A run killed part-way (its runner was SIGKILLed,
//! the command dies with it) leaves a `start` without an `end`; the turn then runs again. A run
//! that finds an `end` already there writes `again <pid>` and exits 0 without doing the work (an
//! idempotent command: a runner SIGKILLed after its command ended but before it recorded the
//! result makes its turn run again, which is at-least-once by design, spec/execution.md). So
//! "finished exactly once" is: exactly one `end` line, and every `start` line without an `end`
//! belongs to a run that was killed. Two runs of one turn at once would both write `end` (each
//! saw none when it started), and the sampler would see them both live.
//!
//! The sampler's unit is a *copy*: the `COPY=<task>:<leader pid>` value the command's first
//! process exports to the `sleep` it starts, so two runs of one turn are two copies with one
//! task. It counts only copies confirmed alive at one instant (`common::containment::confirmed`:
//! a `/proc` scan is not a snapshot).
//!
//! Sizes: 60 submitters by default (about a minute on the 2 shared cores of CI);
//! `TOLLGATE_FLEET_ACCEPT_SUBMITTERS=N` runs N, `TOLLGATE_FLEET_ACCEPT_SEED=S` another storm (the
//! test prints the seed it ran). The random pauses are when a SIGKILL lands, never a wait for
//! something to happen: every wait is a bounded poll of observable state.
//!
//! The server is `TOLLGATE_TEST_POSTGRES`: unset, the test skips with a message; with
//! `TOLLGATE_REQUIRE_POSTGRES=1` a missing server fails it.
mod common;

use common::containment::{confirmed, copies, runners, sigkill, unique_tag, Reaper, TAG_VAR};
use common::postgres::server;
use common::storm::{env_u64, Rng};
use common::{describe, BIN};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const HOSTS: usize = 3;
const CAP: usize = 3;
const DEFAULT_SUBMITTERS: u64 = 60;
const DEFAULT_SEED: u64 = 0x0f1e_e7ac_ce97;
/// Short leases (`TOLLGATE_LEASE_MILLIS`): a SIGKILLed runner's slot is free for another host
/// 3 s after its last renewal, so the drain after the storm takes seconds, not half a minute.
const LEASE_MILLIS: &str = "3000";

/// `tollgate --home HOME ARGS` with the test's lease numbers; the host is the home's `host`
/// setting (no `TOLLGATE_HOST`, no `TOLLGATE_STORE`: each home's tollgate.toml says it all).
fn tollgate(home: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .arg("--home")
        .arg(home)
        .args(args)
        .env("TOLLGATE_LEASE_MILLIS", LEASE_MILLIS)
        .env_remove("TOLLGATE_HOST")
        .env_remove("TOLLGATE_STORE")
        .stdin(Stdio::null());
    command
}

fn run_ok(home: &Path, args: &[&str]) -> Output {
    let out = tollgate(home, args).output().expect("run tollgate");
    assert!(out.status.success(), "{args:?}: {}", describe(&out));
    out
}

/// The parent pid of `pid`, from `/proc/<pid>/stat`.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The runners of `home` whose turn's command runs now (a tagged process is their child).
fn busy_runners(home: &Path, tag: &str) -> Vec<i32> {
    let parents: BTreeSet<i32> = common::containment::tagged(tag)
        .into_iter()
        .filter_map(parent_of)
        .collect();
    runners(home)
        .into_iter()
        .filter(|pid| parents.contains(pid))
        .collect()
}

/// What the sampler saw: the most copies confirmed live at one moment (with them), and every
/// moment two copies of one turn were confirmed live together.
#[derive(Clone, Debug, Default)]
struct Seen {
    samples: u64,
    peak: usize,
    peak_witnesses: Vec<(String, i32)>,
    doubles: Vec<Vec<(String, i32)>>,
}

/// A thread scanning `/proc` as fast as it can: each scan's copies of the tag, grouped by task.
/// Confirming (a stat per copy, see [`confirmed`]) only when the scan could break a bound.
struct Sampler {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn task_of(copy: &str) -> &str {
    copy.split_once(':').map_or(copy, |(task, _)| task)
}

impl Sampler {
    fn start(tag: &str) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let thread = {
            let (stop, seen, tag) = (Arc::clone(&stop), Arc::clone(&seen), tag.to_string());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let (found, _) = copies(&tag);
                    let mut per_task: BTreeMap<String, usize> = BTreeMap::new();
                    for copy in found.keys() {
                        *per_task
                            .entry(task_of(&String::from_utf8_lossy(copy)).to_string())
                            .or_default() += 1;
                    }
                    let peak = seen.lock().unwrap_or_else(|e| e.into_inner()).peak;
                    let suspicious = found.len() > peak || per_task.values().any(|&n| n > 1);
                    let live = if suspicious {
                        confirmed(&found)
                    } else {
                        Vec::new()
                    };
                    let mut tasks: BTreeMap<&str, usize> = BTreeMap::new();
                    for (copy, _) in &live {
                        *tasks.entry(task_of(copy)).or_default() += 1;
                    }
                    let mut report = seen.lock().unwrap_or_else(|e| e.into_inner());
                    report.samples += 1;
                    if tasks.values().any(|&n| n > 1) && report.doubles.len() < 10 {
                        report.doubles.push(live.clone());
                    }
                    if live.len() > report.peak {
                        report.peak = live.len();
                        report.peak_witnesses = live;
                    }
                }
            })
        };
        Sampler {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    fn report(&self) -> Seen {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn finish(mut self) -> Seen {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.report()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// SIGKILLs the homes' runners when the test ends, passed or failed (the tagged commands are
/// the [`Reaper`]'s).
struct RunnerReaper(Vec<PathBuf>);

impl Drop for RunnerReaper {
    fn drop(&mut self) {
        for home in &self.0 {
            for pid in runners(home) {
                sigkill(pid);
            }
        }
    }
}

/// The turn's command for task `task`: see the module docs for its marker lines.
fn script(marks: &Path, task: &str) -> String {
    let m = marks.join(task);
    let m = m.display();
    format!(
        "if grep -q '^end ' {m} 2>/dev/null; then echo \"again $$\" >> {m}; exit 0; fi; \
         export COPY={task}:$$; echo \"start $$\" >> {m}; sleep 0.5; echo \"end $$\" >> {m}"
    )
}

/// `submit --json --task TASK` of [`script`] on `home`, tagged with `tag_env` (`TEST_TAG=…`).
fn submit_marked(home: &Path, task: &str, tag_env: &str, marks: &Path) -> Command {
    tollgate(
        home,
        &[
            "submit",
            "--json",
            "--task",
            task,
            "--env",
            tag_env,
            "--",
            "sh",
            "-c",
            &script(marks, task),
        ],
    )
}

/// Three homes on one queue of the test server, each its own `host`, each `workers = 3`.
fn fleet_homes(dir: &Path, url: &str) -> Vec<PathBuf> {
    let queue = format!("accept-{}", unique_tag("q"));
    let sep = if url.contains('?') { '&' } else { '?' };
    let store = format!("{url}{sep}queue={queue}");
    (0..HOSTS)
        .map(|i| {
            let home = common::init_home(&dir.join(format!("host{i}")), CAP);
            let config = home.join("tollgate.toml");
            let mut text = std::fs::read_to_string(&config).expect("config");
            text.push_str(&format!("store = {store:?}\nhost = \"accept-{i}\"\n"));
            std::fs::write(&config, text).expect("write config");
            home
        })
        .collect()
}

/// `status --json` of `home`: the queue's rows, and each task's turns' states.
fn status(home: &Path) -> (usize, BTreeMap<String, Vec<String>>) {
    // Every turn, not only the newest ended ones the home's view shows.
    let out = run_ok(home, &["status", "--json", "--all"]);
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status json");
    let rows = view["rows"].as_array().map_or(0, Vec::len);
    let mut tasks = BTreeMap::new();
    for task in view["tasks"].as_array().into_iter().flatten() {
        let states = task["turns"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| t["state"].as_str().unwrap_or("?").to_string())
            .collect();
        tasks.insert(task["name"].as_str().unwrap_or("?").to_string(), states);
    }
    (rows, tasks)
}

/// One submitter: its task, its home's index, and its process.
struct Submitter {
    task: String,
    host: usize,
    child: Child,
    killed: bool,
}

#[test]
fn three_hosts_sixty_submitters_and_sigkills_never_exceed_the_global_cap_and_lose_nothing() {
    let Some(url) = server() else { return };
    let submitters = env_u64("TOLLGATE_FLEET_ACCEPT_SUBMITTERS", DEFAULT_SUBMITTERS) as usize;
    let seed = env_u64("TOLLGATE_FLEET_ACCEPT_SEED", DEFAULT_SEED);
    eprintln!("{submitters} submitters, seed {seed:#x} (TOLLGATE_FLEET_ACCEPT_SEED)");
    let tmp = tempfile::tempdir().expect("tempdir");
    let homes = fleet_homes(tmp.path(), &url);
    let marks = tmp.path().join("marks");
    std::fs::create_dir(&marks).expect("marks dir");
    let tag = unique_tag("fleet-accept");
    let _reaper = Reaper::new(&tag);
    let _runner_reaper = RunnerReaper(homes.clone());
    let tag_env = format!("{TAG_VAR}={tag}");
    let mut rng = Rng(seed | 1);
    let sampler = Sampler::start(&tag);
    let started = Instant::now();

    // The storm: the submitters start in a burst (a few milliseconds apart), and between
    // starts a SIGKILL lands on a submitter still running or on a runner of some host.
    let mut subs: Vec<Submitter> = Vec::new();
    let mut runner_kills = [0usize; HOSTS];
    let mut submitter_kills = 0usize;
    // A runner whose command runs, if the host has one: its SIGKILL kills a run part-way.
    let kill_runner_of = |host: usize, rng: &mut Rng, kills: &mut [usize; HOSTS]| {
        let busy = busy_runners(&homes[host], &tag);
        let live = if busy.is_empty() {
            runners(&homes[host])
        } else {
            busy
        };
        if !live.is_empty() {
            sigkill(live[rng.below(live.len() as u64) as usize]);
            kills[host] += 1;
        }
    };
    for i in 0..submitters {
        let host = i % HOSTS;
        let task = format!("t{i}");
        let child = submit_marked(&homes[host], &task, &tag_env, &marks)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn submit");
        subs.push(Submitter {
            task,
            host,
            child,
            killed: false,
        });
        std::thread::sleep(Duration::from_micros(rng.below(20_000)));
        match rng.below(6) {
            0 => {
                // A submitter at a random moment of its life (it may have ended already).
                let k = rng.below(subs.len() as u64) as usize;
                if !subs[k].killed && matches!(subs[k].child.try_wait(), Ok(None)) {
                    sigkill(subs[k].child.id() as i32);
                    subs[k].killed = true;
                    submitter_kills += 1;
                }
            }
            1 => {
                let host = rng.below(HOSTS as u64) as usize;
                kill_runner_of(host, &mut rng, &mut runner_kills);
            }
            _ => {}
        }
    }
    // Runners of every host die: a runner runs on the host whose process handed its turn off
    // (a finishing runner starts the next parked row itself), so after the burst one host may
    // have had none to kill. For each such host: its `reconcile` starts parked turns there
    // (taking other hosts' slots once their killed runners' leases expired), or, once the queue
    // is empty, a probe submit of its own does; a SIGKILL lands on one of its runners at a
    // random moment of its turn.
    let mut probes: Vec<(String, usize, Output)> = Vec::new();
    let until = Instant::now() + Duration::from_secs(40);
    for host in 0..HOSTS {
        while runner_kills[host] == 0 {
            assert!(
                Instant::now() < until,
                "seed {seed:#x}: host {host} never started a runner of its own: {runner_kills:?}"
            );
            // This host's reconcile repairs what the storm left (another host's slot once its
            // lease expired) and starts parked turns here; then one of its runners dies.
            run_ok(&homes[host], &["reconcile"]);
            if !runners(&homes[host]).is_empty() {
                // Its command starts (bounded), then the SIGKILL lands within its half second.
                let started = Instant::now();
                while busy_runners(&homes[host], &tag).is_empty()
                    && !runners(&homes[host]).is_empty()
                    && started.elapsed() < Duration::from_secs(5)
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                std::thread::sleep(Duration::from_micros(rng.below(200_000)));
                kill_runner_of(host, &mut rng, &mut runner_kills);
                continue;
            }
            if status(&homes[host]).0 > 0 {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            let task = format!("p{host}-{}", probes.len());
            let out = submit_marked(&homes[host], &task, &tag_env, &marks)
                .output()
                .expect("run submit");
            assert!(out.status.success(), "{task}: {}", describe(&out));
            let view: serde_json::Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{task}: submit json: {e}: {}", describe(&out)));
            // A runner it started is this host's: the next round kills it.
            assert_eq!(view["task"], task.as_str(), "{view}");
            probes.push((task, host, out));
        }
    }
    // Which submits were accepted: exit 0 with the turn's JSON (`queued` or `started`).
    let mut accepted: BTreeMap<String, usize> = BTreeMap::new();
    let mut refused = Vec::new();
    for sub in subs {
        let out = sub.child.wait_with_output().expect("wait for submit");
        if out.status.success() {
            let view: serde_json::Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{}: submit json: {e}: {}", sub.task, describe(&out)));
            assert_eq!(view["task"], sub.task.as_str(), "{view}");
            accepted.insert(sub.task, sub.host);
        } else if !sub.killed {
            refused.push((sub.task, describe(&out)));
        }
    }
    for (task, host, _) in probes {
        accepted.insert(task, host);
    }
    // Nobody was refused: 60 submitters contend for the database's lock, well within its wait.
    assert!(refused.is_empty(), "refused submits: {refused:?}");

    // Repair: `reconcile` on every home until the queue is empty, no runner and no work is
    // left (bounded: the killed runners' leases expire 3 s after their last renewal).
    let until = Instant::now() + Duration::from_secs(60);
    let tasks = loop {
        for home in &homes {
            run_ok(home, &["reconcile"]);
        }
        let (rows, tasks) = status(&homes[0]);
        let idle = homes.iter().all(|h| runners(h).is_empty());
        if rows == 0 && idle && common::containment::tagged(&tag).is_empty() {
            break tasks;
        }
        assert!(
            Instant::now() < until,
            "seed {seed:#x}: not drained within 60 s: {rows} rows, tasks {tasks:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let report = sampler.finish();
    let took = started.elapsed();

    // Nothing lost: every accepted turn finished exactly once; so did every turn a killed
    // submitter managed to queue; no turn is left in any other state.
    let mut problems = Vec::new();
    let mut reran = 0usize;
    let mut killed_runs = 0usize;
    for (task, states) in &tasks {
        if states != &["completed".to_string()] {
            problems.push(format!("{task}: turns {states:?}"));
        }
    }
    let listed: BTreeSet<&String> = tasks.keys().collect();
    for task in accepted.keys() {
        if !listed.contains(task) {
            problems.push(format!("{task}: accepted, but no turn of it is recorded"));
        }
    }
    for task in &listed {
        let text = std::fs::read_to_string(marks.join(task)).unwrap_or_default();
        let ends = text.lines().filter(|l| l.starts_with("end ")).count();
        let starts = text.lines().filter(|l| l.starts_with("start ")).count();
        reran += text.lines().filter(|l| l.starts_with("again ")).count();
        killed_runs += starts.saturating_sub(ends);
        if ends != 1 || starts < 1 {
            problems.push(format!("{task}: marker {text:?}"));
        }
    }
    eprintln!(
        "seed {seed:#x}: {} accepted of {submitters} in {took:?}; SIGKILLs: submitters \
         {submitter_kills}, runners per host {runner_kills:?}; runs killed part-way {killed_runs}, \
         reruns after an end {reran}; sampler {} samples, peak {} {:?}",
        accepted.len(),
        report.samples,
        report.peak,
        report.peak_witnesses
    );
    assert!(
        report.peak <= CAP,
        "seed {seed:#x}: {} works live at once with a global cap of {CAP}: {:?}",
        report.peak,
        report.peak_witnesses
    );
    assert!(
        report.doubles.is_empty(),
        "seed {seed:#x}: two works of one turn live at once: {:?}",
        report.doubles
    );
    assert!(report.peak >= 1, "no work was ever seen: {report:?}");
    assert!(problems.is_empty(), "seed {seed:#x}: {problems:#?}");
    assert!(
        killed_runs >= 1,
        "seed {seed:#x}: no run was killed part-way: the storm tested no rerun"
    );
}
