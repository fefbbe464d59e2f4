//! One project of a run: its planned steps in order, its log file, its hooks.
//!
//! Every line shown or logged passes through the redactor. The stack outputs (read with
//! `--show-secrets` for the hooks) are never shown or logged.

use crate::run::plan::Blocked;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::mpsc;

mod approve;

use super::events::{Event, Finished, Outcome, PlannedWith, Preview};
use super::hooks::{self, Work};
use super::interrupt::{Interrupt, InterruptLevel, Stop};
use super::kubeconfig;
use super::plan::PlannedProject;
use super::process::{self, Stream};
use super::redact::{Continued, Redactor};
use super::scheduler::Release;
use crate::engine::{
    EngineKind, LockClearing, Operation, Reader, Step, StepKind, command, has_changes, is_locked,
};

/// What the command gives every project of a run.
#[derive(Debug, Clone)]
pub struct Context {
    /// The environment of every process (without `MARA_SECRET_*`).
    pub env: BTreeMap<String, String>,
    pub redactor: Redactor,
    /// Where the kubeconfig hook writes.
    pub kubeconfig: kubeconfig::Files,
    /// The command that clears the lock a killed engine may leave, as this invocation would
    /// type it (`Settings::again`: its `-C` and `-s`), for the reasons that name it.
    pub unlock: String,
    /// The outputs the projects' inputs take, as the run knows them.
    pub inputs: Arc<super::inputs::Values>,
}

/// What every project task of a run shares: the command's context and the run's interruption.
pub struct Shared {
    pub context: Context,
    pub interrupt: Interrupt,
    /// The run's clock, which stamps its events (`clock::Clock`).
    pub clock: Arc<dyn crate::clock::Clock>,
    /// What starts its engines, with the run's environment made once.
    pub spawner: super::spawn::Spawner,
}

/// One project's task: owned, so that it can run on its own.
pub struct Job {
    /// Its position in the plan.
    pub index: usize,
    pub operation: Operation,
    pub project: PlannedProject,
    pub shared: Arc<Shared>,
    pub events: mpsc::UnboundedSender<Event>,
    /// Set when its engine says it created the project's stack (shared with the runner, which
    /// reports it even for a project prepared ahead that then did not run).
    created_stack: Arc<std::sync::atomic::AtomicBool>,
    /// The run's redactor, and the project's secret outputs once they are known (for what its
    /// hooks print).
    redactor: Redactor,
    /// The lines of a project preparing ahead of its turn: shown when its turn comes.
    held: Mutex<Option<Vec<(Stream, String)>>>,
    /// What its stdout's and its stderr's lines so far say of a secret broken across them.
    continued: Mutex<[Continued; 2]>,
    /// Lets its dependents start before it ends, when all that is left after its operation is
    /// cleaning up.
    release: Option<Release>,
    /// While it prepares ahead of its turn: says when the run no longer needs that.
    stop: Option<Stop>,
    /// A preview's: each change's properties are shown under it.
    pub show_diff: bool,
    /// How many times its operation ran so far (`[retry]`).
    attempts: std::sync::atomic::AtomicU32,
}

impl Job {
    pub fn new(
        index: usize,
        operation: Operation,
        project: PlannedProject,
        shared: Arc<Shared>,
        events: mpsc::UnboundedSender<Event>,
        created_stack: Arc<std::sync::atomic::AtomicBool>,
    ) -> Job {
        let redactor = shared.context.redactor.clone();
        Job {
            index,
            operation,
            project,
            shared,
            events,
            created_stack,
            redactor,
            held: Mutex::new(None),
            continued: Default::default(),
            release: None,
            stop: None,
            show_diff: false,
            attempts: Default::default(),
        }
    }

    fn emit(&self, log: &mut Option<std::fs::File>, stream: Stream, text: &str) {
        let text = {
            let mut continued = self.continued.lock().unwrap_or_else(|e| e.into_inner());
            let continued = &mut continued[(stream == Stream::Stderr) as usize];
            self.redactor.redact_next(continued, text)
        };
        if let Some(file) = log {
            // One write per line: `writeln!` on a file makes one per piece.
            let _ = file.write_all(format!("{text}\n").as_bytes());
        }
        if let Some(held) = self.held.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            held.push((stream, text));
            return;
        }
        self.send(stream, text);
    }

    fn send(&self, stream: Stream, text: String) {
        let _ = self.events.send(Event::Line {
            index: self.index,
            path: self.project.path.clone(),
            stream,
            text,
        });
    }

    fn failed(&self, code: Option<i32>, reason: String, log: &Option<std::fs::File>) -> Finished {
        let interrupt = &self.shared.interrupt;
        let outcome = if interrupt.is_interrupted() {
            let killed = (interrupt.level() == InterruptLevel::Kill).then(|| {
                let engine = self.project.engine;
                let unlock = &self.shared.context.unlock;
                match engine.lock_clearing(&self.project.dir, unlock).how() {
                    Some(clear) => format!(
                        "{} by a second interruption: its engine may still hold the stack's own lock; {clear}",
                        crate::ledger::KILLED
                    ),
                    None => format!("{} by a second interruption", crate::ledger::KILLED),
                }
            });
            Outcome::Cancelled { killed }
        } else {
            Outcome::Failed { code, reason }
        };
        Finished {
            exit_code: code,
            ..self.ended(outcome, log)
        }
    }

    /// The project ended as `outcome` before its operation changed anything: its log, if it
    /// has one, and whether it made its stack.
    fn ended(&self, outcome: Outcome, log: &Option<std::fs::File>) -> Finished {
        Finished {
            log: log.as_ref().map(|_| self.project.log.clone()),
            created_stack: self.created(),
            attempts: self.attempts(),
            ..Finished::without_running(outcome)
        }
    }

    /// The project stopped before a step that changes its stack, the run draining (`reason`):
    /// its operation did not run.
    fn stopped_before(&self, reason: &str, log: &Option<std::fs::File>) -> Finished {
        let reason = format!("stopped before its {}: {reason}", self.operation);
        self.ended(Outcome::Skipped { reason }, log)
    }

    /// The project without its stack: not touched.
    fn absent(&self, code: Option<i32>, log: &Option<std::fs::File>) -> Finished {
        let stack = &self.project.context.stack;
        let reason = match self.operation {
            Operation::Drift => not_checked(stack),
            _ => absent(stack),
        };
        Finished {
            exit_code: code,
            created_stack: false,
            ..self.ended(Outcome::Absent { reason }, log)
        }
    }

    fn attempts(&self) -> u32 {
        self.attempts.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn created(&self) -> bool {
        self.created_stack
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A fault for the tests (debug builds only): the task of the project named by
/// `MARA_TEST_PANIC_IN` panics on the first line its processes print — while one runs — as a bug
/// in mara would (docs/testing.md).
fn fault_injected(job: &Job) -> bool {
    cfg!(debug_assertions)
        && job.shared.context.env.get("MARA_TEST_PANIC_IN") == Some(&job.project.path)
}

/// A project and how far its steps went: the log they write, the next step, and what the
/// steps so far found.
pub struct Prepared {
    job: Job,
    log: Option<std::fs::File>,
    /// The log was opened (or could not be).
    opened: bool,
    next: usize,
    /// How its preparation ended it (failed, or found its stack missing): said in its turn.
    ended: Option<Finished>,
    changes: Option<crate::engine::Changes>,
    outputs: Outputs,
    exit_code: Option<i32>,
    /// What its preview says its outputs will do.
    preview: Preview,
    /// What its plan made again counted, in an `up` of approved plans.
    replanned_changes: Option<crate::engine::Changes>,
}

impl Prepared {
    /// A project none of whose steps ran yet.
    pub fn new(job: Job) -> Prepared {
        Prepared {
            job,
            log: None,
            opened: false,
            next: 0,
            ended: None,
            changes: None,
            outputs: Outputs::default(),
            exit_code: None,
            preview: Preview::default(),
            replanned_changes: None,
        }
    }

    fn open_log(&mut self) {
        if self.opened {
            return;
        }
        self.opened = true;
        self.log = open_log(&self.job.project.log);
        if let Some(file) = &mut self.log {
            let header = format!(
                "# mara {} {} at {}\n",
                self.job.operation,
                self.job.project.path,
                crate::clock::rfc3339(self.job.shared.clock.now())
            );
            let _ = file.write_all(header.as_bytes());
        }
    }

    /// Its inputs' values (docs/formats.md, "Inputs") given to the steps it has left, the secret
    /// ones to its redactor; an input without a value ends it before its operation (a preview
    /// waits on it): then it is returned, ended.
    fn take_inputs(&mut self) -> Option<Finished> {
        let job = &mut self.job;
        if job.project.inputs.is_empty() {
            return None;
        }
        let previewing = job.operation == Operation::Preview;
        let resolved = match job
            .shared
            .context
            .inputs
            .resolve(&job.project.inputs, previewing)
        {
            Ok(resolved) => resolved,
            // A certain failure (an output its upstream's plan removes) fails the preview.
            Err(unknown) if previewing && !unknown.certain => {
                let waits = Outcome::Waits {
                    on: unknown.on,
                    reason: unknown.reason,
                };
                let mut finished = job.ended(waits, &self.log);
                if unknown.deferred {
                    finished.preview.planned_with = Some(PlannedWith::Deferred);
                }
                return Some(finished);
            }
            Err(unknown) => return Some(job.failed(None, unknown.reason, &self.log)),
        };
        if !resolved.secrets.is_empty() {
            job.redactor = job.redactor.with(resolved.secrets);
        }
        self.preview.inputs_taken = resolved.taken;
        if let Some(approval) = &mut job.project.approval {
            for step in [&mut approval.steps.replan].into_iter().flatten() {
                step.env.extend(resolved.env.clone());
            }
        }
        if previewing {
            self.preview.planned_with = Some(match resolved.projected.is_empty() {
                true => PlannedWith::Current,
                false => PlannedWith::Projected,
            });
            self.preview.projected = resolved.projected;
        }
        for step in &mut job.project.steps[self.next..] {
            step.env.extend(resolved.env.clone());
            for repair in &mut step.repairs {
                repair.step.env.extend(resolved.env.clone());
            }
        }
        None
    }

    /// After its `up`, its outputs given to the run's inputs (secret ones too, in memory only),
    /// and those its dependents take returned as the ledger records them (secret ones by name
    /// only). An output that
    /// holds a secret the run knows is secret, whatever its engine says.
    fn outputs_taken(&self) -> Option<Box<crate::ledger::Outputs>> {
        let project = &self.job.project;
        if self.job.operation != Operation::Up || project.outputs_taken.is_empty() {
            return None;
        }
        // An up that left no outputs (a command that wrote none) leaves none to take.
        let none = serde_json::Map::new();
        let all = self
            .outputs
            .values
            .as_ref()
            .and_then(Value::as_object)
            .unwrap_or(&none);
        let taken: serde_json::Map<String, Value> = (all.iter())
            .filter(|(name, _)| project.outputs_taken.contains(name))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        // Once recorded secret, an output stays so (docs/formats.md, "Inputs"): code that
        // made it nonsensitive did not make its value public.
        let inputs = &self.job.shared.context.inputs;
        let before = inputs.secret_of(&project.path);
        let secret: BTreeSet<String> = (taken.iter())
            .filter(|(name, value)| {
                let text = super::inputs::as_text(value);
                self.outputs.secret.contains(*name)
                    || before.contains(*name)
                    || self.job.redactor.redact(&text) != text
            })
            .map(|(name, _)| name.clone())
            .collect();
        let recorded = crate::ledger::Outputs::recorded(&taken, &secret);
        inputs.applied(&project.path, all.clone(), secret);
        Some(Box::new(recorded))
    }

    /// Runs its steps from the next one on (only its leading preparation when `preparing`).
    /// `Err` ends the project.
    async fn advance(&mut self, preparing: bool) -> Result<(), Finished> {
        while let Some(step) = self.job.project.steps.get(self.next).cloned() {
            if preparing && step.kind != StepKind::Prepare {
                break;
            }
            self.next += 1;
            match self.goes_on_to(&step) {
                Turn::Runs => {}
                Turn::Skipped => continue,
                Turn::Ends(finished) => return Err(finished),
            }
            let (job, log) = (&self.job, &mut self.log);
            let (finished, mut reader) = match step.kind {
                StepKind::Operation => run_operation(job, log, &step).await?,
                _ => run_repaired(job, log, &step, job.operation).await?,
            };
            if step.kind == StepKind::Operation {
                self.operation_ran(&step, &finished, &mut reader);
            }
            if step.kind == StepKind::SecretMarks {
                match self.marks_read(&step, &finished) {
                    Some(ended) => return Err(ended),
                    None => continue,
                }
            }
            if !step.succeeded(finished.code) {
                return Err(self.step_failed(&step, &finished, &reader));
            }
            if let Some(ended) = self.step_succeeded(&step, finished) {
                return Err(ended);
            }
            self.release_when_only_cleaning_up(&step);
        }
        Ok(())
    }

    /// Whether `step` runs: not once the run is interrupted, stopped or draining (then the
    /// project ends), nor an outputs step whose outputs its apply said already (no process).
    fn goes_on_to(&mut self, step: &Step) -> Turn {
        let (job, log) = (&self.job, &self.log);
        let interrupt = &job.shared.interrupt;
        if interrupt.is_interrupted() {
            return Turn::Ends(job.failed(None, "interrupted".into(), log));
        }
        // Read for its dependents alone, the outputs its apply said already.
        if step.kind == StepKind::Outputs
            && let Some(values) = taken_from_apply(job, self.outputs.applied.as_ref())
        {
            self.outputs.values = Some(Value::Object(values));
            return Turn::Skipped;
        }
        if job.stop.as_ref().is_some_and(Stop::is_stopped) {
            return Turn::Ends(job.failed(None, "not needed: the run stopped".into(), log));
        }
        // A run that may no longer own its stack starts nothing more of it: a project started
        // before the drain does not go on to its operation (`run::drain`). What follows an
        // operation that ran (its outputs, its hooks, removing its stack) is done, so that the
        // project is reported as it is.
        let changes_the_stack = matches!(step.kind, StepKind::Prepare | StepKind::Operation);
        if changes_the_stack && let Some(reason) = interrupt.draining() {
            return Turn::Ends(job.stopped_before(&reason, log));
        }
        Turn::Runs
    }

    /// Its operation ran: what it changed, what outputs its apply said, its exit code.
    fn operation_ran(&mut self, step: &Step, finished: &process::Finished, reader: &mut Reader) {
        let job = &self.job;
        self.changes = read_operation(job, step, finished, reader, &mut self.preview);
        self.outputs.applied = reader.applied_outputs();
        self.exit_code = finished.code;
    }

    /// Which of its outputs are secret, read (whatever that step's exit: it only informs);
    /// how the project ends if the run was interrupted meanwhile.
    fn marks_read(&mut self, step: &Step, finished: &process::Finished) -> Option<Finished> {
        if self.job.shared.interrupt.is_interrupted() {
            return Some(
                self.job
                    .failed(self.exit_code, "interrupted".into(), &self.log),
            );
        }
        let engine = self.job.project.engine;
        self.outputs
            .marks(engine, &mut self.job.redactor, step, finished);
        None
    }

    /// How the project ends when `step` failed: interrupted, without its stack (a destroy, a
    /// refresh or a drift check that finds it gone), or failed with its reason.
    fn step_failed(&self, step: &Step, finished: &process::Finished, reader: &Reader) -> Finished {
        let (job, log) = (&self.job, &self.log);
        if job.shared.interrupt.level() > InterruptLevel::None {
            return job.failed(finished.code, "interrupted".into(), log);
        }
        let stack = &job.project.context.stack;
        let engine = job.project.engine;
        if matches!(
            job.operation,
            Operation::Destroy | Operation::Refresh | Operation::Drift
        ) && engine.is_missing_stack(stack, finished.code, &finished.stderr)
        {
            return job.absent(finished.code, log);
        }
        let reason = failure_reason(job, step, finished, reader);
        let mut failed = job.failed(finished.code.or(self.exit_code), reason, log);
        failed.preview.violations = violations(job, reader);
        failed
    }

    /// What `step` said once it succeeded, read by its kind: the stamp of an `init`, a list of
    /// the stacks (without this one, the project is not touched), planned outputs, the state a
    /// plan is made against, the outputs, what a command left. How the project ends, when what
    /// it said ends it.
    fn step_succeeded(&mut self, step: &Step, finished: process::Finished) -> Option<Finished> {
        let job = &mut self.job;
        let engine = job.project.engine;
        if let Some(stamp) = &step.stamp {
            crate::fingerprint::record_init(stamp);
        }
        if let Some(name) = &step.listed
            && !engine.lists(&finished.stdout, name)
        {
            return Some(job.absent(finished.code, &self.log));
        }
        match step.kind {
            StepKind::PlannedOutputs => {
                let planned = engine.planned_outputs(&finished.stdout);
                (job.shared.context.inputs).planned(&job.project.path, planned);
                if job.project.keeps_document {
                    self.preview.document = Some(finished.stdout.as_str().into());
                }
            }
            StepKind::StateVersion => {
                self.preview.state = engine.state_version(&finished.stdout);
            }
            StepKind::Outputs => {
                let recorded = job.shared.context.inputs.secret_of(&job.project.path);
                (self.outputs).printed(engine, &mut job.redactor, finished.stdout, &recorded);
            }
            StepKind::Operation => {
                if let Err(reason) = self.outputs.left_by(job, step) {
                    return Some(job.failed(finished.code, reason, &self.log));
                }
            }
            StepKind::Prepare | StepKind::SecretMarks | StepKind::Cleanup => {}
        }
        None
    }

    /// Only cleaning up is left after its operation (`stack rm` after a destroy), and no hook:
    /// what depends on it need not wait for that.
    fn release_when_only_cleaning_up(&mut self, step: &Step) {
        let job = &mut self.job;
        let rest = &job.project.steps[self.next..];
        if step.kind == StepKind::Operation
            && job.project.hooks.is_empty()
            && !rest.is_empty()
            && rest.iter().all(|s| s.kind == StepKind::Cleanup)
            && let Some(release) = job.release.take()
        {
            release.send();
        }
    }
}

/// Its hooks, in order, with its outputs; the first that fails says why.
async fn run_hooks(
    job: &Job,
    log: &mut Option<std::fs::File>,
    outputs: &Value,
) -> Result<(), String> {
    for hook in &job.project.hooks {
        let work = hooks::run(
            hook,
            job.operation,
            outputs,
            &job.project.dir,
            &job.project.context,
            &job.shared.context.kubeconfig,
            &job.shared.context.env,
        );
        match work? {
            Work::Done(lines) => {
                for line in lines {
                    job.emit(log, Stream::Stdout, &line);
                }
            }
            Work::Process { step, what } => run_hook_process(job, log, &step)
                .await
                .map_err(|e| format!("{what} failed: {e}"))?,
        }
    }
    Ok(())
}

/// Whether a step runs as its turn comes.
enum Turn {
    Runs,
    /// Not needed (what it reads is known already).
    Skipped,
    /// The project ends, before it.
    Ends(Finished),
}

/// Runs the operation step; after a failure its retry policy names (`[retry]`, docs/formats.md
/// "Budgets and retries") — in the failure's reason or the engine's error diagnostics, not in
/// the rest of its output — runs it again, after its backoff, doubled each time; a held lock is
/// never a transient failure. Each attempt is counted, and a failed one said; an interruption
/// ends the wait at once.
async fn run_operation(
    job: &Job,
    log: &mut Option<std::fs::File>,
    step: &Step,
) -> Result<(process::Finished, Reader), Finished> {
    let interrupt = job.shared.interrupt.clone();
    let mut attempt = 1;
    loop {
        (job.attempts).store(attempt, std::sync::atomic::Ordering::Relaxed);
        let (finished, reader) = run_repaired(job, log, step, job.operation).await?;
        let Some(retry) = job.project.retry.clone() else {
            return Ok((finished, reader));
        };
        // Not again: what succeeded, what was asked to stop, a run that may no longer own its
        // stack, an approved plan (a partial apply left it stale), a stack that is not there.
        let stack = &job.project.context.stack;
        if step.succeeded(finished.code)
            || attempt >= retry.attempts
            || interrupt.level() > InterruptLevel::None
            || interrupt.draining().is_some()
            || job.project.approval.is_some()
            || (job.project.engine).is_missing_stack(stack, finished.code, &finished.stderr)
        {
            return Ok((finished, reader));
        }
        let reason = failure_reason(job, step, &finished, &reader);
        // What the failure said: its reason and the engine's error diagnostics (a command's
        // last lines), never everything the step printed — another resource's throttling in
        // the log is not why this one failed.
        let mut said = reader.errors();
        said.push(&reason);
        let locked = is_locked(&finished.stderr)
            || is_locked(&finished.stdout)
            || said.iter().any(|text| is_locked(text));
        let matched = (said.iter()).find(|text| retry.errors.iter().any(|p| p.0.is_match(text)));
        let Some(matched) = matched.filter(|_| !locked) else {
            return Ok((finished, reader));
        };
        // What a pattern found, when it is not the reason itself: why it runs again.
        let reason = match **matched == reason {
            true => reason.clone(),
            false => format!(
                "{reason}; retried for: {}",
                matched.lines().next().unwrap_or("")
            ),
        };
        // Doubled each time, an hour at most.
        let wait = (retry.backoff.saturating_mul(1 << (attempt - 1).min(16)))
            .min(std::time::Duration::from_secs(3600));
        let line = format!(
            "attempt {attempt} of {} failed ({reason}): trying again in {}",
            retry.attempts,
            crate::clock::human(wait)
        );
        job.emit(log, Stream::Stderr, &line);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = interrupt.requested() => {
                return Err(job.failed(finished.code, "interrupted".into(), log));
            }
        }
        // The run's lease may have run out meanwhile: its last failure stands.
        if interrupt.draining().is_some() {
            return Ok((finished, reader));
        }
        attempt += 1;
    }
}

/// What `run_step` says of a step it did not start, the run having begun to drain.
const NOT_STARTED: &str = "not started: the run is draining";

impl Job {
    /// A step that could not run (`error`): failed, or not started because the run drains.
    fn step_error(&self, error: String, log: &Option<std::fs::File>) -> Finished {
        match (error == NOT_STARTED, self.shared.interrupt.draining()) {
            (true, Some(reason)) => self.stopped_before(&reason, log),
            _ => self.failed(None, error, log),
        }
    }
}

/// Runs a step, and what its failure says is missing (the stack the ledger knew, a module's
/// `init`): provided, then the step again; each repair at most once. Its end and its reader.
async fn run_repaired(
    job: &Job,
    log: &mut Option<std::fs::File>,
    step: &Step,
    operation: Operation,
) -> Result<(process::Finished, Reader), Finished> {
    let (engine, interrupt) = (job.project.engine, &job.shared.interrupt);
    let mut reader = Reader::new(engine, operation).with_diff(job.show_diff);
    let mut finished = run_step(job, log, step, &mut reader)
        .await
        .map_err(|error| job.step_error(error, log))?;
    let mut repairs: Vec<&crate::engine::Repair> = step.repairs.iter().collect();
    while !step.succeeded(finished.code) && !interrupt.is_interrupted() {
        let stack = &job.project.context.stack;
        let Some(at) = repairs.iter().position(|repair| {
            let (code, stderr) = (finished.code, &finished.stderr);
            repair
                .when
                .said(engine, stack, code, stderr, reader.error())
        }) else {
            break;
        };
        let repair = &repairs.remove(at).step;
        let mut quiet = Reader::new(engine, job.operation);
        let made = run_step(job, log, repair, &mut quiet)
            .await
            .map_err(|error| job.step_error(error, log))?;
        if !repair.succeeded(made.code) {
            // The step's own failure is the news; the repair's is said after it.
            let said = quiet
                .error()
                .or_else(|| process::last_error(&made.stderr))
                .map(|error| job.redactor.redact(error));
            let reason = format!(
                "{} (then `{}` failed: {})",
                failure_reason(job, step, &finished, &reader),
                repair.display(),
                said.unwrap_or_else(|| match made.code {
                    Some(code) => format!("exit code {code}"),
                    None => "ended by a signal".into(),
                })
            );
            return Err(job.failed(finished.code, reason, log));
        }
        if let Some(stamp) = &repair.stamp {
            crate::fingerprint::record_init(stamp);
        }
        reader = Reader::new(engine, operation).with_diff(job.show_diff);
        finished = run_step(job, log, step, &mut reader)
            .await
            .map_err(|error| job.step_error(error, log))?;
    }
    Ok((finished, reader))
}

/// What a project's steps found of its outputs.
#[derive(Debug, Default)]
struct Outputs {
    /// As its hooks and its dependents get them (secrets in clear, never shown or logged).
    values: Option<Value>,
    /// What the outputs step printed, for the secret-marks step.
    printed: String,
    /// The names of its secret outputs, once read.
    secret: BTreeSet<String>,
    /// Its apply's outputs as the apply itself said them (Terraform), `None` for a sensitive one.
    applied: Option<BTreeMap<String, Option<Value>>>,
}

impl Outputs {
    /// The outputs step printed `stdout`: the values, and Terraform's sensitive ones and those
    /// the ledger recorded secret (`recorded`) from here on redacted (a destroy reads them
    /// before it runs).
    fn printed(
        &mut self,
        engine: EngineKind,
        redactor: &mut Redactor,
        stdout: String,
        recorded: &BTreeSet<String>,
    ) {
        let values = engine.parse_outputs(&stdout, true);
        let mut secrets = engine.secret_outputs(&stdout, None);
        for name in recorded {
            secrets.extend(
                values
                    .get(name)
                    .map(crate::engine::secret_texts)
                    .unwrap_or_default(),
            );
        }
        self.values = Some(values);
        if !secrets.is_empty() {
            *redactor = redactor.with(secrets);
        }
        self.secret = engine.secret_names(&stdout, None);
        self.printed = stdout;
    }

    /// The secret-marks step ended: which outputs are secret. When Pulumi cannot say, every one
    /// of them is, for what the hooks print; the project's own work is done either way.
    fn marks(
        &mut self,
        engine: EngineKind,
        redactor: &mut Redactor,
        step: &Step,
        finished: &process::Finished,
    ) {
        let marks = match step.succeeded(finished.code) {
            true => finished.stdout.as_str(),
            false => "\"[secret]\"",
        };
        let secrets = engine.secret_outputs(&self.printed, Some(marks));
        *redactor = redactor.with(secrets);
        self.secret = engine.secret_names(&self.printed, Some(marks));
    }

    /// What a command's operation left in `$MARA_OUTPUTS`, if it is one.
    fn left_by(&mut self, job: &Job, step: &Step) -> Result<(), String> {
        let Some(file) = command::outputs_file(step) else {
            return Ok(());
        };
        if let Some(value) = command::read_outputs(file)? {
            self.values = Some(value);
            // Destroyed: the hooks still see the outputs, `mara output` no longer does.
            if job.operation == Operation::Destroy {
                let _ = std::fs::remove_file(file);
            }
        }
        Ok(())
    }
}

/// The outputs its dependents take, from what its apply said, when nothing else needs them read
/// (no hook) and none of them is sensitive.
fn taken_from_apply(
    job: &Job,
    applied: Option<&BTreeMap<String, Option<Value>>>,
) -> Option<serde_json::Map<String, Value>> {
    let (applied, project) = (applied?, &job.project);
    if !project.hooks.is_empty() || project.outputs_taken.is_empty() {
        return None;
    }
    let all_known =
        (project.outputs_taken.iter()).all(|name| applied.get(name).is_none_or(Option::is_some));
    all_known.then(|| {
        (applied.iter())
            .filter_map(|(name, value)| Some((name.clone(), value.clone()?)))
            .collect()
    })
}

/// What the engine's own policies said of its operation, each message redacted as every line
/// of its output is (a pack's message may quote a value).
fn violations(job: &Job, reader: &Reader) -> Vec<crate::engine::PolicyViolation> {
    let mut violations = reader.policy_violations();
    for violation in &mut violations {
        violation.message = job.redactor.redact(&violation.message);
    }
    violations
}

/// Reads what an operation's output said, once it ended (its last lines shown by `run_step`): its
/// preview of outputs and resources (values redacted, as every line is), and its change counts.
fn read_operation(
    job: &Job,
    step: &Step,
    finished: &process::Finished,
    reader: &mut Reader,
    preview: &mut Preview,
) -> Option<crate::engine::Changes> {
    if let Some(planned) = reader.planned_outputs()
        && !job.project.outputs_taken.is_empty()
    {
        (job.shared.context.inputs).planned(&job.project.path, planned);
    }
    let mut changes = reader.changes();
    if let Some((changed, new_stack)) = reader.outputs() {
        preview.changed_outputs = Some(changed);
        preview.new_stack = new_stack;
    }
    preview.diff = reader.diffs();
    preview.plan_digest = reader.plan_digest();
    preview.violations = violations(job, reader);
    if job.project.keeps_document
        && let Some(document) = reader.plan_document()
    {
        preview.document = Some(document.into());
    }
    if job.operation == Operation::Drift {
        preview.drifted = reader.drifted();
        // What applying would change, apart from what changed outside.
        preview.diff.retain(|d| !preview.drifted.contains(d));
        // A command's drift check says it found drift by its exit code alone.
        if job.project.engine.drift_by_exit_code(finished.code) {
            preview.drifted.push(crate::engine::ResourceDiff {
                op: "update".into(),
                resource: "(what its drift command checks)".into(),
                properties: Vec::new(),
            });
        }
    }
    let all = preview.diff.iter_mut().chain(preview.drifted.iter_mut());
    for property in all.flat_map(|d| d.properties.iter_mut()) {
        for value in [&mut property.old, &mut property.new].into_iter().flatten() {
            *value = job.redactor.redact(value);
        }
    }
    // The engine's exit code outranks its counts: an output-only change on an older
    // Terraform still exits 2 without naming the outputs.
    if step.changes_code.is_some()
        && step.changes_code == finished.code
        && let Some(counts) = &mut changes
        && !has_changes(counts)
    {
        counts.insert("output".into(), 1);
    }
    changes
}

/// Runs a project's preparation (its leading `Prepare` steps: selecting or creating its stack,
/// `terraform init`) ahead of its turn, while it still waits for its dependencies; what they
/// print is held back until its turn (docs/ARCHITECTURE.md, "How a run goes").
pub async fn prepare(mut job: Job, stop: Stop) -> Prepared {
    *job.held.lock().unwrap_or_else(|e| e.into_inner()) = Some(Vec::new());
    job.stop = Some(stop);
    let mut prepared = Prepared::new(job);
    if prepared.job.project.absent.is_none() && prepared.job.project.blocked.is_none() {
        prepared.open_log();
        if let Err(finished) = prepared.advance(true).await {
            prepared.ended = Some(finished);
        }
    }
    prepared
}

/// Runs a project in its turn: the steps its preparation left, then its hooks.
pub async fn run(mut prepared: Prepared, release: Release) -> Finished {
    let held = prepared
        .job
        .held
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    for (stream, text) in held.into_iter().flatten() {
        prepared.job.send(stream, text);
    }
    if let Some(outcome) = untouched(&prepared.job) {
        return Finished::without_running(outcome);
    }
    if let Some(finished) = prepared.ended.take() {
        return finished;
    }
    prepared.job.release = Some(release);
    prepared.job.stop = None;
    prepared.open_log();
    // Its preparation (unless done ahead), which needs no input and may find it without its
    // stack; then its inputs, and the rest.
    if let Err(finished) = prepared.advance(true).await {
        return finished;
    }
    if let Some(finished) = prepared.take_inputs() {
        return finished;
    }
    if let Err(finished) = prepared.approve().await {
        return finished;
    }
    if let Err(finished) = prepared.advance(false).await {
        return approve::stale(finished);
    }
    let recorded = prepared.outputs_taken();
    let Prepared {
        job,
        mut log,
        changes,
        outputs,
        exit_code,
        preview,
        replanned_changes,
        ..
    } = prepared;
    let changes = approve::counted(
        job.project.approval.as_deref(),
        preview.approval,
        replanned_changes,
        changes,
    );
    let outputs = (outputs.values).unwrap_or(Value::Object(Default::default()));
    if let Err(reason) = run_hooks(&job, &mut log, &outputs).await {
        return job.failed(exit_code, reason, &log);
    }
    let outcome = match &changes {
        Some(changes) if !has_changes(changes) => Outcome::Unchanged,
        _ => Outcome::Succeeded,
    };
    Finished {
        outcome,
        exit_code,
        changes,
        log: log.as_ref().map(|_| job.project.log.clone()),
        created_stack: job.created(),
        attempts: job.attempts(),
        preview: Box::new(preview),
        outputs: recorded,
    }
}

/// How a project the run does not touch at all ends: skipped (a joined run's dependency did
/// not succeed), or without its stack; `None` for one that runs.
fn untouched(job: &Job) -> Option<Outcome> {
    let project = &job.project;
    match (&project.blocked, &project.absent) {
        (Some(Blocked::Skipped(reason)), _) => Some(Outcome::Skipped {
            reason: reason.clone(),
        }),
        (Some(Blocked::Waits { on, reason }), _) => Some(Outcome::Waits {
            on: on.clone(),
            reason: reason.clone(),
        }),
        // A preview that cannot reach what it would change (manifests whose cluster is not up)
        // waits: its changes are not known, and `--expect-no-changes` must not pass on them.
        (None, Some(reason)) if job.operation == Operation::Preview => Some(Outcome::Waits {
            on: Vec::new(),
            reason: reason.clone(),
        }),
        (None, Some(reason)) => Some(Outcome::Absent {
            reason: reason.clone(),
        }),
        (None, None) => None,
    }
}

/// Why a drift check does not check a project whose stack does not exist.
pub fn not_checked(stack: &str) -> String {
    format!("stack `{stack}` does not exist here (never deployed, or removed): not checked")
}

/// Why a project whose stack does not exist is not touched.
pub fn absent(stack: &str) -> String {
    format!("stack `{stack}` does not exist here (never deployed, or removed): not touched")
}

/// Why a step failed, in a line: a held lock, else the engine's own error, else its exit code.
fn failure_reason(job: &Job, step: &Step, finished: &process::Finished, reader: &Reader) -> String {
    if is_locked(&finished.stderr) || reader.error().is_some_and(is_locked) {
        // Terraform's error in the log holds the lock's id, which its `force-unlock` needs.
        let locked = crate::ledger::LOCKED;
        let unlock = &job.shared.context.unlock;
        return match job.project.engine.lock_clearing(&job.project.dir, unlock) {
            LockClearing::ByMara(clear) => format!(
                "{locked}; if none is running (a run killed mid-operation leaves its lock), {clear}"
            ),
            LockClearing::ByHand(_) | LockClearing::NoLock => format!("{locked} (see the log)"),
        };
    }
    let last_error = reader
        .error()
        .or_else(|| process::last_error(&finished.stderr));
    let what = match step.kind {
        StepKind::Prepare => "preparing the stack failed",
        StepKind::Operation => "failed",
        StepKind::Outputs | StepKind::SecretMarks => "reading the stack outputs failed",
        StepKind::PlannedOutputs => "reading the planned outputs failed",
        StepKind::StateVersion => "reading its state failed",
        StepKind::Cleanup => "removing the stack failed",
    };
    let redactor = &job.redactor;
    match (last_error, finished.code) {
        // The operation's own error needs no "failed" before it: the status says so.
        (Some(error), _) if step.kind == StepKind::Operation => redactor.redact(error),
        (Some(error), _) => format!("{what}: {}", redactor.redact(error)),
        (None, Some(code)) => format!("{what} (exit code {code})"),
        (None, None) => format!("{what} (ended by a signal)"),
    }
}

/// Runs one step's process, showing and logging its lines as they come.
async fn run_step(
    job: &Job,
    log: &mut Option<std::fs::File>,
    step: &Step,
    reader: &mut Reader,
) -> Result<process::Finished, String> {
    if let Some(file) = log {
        // One write: `writeln!` on a file makes one per piece.
        let line = format!(
            "$ {}    # in {}\n",
            job.redactor.redact(&step.display()),
            step.cwd.display()
        );
        let _ = file.write_all(line.as_bytes());
    }
    // A plan holds secrets: the directories mara makes for it are private, and so is the file.
    if let Some(file) = step.writes.as_deref() {
        if let Some(dir) = file.parent() {
            let _ = crate::files::new_private_dir(dir);
        }
        let _ = crate::files::private_file(file);
    }
    // A command's `up` writes its outputs afresh: none from an earlier run may count.
    if job.operation == Operation::Up
        && let Some(file) = command::outputs_file(step)
    {
        let _ = std::fs::remove_file(file);
        if let Some(parent) = file.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
    }
    // Looked at again right before the process starts: a run stopped (a laptop's lid closed)
    // between the look before the step and here would otherwise start it with its lease gone.
    if matches!(step.kind, StepKind::Prepare | StepKind::Operation)
        && job.shared.interrupt.draining().is_some()
    {
        return Err(NOT_STARTED.to_string());
    }
    let created = format!("Created stack '{}'", job.project.context.stack);
    let finished = stream(job, log, step, |job, log, stream, line| {
        if step.kind == StepKind::Prepare && line.trim() == created {
            job.created_stack
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        match (step.kind, stream) {
            // The outputs hold secrets in plain text: never shown, never logged. A list of
            // workspaces is read, not shown.
            (
                StepKind::Outputs
                | StepKind::SecretMarks
                | StepKind::PlannedOutputs
                | StepKind::StateVersion,
                Stream::Stdout,
            ) => {}
            (_, Stream::Stdout) if step.listed.is_some() => {}
            (StepKind::Operation, Stream::Stdout) => {
                for shown in reader.line(line) {
                    job.emit(log, stream, &shown);
                }
            }
            (StepKind::Operation, Stream::Stderr) => {
                reader.stderr(line);
                job.emit(log, stream, line);
            }
            _ => job.emit(log, stream, line),
        }
    })
    .await
    .map_err(|e| e.to_string())?;
    // What the engine said once its output ended (a Pulumi preview's one document): shown now,
    // and its error diagnostics known before a retry is decided.
    if step.kind == StepKind::Operation {
        for line in reader.finish() {
            job.emit(log, Stream::Stdout, &line);
        }
    }
    Ok(finished)
}

/// Runs a command hook's process the way engine steps run, its lines shown and logged.
async fn run_hook_process(
    job: &Job,
    log: &mut Option<std::fs::File>,
    step: &Step,
) -> Result<(), String> {
    let finished = stream(job, log, step, |job, log, stream, line| {
        job.emit(log, stream, line)
    })
    .await
    .map_err(|e| e.to_string())?;
    match finished.code {
        Some(0) => Ok(()),
        Some(code) => Err(format!("exit code {code}")),
        None => Err("ended by a signal".into()),
    }
}

/// Runs `step`, handing each line to `show` as it comes.
async fn stream(
    job: &Job,
    log: &mut Option<std::fs::File>,
    step: &Step,
    mut show: impl FnMut(&Job, &mut Option<std::fs::File>, Stream, &str),
) -> std::io::Result<process::Finished> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let process = process::run(
        step,
        &job.shared.spawner,
        None,
        &job.shared.interrupt,
        tx,
        job.stop.clone(),
    );
    tokio::pin!(process);
    let fault = fault_injected(job);
    loop {
        tokio::select! {
            biased;
            Some((stream, line)) = rx.recv() => {
                assert!(!fault, "MARA_TEST_PANIC_IN names {}", job.project.path);
                show(job, log, stream, &line)
            }
            result = &mut process => {
                while let Ok((stream, line)) = rx.try_recv() {
                    show(job, log, stream, &line);
                }
                break result;
            }
        }
    }
}

/// The project's log file, created empty — with its directories when they are not there yet
/// (the run's first project in each); `None` if it cannot be (the run goes on without it).
fn open_log(path: &std::path::Path) -> Option<std::fs::File> {
    match std::fs::File::create(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(path.parent()?).ok()?;
            std::fs::File::create(path).ok()
        }
        opened => opened.ok(),
    }
}
