//! The pages of `mara serve` (docs/commands.md, "serve"), as templates checked when mara is
//! compiled. Every value is escaped by the template (engine output is input from outside); the
//! pages load the stylesheet and the one script from the binary, and carry no script of their own.

use maud::{DOCTYPE, Markup, html};

use crate::ledger::Holder;
use crate::policy::Level;
use crate::status::RunStatus;

use super::svg;
use super::views::{self, OPERATIONS, ProjectPage, RunPage, RunRow, StackRow};

/// What every page has around its content.
pub struct Chrome<'a> {
    pub title: String,
    /// Where the ledger is.
    pub place: &'a str,
    /// The run the page shows, for the script that keeps it current.
    pub run: Option<&'a str>,
    /// Whether that run is running: the page keeps itself current.
    pub live: bool,
    /// Whether reading needs a token (an address beyond loopback): the script then fetches the
    /// pages with the token the tab keeps.
    pub guarded: bool,
}

fn layout(chrome: &Chrome<'_>, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (chrome.title) " · mara" }
                link rel="stylesheet" href="/assets/serve.css";
                link rel="icon" href="/assets/icon.svg" type="image/svg+xml";
                script src="/assets/serve.js" defer {}
            }
            body data-run=[chrome.run] data-live=(chrome.live) data-guarded=[chrome.guarded.then_some("true")] {
                header {
                    a.brand href="/" { "mara" }
                    nav {
                        a href="/" { "Runs" }
                        a href="/stacks" { "Stacks" }
                    }
                    @if !chrome.place.is_empty() { span.place title="The run ledger" { (chrome.place) } }
                }
                main {
                    // What an action of the page's came to (`form.action`), said by its script.
                    div #said role="status" aria-live="polite" hidden {}
                    (content)
                }
            }
        }
    }
}

/// A status as a coloured word.
fn badge(status: &str) -> Markup {
    html! { span class={"status " (status)} { (status) } }
}

/// A run's status as a coloured word: what it came to, where that says more (`1 project
/// drifted`).
fn shown(run: &RunRow) -> Markup {
    let (class, words) = run.shown();
    html! { span class={"status " (class)} { (words) } }
}

/// The projects a run's row names as failed: the first three, each linked to its log, and how
/// many more.
fn failed(run: &RunRow) -> Markup {
    let more = run.failed.len().saturating_sub(3);
    html! {
        @for (i, path) in run.failed.iter().take(3).enumerate() {
            @if i > 0 { ", " }
            a href=(log_link(&run.run_id, path)) { code { (path) } }
        }
        @if more > 0 { " and " (more) " more" }
    }
}

/// A recorded instant as people read it, its zone said: `2026-11-26 04:42:41 UTC` (the page's
/// script shows it in the viewer's own zone, and says which).
fn when(instant: &str) -> Markup {
    let shown = instant.replace('T', " ");
    let shown = shown
        .split('.')
        .next()
        .unwrap_or(&shown)
        .trim_end_matches('Z');
    match instant.ends_with('Z') {
        true => html! { time datetime=(instant) { (shown) " UTC" } },
        false => html! { time datetime=(instant) { (shown) } },
    }
}

/// Text that names commands and ids between backquotes, as mara's messages do, with those
/// shown as code.
fn prose(text: &str) -> Markup {
    html! {
        @for (i, part) in text.split('`').enumerate() {
            @if i % 2 == 1 { code { (part) } } @else { (part) }
        }
    }
}

fn run_link(run_id: &str) -> String {
    format!("/runs/{}", encode(run_id))
}

fn project_link(path: &str) -> String {
    format!("/projects/{}", encode(path))
}

fn log_link(run_id: &str, project: &str) -> String {
    format!("/runs/{}/log?project={}", encode(run_id), encode(project))
}

/// `text` for a URL's path segment or query value.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// What the list of runs is filtered by.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub stack: Option<String>,
    pub status: Option<RunStatus>,
    pub limit: usize,
}

/// `/`: the runs, newest first.
pub fn runs(chrome: &Chrome<'_>, rows: &[RunRow], stacks: &[String], filter: &Filter) -> Markup {
    let content = html! {
        h1 { "Runs" }
        form.filter method="get" action="/" {
            label { "Stack "
                select name="stack" {
                    option value="" { "every stack" }
                    @for stack in stacks {
                        option value=(stack) selected[filter.stack.as_deref() == Some(stack)] { (stack) }
                    }
                }
            }
            label { "Status "
                select name="status" {
                    option value="" { "any" }
                    @for status in RunStatus::ALL {
                        option value=(status.as_str()) selected[filter.status == Some(status)] { (status.as_str()) }
                    }
                }
            }
            button type="submit" { "Filter" }
        }
        @if rows.is_empty() {
            p.empty { @if filter.stack.is_some() || filter.status.is_some() { "No run recorded matches." } @else { "No run recorded yet." } }
        } @else {
            table.runs {
                thead { tr { th { "Run" } th { "Operation" } th { "Stack" } th { "Provider" } th { "Status" }
                    th { "By" } th { "Started" } th.num { "Duration" } th { "Projects" } th { "Failed" } } }
                tbody {
                    @for row in rows {
                        tr {
                            td { a href=(run_link(&row.run_id)) { code.run-id { (row.run_id) } } }
                            td { (row.operation.as_str()) }
                            td { (row.stack) }
                            td { (row.provider) }
                            td { (shown(row)) }
                            td { (row.user) "@" (row.host) }
                            td { (when(&row.started)) }
                            td.num { (views::duration(row.duration_ms)) }
                            td { (row.counts_said()) }
                            td.failed { (failed(row)) }
                        }
                    }
                }
            }
        }
    };
    layout(chrome, content)
}

/// What the workspace's policies said of a run, when they said anything: each message as text
/// (engine output and policies' words alike never become markup).
fn policies(run: &RunRow) -> Markup {
    html! {
        @if let Some(decision) = run.policy.as_ref().filter(|d| !d.is_empty()) {
            section #policies {
                h2 { "Policies" }
                ul.policies {
                    @for m in &decision.messages {
                        @let level = match m.level { Level::Deny => "deny", Level::Warn => "warn" };
                        li class=(level) {
                            span.level { (level) } " "
                            @if let Some(project) = &m.project { code { (project) } ": " }
                            (m.text) " " span.rule { "(" (m.rule) ")" }
                        }
                    }
                }
            }
        }
    }
}

/// `/runs/ID`: the run, its graph, its projects, what they change, and their logs.
pub fn run(
    chrome: &Chrome<'_>,
    page: &RunPage,
    logs: &[(String, Vec<String>)],
    actions: bool,
) -> Markup {
    let run = &page.run;
    let content = html! {
        h1 { (run.operation.as_str()) " of " (run.stack) " " span #run-status { (shown(run)) } }
        p.meta {
            "Run " code.run-id { (run.run_id) } " · provider " (run.provider) " · by " (run.user) "@" (run.host)
            " · started " (when(&run.started))
            " · " span #run-duration { (views::duration(run.duration_ms)) }
        }
        p.meta { code { (run.command) } }
        div #actions data-refresh="actions" {
            @for action in &run.actions {
                p.meta.action { (prose(&action.what())) " at " (when(&action.at)) }
            }
        }
        @if actions && run.status == RunStatus::Running {
            (action_form("Cancel this run", &format!("Cancel run `{}`", run.run_id), &format!("/api/runs/{}/cancel", encode(&run.run_id))))
        }
        section #graph {
            h2 { "Graph" }
            @if let Some(note) = &page.graph.note { p.note { (note) } }
            div.graph-box { (page.graph.svg()) (svg::legend()) }
        }
        section {
            h2 { "Projects" }
            table.projects {
                thead { tr { th { "Project" } th { "Status" } th.num { "Duration" } th { "Changes" } th { "Reason" } } }
                tbody {
                    @for p in &page.projects {
                        tr data-project=(p.path) {
                            td { a href=(log_link(&run.run_id, &p.path)) { (p.path) }
                                " " a.runs href=(project_link(&p.path)) title="This project's runs" { "runs" } }
                            td.status-cell { (badge(p.shown)) }
                            td.num.duration { (views::duration(p.duration_ms)) }
                            td.changes { (p.said) }
                            td.reason { @if let Some(reason) = &p.reason { (reason) } }
                        }
                    }
                }
            }
        }
        (policies(run))
        @if page.projects.iter().any(|p| !p.diff.is_empty() || !p.drifted.is_empty()) {
            section {
                h2 { "What changes" }
                @for p in page.projects.iter().filter(|p| !p.diff.is_empty() || !p.drifted.is_empty()) {
                    details open {
                        summary { (p.path) }
                        @if !p.drifted.is_empty() {
                            p.note { "Changed outside its engine:" }
                            pre.diff { @for d in &p.drifted { @for line in d.lines() { (line) "\n" } } }
                        }
                        @if !p.diff.is_empty() {
                            pre.diff { @for d in &p.diff { @for line in d.lines() { (line) "\n" } } }
                        }
                    }
                }
            }
        }
        section #logs {
            h2 { "Logs" }
            @for (path, lines) in logs {
                details open[page.projects.iter().any(|p| &p.path == path && matches!(p.shown, "running" | "failed" | "drifted"))] {
                    summary { (path) " " a href=(log_link(&run.run_id, path)) { "(own page)" } }
                    (log_block(path, lines, Some(TAIL)))
                }
            }
        }
    };
    layout(chrome, content)
}

/// How many of a project's last log lines a run's page shows (its own page shows them all).
const TAIL: usize = 500;

/// A project's log lines (its last `tail`, if given), counted for the script that appends
/// those that come.
fn log_block(path: &str, lines: &[String], tail: Option<usize>) -> Markup {
    let skipped = tail.map_or(0, |tail| lines.len().saturating_sub(tail));
    html! {
        @if skipped > 0 { p.note { (skipped) " earlier lines are on the project's own page." } }
        pre.log data-project=(path) data-lines=(lines.len()) {
            @for line in &lines[skipped..] { (line) "\n" }
        }
    }
}

/// `/runs/ID/log?project=PATH`: one project's log.
pub fn log(chrome: &Chrome<'_>, run: &RunRow, path: &str, lines: &[String]) -> Markup {
    let content = html! {
        h1 { "Log of " code { (path) } }
        p.meta { "In " a href=(run_link(&run.run_id)) { (run.operation.as_str()) " of " (run.stack) " (" code.run-id { (run.run_id) } ")" }
            " " span #run-status { (shown(run)) } }
        @if lines.is_empty() && run.status != RunStatus::Running { p.empty { "(no log)" } }
        (log_block(path, lines, None))
    };
    layout(chrome, content)
}

/// `/projects/PATH`: a project's runs, newest first, how long it took in each (`durations`), and
/// the last run that changed it.
pub fn project(chrome: &Chrome<'_>, page: &ProjectPage, durations: Markup) -> Markup {
    let content = html! {
        h1 { "Project " code { (page.path) } }
        p.meta {
            @match &page.last_change {
                Some(change) => {
                    "Last changed by " a href=(run_link(&change.run.run_id)) { (change.run.operation.as_str()) " of " (change.run.stack) }
                    " (" (change.run.provider) ") by " (change.run.user) "@" (change.run.host)
                    @if let Some(at) = change.project.finished.as_ref().or(change.project.started.as_ref()) { ", " (when(at)) }
                    @if !change.project.said.is_empty() { ": " (change.project.said) }
                }
                None => { "None of these runs changed it." }
            }
        }
        section {
            h2 { "How long it took" }
            div.chart { (durations) }
        }
        section {
            h2 { "Its runs" }
            table.project-runs {
                thead { tr { th { "Run" } th { "Operation" } th { "Stack" } th { "Provider" } th { "Its status" }
                    th { "Started" } th.num { "Duration" } th { "Changes" } th { "Reason" } } }
                tbody {
                    @for r in &page.runs {
                        tr data-run=(r.run.run_id) {
                            td { a href=(run_link(&r.run.run_id)) { code.run-id { (r.run.run_id) } } }
                            td { (r.run.operation.as_str()) }
                            td { (r.run.stack) }
                            td { (r.run.provider) }
                            td { a href=(log_link(&r.run.run_id, &page.path)) title="Its log" { (badge(r.project.shown)) } }
                            td { @if let Some(at) = &r.project.started { (when(at)) } }
                            td.num { (views::duration(r.project.duration_ms)) }
                            td { (r.project.said) }
                            td { @if let Some(reason) = &r.project.reason { (reason) } }
                        }
                    }
                }
            }
            @if page.runs.len() == views::PROJECT_RUNS { p.note { "Its last " (page.runs.len()) " runs." } }
        }
    };
    layout(chrome, content)
}

/// `/stacks`: each stack's lock and its last run of each operation.
pub fn stacks(chrome: &Chrome<'_>, rows: &[StackRow], actions: bool) -> Markup {
    let content = html! {
        h1 { "Stacks" }
        @if rows.is_empty() {
            p.empty { "No run recorded yet." }
        } @else {
            table.stacks data-refresh="stacks" {
                thead { tr { th { "Stack" } th { "Lock" }
                    @for op in OPERATIONS { th { "Last " (op.as_str()) } } } }
                tbody {
                    @for row in rows {
                        tr {
                            td { (row.stack) }
                            td { @match &row.lock {
                                Some(holder) => { (lock(holder)) @if actions {
                                    (action_form("Unlock", &format!("Unlock stack {}", row.stack), &format!("/api/stacks/{}/unlock?run={}", encode(&row.stack), encode(&holder.run_id))))
                                } }
                                None => { span.muted { "not locked" } }
                            } }
                            @for op in OPERATIONS {
                                td { @if let Some(run) = row.last.get(&op) {
                                    a href=(run_link(&run.run_id)) { (shown(run)) }
                                    " " (when(&run.started))
                                } }
                            }
                        }
                    }
                }
            }
        }
    };
    layout(chrome, content)
}

fn lock(holder: &Holder) -> Markup {
    html! {
        a href=(run_link(&holder.run_id)) { code.run-id { (holder.run_id) } }
        " by " (holder.user) "@" (holder.host) " since " (when(&holder.started))
        @if let Some(left) = holder.lease_left { " · lease " (left) "s left" }
    }
}

/// A button that acts with an operator's token, asked for on the page (sent as a bearer token by
/// the script, and kept for the tab only: no cookie, so no other site can act through the
/// browser). What it came to is said at the top of the page (`#said`), headed by `what`.
fn action_form(label: &str, what: &str, url: &str) -> Markup {
    html! {
        // Sent by the page's script with the token as a bearer token; without the script, a
        // plain POST that is refused (401), the token never in a URL.
        // Shown by the script (`hidden` until then): without it, the button could not send the
        // token as it must.
        noscript { p.note { "“" (label) "” needs JavaScript on this page (or the API: docs/commands.md, “serve”)." } }
        form.action method="post" action=(url) data-url=(url) data-what=(what) hidden {
            input type="password" name="token" placeholder="an operator's token" autocomplete="off" required;
            button type="submit" { (label) }
        }
    }
}

/// The page of a server beyond loopback to a request without a token of its own (401): it asks
/// for one, which the script keeps for the tab (`sessionStorage`) and sends with each request.
pub fn token_needed(message: &str) -> Markup {
    let chrome = Chrome {
        title: "A token, please".into(),
        place: "",
        run: None,
        live: false,
        guarded: true,
    };
    let content = html! {
        h1 { (chrome.title) }
        p.problem #token-said { (prose(message)) }
        // Read by the page's script; without it, a POST (the token never in a URL) that is
        // refused.
        form #token-form method="post" {
            input type="password" name="token" placeholder="a viewer's or an operator's token" autocomplete="off" required;
            button type="submit" { "Read" }
        }
        p.note { "The token is kept for this tab only, and sent with each request. "
            code { "mara serve token add NAME --role viewer" } " makes one." }
    };
    layout(&chrome, content)
}

/// A page that says what went wrong: a run or project that is not there, a bad query.
pub fn problem(chrome: &Chrome<'_>, message: &str) -> Markup {
    layout(
        chrome,
        html! { h1 { (chrome.title) } p.problem { (prose(message)) } p { a href="/" { "All runs" } } },
    )
}
