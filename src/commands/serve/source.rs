//! Where `mara serve` reads (docs/commands.md, "serve"): the workspace's ledger, driven on
//! threads of its own (a ledger is synchronous, and a server's drives a runtime of its own), the
//! runs' log lines (kept by a server's ledger, else in the log files of this machine), and the
//! graph of a run's provider, read from the workspace.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::graph::ExecutionGraph;
use crate::ledger::{self, Ledger, Place};
use crate::workspace::Workspace;

/// Work for the ledger's thread: given the ledger (`None` while there is none yet).
type Job = Box<dyn FnOnce(Result<Option<&mut dyn Ledger>>) + Send>;

/// The ledger, the logs and the graphs, shared by every request.
pub struct Source {
    jobs: mpsc::Sender<Job>,
    pub workspace: Workspace,
    /// Where the ledger is, as `mara ledger` names it.
    pub place: String,
}

/// How many threads read the ledger, each with its own connection: a request is never queued
/// behind one the ledger is slow to answer while another thread is free.
const READERS: usize = 3;

/// How long a request waits for the ledger: past the ledger's own limits (a server's connection
/// and statement timeouts, 10 s), it is answered "the ledger does not answer" rather than held,
/// and its work, not yet begun, is dropped.
const WAIT: Duration = Duration::from_secs(12);

impl Source {
    /// Starts the ledger's readers. The ledger is opened at the first request, and again at each
    /// while there is none (a workspace that has run nothing yet is served empty).
    pub fn start(workspace: Workspace, place: Place) -> Source {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let shown = place.to_string();
        for n in 0..READERS {
            let (queue, place) = (queue.clone(), place.clone());
            std::thread::Builder::new()
                .name(format!("mara-serve-ledger-{n}"))
                .spawn(move || reader(&queue, &place))
                .expect("a thread for the ledger");
        }
        Source {
            jobs,
            workspace,
            place: shown,
        }
    }

    /// `work` done on the ledger's thread; `None` while there is no ledger (a workspace that
    /// has recorded no run yet).
    pub async fn read<T: Send + 'static>(
        &self,
        work: impl FnOnce(&dyn Ledger) -> Result<T> + Send + 'static,
    ) -> Result<Option<T>> {
        self.act(move |ledger| work(ledger)).await
    }

    /// `work` done on the ledger's thread, which may write: the two actions, and a token's last
    /// use.
    pub async fn act<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut dyn Ledger) -> Result<T> + Send + 'static,
    ) -> Result<Option<T>> {
        let (answer, answered) = oneshot::channel();
        let job: Job = Box::new(move |ledger| {
            // Its request gave up waiting: the ledger is not asked.
            if answer.is_closed() {
                return;
            }
            let result = match ledger {
                Ok(Some(ledger)) => {
                    let before = ledger.reads();
                    let result = work(&mut *ledger).map(Some);
                    // What each read cost (`MARA_LOG=mara::ledger=debug`): what the tests count.
                    let read = ledger.reads().since(before);
                    tracing::debug!(target: "mara::ledger", queries = read.queries, rows = read.rows, steps = read.steps, "request read");
                    result
                }
                Ok(None) => Ok(None),
                Err(error) => Err(error),
            };
            let _ = answer.send(result);
        });
        self.jobs.send(job).map_err(|_| stopped())?;
        match tokio::time::timeout(WAIT, answered).await {
            Ok(answer) => answer.map_err(|_| stopped())?,
            Err(_) => Err(Error::Runtime(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the ledger did not answer within {} s", WAIT.as_secs()),
            ))),
        }
    }

    /// The execution graph of provider `name` as the workspace defines it now; else why not (a
    /// run of a provider since removed, a provider file that no longer reads, a ledger served
    /// from another checkout).
    pub async fn graph(&self, name: String) -> std::result::Result<ExecutionGraph, String> {
        let workspace = self.workspace.clone();
        let said = |e: Error| match e.problems() {
            [first, ..] => first.to_string(),
            [] => e.to_string(),
        };
        tokio::task::spawn_blocking(move || {
            let registry = crate::deployment::registry(&workspace).map_err(said)?;
            let provider = crate::deployment::resolve_runnable(&registry, &name).map_err(said)?;
            ExecutionGraph::build(&provider).map_err(said)
        })
        .await
        .map_err(|e| e.to_string())?
    }

    /// The lines of run `run_id`'s logs past `cursor`: from the ledger when it keeps them,
    /// every project's (one that started since the run was read is not missed); else from this
    /// machine's log files, those of `paths`.
    pub async fn logs(
        &self,
        run_id: String,
        paths: Vec<String>,
        cursor: LogCursor,
    ) -> Result<(Vec<(String, String)>, LogCursor)> {
        self.lines(run_id, None, paths, cursor).await
    }

    /// One project's whole log in run `run_id`.
    pub async fn log_of(&self, run_id: String, project: String) -> Result<Vec<String>> {
        let paths = vec![project.clone()];
        let cursor = LogCursor::default();
        let (lines, _) = self.lines(run_id, Some(project), paths, cursor).await?;
        Ok(lines.into_iter().map(|(_, line)| line).collect())
    }

    async fn lines(
        &self,
        run_id: String,
        only: Option<String>,
        paths: Vec<String>,
        mut cursor: LogCursor,
    ) -> Result<(Vec<(String, String)>, LogCursor)> {
        let dir = self.workspace.state_dir().join("logs").join(&run_id);
        let kept = self.read(|ledger| Ok(ledger.stores_logs())).await?;
        if kept == Some(true) {
            let after = cursor.position;
            let lines = self
                .read(move |ledger| ledger.logs(&run_id, only.as_deref(), after))
                .await?
                .unwrap_or_default();
            if let Some((last, _, _)) = lines.last() {
                cursor.position = *last;
            }
            let lines = (lines.into_iter())
                .map(|(_, project, line)| (project, line))
                .collect();
            return Ok((lines, cursor));
        }
        tokio::task::spawn_blocking(move || {
            let mut lines = Vec::new();
            // A path is the ledger's, but a ledger is a file anyone here may have written: none
            // leads out of the run's log directory.
            for project in paths.into_iter().filter(|p| inside(p)) {
                let file = dir.join(format!("{project}.log"));
                let offset = cursor.offsets.entry(project.clone()).or_default();
                if let Some(text) = crate::files::read_from(&file, offset) {
                    lines.extend(text.lines().map(|l| (project.clone(), l.to_string())));
                }
            }
            Ok((lines, cursor))
        })
        .await
        .map_err(|e| Error::Runtime(std::io::Error::other(e)))?
    }
}

/// One reader of the ledger: takes the next job, on its own connection, until the server stops.
fn reader(queue: &Mutex<mpsc::Receiver<Job>>, place: &Place) {
    let mut opened: Option<Box<dyn Ledger>> = None;
    let mut file = None;
    loop {
        let job = match queue.lock() {
            Ok(queue) => queue.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else {
            return;
        };
        // A workspace's ledger file removed or made again since it was opened (a fresh
        // start): the one there now is read, not the one still held open.
        if let Place::File(path) = place {
            let now = identity(path);
            if now != file {
                opened = None;
                file = now;
            }
        }
        if opened.is_none() {
            match ledger::open_existing(place) {
                Ok(ledger) => opened = ledger,
                Err(error) => {
                    job(Err(error));
                    continue;
                }
            }
        }
        // A job that panics (a bug) costs its request, not the server: its answer is dropped
        // (the request fails) and the ledger is opened again.
        let ledger = opened.as_deref_mut().map(|l| l as &mut dyn Ledger);
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(Ok(ledger))));
        if done.is_err() {
            opened = None;
        }
    }
}

/// Whether project path `path` names a file under a directory: relative, no `..`.
fn inside(path: &str) -> bool {
    !path.starts_with('/') && !path.split('/').any(|part| part == "..")
}

/// How far a reader of a run's logs has read: the ledger's position, or each log file's offset.
#[derive(Debug, Clone, Default)]
pub struct LogCursor {
    position: i64,
    offsets: BTreeMap<String, u64>,
}

/// Which file `path` is now (its device and inode), if any.
fn identity(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

fn stopped() -> Error {
    Error::Runtime(std::io::Error::other(
        "the ledger's reader stopped on this request (mara serve said why on its stderr)",
    ))
}
