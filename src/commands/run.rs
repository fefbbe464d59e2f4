//! `mara up`, `preview`, `refresh` and `destroy` (SPEC §5, §6): load the plan, check that it can
//! run, confirm, run it through the scheduler, and report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tokio::sync::mpsc;

use crate::cli::{OutputFormat, RunArgs};
use crate::configure;
use crate::engine::pulumi::Pulumi;
use crate::engine::terraform::{self, Terraform};
use crate::engine::{Operation, Step, StepKind, has_changes};
use crate::error::{Error, Location, Problem, Result, plural};
use crate::fingerprint;
use crate::graph::{ExecutionGraph, Plan, Selection};
use crate::ledger::sqlite::SqliteLedger;
use crate::ledger::{Begun, Ledger, ProjectRecord, RunStart};
use crate::provider::{EngineKind, Hook, Provider};
use crate::run::clock;
use crate::run::hooks::HookContext;
use crate::run::process::{Interrupt, InterruptLevel};
use crate::run::project::{self, ProjectJob};
use crate::run::redact::Redactor;
use crate::run::scheduler::{self, FailurePolicy, Outcome};
use crate::settings::Settings;
use crate::ui::report::{self, RunSummary};
use crate::ui::reporter::{Reporter, Target};
use crate::workspace::Workspace;
use crate::workspace::envfile;
use crate::workspace::stack::ResolvedStack;
use crate::workspace::stack_config::{INFRA_TYPE_KEY, StackConfigFile};

/// What differs between the four operations.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extra {
    pub expect_no_changes: bool,
    pub remove: bool,
}

pub fn run(settings: &Settings, operation: Operation, args: RunArgs, extra: Extra) -> Result<()> {
    let workspace = super::workspace(settings)?;
    run_in(settings, &workspace, operation, args, extra).map_err(|e| e.relative_to(&workspace.root))
}

fn run_in(
    settings: &Settings,
    workspace: &Workspace,
    operation: Operation,
    args: RunArgs,
    extra: Extra,
) -> Result<()> {
    let registry = super::registry(workspace)?;
    let (provider, _) = super::choose_provider(settings, workspace, &registry)?;
    let graph = ExecutionGraph::build(&provider)?;
    let selection = Selection::from(args.selection);
    let plan = Plan::select(&graph, &selection)?;
    let context = super::stack_context(settings, workspace)?;
    let stack = context.required_stack(workspace)?;
    if args.changed && operation != Operation::Up {
        return Err(Error::usage(Problem::new("--changed is for `mara up`")));
    }
    let ledger_file = workspace.state_dir().join("ledger.db");
    let plan = if args.resume {
        resume_plan(&graph, &ledger_file, &stack, operation)?
    } else {
        Some(plan)
    };
    let Some(plan) = plan else {
        return crate::ui::print(&format!(
            "Nothing to resume: the last {operation} on stack {} completed.\n",
            stack.name
        ));
    };
    // Each project's fingerprint, recorded by every up, compared by --changed.
    let fingerprints = if operation == Operation::Up {
        fingerprints_of(&plan, workspace, &stack)
    } else {
        BTreeMap::new()
    };
    let plan = if args.changed {
        match changed_plan(
            &graph,
            &plan,
            &fingerprints,
            &ledger_file,
            &stack,
            settings.stdout_style,
        )? {
            Some(plan) => plan,
            None => {
                return crate::ui::print(&format!(
                    "Nothing changed since the last successful up on stack {}: no project runs.\n",
                    stack.name
                ));
            }
        }
    } else {
        plan
    };
    if let Some(config) = &context.config {
        check_configuration(workspace, &provider, &plan, &stack, config, operation)?;
    }

    let mut env = envfile::merged_environment(&settings.env, context.env_file.as_ref());
    resolve_backend_url(&mut env, &workspace.root);
    let pulumi = Pulumi {
        binary: workspace.settings.pulumi.binary.clone(),
        stack: stack.name.to_string(),
        shared_config: workspace.stack_config_file(&stack.name),
        secrets_project: workspace.settings.secrets_project.clone(),
        secrets_provider: workspace.settings.pulumi.secrets_provider.clone(),
        color: settings.stdout_style.enabled,
    };
    // Without a terminal, a change without --yes is a usage error before anything else.
    let needs_confirmation =
        operation.mutates() && operation != Operation::Refresh && !args.yes && !args.dry_run;
    if needs_confirmation && !settings.interactive {
        return Err(Error::usage(
            Problem::new(format!(
                "`mara {operation}` changes infrastructure and there is no terminal to confirm on"
            ))
            .hint("pass --yes to go ahead without confirmation"),
        ));
    }
    // The run's record, and the stack's lock, before the first engine call (a preview takes none).
    let started = SystemTime::now();
    let run_id = clock::run_id(started);
    let record = if operation.mutates() && !args.dry_run {
        Some(begin_run(
            workspace,
            &provider,
            &stack,
            operation,
            &run_id,
            started,
            settings.stderr_style,
        )?)
    } else {
        None
    };
    let result = (|| -> Result<()> {
        // MARA_SECRET_* is for mara alone: no engine or hook process gets it.
        let with_secret_variables = env.clone();
        configure::strip_secret_variables(&mut env);
        let mut known_secrets = Vec::new();
        let mut written = None;
        if operation == Operation::Up && !args.dry_run {
            let config = context
                .config
                .as_ref()
                .expect("a resolved stack has its configuration read");
            (known_secrets, written) = prepare_stack(
                settings,
                workspace,
                &provider,
                &plan,
                &stack,
                config,
                &pulumi,
                &env,
                &with_secret_variables,
            )?;
        }
        if !args.dry_run {
            known_secrets.extend(read_back_secrets(workspace, &plan, &pulumi, &env));
        }
        let env = Arc::new(env);
        let execution = Execution {
            graph: &graph,
            plan: &plan,
            workspace,
            pulumi: &pulumi,
            env: env.clone(),
            hook_context: Arc::new(HookContext {
                workspace_root: workspace.root.clone(),
                stack: stack.name.to_string(),
                provider: provider.name.clone(),
                kubeconfig_file: workspace.kubeconfig_file(&stack.name),
                env: env.clone(),
            }),
            redactor: Arc::new(Redactor::new(known_secrets)),
            remove: extra.remove,
            interrupt: Interrupt::default(),
            // What a first run has just written, else what was read at the start.
            config: written
                .as_ref()
                .or(context.config.as_ref())
                .and_then(|c| c.config().map(|c| c.values.clone()))
                .unwrap_or_default(),
        };
        let order: Vec<usize> = if operation == Operation::Destroy {
            plan.reverse_order().collect()
        } else {
            plan.order().to_vec()
        };
        if args.dry_run {
            let mut text = String::new();
            for &i in &order {
                let project = graph.project(i);
                text.push_str(&format!(
                    "# {} (in {})\n",
                    project.path,
                    workspace
                        .display(&workspace.project_dir(&project.path))
                        .display()
                ));
                for step in execution.steps(i, operation) {
                    text.push_str(&format!("{}\n", step.display()));
                }
            }
            return crate::ui::print(&text);
        }

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(Error::Output)?;
        let signals = runtime.spawn(watch_signals(
            execution.interrupt.clone(),
            settings.stderr_style,
        ));
        let parallel = args
            .parallel
            .map_or(workspace.settings.parallel, usize::from);
        if operation.mutates() && operation != Operation::Refresh && !args.yes {
            confirm(
                settings, operation, &stack, &order, &execution, &runtime, parallel,
            )?;
        }
        if operation == Operation::Up && context.env_file.is_none() {
            let text = format!("PULUMI_STACK={}\n", stack.name);
            crate::run::hooks::write_private(&workspace.env_file(), &text)
                .map_err(|e| Error::read(&workspace.env_file(), e))?;
        }

        let clock_start = Instant::now();
        let logs = workspace.state_dir().join("logs").join(&run_id);
        let policy = if args.keep_going {
            FailurePolicy::SkipDependents
        } else {
            FailurePolicy::StopAll
        };
        let target = if settings.output == OutputFormat::Json {
            Target::Stderr
        } else {
            Target::Stdout
        };
        let live = crate::ui::stderr_is_terminal()
            && !settings.ci
            && settings.output == OutputFormat::Human;
        let reporter = Reporter::new(
            live,
            args.log_order,
            settings.stdout_style,
            target,
            settings.verbosity < 0,
            operation.as_str(),
        );
        let cancel_watch = record
            .as_ref()
            .map(|r| runtime.spawn(watch_cancel(r.clone(), execution.interrupt.clone())));
        let capture = Capture {
            logs: &logs,
            keep_lines: false,
            record: record.as_ref(),
            fingerprints: &fingerprints,
        };
        let (reports, _) =
            runtime.block_on(execution.execute(operation, parallel, policy, reporter, capture));
        signals.abort();
        if let Some(watch) = cancel_watch {
            watch.abort();
        }
        let interrupt = &execution.interrupt;

        let interrupted = interrupt.level() > InterruptLevel::None;
        let failed = reports
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Failed { .. }))
            .count();
        let status = if interrupted {
            "cancelled"
        } else if failed > 0 {
            "failed"
        } else {
            "succeeded"
        };
        let summary = RunSummary {
            run_id: run_id.clone(),
            operation,
            provider: provider.name.clone(),
            stack: stack.name.to_string(),
            status,
            started: clock::rfc3339(started),
            finished: clock::rfc3339(SystemTime::now()),
            duration: clock_start.elapsed(),
            logs: logs.is_dir().then(|| workspace.display(&logs).into_owned()),
            projects: reports,
        };
        write_reports(settings, &summary, &args.report, &args.junit)?;

        if interrupted {
            return Err(Error::Interrupted);
        }
        if failed > 0 {
            return Err(Error::ProjectsFailed { failed });
        }
        if operation == Operation::Preview && extra.expect_no_changes {
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
    })();
    if let Some(record) = record {
        let status = match &result {
            Ok(()) => "succeeded",
            Err(Error::Interrupted) => "cancelled",
            Err(_) => "failed",
        };
        let finished = clock::rfc3339(SystemTime::now());
        record
            .ledger
            .lock()
            .expect("the ledger is never poisoned")
            .finish(&record.run_id, status, &finished)?;
    }
    result
}

/// A run being recorded in the ledger.
#[derive(Clone)]
pub struct Record {
    ledger: Arc<std::sync::Mutex<dyn Ledger + Send>>,
    run_id: String,
}

/// Opens the ledger, records the run and takes the stack's lock: exit 5 when another live run
/// holds it; a lock whose process is gone is taken over with a warning.
fn begin_run(
    workspace: &Workspace,
    provider: &Provider,
    stack: &ResolvedStack,
    operation: Operation,
    run_id: &str,
    started: SystemTime,
    style: crate::ui::Style,
) -> Result<Record> {
    let mut ledger = SqliteLedger::open(&workspace.state_dir().join("ledger.db"))?;
    let start = RunStart {
        run_id: run_id.to_string(),
        operation: operation.to_string(),
        provider: provider.name.clone(),
        stack: stack.name.to_string(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        started: clock::rfc3339(started),
    };
    match ledger.begin(&start, true)? {
        Begun::Held(holder) => Err(Error::Locked(Box::new(
            Problem::new(format!("stack `{}` is locked by another run: {holder}", stack.name))
                .hint("wait for it, stop it with `mara cancel`, or clear a lock whose run is gone with `mara unlock --force`"),
        ))),
        Begun::Started { took_over } => {
            if let Some(old) = took_over {
                eprintln!("{}", style.yellow(&format!("warning: took over the lock of {old}, whose process is gone; that run is recorded abandoned")));
            }
            Ok(Record { ledger: Arc::new(std::sync::Mutex::new(ledger)), run_id: run_id.to_string() })
        }
    }
}

/// `mara cancel` from anywhere sets a flag in the ledger; the run stops as on Ctrl-C.
async fn watch_cancel(record: Record, interrupt: Interrupt) {
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        let requested = record
            .ledger
            .lock()
            .map(|l| l.cancel_requested(&record.run_id).unwrap_or(false))
            .unwrap_or(false);
        if requested {
            interrupt.escalate();
            return;
        }
    }
}

/// What one execution keeps besides its reports: logs where, each project's lines or not, and
/// the ledger record it writes to.
struct Capture<'a> {
    logs: &'a Path,
    keep_lines: bool,
    record: Option<&'a Record>,
    /// Each project's fingerprint (graph index), recorded with it.
    fingerprints: &'a BTreeMap<usize, String>,
}

/// What running the plan needs, shared by the confirmation's previews and the run itself.
struct Execution<'a> {
    graph: &'a ExecutionGraph,
    plan: &'a Plan<'a>,
    workspace: &'a Workspace,
    pulumi: &'a Pulumi,
    env: Arc<BTreeMap<String, String>>,
    hook_context: Arc<HookContext>,
    redactor: Arc<Redactor>,
    remove: bool,
    interrupt: Interrupt,
    /// The shared configuration's values (Terraform modules get theirs as `TF_VAR_*`).
    config: serde_json::Map<String, serde_json::Value>,
}

impl Execution<'_> {
    /// The engine steps of project `i` for `operation`.
    fn steps(&self, i: usize, operation: Operation) -> Vec<Step> {
        let project = self.graph.project(i);
        let mut steps = self.engine_steps(project, operation);
        // A destroy hook that reads the outputs needs them before they are gone.
        if operation == Operation::Destroy
            && project
                .on_destroy
                .iter()
                .any(|h| matches!(h, Hook::Command { .. }))
            && let Some(outputs) = self
                .engine_steps(project, Operation::Up)
                .into_iter()
                .find(|s| s.kind == StepKind::Outputs)
            && let Some(at) = steps.iter().position(|s| s.kind == StepKind::Operation)
        {
            steps.insert(at, outputs);
        }
        steps
    }

    fn engine_steps(&self, project: &crate::provider::Project, operation: Operation) -> Vec<Step> {
        let dir = self.workspace.project_dir(&project.path);
        match project.engine_or(self.workspace.settings.engine) {
            EngineKind::Pulumi => {
                let remove = self.remove && operation == Operation::Destroy;
                self.pulumi.steps(&project.path, &dir, operation, remove)
            }
            engine @ (EngineKind::Terraform | EngineKind::Tofu) => {
                let terraform = Terraform {
                    binary: engine.as_str().to_string(),
                    stack: self.pulumi.stack.clone(),
                    color: self.pulumi.color,
                };
                // A module's namespace in the shared configuration is its directory's name.
                terraform.steps(
                    &dir,
                    operation,
                    &terraform::variables(&self.config, project.leaf()),
                )
            }
            EngineKind::Command => self.command_steps(project, operation),
        }
    }

    /// An `engine = "command"` project's step for `operation` (none when it has no command for
    /// it): `sh -c <command>` in its directory (the workspace root when it has none), its outputs
    /// written as JSON to `$MARA_OUTPUTS`.
    fn command_steps(&self, project: &crate::provider::Project, operation: Operation) -> Vec<Step> {
        let command = match operation {
            Operation::Up => &project.steps.up,
            Operation::Preview => &project.steps.preview,
            Operation::Refresh => &project.steps.refresh,
            Operation::Destroy => &project.steps.destroy,
        };
        let Some(command) = command else {
            return Vec::new();
        };
        let dir = self.workspace.project_dir(&project.path);
        let cwd = if dir.is_dir() {
            dir
        } else {
            self.workspace.root.clone()
        };
        let context = &self.hook_context;
        let outputs = self
            .workspace
            .command_outputs_file(&context.stack, &project.path);
        let mut step = Step::new(
            StepKind::Operation,
            "sh",
            vec!["-c".into(), command.clone()],
            cwd,
        );
        step.env = BTreeMap::from([
            ("MARA_OUTPUTS".to_string(), outputs.display().to_string()),
            ("MARA_STACK".to_string(), context.stack.clone()),
            ("MARA_PROJECT".to_string(), project.path.clone()),
            ("MARA_PROVIDER".to_string(), context.provider.clone()),
            ("MARA_OPERATION".to_string(), operation.to_string()),
            (
                "MARA_KUBECONFIG".to_string(),
                context.kubeconfig_file.display().to_string(),
            ),
        ]);
        vec![step]
    }

    /// Runs `operation` over the plan; with `keep_lines`, also returns each project's shown lines.
    async fn execute(
        &self,
        operation: Operation,
        parallel: usize,
        policy: FailurePolicy,
        mut reporter: Reporter,
        capture: Capture<'_>,
    ) -> (Vec<scheduler::ProjectReport>, BTreeMap<usize, Vec<String>>) {
        let (events, mut received) = mpsc::unbounded_channel();
        let Capture {
            logs,
            keep_lines,
            record,
            fingerprints,
        } = capture;
        // The ledger's writes (a SQLite commit each) run on a thread of their own, off the
        // runtime that starts and reads the engines.
        let (to_ledger, writer) = record
            .cloned()
            .map(|record| {
                let fingerprints = fingerprints.clone();
                let root = self.workspace.root.clone();
                let (to_ledger, events) = std::sync::mpsc::channel::<scheduler::Event>();
                let writer = std::thread::spawn(move || {
                    for event in events {
                        write_record(&record, &event, &root, &fingerprints);
                    }
                });
                (to_ledger, writer)
            })
            .unzip();
        let reporting = tokio::spawn(async move {
            let mut lines: BTreeMap<usize, Vec<String>> = BTreeMap::new();
            while let Some(event) = received.recv().await {
                if let Some(to_ledger) = &to_ledger
                    && matches!(
                        event,
                        scheduler::Event::Started { .. } | scheduler::Event::Finished { .. }
                    )
                {
                    let _ = to_ledger.send(event.clone());
                }
                if keep_lines && let scheduler::Event::Line { index, text, .. } = &event {
                    lines.entry(*index).or_default().push(text.clone());
                }
                reporter.handle(event);
            }
            reporter.finish();
            lines
        });
        let reports = scheduler::run(
            self.plan,
            operation,
            parallel,
            policy,
            &self.interrupt,
            &events,
            |i| {
                let project = self.graph.project(i);
                let hooks = match operation {
                    Operation::Up => project.on_success.clone(),
                    Operation::Destroy => project.on_destroy.clone(),
                    _ => Vec::new(),
                };
                let job = ProjectJob {
                    index: i,
                    path: project.path.clone(),
                    operation,
                    engine: project.engine_or(self.workspace.settings.engine),
                    steps: self.steps(i, operation),
                    dir: self.workspace.project_dir(&project.path),
                    hooks,
                    env: self.env.clone(),
                    log: logs.join(format!("{}.log", project.path)),
                    redactor: self.redactor.clone(),
                    interrupt: self.interrupt.clone(),
                    events: events.clone(),
                    hook_context: self.hook_context.clone(),
                };
                Box::pin(project::run(job))
            },
        )
        .await;
        drop(events);
        let lines = reporting.await.unwrap_or_default();
        // The reporting task, and with it the ledger's sender, has ended: the writer finishes.
        if let Some(writer) = writer {
            let _ = writer.join();
        }
        (reports, lines)
    }
}

/// Before `up`: the first run's answers written to the shared configuration (with
/// `kubernetes:infra_type`), the secret answers and the missing secrets stored encrypted through
/// Pulumi (the value on standard input). Returns every secret value it handled, and on a first
/// run the configuration it wrote.
#[allow(clippy::too_many_arguments)]
fn prepare_stack(
    settings: &Settings,
    workspace: &Workspace,
    provider: &Provider,
    plan: &Plan<'_>,
    stack: &ResolvedStack,
    config: &StackConfigFile,
    pulumi: &Pulumi,
    env: &BTreeMap<String, String>,
    with_secret_variables: &BTreeMap<String, String>,
) -> Result<(Vec<String>, Option<StackConfigFile>)> {
    let needs = configure::needs(workspace, provider, plan, &stack.name, config)?;
    let kubeconfig = workspace.kubeconfig_file(&stack.name).display().to_string();
    let config_file = workspace.display(config.path()).display().to_string();
    let (first_run, secrets) = if needs.is_empty() {
        Default::default()
    } else if settings.interactive {
        configure::ask(
            &needs,
            with_secret_variables,
            &stack.name,
            &kubeconfig,
            provider,
        )?
    } else {
        configure::without_terminal(
            &needs,
            with_secret_variables,
            &stack.name,
            &kubeconfig,
            &config_file,
        )?
    };
    let written = if config.is_first_run() {
        let text = configure::first_run_document(&first_run.values, provider.infra_type.as_deref());
        crate::run::hooks::write_atomic(config.path(), &text, 0o644)
            .map_err(|e| Error::read(config.path(), e))?;
        let written = StackConfigFile::load(config.path())?;
        check_configuration(workspace, provider, plan, stack, &written, Operation::Up)?;
        Some(written)
    } else {
        None
    };
    let mut values = Vec::new();
    let store = |dir: &Path, key: &str, value: &configure::Secret, shared: bool| -> Result<()> {
        for (step, stdin) in [
            (pulumi.select_step(dir), None),
            (
                pulumi.set_secret_step(dir, key, shared),
                Some(value.expose()),
            ),
        ] {
            let finished =
                crate::run::process::run_blocking(&step, env, stdin).map_err(Error::Output)?;
            if finished.code != Some(0) {
                let redactor = Redactor::new([value.expose().to_string()]);
                let reason =
                    crate::run::process::last_error(&finished.stderr).unwrap_or("pulumi failed");
                return Err(Error::config(
                    Problem::new(format!(
                        "storing `{key}` failed: {}",
                        redactor.redact(reason)
                    ))
                    .subject(workspace.display(dir).display().to_string()),
                ));
            }
        }
        Ok(())
    };
    if let Some(first) = plan.order().first() {
        let dir = workspace.project_dir(&plan.graph.project(*first).path);
        for (key, value) in &first_run.secrets {
            store(&dir, key, value, true)?;
            values.push(value.expose().to_string());
        }
    }
    let secrets_dir = workspace.project_dir(&workspace.settings.secrets_project);
    for (key, value) in &secrets {
        store(&secrets_dir, key, value, false)?;
        values.push(value.expose().to_string());
    }
    Ok((values, written))
}

/// The secret values Pulumi already stores for this stack — in the secrets project and in the
/// shared configuration — so that they can be kept out of every line mara shows or logs.
fn read_back_secrets(
    workspace: &Workspace,
    plan: &Plan<'_>,
    pulumi: &Pulumi,
    env: &BTreeMap<String, String>,
) -> Vec<String> {
    let holds_secrets =
        |file: &Path| std::fs::read_to_string(file).is_ok_and(|t| t.contains("secure:"));
    let mut reads = Vec::new();
    let secrets_dir = workspace.project_dir(&workspace.settings.secrets_project);
    if holds_secrets(&secrets_dir.join(format!("Pulumi.{}.yaml", pulumi.stack))) {
        reads.push(pulumi.read_config_step(&secrets_dir, false));
    }
    if holds_secrets(&pulumi.shared_config)
        && let Some(first) = plan.order().first()
    {
        reads.push(pulumi.read_config_step(
            &workspace.project_dir(&plan.graph.project(*first).path),
            true,
        ));
    }
    reads
        .iter()
        .filter_map(|step| crate::run::process::run_blocking(step, env, None).ok())
        .filter(|finished| finished.code == Some(0))
        .flat_map(|finished| crate::engine::pulumi::secret_values(&finished.stdout))
        .collect()
}

/// What the ledger keeps of an event. A ledger that cannot be written loses the record, not the run.
fn write_record(
    record: &Record,
    event: &scheduler::Event,
    root: &Path,
    fingerprints: &BTreeMap<usize, String>,
) {
    let Ok(mut ledger) = record.ledger.lock() else {
        return;
    };
    let result = match event {
        scheduler::Event::Started { index, path } => ledger.project_started(
            &record.run_id,
            path,
            &clock::rfc3339(SystemTime::now()),
            fingerprints.get(index).map(String::as_str),
        ),
        scheduler::Event::Finished { report, .. } => ledger.project_finished(
            &record.run_id,
            &ProjectRecord {
                path: report.path.clone(),
                status: report.status.to_string(),
                started: report.started.clone(),
                finished: report.finished.clone(),
                exit_code: report.exit_code,
                changes: report.changes.clone(),
                reason: report.reason.clone(),
                log: report
                    .log
                    .as_ref()
                    .map(|l| l.strip_prefix(root).unwrap_or(l).display().to_string()),
                fingerprint: None,
            },
        ),
        scheduler::Event::Line { .. } => Ok(()),
    };
    if let Err(error) = result {
        tracing::warn!("the run ledger: {error}");
    }
}

/// `--resume`: the projects of the last run of `operation` on the stack that did not complete;
/// `None` when it completed.
fn resume_plan<'g>(
    graph: &'g ExecutionGraph,
    ledger_file: &Path,
    stack: &ResolvedStack,
    operation: Operation,
) -> Result<Option<Plan<'g>>> {
    let last = SqliteLedger::open_existing(ledger_file)?
        .map(|ledger| ledger.last_run(stack.name.as_str(), operation.as_str()))
        .transpose()?
        .flatten()
        .ok_or_else(|| {
            Error::usage(Problem::new(format!(
                "no earlier {operation} on stack {} to resume",
                stack.name
            )))
        })?;
    let left: Vec<String> = last
        .projects
        .iter()
        .filter(|p| !matches!(p.status.as_str(), "succeeded" | "unchanged"))
        .map(|p| p.path.clone())
        .filter(|path| graph.find(path).is_ok())
        .collect();
    if left.is_empty() {
        return Ok(None);
    }
    eprintln!(
        "Resuming run {} ({}): {} of its projects did not complete.",
        last.run_id,
        last.status,
        left.len()
    );
    Plan::select(
        graph,
        &Selection {
            only: left,
            ..Selection::default()
        },
    )
    .map(Some)
}

/// `--changed`: says for every project whether it runs and why; the plan of those that do, or
/// `None` when nothing changed.
fn changed_plan<'g>(
    graph: &'g ExecutionGraph,
    plan: &Plan<'g>,
    fingerprints: &BTreeMap<usize, String>,
    ledger_file: &Path,
    stack: &ResolvedStack,
    style: crate::ui::Style,
) -> Result<Option<Plan<'g>>> {
    let (text, runs) = what_changed(plan, fingerprints, ledger_file, stack, style)?;
    crate::ui::print(&text)?;
    if runs.is_empty() {
        return Ok(None);
    }
    Plan::select(
        graph,
        &Selection {
            only: runs,
            ..Selection::default()
        },
    )
    .map(Some)
}

/// For every project of the plan, whether it would run under `--changed` and why (one line each),
/// and the paths of those that would.
pub fn what_changed(
    plan: &Plan<'_>,
    fingerprints: &BTreeMap<usize, String>,
    ledger_file: &Path,
    stack: &ResolvedStack,
    style: crate::ui::Style,
) -> Result<(String, Vec<String>)> {
    let before = match SqliteLedger::open_existing(ledger_file)? {
        Some(ledger) => ledger.last_fingerprints(stack.name.as_str())?,
        None => BTreeMap::new(),
    };
    let mut runs = Vec::new();
    let mut text = String::new();
    for &i in plan.order() {
        let path = &plan.graph.project(i).path;
        let change = fingerprint::compare(&fingerprints[&i], before.get(path).map(String::as_str));
        let mark = if change == fingerprint::Change::Unchanged {
            style.dim("skip")
        } else {
            style.cyan("run ")
        };
        text.push_str(&format!("{mark} {path}: {}\n", change.reason()));
        if change != fingerprint::Change::Unchanged {
            runs.push(path.clone());
        }
    }
    Ok((text, runs))
}

/// Every project's fingerprint, from the workspace's files.
pub fn fingerprints_of(
    plan: &Plan<'_>,
    workspace: &Workspace,
    stack: &ResolvedStack,
) -> BTreeMap<usize, String> {
    let read = |path: &Path| std::fs::read(path).unwrap_or_default();
    fingerprint::fingerprints(
        plan,
        |p| workspace.project_dir(p),
        &workspace.state_dir(),
        stack.name.as_str(),
        &read(&workspace.stack_config_file(&stack.name)),
        &read(&workspace.env_file()),
    )
}

/// Refuses, before anything runs, a stack built with another provider, a first run that needs
/// answers, and required keys that are not set.
fn check_configuration(
    workspace: &Workspace,
    provider: &Provider,
    plan: &Plan<'_>,
    stack: &ResolvedStack,
    config: &StackConfigFile,
    operation: Operation,
) -> Result<()> {
    let file = workspace.display(config.path()).into_owned();
    let Some(values) = config.config() else {
        return Ok(());
    };
    let mut problems = Vec::new();
    if let (Some(expected), Some(recorded)) =
        (&provider.infra_type, values.get_text(INFRA_TYPE_KEY))
        && &recorded != expected
    {
        let mut at = values.location_of(INFRA_TYPE_KEY);
        at.file = workspace.display(&at.file).into_owned();
        problems.push(
            Problem::new(format!(
                "the stack `{}` was built with kubernetes:infra_type `{recorded}`, but provider {} is `{expected}`",
                stack.name, provider.name
            ))
            .at(at)
            .hint("a stack keeps its provider: destroy it with the provider that built it, or use a new stack name"),
        );
    }
    if operation == Operation::Up {
        let mut missing: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for &i in plan.order() {
            let project = plan.graph.project(i);
            for key in &project.required_config {
                if key != INFRA_TYPE_KEY && !values.contains(key) {
                    missing
                        .entry(key.as_str())
                        .or_default()
                        .push(project.path.as_str());
                }
            }
        }
        for (key, projects) in missing {
            problems.push(
                Problem::new(format!("required by {} but not set", projects.join(", ")))
                    .at(Location::file(&file))
                    .subject(format!("`{key}`")),
            );
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Error::Problems(problems))
    }
}

/// A relative `file://` backend URL names a directory under the workspace root: every engine
/// process runs in its own project directory, so a relative path would mean a different backend
/// to each.
pub fn resolve_backend_url(env: &mut BTreeMap<String, String>, root: &Path) {
    let Some(url) = env.get("PULUMI_BACKEND_URL") else {
        return;
    };
    let Some(path) = url.strip_prefix("file://") else {
        return;
    };
    if path.is_empty() || path.starts_with('/') || path.starts_with('~') {
        return;
    }
    let absolute = root.join(path.trim_start_matches("./"));
    env.insert(
        "PULUMI_BACKEND_URL".into(),
        format!("file://{}", absolute.display()),
    );
}

/// Without `--yes`: on a terminal, ask; without one, refuse with exit 2 naming the flag.
///
/// `up` first previews every selected project and shows the combined changes (yes / no /
/// details); `destroy` lists what it will destroy and asks for the stack name to be typed.
fn confirm(
    settings: &Settings,
    operation: Operation,
    stack: &ResolvedStack,
    order: &[usize],
    execution: &Execution<'_>,
    runtime: &tokio::runtime::Runtime,
    parallel: usize,
) -> Result<()> {
    if !settings.interactive {
        return Err(Error::usage(
            Problem::new(format!(
                "`mara {operation}` changes infrastructure and there is no terminal to confirm on"
            ))
            .hint("pass --yes to go ahead without confirmation"),
        ));
    }
    let graph = execution.graph;
    let projects: Vec<&str> = order
        .iter()
        .map(|&i| graph.project(i).path.as_str())
        .collect();
    let theme = dialoguer::theme::SimpleTheme;
    let style = settings.stderr_style;
    let asked = |e: dialoguer::Error| Error::Output(std::io::Error::other(e));
    if operation == Operation::Destroy {
        eprintln!(
            "{}",
            style.bold(&format!(
                "This destroys every resource of {} {} on stack {}, in this order:",
                projects.len(),
                plural(projects.len(), "project", "projects"),
                stack.name
            ))
        );
        for path in &projects {
            eprintln!("  - {path}");
        }
        let typed: String = dialoguer::Input::with_theme(&theme)
            .with_prompt(format!("Type the stack name ({}) to confirm", stack.name))
            .allow_empty(true)
            .interact_text()
            .map_err(asked)?;
        return if typed.trim() == stack.name.as_str() {
            Ok(())
        } else {
            Err(Error::usage(Problem::new(
                "not confirmed: nothing was destroyed",
            )))
        };
    }

    eprintln!(
        "Previewing {} {} on stack {}…",
        projects.len(),
        plural(projects.len(), "project", "projects"),
        stack.name
    );
    let logs = execution
        .workspace
        .state_dir()
        .join("logs")
        .join(format!("{}-preview", clock::run_id(SystemTime::now())));
    let reporter = Reporter::new(
        false,
        crate::ui::reporter::LogOrder::Grouped,
        style,
        Target::Stderr,
        true,
        "preview",
    );
    let capture = Capture {
        logs: &logs,
        keep_lines: true,
        record: None,
        fingerprints: &BTreeMap::new(),
    };
    let (reports, lines) = runtime.block_on(execution.execute(
        Operation::Preview,
        parallel,
        FailurePolicy::SkipDependents,
        reporter,
        capture,
    ));
    if execution.interrupt.is_interrupted() {
        return Err(Error::Interrupted);
    }
    let width = projects.iter().map(|p| p.len()).max().unwrap_or(0);
    eprintln!(
        "\n{}",
        style.bold(&format!("{:<width$}  CHANGES", "PROJECT"))
    );
    for report in &reports {
        let changes = match (&report.changes, &report.outcome) {
            (Some(changes), _) => crate::engine::changes_summary(changes),
            (None, Outcome::Failed { .. }) => style.yellow("cannot be previewed yet (see details): it may need its dependencies deployed first"),
            (None, _) => style.dim("not previewed: a dependency could not be"),
        };
        eprintln!("{:<width$}  {changes}", report.path);
    }
    eprintln!();
    loop {
        let choice = dialoguer::Select::with_theme(&theme)
            .with_prompt("Do you want to perform this update?")
            .items(["yes", "no", "details"])
            .default(1)
            .interact()
            .map_err(asked)?;
        match choice {
            0 => return Ok(()),
            1 => {
                return Err(Error::usage(Problem::new(
                    "not confirmed: nothing was changed",
                )));
            }
            _ => {
                for &i in order {
                    eprintln!("{}", style.cyan(&format!("── {}", graph.project(i).path)));
                    for line in lines.get(&i).into_iter().flatten() {
                        eprintln!("   {line}");
                    }
                }
            }
        }
    }
}

/// The first Ctrl-C (or SIGTERM) asks every engine to cancel; the second kills them.
async fn watch_signals(interrupt: Interrupt, style: crate::ui::Style) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut terminate) = signal(SignalKind::terminate()) else {
        return;
    };
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
        let message = match interrupt.escalate() {
            InterruptLevel::Graceful => {
                "interrupted: the running projects are cancelling (Ctrl-C again to kill them)"
            }
            _ => "killing the running engine processes",
        };
        eprintln!("{}", style.yellow(message));
    }
}

fn write_reports(
    settings: &Settings,
    summary: &RunSummary,
    report: &Option<PathBuf>,
    junit: &Option<PathBuf>,
) -> Result<()> {
    let style = settings.stdout_style;
    match settings.output {
        OutputFormat::Json => {
            eprint!("{}", report::table(summary, settings.stderr_style));
            crate::ui::print(&summary.to_json())?;
        }
        OutputFormat::Human => crate::ui::print(&format!("\n{}", report::table(summary, style)))?,
    }
    if let Some(path) = report {
        std::fs::write(path, summary.to_json()).map_err(|e| Error::read(path, e))?;
    }
    if let Some(path) = junit {
        std::fs::write(path, report::junit(summary)).map_err(|e| Error::read(path, e))?;
    }
    if let Some(path) = settings
        .env
        .get("GITHUB_STEP_SUMMARY")
        .filter(|p| !p.is_empty())
    {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .map_err(|e| Error::read(Path::new(path), e))?;
        file.write_all(report::markdown(summary).as_bytes())
            .map_err(|e| Error::read(Path::new(path), e))?;
    }
    Ok(())
}
