//! `mara output [PROJECT]` (docs/commands.md, "output"): the stack outputs of every project of the
//! plan (or one), as JSON, read by `run::outputs`; secrets stay `[secret]` unless
//! `--show-secrets`.

use serde_json::{Map, Value};

use crate::cli::OutputArgs;
use crate::deployment::Deployment;
use crate::engine::pulumi::Pulumi;
use crate::error::{Error, Result};
use crate::run::outputs::outputs_of;
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
        let env = crate::run::prepare::engine_env_in(workspace, &files.environment(settings));
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
        // What mara knows to be secret is never printed, even as an output Pulumi does not mark
        // secret (a command project's, one equal to a stored secret).
        let redactor = match show_secrets {
            true => Redactor::default(),
            false => known_secrets(settings, &deployment, &pulumi, &env, &chosen),
        };
        let mut all = Map::new();
        for &i in &chosen {
            let outputs = outputs_of(&deployment, &pulumi, i, &env, show_secrets)?;
            all.insert(graph.project(i).path.clone(), redacted(&redactor, outputs));
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

/// Every secret value this workspace knows: the `MARA_SECRET_*` variables, a module's `TF_VAR_*`
/// secrets, the ledger's password, and what Pulumi stores for the stack (read back as a run reads
/// it, through the secrets project and the first of `chosen`).
fn known_secrets(
    settings: &Settings,
    deployment: &Deployment,
    pulumi: &Pulumi,
    env: &std::collections::BTreeMap<String, String>,
    chosen: &[usize],
) -> Redactor {
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
    Redactor::new(known)
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
