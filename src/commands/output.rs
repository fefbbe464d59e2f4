//! `mara output [PROJECT]` (docs/commands.md, "output"): the stack outputs of every project of the
//! plan (or one), as JSON.
//!
//! Secrets stay `[secret]` unless `--show-secrets`: mara asks the engine for them the same way, so
//! it never holds a secret it was not asked to show.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use crate::cli::OutputArgs;
use crate::configure;
use crate::deployment::Deployment;
use crate::engine::pulumi::{self, Pulumi};
use crate::engine::{EngineKind, Step, terraform};
use crate::error::{Error, Problem, Result};
use crate::run::process::{self, run_blocking};
use crate::settings::Settings;

pub fn run(settings: &Settings, args: OutputArgs) -> Result<()> {
    let OutputArgs {
        project,
        show_secrets,
    } = args;
    let deployment = Deployment::load(settings)?;
    let files = &deployment.files;
    let workspace = &files.workspace;
    let result = (|| {
        let stack = files.required_stack()?;
        let graph = &deployment.graph;
        let mut env = files.environment(settings);
        crate::ledger::keep_from_engines(workspace, &mut env);
        configure::strip_secret_variables(&mut env);
        let pulumi = Pulumi {
            binary: workspace.settings.pulumi.binary.clone(),
            stack: stack.name.to_string(),
            shared_config: workspace.stack_config_file(&stack.name),
            secrets_project: workspace.settings.secrets_project.clone(),
            secrets_provider: workspace.settings.pulumi.secrets_provider.clone(),
            color: false,
        };
        let chosen: Vec<usize> = match &project {
            Some(name) => vec![graph.find(name).map_err(Error::usage)?],
            None => graph.order().to_vec(),
        };
        let mut all = Map::new();
        for &i in &chosen {
            let outputs = outputs_of(&deployment, (&pulumi, stack), i, &env, show_secrets)?;
            all.insert(graph.project(i).path.clone(), outputs);
        }
        let value = match (&project, chosen.as_slice()) {
            (Some(_), [i]) => all.remove(&graph.project(*i).path).unwrap_or(Value::Null),
            _ => Value::Object(all),
        };
        crate::ui::print(&format!(
            "{}\n",
            serde_json::to_string_pretty(&value).expect("JSON values serialize")
        ))
    })();
    result.map_err(|e| e.relative_to(&workspace.root))
}

/// The stack outputs of project `i` (`null` when it has none yet), as its engine gives them.
pub(crate) fn outputs_of(
    deployment: &Deployment,
    (pulumi, stack): (&Pulumi, &crate::workspace::stack::ResolvedStack),
    i: usize,
    env: &BTreeMap<String, String>,
    show_secrets: bool,
) -> Result<Value> {
    let workspace = &deployment.files.workspace;
    let project = deployment.graph.project(i);
    let dir = workspace.project_dir(&project.path);
    Ok(match project.engine_or(workspace.settings.engine) {
        engine @ (EngineKind::Terraform | EngineKind::Tofu) => {
            let terraform = terraform::Terraform {
                binary: engine.as_str().to_string(),
                stack: stack.name.to_string(),
                color: false,
            };
            terraform_outputs(&terraform, &dir, env, show_secrets)?
        }
        EngineKind::Command => {
            let file = workspace.command_outputs_file(stack.name.as_str(), &project.path);
            std::fs::read_to_string(file)
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or(Value::Null)
        }
        EngineKind::Pulumi => pulumi_outputs(pulumi, &dir, show_secrets, env)?,
        // Manifests have no outputs.
        EngineKind::Kubectl => Value::Object(Default::default()),
    })
}

/// A Terraform module's outputs in the stack's workspace (`{}` once destroyed; `null` before its
/// first run).
fn terraform_outputs(
    terraform: &terraform::Terraform,
    dir: &Path,
    env: &BTreeMap<String, String>,
    show_secrets: bool,
) -> Result<Value> {
    if !dir.join(".terraform").is_dir() {
        return Ok(Value::Null);
    }
    let output = run_step(&terraform.output_step(dir), env, None)?;
    if output.code == Some(0) {
        Ok(terraform::outputs(&output.stdout, show_secrets))
    } else {
        let reason = process::last_error(&output.stderr).unwrap_or("terraform output failed");
        Err(Error::config(
            Problem::new(reason.to_string()).subject(dir.display().to_string()),
        ))
    }
}

/// One Pulumi project's outputs; `null` when its stack does not exist (nothing deployed yet).
fn pulumi_outputs(
    pulumi: &Pulumi,
    dir: &Path,
    show_secrets: bool,
    env: &BTreeMap<String, String>,
) -> Result<Value> {
    if !dir.is_dir() {
        return Ok(Value::Null);
    }
    let output = run_step(
        &pulumi.output_step(dir, show_secrets),
        env,
        Some("install the Pulumi CLI, or set `binary` under [pulumi] in mara.toml"),
    )?;
    if output.code == Some(0) {
        return Ok(serde_json::from_str(&output.stdout).unwrap_or(Value::Null));
    }
    if pulumi::is_missing_stack(output.code, &output.stderr) {
        return Ok(Value::Null);
    }
    let reason = process::last_error(&output.stderr).unwrap_or("pulumi stack output failed");
    Err(Error::config(
        Problem::new(reason.to_string()).subject(dir.display().to_string()),
    ))
}

/// Runs an outputs step to its end; a program missing from PATH is a configuration error, with
/// `hint` when there is one.
fn run_step(
    step: &Step,
    env: &BTreeMap<String, String>,
    hint: Option<&str>,
) -> Result<process::Finished> {
    run_blocking(step, env, None).map_err(|error| {
        if error.kind() == std::io::ErrorKind::NotFound {
            Error::config(Problem::new(error.to_string()).maybe_hint(hint.map(String::from)))
        } else {
            Error::Spawn {
                program: step.program.clone(),
                source: error,
            }
        }
    })
}
