//! `mara config get KEY [--path] [--show-secrets]`: one key's value, from whichever file sets it
//! (a secret as `[secret]`, or decrypted by Pulumi).

use std::path::Path;

use serde_json::{Value, json};

use super::{
    Files, declared_secret, find, first_project_dir, merge, plain, pulumi, run_step, target,
};
use crate::deployment::StackFiles;
use crate::error::{Error, Problem, Result};
use crate::run::process::last_error;
use crate::settings::{OutputFormat, Settings};
use crate::workspace::config_path::{ConfigPath, redacted};

pub(super) fn get(
    settings: &Settings,
    stack_files: &StackFiles,
    files: &Files,
    key: &str,
    show_secrets: bool,
    path: bool,
) -> Result<()> {
    let workspace = &stack_files.workspace;
    let target = target(key, path)?;
    let found = find(stack_files, &target)?;
    let Some((file, value)) = found.first().cloned() else {
        return Err(not_set(settings, stack_files, files, key, &target, path));
    };
    let opened = |file: &Path, value: Option<Value>| -> Result<Value> {
        match value {
            Some(value) if !show_secrets || redacted(&value) == value => Ok(redacted(&value)),
            None if !show_secrets => Ok(Value::String("[secret]".into())),
            // A value that holds secrets comes back as JSON; a secret, as its text.
            Some(_) => {
                let text = decrypt(settings, stack_files, files, file, &target)?;
                Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
            }
            None => Ok(Value::String(decrypt(
                settings,
                stack_files,
                files,
                file,
                &target,
            )?)),
        }
    };
    let mut shown = opened(&file, value)?;
    // A key's own value that is no string is what the file says, as Pulumi keeps it (`0755`,
    // not 493; `1e3`, not 1000.0); a value inside a structured one is as Pulumi decodes it.
    if !target.is_nested()
        && !shown.is_string()
        && !shown.is_object()
        && !shown.is_array()
        && let Some(raw) = written(&file, &target)
    {
        shown = Value::String(raw);
    }
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
            let entry =
                json!({"key": target.to_string(), "value": shown, "secret": secret, "file": file});
            serde_json::to_string_pretty(&entry).expect("JSON")
        }
        OutputFormat::Human => plain(&shown),
    };
    crate::ui::print(&format!("{text}\n"))
}

/// A key set in neither file, with how to set it (or read it as a path).
fn not_set(
    settings: &Settings,
    stack_files: &StackFiles,
    files: &Files,
    key: &str,
    target: &ConfigPath,
    path: bool,
) -> Error {
    let workspace = &stack_files.workspace;
    // A dotted key asked for without --path is most likely a path.
    let hint = if !path && key.contains(['.', '[']) {
        format!(
            "a path into a value is read with `{}`",
            settings.again(&format!("config get --path {key}"))
        )
    } else {
        let secret = (stack_files.clone().into_deployment(settings).ok())
            .is_some_and(|d| declared_secret(&d.provider, target).is_some());
        let set = match (secret, path) {
            (true, _) => format!("config set --secret {key}"),
            (false, true) => format!("config set --path {key} VALUE"),
            (false, false) => format!("config set {key} VALUE"),
        };
        let stdin = if secret {
            ", its value on standard input"
        } else {
            ""
        };
        format!("set it with `{}`{stdin}", settings.again(&set))
    };
    Error::config(
        Problem::new(format!(
            "`{key}` is set neither in {} nor in {}",
            workspace.display(&files.shared).display(),
            workspace.display(&files.secrets).display()
        ))
        .hint(hint),
    )
}

/// A top-level key's plain value as `file` writes it.
fn written(file: &Path, target: &ConfigPath) -> Option<String> {
    use crate::workspace::yaml_nodes::{Seg, nodes};
    let text = crate::workspace::stack_config::StackConfigFile::load(file).ok()?;
    let path = [Seg::Key("config".into()), Seg::Key(target.key.clone())];
    let node = nodes(text.text())
        .ok()?
        .into_iter()
        .find(|n| n.path == path)?;
    (!node.raw.starts_with(['\'', '"', '|', '>', '*', '&', '!'])).then_some(node.raw)
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
