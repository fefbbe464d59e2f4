//! `mara up`, `preview`, `refresh` and `destroy` (docs/commands.md, "up, preview, refresh,
//! destroy"): load the deployment, check it, decide what runs, record it and prepare the stack,
//! plan, confirm, execute, report. Each step is a call into the layer that owns it; this file says
//! in what order, and what a person sees between them.

use std::collections::BTreeMap;
use std::time::{Instant, SystemTime};

use crate::cli::RunCommand;
use crate::clock;
use crate::configure;
use crate::configure::Prompter;
use crate::deployment::checks::RunChecks;
use crate::deployment::{self, Deployment, StackFiles};
use crate::engine::{Operation, has_changes};
use crate::error::{Error, Problem, Result, plural};
use crate::graph::Plan;
use crate::ledger::{self, RunStart};
use crate::run::events::{Outcome, ProjectReport, Sink, run_status};
use crate::run::narrow::{self, Resume};
use crate::run::plan::{self, Planner, RunPlan};
use crate::run::project::{self, Context};
use crate::run::recorder::Recorder;
use crate::run::redact::Redactor;
use crate::run::runner::{Runner, Schedule};
use crate::run::scheduler::FailurePolicy;
use crate::run::{kubeconfig, prepare, stacks};
use crate::settings::run::{Confirmation, Mode, RunSettings};
use crate::settings::{OutputFormat, Settings};
use crate::status::{ProjectStatus, RunStatus};
use crate::ui::confirm::{self, LineCollector};
use crate::ui::prompt::TerminalPrompter;
use crate::ui::report::{self, RunSummary};
use crate::ui::reporter::{self, LogOrder, Reporter};
use crate::workspace::stack::ResolvedStack;
use crate::workspace::stack_config::StackConfigFile;

pub fn run(settings: &Settings, command: RunCommand) -> Result<()> {
    let workspace = deployment::discover(settings)?;
    let root = workspace.root.clone();
    let run = RunSettings::resolve(command, settings, &workspace.settings)?;
    let deployment = StackFiles::load_in(settings, workspace)?.into_deployment(settings)?;
    execute(settings, &run, &deployment).map_err(|e| e.relative_to(&root))
}

fn execute(settings: &Settings, run: &RunSettings, deployment: &Deployment) -> Result<()> {
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
    let fingerprints = match run.operation {
        Operation::Up => narrow::fingerprints(&selected, files, stack),
        _ => BTreeMap::new(),
    };
    let Some(selected) = decide(settings, run, deployment, selected, stack, &fingerprints)? else {
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
    // `destroy` and `refresh` never create a stack: the projects without it are not touched, and
    // when none has it, nothing runs.
    let absent = match run.operation {
        Operation::Destroy | Operation::Refresh if !run.dry_run => {
            let mut env = with_secrets.clone();
            configure::strip_secret_variables(&mut env);
            let color = settings.stdout_style.enabled;
            let pulumi = plan::pulumi(deployment, stack, &config, color);
            let found = stacks::find(&selected, &files.workspace, &pulumi, &env, run.parallel);
            if found.all_asked && found.absent.len() == selected.len() {
                return Err(no_such_stack(stack, &found.stacks));
            }
            let reason = project::absent(stack.name.as_str());
            found
                .absent
                .into_iter()
                .map(|i| (i, reason.clone()))
                .collect()
        }
        _ => BTreeMap::new(),
    };
    let started = SystemTime::now();
    let run_id = clock::run_id(started);
    let planner = Planner {
        deployment,
        selected: &selected,
        stack,
        fingerprints: &fingerprints,
        run_id: &run_id,
        color: settings.stdout_style.enabled,
        remove_stacks: run.remove_stacks,
        absent: &absent,
    };
    if run.dry_run {
        let plan = planner.plan(run.operation, &config, "");
        let shown = |p: &std::path::Path| files.workspace.display(p).display().to_string();
        return crate::ui::print(&plan.render(shown));
    }

    // Record the run and take the stack's lock (a preview takes none); whatever happens next,
    // the record says how it ended.
    let mut recorder = match run.operation.mutates() {
        true => Some(record(
            settings,
            deployment,
            run.operation,
            stack,
            &run_id,
            started,
        )?),
        false => None,
    };
    let prepared = Prepared {
        config: &config,
        stored: &stored,
        with_secrets: &with_secrets,
        started,
    };
    let mut ran = false;
    let result = go(
        settings,
        run,
        &planner,
        prepared,
        recorder.as_mut(),
        &mut ran,
    );
    if let Some(recorder) = recorder {
        // The history lists what ran: a run refused, not confirmed or interrupted before any of
        // its projects ran is forgotten.
        match (&result, ran) {
            (Ok(()), _) => recorder.finish(RunStatus::Succeeded)?,
            (Err(Error::Interrupted), true) => recorder.finish(RunStatus::Cancelled)?,
            (Err(_), false) => recorder.forget()?,
            (Err(_), true) => recorder.finish(RunStatus::Failed)?,
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
    started: SystemTime,
}

/// Prepare, plan, confirm, execute, report. `ran` says whether any project ran (as opposed to
/// the run stopping before its projects, or finding none with the stack).
fn go(
    settings: &Settings,
    run: &RunSettings,
    planner: &Planner<'_>,
    prepared: Prepared<'_>,
    recorder: Option<&mut Recorder>,
    ran: &mut bool,
) -> Result<()> {
    let files = &planner.deployment.files;
    let workspace = &files.workspace;
    let stack = planner.stack;
    // MARA_SECRET_* is for mara alone: no engine or hook process gets it.
    let mut env = prepared.with_secrets.clone();
    configure::strip_secret_variables(&mut env);

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
    };
    let (config, mut secrets) = match run.operation {
        Operation::Up => {
            let mut terminal = TerminalPrompter;
            let prompter = settings
                .interactive
                .then_some(&mut terminal as &mut dyn Prompter);
            preparing.prepare(prepared.with_secrets, prompter)?
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
        &env,
        &preparing.secrets_dir(),
        prepared.stored,
        &config,
        preparing.first_dir().as_deref(),
    );
    read_back.append(&mut secrets);
    let secrets = read_back;
    // A first run's tokens reach the engines as the variables their questions name.
    prepare::token_variables(&planner.deployment.provider, &secrets, &mut env);
    let context = || Context {
        env: env.clone(),
        redactor: Redactor::new(secrets.values().cloned()),
        kubeconfig: kubeconfig::Files {
            stack: workspace.kubeconfig_file(&stack.name),
            root: workspace.root.clone(),
            stack_name: stack.name.to_string(),
        },
    };

    // Plan, and confirm.
    let runner = Runner::new()?;
    let mut recorder = recorder;
    if let Some(recorder) = &mut recorder {
        recorder.watch_cancel(runner.interrupt().clone());
    }
    let plan = planner.plan(run.operation, &config, "");
    if run.confirmation == Confirmation::Ask {
        let preview = || planner.plan(Operation::Preview, &config, "-preview");
        if let Decision::Declined { created } =
            confirm(settings, run, &runner, stack, &plan, preview, context())?
        {
            let stored = Stored {
                created,
                ..stored_now
            };
            return Err(declined(run.operation, stack, &stored, workspace));
        }
    }
    if runner.interrupt().is_interrupted() {
        return Err(Error::Interrupted);
    }
    if run.operation == Operation::Up && files.env_file.is_none() {
        let file = workspace.env_file();
        crate::files::write_private(&file, &format!("PULUMI_STACK={}\n", stack.name))
            .map_err(|e| Error::write(&file, e))?;
    }

    // Execute: the terminal and the ledger follow the run as it goes.
    let clock_start = Instant::now();
    let mut terminal = terminal(settings, run);
    let mut ledger = recorder.map(|r| r.sink(&plan, &workspace.root));
    let mut sinks: Vec<&mut dyn Sink> = vec![&mut terminal];
    sinks.extend(ledger.as_mut().map(|l| l as &mut dyn Sink));
    let schedule = Schedule {
        parallel: run.parallel,
        failure: run.failure,
    };
    *ran = true;
    let reports = runner.execute(&plan, context(), schedule, &mut sinks);
    drop(ledger);

    // Report.
    let logs = planner.logs("");
    let summary = RunSummary {
        run_id: planner.run_id.to_string(),
        operation: run.operation,
        provider: planner.deployment.provider.name.clone(),
        stack: stack.name.to_string(),
        status: run_status(&reports, runner.interrupt().is_interrupted()),
        started: clock::rfc3339(prepared.started),
        finished: clock::rfc3339(SystemTime::now()),
        duration: clock_start.elapsed(),
        logs: logs.is_dir().then(|| workspace.display(&logs).into_owned()),
        projects: reports,
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
    let absent = |p: &ProjectReport| matches!(p.outcome, Outcome::Absent { .. });
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
        Ok(true) => eprintln!("kubernetes:infra_type `{infra_type}` recorded in {file}"),
        Ok(false) => eprintln!(
            "{}",
            style.yellow(&format!("warning: {file} does not say which provider built the stack: add `kubernetes:infra_type: {infra_type}` under `config:`"))
        ),
        Err(error) => eprintln!("{}", style.yellow(&format!("warning: {error}"))),
    }
}

/// What the person at the terminal (or the CI log) sees while the run goes on.
fn terminal(settings: &Settings, run: &RunSettings) -> Reporter {
    let options = reporter::Options {
        live: settings.live,
        order: run.log_order,
        style: settings.stdout_style,
        quiet: settings.verbosity < 0,
        verb: run.operation.as_str(),
    };
    // The projects' lines go where the summary goes: stdout, unless it carries JSON or the live
    // view draws on stderr.
    let out: reporter::Output = match (settings.live, settings.output) {
        (false, OutputFormat::Human) => Box::new(std::io::stdout()),
        _ => Box::new(std::io::stderr()),
    };
    Reporter::new(options, out, Box::new(std::io::stderr()))
}

/// The summary: the table (with `--output json`, the JSON on stdout and the table on stderr),
/// then every report asked for.
fn summarize(settings: &Settings, run: &RunSettings, summary: &RunSummary) -> Result<()> {
    match settings.output {
        OutputFormat::Json => {
            eprint!("{}", report::table(summary, settings.stderr_style));
            crate::ui::print(&summary.to_json())?;
        }
        // `-q`: only what went wrong — the failed projects' lines came as they failed; then the
        // verdict, unless all went well.
        OutputFormat::Human if settings.verbosity < 0 => {
            if summary.status != RunStatus::Succeeded {
                let verdict = report::verdict(summary, settings.stdout_style);
                crate::ui::print(&format!("{verdict}\n"))?
            }
        }
        OutputFormat::Human => {
            let table = report::table(summary, settings.stdout_style);
            crate::ui::print(&format!("\n{table}"))?
        }
    }
    let reports = &run.reports;
    report::write_files(
        summary,
        reports.json.as_deref(),
        reports.junit.as_deref(),
        reports.github_summary.as_deref(),
    )
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
    deployment: &Deployment,
    operation: Operation,
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
    let file = ledger::path(&deployment.files.workspace);
    let (recorder, took_over) = Recorder::begin(ledger::open(&file)?, &start)?;
    if let Some(old) = took_over {
        let warning = format!(
            "warning: took over the lock of {old}, whose process is gone; that run is recorded abandoned"
        );
        eprintln!("{}", settings.stderr_style.yellow(&warning));
    }
    Ok(recorder)
}

/// `--resume` and `--changed`: the projects that run, saying why; `None` when none does.
fn decide<'g>(
    settings: &Settings,
    run: &RunSettings,
    deployment: &'g Deployment,
    selected: Plan<'g>,
    stack: &ResolvedStack,
    fingerprints: &BTreeMap<usize, String>,
) -> Result<Option<Plan<'g>>> {
    if run.mode == Mode::All {
        return Ok(Some(selected));
    }
    let ledger = ledger::open_existing(&ledger::path(&deployment.files.workspace))?;
    let ledger = ledger.as_deref();
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

/// What the person at the terminal answered.
enum Decision {
    Go,
    /// Not confirmed; the projects whose stack the preview created.
    Declined {
        created: Vec<String>,
    },
}

/// On a terminal: `up` previews every project, shows the combined changes and asks; `destroy`
/// asks for the stack's name.
fn confirm(
    settings: &Settings,
    run: &RunSettings,
    runner: &Runner,
    stack: &ResolvedStack,
    plan: &RunPlan,
    preview: impl FnOnce() -> RunPlan,
    context: Context,
) -> Result<Decision> {
    let style = settings.stderr_style;
    let stack = stack.name.as_str();
    let mut prompter = TerminalPrompter;
    let (confirmed, created) = match run.operation {
        Operation::Destroy => {
            let projects: Vec<&str> = plan.projects.iter().map(|p| p.path.as_str()).collect();
            let confirmed = confirm::destroy(&mut prompter, stack, &projects, style)?;
            (confirmed, Vec::new())
        }
        _ => {
            let preview = preview();
            let n = preview.len();
            eprintln!(
                "Previewing {n} {} on stack {stack}…",
                plural(n, "project", "projects")
            );
            let options = reporter::Options {
                live: false,
                order: LogOrder::Grouped,
                style,
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
            let reports = runner.execute(&preview, context, schedule, sinks);
            if runner.interrupt().is_interrupted() {
                return Err(Error::Interrupted);
            }
            let confirmed = confirm::update(&mut prompter, &reports, &lines, style)?;
            let created = reports
                .iter()
                .filter(|r| r.created_stack)
                .map(|r| r.path.clone())
                .collect();
            (confirmed, created)
        }
    };
    Ok(match confirmed {
        true => Decision::Go,
        false => Decision::Declined { created },
    })
}

/// What an `up` had stored before its confirmation was declined.
struct Stored {
    /// The shared configuration a first run wrote.
    first_run: Option<String>,
    /// How many secrets it stored.
    secrets: usize,
    /// The projects whose stack the preview created.
    created: Vec<String>,
}

/// "Not confirmed", and exactly what was already stored (exit 6).
fn declined(
    operation: Operation,
    stack: &ResolvedStack,
    stored: &Stored,
    workspace: &crate::workspace::Workspace,
) -> Error {
    let what = match operation {
        Operation::Destroy => "destroyed",
        _ => "deployed",
    };
    let mut kept = Vec::new();
    if let Some(file) = &stored.first_run {
        kept.push(format!("the first run's answers in {file}"));
    }
    if stored.secrets > 0 {
        let secrets_project = &workspace.settings.secrets_project;
        kept.push(format!(
            "{} {} in {secrets_project}",
            stored.secrets,
            plural(stored.secrets, "secret", "secrets")
        ));
    }
    if !stored.created.is_empty() {
        kept.push(format!(
            "the empty stack `{}` the preview created in {}",
            stack.name,
            stored.created.join(", ")
        ));
    }
    let problem = Problem::new(format!("not confirmed: nothing was {what}"));
    Error::Declined(Box::new(match kept.is_empty() {
        true => problem,
        false => problem.hint(format!(
            "already stored, and kept for the next run: {}",
            kept.join("; ")
        )),
    }))
}

/// What the run's outcome means as an exit: interrupted (130), a project failed (1), the preview
/// found changes it was told to expect none of (4).
fn outcome(run: &RunSettings, summary: &RunSummary) -> Result<()> {
    let failed = summary.count(ProjectStatus::Failed);
    if summary.status == RunStatus::Cancelled {
        return Err(Error::Interrupted);
    }
    if failed > 0 {
        return Err(Error::ProjectsFailed { failed });
    }
    if run.operation == Operation::Preview && run.expect_no_changes {
        let changed = summary
            .projects
            .iter()
            .filter(|p| p.changes.as_ref().is_some_and(has_changes))
            .count();
        if changed > 0 {
            return Err(Error::Drift { changed });
        }
    }
    Ok(())
}
