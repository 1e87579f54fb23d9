//! The record statements behind one type for both databases ([`Db`]): what a record function of
//! [`crate::tasks`] runs, in a section's transaction or a short one of its own, without knowing
//! which database the home's records are in.

use super::access::TurnRow;
use super::error::DbError;
use super::postgres::{lit, pg_keep_turn, PgConn, INT8, TEXT};
use super::sqlite as lite;
use rusqlite::Connection;

/// The record tables of one home, in either database: what [`super::with_db_in`] hands its
/// closure.
pub(crate) enum Db<'a> {
    Sqlite(&'a Connection),
    /// The client (inside the section's transaction, or a short one of its own) and the queue.
    Postgres(&'a mut PgConn, &'a str),
}

fn pg_turn(value: i64) -> Result<u32, DbError> {
    u32::try_from(value).map_err(|_| DbError::Range(format!("turn {value} is out of range")))
}

impl Db<'_> {
    pub(crate) fn task_body(&mut self, name: &str) -> Result<Option<String>, DbError> {
        match self {
            Db::Sqlite(c) => Ok(lite::task_body(c, name)?),
            Db::Postgres(c, _) if c.tasks.contains_key(name) => {
                Ok(c.tasks.get(name).cloned().flatten())
            }
            Db::Postgres(c, queue) => {
                let body: Option<String> = c
                    .client
                    .query_typed_opt(
                        "SELECT body FROM tasks WHERE queue = $1 AND name = $2",
                        &[(queue, TEXT), (&name, TEXT)],
                    )?
                    .map(|row| row.try_get(0))
                    .transpose()?;
                c.remember_task(name, body.as_deref());
                Ok(body)
            }
        }
    }

    pub(crate) fn put_task(
        &mut self,
        name: &str,
        next_turn: u32,
        body: &str,
    ) -> Result<(), DbError> {
        match self {
            Db::Sqlite(c) => Ok(lite::put_task(c, name, next_turn, body)?),
            Db::Postgres(c, queue) => {
                c.room()?;
                c.tasks.insert(name.to_string(), Some(body.to_string()));
                if c.keep(format_args!(
                    "INSERT INTO tasks (queue, name, next_turn, body) VALUES ({}, {}, {next_turn}, {})
                     ON CONFLICT (queue, name) DO UPDATE SET next_turn = EXCLUDED.next_turn,
                        body = EXCLUDED.body",
                    lit(queue),
                    lit(name),
                    lit(body)
                )) {
                    return Ok(());
                }
                c.client.execute_typed(
                    "INSERT INTO tasks (queue, name, next_turn, body) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (queue, name) DO UPDATE SET next_turn = EXCLUDED.next_turn,
                        body = EXCLUDED.body",
                    &[
                        (queue, TEXT),
                        (&name, TEXT),
                        (&i64::from(next_turn), INT8),
                        (&body, TEXT),
                    ],
                )?;
                Ok(())
            }
        }
    }

    pub(crate) fn turn_body(&mut self, task: &str, turn: u32) -> Result<Option<String>, DbError> {
        match self {
            Db::Sqlite(c) => Ok(lite::turn_body(c, task, turn)?),
            Db::Postgres(c, _) if c.turns.contains_key(&(task.to_string(), turn)) => {
                Ok(c.turns.get(&(task.to_string(), turn)).cloned().flatten())
            }
            Db::Postgres(c, queue) => {
                let body: Option<String> = c
                    .client
                    .query_typed_opt(
                        "SELECT body FROM turns WHERE queue = $1 AND task = $2 AND turn = $3",
                        &[(queue, TEXT), (&task, TEXT), (&i64::from(turn), INT8)],
                    )?
                    .map(|row| row.try_get(0))
                    .transpose()?;
                c.remember_turn(task, turn, body.as_deref());
                Ok(body)
            }
        }
    }

    /// [`lite::put_turn`]: `create` refuses (`Ok(false)`) a turn number that is taken.
    pub(crate) fn put_turn(&mut self, row: &TurnRow<'_>, create: bool) -> Result<bool, DbError> {
        match self {
            Db::Sqlite(c) => Ok(lite::put_turn(c, row, create)?),
            Db::Postgres(c, queue) => pg_keep_turn(c, queue, row, create),
        }
    }

    pub(crate) fn task_names(&mut self) -> Result<Vec<String>, DbError> {
        match self {
            Db::Sqlite(c) => Ok(lite::task_names(c)?),
            Db::Postgres(c, queue) => {
                c.send_pending()?;
                c.client
                    .query_typed(
                        "SELECT name FROM tasks WHERE queue = $1 ORDER BY name COLLATE \"C\"",
                        &[(queue, TEXT)],
                    )?
                    .iter()
                    .map(|row| Ok(row.try_get(0)?))
                    .collect()
            }
        }
    }

    pub(crate) fn turn_numbers(&mut self, task: &str) -> Result<Vec<u32>, DbError> {
        match self {
            Db::Sqlite(c) => Ok(lite::turn_numbers(c, task)?),
            Db::Postgres(c, queue) => {
                c.send_pending()?;
                c.client
                    .query_typed(
                        "SELECT turn FROM turns WHERE queue = $1 AND task = $2 ORDER BY turn",
                        &[(queue, TEXT), (&task, TEXT)],
                    )?
                    .iter()
                    .map(|row| pg_turn(row.try_get(0)?))
                    .collect()
            }
        }
    }

    /// `(task, turn, body)` of every turn without an outcome, from the partial index.
    pub(crate) fn unfinished(&mut self) -> Result<Vec<(String, u32, String)>, DbError> {
        match self {
            Db::Sqlite(c) => Ok(lite::unfinished(c)?),
            Db::Postgres(c, queue) => {
                c.send_pending()?;
                c.client
                    .query_typed(
                        "SELECT task, turn, body FROM turns WHERE queue = $1 AND NOT settled
                     ORDER BY task COLLATE \"C\", turn",
                        &[(queue, TEXT)],
                    )?
                    .iter()
                    .map(|row| Ok((row.try_get(0)?, pg_turn(row.try_get(1)?)?, row.try_get(2)?)))
                    .collect()
            }
        }
    }

    /// `(task, turn)` of every turn without an outcome, from the partial index (no body read).
    pub(crate) fn unfinished_keys(&mut self) -> Result<Vec<(String, u32)>, DbError> {
        match self {
            Db::Sqlite(c) => Ok(lite::unfinished_keys(c)?),
            Db::Postgres(c, queue) => {
                c.send_pending()?;
                c.client
                    .query_typed(
                        "SELECT task, turn FROM turns WHERE queue = $1 AND NOT settled",
                        &[(queue, TEXT)],
                    )?
                    .iter()
                    .map(|row| Ok((row.try_get(0)?, pg_turn(row.try_get(1)?)?)))
                    .collect()
            }
        }
    }

    pub(crate) fn turns_with_short_id(&mut self, id: u64) -> Result<Vec<(String, u32)>, DbError> {
        match self {
            Db::Sqlite(c) => Ok(lite::turns_with_short_id(c, id)?),
            Db::Postgres(c, queue) => {
                c.send_pending()?;
                c.client
                    .query_typed(
                        "SELECT task, turn FROM turns WHERE queue = $1 AND short_id = $2
                     ORDER BY task COLLATE \"C\", turn",
                        &[(queue, TEXT), (&(id as i64), INT8)],
                    )?
                    .iter()
                    .map(|row| Ok((row.try_get(0)?, pg_turn(row.try_get(1)?)?)))
                    .collect()
            }
        }
    }

    /// Deletes a task's record (the caller has removed its turns: `tollgate clean`).
    pub(crate) fn delete_task(&mut self, name: &str) -> Result<(), DbError> {
        match self {
            Db::Sqlite(c) => Ok(lite::delete_task(c, name)?),
            Db::Postgres(c, queue) => {
                c.room()?;
                c.tasks.insert(name.to_string(), None);
                let (q, n) = (lit(queue), lit(name));
                if c.keep(format_args!(
                    "DELETE FROM tasks WHERE queue = {q} AND name = {n}"
                )) {
                    return Ok(());
                }
                c.client.execute_typed(
                    "DELETE FROM tasks WHERE queue = $1 AND name = $2",
                    &[(queue, TEXT), (&name, TEXT)],
                )?;
                Ok(())
            }
        }
    }

    pub(crate) fn delete_turn(&mut self, task: &str, turn: u32) -> Result<(), DbError> {
        match self {
            Db::Sqlite(c) => Ok(lite::delete_turn(c, task, turn)?),
            Db::Postgres(c, queue) => {
                c.room()?;
                c.turns.insert((task.to_string(), turn), None);
                let (q, t) = (lit(queue), lit(task));
                if c.keep(format_args!(
                    "DELETE FROM turns WHERE queue = {q} AND task = {t} AND turn = {turn}; \
                     DELETE FROM turn_output WHERE queue = {q} AND task = {t} AND turn = {turn}"
                )) {
                    return Ok(());
                }
                let key: [(&(dyn postgres::types::ToSql + Sync), _); 3] =
                    [(queue, TEXT), (&task, TEXT), (&i64::from(turn), INT8)];
                c.client.execute_typed(
                    "DELETE FROM turns WHERE queue = $1 AND task = $2 AND turn = $3",
                    &key,
                )?;
                // Its output copied for other hosts (schema version 6) goes with it.
                c.client.execute_typed(
                    "DELETE FROM turn_output WHERE queue = $1 AND task = $2 AND turn = $3",
                    &key,
                )?;
                Ok(())
            }
        }
    }
}
