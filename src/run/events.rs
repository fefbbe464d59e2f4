//! What a run tells the rest of mara while it goes on: typed events, delivered in order to every
//! `Sink` — the terminal reporter, the ledger recorder, the confirmation's line collector. The
//! runner never prints; a sink decides what an event means to it.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::Serialize;

use super::interrupt::{Cause, InterruptLevel};
use super::process::Stream;
use crate::engine::{Changes, Operation};
use crate::status::{ProjectStatus, RunStatus};

/// What one project ended as. "Stopped by us" is not "failed".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    /// Succeeded, and the engine reported no change.
    Unchanged,
    Failed {
        code: Option<i32>,
        reason: String,
    },
    Skipped {
        reason: String,
    },
    /// Not touched: the stack does not exist for this project (a `destroy` or `refresh` of a stack
    /// never deployed there). Shown as skipped; unlike a skip, its dependents may go on.
    Absent {
        reason: String,
    },
    /// Stopped by an interruption. `killed`: by SIGKILL (a second interruption), which an engine
    /// cannot clean up after — it says how to clear the lock the engine may still hold.
    Cancelled {
        killed: Option<String>,
    },
    /// Not previewed: a project it reads is not deployed yet (its preview creates its stack), so
    /// there is nothing to read. `on`: those projects. Changes here are certain; its dependents
    /// wait too.
    Waits {
        on: Vec<String>,
        reason: String,
    },
}

impl Outcome {
    pub fn status(&self) -> ProjectStatus {
        match self {
            Outcome::Succeeded => ProjectStatus::Succeeded,
            Outcome::Unchanged => ProjectStatus::Unchanged,
            Outcome::Failed { .. } => ProjectStatus::Failed,
            Outcome::Skipped { .. } | Outcome::Absent { .. } => ProjectStatus::Skipped,
            Outcome::Cancelled { .. } => ProjectStatus::Cancelled,
            Outcome::Waits { .. } => ProjectStatus::Waiting,
        }
    }

    /// Whether the projects waiting for it may start.
    pub fn lets_dependents_run(&self) -> bool {
        matches!(
            self,
            Outcome::Succeeded
                | Outcome::Unchanged
                | Outcome::Absent { .. }
                | Outcome::Waits { .. }
        )
    }

    pub fn reason(&self) -> Option<&str> {
        match self {
            Outcome::Failed { reason, .. }
            | Outcome::Skipped { reason }
            | Outcome::Absent { reason }
            | Outcome::Waits { reason, .. }
            | Outcome::Cancelled {
                killed: Some(reason),
            } => Some(reason),
            _ => None,
        }
    }
}

/// What a project's task returns to the scheduler.
#[derive(Debug)]
pub struct Finished {
    pub outcome: Outcome,
    pub exit_code: Option<i32>,
    pub changes: Option<Changes>,
    pub log: Option<std::path::PathBuf>,
    /// Whether its engine said it created the project's stack.
    pub created_stack: bool,
    /// How many times its operation ran (`[retry]`); 0: it did not run.
    pub attempts: u32,
    /// What its preview says its outputs will do.
    pub preview: Box<Preview>,
    /// The outputs its dependents take, as its `up` left them (secret ones by name only): what
    /// the ledger records.
    pub outputs: Option<Box<crate::ledger::Outputs>>,
}

impl Finished {
    /// A project that ended as `outcome` without running anything: no exit code, no changes,
    /// no log.
    pub fn without_running(outcome: Outcome) -> Finished {
        Finished {
            outcome,
            exit_code: None,
            changes: None,
            log: None,
            created_stack: false,
            attempts: 0,
            preview: Default::default(),
            outputs: None,
        }
    }
}

/// What a project's preview says about its stack's outputs, for the projects that read them
/// (docs/commands.md, "Previews across stacks").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preview {
    /// The outputs that change (`None`: the engine did not say).
    pub changed_outputs: Option<Vec<String>>,
    /// Its stack is not deployed yet: the preview creates it.
    pub new_stack: bool,
    /// The resources that change, with their properties.
    pub diff: Vec<crate::engine::ResourceDiff>,
    /// A drift check's: the resources changed outside the engine, with their properties.
    pub drifted: Vec<crate::engine::ResourceDiff>,
    /// A project with inputs: which values it was previewed with.
    pub planned_with: Option<PlannedWith>,
    /// The inputs (`network:subnet_id`) it was previewed with as their upstream's preview
    /// plans them.
    pub projected: Vec<String>,
    /// Its inputs as its operation took them, by name (`approval::fingerprint`).
    pub inputs_taken: BTreeMap<String, String>,
    /// What it plans, as one digest, where its engine's preview says it (Pulumi).
    pub plan_digest: Option<String>,
    /// In an `up` of approved plans: how its approved plan went.
    pub approval: Option<crate::run::approval::Held>,
    /// A saved plan's: the state it was made against (Terraform's lineage and serial).
    pub state: Option<crate::engine::StateVersion>,
    /// Its engine's own plan as JSON text (Terraform's `show -json`, Pulumi's preview digest),
    /// kept for the policies when they read it: never shown, never recorded.
    pub document: Option<std::sync::Arc<str>>,
    /// What the engine's own policies said of its operation (Pulumi's policy packs), whether
    /// it succeeded or not.
    pub violations: Vec<crate::engine::PolicyViolation>,
}

pub use super::approval::PlannedWith;

/// A preview that used values which the run would change: the project reads `reads`, whose
/// `outputs` change (none named: whose own preview read values that change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stale {
    pub reads: String,
    pub outputs: Vec<String>,
}

impl Stale {
    /// Whether it reads a changing output itself (not only a stale preview).
    pub fn is_direct(&self) -> bool {
        !self.outputs.is_empty()
    }

    /// The note people read.
    pub fn note(&self) -> String {
        self.note_naming(&str::to_string)
    }

    /// The note with each project's name as `name` writes it (in backquotes, for Markdown).
    pub fn note_naming(&self, name: &dyn Fn(&str) -> String) -> String {
        let reads = name(&self.reads);
        if self.outputs.is_empty() {
            return format!(
                "reads {reads}, whose own preview read values that change: this preview may not show everything"
            );
        }
        let outputs: Vec<String> = self.outputs.iter().map(|o| format!("`{o}`")).collect();
        let said = match outputs.len() {
            1 => "output {} changes: this preview used its current value",
            _ => "outputs {} change: this preview used their current values",
        };
        format!(
            "reads {reads}, whose {}",
            said.replace("{}", &outputs.join(", "))
        )
    }
}

/// What a project of a preview reads of those before it: the positions (among the reports) of
/// those it waits for, and its inputs as (project, output).
pub struct Reads {
    pub waits_for: Vec<usize>,
    pub inputs: Vec<(String, String)>,
}

/// A preview's projects that read what the run would change (docs/commands.md, "Previews across
/// stacks"): a dependency whose outputs change, named with them, or whose own preview is stale.
/// `reports` are in the run's order, where every dependency comes first; `reads` is each one's.
pub fn mark_stale(reports: &mut [ProjectReport], reads: &[Reads]) {
    for i in 0..reports.len() {
        if !reports[i].status.is_success() {
            continue;
        }
        let mut stale = Vec::new();
        let project = &reads[i];
        for &j in &project.waits_for {
            let dependency = &reports[j];
            // A project that takes inputs from it reads those alone, each as its preview used
            // it: stale where that was not as planned.
            let mut taken = (project.inputs.iter())
                .filter(|(from, _)| *from == dependency.path)
                .peekable();
            let outputs = match taken.peek().is_some() {
                true => {
                    let taken: Vec<&str> = taken
                        .filter(|(from, output)| {
                            !reports[i].projected.contains(&format!("{from}:{output}"))
                        })
                        .map(|(_, output)| output.as_str())
                        .collect();
                    (dependency.changed_outputs.as_ref()).map(|changed| {
                        changed
                            .iter()
                            .filter(|o| taken.contains(&o.as_str()))
                            .cloned()
                            .collect()
                    })
                }
                false => dependency.changed_outputs.clone(),
            };
            let changing = outputs.as_ref().filter(|outputs| !outputs.is_empty());
            if let Some(outputs) = changing {
                stale.push(Stale {
                    reads: dependency.path.clone(),
                    outputs: outputs.clone(),
                });
            } else if !dependency.stale.is_empty() {
                stale.push(Stale {
                    reads: dependency.path.clone(),
                    outputs: Vec::new(),
                });
            }
        }
        reports[i].stale = stale;
    }
}

/// The stale previews of a run for people: one line per output a project reads that changes,
/// then how many more projects read those stale previews in turn (marked in the table).
pub fn stale_lines(reports: &[ProjectReport], name: &dyn Fn(&str) -> String) -> Vec<String> {
    let mut lines: Vec<String> = reports
        .iter()
        .flat_map(|r| {
            r.stale
                .iter()
                .filter(|s| s.is_direct())
                .map(move |s| format!("{} {}", name(&r.path), s.note_naming(name)))
        })
        .collect();
    let further = reports
        .iter()
        .filter(|r| !r.stale.is_empty() && !r.stale.iter().any(Stale::is_direct))
        .count();
    if further > 0 {
        lines.push(format!(
            "and {further} {} after them, whose previews read those (marked stale)",
            crate::error::plural(further, "project", "projects")
        ));
    }
    lines
}

/// The previews made with planned values, one line per project and upstream:
/// "app was planned with network:subnet_id as it will be after network's update".
pub fn projected_lines(reports: &[ProjectReport], name: &dyn Fn(&str) -> String) -> Vec<String> {
    let mut lines = Vec::new();
    for report in reports.iter().filter(|r| !r.projected.is_empty()) {
        let mut by_upstream: Vec<(&str, Vec<String>)> = Vec::new();
        for source in &report.projected {
            let upstream = source.rsplit_once(':').map_or(source.as_str(), |(p, _)| p);
            match by_upstream.iter_mut().find(|(u, _)| *u == upstream) {
                Some((_, sources)) => sources.push(name(source)),
                None => by_upstream.push((upstream, vec![name(source)])),
            }
        }
        for (upstream, sources) in by_upstream {
            let them = match sources.len() {
                1 => "it",
                _ => "they",
            };
            let will = format!("as {them} will be after {}'s update", name(upstream));
            lines.push(format!(
                "{} was planned with {} {will}",
                name(&report.path),
                sources.join(", ")
            ));
        }
    }
    lines
}

fn attempted_once(attempts: &u32) -> bool {
    *attempts <= 1
}

fn approval_text<S: serde::Serializer>(
    held: &Option<crate::run::approval::Held>,
    to: S,
) -> Result<S::Ok, S::Error> {
    match held {
        Some(held) => to.serialize_str(held.as_str()),
        None => to.serialize_none(),
    }
}

/// The most of a preview's diff the ledger keeps, in characters of its lines: what a step
/// summary shows of it.
pub const PREVIEWED_DIFF: usize = 512 * 1024;

/// One project of a run, as the summary and the report show it (docs/formats.md, "The run
/// summary").
#[derive(Debug, Clone, Serialize)]
pub struct ProjectReport {
    pub path: String,
    pub status: ProjectStatus,
    pub started: Option<String>,
    pub finished: Option<String>,
    pub duration_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub changes: Option<Changes>,
    pub reason: Option<String>,
    /// A preview's: the outputs it changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changed_outputs: Option<Vec<String>>,
    /// A preview's: what it read that the run would change.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stale: Vec<Stale>,
    /// A preview's: the projects not deployed yet that it waits on.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waits_on: Vec<String>,
    /// A preview's: the resources that change, with their properties.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub diff: Vec<crate::engine::ResourceDiff>,
    /// A drift check's: the resources changed outside the engine, with their properties.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drifted: Vec<crate::engine::ResourceDiff>,
    /// A preview's, for a project with inputs: which values it was previewed with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planned_with: Option<PlannedWith>,
    /// A preview's: the inputs it was previewed with as planned, not as they are.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub projected: Vec<String>,
    /// Its inputs as its operation took them (`approval::fingerprint`), for a saved plan's
    /// manifest.
    #[serde(skip)]
    pub inputs_taken: BTreeMap<String, String>,
    /// What its preview plans, as one digest, for a saved plan's manifest.
    #[serde(skip)]
    pub plan_digest: Option<String>,
    /// The state its saved plan was made against, for the manifest.
    #[serde(skip)]
    pub state: Option<crate::engine::StateVersion>,
    /// Its engine's own plan as JSON text, for the policies (`Preview::document`).
    #[serde(skip)]
    pub document: Option<std::sync::Arc<str>>,
    /// What the policies said of it (docs/commands.md, "Policies").
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policy: Vec<crate::policy::Message>,
    /// An `up` of approved plans': `applied as approved`, `replanned` or `refused`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "approval_text"
    )]
    pub approval: Option<crate::run::approval::Held>,
    /// A preview's: its stack is not deployed yet.
    #[serde(skip)]
    pub new_stack: bool,
    #[serde(skip)]
    pub outcome: Outcome,
    #[serde(skip)]
    pub log: Option<std::path::PathBuf>,
    /// Whether its engine said it created the project's stack (`stack select --create`).
    #[serde(skip)]
    pub created_stack: bool,
    /// How many times its operation ran, when a retry ran it again.
    #[serde(skip_serializing_if = "attempted_once")]
    pub attempts: u32,
    /// The outputs its dependents take, for the ledger (`Finished::outputs`).
    #[serde(skip)]
    pub outputs: Option<Box<crate::ledger::Outputs>>,
}

impl ProjectReport {
    /// What its preview showed beyond its counts, for the ledger: its diff kept within what a
    /// summary shows (`PREVIEWED_DIFF`), whole resources.
    pub fn previewed(&self) -> Box<crate::ledger::Previewed> {
        let mut size = 0;
        let diff = (self.diff.iter())
            .take_while(|d| {
                size += d.lines().iter().map(|l| l.len() + 1).sum::<usize>();
                size <= PREVIEWED_DIFF
            })
            .cloned()
            .collect();
        Box::new(crate::ledger::Previewed {
            changed_outputs: self.changed_outputs.clone(),
            diff,
            planned_with: self.planned_with,
            projected: self.projected.clone(),
            waits_on: self.waits_on.clone(),
            new_stack: self.new_stack,
            drifted: self.drifted.clone(),
        })
    }

    /// The report of a project that ran from `ran`'s first time to its second (`None`: never
    /// started).
    pub fn new(
        path: String,
        ran: Option<(SystemTime, SystemTime)>,
        finished: Finished,
    ) -> ProjectReport {
        let preview = *finished.preview;
        let policy = (preview.violations.iter())
            .map(|v| crate::policy::Message::of_pack(v, &path))
            .collect();
        let (started, end) = (ran.map(|(s, _)| s), ran.map(|(_, e)| e));
        let duration_ms = started
            .zip(end)
            .map(|(s, e)| e.duration_since(s).unwrap_or_default().as_millis() as u64);
        ProjectReport {
            path,
            status: finished.outcome.status(),
            started: started.map(crate::clock::rfc3339),
            finished: end.map(crate::clock::rfc3339),
            duration_ms,
            exit_code: finished.exit_code,
            changes: finished.changes,
            reason: finished.outcome.reason().map(str::to_string),
            changed_outputs: preview.changed_outputs,
            stale: Vec::new(),
            waits_on: match &finished.outcome {
                Outcome::Waits { on, .. } => on.clone(),
                _ => Vec::new(),
            },
            new_stack: preview.new_stack,
            diff: preview.diff,
            drifted: preview.drifted,
            planned_with: preview.planned_with,
            projected: preview.projected,
            inputs_taken: preview.inputs_taken,
            plan_digest: preview.plan_digest,
            state: preview.state,
            document: preview.document,
            policy,
            approval: preview.approval,
            outcome: finished.outcome,
            log: finished.log,
            created_stack: finished.created_stack,
            attempts: finished.attempts,
            outputs: finished.outputs,
        }
    }
}

/// What happens in a run, in the order it happens. `index` is a project's position in the run
/// plan.
#[derive(Debug, Clone)]
pub enum Event {
    RunStarted {
        operation: Operation,
        projects: usize,
        at: SystemTime,
    },
    ProjectStarted {
        index: usize,
        path: String,
        at: SystemTime,
    },
    /// One line of a project's output (already redacted).
    Line {
        index: usize,
        path: String,
        stream: Stream,
        text: String,
    },
    ProjectFinished {
        index: usize,
        report: Box<ProjectReport>,
    },
    /// A ready project that a free slot would start but for its pool's or engine's budget
    /// (`why`); said once, before it starts.
    Held {
        index: usize,
        path: String,
        why: String,
    },
    /// A project's new plan differs from the one approved: whoever confirms the run is asked
    /// whether it applies (an interactive `up`); no answer is a no.
    Asks {
        index: usize,
        path: String,
        question: Question,
    },
    /// Ctrl-C, SIGTERM or `mara cancel`: the running engines were sent SIGINT (`Graceful`) or
    /// SIGKILL (`Kill`).
    Interrupting {
        level: InterruptLevel,
        cause: Cause,
    },
    RunFinished {
        status: RunStatus,
        at: SystemTime,
    },
}

/// What a project asks of whoever confirms the run (`Event::Asks`).
#[derive(Debug, Clone)]
pub struct Question {
    /// How its new plan differs from the approved one.
    pub why: String,
    /// Its new plan: each resource that changes, with its properties (redacted).
    pub plan: Vec<String>,
    /// Where the answer goes, once: `true` applies the new plan.
    pub answer: std::sync::Arc<std::sync::Mutex<Option<tokio::sync::oneshot::Sender<bool>>>>,
}

impl Question {
    /// Answers it (the first answer counts).
    pub fn answer(&self, yes: bool) {
        let sender = self.answer.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(sender) = sender {
            let _ = sender.send(yes);
        }
    }
}

/// Something that follows a run's events.
pub trait Sink {
    fn handle(&mut self, event: &Event);

    /// Called after each burst of events it was handed, before the sinks after it see them: a
    /// sink whose record must come first (a project's end in the ledger before the terminal
    /// shows it) waits here.
    fn settle(&mut self) {}
}

/// How a run as a whole ended, said once for its events, its summary and its record: failed when
/// it lost its lease before its projects were done, else cancelled when interrupted, else failed
/// when a project failed or an approved plan was refused.
pub fn run_status(reports: &[ProjectReport], interrupt: &super::interrupt::Interrupt) -> RunStatus {
    // A run that lost its lease stopped short of what it was asked: it failed.
    if interrupt.lease().cost().is_some() {
        RunStatus::Failed
    } else if interrupt.is_interrupted() {
        RunStatus::Cancelled
    } else if reports.iter().any(|r| {
        r.status == ProjectStatus::Failed || r.approval == Some(crate::run::approval::Held::Refused)
    }) {
        // An approved plan that no longer held is a run that did not do what it was to do.
        RunStatus::Failed
    } else {
        RunStatus::Succeeded
    }
}
