//! Helpers for the `tollgate serve` tests: a real `serve` process on a loopback port, a blocking
//! HTTP/1.1 client over std's TcpStream, request signing, and bounded polling.
#![allow(dead_code)]

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const SECRET: &str = "test-secret";
pub const SECRET_ENV: &str = "SERVE_TEST_SECRET";

pub struct TestHome {
    pub dir: tempfile::TempDir,
    pub home: PathBuf,
}

impl TestHome {
    /// A home whose tollgate.toml is `workers = N` followed by `rest`.
    pub fn new(workers: usize, rest: &str) -> TestHome {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(
            home.join("tollgate.toml"),
            format!("workers = {workers}\n{rest}\n"),
        )
        .unwrap();
        TestHome { dir, home }
    }

    /// A path in the test's scratch directory (outside the home).
    pub fn scratch(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn log(&self) -> Vec<Value> {
        match std::fs::read_to_string(self.home.join("serve.log.jsonl")) {
            Ok(text) => text
                .lines()
                .filter(|l| !l.is_empty())
                .map(|l| serde_json::from_str(l).unwrap())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    pub fn tollgate(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("--home")
            .arg(&self.home)
            .args(args)
            .env(SECRET_ENV, SECRET)
            .output()
            .unwrap()
    }

    pub fn status(&self) -> Value {
        let out = self.tollgate(&["status", "--json"]);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

/// A running `tollgate serve`; killed if still running when dropped.
pub struct Serve {
    pub child: Child,
    pub addr: String,
}

impl Serve {
    pub fn start(home: &TestHome) -> Serve {
        Serve::spawn(Serve::command(home))
    }

    /// The command `start` runs: `serve` on an ephemeral loopback port, with the route secret in
    /// its environment, stderr inherited. Tests add variables or redirect stderr before `spawn`.
    pub fn command(home: &TestHome) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
        cmd.arg("--home")
            .arg(&home.home)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env(SECRET_ENV, SECRET)
            .env("TOLLGATE_LOG", "warn")
            .current_dir(home.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        cmd
    }

    /// Spawns `cmd` (a [`Serve::command`]) and waits for the line saying where it listens.
    pub fn spawn(mut cmd: Command) -> Serve {
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Some(addr) = line.strip_prefix("listening on http://") {
                    let _ = tx.send(addr.to_string());
                }
            }
        });
        // Which of the two failures it is decides where to look: a serve that exited printed
        // why on the inherited stderr; one still running after the wait is stuck before its
        // listener (recovery, a lock).
        let addr = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(addr) => addr,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait();
                panic!(
                    "serve exited before saying where it listens: {status:?} (its stderr is above)"
                )
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("serve did not say where it listens within 60 s (killed)")
            }
        };
        Serve { child, addr }
    }

    pub fn post(&self, path: &str, headers: &[(&str, String)], body: &[u8]) -> Response {
        request(&self.addr, "POST", path, headers, body)
    }

    pub fn metrics(&self) -> String {
        let response = request(&self.addr, "GET", "/metrics", &[], b"");
        assert_eq!(response.status, 200);
        response.text()
    }

    /// The value of an unlabelled or labelled metric line (`name` as written before the value).
    pub fn metric(&self, name: &str) -> u64 {
        let text = self.metrics();
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
            .map(|v| v.trim().parse().unwrap())
            .unwrap_or(0)
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), signal).unwrap();
    }

    /// Waits (bounded) for the process to exit; returns its exit code.
    pub fn wait_exit(&mut self, secs: u64) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(Instant::now() < deadline, "serve did not exit in {secs}s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// One HTTP/1.1 request with `Connection: close`; the answer is read to its end.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> Response {
    let stream = TcpStream::connect(addr).unwrap();
    request_on(stream, addr, method, path, headers, body)
}

/// [`request`] on a connection already open (one a test made before serve ran out of
/// descriptors).
pub fn request_on(
    mut stream: TcpStream,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> Response {
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    // A server may answer (413) before reading the whole body and close: ignore a write error.
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    parse_response(&raw)
}

pub fn parse_response(raw: &[u8]) -> Response {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP head in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Response {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    }
}

pub fn hmac_hex(secret: &str, parts: &[&[u8]]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    for part in parts {
        mac.update(part);
    }
    hex::encode(mac.finalize().into_bytes())
}

/// Headers of a generic delivery signed now (scheme `tollgate-v1`), whose scope is its id.
pub fn generic_headers(id: &str, tenant: Option<&str>, body: &[u8]) -> Vec<(&'static str, String)> {
    generic_signed(SECRET, now_secs(), id, tenant, Some(id), body)
}

/// The `v1` signature of spec/ingress.md: HMAC-SHA256 over
/// `tollgate-v1\n<t>\n<delivery>\n<tenant>\n<scope>\n<body>` (absent headers as empty).
pub fn generic_signature(
    secret: &str,
    t: u64,
    id: &str,
    tenant: Option<&str>,
    scope: Option<&str>,
    body: &[u8],
) -> String {
    let signed = format!(
        "tollgate-v1\n{t}\n{id}\n{}\n{}\n",
        tenant.unwrap_or(""),
        scope.unwrap_or("")
    );
    format!("t={t},v1={}", hmac_hex(secret, &[signed.as_bytes(), body]))
}

/// Headers of a generic delivery signed with `secret` at `t`; the signature is at index 1.
pub fn generic_signed(
    secret: &str,
    t: u64,
    id: &str,
    tenant: Option<&str>,
    scope: Option<&str>,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    let mut headers = vec![
        ("X-Tollgate-Delivery", id.to_string()),
        (
            "X-Tollgate-Signature",
            generic_signature(secret, t, id, tenant, scope, body),
        ),
    ];
    if let Some(scope) = scope {
        headers.push(("X-Tollgate-Scope", scope.to_string()));
    }
    if let Some(tenant) = tenant {
        headers.push(("X-Tollgate-Tenant", tenant.to_string()));
    }
    headers
}

/// Headers of a generic delivery with the old body-only `sha256=` signature.
pub fn legacy_generic_headers(
    id: &str,
    tenant: Option<&str>,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    let mut headers = vec![
        ("X-Tollgate-Delivery", id.to_string()),
        (
            "X-Tollgate-Signature",
            format!("sha256={}", hmac_hex(SECRET, &[body])),
        ),
        ("X-Tollgate-Scope", id.to_string()),
    ];
    if let Some(tenant) = tenant {
        headers.push(("X-Tollgate-Tenant", tenant.to_string()));
    }
    headers
}

/// Headers of a GitHub delivery signed with the test secret.
pub fn github_headers(delivery: &str, event: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    vec![
        ("X-GitHub-Delivery", delivery.to_string()),
        ("X-GitHub-Event", event.to_string()),
        (
            "X-Hub-Signature-256",
            format!("sha256={}", hmac_hex(SECRET, &[body])),
        ),
    ]
}

pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Headers of a Slack request signed at `timestamp`.
pub fn slack_headers(timestamp: u64, body: &[u8]) -> Vec<(&'static str, String)> {
    let base = format!("v0:{timestamp}:");
    vec![
        (
            "X-Slack-Signature",
            format!("v0={}", hmac_hex(SECRET, &[base.as_bytes(), body])),
        ),
        ("X-Slack-Request-Timestamp", timestamp.to_string()),
    ]
}

/// Polls `done` until it holds, for at most `secs`.
pub fn wait_until(secs: u64, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A route whose turns wait until `release` exists (polling it, bounded to a minute), then append
/// their event identity to `ran`.
pub fn held_route(path: &str, adapter: &str, release: &Path, ran: &Path, extra: &str) -> String {
    let script = format!(
        "i=0; while [ ! -e '{}' ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; echo \"$TOLLGATE_EVENT_ID\" >> '{}'",
        release.display(),
        ran.display()
    );
    format!(
        "[[route]]\npath = \"{path}\"\nadapter = \"{adapter}\"\nsecret_env = \"{SECRET_ENV}\"\ntask = \"job-{{scope}}\"\nrun = [\"sh\", \"-c\", {script:?}]\n{extra}\n"
    )
}

/// Lines of `ran` (the identities whose turns ran).
pub fn ran(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// serve's dedupe marks as the lines of the old `serve/dedupe.jsonl` (`{"identity", "marked_at_millis"}`),
/// read from the `serve_dedupe` table of `tollgate.db` (schema 5), oldest first; empty when
/// the database or the table is not there yet.
#[allow(dead_code)]
pub fn dedupe_log_lines(home: &TestHome) -> String {
    let path = home.home.join("tollgate.db");
    if !path.is_file() {
        return String::new();
    }
    let conn =
        rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("open tollgate.db");
    let Ok(mut stmt) = conn
        .prepare("SELECT key, marked_at_millis FROM serve_dedupe ORDER BY marked_at_millis, key")
    else {
        return String::new();
    };
    let rows = stmt
        .query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
        })
        .expect("query serve_dedupe");
    let mut out = String::new();
    for row in rows {
        let (identity, at) = row.expect("row");
        out.push_str(
            &serde_json::json!({"identity": identity, "marked_at_millis": at}).to_string(),
        );
        out.push('\n');
    }
    out
}
