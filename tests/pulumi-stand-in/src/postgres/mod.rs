//! Pulumi's DIY `postgres://` backend (`pkg/backend/diy/postgres`, pulumi/pulumi#19581, v3.177):
//! the gocloud blob bucket of the DIY backend kept in one table of a real PostgreSQL server.
//!
//! - The URL's `table` parameter names the table (default `pulumi_state`) and is taken out; the
//!   rest is lib/pq's (`conninfo.rs`, `connect.rs`, `tls.rs`: Pulumi v3.259 has lib/pq v1.12.3).
//! - On opening, the connection is made ("ping") and the table created if missing, with Pulumi's
//!   `schema.sql`: `key TEXT PRIMARY KEY, data JSON NOT NULL, updated_at TIMESTAMP WITH TIME ZONE
//!   NOT NULL DEFAULT now()` and an index `<table>_key_prefix_idx` on `key text_pattern_ops`. The
//!   table name goes into the SQL as written, as Pulumi puts it.
//! - An object is a row: `data` is `{"data":"<base64 of its bytes>"}`; a write is an `INSERT … ON
//!   CONFLICT (key) DO UPDATE SET data = $2, updated_at = now()`; a copy reads `data` and writes it
//!   under the other key; a delete deletes the row (a missing row is an error, `key not found`).
//!   A directory is listed with `key LIKE '<dir>/%'`, keeping the keys directly in it.
//! - Keys are the DIY backend's paths under the bucket's prefix: Pulumi opens every bucket other
//!   than `file://` under the URL's path (`blob.PrefixedBucket`), so with the database named in the
//!   URL (`postgres://…/ledger`) the keys are `ledger/.pulumi/meta.yaml`,
//!   `ledger/.pulumi/stacks/<project>/<stack>.json`, …; without a path (the database from
//!   `PGDATABASE`), `.pulumi/meta.yaml`.
//! - Failing to open reads `unable to open state database "<url>": failed to ping PostgreSQL: <lib/pq's
//!   error>` (or `failed to create table <table>: …`), exit 1. Unlike the real CLI, which quotes
//!   the URL as written, the stand-in shows a password in it as `xxxxx`. A held lock is named as
//!   Pulumi's `lockURLForError` names it: user and password as `****:****`, the lock's key after the
//!   URL's path, the query kept.
//! - As with Pulumi, two first invocations racing on a table that does not exist yet may both
//!   run `CREATE TABLE IF NOT EXISTS`, and one may fail (a duplicate key in `pg_type`).

mod connect;
mod conninfo;
mod tls;
pub mod url;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::BytesMut;
use tokio_postgres::Client;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};

use crate::Failure;
use crate::store::Store;
use connect::{pq_error, pq_error_in};
use url::GoUrl;

/// Pulumi's `schema.sql`, with the table's name in each `%s`.
const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS %s (
    key TEXT PRIMARY KEY,
    data JSON NOT NULL,
    updated_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS %s_key_prefix_idx ON %s (key text_pattern_ops); ";

/// The bucket in a table.
pub struct Table {
    runtime: tokio::runtime::Runtime,
    client: Client,
    table: String,
    /// The bucket's prefix: the URL's path and `/`, or nothing.
    prefix: String,
    url: GoUrl,
}

impl Table {
    /// Opens the bucket of `PULUMI_BACKEND_URL=original`: connects, then creates the table.
    pub fn open(original: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Table, Failure> {
        let failed = |why: String| {
            let url = url::go_quote(&url::redacted(original));
            Failure::new(1, format!("unable to open state database {url}: {why}"))
        };
        let url = GoUrl::parse(original)?;
        let mut query = url.query();
        let table = query
            .iter()
            .find(|(k, _)| k == "table")
            .map(|(_, v)| v.clone())
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| "pulumi_state".into());
        query.retain(|(k, _)| k != "table");
        let ping = |e: String| failed(format!("failed to ping PostgreSQL: {e}"));
        let info = conninfo::ConnInfo::new(&url, &query, env).map_err(ping)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| failed(e.to_string()))?;
        let client = runtime.block_on(connect::connect(&info)).map_err(ping)?;
        let schema = SCHEMA.replace("%s", &table);
        runtime
            .block_on(client.batch_execute(&schema))
            .map_err(|e| {
                failed(format!(
                    "failed to create table {table}: {}",
                    pq_error_in(&e, &schema)
                ))
            })?;
        let prefix = match url.path.trim_start_matches('/') {
            "" => String::new(),
            path if path.ends_with('/') => path.to_string(),
            path => format!("{path}/"),
        };
        Ok(Table {
            runtime,
            client,
            table,
            prefix,
            url,
        })
    }

    /// A failed operation on the object at `key`, as gocloud reports it.
    fn failed(&self, key: &str, error: &str) -> Failure {
        Failure::new(
            1,
            format!("blob (key {}) (code=Unknown): {error}", url::go_quote(key)),
        )
    }

    fn data(&self, key: &str) -> Result<Option<String>, Failure> {
        let sql = format!("SELECT data FROM {} WHERE key = $1", self.table);
        let full = format!("{}{key}", self.prefix);
        let row = self
            .runtime
            .block_on(self.client.query_opt(&sql, &[&full]))
            .map_err(|e| self.failed(key, &pq_error(&e)))?;
        Ok(row.map(|row| row.get::<_, JsonText>(0).0))
    }

    fn put(&self, key: &str, data: &str) -> Result<(), Failure> {
        let sql = format!(
            "INSERT INTO {} (key, data) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET data = $2, updated_at = now()",
            self.table
        );
        let full = format!("{}{key}", self.prefix);
        self.runtime
            .block_on(
                self.client
                    .execute(&sql, &[&full, &JsonText(data.to_string())]),
            )
            .map(|_| ())
            .map_err(|e| self.failed(key, &pq_error(&e)))
    }
}

impl Store for Table {
    fn read(&self, key: &str) -> Result<Option<Vec<u8>>, Failure> {
        let Some(data) = self.data(key)? else {
            return Ok(None);
        };
        let blob: serde_json::Value = serde_json::from_str(&data)
            .map_err(|e| self.failed(key, &format!("failed to parse JSON data: {e}")))?;
        B64.decode(blob["data"].as_str().unwrap_or_default())
            .map(Some)
            .map_err(|e| self.failed(key, &format!("failed to decode base64 data: {e}")))
    }

    fn write(&self, key: &str, data: &[u8]) -> Result<(), Failure> {
        let blob = serde_json::json!({"data": B64.encode(data)});
        self.put(key, &blob.to_string())
    }

    fn exists(&self, key: &str) -> Result<bool, Failure> {
        let sql = format!(
            "SELECT updated_at, octet_length((data->>'data')::text) / 4 * 3 FROM {} WHERE key = $1",
            self.table
        );
        let full = format!("{}{key}", self.prefix);
        self.runtime
            .block_on(self.client.query_opt(&sql, &[&full]))
            .map(|row| row.is_some())
            .map_err(|e| self.failed(key, &pq_error(&e)))
    }

    fn delete(&self, key: &str) -> Result<(), Failure> {
        let sql = format!("DELETE FROM {} WHERE key = $1", self.table);
        let full = format!("{}{key}", self.prefix);
        let deleted = self
            .runtime
            .block_on(self.client.execute(&sql, &[&full]))
            .map_err(|e| self.failed(key, &pq_error(&e)))?;
        match deleted {
            0 => Err(self.failed(key, &format!("key not found: {full}"))),
            _ => Ok(()),
        }
    }

    fn copy(&self, from: &str, to: &str) -> Result<(), Failure> {
        let data = self
            .data(from)?
            .ok_or_else(|| self.failed(from, "source key not found: sql: no rows in result set"))?;
        self.put(to, &data)
    }

    fn rename(&self, from: &str, to: &str) -> Result<(), Failure> {
        self.copy(from, to)?;
        self.delete(from)
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, Failure> {
        let sql = format!(
            "SELECT key FROM {} WHERE key LIKE $1 ORDER BY key",
            self.table
        );
        let prefix = format!("{}{dir}/", self.prefix);
        let rows = self
            .runtime
            .block_on(self.client.query(&sql, &[&format!("{prefix}%")]))
            .map_err(|e| self.failed(dir, &pq_error(&e)))?;
        Ok(rows
            .iter()
            .filter_map(|row| {
                let key: String = row.get(0);
                let name = key.strip_prefix(&prefix)?;
                (!name.contains('/')).then(|| format!("{dir}/{name}"))
            })
            .collect())
    }

    fn remove_dir(&self, dir: &str) {
        for key in self.list(dir).unwrap_or_default() {
            let _ = self.delete(&key);
        }
    }

    fn locator(&self, key: &str) -> String {
        self.url.locator(key)
    }
}

/// A `json` value as its text, as lib/pq reads and writes one.
#[derive(Debug)]
struct JsonText(String);

impl ToSql for JsonText {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSON
    }

    to_sql_checked!();
}

impl<'a> FromSql<'a> for JsonText {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(JsonText(String::from_utf8(raw.to_vec())?))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSON
    }
}
