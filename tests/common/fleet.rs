//! Homes of a fleet in tests: homes with distinct `host` settings on one PostgreSQL queue (as
//! two machines would be), the binary run on them, and what `status --json` says of a turn.

use super::postgres::{unique, with_queue};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// One queue of its own per test, named in the URL so both homes share it (queues and hosts
/// are shared by the database, and a drained host is drained for every queue).
pub fn shared_url(url: &str, name: &str) -> String {
    with_queue(url, &unique(name))
}

/// A home at `dir` with `workers` slots on `url`, as host `host`.
pub fn home_on(dir: &Path, url: &str, host: &str, workers: usize) -> PathBuf {
    let home = super::init_home(dir, workers);
    let config = home.join("tollgate.toml");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!("store = {url:?}\nhost = {host:?}\n"));
    std::fs::write(&config, text).expect("write config");
    home
}

/// The binary on `home`, with no host or store taken from the environment.
pub fn tollgate(home: &Path, args: &[&str]) -> Output {
    tollgate_with(home, args, &[])
}

/// [`tollgate`] with `env` set for the process (a host's own settings, a test clock offset).
pub fn tollgate_with(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(super::BIN)
        .arg("--home")
        .arg(home)
        .args(args)
        .env_remove("TOLLGATE_HOST")
        .env_remove("TOLLGATE_STORE")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run tollgate")
}

/// [`tollgate`], which must succeed.
pub fn ok(home: &Path, args: &[&str]) -> Output {
    let out = tollgate(home, args);
    assert!(out.status.success(), "{args:?}: {}", super::describe(&out));
    out
}

/// [`ok`], whose output is JSON.
pub fn json(home: &Path, args: &[&str]) -> serde_json::Value {
    let out = ok(home, args);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", super::describe(&out)))
}

/// The turn `task:turn` as `status --json` on `home` shows it.
pub fn turn_view(home: &Path, task: &str, turn: u64) -> serde_json::Value {
    let view = json(home, &["status", "--json", "--all"]);
    view["tasks"]
        .as_array()
        .and_then(|tasks| tasks.iter().find(|t| t["name"] == task))
        .and_then(|t| {
            t["turns"]
                .as_array()?
                .iter()
                .find(|x| x["turn"] == turn)
                .cloned()
        })
        .unwrap_or_else(|| panic!("no turn {task}:{turn} in {view}"))
}

/// Polls `status` on `home` (a bounded poll of observable state) until `task:turn` has `state`.
pub fn wait_state(home: &Path, task: &str, turn: u64, state: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let view = turn_view(home, task, turn);
        if view["state"] == state {
            return view;
        }
        assert!(
            Instant::now() < deadline,
            "{task}:{turn} never became {state}: {view}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
