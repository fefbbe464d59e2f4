//! `/api/runs/ID/events` (docs/commands.md, "serve"): a running run as a stream of Server-Sent
//! Events, from what its poller (`poller`, one for all the run's streams) reads every half
//! second — `project` when a project's row changes
//! (its status, duration, changes, reason), `log` for each new log line (numbered within its
//! project, so that a page that already shows a line skips it), `run` when the run's status or
//! duration changes, and `graph` (the drawing, `svg::Drawing`) when the run's record gains a
//! project the drawing did not have (a run an earlier mara recorded a project at a time) or its
//! critical path changes. The
//! stream ends after the run's end, or when the server stops.

use std::collections::BTreeMap;
use std::convert::Infallible;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt, stream};
use serde_json::json;

use crate::graph::ExecutionGraph;

use super::Shared;
use super::poller::{Held, Seen};
use super::routes::{Failure, Params, parameters, shaped};
use super::views::{self, ProjectRow, RunPage};

pub async fn stream(
    State(app): State<Shared>,
    Path(run_id): Path<String>,
    query: Params,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Failure> {
    parameters(query, &[])?;
    let id = run_id.clone();
    let provider = app
        .source
        .read(move |ledger| Ok(ledger.run(&id)?.map(|r| r.provider)))
        .await?
        .flatten();
    let Some(provider) = provider else {
        return Err(Failure::no_run(&run_id));
    };
    let mut stopping = app.stopping.clone();
    let graph = app.source.graph(provider).await;
    let watch = Watch {
        held: app.pollers.watch(&app, &run_id),
        graph,
        drawn: None,
        shown: BTreeMap::new(),
        lines: BTreeMap::new(),
        sent: 0,
        status: None,
        first: true,
        done: false,
    };
    let events = stream::unfold(watch, |mut watch| async move {
        if watch.done {
            return None;
        }
        let events = watch.tick().await;
        Some((stream::iter(events.into_iter().map(Ok)), watch))
    })
    .flatten()
    .take_until(async move {
        let _ = stopping.wait_for(|stopping| *stopping).await;
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

/// What the stream has said of its run so far.
struct Watch {
    /// The run's poller, shared with every other stream of the run (`poller`).
    held: Held,
    /// The graph of the run's provider, as the workspace defines it.
    graph: std::result::Result<ExecutionGraph, String>,
    /// The projects the graph last sent had, and its critical path.
    drawn: Option<(Vec<String>, Vec<usize>)>,
    /// Each project's row as last sent.
    shown: BTreeMap<String, serde_json::Value>,
    /// How many of each project's log lines were sent.
    lines: BTreeMap<String, usize>,
    /// How many of the poller's log lines were sent.
    sent: usize,
    /// What the run's status and duration last said.
    status: Option<(String, String)>,
    first: bool,
    done: bool,
}

impl Watch {
    /// The events since this stream's last look at what the poller published (the first look
    /// takes what it has, when it has read once): rows that changed, new log lines, the run's
    /// status.
    async fn tick(&mut self) -> Vec<Event> {
        let ready = std::mem::take(&mut self.first) && self.held.seen.borrow().reads > 0;
        if !ready && self.held.seen.changed().await.is_err() {
            self.done = true;
            return Vec::new();
        }
        let seen = self.held.seen.borrow_and_update().clone();
        let events = self.said(&seen);
        self.done = seen.over;
        events
    }

    /// What `seen` says that this stream has not.
    fn said(&mut self, seen: &Seen) -> Vec<Event> {
        let Some(run) = &seen.run else {
            return Vec::new();
        };
        let (record, previews) = &**run;
        let page = shaped(
            record,
            self.graph.as_ref().map_err(String::as_str),
            previews.clone(),
            None,
        );
        let mut events = self.rows(&page);
        events.extend(self.logs(&seen.lines));
        let (class, said) = page.run.shown();
        let status = (said.to_string(), views::duration(page.run.duration_ms));
        if self.status.as_ref() != Some(&status) {
            events.push(event(
                "run",
                json!({"status": record.status, "shown": class, "result": said, "duration": status.1}),
            ));
            self.status = Some(status);
        }
        events
    }

    /// A `graph` event when the run has projects the last drawing had not, or another critical
    /// path (durations change as projects run and end); a `project` event for each project whose
    /// row is not as last sent.
    fn rows(&mut self, page: &RunPage) -> Vec<Event> {
        let mut events = Vec::new();
        let paths: Vec<String> = page.projects.iter().map(|p| p.path.clone()).collect();
        let drawn = Some((paths, page.graph.critical.clone()));
        // At the first look too: projects may have started since the page was rendered.
        if self.drawn != drawn {
            events.push(event("graph", json!(page.graph)));
        }
        self.drawn = drawn;
        for project in &page.projects {
            let row = said(project);
            if self.shown.get(&project.path) != Some(&row) {
                self.shown.insert(project.path.clone(), row.clone());
                events.push(event("project", row));
            }
        }
        events
    }

    /// A `log` event for each line the poller read since this stream's last look.
    fn logs(&mut self, lines: &[(String, String)]) -> Vec<Event> {
        let new = lines.get(self.sent..).unwrap_or_default();
        self.sent = lines.len();
        (new.iter())
            .map(|(project, line)| {
                let n = self.lines.entry(project.clone()).or_default();
                *n += 1;
                event("log", json!({"project": project, "n": *n, "line": line}))
            })
            .collect()
    }
}

/// A project's row as the page shows it.
fn said(project: &ProjectRow) -> serde_json::Value {
    json!({
        "path": project.path,
        "status": project.status,
        "shown": project.shown,
        "duration": views::duration(project.duration_ms),
        "changes": project.said,
        "reason": project.reason,
    })
}

fn event(name: &str, data: serde_json::Value) -> Event {
    Event::default().event(name).data(data.to_string())
}
