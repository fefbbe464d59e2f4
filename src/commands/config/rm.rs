//! `mara config rm KEY [--path]`: the key taken out of whichever file sets it — of the shared
//! configuration by mara, in place, nothing else changed; of the secrets project by Pulumi
//! (`pulumi config rm`), whose file it is.

use super::{Files, find, pulumi, run_step, target};
use crate::deployment::StackFiles;
use crate::error::{Error, Problem, Result};
use crate::run::process::last_error;
use crate::workspace::stack_config::{EditError, StackConfigFile};

pub(super) fn rm(stack_files: &StackFiles, files: &Files, key: &str, path: bool) -> Result<()> {
    let workspace = &stack_files.workspace;
    let target = target(key, path)?;
    let found = find(stack_files, &target)?;
    if found.is_empty() {
        let hint = match !path && key.contains(['.', '[']) {
            true => format!("a path into a value is removed with `mara config rm --path {key}`"),
            false => "`mara config list` shows the keys that are set".to_string(),
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
    let mut text = String::new();
    for (file, _) in found {
        if file == files.shared {
            let shared = StackConfigFile::load(&file)?;
            let edited = shared.without(&target).map_err(|error| {
                let problem = match error {
                    EditError::Shape(message) => Problem::new(message),
                    EditError::Layout(reason) => {
                        Problem::new(format!("cannot remove this key and nothing else: {reason}"))
                            .hint("edit the file by hand")
                    }
                };
                let at = shared.config().map(|c| c.location_of_path(&target));
                let problem = problem.subject(format!("`{target}`"));
                Error::config(match at {
                    Some(at) => problem.at(at),
                    None => problem,
                })
            })?;
            crate::files::rewrite(&file, &edited).map_err(|e| Error::write(&file, e))?;
        } else {
            let dir = workspace.project_dir(&workspace.settings.secrets_project);
            let step = pulumi(workspace, files).rm_step(&dir, &target.to_string(), path);
            let finished = run_step(&step, &files.env, None)?;
            if finished.code != Some(0) {
                let reason = last_error(&finished.stderr).unwrap_or("pulumi config rm failed");
                return Err(Error::config(
                    Problem::new(reason.to_string()).subject(format!("`{target}`")),
                ));
            }
        }
        text.push_str(&format!(
            "Removed `{target}` from {}.\n",
            workspace.display(&file).display()
        ));
    }
    crate::ui::print(&text)
}
