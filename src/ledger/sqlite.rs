//! The ledger in an embedded SQLite database, `<state_dir>/ledger.db`: the dialect of
//! `records::Store` for one machine, whose records are in `records.rs`.
//!
//! WAL mode, so that `status` and `history` read while a run writes; a busy timeout, so that two
//! processes wait for each other instead of failing; every write in an immediate transaction, so
//! that two runs can never both hold a stack. The schema is migrated by `PRAGMA user_version`.
//! A lock is held by a live process of this machine: there are no leases, and no log lines
//! (they are in the run's log files).

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::types::{ToSql, ToSqlOutput, ValueRef};
use rusqlite::{Connection, TransactionBehavior};

use super::records::Records;
use super::store::{Reads, Row, Store, Tx, Value, Words};
use crate::error::{Error, Problem, Result};

/// Each entry moves the schema one version up; never edit one, add the next. The schema they
/// make is the one `tests/ledger_contract.rs` describes (`SCHEMA`), as PostgreSQL's are.
const MIGRATIONS: &[&str] = &[
    // 1: runs, their projects, and the stack locks.
    "CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        operation TEXT NOT NULL,
        provider TEXT NOT NULL,
        stack TEXT NOT NULL,
        user TEXT NOT NULL,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        command TEXT NOT NULL,
        started TEXT NOT NULL,
        finished TEXT,
        status TEXT NOT NULL,
        cancel_requested INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX runs_by_stack ON runs (stack, started);
    CREATE TABLE projects (
        run_id TEXT NOT NULL REFERENCES runs (run_id),
        path TEXT NOT NULL,
        status TEXT NOT NULL,
        started TEXT,
        finished TEXT,
        exit_code INTEGER,
        changes TEXT,
        reason TEXT,
        log TEXT,
        fingerprint TEXT,
        PRIMARY KEY (run_id, path)
    );
    CREATE TABLE locks (
        stack TEXT PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs (run_id)
    );",
    // 2: the stacks known to exist, per backend and project, so that a run selects (and
    // creates) a stack only when it may not exist yet.
    "CREATE TABLE stacks (
        backend TEXT NOT NULL,
        stack TEXT NOT NULL,
        project TEXT NOT NULL,
        PRIMARY KEY (backend, stack, project)
    );",
    // 3: each project's fingerprint at its last successful `up` (none once destroyed), kept as
    // projects finish, so that `--changed` reads one row per project whatever the history's
    // length; filled from the history there is.
    "CREATE TABLE deployed (
        stack TEXT NOT NULL,
        project TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        PRIMARY KEY (stack, project)
    );
    INSERT INTO deployed (stack, project, fingerprint)
    SELECT r.stack, p.path, p.fingerprint FROM projects p JOIN runs r ON r.run_id = p.run_id
    WHERE r.operation = 'up' AND p.status IN ('succeeded', 'unchanged') AND p.fingerprint IS NOT NULL
      AND NOT EXISTS (
        SELECT 1 FROM projects q JOIN runs s ON s.run_id = q.run_id
        WHERE s.stack = r.stack AND q.path = p.path AND s.operation IN ('up', 'destroy')
          AND q.status IN ('succeeded', 'unchanged') AND q.finished > p.finished
      );",
    // 4: the images imported into each stack's local cluster (a machine's own), for `mara images
    // update`.
    "CREATE TABLE images (
        host TEXT NOT NULL,
        stack TEXT NOT NULL,
        image TEXT NOT NULL,
        image_id TEXT NOT NULL,
        cluster TEXT NOT NULL,
        imported TEXT NOT NULL,
        PRIMARY KEY (host, stack, image)
    );",
    // 5: each project's stack outputs at its last successful `up` that read them (none once
    // destroyed: kept, said destroyed, for what still stands on it), for its dependents'
    // inputs; secret ones by name only.
    "CREATE TABLE outputs (
        stack TEXT NOT NULL,
        project TEXT NOT NULL,
        run_id TEXT NOT NULL,
        outputs TEXT NOT NULL,
        destroyed TEXT,
        PRIMARY KEY (stack, project)
    );",
    // 6: what a fanned-out run was opened with (the stack configuration, the environment
    // file's lines that hold no secret), which its jobs use rather than their checkouts'.
    "CREATE TABLE run_inputs (
        run_id TEXT PRIMARY KEY,
        inputs TEXT NOT NULL
    );",
    // 7: what each project's preview showed beyond its counts (changed outputs, property
    // diffs), for the summary of a fanned-out preview, which its close job makes.
    "CREATE TABLE previews (
        run_id TEXT NOT NULL,
        path TEXT NOT NULL,
        preview TEXT NOT NULL,
        PRIMARY KEY (run_id, path)
    );",
    // 8: how many projects a run selected, its projects recorded `waiting` as it starts, so
    // that `--resume` knows those it never started; none for a run recorded before.
    "ALTER TABLE runs ADD COLUMN selected INTEGER;",
    // 9: the named tokens `mara serve` takes (their SHA-256 digests, never their values), and
    // the audit of every cancel and unlock: who, when, from where.
    "CREATE TABLE tokens (
        name TEXT PRIMARY KEY,
        role TEXT NOT NULL,
        digest TEXT NOT NULL UNIQUE,
        created TEXT NOT NULL,
        created_by TEXT NOT NULL,
        last_used TEXT
    );
    CREATE TABLE audit (
        at TEXT NOT NULL,
        action TEXT NOT NULL,
        stack TEXT NOT NULL,
        run_id TEXT NOT NULL,
        actor TEXT NOT NULL,
        via TEXT NOT NULL
    );
    CREATE INDEX audit_by_run ON audit (run_id, at);",
    // 10: a run's graph as it started ((needed, needing) pairs of its projects' paths, as
    // JSON), for its page to draw as the run had it; none for a run recorded before.
    "ALTER TABLE runs ADD COLUMN graph TEXT;",
    // 11: a project's runs, for its page in `mara serve`.
    "CREATE INDEX projects_by_path ON projects (path);",
    // 12: what `status`, `history`, `mara serve`'s pages and a retention read, each in an
    // index's order and no further than it needs, however long the history: every run by its
    // start (`history --all-stacks`, the runs list, the runs past a retention's bounds), a
    // stack's (its history, and every stack one seek each), a stack's last run of each
    // operation.
    "DROP INDEX runs_by_stack;
    CREATE INDEX runs_by_stack ON runs (stack, started, run_id);
    CREATE INDEX runs_by_start ON runs (started, run_id);
    CREATE INDEX runs_by_operation ON runs (stack, operation, started, run_id);",
    // 13: what the workspace's policies said of the run (docs/commands.md, "Policies"), as
    // JSON; none where they said nothing, or there were none.
    "ALTER TABLE runs ADD COLUMN policy TEXT;",
];

/// The workspace's own ledger.
pub type SqliteLedger = Records<Sqlite>;

/// A SQLite ledger file, opened.
pub struct Sqlite {
    connection: Connection,
    path: PathBuf,
    reads: Cell<Reads>,
}

fn set_up(connection: &mut Connection) -> rusqlite::Result<usize> {
    connection.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;",
    )?;
    // A ledger at this version is opened without a write: reading works on a full disk.
    let version: i64 = connection.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if usize::try_from(version).is_ok_and(|v| v >= MIGRATIONS.len()) {
        return Ok(version as usize);
    }
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = transaction.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let version = usize::try_from(version).unwrap_or(0);
    if version > MIGRATIONS.len() {
        return Ok(version);
    }
    for migration in &MIGRATIONS[version..] {
        transaction.execute_batch(migration)?;
    }
    transaction.pragma_update(None, "user_version", MIGRATIONS.len() as i64)?;
    transaction.commit()?;
    Ok(version)
}

/// Whether this process may write `path`.
fn writable(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(name) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access only reads the NUL-terminated path.
    unsafe { libc::access(name.as_ptr(), libc::W_OK) == 0 }
}

fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

fn db_error(path: &Path, error: rusqlite::Error) -> Error {
    Error::Ledger {
        path: path.to_path_buf(),
        message: error.to_string(),
    }
}

impl ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        use rusqlite::types::Value as Sql;
        Ok(ToSqlOutput::Owned(match self {
            Value::Null => Sql::Null,
            Value::Int(n) => Sql::Integer(*n),
            Value::Real(r) => Sql::Real(*r),
            Value::Text(t) => Sql::Text(t.clone()),
            Value::Bool(b) => Sql::Integer(i64::from(*b)),
            // Read as rows by `json_each` (`Words::list`).
            Value::Texts(texts) => {
                Sql::Text(serde_json::to_string(texts).expect("texts serialize"))
            }
        }))
    }
}

/// A row as the records read it.
fn row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    let columns = row.as_ref().column_count();
    (0..columns)
        .map(|i| {
            Ok(match row.get_ref(i)? {
                ValueRef::Null => Value::Null,
                ValueRef::Integer(n) => Value::Int(n),
                ValueRef::Real(r) => Value::Real(r),
                ValueRef::Text(t) | ValueRef::Blob(t) => {
                    Value::Text(String::from_utf8_lossy(t).into_owned())
                }
            })
        })
        .collect::<rusqlite::Result<Vec<_>>>()
        .map(Row)
}

/// The rows `sql` returns, counted in `reads` with the steps SQLite took for them.
fn query(
    connection: &Connection,
    sql: &str,
    params: &[Value],
    reads: &Cell<Reads>,
) -> rusqlite::Result<Vec<Row>> {
    use rusqlite::StatementStatus::VmStep;
    let mut statement = connection.prepare_cached(&Sqlite::WORDS.render(sql))?;
    statement.reset_status(VmStep);
    let rows = (statement.query_map(rusqlite::params_from_iter(params), row)?)
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let steps = statement.reset_status(VmStep).max(0) as u64;
    Reads::count(reads, rows.len(), steps);
    Ok(rows)
}

fn execute(connection: &Connection, sql: &str, params: &[Value]) -> rusqlite::Result<u64> {
    let mut statement = connection.prepare_cached(&Sqlite::WORDS.render(sql))?;
    statement
        .execute(rusqlite::params_from_iter(params))
        .map(|n| n as u64)
}

/// A transaction's statements.
struct SqliteTx<'a> {
    transaction: &'a rusqlite::Transaction<'a>,
    path: &'a Path,
    reads: &'a Cell<Reads>,
}

impl Tx for SqliteTx<'_> {
    fn execute(&mut self, sql: &'static str, params: &[Value]) -> Result<u64> {
        execute(self.transaction, sql, params).map_err(|e| db_error(self.path, e))
    }

    fn query(&mut self, sql: &'static str, params: &[Value]) -> Result<Vec<Row>> {
        query(self.transaction, sql, params, self.reads).map_err(|e| db_error(self.path, e))
    }
}

impl Store for Sqlite {
    const WORDS: Words = Words {
        prefix: "",
        user: "user",
        order: "rowid",
        lease_left: "NULL",
        live: "1",
        lapsed: "0",
        list: "json_each(#)",
        pairs: "(SELECT a.value AS first, b.value AS second FROM json_each(#1) a JOIN json_each(#2) b ON a.key = b.key)",
        json_rows: super::store::JsonRows::JsonEach,
        question_marks: true,
    };

    fn shown(&self) -> &Path {
        &self.path
    }

    fn query(&self, sql: &'static str, params: &[Value]) -> Result<Vec<Row>> {
        query(&self.connection, sql, params, &self.reads).map_err(|e| db_error(&self.path, e))
    }

    fn reads(&self) -> Reads {
        self.reads.get()
    }

    fn execute(&mut self, sql: &'static str, params: &[Value]) -> Result<u64> {
        execute(&self.connection, sql, params).map_err(|e| db_error(&self.path, e))
    }

    /// Immediate: the transaction takes the file's write lock first, so that deciding about a
    /// stack's lock and taking it are one step that no other process comes between.
    fn transaction(
        &mut self,
        _stack: Option<&str>,
        work: &mut dyn FnMut(&mut dyn Tx) -> Result<()>,
    ) -> Result<()> {
        let (path, reads) = (&self.path, &self.reads);
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| db_error(path, e))?;
        work(&mut SqliteTx {
            transaction: &transaction,
            path,
            reads,
        })?;
        transaction.commit().map_err(|e| db_error(path, e))
    }
}

impl Sqlite {
    /// Opens (creating, and migrating) the ledger at `path`.
    pub fn open(path: &Path) -> Result<SqliteLedger> {
        if let Some(dir) = path.parent() {
            crate::files::own_dir(dir).map_err(|e| Error::write(dir, e))?;
        }
        if path.exists() && !writable(path) {
            // Refused before SQLite opens it, which would leave a read-only `-shm` and `-wal`
            // behind that later runs could not write either.
            return Err(Error::config(
                Problem::new("the run ledger cannot be written (it is read-only to this user)")
                    .in_file(path)
                    .hint("make it writable, or run as its owner"),
            ));
        }
        let mut connection = Connection::open(path).map_err(|e| db_error(path, e))?;
        connection
            .busy_timeout(Duration::from_secs(10))
            .map_err(|e| db_error(path, e))?;
        // Switching a new file to WAL and creating its index can report "database is locked"
        // without waiting on the busy timeout when several processes open it at once; the setup
        // is idempotent, so it is retried for as long as the busy timeout would have waited.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let version = loop {
            match set_up(&mut connection) {
                Err(error) if is_busy(&error) && std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                result => break result.map_err(|e| db_error(path, e))?,
            }
        };
        if version > MIGRATIONS.len() {
            return Err(Error::config(
                Problem::new(format!(
                    "the run ledger is at schema version {version}, newer than this mara knows ({})",
                    MIGRATIONS.len()
                ))
                .in_file(path)
                .hint("use a newer mara"),
            ));
        }
        Ok(Records::new(Sqlite {
            connection,
            path: path.to_path_buf(),
            reads: Cell::default(),
        }))
    }

    /// Opens the ledger only if it exists (for commands that only read). A ledger this user
    /// cannot write is read as it is, creating nothing beside it (no `-shm`, no `-wal`); so is a
    /// writable one that cannot be opened for writing (a full disk) while it has no write-ahead
    /// log, which is when the file alone holds every record.
    pub fn open_existing(path: &Path) -> Result<Option<SqliteLedger>> {
        if !path.is_file() {
            return Ok(None);
        }
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let logged = std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0);
        if !writable(path) {
            return Sqlite::open_read_only(path, !logged).map(Some);
        }
        match Sqlite::open(path) {
            Ok(ledger) => Ok(Some(ledger)),
            // Only a disk that takes no more: any other error (a newer schema) stands.
            Err(Error::Ledger { message, .. }) if !logged && message.contains("disk") => {
                Sqlite::open_read_only(path, true).map(Some)
            }
            Err(error) => Err(error),
        }
    }

    /// Opens the ledger for reading only. `immutable`: SQLite neither locks nor looks for a
    /// write-ahead log, so it writes nothing at all — exact only while there is no log to read
    /// (another user's run may be writing one: then it is read as SQLite reads a log, `mode=ro`).
    fn open_read_only(path: &Path, immutable: bool) -> Result<SqliteLedger> {
        use rusqlite::OpenFlags;
        let escaped: String = path
            .to_string_lossy()
            .chars()
            .map(|c| match c {
                '%' | '?' | '#' => format!("%{:02X}", c as u32),
                c => c.to_string(),
            })
            .collect();
        let query = match immutable {
            true => "immutable=1",
            false => "mode=ro",
        };
        let connection = Connection::open_with_flags(
            format!("file:{escaped}?{query}"),
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
        )
        .map_err(|e| db_error(path, e))?;
        Ok(Records::new(Sqlite {
            connection,
            path: path.to_path_buf(),
            reads: Cell::default(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Operation;
    use crate::ledger::{Begun, Ledger, ProjectRecord, RunStart};
    use crate::status::{ProjectStatus, RunStatus};
    use std::collections::BTreeMap;

    fn start(id: &str, stack: &str) -> RunStart {
        RunStart {
            run_id: id.into(),
            operation: Operation::Up,
            provider: "aws".into(),
            stack: stack.into(),
            command: "mara up".into(),
            started: format!("2026-11-21T00:00:0{}.000Z", id.len()),
            projects: Vec::new(),
            graph: Vec::new(),
        }
    }

    fn finished(path: &str, status: ProjectStatus, fingerprint: Option<&str>) -> ProjectRecord {
        ProjectRecord {
            path: path.into(),
            status,
            started: None,
            finished: Some("2026-11-21T00:00:00.000Z".into()),
            exit_code: Some(0),
            changes: None,
            reason: None,
            log: None,
            fingerprint: fingerprint.map(String::from),
        }
    }

    #[test]
    fn the_deployed_fingerprints_do_not_depend_on_the_history() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Sqlite::open(&dir.path().join("ledger.db")).unwrap();
        for n in 0..300 {
            let id = format!("r{n:03}");
            ledger.begin(&start(&id, "dev"), false).unwrap();
            for p in ["a", "b", "c"] {
                let print = format!("{p}-{n}");
                ledger
                    .project_finished(&id, &finished(p, ProjectStatus::Succeeded, Some(&print)))
                    .unwrap();
            }
            ledger.finish(&id, RunStatus::Succeeded, "x").unwrap();
        }
        let mut destroy = start("d1", "dev");
        destroy.operation = Operation::Destroy;
        ledger.begin(&destroy, false).unwrap();
        ledger
            .project_finished("d1", &finished("c", ProjectStatus::Succeeded, None))
            .unwrap();
        let expected = BTreeMap::from([
            ("a".to_string(), "a-299".to_string()),
            ("b".to_string(), "b-299".to_string()),
        ]);
        assert_eq!(ledger.last_fingerprints("dev").unwrap(), expected);
        // Read from one row per project: without the history, the answer is the same.
        ledger
            .store
            .connection
            .execute("DELETE FROM projects", [])
            .unwrap();
        assert_eq!(ledger.last_fingerprints("dev").unwrap(), expected);
    }

    #[test]
    fn the_deployed_fingerprints_are_filled_from_an_older_ledger_s_history() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        {
            let connection = Connection::open(&path).unwrap();
            connection.execute_batch(MIGRATIONS[0]).unwrap();
            connection.execute_batch(MIGRATIONS[1]).unwrap();
            connection.pragma_update(None, "user_version", 2).unwrap();
            connection
                .execute_batch(
                    "INSERT INTO runs VALUES ('r1','up','aws','dev','u','h',1,'c','t1','t1','succeeded',0);
                     INSERT INTO runs VALUES ('r2','up','aws','dev','u','h',1,'c','t2','t2','succeeded',0);
                     INSERT INTO runs VALUES ('r3','destroy','aws','dev','u','h',1,'c','t3','t3','succeeded',0);
                     INSERT INTO projects VALUES ('r1','a','succeeded','t1','t1',0,NULL,NULL,NULL,'a1');
                     INSERT INTO projects VALUES ('r2','a','unchanged','t2','t2',0,NULL,NULL,NULL,'a2');
                     INSERT INTO projects VALUES ('r2','b','succeeded','t2','t2',0,NULL,NULL,NULL,'b2');
                     INSERT INTO projects VALUES ('r2','c','failed','t2','t2',1,NULL,NULL,NULL,'c2');
                     INSERT INTO projects VALUES ('r3','b','succeeded','t3','t3',0,NULL,NULL,NULL,NULL);",
                )
                .unwrap();
        }
        let ledger = Sqlite::open(&path).unwrap();
        assert_eq!(
            ledger.last_fingerprints("dev").unwrap(),
            BTreeMap::from([("a".to_string(), "a2".to_string())])
        );
    }

    #[test]
    fn a_read_only_open_sees_what_is_still_in_the_write_ahead_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let mut writer = Sqlite::open(&path).unwrap();
        // Keep the log from being checkpointed into the file while the writer is open.
        writer
            .store
            .connection
            .execute_batch("PRAGMA wal_autocheckpoint = 0")
            .unwrap();
        writer.begin(&start("r1", "dev"), true).unwrap();
        let wal = dir.path().join("ledger.db-wal");
        assert!(
            std::fs::metadata(&wal).unwrap().len() > 0,
            "the run is in the log"
        );
        let read = Sqlite::open_read_only(&path, false).unwrap();
        let runs = read.runs(Some("dev"), 10).unwrap();
        assert_eq!(runs.len(), 1, "mode=ro reads the log");
        drop(read);
        // `immutable` would not see it: which is why it is used only without a log.
        let immutable = Sqlite::open_read_only(&path, true).unwrap();
        assert!(
            immutable
                .runs(Some("dev"), 10)
                .map_or(true, |r| r.is_empty())
        );
    }

    #[test]
    fn a_live_holder_keeps_the_lock_and_a_dead_one_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let mut ledger = Sqlite::open(&path).unwrap();
        assert_eq!(
            ledger.begin(&start("r1", "dev"), true).unwrap(),
            Begun::Started { took_over: None }
        );
        // Our own pid is alive: a second run is refused, naming us.
        let Begun::Held(holder) = ledger.begin(&start("r2", "dev"), true).unwrap() else {
            panic!("not held")
        };
        assert_eq!(
            (holder.run_id.as_str(), holder.pid),
            ("r1", std::process::id())
        );
        // Another stack is free.
        assert!(matches!(
            ledger.begin(&start("r3", "prod"), true).unwrap(),
            Begun::Started { .. }
        ));
        // A holder whose process is gone is taken over, and its run abandoned.
        ledger
            .store
            .connection
            .execute("UPDATE runs SET pid = 999999999 WHERE run_id = 'r1'", [])
            .unwrap();
        let Begun::Started {
            took_over: Some(old),
        } = ledger.begin(&start("r4", "dev"), true).unwrap()
        else {
            panic!("no takeover")
        };
        assert_eq!(old.run_id, "r1");
        assert_eq!(
            ledger.run("r1").unwrap().unwrap().status,
            RunStatus::Abandoned
        );
        // The run taken over, finishing after all, changes neither its record nor the lock.
        ledger
            .finish("r1", RunStatus::Succeeded, "2026-11-21T00:00:30.000Z")
            .unwrap();
        assert_eq!(
            ledger.run("r1").unwrap().unwrap().status,
            RunStatus::Abandoned
        );
        assert_eq!(ledger.holder("dev").unwrap().unwrap().run_id, "r4");
        ledger
            .finish("r4", RunStatus::Succeeded, "2026-11-21T00:01:00.000Z")
            .unwrap();
        assert!(ledger.holder("dev").unwrap().is_none());
    }

    #[test]
    fn a_lock_held_by_pid_0_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Sqlite::open(&dir.path().join("ledger.db")).unwrap();
        ledger.begin(&start("r1", "dev"), true).unwrap();
        // kill(0, 0) asks about our own process group, which always exists.
        ledger
            .store
            .connection
            .execute("UPDATE runs SET pid = 0 WHERE run_id = 'r1'", [])
            .unwrap();
        assert!(matches!(
            ledger.begin(&start("r2", "dev"), true).unwrap(),
            Begun::Started { took_over: Some(_) }
        ));
    }

    #[test]
    fn many_processes_may_open_a_new_ledger_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let openers: Vec<_> = (0..8)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || Sqlite::open(&path).map(|_| ()))
            })
            .collect();
        for opener in openers {
            opener.join().unwrap().unwrap();
        }
        let ledger = Sqlite::open(&path).unwrap();
        let version: i64 = ledger
            .store
            .connection
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version as usize, MIGRATIONS.len());
    }
}
