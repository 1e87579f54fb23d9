//! Helpers of the containment tests: an independent `/proc` scan (matching an environment tag the
//! test chose, never the code under test's marker), a reaper for what a failed test leaves, pid
//! files, which containment paths this host can run, and a sampler thread that counts live copies.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tollgate::process::containment::{self, cgroup, Containment};

/// The environment variable every test process carries: `TEST_TAG=<tag>`.
pub const TAG_VAR: &str = "TEST_TAG";
/// How the test's own scripts name one copy of a work: `COPY=<its leader's pid>`, exported by the
/// command's first process and inherited by everything it starts.
pub const COPY_VAR: &str = "COPY";

/// A tag unique to this test run.
pub fn unique_tag(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{name}-{}-{nanos}", std::process::id())
}

fn env_value<'a>(env: &'a [u8], var: &str) -> Option<&'a [u8]> {
    env.split(|&b| b == 0).find_map(|e| {
        e.strip_prefix(var.as_bytes())
            .and_then(|r| r.strip_prefix(b"="))
    })
}

/// Every live (not zombie) process with its environment, read straight from `/proc`.
fn live_environs() -> Vec<(i32, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next());
        if matches!(state, Some("Z") | Some("X") | None) {
            continue;
        }
        if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) {
            out.push((pid, env));
        }
    }
    out
}

/// The live processes whose environment carries `TEST_TAG=<tag>`.
pub fn tagged(tag: &str) -> Vec<i32> {
    live_environs()
        .into_iter()
        .filter(|(_, env)| env_value(env, TAG_VAR) == Some(tag.as_bytes()))
        .map(|(pid, _)| pid)
        .collect()
}

/// The distinct `COPY` values among the live processes tagged `tag`, and how many processes.
pub fn copies(tag: &str) -> (BTreeSet<Vec<u8>>, usize) {
    let mut found = BTreeSet::new();
    let mut processes = 0;
    for (_, env) in live_environs() {
        if env_value(&env, TAG_VAR) == Some(tag.as_bytes()) {
            processes += 1;
            if let Some(copy) = env_value(&env, COPY_VAR) {
                found.insert(copy.to_vec());
            }
        }
    }
    (found, processes)
}

/// SIGKILLs whatever carries the tag (and removes the test's groups) when the test ends, passed
/// or failed.
pub struct Reaper {
    pub tag: String,
    pub groups: Vec<PathBuf>,
}

impl Reaper {
    pub fn new(tag: &str) -> Self {
        Reaper {
            tag: tag.to_string(),
            groups: Vec::new(),
        }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in tagged(&self.tag) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        for dir in &self.groups {
            cgroup::remove_tree(dir);
        }
    }
}

/// Waits (bounded) until every named file in `dir` holds a pid.
pub fn wait_files(dir: &Path, names: &[&str]) {
    let until = Instant::now() + Duration::from_secs(20);
    while !names.iter().all(|n| {
        std::fs::read_to_string(dir.join(n)).is_ok_and(|t| t.trim().parse::<i32>().is_ok())
    }) {
        assert!(
            Instant::now() < until,
            "pid files never appeared in {}: {names:?}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The pid in `dir/name`.
pub fn read_pid(dir: &Path, name: &str) -> i32 {
    let text = std::fs::read_to_string(dir.join(name))
        .unwrap_or_else(|e| panic!("{}/{name}: {e}", dir.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}/{name}: {text:?}: {e}", dir.display()))
}

/// The base a tollgate process started by this test would create groups under, decided as it
/// decides (without making the test process a subreaper, which would change where orphans go).
pub fn cgroup_base() -> Option<PathBuf> {
    match containment::decide(false, cgroup::base(), cgroup::probe).0 {
        Containment::Cgroup { base } => Some(base),
        Containment::Subreaper => None,
    }
}

/// The containment paths this host can run, as `(name, force_subreaper)`: the subreaper path
/// always, the cgroup path where a group can be delegated (the test prints which ran).
pub fn paths() -> Vec<(&'static str, bool)> {
    let mut out = vec![("subreaper", true)];
    match cgroup_base() {
        Some(base) => {
            eprintln!("cgroup path available: groups under {}", base.display());
            out.push(("cgroup", false));
        }
        None => eprintln!("SKIPPED the cgroup path: no delegable cgroup v2 group here"),
    }
    out
}

/// The environment value that forces a path on the tollgate processes a test starts.
pub fn no_cgroup_value(force_subreaper: bool) -> &'static str {
    if force_subreaper {
        "1"
    } else {
        "0"
    }
}

/// A thread that scans `/proc` as fast as it can and keeps the largest number of distinct copies
/// (and of processes) it ever saw live for one tag.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<SamplerReport>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What a [`Sampler`] saw.
#[derive(Clone, Debug, Default)]
pub struct SamplerReport {
    pub samples: u64,
    pub peak_copies: usize,
    pub peak_processes: usize,
}

impl Sampler {
    pub fn start(tag: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(SamplerReport::default()));
        let thread = {
            let (stop, seen, tag) = (Arc::clone(&stop), Arc::clone(&seen), tag.to_string());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let (found, processes) = copies(&tag);
                    let mut report = seen.lock().unwrap_or_else(|e| e.into_inner());
                    report.samples += 1;
                    report.peak_copies = report.peak_copies.max(found.len());
                    report.peak_processes = report.peak_processes.max(processes);
                }
            })
        };
        Sampler {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    /// What was seen so far.
    pub fn report(&self) -> SamplerReport {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops the thread and returns what it saw.
    pub fn finish(mut self) -> SamplerReport {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.report()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Whether `pid` exists and is not a zombie, read straight from `/proc`.
pub fn is_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|s| s != "Z" && s != "X")
    })
}
