//! A delivery's payload where the command looks for it. `serve` keeps a delivery's body in the
//! home's database (`serve_payloads`, written in the group commit that queued the turn: the
//! body's only durable copy). The accept writes no file (it would cost an inode per delivery on
//! the group commit's one thread, and the turn's folder does not exist yet): the turn's runner
//! writes the body into its own turn folder (`payload`) from the row before the command starts,
//! and names that file in the command's environment (`TOLLGATE_PAYLOAD`). On a PostgreSQL queue
//! another host may run the turn: its runner writes the file in its own home.

use crate::fsutil::FileError;
use crate::home::Home;
use crate::queue::records::{self, Access};
use crate::tasks::TurnRecord;
use std::borrow::Cow;

/// The environment variable naming the payload file (spec/ingress.md).
pub const PAYLOAD_VAR: &str = "TOLLGATE_PAYLOAD";

/// The payload file's name in a turn folder.
pub const PAYLOAD_FILE: &str = "payload";

/// `turn` with `TOLLGATE_PAYLOAD` naming this home's payload file of the turn, holding the kept
/// body: unchanged when the turn carries no delivery; otherwise
/// the kept body is written into this home's turn folder (made if missing), unless the file there
/// holds it already. A turn whose body is not kept (queued before the table existed) keeps the
/// path its record names. `Err` only when the body is kept but cannot be read or written here:
/// the command would run without its input, which is worse than not running it.
pub fn localised<'a>(home: &Home, turn: &'a TurnRecord) -> Result<Cow<'a, TurnRecord>, FileError> {
    if turn.delivery.is_none() {
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
    let dir = home.turn_dir(&turn.key);
    let local = dir.join(PAYLOAD_FILE);
    // The row is the durable copy: a crash before the file is written loses nothing, and every
    // start of the turn writes it again if it is missing or torn.
    if !std::fs::read(&local).is_ok_and(|on_disk| on_disk == body) {
        crate::fsutil::create_private_dir_under(home.root(), &dir)?;
        crate::fsutil::publish_bytes(&local, &body)?;
    }
    if turn
        .env
        .get(std::ffi::OsStr::new(PAYLOAD_VAR))
        .is_some_and(|named| std::path::Path::new(named) == local)
    {
        return Ok(Cow::Borrowed(turn));
    }
    let mut turn = turn.clone();
    turn.env.insert(PAYLOAD_VAR.into(), local.into_os_string());
    Ok(Cow::Owned(turn))
}
