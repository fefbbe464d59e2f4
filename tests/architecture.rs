//! The shape of the code, held by reading it (docs/ARCHITECTURE.md): the modules form no import
//! circle, only the command layer and `ui` know about terminals, the clap types stop at the
//! settings, every input file is read through the one counted path, and comments cite the
//! project's own documents.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every Rust file under `src/`, by module path (`run::hooks`, `provider`, `main`), without its
/// unit tests.
fn sources() -> BTreeMap<String, (PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = BTreeMap::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(&root).unwrap().with_extension("");
            let mut parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = match text.find("#[cfg(test)]\nmod tests") {
                Some(at) => text[..at].to_string(),
                None => text,
            };
            found.insert(parts.join("::"), (path, code));
        }
    }
    found
}

/// The lines of `code` that are code, not comments.
fn code_lines(code: &str) -> impl Iterator<Item = (usize, &str)> {
    code.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .map(|(i, l)| (i + 1, l))
}

/// `code` with every `use` statement on one line, so that a grouped import spread over lines
/// reads as one.
fn joined_uses(code: &str) -> String {
    let mut out = String::new();
    let mut in_use = false;
    for line in code.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        if !in_use && (trimmed.starts_with("use ") || trimmed.starts_with("pub use ")) {
            in_use = true;
        }
        out.push_str(line.trim());
        if in_use && !trimmed.trim_end().ends_with(';') {
            out.push(' ');
        } else {
            in_use = false;
            out.push('\n');
        }
    }
    out
}

/// The paths a `use` tree names after `prefix::`: `a::b`, `{a, b::{c, d}}` and the like, each as
/// its segments up to the first brace.
fn paths_after(rest: &str) -> Vec<Vec<String>> {
    let ident = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_');
    let Some(inner) = rest.strip_prefix('{') else {
        // `a::b::c`, or `a::b::{…}`: the segments, then each path of the group after them.
        let mut path: Vec<String> = Vec::new();
        let mut tail = rest;
        loop {
            let end = tail
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            if !ident(&tail[..end]) {
                break;
            }
            path.push(tail[..end].to_string());
            tail = &tail[end..];
            match tail.strip_prefix("::") {
                Some(group) if group.starts_with('{') => {
                    return paths_after(group)
                        .into_iter()
                        .map(|rest| path.iter().cloned().chain(rest).collect())
                        .collect();
                }
                Some(next) => tail = next,
                None => break,
            }
        }
        return vec![path];
    };
    // The items of the group, split at the commas outside inner braces.
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&inner[start..i]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
        .into_iter()
        .map(str::trim)
        .filter(|item| !item.is_empty() && *item != "self")
        .flat_map(|item| {
            let (head, tail) = match item.find("::{") {
                Some(at) => (&item[..at], Some(&item[at + 2..])),
                None => (item, None),
            };
            let head: Vec<String> = head
                .split("::")
                .map(|s| s.split_whitespace().next().unwrap_or_default().to_string())
                .take_while(|s| ident(s))
                .collect();
            match tail {
                Some(tail) => paths_after(tail)
                    .into_iter()
                    .map(|rest| head.iter().cloned().chain(rest).collect())
                    .collect(),
                None => vec![head],
            }
        })
        .collect()
}

#[test]
fn grouped_imports_are_read_to_their_leaves() {
    let leaves = |rest: &str| -> Vec<String> {
        paths_after(rest)
            .into_iter()
            .map(|p| p.join("::"))
            .collect()
    };
    assert_eq!(
        leaves("workspace::{yaml, yaml_edit};"),
        ["workspace::yaml", "workspace::yaml_edit"]
    );
    assert_eq!(
        leaves("{run::{plan, stacks}, ledger};"),
        ["run::plan", "run::stacks", "ledger"]
    );
    assert_eq!(leaves("error::Result;"), ["error::Result"]);
    assert_eq!(leaves("a::b::{self, c::{d}};"), ["a::b::c::d"]);
}

/// The modules `module` refers to: `crate::a::b…` and `super::…` (grouped imports included),
/// each resolved to the longest module path that exists.
fn references(module: &str, code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let resolve = |path: &[String]| -> Option<String> {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].join("::"))
            .find(|candidate| modules.contains(candidate))
    };
    let own: Vec<String> = module.split("::").map(str::to_string).collect();
    let code = joined_uses(code);
    let mut found = BTreeSet::new();
    for (_, line) in code_lines(&code) {
        for (at, _) in line.match_indices("crate::") {
            for path in paths_after(&line[at + "crate::".len()..]) {
                found.extend(resolve(&path));
            }
        }
        for (at, _) in line.match_indices("super::") {
            if at > 0 && line[..at].ends_with("::") {
                continue; // `super::super::` is read from its first `super`
            }
            let mut base = own.clone();
            base.pop();
            let mut rest = &line[at..];
            while let Some(next) = rest.strip_prefix("super::") {
                rest = next;
                if rest.starts_with("super::") {
                    base.pop();
                }
            }
            for path in paths_after(rest) {
                let full: Vec<String> = base.iter().cloned().chain(path).collect();
                found.extend(resolve(&full));
            }
        }
    }
    found.remove(module);
    found
}

/// A circle in `edges`, if there is one.
fn circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_string());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, edges, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

fn top(module: &str) -> &str {
    module.split("::").next().unwrap()
}

#[test]
fn the_modules_form_no_import_circle() {
    let sources = sources();
    let modules: BTreeSet<String> = sources.keys().cloned().collect();
    let mut between: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut within: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, (_, code)) in &sources {
        if module == "main" || module == "lib" {
            continue;
        }
        for target in references(module, code, &modules) {
            if top(&target) != top(module) {
                between
                    .entry(top(module).to_string())
                    .or_default()
                    .insert(top(&target).to_string());
            } else {
                // Within one module, siblings may not lean on each other in a circle; a module
                // and its own parent file (`mod.rs`) may.
                let is_ancestor = |a: &str, b: &str| b.starts_with(&format!("{a}::"));
                if !is_ancestor(&target, module) && !is_ancestor(module, &target) {
                    within
                        .entry(module.clone())
                        .or_default()
                        .insert(target.clone());
                }
            }
        }
    }
    assert_eq!(circle(&between), None, "between modules: {between:#?}");
    assert_eq!(circle(&within), None, "within modules: {within:#?}");
    // The direction of the flow: nothing below the command layer reaches up into it.
    for (module, targets) in &between {
        if module != "commands" {
            assert!(!targets.contains("commands"), "{module} uses commands");
        }
        for low in [
            "error", "status", "style", "clock", "files", "parallel", "engine",
        ] {
            if module == low {
                // `files` is the lowest of them (std and libc alone): any may use it.
                let allowed: BTreeSet<&str> =
                    ["error", "status", "style", "clock", "parallel", "files"]
                        .into_iter()
                        .collect();
                let above: Vec<&String> = targets
                    .iter()
                    .filter(|t| !allowed.contains(t.as_str()))
                    .collect();
                assert!(above.is_empty(), "{low} depends on {above:?}");
            }
        }
    }
}

#[test]
fn a_command_reaches_another_only_as_a_run() {
    // What commands share lives in the layers below them; a command that needs a run (the
    // cluster's up and destroy, `ci open` and `ci close`'s summary) starts it through the run's
    // own entry, `commands::run`, with plain settings.
    let sources = sources();
    let modules: BTreeSet<String> = sources.keys().cloned().collect();
    let mut found = Vec::new();
    for (module, (path, code)) in &sources {
        let Some(own) = module.strip_prefix("commands::") else {
            continue;
        };
        for (number, line) in code_lines(code) {
            if line.contains("crate::commands") {
                found.push(format!("{}:{number}: {}", path.display(), line.trim()));
            }
        }
        let own = own.split("::").next().unwrap();
        for target in references(module, code, &modules) {
            let Some(other) = target.strip_prefix("commands::") else {
                continue;
            };
            let other = other.split("::").next().unwrap();
            if other != own && other != "run" {
                found.push(format!("{module} uses {target}"));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// Lines that use something only `allowed` modules may use.
fn used_outside(needles: &[&str], allowed: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (module, (path, code)) in sources() {
        if allowed
            .iter()
            .any(|a| module == *a || module.starts_with(&format!("{a}::")))
        {
            continue;
        }
        for (number, line) in code_lines(&code) {
            if needles.iter().any(|n| line.contains(n)) {
                found.push(format!("{}:{number}: {}", path.display(), line.trim()));
            }
        }
    }
    found
}

#[test]
fn only_the_command_layer_and_ui_know_about_terminals() {
    let found = used_outside(
        &[
            "println!",
            "print!(",
            "eprintln!",
            "eprint!(",
            "IsTerminal",
            "is_terminal()",
            "dialoguer",
            "indicatif",
            "io::stdout()",
            "io::stderr()",
            "io::stdin()",
        ],
        // The watchdog's standard input is mara's pipe to it, never a terminal.
        &["main", "commands", "ui", "run::watchdog"],
    );
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn only_the_command_layer_uses_ui() {
    let found = used_outside(&["crate::ui", "ui::"], &["main", "commands", "ui"]);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn clap_types_stop_at_the_settings() {
    let found = used_outside(
        &["clap", "crate::cli"],
        &["main", "cli", "settings", "commands"],
    );
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn input_files_are_read_through_the_one_counted_path() {
    // `workspace::read_input` logs every read under `mara::reads` (tests/scale.rs counts them).
    // The other reads are not inputs: a project's files hashed for its fingerprint, what a
    // command step wrote to $MARA_OUTPUTS, the user's kubeconfig, mara's own logs, stdin, the
    // watchdog's look at /proc — and `files::read`, through which the files something else may
    // have put there are opened only when they are regular files.
    let found = used_outside(
        &["fs::read_to_string", "fs::read(", "File::open"],
        &[
            "files",
            "workspace",
            "fingerprint",
            "engine::command",
            "run::kubeconfig",
            "commands::ledger",
            "run::outputs",
            "run::watchdog",
        ],
    );
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn comments_cite_the_projects_own_documents() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    let mut dirs = vec![root.join("src"), root.join("tests")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs")
                && !path.ends_with("tests/architecture.rs")
            {
                let text = std::fs::read_to_string(&path).unwrap();
                for (number, line) in text.lines().enumerate() {
                    if line.contains("SPEC §") || line.contains("shared/reference") {
                        found.push(format!(
                            "{}:{}: {}",
                            path.display(),
                            number + 1,
                            line.trim()
                        ));
                    }
                }
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
    // Every `docs/…` a comment names exists.
    for (path, code) in sources().into_values() {
        for (at, _) in code.match_indices("docs/") {
            let name: String = code[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || matches!(c, '/' | '.' | '_' | '-'))
                .collect();
            let name = name.trim_end_matches('.');
            if name.ends_with(".md") {
                assert!(
                    root.join(name).is_file(),
                    "{} names {name}, which does not exist",
                    path.display()
                );
            }
        }
    }
}
