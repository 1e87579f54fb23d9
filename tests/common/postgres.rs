//! The PostgreSQL server of the store and fleet tests: `TOLLGATE_TEST_POSTGRES` (`.ci/run` starts
//! one). Unset or unreachable, a test skips with a message saying how to run it; with
//! `TOLLGATE_REQUIRE_POSTGRES=1` (set by `.ci/run`) it fails instead.

use tollgate::queue::redact;

/// The test server's URL, or `None` (with a message) when this run may skip.
pub fn server() -> Option<String> {
    let required = std::env::var("TOLLGATE_REQUIRE_POSTGRES").is_ok_and(|v| v == "1");
    let Ok(url) = std::env::var("TOLLGATE_TEST_POSTGRES") else {
        assert!(
            !required,
            "TOLLGATE_REQUIRE_POSTGRES=1 but TOLLGATE_TEST_POSTGRES is not set"
        );
        eprintln!(
            "skipped: set TOLLGATE_TEST_POSTGRES=postgres://... to a server where tollgate may \
             create tables (.ci/run starts one), or run .ci/run"
        );
        return None;
    };
    match postgres::Client::connect(&url, postgres::NoTls) {
        Ok(_) => Some(url),
        Err(e) if required => panic!(
            "TOLLGATE_REQUIRE_POSTGRES=1 but {} is unreachable: {e}",
            redact(&url)
        ),
        Err(e) => {
            eprintln!(
                "skipped: TOLLGATE_TEST_POSTGRES={} is unreachable: {e}",
                redact(&url)
            );
            None
        }
    }
}

/// A name no other test (nor an earlier run) uses: queues and hosts are shared by the database,
/// so each test takes its own. The random tail of a v7 token: its head is the time, the same for
/// tests that start together.
pub fn unique(name: &str) -> String {
    let token = tollgate::protocol::slots::SlotToken::generate().to_string();
    format!(
        "{name}-{}-{}",
        std::process::id(),
        &token[token.len() - 12..]
    )
}

/// `url` naming queue `queue` (homes naming one queue share it, spec/store.md).
pub fn with_queue(url: &str, queue: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}queue={queue}")
}
