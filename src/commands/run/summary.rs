//! What a run shows and how it ends: the terminal reporter while it goes on, then the summary and
//! reports, then the exit its outcome means (docs/commands.md, "The summary").

use crate::engine::Operation;
use crate::error::{Error, Result, plural};
use std::time::{Duration, SystemTime};

use crate::clock;
use crate::run::events::{Outcome, ProjectReport, run_status};
use crate::run::interrupt::Interrupt;
use crate::run::plan::Planner;
use crate::settings::run::RunSettings;
use crate::settings::{OutputFormat, Settings};
use crate::status::{ProjectStatus, RunStatus};
use crate::ui::report::{self, RunSummary};
use crate::ui::reporter::{self, Reporter};

/// The run's summary, from its projects' reports: `started` when it was recorded, `took` how
/// long its projects took.
pub(super) fn of(
    run: &RunSettings,
    planner: &Planner<'_>,
    reports: Vec<ProjectReport>,
    (started, finished): (SystemTime, SystemTime),
    took: Duration,
    interrupt: &Interrupt,
) -> RunSummary {
    let workspace = &planner.deployment.files.workspace;
    let logs = planner.logs("");
    RunSummary {
        run_id: planner.run_id.to_string(),
        operation: run.operation,
        provider: planner.deployment.provider.name.clone(),
        stack: planner.stack.name.to_string(),
        status: run_status(&reports, interrupt),
        started: clock::rfc3339(started),
        finished: clock::rfc3339(finished),
        duration: took,
        // A job of a fanned-out run keeps its logs in the team's ledger; its runner's files go
        // with it.
        logs: match &run.join {
            Some(run_id) => Some(report::Logs::Ledger(run_id.clone())),
            None => {
                (logs.is_dir()).then(|| report::Logs::Here(workspace.display(&logs).into_owned()))
            }
        },
        projects: reports,
        expect_no_changes: run.expect_no_changes,
        exit_code: None,
        policy: None,
    }
}

/// What the person at the terminal (or the CI log) sees while the run goes on.
pub(super) fn terminal(settings: &Settings, run: &RunSettings) -> Reporter {
    let options = reporter::Options {
        live: settings.live,
        order: run.log_order,
        style: settings.stdout_style,
        quiet: settings.verbosity < 0,
        verb: run.operation.as_str(),
    };
    // The projects' lines go where the summary goes: stdout, unless it carries JSON or the live
    // view draws on stderr.
    let out: reporter::Output = match (settings.live, settings.output) {
        (false, OutputFormat::Human) => Box::new(std::io::stdout()),
        _ => Box::new(std::io::stderr()),
    };
    let reporter = Reporter::new(options, out, Box::new(std::io::stderr()));
    // Whoever confirmed an `up` is asked again when a project's new plan is not the one they
    // approved (docs/commands.md, "Saved plans").
    match run.operation == Operation::Up
        && run.confirmation == crate::settings::run::Confirmation::Ask
    {
        true => reporter.asking(Box::new(crate::ui::prompt::TerminalPrompter)),
        false => reporter,
    }
}

/// The summary: the table (with `--output json`, the JSON on stdout and the table on stderr),
/// then every report asked for.
pub fn summarize(settings: &Settings, run: &RunSettings, summary: &RunSummary) -> Result<()> {
    match settings.output {
        OutputFormat::Json => {
            crate::ui::eprint(&report::table(summary, settings.stderr_style));
            crate::ui::print(&summary.to_json())?;
        }
        // `-q`: only what went wrong — the failed projects' lines came as they failed; then the
        // verdict, unless all went well.
        OutputFormat::Human if settings.verbosity < 0 => {
            let drift = summary.expect_no_changes && summary.changed() > 0;
            let denied = summary.policy.as_ref().is_some_and(|d| d.denies());
            if summary.status != RunStatus::Succeeded || drift || denied {
                let style = settings.stdout_style;
                // `-q` leaves out the warnings: only what stopped the run.
                let denials = (summary.policy.as_ref()).map(|d| crate::policy::Decision {
                    messages: d.denied().cloned().collect(),
                });
                let lines =
                    (denials.as_ref()).map_or_else(Vec::new, |d| report::decision_lines(d, style));
                let said: String = lines.iter().map(|l| format!("{l}\n")).collect();
                let verdict = report::verdict(summary, style);
                crate::ui::print(&format!("{said}{verdict}\n"))?
            }
        }
        OutputFormat::Human => {
            let table = report::table(summary, settings.stdout_style);
            crate::ui::print(&format!("\n{table}"))?
        }
    }
    let reports = &run.reports;
    let failed = report::write_files(
        summary,
        reports.json.as_deref(),
        reports.junit.as_deref(),
        reports.github_summary.as_deref(),
        reports.markdown.as_deref(),
    );
    // The deployment happened as the summary says: a report that cannot be written is a
    // warning, and the exit stays the deployment's.
    for error in failed {
        let cause = std::error::Error::source(&error)
            .map(|s| format!(": {s}"))
            .unwrap_or_default();
        let warning = format!("warning: the report was not written: {error}{cause}");
        crate::ui::errln!("{}", settings.stderr_style.yellow(&warning));
    }
    Ok(())
}

/// What the run's outcome means as an exit: interrupted (130), a project failed (1), the preview
/// found changes it was told to expect none of (4).
/// Whether the run found its stack: a destroy or refresh that found no project with it ends
/// otherwise than by its projects.
pub(super) enum Found {
    TheStack,
    /// No project has it, and none ever did (a typo, a backend changed).
    NoStack,
    /// No project has it: a destroy of a stack mara destroyed already.
    DestroyedAlready,
}

/// The run's verdict, decided in one place: its status (`run_status`, as its events and its
/// record say it) and its result — what the deployment came to, unless it found no stack, and
/// a lease lost before its projects were done — whose exit code the summary says too.
pub(super) fn verdict(
    run: &RunSettings,
    summary: &mut RunSummary,
    interrupt: &Interrupt,
    (stack, found): (&crate::workspace::stack::ResolvedStack, Found),
) -> Result<()> {
    summary.status = run_status(&summary.projects, interrupt);
    let result = match found {
        Found::DestroyedAlready => Ok(()),
        Found::NoStack => Err(crate::run::stacks::no_such_stack(
            stack,
            &Default::default(),
        )),
        Found::TheStack => lease_kept(interrupt, outcome(run, summary)),
    };
    summary.exit_code = Some(result.as_ref().map_or_else(Error::exit_code, |()| 0));
    result
}

/// A run that lost its lease before its projects were done says so, whatever they did (an
/// interruption stays one); one lost after cost them nothing (its record is kept for later).
pub(super) fn lease_kept(interrupt: &Interrupt, result: Result<()>) -> Result<()> {
    match (interrupt.lease().cost(), result) {
        (Some(reason), result) if !matches!(result, Err(Error::Interrupted)) => {
            Err(Error::LeaseLost {
                reason,
                running: interrupt.lease().running(),
            })
        }
        (_, result) => result,
    }
}

/// What the deployment came to, as the run's result: interrupted, projects failed, plans
/// refused, a job that ran nothing, drift found, changes where none were expected.
fn outcome(run: &RunSettings, summary: &RunSummary) -> Result<()> {
    let failed = summary.count(ProjectStatus::Failed);
    if summary.status == RunStatus::Cancelled {
        return Err(Error::Interrupted);
    }
    // A project whose engine's own policies (Pulumi's policy packs) refused its operation is
    // denied, not broken: when that is every failure, the run is denied (exit 4).
    let denied_by_packs = (summary.projects.iter())
        .filter(|p| p.status == ProjectStatus::Failed)
        .filter(|p| (p.policy.iter()).any(|m| m.is_pack() && m.level == crate::policy::Level::Deny))
        .count();
    if failed > 0 && denied_by_packs < failed {
        return Err(Error::ProjectsFailed { failed });
    }
    if failed > 0 {
        let denied = (summary.policy.as_ref()).map_or(failed, |d| d.denied().count());
        let then = match run.operation {
            Operation::Up => ": what they refused was not applied",
            _ => "",
        };
        return Err(Error::PolicyDenied {
            denied,
            what: "the plan",
            then,
        });
    }
    // The policies deny the previewed plans: they are not to be applied (exit 4).
    if let Some(decision) = summary.policy.as_ref().filter(|d| d.denies()) {
        return Err(Error::PolicyDenied {
            denied: decision.denied().count(),
            what: "the plan",
            then: "",
        });
    }
    let refused = (summary.projects.iter())
        .filter(|p| p.approval == Some(crate::run::approval::Held::Refused))
        .count();
    if refused > 0 {
        return Err(Error::PlansRefused { refused });
    }
    // A job of a fanned-out run that ran nothing, a dependency having failed elsewhere: not a
    // green job (docs/commands.md, "ci").
    let skipped = |p: &&ProjectReport| matches!(p.outcome, Outcome::Skipped { .. });
    if run.join.is_some()
        && !summary.projects.is_empty()
        && summary.projects.iter().all(|p| skipped(&p))
    {
        let skipped = summary.projects.len();
        return Err(Error::Skipped { skipped });
    }
    // A job of a fanned-out check leaves the verdict to `ci close`: its CI would skip the jobs
    // after it, whose checks are as wanted.
    if run.operation == Operation::Drift && run.join.is_none() {
        let drifted = summary.drifted();
        if drifted > 0 {
            return Err(Error::Drifted { drifted });
        }
    }
    if run.operation == Operation::Preview && run.expect_no_changes {
        let changed = summary.changed();
        if changed > 0 {
            return Err(Error::Drift { changed });
        }
    }
    Ok(())
}

/// A warning for the projects killed by a second interruption: their engines could not clean up,
/// and may still hold their stacks' own locks.
pub(super) fn warn_killed(settings: &Settings, summary: &RunSummary) {
    let killed: Vec<_> = (summary.projects.iter())
        .filter(|p| matches!(p.outcome, Outcome::Cancelled { killed: Some(_) }))
        .collect();
    if killed.is_empty() {
        return;
    }
    let mut text = format!(
        "warning: {} {} killed: the engine may still hold its stack's own lock (`{}` says so again)",
        killed.len(),
        plural(killed.len(), "project was", "projects were"),
        settings.again("unlock")
    );
    for project in killed {
        text.push_str(&format!(
            "\n  {}: {}",
            project.path,
            project.reason.as_deref().unwrap_or_default()
        ));
    }
    crate::ui::errln!("{}", settings.stderr_style.yellow(&text));
}
