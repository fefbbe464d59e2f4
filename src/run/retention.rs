//! A workspace's `[retention]` applied (docs/commands.md, "ledger"; docs/decisions.md, "A ledger
//! that stays small"): the runs it does not keep removed from the ledger (`Ledger::prune`), then
//! their log directories under `.mara/logs/`, and those of runs the ledger never held (a
//! preview's) that it would not keep were they runs. What `mara ledger prune` does on demand and
//! every recorded run does once it has ended.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::SystemTime;

use crate::error::{Error, Result};
use crate::ledger::Ledger;
use crate::workspace::Workspace;

/// What a retention removed (or, in a dry run, would).
#[derive(Debug, Default)]
pub struct Pruned {
    /// The runs, oldest first.
    pub runs: Vec<String>,
    /// The log directories removed.
    pub logs: usize,
}

/// Removes from `ledger` what keeping the runs of the last `days` and the newest `runs` leaves
/// out, and then their log directories in `workspace` — unless `dry_run`, which removes nothing
/// and says which runs would go.
pub fn apply(
    ledger: &mut dyn Ledger,
    workspace: &Workspace,
    (days, runs): (Option<u32>, Option<u32>),
    dry_run: bool,
) -> Result<Pruned> {
    let since = days.map(|d| {
        let age = std::time::Duration::from_secs(u64::from(d) * 86_400);
        crate::clock::rfc3339(std::time::SystemTime::now() - age)
    });
    let runs_kept = runs.map(|n| n as usize);
    let gone = ledger.prune(since.as_deref(), runs_kept, dry_run)?;
    if dry_run {
        return Ok(Pruned {
            runs: gone,
            logs: 0,
        });
    }
    let logs = remove_logs(ledger, workspace, &gone, (since.as_deref(), runs_kept))?;
    Ok(Pruned { runs: gone, logs })
}

/// `[retention]` applied once a run's end is recorded, on the run's own connection
/// (docs/decisions.md, "A ledger that stays small"): reading what is past its bounds costs a walk
/// of an index over the runs it keeps, so it is done after every run, and the ledger and
/// `.mara/logs` never hold more than it says for long. What it could not do is a warning; the
/// run's exit is its own.
pub fn after_a_run(ledger: &mut dyn Ledger, workspace: &Workspace) {
    let bounds = workspace.settings.retention;
    if bounds.days.is_none() && bounds.runs.is_none() {
        return;
    }
    match apply(ledger, workspace, (bounds.days, bounds.runs), false) {
        Ok(pruned) => tracing::debug!(
            runs = pruned.runs.len(),
            logs = pruned.logs,
            "the retention applied"
        ),
        Err(error) => tracing::warn!("{error}: the retention was not applied"),
    }
}

/// Removes the log directories of the runs `gone` (`logs/<run>`, and `logs/<run>-<suffix>` of
/// its confirmation's preview), and of the runs the ledger does not hold that the bounds would
/// not keep were they runs: past the newest `runs` runs with a directory, or started before
/// `since` (its id says when). How many were removed.
fn remove_logs(
    ledger: &dyn Ledger,
    workspace: &Workspace,
    gone: &[String],
    (since, runs): (Option<&str>, Option<usize>),
) -> Result<usize> {
    let dir = workspace.state_dir().join("logs");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(0);
    };
    // Newest first: a run's id starts with the second it started, and of runs started in the
    // same second, the one whose directory changed last is taken for the newer.
    let mut dirs: Vec<(String, PathBuf, Option<SystemTime>)> = (entries.flatten())
        .map(|e| {
            let changed = e.metadata().and_then(|m| m.modified()).ok();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.path(),
                changed,
            )
        })
        .collect();
    dirs.sort_by(|a, b| (b.0.get(..15), b.2, &b.0).cmp(&(a.0.get(..15), a.2, &a.0)));
    let gone: BTreeSet<&str> = gone.iter().map(String::as_str).collect();
    let mut newer = BTreeSet::new();
    let mut past = BTreeSet::new();
    for (name, ..) in &dirs {
        let Some((run, started)) = run_of(name) else {
            continue;
        };
        newer.insert(run);
        let old = since.is_some_and(|s| started.as_str() < s);
        if (old || runs.is_some_and(|n| newer.len() > n)) && !gone.contains(run) {
            past.insert(run.to_string());
        }
    }
    // What is past the bounds goes unless the ledger keeps its run (a stack's newest, running).
    let held = ledger.recorded(&past.iter().cloned().collect::<Vec<_>>())?;
    let mut removed = 0;
    for (name, path, _) in &dirs {
        let past = run_of(name).is_some_and(|(run, _)| past.contains(run) && !held.contains(run));
        if past || of_one(name, &gone) {
            std::fs::remove_dir_all(path).map_err(|e| Error::write(path, e))?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Whether log directory `name` is of one of `runs`: named by its id, alone or followed by `-`
/// and a suffix (whatever the id: a fanned-out run's is its opener's).
fn of_one(name: &str, runs: &BTreeSet<&str>) -> bool {
    runs.contains(name) || (name.match_indices('-')).any(|(at, _)| runs.contains(&name[..at]))
}

/// The run a log directory is of, `20261126-050354-64634a` of `20261126-050354-64634a` and
/// `20261126-050354-64634a-preview`, and when it started as RFC 3339 says it
/// (`2026-11-26T05:03:54`); `None` for a directory not named by a run's id of mara's making.
fn run_of(name: &str) -> Option<(&str, String)> {
    let run = name.get(..22)?;
    let rest = &name[22..];
    let b = run.as_bytes();
    let digits = |range: std::ops::Range<usize>| b[range].iter().all(u8::is_ascii_digit);
    let shaped = digits(0..8) && b[8] == b'-' && digits(9..15) && b[15] == b'-';
    if !shaped || !(rest.is_empty() || rest.starts_with('-')) {
        return None;
    }
    let at = |r: std::ops::Range<usize>| &run[r];
    let started = format!(
        "{}-{}-{}T{}:{}:{}",
        at(0..4),
        at(4..6),
        at(6..8),
        at(9..11),
        at(11..13),
        at(13..15)
    );
    Some((run, started))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_directory_is_of_the_run_its_name_begins_with() {
        let (run, started) = run_of("20261126-050354-64634a-preview").unwrap();
        assert_eq!(run, "20261126-050354-64634a");
        assert_eq!(started, "2026-11-26T05:03:54");
        assert!(run_of("20261126-050354-64634a").is_some());
        for other in [
            "notes",
            "20261126-050354-64634axyz",
            "2026112x-050354-64634a",
        ] {
            assert!(run_of(other).is_none(), "{other}");
        }
        let gone = BTreeSet::from(["20261126-050354-64634a", "ci-42"]);
        assert!(of_one("20261126-050354-64634a-preview", &gone));
        assert!(of_one("ci-42", &gone));
        assert!(!of_one("ci-421", &gone));
        assert!(!of_one("20261126-050354-64634b", &gone));
    }
}
