//! `mara config set KEY [VALUE] [--path] [--secret]`: a plain value typed by the provider and
//! written in place in the shared configuration, or a secret encrypted by Pulumi into the secrets
//! project; what is likely a mistake (a key the provider spells otherwise, a path written as a
//! key) is said before anything is written.

use std::io::{IsTerminal, Read};
use std::path::Path;

use serde_json::Value;

use super::{Files, both, declared, declared_secret, find, pulumi, run_step, target};
use crate::configure;
use crate::deployment::known_keys::KnownKeys;
use crate::deployment::{Deployment, StackFiles};
use crate::error::{Error, Location, Problem, Result};
use crate::provider::ConfigKind;
use crate::run::process::last_error;
use crate::settings::Settings;
use crate::ui::prompt::{Prompter, TerminalPrompter};
use crate::workspace::config_path::{ConfigPath, Found};
use crate::workspace::pulumi_project::PROJECT_FILES;
use crate::workspace::stack_config::{EditError, StackConfigFile};

pub(super) fn set(
    settings: &Settings,
    stack_files: &StackFiles,
    files: &Files,
    key: &str,
    value: Option<String>,
    secret: bool,
    path: bool,
) -> Result<()> {
    let workspace = &stack_files.workspace;
    let target = target(key, path)?;
    if secret && value.is_some() {
        return Err(secret_on_the_command_line(settings, key, path));
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
    unmarked_path(deployment.as_ref(), stack_files, key, path)?;
    if secret {
        secrets_project_there(workspace, deployment.as_ref())?;
    }
    if let (None, Some(deployment)) = (spec, &deployment) {
        likely_typo(settings, stack_files, deployment, &target);
    }
    if let Some(deployment) = &deployment
        && !secret
    {
        never_in_plain_text(settings, workspace, deployment, &target, key)?;
    }
    let raw = match value {
        Some(value) => value,
        None => read_value(settings, key, secret)?,
    };
    let typed = configure::value_to_set(spec, &target, &raw).map_err(|message| {
        // A secret's value is not shown, even in a message about it.
        let message = match secret {
            true => crate::run::redact::Redactor::new([raw.clone()]).redact(&message),
            false => message,
        };
        let mut problem = Problem::new(message).subject(format!("`{key}`"));
        if let (Some(spec), Some(d)) = (spec, &deployment) {
            let at = shown_at(workspace, &spec.declared_at);
            let kind = spec.kind.as_str();
            let name = &d.provider.name;
            problem = problem.hint(format!(
                "provider {name} declares it (kind \"{kind}\") at {at}"
            ));
        }
        Error::usage(problem)
    })?;
    elsewhere(stack_files, &target, secret)?;
    if secret {
        set_secret(stack_files, files, &target, path, &raw)
    } else {
        let was_first_run = stack_files.config.as_ref().is_none_or(|c| c.is_first_run());
        set_plain(stack_files, &target, &typed, &raw)?;
        if let Some(deployment) = &deployment {
            if was_first_run {
                first_run_note(stack_files, deployment, settings);
            }
            out_of_bounds(settings, stack_files, deployment, &target, &typed);
        }
        Ok(())
    }
}

/// A key the provider declares a secret, set without `--secret`: refused, with the command that
/// stores it encrypted.
fn never_in_plain_text(
    settings: &Settings,
    workspace: &crate::workspace::Workspace,
    deployment: &Deployment,
    target: &ConfigPath,
    key: &str,
) -> Result<()> {
    let Some(at) = declared_secret(&deployment.provider, target) else {
        return Ok(());
    };
    let at = shown_at(workspace, &at);
    Err(Error::usage(
        Problem::new("is a secret: it is never stored in plain text")
            .subject(format!("`{key}`"))
            .hint(format!(
                "`{}`, its value on standard input (provider {} declares it a secret at {at})",
                settings.again(&format!("config set --secret {key}")),
                deployment.provider.name
            )),
    ))
}

/// Where a provider declares something, its file shown from the workspace root.
fn shown_at(workspace: &crate::workspace::Workspace, at: &Location) -> Location {
    Location {
        file: workspace.display(&at.file).into_owned(),
        ..at.clone()
    }
}

/// After a value is set: the provider's entries whose bounds it now breaks (`at_least`,
/// `at_most`), this key's or another's bounded by it, as a warning — the next key set may mend
/// it (raise `max_size`, then `desired_capacity`); `up` and `validate` refuse it meanwhile.
fn out_of_bounds(
    settings: &Settings,
    stack_files: &StackFiles,
    deployment: &Deployment,
    target: &ConfigPath,
    typed: &Value,
) {
    if target.is_nested() {
        return;
    }
    let mut values = (stack_files.config.as_ref())
        .and_then(|c| c.config().map(|c| c.values.clone()))
        .unwrap_or_default();
    values.insert(target.key.clone(), typed.clone());
    let key = target.key.as_str();
    for spec in &deployment.provider.config {
        let bounded_by = |b: &Option<String>| b.as_deref() == Some(key);
        if spec.key != key && !bounded_by(&spec.at_least) && !bounded_by(&spec.at_most) {
            continue;
        }
        let Some(value) = values.get(&spec.key) else {
            continue;
        };
        if let Err(why) = configure::check_bounds(spec, value, &values) {
            let warning = format!(
                "warning: `{}` {why}: `{}` and `{}` refuse it until one of them changes",
                spec.key,
                settings.again("up"),
                settings.again("validate")
            );
            crate::ui::errln!("{}", settings.stderr_style.yellow(&warning));
        }
    }
}

/// A dotted key without `--path` that names a path — the provider names it so, or the file has
/// the mapping it leads into: setting it literally would add a key no project reads, beside it.
fn unmarked_path(
    deployment: Option<&Deployment>,
    stack_files: &StackFiles,
    key: &str,
    path: bool,
) -> Result<()> {
    if path || !key.contains(['.', '[']) {
        return Ok(());
    }
    let Ok(as_path) = ConfigPath::parse(key) else {
        return Ok(());
    };
    let refused = |reason: String| {
        Err(Error::usage(
            Problem::new(reason)
                .subject(format!("`{key}`"))
                .hint(format!("mara config set --path {key} …")),
        ))
    };
    if let Some(deployment) = deployment {
        let provider = &deployment.provider;
        let named = (provider.config.iter().map(|c| c.key.as_str())).chain(
            provider
                .projects
                .iter()
                .flat_map(|p| p.required_config.iter().map(String::as_str)),
        );
        if named
            .filter_map(|k| ConfigPath::parse(k).ok())
            .any(|p| p.is_nested() && p == as_path)
        {
            return refused(format!(
                "provider {} names this as a path into `{}`; without --path it would be a key of its own",
                provider.name, as_path.key
            ));
        }
    }
    for file in both(stack_files)? {
        let Some(config) = file.config() else {
            continue;
        };
        if let Some(Value::Object(_) | Value::Array(_)) = config.values.get(&as_path.key) {
            return refused(format!(
                "`{}` is a structured value in {}: without --path this would be a key of its own beside it",
                as_path.key,
                stack_files.workspace.display(file.path()).display()
            ));
        }
    }
    Ok(())
}

/// A key that no file sets and nothing is known to read (`KnownKeys`: the provider's keys, the
/// projects' `Pulumi.yaml` declarations, the Terraform modules' variables): likely a typo, said
/// as a warning with the known key it is spelled like (`app:replica` for `app:replicas`), or the
/// module that reads every key of its namespace. The key is set all the same: a Pulumi program
/// may read a key it does not declare.
fn likely_typo(
    settings: &Settings,
    stack_files: &StackFiles,
    deployment: &Deployment,
    target: &ConfigPath,
) {
    if find(stack_files, target).is_ok_and(|found| !found.is_empty()) {
        return;
    }
    let known = KnownKeys::of(deployment);
    let key = &target.key;
    if known.knows(key) {
        return;
    }
    let warning = match (known.near(key), known.sole_reader(key)) {
        (Some(near), _) => format!(
            "warning: no project declares or reads `{key}`: did you mean `{near}`? (set as given)"
        ),
        (None, Some(module)) => {
            let (namespace, name) = key.split_once(':').unwrap_or_default();
            format!(
                "warning: no project reads `{key}`: {module}, which reads namespace `{namespace}`, has no variable `{name}` (set as given)"
            )
        }
        (None, None) => return,
    };
    crate::ui::errln!("{}", settings.stderr_style.yellow(&warning));
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
        "note: {} had no configuration: now that it has, the stack's first `{}` will not ask provider {}'s questions; set {} as well, or they stay unset",
        stack_files.workspace.display(shared.path()).display(),
        settings.again("up"),
        deployment.provider.name,
        unset.join(", ")
    );
    crate::ui::errln!("{}", settings.stderr_style.yellow(&note));
}

/// A plain value, written by mara into the shared configuration in place: nothing else in the
/// file changes (docs/decisions.md, "Typed, nested configuration"), and a value set back keeps
/// the type the file gives it (`configure::as_the_file_types`).
fn set_plain(
    stack_files: &StackFiles,
    target: &ConfigPath,
    value: &Value,
    raw: &str,
) -> Result<()> {
    let workspace = &stack_files.workspace;
    let stack = stack_files.required_stack()?;
    let path = workspace.stack_config_file(&stack.name);
    // The file as it is when the edit is made: another `config set` may have just written it.
    StackConfigFile::edit(&path, |file| {
        let at = || match file.config() {
            Some(config) => config.location_of_path(target),
            None => crate::error::Location::file(&path),
        };
        // A value set back keeps the type the file gives it, whatever the file is now.
        let current = match file.config().map(|c| c.find(target)) {
            Some(Found::Value(current)) => Some(current),
            _ => None,
        };
        let value = configure::as_the_file_types(current, value.clone(), raw);
        let text = file.with_value(target, &value).map_err(|error| {
            let problem = match error {
                EditError::Shape(message) => Problem::new(message),
                EditError::Layout(reason) => Problem::new(format!(
                    "cannot change this value and nothing else: {reason}"
                ))
                .hint(format!("edit the file by hand: `{target}` = {raw}")),
            };
            Error::config(problem.at(at()).subject(format!("`{target}`")))
        })?;
        Ok(Some(text))
    })
    .map(drop)
}

/// A secret given as an argument: refused, since on a command line it would be in the shell's
/// history and in `ps` for anyone.
fn secret_on_the_command_line(settings: &Settings, key: &str, path: bool) -> Error {
    let path = if path { "--path " } else { "" };
    Error::usage(
        Problem::new("a secret is never given on the command line")
            .subject(format!("`{key}`"))
            .hint(format!(
                "give it on standard input (`{} < file`), or type it at the prompt",
                settings.again(&format!("config set {path}--secret {key}"))
            )),
    )
}

/// A secret is kept by the secrets project (a Pulumi project: Pulumi encrypts it into its stack
/// configuration): one the workspace does not have — a Terraform workspace, say — is said
/// before anything is asked, rather than met as Pulumi failing to start there.
fn secrets_project_there(
    workspace: &crate::workspace::Workspace,
    deployment: Option<&crate::deployment::Deployment>,
) -> Result<()> {
    let project = &workspace.settings.secrets_project;
    let dir = workspace.project_dir(project);
    let why = match deployment {
        Some(d) if d.graph.lookup(project).is_none() => {
            format!("provider {} has no project `{project}`", d.provider.name)
        }
        _ if !(PROJECT_FILES.iter()).any(|f| dir.join(f).is_file()) => {
            format!(
                "there is no Pulumi project in {}",
                workspace.display(&dir).display()
            )
        }
        _ => return Ok(()),
    };
    Err(Error::config(
        Problem::new(format!(
            "`--secret` keeps the value in the secrets project `{project}`, encrypted by Pulumi, and {why}"
        ))
        .hint("a Terraform module reads a secret from the environment: give it as TF_VAR_<variable> from your secret store (docs/commands.md, \"Secrets\"); or set `secrets_project` in mara.toml to a Pulumi project of the workspace"),
    ))
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
