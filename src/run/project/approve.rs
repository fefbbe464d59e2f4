//! A project's approved plan, as its turn in `up` comes (docs/commands.md, "Saved plans"): its
//! saved plan applied when its inputs are those it was planned with; else planned again, and
//! applied when its changes are the approved ones (or `--replan` lets it); else refused, it and
//! what follows it.

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
        // A project not previewed planned with no inputs: planning it is what tells.
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
                let why = self.replanned(replan, approved).await?;
                if let (Some(why), false) = (&why, approval.replan) {
                    return Err(self.refused(&changed, why));
                }
                if let Some(apply) = &approval.steps.apply_replanned {
                    self.operation_is(apply.clone());
                }
                // A fresh preview that shows what was approved (Pulumi's check) is the plan
                // as approved; a new plan applied is a replan.
                let checked = approval.steps.apply_replanned.is_none() && approved.plan.is_none();
                match why.is_none() && changed.is_empty() && checked {
                    true => Held::AsApproved,
                    false => Held::Replanned,
                }
            }
            // Nothing to plan again (a command, manifests): its inputs decide.
            (_, None) if changed.is_empty() && !approved.deferred() => Held::AsApproved,
            (_, None) if approval.replan => Held::Replanned,
            (_, None) => {
                let why = match approved.deferred() {
                    true => "it was not previewed (its inputs were known only after apply)",
                    false => "it has no plan to compare",
                };
                return Err(self.refused(&changed, why));
            }
        };
        self.preview.approval = Some(held);
        Ok(())
    }

    /// Plans it again with its inputs as they now are: why the new plan's changes differ from
    /// the approved ones (`None`: they do not).
    async fn replanned(
        &mut self,
        replan: &Step,
        approved: &approval::Planned,
    ) -> Result<Option<String>, Finished> {
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
        for line in reader.finish() {
            job.emit(&mut self.log, process::Stream::Stdout, &line);
        }
        let mut changes = reader.changes();
        if replan.changes_code.is_some()
            && replan.changes_code == finished.code
            && let Some(counts) = &mut changes
            && !crate::engine::has_changes(counts)
        {
            counts.insert("output".into(), 1);
        }
        Ok(approval::differs(
            approved,
            changes.as_ref(),
            &reader.diffs(),
        ))
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
        refusal(self.job.failed(None, String::new(), &self.log), reason)
    }
}

/// `finished` as a refusal, for `reason`.
fn refusal(mut finished: Finished, reason: String) -> Finished {
    finished.outcome = Outcome::Skipped { reason };
    finished.preview.approval = Some(Held::Refused);
    finished
}

/// What an apply of a saved plan changed, when its engine's own counts miss it: Terraform's
/// apply of a plan file names no output actions, and an output-only change would read as none.
pub(super) fn counted(
    approval: Option<&crate::run::plan::Approval>,
    held: Option<Held>,
    changes: Option<crate::engine::Changes>,
) -> Option<crate::engine::Changes> {
    let approved = approval.and_then(|a| a.approved.changes.as_ref());
    let outputs_only = approved.is_some_and(|c| c.keys().all(|op| op == "output" || op == "same"));
    match (held, approved) {
        (Some(Held::AsApproved), Some(approved))
            if outputs_only
                && changes
                    .as_ref()
                    .is_none_or(|c| !crate::engine::has_changes(c)) =>
        {
            Some(approved.clone())
        }
        _ => changes,
    }
}

/// A saved plan Terraform refused as stale (its state changed since it was made) is a plan
/// that no longer holds, not a failure of the project.
pub(super) fn stale(mut finished: Finished) -> Finished {
    let said_stale =
        matches!(&finished.outcome, Outcome::Failed { reason, .. } if reason.contains(STALE));
    if said_stale && finished.preview.approval.is_none() {
        let reason = "the approved plan no longer holds: Terraform says it is stale (the state changed since it was made)".to_string();
        finished = refusal(finished, reason);
    }
    finished
}
