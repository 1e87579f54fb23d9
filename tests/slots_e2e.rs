//! End-to-end tests of the slot protocol with real processes (spec/invariants.md S1, S2, S6, S9).
//!
//! Each test makes a temp home with `--workers 2`, starts 40 `tollgate submit` processes at once
//! (released together by a barrier, one thread per submitter), and meanwhile samples `/proc`
//! directly (never tollgate's own files) for live detached runners.
//!
//! What the sampler counts as a live runner (S1 speaks of "spawned children that took their slot
//! over and have not finished"):
//! - a process that is not a zombie, whose argv holds `worker` followed by `runner`, and whose argv
//!   holds this test's home path as one element (so other homes on the machine never count);
//! - that is past take-over, judged by the one thing only a runner that took its slot over does:
//!   it has a live (non-zombie) child that is not itself a runner. A runner's only children are the
//!   turn's command (`execute_turn`) and, while leaving, the next runner it starts; the latter is
//!   excluded by its argv. So a runner is counted from the moment its command is spawned until the
//!   command is reaped: a runner between take-over and spawn, or leaving, is not counted (an
//!   undercount of those short windows, never an overcount).
//!
//! A `/proc` scan is not atomic: a runner seen early in a scan may have ended before one seen late
//! in it started. So a scan is confirmed by a second pass over the candidates found: a candidate
//! counts only if its runner and its child are both seen again with the same pid and start time
//! (and the same parent). A process seen alive at t1 and t3 was alive for all of [t1, t3]; as every
//! first sighting precedes every second one, all confirmed candidates were alive together at the
//! end of the first pass. The confirmed count is therefore a sound lower bound of the real
//! simultaneous count: a value above `workers` is a real S1 violation, not a sampling artefact.
mod common;

use common::{describe, tollgate, BIN};

use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const WORKERS: usize = 2;
const SUBMITTERS: usize = 40;
/// Bound on waiting for the queue to drain (only reached on failure).
const DRAIN_DEADLINE: Duration = Duration::from_secs(120);
/// Pause between two polls of `status --json` (a poll period, not an ordering device).
const POLL: Duration = Duration::from_millis(50);
/// Pause between two `/proc` samples, so the sampler leaves CPU to the runners it watches.
const SAMPLE_PAUSE: Duration = Duration::from_millis(1);

/// The two tests each start dozens of processes; running them one at a time keeps each one's
/// picture (and its runtime) independent of the other on a small machine.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Running the binary

fn init_home(home: &Path) {
    let out = tollgate(home, &["init", "--workers", &WORKERS.to_string()]);
    assert!(out.status.success(), "init failed: {}", describe(&out));
}

fn status_json(home: &Path) -> Value {
    // Every turn, not only the newest ended ones the home's view shows.
    let out = tollgate(home, &["status", "--json", "--all"]);
    assert!(out.status.success(), "status failed: {}", describe(&out));
    serde_json::from_slice(&out.stdout).expect("status --json is JSON")
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// The submit command of turn `i`: appends its number to `lines`, then holds its slot a while.
fn submit_args(home: &Path, i: usize, lines: &Path) -> Command {
    let script = format!("echo {i} >> '{}'; sleep 0.2", lines.display());
    let mut command = Command::new(BIN);
    command
        .arg("--home")
        .arg(home)
        .args(["submit", "--task", &format!("t{i}"), "--", "sh", "-c"])
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// How many times each number appears in the lines file.
fn line_counts(lines: &Path) -> (BTreeMap<usize, usize>, String) {
    let text = std::fs::read_to_string(lines).unwrap_or_default();
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let n: usize = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("unexpected line {line:?} in:\n{text}"));
        *counts.entry(n).or_insert(0) += 1;
    }
    (counts, text)
}

/// Every turn record of the home (in its database, or its files): (task, turn) -> record.
fn turn_records(home: &Path) -> BTreeMap<(String, u32), Value> {
    let home = tollgate::home::Home::at(home);
    let mut records = BTreeMap::new();
    for task in tollgate::tasks::list_tasks(&home).expect("list tasks") {
        for n in tollgate::tasks::list_turns(&home, &task).expect("list turns") {
            let key = tollgate::protocol::slots::TurnKey::new(task.clone(), n);
            if let Some(record) = tollgate::tasks::load_turn(&home, &key).expect("turn record") {
                records.insert(
                    (task.clone(), n),
                    serde_json::to_value(&record).expect("record as JSON"),
                );
            }
        }
    }
    records
}

// ---------------------------------------------------------------------------------------------
// The /proc sampler

#[derive(Clone, Debug, PartialEq, Eq)]
struct Proc {
    ppid: u32,
    state: char,
    start_ticks: u64,
}

fn read_stat(pid: u32) -> Option<Proc> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    // Field 22 (start time) is 18 fields after the ppid (field 4).
    let start_ticks = fields.nth(17)?.parse().ok()?;
    Some(Proc {
        ppid,
        state,
        start_ticks,
    })
}

fn read_argv(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| {
            bytes
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn is_runner_argv(argv: &[String]) -> bool {
    argv.windows(2)
        .any(|w| w[0] == "worker" && w[1] == "runner")
}

fn live(p: &Proc) -> bool {
    !matches!(p.state, 'Z' | 'X')
}

/// One runner past take-over, as the sampler saw it (the argv fields serve the failure text).
#[derive(Clone, Debug)]
#[allow(dead_code)]
struct Sighting {
    runner: u32,
    runner_stat: Proc,
    runner_argv: Vec<String>,
    child: u32,
    child_stat: Proc,
    child_argv: Vec<String>,
}

/// First pass: every live runner of `home` with a live non-runner child.
fn scan(home: &str) -> Vec<Sighting> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut procs: HashMap<u32, Proc> = HashMap::new();
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Some(stat) = read_stat(pid) {
            procs.insert(pid, stat);
        }
    }
    let mut runners: HashMap<u32, Vec<String>> = HashMap::new();
    for (pid, stat) in &procs {
        if !live(stat) {
            continue;
        }
        let argv = read_argv(*pid);
        if is_runner_argv(&argv) && argv.iter().any(|a| a == home) {
            runners.insert(*pid, argv);
        }
    }
    let mut sightings = Vec::new();
    for (pid, stat) in &procs {
        let Some(runner_argv) = runners.get(&stat.ppid) else {
            continue;
        };
        if !live(stat) {
            continue;
        }
        let child_argv = read_argv(*pid);
        if child_argv.is_empty() || is_runner_argv(&child_argv) {
            continue;
        }
        sightings.push(Sighting {
            runner: stat.ppid,
            runner_stat: procs[&stat.ppid].clone(),
            runner_argv: runner_argv.clone(),
            child: *pid,
            child_stat: stat.clone(),
            child_argv,
        });
    }
    // One runner with two command children would still be one runner.
    sightings.sort_by_key(|s| (s.runner, s.child));
    sightings.dedup_by_key(|s| s.runner);
    sightings
}

/// Second pass: the sightings whose runner and child are both still the same live processes.
fn confirm(sightings: Vec<Sighting>) -> Vec<Sighting> {
    sightings
        .into_iter()
        .filter(|s| {
            let same = |pid: u32, before: &Proc| {
                read_stat(pid).is_some_and(|now| {
                    live(&now) && now.start_ticks == before.start_ticks && now.ppid == before.ppid
                })
            };
            same(s.runner, &s.runner_stat) && same(s.child, &s.child_stat)
        })
        .collect()
}

#[derive(Debug, Default)]
struct SamplerReport {
    samples: u64,
    max_live: usize,
    /// The confirmed sighting set of the first sample that exceeded the cap, for the failure text.
    worst: Vec<Sighting>,
}

/// Samples until `stop` is set (or a deadline passes, as a safety bound).
fn spawn_sampler(home: PathBuf, stop: Arc<AtomicBool>) -> thread::JoinHandle<SamplerReport> {
    thread::spawn(move || {
        let home = home.display().to_string();
        let deadline = Instant::now() + DRAIN_DEADLINE + Duration::from_secs(30);
        let mut report = SamplerReport::default();
        while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
            let confirmed = confirm(scan(&home));
            report.samples += 1;
            if confirmed.len() > report.max_live {
                report.max_live = confirmed.len();
                if confirmed.len() > WORKERS {
                    report.worst = confirmed;
                }
            }
            thread::sleep(SAMPLE_PAUSE);
        }
        report
    })
}

fn check_s1(report: &SamplerReport, context: &str) {
    eprintln!(
        "sampler: {} samples, max {} live runners past take-over",
        report.samples, report.max_live
    );
    assert!(
        report.max_live <= WORKERS,
        "S1 violated: {} live runners past take-over with --workers {WORKERS}: {:#?}\n{context}",
        report.max_live,
        report.worst
    );
    // The sampler must have seen the work, or its bound proves nothing.
    assert!(
        report.max_live >= 1,
        "the sampler never saw a runner ({} samples)\n{context}",
        report.samples
    );
}

// ---------------------------------------------------------------------------------------------
// Waiting

/// Polls `status --json` until the queue has no rows and no slot is occupied; `between` runs before
/// each poll (e.g. a `reconcile`). Panics with the last status and `context` at the deadline.
fn wait_until_drained(
    home: &Path,
    context: &dyn Fn() -> String,
    mut between: impl FnMut(),
) -> Value {
    let deadline = Instant::now() + DRAIN_DEADLINE;
    loop {
        between();
        let status = status_json(home);
        let rows = status["rows"].as_array().map_or(0, Vec::len);
        if rows == 0 && status["occupied"] == 0 {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the queue did not drain within {DRAIN_DEADLINE:?}:\n{}\n{}",
            pretty(&status),
            context()
        );
        thread::sleep(POLL);
    }
}

fn reconcile(home: &Path) -> Output {
    let out = tollgate(home, &["reconcile", "--json"]);
    assert!(out.status.success(), "reconcile failed: {}", describe(&out));
    out
}

/// The state of every turn as `status --json` reports it: (task, turn) -> state.
fn turn_states(status: &Value) -> BTreeMap<(String, u32), String> {
    let mut states = BTreeMap::new();
    for task in status["tasks"].as_array().into_iter().flatten() {
        let name = task["name"].as_str().unwrap_or_default().to_string();
        for turn in task["turns"].as_array().into_iter().flatten() {
            let n = turn["turn"].as_u64().unwrap_or_default() as u32;
            let state = turn["state"].as_str().unwrap_or_default().to_string();
            states.insert((name.clone(), n), state);
        }
    }
    states
}

// ---------------------------------------------------------------------------------------------
// Seeded randomness for the kill test

/// xorshift64*: small, seedable, good enough to spread kill moments.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        XorShift(seed.max(1))
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `TOLLGATE_E2E_SEED` if set, else a fixed seed; printed by every failure message.
fn seed() -> u64 {
    std::env::var("TOLLGATE_E2E_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5107_5eed)
}

// ---------------------------------------------------------------------------------------------
// The tests

/// S1 (cap), S2 (one executor per turn), S6 and S9 (after reconcile, nothing parked, every turn
/// ran once): 40 concurrent submits on 2 worker slots, nobody crashes.
#[test]
fn s1_s2_s9_concurrent_submits_never_exceed_the_cap_and_run_every_turn_once() {
    let _serial = serial();
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let lines = tmp.path().join("lines.txt");
    init_home(&home);

    let stop = Arc::new(AtomicBool::new(false));
    let sampler = spawn_sampler(home.clone(), stop.clone());

    let barrier = Arc::new(Barrier::new(SUBMITTERS));
    let submitters: Vec<_> = (0..SUBMITTERS)
        .map(|i| {
            let barrier = barrier.clone();
            let mut command = submit_args(&home, i, &lines);
            thread::spawn(move || {
                barrier.wait();
                command.output().expect("spawn submit")
            })
        })
        .collect();
    let outputs: Vec<Output> = submitters
        .into_iter()
        .map(|t| t.join().expect("submitter thread"))
        .collect();
    for (i, out) in outputs.iter().enumerate() {
        assert!(
            out.status.success(),
            "submit of t{i} failed: {}",
            describe(out)
        );
    }

    let context = || {
        let (_, text) = line_counts(&lines);
        format!("lines file:\n{text}")
    };
    wait_until_drained(&home, &context, || {});
    stop.store(true, Ordering::SeqCst);
    let report = sampler.join().expect("sampler thread");

    let rec = reconcile(&home);
    let status = status_json(&home);
    let context = format!(
        "reconcile: {}\nstatus:\n{}\n{}",
        String::from_utf8_lossy(&rec.stdout),
        pretty(&status),
        context()
    );
    check_s1(&report, &context);

    // S6/S9: after reconcile the queue is empty, nothing is parked and no slot is taken.
    assert_eq!(
        status["rows"].as_array().map(Vec::len),
        Some(0),
        "{context}"
    );
    assert_eq!(status["parked"], 0, "{context}");
    assert_eq!(status["occupied"], 0, "{context}");

    // S2 and S9: every turn's line is in the file exactly once.
    let (counts, _) = line_counts(&lines);
    let expected: BTreeMap<usize, usize> = (0..SUBMITTERS).map(|i| (i, 1)).collect();
    assert_eq!(counts, expected, "each turn's line exactly once\n{context}");

    // S9: every turn completed.
    let states = turn_states(&status);
    assert_eq!(states.len(), SUBMITTERS, "{context}");
    for i in 0..SUBMITTERS {
        assert_eq!(
            states.get(&(format!("t{i}"), 1)).map(String::as_str),
            Some("completed"),
            "t{i} turn 1\n{context}"
        );
    }
}

/// S1, S2 and S9 with submitters SIGKILLed at random moments (seeded): no overspawn at any time,
/// no turn runs twice, and once `reconcile` has repaired what the kills left, every turn that got a
/// record ran to completion and no slot stays taken.
#[test]
fn s1_s2_s9_sigkilled_submitters_leave_nothing_lost_doubled_or_stuck() {
    let _serial = serial();
    let seed = seed();
    let mut rng = XorShift::new(seed);
    // Kill moments spread over the whole life of a submit in a debug build (0.1 s to 1 s when 40
    // start at once on a small machine), so kills land before, inside and after its critical
    // sections, and some submitters finish first.
    let delays: Vec<Duration> = (0..SUBMITTERS)
        .map(|_| Duration::from_micros(rng.below(1_000_000)))
        .collect();

    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let lines = tmp.path().join("lines.txt");
    init_home(&home);

    let stop = Arc::new(AtomicBool::new(false));
    let sampler = spawn_sampler(home.clone(), stop.clone());

    let barrier = Arc::new(Barrier::new(SUBMITTERS));
    let submitters: Vec<_> = delays
        .iter()
        .enumerate()
        .map(|(i, delay)| {
            let barrier = barrier.clone();
            let delay = *delay;
            let mut command = submit_args(&home, i, &lines);
            thread::spawn(move || {
                barrier.wait();
                let mut child = command.spawn().expect("spawn submit");
                // The delay is the workload's randomness (when the kill lands), not ordering.
                thread::sleep(delay);
                let _ = child.kill();
                let status = child.wait().expect("wait submit");
                // Killed only if the signal landed before the submit exited on its own.
                (status.signal() == Some(9), status)
            })
        })
        .collect();
    let results: Vec<_> = submitters
        .into_iter()
        .map(|t| t.join().expect("submitter thread"))
        .collect();
    let killed = results.iter().filter(|(k, _)| *k).count();
    eprintln!("seed {seed}: {killed} of {SUBMITTERS} submitters were SIGKILLed while running");

    let context = || {
        let (_, text) = line_counts(&lines);
        format!("seed {seed} (rerun with TOLLGATE_E2E_SEED={seed})\nlines file:\n{text}")
    };
    let mut reconciles = Vec::new();
    wait_until_drained(&home, &context, || {
        let out = reconcile(&home);
        reconciles.push(String::from_utf8_lossy(&out.stdout).into_owned());
    });
    stop.store(true, Ordering::SeqCst);
    let report = sampler.join().expect("sampler thread");

    // One more reconcile on the quiescent home must find nothing to do.
    let rec = reconcile(&home);
    let status = status_json(&home);
    let records = turn_records(&home);
    let context = format!(
        "{}\nlast reconcile: {}\nstatus:\n{}\nturn records: {:#?}\nreconciles run: {}",
        context(),
        String::from_utf8_lossy(&rec.stdout),
        pretty(&status),
        records
            .iter()
            .map(|(k, v)| (k, v["outcome"].clone(), v["runner"].clone()))
            .collect::<Vec<_>>(),
        reconciles.len()
    );
    check_s1(&report, &context);
    eprintln!(
        "seed {seed}: {} turn records, {} turns ran",
        records.len(),
        line_counts(&lines).0.len()
    );

    // No slot stuck, nothing parked, nothing left in the queue.
    assert_eq!(
        status["rows"].as_array().map(Vec::len),
        Some(0),
        "{context}"
    );
    assert_eq!(status["parked"], 0, "{context}");
    assert_eq!(status["occupied"], 0, "{context}");

    // S2: no turn's line appears twice.
    let (counts, _) = line_counts(&lines);
    for (i, n) in &counts {
        assert_eq!(*n, 1, "S2: turn of t{i} ran {n} times\n{context}");
    }

    // S9: every turn that got a record (was enqueued) completed, and its line is there once.
    for ((task, turn), record) in &records {
        assert_eq!(
            record["outcome"], "completed",
            "S9: {task} turn {turn} did not complete\n{context}"
        );
        let i: usize = task
            .trim_start_matches('t')
            .parse()
            .expect("task name t<i>");
        assert_eq!(
            counts.get(&i),
            Some(&1),
            "S9: {task} completed but its line is missing\n{context}"
        );
    }
    // And nothing ran that had no record.
    for i in counts.keys() {
        assert!(
            records.contains_key(&(format!("t{i}"), 1)),
            "t{i} ran without a turn record\n{context}"
        );
    }
    // Submitters that were not killed must have enqueued their turn.
    for (i, (was_killed, exit)) in results.iter().enumerate() {
        if !was_killed {
            assert!(exit.success(), "t{i} submit failed: {exit:?}\n{context}");
            assert!(
                records.contains_key(&(format!("t{i}"), 1)),
                "t{i} submit succeeded but has no turn record\n{context}"
            );
        }
    }
}

/// S9 for the window the kill test hits by chance: a submitter killed after writing its turn's
/// record and before publishing the queue row. Nothing runs the turn until `reconcile`, which
/// queues it; then it runs once, and a second reconcile does not run it again.
#[test]
fn s9_a_turn_recorded_by_a_submitter_killed_before_its_queue_publish_runs_after_reconcile() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("home");
    let lines = tmp.path().join("lines.txt");
    init_home(&root);
    let home = tollgate::home::Home::at(&root);
    // What the killed submit left: the turn's record and its task's counter, no queue row.
    let env: BTreeMap<std::ffi::OsString, std::ffi::OsString> =
        std::env::vars_os().filter(|(k, _)| k == "PATH").collect();
    let argv = vec![
        "sh".into(),
        "-c".into(),
        format!("echo 7 >> '{}'", lines.display()).into(),
    ];
    let turn = tollgate::tasks::create_turn(
        &home,
        "t7",
        argv,
        None,
        env,
        false,
        tollgate::tasks::now_millis(),
    )
    .expect("write the orphaned turn record");
    assert_eq!(turn.key, tollgate::protocol::slots::TurnKey::new("t7", 1));
    let status = status_json(&root);
    assert_eq!(
        turn_states(&status)
            .get(&("t7".to_string(), 1))
            .map(String::as_str),
        Some("orphaned"),
        "{}",
        pretty(&status)
    );

    let rec = reconcile(&root);
    let said = String::from_utf8_lossy(&rec.stdout).into_owned();
    assert!(
        said.contains("t7 turn 1: its submitter died before queueing it; queued now"),
        "{said}"
    );
    let context = || format!("reconcile said: {said}");
    let status = wait_until_drained(&root, &context, || {});
    assert_eq!(
        turn_states(&status)
            .get(&("t7".to_string(), 1))
            .map(String::as_str),
        Some("completed"),
        "{}",
        pretty(&status)
    );

    // A second reconcile finds nothing: the completed turn is not queued again.
    let rec = reconcile(&root);
    let again = String::from_utf8_lossy(&rec.stdout).into_owned();
    assert!(!again.contains("t7"), "{again}");
    let status = wait_until_drained(&root, &context, || {});
    let (counts, text) = line_counts(&lines);
    assert_eq!(
        counts,
        BTreeMap::from([(7, 1)]),
        "the turn ran exactly once: {text}\n{}",
        pretty(&status)
    );
}
