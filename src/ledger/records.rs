//! The ledger's contract, kept once for both backends: every statement mara makes of its records
//! and every rule about them — who may take a lock over, what a finished project leaves deployed,
//! how a run is abandoned, the order a forgotten run's rows go in — written here, against a
//! `store::Store` that speaks one dialect (`sqlite::Sqlite`, `postgres::Postgres`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use super::store::{Read, Row, Store, Tx, Value};
use super::writes::{self, Entry};

use super::access::{Act, Action, Actor, Role, Token, Via};
use super::{
    Begun, History, Holder, ImageRecord, Ledger, ProjectRecord, RunRecord, RunStart, whoami,
};
use crate::engine::state::Shared;
use crate::engine::{Changes, Operation};
use crate::error::{Error, Problem, Result};
use crate::status::{ProjectStatus, RunStatus};

/// The ledger on a store: every method of the contract, for both backends.
pub struct Records<S: Store> {
    pub(super) store: S,
    user: String,
    host: String,
}

/// What the ledger read, said as it closes (`MARA_LOG=mara::ledger=debug`): what the tests and
/// the benchmarks count (`store::Reads`).
impl<S: Store> Drop for Records<S> {
    fn drop(&mut self) {
        let reads = self.store.reads();
        tracing::debug!(target: "mara::ledger", queries = reads.queries, rows = reads.rows, steps = reads.steps, "ledger read");
    }
}

/// The tables a forgotten run's rows are deleted from, in this order (the locks and log lines
/// name its run, whose projects name it too): whether a store keeps log lines says if
/// `log_lines` is there.
const FORGET: [&str; 7] = [
    "DELETE FROM {p}audit WHERE run_id = $1",
    "DELETE FROM {p}run_inputs WHERE run_id = $1",
    "DELETE FROM {p}previews WHERE run_id = $1",
    "DELETE FROM {p}locks WHERE run_id = $1",
    "DELETE FROM {p}log_lines WHERE run_id = $1",
    "DELETE FROM {p}projects WHERE run_id = $1",
    "DELETE FROM {p}runs WHERE run_id = $1",
];

/// A run's columns, in the order `run` reads them.
macro_rules! run_columns {
    () => {
        "run_id, operation, provider, stack, {user}, host, pid, command, started, finished, status, {lapsed}, selected, graph, policy"
    };
}

const HOLDER: &str = "SELECT r.run_id, r.{user}, r.host, r.pid, r.started, r.command, {lease_left}
     FROM {p}locks l JOIN {p}runs r ON r.run_id = l.run_id WHERE l.stack = $1";

/// Every stack's holder, the stack last.
const HOLDERS: &str =
    "SELECT r.run_id, r.{user}, r.host, r.pid, r.started, r.command, {lease_left}, l.stack
     FROM {p}locks l JOIN {p}runs r ON r.run_id = l.run_id";

/// The runs newest first, a page of them: of every stack, or of one (`$1`); the first page, or
/// those after the run of start and id `$N`, `$N+1` (the last of the page before). Each is an
/// index's order (`runs_by_start`, `runs_by_stack`), read no further than the page.
const RUNS: [&str; 4] = [
    concat!(
        "SELECT ",
        run_columns!(),
        " FROM {p}runs ORDER BY started DESC, run_id DESC LIMIT $1"
    ),
    concat!(
        "SELECT ",
        run_columns!(),
        " FROM {p}runs WHERE stack = $1 ORDER BY started DESC, run_id DESC LIMIT $2"
    ),
    concat!(
        "SELECT ",
        run_columns!(),
        " FROM {p}runs WHERE (started, run_id) < ($1, $2)
         ORDER BY started DESC, run_id DESC LIMIT $3"
    ),
    concat!(
        "SELECT ",
        run_columns!(),
        " FROM {p}runs WHERE stack = $1 AND (started, run_id) < ($2, $3)
         ORDER BY started DESC, run_id DESC LIMIT $4"
    ),
];

/// The last run of each (stack, operation) pair of `$1` and `$2`: one seek each in
/// `runs_by_operation`, whatever the history.
const LAST_RUNS: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM {p}runs WHERE run_id IN (
       SELECT (SELECT r.run_id FROM {p}runs r WHERE r.stack = first AND r.operation = second
               ORDER BY r.started DESC, r.run_id DESC LIMIT 1)
       FROM {pairs $1 $2})
     ORDER BY started DESC, run_id DESC"
);

/// Every stack a run is recorded of: from one to the next in `runs_by_stack` (a loose index
/// scan), one seek a stack rather than a step a run.
const STACKS: &str = "WITH RECURSIVE found (stack) AS (
       SELECT MIN(stack) FROM {p}runs
       UNION ALL
       SELECT (SELECT MIN(r.stack) FROM {p}runs r WHERE r.stack > found.stack)
       FROM found WHERE found.stack IS NOT NULL
     )
     SELECT stack FROM found WHERE stack IS NOT NULL";

impl<S: Store> Records<S> {
    /// Makes `entries` in order, in one transaction (`writes::Batch`). A project's end kept by
    /// an older mara (its run's stack and operation not with it) reads them, in a transaction of
    /// its own.
    fn write_entries(&mut self, entries: &[Entry]) -> Result<()> {
        let mut batch = writes::Batch::default();
        for entry in entries {
            match entry {
                Entry::ProjectFinished {
                    run_id,
                    project,
                    of: None,
                    ..
                } => {
                    let before = std::mem::take(&mut batch).statements(&self.store);
                    self.store.write_all(&before)?;
                    self.project_finished(run_id, project)?;
                }
                entry => batch.add(entry),
            }
        }
        let statements = batch.statements(&self.store);
        self.store.write_all(&statements)
    }

    pub fn new(store: S) -> Records<S> {
        let (user, host) = whoami();
        Records { store, user, host }
    }

    fn unreadable(&self, message: String) -> Error {
        unreadable(self.store.shown(), message)
    }

    fn read_holder(&self, found: Option<Read<Holder>>) -> Result<Option<Holder>> {
        found.transpose().map_err(|m| self.unreadable(m))
    }

    fn projects(&self, run_id: &str) -> Result<Vec<ProjectRecord>> {
        let rows = self.store.query(
            "SELECT path, status, started, finished, exit_code, changes, reason, log, fingerprint
             FROM {p}projects WHERE run_id = $1 ORDER BY {order}",
            &[run_id.into()],
        )?;
        rows.iter()
            .map(project)
            .collect::<Read<Vec<_>>>()
            .map_err(|m| self.unreadable(m))
    }

    /// The runs of `rows`, each with the actions done to it.
    fn runs_from(&self, rows: Vec<Row>) -> Result<Vec<RunRecord>> {
        let leased = self.store.lease().is_some();
        let mut runs = rows
            .iter()
            .map(|row| run(row, leased))
            .collect::<Read<Vec<_>>>()
            .map_err(|m| self.unreadable(m))?;
        if runs.is_empty() {
            return Ok(runs);
        }
        let ids: Vec<String> = runs.iter().map(|r| r.run_id.clone()).collect();
        let rows = self.store.query(
            "SELECT at, action, stack, run_id, actor, via FROM {p}audit
             WHERE run_id IN (SELECT value FROM {list $1}) ORDER BY at, action",
            &[Value::Texts(ids)],
        )?;
        for row in &rows {
            let action = action(row).map_err(|m| self.unreadable(m))?;
            if let Some(run) = runs.iter_mut().find(|r| r.run_id == action.run_id) {
                run.actions.push(action);
            }
        }
        Ok(runs)
    }

    fn pairs(&self, sql: &'static str) -> Result<Vec<(String, String)>> {
        let rows = self.store.query(sql, &[])?;
        rows.iter()
            .map(|r| Ok((r.text(0)?, r.text(1)?)))
            .collect::<Read<Vec<_>>>()
            .map_err(|m| self.unreadable(m))
    }

    fn triples(&self, sql: &'static str) -> Result<Vec<(String, String, String)>> {
        let rows = self.store.query(sql, &[])?;
        rows.iter()
            .map(|r| Ok((r.text(0)?, r.text(1)?, r.text(2)?)))
            .collect::<Read<Vec<_>>>()
            .map_err(|m| self.unreadable(m))
    }

    /// The runs a retention does not keep (`Ledger::prune`), oldest first. Only the runs past
    /// its bounds are read — started before `since` (`runs_by_start`), past the newest `newest`
    /// (stepped over in that index, not read) — with the newest run of each of their stacks
    /// and the locks: what it keeps costs an index's step, and no more as the history grows.
    fn unkept(&self, since: Option<&str>, newest: Option<usize>) -> Result<Vec<String>> {
        let mut past = Vec::new();
        if let Some(since) = since {
            past.extend(self.store.query(
                "SELECT run_id, stack, started, status FROM {p}runs WHERE started < $1",
                &[since.into()],
            )?);
        }
        if let Some(newest) = newest {
            let newest = Value::Int(newest.min(i64::MAX as usize) as i64);
            past.extend(self.store.query(
                "SELECT run_id, stack, started, status FROM {p}runs
                 ORDER BY started DESC, run_id DESC LIMIT $2 OFFSET $1",
                &[newest, Value::Int(i64::MAX)],
            )?);
        }
        if past.is_empty() {
            return Ok(Vec::new());
        }
        let read = || -> Read<BTreeMap<(String, String), (String, String)>> {
            (past.iter())
                .map(|r| Ok(((r.text(2)?, r.text(0)?), (r.text(1)?, r.text(3)?))))
                .collect()
        };
        let past = read().map_err(|m| self.unreadable(m))?;
        let stacks: BTreeSet<&String> = past.values().map(|(stack, _)| stack).collect();
        let newest_of = self.store.query(
            "SELECT (SELECT r.run_id FROM {p}runs r WHERE r.stack = value
                     ORDER BY r.started DESC, r.run_id DESC LIMIT 1) FROM {list $1}",
            &[Value::Texts(stacks.into_iter().cloned().collect())],
        )?;
        let held = self.store.query("SELECT run_id FROM {p}locks", &[])?;
        let kept = (newest_of.iter().chain(&held))
            .filter_map(|r| r.opt_text(0).transpose())
            .collect::<Read<BTreeSet<String>>>()
            .map_err(|m| self.unreadable(m))?;
        Ok(past
            .into_iter()
            .filter(|((_, run_id), (_, status))| {
                !kept.contains(run_id) && status != RunStatus::Running.as_str()
            })
            .map(|((_, run_id), _)| run_id)
            .collect())
    }

    /// The images recorded for `host` and `stack` (every one's with `None`), by host, stack and
    /// name.
    fn images_where(&self, host: Option<&str>, stack: Option<&str>) -> Result<Vec<ImageRecord>> {
        let rows = self.store.query(
            "SELECT host, stack, image, image_id, cluster, imported FROM {p}images
             WHERE (CAST($1 AS TEXT) IS NULL OR host = $1) AND (CAST($2 AS TEXT) IS NULL OR stack = $2)
             ORDER BY host, stack, image",
            &[host.into(), stack.into()],
        )?;
        rows.iter()
            .map(|r| {
                Ok(ImageRecord {
                    host: r.text(0)?,
                    stack: r.text(1)?,
                    image: r.text(2)?,
                    image_id: r.text(3)?,
                    cluster: r.text(4)?,
                    imported: r.text(5)?,
                })
            })
            .collect::<Read<Vec<_>>>()
            .map_err(|m| self.unreadable(m))
    }
}

/// A value the store (`shown`) holds that mara cannot read.
fn unreadable(shown: &Path, message: String) -> Error {
    Error::Ledger {
        path: shown.to_path_buf(),
        message: format!("an unreadable record: {message}"),
    }
}

fn holder_of(tx: &mut dyn Tx, stack: &str) -> Result<Option<Read<Holder>>> {
    let rows = tx.query(HOLDER, &[stack.into()])?;
    Ok(rows.first().map(holder))
}

/// Records run `run_id` abandoned at `at` (unless it ended), with its running projects: its
/// lock was taken over or cleared.
fn abandon(tx: &mut dyn Tx, run_id: &str, at: &str) -> Result<()> {
    tx.execute(
        "UPDATE {p}runs SET status = 'abandoned', finished = COALESCE(finished, $2)
         WHERE run_id = $1 AND status = 'running'",
        &[run_id.into(), at.into()],
    )?;
    tx.execute(
        "UPDATE {p}projects SET status = 'abandoned' WHERE run_id = $1 AND status = 'running'",
        &[run_id.into()],
    )?;
    tx.execute(
        "UPDATE {p}projects SET status = 'skipped', reason = $2
         WHERE run_id = $1 AND status = 'waiting' AND finished IS NULL",
        &[run_id.into(), super::NOT_STARTED_ABANDONED.into()],
    )?;
    Ok(())
}

/// Records `by`'s `act` on run `run_id` of `stack`, now.
fn audit(tx: &mut dyn Tx, act: Act, stack: &str, run_id: &str, by: &Actor) -> Result<()> {
    let now = crate::clock::rfc3339(std::time::SystemTime::now());
    let action = Action {
        at: now,
        act,
        stack: stack.to_string(),
        run_id: run_id.to_string(),
        by: by.name.clone(),
        via: by.via,
    };
    tx.execute(AUDIT, &action_values(&action))?;
    Ok(())
}

const AUDIT: &str =
    "INSERT INTO {p}audit (at, action, stack, run_id, actor, via) VALUES ($1, $2, $3, $4, $5, $6)";

/// An action's row, in the order `{p}audit` takes its columns.
fn action_values(a: &Action) -> [Value; 6] {
    [
        (&a.at).into(),
        a.act.as_str().into(),
        (&a.stack).into(),
        (&a.run_id).into(),
        (&a.by).into(),
        a.via.as_str().into(),
    ]
}

fn action(row: &Row) -> Read<Action> {
    Ok(Action {
        at: row.text(0)?,
        act: row.parsed(1, Act::parse, "action")?,
        stack: row.text(2)?,
        run_id: row.text(3)?,
        by: row.text(4)?,
        via: row.parsed(5, Via::parse, "place an action came from")?,
    })
}

fn token(row: &Row) -> Read<Token> {
    Ok(Token {
        name: row.text(0)?,
        role: row.parsed(1, Role::parse, "role")?,
        digest: row.text(2)?,
        created: row.text(3)?,
        created_by: row.text(4)?,
        last_used: row.opt_text(5)?,
    })
}

fn holder(row: &Row) -> Read<Holder> {
    Ok(Holder {
        run_id: row.text(0)?,
        user: row.text(1)?,
        host: row.text(2)?,
        pid: row.int(3)? as u32,
        started: row.text(4)?,
        command: row.text(5)?,
        lease_left: row.opt_int(6)?.map(|left| left.max(0) as u64),
    })
}

fn run(row: &Row, leased: bool) -> Read<RunRecord> {
    let lapsed = row.truth(11)?;
    Ok(RunRecord {
        run_id: row.text(0)?,
        operation: row.parsed(1, Operation::parse, "operation")?,
        provider: row.text(2)?,
        stack: row.text(3)?,
        user: row.text(4)?,
        host: row.text(5)?,
        pid: row.int(6)? as u32,
        command: row.text(7)?,
        started: row.text(8)?,
        finished: row.opt_text(9)?,
        status: match lapsed {
            true => RunStatus::Abandoned,
            false => row.parsed(10, RunStatus::parse, "run status")?,
        },
        projects: Vec::new(),
        selected: row
            .opt_int(12)?
            .map(|n| n.clamp(0, i64::from(u32::MAX)) as u32),
        graph: match row.opt_text(13)? {
            Some(text) => {
                Some(serde_json::from_str(&text).map_err(|e| format!("a run's graph: {e}"))?)
            }
            None => None,
        },
        policy: match row.opt_text(14)? {
            Some(text) => Some(
                serde_json::from_str(&text).map_err(|e| format!("a run's policy messages: {e}"))?,
            ),
            None => None,
        },
        leased,
        actions: Vec::new(),
    })
}

fn project(row: &Row) -> Read<ProjectRecord> {
    let changes: Option<Changes> = row.opt_text(5)?.and_then(|c| serde_json::from_str(&c).ok());
    Ok(ProjectRecord {
        path: row.text(0)?,
        status: row.parsed(1, ProjectStatus::parse, "project status")?,
        started: row.opt_text(2)?,
        finished: row.opt_text(3)?,
        exit_code: row.opt_int(4)?.map(|c| c as i32),
        changes,
        reason: row.opt_text(6)?,
        log: row.opt_text(7)?,
        fingerprint: row.opt_text(8)?,
    })
}

/// An image's row, in the order `{p}images` takes its columns.
fn image_values(i: &ImageRecord) -> [Value; 6] {
    [
        &i.host,
        &i.stack,
        &i.image,
        &i.image_id,
        &i.cluster,
        &i.imported,
    ]
    .map(Value::from)
}

/// A run's graph as its row keeps it: JSON, (needed, needing) pairs of paths.
fn graph_text(graph: &[(String, String)]) -> String {
    serde_json::to_string(graph).expect("pairs of strings serialize")
}

/// A project's row, in the order `{p}projects` takes its columns.
fn project_values(run_id: &str, p: &ProjectRecord) -> [Value; 10] {
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

/// `an up`, `a preview`.
fn article(operation: &str) -> String {
    match operation.starts_with(['a', 'e', 'i', 'o', 'u']) {
        true => format!("an {operation}"),
        false => format!("a {operation}"),
    }
}

impl<S: Store> Ledger for Records<S> {
    fn export(&self) -> Result<History> {
        let mut runs = self.runs(None, usize::MAX >> 1)?;
        runs.reverse();
        for run in &mut runs {
            run.projects = self.projects(&run.run_id)?;
        }
        Ok(History {
            runs,
            deployed: self
                .triples("SELECT stack, project, fingerprint FROM {p}deployed ORDER BY 1, 2")?,
            stacks: self
                .triples("SELECT backend, stack, project FROM {p}stacks ORDER BY 1, 2, 3")?,
            images: self.images_where(None, None)?,
            run_inputs: self.pairs("SELECT run_id, inputs FROM {p}run_inputs ORDER BY 1")?,
            previews: self
                .triples("SELECT run_id, path, preview FROM {p}previews ORDER BY 1, 2")?,
            outputs: {
                let rows = self.store.query(
                    "SELECT stack, project, run_id, outputs, destroyed FROM {p}outputs ORDER BY 1, 2",
                    &[],
                )?;
                rows.iter()
                    .map(|r| {
                        Ok((
                            r.text(0)?,
                            r.text(1)?,
                            r.text(2)?,
                            r.text(3)?,
                            r.opt_text(4)?,
                        ))
                    })
                    .collect::<Read<Vec<_>>>()
                    .map_err(|m| self.unreadable(m))?
            },
        })
    }

    fn import(&mut self, history: &History) -> Result<Vec<String>> {
        let mut added = Vec::new();
        self.store.transaction(None, &mut |tx| {
            added.clear();
            for run in &history.runs {
                let inserted = tx.execute(
                    "INSERT INTO {p}runs (run_id, operation, provider, stack, {user}, host, pid, command, started, finished, status, selected, graph, policy)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) ON CONFLICT DO NOTHING",
                    &[
                        (&run.run_id).into(),
                        run.operation.as_str().into(),
                        (&run.provider).into(),
                        (&run.stack).into(),
                        (&run.user).into(),
                        (&run.host).into(),
                        i64::from(run.pid).into(),
                        (&run.command).into(),
                        (&run.started).into(),
                        (&run.finished).into(),
                        run.status.as_str().into(),
                        run.selected.map(i64::from).into(),
                        (&run.graph.as_deref().map(graph_text)).into(),
                        (&run.policy.as_ref().and_then(|d| serde_json::to_string(d).ok())).into(),
                    ],
                )?;
                if inserted == 0 {
                    continue;
                }
                added.push(run.run_id.clone());
                for action in &run.actions {
                    tx.execute(AUDIT, &action_values(action))?;
                }
                for p in &run.projects {
                    tx.execute(
                        "INSERT INTO {p}projects (run_id, path, status, started, finished, exit_code, changes, reason, log, fingerprint)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING",
                        &project_values(&run.run_id, p),
                    )?;
                }
            }
            import_kept(tx, history)
        })?;
        Ok(added)
    }

    fn lease(&self) -> Option<Duration> {
        self.store.lease()
    }

    fn renew(&mut self, run_id: &str) -> Result<bool> {
        self.store.renew(run_id)
    }

    fn stores_logs(&self) -> bool {
        self.store.stores_logs()
    }

    fn over_tls(&self) -> Result<bool> {
        self.store.over_tls()
    }

    fn make_for_engines(&mut self, shared: &[Shared]) -> Result<Vec<&'static str>> {
        let missing = |tx: &mut dyn Tx, name: &'static str| -> Result<bool> {
            let rows = tx.query(
                "SELECT CASE WHEN to_regclass($1) IS NULL THEN 1 ELSE 0 END",
                &[name.into()],
            )?;
            Ok(rows.first().and_then(|r| r.int(0).ok()) == Some(1))
        };
        // Checked first without a transaction: a user that may not create (a team's runner)
        // finds them there.
        let mut wanted = Vec::new();
        for one in shared {
            let rows = self.store.query(
                "SELECT CASE WHEN to_regclass($1) IS NULL THEN 1 ELSE 0 END",
                &[one.name.into()],
            )?;
            if rows.first().and_then(|r| r.int(0).ok()) == Some(1) {
                wanted.push(*one);
            }
        }
        let mut made = Vec::new();
        if wanted.is_empty() {
            return Ok(made);
        }
        // One maker at a time, as the stack's lock is decided.
        self.store.transaction(Some(" engines' state"), &mut |tx| {
            made.clear();
            for one in &wanted {
                if missing(tx, one.name)? {
                    tx.execute(one.make, &[])?;
                    made.push(one.name);
                }
            }
            Ok(())
        })?;
        Ok(made)
    }

    fn append_logs(&mut self, run_id: &str, lines: &[(String, String)]) -> Result<()> {
        self.write_entries(&[Entry::Logs {
            run_id: run_id.to_string(),
            lines: lines.to_vec(),
        }])
    }

    fn logs(
        &self,
        run_id: &str,
        project: Option<&str>,
        after: i64,
    ) -> Result<Vec<(i64, String, String)>> {
        if !self.store.stores_logs() {
            return Ok(Vec::new());
        }
        let rows = self.store.query(
            "SELECT seq, path, line FROM {p}log_lines
             WHERE run_id = $1 AND (CAST($2 AS TEXT) IS NULL OR path = $2) AND seq > $3 ORDER BY seq",
            &[run_id.into(), project.into(), after.into()],
        )?;
        rows.iter()
            .map(|r| Ok((r.int(0)?, r.text(1)?, r.text(2)?)))
            .collect::<Read<Vec<_>>>()
            .map_err(|m| self.unreadable(m))
    }

    fn begin(&mut self, run: &RunStart, lock: bool) -> Result<Begun> {
        let (user, host) = (self.user.clone(), self.host.clone());
        let shown = self.store.shown().to_path_buf();
        let (take_lock, lease) = self.store.lock_statement();
        let mut begun = None;
        self.store.transaction(lock.then_some(run.stack.as_str()), &mut |tx| {
            let mut took_over = None;
            if lock && let Some(found) = holder_of(tx, &run.stack)? {
                let holder = found.map_err(|m| unreadable(&shown, m))?;
                // This run's own, when its commit was made and the connection lost before it
                // heard so (a server's transaction is then made again).
                if holder.run_id == run.run_id {
                    begun = Some(Begun::Started { took_over: None });
                    return Ok(());
                }
                if holder.is_live(&host) {
                    begun = Some(Begun::Held(holder));
                    return Ok(());
                }
                abandon(tx, &holder.run_id, &run.started)?;
                tx.execute("DELETE FROM {p}locks WHERE stack = $1", &[(&run.stack).into()])?;
                took_over = Some(holder);
            }
            tx.execute(
                "INSERT INTO {p}runs (run_id, operation, provider, stack, {user}, host, pid, command, started, status, selected, graph)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'running', $10, $11)",
                &[
                    (&run.run_id).into(),
                    run.operation.as_str().into(),
                    (&run.provider).into(),
                    (&run.stack).into(),
                    (&user).into(),
                    (&host).into(),
                    i64::from(std::process::id()).into(),
                    (&run.command).into(),
                    (&run.started).into(),
                    (run.projects.len() as i64).into(),
                    (&graph_text(&run.graph)).into(),
                ],
            )?;
            // Every project it selected, in its order, before any starts.
            if !run.projects.is_empty() {
                let (sql, params) = writes::waiting_statement(&run.run_id, &run.projects);
                tx.execute(sql, &params)?;
            }
            if lock {
                let mut values = vec![(&run.stack).into(), (&run.run_id).into()];
                values.extend(lease.iter().cloned());
                tx.execute(take_lock, &values)?;
            }
            begun = Some(Begun::Started { took_over });
            Ok(())
        })?;
        Ok(begun.expect("the transaction decided"))
    }

    fn project_started(
        &mut self,
        run_id: &str,
        path: &str,
        started: &str,
        fingerprint: Option<&str>,
    ) -> Result<()> {
        self.write_entries(&[Entry::ProjectStarted {
            run_id: run_id.to_string(),
            path: path.to_string(),
            started: started.to_string(),
            fingerprint: fingerprint.map(str::to_string),
        }])
    }

    /// The project's row, and what it leaves deployed as the run's record says (a run's own
    /// writes know that: `writes::Entry`), in one transaction.
    fn project_finished(&mut self, run_id: &str, project: &ProjectRecord) -> Result<()> {
        let shown = self.store.shown().to_path_buf();
        self.store.transaction(None, &mut |tx| {
            let (sql, params) = writes::finished_statement(run_id, project);
            tx.execute(sql, &params)?;
            if !project.status.is_success() {
                return Ok(());
            }
            let rows = tx.query(
                "SELECT r.operation, r.stack, p.fingerprint FROM {p}runs r
                 JOIN {p}projects p ON p.run_id = r.run_id WHERE r.run_id = $1 AND p.path = $2",
                &[run_id.into(), (&project.path).into()],
            )?;
            let Some(row) = rows.first() else {
                return Ok(());
            };
            let read = || -> Read<(Operation, String, Option<String>)> {
                Ok((
                    row.parsed(0, Operation::parse, "operation")?,
                    row.text(1)?,
                    row.opt_text(2)?,
                ))
            };
            let (operation, stack, fingerprint) = read().map_err(|m| unreadable(&shown, m))?;
            let path = vec![project.path.clone()];
            let statement = match writes::deployed(operation, fingerprint.as_deref()) {
                writes::Deployed::Is(f) => writes::deployed_statement(stack, path, vec![f.into()]),
                writes::Deployed::Not => writes::undeployed_statement(stack, path),
                writes::Deployed::Kept => return Ok(()),
            };
            tx.execute(statement.0, &statement.1)?;
            Ok(())
        })
    }

    fn write(&mut self, entries: &[Entry]) -> Result<()> {
        self.write_entries(entries)
    }

    fn finish(&mut self, run_id: &str, status: RunStatus, finished: &str) -> Result<()> {
        self.write_entries(&[Entry::Finish {
            run_id: run_id.to_string(),
            status,
            finished: finished.to_string(),
            policy: None,
        }])
    }

    fn forget(&mut self, run_id: &str) -> Result<()> {
        let logs = self.store.stores_logs();
        self.store.transaction(None, &mut |tx| {
            for sql in FORGET {
                if logs || !sql.contains("log_lines") {
                    tx.execute(sql, &[run_id.into()])?;
                }
            }
            Ok(())
        })
    }

    fn holder(&self, stack: &str) -> Result<Option<Holder>> {
        let rows = self.store.query(HOLDER, &[stack.into()])?;
        self.read_holder(rows.first().map(holder))
    }

    fn unlock(&mut self, stack: &str, by: &Actor) -> Result<Option<Holder>> {
        let mut found = None;
        self.store.transaction(Some(stack), &mut |tx| {
            found = holder_of(tx, stack)?;
            if let Some(Ok(holder)) = &found {
                let now = crate::clock::rfc3339(std::time::SystemTime::now());
                tx.execute("DELETE FROM {p}locks WHERE stack = $1", &[stack.into()])?;
                abandon(tx, &holder.run_id, &now)?;
                audit(tx, Act::Unlock, stack, &holder.run_id, by)?;
            }
            Ok(())
        })?;
        self.read_holder(found)
    }

    fn request_cancel(&mut self, stack: &str, by: &Actor) -> Result<Option<Holder>> {
        let mut found = None;
        self.store.transaction(Some(stack), &mut |tx| {
            found = holder_of(tx, stack)?;
            if let Some(Ok(holder)) = &found {
                tx.execute(
                    "UPDATE {p}runs SET cancel_requested = TRUE WHERE run_id = $1",
                    &[(&holder.run_id).into()],
                )?;
                audit(tx, Act::Cancel, stack, &holder.run_id, by)?;
            }
            Ok(())
        })?;
        self.read_holder(found)
    }

    fn tokens(&self) -> Result<Vec<Token>> {
        let rows = self.store.query(
            "SELECT name, role, digest, created, created_by, last_used FROM {p}tokens ORDER BY name",
            &[],
        )?;
        rows.iter()
            .map(token)
            .collect::<Read<Vec<_>>>()
            .map_err(|m| self.unreadable(m))
    }

    fn add_token(&mut self, t: &Token) -> Result<bool> {
        let added = self.store.execute(
            "INSERT INTO {p}tokens (name, role, digest, created, created_by)
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
            &[
                (&t.name).into(),
                t.role.as_str().into(),
                (&t.digest).into(),
                (&t.created).into(),
                (&t.created_by).into(),
            ],
        )?;
        Ok(added == 1)
    }

    fn revoke_token(&mut self, name: &str) -> Result<bool> {
        let removed = self
            .store
            .execute("DELETE FROM {p}tokens WHERE name = $1", &[name.into()])?;
        Ok(removed > 0)
    }

    fn token_used(&mut self, name: &str, at: &str) -> Result<()> {
        // Instants of one format compare as their texts do: to the minute, `2026-11-26T04:42`.
        let minute: String = at.chars().take(16).collect();
        self.store.execute(
            "UPDATE {p}tokens SET last_used = $2 WHERE name = $1 AND (last_used IS NULL OR last_used < $3)",
            &[name.into(), at.into(), (&minute).into()],
        )?;
        Ok(())
    }

    fn cancel_requested(&self, run_id: &str) -> Result<bool> {
        let rows = self.store.query(
            "SELECT cancel_requested FROM {p}runs WHERE run_id = $1",
            &[run_id.into()],
        )?;
        match rows.first() {
            Some(row) => row.truth(0).map_err(|m| self.unreadable(m)),
            None => Ok(false),
        }
    }

    fn set_lease(&mut self, lease: Duration) {
        self.store.set_lease(lease);
    }

    fn claim(&mut self, run_id: &str, paths: &[String]) -> Result<Option<String>> {
        self.store.claim(run_id, paths)
    }

    fn release(&mut self, run_id: &str) -> Result<()> {
        self.store.release(run_id)
    }

    fn join(&mut self, run_id: &str, stack: &str, operation: Operation) -> Result<()> {
        let rows = self.store.query(
            "SELECT r.stack, r.operation, r.status, r.cancel_requested,
                    EXISTS (SELECT 1 FROM {p}locks l WHERE l.run_id = r.run_id AND {live})
             FROM {p}runs r WHERE r.run_id = $1",
            &[run_id.into()],
        )?;
        let refused =
            |message: String, hint: &str| Err(Error::usage(Problem::new(message).hint(hint)));
        let Some(row) = rows.first() else {
            return refused(
                format!("there is no run `{run_id}` to join"),
                "a fanned-out run is opened first, by `mara ci open --run ID`",
            );
        };
        let read = || -> Read<(String, String, String, bool, bool)> {
            Ok((
                row.text(0)?,
                row.text(1)?,
                row.text(2)?,
                row.truth(3)?,
                row.truth(4)?,
            ))
        };
        let (their_stack, their_operation, status, cancel, leased) =
            read().map_err(|m| self.unreadable(m))?;
        if their_stack != stack || their_operation != operation.as_str() {
            return refused(
                format!(
                    "run `{run_id}` is {} of stack {their_stack}, not {} of stack {stack}",
                    article(&their_operation),
                    article(operation.as_str())
                ),
                "join a run with the operation and stack it was opened with",
            );
        }
        if cancel && status == "running" {
            return Err(Error::Interrupted);
        }
        if status != "running" || (operation.mutates() && !leased) {
            return refused(
                match status.as_str() {
                    "running" => format!(
                        "run `{run_id}` no longer holds its stack's lock: it takes no more projects"
                    ),
                    other => {
                        format!("run `{run_id}` is closed ({other}): it takes no more projects")
                    }
                },
                "open a new run (`mara ci open`)",
            );
        }
        Ok(())
    }

    fn holds_lock(&self, run_id: &str) -> Result<bool> {
        let rows = self
            .store
            .query("SELECT 1 FROM {p}locks WHERE run_id = $1", &[run_id.into()])?;
        Ok(!rows.is_empty())
    }

    fn runs(&self, stack: Option<&str>, limit: usize) -> Result<Vec<RunRecord>> {
        let limit = Value::Int(limit.min(i64::MAX as usize) as i64);
        let rows = match stack {
            None => self.store.query(RUNS[0], &[limit])?,
            Some(stack) => self.store.query(RUNS[1], &[stack.into(), limit])?,
        };
        self.runs_from(rows)
    }

    fn runs_after(
        &self,
        stack: Option<&str>,
        after: &RunRecord,
        limit: usize,
    ) -> Result<Vec<RunRecord>> {
        let limit = Value::Int(limit.min(i64::MAX as usize) as i64);
        let (started, run_id) = ((&after.started).into(), (&after.run_id).into());
        let rows = match stack {
            None => self.store.query(RUNS[2], &[started, run_id, limit])?,
            Some(stack) => (self.store).query(RUNS[3], &[stack.into(), started, run_id, limit])?,
        };
        self.runs_from(rows)
    }

    fn run(&self, run_id: &str) -> Result<Option<RunRecord>> {
        const ONE: &str = concat!("SELECT ", run_columns!(), " FROM {p}runs WHERE run_id = $1");
        let rows = self.store.query(ONE, &[run_id.into()])?;
        let Some(mut record) = self.runs_from(rows)?.pop() else {
            return Ok(None);
        };
        record.projects = self.projects(run_id)?;
        if record.status == RunStatus::Abandoned {
            record = record.abandoned();
        }
        Ok(Some(record))
    }

    fn with_projects(&self, mut runs: Vec<RunRecord>) -> Result<Vec<RunRecord>> {
        if runs.is_empty() {
            return Ok(runs);
        }
        let ids: Vec<String> = runs.iter().map(|r| r.run_id.clone()).collect();
        let rows = self.store.query(
            "SELECT path, status, started, finished, exit_code, changes, reason, log, fingerprint, run_id
             FROM {p}projects WHERE run_id IN (SELECT value FROM {list $1}) ORDER BY {order}",
            &[Value::Texts(ids)],
        )?;
        let mut of: BTreeMap<String, Vec<ProjectRecord>> = BTreeMap::new();
        for row in &rows {
            let found = project(row).and_then(|p| Ok((row.text(9)?, p)));
            let (run_id, found) = found.map_err(|m| self.unreadable(m))?;
            of.entry(run_id).or_default().push(found);
        }
        for run in &mut runs {
            run.projects = of.remove(&run.run_id).unwrap_or_default();
        }
        Ok(as_read(runs))
    }

    fn last_runs(&self, stacks: &[String], operations: &[Operation]) -> Result<Vec<RunRecord>> {
        let pairs = stacks.iter().flat_map(|s| {
            operations
                .iter()
                .map(move |o| (s.clone(), o.as_str().to_string()))
        });
        let (stacks, operations): (Vec<String>, Vec<String>) = pairs.unzip();
        if stacks.is_empty() {
            return Ok(Vec::new());
        }
        let rows =
            (self.store).query(LAST_RUNS, &[Value::Texts(stacks), Value::Texts(operations)])?;
        self.runs_from(rows)
    }

    fn holders(&self) -> Result<BTreeMap<String, Holder>> {
        let rows = self.store.query(HOLDERS, &[])?;
        rows.iter()
            .map(|r| Ok((r.text(7)?, holder(r)?)))
            .collect::<Read<_>>()
            .map_err(|m| self.unreadable(m))
    }

    fn previews_of(
        &self,
        run_ids: &[String],
    ) -> Result<BTreeMap<String, BTreeMap<String, super::Previewed>>> {
        if run_ids.is_empty() {
            return Ok(BTreeMap::new());
        }
        let rows = self.store.query(
            "SELECT run_id, path, preview FROM {p}previews
             WHERE run_id IN (SELECT value FROM {list $1})",
            &[Value::Texts(run_ids.to_vec())],
        )?;
        let mut found: BTreeMap<String, BTreeMap<String, super::Previewed>> = BTreeMap::new();
        for row in &rows {
            let read = || -> Read<(String, String, super::Previewed)> {
                let preview = serde_json::from_str(&row.text(2)?)
                    .map_err(|e| format!("a project's preview is no JSON: {e}"))?;
                Ok((row.text(0)?, row.text(1)?, preview))
            };
            let (run_id, path, preview) = read().map_err(|m| self.unreadable(m))?;
            found.entry(run_id).or_default().insert(path, preview);
        }
        Ok(found)
    }

    fn recorded(&self, run_ids: &[String]) -> Result<BTreeSet<String>> {
        if run_ids.is_empty() {
            return Ok(BTreeSet::new());
        }
        let rows = self.store.query(
            "SELECT run_id FROM {p}runs WHERE run_id IN (SELECT value FROM {list $1})",
            &[Value::Texts(run_ids.to_vec())],
        )?;
        rows.iter()
            .map(|r| r.text(0))
            .collect::<Read<_>>()
            .map_err(|m| self.unreadable(m))
    }

    fn reads(&self) -> super::store::Reads {
        self.store.reads()
    }

    fn count_runs(&self) -> Result<usize> {
        let rows = self.store.query("SELECT COUNT(*) FROM {p}runs", &[])?;
        let count = rows.first().map(|r| r.int(0)).transpose();
        let count = count.map_err(|m| self.unreadable(m))?.unwrap_or(0);
        Ok(count.max(0) as usize)
    }

    fn stacks(&self) -> Result<Vec<String>> {
        let rows = self.store.query(STACKS, &[])?;
        let mut stacks = (rows.iter())
            .map(|r| r.text(0))
            .collect::<Read<Vec<_>>>()
            .map_err(|m| self.unreadable(m))?;
        // Sorted here: the two backends' collations differ.
        stacks.sort();
        Ok(stacks)
    }

    fn prune(
        &mut self,
        since: Option<&str>,
        newest: Option<usize>,
        dry_run: bool,
    ) -> Result<Vec<String>> {
        let gone = self.unkept(since, newest)?;
        if dry_run || gone.is_empty() {
            return Ok(gone);
        }
        let logs = self.store.stores_logs();
        // A transaction a few hundred runs: the ledger is not held for long at once.
        for batch in gone.chunks(200) {
            self.store.transaction(None, &mut |tx| {
                for run_id in batch {
                    for sql in FORGET
                        .iter()
                        .filter(|sql| logs || !sql.contains("log_lines"))
                    {
                        tx.execute(sql, &[run_id.into()])?;
                    }
                }
                Ok(())
            })?;
        }
        Ok(gone)
    }

    fn project_runs(&self, path: &str, limit: usize) -> Result<Vec<RunRecord>> {
        const RUNS: &str = concat!(
            "SELECT ",
            run_columns!(),
            " FROM {p}runs WHERE run_id IN (SELECT run_id FROM {p}projects WHERE path = $1)
             ORDER BY started DESC, run_id DESC LIMIT $2"
        );
        let limit = limit.min(i64::MAX as usize) as i64;
        let mut runs = self.runs_from(self.store.query(RUNS, &[path.into(), limit.into()])?)?;
        if runs.is_empty() {
            return Ok(runs);
        }
        let ids: Vec<String> = runs.iter().map(|r| r.run_id.clone()).collect();
        let rows = self.store.query(
            "SELECT path, status, started, finished, exit_code, changes, reason, log, fingerprint, run_id
             FROM {p}projects WHERE path = $1 AND run_id IN (SELECT value FROM {list $2})",
            &[path.into(), Value::Texts(ids)],
        )?;
        for row in &rows {
            let found = project(row).and_then(|p| Ok((row.text(9)?, p)));
            let (run_id, found) = found.map_err(|m| self.unreadable(m))?;
            if let Some(run) = runs.iter_mut().find(|r| r.run_id == run_id) {
                run.projects = vec![found];
            }
        }
        Ok(as_read(runs))
    }

    fn last_run(&self, stack: &str, operation: Operation) -> Result<Option<RunRecord>> {
        let rows = self.store.query(
            "SELECT run_id FROM {p}runs WHERE stack = $1 AND operation = $2
             ORDER BY started DESC, run_id DESC LIMIT 1",
            &[stack.into(), operation.as_str().into()],
        )?;
        match rows.first() {
            Some(row) => self.run(&row.text(0).map_err(|m| self.unreadable(m))?),
            None => Ok(None),
        }
    }

    fn last_fingerprints(&self, stack: &str) -> Result<BTreeMap<String, String>> {
        // One row per deployed project, kept as projects finish: the cost does not grow with
        // the history.
        let rows = self.store.query(
            "SELECT project, fingerprint FROM {p}deployed WHERE stack = $1",
            &[stack.into()],
        )?;
        rows.iter()
            .map(|r| Ok((r.text(0)?, r.text(1)?)))
            .collect::<Read<_>>()
            .map_err(|m| self.unreadable(m))
    }

    fn outputs(
        &self,
        stack: &str,
        projects: &[String],
    ) -> Result<BTreeMap<String, super::RecordedOutputs>> {
        if projects.is_empty() {
            return Ok(BTreeMap::new());
        }
        let rows = self.store.query(
            "SELECT project, run_id, outputs, destroyed FROM {p}outputs
             WHERE stack = $1 AND project IN (SELECT value FROM {list $2})",
            &[stack.into(), Value::Texts(projects.to_vec())],
        )?;
        rows.iter()
            .map(|r| {
                let outputs = serde_json::from_str(&r.text(2)?)
                    .map_err(|e| format!("a project's recorded outputs are no JSON: {e}"))?;
                Ok((
                    r.text(0)?,
                    super::RecordedOutputs {
                        run_id: r.text(1)?,
                        outputs,
                        destroyed: r.opt_text(3)?,
                    },
                ))
            })
            .collect::<Read<_>>()
            .map_err(|m| self.unreadable(m))
    }

    fn set_run_inputs(&mut self, run_id: &str, inputs: &super::RunInputs) -> Result<()> {
        let text = serde_json::to_string(inputs).unwrap_or_else(|_| "{}".into());
        self.store.transaction(None, &mut |tx| {
            tx.execute(
                "INSERT INTO {p}run_inputs (run_id, inputs) VALUES ($1, $2)
                 ON CONFLICT (run_id) DO UPDATE SET inputs = excluded.inputs",
                &[run_id.into(), (&text).into()],
            )?;
            Ok(())
        })
    }

    fn run_inputs(&self, run_id: &str) -> Result<Option<super::RunInputs>> {
        let rows = self.store.query(
            "SELECT inputs FROM {p}run_inputs WHERE run_id = $1",
            &[run_id.into()],
        )?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let text = row.text(0).map_err(|m| self.unreadable(m))?;
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| self.unreadable(format!("a run's inputs are no JSON: {e}")))
    }

    fn previews(&self, run_id: &str) -> Result<BTreeMap<String, super::Previewed>> {
        let rows = self.store.query(
            "SELECT path, preview FROM {p}previews WHERE run_id = $1",
            &[run_id.into()],
        )?;
        rows.iter()
            .map(|r| {
                let preview = serde_json::from_str(&r.text(1)?)
                    .map_err(|e| format!("a project's preview is no JSON: {e}"))?;
                Ok((r.text(0)?, preview))
            })
            .collect::<Read<_>>()
            .map_err(|m| self.unreadable(m))
    }

    fn images(&self, stack: &str) -> Result<Vec<ImageRecord>> {
        self.images_where(Some(&self.host), Some(stack))
    }

    fn record_images(&mut self, images: &[ImageRecord]) -> Result<()> {
        self.store.transaction(None, &mut |tx| {
            for i in images {
                tx.execute(
                    "INSERT INTO {p}images (host, stack, image, image_id, cluster, imported)
                     VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (host, stack, image) DO UPDATE SET image_id = excluded.image_id,
                       cluster = excluded.cluster, imported = excluded.imported",
                    &image_values(i),
                )?;
            }
            Ok(())
        })
    }

    fn forget_images(&mut self, stack: &str, images: &[String]) -> Result<usize> {
        let host = self.host.clone();
        let mut forgotten = 0;
        self.store.transaction(None, &mut |tx| {
            forgotten = 0;
            for image in images {
                forgotten += tx.execute(
                    "DELETE FROM {p}images WHERE host = $1 AND stack = $2 AND image = $3",
                    &[(&host).into(), stack.into(), image.into()],
                )?;
            }
            Ok(())
        })?;
        Ok(forgotten as usize)
    }

    fn known_stacks(&self, backend: &str, stack: &str) -> Result<BTreeSet<String>> {
        let rows = self.store.query(
            "SELECT project FROM {p}stacks WHERE backend = $1 AND stack = $2",
            &[backend.into(), stack.into()],
        )?;
        rows.iter()
            .map(|r| r.text(0))
            .collect::<Read<_>>()
            .map_err(|m| self.unreadable(m))
    }

    fn stack_backends(&self, stack: &str) -> Result<BTreeMap<String, BTreeSet<String>>> {
        let rows = self.store.query(
            "SELECT project, backend FROM {p}stacks WHERE stack = $1",
            &[stack.into()],
        )?;
        let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for row in &rows {
            let (project, backend) = (row.text(0), row.text(1));
            let (project, backend) = project
                .and_then(|p| Ok((p, backend?)))
                .map_err(|m| self.unreadable(m))?;
            found.entry(project).or_default().insert(backend);
        }
        Ok(found)
    }

    fn stacks_changed(
        &mut self,
        backend: &str,
        stack: &str,
        exist: &[String],
        gone: &[String],
    ) -> Result<()> {
        self.write_entries(&[Entry::StacksChanged {
            backend: backend.to_string(),
            stack: stack.to_string(),
            exist: exist.to_vec(),
            gone: gone.to_vec(),
        }])
    }
}

/// A run read whole, as `run` reads one: a run abandoned, its projects with it.
fn as_read(runs: Vec<RunRecord>) -> Vec<RunRecord> {
    (runs.into_iter())
        .map(|run| match run.status {
            RunStatus::Abandoned => run.abandoned(),
            _ => run,
        })
        .collect()
}

/// What an imported history holds besides its runs: each row kept where the ledger has none.
fn import_kept(tx: &mut dyn Tx, history: &History) -> Result<()> {
    // What the store records as deployed is newer than a copied history.
    for (stack, project, fingerprint) in &history.deployed {
        tx.execute(
            "INSERT INTO {p}deployed (stack, project, fingerprint) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            &[stack.into(), project.into(), fingerprint.into()],
        )?;
    }
    for (backend, stack, project) in &history.stacks {
        tx.execute(
            "INSERT INTO {p}stacks (backend, stack, project) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            &[backend.into(), stack.into(), project.into()],
        )?;
    }
    for (run_id, inputs) in &history.run_inputs {
        tx.execute(
            "INSERT INTO {p}run_inputs (run_id, inputs) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[run_id.into(), inputs.into()],
        )?;
    }
    for (run_id, path, preview) in &history.previews {
        tx.execute(
            "INSERT INTO {p}previews (run_id, path, preview) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            &[run_id.into(), path.into(), preview.into()],
        )?;
    }
    for (stack, project, run_id, outputs, destroyed) in &history.outputs {
        tx.execute(
            "INSERT INTO {p}outputs (stack, project, run_id, outputs, destroyed) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
            &[stack.into(), project.into(), run_id.into(), outputs.into(), destroyed.into()],
        )?;
    }
    for i in &history.images {
        tx.execute(
            "INSERT INTO {p}images (host, stack, image, image_id, cluster, imported)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
            &image_values(i),
        )?;
    }
    Ok(())
}
