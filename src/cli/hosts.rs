//! `tollgate hosts [--json]`: the hosts of a fleet (a PostgreSQL home) as the lease table shows
//! them, every time on the database clock, with the drained ones (`tollgate drain`; spec/fleet.md,
//! "Operations"). It changes nothing.

use super::CliError;
use crate::home::Home;
use crate::protocol::fleet::{HostId, LeaseTable};
use crate::queue::{DrainedHost, LeaseSnapshot, Store};
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The version of `hosts --json`'s shape: fields are only ever added within one version.
pub const HOSTS_JSON_VERSION: u32 = 1;

#[derive(Debug, Args)]
pub struct HostsArgs {
    /// Print JSON (`{"version": 1, "this_host", "now_db_millis", "hosts": [...], "drained":
    /// [...]}`).
    #[arg(long)]
    pub json: bool,
}

/// What `hosts` shows: one entry per host that holds a lease.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct HostsView {
    pub version: u32,
    pub this_host: String,
    pub now_db_millis: u64,
    pub hosts: Vec<HostView>,
    /// Every drained host (`tollgate drain`), with or without leases.
    pub drained: Vec<DrainedView>,
}

#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct DrainedView {
    pub host: String,
    /// The database clock when it was drained.
    pub drained_at_db_millis: u64,
}

#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct HostView {
    pub host: String,
    /// Executors (runners, attached submitters) whose lease has not expired: live for every
    /// other host.
    pub live_executors: usize,
    /// Leases past their expiry not swept yet (the next queue section of any host sweeps them).
    pub expired_leases: usize,
    /// Milliseconds of the database clock until the host's newest lease expires (negative: it
    /// expired that long ago). Exact: both numbers are the database's.
    pub expires_in_millis: i64,
    /// Milliseconds of the database clock since the host's newest renewal, taken as its newest
    /// expiry minus the lease duration of *this* command (exact when the fleet shares the lease
    /// numbers, as it should). A healthy host stays under its renew interval.
    pub lease_age_millis: i64,
    /// The host is drained: it starts no turn; its running ones finish.
    pub drained: bool,
}

/// The view of `leases` read at `now_db_millis`, seen from `this_host`, with this command's lease
/// duration for the age.
pub fn hosts_view(
    snapshot: &LeaseSnapshot,
    this_host: &HostId,
    lease_duration_millis: u64,
    drained: &[DrainedHost],
) -> HostsView {
    let now = snapshot.now_db_millis;
    let mut by_host: BTreeMap<&str, (usize, usize, u64)> = BTreeMap::new();
    let LeaseTable { leases } = &snapshot.table;
    for lease in leases {
        let entry = by_host.entry(lease.holder.host.as_str()).or_default();
        if lease.is_expired(now) {
            entry.1 += 1;
        } else {
            entry.0 += 1;
        }
        entry.2 = entry.2.max(lease.expires_at_db_millis);
    }
    let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let hosts = by_host
        .into_iter()
        .map(|(host, (live, expired, newest))| HostView {
            host: host.to_string(),
            live_executors: live,
            expired_leases: expired,
            expires_in_millis: signed(newest) - signed(now),
            lease_age_millis: signed(now) - (signed(newest) - signed(lease_duration_millis)),
            drained: drained.iter().any(|d| d.host == host),
        })
        .collect();
    HostsView {
        version: HOSTS_JSON_VERSION,
        this_host: this_host.to_string(),
        now_db_millis: now,
        hosts,
        drained: drained
            .iter()
            .map(|d| DrainedView {
                host: d.host.clone(),
                drained_at_db_millis: d.drained_at_db_millis,
            })
            .collect(),
    }
}

pub fn hosts(home: Option<PathBuf>, args: HostsArgs) -> Result<i32, CliError> {
    let home = Home::resolve(home)?;
    let config = home.ensure()?;
    let store = crate::runtime::store_for(&home, &config);
    let Some(fleet_store) = store.lease_renewer() else {
        return Err(CliError::Usage(format!(
            "{}: `store` is not a postgres:// URL: hosts and leases exist only on a fleet's \
             PostgreSQL store (spec/fleet.md)",
            home.config_path().display()
        )));
    };
    let Some(fleet) = fleet_store.fleet().cloned() else {
        unreachable!("a lease renewer is a fleet's store");
    };
    let snapshot = fleet_store.leases()?;
    let drained = fleet_store.drained_hosts()?;
    let view = hosts_view(
        &snapshot,
        &fleet.host,
        fleet.timing.lease_duration_millis,
        &drained,
    );
    if args.json {
        let text = serde_json::to_string(&view)
            .map_err(|e| CliError::Environment(format!("cannot render the hosts: {e}")))?;
        println!("{text}");
        return Ok(0);
    }
    println!(
        "{:<40} {:>5} {:>8} {:>10} {:>12}",
        "HOST", "LIVE", "EXPIRED", "AGE", "EXPIRES IN"
    );
    for host in &view.hosts {
        let this = if host.host == view.this_host {
            " (this host)"
        } else {
            ""
        };
        let drained = if host.drained { " drained" } else { "" };
        println!(
            "{:<40} {:>5} {:>8} {:>9}s {:>11}s{this}{drained}",
            host.host,
            host.live_executors,
            host.expired_leases,
            seconds(host.lease_age_millis),
            seconds(host.expires_in_millis),
        );
    }
    if view.hosts.is_empty() {
        println!("(no host holds a lease: nothing runs on this fleet)");
    }
    for d in view
        .drained
        .iter()
        .filter(|d| !view.hosts.iter().any(|h| h.host == d.host))
    {
        let this = if d.host == view.this_host {
            " (this host)"
        } else {
            ""
        };
        println!("{:<40} drained, no lease{this}", d.host);
    }
    Ok(0)
}

fn seconds(millis: i64) -> String {
    format!("{:.1}", millis as f64 / 1_000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::fleet::{FleetIdentity, Lease};
    use crate::protocol::slots::ProcessIdentity;

    fn lease(host: &str, pid: u32, expires: u64) -> Lease {
        Lease {
            holder: FleetIdentity {
                host: HostId::new(host).unwrap(),
                process: ProcessIdentity {
                    pid,
                    start_time_micros: 7,
                },
            },
            expires_at_db_millis: expires,
        }
    }

    #[test]
    fn hosts_are_counted_by_their_unexpired_leases_on_the_database_clock() {
        let snapshot = LeaseSnapshot {
            table: LeaseTable {
                leases: vec![
                    lease("b", 1, 40_000),
                    lease("a", 1, 39_000),
                    lease("a", 2, 35_000),
                    lease("a", 3, 9_000),
                ],
            },
            now_db_millis: 10_000,
        };
        let drained = [
            DrainedHost {
                host: "b".into(),
                drained_at_db_millis: 9_500,
            },
            DrainedHost {
                host: "c".into(),
                drained_at_db_millis: 9_600,
            },
        ];
        let view = hosts_view(&snapshot, &HostId::new("a").unwrap(), 30_000, &drained);
        assert_eq!(view.version, HOSTS_JSON_VERSION);
        assert_eq!(
            view.hosts,
            vec![
                HostView {
                    host: "a".into(),
                    live_executors: 2,
                    expired_leases: 1,
                    expires_in_millis: 29_000,
                    lease_age_millis: 1_000,
                    drained: false,
                },
                HostView {
                    host: "b".into(),
                    live_executors: 1,
                    expired_leases: 0,
                    expires_in_millis: 30_000,
                    lease_age_millis: 0,
                    drained: true,
                },
            ]
        );
        let names: Vec<&str> = view.drained.iter().map(|d| d.host.as_str()).collect();
        assert_eq!(
            names,
            ["b", "c"],
            "a drained host without leases is listed too"
        );
    }
}
