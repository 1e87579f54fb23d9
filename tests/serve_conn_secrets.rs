//! `tollgate serve` keeps its routes' secrets to itself: neither the `worker runner` it starts nor
//! the turn that runner starts inherits a route's `secret_env` variable, or another variable that
//! holds the same secret (issue 11, point 5), or one whose value contains it (issue 31, point 8:
//! `AUTH="Bearer <secret>"` reached every turn and the database); the database never holds it.
#![cfg(feature = "serve")]

mod serve_support;

use serve_support::*;

/// The secret exported a second time, under a name no route mentions.
const COPY_ENV: &str = "SERVE_TEST_SECRET_COPY";
/// A variable whose value holds the secret inside a longer text.
const INSIDE_ENV: &str = "HAS_SECRET_INSIDE";

fn environ(pid: u32) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_else(|e| panic!("reading /proc/{pid}/environ: {e}"));
    raw.split(|b| *b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}

fn read_pid(path: &std::path::Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[test]
fn neither_the_runner_nor_the_turn_sees_a_route_secret() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let release = dir.path().join("release");
    // The turn records its own pid and its parent's (the runner), then waits (bounded) to be
    // released, so both processes are alive while the test reads their environments.
    let script = format!(
        "echo $$ > '{0}.turn.tmp' && mv '{0}.turn.tmp' '{0}.turn'; echo $PPID > '{0}.runner.tmp' && mv '{0}.runner.tmp' '{0}.runner'; i=0; while [ ! -e '{1}' ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
        pids.display(),
        release.display()
    );
    let home = TestHome::new(
        2,
        &format!(
            "[[route]]\npath = \"/held\"\nadapter = \"generic\"\nsecret_env = \"{SECRET_ENV}\"\ntask = \"held\"\nrun = [\"sh\", \"-c\", {script:?}]\n"
        ),
    );
    let mut cmd = Serve::command(&home);
    cmd.env(COPY_ENV, SECRET);
    cmd.env(INSIDE_ENV, format!("Bearer {SECRET}"));
    let serve = Serve::spawn(cmd);
    // serve itself holds all three (it reads the secret from there): the checks below mean
    // something.
    let own = environ(serve.child.id());
    for name in [SECRET_ENV, COPY_ENV, INSIDE_ENV] {
        assert!(
            own.iter().any(|v| v.starts_with(&format!("{name}="))),
            "{name}"
        );
    }

    let body = b"{}";
    let r = serve.post("/held", &generic_headers("s1", None, body), body);
    assert_eq!(r.status, 200, "{}", r.text());
    let turn_pid = pids.with_extension("turn");
    let runner_pid = pids.with_extension("runner");
    wait_until(30, "the turn to start", || {
        read_pid(&turn_pid).is_some() && read_pid(&runner_pid).is_some()
    });
    let turn = read_pid(&turn_pid).unwrap();
    let runner = read_pid(&runner_pid).unwrap();
    let cmdline = std::fs::read(format!("/proc/{runner}/cmdline")).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    assert!(
        cmdline.contains("worker runner"),
        "the turn's parent is the runner: {cmdline}"
    );
    for (who, pid) in [("runner", runner), ("turn", turn)] {
        let env = environ(pid);
        assert!(
            env.iter()
                .any(|v| v.starts_with("TOLLGATE_HOME=") || v.starts_with("TOLLGATE_DELIVERY=")),
            "{who}: the environment was read: {env:?}"
        );
        for var in &env {
            assert!(
                !var.starts_with(&format!("{SECRET_ENV}="))
                    && !var.starts_with(&format!("{COPY_ENV}="))
                    && !var.starts_with(&format!("{INSIDE_ENV}=")),
                "{who} (pid {pid}) inherited a route secret: {var}"
            );
            assert!(
                !var.contains(SECRET),
                "{who} (pid {pid}) holds the secret's value: {var}"
            );
        }
    }
    std::fs::write(&release, b"").unwrap();
    wait_until(30, "the turn to end", || {
        home.log().iter().any(|l| l["kind"] == "outcome")
    });
    // The turn's stored environment (its record, in the database and its log) never held it.
    for file in ["tollgate.db", "tollgate.db-wal"] {
        let bytes = std::fs::read(home.home.join(file)).unwrap_or_default();
        assert!(
            !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
            "{file} holds the secret's value"
        );
    }
}
