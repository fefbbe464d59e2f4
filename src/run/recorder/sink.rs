//! The run's events as the ledger keeps them (docs/commands.md, "A server that comes back"):
//! each project's start and end, and on a server its log lines, written in order on a thread of
//! their own so that a commit never holds up the engines. A write the ledger does not take waits
//! in order behind the ones before it, tried again at every tick; what is still waiting when the
//! run ends is tried for as long as a lease, then kept in the workspace's journal
//! (`ledger::journal`), which the next command that reaches the server makes first.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use super::{Recorder, Shared};
use crate::clock;
use crate::ledger::ProjectRecord;
use crate::ledger::journal::{Entry, Journal};
use crate::run::events::{Event, Sink};
use crate::run::plan::RunPlan;

/// Forwards project starts and ends (and log lines) to the recorder's writer thread.
pub struct LedgerSink {
    to_writer: Option<mpsc::Sender<Event>>,
    writer: Option<JoinHandle<()>>,
    /// Whether the ledger keeps log lines: then they go to it too.
    logs: bool,
}

impl Recorder {
    /// The sink that records `plan`'s projects as they start and end; `root` shortens the log
    /// paths it records. Dropping it waits for its last write (or for it to be kept in the
    /// journal).
    pub fn sink(&self, plan: &RunPlan, root: &Path) -> LedgerSink {
        let fingerprints: BTreeMap<usize, String> = plan
            .projects
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.fingerprint.clone().map(|f| (i, f)))
            .collect();
        let (logs, lease) = match self.ledger.lock() {
            Ok(l) => (l.stores_logs(), l.lease()),
            Err(_) => (false, None),
        };
        let mut writer = Writer {
            ledger: self.ledger.clone(),
            run_id: self.run_id.clone(),
            root: root.to_path_buf(),
            fingerprints,
            waiting: VecDeque::new(),
            lines: Vec::new(),
            warned: false,
            interrupted: false,
        };
        let journal = self.journal.clone();
        let journaled = self.journaled.clone();
        let interrupt = self.interrupt.clone();
        let (to_writer, events) = mpsc::channel::<Event>();
        let writer = std::thread::spawn(move || {
            writer.follow(&events);
            // An interrupted run tries what is left once, and keeps what the server does not
            // take: it does not wait a lease for it.
            let lease = lease.filter(|_| !interrupt.is_interrupted());
            if writer.end(lease, journal.as_ref()) {
                journaled.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        });
        LedgerSink {
            to_writer: Some(to_writer),
            writer: Some(writer),
            logs,
        }
    }
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

/// The writer thread's state: the writes waiting, in order.
struct Writer {
    ledger: Shared,
    run_id: String,
    root: PathBuf,
    fingerprints: BTreeMap<usize, String>,
    waiting: VecDeque<Entry>,
    /// Log lines not yet in an entry: they go in batches.
    lines: Vec<(String, String)>,
    /// A ledger that cannot be written is said once, not at every write.
    warned: bool,
    /// The run was interrupted while a write waited: what is left is kept at once.
    interrupted: bool,
}

impl Writer {
    /// Takes the run's events until the run ends. Log lines go in batches — what came in the
    /// last fifth of a second, or 200 lines, and always before a project's start or end.
    fn follow(&mut self, events: &mpsc::Receiver<Event>) {
        loop {
            match events.recv_timeout(Duration::from_millis(200)) {
                Ok(Event::Line { path, text, .. }) => {
                    self.lines.push((path, text));
                    if self.lines.len() >= 200 {
                        self.batch();
                    }
                }
                Ok(event) => {
                    self.batch();
                    if let Some(entry) = self.entry_of(&event) {
                        self.waiting.push_back(entry);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => self.batch(),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.batch();
                    return;
                }
            }
            // Never long away from the run's events: a ledger another thread is waiting on is
            // tried at the next tick.
            self.send(Instant::now() + Duration::from_millis(200));
        }
    }

    /// The run ended: what still waits is tried for as long as a lease (a server restarting
    /// costs the record nothing), then kept in the journal. Whether it kept any there.
    fn end(&mut self, lease: Option<Duration>, journal: Option<&Journal>) -> bool {
        let deadline = Instant::now() + lease.unwrap_or_default();
        self.send(deadline);
        while !self.waiting.is_empty() && !self.interrupted && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
            self.send(deadline);
        }
        if self.waiting.is_empty() {
            return false;
        }
        let left: Vec<Entry> = self.waiting.drain(..).collect();
        match journal.map(|j| (j, j.keep(&left))) {
            Some((journal, Ok(()))) => {
                tracing::warn!(
                    "the ledger could not take {} of the run's writes: kept in {}, made by the next command that reaches it",
                    left.len(),
                    journal.file().display()
                );
                return true;
            }
            Some((_, Err(error))) => tracing::warn!(
                "the ledger could not take {} of the run's writes, nor could they be kept: {error}",
                left.len()
            ),
            None => tracing::warn!(
                "the ledger could not take {} of the run's writes: the run's record is incomplete",
                left.len()
            ),
        }
        false
    }

    fn batch(&mut self) {
        if !self.lines.is_empty() {
            let lines = std::mem::take(&mut self.lines);
            self.waiting.push_back(Entry::Logs {
                run_id: self.run_id.clone(),
                lines,
            });
        }
    }

    /// Makes the waiting writes in order, until one is not taken (or the ledger is not free by
    /// `deadline`).
    fn send(&mut self, deadline: Instant) {
        while let Some(entry) = self.waiting.front() {
            if self.interrupted {
                return;
            }
            let made = match super::lock_until(&self.ledger, deadline) {
                Some(mut ledger) => entry.apply(ledger.as_mut()),
                None => return,
            };
            match made {
                Ok(()) => {
                    self.waiting.pop_front();
                }
                Err(crate::error::Error::Interrupted) => self.interrupted = true,
                Err(error) => {
                    if !self.warned {
                        self.warned = true;
                        tracing::warn!(
                            "{error}: the run's writes wait until the ledger takes them"
                        );
                    }
                    return;
                }
            }
        }
    }

    /// The write an event makes, if any.
    fn entry_of(&self, event: &Event) -> Option<Entry> {
        let run_id = self.run_id.clone();
        match event {
            Event::ProjectStarted { index, path } => Some(Entry::ProjectStarted {
                run_id,
                path: path.clone(),
                started: clock::rfc3339(SystemTime::now()),
                fingerprint: self.fingerprints.get(index).cloned(),
            }),
            Event::ProjectFinished { report, .. } => Some(Entry::ProjectFinished {
                run_id,
                project: ProjectRecord {
                    path: report.path.clone(),
                    status: report.status,
                    started: report.started.clone(),
                    finished: report.finished.clone(),
                    exit_code: report.exit_code,
                    changes: report.changes.clone(),
                    reason: report.reason.clone(),
                    log: report.log.as_ref().map(|l| {
                        l.strip_prefix(&self.root)
                            .map(PathBuf::from)
                            .unwrap_or_else(|_| l.clone())
                            .display()
                            .to_string()
                    }),
                    fingerprint: None,
                },
            }),
            _ => None,
        }
    }
}
