//! `mara config rm KEY [--path]`: the key taken out of whichever file sets it — of the shared
//! configuration by mara, in place, nothing else changed; of the secrets project by Pulumi
//! (`pulumi config rm`), whose file it is.

use super::{Files, find, pulumi, run_step, target};
use crate::deployment::StackFiles;
use crate::error::{Error, Problem, Result};
use std::path::Path;

use crate::run::process::{last_error, resolve_program};
use crate::settings::Settings;
use crate::workspace::config_path::ConfigPath;
use crate::workspace::stack_config::{EditError, StackConfigFile};

pub(super) fn rm(
    settings: &Settings,
    stack_files: &StackFiles,
    files: &Files,
    key: &str,
    path: bool,
) -> Result<()> {
    let workspace = &stack_files.workspace;
    let target = target(key, path)?;
    let found = find(stack_files, &target)?;
    if found.is_empty() {
        let hint = match !path && key.contains(['.', '[']) {
            true => format!(
                "a path into a value is removed with `{}`",
                settings.again(&format!("config rm --path {key}"))
            ),
            false => format!(
                "`{}` shows the keys that are set",
                settings.again("config list")
            ),
        };
        return Err(Error::config(
            Problem::new(format!(
                "`{key}` is set neither in {} nor in {}",
                workspace.display(&files.shared).display(),
                workspace.display(&files.secrets).display()
            ))
            .hint(hint),
        ));
    }
    // Each removal is checked before either is made: the shared file's edit made (not written),
    // Pulumi found for the secrets project's. Pulumi's, which can still fail, goes first; each
    // is said as it is done.
    let mut edited = None;
    let mut secrets = None;
    for (file, _) in found {
        match file == files.shared {
            true => edited = Some(without(&StackConfigFile::load(&file)?, &target)?),
            false => {
                let dir = workspace.project_dir(&workspace.settings.secrets_project);
                let step = pulumi(workspace, files).rm_step(&dir, &target.to_string(), path);
                resolve_program(&step.program, &files.env, &dir).map_err(|error| {
                    Error::config(
                        Problem::new(format!("cannot run `pulumi config rm`: {error}"))
                            .subject(format!("`{target}`")),
                    )
                })?;
                secrets = Some((file, step));
            }
        }
    }
    let removed = |file: &Path| {
        let shown = workspace.display(file).display().to_string();
        crate::ui::note(settings, &format!("Removed `{target}` from {shown}.\n"))
    };
    if let Some((file, step)) = secrets {
        let finished = run_step(&step, &files.env, None)?;
        if finished.code != Some(0) {
            let reason = last_error(&finished.stderr).unwrap_or("pulumi config rm failed");
            return Err(Error::config(
                Problem::new(reason.to_string()).subject(format!("`{target}`")),
            ));
        }
        removed(&file)?;
    }
    if edited.is_some() {
        // Made again on the file as it is now, under its lock (another edit may have come).
        let file = &files.shared;
        StackConfigFile::edit(file, |now| without(now, &target).map(Some))?;
        removed(file)?;
    }
    Ok(())
}

/// The shared file's text without `target`, or why it cannot be removed alone.
fn without(shared: &StackConfigFile, target: &ConfigPath) -> Result<String> {
    shared.without(target).map_err(|error| {
        let problem = match error {
            EditError::Shape(message) => Problem::new(message),
            EditError::Layout(reason) => {
                Problem::new(format!("cannot remove this key and nothing else: {reason}"))
                    .hint("edit the file by hand")
            }
        };
        let at = shared.config().map(|c| c.location_of_path(target));
        let problem = problem.subject(format!("`{target}`"));
        Error::config(match at {
            Some(at) => problem.at(at),
            None => problem,
        })
    })
}
