//! Helpers of the containment tests: an independent `/proc` scan (matching an environment tag the
//! test chose, never the code under test's marker), a reaper for what a failed test leaves, pid
//! files, which containment paths this host can run, and a sampler thread that counts live copies.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
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

/// One process seen by a scan: its pid, its start time (clock ticks since boot, field 22 of
/// `stat`: with the pid it names the process, a reused pid has another start time) and its
/// environment.
struct Seen {
    pid: i32,
    start_ticks: u64,
    env: Vec<u8>,
}

/// The state letter and the start time of `pid`, from `/proc/<pid>/stat`.
fn stat_of(pid: i32) -> Option<(String, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.to_string();
    // After `)`: state is field 3, starttime field 22.
    let start_ticks = fields.nth(18)?.parse().ok()?;
    Some((state, start_ticks))
}

/// Whether the process `pid` that started at `start_ticks` is still there and not a zombie.
fn still_alive(pid: i32, start_ticks: u64) -> bool {
    stat_of(pid)
        .is_some_and(|(state, start)| start == start_ticks && !matches!(state.as_str(), "Z" | "X"))
}

/// Every live (not zombie) process with its environment, read straight from `/proc`.
fn live_environs() -> Vec<Seen> {
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
        let Some((state, start_ticks)) = stat_of(pid) else {
            continue;
        };
        if matches!(state.as_str(), "Z" | "X") {
            continue;
        }
        if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) {
            out.push(Seen {
                pid,
                start_ticks,
                env,
            });
        }
    }
    out
}

/// The live processes whose environment carries `TEST_TAG=<tag>`.
pub fn tagged(tag: &str) -> Vec<i32> {
    live_environs()
        .into_iter()
        .filter(|p| env_value(&p.env, TAG_VAR) == Some(tag.as_bytes()))
        .map(|p| p.pid)
        .collect()
}

/// What one scan saw of each copy: its `COPY` value and the processes carrying it (pid, start time).
pub type Copies = BTreeMap<Vec<u8>, Vec<(i32, u64)>>;

/// The distinct `COPY` values among the live processes tagged `tag`, each with the processes seen
/// carrying it, and how many tagged processes there were.
pub fn copies(tag: &str) -> (Copies, usize) {
    let mut found = Copies::new();
    let mut processes = 0;
    for p in live_environs() {
        if env_value(&p.env, TAG_VAR) == Some(tag.as_bytes()) {
            processes += 1;
            if let Some(copy) = env_value(&p.env, COPY_VAR) {
                found
                    .entry(copy.to_vec())
                    .or_default()
                    .push((p.pid, p.start_ticks));
            }
        }
    }
    (found, processes)
}

/// The copies of one scan that were live *at the same moment*. A scan of `/proc` is not a
/// snapshot: it reads processes one after another over milliseconds, so a copy seen early may have
/// died before a copy seen late was born (a slot handed over mid-scan), and counting both would
/// report an overlap that never happened. A copy counts when one of its processes is still alive,
/// with the same start time, after the scan: alive when read and alive now means alive all along
/// (a process never comes back), so every confirmed copy was alive when the last of them was read.
pub fn confirmed(found: &Copies) -> Vec<(String, i32)> {
    found
        .iter()
        .filter_map(|(copy, procs)| {
            procs
                .iter()
                .find(|&&(pid, start)| still_alive(pid, start))
                .map(|&(pid, _)| (String::from_utf8_lossy(copy).into_owned(), pid))
        })
        .collect()
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

/// `tollgate --home <home> <args>` on the path `force_subreaper` picks (see [`paths`]), stdin
/// closed: how every containment test runs the binary.
pub fn tollgate_on(home: &Path, force_subreaper: bool, args: &[&str]) -> Output {
    Command::new(super::BIN)
        .arg("--home")
        .arg(home)
        .args(args)
        .env("TOLLGATE_NO_CGROUP", no_cgroup_value(force_subreaper))
        .stdin(Stdio::null())
        .output()
        .expect("run tollgate")
}

/// [`tollgate_on`] that must succeed.
pub fn ok_on(home: &Path, force_subreaper: bool, args: &[&str]) -> Output {
    let out = tollgate_on(home, force_subreaper, args);
    assert!(out.status.success(), "{args:?}: {}", super::describe(&out));
    out
}

/// A thread that scans `/proc` as fast as it can and keeps the largest number of distinct copies
/// it ever saw live at one moment for one tag (each scan's count [`confirmed`]), and of processes.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<SamplerReport>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What a [`Sampler`] saw.
#[derive(Clone, Debug, Default)]
pub struct SamplerReport {
    pub samples: u64,
    /// The most copies confirmed live at one moment (see [`confirmed`]).
    pub peak_copies: usize,
    /// The copies of that moment: (COPY, a pid alive then).
    pub peak_witnesses: Vec<(String, i32)>,
    /// The most copies one scan read, confirmed or not (at least `peak_copies`).
    pub peak_scanned: usize,
    pub peak_processes: usize,
    /// Every copy (its `COPY` value) some scan read, the first [`MAX_COPIES_REMEMBERED`]: what
    /// [`Sampler::wait_seen`] waits for, so a test knows the sampler watched the interval it cares
    /// about instead of hoping it ran often enough.
    pub copies_seen: std::collections::BTreeSet<String>,
}

/// The most distinct copies a [`Sampler`] remembers by name (a test starts a handful).
pub const MAX_COPIES_REMEMBERED: usize = 64;

impl Sampler {
    pub fn start(tag: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(SamplerReport::default()));
        let thread = {
            let (stop, seen, tag) = (Arc::clone(&stop), Arc::clone(&seen), tag.to_string());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let (found, processes) = copies(&tag);
                    let peak = seen.lock().unwrap_or_else(|e| e.into_inner()).peak_copies;
                    // Confirming costs a stat per copy: only a scan that could raise the peak.
                    let witnesses = if found.len() > peak {
                        confirmed(&found)
                    } else {
                        Vec::new()
                    };
                    let mut report = seen.lock().unwrap_or_else(|e| e.into_inner());
                    report.samples += 1;
                    report.peak_scanned = report.peak_scanned.max(found.len());
                    if witnesses.len() > report.peak_copies {
                        report.peak_copies = witnesses.len();
                        report.peak_witnesses = witnesses;
                    }
                    report.peak_processes = report.peak_processes.max(processes);
                    for copy in found.keys() {
                        if report.copies_seen.len() >= MAX_COPIES_REMEMBERED {
                            break;
                        }
                        report
                            .copies_seen
                            .insert(String::from_utf8_lossy(copy).into_owned());
                    }
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

    /// Waits (bounded, polling the report) until a scan has read the copy `copy` (a `COPY`
    /// value): under load a scan of `/proc` can take longer than a whole step of the test, and a
    /// sampler that never saw a copy proves nothing about it.
    pub fn wait_seen(&self, copy: &str) {
        let until = Instant::now() + Duration::from_secs(30);
        while !self.report().copies_seen.contains(copy) {
            assert!(
                Instant::now() < until,
                "the sampler never saw copy {copy}: {:?}",
                self.report()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
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

/// Waits (bounded: 10 s, polling `/proc`) until no live process carries the tag; `what` names
/// what should have ended them, for the failure message.
pub fn wait_untagged(tag: &str, what: &str) {
    let until = Instant::now() + Duration::from_secs(10);
    while !tagged(tag).is_empty() {
        assert!(Instant::now() < until, "{what} left {:?}", tagged(tag));
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// SIGKILLs `pid`, whatever it is now (a test's own process, or gone already).
pub fn sigkill(pid: i32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// The live runners of `home`: `tollgate … worker runner …` processes whose command line names it.
pub fn runners(home: &Path) -> Vec<i32> {
    let home = home.as_os_str().as_encoded_bytes();
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
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let is_runner = args
            .windows(2)
            .any(|w| w == [&b"worker"[..], &b"runner"[..]]);
        if is_runner && args.contains(&home) && is_alive(pid) {
            out.push(pid);
        }
    }
    out
}

/// Whether `pid` exists and is not a zombie, read straight from `/proc`.
pub fn is_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|s| s != "Z" && s != "X")
    })
}
