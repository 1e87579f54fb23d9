//! Writing a section's changes: only what differs between the rows the section loaded and what
//! it leaves, by one merge walk in `queue_id` order (a plain `INSERT` for an added row, so a
//! section never replaces a row it did not load).

use super::columns::int;
use crate::protocol::slots::{
    AfterRule, Dependency, PauseSet, QueueEntry, QueueState, RowState, RunnerRecord, WorkRecord,
};
use rusqlite::{params, Connection};

/// Rewrites the dependencies of the entry `queue_id` as `after` (none: the row left or lost them).
fn write_dependencies(
    tx: &Connection,
    queue_id: u64,
    after: &[Dependency],
) -> rusqlite::Result<()> {
    tx.prepare_cached("DELETE FROM entry_dependencies WHERE queue_id = ?1")?
        .execute([int(queue_id)])?;
    let mut insert = tx.prepare_cached(
        "INSERT INTO entry_dependencies (queue_id, pos, task, turn, rule) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for (pos, dependency) in after.iter().enumerate() {
        let rule = match dependency.rule {
            AfterRule::Ended => "ended",
            AfterRule::Succeeded => "succeeded",
        };
        insert.execute(params![
            int(queue_id),
            pos,
            dependency.key.task,
            dependency.key.turn,
            rule
        ])?;
    }
    Ok(())
}

/// Deletes the row of an entry that left, with its dependencies.
fn remove_entry(tx: &Connection, entry: &QueueEntry) -> rusqlite::Result<()> {
    tx.prepare_cached("DELETE FROM entries WHERE queue_id = ?1")?
        .execute([int(entry.queue_id)])?;
    if !entry.after.is_empty() {
        write_dependencies(tx, entry.queue_id, &[])?;
    }
    Ok(())
}

/// Writes one entry's row: a plain `INSERT` of an `added` one (a row already there with its id or
/// its turn fails the section instead of being replaced: a section never removes a row it did not
/// load), an `UPDATE` of a changed one.
fn upsert_entry(tx: &Connection, entry: &QueueEntry, added: bool) -> rusqlite::Result<()> {
    let mut upsert = tx.prepare_cached(if added {
        "INSERT INTO entries (queue_id, task, turn, enqueued_at_millis, ready_at_millis,
            state, owner_pid, owner_start_micros, enqueue_owner_pid, enqueue_owner_start_micros,
            reservation_token, reserver_pid, reserver_start_micros, child_pid, child_start_micros,
            cancel_requested, priority)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)"
    } else {
        "UPDATE entries SET task = ?2, turn = ?3, enqueued_at_millis = ?4, ready_at_millis = ?5,
            state = ?6, owner_pid = ?7, owner_start_micros = ?8, enqueue_owner_pid = ?9,
            enqueue_owner_start_micros = ?10, reservation_token = ?11, reserver_pid = ?12,
            reserver_start_micros = ?13, child_pid = ?14, child_start_micros = ?15,
            cancel_requested = ?16, priority = ?17
         WHERE queue_id = ?1"
    })?;
    let (state, owner, enqueue_owner) = match &entry.state {
        RowState::Waiting {
            enqueue_owner,
            owner,
        } => ("waiting", Some(owner), Some(enqueue_owner)),
        RowState::Dispatching { dispatch_owner } => ("dispatching", Some(dispatch_owner), None),
        RowState::Parked => ("parked", None, None),
    };
    let reservation = entry.slot_reservation.as_ref();
    let child = reservation.and_then(|r| r.child.as_ref());
    upsert.execute(params![
        int(entry.queue_id),
        entry.key.task,
        entry.key.turn,
        int(entry.enqueued_at_millis),
        int(entry.ready_at_millis),
        state,
        owner.map(|o| o.pid),
        owner.map(|o| int(o.start_time_micros)),
        enqueue_owner.map(|o| o.pid),
        enqueue_owner.map(|o| int(o.start_time_micros)),
        reservation.map(|r| r.token.to_string()),
        reservation.map(|r| r.reserver.pid),
        reservation.map(|r| int(r.reserver.start_time_micros)),
        child.map(|c| c.pid),
        child.map(|c| int(c.start_time_micros)),
        entry.cancel_requested,
        entry.priority,
    ])?;
    Ok(())
}

/// Writes what differs between `old` (what the tables hold) and `new`: the meta row if its
/// fields changed, the entries that were removed, added or changed (by `queue_id`), and the
/// runner and work lists whole when either changed (each is bounded by the slots in use).
///
/// The entries are compared in one merge walk over both lists, which are in `queue_id` order
/// (the loader sorts `old`; `new` passed the structure check, which requires it): no map of the
/// queue is built, and only the rows that changed are written (issue 12).
pub(super) fn write_changes(
    tx: &Connection,
    old: &QueueState,
    new: &QueueState,
) -> rusqlite::Result<()> {
    if old.version != new.version || old.next_queue_id != new.next_queue_id {
        tx.prepare_cached("UPDATE queue_meta SET version = ?1, next_queue_id = ?2 WHERE id = 1")?
            .execute(params![new.version, int(new.next_queue_id)])?;
    }
    if old.paused != new.paused {
        write_paused(tx, &new.paused)?;
    }
    if old.entries != new.entries {
        write_entries(tx, &old.entries, &new.entries)?;
    }
    if old.runners != new.runners {
        write_runners(tx, &new.runners)?;
    }
    if old.works != new.works {
        write_works(tx, &new.works)?;
    }
    Ok(())
}

/// Rewrites the pause set: the home's flag and every paused task's row.
fn write_paused(tx: &Connection, paused: &PauseSet) -> rusqlite::Result<()> {
    tx.prepare_cached("UPDATE queue_meta SET paused_home = ?1 WHERE id = 1")?
        .execute([paused.home])?;
    tx.execute("DELETE FROM paused_tasks", [])?;
    let mut insert = tx.prepare_cached("INSERT INTO paused_tasks (task) VALUES (?1)")?;
    for task in &paused.tasks {
        insert.execute([task])?;
    }
    Ok(())
}

/// The merge walk over both entry lists (each in `queue_id` order): a row in both and changed
/// is updated, one only in `old` left (deleted), one only in `new` was added (inserted).
fn write_entries(tx: &Connection, old: &[QueueEntry], new: &[QueueEntry]) -> rusqlite::Result<()> {
    let (mut olds, mut news) = (old.iter().peekable(), new.iter().peekable());
    loop {
        match (olds.peek(), news.peek()) {
            (None, None) => break,
            (Some(o), Some(n)) if o.queue_id == n.queue_id => {
                if o != n {
                    upsert_entry(tx, n, false)?;
                    if o.after != n.after {
                        write_dependencies(tx, n.queue_id, &n.after)?;
                    }
                }
                olds.next();
                news.next();
            }
            // A row of `old` before the next of `new` (or after the last): it left.
            (Some(o), None) => {
                remove_entry(tx, o)?;
                olds.next();
            }
            (Some(o), Some(n)) if o.queue_id < n.queue_id => {
                remove_entry(tx, o)?;
                olds.next();
            }
            // A row of `new` not in `old`: added.
            (_, Some(n)) => {
                upsert_entry(tx, n, true)?;
                if !n.after.is_empty() {
                    write_dependencies(tx, n.queue_id, &n.after)?;
                }
                news.next();
            }
        }
    }
    Ok(())
}

/// Rewrites the runner list whole (bounded by the slots in use), in its order.
fn write_runners(tx: &Connection, runners: &[RunnerRecord]) -> rusqlite::Result<()> {
    tx.execute("DELETE FROM runners", [])?;
    let mut insert = tx.prepare_cached(
        "INSERT INTO runners (pos, task, turn, pid, start_micros, attached)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for (pos, runner) in runners.iter().enumerate() {
        insert.execute(params![
            pos,
            runner.key.task,
            runner.key.turn,
            runner.identity.pid,
            int(runner.identity.start_time_micros),
            runner.attached,
        ])?;
    }
    Ok(())
}

/// Rewrites the work list whole (bounded by the slots in use), in its order.
fn write_works(tx: &Connection, works: &[WorkRecord]) -> rusqlite::Result<()> {
    tx.execute("DELETE FROM works", [])?;
    let mut insert = tx.prepare_cached(
        "INSERT INTO works (pos, task, turn, work_id, runner_pid, runner_start_micros,
            leader_pid, leader_start_micros, cgroup)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?;
    for (pos, work) in works.iter().enumerate() {
        insert.execute(params![
            pos,
            work.key.task,
            work.key.turn,
            work.id.to_string(),
            work.runner.pid,
            int(work.runner.start_time_micros),
            work.leader.map(|l| l.pid),
            work.leader.map(|l| int(l.start_time_micros)),
            work.cgroup,
        ])?;
    }
    Ok(())
}
