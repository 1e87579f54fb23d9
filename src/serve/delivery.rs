//! One admitted delivery as a connection hands it to the group commit ([`Pending`]), what the
//! commit made of it ([`Committed`]), the bounded queue between them, and the identities a
//! delivery is deduplicated on. Apart from the commit itself ([`super::accept`]) so that the
//! request handler and the committer each import it, not each other.

use super::settings::Route;
use crate::group_commit::{self, Committer, Worker};
use crate::protocol::admission::EventIdentity;
use crate::submit::{Decided, SubmitRequest};
use crate::tasks::DeliveryMeta;
use serde_json::json;

/// The most deliveries waiting for a batch (beyond it a handler waits `lock_timeout` for room,
/// then answers 503): as many as the blocking pool can have waiting.
pub const MAX_WAITING: usize = 256;
/// The most deliveries in one transaction.
pub const MAX_BATCH: usize = 64;

/// The event identity the gate deduplicates on: route, adapter, installation and the sender's
/// identity, as a JSON array of four strings (unambiguous whatever the parts contain).
pub fn dedupe_key(route: &str, adapter: &str, installation: &str, identity: &str) -> EventIdentity {
    EventIdentity(json!([route, adapter, installation, identity]).to_string())
}

/// The key the previous format used, `adapter/installation/identity` (ambiguous, route-blind):
/// still honoured for the marks an older instance left in the dedupe log.
pub fn legacy_dedupe_key(adapter: &str, installation: &str, identity: &str) -> String {
    format!("{adapter}/{installation}/{identity}")
}

/// The legacy key of a delivery, as the identity the core's dedupe rule honours.
pub fn legacy_identity(meta: &DeliveryMeta) -> EventIdentity {
    EventIdentity(legacy_dedupe_key(
        &meta.adapter,
        &meta.tenant,
        &meta.identity,
    ))
}

/// The key a turn's delivery record was deduplicated on (records written before routes were
/// recorded give the legacy key).
pub fn dedupe_key_of(meta: &DeliveryMeta) -> EventIdentity {
    if meta.route.is_empty() {
        legacy_identity(meta)
    } else {
        dedupe_key(&meta.route, &meta.adapter, &meta.tenant, &meta.identity)
    }
}

/// One admitted delivery, ready to be made a durable turn: everything that does not need the
/// queue was prepared by the connection's thread ([`Pending::new`]).
pub struct Pending {
    pub meta: DeliveryMeta,
    /// The turn to submit (its task named, its environment complete).
    pub request: SubmitRequest,
    pub body: Vec<u8>,
    /// The gate's dedupe key.
    pub identity: EventIdentity,
    /// The key an older version marked the same event under (honoured, never written).
    pub legacy: EventIdentity,
    pub now_millis: u64,
}

impl Pending {
    /// The delivery of `route` with the turn's environment `env` (serve's, without secrets, plus
    /// the route's and the delivery's), run in the route's folder or `cwd`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        route: &Route,
        cwd: &std::path::Path,
        meta: DeliveryMeta,
        scope: Option<&str>,
        env: crate::argv::Env,
        body: Vec<u8>,
        identity: EventIdentity,
        now_millis: u64,
    ) -> Self {
        let request = SubmitRequest {
            task: Some(route.table.task_for(scope)),
            strategy: route.table.strategy(),
            argv: route.table.run.iter().map(Into::into).collect(),
            cwd: Some(route.cwd.clone().unwrap_or_else(|| cwd.to_path_buf())),
            env,
            labels: Vec::new(),
            timeout_millis: None,
            schedule: Default::default(),
            delivery: Some(meta.clone()),
        };
        Pending {
            legacy: legacy_identity(&meta),
            meta,
            request,
            body,
            identity,
            now_millis,
        }
    }
}

/// What the batch made of one delivery.
pub enum Committed {
    /// Durable: its turn is queued (or ended, for a dropped one); the decision's effect is
    /// performed after the answer.
    Queued(Box<Decided>),
    /// A live mark of its identity (or legacy identity) was in the database: nothing was queued.
    Duplicate,
    /// Not made durable (rolled back): nothing was acknowledged.
    Failed(String),
}

pub type AcceptQueue = Committer<Pending, Committed>;

/// The queue and its worker: [`super::accept::run_worker`] on a thread of its own.
pub fn channel() -> (AcceptQueue, Worker<Pending, Committed>) {
    group_commit::channel(MAX_WAITING, MAX_BATCH)
}
