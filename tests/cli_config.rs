//! `tollgate config` and `tollgate init` through the real binary: the effective configuration with
//! its defaults, one key read, one key set with the file's comments kept, and a bad value refused
//! with the file unchanged.

mod common;

use common::{describe, tollgate};
use serde_json::Value;

const COMMENTED: &str = "\
# my home: keep this comment
workers = 3 # three, because of the laptop

# the lock
lock_timeout = \"10s\"
";

fn home_with(text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("tollgate.toml"), text).expect("write config");
    dir
}

#[test]
fn show_lists_every_key_with_defaults_marked_and_get_reads_one() {
    let dir = home_with(COMMENTED);
    let home = dir.path();
    let out = tollgate(home, &["config"]);
    assert!(out.status.success(), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l == "workers = 3"), "{text}");
    assert!(
        text.lines().any(|l| l == "lock_timeout = \"10s\""),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("serve.max_detached = ") && l.ends_with("# default")),
        "[serve] keys with their defaults: {text}"
    );
    // Every top-level key, the ones serialization leaves out at their default included.
    for key in [
        "durability = \"fsync\"  # default",
        "store = \"sqlite\"  # default",
        "log_bytes = 67108864  # default",
        "log_tail_bytes = 1048576  # default",
        "hook = []  # default",
    ] {
        assert!(text.lines().any(|l| l == key), "{key:?} missing: {text}");
    }
    assert!(
        text.lines()
            .any(|l| l.starts_with("env_keep = [") && l.ends_with("# default")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("host = \"") && l.ends_with("# default")),
        "the derived host name: {text}"
    );

    let json: Value = serde_json::from_slice(&tollgate(home, &["config", "show", "--json"]).stdout)
        .expect("json");
    assert_eq!(json["effective"]["workers"], 3, "{json}");
    let defaults = json["defaults"].as_array().expect("defaults");
    assert!(defaults.iter().any(|d| d == "serve.listen"), "{json}");
    assert!(!defaults.iter().any(|d| d == "workers"), "{json}");

    let get = tollgate(home, &["config", "get", "workers"]);
    assert_eq!(
        String::from_utf8_lossy(&get.stdout),
        "3\n",
        "{}",
        describe(&get)
    );
    let get = tollgate(home, &["config", "get", "lock_timeout"]);
    assert_eq!(String::from_utf8_lossy(&get.stdout), "10s\n");
    let unknown = tollgate(home, &["config", "get", "wrokers"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", describe(&unknown));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("wrokers"));
}

#[test]
fn set_keeps_comments_and_refuses_bad_values_leaving_the_file_unchanged() {
    let dir = home_with(COMMENTED);
    let home = dir.path();
    let path = home.join("tollgate.toml");

    let out = tollgate(home, &["config", "set", "workers", "8"]);
    assert!(out.status.success(), "{}", describe(&out));
    let after = std::fs::read_to_string(&path).expect("config");
    assert_eq!(
        after,
        COMMENTED.replace("workers = 3 #", "workers = 8 #"),
        "only the value changed"
    );

    // A key of a table the file does not have yet: the table is added, the rest kept.
    let out = tollgate(home, &["config", "set", "serve.drain_timeout", "45s"]);
    assert!(out.status.success(), "{}", describe(&out));
    let after = std::fs::read_to_string(&path).expect("config");
    assert!(
        after.starts_with(&COMMENTED.replace("workers = 3", "workers = 8")),
        "{after}"
    );
    assert!(
        after.contains("[serve]\ndrain_timeout = \"45s\""),
        "{after}"
    );
    let get = tollgate(home, &["config", "get", "serve.drain_timeout"]);
    assert_eq!(String::from_utf8_lossy(&get.stdout), "45s\n");

    let before = std::fs::read(&path).expect("config");
    for (args, named) in [
        (&["config", "set", "workers", "0"][..], "`workers`"),
        (&["config", "set", "workers", "many"], "workers"),
        (&["config", "set", "lock_timeout", "soon"], "`lock_timeout`"),
        (&["config", "set", "nope", "1"], "nope"),
    ] {
        let out = tollgate(home, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(named) && err.contains("unchanged"),
            "{args:?}: {err}"
        );
        assert_eq!(std::fs::read(&path).expect("config"), before, "{args:?}");
    }
}

#[test]
fn init_with_workers_on_an_existing_config_keeps_its_comments() {
    let dir = home_with(COMMENTED);
    let home = dir.path();
    let out = tollgate(home, &["init", "--workers", "5"]);
    assert!(out.status.success(), "{}", describe(&out));
    let after = std::fs::read_to_string(home.join("tollgate.toml")).expect("config");
    assert_eq!(after, COMMENTED.replace("workers = 3 #", "workers = 5 #"));
    // Without --workers, an existing config is left exactly as it is.
    let out = tollgate(home, &["init"]);
    assert!(out.status.success(), "{}", describe(&out));
    let again = std::fs::read_to_string(home.join("tollgate.toml")).expect("config");
    assert_eq!(again, after);
}

#[test]
fn a_home_that_does_not_exist_is_refused_unless_init_or_create_makes_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let typo = dir.path().join("hoem");
    for args in [
        &["status"][..],
        &["submit", "--", "true"],
        &["logs", "last"],
        &["config", "set", "workers", "2"],
        &["sweep"],
    ] {
        let out = tollgate(&typo, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("tollgate init --home {}", typo.display())),
            "{args:?}: the hint names the command that creates it: {err}"
        );
        assert!(!typo.exists(), "{args:?} created {}", typo.display());
    }
    // The same through TOLLGATE_HOME, which the message names.
    let out = std::process::Command::new(common::BIN)
        .arg("status")
        .env("TOLLGATE_HOME", &typo)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TOLLGATE_HOME="));
    assert!(!typo.exists());
    // Commands that need no home still work.
    assert!(tollgate(&typo, &["completions", "bash"]).status.success());

    // `--create` opts in; `init` creates it (the helper every test with a fresh path uses).
    let created = dir.path().join("created");
    let out = tollgate(&created, &["--create", "submit", "--wait", "--", "true"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(created.join("tollgate.toml").is_file());
    let home = common::init_home(dir.path(), 1);
    let out = tollgate(&home, &["status"]);
    assert!(out.status.success(), "{}", describe(&out));
}
