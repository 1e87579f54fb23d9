//! `tollgate status` for people: one table, one line per turn in id order, in the words of
//! [`TurnState`], with times as ages and durations, fitted to the terminal's width. `--json`
//! keeps the machine shape of [`StatusView`].

use crate::status::{StatusView, TurnView};
use crate::turn_state::TurnState;
use std::fmt::Write as _;

/// The colour a state gets on a terminal.
fn colour_of(state: TurnState) -> Colour {
    match state {
        TurnState::Starting | TurnState::Running | TurnState::Recording => Colour::Yellow,
        TurnState::Completed => Colour::Green,
        TurnState::Failed
        | TurnState::Cancelled
        | TurnState::TimedOut
        | TurnState::Unstartable
        | TurnState::DependencyFailed
        | TurnState::Orphaned => Colour::Red,
        TurnState::Queued
        | TurnState::Paused
        | TurnState::Delayed
        | TurnState::Held
        | TurnState::Waiting
        | TurnState::Dropped
        | TurnState::Superseded => Colour::Plain,
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
    /// The width the table fits in, in columns (0: no limit, nothing is cut).
    pub columns: usize,
}

impl TableStyle {
    /// Colour and width from the environment: a terminal on stdout (its width, read again for
    /// every table so `--watch` follows a resized window), `NO_COLOR`, `COLUMNS` (which wins
    /// over the terminal's width; without either, nothing is cut).
    pub fn detect() -> Self {
        use std::io::IsTerminal;
        let terminal = std::io::stdout().is_terminal();
        let no_colour = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        TableStyle {
            colour: terminal && !no_colour,
            columns: Self::width(terminal),
        }
    }

    /// The width the table fits in: `COLUMNS`, else the terminal's, else 0 (no limit).
    pub fn width(terminal: bool) -> usize {
        if let Some(columns) = std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse::<usize>().ok())
        {
            return columns;
        }
        if !terminal {
            return 0;
        }
        terminal_size::terminal_size_of(std::io::stdout())
            .map_or(0, |(terminal_size::Width(w), _)| usize::from(w))
    }
}

/// The narrowest a cut column gets: the command first, then the labels, then the task's name.
const MIN_COMMAND: usize = 12;
const MIN_LABEL: usize = 5;
const MIN_TASK: usize = 8;
/// Spaces between two columns.
const GAP: usize = 2;

/// `text` cut to `width` characters, the last one `…` when something was cut.
fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut kept: String = text.chars().take(width.saturating_sub(1)).collect();
    kept.push('…');
    kept
}

/// The STATE cell: the state's word, with what it waits for (a time, a retry's attempt).
fn state_cell(turn: &TurnView, now_millis: u64) -> String {
    let mut word = turn.state.word().to_string();
    // A paused turn that is also delayed keeps showing its time.
    if let (TurnState::Delayed | TurnState::Paused, Some(at)) = (turn.state, turn.not_before_millis)
    {
        let clock = super::sched::local_clock(at, now_millis);
        word = match turn.state {
            TurnState::Paused => format!("paused, delayed until {clock}"),
            _ => format!("delayed until {clock}"),
        };
    }
    // `failed 1/3`: attempt 1 of 3 (`submit --retry 2`).
    match turn.retry {
        Some(plan) if plan.attempts > 1 => format!("{word} {}/{}", plan.attempt, plan.attempts),
        _ => word,
    }
}

/// Renders the whole status: a header line, the table of turns in id order, and a footer saying
/// what was left out and how to see it. `now_millis` turns start times into ages.
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
    const TASK: usize = 1;
    const LABEL: usize = 3;
    const STATE: usize = 4;
    const HOST: usize = 5;
    let command = if fleet { 9 } else { 8 };
    // Columns whose numbers are right-aligned.
    let numeric: [usize; 3] = [0, 2, command - 1];
    let mut header: Vec<&str> = vec![
        "ID", "TASK", "TURN", "LABEL", "STATE", "STARTED", "TOOK", "EXIT", "COMMAND",
    ];
    if fleet {
        header.insert(HOST, "HOST");
    }
    let mut turns: Vec<(&str, &TurnView)> = view
        .tasks
        .iter()
        .flat_map(|task| task.turns.iter().map(move |t| (task.name.as_str(), t)))
        .collect();
    // In the order they were submitted: the id (a turn recorded before ids existed first).
    turns.sort_by(|(ta, a), (tb, b)| {
        (a.id.unwrap_or(0), a.submitted_at_millis, *ta, a.turn).cmp(&(
            b.id.unwrap_or(0),
            b.submitted_at_millis,
            *tb,
            b.turn,
        ))
    });
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut states: Vec<Colour> = Vec::new();
    for (task, turn) in &turns {
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
        let labels = if turn.labels.is_empty() {
            "-".to_string()
        } else {
            turn.labels.join(",")
        };
        let mut row = vec![
            turn.id.map_or_else(|| "-".to_string(), |id| id.to_string()),
            task.to_string(),
            turn.turn.to_string(),
            labels,
            state_cell(turn, now_millis),
            started,
            took,
            exit,
            crate::argv::display(&turn.argv),
        ];
        if fleet {
            row.insert(HOST, turn.host.clone().unwrap_or_else(|| "-".to_string()));
        }
        rows.push(row);
        states.push(colour_of(turn.state));
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
        fit(
            &mut widths,
            style.columns,
            &[(command, MIN_COMMAND), (LABEL, MIN_LABEL), (TASK, MIN_TASK)],
        );
        let line = |cells: &[&str], state_colour: Option<Colour>| {
            let mut text = String::new();
            for (i, cell) in cells.iter().enumerate() {
                let cell = cut(cell, widths[i]);
                let pad = widths[i].saturating_sub(cell.chars().count());
                let shown = match state_colour {
                    Some(colour) if i == STATE => colour.paint(&cell, style.colour),
                    _ => cell,
                };
                if i == cells.len() - 1 {
                    text.push_str(&shown);
                } else if numeric.contains(&i) {
                    let _ = write!(text, "{}{}{}", " ".repeat(pad), shown, " ".repeat(GAP));
                } else {
                    let _ = write!(text, "{}{}{}", shown, " ".repeat(pad), " ".repeat(GAP));
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
    if view.hidden_turns > 0 {
        let _ = writeln!(
            out,
            "{} older ended turn(s) hidden (status_ended_turns = {} in tollgate.toml);\n\
             `tollgate status --all` shows every turn, `tollgate status TASK` one task's",
            view.hidden_turns,
            view.ended_turns_shown.unwrap_or_default()
        );
    }
    if turns.iter().any(|(_, t)| t.state == TurnState::Orphaned) {
        let _ = writeln!(
            out,
            "orphaned turns lost their submitter or runner: `tollgate reconcile` repairs them"
        );
    }
    out
}

/// Narrows the columns of `flexible` (index, narrowest width), in that order, until the table
/// fits in `columns` (0: no limit); a table that cannot fit even then is left as narrow as it
/// can be.
fn fit(widths: &mut [usize], columns: usize, flexible: &[(usize, usize)]) {
    if columns == 0 {
        return;
    }
    let total =
        |widths: &[usize]| widths.iter().sum::<usize>() + GAP * widths.len().saturating_sub(1);
    for &(column, narrowest) in flexible {
        let over = total(widths).saturating_sub(columns);
        if over == 0 {
            return;
        }
        let room = widths[column].saturating_sub(narrowest);
        widths[column] -= over.min(room);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_narrowed_command_first_until_the_table_fits() {
        let mut widths = vec![2, 10, 4, 8, 7, 7, 4, 4, 60];
        fit(
            &mut widths,
            80,
            &[(8, MIN_COMMAND), (3, MIN_LABEL), (1, MIN_TASK)],
        );
        assert_eq!(widths.iter().sum::<usize>() + GAP * 8, 80);
        assert_eq!(widths[8], 80 - (2 + 10 + 4 + 8 + 7 + 7 + 4 + 4) - GAP * 8);
        let mut narrow = vec![2, 30, 4, 20, 7, 7, 4, 4, 60];
        fit(
            &mut narrow,
            100,
            &[(8, MIN_COMMAND), (3, MIN_LABEL), (1, MIN_TASK)],
        );
        assert_eq!((narrow[8], narrow[3], narrow[1]), (MIN_COMMAND, 14, 30));
        assert_eq!(narrow.iter().sum::<usize>() + GAP * 8, 100);
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 4), "abc");
    }

    #[test]
    fn durations_use_two_units_at_most() {
        assert_eq!(short_duration(850), "850ms");
        assert_eq!(short_duration(12_400), "12s");
        assert_eq!(short_duration(185_000), "3m05s");
        assert_eq!(short_duration(7_800_000), "2h10m");
        assert_eq!(short_duration(3 * 86_400_000 + 4 * 3_600_000), "3d04h");
    }
}
