//! The runner: carries out a run plan (docs/ARCHITECTURE.md, "How a run goes"). It owns the
//! runtime that starts and reads the engines, the signal handling, and the scheduler; what happens
//! reaches the rest of mara only as `Event`s, delivered in order to the sinks it is given.
//!
//! Signals: from `Runner::new` on — a run command's first step — Ctrl-C, SIGTERM and SIGHUP no longer end
//! mara; they escalate the run's `Interrupt` (SIGINT to the engines, then SIGKILL), and a run in
//! progress reports it to its sinks as `Event::Interrupting`. The command decides what an
//! interruption before or after the run means, and asks at each step whether one came.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::mpsc;

use super::events::{Event, ProjectReport, Reads, Sink, mark_stale, run_status};
use super::interrupt::{Cause, Interrupt, InterruptLevel};
use super::plan::RunPlan;
use super::project::{self, Context, Job, Prepared, Shared};
use super::scheduler::{self, FailurePolicy};
use crate::error::{Error, Result};

/// How many projects run at once, and what a failure means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    pub parallel: usize,
    pub failure: FailurePolicy,
}

/// The most events handed to the sinks at once.
const BURST: usize = 512;

pub struct Runner {
    runtime: tokio::runtime::Runtime,
    interrupt: Interrupt,
    /// What stamps the run's events with their times (`clock::Clock`).
    clock: Arc<dyn crate::clock::Clock>,
}

impl Runner {
    /// Starts the runtime and takes over Ctrl-C and SIGTERM, which escalate `interrupt` (mara's
    /// is `Interrupt::watched`).
    pub fn new(interrupt: Interrupt) -> Result<Runner> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(Error::Runtime)?;
        let (installed, signals) = std::sync::mpsc::channel();
        runtime.spawn(watch_signals(interrupt.clone(), installed));
        // The handlers are in place before anything can be started.
        let _ = signals.recv();
        Ok(Runner {
            runtime,
            interrupt,
            clock: Arc::new(crate::clock::SystemClock),
        })
    }

    /// This runner, its events stamped by `clock`.
    pub fn with_clock(mut self, clock: Arc<dyn crate::clock::Clock>) -> Runner {
        self.clock = clock;
        self
    }

    pub fn interrupt(&self) -> &Interrupt {
        &self.interrupt
    }

    /// The time, as the run's clock says it.
    pub fn now(&self) -> std::time::SystemTime {
        self.clock.now()
    }

    /// Runs `plan`: every project's task, at most `schedule.parallel` at once, each event handed
    /// to every sink in order. Returns one report per project, in the plan's order.
    ///
    /// The walk runs as a task of its own and the sinks here, on the calling thread: a sink that
    /// blocks (a paused terminal) holds up what is shown, never what runs.
    pub fn execute(
        &self,
        plan: &RunPlan,
        context: Context,
        schedule: Schedule,
        sinks: &mut [&mut dyn Sink],
    ) -> Vec<ProjectReport> {
        let spawner = super::spawn::Spawner::new(&context.env);
        let shared = Arc::new(Shared {
            context,
            spawner,
            interrupt: self.interrupt.clone(),
            clock: self.clock.clone(),
        });
        let plan = Arc::new(plan.clone());
        self.runtime.block_on(async {
            let (events, mut received) = mpsc::unbounded_channel();
            let work = tokio::spawn(walk(plan, shared, schedule, events));
            // In bursts: what came while the sinks were busy goes to each sink together, so
            // that one that settles (the ledger's) waits once for all of it.
            let mut burst = Vec::new();
            while received.recv_many(&mut burst, BURST).await > 0 {
                for sink in sinks.iter_mut() {
                    for event in &burst {
                        sink.handle(event);
                    }
                    sink.settle();
                }
                burst.clear();
            }
            match work.await {
                Ok(reports) => reports,
                Err(error) => std::panic::resume_unwind(error.into_panic()),
            }
        })
    }
}

/// The run: the scheduler's walk over the plan, and every escalation of the interruption said as
/// it happens.
async fn walk(
    plan: Arc<RunPlan>,
    shared: Arc<Shared>,
    schedule: Schedule,
    events: mpsc::UnboundedSender<Event>,
) -> Vec<ProjectReport> {
    let interrupt = shared.interrupt.clone();
    let _ = events.send(Event::RunStarted {
        operation: plan.operation,
        projects: plan.len(),
        at: shared.clock.now(),
    });
    let mut escalations = interrupt.subscribe();
    let mut said = InterruptLevel::None;
    // Whether each project's engine created its stack: a project prepared ahead of a turn that
    // never came (its dependency failed) may have.
    let created: Vec<Arc<AtomicBool>> = (0..plan.len()).map(|_| Arc::default()).collect();
    let job = |index: usize| {
        let mut job = Job::new(
            index,
            plan.operation,
            plan.projects[index].clone(),
            shared.clone(),
            events.clone(),
            created[index].clone(),
        );
        job.show_diff = plan.show_diff;
        job
    };
    let scheduler = scheduler::run(
        &plan,
        schedule.parallel,
        schedule.failure,
        (&interrupt, shared.clock.as_ref()),
        &events,
        |index, stop| Box::pin(project::prepare(job(index), stop)),
        |index, prepared, release| {
            let prepared = prepared.unwrap_or_else(|| Prepared::new(job(index)));
            Box::pin(project::run(prepared, release))
        },
    );
    tokio::pin!(scheduler);
    let mut reports = loop {
        tokio::select! {
            reports = &mut scheduler => break reports,
            Ok(()) = escalations.changed() => {
                let (level, cause) = *escalations.borrow_and_update();
                say(&mut said, level, cause, &events);
            }
        }
    };
    for (report, created) in reports.iter_mut().zip(&created) {
        report.created_stack |= created.load(Ordering::Relaxed);
    }
    // What a preview would change, and what applying would change after drift, is read by
    // the projects after them.
    if matches!(
        plan.operation,
        crate::engine::Operation::Preview | crate::engine::Operation::Drift
    ) {
        mark_stale(&mut reports, &reads(&plan));
    }
    // An escalation that came as the last project ended is said too.
    say(&mut said, interrupt.level(), interrupt.cause(), &events);
    let status = run_status(&reports, &interrupt);
    let at = shared.clock.now();
    let _ = events.send(Event::RunFinished { status, at });
    reports
}

/// What each project of a preview reads of those before it (`events::mark_stale`).
fn reads(plan: &RunPlan) -> Vec<Reads> {
    (plan.projects.iter())
        .map(|p| Reads {
            waits_for: p.waits_for.clone(),
            inputs: (p.inputs.iter())
                .map(|i| (i.from.clone(), i.output.clone()))
                .collect(),
        })
        .collect()
}

/// Says every level of interruption up to `level` not said yet, in order: a SIGINT and a SIGKILL
/// that came too close together to be seen apart are still two events.
fn say(
    said: &mut InterruptLevel,
    level: InterruptLevel,
    cause: Cause,
    events: &mpsc::UnboundedSender<Event>,
) {
    for step in [InterruptLevel::Graceful, InterruptLevel::Kill] {
        if step > *said && step <= level {
            let _ = events.send(Event::Interrupting { level: step, cause });
        }
    }
    *said = (*said).max(level);
}

/// Every Ctrl-C (or SIGTERM) escalates the interruption: SIGINT to the engines, then SIGKILL.
/// SIGHUP — the terminal closed — cancels, never more: a closing session may send it twice, and
/// that is not a person asking to kill. Output then goes nowhere (the terminal is gone; a write
/// to it would fail). A SIGHUP that mara inherited ignored (`nohup`) stays ignored.
async fn watch_signals(interrupt: Interrupt, installed: std::sync::mpsc::Sender<()>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut terminate), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        let _ = installed.send(());
        return;
    };
    let mut hangup = match ignored(libc::SIGHUP) {
        true => None,
        false => signal(SignalKind::hangup()).ok(),
    };
    let _ = installed.send(());
    loop {
        let hung_up = async {
            match &mut hangup {
                Some(hangup) => hangup.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = int.recv() => {
                interrupt.escalate(Cause::Signal);
            }
            _ = terminate.recv() => {
                interrupt.escalate(Cause::Signal);
            }
            _ = hung_up => {
                to_nowhere();
                interrupt.cancel(Cause::Signal);
            }
        }
    }
}

/// Whether `signal` is ignored (as `nohup` leaves SIGHUP).
fn ignored(signal: i32) -> bool {
    // SAFETY: sigaction with a null new action only reads the current one into `current`.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut current) == 0
            && current.sa_sigaction == libc::SIG_IGN
    }
}

/// Standard output and error to /dev/null where they were the terminal, which is gone (a file
/// or a pipe they were redirected to still gets the rest of the run).
fn to_nowhere() {
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        use std::os::fd::AsRawFd;
        for fd in [1, 2] {
            // A hung-up terminal may answer isatty with EIO rather than yes.
            // SAFETY: isatty only asks about the descriptor.
            let terminal = unsafe { libc::isatty(fd) } == 1
                || std::io::Error::last_os_error().raw_os_error() == Some(libc::EIO);
            if terminal {
                // SAFETY: dup2 replaces a standard descriptor of this process; `null` stays open
                // until it is duplicated.
                unsafe {
                    libc::dup2(null.as_raw_fd(), fd);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Operation, Step, StepKind};
    use crate::run::plan::fixtures;
    use crate::status::ProjectStatus;

    /// Remembers every event.
    #[derive(Default)]
    struct Recording(Vec<Event>);

    impl Sink for Recording {
        fn handle(&mut self, event: &Event) {
            self.0.push(event.clone());
        }
    }

    fn context(root: &std::path::Path) -> Context {
        Context {
            env: [(
                "PATH".to_string(),
                std::env::var("PATH").unwrap_or_default(),
            )]
            .into(),
            redactor: crate::run::redact::Redactor::new(["hunter2".to_string()]),
            kubeconfig: crate::run::kubeconfig::Files {
                stack: root.join("kube/dev.yaml"),
                root: root.to_path_buf(),
                stack_name: "dev".into(),
                id: None,
            },
            unlock: "mara unlock --engine".into(),
            inputs: Default::default(),
        }
    }

    /// One clock stamps the run: every event's time, each project's start and end, are the
    /// clock's (here one that does not move), never a sink's own.
    #[test]
    fn the_run_s_clock_stamps_its_events_and_reports() {
        let dir = tempfile::tempdir().unwrap();
        let mut plan = fixtures::plan(Operation::Up, &["vpc", "eks"]);
        for project in plan.projects.iter_mut() {
            project.log = dir
                .path()
                .join(format!("{}.log", project.path.replace('/', "-")));
            project.steps = vec![Step::new(
                StepKind::Operation,
                "sh",
                vec!["-c".into(), "sleep 0.01".into()],
                dir.path(),
            )];
        }
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_795_280_936);
        let clock = Arc::new(crate::clock::FixedClock(std::sync::Mutex::new(at)));
        let runner = Runner::new(Interrupt::default()).unwrap().with_clock(clock);
        assert_eq!(runner.now(), at);
        let mut events = Recording::default();
        let schedule = Schedule {
            parallel: 2,
            failure: FailurePolicy::StopAll,
        };
        let reports = runner.execute(&plan, context(dir.path()), schedule, &mut [&mut events]);
        let stamped: Vec<std::time::SystemTime> = (events.0.iter())
            .filter_map(|e| match e {
                Event::RunStarted { at, .. }
                | Event::ProjectStarted { at, .. }
                | Event::RunFinished { at, .. } => Some(*at),
                _ => None,
            })
            .collect();
        assert_eq!(stamped, [at; 4]);
        let said = crate::clock::rfc3339(at);
        for report in &reports {
            assert_eq!(report.started.as_deref(), Some(said.as_str()), "{report:?}");
            assert_eq!(
                report.finished.as_deref(),
                Some(said.as_str()),
                "{report:?}"
            );
            assert_eq!(report.duration_ms, Some(0));
        }
    }

    #[test]
    fn every_sink_sees_every_event_in_order_and_secrets_never() {
        let dir = tempfile::tempdir().unwrap();
        let mut plan = fixtures::plan(Operation::Preview, &["vpc", "eks"]);
        for (i, project) in plan.projects.iter_mut().enumerate() {
            project.log = dir.path().join(format!("{i}.log"));
            project.steps = vec![Step::new(
                StepKind::Prepare,
                "sh",
                vec!["-c".into(), format!("echo line-{i} hunter2; exit {i}")],
                dir.path(),
            )];
        }
        let runner = Runner::new(Interrupt::default()).unwrap();
        let (mut first, mut second) = (Recording::default(), Recording::default());
        let schedule = Schedule {
            parallel: 4,
            failure: FailurePolicy::StopAll,
        };
        let reports = runner.execute(
            &plan,
            context(dir.path()),
            schedule,
            &mut [&mut first, &mut second],
        );
        assert_eq!(
            reports.iter().map(|r| r.status).collect::<Vec<_>>(),
            [ProjectStatus::Succeeded, ProjectStatus::Failed]
        );
        let kinds: Vec<String> = first
            .0
            .iter()
            .map(|e| match e {
                Event::RunStarted { projects, .. } => format!("run {projects}"),
                Event::ProjectStarted { index, .. } => format!("start {index}"),
                Event::Line { index, text, .. } => format!("{index}: {text}"),
                Event::ProjectFinished { index, report } => {
                    format!("end {index} {}", report.status)
                }
                Event::Interrupting { .. } => "interrupting".into(),
                Event::Asks { index, .. } => format!("asks {index}"),
                Event::Held { index, .. } => format!("held {index}"),
                Event::RunFinished { status, .. } => format!("finished {status}"),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "run 2",
                "start 0",
                "0: line-0 [secret]",
                "end 0 succeeded",
                "start 1",
                "1: line-1 [secret]",
                "end 1 failed",
                "finished failed",
            ]
        );
        assert_eq!(first.0.len(), second.0.len());
        let log = std::fs::read_to_string(dir.path().join("1.log")).unwrap();
        assert!(
            log.contains("line-1 [secret]") && !log.contains("hunter2"),
            "{log}"
        );
    }

    #[test]
    fn an_interruption_is_an_event_and_cancels_the_running_project() {
        let dir = tempfile::tempdir().unwrap();
        let mut plan = fixtures::plan(Operation::Preview, &["vpc"]);
        plan.projects[0].log = dir.path().join("vpc.log");
        plan.projects[0].steps = vec![Step::new(
            StepKind::Operation,
            "sh",
            vec!["-c".into(), "sleep 5".into()],
            dir.path(),
        )];
        let runner = Runner::new(Interrupt::default()).unwrap();
        let interrupt = runner.interrupt().clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            interrupt.escalate(Cause::CancelRequest);
        });
        let mut recording = Recording::default();
        let schedule = Schedule {
            parallel: 1,
            failure: FailurePolicy::StopAll,
        };
        let reports = runner.execute(&plan, context(dir.path()), schedule, &mut [&mut recording]);
        assert_eq!(reports[0].status, ProjectStatus::Cancelled);
        assert!(recording.0.iter().any(|e| matches!(
            e,
            Event::Interrupting {
                level: InterruptLevel::Graceful,
                cause: Cause::CancelRequest
            }
        )));
        assert!(matches!(
            recording.0.last(),
            Some(Event::RunFinished {
                status: crate::status::RunStatus::Cancelled,
                ..
            })
        ));
    }
}
