//! `tollgate pause` / `tollgate resume`: the pause set is part of the queue state, so each is
//! one locked section; resume's section is the core's [`steps::resume`], whose handoffs
//! [`crate::driver`] performs like a finishing runner's (spec/slots.md, "Scheduling").

use crate::dispatch::DispatchError;
use crate::driver;
use crate::protocol::slots::order::PauseScope;
use crate::protocol::slots::sections::{PauseSection, ResumeSection};
use crate::protocol::slots::{Liveness, PauseSet, ProcessIdentity, SlotToken, TurnKey};
use crate::queue::Store;
use crate::runtime::Runtime;
use crate::tasks;

pub use crate::protocol::slots::sections::Paused;

/// What a resume did.
#[derive(Debug)]
pub struct Resumed {
    /// False when nothing of the scope was paused.
    pub changed: bool,
    /// The pause set after the section (a task stays held while the home is paused).
    pub paused: PauseSet,
    /// The turns whose runners were started, highest priority first.
    pub started: Vec<TurnKey>,
    /// Starts that did not complete (a spawn failed: the row is parked again).
    pub failed: Vec<(TurnKey, DispatchError)>,
    /// When a waker was started for, if a parked row may only start later (`--delay`/`--at`).
    pub wake_at_millis: Option<u64>,
}

/// Refuses a task the home does not have, before anything changes.
fn known_task<L: Liveness, S: Store>(rt: &Runtime<L, S>, task: &str) -> Result<(), DispatchError> {
    crate::protocol::slots::validate_task_name(task)?;
    if tasks::load_task(&rt.home, task)?.is_none() {
        return Err(DispatchError::UnknownTask {
            task: task.to_string(),
            home: rt.home.root().display().to_string(),
        });
    }
    Ok(())
}

fn scope(task: Option<&str>) -> PauseScope<'_> {
    task.map_or(PauseScope::Home, PauseScope::Task)
}

/// Pauses the home (`task: None`) or one task: parked rows stay parked, running turns go on.
pub fn pause<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    task: Option<&str>,
) -> Result<Paused, DispatchError> {
    if let Some(task) = task {
        known_task(rt, task)?;
    }
    crate::section::run(rt, &PauseSection { scope: scope(task) })
}

/// Resumes the home (and every paused task) or one task, then starts what may start now, up to
/// the free slots, and a waker for the earliest delayed row.
pub fn resume<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    me: ProcessIdentity,
    task: Option<&str>,
) -> Result<Resumed, DispatchError> {
    if let Some(task) = task {
        known_task(rt, task)?;
    }
    let cap = rt.cap();
    let tokens: Vec<SlotToken> = (0..cap).map(|_| rt.spawner.fresh_token()).collect();
    let (effect, paused) = crate::section::run(
        rt,
        &ResumeSection {
            scope: scope(task),
            me,
            fresh_tokens: &tokens,
            now_millis: rt.spawner.now_millis(),
            cap,
        },
    )?;
    let mut started = Vec::new();
    let mut failed = Vec::new();
    for handoff in effect.spawn {
        let key = handoff.key().clone();
        match driver::hand_off(rt, rt.spawner.as_ref(), handoff) {
            Ok(_) => started.push(key),
            Err(e) => failed.push((key, e)),
        }
    }
    if let Some(at_millis) = effect.wake_at_millis {
        driver::start_waker(rt.spawner.as_ref(), at_millis);
    }
    Ok(Resumed {
        changed: effect.changed,
        paused,
        started,
        failed,
        wake_at_millis: effect.wake_at_millis,
    })
}
