//! Providers (docs/formats.md, "Providers"): what runs, in what order, for one kind of infrastructure.
//!
//! A provider is a TOML file. The built-in ones are compiled in from the repository's `providers/`
//! (`builtin`); a workspace's `providers/` adds more or replaces one by name. `Registry` knows
//! every provider by name and resolves one — parsing its file, then applying `extends` and
//! `remove` (`resolve`) — into a `Provider` whose `projects` are in declaration order.

pub mod builtin;
mod resolve;
pub mod schema;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::engine::EngineKind;
use crate::engine::command::{Commands, env_var_name};
use crate::error::{Error, Location, Problem, Result, did_you_mean};

/// Infrastructure projects build the cluster; every kubernetes project runs after all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    Infrastructure,
    #[default]
    Kubernetes,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Infrastructure => "infrastructure",
            Stage::Kubernetes => "kubernetes",
        }
    }
}

/// The type of a first-run configuration answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ConfigKind {
    #[default]
    String,
    Int,
    Bool,
    List,
    Secret,
}

impl ConfigKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigKind::String => "string",
            ConfigKind::Int => "int",
            ConfigKind::Bool => "bool",
            ConfigKind::List => "list",
            ConfigKind::Secret => "secret",
        }
    }

    /// Whether a TOML value (a default or a choice) fits this kind.
    pub fn check(self, value: &toml::Value) -> std::result::Result<(), String> {
        let ok = match self {
            ConfigKind::String | ConfigKind::Secret => value.is_str(),
            ConfigKind::Int => value.is_integer(),
            ConfigKind::Bool => value.is_bool(),
            ConfigKind::List => value
                .as_array()
                .is_some_and(|items| items.iter().all(toml::Value::is_str)),
        };
        if ok {
            Ok(())
        } else {
            let wanted = match self {
                ConfigKind::String | ConfigKind::Secret => "a string",
                ConfigKind::Int => "an integer",
                ConfigKind::Bool => "true or false",
                ConfigKind::List => "a list of strings",
            };
            Err(format!("must be {wanted}, not {value}"))
        }
    }
}

/// A `[[config]]` entry: asked for on a stack's first run.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigSpec {
    pub key: String,
    pub prompt: String,
    /// May contain `{stack}` and `{kubeconfig}`, replaced when the question is asked.
    pub default: Option<serde_json::Value>,
    /// An environment variable whose value, when set, is the default.
    pub env: Option<String>,
    pub kind: ConfigKind,
    pub choices: Vec<serde_json::Value>,
    /// An empty answer (or `none`) leaves the key unset.
    pub optional: bool,
    /// The first run's default is the answer to this earlier question (an `int`'s).
    pub default_from: Option<String>,
    /// The value is at least, and at most, that of these other `int` keys.
    pub at_least: Option<String>,
    pub at_most: Option<String>,
    pub declared_at: Location,
}

/// A `[[project.secret]]`: stored encrypted in the secrets project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretSpec {
    pub key: String,
    pub prompt: String,
    pub default: Option<String>,
    pub declared_at: Location,
}

impl SecretSpec {
    /// The variable that supplies this secret without a terminal:
    /// `prometheus:adminpass` → `MARA_SECRET_PROMETHEUS_ADMINPASS`.
    pub fn env_var(&self) -> String {
        secret_env_var(&self.key)
    }
}

pub fn secret_env_var(key: &str) -> String {
    env_var_name("MARA_SECRET_", key)
}

/// What runs after a project's successful `up` (or `destroy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hook {
    /// Write the stack output `output` as the stack's kubeconfig; with `merge`, also into the user's.
    /// As an `on_destroy` hook: remove what the `on_success` hook wrote.
    Kubeconfig { output: String, merge: bool },
    /// A shell command, with the stack outputs in its environment.
    Command { run: String },
}

/// A project path named in a provider file (`after`, `before`, `remove`, …), with where it was named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub target: String,
    pub at: Location,
}

/// An input of a project (`[project.inputs]`): the output `output` of the project `from`, as
/// recorded after its last successful `up`, given to the project's engine as `name`
/// (docs/formats.md, "Inputs").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    pub name: String,
    /// The project whose output it is (an implied `after`).
    pub from: Reference,
    pub output: String,
}

/// One project of a provider.
#[derive(Debug, Clone, PartialEq)]
pub struct Project {
    /// Relative to the workspace's `projects_dir`; unique within a provider.
    pub path: String,
    pub description: String,
    pub stage: Stage,
    pub after: Vec<Reference>,
    pub before: Vec<Reference>,
    /// `None`: the workspace's engine.
    pub engine: Option<EngineKind>,
    pub required_config: Vec<String>,
    pub secrets: Vec<SecretSpec>,
    pub on_success: Vec<Hook>,
    pub on_destroy: Vec<Hook>,
    /// The shell commands of a command project.
    pub commands: Commands,
    /// Where its inputs come from, by name.
    pub inputs: Vec<Input>,
    /// `pool`: the concurrency budget it counts against (docs/formats.md, "Budgets and
    /// retries").
    pub pool: Option<Reference>,
    /// `[project.retry]`: which of its failures run its operation again, in place of mara.toml's.
    pub retry: Option<crate::workspace::budgets::Retry>,
    pub declared_at: Location,
}

impl Project {
    pub fn engine_or(&self, workspace_default: EngineKind) -> EngineKind {
        self.engine.unwrap_or(workspace_default)
    }

    /// The last path segment: how the tree names a project inside its group.
    pub fn leaf(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    /// Everything before the last segment: the tree's group (`.` for a top-level project).
    pub fn group(&self) -> &str {
        self.path.rsplit_once('/').map_or(".", |(group, _)| group)
    }
}

/// Where a provider is defined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Builtin,
    File(PathBuf),
}

/// A resolved provider: `extends` applied, projects in declaration order.
#[derive(Debug, Clone)]
pub struct Provider {
    pub name: String,
    pub description: String,
    pub infra_type: Option<String>,
    pub origin: Origin,
    pub is_abstract: bool,
    /// The chain of providers this one extends, nearest first.
    pub extends: Vec<String>,
    pub config: Vec<ConfigSpec>,
    pub projects: Vec<Project>,
    /// `[pools]`: each pool's limit (mara.toml's `[pools]` come over them).
    pub pools: BTreeMap<String, usize>,
}

impl Provider {
    /// The tokens its engines read from the environment on every run: each `kind = "secret"`
    /// question with an `env` variable (`digitalocean:token` from `DIGITALOCEAN_TOKEN`), as
    /// (variable, question).
    pub fn tokens(&self) -> impl Iterator<Item = (&str, &ConfigSpec)> {
        self.config
            .iter()
            .filter_map(|spec| match (spec.kind, &spec.env) {
                (ConfigKind::Secret, Some(variable)) => Some((variable.as_str(), spec)),
                _ => None,
            })
    }
}

/// A provider file, not yet parsed.
#[derive(Debug, Clone)]
pub struct ProviderSource {
    pub name: String,
    pub origin: Origin,
    /// How the file is named in messages: `providers/aws.toml (built in)` or its path.
    pub display_path: PathBuf,
    pub text: String,
}

/// Every provider known in a workspace, by name.
#[derive(Debug, Clone)]
pub struct Registry {
    builtin: BTreeMap<String, ProviderSource>,
    workspace: BTreeMap<String, ProviderSource>,
}

impl Registry {
    /// The built-in providers plus those in `providers_dir` (which need not exist). `display` turns
    /// a file path into the form used in messages.
    pub fn load(providers_dir: &Path, display: impl Fn(&Path) -> PathBuf) -> Result<Registry> {
        let builtin = builtin::sources()
            .map(|source| (source.name.clone(), source))
            .collect();
        let mut workspace = BTreeMap::new();
        let entries = match std::fs::read_dir(providers_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Registry { builtin, workspace });
            }
            Err(e) => return Err(Error::read(providers_dir, e)),
        };
        let mut problems = Vec::new();
        for entry in entries {
            let path = entry.map_err(|e| Error::read(providers_dir, e))?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("toml") {
                continue;
            }
            // A `.toml` that is no file (a directory, a FIFO) is a provider that cannot be read:
            // said, naming it — not passed over, to be reported as no provider of that name.
            let what = match std::fs::metadata(&path) {
                Ok(m) if m.is_file() => None,
                Ok(m) if m.is_dir() => Some("it is a directory".to_string()),
                Ok(_) => Some("it is not a regular file (a FIFO, socket or device)".to_string()),
                Err(e) => Some(format!("it cannot be read ({e})")),
            };
            if let Some(what) = what {
                problems.push(
                    Problem::new(format!("{what}, where a provider's file belongs"))
                        .in_file(display(&path)),
                );
                continue;
            }
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_string();
            if !is_valid_provider_name(&name) {
                problems.push(
                    Problem::new(
                        "a provider's file name is its name: letters, digits, `_`, `.` and `-`",
                    )
                    .in_file(display(&path)),
                );
                continue;
            }
            let text = crate::workspace::read_input(&path).map_err(|e| Error::read(&path, e))?;
            let display_path = display(&path);
            workspace.insert(
                name.clone(),
                ProviderSource {
                    name,
                    origin: Origin::File(path),
                    display_path,
                    text,
                },
            );
        }
        if problems.is_empty() {
            Ok(Registry { builtin, workspace })
        } else {
            Err(Error::Problems(problems))
        }
    }

    /// The built-in providers alone (no workspace).
    pub fn builtin() -> Registry {
        let builtin = builtin::sources()
            .map(|source| (source.name.clone(), source))
            .collect();
        Registry {
            builtin,
            workspace: BTreeMap::new(),
        }
    }

    /// Every provider name, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .builtin
            .keys()
            .chain(self.workspace.keys())
            .map(String::as_str)
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// The source that defines `name`: the workspace's file, else the built-in one.
    pub fn source(&self, name: &str) -> Option<&ProviderSource> {
        self.workspace.get(name).or_else(|| self.builtin.get(name))
    }

    /// Resolves provider `name`, applying `extends` and `remove`.
    pub fn resolve(&self, name: &str) -> Result<Provider> {
        let Some(source) = self.source(name) else {
            return Err(Error::usage(self.unknown(name)));
        };
        resolve::resolve(self, source, &mut Vec::new())
    }

    /// Every provider resolved, sorted by name; abstract ones included.
    pub fn resolve_all(&self) -> Result<Vec<Provider>> {
        let mut providers = Vec::new();
        let mut problems = Vec::new();
        for name in self.names() {
            match self.resolve(name) {
                Ok(provider) => providers.push(provider),
                Err(Error::Problems(found)) => problems.extend(found),
                Err(other) => return Err(other),
            }
        }
        if problems.is_empty() {
            Ok(providers)
        } else {
            Err(Error::Problems(problems))
        }
    }

    fn unknown(&self, name: &str) -> Problem {
        let names = self.names();
        let suggestion = names
            .iter()
            .find(|n| n.eq_ignore_ascii_case(name))
            .copied()
            .or_else(|| did_you_mean(name, names.iter().copied()));
        Problem::new(format!("no provider named `{name}`")).hint(match suggestion {
            Some(s) => format!("did you mean `{s}`? (`mara list-providers` lists them all)"),
            None => format!("the providers are: {}", names.join(", ")),
        })
    }
}

pub fn is_valid_provider_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_variables_are_upper_case_with_underscores() {
        assert_eq!(
            secret_env_var("prometheus:adminpass"),
            "MARA_SECRET_PROMETHEUS_ADMINPASS"
        );
        assert_eq!(
            secret_env_var("sirius:demo-login.pwd"),
            "MARA_SECRET_SIRIUS_DEMO_LOGIN_PWD"
        );
    }
}
