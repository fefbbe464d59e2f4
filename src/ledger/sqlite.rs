//! The ledger in an embedded SQLite database, `<state_dir>/ledger.db`.
//!
//! WAL mode, so that `status` and `history` read while a run writes; a busy timeout, so that two
//! processes wait for each other instead of failing; the lock taken in an immediate transaction,
//! so that two runs can never both hold a stack. The schema is migrated by `PRAGMA user_version`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{
    Begun, History, Holder, ImageRecord, Ledger, ProjectRecord, RunRecord, RunStart,
    process_exists, whoami,
};
use crate::engine::Operation;
use crate::error::{Error, Problem, Result};
use crate::status::{ProjectStatus, RunStatus};

/// Each entry moves the schema one version up; never edit one, add the next.
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
];

pub struct SqliteLedger {
    connection: Connection,
    path: PathBuf,
    user: String,
    host: String,
}

/// WAL mode, then the schema checked and migrated in one immediate transaction: two processes
/// opening a new ledger at once must not both migrate it; the second waits, then finds it up to
/// date. Returns the version found, which is left alone when newer than this mara knows.
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

/// The statuses and operations are stored as their text.
macro_rules! text_column {
    ($type:ty) => {
        impl ToSql for $type {
            fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                Ok(ToSqlOutput::from(self.as_str()))
            }
        }

        impl FromSql for $type {
            fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                let text = value.as_str()?;
                <$type>::parse(text).ok_or_else(|| {
                    FromSqlError::Other(format!("`{text}` is not a known value").into())
                })
            }
        }
    };
}

text_column!(ProjectStatus);
text_column!(RunStatus);
text_column!(Operation);

impl SqliteLedger {
    /// Opens (creating, and migrating) the ledger at `path`.
    pub fn open(path: &Path) -> Result<SqliteLedger> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::write(dir, e))?;
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
        let (user, host) = whoami();
        Ok(SqliteLedger {
            connection,
            path: path.to_path_buf(),
            user,
            host,
        })
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
            return SqliteLedger::open_read_only(path, !logged).map(Some);
        }
        match SqliteLedger::open(path) {
            Ok(ledger) => Ok(Some(ledger)),
            // Only a disk that takes no more: any other error (a newer schema) stands.
            Err(Error::Ledger { message, .. }) if !logged && message.contains("disk") => {
                SqliteLedger::open_read_only(path, true).map(Some)
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
        let (user, host) = whoami();
        Ok(SqliteLedger {
            connection,
            path: path.to_path_buf(),
            user,
            host,
        })
    }

    fn holder_of(connection: &Connection, stack: &str) -> rusqlite::Result<Option<Holder>> {
        connection
            .query_row(
                "SELECT r.run_id, r.user, r.host, r.pid, r.started, r.command FROM locks l JOIN runs r ON r.run_id = l.run_id WHERE l.stack = ?1",
                [stack],
                |row| {
                    Ok(Holder {
                        run_id: row.get(0)?,
                        user: row.get(1)?,
                        host: row.get(2)?,
                        pid: row.get(3)?,
                        started: row.get(4)?,
                        command: row.get(5)?,
                        lease_left: None,
                    })
                },
            )
            .optional()
    }

    fn record(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRecord> {
        Ok(RunRecord {
            run_id: row.get(0)?,
            operation: row.get(1)?,
            provider: row.get(2)?,
            stack: row.get(3)?,
            user: row.get(4)?,
            host: row.get(5)?,
            pid: row.get(6)?,
            command: row.get(7)?,
            started: row.get(8)?,
            finished: row.get(9)?,
            status: row.get(10)?,
            projects: Vec::new(),
            leased: false,
        })
    }

    const RUN_COLUMNS: &'static str =
        "run_id, operation, provider, stack, user, host, pid, command, started, finished, status";

    fn projects(&self, run_id: &str) -> Result<Vec<ProjectRecord>> {
        let mut statement = self
            .connection
            .prepare("SELECT path, status, started, finished, exit_code, changes, reason, log, fingerprint FROM projects WHERE run_id = ?1 ORDER BY rowid")
            .map_err(|e| db_error(&self.path, e))?;
        let rows = statement
            .query_map([run_id], |row| {
                let changes: Option<String> = row.get(5)?;
                Ok(ProjectRecord {
                    path: row.get(0)?,
                    status: row.get(1)?,
                    started: row.get(2)?,
                    finished: row.get(3)?,
                    exit_code: row.get(4)?,
                    changes: changes.and_then(|c| serde_json::from_str(&c).ok()),
                    reason: row.get(6)?,
                    log: row.get(7)?,
                    fingerprint: row.get(8)?,
                })
            })
            .map_err(|e| db_error(&self.path, e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| db_error(&self.path, e))
    }
}

impl Ledger for SqliteLedger {
    fn export(&self) -> Result<History> {
        let mut runs = self.runs(None, usize::MAX >> 1)?;
        runs.reverse();
        for run in &mut runs {
            run.projects = self.projects(&run.run_id)?;
        }
        let triples = |sql: &str| -> Result<Vec<(String, String, String)>> {
            let mut statement = self
                .connection
                .prepare(sql)
                .map_err(|e| db_error(&self.path, e))?;
            let rows = statement
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .map_err(|e| db_error(&self.path, e))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(|e| db_error(&self.path, e))
        };
        Ok(History {
            runs,
            deployed: triples("SELECT stack, project, fingerprint FROM deployed ORDER BY 1, 2")?,
            stacks: triples("SELECT backend, stack, project FROM stacks ORDER BY 1, 2, 3")?,
            images: self.images_where(None, None)?,
        })
    }

    fn import(&mut self, history: &History) -> Result<Vec<String>> {
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| db_error(&self.path, e))?;
        let mut added = Vec::new();
        for run in &history.runs {
            let inserted = transaction
                .execute(
                    "INSERT OR IGNORE INTO runs (run_id, operation, provider, stack, user, host, pid, command, started, finished, status)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                    params![run.run_id, run.operation, run.provider, run.stack, run.user, run.host, run.pid, run.command, run.started, run.finished, run.status],
                )
                .map_err(|e| db_error(&self.path, e))?;
            if inserted == 0 {
                continue;
            }
            added.push(run.run_id.clone());
            for p in &run.projects {
                let changes = p
                    .changes
                    .as_ref()
                    .map(|c| serde_json::to_string(c).expect("counts serialize"));
                transaction
                    .execute(
                        "INSERT OR IGNORE INTO projects (run_id, path, status, started, finished, exit_code, changes, reason, log, fingerprint)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                        params![run.run_id, p.path, p.status, p.started, p.finished, p.exit_code, changes, p.reason, p.log, p.fingerprint],
                    )
                    .map_err(|e| db_error(&self.path, e))?;
            }
        }
        for (stack, project, fingerprint) in &history.deployed {
            transaction
                .execute(
                    "INSERT OR IGNORE INTO deployed (stack, project, fingerprint) VALUES (?1, ?2, ?3)",
                    params![stack, project, fingerprint],
                )
                .map_err(|e| db_error(&self.path, e))?;
        }
        for (backend, stack, project) in &history.stacks {
            transaction
                .execute(
                    "INSERT OR IGNORE INTO stacks (backend, stack, project) VALUES (?1, ?2, ?3)",
                    params![backend, stack, project],
                )
                .map_err(|e| db_error(&self.path, e))?;
        }
        for i in &history.images {
            transaction
                .execute(
                    "INSERT OR IGNORE INTO images (host, stack, image, image_id, cluster, imported) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![i.host, i.stack, i.image, i.image_id, i.cluster, i.imported],
                )
                .map_err(|e| db_error(&self.path, e))?;
        }
        transaction.commit().map_err(|e| db_error(&self.path, e))?;
        Ok(added)
    }

    fn begin(&mut self, run: &RunStart, lock: bool) -> Result<Begun> {
        let (user, host) = (self.user.clone(), self.host.clone());
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| db_error(&self.path, e))?;
        let mut took_over = None;
        if lock
            && let Some(holder) =
                Self::holder_of(&transaction, &run.stack).map_err(|e| db_error(&self.path, e))?
        {
            if holder.host != host || process_exists(holder.pid) {
                return Ok(Begun::Held(holder));
            }
            transaction
                .execute(
                    "UPDATE runs SET status = 'abandoned', finished = ?2 WHERE run_id = ?1",
                    params![holder.run_id, run.started],
                )
                .map_err(|e| db_error(&self.path, e))?;
            transaction
                .execute("UPDATE projects SET status = 'abandoned' WHERE run_id = ?1 AND status = 'running'", [&holder.run_id])
                .map_err(|e| db_error(&self.path, e))?;
            transaction
                .execute("DELETE FROM locks WHERE stack = ?1", [&run.stack])
                .map_err(|e| db_error(&self.path, e))?;
            took_over = Some(holder);
        }
        transaction
            .execute(
                "INSERT INTO runs (run_id, operation, provider, stack, user, host, pid, command, started, status)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'running')",
                params![run.run_id, run.operation, run.provider, run.stack, user, host, std::process::id(), run.command, run.started],
            )
            .map_err(|e| db_error(&self.path, e))?;
        if lock {
            transaction
                .execute(
                    "INSERT INTO locks (stack, run_id) VALUES (?1, ?2)",
                    params![run.stack, run.run_id],
                )
                .map_err(|e| db_error(&self.path, e))?;
        }
        transaction.commit().map_err(|e| db_error(&self.path, e))?;
        Ok(Begun::Started { took_over })
    }

    fn project_started(
        &mut self,
        run_id: &str,
        path: &str,
        started: &str,
        fingerprint: Option<&str>,
    ) -> Result<()> {
        self.connection
            .execute(
                "INSERT INTO projects (run_id, path, status, started, fingerprint) VALUES (?1, ?2, 'running', ?3, ?4)
                 ON CONFLICT (run_id, path) DO UPDATE SET status = 'running', started = ?3, fingerprint = ?4",
                params![run_id, path, started, fingerprint],
            )
            .map_err(|e| db_error(&self.path, e))?;
        Ok(())
    }

    fn project_finished(&mut self, run_id: &str, project: &ProjectRecord) -> Result<()> {
        let changes = project
            .changes
            .as_ref()
            .map(|c| serde_json::to_string(c).expect("counts serialize"));
        // The project's row and what is deployed, in one transaction.
        let transaction = self
            .connection
            .transaction()
            .map_err(|e| db_error(&self.path, e))?;
        transaction
            .prepare_cached(
                "INSERT INTO projects (run_id, path, status, started, finished, exit_code, changes, reason, log, fingerprint)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                 ON CONFLICT (run_id, path) DO UPDATE SET status = ?3, started = COALESCE(?4, started), finished = ?5,
                   exit_code = ?6, changes = ?7, reason = ?8, log = ?9, fingerprint = COALESCE(?10, fingerprint)",
            )
            .and_then(|mut statement| {
                statement.execute(params![
                    run_id,
                    project.path,
                    project.status,
                    project.started,
                    project.finished,
                    project.exit_code,
                    changes,
                    project.reason,
                    project.log,
                    project.fingerprint
                ])
            })
            .map_err(|e| db_error(&self.path, e))?;
        if matches!(
            project.status,
            ProjectStatus::Succeeded | ProjectStatus::Unchanged
        ) {
            let (operation, stack, fingerprint): (Operation, String, Option<String>) = transaction
                .prepare_cached(
                    "SELECT r.operation, r.stack, p.fingerprint FROM runs r JOIN projects p ON p.run_id = r.run_id
                     WHERE r.run_id = ?1 AND p.path = ?2",
                )
                .and_then(|mut s| {
                    s.query_row(params![run_id, project.path], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                    })
                })
                .map_err(|e| db_error(&self.path, e))?;
            match (operation, fingerprint) {
                (Operation::Up, Some(fingerprint)) => transaction
                    .prepare_cached(
                        "INSERT INTO deployed (stack, project, fingerprint) VALUES (?1, ?2, ?3)
                         ON CONFLICT (stack, project) DO UPDATE SET fingerprint = ?3",
                    )
                    .and_then(|mut s| s.execute(params![stack, project.path, fingerprint])),
                (Operation::Up, None) | (Operation::Destroy, _) => transaction
                    .prepare_cached("DELETE FROM deployed WHERE stack = ?1 AND project = ?2")
                    .and_then(|mut s| s.execute(params![stack, project.path])),
                _ => Ok(0),
            }
            .map_err(|e| db_error(&self.path, e))?;
        }
        transaction.commit().map_err(|e| db_error(&self.path, e))
    }

    fn finish(&mut self, run_id: &str, status: RunStatus, finished: &str) -> Result<()> {
        let transaction = self
            .connection
            .transaction()
            .map_err(|e| db_error(&self.path, e))?;
        transaction
            .execute(
                // A run whose lock was taken over was recorded abandoned by the run that took it:
                // that record stands.
                "UPDATE runs SET status = ?2, finished = ?3 WHERE run_id = ?1 AND status = 'running'",
                params![run_id, status, finished],
            )
            .map_err(|e| db_error(&self.path, e))?;
        transaction
            .execute("DELETE FROM locks WHERE run_id = ?1", [run_id])
            .map_err(|e| db_error(&self.path, e))?;
        transaction.commit().map_err(|e| db_error(&self.path, e))
    }

    fn forget(&mut self, run_id: &str) -> Result<()> {
        let transaction = self
            .connection
            .transaction()
            .map_err(|e| db_error(&self.path, e))?;
        for sql in [
            "DELETE FROM locks WHERE run_id = ?1",
            "DELETE FROM projects WHERE run_id = ?1",
            "DELETE FROM runs WHERE run_id = ?1",
        ] {
            transaction
                .execute(sql, [run_id])
                .map_err(|e| db_error(&self.path, e))?;
        }
        transaction.commit().map_err(|e| db_error(&self.path, e))
    }

    fn holder(&self, stack: &str) -> Result<Option<Holder>> {
        Self::holder_of(&self.connection, stack).map_err(|e| db_error(&self.path, e))
    }

    fn unlock(&mut self, stack: &str) -> Result<Option<Holder>> {
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| db_error(&self.path, e))?;
        let holder = Self::holder_of(&transaction, stack).map_err(|e| db_error(&self.path, e))?;
        if let Some(holder) = &holder {
            transaction
                .execute("DELETE FROM locks WHERE stack = ?1", [stack])
                .map_err(|e| db_error(&self.path, e))?;
            transaction
                .execute(
                    "UPDATE runs SET status = 'abandoned', finished = COALESCE(finished, ?2) WHERE run_id = ?1 AND status = 'running'",
                    params![holder.run_id, crate::clock::rfc3339(std::time::SystemTime::now())],
                )
                .map_err(|e| db_error(&self.path, e))?;
            transaction
                .execute(
                    "UPDATE projects SET status = 'abandoned' WHERE run_id = ?1 AND status = 'running'",
                    [&holder.run_id],
                )
                .map_err(|e| db_error(&self.path, e))?;
        }
        transaction.commit().map_err(|e| db_error(&self.path, e))?;
        Ok(holder)
    }

    fn request_cancel(&mut self, stack: &str) -> Result<Option<Holder>> {
        let holder = self.holder(stack)?;
        if let Some(holder) = &holder {
            self.connection
                .execute(
                    "UPDATE runs SET cancel_requested = 1 WHERE run_id = ?1",
                    [&holder.run_id],
                )
                .map_err(|e| db_error(&self.path, e))?;
        }
        Ok(holder)
    }

    fn cancel_requested(&self, run_id: &str) -> Result<bool> {
        let requested: Option<i64> = self
            .connection
            .query_row(
                "SELECT cancel_requested FROM runs WHERE run_id = ?1",
                [run_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| db_error(&self.path, e))?;
        Ok(requested == Some(1))
    }

    fn runs(&self, stack: Option<&str>, limit: usize) -> Result<Vec<RunRecord>> {
        let sql = format!(
            "SELECT {} FROM runs WHERE ?1 IS NULL OR stack = ?1 ORDER BY started DESC, run_id DESC LIMIT ?2",
            Self::RUN_COLUMNS
        );
        let mut statement = self
            .connection
            .prepare(&sql)
            .map_err(|e| db_error(&self.path, e))?;
        let rows = statement
            .query_map(params![stack, limit as i64], Self::record)
            .map_err(|e| db_error(&self.path, e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| db_error(&self.path, e))
    }

    fn run(&self, run_id: &str) -> Result<Option<RunRecord>> {
        let sql = format!("SELECT {} FROM runs WHERE run_id = ?1", Self::RUN_COLUMNS);
        let record = self
            .connection
            .query_row(&sql, [run_id], Self::record)
            .optional()
            .map_err(|e| db_error(&self.path, e))?;
        match record {
            Some(mut record) => {
                record.projects = self.projects(run_id)?;
                Ok(Some(record))
            }
            None => Ok(None),
        }
    }

    fn last_run(&self, stack: &str, operation: Operation) -> Result<Option<RunRecord>> {
        let id: Option<String> = self
            .connection
            .query_row(
                "SELECT run_id FROM runs WHERE stack = ?1 AND operation = ?2 ORDER BY started DESC, run_id DESC LIMIT 1",
                params![stack, operation],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| db_error(&self.path, e))?;
        match id {
            Some(id) => self.run(&id),
            None => Ok(None),
        }
    }

    fn known_stacks(&self, backend: &str, stack: &str) -> Result<BTreeSet<String>> {
        let mut statement = self
            .connection
            .prepare_cached("SELECT project FROM stacks WHERE backend = ?1 AND stack = ?2")
            .map_err(|e| db_error(&self.path, e))?;
        let rows = statement
            .query_map([backend, stack], |r| r.get::<_, String>(0))
            .map_err(|e| db_error(&self.path, e))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(|e| db_error(&self.path, e))
    }

    fn stacks_changed(
        &mut self,
        backend: &str,
        stack: &str,
        exist: &[String],
        gone: &[String],
    ) -> Result<()> {
        if exist.is_empty() && gone.is_empty() {
            return Ok(());
        }
        let transaction = self
            .connection
            .transaction()
            .map_err(|e| db_error(&self.path, e))?;
        for (sql, projects) in [
            (
                "INSERT OR IGNORE INTO stacks (backend, stack, project) VALUES (?1, ?2, ?3)",
                exist,
            ),
            (
                "DELETE FROM stacks WHERE backend = ?1 AND stack = ?2 AND project = ?3",
                gone,
            ),
        ] {
            let mut statement = transaction
                .prepare_cached(sql)
                .map_err(|e| db_error(&self.path, e))?;
            for project in projects {
                statement
                    .execute([backend, stack, project.as_str()])
                    .map_err(|e| db_error(&self.path, e))?;
            }
        }
        transaction.commit().map_err(|e| db_error(&self.path, e))
    }

    fn last_fingerprints(&self, stack: &str) -> Result<BTreeMap<String, String>> {
        // One row per deployed project, kept as projects finish: the cost does not grow with
        // the history.
        let mut statement = self
            .connection
            .prepare_cached("SELECT project, fingerprint FROM deployed WHERE stack = ?1")
            .map_err(|e| db_error(&self.path, e))?;
        let rows = statement
            .query_map([stack], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(|e| db_error(&self.path, e))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(|e| db_error(&self.path, e))
    }

    fn images(&self, stack: &str) -> Result<Vec<ImageRecord>> {
        self.images_where(Some(&self.host), Some(stack))
    }

    fn record_images(&mut self, images: &[ImageRecord]) -> Result<()> {
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| db_error(&self.path, e))?;
        for i in images {
            transaction
                .execute(
                    "INSERT OR REPLACE INTO images (host, stack, image, image_id, cluster, imported) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![i.host, i.stack, i.image, i.image_id, i.cluster, i.imported],
                )
                .map_err(|e| db_error(&self.path, e))?;
        }
        transaction.commit().map_err(|e| db_error(&self.path, e))
    }

    fn forget_images(&mut self, stack: &str, images: &[String]) -> Result<usize> {
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| db_error(&self.path, e))?;
        let mut forgotten = 0;
        for image in images {
            forgotten += transaction
                .execute(
                    "DELETE FROM images WHERE host = ?1 AND stack = ?2 AND image = ?3",
                    params![self.host, stack, image],
                )
                .map_err(|e| db_error(&self.path, e))?;
        }
        transaction.commit().map_err(|e| db_error(&self.path, e))?;
        Ok(forgotten)
    }
}

impl SqliteLedger {
    /// The images recorded for `host` and `stack` (every one's with `None`), by host, stack and
    /// name.
    fn images_where(&self, host: Option<&str>, stack: Option<&str>) -> Result<Vec<ImageRecord>> {
        let mut statement = self
            .connection
            .prepare_cached(
                "SELECT host, stack, image, image_id, cluster, imported FROM images
                 WHERE (?1 IS NULL OR host = ?1) AND (?2 IS NULL OR stack = ?2)
                 ORDER BY host, stack, image",
            )
            .map_err(|e| db_error(&self.path, e))?;
        let rows = statement
            .query_map(params![host, stack], |r| {
                Ok(ImageRecord {
                    host: r.get(0)?,
                    stack: r.get(1)?,
                    image: r.get(2)?,
                    image_id: r.get(3)?,
                    cluster: r.get(4)?,
                    imported: r.get(5)?,
                })
            })
            .map_err(|e| db_error(&self.path, e))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(|e| db_error(&self.path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(id: &str, stack: &str) -> RunStart {
        RunStart {
            run_id: id.into(),
            operation: Operation::Up,
            provider: "aws".into(),
            stack: stack.into(),
            command: "mara up".into(),
            started: format!("2026-11-21T00:00:0{}.000Z", id.len()),
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
        let mut ledger = SqliteLedger::open(&dir.path().join("ledger.db")).unwrap();
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
        let ledger = SqliteLedger::open(&path).unwrap();
        assert_eq!(
            ledger.last_fingerprints("dev").unwrap(),
            BTreeMap::from([("a".to_string(), "a2".to_string())])
        );
    }

    #[test]
    fn a_read_only_open_sees_what_is_still_in_the_write_ahead_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let mut writer = SqliteLedger::open(&path).unwrap();
        // Keep the log from being checkpointed into the file while the writer is open.
        writer
            .connection
            .execute_batch("PRAGMA wal_autocheckpoint = 0")
            .unwrap();
        writer.begin(&start("r1", "dev"), true).unwrap();
        let wal = dir.path().join("ledger.db-wal");
        assert!(
            std::fs::metadata(&wal).unwrap().len() > 0,
            "the run is in the log"
        );
        let read = SqliteLedger::open_read_only(&path, false).unwrap();
        let runs = read.runs(Some("dev"), 10).unwrap();
        assert_eq!(runs.len(), 1, "mode=ro reads the log");
        drop(read);
        // `immutable` would not see it: which is why it is used only without a log.
        let immutable = SqliteLedger::open_read_only(&path, true).unwrap();
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
        let mut ledger = SqliteLedger::open(&path).unwrap();
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
        let mut ledger = SqliteLedger::open(&dir.path().join("ledger.db")).unwrap();
        ledger.begin(&start("r1", "dev"), true).unwrap();
        // kill(0, 0) asks about our own process group, which always exists.
        ledger
            .connection
            .execute("UPDATE runs SET pid = 0 WHERE run_id = 'r1'", [])
            .unwrap();
        assert!(matches!(
            ledger.begin(&start("r2", "dev"), true).unwrap(),
            Begun::Started { took_over: Some(_) }
        ));
    }

    #[test]
    fn a_forced_unlock_abandons_the_run_and_its_running_projects() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = SqliteLedger::open(&dir.path().join("ledger.db")).unwrap();
        ledger.begin(&start("r1", "dev"), true).unwrap();
        ledger
            .project_started("r1", "vpc", "2026-11-21T00:00:01.000Z", None)
            .unwrap();
        assert_eq!(ledger.unlock("dev").unwrap().unwrap().run_id, "r1");
        assert_eq!(
            ledger.run("r1").unwrap().unwrap().status,
            RunStatus::Abandoned
        );
        assert_eq!(
            ledger.projects("r1").unwrap()[0].status,
            ProjectStatus::Abandoned
        );
        assert!(ledger.holder("dev").unwrap().is_none());
    }

    #[test]
    fn many_processes_may_open_a_new_ledger_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let openers: Vec<_> = (0..8)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || SqliteLedger::open(&path).map(|_| ()))
            })
            .collect();
        for opener in openers {
            opener.join().unwrap().unwrap();
        }
        let ledger = SqliteLedger::open(&path).unwrap();
        let version: i64 = ledger
            .connection
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version as usize, MIGRATIONS.len());
    }

    #[test]
    fn projects_fingerprints_and_history() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = SqliteLedger::open(&dir.path().join("ledger.db")).unwrap();
        ledger.begin(&start("r1", "dev"), true).unwrap();
        ledger
            .project_started("r1", "a", "t0", Some("fp-a"))
            .unwrap();
        let record = ProjectRecord {
            path: "a".into(),
            status: ProjectStatus::Succeeded,
            started: Some("t0".into()),
            finished: Some("t1".into()),
            exit_code: Some(0),
            changes: Some(BTreeMap::from([("create".to_string(), 2)])),
            reason: None,
            log: Some(".mara/logs/r1/a.log".into()),
            fingerprint: None,
        };
        ledger.project_finished("r1", &record).unwrap();
        ledger.finish("r1", RunStatus::Succeeded, "t2").unwrap();
        let run = ledger.run("r1").unwrap().unwrap();
        assert_eq!(run.projects[0].fingerprint.as_deref(), Some("fp-a"));
        assert_eq!(run.projects[0].changes.as_ref().unwrap()["create"], 2);
        assert_eq!(ledger.last_fingerprints("dev").unwrap()["a"], "fp-a");
        assert_eq!(ledger.runs(None, 10).unwrap().len(), 1);
        assert_eq!(
            ledger
                .last_run("dev", Operation::Up)
                .unwrap()
                .unwrap()
                .run_id,
            "r1"
        );
        // Reopening does not migrate again.
        drop(ledger);
        let ledger = SqliteLedger::open(&dir.path().join("ledger.db")).unwrap();
        assert_eq!(
            ledger.runs(Some("dev"), 10).unwrap()[0].status,
            RunStatus::Succeeded
        );
    }
}
