//! `mara ci`: a deployment fanned out over CI runners (docs/commands.md, "ci"). `open` checks
//! everything and records the run with its stack's lock; each project's job joins it
//! (`mara up --only P --run ID`); `close` records what did not run and why, the run's status,
//! releases the lock and writes the summary; `generate` writes the pipeline that does all this.

mod generate;

use std::time::SystemTime;

use super::run;
use crate::cli::{CiCommand, CiOperation};
use crate::deployment::checks::fanout as checks;
use crate::deployment::{self, Deployment};
use crate::engine::Operation;
use crate::error::{Error, Problem, Result};
use crate::graph::Selection;
use crate::ledger::{self, Ledger, ProjectRecord, RunRecord};
use crate::run::{fanout, retention};
use crate::settings::Settings;
use crate::settings::run::{OpenRun, Reports, RunSettings};
use crate::status::{ProjectStatus, RunStatus};
use crate::ui::report::RunSummary;

pub fn run(settings: &Settings, command: CiCommand) -> Result<()> {
    match command {
        CiCommand::Open {
            run: run_id,
            operation,
            lease,
            orphan_dependents,
            config,
            selection,
        } => {
            crate::settings::run::check_run_id(&run_id)?;
            if orphan_dependents && operation_of(operation) != Operation::Destroy {
                return Err(Error::usage(
                    Problem::new("--orphan-dependents is for a destroy")
                        .hint("add --operation destroy, or leave it out"),
                ));
            }
            // Everything `run` checks, then the run recorded under this id, holding its stack for
            // its jobs, and nothing run.
            let workspace = deployment::workspace(settings)?;
            let mut open = RunSettings::started(
                operation_of(operation),
                selection.into(),
                true,
                settings,
                &workspace.settings,
            );
            open.orphan_dependents = orphan_dependents;
            open.open = Some(OpenRun {
                run_id,
                lease: std::time::Duration::from_secs(lease),
                config,
            });
            run::start(settings, workspace, &open)
        }
        CiCommand::Close {
            run,
            report,
            junit,
            markdown,
        } => {
            let reports = Reports {
                json: report,
                junit,
                markdown,
                github_summary: None,
            };
            close(settings, &run, reports)
        }
        CiCommand::Generate(args) => {
            let (asked, at) = generate::Asked::of(args);
            generate::generate(settings, asked, at)
        }
    }
}

fn operation_of(operation: CiOperation) -> Operation {
    match operation {
        CiOperation::Up => Operation::Up,
        CiOperation::Preview => Operation::Preview,
        CiOperation::Refresh => Operation::Refresh,
        CiOperation::Destroy => Operation::Destroy,
        CiOperation::Drift => Operation::Drift,
    }
}

/// `mara ci close --run ID`: the run's end, whatever its jobs did (it runs even when they
/// failed or were cancelled).
fn close(settings: &Settings, run_id: &str, reports: Reports) -> Result<()> {
    let deployment = Deployment::load(settings)?;
    let files = &deployment.files;
    let stack = files.required_stack()?;
    let place = ledger::place(&files.workspace, &settings.env)?;
    checks::team_ledger(&place, Some(&format!("cannot close run `{run_id}`")))?;
    let mut ledger = ledger::open(&place)?;
    let record = ledger.run(run_id)?.ok_or_else(|| {
        Error::usage(Problem::new(format!("there is no run `{run_id}` to close")))
    })?;
    if record.stack != stack.name.as_str() {
        return Err(Error::usage(Problem::new(format!(
            "run `{run_id}` is of stack {}, not {}",
            record.stack, stack.name
        ))));
    }
    // Closed: its end recorded. A run whose lease lapsed is shown abandoned, but is not closed.
    let closed = record.finished.is_some();
    if !closed {
        record_end(settings, ledger.as_mut(), &deployment, &record)?;
        retention::after_a_run(ledger.as_mut(), &files.workspace);
    }
    let record = ledger.run(run_id)?.expect("the run was read above");
    if closed {
        crate::ui::errln!("Run {run_id} was closed already ({}).", record.status);
    }
    let previews = crate::ui::recorded::previews_of(ledger.as_ref(), &record)?;
    let mut summary = crate::ui::recorded::summary_of(&record, &deployment.graph, previews);
    let result = verdict(&record, &summary);
    summary.exit_code = Some(result.as_ref().map_or_else(Error::exit_code, |()| 0));
    // Its summary, as the run's own would show it.
    let mut shown = RunSettings::started(
        record.operation,
        Selection::default(),
        true,
        settings,
        &files.workspace.settings,
    );
    shown.reports = Reports {
        github_summary: shown.reports.github_summary.take(),
        ..reports
    };
    run::summarize(settings, &shown, &summary)?;
    result
}

/// Records the end of run `record`: what no job recorded, with why, its status, and its lock
/// released.
fn record_end(
    settings: &Settings,
    ledger: &mut dyn Ledger,
    deployment: &Deployment,
    record: &RunRecord,
) -> Result<()> {
    let run_id = record.run_id.as_str();
    let finished = crate::clock::rfc3339(SystemTime::now());
    still_deploying(settings, record)?;
    let cancelled = ledger.cancel_requested(run_id)?;
    // A project whose job stopped without recording its end (killed, its runner lost) is
    // abandoned: its engine may hold its stack's own lock.
    for project in record
        .projects
        .iter()
        .filter(|p| matches!(p.status, ProjectStatus::Running | ProjectStatus::Abandoned))
    {
        ledger.project_finished(
            run_id,
            &ProjectRecord {
                status: ProjectStatus::Abandoned,
                finished: Some(finished.clone()),
                reason: Some(
                    "abandoned: its job stopped without recording its end; if its engine holds the stack's lock, clear it (`mara unlock` says how)"
                        .into(),
                ),
                ..project.clone()
            },
        )?;
    }
    for (path, reason) in unrecorded(deployment, record, cancelled) {
        ledger.project_finished(
            run_id,
            &ProjectRecord {
                path,
                status: ProjectStatus::Skipped,
                started: None,
                finished: Some(finished.clone()),
                exit_code: None,
                changes: None,
                reason: Some(reason),
                log: None,
                fingerprint: None,
            },
        )?;
    }
    let record = ledger.run(run_id)?.expect("the run was read above");
    ledger.finish(run_id, closed_status(&record, cancelled), &finished)
}

/// Refuses to close run `record` while a job of it still deploys: releasing its lock now would
/// let another run deploy the stack beside it. A preview or a drift check holds no lock: a job
/// killed without recording its end (a cancelled workflow's) is closed as abandoned.
fn still_deploying(settings: &Settings, record: &RunRecord) -> Result<()> {
    let run_id = record.run_id.as_str();
    if let Some(running) = record
        .projects
        .iter()
        .find(|p| p.status == ProjectStatus::Running)
        .filter(|_| record.status == RunStatus::Running && record.operation.mutates())
    {
        return Err(Error::Locked(Box::new(
            Problem::new(format!(
                "{} is still running in run {run_id}: the run cannot be closed yet",
                running.path
            ))
            .hint(format!(
                "close it once its job has ended, or stop the run with `{}`",
                settings.again("cancel")
            )),
        )));
    }
    Ok(())
}

/// The status of a closed run, from its projects as recorded.
fn closed_status(record: &RunRecord, cancelled: bool) -> RunStatus {
    // A preview its job ended waiting (on a project not deployed yet) is done, as in one
    // `preview`.
    let all_done = record.projects.iter().all(|p| {
        matches!(
            p.status,
            ProjectStatus::Succeeded | ProjectStatus::Unchanged
        ) || fanout::waited(p)
            || (record.operation == Operation::Drift && fanout::not_checked(p))
    });
    match (cancelled, all_done) {
        (true, _) => RunStatus::Cancelled,
        (false, true) => RunStatus::Succeeded,
        (false, false) => RunStatus::Failed,
    }
}

/// What a closed run's status means as the close job's exit: a drift check that found drift
/// exits 4, as `mara drift` does.
fn verdict(record: &RunRecord, summary: &RunSummary) -> Result<()> {
    let count = |status| summary.count(status);
    match record.status {
        RunStatus::Succeeded if record.operation == Operation::Drift && summary.drifted() > 0 => {
            Err(Error::Drifted {
                drifted: summary.drifted(),
            })
        }
        RunStatus::Succeeded => Ok(()),
        RunStatus::Cancelled => Err(Error::Interrupted),
        _ => match count(ProjectStatus::Failed) {
            0 => Err(Error::NotRun {
                count: count(ProjectStatus::Skipped)
                    + count(ProjectStatus::Cancelled)
                    + count(ProjectStatus::Abandoned)
                    + count(ProjectStatus::Waiting),
            }),
            failed => Err(Error::ProjectsFailed { failed }),
        },
    }
}

/// The run's projects no job recorded (still waiting), in the run's order, with why: the run
/// cancelled, a dependency (for destroy, a dependent) of the run that did not succeed, or no job
/// at all.
fn unrecorded(
    deployment: &Deployment,
    record: &RunRecord,
    cancelled: bool,
) -> Vec<(String, String)> {
    let graph = &deployment.graph;
    let status_of = |path: &str| {
        record
            .projects
            .iter()
            .find(|p| p.path == path)
            .map(|p| p.status)
    };
    let mut missing: Vec<(String, String)> = Vec::new();
    for project in record
        .projects
        .iter()
        .filter(|p| p.status == ProjectStatus::Waiting && !fanout::waited(p))
    {
        let Ok(i) = graph.find(&project.path) else {
            missing.push((project.path.clone(), "not run: no job recorded it".into()));
            continue;
        };
        let first = match record.operation {
            Operation::Destroy => graph.successors(i),
            _ => graph.predecessors(i),
        };
        let blocker = first
            .iter()
            .map(|(d, _)| graph.project(*d).path.clone())
            .find(|d| {
                status_of(d).is_some_and(|s| {
                    !matches!(s, ProjectStatus::Succeeded | ProjectStatus::Unchanged)
                })
            });
        let reason = match (cancelled, blocker) {
            (true, _) => "not started: the run was cancelled".to_string(),
            (false, Some(d)) => format!("depends on {d}, which did not succeed"),
            (false, None) => "not run: no job recorded it".to_string(),
        };
        missing.push((project.path.clone(), reason));
    }
    missing
}
