//! What the pages and the JSON show of the ledger (docs/commands.md, "serve"): a run as a row of
//! the list, a run with its projects as its summary shows them, a stack with its lock. The same
//! values feed the HTML and the JSON, so that the two never say different things.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::Serialize;

use crate::clock::parse_rfc3339;
use crate::engine::{Changes, Operation, ResourceDiff};
use crate::ledger::access::Action;
use crate::ledger::{Holder, RunRecord};
use crate::run::events::ProjectReport;
use crate::status::{ProjectStatus, RunStatus};
use crate::ui::report::RunSummary;

use super::svg::{Drawing, Edges};

/// A run as the list shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RunRow {
    pub run_id: String,
    pub operation: Operation,
    pub stack: String,
    pub provider: String,
    pub status: RunStatus,
    pub user: String,
    pub host: String,
    pub command: String,
    pub started: String,
    pub finished: Option<String>,
    /// Until it finished, or until now while it runs.
    pub duration_ms: Option<u64>,
    /// How many of its projects ended in each status.
    pub counts: BTreeMap<ProjectStatus, usize>,
    /// The projects that failed, in the run's order: which to look at first.
    pub failed: Vec<String>,
    /// What it came to, as its summary's last line says: its status, or what a drift check
    /// found (`1 project drifted`, `nothing drifted`).
    pub result: String,
    /// How its status is shown (the class of its badge): `drifted` for a drift check that
    /// found drift, where its status alone would say `succeeded`; else its status.
    pub shown: &'static str,
    /// What was done to it from outside: a cancel, its lock cleared — who, when, from where.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<Action>,
    /// What the workspace's policies said of it (docs/commands.md, "Policies").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::policy::Decision>,
}

impl RunRow {
    /// `record` as seen (`RunRecord::as_seen`), its projects counted when it has them, and
    /// what it came to as its `summary` says.
    pub fn of(record: &RunRecord, summary: &RunSummary) -> RunRow {
        let mut counts = BTreeMap::new();
        for project in &record.projects {
            *counts.entry(project.status).or_default() += 1;
        }
        RunRow {
            run_id: record.run_id.clone(),
            operation: record.operation,
            stack: record.stack.clone(),
            provider: record.provider.clone(),
            status: record.status,
            user: record.user.clone(),
            host: record.host.clone(),
            command: record.command.clone(),
            started: record.started.clone(),
            finished: record.finished.clone(),
            duration_ms: millis(
                Some(&record.started),
                record.finished.as_ref(),
                record.status,
            ),
            counts,
            failed: (record.projects.iter())
                .filter(|p| p.status == ProjectStatus::Failed)
                .map(|p| p.path.clone())
                .collect(),
            result: summary.result(),
            shown: match record.operation == Operation::Drift
                && record.status == RunStatus::Succeeded
                && summary.drifted() > 0
            {
                true => "drifted",
                false => record.status.as_str(),
            },
            actions: record.actions.clone(),
            policy: record.policy.clone(),
        }
    }

    /// How its status is shown: the class of its badge, and its words.
    pub fn shown(&self) -> (&'static str, &str) {
        (self.shown, &self.result)
    }

    /// Its projects' counts as words: `3 succeeded, 1 failed`.
    pub fn counts_said(&self) -> String {
        (self.counts.iter())
            .map(|(status, n)| format!("{n} {status}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Milliseconds from `started` to `finished`, or to now while the run is running.
fn millis(started: Option<&String>, finished: Option<&String>, status: RunStatus) -> Option<u64> {
    let started = parse_rfc3339(started?)?;
    let end = match finished {
        Some(finished) => parse_rfc3339(finished)?,
        None if status == RunStatus::Running => SystemTime::now(),
        None => return None,
    };
    Some(end.duration_since(started).unwrap_or_default().as_millis() as u64)
}

/// A project of a run, as the run's page shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ProjectRow {
    pub path: String,
    pub status: ProjectStatus,
    /// Its status as the page shows it: `drifted` for a project a drift check found drifted.
    pub shown: &'static str,
    pub started: Option<String>,
    pub finished: Option<String>,
    pub duration_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub changes: Option<Changes>,
    /// Its changes and notes as the summary table says them: `2 to update (stale)`.
    pub said: String,
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub diff: Vec<ResourceDiff>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drifted: Vec<ResourceDiff>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waits_on: Vec<String>,
}

/// A run with its projects, in the run's order.
#[derive(Debug, Clone, Serialize)]
pub struct RunPage {
    #[serde(flatten)]
    pub run: RunRow,
    pub projects: Vec<ProjectRow>,
    pub graph: Drawing,
    /// Who holds its stack's lock, when this run does.
    pub lock: Option<Holder>,
}

impl RunPage {
    /// The run and its projects as `summary` says them; its graph is drawn after
    /// (`routes::shaped`), from the projects as shown.
    pub fn of(record: &RunRecord, summary: &RunSummary, lock: Option<Holder>) -> RunPage {
        let projects = (summary.projects.iter())
            .map(|p| ProjectRow {
                path: p.path.clone(),
                status: p.status,
                shown: match record.operation == Operation::Drift && drifted(p) {
                    true => "drifted",
                    false => p.status.as_str(),
                },
                started: p.started.clone(),
                finished: p.finished.clone(),
                duration_ms: match p.status {
                    ProjectStatus::Running => millis(p.started.as_ref(), None, RunStatus::Running),
                    _ => millis(p.started.as_ref(), p.finished.as_ref(), record.status),
                },
                exit_code: p.exit_code,
                changes: p.changes.clone(),
                said: crate::ui::report::changes_with_notes(p, record.operation),
                reason: p.reason.clone(),
                diff: p.diff.clone(),
                drifted: p.drifted.clone(),
                waits_on: p.waits_on.clone(),
            })
            .collect();
        RunPage {
            run: RunRow::of(record, summary),
            projects,
            graph: Drawing::of(&[], Edges::Unknown("")),
            lock: lock.filter(|l| l.run_id == record.run_id),
        }
    }
}

/// Whether a drift check found `p` drifted: changed outside its engine, or that applying its
/// code would change it (`RunSummary::drifted`).
fn drifted(p: &ProjectReport) -> bool {
    p.status.is_success()
        && (!p.drifted.is_empty() || p.changes.as_ref().is_some_and(crate::engine::has_changes))
}

/// A stack: who holds its lock, and its last run of each operation.
#[derive(Debug, Clone, Serialize)]
pub struct StackRow {
    pub stack: String,
    pub lock: Option<Holder>,
    pub last: BTreeMap<Operation, RunRow>,
}

/// The operations a stack's row has a column for, in that order.
pub const OPERATIONS: [Operation; 5] = [
    Operation::Up,
    Operation::Preview,
    Operation::Refresh,
    Operation::Drift,
    Operation::Destroy,
];

/// A duration in milliseconds as people read it: `4.2s`, `3m05s`.
pub fn duration(millis: Option<u64>) -> String {
    match millis {
        None => String::new(),
        Some(ms) => crate::clock::human(std::time::Duration::from_millis(ms)),
    }
}

/// How many of a project's runs its page shows, newest first.
pub const PROJECT_RUNS: usize = 100;

/// A project across its runs.
#[derive(Debug, Clone, Serialize)]
pub struct ProjectPage {
    pub path: String,
    /// Its runs, newest first, each with the project as that run left it.
    pub runs: Vec<ProjectRun>,
    /// The newest of them that changed it: an `up` or a `destroy` in which it succeeded with
    /// changes, or with changes its engine does not count.
    pub last_change: Option<ProjectRun>,
}

/// One run of a project: the run (what it was, who ran it, how it ended — not its projects'
/// counts: it is read with this project alone), and the project's row in it.
#[derive(Debug, Clone, Serialize)]
pub struct ProjectRun {
    pub run: RunHead,
    pub project: ProjectRow,
}

/// A run as a project's page lists it.
#[derive(Debug, Clone, Serialize)]
pub struct RunHead {
    pub run_id: String,
    pub operation: Operation,
    pub stack: String,
    pub provider: String,
    pub status: crate::status::RunStatus,
    pub user: String,
    pub host: String,
    pub started: String,
    pub finished: Option<String>,
    pub duration_ms: Option<u64>,
}

impl From<RunRow> for RunHead {
    fn from(row: RunRow) -> RunHead {
        RunHead {
            run_id: row.run_id,
            operation: row.operation,
            stack: row.stack,
            provider: row.provider,
            status: row.status,
            user: row.user,
            host: row.host,
            started: row.started,
            finished: row.finished,
            duration_ms: row.duration_ms,
        }
    }
}

impl ProjectRun {
    /// Whether this run changed the project: an `up` or a `destroy` it succeeded in, with
    /// changes (or changes not counted: a command's).
    pub fn changed(&self) -> bool {
        matches!(self.run.operation, Operation::Up | Operation::Destroy)
            && self.project.status == ProjectStatus::Succeeded
            && (self.project.changes.as_ref()).is_none_or(crate::engine::has_changes)
    }
}
