//! The scheduling verbs and options: `pause`, `resume`, and `submit --delay/--at/--priority`'s
//! parsing (spec/slots.md, "Scheduling").

use super::{exit, CliError};
use crate::home::Home;
use crate::protocol::slots::PauseSet;
use crate::runtime::Runtime;
use clap::Args;
use serde_json::json;
use std::path::PathBuf;

/// How far ahead `--delay`/`--at` may put a start: the longest a waker sleeps (a longer wait
/// would start only at the next finish or reconcile, which is not what was asked).
pub const MAX_DELAY_MILLIS: u64 = 7 * 24 * 3600 * 1000;

const PAUSE_HELP: &str = "\
Pausing holds queued turns: a paused turn stays queued (no submit, finishing runner, reconcile,
waker or serve starts it) while turns already running go on to their end. A submit to a paused
home or task is queued and says so (\"queued, paused\"). `tollgate status` shows the pause.

`tollgate resume` lifts the pause and at once starts what may start, highest --priority first,
up to the free worker slots. Resuming the home also resumes every paused task; resuming one task
while the home is paused leaves its turns held by the home's pause.

A foreground `submit --attach` is not held by a pause (it runs now, as asked).

Examples:
  tollgate pause                 hold every queued turn of the home
  tollgate pause nightly         hold the turns of task nightly only
  tollgate resume nightly
  tollgate resume                lift every pause";

#[derive(Debug, Args)]
#[command(after_help = PAUSE_HELP)]
pub struct PauseArgs {
    /// The task to pause (default: the whole home). It must exist in the home.
    #[arg(value_name = "TASK")]
    pub task: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = PAUSE_HELP)]
pub struct ResumeArgs {
    /// The task to resume (default: the whole home and every paused task).
    #[arg(value_name = "TASK")]
    pub task: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn open(home: Option<PathBuf>) -> Result<Runtime, CliError> {
    Ok(Runtime::open(Home::resolve(home)?)?)
}

fn me() -> Result<crate::protocol::slots::ProcessIdentity, CliError> {
    crate::process::self_identity().map_err(|e| CliError::Environment(e.to_string()))
}

fn print_json(value: &serde_json::Value) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::Environment(format!("cannot render JSON: {e}")))?;
    println!("{text}");
    Ok(())
}

fn paused_json(paused: &PauseSet) -> serde_json::Value {
    json!({ "home": paused.home, "tasks": paused.tasks })
}

pub fn pause(home: Option<PathBuf>, args: PauseArgs) -> Result<i32, CliError> {
    let rt = open(home)?;
    let done = crate::schedule::pause(&rt, args.task.as_deref())?;
    let what = args
        .task
        .as_deref()
        .map_or_else(|| "the home".to_string(), |t| format!("task {t}"));
    if args.json {
        print_json(&json!({
            "paused": what_json(args.task.as_deref()),
            "changed": done.changed,
            "pause": paused_json(&done.paused),
        }))?;
    } else if done.changed {
        println!(
            "paused {what}: queued turns stay queued, running ones go on (`tollgate resume` \
             lifts it)"
        );
    } else {
        println!("{what} was paused already");
    }
    Ok(exit::OK)
}

fn what_json(task: Option<&str>) -> serde_json::Value {
    match task {
        Some(task) => json!({ "task": task }),
        None => json!("home"),
    }
}

pub fn resume(home: Option<PathBuf>, args: ResumeArgs) -> Result<i32, CliError> {
    let rt = open(home)?;
    let me = me()?;
    let done = crate::schedule::resume(&rt, me, args.task.as_deref())?;
    crate::runner::repair::after_section(&rt, me);
    let what = args
        .task
        .as_deref()
        .map_or_else(|| "the home".to_string(), |t| format!("task {t}"));
    let still_held = args.task.is_some() && done.paused.home;
    if args.json {
        print_json(&json!({
            "resumed": what_json(args.task.as_deref()),
            "changed": done.changed,
            "pause": paused_json(&done.paused),
            "started": done.started.iter()
                .map(|k| json!({ "task": k.task, "turn": k.turn }))
                .collect::<Vec<_>>(),
            "failed": done.failed.iter()
                .map(|(k, e)| json!({ "task": k.task, "turn": k.turn, "error": e.to_string() }))
                .collect::<Vec<_>>(),
            "wake_at_millis": done.wake_at_millis,
        }))?;
    } else {
        if done.changed {
            println!("resumed {what}");
        } else {
            println!("{what} was not paused");
        }
        for key in &done.started {
            println!("{key} started");
        }
        for (key, error) in &done.failed {
            eprintln!("tollgate: {key} could not start: {error}");
        }
        if still_held {
            println!("the home is still paused: its turns start after `tollgate resume`");
        }
    }
    Ok(if done.failed.is_empty() {
        exit::OK
    } else {
        exit::ENVIRONMENT
    })
}

/// `--delay DUR`: the start time `now_millis + DUR`, at most [`MAX_DELAY_MILLIS`] ahead.
pub fn parse_delay(text: &str, now_millis: u64) -> Result<u64, CliError> {
    let bad = |why: String| CliError::Usage(format!("--delay {text:?}: {why}"));
    let duration = humantime::parse_duration(text)
        .map_err(|e| bad(format!("{e} (expected a duration such as 90s, 10m, 2h30m)")))?;
    let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    if millis > MAX_DELAY_MILLIS {
        return Err(bad("at most 7 days ahead".to_string()));
    }
    Ok(now_millis.saturating_add(millis))
}

/// `--at TIME`: an RFC 3339 time (`2026-12-01T17:30:00Z`, `...+02:00`), or `HH:MM` (local time:
/// today, or tomorrow when that has passed). At most [`MAX_DELAY_MILLIS`] ahead; a time in the
/// past is refused for RFC 3339 (it would start at once, which is not what was asked).
pub fn parse_at(text: &str, now_millis: u64) -> Result<u64, CliError> {
    let bad = |why: &str| CliError::Usage(format!("--at {text:?}: {why}"));
    let at = if let Some((h, m)) = parse_hh_mm(text) {
        let today = local_time_today(now_millis, h, m)
            .ok_or_else(|| bad("the local time cannot be computed"))?;
        if today > now_millis {
            today
        } else {
            local_time_today(now_millis.saturating_add(24 * 3600 * 1000), h, m)
                .ok_or_else(|| bad("the local time cannot be computed"))?
        }
    } else {
        let at = parse_rfc3339(text).ok_or_else(|| {
            bad("expected HH:MM (local time) or an RFC 3339 time such as 2026-12-01T17:30:00Z")
        })?;
        if at < now_millis {
            return Err(bad("that time has passed"));
        }
        at
    };
    if at.saturating_sub(now_millis) > MAX_DELAY_MILLIS {
        return Err(bad("at most 7 days ahead"));
    }
    Ok(at)
}

fn parse_hh_mm(text: &str) -> Option<(u32, u32)> {
    let (h, m) = text.split_once(':')?;
    if h.is_empty() || h.len() > 2 || m.len() != 2 {
        return None;
    }
    if !h.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (h, m) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60).then_some((h, m))
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` (a space or `t` may stand for `T`) as
/// milliseconds since the epoch; `None` for anything else.
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() < 20 || !text.is_ascii() {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<u32> {
        let part = text.get(range)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => return None,
    };
    if day == 0 || day > days_in_month || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut millis: u64 = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let first3 = format!("{:0<3}", &fraction[..digits.min(3)]);
        millis = first3.parse().ok()?;
        rest = &fraction[digits..];
    }
    let offset_secs: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (oh, om) = parse_hh_mm(&rest[1..]).filter(|_| rest.len() == 6)?;
            sign * i64::from(oh * 3600 + om * 60)
        }
    };
    let days = days_from_civil(i64::from(year), month, day);
    let secs = days * 86_400 + i64::from(hour * 3600 + minute * 60 + second.min(59)) - offset_secs;
    u64::try_from(secs)
        .ok()?
        .checked_mul(1000)?
        .checked_add(millis)
}

/// The local wall-clock time `hour:minute` on the local day of `day_of_millis`, as milliseconds
/// since the epoch (through the C library's time zone rules, as `date` uses them).
fn local_time_today(day_of_millis: u64, hour: u32, minute: u32) -> Option<u64> {
    let secs = libc::time_t::try_from(day_of_millis / 1000).ok()?;
    // SAFETY: `tm` is a plain C struct for which all-zero bytes are a valid value; localtime_r
    // and mktime only read and write the pointers given, which live for both calls.
    let at = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&secs, &mut tm).is_null() {
            return None;
        }
        tm.tm_hour = i32::try_from(hour).ok()?;
        tm.tm_min = i32::try_from(minute).ok()?;
        tm.tm_sec = 0;
        tm.tm_isdst = -1;
        libc::mktime(&mut tm)
    };
    u64::try_from(at).ok()?.checked_mul(1000)
}

/// `millis` as the local time `HH:MM:SS`, with the date (`YYYY-MM-DD HH:MM:SS`) unless it is
/// within a day of `now_millis`.
pub fn local_clock(millis: u64, now_millis: u64) -> String {
    let Ok(secs) = libc::time_t::try_from(millis / 1000) else {
        return format!("{millis}ms");
    };
    // SAFETY: as in `local_time_today`: a zeroed `tm` is valid and localtime_r only writes it.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&secs, &mut tm).is_null() {
            return format!("{millis}ms");
        }
        tm
    };
    let clock = format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec);
    if millis.abs_diff(now_millis) < 20 * 3600 * 1000 {
        clock
    } else {
        format!(
            "{:04}-{:02}-{:02} {clock}",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_with_zone_and_fraction() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339("2026-12-01T17:30:00Z"),
            Some(1_796_146_200_000)
        );
        assert_eq!(
            parse_rfc3339("2026-12-01T19:30:00.5+02:00"),
            Some(1_796_146_200_500)
        );
        assert_eq!(parse_rfc3339("2026-02-30T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("2026-12-01T17:30:00"), None);
        assert_eq!(parse_rfc3339("tomorrow"), None);
    }

    #[test]
    fn hh_mm_is_today_or_tomorrow() {
        assert_eq!(parse_hh_mm("7:05"), Some((7, 5)));
        assert_eq!(parse_hh_mm("24:00"), None);
        assert_eq!(parse_hh_mm("12:5"), None);
        let now = 1_796_146_200_000;
        let at = parse_at("00:00", now).unwrap();
        assert!(at > now && at - now <= 24 * 3600 * 1000);
    }

    #[test]
    fn garbage_names_the_argument() {
        let err = parse_at("soon", 0).unwrap_err().to_string();
        assert!(err.starts_with("--at \"soon\""), "{err}");
        let err = parse_delay("8d", 0).unwrap_err().to_string();
        assert!(err.contains("7 days"), "{err}");
    }
}
