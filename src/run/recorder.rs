//! Recording a run in the ledger (docs/commands.md, "status, history, logs"): the run's record and
//! the stack's lock taken before anything runs, each project as it starts and ends (a sink of the
//! run's events, written on a thread of its own so that a commit never holds up the engines),
//! `mara cancel` watched for, and the run's final status — which releases the lock.
//!
//! A ledger that cannot be written during the run loses the record, not the run: those failures
//! are logged as warnings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use super::events::{Event, Sink};
use super::interrupt::{Cause, Interrupt};
use super::plan::RunPlan;
use crate::clock;
use crate::error::{Error, Problem, Result};
use crate::ledger::{Begun, Holder, Ledger, ProjectRecord, RunRecord, RunStart};
use crate::status::RunStatus;

type Shared = Arc<Mutex<Box<dyn Ledger>>>;

/// A lock `Recorder::start` took over: its holder, and its run as recorded now (abandoned).
pub struct TakenOver {
    pub holder: Holder,
    pub run: Option<RunRecord>,
}

/// What an opened run's projects wait for (`Recorder::plan`).
pub const WAITS_FOR_ITS_JOB: &str = "waits for its job";

/// Why a run drains when its lock is gone.
const LOCK_TAKEN: &str =
    "the stack's lock was taken from this run (its lease ran out, or `mara unlock --force`)";

/// A write to the ledger, as `persist` runs it.
type Op<'a> = dyn FnMut(&mut dyn Ledger) -> Result<()> + 'a;

/// A run being recorded, holding its stack's lock.
pub struct Recorder {
    ledger: Shared,
    run_id: String,
    /// Dropped to stop watching for `mara cancel`: the watcher wakes at once, not at its next
    /// look (a run's end would otherwise wait up to a quarter of a second for it).
    stop: Option<mpsc::Sender<()>>,
    watcher: Option<JoinHandle<()>>,
    /// Joined to a run opened elsewhere (`mara ci open`): its projects are recorded here, and the
    /// run is closed elsewhere (`mara ci close`).
    joined: bool,
    /// Whether the run holds its stack's lock (a preview holds none): then it renews the lease
    /// and watches that it still holds it.
    locks: bool,
    /// When the call that last took or renewed the lock was sent: the lease counts from then
    /// (`run::drain`).
    confirmed: Instant,
}

impl Recorder {
    /// Records the run and takes the stack's lock (with `lease`, on a ledger whose locks are
    /// leases): exit 5 when another live run holds it. A lock whose process is gone (or whose
    /// lease ran out) is taken over: its run is recorded `abandoned`, and returned as it is now.
    pub fn start(
        mut ledger: Box<dyn Ledger>,
        start: &RunStart,
        locks: bool,
        lease: Option<Duration>,
        again: &dyn Fn(&str) -> String,
    ) -> Result<(Recorder, Option<TakenOver>)> {
        if let Some(lease) = lease {
            ledger.set_lease(lease);
        }
        let deciding = std::time::Instant::now();
        let begun = ledger.begin(start, locks)?;
        // What the benchmarks read (docs/benchmarks.md, `MARA_LOG=mara::ledger=debug`).
        tracing::debug!(
            target: "mara::ledger",
            micros = deciding.elapsed().as_micros() as u64,
            taken = matches!(begun, Begun::Started { .. }),
            "lock decided"
        );
        match begun {
            Begun::Held(holder) => Err(Error::Locked(Box::new(
                Problem::new(format!(
                    "stack `{}` is locked by another run: {holder}",
                    start.stack
                ))
                .hint(match holder.lease_left {
                    // A run fanned out over CI jobs: its opener is long gone; its close ends it.
                    Some(_) if holder.command.contains(" ci open ") => format!(
                        "it is a run fanned out over CI jobs: its pipeline's close job ends it (`{}`), or stop it with `{}`",
                        again(&format!("ci close --run {}", holder.run_id)),
                        again("cancel")
                    ),
                    None => format!("wait for it, stop it with `{}`, or clear a lock whose run is gone with `{}`", again("cancel"), again("unlock --force")),
                    Some(left) => format!("wait for it, or stop it with `{}`; if its process is gone (killed, its machine lost), the next run takes the lock over when its lease runs out, in {left} s", again("cancel")),
                }),
            ))),
            Begun::Started { took_over } => {
                let recorder = Recorder {
                    ledger: Arc::new(Mutex::new(ledger)),
                    run_id: start.run_id.clone(),
                    stop: None,
                    watcher: None,
                    joined: false,
                    locks,
                    confirmed: deciding,
                };
                let taken = took_over.map(|holder| TakenOver {
                    run: recorder.run(&holder.run_id).ok().flatten(),
                    holder,
                });
                Ok((recorder, taken))
            }
        }
    }

    /// Joins run `run_id`, opened elsewhere (`mara ci open`), to record this machine's projects
    /// under it (`Ledger::join` says when it cannot be).
    pub fn join(
        mut ledger: Box<dyn Ledger>,
        run_id: &str,
        stack: &str,
        operation: crate::engine::Operation,
    ) -> Result<Recorder> {
        ledger.join(run_id, stack, operation)?;
        let confirmed = Instant::now();
        if operation.mutates() {
            // Renewed at once: the job may start long after the last one renewed it.
            ledger.renew(run_id)?;
        }
        Ok(Recorder {
            ledger: Arc::new(Mutex::new(ledger)),
            run_id: run_id.to_string(),
            stop: None,
            watcher: None,
            joined: true,
            locks: operation.mutates(),
            confirmed,
        })
    }

    /// Records the projects of a run opened for its jobs (`mara ci open`) as waiting for them:
    /// `status` shows the whole run, and a job knows which of its dependencies are to come.
    pub fn plan(&self, paths: &[String]) -> Result<()> {
        self.mark(
            paths,
            crate::status::ProjectStatus::Waiting,
            None,
            WAITS_FOR_ITS_JOB,
        )
    }

    /// A joined run's projects that could not run (the job failed before them), recorded failed
    /// with `reason`.
    fn not_run(mut self, paths: &[String], reason: &str) -> Result<()> {
        self.stop_watching();
        let finished = clock::rfc3339(SystemTime::now());
        self.mark(
            paths,
            crate::status::ProjectStatus::Failed,
            Some(finished),
            reason,
        )
    }

    /// Records `paths` with `status` and `reason`, none of them started.
    fn mark(
        &self,
        paths: &[String],
        status: crate::status::ProjectStatus,
        finished: Option<String>,
        reason: &str,
    ) -> Result<()> {
        let mut ledger = self.ledger.lock().expect("the ledger is never poisoned");
        for path in paths {
            ledger.project_finished(
                &self.run_id,
                &ProjectRecord {
                    path: path.clone(),
                    status,
                    started: None,
                    finished: finished.clone(),
                    exit_code: None,
                    changes: None,
                    reason: Some(reason.to_string()),
                    log: None,
                    fingerprint: None,
                },
            )?;
        }
        Ok(())
    }

    /// A recorded run, with its projects (the one whose lock `begin` took over, say).
    pub fn run(&self, run_id: &str) -> Result<Option<RunRecord>> {
        self.ledger
            .lock()
            .expect("the ledger is never poisoned")
            .run(run_id)
    }

    /// Watches for `mara cancel` until the run is finished: a request interrupts the run as
    /// Ctrl-C would.
    ///
    /// On a ledger whose locks are leases (a server's), it also renews the lease three times
    /// per lease, each confirmed renewal extending how long the run may count on it by its own
    /// clock (`run::drain`: a lease not confirmed in time drains the run, however long a call
    /// hangs). A lease that is gone (taken over, cleared) drains the run at once: no project
    /// starts any more, the running ones finish.
    pub fn watch_cancel(&mut self, interrupt: Interrupt) {
        let (ledger, run_id) = (self.ledger.clone(), self.run_id.clone());
        let (stop, stopped) = mpsc::channel::<()>();
        self.stop = Some(stop);
        let lease = ledger
            .lock()
            .ok()
            .and_then(|l| l.lease())
            .filter(|_| self.locks);
        if let Some(lease) = lease {
            interrupt.lease().confirmed(self.confirmed, lease);
        }
        let mut sent_last = self.confirmed;
        self.watcher = Some(std::thread::spawn(move || {
            let mut cancelled = false;
            let mut lost = false;
            while let Err(mpsc::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(Duration::from_millis(250))
            {
                if !cancelled {
                    let requested = ledger
                        .lock()
                        .map(|l| l.cancel_requested(&run_id).unwrap_or(false))
                        .unwrap_or(false);
                    if requested {
                        interrupt.cancel(Cause::CancelRequest);
                        cancelled = true;
                    }
                }
                // Drained (by the clock, say): nothing is started any more, nothing to renew.
                lost = lost || interrupt.draining().is_some();
                let Some(lease) = lease.filter(|_| !lost) else {
                    continue;
                };
                // A lock cleared or taken over elsewhere is noticed at once, not at the next
                // renewal: no project starts beside another run's.
                if ledger
                    .lock()
                    .is_ok_and(|l| matches!(l.holds_lock(&run_id), Ok(false)))
                {
                    lost = true;
                    interrupt.drain(LOCK_TAKEN.into());
                    continue;
                }
                if sent_last.elapsed() < lease / 3 {
                    continue;
                }
                let sent = Instant::now();
                let outcome = ledger.lock().map(|mut l| l.renew(&run_id));
                match outcome {
                    Ok(Ok(true)) => {
                        sent_last = sent;
                        interrupt.lease().confirmed(sent, lease);
                    }
                    Ok(Ok(false)) => {
                        lost = true;
                        interrupt.drain(LOCK_TAKEN.into());
                    }
                    // Tried again at the next look; the clock drains the run if none succeeds.
                    Ok(Err(error)) => interrupt.lease().trouble(error.to_string()),
                    Err(_) => {}
                }
            }
        }));
    }

    /// The sink that records `plan`'s projects as they start and end; `root` shortens the log
    /// paths it records. Dropping it waits for its last write.
    pub fn sink(&self, plan: &RunPlan, root: &Path) -> LedgerSink {
        let fingerprints: BTreeMap<usize, String> = plan
            .projects
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.fingerprint.clone().map(|f| (i, f)))
            .collect();
        let (ledger, run_id, root) = (self.ledger.clone(), self.run_id.clone(), root.to_path_buf());
        let (logs, lease) = match ledger.lock() {
            Ok(l) => (l.stores_logs(), l.lease()),
            Err(_) => (false, None),
        };
        let (to_writer, events) = mpsc::channel::<Event>();
        let writer = std::thread::spawn(move || {
            // A ledger that cannot be written is said once, not at every line and event.
            let mut failures = 0;
            let mut persist = |op: &mut Op<'_>| {
                // Once a write failed for a whole lease, the server is gone for this run (which
                // drains): the later ones are tried once each.
                let retried = if failures == 0 { lease } else { None };
                if let Err(error) = persist(&ledger, retried, op) {
                    failures += 1;
                    if failures == 1 {
                        tracing::warn!(
                            "{error}: the run's record is incomplete (later failures are not repeated)"
                        );
                    }
                }
            };
            // Log lines go in batches: what came in the last fifth of a second, or 200 lines,
            // and always before a project's start or end is written.
            let mut lines: Vec<(String, String)> = Vec::new();
            let flush = |lines: &mut Vec<(String, String)>,
                         persist: &mut dyn FnMut(&mut Op<'_>)| {
                if !lines.is_empty() {
                    persist(&mut |l| l.append_logs(&run_id, lines));
                    lines.clear();
                }
            };
            loop {
                match events.recv_timeout(Duration::from_millis(200)) {
                    Ok(Event::Line { path, text, .. }) => {
                        lines.push((path, text));
                        if lines.len() >= 200 {
                            flush(&mut lines, &mut persist);
                        }
                    }
                    Ok(event) => {
                        flush(&mut lines, &mut persist);
                        persist(&mut |l| write(l, &run_id, &event, &root, &fingerprints));
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => flush(&mut lines, &mut persist),
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        flush(&mut lines, &mut persist);
                        return;
                    }
                }
            }
        });
        LedgerSink {
            to_writer: Some(to_writer),
            writer: Some(writer),
            logs,
        }
    }

    /// Checks once more that the run still holds its lock (after its projects, before its
    /// verdict): a lock taken between two polls must not end in a success.
    pub fn confirm_lock(&self, interrupt: &Interrupt) {
        if !self.locks {
            return;
        }
        let held = self
            .ledger
            .lock()
            .map(|l| l.holds_lock(&self.run_id))
            .unwrap_or(Ok(true));
        if matches!(held, Ok(false)) && interrupt.draining().is_none() {
            interrupt.drain(LOCK_TAKEN.into());
        }
    }

    /// Closes the record by how the run went (`result`) and whether anything ran (`ran`: a
    /// secret stored, a project run): the history lists what ran or changed something, so a run
    /// refused, not confirmed or interrupted before it did, or that found nothing to do, is
    /// forgotten; one not confirmed after
    /// secrets were stored was stopped by a person, as an interruption. A job of a fanned-out
    /// run that failed before its projects (`paths`) ran records them failed, with why, rather
    /// than leave them waiting for a job that came.
    pub fn close(self, result: &Result<()>, ran: bool, paths: &[String]) -> Result<()> {
        match (result, ran) {
            (Ok(()), true) => self.finish(RunStatus::Succeeded),
            // It found nothing to do (a stack destroyed already).
            (Ok(()), false) => self.forget(),
            (Err(Error::Interrupted | Error::Declined(_)), true) => {
                self.finish(RunStatus::Cancelled)
            }
            (Err(error), false) if self.joined && !matches!(error, Error::Interrupted) => {
                let reason = match error.problems() {
                    [first, ..] => first.to_string(),
                    [] => error.to_string(),
                };
                self.not_run(paths, &reason)
            }
            (Err(_), false) => self.forget(),
            (Err(_), true) => self.finish(RunStatus::Failed),
        }
    }

    /// Records how the run ended and releases the stack's lock.
    fn finish(mut self, status: RunStatus) -> Result<()> {
        self.stop_watching();
        if self.joined {
            return Ok(());
        }
        let finished = clock::rfc3339(SystemTime::now());
        let lease = self.ledger.lock().ok().and_then(|l| l.lease());
        persist(&self.ledger, lease, &mut |l| {
            l.finish(&self.run_id, status, &finished)
        })
    }

    /// Records which projects now have `stack` on `backend`, and which were found without it.
    pub fn stacks_changed(
        &self,
        backend: &str,
        stack: &str,
        exist: &[String],
        gone: &[String],
    ) -> Result<()> {
        self.ledger
            .lock()
            .expect("the ledger is never poisoned")
            .stacks_changed(backend, stack, exist, gone)
    }

    /// Forgets a run that never ran (refused before its projects, or not confirmed) and
    /// releases the stack's lock.
    fn forget(mut self) -> Result<()> {
        self.stop_watching();
        if self.joined {
            return Ok(());
        }
        let lease = self.ledger.lock().ok().and_then(|l| l.lease());
        persist(&self.ledger, lease, &mut |l| l.forget(&self.run_id))
    }

    fn stop_watching(&mut self) {
        self.stop = None;
        if let Some(watcher) = self.watcher.take() {
            let _ = watcher.join();
        }
    }
}

/// Forwards project starts and ends to the recorder's writer thread.
pub struct LedgerSink {
    to_writer: Option<mpsc::Sender<Event>>,
    writer: Option<JoinHandle<()>>,
    /// Whether the ledger keeps log lines: then they go to it too.
    logs: bool,
}

impl Sink for LedgerSink {
    fn handle(&mut self, event: &Event) {
        let kept = match event {
            Event::ProjectStarted { .. } | Event::ProjectFinished { .. } => true,
            Event::Line { .. } => self.logs,
            _ => false,
        };
        if kept && let Some(to_writer) = &self.to_writer {
            let _ = to_writer.send(event.clone());
        }
    }
}

impl Drop for LedgerSink {
    fn drop(&mut self) {
        drop(self.to_writer.take());
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// What the ledger keeps of an event.
/// Runs `op` on the ledger. On a server (whose locks are leases) a failure is tried again every
/// half second for as long as a lease lasts: a server restarting, or a network coming back,
/// costs the record nothing (the lease itself is renewed meanwhile, or the run drains).
fn persist(ledger: &Shared, lease: Option<Duration>, op: &mut Op<'_>) -> Result<()> {
    let deadline = lease.map(|l| std::time::Instant::now() + l);
    loop {
        let result = match ledger.lock() {
            Ok(mut ledger) => op(ledger.as_mut()),
            Err(_) => return Ok(()),
        };
        match (result, deadline) {
            (Err(_), Some(deadline)) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(500));
            }
            (result, _) => return result,
        }
    }
}

fn write(
    ledger: &mut dyn Ledger,
    run_id: &str,
    event: &Event,
    root: &Path,
    fingerprints: &BTreeMap<usize, String>,
) -> Result<()> {
    match event {
        Event::ProjectStarted { index, path } => ledger.project_started(
            run_id,
            path,
            &clock::rfc3339(SystemTime::now()),
            fingerprints.get(index).map(String::as_str),
        ),
        Event::ProjectFinished { report, .. } => ledger.project_finished(
            run_id,
            &ProjectRecord {
                path: report.path.clone(),
                status: report.status,
                started: report.started.clone(),
                finished: report.finished.clone(),
                exit_code: report.exit_code,
                changes: report.changes.clone(),
                reason: report.reason.clone(),
                log: report.log.as_ref().map(|l| {
                    l.strip_prefix(root)
                        .map(PathBuf::from)
                        .unwrap_or_else(|_| l.clone())
                        .display()
                        .to_string()
                }),
                fingerprint: None,
            },
        ),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Operation;
    use crate::run::events::{Finished, Outcome, ProjectReport};
    use crate::run::plan::fixtures;
    use crate::status::ProjectStatus;

    fn start(run_id: &str) -> RunStart {
        RunStart {
            run_id: run_id.into(),
            operation: Operation::Up,
            provider: "aws".into(),
            stack: "dev".into(),
            command: "mara up".into(),
            started: clock::rfc3339(SystemTime::now()),
        }
    }

    #[test]
    fn a_run_is_recorded_project_by_project_and_releases_its_lock() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ledger.db");
        let (recorder, took_over) = Recorder::start(
            crate::ledger::open(&crate::ledger::Place::File(file.clone())).unwrap(),
            &start("r1"),
            true,
            None,
            &|args| format!("mara {args}"),
        )
        .unwrap();
        assert!(took_over.is_none());
        // A second run of the stack is refused while the first holds it: exit 5.
        let Err(refused) = Recorder::start(
            crate::ledger::open(&crate::ledger::Place::File(file.clone())).unwrap(),
            &start("r2"),
            true,
            None,
            &|args| format!("mara {args}"),
        ) else {
            panic!("the lock was not held")
        };
        assert_eq!(refused.exit_code(), crate::error::exit::LOCKED);
        assert!(refused.to_string().contains("run r1"), "{refused}");

        let plan = fixtures::plan(Operation::Up, &["vpc", "eks"]);
        let mut sink = recorder.sink(&plan, Path::new("/w"));
        for (index, project) in plan.projects.iter().enumerate() {
            sink.handle(&Event::ProjectStarted {
                index,
                path: project.path.clone(),
            });
            let finished = Finished {
                outcome: if index == 0 {
                    Outcome::Unchanged
                } else {
                    Outcome::Failed {
                        code: Some(1),
                        reason: "boom".into(),
                    }
                },
                exit_code: Some(index as i32),
                changes: None,
                log: Some(PathBuf::from(format!("/w/.mara/logs/r1/{index}.log"))),
                created_stack: false,
                preview: Default::default(),
            };
            sink.handle(&Event::ProjectFinished {
                index,
                report: Box::new(ProjectReport::new(
                    project.path.clone(),
                    Some(SystemTime::now()),
                    finished,
                )),
            });
        }
        drop(sink);
        recorder.finish(RunStatus::Failed).unwrap();

        let ledger = crate::ledger::open(&crate::ledger::Place::File(file.clone())).unwrap();
        let run = ledger.run("r1").unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Failed);
        let recorded: Vec<(&str, ProjectStatus, Option<&str>)> = run
            .projects
            .iter()
            .map(|p| (p.path.as_str(), p.status, p.log.as_deref()))
            .collect();
        assert_eq!(
            recorded,
            [
                (
                    "infrastructure/aws/vpc",
                    ProjectStatus::Unchanged,
                    Some(".mara/logs/r1/0.log")
                ),
                (
                    "infrastructure/aws/eks",
                    ProjectStatus::Failed,
                    Some(".mara/logs/r1/1.log")
                ),
            ]
        );
        assert_eq!(run.projects[1].reason.as_deref(), Some("boom"));
        assert!(
            run.projects[0].fingerprint.is_some(),
            "the plan's fingerprint is recorded"
        );
        assert!(
            ledger.holder("dev").unwrap().is_none(),
            "the lock is released"
        );
    }

    #[test]
    fn a_cancel_request_interrupts_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ledger.db");
        let (mut recorder, _) = Recorder::start(
            crate::ledger::open(&crate::ledger::Place::File(file.clone())).unwrap(),
            &start("r1"),
            true,
            None,
            &|args| format!("mara {args}"),
        )
        .unwrap();
        let interrupt = Interrupt::default();
        recorder.watch_cancel(interrupt.clone());
        crate::ledger::open(&crate::ledger::Place::File(file.clone()))
            .unwrap()
            .request_cancel("dev")
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !interrupt.is_interrupted() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(interrupt.is_interrupted());
        assert_eq!(interrupt.cause(), Cause::CancelRequest);
        recorder.finish(RunStatus::Cancelled).unwrap();
    }

    #[test]
    fn a_run_is_closed_by_how_it_went_and_whether_anything_ran() {
        let dir = tempfile::tempdir().unwrap();
        let place = crate::ledger::Place::File(dir.path().join("ledger.db"));
        let refused = || Error::config(Problem::new("bad input"));
        let cases: [(&str, Result<()>, bool, Option<RunStatus>); 7] = [
            ("r1", Ok(()), true, Some(RunStatus::Succeeded)),
            ("r0", Ok(()), false, None),
            (
                "r2",
                Err(Error::Interrupted),
                true,
                Some(RunStatus::Cancelled),
            ),
            (
                "r3",
                Err(Error::Declined(Box::new(Problem::new("no")))),
                true,
                Some(RunStatus::Cancelled),
            ),
            ("r4", Err(refused()), true, Some(RunStatus::Failed)),
            // Nothing ran: the history does not list it.
            ("r5", Err(Error::Interrupted), false, None),
            ("r6", Err(refused()), false, None),
        ];
        for (id, result, ran, expected) in cases {
            let ledger = crate::ledger::open(&place).unwrap();
            let (recorder, _) =
                Recorder::start(ledger, &start(id), true, None, &|a| format!("mara {a}")).unwrap();
            recorder.close(&result, ran, &[]).unwrap();
            let ledger = crate::ledger::open(&place).unwrap();
            let status = ledger.run(id).unwrap().map(|r| r.status);
            assert_eq!(status, expected, "{id}");
            assert!(
                ledger.holder("dev").unwrap().is_none(),
                "{id}: the lock is released"
            );
        }
    }

    #[test]
    fn a_job_that_fails_before_its_projects_records_them_failed_with_why() {
        let dir = tempfile::tempdir().unwrap();
        let place = crate::ledger::Place::File(dir.path().join("ledger.db"));
        let mut ledger = crate::ledger::open(&place).unwrap();
        ledger.begin(&start("r1"), true).unwrap();
        let paths = ["infrastructure/aws/vpc".to_string()];
        let joined = |ledger| Recorder {
            ledger: Arc::new(Mutex::new(ledger)),
            run_id: "r1".into(),
            stop: None,
            watcher: None,
            joined: true,
            locks: true,
            confirmed: Instant::now(),
        };
        let refused = Error::config(Problem::new("the kubeconfig cannot be written"));
        joined(ledger).close(&Err(refused), false, &paths).unwrap();
        let ledger = crate::ledger::open(&place).unwrap();
        let run = ledger.run("r1").unwrap().unwrap();
        assert_eq!(
            run.status,
            RunStatus::Running,
            "the run is closed by `ci close`"
        );
        assert_eq!(run.projects[0].status, ProjectStatus::Failed);
        assert_eq!(
            run.projects[0].reason.as_deref(),
            Some("the kubeconfig cannot be written")
        );
        // Interrupted (the run was cancelled): nothing to say of the projects; `ci close` does.
        // Not confirmed (a job run by hand, answered "no"): its project did not run, and the run
        // goes on without it.
        joined(ledger)
            .close(&Err(Error::Interrupted), false, &paths)
            .unwrap();
        let declined = Err(Error::Declined(Box::new(Problem::new("no"))));
        let other = ["infrastructure/aws/eks".to_string()];
        let ledger = crate::ledger::open(&place).unwrap();
        joined(ledger).close(&declined, false, &other).unwrap();
        let ledger = crate::ledger::open(&place).unwrap();
        let run = ledger.run("r1").unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Running);
        let eks = &run.projects[1];
        assert_eq!(
            (eks.status, eks.reason.as_deref()),
            (ProjectStatus::Failed, Some("no"))
        );
        assert!(ledger_holds(&place, "r1"), "the lock stays the run's");
    }

    fn ledger_holds(place: &crate::ledger::Place, run_id: &str) -> bool {
        let ledger = crate::ledger::open(place).unwrap();
        ledger
            .holder("dev")
            .unwrap()
            .is_some_and(|h| h.run_id == run_id)
    }
}
