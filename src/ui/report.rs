//! The run summary (docs/formats.md, "The run summary") and its forms: the table people read, the
//! JSON report, a JUnit file for CI systems, and a Markdown table for GitHub's step summary.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::Style;
use crate::engine::{Operation, changes_summary};
use crate::error::Error;
use crate::fingerprint::Change;
use crate::run::events::{PlannedWith, ProjectReport};
use crate::status::{ProjectStatus, RunStatus};

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

    pub fn to_json(&self) -> String {
        let mut json = serde_json::to_value(self).expect("the summary serializes");
        // A drift check says what it found: the run went well, the expectation did not.
        if self.expect_no_changes {
            json["expect_no_changes"] = true.into();
            json["unexpected_changes"] = self.changed().into();
        }
        // The exit code last, as docs/commands.md says (the fields above were added after it).
        if let Some(object) = json.as_object_mut()
            && let Some(code) = object.remove("exit_code")
        {
            object.insert("exit_code".into(), code);
        }
        format!(
            "{}\n",
            serde_json::to_string_pretty(&json).expect("the summary serializes")
        )
    }

    /// The run's result in a word or two: its status, or for a drift check that found changes,
    /// that.
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
    notes
}

/// The summary table and its closing line.
pub fn table(summary: &RunSummary, style: Style) -> String {
    let rows: Vec<[String; 5]> = summary
        .projects
        .iter()
        .map(|p| {
            let duration = p
                .duration_ms
                .map(|ms| crate::clock::human(std::time::Duration::from_millis(ms)))
                .unwrap_or_else(|| "-".into());
            let changes = match p.reason.as_deref() {
                Some(reason) if p.status != ProjectStatus::Succeeded => reason.to_string(),
                _ => changes_cell(p, summary.operation),
            };
            let changes = with_notes(changes, p);
            [
                p.path.clone(),
                summary.operation.to_string(),
                p.status.to_string(),
                duration,
                changes,
            ]
        })
        .collect();
    let statuses: Vec<ProjectStatus> = summary.projects.iter().map(|p| p.status).collect();
    let headers = ["PROJECT", "OPERATION", "RESULT", "DURATION", "CHANGES"];
    let widths = super::column_widths(headers, &rows);
    let pad = super::pad;
    let mut out = String::new();
    let header: Vec<String> = (0..4).map(|c| pad(headers[c], widths[c])).collect();
    let _ = writeln!(
        out,
        "{}",
        style.bold(&format!("{}  {}", header.join("  "), headers[4]))
    );
    for (row, status) in rows.iter().zip(statuses) {
        let result = paint(&pad(&row[2], widths[2]), status, style);
        let _ = writeln!(
            out,
            "{}  {}  {result}  {}  {}",
            pad(&row[0], widths[0]),
            pad(&row[1], widths[1]),
            pad(&row[3], widths[3]),
            row[4]
        );
    }
    out.push('\n');
    out.push_str(&stale_notes(summary, style));
    out.push_str(&verdict(summary, style));
    out.push('\n');
    out
}

/// The previews that read what the run would change, one line each, under a heading; nothing
/// when there are none.
pub fn stale_notes(summary: &RunSummary, style: Style) -> String {
    let mut out = String::new();
    let projected = crate::run::events::projected_lines(&summary.projects, &str::to_string);
    if !projected.is_empty() {
        let notes: String = projected.iter().map(|l| format!("  {l}\n")).collect();
        let heading = "Planned inputs: previewed with the values an update before them plans";
        let _ = write!(out, "{}\n{notes}\n", style.bold(heading));
    }
    let lines = crate::run::events::stale_lines(&summary.projects, &str::to_string);
    if !lines.is_empty() {
        let notes: String = lines.iter().map(|l| format!("  {l}\n")).collect();
        let heading = match summary.operation {
            Operation::Drift => "Stale: they read outputs that applying would change",
            _ => "Stale previews: they read outputs that an update would change",
        };
        let _ = write!(out, "{}\n{notes}\n", style.bold(heading));
    }
    let drifted = drift_lines(summary);
    if !drifted.is_empty() {
        let notes: String = drifted.iter().map(|l| format!("  {l}\n")).collect();
        let heading = "Drifted: changed outside their engines";
        let _ = write!(out, "{}\n{notes}\n", style.bold(heading));
    }
    out
}

/// `✓ up on stack dev: 14 projects succeeded in 5.2s` and the like.
pub fn verdict(summary: &RunSummary, style: Style) -> String {
    let mut counts = Vec::new();
    for status in [
        ProjectStatus::Succeeded,
        ProjectStatus::Unchanged,
        ProjectStatus::Failed,
        ProjectStatus::Skipped,
        ProjectStatus::Waiting,
        ProjectStatus::Cancelled,
    ] {
        let n = summary.count(status);
        if n > 0 {
            counts.push(format!("{n} {status}"));
        }
    }
    let took = crate::clock::human(summary.duration);
    let what = format!("{} on stack {}", summary.operation, summary.stack);
    let logs = match &summary.logs {
        Some(Logs::Here(dir)) => format!("; logs in {}", dir.display()),
        Some(Logs::Ledger(run_id)) => format!("; logs: `mara logs {run_id}`"),
        None => String::new(),
    };
    let drift = summary.changed();
    let refused = summary.refused();
    match summary.status {
        RunStatus::Failed if refused > 0 && summary.count(ProjectStatus::Failed) == 0 => {
            style.red(&format!(
                "✗ {what}: {}; {}{logs}",
                counts.join(", "),
                match refused {
                    1 => "the approved plan of 1 project no longer holds".to_string(),
                    n => format!("the approved plans of {n} projects no longer hold"),
                }
            ))
        }
        RunStatus::Succeeded if summary.operation == Operation::Drift => match summary.drifted() {
            0 => style.green(&format!(
                "✓ {what}: nothing drifted ({}) in {took}",
                counts.join(", ")
            )),
            n => style.red(&format!(
                "✗ {what}: {n} {} drifted: what is deployed no longer matches the cloud or the code",
                crate::error::plural(n, "project", "projects")
            )),
        },
        RunStatus::Succeeded if summary.expect_no_changes && drift > 0 => style.red(&format!(
            "✗ {what}: {drift} {} would change, where no change was expected",
            crate::error::plural(drift, "project", "projects")
        )),
        RunStatus::Succeeded => style.green(&format!("✓ {what}: {} in {took}", counts.join(", "))),
        RunStatus::Cancelled => style.yellow(&format!(
            "! {what} was interrupted: {}{logs}",
            counts.join(", ")
        )),
        _ => style.red(&format!("✗ {what} failed: {}{logs}", counts.join(", "))),
    }
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

/// One line per project: whether `up --changed` runs it, and why.
pub fn changes(changes: &[(String, Change)], style: Style) -> String {
    changes
        .iter()
        .map(|(path, change)| {
            let mark = if *change == Change::Unchanged {
                style.dim("skip")
            } else {
                style.cyan("run ")
            };
            format!("{mark} {path}: {}\n", change.reason())
        })
        .collect()
}

/// A JUnit XML report: one test case per project.
pub fn junit(summary: &RunSummary) -> String {
    // A drift check (`mara drift`, `preview --expect-no-changes`) fails each project that
    // drifted, or would change.
    let drifted = |p: &ProjectReport| {
        let changes = p.changes.as_ref().is_some_and(crate::engine::has_changes);
        match summary.operation {
            Operation::Drift => {
                p.status != ProjectStatus::Failed && (changes || !p.drifted.is_empty())
            }
            _ => {
                summary.expect_no_changes
                    && p.status != ProjectStatus::Failed
                    && (p.status == ProjectStatus::Waiting || changes)
            }
        }
    };
    let failures = summary.count(ProjectStatus::Failed)
        + summary.projects.iter().filter(|p| drifted(p)).count();
    let skipped = summary.count(ProjectStatus::Skipped)
        + summary.count(ProjectStatus::Cancelled)
        + summary.count(ProjectStatus::Waiting)
        - summary
            .projects
            .iter()
            .filter(|p| drifted(p) && p.status == ProjectStatus::Waiting)
            .count();
    let seconds = summary.duration.as_secs_f64();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"mara\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" time=\"{seconds:.3}\">",
        summary.projects.len()
    );
    let _ = writeln!(
        out,
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" time=\"{seconds:.3}\" timestamp=\"{}\">",
        xml(&format!(
            "mara {} {} ({})",
            summary.operation, summary.stack, summary.provider
        )),
        summary.projects.len(),
        xml(&summary.started),
    );
    for project in &summary.projects {
        let time = project.duration_ms.unwrap_or(0) as f64 / 1000.0;
        let _ = write!(
            out,
            "    <testcase classname=\"{}\" name=\"{}\" time=\"{time:.3}\"",
            xml(&format!("mara.{}.{}", summary.provider, summary.operation)),
            xml(&project.path)
        );
        let reason = project
            .reason
            .clone()
            .unwrap_or_else(|| project.status.to_string());
        match project.status {
            _ if drifted(project) => {
                let changes = match &project.changes {
                    Some(changes) => changes_summary(changes),
                    None => reason.clone(),
                };
                let message = match summary.operation {
                    Operation::Drift => format!("drifted: {}", drift_summary(project)),
                    _ => format!("would change, where no change was expected: {changes}"),
                };
                let _ = writeln!(
                    out,
                    ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>",
                    xml(&message),
                    xml(&message)
                );
            }
            ProjectStatus::Failed => {
                let _ = writeln!(
                    out,
                    ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>",
                    xml(&reason),
                    xml(&reason)
                );
            }
            ProjectStatus::Skipped | ProjectStatus::Cancelled | ProjectStatus::Waiting => {
                let _ = writeln!(
                    out,
                    ">\n      <skipped message=\"{}\"/>\n    </testcase>",
                    xml(&reason)
                );
            }
            _ => {
                let changes = project
                    .changes
                    .as_ref()
                    .map(changes_summary)
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    ">\n      <system-out>{}</system-out>\n    </testcase>",
                    xml(&format!("{}: {changes}", project.status))
                );
            }
        }
    }
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

/// A Markdown section for `$GITHUB_STEP_SUMMARY` (docs/commands.md, "Preview in CI"): the table;
/// for a preview, the stale previews and each project's diff, collapsed under its name.
pub fn markdown(summary: &RunSummary) -> String {
    markdown_as(summary, Markdown::STEP_SUMMARY)
}

/// The summary as one pull-request comment (`--markdown FILE`, docs/commands.md "ci"): first
/// the line that finds the comment again (`comment_marker`); the table lists only the projects
/// that change, fail or have a note, and the diffs are kept within what GitHub takes of a
/// comment.
pub fn comment(summary: &RunSummary) -> String {
    let marker = comment_marker(summary.operation, &summary.provider, &summary.stack);
    let mut out = format!("{marker}\n{}", markdown_as(summary, Markdown::COMMENT));
    if out.len() > COMMENT_MAX {
        // The table and notes first: the diffs go.
        let bare = Markdown {
            diff_budget: 0,
            ..Markdown::COMMENT
        };
        out = format!("{marker}\n{}", markdown_as(summary, bare));
    }
    if out.len() > COMMENT_MAX {
        // At a line's end: a row is whole or gone.
        let mut end = COMMENT_MAX - 300;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        let end = out[..end].rfind('\n').map_or(end, |at| at + 1);
        out.truncate(end);
        let _ = writeln!(
            out,
            "\n_Cut here: a comment holds 65,536 characters. The run's step summary has every project, and `mara logs {}` every log._",
            summary.run_id
        );
    }
    out
}

/// The HTML comment that begins a pull request's comment of the previews of `stack` of
/// `provider`: how the workflow finds it again to update it (a name's characters beyond
/// `[A-Za-z0-9_.-]` as `-`, so that it is safe in the workflow's shell and jq).
pub fn comment_marker(operation: Operation, provider: &str, stack: &str) -> String {
    let safe = |name: &str| -> String {
        (name.chars())
            .map(|c| match c.is_ascii_alphanumeric() || "_.-".contains(c) {
                true => c,
                false => '-',
            })
            .collect()
    };
    format!(
        "<!-- mara {operation}: provider {}, stack {} -->",
        safe(provider),
        safe(stack)
    )
}

/// The most of a comment's body mara writes: GitHub takes 65,536 characters, and the workflow's
/// step adds its own first line and a link to the run.
const COMMENT_MAX: usize = 64_000;

/// How much a Markdown summary shows.
struct Markdown {
    /// Every project in the table, or only those that change, fail or have a note.
    every_project: bool,
    /// Diff lines shown per project, and characters of diff in all.
    diff_lines: usize,
    diff_budget: usize,
    /// The most characters of a project's reason in the table.
    reason_max: usize,
}

impl Markdown {
    /// GitHub keeps 1 MiB per step.
    const STEP_SUMMARY: Markdown = Markdown {
        every_project: true,
        diff_lines: 400,
        diff_budget: 512 * 1024,
        reason_max: usize::MAX,
    };
    const COMMENT: Markdown = Markdown {
        every_project: false,
        diff_lines: 150,
        diff_budget: 40 * 1024,
        reason_max: 600,
    };
}

fn markdown_as(summary: &RunSummary, shape: Markdown) -> String {
    let mut out = format!(
        "### mara {} on stack `{}` ({}): {}\n\n",
        summary.operation,
        summary.stack,
        summary.provider,
        summary.result()
    );
    // A comment lists what a reviewer acts on: changes, failures, stale or planned previews.
    let listed = |p: &&ProjectReport| {
        shape.every_project
            || !p.status.is_success()
            || p.changes.as_ref().is_some_and(crate::engine::has_changes)
            || !p.stale.is_empty()
            || !p.projected.is_empty()
            || p.approval.is_some()
    };
    let rows: Vec<&ProjectReport> = summary.projects.iter().filter(listed).collect();
    if !rows.is_empty() {
        out.push_str("| project | result | duration | changes |\n|---|---|---|---|\n");
    }
    for p in &rows {
        out.push_str(&markdown_row(p, summary.operation, shape.reason_max));
    }
    let unlisted = summary.projects.len() - rows.len();
    let projects = crate::error::plural(unlisted, "project", "projects");
    match (unlisted, rows.is_empty()) {
        (0, _) => {}
        (_, true) => {
            let _ = writeln!(out, "No changes in the {unlisted} {projects}.");
        }
        (_, false) => {
            let _ = writeln!(out, "\n{unlisted} more {projects}: no changes.");
        }
    }
    out.push('\n');
    out.push_str(&markdown_notes(summary));
    out.push_str(&markdown_diffs(summary, &shape));
    if !summary.run_id.is_empty() {
        let _ = writeln!(
            out,
            "Run `{}`: `mara logs {}` shows every project's log.",
            summary.run_id, summary.run_id
        );
    }
    out
}

/// A project's row of the table, its reason cut at `reason_max` characters.
fn markdown_row(p: &ProjectReport, operation: Operation, reason_max: usize) -> String {
    let duration = p
        .duration_ms
        .map(|ms| crate::clock::human(std::time::Duration::from_millis(ms)))
        .unwrap_or_default();
    let detail = match &p.reason {
        Some(reason) if reason.chars().count() > reason_max => {
            let cut: String = reason.chars().take(reason_max).collect();
            format!("{}… (its log has the rest)", cut.replace('|', "\\|"))
        }
        Some(reason) => reason.replace('|', "\\|"),
        None => changes_cell(p, operation),
    };
    let detail = with_notes(detail, p);
    format!("| `{}` | {} | {duration} | {detail} |\n", p.path, p.status)
}

/// The previews made with planned inputs, and the stale ones.
fn markdown_notes(summary: &RunSummary) -> String {
    let mut out = String::new();
    let projected = crate::run::events::projected_lines(&summary.projects, &|p| format!("`{p}`"));
    if !projected.is_empty() {
        out.push_str(
            "**Planned inputs.** Previewed with the values an update before them plans:\n\n",
        );
        for line in projected {
            let _ = writeln!(out, "- {}", markdown_text(&line));
        }
        out.push('\n');
    }
    let stale = crate::run::events::stale_lines(&summary.projects, &|p| format!("`{p}`"));
    if !stale.is_empty() {
        out.push_str("**Stale previews.** They read outputs that an update would change:\n\n");
        for line in stale {
            let _ = writeln!(out, "- {}", markdown_text(&line));
        }
        out.push('\n');
    }
    let drifted = drift_lines(summary);
    if !drifted.is_empty() {
        out.push_str("**Drifted.** Changed outside their engines:\n\n");
        for line in drifted {
            let _ = writeln!(out, "    {}", line.replace('`', "'"));
        }
        out.push('\n');
    }
    out
}

/// Each project's diff, collapsed under its name, within `shape`'s budget: every character of
/// the section counts, and a project whose diff would not begin within it is counted at the end.
fn markdown_diffs(summary: &RunSummary, shape: &Markdown) -> String {
    let mut out = String::new();
    let with_diffs: Vec<&ProjectReport> = (summary.projects.iter())
        .filter(|p| !p.diff.is_empty())
        .collect();
    for (n, p) in with_diffs.iter().enumerate() {
        // Room for its header, its first lines and its note.
        if out.len() + 1024 > shape.diff_budget {
            let left = with_diffs.len() - n;
            let _ = writeln!(
                out,
                "{left} more {} diffs not shown here: `mara logs {}` shows them.\n",
                crate::error::plural(left, "project's", "projects'"),
                summary.run_id
            );
            break;
        }
        out.push_str(&markdown_diff(
            p,
            shape.diff_lines,
            shape.diff_budget - out.len(),
            &summary.run_id,
        ));
    }
    out
}

/// One project's diff within `budget` characters and `most` lines.
fn markdown_diff(p: &ProjectReport, most: usize, budget: usize, run_id: &str) -> String {
    let mut out = String::new();
    let lines: Vec<String> = p.diff.iter().flat_map(|d| d.lines()).collect();
    let changes = p.changes.as_ref().map(changes_summary).unwrap_or_default();
    let _ = writeln!(
        out,
        "<details><summary><code>{}</code>: {}</summary>\n",
        html(&p.path),
        html(&changes)
    );
    let fence = "`".repeat(lines.iter().map(|l| backticks(l)).max().unwrap_or(0).max(2) + 1);
    let _ = writeln!(out, "{fence}diff");
    let mut shown = 0;
    // What closes it: the fence, the note, the tags.
    let room = budget.saturating_sub(out.len() + 512);
    let mut used = 0;
    for line in &lines {
        if used + line.len() + 1 > room || shown == most {
            break;
        }
        used += line.len() + 1;
        shown += 1;
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "{fence}");
    if shown < lines.len() {
        let _ = writeln!(
            out,
            "\n{} more {}: `mara logs {run_id} {}` shows the whole diff.",
            lines.len() - shown,
            crate::error::plural(lines.len() - shown, "line", "lines"),
            p.path
        );
    }
    out.push_str("\n</details>\n\n");
    out
}

/// The longest run of backticks in `line`: a code fence must be longer.
fn backticks(line: &str) -> usize {
    line.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

/// Text in a Markdown list item: what would start markup (`<`, a table's `|`) escaped; backquoted
/// names stay code.
fn markdown_text(text: &str) -> String {
    text.replace('<', "&lt;").replace('|', "\\|")
}

fn html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn xml(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control() || matches!(c, '\n' | '\t'))
        .map(|c| match c {
            '&' => "&amp;".to_string(),
            '<' => "&lt;".to_string(),
            '>' => "&gt;".to_string(),
            '"' => "&quot;".to_string(),
            '\'' => "&apos;".to_string(),
            c => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_run_points_at_its_logs_where_they_stay() {
        let summary = |logs| RunSummary {
            run_id: "gl-1".into(),
            operation: Operation::Up,
            provider: "aws".into(),
            stack: "dev".into(),
            status: RunStatus::Failed,
            started: String::new(),
            finished: String::new(),
            projects: Vec::new(),
            duration: std::time::Duration::from_secs(2),
            logs: Some(logs),
            expect_no_changes: false,
            exit_code: None,
        };
        let here = Logs::Here(".mara/logs/r1".into());
        assert_eq!(
            verdict(&summary(here), Style::default()),
            "✗ up on stack dev failed: ; logs in .mara/logs/r1"
        );
        // A job of a fanned-out run: its runner's directory goes with it.
        assert_eq!(
            verdict(&summary(Logs::Ledger("gl-1".into())), Style::default()),
            "✗ up on stack dev failed: ; logs: `mara logs gl-1`"
        );
    }

    fn preview_of(projects: Vec<ProjectReport>) -> RunSummary {
        RunSummary {
            run_id: "gh-1-1".into(),
            operation: Operation::Preview,
            provider: "my provider".into(),
            stack: "dev".into(),
            status: RunStatus::Failed,
            started: String::new(),
            finished: String::new(),
            projects,
            duration: std::time::Duration::from_secs(2),
            logs: None,
            expect_no_changes: false,
            exit_code: None,
        }
    }

    fn previewed(
        path: &str,
        outcome: crate::run::events::Outcome,
        changes: &[(&str, u64)],
    ) -> ProjectReport {
        let changes = changes.iter().map(|(op, n)| (op.to_string(), *n)).collect();
        ProjectReport::new(
            path.into(),
            None,
            crate::run::events::Finished {
                changes: Some(changes),
                ..crate::run::events::Finished::without_running(outcome)
            },
        )
    }

    #[test]
    fn a_pull_request_comment_lists_what_changes_and_starts_with_its_marker() {
        use crate::run::events::Outcome;
        let mut vpc = previewed("infra/vpc", Outcome::Succeeded, &[("update", 1)]);
        vpc.diff = vec![crate::engine::ResourceDiff {
            op: "update".into(),
            resource: "aws:ec2/vpc:Vpc (main)".into(),
            properties: vec![crate::engine::PropertyDiff {
                path: "tags.team".into(),
                kind: "update".into(),
                old: Some("\"a\"".into()),
                new: Some("\"b\"".into()),
            }],
        }];
        let dns = previewed("infra/dns", Outcome::Unchanged, &[("same", 3)]);
        let mut app = previewed("apps/web", Outcome::Unchanged, &[("same", 2)]);
        app.stale = vec![crate::run::events::Stale {
            reads: "infra/vpc".into(),
            outputs: vec!["vpc_id".into()],
        }];
        let failed = previewed(
            "apps/api",
            Outcome::Failed {
                code: Some(255),
                reason: "the engine failed | exit 255".into(),
            },
            &[],
        );
        let summary = preview_of(vec![vpc, dns, app, failed]);
        assert_eq!(
            comment(&summary),
            "<!-- mara preview: provider my-provider, stack dev -->
### mara preview on stack `dev` (my provider): failed

| project | result | duration | changes |
|---|---|---|---|
| `infra/vpc` | succeeded |  | ~1 |
| `apps/web` | unchanged |  | no changes (stale) |
| `apps/api` | failed |  | the engine failed \\| exit 255 |

1 more project: no changes.

**Stale previews.** They read outputs that an update would change:

- `apps/web` reads `infra/vpc`, whose output `vpc_id` changes: this preview used its current value

<details><summary><code>infra/vpc</code>: ~1</summary>

```diff
~ aws:ec2/vpc:Vpc (main)
    ~ tags.team: \"a\" => \"b\"
```

</details>

Run `gh-1-1`: `mara logs gh-1-1` shows every project's log.
"
        );
        // The step summary lists every project.
        assert!(markdown(&summary).contains("| `infra/dns` | unchanged |"));
    }

    #[test]
    fn a_pull_request_comment_is_cut_to_what_github_takes() {
        use crate::run::events::Outcome;
        let reason = "x".repeat(300);
        let projects = (0..400)
            .map(|i| {
                let outcome = Outcome::Failed {
                    code: Some(1),
                    reason: reason.clone(),
                };
                previewed(&format!("p{i}"), outcome, &[])
            })
            .collect();
        let text = comment(&preview_of(projects));
        assert!(text.len() <= COMMENT_MAX, "{}", text.len());
        assert!(text.starts_with("<!-- mara preview: provider my-provider, stack dev -->\n"));
        assert!(
            text.ends_with("and `mara logs gh-1-1` every log._\n"),
            "{}",
            &text[text.len() - 300..]
        );
    }

    #[test]
    fn xml_is_escaped() {
        assert_eq!(xml("a<b & \"c\"\u{1b}[0m"), "a&lt;b &amp; &quot;c&quot;[0m");
    }
}
