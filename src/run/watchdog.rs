//! The watchdog: one small process per run that stops the engines if mara dies without the
//! chance to (SIGKILL, a crash), so that no engine runs on, orphaned, holding its stack's lock.
//!
//! It is mara itself, started as `mara __watchdog <grace>` with a pipe on its standard input, an
//! empty environment (no `MARA_SECRET_*`, nothing at all) and `/` as its directory. It leads a
//! process group of its own, and that group is the run's: every process mara starts for the run
//! — configuration steps, operations, hooks — is started into it, so it is in the group from its
//! first instruction, with no moment in which mara knows of it and the watchdog does not.
//!
//! mara writes `done` as it ends normally with none of its processes running — it counts them as
//! they start and end, and tells the watchdog nothing of each (a write and a wake-up of the
//! watchdog per process were a tenth of a run's own cost: docs/benchmarks.md). When the pipe
//! closes — mara has exited, however it exited — without `done`, the watchdog sends SIGINT to the
//! group (the engines cancel as on Ctrl-C), waits up to the grace period for them to end, and
//! sends SIGKILL to whatever is left: an engine that ignores SIGINT does not outlive its run
//! either. The group being the watchdog's own, its id cannot be reused while it waits. (An older
//! mara's `+<pid>` and `-<pid>` lines are still read: a process still listed at the end is
//! stopped as without `done`.)
//!
//! Why not `PR_SET_PDEATHSIG` in each engine: setting it needs code between fork and exec, which
//! turns every engine start into a full fork of mara instead of a `posix_spawn`, and that cost
//! showed in the benchmarks (docs/benchmarks.md). One watchdog per run costs one start, and works
//! on every Unix.

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The argument that makes the binary a watchdog (never shown in the help).
pub const ARG: &str = "__watchdog";

/// The variable that sets the grace period, in seconds (docs/commands.md, "Interruption").
pub const GRACE_VARIABLE: &str = "MARA_WATCHDOG_GRACE";

/// How long the engines of a killed run get to cancel before they are killed.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// mara's side: the watchdog's pipe, started with the run's first process.
pub struct Watchdog {
    grace: Duration,
    state: Mutex<State>,
    /// The run's processes running (or left behind unfinished): `done` only when none is.
    running: std::sync::atomic::AtomicUsize,
}

#[derive(Default)]
enum State {
    #[default]
    NotStarted,
    /// Running, leading the run's process group (its pid).
    Running(Child, ChildStdin),
    /// It could not be started: each process leads a group of its own, without this protection.
    Failed,
}

impl Watchdog {
    pub fn new(grace: Duration) -> Watchdog {
        Watchdog {
            grace,
            state: Mutex::new(State::NotStarted),
            running: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The process group the run's processes start into, starting the watchdog if it is not
    /// running yet; `None` when it could not be started.
    pub fn group(&self) -> Option<i32> {
        let mut state = self.state.lock().ok()?;
        if matches!(*state, State::NotStarted) {
            *state = match start(self.grace) {
                Ok((child, stdin)) => State::Running(child, stdin),
                Err(error) => {
                    tracing::warn!("the engine watchdog did not start: {error}");
                    State::Failed
                }
            };
        }
        // A watchdog that has ended (killed with the run's group) leaves no group to join.
        if let State::Running(child, _) = &mut *state
            && !matches!(child.try_wait(), Ok(None))
        {
            *state = State::Failed;
        }
        match &*state {
            State::Running(child, _) => Some(child.id() as i32),
            _ => None,
        }
    }

    /// Counts a process of the run as running (`true`) or ended (`false`): nothing is written.
    pub fn tell(&self, running: bool) {
        use std::sync::atomic::Ordering::SeqCst;
        match running {
            true => self.running.fetch_add(1, SeqCst),
            false => self.running.fetch_sub(1, SeqCst),
        };
    }

    /// Tells the watchdog that mara has signalled the group itself (SIGINT, or SIGKILL with
    /// `kill`): if mara dies now, it does not send the same SIGINT a second time, which Pulumi
    /// would take for a second Ctrl-C.
    pub fn signalled(&self, kill: bool) {
        self.write(if kill { "kill" } else { "int" });
    }

    fn write(&self, line: &str) {
        if let Ok(mut state) = self.state.lock()
            && let State::Running(_, stdin) = &mut *state
        {
            // One write per message (the pipe is unbuffered).
            let _ = stdin.write_all(format!("{line}\n").as_bytes());
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // mara ends normally: `done`, then the pipe closes, and the watchdog signals nothing —
        // unless a process is still running (one left behind by a task that panicked): then no
        // `done`, and the watchdog stops the group. It is not waited for: it has a grace period
        // to give, and mara does not stay for it.
        if *self.running.get_mut() == 0 {
            self.write("done");
        }
        if let Ok(state) = self.state.get_mut() {
            drop(std::mem::take(state));
        }
    }
}

fn start(grace: Duration) -> std::io::Result<(Child, ChildStdin)> {
    let mut child = Command::new(std::env::current_exe()?)
        .arg(ARG)
        .arg(grace.as_secs().to_string())
        .env_clear()
        .current_dir("/")
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdin = child.stdin.take().expect("stdin is piped");
    // Its group is used only once it ignores SIGINT: a Ctrl-C sent to the group before that
    // would end it, and the engines in its group would have no watchdog.
    let mut ready = [0u8; 1];
    let mut stdout = child.stdout.take().expect("stdout is piped");
    if let Err(error) = std::io::Read::read_exact(&mut stdout, &mut ready) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(error);
    }
    Ok((child, stdin))
}

/// The grace period `MARA_WATCHDOG_GRACE` asks for (whole seconds), else the default.
pub fn grace(env: &std::collections::BTreeMap<String, String>) -> Duration {
    env.get(GRACE_VARIABLE)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(DEFAULT_GRACE, Duration::from_secs)
}

/// The watchdog's side: follows standard input until it closes, then stops the run's group
/// unless mara ended normally.
pub fn main() -> ! {
    // Its group is not the terminal's, and mara's own SIGINT to the group is for the engines.
    // SAFETY: setting a signal's disposition to "ignore" has no other effect.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    // Ready: mara may start processes into this group now.
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(b"+").and_then(|()| out.flush());
    let grace = std::env::args()
        .nth(2)
        .and_then(|g| g.parse::<u64>().ok())
        .map_or(DEFAULT_GRACE, Duration::from_secs);
    let heard = follow(std::io::stdin().lock());
    if heard.done && heard.running.is_empty() {
        std::process::exit(0);
    }
    // SAFETY: getpgrp has no failure; the group is this process's own.
    let group = unsafe { libc::getpgrp() };
    // What mara already sent is not sent again: a second SIGINT is a second Ctrl-C to Pulumi.
    if heard.signalled.is_none() {
        // SAFETY: killpg only sends a signal; this process ignores SIGINT.
        unsafe {
            libc::killpg(group, libc::SIGINT);
        }
    }
    if heard.signalled != Some(Signalled::Kill) {
        let deadline = Instant::now().checked_add(grace);
        while deadline.is_none_or(|d| Instant::now() < d) && others_in_group(group) != Some(false) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    if others_in_group(group) != Some(false) {
        // SAFETY: as above; SIGKILL ends this process too, last.
        unsafe {
            libc::killpg(group, libc::SIGKILL);
        }
    }
    std::process::exit(0)
}

/// What mara sent the group itself before it died.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signalled {
    Int,
    Kill,
}

/// What mara said before its pipe closed.
#[derive(Debug, Default, PartialEq, Eq)]
struct Heard {
    running: BTreeSet<i32>,
    done: bool,
    signalled: Option<Signalled>,
}

/// Follows `input` to its end.
fn follow(input: impl BufRead) -> Heard {
    let mut heard = Heard::default();
    for line in input.lines() {
        let Ok(line) = line else { break };
        match line.as_str() {
            "done" => heard.done = true,
            "int" => heard.signalled = heard.signalled.or(Some(Signalled::Int)),
            "kill" => heard.signalled = Some(Signalled::Kill),
            _ => {}
        }
        let (running, number) = match line.split_at_checked(1) {
            Some(("+", n)) => (true, n),
            Some(("-", n)) => (false, n),
            _ => continue,
        };
        let Ok(pid) = number.parse::<i32>() else {
            continue;
        };
        if running {
            heard.running.insert(pid);
        } else {
            heard.running.remove(&pid);
        }
    }
    heard
}

/// Whether a process other than this one is in `group`: `None` where `/proc` cannot tell.
fn others_in_group(group: i32) -> Option<bool> {
    let own = std::process::id().to_string();
    let entries = std::fs::read_dir("/proc").ok()?;
    Some(entries.flatten().any(|entry| {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name == own || !name.bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
        std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|stat| group_of(&stat))
            == Some(group)
    }))
}

/// The process group in a `/proc/<pid>/stat` line: the fifth field, counted after the command
/// name (which is in parentheses and may hold spaces or parentheses itself).
fn group_of(stat: &str) -> Option<i32> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(2)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_heard_is_the_processes_told_and_not_ended_and_whether_mara_was_done() {
        let input = "+100\n+200\n-100\nnoise\n+300\n";
        let heard = follow(input.as_bytes());
        assert_eq!(heard.running, BTreeSet::from([200, 300]));
        assert!(!heard.done && heard.signalled.is_none());
        let heard = follow("+7\nint\nkill\nint\n".as_bytes());
        assert_eq!(heard.signalled, Some(Signalled::Kill));
        let heard = follow("+5\n-5\ndone\n".as_bytes());
        assert!(heard.done && heard.running.is_empty());
    }

    #[test]
    fn the_group_is_read_after_the_command_name_whatever_it_holds() {
        assert_eq!(group_of("42 (a) b (c)) S 1 4242 4242 0 -1"), Some(4242));
        assert_eq!(group_of("7 (sh) S 1 99 99 0"), Some(99));
        assert_eq!(group_of("garbage"), None);
    }

    #[test]
    fn the_grace_period_comes_from_its_variable_or_the_default() {
        let env = |v: &str| [(GRACE_VARIABLE.to_string(), v.to_string())].into();
        assert_eq!(grace(&env("3")), Duration::from_secs(3));
        assert_eq!(grace(&env("soon")), DEFAULT_GRACE);
        assert_eq!(grace(&Default::default()), DEFAULT_GRACE);
    }
}
