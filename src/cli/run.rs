//! `tollgate run PACK`: run a pack's items with deadlines, a ceiling and a lane.

use super::exit;
use crate::exec::{self, pack, Event, EventSink, JsonLines, RunOptions};
use crate::protocol::execution::{EndReason, Lane};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LaneArg {
    /// Rows in declaration order (the settled prefix streams as it completes).
    Scored,
    /// Rows as items settle.
    Playbook,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The pack file (pack.toml).
    pub pack: PathBuf,
    /// Row order: scored (declaration order) or playbook (settle order, live).
    #[arg(long, value_enum, default_value = "scored")]
    pub lane: LaneArg,
    /// Whole-run ceiling, e.g. "10m"; overrides the pack's.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DUR")]
    pub ceiling: Option<Duration>,
    /// Items running at once; overrides the pack's.
    #[arg(long, value_name = "N")]
    pub jobs: Option<NonZeroUsize>,
    /// Write the JSON-lines event stream to FILE.
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,
    /// Write the JSON-lines event stream to stdout (instead of text rows).
    #[arg(long)]
    pub json: bool,
}

/// The state directory, resolved like every other command's (`crate::home::Home`), created 0700.
pub(super) fn resolve_home(home: Option<&Path>) -> Result<PathBuf, String> {
    let home =
        crate::home::Home::resolve(home.map(Path::to_path_buf)).map_err(|e| e.to_string())?;
    crate::fsutil::create_private_dir(home.root()).map_err(|e| e.to_string())?;
    Ok(home.root().to_path_buf())
}

/// Human output: plain rows, or on a terminal a progress bar with rows above it, naming the items
/// still running.
struct Text {
    bar: Option<ProgressBar>,
    out: io::Stdout,
    /// Items started and not yet reported settled, in start order: what the bar names.
    pending: Vec<String>,
    /// On the scored lane a settled item is reported only once every earlier one is, so the
    /// names still pending are "running or done, waiting for earlier rows".
    scored: bool,
}

impl Text {
    fn show_pending(&self) {
        let Some(bar) = &self.bar else { return };
        let label = if self.scored { "pending" } else { "running" };
        let mut names = String::new();
        for (i, name) in self.pending.iter().enumerate() {
            if names.len() > 60 {
                names.push_str(&format!(" +{} more", self.pending.len() - i));
                break;
            }
            if i > 0 {
                names.push_str(", ");
            }
            names.push_str(name);
        }
        if names.is_empty() {
            bar.set_message(String::new());
        } else {
            bar.set_message(format!("{label}: {names}"));
        }
    }
}

impl EventSink for Text {
    fn emit(&mut self, event: &Event) {
        match event {
            Event::RunStarted { items, .. } => {
                if let Some(bar) = &self.bar {
                    bar.set_length(*items as u64);
                }
            }
            Event::ItemStarted { item, .. } => {
                self.pending.push(item.clone());
                self.show_pending();
            }
            Event::ItemSettled(row) => {
                let status = match (row.exit_code, row.signal) {
                    (Some(c), _) => format!("exit {c}"),
                    (None, Some(s)) => format!("signal {s}"),
                    _ => "-".to_string(),
                };
                let mut line = format!(
                    "{:<10} {:<30} {:>8} ms  {}",
                    row.outcome.as_str(),
                    row.item,
                    row.duration_millis,
                    status
                );
                // A failed item's output tail, indented under its row: the reason is in the
                // text output, not only in --json.
                if row.outcome != crate::protocol::execution::Outcome::Passed {
                    if let Some(tail) = row.output_tail.as_deref().filter(|t| !t.trim().is_empty())
                    {
                        for text in tail.trim_end().lines() {
                            line.push_str("\n    | ");
                            line.push_str(text);
                        }
                    }
                }
                if let Some(at) = self.pending.iter().position(|p| p == &row.item) {
                    self.pending.remove(at);
                }
                self.show_pending();
                match &self.bar {
                    Some(bar) => {
                        bar.println(line);
                        bar.inc(1);
                    }
                    None => {
                        let mut out = self.out.lock();
                        let _ = writeln!(out, "{line}");
                        let _ = out.flush();
                    }
                }
            }
            Event::RunEnded { .. } => {
                if let Some(bar) = self.bar.take() {
                    bar.finish_and_clear();
                }
            }
        }
    }
}

struct Sinks {
    sinks: Vec<Box<dyn EventSink>>,
}

impl EventSink for Sinks {
    fn emit(&mut self, event: &Event) {
        for sink in &mut self.sinks {
            sink.emit(event);
        }
    }
}

pub fn run(args: RunArgs, home: Option<&Path>) -> i32 {
    let pack = match pack::load(&args.pack) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("tollgate run: {e}");
            return exit::USAGE;
        }
    };
    let home = match resolve_home(home) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("tollgate run: cannot use the state directory: {e}");
            return exit::ENVIRONMENT;
        }
    };
    let mut sinks: Vec<Box<dyn EventSink>> = Vec::new();
    if let Some(path) = &args.events {
        match File::create(path) {
            Ok(f) => sinks.push(Box::new(JsonLines(f))),
            Err(e) => {
                eprintln!(
                    "tollgate run: cannot write events to {}: {e}",
                    path.display()
                );
                return exit::ENVIRONMENT;
            }
        }
    }
    if args.json {
        sinks.push(Box::new(JsonLines(io::stdout())));
    } else {
        let live = io::stdout().is_terminal();
        let bar = live.then(|| {
            // Drawn on stdout, the terminal we checked (indicatif's default is stderr).
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stdout());
            if let Ok(style) =
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {pos}/{len} {msg}")
            {
                bar.set_style(style);
            }
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        sinks.push(Box::new(Text {
            bar,
            out: io::stdout(),
            pending: Vec::new(),
            scored: args.lane == LaneArg::Scored,
        }));
    }

    let interrupt = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // The first signal asks the run to stop (kill items, report `interrupted`); a second one,
        // while the run is already stopping, exits at once with 128 + signal.
        let registered = signal_hook::flag::register_conditional_shutdown(
            signal,
            128 + signal,
            Arc::clone(&interrupt),
        )
        .and_then(|_| signal_hook::flag::register(signal, Arc::clone(&interrupt)));
        if let Err(e) = registered {
            eprintln!("tollgate run: cannot install the signal handler: {e}");
            return exit::ENVIRONMENT;
        }
    }
    let force_subreaper = std::env::var(exec::kill::NO_CGROUP_ENV).is_ok_and(|v| v == "1");
    let opts = RunOptions {
        lane: match args.lane {
            LaneArg::Scored => Lane::Scored,
            LaneArg::Playbook => Lane::Playbook,
        },
        ceiling: args.ceiling,
        jobs: args.jobs.map(NonZeroUsize::get),
        home,
        containment: exec::choose_containment(force_subreaper),
        interrupt: Some(interrupt),
    };
    let killer = exec::ProcessKiller::new();
    let mut sink = Sinks { sinks };
    let report = match exec::run_many(&pack, &opts, &killer, &mut sink) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tollgate run: {e}");
            return exit::ENVIRONMENT;
        }
    };
    for dead in &report.swept {
        eprintln!(
            "tollgate run: killed {} processes left by run {} (pid {} is gone)",
            dead.killed, dead.run_id, dead.run_pid
        );
    }
    for warning in &report.warnings {
        eprintln!("tollgate run: warning: {warning}");
    }
    for path in &report.listed {
        eprintln!(
            "tollgate run: worktree {} is listed for `tollgate sweep`",
            path.display()
        );
    }
    let c = report.counts;
    let summary = format!(
        "run ended: {} ({} passed, {} failed, {} timed-out, {} abandoned, {} cancelled)",
        report.reason.as_str(),
        c.passed,
        c.failed,
        c.timed_out,
        c.abandoned,
        c.cancelled
    );
    if args.json {
        eprintln!("{summary}");
    } else {
        println!("{summary}");
    }
    let all_passed = report.reason == EndReason::Completed && c.passed == pack.items.len();
    if all_passed {
        exit::OK
    } else {
        exit::FAILED
    }
}
