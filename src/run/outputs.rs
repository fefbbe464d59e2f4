//! A project's stack outputs read outside a run's steps (docs/commands.md, "output"): what
//! `mara output` prints, and what a job of a fanned-out run rebuilds its dependencies'
//! kubeconfigs from. Each engine is asked as it keeps them: Pulumi's `stack output`, Terraform's
//! `output -json`, the JSON a command project wrote to `$MARA_OUTPUTS`; manifests have none.
//!
//! Secrets stay `[secret]` unless asked for: mara asks the engine for them the same way. They
//! are asked for in clear, and kept in memory only, where mara must know them to hand them on or
//! to hide them (`with_secrets`: the upstreams of a run's inputs, and of what `mara output`
//! prints).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::deployment::Deployment;
use crate::engine::pulumi::{self, Pulumi};
use crate::engine::{EngineKind, Step, terraform};
use crate::error::{Error, Problem, Result};
use crate::run::process::{self, run_blocking};

/// The stack outputs of project `i` on `pulumi`'s stack (`null` when it has none yet), as its
/// engine gives them.
pub fn outputs_of(
    deployment: &Deployment,
    pulumi: &Pulumi,
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
                stack: pulumi.stack.clone(),
                color: false,
            };
            terraform_outputs(&terraform, &dir, env, show_secrets)?
        }
        EngineKind::Command => {
            let file = workspace.command_outputs_file(&pulumi.stack, &project.path);
            crate::files::read_to_string(&file)
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or(Value::Null)
        }
        EngineKind::Pulumi => pulumi_outputs(pulumi, &dir, show_secrets, env)?,
        // Manifests have no outputs.
        EngineKind::Kubectl => Value::Object(Default::default()),
    })
}

/// Project `i`'s outputs with their secrets (in memory only: for the inputs that take them, for
/// what must be redacted), and which of them are secret — those its engine shows only when
/// asked (`show_secrets`). `None` when it has none, or they cannot be read.
pub fn with_secrets(
    deployment: &Deployment,
    pulumi: &Pulumi,
    i: usize,
    env: &BTreeMap<String, String>,
) -> Option<crate::run::inputs::Read> {
    let outputs = |secrets| outputs_of(deployment, pulumi, i, env, secrets);
    let (Ok(Value::Object(values)), Ok(Value::Object(shown))) = (outputs(true), outputs(false))
    else {
        return None;
    };
    let secret = (shown.iter())
        .filter(|(name, value)| values.get(*name) != Some(*value))
        .map(|(name, _)| name.clone())
        .collect();
    Some((values, secret))
}

/// A Terraform module's outputs in the stack's workspace (`{}` once destroyed; `null` before its
/// first run, or without the workspace — which is listed first: `output` in a `TF_WORKSPACE`
/// the local backend does not have makes it).
fn terraform_outputs(
    terraform: &terraform::Terraform,
    dir: &Path,
    env: &BTreeMap<String, String>,
    show_secrets: bool,
) -> Result<Value> {
    if !dir.join(".terraform").is_dir() {
        return Ok(Value::Null);
    }
    let mut list = Step::new(
        crate::engine::StepKind::Prepare,
        terraform.binary.clone(),
        ["workspace", "list", "-no-color"]
            .map(String::from)
            .to_vec(),
        dir,
    );
    list.unset = vec!["TF_WORKSPACE"];
    let listed = run_step(&list, env, None)?;
    if listed.code != Some(0) || !terraform::lists(&listed.stdout, &terraform.stack) {
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
