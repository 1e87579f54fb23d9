//! Running a turn's command and waiting for it, with cancellation by signal.

use super::signals;
use crate::home::Home;
use crate::protocol::slots::{ProcessIdentity, WorkId};
use crate::tasks::{TurnOutcome, TurnRecord};
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a cancelled command gets between SIGTERM and SIGKILL.
pub const TERM_GRACE_MILLIS: u64 = 5_000;
/// Poll period while waiting out the term grace (only on the cancel path).
const GRACE_POLL_MILLIS: u64 = 20;

/// How a command ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Execution {
    pub outcome: TurnOutcome,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub error: Option<String>,
}

impl Execution {
    pub fn record(&self, turn: &mut TurnRecord, now_millis: u64) {
        turn.ended_at_millis = Some(now_millis);
        turn.exit_code = self.exit_code;
        turn.signal = self.signal;
        turn.outcome = Some(self.outcome);
        turn.error = self.error.clone();
    }

    /// The exit code `submit --wait` passes on: the command's own, 128+signal, or 1.
    pub fn shell_exit_code(&self) -> i32 {
        match (self.exit_code, self.signal) {
            (Some(code), _) => code,
            (None, Some(signal)) => 128 + signal,
            (None, None) => 1,
        }
    }

    fn unstartable(error: String) -> Self {
        Execution {
            outcome: TurnOutcome::Unstartable,
            exit_code: Some(127),
            signal: None,
            error: Some(error),
        }
    }
}

/// Runs `turn`'s command to its end as `work`: its environment carries `TOLLGATE_WORK=<work>`, which
/// every process it starts inherits, and `on_spawn` learns the command's identity right after the
/// spawn (the runner records it). Detached: stdio to the turn's logs, in its own process group
/// (so cancel reaches the whole group). Attached: the caller's stdio and process group, so the
/// terminal's Ctrl-C reaches it. Either way the command's first process is killed if this process
/// dies; its children are not, which is why the work is recorded and reconcile kills it.
pub fn execute_turn(
    home: &Home,
    turn: &TurnRecord,
    attached: bool,
    work: WorkId,
    on_spawn: impl FnOnce(ProcessIdentity),
) -> Execution {
    let Some((program, args)) = turn.argv.split_first() else {
        return Execution::unstartable("the turn has an empty command".to_string());
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(&turn.env)
        .env(WorkId::ENV, work.to_string())
        .stdin(Stdio::null());
    if let Some(cwd) = &turn.cwd {
        command.current_dir(cwd);
    }
    if attached {
        command.stdin(Stdio::inherit());
    } else {
        let open = |path: std::path::PathBuf| {
            OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(&path)
                .map_err(|e| format!("cannot open {}: {e}", path.display()))
        };
        let (stdout, stderr) = match (
            open(home.stdout_log(&turn.key)),
            open(home.stderr_log(&turn.key)),
        ) {
            (Ok(out), Ok(err)) => (out, err),
            (Err(e), _) | (_, Err(e)) => return Execution::unstartable(e),
        };
        command.stdout(stdout).stderr(stderr).process_group(0);
    }
    // SAFETY: runs in the forked child before exec; prctl(PR_SET_PDEATHSIG) is a plain syscall
    // that allocates nothing, so it is safe there.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return Execution::unstartable(format!("cannot start {program:?}: {e}"));
        }
    };
    let pid = Pid::from_raw(child.id() as i32);
    // The child is reaped by waitpid below, not through the handle. Until then it is at worst a
    // zombie, so its identity can still be read.
    drop(child);
    if let Some(leader) = crate::process::identity_including_zombie(child_pid(pid)) {
        on_spawn(leader);
    }
    wait_for(pid, attached)
}

fn child_pid(pid: Pid) -> u32 {
    pid.as_raw().unsigned_abs()
}

fn exited(status: WaitStatus, cancelled: bool) -> Option<Execution> {
    let outcome = |ok: bool| {
        if cancelled {
            TurnOutcome::Cancelled
        } else if ok {
            TurnOutcome::Completed
        } else {
            TurnOutcome::Failed
        }
    };
    match status {
        WaitStatus::Exited(_, code) => Some(Execution {
            outcome: outcome(code == 0),
            exit_code: Some(code),
            signal: None,
            error: None,
        }),
        WaitStatus::Signaled(_, signal, _) => Some(Execution {
            outcome: outcome(false),
            exit_code: None,
            signal: Some(signal as i32),
            error: None,
        }),
        _ => None,
    }
}

fn wait_for(pid: Pid, attached: bool) -> Execution {
    loop {
        // A stop asked for before this wait (while the command was being started) set the flag
        // but cannot interrupt the blocking waitpid below: act on it first.
        if signals::requested().is_some() {
            return cancel(pid, attached);
        }
        match waitpid(pid, None) {
            Ok(status) => {
                if let Some(done) = exited(status, signals::requested().is_some()) {
                    return done;
                }
            }
            Err(nix::errno::Errno::EINTR) => {
                if signals::requested().is_some() {
                    return cancel(pid, attached);
                }
            }
            Err(e) => {
                return Execution {
                    outcome: TurnOutcome::Failed,
                    exit_code: None,
                    signal: None,
                    error: Some(format!("waiting for the command failed: {e}")),
                }
            }
        }
    }
}

/// SIGTERM (to the group when detached), then SIGKILL after the grace.
fn cancel(pid: Pid, attached: bool) -> Execution {
    let send = |signal: Signal| {
        let _ = if attached {
            kill(pid, signal)
        } else {
            killpg(pid, signal)
        };
    };
    send(Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_millis(TERM_GRACE_MILLIS);
    let mut killed = false;
    loop {
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::EINTR) => {}
            Ok(status) => {
                if let Some(done) = exited(status, true) {
                    return done;
                }
            }
            Err(e) => {
                return Execution {
                    outcome: TurnOutcome::Cancelled,
                    exit_code: None,
                    signal: None,
                    error: Some(format!("waiting for the cancelled command failed: {e}")),
                }
            }
        }
        if !killed && Instant::now() >= deadline {
            send(Signal::SIGKILL);
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(GRACE_POLL_MILLIS));
    }
}
