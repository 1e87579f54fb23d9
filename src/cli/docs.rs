//! `tollgate completions SHELL` and `tollgate man`: generated from the same clap definitions the
//! parser uses, so they cannot drift from the real options.

use super::{exit, Cli};
use clap::CommandFactory;
use std::io::Write;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "The bash, zsh and fish scripts complete task names and turn ids too (they ask \
`tollgate __complete`, which reads the home); elvish and powershell get the commands and options.

Where to put the script (the folders may not exist yet on a fresh account):
  mkdir -p ~/.local/share/bash-completion/completions
  tollgate completions bash > ~/.local/share/bash-completion/completions/tollgate
  mkdir -p ~/.zfunc && tollgate completions zsh > ~/.zfunc/_tollgate   (and fpath+=(~/.zfunc) in ~/.zshrc, before compinit)
  mkdir -p ~/.config/fish/completions
  tollgate completions fish > ~/.config/fish/completions/tollgate.fish"
)]
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

/// The command line as completions offer it: the hidden commands (`worker`, `__complete`) left
/// out, since clap's generators list every subcommand.
fn visible_command() -> clap::Command {
    let full = Cli::command();
    clap::Command::new("tollgate")
        .version(env!("CARGO_PKG_VERSION"))
        .args(full.get_arguments().cloned())
        .subcommands(full.get_subcommands().filter(|s| !s.is_hide_set()).cloned())
}

/// bash: ask `tollgate __complete` first (the words up to the cursor, split on blanks so that
/// `build:3` stays one word), the static function where it has nothing to offer.
const BASH_DYNAMIC: &str = r#"
_tollgate_dynamic() {
    local line="${COMP_LINE:0:COMP_POINT}"
    local -a words
    read -ra words <<< "$line"
    [[ "$line" =~ [[:space:]]$ || ${#words[@]} -eq 0 ]] && words+=("")
    local cur="${words[${#words[@]}-1]}"
    local candidates
    candidates=$("${words[0]}" __complete --shell bash --index $(( ${#words[@]} - 1 )) -- "${words[@]}" 2>/dev/null)
    if [[ -n "$candidates" ]]; then
        local IFS=$'\n'
        COMPREPLY=($candidates)
        # bash splits words at ':' (COMP_WORDBREAKS): offer what follows the last one.
        if [[ "$cur" == *:* && "$COMP_WORDBREAKS" == *:* ]]; then
            local prefix="${cur%"${cur##*:}"}"
            COMPREPLY=("${COMPREPLY[@]#"$prefix"}")
        fi
        return 0
    fi
    _tollgate "$@"
}
if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _tollgate_dynamic -o nosort -o bashdefault -o default tollgate
else
    complete -F _tollgate_dynamic -o bashdefault -o default tollgate
fi
"#;

/// zsh: the static function renamed `_tollgate_static`, and a `_tollgate` that asks
/// `tollgate __complete` first.
const ZSH_DYNAMIC: &str = r#"
_tollgate() {
    local -a candidates
    candidates=("${(@f)$("${words[1]}" __complete --shell zsh --index $(( CURRENT - 1 )) -- "${words[@]}" 2>/dev/null)}")
    if [[ -n "${candidates[1]}" ]]; then
        _describe -t tollgate-turns 'turn or task' candidates
    else
        _tollgate_static "$@"
    fi
}
"#;

/// fish: one more rule whose candidates come from `tollgate __complete`.
const FISH_DYNAMIC: &str = r#"
function __tollgate_dynamic
    set -l words (commandline -opc) (commandline -ct)
    $words[1] __complete --shell fish --index (math (count $words) - 1) -- $words 2>/dev/null
end
complete -c tollgate -a '(__tollgate_dynamic)'
"#;

/// The completion script for `shell`: clap's static one for the visible commands, with the
/// dynamic candidates of `tollgate __complete` added for bash, zsh and fish.
pub fn completion_script(shell: clap_complete::Shell) -> Vec<u8> {
    let mut command = visible_command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "tollgate", &mut script);
    let text = String::from_utf8_lossy(&script).into_owned();
    let text = match shell {
        clap_complete::Shell::Bash => {
            // The static registration is replaced by the dynamic one.
            let cut = text
                .rfind("\nif [[ \"${BASH_VERSINFO[0]}\"")
                .unwrap_or(text.len());
            format!("{}{BASH_DYNAMIC}", &text[..cut])
        }
        clap_complete::Shell::Zsh => {
            let renamed = text.replacen("\n_tollgate() {", "\n_tollgate_static() {", 1);
            match renamed.rfind("\nif [ \"$funcstack[1]\" = \"_tollgate\" ]") {
                Some(at) => format!("{}{ZSH_DYNAMIC}{}", &renamed[..at], &renamed[at..]),
                None => renamed,
            }
        }
        clap_complete::Shell::Fish => format!("{text}{FISH_DYNAMIC}"),
        _ => text,
    };
    text.into_bytes()
}

/// Writes the completion script for `args.shell` to standard output.
pub fn completions(args: CompletionsArgs) -> i32 {
    let mut out = std::io::stdout().lock();
    match out
        .write_all(&completion_script(args.shell))
        .and_then(|()| out.flush())
    {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("tollgate completions: cannot write the script: {e}");
            exit::ENVIRONMENT
        }
    }
}

/// How an argument reads in the man page: `\-\-timeout \fIDUR\fR`, `\fITURN\fR...`.
fn argument_names(arg: &clap::Arg) -> String {
    let value = arg
        .get_value_names()
        .map(|names| {
            names
                .iter()
                .map(|n| format!("\\fI{}\\fR", escape(n.as_str())))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| format!("\\fI{}\\fR", arg.get_id().as_str().to_uppercase()));
    let many = arg.get_num_args().is_some_and(|n| n.max_values() > 1);
    let value = if many { format!("{value}...") } else { value };
    if arg.is_positional() {
        return value;
    }
    let mut names = Vec::new();
    if let Some(short) = arg.get_short() {
        names.push(format!("\\-{short}"));
    }
    if let Some(long) = arg.get_long() {
        names.push(format!("\\-\\-{long}"));
    }
    let names = names.join(", ");
    if arg.get_action().takes_values() {
        format!("{names} {value}")
    } else {
        names
    }
}

/// Renders the man page (roff): the top-level page with every subcommand, its options with
/// their values, and its own notes and examples.
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
            writeln!(page, ".TP\n\\fB{}\\fR", argument_names(arg))?;
            if let Some(help) = arg.get_long_help().or(arg.get_help()) {
                writeln!(page, "{}", escape(&help.to_string()))?;
            }
        }
        if let Some(after) = sub.get_after_long_help().or(sub.get_after_help()) {
            writeln!(page, ".PP\n.nf\n{}\n.fi", escape(&after.to_string()))?;
        }
    }
    // The top-level notes (exit codes, quick start) once, under their own name.
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
