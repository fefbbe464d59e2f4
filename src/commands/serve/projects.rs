//! `/projects/PATH` (docs/commands.md, "serve"): one project across the runs that selected it —
//! each run's row with the project's own status, duration and changes, newest first; its
//! durations over time, drawn; and the last run that changed it. Read with one query of the
//! ledger's (`Ledger::project_runs`), as HTML (`pages::project`) or JSON.

use crate::ledger::{Ledger, RunRecord};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};

use super::Shared;
use super::pages;
use super::routes::{Answer, Failure, Params, chrome, html as page, parameters};
use super::views::{self, PROJECT_RUNS, ProjectPage, ProjectRun, RunPage};

/// Project `path`'s runs as its page shows them; 404 when no run recorded it.
async fn recorded(app: &Shared, path: String) -> Answer<ProjectPage> {
    // `/projects/a/b/` is project `a/b`.
    let path = path.trim_end_matches('/').to_string();
    let wanted = path.clone();
    let runs = app
        .source
        .read(move |ledger| shaped(ledger, &wanted))
        .await?
        .unwrap_or_default();
    if runs.is_empty() {
        return Err(Failure::new(
            StatusCode::NOT_FOUND,
            format!("No run of project `{path}` in this ledger."),
        ));
    }
    let last_change = runs.iter().find(|r| r.changed()).cloned();
    Ok(ProjectPage {
        path,
        runs,
        last_change,
    })
}

/// Each run of `path` (as seen), with the project's row as its run's page shows it.
fn shaped(ledger: &dyn Ledger, path: &str) -> crate::error::Result<Vec<ProjectRun>> {
    let none = crate::graph::ExecutionGraph::from_projects(Vec::new()).expect("an empty graph");
    let mut runs = Vec::new();
    for record in ledger.project_runs(path, PROJECT_RUNS)? {
        let record: RunRecord = record.as_seen();
        let previews = crate::ui::recorded::previews_of(ledger, &record)?;
        let summary = crate::ui::recorded::summary_of(&record, &none, previews);
        let RunPage {
            run, mut projects, ..
        } = RunPage::of(&record, &summary, None);
        if let Some(project) = projects.pop() {
            let run = run.into();
            runs.push(ProjectRun { run, project });
        }
    }
    Ok(runs)
}

pub async fn project_page(
    State(app): State<Shared>,
    Path(path): Path<String>,
    query: Params,
) -> Response {
    page(
        async {
            parameters(query, &[])?;
            let project = recorded(&app, path).await?;
            let chrome = chrome(&app, format!("Project {}", project.path), None);
            Ok(pages::project(&chrome, &project, durations(&project.runs)))
        }
        .await,
    )
}

pub async fn project_json(
    State(app): State<Shared>,
    Path(path): Path<String>,
    query: Params,
) -> Answer<Json<ProjectPage>> {
    parameters(query, &[])?;
    Ok(Json(recorded(&app, path).await?))
}

/// The chart's size, and the room each bar takes.
const HEIGHT: u32 = 120;
const BAR: u32 = 9;
const STEP: u32 = 12;
const MARGIN: u32 = 4;

/// `runs`' durations over time, oldest on the left: a bar each, as high as it took (the
/// longest reaching the top), coloured by the project's status, its run said on hover. Runs
/// whose project did not start have no bar.
pub fn durations(runs: &[ProjectRun]) -> Markup {
    let timed: Vec<(&ProjectRun, u64)> = (runs.iter().rev())
        .filter_map(|r| Some((r, r.project.duration_ms?)))
        .collect();
    let longest = timed.iter().map(|(_, ms)| *ms).max().unwrap_or(0).max(1);
    let width = timed.len() as u32 * STEP + 2 * MARGIN;
    let longest_said = views::duration(Some(longest));
    let label = match timed.len() {
        1 => format!("How long it took in its one run: {longest_said}"),
        n => format!("How long it took in each of its last {n} runs; the longest, {longest_said}"),
    };
    let said = match timed.len() {
        0 => "None of its runs started it.".to_string(),
        _ => format!(
            "A bar a run, oldest on the left, coloured by how it ended; the tallest took {longest_said}."
        ),
    };
    html! {
        p.note { (said) }
        svg.durations role="img" width=(width) height=(HEIGHT + 2 * MARGIN) viewBox={"0 0 " (width) " " (HEIGHT + 2 * MARGIN)} {
            title { (label) }
            @for (k, (run, ms)) in timed.iter().enumerate() {
                @let high = ((*ms as f64 / longest as f64) * f64::from(HEIGHT)).round().max(1.0) as u32;
                rect class=(run.project.shown) x=(MARGIN + k as u32 * STEP) y=(MARGIN + HEIGHT - high) width=(BAR) height=(high) {
                    title { (run.run.operation.as_str()) " of " (run.run.stack) " · " (run.run.run_id) " · "
                        (run.project.shown) " · " (views::duration(Some(*ms))) }
                }
            }
        }
    }
}
