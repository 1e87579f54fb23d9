//! Serve's threads, locks, atomics and channels go through the crate's one synchronisation shim
//! (`src/sync.rs`, std in production, loom under `--cfg tollgate_loom`), so what loom races is
//! what serve runs and a reader finds every primitive in one place. A file under `src/serve/`
//! (or `src/group_commit.rs`) that names `std::sync::` or `std::thread` directly fails this test,
//! which names the file and line.

use std::path::{Path, PathBuf};

/// The files the shim rule covers: every `.rs` file under `src/serve/`, and `src/group_commit.rs`.
fn covered(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("src/group_commit.rs")];
    let mut stack = vec![root.join("src/serve")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src/serve") {
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

/// `file:line: text` for each line that names std's primitives outside a comment.
fn direct_uses(root: &Path, file: &Path) -> Vec<String> {
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

#[test]
fn serve_takes_every_primitive_from_the_sync_shim() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = covered(root);
    assert!(files.len() > 5, "src/serve/ was not found");
    let found: Vec<String> = files.iter().flat_map(|f| direct_uses(root, f)).collect();
    assert!(
        found.is_empty(),
        "these lines name std's synchronisation directly; take it from `crate::sync` \
         (src/sync.rs) instead:\n{}",
        found.join("\n")
    );
}
