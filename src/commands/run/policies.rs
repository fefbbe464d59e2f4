//! The run's policy gate (docs/commands.md, "Policies"): the workspace's policies compiled once
//! as the run loads — a policy that does not compile is exit 3 before anything runs — and their
//! decision over the run's plans, before anything of them is applied.

use std::cell::RefCell;

use super::{Invocation, Loaded};
use crate::deployment::checks::dependents;
use crate::engine::Operation;
use crate::error::{Error, Result};
use crate::ledger::Opener;
use crate::policy::{Decision, Kind, Policies};
use crate::run::events::ProjectReport;
use crate::run::gate::{self, About, Orphan, Scope};
use crate::run::plan::{Planner, RunPlan};
use crate::settings::run::Confirmation;
use crate::workspace::Workspace;
use crate::workspace::stack_config::StackConfigFile;

/// The policies of `workspace`, where they judge `operation`: a preview's plans, what an `up`
/// applies, what a destroy removes, what a drift check found. Policies with no deciding rule
/// (tests alone) gate nothing: an `up --yes` does not preview for them.
pub(super) fn of(operation: Operation, workspace: &Workspace) -> Result<Option<RefCell<Policies>>> {
    if !matches!(
        operation,
        Operation::Preview | Operation::Up | Operation::Destroy | Operation::Drift
    ) {
        return Ok(None);
    }
    let policies = Policies::load(&workspace.root, &workspace.settings.policy)?;
    let decides = |p: &Policies| p.has(Kind::Project) || p.has(Kind::Deployment);
    Ok(policies.filter(decides).map(RefCell::new))
}

/// What a preview's saved plans record of the policies that judged them: their digest when they
/// passed the plans (`None`: no policies), an error when they denied them (no plan is kept).
pub(super) fn judged_by(
    loaded: &Loaded<'_>,
    judged: Option<&Decision>,
) -> Result<Option<String>, ()> {
    let Some(policies) = &loaded.policies else {
        return Ok(None);
    };
    match judged.is_some_and(Decision::denies) {
        true => Err(()),
        false => Ok(Some(policies.borrow().digest.clone())),
    }
}

/// Whether the run's previews keep each project's own plan: the per-project policies read it,
/// and the deployment's input takes a Terraform module's resources with their values from it.
pub(super) fn read_plans(loaded: &Loaded<'_>) -> bool {
    loaded.policies.is_some()
}

impl Invocation<'_> {
    /// What the policies said of the run, for its summary and its record: a preview's (or a drift check's)
    /// plans judged now that it ran; an `up`'s, what they said of the plans its confirmation
    /// previewed; a destroy's, what they said before it asked.
    pub(super) fn judged(
        &self,
        planner: &Planner<'_>,
        loaded: &Loaded<'_>,
        (plan, reports): (&RunPlan, &mut [ProjectReport]),
        recorder: Option<&mut crate::run::recorder::Recorder>,
    ) -> Result<Option<Decision>> {
        let judged = match self.run.operation {
            Operation::Preview | Operation::Drift => {
                self.judge(planner, loaded, (plan, reports))?
            }
            _ => loaded.judged.take(),
        };
        let judged = with_packs(judged, reports);
        // The run's record keeps what they said, with its end.
        if let (Some(recorder), Some(decision)) = (recorder, &judged) {
            recorder.judged(decision);
        }
        Ok(judged)
    }

    /// What the policies said of the run (`judged`), and a preview's plans kept with which
    /// policies passed them (`save_manifest`, where `--save-plans` asked for them).
    pub(super) fn judged_and_kept(
        &self,
        (planner, loaded, config): (&Planner<'_>, &Loaded<'_>, &StackConfigFile),
        (plan, reports): (&RunPlan, &mut [ProjectReport]),
        recorder: Option<&mut crate::run::recorder::Recorder>,
    ) -> Result<Option<Decision>> {
        let judged = self.judged(planner, loaded, (plan, reports), recorder)?;
        if self.run.operation == Operation::Preview {
            let judged_by = judged_by(loaded, judged.as_ref());
            self.save_manifest(planner, (plan, reports), config, judged_by)?;
        }
        Ok(judged)
    }

    /// What the policies decide of `plan`, previewed in `reports` (each project's messages put
    /// in its report); `None` without policies. A policy that fails as it is evaluated judged
    /// nothing: exit 3, and nothing is applied.
    pub(super) fn judge(
        &self,
        planner: &Planner<'_>,
        loaded: &Loaded<'_>,
        (plan, reports): (&RunPlan, &mut [ProjectReport]),
    ) -> Result<Option<Decision>> {
        let Some(policies) = &loaded.policies else {
            return Ok(None);
        };
        let mut policies = policies.borrow_mut();
        // A job of a fanned-out run holds its own projects only: the deployment's policies are
        // not its to judge.
        let scope = Scope {
            projects: true,
            deployment: self.run.join.is_none(),
            orphans: &[],
        };
        let about = self.about(planner);
        let started = std::time::Instant::now();
        let decision = gate::decide(&mut policies, &about, (plan, Some(reports)), scope)
            .map_err(|failed| Error::config(failed.problem()))?;
        // What the gate costs, for the benchmark (docs/benchmarks.md, "Policies").
        tracing::debug!(
            projects = plan.len(),
            micros = started.elapsed().as_micros() as u64,
            "policies judged"
        );
        Ok(Some(decision))
    }

    /// Before an `up --plans DIR` records or runs anything: with policies, its plans must be
    /// those the same policies judged and passed as they were saved (`Manifest::judged_by`) —
    /// saved without policies, or before they changed, they are not applied (exit 4).
    pub(super) fn judged_plans(&self, planner: &Planner<'_>, loaded: &Loaded<'_>) -> Result<()> {
        let (Some(policies), Some((dir, manifest))) = (&loaded.policies, &planner.plans.approved)
        else {
            return Ok(());
        };
        let digest = policies.borrow().digest.clone();
        let why = match &manifest.judged_by {
            Some(judged) if *judged == digest => return Ok(()),
            Some(_) => "were judged by other policies than the workspace's now",
            None => "were saved without the workspace's policies judging them",
        };
        let file = dir.join(crate::run::approval::MANIFEST);
        Err(Error::NotAsApproved(vec![
            crate::error::Problem::new(format!("the approved plans {why}: nothing ran"))
                .at(crate::error::Location::file(file))
                .hint(
                    "preview --save-plans DIR again (the policies judge it), then up --plans DIR",
                ),
        ]))
    }

    /// A denial of what `up` or `destroy` would do, for programs (`--output json`): the run's
    /// summary has nothing to say, nothing having run, so this is the document on stdout — the
    /// run, `"status": "denied"`, the decision and the exit code.
    pub(super) fn print_denied(&self, planner: &Planner<'_>, decision: &Decision) -> Result<()> {
        if self.settings.output != crate::settings::OutputFormat::Json {
            return Ok(());
        }
        let document = serde_json::json!({
            "run_id": planner.run_id,
            "operation": self.run.operation,
            "provider": planner.deployment.provider.name,
            "stack": planner.stack.name.as_str(),
            "status": "denied",
            "policy": decision,
            "exit_code": crate::error::exit::DRIFT,
        });
        let text = serde_json::to_string_pretty(&document).expect("a decision serializes");
        crate::ui::print(&format!("{text}\n"))
    }

    /// What every input says of this run.
    fn about<'p>(&self, planner: &'p Planner<'_>) -> About<'p> {
        let run = self.run;
        About {
            operation: run.operation,
            stack: planner.stack.name.as_str(),
            provider: planner.deployment.provider.name.as_str(),
            run_id: planner.run_id,
            fanned_out: run.join.is_some() || run.open.is_some(),
        }
    }

    /// Before a destroy or `ci open` asks, records or runs anything: what the policies say of
    /// it, from what it knows without a preview — a destroy's projects with mara's context
    /// alone (a destroy plans nothing to show) and the deployment, with the deployed projects a
    /// destroy would leave standing on what it removes (which `--orphan-dependents` lets it
    /// leave); `ci open`'s deployment alone (its jobs judge their own plans, and it needs no
    /// project's secrets). Said on stderr; a denial is exit 4.
    pub(super) fn judge_before(
        &self,
        planner: &Planner<'_>,
        loaded: &Loaded<'_>,
        ledger: &mut Opener,
    ) -> Result<()> {
        let run = self.run;
        let destroy = run.operation == Operation::Destroy;
        let opens = run.open.is_some();
        let Some(policies) = loaded.policies.as_ref().filter(|_| destroy || opens) else {
            return Ok(());
        };
        let orphans = match destroy {
            true => orphans(loaded, ledger)?,
            false => Vec::new(),
        };
        let plan = planner.plan(run.operation, &loaded.config, "");
        let scope = Scope {
            projects: destroy && !opens,
            deployment: run.join.is_none(),
            orphans: &orphans,
        };
        let about = self.about(planner);
        let decision = gate::decide(&mut policies.borrow_mut(), &about, (&plan, None), scope)
            .map_err(|failed| Error::config(failed.problem()))?;
        say(
            self.settings,
            &decision,
            run.confirmation == Confirmation::Ask,
        );
        let denied = decision.denied().count();
        if denied > 0 {
            self.print_denied(planner, &decision)?;
        }
        *loaded.judged.borrow_mut() = Some(decision);
        match denied {
            0 => Ok(()),
            denied => Err(Error::PolicyDenied {
                denied,
                what: if destroy { "the destroy" } else { "the run" },
                then: if opens {
                    ": nothing was opened"
                } else {
                    ": nothing was destroyed"
                },
            }),
        }
    }
}

/// The deployed projects a destroy of the selection would leave standing on what it removes,
/// each with what it stands on, as the ledger knows what is deployed.
fn orphans(loaded: &Loaded<'_>, ledger: &mut Opener) -> Result<Vec<Orphan>> {
    let stack = loaded.stack.name.as_str();
    let deployed = match ledger.existing()? {
        Some(ledger) => ledger.last_fingerprints(stack)?,
        None => Default::default(),
    };
    let deployed = deployed.keys().map(String::as_str).collect();
    Ok(
        (dependents::orphans_standing_on(&loaded.selected, &deployed).into_iter())
            .map(|(path, depends_on)| Orphan { path, depends_on })
            .collect(),
    )
}

/// The run's decision with what the engines' own policies (Pulumi's policy packs) said of its
/// projects as they ran: a decision of its own when the workspace has no Rego policy.
pub(super) fn with_packs(judged: Option<Decision>, reports: &[ProjectReport]) -> Option<Decision> {
    let said: Vec<_> = (reports.iter())
        .flat_map(|r| r.policy.iter().filter(|m| m.is_pack()).cloned())
        .collect();
    if said.is_empty() {
        return judged;
    }
    let mut decision = judged.unwrap_or_default();
    decision.extend(Decision { messages: said });
    Some(decision)
}

/// What the policies said before the run goes on, on stderr: when someone is about to be asked
/// (`asking`), or when they deny it (no summary will say it); otherwise the run's summary says
/// it. With `-q`, only the denials.
pub(super) fn say(settings: &crate::settings::Settings, decision: &Decision, asking: bool) {
    if !(asking || decision.denies()) {
        return;
    }
    let quiet = settings.verbosity < 0;
    let shown = Decision {
        messages: (decision.messages.iter())
            .filter(|m| !quiet || m.level == crate::policy::Level::Deny)
            .cloned()
            .collect(),
    };
    if !shown.is_empty() {
        crate::ui::eprint(&crate::ui::confirm::policies(&shown, settings.stderr_style));
    }
}
