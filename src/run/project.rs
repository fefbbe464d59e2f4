//! One project of a run: its engine steps in order, its log file, its hooks.
//!
//! Every line shown or logged passes through the redactor. The stack outputs (read with
//! `--show-secrets` for the hooks) are never shown or logged.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;

use super::hooks::{self, HookContext};
use super::process::{self, Interrupt, InterruptLevel, Stream};
use super::redact::Redactor;
use super::scheduler::{Event, Finished, Outcome};
use crate::engine::{Operation, Reader, Step, StepKind, has_changes, is_locked, parse_outputs};
use crate::provider::EngineKind;
use crate::provider::Hook;

/// Everything one project's task needs, owned, so that it can run on its own.
pub struct ProjectJob {
    pub index: usize,
    pub path: String,
    pub operation: Operation,
    pub engine: EngineKind,
    pub steps: Vec<Step>,
    /// The project's directory, where command hooks run.
    pub dir: PathBuf,
    pub hooks: Vec<Hook>,
    pub env: Arc<BTreeMap<String, String>>,
    pub log: PathBuf,
    pub redactor: Arc<Redactor>,
    pub interrupt: Interrupt,
    pub events: mpsc::UnboundedSender<Event>,
    pub hook_context: Arc<HookContext>,
}

impl ProjectJob {
    fn emit(&self, log: &mut Option<std::fs::File>, stream: Stream, text: &str) {
        let text = self.redactor.redact(text);
        if let Some(file) = log {
            let _ = writeln!(file, "{text}");
        }
        let _ = self.events.send(Event::Line {
            index: self.index,
            path: self.path.clone(),
            stream,
            text,
        });
    }

    fn failed(&self, code: Option<i32>, reason: String, log: &Option<std::fs::File>) -> Finished {
        let outcome = if self.interrupt.is_interrupted() {
            Outcome::Cancelled
        } else {
            Outcome::Failed { code, reason }
        };
        Finished {
            outcome,
            exit_code: code,
            changes: None,
            log: log.as_ref().map(|_| self.log.clone()),
        }
    }
}

pub async fn run(job: ProjectJob) -> Finished {
    let mut log = open_log(&job.log);
    if let Some(file) = &mut log {
        let _ = writeln!(
            file,
            "# mara {} {} at {}",
            job.operation,
            job.path,
            super::clock::rfc3339(std::time::SystemTime::now())
        );
    }
    let mut changes = None;
    let mut outputs: Option<Value> = None;
    let mut exit_code = None;
    for step in &job.steps {
        if job.interrupt.is_interrupted() {
            return job.failed(None, "interrupted".into(), &log);
        }
        let mut reader = Reader::new(job.engine, job.operation);
        let mut finished = match run_step(&job, &mut log, step, &mut reader).await {
            Ok(finished) => finished,
            Err(error) => return job.failed(None, error, &log),
        };
        if !step.succeeded(finished.code)
            && !job.interrupt.is_interrupted()
            && let Some(fallback) = &step.fallback
        {
            finished = match run_step(&job, &mut log, fallback, &mut reader).await {
                Ok(finished) => finished,
                Err(error) => return job.failed(None, error, &log),
            };
            if fallback.succeeded(finished.code) {
                continue;
            }
        }
        if step.kind == StepKind::Operation {
            for line in reader.finish() {
                job.emit(&mut log, Stream::Stdout, &line);
            }
            changes = reader.changes();
            // The engine's exit code outranks its counts: an output-only change on an older
            // Terraform still exits 2 without naming the outputs.
            if step.changes_code.is_some()
                && step.changes_code == finished.code
                && let Some(counts) = &mut changes
                && !has_changes(counts)
            {
                counts.insert("output".into(), 1);
            }
            exit_code = finished.code;
        }
        if !step.succeeded(finished.code) {
            if job.interrupt.level() > InterruptLevel::None {
                return job.failed(finished.code, "interrupted".into(), &log);
            }
            let reason = if is_locked(&finished.stderr) || reader.error().is_some_and(is_locked) {
                "the stack is locked by another update (see the log)".to_string()
            } else {
                let last_error = reader
                    .error()
                    .or_else(|| process::last_error(&finished.stderr));
                let what = match step.kind {
                    StepKind::Prepare => "preparing the stack failed",
                    StepKind::Operation => "failed",
                    StepKind::Outputs => "reading the stack outputs failed",
                    StepKind::Cleanup => "removing the stack failed",
                };
                match (last_error, finished.code) {
                    (Some(error), _) => format!("{what}: {}", job.redactor.redact(error)),
                    (None, Some(code)) => format!("{what} (exit code {code})"),
                    (None, None) => format!("{what} (ended by a signal)"),
                }
            };
            return job.failed(finished.code.or(exit_code), reason, &log);
        }
        if step.kind == StepKind::Outputs {
            outputs = Some(parse_outputs(job.engine, &finished.stdout));
        }
        // A command step writes its outputs to the file named by MARA_OUTPUTS.
        if step.kind == StepKind::Operation
            && let Some(file) = step.env.get("MARA_OUTPUTS")
            && let Ok(text) = std::fs::read_to_string(file)
        {
            match serde_json::from_str::<Value>(&text) {
                Ok(value @ Value::Object(_)) => {
                    outputs = Some(value);
                    // Destroyed: the hooks still see the outputs, `mara output` no longer does.
                    if job.operation == Operation::Destroy {
                        let _ = std::fs::remove_file(file);
                    }
                }
                _ => {
                    let reason =
                        "the command wrote outputs that are not a JSON object to $MARA_OUTPUTS"
                            .to_string();
                    return job.failed(finished.code, reason, &log);
                }
            }
        }
    }
    for hook in &job.hooks {
        let outputs = outputs.clone().unwrap_or(Value::Object(Default::default()));
        let result = hooks::run(hook, &job, &outputs, &job.hook_context).await;
        match result {
            Ok(lines) => {
                for line in lines {
                    job.emit(&mut log, Stream::Stdout, &line);
                }
            }
            Err(reason) => return job.failed(exit_code, reason, &log),
        }
    }
    let outcome = match &changes {
        Some(changes) if !has_changes(changes) => Outcome::Unchanged,
        _ => Outcome::Succeeded,
    };
    Finished {
        outcome,
        exit_code,
        changes,
        log: log.as_ref().map(|_| job.log.clone()),
    }
}

/// Runs one step's process, showing and logging its lines as they come.
async fn run_step(
    job: &ProjectJob,
    log: &mut Option<std::fs::File>,
    step: &Step,
    reader: &mut Reader,
) -> Result<process::Finished, String> {
    if let Some(file) = log {
        let _ = writeln!(
            file,
            "$ {}    # in {}",
            job.redactor.redact(&step.display()),
            step.cwd.display()
        );
    }
    // A command's `up` writes its outputs afresh: none from an earlier run may count.
    if job.operation == Operation::Up
        && let Some(file) = step.env.get("MARA_OUTPUTS").map(std::path::Path::new)
    {
        let _ = std::fs::remove_file(file);
        if let Some(parent) = file.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let process = process::run(step, &job.env, None, &job.interrupt, tx);
    tokio::pin!(process);
    let finished = loop {
        tokio::select! {
            biased;
            Some((stream, line)) = rx.recv() => show(job, log, step.kind, reader, stream, &line),
            result = &mut process => {
                while let Ok((stream, line)) = rx.try_recv() {
                    show(job, log, step.kind, reader, stream, &line);
                }
                break result;
            }
        }
    };
    finished.map_err(|e| e.to_string())
}

fn show(
    job: &ProjectJob,
    log: &mut Option<std::fs::File>,
    kind: StepKind,
    reader: &mut Reader,
    stream: Stream,
    line: &str,
) {
    match (kind, stream) {
        // The outputs hold secrets in plain text: never shown, never logged.
        (StepKind::Outputs, Stream::Stdout) => {}
        (StepKind::Operation, Stream::Stdout) => {
            for shown in reader.line(line) {
                job.emit(log, stream, &shown);
            }
        }
        _ => job.emit(log, stream, line),
    }
}

/// The project's log file, created empty with its directories, open for appending (so that hook
/// processes can append to it too); `None` if it cannot be (the run goes on without it).
fn open_log(path: &std::path::Path) -> Option<std::fs::File> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).ok()?;
    }
    std::fs::File::create(path).ok()?;
    open_append(path)
}

impl ProjectJob {
    /// Runs a hook command's process the way engine steps run, streaming its lines.
    pub async fn run_hook_process(
        &self,
        step: &Step,
        env: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let process = process::run(step, env, None, &self.interrupt, tx);
        tokio::pin!(process);
        let mut log = open_append(&self.log);
        let finished = loop {
            tokio::select! {
                biased;
                Some((stream, line)) = rx.recv() => self.emit(&mut log, stream, &line),
                result = &mut process => {
                    while let Ok((stream, line)) = rx.try_recv() {
                        self.emit(&mut log, stream, &line);
                    }
                    break result;
                }
            }
        };
        match finished {
            Ok(f) if f.code == Some(0) => Ok(()),
            Ok(f) => Err(match f.code {
                Some(code) => format!("exit code {code}"),
                None => "ended by a signal".into(),
            }),
            Err(e) => Err(e.to_string()),
        }
    }
}

fn open_append(path: &std::path::Path) -> Option<std::fs::File> {
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .ok()
}
