//! GitHub's step summary (`$GITHUB_STEP_SUMMARY`): the Markdown body with every project and
//! as much of the diffs as GitHub keeps of a step.

use super::RunSummary;
use super::markdown::{Markdown, markdown_as};

/// A Markdown section for `$GITHUB_STEP_SUMMARY` (docs/commands.md, "Preview in CI"): the table;
/// for a preview, the stale previews and each project's diff, collapsed under its name.
pub fn markdown(summary: &RunSummary) -> String {
    markdown_as(summary, STEP_SUMMARY)
}

/// GitHub keeps 1 MiB per step.
const STEP_SUMMARY: Markdown = Markdown {
    every_project: true,
    diff_lines: 400,
    diff_budget: 512 * 1024,
    reason_max: usize::MAX,
};
