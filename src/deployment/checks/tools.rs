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
    for (engine, count) in engines {
        let program = match engine {
            EngineKind::Pulumi => workspace.settings.pulumi.binary.clone(),
            EngineKind::Terraform => "terraform".into(),
            EngineKind::Tofu => "tofu".into(),
            EngineKind::Kubectl => "kubectl".into(),
            EngineKind::Command => continue,
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
        match locate(&program, &path_var, &workspace.root) {
            Some(found) => checks.pass("tools", format!("{program}: {} ({why})", found.display())),
            None if optional => checks.warn(
                "tools",
                format!("{program}: not found on PATH ({why})"),
                None,
            ),
            None => checks.fail(
                "tools",
                format!("{program}: not found on PATH ({why})"),
                install_hint(&program),
            ),
        }
    }
}

/// How to get a program mara runs, when it is not on PATH: said by `validate` and by the
/// commands that run it.
pub fn install_hint(program: &str) -> Option<String> {
    let hint = match program {
        "pulumi" => {
            "install the Pulumi CLI (https://www.pulumi.com/docs/iac/download-install/), or set `binary` under [pulumi] in mara.toml"
        }
        "terraform" => "install Terraform (https://developer.hashicorp.com/terraform/install)",
        "tofu" => "install OpenTofu (https://opentofu.org/docs/intro/install/)",
        "k3d" => "install k3d (https://k3d.io) and Docker",
        _ => return None,
    };
    Some(hint.to_string())
}

/// A program name or path, found the way the shell would find it.
fn locate(program: &str, path_var: &str, root: &Path) -> Option<PathBuf> {
    which::which_in(program, Some(path_var), root).ok()
}

/// The program a shell command starts, when it can be told without running a shell: the first
/// word after any `NAME=value` assignments, its quotes removed, unless it is a shell keyword or
/// built-in, or is built from expansions.
fn program_of(command: &str) -> Option<String> {
    const SHELL: &[&str] = &[
        "if", "then", "for", "while", "until", "case", "cd", "echo", "printf", "export", "set",
        "test", "[", "true", "false", "exec", "exit", "eval", ".", "source", "read", "trap", "{",
        "!", ":",
    ];
    let word = leading_words(command)?.into_iter().find(|word| {
        let name = word.text.split('=').next().unwrap_or_default();
        !(word.assigns && envfile::is_valid_key(name))
    })?;
    (!word.expands && !word.text.is_empty() && !SHELL.contains(&word.text.as_str()))
        .then_some(word.text)
}

/// A shell word as the shell reads it: its text without quotes, whether an unquoted `=` is in it
/// (an assignment, before the program), and whether it holds an expansion (`$`, a backquote, a
/// glob), whose text only a shell knows.
#[derive(Default)]
struct Word {
    text: String,
    assigns: bool,
    expands: bool,
}

/// The words of `command` up to its first operator (`;`, `&`, `|`, a parenthesis, a redirection)
/// or comment, read as the shell reads them: `'…'` literally, `"…"` with `\` escaping `$`, `` ` ``,
/// `"` and `\`, and `\` escaping any character outside quotes. `None` for a quote left open.
fn leading_words(command: &str) -> Option<Vec<Word>> {
    let mut words = Vec::new();
    let mut word: Option<Word> = None;
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => words.extend(word.take()),
            ';' | '&' | '|' | '(' | ')' | '<' | '>' => break,
            '#' if word.is_none() => break,
            '\\' => {
                if let Some(next) = chars.next() {
                    word.get_or_insert_default().text.push(next);
                }
            }
            '\'' => {
                let word = word.get_or_insert_default();
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => word.text.push(c),
                    }
                }
            }
            '"' => {
                let word = word.get_or_insert_default();
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => match chars.next()? {
                            c @ ('$' | '`' | '"' | '\\') => word.text.push(c),
                            '\n' => {}
                            c => word.text.extend(['\\', c]),
                        },
                        c => {
                            word.expands |= matches!(c, '$' | '`');
                            word.text.push(c);
                        }
                    }
                }
            }
            c => {
                let word = word.get_or_insert_default();
                word.assigns |= c == '=';
                word.expands |= matches!(c, '$' | '`' | '*' | '?' | '[');
                word.text.push(c);
            }
        }
    }
    words.extend(word);
    Some(words)
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
        ];
        for (command, program) in cases {
            assert_eq!(program_of(command).as_deref(), program, "{command:?}");
        }
    }
}
