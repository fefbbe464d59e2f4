//! `mara up`, `preview`, `refresh` and `destroy` (docs/commands.md, "up, preview, refresh,
//! destroy"): load the deployment, check it, decide what runs, record it and prepare the stack,
//! plan, confirm, execute, report. Each step is a call into the layer that owns it; this file says
//! in what order, and what a person sees between them. A run fanned out over CI jobs goes the
//! same way: `ci open` stops once the run is recorded, a job (`--run`) joins it.

mod carried;
mod confirmation;
mod decide;
mod declined;
mod load;
mod plans;
mod policies;
mod preparation;
mod record;
mod summary;

use std::collections::BTreeMap;
use std::time::{Instant, SystemTime};

use crate::cli::RunCommand;
use crate::clock;
use crate::deployment::{self, Deployment, StackFiles};
use crate::engine::Operation;
use crate::error::{Error, Result};
use crate::graph::Plan;
use crate::ledger::Opener;
use crate::run::events::{ProjectReport, Sink};
use crate::run::interrupt::Interrupt;
use crate::run::plan::{Planner, RunPlan};
use crate::run::project::Context;
use crate::run::recorder::Recorder;
use crate::run::runner::{Runner, Schedule};
use crate::run::stacks;
use crate::run::{prepare, watchdog};
use crate::settings::Settings;
use crate::settings::run::RunSettings;
use crate::workspace::Workspace;
use crate::workspace::stack::ResolvedStack;
use crate::workspace::stack_config::StackConfigFile;
use declined::Stored;
pub use summary::summarize;
use summary::{terminal, warn_killed};

/// `mara up|preview|refresh|destroy`, as typed.
pub fn run(settings: &Settings, command: RunCommand) -> Result<()> {
    // Signals are the run's from its first step: a Ctrl-C or SIGTERM at any point below ends it
    // at the next step, with what it started stopped, and exit 130.
    let runner = runner(settings)?;
    let workspace = deployment::workspace(settings)?;
    let run = RunSettings::resolve(command, settings, &workspace.settings)?;
    Invocation::new(settings, &run, &runner).load(workspace)
}

/// A run another command starts with settings of its own (`RunSettings::started`): the cluster's
/// `up` and `destroy`, `ci open`.
pub fn start(settings: &Settings, workspace: Workspace, run: &RunSettings) -> Result<()> {
    let runner = runner(settings)?;
    Invocation::new(settings, run, &runner).load(workspace)
}

fn runner(settings: &Settings) -> Result<Runner> {
    Runner::new(Interrupt::watched(watchdog::grace(&settings.env)))
}

/// What every step of one run sees: the invocation's settings, the run's, and its runner.
struct Invocation<'a> {
    settings: &'a Settings,
    run: &'a RunSettings,
    runner: &'a Runner,
}

/// What the run reads of its deployment before it decides anything.
struct Loaded<'d> {
    stack: &'d ResolvedStack,
    config: StackConfigFile,
    selected: Plan<'d>,
    /// The environment with `MARA_SECRET_*`, for mara alone.
    with_secrets: BTreeMap<String, String>,
    /// The secrets project's own stack configuration.
    stored: StackConfigFile,
    /// What `--changed` compares, and what a real `up` records.
    fingerprints: BTreeMap<usize, String>,
    /// `state = "ledger"`: the server the engines keep state in, once the ledger is reached.
    state: Option<crate::engine::state::StateServer>,
    /// The workspace's policies, compiled once for the run, where they judge its operation
    /// (`policies::of`).
    policies: Option<std::cell::RefCell<crate::policy::Policies>>,
    /// What they decided before the run went on: of the plans an `up`'s confirmation
    /// previewed, of what a destroy removes. For the summary.
    judged: std::cell::RefCell<Option<crate::policy::Decision>>,
}

/// The environment file a first `up` writes when there is none: the stack it deployed.
fn first_env(stack: &ResolvedStack) -> String {
    format!("PULUMI_STACK={}\n", stack.name)
}

/// What the run finds of the stack before it is planned (`Invocation::survey`).
struct Survey {
    /// The backend the ledger keys the known stacks by (`stacks::backend_of`).
    backend: String,
    /// The projects the ledger knows to have the stack on that backend.
    known_stacks: std::collections::BTreeSet<String>,
    /// The kubeconfig the kubectl engine names, decided once for the checks and the plan.
    kubeconfig: crate::workspace::kubeconfig::Choice,
    /// The projects the run leaves untouched, with why (`stacks::untouched`).
    absent: BTreeMap<usize, String>,
    /// For a job of a fanned-out run, the projects it skips, with why (`fanout::blocked`).
    blocked: BTreeMap<usize, crate::run::plan::Blocked>,
    /// For a destroy, the earlier one that left nothing selected deployed (`stacks::destroyed_by`).
    destroyed: Option<crate::ledger::RunRecord>,
    /// The outputs its inputs take from projects it does not apply (`inputs_before`).
    inputs: BTreeMap<String, crate::run::inputs::Known>,
}

/// What the run goes on from once it is recorded.
struct Prepared<'a> {
    loaded: &'a Loaded<'a>,
    /// The environment every engine and hook gets (`prepare::engine_env`).
    env: BTreeMap<String, String>,
    /// The backend the ledger keys the known stacks by (`stacks::backend_of`).
    backend: String,
    started: SystemTime,
    /// The run's ledger, for what a run without a record (a preview) records.
    ledger: Opener,
    /// For a destroy, the earlier one that left nothing selected deployed (`Survey::destroyed`).
    destroyed: Option<crate::ledger::RunRecord>,
    /// The outputs its inputs take from projects it does not apply (`Survey::inputs`).
    inputs: BTreeMap<String, crate::run::inputs::Known>,
    /// Each project's duration in the operation's last run on the stack, by path
    /// (`run::priority`).
    durations: std::collections::HashMap<String, std::time::Duration>,
}

impl<'a> Invocation<'a> {
    fn new(settings: &'a Settings, run: &'a RunSettings, runner: &'a Runner) -> Self {
        Invocation {
            settings,
            run,
            runner,
        }
    }

    fn load(&self, workspace: Workspace) -> Result<()> {
        let root = workspace.root.clone();
        let files = self.carried(StackFiles::load_in(self.settings, workspace)?)?;
        let deployment = files.into_deployment(self.settings)?;
        self.execute(&deployment).map_err(|e| e.relative_to(&root))
    }

    /// Load, decide, check, record; then `go`; then the record closed by how it went.
    fn execute(&self, deployment: &Deployment) -> Result<()> {
        let (run, interrupt) = (self.run, self.runner.interrupt());
        let mut loaded = self.loaded(deployment)?;
        let files = &deployment.files;
        let Some(mut ledger) = self.ledger(deployment, &mut loaded)? else {
            return Ok(());
        };
        if !self.decide(&mut ledger, deployment, &mut loaded)? {
            return Ok(());
        }
        self.check(deployment, &loaded, &mut ledger)?;
        if let Some(text) = &run.announce {
            crate::ui::print(text)?;
        }
        interrupt.checkpoint()?;
        let plans = self.plans(deployment, &loaded)?;
        let env = prepare::engine_env(&loaded.with_secrets, ledger.place());
        let Some(found) = self.survey(deployment, &loaded, &mut ledger, &env)? else {
            return Ok(());
        };
        let durations = self.durations(&mut ledger, loaded.stack);
        let started = self.runner.now();
        let run_id = self.run_id(started);
        let planner = Planner {
            deployment,
            selected: &loaded.selected,
            stack: loaded.stack,
            fingerprints: &loaded.fingerprints,
            run_id: &run_id,
            color: self.settings.stdout_style.enabled,
            remove_stacks: run.remove_stacks,
            absent: &found.absent,
            blocked: &found.blocked,
            known_stacks: &found.known_stacks,
            kubeconfig: &found.kubeconfig,
            plans: &plans,
            state: loaded.state.as_ref(),
        };
        // Every approved plan still holds, or nothing is recorded nor applied (a dry run checks
        // what needs no engine).
        self.approved_hold(&planner, &loaded, &env, &found.inputs)?;
        self.judge_before(&planner, &loaded, &mut ledger)?;
        self.judged_plans(&planner, &loaded)?;
        if run.dry_run {
            let plan = planner.plan(run.operation, &loaded.config, "");
            let shown = |p: &std::path::Path| files.workspace.display(p).display().to_string();
            return crate::ui::print(&plan.render(shown));
        }
        // Recorded, and the stack locked (a preview takes no lock); whatever happens next, the
        // record says how it ended, and `mara cancel` reaches it. What the run writes of its own
        // goes in the state directory, which git ignores.
        interrupt.checkpoint()?;
        let state_dir = files.workspace.state_dir();
        crate::files::own_dir(&state_dir).map_err(|e| Error::write(&state_dir, e))?;
        let mut recorder = self.record(&mut ledger, &planner, started)?;
        if run.open.is_some() {
            return self.opened(recorder.as_ref(), &planner);
        }
        if let Some(recorder) = &mut recorder {
            recorder.watch_cancel(interrupt.clone());
        }
        let prepared = Prepared {
            loaded: &loaded,
            env,
            backend: found.backend,
            started,
            ledger,
            destroyed: found.destroyed,
            inputs: found.inputs,
            durations,
        };
        let mut went = Went::default();
        let result = self.go(&planner, prepared, recorder.as_mut(), &mut went);
        planner.forget_plans();
        let result = summary::lease_kept(interrupt, result);
        self.close(recorder, &result, (went.ran, went.verdict), &planner);
        result
    }

    /// Each project's duration in the operation's last run on `stack`, which the scheduler
    /// ranks projects by when more than one runs at a time (`run::priority`); none when the
    /// ledger has no such run (or cannot be read now: the run is the same without).
    fn durations(
        &self,
        ledger: &mut Opener,
        stack: &crate::workspace::stack::ResolvedStack,
    ) -> std::collections::HashMap<String, std::time::Duration> {
        if self.run.parallel <= 1 {
            return Default::default();
        }
        let last = ledger.existing().ok().flatten().and_then(|ledger| {
            ledger
                .last_run(stack.name.as_str(), self.run.operation)
                .ok()?
        });
        let Some(last) = last else {
            return Default::default();
        };
        (crate::run::priority::durations(&last).into_iter())
            .map(|(path, took)| (path.to_string(), took))
            .collect()
    }

    /// The run's id: the fanned-out run's it opens or joins, else one of its start.
    fn run_id(&self, started: SystemTime) -> String {
        let run = self.run;
        (run.join.clone())
            .or_else(|| run.open.as_ref().map(|o| o.run_id.clone()))
            .unwrap_or_else(|| clock::run_id(started))
    }

    /// Prepare, plan, confirm, execute, report. `went` says whether anything ran — a secret
    /// stored or a project run (as opposed to the run stopping before, or finding no project
    /// with the stack) — and the run's verdict, once it has one, for its record.
    fn go(
        &self,
        planner: &Planner<'_>,
        mut prepared: Prepared<'_>,
        mut recorder: Option<&mut Recorder>,
        went: &mut Went,
    ) -> Result<()> {
        let ran = &mut went.ran;
        let (run, interrupt) = (self.run, self.runner.interrupt());
        let workspace = &planner.deployment.files.workspace;
        let stack = planner.stack;
        let ready = self.prepare(planner, &prepared, ran)?;
        interrupt.checkpoint()?;
        let fingerprints = self.fingerprints_now(planner, prepared.loaded, &ready.config)?;
        let planner = &match &fingerprints {
            Some(fingerprints) => Planner {
                fingerprints,
                ..*planner
            },
            None => *planner,
        };

        let mut plan = self.planned(planner, prepared.loaded, &ready, ran)?;
        plan.estimates = (plan.projects.iter())
            .map(|p| prepared.durations.get(&p.path).copied())
            .collect();

        // Execute: the terminal and the ledger follow the run as it goes.
        let clock_start = Instant::now();
        *ran = true;
        let mut reports = self.follow(
            &plan,
            ready.context,
            recorder.as_deref_mut(),
            &workspace.root,
        );
        crate::fingerprint::keep_hashes();
        let judged = self.judged_and_kept(
            (planner, prepared.loaded, &ready.config),
            (&plan, &mut reports),
            recorder.as_deref_mut(),
        )?;
        record::stacks_seen(
            recorder.as_deref(),
            &mut prepared,
            (stack, planner.known_stacks),
            &plan,
            &reports,
        );

        // Report.
        let took = clock_start.elapsed();
        let times = (prepared.started, self.runner.now());
        let mut summary = summary::of(run, planner, reports, times, took, interrupt);
        summary.policy = judged;
        // What the run ends with, decided first so that the summary says it (`exit_code`).
        let nothing = stacks::none_has_it(&summary.projects, stack.name.as_str());
        let destroyed = prepared.destroyed.take().filter(|_| nothing);
        let found = match (nothing, &destroyed) {
            (true, Some(_)) => summary::Found::DestroyedAlready,
            (true, None) => summary::Found::NoStack,
            (false, _) => summary::Found::TheStack,
        };
        let result = summary::verdict(run, &mut summary, interrupt, (stack, found));
        went.verdict = Some((summary.status, times.1));
        summarize(self.settings, run, &summary)?;
        warn_killed(self.settings, &summary);
        if nothing {
            *ran = false;
            if let Some(by) = destroyed {
                crate::ui::print(&stacks::already_destroyed(stack.name.as_str(), &by))?;
            }
        }
        if result.is_ok() && run.operation == Operation::Up && !nothing {
            record::infra_type(self.settings, planner, &ready.config);
        }
        result
    }

    /// Plan, and confirm: a "no" that left nothing behind leaves no record either; once
    /// confirmed, a first `up` writes the environment file.
    fn planned(
        &self,
        planner: &Planner<'_>,
        loaded: &Loaded<'_>,
        ready: &Ready,
        ran: &mut bool,
    ) -> Result<RunPlan> {
        let plan = match self.confirmed_plan(planner, loaded, ready) {
            Err(error @ (Error::Declined(_) | Error::PolicyDenied { .. })) => {
                *ran = *ran && !ready.taken_back.get();
                return Err(error);
            }
            plan => plan?,
        };
        self.runner.interrupt().checkpoint()?;
        let files = &planner.deployment.files;
        if self.run.operation == Operation::Up && files.env_file.is_none() {
            let file = files.workspace.env_file();
            crate::files::write_private(&file, &first_env(planner.stack))
                .map_err(|e| Error::write(&file, e))?;
        }
        Ok(plan)
    }

    /// Runs `plan` with the terminal and the ledger following it; the projects' reports.
    fn follow(
        &self,
        plan: &RunPlan,
        context: Context,
        recorder: Option<&mut Recorder>,
        root: &std::path::Path,
    ) -> Vec<ProjectReport> {
        let mut terminal = terminal(self.settings, self.run);
        let mut ledger = recorder.as_deref().map(|r| r.sink(plan, root));
        // The ledger first: a project's end is shown once it is recorded.
        let mut sinks: Vec<&mut dyn Sink> = Vec::new();
        sinks.extend(ledger.as_mut().map(|l| l as &mut dyn Sink));
        sinks.push(&mut terminal);
        let schedule = Schedule {
            parallel: self.run.parallel,
            failure: self.run.failure,
        };
        let reports = self.runner.execute(plan, context, schedule, &mut sinks);
        self.runner.interrupt().lease().work_ended();
        drop(ledger);
        if let Some(recorder) = recorder {
            recorder.confirm_lock(self.runner.interrupt());
        }
        reports
    }
}

/// What a run's `go` came to, for its record (`Recorder::close`).
#[derive(Default)]
struct Went {
    /// Whether anything ran: a secret stored, a project run.
    ran: bool,
    /// The run's status and end, as its summary said them.
    verdict: Option<(crate::status::RunStatus, SystemTime)>,
}

/// The stack as the run goes on with it, once prepared.
struct Ready {
    /// The shared configuration as it now is (a first run has just written it).
    config: StackConfigFile,
    context: Context,
    /// What was stored before the confirmation, for a "no".
    stored: Stored,
    /// Set by a "no" that took back everything the run made: it is not recorded.
    taken_back: std::cell::Cell<bool>,
    /// The projects whose stack preparing selected (the secrets project's, to store secrets).
    selected: Vec<String>,
}
