//! Starting a detached runner: `tollgate worker runner <task> <turn> --slot-token <uuid>`.
//!
//! The child gets a new session (it must outlive the submitter and not share its terminal), stdin,
//! stdout and stderr from /dev/null until it points its output at the turn's `runner.log` itself
//! (`crate::runner::log`), and no inherited descriptor beyond those three. A [`ScrubbedSpawner`]
//! also keeps named variables (serve's route secrets) out of the environment of everything it
//! starts.

use super::identity::identity_including_zombie;
use super::settle::SettleSignals;
use crate::home::Home;
use crate::protocol::slots::{ProcessIdentity, SlotToken, TurnKey, WorkRecord};
use std::ffi::OsString;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("cannot locate the tollgate executable to start a runner: {0}")]
    Executable(std::io::Error),
    #[error("cannot start the runner for {key}: {source}")]
    Spawn {
        key: TurnKey,
        source: std::io::Error,
    },
    #[error("the runner for {key} (pid {pid}) vanished before its identity could be read")]
    NoIdentity { key: TurnKey, pid: u32 },
    #[error("cannot start the debounce waker: {0}")]
    Waker(std::io::Error),
}

/// Starts the process that will take over a reserved slot. Production spawns the real runner;
/// tests may start any real process and return its identity.
pub trait RunnerSpawner {
    fn spawn(&self, key: &TurnKey, token: SlotToken) -> Result<ProcessIdentity, SpawnError>;

    /// Starts a detached process that runs `reconcile` at `at_millis` (wall clock), so a debounced
    /// turn starts when its quiet period ends even if nothing else happens by then.
    fn spawn_waker(&self, at_millis: u64) -> Result<(), SpawnError> {
        let _ = at_millis;
        Err(SpawnError::Waker(std::io::Error::other(
            "this spawner does not start wakers",
        )))
    }

    /// The read end of the settle signal of `key`'s runner, if this spawner started it with one
    /// ([`super::settle`]); taken once.
    fn settle_signal(&self, key: &TurnKey) -> Option<std::os::fd::OwnedFd> {
        let _ = key;
        None
    }

    /// A fresh slot token for a step's input; fixtures hand out deterministic ones.
    fn fresh_token(&self) -> SlotToken {
        SlotToken::generate()
    }

    /// "Now" for a step's input (ms since the epoch); fixtures keep their own clock.
    fn now_millis(&self) -> u64 {
        crate::clock::now_millis()
    }

    /// Kills every process of a turn's work (see [`super::work`]); fixtures kill their own.
    fn kill_work(&self, work: &WorkRecord) -> super::work::WorkKill {
        super::work::kill_work(work)
    }

    /// Asks a live executor to stop (SIGTERM), only if its start time still matches (a reused
    /// pid is not ours). Returns whether the signal was sent.
    fn stop_executor(&self, executor: &ProcessIdentity) -> bool {
        use crate::protocol::slots::{Liveness, Observation};
        super::ProcLiveness.observe(executor) == Observation::Matching
            && nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(executor.pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            )
            .is_ok()
    }
}

/// Spawns `tollgate worker runner` from the current executable (or an explicit one).
#[derive(Clone, Debug)]
pub struct DetachedSpawner {
    pub home: Home,
    pub executable: Option<PathBuf>,
    /// Set by a process that waits for the turns it starts (`submit --wait`): each runner gets a
    /// settle signal ([`super::settle`]).
    pub settle: Option<std::sync::Arc<SettleSignals>>,
}

impl DetachedSpawner {
    fn executable(&self) -> Result<PathBuf, SpawnError> {
        match &self.executable {
            Some(exe) => Ok(exe.clone()),
            None => std::env::current_exe().map_err(SpawnError::Executable),
        }
    }
}

impl RunnerSpawner for DetachedSpawner {
    fn spawn(&self, key: &TurnKey, token: SlotToken) -> Result<ProcessIdentity, SpawnError> {
        let exe = self.executable()?;
        let Some(settle) = &self.settle else {
            return spawn_runner(&exe, &self.home, key, token, &[], None);
        };
        let write_end = settle.open_for(key);
        let spawned = spawn_runner(&exe, &self.home, key, token, &[], write_end.as_ref());
        // Our copy of the write end is dropped here: only the runner's is left open.
        drop(write_end);
        if spawned.is_err() {
            settle.discard(key);
        }
        spawned
    }

    fn settle_signal(&self, key: &TurnKey) -> Option<std::os::fd::OwnedFd> {
        self.settle.as_ref()?.take(key)
    }

    fn spawn_waker(&self, at_millis: u64) -> Result<(), SpawnError> {
        spawn_waker(self, at_millis, &[])
    }
}

/// A [`DetachedSpawner`] whose runners and wakers start without the variables in `remove_env`.
///
/// `serve` reads its routes' shared secrets from its own environment; a runner that inherited
/// them would expose them in `/proc/PID/environ` to every process of the user and pass them on to
/// whatever it starts. The turn itself gets an explicit environment (the runner clears its own);
/// this keeps them out of the runner (and of the waker, whose reconcile starts runners in turn).
#[derive(Clone, Debug)]
pub struct ScrubbedSpawner {
    pub spawner: DetachedSpawner,
    /// Variable names never passed to a started process.
    pub remove_env: Vec<OsString>,
}

impl RunnerSpawner for ScrubbedSpawner {
    fn spawn(&self, key: &TurnKey, token: SlotToken) -> Result<ProcessIdentity, SpawnError> {
        let exe = self.spawner.executable()?;
        spawn_runner(&exe, &self.spawner.home, key, token, &self.remove_env, None)
    }

    fn spawn_waker(&self, at_millis: u64) -> Result<(), SpawnError> {
        spawn_waker(&self.spawner, at_millis, &self.remove_env)
    }
}

fn spawn_waker(
    spawner: &DetachedSpawner,
    at_millis: u64,
    remove_env: &[OsString],
) -> Result<(), SpawnError> {
    let mut command = Command::new(spawner.executable()?);
    command
        .arg("--home")
        .arg(spawner.home.root())
        .args(["worker", "wake", "--at", &at_millis.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for name in remove_env {
        command.env_remove(name);
    }
    // SAFETY: as for the runner: setsid(2) and close_range(2) only, both async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            mark_inherited_descriptors_cloexec();
            Ok(())
        });
    }
    command.spawn().map(drop).map_err(SpawnError::Waker)
}

/// Marks every descriptor above stderr close-on-exec, in the child between fork and exec.
///
/// std opens its own descriptors close-on-exec already; this covers whatever our own parent leaked
/// to us. Kernels before 5.11 lack `CLOSE_RANGE_CLOEXEC`; there the call fails and the spawn goes
/// on, since failing it would strand the reserved slot for a best-effort hygiene step.
fn mark_inherited_descriptors_cloexec() {
    // SAFETY: close_range(2) is a raw syscall with plain integer arguments; with
    // CLOSE_RANGE_CLOEXEC it only sets descriptor flags, which is safe between fork and exec.
    let _ = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
}

pub fn spawn_detached_runner(
    exe: &std::path::Path,
    home: &Home,
    key: &TurnKey,
    token: SlotToken,
) -> Result<ProcessIdentity, SpawnError> {
    spawn_runner(exe, home, key, token, &[], None)
}

fn spawn_runner(
    exe: &std::path::Path,
    home: &Home,
    key: &TurnKey,
    token: SlotToken,
    remove_env: &[OsString],
    settle_write_end: Option<&OwnedFd>,
) -> Result<ProcessIdentity, SpawnError> {
    // The runner makes the turn's folder and points its own output at `runner.log` as its first act
    // (`crate::runner::log::to_turn_folder`), off the spawner's path: a submit that starts a turn
    // makes no folder (spec/slots.md, "Handoff").
    let mut command = Command::new(exe);
    command
        .arg("--home")
        .arg(home.root())
        .args([
            "worker",
            "runner",
            &key.task,
            &key.turn.to_string(),
            "--log-to-turn-folder",
            "--slot-token",
        ])
        .arg(token.to_string())
        .env("TOLLGATE_HOME", home.root())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for name in remove_env {
        command.env_remove(name);
    }
    let settle_fd = settle_write_end.map(|fd| fd.as_raw_fd());
    if settle_fd.is_some() {
        command
            .arg("--settle-fd")
            .arg(super::settle::RUNNER_FD.to_string());
    }
    // SAFETY: the closure runs in the forked child before exec and only calls setsid(2),
    // close_range(2), dup2(2), fcntl(2) and sigprocmask(2), all async-signal-safe; it allocates
    // nothing and takes no lock. The settle descriptor stays open in the parent until after the
    // spawn returns, so the raw number is valid in the child.
    unsafe {
        command.pre_exec(move || {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            mark_inherited_descriptors_cloexec();
            if let Some(fd) = settle_fd {
                super::settle::install_in_child(BorrowedFd::borrow_raw(fd))?;
            }
            // A cancel may signal the runner before it can handle the signal: keep it pending.
            crate::process::signals::block_in_child().map_err(std::io::Error::from)
        });
    }
    let child = command.spawn().map_err(|source| SpawnError::Spawn {
        key: key.clone(),
        source,
    })?;
    let pid = child.id();
    // The handle is dropped without waiting: the runner is detached and outlives us. If it ends
    // while we live, it stays a zombie until we exit, and zombies observe as gone.
    drop(child);
    identity_including_zombie(pid).ok_or_else(|| SpawnError::NoIdentity {
        key: key.clone(),
        pid,
    })
}

/// Whether a live process on this host is a runner spawned for the slot token `token`
/// (`worker runner … --slot-token TOKEN`). A reservation whose reserver is gone before it
/// recorded its child (its first publish) may still have that child on its way to adopt it; only
/// its command line names it. `status` asks before calling such a turn orphaned.
pub fn runner_for_token_alive(token: SlotToken) -> bool {
    let token = token.to_string();
    super::procfs::scan()
        .into_iter()
        .filter(|p| p.is_alive())
        .any(|p| {
            super::procfs::cmdline_of(p.pid).is_some_and(|cmdline| {
                let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
                args.windows(2)
                    .any(|w| w[0] == b"--slot-token" && w[1] == token.as_bytes())
            })
        })
}
