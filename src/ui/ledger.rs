//! The ledger's records as people read them, wherever a command shows one.

use crate::error::plural;
use crate::ledger::{KILLED, LOCKED, RunRecord};

/// What to say of the engines' own locks after `run` (as seen) ended without being able to stop
/// its engines cleanly: the projects it killed, those still running when it was abandoned, and
/// those its engine found locked — each may still hold its stack's own lock, unless `keeps` says
/// its engine keeps none (`deployment::keeps_engine_lock`) — and `clear`, the
/// command that clears them (`mara unlock --engine`, as this invocation would type it). Empty
/// when none. `mara unlock` says it; a run that took a lock over says `takeover_note`, of the
/// projects that were running alone.
pub fn engine_locks_note(run: &RunRecord, clear: &str, keeps: impl Fn(&str) -> bool) -> String {
    let run = run.clone().as_seen();
    let mut left = run.engine_locks_left();
    left.retain(|p| keeps(&p.path));
    if left.is_empty() {
        return String::new();
    }
    let mut text = format!(
        "Run {} left {} {} whose engine may still hold the stack's own lock:\n",
        run.run_id,
        left.len(),
        plural(left.len(), "project", "projects")
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

/// What to say after a run took over the lock of `run` (as read right after the takeover): the
/// projects it was running then (`RunRecord::running_when_taken_over`), and that their engines
/// may still finish — a stopped machine's, say, once continued — kept apart from this run's by
/// each engine's own lock on its stack alone (docs/commands.md, "What a takeover cannot
/// stop"); `clear` clears a lock a killed engine left (`mara unlock --engine`, as this
/// invocation would type it). Empty when it was running none.
pub fn takeover_note(run: &RunRecord, clear: &str) -> String {
    let running = run.running_when_taken_over();
    if running.is_empty() {
        return String::new();
    }
    let mut text = format!(
        "It was running {} {} then (as the ledger last heard):\n",
        running.len(),
        plural(running.len(), "project", "projects")
    );
    for project in &running {
        text.push_str(&format!("  {}\n", project.path));
    }
    text.push_str(concat!(
        "An engine it started may still finish after this takeover: the engine's own lock on its ",
        "stack (Pulumi's lock, Terraform's state lock) is what keeps it apart from this run's.\n",
    ));
    text.push_str(&format!(
        "One killed mid-operation may have left that lock: `{clear}` clears it.\n"
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Operation;
    use crate::ledger::ProjectRecord;
    use crate::status::{ProjectStatus, RunStatus};

    fn project(path: &str, status: ProjectStatus, reason: Option<&str>) -> ProjectRecord {
        ProjectRecord {
            path: path.into(),
            status,
            started: None,
            finished: None,
            exit_code: None,
            changes: None,
            reason: reason.map(str::to_string),
            log: None,
            fingerprint: None,
        }
    }

    /// A run as the run that took its lock over reads it: what it was running is abandoned;
    /// the rest had ended or never started.
    fn taken_over(projects: Vec<ProjectRecord>) -> RunRecord {
        RunRecord {
            run_id: "20261128-101500-abcdef".into(),
            operation: Operation::Up,
            provider: "aws".into(),
            stack: "dev".into(),
            user: "ana".into(),
            host: "laptop".into(),
            pid: 4121,
            command: "mara up".into(),
            started: "2026-11-28T10:15:00.000Z".into(),
            finished: Some("2026-11-28T10:20:00.000Z".into()),
            status: RunStatus::Abandoned,
            selected: None,
            graph: None,
            policy: None,
            projects,
            leased: true,
            actions: Vec::new(),
        }
    }

    #[test]
    fn a_takeover_names_what_was_running_and_nothing_that_ended() {
        let locked = format!("{LOCKED}; if none is running, clear it");
        let killed = format!("{KILLED} by a second interruption");
        let run = taken_over(vec![
            project("network", ProjectStatus::Succeeded, None),
            project("cluster", ProjectStatus::Abandoned, None),
            project("registry", ProjectStatus::Failed, Some(&locked)),
            project("dns", ProjectStatus::Cancelled, Some(&killed)),
            project("app", ProjectStatus::Skipped, Some("the run stopped")),
            project("ingress", ProjectStatus::Waiting, None),
            project("certs", ProjectStatus::Abandoned, None),
        ]);
        assert_eq!(
            takeover_note(&run, "mara -s dev unlock --engine"),
            "It was running 2 projects then (as the ledger last heard):
  cluster
  certs
An engine it started may still finish after this takeover: the engine's own lock on its stack (Pulumi's lock, Terraform's state lock) is what keeps it apart from this run's.
One killed mid-operation may have left that lock: `mara -s dev unlock --engine` clears it.
"
        );
        // `mara unlock --engine` keeps its broader set: the killed and the locked ones too.
        let left: Vec<&str> = (run.engine_locks_left().iter())
            .map(|p| p.path.as_str())
            .collect();
        assert_eq!(left, ["cluster", "registry", "dns", "certs"]);
    }

    #[test]
    fn a_takeover_of_a_run_that_was_running_nothing_says_nothing_more() {
        let killed = format!("{KILLED} by a second interruption");
        let run = taken_over(vec![
            project("network", ProjectStatus::Succeeded, None),
            project("dns", ProjectStatus::Cancelled, Some(&killed)),
        ]);
        assert_eq!(takeover_note(&run, "mara unlock --engine"), "");
    }
}
