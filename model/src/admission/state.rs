//! The model's state: what serve answered each delivery, the admissions of every serve's ledger,
//! the turns and the real queue, a live serve's memory (lost when it crashes), and the actions
//! that change them. Plain data the sections, the properties and the trails all read.

use tollgate_core::admission::{
    Admission, Deadline, DeliveryId, Ledger, MarkWrite, Outcome, RejectReason, Settled, StoredMark,
    TurnEnd,
};
use tollgate_core::slots::steps::Handoff;
use tollgate_core::slots::QueueState;

/// What serve answered one delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    Rejected(RejectReason),
    /// Admitted as hold `hold` (acknowledged once `acked`; a crash before that answers nothing).
    Accepted {
        hold: u8,
    },
    Duplicate,
    /// Its identity's first delivery was not durable yet: "retry later", not acknowledged.
    InFlight,
    /// Admitted, but its turn could not be created: withdrawn and answered 503.
    Withdrawn,
}

/// The model's record of one delivery (one arrival of an event).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Attempt {
    pub event: u8,
    pub answer: Answer,
    /// The platform was told the delivery was handled (an ack, or the duplicate answer).
    pub acked: bool,
    /// This delivery's call set the event identity's mark (it was unmarked before).
    pub marked: bool,
    /// The terminal outcome answered for a refused delivery.
    pub outcome: Option<Outcome>,
}

/// One admission in some serve's ledger (a first admission, or a re-adoption after a start).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Hold {
    /// Which serve start admitted it (ids are per ledger).
    pub start: u8,
    pub id: DeliveryId,
    /// The delivery that was admitted (none for a re-adoption).
    pub attempt: Option<u8>,
    pub turn: Option<u8>,
    pub outcome: Option<Outcome>,
    /// Successful settles of this id.
    pub releases: u8,
    /// Settles of this id the core refused (already released).
    pub refused_settles: u8,
    /// Its serve crashed while it was held: it ended with its ledger, the turn lives on.
    pub lost_in_crash: bool,
}

/// A turn's queue row as the properties see it, read from the model's [`QueueState`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Row {
    /// Reserved by serve start `by`, its runner not started.
    Reserved { by: u8 },
    /// Parked (a waiter, or in the scope's line): a finishing runner or the waker starts it.
    Waiting,
    /// Its runner runs the turn's work.
    Running,
    /// Dispatching but neither reserved by a serve nor run by a recorded runner (a handoff
    /// between its publishes; never left so by a model action).
    Starting,
    /// Not in the queue (ended, or never enqueued).
    Gone,
}

/// A delivery's durable turn: its record and row.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Turn {
    pub event: u8,
    pub end: Option<TurnEnd>,
    /// Its work started.
    pub ran: bool,
}

/// One admitted delivery in serve's accept sequence, not yet acknowledged.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InFlight {
    pub attempt: u8,
    pub hold: u8,
    pub id: DeliveryId,
    /// The model clock at its arrival: the group commit's mark step judges it then.
    pub arrived_at_millis: u64,
    /// Set by the submit.
    pub turn: Option<u8>,
    /// The submit's reservation, for serve's driver to perform (lost if serve crashes first).
    pub handoff: Option<Handoff>,
}

/// One delivery the watcher watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Watching {
    pub hold: u8,
    pub id: DeliveryId,
    pub turn: u8,
    pub deadline: Deadline,
}

/// A live serve's memory: lost when it crashes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServeMem {
    pub admission: Admission,
    pub inflight: Vec<InFlight>,
    pub watched: Vec<Watching>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Open,
    /// `begin_shutdown` ran; the drain has not.
    ShuttingDown,
    /// Serve is not running (it crashed, or exited after its hand-off).
    Down,
}

/// Things that happened along the path, for the `sometimes` properties that a state's records
/// cannot show.
pub mod event {
    pub const DEBOUNCE_START: u8 = 1;
    pub const LINE_START: u8 = 2;
    pub const RECOVERED: u8 = 4;
    pub const TIMED_OUT_CANCEL: u8 = 8;
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AdmissionState {
    pub serve: Option<ServeMem>,
    pub phase: Phase,
    /// How many serves have started (the first is start 1).
    pub starts: u8,
    pub turns: Vec<Turn>,
    /// The queue (`queue.json`): scope `i`'s turns are the rows of task `s<i>`, turn `t` is
    /// [`key_of`]`(t)`; every change to it is a core step.
    pub queue: QueueState,
    /// The next fresh slot token is `token_from_counter(next_token)`.
    pub next_token: u32,
    /// The durable mark table (`serve_dedupe`): the marks the group commit's mark step
    /// ([`TableMarks::mark`](tollgate_core::admission::TableMarks::mark)) returned, each written
    /// in the transaction of its delivery's turn; sorted by identity (the table has no order).
    pub marks: Vec<MarkWrite>,
    /// Turns listed in the hand-off file.
    pub handed_off: Vec<u8>,
    pub now: u64,
    pub attempts: Vec<Attempt>,
    pub holds: Vec<Hold>,
    pub events: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AdmissionAction {
    Deliver { event: u8 },
    Submit { attempt: u8 },
    SubmitFails { attempt: u8 },
    Spawn { attempt: u8 },
    Ack { attempt: u8 },
    Watch { hold: u8 },
    Timeout { hold: u8 },
    Finish { turn: u8 },
    Tick,
    Shutdown,
    Drain,
    Crash,
    Restart,
}

/// The mark table's rows as the store reads them for the group commit's mark step.
pub(super) fn stored_marks(st: &AdmissionState) -> impl Iterator<Item = StoredMark> + '_ {
    st.marks.iter().map(|m| StoredMark {
        identity: m.identity.clone(),
        expires_at_millis: m.expires_at_millis,
    })
}

/// The ledger of the serve that runs now (none while serve is down).
pub(super) fn current_ledger(st: &AdmissionState) -> Option<&Ledger> {
    st.serve.as_ref().map(|s| &s.admission.ledger)
}

/// Counts a settle's effect on hold `hold` (a refused settle is counted too: serve asked to
/// release twice).
pub(super) fn count_release(st: &mut AdmissionState, hold: u8, settled: Settled) {
    let h = &mut st.holds[hold as usize];
    match settled {
        Settled::Released { .. } => h.releases += 1,
        Settled::AlreadyEnded => h.refused_settles += 1,
    }
}

/// Performs a settle's effect: the outcome recorded with the release.
pub(super) fn record_settle(st: &mut AdmissionState, hold: u8, settled: Settled, outcome: Outcome) {
    count_release(st, hold, settled);
    if let Settled::Released { .. } = settled {
        st.holds[hold as usize].outcome = Some(outcome);
    }
}
