//! Engines: what a project's operation runs (argv, directory, standard input) and how its output
//! is read. One file per engine; the scheduler only sees `Step`s and `Outcome`s.

pub mod pulumi;
pub mod terraform;

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
    /// Variables added to the run's environment for this step (`TF_VAR_*`, `MARA_OUTPUTS`).
    pub env: BTreeMap<String, String>,
    /// The exit codes that mean success (`plan -detailed-exitcode` exits 2 for changes).
    pub ok_codes: Vec<i32>,
    /// The exit code that says the operation found changes, whatever its output counted
    /// (`plan -detailed-exitcode` exits 2; Terraform before 1.1 reports no output actions).
    pub changes_code: Option<i32>,
    /// Run instead when this step fails (`workspace new` when `workspace select` finds none).
    pub fallback: Option<Box<Step>>,
}

impl Step {
    /// A step with no extra variables, succeeding on exit 0.
    pub fn new(
        kind: StepKind,
        program: impl Into<String>,
        args: Vec<String>,
        cwd: impl Into<PathBuf>,
    ) -> Step {
        Step {
            kind,
            program: program.into(),
            args,
            cwd: cwd.into(),
            env: BTreeMap::new(),
            ok_codes: vec![0],
            changes_code: None,
            fallback: None,
        }
    }

    pub fn succeeded(&self, code: Option<i32>) -> bool {
        code.is_some_and(|c| self.ok_codes.contains(&c))
    }

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

/// Reads an engine's operation output: lines for people, and the change counts.
#[derive(Debug)]
pub enum Reader {
    Pulumi(pulumi::OutputReader),
    Terraform(terraform::Reader),
    /// A command step's output, shown as it is; it reports no counts.
    Plain,
}

impl Reader {
    pub fn new(engine: crate::provider::EngineKind, operation: Operation) -> Reader {
        use crate::provider::EngineKind;
        match engine {
            EngineKind::Pulumi => Reader::Pulumi(pulumi::OutputReader::new(operation)),
            EngineKind::Terraform | EngineKind::Tofu => {
                Reader::Terraform(terraform::Reader::default())
            }
            EngineKind::Command => Reader::Plain,
        }
    }

    pub fn line(&mut self, line: &str) -> Vec<String> {
        match self {
            Reader::Pulumi(reader) => reader.line(line),
            Reader::Terraform(reader) => reader.line(line),
            Reader::Plain => vec![line.to_string()],
        }
    }

    pub fn finish(&mut self) -> Vec<String> {
        match self {
            Reader::Pulumi(reader) => reader.finish(),
            Reader::Terraform(reader) => reader.finish(),
            Reader::Plain => Vec::new(),
        }
    }

    /// The error the engine reported in its output (Terraform's `-json` diagnostics), if any.
    pub fn error(&self) -> Option<&str> {
        match self {
            Reader::Terraform(reader) => reader.error(),
            Reader::Pulumi(_) | Reader::Plain => None,
        }
    }

    pub fn changes(&mut self) -> Option<Changes> {
        match self {
            Reader::Pulumi(reader) => reader.changes.take(),
            Reader::Terraform(reader) => reader.changes(),
            Reader::Plain => None,
        }
    }
}

/// The stack outputs an engine's outputs step printed, as `{"name": value}`.
pub fn parse_outputs(engine: crate::provider::EngineKind, stdout: &str) -> serde_json::Value {
    use crate::provider::EngineKind;
    match engine {
        EngineKind::Terraform | EngineKind::Tofu => terraform::outputs(stdout, true),
        _ => serde_json::from_str(stdout).unwrap_or(serde_json::Value::Object(Default::default())),
    }
}

/// Whether an engine's stderr says another run holds the stack's (or state's) lock.
pub fn is_locked(stderr: &str) -> bool {
    pulumi::is_locked(stderr) || stderr.contains(terraform::LOCKED_MARKER)
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
