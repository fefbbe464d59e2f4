//! The summary in Markdown: the body both GitHub forms are made of (the table, the notes, each
//! project's diff collapsed under its name, within a `Markdown` shape's limits), and a pull
//! request's comment of it (`--markdown FILE`, docs/commands.md "ci"), which begins with the
//! marker that finds it again and is kept within what GitHub takes of a comment.

use std::fmt::Write as _;

use super::{RunSummary, changes_cell, drift_lines, with_notes};
use crate::engine::{Operation, changes_summary};
use crate::run::events::ProjectReport;

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
pub(super) struct Markdown {
    /// Every project in the table, or only those that change, fail or have a note.
    pub(super) every_project: bool,
    /// Diff lines shown per project, and characters of diff in all.
    pub(super) diff_lines: usize,
    pub(super) diff_budget: usize,
    /// The most characters of a project's reason in the table.
    pub(super) reason_max: usize,
}

impl Markdown {
    const COMMENT: Markdown = Markdown {
        every_project: false,
        diff_lines: 150,
        diff_budget: 40 * 1024,
        reason_max: 600,
    };
}

/// The summary in Markdown, as much of it as `shape` shows.
pub(super) fn markdown_as(summary: &RunSummary, shape: Markdown) -> String {
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
            || !p.policy.is_empty()
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
    if let Some(decision) = summary.policy.as_ref().filter(|d| !d.is_empty()) {
        out.push_str("**Policies.** What the workspace's policies say of the plan:\n\n");
        for m in &decision.messages {
            let level = match m.level {
                crate::policy::Level::Deny => "**deny**",
                crate::policy::Level::Warn => "warn",
            };
            let about = (m.project.as_deref())
                .map_or_else(String::new, |p| format!("`{}`: ", p.replace('`', "'")));
            let text = markdown_text(&m.text.replace(['\n', '\r'], " "));
            let _ = writeln!(
                out,
                "- {level} {about}{text} (`{}`)",
                m.rule.replace('`', "'")
            );
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::RunStatus;

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
            policy: None,
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
        assert!(super::super::markdown(&summary).contains("| `infra/dns` | unchanged |"));
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
    fn a_comment_says_what_the_policies_said_and_escapes_it() {
        use crate::policy::{Decision, Level, Message};
        use crate::run::events::Outcome;
        let mut vpc = previewed("infra/vpc", Outcome::Succeeded, &[("create", 1)]);
        let denied = Message {
            level: Level::Deny,
            rule: "data.main.deny".into(),
            text: "a <b>bucket</b> | public\nto all".into(),
            project: Some("infra/vpc".into()),
            details: None,
        };
        vpc.policy = vec![denied.clone()];
        let quiet = previewed("infra/dns", Outcome::Unchanged, &[("same", 3)]);
        let mut summary = preview_of(vec![vpc, quiet]);
        summary.status = RunStatus::Succeeded;
        let warned = Message {
            level: Level::Warn,
            rule: "data.deployment.warn".into(),
            text: "two stacks change".into(),
            project: None,
            details: None,
        };
        summary.policy = Some(Decision {
            messages: vec![denied, warned],
        });
        let text = comment(&summary);
        assert!(
            text.contains("### mara preview on stack `dev` (my provider): the policies deny the plan (1 denial)"),
            "{text}"
        );
        assert!(
            text.contains("| `infra/vpc` | succeeded |  | +1 (denied by policy) |"),
            "{text}"
        );
        assert!(
            text.contains("**Policies.** What the workspace's policies say of the plan:\n\n- **deny** `infra/vpc`: a &lt;b>bucket&lt;/b> \\| public to all (`data.main.deny`)\n- warn two stacks change (`data.deployment.warn`)\n"),
            "{text}"
        );
    }
}
