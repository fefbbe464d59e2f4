//! `mara output [PROJECT]`: the stack outputs of every project of the plan (or one), as JSON.
//!
//! Secrets stay `[secret]` unless `--show-secrets`: mara asks Pulumi for them the same way, so it
//! never holds a secret it was not asked to show.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::cli::OutputArgs;
use crate::engine::{Step, StepKind};
use crate::error::{Error, Problem, Result};
use crate::graph::{ExecutionGraph, Plan, Selection};
use crate::provider::EngineKind;
use crate::settings::Settings;
use crate::workspace::envfile;

pub fn run(settings: &Settings, args: OutputArgs) -> Result<()> {
    let workspace = super::workspace(settings)?;
    let result = (|| {
        let registry = super::registry(&workspace)?;
        let (provider, _) = super::choose_provider(settings, &workspace, &registry)?;
        let graph = ExecutionGraph::build(&provider)?;
        let plan = Plan::select(&graph, &Selection::default())?;
        let context = super::stack_context(settings, &workspace)?;
        let stack = context.required_stack(&workspace)?;
        let mut env = envfile::merged_environment(&settings.env, context.env_file.as_ref());
        super::run::resolve_backend_url(&mut env, &workspace.root);
        let chosen: Vec<usize> = match &args.project {
            Some(name) => vec![graph.find(name).map_err(Error::usage)?],
            None => plan.order().to_vec(),
        };
        let mut all = Map::new();
        for &i in &chosen {
            let project = graph.project(i);
            let engine = project.engine_or(workspace.settings.engine);
            if matches!(engine, EngineKind::Terraform | EngineKind::Tofu) {
                let outputs = terraform_outputs(
                    engine.as_str(),
                    &workspace.project_dir(&project.path),
                    stack.name.as_str(),
                    &env,
                    args.show_secrets,
                )?;
                all.insert(project.path.clone(), outputs);
                continue;
            }
            if engine == EngineKind::Command {
                let file = workspace.command_outputs_file(stack.name.as_str(), &project.path);
                let outputs = std::fs::read_to_string(file)
                    .ok()
                    .and_then(|t| serde_json::from_str(&t).ok())
                    .unwrap_or(Value::Null);
                all.insert(project.path.clone(), outputs);
                continue;
            }
            let outputs = read_outputs(
                &workspace.settings.pulumi.binary,
                &workspace.project_dir(&project.path),
                stack.name.as_str(),
                args.show_secrets,
                &env,
            )?;
            all.insert(project.path.clone(), outputs);
        }
        let value = match (&args.project, chosen.as_slice()) {
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

/// A Terraform module's outputs in the stack's workspace (`{}` once destroyed; `null` before its
/// first run).
fn terraform_outputs(
    binary: &str,
    dir: &std::path::Path,
    stack: &str,
    env: &BTreeMap<String, String>,
    show_secrets: bool,
) -> Result<Value> {
    if !dir.join(".terraform").is_dir() {
        return Ok(Value::Null);
    }
    let args = ["output", "-json", "-no-color"].map(String::from).to_vec();
    let mut step = Step::new(StepKind::Outputs, binary, args, dir);
    step.env.insert("TF_WORKSPACE".into(), stack.into());
    let output = run_step(&step, env, None)?;
    if output.code == Some(0) {
        Ok(crate::engine::terraform::outputs(
            &output.stdout,
            show_secrets,
        ))
    } else {
        let reason =
            crate::run::process::last_error(&output.stderr).unwrap_or("terraform output failed");
        Err(Error::config(
            Problem::new(reason.to_string()).subject(dir.display().to_string()),
        ))
    }
}

/// One project's outputs; `null` when its stack does not exist (nothing deployed yet).
fn read_outputs(
    binary: &str,
    dir: &std::path::Path,
    stack: &str,
    show_secrets: bool,
    env: &BTreeMap<String, String>,
) -> Result<Value> {
    if !dir.is_dir() {
        return Ok(Value::Null);
    }
    let mut args = vec![
        "--non-interactive",
        "stack",
        "output",
        "--json",
        "--stack",
        stack,
    ];
    if show_secrets {
        args.push("--show-secrets");
    }
    let args = args.into_iter().map(String::from).collect();
    let output = run_step(
        &Step::new(StepKind::Outputs, binary, args, dir),
        env,
        Some("install the Pulumi CLI, or set `binary` under [pulumi] in mara.toml"),
    )?;
    match output.code {
        Some(0) => Ok(serde_json::from_str(&output.stdout).unwrap_or(Value::Null)),
        // No such stack: the project has not been deployed.
        Some(6) => Ok(Value::Null),
        _ => {
            let stderr = &output.stderr;
            let reason =
                crate::run::process::last_error(stderr).unwrap_or("pulumi stack output failed");
            if stderr.contains("no stack named") {
                return Ok(Value::Null);
            }
            Err(Error::config(
                Problem::new(reason.to_string()).subject(dir.display().to_string()),
            ))
        }
    }
}

/// Runs an outputs step to its end; a program missing from PATH is a configuration error, with
/// `hint` when there is one.
fn run_step(
    step: &Step,
    env: &BTreeMap<String, String>,
    hint: Option<&str>,
) -> Result<crate::run::process::Finished> {
    crate::run::process::run_blocking(step, env, None).map_err(|error| {
        if error.kind() == std::io::ErrorKind::NotFound {
            Error::config(Problem::new(error.to_string()).maybe_hint(hint.map(String::from)))
        } else {
            Error::Output(error)
        }
    })
}
