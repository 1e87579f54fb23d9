//! Helpers of the failpoint tests (`cargo test --features failpoints`): the binary with a
//! `FAILPOINTS` setting of the test's own (never one inherited from the environment), and a
//! bounded poll.

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `tollgate --home <home> <args>` with `FAILPOINTS=<failpoints>` (or none), stdin closed.
pub fn tollgate(home: &Path, failpoints: Option<&str>, args: &[&str]) -> Output {
    let mut command = Command::new(super::BIN);
    command
        .arg("--home")
        .arg(home)
        .args(args)
        .stdin(Stdio::null())
        .env_remove("FAILPOINTS");
    if let Some(failpoints) = failpoints {
        command.env("FAILPOINTS", failpoints);
    }
    command.output().expect("run tollgate")
}

/// [`tollgate`] that must succeed.
pub fn ok(home: &Path, failpoints: Option<&str>, args: &[&str]) -> Output {
    let out = tollgate(home, failpoints, args);
    assert!(out.status.success(), "{args:?}: {}", super::describe(&out));
    out
}

/// `status --json` of `home`, without failpoints.
pub fn status(home: &Path) -> serde_json::Value {
    let out = tollgate(home, None, &["status", "--json"]);
    assert!(out.status.success(), "{}", super::describe(&out));
    serde_json::from_slice(&out.stdout).expect("status json")
}

pub use super::wait_until;

/// The record of `key` in `home` once it has an outcome (waited for as [`wait_until`] does).
pub fn settled(
    home: &Path,
    key: &tollgate::protocol::slots::TurnKey,
) -> tollgate::tasks::TurnRecord {
    let view = tollgate::home::Home::at(home);
    let mut turn = None;
    wait_until(&format!("{key} to be settled"), || {
        turn = tollgate::tasks::load_turn(&view, key)
            .expect("turn record")
            .filter(|t| t.is_settled());
        turn.is_some()
    });
    turn.expect("settled")
}
