//! The pages and their JSON (docs/commands.md, "serve"): each route reads what it shows through
//! `Source`, shapes it with `views`, and renders it as HTML (`pages`) or JSON. A run that is not
//! there is 404, a query that makes no sense 400, a ledger that cannot be read 503: each said
//! as a page or as `{"error": …}`.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use maud::Markup;
use serde_json::json;

use crate::engine::Operation;
use crate::graph::ExecutionGraph;
use crate::ledger::{Holder, Ledger, Previewed, RunRecord};
use crate::status::RunStatus;
use crate::ui::report::RunSummary;

use super::Shared;
use super::pages::{self, Chrome, Filter};
use super::source::LogCursor;
use super::svg::{self, Drawing, Edges};
use super::views::{OPERATIONS, RunPage, RunRow, StackRow};

/// Why a request got no answer: its status, and what to say.
#[derive(Debug)]
pub struct Failure {
    pub status: StatusCode,
    pub message: String,
}

impl Failure {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
        }
    }

    pub fn no_run(run_id: &str) -> Failure {
        Failure::new(
            StatusCode::NOT_FOUND,
            format!("No run `{run_id}` in this ledger."),
        )
    }

    fn bad_query(message: impl Into<String>) -> Failure {
        Failure::new(StatusCode::BAD_REQUEST, message)
    }

    /// As a page (the routes under `/`), not as JSON (those under `/api`).
    pub fn page(self) -> Response {
        let chrome = Chrome {
            title: self
                .status
                .canonical_reason()
                .unwrap_or("Error")
                .to_string(),
            place: "",
            run: None,
            live: false,
            guarded: false,
        };
        (self.status, pages::problem(&chrome, &self.message)).into_response()
    }
}

/// A ledger that could not be read: the server's answer is 503, with the ledger's own words.
impl From<crate::error::Error> for Failure {
    fn from(error: crate::error::Error) -> Failure {
        let mut message = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            message.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        Failure::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (self.status, Json(json!({"error": self.message}))).into_response()
    }
}

pub type Answer<T> = std::result::Result<T, Failure>;

/// A request's query as pairs, or why it could not be read: every route checks it
/// (`parameters`).
pub type Params = std::result::Result<Query<Vec<(String, String)>>, QueryRejection>;

/// A page, or its failure as a page.
pub fn html(page: Answer<Markup>) -> Response {
    match page {
        Ok(markup) => markup.into_response(),
        Err(failure) => failure.page(),
    }
}

/// The query's parameters, each only once and only those in `known`.
pub fn parameters(query: Params, known: &[&str]) -> Answer<BTreeMap<String, String>> {
    let Query(pairs) = query.map_err(|e| Failure::bad_query(e.body_text()))?;
    let mut found = BTreeMap::new();
    for (key, value) in pairs {
        if !known.contains(&key.as_str()) {
            let takes = match known {
                [] => "none".to_string(),
                known => (known.iter().map(|k| format!("`{k}`")))
                    .collect::<Vec<_>>()
                    .join(", "),
            };
            return Err(Failure::bad_query(format!(
                "Unknown query parameter `{key}`: this page takes {takes}."
            )));
        }
        if found.insert(key.clone(), value).is_some() {
            return Err(Failure::bad_query(format!(
                "Query parameter `{key}` is given twice."
            )));
        }
    }
    Ok(found)
}

/// The list's filter from `?stack=…&status=…&limit=…` (empty values: none).
fn filter(query: Params) -> Answer<Filter> {
    let found = parameters(query, &["stack", "status", "limit"])?;
    let given = |key: &str| found.get(key).filter(|v| !v.is_empty());
    let status = match given("status") {
        None => None,
        Some(word) => Some(RunStatus::parse(word).ok_or_else(|| {
            Failure::bad_query(format!(
                "Unknown status `{word}`: a run is {}.",
                RunStatus::ALL.map(|s| s.as_str()).join(", ")
            ))
        })?),
    };
    let limit = match given("limit") {
        None => 50,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| {
                Failure::bad_query(format!(
                    "`limit` is a number of runs from 1 to 1000, not `{text}`."
                ))
            })?,
    };
    Ok(Filter {
        stack: given("stack").cloned(),
        status,
        limit,
    })
}

/// The runs `filter` keeps, newest first, each with its projects counted; and every stack. A
/// few reads of the ledger, whatever its history: the runs, their projects and what drift
/// checks' previews showed, each in one read for the page.
async fn list(app: &Shared, filter: &Filter) -> Answer<(Vec<RunRow>, Vec<String>)> {
    let filter = filter.clone();
    let found = app
        .source
        .read(move |ledger| {
            // A status is not a column the ledger filters on: enough runs are read to fill the
            // page from.
            let read = match filter.status {
                Some(_) => 1000,
                None => filter.limit,
            };
            let mut runs = Vec::new();
            for run in ledger.runs(filter.stack.as_deref(), read)? {
                if runs.len() == filter.limit {
                    break;
                }
                let status = run.clone().as_seen().status;
                if filter.status.is_none_or(|s| s == status) {
                    runs.push(run);
                }
            }
            let runs = ledger.with_projects(runs)?;
            let runs: Vec<RunRecord> = runs.into_iter().map(RunRecord::as_seen).collect();
            Ok((rows(ledger, &runs)?, stacks(ledger)?))
        })
        .await?;
    Ok(found.unwrap_or_default())
}

/// `record` (as seen, with its projects) as the list shows it: what a preview or a drift check
/// came to needs what its projects' previews recorded.
fn row(ledger: &dyn Ledger, record: &RunRecord) -> crate::error::Result<RunRow> {
    let previews = crate::ui::recorded::previews_of(ledger, record)?;
    Ok(RunRow::of(record, &summary(record, None, previews)))
}

/// `records` (as seen, with their projects) as the list shows them, as `row` makes each: the
/// previews of the drift checks among them read at once — a drift check's row says what it
/// found from them; a preview's says its status, whatever its previews showed.
fn rows(ledger: &dyn Ledger, records: &[RunRecord]) -> crate::error::Result<Vec<RunRow>> {
    let checks: Vec<String> = (records.iter())
        .filter(|r| r.operation == Operation::Drift)
        .map(|r| r.run_id.clone())
        .collect();
    let mut previews = ledger.previews_of(&checks)?;
    Ok((records.iter())
        .map(|record| {
            let previews = previews.remove(&record.run_id).unwrap_or_default();
            RunRow::of(record, &summary(record, None, previews))
        })
        .collect())
}

/// `record` as its summary says it, its projects in the order of `graph` when there is one.
fn summary(
    record: &RunRecord,
    graph: Option<&ExecutionGraph>,
    previews: BTreeMap<String, Previewed>,
) -> RunSummary {
    let none = ExecutionGraph::from_projects(Vec::new()).expect("an empty graph is one");
    crate::ui::recorded::summary_of(record, graph.unwrap_or(&none), previews)
}

/// Every stack a run was recorded of, by name, however old its runs.
fn stacks(ledger: &dyn Ledger) -> crate::error::Result<Vec<String>> {
    ledger.stacks()
}

pub fn chrome<'a>(app: &'a Shared, title: String, run: Option<&'a RunRow>) -> Chrome<'a> {
    Chrome {
        title,
        place: &app.source.place,
        run: run.map(|r| r.run_id.as_str()),
        live: run.is_some_and(|r| r.status == RunStatus::Running),
        guarded: app.guarded,
    }
}

pub async fn index(State(app): State<Shared>, query: Params) -> Response {
    html(
        async {
            let filter = filter(query)?;
            let (rows, stacks) = list(&app, &filter).await?;
            Ok(pages::runs(
                &chrome(&app, "Runs".into(), None),
                &rows,
                &stacks,
                &filter,
            ))
        }
        .await,
    )
}

pub async fn runs_json(State(app): State<Shared>, query: Params) -> Answer<Json<Vec<RunRow>>> {
    let filter = filter(query)?;
    Ok(Json(list(&app, &filter).await?.0))
}

/// What a run's page shows: the run as seen, what its previews showed, who holds its stack.
async fn recorded(app: &Shared, run_id: String) -> Answer<RunPage> {
    let id = run_id.clone();
    let found = app
        .source
        .read(move |ledger| {
            let Some(record) = ledger.run(&id)? else {
                return Ok(None);
            };
            let record = record.as_seen();
            let previews = crate::ui::recorded::previews_of(ledger, &record)?;
            let lock = ledger.holder(&record.stack)?;
            Ok(Some((record, previews, lock)))
        })
        .await?
        .flatten();
    let (record, previews, lock) = found.ok_or_else(|| Failure::no_run(&run_id))?;
    let graph = app.source.graph(record.provider.clone()).await;
    Ok(shaped(
        &record,
        graph.as_ref().map_err(String::as_str),
        previews,
        lock,
    ))
}

/// `record` as its page shows it: its graph as it recorded it as it started, else (a run an
/// earlier mara recorded) its provider's `graph` when the workspace has it (else why not, said
/// under the drawing).
pub fn shaped(
    record: &RunRecord,
    graph: std::result::Result<&ExecutionGraph, &str>,
    previews: BTreeMap<String, Previewed>,
    lock: Option<Holder>,
) -> RunPage {
    let summary = summary(record, graph.ok(), previews);
    let mut page = RunPage::of(record, &summary, lock);
    let shown: Vec<svg::Shown> = (page.projects.iter())
        .map(|p| (p.path.clone(), p.shown.to_string(), p.duration_ms))
        .collect();
    let edges = match (&record.graph, graph) {
        (Some(recorded), _) => Edges::Recorded(recorded),
        (None, Ok(graph)) => Edges::Now(graph),
        (None, Err(why)) => Edges::Unknown(why),
    };
    page.graph = Drawing::of(&shown, edges);
    page
}

pub async fn run_page(
    State(app): State<Shared>,
    Path(run_id): Path<String>,
    query: Params,
) -> Response {
    html(
        async {
            parameters(query, &[])?;
            let page = recorded(&app, run_id).await?;
            let paths: Vec<String> = page.projects.iter().map(|p| p.path.clone()).collect();
            let logs = log_lines(&app, &page.run.run_id, paths).await?;
            let title = format!("{} of {}", page.run.operation, page.run.stack);
            let chrome = chrome(&app, title, Some(&page.run));
            let actions = super::actions_on(&app).await;
            Ok(pages::run(&chrome, &page, &logs, actions))
        }
        .await,
    )
}

pub async fn run_json(
    State(app): State<Shared>,
    Path(run_id): Path<String>,
    query: Params,
) -> Answer<Json<RunPage>> {
    parameters(query, &[])?;
    Ok(Json(recorded(&app, run_id).await?))
}

/// Each of `paths`' log lines in run `run_id`, so far.
async fn log_lines(
    app: &Shared,
    run_id: &str,
    paths: Vec<String>,
) -> Answer<Vec<(String, Vec<String>)>> {
    let (lines, _) = (app.source)
        .logs(run_id.to_string(), paths.clone(), LogCursor::default())
        .await?;
    Ok(paths
        .into_iter()
        .map(|path| {
            let mine = (lines.iter())
                .filter(|(p, _)| *p == path)
                .map(|(_, line)| line.clone())
                .collect();
            (path, mine)
        })
        .collect())
}

/// The run of `/runs/ID/log` and the project its `?project=PATH` names (required).
async fn log_of(
    app: &Shared,
    run_id: String,
    query: Params,
) -> Answer<(RunRow, String, Vec<String>)> {
    let found = parameters(query, &["project"])?;
    let project = (found.get("project").filter(|p| !p.is_empty()).cloned())
        .ok_or_else(|| Failure::bad_query("Name the project: `?project=PATH`."))?;
    let id = run_id.clone();
    let (record, run) = app
        .source
        .read(move |ledger| {
            let Some(record) = ledger.run(&id)?.map(RunRecord::as_seen) else {
                return Ok(None);
            };
            let run = row(ledger, &record)?;
            Ok(Some((record, run)))
        })
        .await?
        .flatten()
        .ok_or_else(|| Failure::no_run(&run_id))?;
    if !record.projects.iter().any(|p| p.path == project) {
        return Err(Failure::new(
            StatusCode::NOT_FOUND,
            format!("Run `{run_id}` has no project `{project}`."),
        ));
    }
    let lines = (app.source).log_of(run_id.clone(), project.clone()).await?;
    Ok((run, project, lines))
}

pub async fn log_page(
    State(app): State<Shared>,
    Path(run_id): Path<String>,
    query: Params,
) -> Response {
    html(
        async {
            let (run, project, lines) = log_of(&app, run_id, query).await?;
            let chrome = chrome(&app, format!("Log of {project}"), Some(&run));
            Ok(pages::log(&chrome, &run, &project, &lines))
        }
        .await,
    )
}

pub async fn log_json(
    State(app): State<Shared>,
    Path(run_id): Path<String>,
    query: Params,
) -> Answer<Json<serde_json::Value>> {
    let (run, project, lines) = log_of(&app, run_id, query).await?;
    Ok(Json(
        json!({"run_id": run.run_id, "project": project, "lines": lines}),
    ))
}

/// Every stack with its lock and its last run of each operation: a few reads of the ledger,
/// whatever its history — the stacks, their last runs, those runs' projects and drift checks'
/// previews, the locks.
async fn stack_rows(app: &Shared) -> Answer<Vec<StackRow>> {
    let found = app
        .source
        .read(|ledger| {
            let stacks = stacks(ledger)?;
            let last = ledger.with_projects(ledger.last_runs(&stacks, &OPERATIONS)?)?;
            let last: Vec<RunRecord> = last.into_iter().map(RunRecord::as_seen).collect();
            let mut of: BTreeMap<String, BTreeMap<Operation, RunRow>> = BTreeMap::new();
            for (run, row) in last.iter().zip(rows(ledger, &last)?) {
                of.entry(run.stack.clone())
                    .or_default()
                    .insert(run.operation, row);
            }
            let mut locks = ledger.holders()?;
            Ok((stacks.into_iter())
                .map(|stack| StackRow {
                    lock: locks.remove(&stack),
                    last: of.remove(&stack).unwrap_or_default(),
                    stack,
                })
                .collect())
        })
        .await?;
    Ok(found.unwrap_or_default())
}

pub async fn stacks_page(State(app): State<Shared>, query: Params) -> Response {
    html(
        async {
            parameters(query, &[])?;
            let rows = stack_rows(&app).await?;
            let actions = super::actions_on(&app).await;
            Ok(pages::stacks(
                &chrome(&app, "Stacks".into(), None),
                &rows,
                actions,
            ))
        }
        .await,
    )
}

pub async fn stacks_json(State(app): State<Shared>, query: Params) -> Answer<Json<Vec<StackRow>>> {
    parameters(query, &[])?;
    Ok(Json(stack_rows(&app).await?))
}

pub async fn not_found(uri: Uri) -> Response {
    missing(uri.path())
}

/// 404 for `path`: JSON under `/api`, a page elsewhere.
pub fn missing(path: &str) -> Response {
    let failure = Failure::new(StatusCode::NOT_FOUND, format!("Nothing at `{path}`."));
    match path.starts_with("/api/") {
        true => failure.into_response(),
        false => failure.page(),
    }
}
