//! Ending a turn that never ran and has no row (a foreground submit interrupted while it waited
//! outside the queue): its record gets the outcome. A turn with a row is refused: its row's
//! holders decide its end.

use crate::records::TurnOutcome;
use crate::section::{Commit, Draft, Halt, Section, Step, View};
use crate::slots::steps::{row_reads, Reads};
use crate::slots::{Liveness, QueueState, SlotError, TurnKey};
use crate::turns::end_unrun;

#[derive(Clone, Copy, Debug)]
pub struct EndUnrun<'a> {
    pub key: &'a TurnKey,
    pub outcome: TurnOutcome,
    pub now_millis: u64,
}

impl Section for EndUnrun<'_> {
    type Effect = ();

    fn commit(&self) -> Commit {
        Commit::Promise
    }

    fn reads(&self) -> Reads {
        Reads::Part(row_reads(self.key))
    }

    fn step<L: Liveness>(
        &self,
        part: &mut QueueState,
        view: &View<'_, L>,
    ) -> Result<Step<()>, Halt> {
        if part.row(self.key).is_some() {
            return Err(SlotError::TurnBusy {
                key: self.key.clone(),
            }
            .into());
        }
        let mut draft = Draft::new(view.records);
        end_unrun(&mut draft, self.key, self.outcome, self.now_millis)?;
        Ok(draft.finish(()))
    }
}
