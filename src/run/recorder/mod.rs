//! Recording a run in the ledger (docs/commands.md, "status, history, logs"): the run's record and
//! the stack's lock taken before anything runs, each project as it starts and ends (a sink of the
//! run's events, written on a thread of its own so that a commit never holds up the engines),
//! `mara cancel` watched for, and the run's final status — which releases the lock.
//!
//! A ledger that cannot be written during the run loses the record, not the run: those failures
//! are logged as warnings.

mod sink;
mod watch;

use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use super::drain::Moment;
use super::interrupt::Interrupt;
use crate::clock;
use crate::error::{Error, Problem, Result};
use crate::ledger::journal::{Entry, Journal};
use crate::ledger::writes::RunOf;
use crate::ledger::{Begun, Holder, Ledger, ProjectRecord, RunRecord, RunStart};
use crate::status::RunStatus;

pub use sink::LedgerSink;

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
    /// The run's stack and operation, as its projects' ends are recorded with them.
    of: RunOf,
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
    confirmed: Moment,
    /// Where the writes a server does not take are kept until it does (`ledger::journal`).
    journal: Option<Journal>,
    /// Whether this run kept a write there: its later writes follow it, in order.
    journaled: Arc<std::sync::atomic::AtomicBool>,
    /// The ledger's lease (a server's), how long a write is tried.
    lease: Option<Duration>,
    /// The run's interruption (`watch_cancel` gets it): once the run is interrupted, a write the
    /// ledger does not take is kept at once, not tried for a lease.
    interrupt: Interrupt,
    /// What the workspace's policies said of the run, as JSON: recorded with its end.
    policy: Option<String>,
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
        let sent = Moment::now();
        let lease_of = ledger.lease();
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
                    of: RunOf {
                        stack: start.stack.clone(),
                        operation: start.operation,
                    },
                    stop: None,
                    watcher: None,
                    joined: false,
                    locks,
                    confirmed: sent,
                    journal: None,
                    journaled: Arc::default(),
                    lease: lease_of,
                    interrupt: Interrupt::default(),
                    policy: None,
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
        paths: &[String],
    ) -> Result<Recorder> {
        ledger.join(run_id, stack, operation)?;
        let ledger_lease = ledger.lease();
        let confirmed = Moment::now();
        if operation.mutates() {
            // Renewed at once: the job may start long after the last one renewed it.
            ledger.renew(run_id)?;
            // Its projects are this job's while it runs: a second job of one of them (a retry
            // while the first still runs) is refused, not run beside it.
            if let Some(path) = ledger.claim(run_id, paths)? {
                return Err(Error::Locked(Box::new(
                    Problem::new(format!(
                        "{path} is being run by another job of run {run_id}"
                    ))
                    .hint("wait for that job to end; if it is gone, this job can run once its lease runs out"),
                )));
            }
        }
        Ok(Recorder {
            ledger: Arc::new(Mutex::new(ledger)),
            run_id: run_id.to_string(),
            of: RunOf {
                stack: stack.to_string(),
                operation,
            },
            stop: None,
            watcher: None,
            joined: true,
            locks: operation.mutates(),
            confirmed,
            journal: None,
            journaled: Arc::default(),
            lease: ledger_lease,
            interrupt: Interrupt::default(),
            policy: None,
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

    /// Records what the run carries to its jobs (`mara ci open`).
    pub fn carry(&self, inputs: &crate::ledger::RunInputs) -> Result<()> {
        let mut ledger = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
        ledger.set_run_inputs(&self.run_id, inputs)
    }

    /// A joined run's projects that could not run (the job failed before them), recorded failed
    /// with `reason`.
    fn not_run(&mut self, paths: &[String], reason: &str) -> Result<()> {
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
        let entries: Vec<Entry> = (paths.iter())
            .map(|path| Entry::ProjectFinished {
                outputs: None,
                preview: None,
                run_id: self.run_id.clone(),
                project: ProjectRecord {
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
                of: Some(self.of.clone()),
            })
            .collect();
        let mut ledger = self.ledger.lock().expect("the ledger is never poisoned");
        ledger.write(&entries)
    }

    /// A recorded run, with its projects (the one whose lock `begin` took over, say).
    pub fn run(&self, run_id: &str) -> Result<Option<RunRecord>> {
        self.ledger
            .lock()
            .expect("the ledger is never poisoned")
            .run(run_id)
    }

    /// Checks once more that the run still holds its lock (after its projects, before its
    /// verdict): a lock taken between two polls must not end in a success.
    pub fn confirm_lock(&self, interrupt: &Interrupt) {
        if !self.locks {
            return;
        }
        // Not waited on past a moment: a server that does not answer drains the run by its
        // clock anyway.
        let held = lock_until(&self.ledger, Instant::now() + Duration::from_secs(2))
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
    ///
    /// `verdict` is the run's status and end as its summary said them, once it had one
    /// (`commands::run`'s verdict): the record says the same.
    ///
    /// The run's ledger is handed back once the record is closed (when no thread of the run
    /// still has it), for what the command does after on the same connection: the retention.
    pub fn close(
        mut self,
        result: &Result<()>,
        went: (bool, Option<(RunStatus, SystemTime)>),
        paths: &[String],
    ) -> Result<Option<Box<dyn Ledger>>> {
        self.closed(result, went, paths)?;
        let ledger = Arc::try_unwrap(self.ledger).ok();
        Ok(ledger.and_then(|l| l.into_inner().ok()))
    }

    /// `close`'s record.
    fn closed(
        &mut self,
        result: &Result<()>,
        (ran, verdict): (bool, Option<(RunStatus, SystemTime)>),
        paths: &[String],
    ) -> Result<()> {
        // A job's projects are released whatever it did: a retry may run them at once.
        if self.joined
            && let Ok(mut ledger) = self.ledger.lock()
        {
            let _ = ledger.release(&self.run_id);
        }
        let ended = |status| verdict.unwrap_or((status, SystemTime::now()));
        match (result, ran) {
            // A drift check that found drift ran as it should: what it found is its projects'.
            (Ok(()) | Err(Error::Drifted { .. }), true) => self.finish(ended(RunStatus::Succeeded)),
            // It found nothing to do (a stack destroyed already).
            (Ok(()), false) => self.forget(),
            (Err(Error::Interrupted | Error::Declined(_)), true) => {
                self.finish(ended(RunStatus::Cancelled))
            }
            (Err(error), false) if self.joined && !matches!(error, Error::Interrupted) => {
                let reason = match error.problems() {
                    [first, ..] => first.to_string(),
                    [] => error.to_string(),
                };
                self.not_run(paths, &reason)
            }
            (Err(_), false) => self.forget(),
            (Err(_), true) => self.finish(ended(RunStatus::Failed)),
        }
    }

    /// Keeps the writes the ledger does not take in `journal`, made by the next command that
    /// reaches the ledger (a server's: `ledger::journal`).
    pub fn keep_unsent_in(&mut self, journal: Option<Journal>) {
        self.journal = journal;
    }

    /// Records how the run ended and releases the stack's lock.
    fn finish(&mut self, (status, at): (RunStatus, SystemTime)) -> Result<()> {
        self.stop_watching();
        if self.joined {
            return Ok(());
        }
        let entry = Entry::Finish {
            run_id: self.run_id.clone(),
            status,
            finished: clock::rfc3339(at),
            policy: self.policy.take(),
        };
        self.write(entry)
    }

    /// What the workspace's policies said of the run, recorded with its end (nothing when they
    /// said nothing).
    pub fn judged(&mut self, decision: &crate::policy::Decision) {
        if !decision.is_empty() {
            self.policy = serde_json::to_string(decision).ok();
        }
    }

    /// Records which projects now have `stack` on `backend`, and which were found without it.
    pub fn stacks_changed(
        &self,
        backend: &str,
        stack: &str,
        exist: &[String],
        gone: &[String],
    ) -> Result<()> {
        self.write(Entry::StacksChanged {
            backend: backend.to_string(),
            stack: stack.to_string(),
            exist: exist.to_vec(),
            gone: gone.to_vec(),
        })
    }

    /// Makes `entry` (tried for as long as a lease, `persist`), or keeps it in the journal: at
    /// once when the journal holds writes of the run already (they go first, and the server
    /// did not take them), else when the ledger does not take it.
    fn write(&self, entry: Entry) -> Result<()> {
        let journal = self.journal.as_ref();
        let after_kept = self.journaled.load(std::sync::atomic::Ordering::SeqCst);
        if let Some(journal) = journal.filter(|_| after_kept) {
            return journal.keep(&[entry]);
        }
        let lease = self.lease.filter(|_| !self.interrupt.is_interrupted());
        match (
            persist(&self.ledger, lease, &mut |l| entry.apply(l)),
            journal,
        ) {
            (Err(error), Some(journal)) => {
                journal.keep(&[entry])?;
                self.journaled
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                tracing::warn!(
                    "{error}: kept in {}, made by the next command that reaches the ledger",
                    journal.file().display()
                );
                Ok(())
            }
            (result, _) => result,
        }
    }

    /// Forgets a run that never ran (refused before its projects, or not confirmed) and
    /// releases the stack's lock.
    fn forget(&mut self) -> Result<()> {
        self.stop_watching();
        if self.joined {
            return Ok(());
        }
        let lease = self.lease.filter(|_| !self.interrupt.is_interrupted());
        persist(&self.ledger, lease, &mut |l| l.forget(&self.run_id))
    }

    fn stop_watching(&mut self) {
        self.stop = None;
        if let Some(watcher) = self.watcher.take() {
            let _ = watcher.join();
        }
    }
}

/// Runs `op` on the ledger. On a server (whose locks are leases) a failure is tried again every
/// half second for as long as a lease lasts: a server restarting, or a network coming back,
/// costs the record nothing (the lease itself is renewed meanwhile, or the run drains). An
/// interruption while a call waits ends the tries at once.
fn persist(ledger: &Shared, lease: Option<Duration>, op: &mut Op<'_>) -> Result<()> {
    let deadline = Instant::now() + lease.unwrap_or_default();
    loop {
        let result = match lock_until(ledger, deadline) {
            Some(mut ledger) => op(ledger.as_mut()),
            None => Err(Error::Ledger {
                path: std::path::PathBuf::from("the run ledger"),
                message: "it is busy with a server that does not answer".into(),
            }),
        };
        match result {
            Err(Error::Interrupted) => return Err(Error::Interrupted),
            Err(_) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(500));
            }
            result => return result,
        }
    }
}

/// The ledger, once no other thread of the run uses it, or `None` at `deadline`: a thread
/// waiting on a server that does not answer holds it, each of its calls bounded.
fn lock_until(
    ledger: &Shared,
    deadline: Instant,
) -> Option<std::sync::MutexGuard<'_, Box<dyn Ledger>>> {
    loop {
        match ledger.try_lock() {
            Ok(guard) => return Some(guard),
            Err(std::sync::TryLockError::Poisoned(_)) => return None,
            Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(std::sync::TryLockError::WouldBlock) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::engine::Operation;
    use crate::run::events::{Event, Finished, Outcome, ProjectReport, Sink};
    use crate::run::interrupt::Cause;
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
            projects: Vec::new(),
            graph: Vec::new(),
        }
    }

    #[test]
    fn a_run_is_recorded_project_by_project_and_releases_its_lock() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ledger.db");
        let (mut recorder, took_over) = Recorder::start(
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
        // The times the run's clock gave its events, not the sink's.
        let started_at = std::time::UNIX_EPOCH + Duration::from_secs(1_795_280_936);
        for (index, project) in plan.projects.iter().enumerate() {
            sink.handle(&Event::ProjectStarted {
                index,
                path: project.path.clone(),
                at: started_at,
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
                attempts: 0,
                preview: Default::default(),
                outputs: None,
            };
            sink.handle(&Event::ProjectFinished {
                index,
                report: Box::new(ProjectReport::new(
                    project.path.clone(),
                    Some((started_at, started_at)),
                    finished,
                )),
            });
        }
        drop(sink);
        recorder
            .finish((RunStatus::Failed, SystemTime::now()))
            .unwrap();

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
        let said = clock::rfc3339(started_at);
        assert_eq!(run.projects[0].started.as_deref(), Some(said.as_str()));
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
            .request_cancel("dev", &crate::ledger::access::Actor::command_line())
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !interrupt.is_interrupted() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(interrupt.is_interrupted());
        assert_eq!(interrupt.cause(), Cause::CancelRequest);
        recorder
            .finish((RunStatus::Cancelled, SystemTime::now()))
            .unwrap();
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
            recorder.close(&result, (ran, None), &[]).unwrap();
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
            of: RunOf {
                stack: "dev".into(),
                operation: Operation::Up,
            },
            stop: None,
            watcher: None,
            joined: true,
            locks: true,
            confirmed: Moment::now(),
            journal: None,
            journaled: Arc::default(),
            lease: None,
            interrupt: Interrupt::default(),
            policy: None,
        };
        let refused = Error::config(Problem::new("the kubeconfig cannot be written"));
        joined(ledger)
            .close(&Err(refused), (false, None), &paths)
            .unwrap();
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
            .close(&Err(Error::Interrupted), (false, None), &paths)
            .unwrap();
        let declined = Err(Error::Declined(Box::new(Problem::new("no"))));
        let other = ["infrastructure/aws/eks".to_string()];
        let ledger = crate::ledger::open(&place).unwrap();
        joined(ledger)
            .close(&declined, (false, None), &other)
            .unwrap();
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
