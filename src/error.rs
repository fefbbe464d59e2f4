//! Error types and exit codes: what went wrong, where, and which exit code it means.
//!
//! Every problem a user can fix names its place: the file, the line where it has one, and the key or
//! project it concerns (`Problem`). Several problems are collected and reported together
//! (`Error::Problems`) instead of stopping at the first. `main` is the only place that prints an
//! error and turns it into an exit code.

use std::fmt;
use std::path::{Path, PathBuf};

/// Exit codes (docs/commands.md, "Exit codes"). One place, so that a code never means two things.
pub mod exit {
    pub const SUCCESS: i32 = 0;
    /// One or more projects failed.
    pub const PROJECT_FAILED: i32 = 1;
    /// Bad flags (or one the command does not use), or a confirmation was needed and could not
    /// be asked for.
    pub const USAGE: i32 = 2;
    /// A validation or configuration error: nothing ran.
    pub const CONFIG: i32 = 3;
    /// Changes where none may be: `drift` found drift, `preview --expect-no-changes` found
    /// changes, `ci generate --check` found the file out of date, an approved plan of `up
    /// --plans` no longer holds.
    pub const DRIFT: i32 = 4;
    /// Another run holds the stack's lock, or the run lost its lease.
    pub const LOCKED: i32 = 5;
    /// The person at the terminal did not confirm: nothing was deployed or destroyed.
    pub const DECLINED: i32 = 6;
    /// A job of a fanned-out run ran none of its projects: a project they depend on did not
    /// succeed in the run (a CI engine shows the job as skipped or as a warning, not green).
    pub const SKIPPED: i32 = 7;
    /// Interrupted by Ctrl-C or SIGTERM.
    pub const INTERRUPTED: i32 = 130;
}

/// A place in a user's file: the file, and the line and column where known (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub column: Option<usize>,
}

impl Location {
    pub fn file(file: impl Into<PathBuf>) -> Self {
        Location {
            file: file.into(),
            line: None,
            column: None,
        }
    }

    pub fn line(file: impl Into<PathBuf>, line: usize) -> Self {
        Location {
            file: file.into(),
            line: Some(line),
            column: None,
        }
    }

    /// The location of byte `offset` in `text`, which is the content of `file`.
    pub fn at_offset(file: impl Into<PathBuf>, text: &str, offset: usize) -> Self {
        LineIndex::new(text).location(file, text, offset)
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        Ok(())
    }
}

/// 1-based line and column of a byte offset (clamped to the text).
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    LineIndex::new(text).line_column(text, offset)
}

/// Where each line of a text starts, so that many offsets into one file (every project and
/// reference of a provider file) cost a binary search each, not a scan of the text.
#[derive(Debug, Clone)]
pub struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub fn new(text: &str) -> LineIndex {
        let starts = std::iter::once(0)
            .chain(
                text.bytes()
                    .enumerate()
                    .filter(|&(_, b)| b == b'\n')
                    .map(|(i, _)| i + 1),
            )
            .collect();
        LineIndex { starts }
    }

    /// 1-based line and column of byte `offset` of `text` (the text this index was made from).
    pub fn line_column(&self, text: &str, offset: usize) -> (usize, usize) {
        let offset = offset.min(text.len());
        let line = self.starts.partition_point(|&start| start <= offset);
        let start = self.starts[line - 1];
        let column = String::from_utf8_lossy(&text.as_bytes()[start..offset])
            .chars()
            .count()
            + 1;
        (line, column)
    }

    /// The location of byte `offset` in `text`, which is the content of `file`.
    pub fn location(&self, file: impl Into<PathBuf>, text: &str, offset: usize) -> Location {
        let (line, column) = self.line_column(text, offset);
        Location {
            file: file.into(),
            line: Some(line),
            column: Some(column),
        }
    }
}

/// One problem a user can fix, with everything needed to explain it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub location: Option<Location>,
    /// The key, flag or project the problem concerns, shown before the message.
    pub subject: Option<String>,
    pub message: String,
    /// A likely fix ("did you mean …", "pass --stack").
    pub hint: Option<String>,
}

impl Problem {
    pub fn new(message: impl Into<String>) -> Self {
        Problem {
            location: None,
            subject: None,
            message: message.into(),
            hint: None,
        }
    }

    pub fn at(mut self, location: Location) -> Self {
        self.location = Some(location);
        self
    }

    pub fn in_file(self, file: impl Into<PathBuf>) -> Self {
        self.at(Location::file(file))
    }

    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn maybe_hint(mut self, hint: Option<String>) -> Self {
        if hint.is_some() {
            self.hint = hint;
        }
        self
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(location) = &self.location {
            write!(f, "{location}: ")?;
        }
        if let Some(subject) = &self.subject {
            write!(f, "{subject}: ")?;
        }
        f.write_str(&self.message)
    }
}

/// Everything that can stop a mara command, each with its exit code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command line is wrong (exit 2).
    #[error("{0}")]
    Usage(Box<Problem>),
    /// Several things on the command line are wrong (exit 2), each said on its own.
    #[error("{}", problems_headline(.0))]
    UsageProblems(Vec<Problem>),
    /// The configuration is wrong; nothing ran (exit 3).
    #[error("{}", problems_headline(.0))]
    Problems(Vec<Problem>),
    /// A file could not be read (exit 3: it is part of the configuration).
    #[error("cannot read {}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file could not be written: mara's own, or one of the user's it keeps (exit 3: nothing
    /// ran past it).
    #[error("cannot write {}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The run ledger could not be opened, read or written (exit 3: it is checked before
    /// anything runs; a ledger failure during a run costs the record, not the run).
    #[error("the run ledger {}: {message}", .path.display())]
    Ledger { path: PathBuf, message: String },
    /// A program mara starts itself (not a project's engine) could not be started (exit 3).
    #[error("cannot start `{program}`")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    /// A question could not be asked on the terminal.
    #[error("cannot ask on the terminal")]
    Terminal(#[source] std::io::Error),
    /// The run's runtime (threads, signal handlers) could not be started.
    #[error("cannot start the run")]
    Runtime(#[source] std::io::Error),
    /// Writing mara's own output failed.
    #[error("cannot write the output")]
    Output(#[source] std::io::Error),
    /// One or more projects failed (exit 1); the summary has already been printed.
    #[error("{failed} {} failed", plural(*failed, "project", "projects"))]
    ProjectsFailed { failed: usize },
    /// A job of a fanned-out run ran none of its projects, a dependency having failed (exit 7).
    #[error(
        "{skipped} {} skipped: a project {} on has not succeeded in the run",
        plural(*skipped, "project", "projects"),
        plural(*skipped, "it depends", "they depend")
    )]
    Skipped { skipped: usize },
    /// A fanned-out run closed with projects that did not run, none of them failed (exit 1).
    #[error("{count} {} did not run", plural(*count, "project", "projects"))]
    NotRun { count: usize },
    /// `ci generate --check`: the file is not what would be written now (exit 4).
    #[error("{0}")]
    OutOfDate(Box<Problem>),
    /// Approved plans that no longer hold (`up --plans`), each said: nothing of them ran (exit
    /// 4).
    #[error("{}", plans_headline(.0))]
    NotAsApproved(Vec<Problem>),
    /// An `up` of approved plans refused projects whose plans no longer held (exit 4).
    #[error("{}: not applied, nor what follows", match refused { 1 => "the approved plan of 1 project no longer holds".to_string(), n => format!("the approved plans of {n} projects no longer hold") })]
    PlansRefused { refused: usize },
    /// The policies deny the plan (exit 4): nothing of it is applied. Each message has been
    /// said already.
    #[error("the policies deny {what} ({denied} {}){then}", plural(*denied, "denial", "denials"))]
    PolicyDenied {
        denied: usize,
        /// What they judged: `the plan`, `the destroy`, `the input`.
        what: &'static str,
        /// What the denial stopped (`: nothing was applied`), or nothing (a preview's).
        then: &'static str,
    },
    /// `mara policy test` found tests that fail or err (exit 1); each has been said.
    #[error("{failed} of {tests} policy {} failed", plural(*tests, "test", "tests"))]
    PolicyTestsFailed { failed: usize, tests: usize },
    /// `preview --expect-no-changes` found changes (exit 4).
    #[error("the preview found changes in {changed} {}", plural(*changed, "project", "projects"))]
    Drift { changed: usize },
    /// `mara drift` found projects that no longer match the cloud or their code (exit 4).
    #[error("{drifted} {} drifted", plural(*drifted, "project", "projects"))]
    Drifted { drifted: usize },
    /// Another run holds the stack's lock (exit 5).
    #[error("{0}")]
    Locked(Box<Problem>),
    /// The run lost its stack's lease: no project started after that, the running ones
    /// (`running`) finished (exit 5).
    #[error("{}", lease_lost(reason, running))]
    LeaseLost {
        reason: String,
        running: Vec<String>,
    },
    /// The run was interrupted (exit 130).
    #[error("interrupted")]
    Interrupted,
    /// The confirmation was answered no (exit 6); the problem says what was already stored.
    #[error("{0}")]
    Declined(Box<Problem>),
    /// `validate` found problems; its report has already been printed (exit 3).
    #[error("validation found {failed} {}", plural(*failed, "problem", "problems"))]
    ValidationFailed { failed: usize },
    /// A tool mara handed the terminal to (`mara kubectl`) failed and said why itself; mara
    /// exits with its code and adds nothing.
    #[error("{program} exited with code {code}")]
    ToolFailed { program: String, code: i32 },
}

fn problems_headline(problems: &[Problem]) -> String {
    match problems {
        [one] => one.to_string(),
        many => format!("{} problems in the configuration", many.len()),
    }
}

fn plans_headline(problems: &[Problem]) -> String {
    match problems {
        [one] => one.to_string(),
        many => format!(
            "{} of the approved plans no longer hold: nothing ran",
            many.len()
        ),
    }
}

impl Error {
    pub fn usage(problem: Problem) -> Self {
        Error::Usage(Box::new(problem))
    }

    pub fn config(problem: Problem) -> Self {
        Error::Problems(vec![problem])
    }

    pub fn read(path: &Path, source: std::io::Error) -> Self {
        // Bytes that are not text mara reads: located like every other mistake in a file.
        if let Some(bad) = source.get_ref().and_then(|e| e.downcast_ref::<NotText>()) {
            return Error::config(Problem::new(bad.message.clone()).at(Location {
                file: path.to_path_buf(),
                line: Some(bad.line),
                column: bad.column,
            }));
        }
        Error::Read {
            path: path.to_path_buf(),
            source,
        }
    }

    pub fn write(path: &Path, source: std::io::Error) -> Self {
        Error::Write {
            path: path.to_path_buf(),
            source,
        }
    }

    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) | Error::UsageProblems(_) => exit::USAGE,
            Error::Problems(_)
            | Error::Read { .. }
            | Error::Write { .. }
            | Error::Ledger { .. }
            | Error::Spawn { .. }
            | Error::ValidationFailed { .. } => exit::CONFIG,
            Error::Output(_)
            | Error::Terminal(_)
            | Error::Runtime(_)
            | Error::ProjectsFailed { .. }
            | Error::PolicyTestsFailed { .. }
            | Error::NotRun { .. } => exit::PROJECT_FAILED,
            Error::Drift { .. }
            | Error::Drifted { .. }
            | Error::OutOfDate(_)
            | Error::NotAsApproved(_)
            | Error::PolicyDenied { .. }
            | Error::PlansRefused { .. } => exit::DRIFT,
            Error::Skipped { .. } => exit::SKIPPED,
            Error::Interrupted => exit::INTERRUPTED,
            Error::Locked(_) | Error::LeaseLost { .. } => exit::LOCKED,
            Error::Declined(_) => exit::DECLINED,
            Error::ToolFailed { code, .. } => *code,
        }
    }

    /// The same error with every problem's file named relative to `root` when it lies inside it:
    /// `config/pulumi/environment:3`, as the documentation names the files.
    pub fn relative_to(self, root: &Path) -> Error {
        let shorten = |mut problem: Problem| {
            if let Some(location) = &mut problem.location
                && let Ok(relative) = location.file.strip_prefix(root)
            {
                location.file = relative.to_path_buf();
            }
            problem
        };
        let relative = |path: PathBuf| {
            path.strip_prefix(root)
                .map(Path::to_path_buf)
                .unwrap_or(path)
        };
        match self {
            Error::Usage(problem) => Error::Usage(Box::new(shorten(*problem))),
            Error::Problems(problems) => {
                Error::Problems(problems.into_iter().map(shorten).collect())
            }
            Error::NotAsApproved(problems) => {
                Error::NotAsApproved(problems.into_iter().map(shorten).collect())
            }
            Error::UsageProblems(problems) => {
                Error::UsageProblems(problems.into_iter().map(shorten).collect())
            }
            Error::Read { path, source } => Error::Read {
                path: relative(path),
                source,
            },
            Error::Write { path, source } => Error::Write {
                path: relative(path),
                source,
            },
            Error::Ledger { path, message } => Error::Ledger {
                path: relative(path),
                message,
            },
            other => other,
        }
    }

    /// The individual problems, for reporting each on its own line.
    pub fn problems(&self) -> &[Problem] {
        match self {
            Error::Usage(problem)
            | Error::Locked(problem)
            | Error::Declined(problem)
            | Error::OutOfDate(problem) => std::slice::from_ref(&**problem),
            Error::Problems(problems)
            | Error::UsageProblems(problems)
            | Error::NotAsApproved(problems) => problems,
            _ => &[],
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `1 check` / `2 checks`.
pub fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

/// The candidate closest to `wanted`, if any is close enough to be a plausible typo.
///
/// Compares whole strings and, for paths, their last segments, so that `vcp` suggests
/// `infrastructure/aws/vpc`.
pub fn did_you_mean<'a>(
    wanted: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    fn last(s: &str) -> &str {
        s.rsplit('/').next().unwrap_or(s)
    }
    candidates
        .into_iter()
        .map(|candidate| {
            let whole = strsim::jaro_winkler(wanted, candidate);
            let tail = strsim::jaro_winkler(last(wanted), last(candidate));
            (whole.max(tail), candidate)
        })
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}

/// Where and why an input's bytes are not text mara reads; `Error::read` turns it into a
/// located problem (`file:line:column: …`).
#[derive(Debug)]
pub struct NotText {
    pub line: usize,
    pub column: Option<usize>,
    pub message: String,
}

impl std::fmt::Display for NotText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for NotText {}

/// A value a message quotes, between backticks, cut to its first 60 characters when it is longer
/// (a 1 MB value is not echoed whole): `abc…` (1048576 characters).
pub fn quoted(text: &str) -> String {
    const SHOWN: usize = 60;
    let count = text.chars().count();
    match text.char_indices().nth(SHOWN) {
        Some((at, _)) => format!("`{}…` ({count} characters)", &text[..at]),
        None => format!("`{text}`"),
    }
}

/// What a run that lost its lease says: why, that it started nothing after, and which projects
/// were running then (they were let finish) — what it knows, and no more.
fn lease_lost(reason: &str, running: &[String]) -> String {
    let then = match running {
        [] => "none was running then".to_string(),
        [one] => format!("{one} was running then"),
        many => format!("{} were running then", many.join(", ")),
    };
    format!(
        "{reason}: no project was started after that; {then}; this run may no longer own the stack"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_column_counts_from_one() {
        let text = "a = 1\nbb = 2\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 6), (2, 1));
        assert_eq!(line_column(text, 8), (2, 3));
        assert_eq!(line_column(text, 999), (3, 1));
        assert_eq!(line_column("é = 1", 2), (1, 2), "columns count characters");
        let index = LineIndex::new(text);
        for offset in 0..=text.len() + 1 {
            let before = &text[..offset.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |p| p + 1) + 1;
            assert_eq!(
                index.line_column(text, offset),
                (line, column),
                "offset {offset}"
            );
        }
    }

    #[test]
    fn problem_names_file_line_and_subject() {
        let problem = Problem::new("unknown key")
            .at(Location::line("mara.toml", 4))
            .subject("`paralel`");
        assert_eq!(problem.to_string(), "mara.toml:4: `paralel`: unknown key");
    }

    #[test]
    fn suggestions_find_typos_and_path_tails() {
        let names = [
            "infrastructure/aws/vpc",
            "infrastructure/aws/eks",
            "kubernetes/logstore",
        ];
        assert_eq!(
            did_you_mean("infrastructure/aws/vcp", names),
            Some("infrastructure/aws/vpc")
        );
        assert_eq!(did_you_mean("logstor", names), Some("kubernetes/logstore"));
        assert_eq!(did_you_mean("zzzzzz", names), None);
    }
}
