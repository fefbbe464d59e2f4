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
        let mut sent_last = self.confirmed;
        self.watcher = Some(std::thread::spawn(move || {
            let mut cancelled = false;
            let mut lost = false;
            // A server that did not answer is let be for a while: a watcher that asked it
            // four times a second would keep the ledger from the run's own writes.
            let pause = lease.map_or(Duration::from_secs(2), |l| l / 3);
            let mut quiet_until = Instant::now();
            while let Err(mpsc::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(Duration::from_millis(250))
            {
                if Instant::now() < quiet_until {
                    continue;
                }
                let Ok(mut ledger) = ledger.lock() else {
                    return;
                };
                let failed = |quiet_until: &mut Instant| *quiet_until = Instant::now() + pause;
                if !cancelled {
                    match ledger.cancel_requested(&run_id) {
                        Ok(true) => {
                            interrupt.cancel(Cause::CancelRequest);
                            cancelled = true;
                        }
                        Ok(false) => {}
                        Err(_) => {
                            failed(&mut quiet_until);
                            continue;
                        }
                    }
                }
                // Drained (by the clock, say): nothing is started any more, nothing to renew.
                lost = lost || interrupt.draining().is_some();
                let Some(lease) = lease.filter(|_| !lost) else {
                    continue;
                };
                // A lock cleared or taken over elsewhere is noticed at once, not at the next
                // renewal: no project starts beside another run's.
                match ledger.holds_lock(&run_id) {
                    Ok(false) => {
                        lost = true;
                        interrupt.drain(LOCK_TAKEN.into());
                        continue;
                    }
                    Ok(true) => {}
                    Err(_) => {
                        failed(&mut quiet_until);
                        continue;
                    }
                }
                if sent_last.elapsed() < lease / 3 {
                    continue;
                }
                let sent = Moment::now();
                match ledger.renew(&run_id) {
                    Ok(true) => {
                        sent_last = sent;
                        interrupt.lease().confirmed(sent, lease);
                    }
                    Ok(false) => {
                        lost = true;
                        interrupt.drain(LOCK_TAKEN.into());
                    }
                    // Tried again after the pause; the clock drains the run if none succeeds.
                    Err(error) => {
                        interrupt.lease().trouble(error.to_string());
                        failed(&mut quiet_until);
                    }
                }
            }
        }));
    }
}
