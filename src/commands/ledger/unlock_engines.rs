//! `mara unlock --engine` (docs/commands.md, "cancel, unlock"): the locks a run's engines may have
//! kept on their stacks — killed by a second interruption, running when the run was abandoned, or
//! stopped by such a lock — cleared by each engine's own cancel, run as the run ran it: in the
//! project's directory, with the workspace's environment (where the backend and its passphrase
//! are), never the ledger's password or `MARA_SECRET_*`.

use crate::deployment::Deployment;
use crate::engine::LockClearing;
use crate::error::{Error, Problem, Result};
use crate::ledger::RunRecord;
use crate::run::process::{self, run_blocking};
use crate::settings::Settings;
use crate::workspace::stack_config::StackConfigFile;

/// What `unlock --engine` will clear, found and checked before anything is cleared: the
/// deployment loaded, the engines' environment made, and the Pulumi CLI found.
pub(super) enum Clearing {
    /// Nothing to clear, with what to say.
    Nothing(String),
    /// The projects a run left that may hold their engines' locks.
    Left(Box<Left>),
}

/// The run that left engines' locks, and what clearing them needs.
pub(super) struct Left {
    run: RunRecord,
    deployment: Deployment,
    env: std::collections::BTreeMap<String, String>,
    /// `state = "ledger"`: the server the stacks are kept in.
    state: Option<crate::engine::state::StateServer>,
}

impl Clearing {
    /// What `last` (the stack's last run, or the one holding it) left to clear, checked: a
    /// deployment that does not load or a Pulumi CLI that cannot be found fails here, before
    /// mara's own lock is touched.
    pub(super) fn of(settings: &Settings, stack: &str, last: Option<&RunRecord>) -> Result<Self> {
        let Some(last) = last else {
            return Ok(Clearing::Nothing(format!(
                "No run of stack {stack} is recorded: no engine lock to clear.\n"
            )));
        };
        let run = last.clone().as_seen();
        if run.engine_locks_left().is_empty() {
            let text = format!("Run {} left no engine lock to clear.\n", run.run_id);
            return Ok(Clearing::Nothing(text));
        }
        let deployment = Deployment::load(settings)?;
        let files = &deployment.files;
        let workspace = &files.workspace;
        files.required_stack()?;
        let all = files.environment(settings);
        let state = crate::deployment::state::for_command(workspace, &settings.env, &all)?;
        let env = crate::run::prepare::engine_env_in(workspace, &all);
        // The engines mara clears the locks of must be there to run, before any is cleared.
        let programs = crate::engine::Programs {
            pulumi: &workspace.settings.pulumi.binary,
        };
        let clearing: std::collections::BTreeMap<String, Option<&str>> = (run
            .engine_locks_left()
            .iter())
        .filter_map(|p| deployment.graph.lookup(&p.path))
        .map(|i| deployment.graph.project(i))
        .filter_map(|p| {
            let engine = p.engine_or(workspace.settings.engine);
            let clears = engine.lock_clearing(&workspace.project_dir(&p.path), "");
            let program = engine.program(&programs)?;
            matches!(clears, LockClearing::ByMara(_)).then(|| (program, engine.install_hint()))
        })
        .collect();
        for (binary, hint) in &clearing {
            if let Err(error) = process::resolve_program(binary, &env, &workspace.root) {
                let problem = Problem::new(format!("cannot run `{binary}`: {error}"));
                return Err(Error::config(problem.maybe_hint(hint.map(str::to_string))));
            }
        }
        Ok(Clearing::Left(Box::new(Left {
            run,
            deployment,
            env,
            state,
        })))
    }

    /// Clears what was found: the lines to show, and how many engines' cancels failed.
    pub(super) fn clear(self) -> Result<(String, usize)> {
        let Left {
            run,
            deployment,
            env,
            state,
        } = match self {
            Clearing::Nothing(text) => return Ok((text, 0)),
            Clearing::Left(left) => *left,
        };
        let left = run.engine_locks_left();
        let files = &deployment.files;
        let workspace = &files.workspace;
        let resolved = files.required_stack()?;
        let config = (files.config.clone()).unwrap_or_else(|| {
            StackConfigFile::Missing(workspace.stack_config_file(&resolved.name))
        });
        let engines =
            crate::run::plan::engines(&deployment, resolved, &config, (&env, state.as_ref()));
        let unlock = String::new();
        let mut text = format!(
            "Run {} left {} {} whose engine may still hold the stack's own lock:\n",
            run.run_id,
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
            let engine = (deployment.graph.project(i)).engine_or(workspace.settings.engine);
            // Said with the directory as the workspace names it.
            let shown = workspace.display(&dir).into_owned();
            let said = match (
                engine.lock_clearing(&shown, &unlock),
                (engine.cancel_step(&engines, &dir))
                    .map(|step| engines.keeping_state(engine, path, &dir, step)),
            ) {
                (LockClearing::ByMara(_), Some(step)) => {
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
                            format!("`{}` failed: {why}", step.display())
                        }
                    }
                }
                (LockClearing::ByHand(how), _) => how,
                _ => "its engine keeps no lock".to_string(),
            };
            text.push_str(&format!("[{path}] {said}\n"));
        }
        Ok((text, failed))
    }
}

fn last_line(text: &str) -> Option<&str> {
    text.lines().map(str::trim).rfind(|l| !l.is_empty())
}
