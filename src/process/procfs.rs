//! Reading `/proc`: the one reader and parser of `/proc/<pid>/stat` (state, parent, process group,
//! start time), `/proc/<pid>/environ` (the markers containment matches) and
//! `/proc/<pid>/task/<tid>/children`, and the walk over every pid.
//!
//! [`super::identity`] turns a stat into an identity and a liveness answer; the containment walk
//! ([`super::containment`], which [`super::work`] uses) scans with it. Nothing here decides
//! anything: a read either finds the process, finds it gone, or cannot tell. Parsing is separate
//! from reading so it is unit-tested.

use std::fs;
use std::io;
use std::sync::OnceLock;

/// Bound on the processes one `/proc` scan looks at.
pub const MAX_PROC_SCAN: usize = 1 << 20;

/// The fields of `/proc/<pid>/stat` tollgate uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: i32,
    /// The state letter (field 3): `R`, `S`, `D`, `Z` (zombie), `X` (dead), ….
    pub state: char,
    /// The parent's pid (field 4).
    pub ppid: i32,
    /// The process group (field 5).
    pub pgrp: i32,
    /// The start time (field 22), in clock ticks since boot; see [`ticks_to_micros`].
    pub start_ticks: u64,
}

impl ProcStat {
    /// A zombie (or dead) process runs nothing any more: it only waits to be reaped, and it does
    /// not count as a unit member.
    pub fn is_alive(&self) -> bool {
        !matches!(self.state, 'Z' | 'X')
    }
}

/// Parses one `/proc/<pid>/stat` line. `comm` (field 2) may hold spaces and parentheses: the
/// fields resume after the last `)`.
pub fn parse_stat(pid: i32, text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    // After the process group (field 5), start time is field 22: 17 more fields on.
    let start_ticks = fields.nth(16)?.parse().ok()?;
    Some(ProcStat {
        pid,
        state,
        ppid,
        pgrp,
        start_ticks,
    })
}

/// The answer of one read of `/proc/<pid>/stat`.
pub(crate) enum Read {
    /// No such process.
    Missing,
    /// There, but the file could not be read or parsed (counted as live by liveness).
    Unreadable,
    Found(ProcStat),
}

/// Reads and parses `/proc/<pid>/stat`, telling a missing process from an unreadable one.
pub(crate) fn read(pid: u32) -> Read {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => match parse_stat(pid as i32, &text) {
            Some(stat) => Read::Found(stat),
            None => Read::Unreadable,
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Read::Missing,
        // ESRCH shows up when the process exits while we read.
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Read::Missing,
        Err(_) => Read::Unreadable,
    }
}

/// `/proc/<pid>/stat`, or `None` when the process is gone (or unreadable).
pub fn read_stat(pid: i32) -> Option<ProcStat> {
    match read(u32::try_from(pid).ok()?) {
        Read::Found(stat) => Some(stat),
        Read::Missing | Read::Unreadable => None,
    }
}

/// Whether `pid` exists and is not a zombie.
pub fn is_alive(pid: i32) -> bool {
    read_stat(pid).is_some_and(|s| s.is_alive())
}

/// The parent pid of `pid`, or `None` if it is gone.
pub fn parent_of(pid: i32) -> Option<i32> {
    read_stat(pid).map(|s| s.ppid)
}

/// Every process `/proc` lists (zombies included), bounded by [`MAX_PROC_SCAN`].
pub fn scan() -> Vec<ProcStat> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .take(MAX_PROC_SCAN)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
        .collect()
}

/// The raw environment of `pid` (NUL-separated), or `None` if it cannot be read.
pub fn environ_of(pid: i32) -> Option<Vec<u8>> {
    fs::read(format!("/proc/{pid}/environ")).ok()
}

/// The raw command line of `pid` (NUL-separated arguments), or `None` if it cannot be read.
pub fn cmdline_of(pid: i32) -> Option<Vec<u8>> {
    fs::read(format!("/proc/{pid}/cmdline")).ok()
}

/// Parses a `children` file: whitespace-separated pids.
pub fn parse_children(text: &str) -> impl Iterator<Item = i32> + '_ {
    text.split_whitespace()
        .filter_map(|k| k.parse::<i32>().ok())
}

/// The children of `pid` (all its threads'), from `/proc/<pid>/task/<tid>/children`.
pub fn children_of(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(kids) = fs::read_to_string(task.path().join("children")) {
            out.extend(parse_children(&kids));
        }
    }
    out
}

fn clock_ticks_per_second() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
            Ok(Some(ticks)) if ticks > 0 => ticks as u64,
            // Linux has used 100 for USER_HZ on every architecture we run on.
            _ => 100,
        }
    })
}

/// A start time in clock ticks since boot, in microseconds (what identities record).
pub(crate) fn ticks_to_micros(ticks: u64) -> u64 {
    ticks.saturating_mul(1_000_000) / clock_ticks_per_second()
}

/// Whether `/proc` is mounted and readable at all (else every answer from it is a guess).
pub(crate) fn available() -> bool {
    fs::metadata("/proc/self").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_a_hostile_comm_parses_ppid_pgrp_and_start() {
        let line = "4242 (we (ird) name) S 17 4240 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        let stat = parse_stat(4242, line).expect("parses");
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.ppid, 17);
        assert_eq!(stat.pgrp, 4240);
        assert_eq!(stat.start_ticks, 987654);
        assert!(stat.is_alive());
        let zombie = line.replace(") S ", ") Z ");
        assert!(!parse_stat(4242, &zombie).expect("parses").is_alive());
        assert_eq!(parse_stat(1, "1 (truncated) S 0"), None);
    }

    #[test]
    fn own_stat_is_read_from_proc() {
        let me = std::process::id() as i32;
        let stat = read_stat(me).expect("own stat");
        assert!(stat.is_alive());
        assert_eq!(stat.ppid, nix::unistd::getppid().as_raw(), "ppid field");
        assert_eq!(stat.pgrp, nix::unistd::getpgrp().as_raw());
        assert!(scan().iter().any(|s| s.pid == me));
        assert!(matches!(read(u32::MAX - 1), Read::Missing));
    }

    #[test]
    fn children_files_parse() {
        assert_eq!(
            parse_children("12 13  \n14 x").collect::<Vec<_>>(),
            [12, 13, 14]
        );
    }
}
