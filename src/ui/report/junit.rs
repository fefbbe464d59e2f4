//! The JUnit XML report (`--junit FILE`) for CI systems: one test case per project, a failure
//! for each that failed (or drifted, or would change where no change was expected), a skip with
//! its reason for each that did not run.

use std::fmt::Write as _;

use super::{RunSummary, drift_summary};
use crate::engine::{Operation, changes_summary};
use crate::run::events::ProjectReport;
use crate::status::ProjectStatus;

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
    fn xml_is_escaped() {
        assert_eq!(xml("a<b & \"c\"\u{1b}[0m"), "a&lt;b &amp; &quot;c&quot;[0m");
    }
}
