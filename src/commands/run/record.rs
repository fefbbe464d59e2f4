//! What a run records, and what a person is told of it (docs/commands.md, "status, history,
//! logs"): the run's record and the stack's lock (a lock taken over is said), the projects of a
//! run opened for CI jobs, the stacks that exist once it ran, how it ended; and, after a stack's
//! first `up`, the provider that built it, in its configuration.

use std::collections::BTreeSet;
use std::time::SystemTime;

use super::{Invocation, Prepared};
use crate::clock;
use crate::error::{Error, Problem, Result, plural};
use crate::ledger::journal::Journal;
use crate::ledger::{Opener, RunStart};
use crate::run::events::ProjectReport;
use crate::run::plan::{Planner, RunPlan};
use crate::run::recorder::{Recorder, TakenOver};
use crate::run::{fanout, prepare, retention, stacks};
use crate::settings::Settings;
use crate::ui::ledger::takeover_note;
use crate::workspace::stack::ResolvedStack;
use crate::workspace::stack_config::{INFRA_TYPE_KEY, StackConfigFile};

impl Invocation<'_> {
    /// The run's record: a job joins its run; `up`, `refresh`, `destroy` and `ci open` record
    /// the run and take the stack's lock (exit 5 when another run holds it); a drift check is
    /// recorded without one, and a preview records nothing here.
    pub(super) fn record(
        &self,
        ledger: &mut Opener,
        planner: &Planner<'_>,
        started: SystemTime,
    ) -> Result<Option<Recorder>> {
        let run = self.run;
        let stack = planner.stack.name.as_str();
        let journal = Journal::of(&planner.deployment.files.workspace, ledger.place());
        if let Some(id) = &run.join {
            let paths: Vec<String> = (planner.selected.order().iter())
                .map(|&i| planner.selected.graph.project(i).path.clone())
                .collect();
            let joined = Recorder::join(ledger.take_writable()?, id, stack, run.operation, &paths);
            if let Err(Error::Interrupted) = joined {
                crate::ui::errln!("Run {id} was cancelled: this job runs nothing.");
            }
            return joined.map(|mut recorder| {
                recorder.keep_unsent_in(journal);
                Some(recorder)
            });
        }
        let locks = run.operation.mutates();
        // A drift check is recorded, as a run of its own kind, and holds no lock; a preview
        // records nothing.
        let drift = run.operation == crate::engine::Operation::Drift;
        if !locks && !drift && run.open.is_none() {
            return Ok(None);
        }
        // A drift check takes no lock, and does not read a stack a live run is changing.
        if drift
            && let Some(existing) = ledger.existing()?
            && let Some(holder) = existing.holder(stack)?
            && holder.is_live(&crate::ledger::whoami().1)
        {
            return Err(Error::Locked(Box::new(
                Problem::new(format!(
                    "stack `{stack}` is being changed by {holder}: a drift check now would read it mid-change"
                ))
                .hint("check it once that run has ended"),
            )));
        }
        let start = RunStart {
            run_id: planner.run_id.to_string(),
            operation: run.operation,
            provider: planner.deployment.provider.name.clone(),
            stack: stack.to_string(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            started: clock::rfc3339(started),
            projects: fanout::waiting(planner.selected, run.operation),
            graph: fanout::edges(planner.selected),
        };
        let lease = run.open.as_ref().map(|o| o.lease);
        let again = |args: &str| self.settings.again(args);
        let (mut recorder, taken) =
            Recorder::start(ledger.take_writable()?, &start, locks, lease, &again)?;
        recorder.keep_unsent_in(journal);
        if let Some(TakenOver { holder, run }) = taken {
            let clear = self.settings.again("unlock --engine");
            // What it was running then, not what it had finished (docs/commands.md, "What a
            // takeover cannot stop").
            let note = run.map(|r| takeover_note(&r, &clear)).unwrap_or_default();
            let whose = match holder.lease_left {
                Some(_) => "lease ran out",
                None => "process is gone",
            };
            let warning = format!(
                "warning: took over the lock of {holder}, whose {whose}; that run is recorded abandoned\n{note}"
            );
            crate::ui::errln!("{}", self.settings.stderr_style.yellow(warning.trim_end()));
        }
        Ok(Some(recorder))
    }

    /// `mara ci open`: the run is recorded and holds its stack, its projects waiting for their
    /// jobs, which do the rest.
    pub(super) fn opened(&self, recorder: Option<&Recorder>, planner: &Planner<'_>) -> Result<()> {
        let paths = fanout::waiting(planner.selected, self.run.operation);
        if let Some(recorder) = recorder {
            recorder.plan(&paths)?;
            // What the jobs deploy with: the files as this runner has them.
            recorder.carry(&Self::inputs_to_carry(&planner.deployment.files))?;
        }
        let (id, n) = (planner.run_id, paths.len());
        let close = self.settings.again(&format!("ci close --run {id}"));
        if self.settings.output == crate::settings::OutputFormat::Json {
            let opened = serde_json::json!({
                "run_id": id,
                "opened": true,
                "operation": self.run.operation,
                "stack": planner.stack.name.as_str(),
                "projects": paths,
                "close": close,
            });
            return crate::ui::print(&format!("{opened:#}\n"));
        }
        crate::ui::print(&format!(
            "Opened run {id}: {n} {} of stack {}, to be joined with `--run {id}` and closed by `{close}`.\n",
            plural(n, "project", "projects"),
            planner.stack.name,
        ))
    }

    /// The record closed by how the run went (`Recorder::close`). What happened to the
    /// deployment decides the exit; a ledger that could not say so is reported beside it
    /// (`status` shows such a run abandoned once mara has exited).
    pub(super) fn close(
        &self,
        recorder: Option<Recorder>,
        result: &Result<()>,
        went: (bool, Option<(crate::status::RunStatus, SystemTime)>),
        planner: &Planner<'_>,
    ) {
        let Some(recorder) = recorder else {
            return;
        };
        let paths: Vec<String> = (planner.selected.order().iter())
            .map(|&i| planner.deployment.graph.project(i).path.clone())
            .collect();
        match recorder.close(result, went, &paths) {
            Err(error) => {
                let text = format!("warning: the run's end was not recorded: {error}");
                crate::ui::errln!("{}", self.settings.stderr_style.yellow(&text));
            }
            // An interrupted run ends at once, and the next one applies the retention; a job's
            // end is not its run's, which `mara ci close` ends.
            Ok(Some(mut ledger))
                if !matches!(result, Err(Error::Interrupted)) && self.run.join.is_none() =>
            {
                retention::after_a_run(ledger.as_mut(), &planner.deployment.files.workspace);
            }
            Ok(_) => {}
        }
    }
}

/// Records which projects now have the stack, and which were found without it, for the next
/// run's plan; a preview (which takes no lock, and may have created stacks) records it too.
pub(super) fn stacks_seen(
    recorder: Option<&Recorder>,
    prepared: &mut Prepared<'_>,
    (stack, known): (&ResolvedStack, &BTreeSet<String>),
    plan: &RunPlan,
    reports: &[ProjectReport],
) {
    let mut seen = stacks::seen(plan, reports);
    // What the ledger knew exists already is not written again.
    seen.exist.retain(|path| !known.contains(path));
    let (backend, stack) = (prepared.backend.as_str(), stack.name.as_str());
    let recorded = match recorder {
        Some(recorder) => recorder.stacks_changed(backend, stack, &seen.exist, &seen.gone),
        None if seen.exist.is_empty() && seen.gone.is_empty() => Ok(()),
        None => (prepared.ledger.writable())
            .and_then(|l| l.stacks_changed(backend, stack, &seen.exist, &seen.gone)),
    };
    if let Err(error) = recorded {
        tracing::warn!("{error}: the stacks that exist are not recorded");
    }
}

/// The first successful `up` of a stack whose configuration does not say which provider built
/// it records that (`kubernetes:infra_type`), so that later runs find the provider.
pub(super) fn infra_type(settings: &Settings, planner: &Planner<'_>, config: &StackConfigFile) {
    let Some(infra_type) = &planner.deployment.provider.infra_type else {
        return;
    };
    let Some(values) = config.config() else {
        return;
    };
    if values.contains(INFRA_TYPE_KEY) {
        return;
    }
    let workspace = &planner.deployment.files.workspace;
    let file = workspace.display(config.path()).display().to_string();
    let style = settings.stderr_style;
    match prepare::record_infra_type(config, infra_type) {
        Ok(true) if settings.verbosity >= 0 => {
            crate::ui::errln!("kubernetes:infra_type `{infra_type}` recorded in {file}")
        }
        Ok(true) => {}
        Ok(false) => crate::ui::errln!(
            "{}",
            style.yellow(&format!("warning: {file} does not say which provider built the stack: add `kubernetes:infra_type: {infra_type}` under `config:`"))
        ),
        Err(error) => crate::ui::errln!("{}", style.yellow(&format!("warning: {error}"))),
    }
}
