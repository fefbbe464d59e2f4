//! The run summary (docs/formats.md, "The run summary") and what its forms share: the
//! `RunSummary` itself, a status in its colour, what a project's row says of its changes and
//! notes, the drift a check found, and writing the files a run was asked for. Each form is a
//! file of its own: `table.rs` (the terminal), `json.rs`, `markdown.rs` (a pull request's
//! comment, `--markdown`), `junit.rs` and `step_summary.rs` (GitHub's step summary).

mod json;
mod junit;
mod markdown;
mod step_summary;
mod table;

use std::path::Path;

use serde::Serialize;

use super::Style;
use crate::engine::{Operation, changes_summary};
use crate::error::Error;
use crate::policy::Level;
use crate::run::events::{PlannedWith, ProjectReport};
use crate::status::{ProjectStatus, RunStatus};

pub use junit::junit;
pub use markdown::{comment, comment_marker};
pub use step_summary::markdown;
pub use table::{changes, stale_notes, table, verdict};

/// `text` (a status, perhaps padded) in the colour of `status`.
pub fn paint(text: &str, status: ProjectStatus, style: Style) -> String {
    match status {
        ProjectStatus::Succeeded | ProjectStatus::Unchanged => style.green(text),
        ProjectStatus::Failed | ProjectStatus::Abandoned => style.red(text),
        ProjectStatus::Running | ProjectStatus::Waiting => style.cyan(text),
        ProjectStatus::Cancelled | ProjectStatus::Skipped => style.yellow(text),
    }
}

/// A project's status, in its colour.
pub fn status_word(status: ProjectStatus, style: Style) -> String {
    paint(status.as_str(), status, style)
}

/// Where a run's logs are, as its closing line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Logs {
    /// In this directory of the workspace.
    Here(std::path::PathBuf),
    /// In the team's ledger, under this run: a CI runner's directory is gone once its job ends.
    Ledger(String),
}

/// The run as a whole.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub run_id: String,
    pub operation: Operation,
    pub provider: String,
    pub stack: String,
    /// Succeeded, failed or cancelled.
    pub status: RunStatus,
    pub started: String,
    pub finished: String,
    pub projects: Vec<ProjectReport>,
    #[serde(skip)]
    pub duration: std::time::Duration,
    #[serde(skip)]
    pub logs: Option<Logs>,
    /// `preview --expect-no-changes`: a change is what went wrong.
    #[serde(skip)]
    pub expect_no_changes: bool,
    /// The code mara exits with for this run (docs/commands.md, "Exit codes"), when it is
    /// known as the summary is shown: a drift check that found changes succeeded, and exits 4.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// What the workspace's policies decided of the run's plans (docs/commands.md,
    /// "Policies"): every message, each project's also in its report.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::policy::Decision>,
}

impl RunSummary {
    pub fn count(&self, status: ProjectStatus) -> usize {
        self.projects.iter().filter(|p| p.status == status).count()
    }

    /// How many projects would change (or changed); a preview waiting on a project not
    /// deployed yet will.
    pub fn changed(&self) -> usize {
        self.projects
            .iter()
            .filter(|p| {
                p.status == ProjectStatus::Waiting
                    || p.changes.as_ref().is_some_and(crate::engine::has_changes)
            })
            .count()
    }

    /// The projects whose approved plan no longer held (`up --plans`).
    pub fn refused(&self) -> usize {
        (self.projects.iter())
            .filter(|p| p.approval == Some(crate::run::approval::Held::Refused))
            .count()
    }

    /// A drift check's projects that no longer match: changed outside their engine, or that
    /// applying would change.
    pub fn drifted(&self) -> usize {
        (self.projects.iter())
            .filter(|p| {
                !p.drifted.is_empty() || p.changes.as_ref().is_some_and(crate::engine::has_changes)
            })
            .count()
    }

    /// The run's result in a word or two: its status, or for a drift check that found changes,
    /// that.
    pub fn result(&self) -> String {
        if self.operation == Operation::Drift && self.status == RunStatus::Succeeded {
            return match self.drifted() {
                0 => "nothing drifted".to_string(),
                n => format!(
                    "{n} {} drifted",
                    crate::error::plural(n, "project", "projects")
                ),
            };
        }
        let denied = (self.policy.as_ref()).map_or(0, |d| d.denied().count());
        if denied > 0 && self.status == RunStatus::Succeeded {
            return format!(
                "the policies deny the plan ({denied} {})",
                crate::error::plural(denied, "denial", "denials")
            );
        }
        match self.changed() {
            n if self.expect_no_changes && n > 0 && self.status == RunStatus::Succeeded => {
                format!(
                    "{n} {} would change, where no change was expected",
                    crate::error::plural(n, "project", "projects")
                )
            }
            _ => self.status.to_string(),
        }
    }
}

/// A project's changes and notes as one plain line, as its row in the table says them: for the
/// web page (`serve`).
pub fn changes_with_notes(p: &ProjectReport, operation: Operation) -> String {
    with_notes(changes_cell(p, operation), p)
}

/// What a project's row says of its changes: its counts, or for a drift check what it found.
fn changes_cell(p: &ProjectReport, operation: Operation) -> String {
    match &p.changes {
        _ if operation == Operation::Drift && p.status.is_success() => drift_summary(p),
        Some(changes) => changes_summary(changes),
        None => String::new(),
    }
}

/// `text`, then the project's notes (`notes`).
fn with_notes(mut text: String, p: &ProjectReport) -> String {
    for note in notes(p) {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&note);
    }
    text
}

/// A drift check's finding for a project: what changed outside its engine, and what applying
/// its code would change.
fn drift_summary(p: &ProjectReport) -> String {
    let applying = (p.changes.as_ref()).filter(|c| crate::engine::has_changes(c));
    match (p.drifted.len(), applying) {
        (0, None) => "no drift".to_string(),
        (0, Some(changes)) => format!("applying would change {}", changes_summary(changes)),
        (n, None) => format!("{n} drifted"),
        (n, Some(changes)) => format!(
            "{n} drifted; applying would change {}",
            changes_summary(changes)
        ),
    }
}

/// The resources a drift check found changed outside their engines, a line each (with their
/// properties when it showed them).
pub fn drift_lines(summary: &RunSummary) -> Vec<String> {
    let mut lines = Vec::new();
    for p in summary.projects.iter().filter(|p| !p.drifted.is_empty()) {
        for diff in &p.drifted {
            let mut resource = diff.lines().into_iter();
            if let Some(first) = resource.next() {
                lines.push(format!(
                    "{}: {}",
                    p.path,
                    first.trim_start_matches(['~', '+', '-', ' '])
                ));
            }
            lines.extend(resource.map(|l| format!("  {}", l.trim_start())));
        }
    }
    lines
}

/// What the table says after a project's changes: how many times a retry ran it, `(stale)`,
/// `(planned inputs)`, how its approved plan went.
fn notes(p: &ProjectReport) -> Vec<String> {
    let mut notes = Vec::new();
    if p.attempts > 1 {
        notes.push(format!("({} attempts)", p.attempts));
    }
    if !p.stale.is_empty() {
        notes.push("(stale)".to_string());
    }
    match p.planned_with {
        Some(PlannedWith::Current) => notes.push("(current inputs)".to_string()),
        Some(PlannedWith::Projected) => notes.push("(planned inputs)".to_string()),
        Some(PlannedWith::Deferred) | None => {}
    }
    if let Some(held) = p
        .approval
        .filter(|h| *h != crate::run::approval::Held::Refused)
    {
        notes.push(format!("({})", held.as_str()));
    }
    let level = |level| p.policy.iter().filter(|m| m.level == level).count();
    match (level(Level::Deny), level(Level::Warn)) {
        (0, 0) => {}
        (0, _) => notes.push("(policy warnings)".to_string()),
        (_, _) => notes.push("(denied by policy)".to_string()),
    }
    notes
}

/// What the policies said of the run, a line each, denials first: `deny  PROJECT: message
/// (rule)` — the project's name where a per-project package said it.
pub fn policy_lines(summary: &RunSummary, style: Style) -> Vec<String> {
    (summary.policy.as_ref()).map_or_else(Vec::new, |d| decision_lines(d, style))
}

/// A decision's messages, a line each, as `policy_lines` says them.
pub fn decision_lines(decision: &crate::policy::Decision, style: Style) -> Vec<String> {
    (decision.messages.iter())
        .map(|m| {
            let level = match m.level {
                Level::Deny => style.red("deny"),
                Level::Warn => style.yellow("warn"),
            };
            let about = (m.project.as_deref()).map_or_else(String::new, |p| format!("{p}: "));
            format!("{level}  {about}{} ({})", m.text, m.rule)
        })
        .collect()
}

/// Writes the JSON report, the JUnit file and the GitHub step summary (appended), each where it
/// was asked for. One that cannot be written does not stop the others: the failures are returned,
/// for the run to report without changing what its exit says about the deployment.
pub fn write_files(
    summary: &RunSummary,
    json: Option<&Path>,
    junit: Option<&Path>,
    github_summary: Option<&Path>,
    comment: Option<&Path>,
) -> Vec<Error> {
    let mut failed = Vec::new();
    if let Some(path) = comment
        && let Err(e) = std::fs::write(path, self::comment(summary))
    {
        failed.push(Error::write(path, e));
    }
    if let Some(path) = json
        && let Err(e) = std::fs::write(path, summary.to_json())
    {
        failed.push(Error::write(path, e));
    }
    if let Some(path) = junit
        && let Err(e) = std::fs::write(path, self::junit(summary))
    {
        failed.push(Error::write(path, e));
    }
    if let Some(path) = github_summary {
        use std::io::Write;
        let appended = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .and_then(|mut file| file.write_all(markdown(summary).as_bytes()));
        if let Err(e) = appended {
            failed.push(Error::write(path, e));
        }
    }
    failed
}
