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

use serde_json::Value;

use crate::deployment::Deployment;
use crate::engine::{Engines, OutputsSource, Step};
use crate::error::{Error, Problem, Result};
use crate::run::process::{self, run_blocking};

/// The stack outputs of project `i` on the stack of `engines` (`null` when it has none yet), as
/// its engine gives them (`Engine::outputs_source`).
pub fn outputs_of(
    deployment: &Deployment,
    engines: &Engines,
    i: usize,
    env: &BTreeMap<String, String>,
    show_secrets: bool,
) -> Result<Value> {
    let workspace = &deployment.files.workspace;
    let project = deployment.graph.project(i);
    let dir = workspace.project_dir(&project.path);
    let engine = project.engine_or(workspace.settings.engine);
    let kept = workspace.command_outputs_file(engines.stack(), &project.path);
    match engine.outputs_source(engines, &dir, &kept, show_secrets) {
        OutputsSource::Steps(mut steps) => {
            engines.keep_state(engine, &project.path, &dir, &mut steps);
            let Some(stdout) = read_steps(engine, &steps, env, engines.stack())? else {
                return Ok(Value::Null);
            };
            Ok(engine.parse_outputs(&stdout, show_secrets))
        }
        OutputsSource::Kept(file) => Ok(crate::files::read_to_string(&file)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null)),
        OutputsSource::NotDeployed => Ok(Value::Null),
        OutputsSource::Nothing => Ok(Value::Object(Default::default())),
    }
}

/// Runs `steps` in order; the last one's output, or `None` when the project has no stack
/// `stack` (a list that does not name it, a step that says it is missing).
fn read_steps(
    engine: crate::engine::EngineKind,
    steps: &[Step],
    env: &BTreeMap<String, String>,
    stack: &str,
) -> Result<Option<String>> {
    let mut stdout = String::new();
    for step in steps {
        let finished = run_step(step, env, engine.install_hint())?;
        if step.listed.is_some()
            && (finished.code != Some(0) || !engine.lists(&finished.stdout, stack))
        {
            return Ok(None);
        }
        if finished.code != Some(0) {
            if engine.is_missing_stack(stack, finished.code, &finished.stderr) {
                return Ok(None);
            }
            let said = process::last_error(&finished.stderr);
            let reason =
                said.map_or_else(|| format!("`{}` failed", step.display()), str::to_string);
            return Err(Error::config(
                Problem::new(reason).subject(step.cwd.display().to_string()),
            ));
        }
        stdout = finished.stdout;
    }
    Ok(Some(stdout))
}

/// Project `i`'s outputs with their secrets (in memory only: for the inputs that take them, for
/// what must be redacted), and which of them are secret — those its engine shows only when
/// asked (`show_secrets`). `None` when it has none, or they cannot be read.
pub fn with_secrets(
    deployment: &Deployment,
    engines: &Engines,
    i: usize,
    env: &BTreeMap<String, String>,
) -> Option<crate::run::inputs::Read> {
    let outputs = |secrets| outputs_of(deployment, engines, i, env, secrets);
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

/// Runs an outputs step to its end; a program missing from PATH is a configuration error, with
/// how to install it (`hint`, its engine's).
fn run_step(
    step: &Step,
    env: &BTreeMap<String, String>,
    hint: Option<&str>,
) -> Result<process::Finished> {
    run_blocking(step, env, None).map_err(|error| {
        if error.kind() == std::io::ErrorKind::NotFound {
            let hint = hint.map(str::to_string);
            Error::config(Problem::new(error.to_string()).maybe_hint(hint))
        } else {
            Error::Spawn {
                program: step.program.clone(),
                source: error,
            }
        }
    })
}
