//! The confirmation before `up` and `destroy` (docs/commands.md, "Confirmation"); a "no" is
//! `declined`'s (exit 6).

use std::collections::BTreeSet;

use super::declined::{self, Stored};
use super::{Invocation, Loaded, Ready};
use crate::engine::Operation;
use crate::error::Error;
use crate::error::{Result, plural};
use crate::policy::Decision as PolicyDecision;
use crate::run::events::ProjectReport;
use crate::run::events::Sink;
use crate::run::plan::{Planner, Plans, RunPlan};
use crate::run::project::Context;
use crate::run::runner::{Runner, Schedule};
use crate::run::scheduler::FailurePolicy;
use crate::settings::Settings;
use crate::settings::run::{Confirmation, RunSettings};
use crate::ui::confirm::{self, LineCollector};
use crate::ui::prompt::TerminalPrompter;
use crate::ui::reporter::{self, LogOrder, Reporter};
use crate::workspace::stack::ResolvedStack;

impl Invocation<'_> {
    /// The run's plan, confirmed where a person confirms it. It is planned with the stacks the
    /// run selected since it began — the secrets project's, to store secrets; those the
    /// confirmation's preview selected or made — so that no stack is selected twice in a run.
    pub(super) fn confirmed_plan(
        &self,
        planner: &Planner<'_>,
        loaded: &Loaded<'_>,
        ready: &Ready,
    ) -> Result<RunPlan> {
        let run = self.run;
        let plan_with = |planner: &Planner<'_>, known: &BTreeSet<String>| RunPlan {
            show_diff: run.diff,
            ..Planner {
                known_stacks: known,
                ..*planner
            }
            .plan(run.operation, &ready.config, "")
        };
        let plan = |known: &BTreeSet<String>| plan_with(planner, known);
        let mut known = planner.known_stacks.clone();
        known.extend(ready.selected.iter().cloned());
        let planned = plan(&known);
        let previewed = Planner {
            known_stacks: &known,
            ..*planner
        };
        let (selected, approved) = self.confirm(&previewed, loaded, &planned, ready)?;
        if selected.is_empty() && approved.is_none() {
            return Ok(planned);
        }
        known.extend(selected);
        // What the confirmation showed is what runs: its plans, approved.
        let plans = Plans {
            approved,
            ask: true,
            ..planner.plans.clone()
        };
        let planner = Planner {
            plans: &plans,
            ..*planner
        };
        Ok(plan_with(&planner, &known))
    }

    /// On a terminal (`Confirmation::Ask`), the person confirms `plan` (`confirm`); a "no"
    /// takes back what `up` had made (`ready.stored`, `declined`) and says so. With policies, an
    /// `up` previews its plan first even with `--yes`, and the policies judge it before anyone
    /// is asked: a denial takes back what `up` had made, as a "no" does (exit 4). Returns the
    /// Pulumi projects whose stack the confirmation's preview selected (or made): the run need
    /// not select them again.
    fn confirm(
        &self,
        planner: &Planner<'_>,
        loaded: &Loaded<'_>,
        plan: &RunPlan,
        ready: &Ready,
    ) -> Result<(Vec<String>, Option<Approved>)> {
        let run = self.run;
        let gated = run.operation == Operation::Up && loaded.policies.is_some();
        if run.confirmation != Confirmation::Ask && !gated {
            return Ok((Vec::new(), None));
        }
        // Its details show each change's properties; its plans are kept, to be what runs.
        let saving = Plans {
            save_in: Some(planner.plans("-preview")),
            documents: planner.plans.documents,
            ..Plans::default()
        };
        let previewing = Planner {
            plans: &saving,
            ..*planner
        };
        let preview = || RunPlan {
            show_diff: true,
            ..previewing.plan(Operation::Preview, &ready.config, "-preview")
        };
        let (stack, context) = (planner.stack, ready.context.clone());
        let judge = |preview: &RunPlan, reports: &mut [ProjectReport]| {
            let judged = self.judge(planner, loaded, (preview, &mut *reports))?;
            let judged = super::policies::with_packs(judged, reports);
            *loaded.judged.borrow_mut() = judged.clone();
            Ok(judged)
        };
        let decision = confirm(
            (self.settings, run, self.runner),
            stack,
            plan,
            (preview, judge),
            context,
        )?;
        match decision {
            Decision::Go {
                selected,
                previewed,
            } => Ok((selected, previewed.map(|p| approved(planner, p)))),
            Decision::Declined { created, denied } => {
                Err(self.declined(planner, (loaded, ready), created, denied))
            }
        }
    }

    /// A "no", or the policies' denial: what `up` had made taken back (`ready.stored`, and the
    /// stacks the preview `created`), and the error that says so.
    fn declined(
        &self,
        planner: &Planner<'_>,
        (loaded, ready): (&Loaded<'_>, &Ready),
        created: Vec<String>,
        denied: usize,
    ) -> Error {
        let stored = Stored {
            created,
            ..ready.stored.clone()
        };
        let done = declined::take_back(planner, (ready, self.runner.interrupt()), &stored);
        ready.taken_back.set(done.kept.is_empty());
        if denied == 0 {
            return declined::declined(self.run.operation, &done);
        }
        if let Some(decision) = loaded.judged.borrow().as_ref()
            && let Err(error) = self.print_denied(planner, decision)
        {
            return error;
        }
        Error::PolicyDenied {
            denied,
            what: "the plan",
            then: ": nothing was applied",
        }
    }
}

/// The plans a confirmed preview showed, approved: what it said will be evaluated again
/// (stale, waiting, deferred) is planned as its turn comes; the rest is applied as shown, at
/// once, under the run's lock — what it was planned against is not checked again apart (`up
/// --plans` does that).
fn approved(planner: &Planner<'_>, (preview, reports): (RunPlan, Vec<ProjectReport>)) -> Approved {
    let dir = planner.plans("-preview");
    let made = (
        planner.stack.name.as_str(),
        planner.deployment.provider.name.as_str(),
        planner.run_id,
    );
    let mut manifest =
        super::plans::manifest(made, (&preview, &reports), &dir, &Default::default());
    let shown = |path: &str| {
        (reports.iter()).any(|r| r.path == path && r.status.is_success() && r.stale.is_empty())
    };
    manifest.projects.retain(|p| shown(&p.path));
    (dir, manifest)
}

/// Approved plans: their directory and manifest.
type Approved = (std::path::PathBuf, crate::run::approval::Manifest);

/// What the person at the terminal answered.
enum Decision {
    /// Confirmed; the Pulumi projects whose stack the preview selected, and the preview with
    /// its reports (an `up`'s).
    Go {
        selected: Vec<String>,
        previewed: Option<(RunPlan, Vec<crate::run::events::ProjectReport>)>,
    },
    /// Not confirmed, or denied by the policies (how many denials); the projects whose stack
    /// the preview created.
    Declined { created: Vec<String>, denied: usize },
}

/// On a terminal: `up` previews every project, shows the combined changes and asks; `destroy`
/// asks for the stack's name. The policies (`judge`) see an `up`'s preview first, asked or not:
/// what they say is shown, and a denial is the answer.
fn confirm(
    (settings, run, runner): (&Settings, &RunSettings, &Runner),
    stack: &ResolvedStack,
    plan: &RunPlan,
    (preview, judge): (
        impl FnOnce() -> RunPlan,
        impl FnOnce(&RunPlan, &mut [ProjectReport]) -> Result<Option<PolicyDecision>>,
    ),
    context: Context,
) -> Result<Decision> {
    let style = settings.stderr_style;
    let stack = stack.name.as_str();
    let mut prompter = TerminalPrompter;
    if run.operation == Operation::Destroy {
        let projects: Vec<&str> = plan.projects.iter().map(|p| p.path.as_str()).collect();
        return Ok(
            match confirm::destroy(&mut prompter, stack, &projects, style)? {
                true => Decision::Go {
                    selected: Vec::new(),
                    previewed: None,
                },
                false => Decision::Declined {
                    created: Vec::new(),
                    denied: 0,
                },
            },
        );
    }
    let preview = preview();
    let (mut reports, lines) = run_preview((settings, run, runner), stack, &preview, context)?;
    let judged = judge(&preview, &mut reports)?;
    if let Some(judged) = &judged {
        super::policies::say(settings, judged, run.confirmation == Confirmation::Ask);
    }
    let created = created_by(&reports);
    let denied = judged.as_ref().map_or(0, |j| j.denied().count());
    let confirmed = denied == 0
        && match run.confirmation {
            Confirmation::Ask => confirm::update(&mut prompter, &reports, &lines, style)?,
            _ => true,
        };
    if !confirmed {
        return Ok(Decision::Declined { created, denied });
    }
    // A project previewed, or whose preview made its stack, has it now (where a preview makes
    // stacks: Pulumi's).
    let selected = (preview.projects.iter().zip(&reports))
        .filter(|(p, _)| p.engine.previews_make_stacks())
        .filter(|(_, r)| r.status.is_success() || r.created_stack)
        .map(|(p, _)| p.path.clone())
        .collect();
    Ok(Decision::Go {
        selected,
        previewed: Some((preview, reports)),
    })
}

/// Runs the confirmation's preview: on the terminal that will be asked, a live line a running
/// project and the count of those done, so that a long preview is seen going (its output is
/// not shown, its lines collected for the details). Its reports and lines.
fn run_preview(
    (settings, run, runner): (&Settings, &RunSettings, &Runner),
    stack: &str,
    preview: &RunPlan,
    context: Context,
) -> Result<(Vec<ProjectReport>, LineCollector)> {
    let n = preview.len();
    if settings.verbosity >= 0 {
        crate::ui::errln!(
            "Previewing {n} {} on stack {stack}…",
            plural(n, "project", "projects")
        );
    }
    let options = reporter::Options {
        live: true,
        order: LogOrder::Grouped,
        style: settings.stderr_style,
        quiet: true,
        verb: "preview",
    };
    let stderr = || Box::new(std::io::stderr());
    let mut failures = Reporter::new(options, stderr(), stderr());
    let mut lines = LineCollector::default();
    let schedule = Schedule {
        parallel: run.parallel,
        failure: FailurePolicy::SkipDependents,
    };
    let sinks: &mut [&mut dyn Sink] = &mut [&mut failures, &mut lines];
    let reports = runner.execute(preview, context, schedule, sinks);
    runner.interrupt().checkpoint()?;
    Ok((reports, lines))
}

/// The projects whose stack a preview created (its reports'): a "no" removes them again.
fn created_by(reports: &[ProjectReport]) -> Vec<String> {
    (reports.iter())
        .filter(|r| r.created_stack)
        .map(|r| r.path.clone())
        .collect()
}
