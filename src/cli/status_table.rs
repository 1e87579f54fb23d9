//! `tollgate status` for people: one table, one line per turn, in words a user knows, with
//! times as ages and durations. `--json` keeps the machine shape of [`StatusView`].

use crate::status::StatusView;
use std::fmt::Write as _;

/// A state word as a user reads it, and the colour it gets on a terminal.
fn human_state(state: &str) -> (&'static str, Colour) {
    match state {
        "parked" => ("queued", Colour::Plain),
        "waiting" => ("waiting", Colour::Plain),
        "starting" => ("starting", Colour::Yellow),
        "running" => ("running", Colour::Yellow),
        "recording" => ("recording", Colour::Yellow),
        "completed" => ("done", Colour::Green),
        "failed" => ("failed", Colour::Red),
        "cancelled" => ("cancelled", Colour::Red),
        "timed_out" => ("timed-out", Colour::Red),
        "unstartable" => ("spawn-failed", Colour::Red),
        "dropped" => ("dropped", Colour::Plain),
        "superseded" => ("superseded", Colour::Plain),
        "held" => ("held", Colour::Plain),
        "dependency_failed" => ("dep-failed", Colour::Red),
        "unqueued" | "orphaned" => ("orphaned", Colour::Red),
        _ => ("unknown", Colour::Plain),
    }
}

#[derive(Clone, Copy)]
enum Colour {
    Plain,
    Green,
    Yellow,
    Red,
}

impl Colour {
    fn paint(self, text: &str, enabled: bool) -> String {
        let code = match self {
            Colour::Plain => return text.to_string(),
            Colour::Green => "32",
            Colour::Yellow => "33",
            Colour::Red => "31",
        };
        if enabled {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }
}

/// A duration in the largest two units that matter: `850ms`, `12s`, `3m05s`, `2h10m`, `3d04h`.
pub fn short_duration(millis: u64) -> String {
    let secs = millis / 1000;
    match secs {
        0 => format!("{millis}ms"),
        1..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m{:02}s", secs / 60, secs % 60),
        3600..=86_399 => format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60),
        _ => format!("{}d{:02}h", secs / 86_400, (secs % 86_400) / 3600),
    }
}

/// What the table shows, and how.
pub struct TableStyle {
    /// Colour the state column (only on a terminal, and never with `NO_COLOR` set).
    pub colour: bool,
    /// Cut the command column to this many characters (0: no cut).
    pub command_width: usize,
}

impl TableStyle {
    /// Colour and width from the environment: a terminal on stdout, `NO_COLOR`, `COLUMNS`.
    pub fn detect() -> Self {
        use std::io::IsTerminal;
        let terminal = std::io::stdout().is_terminal();
        let no_colour = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let columns = std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse::<usize>().ok())
            .unwrap_or(if terminal { 100 } else { 0 });
        TableStyle {
            colour: terminal && !no_colour,
            command_width: columns
                .saturating_sub(60)
                .max(if columns == 0 { 0 } else { 20 }),
        }
    }
}

/// Renders the whole status: a header line, the table of turns, and a footer saying what was
/// left out. `now_millis` turns start times into ages.
pub fn render(view: &StatusView, now_millis: u64, style: &TableStyle) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} of {} worker slot(s) busy, {} queued  (home {})",
        view.occupied, view.workers, view.parked, view.home
    );
    if let (Some(host), true) = (&view.this_host, view.this_host_drained) {
        let _ = writeln!(
            out,
            "this host ({host}) is drained: it starts no turn, other hosts start its queued ones (`tollgate drain --undo {host}`)"
        );
    }
    if view.paused.home {
        let _ = writeln!(
            out,
            "the home is paused: queued turns stay queued, running ones go on (`tollgate resume`)"
        );
    }
    if !view.paused.tasks.is_empty() {
        let names: Vec<&str> = view.paused.tasks.iter().map(String::as_str).collect();
        let _ = writeln!(
            out,
            "paused task(s): {} (`tollgate resume TASK`)",
            names.join(", ")
        );
    }
    // A PostgreSQL home (a fleet) gets a HOST column after STATE: the host that ran the turn.
    let fleet = view.this_host.is_some();
    const HOST: usize = 5;
    // Columns whose numbers are right-aligned, and the state column (coloured).
    let numeric: [usize; 3] = [0, 2, if fleet { 8 } else { 7 }];
    const STATE: usize = 4;
    let mut header: Vec<&str> = vec![
        "ID", "TASK", "TURN", "LABEL", "STATE", "STARTED", "TOOK", "EXIT", "COMMAND",
    ];
    if fleet {
        header.insert(HOST, "HOST");
    }
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut states: Vec<Colour> = Vec::new();
    let mut hidden = 0;
    for task in &view.tasks {
        hidden += task.hidden_turns;
        for turn in &task.turns {
            let (word, colour) = human_state(&turn.state);
            let word = match (turn.state.as_str(), turn.held, turn.not_before_millis) {
                ("parked", Some("paused"), _) => "paused".to_string(),
                ("parked", Some("delayed"), Some(at)) => {
                    format!(
                        "delayed until {}",
                        super::sched::local_clock(at, now_millis)
                    )
                }
                _ => word.to_string(),
            };
            let started = turn
                .started_at_millis
                .map(|t| format!("{} ago", short_duration(now_millis.saturating_sub(t))))
                .unwrap_or_else(|| "-".to_string());
            let took = match (turn.started_at_millis, turn.ended_at_millis) {
                (Some(s), Some(e)) => short_duration(e.saturating_sub(s)),
                (Some(s), None) => format!("{}…", short_duration(now_millis.saturating_sub(s))),
                _ => "-".to_string(),
            };
            let exit = match (turn.exit_code, turn.signal) {
                (Some(code), _) => code.to_string(),
                (None, Some(signal)) => format!("sig{signal}"),
                _ => "-".to_string(),
            };
            let mut command = crate::argv::display(&turn.argv);
            if style.command_width > 0 && command.chars().count() > style.command_width {
                command = command
                    .chars()
                    .take(style.command_width.saturating_sub(1))
                    .collect::<String>()
                    + "…";
            }
            let labels = if turn.labels.is_empty() {
                "-".to_string()
            } else {
                turn.labels.join(",")
            };
            // `failed 1/3`: attempt 1 of 3 (`submit --retry 2`).
            let word = match turn.retry {
                Some(plan) if plan.attempts > 1 => {
                    format!("{word} {}/{}", plan.attempt, plan.attempts)
                }
                _ => word.to_string(),
            };
            let mut row = vec![
                turn.id.map_or_else(|| "-".to_string(), |id| id.to_string()),
                task.name.clone(),
                turn.turn.to_string(),
                labels,
                word,
                started,
                took,
                exit,
                command,
            ];
            if fleet {
                row.insert(HOST, turn.host.clone().unwrap_or_else(|| "-".to_string()));
            }
            rows.push(row);
            states.push(colour);
        }
    }
    if rows.is_empty() {
        let _ = writeln!(out, "no turns yet: `tollgate submit -- CMD` queues one");
    } else {
        let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row.iter()) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[&str], state_colour: Option<Colour>| {
            let mut text = String::new();
            for (i, cell) in cells.iter().enumerate() {
                let pad = widths[i].saturating_sub(cell.chars().count());
                let shown = match state_colour {
                    Some(colour) if i == STATE => colour.paint(cell, style.colour),
                    _ => cell.to_string(),
                };
                if i == cells.len() - 1 {
                    text.push_str(&shown);
                } else if numeric.contains(&i) {
                    let _ = write!(text, "{}{}  ", " ".repeat(pad), shown);
                } else {
                    let _ = write!(text, "{}{}  ", shown, " ".repeat(pad));
                }
            }
            text.trim_end().to_string()
        };
        let _ = writeln!(out, "{}", line(&header, None));
        for (row, colour) in rows.iter().zip(states) {
            let cells: Vec<&str> = row.iter().map(String::as_str).collect();
            let _ = writeln!(out, "{}", line(&cells, Some(colour)));
        }
    }
    if hidden > 0 {
        let _ = writeln!(
            out,
            "{hidden} older turn(s) hidden; `tollgate status --all` shows every turn"
        );
    }
    if view
        .tasks
        .iter()
        .flat_map(|t| &t.turns)
        .any(|t| t.state == "unqueued" || t.state == "orphaned")
    {
        let _ = writeln!(
            out,
            "orphaned turns lost their submitter or runner: `tollgate reconcile` repairs them"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_use_two_units_at_most() {
        assert_eq!(short_duration(850), "850ms");
        assert_eq!(short_duration(12_400), "12s");
        assert_eq!(short_duration(185_000), "3m05s");
        assert_eq!(short_duration(7_800_000), "2h10m");
        assert_eq!(short_duration(3 * 86_400_000 + 4 * 3_600_000), "3d04h");
    }
}
