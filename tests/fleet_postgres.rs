//! The fleet's leases (spec/fleet.md) in a real PostgreSQL store: two hosts on one database
//! see each other's executors through their leases, on the database clock (F3: a lease is stolen
//! only once expired); a runner whose renewals can no longer reach the database (its connection
//! goes through a TCP proxy the test cuts) kills its work before its lease expires, and the other
//! host then takes the slot (F1).
//!
//! The server is `TOLLGATE_TEST_POSTGRES`, as in tests/store_postgres.rs: unset, every test here
//! skips with a message; with `TOLLGATE_REQUIRE_POSTGRES=1` a missing server fails them.
mod common;

use common::Procs;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use tollgate::config::Durability;
use tollgate::fleet::boottime_millis;
use tollgate::protocol::fleet::{FleetIdentity, HostId, LeaseLiveness, LeaseTiming, RenewOutcome};
use tollgate::protocol::slots::{Liveness, Observation, ProcessIdentity};
use tollgate::queue::{redact, PostgresStore, PostgresUrl};
use tollgate::runner::lease::{FenceReason, LeaseKeeper};

use common::postgres::{server, unique, with_queue};

fn store(url: &str, queue: &str) -> PostgresStore {
    PostgresStore::new(
        PostgresUrl::parse(url).expect("test URL parses"),
        queue.to_string(),
        Duration::from_secs(1),
        Durability::Fsync,
    )
}

fn fleet_id(host: &HostId, pid: u32) -> FleetIdentity {
    FleetIdentity {
        host: host.clone(),
        process: ProcessIdentity {
            pid,
            start_time_micros: 1_000,
        },
    }
}

/// Short numbers for tests (what `TOLLGATE_LEASE_MILLIS=4000` gives): kill 3.29 s after a send,
/// 0.71 s before the earliest expiry.
const SHORT: LeaseTiming = LeaseTiming {
    lease_duration_millis: 4_000,
    renew_interval_millis: 666,
    margin_millis: 266,
    kill_budget_millis: 400,
    drift_ppm: 10_000,
};

/// Polls `ready` every few milliseconds for at most `limit`.
fn poll(limit: Duration, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn two_hosts_on_one_database_see_each_others_executors_by_lease_and_steal_only_after_expiry() {
    let Some(url) = server() else { return };
    SHORT.validate().unwrap();
    let a_host = HostId::new(unique("host-a")).unwrap();
    let b_host = HostId::new(unique("host-b")).unwrap();
    let a = store(&url, &unique("fleet-a"));
    let b = store(&url, &unique("fleet-b"));
    // The same pid and start time on both hosts: two different processes.
    let on_a = fleet_id(&a_host, 4_242);
    let on_b = fleet_id(&b_host, 4_242);
    a.acquire_lease(&on_a, &SHORT).unwrap().unwrap();
    let again = a.acquire_lease(&on_a, &SHORT).unwrap().unwrap_err();
    assert_eq!(again.code(), "LEASE_HELD");

    // Host b sees a's executor alive through its lease, though no such process runs on b.
    let snapshot = b.leases().unwrap();
    let local = Procs::new();
    let seen_from_b = LeaseLiveness {
        host: &b_host,
        leases: &snapshot.table,
        now_db_millis: snapshot.now_db_millis,
        local: &local,
    };
    assert_eq!(seen_from_b.observe(&on_a.process), Observation::Matching);
    // A lease is never evidence on its own host: a observes its own processes through /proc.
    let seen_from_a = LeaseLiveness {
        host: &a_host,
        ..seen_from_b
    };
    assert_ne!(seen_from_a.observe(&on_a.process), Observation::Matching);

    // b's process holds no lease and cannot renew a's (a renewal names only its sender's).
    assert_eq!(b.renew_lease(&on_b, &SHORT).unwrap(), RenewOutcome::Lost);
    assert!(b.leases().unwrap().table.lease_of(&on_b).is_none());

    // Not expired on the database clock: the steal is refused and changes nothing.
    let refused = b.steal_lease(&on_a).unwrap().unwrap_err();
    assert_eq!(refused.code(), "LEASE_NOT_EXPIRED", "{refused}");
    assert!(b.leases().unwrap().table.lease_of(&on_a).is_some());

    // Once the database clock passes the expiry, b may steal it, and then a's process is gone.
    // The lease table is shared by every queue on the server: another test's section may sweep
    // the expired lease first (a sweep removes only expired leases), so "no such lease" after a
    // refusal for not being expired also says that it expired.
    poll(Duration::from_secs(10), "the lease expires", || {
        match b.steal_lease(&on_a).unwrap() {
            Ok(_) => true,
            Err(e) => e.code() == "LEASE_UNKNOWN",
        }
    });
    let snapshot = b.leases().unwrap();
    assert!(snapshot.table.lease_of(&on_a).is_none());
    assert!(!snapshot.remote_live(&b_host, &on_a.process));
    // And a's late renewal finds it lost: it must fence.
    assert_eq!(a.renew_lease(&on_a, &SHORT).unwrap(), RenewOutcome::Lost);
}

/// A TCP proxy in front of the server (reached over TCP or its unix socket, as `.ci/run`'s
/// cluster is): every byte passes until [`Proxy::cut`], which closes the open connections
/// and every later one is closed on accept.
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<Box<dyn Stream>>>>,
}

/// Where the proxy connects: the server's TCP address or its unix socket.
#[derive(Clone, Debug)]
enum Upstream {
    Tcp(String),
    Unix(std::path::PathBuf),
}

/// Both ends of a proxied connection, whatever their transport.
trait Stream: Read + Write + Send + 'static {
    fn clone_stream(&self) -> Option<Box<dyn Stream>>;
    fn shut(&self);
}

impl Stream for TcpStream {
    fn clone_stream(&self) -> Option<Box<dyn Stream>> {
        self.try_clone()
            .ok()
            .map(|s| Box::new(s) as Box<dyn Stream>)
    }
    fn shut(&self) {
        let _ = self.shutdown(Shutdown::Both);
    }
}

impl Stream for std::os::unix::net::UnixStream {
    fn clone_stream(&self) -> Option<Box<dyn Stream>> {
        self.try_clone()
            .ok()
            .map(|s| Box::new(s) as Box<dyn Stream>)
    }
    fn shut(&self) {
        let _ = self.shutdown(Shutdown::Both);
    }
}

impl Upstream {
    /// The server of `url`: its TCP address, or the socket file in its `host` directory.
    fn of(url: &str) -> Upstream {
        let config: postgres::Config = url.parse().unwrap();
        let port = config.get_ports().first().copied().unwrap_or(5432);
        // `postgresql://user@localhost/db?host=/dir` lists both; the socket is what the client
        // reaches (a `host` parameter overrides the authority).
        if let Some(dir) = unix_dir(&config) {
            return Upstream::Unix(dir.join(format!(".s.PGSQL.{port}")));
        }
        match config.get_hosts().first() {
            Some(postgres::config::Host::Tcp(host)) => Upstream::Tcp(format!("{host}:{port}")),
            _ => panic!("{} names no server", redact(url)),
        }
    }

    fn connect(&self) -> Option<Box<dyn Stream>> {
        match self {
            Upstream::Tcp(addr) => TcpStream::connect(addr)
                .ok()
                .map(|s| Box::new(s) as Box<dyn Stream>),
            Upstream::Unix(path) => std::os::unix::net::UnixStream::connect(path)
                .ok()
                .map(|s| Box::new(s) as Box<dyn Stream>),
        }
    }
}

impl Proxy {
    fn start(upstream: Upstream) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<Box<dyn Stream>>>> = Arc::default();
        let (cut2, open2) = (Arc::clone(&cut), Arc::clone(&open));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                if cut2.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let Some(server) = upstream.connect() else {
                    continue;
                };
                let (Some(client_read), Some(server_read), Some(c3), Some(s3)) = (
                    client.clone_stream(),
                    server.clone_stream(),
                    client.clone_stream(),
                    server.clone_stream(),
                ) else {
                    continue;
                };
                open2.lock().unwrap().extend([c3, s3]);
                pipe(client_read, server);
                pipe(server_read, Box::new(client));
            }
        });
        Proxy { port, cut, open }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for stream in self.open.lock().unwrap().drain(..) {
            stream.shut();
        }
    }

    /// The partition heals: connections made from now on pass again.
    fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

fn pipe(mut from: Box<dyn Stream>, mut to: Box<dyn Stream>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 || to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        to.shut();
    });
}

/// `url` pointed at the proxy: its `host:port` replaced, or, for a unix-socket server, the same
/// user and database over TCP to the proxy.
fn through(url: &str, proxy: &Proxy) -> String {
    let config: postgres::Config = url.parse().unwrap();
    if unix_dir(&config).is_some() {
        return format!(
            "postgresql://{}@127.0.0.1:{}/{}",
            config.get_user().expect("the URL names a user"),
            proxy.port,
            config.get_dbname().expect("the URL names a database"),
        );
    }
    match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(host)) => {
            let port = config.get_ports().first().copied().unwrap_or(5432);
            let authority = format!("{host}:{port}");
            assert!(
                url.contains(&authority),
                "{} names no {authority}",
                redact(url)
            );
            url.replacen(&authority, &format!("127.0.0.1:{}", proxy.port), 1)
        }
        _ => panic!("{} names no server", redact(url)),
    }
}

/// The unix-socket directory `config` names, if any.
fn unix_dir(config: &postgres::Config) -> Option<std::path::PathBuf> {
    config.get_hosts().iter().find_map(|h| match h {
        postgres::config::Host::Unix(dir) => Some(dir.clone()),
        postgres::config::Host::Tcp(_) => None,
    })
}

#[test]
fn a_runner_cut_off_from_the_database_kills_its_work_before_its_lease_expires() {
    let Some(url) = server() else { return };
    assert_eq!(
        tollgate::fleet::lease_timing_from(Some("4000")).unwrap(),
        SHORT
    );
    let a_host = HostId::new(unique("cut-a")).unwrap();
    let b_host = HostId::new(unique("cut-b")).unwrap();
    let proxy = Proxy::start(Upstream::of(&url));
    let proxied = through(&url, &proxy);
    let queue = unique("cut");
    let a = store(&proxied, &queue);
    let b = store(&url, &queue);

    // The work: a real process the runner must kill when it fences.
    let mut work = Command::new("sleep").arg("600").spawn().unwrap();
    let work_pid = work.id();
    let me = fleet_id(&a_host, work_pid);
    let sent = boottime_millis();
    a.acquire_lease(&me, &SHORT).unwrap().unwrap();
    let first_expiry = b
        .leases()
        .unwrap()
        .table
        .lease_of(&me)
        .unwrap()
        .expires_at_db_millis;

    let (fenced_tx, fenced_rx) = mpsc::channel();
    let witness = store(&url, &queue);
    witness.leases().unwrap(); // connected before the fence needs it
    let holder = me.clone();
    let keeper = LeaseKeeper::start(
        SHORT,
        sent,
        move || a.renew_lease(&me, &SHORT).map_err(|e| e.to_string()),
        move |reason: FenceReason| {
            // The runner's fence action: kill the work and wait until it is gone.
            let _ = work.kill();
            let status = work.wait();
            let fenced_at = boottime_millis();
            // At once, as the other host: the lease has not expired yet, its slot is not free.
            let steal = witness
                .steal_lease(&holder)
                .map(|r| r.map_err(|e| e.code()));
            fenced_tx
                .send((reason, fenced_at, status.is_ok(), steal))
                .unwrap();
        },
    )
    .unwrap();

    // Renewals through the proxy work: the expiry moves on the database clock.
    let me = fleet_id(&a_host, work_pid);
    poll(Duration::from_secs(10), "a renewal is confirmed", || {
        b.leases()
            .unwrap()
            .table
            .lease_of(&me)
            .is_some_and(|l| l.expires_at_db_millis > first_expiry)
    });
    let cut_at = boottime_millis();
    proxy.cut();

    let (reason, fenced_at, reaped, steal_at_fence) = fenced_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the runner fences within 10 s of the cut");
    assert!(reaped, "the work was waited for");
    assert!(
        matches!(reason, FenceReason::Unconfirmed { .. }),
        "{reason:?}"
    );
    // The work is dead (its pid no longer names a live `sleep`) ...
    let alive = std::fs::read_to_string(format!("/proc/{work_pid}/cmdline"))
        .is_ok_and(|c| c.starts_with("sleep"));
    assert!(!alive, "the work still runs after the fence");
    // ... before its lease expired: host b could not take the slot yet.
    assert_eq!(
        steal_at_fence.expect("the witness reaches the database"),
        Err("LEASE_NOT_EXPIRED"),
        "the lease had expired before the work was dead"
    );
    eprintln!(
        "fenced {} ms after the cut; lease {} ms, kill {} ms after the last confirmed send",
        fenced_at - cut_at,
        SHORT.lease_duration_millis,
        SHORT.kill_at_local_millis(0)
    );
    assert!(keeper.join().is_some());

    // Then b takes the slot: the stale lease is stolen once expired and b's executor leases.
    poll(
        Duration::from_secs(10),
        "the cut host's lease expires",
        || b.steal_lease(&me).unwrap().is_ok(),
    );
    let successor = fleet_id(&b_host, work_pid);
    b.acquire_lease(&successor, &SHORT).unwrap().unwrap();
    let snapshot = b.leases().unwrap();
    assert!(snapshot.table.lease_of(&me).is_none());
    assert!(snapshot.table.lease_of(&successor).is_some());
    assert!(b.release_lease(&successor).unwrap());
}

/// A home of a fleet (one with a `host` setting) whose store URL names no queue would get a
/// queue of its own and split the fleet silently: every command that uses the store refuses it,
/// naming the setting and the fix, and changes nothing. Decided before any connection, so it
/// needs no server.
#[test]
fn a_fleet_home_without_a_queue_in_its_store_url_is_refused_naming_the_fix() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = common::init_home(tmp.path(), 1);
    let config = home.join("tollgate.toml");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str("store = \"postgres://tg:secret@127.0.0.1:1/fleet\"\nhost = \"copied\"\n");
    std::fs::write(&config, text).expect("write config");
    for args in [vec!["submit", "--", "true"], vec!["status"]] {
        let out = common::tollgate(&home, &args);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{args:?}: {}",
            common::describe(&out)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&config.display().to_string())
                && stderr.contains("`host`")
                && stderr.contains("?queue=NAME")
                && stderr.contains("postgres://tg:***@127.0.0.1:1/fleet?queue=fleet")
                && !stderr.contains("secret"),
            "{args:?}: {}",
            common::describe(&out)
        );
    }
    assert!(!home.join("tollgate.db").exists(), "nothing was made");
    // The config stays readable, so the fix can be made with tollgate itself.
    let out = common::tollgate(&home, &["config", "get", "host"]);
    assert!(out.status.success(), "{}", common::describe(&out));
}

#[test]
fn two_homes_with_distinct_host_settings_share_one_named_queue_and_a_bad_host_is_refused() {
    let Some(url) = server() else { return };
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = with_queue(&url, &unique("fleet"));
    let mut homes = Vec::new();
    for name in ["one", "two"] {
        let dir = tmp.path().join(name);
        let home = common::init_home(&dir, 1);
        let config = home.join("tollgate.toml");
        let mut text = std::fs::read_to_string(&config).expect("config");
        text.push_str(&format!("store = {store:?}\nhost = \"fleet-{name}\"\n"));
        std::fs::write(&config, text).expect("write config");
        homes.push(home);
    }
    for home in &homes {
        let out = common::tollgate(home, &["submit", "--wait", "--task", "fleet", "--", "true"]);
        assert!(out.status.success(), "{}", common::describe(&out));
    }
    // One queue: both turns are one task's, seen from either home, each run by its own host.
    let out = common::tollgate(&homes[1], &["status", "fleet", "--json"]);
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let hosts: Vec<&str> = view["tasks"][0]["turns"]
        .as_array()
        .expect("turns")
        .iter()
        .filter_map(|t| t["host"].as_str())
        .collect();
    assert_eq!(hosts, ["fleet-one", "fleet-two"], "{view}");
    // `hosts` is a fleet's: on a SQLite home it is refused naming the setting.
    let sqlite = common::init_home(&tmp.path().join("sqlite"), 1);
    let out = common::tollgate(&sqlite, &["hosts"]);
    assert!(!out.status.success(), "{}", common::describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("tollgate.toml"),
        "{}",
        common::describe(&out)
    );
    // A host name that could not be a key is refused naming the file and the key; nothing runs.
    let config = homes[0].join("tollgate.toml");
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, text.replace("fleet-one", "fleet one")).expect("write config");
    let out = common::tollgate(&homes[0], &["submit", "--", "true"]);
    assert!(!out.status.success(), "{}", common::describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&config.display().to_string())
            && stderr.contains("`host`")
            && stderr.contains("HOST_INVALID"),
        "{}",
        common::describe(&out)
    );
}

/// The lease numbers of the runner tests (`TOLLGATE_LEASE_MILLIS`): a 10 s lease, so a runner
/// fences 8.2 s after its last confirmed send and the earliest steal comes 1.8 s after that,
/// time enough for the test to look at the other host before the expiry on a loaded machine.
const RUNNER_LEASE_MILLIS: &str = "10000";

/// `tollgate --home HOME ARGS` as host `host` (`TOLLGATE_HOST`), through `store` if given
/// (`TOLLGATE_STORE`, e.g. the proxied URL); the runners it starts inherit both.
fn as_host(home: &std::path::Path, host: &str, store: Option<&str>, args: &[&str]) -> Command {
    let mut command = Command::new(common::BIN);
    command
        .arg("--home")
        .arg(home)
        .args(args)
        .env("TOLLGATE_HOST", host)
        .env("TOLLGATE_LEASE_MILLIS", RUNNER_LEASE_MILLIS)
        .stdin(std::process::Stdio::null());
    match store {
        Some(url) => command.env("TOLLGATE_STORE", url),
        None => command.env_remove("TOLLGATE_STORE"),
    };
    command
}

fn run_ok(mut command: Command) -> std::process::Output {
    let out = command.output().expect("run tollgate");
    assert!(out.status.success(), "{}", common::describe(&out));
    out
}

/// A home of one worker slot on the test server: "hosts" are commands run with distinct
/// `TOLLGATE_HOST`s on this home (one queue, one set of records, as on a shared filesystem).
fn fleet_home(dir: &std::path::Path, url: &str) -> std::path::PathBuf {
    let home = common::init_home(dir, 1);
    let config = home.join("tollgate.toml");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!("store = {url:?}\n"));
    std::fs::write(&config, text).expect("write config");
    home
}

/// The turn's command: every run appends its pid to `DIR/runs`; the first run writes its pid to
/// `DIR/work.pid` and sleeps (until killed); a second run of the same turn (the other host's,
/// after the steal) ends at once.
fn sleeper(dir: &std::path::Path) -> String {
    let d = dir.display();
    format!(
        "echo $$ >> {d}/runs; if [ -e {d}/ran ]; then exit 0; fi; : > {d}/ran; \
         echo $$ > {d}/work.pid; exec sleep 600"
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
    rest.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The state of task `task`'s latest turn and when it started (ms since the epoch), from
/// `status --json` as host `host`.
fn turn_of(home: &std::path::Path, host: &str, task: &str) -> (String, Option<u64>) {
    let out = run_ok(as_host(home, host, None, &["status", "--json"]));
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status json");
    let turn = view["tasks"]
        .as_array()
        .and_then(|tasks| tasks.iter().find(|t| t["name"] == task))
        .and_then(|t| t["turns"].as_array()?.first().cloned())
        .unwrap_or_else(|| panic!("no turn of {task}: {view}"));
    (
        turn["state"].as_str().unwrap_or("?").to_string(),
        turn["started_at_millis"].as_u64(),
    )
}

fn queue_rows(home: &std::path::Path, host: &str) -> usize {
    let out = run_ok(as_host(home, host, None, &["status", "--json"]));
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status json");
    view["rows"].as_array().map_or(0, Vec::len)
}

/// The lease of the runner `pid` of host `host`, and the database clock it was read at.
fn runner_lease(store: &PostgresStore, host: &str, pid: u32) -> (Option<u64>, u64) {
    let snapshot = store.leases().unwrap();
    let lease = snapshot
        .table
        .leases
        .iter()
        .find(|l| l.holder.host.as_str() == host && l.holder.process.pid == pid)
        .map(|l| l.expires_at_db_millis);
    (lease, snapshot.now_db_millis)
}

/// Starts a turn as host `host` and returns (work pid, runner pid) once its command runs.
fn start_sleeper(
    home: &std::path::Path,
    dir: &std::path::Path,
    host: &str,
    store: Option<&str>,
) -> (u32, u32) {
    let script = sleeper(dir);
    run_ok(as_host(
        home,
        host,
        store,
        &["submit", "--task", "held", "--", "sh", "-c", &script],
    ));
    let pid_file = dir.join("work.pid");
    poll(Duration::from_secs(15), "the work starts", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|t| t.trim().parse::<u32>().is_ok())
    });
    let work: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (work, parent_of(work))
}

/// Milliseconds since the epoch on this machine's clock (the one `started_at_millis` is on).
fn epoch_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Issue 14's partition acceptance: host a's turn runs with its runner's connection through a
/// proxy the test cuts. Its work is dead (`/proc`) while its lease is unexpired, so before any
/// other host may start a turn in that slot (host b's turn starts only after the death the test
/// observed, and after the expiry); the runner exits with 75 (`FENCED_EXIT_CODE`) and records
/// nothing; after the proxy heals everything drains: host a's turn ran again (on b, after the
/// steal), b's turn and a turn a submits after the heal completed, and the queue is empty.
///
/// The test process makes itself a child subreaper (`PR_SET_CHILD_SUBREAPER`) so that the
/// detached runner, orphaned when its `submit` exits, becomes its child and its exit status can be
/// read with `waitpid`. Other tests of this binary then leave their ended runners as zombies of
/// this process until it exits; zombies observe as gone everywhere (`running` here, `/proc`
/// liveness in tollgate), so they see no difference.
#[test]
fn a_runner_cut_off_from_the_database_kills_its_work_and_exits_before_another_host_takes_its_slot()
{
    let Some(url) = server() else { return };
    nix::sys::prctl::set_child_subreaper(true).expect("PR_SET_CHILD_SUBREAPER");
    let tmp = tempfile::tempdir().unwrap();
    let home = fleet_home(tmp.path(), &url);
    let proxy = Proxy::start(Upstream::of(&url));
    let proxied = through(&url, &proxy);
    let direct = store(&url, "lease-witness");
    let (a, b) = (unique("cut-a"), unique("cut-b"));

    // Host a's turn runs, its runner's connection going through the proxy.
    let (work, runner) = start_sleeper(&home, tmp.path(), &a, Some(&proxied));
    let (lease, _) = runner_lease(&direct, &a, runner);
    assert!(lease.is_some(), "the runner of host a holds a lease");
    assert_eq!(
        parent_of(runner),
        std::process::id(),
        "the detached runner is this subreaper's child once its submit exited"
    );

    let cut_at = Instant::now();
    proxy.cut();
    poll(
        Duration::from_secs(15),
        "the cut runner kills its work",
        || !running(work),
    );
    let dead_at_millis = epoch_millis();
    // Its work is dead before its lease expired on the database clock: nobody could steal yet.
    let (lease, now_db) = runner_lease(&direct, &a, runner);
    let expiry = lease.expect("the lease is still there: nothing stole it");
    assert!(
        now_db <= expiry,
        "the work died after the lease expired ({now_db} > {expiry})"
    );
    // The fenced runner exits 75, having recorded nothing.
    let pid = nix::unistd::Pid::from_raw(runner as i32);
    let mut status = None;
    poll(
        Duration::from_secs(5),
        "the fenced runner exits",
        || match nix::sys::wait::waitpid(pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
            Ok(nix::sys::wait::WaitStatus::StillAlive) => false,
            other => {
                status = Some(other);
                true
            }
        },
    );
    assert_eq!(
        status,
        Some(Ok(nix::sys::wait::WaitStatus::Exited(pid, 75))),
        "the fenced runner's exit"
    );
    eprintln!(
        "work dead {:?} after the cut, {} ms before the expiry",
        cut_at.elapsed(),
        expiry - now_db
    );

    // Host b, meanwhile: the lease is unexpired, so the slot is still a's; b's turn waits.
    run_ok(as_host(
        &home,
        &b,
        None,
        &["submit", "--task", "other", "--", "true"],
    ));
    run_ok(as_host(&home, &b, None, &["reconcile"]));
    assert_eq!(turn_of(&home, &b, "other").0, "queued");
    let (lease, now_db) = runner_lease(&direct, &a, runner);
    assert!(
        lease.is_some_and(|e| now_db <= e),
        "the test looked too late: the lease expired before host b's submit was checked"
    );

    // After the expiry, host b's reconcile takes the slot: a's turn runs again (and ends at once),
    // then b's.
    poll(Duration::from_secs(20), "host b drains the queue", || {
        run_ok(as_host(&home, &b, None, &["reconcile"]));
        queue_rows(&home, &b) == 0
    });
    let (state, started) = turn_of(&home, &b, "other");
    assert_eq!(state, "completed");
    let started = started.expect("started");
    // One machine, one clock: the database's and the turn's times are comparable here.
    assert!(started >= expiry, "b started before a's lease expired");
    assert!(
        started >= dead_at_millis,
        "b's turn started ({started}) before a's work was seen dead ({dead_at_millis})"
    );
    // a's turn ran again (on b, after the steal) and completed: two runs, the first one killed.
    let (state, _) = turn_of(&home, &b, "held");
    assert_eq!(state, "completed", "host a's fenced turn ran again");
    let runs = std::fs::read_to_string(tmp.path().join("runs")).expect("runs");
    assert_eq!(runs.lines().count(), 2, "runs of the fenced turn: {runs:?}");

    // The partition heals: host a runs turns again, and everything drains.
    proxy.heal();
    run_ok(as_host(
        &home,
        &a,
        Some(&proxied),
        &["submit", "--wait", "--task", "healed", "--", "true"],
    ));
    assert_eq!(turn_of(&home, &a, "healed").0, "completed");
    assert_eq!(queue_rows(&home, &a), 0);
    for task in ["held", "other", "healed"] {
        assert_eq!(turn_of(&home, &a, task).0, "completed", "{task}");
    }
    let (lease, _) = runner_lease(&direct, &a, runner);
    assert_eq!(lease, None, "the fenced runner's lease was swept");
}

#[test]
fn another_host_steals_a_killed_runners_slot_only_after_its_lease_expired() {
    let Some(url) = server() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let home = fleet_home(tmp.path(), &url);
    let direct = store(&url, "lease-witness");
    let (a, b) = (unique("kill-a"), unique("kill-b"));
    let (work, runner) = start_sleeper(&home, tmp.path(), &a, None);

    // While a's runner lives, b's reconcile leaves its slot alone.
    run_ok(as_host(
        &home,
        &b,
        None,
        &["submit", "--task", "other", "--", "true"],
    ));
    run_ok(as_host(&home, &b, None, &["reconcile"]));
    assert_eq!(turn_of(&home, &b, "other").0, "queued");
    assert!(running(work));
    // `tollgate hosts` on b lists host a with its one live executor, on the database clock.
    let out = run_ok(as_host(&home, &b, None, &["hosts", "--json"]));
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).expect("hosts json");
    assert_eq!(view["version"], 1, "{view}");
    assert_eq!(view["this_host"], b.as_str(), "{view}");
    let listed = view["hosts"]
        .as_array()
        .and_then(|h| h.iter().find(|h| h["host"] == a.as_str()).cloned())
        .unwrap_or_else(|| panic!("host a is not listed: {view}"));
    assert_eq!(listed["live_executors"], 1, "{view}");
    assert!(listed["expires_in_millis"].as_i64().unwrap() > 0, "{view}");
    // `status --json` names the host of each executor (an additive field).
    let out = run_ok(as_host(&home, &b, None, &["status", "--json"]));
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status json");
    let executor = view["runners"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["identity"]["pid"] == runner).cloned())
        .unwrap_or_else(|| panic!("a's runner is not listed: {view}"));
    assert_eq!(executor["host"], a.as_str(), "{view}");

    // SIGKILL a's runner: no renewal ever again (its command dies with it).
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(runner as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    poll(Duration::from_secs(5), "the runner is dead", || {
        !running(runner)
    });
    let (lease, _) = runner_lease(&direct, &a, runner);
    let expiry = lease.expect("the dead runner's lease is still there");
    // Dead in this machine's /proc, but b is another host: only the lease speaks for a's
    // runner, and it has not expired, so b does not steal.
    run_ok(as_host(&home, &b, None, &["reconcile"]));
    assert_eq!(turn_of(&home, &b, "other").0, "queued");
    // b's `status` judges a's runner as b's reconcile does, by its lease: running, not orphaned
    // (b cannot see a's processes; only a's own /proc could tell it died).
    assert_eq!(
        turn_of(&home, &b, "held").0,
        "running",
        "host b's status judged host a's runner by b's /proc instead of its lease"
    );
    let (lease, now_db) = runner_lease(&direct, &a, runner);
    assert!(
        lease.is_some_and(|e| now_db <= e),
        "the test looked too late: the lease expired before host b's reconcile was checked"
    );

    poll(
        Duration::from_secs(20),
        "host b steals the slot after the expiry",
        || {
            run_ok(as_host(&home, &b, None, &["reconcile"]));
            queue_rows(&home, &b) == 0
        },
    );
    let (state, started) = turn_of(&home, &b, "other");
    assert_eq!(state, "completed");
    // One machine, one clock: the database's and the turn's times are comparable here.
    assert!(
        started.expect("started") >= expiry,
        "b started before a's lease expired"
    );
    assert_eq!(
        runner_lease(&direct, &a, runner).0,
        None,
        "the expired lease was swept"
    );
}

#[test]
fn an_attached_submitter_holds_a_lease_while_its_turn_runs_and_releases_it_when_it_ends() {
    let Some(url) = server() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let home = fleet_home(tmp.path(), &url);
    let direct = store(&url, "lease-witness");
    let a = unique("attached-a");
    let pid_file = tmp.path().join("work.pid");
    let script = format!("echo $$ > {}; exec sleep 600", pid_file.display());
    let mut submitter = as_host(
        &home,
        &a,
        None,
        &[
            "submit", "--attach", "--task", "att", "--", "sh", "-c", &script,
        ],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    poll(Duration::from_secs(15), "the attached work starts", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|t| t.trim().parse::<u32>().is_ok())
    });
    // The submitter is its turn's executor: other hosts see it through its lease.
    let (lease, now_db) = runner_lease(&direct, &a, submitter.id());
    assert!(
        lease.is_some_and(|e| now_db <= e),
        "no live lease of the attached submitter"
    );
    let work: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(work as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    submitter.wait().unwrap();
    // Its finishing section gave the lease back.
    assert_eq!(runner_lease(&direct, &a, submitter.id()).0, None);
    assert_eq!(queue_rows(&home, &a), 0);
}
