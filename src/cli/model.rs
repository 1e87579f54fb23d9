//! `tollgate model`: the reviewer's entry points to the stateright models (feature `model-check`).
//!
//! `check` explores every interleaving of one configuration and prints either "all properties
//! hold" or, per broken invariant, the numbered counterexample trail with the queue rows after each
//! step. `explore` serves stateright's Explorer so a reviewer can walk the state space by hand.

use crate::cli::exit;
use crate::model::slots::{names, render_trail, SlotConfig, SlotModel};
use clap::{Args, Subcommand, ValueEnum};
use stateright::{Checker, Expectation, Model};
use std::net::{SocketAddr, TcpListener};
use std::time::Instant;

#[derive(Debug, Args)]
pub struct ModelArgs {
    #[command(subcommand)]
    pub command: ModelCommand,
}

#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Exhaustively check a model and print the states explored, the time, and either "all
    /// properties hold" or a numbered counterexample trail per broken invariant.
    Check(CheckArgs),
    /// Serve the stateright Explorer for a model (an interactive web UI) until interrupted.
    Explore(ExploreArgs),
}

/// The models that can be checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModelName {
    /// The runner slot protocol (spec/slots.md, invariants S1-S9).
    Slots,
}

/// The size of a slot model instance.
#[derive(Debug, Args)]
pub struct SizeArgs {
    /// Submitting processes.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=4))]
    pub submitters: u8,
    /// Turns each submitter submits.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=4))]
    pub turns: u32,
    /// Worker slots.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=4))]
    pub cap: u8,
    /// No process crashes, no spawn faults and no pid reuse.
    #[arg(long)]
    pub no_crashes: bool,
}

impl SizeArgs {
    fn config(&self) -> SlotConfig {
        let cfg = SlotConfig::new(
            usize::from(self.submitters),
            self.turns,
            usize::from(self.cap),
        );
        if self.no_crashes {
            cfg.without_faults()
        } else {
            cfg
        }
    }
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The model to check.
    #[arg(value_enum)]
    pub model: ModelName,
    #[command(flatten)]
    pub size: SizeArgs,
    /// Checker threads.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub threads: u16,
}

#[derive(Debug, Args)]
pub struct ExploreArgs {
    /// The model to explore.
    #[arg(value_enum)]
    pub model: ModelName,
    #[command(flatten)]
    pub size: SizeArgs,
    /// Address the Explorer listens on.
    #[arg(long, default_value = "127.0.0.1:3000", value_name = "ADDR")]
    pub listen: SocketAddr,
}

/// Runs `tollgate model …` and returns the exit code.
pub fn run(args: ModelArgs) -> i32 {
    match args.command {
        ModelCommand::Check(check) => run_check(check),
        ModelCommand::Explore(explore) => run_explore(explore),
    }
}

fn run_check(args: CheckArgs) -> i32 {
    let ModelName::Slots = args.model;
    let cfg = args.size.config();
    let faults = cfg.crash_budget > 0;
    println!("checking the slot model: {cfg}");
    let started = Instant::now();
    let checker = SlotModel::new(cfg)
        .checker()
        .threads(usize::from(args.threads))
        .spawn_dfs()
        .join();
    let elapsed = started.elapsed();
    println!(
        "states explored: {} unique ({} generated), max depth {}, in {:.2?}",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        elapsed
    );
    let mut broken = 0;
    let mut missing = Vec::new();
    for property in checker.model().properties() {
        let found = checker.discovery(property.name);
        match (property.expectation, found) {
            (Expectation::Sometimes, None) => {
                if faults || !names::NEED_FAULTS.contains(&property.name) {
                    missing.push(property.name);
                }
            }
            (Expectation::Sometimes, Some(_)) => {}
            (_, Some(path)) => {
                broken += 1;
                println!("\ncounterexample for \"{}\":", property.name);
                for line in render_trail(path.into_vec()) {
                    println!("{line}");
                }
            }
            (_, None) => {}
        }
    }
    if broken > 0 {
        println!(
            "\n{broken} propert{} broken",
            if broken == 1 { "y" } else { "ies" }
        );
        return exit::FAILED;
    }
    if !missing.is_empty() {
        println!(
            "safety properties hold, but no example was reached for: {}",
            missing.join(", ")
        );
        return exit::FAILED;
    }
    println!("all properties hold");
    exit::OK
}

fn run_explore(args: ExploreArgs) -> i32 {
    let ModelName::Slots = args.model;
    // stateright's server panics when it cannot bind; bind once first to report that plainly.
    if let Err(error) = TcpListener::bind(args.listen).map(drop) {
        eprintln!("error: cannot listen on {}: {error}", args.listen);
        return exit::ENVIRONMENT;
    }
    let cfg = args.size.config();
    println!(
        "serving the stateright Explorer for the slot model ({cfg}) on http://{}/",
        args.listen
    );
    // Blocks serving requests until the process is interrupted.
    SlotModel::new(cfg).checker().serve(args.listen);
    exit::OK
}
