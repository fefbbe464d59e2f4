//! `mara config get | set | list` (docs/commands.md, "config"): the shared stack configuration
//! and the secrets project's own, read from their files. A plain value is typed by the provider's
//! `[[config]]` entry (or as Pulumi's `config set` types it) and written by mara in place, so
//! nothing else in the file changes; a secret is encrypted by Pulumi (`pulumi config set
//! --secret`, the value on standard input) into the secrets project.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::cli::ConfigCommand;
use crate::configure;
use crate::deployment::{Deployment, StackFiles};
use crate::engine::Step;
use crate::engine::pulumi::Pulumi;
use crate::error::{Error, Problem, Result};
use crate::provider::schema::is_namespaced;
use crate::provider::{ConfigKind, ConfigSpec, Provider};
use crate::run::process::{last_error, run_blocking};
use crate::settings::{OutputFormat, Settings};
use crate::ui::prompt::{Prompter, TerminalPrompter};
use crate::workspace::Workspace;
use crate::workspace::config_path::{ConfigPath, Found, redacted};
use crate::workspace::stack::StackName;
use crate::workspace::stack_config::{EditError, StackConfigFile};

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
    crate::ledger::keep_from_engines(workspace, &mut env);
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
        ConfigCommand::Get {
            key,
            show_secrets,
            path,
        } => {
            let target = target(&key, path)?;
            let found = find(stack_files, &target)?;
            let Some((file, value)) = found.first().cloned() else {
                // A dotted key asked for without --path is most likely a path.
                let hint = if !path && key.contains(['.', '[']) {
                    format!("a path into a value is read with `mara config get --path {key}`")
                } else {
                    let set = if path { "set --path" } else { "set" };
                    format!("set it with `mara config {set} {key} VALUE`")
                };
                return Err(Error::config(
                    Problem::new(format!(
                        "`{key}` is set neither in {} nor in {}",
                        workspace.display(&files.shared).display(),
                        workspace.display(&files.secrets).display()
                    ))
                    .hint(hint),
                ));
            };
            let opened = |file: &Path, value: Option<Value>| -> Result<Value> {
                match value {
                    Some(value) if !show_secrets || redacted(&value) == value => {
                        Ok(redacted(&value))
                    }
                    None if !show_secrets => Ok(Value::String("[secret]".into())),
                    // A value that holds secrets comes back as JSON; a secret, as its text.
                    Some(_) => {
                        let text = decrypt(settings, stack_files, &files, file, &target)?;
                        Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
                    }
                    None => Ok(Value::String(decrypt(
                        settings,
                        stack_files,
                        &files,
                        file,
                        &target,
                    )?)),
                }
            };
            let mut shown = opened(&file, value)?;
            // A structured value split between the files (its secrets set with --path
            // --secret): both parts, as one.
            if let Some((other, value)) = found.get(1).cloned()
                && shown.is_object()
                && value.as_ref().is_some_and(Value::is_object)
            {
                merge(&mut shown, opened(&other, value)?);
            }
            let text = match settings.output {
                OutputFormat::Json => {
                    let secret = found
                        .iter()
                        .any(|(_, v)| v.as_ref().is_none_or(|v| redacted(v) != *v));
                    let file = workspace.display(&file).into_owned();
                    let entry = json!({"key": target.to_string(), "value": shown, "secret": secret, "file": file});
                    serde_json::to_string_pretty(&entry).expect("JSON")
                }
                OutputFormat::Human => plain(&shown),
            };
            crate::ui::print(&format!("{text}\n"))
        }
        ConfigCommand::Set {
            key,
            value,
            secret,
            path,
        } => {
            let target = target(&key, path)?;
            if secret && value.is_some() {
                // On a command line it would be in the shell's history and in `ps` for anyone.
                let path = if path { "--path " } else { "" };
                return Err(Error::usage(
                    Problem::new("a secret is never given on the command line")
                        .subject(format!("`{key}`"))
                        .hint(format!(
                            "give it on standard input (`mara config set {path}--secret {key} < file`), or type it at the prompt"
                        )),
                ));
            }
            // The provider's `[[config]]` entries type the value and check it before anything is
            // asked or written. A secret needs no provider (it is a string, kept in the secrets
            // project): without one it goes unchecked.
            let deployment = match stack_files.clone().into_deployment(settings) {
                Ok(deployment) => Some(deployment),
                Err(_) if secret => None,
                Err(error) => return Err(error),
            };
            let spec = deployment
                .as_ref()
                .and_then(|d| declared(&d.provider, &target));
            if let Some(deployment) = &deployment {
                unmarked_path(deployment, &key, path)?;
            }
            if let Some(spec) = spec
                && spec.kind == ConfigKind::Secret
                && !secret
            {
                return Err(Error::usage(
                    Problem::new("is a secret: it is never stored in plain text")
                        .subject(format!("`{key}`"))
                        .hint(format!(
                            "`mara config set --secret {key}` (provider {} declares it kind \"secret\")",
                            deployment.as_ref().map_or("", |d| d.provider.name.as_str())
                        )),
                ));
            }
            let raw = match value {
                Some(value) => value,
                None => read_value(settings, &key, secret)?,
            };
            let typed = configure::value_to_set(spec, &target, &raw).map_err(|message| {
                // A secret's value is not shown, even in a message about it.
                let message = match secret {
                    true => crate::run::redact::Redactor::new([raw.clone()]).redact(&message),
                    false => message,
                };
                let mut problem = Problem::new(message).subject(format!("`{key}`"));
                if let (Some(spec), Some(d)) = (spec, &deployment) {
                    problem = problem.hint(format!(
                        "provider {} declares it (kind \"{}\") at {}",
                        d.provider.name,
                        spec.kind.as_str(),
                        crate::error::Location {
                            file: workspace.display(&spec.declared_at.file).into_owned(),
                            ..spec.declared_at.clone()
                        }
                    ));
                }
                Error::usage(problem)
            })?;
            elsewhere(stack_files, &target, secret)?;
            if secret {
                set_secret(stack_files, &files, &target, path, &raw)
            } else {
                let was_first_run = stack_files.config.as_ref().is_none_or(|c| c.is_first_run());
                set_plain(stack_files, &target, &typed, &raw)?;
                if was_first_run && let Some(deployment) = &deployment {
                    first_run_note(stack_files, deployment, settings);
                }
                Ok(())
            }
        }
        ConfigCommand::List => {
            // (key, value as shown, whether it is or holds a secret, file)
            let mut rows: Vec<(String, Value, bool, PathBuf)> = Vec::new();
            for file in both(stack_files)? {
                if let Some(config) = file.config() {
                    for (key, value) in &config.values {
                        let shown = redacted(value);
                        let secret = shown != *value;
                        let path = workspace.display(file.path()).into_owned();
                        rows.push((key.clone(), shown, secret, path));
                    }
                }
            }
            // By key; for a key in both files, the shared file's first (the sort is stable).
            rows.sort_by(|a, b| a.0.cmp(&b.0));
            let text = match settings.output {
                OutputFormat::Json => {
                    let mut map = serde_json::Map::new();
                    for (key, value, secret, file) in rows {
                        match map.get_mut(&key) {
                            // A structured value split between the files (a secret set with
                            // --path --secret): one entry, its secret parts as [secret].
                            Some(Value::Object(entry)) => {
                                merge(entry.entry("value").or_insert(Value::Null), value);
                                entry.insert("secret".into(), Value::Bool(true));
                                entry.insert("secrets_file".into(), json!(file));
                            }
                            _ => {
                                map.insert(
                                    key,
                                    json!({"value": value, "secret": secret, "file": file}),
                                );
                            }
                        }
                    }
                    format!(
                        "{}\n",
                        serde_json::to_string_pretty(&Value::Object(map)).expect("JSON")
                    )
                }
                OutputFormat::Human => {
                    let table: Vec<[String; 3]> = rows
                        .iter()
                        .map(|(k, v, _, f)| [k.clone(), cell(&plain(v)), f.display().to_string()])
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

/// The key a command names: with `--path`, a path into a value (Pulumi's syntax); either way
/// namespaced.
fn target(key: &str, path: bool) -> Result<ConfigPath> {
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
fn declared<'p>(provider: &'p Provider, target: &ConfigPath) -> Option<&'p ConfigSpec> {
    provider
        .config
        .iter()
        .find(|spec| ConfigPath::parse(&spec.key).is_ok_and(|p| p == *target))
}

/// A dotted key without `--path` that the provider names as a path: setting it literally would
/// add a key no project reads.
fn unmarked_path(deployment: &Deployment, key: &str, path: bool) -> Result<()> {
    if path || !key.contains(['.', '[']) {
        return Ok(());
    }
    let named = deployment
        .provider
        .config
        .iter()
        .map(|c| c.key.as_str())
        .chain(
            deployment
                .provider
                .projects
                .iter()
                .flat_map(|p| p.required_config.iter().map(String::as_str)),
        );
    let as_path = ConfigPath::parse(key).ok();
    if named
        .filter_map(|k| ConfigPath::parse(k).ok())
        .any(|p| p.is_nested() && Some(&p) == as_path.as_ref())
    {
        return Err(Error::usage(
            Problem::new(format!(
                "provider {} names this as a path into `{}`; without --path it would be a key of its own",
                deployment.provider.name,
                as_path.map(|p| p.key).unwrap_or_default()
            ))
            .subject(format!("`{key}`"))
            .hint(format!("mara config set --path {key} …")),
        ));
    }
    Ok(())
}

/// The same path set in the other file — in plain text in the shared configuration for a
/// secret, as a secret in the secrets project for a plain value — is refused: which one a run
/// would use is anyone's guess.
fn elsewhere(stack_files: &StackFiles, target: &ConfigPath, secret: bool) -> Result<()> {
    let [shared, stored] = both(stack_files)?;
    let other = if secret { &shared } else { &stored };
    let Some(config) = other.config() else {
        return Ok(());
    };
    if matches!(config.find(target), Found::Missing) {
        return Ok(());
    }
    let (is, flag) = match secret {
        true => ("in plain text", ""),
        false => ("as a secret", " --secret"),
    };
    let file = stack_files.workspace.display(other.path()).into_owned();
    Err(Error::config(
        Problem::new(format!(
            "is set {is} in {}: the same key in both files would leave it unclear which one a run uses",
            file.display()
        ))
        .at(config.location_of_path(target))
        .subject(format!("`{target}`"))
        .hint(format!(
            "remove it from {} first, then `mara config set{flag}` it again",
            file.display()
        )),
    ))
}

/// After a first `config set` on a stack without configuration: the file now exists, so `up`
/// will not ask the provider's questions; which keys that leaves unset.
fn first_run_note(stack_files: &StackFiles, deployment: &Deployment, settings: &Settings) {
    let Ok(stack) = stack_files.required_stack() else {
        return;
    };
    let written = stack_files.workspace.stack_config_file(&stack.name);
    let Ok(shared) = StackConfigFile::load(&written) else {
        return;
    };
    let unset: Vec<&str> = deployment
        .provider
        .config
        .iter()
        .filter(|spec| spec.kind != ConfigKind::Secret)
        .filter(|spec| {
            let path =
                ConfigPath::parse(&spec.key).unwrap_or_else(|_| ConfigPath::literal(&spec.key));
            shared
                .config()
                .is_none_or(|c| matches!(c.find(&path), Found::Missing))
        })
        .map(|spec| spec.key.as_str())
        .collect();
    if unset.is_empty() {
        return;
    }
    let note = format!(
        "note: {} had no configuration: now that it has, the stack's first `mara up` will not ask provider {}'s questions; set {} as well, or they stay unset",
        stack_files.workspace.display(shared.path()).display(),
        deployment.provider.name,
        unset.join(", ")
    );
    eprintln!("{}", settings.stderr_style.yellow(&note));
}

/// A plain value, written by mara into the shared configuration in place: nothing else in the
/// file changes (docs/decisions.md, "Typed, nested configuration").
fn set_plain(
    stack_files: &StackFiles,
    target: &ConfigPath,
    value: &Value,
    raw: &str,
) -> Result<()> {
    let workspace = &stack_files.workspace;
    let stack = stack_files.required_stack()?;
    let file = match &stack_files.config {
        Some(config) => config.clone(),
        None => StackConfigFile::Missing(workspace.stack_config_file(&stack.name)),
    };
    let path = file.path().to_path_buf();
    let at = || match file.config() {
        Some(config) => config.location_of_path(target),
        None => crate::error::Location::file(&path),
    };
    let text = file.with_value(target, value).map_err(|error| {
        let problem = match error {
            EditError::Shape(message) => Problem::new(message),
            EditError::Layout(reason) => Problem::new(format!(
                "cannot change this value and nothing else: {reason}"
            ))
            .hint(format!("edit the file by hand: `{target}` = {raw}")),
        };
        Error::config(problem.at(at()).subject(format!("`{target}`")))
    })?;
    crate::files::rewrite(&path, &text).map_err(|e| Error::write(&path, e))
}

/// A secret, encrypted by Pulumi into the secrets project's stack configuration, the value on
/// standard input (`pulumi config set --secret [--path]`).
fn set_secret(
    stack_files: &StackFiles,
    files: &Files,
    target: &ConfigPath,
    path: bool,
    value: &str,
) -> Result<()> {
    let workspace = &stack_files.workspace;
    let pulumi = pulumi(workspace, files);
    let dir = workspace.project_dir(&workspace.settings.secrets_project);
    let key = target.to_string();
    let step = pulumi.set_secret_step(&dir, &key, path, false);
    for (step, stdin) in [(pulumi.select_step(&dir), None), (step, Some(value))] {
        let finished = run_step(&step, &files.env, stdin)?;
        if finished.code != Some(0) {
            let reason = last_error(&finished.stderr).unwrap_or("pulumi failed");
            let reason = crate::run::redact::Redactor::new([value.to_string()]).redact(reason);
            return Err(Error::config(
                Problem::new(reason).subject(format!("`{key}`")),
            ));
        }
    }
    Ok(())
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

/// Where `target` is set — the shared file first, then the secrets project's — and its value
/// there (`None` for a secret).
fn find(stack_files: &StackFiles, target: &ConfigPath) -> Result<Vec<(PathBuf, Option<Value>)>> {
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
fn merge(into: &mut Value, value: Value) {
    match (into, value) {
        (Value::Object(into), Value::Object(value)) => {
            for (key, inner) in value {
                merge(into.entry(key).or_insert(Value::Null), inner);
            }
        }
        (into, value) => *into = value,
    }
}

/// A value in a table cell: on one line, and not wider than a screen.
fn cell(text: &str) -> String {
    const WIDTH: usize = 60;
    let line = text.replace('\r', "\\r").replace('\n', "\\n");
    match line.char_indices().nth(WIDTH) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line,
    }
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
    target: &ConfigPath,
) -> Result<String> {
    let key = &target.to_string();
    let workspace = &stack_files.workspace;
    let shared = file == files.shared;
    let dir = if shared {
        first_project_dir(settings, stack_files)?
    } else {
        workspace.project_dir(&workspace.settings.secrets_project)
    };
    let step = pulumi(workspace, files).get_step(&dir, key, target.is_nested(), shared);
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
