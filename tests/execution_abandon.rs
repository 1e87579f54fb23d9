//! An item that cannot be killed: the run still ends by ceiling + term grace + join grace, the
//! item is abandoned, its worktree goes on the durable sweep list, and `tollgate sweep` removes it
//! only once the process inside is gone.
//!
//! Why a killer seam and not the failpoint: CI runs `cargo test --features model-check`, without
//! `failpoints`, and a test behind `required-features` would silently not run there. So the run is
//! driven through the library API with a [`Killer`] that does nothing (the same seam production
//! fills with `ProcessKiller`). The CLI keeps `fail_point!("exec::kill_noop")` inside
//! `ProcessKiller` for manual fault injection with `--features failpoints`.
//!
//! Synchronisation: the child writes its pid to a file before `exec sleep 600`; the run cannot end
//! before that (the item is abandoned only after ceiling and both graces). At the end the test
//! really kills the child with SIGKILL and waits for `/proc` to show it gone (bounded).

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use tollgate::exec::{self, Containment, Event, EventSink, KillTarget, Killer, RunOptions};
use tollgate::protocol::execution::{EndReason, KillSignal, Lane, Outcome};

struct NoopKiller;

impl Killer for NoopKiller {
    fn signal_tree(&self, _: &KillTarget, _: KillSignal) {}
    fn release(&self, _: &KillTarget) {}
    fn finish_run(&self, _: &str) {}
}

struct Collect(Vec<Event>);

impl EventSink for Collect {
    fn emit(&mut self, event: &Event) {
        self.0.push(event.clone());
    }
}

const CEILING_MILLIS: u64 = 800;
const GRACE_MILLIS: u64 = 400;

/// Kills `pid` for real on drop, so a failing assertion does not leave `sleep 600` behind.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0), Signal::SIGKILL);
    }
}

fn wait_gone(pid: i32) {
    let until = Instant::now() + Duration::from_secs(10);
    while exec::kill::is_alive(pid) {
        assert!(Instant::now() < until, "pid {pid} did not go away");
        std::thread::yield_now();
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn sweep_cli(home: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("--home")
        .arg(home)
        .arg("sweep")
        .output()
        .unwrap()
}

#[test]
fn unkillable_item_is_abandoned_and_its_worktree_swept_later() {
    let dir = tempfile::tempdir().unwrap();
    let pack_dir = dir.path().join("pack");
    std::fs::create_dir(&pack_dir).unwrap();
    std::fs::write(pack_dir.join("input.txt"), "data").unwrap();
    let pid_file = dir.path().join("sleep.pid");
    let text = format!(
        r#"ceiling = "{CEILING_MILLIS}ms"
grace = "{GRACE_MILLIS}ms"

[[item]]
name = "wedged"
worktree = true
shell = "echo $$ > {}; exec sleep 600"

[[item]]
name = "fine"
worktree = true
run = ["cat", "input.txt"]
"#,
        pid_file.display()
    );
    let pack_path = pack_dir.join("pack.toml");
    std::fs::write(&pack_path, text).unwrap();
    let pack = exec::pack::load(&pack_path).unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let opts = RunOptions {
        lane: Lane::Scored,
        ceiling: None,
        jobs: Some(2),
        home: home.clone(),
        containment: Containment::Subreaper,
        interrupt: None,
    };

    let started = Instant::now();
    let mut sink = Collect(Vec::new());
    let report = exec::run_many(&pack, &opts, &NoopKiller, &mut sink).unwrap();
    let elapsed = started.elapsed();
    let sleeper: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let guard = KillOnDrop(sleeper);
    eprintln!("unkillable run took {} ms", elapsed.as_millis());

    let bound = Duration::from_millis(CEILING_MILLIS + 2 * GRACE_MILLIS + 1_000);
    assert!(elapsed < bound, "took {elapsed:?}, bound {bound:?}");
    assert_eq!(report.reason, EndReason::Ceiling);
    assert_eq!(report.rows[0].outcome, Outcome::Abandoned);
    assert_eq!(report.rows[1].outcome, Outcome::Passed);
    assert!(exec::kill::is_alive(sleeper), "the no-op killer killed it");

    // The wedged item's worktree is listed (durably) and still there; the fine one is removed.
    assert_eq!(report.listed.len(), 1);
    let listed = report.listed[0].clone();
    assert!(listed.join("input.txt").exists());
    let list = exec::sweep::list(&home).unwrap();
    assert_eq!(list.entries.len(), 1);
    assert_eq!(list.entries[0].worktree.path, listed);
    assert_eq!(list.entries[0].item, "wedged");
    let worktrees = std::fs::read_dir(home.join("worktrees").join(&report.run_id))
        .unwrap()
        .count();
    assert_eq!(worktrees, 1, "only the abandoned item's worktree is left");

    // While the process is inside, the sweep keeps it.
    let out = sweep_cli(&home);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(listed.exists());
    assert_eq!(exec::sweep::list(&home).unwrap().entries.len(), 1);

    // Really kill it; once it is gone the sweep removes the worktree and clears the list.
    drop(guard);
    wait_gone(sleeper);
    let out = sweep_cli(&home);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("removed"));
    assert!(!listed.exists());
    assert!(exec::sweep::list(&home).unwrap().entries.is_empty());
}
