//! A run's writes to its ledger, as data (`Entry`), and how a batch of them is made
//! (docs/commands.md, "status, history, logs"): every write of a batch in one transaction, its
//! statements sent to a server at once (`Store::write_all`), each built from what the run knows —
//! none reads the ledger first. The same entries are what the journal keeps (`journal`).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::store::{Statement, Store, Value};
use super::{Ledger, Outputs, Previewed, ProjectRecord};
use crate::engine::Operation;
use crate::error::Result;
use crate::status::RunStatus;

/// One write to the ledger, as data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "write", rename_all = "snake_case")]
pub enum Entry {
    ProjectStarted {
        run_id: String,
        path: String,
        started: String,
        fingerprint: Option<String>,
    },
    ProjectFinished {
        run_id: String,
        project: ProjectRecord,
        /// The run's stack and operation, which decide what the project leaves deployed.
        /// Absent from what an older mara kept: then they are read from the run's record.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        of: Option<RunOf>,
        /// Its stack outputs, read after its `up` because a dependent takes them as inputs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outputs: Option<Box<Outputs>>,
        /// What its preview showed beyond its counts (a preview's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        preview: Option<Box<Previewed>>,
    },
    Logs {
        run_id: String,
        lines: Vec<(String, String)>,
    },
    Finish {
        run_id: String,
        status: RunStatus,
        finished: String,
        /// What the workspace's policies said of the run, as JSON (`policy::Decision`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        policy: Option<String>,
    },
    StacksChanged {
        backend: String,
        stack: String,
        exist: Vec<String>,
        gone: Vec<String>,
    },
}

/// What a project's end needs to know of its run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunOf {
    pub stack: String,
    pub operation: Operation,
}

impl Entry {
    /// Makes the write.
    pub fn apply(&self, ledger: &mut dyn Ledger) -> Result<()> {
        ledger.write(std::slice::from_ref(self))
    }

    /// Whether it is a project's end: what a run shows only once its ledger has it.
    pub fn is_an_end(&self) -> bool {
        matches!(self, Entry::ProjectFinished { .. })
    }
}

/// What a project that succeeded in a run of `operation`, with `fingerprint` recorded as it
/// started, leaves recorded as deployed — the rule of `--changed` (docs/commands.md, "up,
/// preview, refresh, destroy").
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Deployed<'a> {
    /// Its inputs, as `--changed` compares them next time.
    Is(&'a str),
    /// Nothing: destroyed, or deployed without a fingerprint (a record with none would say it
    /// is current).
    Not,
    /// As it was: a preview or refresh changes no deployment.
    Kept,
}

pub(super) fn deployed(operation: Operation, fingerprint: Option<&str>) -> Deployed<'_> {
    match (operation, fingerprint) {
        (Operation::Up, Some(fingerprint)) => Deployed::Is(fingerprint),
        (Operation::Up, None) | (Operation::Destroy, _) => Deployed::Not,
        (Operation::Preview | Operation::Refresh | Operation::Drift, _) => Deployed::Kept,
    }
}

/// A batch's statements as it is read, entry by entry: its projects' rows in one statement per
/// run (a project that starts and ends in the batch is one row, as it ended: a run lists its
/// projects in its order, recorded `waiting` as it began), its log lines in one per run, and what
/// its projects leave deployed in one per stack; the rest (a run's end, the stacks that exist)
/// after the rows, in order.
#[derive(Default)]
pub(super) struct Batch {
    /// By run, in the order first seen: each project's row, and where it is.
    rows: Vec<(String, Vec<serde_json::Value>, HashMap<String, usize>)>,
    statements: Vec<Statement>,
    lines: BTreeMap<String, Vec<(String, String)>>,
    /// By stack and project: what the project's last end in the batch leaves deployed (its
    /// fingerprint, or `None`: nothing).
    deploys: BTreeMap<String, BTreeMap<String, Option<String>>>,
    /// By stack and project: what the project's last end in the batch leaves recorded of its
    /// outputs.
    outputs: BTreeMap<String, BTreeMap<String, Leaves>>,
    /// What the previews of the batch's projects showed.
    previews: Vec<Statement>,
}

/// What a project's preview showed, in place of what an earlier job of its project recorded.
fn preview_statement(run_id: &str, path: &str, preview: &Previewed) -> Statement {
    (
        "INSERT INTO {p}previews (run_id, path, preview) VALUES ($1, $2, $3)
         ON CONFLICT (run_id, path) DO UPDATE SET preview = excluded.preview",
        vec![
            Value::Text(run_id.to_string()),
            Value::Text(path.to_string()),
            Value::Text(serde_json::to_string(preview).unwrap_or_else(|_| "{}".into())),
        ],
    )
}

/// What a project's end leaves recorded of its outputs.
enum Leaves {
    /// Its `up` in run (first) read them (as JSON).
    Recorded(String, String),
    /// Its destroy in run (the one named): kept, said destroyed, for what still stands on it.
    Destroyed(String),
}

impl Batch {
    pub(super) fn add(&mut self, entry: &Entry) {
        match entry {
            Entry::ProjectStarted {
                run_id,
                path,
                started,
                fingerprint,
            } => self.row(
                run_id,
                &ProjectRecord {
                    path: path.clone(),
                    status: crate::status::ProjectStatus::Running,
                    started: Some(started.clone()),
                    finished: None,
                    exit_code: None,
                    changes: None,
                    reason: None,
                    log: None,
                    fingerprint: fingerprint.clone(),
                },
            ),
            Entry::ProjectFinished {
                run_id,
                project,
                of,
                outputs,
                preview,
            } => {
                self.row(run_id, project);
                if let Some(preview) = preview {
                    self.previews
                        .push(preview_statement(run_id, &project.path, preview));
                }
                if let Some(of) = of.as_ref().filter(|_| project.status.is_success()) {
                    self.deploys(of, project);
                    self.outputs(run_id, of, project, outputs.as_deref());
                }
            }
            Entry::Logs { run_id, lines } => {
                (self.lines.entry(run_id.clone()).or_default()).extend(lines.iter().cloned())
            }
            Entry::Finish {
                run_id,
                status,
                finished,
                policy,
            } => (self.statements).extend(finish_statements(
                run_id,
                *status,
                finished,
                policy.as_deref(),
            )),
            Entry::StacksChanged {
                backend,
                stack,
                exist,
                gone,
            } => (self.statements).extend(stacks_statements(backend, stack, exist, gone)),
        }
    }

    /// `project`'s row in run `run_id`, in place of one the batch has of it already.
    fn row(&mut self, run_id: &str, project: &ProjectRecord) {
        let at = match self.rows.iter().position(|(run, ..)| run == run_id) {
            Some(at) => at,
            None => {
                self.rows
                    .push((run_id.to_string(), Vec::new(), HashMap::new()));
                self.rows.len() - 1
            }
        };
        let (_, rows, places) = &mut self.rows[at];
        let row = row_of(project);
        match places.get(&project.path) {
            Some(&i) => rows[i] = row,
            None => {
                places.insert(project.path.clone(), rows.len());
                rows.push(row);
            }
        }
    }

    /// What `project`, which succeeded in a run of `of`, leaves deployed.
    fn deploys(&mut self, of: &RunOf, project: &ProjectRecord) {
        let leaves = match deployed(of.operation, project.fingerprint.as_deref()) {
            Deployed::Is(fingerprint) => Some(fingerprint.to_string()),
            Deployed::Not => None,
            Deployed::Kept => return,
        };
        (self.deploys.entry(of.stack.clone()).or_default()).insert(project.path.clone(), leaves);
    }

    /// What `project`, which succeeded in run `run_id` of `of`, leaves recorded of its outputs:
    /// those it read after its `up`; after its `destroy`, those it had, said destroyed.
    fn outputs(
        &mut self,
        run_id: &str,
        of: &RunOf,
        project: &ProjectRecord,
        read: Option<&Outputs>,
    ) {
        let leaves = match (of.operation, read) {
            (Operation::Up, Some(outputs)) => Leaves::Recorded(
                run_id.to_string(),
                serde_json::to_string(outputs).unwrap_or_else(|_| r#"{"values":{}}"#.into()),
            ),
            (Operation::Destroy, _) => Leaves::Destroyed(run_id.to_string()),
            _ => return,
        };
        (self.outputs.entry(of.stack.clone()).or_default()).insert(project.path.clone(), leaves);
    }

    pub(super) fn statements(self, store: &impl Store) -> Vec<Statement> {
        let mut statements: Vec<Statement> = (self.rows.into_iter())
            .map(|(run_id, rows, _)| rows_statement(run_id, rows))
            .collect();
        statements.extend(self.statements);
        statements.extend(self.previews);
        for (run_id, lines) in &self.lines {
            if !lines.is_empty() {
                statements.extend(store.logs_statement(run_id, lines));
            }
        }
        for (stack, projects) in self.deploys {
            let (is, not): (Vec<_>, Vec<_>) = projects.into_iter().partition(|(_, f)| f.is_some());
            if !is.is_empty() {
                let (paths, fingerprints) = is
                    .into_iter()
                    .map(|(path, f)| (path, f.unwrap_or_default()))
                    .unzip();
                statements.push(deployed_statement(stack.clone(), paths, fingerprints));
            }
            if !not.is_empty() {
                let paths = not.into_iter().map(|(path, _)| path).collect();
                statements.push(undeployed_statement(stack, paths));
            }
        }
        for (stack, projects) in self.outputs {
            let mut gone: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (path, leaves) in projects {
                match leaves {
                    Leaves::Recorded(run_id, outputs) => statements.push((
                        "INSERT INTO {p}outputs (stack, project, run_id, outputs) VALUES ($1, $2, $3, $4)
                         ON CONFLICT (stack, project) DO UPDATE SET run_id = excluded.run_id, outputs = excluded.outputs, destroyed = NULL",
                        vec![
                            Value::Text(stack.clone()),
                            Value::Text(path),
                            Value::Text(run_id),
                            Value::Text(outputs),
                        ],
                    )),
                    Leaves::Destroyed(run_id) => gone.entry(run_id).or_default().push(path),
                }
            }
            for (run_id, paths) in gone {
                statements.push((
                    "UPDATE {p}outputs SET destroyed = $2 WHERE stack = $1 AND project IN (SELECT value FROM {list $3})",
                    vec![Value::Text(stack.clone()), Value::Text(run_id), Value::Texts(paths)],
                ));
            }
        }
        statements
    }
}

/// Projects now deployed on `stack`, with their fingerprints.
pub(super) fn deployed_statement(
    stack: String,
    paths: Vec<String>,
    fingerprints: Vec<String>,
) -> Statement {
    (
        "INSERT INTO {p}deployed (stack, project, fingerprint)
         SELECT $1, first, second FROM {pairs $2 $3} WHERE true
         ON CONFLICT (stack, project) DO UPDATE SET fingerprint = excluded.fingerprint",
        vec![
            Value::Text(stack),
            Value::Texts(paths),
            Value::Texts(fingerprints),
        ],
    )
}

/// Projects deployed on `stack` no more.
pub(super) fn undeployed_statement(stack: String, paths: Vec<String>) -> Statement {
    (
        "DELETE FROM {p}deployed WHERE stack = $1 AND project IN (SELECT value FROM {list $2})",
        vec![Value::Text(stack), Value::Texts(paths)],
    )
}

/// A batch's project rows of one run (`$2`, a JSON array of rows), each a project started or
/// ended: one that started again (a job retried) has no reason any more; one that ends keeps
/// when it started, and its fingerprint, when it does not say them.
const ROWS: &str = "INSERT INTO {p}projects (run_id, path, status, started, finished, exit_code, changes, reason, log, fingerprint)
     SELECT $1, path, status, started, finished, exit_code, changes, reason, log, fingerprint
     FROM {rows $2: path, status, started, finished, exit_code:int, changes, reason, log, fingerprint} WHERE true
     ON CONFLICT (run_id, path) DO UPDATE SET status = excluded.status,
       started = COALESCE(excluded.started, {p}projects.started), finished = excluded.finished,
       exit_code = excluded.exit_code, changes = excluded.changes, reason = excluded.reason,
       log = excluded.log, fingerprint = COALESCE(excluded.fingerprint, {p}projects.fingerprint)";

/// A project's row as `ROWS` reads it.
fn row_of(p: &ProjectRecord) -> serde_json::Value {
    serde_json::json!({
        "path": p.path,
        "status": p.status.as_str(),
        "started": p.started,
        "finished": p.finished,
        "exit_code": p.exit_code,
        "changes": p.changes.as_ref().map(|c| serde_json::to_string(c).expect("counts serialize")),
        "reason": p.reason,
        "log": p.log,
        "fingerprint": p.fingerprint,
    })
}

/// The rows of `rows` (each `row_of` a project) in run `run_id`.
fn rows_statement(run_id: String, rows: Vec<serde_json::Value>) -> Statement {
    (
        ROWS,
        vec![
            Value::Text(run_id),
            Value::Text(serde_json::Value::Array(rows).to_string()),
        ],
    )
}

/// A run's projects as it starts, `waiting`, in its order (`paths`).
pub(super) fn waiting_statement(run_id: &str, paths: &[String]) -> Statement {
    let rows = (paths.iter())
        .map(|path| {
            row_of(&ProjectRecord {
                path: path.clone(),
                status: crate::status::ProjectStatus::Waiting,
                started: None,
                finished: None,
                exit_code: None,
                changes: None,
                reason: None,
                log: None,
                fingerprint: None,
            })
        })
        .collect();
    rows_statement(run_id.to_string(), rows)
}

/// A project's row at its end (it may never have started: a job that failed before it).
pub(super) fn finished_statement(run_id: &str, project: &ProjectRecord) -> Statement {
    rows_statement(run_id.to_string(), vec![row_of(project)])
}

/// Why a project its run never started, and said nothing of, is skipped once the run ended.
pub const NOT_STARTED: &str = "not started: the run ended before it";

/// The run's end, which releases its lock, with what the policies said of it.
fn finish_statements(
    run_id: &str,
    status: RunStatus,
    finished: &str,
    policy: Option<&str>,
) -> Vec<Statement> {
    vec![
        // A run whose lock was taken over was recorded abandoned by the run that took it: that
        // record stands.
        (
            "UPDATE {p}runs SET status = $2, finished = $3, policy = COALESCE($4, policy)
             WHERE run_id = $1 AND status = 'running'",
            vec![
                run_id.into(),
                status.as_str().into(),
                finished.into(),
                policy.into(),
            ],
        ),
        // No project stays running once its run ended: one whose end was not recorded (a write
        // lost) is abandoned — until a journal that kept it says how it ended.
        (
            "UPDATE {p}projects SET status = 'abandoned' WHERE run_id = $1 AND status = 'running'",
            vec![run_id.into()],
        ),
        // Nor waiting: one it never started (it ended before them, its end said nothing of
        // them) was skipped.
        (
            "UPDATE {p}projects SET status = 'skipped', reason = COALESCE(reason, $2)
             WHERE run_id = $1 AND status = 'waiting' AND finished IS NULL",
            vec![run_id.into(), NOT_STARTED.into()],
        ),
        (
            "DELETE FROM {p}locks WHERE run_id = $1",
            vec![run_id.into()],
        ),
    ]
}

/// The projects that now have `stack` on `backend`, and those found without it: a statement
/// each, however many there are.
fn stacks_statements(
    backend: &str,
    stack: &str,
    exist: &[String],
    gone: &[String],
) -> Vec<Statement> {
    let mut statements = Vec::new();
    if !exist.is_empty() {
        statements.push((
            // `WHERE true`: SQLite reads an `ON` after a `FROM` as a join's without it.
            "INSERT INTO {p}stacks (backend, stack, project)
             SELECT $1, $2, value FROM {list $3} WHERE true ON CONFLICT DO NOTHING",
            vec![backend.into(), stack.into(), Value::Texts(exist.to_vec())],
        ));
    }
    if !gone.is_empty() {
        statements.push((
            "DELETE FROM {p}stacks WHERE backend = $1 AND stack = $2
             AND project IN (SELECT value FROM {list $3})",
            vec![backend.into(), stack.into(), Value::Texts(gone.to_vec())],
        ));
    }
    statements
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_finished_project_leaves_deployed() {
        assert_eq!(deployed(Operation::Up, Some("f1")), Deployed::Is("f1"));
        assert_eq!(deployed(Operation::Up, None), Deployed::Not);
        assert_eq!(deployed(Operation::Destroy, Some("f1")), Deployed::Not);
        assert_eq!(deployed(Operation::Preview, Some("f1")), Deployed::Kept);
        assert_eq!(deployed(Operation::Refresh, None), Deployed::Kept);
    }

    #[test]
    fn an_end_kept_by_an_older_mara_still_reads() {
        let old = r#"{"write":"project_finished","run_id":"r1","project":{"path":"vpc","status":"succeeded","started":null,"finished":null,"exit_code":0,"changes":null,"reason":null,"log":null,"fingerprint":null}}"#;
        let entry: Entry = serde_json::from_str(old).unwrap();
        assert!(matches!(entry, Entry::ProjectFinished { of: None, .. }));
        assert!(entry.is_an_end());
    }
}
