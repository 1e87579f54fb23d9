//! Slots: submit cost (issue 2). A plain harness: `cargo bench --bench submit`.
//!
//! Every figure is reported with a baseline (spawning `true`; one durable small-file publish) measured in the same run on the same machine, and the
//! ratio is the number to compare across machines:
//! 1. baseline: spawning `true` directly and waiting for it (fork + exec + wait);
//! 2. submit-to-started latency: from just before an in-process `submit_detached` to the
//!    `started_at_millis` the runner writes into the turn record once it has taken its slot over
//!    (millisecond clock, so averaged over many turns), and the wall time of a `tollgate submit`
//!    process; both against the baseline;
//! 3. throughput: 500 `tollgate submit -- true` processes back to back on 2 worker slots (turns start
//!    or park), and the time until all 500 have run;
//! 4. growth: the cost of one submit that parks, with 10, 1 000 and 10 000 parked rows already in
//!    the home's database (pre-filled through the library), against the cost at 10.
//!
//! Not a test: nothing here asserts on time. `cargo test --benches` only prints how to run it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tollgate::dispatch::DispatchError;
use tollgate::home::Home;
use tollgate::process::{self_identity, DetachedSpawner, ProcLiveness};
use tollgate::protocol::slots::{
    enqueue, park, reserve_runner_slot, ProcessIdentity, QueueState, ReserveOutcome, SlotToken,
    TurnKey,
};
use tollgate::runtime::Runtime;
use tollgate::submit::{submit_detached, Placement, SubmitRequest};
use tollgate::tasks;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");
/// Bound on waiting for runners to finish (a stuck runner ends the bench with a message).
const DRAIN_DEADLINE: Duration = Duration::from_secs(300);

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

struct Stats {
    mean: f64,
    median: f64,
}

fn stats(mut samples: Vec<f64>) -> Stats {
    samples.sort_by(|a, b| a.total_cmp(b));
    let mean = samples.iter().sum::<f64>() / samples.len() as f64;
    Stats {
        mean,
        median: samples[samples.len() / 2],
    }
}

fn fresh_home(root: &Path, name: &str, workers: usize) -> Runtime {
    let home = Home::at(root.join(name));
    home.init(Some(workers)).expect("init home");
    let mut rt = Runtime::open(home.clone()).expect("open home");
    rt.spawner = Box::new(DetachedSpawner {
        home,
        executable: Some(PathBuf::from(BIN)),
        settle: None,
    });
    rt
}

fn request(argv: &[&str]) -> SubmitRequest {
    SubmitRequest {
        task: Some("bench".to_string()),
        // Only the worker-slot cap limits the task, as in a home of independent turns.
        strategy: Some(tollgate::protocol::admission::Strategy::Concurrent {
            max: tollgate::protocol::admission::MAX_CONCURRENT,
        }),
        argv: argv.iter().map(std::ffi::OsString::from).collect(),
        cwd: Some(std::env::temp_dir()),
        env: BTreeMap::new(),
        labels: Vec::new(),
        timeout_millis: None,
        schedule: Default::default(),
        delivery: None,
    }
}

/// Polls until the queue has no rows left (runners finished and left).
fn wait_drained(rt: &Runtime) {
    let deadline = Instant::now() + DRAIN_DEADLINE;
    loop {
        let queue = rt.store.load().expect("load queue");
        if queue.entries.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "queue did not drain: {} rows",
            queue.entries.len()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn wait_settled(rt: &Runtime, key: &TurnKey) -> tasks::TurnRecord {
    let deadline = Instant::now() + DRAIN_DEADLINE;
    loop {
        if let Some(turn) = tasks::load_turn(&rt.home, key).expect("load turn") {
            if turn.is_settled() {
                return turn;
            }
        }
        assert!(Instant::now() < deadline, "{key} did not end");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One durable publish of a small file (write temp, fsync, rename, fsync dir): the storage cost
/// every queue change pays at least once.
fn baseline_publish(root: &Path, n: usize) -> Stats {
    let path = root.join("publish-baseline.json");
    let samples = (0..n)
        .map(|_| {
            let start = Instant::now();
            tollgate::fsutil::publish_bytes(&path, b"{}\n").expect("publish");
            millis(start.elapsed())
        })
        .collect();
    stats(samples)
}

fn baseline_spawn_true(n: usize) -> Stats {
    let samples = (0..n)
        .map(|_| {
            let start = Instant::now();
            let status = Command::new("true").status().expect("spawn true");
            assert!(status.success());
            millis(start.elapsed())
        })
        .collect();
    stats(samples)
}

/// In-process submit of `true` on a free slot: submit call time, and submit-to-started latency.
fn submit_to_started(root: &Path, me: ProcessIdentity, n: usize) -> (Stats, Stats) {
    let rt = fresh_home(root, "latency", 4);
    let mut call = Vec::with_capacity(n);
    let mut started = Vec::with_capacity(n);
    for _ in 0..n {
        let t0_epoch = tasks::now_millis();
        let t0 = Instant::now();
        let submitted = submit_detached(&rt, me, request(&["true"])).expect("submit");
        call.push(millis(t0.elapsed()));
        assert!(
            matches!(submitted.placement, Placement::Started(_)),
            "{:?}",
            submitted.placement
        );
        let turn = wait_settled(&rt, &submitted.key);
        let at = turn.started_at_millis.expect("started_at_millis");
        started.push(at.saturating_sub(t0_epoch) as f64);
        wait_drained(&rt);
    }
    (stats(call), stats(started))
}

/// `tollgate submit -- true` processes, one after another; each one's wall time.
fn cli_submits(home: &Path, n: usize) -> (Stats, Duration) {
    let start = Instant::now();
    let samples = (0..n)
        .map(|_| {
            let t0 = Instant::now();
            let status = Command::new(BIN)
                .arg("--home")
                .arg(home)
                .args(["submit", "--task", "bench", "--", "true"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .status()
                .expect("spawn tollgate submit");
            assert!(status.success());
            millis(t0.elapsed())
        })
        .collect();
    (stats(samples), start.elapsed())
}

/// A queue with one live reservation (held by this process, so every slot of a 1-slot home is
/// taken and new submits park) and `parked` parked rows behind it.
fn prefill(rt: &Runtime, me: ProcessIdentity, parked: usize) {
    rt.store
        .transact(|state: &mut QueueState| {
            let now = tasks::now_millis();
            let busy = TurnKey::new("busy", 1);
            enqueue(state, &busy, me, now)?;
            let outcome = reserve_runner_slot(
                state,
                &busy,
                me,
                None,
                1,
                SlotToken::generate(),
                &ProcLiveness,
            )?;
            assert!(matches!(outcome, ReserveOutcome::Acquired { .. }));
            for i in 0..parked {
                let key = TurnKey::new(format!("p{}", i / 1000), (i % 1000) as u32 + 1);
                enqueue(state, &key, me, now)?;
                park(state, &key)?;
            }
            Ok::<_, DispatchError>(())
        })
        .expect("prefill queue");
}

fn parked_submit_cost(root: &Path, me: ProcessIdentity, parked: usize, n: usize) -> Stats {
    let rt = fresh_home(root, &format!("parked-{parked}"), 1);
    prefill(&rt, me, parked);
    let samples = (0..n)
        .map(|_| {
            let t0 = Instant::now();
            let submitted = submit_detached(&rt, me, request(&["true"])).expect("submit");
            let elapsed = millis(t0.elapsed());
            // Parked by the slot cap, or in the task's line behind the rows parked before it.
            assert!(
                matches!(
                    submitted.placement,
                    Placement::Parked | Placement::Waiting { .. }
                ),
                "{:?}",
                submitted.placement
            );
            elapsed
        })
        .collect();
    let bytes = std::fs::metadata(rt.home.db_path()).map_or(0, |m| m.len());
    println!(
        "    ({parked} parked rows before, {} after the {n} timed submits: tollgate.db is {} KiB)",
        parked + n,
        bytes / 1024
    );
    stats(samples)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("benches/submit.rs: run it with `cargo bench --bench submit`");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let me = self_identity().expect("own identity");
    println!("Slots: submit cost (home in {})", root.display());

    let base = baseline_spawn_true(200);
    println!(
        "baseline  spawn+wait `true`: mean {:.3} ms, median {:.3} ms",
        base.mean, base.median
    );

    let publish = baseline_publish(root, 100);
    println!(
        "baseline  one durable publish of a small file: mean {:.3} ms, median {:.3} ms",
        publish.mean, publish.median
    );

    let (call, started) = submit_to_started(root, me, 100);
    println!(
        "latency   in-process submit_detached call: mean {:.3} ms, median {:.3} ms ({:.1}x baseline mean)",
        call.mean,
        call.median,
        call.mean / base.mean
    );
    println!(
        "latency   submit-to-started (runner took over): mean {:.2} ms, median {:.0} ms ({:.1}x baseline mean)",
        started.mean,
        started.median,
        started.mean / base.mean
    );

    let cli_home = root.join("cli");
    Home::at(&cli_home).init(Some(2)).expect("init cli home");
    let (cli, total) = cli_submits(&cli_home, 500);
    let cli_rt = fresh_home(root, "cli", 2);
    let drain_start = Instant::now();
    wait_drained(&cli_rt);
    println!(
        "throughput 500 x `tollgate submit -- true` on 2 slots: {:.0} submits/s ({:.3} s); per submit mean {:.3} ms, median {:.3} ms ({:.1}x baseline mean); all ran {:.2} s after the last submit",
        500.0 / total.as_secs_f64(),
        total.as_secs_f64(),
        cli.mean,
        cli.median,
        cli.mean / base.mean,
        drain_start.elapsed().as_secs_f64()
    );

    let at10 = parked_submit_cost(root, me, 10, 200);
    println!(
        "growth    submit that parks, 10 parked rows: mean {:.3} ms, median {:.3} ms ({:.1}x one publish)",
        at10.mean,
        at10.median,
        at10.mean / publish.mean
    );
    for (parked, n) in [(1_000usize, 100usize), (10_000, 30)] {
        let s = parked_submit_cost(root, me, parked, n);
        println!(
            "growth    submit that parks, {parked} parked rows: mean {:.3} ms, median {:.3} ms ({:.1}x the cost at 10)",
            s.mean,
            s.median,
            s.mean / at10.mean
        );
    }
}
