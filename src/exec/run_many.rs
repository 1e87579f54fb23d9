//! The shell of a run: spawns items, owns their worktrees and kill targets, and waits for worker
//! results with a bounded `recv_timeout` driven by the core's next deadline.
//!
//! Each item runs under a `'static` worker thread that owns only its child process, the read end of
//! the child's output pipe and a channel sender. The run never joins a worker: it settles an item
//! from the worker's message, or (after kill, term grace and join grace) as abandoned, leaving the
//! thread behind; a late message is refused by the core and dropped.

use super::kill::{self, Containment, KillTarget, Killer};
use super::pack::{Command as ItemCommand, Pack};
use super::settlement::Settlement;
use super::sweep::{self, DeadRun, RunRecord, SweepEntry, SweepError};
use super::worktree::{self, Worktree};
use crate::clock::{duration_millis, now_millis};
use crate::process::containment::UnitIdentity;
use crate::protocol::execution::{
    Action, Counts, EndReason, ExecError, Execution, ExitStatus, Lane, Limits, Outcome, Row,
    WorktreeStep,
};
use serde::Serialize;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest the run sleeps without looking at the interrupt flag.
const INTERRUPT_POLL_MILLIS: u64 = 50;
/// Bytes of an item's combined stdout/stderr kept for its row.
const OUTPUT_TAIL_BYTES: usize = 2048;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Core(#[from] ExecError),
    #[error("RUN_WORKTREE_ROOT: cannot create {path}: {source}")]
    WorktreeRoot { path: PathBuf, source: io::Error },
    /// Nothing starts unless the run is on the sweep list first, so a killed run can be cleaned.
    #[error("RUN_UNRECORDED: cannot record the run before its items start: {0}")]
    Unrecorded(#[source] SweepError),
    #[error("RUN_IDENTITY: {0}")]
    Identity(#[source] io::Error),
}

/// One line of the event stream.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    RunStarted {
        run_id: String,
        pack: String,
        items: usize,
        lane: Lane,
        jobs: usize,
        ceiling_millis: Option<u64>,
        at_millis: u64,
    },
    ItemStarted {
        item: String,
        index: usize,
        pid: Option<u32>,
        at_millis: u64,
    },
    ItemSettled(SettledRow),
    RunEnded {
        reason: EndReason,
        counts: Counts,
        at_millis: u64,
        duration_millis: u64,
    },
}

/// The `item_settled` row.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SettledRow {
    pub item: String,
    pub index: usize,
    pub outcome: Outcome,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Unix epoch millis; `None` when the item never started.
    pub started_at_millis: Option<u64>,
    pub ended_at_millis: u64,
    pub duration_millis: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tail: Option<String>,
}

/// Where events go. Called on the run's thread, in order.
pub trait EventSink {
    fn emit(&mut self, event: &Event);
}

/// Writes each event as one JSON line and flushes it.
pub struct JsonLines<W: Write>(pub W);

impl<W: Write> EventSink for JsonLines<W> {
    fn emit(&mut self, event: &Event) {
        if let Err(e) = crate::jsonl::write_line(&mut self.0, event) {
            tracing::warn!("cannot write event: {e}");
        }
    }
}

/// How to run a pack.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub lane: Lane,
    /// Overrides the pack's ceiling.
    pub ceiling: Option<Duration>,
    /// Overrides the pack's jobs.
    pub jobs: Option<usize>,
    /// Worktrees go under `<home>/worktrees/`, the sweep list is `<home>/sweep.json`.
    pub home: PathBuf,
    pub containment: Containment,
    /// Set by a signal handler; the run then ends as interrupted.
    pub interrupt: Option<Arc<AtomicBool>>,
}

/// What a finished run reports.
#[derive(Clone, Debug)]
pub struct RunReport {
    pub run_id: String,
    pub reason: EndReason,
    pub counts: Counts,
    /// In the order they were emitted.
    pub rows: Vec<SettledRow>,
    /// Worktrees put on the sweep list.
    pub listed: Vec<PathBuf>,
    /// Problems that did not stop the run (a sweep list that could not be written, ...).
    pub warnings: Vec<String>,
    /// Dead runs on this home whose leftovers this run killed before starting.
    pub swept: Vec<DeadRun>,
}

impl RunReport {
    pub fn all_passed(&self) -> bool {
        self.reason == EndReason::Completed && self.counts.passed == self.rows.len()
    }
}

struct WorkerMessage {
    index: usize,
    exit: ExitStatus,
    tail: Vec<u8>,
}

/// What the run holds per started item.
#[derive(Default)]
struct Held {
    target: Option<KillTarget>,
    worktree: Option<Worktree>,
    tail: Option<Vec<u8>>,
    started_wall_millis: Option<u64>,
}

struct Run<'a> {
    pack: &'a Pack,
    /// The run's cgroup (items' groups inside), on the cgroup path.
    run_group: Option<PathBuf>,
    opts: &'a RunOptions,
    killer: &'a dyn Killer,
    sink: &'a mut dyn EventSink,
    settlement: Settlement,
    held: Vec<Held>,
    run_id: String,
    started: Instant,
    wall_base_millis: u64,
    tx: SyncSender<WorkerMessage>,
    rows: Vec<SettledRow>,
    listed: Vec<PathBuf>,
    warnings: Vec<String>,
}

/// Runs every item of `pack` and returns once each has settled.
pub fn run_many(
    pack: &Pack,
    opts: &RunOptions,
    killer: &dyn Killer,
    sink: &mut dyn EventSink,
) -> Result<RunReport, RunError> {
    let jobs = opts
        .jobs
        .or(pack.jobs)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let ceiling = opts.ceiling.or(pack.ceiling);
    let grace_millis = duration_millis(pack.grace);
    let limits = Limits {
        ceiling_millis: ceiling.map(duration_millis),
        term_grace_millis: grace_millis,
        join_grace_millis: grace_millis,
        jobs,
        lane: opts.lane,
    };
    let core = Execution::new(pack.specs(), limits)?;
    // Each worker sends exactly one message, so a bound of one slot per item never blocks.
    let (tx, rx) = mpsc::sync_channel(pack.items.len().max(1));
    let run_id = uuid::Uuid::now_v7().to_string();
    // What a dead run on this home left is killed first: its items may hold the same resources.
    let (swept, mut warnings) = match sweep::sweep_dead_runs(&opts.home) {
        Ok(swept) => (swept, Vec::new()),
        Err(e) => (Vec::new(), vec![format!("cannot sweep dead runs: {e}")]),
    };
    for dead in &swept {
        if !dead.survivors.is_empty() {
            warnings.push(format!(
                "run {} (pid {}) is dead but {} of its processes survived SIGKILL: {:?}",
                dead.run_id,
                dead.run_pid,
                dead.survivors.len(),
                dead.survivors
            ));
        }
    }
    let run_group = match &opts.containment {
        Containment::Cgroup { base } => kill::create_run_cgroup(base),
        Containment::Subreaper => None,
    };
    // Recorded before any item starts (see spec/execution.md, "A killed run").
    let record = RunRecord {
        run_id: run_id.clone(),
        run: crate::process::self_identity().map_err(RunError::Identity)?,
        unit: UnitIdentity {
            cgroup: run_group.clone(),
            pgid: None,
            marker: kill::run_marker(&run_id),
            leader: None,
        },
        worktree_root: opts.home.join("worktrees").join(&run_id),
        grace_millis,
        started_at_millis: now_millis(),
    };
    if let Err(e) = sweep::record_run(&opts.home, record) {
        if let Some(dir) = &run_group {
            crate::process::containment::cgroup::remove_tree(dir);
        }
        return Err(RunError::Unrecorded(e));
    }
    let mut run = Run {
        pack,
        run_group,
        opts,
        killer,
        sink,
        settlement: Settlement::new(core),
        held: (0..pack.items.len()).map(|_| Held::default()).collect(),
        run_id,
        started: Instant::now(),
        wall_base_millis: now_millis(),
        tx,
        rows: Vec::with_capacity(pack.items.len()),
        listed: Vec::new(),
        warnings,
    };
    run.sink.emit(&Event::RunStarted {
        run_id: run.run_id.clone(),
        pack: pack.path.display().to_string(),
        items: pack.items.len(),
        lane: opts.lane,
        jobs,
        ceiling_millis: limits.ceiling_millis,
        at_millis: run.wall_base_millis,
    });

    let reason = loop {
        let now = run.now_millis();
        if run
            .opts
            .interrupt
            .as_ref()
            .is_some_and(|f| f.load(Ordering::SeqCst))
        {
            let actions = run.settlement.interrupt(now);
            run.apply(actions);
        }
        let actions = run.settlement.tick(now);
        run.apply(actions);
        while let Some(index) = run.settlement.take_next(now) {
            run.start(index, now);
        }
        run.emit_rows();
        if let Some(reason) = run.settlement.end_reason() {
            break reason;
        }
        let wait_millis = run
            .settlement
            .next_deadline_millis()
            .map_or(INTERRUPT_POLL_MILLIS, |d| d.saturating_sub(now))
            .min(INTERRUPT_POLL_MILLIS);
        match rx.recv_timeout(Duration::from_millis(wait_millis)) {
            Ok(message) => run.on_message(message),
            Err(RecvTimeoutError::Timeout) => {}
            // The run holds a sender itself, so this cannot happen; treat it as a tick.
            Err(RecvTimeoutError::Disconnected) => {}
        }
        while let Ok(message) = rx.try_recv() {
            run.on_message(message);
        }
    };
    run.killer.finish_run(&format!("{}/", run.run_id));
    if let Some(dir) = &run.run_group {
        // Not empty only while an abandoned item lives in it; `tollgate sweep` removes it later.
        crate::process::containment::cgroup::remove_tree(dir);
    }
    // Empty unless a worktree is left for the sweep.
    let _ = std::fs::remove_dir(opts.home.join("worktrees").join(&run.run_id));
    // Every item settled and was released (an abandoned one's worktree is on the list): the run
    // needs no sweeping any more.
    if let Err(e) = sweep::forget_run(&opts.home, &run.run_id) {
        run.warnings.push(format!(
            "{e}; the finished run stays on the sweep list until `tollgate sweep`"
        ));
    }
    let counts = run.settlement.counts();
    let end_wall = run.wall(run.now_millis());
    run.sink.emit(&Event::RunEnded {
        reason,
        counts,
        at_millis: end_wall,
        duration_millis: end_wall.saturating_sub(run.wall_base_millis),
    });
    Ok(RunReport {
        run_id: run.run_id,
        reason,
        counts,
        rows: run.rows,
        listed: run.listed,
        warnings: run.warnings,
        swept,
    })
}

impl Run<'_> {
    fn now_millis(&self) -> u64 {
        duration_millis(self.started.elapsed())
    }

    fn wall(&self, run_millis: u64) -> u64 {
        self.wall_base_millis.saturating_add(run_millis)
    }

    fn on_message(&mut self, message: WorkerMessage) {
        let now = self.now_millis();
        match self
            .settlement
            .worker_result(message.index, now, message.exit)
        {
            Ok(actions) => {
                if let Some(held) = self.held.get_mut(message.index) {
                    held.tail = Some(message.tail);
                }
                self.apply(actions);
            }
            // An abandoned worker's late result: the item settled without it; drop it.
            Err(ExecError::AlreadySettled { index, .. }) => {
                tracing::debug!("dropping the late result of abandoned item {index}");
            }
            Err(e) => self.warnings.push(e.to_string()),
        }
    }

    fn start(&mut self, index: usize, now: u64) {
        let item = &self.pack.items[index];
        let wall = self.wall(now);
        self.held[index].started_wall_millis = Some(wall);
        match self.spawn(index) {
            Ok(pid) => self.sink.emit(&Event::ItemStarted {
                item: item.name.clone(),
                index,
                pid: Some(pid),
                at_millis: wall,
            }),
            Err(message) => {
                self.sink.emit(&Event::ItemStarted {
                    item: item.name.clone(),
                    index,
                    pid: None,
                    at_millis: wall,
                });
                self.held[index].tail = Some(message.into_bytes());
                match self
                    .settlement
                    .worker_result(index, now, ExitStatus::SpawnFailed)
                {
                    Ok(actions) => self.apply(actions),
                    Err(e) => self.warnings.push(e.to_string()),
                }
            }
        }
    }

    /// Creates the worktree and cgroup, spawns the command and its worker. On error the item
    /// holds whatever was created, for the release to clean up.
    fn spawn(&mut self, index: usize) -> Result<u32, String> {
        let item = &self.pack.items[index];
        let mut cwd = self.pack.dir.clone();
        if item.worktree {
            let path = self
                .opts
                .home
                .join("worktrees")
                .join(&self.run_id)
                .join(format!("{index}-{}", sanitize(&item.name)));
            let wt = worktree::create(&self.pack.dir, &path).map_err(|e| e.to_string())?;
            cwd = wt.pack_dir.clone();
            self.held[index].worktree = Some(wt);
        }
        if let Some(rel) = &item.cwd {
            cwd = cwd.join(rel);
        }
        let mut cmd = match &item.command {
            ItemCommand::Argv(argv) => {
                let Some((program, args)) = argv.split_first() else {
                    return Err(format!("item {:?} has an empty argv", item.name));
                };
                let mut c = Command::new(program);
                c.args(args);
                c
            }
            ItemCommand::Shell(line) => {
                let mut c = Command::new("sh");
                c.arg("-c").arg(line);
                c
            }
        };
        cmd.current_dir(&cwd).envs(&item.env).stdin(Stdio::null());
        // The unit (its group inside the run's, on the cgroup path) exists before the spawn.
        let mut unit = UnitIdentity::prepare(
            self.run_group.as_deref(),
            &index.to_string(),
            kill::item_marker(&self.run_id, index),
        );
        unit.configure(&mut cmd);
        let (reader, writer) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
        let writer2 = writer.try_clone().map_err(|e| format!("pipe: {e}"))?;
        cmd.stdout(Stdio::from(writer)).stderr(Stdio::from(writer2));
        let spawned = cmd.spawn();
        // Our copies of the pipe's write end must close, or the reader never sees EOF.
        drop(cmd);
        let child = match spawned {
            Ok(child) => child,
            Err(e) => {
                if let Some(dir) = &unit.cgroup {
                    let _ = std::fs::remove_dir(dir);
                }
                return Err(format!("cannot start {:?}: {e}", item.name));
            }
        };
        let pid = child.id();
        if let Err(e) = unit.started(pid) {
            // Still contained by its process group and the /proc walk.
            tracing::warn!("cannot move item {index} into its cgroup: {e}");
        }
        let target = KillTarget {
            pid: pid as i32,
            unit,
        };
        let tx = self.tx.clone();
        let reader = File::from(reader);
        let worker = std::thread::Builder::new()
            .name(format!("tollgate-item-{index}"))
            .spawn(move || work(index, child, reader, tx));
        self.held[index].target = Some(target);
        match worker {
            Ok(_detached) => Ok(pid),
            Err(e) => {
                // The child runs with no worker; kill its tree now (the release reaps it).
                if let Some(target) = &self.held[index].target {
                    self.killer
                        .signal_tree(target, crate::protocol::execution::KillSignal::Kill);
                }
                Err(format!("cannot start a worker thread: {e}"))
            }
        }
    }

    fn apply(&mut self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Kill { index, signal } => {
                    if let Some(target) = &self.held[index].target {
                        self.killer.signal_tree(target, signal);
                    }
                }
                Action::Release { index, worktree } => {
                    if let Some(target) = self.held[index].target.take() {
                        self.killer.release(&target);
                    }
                    if worktree == WorktreeStep::Remove {
                        self.remove_worktree(index);
                    }
                }
                Action::Abandon { index, worktree } => {
                    // The worker keeps its child; the run keeps nothing of it but the sweep entry.
                    self.held[index].target = None;
                    if worktree == WorktreeStep::List {
                        self.list_worktree(index);
                    }
                }
            }
        }
    }

    fn remove_worktree(&mut self, index: usize) {
        let Some(wt) = self.held[index].worktree.clone() else {
            // Never created (spawn failed before it): nothing to remove.
            if let Err(e) = self.settlement.worktree_removed(index) {
                self.warnings.push(e.to_string());
            }
            return;
        };
        let reported = match worktree::remove(&wt) {
            Ok(()) => {
                self.held[index].worktree = None;
                self.settlement.worktree_removed(index)
            }
            Err(e) => {
                self.warnings.push(e.to_string());
                self.list_worktree(index);
                self.settlement.worktree_kept(index)
            }
        };
        if let Err(e) = reported {
            self.warnings.push(e.to_string());
        }
    }

    fn list_worktree(&mut self, index: usize) {
        let Some(wt) = self.held[index].worktree.take() else {
            return;
        };
        let entry = SweepEntry {
            worktree: wt.clone(),
            run_id: self.run_id.clone(),
            run_pid: std::process::id(),
            item: self.pack.items[index].name.clone(),
            listed_at_millis: now_millis(),
        };
        match sweep::add(&self.opts.home, entry) {
            Ok(()) => self.listed.push(wt.path),
            Err(e) => self.warnings.push(format!(
                "{e}; worktree {} is not listed for sweep",
                wt.path.display()
            )),
        }
    }

    fn emit_rows(&mut self) {
        for row in self.settlement.poll_rows() {
            let settled = self.settled_row(&row);
            self.sink.emit(&Event::ItemSettled(settled.clone()));
            self.rows.push(settled);
        }
    }

    fn settled_row(&mut self, row: &Row) -> SettledRow {
        let held = &mut self.held[row.index];
        let (exit_code, signal) = match row.exit {
            Some(ExitStatus::Code(c)) => (Some(c), None),
            Some(ExitStatus::Signal(s)) => (None, Some(s)),
            _ => (None, None),
        };
        let tail = held.tail.take().filter(|_| row.outcome != Outcome::Passed);
        SettledRow {
            item: self.pack.items[row.index].name.clone(),
            index: row.index,
            outcome: row.outcome,
            exit_code,
            signal,
            started_at_millis: row.started_at_millis.and(held.started_wall_millis),
            ended_at_millis: self.wall_base_millis.saturating_add(row.ended_at_millis),
            duration_millis: row.duration_millis(),
            output_tail: tail
                .filter(|t| !t.is_empty())
                .map(|t| String::from_utf8_lossy(&t).into_owned()),
        }
    }
}

/// A worker: reads the item's output to EOF (keeping a bounded tail), waits for the child, sends
/// one message. It holds nothing of the run but `tx`; if the run is gone the send fails quietly.
fn work(index: usize, mut child: Child, mut reader: File, tx: SyncSender<WorkerMessage>) {
    let mut tail: Vec<u8> = Vec::with_capacity(OUTPUT_TAIL_BYTES);
    let mut buf = [0u8; 8192];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > OUTPUT_TAIL_BYTES {
                    let cut = tail.len() - OUTPUT_TAIL_BYTES;
                    tail.drain(..cut);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let exit = match child.wait() {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => ExitStatus::Code(code),
            (None, Some(sig)) => ExitStatus::Signal(sig),
            (None, None) => ExitStatus::SpawnFailed,
        },
        Err(_) => ExitStatus::SpawnFailed,
    };
    let _ = tx.send(WorkerMessage { index, exit, tail });
}

fn sanitize(name: &str) -> String {
    name.chars()
        .take(48)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
