//! Fixture process identities for core tests: a process table the test controls.
#![allow(dead_code)]

pub mod containment;
pub mod failpoints;
pub mod fifo;
pub mod fleet;
pub mod http;
pub mod legacy_home;
pub mod postgres;
pub mod queue_shapes;
pub mod rlimit;
pub mod sections;
pub mod store_contract;
pub mod storm;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use tollgate::protocol::slots::{Liveness, Observation, ProcessIdentity, SlotToken};
use uuid::Uuid;

/// The processes a test says are alive. Anything else observes as gone, except pids marked
/// ambiguous (alive, start time unreadable).
#[derive(Clone, Debug, Default)]
pub struct Procs {
    alive: BTreeSet<ProcessIdentity>,
    ambiguous: BTreeSet<u32>,
}

impl Procs {
    pub fn new() -> Self {
        Self::default()
    }
    /// Starts a fixture process and returns its identity.
    pub fn start(&mut self, pid: u32, start_time_micros: u64) -> ProcessIdentity {
        let id = ProcessIdentity {
            pid,
            start_time_micros,
        };
        self.alive.insert(id);
        id
    }
    pub fn kill(&mut self, id: ProcessIdentity) {
        self.alive.remove(&id);
    }
    pub fn make_ambiguous(&mut self, pid: u32) {
        self.ambiguous.insert(pid);
    }
    /// Ground truth, not an observation: whether the fixture process really runs. An ambiguous
    /// observation of a dead pid answers "live" to the core but not here.
    pub fn is_running(&self, id: &ProcessIdentity) -> bool {
        self.alive.contains(id)
    }
}

impl Liveness for Procs {
    fn observe(&self, id: &ProcessIdentity) -> Observation {
        if self.alive.contains(id) {
            Observation::Matching
        } else if self.ambiguous.contains(&id.pid) {
            Observation::Ambiguous
        } else {
            Observation::Gone
        }
    }
}

/// A deterministic fresh token: `n` in the low bits of a v7-shaped UUID.
pub fn token(n: u64) -> SlotToken {
    SlotToken::new(Uuid::from_u64_pair(
        0x0190_0000_0000_7000,
        0x8000_0000_0000_0000 | n,
    ))
    .expect("non-nil")
}

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// Runs `tollgate --home HOME ARGS…` to completion, with no standard input.
pub fn tollgate(home: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--home")
        .arg(home)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run tollgate")
}

/// Runs `tollgate --home HOME ARGS…` and fails the test if it has not ended within `bound` (the
/// child is killed then): what a command that would hang on a hostile file gets. Polls the
/// child's exit status: observable state, not a timing guess.
pub fn tollgate_within(home: &Path, args: &[&str], bound: std::time::Duration) -> Output {
    let mut child = Command::new(BIN)
        .arg("--home")
        .arg(home)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate");
    let deadline = std::time::Instant::now() + bound;
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("collect output");
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect output");
            panic!(
                "tollgate {args:?} did not end within {bound:?}\n{}",
                describe(&out)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Exit status and both outputs, for assertion messages.
pub fn describe(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A new home at `dir/home`, made by `tollgate init` (a `--home` that does not exist is refused by
/// every other command, so a test that wants a fresh path starts here).
pub fn init_home(dir: &Path, workers: usize) -> std::path::PathBuf {
    let home = dir.join("home");
    let out = tollgate(&home, &["init", "--workers", &workers.to_string()]);
    assert!(out.status.success(), "init: {}", describe(&out));
    home
}

/// Cancels a task of a home when dropped, so that a test whose turns wait on a gate leaves
/// nothing running when it fails before it releases them (declare it after the home's temporary
/// directory: it is dropped first, while the home is still there).
pub struct CancelOnDrop {
    pub home: std::path::PathBuf,
    pub task: String,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let _ = tollgate(&self.home, &["cancel", &self.task]);
    }
}

/// A new temporary directory in memory (`/dev/shm`) where there is one, else in the system's
/// temporary directory: for tests that commit thousands of sections to a home's database and
/// check what the store maps, not what the disk keeps, so a commit's fsync costs nothing.
pub fn memory_temp_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    };
    dir.expect("temp dir")
}

/// Polls `ready` (observable state: a file, a record) every 5 ms for at most 20 s.
pub fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !ready() {
        assert!(
            std::time::Instant::now() < until,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Creates the file a test's long command waits for (its gate) when the test ends, passed or
/// not, so the command ends at once instead of at its own bound.
pub struct OpenOnDrop(pub std::path::PathBuf);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, b"");
    }
}
