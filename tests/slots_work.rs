//! S2 and S1 over work, with real processes (spec/invariants.md; spec/slots.md, "Work").
//!
//! A turn's work is its command's process tree. A SIGKILLed `worker runner` does not take the
//! command's children with it, so before `reconcile` may run the turn again it must kill what is
//! left of the old work and see it gone. The test does exactly what the issue describes: workers =
//! 1, a command whose children outlive its runner, SIGKILL the runner, `tollgate reconcile`. A
//! sampler thread polls `/proc` the whole time and counts, per sample, the distinct works of the
//! turn alive at once (processes carrying this test's own marker, grouped by `TOLLGATE_WORK`).
//!
//! A `/proc` scan is not atomic, so a sample is confirmed by a second pass: a process counts only if
//! it is seen again with the same start time. Every first sighting precedes every second one, so
//! all confirmed processes were alive together at the end of the first pass: a confirmed count of
//! two works is a real double run, not a sampling artefact.
mod common;

use common::containment::{no_cgroup_value, paths};
use common::{describe, BIN};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The two tests each watch all of `/proc`; one at a time keeps the sampler's pace.
static SERIAL: Mutex<()> = Mutex::new(());
use std::thread;
use std::time::{Duration, Instant};

/// Bound on every wait for an observable state (only reached on failure).
const DEADLINE: Duration = Duration::from_secs(60);
/// Pause between two polls (a poll period, not an ordering device).
const POLL: Duration = Duration::from_millis(20);

/// `tollgate --home HOME ARGS…` on one containment path (`TOLLGATE_NO_CGROUP`).
fn tollgate(home: &Path, force_subreaper: bool, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .arg("--home")
        .arg(home)
        .args(args)
        .env("TOLLGATE_NO_CGROUP", no_cgroup_value(force_subreaper))
        .stdin(Stdio::null())
        .output()
        .expect("run tollgate")
}

/// (state letter, start time in ticks) from `/proc/<pid>/stat`.
fn stat(pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

fn alive(pid: u32, start: u64) -> bool {
    stat(pid).is_some_and(|(state, s)| s == start && !matches!(state, 'Z' | 'X'))
}

fn environ(pid: u32) -> Vec<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|bytes| {
            bytes
                .split(|b| *b == 0)
                .filter(|e| !e.is_empty())
                .map(<[u8]>::to_vec)
                .collect()
        })
        .unwrap_or_default()
}

fn argv(pid: u32) -> Vec<String> {
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

fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
                .collect()
        })
        .unwrap_or_default()
}

/// A live process of the turn: carries `mark` (this test's own variable), in work `work`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Member {
    pid: u32,
    start: u64,
    work: String,
}

/// First pass: every live process carrying `mark`, with its `TOLLGATE_WORK`.
fn members(mark: &[u8]) -> Vec<Member> {
    let mut found = Vec::new();
    for pid in pids() {
        let Some((state, start)) = stat(pid) else {
            continue;
        };
        if matches!(state, 'Z' | 'X') {
            continue;
        }
        let env = environ(pid);
        if !env.iter().any(|e| e == mark) {
            continue;
        }
        let work = env
            .iter()
            .find_map(|e| e.strip_prefix(b"TOLLGATE_WORK=".as_slice()))
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .unwrap_or_default();
        found.push(Member { pid, start, work });
    }
    found
}

/// Second pass: the members still alive with the same start time.
fn confirmed(first: Vec<Member>) -> Vec<Member> {
    first
        .into_iter()
        .filter(|m| alive(m.pid, m.start))
        .collect()
}

#[derive(Debug, Default)]
struct Samples {
    count: usize,
    /// The worst sample: the most distinct works alive together, with their processes.
    worst: Vec<Member>,
    works_seen: BTreeSet<String>,
}

fn distinct_works(sample: &[Member]) -> usize {
    sample
        .iter()
        .map(|m| &m.work)
        .collect::<BTreeSet<_>>()
        .len()
}

/// Samples until `stop`; `seen` shares the works seen so far, so the test can wait for the sampler
/// to have observed a work before it stops it.
fn spawn_sampler(
    mark: Vec<u8>,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<BTreeSet<String>>>,
) -> thread::JoinHandle<Samples> {
    thread::spawn(move || {
        let mut samples = Samples::default();
        while !stop.load(Ordering::SeqCst) {
            let sample = confirmed(members(&mark));
            samples.count += 1;
            samples
                .works_seen
                .extend(sample.iter().map(|m| m.work.clone()));
            seen.lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(sample.iter().map(|m| m.work.clone()));
            if distinct_works(&sample) > distinct_works(&samples.worst) {
                samples.worst = sample;
            }
            thread::sleep(Duration::from_millis(1));
        }
        samples
    })
}

fn wait_for<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(found) = probe() {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(POLL);
    }
}

/// The live `worker runner` of `home`.
fn runner_of(home: &Path) -> Option<(u32, u64)> {
    let home = home.to_string_lossy().into_owned();
    pids().into_iter().find_map(|pid| {
        let args = argv(pid);
        let is_runner = args
            .windows(2)
            .any(|w| w[0] == "worker" && w[1] == "runner")
            && args.contains(&home);
        let (state, start) = stat(pid)?;
        (is_runner && !matches!(state, 'Z' | 'X')).then_some((pid, start))
    })
}

fn kill_all(members: &[Member]) {
    for m in members {
        if alive(m.pid, m.start) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(m.pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

#[test]
fn s2_over_work_reconcile_kills_a_sigkilled_runners_surviving_children_before_running_the_turn_again(
) {
    for (path, force_subreaper) in paths() {
        eprintln!("slots_work on the {path} path");
        reconcile_after_a_killed_runner(force_subreaper);
    }
}

fn reconcile_after_a_killed_runner(force_subreaper: bool) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let out = tollgate(&home, force_subreaper, &["init", "--workers", "1"]);
    assert!(out.status.success(), "{}", describe(&out));
    let mark_value = uuid::Uuid::now_v7().to_string();
    let mark = format!("TG_WORK_TEST={mark_value}");
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let sampler = spawn_sampler(mark.clone().into_bytes(), stop.clone(), seen.clone());

    let submit = Command::new(BIN)
        .arg("--home")
        .arg(&home)
        .env("TOLLGATE_NO_CGROUP", no_cgroup_value(force_subreaper))
        .args(["submit", "--task", "w", "--env", &mark, "--"])
        .args(["sh", "-c", "sh -c 'sleep 30' & sleep 30"])
        .stdin(Stdio::null())
        .output()
        .expect("run submit");
    assert!(submit.status.success(), "{}", describe(&submit));

    // The old work runs: both sleeps (the inner shell's and the outer shell's) carry the marker.
    let old = wait_for("the turn's command tree", || {
        let found = confirmed(members(mark.as_bytes()));
        let sleeps = found
            .iter()
            .filter(|m| argv(m.pid).first().is_some_and(|a| a.ends_with("sleep")))
            .count();
        (sleeps >= 2).then_some(found)
    });
    let old_work = old[0].work.clone();
    assert!(
        !old_work.is_empty(),
        "the command carries TOLLGATE_WORK: {old:?}"
    );
    assert!(old.iter().all(|m| m.work == old_work), "{old:?}");

    let (runner, runner_start) = runner_of(&home).expect("the turn's runner is alive");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(runner as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL the runner");
    wait_for("the runner to die", || {
        (!alive(runner, runner_start)).then_some(())
    });
    // What the issue saw: the runner is gone, part of its work is not.
    let survivors = confirmed(members(mark.as_bytes()));
    assert!(
        !survivors.is_empty(),
        "children of the command outlive the SIGKILLed runner"
    );

    let rec = tollgate(&home, force_subreaper, &["reconcile"]);
    assert!(rec.status.success(), "{}", describe(&rec));
    let said = String::from_utf8_lossy(&rec.stdout).into_owned();
    // Once reconcile has returned, nothing of the old tree is alive.
    let left: Vec<&Member> = old.iter().filter(|m| alive(m.pid, m.start)).collect();
    let old_left: Vec<Member> = members(mark.as_bytes())
        .into_iter()
        .filter(|m| m.work == old_work)
        .collect();
    assert!(
        left.is_empty() && old_left.is_empty(),
        "processes of the old work outlived reconcile: {left:?} {old_left:?}\nreconcile said: {said}"
    );
    assert!(
        said.contains("killed what was left of its command"),
        "{said}"
    );
    // And the turn runs again, as a new work.
    let new = wait_for("the turn to run again", || {
        let found = confirmed(members(mark.as_bytes()));
        found.iter().any(|m| m.work != old_work).then_some(found)
    });
    wait_for("the sampler to see the new work", || {
        let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.iter().any(|w| *w != old_work).then_some(())
    });

    stop.store(true, Ordering::SeqCst);
    let samples = sampler.join().expect("sampler");
    let cancel = tollgate(&home, force_subreaper, &["cancel", "w"]);
    kill_all(&new);
    kill_all(&members(mark.as_bytes()));
    assert!(
        cancel.status.success() || cancel.status.signal().is_none(),
        "{}",
        describe(&cancel)
    );

    let by_work: BTreeMap<&String, usize> =
        samples.worst.iter().fold(BTreeMap::new(), |mut acc, m| {
            *acc.entry(&m.work).or_default() += 1;
            acc
        });
    assert!(
        distinct_works(&samples.worst) <= 1,
        "two works of one turn alive at once in one of {} samples: {by_work:?} {:?}",
        samples.count,
        samples.worst
    );
    assert!(
        samples.works_seen.len() >= 2 && samples.count > 10,
        "the sampler saw the old and the new work: {} samples, works {:?}",
        samples.count,
        samples.works_seen
    );
    eprintln!(
        "slots_work: {} samples, at most {} work(s) of the turn alive at once",
        samples.count,
        distinct_works(&samples.worst)
    );
}

/// Cancel of a turn whose runner was SIGKILLed: the surviving children are killed, the row leaves
/// only once they are gone, the turn ends as cancelled and nothing runs it again.
#[test]
fn cancel_kills_a_sigkilled_runners_surviving_children_and_ends_the_turn() {
    for (path, force_subreaper) in paths() {
        eprintln!("slots_work on the {path} path");
        cancel_after_a_killed_runner(force_subreaper);
    }
}

fn cancel_after_a_killed_runner(force_subreaper: bool) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let out = tollgate(&home, force_subreaper, &["init", "--workers", "1"]);
    assert!(out.status.success(), "{}", describe(&out));
    let mark = format!("TG_WORK_TEST={}", uuid::Uuid::now_v7());
    let submit = Command::new(BIN)
        .arg("--home")
        .arg(&home)
        .env("TOLLGATE_NO_CGROUP", no_cgroup_value(force_subreaper))
        .args(["submit", "--task", "c", "--env", &mark, "--"])
        .args(["sh", "-c", "sh -c 'sleep 30' & sleep 30"])
        .stdin(Stdio::null())
        .output()
        .expect("run submit");
    assert!(submit.status.success(), "{}", describe(&submit));
    let old = wait_for("the turn's command tree", || {
        let found = confirmed(members(mark.as_bytes()));
        (found.len() >= 3).then_some(found)
    });
    let (runner, runner_start) = runner_of(&home).expect("the turn's runner is alive");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(runner as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL the runner");
    wait_for("the runner to die", || {
        (!alive(runner, runner_start)).then_some(())
    });
    assert!(!confirmed(members(mark.as_bytes())).is_empty());

    let cancel = tollgate(&home, force_subreaper, &["cancel", "c"]);
    assert!(cancel.status.success(), "{}", describe(&cancel));
    let left: Vec<&Member> = old.iter().filter(|m| alive(m.pid, m.start)).collect();
    assert!(
        left.is_empty(),
        "the old work outlived cancel: {left:?}\n{}",
        describe(&cancel)
    );
    let status = tollgate(&home, force_subreaper, &["status", "c", "--json"]);
    assert!(status.status.success(), "{}", describe(&status));
    let view: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    assert_eq!(view["rows"].as_array().map(Vec::len), Some(0), "{view:#}");
    assert_eq!(
        view["tasks"][0]["turns"][0]["state"], "cancelled",
        "{view:#}"
    );
    // A reconcile afterwards finds nothing to run.
    let rec = tollgate(&home, force_subreaper, &["reconcile"]);
    assert!(rec.status.success(), "{}", describe(&rec));
    assert!(
        confirmed(members(mark.as_bytes())).is_empty(),
        "the cancelled turn ran again: {}",
        describe(&rec)
    );
}
