//! `mara ledger prune [--days N] [--runs N] [--dry-run]` (docs/commands.md, "ledger"): the runs
//! the workspace's `[retention]` (or the flags) does not keep, removed from the ledger with
//! everything recorded of them (`Ledger::prune`), then their log files under `.mara/logs/`.

use serde_json::json;

use crate::error::{Error, Problem, Result, plural};
use crate::ledger;
use crate::settings::{OutputFormat, Settings};
use crate::ui;
use crate::workspace::Workspace;

pub fn run(
    settings: &Settings,
    workspace: &Workspace,
    (days, runs): (Option<u32>, Option<u32>),
    dry_run: bool,
) -> Result<()> {
    let retention = &workspace.settings.retention;
    let (days, runs) = (days.or(retention.days), runs.or(retention.runs));
    if days.is_none() && runs.is_none() {
        return Err(Error::usage(
            Problem::new("nothing says which runs to keep")
                .hint("set `[retention]` in mara.toml (`days = 90`, `runs = 1000`), or pass --days N or --runs N"),
        ));
    }
    let place = ledger::place(workspace, &settings.env)?;
    let Some(mut ledger) = ledger::open_existing(&place)? else {
        return ui::print(&said(settings, &[], 0, dry_run));
    };
    let since = days.map(|d| {
        let age = std::time::Duration::from_secs(u64::from(d) * 86_400);
        crate::clock::rfc3339(std::time::SystemTime::now() - age)
    });
    let gone = ledger.prune(since.as_deref(), runs.map(|n| n as usize), dry_run)?;
    let mut files = 0;
    if !dry_run {
        files = remove_logs(workspace, &gone)?;
    }
    ui::print(&said(settings, &gone, files, dry_run))
}

/// Each removed run's log directories (`logs/<run>`, and `logs/<run>-<suffix>` of its
/// confirmation's preview): how many were removed.
fn remove_logs(workspace: &Workspace, gone: &[String]) -> Result<usize> {
    let dir = workspace.state_dir().join("logs");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(0);
    };
    let gone: std::collections::BTreeSet<&str> = gone.iter().map(String::as_str).collect();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // `20261126-050354-64634a` or `20261126-050354-64634a-preview`.
        let run = name.get(..22).unwrap_or(&name);
        if gone.contains(run) && (name.len() == run.len() || name[run.len()..].starts_with('-')) {
            let path = entry.path();
            std::fs::remove_dir_all(&path).map_err(|e| Error::write(&path, e))?;
            removed += 1;
        }
    }
    Ok(removed)
}

fn said(settings: &Settings, gone: &[String], logs: usize, dry_run: bool) -> String {
    if settings.output == OutputFormat::Json {
        let value = json!({"removed": gone, "log_directories": logs, "dry_run": dry_run});
        return format!("{value}\n");
    }
    let n = gone.len();
    let runs = plural(n, "run", "runs");
    match (dry_run, n) {
        (_, 0) => "Nothing to remove: the ledger holds only runs the retention keeps.\n".into(),
        (true, _) => format!(
            "Would remove {n} {runs} (the oldest {}), and their log files; nothing was removed.\n",
            gone[0]
        ),
        (false, _) => format!(
            "Removed {n} {runs} from the ledger, and {logs} log {}.\n",
            plural(logs, "directory", "directories")
        ),
    }
}
