//! The scheduler (SPEC §6.2): a ready-queue walk over the plan. A project starts when every
//! project it depends on in this run has succeeded, at most `parallel` at once, the earliest in
//! the execution order first. What a failure means is one value, `FailurePolicy`: stop starting
//! projects (the default), or go on with everything that does not depend on the failed one.
//! `destroy` walks the reversed graph.
//!
//! It never prints: it sends `Event`s, and returns one `ProjectReport` per project of the plan.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::future::Future;
use std::pin::Pin;
use std::time::SystemTime;

use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::process::{Interrupt, Stream};
use crate::engine::{Changes, Operation};
use crate::graph::Plan;

/// What one project ended as. "Stopped by us" is not "failed".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    /// Succeeded, and the engine reported no change.
    Unchanged,
    Failed {
        code: Option<i32>,
        reason: String,
    },
    Skipped {
        reason: String,
    },
    Cancelled,
}

impl Outcome {
    pub fn status(&self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Unchanged => "unchanged",
            Outcome::Failed { .. } => "failed",
            Outcome::Skipped { .. } => "skipped",
            Outcome::Cancelled => "cancelled",
        }
    }

    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Succeeded | Outcome::Unchanged)
    }

    pub fn reason(&self) -> Option<&str> {
        match self {
            Outcome::Failed { reason, .. } | Outcome::Skipped { reason } => Some(reason),
            _ => None,
        }
    }
}

/// One project of a run, as the summary and the report show it.
#[derive(Debug, Clone, Serialize)]
pub struct ProjectReport {
    pub path: String,
    pub status: &'static str,
    pub started: Option<String>,
    pub finished: Option<String>,
    pub duration_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub changes: Option<Changes>,
    pub reason: Option<String>,
    #[serde(skip)]
    pub outcome: Outcome,
    #[serde(skip)]
    pub log: Option<std::path::PathBuf>,
}

/// What a project's task returns to the scheduler.
#[derive(Debug)]
pub struct Finished {
    pub outcome: Outcome,
    pub exit_code: Option<i32>,
    pub changes: Option<Changes>,
    pub log: Option<std::path::PathBuf>,
}

/// What the scheduler tells the reporter.
#[derive(Debug, Clone)]
pub enum Event {
    Started {
        index: usize,
        path: String,
    },
    Line {
        index: usize,
        path: String,
        stream: Stream,
        text: String,
    },
    Finished {
        index: usize,
        report: ProjectReport,
    },
}

/// What a failed project means for the rest of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Start nothing new; let running projects finish; the rest is skipped.
    StopAll,
    /// Go on with every project that does not depend on a failed one.
    SkipDependents,
}

pub type ProjectFuture = Pin<Box<dyn Future<Output = Finished> + Send>>;

/// Runs the plan. `start(index)` makes the future that runs one project (graph index).
pub async fn run(
    plan: &Plan<'_>,
    operation: Operation,
    parallel: usize,
    policy: FailurePolicy,
    interrupt: &Interrupt,
    events: &mpsc::UnboundedSender<Event>,
    mut start: impl FnMut(usize) -> ProjectFuture,
) -> Vec<ProjectReport> {
    let graph = plan.graph;
    let reverse = operation == Operation::Destroy;
    // The projects each one waits for, and those waiting for it, within the plan.
    let waits_for = |i: usize| {
        let neighbours = if reverse {
            graph.successors(i)
        } else {
            graph.predecessors(i)
        };
        neighbours
            .into_iter()
            .map(|(j, _)| j)
            .filter(|&j| plan.contains(j))
            .collect::<Vec<_>>()
    };
    let mut waiting: BTreeMap<usize, usize> = plan
        .order()
        .iter()
        .map(|&i| (i, waits_for(i).len()))
        .collect();
    let mut unblocks: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &i in plan.order() {
        for j in waits_for(i) {
            unblocks.entry(j).or_default().push(i);
        }
    }
    // Ready projects, earliest in this run's order first.
    let place = |i: usize| {
        if reverse {
            usize::MAX - graph.position(i)
        } else {
            graph.position(i)
        }
    };
    let mut ready: BinaryHeap<Reverse<(usize, usize)>> = waiting
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(&i, _)| Reverse((place(i), i)))
        .collect();
    let mut reports: BTreeMap<usize, ProjectReport> = BTreeMap::new();
    let mut started_at: BTreeMap<usize, SystemTime> = BTreeMap::new();
    let mut running: JoinSet<(usize, Finished)> = JoinSet::new();
    let mut first_failure: Option<String> = None;
    // A project whose dependency failed: why it will not run.
    let mut blocked: BTreeMap<usize, String> = BTreeMap::new();
    // Counted by the tests: each dependency edge of the plan is followed once.
    let mut unblocked = 0usize;

    loop {
        let stopping = interrupt.is_interrupted()
            || (policy == FailurePolicy::StopAll && first_failure.is_some());
        while !stopping && running.len() < parallel.max(1) {
            let Some(Reverse((_, i))) = ready.pop() else {
                break;
            };
            let path = graph.project(i).path.clone();
            started_at.insert(i, SystemTime::now());
            let _ = events.send(Event::Started { index: i, path });
            let future = start(i);
            running.spawn(async move { (i, future.await) });
        }
        if running.is_empty() {
            break;
        }
        let joined = tokio::select! {
            joined = running.join_next() => joined,
            () = interrupt.requested(), if !interrupt.is_interrupted() => continue,
        };
        let Some(Ok((i, finished))) = joined else {
            continue;
        };
        let path = graph.project(i).path.clone();
        if !finished.outcome.is_success() {
            first_failure.get_or_insert_with(|| path.clone());
            let mut stack = vec![i];
            while let Some(j) = stack.pop() {
                for &k in unblocks.get(&j).map(Vec::as_slice).unwrap_or_default() {
                    if let std::collections::btree_map::Entry::Vacant(entry) = blocked.entry(k) {
                        entry.insert(path.clone());
                        stack.push(k);
                    }
                }
            }
        } else {
            for &k in unblocks.get(&i).map(Vec::as_slice).unwrap_or_default() {
                unblocked += 1;
                let count = waiting
                    .get_mut(&k)
                    .expect("every project of the plan is counted");
                *count -= 1;
                if *count == 0 && !blocked.contains_key(&k) {
                    ready.push(Reverse((place(k), k)));
                }
            }
        }
        let report = report(path, started_at.get(&i).copied(), finished);
        let _ = events.send(Event::Finished {
            index: i,
            report: report.clone(),
        });
        reports.insert(i, report);
    }

    tracing::debug!(
        target: "mara::graph",
        projects = reports.len(),
        unblocked,
        "scheduled"
    );
    // Everything that did not run, with the reason.
    let mut order: Vec<usize> = plan.order().to_vec();
    if reverse {
        order.reverse();
    }
    for &i in &order {
        if reports.contains_key(&i) {
            continue;
        }
        let reason = if let Some(failed) = blocked.get(&i) {
            format!("depends on {failed}, which did not succeed")
        } else if interrupt.is_interrupted() {
            "not started: the run was interrupted".to_string()
        } else if let Some(failed) = &first_failure {
            format!("not started: the run stopped after {failed} failed")
        } else {
            "not started".to_string()
        };
        let path = graph.project(i).path.clone();
        let finished = Finished {
            outcome: Outcome::Skipped { reason },
            exit_code: None,
            changes: None,
            log: None,
        };
        let report = report(path, None, finished);
        let _ = events.send(Event::Finished {
            index: i,
            report: report.clone(),
        });
        reports.insert(i, report);
    }
    order.iter().filter_map(|i| reports.remove(i)).collect()
}

fn report(path: String, started: Option<SystemTime>, finished: Finished) -> ProjectReport {
    let end = started.map(|_| SystemTime::now());
    let duration_ms = started
        .zip(end)
        .map(|(s, e)| e.duration_since(s).unwrap_or_default().as_millis() as u64);
    ProjectReport {
        path,
        status: finished.outcome.status(),
        started: started.map(super::clock::rfc3339),
        finished: end.map(super::clock::rfc3339),
        duration_ms,
        exit_code: finished.exit_code,
        changes: finished.changes,
        reason: finished.outcome.reason().map(str::to_string),
        outcome: finished.outcome,
        log: finished.log,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{ExecutionGraph, Selection};
    use crate::provider::Registry;
    use std::sync::{Arc, Mutex};

    fn aws() -> ExecutionGraph {
        let registry = Registry::builtin();
        ExecutionGraph::build(&registry.resolve("aws").unwrap()).unwrap()
    }

    /// Runs the plan with projects that succeed (or fail when named), recording the start order.
    async fn simulate(
        graph: &ExecutionGraph,
        operation: Operation,
        parallel: usize,
        policy: FailurePolicy,
        failing: &[&str],
    ) -> (Vec<String>, Vec<ProjectReport>) {
        let plan = Plan::select(graph, &Selection::default()).unwrap();
        let (tx, _rx) = mpsc::unbounded_channel();
        let started = Arc::new(Mutex::new(Vec::new()));
        let reports = run(
            &plan,
            operation,
            parallel,
            policy,
            &Interrupt::default(),
            &tx,
            |i| {
                let path = graph.project(i).path.clone();
                started.lock().unwrap().push(path.clone());
                let fail = failing.iter().any(|f| path.ends_with(f));
                Box::pin(async move {
                    tokio::task::yield_now().await;
                    let outcome = if fail {
                        Outcome::Failed {
                            code: Some(1),
                            reason: "boom".into(),
                        }
                    } else {
                        Outcome::Succeeded
                    };
                    Finished {
                        outcome,
                        exit_code: Some(i32::from(fail)),
                        changes: None,
                        log: None,
                    }
                })
            },
        )
        .await;
        let started = started.lock().unwrap().clone();
        (started, reports)
    }

    #[tokio::test]
    async fn parallel_one_is_the_execution_order_and_destroy_its_reverse() {
        let graph = aws();
        let order: Vec<String> = graph
            .order()
            .iter()
            .map(|&i| graph.project(i).path.clone())
            .collect();
        let (started, reports) =
            simulate(&graph, Operation::Up, 1, FailurePolicy::StopAll, &[]).await;
        assert_eq!(started, order);
        assert!(reports.iter().all(|r| r.status == "succeeded"));
        let (started, _) =
            simulate(&graph, Operation::Destroy, 1, FailurePolicy::StopAll, &[]).await;
        let mut reversed = order.clone();
        reversed.reverse();
        assert_eq!(started, reversed);
    }

    #[tokio::test]
    async fn a_failure_stops_the_run_and_skips_with_reasons() {
        let graph = aws();
        let (started, reports) = simulate(
            &graph,
            Operation::Up,
            1,
            FailurePolicy::StopAll,
            &["logstore"],
        )
        .await;
        assert_eq!(started.last().unwrap(), "kubernetes/logstore");
        let logagent = reports
            .iter()
            .find(|r| r.path == "kubernetes/logagent")
            .unwrap();
        assert_eq!(logagent.status, "skipped");
        assert_eq!(
            logagent.reason.as_deref(),
            Some("depends on kubernetes/logstore, which did not succeed")
        );
        let certmgr = reports
            .iter()
            .find(|r| r.path == "kubernetes/certmgr")
            .unwrap();
        assert_eq!(
            certmgr.reason.as_deref(),
            Some("not started: the run stopped after kubernetes/logstore failed")
        );
    }

    #[tokio::test]
    async fn keep_going_runs_every_independent_project() {
        let graph = aws();
        let (started, reports) = simulate(
            &graph,
            Operation::Up,
            2,
            FailurePolicy::SkipDependents,
            &["logstore"],
        )
        .await;
        assert!(!started.contains(&"kubernetes/logagent".to_string()));
        assert!(started.contains(&"kubernetes/applications/sirius".to_string()));
        let statuses: Vec<(&str, &str)> = reports
            .iter()
            .map(|r| (r.path.as_str(), r.status))
            .collect();
        assert!(statuses.contains(&("kubernetes/logagent", "skipped")));
        assert!(statuses.contains(&("kubernetes/applications/sirius", "succeeded")));
        assert_eq!(reports.len(), graph.len());
    }
}
