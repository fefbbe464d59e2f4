//! `mara up`, `preview`, `refresh` and `destroy` (docs/commands.md, "up, preview, refresh,
//! destroy"): load the deployment, check it, decide what runs, record it and prepare the stack,
//! plan, confirm, execute, report. Each step is a call into the layer that owns it; this file only
//! says in what order, and what a person sees between them.

use std::collections::BTreeMap;
use std::time::{Instant, SystemTime};

use crate::cli::RunCommand;
use crate::configure::{self, Answers};
use crate::deployment::checks::Checks;
use crate::deployment::{self, Deployment, StackFiles, checks};
use crate::engine::pulumi::Pulumi;
use crate::engine::{Engines, Operation, has_changes};
use crate::error::{Error, Problem, Result};
use crate::graph::Plan;
use crate::ledger::recorder::Recorder;
use crate::ledger::{self, RunStart};
use crate::run::events::{Sink, run_status};
use crate::run::kubeconfig;
use crate::run::narrow::{self, Resume};
use crate::run::plan::{self, RunPlan};
use crate::run::project::Context;
use crate::run::redact::Redactor;
use crate::run::runner::{Runner, Schedule};
use crate::run::scheduler::FailurePolicy;
use crate::run::{clock, prepare};
use crate::settings::run::{Confirmation, Mode, Reports, RunSettings};
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
    // Load: the stack, the selection, the environment, the stored secrets' file.
    let files = &deployment.files;
    let stack = files.required_stack()?;
    let config = files.config.clone().unwrap_or_else(|| {
        StackConfigFile::Missing(files.workspace.stack_config_file(&stack.name))
    });
    let selected = Plan::select(&deployment.graph, &run.selection)?;
    let with_secrets = files.environment(settings);
    let stored = files.secrets_config(stack)?;

    // Check everything that can be checked before anything is asked, written or run.
    check(
        settings,
        run,
        deployment,
        &selected,
        stack,
        &config,
        &stored,
        &with_secrets,
    )?;
    // MARA_SECRET_* is for mara alone: no engine or hook process gets it.
    let mut env = with_secrets.clone();
    configure::strip_secret_variables(&mut env);

    // Decide which of the selected projects run.
    let ledger_file = ledger::path(&files.workspace);
    let fingerprints = if run.operation == Operation::Up {
        narrow::fingerprints(&selected, files, stack)
    } else {
        BTreeMap::new()
    };
    let Some(selected) = decide(settings, run, deployment, selected, stack, &fingerprints)? else {
        return Ok(());
    };
    let started = SystemTime::now();
    let run_id = clock::run_id(started);
    let planning = Planning {
        deployment,
        selected: &selected,
        stack,
        fingerprints: &fingerprints,
        color: settings.stdout_style.enabled,
        remove_stacks: run.remove_stacks,
    };
    if run.dry_run {
        let plan = planning.plan(run.operation, &config, &run_id, "");
        let workspace = &files.workspace;
        return crate::ui::print(&plan.render(|p| workspace.display(p).display().to_string()));
    }

    // Record the run and take the stack's lock (a preview takes none).
    let mut recorder = if run.operation.mutates() {
        let start = RunStart {
            run_id: run_id.clone(),
            operation: run.operation,
            provider: deployment.provider.name.clone(),
            stack: stack.name.to_string(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            started: clock::rfc3339(started),
        };
        let (recorder, took_over) = Recorder::begin(ledger::open(&ledger_file)?, &start)?;
        if let Some(old) = took_over {
            eprintln!("{}", settings.stderr_style.yellow(&format!("warning: took over the lock of {old}, whose process is gone; that run is recorded abandoned")));
        }
        Some(recorder)
    } else {
        None
    };
    let result = (|| {
        // Prepare the stack: the first run's answers and the secrets not stored yet.
        let pulumi = planning.pulumi(&config);
        let (config, mut secrets) = if run.operation == Operation::Up {
            prepare_stack(
                settings,
                deployment,
                &selected,
                stack,
                &config,
                &stored,
                &pulumi,
                &with_secrets,
            )?
        } else {
            (config.clone(), Vec::new())
        };
        let first_dir = selected
            .order()
            .first()
            .map(|&i| files.workspace.project_dir(&selected.graph.project(i).path));
        let secrets_dir = files
            .workspace
            .project_dir(&files.workspace.settings.secrets_project);
        secrets.extend(prepare::stored_secrets(
            &pulumi,
            &env,
            &secrets_dir,
            &stored,
            &config,
            first_dir.as_deref(),
        ));
        let context = || Context {
            env: env.clone(),
            redactor: Redactor::new(secrets.iter().cloned()),
            kubeconfig: kubeconfig::Files {
                stack: files.workspace.kubeconfig_file(&stack.name),
                root: files.workspace.root.clone(),
            },
        };

        // Plan, and confirm.
        let runner = Runner::new()?;
        if let Some(recorder) = &mut recorder {
            recorder.watch_cancel(runner.interrupt().clone());
        }
        let plan = planning.plan(run.operation, &config, &run_id, "");
        if run.confirmation == Confirmation::Ask {
            let confirmed = match run.operation {
                Operation::Destroy => {
                    let projects: Vec<&str> =
                        plan.projects.iter().map(|p| p.path.as_str()).collect();
                    confirm::destroy(
                        &mut TerminalPrompter,
                        stack.name.as_str(),
                        &projects,
                        settings.stderr_style,
                    )?
                }
                _ => {
                    let preview = planning.plan(Operation::Preview, &config, &run_id, "-preview");
                    confirm_update(settings, &runner, &preview, context(), run.parallel)?
                }
            };
            if runner.interrupt().is_interrupted() {
                return Err(Error::Interrupted);
            }
            if !confirmed {
                let what = match run.operation {
                    Operation::Destroy => "destroyed",
                    _ => "changed",
                };
                return Err(Error::usage(Problem::new(format!(
                    "not confirmed: nothing was {what}"
                ))));
            }
        }
        if runner.interrupt().is_interrupted() {
            return Err(Error::Interrupted);
        }
        if run.operation == Operation::Up && files.env_file.is_none() {
            let file = files.workspace.env_file();
            crate::files::write_private(&file, &format!("PULUMI_STACK={}\n", stack.name))
                .map_err(|e| Error::write(&file, e))?;
        }

        // Execute.
        let clock_start = Instant::now();
        let mut reporter = Reporter::new(
            reporter::Options {
                live: settings.live,
                order: run.log_order,
                style: settings.stdout_style,
                quiet: settings.verbosity < 0,
                verb: run.operation.as_str(),
            },
            match (settings.live, settings.output) {
                (false, OutputFormat::Human) => Box::new(std::io::stdout()),
                _ => Box::new(std::io::stderr()),
            },
            Box::new(std::io::stderr()),
        );
        let mut ledger_sink = recorder
            .as_ref()
            .map(|r| r.sink(&plan, &files.workspace.root));
        let mut sinks: Vec<&mut dyn Sink> = vec![&mut reporter];
        if let Some(sink) = &mut ledger_sink {
            sinks.push(sink);
        }
        let schedule = Schedule {
            parallel: run.parallel,
            failure: run.failure,
        };
        let reports = runner.execute(&plan, context(), schedule, &mut sinks);
        drop(ledger_sink);

        // Report.
        let interrupted = runner.interrupt().is_interrupted();
        let logs = logs_dir(files, &run_id, "");
        let summary = RunSummary {
            run_id: run_id.clone(),
            operation: run.operation,
            provider: deployment.provider.name.clone(),
            stack: stack.name.to_string(),
            status: run_status(&reports, interrupted),
            started: clock::rfc3339(started),
            finished: clock::rfc3339(SystemTime::now()),
            duration: clock_start.elapsed(),
            logs: logs
                .is_dir()
                .then(|| files.workspace.display(&logs).into_owned()),
            projects: reports,
        };
        write_reports(settings, &summary, &run.reports)?;
        outcome(run, &summary)
    })();
    if let Some(recorder) = recorder {
        let status = match &result {
            Ok(()) | Err(Error::Drift { .. }) => RunStatus::Succeeded,
            Err(Error::Interrupted) => RunStatus::Cancelled,
            Err(_) => RunStatus::Failed,
        };
        recorder.finish(status)?;
    }
    result
}

/// The checks a run makes before anything else: the provider that built the stack, and for `up`
/// the configuration and secrets it needs (docs/commands.md, "validate": the same checks, the
/// same words).
#[allow(clippy::too_many_arguments)]
fn check(
    settings: &Settings,
    run: &RunSettings,
    deployment: &Deployment,
    selected: &Plan<'_>,
    stack: &ResolvedStack,
    config: &StackConfigFile,
    stored: &StackConfigFile,
    env: &BTreeMap<String, String>,
) -> Result<()> {
    let workspace = &deployment.files.workspace;
    let provider = &deployment.provider;
    let mut found = Checks {
        root: Some(workspace.root.clone()),
        ..Checks::default()
    };
    let interactive = settings.interactive;
    match (run.operation, run.dry_run) {
        (Operation::Up, false) => {
            checks::configuration(
                &mut found,
                workspace,
                provider,
                selected,
                config,
                env,
                interactive,
            );
            checks::secrets(
                &mut found,
                workspace,
                provider,
                selected,
                &stack.name,
                stored,
                env,
                interactive,
            );
        }
        // A dry run asks nothing: only what is already there is checked.
        (Operation::Up, true) if !config.is_first_run() => {
            checks::configuration(
                &mut found,
                workspace,
                provider,
                selected,
                config,
                env,
                interactive,
            );
        }
        _ => checks::provider_lock(&mut found, workspace, provider, config),
    }
    found.refuse()
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
    let ledger = ledger::open_existing(&ledger::path(&deployment.files.workspace))?;
    match run.mode {
        Mode::All => Ok(Some(selected)),
        Mode::Resume => {
            match narrow::resume(&deployment.graph, ledger.as_deref(), stack, run.operation)? {
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
            }
        }
        Mode::Changed => {
            let changes = narrow::changes(&selected, fingerprints, ledger.as_deref(), stack)?;
            crate::ui::print(&changes_text(&changes, settings.stdout_style))?;
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

/// One line per project: whether `--changed` runs it, and why.
pub fn changes_text(
    changes: &[(String, crate::fingerprint::Change)],
    style: crate::ui::Style,
) -> String {
    changes
        .iter()
        .map(|(path, change)| {
            let mark = if *change == crate::fingerprint::Change::Unchanged {
                style.dim("skip")
            } else {
                style.cyan("run ")
            };
            format!("{mark} {path}: {}\n", change.reason())
        })
        .collect()
}

/// What plans are made from: the run plan, and the confirmation's preview plan.
struct Planning<'a> {
    deployment: &'a Deployment,
    selected: &'a Plan<'a>,
    stack: &'a ResolvedStack,
    fingerprints: &'a BTreeMap<usize, String>,
    color: bool,
    remove_stacks: bool,
}

impl Planning<'_> {
    fn pulumi(&self, config: &StackConfigFile) -> Pulumi {
        let workspace = &self.deployment.files.workspace;
        Pulumi {
            binary: workspace.settings.pulumi.binary.clone(),
            stack: self.stack.name.to_string(),
            shared_config: config.path().to_path_buf(),
            secrets_project: workspace.settings.secrets_project.clone(),
            secrets_provider: workspace.settings.pulumi.secrets_provider.clone(),
            color: self.color,
        }
    }

    /// The plan of `operation`, its logs in `<state_dir>/logs/<run><suffix>`.
    fn plan(
        &self,
        operation: Operation,
        config: &StackConfigFile,
        run_id: &str,
        suffix: &str,
    ) -> RunPlan {
        let workspace = &self.deployment.files.workspace;
        let engines = Engines {
            default: workspace.settings.engine,
            pulumi: self.pulumi(config),
            config: config
                .config()
                .map(|c| c.values.clone())
                .unwrap_or_default(),
            remove_stacks: self.remove_stacks,
        };
        RunPlan::build(&plan::Inputs {
            operation,
            selected: self.selected,
            engines: &engines,
            workspace,
            provider: &self.deployment.provider.name,
            logs: &logs_dir(&self.deployment.files, run_id, suffix),
            fingerprints: self.fingerprints,
        })
    }
}

fn logs_dir(files: &StackFiles, run_id: &str, suffix: &str) -> std::path::PathBuf {
    files
        .workspace
        .state_dir()
        .join("logs")
        .join(format!("{run_id}{suffix}"))
}

/// Before `up`: the first run's answers (asked on a terminal, else from the environment) written
/// to the shared configuration, and the secrets stored through Pulumi. `env` still holds
/// `MARA_SECRET_*`; the processes started here never get it. Returns the configuration as it now
/// is, and the secret values handled.
#[allow(clippy::too_many_arguments)]
fn prepare_stack(
    settings: &Settings,
    deployment: &Deployment,
    selected: &Plan<'_>,
    stack: &ResolvedStack,
    config: &StackConfigFile,
    stored: &StackConfigFile,
    pulumi: &Pulumi,
    env: &BTreeMap<String, String>,
) -> Result<(StackConfigFile, Vec<String>)> {
    let files = &deployment.files;
    let provider = &deployment.provider;
    let needs = configure::needs(provider, selected, config, stored);
    let answers = if needs.is_empty() {
        Answers::default()
    } else if settings.interactive {
        let kubeconfig = files.workspace.kubeconfig_file(&stack.name);
        configure::ask(
            &needs,
            env,
            &stack.name,
            &kubeconfig.display().to_string(),
            provider,
            &mut TerminalPrompter,
        )?
    } else {
        configure::from_environment(&needs, env)
    };
    let config = if config.is_first_run() {
        prepare::write_first_run(config, &answers.first_run, provider.infra_type.as_deref())?
    } else {
        config.clone()
    };
    let mut without_secrets = env.clone();
    configure::strip_secret_variables(&mut without_secrets);
    let first_dir = selected
        .order()
        .first()
        .map(|&i| files.workspace.project_dir(&selected.graph.project(i).path));
    let secrets_dir = files
        .workspace
        .project_dir(&files.workspace.settings.secrets_project);
    let stored = prepare::store_secrets(
        pulumi,
        &without_secrets,
        first_dir.as_deref(),
        &secrets_dir,
        &answers,
    )?;
    Ok((config, stored))
}

/// `up` on a terminal: previews every project, shows the combined changes and asks.
fn confirm_update(
    settings: &Settings,
    runner: &Runner,
    preview: &RunPlan,
    context: Context,
    parallel: usize,
) -> Result<bool> {
    eprintln!(
        "Previewing {} {} on stack {}…",
        preview.len(),
        crate::error::plural(preview.len(), "project", "projects"),
        preview
            .projects
            .first()
            .map(|p| p.context.stack.as_str())
            .unwrap_or_default()
    );
    let mut reporter = Reporter::new(
        reporter::Options {
            live: false,
            order: LogOrder::Grouped,
            style: settings.stderr_style,
            quiet: true,
            verb: "preview",
        },
        Box::new(std::io::stderr()),
        Box::new(std::io::stderr()),
    );
    let mut lines = LineCollector::default();
    let schedule = Schedule {
        parallel,
        failure: FailurePolicy::SkipDependents,
    };
    let reports = runner.execute(preview, context, schedule, &mut [&mut reporter, &mut lines]);
    if runner.interrupt().is_interrupted() {
        return Err(Error::Interrupted);
    }
    confirm::update(
        &mut TerminalPrompter,
        &reports,
        &lines,
        settings.stderr_style,
    )
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

/// The summary on the terminal (the table; with `--output json`, the JSON on stdout and the table
/// on stderr), then in every report asked for.
fn write_reports(settings: &Settings, summary: &RunSummary, reports: &Reports) -> Result<()> {
    match settings.output {
        OutputFormat::Json => {
            eprint!("{}", report::table(summary, settings.stderr_style));
            crate::ui::print(&summary.to_json())?;
        }
        OutputFormat::Human => crate::ui::print(&format!(
            "\n{}",
            report::table(summary, settings.stdout_style)
        ))?,
    }
    if let Some(path) = &reports.json {
        std::fs::write(path, summary.to_json()).map_err(|e| Error::write(path, e))?;
    }
    if let Some(path) = &reports.junit {
        std::fs::write(path, report::junit(summary)).map_err(|e| Error::write(path, e))?;
    }
    if let Some(path) = &reports.github_summary {
        use std::io::Write;
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .and_then(|mut file| file.write_all(report::markdown(summary).as_bytes()))
            .map_err(|e| Error::write(path, e))?;
    }
    Ok(())
}
