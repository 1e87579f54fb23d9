//! `GET /metrics`: the gate's counters and the ingress's own, in Prometheus text format.

use crate::gate::GateStats;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters the gate does not keep.
#[derive(Default)]
pub struct Counters {
    pub readopted: AtomicU64,
    pub refused_senders: AtomicU64,
    pub too_large: AtomicU64,
    pub dispatch_errors: AtomicU64,
}

impl Counters {
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
    out
}
