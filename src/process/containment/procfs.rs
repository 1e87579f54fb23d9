//! What the containment walk reads from `/proc`: each process's state, parent, process group and
//! start time (`/proc/<pid>/stat`), its environment (`/proc/<pid>/environ`) and its children
//! (`/proc/<pid>/task/<tid>/children`). Parsing is separate from reading so it is unit-tested.

use std::fs;

/// Bound on the processes one `/proc` scan looks at.
pub const MAX_PROC_SCAN: usize = 1 << 20;

/// The fields of `/proc/<pid>/stat` the walk uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: i32,
    /// The state letter (`R`, `S`, `Z`, ...).
    pub state: char,
    pub ppid: i32,
    /// The process group.
    pub pgrp: i32,
    /// Start time in clock ticks since boot (field 22).
    pub start_ticks: u64,
}

impl ProcStat {
    /// A zombie (or dead) process runs nothing any more: it does not count as a unit member.
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
    // Fields 6..=21 lie between the process group (5) and the start time (22).
    let start_ticks = fields.nth(16)?.parse().ok()?;
    Some(ProcStat {
        pid,
        state,
        ppid,
        pgrp,
        start_ticks,
    })
}

/// `/proc/<pid>/stat`, or `None` when the process is gone (or unreadable).
pub fn read_stat(pid: i32) -> Option<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &text)
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
        assert_eq!(
            Some(stat.ppid),
            Some(nix::unistd::getppid().as_raw()),
            "ppid field"
        );
        assert_eq!(stat.pgrp, nix::unistd::getpgrp().as_raw());
        assert!(scan().iter().any(|s| s.pid == me));
    }

    #[test]
    fn children_files_parse() {
        assert_eq!(
            parse_children("12 13  \n14 x").collect::<Vec<_>>(),
            [12, 13, 14]
        );
    }
}
