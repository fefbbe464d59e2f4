//! The scheduler (docs/commands.md, "up, preview, refresh, destroy"): a ready-queue walk over the
//! run plan. A project starts when every project it waits for has succeeded, at most `parallel`
//! at once, the earliest in the plan's order first. What a failure means is one value,
//! `FailurePolicy`: stop starting projects (the default), or go on with everything that does not
//! depend on the failed one. A project's task that panics is a failed project, never a lost one.
//!
//! It never prints: it sends `Event`s, and returns one `ProjectReport` per project of the plan.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::future::Future;
use std::pin::Pin;
use std::time::SystemTime;

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::events::{Event, Finished, Outcome, ProjectReport};
use super::interrupt::Interrupt;
use super::plan::RunPlan;

pub use crate::settings::run::FailurePolicy;

pub type ProjectFuture = Pin<Box<dyn Future<Output = Finished> + Send>>;

/// Runs the plan. `start(index)` makes the future that runs one project (its position in the
/// plan).
pub async fn run(
    plan: &RunPlan,
    parallel: usize,
    policy: FailurePolicy,
    interrupt: &Interrupt,
    events: &mpsc::UnboundedSender<Event>,
    mut start: impl FnMut(usize) -> ProjectFuture,
) -> Vec<ProjectReport> {
    let projects = &plan.projects;
    let mut waiting: Vec<usize> = projects.iter().map(|p| p.waits_for.len()).collect();
    let mut unblocks: Vec<Vec<usize>> = vec![Vec::new(); projects.len()];
    for (i, project) in projects.iter().enumerate() {
        for &j in &project.waits_for {
            unblocks[j].push(i);
        }
    }
    // Ready projects, earliest in the plan first.
    let mut ready: BinaryHeap<Reverse<usize>> = (0..projects.len())
        .filter(|&i| waiting[i] == 0)
        .map(Reverse)
        .collect();
    let mut reports: BTreeMap<usize, ProjectReport> = BTreeMap::new();
    let mut started_at: BTreeMap<usize, SystemTime> = BTreeMap::new();
    let mut running: JoinSet<Finished> = JoinSet::new();
    let mut task_of: BTreeMap<tokio::task::Id, usize> = BTreeMap::new();
    let mut first_failure: Option<String> = None;
    // A project whose dependency failed: why it will not run.
    let mut blocked: BTreeMap<usize, String> = BTreeMap::new();
    // Counted by the tests: each dependency edge of the plan is followed once.
    let mut unblocked = 0usize;

    loop {
        let stopping = interrupt.is_interrupted()
            || (policy == FailurePolicy::StopAll && first_failure.is_some());
        while !stopping && running.len() < parallel.max(1) {
            let Some(Reverse(i)) = ready.pop() else {
                break;
            };
            let path = projects[i].path.clone();
            started_at.insert(i, SystemTime::now());
            let _ = events.send(Event::ProjectStarted { index: i, path });
            let handle = running.spawn(start(i));
            task_of.insert(handle.id(), i);
        }
        if running.is_empty() {
            break;
        }
        let joined = tokio::select! {
            joined = running.join_next_with_id() => joined,
            () = interrupt.requested(), if !interrupt.is_interrupted() => continue,
        };
        let (i, finished) = match joined {
            Some(Ok((id, finished))) => (task_of[&id], finished),
            Some(Err(error)) => (task_of[&error.id()], panicked(error)),
            None => continue,
        };
        let path = projects[i].path.clone();
        if !finished.outcome.lets_dependents_run() {
            first_failure.get_or_insert_with(|| path.clone());
            let mut stack = vec![i];
            while let Some(j) = stack.pop() {
                for &k in &unblocks[j] {
                    if let std::collections::btree_map::Entry::Vacant(entry) = blocked.entry(k) {
                        entry.insert(path.clone());
                        stack.push(k);
                    }
                }
            }
        } else {
            for &k in &unblocks[i] {
                unblocked += 1;
                waiting[k] -= 1;
                if waiting[k] == 0 && !blocked.contains_key(&k) {
                    ready.push(Reverse(k));
                }
            }
        }
        let report = ProjectReport::new(path, started_at.get(&i).copied(), finished);
        let _ = events.send(Event::ProjectFinished {
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
    for (i, project) in projects.iter().enumerate() {
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
        let finished = Finished {
            outcome: Outcome::Skipped { reason },
            exit_code: None,
            changes: None,
            log: None,
            created_stack: false,
        };
        let report = ProjectReport::new(project.path.clone(), None, finished);
        let _ = events.send(Event::ProjectFinished {
            index: i,
            report: report.clone(),
        });
        reports.insert(i, report);
    }
    reports.into_values().collect()
}

/// A project's task that ended without finishing: a panic (a bug in mara, said as such), or a
/// cancellation of the task itself.
fn panicked(error: tokio::task::JoinError) -> Finished {
    let reason = if error.is_panic() {
        let payload = error.into_panic();
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_string());
        format!("mara failed while running it (a bug in mara; please report it): {message}")
    } else {
        "mara's task for it was cancelled".to_string()
    };
    Finished {
        outcome: Outcome::Failed { code: None, reason },
        exit_code: None,
        changes: None,
        log: None,
        created_stack: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Operation;
    use crate::run::plan::fixtures;
    use crate::status::ProjectStatus;
    use std::sync::{Arc, Mutex};

    /// Runs the aws plan with projects that succeed (or fail, or panic, when named), recording the
    /// start order.
    async fn simulate(
        operation: Operation,
        parallel: usize,
        policy: FailurePolicy,
        failing: &[&str],
        panicking: &[&str],
    ) -> (Vec<String>, Vec<ProjectReport>) {
        let plan = fixtures::plan(operation, &[]);
        let (tx, _rx) = mpsc::unbounded_channel();
        let started = Arc::new(Mutex::new(Vec::new()));
        let reports = run(&plan, parallel, policy, &Interrupt::default(), &tx, |i| {
            let path = plan.projects[i].path.clone();
            started.lock().unwrap().push(path.clone());
            let fail = failing.iter().any(|f| path.ends_with(f));
            let panic = panicking.iter().any(|f| path.ends_with(f));
            Box::pin(async move {
                tokio::task::yield_now().await;
                assert!(!panic, "a bug in {path}");
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
                    created_stack: false,
                }
            })
        })
        .await;
        let started = started.lock().unwrap().clone();
        (started, reports)
    }

    #[tokio::test]
    async fn parallel_one_is_the_execution_order_and_destroy_its_reverse() {
        let up = fixtures::plan(Operation::Up, &[]);
        let order: Vec<String> = up.projects.iter().map(|p| p.path.clone()).collect();
        let (started, reports) = simulate(Operation::Up, 1, FailurePolicy::StopAll, &[], &[]).await;
        assert_eq!(started, order);
        assert!(reports.iter().all(|r| r.status == ProjectStatus::Succeeded));
        let (started, _) = simulate(Operation::Destroy, 1, FailurePolicy::StopAll, &[], &[]).await;
        let mut reversed = order.clone();
        reversed.reverse();
        assert_eq!(started, reversed);
    }

    #[tokio::test]
    async fn a_failure_stops_the_run_and_skips_with_reasons() {
        let (started, reports) =
            simulate(Operation::Up, 1, FailurePolicy::StopAll, &["logstore"], &[]).await;
        assert_eq!(started.last().unwrap(), "kubernetes/logstore");
        let logagent = reports
            .iter()
            .find(|r| r.path == "kubernetes/logagent")
            .unwrap();
        assert_eq!(logagent.status, ProjectStatus::Skipped);
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
        let (started, reports) = simulate(
            Operation::Up,
            2,
            FailurePolicy::SkipDependents,
            &["logstore"],
            &[],
        )
        .await;
        assert!(!started.contains(&"kubernetes/logagent".to_string()));
        assert!(started.contains(&"kubernetes/applications/sirius".to_string()));
        let statuses: Vec<(&str, ProjectStatus)> = reports
            .iter()
            .map(|r| (r.path.as_str(), r.status))
            .collect();
        assert!(statuses.contains(&("kubernetes/logagent", ProjectStatus::Skipped)));
        assert!(statuses.contains(&("kubernetes/applications/sirius", ProjectStatus::Succeeded)));
        assert_eq!(reports.len(), 15);
    }

    #[tokio::test]
    async fn a_task_that_panics_is_a_failed_project_and_its_dependents_skip() {
        let (_, reports) = simulate(
            Operation::Up,
            2,
            FailurePolicy::SkipDependents,
            &[],
            &["logstore"],
        )
        .await;
        let logstore = reports
            .iter()
            .find(|r| r.path == "kubernetes/logstore")
            .unwrap();
        assert_eq!(logstore.status, ProjectStatus::Failed);
        let reason = logstore.reason.as_deref().unwrap();
        assert!(
            reason.contains("a bug in mara") && reason.contains("a bug in kubernetes/logstore"),
            "{reason}"
        );
        let logagent = reports
            .iter()
            .find(|r| r.path == "kubernetes/logagent")
            .unwrap();
        assert_eq!(logagent.status, ProjectStatus::Skipped);
        assert_eq!(reports.len(), 15, "every project is reported");
    }
}
