//! `tollgate model`: the reviewer's entry points to the stateright models (feature `model-check`).
//!
//! `check` explores every interleaving of one configuration of a model (slots, admission or
//! execution) and prints the states explored, the time, and either "all properties hold" or, per
//! broken invariant, the numbered counterexample trail. `explore` serves stateright's Explorer so a
//! reviewer can walk the state space by hand.

use crate::cli::exit;
use crate::model::admission::{self, AdmissionConfig, AdmissionModel, EventSpec};
use crate::model::execution::{small_model, ExecutionModel, Variant as ExecutionVariant};
use crate::model::slots::{render_trail, SlotConfig, SlotModel, SlotState};
use crate::protocol::admission::Strategy;
use crate::protocol::execution::Lane;
use clap::{Args, Subcommand, ValueEnum};
use stateright::{Checker, Expectation, Model, Representative};
use std::fmt::Debug;
use std::hash::Hash;
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
    /// The runner slot protocol (spec/slots.md, invariants S1-S13).
    Slots,
    /// The admission bound and the strategies (spec/admission.md, invariants A1-A6).
    Admission,
    /// A batch run's deadlines, lanes and worktrees (spec/execution.md, invariants D1-D7).
    Execution,
}

/// The size of a model instance. Each option applies to one model; giving it for another is an
/// error that names it.
#[derive(Debug, Args)]
pub struct SizeArgs {
    /// Slots: submitting processes [default: 2].
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=4))]
    pub submitters: Option<u8>,
    /// Slots: turns each submitter submits [default: 2].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4))]
    pub turns: Option<u32>,
    /// Slots: worker slots [default: 1].
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=4))]
    pub cap: Option<u8>,
    /// Slots: no process crashes, no spawn faults and no pid reuse.
    #[arg(long)]
    pub no_crashes: bool,
    /// Admission: the scope's strategy (`drop`, `queue`, `debounce=<duration>` e.g. `debounce=2ms`, `concurrent=<n>`)
    /// [default: queue].
    #[arg(long, value_name = "STRATEGY")]
    pub strategy: Option<Strategy>,
    /// Admission: `max_detached`, the cap on retained deferred deliveries [default: 2].
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=3))]
    pub max_detached: Option<u8>,
    /// Admission: `max_detached_per_tenant` (0: no ceiling) [default: 1].
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub per_tenant: Option<u8>,
    /// Execution: the lane rows are released in [default: scored].
    #[arg(long, value_enum)]
    pub lane: Option<LaneArg>,
    /// Execution: the run may be interrupted (SIGINT) at any point.
    #[arg(long)]
    pub interrupt: bool,
}

/// `--lane`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LaneArg {
    Scored,
    Playbook,
}

/// One model instance, built from the arguments.
enum Instance {
    Slots(SlotConfig),
    Admission(AdmissionConfig),
    Execution(ExecutionModel, String),
}

impl SizeArgs {
    /// The options given that do not apply to `model`, by their flag names.
    fn foreign_options(&self, model: ModelName) -> Vec<&'static str> {
        let slots = [
            ("--submitters", self.submitters.is_some()),
            ("--turns", self.turns.is_some()),
            ("--cap", self.cap.is_some()),
            ("--no-crashes", self.no_crashes),
        ];
        let admission = [
            ("--strategy", self.strategy.is_some()),
            ("--max-detached", self.max_detached.is_some()),
            ("--per-tenant", self.per_tenant.is_some()),
        ];
        let execution = [
            ("--lane", self.lane.is_some()),
            ("--interrupt", self.interrupt),
        ];
        let mut foreign: Vec<(&'static str, bool)> = Vec::new();
        if model != ModelName::Slots {
            foreign.extend(slots);
        }
        if model != ModelName::Admission {
            foreign.extend(admission);
        }
        if model != ModelName::Execution {
            foreign.extend(execution);
        }
        foreign
            .into_iter()
            .filter(|(_, given)| *given)
            .map(|(flag, _)| flag)
            .collect()
    }

    fn instance(&self, model: ModelName) -> Result<Instance, String> {
        let foreign = self.foreign_options(model);
        if !foreign.is_empty() {
            return Err(format!(
                "{} do{} not apply to the {} model",
                foreign.join(", "),
                if foreign.len() == 1 { "es" } else { "" },
                model
                    .to_possible_value()
                    .map_or_else(|| "?".to_owned(), |v| v.get_name().to_owned())
            ));
        }
        Ok(match model {
            ModelName::Slots => {
                let cfg = SlotConfig::new(
                    usize::from(self.submitters.unwrap_or(2)),
                    self.turns.unwrap_or(2),
                    usize::from(self.cap.unwrap_or(1)),
                );
                Instance::Slots(if self.no_crashes {
                    cfg.without_faults()
                } else {
                    cfg
                })
            }
            ModelName::Admission => Instance::Admission(admission_config(
                self.strategy.unwrap_or(Strategy::Queue),
                usize::from(self.max_detached.unwrap_or(2)),
                usize::from(self.per_tenant.unwrap_or(1)),
            )),
            ModelName::Execution => {
                let lane = match self.lane.unwrap_or(LaneArg::Scored) {
                    LaneArg::Scored => Lane::Scored,
                    LaneArg::Playbook => Lane::Playbook,
                };
                let model = small_model(lane, ExecutionVariant::Production, self.interrupt);
                let label =
                    format!(
                    "3 items (unkillable, normal, ignores TERM), 2 jobs, ceiling {} ms, {lane:?} \
                     lane{}",
                    model.limits.ceiling_millis.unwrap_or(0),
                    if self.interrupt { ", interruptible" } else { "" }
                );
                Instance::Execution(model, label)
            }
        })
    }
}

/// The admission configurations `tests/model_admission.rs` checks: three events over two tenants
/// (`ev0` delivered three times, the others twice; `ev2` shares tenant 0 with `ev0`, so the tenant
/// ceiling bites). Under `queue` a supersession needs three admitted at once, which a queue scope's
/// two deferred deliveries never reach, so the third arrival is a sync delivery there.
fn admission_config(strategy: Strategy, max_detached: usize, per_tenant: usize) -> AdmissionConfig {
    let cfg = AdmissionConfig::new(max_detached, per_tenant, vec![strategy]);
    match strategy {
        Strategy::Queue => cfg
            .event(EventSpec::deferred(0, 0, 2))
            .event(EventSpec::deferred(1, 0, 2))
            .event(EventSpec::deferred(0, 0, 2))
            .event(EventSpec::deferred(0, 0, 1).sync()),
        _ => cfg
            .event(EventSpec::deferred(0, 0, 3))
            .event(EventSpec::deferred(1, 0, 2))
            .event(EventSpec::deferred(0, 0, 2)),
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
    /// Slots: explore every state, without the symmetry reduction (process ids, tokens and
    /// interchangeable submitters renamed), to compare the counts.
    #[arg(long)]
    pub no_symmetry: bool,
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

fn instance_or_usage(size: &SizeArgs, model: ModelName) -> Result<Instance, i32> {
    size.instance(model).map_err(|message| {
        eprintln!("error: {message}");
        exit::USAGE
    })
}

fn run_check(args: CheckArgs) -> i32 {
    let instance = match instance_or_usage(&args.size, args.model) {
        Ok(instance) => instance,
        Err(code) => return code,
    };
    let threads = usize::from(args.threads);
    if args.no_symmetry && args.model != ModelName::Slots {
        eprintln!("error: --no-symmetry applies to the slots model only");
        return exit::USAGE;
    }
    match instance {
        Instance::Slots(cfg) => {
            let symmetry: Option<fn(&SlotState) -> SlotState> =
                (!args.no_symmetry).then_some(Representative::representative);
            println!(
                "checking the slot model: {cfg}{}",
                if args.no_symmetry {
                    ", without symmetry reduction"
                } else {
                    ", with symmetry reduction"
                }
            );
            // The model lists only the examples its configuration can reach; with the reduction
            // they are read from the transitions it generated (its classes leave the event bits
            // out).
            let reached: Option<fn(&SlotModel, &str) -> bool> =
                symmetry.map(|_| SlotModel::example_generated as fn(&SlotModel, &str) -> bool);
            check_model(
                SlotModel::new(cfg),
                threads,
                symmetry,
                reached,
                |_, path| render_trail(path),
            )
        }
        Instance::Admission(cfg) => {
            println!("checking the admission model: {cfg}");
            check_model(
                AdmissionModel::new(cfg),
                threads,
                None,
                None,
                |model, path| {
                    admission::describe(model, &path)
                        .lines()
                        .map(str::to_owned)
                        .collect()
                },
            )
        }
        Instance::Execution(model, label) => {
            println!("checking the execution model: {label}");
            check_model(model, threads, None, None, debug_trail)
        }
    }
}

/// A numbered trail for models without a renderer of their own: each action as the model formats
/// it, and the state after it.
fn debug_trail<M: Model>(model: &M, path: Vec<(M::State, Option<M::Action>)>) -> Vec<String>
where
    M::State: Debug,
    M::Action: Debug,
{
    let mut lines = Vec::new();
    let mut step = 0;
    let mut taken: Option<M::Action> = None;
    for (state, action) in path {
        match taken.take() {
            None => lines.push("  0. initial state".to_string()),
            Some(action) => {
                step += 1;
                lines.push(format!("  {step}. {}", model.format_action(&action)));
            }
        }
        lines.push(format!("       {state:?}"));
        taken = action;
    }
    lines
}

/// A state's representative under a model's symmetries.
type RepresentativeOf<S> = fn(&S) -> S;

/// Checks `model` exhaustively (with `symmetry`, one state per class of its representatives) and
/// prints the shape every `model check` shares: states explored and time, then a counterexample
/// trail per broken `always` property, or the `sometimes` properties without an example (judged
/// by `reached` when given, else by the checker's discoveries), or "all properties hold".
fn check_model<M>(
    model: M,
    threads: usize,
    symmetry: Option<RepresentativeOf<M::State>>,
    reached: Option<fn(&M, &str) -> bool>,
    render: impl Fn(&M, Vec<(M::State, Option<M::Action>)>) -> Vec<String>,
) -> i32
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Eq + Debug + Clone + Send + Sync + 'static,
    M::Action: Eq + Debug + Clone + Send + Sync + 'static,
{
    let started = Instant::now();
    let builder = model.checker().threads(threads);
    let builder = match symmetry {
        Some(representative) => builder.symmetry_fn(representative),
        None => builder,
    };
    let checker = builder.spawn_dfs().join();
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
            (Expectation::Sometimes, found) => {
                let example = match reached {
                    Some(reached) => reached(checker.model(), property.name),
                    None => found.is_some(),
                };
                if !example {
                    missing.push(property.name);
                }
            }
            (_, Some(path)) => {
                broken += 1;
                println!("\ncounterexample for \"{}\":", property.name);
                for line in render(checker.model(), path.into_vec()) {
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
    let instance = match instance_or_usage(&args.size, args.model) {
        Ok(instance) => instance,
        Err(code) => return code,
    };
    // stateright's server panics when it cannot bind; bind once first to report that plainly.
    if let Err(error) = TcpListener::bind(args.listen).map(drop) {
        eprintln!("error: cannot listen on {}: {error}", args.listen);
        return exit::ENVIRONMENT;
    }
    let url = format!("http://{}/", args.listen);
    // Each `serve` blocks serving requests until the process is interrupted.
    match instance {
        Instance::Slots(cfg) => {
            println!("serving the stateright Explorer for the slot model ({cfg}) on {url}");
            SlotModel::new(cfg).checker().serve(args.listen);
        }
        Instance::Admission(cfg) => {
            println!("serving the stateright Explorer for the admission model ({cfg}) on {url}");
            AdmissionModel::new(cfg).checker().serve(args.listen);
        }
        Instance::Execution(model, label) => {
            println!("serving the stateright Explorer for the execution model ({label}) on {url}");
            model.checker().serve(args.listen);
        }
    }
    exit::OK
}
