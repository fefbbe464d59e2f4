//! The shape of the code, held by reading it (docs/ARCHITECTURE.md): every module uses only its
//! layer and those below (`LAYERS`, read with a Rust parser), the modules form no import circle,
//! only the command layer and `ui` know about terminals, the clap types stop at the settings,
//! every input file is read through the one counted path, and comments cite the project's own
//! documents.

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
        // The print macros are refused everywhere (below).
        &[
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

/// The standard print macros panic on a closed pipe (`mara up --output json 2>&1 >/dev/null |
/// head -3`), which would end a run half-recorded: mara's code writes through `ui::print`,
/// `ui::eprint` and `ui::errln!`, which never do.
#[test]
fn no_standard_print_macro_can_panic_on_a_closed_pipe() {
    let found = used_outside(&["println!", "print!(", "eprintln!", "eprint!("], &[]);
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
    // watchdog's look at /proc, the /dev/null an engine reads as its stdin — and `files::read`, through which the files something else may
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
            "run::spawn",
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

/// The layers, from the bottom (docs/ARCHITECTURE.md, "Modules"): a module uses modules of its
/// own layer and below, never above. Read from the code by a Rust parser (`syn`), so that no
/// way of naming a module escapes it: every `use` tree (nested groups, `super::{super::…}`,
/// `pub(crate) use` spread over lines), every path in code and in macros, what `lib.rs`
/// re-exports, and the code after `mod tests`. Only what `#[cfg(test)]` keeps out of the build
/// is not read.
const LAYERS: &[&[&str]] = &[
    &["error", "status", "style", "clock", "files", "parallel"],
    &["engine", "cluster"],
    &["workspace"],
    &["provider"],
    &["graph"],
    &["fingerprint", "ledger", "policy"],
    &["cli"],
    &["settings"],
    &["configure"],
    &["deployment"],
    &["run"],
    &["ui"],
    &["commands"],
    &["lib", "main"],
];

/// A module's layer (its top-level module's place in `LAYERS`).
fn layer(module: &str) -> Option<usize> {
    let top = top(module);
    LAYERS.iter().position(|layer| layer.contains(&top))
}

/// One reference of a module to another: where, and the absolute path it names (`run::plan`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reference {
    line: usize,
    path: Vec<String>,
}

/// Whether an item is kept out of the build but for tests (`#[cfg(test)]`).
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

/// Collects the `crate::`, `self::` and `super::` paths of a file's items (not test-only ones),
/// resolved against the module `at` they are in.
struct Paths {
    at: Vec<String>,
    found: Vec<Reference>,
    /// The names a `use … as` (or `extern crate self as`) gives a path of the crate here: each
    /// stands for what it names (`use crate as root;`: the crate's root).
    aliases: BTreeMap<String, Vec<String>>,
}

impl Paths {
    /// `segments`, named in module `self.at`, as an absolute path (`None`: not the crate's).
    fn absolute(&self, segments: &[String]) -> Option<Vec<String>> {
        let (first, rest) = segments.split_first()?;
        let mut base = match first.as_str() {
            "crate" => Vec::new(),
            "self" => self.at.clone(),
            "super" => {
                let mut base = self.at.clone();
                base.pop()?;
                base
            }
            alias => self.aliases.get(alias)?.clone(),
        };
        let mut rest = rest;
        while let Some((next, tail)) = rest.split_first().filter(|(n, _)| *n == "super") {
            let _ = next;
            base.pop()?;
            rest = tail;
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    fn add(&mut self, line: usize, segments: &[String]) {
        if let Some(path) = self.absolute(segments) {
            self.found.push(Reference { line, path });
        }
    }

    /// The paths of a `use` tree, each resolved.
    fn use_tree(&mut self, tree: &syn::UseTree, prefix: &mut Vec<String>) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(&p.tree, prefix);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let line = n.ident.span().start().line;
                let mut path = prefix.clone();
                if n.ident != "self" {
                    path.push(n.ident.to_string());
                }
                self.add(line, &path);
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                if r.ident != "self" {
                    path.push(r.ident.to_string());
                }
                if let Some(absolute) = self.absolute(&path) {
                    self.aliases.insert(r.rename.to_string(), absolute);
                }
                self.add(r.ident.span().start().line, &path);
            }
            syn::UseTree::Glob(g) => {
                self.add(g.star_token.spans[0].start().line, prefix);
            }
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(tree, prefix);
                }
            }
        }
    }

    /// `crate :: a :: b` and the like in a macro's tokens (which the parser leaves unread).
    fn tokens(&mut self, tokens: proc_macro2::TokenStream) {
        let tokens: Vec<proc_macro2::TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            if let proc_macro2::TokenTree::Group(g) = &tokens[i] {
                self.tokens(g.stream());
            }
            if let proc_macro2::TokenTree::Ident(first) = &tokens[i]
                && ["crate", "super", "self"].contains(&first.to_string().as_str())
            {
                let mut path = vec![first.to_string()];
                let mut j = i + 1;
                while let (
                    Some(proc_macro2::TokenTree::Punct(a)),
                    Some(proc_macro2::TokenTree::Punct(b)),
                    Some(proc_macro2::TokenTree::Ident(next)),
                ) = (tokens.get(j), tokens.get(j + 1), tokens.get(j + 2))
                    && a.as_char() == ':'
                    && b.as_char() == ':'
                {
                    path.push(next.to_string());
                    j += 3;
                }
                if path.len() > 1 {
                    self.add(first.span().start().line, &path);
                }
                i = j;
                continue;
            }
            i += 1;
        }
    }
}

impl Paths {
    /// A path written whole in a string literal among `tokens` (serde's `with = "crate::…"`).
    fn strings(&mut self, tokens: proc_macro2::TokenStream) {
        for token in tokens {
            match token {
                proc_macro2::TokenTree::Group(g) => self.strings(g.stream()),
                proc_macro2::TokenTree::Literal(literal) => {
                    let Ok(syn::Lit::Str(text)) = syn::parse_str::<syn::Lit>(&literal.to_string())
                    else {
                        continue;
                    };
                    if let Ok(path) = syn::parse_str::<syn::Path>(&text.value()) {
                        let segments: Vec<String> =
                            path.segments.iter().map(|s| s.ident.to_string()).collect();
                        self.add(literal.span().start().line, &segments);
                    }
                }
                _ => {}
            }
        }
    }
}

/// An expression as the tokens it is written with.
fn quote_tokens(expr: &syn::Expr) -> proc_macro2::TokenStream {
    let mut tokens = proc_macro2::TokenStream::new();
    quote::ToTokens::to_tokens(expr, &mut tokens);
    tokens
}

impl<'ast> syn::visit::Visit<'ast> for Paths {
    /// An attribute's arguments, which the parser leaves as tokens, and a path written in one
    /// of its strings (`#[serde(with = "crate::…")]`).
    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        let tokens = match &attr.meta {
            syn::Meta::List(list) => list.tokens.clone(),
            syn::Meta::NameValue(nv) => quote_tokens(&nv.value),
            syn::Meta::Path(_) => proc_macro2::TokenStream::new(),
        };
        self.strings(tokens.clone());
        self.tokens(tokens);
    }

    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs: &[syn::Attribute] = match item {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            syn::Item::Trait(t) => &t.attrs,
            syn::Item::Type(t) => &t.attrs,
            syn::Item::Macro(m) => &m.attrs,
            _ => &[],
        };
        if test_only(attrs) {
            return;
        }
        match item {
            syn::Item::Use(u) => self.use_tree(&u.tree, &mut Vec::new()),
            // `extern crate self as mara;`: the crate's root under another name.
            syn::Item::ExternCrate(e) if e.ident == "self" => {
                if let Some((_, rename)) = &e.rename {
                    self.aliases.insert(rename.to_string(), Vec::new());
                }
            }
            // An inline module: its paths are named from within it.
            syn::Item::Mod(m) if m.content.is_some() => {
                self.at.push(m.ident.to_string());
                syn::visit::visit_item_mod(self, m);
                self.at.pop();
            }
            item => syn::visit::visit_item(self, item),
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if let Some(first) = path.segments.first() {
            self.add(first.ident.span().start().line, &segments);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }
}

/// The references of a file of module `module` (its whole text, tests included: the parser
/// leaves out what `#[cfg(test)]` does).
fn parsed_references(module: &str, text: &str) -> Vec<Reference> {
    let file = syn::parse_file(text).unwrap_or_else(|e| panic!("{module}: {e}"));
    let mut paths = Paths {
        at: match module {
            "lib" | "main" => Vec::new(),
            module => module.split("::").map(str::to_string).collect(),
        },
        found: Vec::new(),
        aliases: BTreeMap::new(),
    };
    syn::visit::Visit::visit_file(&mut paths, &file);
    paths.found
}

/// Every Rust file under `src/` (with its tests), by module path.
fn whole_sources() -> BTreeMap<String, (PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    sources()
        .into_keys()
        .map(|module| {
            let file = match module.as_str() {
                "lib" | "main" => root.join(format!("{module}.rs")),
                _ => {
                    let rel: PathBuf = module.split("::").collect();
                    let flat = root.join(&rel).with_extension("rs");
                    match flat.is_file() {
                        true => flat,
                        false => root.join(rel).join("mod.rs"),
                    }
                }
            };
            let text = std::fs::read_to_string(&file).unwrap();
            (module, (file, text))
        })
        .collect()
}

/// What `lib.rs` names at the crate's root besides its modules: each re-export (`pub use
/// settings as knobs;`, `pub use commands::output;`) → the top-level module it names; a glob
/// re-export (`pub use commands::*;`) → `"*"` and the module; an item of its own (a function, a
/// macro) → `lib`.
fn root_names(lib: &str) -> BTreeMap<String, String> {
    fn walk(tree: &syn::UseTree, first: Option<String>, into: &mut BTreeMap<String, String>) {
        let first_of = |ident: &syn::Ident| match (&first, ident.to_string().as_str()) {
            (Some(first), _) => first.clone(),
            (None, "crate") => String::new(),
            (None, name) => name.to_string(),
        };
        match tree {
            syn::UseTree::Path(p) => {
                let next = first_of(&p.ident);
                walk(&p.tree, Some(next).filter(|n| !n.is_empty()), into);
            }
            syn::UseTree::Rename(r) => {
                into.insert(r.rename.to_string(), first_of(&r.ident));
            }
            syn::UseTree::Name(n) if first.is_some() => {
                into.insert(n.ident.to_string(), first_of(&n.ident));
            }
            syn::UseTree::Glob(_) => {
                into.insert(
                    format!("*{}", first.clone().unwrap_or_default()),
                    first.unwrap_or_default(),
                );
            }
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    walk(tree, first.clone(), into);
                }
            }
            syn::UseTree::Name(_) => {}
        }
    }
    let file = syn::parse_file(lib).expect("lib.rs parses");
    let mut found = BTreeMap::new();
    for item in &file.items {
        let name = match item {
            syn::Item::Use(u) => {
                walk(&u.tree, None, &mut found);
                continue;
            }
            syn::Item::Fn(f) => f.sig.ident.to_string(),
            syn::Item::Const(c) => c.ident.to_string(),
            syn::Item::Static(s) => s.ident.to_string(),
            syn::Item::Struct(s) => s.ident.to_string(),
            syn::Item::Enum(e) => e.ident.to_string(),
            syn::Item::Macro(m) => match &m.ident {
                Some(ident) => ident.to_string(),
                None => continue,
            },
            _ => continue,
        };
        found.insert(name, "lib".to_string());
    }
    found
}

/// Every reference of the crate's modules that goes up a layer, or that names at the crate's
/// root what no layer holds (so that it could hide one): `(module, line, what it names)`.
fn upward(sources: &BTreeMap<String, (PathBuf, String)>) -> Vec<(String, usize, String)> {
    let root = sources
        .get("lib")
        .map(|(_, t)| root_names(t))
        .unwrap_or_default();
    let mut up = Vec::new();
    for (name, module) in root.iter().filter(|(name, _)| name.starts_with('*')) {
        let _ = name;
        up.push((
            "lib".into(),
            0,
            format!("{module}::* (a glob re-export hides what it names)"),
        ));
    }
    for (module, (_, text)) in sources {
        let Some(own) = layer(module) else {
            up.push((
                module.clone(),
                0,
                "its module has no layer in LAYERS".into(),
            ));
            continue;
        };
        for reference in parsed_references(module, text) {
            let Some(first) = reference.path.first() else {
                continue;
            };
            // A name the crate's root re-exports stands for what it names.
            let named = match layer(first) {
                Some(_) => first.as_str(),
                None => match root.get(first) {
                    Some(target) => target.as_str(),
                    None => {
                        let said = format!("{} (no layer holds it)", reference.path.join("::"));
                        up.push((module.clone(), reference.line, said));
                        continue;
                    }
                },
            };
            if layer(named).is_some_and(|target| target > own) {
                up.push((module.clone(), reference.line, reference.path.join("::")));
            }
        }
    }
    up
}

#[test]
fn every_module_uses_only_its_layer_and_those_below() {
    let up = upward(&whole_sources());
    assert!(up.is_empty(), "imports that go up a layer: {up:#?}");
}

/// The ways an upward reference was seen to hide (issue 41): each is found.
#[test]
fn an_upward_reference_is_found_however_it_is_written() {
    let file = |module: &str, text: &str| {
        BTreeMap::from([
            (
                "lib".to_string(),
                (
                    PathBuf::new(),
                    "pub mod settings;\npub use settings as knobs;\n".to_string(),
                ),
            ),
            (module.to_string(), (PathBuf::new(), text.to_string())),
        ])
    };
    let found = |module: &str, text: &str| -> Vec<String> {
        upward(&file(module, text))
            .into_iter()
            .map(|(_, _, p)| p)
            .collect()
    };
    assert_eq!(
        found("ledger", "use crate::settings::Settings;"),
        ["settings::Settings"]
    );
    assert_eq!(
        found(
            "ledger::records",
            "use super::{store, super::run::plan::RunPlan};"
        ),
        ["run::plan::RunPlan"]
    );
    assert_eq!(
        found(
            "ledger",
            "pub(crate) use crate::{\n    error::Error,\n    commands::run,\n};"
        ),
        ["commands::run"]
    );
    assert_eq!(
        found("ledger", "fn f() { let _ = crate::ui::print(\"x\"); }"),
        ["ui::print"]
    );
    assert_eq!(
        found(
            "ledger",
            "fn f() -> bool { matches!(1, _ if crate::deployment::ok()) }"
        ),
        ["deployment::ok"]
    );
    assert_eq!(
        found("ledger", "fn f() { crate::knobs::load(); }"),
        ["knobs::load"]
    );
    assert_eq!(
        found(
            "status",
            "#[cfg(test)]\nmod tests {}\nfn after() { crate::run::go(); }"
        ),
        ["run::go"]
    );
    // The crate's root under another name, here or in lib.rs.
    assert_eq!(
        found(
            "ledger",
            "use crate as root;\nfn f() { root::commands::run(); }"
        ),
        ["commands::run"]
    );
    assert_eq!(
        found(
            "ledger::records",
            "use super::super as root;\nfn f() { root::ui::go(); }"
        ),
        ["ui::go"]
    );
    assert_eq!(
        found(
            "ledger",
            "use crate::{self as c};\nfn f() { c::run::go(); }"
        ),
        ["run::go"]
    );
    assert_eq!(
        found("ledger", "use crate::commands as c;\nfn f() { c::x(); }"),
        ["commands", "commands::x"]
    );
    assert_eq!(
        found(
            "ledger",
            "extern crate self as mara;\nfn f() { ::mara::commands::x(); }"
        ),
        ["commands::x"]
    );
    // In an attribute's tokens, or its string.
    assert_eq!(
        found("ledger", "#[attr(crate::commands::x)]\nfn f() {}"),
        ["commands::x"]
    );
    assert_eq!(
        found(
            "ledger",
            "struct S { #[serde(with = \"crate::run::x\")] a: u8 }"
        ),
        ["run::x"]
    );
    // What no layer holds at the crate's root is named, not passed over.
    assert_eq!(
        found("ledger", "fn f() { crate::nowhere::x(); }"),
        ["nowhere::x (no layer holds it)"]
    );
    // What tests alone use is theirs.
    assert!(
        found(
            "ledger",
            "#[cfg(test)]\nmod tests { use crate::run::plan; }"
        )
        .is_empty()
    );
    assert!(
        found(
            "ledger::records",
            "use crate::error::Error; use super::store;"
        )
        .is_empty()
    );
}
