//! What every subcommand's function shares: opening the home, this process's identity, JSON out.

use super::CliError;
use crate::home::Home;
use crate::process::self_identity;
use crate::runtime::Runtime;
use std::io::IsTerminal;
use std::path::PathBuf;

pub(super) fn open(home: Option<PathBuf>) -> Result<Runtime, CliError> {
    Ok(Runtime::open(Home::resolve(home)?)?)
}

pub(super) fn me() -> Result<crate::protocol::slots::ProcessIdentity, CliError> {
    self_identity().map_err(|e| CliError::Environment(e.to_string()))
}

pub(super) fn print_json(value: &serde_json::Value) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::Environment(format!("cannot render JSON: {e}")))?;
    println!("{text}");
    Ok(())
}

/// Whether stderr is a terminal (progress lines are shown only there).
pub(super) fn interactive() -> bool {
    std::io::stderr().is_terminal()
}
