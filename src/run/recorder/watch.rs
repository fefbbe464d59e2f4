//! Watching a recorded run from the ledger (docs/commands.md, "cancel, unlock" and "A team's
//! ledger"): a `mara cancel` request, and on a server the run's lease — renewed, and confirmed by
//! the run's own clock (`run::drain`).

use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{LOCK_TAKEN, Recorder};
use crate::run::drain::Moment;
use crate::run::interrupt::{Cause, Interrupt};

impl Recorder {
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
        self.interrupt = interrupt.clone();
        let lease = ledger
            .lock()
            .ok()
            .and_then(|l| l.lease())
            .filter(|_| self.locks);
        if let Some(lease) = lease {
            interrupt.lease().confirmed(self.confirmed, lease);
        }
        let mut watch = Watch {
            run_id,
            interrupt,
            lease,
            cancelled: false,
            lost: false,
            sent_last: self.confirmed,
            // A server that did not answer is let be for a while: a watcher that asked it
            // four times a second would keep the ledger from the run's own writes.
            pause: lease.map_or(Duration::from_secs(2), |l| l / 3),
            quiet_until: Instant::now(),
        };
        self.watcher = Some(std::thread::spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(Duration::from_millis(250))
            {
                if Instant::now() < watch.quiet_until {
                    continue;
                }
                let Ok(mut ledger) = ledger.lock() else {
                    return;
                };
                if watch.look(ledger.as_mut()).is_err() {
                    watch.quiet_until = Instant::now() + watch.pause;
                }
            }
        }));
    }
}

/// The watcher's state between its looks at the ledger.
struct Watch {
    run_id: String,
    interrupt: Interrupt,
    lease: Option<Duration>,
    cancelled: bool,
    /// The run's lock is no longer its own (or the run drained): nothing more to renew.
    lost: bool,
    /// When the last confirmed renewal was sent.
    sent_last: Moment,
    pause: Duration,
    quiet_until: Instant,
}

impl Watch {
    /// One look: a cancel request; on a server, the lock still the run's, and the lease renewed
    /// when a third of it has passed. `Err` when the ledger did not answer (it is let be for a
    /// pause; the clock drains the run if no renewal succeeds).
    fn look(&mut self, ledger: &mut dyn crate::ledger::Ledger) -> Result<(), ()> {
        let (run_id, interrupt) = (&self.run_id, &self.interrupt);
        if !self.cancelled && ledger.cancel_requested(run_id).map_err(|_| ())? {
            interrupt.cancel(Cause::CancelRequest);
            self.cancelled = true;
        }
        // Drained (by the clock, say): nothing is started any more, nothing to renew.
        self.lost = self.lost || interrupt.draining().is_some();
        let Some(lease) = self.lease.filter(|_| !self.lost) else {
            return Ok(());
        };
        // A lock cleared or taken over elsewhere is noticed at once, not at the next renewal:
        // no project starts beside another run's.
        if !ledger.holds_lock(run_id).map_err(|_| ())? {
            self.lost = true;
            interrupt.drain(LOCK_TAKEN.into());
            return Ok(());
        }
        if self.sent_last.elapsed() < lease / 3 {
            return Ok(());
        }
        let sent = Moment::now();
        match ledger.renew(run_id) {
            Ok(true) => {
                self.sent_last = sent;
                interrupt.lease().confirmed(sent, lease);
            }
            Ok(false) => {
                self.lost = true;
                interrupt.drain(LOCK_TAKEN.into());
            }
            Err(error) => {
                interrupt.lease().trouble(error.to_string());
                return Err(());
            }
        }
        Ok(())
    }
}
