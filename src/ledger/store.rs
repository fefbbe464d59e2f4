//! What a ledger's backend provides (`records::Records` does the rest): a store of one dialect
//! connects and migrates, runs a statement or a transaction, renders the few words its dialect
//! spells its own way (`Words`), and — a server's alone — keeps leases and log lines.
//!
//! Statements are written as PostgreSQL reads them (`$1`), with `{p}` before each table (a
//! server's are `mara_`), `{user}` for the user column and `{order}` for the order projects were
//! recorded in; values go in and come out as `Value`s.

use std::path::Path;
use std::time::Duration;

use crate::error::Result;

/// A value going into, or coming out of, a store's table.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Bool(bool),
    /// A list of texts (a batch of log lines, the projects whose stacks exist), read as rows by
    /// `{list $N}`: a server's array, SQLite's JSON array.
    Texts(Vec<String>),
}

impl From<&str> for Value {
    fn from(text: &str) -> Value {
        Value::Text(text.to_string())
    }
}

impl From<&String> for Value {
    fn from(text: &String) -> Value {
        Value::Text(text.clone())
    }
}

impl From<Option<&str>> for Value {
    fn from(text: Option<&str>) -> Value {
        text.map_or(Value::Null, Value::from)
    }
}

impl From<&Option<String>> for Value {
    fn from(text: &Option<String>) -> Value {
        text.as_deref().into()
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Value {
        Value::Int(n)
    }
}

impl From<Option<i64>> for Value {
    fn from(n: Option<i64>) -> Value {
        n.map_or(Value::Null, Value::Int)
    }
}

impl From<Option<i32>> for Value {
    fn from(n: Option<i32>) -> Value {
        n.map_or(Value::Null, |n| Value::Int(n.into()))
    }
}

/// A row a query returned, its columns in the statement's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Row(pub Vec<Value>);

/// What a row holds that is not what a column should: the ledger was written by something else.
pub type Read<T> = std::result::Result<T, String>;

impl Row {
    fn get(&self, i: usize) -> Read<&Value> {
        self.0.get(i).ok_or_else(|| format!("no column {i}"))
    }

    pub fn opt_text(&self, i: usize) -> Read<Option<String>> {
        match self.get(i)? {
            Value::Null => Ok(None),
            Value::Text(text) => Ok(Some(text.clone())),
            other => Err(format!("column {i} holds {other:?}, not a text")),
        }
    }

    pub fn text(&self, i: usize) -> Read<String> {
        self.opt_text(i)?
            .ok_or_else(|| format!("column {i} is empty"))
    }

    pub fn opt_int(&self, i: usize) -> Read<Option<i64>> {
        match self.get(i)? {
            Value::Null => Ok(None),
            Value::Int(n) => Ok(Some(*n)),
            other => Err(format!("column {i} holds {other:?}, not a number")),
        }
    }

    pub fn int(&self, i: usize) -> Read<i64> {
        self.opt_int(i)?
            .ok_or_else(|| format!("column {i} is empty"))
    }

    /// A truth: a server's own, or SQLite's 0 and 1.
    pub fn truth(&self, i: usize) -> Read<bool> {
        match self.get(i)? {
            Value::Bool(b) => Ok(*b),
            Value::Int(n) => Ok(*n != 0),
            other => Err(format!("column {i} holds {other:?}, not a truth")),
        }
    }

    /// A status or operation, stored as its text.
    pub fn parsed<T>(&self, i: usize, parse: fn(&str) -> Option<T>, what: &str) -> Read<T> {
        let text = self.text(i)?;
        parse(&text).ok_or_else(|| format!("`{text}` is not a known {what}"))
    }
}

/// The words a store's dialect spells its own way, put into a statement by `render`.
pub struct Words {
    /// Before each table's name (`{p}`).
    pub prefix: &'static str,
    /// The user column (`{user}`: `user` is a reserved word on a server).
    pub user: &'static str,
    /// The column that orders a run's projects as they were recorded (`{order}`).
    pub order: &'static str,
    /// A lock's seconds left, `l` being the lock (`{lease_left}`); NULL without leases.
    pub lease_left: &'static str,
    /// Whether a lock `l` is live (`{live}`): its lease has not run out.
    pub live: &'static str,
    /// Whether a run, in its own row, is recorded running but holds no live lock any more
    /// (`{lapsed}`): its process stopped renewing without recording its end.
    pub lapsed: &'static str,
    /// The rows of a list parameter `#` (`{list $N}`), one column named `value`.
    pub list: &'static str,
    /// The rows of two lists `#1` and `#2` of one length, side by side (`{pairs $N $M}`),
    /// columns `first` and `second`.
    pub pairs: &'static str,
    /// How a JSON array of objects (`{rows $N: a, b, n:int}`, a text) is read as rows with
    /// those columns, in its order.
    pub json_rows: JsonRows,
    /// Placeholders as `?1` rather than `$1`.
    pub question_marks: bool,
}

impl Words {
    /// `sql` in this dialect.
    pub fn render(&self, sql: &str) -> String {
        let rendered = sql
            .replace("{p}", self.prefix)
            .replace("{user}", self.user)
            .replace("{order}", self.order)
            .replace("{lease_left}", self.lease_left)
            .replace("{live}", self.live)
            .replace("{lapsed}", &self.lapsed.replace("{p}", self.prefix));
        let rendered = self.lists(rendered);
        match self.question_marks {
            true => rendered.replace('$', "?"),
            false => rendered,
        }
    }
}

/// How a dialect reads a JSON array of objects as rows.
pub enum JsonRows {
    /// SQLite: `json_each` and `->>`.
    JsonEach,
    /// PostgreSQL: `json_to_recordset` with the columns' types.
    ToRecordset,
}

impl Words {
    /// `{rows $N: a, b, n:int}` in this dialect: a relation `rows` with those columns.
    fn json_rows(&self, param: &str, columns: &str) -> String {
        let columns: Vec<(&str, bool)> = (columns.split(','))
            .map(|c| match c.trim().split_once(':') {
                Some((name, _)) => (name, true),
                None => (c.trim(), false),
            })
            .collect();
        match self.json_rows {
            JsonRows::JsonEach => format!(
                "(SELECT {} FROM json_each({param})) AS rows",
                (columns.iter())
                    .map(|(c, _)| format!("value->>'{c}' AS {c}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            JsonRows::ToRecordset => format!(
                "json_to_recordset(CAST(CAST({param} AS TEXT) AS JSON)) AS rows({})",
                (columns.iter())
                    .map(|(c, int)| format!("{c} {}", if *int { "INTEGER" } else { "TEXT" }))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// Each `{list $N}`, `{pairs $N $M}` and `{rows $N: …}` as this dialect reads their rows.
    fn lists(&self, mut sql: String) -> String {
        while let Some(at) = sql.find("{rows ") {
            let Some(end) = sql[at..].find('}').map(|e| at + e) else {
                break;
            };
            let (param, columns) = sql[at + 6..end].split_once(':').unwrap_or(("", ""));
            let rows = self.json_rows(param.trim(), columns);
            sql.replace_range(at..=end, &rows);
        }
        for (opening, template) in [("{list ", self.list), ("{pairs ", self.pairs)] {
            while let Some(at) = sql.find(opening) {
                let Some(end) = sql[at..].find('}').map(|e| at + e) else {
                    break;
                };
                let params: Vec<&str> = sql[at + opening.len()..end].split(' ').collect();
                let rows = match params[..] {
                    [one] => template.replace('#', one),
                    [first, second, ..] => template.replace("#1", first).replace("#2", second),
                    [] => template.to_string(),
                };
                sql.replace_range(at..=end, &rows);
            }
        }
        sql
    }
}

/// What a store's reads cost, counted as they are made: the queries, the rows they returned,
/// and the steps SQLite's virtual machine took for them (a server's work is not seen from here:
/// 0). A read whose cost grows with the history shows here first — a scan or a sort steps over
/// every run — which is how `tests/scale.rs` holds `status`, `history` and `mara serve`'s pages
/// flat, and what `MARA_LOG=mara::ledger=debug` says as a command ends.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reads {
    pub queries: u64,
    pub rows: u64,
    pub steps: u64,
}

impl Reads {
    /// One more query, of `rows` rows and `steps` steps, counted in `into`.
    pub fn count(into: &std::cell::Cell<Reads>, rows: usize, steps: u64) {
        let mut reads = into.get();
        reads.queries += 1;
        reads.rows += rows as u64;
        reads.steps += steps;
        into.set(reads);
    }

    /// What was read since `before`.
    pub fn since(self, before: Reads) -> Reads {
        Reads {
            queries: self.queries - before.queries,
            rows: self.rows - before.rows,
            steps: self.steps - before.steps,
        }
    }
}

/// A statement and its values, made with others (`Store::write_all`).
pub type Statement = (&'static str, Vec<Value>);

/// One transaction's statements.
pub trait Tx {
    /// Runs a statement; the rows it changed.
    fn execute(&mut self, sql: &'static str, params: &[Value]) -> Result<u64>;
    fn query(&mut self, sql: &'static str, params: &[Value]) -> Result<Vec<Row>>;
}

/// A store of one dialect: where the records are, and how a statement reaches them.
pub trait Store: Send {
    const WORDS: Words;

    /// How messages name it: its file, or the server's URL without its password.
    fn shown(&self) -> &Path;

    fn query(&self, sql: &'static str, params: &[Value]) -> Result<Vec<Row>>;

    fn execute(&mut self, sql: &'static str, params: &[Value]) -> Result<u64>;

    /// What its queries have read so far.
    fn reads(&self) -> Reads;

    /// Runs `work` in one transaction, committed when it returns `Ok`. With `stack`, one
    /// transaction at a time decides about that stack's lock.
    fn transaction(
        &mut self,
        stack: Option<&str>,
        work: &mut dyn FnMut(&mut dyn Tx) -> Result<()>,
    ) -> Result<()>;

    /// How long a lock lasts unless renewed: `None` where locks are held by live processes.
    fn lease(&self) -> Option<Duration> {
        None
    }

    fn set_lease(&mut self, _lease: Duration) {}

    /// The statement that records run `$2` holding stack `$1`'s lock, and the values it takes
    /// after those two (a server's: the lease, in seconds).
    fn lock_statement(&self) -> (&'static str, Vec<Value>) {
        (
            "INSERT INTO {p}locks (stack, run_id) VALUES ($1, $2)",
            Vec::new(),
        )
    }

    /// Renews `run_id`'s lease; `false` when it holds no lock any more.
    fn renew(&mut self, _run_id: &str) -> Result<bool> {
        Ok(true)
    }

    /// Makes `statements` in one transaction, in order; what they return is not needed, so a
    /// server is sent them all at once.
    fn write_all(&mut self, statements: &[Statement]) -> Result<()> {
        if statements.is_empty() {
            return Ok(());
        }
        self.transaction(None, &mut |tx| {
            for (sql, params) in statements {
                tx.execute(sql, params)?;
            }
            Ok(())
        })
    }

    /// Whether it keeps the runs' log lines (a server's, in `{p}log_lines`).
    fn stores_logs(&self) -> bool {
        false
    }

    /// Whether its connection is over TLS (a server's, as the server sees it).
    fn over_tls(&self) -> Result<bool> {
        Ok(false)
    }

    /// The statement that appends `lines` to run `run_id`'s, where it keeps them.
    fn logs_statement(&self, _run_id: &str, _lines: &[(String, String)]) -> Option<Statement> {
        None
    }

    /// Claims `paths` of run `run_id` for this job (a server's, where a fanned-out run's jobs
    /// meet): the path another job holds a live claim on, if any, and then nothing is claimed.
    /// A workspace's own ledger holds no fanned-out run, so claims nothing.
    fn claim(&mut self, _run_id: &str, _paths: &[String]) -> Result<Option<String>> {
        Ok(None)
    }

    /// Releases what `claim` claimed in run `run_id` (the job ended).
    fn release(&mut self, _run_id: &str) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_rendered_in_each_dialect() {
        use crate::ledger::postgres::Postgres;
        use crate::ledger::sqlite::Sqlite;
        let sql = "SELECT r.{user}, {lease_left} FROM {p}locks l JOIN {p}runs r ON r.run_id = l.run_id WHERE l.stack = $1 AND r.pid = $12 ORDER BY {order}";
        assert_eq!(
            Sqlite::WORDS.render(sql),
            "SELECT r.user, NULL FROM locks l JOIN runs r ON r.run_id = l.run_id WHERE l.stack = ?1 AND r.pid = ?12 ORDER BY rowid"
        );
        assert_eq!(
            Postgres::WORDS.render(sql),
            "SELECT r.username, GREATEST(0, CEIL(EXTRACT(EPOCH FROM l.lease_until - now())))::BIGINT FROM mara_locks l JOIN mara_runs r ON r.run_id = l.run_id WHERE l.stack = $1 AND r.pid = $12 ORDER BY seq"
        );
        // A run's own row says whether its lease lapsed, naming its own tables.
        assert!(
            Postgres::WORDS
                .render("{lapsed}")
                .contains("mara_locks l WHERE l.run_id = mara_runs.run_id")
        );
        assert_eq!(Sqlite::WORDS.render("{lapsed} {live}"), "0 1");
        // Lists' rows, in each dialect: (the statement, SQLite's, PostgreSQL's).
        let lists = [
            (
                "SELECT value FROM {list $3} WHERE value <> $1",
                "SELECT value FROM json_each(?3) WHERE value <> ?1",
                "SELECT value FROM unnest(CAST($3 AS TEXT[])) AS list(value) WHERE value <> $1",
            ),
            (
                "SELECT a, n FROM {rows $2: a, n:int}",
                "SELECT a, n FROM (SELECT value->>'a' AS a, value->>'n' AS n FROM json_each(?2)) AS rows",
                "SELECT a, n FROM json_to_recordset(CAST(CAST($2 AS TEXT) AS JSON)) AS rows(a TEXT, n INTEGER)",
            ),
            (
                "SELECT first, second FROM {pairs $2 $3}",
                "SELECT first, second FROM (SELECT a.value AS first, b.value AS second FROM json_each(?2) a JOIN json_each(?3) b ON a.key = b.key)",
                "SELECT first, second FROM unnest(CAST($2 AS TEXT[]), CAST($3 AS TEXT[])) AS pairs(first, second)",
            ),
        ];
        for (sql, sqlite, postgres) in lists {
            assert_eq!(Sqlite::WORDS.render(sql), sqlite);
            assert_eq!(Postgres::WORDS.render(sql), postgres);
        }
    }
}
