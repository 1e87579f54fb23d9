//! The command line: clap derive, context-rich errors, documented exit codes.

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[cfg(feature = "model-check")]
pub mod model;

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
}

const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success
  1  the work ran and failed (with --wait: the turn's own non-zero exit code is passed through)
  2  bad usage or bad input (argument, config, state file, unknown task); nothing was changed
  3  environment failure (IO error, queue lock wait timed out, spawn failed)";

#[derive(Debug, Parser)]
#[command(name = "tollgate", version, about, after_help = EXIT_CODES_HELP)]
pub struct Cli {
    /// State directory (config, queue, task logs). Default: $XDG_STATE_HOME/tollgate, else
    /// ~/.local/state/tollgate. Created 0700 on first use.
    #[arg(long, global = true, env = "TOLLGATE_HOME", value_name = "DIR")]
    pub home: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check the protocol models exhaustively, or explore one in a browser (reviewers' tools).
    #[cfg(feature = "model-check")]
    Model(model::ModelArgs),
}

/// Runs the CLI and returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match cli.command {
        #[cfg(feature = "model-check")]
        Command::Model(args) => model::run(args),
    }
}
