//! The ledger's records as people read them, wherever a command shows one.

use crate::ledger::{ProjectRecord, RunRecord};
use crate::status::{ProjectStatus, RunStatus};

/// What to say of the engines' own locks after `run` (as seen) ended without being able
/// to stop its engines cleanly: the projects it killed, and the ones still running when it
/// was abandoned — an engine killed with it may hold its stack's own lock. Empty when none.
pub fn engine_locks_note(run: &RunRecord) -> String {
    let run = run.clone().as_seen();
    let left: Vec<&ProjectRecord> = run
        .projects
        .iter()
        .filter(|p| {
            p.status == ProjectStatus::Abandoned
                || (run.status == RunStatus::Abandoned && p.status == ProjectStatus::Running)
                || p.reason.as_deref().is_some_and(|r| r.starts_with("killed"))
        })
        .collect();
    if left.is_empty() {
        return String::new();
    }
    let mut text = format!(
        "Run {} left {} {} whose engine may have been killed and may still hold the stack's own lock:\n",
        run.run_id,
        left.len(),
        crate::error::plural(left.len(), "project", "projects")
    );
    for project in left {
        let reason = match project.reason.as_deref() {
            Some(reason) if reason.starts_with("killed") => reason.to_string(),
            _ => format!(
                "running when its run was abandoned; if `mara up` finds it locked, clear it with `pulumi cancel --yes --stack {}` in its directory (Terraform: `force-unlock`)",
                run.stack
            ),
        };
        text.push_str(&format!("  {}: {reason}\n", project.path));
    }
    text
}
