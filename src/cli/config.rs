//! `tollgate config`: the effective configuration of a home, one key of it, or a change to one key
//! that keeps the file's comments (see [`crate::config::edit`]).

use super::{exit, CliError};
use crate::config::edit;
use crate::config::Config;
use crate::home::Home;
use serde_json::{json, Value};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "KEY is dotted: workers, lock_timeout, serve.max_detached, \
serve.listen, … (`tollgate config show` lists every key with its value; `# default` marks the \
ones the file does not set). Routes (`[[route]]`) are shown, and edited in the file itself.

Examples:
  tollgate config                          every key and its value
  tollgate config get workers
  tollgate config set workers 8            keeps the file's comments; refused if invalid
  tollgate config set serve.drain_timeout 30s"
)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub action: Option<ConfigAction>,
    /// Print JSON.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, clap::Subcommand)]
pub enum ConfigAction {
    /// Print every key with its effective value (the default).
    Show,
    /// Print one key's effective value.
    Get {
        #[arg(value_name = "KEY")]
        key: String,
    },
    /// Set one key in tollgate.toml; the result must load, else nothing changes (exit 2).
    Set {
        #[arg(value_name = "KEY")]
        key: String,
        #[arg(value_name = "VALUE", allow_hyphen_values = true)]
        value: String,
    },
}

fn print_json(value: &Value) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::Environment(format!("cannot render JSON: {e}")))?;
    println!("{text}");
    Ok(())
}

/// A JSON value as a config file writes it (`8`, `"10s"`).
fn as_toml(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "(unset)".to_string(),
        other => other.to_string(),
    }
}

pub fn config(home: Option<PathBuf>, args: ConfigArgs) -> Result<i32, CliError> {
    let home = super::existing_home(home)?;
    let path = home.config_path();
    match args.action.unwrap_or(ConfigAction::Show) {
        ConfigAction::Show => show(&home, args.json),
        ConfigAction::Get { key } => {
            let config = Config::load(&path)?.unwrap_or_default();
            let effective = edit::effective(&config);
            let value = edit::lookup(&effective, &key).ok_or_else(|| {
                CliError::Usage(format!(
                    "config get {key}: no such key (`tollgate config show` lists them)"
                ))
            })?;
            if args.json {
                print_json(&json!({ "key": key, "value": value }))?;
            } else {
                match value {
                    Value::String(s) => println!("{s}"),
                    other => println!("{other}"),
                }
            }
            Ok(exit::OK)
        }
        ConfigAction::Set { key, value } => {
            let config = edit::set_key(&path, &key, &value).map_err(|e| {
                CliError::Usage(format!(
                    "config set {key}: refused, {} is unchanged: {e}",
                    path.display()
                ))
            })?;
            let effective = edit::effective(&config);
            let now = edit::lookup(&effective, &key)
                .cloned()
                .unwrap_or(Value::Null);
            if args.json {
                print_json(&json!({ "key": key, "value": now, "config": path }))?;
            } else {
                println!("{key} = {} (in {})", as_toml(&now), path.display());
            }
            Ok(exit::OK)
        }
    }
}

fn show(home: &Home, json: bool) -> Result<i32, CliError> {
    let path = home.config_path();
    let config = Config::load(&path)?;
    let exists = config.is_some();
    let config = config.unwrap_or_default();
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let effective = edit::effective(&config);
    let leaves = edit::leaves(&effective);
    let defaults: Vec<&str> = leaves
        .iter()
        .filter(|(key, _)| !edit::is_set_in(&text, key))
        .map(|(key, _)| key.as_str())
        .collect();
    if json {
        print_json(&json!({
            "config": path, "exists": exists, "effective": effective, "defaults": defaults,
        }))?;
        return Ok(exit::OK);
    }
    println!(
        "# {}{}",
        path.display(),
        if exists {
            ""
        } else {
            " (absent: all defaults)"
        }
    );
    for (key, value) in &leaves {
        let mark = if defaults.contains(&key.as_str()) {
            "  # default"
        } else {
            ""
        };
        println!("{key} = {}{mark}", as_toml(value));
    }
    Ok(exit::OK)
}
