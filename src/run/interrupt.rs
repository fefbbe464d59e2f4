//! Interrupting a run (docs/commands.md, "Interruption"): one shared state that the signal
//! handler and `mara cancel` escalate, that the scheduler and the preparation stop on, and that
//! every process mara starts for the run registers with — the first escalation sends SIGINT to
//! the run's processes (Pulumi then cancels cleanly and releases its lock), the second SIGKILL. A
//! process registered after an escalation gets its signal at once.
//!
//! With a watchdog (`run::watchdog`, the run's), every process starts into the watchdog's process
//! group, and a signal goes to that group; without one (it could not start, or a test), each
//! process leads a group of its own and each group is signalled.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

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
    /// The processes running now, by pid.
    running: Arc<Mutex<BTreeSet<i32>>>,
    watchdog: Option<Arc<Watchdog>>,
}

impl Default for Interrupt {
    /// Without a watchdog: each process in a group of its own.
    fn default() -> Self {
        Interrupt {
            level: watch::Sender::new((InterruptLevel::None, Cause::Signal)),
            running: Arc::default(),
            watchdog: None,
        }
    }
}

impl Interrupt {
    /// A request to stop that is never more than graceful (`mara cancel`): SIGINT to every
    /// running process group, unless an interruption is already under way. Only a second Ctrl-C
    /// kills.
    pub fn cancel(&self, cause: Cause) {
        let started = self.level.send_if_modified(|state| {
            let idle = state.0 == InterruptLevel::None;
            if idle {
                *state = (InterruptLevel::Graceful, cause);
            }
            idle
        });
        if started {
            self.signal_groups(libc::SIGINT);
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
        self.signal_groups(if next == InterruptLevel::Kill {
            libc::SIGKILL
        } else {
            libc::SIGINT
        });
        next
    }

    fn signal_groups(&self, signal: i32) {
        let run_group = self.run_group();
        let running = self
            .running
            .lock()
            .expect("the process set is never poisoned");
        match run_group {
            // The watchdog's group: every process of the run at once (the watchdog ignores
            // SIGINT; a SIGKILL ends it too, and nothing is started after one).
            Some(group) if !running.is_empty() => send_group(group, signal),
            Some(_) => {}
            None => running.iter().for_each(|&group| send_group(group, signal)),
        }
    }

    /// The group the run's processes start into: the watchdog's, started now if it is not yet
    /// running; `None` (a group of its own for each) without one.
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

    pub fn is_interrupted(&self) -> bool {
        self.level() > InterruptLevel::None
    }

    /// Resolves once an interruption has been requested.
    pub async fn requested(&self) {
        let mut receiver = self.level.subscribe();
        let _ = receiver
            .wait_for(|(level, _)| *level > InterruptLevel::None)
            .await;
    }

    /// An interruption with a watchdog whose grace period is `grace`: the run's processes share
    /// its group.
    pub fn watched(grace: std::time::Duration) -> Interrupt {
        Interrupt {
            watchdog: Some(Arc::new(Watchdog::new(grace))),
            ..Interrupt::default()
        }
    }

    /// Process `pid` started (into the run's group, or leading its own).
    pub(super) fn register(&self, pid: i32) {
        self.running
            .lock()
            .expect("the process set is never poisoned")
            .insert(pid);
        if let Some(watchdog) = &self.watchdog {
            watchdog.tell(pid, true);
        }
        // A process started after the interruption gets it at once, alone: the others of the
        // run's group have had theirs (a second SIGINT would be a second Ctrl-C to them).
        let signal = match self.level() {
            InterruptLevel::None => return,
            InterruptLevel::Graceful => libc::SIGINT,
            InterruptLevel::Kill => libc::SIGKILL,
        };
        self.kill(pid, signal);
    }

    /// Sends `signal` to process `pid` and what it started: its group when it leads one, else
    /// the process alone (its group is the run's).
    pub(super) fn kill(&self, pid: i32, signal: i32) {
        match self.run_group() {
            // SAFETY: kill only sends a signal; a process that has exited yields ESRCH.
            Some(_) => unsafe {
                libc::kill(pid, signal);
            },
            None => send_group(pid, signal),
        }
    }

    /// Process `pid` ended.
    pub(super) fn unregister(&self, pid: i32) {
        self.running
            .lock()
            .expect("the process set is never poisoned")
            .remove(&pid);
        if let Some(watchdog) = &self.watchdog {
            watchdog.tell(pid, false);
        }
    }

    /// Process `pid` is left behind unfinished (the task that ran it panicked): it is killed,
    /// and the watchdog keeps it listed, so that what it started in the run's group is stopped
    /// when mara exits (SIGINT, then SIGKILL after the grace period).
    pub(super) fn abandon(&self, pid: i32) {
        self.kill(pid, libc::SIGKILL);
        self.running
            .lock()
            .expect("the process set is never poisoned")
            .remove(&pid);
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
