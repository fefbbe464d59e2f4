//! The run ledger (docs/commands.md, "status, history, logs"): the source of truth about what ran,
//! what is running now, and the inputs of each project's last successful deployment.
//!
//! The runner never talks to it: `run::recorder` follows a run's events as one of its sinks. The
//! ledger is the contract `Ledger`, kept once in `records.rs` for both of its stores: this
//! machine's SQLite file (`sqlite.rs`, `.mara/ledger.db`) and a team's PostgreSQL server
//! (`postgres.rs`), each only a dialect; `open` and `open_existing` are where a command gets one,
//! and `tests/ledger_contract.rs` holds both to the same behaviour.

pub mod access;
pub mod journal;
pub mod postgres;
pub use postgres::Escalation;
pub mod records;
pub mod sqlite;
pub mod store;
pub mod writes;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::engine::{Changes, Operation};
use crate::error::{Error, Problem, Result};
use crate::status::{ProjectStatus, RunStatus};
use crate::workspace::Workspace;

/// Where a workspace's ledger is: its own SQLite file, or a team's PostgreSQL server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    File(std::path::PathBuf),
    Server(String),
}

impl fmt::Display for Place {
    /// The file, or the server's URL without its password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::File(path) => write!(f, "{}", path.display()),
            Place::Server(url) => f.write_str(&crate::workspace::ledger_url::shown(url)),
        }
    }
}

impl Place {
    /// The server's password, when it has one (in its URL, or else `PGPASSWORD`), as it is and
    /// percent-encoded as a URL holds it. Every run redacts them.
    pub fn password(&self, env: &BTreeMap<String, String>) -> Vec<String> {
        let Place::Server(url) = self else {
            return Vec::new();
        };
        let Ok(config) = crate::workspace::ledger_url::parse(url) else {
            return Vec::new();
        };
        let password = match config.get_password() {
            Some(password) => String::from_utf8_lossy(password).into_owned(),
            None => match env.get(PASSWORD_VARIABLE).filter(|p| !p.is_empty()) {
                Some(password) => password.clone(),
                None => return Vec::new(),
            },
        };
        let encoded: String = password
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let mut forms = vec![password];
        if encoded != forms[0] {
            forms.push(encoded);
        }
        forms
    }

    /// Takes what reaches the ledger out of an engine's or hook's environment: `PGPASSWORD`
    /// when it is the server's password (a program of the user's that needs one of its own
    /// gets it when the ledger's password is in `MARA_LEDGER_URL`); `MARA_LEDGER_URL` is taken
    /// out by `configure::strip_secret_variables`.
    pub fn keep_from_engines(&self, env: &mut BTreeMap<String, String>) {
        if let Place::Server(url) = self
            && !crate::workspace::ledger_url::has_password(url)
        {
            env.remove(PASSWORD_VARIABLE);
        }
    }
}

/// The variable a PostgreSQL ledger's password comes from when its URL has none (libpq's).
pub const PASSWORD_VARIABLE: &str = "PGPASSWORD";

/// The variable that names a PostgreSQL ledger (and may hold its password, which mara.toml
/// must not).
pub const URL_VARIABLE: &str = "MARA_LEDGER_URL";

/// The workspace's ledger: `MARA_LEDGER_URL` from the environment, else `ledger` in mara.toml,
/// else `<state_dir>/ledger.db`. A `MARA_LEDGER_URL` that is set is used or refused, never
/// passed over: an empty one (a CI secret that is missing) would otherwise lose the team's lock.
pub fn place(workspace: &Workspace, env: &BTreeMap<String, String>) -> Result<Place> {
    match env.get(URL_VARIABLE).map(|u| u.trim()) {
        Some("") => Err(Error::config(
            Problem::new(format!("{URL_VARIABLE} is set, but empty"))
                .hint("give it the ledger server's URL (postgres://user@host/database), or unset it to use this workspace's own ledger"),
        )),
        Some(url) => match crate::workspace::ledger_url::parse(url) {
            Ok(_) => {
                postgres::lease_length(env.get("MARA_LEASE_SECONDS").map(String::as_str))?;
                Ok(Place::Server(url.to_string()))
            }
            Err(reason) => Err(Error::config(
                Problem::new(format!("{URL_VARIABLE}: {reason}"))
                    .hint("give it the ledger server's URL, or unset it to use this workspace's own ledger"),
            )),
        },
        None => Ok(match &workspace.settings.ledger {
            Some(url) => {
                postgres::lease_length(env.get("MARA_LEASE_SECONDS").map(String::as_str))?;
                Place::Server(url.clone())
            }
            None => Place::File(path(workspace)),
        }),
    }
}

/// The ledger file of a workspace: `<state_dir>/ledger.db`.
pub fn path(workspace: &Workspace) -> std::path::PathBuf {
    workspace.state_dir().join("ledger.db")
}

/// Opens (creating) the workspace's ledger.
pub fn open(place: &Place) -> Result<Box<dyn Ledger>> {
    open_with(place, None)
}

/// `open`, a server's calls abandoned when `escalation` grows (a run's interruption).
fn open_with(place: &Place, escalation: Option<Escalation>) -> Result<Box<dyn Ledger>> {
    let opening = std::time::Instant::now();
    let ledger: Box<dyn Ledger> = match place {
        Place::File(file) => Box::new(sqlite::Sqlite::open(file)?),
        Place::Server(url) => Box::new(postgres::Postgres::connect(url, escalation)?),
    };
    // What the benchmarks read (docs/benchmarks.md, `MARA_LOG=mara::ledger=debug`).
    tracing::debug!(target: "mara::ledger", micros = opening.elapsed().as_micros() as u64, "ledger opened");
    Ok(ledger)
}

/// Opens the workspace's ledger if it exists (for commands that only read); a server's always
/// does.
pub fn open_existing(place: &Place) -> Result<Option<Box<dyn Ledger>>> {
    match place {
        Place::File(file) => {
            Ok(sqlite::Sqlite::open_existing(file)?
                .map(|ledger| Box::new(ledger) as Box<dyn Ledger>))
        }
        Place::Server(_) => open(place).map(Some),
    }
}

/// Makes what `journal` kept on `ledger` (best effort: what it cannot make stays kept), saying
/// so when it made any.
pub fn replay(journal: &journal::Journal, ledger: &mut dyn Ledger) {
    match journal.replay(ledger) {
        Ok((0, _)) => {}
        Ok((made, left)) => tracing::info!(
            "made {made} of the writes kept in {} ({left} left)",
            journal.file().display()
        ),
        Err(error) => tracing::warn!("{error}: the writes kept there wait"),
    }
}

/// A run's ledger, opened when it is first needed and then kept: one connection to a server per
/// run, whatever the run asks it (what `--changed` compares, the stacks that exist, the record).
pub struct Opener {
    place: Place,
    opened: Option<Box<dyn Ledger>>,
    /// Whether `opened` may be written: a file opened only to read may be read-only.
    writable: bool,
    /// What abandons a server's call that waits (the run's interruption).
    escalation: Option<Escalation>,
    /// The writes a server did not take, made first once it is reached (`journal`).
    journal: Option<journal::Journal>,
}

impl Opener {
    pub fn new(place: Place) -> Opener {
        Opener {
            place,
            opened: None,
            writable: false,
            escalation: None,
            journal: None,
        }
    }

    /// A server's calls abandoned when `escalation` grows: a Ctrl-C reaches a run whose server
    /// stopped answering at once, not after the call's bound.
    pub fn interruptible(mut self, escalation: Escalation) -> Opener {
        self.escalation = Some(escalation);
        self
    }

    /// The writes `journal` kept are made first, once the server is reached.
    pub fn replaying(mut self, journal: Option<journal::Journal>) -> Opener {
        self.journal = journal;
        self
    }

    /// The ledger at `place`, opened, with what the journal kept made on it.
    fn open(&mut self) -> Result<Box<dyn Ledger>> {
        let mut ledger = open_with(&self.place, self.escalation.clone())?;
        if let Some(journal) = self.journal.take() {
            replay(&journal, ledger.as_mut());
        }
        Ok(ledger)
    }

    pub fn place(&self) -> &Place {
        &self.place
    }

    /// The ledger to read, if there is one yet (a file is made by the first run it records).
    pub fn existing(&mut self) -> Result<Option<&dyn Ledger>> {
        if self.opened.is_none() {
            self.opened = match &self.place {
                Place::Server(_) => Some(self.open()?),
                Place::File(_) => open_existing(&self.place)?,
            };
            self.writable = matches!(self.place, Place::Server(_));
        }
        Ok(self.opened.as_deref())
    }

    /// The ledger to write, made if need be.
    pub fn writable(&mut self) -> Result<&mut Box<dyn Ledger>> {
        if !self.writable || self.opened.is_none() {
            self.opened = Some(self.open()?);
            self.writable = true;
        }
        Ok(self.opened.as_mut().expect("opened just above"))
    }

    /// The ledger to write, handed over (to the run's recorder).
    pub fn take_writable(&mut self) -> Result<Box<dyn Ledger>> {
        self.writable()?;
        self.writable = false;
        Ok(self.opened.take().expect("opened by writable"))
    }
}

/// Who holds a stack's lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Holder {
    pub run_id: String,
    pub user: String,
    pub host: String,
    pub pid: u32,
    pub started: String,
    pub command: String,
    /// On a server, the seconds left of the holder's lease (0: it ran out, and the lock is
    /// taken over by the next run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_left: Option<u64>,
}

impl Holder {
    /// Whether the run holding the lock may still be running, so that the lock is not taken
    /// over: on a server, while its lease has not run out (hosts of different machines, CI
    /// containers, may share a name, so a pid says nothing there); on a machine's own ledger,
    /// while its process exists — or when it is of another host than `this_host`, which cannot
    /// tell.
    pub fn is_live(&self, this_host: &str) -> bool {
        match self.lease_left {
            Some(left) => left > 0,
            None => self.host != this_host || process_exists(self.pid),
        }
    }

    /// Whether it is a live run of this machine (its lease not run out, its process alive): the
    /// only kind that can be using this machine's local cluster.
    pub fn alive_on_this_host(&self) -> bool {
        self.host == whoami().1 && self.lease_left != Some(0) && process_exists(self.pid)
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "run {} by {}@{} (pid {}) since {}: `{}`",
            self.run_id, self.user, self.host, self.pid, self.started, self.command
        )
    }
}

/// What `begin` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begun {
    /// The run is recorded (and holds the lock, if asked). `took_over` names a lock whose process
    /// was gone: its run is now `abandoned`.
    Started { took_over: Option<Holder> },
    /// Another live run holds the stack.
    Held(Holder),
}

/// A run as it starts.
#[derive(Debug, Clone)]
pub struct RunStart {
    pub run_id: String,
    pub operation: Operation,
    pub provider: String,
    pub stack: String,
    pub command: String,
    pub started: String,
    /// The projects it selected, in its order (reversed for a destroy): recorded `waiting` as
    /// it starts, so that no project of a run that dies goes unaccounted for.
    pub projects: Vec<String>,
    /// Its graph: (needed, needing) pairs of those projects' paths, as the provider had them
    /// when it started (`Plan::edges`).
    pub graph: Vec<(String, String)>,
}

/// A recorded run.
#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    pub run_id: String,
    pub operation: Operation,
    pub provider: String,
    pub stack: String,
    pub user: String,
    pub host: String,
    pub pid: u32,
    pub command: String,
    pub started: String,
    pub finished: Option<String>,
    pub status: RunStatus,
    pub projects: Vec<ProjectRecord>,
    /// How many projects it selected, all recorded as it started; `None` for a run recorded
    /// by a mara that recorded a project only as it started (it knows nothing of those it
    /// never started).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selected: Option<u32>,
    /// Its graph as it started: (needed, needing) pairs of its projects' paths; `None` for a
    /// run recorded by a mara that did not record it (its page draws the provider as it is).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph: Option<Vec<(String, String)>>,
    /// What the workspace's policies said of it, where they said anything (docs/commands.md,
    /// "Policies").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::policy::Decision>,
    /// Read from a server, whose leases say whether a run is alive: its status is already as
    /// seen, and no pid of this machine's says otherwise (two machines may share a host name).
    #[serde(skip)]
    pub leased: bool,
    /// What was done to it from outside, oldest first: a cancel asked, its lock cleared — who,
    /// when, from where (`access::Action`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<access::Action>,
}

impl RunRecord {
    /// The run as it is: one recorded `running` whose process on this host is gone ended
    /// without saying so (killed, or its last write failed on a full disk) and is shown
    /// `abandoned`, with its running projects, until the next run takes its lock over and
    /// records it so. A run of another host is shown as recorded, and so is a server's.
    pub fn as_seen(self) -> RunRecord {
        if self.leased
            || self.status != RunStatus::Running
            || self.host != whoami().1
            || process_exists(self.pid)
        {
            return self;
        }
        self.abandoned()
    }

    /// The run as abandoned: its running projects abandoned with it, those it never started
    /// skipped (as the ledger records them when the lock is taken over).
    pub fn abandoned(mut self) -> RunRecord {
        self.status = RunStatus::Abandoned;
        for project in &mut self.projects {
            match project.status {
                ProjectStatus::Running => project.status = ProjectStatus::Abandoned,
                ProjectStatus::Waiting if project.finished.is_none() => {
                    project.status = ProjectStatus::Skipped;
                    project.reason = Some(NOT_STARTED_ABANDONED.to_string());
                }
                _ => {}
            }
        }
        self
    }
}

/// Why a project its run never started is skipped once the run is abandoned.
pub const NOT_STARTED_ABANDONED: &str = "not started: its run was abandoned";

/// How a recorded reason begins when a project's engine may have kept its stack's own lock:
/// killed by a second interruption, or stopped by a lock it met (a run killed earlier left it).
pub const KILLED: &str = "killed";
pub const LOCKED: &str = "the stack is locked by another update";

impl RunRecord {
    /// The projects whose engine may still hold its stack's own lock, by what the run (as seen)
    /// recorded: killed, running when the run was abandoned, or stopped by such a lock. What
    /// `mara unlock --engine` clears.
    pub fn engine_locks_left(&self) -> Vec<&ProjectRecord> {
        let reason = |p: &ProjectRecord, start: &str| {
            p.reason.as_deref().is_some_and(|r| r.starts_with(start))
        };
        (self.projects.iter())
            .filter(|p| {
                p.status == ProjectStatus::Abandoned
                    || (self.status == RunStatus::Abandoned && p.status == ProjectStatus::Running)
                    || reason(p, KILLED)
                    || reason(p, LOCKED)
            })
            .collect()
    }

    /// The projects a run taken over was running when its lock was taken, as the run that took
    /// it reads it right after: those the takeover recorded `abandoned` (from `running`) —
    /// never one that had ended (done, failed, killed, stopped by a lock) or never started. A
    /// project whose end its machine had not sent yet (kept in its journal) is among them: the
    /// ledger cannot tell it from one still running. What the takeover's warning names;
    /// `engine_locks_left` is the broader set `mara unlock --engine` clears.
    pub fn running_when_taken_over(&self) -> Vec<&ProjectRecord> {
        (self.projects.iter())
            .filter(|p| {
                p.status == ProjectStatus::Abandoned
                    || (self.status == RunStatus::Abandoned && p.status == ProjectStatus::Running)
            })
            .collect()
    }
}

/// A project of a recorded run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProjectRecord {
    pub path: String,
    pub status: ProjectStatus,
    pub started: Option<String>,
    pub finished: Option<String>,
    pub exit_code: Option<i32>,
    pub changes: Option<Changes>,
    pub reason: Option<String>,
    pub log: Option<String>,
    pub fingerprint: Option<String>,
}

/// A project's stack outputs as its last successful `up` on a stack left them, for the inputs
/// of its dependents (docs/formats.md, "Inputs"): the values of those that are not secret, and
/// only the names of those that are — a secret's value is never recorded.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Outputs {
    pub values: serde_json::Map<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub secret: std::collections::BTreeSet<String>,
}

impl Outputs {
    /// As recorded: `values` less the secret ones, whose names are kept.
    pub fn recorded(
        values: &serde_json::Map<String, serde_json::Value>,
        secret: &std::collections::BTreeSet<String>,
    ) -> Outputs {
        Outputs {
            values: (values.iter())
                .filter(|(name, _)| !secret.contains(*name))
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect(),
            secret: secret.clone(),
        }
    }
}

/// What a fanned-out run was opened with, carried to its jobs (docs/commands.md, "ci"): the
/// stack configuration as the opening runner read it (secure values as they are, encrypted), and
/// the environment file's lines that hold no secret.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RunInputs {
    /// The stack configuration's text; `None`: there was none (a first run's).
    pub config: Option<String>,
    /// The environment file's text, less every line of a secret; `None`: there was none.
    pub environment: Option<String>,
}

/// What a project's preview showed beyond its counts, kept for the run's summary made elsewhere
/// (`mara ci close` of a fanned-out preview, docs/commands.md "ci"): the outputs it changes, the
/// resources that change with their properties (a secret's values as `[secret]`, as the engine
/// shows them), how its inputs were taken, and the projects it waits on.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Previewed {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_outputs: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diff: Vec<crate::engine::ResourceDiff>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_with: Option<crate::status::PlannedWith>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub projected: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waits_on: Vec<String>,
    /// Its stack is not deployed yet: its dependents' previews wait on it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub new_stack: bool,
    /// A drift check's: the resources changed outside the engine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drifted: Vec<crate::engine::ResourceDiff>,
}

/// A project's recorded outputs, with the run that left them, and the one that destroyed the
/// project since (its outputs are what its dependents still standing were deployed with).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedOutputs {
    pub run_id: String,
    pub outputs: Outputs,
    pub destroyed: Option<String>,
}

/// Everything a ledger holds but its locks and its tokens: what `mara ledger migrate` copies (a
/// token made for one ledger grants nothing on another).
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Oldest first, each with its projects and the actions done to it.
    pub runs: Vec<RunRecord>,
    /// (stack, project, fingerprint) of what is deployed.
    pub deployed: Vec<(String, String, String)>,
    /// (backend, stack, project) of the stacks known to exist.
    pub stacks: Vec<(String, String, String)>,
    /// The images imported into the stacks' local clusters.
    pub images: Vec<ImageRecord>,
    /// Each project's recorded outputs: (stack, project, run, outputs as JSON, destroyed by).
    pub outputs: Vec<(String, String, String, String, Option<String>)>,
    /// What each fanned-out run was opened with: (run, inputs as JSON).
    pub run_inputs: Vec<(String, String)>,
    /// What the projects' previews showed: (run, project, `Previewed` as JSON).
    pub previews: Vec<(String, String, String)>,
}

/// An image imported into a stack's local cluster (`mara images import`), as it was then: what
/// `mara images update` compares the local image with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImageRecord {
    /// The machine whose cluster it went into: every developer has a `dev` cluster of their own.
    pub host: String,
    pub stack: String,
    /// As Docker names it (`name:tag`).
    pub image: String,
    /// The local image's id when it was imported (`sha256:…`).
    pub image_id: String,
    /// The cluster it went into, by when that was created: a cluster made again since holds
    /// none of it.
    #[serde(rename = "cluster_created")]
    pub cluster: String,
    pub imported: String,
}

/// A ledger is shared with the threads that write a run's records and watch for `mara cancel`.
pub trait Ledger: Send {
    /// Everything it holds but its locks.
    fn export(&self) -> Result<History>;

    /// Adds `history`, leaving every run it already holds (by id) as it is; the runs added.
    fn import(&mut self, history: &History) -> Result<Vec<String>>;

    /// How long a lock lasts unless its holder renews it: `None` for a ledger only this machine
    /// uses, whose locks are held by live processes.
    fn lease(&self) -> Option<std::time::Duration>;

    /// Renews the lock `run_id` holds; `Ok(false)` when it holds none any more (taken over
    /// after its lease ran out, or cleared by `mara unlock --force`).
    fn renew(&mut self, run_id: &str) -> Result<bool>;

    /// Whether it keeps the runs' log lines itself (a server's, for `logs` from any machine);
    /// otherwise they are only in the log files of the machine that ran.
    fn stores_logs(&self) -> bool;

    /// Makes what of `shared` its server does not have yet (`state = "ledger"`: what the
    /// engines' backends make on first use), one maker at a time; the names made.
    fn make_for_engines(
        &mut self,
        shared: &[crate::engine::state::Shared],
    ) -> Result<Vec<&'static str>>;

    /// Whether its connection is over TLS: the engines that keep their state on its server
    /// (`state = "ledger"`) connect as it did.
    fn over_tls(&self) -> Result<bool>;

    /// Appends log lines (`(project, line)`, already redacted) of run `run_id`, in order.
    fn append_logs(&mut self, run_id: &str, lines: &[(String, String)]) -> Result<()>;

    /// Run `run_id`'s log lines after position `after` (0: from the start), of one project or
    /// all, in order: `(position, project, line)`.
    fn logs(
        &self,
        run_id: &str,
        project: Option<&str>,
        after: i64,
    ) -> Result<Vec<(i64, String, String)>>;

    /// Records a run as `running`; with `lock`, first takes the stack's lock, atomically.
    fn begin(&mut self, run: &RunStart, lock: bool) -> Result<Begun>;

    /// Makes a run's writes (`writes::Entry`) in order, in one transaction: all or none — but
    /// for a project's end kept in a journal by an older mara, which reads its run first and is
    /// made in a transaction of its own (a journal is replayed one entry at a time).
    fn write(&mut self, entries: &[writes::Entry]) -> Result<()>;

    /// Records that a project started (`running`).
    fn project_started(
        &mut self,
        run_id: &str,
        path: &str,
        started: &str,
        fingerprint: Option<&str>,
    ) -> Result<()>;

    /// Records a project's end.
    fn project_finished(&mut self, run_id: &str, project: &ProjectRecord) -> Result<()>;

    /// Records the run's end and releases its lock.
    fn finish(&mut self, run_id: &str, status: RunStatus, finished: &str) -> Result<()>;

    /// Removes a run that never ran (refused, or not confirmed) and releases its lock: the
    /// history lists what ran.
    fn forget(&mut self, run_id: &str) -> Result<()>;

    /// Who holds `stack`'s lock now.
    fn holder(&self, stack: &str) -> Result<Option<Holder>>;

    /// Clears `stack`'s lock whoever holds it; the run is recorded `abandoned`, and `by`'s
    /// action with it, in one transaction.
    fn unlock(&mut self, stack: &str, by: &access::Actor) -> Result<Option<Holder>>;

    /// Asks the run holding `stack` to stop, recording `by`'s action with the request; returns
    /// it.
    fn request_cancel(&mut self, stack: &str, by: &access::Actor) -> Result<Option<Holder>>;

    /// The named tokens `mara serve` takes, by name (their digests, never their values).
    fn tokens(&self) -> Result<Vec<access::Token>>;

    /// Adds `token`; `false` when a token of its name exists (nothing is changed).
    fn add_token(&mut self, token: &access::Token) -> Result<bool>;

    /// Removes token `name`; whether there was one.
    fn revoke_token(&mut self, name: &str) -> Result<bool>;

    /// Records that token `name` was accepted at `at` — unless it was in the same minute: a
    /// page read is not a write of the ledger each time.
    fn token_used(&mut self, name: &str, at: &str) -> Result<()>;

    fn cancel_requested(&self, run_id: &str) -> Result<bool>;

    /// Sets the lease of the locks this ledger takes from now on (a run fanned out over CI jobs
    /// is opened with a long one); a ledger without leases ignores it.
    fn set_lease(&mut self, lease: std::time::Duration);

    /// Joins run `run_id` (opened elsewhere by `mara ci open`) to record projects under it:
    /// refused when there is no such run, when it is of another stack or operation, closed, or
    /// no longer holding its lock; `Interrupted` when it was cancelled.
    fn join(&mut self, run_id: &str, stack: &str, operation: Operation) -> Result<()>;

    /// Claims a joined job's projects (`paths`) in run `run_id` for as long as it renews its
    /// lease: `Some(path)` when another job holds a live claim on one (two jobs of one project
    /// at once: a retried job while the first still runs), and then nothing is claimed. A claim
    /// whose job is gone lapses with the lease, and is taken over.
    fn claim(&mut self, run_id: &str, paths: &[String]) -> Result<Option<String>>;

    /// Releases the job's claims in run `run_id`: it ended, and a retry may run at once.
    fn release(&mut self, run_id: &str) -> Result<()>;

    /// Whether run `run_id` still holds its stack's lock: on a server another machine may have
    /// cleared it (`unlock --force`) or taken it over.
    fn holds_lock(&self, run_id: &str) -> Result<bool>;

    /// Runs, newest first (without their projects), of one stack or all.
    fn runs(&self, stack: Option<&str>, limit: usize) -> Result<Vec<RunRecord>>;

    /// `runs` past `after` (the last run of the page before): the next page, read from where
    /// that one ended, not from the newest again.
    fn runs_after(
        &self,
        stack: Option<&str>,
        after: &RunRecord,
        limit: usize,
    ) -> Result<Vec<RunRecord>>;

    /// One run with its projects.
    fn run(&self, run_id: &str) -> Result<Option<RunRecord>>;

    /// `runs` with their projects, as `run` reads each: in one read for them all.
    fn with_projects(&self, runs: Vec<RunRecord>) -> Result<Vec<RunRecord>>;

    /// The last run of each of `operations` on each of `stacks` that has one (without its
    /// projects), newest first: what `last_run` finds, in one read for them all.
    fn last_runs(&self, stacks: &[String], operations: &[Operation]) -> Result<Vec<RunRecord>>;

    /// Who holds each stack's lock now, by stack.
    fn holders(&self) -> Result<BTreeMap<String, Holder>>;

    /// What `previews` reads, of each of `run_ids`, in one read for them all.
    fn previews_of(
        &self,
        run_ids: &[String],
    ) -> Result<BTreeMap<String, BTreeMap<String, Previewed>>>;

    /// Which of `run_ids` it holds.
    fn recorded(&self, run_ids: &[String]) -> Result<std::collections::BTreeSet<String>>;

    /// What its reads have cost so far (`store::Reads`).
    fn reads(&self) -> store::Reads;

    /// Every stack a run is recorded of, by name — however old its runs.
    fn stacks(&self) -> Result<Vec<String>>;

    /// How many runs are recorded (one count, not every run read).
    fn count_runs(&self) -> Result<usize>;

    /// The runs a retention does not keep — started before `since` (an RFC 3339 instant), or
    /// past the newest `newest` — removed with everything recorded of them (their projects,
    /// previews, inputs, audit, a server's log lines), unless `dry_run`; never a running run, one
    /// that holds a lock, or a stack's newest run. Their ids, oldest first.
    fn prune(
        &mut self,
        since: Option<&str>,
        newest: Option<usize>,
        dry_run: bool,
    ) -> Result<Vec<String>>;

    /// The runs that selected project `path` (of any stack or provider), newest first, each
    /// with that project alone, as `run` reads them.
    fn project_runs(&self, path: &str, limit: usize) -> Result<Vec<RunRecord>>;

    /// The last run of `operation` on `stack`, with its projects.
    fn last_run(&self, stack: &str, operation: Operation) -> Result<Option<RunRecord>>;

    /// Each project's fingerprint at its last successful `up` on `stack`.
    fn last_fingerprints(&self, stack: &str) -> Result<BTreeMap<String, String>>;

    /// Records what run `run_id` (opened for its jobs) was opened with.
    fn set_run_inputs(&mut self, run_id: &str, inputs: &RunInputs) -> Result<()>;

    /// What run `run_id` was opened with, if it carries that.
    fn run_inputs(&self, run_id: &str) -> Result<Option<RunInputs>>;

    /// What the previews of run `run_id` showed beyond their counts, by project.
    fn previews(&self, run_id: &str) -> Result<BTreeMap<String, Previewed>>;

    /// The outputs each of `projects` recorded at its last successful `up` on `stack`, and the
    /// run that destroyed it since, if one did.
    fn outputs(
        &self,
        stack: &str,
        projects: &[String],
    ) -> Result<BTreeMap<String, RecordedOutputs>>;

    /// The images imported into `stack`'s local cluster on this machine, by name.
    fn images(&self, stack: &str) -> Result<Vec<ImageRecord>>;

    /// Records images as imported, each replacing what was recorded of it for its stack.
    fn record_images(&mut self, images: &[ImageRecord]) -> Result<()>;

    /// Forgets images of `stack`'s cluster on this machine; the number forgotten.
    fn forget_images(&mut self, stack: &str, images: &[String]) -> Result<usize>;

    /// The projects known to have `stack` on `backend` (an engine run on it succeeded, and no
    /// run found it gone since).
    fn known_stacks(
        &self,
        backend: &str,
        stack: &str,
    ) -> Result<std::collections::BTreeSet<String>>;

    /// Each project known to have `stack` on some backend, with those backends.
    fn stack_backends(
        &self,
        stack: &str,
    ) -> Result<std::collections::BTreeMap<String, std::collections::BTreeSet<String>>>;

    /// Records that the projects of `exist` have `stack` on `backend`, and that those of `gone`
    /// no longer do, in one transaction.
    fn stacks_changed(
        &mut self,
        backend: &str,
        stack: &str,
        exist: &[String],
        gone: &[String],
    ) -> Result<()>;
}

/// The user and host of this process, as a lock records them.
pub fn whoami() -> (String, String) {
    let user = account_name()
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .or_else(|| std::env::var("LOGNAME").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| {
            // SAFETY: geteuid has no preconditions.
            format!("uid{}", unsafe { libc::geteuid() })
        });
    let mut buffer = [0u8; 256];
    // SAFETY: the buffer is large enough and gethostname writes at most its length.
    let host = if unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) } == 0 {
        let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
        String::from_utf8_lossy(&buffer[..end]).into_owned()
    } else {
        "localhost".into()
    };
    (user, host)
}

/// The name of this process's account (what `id -un` says), from the password database.
fn account_name() -> Option<String> {
    let mut buffer = vec![0u8; 4096];
    let mut entry = std::mem::MaybeUninit::<libc::passwd>::uninit();
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes the entry into `entry` and its strings into `buffer`, whose
    // length it is given; `found` is null unless an entry was found.
    let result = unsafe {
        libc::getpwuid_r(
            libc::geteuid(),
            entry.as_mut_ptr(),
            buffer.as_mut_ptr().cast(),
            buffer.len(),
            &mut found,
        )
    };
    if result != 0 || found.is_null() {
        return None;
    }
    // SAFETY: found points at `entry`, whose name points into `buffer`, NUL-terminated.
    let name = unsafe { std::ffi::CStr::from_ptr((*found).pw_name) };
    Some(name.to_string_lossy().into_owned()).filter(|n| !n.is_empty())
}

/// Whether process `pid` exists on this host.
pub fn process_exists(pid: u32) -> bool {
    // 0 (and anything past i32) would ask about a process group, or every process: no holder
    // has such a pid, so its lock is taken over.
    if pid == 0 || i32::try_from(pid).is_err() {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let result = unsafe { libc::kill(pid as i32, 0) };
    result == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}
