//! `mara output [PROJECT]` (docs/commands.md, "output"): the stack outputs of every project of the
//! plan (or one), as JSON, read by `run::outputs`; secrets stay `[secret]` unless
//! `--show-secrets` — those the engine marks, those the ledger records as secret, and every
//! secret value mara knows wherever it appears (the stored ones, the environment's, the secret
//! outputs the printed projects take as inputs).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::cli::OutputArgs;
use crate::deployment::Deployment;
use crate::engine::pulumi::Pulumi;
use crate::error::{Error, Result};
use crate::run::outputs::{outputs_of, with_secrets};
use crate::run::redact::Redactor;
use crate::settings::Settings;
use crate::workspace::stack_config::StackConfigFile;

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
        let all = files.environment(settings);
        let state = crate::deployment::state::for_command(workspace, &settings.env, &all)?;
        let env = crate::run::prepare::engine_env_in(workspace, &all);
        let config = (files.config.clone())
            .unwrap_or_else(|| StackConfigFile::Missing(workspace.stack_config_file(&stack.name)));
        let engines =
            crate::run::plan::engines(&deployment, stack, &config, (&env, state.as_ref()));
        let pulumi = &engines.pulumi;
        let chosen: Vec<usize> = match &project {
            Some(name) => vec![graph.find(name).map_err(Error::usage)?],
            None => graph.order().to_vec(),
        };
        let mut all = Map::new();
        for &i in &chosen {
            let outputs = outputs_of(&deployment, &engines, i, &env, show_secrets)?;
            all.insert(graph.project(i).path.clone(), outputs);
        }
        // What mara knows to be secret is never printed, even as an output its engine does not
        // mark secret (a command project's, one equal to a stored secret, one the ledger
        // recorded secret, one a dependent took of it as an input).
        if !show_secrets {
            let mut known = known_secrets(settings, &deployment, pulumi, &env, &chosen);
            let recorded = recorded_secret(settings, &deployment, stack.name.as_str(), &chosen)?;
            known.extend(upstream_secrets(
                &deployment,
                &engines,
                &env,
                &chosen,
                &recorded,
            ));
            for (path, outputs) in all.iter_mut() {
                let names = recorded.get(path).into_iter().flatten();
                known.extend(mark_secret(outputs, names));
            }
            let redactor = Redactor::new(known);
            for outputs in all.values_mut() {
                *outputs = redacted(&redactor, std::mem::take(outputs));
            }
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

/// The names of the outputs the ledger records as secret (docs/formats.md, "Inputs"), of the
/// `chosen` projects and of those whose outputs they take, by project path.
fn recorded_secret(
    settings: &Settings,
    deployment: &Deployment,
    stack: &str,
    chosen: &[usize],
) -> Result<BTreeMap<String, BTreeSet<String>>> {
    let graph = &deployment.graph;
    let mut paths: Vec<String> = (chosen.iter().copied())
        .chain(upstreams(deployment, chosen))
        .map(|i| graph.project(i).path.clone())
        .collect();
    paths.sort_unstable();
    paths.dedup();
    let files = &deployment.files;
    let place = crate::ledger::place(&files.workspace, &files.environment(settings))?;
    let Some(ledger) = crate::ledger::open_existing(&place)? else {
        return Ok(BTreeMap::new());
    };
    let recorded = ledger.outputs(stack, &paths)?;
    Ok((recorded.into_iter())
        .map(|(path, r)| (path, r.outputs.secret))
        .collect())
}

/// The projects whose outputs the `chosen` projects take as inputs, and theirs, and so on.
fn upstreams(deployment: &Deployment, chosen: &[usize]) -> BTreeSet<usize> {
    let graph = &deployment.graph;
    let mut found = BTreeSet::new();
    let mut next: Vec<usize> = chosen.to_vec();
    while let Some(i) = next.pop() {
        for input in &graph.project(i).inputs {
            if let Ok(j) = graph.find(&input.from.target)
                && found.insert(j)
            {
                next.push(j);
            }
        }
    }
    found
}

/// The secret values of the outputs the `chosen` projects take as inputs, however far up (in
/// memory only): secret as their engine or the ledger (`recorded`) says, so that a dependent
/// that hands one on as a plain output does not show it.
fn upstream_secrets(
    deployment: &Deployment,
    engines: &crate::engine::Engines,
    env: &BTreeMap<String, String>,
    chosen: &[usize],
    recorded: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let mut secrets = Vec::new();
    for j in upstreams(deployment, chosen) {
        let Some((values, mut secret)) = with_secrets(deployment, engines, j, env) else {
            continue;
        };
        let path = &deployment.graph.project(j).path;
        secret.extend(recorded.get(path).into_iter().flatten().cloned());
        for name in &secret {
            if let Some(value) = values.get(name) {
                secrets.extend(crate::engine::secret_texts(value));
            }
        }
    }
    secrets
}

/// `outputs` with each of `names` shown as `[secret]`; returns the values it held, as text,
/// for the redactor.
fn mark_secret<'a>(outputs: &mut Value, names: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut secrets = Vec::new();
    let Value::Object(map) = outputs else {
        return secrets;
    };
    for name in names {
        if let Some(value) = map.get_mut(name) {
            secrets.extend(crate::engine::secret_texts(value));
            *value = Value::String("[secret]".into());
        }
    }
    secrets.retain(|s| s != "[secret]");
    secrets
}

/// Every secret value this workspace knows: the `MARA_SECRET_*` variables, a module's `TF_VAR_*`
/// secrets, the ledger's password, and what Pulumi stores for the stack (read back as a run reads
/// it, through the secrets project and the first of `chosen`).
fn known_secrets(
    settings: &Settings,
    deployment: &Deployment,
    pulumi: &Pulumi,
    env: &std::collections::BTreeMap<String, String>,
    chosen: &[usize],
) -> Vec<String> {
    let files = &deployment.files;
    let workspace = &files.workspace;
    let with_secrets = files.environment(settings);
    let mut known: Vec<String> = (with_secrets.iter())
        .filter(|(key, _)| key.starts_with(crate::configure::SECRET_PREFIX))
        .map(|(_, value)| value.clone())
        .collect();
    if let Ok(place) = crate::ledger::place(workspace, &with_secrets) {
        known.extend(place.password(&settings.env));
    }
    known.extend(crate::configure::serve_token(&settings.env));
    if let Ok(stack) = files.required_stack() {
        let stored = files.secrets_config(stack).unwrap_or_else(|_| {
            StackConfigFile::Missing(workspace.secrets_config_file(&stack.name))
        });
        let shared = (files.config.clone())
            .unwrap_or_else(|| StackConfigFile::Missing(workspace.stack_config_file(&stack.name)));
        let first = chosen
            .first()
            .map(|&i| workspace.project_dir(&deployment.graph.project(i).path));
        let secrets_dir = workspace.project_dir(&workspace.settings.secrets_project);
        let interrupt = crate::run::interrupt::Interrupt::default();
        let stored = crate::run::prepare::stored_secrets(
            pulumi,
            &interrupt,
            env,
            &secrets_dir,
            &stored,
            &shared,
            first.as_deref(),
        );
        known.extend(stored.into_values());
    }
    known.extend(crate::workspace::envfile::terraform_secrets(&with_secrets));
    known
}

/// `value` with every known secret in it replaced: in its strings, and a number or boolean
/// equal to one.
fn redacted(redactor: &Redactor, value: Value) -> Value {
    match value {
        Value::String(text) => Value::String(redactor.redact(&text)),
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|v| redacted(redactor, v)).collect())
        }
        // Keys too: an output may be keyed by a secret.
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (redactor.redact(&k), redacted(redactor, v)))
                .collect(),
        ),
        Value::Number(_) | Value::Bool(_) => {
            let text = value.to_string();
            match redactor.redact(&text) == text {
                true => value,
                false => Value::String("[secret]".into()),
            }
        }
        Value::Null => Value::Null,
    }
}
