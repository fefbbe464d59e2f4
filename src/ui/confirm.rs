//! Confirming a run that changes infrastructure (docs/commands.md, "up, preview, refresh,
//! destroy"): `up` shows the combined changes of its preview and asks yes / no / details;
//! `destroy` lists what it will destroy and asks for the stack name to be typed.

use std::collections::BTreeMap;

use super::Style;
use super::prompt::Prompter;
use crate::error::{Result, plural};
use crate::run::events::{Event, Outcome, ProjectReport, Sink};

/// Keeps every project's lines, for the "details" answer.
#[derive(Debug, Default)]
pub struct LineCollector {
    /// By position in the plan.
    pub lines: BTreeMap<usize, Vec<String>>,
}

impl Sink for LineCollector {
    fn handle(&mut self, event: &Event) {
        if let Event::Line { index, text, .. } = event {
            self.lines.entry(*index).or_default().push(text.clone());
        }
    }
}

/// What the policies said of the plan about to be confirmed, under a heading.
pub fn policies(decision: &crate::policy::Decision, style: Style) -> String {
    let lines: String = (super::report::decision_lines(decision, style).iter())
        .map(|l| format!("  {l}\n"))
        .collect();
    format!("\n{}\n{lines}", style.bold("Policies"))
}

/// The preview's changes as a table, then "Do you want to perform this update?" until the answer
/// is yes or no. `reports` are in the plan's order, as are the collected lines.
pub fn update(
    prompter: &mut dyn Prompter,
    reports: &[ProjectReport],
    lines: &LineCollector,
    style: Style,
) -> Result<bool> {
    let width = reports.iter().map(|r| r.path.len()).max().unwrap_or(0);
    let mut table = format!(
        "\n{}\n",
        style.bold(&format!("{:<width$}  CHANGES", "PROJECT"))
    );
    for report in reports {
        let mut changes = match (&report.changes, &report.outcome) {
            (Some(changes), _) => crate::engine::changes_summary(changes),
            (None, Outcome::Waits { reason, .. }) => style.cyan(reason),
            (None, Outcome::Failed { .. }) => style.yellow(
                "cannot be previewed yet (see details): it may need its dependencies deployed first",
            ),
            (None, _) => style.dim("not previewed: a dependency could not be"),
        };
        if !report.stale.is_empty() {
            changes.push_str(&style.yellow(" (stale)"));
        }
        if !report.projected.is_empty() {
            changes.push_str(&style.cyan(" (planned inputs)"));
        }
        table.push_str(&format!("{:<width$}  {changes}\n", report.path));
    }
    let projected = crate::run::events::projected_lines(reports, &str::to_string);
    if !projected.is_empty() {
        let notes: String = projected.iter().map(|l| format!("  {l}\n")).collect();
        table.push_str(&format!(
            "\n{}\n{notes}",
            style.bold("Planned inputs: previewed with the values this update plans before them")
        ));
    }
    // Who approves sees which later projects will be evaluated again, against new values.
    let stale = crate::run::events::stale_lines(reports, &str::to_string);
    if !stale.is_empty() {
        let notes: String = stale.iter().map(|l| format!("  {l}\n")).collect();
        table.push_str(&format!(
            "\n{}\n{notes}",
            style.bold("Stale previews: they read outputs that this update changes")
        ));
    }
    prompter.say(&table);
    let choices = ["yes", "no", "details"].map(String::from);
    loop {
        match prompter.choose("Do you want to perform this update?", &choices, 1)? {
            0 => return Ok(true),
            1 => return Ok(false),
            _ => {
                let mut details = String::new();
                // The projects with something to say: a change, an error, a diff.
                for (index, report) in reports.iter().enumerate() {
                    let said: Vec<&String> = lines
                        .lines
                        .get(&index)
                        .into_iter()
                        .flatten()
                        .filter(|line| line.as_str() != "Preview: no changes")
                        .collect();
                    if said.is_empty() {
                        continue;
                    }
                    details.push_str(&style.cyan(&format!("── {}", report.path)));
                    details.push('\n');
                    for line in said {
                        details.push_str(&format!("   {line}\n"));
                    }
                }
                if details.is_empty() {
                    details = "No project has anything more to show.".to_string();
                }
                prompter.say(details.trim_end());
            }
        }
    }
}

/// What `destroy` will destroy, then the stack's name typed to confirm.
pub fn destroy(
    prompter: &mut dyn Prompter,
    stack: &str,
    projects: &[&str],
    style: Style,
) -> Result<bool> {
    let mut text = style.bold(&format!(
        "This destroys every resource of {} {} on stack {stack}, in this order:",
        projects.len(),
        plural(projects.len(), "project", "projects"),
    ));
    for path in projects {
        text.push_str(&format!("\n  - {path}"));
    }
    prompter.say(&text);
    let typed = prompter.text(
        &format!("Type the stack name ({stack}) to confirm"),
        None,
        &|_| Ok(()),
    )?;
    Ok(typed.trim() == stack)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Changes;
    use crate::run::events::Finished;
    use crate::ui::prompt::Scripted;

    fn report(path: &str, outcome: Outcome, changes: Option<Changes>) -> ProjectReport {
        ProjectReport::new(
            path.into(),
            None,
            Finished {
                changes,
                ..Finished::without_running(outcome)
            },
        )
    }

    #[test]
    fn the_update_shows_its_changes_and_details_until_answered() {
        let reports = [
            report(
                "infra/vpc",
                Outcome::Succeeded,
                Some(Changes::from([("create".into(), 2), ("same".into(), 1)])),
            ),
            report(
                "apps/web",
                Outcome::Failed {
                    code: Some(255),
                    reason: "failed".into(),
                },
                None,
            ),
            report(
                "apps/api",
                Outcome::Skipped {
                    reason: "depends".into(),
                },
                None,
            ),
        ];
        let mut lines = LineCollector::default();
        // Nothing to say beyond the table: not repeated in the details.
        lines.handle(&Event::Line {
            index: 0,
            path: "infra/vpc".into(),
            stream: crate::run::process::Stream::Stdout,
            text: "Preview: no changes".into(),
        });
        lines.handle(&Event::Line {
            index: 1,
            path: "apps/web".into(),
            stream: crate::run::process::Stream::Stderr,
            text: "error: stack reference not found".into(),
        });
        let mut prompter = Scripted::new(["details", "yes"]);
        assert!(update(&mut prompter, &reports, &lines, Style::default()).unwrap());
        insta::assert_snapshot!(prompter.transcript.join("\n"), @r"

        PROJECT    CHANGES
        infra/vpc  +2
        apps/web   cannot be previewed yet (see details): it may need its dependencies deployed first
        apps/api   not previewed: a dependency could not be

        ? Do you want to perform this update?
        ── apps/web
           error: stack reference not found
        ? Do you want to perform this update?
        ");
        let mut prompter = Scripted::new(["no"]);
        assert!(!update(&mut prompter, &reports, &lines, Style::default()).unwrap());
    }

    #[test]
    fn the_update_says_which_previews_wait_and_which_are_stale() {
        let mut cluster = report(
            "infra/cluster",
            Outcome::Succeeded,
            Some(Changes::from([("update".into(), 1)])),
        );
        cluster.changed_outputs = Some(vec!["kubeconfig".into(), "name".into()]);
        let mut app = report("apps/web", Outcome::Unchanged, Some(Changes::new()));
        app.stale = vec![crate::run::events::Stale {
            reads: "infra/cluster".into(),
            outputs: vec!["kubeconfig".into(), "name".into()],
        }];
        let mut api = report("apps/api", Outcome::Unchanged, Some(Changes::new()));
        api.stale = vec![crate::run::events::Stale {
            reads: "apps/web".into(),
            outputs: Vec::new(),
        }];
        let dns = report(
            "infra/dns",
            Outcome::Waits {
                on: vec!["infra/zone".into()],
                reason: "waits on infra/zone (not deployed yet)".into(),
            },
            None,
        );
        let reports = [cluster, app, api, dns];
        let mut prompter = Scripted::new(["yes"]);
        let lines = LineCollector::default();
        assert!(update(&mut prompter, &reports, &lines, Style::default()).unwrap());
        insta::assert_snapshot!(prompter.transcript.join("\n"), @r"

        PROJECT        CHANGES
        infra/cluster  ~1
        apps/web       no changes (stale)
        apps/api       no changes (stale)
        infra/dns      waits on infra/zone (not deployed yet)

        Stale previews: they read outputs that this update changes
          apps/web reads infra/cluster, whose outputs `kubeconfig`, `name` change: this preview used their current values
          and 1 project after them, whose previews read those (marked stale)

        ? Do you want to perform this update?
        ");
    }

    #[test]
    fn destroy_wants_the_stack_name() {
        let mut prompter = Scripted::new(["dev"]);
        assert!(destroy(&mut prompter, "dev", &["b", "a"], Style::default()).unwrap());
        assert_eq!(
            prompter.transcript,
            [
                "This destroys every resource of 2 projects on stack dev, in this order:\n  - b\n  - a",
                "? Type the stack name (dev) to confirm",
            ]
        );
        let mut prompter = Scripted::new(["prod"]);
        assert!(!destroy(&mut prompter, "dev", &["a"], Style::default()).unwrap());
    }
}
