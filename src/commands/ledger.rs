//! `mara status`, `history`, `logs`, `cancel` and `unlock` (docs/commands.md, "status, history,
//! logs" and "cancel, unlock"): reading the run ledger, and the two ways to act on a stack's lock.

mod prune;
mod unlock_engines;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::deployment::StackFiles;
use crate::engine::Operation;
use crate::error::{Error, Problem, Result};
use crate::ledger::{self, Holder, Ledger, RunRecord, process_exists, whoami};
use crate::settings::{OutputFormat, Settings};
use crate::status::{ProjectStatus, RunStatus};
use crate::ui::{self, Style};
use crate::workspace::Workspace;

/// The workspace, and the stack of this invocation if one can be named (`status` and `history`
/// also work without).
fn stack(settings: &Settings) -> Result<(Workspace, Option<String>)> {
    let files = StackFiles::load(settings)?;
    let stack = files.stack.as_ref().map(|s| s.name.to_string());
    Ok((files.workspace, stack))
}

fn require_stack(settings: &Settings) -> Result<(Workspace, String)> {
    let files = StackFiles::load(settings)?;
    let stack = files.required_stack()?.name.to_string();
    Ok((files.workspace, stack))
}

/// The workspace's ledger, if there is one; on a server, with what an earlier run of this
/// workspace could not write there made first (`ledger::journal`), so that it shows.
fn open_existing(settings: &Settings, workspace: &Workspace) -> Result<Option<Box<dyn Ledger>>> {
    let place = ledger::place(workspace, &settings.env)?;
    let mut opened = ledger::open_existing(&place).map_err(|e| e.relative_to(&workspace.root))?;
    if let (Some(ledger), Some(journal)) = (
        opened.as_mut(),
        ledger::journal::Journal::of(workspace, &place),
    ) {
        ledger::replay(&journal, ledger.as_mut());
    }
    Ok(opened)
}

pub fn status(settings: &Settings, watch: bool) -> Result<()> {
    let (workspace, stack) = stack(settings)?;
    loop {
        let Some(ledger) = open_existing(settings, &workspace)? else {
            return match settings.output {
                OutputFormat::Json => ui::print("[]\n"),
                OutputFormat::Human => ui::note(
                    settings,
                    "No run has been recorded in this workspace yet.\n",
                ),
            };
        };
        let stacks: Vec<String> = match &stack {
            Some(stack) => vec![stack.clone()],
            None => ledger.stacks()?,
        };
        let last = last_of(ledger.as_ref(), &stacks)?;
        let drift_ids: Vec<String> = (last.iter().filter_map(|(_, c)| c.as_ref()))
            .map(|c| c.run_id.clone())
            .collect();
        let mut previews = ledger.previews_of(&drift_ids)?;
        let mut runs = Vec::new();
        let mut checks = Vec::new();
        for (last, check) in last {
            runs.push(last.as_seen());
            checks.push(check.map(|run| {
                let previews = previews.remove(&run.run_id).unwrap_or_default();
                drift_check(run.as_seen(), &previews)
            }));
        }
        let running = runs.iter().any(|r| r.status == RunStatus::Running);
        let text = match settings.output {
            OutputFormat::Json => {
                let shown: Vec<serde_json::Value> = (runs.iter().zip(&checks))
                    .map(|(run, check)| {
                        let mut run = serde_json::to_value(run).expect("runs serialize");
                        run["last_drift_check"] = serde_json::to_value(check).expect("serializes");
                        run
                    })
                    .collect();
                format!(
                    "{}\n",
                    serde_json::to_string_pretty(&shown).expect("runs serialize")
                )
            }
            // Nothing to show is a note: `-q` leaves it out.
            OutputFormat::Human if runs.is_empty() && settings.verbosity < 0 => String::new(),
            OutputFormat::Human if runs.is_empty() => {
                format!("No run recorded for stack {}.\n", stacks.join(", "))
            }
            OutputFormat::Human => (runs.iter().zip(&checks))
                .map(|(r, check)| {
                    let check = check.as_ref().map(|c| c.said(settings.stdout_style));
                    render_run(r, settings.stdout_style) + &check.unwrap_or_default()
                })
                .collect::<Vec<_>>()
                .join("\n"),
        };
        let live = watch && running && ui::stdout_is_terminal();
        ui::print(&if live {
            format!("\x1b[2J\x1b[H{text}")
        } else {
            text
        })?;
        if !(watch && running) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The last run of `stack` that is not a drift check (a scheduled check would otherwise hide
/// the last deployment from `status` and `unlock`), with its projects; else its last drift check.
fn last_deployment(ledger: &dyn Ledger, stack: &str) -> Result<Option<RunRecord>> {
    let last = last_of(ledger, &[stack.to_string()])?;
    Ok(last.into_iter().next().map(|(deployment, _)| deployment))
}

/// Each of `stacks` that has a run (in their order), with its last deployment (as
/// `last_deployment` says) and its last drift check, each with its projects: three reads of the
/// ledger, however long its history and however many the stacks.
fn last_of(ledger: &dyn Ledger, stacks: &[String]) -> Result<Vec<(RunRecord, Option<RunRecord>)>> {
    // Newest first: the first of each stack's is its last.
    let last = ledger.last_runs(stacks, &Operation::ALL)?;
    let mut deployed: BTreeMap<&str, &RunRecord> = BTreeMap::new();
    let mut checked: BTreeMap<&str, &RunRecord> = BTreeMap::new();
    for run in &last {
        let of = match run.operation {
            Operation::Drift => &mut checked,
            _ => &mut deployed,
        };
        of.entry(run.stack.as_str()).or_insert(run);
    }
    let mut wanted: Vec<RunRecord> = Vec::new();
    for run in deployed.values().chain(checked.values()) {
        if !wanted.iter().any(|w| w.run_id == run.run_id) {
            wanted.push((*run).clone());
        }
    }
    let full = ledger.with_projects(wanted)?;
    let find = |run: Option<&&RunRecord>| {
        run.and_then(|run| full.iter().find(|f| f.run_id == run.run_id).cloned())
    };
    Ok((stacks.iter())
        .filter_map(|stack| {
            let check = find(checked.get(stack.as_str()));
            let deployment = find(deployed.get(stack.as_str())).or_else(|| check.clone())?;
            Some((deployment, check))
        })
        .collect())
}

/// A stack's last drift check (`mara drift`): when, and which of the projects it checked
/// drifted (docs/commands.md, "drift").
#[derive(Debug, serde::Serialize)]
struct DriftCheck {
    run_id: String,
    status: RunStatus,
    finished: Option<String>,
    /// The projects checked (their check ran), and of those, the drifted ones.
    checked: usize,
    drifted: Vec<String>,
    /// The projects whose check failed, or did not run (not there to check, skipped, cancelled).
    failed: Vec<String>,
    not_checked: usize,
}

impl DriftCheck {
    fn said(&self, style: Style) -> String {
        let when = self.finished.as_deref().unwrap_or("(not finished)");
        let mut found = match (self.drifted.len(), self.status) {
            (0, RunStatus::Succeeded) if self.failed.is_empty() => {
                style.green(&format!("nothing drifted in {} checked", self.checked))
            }
            (0, _) => style.yellow(&format!(
                "{}, nothing drifted in {} checked",
                self.status, self.checked
            )),
            (n, _) => style.red(&format!(
                "{n} of {} drifted: {}",
                self.checked,
                self.drifted.join(", ")
            )),
        };
        if !self.failed.is_empty() {
            found.push_str(&format!("; failed: {}", self.failed.join(", ")));
        }
        if self.not_checked > 0 {
            found.push_str(&format!("; {} not checked", self.not_checked));
        }
        format!("Last drift check {when} (run {}): {found}\n", self.run_id)
    }
}

/// A stack's last drift check (`run`, as seen, with what its projects' previews showed): a
/// project drifted when its check found it changed outside its engine, or that applying its
/// code would change it.
fn drift_check(run: RunRecord, previews: &BTreeMap<String, ledger::Previewed>) -> DriftCheck {
    let checked: Vec<&crate::ledger::ProjectRecord> = (run.projects.iter())
        .filter(|p| p.status.is_success())
        .collect();
    let drifted = (checked.iter())
        .filter(|p| {
            p.changes.as_ref().is_some_and(crate::engine::has_changes)
                || previews.get(&p.path).is_some_and(|v| !v.drifted.is_empty())
        })
        .map(|p| p.path.clone())
        .collect();
    let failed = (run.projects.iter())
        .filter(|p| p.status == ProjectStatus::Failed)
        .map(|p| p.path.clone())
        .collect::<Vec<_>>();
    DriftCheck {
        not_checked: run.projects.len() - checked.len() - failed.len(),
        run_id: run.run_id,
        status: run.status,
        finished: run.finished,
        checked: checked.len(),
        drifted,
        failed,
    }
}

/// A run and its projects, for people.
fn render_run(run: &RunRecord, style: Style) -> String {
    let mut out = format!(
        "{} {} on stack {} ({}): {}\n",
        style.bold(&format!("Run {}", run.run_id)),
        run.operation,
        run.stack,
        run.provider,
        run_status_word(run.status, style)
    );
    out.push_str(&style.dim(&format!(
        "started {} by {}@{} (pid {}){}\n",
        run.started,
        run.user,
        run.host,
        run.pid,
        run.finished.as_ref().map(|f| format!(", finished {f}")).unwrap_or_default()
    )));
    for action in &run.actions {
        out.push_str(&format!("{}\n", style.yellow(&action.said())));
    }
    let rows: Vec<[String; 3]> = run
        .projects
        .iter()
        .map(|p| {
            let detail = p
                .reason
                .clone()
                .or_else(|| p.changes.as_ref().map(crate::engine::changes_summary))
                .unwrap_or_default();
            [p.path.clone(), p.status.to_string(), detail]
        })
        .collect();
    let widths = ui::column_widths(["PROJECT", "STATUS", "DETAIL"], &rows);
    for ([path, status, detail], project) in rows.iter().zip(&run.projects) {
        let status = ui::report::paint(&ui::pad(status, widths[1]), project.status, style);
        out.push_str(&format!(
            "  {}  {status}  {detail}\n",
            ui::pad(path, widths[0])
        ));
    }
    out
}

fn run_status_word(status: RunStatus, style: Style) -> String {
    let as_project = match status {
        RunStatus::Running => ProjectStatus::Running,
        RunStatus::Succeeded => ProjectStatus::Succeeded,
        RunStatus::Failed => ProjectStatus::Failed,
        RunStatus::Cancelled => ProjectStatus::Cancelled,
        RunStatus::Abandoned => ProjectStatus::Abandoned,
    };
    ui::report::paint(status.as_str(), as_project, style)
}

pub fn history(settings: &Settings, limit: usize, all_stacks: bool) -> Result<()> {
    let (workspace, stack) = stack(settings)?;
    let stack = if all_stacks { None } else { stack };
    let ledger = open_existing(settings, &workspace)?;
    if settings.output == OutputFormat::Json {
        return history_json(ledger.as_deref(), stack.as_deref(), limit);
    }
    let runs: Vec<RunRecord> = match &ledger {
        Some(ledger) => (ledger.runs(stack.as_deref(), limit)?.into_iter())
            .map(RunRecord::as_seen)
            .collect(),
        None => Vec::new(),
    };
    // No run to list is a note: `-q` leaves it out, heading and all.
    if runs.is_empty() && settings.verbosity < 0 {
        return Ok(());
    }
    ui::print(&history_table(&runs, settings.stdout_style))
}

/// `history`'s table: a run a line, what was done to it under it.
fn history_table(runs: &[RunRecord], style: Style) -> String {
    let rows: Vec<[String; 7]> = runs
        .iter()
        .map(|r| {
            [
                r.run_id.clone(),
                r.operation.to_string(),
                r.stack.clone(),
                r.provider.clone(),
                r.status.to_string(),
                r.started.clone(),
                format!("{}@{}", r.user, r.host),
            ]
        })
        .collect();
    let headers = [
        "RUN",
        "OPERATION",
        "STACK",
        "PROVIDER",
        "STATUS",
        "STARTED",
        "BY",
    ];
    let widths = ui::column_widths(headers, &rows);
    let line = |cells: [&str; 7]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .take(6)
            .map(|(c, w)| ui::pad(c, w))
            .collect();
        format!("{}  {}", padded.join("  "), cells[6])
    };
    let mut out = format!("{}\n", style.bold(&line(headers)));
    for (r, run) in rows.iter().zip(runs) {
        out.push_str(&line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5], &r[6]]));
        out.push('\n');
        // What was done to it, under its row: `cancelled by ana via the web page at …`.
        for action in &run.actions {
            out.push_str(&format!("  {}\n", action.said()));
        }
    }
    if runs.is_empty() {
        out.push_str("(no runs recorded)\n");
    }
    out
}

/// How many runs `history --output json` reads at once: what it holds in memory, however many
/// it writes.
const HISTORY_PAGE: usize = 50;

/// `history --output json`: the runs, each with its projects, written as they are read, a page
/// at a time (`ui::print_json_array`).
fn history_json(ledger: Option<&dyn Ledger>, stack: Option<&str>, limit: usize) -> Result<()> {
    let mut left = limit;
    let mut last: Option<RunRecord> = None;
    ui::print_json_array(|| {
        let Some(ledger) = ledger.filter(|_| left > 0) else {
            return Ok(None);
        };
        let n = left.min(HISTORY_PAGE);
        let page = match &last {
            None => ledger.runs(stack, n)?,
            Some(after) => ledger.runs_after(stack, after, n)?,
        };
        left = match page.len() < n {
            true => 0,
            false => left - n,
        };
        last = page.last().cloned();
        let page = ledger.with_projects(page)?;
        Ok(Some(page.into_iter().map(RunRecord::as_seen).collect()))
    })
}

pub fn logs(
    settings: &Settings,
    run: Option<String>,
    project: Option<String>,
    follow: bool,
) -> Result<()> {
    let (workspace, stack) = stack(settings)?;
    let ledger = open_existing(settings, &workspace)?.ok_or_else(|| {
        Error::usage(Problem::new(
            "no run has been recorded in this workspace yet",
        ))
    })?;
    let asked = asked_logs(settings, ledger.as_ref(), stack.as_deref(), run, project)?;
    let (record, project, run_given) = (&asked.record, asked.project.as_deref(), asked.run_given);
    // A server keeps the lines itself: any machine reads them.
    if ledger.stores_logs() {
        return server_logs(
            settings,
            ledger.as_ref(),
            record,
            (project, run_given),
            follow,
        );
    }
    let dir = workspace.state_dir().join("logs").join(&record.run_id);
    let files = log_files(record, &dir, project, run_given)?;
    if !follow {
        return print_log_files(settings, &record.run_id, &files);
    }
    follow_log_files(
        settings,
        ledger.as_ref(),
        &record.run_id,
        &dir,
        project,
        files,
    )
}

/// What `mara logs` was asked for: the run, the project if one was named, and whether the run
/// was named (then the word can only be a project).
struct AskedLogs {
    record: RunRecord,
    project: Option<String>,
    run_given: bool,
}

/// The run and project `mara logs [RUN] [PROJECT]` names: one word that is no run's id names a
/// project of the last run; no run, the stack's last.
fn asked_logs(
    settings: &Settings,
    ledger: &dyn Ledger,
    stack: Option<&str>,
    run: Option<String>,
    project: Option<String>,
) -> Result<AskedLogs> {
    // `mara logs PROJECT`: one word that is no run's id names a project of the last run.
    let run_given = project.is_some();
    let (run, project) = match (run, project) {
        (Some(word), None) if ledger.run(&word)?.is_none() => (None, Some(word)),
        other => other,
    };
    let record = match &run {
        Some(id) => ledger.run(id)?.ok_or_else(|| {
            Error::usage(
                Problem::new(format!("no run `{id}`"))
                    .hint(format!("`{}` lists the runs", settings.again("history"))),
            )
        })?,
        None => {
            let last = ledger
                .runs(stack, 1)?
                .into_iter()
                .next()
                .ok_or_else(|| Error::usage(Problem::new("no run recorded yet")))?;
            ledger.run(&last.run_id)?.unwrap_or(last)
        }
    };
    Ok(AskedLogs {
        record,
        project,
        run_given,
    })
}

/// The log files of `record` under `dir`, each with its project's path: the named project's, or
/// every project's.
fn log_files(
    record: &RunRecord,
    dir: &Path,
    project: Option<&str>,
    run_given: bool,
) -> Result<Vec<(String, PathBuf)>> {
    Ok(match project {
        Some(name) => {
            let path = project_of(record, name, run_given)?;
            vec![(path.clone(), dir.join(format!("{path}.log")))]
        }
        None => record
            .projects
            .iter()
            .map(|p| (p.path.clone(), dir.join(format!("{}.log", p.path))))
            .collect(),
    })
}

/// The logs as they are now; a project named alone must have one.
fn print_log_files(settings: &Settings, run_id: &str, files: &[(String, PathBuf)]) -> Result<()> {
    let mut logs = Vec::new();
    for (path, file) in files {
        match crate::files::read_to_string(file) {
            Ok(text) => logs.push((path.clone(), Some(text))),
            Err(_) if files.len() == 1 => {
                return Err(Error::usage(Problem::new(format!(
                    "run {run_id} has no log for `{path}`"
                ))));
            }
            Err(_) => logs.push((path.clone(), None)),
        }
    }
    ui::print(&render_logs(settings, run_id, &logs))
}

/// Follow: print what each log gains until the run is no longer running, taking in the
/// projects that start meanwhile (unless one `project` was named).
fn follow_log_files(
    settings: &Settings,
    ledger: &dyn Ledger,
    run_id: &str,
    dir: &Path,
    project: Option<&str>,
    mut files: Vec<(String, PathBuf)>,
) -> Result<()> {
    let mut offsets: BTreeMap<String, u64> = BTreeMap::new();
    loop {
        let now = ledger.run(run_id)?.map(RunRecord::as_seen);
        if project.is_none()
            && let Some(now) = &now
        {
            for p in &now.projects {
                if !files.iter().any(|(path, _)| *path == p.path) {
                    files.push((p.path.clone(), dir.join(format!("{}.log", p.path))));
                }
            }
        }
        let running = now.is_some_and(|r| r.status == RunStatus::Running);
        for (path, file) in &files {
            let offset = offsets.entry(path.clone()).or_default();
            if let Some(text) = crate::files::read_from(file, offset) {
                let lines: Vec<(&str, &str)> = text.lines().map(|l| (path.as_str(), l)).collect();
                ui::print(&followed(settings, &lines))?;
            }
        }
        if !running || ui::stdout_closed() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The project of `record` that `name` names: its path, or the end of it.
/// `run_given`: the run was named, so `name` can only be a project.
fn project_of(record: &RunRecord, name: &str, run_given: bool) -> Result<String> {
    record
        .projects
        .iter()
        .map(|p| p.path.clone())
        .find(|p| p == name || p.ends_with(&format!("/{name}")))
        .ok_or_else(|| {
            let paths: Vec<&str> = record.projects.iter().map(|p| p.path.as_str()).collect();
            Error::usage(match run_given {
                true => Problem::new(format!("run {} has no project `{name}`", record.run_id))
                    .hint(format!("its projects: {}", paths.join(", "))),
                false => Problem::new(format!(
                    "`{name}` is neither a run nor a project of run {}",
                    record.run_id
                ))
                .hint("`mara history` lists the runs; `mara logs RUN PROJECT` names both"),
            })
        })
}

/// `logs` from a ledger that keeps the lines (a server's): the same output as from the files,
/// wherever the run ran.
fn server_logs(
    settings: &Settings,
    ledger: &dyn Ledger,
    record: &RunRecord,
    (project, run_given): (Option<&str>, bool),
    follow: bool,
) -> Result<()> {
    let project = project
        .map(|name| project_of(record, name, run_given))
        .transpose()?;
    if !follow {
        let lines = ledger.logs(&record.run_id, project.as_deref(), 0)?;
        let paths: Vec<&str> = match &project {
            Some(path) => vec![path.as_str()],
            None => record.projects.iter().map(|p| p.path.as_str()).collect(),
        };
        let logs: Vec<(String, Option<String>)> = paths
            .iter()
            .map(|path| {
                let text: String = lines
                    .iter()
                    .filter(|(_, p, _)| p == path)
                    .map(|(_, _, line)| format!("{line}\n"))
                    .collect();
                (path.to_string(), (!text.is_empty()).then_some(text))
            })
            .collect();
        return ui::print(&render_logs(settings, &record.run_id, &logs));
    }
    let mut after = 0;
    loop {
        let running = ledger
            .run(&record.run_id)?
            .map(RunRecord::as_seen)
            .is_some_and(|r| r.status == RunStatus::Running);
        let lines = ledger.logs(&record.run_id, project.as_deref(), after)?;
        if let Some((last, _, _)) = lines.last() {
            after = *last;
        }
        let lines: Vec<(&str, &str)> = lines
            .iter()
            .map(|(_, path, line)| (path.as_str(), line.as_str()))
            .collect();
        ui::print(&followed(settings, &lines))?;
        if !running || ui::stdout_closed() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A run's logs, each project's (`None`: it has none): under a heading per project when there
/// are several; with `--output json` one object, `{"run_id", "projects": [{"path", "lines"}]}`.
fn render_logs(settings: &Settings, run_id: &str, logs: &[(String, Option<String>)]) -> String {
    if settings.output == OutputFormat::Json {
        let projects: Vec<serde_json::Value> = logs
            .iter()
            .map(|(path, text)| {
                json!({"path": path, "lines": text.as_ref().map(|t| t.lines().collect::<Vec<_>>())})
            })
            .collect();
        let value = json!({"run_id": run_id, "projects": projects});
        return format!("{}\n", serde_json::to_string_pretty(&value).expect("JSON"));
    }
    let mut out = String::new();
    for (path, text) in logs {
        if logs.len() > 1 {
            out.push_str(&format!(
                "{}\n",
                settings.stdout_style.cyan(&format!("── {path}"))
            ));
        }
        out.push_str(text.as_deref().unwrap_or("(no log)\n"));
    }
    out
}

/// Lines that `logs --follow` prints as they come: each prefixed with its project; with
/// `--output json` one object a line, `{"project", "line"}`.
fn followed(settings: &Settings, lines: &[(&str, &str)]) -> String {
    lines
        .iter()
        .map(|(path, line)| match settings.output {
            OutputFormat::Json => format!("{}\n", json!({"project": path, "line": line})),
            OutputFormat::Human => format!("[{path}] {line}\n"),
        })
        .collect()
}

pub fn cancel(settings: &Settings) -> Result<()> {
    let (workspace, stack) = require_stack(settings)?;
    let holder = match open_existing(settings, &workspace)? {
        Some(mut ledger) => {
            ledger.request_cancel(&stack, &ledger::access::Actor::command_line())?
        }
        None => None,
    };
    match (settings.output, holder) {
        (OutputFormat::Json, holder) => ui::print(&format!(
            "{}\n",
            json!({"stack": stack, "cancelled": holder})
        )),
        (OutputFormat::Human, None) => {
            ui::note(settings, &format!("No run holds stack {stack}.\n"))
        }
        (OutputFormat::Human, Some(holder)) => ui::note(
            settings,
            &format!("Asked {holder} to stop; its engines are cancelling.\n"),
        ),
    }
}

/// `mara unlock [--force] [--engine]`: mara's own lock of the stack cleared (`--force`, only
/// when the run holding it is gone), and the locks its engines may have kept (`--engine`, through
/// `unlock_engines`); without either, what holds the stack and what its last run left.
pub fn unlock(settings: &Settings, force: bool, engine: bool) -> Result<()> {
    let (workspace, stack) = require_stack(settings)?;
    let ledger = open_existing(settings, &workspace)?;
    let holder = match &ledger {
        Some(ledger) => ledger.holder(&stack)?,
        None => None,
    };
    let clear = settings.again("unlock --engine");
    let mut clearing = None;
    let (mut text, last) = match (holder, ledger) {
        // Not locked by mara; a run killed mid-operation may have left its engines' own locks.
        (None, ledger) => {
            let last = match &ledger {
                Some(ledger) => last_deployment(ledger.as_ref(), &stack)?,
                None => None,
            };
            (format!("Stack {stack} is not locked by mara.\n"), last)
        }
        (Some(holder), Some(mut ledger)) => {
            refuse_a_live_holder(settings, &stack, &holder, force, engine)?;
            let last = ledger.run(&holder.run_id)?;
            // What the engines left is checked before mara's lock is cleared.
            if engine {
                clearing = Some(unlock_engines::Clearing::of(
                    settings,
                    &stack,
                    last.as_ref(),
                )?);
            }
            let text = match force {
                false => String::new(),
                true => match ledger.unlock(&stack, &ledger::access::Actor::command_line())? {
                    Some(holder) => {
                        format!("Cleared the lock of {holder}; that run is recorded abandoned.\n")
                    }
                    None => format!("Stack {stack} is not locked.\n"),
                },
            };
            (text, last)
        }
        (Some(_), None) => unreachable!("a lock was read from the ledger"),
    };
    match (engine, last) {
        (true, last) => {
            let clearing = match clearing {
                Some(clearing) => clearing,
                None => unlock_engines::Clearing::of(settings, &stack, last.as_ref())?,
            };
            let (cleared, failed) = clearing.clear()?;
            text.push_str(&cleared);
            // What failed is said even with `-q`.
            match failed {
                0 => ui::note(settings, &text)?,
                _ => ui::print(&text)?,
            }
            match failed {
                0 => Ok(()),
                failed => Err(Error::ProjectsFailed { failed }),
            }
        }
        (false, Some(last)) => {
            let keeps = crate::deployment::keeps_engine_lock(&workspace, &last.provider);
            text.push_str(&ui::ledger::engine_locks_note(&last, &clear, keeps));
            ui::note(settings, &text)
        }
        (false, None) => ui::note(settings, &text),
    }
}

/// Refuses to clear anything of a run that may still be running: its lock and its engines'
/// locks are its own. `--force` is needed to clear mara's lock at all; on a server a pid says
/// nothing (machines may share a host name), so `--force` clears a lock whose lease is live, and
/// its run, if alive, notices within a quarter of a second and stops starting projects.
fn refuse_a_live_holder(
    settings: &Settings,
    stack: &str,
    holder: &Holder,
    force: bool,
    engine: bool,
) -> Result<()> {
    let (_, host) = whoami();
    let cancel = settings.again("cancel");
    if holder.lease_left.is_none() && holder.host == host && process_exists(holder.pid) {
        return Err(Error::Locked(Box::new(
            Problem::new(format!(
                "stack `{stack}` is locked by {holder}, which is alive on this host"
            ))
            .hint(format!(
                "stop it with `{cancel}`; `unlock` only clears what a run that is gone left"
            )),
        )));
    }
    if !force && !engine {
        return Err(Error::usage(
            Problem::new(format!("stack `{stack}` is locked by {holder}"))
                .hint(format!(
                    "clearing a lock lets another run deploy the same stack at once: if the run holding it is gone (see `{}`), `{}`",
                    settings.again("status"),
                    settings.again("unlock --force")
                )),
        ));
    }
    if !force && holder.is_live(&host) {
        return Err(Error::Locked(Box::new(
            Problem::new(format!(
                "stack `{stack}` is locked by {holder}: its engines' locks are its own while it holds the stack"
            ))
            .hint(format!("wait for it, stop it with `{cancel}`, or, if it is gone, add --force to clear its lock too")),
        )));
    }
    Ok(())
}

/// `mara ledger`: which ledger this workspace uses, and where that comes from; `mara ledger
/// migrate --to URL`: this workspace's own ledger copied into a server's.
pub fn ledger(settings: &Settings, command: Option<crate::cli::LedgerCommand>) -> Result<()> {
    let files = StackFiles::load(settings)?;
    let workspace = &files.workspace;
    match command {
        None => {
            let place = ledger::place(workspace, &settings.env)?;
            let (from, said) = match (&place, settings.env.contains_key(ledger::URL_VARIABLE)) {
                (ledger::Place::File(_), _) => ("workspace", "this workspace's own"),
                (ledger::Place::Server(_), true) => ("MARA_LEDGER_URL", "from MARA_LEDGER_URL"),
                (ledger::Place::Server(_), false) => ("mara.toml", "from `ledger` in mara.toml"),
            };
            let shown = match &place {
                ledger::Place::File(file) => workspace.display(file).display().to_string(),
                server => server.to_string(),
            };
            let runs = match ledger::open_existing(&place)? {
                Some(ledger) => ledger.count_runs()?,
                None => 0,
            };
            let text = match settings.output {
                OutputFormat::Json => format!(
                    "{}\n",
                    serde_json::to_string_pretty(&json!({
                        "kind": match place { ledger::Place::File(_) => "sqlite", ledger::Place::Server(_) => "postgres" },
                        "ledger": shown,
                        "from": from,
                        "runs": runs,
                    }))
                    .expect("JSON")
                ),
                OutputFormat::Human => format!(
                    "Ledger: {shown} ({said}), {runs} {} recorded\n",
                    crate::error::plural(runs, "run", "runs")
                ),
            };
            ui::print(&text)
        }
        Some(crate::cli::LedgerCommand::Migrate { to }) => migrate(settings, workspace, to),
        Some(crate::cli::LedgerCommand::Prune {
            days,
            runs,
            dry_run,
        }) => prune::run(settings, workspace, (days, runs), dry_run),
    }
}

/// `mara ledger migrate [--to URL]`: this workspace's own ledger, with its runs' logs, copied
/// into a server's (by default the one the workspace is pointed at).
fn migrate(settings: &Settings, workspace: &Workspace, to: Option<String>) -> Result<()> {
    let in_use = ledger::place(workspace, &settings.env)?;
    let server = migration_server(to, &in_use)?;
    let file = ledger::path(workspace);
    let history = history_to_migrate(workspace, &file)?;
    let mut to = ledger::open(&server)?;
    let added = to.import(&history)?;
    let lines_copied = copy_logs(workspace, to.as_mut(), &history, &added)?;
    let migrated = Migrated {
        from: workspace.display(&file).display().to_string(),
        to: &server,
        in_use: in_use == server,
        history: &history,
        added: &added,
        lines_copied,
    };
    ui::print(&migrated.render(settings.output))
}

/// The server `migrate` copies into: `--to`'s, else the one the workspace is pointed at.
fn migration_server(to: Option<String>, in_use: &ledger::Place) -> Result<ledger::Place> {
    match (to, in_use) {
        (Some(url), _) => match crate::workspace::ledger_url::parse(&url) {
            Ok(_) => Ok(ledger::Place::Server(url.trim().to_string())),
            Err(reason) => Err(Error::usage(
                Problem::new(format!("--to: {reason}"))
                    .hint("mara ledger migrate --to postgres://user@host/database"),
            )),
        },
        (None, ledger::Place::Server(_)) => Ok(in_use.clone()),
        (None, ledger::Place::File(_)) => Err(Error::usage(
            Problem::new("no server to migrate to")
                .hint("mara ledger migrate --to postgres://user@host/database, or point the workspace at it first (MARA_LEDGER_URL, or `ledger` in mara.toml)"),
        )),
    }
}

/// The history of the workspace's own ledger (`file`), refused while a run is still going there;
/// a run whose process is gone is copied as what it is: abandoned.
fn history_to_migrate(workspace: &Workspace, file: &Path) -> Result<ledger::History> {
    let from =
        ledger::open_existing(&ledger::Place::File(file.to_path_buf()))?.ok_or_else(|| {
            Error::usage(Problem::new(format!(
                "{} does not exist: this workspace has no history of its own to copy",
                workspace.display(file).display()
            )))
        })?;
    let history = from.export()?;
    // A run still going here would go on writing into the old ledger.
    if let Some(running) = history
        .runs
        .iter()
        .find(|r| RunRecord::clone(r).as_seen().status == RunStatus::Running)
    {
        return Err(Error::usage(
            Problem::new(format!(
                "run {} is still running on this workspace's own ledger",
                running.run_id
            ))
            .hint("wait for it to end, then migrate"),
        ));
    }
    Ok(ledger::History {
        runs: history.runs.into_iter().map(RunRecord::as_seen).collect(),
        ..history
    })
}

/// The logs of the runs copied (`added`), read from this workspace's log files (already
/// redacted) into `to`; how many lines.
fn copy_logs(
    workspace: &Workspace,
    to: &mut dyn Ledger,
    history: &ledger::History,
    added: &[String],
) -> Result<usize> {
    let mut lines_copied = 0;
    for run in history.runs.iter().filter(|r| added.contains(&r.run_id)) {
        for project in &run.projects {
            let Some(log) = &project.log else { continue };
            let Ok(text) = crate::files::read_to_string(&workspace.root.join(log)) else {
                continue;
            };
            let lines: Vec<(String, String)> = text
                .lines()
                .map(|l| (project.path.clone(), l.to_string()))
                .collect();
            for batch in lines.chunks(1000) {
                to.append_logs(&run.run_id, batch)?;
            }
            lines_copied += lines.len();
        }
    }
    Ok(lines_copied)
}

/// What `migrate` did, as it says it.
struct Migrated<'a> {
    /// The workspace's ledger file, as shown.
    from: String,
    to: &'a ledger::Place,
    /// The workspace uses `to` already.
    in_use: bool,
    history: &'a ledger::History,
    added: &'a [String],
    lines_copied: usize,
}

impl Migrated<'_> {
    fn render(&self, output: OutputFormat) -> String {
        let Migrated {
            from,
            to,
            in_use,
            history,
            added,
            lines_copied,
        } = self;
        let total = history.runs.len();
        match output {
            OutputFormat::Json => format!(
                "{}\n",
                serde_json::to_string_pretty(&json!({
                    "from": from,
                    "to": to.to_string(),
                    "runs": total,
                    "copied": added,
                    "already_there": total - added.len(),
                    "log_lines": lines_copied,
                    "images": history.images.len(),
                }))
                .expect("JSON")
            ),
            OutputFormat::Human => {
                let next = match in_use {
                    true => "This workspace uses it already.".to_string(),
                    false => format!(
                        "Use it from now on: set MARA_LEDGER_URL, or `ledger = \"{to}\"` in mara.toml."
                    ),
                };
                format!(
                    "Copied {} of {total} {} from {from} to {to} ({} already there), with {lines_copied} log {}; {} were added where the server had none.\n{next}\n",
                    added.len(),
                    crate::error::plural(total, "run", "runs"),
                    total - added.len(),
                    crate::error::plural(*lines_copied, "line", "lines"),
                    match history.images.len() {
                        0 => "what is deployed and the stacks known".to_string(),
                        n => format!(
                            "what is deployed, the stacks known and {n} imported {}",
                            crate::error::plural(n, "image", "images")
                        ),
                    },
                )
            }
        }
    }
}
