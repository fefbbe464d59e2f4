//! What a run tells the rest of mara while it goes on: typed events, delivered in order to every
//! `Sink` — the terminal reporter, the ledger recorder, the confirmation's line collector. The
//! runner never prints; a sink decides what an event means to it.

use std::time::SystemTime;

use serde::Serialize;

use super::interrupt::{Cause, InterruptLevel};
use super::process::Stream;
use crate::engine::{Changes, Operation};
use crate::status::{ProjectStatus, RunStatus};

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
    /// Not touched: the stack does not exist for this project (a `destroy` or `refresh` of a stack
    /// never deployed there). Shown as skipped; unlike a skip, its dependents may go on.
    Absent {
        reason: String,
    },
    /// Stopped by an interruption. `killed`: by SIGKILL (a second interruption), which an engine
    /// cannot clean up after — it says how to clear the lock the engine may still hold.
    Cancelled {
        killed: Option<String>,
    },
}

impl Outcome {
    pub fn status(&self) -> ProjectStatus {
        match self {
            Outcome::Succeeded => ProjectStatus::Succeeded,
            Outcome::Unchanged => ProjectStatus::Unchanged,
            Outcome::Failed { .. } => ProjectStatus::Failed,
            Outcome::Skipped { .. } | Outcome::Absent { .. } => ProjectStatus::Skipped,
            Outcome::Cancelled { .. } => ProjectStatus::Cancelled,
        }
    }

    /// Whether the projects waiting for it may start.
    pub fn lets_dependents_run(&self) -> bool {
        matches!(
            self,
            Outcome::Succeeded | Outcome::Unchanged | Outcome::Absent { .. }
        )
    }

    pub fn reason(&self) -> Option<&str> {
        match self {
            Outcome::Failed { reason, .. }
            | Outcome::Skipped { reason }
            | Outcome::Absent { reason }
            | Outcome::Cancelled {
                killed: Some(reason),
            } => Some(reason),
            _ => None,
        }
    }
}

/// What a project's task returns to the scheduler.
#[derive(Debug)]
pub struct Finished {
    pub outcome: Outcome,
    pub exit_code: Option<i32>,
    pub changes: Option<Changes>,
    pub log: Option<std::path::PathBuf>,
    /// Whether its engine said it created the project's stack.
    pub created_stack: bool,
}

/// One project of a run, as the summary and the report show it (docs/formats.md, "The run
/// summary").
#[derive(Debug, Clone, Serialize)]
pub struct ProjectReport {
    pub path: String,
    pub status: ProjectStatus,
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
    /// Whether its engine said it created the project's stack (`stack select --create`).
    #[serde(skip)]
    pub created_stack: bool,
}

impl ProjectReport {
    /// The report of a project that started at `started` (`None`: never started) and ended now.
    pub fn new(path: String, started: Option<SystemTime>, finished: Finished) -> ProjectReport {
        let end = started.map(|_| SystemTime::now());
        let duration_ms = started
            .zip(end)
            .map(|(s, e)| e.duration_since(s).unwrap_or_default().as_millis() as u64);
        ProjectReport {
            path,
            status: finished.outcome.status(),
            started: started.map(crate::clock::rfc3339),
            finished: end.map(crate::clock::rfc3339),
            duration_ms,
            exit_code: finished.exit_code,
            changes: finished.changes,
            reason: finished.outcome.reason().map(str::to_string),
            outcome: finished.outcome,
            log: finished.log,
            created_stack: finished.created_stack,
        }
    }
}

/// What happens in a run, in the order it happens. `index` is a project's position in the run
/// plan.
#[derive(Debug, Clone)]
pub enum Event {
    RunStarted {
        operation: Operation,
        projects: usize,
    },
    ProjectStarted {
        index: usize,
        path: String,
    },
    /// One line of a project's output (already redacted).
    Line {
        index: usize,
        path: String,
        stream: Stream,
        text: String,
    },
    ProjectFinished {
        index: usize,
        report: ProjectReport,
    },
    /// Ctrl-C, SIGTERM or `mara cancel`: the running engines were sent SIGINT (`Graceful`) or
    /// SIGKILL (`Kill`).
    Interrupting {
        level: InterruptLevel,
        cause: Cause,
    },
    RunFinished {
        status: RunStatus,
    },
}

/// Something that follows a run's events.
pub trait Sink {
    fn handle(&mut self, event: &Event);
}

/// How a run as a whole ended: interrupted, else failed when a project failed.
pub fn run_status(reports: &[ProjectReport], interrupted: bool) -> RunStatus {
    if interrupted {
        RunStatus::Cancelled
    } else if reports.iter().any(|r| r.status == ProjectStatus::Failed) {
        RunStatus::Failed
    } else {
        RunStatus::Succeeded
    }
}
