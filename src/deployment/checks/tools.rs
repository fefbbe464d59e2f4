//! The tools the selected projects need, found on the PATH their processes get (docs/commands.md,
//! "validate"): each engine's binary, `kubectl` for the kubeconfig hooks, and the program every
//! command step and command hook starts (when it can be told without running a shell).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::Checks;
use crate::engine::EngineKind;
use crate::error::plural;
use crate::graph::Plan;
use crate::provider::Hook;
use crate::workspace::Workspace;
use crate::workspace::envfile;

/// The programs the selected projects need, found on the PATH their processes get.
pub fn tools(
    checks: &mut Checks,
    workspace: &Workspace,
    plan: &Plan<'_>,
    env: &BTreeMap<String, String>,
) {
    // Program → (why it is needed, whether its absence is only a warning).
    let mut tools: BTreeMap<String, (BTreeSet<String>, bool)> = BTreeMap::new();
    let mut need = |program: String, why: String, optional: bool| {
        let entry = tools
            .entry(program)
            .or_insert_with(|| (BTreeSet::new(), true));
        entry.0.insert(why);
        entry.1 &= optional;
    };
    let mut engines: BTreeMap<EngineKind, usize> = BTreeMap::new();
    for &i in plan.order() {
        let project = plan.graph.project(i);
        let engine = project.engine_or(workspace.settings.engine);
        *engines.entry(engine).or_default() += 1;
        let program_of = |command: &str| program_in(workspace, &project.path, command);
        for step in project.commands.all() {
            if let Some(program) = program_of(step) {
                need(
                    program,
                    format!("the command steps of {}", project.path),
                    false,
                );
            }
        }
        for hook in project.on_success.iter().chain(&project.on_destroy) {
            match hook {
                Hook::Kubeconfig { .. } => {
                    need(
                        "kubectl".into(),
                        "`mara kubectl` on the kubeconfig the hooks write".into(),
                        true,
                    );
                }
                Hook::Command { run } => {
                    if let Some(program) = program_of(run) {
                        need(program, format!("a hook of {}", project.path), false);
                    }
                }
            }
        }
    }
    let programs = crate::engine::Programs {
        pulumi: &workspace.settings.pulumi.binary,
    };
    for (engine, count) in engines {
        let Some(program) = engine.program(&programs) else {
            continue;
        };
        need(
            program,
            format!(
                "the engine of {count} {}",
                plural(count, "project", "projects")
            ),
            false,
        );
    }
    let path_var = env.get("PATH").cloned().unwrap_or_default();
    for (program, (why, optional)) in tools {
        let why = why.into_iter().collect::<Vec<_>>().join("; ");
        // A path is looked at, a name looked for on PATH.
        let missing = match program.contains('/') {
            true => format!("{program}: no such program ({why})"),
            false => format!("{program}: not found on PATH ({why})"),
        };
        match locate(&program, &path_var, &workspace.root) {
            Some(found) => checks.pass("tools", format!("{program}: {} ({why})", found.display())),
            None if optional => checks.warn("tools", missing, None),
            None => checks.fail("tools", missing, install_hint(&program)),
        }
    }
}

/// The program `command` of the project at `path` starts (`program_of`), as it is looked for:
/// a name on PATH, a relative path from where the command runs — the project's directory, the
/// workspace root when it has none — shown from the workspace root (`./deploy.sh` at the root
/// stays a path). The directory is looked at only for such a program: a plan of thousands
/// checks every project.
fn program_in(workspace: &Workspace, path: &str, command: &str) -> Option<String> {
    let program = program_of(command)?;
    if !program.contains('/') {
        return Some(program);
    }
    let dir = workspace.project_dir(path);
    let run_in = if dir.is_dir() {
        dir
    } else {
        workspace.root.clone()
    };
    let found: PathBuf = run_in.join(&program).components().collect();
    let shown = workspace.display(&found).display().to_string();
    Some(match shown.contains('/') {
        true => shown,
        false => format!("./{shown}"),
    })
}

/// How to get a program mara runs, when it is not on PATH: said by `validate` and by the
/// commands that run it.
pub fn install_hint(program: &str) -> Option<String> {
    // An engine's program, as it is named by default, says how its engine is installed.
    let programs = crate::engine::Programs { pulumi: "pulumi" };
    let engine =
        crate::engine::EngineKind::all().find(|e| e.program(&programs).as_deref() == Some(program));
    let hint = match (engine.and_then(|e| e.install_hint()), program) {
        (Some(hint), _) => hint,
        (None, "k3d") => "install k3d (https://k3d.io) and Docker",
        (None, _) => return None,
    };
    Some(hint.to_string())
}

/// A program name or path, found the way the shell would find it.
fn locate(program: &str, path_var: &str, root: &Path) -> Option<PathBuf> {
    which::which_in(program, Some(path_var), root).ok()
}

/// POSIX sh's reserved words and built-ins, and bash's and ksh's (`/bin/sh` is bash on many
/// systems): a word the shell answers itself needs no program.
#[rustfmt::skip]
const SHELL: &[&str] = &[
    "!", "{", "}", "case", "do", "done", "elif", "else", "esac", "fi", "for", "if", "in", "then",
    "until", "while", ".", ":", "[", "alias", "bg", "break", "cd", "command", "continue", "echo",
    "eval", "exec", "exit", "export", "false", "fc", "fg", "getopts", "hash", "jobs", "kill",
    "local", "printf", "pwd", "read", "readonly", "return", "set", "shift", "source", "test",
    "times", "trap", "true", "type", "ulimit", "umask", "unalias", "unset", "wait", "[[",
    "builtin", "caller", "coproc", "declare", "dirs", "disown", "enable", "function", "let",
    "mapfile", "popd", "pushd", "readarray", "select", "shopt", "time", "typeset",
];

/// The program a shell command starts, when it can be told without running a shell: the first
/// word after any `NAME=value` assignments, its quotes removed, unless it is a shell keyword or
/// built-in, or is built from expansions.
fn program_of(command: &str) -> Option<String> {
    let words = leading_words(command)?;
    let assigns = |word: &Word| {
        word.assigns && envfile::is_valid_key(word.text.split('=').next().unwrap_or_default())
    };
    let word = words.iter().find(|word| !assigns(word))?;
    // A name is looked for on the PATH the command sets itself (`PATH=bin:$PATH tool`), which
    // only a shell knows.
    let sets_path =
        (words.iter().take_while(|word| assigns(word))).any(|word| word.text.starts_with("PATH="));
    let unknown = word.expands || sets_path && !word.text.contains('/');
    (!unknown && !word.text.is_empty() && !SHELL.contains(&word.text.as_str()))
        .then(|| word.text.clone())
}

/// A shell word as the shell reads it: its text without quotes, whether it is an assignment
/// (an unquoted `=` after an unquoted name: before the program), and whether it holds an
/// expansion (`$`, a backquote, a glob, a leading `~`), whose text only a shell knows.
#[derive(Default)]
struct Word {
    text: String,
    assigns: bool,
    expands: bool,
    quoted: bool,
}

/// The words of `command`'s first simple command — up to an operator (`;`, `&`, `|`, a
/// parenthesis) or the end of the first line that holds more than assignments — read as POSIX sh
/// reads them: split on blanks; comments skipped; `'…'` literally, `"…"` with `\` escaping `$`,
/// `` ` ``, `"`, `\` and a newline, and `\` escaping any character outside quotes (a line
/// continued by it joined); a redirection (`2>/dev/null`, `<in`, `>>log`) and its target are no
/// words. `None` for a quote left open.
fn leading_words(command: &str) -> Option<Vec<Word>> {
    let mut words = Vec::new();
    let mut word: Option<Word> = None;
    // The next word is a redirection's target.
    let mut target = false;
    let mut chars = command.chars().peekable();
    // A word ends: it is one, or the redirection's target it was.
    fn end(words: &mut Vec<Word>, word: &mut Option<Word>, target: &mut bool) {
        if let Some(done) = word.take()
            && !std::mem::take(target)
        {
            words.push(done);
        }
    }
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => end(&mut words, &mut word, &mut target),
            // A line of assignments alone (or a comment, or nothing) leaves the program to the
            // next line.
            '\n' => {
                end(&mut words, &mut word, &mut target);
                if words.iter().any(|word| !word.assigns) {
                    break;
                }
            }
            ';' | '&' | '|' | '(' | ')' => break,
            '<' | '>' => {
                // A file descriptor's number before it belongs to the redirection.
                if word.as_ref().is_some_and(|w| {
                    !w.quoted && !w.text.is_empty() && w.text.bytes().all(|b| b.is_ascii_digit())
                }) {
                    word = None;
                }
                end(&mut words, &mut word, &mut target);
                while chars
                    .next_if(|c| matches!(c, '<' | '>' | '&' | '|' | '-'))
                    .is_some()
                {}
                target = true;
            }
            '#' if word.is_none() => while chars.next_if(|&c| c != '\n').is_some() {},
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(next) => {
                    let word = word.get_or_insert_default();
                    word.quoted = true;
                    word.text.push(next);
                }
            },
            '\'' | '"' => quoted(&mut chars, c, word.get_or_insert_default())?,
            c => {
                let word = word.get_or_insert_default();
                word.assigns |= c == '=' && !word.quoted && !word.text.is_empty();
                word.expands |= matches!(c, '$' | '`' | '*' | '?' | '[')
                    || c == '~' && word.text.is_empty() && !word.quoted;
                word.text.push(c);
            }
        }
    }
    end(&mut words, &mut word, &mut target);
    Some(words)
}

/// The rest of a word's quoted part that `quote` opened, onto `word`: `'…'` literally, `"…"`
/// with `\` escaping `$`, `` ` ``, `"`, `\` and a newline. `None` for a quote left open.
fn quoted(chars: &mut impl Iterator<Item = char>, quote: char, word: &mut Word) -> Option<()> {
    word.quoted = true;
    loop {
        match chars.next()? {
            c if c == quote => return Some(()),
            '\\' if quote == '"' => match chars.next()? {
                c @ ('$' | '`' | '"' | '\\') => word.text.push(c),
                '\n' => {}
                c => word.text.extend(['\\', c]),
            },
            c => {
                word.expands |= quote == '"' && matches!(c, '$' | '`');
                word.text.push(c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_read_from_simple_commands() {
        assert_eq!(
            program_of("k3d cluster create x --wait && printf x"),
            Some("k3d".into())
        );
        assert_eq!(
            program_of("KUBECONFIG=/x kubectl get pods"),
            Some("kubectl".into())
        );
        assert_eq!(program_of("\"$HOME/bin/tool\" x"), None);
        assert_eq!(program_of("echo hi"), None);
        assert_eq!(
            program_of("./scripts/build.sh"),
            Some("./scripts/build.sh".into())
        );
    }

    /// Quotes are read as the shell reads them: a quoted value with spaces is one word, and a
    /// quoted program is found without its quotes.
    #[test]
    fn quoted_words_are_whole() {
        let cases = [
            ("FOO=\"a b\" ./deploy.sh", Some("./deploy.sh")),
            ("A='x y' B=\"$HOME\" make -C dir", Some("make")),
            ("\"/opt/my tools/run\" --fast", Some("/opt/my tools/run")),
            ("'/opt/my tools/run'", Some("/opt/my tools/run")),
            ("/opt/my\\ tools/run", Some("/opt/my tools/run")),
            ("\"$TOOLS/run\" x", None),
            ("$(which tool) x", None),
            ("./bin/*.sh", None),
            ("\"unclosed x", None),
            ("(cd sub && make)", None),
            ("{ make; }", None),
            ("# just a comment", None),
            ("X=1", None),
            ("\"X=1\" tool", Some("X=1")),
            ("  terraform -chdir=infra apply", Some("terraform")),
            ("make>log", Some("make")),
            (
                "2>/dev/null ./scripts/deploy.sh up",
                Some("./scripts/deploy.sh"),
            ),
            ("FOO=1 >log 2>&1 make", Some("make")),
            (
                "FOO=1 \\\n  ./scripts/deploy.sh up",
                Some("./scripts/deploy.sh"),
            ),
            ("~/bin/tool x", None),
            ("unset X; ./x", None),
            ("umask 022 && ./x", None),
            ("\"A\"=1 tool", Some("A=1")),
            ("a\u{a0}b c", Some("a\u{a0}b")),
            ("PATH=/opt/bin:$PATH mytool", None),
            ("PATH=\"$PWD/bin:$PATH\" ./bin/x", Some("./bin/x")),
            ("declare -x A=1; ./x", None),
            ("time ./x", None),
            ("# deploy\n./nope", Some("./nope")),
            ("A=1\n\n./nope x", Some("./nope")),
            ("./first # a comment\n./second", Some("./first")),
        ];
        for (command, program) in cases {
            assert_eq!(program_of(command).as_deref(), program, "{command:?}");
        }
    }
}
