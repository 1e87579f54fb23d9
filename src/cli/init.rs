//! `tollgate init`: create or update a home and its config.

use super::common::print_json;
use super::{exit, CliError, InitArgs};
use crate::home::Home;
use serde_json::json;
use std::path::PathBuf;

pub fn init(home: Option<PathBuf>, args: InitArgs) -> Result<i32, CliError> {
    let home = Home::resolve(home)?;
    let config = if home.config_path().exists() {
        // An existing config is edited in place, so the user's comments and layout stay.
        home.ensure()?;
        match args.workers {
            Some(workers) => {
                crate::config::edit::set_key(&home.config_path(), "workers", &workers.to_string())?
            }
            None => home.ensure()?,
        }
    } else {
        home.init(args.workers)?
    };
    if args.json {
        print_json(&json!({
            "home": home.root(),
            "config": home.config_path(),
            "workers": config.workers,
            "lock_timeout": config.lock_timeout,
        }))?;
    } else {
        println!(
            "home {} ready: {} worker slot(s); config in {}",
            home.root().display(),
            config.workers,
            home.config_path().display()
        );
    }
    Ok(exit::OK)
}
