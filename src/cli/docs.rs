//! `tollgate completions SHELL` and `tollgate man`: generated from the same clap definitions the
//! parser uses, so they cannot drift from the real options.

use super::{exit, Cli};
use clap::CommandFactory;
use std::io::Write;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  tollgate completions bash > ~/.local/share/bash-completion/completions/tollgate
  tollgate completions zsh > \"${fpath[1]}/_tollgate\"
  tollgate completions fish > ~/.config/fish/completions/tollgate.fish")]
pub struct CompletionsArgs {
    /// The shell to write a completion script for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  tollgate man | man -l -
  tollgate man --out /usr/local/share/man/man1/tollgate.1")]
pub struct ManArgs {
    /// Write the page to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
}

/// Writes the completion script for `args.shell` to standard output.
pub fn completions(args: CompletionsArgs) -> i32 {
    let mut command = Cli::command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(args.shell, &mut command, "tollgate", &mut out);
    match out.flush() {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("tollgate completions: cannot write the script: {e}");
            exit::ENVIRONMENT
        }
    }
}

/// Renders the man page (roff): the top-level page with every subcommand and its options.
pub fn render_man() -> std::io::Result<Vec<u8>> {
    let command = Cli::command();
    let mut page = Vec::new();
    let man = clap_mangen::Man::new(command.clone());
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    man.render_options_section(&mut page)?;
    // One section per visible subcommand, with its own options, so `man tollgate` is the whole
    // reference and not only the list of names.
    writeln!(page, ".SH COMMANDS")?;
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        writeln!(page, ".SS \"tollgate {}\"", sub.get_name())?;
        if let Some(about) = sub.get_long_about().or(sub.get_about()) {
            writeln!(page, "{}", escape(&about.to_string()))?;
        }
        for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            let mut names = Vec::new();
            if let Some(short) = arg.get_short() {
                names.push(format!("\\-{short}"));
            }
            if let Some(long) = arg.get_long() {
                names.push(format!("\\-\\-{long}"));
            }
            if names.is_empty() {
                names.push(format!("<{}>", arg.get_id()));
            }
            writeln!(page, ".TP\n\\fB{}\\fR", names.join(", "))?;
            if let Some(help) = arg.get_long_help().or(arg.get_help()) {
                writeln!(page, "{}", escape(&help.to_string()))?;
            }
        }
    }
    man.render_extra_section(&mut page)?;
    if let Some(after) = command.get_after_help() {
        writeln!(page, ".SH \"EXIT CODES AND QUICK START\"\n.nf")?;
        writeln!(page, "{}", escape(&after.to_string()))?;
        writeln!(page, ".fi")?;
    }
    man.render_version_section(&mut page)?;
    Ok(page)
}

/// roff treats a leading '.' or '\'' as a request and '\' as an escape.
fn escape(text: &str) -> String {
    text.lines()
        .map(|line| {
            let line = line.replace('\\', "\\e");
            if line.starts_with('.') || line.starts_with('\'') {
                format!("\\&{line}")
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn man(args: ManArgs) -> i32 {
    let page = match render_man() {
        Ok(page) => page,
        Err(e) => {
            eprintln!("tollgate man: cannot render the page: {e}");
            return exit::ENVIRONMENT;
        }
    };
    let written = match &args.out {
        Some(path) => std::fs::write(path, &page).map_err(|e| format!("{}: {e}", path.display())),
        None => std::io::stdout()
            .lock()
            .write_all(&page)
            .map_err(|e| e.to_string()),
    };
    match written {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("tollgate man: cannot write the page: {e}");
            exit::ENVIRONMENT
        }
    }
}
