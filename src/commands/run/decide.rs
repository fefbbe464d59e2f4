//! `--resume` and `--changed` (docs/commands.md, "up, preview, refresh, destroy"): which of the
//! selected projects run, decided from the ledger by `run::narrow`, and what a person is told of
//! it.

use super::{Invocation, Loaded};
use crate::deployment::Deployment;
use crate::error::Result;
use crate::ledger::Opener;
use crate::run::narrow::{self, Resume};
use crate::settings::run::Mode;
use crate::ui::report;

impl Invocation<'_> {
    /// Narrows the selection to the projects that run, saying why; `false` when none does.
    pub(super) fn decide<'d>(
        &self,
        ledger: &mut Opener,
        deployment: &'d Deployment,
        loaded: &mut Loaded<'d>,
    ) -> Result<bool> {
        let (run, stack) = (self.run, loaded.stack);
        if run.mode == Mode::All {
            return Ok(true);
        }
        let ledger = ledger.existing()?;
        let narrowed = match run.mode {
            Mode::All => return Ok(true),
            Mode::Resume => {
                let provider = deployment.provider.name.as_str();
                match narrow::resume(&deployment.graph, ledger, stack, (run.operation, provider))? {
                    Resume::Completed { run_id } => {
                        crate::ui::print(&format!(
                            "Nothing to resume: the last {} on stack {}, run {run_id}, completed.\n",
                            run.operation, stack.name
                        ))?;
                        None
                    }
                    Resume::Projects {
                        run_id,
                        status,
                        plan,
                        never_started,
                    } => {
                        let never = match never_started {
                            0 => String::new(),
                            n => format!(" ({n} never started)"),
                        };
                        crate::ui::errln!(
                            "Resuming run {run_id} ({status}): {} of its projects did not complete{never}.",
                            plan.len()
                        );
                        Some(plan)
                    }
                }
            }
            Mode::Changed => {
                let changes =
                    narrow::changes(&loaded.selected, &loaded.fingerprints, ledger, stack)?;
                let style = self.settings.stdout_style;
                crate::ui::print(&report::changes(&changes, style))?;
                let plan = narrow::changed(&deployment.graph, &changes)?;
                if plan.is_none() {
                    crate::ui::print(&format!(
                        "Nothing changed since the last successful up on stack {}: no project runs.\n",
                        stack.name
                    ))?;
                }
                plan
            }
        };
        match narrowed {
            Some(plan) => {
                loaded.selected = plan;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}
