//! `mara.toml`: the workspace's own settings (docs/formats.md, "mara.toml"). Every key is optional; unknown keys are errors.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use super::budgets::{Checked, RawRetry, Retry};
use super::policy_settings::{PolicySettings, RawPolicy};
use crate::engine::EngineKind;
use crate::error::{Error, Location, Problem, Result};

/// The longest `id` mara.toml may give: it is written into every entry mara merges.
const ID_LIMIT: usize = 200;

/// The workspace settings with every default applied. Paths are relative to the workspace root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceSettings {
    /// `id`: the workspace's identity, which every copy of it shares (`workspace::identity`).
    pub id: Option<String>,
    pub projects_dir: String,
    pub config_dir: String,
    pub providers_dir: String,
    pub state_dir: String,
    pub secrets_project: String,
    pub parallel: usize,
    pub provider: Option<String>,
    pub engine: EngineKind,
    pub pulumi: PulumiSettings,
    /// A PostgreSQL server's URL (without a password) for a team's ledger.
    pub ledger: Option<String>,
    /// `[pools]`: how many projects of each pool run at once.
    pub pools: BTreeMap<String, usize>,
    /// `[limits]`: how many projects of each engine run at once.
    pub limits: BTreeMap<EngineKind, usize>,
    /// `[retry]`: which failures run a project's operation again.
    pub retry: Option<Retry>,
    /// `state`: where the engines keep the projects' state.
    pub state: StatePlace,
    /// `[retention]`: how much of the ledger's history is kept (applied after every recorded run,
    /// and by `mara ledger prune`).
    pub retention: Retention,
    /// `[policy]`: the workspace's policies (docs/commands.md, "Policies").
    pub policy: PolicySettings,
}

/// `[retention]` (docs/commands.md, "ledger"): the runs the ledger keeps — those started in the
/// last `days`, and the newest `runs` — besides every running run and each stack's newest. Unset,
/// a key keeps everything it would decide.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    pub days: Option<u32>,
    pub runs: Option<u32>,
}

/// Where the engines keep the state of the projects that name no backend of their own
/// (docs/commands.md, "State in the ledger").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StatePlace {
    /// Where each engine's own settings say (a Pulumi login, a module's local state).
    #[default]
    Engines,
    /// `state = "ledger"`: the ledger's PostgreSQL server, said where mara.toml says it.
    Ledger(Location),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulumiSettings {
    pub binary: String,
    pub secrets_provider: Option<String>,
    /// `update_plans`: an approved preview's Pulumi update plan is what its `up` applies
    /// (`preview --save-plan`, `up --plan`), instead of a fresh preview compared with it
    /// (docs/commands.md, "Saved plans"). Off by default: Pulumi's update plans are a public
    /// preview.
    pub update_plans: bool,
}

impl Default for WorkspaceSettings {
    fn default() -> Self {
        WorkspaceSettings {
            id: None,
            projects_dir: ".".into(),
            config_dir: "config/pulumi".into(),
            providers_dir: "providers".into(),
            state_dir: ".mara".into(),
            secrets_project: "kubernetes/secrets".into(),
            parallel: 4,
            provider: None,
            engine: EngineKind::default(),
            pulumi: PulumiSettings {
                binary: "pulumi".into(),
                secrets_provider: None,
                update_plans: false,
            },
            ledger: None,
            pools: BTreeMap::new(),
            limits: BTreeMap::new(),
            retry: None,
            state: StatePlace::Engines,
            retention: Retention::default(),
            policy: PolicySettings::default(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMaraToml {
    id: Option<Spanned<String>>,
    projects_dir: Option<Spanned<String>>,
    config_dir: Option<Spanned<String>>,
    providers_dir: Option<Spanned<String>>,
    state_dir: Option<Spanned<String>>,
    secrets_project: Option<Spanned<String>>,
    parallel: Option<Spanned<i64>>,
    provider: Option<String>,
    engine: Option<EngineKind>,
    pulumi: Option<RawPulumi>,
    ledger: Option<Spanned<String>>,
    #[serde(default)]
    pools: BTreeMap<String, Spanned<i64>>,
    #[serde(default)]
    limits: BTreeMap<EngineKind, Spanned<i64>>,
    retry: Option<Spanned<RawRetry>>,
    state: Option<Spanned<String>>,
    retention: Option<RawRetention>,
    policy: Option<RawPolicy>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetention {
    days: Option<Spanned<i64>>,
    runs: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPulumi {
    binary: Option<Spanned<String>>,
    secrets_provider: Option<String>,
    update_plans: Option<bool>,
}

/// Parses the text of `mara.toml` (read from `path`), reporting every problem with its line.
pub fn parse(path: &Path, text: &str) -> Result<WorkspaceSettings> {
    let raw: RawMaraToml =
        toml::from_str(text).map_err(|e| Error::config(toml_problem(path, text, &e)))?;
    let RawMaraToml {
        id,
        projects_dir,
        config_dir,
        providers_dir,
        state_dir,
        secrets_project,
        parallel,
        provider,
        engine,
        pulumi,
        ledger,
        pools,
        limits,
        retry,
        state,
        retention,
        policy,
    } = raw;
    let defaults = WorkspaceSettings::default();
    let mut read = Reader {
        path,
        text,
        problems: Vec::new(),
    };
    let id = read.id(id);
    let projects_dir = read.dir("projects_dir", projects_dir, defaults.projects_dir);
    let config_dir = read.dir("config_dir", config_dir, defaults.config_dir);
    let providers_dir = read.dir("providers_dir", providers_dir, defaults.providers_dir);
    let state_dir = read.dir("state_dir", state_dir, defaults.state_dir);
    let secrets_project = read.dir("secrets_project", secrets_project, defaults.secrets_project);
    let parallel = read.parallel(parallel, defaults.parallel);
    let pulumi = read.pulumi(pulumi, defaults.pulumi);
    let ledger = read.ledger(ledger);
    let state = read.state(state);
    let retention = read.retention(retention);
    let mut problems = read.problems;
    let mut checked = Checked {
        path,
        text,
        problems: &mut problems,
    };
    let pools = checked.pools(pools);
    let limits = checked.limits(limits);
    let retry = retry.and_then(|retry| checked.retry(retry, None));
    let policy = checked.policy(policy);
    if !problems.is_empty() {
        problems.sort_by_key(|p| p.location.as_ref().and_then(|l| l.line));
        return Err(Error::Problems(problems));
    }
    Ok(WorkspaceSettings {
        id,
        projects_dir,
        config_dir,
        providers_dir,
        state_dir,
        secrets_project,
        parallel,
        provider,
        engine: engine.unwrap_or(defaults.engine),
        pulumi,
        ledger,
        pools,
        limits,
        retry,
        state,
        retention,
        policy,
    })
}

/// Whether `text` is a URL with a password or token before its host (`scheme://user:secret@`).
fn holds_credentials(text: &str) -> bool {
    let Some((_, rest)) = text.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    authority
        .rsplit_once('@')
        .is_some_and(|(user, _)| user.contains(':'))
}

/// `mara.toml`'s values read one key at a time, the problems each has collected.
struct Reader<'a> {
    path: &'a Path,
    text: &'a str,
    problems: Vec<Problem>,
}

impl Reader<'_> {
    fn at<T>(&self, value: &Spanned<T>) -> Location {
        Location::at_offset(self.path, self.text, value.span().start)
    }

    /// `id`: the name every copy of the workspace marks its kubeconfig entries with — a line of
    /// printable text, at most 200 characters.
    fn id(&mut self, value: Option<Spanned<String>>) -> Option<String> {
        let value = value?;
        let text = value.get_ref();
        let problem = if text.trim().is_empty() {
            Some("must name the workspace (every copy of it shares it), not be empty".to_string())
        } else if let Some(bad) = text.chars().find(|c| c.is_control()) {
            Some(format!(
                "must be printable text on one line, and it holds {}",
                bad.escape_default()
            ))
        } else if holds_credentials(text) {
            // It is written into every teammate's kubeconfig, beside mara's mark.
            Some("holds a URL's credentials (`user:…@`): name the workspace without them (a remote's URL without its token, or any name)".to_string())
        } else if text.chars().count() > ID_LIMIT {
            Some(format!(
                "is {} characters long, and an id has at most {ID_LIMIT}",
                text.chars().count()
            ))
        } else {
            None
        };
        match problem {
            Some(message) => {
                self.problems
                    .push(Problem::new(message).at(self.at(&value)).subject("`id`"));
                None
            }
            None => Some(value.into_inner()),
        }
    }

    /// A directory `key`: relative and inside the workspace, and so must its default be.
    fn dir(&mut self, key: &str, value: Option<Spanned<String>>, default: String) -> String {
        match value {
            None => {
                if let Some(message) = leads_outside(self.path, key, &default) {
                    self.problems.push(
                        Problem::new(format!("(default `{default}`) {message}"))
                            .at(Location::file(self.path))
                            .subject(format!("`{key}`")),
                    );
                }
                default
            }
            Some(value) => {
                let problem = relative_path_problem(value.get_ref())
                    .or_else(|| leads_outside(self.path, key, value.get_ref()));
                if let Some(message) = problem {
                    self.problems.push(
                        Problem::new(message)
                            .at(self.at(&value))
                            .subject(format!("`{key}`")),
                    );
                }
                value.into_inner()
            }
        }
    }

    /// `parallel`: from 1 to 65535.
    fn parallel(&mut self, value: Option<Spanned<i64>>, default: usize) -> usize {
        match value {
            None => default,
            Some(n) if (1..=i64::from(u16::MAX)).contains(n.get_ref()) => *n.get_ref() as usize,
            Some(n) => {
                self.problems.push(
                    Problem::new(format!(
                        "must be a whole number from 1 to {}, not {}",
                        u16::MAX,
                        n.get_ref()
                    ))
                    .at(self.at(&n))
                    .subject("`parallel`"),
                );
                default
            }
        }
    }

    /// `[retention]`: `days` and `runs`, each a whole number from 1.
    fn retention(&mut self, value: Option<RawRetention>) -> Retention {
        let Some(RawRetention { days, runs }) = value else {
            return Retention::default();
        };
        let mut positive = |key: &str, value: Option<Spanned<i64>>| match value {
            None => None,
            Some(n) if (1..=i64::from(u32::MAX)).contains(n.get_ref()) => Some(*n.get_ref() as u32),
            Some(n) => {
                self.problems.push(
                    Problem::new(format!(
                        "must be a whole number from 1, not {}",
                        n.get_ref()
                    ))
                    .at(self.at(&n))
                    .subject(format!("`retention.{key}`")),
                );
                None
            }
        };
        Retention {
            days: positive("days", days),
            runs: positive("runs", runs),
        }
    }

    /// `[pulumi]`: a `binary` that names a program; `update_plans`, true or false.
    fn pulumi(&mut self, value: Option<RawPulumi>, default: PulumiSettings) -> PulumiSettings {
        let Some(RawPulumi {
            binary,
            secrets_provider,
            update_plans,
        }) = value
        else {
            return default;
        };
        PulumiSettings {
            binary: match binary {
                Some(binary) if binary.get_ref().trim().is_empty() => {
                    self.problems.push(
                        Problem::new("must name a program")
                            .at(self.at(&binary))
                            .subject("`pulumi.binary`"),
                    );
                    default.binary
                }
                Some(binary) => binary.into_inner(),
                None => default.binary,
            },
            secrets_provider,
            update_plans: update_plans.unwrap_or(default.update_plans),
        }
    }

    /// `state`: `"ledger"`, or `"engines"` (the default, said explicitly).
    fn state(&mut self, value: Option<Spanned<String>>) -> StatePlace {
        let Some(value) = value else {
            return StatePlace::Engines;
        };
        let at = self.at(&value);
        match value.get_ref().as_str() {
            "ledger" => StatePlace::Ledger(at),
            "engines" => StatePlace::Engines,
            other => {
                self.problems.push(
                    Problem::new(format!(
                        "must be \"ledger\" (the state in the ledger's PostgreSQL server) or \"engines\" (where each engine's settings say), not {other:?}"
                    ))
                    .at(at)
                    .subject("`state`"),
                );
                StatePlace::Engines
            }
        }
    }

    /// `ledger`: a server's URL, without a password (the file is in the repository).
    fn ledger(&mut self, value: Option<Spanned<String>>) -> Option<String> {
        let url = value?;
        let at = self.at(&url);
        let value = url.into_inner();
        let problem = match super::ledger_url::parse(&value) {
            Err(reason) => Some(format!("{reason}; without it the ledger is `.mara/ledger.db`")),
            Ok(config) if config.get_password().is_some() => Some("holds a password, which would be in the repository: give the URL in MARA_LEDGER_URL, or the password in PGPASSWORD".to_string()),
            Ok(_) => None,
        };
        match problem {
            Some(message) => {
                self.problems
                    .push(Problem::new(message).at(at).subject("`ledger`"));
                None
            }
            None => Some(value),
        }
    }
}

/// Paths in `mara.toml` stay inside the workspace: relative, and without `..`.
fn relative_path_problem(value: &str) -> Option<String> {
    let path = Path::new(value);
    if value.is_empty() {
        Some("must not be empty (use \".\" for the workspace root)".into())
    } else if path.is_absolute() {
        Some(format!("`{value}` must be relative to the workspace root"))
    } else if path
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        Some(format!(
            "`{value}` must stay inside the workspace (no `..`)"
        ))
    } else {
        None
    }
}

/// A parser's message in words a person reads: the Rust types it names (`expected i64`) as what
/// they hold.
fn plain_types(message: &str) -> String {
    // `integer `99999999999999999999` as i128`: a number too large for any, said as written.
    let mut text = message.replace("` as i128", "`");
    for (rust, plain) in [
        ("expected i64", "expected a whole number"),
        ("expected u64", "expected a whole number"),
        ("expected u32", "expected a whole number"),
        ("expected u16", "expected a whole number"),
        ("expected usize", "expected a whole number"),
        ("expected i32", "expected a whole number"),
        ("expected f64", "expected a number"),
        ("expected a boolean", "expected true or false"),
        ("expected a sequence", "expected a list"),
        ("expected a map", "expected a table"),
    ] {
        if let Some(at) = text.find(rust)
            && !text[at + rust.len()..].starts_with(|c: char| c.is_alphanumeric())
        {
            text.replace_range(at..at + rust.len(), plain);
        }
    }
    text
}

/// A TOML syntax or schema error as a `Problem` at its line.
pub fn toml_problem(path: &Path, text: &str, error: &toml::de::Error) -> Problem {
    let location = match error.span() {
        Some(span) => Location::at_offset(path, text, span.start),
        None => Location::file(path),
    };
    let message = plain_types(&error.message().trim_end().replace('\n', "; "));
    let problem = Problem::new(message).at(location);
    // A value of the wrong kind: the key it is the value of, from its line.
    let key = error.span().and_then(|span| {
        let start = text[..span.start.min(text.len())]
            .rfind('\n')
            .map_or(0, |at| at + 1);
        let (key, _) = text[start..span.start.min(text.len())].split_once('=')?;
        let key = key.trim();
        (!key.is_empty() && !key.starts_with('#')).then(|| format!("`{key}`"))
    });
    match key {
        Some(key) => problem.subject(key),
        None => problem,
    }
}

/// A directory of the workspace that is a symlink (or lies under one) leading out of it: mara
/// would read and write outside the tree the user pointed it at.
fn leads_outside(settings_file: &Path, key: &str, dir: &str) -> Option<String> {
    // The secrets project is relative to `projects_dir`, which is checked itself.
    if key == "secrets_project" {
        return None;
    }
    let root = settings_file.parent()?.canonicalize().ok()?;
    let real = root.join(dir).canonicalize().ok()?;
    (!real.starts_with(&root)).then(|| {
        format!(
            "leads outside the workspace, to {} (through a symlink): it must stay inside",
            real.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parser_s_rust_types_are_said_in_words() {
        assert_eq!(
            plain_types("invalid type: string \"four\", expected i64"),
            "invalid type: string \"four\", expected a whole number"
        );
        assert_eq!(
            plain_types("invalid type: integer `3`, expected a boolean"),
            "invalid type: integer `3`, expected true or false"
        );
        assert_eq!(plain_types("expected i64x"), "expected i64x");
    }

    #[test]
    fn every_key_is_optional() {
        assert_eq!(
            parse(Path::new("mara.toml"), "").unwrap(),
            WorkspaceSettings::default()
        );
    }

    #[test]
    fn a_directory_that_leads_outside_through_a_symlink_is_refused() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mara.toml");
        std::os::unix::fs::symlink(outside.path(), dir.path().join("state")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join(".mara")).unwrap();
        std::fs::create_dir(dir.path().join("inside")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("inside"), dir.path().join("cfg")).unwrap();
        let text = "state_dir = \"state\"\nconfig_dir = \"cfg\"\n";
        let err = parse(&file, text).unwrap_err();
        let lines: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        assert!(
            lines.iter().any(
                |l| l.contains(":1:") && l.contains("`state_dir`: leads outside the workspace")
            ),
            "{lines:?}"
        );
        assert!(
            !lines.iter().any(|l| l.contains("config_dir")),
            "a symlink inside is fine"
        );
        // Nothing configured, and the default leads out: said too.
        let err = parse(&file, "").unwrap_err().to_string();
        assert!(err.contains("(default `.mara`) leads outside"), "{err}");
    }

    #[test]
    fn reads_every_key() {
        let text = r#"
projects_dir = "pulumi/python"
config_dir = "cfg"
providers_dir = "p"
state_dir = "state"
secrets_project = "k8s/secrets"
parallel = 8
provider = "aws"
engine = "pulumi"
[pulumi]
binary = "/opt/pulumi/bin/pulumi"
secrets_provider = "passphrase"
update_plans = true
"#;
        let settings = parse(Path::new("mara.toml"), text).unwrap();
        assert_eq!(settings.projects_dir, "pulumi/python");
        assert_eq!(settings.parallel, 8);
        assert_eq!(settings.provider.as_deref(), Some("aws"));
        assert_eq!(settings.pulumi.binary, "/opt/pulumi/bin/pulumi");
        assert_eq!(
            settings.pulumi.secrets_provider.as_deref(),
            Some("passphrase")
        );
        assert!(settings.pulumi.update_plans);
        assert!(!WorkspaceSettings::default().pulumi.update_plans, "opt-in");
    }

    #[test]
    fn update_plans_is_true_or_false_said_with_its_line_and_key() {
        let text = "parallel = 2\n[pulumi]\nupdate_plans = \"yes\"\n";
        let err = parse(Path::new("mara.toml"), text).unwrap_err();
        let problem = err.problems()[0].to_string();
        assert!(
            problem.starts_with("mara.toml:3: `update_plans`: "),
            "{problem}"
        );
        assert!(problem.contains("expected true or false"), "{problem}");
        let off = parse(Path::new("mara.toml"), "[pulumi]\nupdate_plans = false\n").unwrap();
        assert!(!off.pulumi.update_plans);
    }

    #[test]
    fn state_is_the_ledger_or_the_engines() {
        let settings = parse(Path::new("mara.toml"), "parallel = 2\nstate = \"ledger\"\n").unwrap();
        let StatePlace::Ledger(at) = settings.state else {
            panic!("state = ledger: {:?}", settings.state);
        };
        assert_eq!(at.line, Some(2));
        let default = parse(Path::new("mara.toml"), "").unwrap();
        assert_eq!(default.state, StatePlace::Engines);
        let said = parse(Path::new("mara.toml"), "state = \"engines\"\n").unwrap();
        assert_eq!(said.state, StatePlace::Engines);
        let err = parse(Path::new("mara.toml"), "\nstate = \"postgres\"\n").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("mara.toml:2"), "{text}");
        assert!(text.contains("`state`"), "{text}");
        assert!(text.contains("not \"postgres\""), "{text}");
    }

    #[test]
    fn a_ledger_is_a_postgres_url_without_a_password() {
        let settings = parse(
            Path::new("mara.toml"),
            "ledger = \"postgres://mara@db.internal/ledger\"\n",
        )
        .unwrap();
        assert_eq!(
            settings.ledger.as_deref(),
            Some("postgres://mara@db.internal/ledger")
        );
        let err = parse(
            Path::new("mara.toml"),
            "parallel = 2\nledger = \"postgres://mara:hunter2@db/ledger\"\n",
        )
        .unwrap_err();
        let problem = &err.problems()[0];
        assert_eq!(problem.location.as_ref().unwrap().line, Some(2));
        assert!(problem.message.contains("MARA_LEDGER_URL"), "{problem}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let err = parse(Path::new("mara.toml"), "ledger = \"mysql://db\"\n").unwrap_err();
        assert!(err.problems()[0].message.contains("PostgreSQL URL"));
    }

    #[test]
    fn an_id_is_one_printable_line_of_at_most_200_characters() {
        let settings = parse(Path::new("mara.toml"), "id = \"shop platform\"\n").unwrap();
        assert_eq!(settings.id.as_deref(), Some("shop platform"));
        let long = "x".repeat(201);
        for (text, said) in [
            ("id = \"\"\n".to_string(), "must name the workspace"),
            ("id = \"  \"\n".to_string(), "must name the workspace"),
            (
                "id = \"a\\nb\"\n".to_string(),
                "printable text on one line, and it holds \\n",
            ),
            ("id = \"a\\u0007\"\n".to_string(), "printable text"),
            (
                "id = \"https://gitlab-ci-token:glpat-x@gitlab.com/g/p.git\"\n".to_string(),
                "holds a URL's credentials",
            ),
            (
                format!("id = \"{long}\"\n"),
                "201 characters long, and an id has at most 200",
            ),
        ] {
            let text = format!("parallel = 2\n{text}");
            let err = parse(Path::new("mara.toml"), &text).unwrap_err();
            let problem = err.problems()[0].to_string();
            assert!(problem.starts_with("mara.toml:2: `id`: "), "{problem}");
            assert!(problem.contains(said), "{problem}");
        }
        let err = parse(Path::new("mara.toml"), "id = 42\n").unwrap_err();
        assert!(err.to_string().contains("`id`"), "{err}");
        assert!(
            parse(
                Path::new("mara.toml"),
                &format!("id = \"{}\"\n", "é".repeat(200))
            )
            .is_ok()
        );
    }

    #[test]
    fn unknown_key_names_line_and_key() {
        let err = parse(Path::new("mara.toml"), "parallel = 2\nparalel = 3\n").unwrap_err();
        let problem = &err.problems()[0];
        assert_eq!(problem.location.as_ref().unwrap().line, Some(2));
        assert!(problem.message.contains("paralel"), "{problem}");
    }

    #[test]
    fn parallel_must_be_positive_and_dirs_relative() {
        let err = parse(
            Path::new("mara.toml"),
            "parallel = 0\nstate_dir = \"/tmp/x\"\n",
        )
        .unwrap_err();
        let problems = err.problems();
        assert_eq!(problems.len(), 2);
        assert!(
            problems[0]
                .to_string()
                .starts_with("mara.toml:1: `parallel`"),
            "{}",
            problems[0]
        );
        assert!(
            problems[1]
                .to_string()
                .starts_with("mara.toml:2: `state_dir`"),
            "{}",
            problems[1]
        );
    }
}
