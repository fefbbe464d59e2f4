//! `mara config get | set | list` (docs/commands.md, "config"): the shared stack configuration,
//! and the secrets
//! project's own, read from their files and written through Pulumi (`pulumi config set`), so that
//! every value is stored exactly as Pulumi stores it and a secret is encrypted by Pulumi with the
//! value on standard input.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::cli::ConfigCommand;
use crate::configure;
use crate::deployment::StackFiles;
use crate::engine::Step;
use crate::engine::pulumi::Pulumi;
use crate::error::{Error, Problem, Result};
use crate::provider::schema::is_namespaced;
use crate::run::process::{last_error, run_blocking};
use crate::settings::{OutputFormat, Settings};
use crate::ui::prompt::{Prompter, TerminalPrompter};
use crate::workspace::Workspace;
use crate::workspace::stack::StackName;
use crate::workspace::stack_config::{ConfigValue, StackConfigFile};

pub fn run(settings: &Settings, command: ConfigCommand) -> Result<()> {
    let stack_files = StackFiles::load(settings)?;
    let root = stack_files.workspace.root.clone();
    config(settings, &stack_files, command).map_err(|e| e.relative_to(&root))
}

/// The two configuration files of a stack, and how to reach Pulumi for them.
struct Files {
    stack: StackName,
    shared: PathBuf,
    secrets: PathBuf,
    env: BTreeMap<String, String>,
}

fn files(settings: &Settings, stack_files: &StackFiles) -> Result<Files> {
    let workspace = &stack_files.workspace;
    let stack = stack_files.required_stack()?;
    let mut env = stack_files.environment(settings);
    configure::strip_secret_variables(&mut env);
    Ok(Files {
        shared: workspace.stack_config_file(&stack.name),
        secrets: workspace.secrets_config_file(&stack.name),
        stack: stack.name.clone(),
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

fn config(settings: &Settings, stack_files: &StackFiles, command: ConfigCommand) -> Result<()> {
    let workspace = &stack_files.workspace;
    let files = files(settings, stack_files)?;
    match command {
        ConfigCommand::Get { key, show_secrets } => {
            check_key(&key)?;
            let (file, value) = find(stack_files, &key)?.ok_or_else(|| {
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
                None => decrypt(settings, stack_files, &files, &file, &key)?,
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
            if secret && value.is_some() {
                // On a command line it would be in the shell's history and in `ps` for anyone.
                return Err(Error::usage(
                    Problem::new("a secret is never given on the command line")
                        .subject(format!("`{key}`"))
                        .hint(format!(
                            "give it on standard input (`mara config set --secret {key} < file`), or type it at the prompt"
                        )),
                ));
            }
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
                let dir = first_project_dir(settings, stack_files)?;
                let step = pulumi.set_plain_step(&dir, &key, &value, path);
                (dir, step)
            };
            let stdin = secret.then_some(value.as_str());
            for (step, stdin) in [(pulumi.select_step(&dir), None), (step, stdin)] {
                let finished = run_step(&step, &files.env, stdin)?;
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
            for file in both(stack_files)? {
                if let Some(config) = file.config() {
                    for key in config.values.keys() {
                        let value = match config.get(key) {
                            Some(ConfigValue::Plain(v)) => Some(v.clone()),
                            _ => None,
                        };
                        let shown = workspace.display(file.path()).into_owned();
                        rows.push((key.clone(), value, shown));
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

/// The shared configuration as loaded, then the secrets project's, read now.
fn both(stack_files: &StackFiles) -> Result<[StackConfigFile; 2]> {
    let stack = stack_files.required_stack()?;
    let shared = match &stack_files.config {
        Some(config) => config.clone(),
        None => StackConfigFile::Missing(stack_files.workspace.stack_config_file(&stack.name)),
    };
    Ok([shared, stack_files.secrets_config(stack)?])
}

/// Where `key` is set: the file, and its value (`None` for a secret).
fn find(stack_files: &StackFiles, key: &str) -> Result<Option<(PathBuf, Option<Value>)>> {
    for file in both(stack_files)? {
        if let Some(config) = file.config() {
            match config.get(key) {
                Some(ConfigValue::Plain(value)) => {
                    return Ok(Some((file.path().to_path_buf(), Some(value.clone()))));
                }
                Some(ConfigValue::Secret) => return Ok(Some((file.path().to_path_buf(), None))),
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
    settings: &Settings,
    stack_files: &StackFiles,
    files: &Files,
    file: &Path,
    key: &str,
) -> Result<String> {
    let workspace = &stack_files.workspace;
    let shared = file == files.shared;
    let dir = if shared {
        first_project_dir(settings, stack_files)?
    } else {
        workspace.project_dir(&workspace.settings.secrets_project)
    };
    let step = pulumi(workspace, files).get_step(&dir, key, shared);
    let finished = run_step(&step, &files.env, None)?;
    if finished.code != Some(0) {
        let reason = last_error(&finished.stderr).unwrap_or("pulumi config get failed");
        return Err(Error::config(
            Problem::new(reason.to_string()).subject(format!("`{key}`")),
        ));
    }
    Ok(finished.stdout.trim_end_matches('\n').to_string())
}

/// Runs a configuration step to its end.
fn run_step(
    step: &Step,
    env: &BTreeMap<String, String>,
    stdin: Option<&str>,
) -> Result<crate::run::process::Finished> {
    run_blocking(step, env, stdin).map_err(|source| Error::Spawn {
        program: step.program.clone(),
        source,
    })
}

/// A value not given on the command line: standard input when it is not a terminal, else a
/// question (hidden, twice, for a secret).
fn read_value(settings: &Settings, key: &str, secret: bool) -> Result<String> {
    if !std::io::stdin().is_terminal() {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| Error::read(Path::new("standard input"), e))?;
        let text = text
            .strip_suffix('\n')
            .map(|t| t.strip_suffix('\r').unwrap_or(t))
            .unwrap_or(&text)
            .to_string();
        if text.is_empty() {
            return Err(Error::usage(
                Problem::new("standard input was empty")
                    .subject(format!("`{key}`"))
                    .hint("give the value on standard input; an empty value is never set from an empty input"),
            ));
        }
        return Ok(text);
    }
    if !settings.interactive {
        return Err(Error::usage(
            Problem::new(format!("no value for `{key}`"))
                .hint("give it as an argument, or on standard input"),
        ));
    }
    let prompter: &mut dyn Prompter = &mut TerminalPrompter;
    if secret {
        configure::ask_secret(prompter, key, None).map(|s| s.expose().to_string())
    } else {
        prompter.text(key, None, &|answer| {
            if answer.is_empty() {
                Err("a value is needed".into())
            } else {
                Ok(())
            }
        })
    }
}

/// A project directory where Pulumi can reach the shared configuration: the first project of the
/// provider's plan.
fn first_project_dir(settings: &Settings, stack_files: &StackFiles) -> Result<PathBuf> {
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
