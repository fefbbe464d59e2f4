//! A project's approved plan, as its turn in `up` comes (docs/commands.md, "Saved plans"): its
//! saved plan applied when its inputs are those it was planned with (a Terraform module's plan
//! file; a Pulumi project's update plan, with `[pulumi] update_plans`, which Pulumi itself holds
//! the update to); else planned again, and applied when its changes are the approved ones (or
//! `--replan` lets it); else refused, it and what follows it. An approval whose saved plan its
//! engine would apply is not there is planned again, as one without, and says so.

use super::{Finished, Outcome, Prepared, process, run_repaired};
use crate::engine::{Step, StepKind};
use crate::run::approval::{self, Held};

/// Terraform's words for a saved plan whose state changed since it was made.
const STALE: &str = "Saved plan is stale";

impl Prepared {
    /// How its approved plan goes, once its inputs are known: the operation it runs is set
    /// (the saved plan, or a new one), or it ends refused.
    pub(super) async fn approve(&mut self) -> Result<(), Finished> {
        let Some(approval) = self.job.project.approval.clone() else {
            return Ok(());
        };
        let approved = &approval.approved;
        if let Some(why) = &approval.unsaved {
            let said = format!("{why}: planned again and compared with the approved plan instead");
            self.job.emit(&mut self.log, super::Stream::Stderr, &said);
        }
        // A project that was not previewed has no inputs on record: planning it is what tells.
        let changed = match approved.deferred() {
            true => Vec::new(),
            false => approval::inputs_differ(approved, &self.preview.inputs_taken),
        };
        let held = match (&approval.steps.apply_saved, &approval.steps.replan) {
            // Its inputs as planned: the saved plan is what was approved.
            (Some(apply), _) if changed.is_empty() && !approved.deferred() => {
                self.operation_is(apply.clone());
                Held::AsApproved
            }
            (_, Some(replan)) => {
                let (why, plan) = self.replanned(&approval.steps, replan, approved).await?;
                if let (Some(why), false) = (&why, approval.replan) {
                    let yes = approval.ask && self.asked(why, plan).await;
                    if !yes {
                        return Err(self.refused(&changed, why));
                    }
                }
                if let Some(apply) = &approval.steps.apply_replanned {
                    self.operation_is(apply.clone());
                }
                // A fresh preview that shows what was approved (Pulumi's check) is the plan
                // as approved; a new plan that does the same, a replan; one that does not, a
                // change.
                let checked = approval.steps.apply_replanned.is_none();
                match (why.is_none(), changed.is_empty() && checked) {
                    (true, true) => Held::AsApproved,
                    (true, false) => Held::Replanned,
                    (false, _) => Held::Changed,
                }
            }
            // Nothing to plan again (a command, manifests): its inputs decide.
            (_, None) if changed.is_empty() && !approved.deferred() => Held::AsApproved,
            (_, None) if approval.replan => Held::Changed,
            (_, None) => {
                let why = match approved.deferred() {
                    true => "it was not previewed (its inputs were known only after apply)",
                    false => "it has no plan to compare",
                };
                if !(approval.ask && self.asked(why, Vec::new()).await) {
                    return Err(self.refused(&changed, why));
                }
                Held::Changed
            }
        };
        self.preview.approval = Some(held);
        Ok(())
    }

    /// Plans it again with its inputs as they now are: why the new plan's changes differ from
    /// the approved ones (`None`: they do not).
    async fn replanned(
        &mut self,
        steps: &crate::engine::ApprovalSteps,
        replan: &Step,
        approved: &approval::Planned,
    ) -> Result<(Option<String>, Vec<String>), Finished> {
        let job = &self.job;
        let preview = crate::engine::Operation::Preview;
        let (finished, mut reader) = run_repaired(job, &mut self.log, replan, preview).await?;
        if !replan.succeeded(finished.code) {
            let said = (reader.error())
                .or_else(|| process::last_error(&finished.stderr))
                .map(|e| job.redactor.redact(e))
                .unwrap_or_else(|| "it failed".into());
            let reason = format!("planning it again failed: {said}");
            return Err(job.failed(finished.code, reason, &self.log));
        }
        let mut changes = reader.changes();
        if replan.changes_code.is_some()
            && replan.changes_code == finished.code
            && let Some(counts) = &mut changes
            && !crate::engine::has_changes(counts)
        {
            counts.insert("output".into(), 1);
        }
        let diffs = reader.diffs();
        let plan = (diffs.iter())
            .flat_map(|d| d.lines())
            .map(|l| job.redactor.redact(&l))
            .collect();
        // What each plan does, to the values: Pulumi's from its previews; Terraform's read from
        // its plan files.
        let (was, is) = match (&steps.show_replanned, reader.plan_digest()) {
            (Some(show), _) => {
                let was = match &steps.show_saved {
                    Some(saved) => self.plan_digest(saved).await?,
                    None => approved.digest.clone(),
                };
                (was, self.plan_digest(show).await?)
            }
            (None, is) => (approved.digest.clone(), is),
        };
        self.replanned_changes = changes.clone();
        let digests = was.as_deref().zip(is.as_deref());
        Ok((
            approval::differs(approved, changes.as_ref(), &diffs, digests),
            plan,
        ))
    }

    /// Asks whoever confirms the run whether its new plan applies (`Event::Asks`); no answer
    /// (no one to ask, the run interrupted) is a no.
    async fn asked(&self, why: &str, plan: Vec<String>) -> bool {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let question = crate::run::events::Question {
            why: why.to_string(),
            plan,
            answer: std::sync::Arc::new(std::sync::Mutex::new(Some(sender))),
        };
        let job = &self.job;
        let asks = crate::run::events::Event::Asks {
            index: job.index,
            path: job.project.path.clone(),
            question,
        };
        if job.events.send(asks).is_err() {
            return false;
        }
        receiver.await.unwrap_or(false)
    }

    /// What the plan `show` reads does (its engine's `plan_digest`); `None` when it says nothing
    /// readable.
    async fn plan_digest(&mut self, show: &Step) -> Result<Option<String>, Finished> {
        let job = &self.job;
        let preview = crate::engine::Operation::Preview;
        let (finished, _) = run_repaired(job, &mut self.log, show, preview).await?;
        if !show.succeeded(finished.code) {
            let said = process::last_error(&finished.stderr).unwrap_or("it failed");
            let reason = format!("reading a plan failed: {}", job.redactor.redact(said));
            return Err(job.failed(finished.code, reason, &self.log));
        }
        Ok(job.project.engine.plan_digest(&finished.stdout))
    }

    /// Its operation is `step` from now on.
    fn operation_is(&mut self, step: Step) {
        let steps = &mut self.job.project.steps;
        if let Some(at) = (self.next..steps.len()).find(|&i| steps[i].kind == StepKind::Operation) {
            steps[at] = step;
        }
    }

    /// Ended: its approved plan no longer holds (its inputs `changed`, and `why`).
    fn refused(&self, changed: &[String], why: &str) -> Finished {
        let inputs = match changed {
            [] => String::new(),
            changed => format!("its inputs changed ({}), and ", changed.join(", ")),
        };
        let reason = format!("the approved plan no longer holds: {inputs}{why}");
        refusal(self.job.ended(Outcome::Skipped { reason }, &self.log))
    }
}

/// `finished`, skipped, as a refusal.
fn refusal(mut finished: Finished) -> Finished {
    finished.preview.approval = Some(Held::Refused);
    finished
}

/// What an apply of a saved plan changed, when its engine's own counts miss it: Terraform's
/// apply of a plan file names no output actions, and an output-only change would read as none.
pub(super) fn counted(
    approval: Option<&crate::run::plan::Approval>,
    held: Option<Held>,
    replanned: Option<crate::engine::Changes>,
    changes: Option<crate::engine::Changes>,
) -> Option<crate::engine::Changes> {
    // A plan file applied is what its plan counted; a Pulumi `up` counts its own.
    let Some(approval) = approval.filter(|a| a.steps.apply_replanned.is_some()) else {
        return changes;
    };
    match held {
        Some(Held::AsApproved) if approval.steps.apply_saved.is_some() => {
            approval.approved.changes.clone().or(changes)
        }
        Some(Held::Replanned | Held::Changed) => replanned.or(changes),
        _ => changes,
    }
}

/// A saved plan Terraform refused as stale (its state changed since it was made) is a plan
/// that no longer holds, not a failure of the project.
pub(super) fn stale(mut finished: Finished) -> Finished {
    let said_stale =
        matches!(&finished.outcome, Outcome::Failed { reason, .. } if reason.contains(STALE));
    if said_stale && finished.preview.approval.is_none() {
        let reason = "the approved plan no longer holds: Terraform says it is stale (the state changed since it was made: another apply, or this plan applied already; save new plans)".to_string();
        finished.outcome = Outcome::Skipped { reason };
        finished = refusal(finished);
    }
    finished
}
