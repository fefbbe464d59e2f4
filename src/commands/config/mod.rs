//! `mara config get | set | rm | list` (docs/commands.md, "config"): the shared stack
//! configuration and the secrets project's own, read from their files. A plain value is typed by
//! the provider's `[[config]]` entry (or as Pulumi's `config set` types it) and written by mara in
//! place, so nothing else in the file changes; a secret is encrypted by Pulumi (`pulumi config set
//! --secret`, the value on standard input) into the secrets project. One file per subcommand;
//! this one holds what they share: the two files, where a key is set, and Pulumi's steps.

mod get;
mod list;
mod rm;
mod set;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use crate::cli::ConfigCommand;
use crate::deployment::StackFiles;
use crate::engine::Step;
use crate::engine::pulumi::Pulumi;
use crate::error::Location;
use crate::error::{Error, Problem, Result};
use crate::provider::schema::is_namespaced;
use crate::provider::{ConfigKind, ConfigSpec, Provider};
use crate::run::process::run_blocking;
use crate::settings::Settings;
use crate::workspace::Workspace;
use crate::workspace::config_path::{ConfigPath, Found};
use crate::workspace::stack::StackName;
use crate::workspace::stack_config::StackConfigFile;

pub fn run(settings: &Settings, command: ConfigCommand) -> Result<()> {
    let stack_files = StackFiles::load(settings)?;
    let root = stack_files.workspace.root.clone();
    config(settings, &stack_files, command).map_err(|e| e.relative_to(&root))
}

fn config(settings: &Settings, stack_files: &StackFiles, command: ConfigCommand) -> Result<()> {
    let files = files(settings, stack_files)?;
    match command {
        ConfigCommand::Get {
            key,
            show_secrets,
            path,
        } => get::get(settings, stack_files, &files, &key, show_secrets, path),
        ConfigCommand::Set {
            key,
            value,
            secret,
            path,
        } => set::set(settings, stack_files, &files, &key, value, secret, path),
        ConfigCommand::Rm { key, path } => rm::rm(settings, stack_files, &files, &key, path),
        ConfigCommand::List => list::list(settings, stack_files),
    }
}

/// The two configuration files of a stack, and how to reach Pulumi for them.
pub(super) struct Files {
    stack: StackName,
    shared: PathBuf,
    secrets: PathBuf,
    env: BTreeMap<String, String>,
    /// `state = "ledger"`: the server the stacks are kept in.
    state: Option<crate::engine::state::StateServer>,
}

pub(super) fn files(settings: &Settings, stack_files: &StackFiles) -> Result<Files> {
    let workspace = &stack_files.workspace;
    let stack = stack_files.required_stack()?;
    let all = stack_files.environment(settings);
    let state = crate::deployment::state::for_command(workspace, &settings.env, &all)?;
    let env = crate::run::prepare::engine_env_in(workspace, &all);
    Ok(Files {
        state,
        shared: workspace.stack_config_file(&stack.name),
        secrets: workspace.secrets_config_file(&stack.name),
        stack: stack.name.clone(),
        env,
    })
}

pub(super) fn pulumi(workspace: &Workspace, files: &Files) -> Pulumi {
    Pulumi {
        binary: workspace.settings.pulumi.binary.clone(),
        stack: files.stack.to_string(),
        shared_config: files.shared.clone(),
        secrets_project: workspace.settings.secrets_project.clone(),
        secrets_provider: workspace.settings.pulumi.secrets_provider.clone(),
        color: false,
        state: files.state.clone(),
        // `config set` and `get` apply no plan, run no policy.
        update_plans: false,
        policy_packs: Vec::new(),
    }
}

/// The key a command names: with `--path`, a path into a value (Pulumi's syntax); either way
/// namespaced.
pub(super) fn target(key: &str, path: bool) -> Result<ConfigPath> {
    let target = if path {
        ConfigPath::parse(key).map_err(|message| {
            Error::usage(
                Problem::new(format!("not a configuration path: {message}"))
                    .subject(format!("`{key}`"))
                    .hint("a path is `namespace:key.inner`, `namespace:key.list[0]` or `namespace:key[\"a.b\"]`"),
            )
        })?
    } else {
        ConfigPath::literal(key)
    };
    if is_namespaced(&target.key) {
        Ok(target)
    } else {
        let message = match target.key.contains(':') {
            true => format!("`{}` is not `namespace:key`", target.key),
            false => format!("`{}` has no namespace", target.key),
        };
        Err(Error::usage(
            Problem::new(message)
                .hint("keys are `namespace:key` (e.g. `aws:region`): in the shared file a bare key would mean another key to every project"),
        ))
    }
}

/// The provider's `[[config]]` entry for `target`, if it declares one.
pub(super) fn declared<'p>(provider: &'p Provider, target: &ConfigPath) -> Option<&'p ConfigSpec> {
    provider
        .config
        .iter()
        .find(|spec| ConfigPath::parse(&spec.key).is_ok_and(|p| p == *target))
}

/// Where the provider declares `target` a secret — a `[[config]]` entry of kind "secret", or a
/// project's `[[project.secret]]` — which is never stored in plain text.
pub(super) fn declared_secret(provider: &Provider, target: &ConfigPath) -> Option<Location> {
    if target.is_nested() {
        return None;
    }
    if let Some(spec) = declared(provider, target).filter(|s| s.kind == ConfigKind::Secret) {
        return Some(spec.declared_at.clone());
    }
    (provider.projects.iter())
        .flat_map(|p| &p.secrets)
        .find(|s| s.key == target.key)
        .map(|s| s.declared_at.clone())
}

/// The shared configuration as loaded, then the secrets project's, read now.
pub(super) fn both(stack_files: &StackFiles) -> Result<[StackConfigFile; 2]> {
    let stack = stack_files.required_stack()?;
    let shared = match &stack_files.config {
        Some(config) => config.clone(),
        None => StackConfigFile::Missing(stack_files.workspace.stack_config_file(&stack.name)),
    };
    Ok([shared, stack_files.secrets_config(stack)?])
}

/// Where `target` is set — the shared file first, then the secrets project's — and its value
/// there (`None` for a secret).
pub(super) fn find(
    stack_files: &StackFiles,
    target: &ConfigPath,
) -> Result<Vec<(PathBuf, Option<Value>)>> {
    let mut found = Vec::new();
    for file in both(stack_files)? {
        if let Some(config) = file.config() {
            let value = match config.find(target) {
                Found::Value(value) => Some(value.clone()),
                Found::Secret => None,
                Found::Missing => continue,
            };
            found.push((file.path().to_path_buf(), value));
        }
    }
    Ok(found)
}

/// `into` with `value` laid over it: mappings merged key by key, anything else replaced.
pub(super) fn merge(into: &mut Value, value: Value) {
    match (into, value) {
        (Value::Object(into), Value::Object(value)) => {
            for (key, inner) in value {
                merge(into.entry(key).or_insert(Value::Null), inner);
            }
        }
        (into, value) => *into = value,
    }
}

pub(super) fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Runs a configuration step to its end.
pub(super) fn run_step(
    step: &Step,
    env: &BTreeMap<String, String>,
    stdin: Option<&str>,
) -> Result<crate::run::process::Finished> {
    run_blocking(step, env, stdin).map_err(|source| Error::Spawn {
        program: step.program.clone(),
        source,
    })
}

/// A project directory where Pulumi can reach the shared configuration: the first project of the
/// provider's plan.
pub(super) fn first_project_dir(settings: &Settings, stack_files: &StackFiles) -> Result<PathBuf> {
    let deployment = stack_files.clone().into_deployment(settings)?;
    let graph = &deployment.graph;
    let first = graph
        .order()
        .first()
        .map(|&i| graph.project(i).path.clone())
        .ok_or_else(|| {
            Error::config(Problem::new(format!(
                "provider {} has no projects",
                deployment.provider.name
            )))
        })?;
    Ok(stack_files.workspace.project_dir(&first))
}
