//! The runner's copy of its turn's output into the PostgreSQL store (spec/fleet.md, "Logs across
//! hosts"), so `tollgate logs` on another host of the fleet can print it.
//!
//! The turn's log files on this host stay the source: the drain threads write them as on one
//! host (`execute.rs`, untouched). A thread of its own follows the two files: every
//! [`OUTPUT_COPY_INTERVAL_MILLIS`], and once more when the work ended (after the drains wrote
//! their truncation line and tail), it appends what the files grew by to the `turn_output` table
//! ([`crate::queue::PostgresStore::append_output`]) on a connection of its own, outside the
//! queue's sections: copying output never holds the queue's lock nor waits behind it. At most
//! [`TURN_OUTPUT_MAX_BYTES`] of a stream are sent per pass and kept in the table (its tail); a
//! failed append is retried from the same offset at the next pass and never fails the turn. A
//! command that prints nothing never opens the connection.

use crate::protocol::slots::{Liveness, TurnKey};
use crate::queue::{OutputStream, PostgresStore, Store, TURN_OUTPUT_MAX_BYTES};
use crate::runtime::Runtime;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the copy looks for new output while the command runs: what a `logs --follow` on
/// another host lags behind at most (plus its own poll).
pub const OUTPUT_COPY_INTERVAL_MILLIS: u64 = 500;
/// How long [`OutputCopy::finish`] waits for the last pass (a database that does not answer must
/// not hold the turn's result back for long; the local files have everything).
const OUTPUT_FINISH_MILLIS: u64 = 5_000;

/// The copy thread of one turn; [`OutputCopy::finish`] makes its last pass.
pub struct OutputCopy {
    stop: Option<mpsc::Sender<()>>,
    done: mpsc::Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

/// On a PostgreSQL home: starts copying `key`'s output to the table. `None` on one host.
pub fn start_if_fleet<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    key: &TurnKey,
) -> Option<OutputCopy> {
    let store = rt.store.lease_renewer()?;
    let files = [
        (OutputStream::Stdout, rt.home.stdout_log(key)),
        (OutputStream::Stderr, rt.home.stderr_log(key)),
    ];
    let (stop, stopped) = mpsc::channel();
    let (finished, done) = mpsc::channel();
    let turn = key.clone();
    let thread = std::thread::Builder::new()
        .name("output-copy".into())
        .spawn(move || {
            copy_loop(&store, &turn, files, &stopped);
            let _ = finished.send(());
        });
    match thread {
        Ok(thread) => Some(OutputCopy {
            stop: Some(stop),
            done,
            thread: Some(thread),
        }),
        Err(e) => {
            tracing::warn!("{key}: cannot start copying the output to the database: {e}");
            None
        }
    }
}

impl OutputCopy {
    /// The last pass (call it once the work is dead and the log drains finished), waited for at
    /// most [`OUTPUT_FINISH_MILLIS`].
    pub fn finish(mut self) {
        drop(self.stop.take());
        match self
            .done
            .recv_timeout(Duration::from_millis(OUTPUT_FINISH_MILLIS))
        {
            Ok(()) => {
                if let Some(thread) = self.thread.take() {
                    let _ = thread.join();
                }
            }
            Err(_) => tracing::warn!(
                "the copy of the output to the database did not finish in {OUTPUT_FINISH_MILLIS} ms; \
                 other hosts may see less of it"
            ),
        }
    }
}

fn copy_loop(
    store: &PostgresStore,
    key: &TurnKey,
    files: [(OutputStream, PathBuf); 2],
    stopped: &mpsc::Receiver<()>,
) {
    let mut offsets = [0u64; 2];
    let mut warned = false;
    loop {
        let last = !matches!(
            stopped.recv_timeout(Duration::from_millis(OUTPUT_COPY_INTERVAL_MILLIS)),
            Err(mpsc::RecvTimeoutError::Timeout)
        );
        for ((stream, path), offset) in files.iter().zip(offsets.iter_mut()) {
            if let Err(e) = copy_new(store, key, *stream, path, offset) {
                if !warned {
                    tracing::warn!(
                        "{key}: cannot copy its {} to the database: {e}",
                        stream.as_str()
                    );
                    warned = true;
                }
            }
        }
        if last {
            return;
        }
    }
}

/// Appends what `path` grew by since `*offset` (at most its last [`TURN_OUTPUT_MAX_BYTES`]) and
/// moves `*offset` past it once the append committed.
fn copy_new(
    store: &PostgresStore,
    key: &TurnKey,
    stream: OutputStream,
    path: &Path,
    offset: &mut u64,
) -> Result<(), String> {
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(e)),
    };
    let len = file.metadata().map_err(io)?.len();
    if len <= *offset {
        return Ok(());
    }
    // Older bytes than the table keeps are not worth sending: the reader sees the gap.
    let start = (*offset).max(len.saturating_sub(TURN_OUTPUT_MAX_BYTES));
    file.seek(SeekFrom::Start(start)).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(len - start).read_to_end(&mut bytes).map_err(io)?;
    store
        .append_output(&key.task, key.turn, stream, start, &bytes)
        .map_err(|e| e.to_string())?;
    *offset = start + bytes.len() as u64;
    Ok(())
}
