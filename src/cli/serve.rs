//! `tollgate serve` and `tollgate deliveries`: the webhook ingress on the command line.

use super::{exit, CliError};
use crate::home::Home;
use crate::serve::{list_refused, ServeError, ServePaths};
use clap::Args;
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Args)]
#[command(
    after_help = "Routes and limits come from tollgate.toml ([serve] and [[route]]; see spec/ingress.md).
On start it prints `listening on http://ADDR` on stdout (with --json, one JSON line). SIGTERM or SIGINT stops admission, drains
for `drain_timeout`, records what is still retained as handed off, and exits 0; the next `serve`
re-adopts those deliveries. A second `serve` on the same home is refused with exit code 3."
)]
pub struct ServeArgs {
    /// Listen on HOST:PORT instead of `[serve] listen` (port 0 picks a free port).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Print the startup line as JSON (`{"listening": URL, "address": ADDR, "pid": PID}`) and
    /// the shutdown summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DeliveriesArgs {
    /// List deliveries refused at the gate by senders that do not retry (github), oldest first.
    #[arg(long, required = true)]
    pub refused: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

impl From<ServeError> for CliError {
    fn from(error: ServeError) -> Self {
        match error {
            ServeError::Config(_) | ServeError::MissingSecret { .. } => {
                CliError::Usage(error.to_string())
            }
            ServeError::File(e) => e.into(),
            ServeError::AlreadyServing { .. } | ServeError::Bind { .. } | ServeError::Io { .. } => {
                CliError::Environment(error.to_string())
            }
        }
    }
}

pub fn serve(home: Option<PathBuf>, args: ServeArgs) -> Result<i32, CliError> {
    super::logging::init("info");
    let home = Home::resolve(home)?;
    let json = args.json;
    let summary = crate::serve::run(home, args.listen, |addr| {
        let mut out = std::io::stdout();
        let _ = if json {
            writeln!(
                out,
                "{}",
                json!({
                    "listening": format!("http://{addr}"), "address": addr.to_string(),
                    "pid": std::process::id(),
                })
            )
        } else {
            writeln!(out, "listening on http://{addr}")
        };
        let _ = out.flush();
    })?;
    if json {
        println!(
            "{}",
            json!({"stopped": true, "readopted": summary.readopted, "handed_off": summary.handed_off})
        );
    } else {
        eprintln!(
            "tollgate serve: stopped ({} re-adopted at start, {} handed off at shutdown)",
            summary.readopted, summary.handed_off
        );
    }
    Ok(exit::OK)
}

pub fn deliveries(home: Option<PathBuf>, args: DeliveriesArgs) -> Result<i32, CliError> {
    let home = Home::resolve(home)?;
    let config = crate::config::Config::load(&home.config_path())?.unwrap_or_default();
    // Building the store registers where the home keeps its records (and serve's tables).
    let _ = crate::runtime::store_for(&home, &config);
    let ttl_millis = config
        .serve
        .clone()
        .unwrap_or_default()
        .dedupe_ttl()
        .as_millis();
    let ttl_millis = u64::try_from(ttl_millis).unwrap_or(u64::MAX);
    // A database home reads the table (importing an earlier version's list first).
    let refused = list_refused(&home, &ServePaths::new(&home), ttl_millis)?;
    if args.json {
        let text = serde_json::to_string_pretty(&json!({ "refused": refused }))
            .map_err(|e| CliError::Environment(format!("cannot render JSON: {e}")))?;
        println!("{text}");
        return Ok(exit::OK);
    }
    if refused.is_empty() {
        println!("no refused deliveries");
    }
    for r in &refused {
        let at = humantime::format_rfc3339_millis(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(r.at_millis),
        );
        println!(
            "{at}  {} {}  tenant {}  delivery {}{}  ({})",
            r.adapter,
            r.route,
            r.tenant,
            r.identity,
            r.event
                .as_deref()
                .map(|e| format!(" event {e}"))
                .unwrap_or_default(),
            r.reason
        );
    }
    Ok(exit::OK)
}
