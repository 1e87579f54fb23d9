//! The runner's guard on a fleet (spec/fleet.md, "The guard"): a process on the runner's host that
//! outlives the runner and kills its turn's whole containment unit when the runner dies.
//!
//! Why: a runner SIGKILLed alone on a host that stays up and connected takes its command's first
//! process with it (`PR_SET_PDEATHSIG`), but what the command started reparents away; another
//! host, once the runner's lease expired, takes the work for dead (F1) and may run the turn again
//! beside it. Self-fencing needs a live runner; the guard covers a dead one.
//!
//! How: the runner, before it becomes a child subreaper, starts the hidden `worker guard`, whose
//! standard input is the read end of a pipe only the runner holds the write end of
//! (close-on-exec, so no command or hook inherits it). The runner's forked child forks once more
//! before the exec and exits, so the guard is not on the runner's child list (the runner's proof at
//! its work's end, spec/containment.md, needs it to have no child but its work's) and has its own
//! session. The runner writes the unit it is about to start (`unit <json>`: the marker and the
//! cgroup, before the spawn; again with the process group and leader after it) and `done` once its
//! work is dead.
//! End of file without `done` means the runner is gone (the kernel closes its descriptors when it
//! dies, however it dies): the guard kills the last unit it was told of with the fence's kill
//! (TERM, the fence's grace, KILL and `cgroup.kill`, until observed empty, bounded) and exits.
//! The guard never touches the queue: what the slot steps see is unchanged, only the work is
//! dead earlier, well before the lease expires.

use crate::process::containment::UnitIdentity;
use crate::process::work;
use std::io::{BufRead, Write};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the runner waits for the guard's first process to fork and exit (two forks: well
/// under a millisecond). Past it the runner goes on unguarded (logged).
const GUARD_START_MILLIS: u64 = 5_000;

/// The longest line the guard reads: a unit's JSON is a few hundred bytes.
const MAX_LINE_BYTES: u64 = 64 * 1024;

/// The runner's end of its guard: the pipe's write end. Dropping it without [`Guard::done`] (the
/// runner exits, or dies) makes the guard kill the last unit written.
#[derive(Debug)]
pub struct Guard {
    pipe: std::fs::File,
}

impl Guard {
    /// Starts `exe worker guard --grace-millis GRACE` as a grandchild: the forked child forks
    /// again before the exec and exits, and this waits for that exit (the spawn itself returns
    /// once the grandchild has exec'd). Must be called before this process becomes a child
    /// subreaper (else the grandchild is reparented to it) and after its signal mask was restored
    /// (the guard inherits it).
    pub fn start(exe: &Path, grace_millis: u64) -> std::io::Result<Guard> {
        use std::os::unix::process::CommandExt;
        let (read, write): (OwnedFd, OwnedFd) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)?;
        let mut command = Command::new(exe);
        command
            .args([
                "worker",
                "guard",
                "--grace-millis",
                &grace_millis.to_string(),
            ])
            .stdin(Stdio::from(read))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        // SAFETY: runs in the forked child before exec and calls only fork(2), _exit(2) and
        // setsid(2), all async-signal-safe; it allocates nothing and takes no lock. The first
        // child exits at once; the grandchild returns and is exec'd, in a session of its own.
        unsafe {
            command.pre_exec(|| {
                match libc::fork() {
                    -1 => return Err(std::io::Error::last_os_error()),
                    0 => {}
                    _ => libc::_exit(0),
                }
                libc::setsid();
                Ok(())
            });
        }
        let mut child = command.spawn()?;
        let until = Instant::now() + Duration::from_millis(GUARD_START_MILLIS);
        loop {
            match child.try_wait()? {
                Some(status) if status.success() => break,
                Some(status) => {
                    return Err(std::io::Error::other(format!(
                        "the guard's first process ended with {status}"
                    )))
                }
                None if Instant::now() >= until => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(std::io::Error::other(format!(
                        "the guard's first process did not exit within {GUARD_START_MILLIS} ms"
                    )));
                }
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        Ok(Guard {
            pipe: std::fs::File::from(write),
        })
    }

    /// Tells the guard the unit to kill if this process dies. One `write` of less than
    /// `PIPE_BUF` bytes: the guard reads whole lines. A guard that is gone (its pipe broken) is
    /// logged; the runner's own end of the work still kills it.
    pub fn watch(&mut self, unit: &UnitIdentity) {
        let line = match serde_json::to_string(unit) {
            Ok(json) => format!("unit {json}\n"),
            Err(e) => {
                tracing::warn!("cannot describe the work's unit to its guard: {e}");
                return;
            }
        };
        if let Err(e) = self.pipe.write_all(line.as_bytes()) {
            tracing::warn!("the runner's guard is gone ({e}): the work is unguarded");
        }
    }

    /// The work is dead: the guard exits without killing anything.
    pub fn done(mut self) {
        let _ = self.pipe.write_all(b"done\n");
    }
}

/// What the guard read last from its runner.
#[derive(Debug, PartialEq, Eq)]
pub enum Heard {
    /// The runner is gone (end of file without `done`): kill this unit, if one was announced.
    RunnerGone(Option<UnitIdentity>),
    /// The runner said its work is dead.
    Done,
}

/// Reads the runner's lines until `done` or end of file. A line that does not parse is logged and
/// skipped (the last good unit stands); a read error counts as the runner gone.
pub fn listen(mut input: impl BufRead) -> Heard {
    let mut unit = None;
    loop {
        let mut line = Vec::new();
        let read = std::io::Read::take(&mut input, MAX_LINE_BYTES).read_until(b'\n', &mut line);
        match read {
            Ok(0) => return Heard::RunnerGone(unit),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!("guard: reading from the runner failed: {e}");
                return Heard::RunnerGone(unit);
            }
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches('\n');
        if text == "done" {
            return Heard::Done;
        }
        match text
            .strip_prefix("unit ")
            .map(serde_json::from_str::<UnitIdentity>)
        {
            Some(Ok(announced)) => unit = Some(announced),
            Some(Err(e)) => tracing::warn!("guard: a unit line does not parse: {e}"),
            None => tracing::warn!("guard: an unknown line from the runner: {text:?}"),
        }
    }
}

/// The hidden `worker guard --grace-millis GRACE` ([`Guard::start`] made it the runner's
/// grandchild, in its own session): serves the runner's pipe on standard input until `done` or
/// end of file, and then kills the announced unit if the runner is gone. Its exit code: 0, or 1
/// when processes of the unit survived the kill.
pub fn serve(grace_millis: u64) -> i32 {
    match listen(std::io::stdin().lock()) {
        Heard::Done | Heard::RunnerGone(None) => 0,
        Heard::RunnerGone(Some(unit)) => {
            let killed = work::kill_unit(&unit, Duration::from_millis(grace_millis));
            eprintln!(
                "tollgate guard: the runner died while its work {} ran: killed {} process(es){}",
                unit.marker.value,
                killed.found,
                if killed.is_complete() {
                    String::new()
                } else {
                    format!(", survivors {:?}", killed.remaining)
                }
            );
            if killed.is_complete() {
                0
            } else {
                1
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::containment::Marker;

    fn unit(value: &str) -> UnitIdentity {
        UnitIdentity {
            cgroup: None,
            pgid: Some(42),
            marker: Marker::exact("TOLLGATE_WORK", value),
            leader: None,
        }
    }

    fn lines(units: &[&UnitIdentity], tail: &str) -> Vec<u8> {
        let mut text = String::new();
        for u in units {
            text.push_str(&format!("unit {}\n", serde_json::to_string(u).unwrap()));
        }
        text.push_str(tail);
        text.into_bytes()
    }

    #[test]
    fn the_guard_kills_the_last_announced_unit_when_its_runner_is_gone() {
        let (first, second) = (unit("a"), unit("b"));
        let input = lines(&[&first, &second], "");
        assert_eq!(
            listen(input.as_slice()),
            Heard::RunnerGone(Some(second.clone()))
        );
        // A garbled line (a runner cut mid-write) keeps the last good unit.
        let input = lines(&[&second], "unit {\"cgro");
        assert_eq!(listen(input.as_slice()), Heard::RunnerGone(Some(second)));
        assert_eq!(listen(&b""[..]), Heard::RunnerGone(None));
    }

    #[test]
    fn done_means_the_work_is_dead_and_nothing_is_killed() {
        let input = lines(&[&unit("a")], "done\n");
        assert_eq!(listen(input.as_slice()), Heard::Done);
    }
}
