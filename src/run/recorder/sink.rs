//! The run's events as the ledger keeps them (docs/commands.md, "status, history, logs"): each
//! project's start and end, and on a server its log lines, written in order by a thread of
//! their own, in batches — whatever came while the last batch was written goes in the next, in
//! one transaction — so that neither the ledger nor its server holds up the engines. A project's
//! end is shown only once the ledger has it (`LedgerSink::settle`): a run killed right after
//! shows nothing the ledger lost. A batch the ledger does not take waits, with what comes after
//! it, and is tried again at every tick; what is still waiting when the run ends is tried for as
//! long as a lease, then kept in the workspace's journal (`ledger::journal`), which the next
//! command that reaches the server makes first.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Recorder, Shared};
use crate::clock;
use crate::ledger::ProjectRecord;
use crate::ledger::journal::{Entry, Journal};
use crate::ledger::writes::RunOf;
use crate::run::events::{Event, Sink};
use crate::run::interrupt::Interrupt;
use crate::run::plan::RunPlan;

/// Forwards project starts and ends (and log lines) to the recorder's writer thread.
pub struct LedgerSink {
    to_writer: Option<mpsc::Sender<Vec<Event>>>,
    /// What the burst being handled has for the writer: sent to it together, at `settle`, so
    /// that a burst wakes it once.
    burst: Vec<Event>,
    writer: Option<JoinHandle<()>>,
    /// Whether the ledger keeps log lines: then they go to it too.
    logs: bool,
    /// The projects' ends forwarded so far, and how far the writer is.
    ends: u64,
    progress: Arc<Progress>,
    interrupt: Interrupt,
}

/// The longest a project's end waits to be shown for the ledger to have it: a server that
/// answers this slowly without failing does not freeze what the run shows.
const SHOWN_WITHIN: Duration = Duration::from_secs(5);

/// How far the writer is, which `settle` waits on.
#[derive(Default)]
struct Progress {
    made: Mutex<Made>,
    changed: Condvar,
}

#[derive(Default)]
struct Made {
    /// The projects' ends the ledger has.
    ends: u64,
    /// The ledger does not take the writes now (or the writer ended): nothing is waited for.
    stalled: bool,
}

/// Sets `stalled` when dropped: the writer thread has ended.
struct Ended(Arc<Progress>);

impl Drop for Ended {
    fn drop(&mut self) {
        self.0.update(|made| made.stalled = true);
    }
}

impl Progress {
    fn update(&self, change: impl FnOnce(&mut Made)) {
        if let Ok(mut made) = self.made.lock() {
            change(&mut made);
            self.changed.notify_all();
        }
    }
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
        let progress = Arc::new(Progress::default());
        let mut writer = Writer {
            ledger: self.ledger.clone(),
            run_id: self.run_id.clone(),
            of: self.of.clone(),
            root: root.to_path_buf(),
            fingerprints,
            waiting: VecDeque::new(),
            lines: Vec::new(),
            warned: false,
            interrupted: false,
            progress: progress.clone(),
            busy_since: None,
        };
        let journal = self.journal.clone();
        let journaled = self.journaled.clone();
        let interrupt = self.interrupt.clone();
        let (to_writer, events) = mpsc::channel::<Vec<Event>>();
        let writer = std::thread::spawn(move || {
            // However the writer ends (a panic included), nothing waits on it any more.
            let _ended = Ended(writer.progress.clone());
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
            burst: Vec::new(),
            writer: Some(writer),
            logs,
            ends: 0,
            progress,
            interrupt: self.interrupt.clone(),
        }
    }
}

impl Sink for LedgerSink {
    fn handle(&mut self, event: &Event) {
        let kept = match event {
            // The run's end: what waits is written at once.
            Event::ProjectStarted { .. } | Event::ProjectFinished { .. } => true,
            Event::RunFinished { .. } | Event::Interrupting { .. } => true,
            Event::Line { .. } => self.logs,
            _ => false,
        };
        if kept && self.to_writer.is_some() {
            self.ends += u64::from(matches!(event, Event::ProjectFinished { .. }));
            self.burst.push(event.clone());
        }
    }

    /// Waits until the ledger has every project's end handed to it so far — unless it does not
    /// take writes now, the run is interrupted (what it shows then is shown at once), or
    /// `SHOWN_WITHIN` passed.
    fn settle(&mut self) {
        if let Some(to_writer) = &self.to_writer
            && !self.burst.is_empty()
        {
            let _ = to_writer.send(std::mem::take(&mut self.burst));
        }
        let until = Instant::now() + SHOWN_WITHIN;
        let Ok(mut made) = self.progress.made.lock() else {
            return;
        };
        while made.ends < self.ends && !made.stalled && !self.interrupt.is_interrupted() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            made = match self.progress.changed.wait_timeout(made, left.min(TICK)) {
                Ok((made, _)) => made,
                Err(_) => return,
            };
        }
    }
}

impl Drop for LedgerSink {
    fn drop(&mut self) {
        // What a burst left unsettled still goes (a sink dropped without its `settle`).
        if let Some(to_writer) = self.to_writer.take()
            && !self.burst.is_empty()
        {
            let _ = to_writer.send(std::mem::take(&mut self.burst));
        }
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// The writer thread's state: the writes waiting, in order.
struct Writer {
    ledger: Shared,
    run_id: String,
    /// The run's stack and operation, which its projects' ends record what they deployed by.
    of: RunOf,
    root: PathBuf,
    fingerprints: BTreeMap<usize, String>,
    waiting: VecDeque<Entry>,
    /// Log lines not yet in an entry: they go in batches.
    lines: Vec<(String, String)>,
    /// A ledger that cannot be written is said once, not at every write.
    warned: bool,
    /// The run was interrupted while a write waited: what is left is kept at once.
    interrupted: bool,
    progress: Arc<Progress>,
    /// Since when another thread of the run has held the ledger, as the writer found it.
    busy_since: Option<Instant>,
}

/// The most writes in one transaction, and the most log lines.
const BATCH: usize = 500;
const BATCH_LINES: usize = 2_000;

/// How long the ledger may be another thread's before the writer counts as stalled (and a
/// project's end is shown without waiting for it).
const BUSY_FOR_LONG: Duration = Duration::from_secs(2);

/// How long log lines wait to go in a batch with others.
const TICK: Duration = Duration::from_millis(200);

/// The least time between two transactions of starts and ends: what comes sooner waits for the
/// next (an end is shown this much later at most), so that a thousand quick projects are a few
/// dozen transactions, not thousands (docs/decisions.md, "Per task no dearer than make").
const GATHER: Duration = Duration::from_millis(40);

/// How long the run's events may pause before what waits is written without waiting for
/// `GATHER`: a start or end after a quiet moment — a run's last end, a slow project's — is not
/// held back.
const QUIET: Duration = Duration::from_millis(8);

impl Writer {
    /// Takes the run's events until the run ends, writing what came together in one batch:
    /// starts and ends `GATHER` after the last batch, or once the events pause for `QUIET` (the
    /// run's end or an interruption at once), log lines a tick, or 200 of them, or a project's
    /// start or end (they go before it).
    fn follow(&mut self, events: &mpsc::Receiver<Vec<Event>>) {
        let mut tick = Instant::now() + TICK;
        // When the last batch was sent and the last event heard; whether what waits goes at
        // once; when a batch the ledger did not take is tried again.
        let (mut sent, mut heard): (Option<Instant>, Instant) = (None, Instant::now());
        let (mut at_once, mut retry) = (false, None::<Instant>);
        loop {
            let due = |at_once: bool, heard: Instant, waiting: bool| {
                waiting.then(|| match (at_once, retry) {
                    (true, _) => Instant::now(),
                    (false, Some(retry)) => retry,
                    (false, None) => {
                        let gathered = sent.map_or_else(Instant::now, |sent| sent + GATHER);
                        gathered.min(heard + QUIET)
                    }
                })
            };
            let until = due(at_once, heard, !self.waiting.is_empty()).map_or(tick, |d| d.min(tick));
            match events.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(burst) => {
                    for event in burst.into_iter().chain(events.try_iter().flatten()) {
                        at_once |= self.take(event);
                    }
                    heard = Instant::now();
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.batch();
                    return;
                }
            }
            if Instant::now() >= tick {
                self.batch();
                tick = Instant::now() + TICK;
                at_once = true;
            }
            match due(at_once, heard, !self.waiting.is_empty()) {
                None => at_once = false,
                Some(due) if Instant::now() < due => {}
                Some(_) => {
                    // Never long away from the run's events: a ledger another thread is waiting
                    // on is tried at the next tick.
                    sent = Some(Instant::now());
                    self.send(Instant::now() + TICK);
                    at_once = false;
                    retry = (!self.waiting.is_empty()).then_some(tick);
                }
            }
        }
    }

    /// Takes `event`; whether what waits is to be written at once (the run ended or is
    /// interrupted).
    fn take(&mut self, event: Event) -> bool {
        match event {
            Event::Line { path, text, .. } => {
                self.lines.push((path, text));
                if self.lines.len() >= 200 {
                    self.batch();
                }
                false
            }
            Event::RunFinished { .. } | Event::Interrupting { .. } => {
                self.batch();
                true
            }
            event => {
                self.batch();
                if let Some(entry) = self.entry_of(&event) {
                    self.waiting.push_back(entry);
                }
                false
            }
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

    /// Makes the waiting writes in order, a batch per transaction, until one is not taken (or
    /// the ledger is not free by `deadline`).
    fn send(&mut self, deadline: Instant) {
        while !self.waiting.is_empty() && !self.interrupted {
            let batch = self.batch_size();
            let made = match super::lock_until(&self.ledger, deadline) {
                Some(mut ledger) => {
                    self.busy_since = None;
                    ledger.write(&self.waiting.make_contiguous()[..batch])
                }
                // Another thread of the run has the ledger (the watcher, renewing): that is no
                // failure, unless it has had it for long.
                None => {
                    let since = *self.busy_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= BUSY_FOR_LONG {
                        self.progress.update(|made| made.stalled = true);
                    }
                    return;
                }
            };
            match made {
                Ok(()) => {
                    let ends = self.waiting.drain(..batch).filter(Entry::is_an_end).count();
                    self.progress.update(|made| {
                        made.ends += ends as u64;
                        made.stalled = false;
                    });
                }
                Err(crate::error::Error::Interrupted) => {
                    self.interrupted = true;
                    self.progress.update(|made| made.stalled = true);
                }
                Err(error) => {
                    if !self.warned {
                        self.warned = true;
                        tracing::warn!(
                            "{error}: the run's writes wait until the ledger takes them"
                        );
                    }
                    return self.progress.update(|made| made.stalled = true);
                }
            }
        }
    }

    /// How many of the waiting writes go in the next transaction: at most `BATCH` writes and
    /// `BATCH_LINES` log lines (at least one write), so that a backlog is sent in transactions
    /// each as quick as a statement's time limit allows.
    fn batch_size(&self) -> usize {
        let mut lines = 0;
        let fits = self.waiting.iter().take(BATCH).position(|entry| {
            lines += 1 + match entry {
                Entry::Logs { lines, .. } => lines.len(),
                _ => 0,
            };
            lines > BATCH_LINES
        });
        fits.unwrap_or(self.waiting.len().min(BATCH)).max(1)
    }

    /// The write an event makes, if any.
    fn entry_of(&self, event: &Event) -> Option<Entry> {
        let run_id = self.run_id.clone();
        match event {
            Event::ProjectStarted { index, path, at } => Some(Entry::ProjectStarted {
                run_id,
                path: path.clone(),
                started: clock::rfc3339(*at),
                fingerprint: self.fingerprints.get(index).cloned(),
            }),
            Event::ProjectFinished { index, report } => Some(Entry::ProjectFinished {
                run_id,
                of: Some(self.of.clone()),
                outputs: report.outputs.clone(),
                // Every preview's, in place of what an earlier job of the project recorded.
                preview: matches!(
                    self.of.operation,
                    crate::engine::Operation::Preview | crate::engine::Operation::Drift
                )
                .then(|| report.previewed()),
                project: ProjectRecord {
                    path: report.path.clone(),
                    status: report.status,
                    started: report.started.clone(),
                    finished: report.finished.clone(),
                    exit_code: report.exit_code,
                    changes: report.changes.clone(),
                    // An applied approved plan says how it went.
                    reason: (report.reason.clone())
                        .or_else(|| report.approval.map(|held| held.as_str().to_string())),
                    log: report.log.as_ref().map(|l| {
                        l.strip_prefix(&self.root)
                            .map(PathBuf::from)
                            .unwrap_or_else(|_| l.clone())
                            .display()
                            .to_string()
                    }),
                    fingerprint: self.fingerprints.get(index).cloned(),
                },
            }),
            _ => None,
        }
    }
}
