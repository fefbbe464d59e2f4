//! `mara validate` (docs/commands.md, "validate"): every check at once, one line each, then a
//! verdict.
//!
//! Strictly read-only: it reads files and looks programs up on PATH; it never prompts, writes,
//! creates a directory or runs an engine. It loads the deployment with the same steps as every
//! other command, but a step that fails is a failed check and the rest goes on; a check that
//! cannot run because an earlier one failed is reported as skipped, so the report always says
//! what was and was not checked. The checks themselves are `deployment::checks`, which a run
//! makes too.

use std::path::PathBuf;

use serde_json::json;

use crate::deployment;
use crate::deployment::checks::{self, Checks, Status};
use crate::error::{Error, Result, plural};
use crate::graph::{ExecutionGraph, Plan, Selection};
use crate::provider::{Origin, Provider, Registry};
use crate::settings::{OutputFormat, Settings};
use crate::ui::{self, Style};
use crate::workspace::Workspace;
use crate::workspace::envfile::EnvFile;
use crate::workspace::stack;
use crate::workspace::stack_config::StackConfigFile;

#[derive(Debug, Default)]
pub struct Report {
    pub workspace: Option<PathBuf>,
    pub provider: Option<String>,
    pub stack: Option<String>,
    pub checks: Checks,
}

pub fn run(settings: &Settings, selection: Selection) -> Result<()> {
    // A directory that does not exist has nothing to validate: the same error as every command.
    if !settings.start_dir.is_dir() {
        crate::deployment::discover(settings)?;
    }
    // Outside a workspace, that one thing is said, not every check that follows from it.
    let start =
        std::path::absolute(&settings.start_dir).unwrap_or_else(|_| settings.start_dir.clone());
    Workspace::discover_leniently(&start).0.require()?;
    let report = check(settings, &selection);
    let text = match settings.output {
        OutputFormat::Json => {
            let value = json!({
                "workspace": report.workspace,
                "provider": report.provider,
                "stack": report.stack,
                "valid": report.checks.count(Status::Fail) == 0,
                "checks": report.checks.list,
            });
            format!(
                "{}\n",
                serde_json::to_string_pretty(&value).expect("JSON values serialize")
            )
        }
        OutputFormat::Human => render(&report, settings.stdout_style, settings.verbosity < 0),
    };
    ui::print(&text)?;
    match report.checks.count(Status::Fail) {
        0 => Ok(()),
        failed => Err(Error::ValidationFailed { failed }),
    }
}

/// Runs every check; never fails, never writes.
pub fn check(settings: &Settings, selection: &Selection) -> Report {
    let mut report = Report::default();
    let checks = &mut report.checks;
    let (files, config, settings_read) = check_files(checks, settings);
    report.workspace = Some(files.workspace.root.clone());
    report.stack = files.stack.as_ref().map(|s| s.name.to_string());
    let workspace = &files.workspace;
    check_policies(checks, workspace);
    let env = files.environment(settings);
    let on = (workspace, settings_read);
    let provider = check_chosen_provider(checks, settings, on, config.as_ref());
    report.provider = provider.as_ref().map(|p| p.name.clone());
    let graph = (provider.as_ref()).and_then(|provider| graph_of(checks, provider));
    if let Some(provider) = &provider {
        check_pools(checks, provider, on);
    }
    let plan = (graph.as_ref()).and_then(|graph| selected(checks, graph, selection));
    let Some((provider, plan)) = provider.as_ref().zip(plan.as_ref()) else {
        for area in ["projects", "configuration", "secrets", "tools"] {
            checks.skip(area, "not checked: the provider's plan could not be built");
        }
        return report;
    };
    check_plan(checks, settings, &files, (provider, plan), config, &env);
    report
}

/// The stack's files: the workspace (its root and mara.toml: a broken mara.toml is reported, and
/// the rest is checked with the default settings so that one mistake does not hide the others),
/// the environment file, the stack name and its shared configuration (reported further down);
/// and whether mara.toml was read.
fn check_files(
    checks: &mut Checks,
    settings: &Settings,
) -> (
    deployment::StackFiles,
    Option<Result<StackConfigFile>>,
    bool,
) {
    let (workspace, settings_read) = check_workspace(checks, settings);
    let (env_file, env_unreadable) = check_environment(checks, &workspace);
    let stack = check_stack(
        checks,
        settings,
        &workspace,
        env_file.as_ref(),
        env_unreadable,
    );
    let config = stack
        .as_ref()
        .map(|s| StackConfigFile::load(&workspace.stack_config_file(&s.name)));
    let files = deployment::StackFiles {
        workspace,
        env_file,
        stack,
        config: config.as_ref().and_then(|c| c.as_ref().ok()).cloned(),
    };
    (files, config, settings_read)
}

/// The workspace's providers, and the one chosen, checked.
fn check_chosen_provider(
    checks: &mut Checks,
    settings: &Settings,
    (workspace, settings_read): (&Workspace, bool),
    config: Option<&Result<StackConfigFile>>,
) -> Option<Provider> {
    match deployment::registry(workspace) {
        Ok(registry) => {
            let on = (workspace, settings_read);
            check_provider(checks, settings, on, &registry, config)
        }
        Err(error) => {
            checks.fail_with("provider", error);
            None
        }
    }
}

/// The selection, planned on `graph`; said when it is not every project.
fn selected<'g>(
    checks: &mut Checks,
    graph: &'g ExecutionGraph,
    selection: &Selection,
) -> Option<Plan<'g>> {
    match Plan::select(graph, selection) {
        Ok(plan) => {
            if !plan.is_everything() {
                checks.pass(
                    "selection",
                    format!("{} of {} projects selected", plan.len(), graph.len()),
                );
            }
            Some(plan)
        }
        Err(error) => {
            checks.fail_with("selection", error);
            None
        }
    }
}

/// What the plan's projects need: their directories and files, their clusters and kubeconfigs,
/// their inputs, the stack's configuration and secrets, the tools.
fn check_plan(
    checks: &mut Checks,
    settings: &Settings,
    files: &deployment::StackFiles,
    (provider, plan): (&Provider, &Plan<'_>),
    config: Option<Result<StackConfigFile>>,
    env: &std::collections::BTreeMap<String, String>,
) {
    let workspace = &files.workspace;
    checks::projects(checks, workspace, plan);
    // The walk a fingerprint makes of the projects' files (`up`, `--changed`): it opens every
    // ignore file on the way, and refuses one that is no regular file.
    let project_dir = |p: &str| workspace.project_dir(p);
    if let Err(error) =
        crate::fingerprint::ignore_files_readable(plan, project_dir, &workspace.state_dir())
    {
        checks.fail_with("project", error);
    }
    if let Some(stack) = &files.stack {
        checks::local_cluster(checks, provider, plan, &stack.name);
        checks::one_kubeconfig(checks, workspace, plan.graph, &stack.name);
    }
    checks::mergeable_kubeconfig(checks, plan, env);
    checks::inputs_have_outputs(checks, workspace, plan);
    checks::state::keeping(checks, workspace, &settings.env, env);
    if let Some(stack) = &files.stack {
        checks::state::left_behind(checks, workspace, plan, stack.name.as_str());
    }
    check_stack_files(checks, settings, files, (provider, plan), config, env);
    short_secrets(checks, env);
    checks::tools(checks, workspace, plan, env);
}

/// The workspace: its root and mara.toml, checked (a broken mara.toml is reported; the rest is
/// checked with the default settings).
fn check_workspace(checks: &mut Checks, settings: &Settings) -> (Workspace, bool) {
    let start =
        std::path::absolute(&settings.start_dir).unwrap_or_else(|_| settings.start_dir.clone());
    let (workspace, error) = Workspace::discover_leniently(&start);
    checks.root = Some(workspace.root.clone());
    checks.mara = settings.invoked();
    let settings_read = error.is_none();
    match (&workspace.settings_file, error) {
        (None, _) => checks.pass(
            "workspace",
            format!(
                "{} (no mara.toml: every setting at its default)",
                start.display()
            ),
        ),
        (Some(_), None) => checks.pass(
            "workspace",
            format!("{} (settings from mara.toml)", workspace.root.display()),
        ),
        (Some(_), Some(error)) => checks.fail_with("workspace", error),
    }
    (workspace, settings_read)
}

/// The workspace's policies, when it has any: they compile, and mara.toml names only packages
/// they declare (a run would refuse them, exit 3).
fn check_policies(checks: &mut Checks, workspace: &Workspace) {
    match crate::policy::Policies::load(&workspace.root, &workspace.settings.policy) {
        Ok(None) => {}
        Ok(Some(policies)) => {
            let n = policies.files.len();
            let files = crate::error::plural(n, "file", "files");
            checks.pass("policies", format!("{n} policy {files} compile"));
        }
        Err(error) => checks.fail_with("policies", error.relative_to(&workspace.root)),
    }
}

/// The stack's name, checked: from `--stack`, the environment, or the environment file.
fn check_stack(
    checks: &mut Checks,
    settings: &Settings,
    workspace: &Workspace,
    env_file: Option<&EnvFile>,
    env_unreadable: bool,
) -> Option<stack::ResolvedStack> {
    let env_path = workspace.env_file();
    match stack::resolve(settings.stack.as_deref(), &settings.env, env_file) {
        Ok(Some(stack)) => {
            checks.pass("stack", format!("{} (from {})", stack.name, stack.source));
            Some(stack)
        }
        Ok(None) if env_unreadable => {
            checks.skip(
                "stack",
                "not checked: the environment file, which may name it, could not be read",
            );
            None
        }
        Ok(None) => {
            let problem = stack::missing_stack_problem(&workspace.display(&env_path));
            checks.fail("stack", problem.message, problem.hint);
            None
        }
        Err(error) => {
            checks.fail_with("stack", error);
            None
        }
    }
}

/// The environment file, checked; and whether it could not be read.
fn check_environment(checks: &mut Checks, workspace: &Workspace) -> (Option<EnvFile>, bool) {
    let shown = |path: &std::path::Path| workspace.display(path).display().to_string();
    let env_path = workspace.env_file();
    let mut env_unreadable = false;
    let env_file = match EnvFile::load(&env_path) {
        Ok(Some(file)) => {
            let n = file.entries.len();
            checks.pass(
                "environment",
                format!(
                    "{}: {n} {}",
                    shown(&env_path),
                    plural(n, "variable", "variables")
                ),
            );
            Some(file)
        }
        Ok(None) => {
            checks.pass(
                "environment",
                format!("{} does not exist (optional)", shown(&env_path)),
            );
            None
        }
        Err(error) => {
            checks.fail_with("environment", error);
            env_unreadable = true;
            None
        }
    };
    (env_file, env_unreadable)
}

/// The stack's configuration and its stored secrets, checked against what the provider needs.
fn check_stack_files(
    checks: &mut Checks,
    settings: &Settings,
    files: &deployment::StackFiles,
    (provider, plan): (&Provider, &Plan<'_>),
    config: Option<Result<StackConfigFile>>,
    env: &std::collections::BTreeMap<String, String>,
) {
    let workspace = &files.workspace;
    match (&files.stack, config) {
        (Some(stack), Some(config)) => {
            let stored = files.secrets_config(stack);
            match config {
                Ok(config) => {
                    checks::configuration(
                        checks,
                        workspace,
                        provider,
                        plan,
                        &stack.name,
                        &config,
                        stored.as_ref().ok(),
                        env,
                        settings.interactive,
                    );
                    checks::receivable(checks, workspace, plan, &config);
                }
                Err(error) => checks.fail_with("configuration", error),
            }
            match stored {
                Ok(stored) => checks::secrets(
                    checks,
                    workspace,
                    provider,
                    plan,
                    &stack.name,
                    &stored,
                    env,
                    settings.interactive,
                ),
                Err(error) => checks.fail_with("secrets", error),
            }
        }
        _ => {
            checks.skip("configuration", "not checked: no stack");
            checks.skip("secrets", "not checked: no stack");
        }
    }
}

/// The provider's graph, checked.
fn graph_of(checks: &mut Checks, provider: &Provider) -> Option<ExecutionGraph> {
    match ExecutionGraph::build(provider) {
        Ok(graph) => {
            let n = graph.len();
            checks.pass(
                "graph",
                format!("{n} {}, no cycle", plural(n, "project", "projects")),
            );
            Some(graph)
        }
        Err(error) => {
            checks.fail_with("graph", error);
            None
        }
    }
}

/// Each pool a project names has a limit (docs/formats.md, "Budgets and retries"); the pools
/// mara.toml sets are not known when it could not be read.
fn check_pools(
    checks: &mut Checks,
    provider: &Provider,
    (workspace, settings_read): (&Workspace, bool),
) {
    if !settings_read {
        if provider.projects.iter().any(|p| p.pool.is_some()) {
            checks.skip("pools", "not checked: mara.toml could not be read");
        }
        return;
    }
    match deployment::pools(provider, &workspace.settings.pools) {
        Ok(pools) if pools.is_empty() => {}
        Ok(pools) => {
            let limits: Vec<String> = (pools.iter())
                .map(|(name, n)| format!("{name} {n}"))
                .collect();
            checks.pass("pools", format!("at most {} at once", limits.join(", ")));
        }
        Err(error) => checks.fail_with("pools", error),
    }
}

fn check_provider(
    report: &mut Checks,
    settings: &Settings,
    (workspace, settings_read): (&Workspace, bool),
    registry: &Registry,
    config: Option<&Result<StackConfigFile>>,
) -> Option<Provider> {
    let explicit = deployment::explicit_provider(settings, workspace);
    // mara.toml may name the provider: unread, a provider not found otherwise is not a mistake
    // of its own (mara.toml's is said).
    let unknowable = explicit.is_none() && !settings_read;
    let chosen = match explicit {
        Some((name, choice)) => {
            deployment::resolve_runnable(registry, &name).map(|p| Some((p, choice)))
        }
        None => match config {
            Some(Ok(config)) => deployment::provider_for_stack(registry, config),
            // The stack's configuration would name it, and does not read: that is what is said.
            Some(Err(error)) => {
                let said = match error.problems() {
                    [] => Error::config(crate::error::Problem::new(error.to_string())),
                    problems => Error::Problems(problems.to_vec()),
                };
                report.fail_with("configuration", said);
                report.skip(
                    "provider",
                    "not chosen: the stack's configuration, which may name it, could not be read",
                );
                return None;
            }
            None => Ok(None),
        },
    };
    match chosen {
        Ok(Some((provider, choice))) => {
            let origin = match &provider.origin {
                Origin::Builtin => "built in".to_string(),
                Origin::File(path) => workspace.display(path).display().to_string(),
            };
            report.pass(
                "provider",
                format!(
                    "{} ({origin}, {choice}): {}",
                    provider.name, provider.description
                ),
            );
            Some(provider)
        }
        _ if unknowable => {
            report.skip(
                "provider",
                "not chosen: mara.toml could not be read, and may name it",
            );
            None
        }
        Ok(None) => {
            report.fail(
                "provider",
                "no provider given",
                Some(
                    "pass --provider NAME, set MARA_PROVIDER, or set `provider` in mara.toml"
                        .into(),
                ),
            );
            None
        }
        Err(error) => {
            report.fail_with("provider", error);
            None
        }
    }
}

/// The report for people; `quiet` keeps only what went wrong (failures and warnings) and the verdict.
fn render(report: &Report, style: Style, quiet: bool) -> String {
    let mut out = String::new();
    let what = match (&report.provider, &report.stack) {
        (Some(p), Some(s)) => format!("provider {p}, stack {s}"),
        (Some(p), None) => format!("provider {p}"),
        (None, Some(s)) => format!("stack {s}"),
        (None, None) => "the workspace".into(),
    };
    out.push_str(&style.bold(&format!("Validating {what}")));
    out.push('\n');
    let width = report
        .checks
        .list
        .iter()
        .map(|c| c.area.len())
        .max()
        .unwrap_or(0);
    let shown = report
        .checks
        .list
        .iter()
        .filter(|c| !quiet || matches!(c.status, Status::Fail | Status::Warn));
    for check in shown {
        let mark = match check.status {
            Status::Pass => style.green("✓"),
            Status::Warn => style.yellow("!"),
            Status::Fail => style.red("✗"),
            Status::Skip => style.dim("-"),
        };
        out.push_str(&format!(
            " {mark} {:<width$}  {}\n",
            check.area, check.message
        ));
        if let Some(hint) = &check.hint {
            out.push_str(&format!(
                "   {:<width$}  {}\n",
                "",
                style.dim(&format!("hint: {hint}"))
            ));
        }
    }
    let failed = report.checks.count(Status::Fail);
    let warned = report.checks.count(Status::Warn);
    let warnings = format!("{warned} {}", plural(warned, "warning", "warnings"));
    out.push('\n');
    out.push_str(&if failed == 0 {
        style.green(&format!(
            "✓ valid ({} checks passed, {warnings})",
            report.checks.count(Status::Pass)
        ))
    } else {
        style.red(&format!(
            "✗ {failed} {}, {warnings}; nothing was changed",
            plural(failed, "problem", "problems")
        ))
    });
    out.push('\n');
    out
}

/// The secrets supplied as `MARA_SECRET_*` that the redactor can keep out of the output only
/// in part: shorter than 8 characters only where they stand as a word, shorter than 3 not at
/// all (docs/commands.md, "First run and secrets").
fn short_secrets(checks: &mut Checks, env: &std::collections::BTreeMap<String, String>) {
    use crate::run::redact::{SHORTEST, WHOLE_WORD_BELOW};
    let short: Vec<String> = env
        .iter()
        .filter(|(key, _)| key.starts_with(crate::configure::SECRET_PREFIX))
        .filter_map(|(key, value)| {
            let n = value.trim().chars().count();
            (n < WHOLE_WORD_BELOW).then(|| match n < SHORTEST {
                true => format!("{key} ({n} characters: never redacted)"),
                false => format!("{key} ({n} characters: redacted only as a whole word)"),
            })
        })
        .collect();
    if !short.is_empty() {
        checks.warn(
            "secrets",
            format!(
                "{} shorter than {WHOLE_WORD_BELOW} characters: {}",
                crate::error::plural(short.len(), "secret is", "secrets are"),
                short.join(", ")
            ),
            Some(format!("a secret of {WHOLE_WORD_BELOW} characters or more is kept out of everything mara prints")),
        );
    }
}
