//! Operations on a fleet (spec/fleet.md, "Operations"; issue 14 point 5) against a real
//! PostgreSQL server: two homes with distinct `host` settings on one database and one queue (as
//! two machines would be), each with its own `tasks/` folder, so a turn's log files exist only on
//! the home that ran it.
//!
//! - each turn's host is in its record: `status --json`, the `status` table's HOST column (on a
//!   PostgreSQL home only) and `logs --json` name it;
//! - `logs` on the other home prints the turn's output from the `turn_output` table, and only
//!   the tail with a truncation line when the output was over the table's bound; an unknown turn
//!   is refused as on a SQLite home;
//! - `tollgate drain HOST`: the drained host's submits queue and do not start (its own reconcile
//!   starts nothing either), its running turn finishes, the other host's reconcile starts the
//!   queued turn there; `hosts` shows the drain; `--undo` lets it start turns again; an invalid
//!   name is refused (HOST_INVALID), a valid unknown one says that it holds no lease, and a SQLite
//!   home refuses `drain` naming its tollgate.toml.
//!
//! The server is `TOLLGATE_TEST_POSTGRES` (tests/common/postgres.rs): unset, these tests skip
//! with a message; with `TOLLGATE_REQUIRE_POSTGRES=1` a missing server fails them.
mod common;

use common::fleet::{home_on, json, ok, shared_url, tollgate, turn_view, wait_state};
use common::postgres::{server, unique};
use std::time::{Duration, Instant};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn each_turn_names_its_host_and_logs_on_another_host_print_its_output_from_the_database() {
    let Some(server) = server() else { return };
    let url = shared_url(&server, "ops-logs");
    let (host_a, host_b) = (unique("ops-a"), unique("ops-b"));
    let tmp = tempfile::tempdir().expect("tempdir");
    let a = home_on(&tmp.path().join("a"), &url, &host_a, 2);
    let b = home_on(&tmp.path().join("b"), &url, &host_b, 2);

    // A turn runs on host a (its runner is a's), printing to both streams.
    ok(
        &a,
        &[
            "submit",
            "--wait",
            "--task",
            "out",
            "--",
            "sh",
            "-c",
            "echo hello-from-a; echo trouble-from-a >&2",
        ],
    );
    assert!(
        !b.join("tasks/out/turns/1/stdout.log").exists(),
        "b has no local log of a's turn: the test would prove nothing"
    );

    // Its host is in its record, as every home of the fleet sees it.
    for home in [&a, &b] {
        let turn = turn_view(home, "out", 1);
        assert_eq!(turn["host"], host_a.as_str(), "{turn}");
        assert_eq!(turn["state"], "completed", "{turn}");
    }
    let table = text(&ok(&b, &["status"]).stdout);
    let header = table.lines().find(|l| l.starts_with("ID")).expect("header");
    assert!(header.contains("HOST"), "{table}");
    let row = table
        .lines()
        .find(|l| l.contains(" out "))
        .expect("the turn's row");
    assert!(row.contains(&host_a), "{table}");

    // `logs` on b prints a's output, each stream to its own.
    let out = ok(&b, &["logs", "out"]);
    assert_eq!(
        text(&out.stdout),
        "hello-from-a\n",
        "{}",
        common::describe(&out)
    );
    assert_eq!(
        text(&out.stderr),
        "trouble-from-a\n",
        "{}",
        common::describe(&out)
    );
    let doc = json(&b, &["logs", "--json", "out"]);
    assert_eq!(doc["host"], host_a.as_str(), "{doc}");
    assert_eq!(doc["stdout"], "hello-from-a\n", "{doc}");
    assert_eq!(doc["stderr"], "trouble-from-a\n", "{doc}");
    // `--follow` of an ended turn prints it all and returns.
    let out = ok(&b, &["logs", "--follow", "out"]);
    assert_eq!(
        text(&out.stdout),
        "hello-from-a\n",
        "{}",
        common::describe(&out)
    );
    // On a itself the local file is the source.
    assert_eq!(text(&ok(&a, &["logs", "out"]).stdout), "hello-from-a\n");

    // Over the table's bound (1 MiB of a stream): b gets the tail, after a truncation line.
    let bound = tollgate::queue::TURN_OUTPUT_MAX_BYTES;
    let script = format!(
        "head -c {} /dev/zero | tr '\\0' x; echo; echo TAIL-MARK",
        bound + 300_000
    );
    ok(
        &a,
        &[
            "submit", "--wait", "--task", "big", "--", "sh", "-c", &script,
        ],
    );
    let out = ok(&b, &["logs", "big"]);
    let stdout = text(&out.stdout);
    let (line, rest) = stdout.split_once('\n').expect("a first line");
    assert!(
        line.contains("output truncated") && line.contains(&host_a),
        "{line}"
    );
    assert!(rest.ends_with("x\nTAIL-MARK\n"), "the tail is kept");
    let total = bound + 300_000 + "\nTAIL-MARK\n".len() as u64;
    let kept = rest.len() as u64;
    assert!(
        kept <= bound && kept > bound / 2,
        "at most the bound is kept, in whole chunks: {kept}"
    );
    assert!(line.contains(&format!("{} bytes", total - kept)), "{line}");
    let doc = json(&b, &["logs", "--json", "big"]);
    assert_eq!(
        doc["stdout_skipped_bytes"].as_u64(),
        Some(total - kept),
        "{}",
        doc["stdout_skipped_bytes"]
    );

    // An unknown turn: the same refusal and exit code as on a SQLite home.
    let sqlite = common::init_home(&tmp.path().join("sqlite"), 1);
    ok(
        &sqlite,
        &["submit", "--wait", "--task", "out", "--", "true"],
    );
    let on_sqlite = tollgate(&sqlite, &["logs", "out:99"]);
    let on_fleet = tollgate(&b, &["logs", "out:99"]);
    assert!(
        !on_fleet.status.success(),
        "{}",
        common::describe(&on_fleet)
    );
    assert_eq!(on_fleet.status.code(), on_sqlite.status.code());
    assert!(
        text(&on_fleet.stderr).contains("99"),
        "{}",
        common::describe(&on_fleet)
    );
    // A SQLite home's table has no HOST column, and its turns name no host.
    let table = text(&ok(&sqlite, &["status"]).stdout);
    assert!(!table.contains("HOST"), "{table}");
    assert!(turn_view(&sqlite, "out", 1).get("host").is_none());
}

#[test]
fn a_drained_host_queues_its_submits_and_finishes_its_running_turn_while_another_host_starts_them()
{
    let Some(server) = server() else { return };
    let url = shared_url(&server, "ops-drain");
    let (host_a, host_b) = (unique("ops-a"), unique("ops-b"));
    let tmp = tempfile::tempdir().expect("tempdir");
    let a = home_on(&tmp.path().join("a"), &url, &host_a, 2);
    let b = home_on(&tmp.path().join("b"), &url, &host_b, 2);
    let gate = tmp.path().join("go");
    let started = tmp.path().join("started");

    // A turn of a runs until the test opens its gate (the command's own bounded wait).
    let long = format!(
        ": > {s}; i=0; while [ ! -e {g} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
        s = started.display(),
        g = gate.display()
    );
    ok(&a, &["submit", "--task", "long", "--", "sh", "-c", &long]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the long turn never started");
        std::thread::sleep(Duration::from_millis(20));
    }

    // Drain a (from b: any host may drain any host).
    let doc = json(&b, &["drain", "--json", &host_a]);
    assert_eq!(doc["drained"], true, "{doc}");
    assert_eq!(doc["changed"], true, "{doc}");
    assert!(
        doc["leases"].as_u64() >= Some(1),
        "a's runner holds a lease: {doc}"
    );
    let again = json(&a, &["drain", "--json", &host_a]);
    assert_eq!(again["changed"], false, "{again}");
    let hosts = json(&a, &["hosts", "--json"]);
    let drained: Vec<&str> = hosts["drained"]
        .as_array()
        .expect("drained list")
        .iter()
        .filter_map(|d| d["host"].as_str())
        .collect();
    assert!(drained.contains(&host_a.as_str()), "{hosts}");
    let entry = hosts["hosts"]
        .as_array()
        .and_then(|h| h.iter().find(|h| h["host"] == host_a.as_str()))
        .unwrap_or_else(|| panic!("a holds a lease: {hosts}"));
    assert_eq!(entry["drained"], true, "{hosts}");
    assert!(text(&ok(&a, &["hosts"]).stdout).contains("drained"));
    assert!(text(&ok(&a, &["status"]).stdout).contains("is drained"));

    // A submit on a queues durably and says so, though a slot is free; nothing starts it on a.
    let out = ok(&a, &["submit", "--task", "later", "--", "true"]);
    let said = text(&out.stdout);
    assert!(
        said.contains("queued") && said.contains("drained"),
        "{}",
        common::describe(&out)
    );
    ok(&a, &["reconcile"]);
    let turn = turn_view(&a, "later", 1);
    assert_eq!(turn["state"], "queued", "{turn}");
    assert!(turn.get("started_at_millis").is_none(), "{turn}");

    // The running turn finishes (draining kills nothing); its finish on a starts nothing.
    std::fs::write(&gate, b"").expect("open the gate");
    let long_turn = wait_state(&a, "long", 1, "completed");
    assert_eq!(long_turn["host"], host_a.as_str(), "{long_turn}");
    let turn = turn_view(&a, "later", 1);
    assert_eq!(turn["state"], "queued", "a's finish left it queued: {turn}");

    // b's reconcile starts it, on b.
    ok(&b, &["reconcile"]);
    let turn = wait_state(&b, "later", 1, "completed");
    assert_eq!(turn["host"], host_b.as_str(), "{turn}");

    // Undrained, a starts turns again.
    let doc = json(&a, &["drain", "--undo", "--json", &host_a]);
    assert_eq!(
        (doc["drained"].clone(), doc["changed"].clone()),
        (false.into(), true.into())
    );
    let hosts = json(&a, &["hosts", "--json"]);
    assert!(!hosts["drained"].to_string().contains(&host_a), "{hosts}");
    ok(&a, &["submit", "--wait", "--task", "again", "--", "true"]);
    assert_eq!(turn_view(&b, "again", 1)["host"], host_a.as_str());

    // A valid name no host uses: allowed, and said; an invalid one is refused; nothing changed.
    let nobody = unique("nobody");
    let out = ok(&a, &["drain", &nobody]);
    assert!(
        text(&out.stdout).contains("no such host holds a lease"),
        "{}",
        common::describe(&out)
    );
    ok(&a, &["drain", "--undo", &nobody]);
    let out = tollgate(&a, &["drain", "not a host"]);
    assert_eq!(out.status.code(), Some(2), "{}", common::describe(&out));
    assert!(
        text(&out.stderr).contains("HOST_INVALID"),
        "{}",
        common::describe(&out)
    );
    let hosts = json(&a, &["hosts", "--json"]);
    assert!(!hosts["drained"].to_string().contains(&nobody), "{hosts}");

    // A SQLite home has no fleet: refused, naming its tollgate.toml.
    let sqlite = common::init_home(&tmp.path().join("sqlite"), 1);
    let out = tollgate(&sqlite, &["drain", &host_a]);
    assert_eq!(out.status.code(), Some(2), "{}", common::describe(&out));
    assert!(
        text(&out.stderr).contains("tollgate.toml"),
        "{}",
        common::describe(&out)
    );
}
