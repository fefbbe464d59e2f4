//! What can be checked of a deployment before anything runs (docs/commands.md, "validate"): the
//! projects' directories and files, the stack's configuration and the provider that built it, the
//! secrets, the tools on PATH.
//!
//! Each check yields `Check`s with the words a person reads. `mara validate` lists them all; a run
//! turns the failed ones of the checks that concern it into one error (`Checks::refuse`), so both
//! say the same thing about the same problem.

pub mod dependents;
pub mod fanout;
mod projects;
pub mod state;
mod tools;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

pub use projects::{
    inputs_have_outputs, local_cluster, mergeable_kubeconfig, one_kubeconfig, preflight, projects,
};
pub use tools::{install_hint, tools};

use crate::configure::{self, Needs};
use crate::error::{Error, Location, Problem, Result, plural};
use crate::graph::Plan;
use crate::provider::{ConfigKind, Provider};
use crate::workspace::Workspace;
use crate::workspace::config_path::{ConfigPath, Found};
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
    /// `mara` as this invocation was typed (`Settings::invoked`), for the commands hints name;
    /// plain `mara` when empty.
    pub mara: String,
}

impl Checks {
    /// `mara ARGS` as a hint names it: with the invocation's `-C`, `-s` and `-p`.
    pub fn again(&self, args: &str) -> String {
        match self.mara.as_str() {
            "" => format!("mara {args}"),
            mara => format!("{mara} {args}"),
        }
    }

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

/// What a run's checks look at. A run makes them in two steps, each refusing with one error
/// (docs/commands.md, "validate": the same checks, the same words): `configuration` before
/// anything else, `needs` (for `up`) before anything is asked.
pub struct RunChecks<'a> {
    pub deployment: &'a crate::deployment::Deployment,
    pub selected: &'a Plan<'a>,
    pub stack: &'a StackName,
    pub config: &'a StackConfigFile,
    /// The secrets project's own stack configuration.
    pub stored: &'a StackConfigFile,
    /// The environment, `MARA_SECRET_*` included.
    pub env: &'a BTreeMap<String, String>,
    pub interactive: bool,
    /// A job of a fanned-out run (`--run`): the kubeconfigs its dependencies' hooks wrote
    /// elsewhere are written again for it once the checks pass.
    pub joined: bool,
    /// `mara` as this invocation was typed (`Settings::invoked`), for hints.
    pub mara: &'a str,
}

impl RunChecks<'_> {
    fn start(&self) -> Checks {
        Checks {
            root: Some(self.deployment.files.workspace.root.clone()),
            mara: self.mara.to_string(),
            ..Checks::default()
        }
    }

    fn configuration_into(&self, found: &mut Checks) {
        configuration(
            found,
            &self.deployment.files.workspace,
            &self.deployment.provider,
            self.selected,
            self.stack,
            self.config,
            Some(self.stored),
            self.env,
            self.interactive,
        );
    }

    /// The provider that built the stack; for an `up` of a stack that has its configuration, the
    /// keys the selected projects require.
    pub fn configuration(&self, operation: crate::engine::Operation) -> Result<()> {
        let mut found = self.start();
        self.configuration_into_found(operation, &mut found);
        found.refuse()
    }

    /// Everything a run needs in place before it starts: the configuration (as `configuration`),
    /// every selected project's directory and entry file, the secrets project when `up` stores
    /// secrets, and the tools on the PATH the run's processes get (`env`).
    pub fn preflight(&self, operation: crate::engine::Operation) -> Result<()> {
        let mut found = self.start();
        self.configuration_into_found(operation, &mut found);
        let workspace = &self.deployment.files.workspace;
        let provider = &self.deployment.provider;
        let asks_tokens = self.config.is_first_run()
            && provider
                .config
                .iter()
                .any(|c| c.kind == ConfigKind::Secret && !configure::supplied_by_env(c, self.env));
        let stores_secrets = operation == crate::engine::Operation::Up
            && (asks_tokens
                || !configure::secrets_of(self.selected, &workspace.settings.secrets_project)
                    .is_empty());
        let secrets_project = &workspace.settings.secrets_project;
        if operation == crate::engine::Operation::Up
            && asks_tokens
            && self.deployment.graph.lookup(secrets_project).is_none()
        {
            found.fail(
                "secrets",
                format!(
                    "provider {}'s first run asks for a secret, which is kept in the secrets project `{secrets_project}`, not a project of the provider",
                    provider.name
                ),
                Some("add it to the provider, set `secrets_project` in mara.toml, or supply the secret in its variable".into()),
            );
        }
        preflight(
            &mut found,
            workspace,
            self.selected,
            stores_secrets,
            operation.runs_programs(),
        );
        projects::inputs_have_outputs(&mut found, workspace, self.selected);
        state::left_behind(&mut found, workspace, self.selected, self.stack.as_str());
        local_cluster(&mut found, provider, self.selected, self.stack);
        // A preview checks what the update it previews would meet (a drift check in CI too).
        if matches!(
            operation,
            crate::engine::Operation::Up | crate::engine::Operation::Preview
        ) {
            one_kubeconfig(&mut found, workspace, &self.deployment.graph, self.stack);
        }
        if operation == crate::engine::Operation::Up {
            projects::mergeable_kubeconfig(&mut found, self.selected, self.env);
        }
        // Destroy and refresh leave such projects untouched (`absent`); a preview waits.
        if operation == crate::engine::Operation::Up && !self.joined {
            projects::kubeconfig_for_kubectl(
                &mut found,
                workspace,
                self.selected,
                self.stack,
                self.config,
                self.env,
            );
        }
        receivable(&mut found, workspace, self.selected, self.config);
        tools(&mut found, workspace, self.selected, self.env);
        found.refuse()
    }

    fn configuration_into_found(&self, operation: crate::engine::Operation, found: &mut Checks) {
        // What the programs read must be there and fit for an update, and for a preview or a
        // drift check, which run the same programs; refresh and destroy do not run them, but
        // their engines' plugins read the keys the selected projects require (`aws:region`:
        // the original refused every operation without it).
        if operation.runs_programs() && !self.config.is_first_run() {
            self.configuration_into(found);
        } else {
            let files = &self.deployment.files;
            let (workspace, provider) = (&files.workspace, &self.deployment.provider);
            if !self.config.is_first_run() {
                let file = workspace.display(self.config.path()).display().to_string();
                let required = required(self.selected);
                unset(found, &required, self.config, Some(self.stored), &file);
            }
            provider_lock(found, workspace, provider, self.config);
            tokens(
                found,
                workspace,
                provider,
                self.config,
                Some(self.stored),
                self.env,
            );
        }
    }

    /// After a first run wrote `config` from its answers: every key the selected projects require
    /// is set (an optional question answered with nothing leaves one unset).
    pub fn answered(&self) -> Result<()> {
        let mut found = self.start();
        let workspace = &self.deployment.files.workspace;
        let file = workspace.display(self.config.path()).display().to_string();
        let required = required(self.selected);
        unset(&mut found, &required, self.config, Some(self.stored), &file);
        found.refuse()
    }

    /// What an `up` needs before it can go on: a first run's answers and the secrets not stored
    /// yet — without a terminal, only what the environment supplies.
    pub fn needs(&self) -> Result<()> {
        let mut found = self.start();
        if self.config.is_first_run() {
            self.configuration_into(&mut found);
        }
        secrets(
            &mut found,
            &self.deployment.files.workspace,
            &self.deployment.provider,
            self.selected,
            self.stack,
            self.stored,
            self.env,
            self.interactive,
        );
        found.refuse()
    }
}

/// The stack's configuration: its first run, the provider that built it, and the keys the
/// selected projects require.
#[allow(clippy::too_many_arguments)]
pub fn configuration(
    checks: &mut Checks,
    workspace: &Workspace,
    provider: &Provider,
    plan: &Plan<'_>,
    stack: &StackName,
    config: &StackConfigFile,
    stored: Option<&StackConfigFile>,
    env: &BTreeMap<String, String>,
    interactive: bool,
) {
    let file = workspace.display(config.path()).display().to_string();
    let required = required(plan);
    let Some(values) = config.config() else {
        let written = workspace.kubeconfig_file(stack);
        let kubeconfig = workspace.display(&written).display().to_string();
        let asking = Asking {
            stack,
            kubeconfig: &kubeconfig,
            env,
            interactive,
            example: configure::example_defaults(&workspace.config_dir()),
            near: match config {
                StackConfigFile::Missing(_) => {
                    crate::workspace::stack::near_stack(&workspace.config_dir(), stack.as_str())
                }
                _ => None,
            },
        };
        first_run(checks, provider, config, &file, &asking);
        let asked: Vec<ConfigPath> = provider.config.iter().map(|c| path_of(&c.key)).collect();
        for (key, projects) in &required {
            let path = path_of(key);
            if *key != INFRA_TYPE_KEY && !asked.contains(&path) && !is_set(&path, [None, stored]) {
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
    tokens(checks, workspace, provider, config, stored, env);
    let wrong = misfits(checks, workspace, provider, values);
    if unset(checks, &required, config, stored, &file) + wrong == 0 {
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

/// What a first run's questions would be asked with.
struct Asking<'a> {
    stack: &'a StackName,
    kubeconfig: &'a str,
    env: &'a BTreeMap<String, String>,
    interactive: bool,
    /// The repository's example configuration (`configure::example_defaults`).
    example: BTreeMap<String, serde_json::Value>,
    /// A stack that has its configuration, spelt like this new one (`stack::near_stack`).
    near: Option<String>,
}

/// Each required key (or path into a value) that neither `config` nor the secrets project's
/// `stored` sets, as a failed check; how many there are.
fn unset(
    checks: &mut Checks,
    required: &BTreeMap<&str, Vec<&str>>,
    config: &StackConfigFile,
    stored: Option<&StackConfigFile>,
    file: &str,
) -> usize {
    let mut missing = 0;
    for (key, projects) in required {
        let path = path_of(key);
        if *key != INFRA_TYPE_KEY && !is_set(&path, [Some(config), stored]) {
            missing += 1;
            let hint = if path.is_nested() {
                format!(
                    "set it with `{}` (with --secret, encrypted in the secrets project)",
                    checks.again(&format!("config set --path {key} VALUE"))
                )
            } else {
                format!("add `{key}: <value>` under `config:` in {file}")
            };
            checks.fail(
                "configuration",
                format!(
                    "{file}: `{key}`: required by {} but not set",
                    projects.join(", ")
                ),
                Some(hint),
            );
        }
    }
    missing
}

/// A key named in a provider as the path it is (checked when the provider was read).
fn path_of(key: &str) -> ConfigPath {
    ConfigPath::parse(key).unwrap_or_else(|_| ConfigPath::literal(key))
}

/// Every token a provider's first run asks for (a `kind = "secret"` question with its `env`
/// variable: DIGITALOCEAN_TOKEN, LINODE_TOKEN) is there on every later run too, since the engines
/// need it for every operation: in its variable (the shell or the environment file), or stored —
/// in the shared configuration, where a first run puts it, or the secrets project's.
pub fn tokens(
    checks: &mut Checks,
    workspace: &Workspace,
    provider: &Provider,
    config: &StackConfigFile,
    stored: Option<&StackConfigFile>,
    env: &BTreeMap<String, String>,
) {
    if config.is_first_run() {
        return;
    }
    for (variable, spec) in provider.tokens() {
        let key = &spec.key;
        if configure::supplied_by_env(spec, env) {
            checks.pass("configuration", format!("`{key}`: from {variable}"));
        } else if is_set(&path_of(key), [Some(config), stored]) {
            checks.pass("configuration", format!("`{key}`: stored"));
        } else {
            let file = workspace.env_file();
            checks.fail(
                "configuration",
                format!(
                    "provider {} needs `{key}` ({}) on every run: {variable} is not set, and it is not stored",
                    provider.name,
                    spec.prompt
                ),
                Some(format!(
                    "set {variable} (in the shell or {}), or store it: `{}`",
                    workspace.display(&file).display(),
                    checks.again(&format!("config set --secret {key}"))
                )),
            );
        }
    }
}

/// Whether one of the files sets `path`, in plain text or as a secret.
fn is_set(path: &ConfigPath, files: [Option<&StackConfigFile>; 2]) -> bool {
    files.into_iter().flatten().any(|f| {
        f.config()
            .is_some_and(|c| !matches!(c.find(path), Found::Missing))
    })
}

/// Each value that a `[[config]]` entry declares and that does not fit its kind or choices, as a
/// failed check naming its line; how many there are.
fn misfits(
    checks: &mut Checks,
    workspace: &Workspace,
    provider: &Provider,
    values: &StackConfig,
) -> usize {
    let mut found = 0;
    for spec in &provider.config {
        let path = path_of(&spec.key);
        let Found::Value(value) = values.find(&path) else {
            continue;
        };
        let fits = configure::check_stored(spec, value)
            .and_then(|()| configure::check_bounds(spec, value, &values.values));
        if let Err(message) = fits {
            found += 1;
            let shown = |at: &Location| Location {
                file: workspace.display(&at.file).into_owned(),
                ..at.clone()
            };
            let at = shown(&values.location_of_path(&path));
            checks.fail(
                "configuration",
                format!("{at}: `{}` {message}", spec.key),
                Some(format!(
                    "provider {} declares it (kind \"{}\"{}) at {}",
                    provider.name,
                    spec.kind.as_str(),
                    if spec.choices.is_empty() {
                        ""
                    } else {
                        ", with choices"
                    },
                    shown(&spec.declared_at)
                )),
            );
        }
    }
    found
}

/// The keys each selected project requires, and which projects require each.
fn required<'p>(plan: &Plan<'p>) -> BTreeMap<&'p str, Vec<&'p str>> {
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
    required
}

/// A stack without configuration: what its first run asks, and — without a terminal, where
/// nothing can be asked — what must be supplied instead, with each question's default.
fn first_run(
    checks: &mut Checks,
    provider: &Provider,
    config: &StackConfigFile,
    file: &str,
    asking: &Asking<'_>,
) {
    let env = asking.env;
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
    // `-s dve`: a stack that is new, spelt like one that is not.
    let message = match &asking.near {
        Some(near) => {
            format!("{message} — did you mean stack `{near}`, which has its configuration?")
        }
        None => message,
    };
    // Without a terminal only a secret can be supplied (by its variables); nothing else.
    let mut to_write = Vec::new();
    let mut to_set = Vec::new();
    for spec in &provider.config {
        if spec.kind != ConfigKind::Secret {
            let default =
                configure::default_of(spec, env, asking.stack, asking.kubeconfig, &asking.example);
            to_write.push(match default {
                Some(default) => format!("{} (default {default})", spec.key),
                None => spec.key.clone(),
            });
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
    if asking.interactive || (to_write.is_empty() && to_set.is_empty()) {
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
            "without a terminal nothing can be asked: {}; or run `{}` once on a terminal",
            ways.join("; "),
            checks.again("up")
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
    let recorded = match values.infra_type() {
        Ok(recorded) => recorded,
        Err(problem) => {
            let hint = problem.hint.clone();
            return checks.fail(
                "configuration",
                format!("{location}: {}", problem.message),
                hint,
            );
        }
    };
    match recorded {
        None => {
            let up = checks.again("up");
            checks.warn(
                "configuration",
                format!("{location}: kubernetes:infra_type is not recorded; `{up}` records `{expected}`"),
                None,
            )
        }
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

/// The shared configuration's values that reach a selected Terraform module as `TF_VAR_*`
/// variables: each must be something a process can receive (no NUL byte, not past 128 KiB).
pub fn receivable(
    checks: &mut Checks,
    workspace: &Workspace,
    plan: &Plan<'_>,
    config: &StackConfigFile,
) {
    let Some(values) = config.config() else {
        return;
    };
    let mut said = std::collections::BTreeSet::new();
    for &i in plan.order() {
        let project = plan.graph.project(i);
        let engine = project.engine_or(workspace.settings.engine);
        let leaf = project.path.rsplit('/').next().unwrap_or(&project.path);
        for (key, name, value) in engine.config_variables(&values.values, leaf) {
            if let Some(why) = crate::workspace::envfile::unsendable(&name, &value, true)
                && said.insert(key.clone())
            {
                let problem = Problem::new(why)
                    .at(values.location_of(&key))
                    .subject(format!("`{key}`"))
                    .hint(format!(
                        "{} receives it as the variable {name}",
                        project.path
                    ));
                checks.fail_with("configuration", Error::config(problem));
            }
        }
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
    let secrets_project = &workspace.settings.secrets_project;
    let wanted = configure::secrets_of(plan, secrets_project).len();
    if wanted == 0 {
        checks.pass("secrets", "none needed by the selected projects");
        return;
    }
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
    } = configure::needs(provider, plan, secrets_project, stored, stored);
    let shown = workspace
        .display(&workspace.secrets_config_file(stack))
        .display()
        .to_string();
    if missing.is_empty() {
        checks.pass("secrets", format!("{wanted} stored in {shown}"));
        return;
    }
    if interactive {
        let up = checks.again("up");
        checks.warn(
            "secrets",
            format!(
                "{} of {wanted} secrets not stored yet; `{up}` asks for: {}",
                missing.len(),
                keys(&missing)
            ),
            None,
        );
        return;
    }
    not_stored(checks, &missing, env);
}

/// The secrets' keys, as a message lists them.
fn keys(list: &[&crate::provider::SecretSpec]) -> String {
    (list.iter().map(|s| s.key.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Without a terminal: the secrets not stored yet, each to be supplied by its `MARA_SECRET_*`
/// variable, or failed, naming the variables to set.
fn not_stored(
    checks: &mut Checks,
    missing: &[&crate::provider::SecretSpec],
    env: &BTreeMap<String, String>,
) {
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
