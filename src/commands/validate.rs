//! `mara validate` (SPEC §5.1): every check at once, one line each, then a verdict.
//!
//! Strictly read-only: it reads files and looks programs up on PATH; it never prompts, writes,
//! creates a directory or runs an engine. A check that cannot run because an earlier one failed is
//! reported as skipped, so the report always says what was and was not checked.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use serde::Serialize;
use serde_json::json;

use crate::cli::OutputFormat;
use crate::error::{Error, Problem, Result, plural};
use crate::graph::{ExecutionGraph, Plan, Selection};
use crate::provider::{EngineKind, Hook, Provider, Registry};
use crate::settings::Settings;
use crate::ui::{self, Style};
use crate::workspace::envfile::{self, EnvFile};
use crate::workspace::pulumi_project::PulumiProject;
use crate::workspace::stack::{self, ResolvedStack};
use crate::workspace::stack_config::{INFRA_TYPE_KEY, StackConfig, StackConfigFile};
use crate::workspace::{MARA_TOML, Workspace, WorkspaceSettings, mara_toml};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Warn,
    Fail,
    Skip,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub area: &'static str,
    pub status: Status,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

#[derive(Debug, Default)]
pub struct Report {
    pub workspace: Option<PathBuf>,
    pub provider: Option<String>,
    pub stack: Option<String>,
    pub checks: Vec<Check>,
}

impl Report {
    fn add(
        &mut self,
        area: &'static str,
        status: Status,
        message: impl Into<String>,
    ) -> &mut Check {
        self.checks.push(Check {
            area,
            status,
            message: message.into(),
            hint: None,
        });
        self.checks.last_mut().expect("just pushed")
    }

    fn pass(&mut self, area: &'static str, message: impl Into<String>) {
        self.add(area, Status::Pass, message);
    }

    fn warn(&mut self, area: &'static str, message: impl Into<String>, hint: Option<String>) {
        self.add(area, Status::Warn, message).hint = hint;
    }

    fn fail(&mut self, area: &'static str, message: impl Into<String>, hint: Option<String>) {
        self.add(area, Status::Fail, message).hint = hint;
    }

    fn skip(&mut self, area: &'static str, message: impl Into<String>) {
        self.add(area, Status::Skip, message);
    }

    /// Every problem of `error` as a failed check.
    fn fail_with(&mut self, area: &'static str, error: Error) {
        let error = match &self.workspace {
            Some(root) => error.relative_to(root),
            None => error,
        };
        let problems = error.problems();
        if problems.is_empty() {
            let mut message = error.to_string();
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                message.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            self.fail(area, message, None);
        }
        for problem in problems {
            let Problem { hint, .. } = problem.clone();
            self.fail(area, problem.to_string(), hint);
        }
    }

    pub fn count(&self, status: Status) -> usize {
        self.checks.iter().filter(|c| c.status == status).count()
    }
}

pub fn run(settings: &Settings, selection: Selection) -> Result<()> {
    let report = check(settings, &selection);
    let text = match settings.output {
        OutputFormat::Json => {
            let value = json!({
                "workspace": report.workspace,
                "provider": report.provider,
                "stack": report.stack,
                "valid": report.count(Status::Fail) == 0,
                "checks": report.checks,
            });
            format!(
                "{}\n",
                serde_json::to_string_pretty(&value).expect("JSON values serialize")
            )
        }
        OutputFormat::Human => render(&report, settings.stdout_style, settings.verbosity < 0),
    };
    ui::print(&text)?;
    match report.count(Status::Fail) {
        0 => Ok(()),
        failed => Err(Error::ValidationFailed { failed }),
    }
}

/// Runs every check; never fails, never writes.
pub fn check(settings: &Settings, selection: &Selection) -> Report {
    let mut report = Report::default();

    // The workspace: its root and mara.toml. A broken mara.toml is reported, and the rest is
    // checked with the default settings so that one mistake does not hide the others.
    let start =
        std::path::absolute(&settings.start_dir).unwrap_or_else(|_| settings.start_dir.clone());
    let root_file = crate::workspace::find_root(&start).map(|root| root.join(MARA_TOML));
    let workspace = match &root_file {
        None => {
            report.pass(
                "workspace",
                format!(
                    "{} (no mara.toml: every setting at its default)",
                    start.display()
                ),
            );
            Workspace {
                root: start.clone(),
                settings_file: None,
                settings: WorkspaceSettings::default(),
            }
        }
        Some(file) => {
            let root = file.parent().expect("a file has a parent").to_path_buf();
            report.workspace = Some(root.clone());
            let parsed = std::fs::read_to_string(file)
                .map_err(|e| Error::read(file, e))
                .and_then(|t| mara_toml::parse(file, &t));
            let settings = match parsed {
                Ok(settings) => {
                    report.pass(
                        "workspace",
                        format!("{} (settings from mara.toml)", root.display()),
                    );
                    settings
                }
                Err(error) => {
                    report.fail_with("workspace", error);
                    WorkspaceSettings::default()
                }
            };
            Workspace {
                root,
                settings_file: Some(file.clone()),
                settings,
            }
        }
    };
    report.workspace = Some(workspace.root.clone());
    let shown = |path: &Path| workspace.display(path).display().to_string();

    // The environment file.
    let env_path = workspace.env_file();
    let env_file = match EnvFile::load(&env_path) {
        Ok(Some(file)) => {
            let n = file.entries.len();
            report.pass(
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
            report.pass(
                "environment",
                format!("{} does not exist (optional)", shown(&env_path)),
            );
            None
        }
        Err(error) => {
            report.fail_with("environment", error);
            None
        }
    };
    let env = envfile::merged_environment(&settings.env, env_file.as_ref());

    // The stack name, and its shared configuration (reported further down).
    let stack = match stack::resolve(settings.stack.as_deref(), &settings.env, env_file.as_ref()) {
        Ok(Some(stack)) => {
            report.pass("stack", format!("{} (from {})", stack.name, stack.source));
            Some(stack)
        }
        Ok(None) => {
            let problem = stack::missing_stack_problem(&workspace.display(&env_path));
            report.fail("stack", problem.message, problem.hint);
            None
        }
        Err(error) => {
            report.fail_with("stack", error);
            None
        }
    };
    report.stack = stack.as_ref().map(|s| s.name.to_string());
    let config = stack
        .as_ref()
        .map(|s| StackConfigFile::load(&workspace.stack_config_file(&s.name)));

    // The provider and its graph.
    let registry = match super::registry(&workspace) {
        Ok(registry) => Some(registry),
        Err(error) => {
            report.fail_with("provider", error);
            None
        }
    };
    let provider = registry
        .as_ref()
        .and_then(|r| check_provider(&mut report, settings, &workspace, r, config.as_ref()));
    report.provider = provider.as_ref().map(|p| p.name.clone());
    let graph = provider
        .as_ref()
        .and_then(|provider| match ExecutionGraph::build(provider) {
            Ok(graph) => {
                let n = graph.len();
                report.pass(
                    "graph",
                    format!("{n} {}, no cycle", plural(n, "project", "projects")),
                );
                Some(graph)
            }
            Err(error) => {
                report.fail_with("graph", error);
                None
            }
        });
    let plan = graph
        .as_ref()
        .and_then(|graph| match Plan::select(graph, selection) {
            Ok(plan) => {
                if !plan.is_everything() {
                    report.pass(
                        "selection",
                        format!("{} of {} projects selected", plan.len(), graph.len()),
                    );
                }
                Some(plan)
            }
            Err(error) => {
                report.fail_with("selection", error);
                None
            }
        });

    let Some((provider, plan)) = provider.as_ref().zip(plan.as_ref()) else {
        for area in ["projects", "configuration", "secrets", "tools"] {
            report.skip(area, "not checked: the provider's plan could not be built");
        }
        return report;
    };
    check_projects(&mut report, &workspace, plan);
    match (&stack, config) {
        (Some(stack), Some(config)) => {
            check_configuration(&mut report, settings, &workspace, provider, plan, config);
            check_secrets(
                &mut report,
                settings,
                &workspace,
                provider,
                plan,
                stack,
                &env,
            );
        }
        _ => {
            report.skip("configuration", "not checked: no stack");
            report.skip("secrets", "not checked: no stack");
        }
    }
    check_tools(&mut report, &workspace, plan, &env);
    report
}

fn check_provider(
    report: &mut Report,
    settings: &Settings,
    workspace: &Workspace,
    registry: &Registry,
    config: Option<&Result<StackConfigFile>>,
) -> Option<Provider> {
    let chosen = match super::explicit_provider(settings, workspace) {
        Some((name, choice)) => super::resolve_runnable(registry, &name).map(|p| Some((p, choice))),
        None => match config {
            Some(Ok(config)) => super::provider_for_stack(registry, config),
            _ => Ok(None),
        },
    };
    match chosen {
        Ok(Some((provider, choice))) => {
            let origin = match &provider.origin {
                crate::provider::Origin::Builtin => "built in".to_string(),
                crate::provider::Origin::File(path) => {
                    workspace.display(path).display().to_string()
                }
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

fn check_projects(report: &mut Report, workspace: &Workspace, plan: &Plan<'_>) {
    let default_engine = workspace.settings.engine;
    let shared_config_dir = normalize(&workspace.config_dir());
    let mut names: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let mut missing_dirs = 0;
    // Every Pulumi project file of the plan, read on every core before the checks walk them.
    let pulumi_dirs: Vec<_> = plan
        .order()
        .iter()
        .map(|&i| plan.graph.project(i))
        .filter(|p| p.engine_or(default_engine) == EngineKind::Pulumi)
        .map(|p| workspace.project_dir(&p.path))
        .collect();
    let mut pulumi_projects = PulumiProject::load_each(&pulumi_dirs).into_iter();
    for &i in plan.order() {
        let project = plan.graph.project(i);
        let path = project.path.as_str();
        let dir = workspace.project_dir(path);
        let engine = project.engine_or(default_engine);
        let found = (engine == EngineKind::Pulumi).then(|| pulumi_projects.next().flatten());
        if engine == EngineKind::Command {
            let place = if dir.is_dir() {
                workspace.display(&dir).display().to_string()
            } else {
                "the workspace root".into()
            };
            report.pass("project", format!("{path}: command steps, run in {place}"));
            continue;
        }
        if !dir.is_dir() {
            missing_dirs += 1;
            // The same hint on every missing directory would bury the list: say it once.
            let hint = (missing_dirs == 1).then(|| {
                format!(
                    "create the project there, or point `projects_dir` in mara.toml (now \"{}\") at the directory that holds the projects",
                    workspace.settings.projects_dir
                )
            });
            report.fail(
                "project",
                format!("{path}: no directory {}", workspace.display(&dir).display()),
                hint,
            );
            continue;
        }
        match engine {
            EngineKind::Pulumi => {
                let Some(loaded) = found.flatten() else {
                    report.fail(
                        "project",
                        format!(
                            "{path}: no Pulumi.yaml in {}",
                            workspace.display(&dir).display()
                        ),
                        None,
                    );
                    continue;
                };
                match loaded {
                    Ok(pulumi) => {
                        let runtime = pulumi
                            .runtime
                            .as_deref()
                            .map(|r| format!(", runtime {r}"))
                            .unwrap_or_default();
                        report.pass(
                            "project",
                            format!("{path}: Pulumi project `{}`{runtime}", pulumi.name),
                        );
                        if let Some(config_dir) = &pulumi.stack_config_dir {
                            let points_at = normalize(&dir.join(config_dir));
                            let is_secrets = path == workspace.settings.secrets_project;
                            if is_secrets && points_at == shared_config_dir {
                                report.warn(
                                    "project",
                                    format!("{path}: its Pulumi.yaml points its stack configuration at the shared one"),
                                    Some("the secrets project keeps its own: remove `stackConfigDir`/`config:` from its Pulumi.yaml".into()),
                                );
                            } else if !is_secrets && points_at != shared_config_dir {
                                report.warn(
                                    "project",
                                    format!(
                                        "{path}: its Pulumi.yaml reads stack configuration from {}, but mara passes {} (`--config-file`)",
                                        workspace.display(&points_at).display(),
                                        workspace.display(&shared_config_dir).display()
                                    ),
                                    Some("a plain `pulumi up` in that directory would read other configuration".into()),
                                );
                            }
                        }
                        names.entry(pulumi.name).or_default().push(path);
                    }
                    Err(error) => report.fail_with("project", error),
                }
            }
            EngineKind::Terraform | EngineKind::Tofu => {
                let modules = std::fs::read_dir(&dir)
                    .map(|entries| {
                        entries
                            .filter_map(|e| e.ok())
                            .filter(|e| {
                                let name = e.file_name().to_string_lossy().into_owned();
                                name.ends_with(".tf") || name.ends_with(".tf.json")
                            })
                            .count()
                    })
                    .unwrap_or(0);
                if modules == 0 {
                    report.fail(
                        "project",
                        format!(
                            "{path}: no .tf files in {}",
                            workspace.display(&dir).display()
                        ),
                        None,
                    );
                } else {
                    report.pass(
                        "project",
                        format!(
                            "{path}: {engine} root module ({modules} .tf {})",
                            plural(modules, "file", "files")
                        ),
                    );
                }
            }
            EngineKind::Command => unreachable!("handled above"),
        }
    }
    for (name, paths) in names.iter().filter(|(_, paths)| paths.len() > 1) {
        report.fail(
            "project",
            format!(
                "{} are named `{name}` in their Pulumi.yaml",
                paths.join(" and ")
            ),
            Some("stack references address projects by name: give each its own".into()),
        );
    }
}

fn check_configuration(
    report: &mut Report,
    settings: &Settings,
    workspace: &Workspace,
    provider: &Provider,
    plan: &Plan<'_>,
    config: Result<StackConfigFile>,
) {
    let config = match config {
        Ok(config) => config,
        Err(error) => {
            report.fail_with("configuration", error);
            return;
        }
    };
    let file = workspace.display(config.path()).display().to_string();
    // The keys each selected project requires, and which projects require each.
    let mut required: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for &i in plan.order() {
        let project = plan.graph.project(i);
        for key in &project.required_config {
            required
                .entry(key.as_str())
                .or_default()
                .push(project.path.as_str());
        }
    }
    let Some(values) = config.config() else {
        let asked: Vec<&str> = provider.config.iter().map(|c| c.key.as_str()).collect();
        let state = if matches!(config, StackConfigFile::Missing(_)) {
            "does not exist"
        } else {
            "is empty"
        };
        let message = format!(
            "{file} {state}: this is the stack's first run; `mara up` asks for {} {}{}",
            asked.len(),
            plural(asked.len(), "setting", "settings"),
            if asked.is_empty() {
                String::new()
            } else {
                format!(" ({})", asked.join(", "))
            }
        );
        if settings.interactive || asked.is_empty() {
            report.warn("configuration", message, None);
        } else {
            report.fail(
                "configuration",
                message,
                Some(format!("without a terminal nothing can be asked: run `mara up` once on a terminal, or write {file}")),
            );
        }
        for (key, projects) in &required {
            if *key != INFRA_TYPE_KEY && !asked.contains(key) {
                report.fail(
                    "configuration",
                    format!(
                        "`{key}` is required by {} and nothing asks for it",
                        projects.join(", ")
                    ),
                    Some(format!("set it in {file}")),
                );
            }
        }
        return;
    };
    check_infra_type(report, workspace, provider, values);
    let mut missing = 0;
    for (key, projects) in &required {
        if *key != INFRA_TYPE_KEY && !values.contains(key) {
            missing += 1;
            report.fail(
                "configuration",
                format!(
                    "`{key}` is required by {} but not set in {file}",
                    projects.join(", ")
                ),
                Some(format!("add `{key}: <value>` under `config:` in {file}")),
            );
        }
    }
    if missing == 0 {
        let n = values.values.len();
        report.pass(
            "configuration",
            format!(
                "{file}: {n} {}, every required key set",
                plural(n, "key", "keys")
            ),
        );
    }
    let bare: Vec<&str> = values.keys_without_namespace().collect();
    if !bare.is_empty() {
        report.warn(
            "configuration",
            format!(
                "{file}: {} without a namespace: {}",
                plural(bare.len(), "key", "keys"),
                bare.join(", ")
            ),
            Some(
                "each project would read these as its own `<project>:<key>`: write `namespace:key`"
                    .into(),
            ),
        );
    }
}

fn check_infra_type(
    report: &mut Report,
    workspace: &Workspace,
    provider: &Provider,
    values: &StackConfig,
) {
    let Some(expected) = &provider.infra_type else {
        return;
    };
    let mut location = values.location_of(INFRA_TYPE_KEY);
    location.file = workspace.display(&location.file).into_owned();
    match values.get_text(INFRA_TYPE_KEY) {
        None => report.warn(
            "configuration",
            format!("{location}: kubernetes:infra_type is not recorded; `mara up` records `{expected}`"),
            None,
        ),
        Some(recorded) if &recorded == expected => {}
        Some(recorded) if recorded.eq_ignore_ascii_case(expected) => report.fail(
            "configuration",
            format!("{location}: kubernetes:infra_type is `{recorded}`, but provider {} writes `{expected}`", provider.name),
            Some(format!("the projects compare it case-sensitively: write `{expected}`")),
        ),
        Some(recorded) => report.fail(
            "configuration",
            format!(
                "{location}: the stack was built with kubernetes:infra_type `{recorded}`, not provider {}'s `{expected}`",
                provider.name
            ),
            Some("a stack keeps its provider: destroy it first, or use a new stack name".into()),
        ),
    }
}

fn check_secrets(
    report: &mut Report,
    settings: &Settings,
    workspace: &Workspace,
    provider: &Provider,
    plan: &Plan<'_>,
    stack: &ResolvedStack,
    env: &BTreeMap<String, String>,
) {
    let mut wanted: Vec<&crate::provider::SecretSpec> = Vec::new();
    for &i in plan.order() {
        for secret in &plan.graph.project(i).secrets {
            if !wanted.iter().any(|s| s.key == secret.key) {
                wanted.push(secret);
            }
        }
    }
    if wanted.is_empty() {
        report.pass("secrets", "none needed by the selected projects");
        return;
    }
    let secrets_project = &workspace.settings.secrets_project;
    if !provider.projects.iter().any(|p| &p.path == secrets_project) {
        report.fail(
            "secrets",
            format!("{} secrets are declared, but the secrets project `{secrets_project}` is not a project of {}", wanted.len(), provider.name),
            Some("add it to the provider, or set `secrets_project` in mara.toml".into()),
        );
        return;
    }
    let file = workspace.secrets_config_file(&stack.name);
    let shown = workspace.display(&file).display().to_string();
    let stored = match StackConfigFile::load(&file) {
        Ok(config) => config,
        Err(error) => {
            report.fail_with("secrets", error);
            return;
        }
    };
    let missing: Vec<_> = wanted
        .iter()
        .filter(|s| !stored.config().is_some_and(|c| c.contains(&s.key)))
        .collect();
    if missing.is_empty() {
        report.pass("secrets", format!("{} stored in {shown}", wanted.len()));
        return;
    }
    let keys = |list: &[&&crate::provider::SecretSpec]| {
        list.iter()
            .map(|s| s.key.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if settings.interactive {
        report.warn(
            "secrets",
            format!(
                "{} of {} not stored yet; `mara up` asks for: {}",
                missing.len(),
                wanted.len(),
                keys(&missing)
            ),
            None,
        );
        return;
    }
    let unsupplied: Vec<_> = missing
        .iter()
        .filter(|s| !env.contains_key(&s.env_var()))
        .copied()
        .collect();
    if unsupplied.is_empty() {
        report.pass(
            "secrets",
            format!(
                "{} not stored yet, each supplied by its MARA_SECRET_* variable",
                missing.len()
            ),
        );
    } else {
        let variables: Vec<String> = unsupplied.iter().map(|s| s.env_var()).collect();
        report.fail(
            "secrets",
            format!(
                "{} not stored and not supplied: {}",
                unsupplied.len(),
                keys(&unsupplied)
            ),
            Some(format!("without a terminal, set {}", variables.join(", "))),
        );
    }
}

fn check_tools(
    report: &mut Report,
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
        for step in project.steps.all() {
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
            Some(found) => report.pass("tools", format!("{program}: {} ({why})", found.display())),
            None if optional => report.warn(
                "tools",
                format!("{program}: not found on PATH ({why})"),
                None,
            ),
            None => report.fail(
                "tools",
                format!("{program}: not found on PATH ({why})"),
                install_hint(&program),
            ),
        }
    }
}

fn install_hint(program: &str) -> Option<String> {
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

/// `a/./b/../c` → `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
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
        .iter()
        .map(|c| c.area.len())
        .max()
        .unwrap_or(0);
    let shown = report
        .checks
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
    let failed = report.count(Status::Fail);
    let warned = report.count(Status::Warn);
    let warnings = format!("{warned} {}", plural(warned, "warning", "warnings"));
    out.push('\n');
    out.push_str(&if failed == 0 {
        style.green(&format!(
            "✓ valid ({} checks passed, {warnings})",
            report.count(Status::Pass)
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

    #[test]
    fn normalize_is_lexical() {
        assert_eq!(
            normalize(Path::new("/w/a/b/../../config/./pulumi")),
            PathBuf::from("/w/config/pulumi")
        );
    }
}
