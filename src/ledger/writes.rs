//! A run's writes to its ledger, as data (`Entry`), and how a batch of them is made
//! (docs/commands.md, "status, history, logs"): every write of a batch in one transaction, its
//! statements sent to a server at once (`Store::write_all`), each built from what the run knows —
//! none reads the ledger first. The same entries are what the journal keeps (`journal`).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::records::Records;
use super::store::{Statement, Store, Value};
use super::{Ledger, ProjectRecord};
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
    },
    Logs {
        run_id: String,
        lines: Vec<(String, String)>,
    },
    Finish {
        run_id: String,
        status: RunStatus,
        finished: String,
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
        (Operation::Preview | Operation::Refresh, _) => Deployed::Kept,
    }
}

impl<S: Store> Records<S> {
    /// Makes `entries` in order, in one transaction. A project that starts and ends in the
    /// same batch is written once, as it ended, where it started (so runs list their projects
    /// in the order they started). A project's end kept by an older mara (its run's stack and
    /// operation not with it) reads them, in a transaction of its own.
    pub(super) fn write_entries(&mut self, entries: &[Entry]) -> Result<()> {
        let ends: HashMap<(&str, &str), usize> = (entries.iter().enumerate())
            .filter_map(|(i, entry)| match entry {
                Entry::ProjectFinished {
                    run_id,
                    project,
                    of: Some(_),
                } => Some(((run_id.as_str(), project.path.as_str()), i)),
                _ => None,
            })
            .collect();
        let mut written = vec![false; entries.len()];
        let mut batch = Batch::default();
        for (i, entry) in entries.iter().enumerate() {
            let entry = match entry {
                Entry::ProjectStarted { run_id, path, .. } => {
                    match ends.get(&(run_id.as_str(), path.as_str())) {
                        Some(&end) if end > i => {
                            written[end] = true;
                            &entries[end]
                        }
                        _ => entry,
                    }
                }
                _ if written[i] => continue,
                Entry::ProjectFinished {
                    run_id,
                    project,
                    of: None,
                } => {
                    self.store
                        .write_all(&std::mem::take(&mut batch.statements))?;
                    self.project_finished(run_id, project)?;
                    continue;
                }
                entry => entry,
            };
            batch.add(entry);
        }
        let statements = batch.statements(&self.store);
        self.store.write_all(&statements)
    }
}

/// A batch's statements as it is read, entry by entry. Its log lines go in one statement per
/// run, and what its projects leave deployed in one per stack, after the rest.
#[derive(Default)]
struct Batch {
    statements: Vec<Statement>,
    lines: BTreeMap<String, Vec<(String, String)>>,
    /// By stack: the projects now deployed, with their fingerprints.
    deployed: BTreeMap<String, (Vec<String>, Vec<String>)>,
    /// By stack: the projects deployed no more.
    undeployed: BTreeMap<String, Vec<String>>,
}

impl Batch {
    fn add(&mut self, entry: &Entry) {
        match entry {
            Entry::ProjectStarted {
                run_id,
                path,
                started,
                fingerprint,
            } => (self.statements).push(started_statement(
                run_id,
                path,
                started,
                fingerprint.as_deref(),
            )),
            Entry::ProjectFinished {
                run_id,
                project,
                of,
            } => {
                self.statements.push(finished_statement(run_id, project));
                if let Some(of) = of.as_ref().filter(|_| project.status.is_success()) {
                    let path = project.path.clone();
                    match deployed(of.operation, project.fingerprint.as_deref()) {
                        Deployed::Is(fingerprint) => {
                            let stack = self.deployed.entry(of.stack.clone()).or_default();
                            stack.0.push(path);
                            stack.1.push(fingerprint.to_string());
                        }
                        Deployed::Not => {
                            (self.undeployed.entry(of.stack.clone()).or_default()).push(path)
                        }
                        Deployed::Kept => {}
                    }
                }
            }
            Entry::Logs { run_id, lines } => {
                (self.lines.entry(run_id.clone()).or_default()).extend(lines.iter().cloned())
            }
            Entry::Finish {
                run_id,
                status,
                finished,
            } => (self.statements).extend(finish_statements(run_id, *status, finished)),
            Entry::StacksChanged {
                backend,
                stack,
                exist,
                gone,
            } => (self.statements).extend(stacks_statements(backend, stack, exist, gone)),
        }
    }

    fn statements(mut self, store: &impl Store) -> Vec<Statement> {
        for (run_id, lines) in &self.lines {
            if !lines.is_empty() {
                self.statements.extend(store.logs_statement(run_id, lines));
            }
        }
        for (stack, (paths, fingerprints)) in self.deployed {
            self.statements.push((
                "INSERT INTO {p}deployed (stack, project, fingerprint)
                 SELECT $1, first, second FROM {pairs $2 $3} WHERE true
                 ON CONFLICT (stack, project) DO UPDATE SET fingerprint = excluded.fingerprint",
                vec![
                    Value::Text(stack),
                    Value::Texts(paths),
                    Value::Texts(fingerprints),
                ],
            ));
        }
        for (stack, paths) in self.undeployed {
            self.statements.push((
                "DELETE FROM {p}deployed WHERE stack = $1 AND project IN (SELECT value FROM {list $2})",
                vec![Value::Text(stack), Value::Texts(paths)],
            ));
        }
        self.statements
    }
}

/// A project started (again, when a job is retried: then it has no reason any more).
pub(super) fn started_statement(
    run_id: &str,
    path: &str,
    started: &str,
    fingerprint: Option<&str>,
) -> Statement {
    (
        "INSERT INTO {p}projects (run_id, path, status, started, fingerprint) VALUES ($1, $2, 'running', $3, $4)
         ON CONFLICT (run_id, path) DO UPDATE SET status = 'running', started = $3, fingerprint = $4, reason = NULL",
        vec![run_id.into(), path.into(), started.into(), fingerprint.into()],
    )
}

/// A project's row at its end (it may never have started: a job that failed before it).
pub(super) fn finished_statement(run_id: &str, project: &ProjectRecord) -> Statement {
    (
        "INSERT INTO {p}projects (run_id, path, status, started, finished, exit_code, changes, reason, log, fingerprint)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT (run_id, path) DO UPDATE SET status = $3,
           started = COALESCE($4, {p}projects.started), finished = $5, exit_code = $6,
           changes = $7, reason = $8, log = $9, fingerprint = COALESCE($10, {p}projects.fingerprint)",
        project_values(run_id, project).to_vec(),
    )
}

/// What a project's end leaves deployed on `stack`, if it changes anything.
pub(super) fn deployed_statement(
    stack: &str,
    path: &str,
    deployed: Deployed<'_>,
) -> Option<Statement> {
    match deployed {
        Deployed::Is(fingerprint) => Some((
            "INSERT INTO {p}deployed (stack, project, fingerprint) VALUES ($1, $2, $3)
             ON CONFLICT (stack, project) DO UPDATE SET fingerprint = $3",
            vec![stack.into(), path.into(), fingerprint.into()],
        )),
        Deployed::Not => Some((
            "DELETE FROM {p}deployed WHERE stack = $1 AND project = $2",
            vec![stack.into(), path.into()],
        )),
        Deployed::Kept => None,
    }
}

/// The run's end, which releases its lock.
fn finish_statements(run_id: &str, status: RunStatus, finished: &str) -> Vec<Statement> {
    vec![
        // A run whose lock was taken over was recorded abandoned by the run that took it: that
        // record stands.
        (
            "UPDATE {p}runs SET status = $2, finished = $3 WHERE run_id = $1 AND status = 'running'",
            vec![run_id.into(), status.as_str().into(), finished.into()],
        ),
        // No project stays running once its run ended: one whose end was not recorded (a write
        // lost) is abandoned — until a journal that kept it says how it ended.
        (
            "UPDATE {p}projects SET status = 'abandoned' WHERE run_id = $1 AND status = 'running'",
            vec![run_id.into()],
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

/// A project's row, in the order `{p}projects` takes its columns.
pub(super) fn project_values(run_id: &str, p: &ProjectRecord) -> [Value; 10] {
    let changes = match &p.changes {
        Some(c) => Value::Text(serde_json::to_string(c).expect("counts serialize")),
        None => Value::Null,
    };
    [
        run_id.into(),
        (&p.path).into(),
        p.status.as_str().into(),
        (&p.started).into(),
        (&p.finished).into(),
        p.exit_code.into(),
        changes,
        (&p.reason).into(),
        (&p.log).into(),
        (&p.fingerprint).into(),
    ]
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
