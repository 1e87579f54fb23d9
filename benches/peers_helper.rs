//! Helpers of `benches/peers.sh` (plain harness, no timed assertion): run by the script, not by
//! `cargo bench` on its own (without a subcommand it only says so).
//!
//! - `fill HOME ROWS`: the documented fast path to a deep queue (as `benches/submit.rs`'s
//!   prefill): in one transaction of the home's store, one live reservation held by this process
//!   (so every slot of a 1-slot home is taken and the next `tollgate submit` parks) and ROWS parked
//!   rows behind it, enqueued and parked through the library's queue steps. The rows have no turn
//!   or task records: only the queue is deep. Prints `ready ROWS`, then holds the reservation
//!   (stays alive) until its standard input closes.
//! - `load ADDR MODE CONNECTIONS SECS MAX PREFIX`: a load generator for `tollgate serve` on
//!   loopback. CONNECTIONS keep-alive HTTP/1.1 connections send requests for SECS seconds or until
//!   MAX requests were sent. MODE `accept`: `POST /hook` with a generic delivery signed by the
//!   `tollgate-v1` scheme of spec/ingress.md (secret: `$BENCH_SECRET`) and a fresh delivery id
//!   (`PREFIX-connection-n`); MODE `404`: `POST /nowhere` with an empty body (the same server's
//!   cheapest answer). Prints one line of `key=value` figures: requests, seconds, rps, p50_us,
//!   p99_us, ok (answers with the expected status: 200 or 404), other (any other status), errors
//!   (connection failures, reconnected).

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tollgate::dispatch::DispatchError;
use tollgate::home::Home;
use tollgate::process::{self_identity, ProcLiveness};
use tollgate::protocol::slots::{
    enqueue, park, reserve_runner_slot, QueueState, ReserveOutcome, SlotToken, TurnKey,
};
use tollgate::runtime::Runtime;
use tollgate::tasks;

/// Longest a load phase may run whatever SECS says (the request loops are bounded in time).
const MAX_LOAD_SECS: u64 = 600;
/// Largest response header block read (a bound on one answer's lines).
const MAX_HEADER_LINES: usize = 64;

fn usage() -> ! {
    eprintln!(
        "usage: peers_helper fill HOME ROWS | peers_helper load ADDR accept|404 CONNECTIONS SECS MAX PREFIX\n\
         (run by benches/peers.sh)"
    );
    std::process::exit(2)
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, name: &str) -> T {
    args.get(i).and_then(|a| a.parse().ok()).unwrap_or_else(|| {
        eprintln!("peers_helper: argument {i} ({name}) is missing or not valid");
        usage()
    })
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args.first().map(String::as_str) {
        Some("fill") => fill(
            arg::<PathBuf>(&args, 1, "HOME"),
            arg::<usize>(&args, 2, "ROWS"),
        ),
        Some("load") => {
            let mode: String = arg(&args, 2, "MODE");
            let accept = match mode.as_str() {
                "accept" => true,
                "404" => false,
                _ => usage(),
            };
            let figures = load(
                &arg::<String>(&args, 1, "ADDR"),
                accept,
                arg(&args, 3, "CONNECTIONS"),
                arg::<u64>(&args, 4, "SECS").min(MAX_LOAD_SECS),
                arg(&args, 5, "MAX"),
                &arg::<String>(&args, 6, "PREFIX"),
            );
            println!("{figures}");
        }
        None => println!("benches/peers_helper.rs: run by benches/peers.sh"),
        Some(_) => usage(),
    }
}

fn fill(home: PathBuf, rows: usize) {
    let rt = Runtime::open(Home::at(&home)).unwrap_or_else(|e| {
        eprintln!("peers_helper: cannot open the home {}: {e}", home.display());
        std::process::exit(3)
    });
    let me = self_identity().unwrap_or_else(|e| {
        eprintln!("peers_helper: {e}");
        std::process::exit(3)
    });
    let filled = rt.store.transact(|state: &mut QueueState| {
        let now = tasks::now_millis();
        let busy = TurnKey::new("peers-busy", 1);
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
        if !matches!(outcome, ReserveOutcome::Acquired { .. }) {
            eprintln!("peers_helper: the home's only slot is not free: {outcome:?}");
            std::process::exit(3)
        }
        for i in 0..rows {
            let key = TurnKey::new(format!("peers-p{}", i / 1000), (i % 1000) as u32 + 1);
            enqueue(state, &key, me, now)?;
            park(state, &key)?;
        }
        Ok::<_, DispatchError>(())
    });
    if let Err(e) = filled {
        eprintln!("peers_helper: filling {} failed: {e}", home.display());
        std::process::exit(3)
    }
    println!("ready {rows}");
    let _ = std::io::stdout().flush();
    // Hold the reservation (this process is its live holder) until the script closes stdin.
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}

struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Conn {
    fn open(addr: &str) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Conn {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }

    /// One keep-alive request; returns the status (the body is read and dropped).
    fn post(
        &mut self,
        addr: &str,
        path: &str,
        headers: &[(&str, String)],
        body: &[u8],
    ) -> std::io::Result<u16> {
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        self.writer.write_all(head.as_bytes())?;
        self.writer.write_all(body)?;
        let bad =
            |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
        let mut status_line = String::new();
        if self.reader.read_line(&mut status_line)? == 0 {
            return Err(bad("connection closed"));
        }
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("no status code"))?;
        let mut length = 0usize;
        for _ in 0..MAX_HEADER_LINES {
            let mut line = String::new();
            if self.reader.read_line(&mut line)? == 0 {
                return Err(bad("connection closed in the headers"));
            }
            let line = line.trim_end();
            if line.is_empty() {
                let mut rest = vec![0; length];
                self.reader.read_exact(&mut rest)?;
                return Ok(status);
            }
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().map_err(|_| bad("bad content-length"))?;
                }
            }
        }
        Err(bad("too many header lines"))
    }
}

/// The `tollgate-v1` signature of spec/ingress.md over timestamp, delivery, tenant, scope, body.
fn signed(secret: &[u8], id: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let tenant = "bench";
    let scope = "peers";
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(mac) => mac,
        Err(e) => {
            eprintln!("peers_helper: bad secret: {e}");
            std::process::exit(2)
        }
    };
    mac.update(format!("tollgate-v1\n{t}\n{id}\n{tenant}\n{scope}\n").as_bytes());
    mac.update(body);
    vec![
        ("X-Tollgate-Delivery", id.to_string()),
        ("X-Tollgate-Tenant", tenant.to_string()),
        ("X-Tollgate-Scope", scope.to_string()),
        (
            "X-Tollgate-Signature",
            format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes())),
        ),
    ]
}

fn load(addr: &str, accept: bool, connections: u64, secs: u64, max: u64, prefix: &str) -> String {
    let secret = std::env::var("BENCH_SECRET").unwrap_or_default();
    if accept && secret.is_empty() {
        eprintln!("peers_helper: BENCH_SECRET is unset or empty");
        std::process::exit(2)
    }
    let body = br#"{"ref":"refs/heads/main","after":"0000000000000000000000000000000000000000"}"#;
    let expected = if accept { 200 } else { 404 };
    let sent = AtomicU64::new(0);
    let (ok, other, errors) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let mut latencies: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..connections)
            .map(|c| {
                let (sent, ok, other, errors, secret) = (&sent, &ok, &other, &errors, &secret);
                s.spawn(move || {
                    let mut mine = Vec::new();
                    let mut conn: Option<Conn> = None;
                    let mut n = 0u64;
                    while Instant::now() < deadline && sent.fetch_add(1, Ordering::Relaxed) < max {
                        let c_ = match conn.take() {
                            Some(c_) => Ok(c_),
                            None => Conn::open(addr),
                        };
                        let mut c_ = match c_ {
                            Ok(c_) => c_,
                            Err(_) => {
                                errors.fetch_add(1, Ordering::Relaxed);
                                std::thread::sleep(Duration::from_millis(10));
                                continue;
                            }
                        };
                        let began = Instant::now();
                        let status = if accept {
                            let id = format!("{prefix}-{c}-{n}");
                            let headers = signed(secret.as_bytes(), &id, body);
                            c_.post(addr, "/hook", &headers, body)
                        } else {
                            c_.post(addr, "/nowhere", &[], &[])
                        };
                        n += 1;
                        match status {
                            Ok(code) => {
                                mine.push(began.elapsed().as_micros() as u64);
                                if code == expected { ok } else { other }
                                    .fetch_add(1, Ordering::Relaxed);
                                conn = Some(c_);
                            }
                            Err(_) => {
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let at = |q: f64| -> u64 {
        if latencies.is_empty() {
            return 0;
        }
        let i = ((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[i]
    };
    let ok = ok.load(Ordering::Relaxed);
    format!(
        "requests={} seconds={seconds:.3} rps={:.1} p50_us={} p99_us={} ok={ok} other={} errors={}",
        latencies.len(),
        ok as f64 / seconds,
        at(0.50),
        at(0.99),
        other.load(Ordering::Relaxed),
        errors.load(Ordering::Relaxed)
    )
}
