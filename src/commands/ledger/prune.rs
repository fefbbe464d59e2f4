//! `mara ledger prune [--days N] [--runs N] [--dry-run]` (docs/commands.md, "ledger"): the runs
//! the workspace's `[retention]` (or the flags) does not keep, removed from the ledger with
//! everything recorded of them, then their log files under `.mara/logs/` (`run::retention`, which
//! every recorded run applies too once it has ended).

use serde_json::json;

use crate::error::{Error, Problem, Result, plural};
use crate::ledger;
use crate::run::retention;
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
    let pruned = retention::apply(ledger.as_mut(), workspace, (days, runs), dry_run)?;
    ui::print(&said(settings, &pruned.runs, pruned.logs, dry_run))
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
