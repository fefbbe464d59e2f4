//! What can be checked of a deployment before anything runs (docs/commands.md, "validate"): the
//! projects' directories and files, the stack's configuration and the provider that built it, the
//! secrets, the tools on PATH.
//!
//! Each check yields `Check`s with the words a person reads. `mara validate` lists them all; a run
//! turns the failed ones of the checks that concern it into one error (`Checks::refuse`), so both
//! say the same thing about the same problem.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use crate::configure::{self, Needs};
use crate::engine::EngineKind;
use crate::error::{Error, Problem, Result, plural};
use crate::graph::Plan;
use crate::provider::{ConfigKind, Hook, Provider};
use crate::workspace::Workspace;
use crate::workspace::envfile;
use crate::workspace::pulumi_project::PulumiProject;
use crate::workspace::stack::StackName;
use crate::workspace::stack_config::{INFRA_TYPE_KEY, StackConfig, StackConfigFile};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Warn,
    Fail,
    /// Not checked, because something it needs could not be read.
    Skip,
}

/// One thing checked, and what was found.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub area: &'static str,
    pub status: Status,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// The checks made so far, in the order they were made.
#[derive(Debug, Default)]
pub struct Checks {
    pub list: Vec<Check>,
    /// Files in messages are shown relative to this root.
    pub root: Option<PathBuf>,
}

impl Checks {
    fn add(&mut self, area: &'static str, status: Status, message: String, hint: Option<String>) {
        self.list.push(Check {
            area,
            status,
            message,
            hint,
        });
    }

    pub fn pass(&mut self, area: &'static str, message: impl Into<String>) {
        self.add(area, Status::Pass, message.into(), None);
    }

    pub fn warn(&mut self, area: &'static str, message: impl Into<String>, hint: Option<String>) {
        self.add(area, Status::Warn, message.into(), hint);
    }

    pub fn fail(&mut self, area: &'static str, message: impl Into<String>, hint: Option<String>) {
        self.add(area, Status::Fail, message.into(), hint);
    }

    pub fn skip(&mut self, area: &'static str, message: impl Into<String>) {
        self.add(area, Status::Skip, message.into(), None);
    }

    /// Every problem of `error` as a failed check.
    pub fn fail_with(&mut self, area: &'static str, error: Error) {
        let error = match &self.root {
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
            self.fail(area, problem.to_string(), problem.hint.clone());
        }
    }

    pub fn count(&self, status: Status) -> usize {
        self.list.iter().filter(|c| c.status == status).count()
    }

    /// The failed checks as one configuration error (exit 3); nothing when none failed.
    pub fn refuse(self) -> Result<()> {
        let problems: Vec<Problem> = self
            .list
            .into_iter()
            .filter(|c| c.status == Status::Fail)
            .map(|c| Problem::new(c.message).maybe_hint(c.hint))
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::Problems(problems))
        }
    }
}

/// The stack's configuration: its first run, the provider that built it, and the keys the
/// selected projects require.
pub fn configuration(
    checks: &mut Checks,
    workspace: &Workspace,
    provider: &Provider,
    plan: &Plan<'_>,
    config: &StackConfigFile,
    env: &BTreeMap<String, String>,
    interactive: bool,
) {
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
        first_run(checks, provider, config, &file, env, interactive);
        let asked: Vec<&str> = provider.config.iter().map(|c| c.key.as_str()).collect();
        for (key, projects) in &required {
            if *key != INFRA_TYPE_KEY && !asked.contains(key) {
                checks.fail(
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
    infra_type(checks, workspace, provider, values);
    let mut missing = 0;
    for (key, projects) in &required {
        if *key != INFRA_TYPE_KEY && !values.contains(key) {
            missing += 1;
            checks.fail(
                "configuration",
                format!(
                    "{file}: `{key}`: required by {} but not set",
                    projects.join(", ")
                ),
                Some(format!("add `{key}: <value>` under `config:` in {file}")),
            );
        }
    }
    if missing == 0 {
        let n = values.values.len();
        checks.pass(
            "configuration",
            format!(
                "{file}: {n} {}, every required key set",
                plural(n, "key", "keys")
            ),
        );
    }
    let bare: Vec<&str> = values.keys_without_namespace().collect();
    if !bare.is_empty() {
        checks.warn(
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

/// A stack without configuration: what its first run asks, and — without a terminal, where
/// nothing can be asked — what must be supplied instead.
fn first_run(
    checks: &mut Checks,
    provider: &Provider,
    config: &StackConfigFile,
    file: &str,
    env: &BTreeMap<String, String>,
    interactive: bool,
) {
    let asked: Vec<&str> = provider.config.iter().map(|c| c.key.as_str()).collect();
    let state = if matches!(config, StackConfigFile::Missing(_)) {
        "does not exist"
    } else {
        "is empty"
    };
    let message = format!(
        "{file} {state}: this is the stack's first run, which asks for {} {}{}",
        asked.len(),
        plural(asked.len(), "setting", "settings"),
        if asked.is_empty() {
            String::new()
        } else {
            format!(" ({})", asked.join(", "))
        }
    );
    // Without a terminal only a secret can be supplied (by its variables); nothing else.
    let mut to_write = Vec::new();
    let mut to_set = Vec::new();
    for spec in &provider.config {
        if spec.kind != ConfigKind::Secret {
            to_write.push(spec.key.as_str());
        } else if !configure::supplied_by_env(spec, env)
            && configure::supplied_secret(&spec.key, env).is_none()
        {
            let mut variable = crate::provider::secret_env_var(&spec.key);
            if let Some(own) = &spec.env {
                variable.push_str(&format!(" (or {own})"));
            }
            to_set.push(variable);
        }
    }
    if interactive || (to_write.is_empty() && to_set.is_empty()) {
        checks.warn("configuration", message, None);
        return;
    }
    let mut ways = Vec::new();
    if !to_write.is_empty() {
        ways.push(format!("write {} to {file}", to_write.join(", ")));
    }
    if !to_set.is_empty() {
        ways.push(format!("set {}", to_set.join(", ")));
    }
    checks.fail(
        "configuration",
        message,
        Some(format!(
            "without a terminal nothing can be asked: {}; or run `mara up` once on a terminal",
            ways.join("; ")
        )),
    );
}

/// The provider that built the stack (`kubernetes:infra_type`): a stack keeps its provider.
pub fn provider_lock(
    checks: &mut Checks,
    workspace: &Workspace,
    provider: &Provider,
    config: &StackConfigFile,
) {
    if let Some(values) = config.config() {
        infra_type(checks, workspace, provider, values);
    }
}

fn infra_type(
    checks: &mut Checks,
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
        None => checks.warn(
            "configuration",
            format!("{location}: kubernetes:infra_type is not recorded; `mara up` records `{expected}`"),
            None,
        ),
        Some(recorded) if &recorded == expected => {}
        Some(recorded) if recorded.eq_ignore_ascii_case(expected) => checks.fail(
            "configuration",
            format!("{location}: kubernetes:infra_type is `{recorded}`, but provider {} writes `{expected}`", provider.name),
            Some(format!("the projects compare it case-sensitively: write `{expected}`")),
        ),
        Some(recorded) => checks.fail(
            "configuration",
            format!(
                "{location}: the stack was built with kubernetes:infra_type `{recorded}`, not provider {}'s `{expected}`",
                provider.name
            ),
            Some("a stack keeps its provider: destroy it first, or use a new stack name".into()),
        ),
    }
}

/// The secrets of the selected projects: stored, to be asked for, or — without a terminal —
/// supplied by their `MARA_SECRET_*` variables.
#[allow(clippy::too_many_arguments)]
pub fn secrets(
    checks: &mut Checks,
    workspace: &Workspace,
    provider: &Provider,
    plan: &Plan<'_>,
    stack: &StackName,
    stored: &StackConfigFile,
    env: &BTreeMap<String, String>,
    interactive: bool,
) {
    let wanted = configure::secrets_of(plan).len();
    if wanted == 0 {
        checks.pass("secrets", "none needed by the selected projects");
        return;
    }
    let secrets_project = &workspace.settings.secrets_project;
    if !provider.projects.iter().any(|p| &p.path == secrets_project) {
        checks.fail(
            "secrets",
            format!("{wanted} secrets are declared, but the secrets project `{secrets_project}` is not a project of {}", provider.name),
            Some("add it to the provider, or set `secrets_project` in mara.toml".into()),
        );
        return;
    }
    let Needs {
        secrets: missing, ..
    } = configure::needs(provider, plan, stored, stored);
    let shown = workspace
        .display(&workspace.secrets_config_file(stack))
        .display()
        .to_string();
    if missing.is_empty() {
        checks.pass("secrets", format!("{wanted} stored in {shown}"));
        return;
    }
    let keys = |list: &[&crate::provider::SecretSpec]| {
        list.iter()
            .map(|s| s.key.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if interactive {
        checks.warn(
            "secrets",
            format!(
                "{} of {wanted} secrets not stored yet; `mara up` asks for: {}",
                missing.len(),
                keys(&missing)
            ),
            None,
        );
        return;
    }
    let unsupplied: Vec<_> = missing
        .iter()
        .filter(|s| configure::supplied_secret(&s.key, env).is_none())
        .copied()
        .collect();
    if unsupplied.is_empty() {
        checks.pass(
            "secrets",
            format!(
                "{} not stored yet, each supplied by its MARA_SECRET_* variable",
                missing.len()
            ),
        );
    } else {
        let variables: Vec<String> = unsupplied.iter().map(|s| s.env_var()).collect();
        checks.fail(
            "secrets",
            format!(
                "{} {} not stored and not supplied: {}",
                unsupplied.len(),
                plural(unsupplied.len(), "secret", "secrets"),
                keys(&unsupplied)
            ),
            Some(format!("without a terminal, set {}", variables.join(", "))),
        );
    }
}

/// Each selected project's directory and project files (docs/commands.md, "validate").
pub fn projects(checks: &mut Checks, workspace: &Workspace, plan: &Plan<'_>) {
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
            checks.pass("project", format!("{path}: command steps, run in {place}"));
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
            checks.fail(
                "project",
                format!("{path}: no directory {}", workspace.display(&dir).display()),
                hint,
            );
            continue;
        }
        match engine {
            EngineKind::Pulumi => {
                let Some(loaded) = found.flatten() else {
                    checks.fail(
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
                        checks.pass(
                            "project",
                            format!("{path}: Pulumi project `{}`{runtime}", pulumi.name),
                        );
                        if let Some(config_dir) = &pulumi.stack_config_dir {
                            let points_at = normalize(&dir.join(config_dir));
                            let is_secrets = path == workspace.settings.secrets_project;
                            if is_secrets && points_at == shared_config_dir {
                                checks.warn(
                                    "project",
                                    format!("{path}: its Pulumi.yaml points its stack configuration at the shared one"),
                                    Some("the secrets project keeps its own: remove `stackConfigDir`/`config:` from its Pulumi.yaml".into()),
                                );
                            } else if !is_secrets && points_at != shared_config_dir {
                                checks.warn(
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
                    Err(error) => checks.fail_with("project", error),
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
                    checks.fail(
                        "project",
                        format!(
                            "{path}: no .tf files in {}",
                            workspace.display(&dir).display()
                        ),
                        None,
                    );
                } else {
                    checks.pass(
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
        checks.fail(
            "project",
            format!(
                "{} are named `{name}` in their Pulumi.yaml",
                paths.join(" and ")
            ),
            Some("stack references address projects by name: give each its own".into()),
        );
    }
}

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
