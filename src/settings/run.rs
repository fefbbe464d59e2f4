//! The options of `up`, `preview`, `refresh` and `destroy`, resolved once into plain values
//! (docs/commands.md, "up, preview, refresh, destroy"): flags, then the environment, then
//! `mara.toml`. Everything below the command sees these, never the flags.

use std::path::PathBuf;

use super::Settings;
use crate::cli::{
    DestroyArgs, DriftArgs, LogOrderArg, PreviewArgs, RefreshArgs, RunArgs, RunCommand, UpArgs,
};
use crate::engine::Operation;
use crate::error::{Error, Problem, Result};
use crate::graph::Selection;
use crate::workspace::WorkspaceSettings;

/// How engine output is shown while projects run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogOrder {
    /// Lines as they come, from every running project.
    #[default]
    Stream,
    /// Each project's lines in one block when it ends.
    Grouped,
}

/// What a failed project means for the rest of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Start nothing new; let running projects finish; the rest is skipped.
    StopAll,
    /// Go on with every project that does not depend on a failed one.
    SkipDependents,
}

/// Which projects of the selection a run takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every selected project.
    All,
    /// `--resume`: those the last run of the operation on the stack did not complete.
    Resume,
    /// `--changed`: those whose inputs changed since their last successful `up`.
    Changed,
}

/// Whether a person confirms the run before it changes anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmation {
    /// `--yes`, `--dry-run`, or an operation that changes nothing people confirm (preview,
    /// refresh).
    NotAsked,
    /// On a terminal: `up` previews and asks yes / no / details; `destroy` asks for the stack name.
    Ask,
    /// A confirmation is needed and there is no terminal to ask on: the run is refused (exit 2)
    /// once it is certain there is something to run.
    Refused,
}

impl Confirmation {
    /// The usage error of a confirmation nobody can give.
    pub fn refusal(operation: Operation) -> Error {
        Error::usage(
            Problem::new(format!(
                "`mara {operation}` changes infrastructure and there is no terminal to confirm on"
            ))
            .hint("pass --yes to go ahead without confirmation"),
        )
    }
}

/// Where the run's summary goes besides the terminal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reports {
    /// `--report FILE`: the JSON summary.
    pub json: Option<PathBuf>,
    /// `--junit FILE`.
    pub junit: Option<PathBuf>,
    /// `$GITHUB_STEP_SUMMARY`: a Markdown section appended.
    pub github_summary: Option<PathBuf>,
    /// `--markdown FILE`: the summary as one pull-request comment.
    pub markdown: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct RunSettings {
    pub operation: Operation,
    pub selection: Selection,
    pub mode: Mode,
    pub parallel: usize,
    pub failure: FailurePolicy,
    pub confirmation: Confirmation,
    /// Print the run plan and run nothing.
    pub dry_run: bool,
    pub log_order: LogOrder,
    pub reports: Reports,
    /// `preview --expect-no-changes`: changes are exit 4.
    pub expect_no_changes: bool,
    /// `destroy --remove`: the stacks are removed once destroyed.
    pub remove_stacks: bool,
    /// `destroy --orphan-dependents`: deployed projects outside the selection that depend on it
    /// do not stop it.
    pub orphan_dependents: bool,
    /// `preview --diff`: each change's properties are shown.
    pub diff: bool,
    /// `--run ID`: the run (opened by `mara ci open`) these projects are recorded under.
    pub join: Option<String>,
    /// `mara ci open`: check everything, record the run under this id with its lock (held for
    /// `lease` between the jobs), and run nothing.
    pub open: Option<OpenRun>,
    /// What another command that starts the run says of it, once everything is checked and
    /// before anything runs ("Cluster mara-dev … does not exist: creating it").
    pub announce: Option<String>,
    /// `preview --save-plans DIR`: every Terraform plan, and what each project planned
    /// against, kept in DIR.
    pub save_plans: Option<PathBuf>,
    /// `up --plans DIR`: the saved plans applied as approved.
    pub plans: Option<PathBuf>,
    /// `up --replan`: a new plan whose changes differ from the approved ones applies too.
    pub replan: bool,
}

/// The options only some run commands have (each command's own), false where it has none.
#[derive(Default)]
struct Own {
    yes: bool,
    resume: bool,
    changed: bool,
    expect_no_changes: bool,
    diff: bool,
    remove: bool,
    orphan_dependents: bool,
    save_plans: Option<PathBuf>,
    plans: Option<PathBuf>,
    replan: bool,
}

impl Own {
    /// The options `command` has of its own, destructured field by field (a new flag nobody
    /// handles fails to compile), its operation, and the options every run command takes.
    fn of(command: RunCommand) -> (Operation, Own, RunArgs) {
        let mut own = Own::default();
        let (operation, args) = match command {
            RunCommand::Up(UpArgs {
                yes,
                resume,
                changed,
                plans,
                replan,
                run,
            }) => {
                (own.yes, own.resume, own.changed) = (yes, resume, changed);
                (own.plans, own.replan) = (plans, replan);
                (Operation::Up, run)
            }
            RunCommand::Preview(PreviewArgs {
                changed,
                expect_no_changes,
                diff,
                save_plans,
                yes: _,
                run,
            }) => {
                (own.changed, own.expect_no_changes, own.diff) = (changed, expect_no_changes, diff);
                own.save_plans = save_plans;
                (Operation::Preview, run)
            }
            RunCommand::Drift(DriftArgs { diff, run }) => {
                own.diff = diff;
                (Operation::Drift, run)
            }
            RunCommand::Refresh(RefreshArgs {
                resume,
                changed,
                yes: _,
                run,
            }) => {
                (own.resume, own.changed) = (resume, changed);
                (Operation::Refresh, run)
            }
            RunCommand::Destroy(DestroyArgs {
                yes,
                resume,
                remove,
                orphan_dependents,
                run,
            }) => {
                (own.yes, own.resume) = (yes, resume);
                (own.remove, own.orphan_dependents) = (remove, orphan_dependents);
                (Operation::Destroy, run)
            }
        };
        (operation, own, args)
    }

    /// Which projects of the selection the run takes: `--resume` or `--changed`, not both.
    fn mode(&self) -> Result<Mode> {
        Ok(match (self.resume, self.changed) {
            (true, true) => {
                return Err(Error::usage(Problem::new(
                    "--resume and --changed cannot be combined",
                )));
            }
            (true, false) => Mode::Resume,
            (false, true) => Mode::Changed,
            (false, false) => Mode::All,
        })
    }
}

/// `up --replan` answers "apply the new plan?" for approved plans: those of `--plans DIR`, or
/// those an interactive confirmation showed (docs/commands.md, "Saved plans"). An `up` that
/// approves none (`--yes`, `--dry-run`) would take it and do nothing: refused.
fn refuse_idle_replan(own: &Own, run: &RunSettings, dry_run: bool) -> Result<()> {
    if !own.replan || own.plans.is_some() || run.confirmation != Confirmation::NotAsked {
        return Ok(());
    }
    let why = match dry_run {
        true => "--dry-run runs nothing",
        false => "with --yes nothing is confirmed, so each project is planned and applied at once",
    };
    Err(Error::usage(
        Problem::new(format!(
            "--replan lets a new plan replace an approved one, and this `up` approves none: {why}"
        ))
        .hint("apply saved plans with `up --plans DIR --replan`, or leave out --yes to approve the plans at the confirmation"),
    ))
}

/// A run's id given on the command line (`--run`, `ci open --run`): letters, digits, `.`, `_`
/// and `-`, starting with a letter or digit, at most 100 (it names the run's log directory, and
/// is often a CI variable, empty when not set).
pub fn check_run_id(id: &str) -> Result<()> {
    let valid = (1..=100).contains(&id.len())
        && id.starts_with(|c: char| c.is_ascii_alphanumeric())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    let why = match id.chars().count() {
        n if n > 100 => format!(": it is {n} characters long, and a run id has at most 100"),
        _ => String::new(),
    };
    match valid {
        true => Ok(()),
        false => Err(Error::usage(
            Problem::new(format!("{} is not a run id{why}", crate::error::quoted(id)))
                .hint("a run id is 1 to 100 letters, digits, `.`, `_` and `-`, starting with a letter or digit (an empty one is usually a CI variable that is not set)"),
        )),
    }
}

/// A fanned-out run to open (`mara ci open`).
#[derive(Debug, Clone)]
pub struct OpenRun {
    pub run_id: String,
    pub lease: std::time::Duration,
    /// `--config FILE`: the stack configuration the run carries, from a CI secret file.
    pub config: Option<PathBuf>,
}

impl RunSettings {
    /// Resolves the options of one run command: its own, then those every run command takes.
    pub fn resolve(
        command: RunCommand,
        settings: &Settings,
        workspace: &WorkspaceSettings,
    ) -> Result<RunSettings> {
        let (operation, own, args) = Own::of(command);
        let RunArgs {
            parallel,
            keep_going,
            dry_run,
            log_order,
            report,
            junit,
            markdown,
            run: run_id,
            selection,
        } = args;
        if let Some(id) = &run_id {
            check_run_id(id)?;
        }
        let mode = own.mode()?;
        // Saved plans are the approval: nothing is asked.
        let mut run = RunSettings::started(
            operation,
            selection.into(),
            own.yes || dry_run || own.plans.is_some(),
            settings,
            workspace,
        );
        refuse_idle_replan(&own, &run, dry_run)?;
        run.save_plans = own.save_plans;
        run.plans = own.plans;
        run.replan = own.replan;
        run.mode = mode;
        if let Some(parallel) = parallel {
            run.parallel = usize::from(parallel);
        }
        if keep_going {
            run.failure = FailurePolicy::SkipDependents;
        }
        run.dry_run = dry_run;
        run.log_order = match log_order {
            LogOrderArg::Stream => LogOrder::Stream,
            LogOrderArg::Grouped => LogOrder::Grouped,
        };
        run.reports.json = report;
        run.reports.junit = junit;
        run.reports.markdown = markdown;
        run.expect_no_changes = own.expect_no_changes;
        run.remove_stacks = own.remove;
        run.orphan_dependents = own.orphan_dependents;
        run.diff = own.diff;
        run.join = run_id;
        Ok(run)
    }

    /// A run of `operation` on `selection` with every other option at its default, confirmed
    /// when `yes` (else asked on a terminal, refused without one): what the commands that start
    /// a run of their own use (the cluster's `up` and `destroy`, `ci open`, `ci close`'s
    /// summary).
    pub fn started(
        operation: Operation,
        selection: Selection,
        yes: bool,
        settings: &Settings,
        workspace: &WorkspaceSettings,
    ) -> RunSettings {
        let people_confirm = matches!(operation, Operation::Up | Operation::Destroy);
        let confirmation = match (people_confirm && !yes, settings.interactive) {
            (false, _) => Confirmation::NotAsked,
            (true, true) => Confirmation::Ask,
            (true, false) => Confirmation::Refused,
        };
        let github_summary = settings
            .env
            .get("GITHUB_STEP_SUMMARY")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        RunSettings {
            operation,
            selection,
            mode: Mode::All,
            parallel: workspace.parallel,
            failure: FailurePolicy::StopAll,
            confirmation,
            dry_run: false,
            log_order: LogOrder::default(),
            reports: Reports {
                github_summary,
                ..Reports::default()
            },
            expect_no_changes: false,
            remove_stacks: false,
            orphan_dependents: false,
            diff: false,
            join: None,
            open: None,
            announce: None,
            save_plans: None,
            plans: None,
            replan: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn resolve(args: &[&str], interactive: bool) -> Result<RunSettings> {
        let cli = crate::cli::Cli::try_parse_from(["mara"].iter().chain(args)).unwrap();
        let mut settings = Settings::resolve(cli.global, Default::default(), Default::default());
        settings.interactive = interactive;
        settings
            .env
            .insert("GITHUB_STEP_SUMMARY".into(), "/tmp/summary.md".into());
        let command = match cli.command {
            crate::cli::Command::Up(a) => RunCommand::Up(a),
            crate::cli::Command::Preview(a) => RunCommand::Preview(a),
            crate::cli::Command::Refresh(a) => RunCommand::Refresh(a),
            crate::cli::Command::Drift(a) => RunCommand::Drift(a),
            crate::cli::Command::Destroy(a) => RunCommand::Destroy(a),
            other => panic!("not a run: {other:?}"),
        };
        RunSettings::resolve(command, &settings, &WorkspaceSettings::default())
    }

    #[test]
    fn flags_become_plain_values() {
        let run = resolve(
            &[
                "up",
                "--keep-going",
                "--changed",
                "--only",
                "a",
                "--log-order",
                "grouped",
            ],
            true,
        )
        .unwrap();
        assert_eq!(run.operation, Operation::Up);
        assert_eq!(run.mode, Mode::Changed);
        assert_eq!(run.failure, FailurePolicy::SkipDependents);
        assert_eq!(run.confirmation, Confirmation::Ask);
        assert_eq!(run.parallel, WorkspaceSettings::default().parallel);
        assert_eq!(run.selection.only, ["a"]);
        assert_eq!(run.log_order, LogOrder::Grouped);
        assert_eq!(
            run.reports.github_summary,
            Some(PathBuf::from("/tmp/summary.md"))
        );

        let run = resolve(&["destroy", "--remove", "--yes", "--parallel", "2"], false).unwrap();
        assert!(run.remove_stacks);
        assert_eq!(run.parallel, 2);
        assert_eq!(run.confirmation, Confirmation::NotAsked);
        let run = resolve(&["preview", "--expect-no-changes"], false).unwrap();
        assert!(run.expect_no_changes);
        assert_eq!(run.confirmation, Confirmation::NotAsked);
    }

    #[test]
    fn what_cannot_work_is_a_usage_error() {
        let run = resolve(&["up"], false).unwrap();
        assert_eq!(run.confirmation, Confirmation::Refused);
        let error = Confirmation::refusal(run.operation);
        assert!(error.to_string().contains("no terminal to confirm on"));
        assert_eq!(error.exit_code(), crate::error::exit::USAGE);
        let run = resolve(&["up", "--dry-run"], false).unwrap();
        assert_eq!(run.confirmation, Confirmation::NotAsked);
        assert_eq!(
            resolve(&["refresh", "--changed"], true).unwrap().mode,
            Mode::Changed
        );
        let run = resolve(&["destroy", "--orphan-dependents", "--yes"], true).unwrap();
        assert!(run.orphan_dependents);
        // A refresh and a preview take --yes, and ask nothing either way.
        let run = resolve(&["refresh", "--yes"], false).unwrap();
        assert_eq!(run.confirmation, Confirmation::NotAsked);
    }

    #[test]
    fn each_command_takes_only_its_own_options() {
        use clap::Parser;
        let refused = |args: &[&str]| {
            crate::cli::Cli::try_parse_from(["mara"].iter().chain(args))
                .err()
                .map(|e| e.kind())
        };
        let unknown = Some(clap::error::ErrorKind::UnknownArgument);
        assert_eq!(refused(&["destroy", "--changed"]), unknown);
        assert_eq!(refused(&["preview", "--resume"]), unknown);
        assert_eq!(refused(&["up", "--remove"]), unknown);
        assert_eq!(refused(&["up", "--orphan-dependents"]), unknown);
        assert_eq!(refused(&["preview", "--yes"]), None);
        assert_eq!(
            refused(&["up", "--resume", "--changed"]),
            Some(clap::error::ErrorKind::ArgumentConflict)
        );
        assert_eq!(
            refused(&["destroy", "--with-dependents", "--orphan-dependents"]),
            Some(clap::error::ErrorKind::ArgumentConflict)
        );
    }

    #[test]
    fn a_replan_without_approved_plans_is_refused() {
        for args in [
            &["up", "--replan", "--yes"][..],
            &["up", "--replan", "--dry-run"],
        ] {
            let error = resolve(args, true).unwrap_err();
            assert_eq!(error.exit_code(), crate::error::exit::USAGE, "{args:?}");
            let hint = error.problems()[0].hint.clone().unwrap();
            assert!(hint.contains("--plans DIR --replan"), "{hint}");
        }
        // Approved plans to answer for: saved ones, or those an interactive `up` confirms.
        let run = resolve(&["up", "--replan", "--yes", "--plans", "saved"], false).unwrap();
        assert!(run.replan);
        assert!(resolve(&["up", "--replan"], true).unwrap().replan);
    }
}
