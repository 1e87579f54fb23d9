//! The runner's guard on a fleet (spec/fleet.md, "The guard"): a runner SIGKILLed alone, on a
//! host that stays up and connected, leaves nothing of its turn running. Its command dies with it
//! (`PR_SET_PDEATHSIG`), but what the command started reparents away from the runner; without a
//! guard only a repair *on that host* killed it, and another host, once the lease expired, ran the
//! turn again beside it (S1/S2 fleet-wide). These tests run no repair on host a.
//!
//! The server is `TOLLGATE_TEST_POSTGRES`, as in tests/fleet_postgres.rs: unset, every test here
//! skips with a message; with `TOLLGATE_REQUIRE_POSTGRES=1` a missing server fails them.
mod common;

use common::postgres::server;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use tollgate::config::Durability;
use tollgate::protocol::slots::SlotToken;
use tollgate::queue::{PostgresStore, PostgresUrl};

fn unique(name: &str) -> String {
    let token = SlotToken::generate().to_string();
    format!("{name}-{}-{}", std::process::id(), &token[..8])
}

fn store(url: &str, queue: &str) -> PostgresStore {
    PostgresStore::new(
        PostgresUrl::parse(url).expect("test URL parses"),
        queue.to_string(),
        Duration::from_secs(1),
        Durability::Fsync,
    )
}

/// The lease numbers of these tests (`TOLLGATE_LEASE_MILLIS`), as tests/fleet_postgres.rs uses: a
/// 10 s lease, so host b may steal a dead runner's slot 10 s after its last renewal at the
/// earliest.
const RUNNER_LEASE_MILLIS: &str = "10000";

/// `tollgate --home HOME ARGS` as host `host` (`TOLLGATE_HOST`); the runners it starts inherit it.
fn as_host(home: &Path, host: &str, args: &[&str]) -> Command {
    let mut command = Command::new(common::BIN);
    command
        .arg("--home")
        .arg(home)
        .args(args)
        .env("TOLLGATE_HOST", host)
        .env("TOLLGATE_LEASE_MILLIS", RUNNER_LEASE_MILLIS)
        .env_remove("TOLLGATE_STORE")
        .stdin(std::process::Stdio::null());
    command
}

fn run_ok(mut command: Command) -> std::process::Output {
    let out = command.output().expect("run tollgate");
    assert!(out.status.success(), "{}", common::describe(&out));
    out
}

/// A home of one worker slot on the test server; "hosts" are commands with distinct
/// `TOLLGATE_HOST`s on it.
fn fleet_home(dir: &Path, url: &str) -> std::path::PathBuf {
    let home = common::init_home(dir, 1);
    let config = home.join("tollgate.toml");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!("store = {url:?}\n"));
    std::fs::write(&config, text).expect("write config");
    home
}

/// The turn's command. Its first run starts a long-lived grandchild (`sleep 300`, its pid in
/// `DIR/grandchild.pid`), writes its own pid to `DIR/work.pid` and waits. A later run of the same
/// turn (host b's, after the steal) appends to `DIR/beside` the state of that grandchild if it is
/// still alive (not a zombie): a second copy of the turn's work running beside the first.
fn forking(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "echo $$ >> {d}/runs; \
         if [ -e {d}/ran ]; then \
           g=$(cat {d}/grandchild.pid); s=$(cut -d' ' -f3 /proc/$g/stat 2>/dev/null); \
           case \"$s\" in ''|Z|X) ;; *) echo \"$g $s\" >> {d}/beside ;; esac; exit 0; \
         fi; : > {d}/ran; \
         sleep 300 & echo $! > {d}/grandchild.pid; echo $$ > {d}/work.pid; wait"
    )
}

/// Whether `pid` is a running (not zombie) process.
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        !matches!(state, Some('Z' | 'X') | None)
    })
}

fn parent_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the work's stat");
    let (_, rest) = stat.rsplit_once(") ").expect("a stat line");
    rest.split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("a parent pid")
}

/// Polls `ready` every 20 ms for at most `limit`.
fn poll(limit: Duration, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The lease of the runner `pid` of host `host`, and the database clock it was read at.
fn runner_lease(store: &PostgresStore, host: &str, pid: u32) -> (Option<u64>, u64) {
    let snapshot = store.leases().expect("read the leases");
    let lease = snapshot
        .table
        .leases
        .iter()
        .find(|l| l.holder.host.as_str() == host && l.holder.process.pid == pid)
        .map(|l| l.expires_at_db_millis);
    (lease, snapshot.now_db_millis)
}

fn queue_rows(home: &Path, host: &str) -> usize {
    let out = run_ok(as_host(home, host, &["status", "--json"]));
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status json");
    view["rows"].as_array().map_or(0, Vec::len)
}

fn turn_state(home: &Path, host: &str, task: &str) -> String {
    let out = run_ok(as_host(home, host, &["status", "--json"]));
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status json");
    view["tasks"]
        .as_array()
        .and_then(|tasks| tasks.iter().find(|t| t["name"] == task))
        .and_then(|t| t["turns"].as_array()?.first()?["state"].as_str())
        .unwrap_or("?")
        .to_string()
}

/// Starts the forking turn as host `host`; returns (command pid, grandchild pid, runner pid)
/// once the grandchild runs.
fn start_forking(home: &Path, dir: &Path, host: &str) -> (u32, u32, u32) {
    let script = forking(dir);
    run_ok(as_host(
        home,
        host,
        &["submit", "--task", "held", "--", "sh", "-c", &script],
    ));
    poll(Duration::from_secs(15), "the work starts", || {
        read_pid(&dir.join("work.pid")).is_some() && read_pid(&dir.join("grandchild.pid")).is_some()
    });
    let work = read_pid(&dir.join("work.pid")).expect("work.pid");
    let grandchild = read_pid(&dir.join("grandchild.pid")).expect("grandchild.pid");
    assert!(running(grandchild), "the grandchild runs");
    (work, grandchild, parent_of(work))
}

/// Issue 14, the live-host hole: host a's runner is SIGKILLed while its command's grandchild
/// runs; the host stays up and connected and nothing on it runs a repair. The grandchild must be
/// dead while a's lease is still unexpired on the database clock (so before host b may take the
/// slot), and when host b runs the turn again after the expiry nothing of the first run is left
/// beside it.
#[test]
fn a_sigkilled_runner_on_a_live_host_leaves_nothing_running_before_its_lease_expires() {
    let Some(url) = server() else { return };
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = fleet_home(tmp.path(), &url);
    let direct = store(&url, "lease-witness");
    let (a, b) = (unique("guard-a"), unique("guard-b"));
    let (work, grandchild, runner) = start_forking(&home, tmp.path(), &a);
    let (lease, _) = runner_lease(&direct, &a, runner);
    assert!(lease.is_some(), "the runner of host a holds a lease");

    // SIGKILL only a's runner. No reconcile, status or submit on host a from here on.
    let killed_at = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(runner as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL the runner");
    poll(Duration::from_secs(5), "the runner is dead", || {
        !running(runner)
    });

    // A bounded poll of observable state: the grandchild's and the command's /proc entries and
    // the lease on the database clock. The lease expiring first is the failure. Both die of one
    // kill, in no fixed order: the grandchild was once seen dead while the command still ran.
    let deadline = Instant::now() + Duration::from_secs(30);
    while running(grandchild) || running(work) {
        let (lease, now_db) = runner_lease(&direct, &a, runner);
        assert!(
            lease.is_some_and(|expiry| now_db <= expiry),
            "host a's lease expired (now {now_db}, lease {lease:?}) while the work of its SIGKILLed \
             runner still runs (command {work}, grandchild {grandchild}): host b may now run the \
             turn beside it"
        );
        assert!(Instant::now() < deadline, "the work never died");
        std::thread::sleep(Duration::from_millis(20));
    }
    let dead_after = killed_at.elapsed();
    let (lease, now_db) = runner_lease(&direct, &a, runner);
    let expiry = lease.expect("the dead runner's lease is still there: nothing stole it");
    assert!(now_db <= expiry, "the work died after the expiry");
    eprintln!(
        "grandchild dead {dead_after:?} after the runner's SIGKILL, {} ms before the lease's expiry",
        expiry - now_db
    );

    // Host b, after the expiry, runs the turn again: nothing of the first run beside it.
    poll(
        Duration::from_secs(30),
        "host b runs the turn again after the expiry",
        || {
            run_ok(as_host(&home, &b, &["reconcile"]));
            queue_rows(&home, &b) == 0
        },
    );
    assert_eq!(turn_state(&home, &b, "held"), "completed");
    let runs = std::fs::read_to_string(tmp.path().join("runs")).expect("runs");
    assert_eq!(runs.lines().count(), 2, "runs of the turn: {runs:?}");
    let beside = std::fs::read_to_string(tmp.path().join("beside")).unwrap_or_default();
    assert!(
        beside.is_empty(),
        "the first run's grandchild ran beside the second run: {beside:?}"
    );
}

/// The guards of this home's runners (`worker guard`, found by their command line and the
/// `TOLLGATE_HOME` they inherited from their runner), alive ones only.
fn guards_of(home: &Path) -> Vec<u32> {
    let wanted = format!("TOLLGATE_HOME={}", home.display());
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            args.windows(2)
                .any(|w| w[0] == b"worker" && w[1] == b"guard")
                && environ.split(|&b| b == 0).any(|v| v == wanted.as_bytes())
                && running(pid)
        })
        .collect()
}

/// The guard is not what kills a work on the runner's own paths: with its guard SIGKILLed, a
/// cancel still kills the turn's whole tree (the grandchild included), and a guard whose runner
/// ended normally exits without being told anything else.
#[test]
fn a_killed_guard_leaves_the_runners_own_kill_and_an_ended_runners_guard_exits() {
    let Some(url) = server() else { return };
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = fleet_home(tmp.path(), &url);
    let a = unique("guard-own");
    let (_, grandchild, runner) = start_forking(&home, tmp.path(), &a);
    let mut guards = Vec::new();
    poll(Duration::from_secs(5), "the runner's guard runs", || {
        guards = guards_of(&home);
        !guards.is_empty()
    });
    assert_eq!(guards.len(), 1, "one guard per runner: {guards:?}");
    assert_ne!(
        parent_of(guards[0]),
        runner,
        "the guard is not the runner's child"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(guards[0] as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL the guard");
    poll(Duration::from_secs(5), "the guard is dead", || {
        !running(guards[0])
    });
    assert!(running(grandchild), "killing the guard kills nothing");
    run_ok(as_host(&home, &a, &["cancel", "held"]));
    poll(Duration::from_secs(15), "the cancelled turn ends", || {
        turn_state(&home, &a, "held") == "cancelled"
    });
    assert!(
        !running(grandchild),
        "the cancel left the grandchild running"
    );

    // A turn that ends normally: its guard is told `done` and exits.
    run_ok(as_host(
        &home,
        &a,
        &["submit", "--wait", "--task", "short", "--", "true"],
    ));
    assert_eq!(turn_state(&home, &a, "short"), "completed");
    poll(
        Duration::from_secs(5),
        "the ended runner's guard exits",
        || guards_of(&home).is_empty(),
    );
}

/// Issue 14's last hole: a runner and its guard SIGKILLed at the same moment (no one left to kill
/// the work, and no repair on this host). With the turn's command in a PID namespace of its own
/// (`TOLLGATE_PIDNS=1`, spec/containment.md), the kernel kills the whole tree when the namespace's
/// init dies with the runner: the command and its TERM-ignoring `setsid` grandchild are dead
/// within a bound, long before the lease expires. Needs `CAP_SYS_ADMIN` (root, as CI runs);
/// prints `SKIPPED` otherwise. Pids are written as this namespace sees them (`/proc/self/stat`
/// read by the shell itself; `$$` is the pid inside the turn's namespace).
#[test]
fn a_runner_and_its_guard_sigkilled_together_leave_nothing_running() {
    let Some(url) = server() else { return };
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: CLONE_NEWPID needs CAP_SYS_ADMIN (run as root)");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = fleet_home(tmp.path(), &url);
    let a = unique("guard-both");
    let d = tmp.path().display();
    let own_pid = |name: &str| {
        format!(
            "read p _ < /proc/self/stat; echo $p > {d}/{name}.tmp && mv {d}/{name}.tmp {d}/{name}"
        )
    };
    let script = format!(
        "setsid sh -c 'trap \"\" TERM; {}; exec sleep 300' & {}; wait",
        own_pid("grandchild.pid"),
        own_pid("work.pid")
    );
    let mut submit = as_host(
        &home,
        &a,
        &["submit", "--task", "both", "--", "sh", "-c", &script],
    );
    submit.env("TOLLGATE_PIDNS", "1");
    run_ok(submit);
    poll(Duration::from_secs(15), "the work starts", || {
        read_pid(&tmp.path().join("work.pid")).is_some()
            && read_pid(&tmp.path().join("grandchild.pid")).is_some()
    });
    let work = read_pid(&tmp.path().join("work.pid")).expect("work.pid");
    let grandchild = read_pid(&tmp.path().join("grandchild.pid")).expect("grandchild.pid");
    assert!(running(work) && running(grandchild), "the work runs");
    // The namespace's init is a fork of the runner (its command line too): the runner is the one
    // whose parent is not another of them.
    let runners = common::containment::runners(&home);
    let outer: Vec<u32> = runners
        .iter()
        .map(|&r| r as u32)
        .filter(|&r| !runners.contains(&(parent_of(r) as i32)))
        .collect();
    assert_eq!(outer.len(), 1, "one runner: {runners:?}");
    let runner = outer[0];
    let mut guards = Vec::new();
    poll(Duration::from_secs(5), "the runner's guard runs", || {
        guards = guards_of(&home);
        !guards.is_empty()
    });
    assert_eq!(guards.len(), 1, "one guard per runner: {guards:?}");
    for pid in [guards[0], runner] {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("SIGKILL");
    }
    let killed = Instant::now();
    poll(
        Duration::from_secs(5),
        "the command and its TERM-ignoring setsid grandchild die with the runner and its guard",
        || !running(work) && !running(grandchild),
    );
    eprintln!(
        "the work was dead {:?} after the SIGKILLs",
        killed.elapsed()
    );
}
