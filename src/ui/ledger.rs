//! The ledger's records as people read them, wherever a command shows one.

use crate::ledger::{KILLED, LOCKED, RunRecord};

/// What to say of the engines' own locks after `run` (as seen) ended without being able to stop
/// its engines cleanly: the projects it killed, those still running when it was abandoned, and
/// those its engine found locked — each may still hold its stack's own lock — and `clear`, the
/// command that clears them (`mara unlock --engine`, as this invocation would type it). Empty
/// when none.
pub fn engine_locks_note(run: &RunRecord, clear: &str) -> String {
    let run = run.clone().as_seen();
    let left = run.engine_locks_left();
    if left.is_empty() {
        return String::new();
    }
    let mut text = format!(
        "Run {} left {} {} whose engine may still hold the stack's own lock:\n",
        run.run_id,
        left.len(),
        crate::error::plural(left.len(), "project", "projects")
    );
    for project in &left {
        let reason = match project.reason.as_deref() {
            Some(reason) if reason.starts_with(KILLED) || reason.starts_with(LOCKED) => {
                reason.to_string()
            }
            _ => "running when its run was abandoned".to_string(),
        };
        text.push_str(&format!("  {}: {reason}\n", project.path));
    }
    text.push_str(&format!(
        "Clear them with `{clear}`: it runs each engine's own cancel with the run's environment.\n"
    ));
    text
}
