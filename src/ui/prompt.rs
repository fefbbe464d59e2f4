//! Asking a person: the questions mara puts on a terminal. The code that decides what to ask
//! (`configure`, the confirmations) asks through `configure::Prompter`, so that it neither prints
//! nor prompts itself; this is the terminal's side of that trait, and a scripted one for tests.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

pub use crate::configure::Prompter;
use crate::error::{Error, Result};

/// The terminal, through dialoguer, on standard error. Ctrl-C at any question is an
/// interruption (exit 130): the terminal is left as it was found — cursor shown, echo on.
#[derive(Debug, Default)]
pub struct TerminalPrompter;

/// While a question is asked, SIGINT, SIGTERM and SIGHUP only set a flag: console and dialoguer raise
/// SIGINT on Ctrl-C in raw mode, and a terminal in line mode sends it; either way the question
/// ends, and the terminal is restored (echo on, whatever shell runs next) before mara says it
/// was interrupted.
static CAUGHT: AtomicBool = AtomicBool::new(false);

/// The thread that asks (`pthread_t` as a number): a signal that another thread received (the
/// run's runtime has threads) is passed on to it, so that its blocked read returns EINTR.
static ASKING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn caught(signal: libc::c_int) {
    CAUGHT.store(true, Ordering::SeqCst);
    let asking = ASKING.load(Ordering::SeqCst) as libc::pthread_t;
    // SAFETY: pthread_self and pthread_kill are async-signal-safe; the asking thread is alive
    // while the handler is installed (it removes it).
    unsafe {
        if libc::pthread_self() != asking {
            libc::pthread_kill(asking, signal);
        }
    }
}

/// The signals that end a question.
const ENDING: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// SIGINT, SIGTERM and SIGHUP caught for the lifetime of the value, the handlers they replaced restored
/// after.
struct Caught([libc::sigaction; 3]);

impl Caught {
    fn install() -> Caught {
        CAUGHT.store(false, Ordering::SeqCst);
        // SAFETY: pthread_self has no failure.
        ASKING.store(unsafe { libc::pthread_self() } as u64, Ordering::SeqCst);
        // SAFETY: the handler only stores to an atomic (async-signal-safe); no SA_RESTART, so a
        // blocked read returns EINTR; the previous actions are kept to be restored.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = caught as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            let mut previous: [libc::sigaction; 3] = std::mem::zeroed();
            for (signal, previous) in ENDING.iter().zip(&mut previous) {
                libc::sigaction(*signal, &action, previous);
            }
            Caught(previous)
        }
    }

    fn fired(&self) -> bool {
        CAUGHT.load(Ordering::SeqCst)
    }
}

impl Drop for Caught {
    fn drop(&mut self) {
        // SAFETY: restores the actions `install` replaced.
        unsafe {
            for (signal, previous) in ENDING.iter().zip(&self.0) {
                libc::sigaction(*signal, previous, std::ptr::null_mut());
            }
        }
    }
}

/// Asks with `question`; Ctrl-C is `Error::Interrupted`, with the cursor shown again.
fn guarded<T>(question: impl FnOnce() -> std::result::Result<T, dialoguer::Error>) -> Result<T> {
    let caught = Caught::install();
    let answer = question();
    // A terminal that hung up answers EIO, maybe before its SIGHUP arrives: the same end.
    let interrupted = caught.fired()
        || matches!(&answer, Err(dialoguer::Error::IO(e))
            if e.kind() == std::io::ErrorKind::Interrupted || e.raw_os_error() == Some(libc::EIO));
    drop(caught);
    if interrupted {
        let _ = std::io::stderr().write_all(b"\x1b[?25h\n");
        return Err(Error::Interrupted);
    }
    answer.map_err(asked)
}

fn asked(error: dialoguer::Error) -> Error {
    let dialoguer::Error::IO(error) = error;
    Error::Terminal(error)
}

/// A line typed without echo, on the terminal: read here rather than through dialoguer so that
/// Ctrl-C ends it at once (a line-mode read would wait for Enter) with echo turned back on.
fn hidden_line(prompt: &str) -> Result<String> {
    use std::os::fd::AsRawFd;
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .map_err(Error::Terminal)?;
    let fd = tty.as_raw_fd();
    let mut out = std::io::stderr();
    let _ = write!(out, "{prompt}: ");
    let _ = out.flush();
    // SAFETY: tcgetattr fills the struct for a terminal fd, or fails.
    let mut original: libc::termios = unsafe { std::mem::zeroed() };
    if unsafe { libc::tcgetattr(fd, &mut original) } != 0 {
        return Err(Error::Terminal(std::io::Error::last_os_error()));
    }
    let mut quiet = original;
    quiet.c_lflag &= !libc::ECHO;
    // SAFETY: sets the attributes just read, echo off.
    unsafe { libc::tcsetattr(fd, libc::TCSAFLUSH, &quiet) };
    let caught = Caught::install();
    let mut line = Vec::new();
    let result = loop {
        if caught.fired() {
            break Err(Error::Interrupted);
        }
        let mut poll = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, a 100 ms timeout.
        let ready = unsafe { libc::poll(&mut poll, 1, 100) };
        if ready <= 0 {
            continue;
        }
        let mut byte = [0u8; 1];
        // SAFETY: reads at most one byte into `byte`.
        let n = unsafe { libc::read(fd, byte.as_mut_ptr().cast(), 1) };
        match n {
            1 if byte[0] == b'\n' || byte[0] == b'\r' => {
                break Ok(String::from_utf8_lossy(&line).into_owned());
            }
            1 => line.push(byte[0]),
            0 => break Err(Error::Terminal(std::io::ErrorKind::UnexpectedEof.into())),
            _ => {}
        }
    };
    // Echo on again before the handlers go: a signal in between must not end mara with echo off.
    // SAFETY: restores the attributes read at the start.
    unsafe { libc::tcsetattr(fd, libc::TCSAFLUSH, &original) };
    drop(caught);
    let _ = writeln!(out);
    result
}

impl Prompter for TerminalPrompter {
    fn say(&mut self, text: &str) {
        crate::ui::errln!("{text}");
    }

    fn text(
        &mut self,
        prompt: &str,
        default: Option<&str>,
        check: &dyn Fn(&str) -> std::result::Result<(), String>,
    ) -> Result<String> {
        let theme = dialoguer::theme::SimpleTheme;
        let mut input = dialoguer::Input::<String>::with_theme(&theme)
            .with_prompt(prompt)
            .allow_empty(true);
        if let Some(default) = default {
            input = input.default(default.to_string());
        }
        guarded(|| {
            input
                .validate_with(|answer: &String| check(answer))
                .interact_text()
        })
    }

    /// A menu that also filters as one types: `yes` and Enter is yes.
    fn choose(&mut self, prompt: &str, items: &[String], default: usize) -> Result<usize> {
        guarded(|| {
            dialoguer::FuzzySelect::with_theme(&dialoguer::theme::SimpleTheme)
                .with_prompt(prompt)
                .items(items)
                .default(default)
                .interact()
        })
    }

    fn confirm(&mut self, prompt: &str, default: bool) -> Result<bool> {
        guarded(|| {
            dialoguer::Confirm::with_theme(&dialoguer::theme::SimpleTheme)
                .with_prompt(prompt)
                .default(default)
                .interact()
        })
    }

    fn secret(&mut self, prompt: &str) -> Result<String> {
        loop {
            let first = hidden_line(prompt)?;
            // Enter alone keeps a default (or is refused by the caller): nothing to repeat.
            if first.is_empty() {
                return Ok(first);
            }
            let again = hidden_line("Repeat it")?;
            if first == again {
                return Ok(first);
            }
            self.say("The two entries differ; again.");
        }
    }
}

/// Answers given in advance, in order, and everything said: for tests of what is asked.
#[cfg(test)]
#[derive(Debug, Default)]
pub struct Scripted {
    pub answers: std::collections::VecDeque<String>,
    /// Every prompt and everything said, in order.
    pub transcript: Vec<String>,
}

#[cfg(test)]
impl Scripted {
    pub fn new<'a>(answers: impl IntoIterator<Item = &'a str>) -> Scripted {
        Scripted {
            answers: answers.into_iter().map(str::to_string).collect(),
            transcript: Vec::new(),
        }
    }

    fn next(&mut self, prompt: &str) -> Result<String> {
        self.transcript.push(format!("? {prompt}"));
        self.answers.pop_front().ok_or_else(|| {
            Error::Terminal(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("no answer scripted for `{prompt}`"),
            ))
        })
    }
}

#[cfg(test)]
impl Prompter for Scripted {
    fn say(&mut self, text: &str) {
        self.transcript.push(text.to_string());
    }

    fn text(
        &mut self,
        prompt: &str,
        default: Option<&str>,
        check: &dyn Fn(&str) -> std::result::Result<(), String>,
    ) -> Result<String> {
        loop {
            let answer = self.next(prompt)?;
            let answer = match (answer.is_empty(), default) {
                (true, Some(default)) => default.to_string(),
                _ => answer,
            };
            match check(&answer) {
                Ok(()) => return Ok(answer),
                Err(reason) => self.transcript.push(format!("! {reason}")),
            }
        }
    }

    fn choose(&mut self, prompt: &str, items: &[String], default: usize) -> Result<usize> {
        let answer = self.next(prompt)?;
        if answer.is_empty() {
            return Ok(default);
        }
        items.iter().position(|i| *i == answer).ok_or_else(|| {
            Error::Terminal(std::io::Error::other(format!("`{answer}` is not a choice")))
        })
    }

    fn confirm(&mut self, prompt: &str, default: bool) -> Result<bool> {
        let answer = self.next(prompt)?;
        Ok(match answer.as_str() {
            "" => default,
            a => a.starts_with('y'),
        })
    }

    fn secret(&mut self, prompt: &str) -> Result<String> {
        self.next(prompt)
    }
}
