//! What a run could not write to its team's ledger, kept on the machine until it can
//! (docs/commands.md, "A server that comes back"): a server out of reach for longer than a run
//! can wait costs the record nothing. The run's writes go in order; those the server did not take
//! are appended here, one JSON line each, and the next command of this workspace that reaches the
//! server — any run, `status`, `history` — makes them first, in the same order, and forgets them.
//!
//! One file per server (`<state_dir>/journal/<key>.jsonl`, the key a hash of the URL without its
//! password), private (0600), taken under an exclusive lock while it is replayed, so that two
//! commands never make the same write twice. What it holds is what the server would: log lines
//! and reasons redacted, no secret.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

pub use super::writes::Entry;
use super::{Ledger, Place};
use crate::error::{Error, Result};
use crate::workspace::Workspace;

/// The journal of one server's unsent writes, on this machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Journal {
    file: PathBuf,
}

impl Journal {
    /// The journal of the workspace's ledger, when it is a server's (a file is written where it
    /// is, or not at all).
    pub fn of(workspace: &Workspace, place: &Place) -> Option<Journal> {
        let Place::Server(_) = place else {
            return None;
        };
        let key = Sha256::digest(place.to_string().as_bytes());
        let key: String = key[..8].iter().map(|b| format!("{b:02x}")).collect();
        Some(Journal {
            file: workspace
                .state_dir()
                .join("journal")
                .join(format!("{key}.jsonl")),
        })
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Whether writes are kept in it, waiting.
    pub fn holds_writes(&self) -> bool {
        std::fs::metadata(&self.file).is_ok_and(|m| m.is_file() && m.len() > 0)
    }

    /// Keeps `entries`, after those kept already.
    pub fn keep(&self, entries: &[Entry]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let text: String = entries
            .iter()
            .map(|e| {
                format!(
                    "{}\n",
                    serde_json::to_string(e).expect("an entry serializes")
                )
            })
            .collect();
        let write = || -> std::io::Result<()> {
            if let Some(dir) = self.file.parent() {
                std::fs::create_dir_all(dir)?;
            }
            // Something else there (a FIFO would take the writes and keep them nowhere).
            if std::fs::symlink_metadata(&self.file).is_ok_and(|m| !m.is_file()) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "it is not a regular file, where mara keeps what a server did not take",
                ));
            }
            let mut file = crate::files::Flock::exclusive(open(&self.file)?)?;
            file.write_all(text.as_bytes())?;
            file.sync_data()
        };
        write().map_err(|e| Error::write(&self.file, e))
    }

    /// Makes the kept writes on `ledger`, in order, until one fails; forgets those made. The
    /// number made, and the number left. The file is emptied, never removed: a `keep` waiting
    /// for its lock holds it open, and appends to it after.
    pub fn replay(&self, ledger: &mut dyn Ledger) -> Result<(usize, usize)> {
        // `is_file` follows links: a FIFO or a directory there is not opened (it would wait).
        if !self.file.is_file() {
            return Ok((0, 0));
        }
        let mut file = open(&self.file)
            .and_then(crate::files::Flock::exclusive)
            .map_err(|e| Error::read(&self.file, e))?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut *file, &mut bytes)
            .map_err(|e| Error::read(&self.file, e))?;
        let lines: Vec<&[u8]> = (bytes.split(|&b| b == b'\n'))
            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
            .collect();
        if lines.is_empty() {
            return Ok((0, 0));
        }
        let mut made = 0;
        for line in &lines {
            // A line that does not read (cut short by a crash mid-write, a byte gone bad) is
            // dropped, said: the rest goes on.
            let entry = std::str::from_utf8(line)
                .ok()
                .and_then(|line| serde_json::from_str::<Entry>(line).ok());
            let Some(entry) = entry else {
                tracing::warn!(
                    "{}: a line that does not read is dropped",
                    self.file.display()
                );
                made += 1;
                continue;
            };
            match entry.apply(ledger) {
                Ok(()) => made += 1,
                // The server will never take it (its run was forgotten meanwhile, a row it
                // refers to is gone): dropped, said, and the rest goes on.
                Err(error) if refused_for_good(&error) => {
                    tracing::warn!(
                        "{}: a write the ledger refuses is dropped: {error}",
                        self.file.display()
                    );
                    made += 1;
                }
                // Anything else (the server gone again, a lock that timed out) is kept.
                Err(error) => {
                    tracing::info!("{}: kept for later: {error}", self.file.display());
                    break;
                }
            }
        }
        let left = &lines[made..];
        // The rest, in place of what was there (still under the lock).
        let mut rest = Vec::new();
        for line in left {
            rest.extend_from_slice(line);
            rest.push(b'\n');
        }
        file.set_len(0).map_err(|e| Error::write(&self.file, e))?;
        std::io::Seek::rewind(&mut *file).map_err(|e| Error::write(&self.file, e))?;
        file.write_all(&rest)
            .and_then(|()| file.sync_data())
            .map_err(|e| Error::write(&self.file, e))?;
        Ok((made, left.len()))
    }
}

/// Whether the ledger refused a write for good: a constraint it breaks (SQLSTATE class 23 on a
/// server, SQLite's constraint failures), which no retry changes.
fn refused_for_good(error: &Error) -> bool {
    let said = error.to_string();
    said.contains("violates") && said.contains("constraint") || said.contains("constraint failed")
}

/// The journal's file, opened to read and append, made private.
fn open(file: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .open(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Operation;
    use crate::ledger::{ProjectRecord, RunStart};
    use crate::status::ProjectStatus;
    use crate::status::RunStatus;

    fn finished(path: &str) -> Entry {
        Entry::ProjectFinished {
            run_id: "r1".into(),
            project: ProjectRecord {
                path: path.into(),
                status: ProjectStatus::Succeeded,
                started: Some("2026-01-01T00:00:00Z".into()),
                finished: Some("2026-01-01T00:00:01Z".into()),
                exit_code: Some(0),
                changes: None,
                reason: None,
                log: None,
                fingerprint: Some("f".into()),
            },
            of: None,
            outputs: None,
            preview: None,
        }
    }

    #[test]
    fn kept_writes_are_made_in_order_once_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal {
            file: dir.path().join("journal/k.jsonl"),
        };
        let entries = [
            Entry::ProjectStarted {
                run_id: "r1".into(),
                path: "vpc".into(),
                started: "2026-01-01T00:00:00Z".into(),
                fingerprint: Some("f".into()),
            },
            finished("vpc"),
            Entry::Logs {
                run_id: "r1".into(),
                lines: vec![("vpc".into(), "done".into())],
            },
            Entry::Finish {
                run_id: "r1".into(),
                status: RunStatus::Succeeded,
                finished: "2026-01-01T00:00:02Z".into(),
                policy: None,
            },
        ];
        journal.keep(&entries[..2]).unwrap();
        journal.keep(&entries[2..]).unwrap();
        let text = std::fs::read_to_string(journal.file()).unwrap();
        assert_eq!(text.lines().count(), 4);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(journal.file()).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);

        let place = Place::File(dir.path().join("ledger.db"));
        let mut ledger = crate::ledger::open(&place).unwrap();
        let start = RunStart {
            run_id: "r1".into(),
            operation: Operation::Up,
            provider: "aws".into(),
            stack: "dev".into(),
            command: "mara up".into(),
            started: "2026-01-01T00:00:00Z".into(),
            projects: Vec::new(),
            graph: Vec::new(),
        };
        ledger.begin(&start, true).unwrap();
        assert_eq!(journal.replay(ledger.as_mut()).unwrap(), (4, 0));
        assert!(!journal.holds_writes(), "forgotten once made");
        let run = ledger.run("r1").unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Succeeded);
        assert_eq!(run.projects[0].status, ProjectStatus::Succeeded);
        assert_eq!(
            journal.replay(ledger.as_mut()).unwrap(),
            (0, 0),
            "made once"
        );
    }

    #[test]
    fn writes_kept_while_others_are_made_are_not_lost() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal {
            file: dir.path().join("journal/k.jsonl"),
        };
        let place = Place::File(dir.path().join("ledger.db"));
        let mut ledger = crate::ledger::open(&place).unwrap();
        let start = RunStart {
            run_id: "r1".into(),
            operation: Operation::Up,
            provider: "aws".into(),
            stack: "dev".into(),
            command: "mara up".into(),
            started: "2026-01-01T00:00:00Z".into(),
            projects: Vec::new(),
            graph: Vec::new(),
        };
        ledger.begin(&start, true).unwrap();
        let keeping = {
            let journal = journal.clone();
            std::thread::spawn(move || {
                for i in 0..300 {
                    let entry = Entry::ProjectStarted {
                        run_id: "r1".into(),
                        path: format!("p{i}"),
                        started: "2026-01-01T00:00:00Z".into(),
                        fingerprint: None,
                    };
                    journal.keep(&[entry]).unwrap();
                }
            })
        };
        while !keeping.is_finished() {
            journal.replay(ledger.as_mut()).unwrap();
        }
        keeping.join().unwrap();
        journal.replay(ledger.as_mut()).unwrap();
        assert_eq!(ledger.run("r1").unwrap().unwrap().projects.len(), 300);
    }
}
