//! The terminal's forms of the run summary: the table and its closing line (the verdict), the
//! notes under it (planned inputs, stale previews, drift), and the lines that say which
//! projects `--changed` runs and which it skips.

use std::fmt::Write as _;

use super::{Logs, RunSummary, Style, changes_cell, drift_lines, paint, with_notes};
use crate::engine::Operation;
use crate::fingerprint::Change;
use crate::status::{ProjectStatus, RunStatus};

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
    let widths = crate::ui::column_widths(headers, &rows);
    let pad = crate::ui::pad;
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
    let policies = super::policy_lines(summary, style);
    if !policies.is_empty() {
        let notes: String = policies.iter().map(|l| format!("  {l}\n")).collect();
        let _ = write!(out, "{}\n{notes}\n", style.bold("Policies"));
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
    let denied = (summary.policy.as_ref()).map_or(0, |d| d.denied().count());
    match summary.status {
        RunStatus::Succeeded if denied > 0 => style.red(&format!(
            "✗ {what}: {}; the policies deny the plan ({denied} {})",
            counts.join(", "),
            crate::error::plural(denied, "denial", "denials")
        )),
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
            policy: None,
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
}
