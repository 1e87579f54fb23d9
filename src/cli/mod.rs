//! The command line: clap derive, context-rich errors, documented exit codes.

mod cancel;
mod common;
mod complete;
mod config;
mod deps;
pub mod docs;
mod doctor;
mod drain;
mod error;
mod follow;
mod hosts;
mod init;
mod lifecycle;
mod logging;
mod logs;
mod program;
mod reconcile;
mod sched;
#[cfg(feature = "serve")]
mod serve;
mod status;
mod submit;
mod turnref;
mod worker;

pub use error::CliError;

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[cfg(feature = "model-check")]
pub mod model;
pub mod run;
mod status_table;
pub mod sweep;

/// Exit codes every subcommand shares (also listed in `--help` and the README).
pub mod exit {
    /// Success.
    pub const OK: i32 = 0;
    /// The work ran and failed (a turn's command exited non-zero, an item failed).
    pub const FAILED: i32 = 1;
    /// Bad usage or bad input: an argument, a config or a state file was wrong. Nothing changed.
    pub const USAGE: i32 = 2;
    /// The environment failed us: IO error, lock wait timed out, spawn failed.
    pub const ENVIRONMENT: i32 = 3;
    /// `submit` was refused by the task's `drop` strategy: a turn of the task is in the queue
    /// (running, starting, or waiting for a worker slot).
    pub const DROPPED: i32 = 4;
    /// The turn never ran: a turn it waited for with `--after-success` ended other than
    /// completed with exit 0 (`submit`, `submit --wait`, `wait`).
    pub const DEPENDENCY_FAILED: i32 = 5;
    /// State unknown: a step failed after (or while) a change was committed, so the command
    /// cannot say what the home holds. A `submit` names the turn: it is queued, or may be; check
    /// `tollgate status ID` before submitting it again (exit 3 always means nothing was queued).
    pub const STATE_UNKNOWN: i32 = 6;
}

const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success
  1  the work ran and failed (submit --wait passes the turn's own exit code through instead)
  2  bad usage or bad input (argument, config, state file, unknown task, a program submit
     cannot find); nothing was changed
  3  environment failure (IO error, queue lock wait timed out, spawn failed, a store that
     cannot be used, the runner of a turn `wait` follows died); a submit that exits 3 queued
     nothing
  4  submit refused by the task's `drop` strategy (a turn of the task is running or waiting)
  5  the turn never ran: a turn it waited for with --after-success did not succeed
  6  state unknown: a step failed after a change was committed (submit: the turn, named by
     its id, is or may be queued; check `tollgate status ID` before submitting it again)
  124  submit --wait/--attach: the turn ran longer than its --timeout and was killed
  127  submit --wait, wait: the turn's command could not be started (unstartable)
Otherwise submit --wait, --attach and wait exit with the turn's own exit code (128+N: signal N).

Quick start:
  tollgate --home /tmp/tg init       a throwaway home to try things in (or TOLLGATE_HOME=/tmp/tg)
  tollgate submit -- echo hello      run a command on a detached runner (home created on first use)
  tollgate status                    worker slots, and every turn not ended and the newest ended
  tollgate logs <TURN>               the output of a turn (TURN: the id submit prints, or TASK)";

#[derive(Debug, Parser)]
#[command(name = "tollgate", version, about, long_about = None, after_help = EXIT_CODES_HELP)]
pub struct Cli {
    /// State directory (config, queue, task logs). Default: $XDG_STATE_HOME/tollgate, else
    /// ~/.local/state/tollgate, created 0700 on first use. A DIR given here (or in
    /// TOLLGATE_HOME) must exist: `tollgate init` (or `--create`) creates it, so a typo is an
    /// error instead of a new empty home.
    #[arg(long, global = true, env = "TOLLGATE_HOME", value_name = "DIR")]
    pub home: Option<PathBuf>,

    /// Create the `--home` / TOLLGATE_HOME directory if it does not exist (what `init` does).
    #[arg(long, global = true)]
    pub create: bool,

    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per process and never moved in a loop: the size of the `submit` variant costs
// nothing, and boxing it would only make every match on it noisier.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the home (if needed) and write its config.
    Init(InitArgs),
    /// Queue a new turn of a task and start it on a free worker slot, or park it.
    Submit(SubmitArgs),
    /// Show worker slots, occupancy, queue rows, runners and turns with their outcome.
    Status(StatusArgs),
    /// Print the output of a task's turn.
    Logs(LogsArgs),
    /// Wait until turns end; exit with the turn's exit code (the highest of several).
    Wait(lifecycle::WaitArgs),
    /// Queue a new turn with the same command, directory and environment as an earlier one.
    Restart(lifecycle::RestartArgs),
    /// Remove ended turns and their logs (never a queued or running one).
    Clean(lifecycle::CleanArgs),
    /// Cancel a task's queued turns and stop its running ones.
    Cancel(CancelArgs),
    /// Hold the queued turns of the home or of one task (running turns go on).
    Pause(sched::PauseArgs),
    /// Lift a pause and start what may start now, up to the free worker slots.
    Resume(sched::ResumeArgs),
    /// Repair after crashes: replace dead runners of active turns, start parked rows on free slots.
    Reconcile(ReconcileArgs),
    /// Check the home's database: SQLite's integrity check and the queue's structure.
    Doctor(doctor::DoctorArgs),
    /// List a fleet's hosts (PostgreSQL store): live executors and lease age, by the database clock.
    Hosts(hosts::HostsArgs),
    /// Drain a fleet's host (PostgreSQL store): it starts no new turn, its running turns finish.
    Drain(drain::DrainArgs),
    /// Run a pack: every item with its deadline, under the run ceiling, rows by lane.
    Run(run::RunArgs),
    /// Kill what dead runs left running; remove listed worktrees no live process holds any more.
    Sweep(sweep::SweepArgs),
    /// Serve webhooks: verify senders, admit under `max_detached`, run each delivery as a turn.
    #[cfg(feature = "serve")]
    Serve(serve::ServeArgs),
    /// List webhook deliveries `serve` refused (`--refused`), for redelivery.
    #[cfg(feature = "serve")]
    Deliveries(serve::DeliveriesArgs),
    /// Check the protocol models exhaustively, or explore one in a browser (reviewers' tools).
    #[cfg(feature = "model-check")]
    Model(model::ModelArgs),
    /// Show the effective configuration, one key of it, or set a key (comments kept).
    Config(config::ConfigArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(docs::CompletionsArgs),
    /// Print the manual page (roff), generated from the same definitions as `--help`.
    Man(docs::ManArgs),
    /// Internal commands run by tollgate itself.
    #[command(subcommand, hide = true)]
    Worker(WorkerCommand),
    /// Completion candidates (task names, turn ids) for the scripts `completions` prints.
    #[command(name = "__complete", hide = true)]
    Complete(complete::CompleteArgs),
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Worker slots: how many detached runners may run at once (1..=1024).
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    /// Print the resulting config as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tollgate submit -- make test
  tollgate submit --task nightly --wait -- ./backup.sh
  tollgate submit --task build --env RUST_LOG=debug --cwd ~/src/app -- cargo build
  tollgate submit --label nightly --label db -- ./backup.sh
  tollgate submit --delay 10m -- ./report.sh
  tollgate submit --at 23:30 --priority 5 -- ./nightly.sh
  tollgate submit --after-success 17 -- ./deploy.sh        (runs only if turn 17 completes with 0)
  tollgate submit --retry 3 --backoff 10s -- ./flaky-upload.sh")]
pub struct SubmitArgs {
    /// The task this turn belongs to (letters, digits, '.', '_', '-'). If omitted, a new task
    /// named after the program and the turn's id, e.g. `make-17` (for `sh -c SCRIPT`, the
    /// script's first word).
    #[arg(long, value_name = "TASK")]
    pub task: Option<String>,
    /// Set the task's strategy, kept for later submits: what a new turn does while the task is
    /// busy. `drop`: refuse it (exit code 4). `queue`: most recent wins, one waiter; an older
    /// waiter ends superseded. `debounce=DUR`: start the last turn once DUR passed without a newer
    /// one. `concurrent=N`: up to N turns at once, the rest in line. Default: concurrent=1.
    #[arg(long, value_name = "STRATEGY", requires = "task")]
    pub strategy: Option<String>,
    /// Run in the foreground of this command instead of a detached runner (not capped by the
    /// worker slots, but it occupies one while it runs).
    #[arg(long)]
    pub attach: bool,
    /// Wait for the turn to end and exit with its exit code.
    #[arg(long)]
    pub wait: bool,
    /// Working directory of the command (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Extra environment variable for the command (repeatable, always stored). Of this command's
    /// own environment the turn keeps only what `env_keep` in tollgate.toml names (see --env-all).
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<std::ffi::OsString>,
    /// A label for the turn, shown by `status` and matched by `status --label` (repeatable; up
    /// to 16, each 1..=64 characters without spaces or commas).
    #[arg(long = "label", value_name = "LABEL")]
    pub labels: Vec<String>,
    /// Store this command's whole environment with the turn (as before `env_keep`): by default
    /// only the variables `env_keep` in tollgate.toml names (PATH, HOME, USER, LANG, LC_*, TERM,
    /// SHELL, TZ) and every `--env` are kept.
    #[arg(long)]
    pub env_all: bool,
    /// Kill the turn's whole process tree (TERM, a grace, KILL) once it has run DUR (e.g. 30s,
    /// 5m, 1h30m; at most 30 days). The turn ends `timed_out`; `--wait`/`--attach` exit 124.
    #[arg(long, value_name = "DUR")]
    pub timeout: Option<String>,
    /// Start no earlier than DUR from now (e.g. 90s, 10m, 2h; at most 7 days). The turn waits
    /// queued ("delayed until ..." in `status`) and starts then without any other command.
    #[arg(long, value_name = "DUR", conflicts_with_all = ["at", "attach"])]
    pub delay: Option<String>,
    /// Start no earlier than TIME: HH:MM (local time; today, or tomorrow if that has passed) or
    /// RFC 3339 (2026-12-01T17:30:00Z, ...+02:00); at most 7 days ahead.
    #[arg(long, value_name = "TIME", conflicts_with = "attach")]
    pub at: Option<String>,
    /// Among queued turns that may start, the highest priority starts first (FIFO among equal
    /// ones); it never stops a running turn. Default 0; negative values go last.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true,
        conflicts_with = "attach"
    )]
    pub priority: i32,
    /// Start only once these turns have ended, however they ended (TURN as for `logs`: a short
    /// id, TASK for its latest turn, TASK:N or `last`; at most 32 in all with --after-success).
    /// A retried turn is followed to its last attempt. Not with --attach.
    #[arg(long, value_name = "TURN", num_args = 1.., conflicts_with = "attach")]
    pub after: Vec<String>,
    /// Start only once these turns have completed with exit 0. If one ends otherwise (failed,
    /// timed_out, unstartable, cancelled, dependency_failed, after its last retry), this turn
    /// never runs and ends `dependency_failed` naming it (exit code 5 for --wait and `wait`).
    #[arg(long, value_name = "TURN", num_args = 1.., conflicts_with = "attach")]
    pub after_success: Vec<String>,
    /// Re-run a turn that fails (exit code other than 0, killed by a signal, timed out,
    /// unstartable; never a cancelled one) up to N more times, each attempt a new turn of the
    /// same task with the same command, cwd and env (at most 100). `cancel TASK` stops them.
    #[arg(long, value_name = "N", conflicts_with = "attach")]
    pub retry: Option<u32>,
    /// Wait before each retry: DUR before the 2nd attempt, doubled for each one after (2 × DUR
    /// before the 3rd, 4 × DUR before the 4th …), at most 1h. Default: 0 (at once).
    #[arg(long, value_name = "DUR", requires = "retry")]
    pub backoff: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print only the turn's id on stdout (for scripts: `id=$(tollgate submit -q -- make)`;
    /// with --wait the turn's output follows it); errors still go to stderr with their exit code.
    #[arg(long, short, conflicts_with = "json")]
    pub quiet: bool,
    /// Queue the command without checking that its program can be found (in the turn's
    /// directory for a path, else on the PATH of its stored environment).
    #[arg(long)]
    pub no_check: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
#[command(after_help = crate::turn_state::states_help())]
pub struct StatusArgs {
    /// Show only this task, with all its turns.
    #[arg(value_name = "TASK")]
    pub task: Option<String>,
    /// Show every turn of every task (default: every turn that has not ended, sorted by id, and
    /// the newest `status_ended_turns` ended ones of the home, 10 unless tollgate.toml says).
    #[arg(long)]
    pub all: bool,
    /// Show only turns carrying this label (`submit --label`), of every age.
    #[arg(long, value_name = "LABEL")]
    pub label: Option<String>,
    /// Redraw the table in place every `--interval` until interrupted.
    #[arg(long, conflicts_with = "json")]
    pub watch: bool,
    /// Redraw period of `--watch` (e.g. 500ms, 2s).
    #[arg(long, value_name = "DUR", default_value = "1s", requires = "watch")]
    pub interval: String,
    /// Print JSON: the queue's rows, runners and every task with its shown turns (`state` in the
    /// words above; `legacy_state` the word of earlier versions, for one version more), and
    /// `hidden_turns` per task and for the home.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// ID (a turn's short id, from `submit` or `status`), TASK (its latest turn), TASK:N,
    /// TASK:last (for a task named with digits), or `last` (the turn submitted last in the home).
    #[arg(value_name = "TURN")]
    pub task: String,
    /// The turn (default: the latest).
    #[arg(long, value_name = "N")]
    pub turn: Option<u32>,
    /// Keep printing output as it is written until the turn ends.
    #[arg(long, short)]
    pub follow: bool,
    /// Print one JSON document: the turn (task, turn, id, state, outcome, exit code) and its
    /// `stdout` and `stderr` as text (the last 16 MiB of each; with --follow, once it ended).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// TASK (every queued and running turn of it), or one turn: ID (its short id), TASK:N,
    /// TASK:last or `last`.
    #[arg(value_name = "TASK|TURN")]
    pub task: String,
    /// Cancel only this turn of the task.
    #[arg(long)]
    pub turn: Option<u32>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum WorkerCommand {
    /// Take over a reserved slot and run one turn (spawned by tollgate, detached).
    Runner {
        task: String,
        turn: u32,
        #[arg(long, value_name = "UUID")]
        slot_token: String,
        /// A pipe's write end from the `submit --wait` that started this runner: closed once the
        /// turn's outcome is committed, so the waiter wakes then.
        #[arg(long, value_name = "FD")]
        settle_fd: Option<i32>,
        /// Make the turn's folder and append this runner's stdout and stderr to its `runner.log`
        /// before anything else (how a detached runner is started; by hand, output stays where
        /// it is and nothing is made before the token is checked).
        #[arg(long)]
        log_to_turn_folder: bool,
    },
    /// Sleep until the given wall-clock time (ms since the epoch), then reconcile: how a debounced
    /// turn starts when its quiet period ends.
    Wake {
        #[arg(long, value_name = "MILLIS")]
        at: u64,
    },
    /// A fleet runner's guard: kills the runner's work when the runner dies (spec/fleet.md).
    Guard {
        #[arg(long, value_name = "MILLIS")]
        grace_millis: u64,
    },
}

/// Prints a clap error (or `--help`/`--version`), with a hint for the most common slip: a command
/// given to `submit` without the `--` that separates it from tollgate's own options. `args` are
/// this process's arguments as given: any bytes (a non-UTF-8 one is what clap may have refused).
fn usage_error(error: clap::Error, args: &[std::ffi::OsString]) -> i32 {
    use clap::error::ErrorKind;
    let code = if error.use_stderr() {
        exit::USAGE
    } else {
        exit::OK
    };
    let _ = error.print();
    let args: Vec<String> = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if let Some(hint) = missing_separator_hint(error.kind(), &args) {
        eprintln!("\n{hint}");
    }
    debug_assert!(
        matches!(
            error.kind(),
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
        ) || code == exit::USAGE
    );
    code
}

/// A usage error's "Usage:" line names every argument clap saw given, and a home taken from
/// `TOLLGATE_HOME` counts as given: `Usage: tollgate submit --home <DIR> -- <CMD>...` reads as
/// if `--home` were required. The same command line parsed again without the variable fails the
/// same way (the home is optional and only fills in a value), with the usage as the user typed it.
fn without_env_home(error: clap::Error) -> clap::Error {
    use clap::CommandFactory;
    if !error.use_stderr() || std::env::var_os("TOLLGATE_HOME").is_none() {
        return error;
    }
    Cli::command()
        .mut_arg("home", |arg| arg.env(None))
        .try_get_matches()
        .err()
        .filter(|again| again.kind() == error.kind())
        .unwrap_or(error)
}

/// `tollgate submit echo hi` fails with "unexpected argument 'echo'": say where the `--` goes.
pub fn missing_separator_hint(kind: clap::error::ErrorKind, args: &[String]) -> Option<String> {
    use clap::error::ErrorKind;
    if !matches!(
        kind,
        ErrorKind::UnknownArgument | ErrorKind::MissingRequiredArgument
    ) {
        return None;
    }
    let at = args.iter().position(|a| a == "submit")?;
    if args.iter().any(|a| a == "--") {
        return None;
    }
    let rest = &args[at + 1..];
    // Options of `submit` that take a value in the next argument (`--task NAME`).
    const WITH_VALUE: [&str; 9] = [
        "--task",
        "--strategy",
        "--cwd",
        "--env",
        "--label",
        "--timeout",
        "--delay",
        "--at",
        "--priority",
    ];
    let mut split = rest.len();
    let mut i = 0;
    while i < rest.len() {
        if WITH_VALUE.contains(&rest[i].as_str()) {
            i += 2;
        } else if rest[i].starts_with('-') {
            i += 1;
        } else {
            split = i;
            break;
        }
    }
    let (options, command) = rest.split_at(split);
    let mut example = vec!["tollgate".to_string(), "submit".to_string()];
    example.extend(options.iter().cloned());
    example.push("--".to_string());
    if command.is_empty() {
        example.push("CMD...".to_string());
    } else {
        example.extend(command.iter().cloned());
    }
    Some(format!(
        "hint: the command to run goes after `--`, so tollgate does not read its arguments as its own:\n  {}",
        example.join(" ")
    ))
}

/// The home `explicit` names (or the default). Whether an explicit one exists was checked before
/// the command ran (see [`refuse_missing_home`]).
fn existing_home(explicit: Option<PathBuf>) -> Result<crate::home::Home, CliError> {
    Ok(crate::home::Home::resolve(explicit)?)
}

/// Whether `command` may run on a `--home` that does not exist yet: `init` creates it, the
/// commands that never touch a home do not care, and `run` keeps no turns there (only the list
/// of its own processes, for `sweep`), so it creates the directory as before.
fn may_create_home(command: &Command) -> bool {
    match command {
        Command::Init(_)
        | Command::Completions(_)
        | Command::Man(_)
        | Command::Worker(_)
        | Command::Complete(_)
        | Command::Run(_) => true,
        #[cfg(feature = "model-check")]
        Command::Model(_) => true,
        _ => false,
    }
}

/// A `--home` (or TOLLGATE_HOME) that does not exist is most likely a typo: refuse it (exit 2)
/// with the command that creates it, rather than start an empty home beside the real one. The
/// default home is still created on first use.
fn refuse_missing_home(cli: &Cli, from_env: bool) -> Option<String> {
    let root = cli.home.as_ref()?;
    if cli.create || may_create_home(&cli.command) || root.exists() {
        return None;
    }
    let named = if from_env {
        format!("TOLLGATE_HOME={}", root.display())
    } else {
        format!("--home {}", root.display())
    };
    Some(format!(
        "{named}: no such directory, so no tollgate home is there (a typo?). Create it with \
         `tollgate init --home {}` (or add --create), or point at an existing home",
        root.display()
    ))
}

/// The commands that only read and print: they start, own and change nothing a signal could
/// leave half done.
fn reads_only(command: &Command) -> bool {
    match command {
        Command::Status(_) | Command::Logs(_) | Command::Doctor(_) | Command::Hosts(_) => true,
        Command::Completions(_) | Command::Man(_) | Command::Complete(_) => true,
        #[cfg(feature = "serve")]
        Command::Deliveries(_) => true,
        _ => false,
    }
}

/// A command that only prints ends quietly, as `cat` does, when its reader goes away
/// (`tollgate status --json | head`): Rust's runtime ignores SIGPIPE, so the print into the
/// closed pipe panicked with a backtrace. Every other command keeps it ignored: a runner's write
/// into a dead waiter's pipe must fail with EPIPE, not kill it (src/process/settle.rs).
fn die_of_sigpipe() {
    // SAFETY: signal(2) restoring one signal's default disposition, before any thread is started;
    // no handler of ours is replaced.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Runs the CLI and returns the process exit code.
pub fn main() -> i32 {
    // Failpoints from `FAILPOINTS` for every subcommand (a detached runner included).
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    use clap::{CommandFactory, FromArgMatches};
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match Cli::command()
        .try_get_matches_from(&args)
        .and_then(|m| Cli::from_arg_matches(&m).map(|cli| (cli, m)))
    {
        Ok((cli, matches)) => {
            let from_env =
                matches.value_source("home") == Some(clap::parser::ValueSource::EnvVariable);
            if let Some(refusal) = refuse_missing_home(&cli, from_env) {
                eprintln!("tollgate: {refusal}");
                return exit::USAGE;
            }
            cli
        }
        Err(error) => return usage_error(without_env_home(error), &args),
    };
    if reads_only(&cli.command) {
        die_of_sigpipe();
    }
    #[cfg(feature = "serve")]
    let serves = matches!(cli.command, Command::Serve(_));
    #[cfg(not(feature = "serve"))]
    let serves = false;
    if !serves {
        logging::init("warn");
    }
    let home = cli.home;
    let result = match cli.command {
        Command::Init(args) => init::init(home, args),
        Command::Submit(args) => submit::submit(home, args),
        Command::Status(args) => status::status(home, args),
        Command::Logs(args) => logs::logs(home, args),
        Command::Cancel(args) => cancel::cancel(home, args),
        Command::Pause(args) => sched::pause(home, args),
        Command::Resume(args) => sched::resume(home, args),
        Command::Wait(args) => lifecycle::wait(home, args),
        Command::Restart(args) => lifecycle::restart(home, args),
        Command::Clean(args) => lifecycle::clean(home, args),
        Command::Reconcile(args) => reconcile::reconcile(home, args),
        Command::Doctor(args) => doctor::doctor(home, args),
        Command::Hosts(args) => hosts::hosts(home, args),
        Command::Drain(args) => drain::drain(home, args),
        #[cfg(feature = "serve")]
        Command::Serve(args) => serve::serve(home, args),
        #[cfg(feature = "serve")]
        Command::Deliveries(args) => serve::deliveries(home, args),
        Command::Worker(WorkerCommand::Runner {
            task,
            turn,
            slot_token,
            settle_fd,
            log_to_turn_folder,
        }) => {
            if let Some(fd) = settle_fd {
                crate::process::settle::adopt(fd);
            }
            worker::worker_runner(home, &task, turn, &slot_token, log_to_turn_folder)
        }
        Command::Worker(WorkerCommand::Wake { at }) => worker::worker_wake(home, at),
        Command::Worker(WorkerCommand::Guard { grace_millis }) => {
            Ok(crate::runner::guard::serve(grace_millis))
        }
        Command::Run(args) => Ok(run::run(args, home.as_deref())),
        Command::Config(args) => config::config(home, args),
        Command::Completions(args) => Ok(docs::completions(args)),
        Command::Complete(args) => Ok(complete::complete(home, args)),
        Command::Man(args) => Ok(docs::man(args)),
        Command::Sweep(args) => Ok(sweep::run(args, home.as_deref())),
        #[cfg(feature = "model-check")]
        Command::Model(args) => Ok(model::run(args)),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("tollgate: {error}");
            error.exit_code()
        }
    }
}
