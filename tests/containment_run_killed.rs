//! `tollgate run` SIGKILLed with items that hold a `setsid` grandchild, a child in its own process
//! group and a plain child (D8): `tollgate sweep` — or the next `tollgate run` on that home — kills
//! every one of them and removes the dead run's worktrees; an independent `/proc` scan (matching an
//! environment tag this test chose) finds no survivor. Each scenario runs on the cgroup path (when
//! this host can create a cgroup v2 group; the test says which) and on the subreaper path
//! (`TOLLGATE_NO_CGROUP=1`).
//!
//! Synchronisation: every process of every item writes its pid to a file; the test SIGKILLs the run
//! only once all files are there (a bounded poll of those files).

mod common;

use common::containment::{cgroup_base, tagged, Reaper};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tollgate::process::containment;

const ITEMS: usize = 3;
/// Each item: the item's shell, a plain child, a child in its own process group, a setsid
/// grandchild.
const ROLES: [&str; 4] = ["item", "child", "pgroup", "setsid"];
const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

fn write_pack(dir: &Path, tag: &str) -> PathBuf {
    let pids = dir.join("pids");
    std::fs::create_dir(&pids).unwrap();
    let mut pack = format!("jobs = {ITEMS}\ngrace = \"300ms\"\n");
    for i in 0..ITEMS {
        let p = |role: &str| pids.join(format!("{i}-{role}")).display().to_string();
        pack.push_str(&format!(
            r#"
[[item]]
name = "holder-{i}"
worktree = true
shell = "sleep 600 & echo $! > {child}; perl -e 'setpgrp(0, 0); open(my $f, \">\", $ARGV[0]) or die; print $f $$; close $f; exec(\"sleep\", \"600\")' {pgroup} & setsid sh -c 'echo $$ > {setsid}; exec sleep 600' & echo $$ > {item}; wait"
env = {{ TEST_TAG = "{tag}" }}
"#,
            child = p("child"),
            pgroup = p("pgroup"),
            setsid = p("setsid"),
            item = p("item"),
        ));
    }
    let path = dir.join("pack.toml");
    std::fs::write(&path, pack).unwrap();
    path
}

/// All pid files written and parsed, or a panic after a bounded wait.
fn wait_for_pids(dir: &Path, run: &mut std::process::Child) -> Vec<(String, i32)> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let read: Vec<Option<(String, i32)>> = (0..ITEMS)
            .flat_map(|i| ROLES.iter().map(move |r| format!("{i}-{r}")))
            .map(|name| {
                let text = std::fs::read_to_string(dir.join("pids").join(&name)).ok()?;
                Some((name, text.trim().parse().ok()?))
            })
            .collect();
        if read.iter().all(Option::is_some) {
            return read.into_iter().flatten().collect();
        }
        if let Ok(Some(status)) = run.try_wait() {
            panic!("the run ended before its items were up: {status}");
        }
        assert!(Instant::now() < until, "items never wrote their pid files");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn is_alive(pid: i32) -> bool {
    containment::is_alive(pid)
}

fn cgroup_available() -> Option<PathBuf> {
    cgroup_base()
}

enum Cleaner {
    Sweep,
    NextRun,
    Reconcile,
}

fn run_killed_then_cleaned(force_subreaper: bool, cleaner: Cleaner) {
    let dir = tempfile::tempdir().unwrap();
    let tag = format!("{}-{}", std::process::id(), uuid_like());
    let _reaper = Reaper::new(&tag);
    let pack = write_pack(dir.path(), &tag);
    let home = dir.path().join("home");
    let events = dir.path().join("events.jsonl");
    let mut cmd = Command::new(BIN);
    cmd.arg("--home")
        .arg(&home)
        .arg("run")
        .arg(&pack)
        .arg("--events")
        .arg(&events)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if force_subreaper {
        cmd.env("TOLLGATE_NO_CGROUP", "1");
    } else {
        cmd.env_remove("TOLLGATE_NO_CGROUP");
    }
    let mut run = cmd.spawn().unwrap();
    let run_pid = run.id();
    let pids = wait_for_pids(dir.path(), &mut run);

    let item_pid = pids.iter().find(|(n, _)| n == "0-item").unwrap().1;
    let item_cgroup = std::fs::read_to_string(format!("/proc/{item_pid}/cgroup")).unwrap();
    let in_group = item_cgroup
        .lines()
        .any(|l| l.starts_with("0::") && l.contains(&format!("tollgate-{run_pid}-")));
    assert_eq!(
        in_group, !force_subreaper,
        "cgroup path expected: {}; the item's cgroup file:\n{item_cgroup}",
        !force_subreaper
    );

    run.kill().unwrap();
    run.wait().unwrap();
    // The run is gone; every one of its processes still runs (the test can fail).
    let before = tagged(&tag);
    for (name, pid) in &pids {
        assert!(is_alive(*pid), "{name} ({pid}) died with the run");
        assert!(before.contains(pid), "{name} ({pid}) is not tagged");
    }
    let run_id = std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .next()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["run_id"].clone())
        .and_then(|v| v.as_str().map(str::to_string))
        .expect("run_started names the run");
    let worktrees = home.join("worktrees").join(&run_id);
    assert!(
        worktrees.exists(),
        "the items' worktrees exist before the sweep"
    );

    let started = Instant::now();
    let out = match cleaner {
        Cleaner::Sweep => Command::new(BIN)
            .arg("--home")
            .arg(&home)
            .arg("sweep")
            .stdin(Stdio::null())
            .output()
            .unwrap(),
        Cleaner::Reconcile => Command::new(BIN)
            .arg("--home")
            .arg(&home)
            .arg("reconcile")
            .stdin(Stdio::null())
            .output()
            .unwrap(),
        Cleaner::NextRun => {
            let next = dir.path().join("next");
            std::fs::create_dir(&next).unwrap();
            std::fs::write(
                next.join("pack.toml"),
                "[[item]]\nname = \"noop\"\nrun = [\"true\"]\n",
            )
            .unwrap();
            Command::new(BIN)
                .arg("--home")
                .arg(&home)
                .arg("run")
                .arg(next.join("pack.toml"))
                .stdin(Stdio::null())
                .output()
                .unwrap()
        }
    };
    let took = started.elapsed();
    let text = format!(
        "{:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "cleanup (subreaper: {force_subreaper}) took {} ms\n{text}",
        took.as_millis()
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    // The cleaner returned only after it observed the unit empty: no grace for dying here.
    let survivors = tagged(&tag);
    assert!(survivors.is_empty(), "survivors {survivors:?}\n{text}");
    for (name, pid) in &pids {
        assert!(!is_alive(*pid), "{name} ({pid}) survived\n{text}");
    }
    assert!(
        !worktrees.exists(),
        "the dead run's worktrees are left: {}",
        worktrees.display()
    );
    let list = tollgate::exec::sweep::list(&home).unwrap();
    assert!(list.runs.iter().all(|r| r.run_id != run_id), "{list:?}");
    if let Some(base) = cgroup_available() {
        let left: Vec<_> = std::fs::read_dir(&base)
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with(&format!("tollgate-{run_pid}-")))
            })
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "cgroups left behind: {left:?}");
    }
}

fn uuid_like() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn killed_run_is_swept_through_the_cgroup() {
    match cgroup_available() {
        Some(base) => {
            eprintln!("cgroup path: groups under {}", base.display());
            run_killed_then_cleaned(false, Cleaner::Sweep);
        }
        None => eprintln!("SKIPPED: no delegable cgroup v2 group with cgroup.kill here"),
    }
}

#[test]
fn killed_run_is_swept_on_the_subreaper_path() {
    run_killed_then_cleaned(true, Cleaner::Sweep);
}

#[test]
fn killed_run_is_cleaned_by_the_next_run_through_the_cgroup() {
    match cgroup_available() {
        Some(_) => run_killed_then_cleaned(false, Cleaner::NextRun),
        None => eprintln!("SKIPPED: no delegable cgroup v2 group with cgroup.kill here"),
    }
}

#[test]
fn killed_run_is_cleaned_by_reconcile_on_the_subreaper_path() {
    run_killed_then_cleaned(true, Cleaner::Reconcile);
}

#[test]
fn killed_run_is_cleaned_by_reconcile_through_the_cgroup() {
    match cgroup_available() {
        Some(_) => run_killed_then_cleaned(false, Cleaner::Reconcile),
        None => eprintln!("SKIPPED: no delegable cgroup v2 group with cgroup.kill here"),
    }
}

#[test]
fn killed_run_is_cleaned_by_the_next_run_on_the_subreaper_path() {
    run_killed_then_cleaned(true, Cleaner::NextRun);
}

/// D8's other half: a sweep while the run is alive touches none of its processes (the run's
/// identity still matches), and the same sweep after the run is SIGKILLed kills them all.
#[test]
fn sweep_leaves_a_live_runs_items_alone() {
    let dir = tempfile::tempdir().unwrap();
    let tag = format!("{}-live-{}", std::process::id(), uuid_like());
    let _reaper = Reaper::new(&tag);
    let pack = write_pack(dir.path(), &tag);
    let home = dir.path().join("home");
    let mut run = Command::new(BIN)
        .arg("--home")
        .arg(&home)
        .arg("run")
        .arg(&pack)
        .env("TOLLGATE_NO_CGROUP", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pids = wait_for_pids(dir.path(), &mut run);
    let sweep = || {
        Command::new(BIN)
            .arg("--home")
            .arg(&home)
            .arg("sweep")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = sweep();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    for (name, pid) in &pids {
        assert!(
            is_alive(*pid),
            "the sweep killed {name} ({pid}) of a live run"
        );
    }
    assert_eq!(
        run.try_wait().unwrap(),
        None,
        "the run itself is still running"
    );
    run.kill().unwrap();
    run.wait().unwrap();
    let out = sweep();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let left = tagged(&tag);
    assert!(left.is_empty(), "survivors {left:?}");
}
