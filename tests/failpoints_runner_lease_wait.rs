//! A runner on a fleet that reaches its take-over before its dispatcher's first publish took its
//! lease (spec/fleet.md, F4): the take-over finds no lease of the runner's own, and the runner
//! retries it for a bounded time (`TAKE_OVER_LEASE_WAIT_MILLIS`, 2 s). When the lease comes in
//! that time the turn runs, with no repair; when it never comes the runner gives up on its own
//! (it does not wait for ever on a dispatcher that may be dead), and a later `reconcile` runs the
//! turn: nothing is lost.
//!
//! The dispatcher (`submit`) is held between its spawn and its first publish by
//! `dispatch::after_spawn(GATE)`; the runner publishes its pid each time its take-over found no
//! lease, through `runner::take_over_lease_wait(SEEN)` whose gate file exists, so it never holds.
//! The server is `TOLLGATE_TEST_POSTGRES` (tests/common/postgres.rs): unset, these tests skip
//! with a message; with `TOLLGATE_REQUIRE_POSTGRES=1` a missing server fails them.
#![cfg(feature = "failpoints")]

mod common;

use common::containment::is_alive;
use common::fleet::{home_on, ok, shared_url, turn_view, wait_state};
use common::postgres::{server, unique};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `submit --task job -- sh -c 'echo ran >> RUNS'` on `home`, its dispatcher held after its spawn
/// until `gate` exists, its runner reporting each take-over that found no lease in `seen.waiting`.
fn held_submit(home: &Path, gate: &Path, seen: &Path, runs: &Path) -> Held {
    std::fs::write(seen, b"").expect("the runner's gate is open");
    let failpoints = format!(
        "dispatch::after_spawn=return({});runner::take_over_lease_wait=return({})",
        gate.display(),
        seen.display()
    );
    let script = format!("echo ran >> {}", runs.display());
    let child = Command::new(common::BIN)
        .arg("--home")
        .arg(home)
        .args(["submit", "--task", "job", "--", "sh", "-c", &script])
        .env_remove("TOLLGATE_HOST")
        .env_remove("TOLLGATE_STORE")
        .env("FAILPOINTS", &failpoints)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start submit");
    Held(Some(child))
}

/// The held `submit`: waited for by the test, or, if the test ends first (failed), killed and
/// reaped, so a failing run leaves no dispatcher behind holding its gate.
struct Held(Option<Child>);

impl Held {
    fn wait_with_output(mut self) -> std::process::Output {
        let child = self.0.take().expect("waited for once");
        child.wait_with_output().expect("submit ends")
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The pid a gate published in `GATE.waiting`.
fn waiting_pid(gate: &Path) -> i32 {
    let text = std::fs::read_to_string(gate.with_extension("waiting")).expect("waiting pid");
    text.trim().parse().expect("a pid")
}

struct Fixture {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    gate: PathBuf,
    seen: PathBuf,
    runs: PathBuf,
}

fn fixture(server: &str, name: &str) -> Fixture {
    let tmp = tempfile::tempdir().expect("tempdir");
    let url = shared_url(server, name);
    let home = home_on(&tmp.path().join("home"), &url, &unique(name), 1);
    Fixture {
        gate: tmp.path().join("dispatcher"),
        seen: tmp.path().join("no-lease"),
        runs: tmp.path().join("runs"),
        home,
        _tmp: tmp,
    }
}

#[test]
fn a_runner_whose_lease_comes_while_it_waits_runs_its_turn_without_a_repair() {
    let Some(server) = server() else { return };
    let f = fixture(&server, "lease-late");
    let _open = common::OpenOnDrop(f.gate.clone());
    let submit = held_submit(&f.home, &f.gate, &f.seen, &f.runs);
    common::wait_until("the dispatcher to hold after its spawn", || {
        f.gate.with_extension("waiting").exists()
    });
    common::wait_until(
        "the runner's take-over to find no lease of its own and wait",
        || f.seen.with_extension("waiting").exists(),
    );
    let runner = waiting_pid(&f.seen);
    assert!(is_alive(runner), "the runner waits for its lease");
    std::fs::write(&f.gate, b"").expect("open the dispatcher's gate");
    let out = submit.wait_with_output();
    assert!(out.status.success(), "submit: {}", common::describe(&out));
    // No reconcile, status or other command that repairs: the runner itself ran the turn.
    common::wait_until("the turn's command to run", || f.runs.exists());
    let view = wait_state(&f.home, "job", 1, "completed");
    assert_eq!(view["exit_code"], 0, "{view}");
    let runs = std::fs::read_to_string(&f.runs).expect("runs");
    assert_eq!(runs.lines().count(), 1, "runs of the turn: {runs:?}");
}

#[test]
fn a_runner_whose_lease_never_comes_gives_up_within_its_bound_and_reconcile_runs_the_turn() {
    let Some(server) = server() else { return };
    let f = fixture(&server, "lease-never");
    let _open = common::OpenOnDrop(f.gate.clone());
    let submit = held_submit(&f.home, &f.gate, &f.seen, &f.runs);
    let dispatcher = {
        common::wait_until("the dispatcher to hold after its spawn", || {
            f.gate.with_extension("waiting").exists()
        });
        waiting_pid(&f.gate)
    };
    common::wait_until(
        "the runner's take-over to find no lease of its own and wait",
        || f.seen.with_extension("waiting").exists(),
    );
    let runner = waiting_pid(&f.seen);
    // A bounded poll of /proc: the runner's wait is 2 s; 15 s is far past it and far short of
    // the dispatcher's hold (30 s), so a runner that waited for ever is seen here, alive.
    let deadline = Instant::now() + Duration::from_secs(15);
    while is_alive(runner) {
        assert!(
            Instant::now() < deadline,
            "the runner {runner} still waits for a lease its held dispatcher never published"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        is_alive(dispatcher),
        "the runner gave up on its own bound, while its dispatcher was still held"
    );
    assert!(!f.runs.exists(), "the turn did not run without its lease");
    std::fs::write(&f.gate, b"").expect("open the dispatcher's gate");
    let out = submit.wait_with_output();
    // The submit queued the turn (its promise), whatever became of the runner it spawned.
    assert!(out.status.success(), "submit: {}", common::describe(&out));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        ok(&f.home, &["reconcile"]);
        let view = turn_view(&f.home, "job", 1);
        if view["state"] == "completed" {
            assert_eq!(view["exit_code"], 0, "{view}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "reconcile never ran the turn: {view}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let runs = std::fs::read_to_string(&f.runs).expect("runs");
    assert_eq!(runs.lines().count(), 1, "runs of the turn: {runs:?}");
}
