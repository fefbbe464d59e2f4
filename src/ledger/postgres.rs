//! The ledger on a PostgreSQL server (docs/commands.md, "A team's ledger"): the same records as
//! the SQLite ledger, shared by every machine that points at the server (`ledger` in mara.toml,
//! or `MARA_LEDGER_URL`). Its tables are prefixed `mara_`, so a team's database can hold them
//! beside its own. The schema is migrated in one transaction under an advisory lock, so many
//! runners starting at once migrate it once. TLS uses the system's root certificates.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use postgres::{Client, GenericClient, Row, Statement};

use super::{
    Begun, History, Holder, ImageRecord, Ledger, ProjectRecord, RunRecord, RunStart, whoami,
};
use crate::engine::Operation;
use crate::error::{Error, Problem, Result};
use crate::status::{ProjectStatus, RunStatus};

/// Each entry moves the schema one version up; never edit one, add the next.
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

pub struct PostgresLedger {
    client: RefCell<Client>,
    /// The statements of the hot path (a project's start and end, its log lines, the lease and
    /// the cancel poll), prepared once per connection: each then costs one round trip, not two.
    statements: RefCell<std::collections::HashMap<&'static str, Statement>>,
    /// How to connect again when the connection is lost (password included).
    config: postgres::Config,
    lease: std::time::Duration,
    /// The server as messages name it: the URL without its password.
    shown: PathBuf,
    user: String,
    host: String,
}

impl PostgresLedger {
    /// Connects to the server at `url` (TLS as its `sslmode` says: `prefer` by default, with
    /// the system's root certificates, and none over a Unix socket) and migrates the schema. A
    /// password not in the URL comes from `PGPASSWORD`.
    pub fn connect(url: &str) -> Result<PostgresLedger> {
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
        // A server that stops answering (a lost network) is noticed, not waited for forever.
        config
            .connect_timeout(std::time::Duration::from_secs(10))
            .keepalives_idle(std::time::Duration::from_secs(10))
            .keepalives_interval(std::time::Duration::from_secs(2))
            .tcp_user_timeout(std::time::Duration::from_secs(15));
        let lease = lease_length(std::env::var("MARA_LEASE_SECONDS").ok().as_deref())?;
        let mut client = dial(&config).map_err(|e| failed(connect_problem(&e, &config)))?;
        let version = migrate(&mut client).map_err(|e| failed(schema_problem(&e)))?;
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
        let (user, host) = whoami();
        Ok(PostgresLedger {
            client: RefCell::new(client),
            statements: RefCell::default(),
            config,
            lease,
            shown,
            user,
            host,
        })
    }

    fn error(&self, error: postgres::Error) -> Error {
        Error::Ledger {
            path: self.shown.clone(),
            message: cause(&error),
        }
    }

    /// Runs `work` on the connection. A connection that was lost (a server restarted, a network
    /// that came back) is made again once, and `work` runs again on it: what it did on the lost
    /// connection was rolled back with it (unless its commit was under way, which every write
    /// here tolerates being made twice).
    fn with<T>(
        &self,
        mut work: impl FnMut(&mut Client) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        let mut client = self.client.borrow_mut();
        match work(&mut client) {
            Err(error) if lost(&error, &client) => {
                tracing::info!(
                    "the ledger's connection was lost ({}): connecting again",
                    cause(&error)
                );
                self.statements.borrow_mut().clear();
                *client = dial(&self.config).map_err(|again| Error::Ledger {
                    path: self.shown.clone(),
                    message: format!("{}; connecting again: {}", cause(&error), cause(&again)),
                })?;
                work(&mut client).map_err(|e| self.error(e))
            }
            result => result.map_err(|e| self.error(e)),
        }
    }

    /// `sql` as prepared on this connection (`statements`).
    fn prepared(
        &self,
        client: &mut impl GenericClient,
        sql: &'static str,
    ) -> std::result::Result<Statement, postgres::Error> {
        if let Some(statement) = self.statements.borrow().get(sql) {
            return Ok(statement.clone());
        }
        let statement = client.prepare(sql)?;
        self.statements.borrow_mut().insert(sql, statement.clone());
        Ok(statement)
    }

    fn cached_execute(
        &self,
        client: &mut impl GenericClient,
        sql: &'static str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> std::result::Result<u64, postgres::Error> {
        let statement = self.prepared(client, sql)?;
        client.execute(&statement, params)
    }

    fn cached_query_opt(
        &self,
        client: &mut impl GenericClient,
        sql: &'static str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> std::result::Result<Option<Row>, postgres::Error> {
        let statement = self.prepared(client, sql)?;
        client.query_opt(&statement, params)
    }

    fn cached_query_one(
        &self,
        client: &mut impl GenericClient,
        sql: &'static str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> std::result::Result<Row, postgres::Error> {
        let statement = self.prepared(client, sql)?;
        client.query_one(&statement, params)
    }

    fn holder_of(
        client: &mut impl GenericClient,
        stack: &str,
    ) -> std::result::Result<Option<Holder>, postgres::Error> {
        let row = client.query_opt(
            "SELECT r.run_id, r.username, r.host, r.pid, r.started, r.command,
                    GREATEST(0, CEIL(EXTRACT(EPOCH FROM l.lease_until - now())))::BIGINT FROM mara_locks l
             JOIN mara_runs r ON r.run_id = l.run_id WHERE l.stack = $1",
            &[&stack],
        )?;
        Ok(row.map(|row| Holder {
            run_id: row.get(0),
            user: row.get(1),
            host: row.get(2),
            pid: row.get::<_, i64>(3) as u32,
            started: row.get(4),
            command: row.get(5),
            lease_left: Some(row.get::<_, i64>(6).max(0) as u64),
        }))
    }

    /// The run's columns, and whether it is recorded running but holds no live lease: its
    /// process stopped renewing without recording its end (killed, its machine gone), which any
    /// machine can tell.
    const RUN_COLUMNS: &'static str = "run_id, operation, provider, stack, username, host, pid, command, started, finished, status,
        (status = 'running' AND operation <> 'preview' AND NOT EXISTS (SELECT 1 FROM mara_locks l
            WHERE l.run_id = mara_runs.run_id AND l.lease_until >= now())) AS lapsed";

    fn record(row: &Row) -> RunRecord {
        let lapsed: bool = row.get(11);
        RunRecord {
            run_id: row.get(0),
            operation: Operation::parse(row.get(1)).unwrap_or(Operation::Up),
            provider: row.get(2),
            stack: row.get(3),
            user: row.get(4),
            host: row.get(5),
            pid: row.get::<_, i64>(6) as u32,
            command: row.get(7),
            started: row.get(8),
            finished: row.get(9),
            status: match lapsed {
                true => RunStatus::Abandoned,
                false => RunStatus::parse(row.get(10)).unwrap_or(RunStatus::Failed),
            },
            projects: Vec::new(),
            leased: true,
        }
    }

    fn projects(&self, run_id: &str) -> Result<Vec<ProjectRecord>> {
        let rows = self.with(|c| c.query(
                "SELECT path, status, started, finished, exit_code, changes, reason, log, fingerprint
                 FROM mara_projects WHERE run_id = $1 ORDER BY seq",
                &[&run_id],
            ))?;
        Ok(rows
            .iter()
            .map(|row| ProjectRecord {
                path: row.get(0),
                status: ProjectStatus::parse(row.get(1)).unwrap_or(ProjectStatus::Failed),
                started: row.get(2),
                finished: row.get(3),
                exit_code: row.get(4),
                changes: row
                    .get::<_, Option<String>>(5)
                    .and_then(|c| serde_json::from_str(&c).ok()),
                reason: row.get(6),
                log: row.get(7),
                fingerprint: row.get(8),
            })
            .collect())
    }
}

/// Connects: TLS as `sslmode` says, none over Unix sockets (where there is nothing to protect,
/// and no name to verify a certificate against).
fn dial(config: &postgres::Config) -> std::result::Result<Client, postgres::Error> {
    match crate::workspace::ledger_url::only_sockets(config) {
        true => {
            // libpq ignores `sslmode` on a socket; so does mara.
            let mut config = config.clone();
            config.ssl_mode(postgres::config::SslMode::Disable);
            config.connect(postgres::NoTls)
        }
        false => config.connect(tls()),
    }
}

/// Whether an error is the connection's loss rather than the statement's: the connection
/// closed, an I/O failure, or the server's own "connection exception" and "operator
/// intervention" (a shutdown) classes.
fn lost(error: &postgres::Error, client: &Client) -> bool {
    match error.as_db_error() {
        None => true,
        Some(db) => {
            client.is_closed()
                || db.code().code().starts_with("08")
                || db.code().code().starts_with("57")
        }
    }
}

/// A failed connection, with what to do about it.
fn connect_problem(error: &postgres::Error, config: &postgres::Config) -> Problem {
    let reason = cause(error);
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
    {
        "check the host and port, and that the server is running and reachable from here"
            .to_string()
    } else {
        "check the URL (MARA_LEDGER_URL, or `ledger` in mara.toml) and the server".to_string()
    };
    Problem::new(format!("cannot connect: {reason}")).hint(hint)
}

/// A schema that could not be read or migrated, with what to do about it.
fn schema_problem(error: &postgres::Error) -> Problem {
    let reason = cause(error);
    let problem = Problem::new(format!("cannot prepare the ledger's tables: {reason}"));
    match reason.contains("permission denied") {
        true => problem.hint("mara's user needs SELECT, INSERT, UPDATE and DELETE on the mara_ tables and USAGE on their sequences; the first use of a database (and a newer mara's first run) also CREATE on the schema"),
        false => problem,
    }
}

/// The TLS connector: rustls with the system's root certificates.
fn tls() -> tokio_postgres_rustls::MakeRustlsConnect {
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    for certificate in found.certs {
        // A certificate the store cannot take is skipped, as every TLS client does.
        let _ = roots.add(certificate);
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_postgres_rustls::MakeRustlsConnect::new(config)
}

/// `an up`, `a preview`.
fn article(operation: &str) -> String {
    match operation.starts_with(['a', 'e', 'i', 'o', 'u']) {
        true => format!("an {operation}"),
        false => format!("a {operation}"),
    }
}

/// The whole chain of an error, in one line: the client's own message is often only "db error".
fn cause(error: &postgres::Error) -> String {
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
fn migrate(client: &mut Client) -> std::result::Result<usize, postgres::Error> {
    // Mostly the schema is current: one read says so, without the lock (a missing table or an
    // older version takes the locked way, which says again what it finds).
    let current = client.query_opt("SELECT version FROM mara_schema", &[]);
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
    let mut transaction = client.transaction()?;
    transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    transaction
        .batch_execute("CREATE TABLE IF NOT EXISTS mara_schema (version INTEGER NOT NULL)")?;
    let version: Option<i32> = transaction
        .query_opt("SELECT version FROM mara_schema", &[])?
        .map(|row| row.get(0));
    let found = version.unwrap_or(0).max(0) as usize;
    if found >= MIGRATIONS.len() {
        transaction.commit()?;
        return Ok(found);
    }
    for migration in &MIGRATIONS[found..] {
        transaction.batch_execute(migration)?;
    }
    let now = MIGRATIONS.len() as i32;
    match version {
        None => transaction.execute("INSERT INTO mara_schema (version) VALUES ($1)", &[&now])?,
        Some(_) => transaction.execute("UPDATE mara_schema SET version = $1", &[&now])?,
    };
    transaction.commit()?;
    Ok(found)
}

impl Ledger for PostgresLedger {
    fn lease(&self) -> Option<std::time::Duration> {
        Some(self.lease)
    }

    fn renew(&mut self, run_id: &str) -> Result<bool> {
        let renewed = self.with(|c| {
            self.cached_execute(
                &mut *c,
                "UPDATE mara_locks SET lease_until = now() + make_interval(secs => lease_seconds) WHERE run_id = $1",
                &[&run_id],
            )
        })?;
        Ok(renewed == 1)
    }

    fn stores_logs(&self) -> bool {
        true
    }

    fn append_logs(&mut self, run_id: &str, lines: &[(String, String)]) -> Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let (paths, texts): (Vec<&str>, Vec<&str>) =
            lines.iter().map(|(p, l)| (p.as_str(), l.as_str())).unzip();
        self.with(|c| self.cached_execute(&mut *c, "INSERT INTO mara_log_lines (run_id, path, line)
                 SELECT $1, p, l FROM unnest($2::TEXT[], $3::TEXT[]) WITH ORDINALITY AS t(p, l, n) ORDER BY n",
                &[&run_id, &paths, &texts],
            ))?;
        Ok(())
    }

    fn logs(
        &self,
        run_id: &str,
        project: Option<&str>,
        after: i64,
    ) -> Result<Vec<(i64, String, String)>> {
        let rows = self.with(|c| {
            c.query(
                "SELECT seq, path, line FROM mara_log_lines
                 WHERE run_id = $1 AND ($2::TEXT IS NULL OR path = $2) AND seq > $3 ORDER BY seq",
                &[&run_id, &project, &after],
            )
        })?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }

    fn export(&self) -> Result<History> {
        let mut runs = self.runs(None, usize::MAX >> 1)?;
        runs.reverse();
        for run in &mut runs {
            run.projects = self.projects(&run.run_id)?;
        }
        let triples = |sql: &str| -> Result<Vec<(String, String, String)>> {
            let rows = self.with(|c| c.query(sql, &[]))?;
            Ok(rows
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect())
        };
        Ok(History {
            runs,
            deployed: triples(
                "SELECT stack, project, fingerprint FROM mara_deployed ORDER BY 1, 2",
            )?,
            stacks: triples("SELECT backend, stack, project FROM mara_stacks ORDER BY 1, 2, 3")?,
            images: self.images_where(None, None)?,
        })
    }

    fn import(&mut self, history: &History) -> Result<Vec<String>> {
        self.with(|client| -> std::result::Result<Vec<String>, postgres::Error> {
            let mut transaction = client.transaction()?;
            let mut added = Vec::new();
            for run in &history.runs {
                let inserted = transaction.execute(
                    "INSERT INTO mara_runs (run_id, operation, provider, stack, username, host, pid, command, started, finished, status)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING",
                    &[
                        &run.run_id,
                        &run.operation.as_str(),
                        &run.provider,
                        &run.stack,
                        &run.user,
                        &run.host,
                        &i64::from(run.pid),
                        &run.command,
                        &run.started,
                        &run.finished,
                        &run.status.as_str(),
                    ],
                )?;
                if inserted == 0 {
                    continue;
                }
                added.push(run.run_id.clone());
                for p in &run.projects {
                    let changes = p
                        .changes
                        .as_ref()
                        .map(|c| serde_json::to_string(c).expect("counts serialize"));
                    transaction.execute(
                        "INSERT INTO mara_projects (run_id, path, status, started, finished, exit_code, changes, reason, log, fingerprint)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING",
                        &[
                            &run.run_id,
                            &p.path,
                            &p.status.as_str(),
                            &p.started,
                            &p.finished,
                            &p.exit_code,
                            &changes,
                            &p.reason,
                            &p.log,
                            &p.fingerprint,
                        ],
                    )?;
                }
            }
            for (stack, project, fingerprint) in &history.deployed {
                transaction.execute(
                    // What the server records as deployed is newer than a copied history.
                    "INSERT INTO mara_deployed (stack, project, fingerprint) VALUES ($1, $2, $3)
                     ON CONFLICT DO NOTHING",
                    &[stack, project, fingerprint],
                )?;
            }
            for (backend, stack, project) in &history.stacks {
                transaction.execute(
                    "INSERT INTO mara_stacks (backend, stack, project) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                    &[backend, stack, project],
                )?;
            }
            for i in &history.images {
                transaction.execute(
                    "INSERT INTO mara_images (host, stack, image, image_id, cluster, imported)
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                    &[&i.host, &i.stack, &i.image, &i.image_id, &i.cluster, &i.imported],
                )?;
            }
            transaction.commit()?;
            Ok(added)
        })
    }

    fn begin(&mut self, run: &RunStart, lock: bool) -> Result<Begun> {
        let (user, host) = (self.user.clone(), self.host.clone());
        self.with(|client| -> std::result::Result<Begun, postgres::Error> {
            let mut transaction = client.transaction()?;
            let mut took_over = None;
            if lock {
                // One run at a time decides about a stack's lock: the row, or (when there is
                // none yet) an advisory lock on the stack's name.
                transaction.execute(
                    "SELECT pg_advisory_xact_lock(hashtext('mara lock ' || $1))",
                    &[&run.stack],
                )?;
                if let Some(holder) = Self::holder_of(&mut transaction, &run.stack)? {
                    // This run's own, when its commit was made and the connection lost before
                    // it heard so (`with` runs this again).
                    if holder.run_id == run.run_id {
                        return Ok(Begun::Started { took_over: None });
                    }
                    // Only an expired lease is taken over: hosts of different machines (CI
                    // containers) may share a name, so a pid says nothing here.
                    if holder.lease_left != Some(0) {
                        return Ok(Begun::Held(holder));
                    }
                    transaction.execute(
                        "UPDATE mara_runs SET status = 'abandoned', finished = $2 WHERE run_id = $1",
                        &[&holder.run_id, &run.started],
                    )?;
                    transaction.execute(
                        "UPDATE mara_projects SET status = 'abandoned' WHERE run_id = $1 AND status = 'running'",
                        &[&holder.run_id],
                    )?;
                    transaction
                        .execute("DELETE FROM mara_locks WHERE stack = $1", &[&run.stack])?;
                    took_over = Some(holder);
                }
            }
            transaction.execute(
                "INSERT INTO mara_runs (run_id, operation, provider, stack, username, host, pid, command, started, status)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'running')",
                &[
                    &run.run_id,
                    &run.operation.as_str(),
                    &run.provider,
                    &run.stack,
                    &user,
                    &host,
                    &i64::from(std::process::id()),
                    &run.command,
                    &run.started,
                ],
            )?;
            if lock {
                transaction.execute(
                    "INSERT INTO mara_locks (stack, run_id, lease_until, lease_seconds)
                     VALUES ($1, $2, now() + make_interval(secs => $3), $3)",
                    &[&run.stack, &run.run_id, &(self.lease.as_secs_f64())],
                )?;
            }
            transaction.commit()?;
            Ok(Begun::Started { took_over })
        })
    }

    fn project_started(
        &mut self,
        run_id: &str,
        path: &str,
        started: &str,
        fingerprint: Option<&str>,
    ) -> Result<()> {
        self.with(|c| self.cached_execute(&mut *c, "INSERT INTO mara_projects (run_id, path, status, started, fingerprint) VALUES ($1, $2, 'running', $3, $4)
                 ON CONFLICT (run_id, path) DO UPDATE SET status = 'running', started = $3, fingerprint = $4, reason = NULL",
                &[&run_id, &path, &started, &fingerprint],
            ))?;
        Ok(())
    }

    fn project_finished(&mut self, run_id: &str, project: &ProjectRecord) -> Result<()> {
        let changes = project
            .changes
            .as_ref()
            .map(|c| serde_json::to_string(c).expect("counts serialize"));
        self.with(|client| -> std::result::Result<(), postgres::Error> {
            let mut transaction = client.transaction()?;
            self.cached_execute(&mut transaction, "INSERT INTO mara_projects (run_id, path, status, started, finished, exit_code, changes, reason, log, fingerprint)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                 ON CONFLICT (run_id, path) DO UPDATE SET status = $3,
                   started = COALESCE($4, mara_projects.started), finished = $5, exit_code = $6,
                   changes = $7, reason = $8, log = $9, fingerprint = COALESCE($10, mara_projects.fingerprint)",
                &[
                    &run_id,
                    &project.path,
                    &project.status.as_str(),
                    &project.started,
                    &project.finished,
                    &project.exit_code,
                    &changes,
                    &project.reason,
                    &project.log,
                    &project.fingerprint,
                ],
            )?;
            if matches!(
                project.status,
                ProjectStatus::Succeeded | ProjectStatus::Unchanged
            ) {
                let row = self.cached_query_one(&mut transaction, "SELECT r.operation, r.stack, p.fingerprint FROM mara_runs r
                     JOIN mara_projects p ON p.run_id = r.run_id WHERE r.run_id = $1 AND p.path = $2",
                    &[&run_id, &project.path],
                )?;
                let operation = Operation::parse(row.get(0));
                let stack: String = row.get(1);
                let fingerprint: Option<String> = row.get(2);
                match (operation, fingerprint) {
                    (Some(Operation::Up), Some(fingerprint)) => self.cached_execute(&mut transaction, "INSERT INTO mara_deployed (stack, project, fingerprint) VALUES ($1, $2, $3)
                         ON CONFLICT (stack, project) DO UPDATE SET fingerprint = $3",
                        &[&stack, &project.path, &fingerprint],
                    )?,
                    (Some(Operation::Up), None) | (Some(Operation::Destroy), _) => transaction
                        .execute(
                            "DELETE FROM mara_deployed WHERE stack = $1 AND project = $2",
                            &[&stack, &project.path],
                        )?,
                    _ => 0,
                };
            }
            transaction.commit()
        })
    }

    fn finish(&mut self, run_id: &str, status: RunStatus, finished: &str) -> Result<()> {
        self.with(|client| -> std::result::Result<(), postgres::Error> {
            let mut transaction = client.transaction()?;
            // A run whose lock was taken over was recorded abandoned by the run that took it:
            // that record stands.
            transaction.execute(
                "UPDATE mara_runs SET status = $2, finished = $3 WHERE run_id = $1 AND status = 'running'",
                &[&run_id, &status.as_str(), &finished],
            )?;
            transaction.execute("DELETE FROM mara_locks WHERE run_id = $1", &[&run_id])?;
            transaction.commit()
        })
    }

    fn forget(&mut self, run_id: &str) -> Result<()> {
        self.with(|client| -> std::result::Result<(), postgres::Error> {
            let mut transaction = client.transaction()?;
            for sql in [
                "DELETE FROM mara_locks WHERE run_id = $1",
                "DELETE FROM mara_log_lines WHERE run_id = $1",
                "DELETE FROM mara_projects WHERE run_id = $1",
                "DELETE FROM mara_runs WHERE run_id = $1",
            ] {
                transaction.execute(sql, &[&run_id])?;
            }
            transaction.commit()
        })
    }

    fn holder(&self, stack: &str) -> Result<Option<Holder>> {
        self.with(|c| Self::holder_of(c, stack))
    }

    fn unlock(&mut self, stack: &str) -> Result<Option<Holder>> {
        self.with(|client| -> std::result::Result<Option<Holder>, postgres::Error> {
            let mut transaction = client.transaction()?;
            transaction.execute(
                "SELECT pg_advisory_xact_lock(hashtext('mara lock ' || $1))",
                &[&stack],
            )?;
            let holder = Self::holder_of(&mut transaction, stack)?;
            if let Some(holder) = &holder {
                let now = crate::clock::rfc3339(std::time::SystemTime::now());
                transaction.execute("DELETE FROM mara_locks WHERE stack = $1", &[&stack])?;
                transaction.execute(
                    "UPDATE mara_runs SET status = 'abandoned', finished = COALESCE(finished, $2)
                     WHERE run_id = $1 AND status = 'running'",
                    &[&holder.run_id, &now],
                )?;
                transaction.execute(
                    "UPDATE mara_projects SET status = 'abandoned' WHERE run_id = $1 AND status = 'running'",
                    &[&holder.run_id],
                )?;
            }
            transaction.commit()?;
            Ok(holder)
        })
    }

    fn request_cancel(&mut self, stack: &str) -> Result<Option<Holder>> {
        let holder = self.holder(stack)?;
        if let Some(holder) = &holder {
            self.with(|c| {
                c.execute(
                    "UPDATE mara_runs SET cancel_requested = TRUE WHERE run_id = $1",
                    &[&holder.run_id],
                )
            })?;
        }
        Ok(holder)
    }

    fn set_lease(&mut self, lease: std::time::Duration) {
        self.lease = lease;
    }

    fn join(&mut self, run_id: &str, stack: &str, operation: Operation) -> Result<()> {
        let row = self.with(|c| {
            c.query_opt(
                "SELECT r.stack, r.operation, r.status, r.cancel_requested,
                        EXISTS (SELECT 1 FROM mara_locks l WHERE l.run_id = r.run_id AND l.lease_until >= now())
                 FROM mara_runs r WHERE r.run_id = $1",
                &[&run_id],
            )
        })?;
        let refused = |message: String, hint: &str| {
            Err(Error::usage(Problem::new(message).hint(hint.to_string())))
        };
        let Some(row) = row else {
            return refused(
                format!("there is no run `{run_id}` to join"),
                "a fanned-out run is opened first, by `mara ci open --run ID`",
            );
        };
        let (their_stack, their_operation, status, cancel, leased): (
            String,
            String,
            String,
            bool,
            bool,
        ) = (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
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
                    "running" => {
                        format!(
                            "run `{run_id}` no longer holds its stack's lock: it takes no more projects"
                        )
                    }
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
        let row = self.with(|c| {
            self.cached_query_opt(
                &mut *c,
                "SELECT 1 FROM mara_locks WHERE run_id = $1",
                &[&run_id],
            )
        })?;
        Ok(row.is_some())
    }

    fn cancel_requested(&self, run_id: &str) -> Result<bool> {
        let row = self.with(|c| {
            self.cached_query_opt(
                &mut *c,
                "SELECT cancel_requested FROM mara_runs WHERE run_id = $1",
                &[&run_id],
            )
        })?;
        Ok(row.is_some_and(|r| r.get::<_, bool>(0)))
    }

    fn runs(&self, stack: Option<&str>, limit: usize) -> Result<Vec<RunRecord>> {
        let sql = format!(
            "SELECT {} FROM mara_runs WHERE $1::TEXT IS NULL OR stack = $1
             ORDER BY started DESC, run_id DESC LIMIT $2",
            Self::RUN_COLUMNS
        );
        let rows =
            self.with(|c| c.query(&sql, &[&stack, &(limit.min(i64::MAX as usize) as i64)]))?;
        Ok(rows.iter().map(Self::record).collect())
    }

    fn run(&self, run_id: &str) -> Result<Option<RunRecord>> {
        let sql = format!(
            "SELECT {} FROM mara_runs WHERE run_id = $1",
            Self::RUN_COLUMNS
        );
        let row = self.with(|c| c.query_opt(&sql, &[&run_id]))?;
        match row {
            Some(row) => {
                let mut record = Self::record(&row);
                record.projects = self.projects(run_id)?;
                if record.status == RunStatus::Abandoned {
                    for project in &mut record.projects {
                        if project.status == ProjectStatus::Running {
                            project.status = ProjectStatus::Abandoned;
                        }
                    }
                }
                Ok(Some(record))
            }
            None => Ok(None),
        }
    }

    fn last_run(&self, stack: &str, operation: Operation) -> Result<Option<RunRecord>> {
        let row = self.with(|c| {
            c.query_opt(
                "SELECT run_id FROM mara_runs WHERE stack = $1 AND operation = $2
                 ORDER BY started DESC, run_id DESC LIMIT 1",
                &[&stack, &operation.as_str()],
            )
        })?;
        match row {
            Some(row) => self.run(row.get(0)),
            None => Ok(None),
        }
    }

    fn last_fingerprints(&self, stack: &str) -> Result<BTreeMap<String, String>> {
        let rows = self.with(|c| {
            c.query(
                "SELECT project, fingerprint FROM mara_deployed WHERE stack = $1",
                &[&stack],
            )
        })?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    fn known_stacks(&self, backend: &str, stack: &str) -> Result<BTreeSet<String>> {
        let rows = self.with(|c| {
            c.query(
                "SELECT project FROM mara_stacks WHERE backend = $1 AND stack = $2",
                &[&backend, &stack],
            )
        })?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
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
        self.with(|client| -> std::result::Result<(), postgres::Error> {
            let mut transaction = client.transaction()?;
            for project in exist {
                transaction.execute(
                    "INSERT INTO mara_stacks (backend, stack, project) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                    &[&backend, &stack, project],
                )?;
            }
            for project in gone {
                transaction.execute(
                    "DELETE FROM mara_stacks WHERE backend = $1 AND stack = $2 AND project = $3",
                    &[&backend, &stack, project],
                )?;
            }
            transaction.commit()
        })
    }

    fn images(&self, stack: &str) -> Result<Vec<ImageRecord>> {
        self.images_where(Some(&self.host), Some(stack))
    }

    fn record_images(&mut self, images: &[ImageRecord]) -> Result<()> {
        self.with(|client| -> std::result::Result<(), postgres::Error> {
            let mut transaction = client.transaction()?;
            for i in images {
                transaction.execute(
                    "INSERT INTO mara_images (host, stack, image, image_id, cluster, imported)
                     VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (host, stack, image) DO UPDATE SET image_id = EXCLUDED.image_id,
                       cluster = EXCLUDED.cluster, imported = EXCLUDED.imported",
                    &[
                        &i.host,
                        &i.stack,
                        &i.image,
                        &i.image_id,
                        &i.cluster,
                        &i.imported,
                    ],
                )?;
            }
            transaction.commit()
        })
    }

    fn forget_images(&mut self, stack: &str, images: &[String]) -> Result<usize> {
        let host = self.host.clone();
        self.with(|client| -> std::result::Result<usize, postgres::Error> {
            let mut transaction = client.transaction()?;
            let mut forgotten = 0;
            for image in images {
                forgotten += transaction.execute(
                    "DELETE FROM mara_images WHERE host = $1 AND stack = $2 AND image = $3",
                    &[&host, &stack, image],
                )?;
            }
            transaction.commit()?;
            Ok(forgotten as usize)
        })
    }
}

impl PostgresLedger {
    /// The images recorded for `host` and `stack` (every one's with `None`), by host, stack and
    /// name.
    fn images_where(&self, host: Option<&str>, stack: Option<&str>) -> Result<Vec<ImageRecord>> {
        let rows = self.with(|c| {
            c.query(
                "SELECT host, stack, image, image_id, cluster, imported FROM mara_images
                 WHERE ($1::TEXT IS NULL OR host = $1) AND ($2::TEXT IS NULL OR stack = $2)
                 ORDER BY host, stack, image",
                &[&host, &stack],
            )
        })?;
        Ok(rows
            .iter()
            .map(|r| ImageRecord {
                host: r.get(0),
                stack: r.get(1),
                image: r.get(2),
                image_id: r.get(3),
                cluster: r.get(4),
                imported: r.get(5),
            })
            .collect())
    }
}
