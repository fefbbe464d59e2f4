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
    /// The last run completed: nothing to resume.
    Completed,
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
/// succeed, started or not (a run records all it selected as it starts). Refused, naming
/// them, when it cannot run them all: projects the provider no longer has, or a run that
/// died recorded by a mara that knew only the projects it had started.
pub fn resume<'g>(
    graph: &'g ExecutionGraph,
    ledger: Option<&dyn Ledger>,
    stack: &ResolvedStack,
    operation: Operation,
) -> Result<Resume<'g>> {
    let last = ledger
        .map(|ledger| ledger.last_run(stack.name.as_str(), operation))
        .transpose()?
        .flatten()
        .ok_or_else(|| {
            Error::usage(Problem::new(format!(
                "no earlier {operation} on stack {} to resume",
                stack.name
            )))
        })?
        .as_seen();
    unknown_projects(&last)?;
    let left: Vec<&ProjectRecord> = (last.projects.iter())
        .filter(|p| !p.status.is_success())
        .collect();
    let gone: Vec<&str> = (left.iter())
        .filter(|p| graph.lookup(&p.path).is_none())
        .map(|p| p.path.as_str())
        .collect();
    if !gone.is_empty() {
        return Err(Error::config(
            Problem::new(format!(
                "run {} did not complete {}, which the provider no longer has: --resume cannot run {}",
                last.run_id,
                gone.join(", "),
                if gone.len() == 1 { "it" } else { "them" },
            ))
            .hint("run them with the provider that has them (`--provider`), or run the whole selection again without --resume"),
        ));
    }
    if left.is_empty() {
        return Ok(Resume::Completed);
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
