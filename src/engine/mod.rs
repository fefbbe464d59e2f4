//! Engines: what a project's operation runs (argv, directory, standard input) and how its output
//! is read. One file per engine; the scheduler only sees `Step`s and `Outcome`s.

pub mod pulumi;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

/// The operation of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    Up,
    Preview,
    Refresh,
    Destroy,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Up => "up",
            Operation::Preview => "preview",
            Operation::Refresh => "refresh",
            Operation::Destroy => "destroy",
        }
    }

    /// Whether it changes infrastructure (and so takes locks and asks for confirmation).
    pub fn mutates(self) -> bool {
        !matches!(self, Operation::Preview)
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a step runs: its output is read differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// Makes sure the stack exists.
    Prepare,
    /// The operation itself: its output is shown and its changes counted.
    Operation,
    /// Reads the stack outputs (after a successful `up`), as JSON on stdout.
    Outputs,
    /// Cleans up after the operation (`stack rm` for `destroy --remove`).
    Cleanup,
}

/// One engine process to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub kind: StepKind,
    pub program: String,
    pub args: Vec<String>,
    pub cwd: PathBuf,
}

impl Step {
    /// The command as a shell would show it (for `--dry-run` and logs).
    pub fn display(&self) -> String {
        std::iter::once(self.program.as_str())
            .chain(self.args.iter().map(String::as_str))
            .map(shell_quote)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A word quoted for a POSIX shell when it needs it.
pub fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c))
    {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// Resource change counts by Pulumi operation name (`create`, `same`, `update`, `delete`, …).
pub type Changes = BTreeMap<String, u64>;

/// Whether any count is a real change.
pub fn has_changes(changes: &Changes) -> bool {
    changes.iter().any(|(op, n)| op != "same" && *n > 0)
}

/// `+2 ~1 -1` for people (`same` is not a change).
pub fn changes_summary(changes: &Changes) -> String {
    let symbol = |op: &str| match op {
        "create" => "+",
        "update" => "~",
        "delete" => "-",
        "replace" => "±",
        _ => "",
    };
    let parts: Vec<String> = changes
        .iter()
        .filter(|(op, n)| op.as_str() != "same" && **n > 0)
        .map(|(op, n)| match symbol(op) {
            "" => format!("{n} {op}"),
            s => format!("{s}{n}"),
        })
        .collect();
    if parts.is_empty() {
        "no changes".into()
    } else {
        parts.join(" ")
    }
}
