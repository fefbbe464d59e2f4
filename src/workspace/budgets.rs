//! Concurrency budgets and retries as `mara.toml` and a provider write them (docs/formats.md,
//! "Budgets and retries"): `[pools]` (a pool's limit), `[limits]` (an engine's), `[retry]` (which
//! failures are run again, how often, after how long). Each is checked here with its line.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::engine::EngineKind;
use crate::error::{Location, Problem};

/// How many projects of a pool, and of an engine, run at once, within `--parallel`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Budgets {
    pub pools: BTreeMap<String, usize>,
    pub engines: BTreeMap<EngineKind, usize>,
}

/// The most of anything mara runs at once.
const MOST: i64 = u16::MAX as i64;

/// A file being checked: where its values are, and the problems found.
pub struct Checked<'a> {
    pub path: &'a Path,
    pub text: &'a str,
    pub problems: &'a mut Vec<Problem>,
}

impl Checked<'_> {
    fn problem<T>(&mut self, value: &Spanned<T>, subject: String, message: String) {
        let at = Location::at_offset(self.path, self.text, value.span().start);
        self.problems
            .push(Problem::new(message).at(at).subject(subject));
    }

    /// A limit, from 1 to 65,535.
    fn limit(&mut self, value: &Spanned<i64>, subject: String) -> Option<usize> {
        let n = *value.get_ref();
        if (1..=MOST).contains(&n) {
            return Some(n as usize);
        }
        let message = match n < 1 {
            true => format!("must be at least 1, not {n}: a limit of {n} would run nothing"),
            false => format!("must be at most {MOST}, not {n}"),
        };
        self.problem(value, subject, message);
        None
    }

    /// `[pools]`: each pool's limit, by its name.
    pub fn pools(&mut self, raw: BTreeMap<String, Spanned<i64>>) -> BTreeMap<String, usize> {
        let mut pools = BTreeMap::new();
        for (name, limit) in raw {
            let subject = format!("`pools.{name}`");
            if let Some(message) = pool_name_problem(&name) {
                self.problem(&limit, subject.clone(), message);
            }
            if let Some(limit) = self.limit(&limit, subject) {
                pools.insert(name, limit);
            }
        }
        pools
    }

    /// `[limits]`: each engine's limit.
    pub fn limits(
        &mut self,
        raw: BTreeMap<EngineKind, Spanned<i64>>,
    ) -> BTreeMap<EngineKind, usize> {
        (raw.into_iter())
            .filter_map(|(engine, limit)| {
                let subject = format!("`limits.{}`", engine.as_str());
                self.limit(&limit, subject).map(|limit| (engine, limit))
            })
            .collect()
    }

    /// `[retry]`: mara.toml's, or the project `owner`'s (`[project.retry]`).
    pub fn retry(&mut self, raw: Spanned<RawRetry>, owner: Option<&str>) -> Option<Retry> {
        let subject = |key: &str| match owner {
            Some(path) => format!("project `{path}`, `retry.{key}`"),
            None => format!("`retry.{key}`"),
        };
        let at = raw.span().start;
        let RawRetry {
            errors,
            attempts,
            backoff,
        } = raw.into_inner();
        let before = self.problems.len();
        let errors: Vec<Pattern> = (errors.iter())
            .filter_map(|pattern| {
                let refused = match regex::Regex::new(pattern.get_ref()) {
                    Ok(_) if pattern.get_ref().is_empty() => {
                        "an empty pattern finds every failure: name the errors that pass"
                            .to_string()
                    }
                    Ok(regex) => return Some(Pattern(regex)),
                    Err(error) => format!(
                        "`{}` is not a regular expression: {}",
                        pattern.get_ref(),
                        regex_error(&error.to_string())
                    ),
                };
                self.problem(pattern, subject("errors"), refused);
                None
            })
            .collect();
        let attempts = match attempts {
            None => DEFAULT_ATTEMPTS,
            Some(n) if (1..=MOST_ATTEMPTS).contains(n.get_ref()) => *n.get_ref() as u32,
            Some(n) => {
                let message = format!(
                    "must be from 1 to {MOST_ATTEMPTS} (the runs in all, the first included), not {}",
                    n.get_ref()
                );
                self.problem(&n, subject("attempts"), message);
                DEFAULT_ATTEMPTS
            }
        };
        let backoff = match backoff {
            None => DEFAULT_BACKOFF,
            Some(text) => match parse_backoff(text.get_ref()) {
                Ok(backoff) => backoff,
                Err(message) => {
                    self.problem(&text, subject("backoff"), message);
                    DEFAULT_BACKOFF
                }
            },
        };
        if errors.is_empty() && self.problems.len() == before {
            let message = "names no error: `errors = [\"rate exceeded\", \"TLS handshake timeout\"]` (regular expressions) says which failures run again".to_string();
            self.problems.push(
                Problem::new(message)
                    .at(Location::at_offset(self.path, self.text, at))
                    .subject(subject("errors")),
            );
        }
        (self.problems.len() == before).then_some(Retry {
            errors,
            attempts,
            backoff,
        })
    }
}

/// `[retry]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRetry {
    #[serde(default)]
    pub errors: Vec<Spanned<String>>,
    pub attempts: Option<Spanned<i64>>,
    pub backoff: Option<Spanned<String>>,
}

const DEFAULT_ATTEMPTS: u32 = 3;
const MOST_ATTEMPTS: i64 = 10;
const DEFAULT_BACKOFF: Duration = Duration::from_secs(2);

/// Which failures of a project's operation run it again (docs/formats.md, "Budgets and
/// retries").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    /// Matched against the failure's reason and the engine's error diagnostics (a command's
    /// last lines), never the rest of its output.
    pub errors: Vec<Pattern>,
    /// The runs in all, the first included.
    pub attempts: u32,
    /// The wait before the second run, doubled before each one after.
    pub backoff: Duration,
}

/// A regular expression of `[retry]`, compared by its text.
#[derive(Debug, Clone)]
pub struct Pattern(pub regex::Regex);

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl Eq for Pattern {}

/// Why `name` cannot name a pool.
fn pool_name_problem(name: &str) -> Option<String> {
    let fits = |c: char| c.is_ascii_alphanumeric() || "_.-".contains(c);
    match name.is_empty() || !name.chars().all(fits) {
        true => Some(format!(
            "`{name}` is not a pool name: letters, digits, `_`, `.` and `-`"
        )),
        false => None,
    }
}

/// The longest backoff: the wait before each run after it doubles, also at most this.
const MOST_BACKOFF: Duration = Duration::from_secs(3600);

/// A `backoff`: a duration as people write it (`"2s"`, `"0.5s"`, `"1m30s"`,
/// `clock::parse_duration`) of at most an hour.
pub fn parse_backoff(text: &str) -> Result<Duration, String> {
    let duration = crate::clock::parse_duration(text)?;
    match duration <= MOST_BACKOFF {
        true => Ok(duration),
        false => Err(format!(
            "`{text}` is longer than an hour: a backoff is at most \"1h\" (the waits after it double, an hour at most too)"
        )),
    }
}

/// The regex crate's message without its picture of the pattern: its `error:` line.
fn regex_error(text: &str) -> String {
    (text.lines())
        .find_map(|line| line.trim().strip_prefix("error: "))
        .unwrap_or_else(|| text.lines().next().unwrap_or(text))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backoff_is_a_duration_of_at_most_an_hour() {
        assert_eq!(parse_backoff("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_backoff("0.5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_backoff("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_backoff("1h"), Ok(MOST_BACKOFF));
        assert!(parse_backoff("2").unwrap_err().contains("not a duration"));
        assert!(parse_backoff("-1s").unwrap_err().contains("not a duration"));
        for long in ["61m", "1h 0.1s", "2d"] {
            let refused = parse_backoff(long).unwrap_err();
            assert!(
                refused.starts_with(&format!("`{long}` is longer than an hour")),
                "{refused}"
            );
        }
    }
}
