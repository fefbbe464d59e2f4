//! Draining a run that may no longer own its stack (docs/commands.md, "A team's ledger"): no
//! project starts any more, the running ones finish, and the run says which those were.
//!
//! On a ledger whose locks are leases, a run holds its stack only while its lease is valid *by its
//! own monotonic clock*: the last renewal the server confirmed, counted from when it was sent,
//! plus the lease, less a safety margin (`margin`). The server counts the same lease from when
//! it received the renewal, which is later; so while the two clocks run at rates that differ by
//! less than the margin over one lease, the run stops starting projects before any other run
//! can take the lock over (docs/decisions.md, "A lease is never held twice"). A run that cannot
//! reach its server therefore drains by the clock, however long a call to the server hangs.
//!
//! The clock counts the time the machine was suspended too (`Moment`: `CLOCK_BOOTTIME` on
//! Linux): a laptop's lid closed for longer than the lease leaves it out, as the server sees it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A moment on a monotonic clock that keeps counting while the machine is suspended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Moment(Duration);

impl Moment {
    pub fn now() -> Moment {
        #[cfg(target_os = "linux")]
        let clock = libc::CLOCK_BOOTTIME;
        #[cfg(not(target_os = "linux"))]
        let clock = libc::CLOCK_MONOTONIC;
        let mut time = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the current time of a clock every system has into `time`.
        unsafe { libc::clock_gettime(clock, &mut time) };
        Moment(Duration::new(time.tv_sec as u64, time.tv_nsec as u32))
    }

    pub fn elapsed(self) -> Duration {
        Moment::now().0.saturating_sub(self.0)
    }
}

impl std::ops::Add<Duration> for Moment {
    type Output = Moment;
    fn add(self, more: Duration) -> Moment {
        Moment(self.0 + more)
    }
}

impl std::ops::Sub<Duration> for Moment {
    type Output = Moment;
    fn sub(self, less: Duration) -> Moment {
        Moment(self.0.saturating_sub(less))
    }
}

/// The drain state of one run, shared by the lease's watcher, the scheduler and the summary.
#[derive(Clone, Default)]
pub struct Drain(Arc<Mutex<State>>);

#[derive(Default)]
struct State {
    /// Why no project may start any more.
    reason: Option<String>,
    /// Since when (for a lease that ran out by the clock, when it did).
    since: Option<Moment>,
    /// Until when the lease is known to be valid, and how long it is.
    valid_until: Option<(Moment, Duration)>,
    /// What went wrong the last time the lease could not be renewed.
    trouble: Option<String>,
    /// The projects that were running when the drain began (and were let finish).
    running: Vec<String>,
    /// When the run's projects were done: a lease that runs out after cannot have touched them.
    work_ended: Option<Moment>,
    /// Whether the drain is the clock's (the lease not confirmed in time), not a lock found
    /// taken, which may have been taken at any moment since the last look.
    by_clock: bool,
}

/// What is subtracted from a lease before it is counted on: a fifth of it, at least a second
/// (but never more than half of it).
pub fn margin(lease: Duration) -> Duration {
    (lease / 5).max(Duration::from_secs(1)).min(lease / 2)
}

impl Drain {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().expect("the drain is never poisoned")
    }

    /// No project may start any more, for `reason` (the first reason given stays).
    pub fn stop(&self, reason: String) {
        let mut state = self.state();
        if state.reason.is_none() {
            state.reason = Some(reason);
            state.since = Some(Moment::now());
        }
    }

    /// The server confirmed the lease (`lease` long) renewed by a call sent at `sent`: it is
    /// valid until `sent + lease - margin`, by this process's clock.
    pub fn confirmed(&self, sent: Moment, lease: Duration) {
        let until = sent + lease - margin(lease);
        let mut state = self.state();
        let later = state.valid_until.is_none_or(|(before, _)| until > before);
        if later {
            state.valid_until = Some((until, lease));
        }
    }

    /// A renewal failed, for `why`: said if the lease then runs out.
    pub fn trouble(&self, why: String) {
        self.state().trouble = Some(why);
    }

    /// Why the run drains, if it does: a reason given, or a lease whose validity ran out by the
    /// clock (which drains the run from then on, whatever a later renewal says).
    pub fn reason(&self) -> Option<String> {
        let mut state = self.state();
        if state.reason.is_none()
            && let Some((until, lease)) = state.valid_until
            && Moment::now() >= until
        {
            let why = match &state.trouble {
                Some(trouble) => format!(" ({trouble})"),
                None => " (no renewal was confirmed: the ledger did not answer, or this process was stopped)".to_string(),
            };
            state.reason = Some(format!(
                "the stack's lease ({} s) could not be confirmed in time{why}",
                lease.as_secs()
            ));
            state.since = Some(until);
            state.by_clock = true;
        }
        state.reason.clone()
    }

    /// Whether the drain began before `instant` (a project that ends after it ran through it).
    pub fn began_before(&self, instant: Moment) -> bool {
        self.reason().is_some() && self.state().since.is_some_and(|since| since <= instant)
    }

    /// `path` was running when the drain began, and was let finish.
    pub fn ran_through(&self, path: &str) {
        self.state().running.push(path.to_string());
    }

    /// The projects that were running when the drain began.
    pub fn running(&self) -> Vec<String> {
        self.state().running.clone()
    }

    /// The run's projects are done (started, ended, or left out): a lease lost from now on did
    /// not touch them.
    pub fn work_ended(&self) {
        self.state().work_ended.get_or_insert(Moment::now());
    }

    /// Why the run's projects were held back or may have run beside another run, if they may
    /// have: a lock found taken, whenever; a lease the clock let run out before they were done.
    pub fn cost(&self) -> Option<String> {
        let reason = self.reason()?;
        let state = self.state();
        match (state.by_clock, state.since, state.work_ended) {
            (true, Some(since), Some(ended)) if since >= ended => None,
            _ => Some(reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_valid_from_when_its_renewal_was_sent_less_the_margin() {
        assert_eq!(margin(Duration::from_secs(6)), Duration::from_millis(1200));
        assert_eq!(margin(Duration::from_secs(60)), Duration::from_secs(12));
        assert_eq!(margin(Duration::from_secs(1)), Duration::from_millis(500));
        let drain = Drain::default();
        assert_eq!(drain.reason(), None, "no lease: nothing runs out");
        let lease = Duration::from_secs(2);
        let sent = Moment::now();
        drain.confirmed(sent, lease);
        assert_eq!(drain.reason(), None);
        // An older confirmation (a late answer) never shortens it.
        drain.confirmed(sent - Duration::from_secs(5), lease);
        assert_eq!(drain.reason(), None);
        std::thread::sleep(lease - margin(lease) + Duration::from_millis(50));
        drain.trouble("connection refused".into());
        let reason = drain.reason().expect("ran out");
        assert_eq!(
            reason,
            "the stack's lease (2 s) could not be confirmed in time (connection refused)"
        );
        // Once out, a renewal does not bring it back: another run may have started meanwhile.
        drain.confirmed(Moment::now(), lease);
        assert_eq!(drain.reason(), Some(reason));
        assert!(drain.began_before(Moment::now()));
        assert!(!drain.began_before(sent));
    }

    #[test]
    fn a_lease_that_runs_out_after_the_work_cost_nothing_a_lock_taken_always_does() {
        let drain = Drain::default();
        drain.confirmed(Moment::now(), Duration::from_secs(2));
        drain.work_ended();
        std::thread::sleep(Duration::from_millis(1700));
        assert!(drain.reason().is_some(), "out by now");
        assert_eq!(drain.cost(), None, "after the projects were done");
        let taken = Drain::default();
        taken.work_ended();
        taken.stop("taken".into());
        assert_eq!(taken.cost().as_deref(), Some("taken"));
    }

    #[test]
    fn the_first_reason_stays() {
        let drain = Drain::default();
        drain.stop("taken".into());
        drain.stop("other".into());
        assert_eq!(drain.reason().as_deref(), Some("taken"));
        drain.ran_through("vpc");
        assert_eq!(drain.running(), ["vpc"]);
    }
}
