//! The PostgreSQL server of the store and fleet tests. `TOLLGATE_TEST_POSTGRES=postgres://…` names
//! one; unset, the first test of a file that asks starts a throwaway cluster of its own from the
//! server binaries (Debian's `/usr/lib/postgresql/<version>/bin`, `PG_BIN`, or `pg_config
//! --bindir`), as `.ci/run` does: `initdb` as the `postgres` user when run as root, a unix socket
//! in a temporary directory and no TCP port, stopped and removed when the test binary exits. So
//! `cargo test --features model-check` runs these tests wherever the binaries are installed.
//! Where they are not, each test file says so in one line on the terminal (naming the package to
//! install) and its tests skip; with `TOLLGATE_REQUIRE_POSTGRES=1` (set by `.ci/run`) they fail
//! instead.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use tollgate::queue::redact;

/// The test server's URL, or `None` (with a message) when this run may skip.
pub fn server() -> Option<String> {
    let required = std::env::var("TOLLGATE_REQUIRE_POSTGRES").is_ok_and(|v| v == "1");
    let Ok(url) = std::env::var("TOLLGATE_TEST_POSTGRES") else {
        return throwaway(required);
    };
    match postgres::Client::connect(&url, postgres::NoTls) {
        Ok(_) => Some(url),
        Err(e) if required => panic!(
            "TOLLGATE_REQUIRE_POSTGRES=1 but {} is unreachable: {e}",
            redact(&url)
        ),
        Err(e) => {
            eprintln!(
                "skipped: TOLLGATE_TEST_POSTGRES={} is unreachable: {e}",
                redact(&url)
            );
            None
        }
    }
}

/// The throwaway cluster of this test binary (started by its first caller), or why there is
/// none: said once per test file on the terminal, past the test harness's capture of output.
fn throwaway(required: bool) -> Option<String> {
    static CLUSTER: OnceLock<Result<String, String>> = OnceLock::new();
    let cluster = CLUSTER.get_or_init(|| {
        let started = start_cluster();
        if let Err(why) = &started {
            let _ = writeln!(
                std::io::stderr().lock(),
                "tests/{}.rs: its PostgreSQL tests skip: {why}",
                env!("CARGO_CRATE_NAME")
            );
        }
        started
    });
    match cluster {
        Ok(url) => Some(url.clone()),
        Err(why) if required => panic!("TOLLGATE_REQUIRE_POSTGRES=1 but {why}"),
        Err(_) => None,
    }
}

/// Where the server binaries are: `PG_BIN`, the newest `/usr/lib/postgresql/*/bin`, or
/// `pg_config --bindir`; `None` when none holds `initdb` and `pg_ctl`.
fn server_binaries() -> Option<PathBuf> {
    let usable = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(dir) = std::env::var_os("PG_BIN").map(PathBuf::from) {
        return usable(&dir).then_some(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, e.path().join("bin")))
        })
        .filter(|(_, dir)| usable(dir))
        .collect();
    versions.sort();
    if let Some((_, dir)) = versions.pop() {
        return Some(dir);
    }
    let out = Command::new("pg_config")
        .arg("--bindir")
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    usable(&dir).then_some(dir)
}

/// Runs a server binary as the cluster's user (`postgres` when this process is root: initdb
/// refuses root), from `/` (the user may not read the test's directory).
fn as_cluster_user(root: bool, program: &Path) -> Command {
    let mut command = if root {
        let mut runuser = Command::new("runuser");
        runuser.args(["-u", "postgres", "--"]).arg(program);
        runuser
    } else {
        Command::new(program)
    };
    command.current_dir("/").stdin(Stdio::null());
    command
}

/// Runs `command`; `Err` with its output (or `log`'s) when it fails.
fn run(mut command: Command, what: &str, log: Option<&Path>) -> Result<(), String> {
    let out = command
        .output()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let logged = log
        .and_then(|l| std::fs::read_to_string(l).ok())
        .unwrap_or_default();
    Err(format!(
        "{what} failed ({}): {}{}{logged}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// Starts a cluster in a new temporary directory and returns its URL. A watchdog (in a session
/// of its own, so a Ctrl-C of the tests does not take it down first) holds the read end of a
/// pipe whose write end this process keeps open until it exits, however it exits: then it stops
/// the cluster and removes the directory.
fn start_cluster() -> Result<String, String> {
    let Some(bin) = server_binaries() else {
        return Err("no PostgreSQL server binaries (initdb, pg_ctl) in PG_BIN, \
                    /usr/lib/postgresql/*/bin or `pg_config --bindir`; install the \
                    `postgresql` package (Debian: `apt-get install postgresql`), or set \
                    TOLLGATE_TEST_POSTGRES=postgres://… to a server"
            .to_string());
    };
    let root = nix::unistd::geteuid().is_root();
    let dir = tempfile::Builder::new()
        .prefix("tollgate-test-pg.")
        .tempdir()
        .map_err(|e| format!("cannot make the cluster's directory: {e}"))?
        .keep();
    let user = if root {
        let postgres = nix::unistd::User::from_name("postgres")
            .ok()
            .flatten()
            .ok_or("running as root, and initdb refuses root, but there is no `postgres` user")?;
        nix::unistd::chown(&dir, Some(postgres.uid), Some(postgres.gid))
            .map_err(|e| format!("chown {}: {e}", dir.display()))?;
        "postgres".to_string()
    } else {
        nix::unistd::User::from_uid(nix::unistd::geteuid())
            .ok()
            .flatten()
            .map_or_else(|| "postgres".to_string(), |u| u.name)
    };
    let data = dir.join("data");
    let pg_ctl = bin.join("pg_ctl");
    // The watchdog first, so that a cluster is never left behind by a failure below.
    let stop = format!(
        "cat >/dev/null; cd /; {runuser}'{pg_ctl}' -D '{data}' -m immediate -w stop >/dev/null 2>&1; \
         rm -rf '{dir}'",
        runuser = if root { "runuser -u postgres -- " } else { "" },
        pg_ctl = pg_ctl.display(),
        data = data.display(),
        dir = dir.display(),
    );
    let mut watchdog = Command::new("setsid")
        .args(["sh", "-c", &stop])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the cluster's watchdog (setsid sh): {e}"))?;
    // Kept open for the life of this process: its end is the watchdog's signal.
    static WATCHDOG: OnceLock<std::process::ChildStdin> = OnceLock::new();
    if let Some(pipe) = watchdog.stdin.take() {
        let _ = WATCHDOG.set(pipe);
    }
    let mut initdb = as_cluster_user(root, &bin.join("initdb"));
    initdb
        .arg("-D")
        .arg(&data)
        .args(["-A", "trust", "-U", &user]);
    run(initdb, "initdb", None)?;
    let log = dir.join("server.log");
    let mut start = as_cluster_user(root, &pg_ctl);
    start
        .arg("-D")
        .arg(&data)
        .arg("-l")
        .arg(&log)
        .arg("-w")
        .arg("-o")
        .arg(format!(
            "-k {} -c listen_addresses= -c max_connections=200",
            dir.display()
        ))
        .arg("start");
    run(start, "pg_ctl start", Some(&log))?;
    let mut createdb = as_cluster_user(root, &bin.join("createdb"));
    createdb
        .arg("-h")
        .arg(&dir)
        .args(["-U", &user, "tollgate_test"]);
    run(createdb, "createdb", None)?;
    let url = format!(
        "postgresql://{user}@localhost/tollgate_test?host={}",
        dir.display()
    );
    // The schema is made once here: a fresh database's first migration holds the migration lock
    // longer than the short lock timeouts some tests give their stores.
    let setup = tollgate::queue::PostgresStore::new(
        tollgate::queue::PostgresUrl::parse(&url)?,
        "tollgate-test-setup".to_string(),
        std::time::Duration::from_secs(60),
        tollgate::config::Durability::Fsync,
    );
    tollgate::queue::Store::load(&setup)
        .map_err(|e| format!("cannot create tollgate's tables in the test cluster: {e}"))?;
    Ok(url)
}

/// A name no other test (nor an earlier run) uses: queues and hosts are shared by the database,
/// so each test takes its own. The random tail of a v7 token: its head is the time, the same for
/// tests that start together.
pub fn unique(name: &str) -> String {
    let token = tollgate::protocol::slots::SlotToken::generate().to_string();
    format!(
        "{name}-{}-{}",
        std::process::id(),
        &token[token.len() - 12..]
    )
}

/// `url` naming queue `queue` (homes naming one queue share it, spec/store.md).
pub fn with_queue(url: &str, queue: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}queue={queue}")
}
