//! Interrupting a run (docs/commands.md, "Interruption"): one shared state that the signal
//! handler and `mara cancel` escalate, that the scheduler and the preparation stop on, and that
//! every process mara starts for the run registers with — the first escalation sends SIGINT to
//! the run's processes (Pulumi then cancels cleanly and releases its lock), the second SIGKILL. A
//! process registered after an escalation gets its signal at once.
//!
//! With a watchdog (`run::watchdog`, the run's), every process starts into the watchdog's process
//! group, and a signal goes to that group; without one (it could not start, or a test), each
//! process leads a group of its own and each group is signalled.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::drain::Drain;
use super::watchdog::Watchdog;

/// Who asked for the interruption.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Ctrl-C or SIGTERM.
    Signal,
    /// `mara cancel`, through the ledger.
    CancelRequest,
}

/// How far an interruption has gone: nothing, SIGINT sent, SIGKILL sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum InterruptLevel {
    #[default]
    None,
    Graceful,
    Kill,
}

/// The run's interruption state, shared by the signal handler, the scheduler and every process.
#[derive(Clone)]
pub struct Interrupt {
    level: watch::Sender<(InterruptLevel, Cause)>,
    /// The processes started and not ended (or left behind by a task that panicked), by pid:
    /// the process group each was started into — the run's, or its own.
    running: Arc<Mutex<BTreeMap<i32, i32>>>,
    watchdog: Option<Arc<Watchdog>>,
    /// Whether no project may start any more, while the running ones finish (a lost lease).
    drain: Drain,
}

impl Default for Interrupt {
    /// Without a watchdog: each process in a group of its own.
    fn default() -> Self {
        Interrupt {
            level: watch::Sender::new((InterruptLevel::None, Cause::Signal)),
            running: Arc::default(),
            watchdog: None,
            drain: Drain::default(),
        }
    }
}

impl Interrupt {
    /// An interruption with a watchdog whose grace period is `grace`: the run's processes share
    /// its group.
    pub fn watched(grace: std::time::Duration) -> Interrupt {
        Interrupt {
            watchdog: Some(Arc::new(Watchdog::new(grace))),
            ..Interrupt::default()
        }
    }

    /// A request to stop that is never more than graceful (`mara cancel`, a closed terminal):
    /// SIGINT to every running process group, unless an interruption is already under way. Only
    /// a second Ctrl-C kills.
    pub fn cancel(&self, cause: Cause) {
        let started = self.level.send_if_modified(|state| {
            let idle = state.0 == InterruptLevel::None;
            if idle {
                *state = (InterruptLevel::Graceful, cause);
            }
            idle
        });
        if started {
            self.signal_groups(InterruptLevel::Graceful);
        }
    }

    /// The next step: SIGINT to every running process group, then SIGKILL.
    pub fn escalate(&self, cause: Cause) -> InterruptLevel {
        let mut next = InterruptLevel::Graceful;
        self.level.send_modify(|state| {
            next = match state.0 {
                InterruptLevel::None => InterruptLevel::Graceful,
                _ => InterruptLevel::Kill,
            };
            *state = (next, cause);
        });
        self.signal_groups(next);
        next
    }

    /// Signals every group a running process was started into, once each, and tells the
    /// watchdog, so that if mara dies now it does not send the same SIGINT again.
    fn signal_groups(&self, level: InterruptLevel) {
        let groups: BTreeSet<i32> = self
            .running
            .lock()
            .expect("the process set is never poisoned")
            .values()
            .copied()
            .collect();
        if let Some(watchdog) = &self.watchdog {
            watchdog.signalled(level == InterruptLevel::Kill);
        }
        for group in groups {
            send_group(group, signal_of(level));
        }
    }

    /// The group the next process of the run starts into: the watchdog's, started now if it is
    /// not yet running; `None` (a group of its own) without one.
    pub fn run_group(&self) -> Option<i32> {
        self.watchdog.as_ref().and_then(|w| w.group())
    }

    pub fn level(&self) -> InterruptLevel {
        self.level.borrow().0
    }

    /// What asked for the interruption (the last escalation's cause).
    pub fn cause(&self) -> Cause {
        self.level.borrow().1
    }

    /// A receiver that sees every escalation.
    pub fn subscribe(&self) -> watch::Receiver<(InterruptLevel, Cause)> {
        self.level.subscribe()
    }

    /// No project may start any more, for `reason`; the running ones finish (docs/commands.md,
    /// "A team's ledger": a run that lost its stack's lease).
    pub fn drain(&self, reason: String) {
        self.drain.stop(reason);
    }

    /// Why the run is draining, if it is (a lease that ran out by the clock included).
    pub fn draining(&self) -> Option<String> {
        self.drain.reason()
    }

    /// The run's drain: its lease's validity, and what ran through it (`run::drain`).
    pub fn lease(&self) -> &Drain {
        &self.drain
    }

    pub fn is_interrupted(&self) -> bool {
        self.level() > InterruptLevel::None
    }

    /// `Err(Interrupted)` once an interruption was requested: where a run's step asks whether
    /// to go on.
    pub fn checkpoint(&self) -> crate::error::Result<()> {
        match self.is_interrupted() {
            true => Err(crate::error::Error::Interrupted),
            false => Ok(()),
        }
    }

    /// Resolves once an interruption has been requested.
    pub async fn requested(&self) {
        let mut receiver = self.level.subscribe();
        let _ = receiver
            .wait_for(|(level, _)| *level > InterruptLevel::None)
            .await;
    }

    /// Process `pid` started, into process group `group` (the run's, or its own: `pid`).
    pub(super) fn register(&self, pid: i32, group: i32) {
        self.running
            .lock()
            .expect("the process set is never poisoned")
            .insert(pid, group);
        if let Some(watchdog) = &self.watchdog {
            watchdog.tell(true);
        }
        // A process started after the interruption gets it at once, alone: the others of the
        // run's group have had theirs (a second SIGINT would be a second Ctrl-C to them).
        if self.is_interrupted() {
            self.kill(pid, signal_of(self.level()));
        }
    }

    /// Sends `signal` to process `pid` and what it started: its group when it leads one, else
    /// the process alone (its group is the run's).
    pub(super) fn kill(&self, pid: i32, signal: i32) {
        let group = self
            .running
            .lock()
            .expect("the process set is never poisoned")
            .get(&pid)
            .copied();
        match group {
            Some(group) if group != pid => {
                // SAFETY: kill only sends a signal; a process that has exited yields ESRCH.
                unsafe {
                    libc::kill(pid, signal);
                }
            }
            _ => send_group(pid, signal),
        }
    }

    /// Process `pid` ended.
    pub(super) fn unregister(&self, pid: i32) {
        self.running
            .lock()
            .expect("the process set is never poisoned")
            .remove(&pid);
        if let Some(watchdog) = &self.watchdog {
            watchdog.tell(false);
        }
    }

    /// Process `pid` is left behind unfinished (the task that ran it panicked): it is killed,
    /// and stays listed here and with the watchdog, so that what it started in its group is
    /// signalled by a later interruption and stopped when mara exits (SIGINT, then SIGKILL
    /// after the grace period).
    pub(super) fn abandon(&self, pid: i32) {
        self.kill(pid, libc::SIGKILL);
    }
}

/// Tells the preparations under way that the run no longer needs them (a failure stopped it):
/// each asks its process to stop as Ctrl-C would (SIGINT), and waits for it to end.
#[derive(Clone)]
pub struct Stop(watch::Receiver<bool>);

impl Stop {
    /// A stop and the sender that gives it.
    pub fn new() -> (watch::Sender<bool>, Stop) {
        let (sender, receiver) = watch::channel(false);
        (sender, Stop(receiver))
    }

    pub fn is_stopped(&self) -> bool {
        *self.0.borrow()
    }

    /// Returns once stopped (at once if already).
    pub async fn stopped(&mut self) {
        let _ = self.0.wait_for(|stopped| *stopped).await;
    }
}

fn signal_of(level: InterruptLevel) -> i32 {
    match level {
        InterruptLevel::Kill => libc::SIGKILL,
        _ => libc::SIGINT,
    }
}

fn send_group(group: i32, signal: i32) {
    // Never 0 or 1, which killpg would widen to mara's own group or everything.
    if group > 1 {
        // SAFETY: killpg only sends a signal; a group that has ended yields ESRCH.
        unsafe {
            libc::killpg(group, signal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_is_never_more_than_graceful_and_a_second_signal_kills() {
        let interrupt = Interrupt::default();
        interrupt.cancel(Cause::CancelRequest);
        interrupt.cancel(Cause::CancelRequest);
        assert_eq!(interrupt.level(), InterruptLevel::Graceful);
        assert_eq!(interrupt.cause(), Cause::CancelRequest);
        assert_eq!(interrupt.escalate(Cause::Signal), InterruptLevel::Kill);
        assert_eq!(interrupt.cause(), Cause::Signal);
    }
}
