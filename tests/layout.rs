//! The shell's layout shows its architecture (DESIGN.md, "Where things live"): no import cycle
//! among the top-level modules of `src/`. A module's dependencies are the top-level modules it
//! names as `crate::<module>` (in `use` lines and in paths) anywhere in its files; a cycle means
//! two modules cannot be read, tested or changed apart, and the test names it with the files and
//! lines that tie it; inside each folder module its files form no import cycle either. The same
//! scan holds two more rules: no thread-local carries protocol state,
//! and serve takes its synchronisation from `src/sync.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The top-level module a file of `src/` belongs to (`src/queue/sqlite.rs` → `queue`), `None` for
/// the crate's root files.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib" && name != "main").then(|| name.to_string())
}

/// The top-level modules `line` names through `crate::`, besides comments.
fn named_modules(line: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap_or("");
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            names.push(name);
        }
    }
    // `use crate::{a, b::c}` names several.
    if let Some(group) = code.trim_start().strip_prefix("use crate::{") {
        for part in group.split(',') {
            let name: String = part
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.push(name);
            }
        }
    }
    names
}

/// The cycles of `edges` (module → modules), each as the strongly connected set of its modules.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reaches = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(m) = stack.pop() {
            for next in edges.get(&m).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let mut found: Vec<BTreeSet<String>> = Vec::new();
    for module in edges.keys() {
        if found.iter().any(|c| c.contains(module)) {
            continue;
        }
        let forward = reaches(module);
        if !forward.contains(module) {
            continue;
        }
        let component: BTreeSet<String> = forward
            .into_iter()
            .filter(|other| reaches(other).contains(module))
            .collect();
        found.push(component);
    }
    found
}

#[test]
fn the_top_level_modules_of_the_shell_form_no_import_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = BTreeSet::new();
    for file in rust_files(&src) {
        if let Some(module) = module_of(&src, &file) {
            modules.insert(module);
        }
    }
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut why: BTreeMap<(String, String), String> = BTreeMap::new();
    for file in rust_files(&src) {
        let Some(module) = module_of(&src, &file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("read a source file");
        for (n, line) in text.lines().enumerate() {
            for named in named_modules(line) {
                if named != module && modules.contains(&named) {
                    edges
                        .entry(module.clone())
                        .or_default()
                        .insert(named.clone());
                    why.entry((module.clone(), named))
                        .or_insert_with(|| format!("{}:{}", file.display(), n + 1));
                }
            }
        }
    }
    let found = cycles(&edges);
    let explain: Vec<String> = found
        .iter()
        .map(|cycle| {
            let ties: Vec<String> = why
                .iter()
                .filter(|((from, to), _)| cycle.contains(from) && cycle.contains(to))
                .map(|((from, to), at)| format!("  {from} -> {to} ({at})"))
                .collect();
            format!("{cycle:?}:\n{}", ties.join("\n"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "import cycles among src/'s top-level modules:\n{}",
        explain.join("\n")
    );
}

/// The functions of `text` longer than `limit` lines, as `(line, name, lines)`: a function
/// starts at its `fn` line and ends at the first line that is its indentation and `}` (the code
/// is rustfmt's). The file's `#[cfg(test)] mod tests` and everything after it are not read.
fn long_functions(text: &str, limit: usize) -> Vec<(usize, String, usize)> {
    let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let Some(at) = trimmed.find("fn ") else {
            continue;
        };
        let head = &trimmed[..at];
        let is_fn = head
            .split_whitespace()
            .all(|w| w.starts_with("pub") || w == "const" || w == "unsafe" || w == "async");
        if !is_fn || trimmed.ends_with(';') {
            continue;
        }
        let indent = &line[..line.len() - trimmed.len()];
        let close = format!("{indent}}}");
        let Some(end) = lines[start..].iter().position(|l| *l == close) else {
            continue;
        };
        let name: String = trimmed[at + 3..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if end + 1 > limit {
            found.push((start + 1, name, end + 1));
        }
    }
    found
}

/// The functions of the core, of the section runner and of the driver are at most 70 lines, so
/// each reads as one decision (issue 26; tests and test modules aside).
#[test]
fn the_functions_of_the_core_the_section_runner_and_the_driver_are_at_most_70_lines() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<PathBuf> = rust_files(&manifest.join("core/src"))
        .into_iter()
        .filter(|f| !f.ends_with("tests.rs"))
        .collect();
    files.push(manifest.join("src/section.rs"));
    files.push(manifest.join("src/driver.rs"));
    let mut long = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read a source file");
        for (line, name, lines) in long_functions(&text, 70) {
            long.push(format!("{}:{line} {name}: {lines} lines", file.display()));
        }
    }
    assert!(
        long.is_empty(),
        "functions over 70 lines:\n{}",
        long.join("\n")
    );
}

/// The length scan measures a function from its `fn` line to its closing brace, and skips
/// declarations and test modules.
#[test]
fn the_length_scan_measures_functions_and_skips_declarations_and_tests() {
    let body = "    x();\n".repeat(3);
    let text = format!(
        "pub fn short() {{\n{body}}}\n\ntrait T {{\n    fn declared(&self);\n}}\n\n\
         impl S {{\n    pub(crate) fn method(&self) {{\n    {body}    }}\n}}\n\n\
         #[cfg(test)]\nmod tests {{\n    fn long() {{\n{body}{body}    }}\n}}\n"
    );
    assert_eq!(
        long_functions(&text, 4),
        vec![(1, "short".to_string(), 5), (12, "method".to_string(), 5)]
    );
    assert!(long_functions(&text, 5).is_empty());
}

/// The sibling files `line` names as `super::<name>` (and `use super::{a, b}`), besides
/// comments: the imports between the files of one folder module.
fn named_siblings(line: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap_or("");
    let ident = |text: &str| -> String {
        text.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("super::") {
        rest = &rest[at + "super::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or("");
            names.extend(group.split(',').map(|part| ident(part.trim())));
        } else {
            names.push(ident(rest));
        }
    }
    names.retain(|name| !name.is_empty() && name != "super");
    names
}

/// The import cycles among the files of each folder module under `root` (`src/queue/records/`,
/// `model/src/slots/`...), each named with the file and line of every tie.
fn cycles_inside_folders(root: &Path) -> Vec<String> {
    let mut folders: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
    for file in rust_files(root) {
        if let Some(folder) = file.parent() {
            folders.entry(folder.to_path_buf()).or_default().push(file);
        }
    }
    let mut found = Vec::new();
    for (folder, files) in folders {
        let stem = |f: &Path| f.file_stem().and_then(|s| s.to_str()).map(str::to_string);
        let siblings: BTreeSet<String> = files.iter().filter_map(|f| stem(f)).collect();
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut why: BTreeMap<(String, String), String> = BTreeMap::new();
        for file in &files {
            let Some(me) = stem(file).filter(|m| m != "mod") else {
                continue;
            };
            let text = std::fs::read_to_string(file).expect("read a source file");
            for (n, line) in text.lines().enumerate() {
                for named in named_siblings(line) {
                    if named != me && named != "mod" && siblings.contains(&named) {
                        edges.entry(me.clone()).or_default().insert(named.clone());
                        why.entry((me.clone(), named))
                            .or_insert_with(|| format!("{}:{}", file.display(), n + 1));
                    }
                }
            }
        }
        for cycle in cycles(&edges) {
            let ties: Vec<String> = why
                .iter()
                .filter(|((from, to), _)| cycle.contains(from) && cycle.contains(to))
                .map(|((from, to), at)| format!("  {from} -> {to} ({at})"))
                .collect();
            found.push(format!(
                "{}: {cycle:?}:\n{}",
                folder.display(),
                ties.join("\n")
            ));
        }
    }
    found
}

/// Inside a folder module the files form layers too: each file imports only files below it,
/// so a file can be read with what it imports and no more.
#[test]
fn the_files_of_each_folder_module_form_no_import_cycle() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for root in ["src", "core/src", "model/src"] {
        found.extend(cycles_inside_folders(&manifest.join(root)));
    }
    assert!(
        found.is_empty(),
        "import cycles among the files of a folder module:\n{}",
        found.join("\n")
    );
}

/// The sibling scan reads single names, groups and paths, and skips comments.
#[test]
fn the_sibling_scan_reads_groups_paths_and_skips_comments() {
    assert_eq!(named_siblings("use super::state::{A, B};"), vec!["state"]);
    assert_eq!(
        named_siblings("use super::{access, db::Db};"),
        vec!["access", "db"]
    );
    assert_eq!(
        named_siblings("    x = super::render::f(super::state::g());"),
        vec!["render", "state"]
    );
    assert!(named_siblings("// see super::render").is_empty());
}

/// The check finds a cycle when there is one (its teeth), and none in a chain.
#[test]
fn the_cycle_check_finds_a_cycle_and_passes_a_chain() {
    let edges = |pairs: &[(&str, &str)]| {
        let mut map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in pairs {
            map.entry(a.to_string()).or_default().insert(b.to_string());
        }
        map
    };
    assert!(cycles(&edges(&[("a", "b"), ("b", "c")])).is_empty());
    let found = cycles(&edges(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]));
    assert_eq!(found.len(), 1);
    assert_eq!(
        found[0],
        ["a", "b", "c"].iter().map(|s| s.to_string()).collect()
    );
    assert_eq!(
        named_modules("use crate::{tasks, queue::Store}; // crate::home"),
        vec!["tasks", "queue"]
    );
}

/// The one per-thread cell the shell may keep: SQLite's busy handler gets no context argument
/// that reaches the wait's start, so its timer is per thread; it carries no protocol state.
const ALLOWED_THREAD_LOCALS: &[(&str, &str)] = &[("src/queue/busy.rs", "WAIT_BEGAN")];

/// The statics declared inside each `thread_local!` block of `text`, with their line numbers
/// (1-based), comments ignored.
fn thread_locals(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut depth: Option<i32> = None;
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        if depth.is_none() {
            if let Some(at) = code.find("thread_local!") {
                let rest = &code[at..];
                collect_static(rest, n + 1, &mut found);
                // Open until its brackets close: on this line for a one-line block.
                let opened = rest.contains('{') || rest.contains('(');
                let delta = brace_delta(rest);
                depth = (delta > 0 || !opened).then_some(delta);
            }
            continue;
        }
        collect_static(code, n + 1, &mut found);
        let d = depth.map(|d| d + brace_delta(code));
        depth = d.filter(|d| *d > 0);
    }
    found
}

fn brace_delta(code: &str) -> i32 {
    code.chars()
        .map(|c| match c {
            '{' | '(' => 1,
            '}' | ')' => -1,
            _ => 0,
        })
        .sum()
}

fn collect_static(code: &str, line: usize, found: &mut Vec<(usize, String)>) {
    let spaced = code.replace(['(', '{'], " ");
    let mut words = spaced.split_whitespace();
    while let Some(word) = words.next() {
        if word == "static" {
            if let Some(name) = words.next() {
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                found.push((line, name));
            }
        }
    }
}

/// No thread-local carries protocol state (issue 26, "No hidden inputs"): a section's open
/// transaction, the fleet's view, drain or a side connection reach the code that uses them as
/// arguments, so a reader of a signature sees what it depends on. The only per-thread cell
/// allowed is SQLite's busy-handler wait timer; the test names the file and line of any other.
#[test]
fn no_thread_local_in_the_shell_carries_protocol_state() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut others = Vec::new();
    for file in rust_files(&root.join("src")) {
        let text = std::fs::read_to_string(&file).expect("read a source file");
        let relative = file.strip_prefix(root).expect("under the crate");
        let relative = relative.to_string_lossy().into_owned();
        for (line, name) in thread_locals(&text) {
            if !ALLOWED_THREAD_LOCALS.contains(&(relative.as_str(), name.as_str())) {
                others.push(format!("  {relative}:{line}: thread_local {name}"));
            }
        }
    }
    assert!(
        others.is_empty(),
        "thread-locals other than the busy handler's wait timer:\n{}",
        others.join("\n")
    );
}

/// The thread-local scan finds each static of a block, one-line blocks included, and skips
/// comments (its teeth).
#[test]
fn the_thread_local_scan_finds_every_static_of_a_block() {
    let text = "// thread_local! { static NOT: u8 = 0; }\n\
                thread_local! {\n    /// doc\n    static A: Cell<u8> = const { Cell::new(0) };\n\
                    static B: RefCell<Option<u8>> = RefCell::new(None);\n}\n\
                static OUTSIDE: u8 = 0;\n\
                thread_local!(static C: u8 = 0);\n";
    assert_eq!(
        thread_locals(text),
        vec![
            (4, "A".to_string()),
            (5, "B".to_string()),
            (8, "C".to_string())
        ]
    );
}

/// `file:line: text` for each line of `file` that names std's synchronisation outside a comment.
fn direct_sync_uses(root: &Path, file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).expect("read a source file");
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let code = line.split("//").next().unwrap_or("");
            code.contains("std::sync::") || code.contains("std::thread")
        })
        .map(|(i, line)| {
            let name = file.strip_prefix(root).unwrap_or(file).display();
            format!("{name}:{}: {}", i + 1, line.trim())
        })
        .collect()
}

/// Serve's threads, locks, atomics and channels go through the crate's one synchronisation shim
/// (`src/sync.rs`: std in production, loom under `--cfg tollgate_loom`), so what loom races is
/// what serve runs and a reader finds every primitive in one place. A file under `src/serve/` (or
/// `src/group_commit.rs`) that names `std::sync::` or `std::thread` directly fails, named with
/// its line.
#[test]
fn serve_takes_every_primitive_from_the_sync_shim() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = rust_files(&root.join("src/serve"));
    files.push(root.join("src/group_commit.rs"));
    assert!(files.len() > 5, "src/serve/ was not found");
    let found: Vec<String> = files
        .iter()
        .flat_map(|f| direct_sync_uses(root, f))
        .collect();
    assert!(
        found.is_empty(),
        "these lines name std's synchronisation directly; take it from `crate::sync` \
         (src/sync.rs) instead:\n{}",
        found.join("\n")
    );
}
