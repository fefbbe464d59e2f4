//! The run's policy gate (docs/commands.md, "Policies"): the workspace's policies compiled once
//! as the run loads — a policy that does not compile is exit 3 before anything runs — and their
//! decision over the run's plans, before anything of them is applied.

use std::cell::RefCell;

use super::{Invocation, Loaded};
use crate::engine::Operation;
use crate::error::{Error, Result};
use crate::policy::{Decision, Kind, Policies};
use crate::run::events::ProjectReport;
use crate::run::gate::{self, About};
use crate::run::plan::{Planner, RunPlan};
use crate::workspace::Workspace;

/// The policies of `workspace`, where they judge `operation`: a preview's plans, and what an
/// `up` applies.
pub(super) fn of(operation: Operation, workspace: &Workspace) -> Result<Option<RefCell<Policies>>> {
    if !matches!(operation, Operation::Preview | Operation::Up) {
        return Ok(None);
    }
    let policies = Policies::load(&workspace.root, &workspace.settings.policy)?;
    Ok(policies.map(RefCell::new))
}

/// Whether the run's previews keep each project's own plan: the per-project policies read it.
pub(super) fn read_plans(loaded: &Loaded<'_>) -> bool {
    (loaded.policies.as_ref()).is_some_and(|p| p.borrow().has(Kind::Project))
}

impl Invocation<'_> {
    /// What the policies said of the run, for its summary: a preview's plans judged now that
    /// it ran; an `up`'s, what they said of the plans its confirmation previewed.
    pub(super) fn judged(
        &self,
        planner: &Planner<'_>,
        loaded: &Loaded<'_>,
        confirmed: &RefCell<Option<Decision>>,
        (plan, reports): (&RunPlan, &mut [ProjectReport]),
    ) -> Result<Option<Decision>> {
        match self.run.operation {
            Operation::Preview => self.judge(planner, loaded, (plan, reports)),
            _ => Ok(confirmed.take()),
        }
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
        let run = self.run;
        let about = About {
            operation: run.operation,
            stack: planner.stack.name.as_str(),
            provider: planner.deployment.provider.name.as_str(),
            run_id: planner.run_id,
            fanned_out: run.join.is_some() || run.open.is_some(),
        };
        let mut policies = policies.borrow_mut();
        // A job of a fanned-out run holds its own projects only: the deployment's policies are
        // not its to judge.
        let whole = run.join.is_none();
        let decision = gate::decide(&mut policies, &about, (plan, reports), (&[], whole))
            .map_err(|failed| Error::config(failed.problem()))?;
        Ok(Some(decision))
    }
}
