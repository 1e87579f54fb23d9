//! A delivery's payload where the command looks for it. `serve` writes a delivery's body into the
//! turn folder of the home that queued the turn and names that file in the turn's environment
//! (`TOLLGATE_PAYLOAD`). On a PostgreSQL queue another host may run the turn, and that path is in
//! a home it cannot see; the body is also kept in the queue's database (`serve_payloads`, written
//! in the group commit that queued the turn), so the runner copies it into its own turn folder and
//! points the variable there before the command starts.

use crate::fsutil::FileError;
use crate::home::Home;
use crate::queue::records::{self, Access};
use crate::tasks::TurnRecord;
use std::borrow::Cow;

/// The environment variable naming the payload file (spec/ingress.md).
pub const PAYLOAD_VAR: &str = "TOLLGATE_PAYLOAD";

/// The payload file's name in a turn folder.
pub const PAYLOAD_FILE: &str = "payload";

/// `turn` with `TOLLGATE_PAYLOAD` naming a file in `home`: unchanged when the turn carries no
/// delivery, already names this home's file, or the home's records are not in PostgreSQL (one
/// home, one machine); otherwise the kept body is written into this home's turn folder. `Err` only
/// when the body is kept but cannot be read or written here: the command would run without its
/// input, which is worse than not running it.
pub fn localised<'a>(home: &Home, turn: &'a TurnRecord) -> Result<Cow<'a, TurnRecord>, FileError> {
    if turn.delivery.is_none() || !records::in_postgres(home) {
        return Ok(Cow::Borrowed(turn));
    }
    let Some(named) = turn.env.get(PAYLOAD_VAR) else {
        return Ok(Cow::Borrowed(turn));
    };
    let local = home.turn_dir(&turn.key).join(PAYLOAD_FILE);
    if std::path::Path::new(named) == local {
        return Ok(Cow::Borrowed(turn));
    }
    let kept = records::with_db(home, Access::Read, None, |db| {
        crate::queue::serve_tables::payload_of(db, &turn.key.task, turn.key.turn)
            .map_err(|e| records::db_error(&records::database_name(home), e))
    })?;
    let Some(body) = kept else {
        // Pruned only once the turn ended; a turn queued before the table existed keeps its path.
        return Ok(Cow::Borrowed(turn));
    };
    crate::fsutil::create_private_dir(&home.turn_dir(&turn.key))?;
    crate::fsutil::publish_bytes(&local, &body)?;
    let mut turn = turn.clone();
    turn.env
        .insert(PAYLOAD_VAR.to_string(), local.display().to_string());
    Ok(Cow::Owned(turn))
}
