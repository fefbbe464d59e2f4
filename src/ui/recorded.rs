//! A recorded run as its summary shows it (`ui::report::RunSummary`), rebuilt from the ledger:
//! what `mara ci close` reports of a fanned-out run and `mara serve` shows of any run.

use std::collections::BTreeMap;

use super::report::RunSummary;
use crate::engine::Operation;
use crate::ledger::{Ledger, Previewed, ProjectRecord, RunRecord};
use crate::run::events::{Outcome, ProjectReport, Reads, mark_stale};
use crate::run::fanout;
use crate::status::ProjectStatus;

/// What the previews of `record` showed beyond their counts, when it is a run that records
/// them (a preview's, a drift check's).
pub fn previews_of(
    ledger: &dyn Ledger,
    record: &RunRecord,
) -> crate::error::Result<BTreeMap<String, Previewed>> {
    match record.operation {
        Operation::Preview | Operation::Drift => ledger.previews(&record.run_id),
        _ => Ok(BTreeMap::new()),
    }
}

/// The run as its summary shows it, the projects in the run's order (`graph`'s, for a run an
/// earlier mara recorded); a preview's with what each showed (`previews`), and which read what
/// another's would change.
pub fn summary_of(
    record: &RunRecord,
    graph: &crate::graph::ExecutionGraph,
    mut previews: BTreeMap<String, Previewed>,
) -> RunSummary {
    let position = |path: &str| {
        graph
            .find(path)
            .map(|i| graph.position(i))
            .unwrap_or(usize::MAX)
    };
    let mut projects: Vec<&ProjectRecord> = record.projects.iter().collect();
    // A run recorded whole as it started lists them in its own order (reversed for a destroy)
    // whatever the provider says now; one an earlier mara recorded, in the provider's.
    if record.selected.is_none() {
        projects.sort_by_key(|p| position(&p.path));
        if record.operation == Operation::Destroy {
            projects.reverse();
        }
    }
    let mut reports: Vec<ProjectReport> = (projects.into_iter())
        .map(|p| report(p, previews.remove(&p.path).unwrap_or_default()))
        .collect();
    if matches!(record.operation, Operation::Preview | Operation::Drift) {
        let reads = reads(graph, &reports);
        mark_stale(&mut reports, &reads);
    }
    let started = at(&Some(record.started.clone()));
    let finished = at(&record.finished);
    RunSummary {
        run_id: record.run_id.clone(),
        operation: record.operation,
        provider: record.provider.clone(),
        stack: record.stack.clone(),
        status: record.status,
        started: record.started.clone(),
        finished: record.finished.clone().unwrap_or_default(),
        projects: reports,
        duration: started
            .zip(finished)
            .map(|(s, e)| e.duration_since(s).unwrap_or_default())
            .unwrap_or_default(),
        logs: None,
        expect_no_changes: false,
        exit_code: None,
        policy: None,
    }
}

/// A recorded project as its summary's row, with what its preview showed.
fn report(p: &ProjectRecord, previewed: Previewed) -> ProjectReport {
    let reason = p.reason.clone().unwrap_or_default();
    let outcome = match p.status {
        ProjectStatus::Succeeded => Outcome::Succeeded,
        ProjectStatus::Unchanged => Outcome::Unchanged,
        ProjectStatus::Skipped => Outcome::Skipped { reason },
        ProjectStatus::Cancelled => Outcome::Cancelled { killed: None },
        ProjectStatus::Abandoned => Outcome::Skipped { reason },
        ProjectStatus::Waiting if fanout::waited(p) => Outcome::Waits {
            on: previewed.waits_on.clone(),
            reason,
        },
        _ => Outcome::Failed {
            code: p.exit_code,
            reason,
        },
    };
    ProjectReport {
        path: p.path.clone(),
        status: p.status,
        started: p.started.clone(),
        finished: p.finished.clone(),
        duration_ms: at(&p.started)
            .zip(at(&p.finished))
            .map(|(s, e)| e.duration_since(s).unwrap_or_default().as_millis() as u64),
        exit_code: p.exit_code,
        changes: p.changes.clone(),
        reason: p.reason.clone(),
        changed_outputs: previewed.changed_outputs,
        stale: Vec::new(),
        waits_on: previewed.waits_on,
        diff: previewed.diff,
        drifted: previewed.drifted,
        planned_with: previewed.planned_with,
        projected: previewed.projected,
        inputs_taken: Default::default(),
        plan_digest: None,
        state: None,
        document: None,
        policy: Vec::new(),
        approval: None,
        new_stack: previewed.new_stack,
        outcome,
        log: None,
        created_stack: false,
        attempts: 0,
        outputs: None,
    }
}

/// A recorded instant.
fn at(instant: &Option<String>) -> Option<std::time::SystemTime> {
    instant.as_deref().and_then(crate::clock::parse_rfc3339)
}

/// What each of `reports` (in the run's order) reads of those before it, from the graph.
fn reads(graph: &crate::graph::ExecutionGraph, reports: &[ProjectReport]) -> Vec<Reads> {
    let at: BTreeMap<&str, usize> = (reports.iter().enumerate())
        .map(|(k, r)| (r.path.as_str(), k))
        .collect();
    (reports.iter())
        .map(|r| {
            let Ok(i) = graph.find(&r.path) else {
                return Reads {
                    waits_for: Vec::new(),
                    inputs: Vec::new(),
                };
            };
            let waits_for = (graph.predecessors(i).into_iter())
                .filter_map(|(d, _)| at.get(graph.project(d).path.as_str()).copied())
                .filter(|&k| k < at[r.path.as_str()])
                .collect();
            let inputs = (graph.project(i).inputs.iter())
                .map(|input| (input.from.target.clone(), input.output.clone()))
                .collect();
            Reads { waits_for, inputs }
        })
        .collect()
}
