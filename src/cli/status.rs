//! `tollgate status`: the table, `--json` and `--watch`.

use super::common::{me, open, print_json};
use super::{exit, CliError, StatusArgs};
use crate::runtime::Runtime;
use crate::status as status_shell;
use crate::tasks;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Keeps only the turns carrying `label` (and the queue rows and works of those turns); a task
/// left without turns is left out.
fn only_label(mut view: status_shell::StatusView, label: &str) -> status_shell::StatusView {
    let mut keys = std::collections::BTreeSet::new();
    for task in &mut view.tasks {
        task.turns.retain(|t| t.labels.iter().any(|l| l == label));
        task.hidden_turns = 0;
        for turn in &task.turns {
            keys.insert((task.name.clone(), turn.turn));
        }
    }
    view.tasks.retain(|t| !t.turns.is_empty());
    view.rows
        .retain(|r| keys.contains(&(r.task.clone(), r.turn)));
    view.works
        .retain(|w| keys.contains(&(w.task.clone(), w.turn)));
    view.runners
        .retain(|r| keys.contains(&(r.task.clone(), r.turn)));
    view
}

/// The status `args` ask for: one task or all, every turn or the recent ones, one label or all.
fn view_of(rt: &Runtime, args: &StatusArgs) -> Result<status_shell::StatusView, CliError> {
    // A label filter looks at turns of every age, so nothing it matches is hidden.
    let all = args.all || args.label.is_some();
    let view = status_shell::status_with(rt, args.task.as_deref(), all)?;
    Ok(match &args.label {
        Some(label) => only_label(view, label),
        None => view,
    })
}

pub fn status(home: Option<PathBuf>, args: StatusArgs) -> Result<i32, CliError> {
    let rt = open(home)?;
    if args.json {
        let view = view_of(&rt, &args)?;
        let value = serde_json::to_value(&view)
            .map_err(|e| CliError::Environment(format!("cannot render JSON: {e}")))?;
        print_json(&value)?;
        crate::runner::repair::after_section(&rt, me()?);
        return Ok(exit::OK);
    }
    let style = super::status_table::TableStyle::detect();
    if !args.watch {
        let view = view_of(&rt, &args)?;
        print!(
            "{}",
            super::status_table::render(&view, tasks::now_millis(), &style)
        );
        crate::runner::repair::after_section(&rt, me()?);
        return Ok(exit::OK);
    }
    let interval = humantime::parse_duration(&args.interval)
        .ok()
        .filter(|d| *d >= Duration::from_millis(100) && *d <= Duration::from_secs(3600))
        .ok_or_else(|| {
            CliError::Usage(format!(
                "--interval {:?}: expected a duration from 100ms to 1h (e.g. 500ms, 2s)",
                args.interval
            ))
        })?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, std::sync::Arc::clone(&stop))
            .map_err(|e| CliError::Environment(format!("installing signal handlers: {e}")))?;
    }
    let mut stdout = std::io::stdout();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let view = view_of(&rt, &args)?;
        // The width again for every frame: a resized terminal gets a table that fits it.
        let style = super::status_table::TableStyle::detect();
        let table = super::status_table::render(&view, tasks::now_millis(), &style);
        // Home the cursor and clear the screen, then draw: the table refreshes in place.
        let _ = write!(stdout, "\x1b[H\x1b[2J{table}");
        let _ = stdout.flush();
        let deadline = std::time::Instant::now() + interval;
        while !stop.load(std::sync::atomic::Ordering::Relaxed)
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50).min(interval));
        }
    }
    Ok(exit::OK)
}
