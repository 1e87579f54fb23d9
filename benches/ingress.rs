//! Load generator for `tollgate serve` on loopback (plain harness): requests per second and
//! p50/p99 latency of the accept path, the duplicate path (a redelivery of an accepted id, 200),
//! the refusal paths (at capacity, 503; bad signature, 401) and, as the baseline in the same run,
//! a trivial answer of the same server (an unknown route, 404); plus the serve process's memory
//! per retained delivery (docs/PERFORMANCE.md, "Ingress").
//!
//! `cargo bench --bench ingress` (knobs: INGRESS_BENCH_SECS, INGRESS_BENCH_THREADS,
//! INGRESS_BENCH_RETAINED). Each client thread keeps one HTTP/1.1 connection open.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const SECRET: &str = "bench-secret";

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    addr: String,
}

impl Conn {
    fn open(addr: &str) -> Conn {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        Conn {
            reader: BufReader::new(stream.try_clone().expect("clone")),
            writer: stream,
            addr: addr.to_string(),
        }
    }

    /// One keep-alive request; returns the status and the answer's body.
    fn post(&mut self, path: &str, headers: &[(&str, String)], body: &[u8]) -> (u16, Vec<u8>) {
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        self.writer.write_all(head.as_bytes()).expect("write");
        self.writer.write_all(body).expect("write body");
        let mut status_line = String::new();
        self.reader.read_line(&mut status_line).expect("status");
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status code");
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).expect("header");
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().expect("length");
                }
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).expect("body");
        (status, body)
    }
}

/// The `tollgate-v1` signature of spec/ingress.md (timestamp, delivery, tenant, scope, body).
fn signed(id: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).expect("key");
    mac.update(format!("tollgate-v1\n{t}\n{id}\n\n{id}\n").as_bytes());
    mac.update(body);
    vec![
        ("X-Tollgate-Delivery", id.to_string()),
        ("X-Tollgate-Scope", id.to_string()),
        (
            "X-Tollgate-Signature",
            format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes())),
        ),
    ]
}

struct Figures {
    requests: usize,
    /// Requests each connection sent, in connection order.
    per_connection: Vec<u64>,
    seconds: f64,
    p50_micros: u64,
    p99_micros: u64,
}

impl Figures {
    fn rps(&self) -> f64 {
        self.requests as f64 / self.seconds
    }
}

fn summarize(mut latencies: Vec<u64>, per_connection: Vec<u64>, seconds: f64) -> Figures {
    latencies.sort_unstable();
    let at = |q: f64| {
        let i = ((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[i]
    };
    Figures {
        requests: latencies.len(),
        per_connection,
        seconds,
        p50_micros: at(0.50),
        p99_micros: at(0.99),
    }
}

/// `threads` connections send requests made by `make(thread, n)` until `stop(total)` says so or
/// `secs` pass; every answer must have `expected` status.
fn load(
    addr: &str,
    threads: u64,
    secs: u64,
    max_requests: u64,
    expected: u16,
    make: impl Fn(u64, u64) -> (String, Vec<(&'static str, String)>, Vec<u8>) + Sync,
) -> Figures {
    let sent = AtomicU64::new(0);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let per_thread: Vec<Vec<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (sent, make) = (&sent, &make);
                s.spawn(move || {
                    let mut conn = Conn::open(addr);
                    let mut mine = Vec::new();
                    let mut n = 0;
                    while Instant::now() < deadline
                        && sent.fetch_add(1, Ordering::Relaxed) < max_requests
                    {
                        let (path, headers, body) = make(t, n);
                        let began = Instant::now();
                        let (status, answer) = conn.post(&path, &headers, &body);
                        mine.push(began.elapsed().as_micros() as u64);
                        assert_eq!(
                            status,
                            expected,
                            "{path}: {}",
                            String::from_utf8_lossy(&answer)
                        );
                        n += 1;
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client"))
            .collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    let counts = per_thread.iter().map(|l| l.len() as u64).collect();
    summarize(per_thread.into_iter().flatten().collect(), counts, seconds)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn main() {
    let secs = knob("INGRESS_BENCH_SECS", 5);
    let threads = knob("INGRESS_BENCH_THREADS", 4);
    let retained = knob("INGRESS_BENCH_RETAINED", 500);
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    let release = dir.path().join("release");
    std::fs::create_dir_all(&home).expect("home");
    // The gate admits before it deduplicates (core `decide_delivery`): a duplicate holds a unit of
    // capacity for a moment, so `threads` units are left free for the duplicate phase and filled
    // after it, before the refusal phase.
    let capacity = retained + threads;
    let script = format!(
        "i=0; while [ ! -e '{}' ] && [ -d '{}' ] && [ $i -lt 6000 ]; do sleep 0.1; i=$((i+1)); done",
        release.display(),
        home.display()
    );
    std::fs::write(
        home.join("tollgate.toml"),
        format!(
            "workers = 1\n[serve]\nmax_detached = {capacity}\n\n[[route]]\npath = \"/hook\"\nadapter = \"generic\"\nsecret_env = \"BENCH_SECRET\"\ntask = \"b-{{scope}}\"\nrun = [\"sh\", \"-c\", {script:?}]\n"
        ),
    )
    .expect("config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("--home")
        .arg(&home)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("BENCH_SECRET", SECRET)
        .env("TOLLGATE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("address line");
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .expect("listening line")
        .to_string();
    let pid = child.id();
    let body =
        br#"{"ref":"refs/heads/main","after":"0000000000000000000000000000000000000000"}"#.to_vec();

    // The baseline sends no body: a 404 does not read one, and an unread body ends the keep-alive.
    let baseline = load(&addr, threads, secs, u64::MAX, 404, |_, _| {
        ("/nowhere".into(), Vec::new(), Vec::new())
    });
    let rss_before = rss_kib(pid);
    let accept = load(&addr, threads, 600, retained, 200, |t, n| {
        let id = format!("a{t}-{n}");
        ("/hook".into(), signed(&id, &body), body.clone())
    });
    let rss_after = rss_kib(pid);
    // Redeliveries of the accepted ids (each connection cycles through the ones it sent): the
    // gate's mark answers them, nothing is queued.
    let sent: Vec<u64> = accept.per_connection.clone();
    let duplicate = load(&addr, threads, secs, u64::MAX, 200, |t, n| {
        let mine = sent.get(t as usize).copied().unwrap_or(0).max(1);
        let id = format!("a{t}-{}", n % mine);
        ("/hook".into(), signed(&id, &body), body.clone())
    });
    let fill = load(&addr, threads, 600, threads, 200, |t, n| {
        let id = format!("f{t}-{n}");
        ("/hook".into(), signed(&id, &body), body.clone())
    });
    assert_eq!(fill.requests as u64, threads, "filling the capacity");
    let refuse = load(&addr, threads, secs, u64::MAX, 503, |t, n| {
        let id = format!("r{t}-{n}");
        ("/hook".into(), signed(&id, &body), body.clone())
    });
    let bad_signature = load(&addr, threads, secs, u64::MAX, 401, |t, n| {
        let id = format!("x{t}-{n}");
        let mut headers = signed(&id, &body);
        headers[2].1 = format!("sha256={}", "0".repeat(64));
        ("/hook".into(), headers, body.clone())
    });
    std::fs::write(&release, b"").expect("release");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();

    println!("ingress benchmark: {threads} keep-alive connections on loopback, {secs}s per timed phase, {} cores", std::thread::available_parallelism().map_or(0, |n| n.get()));
    println!("| path | requests | req/s | p50 (µs) | p99 (µs) | req/s vs baseline |");
    println!("|---|---|---|---|---|---|");
    for (name, f) in [
        ("baseline: unknown route, empty body (404)", &baseline),
        ("refusal: at capacity (503 + Retry-After)", &refuse),
        ("refusal: bad signature (401)", &bad_signature),
        ("duplicate: redelivery of an accepted id (200)", &duplicate),
        ("accept: durable turn, then 200", &accept),
    ] {
        println!(
            "| {name} | {} | {:.0} | {} | {} | {:.2} |",
            f.requests,
            f.rps(),
            f.p50_micros,
            f.p99_micros,
            f.rps() / baseline.rps()
        );
    }
    let per =
        (rss_after.saturating_sub(rss_before) as f64 * 1024.0) / accept.requests.max(1) as f64;
    println!(
        "memory: serve RSS {rss_before} KiB before, {rss_after} KiB with {} retained deliveries: {:.0} bytes per retained delivery",
        accept.requests, per
    );
}
