//! The ledger on a PostgreSQL server (docs/commands.md, "A team's ledger"): the dialect of
//! `records::Store` that every machine pointing at the server (`ledger` in mara.toml, or
//! `MARA_LEDGER_URL`) shares; the records themselves are in `records.rs`, as for SQLite. Its
//! tables are prefixed `mara_`, so a team's database can hold them beside its own. The schema is
//! migrated in one transaction under an advisory lock, so many runners starting at once migrate
//! it once. TLS uses the system's root certificates. A lock is a lease its holder renews; the
//! runs' log lines are kept, for `logs` from any machine. A connection that is lost is made
//! again, and what it was doing done again; each statement is prepared once per connection.

mod link;

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, GenericClient, Statement};

use super::records::Records;
use super::store::{self, Row, Store, Tx, Value, Words};
use super::whoami;
use crate::error::{Error, Problem, Result};
pub use link::Escalation;
use link::{CONNECT_LIMIT, Driver, Failure, Link};

/// The schema's version once every migration is made.
pub fn schema_version() -> usize {
    MIGRATIONS.len()
}

/// Each entry moves the schema one version up; never edit one, add the next. The schema they
/// make is the one `tests/ledger_contract.rs` describes (`SCHEMA`), as SQLite's are.
const MIGRATIONS: &[&str] = &[
    // 1: what the SQLite ledger's first three versions hold.
    "CREATE TABLE mara_runs (
        run_id TEXT PRIMARY KEY,
        operation TEXT NOT NULL,
        provider TEXT NOT NULL,
        stack TEXT NOT NULL,
        username TEXT NOT NULL,
        host TEXT NOT NULL,
        pid BIGINT NOT NULL,
        command TEXT NOT NULL,
        started TEXT NOT NULL,
        finished TEXT,
        status TEXT NOT NULL,
        cancel_requested BOOLEAN NOT NULL DEFAULT FALSE
    );
    CREATE INDEX mara_runs_by_stack ON mara_runs (stack, started);
    CREATE TABLE mara_projects (
        seq BIGSERIAL,
        run_id TEXT NOT NULL REFERENCES mara_runs (run_id),
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
    CREATE TABLE mara_locks (
        stack TEXT PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES mara_runs (run_id)
    );
    CREATE TABLE mara_stacks (
        backend TEXT NOT NULL,
        stack TEXT NOT NULL,
        project TEXT NOT NULL,
        PRIMARY KEY (backend, stack, project)
    );
    CREATE TABLE mara_deployed (
        stack TEXT NOT NULL,
        project TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        PRIMARY KEY (stack, project)
    );",
    // 2: a lock is a lease, renewed by its holder; an expired one is taken over from any
    // machine.
    "ALTER TABLE mara_locks ADD COLUMN lease_until TIMESTAMPTZ NOT NULL DEFAULT now();",
    // 3: the runs' log lines (redacted), for `logs` and `logs --follow` from any machine.
    "CREATE TABLE mara_log_lines (
        seq BIGSERIAL PRIMARY KEY,
        run_id TEXT NOT NULL,
        path TEXT NOT NULL,
        line TEXT NOT NULL
    );
    CREATE INDEX mara_log_lines_by_run ON mara_log_lines (run_id, seq);",
    // 4: a lock keeps its own lease length, so that a run fanned out over CI jobs (opened with
    // a long lease) keeps it whichever job renews it.
    "ALTER TABLE mara_locks ADD COLUMN lease_seconds DOUBLE PRECISION NOT NULL DEFAULT 60;",
    // 5: the images imported into each stack's local cluster (a machine's own), for `mara images
    // update`.
    "CREATE TABLE mara_images (
        host TEXT NOT NULL,
        stack TEXT NOT NULL,
        image TEXT NOT NULL,
        image_id TEXT NOT NULL,
        cluster TEXT NOT NULL,
        imported TEXT NOT NULL,
        PRIMARY KEY (host, stack, image)
    );",
    // 6: the projects a job of a fanned-out run runs, claimed for as long as it renews its lease,
    // so that a second job of one project (a retry while the first runs) is refused.
    "CREATE TABLE mara_claims (
        run_id TEXT NOT NULL,
        path TEXT NOT NULL,
        claimer TEXT NOT NULL,
        claimed_until TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (run_id, path)
    );",
    // 7: each project's stack outputs at its last successful `up` that read them (none once
    // destroyed: kept, said destroyed, for what still stands on it), for its dependents'
    // inputs; secret ones by name only.
    "CREATE TABLE mara_outputs (
        stack TEXT NOT NULL,
        project TEXT NOT NULL,
        run_id TEXT NOT NULL,
        outputs TEXT NOT NULL,
        destroyed TEXT,
        PRIMARY KEY (stack, project)
    );",
    // 8: what a fanned-out run was opened with (the stack configuration, the environment
    // file's lines that hold no secret), which its jobs use rather than their checkouts'.
    "CREATE TABLE mara_run_inputs (
        run_id TEXT PRIMARY KEY,
        inputs TEXT NOT NULL
    );",
    // 9: what each project's preview showed beyond its counts (changed outputs, property
    // diffs), for the summary of a fanned-out preview, which its close job makes.
    "CREATE TABLE mara_previews (
        run_id TEXT NOT NULL,
        path TEXT NOT NULL,
        preview TEXT NOT NULL,
        PRIMARY KEY (run_id, path)
    );",
    // 10: how many projects a run selected, its projects recorded `waiting` as it starts, so
    // that `--resume` knows those it never started; none for a run recorded before.
    "ALTER TABLE mara_runs ADD COLUMN selected INTEGER;",
    // 11: the named tokens `mara serve` takes (their SHA-256 digests, never their values), and
    // the audit of every cancel and unlock: who, when, from where.
    "CREATE TABLE mara_tokens (
        name TEXT PRIMARY KEY,
        role TEXT NOT NULL,
        digest TEXT NOT NULL UNIQUE,
        created TEXT NOT NULL,
        created_by TEXT NOT NULL,
        last_used TEXT
    );
    CREATE TABLE mara_audit (
        at TEXT NOT NULL,
        action TEXT NOT NULL,
        stack TEXT NOT NULL,
        run_id TEXT NOT NULL,
        actor TEXT NOT NULL,
        via TEXT NOT NULL
    );
    CREATE INDEX mara_audit_by_run ON mara_audit (run_id, at);",
    // 12: a run's graph as it started ((needed, needing) pairs of its projects' paths, as
    // JSON), for its page to draw as the run had it; none for a run recorded before.
    "ALTER TABLE mara_runs ADD COLUMN graph TEXT;",
    // 13: a project's runs, for its page in `mara serve`.
    "CREATE INDEX mara_projects_by_path ON mara_projects (path);",
    // 14: what `status`, `history`, `mara serve`'s pages and a retention read, each in an
    // index's order and no further than it needs, however long the history: every run by its
    // start (`history --all-stacks`, the runs list, the runs past a retention's bounds), a
    // stack's (its history, and every stack one seek each), a stack's last run of each
    // operation.
    "DROP INDEX mara_runs_by_stack;
    CREATE INDEX mara_runs_by_stack ON mara_runs (stack, started, run_id);
    CREATE INDEX mara_runs_by_start ON mara_runs (started, run_id);
    CREATE INDEX mara_runs_by_operation ON mara_runs (stack, operation, started, run_id);",
    // 15: what the workspace's policies said of the run (docs/commands.md, "Policies"), as
    // JSON; none where they said nothing, or there were none.
    "ALTER TABLE mara_runs ADD COLUMN policy TEXT;",
];

/// How long a lock lasts unless renewed: `MARA_LEASE_SECONDS` (`given`), 60 by default, from 2
/// to 3,600 (an hour: a killed run's lock is taken over after it).
pub fn lease_length(given: Option<&str>) -> Result<std::time::Duration> {
    let Some(given) = given else {
        return Ok(std::time::Duration::from_secs(60));
    };
    match given.trim().parse::<u64>() {
        Ok(seconds @ 2..=3600) => Ok(std::time::Duration::from_secs(seconds)),
        _ => Err(Error::config(
            Problem::new(format!(
                "MARA_LEASE_SECONDS is `{given}`: a lease is a whole number of seconds from 2 to 3600"
            ))
            .hint("unset it for the default, 60 seconds"),
        )),
    }
}

/// The advisory lock the migrations are taken under (any number; this one spells "mara").
const MIGRATION_LOCK: i64 = 0x6d61_7261;

/// A team's ledger.
pub type PostgresLedger = Records<Postgres>;

/// A connection to a ledger server.
pub struct Postgres {
    /// The runtime every call is driven on, bounded (`link`).
    driver: Driver,
    /// The connection, `None` once lost or abandoned: the next call connects again.
    link: RefCell<Option<Link>>,
    /// Every statement, prepared once per connection: each then costs one round trip, not two.
    statements: RefCell<HashMap<&'static str, Statement>>,
    /// How to connect again when the connection is lost (password included).
    config: tokio_postgres::Config,
    lease: std::time::Duration,
    /// The server as messages name it: the URL without its password.
    shown: PathBuf,
    /// This process as its claims name it (`Store::claim`), and the run it claimed in.
    claimer: String,
    claimed: Option<String>,
    /// What its queries have read (`store::Reads`: no steps, which the server does not say).
    reads: std::cell::Cell<store::Reads>,
}

impl Postgres {
    /// Connects to the server at `url` (TLS as its `sslmode` says: `prefer` by default, with
    /// the system's root certificates, and none over a Unix socket) and migrates the schema. A
    /// password not in the URL comes from `PGPASSWORD`. A server that does not answer within
    /// `link::CONNECT_LIMIT` is a failure to connect; `escalation` abandons a wait at once.
    pub fn connect(url: &str, escalation: Option<Escalation>) -> Result<PostgresLedger> {
        let shown = PathBuf::from(crate::workspace::ledger_url::shown(url));
        let failed = |problem: Problem| {
            Error::config(problem.subject(format!("the run ledger {}", shown.display())))
        };
        let mut config =
            crate::workspace::ledger_url::parse(url).map_err(|e| failed(Problem::new(e)))?;
        if config.get_password().is_none()
            && let Ok(password) = std::env::var("PGPASSWORD")
        {
            config.password(password);
        }
        if config.get_application_name().is_none() {
            config.application_name("mara");
        }
        // A server that stops answering (a lost network) is noticed by the kernel too.
        config
            .connect_timeout(CONNECT_LIMIT)
            .keepalives_idle(std::time::Duration::from_secs(10))
            .keepalives_interval(std::time::Duration::from_secs(2))
            .tcp_user_timeout(std::time::Duration::from_secs(15));
        let lease = lease_length(std::env::var("MARA_LEASE_SECONDS").ok().as_deref())?;
        let driver = Driver::new(escalation, lease).map_err(Error::Runtime)?;
        let mut link = match driver.connect(&config) {
            Ok(link) => link,
            Err(Failure::Interrupted) => return Err(Error::Interrupted),
            Err(failure) => return Err(failed(connect_problem(&failure, &config))),
        };
        let version = match driver.call(CONNECT_LIMIT, migrate(&mut link.client)) {
            Ok(version) => version,
            Err(Failure::Interrupted) => return Err(Error::Interrupted),
            Err(failure) => return Err(failed(schema_problem(&failure))),
        };
        if version > MIGRATIONS.len() {
            return Err(Error::config(
                Problem::new(format!(
                    "the run ledger is at schema version {version}, newer than this mara knows ({})",
                    MIGRATIONS.len()
                ))
                .subject(shown.display().to_string())
                .hint("use a newer mara"),
            ));
        }
        Ok(Records::new(Postgres {
            driver,
            link: RefCell::new(Some(link)),
            statements: RefCell::default(),
            config,
            lease,
            shown,
            claimer: claimer(),
            claimed: None,
            reads: Default::default(),
        }))
    }

    fn failed(&self, failure: Failure) -> Error {
        match failure {
            Failure::Db(error) => Error::Ledger {
                path: self.shown.clone(),
                message: cause(&error),
            },
            Failure::Stalled(limit) => Error::Ledger {
                path: self.shown.clone(),
                message: stalled(limit),
            },
            Failure::Interrupted => Error::Interrupted,
            Failure::Mara(error) => error,
        }
    }

    /// Runs `work` on the connection (made first if there is none). A connection that was lost
    /// (a server restarted, a network that came back) or did not answer in time is made again
    /// once, and `work` runs again on it: what it did on the lost connection was rolled back
    /// with it (unless its commit was under way, which every write here tolerates being made
    /// twice).
    fn with<T>(
        &self,
        mut work: impl FnMut(&mut Client) -> std::result::Result<T, Failure>,
    ) -> Result<T> {
        let mut link = self.link.borrow_mut();
        let first = match link.as_mut() {
            Some(open) => work(&mut open.client),
            None => Err(Failure::Stalled(std::time::Duration::ZERO)),
        };
        let why = match first {
            Err(Failure::Interrupted) => {
                // Abandoned mid-call: its answer would come to the next call.
                *link = None;
                return Err(Error::Interrupted);
            }
            Err(Failure::Db(error)) if lost(&error, link.as_ref().map(|l| &l.client)) => {
                cause(&error)
            }
            Err(Failure::Stalled(limit)) if !limit.is_zero() => stalled(limit),
            Err(Failure::Stalled(_)) => "it was lost before".to_string(),
            result => return result.map_err(|f| self.failed(f)),
        };
        tracing::info!("the ledger's connection was lost ({why}): connecting again");
        *link = None;
        self.statements.borrow_mut().clear();
        let again = self
            .driver
            .connect(&self.config)
            .map_err(|failure| match failure {
                Failure::Interrupted => Error::Interrupted,
                failure => Error::Ledger {
                    path: self.shown.clone(),
                    message: format!("{why}; connecting again: {}", failure_text(&failure)),
                },
            })?;
        let open = link.insert(again);
        let result = work(&mut open.client);
        if matches!(&result, Err(Failure::Stalled(_) | Failure::Interrupted)) {
            *link = None;
        }
        result.map_err(|f| self.failed(f))
    }

    /// `sql` as prepared on this connection (`statements`).
    fn prepared(
        &self,
        client: &impl GenericClient,
        sql: &'static str,
    ) -> std::result::Result<Statement, Failure> {
        if let Some(statement) = self.statements.borrow().get(sql) {
            return Ok(statement.clone());
        }
        let text = Self::WORDS.render(sql);
        let statement = self.driver.call(self.driver.limit, client.prepare(&text))?;
        self.statements.borrow_mut().insert(sql, statement.clone());
        Ok(statement)
    }

    fn query_on(
        &self,
        client: &impl GenericClient,
        sql: &'static str,
        params: &[Value],
    ) -> std::result::Result<Vec<Row>, Failure> {
        let statement = self.prepared(client, sql)?;
        let values = self.bind(&statement, params).map_err(Failure::Mara)?;
        let rows = self
            .driver
            .call(self.driver.limit, client.query(&statement, &refs(&values)))?;
        store::Reads::count(&self.reads, rows.len(), 0);
        rows.iter()
            .map(|r| self.row(r))
            .collect::<Result<Vec<_>>>()
            .map_err(Failure::Mara)
    }

    fn execute_on(
        &self,
        client: &impl GenericClient,
        sql: &'static str,
        params: &[Value],
    ) -> std::result::Result<u64, Failure> {
        let statement = self.prepared(client, sql)?;
        let values = self.bind(&statement, params).map_err(Failure::Mara)?;
        self.driver.call(
            self.driver.limit,
            client.execute(&statement, &refs(&values)),
        )
    }

    /// `params` as the statement's parameters' types take them.
    fn bind(&self, statement: &Statement, params: &[Value]) -> Result<Vec<Box<dyn ToSql + Sync>>> {
        let types = statement.params();
        if types.len() != params.len() {
            return Err(self.value_error(format!(
                "a statement takes {} values, not {}",
                types.len(),
                params.len()
            )));
        }
        types
            .iter()
            .zip(params)
            .map(|(ty, value)| -> Result<Box<dyn ToSql + Sync>> {
                Ok(match (value, ty) {
                    (Value::Null, t) if *t == Type::INT4 => Box::new(None::<i32>),
                    (Value::Null, t) if *t == Type::INT8 => Box::new(None::<i64>),
                    (Value::Null, t) if *t == Type::FLOAT8 => Box::new(None::<f64>),
                    (Value::Null, t) if *t == Type::BOOL => Box::new(None::<bool>),
                    (Value::Null, t) if is_text(t) => Box::new(None::<String>),
                    (Value::Int(n), t) if *t == Type::INT4 => Box::new(
                        i32::try_from(*n)
                            .map_err(|_| self.value_error(format!("{n} is too large")))?,
                    ),
                    (Value::Int(n), t) if *t == Type::INT8 => Box::new(*n),
                    (Value::Int(n), t) if *t == Type::FLOAT8 => Box::new(*n as f64),
                    (Value::Real(r), t) if *t == Type::FLOAT8 => Box::new(*r),
                    (Value::Bool(b), t) if *t == Type::BOOL => Box::new(*b),
                    (Value::Text(text), t) if is_text(t) => Box::new(text.clone()),
                    (Value::Texts(texts), t) if *t == Type::TEXT_ARRAY => Box::new(texts.clone()),
                    (value, ty) => {
                        return Err(self.value_error(format!("{value:?} cannot be a {ty}")));
                    }
                })
            })
            .collect()
    }

    /// A row as the records read it.
    fn row(&self, row: &tokio_postgres::Row) -> Result<Row> {
        let read = |i: usize, ty: &Type| -> std::result::Result<Value, tokio_postgres::Error> {
            let value = if *ty == Type::BOOL {
                row.try_get::<_, Option<bool>>(i)?.map(Value::Bool)
            } else if *ty == Type::INT2 {
                row.try_get::<_, Option<i16>>(i)?
                    .map(|n| Value::Int(n.into()))
            } else if *ty == Type::INT4 {
                row.try_get::<_, Option<i32>>(i)?
                    .map(|n| Value::Int(n.into()))
            } else if *ty == Type::INT8 {
                row.try_get::<_, Option<i64>>(i)?.map(Value::Int)
            } else if *ty == Type::FLOAT8 {
                row.try_get::<_, Option<f64>>(i)?.map(Value::Real)
            } else {
                row.try_get::<_, Option<String>>(i)?.map(Value::Text)
            };
            Ok(value.unwrap_or(Value::Null))
        };
        (row.columns().iter().enumerate())
            .map(|(i, column)| read(i, column.type_()).map_err(|e| self.failed(Failure::Db(e))))
            .collect::<Result<Vec<_>>>()
            .map(Row)
    }

    fn value_error(&self, message: String) -> Error {
        Error::Ledger {
            path: self.shown.clone(),
            message,
        }
    }
}

/// A parameter a text goes into.
fn is_text(ty: &Type) -> bool {
    [
        Type::TEXT,
        Type::VARCHAR,
        Type::BPCHAR,
        Type::NAME,
        Type::UNKNOWN,
    ]
    .contains(ty)
}

fn refs(values: &[Box<dyn ToSql + Sync>]) -> Vec<&(dyn ToSql + Sync)> {
    values.iter().map(|v| v.as_ref()).collect()
}

/// A transaction's statements. The first that fails keeps its failure, so that a lost
/// connection (or one that stopped answering) is told from a failed statement.
struct PostgresTx<'a, 't> {
    store: &'a Postgres,
    transaction: &'a tokio_postgres::Transaction<'t>,
    failed: Option<Failure>,
}

impl PostgresTx<'_, '_> {
    /// What a statement's failure says to the records; the failure itself is kept for
    /// `transaction`, which reports it (or connects again when it was the connection's loss).
    fn said<T>(&mut self, result: std::result::Result<T, Failure>) -> Result<T> {
        result.map_err(|failure| match failure {
            Failure::Mara(error) => error,
            failure => {
                let said = self.store.value_error(failure_text(&failure));
                self.failed = Some(failure);
                said
            }
        })
    }
}

impl Tx for PostgresTx<'_, '_> {
    fn execute(&mut self, sql: &'static str, params: &[Value]) -> Result<u64> {
        let result = self.store.execute_on(self.transaction, sql, params);
        self.said(result)
    }

    fn query(&mut self, sql: &'static str, params: &[Value]) -> Result<Vec<Row>> {
        let result = self.store.query_on(self.transaction, sql, params);
        self.said(result)
    }
}

impl Store for Postgres {
    const WORDS: Words = Words {
        prefix: "mara_",
        user: "username",
        order: "seq",
        lease_left: "GREATEST(0, CEIL(EXTRACT(EPOCH FROM l.lease_until - now())))::BIGINT",
        live: "l.lease_until >= now()",
        lapsed: "(status = 'running' AND operation NOT IN ('preview', 'drift') AND NOT EXISTS (SELECT 1 FROM {p}locks l WHERE l.run_id = {p}runs.run_id AND l.lease_until >= now()))",
        list: "unnest(CAST(# AS TEXT[])) AS list(value)",
        pairs: "unnest(CAST(#1 AS TEXT[]), CAST(#2 AS TEXT[])) AS pairs(first, second)",
        json_rows: super::store::JsonRows::ToRecordset,
        question_marks: false,
    };

    fn shown(&self) -> &Path {
        &self.shown
    }

    fn query(&self, sql: &'static str, params: &[Value]) -> Result<Vec<Row>> {
        self.with(|client| self.query_on(client, sql, params))
    }

    fn execute(&mut self, sql: &'static str, params: &[Value]) -> Result<u64> {
        self.with(|client| self.execute_on(client, sql, params))
    }

    fn reads(&self) -> store::Reads {
        self.reads.get()
    }

    /// With `stack`, one transaction at a time decides about its lock: the lock's row, or (when
    /// there is none yet) an advisory lock on the stack's name.
    fn transaction(
        &mut self,
        stack: Option<&str>,
        work: &mut dyn FnMut(&mut dyn Tx) -> Result<()>,
    ) -> Result<()> {
        self.with(|client| {
            let limit = self.driver.limit;
            let transaction = self.driver.call(limit, client.transaction())?;
            if let Some(stack) = stack {
                let params: [&(dyn ToSql + Sync); 1] = [&stack];
                let locked = transaction.execute(
                    "SELECT pg_advisory_xact_lock(hashtext('mara lock ' || $1))",
                    &params,
                );
                self.driver.call(limit, locked)?;
            }
            let mut tx = PostgresTx {
                store: self,
                transaction: &transaction,
                failed: None,
            };
            if let Err(error) = work(&mut tx) {
                return Err(match tx.failed.take() {
                    Some(failure) => failure,
                    None => Failure::Mara(error),
                });
            }
            self.driver.call(limit, transaction.commit())
        })
    }

    fn lease(&self) -> Option<std::time::Duration> {
        Some(self.lease)
    }

    fn set_lease(&mut self, lease: std::time::Duration) {
        self.lease = lease;
    }

    fn lock_statement(&self) -> (&'static str, Vec<Value>) {
        (
            "INSERT INTO {p}locks (stack, run_id, lease_until, lease_seconds)
             VALUES ($1, $2, now() + make_interval(secs => $3), $3)",
            vec![Value::Real(self.lease.as_secs_f64())],
        )
    }

    fn renew(&mut self, run_id: &str) -> Result<bool> {
        let renewed = self.execute(
            "UPDATE {p}locks SET lease_until = now() + make_interval(secs => lease_seconds) WHERE run_id = $1",
            &[run_id.into()],
        )?;
        // A job's claims live as long as it renews.
        if self.claimed.as_deref() == Some(run_id) {
            let (lease, claimer) = (Value::Real(self.lease.as_secs_f64()), self.claimer.clone());
            self.execute(
                "UPDATE {p}claims SET claimed_until = now() + make_interval(secs => $3)
                 WHERE run_id = $1 AND claimer = $2",
                &[run_id.into(), (&claimer).into(), lease],
            )?;
        }
        Ok(renewed == 1)
    }

    fn claim(&mut self, run_id: &str, paths: &[String]) -> Result<Option<String>> {
        let (lease, claimer) = (self.lease.as_secs_f64(), self.claimer.clone());
        let mut held = None;
        // One claim of a run at a time (its own advisory lock): what another job holds is
        // read, then what is free taken, with nothing between.
        self.transaction(Some(&format!("claims of {run_id}")), &mut |tx| {
            let rows = tx.query(
                "SELECT path FROM {p}claims WHERE run_id = $1 AND path = ANY($2::TEXT[])
                 AND claimer <> $3 AND claimed_until >= now() ORDER BY path LIMIT 1",
                &[
                    run_id.into(),
                    Value::Texts(paths.to_vec()),
                    (&claimer).into(),
                ],
            )?;
            held = rows.first().and_then(|r| r.text(0).ok());
            if held.is_some() {
                return Ok(());
            }
            for path in paths {
                tx.execute(
                    "INSERT INTO {p}claims (run_id, path, claimer, claimed_until)
                     VALUES ($1, $2, $3, now() + make_interval(secs => $4))
                     ON CONFLICT (run_id, path) DO UPDATE
                       SET claimer = excluded.claimer, claimed_until = excluded.claimed_until",
                    &[
                        run_id.into(),
                        path.into(),
                        (&claimer).into(),
                        Value::Real(lease),
                    ],
                )?;
            }
            Ok(())
        })?;
        if held.is_none() {
            self.claimed = Some(run_id.to_string());
        }
        Ok(held)
    }

    fn release(&mut self, run_id: &str) -> Result<()> {
        if self.claimed.as_deref() != Some(run_id) {
            return Ok(());
        }
        let claimer = self.claimer.clone();
        self.execute(
            "DELETE FROM {p}claims WHERE run_id = $1 AND claimer = $2",
            &[run_id.into(), (&claimer).into()],
        )?;
        self.claimed = None;
        Ok(())
    }

    fn stores_logs(&self) -> bool {
        true
    }

    fn over_tls(&self) -> Result<bool> {
        let rows = self.query(
            "SELECT CASE WHEN ssl THEN 1 ELSE 0 END FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )?;
        Ok(rows.first().and_then(|r| r.int(0).ok()) == Some(1))
    }

    fn logs_statement(&self, run_id: &str, lines: &[(String, String)]) -> Option<store::Statement> {
        let (paths, texts): (Vec<String>, Vec<String>) = lines.iter().cloned().unzip();
        Some((
            "INSERT INTO {p}log_lines (run_id, path, line)
             SELECT $1, p, l FROM unnest($2::TEXT[], $3::TEXT[]) WITH ORDINALITY AS t(p, l, n) ORDER BY n",
            vec![run_id.into(), Value::Texts(paths), Value::Texts(texts)],
        ))
    }

    /// Prepared first (once per connection), then sent at once and answered together: a
    /// batch of the run's writes costs three round trips (its begin, its statements, its
    /// commit), not one or two per statement.
    fn write_all(&mut self, statements: &[store::Statement]) -> Result<()> {
        if statements.is_empty() {
            return Ok(());
        }
        self.with(|client| {
            let mut bound = Vec::with_capacity(statements.len());
            for (sql, params) in statements {
                let statement = self.prepared(client, sql)?;
                let values = self.bind(&statement, params).map_err(Failure::Mara)?;
                bound.push((statement, values));
            }
            let params: Vec<_> = bound.iter().map(|(_, values)| refs(values)).collect();
            let limit = self.driver.limit;
            let transaction = self.driver.call(limit, client.transaction())?;
            let sent = bound
                .iter()
                .zip(&params)
                .map(|((statement, _), params)| transaction.execute(statement, params));
            for made in self.driver.call(limit, pipelined(sent))? {
                made?;
            }
            self.driver.call(limit, transaction.commit())
        })
    }
}

/// Every call of `calls` sent before any answer is awaited (tokio-postgres pipelines what is
/// polled together), their answers in order.
async fn pipelined<T>(
    calls: impl Iterator<Item = impl Future<Output = T>>,
) -> std::result::Result<Vec<T>, tokio_postgres::Error> {
    Ok(futures_util::future::join_all(calls).await)
}

/// Whether an error is the connection's loss rather than the statement's: the connection
/// closed, an I/O failure, or the server's own "connection exception" and "operator
/// intervention" (a shutdown) classes.
fn lost(error: &tokio_postgres::Error, client: Option<&Client>) -> bool {
    match error.as_db_error() {
        // A value that did not fit its parameter or column is mara's mistake, not the line's.
        None => {
            let said = error.to_string();
            !(said.starts_with("error serializing") || said.starts_with("error deserializing"))
        }
        Some(db) => {
            client.is_none_or(Client::is_closed)
                || db.code().code().starts_with("08")
                || db.code().code().starts_with("57")
        }
    }
}

/// What a call that did not answer in time says.
fn stalled(limit: std::time::Duration) -> String {
    format!(
        "the server did not answer within {} s",
        limit.as_secs_f64().ceil() as u64
    )
}

/// A failure in words.
fn failure_text(failure: &Failure) -> String {
    match failure {
        Failure::Db(error) => cause(error),
        Failure::Stalled(limit) => stalled(*limit),
        Failure::Interrupted => "interrupted".to_string(),
        Failure::Mara(error) => error.to_string(),
    }
}

/// A failed connection, with what to do about it.
fn connect_problem(failure: &Failure, config: &tokio_postgres::Config) -> Problem {
    let reason = failure_text(failure);
    let said = reason.to_lowercase();
    let hint = if said.contains("password missing") {
        "give the password in PGPASSWORD (or in MARA_LEDGER_URL, never in mara.toml)".to_string()
    } else if said.contains("password authentication failed")
        || said.contains("no pg_hba.conf entry")
    {
        format!(
            "check the user ({}) and its password (PGPASSWORD or MARA_LEDGER_URL), and that the server lets it in",
            match config.get_user() {
                Some(user) => user.to_string(),
                None => format!("`{}`, this machine's, as the URL names none", whoami().0),
            }
        )
    } else if said.contains("certificate") || said.contains("unknownissuer") {
        "the server's certificate is not signed by an authority this machine trusts: point SSL_CERT_FILE at the CA certificate that signed it (mara always verifies the server's certificate)".to_string()
    } else if said.contains("does not support tls") {
        "the server takes no TLS: drop `sslmode` from the URL, or enable TLS on the server"
            .to_string()
    } else if said.contains("lookup address") || said.contains("name or service not known") {
        "check the host name in the URL".to_string()
    } else if said.contains("does not exist") {
        "check the database and user names in the URL (the database must exist: `createdb`)"
            .to_string()
    } else if said.contains("connection refused")
        || said.contains("timed out")
        || said.contains("timeout")
        || said.contains("did not answer")
    {
        "check the host and port, and that the server is running and reachable from here"
            .to_string()
    } else {
        "check the URL (MARA_LEDGER_URL, or `ledger` in mara.toml) and the server".to_string()
    };
    Problem::new(format!("cannot connect: {reason}")).hint(hint)
}

/// A schema that could not be read or migrated, with what to do about it.
fn schema_problem(failure: &Failure) -> Problem {
    let reason = failure_text(failure);
    let problem = Problem::new(format!("cannot prepare the ledger's tables: {reason}"));
    match reason.contains("permission denied") {
        true => problem.hint("mara's user needs SELECT, INSERT, UPDATE and DELETE on the mara_ tables and USAGE on their sequences; the first use of a database (and a newer mara's first run) also CREATE on the schema"),
        false => problem,
    }
}

/// `an up`, `a preview`.
fn cause(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return db.message().to_string();
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        text.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    text
}

/// The schema checked and migrated in one transaction under an advisory lock: runners starting
/// at once wait for each other, and the later ones find it up to date. Returns the version found.
async fn migrate(client: &mut Client) -> std::result::Result<usize, tokio_postgres::Error> {
    // Mostly the schema is current: one read says so, without the lock (a missing table or an
    // older version takes the locked way, which says again what it finds).
    let current = client
        .query_opt("SELECT version FROM mara_schema", &[])
        .await;
    match current {
        Ok(Some(row)) => {
            let found = row.get::<_, i32>(0).max(0) as usize;
            if found >= MIGRATIONS.len() {
                return Ok(found);
            }
        }
        // The tables are there, but this user may not read them: that is the error to report,
        // not the schema's (which it would need only to create them).
        Err(error)
            if error
                .as_db_error()
                .is_some_and(|d| d.code().code() == "42501") =>
        {
            return Err(error);
        }
        _ => {}
    }
    let transaction = client.transaction().await?;
    transaction
        .execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    transaction
        .batch_execute("CREATE TABLE IF NOT EXISTS mara_schema (version INTEGER NOT NULL)")
        .await?;
    let version: Option<i32> = transaction
        .query_opt("SELECT version FROM mara_schema", &[])
        .await?
        .map(|row| row.get(0));
    let found = version.unwrap_or(0).max(0) as usize;
    if found >= MIGRATIONS.len() {
        transaction.commit().await?;
        return Ok(found);
    }
    for migration in &MIGRATIONS[found..] {
        transaction.batch_execute(migration).await?;
    }
    let now = MIGRATIONS.len() as i32;
    let sql = match version {
        None => "INSERT INTO mara_schema (version) VALUES ($1)",
        Some(_) => "UPDATE mara_schema SET version = $1",
    };
    transaction.execute(sql, &[&now]).await?;
    transaction.commit().await?;
    Ok(found)
}

/// This process, as a claim names it: its host, pid and a moment of its start.
fn claimer() -> String {
    let (_, host) = whoami();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{host}:{}:{now}", std::process::id())
}
