//! A detached turn's command in a PID namespace of its own (`TOLLGATE_PIDNS=1`,
//! spec/containment.md "A PID namespace per turn"): a SIGKILLed runner on a one-host home leaves
//! nothing running with no repair at all (the kernel kills the namespace when its init dies with
//! the runner); a cancel still reaches the command with SIGTERM first; exit status and output are
//! what they were.
//!
//! `CLONE_NEWPID` needs `CAP_SYS_ADMIN`: as another user these tests print `SKIPPED` (the runner
//! falls back to the containment without a namespace, which the other containment tests cover).
//!
//! The commands write their pids as this (the test's) namespace sees them: `read p _ <
//! /proc/self/stat` in the shell itself (the host's `/proc`), not `$$`, which is the pid inside
//! the turn's namespace. Synchronisation: those files (bounded polls), never a time.

mod common;

use common::containment::{is_alive, read_pid, unique_tag, wait_files, Reaper};
use common::describe;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The bound within which a dead runner's whole tree must be gone: the kernel's kill of the
/// namespace is immediate; this is only slack for a loaded machine.
const GONE_WITHIN_MILLIS: u64 = 5_000;

fn privileged() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    eprintln!("SKIPPED: CLONE_NEWPID needs CAP_SYS_ADMIN (run as root)");
    false
}

/// `tollgate --home HOME ARGS` with `TOLLGATE_PIDNS` set to `pidns` (the runners it starts
/// inherit it).
fn tollgate(home: &Path, pidns: bool, args: &[&str]) -> Output {
    let mut command = Command::new(common::BIN);
    command
        .arg("--home")
        .arg(home)
        .args(args)
        .stdin(Stdio::null());
    if pidns {
        command.env("TOLLGATE_PIDNS", "1");
    } else {
        command.env_remove("TOLLGATE_PIDNS");
    }
    command.output().expect("run tollgate")
}

/// Writes this shell's pid (as the host sees it) to `path`, atomically.
fn write_own_pid(path: &str) -> String {
    format!("read p _ < /proc/self/stat; echo $p > {path}.tmp && mv {path}.tmp {path}")
}

/// The command: a `setsid` grandchild that ignores SIGTERM (`DIR/grandchild`), then the command
/// itself (`DIR/work`), which waits.
fn escaping(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "setsid sh -c 'trap \"\" TERM; {}; exec sleep 300' & {}; wait",
        write_own_pid(&format!("{d}/grandchild")),
        write_own_pid(&format!("{d}/work")),
    )
}

fn runner_pid(home: &Path) -> i32 {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let out = tollgate(home, true, &["status", "--json"]);
        let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        if let Some(pid) = value["runners"][0]["identity"]["pid"].as_i64() {
            return pid as i32;
        }
        assert!(Instant::now() < until, "no runner: {}", describe(&out));
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn poll(limit_millis: u64, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_millis(limit_millis);
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "not within {limit_millis} ms: {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn pid_namespace(pid: i32) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()
}

fn turn_json(home: &Path, task: &str) -> serde_json::Value {
    let out = tollgate(home, true, &["status", "--json"]);
    assert!(out.status.success(), "{}", describe(&out));
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status json");
    view["tasks"]
        .as_array()
        .and_then(|tasks| tasks.iter().find(|t| t["name"] == task))
        .and_then(|t| t["turns"].as_array()?.first().cloned())
        .unwrap_or(serde_json::Value::Null)
}

#[test]
fn a_sigkilled_runner_leaves_nothing_running_without_a_repair() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let home = common::init_home(dir.path(), 1);
    let tag = unique_tag("pidns-killed");
    let _reaper = Reaper::new(&tag);
    let tag_env = format!("TEST_TAG={tag}");
    let script = escaping(dir.path());
    let submit = tollgate(
        &home,
        true,
        &[
            "submit", "--task", "victim", "--env", &tag_env, "--", "sh", "-c", &script,
        ],
    );
    assert!(submit.status.success(), "{}", describe(&submit));
    wait_files(dir.path(), &["work", "grandchild"]);
    let work = read_pid(dir.path(), "work");
    let grandchild = read_pid(dir.path(), "grandchild");
    assert!(is_alive(work) && is_alive(grandchild), "the work runs");
    assert_ne!(
        pid_namespace(grandchild),
        pid_namespace(std::process::id() as i32),
        "the work is in a PID namespace of its own"
    );
    let runner = runner_pid(&home);
    common::containment::sigkill(runner);
    // No reconcile, no status, no guard: only the kernel.
    poll(
        GONE_WITHIN_MILLIS,
        "the SIGKILLed runner's command and its TERM-ignoring setsid grandchild are dead",
        || !is_alive(work) && !is_alive(grandchild),
    );
}

#[test]
fn a_cancel_reaches_the_command_with_sigterm_and_the_turn_is_cancelled() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let home = common::init_home(dir.path(), 1);
    let tag = unique_tag("pidns-cancel");
    let _reaper = Reaper::new(&tag);
    let tag_env = format!("TEST_TAG={tag}");
    let d = dir.path().display();
    let script = format!(
        "sleep 300 & s=$!; trap 'echo termed > {d}/termed; kill $s; exit 7' TERM; {}; wait",
        write_own_pid(&format!("{d}/work"))
    );
    let submit = tollgate(
        &home,
        true,
        &[
            "submit", "--task", "held", "--env", &tag_env, "--", "sh", "-c", &script,
        ],
    );
    assert!(submit.status.success(), "{}", describe(&submit));
    wait_files(dir.path(), &["work"]);
    let work = read_pid(dir.path(), "work");
    let cancel = tollgate(&home, true, &["cancel", "held"]);
    assert!(cancel.status.success(), "{}", describe(&cancel));
    poll(15_000, "the cancelled turn ends", || {
        turn_json(&home, "held")["state"] == "cancelled"
    });
    assert_eq!(
        std::fs::read_to_string(dir.path().join("termed"))
            .ok()
            .as_deref(),
        Some("termed\n"),
        "the command's TERM trap ran"
    );
    assert!(!is_alive(work));
    let turn = turn_json(&home, "held");
    assert_eq!(turn["exit_code"], 7, "the trap's exit code is kept: {turn}");
}

#[test]
fn exit_status_and_outputs_are_those_of_the_command() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let home = common::init_home(dir.path(), 1);
    let work_dir = dir.path().join("here");
    std::fs::create_dir(&work_dir).expect("mkdir");
    let cwd = work_dir.display().to_string();
    let wait = tollgate(
        &home,
        true,
        &[
            "submit",
            "--wait",
            "--task",
            "noisy",
            "--cwd",
            &cwd,
            "--env",
            "GREETING=hello",
            "--",
            "sh",
            "-c",
            "echo \"$GREETING $(pwd) $(env | grep -c ^TOLLGATE_WORK=)\"; echo err >&2; \
             grep -q 'SigBlk:.0000000000000000' /proc/self/status || echo blocked; exit 3",
        ],
    );
    assert_eq!(wait.status.code(), Some(3), "{}", describe(&wait));
    let logs = tollgate(&home, true, &["logs", "noisy", "--json"]);
    assert!(logs.status.success(), "{}", describe(&logs));
    let value: serde_json::Value = serde_json::from_slice(&logs.stdout).expect("logs json");
    assert_eq!(value["state"], "failed", "{value}");
    assert_eq!(value["exit_code"], 3, "{value}");
    // Its own output, its directory, its environment with the unit's marker, no blocked signal.
    assert_eq!(value["stdout"], format!("hello {cwd} 1\n"), "{value}");
    assert_eq!(value["stderr"], "err\n", "{value}");

    // Killed by a signal: the signal is the command's, not its init's.
    let wait = tollgate(
        &home,
        true,
        &[
            "submit",
            "--wait",
            "--task",
            "killed",
            "--",
            "sh",
            "-c",
            "kill -USR1 $$",
        ],
    );
    assert_eq!(wait.status.code(), Some(128 + 10), "{}", describe(&wait));

    // A program that does not exist: unstartable, as without the namespace.
    let wait = tollgate(
        &home,
        true,
        &[
            "submit",
            "--wait",
            "--task",
            "missing",
            // Past submit's own check, to the init's exec.
            "--no-check",
            "--",
            "no-such-program-xyz",
        ],
    );
    assert_ne!(wait.status.code(), Some(0), "{}", describe(&wait));
    let logs = tollgate(&home, true, &["logs", "missing", "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&logs.stdout).expect("logs json");
    assert_eq!(value["state"], "unstartable", "{value}");
}

/// A command that exits leaving children: the init gives them SIGTERM (a trapping child's trap
/// runs) and the grace, and a TERM-ignoring `setsid` grandchild is killed with the namespace
/// when the init exits; both are dead when `submit --wait` returns, and the turn keeps the
/// command's own outcome.
#[test]
fn leftovers_get_sigterm_then_die_with_the_namespace_before_the_turn_ends() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let home = common::init_home(dir.path(), 1);
    let tag = unique_tag("pidns-leftovers");
    let _reaper = Reaper::new(&tag);
    let tag_env = format!("TEST_TAG={tag}");
    let d = dir.path().display();
    let script = format!(
        "sh -c 'trap \"echo termed > {d}/termed; exit 0\" TERM; {}; sleep 300 & wait' & \
         setsid sh -c 'trap \"\" TERM; {}; exec sleep 300' & \
         i=0; while [ ! -e {d}/plain ] || [ ! -e {d}/setsid ]; do \
           [ $i -lt 2000 ] || exit 9; sleep 0.01; i=$((i+1)); done; exit 0",
        write_own_pid(&format!("{d}/plain")),
        write_own_pid(&format!("{d}/setsid")),
    );
    let wait = tollgate(
        &home,
        true,
        &[
            "submit", "--wait", "--task", "left", "--env", &tag_env, "--", "sh", "-c", &script,
        ],
    );
    assert_eq!(wait.status.code(), Some(0), "{}", describe(&wait));
    let (plain, setsid) = (
        read_pid(dir.path(), "plain"),
        read_pid(dir.path(), "setsid"),
    );
    assert!(
        !is_alive(plain) && !is_alive(setsid),
        "leftovers alive when the turn ended: plain {} setsid {}",
        is_alive(plain),
        is_alive(setsid)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("termed"))
            .ok()
            .as_deref(),
        Some("termed\n"),
        "the leftover got SIGTERM first"
    );
    let logs = tollgate(&home, true, &["logs", "left", "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&logs.stdout).expect("logs json");
    assert_eq!(value["state"], "completed", "{value}");
}
