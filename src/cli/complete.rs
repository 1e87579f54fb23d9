//! `tollgate __complete` (hidden): the candidates the completion scripts of `tollgate
//! completions` ask for where the static script cannot know them: task names and turn ids of
//! the home. The script passes the words typed so far and the index of the one being completed;
//! which argument that word fills is read from the same clap definitions the parser uses, and an
//! argument is completed by the name of its values: `TURN` and `TASK|TURN` with turns (ids,
//! task names, `TASK:N`, `last`), `TASK` with task names. Anything else (an option's name, a
//! file) prints nothing and the script falls back to its static completion.
//!
//! It never creates or changes a home and never prints an error: a home that does not exist or
//! cannot be read completes nothing.

use super::Cli;
use crate::home::Home;
use crate::runtime::Runtime;
use crate::tasks;
use clap::CommandFactory;
use std::path::PathBuf;

/// The most candidates printed for one word.
const MAX_CANDIDATES: usize = 200;

#[derive(Debug, clap::Args)]
pub struct CompleteArgs {
    /// How to print each candidate: `bash` (the value), `zsh` (`value:description`), `fish`
    /// (`value<TAB>description`).
    #[arg(long, value_name = "SHELL")]
    pub shell: String,
    /// The index in WORDS of the word being completed.
    #[arg(long, value_name = "N")]
    pub index: usize,
    /// The command line's words, `tollgate` first.
    #[arg(last = true, value_name = "WORDS")]
    pub words: Vec<String>,
}

/// What a word being completed names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Turn,
    Task,
}

fn kind_of(value_name: &str) -> Option<Kind> {
    match value_name {
        "TURN" | "TASK|TURN" => Some(Kind::Turn),
        "TASK" => Some(Kind::Task),
        _ => None,
    }
}

/// Global options that take a value in the next word.
const GLOBAL_WITH_VALUE: [&str; 1] = ["--home"];

/// Which argument the word at `index` fills, and the `--home` typed before it.
fn target(words: &[String], index: usize) -> (Option<Kind>, Option<PathBuf>) {
    let command = Cli::command();
    let mut home = None;
    let mut i = 1;
    // Global options before the subcommand.
    let sub = loop {
        let Some(word) = words.get(i).filter(|_| i < index) else {
            return (None, home);
        };
        if GLOBAL_WITH_VALUE.contains(&word.as_str()) {
            home = words.get(i + 1).map(PathBuf::from);
            i += 2;
        } else if let Some(value) = word.strip_prefix("--home=") {
            home = Some(PathBuf::from(value));
            i += 1;
        } else if word.starts_with('-') {
            i += 1;
        } else {
            break word;
        }
    };
    let Some(sub) = command
        .get_subcommands()
        .find(|s| !s.is_hide_set() && s.get_name() == sub)
    else {
        return (None, home);
    };
    let current = words.get(index).map_or("", String::as_str);
    if current.starts_with('-') {
        return (None, home);
    }
    let takes_value = |arg: &clap::Arg| !arg.is_positional() && arg.get_action().takes_values();
    let option_named = |word: &str| {
        sub.get_arguments().find(|arg| {
            word.strip_prefix("--")
                .is_some_and(|long| arg.get_long() == Some(long))
                || (word.len() == 2
                    && word.starts_with('-')
                    && arg.get_short().map(String::from).as_deref() == word.get(1..))
        })
    };
    let mut positionals = 0;
    let mut j = i + 1;
    let mut after_separator = false;
    while j < index {
        let word = words[j].as_str();
        if after_separator {
            positionals += 1;
        } else if word == "--" {
            after_separator = true;
        } else if let Some(arg) = option_named(word).filter(|a| takes_value(a)) {
            if j + 1 == index {
                let kind = arg
                    .get_value_names()
                    .and_then(|names| names.first())
                    .and_then(|name| kind_of(name.as_str()));
                return (kind, home);
            }
            j += 1;
        } else if !word.starts_with('-') {
            positionals += 1;
        }
        j += 1;
    }
    let mut ordered: Vec<&clap::Arg> = sub.get_arguments().filter(|a| a.is_positional()).collect();
    ordered.sort_by_key(|a| a.get_index());
    let arg = ordered.get(positionals).or_else(|| {
        ordered
            .last()
            .filter(|a| a.get_num_args().is_some_and(|n| n.max_values() > 1))
    });
    let kind = arg
        .and_then(|a| a.get_value_names())
        .and_then(|names| names.first())
        .and_then(|name| kind_of(name.as_str()));
    (kind, home)
}

/// The candidates for `current`, each with a short description.
fn candidates(rt: &Runtime, kind: Kind, current: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let names = tasks::list_tasks(&rt.home).unwrap_or_default();
    if kind == Kind::Turn {
        if let Some((task, _)) = current.rsplit_once(':') {
            // TASK:N for the task typed before the colon, its newest turns first.
            let turns = tasks::list_turns(&rt.home, task).unwrap_or_default();
            out.push((format!("{task}:last"), format!("the latest turn of {task}")));
            for n in turns.iter().rev() {
                out.push((format!("{task}:{n}"), format!("turn {n} of {task}")));
            }
        } else if let Ok(view) = crate::status::status(rt, None) {
            // The ids of the turns `status` shows (every one not ended, the newest ended).
            let mut turns: Vec<(u64, String)> = view
                .tasks
                .iter()
                .flat_map(|task| {
                    task.turns.iter().filter_map(move |t| {
                        Some((
                            t.id?,
                            format!(
                                "{}:{} {} {}",
                                task.name,
                                t.turn,
                                t.state,
                                crate::argv::display(&t.argv)
                            ),
                        ))
                    })
                })
                .collect();
            turns.sort_by_key(|t| std::cmp::Reverse(t.0));
            out.extend(turns.into_iter().map(|(id, what)| (id.to_string(), what)));
            out.push((
                super::turnref::LAST.to_string(),
                "the turn submitted last".to_string(),
            ));
        }
    }
    if !current.contains(':') {
        out.extend(names.into_iter().map(|name| {
            let what = match kind {
                Kind::Turn => format!("the latest turn of task {name}"),
                Kind::Task => "task".to_string(),
            };
            (name, what)
        }));
    }
    out.retain(|(value, _)| value.starts_with(current));
    out.truncate(MAX_CANDIDATES);
    out
}

/// Prints the candidates for the word at `args.index`; always exit 0.
pub fn complete(home: Option<PathBuf>, args: CompleteArgs) -> i32 {
    let (kind, typed_home) = target(&args.words, args.index);
    let Some(kind) = kind else {
        return super::exit::OK;
    };
    let Ok(home) = Home::resolve(typed_home.or(home)) else {
        return super::exit::OK;
    };
    // Only a home in use: completing must never create one.
    if !home.config_path().is_file() {
        return super::exit::OK;
    }
    let Ok(rt) = Runtime::open(home) else {
        return super::exit::OK;
    };
    let current = args.words.get(args.index).map_or("", String::as_str);
    for (value, what) in candidates(&rt, kind, current) {
        let what = what.replace(['\n', '\t'], " ");
        match args.shell.as_str() {
            "zsh" => println!("{}:{what}", value.replace(':', "\\:")),
            "fish" => println!("{value}\t{what}"),
            _ => println!("{value}"),
        }
    }
    super::exit::OK
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        let mut words: Vec<String> = line.split(' ').map(str::to_string).collect();
        if words.is_empty() {
            words.push(String::new());
        }
        words
    }

    #[test]
    fn the_argument_a_word_fills_is_read_from_the_definitions() {
        let at = |line: &str| {
            let w = words(line);
            target(&w, w.len() - 1)
        };
        assert_eq!(at("tollgate logs ").0, Some(Kind::Turn));
        assert_eq!(
            at("tollgate --home /h logs bu"),
            (Some(Kind::Turn), Some("/h".into()))
        );
        assert_eq!(at("tollgate wait 17 ").0, Some(Kind::Turn));
        assert_eq!(at("tollgate cancel ").0, Some(Kind::Turn));
        assert_eq!(at("tollgate status ").0, Some(Kind::Task));
        assert_eq!(at("tollgate submit --after ").0, Some(Kind::Turn));
        assert_eq!(at("tollgate submit --task ").0, Some(Kind::Task));
        assert_eq!(at("tollgate submit --task b -- ").0, None);
        assert_eq!(at("tollgate logs --").0, None);
        assert_eq!(at("tollgate run ").0, None);
        assert_eq!(at("tollgate ").0, None);
        assert_eq!(at("tollgate worker runner ").0, None);
    }
}
