//! `mara up`, `preview`, `refresh` and `destroy` (docs/commands.md, "up, preview, refresh,
//! destroy"): load the deployment, check it, decide what runs, record it and prepare the stack,
//! plan, confirm, execute, report. Each step is a call into the layer that owns it; this file says
//! in what order, and what a person sees between them.

mod confirmation;
mod summary;

use std::collections::BTreeMap;
use std::time::{Instant, SystemTime};

use crate::cli::RunCommand;
use crate::clock;
use crate::configure;
use crate::configure::Prompter;
use crate::deployment::checks::RunChecks;
use crate::deployment::{self, Deployment, StackFiles};
use crate::engine::Operation;
use crate::error::{Error, Problem, Result, plural};
use crate::graph::Plan;
use crate::ledger::{self, RunStart};
use crate::run::events::{Outcome, ProjectReport, Sink, run_status};
use crate::run::interrupt::Interrupt;
use crate::run::narrow::{self, Resume};
use crate::run::plan::{self, Planner, RunPlan};
use crate::run::project::{self, Context};
use crate::run::recorder::Recorder;
use crate::run::redact::Redactor;
use crate::run::runner::{Runner, Schedule};
use crate::run::watchdog;
use crate::run::{kubeconfig, prepare, stacks};
use crate::settings::Settings;
use crate::settings::run::{Confirmation, Mode, OpenRun, RunSettings};

use crate::status::RunStatus;
use crate::ui::prompt::TerminalPrompter;
use crate::ui::report::{self, RunSummary};
use crate::workspace::stack::ResolvedStack;
use crate::workspace::stack_config::StackConfigFile;
use confirmation::{Decision, Stored, confirm, declined};
use summary::{outcome, summarize, terminal};

pub fn run(settings: &Settings, command: RunCommand) -> Result<()> {
    run_as(settings, command, None)
}

/// `mara ci open`: everything `run` checks, then the run recorded under `open`'s id, holding its
/// stack for its jobs, and nothing run.
pub fn open(settings: &Settings, command: RunCommand, open: OpenRun) -> Result<()> {
    run_as(settings, command, Some(open))
}

/// The summary of a run recorded by its jobs (`mara ci close`), as a run of its own prints it.
pub fn summarize_run(
    settings: &Settings,
    run: &RunSettings,
    summary: &crate::ui::report::RunSummary,
) -> Result<()> {
    summarize(settings, run, summary)
}

fn run_as(settings: &Settings, command: RunCommand, open: Option<OpenRun>) -> Result<()> {
    // Signals are the run's from its first step: a Ctrl-C or SIGTERM at any point below ends it
    // at the next step, with what it started stopped, and exit 130.
    let runner = Runner::new(Interrupt::watched(watchdog::grace(&settings.env)))?;
    let workspace = deployment::discover(settings)?;
    let root = workspace.root.clone();
    let mut run = RunSettings::resolve(command, settings, &workspace.settings)?;
    run.open = open;
    let deployment = StackFiles::load_in(settings, workspace)?.into_deployment(settings)?;
    execute(settings, &run, &deployment, &runner).map_err(|e| e.relative_to(&root))
}

fn execute(
    settings: &Settings,
    run: &RunSettings,
    deployment: &Deployment,
    runner: &Runner,
) -> Result<()> {
    // Load: the stack, its configuration, the selection, the environment, the stored secrets.
    let files = &deployment.files;
    let stack = files.required_stack()?;
    let config = files.config.clone().unwrap_or_else(|| {
        StackConfigFile::Missing(files.workspace.stack_config_file(&stack.name))
    });
    let selected = Plan::select(&deployment.graph, &run.selection)?;
    let with_secrets = files.environment(settings);
    let stored = match files.secrets_config(stack) {
        Ok(stored) => stored,
        // Only `up` stores secrets there; any other run only reads back what Pulumi stores.
        Err(error) if run.operation != Operation::Up => {
            tracing::warn!("{error}: the secrets it stores are not read back");
            StackConfigFile::Missing(files.workspace.secrets_config_file(&stack.name))
        }
        Err(error) => return Err(error),
    };

    // Decide which of the selected projects run.
    // Fingerprinted: what `--changed` compares, and what a real `up` records; a dry run of all
    // the projects needs none.
    let fingerprints = match (run.operation, run.mode, run.dry_run) {
        (_, Mode::Changed, _) | (Operation::Up, _, false) => {
            narrow::fingerprints(&selected, files, stack)
        }
        _ => BTreeMap::new(),
    };
    // One ledger for the whole run: one connection to a server.
    let mut ledger = ledger::Opener::new(ledger::place(&files.workspace, &settings.env)?);
    // A run fanned out over CI jobs lives in a ledger every runner reaches.
    if (run.open.is_some() || run.join.is_some())
        && matches!(ledger.place(), ledger::Place::File(_))
    {
        return Err(Error::config(
            Problem::new("a run fanned out over CI jobs needs a team's ledger, which every runner reaches; this workspace's own is not shared")
                .hint("set MARA_LEDGER_URL (docs/commands.md, \"A team's ledger\")"),
        ));
    }
    // The jobs of a fanned-out run, each on a runner of its own, share the engines' state: a
    // file backend that is relative, or inside the workspace, would be each runner's own copy.
    if run.open.is_some()
        && let Some(url) = with_secrets.get("PULUMI_BACKEND_URL")
        && let Some(path) = url.strip_prefix("file://")
    {
        let path = std::path::Path::new(path);
        // `..` taken out as the path says, not as links lead.
        let normal = path
            .components()
            .fold(std::path::PathBuf::new(), |mut p, c| {
                match c {
                    std::path::Component::ParentDir => {
                        p.pop();
                    }
                    other => p.push(other),
                }
                p
            });
        let whose = match (
            path.is_absolute(),
            normal.starts_with(&files.workspace.root),
        ) {
            (false, _) => Some("a relative path, resolved on each runner"),
            (true, true) => Some("inside the workspace"),
            (true, false) => None,
        };
        if let Some(whose) = whose {
            return Err(Error::config(
                Problem::new(format!(
                    "PULUMI_BACKEND_URL is {url}, {whose}: each CI runner would have a copy of its own, and no job would see what the others deployed"
                ))
                .hint("a fanned-out run needs a shared backend: Pulumi Cloud, a bucket (s3://, gs://, azblob://), or a file:// path every runner mounts"),
            ));
        }
    }
    // Terraform modules likewise: local state (no backend, or `backend "local"`) is a file on
    // each runner.
    if run.open.is_some() {
        let workspace = &files.workspace;
        let local: Vec<&str> = (selected.order().iter())
            .map(|&i| deployment.graph.project(i))
            .filter(|p| {
                matches!(
                    p.engine_or(workspace.settings.engine),
                    crate::engine::EngineKind::Terraform | crate::engine::EngineKind::Tofu
                )
            })
            .filter(|p| {
                let dir = workspace.project_dir(&p.path);
                let backend = crate::deployment::checks::terraform_backend(&dir);
                backend.is_none_or(|b| b == "local")
            })
            .map(|p| p.path.as_str())
            .collect();
        if !local.is_empty() {
            return Err(Error::config(
                Problem::new(format!(
                    "{} keep{} Terraform's state locally (no backend, or `backend \"local\"`): each CI runner would have a copy of its own, and no job would see what the others deployed",
                    local.join(", "),
                    if local.len() == 1 { "s" } else { "" }
                ))
                .hint("a fanned-out run needs shared state: a `backend` block (s3, gcs, azurerm, http, …) or a `cloud` block in each module"),
            ));
        }
    }
    // `ci open` again (a retried job): the run is open already, or was closed.
    if let Some(open) = &run.open
        && let Some(found) = ledger
            .existing()?
            .map(|l| l.run(&open.run_id))
            .transpose()?
            .flatten()
    {
        return match found.status {
            crate::status::RunStatus::Running => {
                crate::ui::print(&format!("Run {} is open already.\n", open.run_id))
            }
            status => Err(Error::usage(Problem::new(format!(
                "run `{}` is {status} already: it cannot be opened again",
                open.run_id
            )))),
        };
    }
    // A server is reached before anything runs: one that cannot be (down, a wrong password, a
    // bad lease) fails the run here, exit 3, not after engine calls.
    if !run.dry_run && matches!(ledger.place(), ledger::Place::Server(_)) {
        ledger.existing()?;
    }
    let Some(selected) = decide(
        settings,
        run,
        &mut ledger,
        deployment,
        selected,
        stack,
        &fingerprints,
    )?
    else {
        return Ok(());
    };

    // Check everything that can be checked of what runs, before anything is asked, written or
    // run: the configuration, the projects' files and the tools (exit 3; a dry run runs nothing,
    // and checks only the configuration), that a confirmation can be given (exit 2), what `up`
    // needs to ask for (exit 3).
    let checks = RunChecks {
        deployment,
        selected: &selected,
        stack: &stack.name,
        config: &config,
        stored: &stored,
        env: &with_secrets,
        interactive: settings.interactive,
        joined: run.join.is_some(),
    };
    let asks = run.operation == Operation::Up && !run.dry_run;
    let found = match run.dry_run {
        true => checks.configuration(run.operation),
        false => checks.preflight(run.operation),
    };
    if let Err(Error::Problems(mut problems)) = found {
        // Said at once with what `up` would need asked, so that one run shows every problem.
        if let (true, Err(Error::Problems(more))) = (asks, checks.needs()) {
            problems.extend(more);
        }
        return Err(Error::Problems(problems));
    }
    if run.confirmation == Confirmation::Refused {
        return Err(Confirmation::refusal(run.operation));
    }
    if asks {
        checks.needs()?;
    }
    runner.interrupt().checkpoint()?;
    // The stacks the ledger knows exist on this backend: those are not selected first, nor asked
    // about before a destroy or refresh.
    let backend = backend_of(&with_secrets);
    let known_stacks = ledger
        .existing()
        .ok()
        .flatten()
        .and_then(|l| l.known_stacks(&backend, stack.name.as_str()).ok())
        .unwrap_or_default();
    // The kubeconfig the kubectl engine names, decided once for the checks below and the plan.
    let kubeconfig = crate::workspace::kubeconfig::choose(
        &files.workspace,
        &stack.name,
        config.config(),
        &settings.env,
    );
    // Manifests whose cluster cannot be reached through any kubeconfig (destroyed already, or
    // never made) are not touched.
    let unreachable_manifests = |absent: &mut BTreeMap<usize, String>| {
        if kubeconfig.file.is_file() {
            return;
        }
        let shown = files
            .workspace
            .display(&kubeconfig.file)
            .display()
            .to_string();
        let not = match run.operation {
            Operation::Preview => "waits for its cluster (not previewed)",
            _ => "not touched",
        };
        for &i in selected.order() {
            let engine = (deployment.graph.project(i)).engine_or(files.workspace.settings.engine);
            if engine == crate::engine::EngineKind::Kubectl {
                absent.entry(i).or_insert_with(|| {
                    format!("the kubeconfig of its cluster, {shown}, does not exist: {not}")
                });
            }
        }
    };
    // `destroy` and `refresh` never create a stack: the projects without it are not touched, and
    // when none has it, nothing runs.
    let absent = match run.operation {
        Operation::Destroy | Operation::Refresh if !run.dry_run => {
            let mut env = with_secrets.clone();
            configure::strip_secret_variables(&mut env);
            ledger.place().keep_from_engines(&mut env);
            let color = settings.stdout_style.enabled;
            let pulumi = plan::pulumi(deployment, stack, &config, color);
            let found = stacks::find(
                &selected,
                &files.workspace,
                &pulumi,
                &env,
                run.parallel,
                runner.interrupt(),
                &known_stacks,
            );
            runner.interrupt().checkpoint()?;
            if found.all_asked && found.absent.len() == selected.len() {
                return Err(no_such_stack(stack, &found.stacks));
            }
            let reason = project::absent(stack.name.as_str());
            let mut absent: BTreeMap<usize, String> = found
                .absent
                .into_iter()
                .map(|i| (i, reason.clone()))
                .collect();
            unreachable_manifests(&mut absent);
            absent
        }
        // A preview of manifests whose cluster is not up has nothing to compare with.
        Operation::Preview if !run.dry_run => {
            let mut absent = BTreeMap::new();
            unreachable_manifests(&mut absent);
            absent
        }
        _ => BTreeMap::new(),
    };
    // A job of a fanned-out run does not run a project whose dependency (for destroy: whose
    // dependent) failed in that run on another runner: it is skipped, saying why.
    let blocked = match &run.join {
        Some(id) => match ledger.existing()?.map(|l| l.run(id)).transpose()?.flatten() {
            Some(record) => {
                // Only the projects the run was opened with.
                let outside: Vec<&str> = (selected.order().iter())
                    .map(|&i| deployment.graph.project(i).path.as_str())
                    .filter(|path| !record.projects.iter().any(|p| p.path == *path))
                    .collect();
                if !outside.is_empty() {
                    return Err(Error::usage(
                        Problem::new(format!(
                            "{} {} not in run {id}",
                            outside.join(", "),
                            match outside.len() {
                                1 => "is",
                                _ => "are",
                            }
                        ))
                        .hint("a job runs a project of the run it joins: `mara status` lists them"),
                    ));
                }
                blocked_in(deployment, &selected, run.operation, &record)
            }
            None => BTreeMap::new(),
        },
        None => BTreeMap::new(),
    };
    let started = SystemTime::now();
    let run_id = (run.join.clone())
        .or_else(|| run.open.as_ref().map(|o| o.run_id.clone()))
        .unwrap_or_else(|| clock::run_id(started));
    let planner = Planner {
        deployment,
        selected: &selected,
        stack,
        fingerprints: &fingerprints,
        run_id: &run_id,
        color: settings.stdout_style.enabled,
        remove_stacks: run.remove_stacks,
        absent: &absent,
        blocked: &blocked,
        known_stacks: &known_stacks,
        kubeconfig: &kubeconfig,
    };
    if run.dry_run {
        let plan = planner.plan(run.operation, &config, "");
        let shown = |p: &std::path::Path| files.workspace.display(p).display().to_string();
        return crate::ui::print(&plan.render(shown));
    }

    // Record the run and take the stack's lock (a preview takes none); whatever happens next,
    // the record says how it ended, and `mara cancel` reaches it.
    runner.interrupt().checkpoint()?;
    let mut recorder = match (&run.join, run.operation.mutates()) {
        (Some(id), _) => Some(
            Recorder::join(
                ledger.take_writable()?,
                id,
                stack.name.as_str(),
                run.operation,
            )
            .inspect_err(|e| {
                if matches!(e, Error::Interrupted) {
                    eprintln!("Run {id} was cancelled: this job runs nothing.");
                }
            })?,
        ),
        (None, locks) if locks || run.open.is_some() => Some(record(
            settings,
            (deployment, &mut ledger),
            (run.operation, locks, run.open.as_ref().map(|o| o.lease)),
            stack,
            &run_id,
            started,
        )?),
        (None, _) => None,
    };
    // `mara ci open`: the run is recorded and holds its stack, its projects waiting for their
    // jobs, which do the rest.
    if run.open.is_some() {
        let order: Vec<usize> = match run.operation {
            Operation::Destroy => selected.reverse_order().collect(),
            _ => selected.order().to_vec(),
        };
        let paths: Vec<String> = order
            .into_iter()
            .map(|i| deployment.graph.project(i).path.clone())
            .collect();
        if let Some(recorder) = &recorder {
            recorder.plan(&paths)?;
        }
        return crate::ui::print(&format!(
            "Opened run {run_id}: {} {} of stack {}, to be joined with `--run {run_id}` and closed by `mara ci close --run {run_id}`.\n",
            selected.len(),
            crate::error::plural(selected.len(), "project", "projects"),
            stack.name
        ));
    }
    if let Some(recorder) = &mut recorder {
        recorder.watch_cancel(runner.interrupt().clone());
    }
    let prepared = Prepared {
        config: &config,
        stored: &stored,
        with_secrets: &with_secrets,
        backend: &backend,
        started,
        ledger,
    };
    let mut ran = false;
    let result = go(
        settings,
        run,
        &planner,
        prepared,
        (runner, recorder.as_mut()),
        &mut ran,
    );
    // A run that lost its lease says so, whatever its projects did.
    let result = match runner.interrupt().draining() {
        Some(reason) if !matches!(result, Err(Error::Interrupted)) => Err(Error::LeaseLost(reason)),
        _ => result,
    };
    if let Some(recorder) = recorder {
        // The history lists what ran or changed something: a run refused, not confirmed or
        // interrupted before it stored anything or ran any project is forgotten.
        let closed = match (&result, ran) {
            (Ok(()), _) => recorder.finish(RunStatus::Succeeded),
            // Not confirmed after secrets were stored: stopped by a person, as an interruption.
            (Err(Error::Interrupted | Error::Declined(_)), true) => {
                recorder.finish(RunStatus::Cancelled)
            }
            // A job of a fanned-out run that failed before its projects ran: they are recorded
            // failed, with why, not left waiting for a job that came.
            (Err(error), false) if recorder.is_joined() && !matches!(error, Error::Interrupted) => {
                let paths: Vec<String> = (selected.order().iter())
                    .map(|&i| deployment.graph.project(i).path.clone())
                    .collect();
                let reason = match error.problems() {
                    [first, ..] => first.to_string(),
                    [] => error.to_string(),
                };
                recorder.not_run(&paths, &reason)
            }
            (Err(_), false) => recorder.forget(),
            (Err(_), true) => recorder.finish(RunStatus::Failed),
        };
        // What happened to the deployment decides the exit; a ledger that could not say so is
        // reported beside it (`status` shows such a run abandoned once mara has exited).
        if let Err(error) = closed {
            let text = format!("warning: the run's end was not recorded: {error}");
            eprintln!("{}", settings.stderr_style.yellow(&text));
        }
    }
    result
}

/// What the run goes on from once it is recorded.
struct Prepared<'a> {
    config: &'a StackConfigFile,
    stored: &'a StackConfigFile,
    /// The environment with `MARA_SECRET_*`, for mara alone.
    with_secrets: &'a BTreeMap<String, String>,
    /// The backend the ledger keys the known stacks by (`backend_of`).
    backend: &'a str,
    started: SystemTime,
    /// The run's ledger, for what a run without a record (a preview) records.
    ledger: ledger::Opener,
}

/// Prepare, plan, confirm, execute, report. `ran` says whether anything ran: a secret stored or
/// a project run (as opposed to the run stopping before, or finding no project with the stack).
fn go(
    settings: &Settings,
    run: &RunSettings,
    planner: &Planner<'_>,
    mut prepared: Prepared<'_>,
    (runner, recorder): (&Runner, Option<&mut Recorder>),
    ran: &mut bool,
) -> Result<()> {
    let files = &planner.deployment.files;
    let workspace = &files.workspace;
    let stack = planner.stack;
    // MARA_SECRET_* is for mara alone: no engine or hook process gets it.
    let mut env = prepared.with_secrets.clone();
    configure::strip_secret_variables(&mut env);
    prepared.ledger.place().keep_from_engines(&mut env);

    // Prepare the stack: the first run's answers and the secrets not stored yet, then what
    // Pulumi stores already, for the redactor.
    let pulumi = planner.pulumi(prepared.config);
    let preparing = prepare::Stack {
        deployment: planner.deployment,
        selected: planner.selected,
        stack,
        config: prepared.config,
        stored: prepared.stored,
        pulumi: &pulumi,
        interrupt: runner.interrupt(),
    };
    let (config, mut secrets) = match run.operation {
        Operation::Up => {
            let mut terminal = TerminalPrompter;
            let prompter = settings
                .interactive
                .then_some(&mut terminal as &mut dyn Prompter);
            preparing.prepare(prepared.with_secrets, prompter, ran)?
        }
        _ => (prepared.config.clone(), Default::default()),
    };
    let stored_now = Stored {
        first_run: (run.operation == Operation::Up && prepared.config.is_first_run())
            .then(|| workspace.display(config.path()).display().to_string()),
        secrets: secrets.len(),
        created: Vec::new(),
    };
    let mut read_back = prepare::stored_secrets(
        &pulumi,
        runner.interrupt(),
        &env,
        &preparing.secrets_dir(),
        prepared.stored,
        &config,
        preparing.first_dir().as_deref(),
    );
    read_back.append(&mut secrets);
    let secrets = read_back;
    let ledger_password = prepared.ledger.place().password(&settings.env);
    // A first run's tokens reach the engines as the variables their questions name.
    prepare::token_variables(&planner.deployment.provider, &secrets, &mut env);
    let context = || Context {
        env: env.clone(),
        redactor: Redactor::new(secrets.values().cloned().chain(ledger_password.clone())),
        kubeconfig: kubeconfig::Files {
            stack: workspace.kubeconfig_file(&stack.name),
            root: workspace.root.clone(),
            stack_name: stack.name.to_string(),
        },
    };
    // A job of a fanned-out run starts on a runner where no hook of its dependencies ran: their
    // kubeconfigs are written again from their stack outputs, as the hooks wrote them.
    if run.join.is_some() {
        let lines = rebuild_kubeconfigs(planner, &pulumi, &env, &context().kubeconfig)?;
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        crate::ui::print(&text)?;
    }

    runner.interrupt().checkpoint()?;

    // Plan, and confirm.
    let mut plan = planner.plan(run.operation, &config, "");
    plan.show_diff = run.diff;
    if run.confirmation == Confirmation::Ask {
        // Its details show each change's properties.
        let preview = || RunPlan {
            show_diff: true,
            ..planner.plan(Operation::Preview, &config, "-preview")
        };
        if let Decision::Declined { created } =
            confirm(settings, run, runner, stack, &plan, preview, context())?
        {
            let stored = Stored {
                created,
                ..stored_now
            };
            return Err(declined(run.operation, stack, &stored, workspace));
        }
    }
    runner.interrupt().checkpoint()?;
    if run.operation == Operation::Up && files.env_file.is_none() {
        let file = workspace.env_file();
        crate::files::write_private(&file, &format!("PULUMI_STACK={}\n", stack.name))
            .map_err(|e| Error::write(&file, e))?;
    }

    // Execute: the terminal and the ledger follow the run as it goes.
    let clock_start = Instant::now();
    let mut terminal = terminal(settings, run);
    let mut ledger = recorder.as_ref().map(|r| r.sink(&plan, &workspace.root));
    let mut sinks: Vec<&mut dyn Sink> = vec![&mut terminal];
    sinks.extend(ledger.as_mut().map(|l| l as &mut dyn Sink));
    let schedule = Schedule {
        parallel: run.parallel,
        failure: run.failure,
    };
    *ran = true;
    let reports = runner.execute(&plan, context(), schedule, &mut sinks);
    drop(ledger);
    if let Some(recorder) = &recorder {
        recorder.confirm_lock(runner.interrupt());
    }
    // Which stacks exist now, for the next run's plan; a preview (which takes no lock, and may
    // have created stacks) records it too.
    let (exist, gone) = stacks_seen(&plan, &reports);
    let backend = prepared.backend;
    let recorded = match &recorder {
        Some(recorder) => recorder.stacks_changed(backend, stack.name.as_str(), &exist, &gone),
        None if exist.is_empty() && gone.is_empty() => Ok(()),
        None => (prepared.ledger.writable())
            .and_then(|l| l.stacks_changed(backend, stack.name.as_str(), &exist, &gone)),
    };
    if let Err(error) = recorded {
        tracing::warn!("{error}: the stacks that exist are not recorded");
    }

    // Report.
    let logs = planner.logs("");
    let summary = RunSummary {
        run_id: planner.run_id.to_string(),
        operation: run.operation,
        provider: planner.deployment.provider.name.clone(),
        stack: stack.name.to_string(),
        // A run that lost its lease stopped short of what it was asked: it failed.
        status: match runner.interrupt().draining() {
            Some(_) => RunStatus::Failed,
            None => run_status(&reports, runner.interrupt().is_interrupted()),
        },
        started: clock::rfc3339(prepared.started),
        finished: clock::rfc3339(SystemTime::now()),
        duration: clock_start.elapsed(),
        logs: logs.is_dir().then(|| workspace.display(&logs).into_owned()),
        projects: reports,
        expect_no_changes: run.expect_no_changes,
    };
    summarize(settings, run, &summary)?;
    let killed: Vec<&str> = summary
        .projects
        .iter()
        .filter_map(|p| match &p.outcome {
            Outcome::Cancelled { killed: Some(how) } => Some(how.as_str()),
            _ => None,
        })
        .collect();
    if !killed.is_empty() {
        let mut text = format!(
            "warning: {} {} killed: the engine may still hold its stack's own lock (`mara unlock` says so again)",
            killed.len(),
            plural(killed.len(), "project was", "projects were")
        );
        for project in summary
            .projects
            .iter()
            .filter(|p| matches!(p.outcome, Outcome::Cancelled { killed: Some(_) }))
        {
            text.push_str(&format!(
                "\n  {}: {}",
                project.path,
                project.reason.as_deref().unwrap_or_default()
            ));
        }
        eprintln!("{}", settings.stderr_style.yellow(&text));
    }
    // No project has the stack: its name is likely wrong. (Manifests whose cluster is gone are
    // untouched for another reason, and a run of nothing else but them did what it could.)
    let no_stack = project::absent(stack.name.as_str());
    let absent =
        |p: &ProjectReport| matches!(&p.outcome, Outcome::Absent { reason } if *reason == no_stack);
    if !summary.projects.is_empty() && summary.projects.iter().all(absent) {
        *ran = false;
        return Err(no_such_stack(stack, &Default::default()));
    }
    let result = outcome(run, &summary);
    if result.is_ok() && run.operation == Operation::Up {
        record_infra_type(settings, planner, &config);
    }
    result
}

/// The backend the run's Pulumi projects use, as the ledger keys the stacks it knows: the
/// environment's `PULUMI_BACKEND_URL` (made absolute), or the CLI's login when unset.
fn backend_of(env: &BTreeMap<String, String>) -> String {
    env.get("PULUMI_BACKEND_URL")
        .filter(|url| !url.is_empty())
        .cloned()
        .unwrap_or_else(|| "(login)".to_string())
}

/// Which Pulumi projects (and Terraform modules, the stack's workspace) of the run now have the
/// stack, and which were found without it: the ledger's record of the stacks that exist.
fn stacks_seen(
    plan: &crate::run::plan::RunPlan,
    reports: &[ProjectReport],
) -> (Vec<String>, Vec<String>) {
    use crate::status::ProjectStatus;
    let (mut exist, mut gone) = (Vec::new(), Vec::new());
    use crate::engine::EngineKind;
    for (project, report) in plan.projects.iter().zip(reports) {
        match project.engine {
            EngineKind::Pulumi => {}
            // Not after a plan: not every backend makes a workspace for one.
            EngineKind::Terraform | EngineKind::Tofu if plan.operation != Operation::Preview => {}
            _ => continue,
        }
        let removed = plan.operation == Operation::Destroy
            && project
                .steps
                .iter()
                .any(|s| s.kind == crate::engine::StepKind::Cleanup);
        match (&report.outcome, report.status) {
            (Outcome::Absent { .. }, _) => gone.push(project.path.clone()),
            (_, ProjectStatus::Succeeded | ProjectStatus::Unchanged) if removed => {
                gone.push(project.path.clone())
            }
            (_, ProjectStatus::Succeeded | ProjectStatus::Unchanged) => {
                exist.push(project.path.clone())
            }
            _ => {}
        }
    }
    (exist, gone)
}

/// The first successful `up` of a stack whose configuration does not say which provider built
/// it records that (`kubernetes:infra_type`), so that later runs find the provider.
fn record_infra_type(settings: &Settings, planner: &Planner<'_>, config: &StackConfigFile) {
    let Some(infra_type) = &planner.deployment.provider.infra_type else {
        return;
    };
    let Some(values) = config.config() else {
        return;
    };
    if values.contains(crate::workspace::stack_config::INFRA_TYPE_KEY) {
        return;
    }
    let workspace = &planner.deployment.files.workspace;
    let file = workspace.display(config.path()).display().to_string();
    let style = settings.stderr_style;
    match prepare::record_infra_type(config, infra_type) {
        Ok(true) if settings.verbosity >= 0 => {
            eprintln!("kubernetes:infra_type `{infra_type}` recorded in {file}")
        }
        Ok(true) => {}
        Ok(false) => eprintln!(
            "{}",
            style.yellow(&format!("warning: {file} does not say which provider built the stack: add `kubernetes:infra_type: {infra_type}` under `config:`"))
        ),
        Err(error) => eprintln!("{}", style.yellow(&format!("warning: {error}"))),
    }
}

/// Writes the kubeconfig of every project the selected ones follow (however far back, and not
/// selected itself) whose hook writes one, from that project's stack outputs; the lines to show.
fn rebuild_kubeconfigs(
    planner: &Planner<'_>,
    pulumi: &crate::engine::pulumi::Pulumi,
    env: &BTreeMap<String, String>,
    files: &kubeconfig::Files,
) -> Result<Vec<String>> {
    let graph = &planner.deployment.graph;
    let mut seen = std::collections::BTreeSet::new();
    // A blocked project does not run: what it reads is not needed.
    let mut todo: Vec<usize> = (planner.selected.order().iter().copied())
        .filter(|i| !planner.blocked.contains_key(i))
        .collect();
    while let Some(i) = todo.pop() {
        for (d, _) in graph.predecessors(i) {
            if seen.insert(d) {
                todo.push(d);
            }
        }
    }
    let mut lines = Vec::new();
    for d in seen.into_iter().filter(|&d| !planner.selected.contains(d)) {
        let project = graph.project(d);
        for hook in &project.on_success {
            let crate::provider::Hook::Kubeconfig { output, .. } = hook else {
                continue;
            };
            let outputs = crate::commands::output::outputs_of(
                planner.deployment,
                (pulumi, planner.stack),
                d,
                env,
                true,
            )?;
            // Only the stack's file: a runner has no user's kubeconfig to merge into.
            let written = kubeconfig::write(files, env, &outputs, output, false).map_err(|e| {
                Error::config(Problem::new(e).subject(format!(
                    "the kubeconfig of {}, written again for this job",
                    project.path
                )))
            })?;
            lines.extend(
                written
                    .into_iter()
                    .map(|l| format!("[{}] {l} (from its stack outputs)", project.path)),
            );
        }
    }
    Ok(lines)
}

/// The selected projects that a joined run's record rules out: those that run after a project
/// that did not succeed in it (for destroy, before: a project is destroyed after its
/// dependents), with the reason.
fn blocked_in(
    deployment: &Deployment,
    selected: &Plan<'_>,
    operation: Operation,
    record: &crate::ledger::RunRecord,
) -> BTreeMap<usize, String> {
    let graph = &deployment.graph;
    let mut blocked = BTreeMap::new();
    for &i in selected.order() {
        let first = match operation {
            Operation::Destroy => graph.successors(i),
            _ => graph.predecessors(i),
        };
        // A dependency in this job's own selection runs here first, in order.
        for (d, _) in first.into_iter().filter(|(d, _)| !selected.contains(*d)) {
            let path = &graph.project(d).path;
            use crate::status::ProjectStatus;
            let reason = match record.projects.iter().find(|p| p.path == *path) {
                Some(p) if p.status == ProjectStatus::Waiting => {
                    format!(
                        "depends on {path}, which has not run in run {} yet",
                        record.run_id
                    )
                }
                Some(p)
                    if !matches!(
                        p.status,
                        ProjectStatus::Succeeded | ProjectStatus::Unchanged
                    ) =>
                {
                    format!("depends on {path}, which did not succeed")
                }
                _ => continue,
            };
            blocked.entry(i).or_insert(reason);
        }
    }
    blocked
}

/// A `destroy` or `refresh` of a stack no selected project has (a typo, a stack never deployed).
fn no_such_stack(stack: &ResolvedStack, existing: &std::collections::BTreeSet<String>) -> Error {
    let existing = match existing.len() {
        0 => "no stack exists yet".to_string(),
        _ => format!(
            "the stacks that exist: {}",
            existing.iter().cloned().collect::<Vec<_>>().join(", ")
        ),
    };
    Error::config(
        Problem::new(format!(
            "stack `{}` does not exist in any selected project ({existing}): nothing to do",
            stack.name
        ))
        .hint(format!(
            "the stack came from {}: check its name",
            stack.source
        )),
    )
}

/// Records the run in the ledger and takes the stack's lock (exit 5 when another run holds it).
fn record(
    settings: &Settings,
    (deployment, ledger): (&Deployment, &mut ledger::Opener),
    (operation, locks, lease): (Operation, bool, Option<std::time::Duration>),
    stack: &ResolvedStack,
    run_id: &str,
    started: SystemTime,
) -> Result<Recorder> {
    let start = RunStart {
        run_id: run_id.to_string(),
        operation,
        provider: deployment.provider.name.clone(),
        stack: stack.name.to_string(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        started: clock::rfc3339(started),
    };
    let mut opened = ledger.take_writable()?;
    if let Some(lease) = lease {
        opened.set_lease(lease);
    }
    let (recorder, took_over) = Recorder::begin(opened, &start, locks)?;
    if let Some(old) = took_over {
        let note = recorder
            .run(&old.run_id)
            .ok()
            .flatten()
            .map(|r| crate::commands::ledger::engine_locks_note(&r))
            .unwrap_or_default();
        let warning = format!(
            "warning: took over the lock of {old}, whose {}; that run is recorded abandoned\n{note}",
            match old.lease_left {
                Some(_) => "lease ran out",
                None => "process is gone",
            }
        );
        eprintln!("{}", settings.stderr_style.yellow(warning.trim_end()));
    }
    Ok(recorder)
}

/// `--resume` and `--changed`: the projects that run, saying why; `None` when none does.
fn decide<'g>(
    settings: &Settings,
    run: &RunSettings,
    ledger: &mut ledger::Opener,
    deployment: &'g Deployment,
    selected: Plan<'g>,
    stack: &ResolvedStack,
    fingerprints: &BTreeMap<usize, String>,
) -> Result<Option<Plan<'g>>> {
    if run.mode == Mode::All {
        return Ok(Some(selected));
    }
    let ledger = ledger.existing()?;
    match run.mode {
        Mode::All => Ok(Some(selected)),
        Mode::Resume => match narrow::resume(&deployment.graph, ledger, stack, run.operation)? {
            Resume::Completed => {
                crate::ui::print(&format!(
                    "Nothing to resume: the last {} on stack {} completed.\n",
                    run.operation, stack.name
                ))?;
                Ok(None)
            }
            Resume::Projects {
                run_id,
                status,
                plan,
            } => {
                eprintln!(
                    "Resuming run {run_id} ({status}): {} of its projects did not complete.",
                    plan.len()
                );
                Ok(Some(plan))
            }
        },
        Mode::Changed => {
            let changes = narrow::changes(&selected, fingerprints, ledger, stack)?;
            crate::ui::print(&report::changes(&changes, settings.stdout_style))?;
            let plan = narrow::changed(&deployment.graph, &changes)?;
            if plan.is_none() {
                crate::ui::print(&format!(
                    "Nothing changed since the last successful up on stack {}: no project runs.\n",
                    stack.name
                ))?;
            }
            Ok(plan)
        }
    }
}
