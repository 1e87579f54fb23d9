//! stateright models over the production core (`core/src/`). Compiled only with the
//! `model-check` feature. Each model calls the same functions production runs; a change of a core
//! signature breaks this build, which is the drift guard.

pub mod admission;
pub mod execution;
pub mod fleet;
pub mod fleet_dedupe;
pub mod reduction;
pub mod slots;

/// Records one line of a model check (configuration, unique states, time) on stderr and in
/// `target/model-report.txt`, which `.ci/run` prints after the tests: the test harness captures
/// the output of passing tests, and a reviewer wants the state counts of every run.
pub fn report(line: &str) {
    use std::io::Write;
    eprintln!("{line}");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/model-report.txt");
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(file, "{line}");
    }
}
