//! `GET /metrics`: the gate's counters and the ingress's own, in Prometheus text format.

use super::events::LogStats;
use crate::gate::GateStats;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::Arc;
use std::fmt::Write;

/// Counters the gate does not keep.
#[derive(Default)]
pub struct Counters {
    pub readopted: AtomicU64,
    pub refused_senders: AtomicU64,
    pub too_large: AtomicU64,
    pub dispatch_errors: AtomicU64,
    pub conn: ConnCounters,
    /// The serve log's own (shared with the log itself).
    pub log: Arc<LogStats>,
}

/// The connection layer's (`conn`): what was accepted, refused, timed out.
#[derive(Default)]
pub struct ConnCounters {
    pub open: AtomicU64,
    pub max: AtomicU64,
    pub accepted: AtomicU64,
    /// Refused at `max_connections` (answered 503, or closed when even that backlog is full).
    pub refused: AtomicU64,
    pub accept_errors: AtomicU64,
    pub idle_timeouts: AtomicU64,
    pub header_timeouts: AtomicU64,
    pub body_timeouts: AtomicU64,
}

impl Counters {
    pub fn for_log(log: Arc<LogStats>) -> Counters {
        Counters {
            log,
            ..Counters::default()
        }
    }

    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

pub fn render(stats: &GateStats, counters: &Counters, max_detached: usize) -> String {
    let mut out = String::new();
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let _ = writeln!(
        out,
        "# HELP tollgate_retained Admitted deferred deliveries retained now.\n\
         # TYPE tollgate_retained gauge\ntollgate_retained {}",
        stats.retained
    );
    let _ = writeln!(
        out,
        "# HELP tollgate_max_detached The cap on retained deferred deliveries.\n\
         # TYPE tollgate_max_detached gauge\ntollgate_max_detached {max_detached}"
    );
    let _ = writeln!(
        out,
        "# HELP tollgate_admitted_total Deliveries admitted and marked.\n\
         # TYPE tollgate_admitted_total counter\ntollgate_admitted_total {}",
        stats.admitted
    );
    let _ = writeln!(
        out,
        "# HELP tollgate_duplicates_total Deliveries answered as duplicates.\n\
         # TYPE tollgate_duplicates_total counter\ntollgate_duplicates_total {}",
        stats.duplicates
    );
    let _ = writeln!(
        out,
        "# HELP tollgate_rejected_total Deliveries refused at the gate, by reason.\n\
         # TYPE tollgate_rejected_total counter"
    );
    for reason in ["at_capacity", "tenant_at_capacity", "shutting_down"] {
        let n = stats.rejected.get(reason).copied().unwrap_or(0);
        let _ = writeln!(out, "tollgate_rejected_total{{reason=\"{reason}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP tollgate_outcomes_total Terminal outcomes of admitted deliveries.\n\
         # TYPE tollgate_outcomes_total counter"
    );
    for (outcome, n) in &stats.outcomes {
        let _ = writeln!(out, "tollgate_outcomes_total{{outcome=\"{outcome}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP tollgate_readopted_total Deliveries re-adopted from a previous instance.\n\
         # TYPE tollgate_readopted_total counter\ntollgate_readopted_total {}",
        load(&counters.readopted)
    );
    let _ = writeln!(
        out,
        "# HELP tollgate_sender_refused_total Requests refused before admission (signature, timestamp, identity).\n\
         # TYPE tollgate_sender_refused_total counter\ntollgate_sender_refused_total {}",
        load(&counters.refused_senders)
    );
    let _ = writeln!(
        out,
        "# HELP tollgate_too_large_total Requests refused for a body over body_limit.\n\
         # TYPE tollgate_too_large_total counter\ntollgate_too_large_total {}",
        load(&counters.too_large)
    );
    let _ = writeln!(
        out,
        "# HELP tollgate_dispatch_errors_total Admitted deliveries whose turn could not be created (withdrawn, answered 503).\n\
         # TYPE tollgate_dispatch_errors_total counter\ntollgate_dispatch_errors_total {}",
        load(&counters.dispatch_errors)
    );
    let conn = &counters.conn;
    let _ = writeln!(
        out,
        "# HELP tollgate_connections_open Client connections open now.\n\
         # TYPE tollgate_connections_open gauge\ntollgate_connections_open {}",
        load(&conn.open)
    );
    let _ = writeln!(
        out,
        "# HELP tollgate_max_connections The cap on open client connections.\n\
         # TYPE tollgate_max_connections gauge\ntollgate_max_connections {}",
        load(&conn.max)
    );
    let _ = writeln!(
        out,
        "# HELP tollgate_connections_total Client connections accepted and served.\n\
         # TYPE tollgate_connections_total counter\ntollgate_connections_total {}",
        load(&conn.accepted)
    );
    let _ = writeln!(
        out,
        "# HELP tollgate_connections_refused_total Connections refused at max_connections.\n\
         # TYPE tollgate_connections_refused_total counter\ntollgate_connections_refused_total {}",
        load(&conn.refused)
    );
    let _ = writeln!(
        out,
        "# HELP tollgate_accept_errors_total Failed accepts (e.g. EMFILE), each followed by a brief back-off.\n\
         # TYPE tollgate_accept_errors_total counter\ntollgate_accept_errors_total {}",
        load(&conn.accept_errors)
    );
    let _ = writeln!(
        out,
        "# HELP tollgate_connections_timed_out_total Connections closed by a timeout, by phase.\n\
         # TYPE tollgate_connections_timed_out_total counter"
    );
    for (phase, counter) in [
        ("idle", &conn.idle_timeouts),
        ("header", &conn.header_timeouts),
        ("body", &conn.body_timeouts),
    ] {
        let _ = writeln!(
            out,
            "tollgate_connections_timed_out_total{{phase=\"{phase}\"}} {}",
            load(counter)
        );
    }
    let log = &counters.log;
    let _ = writeln!(
        out,
        "# HELP tollgate_log_lines_total Lines written to serve.log.jsonl.\n\
         # TYPE tollgate_log_lines_total counter\ntollgate_log_lines_total {}",
        load(&log.lines)
    );
    let _ = writeln!(
        out,
        "# HELP tollgate_log_lines_suppressed_total Decisions that admitted nothing and were counted into another line instead of written.\n\
         # TYPE tollgate_log_lines_suppressed_total counter\ntollgate_log_lines_suppressed_total {}",
        load(&log.suppressed)
    );
    let _ = writeln!(
        out,
        "# HELP tollgate_log_rotations_total Rotations of serve.log.jsonl at log_max_bytes.\n\
         # TYPE tollgate_log_rotations_total counter\ntollgate_log_rotations_total {}",
        load(&log.rotations)
    );
    let _ = writeln!(
        out,
        "# HELP tollgate_log_write_errors_total Lines that could not be written (disk full, …).\n\
         # TYPE tollgate_log_write_errors_total counter\ntollgate_log_write_errors_total {}",
        load(&log.write_errors)
    );
    out
}
