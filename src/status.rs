//! What a project and a run ended as (docs/formats.md, "The run summary"; docs/commands.md, "status,
//! history, logs"): typed everywhere, text only where they are serialised — the JSON report, the
//! JUnit file, the ledger's columns.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A project's state in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProjectStatus {
    /// Started and not finished (only the ledger sees this).
    Running,
    Succeeded,
    /// Succeeded, and the engine reported no change.
    Unchanged,
    Failed,
    Skipped,
    Cancelled,
    /// It was running when its run's process died (only the ledger sees this).
    Abandoned,
    /// Not previewed: it reads a project not deployed yet.
    Waiting,
}

impl ProjectStatus {
    pub const ALL: [ProjectStatus; 8] = [
        ProjectStatus::Running,
        ProjectStatus::Succeeded,
        ProjectStatus::Unchanged,
        ProjectStatus::Failed,
        ProjectStatus::Skipped,
        ProjectStatus::Cancelled,
        ProjectStatus::Abandoned,
        ProjectStatus::Waiting,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ProjectStatus::Running => "running",
            ProjectStatus::Succeeded => "succeeded",
            ProjectStatus::Unchanged => "unchanged",
            ProjectStatus::Failed => "failed",
            ProjectStatus::Skipped => "skipped",
            ProjectStatus::Cancelled => "cancelled",
            ProjectStatus::Abandoned => "abandoned",
            ProjectStatus::Waiting => "waiting",
        }
    }

    pub fn parse(text: &str) -> Option<ProjectStatus> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Succeeded or unchanged: what lets its dependents run, and what `--resume` need not repeat.
    pub fn is_success(self) -> bool {
        matches!(self, ProjectStatus::Succeeded | ProjectStatus::Unchanged)
    }
}

impl fmt::Display for ProjectStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A run's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Succeeded,
    Failed,
    Cancelled,
    /// Its process died holding the stack's lock, and another run took the lock over.
    Abandoned,
}

impl RunStatus {
    pub const ALL: [RunStatus; 5] = [
        RunStatus::Running,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Abandoned,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Abandoned => "abandoned",
        }
    }

    pub fn parse(text: &str) -> Option<RunStatus> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_form_is_the_serialised_one_and_reads_back() {
        for status in ProjectStatus::ALL {
            let json = serde_json::to_string(&status).unwrap();
            assert_eq!(json, format!("\"{status}\""));
            assert_eq!(ProjectStatus::parse(status.as_str()), Some(status));
        }
        for status in RunStatus::ALL {
            let json = serde_json::to_string(&status).unwrap();
            assert_eq!(json, format!("\"{status}\""));
            assert_eq!(RunStatus::parse(status.as_str()), Some(status));
        }
        assert_eq!(ProjectStatus::parse("succeded"), None);
    }
}

/// Which values a project with inputs was previewed with (docs/commands.md, "Previews across
/// stacks").
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlannedWith {
    /// Its inputs as they are now.
    Current,
    /// Some as their upstream's preview plans them (`projected`).
    Projected,
    /// Not previewed: an input is known only once its upstream is applied.
    Deferred,
}
