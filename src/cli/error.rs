//! Errors at the CLI edge: a message that says what was wrong and where, and an exit code.

use super::exit;
use crate::config::ConfigError;
use crate::dispatch::DispatchError;
use crate::fsutil::FileError;
use crate::home::HomeError;
use crate::protocol::slots::SlotError;
use crate::queue::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad usage or input; nothing was changed.
    #[error("{0}")]
    Usage(String),
    /// The environment failed.
    #[error("{0}")]
    Environment(String),
    /// Something failed after (or while) a change was committed: what the home holds now is not
    /// known to this command, so it is neither a success nor a failure that changed nothing.
    #[error("state unknown: {0}")]
    Unknown(String),
}

impl CliError {
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => exit::USAGE,
            CliError::Environment(_) => exit::ENVIRONMENT,
            CliError::Unknown(_) => exit::STATE_UNKNOWN,
        }
    }

    /// This error, met after `key` (short id `id`) was queued: never a failure (exit 2 or 3, "nothing
    /// was queued", which a caller may retry), always [`CliError::Unknown`] naming the turn.
    pub fn after_queued(self, key: &crate::protocol::slots::TurnKey, id: u64) -> CliError {
        match self {
            CliError::Usage(e) | CliError::Environment(e) => CliError::Unknown(format!(
                "task {} turn {} (id {id}) was queued, but then: {e}; check `tollgate status {id}` \
                 before submitting it again",
                key.task, key.turn
            )),
            unknown @ CliError::Unknown(_) => unknown,
        }
    }
}

fn file_error(error: &FileError) -> CliError {
    match error {
        FileError::Corrupt { .. }
        | FileError::NotRegular { .. }
        | FileError::TooLarge { .. }
        | FileError::Missing { .. }
        | FileError::Refused { .. } => CliError::Usage(error.to_string()),
        FileError::Io { .. } => CliError::Environment(error.to_string()),
    }
}

impl From<FileError> for CliError {
    fn from(error: FileError) -> Self {
        file_error(&error)
    }
}

impl From<ConfigError> for CliError {
    fn from(error: ConfigError) -> Self {
        match error {
            ConfigError::File(e) => file_error(&e),
            ConfigError::Invalid { .. } => CliError::Usage(error.to_string()),
        }
    }
}

impl From<HomeError> for CliError {
    fn from(error: HomeError) -> Self {
        match error {
            HomeError::File(e) => file_error(&e),
            HomeError::Config(e) => e.into(),
            HomeError::NoDefault => CliError::Usage(error.to_string()),
        }
    }
}

impl From<StoreError> for CliError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::File(e) => file_error(&e),
            StoreError::Busy { .. }
            | StoreError::Database { .. }
            | StoreError::Unpublishable { .. }
            | StoreError::Poisoned => CliError::Environment(error.to_string()),
            StoreError::Uncertain { .. } => CliError::Unknown(format!(
                "{error} (`tollgate status` shows what the home holds)"
            )),
        }
    }
}

impl From<SlotError> for CliError {
    fn from(error: SlotError) -> Self {
        CliError::Usage(error.to_string())
    }
}

impl From<DispatchError> for CliError {
    fn from(error: DispatchError) -> Self {
        match error {
            DispatchError::Store(e) => e.into(),
            DispatchError::Slot(e) => e.into(),
            DispatchError::File(e) => e.into(),
            DispatchError::UnknownTask { .. } => CliError::Usage(error.to_string()),
            DispatchError::Spawn(e) => CliError::Environment(e.to_string()),
            DispatchError::Fleet(e) => CliError::Environment(e.to_string()),
            DispatchError::Io { ref source, .. }
                if source.kind() == std::io::ErrorKind::InvalidInput =>
            {
                CliError::Usage(error.to_string())
            }
            DispatchError::Io { .. } => CliError::Environment(error.to_string()),
            DispatchError::StateUnknown { .. } => CliError::Unknown(error.to_string()),
        }
    }
}
