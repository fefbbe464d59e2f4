//! Which of the selected projects a run takes (docs/commands.md, "up, preview, refresh, destroy"):
//! `--resume` takes those the last run of the operation did not complete, `--changed` those whose
//! inputs changed since their last successful `up`. Both read the ledger and decide; what they
//! decided is returned as data for the command to say.

use std::collections::BTreeMap;

use crate::deployment::StackFiles;
use crate::engine::Operation;
use crate::error::{Error, Problem, Result};
use crate::fingerprint::{self, Change};
use crate::graph::{ExecutionGraph, Plan, Selection};
use crate::ledger::{Ledger, ProjectRecord, RunRecord};
use crate::status::RunStatus;
use crate::workspace::Workspace;
use crate::workspace::stack::ResolvedStack;

/// What `--resume` found.
#[derive(Debug)]
pub enum Resume<'g> {
    /// The last run (`run_id`) completed: nothing to resume.
    Completed { run_id: String },
    /// Run `plan`: the projects of run `run_id` (which ended `status`) that did not complete,
    /// `never_started` of them never started.
    Projects {
        run_id: String,
        status: RunStatus,
        plan: Plan<'g>,
        never_started: usize,
    },
}

/// `--resume`: every project of the last run of `operation` on the stack that did not
/// succeed, started or not (a run records all it selected as it starts). Refused, saying why,
/// when that run cannot be resumed as it was (`resumable`), or when the provider (`provider`)
/// no longer has some of its projects — resuming the rest and saying ✓ would leave them undone.
pub fn resume<'g>(
    graph: &'g ExecutionGraph,
    ledger: Option<&dyn Ledger>,
    stack: &ResolvedStack,
    (operation, provider): (Operation, &str),
) -> Result<Resume<'g>> {
    let ledger = ledger.ok_or_else(|| nothing_to_resume(operation, stack))?;
    let last = (ledger.last_run(stack.name.as_str(), operation)?)
        .ok_or_else(|| nothing_to_resume(operation, stack))?
        .as_seen();
    resumable(ledger, &last, stack)?;
    let left: Vec<&ProjectRecord> = (last.projects.iter())
        .filter(|p| !p.status.is_success())
        .collect();
    let gone: Vec<&str> = (left.iter())
        .filter(|p| graph.lookup(&p.path).is_none())
        .map(|p| p.path.as_str())
        .collect();
    if !gone.is_empty() {
        let made_with = match last.provider == provider {
            true => String::new(),
            false => format!(
                " (run {} was made with provider `{}`)",
                last.run_id, last.provider
            ),
        };
        return Err(Error::config(
            Problem::new(format!(
                "run {} did not complete {}, which provider `{provider}` does not have{made_with}: --resume cannot run {}",
                last.run_id,
                gone.join(", "),
                if gone.len() == 1 { "it" } else { "them" },
            ))
            .hint("run them with the provider that has them (`--provider`), or run the whole selection again without --resume"),
        ));
    }
    if left.is_empty() {
        return Ok(Resume::Completed {
            run_id: last.run_id,
        });
    }
    let never_started = (left.iter()).filter(|p| p.started.is_none()).count();
    let plan = Plan::select(
        graph,
        &Selection {
            only: left.iter().map(|p| p.path.clone()).collect(),
            ..Selection::default()
        },
    )?;
    Ok(Resume::Projects {
        run_id: last.run_id,
        status: last.status,
        plan,
        never_started,
    })
}

fn nothing_to_resume(operation: Operation, stack: &ResolvedStack) -> Error {
    Error::usage(Problem::new(format!(
        "no earlier {operation} on stack {} to resume",
        stack.name
    )))
}

/// Whether run `last` can be resumed as it was: not while it runs (exit 5), not when a run of
/// the opposite operation came after it (a destroy after the `up`, an `up` after the destroy:
/// resuming would deploy on a torn-down stack, or destroy what was deployed anew), not when it
/// applied approved plans (its other projects' approval cannot be checked once part of it is
/// applied), and not when its record does not say which of its projects never started.
fn resumable(ledger: &dyn Ledger, last: &RunRecord, stack: &ResolvedStack) -> Result<()> {
    if last.status == RunStatus::Running {
        return Err(Error::Locked(Box::new(
            Problem::new(format!(
                "run {} is still running (pid {} on {}, since {}): there is nothing to resume yet",
                last.run_id, last.pid, last.host, last.started
            ))
            .hint("wait for it to end, or stop it with `mara cancel`; then resume it"),
        )));
    }
    let opposite = match last.operation {
        Operation::Up => Some(Operation::Destroy),
        Operation::Destroy => Some(Operation::Up),
        _ => None,
    };
    if let Some(opposite) = opposite
        && let Some(since) = ledger.last_run(stack.name.as_str(), opposite)?
        && since.started > last.started
    {
        return Err(Error::config(
            Problem::new(format!(
                "run {} ({} {}) was followed by run {} ({} {}, {}): resuming the first would undo what the second did",
                last.run_id, last.operation, last.status, since.run_id, since.operation, since.status, since.started
            ))
            .hint(format!("run `mara {}` again, without --resume", last.operation)),
        ));
    }
    if applied_saved_plans(&last.command) {
        return Err(Error::config(
            Problem::new(format!(
                "run {} applied approved plans (`--plans`): what it left is not applied without an approval",
                last.run_id
            ))
            .hint("preview what is left and save its plans (`mara preview --save-plans NEW`), then apply them (`mara up --plans NEW`)"),
        ));
    }
    unknown_projects(last)
}

/// Whether a recorded command line applied saved plans (`up --plans DIR`).
fn applied_saved_plans(command: &str) -> bool {
    command
        .split_whitespace()
        .any(|word| word == "--plans" || word.starts_with("--plans="))
}

/// Refuses a run that did not end whose projects are not all recorded: one recorded by a mara
/// that recorded a project only as it started (or a record that lost rows) knows nothing of
/// those it never started, and a resume would leave them undeployed while saying it completed.
fn unknown_projects(last: &RunRecord) -> Result<()> {
    let ended = !matches!(last.status, RunStatus::Running | RunStatus::Abandoned);
    let complete = last
        .selected
        .is_some_and(|n| last.projects.len() >= n as usize);
    if ended || complete {
        return Ok(());
    }
    Err(Error::config(
        Problem::new(format!(
            "run {} ({}) did not end, and its record holds only the projects it started: which of its projects never started is not known",
            last.run_id, last.status
        ))
        .hint("run the selection again without --resume (`--changed` runs only what is not deployed as it is now)"),
    ))
}

/// Every selected project's fingerprint (by graph index), from the stack's files as loaded.
pub fn fingerprints(
    selected: &Plan<'_>,
    files: &StackFiles,
    stack: &ResolvedStack,
) -> Result<BTreeMap<usize, String>> {
    let shared = (files.config.as_ref()).map_or(String::new(), |c| c.fingerprinted());
    let env_file = (files.env_file.as_ref()).map_or("", |f| f.text.as_str());
    fingerprints_of(selected, &files.workspace, stack, &shared, env_file)
}

/// Every selected project's fingerprint (by graph index), with the shared configuration's text
/// (`StackConfigFile::fingerprinted`) and the environment file's as given: those a first `up`
/// leaves, which it writes as it goes.
pub fn fingerprints_of(
    selected: &Plan<'_>,
    workspace: &Workspace,
    stack: &ResolvedStack,
    shared: &str,
    env_file: &str,
) -> Result<BTreeMap<usize, String>> {
    fingerprint::fingerprints(
        selected,
        |p| workspace.project_dir(p),
        &workspace.state_dir(),
        stack.name.as_str(),
        shared.as_bytes(),
        env_file.as_bytes(),
    )
    // An ignore file refused is named as the workspace's other files are.
    .map_err(|error| error.relative_to(&workspace.root))
}

/// For every selected project, in execution order, whether `--changed` runs it and why.
pub fn changes(
    selected: &Plan<'_>,
    fingerprints: &BTreeMap<usize, String>,
    ledger: Option<&dyn Ledger>,
    stack: &ResolvedStack,
) -> Result<Vec<(String, Change)>> {
    let before = match ledger {
        Some(ledger) => ledger.last_fingerprints(stack.name.as_str())?,
        None => BTreeMap::new(),
    };
    let graph = selected.graph;
    // Those deployed anew, and the unchanged that stand on them, however far (in execution
    // order, a project's dependencies are decided before it).
    let mut anew = vec![false; graph.len()];
    Ok(selected
        .order()
        .iter()
        .map(|&i| {
            let path = &graph.project(i).path;
            let mut change =
                fingerprint::compare(&fingerprints[&i], before.get(path).map(String::as_str));
            let on_anew = graph.predecessors(i).into_iter().any(|(d, _)| anew[d]);
            if change == Change::Unchanged && on_anew {
                change = Change::DependencyRedeployed;
            }
            anew[i] = matches!(change, Change::NeverDeployed | Change::DependencyRedeployed);
            (path.clone(), change)
        })
        .collect())
}

/// The plan of the projects that changed; `None` when none did.
pub fn changed<'g>(
    graph: &'g ExecutionGraph,
    changes: &[(String, Change)],
) -> Result<Option<Plan<'g>>> {
    let runs: Vec<String> = changes
        .iter()
        .filter(|(_, change)| *change != Change::Unchanged)
        .map(|(path, _)| path.clone())
        .collect();
    if runs.is_empty() {
        return Ok(None);
    }
    Plan::select(
        graph,
        &Selection {
            only: runs,
            ..Selection::default()
        },
    )
    .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_applied_saved_plans_is_known_by_its_command() {
        assert!(applied_saved_plans("mara up --plans plans/release-42"));
        assert!(applied_saved_plans(
            "/usr/bin/mara -C w up --plans=release --replan"
        ));
        assert!(!applied_saved_plans("mara up --yes"));
        assert!(!applied_saved_plans("mara preview --save-plans plans"));
        assert!(!applied_saved_plans("mara up --only plans"));
    }
}
