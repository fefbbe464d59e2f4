//! A run fanned out over CI jobs (docs/commands.md, "ci"), as each step of it sees the run's
//! record: `ci open` records the projects waiting for their jobs; a job (`--run ID`) runs only
//! projects of the run, skips those whose dependency (for destroy, whose dependent) did not
//! succeed in it or has not run yet, and writes again the kubeconfigs its dependencies' hooks
//! wrote on other runners. What the run needs of where state is kept is checked in
//! `deployment::checks::fanout`; recording is the recorder's.

use std::collections::{BTreeMap, BTreeSet};

use crate::engine::Operation;
use crate::error::{Error, Problem, Result};
use crate::graph::{ExecutionGraph, Plan};
use crate::ledger::{Ledger, Previewed, RunRecord};
use crate::provider::Hook;
use crate::run::kubeconfig;
use crate::run::plan::{Blocked, Planner};
use crate::status::{ProjectStatus, RunStatus};

/// What a job sees of the run it joins: the projects it does not run, and which projects the run
/// has (another job's preview of an upstream stands for this one's: its inputs may wait on it).
#[derive(Debug, Default)]
pub struct Joined {
    pub blocked: BTreeMap<usize, Blocked>,
    pub in_run: BTreeSet<String>,
}

/// What `ci open` finds of a run of its id: none yet, or one open already (a retried job).
/// A run that was closed cannot be opened again.
pub fn open_already(
    ledger: Option<&dyn Ledger>,
    run_id: &str,
    (operation, stack): (Operation, &str),
) -> Result<bool> {
    let Some(found) = ledger.map(|l| l.run(run_id)).transpose()?.flatten() else {
        return Ok(false);
    };
    match found.status {
        // A retried open job is the same open; another operation or stack under the id is not.
        RunStatus::Running if found.operation != operation || found.stack != stack => {
            Err(Error::usage(
                Problem::new(format!(
                    "run `{run_id}` is open already as {} of stack {}, not {operation} of stack {stack}",
                    found.operation, found.stack
                ))
                .hint("a run id names one pipeline: give this one an id of its own"),
            ))
        }
        RunStatus::Running => Ok(true),
        status => Err(Error::usage(Problem::new(format!(
            "run `{run_id}` is {status} already: it cannot be opened again"
        )))),
    }
}

/// The paths of the projects an opened run waits for, in the order its jobs run them.
pub fn waiting(selected: &Plan<'_>, operation: Operation) -> Vec<String> {
    let order: Vec<usize> = match operation {
        Operation::Destroy => selected.reverse_order().collect(),
        _ => selected.order().to_vec(),
    };
    (order.into_iter())
        .map(|i| selected.graph.project(i).path.clone())
        .collect()
}

/// The run's graph as it records it at its start: (needed, needing) pairs of the selected
/// projects' paths (`Plan::edges`), for its page to draw as the run had it.
pub fn edges(selected: &Plan<'_>) -> Vec<(String, String)> {
    let path = |i: usize| selected.graph.project(i).path.clone();
    (selected.edges().into_iter())
        .map(|(a, b)| (path(a), path(b)))
        .collect()
}

/// A job of run `run_id`: the selected projects its record rules out, with why, and the run's
/// projects. Its projects must be the run's.
pub fn joined(
    ledger: Option<&dyn Ledger>,
    run_id: &str,
    selected: &Plan<'_>,
    operation: Operation,
) -> Result<Joined> {
    let Some(ledger) = ledger else {
        return Ok(Joined::default());
    };
    let Some(record) = ledger.run(run_id)? else {
        return Ok(Joined::default());
    };
    of_the_run(selected, &record)?;
    let previews = match operation {
        Operation::Preview => ledger.previews(run_id)?,
        _ => BTreeMap::new(),
    };
    Ok(Joined {
        blocked: blocked_in(selected, operation, &record, &previews),
        in_run: record.projects.iter().map(|p| p.path.clone()).collect(),
    })
}

/// Whether a drift check's job found the project not there to check (no stack, no `drift`
/// command): done, as far as the check goes.
pub fn not_checked(project: &crate::ledger::ProjectRecord) -> bool {
    project.status == ProjectStatus::Skipped
        && (project.reason.as_deref()).is_some_and(|r| r.contains("not checked"))
}

/// Whether project `path`'s job ended it waiting (a preview whose dependency is not deployed
/// yet), not `ci open`'s record of it waiting for its job.
pub fn waited(project: &crate::ledger::ProjectRecord) -> bool {
    project.status == ProjectStatus::Waiting && project.finished.is_some()
}

/// Refuses selected projects the run was not opened with.
fn of_the_run(selected: &Plan<'_>, record: &RunRecord) -> Result<()> {
    let outside: Vec<&str> = (selected.order().iter())
        .map(|&i| selected.graph.project(i).path.as_str())
        .filter(|path| !record.projects.iter().any(|p| p.path == *path))
        .collect();
    if outside.is_empty() {
        return Ok(());
    }
    Err(Error::usage(
        Problem::new(format!(
            "{} {} not in run {}",
            outside.join(", "),
            match outside.len() {
                1 => "is",
                _ => "are",
            },
            record.run_id
        ))
        .hint("a job runs a project of the run it joins: `mara status` lists them"),
    ))
}

/// The selected projects that a joined run's record rules out: those that run after a project
/// that did not succeed in it (for destroy, before: a project is destroyed after its
/// dependents), with the reason. A dependency in the job's own selection runs there first.
fn blocked_in(
    selected: &Plan<'_>,
    operation: Operation,
    record: &RunRecord,
    previews: &BTreeMap<String, Previewed>,
) -> BTreeMap<usize, Blocked> {
    let graph = selected.graph;
    let mut blocked = BTreeMap::new();
    for &i in selected.order() {
        let first = match operation {
            Operation::Destroy => graph.successors(i),
            _ => graph.predecessors(i),
        };
        let mut waits = Waits::default();
        for (d, _) in first.into_iter().filter(|(d, _)| !selected.contains(*d)) {
            let path = &graph.project(d).path;
            let previewed = previews.get(path.as_str());
            let reason = match record.projects.iter().find(|p| p.path == *path) {
                // What a preview of the run found of the projects before it: as one `preview`,
                // a project waits on one not deployed yet (`scheduler::waits_on`).
                Some(p) if waited(p) => {
                    let on = previewed.map(|p| p.waits_on.clone()).unwrap_or_default();
                    waits.through(path, on);
                    continue;
                }
                Some(p) if p.status == ProjectStatus::Waiting => format!(
                    "depends on {path}, which has not run in run {} yet",
                    record.run_id
                ),
                // A drift check of what follows one not checked, or whose check failed, still
                // checks: a check holds back none.
                Some(_) if operation == Operation::Drift => continue,
                Some(p) if !p.status.is_success() => {
                    format!("depends on {path}, which did not succeed")
                }
                Some(_) if previewed.is_some_and(|p| p.new_stack) => {
                    waits.direct(path);
                    continue;
                }
                _ => continue,
            };
            blocked.entry(i).or_insert(Blocked::Skipped(reason));
        }
        if let Some(waits) = waits.blocked() {
            blocked.entry(i).or_insert(waits);
        }
    }
    blocked
}

/// The projects not deployed yet that a project's preview would read, directly or through a
/// dependency itself waiting, said as `scheduler::waits_on` says them.
#[derive(Default)]
struct Waits {
    on: Vec<String>,
    direct: Vec<String>,
    through: Vec<String>,
}

impl Waits {
    fn direct(&mut self, path: &str) {
        self.on.push(path.to_string());
        self.direct.push(path.to_string());
    }

    fn through(&mut self, path: &str, on: Vec<String>) {
        self.on.extend(on);
        self.through.push(path.to_string());
    }

    fn blocked(mut self) -> Option<Blocked> {
        if self.direct.is_empty() && self.through.is_empty() {
            return None;
        }
        self.on.sort();
        self.on.dedup();
        let mut said = Vec::new();
        if !self.direct.is_empty() {
            said.push(format!("{} (not deployed yet)", self.direct.join(", ")));
        }
        if !self.through.is_empty() {
            let waiting =
                crate::error::plural(self.through.len(), "itself waiting", "themselves waiting");
            said.push(format!("{} ({waiting})", self.through.join(", ")));
        }
        Some(Blocked::Waits {
            on: self.on,
            reason: format!("waits on {}", said.join(" and ")),
        })
    }
}

/// Writes the kubeconfig of every project the runnable selected ones follow (however far back,
/// and not selected itself) whose hook writes one, from that project's stack outputs, as the
/// hook wrote it on its own runner (only the stack's file: a runner has no user's kubeconfig to
/// merge into). Returns the lines to show.
pub fn rebuild_kubeconfigs(
    planner: &Planner<'_>,
    engines: &crate::engine::Engines,
    env: &BTreeMap<String, String>,
    files: &kubeconfig::Files,
) -> Result<Vec<String>> {
    let graph = &planner.deployment.graph;
    // A blocked project does not run: what it reads is not needed.
    let runnable =
        (planner.selected.order().iter().copied()).filter(|i| !planner.blocked.contains_key(i));
    let mut lines = Vec::new();
    for d in ancestors(graph, runnable) {
        if planner.selected.contains(d) {
            continue;
        }
        let project = graph.project(d);
        for hook in &project.on_success {
            let Hook::Kubeconfig { output, .. } = hook else {
                continue;
            };
            let outputs =
                crate::run::outputs::outputs_of(planner.deployment, engines, d, env, true)?;
            let written = kubeconfig::write(files, env, &outputs, output, false).map_err(|e| {
                Error::config(Problem::new(e).subject(format!(
                    "the kubeconfig of {}, written again for this job",
                    project.path
                )))
            })?;
            lines.extend(
                written
                    .into_iter()
                    .map(|l| format!("[{}] {l} (from its stack outputs)", project.path)),
            );
        }
    }
    Ok(lines)
}

/// Every project `from` follows, however far back, in index order.
fn ancestors(graph: &ExecutionGraph, from: impl Iterator<Item = usize>) -> BTreeSet<usize> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<usize> = from.collect();
    while let Some(i) = todo.pop() {
        for (d, _) in graph.predecessors(i) {
            if seen.insert(d) {
                todo.push(d);
            }
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Selection;
    use crate::ledger::ProjectRecord;
    use crate::provider::Registry;

    fn aws() -> ExecutionGraph {
        ExecutionGraph::build(&Registry::builtin().resolve("aws").unwrap()).unwrap()
    }

    fn select<'g>(graph: &'g ExecutionGraph, only: &[&str]) -> Plan<'g> {
        let selection = Selection {
            only: only.iter().map(|s| s.to_string()).collect(),
            ..Selection::default()
        };
        Plan::select(graph, &selection).unwrap()
    }

    /// Run r1 of the whole aws graph, every project succeeded but those named.
    fn record(graph: &ExecutionGraph, others: &[(&str, ProjectStatus)]) -> RunRecord {
        let projects = (graph.order().iter())
            .map(|&i| {
                let path = graph.project(i).path.clone();
                let status = (others.iter().find(|(p, _)| *p == path))
                    .map_or(ProjectStatus::Succeeded, |(_, s)| *s);
                ProjectRecord {
                    path,
                    status,
                    started: None,
                    finished: None,
                    exit_code: None,
                    changes: None,
                    reason: None,
                    log: None,
                    fingerprint: None,
                }
            })
            .collect();
        RunRecord {
            run_id: "r1".into(),
            operation: Operation::Up,
            provider: "aws".into(),
            stack: "dev".into(),
            user: "u".into(),
            host: "h".into(),
            pid: 1,
            command: "mara ci open".into(),
            started: "t0".into(),
            finished: None,
            status: RunStatus::Running,
            selected: None,
            graph: None,
            policy: None,
            projects,
            leased: true,
            actions: Vec::new(),
        }
    }

    fn blocked_paths(
        graph: &ExecutionGraph,
        selected: &Plan<'_>,
        operation: Operation,
        record: &RunRecord,
    ) -> Vec<(String, String)> {
        (blocked_in(selected, operation, record, &BTreeMap::new()).into_iter())
            .map(|(i, why)| (graph.project(i).path.clone(), why.reason().to_string()))
            .collect()
    }

    /// A preview's job waits, as one `preview` would, on a dependency whose job found its stack
    /// not deployed yet, or itself waiting; `ci open`'s waiting record is a job not run yet.
    #[test]
    fn a_preview_job_waits_on_what_another_job_found_not_deployed() {
        let graph = aws();
        let selected = select(&graph, &["kubernetes/logstore"]);
        let mut run = record(&graph, &[]);
        run.operation = Operation::Preview;
        let new = Previewed {
            new_stack: true,
            ..Previewed::default()
        };
        let previews = BTreeMap::from([("infrastructure/kubeconfig".to_string(), new)]);
        let found = blocked_in(&selected, Operation::Preview, &run, &previews);
        assert_eq!(
            found.values().collect::<Vec<_>>(),
            [&Blocked::Waits {
                on: vec!["infrastructure/kubeconfig".into()],
                reason: "waits on infrastructure/kubeconfig (not deployed yet)".into()
            }]
        );
        // Its job ended it waiting, on the cluster.
        let kubeconfig = (run.projects.iter_mut())
            .find(|p| p.path == "infrastructure/kubeconfig")
            .unwrap();
        kubeconfig.status = ProjectStatus::Waiting;
        kubeconfig.finished = Some("t1".into());
        let waits = Previewed {
            waits_on: vec!["infrastructure/aws/eks".into()],
            ..Previewed::default()
        };
        let previews = BTreeMap::from([("infrastructure/kubeconfig".to_string(), waits)]);
        let found = blocked_in(&selected, Operation::Preview, &run, &previews);
        assert_eq!(
            found.values().collect::<Vec<_>>(),
            [&Blocked::Waits {
                on: vec!["infrastructure/aws/eks".into()],
                reason: "waits on infrastructure/kubeconfig (itself waiting)".into()
            }]
        );
        // Not run yet: skipped, as before.
        let kubeconfig = (run.projects.iter_mut())
            .find(|p| p.path == "infrastructure/kubeconfig")
            .unwrap();
        kubeconfig.finished = None;
        let found = blocked_in(&selected, Operation::Preview, &run, &previews);
        assert!(matches!(found.values().next(), Some(Blocked::Skipped(_))));
    }

    #[test]
    fn a_job_skips_what_follows_a_dependency_not_run_yet_or_not_succeeded() {
        let graph = aws();
        let selected = select(
            &graph,
            &[
                "kubernetes/logstore",
                "kubernetes/logagent",
                "kubernetes/certmgr",
            ],
        );
        let waiting = record(
            &graph,
            &[("infrastructure/kubeconfig", ProjectStatus::Waiting)],
        );
        assert_eq!(
            blocked_paths(&graph, &selected, Operation::Up, &waiting),
            [
                (
                    "kubernetes/logstore".to_string(),
                    "depends on infrastructure/kubeconfig, which has not run in run r1 yet"
                        .to_string()
                ),
                (
                    "kubernetes/certmgr".to_string(),
                    "depends on infrastructure/kubeconfig, which has not run in run r1 yet"
                        .to_string()
                ),
            ],
            "logagent's dependency, logstore, runs in this job first"
        );
        let failed = record(
            &graph,
            &[("infrastructure/kubeconfig", ProjectStatus::Failed)],
        );
        let found = blocked_paths(&graph, &selected, Operation::Up, &failed);
        assert_eq!(found.len(), 2);
        assert!(
            found
                .iter()
                .all(|(_, why)| why.ends_with("which did not succeed"))
        );
        let succeeded = record(
            &graph,
            &[("infrastructure/kubeconfig", ProjectStatus::Unchanged)],
        );
        assert!(blocked_paths(&graph, &selected, Operation::Up, &succeeded).is_empty());
    }

    #[test]
    fn a_destroy_job_waits_for_the_dependents() {
        let graph = aws();
        let selected = select(&graph, &["kubernetes/logstore"]);
        let run = record(&graph, &[("kubernetes/logagent", ProjectStatus::Cancelled)]);
        assert_eq!(
            blocked_paths(&graph, &selected, Operation::Destroy, &run),
            [(
                "kubernetes/logstore".to_string(),
                "depends on kubernetes/logagent, which did not succeed".to_string()
            )]
        );
        assert!(blocked_paths(&graph, &selected, Operation::Up, &run).is_empty());
    }

    #[test]
    fn a_job_runs_only_projects_of_its_run() {
        let graph = aws();
        let mut run = record(&graph, &[]);
        run.projects.retain(|p| p.path != "kubernetes/certmgr");
        let selected = select(&graph, &["kubernetes/logstore", "kubernetes/certmgr"]);
        let refused = of_the_run(&selected, &run).unwrap_err();
        assert_eq!(refused.to_string(), "kubernetes/certmgr is not in run r1");
        assert_eq!(refused.exit_code(), crate::error::exit::USAGE);
        assert!(of_the_run(&select(&graph, &["kubernetes/logstore"]), &run).is_ok());
    }

    #[test]
    fn an_opened_run_waits_in_the_order_its_jobs_run() {
        let graph = aws();
        let selected = select(
            &graph,
            &["infrastructure/aws/vpc", "infrastructure/aws/eks"],
        );
        assert_eq!(
            waiting(&selected, Operation::Up),
            ["infrastructure/aws/vpc", "infrastructure/aws/eks"]
        );
        assert_eq!(
            waiting(&selected, Operation::Destroy),
            ["infrastructure/aws/eks", "infrastructure/aws/vpc"]
        );
    }
}
