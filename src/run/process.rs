//! Running one engine process: in the run's process group, not mara's (so that a Ctrl-C reaches
//! it only through mara, and all of its children with it), with exactly the merged environment,
//! its stdout and stderr read line by line as they come.
//!
//! When to forward signals: mara's own Ctrl-C handler (see `run::interrupt`) sends SIGINT to the
//! run's processes once — Pulumi then cancels cleanly and releases its lock — and SIGKILL on the
//! second Ctrl-C. Because the run's group is not the terminal's, the terminal's Ctrl-C does not
//! reach a child directly; a child never gets SIGINT twice by accident. A child also gets SIGINT
//! when mara dies without a chance to forward it (SIGKILL), and SIGKILL after a grace period: the
//! run's watchdog (`run::watchdog`) leads the group and sends them, so no engine outlives its run.

use std::collections::BTreeMap;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::interrupt::{Interrupt, Stop};
use super::spawn::Spawner;
pub use super::spawn::resolve_program;
use crate::engine::Step;

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// What a finished process left.
#[derive(Debug)]
pub struct Finished {
    /// `None` when it was ended by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `step` as `spawner` starts a run's engines, sending each line to `lines` as it
/// arrives; `stdin` is written to the process and closed (secrets travel this way, never as
/// arguments). Once `stop` says so, the process gets SIGINT (once), and is waited for.
pub async fn run(
    step: &Step,
    spawner: &Spawner,
    stdin: Option<&str>,
    interrupt: &Interrupt,
    lines: mpsc::UnboundedSender<(Stream, String)>,
    stop: Option<Stop>,
) -> std::io::Result<Finished> {
    let group = interrupt.run_group();
    let mut child = spawner.spawn(step, stdin.is_some(), group)?;
    let mut registered = Some(Registered::new(interrupt, child.pid, group));
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // A process that ends without reading it closes the pipe: not an error here.
        let _ = pipe.write_all(text.as_bytes()).await;
        drop(pipe);
    }
    let pid = registered.as_ref().map(|r| r.pid);
    let work = async {
        let (stdout, stderr) = tokio::join!(
            read_lines(&mut child.stdout, Stream::Stdout, lines.clone()),
            read_lines(&mut child.stderr, Stream::Stderr, lines)
        );
        (stdout, stderr, child.wait().await)
    };
    tokio::pin!(work);
    let (stdout, stderr, status) = match stop {
        Some(mut stop) => {
            let mut asked = false;
            loop {
                tokio::select! {
                    done = &mut work => break done,
                    () = stop.stopped(), if !asked => {
                        asked = true;
                        if let Some(pid) = pid {
                            interrupt.kill(pid, libc::SIGINT);
                        }
                    }
                }
            }
        }
        None => work.await,
    };
    if let Some(registered) = &mut registered {
        registered.ended = true;
    }
    drop(registered);
    Ok(Finished {
        code: status?,
        stdout,
        stderr,
    })
}

/// A running process, known to the interruption (and its watchdog) until it ends. Dropped
/// before its process ended — the task that ran it panicked, or was dropped — it kills it, so
/// that nothing of it runs on unwatched.
struct Registered<'a> {
    interrupt: &'a Interrupt,
    pid: i32,
    ended: bool,
}

impl<'a> Registered<'a> {
    /// `pid` started into the run's `group`, or into a group of its own (`None`).
    fn new(interrupt: &'a Interrupt, pid: i32, group: Option<i32>) -> Registered<'a> {
        interrupt.register(pid, group.unwrap_or(pid));
        Registered {
            interrupt,
            pid,
            ended: false,
        }
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        match self.ended {
            true => self.interrupt.unregister(self.pid),
            false => self.interrupt.abandon(self.pid),
        }
    }
}

/// Why a process failed, from its stderr: the message of its last `error: …` line (Pulumi's and
/// Terraform's form); else, when it crashed without one, its last meaningful words — the `panic:`
/// line of a Go panic (what follows is its goroutines' stacks), or its last line that is not
/// blank (a Python traceback's exception, a shell's complaint).
pub fn last_error(stderr: &str) -> Option<&str> {
    error_line(stderr).or_else(|| {
        let mut lines = stderr.lines().map(str::trim).filter(|l| !l.is_empty());
        match lines.clone().find(|l| l.starts_with("panic:")) {
            Some(panic) => Some(panic),
            None => lines.next_back(),
        }
    })
}

/// The message of the last `error: …` line of an engine's stderr.
fn error_line(stderr: &str) -> Option<&str> {
    stderr
        .lines()
        .rev()
        .find_map(|l| {
            // Pulumi's and kubectl's `error: …`, or Terraform's boxed `│ Error: …`; kubectl's
            // `Error from server (Conflict): …`, `The connection to the server … was refused`
            // and `unable to recognize …` are whole.
            let l = l.trim_start_matches(['│', ' ']);
            l.strip_prefix("error:")
                .or_else(|| l.strip_prefix("Error:"))
                .or_else(|| {
                    [
                        "Error from server",
                        "The connection to the server",
                        "unable to recognize",
                    ]
                    .iter()
                    .any(|start| l.starts_with(start))
                    .then_some(l)
                })
        })
        .map(str::trim)
}

/// Runs a short step to its end without streaming (storing or reading configuration, outside a
/// run), with `stdin` written to it. It is in mara's own process group: a Ctrl-C ends both.
pub fn run_blocking(
    step: &Step,
    env: &BTreeMap<String, String>,
    stdin: Option<&str>,
) -> std::io::Result<Finished> {
    finish(command(step, env, stdin.is_some())?.spawn()?, stdin)
}

/// Runs a short step of a run to its end without streaming (storing or reading configuration,
/// finding stacks), in the run's process group and known to `interrupt` as the operations are:
/// an interruption reaches it, and the caller asks `interrupt` whether it came.
pub fn run_step(
    step: &Step,
    env: &BTreeMap<String, String>,
    stdin: Option<&str>,
    interrupt: &Interrupt,
) -> std::io::Result<Finished> {
    use std::os::unix::process::CommandExt;
    let mut command = command(step, env, stdin.is_some())?;
    let group = interrupt.run_group();
    command.process_group(group.unwrap_or(0));
    let child = command.spawn()?;
    let mut registered = Registered::new(interrupt, child.id() as i32, group);
    let finished = finish(child, stdin);
    registered.ended = true;
    finished
}

/// Writes `stdin` to `child` and waits for it, collecting its output.
fn finish(mut child: std::process::Child, stdin: Option<&str>) -> std::io::Result<Finished> {
    use std::io::Write as _;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // A process that ends without reading it (interrupted) closes the pipe: not an error here.
        let _ = pipe.write_all(text.as_bytes());
    }
    let output = child.wait_with_output()?;
    Ok(Finished {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// Reads `reader` line by line, sending each line as it comes; returns everything read.
async fn read_lines(
    reader: impl tokio::io::AsyncRead + Unpin,
    stream: Stream,
    lines: mpsc::UnboundedSender<(Stream, String)>,
) -> String {
    let mut reader = BufReader::new(reader);
    let mut all = String::new();
    let mut buffer = Vec::new();
    loop {
        buffer.clear();
        match reader.read_until(b'\n', &mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let line = String::from_utf8_lossy(&buffer);
                let line = line.trim_end_matches(['\n', '\r']).to_string();
                all.push_str(&line);
                all.push('\n');
                let _ = lines.send((stream, line));
            }
        }
    }
    all
}

/// `step` as a process to start: its program as `env`'s PATH finds it, its arguments and
/// directory, exactly `env` plus the step's own variables, standard input piped when there is
/// something to write, standard output and error piped. The file its engine reads that mara
/// writes (`Step::generated`) is made first.
fn command(
    step: &Step,
    env: &BTreeMap<String, String>,
    stdin: bool,
) -> std::io::Result<std::process::Command> {
    if let Some(file) = &step.generated {
        file.ensure().map_err(|error| {
            std::io::Error::new(
                error.kind(),
                format!("cannot write {}: {error}", file.path.display()),
            )
        })?;
    }
    let mut command = std::process::Command::new(resolve_program(&step.program, env, &step.cwd)?);
    command
        .args(&step.args)
        .current_dir(&step.cwd)
        .env_clear()
        .envs(
            env.iter()
                .filter(|(name, _)| !step.unset.contains(&name.as_str())),
        )
        .envs(&step.env)
        .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Ok(command)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::StepKind;

    fn step(args: &[&str]) -> Step {
        Step::new(
            StepKind::Operation,
            "sh",
            args.iter().map(|a| a.to_string()).collect(),
            std::env::temp_dir(),
        )
    }

    fn env() -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                "PATH".to_string(),
                std::env::var("PATH").unwrap_or_default(),
            ),
            ("ONLY".into(), "this".into()),
        ])
    }

    #[tokio::test]
    async fn streams_lines_with_exactly_the_given_environment() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let script = "echo out-$ONLY; echo err-${HOME:-unset} >&2; read x; echo got-$x; exit 3";
        let finished = run(
            &step(&["-c", script]),
            &Spawner::new(&env()),
            Some("input\n"),
            &Interrupt::default(),
            tx,
            None,
        )
        .await
        .unwrap();
        assert_eq!(finished.code, Some(3));
        assert_eq!(finished.stdout, "out-this\ngot-input\n");
        assert_eq!(finished.stderr, "err-unset\n");
        let mut seen = Vec::new();
        while let Ok(line) = rx.try_recv() {
            seen.push(line);
        }
        assert!(seen.contains(&(Stream::Stderr, "err-unset".into())));
    }

    #[tokio::test]
    async fn an_interrupt_reaches_the_whole_process_group() {
        // mara's main does the same: a test runner started in the background inherits SIGINT
        // ignored, which the shell below could then not trap.
        // SAFETY: setting a signal's disposition to the default has no other effect.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
        }
        let interrupt = Interrupt::default();
        let (tx, _rx) = mpsc::unbounded_channel();
        let trigger = interrupt.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            trigger.escalate(crate::run::interrupt::Cause::Signal);
        });
        // The shell traps INT and reports it; its foreground child, in the same group, gets it too.
        let script = "trap 'echo trapped; exit 9' INT; sleep 5; echo not-reached";
        let finished = run(
            &step(&["-c", script]),
            &Spawner::new(&env()),
            None,
            &interrupt,
            tx,
            None,
        )
        .await
        .unwrap();
        assert_eq!(finished.code, Some(9));
        assert!(finished.stdout.contains("trapped") && !finished.stdout.contains("not-reached"));
    }

    #[tokio::test]
    async fn a_stop_asks_the_process_to_stop_once_and_waits_for_it() {
        // SAFETY: as above.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
        }
        let (tx, _rx) = mpsc::unbounded_channel();
        let (stop, stopped) = Stop::new();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let _ = stop.send(true);
        });
        // It takes its time after the first SIGINT; a second would end it at once, unclean.
        let script = "trap 'if [ -n \"$seen\" ]; then echo twice; exit 8; fi; seen=1; echo asked' INT; \
                      i=0; while [ $i -lt 50 ]; do sleep 0.02; i=$((i+1)); done; echo clean; exit 0";
        let finished = run(
            &step(&["-c", script]),
            &Spawner::new(&env()),
            None,
            &Interrupt::default(),
            tx,
            Some(stopped),
        )
        .await
        .unwrap();
        assert_eq!(finished.code, Some(0), "{}", finished.stdout);
        assert_eq!(finished.stdout, "asked\nclean\n");
    }

    #[test]
    fn the_last_error_line_is_found() {
        assert_eq!(
            last_error("warning: x\nerror: first\n  detail\nerror: second\nmore"),
            Some("second")
        );
        assert_eq!(last_error(""), None);
        assert_eq!(last_error("nothing\n\n"), Some("nothing"));
        // A crash says why in its own way.
        let traceback = "Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 'aws:profile'\n";
        assert_eq!(last_error(traceback), Some("KeyError: 'aws:profile'"));
        let panic =
            "panic: runtime error: index out of range\n\ngoroutine 1 [running]:\nmain.main()\n";
        assert_eq!(
            last_error(panic),
            Some("panic: runtime error: index out of range")
        );
    }

    #[tokio::test]
    async fn a_missing_program_is_an_error_naming_it() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let mut s = step(&[]);
        s.program = "no-such-program-mara".into();
        let err = run(
            &s,
            &Spawner::new(&env()),
            None,
            &Interrupt::default(),
            tx,
            None,
        )
        .await
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("`no-such-program-mara` was not found on PATH")
        );
    }
}
