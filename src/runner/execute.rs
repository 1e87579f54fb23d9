//! Running a turn's command as its work's containment unit and waiting for it, with
//! cancellation by signal.
//!
//! The recorded outcome is what happened: a cancel (SIGTERM/SIGINT to this process) that arrives
//! before the spawn starts nothing (`cancelled`); one that arrives while the command runs kills
//! the whole unit (TERM, [`TERM_GRACE_MILLIS`], KILL, wait until empty) and the turn is
//! `cancelled` unless the command had already exited on its own or still exits 0 (then it ran to
//! its end: `completed`).
//!
//! A turn with a timeout (`submit --timeout`) whose command is still running when the timeout has
//! passed since its spawn gets the same kill of its whole unit, and ends `timed_out` however the
//! command then exits (it was cut off); its exit code or signal are kept in the record.

use crate::home::Home;
use crate::process::containment::{cgroup, Marker, UnitIdentity};
use crate::process::pidns;
use crate::process::signals;
use crate::protocol::slots::ProcessIdentity;
use crate::tasks::{TurnOutcome, TurnRecord};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a cancelled command's unit gets between SIGTERM and SIGKILL: the one grace every kill
/// of a work uses ([`crate::process::work::WORK_TERM_GRACE_MILLIS`]).
pub const TERM_GRACE_MILLIS: u64 = crate::process::work::WORK_TERM_GRACE_MILLIS;
/// How often the runner looks for its command's exit and for a cancel request. A blocking
/// `waitpid` would miss a signal that lands between the flag check and the call.
const WAIT_POLL_MILLIS: u64 = 10;

/// The exit code of `submit --wait`/`--attach` for a turn killed at its timeout: 124, as GNU
/// `timeout(1)` uses, so scripts written for it keep working.
pub const TIMED_OUT_EXIT_CODE: i32 = 124;

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

    /// The exit code `submit --wait` passes on: [`TIMED_OUT_EXIT_CODE`] for a turn cut off at
    /// its timeout, else the command's own, 128+signal, or 1.
    pub fn shell_exit_code(&self) -> i32 {
        if self.outcome == TurnOutcome::TimedOut {
            return TIMED_OUT_EXIT_CODE;
        }
        match (self.exit_code, self.signal) {
            (Some(code), _) => code,
            (None, Some(signal)) => 128 + signal,
            (None, None) => 1,
        }
    }

    /// A turn cancelled before its command started: nothing ran.
    pub fn cancelled_before_start() -> Self {
        Execution {
            outcome: TurnOutcome::Cancelled,
            exit_code: None,
            signal: None,
            error: None,
        }
    }

    pub(crate) fn unstartable(error: String) -> Self {
        Execution {
            outcome: TurnOutcome::Unstartable,
            exit_code: Some(127),
            signal: None,
            error: Some(error),
        }
    }
}

/// The line a turn's log gets when the turn runs again and the log holds an earlier run's
/// output: its runner died before the turn ended and `tollgate reconcile` started it anew, so
/// the log shows where one run ends and the next begins.
pub const RERUN_MARK: &str = "[tollgate: the turn runs again (its runner died before the turn \
ended; reconcile started it anew): the output above is from the earlier run]";

/// Writes [`RERUN_MARK`] on a line of its own into `log` if it already holds output.
fn mark_rerun(log: &mut std::fs::File) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    let len = log.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let mut last = [0u8];
    log.read_exact_at(&mut last, len - 1)?;
    let newline = if last[0] == b'\n' { "" } else { "\n" };
    writeln!(log, "{newline}{RERUN_MARK}")
}

/// Runs `turn`'s command to its end as the containment unit `unit` (its marker, and its cgroup if
/// it has one: created here, right before the spawn, the take-over having recorded its path). Its
/// environment carries the unit's marker (`TOLLGATE_WORK=<work>`), which every process it starts
/// inherits, and `on_spawn` learns the command's identity right after the spawn (the runner
/// records it). Detached: stdio to the turn's logs, in its own process group. Attached: the
/// caller's stdio and process group, so the terminal's Ctrl-C reaches it. Either way the
/// command's first process is killed if this process dies; the rest of the unit is recorded, and
/// reconcile or cancel kills it. On a fleet, `guard` (the runner's [`super::guard::Guard`]) is told
/// the unit right before the spawn and again once its process group and leader are known, so it
/// can kill the whole unit if this process dies.
pub fn execute_turn(
    home: &Home,
    turn: &TurnRecord,
    attached: bool,
    mut guard: Option<&mut super::guard::Guard>,
    unit: &mut UnitIdentity,
    logs: &mut LogDrains,
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
        .env(&unit.marker.var, &unit.marker.value)
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
                .read(true)
                .append(true)
                .mode(0o600)
                .open(&path)
                .and_then(|mut file| mark_rerun(&mut file).map(|()| file))
                .map_err(|e| format!("cannot open {}: {e}", path.display()))
        };
        let (stdout, stderr) = match (
            open(home.stdout_log(&turn.key)),
            open(home.stderr_log(&turn.key)),
        ) {
            (Ok(out), Ok(err)) => (out, err),
            (Err(e), _) | (_, Err(e)) => return Execution::unstartable(e),
        };
        logs.files = Some((stdout, stderr));
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
    }
    if let Some(dir) = unit.cgroup.clone() {
        if let Err(e) = create_group(&dir) {
            // The marker and the process group still find the work.
            tracing::warn!("cannot create the work's group {}: {e}", dir.display());
            unit.cgroup = None;
        }
    }
    let join = unit.cgroup.as_deref().and_then(cgroup::procs_path);
    let me = nix::unistd::getpid();
    let hold = child_hold_before_pdeathsig();
    // A cancel that reached this runner before the spawn: start nothing.
    if signals::requested().is_some() {
        remove_group(unit);
        return Execution::cancelled_before_start();
    }
    if let Some(guard) = guard.as_deref_mut() {
        guard.watch(unit);
    }
    let in_namespace = if !attached && pidns::wanted() {
        spawn_in_namespace(
            turn,
            &unit.marker,
            join.clone(),
            unit.cgroup.clone(),
            hold,
            logs,
        )
    } else {
        None
    };
    // Detached with a group: the command is born inside it (clone3 `CLONE_INTO_CGROUP`), which
    // spares the move into it and the kernel's wait for its cgroup lock (spec/containment.md).
    let born_in = match (&in_namespace, &unit.cgroup) {
        (None, Some(dir)) if !attached => spawn_into_group(turn, &unit.marker, dir, hold, logs),
        _ => None,
    };
    let (pid, status, inside) = match (in_namespace, born_in) {
        (Some(Ok((pid, status, inside))), _) => (pid, Some(status), inside),
        (None, Some(Ok(pid))) => (pid, None, true),
        (Some(Err(e)), _) | (None, Some(Err(e))) => {
            remove_group(unit);
            return Execution::unstartable(format!("cannot start {program:?}: {e}"));
        }
        (None, None) => {
            // SAFETY: runs in the forked child before exec; prctl(PR_SET_PDEATHSIG), getppid,
            // nanosleep and the group join (open/write/close of a path made before the fork) are
            // plain syscalls that allocate nothing, so they are safe there.
            unsafe {
                command.pre_exec(move || {
                    if let Some(procs) = &join {
                        cgroup::join_in_child(procs);
                    }
                    if let Some(hold) = hold {
                        std::thread::sleep(hold);
                    }
                    crate::process::die_with_parent(me)
                });
            }
            let mut child = match command.spawn() {
                Ok(child) => child,
                Err(e) => {
                    remove_group(unit);
                    return Execution::unstartable(format!("cannot start {program:?}: {e}"));
                }
            };
            let pid = Pid::from_raw(child.id() as i32);
            if let Some((out, err)) = logs.files.take() {
                if let Some(pipe) = child.stdout.take() {
                    logs.drain(pipe, out);
                }
                if let Some(pipe) = child.stderr.take() {
                    logs.drain(pipe, err);
                }
            }
            // The child is reaped by waitpid below, not through the handle. Until then it is at
            // worst a zombie, so its identity can still be read.
            drop(child);
            (pid, None, false)
        }
    };
    let leader = crate::process::identity_including_zombie(child_pid(pid));
    // A process born inside the group has nothing to move: every process it forks is born there.
    if let Some(dir) = unit.cgroup.as_ref().filter(|_| !inside) {
        if let Err(e) = cgroup::adopt(dir, pid.as_raw()) {
            tracing::warn!("cannot move the command into {}: {e}", dir.display());
        }
    }
    if !attached {
        // Attached, the command shares our process group: the unit must never signal that.
        unit.pgid = Some(pid.as_raw());
        unit.leader = leader;
    }
    if let Some(guard) = guard {
        guard.watch(unit);
    }
    if let Some(leader) = leader {
        on_spawn(leader);
    }
    let deadline = turn
        .timeout_millis
        .map(|millis| std::time::Instant::now() + Duration::from_millis(millis));
    wait_for(pid, unit, deadline, status.as_ref())
}

/// A detached turn's output: the command writes into pipes, and one thread per stream copies
/// them into the turn's logs. The first `cap_bytes` of a stream (0: no limit) are written as they
/// come; past them the thread keeps reading (the command never blocks on a full pipe) and holds
/// the last `tail_bytes` in a bounded ring, and when the stream ends it appends a truncation line
/// and that tail. The log is written once, front to back, never rewritten, so `logs --follow` and
/// readers of a live log see a file that only grows; what a failing command says last is kept.
#[derive(Debug, Default)]
pub struct LogDrains {
    pub cap_bytes: u64,
    pub tail_bytes: u64,
    files: Option<(std::fs::File, std::fs::File)>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// Each drain thread holds a sender and drops it when its stream ended, so [`Self::finish`]
    /// wakes on the last one instead of polling.
    done: Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>,
}

/// How long [`LogDrains::finish`] waits for the streams to close once the work was killed.
const DRAIN_FINISH_MILLIS: u64 = 5_000;

impl LogDrains {
    pub fn new(cap_bytes: u64, tail_bytes: u64) -> Self {
        LogDrains {
            cap_bytes,
            tail_bytes,
            ..LogDrains::default()
        }
    }

    /// Waits (bounded) until both streams reached their end: after the work is killed nothing
    /// holds the pipes any more. A thread still blocked then (a survivor of the kill) is left;
    /// it ends with this process.
    pub fn finish(self) {
        let until = std::time::Instant::now() + Duration::from_millis(DRAIN_FINISH_MILLIS);
        if let Some((sender, receiver)) = self.done {
            drop(sender);
            // Disconnected once every drain thread dropped its sender; nothing is ever sent.
            while let Err(mpsc::RecvTimeoutError::Timeout) =
                receiver.recv_timeout(until.saturating_duration_since(std::time::Instant::now()))
            {
                if std::time::Instant::now() >= until {
                    break;
                }
            }
        }
        for thread in self.threads {
            if thread.is_finished() {
                let _ = thread.join();
            }
        }
    }

    /// Starts the thread that copies `pipe` into `file`.
    fn drain(&mut self, pipe: impl std::io::Read + Send + 'static, file: std::fs::File) {
        let done = self.done_sender();
        let thread = drain_thread(pipe, file, self.cap_bytes, self.tail_bytes, done);
        self.threads.push(thread);
    }

    /// A sender for one more drain thread to hold while its stream is open.
    fn done_sender(&mut self) -> mpsc::Sender<()> {
        self.done.get_or_insert_with(mpsc::channel).0.clone()
    }
}

/// The line between the kept head and the kept tail of a log cut at its cap.
pub fn truncation_line(cap_bytes: u64, dropped: u64, tail: u64) -> String {
    if tail == 0 {
        format!(
            "\n[tollgate: output truncated: the first {cap_bytes} bytes kept, {dropped} more bytes dropped (log_bytes in tollgate.toml)]\n"
        )
    } else {
        format!(
            "\n[tollgate: output truncated: the first {cap_bytes} bytes kept, {dropped} bytes dropped, the last {tail} bytes follow (log_bytes, log_tail_bytes in tollgate.toml)]\n"
        )
    }
}

/// The last `capacity` bytes seen past the cap, and how many bytes before them were dropped.
struct Tail {
    ring: std::collections::VecDeque<u8>,
    capacity: usize,
    dropped: u64,
}

impl Tail {
    fn new(capacity: u64) -> Self {
        let capacity = usize::try_from(capacity).unwrap_or(usize::MAX);
        Tail {
            ring: std::collections::VecDeque::new(),
            capacity,
            dropped: 0,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        let keep = bytes.len().min(self.capacity);
        let (gone, kept) = bytes.split_at(bytes.len() - keep);
        let overflow = (self.ring.len() + kept.len()).saturating_sub(self.capacity);
        self.ring.drain(..overflow);
        self.ring.extend(kept);
        self.dropped += (gone.len() + overflow) as u64;
        debug_assert!(self.ring.len() <= self.capacity);
    }

    /// Whether anything past the cap was seen at all.
    fn is_empty(&self) -> bool {
        self.ring.is_empty() && self.dropped == 0
    }
}

fn drain_thread(
    mut pipe: impl std::io::Read + Send + 'static,
    mut file: std::fs::File,
    cap_bytes: u64,
    tail_bytes: u64,
    done: mpsc::Sender<()>,
) -> std::thread::JoinHandle<()> {
    use std::io::Write;
    std::thread::spawn(move || {
        let _done = done;
        let mut buf = vec![0u8; 64 * 1024];
        let mut written = 0u64;
        let mut tail = Tail::new(tail_bytes);
        loop {
            let n = match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let room = if cap_bytes == 0 {
                n
            } else {
                usize::try_from(cap_bytes.saturating_sub(written))
                    .unwrap_or(usize::MAX)
                    .min(n)
            };
            // A failing write (disk full) must not stop the draining: the command would block.
            let _ = file.write_all(&buf[..room]);
            written += room as u64;
            // A `submit --wait` that started this runner streams the log: wake it.
            crate::process::settle::output_written();
            tail.push(&buf[room..n]);
        }
        if !tail.is_empty() {
            let kept = tail.ring.len() as u64;
            if tail.dropped > 0 {
                let _ = file.write_all(truncation_line(cap_bytes, tail.dropped, kept).as_bytes());
            }
            let (front, back) = tail.ring.as_slices();
            let _ = file.write_all(front);
            let _ = file.write_all(back);
        }
    })
}

fn create_group(dir: &std::path::Path) -> std::io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

/// The failpoint `runner::child_before_pdeathsig(MILLIS)`: the forked child waits `MILLIS` between
/// the fork and arming its parent-death signal, so a test can kill the runner inside that window
/// (`tests/failpoints_runner_child.rs`). Read before the fork: the child must not allocate.
#[cfg(feature = "failpoints")]
fn child_hold_before_pdeathsig() -> Option<Duration> {
    fail::eval("runner::child_before_pdeathsig", |arg| arg)
        .flatten()
        .and_then(|millis| millis.parse().ok())
        .map(Duration::from_millis)
}

#[cfg(not(feature = "failpoints"))]
fn child_hold_before_pdeathsig() -> Option<Duration> {
    None
}

fn remove_group(unit: &UnitIdentity) {
    if let Some(dir) = &unit.cgroup {
        cgroup::remove_tree(dir);
    }
}

fn child_pid(pid: Pid) -> u32 {
    pid.as_raw().unsigned_abs()
}

/// The outcome of a command that ended, by the core's rule ([`TurnOutcome::of_command`]):
/// `signalled` says whether this runner stopped it for a cancel.
fn exited(status: WaitStatus, signalled: bool) -> Option<Execution> {
    let outcome = |code: Option<i32>| TurnOutcome::of_command(code, signalled);
    match status {
        WaitStatus::Exited(_, code) => Some(Execution {
            outcome: outcome(Some(code)),
            exit_code: Some(code),
            signal: None,
            error: None,
        }),
        WaitStatus::Signaled(_, signal, _) => Some(Execution {
            outcome: outcome(None),
            exit_code: None,
            signal: Some(signal as i32),
            error: None,
        }),
        _ => None,
    }
}

fn wait_failed(e: nix::errno::Errno, signalled: bool) -> Execution {
    Execution {
        // No exit status was seen: the core's rule without an exit code.
        outcome: TurnOutcome::of_command(None, signalled),
        exit_code: None,
        signal: None,
        error: Some(format!("waiting for the command failed: {e}")),
    }
}

/// Starts a detached turn's command under the init of a PID namespace of its own
/// ([`pidns`]); its output goes to `logs`. `None`: the kernel refused the namespace (logged once
/// per process) and the caller starts the command as before.
fn spawn_in_namespace(
    turn: &TurnRecord,
    marker: &Marker,
    join: Option<std::ffi::CString>,
    group: Option<std::path::PathBuf>,
    hold: Option<Duration>,
    logs: &mut LogDrains,
) -> Option<Result<(Pid, std::os::fd::OwnedFd, bool), std::io::Error>> {
    let mut spec =
        match pidns::InitSpec::new(&turn.argv, &marked_env(turn, marker), turn.cwd.as_deref()) {
            Ok(spec) => spec,
            Err(pidns::PidnsError::Start(e)) | Err(pidns::PidnsError::Refused(e)) => {
                return Some(Err(e))
            }
        };
    spec.join = join;
    spec.group = group;
    spec.hold = hold;
    match pidns::spawn(&spec) {
        Ok(started) => {
            if let Some((out, err)) = logs.files.take() {
                logs.drain(started.stdout, out);
                logs.drain(started.stderr, err);
            }
            Some(Ok((started.init, started.status, started.born_in_group)))
        }
        Err(pidns::PidnsError::Start(e)) => Some(Err(e)),
        Err(pidns::PidnsError::Refused(e)) => {
            static LOGGED: std::sync::Once = std::sync::Once::new();
            LOGGED.call_once(|| {
                let line = format!(
                    "{}=1 but no PID namespace can be created ({e}); the turn is contained as \
                     without it",
                    pidns::PIDNS_ENV
                );
                // A detached runner's stderr is its runner.log (src/cli/logging.rs).
                tracing::warn!("{line}");
            });
            None
        }
    }
}

/// Starts a detached turn's command born inside its work's group `dir` ([`pidns::spawn_into`]);
/// its output goes to `logs`. `None`: the kernel cannot start a process inside the group (an
/// older kernel, or a group that refuses it: logged once per process), nothing was started, and
/// the caller starts the command as before (it moves itself in before its exec).
fn spawn_into_group(
    turn: &TurnRecord,
    marker: &Marker,
    dir: &std::path::Path,
    hold: Option<Duration>,
    logs: &mut LogDrains,
) -> Option<Result<Pid, std::io::Error>> {
    let mut spec =
        match pidns::InitSpec::new(&turn.argv, &marked_env(turn, marker), turn.cwd.as_deref()) {
            Ok(spec) => spec,
            Err(pidns::PidnsError::Start(e)) | Err(pidns::PidnsError::Refused(e)) => {
                return Some(Err(e))
            }
        };
    spec.hold = hold;
    match pidns::spawn_into(&spec, dir) {
        Ok(started) => {
            if let Some((out, err)) = logs.files.take() {
                logs.drain(started.stdout, out);
                logs.drain(started.stderr, err);
            }
            Some(Ok(started.pid))
        }
        Err(pidns::DirectError::Start(e)) => Some(Err(e)),
        Err(pidns::DirectError::Refused(e)) => {
            static LOGGED: std::sync::Once = std::sync::Once::new();
            LOGGED.call_once(|| {
                tracing::warn!(
                    "cannot start the command inside {} ({e}); it moves itself in instead",
                    dir.display()
                );
            });
            None
        }
    }
}

/// Waits for the command, and on a cancel or at `deadline` (the turn's timeout) kills the whole
/// unit before collecting the command's status. The wait sleeps in `poll` on the command's pidfd
/// (readable when it exits) and the signal handler's self-pipe (readable on a cancel), with the
/// deadline as its timeout: each wakes it at once, so a turn's end costs no poll period. Without a
/// pidfd (a kernel before 5.3) it falls back to a [`WAIT_POLL_MILLIS`] poll.
///
/// In a PID namespace (`status`: the init's status pipe) `pid` is the init: the command's status
/// comes from the pipe as soon as the init reaped it, and the runner then waits for the init,
/// which gives the command's leftovers their TERM and grace before it exits.
fn wait_for(
    pid: Pid,
    unit: &UnitIdentity,
    deadline: Option<std::time::Instant>,
    status: Option<&std::os::fd::OwnedFd>,
) -> Execution {
    let pidfd = crate::watch::pidfd_open(child_pid(pid)).ok();
    loop {
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::EINTR) => {}
            Ok(init_status) => {
                let own = status.and_then(pidns::read_status);
                if let Some(done) = exited(own.unwrap_or(init_status), false) {
                    return done;
                }
            }
            Err(e) => return wait_failed(e, false),
        }
        if let Some(fd) = status.filter(|fd| readable(fd)) {
            if let Some(own) = pidns::read_status(fd) {
                collect(pid);
                if let Some(done) = exited(own, false) {
                    return done;
                }
            }
        }
        if signals::requested().is_some() {
            return cancel(pid, unit, status);
        }
        let now = std::time::Instant::now();
        if deadline.is_some_and(|at| now >= at) {
            let mut done = cancel(pid, unit, status);
            done.outcome = TurnOutcome::TimedOut;
            return done;
        }
        let period = if pidfd.is_some() {
            WAIT_EVENT_FALLBACK_MILLIS
        } else {
            WAIT_POLL_MILLIS
        };
        let mut sleep = Duration::from_millis(period);
        if let Some(at) = deadline {
            sleep = sleep.min(at.saturating_duration_since(now));
        }
        sleep_until_event(pidfd.as_ref(), status, sleep);
    }
}

/// Whether `fd` has data (or its writer is gone), without waiting.
fn readable(fd: &std::os::fd::OwnedFd) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
}

/// Reaps `pid`, waiting for it (the init, once its command's status is known: it exits within
/// the grace it gives the command's leftovers).
fn collect(pid: Pid) {
    while let Err(nix::errno::Errno::EINTR) = waitpid(pid, None) {}
}

/// With a pidfd, the longest `poll` between two checks of the command: only a safety net, since
/// its exit and a cancel each wake the poll.
const WAIT_EVENT_FALLBACK_MILLIS: u64 = 1_000;

/// Sleeps at most `sleep` or until the command's pidfd, the init's status pipe or the signal
/// self-pipe is readable.
fn sleep_until_event(
    pidfd: Option<&std::os::fd::OwnedFd>,
    status: Option<&std::os::fd::OwnedFd>,
    sleep: Duration,
) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let Some(pidfd) = pidfd else {
        std::thread::sleep(sleep);
        return;
    };
    let mut fds = vec![PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    if let Some(status) = status {
        fds.push(PollFd::new(status.as_fd(), PollFlags::POLLIN));
    }
    if let Some(wake) = signals::wake_fd() {
        fds.push(PollFd::new(wake, PollFlags::POLLIN));
    }
    // Rounded up, so a deadline is never polled for early in a busy loop of 0 ms timeouts.
    let millis = u16::try_from(sleep.as_micros().div_ceil(1000)).unwrap_or(u16::MAX);
    // EINTR (the handler ran) and errors alike: the caller checks the command and the flag again.
    let _ = poll(&mut fds, PollTimeout::from(millis));
    signals::drain_wake();
}

/// The cancel of a running command: TERM to the whole unit, KILL (and `cgroup.kill`) after the
/// grace, until it is observed empty; then the command's status, which decides the outcome.
///
/// In a PID namespace the unit is the init's namespace: TERM to the init (which passes it on to
/// every process in it), up to the grace for the init to exit, then SIGKILL to the init (the
/// kernel kills the rest and lets us reap the init only once they are all gone).
fn cancel(pid: Pid, unit: &UnitIdentity, status: Option<&std::os::fd::OwnedFd>) -> Execution {
    if let Some(status) = status {
        use nix::sys::signal::{kill, Signal};
        let _ = kill(pid, Signal::SIGTERM);
        let until = std::time::Instant::now() + Duration::from_millis(TERM_GRACE_MILLIS);
        let pidfd = crate::watch::pidfd_open(child_pid(pid)).ok();
        loop {
            match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::EINTR) => {}
                Ok(init_status) => {
                    let own = pidns::read_status(status).unwrap_or(init_status);
                    if let Some(done) = exited(own, true) {
                        return done;
                    }
                }
                Err(e) => return wait_failed(e, true),
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            sleep_until_event(
                pidfd.as_ref(),
                None,
                left.min(Duration::from_millis(WAIT_POLL_MILLIS * 10)),
            );
        }
        let _ = kill(pid, Signal::SIGKILL);
        loop {
            match waitpid(pid, None) {
                Ok(init_status) => {
                    let own = pidns::read_status(status).unwrap_or(init_status);
                    if let Some(done) = exited(own, true) {
                        return done;
                    }
                }
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return wait_failed(e, true),
            }
        }
    }
    let killed = crate::process::work::kill_unit(unit, Duration::from_millis(TERM_GRACE_MILLIS));
    if !killed.is_complete() {
        tracing::warn!("cancel left processes of the work alive: {killed:?}");
    }
    loop {
        match waitpid(pid, None) {
            Ok(status) => {
                if let Some(done) = exited(status, true) {
                    return done;
                }
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return wait_failed(e, true),
        }
    }
}

/// The environment the command gets: the turn's, with the unit's marker set.
fn marked_env(turn: &TurnRecord, marker: &Marker) -> Vec<(OsString, OsString)> {
    let mut env = turn.env.clone();
    env.insert(marker.var.clone().into(), marker.value.clone().into());
    env.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::signal::Signal;

    #[test]
    fn the_recorded_outcome_is_what_the_command_did() {
        let pid = Pid::from_raw(4242);
        let outcome = |status, signalled| exited(status, signalled).map(|e| e.outcome);
        // Ran to its end: completed, however late a cancel came.
        assert_eq!(
            outcome(WaitStatus::Exited(pid, 0), true),
            Some(TurnOutcome::Completed)
        );
        assert_eq!(
            outcome(WaitStatus::Exited(pid, 0), false),
            Some(TurnOutcome::Completed)
        );
        // Stopped by the cancel's signals, or failing after them: cancelled.
        assert_eq!(
            outcome(WaitStatus::Signaled(pid, Signal::SIGTERM, false), true),
            Some(TurnOutcome::Cancelled)
        );
        assert_eq!(
            outcome(WaitStatus::Exited(pid, 143), true),
            Some(TurnOutcome::Cancelled)
        );
        // Without a cancel a failure is a failure.
        assert_eq!(
            outcome(WaitStatus::Signaled(pid, Signal::SIGKILL, false), false),
            Some(TurnOutcome::Failed)
        );
        assert_eq!(
            outcome(WaitStatus::Exited(pid, 1), false),
            Some(TurnOutcome::Failed)
        );
        assert_eq!(outcome(WaitStatus::StillAlive, true), None);
    }
}
