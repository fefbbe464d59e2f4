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
/// word after any `NAME=value` assignments, unless it is a shell keyword or built-in, or is built
/// from expansions.
fn program_of(command: &str) -> Option<String> {
    const SHELL: &[&str] = &[
        "if", "then", "for", "while", "until", "case", "cd", "echo", "printf", "export", "set",
        "test", "[", "true", "false", "exec", "exit", "eval", ".", "source", "read", "trap", "{",
        "(", "!", ":",
    ];
    let word = command.split_whitespace().find(|word| {
        !(word.contains('=') && envfile::is_valid_key(word.split('=').next().unwrap_or_default()))
    })?;
    let word = word.trim_matches(|c| c == '"' || c == '\'');
    if word.is_empty()
        || SHELL.contains(&word)
        || word.contains(['$', '`', '(', ')', ';', '&', '|'])
    {
        None
    } else {
        Some(word.to_string())
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
}
