//! The watchdog: one small process per run that interrupts the engines if mara dies without the
//! chance to (SIGKILL, a crash), so that no engine runs on, orphaned, holding its stack's lock.
//!
//! It is mara itself, started as `mara __watchdog` with a pipe on its standard input. mara writes
//! `+<group>` when an engine's process group starts and `-<group>` when it ends. When the pipe
//! closes — mara has exited, however it exited — the watchdog sends SIGINT to every group still
//! listed (the engines cancel as on Ctrl-C), and exits. A run that ends normally has listed none.
//!
//! Why not `PR_SET_PDEATHSIG` in each engine: setting it needs code between fork and exec, which
//! turns every engine start into a full fork of mara instead of a `posix_spawn`, and that cost
//! showed in the benchmarks (docs/benchmarks.md). One watchdog per run costs one start, and works
//! on every Unix.

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;

/// The argument that makes the binary a watchdog (never shown in the help).
pub const ARG: &str = "__watchdog";

/// mara's side: the watchdog's pipe, started as a run begins executing (or on the first engine).
#[derive(Default)]
pub struct Watchdog {
    state: Mutex<State>,
}

#[derive(Default)]
enum State {
    #[default]
    NotStarted,
    Running(Child, ChildStdin),
    /// It could not be started: the run goes on without this protection.
    Failed,
}

impl Watchdog {
    /// Tells the watchdog that `group` is running (`true`) or has ended (`false`). A watchdog
    /// that cannot be started or written to costs only this protection, never the run.
    pub fn tell(&self, group: i32, running: bool) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        start_once(&mut state);
        if let State::Running(_, stdin) = &mut *state {
            let sign = if running { '+' } else { '-' };
            let _ = writeln!(stdin, "{sign}{group}").and_then(|()| stdin.flush());
        }
    }
}

impl Watchdog {
    /// Starts the watchdog now, before the first engine: between an engine's start and the
    /// watchdog hearing of it, a mara killed at that moment would leave the engine orphaned, and
    /// that gap should be one pipe write, not the start of a process.
    pub fn arm(&self) {
        if let Ok(mut state) = self.state.lock() {
            start_once(&mut state);
        }
    }
}

fn start_once(state: &mut State) {
    if matches!(*state, State::NotStarted) {
        *state = match start() {
            Ok((child, stdin)) => State::Running(child, stdin),
            Err(error) => {
                tracing::warn!("the engine watchdog did not start: {error}");
                State::Failed
            }
        };
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Closing the pipe ends the watchdog; with every group ended it signals nothing.
        if let Ok(state) = self.state.get_mut()
            && let State::Running(mut child, stdin) = std::mem::take(state)
        {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

fn start() -> std::io::Result<(Child, ChildStdin)> {
    let mut child = Command::new(std::env::current_exe()?)
        .arg(ARG)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let stdin = child.stdin.take().expect("stdin is piped");
    Ok((child, stdin))
}

/// The watchdog's side: follows the groups on standard input until it closes, then interrupts
/// those still running.
pub fn main() -> ! {
    // A Ctrl-C on the terminal reaches mara's whole process group, this one included: mara
    // handles it; the watchdog only waits for the pipe to close.
    // SAFETY: setting a signal's disposition to "ignore" has no other effect.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
    }
    let groups = follow(std::io::stdin().lock());
    for group in groups {
        // SAFETY: killpg only sends a signal; a group that has ended yields ESRCH.
        unsafe {
            libc::killpg(group, libc::SIGINT);
        }
    }
    std::process::exit(0)
}

/// The groups still running when `input` ends.
fn follow(input: impl BufRead) -> BTreeSet<i32> {
    let mut groups = BTreeSet::new();
    for line in input.lines() {
        let Ok(line) = line else { break };
        let (running, number) = match line.split_at_checked(1) {
            Some(("+", n)) => (true, n),
            Some(("-", n)) => (false, n),
            _ => continue,
        };
        // Only real groups: never 0 or a negative number, which killpg would widen.
        let Ok(group) = number.parse::<i32>() else {
            continue;
        };
        if group <= 1 {
            continue;
        }
        if running {
            groups.insert(group);
        } else {
            groups.remove(&group);
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_groups_still_running_are_the_ones_told_and_not_ended() {
        let input = "+100\n+200\n-100\n+0\n+-5\nnoise\n+300\n";
        assert_eq!(follow(input.as_bytes()), BTreeSet::from([200, 300]));
    }
}
