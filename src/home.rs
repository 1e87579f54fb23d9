//! The state directory and where each file lives in it (DESIGN.md, "State on disk").

use crate::config::{Config, ConfigError};
use crate::fsutil::{self, FileError};
use crate::protocol::slots::TurnKey;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug)]
pub struct Home {
    root: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    #[error("cannot find a home directory: pass --home DIR or set TOLLGATE_HOME (neither XDG_STATE_HOME nor HOME is set)")]
    NoDefault,
    #[error(transparent)]
    File(#[from] FileError),
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl Home {
    /// `explicit` (from `--home` or `TOLLGATE_HOME`), else `$XDG_STATE_HOME/tollgate`, else
    /// `~/.local/state/tollgate`.
    pub fn resolve(explicit: Option<PathBuf>) -> Result<Home, HomeError> {
        if let Some(root) = explicit {
            return Ok(Home { root });
        }
        let non_empty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        if let Some(state) = non_empty("XDG_STATE_HOME") {
            return Ok(Home {
                root: PathBuf::from(state).join("tollgate"),
            });
        }
        match non_empty("HOME") {
            Some(home) => Ok(Home {
                root: PathBuf::from(home).join(".local/state/tollgate"),
            }),
            None => Err(HomeError::NoDefault),
        }
    }

    pub fn at(root: impl Into<PathBuf>) -> Home {
        Home { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn config_path(&self) -> PathBuf {
        self.root.join("tollgate.toml")
    }
    /// The home's database (spec/store.md): the queue's tables. SQLite keeps `tollgate.db-wal`
    /// and `tollgate.db-shm` beside it.
    pub fn db_path(&self) -> PathBuf {
        self.root.join("tollgate.db")
    }
    /// The queue document of earlier versions' file store: imported into the database on first
    /// use, then moved aside to [`Home::imported_queue_path`].
    pub fn queue_path(&self) -> PathBuf {
        self.root.join("queue.json")
    }
    /// Where an imported `queue.json` is kept (moved, never deleted).
    pub fn imported_queue_path(&self) -> PathBuf {
        self.root.join("queue.json.imported")
    }
    pub fn tasks_dir(&self) -> PathBuf {
        self.root.join("tasks")
    }
    pub fn task_dir(&self, task: &str) -> PathBuf {
        self.tasks_dir().join(task)
    }
    pub fn task_file(&self, task: &str) -> PathBuf {
        self.task_dir(task).join("task.json")
    }
    pub fn turn_dir(&self, key: &TurnKey) -> PathBuf {
        self.task_dir(&key.task)
            .join("turns")
            .join(key.turn.to_string())
    }
    pub fn turn_file(&self, key: &TurnKey) -> PathBuf {
        self.turn_dir(key).join("turn.json")
    }
    pub fn stdout_log(&self, key: &TurnKey) -> PathBuf {
        self.turn_dir(key).join("stdout.log")
    }
    pub fn stderr_log(&self, key: &TurnKey) -> PathBuf {
        self.turn_dir(key).join("stderr.log")
    }
    /// Exists while the turn's runner waits for disk space to record the result of its command.
    pub fn result_pending_marker(&self, key: &TurnKey) -> PathBuf {
        self.turn_dir(key).join("result.pending")
    }
    /// The runner's own diagnostics, kept apart from the command's output.
    pub fn runner_log(&self, key: &TurnKey) -> PathBuf {
        self.turn_dir(key).join("runner.log")
    }

    /// Creates the home (0700) and a default config if there is none, then loads the config.
    /// A home whose config loads is not created again: every command starts here, and the
    /// folders below it are created with their parents when first written (`tasks/` by the
    /// first turn, [`crate::tasks`]).
    pub fn ensure(&self) -> Result<Config, HomeError> {
        if let Some(config) = Config::load(&self.config_path())? {
            return Ok(config);
        }
        fsutil::create_private_dir(&self.root)?;
        fsutil::create_private_dir(&self.tasks_dir())?;
        // Loaded again: another command may have written it since.
        match Config::load(&self.config_path())? {
            Some(config) => Ok(config),
            None => {
                let config = Config::default();
                config.save(&self.config_path())?;
                Ok(config)
            }
        }
    }

    /// Writes a config with `workers` slots, creating the home if needed. Refuses to overwrite a
    /// config that does not load (it is reported and kept).
    pub fn init(&self, workers: Option<usize>) -> Result<Config, HomeError> {
        fsutil::create_private_dir(&self.root)?;
        fsutil::create_private_dir(&self.tasks_dir())?;
        let mut config = Config::load(&self.config_path())?.unwrap_or_default();
        if let Some(workers) = workers {
            config.workers = workers;
        }
        config.validate(&self.config_path())?;
        config.save(&self.config_path())?;
        Ok(config)
    }
}
