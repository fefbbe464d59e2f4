//! `mara config get | set | list` (SPEC §5): the shared stack configuration, and the secrets
//! project's own, read from their files and written through Pulumi (`pulumi config set`), so that
//! every value is stored exactly as Pulumi stores it and a secret is encrypted by Pulumi with the
//! value on standard input.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::cli::{ConfigCommand, OutputFormat};
use crate::configure::{self, Secret};
use crate::engine::pulumi::Pulumi;
use crate::error::{Error, Problem, Result};
use crate::graph::{ExecutionGraph, Plan, Selection};
use crate::provider::schema::is_namespaced;
use crate::run::process::{last_error, run_blocking};
use crate::settings::Settings;
use crate::workspace::Workspace;
use crate::workspace::envfile;
use crate::workspace::stack::StackName;
use crate::workspace::stack_config::{ConfigValue, StackConfigFile};

pub fn run(settings: &Settings, command: ConfigCommand) -> Result<()> {
    let workspace = super::workspace(settings)?;
    config(settings, &workspace, command).map_err(|e| e.relative_to(&workspace.root))
}

/// The two configuration files of a stack, and how to reach Pulumi for them.
struct Files {
    stack: StackName,
    shared: PathBuf,
    secrets: PathBuf,
    env: BTreeMap<String, String>,
}

fn files(settings: &Settings, workspace: &Workspace) -> Result<Files> {
    let context = super::stack_context(settings, workspace)?;
    let stack = context.required_stack(workspace)?;
    let mut env = envfile::merged_environment(&settings.env, context.env_file.as_ref());
    super::run::resolve_backend_url(&mut env, &workspace.root);
    configure::strip_secret_variables(&mut env);
    Ok(Files {
        shared: workspace.stack_config_file(&stack.name),
        secrets: workspace.secrets_config_file(&stack.name),
        stack: stack.name,
        env,
    })
}

fn pulumi(workspace: &Workspace, files: &Files) -> Pulumi {
    Pulumi {
        binary: workspace.settings.pulumi.binary.clone(),
        stack: files.stack.to_string(),
        shared_config: files.shared.clone(),
        secrets_project: workspace.settings.secrets_project.clone(),
        secrets_provider: workspace.settings.pulumi.secrets_provider.clone(),
        color: false,
    }
}

fn config(settings: &Settings, workspace: &Workspace, command: ConfigCommand) -> Result<()> {
    let files = files(settings, workspace)?;
    match command {
        ConfigCommand::Get { key, show_secrets } => {
            check_key(&key)?;
            let (file, value) = find(&files, &key)?.ok_or_else(|| {
                Error::config(
                    Problem::new(format!(
                        "`{key}` is not set in {} nor in {}",
                        workspace.display(&files.shared).display(),
                        workspace.display(&files.secrets).display()
                    ))
                    .hint(format!("set it with `mara config set {key} VALUE`")),
                )
            })?;
            let text = match value {
                Some(value) => plain(&value),
                None if !show_secrets => "[secret]".to_string(),
                None => decrypt(workspace, settings, &files, &file, &key)?,
            };
            crate::ui::print(&format!("{text}\n"))
        }
        ConfigCommand::Set {
            key,
            value,
            secret,
            path,
        } => {
            check_key(key.split(['.', '[']).next().unwrap_or(&key))?;
            let value = match value {
                Some(value) => value,
                None => read_value(settings, &key, secret)?,
            };
            let pulumi = pulumi(workspace, &files);
            let (dir, step) = if secret {
                let dir = workspace.project_dir(&workspace.settings.secrets_project);
                let step = pulumi.set_secret_step(&dir, &key, false);
                (dir, step)
            } else {
                let dir = first_project_dir(settings, workspace)?;
                let step = pulumi.set_plain_step(&dir, &key, &value, path);
                (dir, step)
            };
            let stdin = secret.then_some(value.as_str());
            for (step, stdin) in [(pulumi.select_step(&dir), None), (step, stdin)] {
                let finished = run_blocking(&step, &files.env, stdin).map_err(Error::Output)?;
                if finished.code != Some(0) {
                    let reason = last_error(&finished.stderr).unwrap_or("pulumi failed");
                    let reason = crate::run::redact::Redactor::new([value.clone()]).redact(reason);
                    return Err(Error::config(
                        Problem::new(reason).subject(format!("`{key}`")),
                    ));
                }
            }
            Ok(())
        }
        ConfigCommand::List => {
            let mut rows: Vec<(String, Option<Value>, PathBuf)> = Vec::new();
            for file in [&files.shared, &files.secrets] {
                if let Some(config) = StackConfigFile::load(file)?.config() {
                    for key in config.values.keys() {
                        let value = match config.get(key) {
                            Some(ConfigValue::Plain(v)) => Some(v.clone()),
                            _ => None,
                        };
                        rows.push((key.clone(), value, workspace.display(file).into_owned()));
                    }
                }
            }
            rows.sort_by(|a, b| a.0.cmp(&b.0));
            let text = match settings.output {
                OutputFormat::Json => {
                    let map: serde_json::Map<String, Value> = rows
                        .iter()
                        .map(|(k, v, f)| {
                            let entry = match v {
                                Some(v) => json!({"value": v, "secret": false, "file": f}),
                                None => json!({"value": "[secret]", "secret": true, "file": f}),
                            };
                            (k.clone(), entry)
                        })
                        .collect();
                    format!(
                        "{}\n",
                        serde_json::to_string_pretty(&Value::Object(map)).expect("JSON")
                    )
                }
                OutputFormat::Human => {
                    let table: Vec<[String; 3]> = rows
                        .iter()
                        .map(|(k, v, f)| {
                            [
                                k.clone(),
                                v.as_ref().map(plain).unwrap_or_else(|| "[secret]".into()),
                                f.display().to_string(),
                            ]
                        })
                        .collect();
                    let headers = ["KEY", "VALUE", "FILE"];
                    let widths = crate::ui::column_widths(headers, &table);
                    let style = settings.stdout_style;
                    let mut out = format!(
                        "{}\n",
                        style.bold(&format!(
                            "{}  {}  {}",
                            crate::ui::pad(headers[0], widths[0]),
                            crate::ui::pad(headers[1], widths[1]),
                            headers[2]
                        ))
                    );
                    for [k, v, f] in &table {
                        out.push_str(&format!(
                            "{}  {}  {f}\n",
                            crate::ui::pad(k, widths[0]),
                            crate::ui::pad(v, widths[1])
                        ));
                    }
                    out
                }
            };
            crate::ui::print(&text)
        }
    }
}

fn check_key(key: &str) -> Result<()> {
    if is_namespaced(key) {
        Ok(())
    } else {
        Err(Error::usage(
            Problem::new(format!("`{key}` has no namespace"))
                .hint("keys are `namespace:key` (e.g. `aws:region`): in the shared file a bare key would mean another key to every project"),
        ))
    }
}

/// Where `key` is set: the file, and its value (`None` for a secret).
fn find(files: &Files, key: &str) -> Result<Option<(PathBuf, Option<Value>)>> {
    for file in [&files.shared, &files.secrets] {
        if let Some(config) = StackConfigFile::load(file)?.config() {
            match config.get(key) {
                Some(ConfigValue::Plain(value)) => {
                    return Ok(Some((file.clone(), Some(value.clone()))));
                }
                Some(ConfigValue::Secret) => return Ok(Some((file.clone(), None))),
                None => {}
            }
        }
    }
    Ok(None)
}

fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A secret's value, decrypted by Pulumi (`config get` always decrypts).
fn decrypt(
    workspace: &Workspace,
    settings: &Settings,
    files: &Files,
    file: &Path,
    key: &str,
) -> Result<String> {
    let shared = file == files.shared;
    let dir = if shared {
        first_project_dir(settings, workspace)?
    } else {
        workspace.project_dir(&workspace.settings.secrets_project)
    };
    let mut args: Vec<String> = [
        "--non-interactive",
        "config",
        "get",
        key,
        "--stack",
        files.stack.as_str(),
    ]
    .map(String::from)
    .to_vec();
    if shared {
        args.extend(["--config-file".into(), files.shared.display().to_string()]);
    }
    let step = crate::engine::Step::new(
        crate::engine::StepKind::Outputs,
        workspace.settings.pulumi.binary.clone(),
        args,
        dir,
    );
    let finished = run_blocking(&step, &files.env, None).map_err(Error::Output)?;
    if finished.code != Some(0) {
        let reason = last_error(&finished.stderr).unwrap_or("pulumi config get failed");
        return Err(Error::config(
            Problem::new(reason.to_string()).subject(format!("`{key}`")),
        ));
    }
    Ok(finished.stdout.trim_end_matches('\n').to_string())
}

/// A value not given on the command line: standard input when it is not a terminal, else a
/// question (hidden, twice, for a secret).
fn read_value(settings: &Settings, key: &str, secret: bool) -> Result<String> {
    if !std::io::stdin().is_terminal() {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(Error::Output)?;
        let text = text
            .strip_suffix('\n')
            .map(|t| t.strip_suffix('\r').unwrap_or(t))
            .unwrap_or(&text)
            .to_string();
        return Ok(text);
    }
    if !settings.interactive {
        return Err(Error::usage(
            Problem::new(format!("no value for `{key}`"))
                .hint("give it as an argument, or on standard input"),
        ));
    }
    let failed = |e: dialoguer::Error| Error::Output(std::io::Error::other(e));
    if secret {
        configure::ask_secret(key, None)
            .map(|s: Secret| s.expose().to_string())
            .map_err(failed)
    } else {
        dialoguer::Input::<String>::new()
            .with_prompt(key)
            .interact_text()
            .map_err(failed)
    }
}

/// A project directory where Pulumi can reach the shared configuration: the first project of the
/// provider's plan.
fn first_project_dir(settings: &Settings, workspace: &Workspace) -> Result<PathBuf> {
    let registry = super::registry(workspace)?;
    let (provider, _) = super::choose_provider(settings, workspace, &registry)?;
    let graph = ExecutionGraph::build(&provider)?;
    let plan = Plan::select(&graph, &Selection::default())?;
    let first = plan
        .order()
        .first()
        .map(|&i| graph.project(i).path.clone())
        .ok_or_else(|| {
            Error::config(Problem::new(format!(
                "provider {} has no projects",
                provider.name
            )))
        })?;
    Ok(workspace.project_dir(&first))
}
