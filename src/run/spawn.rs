//! Starting an engine process for as little as it needs (docs/decisions.md, "Per task no dearer
//! than make"). The run's environment is made into the strings `execve` takes once per run, each
//! program is looked up on PATH once per run, `/dev/null` is opened once; and the child — which
//! shares mara's memory until it runs the engine (`CLONE_VM | CLONE_VFORK`, as `posix_spawn`
//! does) — does only what the engine needs: the signals mara handles back to their defaults (and
//! SIGPIPE, which Rust ignores), its process group, its three descriptors, its directory, an
//! empty signal mask. glibc's `posix_spawn` asks about and sets every one of the 64 signals in
//! the child, 126 system calls a start; this makes about a dozen. Every descriptor mara opens is
//! close-on-exec, so none reaches the engine.
//!
//! Only the run's engine steps start here (`process::run`); short steps outside a run keep
//! `std::process::Command`.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{CString, c_char, c_int, c_void};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

use crate::engine::Step;

/// What a run's engine starts share: its environment as `execve` takes it, the programs found
/// so far, `/dev/null`, and which signals the child sets back to their defaults.
pub struct Spawner {
    env: BTreeMap<String, String>,
    /// Or why it cannot be one (a NUL byte in a value), said when a process is started.
    environ: Result<Environ, String>,
    programs: Mutex<HashMap<String, PathBuf>>,
    null: Option<OwnedFd>,
    reset: Vec<c_int>,
}

/// An environment as `execve` takes it: the strings, and the null-terminated array of pointers
/// to them.
struct Environ {
    _strings: Vec<CString>,
    pointers: Vec<*const c_char>,
}

// SAFETY: the pointers point into `_strings`, owned alongside and never changed.
unsafe impl Send for Environ {}
unsafe impl Sync for Environ {}

impl Environ {
    fn of<'a>(vars: impl Iterator<Item = (&'a String, &'a String)>) -> io::Result<Environ> {
        let strings = vars
            .map(|(name, value)| CString::new(format!("{name}={value}")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut pointers: Vec<*const c_char> = strings.iter().map(|s| s.as_ptr()).collect();
        pointers.push(std::ptr::null());
        Ok(Environ {
            _strings: strings,
            pointers,
        })
    }
}

/// A started engine: its pipes, and what tells when it ends.
pub struct Child {
    pub pid: i32,
    pub stdin: Option<pipe::Sender>,
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
    ended: Ended,
    waited: bool,
}

/// How the end of a child is known: its pidfd, readable once it exited (Linux 5.3); else a
/// thread that waits for it.
enum Ended {
    Pidfd(AsyncFd<OwnedFd>),
    Thread(Option<tokio::sync::oneshot::Receiver<io::Result<Option<i32>>>>),
}

impl Spawner {
    /// The spawner of a run whose processes get `env`. Asks which signals have handlers now
    /// (once: mara's are in place before a run starts).
    pub fn new(env: &BTreeMap<String, String>) -> Spawner {
        Spawner {
            env: env.clone(),
            environ: Environ::of(env.iter()).map_err(|e| e.to_string()),
            programs: Mutex::new(HashMap::new()),
            null: std::fs::File::open("/dev/null").ok().map(OwnedFd::from),
            reset: handled_signals(),
        }
    }

    /// Starts `step` in process group `group` (its own when `None`), with a pipe to its standard
    /// input when `stdin`, else `/dev/null`. Must be called within the run's runtime.
    pub fn spawn(&self, step: &Step, stdin: bool, group: Option<i32>) -> io::Result<Child> {
        if let Some(file) = &step.generated {
            file.ensure().map_err(|error| {
                io::Error::new(
                    error.kind(),
                    format!("cannot write {}: {error}", file.path.display()),
                )
            })?;
        }
        let program = self.program(step)?;
        let own;
        let environ = match step.env.is_empty() && step.unset.is_empty() {
            true => self
                .environ
                .as_ref()
                .map_err(|e| io::Error::other(e.clone()))?,
            false => {
                own = self.environ_of(step)?;
                &own
            }
        };
        let path = CString::new(program.as_os_str().as_bytes())?;
        let args = std::iter::once(Ok(path.clone()))
            .chain(step.args.iter().map(|a| CString::new(a.as_str())))
            .collect::<Result<Vec<_>, _>>()?;
        let mut argv: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let cwd = CString::new(step.cwd.as_os_str().as_bytes())?;
        let (out_read, out_write) = pipe_pair()?;
        let (err_read, err_write) = pipe_pair()?;
        let input = match stdin {
            true => Some(pipe_pair()?),
            false => None,
        };
        let null = match (&self.null, &input) {
            (_, Some(_)) | (Some(_), None) => None,
            (None, None) => Some(OwnedFd::from(std::fs::File::open("/dev/null")?)),
        };
        let stdin_fd = match (&input, &self.null, &null) {
            (Some((read, _)), _, _) => read.as_raw_fd(),
            (None, Some(shared), _) => shared.as_raw_fd(),
            (None, None, Some(own)) => own.as_raw_fd(),
            (None, None, None) => unreachable!("/dev/null was opened above"),
        };
        let start = Start {
            path: path.as_ptr(),
            argv: argv.as_ptr(),
            envp: environ.pointers.as_ptr(),
            cwd: cwd.as_ptr(),
            fds: [stdin_fd, out_write.as_raw_fd(), err_write.as_raw_fd()],
            group: group.unwrap_or(0),
            reset: &self.reset,
            error: Default::default(),
        };
        let pid = clone_and_exec(&start)?;
        drop((out_write, err_write, null));
        let stdin = match input {
            Some((read, write)) => {
                drop(read);
                nonblocking(&write)?;
                Some(pipe::Sender::from_owned_fd_unchecked(write)?)
            }
            None => None,
        };
        nonblocking(&out_read)?;
        nonblocking(&err_read)?;
        Ok(Child {
            pid,
            stdin,
            stdout: pipe::Receiver::from_owned_fd_unchecked(out_read)?,
            stderr: pipe::Receiver::from_owned_fd_unchecked(err_read)?,
            ended: ended(pid),
            waited: false,
        })
    }

    /// The run's environment with `step`'s own variables, without those it does not get.
    fn environ_of(&self, step: &Step) -> io::Result<Environ> {
        let kept = (self.env.iter()).filter(|(name, _)| !step.unset.contains(&name.as_str()));
        let mut merged: BTreeMap<&String, &String> = kept.collect();
        merged.extend(step.env.iter());
        Environ::of(merged.into_iter())
    }

    /// `step`'s program as the run's PATH finds it, looked up once per run (a name with a
    /// slash is looked up each time: it depends on the step's directory).
    fn program(&self, step: &Step) -> io::Result<PathBuf> {
        let cached = !step.program.contains('/');
        if cached && let Some(found) = self.lock().get(&step.program) {
            return Ok(found.clone());
        }
        let found = resolve_program(&step.program, &self.env, &step.cwd)?;
        if cached {
            self.lock().insert(step.program.clone(), found.clone());
        }
        Ok(found)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, PathBuf>> {
        self.programs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Child {
    /// Waits for the child to end: its exit code, `None` when a signal ended it.
    pub async fn wait(&mut self) -> io::Result<Option<i32>> {
        let code = match &mut self.ended {
            Ended::Pidfd(fd) => loop {
                let mut ready = fd.readable().await?;
                match reap(self.pid, libc::WNOHANG)? {
                    Some(code) => break code,
                    None => ready.clear_ready(),
                }
            },
            Ended::Thread(receiver) => match receiver.take() {
                Some(receiver) => receiver
                    .await
                    .map_err(|_| io::Error::other("the thread waiting for the process ended"))??,
                None => return Err(io::Error::other("the process was waited for already")),
            },
        };
        self.waited = true;
        Ok(code)
    }
}

impl Drop for Child {
    /// A child dropped before it was waited for is killed and reaped on a thread of its own,
    /// so that it neither runs on unwatched nor stays a zombie.
    fn drop(&mut self) {
        if self.waited || matches!(self.ended, Ended::Thread(_)) {
            return;
        }
        let pid = self.pid;
        // SAFETY: kill only sends a signal to a child not reaped yet (its pid is still ours).
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let _ = std::thread::Builder::new().spawn(move || reap(pid, 0));
    }
}

/// How `pid`'s end is known: its pidfd, or a thread blocked in `waitpid`.
fn ended(pid: i32) -> Ended {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as RawFd;
    if fd >= 0 {
        // SAFETY: `fd` was just returned to us and is owned by nothing else.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an OwnedFd keeps its descriptor open, and the same, until it is dropped.
        let registered =
            unsafe { AsyncFd::register_with_interest(owned, tokio::io::Interest::READABLE) };
        if let Ok(async_fd) = registered {
            return Ended::Pidfd(async_fd);
        }
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = tx.send(reap(pid, 0).map(|code| code.flatten()));
    });
    Ended::Thread(Some(rx))
}

/// `waitpid(pid, flags)`: `None` when it has not ended yet (`WNOHANG`), else its exit code
/// (`None` within when a signal ended it).
fn reap(pid: i32, flags: c_int) -> io::Result<Option<Option<i32>>> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes the status of our own child into `status`.
        let got = unsafe { libc::waitpid(pid, &mut status, flags) };
        match got {
            0 => return Ok(None),
            -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => continue,
            -1 => return Err(io::Error::last_os_error()),
            _ => break,
        }
    }
    Ok(Some(
        libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
    ))
}

/// The program as the child's PATH finds it, so that the environment file's PATH counts.
pub fn resolve_program(
    program: &str,
    env: &BTreeMap<String, String>,
    cwd: &Path,
) -> std::io::Result<std::path::PathBuf> {
    let path = env.get("PATH").map(String::as_str).unwrap_or_default();
    which::which_in(program, Some(path), cwd).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("`{program}` was not found on PATH"),
        )
    })
}

/// A pipe, both ends close-on-exec (the child's end is made its stdin, stdout or stderr by
/// `dup2`, which clears the flag on the copy).
fn pipe_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two new descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just returned to us and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Mara's end of a pipe it just made, made non-blocking: its flags are known (none).
fn nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: F_SETFL on a descriptor we own.
    match unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } {
        -1 => Err(io::Error::last_os_error()),
        _ => Ok(()),
    }
}

/// The signals whose handlers the child sets back to their defaults: those that have a handler
/// now, the run's (Ctrl-C, SIGTERM, SIGHUP) and SIGCHLD (which a hook's process may give a
/// handler later) unless ignored, and SIGPIPE, which Rust's runtime ignores and an engine must
/// not inherit ignored. A signal mara inherited ignored (`nohup`) stays ignored.
fn handled_signals() -> Vec<c_int> {
    let always = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGCHLD];
    (1..=libc::SIGRTMAX())
        .filter(|&signal| {
            let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: a query (null new action) writes the current disposition into `current`.
            let asked = unsafe { libc::sigaction(signal, std::ptr::null(), &mut current) } == 0;
            let handler = current.sa_sigaction;
            signal == libc::SIGPIPE
                || (asked && handler != libc::SIG_DFL && handler != libc::SIG_IGN)
                || (always.contains(&signal) && (!asked || handler != libc::SIG_IGN))
        })
        .collect()
}

/// What the child needs, all made before it starts: it allocates nothing.
struct Start<'a> {
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    cwd: *const c_char,
    /// Its stdin, stdout and stderr.
    fds: [RawFd; 3],
    group: libc::pid_t,
    reset: &'a [c_int],
    /// Set by the child when it could not run the engine: the error's number.
    error: std::sync::atomic::AtomicI32,
}

/// The child's stack: the parent is suspended until the child runs the engine or exits
/// (`CLONE_VFORK`), so one per thread serves every start.
const STACK: usize = 64 * 1024;

thread_local! {
    static STACKS: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Starts the child with every signal blocked (none may reach a handler of mara's while it
/// shares mara's memory), then lets mara's thread have its mask back. The child's pid, or why
/// it could not run the engine (it has been reaped).
fn clone_and_exec(start: &Start<'_>) -> io::Result<i32> {
    STACKS.with(|stacks| {
        let mut stack = stacks.borrow_mut();
        if stack.len() < STACK {
            stack.resize(STACK, 0);
        }
        // The top of the stack, aligned as the ABI asks.
        let top = (stack.as_mut_ptr() as usize + STACK) & !15;
        let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: plain signal-mask calls on sets we own; clone runs `child` on `stack`, which
        // lives until the child has exec'd or exited (CLONE_VFORK suspends us until then).
        let pid = unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            let pid = libc::clone(
                child,
                top as *mut c_void,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                start as *const Start<'_> as *mut c_void,
            );
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            pid
        };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        // The child set `error` before it exited (it shares our memory).
        let error = start.error.load(std::sync::atomic::Ordering::SeqCst);
        if error != 0 {
            let _ = reap(pid, 0);
            return Err(io::Error::from_raw_os_error(error));
        }
        Ok(pid)
    })
}

/// The child, between the clone and the engine: system calls only.
extern "C" fn child(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Start` the parent keeps alive while it is suspended; everything
    // called is async-signal-safe and allocates nothing.
    unsafe {
        let start = &*(arg as *const Start<'_>);
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        for &signal in start.reset {
            libc::sigaction(signal, &default, std::ptr::null_mut());
        }
        let failed = libc::setpgid(0, start.group) != 0
            || (0..3).any(|to| libc::dup2(start.fds[to], to as c_int) < 0)
            || libc::chdir(start.cwd) != 0;
        if !failed {
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            libc::execve(start.path, start.argv, start.envp);
        }
        let error = *libc::__errno_location();
        start
            .error
            .store(error, std::sync::atomic::Ordering::SeqCst);
        libc::_exit(127)
    }
}

/// Whether `path` names the same program as `other` (for tests).
#[cfg(test)]
fn same(path: &Path, other: &Path) -> bool {
    path.canonicalize().ok() == other.canonicalize().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::StepKind;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn env() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
            ("ONLY".into(), "this".into()),
        ])
    }

    fn sh(script: &str) -> Step {
        let args = vec!["-c".to_string(), script.to_string()];
        Step::new(StepKind::Operation, "sh", args, std::env::temp_dir())
    }

    async fn all(child: &mut Child) -> (String, String, Option<i32>) {
        let (mut out, mut err) = (String::new(), String::new());
        let _ = child.stdout.read_to_string(&mut out).await;
        let _ = child.stderr.read_to_string(&mut err).await;
        (out, err, child.wait().await.unwrap())
    }

    #[tokio::test]
    async fn the_child_gets_exactly_its_environment_directory_and_input() {
        let spawner = Spawner::new(&env());
        let mut step =
            sh("echo $ONLY $EXTRA ${HOME:-nohome} $(pwd); read x; echo got-$x >&2; exit 4");
        step.env.insert("EXTRA".into(), "more".into());
        let mut child = spawner.spawn(&step, true, None).unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"input\n").await.unwrap();
        drop(stdin);
        let (out, err, code) = all(&mut child).await;
        let dir = std::env::temp_dir().canonicalize().unwrap();
        assert_eq!(out, format!("this more nohome {}\n", dir.display()));
        assert_eq!(err, "got-input\n");
        assert_eq!(code, Some(4));
    }

    #[tokio::test]
    async fn the_child_has_default_signals_an_empty_mask_and_its_own_group() {
        let spawner = Spawner::new(&env());
        // SigBlk and SigIgn of /proc/PID/status: nothing blocked, SIGPIPE not ignored (Rust
        // ignores it in mara); and its process group (/proc/PID/stat's fifth field) is its pid.
        let step = sh(
            "grep -E '^Sig(Blk|Ign)' /proc/$$/status | cut -f2; cut -d' ' -f5 /proc/$$/stat; echo $$",
        );
        let mut child = spawner.spawn(&step, false, None).unwrap();
        let (out, _, code) = all(&mut child).await;
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(code, Some(0), "{out}");
        assert_eq!(lines[0], "0000000000000000", "nothing blocked");
        let ignored = u64::from_str_radix(lines[1], 16).unwrap();
        assert_eq!(
            ignored & (1 << (libc::SIGPIPE - 1)),
            0,
            "SIGPIPE is not ignored"
        );
        assert_eq!(lines[2], lines[3], "its own process group");
    }

    #[tokio::test]
    async fn a_program_that_is_not_there_or_a_directory_that_is_not_is_an_error() {
        let spawner = Spawner::new(&env());
        let mut missing = sh("true");
        missing.program = "no-such-program-of-mara".into();
        let error = spawner.spawn(&missing, false, None).err().unwrap();
        assert!(
            error.to_string().contains("was not found on PATH"),
            "{error}"
        );
        let mut nowhere = sh("true");
        nowhere.cwd = PathBuf::from("/no/such/directory/of/mara");
        let error = spawner.spawn(&nowhere, false, None).err().unwrap();
        assert_eq!(error.kind(), io::ErrorKind::NotFound, "{error}");
    }

    #[tokio::test]
    async fn a_program_is_looked_up_once() {
        let spawner = Spawner::new(&env());
        for _ in 0..2 {
            let mut child = spawner.spawn(&sh("exit 0"), false, None).unwrap();
            assert_eq!(all(&mut child).await.2, Some(0));
        }
        let programs = spawner.lock();
        assert_eq!(programs.len(), 1);
        assert!(same(&programs["sh"], &which::which("sh").unwrap()));
    }
}
