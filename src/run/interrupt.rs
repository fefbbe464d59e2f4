//! Interrupting a run (docs/commands.md, "Interruption"): one shared state that the signal
//! handler and `mara cancel` escalate, that the scheduler stops on, and that every engine process
//! registers its process group with — the first escalation sends SIGINT to every group (Pulumi
//! then cancels cleanly and releases its lock), the second SIGKILL. A group registered after an
//! escalation gets its signal at once. The watchdog (`run::watchdog`) learns every group too.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

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
    groups: Arc<Mutex<BTreeSet<i32>>>,
    watchdog: Arc<super::watchdog::Watchdog>,
}

impl Default for Interrupt {
    fn default() -> Self {
        Interrupt {
            level: watch::Sender::new((InterruptLevel::None, Cause::Signal)),
            groups: Arc::default(),
            watchdog: Arc::default(),
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
        for &group in self
            .groups
            .lock()
            .expect("the group set is never poisoned")
            .iter()
        {
            // SAFETY: killpg only sends a signal; a group that has already exited yields ESRCH.
            unsafe {
                libc::killpg(group, signal);
            }
        }
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

    /// Makes the watchdog ready before any engine starts.
    pub(super) fn arm_watchdog(&self) {
        self.watchdog.arm();
    }

    pub(super) fn register(&self, group: i32) {
        self.groups
            .lock()
            .expect("the group set is never poisoned")
            .insert(group);
        self.watchdog.tell(group, true);
        // A process started after the interruption gets it at once.
        let signal = match self.level() {
            InterruptLevel::None => return,
            InterruptLevel::Graceful => libc::SIGINT,
            InterruptLevel::Kill => libc::SIGKILL,
        };
        // SAFETY: as in `escalate`.
        unsafe {
            libc::killpg(group, signal);
        }
    }

    pub(super) fn unregister(&self, group: i32) {
        self.groups
            .lock()
            .expect("the group set is never poisoned")
            .remove(&group);
        self.watchdog.tell(group, false);
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
