//! `tollgate drain HOST` and `tollgate drain --undo HOST` (`--json`): a drained host starts no new
//! turn, and its running turns finish (spec/fleet.md, "Draining a host"). The state is a row of
//! the fleet's `drained_hosts` table, written in one transaction under the lease lock that every
//! queue section takes, so each section either saw the drain or ran before it.

use super::CliError;
use crate::home::Home;
use crate::protocol::fleet::HostId;
use crate::queue::Store;
use clap::Args;
use serde_json::json;
use std::path::PathBuf;

/// The version of `drain --json`'s shape: fields are only ever added within one version.
pub const DRAIN_JSON_VERSION: u32 = 1;

#[derive(Debug, Args)]
pub struct DrainArgs {
    /// The host to drain (its `host` setting or derived name, as `tollgate hosts` lists it).
    pub host: String,
    /// Undrain: the host starts turns again (its queued ones start at its next section).
    #[arg(long)]
    pub undo: bool,
    /// Print JSON (`{"version": 1, "host", "drained", "changed", "leases", "now_db_millis"}`).
    #[arg(long)]
    pub json: bool,
}

pub fn drain(home: Option<PathBuf>, args: DrainArgs) -> Result<i32, CliError> {
    let host = HostId::new(args.host.as_str())
        .map_err(|e| CliError::Usage(format!("drain: argument HOST: {e}")))?;
    let home = Home::resolve(home)?;
    let config = home.ensure()?;
    let store = crate::runtime::store_for(&home, &config);
    let Some(fleet_store) = store.lease_renewer() else {
        return Err(CliError::Usage(format!(
            "{}: `store` is not a postgres:// URL: draining a host exists only on a fleet's \
             PostgreSQL store (spec/fleet.md); nothing was changed",
            home.config_path().display()
        )));
    };
    let change = fleet_store.set_drained(&host, !args.undo)?;
    let drained = !args.undo;
    if args.json {
        let text = serde_json::to_string(&json!({
            "version": DRAIN_JSON_VERSION,
            "host": host.as_str(),
            "drained": drained,
            "changed": change.changed,
            "leases": change.leases,
            "now_db_millis": change.now_db_millis,
        }))
        .map_err(|e| CliError::Environment(format!("cannot render the drain: {e}")))?;
        println!("{text}");
        return Ok(0);
    }
    let what = match (drained, change.changed) {
        (true, true) => {
            "drained: it starts no new turn; its running turns finish, \
                         and other hosts start the turns it queues"
        }
        (true, false) => "was drained already",
        (false, true) => "undrained: it starts turns again",
        (false, false) => "was not drained",
    };
    println!("host {host} {what}");
    if change.leases == 0 {
        println!("(no such host holds a lease now: nothing of it runs on this fleet)");
    }
    Ok(0)
}
