//! `mara unlock --engine` (docs/commands.md, "cancel, unlock"): the locks a run's engines may have
//! kept on their stacks — killed by a second interruption, running when the run was abandoned, or
//! stopped by such a lock — cleared by each engine's own cancel, run as the run ran it: in the
//! project's directory, with the workspace's environment (where the backend and its passphrase
//! are), never the ledger's password or `MARA_SECRET_*`.

use std::collections::BTreeMap;

use crate::configure;
use crate::deployment::Deployment;
use crate::engine::EngineKind;
use crate::error::{Error, Problem, Result};
use crate::ledger::RunRecord;
use crate::run::process::{self, run_blocking};
use crate::settings::Settings;
use crate::workspace::stack_config::StackConfigFile;

/// Clears what `last` (the stack's last run, or the one holding it) left: the lines to show, and
/// how many engines' cancels failed.
pub(super) fn clear(
    settings: &Settings,
    stack: &str,
    last: Option<&RunRecord>,
) -> Result<(String, usize)> {
    let Some(last) = last else {
        return Ok((
            format!("No run of stack {stack} is recorded: no engine lock to clear.\n"),
            0,
        ));
    };
    let last = last.clone().as_seen();
    let left = last.engine_locks_left();
    if left.is_empty() {
        let text = format!("Run {} left no engine lock to clear.\n", last.run_id);
        return Ok((text, 0));
    }
    let deployment = Deployment::load(settings)?;
    let files = &deployment.files;
    let workspace = &files.workspace;
    let resolved = files.required_stack()?;
    let mut env: BTreeMap<String, String> = files.environment(settings);
    configure::strip_secret_variables(&mut env);
    crate::ledger::keep_from_engines(workspace, &mut env);
    let config = (files.config.clone())
        .unwrap_or_else(|| StackConfigFile::Missing(workspace.stack_config_file(&resolved.name)));
    let pulumi = crate::run::plan::pulumi(&deployment, resolved, &config, false);
    let mut text = format!(
        "Run {} left {} {} whose engine may still hold the stack's own lock:\n",
        last.run_id,
        left.len(),
        crate::error::plural(left.len(), "project", "projects")
    );
    let mut failed = 0;
    for project in left {
        let path = &project.path;
        let Ok(i) = deployment.graph.find(path) else {
            text.push_str(&format!(
                "[{path}] not a project of provider {}: not cleared\n",
                deployment.provider.name
            ));
            continue;
        };
        let dir = workspace.project_dir(path);
        let said = match deployment
            .graph
            .project(i)
            .engine_or(workspace.settings.engine)
        {
            EngineKind::Pulumi => {
                let step = pulumi.cancel_step(&dir);
                let finished = run_blocking(&step, &env, None).map_err(|error| {
                    Error::config(Problem::new(format!(
                        "cannot run `{}`: {error}",
                        step.program
                    )))
                })?;
                match finished.code {
                    Some(0) => last_line(&finished.stdout)
                        .unwrap_or("its lock is cleared")
                        .to_string(),
                    _ => {
                        failed += 1;
                        let why = process::last_error(&finished.stderr).unwrap_or("it failed");
                        format!("`pulumi cancel` failed: {why}")
                    }
                }
            }
            engine @ (EngineKind::Terraform | EngineKind::Tofu) => format!(
                "{} names its lock's id in the error of the next run that meets it: clear it with `{} force-unlock LOCK_ID` in {}",
                engine.as_str(),
                engine.as_str(),
                workspace.display(&dir).display()
            ),
            EngineKind::Command | EngineKind::Kubectl => "its engine keeps no lock".to_string(),
        };
        text.push_str(&format!("[{path}] {said}\n"));
    }
    Ok((text, failed))
}

fn last_line(text: &str) -> Option<&str> {
    text.lines().map(str::trim).rfind(|l| !l.is_empty())
}
