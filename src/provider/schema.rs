//! The provider file format (docs/formats.md, "Providers") as written, and its translation into checked values.
//!
//! Unknown keys are rejected by serde with their line. Checks that serde cannot express (a hook's
//! fields for its kind, a default of the wrong type, a path escaping the workspace) are collected
//! here, all of them, before the file is used.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use super::{ConfigKind, ConfigSpec, Hook, Input, Project, Reference, SecretSpec, Stage};
use crate::engine::EngineKind;
use crate::engine::command::Commands;
use crate::error::{LineIndex, Location, Problem};
use crate::workspace::budgets::{Checked, RawRetry};
use crate::workspace::mara_toml::toml_problem;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProvider {
    pub description: Option<String>,
    pub infra_type: Option<String>,
    pub extends: Option<Spanned<String>>,
    #[serde(default)]
    pub remove: Vec<Spanned<String>>,
    #[serde(default, rename = "abstract")]
    pub is_abstract: bool,
    #[serde(default)]
    pub config: Vec<RawConfig>,
    #[serde(default, rename = "project")]
    pub projects: Vec<RawProject>,
    #[serde(default)]
    pub pools: BTreeMap<String, Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub key: Spanned<String>,
    pub prompt: String,
    pub default: Option<Spanned<toml::Value>>,
    pub env: Option<String>,
    #[serde(default)]
    pub kind: ConfigKind,
    #[serde(default)]
    pub choices: Vec<toml::Value>,
    #[serde(default)]
    pub optional: bool,
    pub default_from: Option<Spanned<String>>,
    pub at_least: Option<Spanned<String>>,
    pub at_most: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProject {
    pub path: Spanned<String>,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub stage: Stage,
    #[serde(default)]
    pub after: Vec<Spanned<String>>,
    #[serde(default)]
    pub before: Vec<Spanned<String>>,
    pub insert_after: Option<Spanned<String>>,
    pub engine: Option<EngineKind>,
    #[serde(default)]
    pub required_config: Vec<Spanned<String>>,
    #[serde(default)]
    pub secret: Vec<RawSecret>,
    #[serde(default)]
    pub on_success: Vec<RawHook>,
    #[serde(default)]
    pub on_destroy: Vec<RawHook>,
    pub up: Option<String>,
    pub preview: Option<String>,
    pub refresh: Option<String>,
    pub destroy: Option<String>,
    pub drift: Option<String>,
    /// `[project.inputs]`: `name = "project:output"`.
    #[serde(default)]
    pub inputs: BTreeMap<Spanned<String>, Spanned<toml::Value>>,
    pub pool: Option<Spanned<String>>,
    pub retry: Option<Spanned<RawRetry>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSecret {
    pub key: Spanned<String>,
    pub prompt: String,
    pub default: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HookKind {
    Kubeconfig,
    Command,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHook {
    pub kind: Spanned<HookKind>,
    pub output: Option<String>,
    pub merge: Option<bool>,
    pub run: Option<String>,
}

/// A provider file, parsed and checked on its own (before `extends` is applied).
#[derive(Debug)]
pub struct ParsedProvider {
    pub description: Option<String>,
    pub infra_type: Option<String>,
    pub extends: Option<(String, Location)>,
    pub remove: Vec<Reference>,
    pub is_abstract: bool,
    pub config: Vec<ConfigSpec>,
    pub projects: Vec<ParsedProject>,
    pub pools: BTreeMap<String, usize>,
}

/// A project entry and the ordering hint that only matters when it is added by `extends`.
#[derive(Debug)]
pub struct ParsedProject {
    pub project: Project,
    pub insert_after: Option<Reference>,
}

/// Parses provider file `file` (for messages) with content `text`, reporting every problem.
pub fn parse(file: &Path, text: &str) -> Result<ParsedProvider, Vec<Problem>> {
    tracing::debug!(target: "mara::reads", provider = %file.display(), "parse");
    let raw: RawProvider = toml::from_str(text).map_err(|e| vec![toml_problem(file, text, &e)])?;
    let mut checker = Checker {
        file,
        text,
        lines: LineIndex::new(text),
        problems: Vec::new(),
    };
    let parsed = checker.provider(raw);
    let mut problems = checker.problems;
    problems.sort_by_key(|p| p.location.as_ref().and_then(|l| l.line));
    if problems.is_empty() {
        Ok(parsed)
    } else {
        Err(problems)
    }
}

struct Checker<'a> {
    file: &'a Path,
    text: &'a str,
    lines: LineIndex,
    problems: Vec<Problem>,
}

impl Checker<'_> {
    fn at<T>(&self, spanned: &Spanned<T>) -> Location {
        self.lines
            .location(self.file, self.text, spanned.span().start)
    }

    fn reference(&self, spanned: Spanned<String>) -> Reference {
        let at = self.at(&spanned);
        Reference {
            target: spanned.into_inner(),
            at,
        }
    }

    fn problem(&mut self, at: Location, subject: impl Into<String>, message: impl Into<String>) {
        self.problems
            .push(Problem::new(message).at(at).subject(subject));
    }

    fn provider(&mut self, raw: RawProvider) -> ParsedProvider {
        let RawProvider {
            description,
            infra_type,
            extends,
            remove,
            is_abstract,
            config,
            projects,
            pools,
        } = raw;
        let extends = extends.map(|name| {
            let at = self.at(&name);
            (name.into_inner(), at)
        });
        let remove = remove.into_iter().map(|r| self.reference(r)).collect();
        let config = config
            .into_iter()
            .map(|c| self.config(c))
            .collect::<Vec<_>>();
        self.config_declared_twice(&config);
        self.config_references(&config);
        let projects = projects.into_iter().map(|p| self.project(p)).collect();
        if description.as_deref().is_some_and(|d| d.trim().is_empty()) {
            self.problem(
                Location::file(self.file),
                "`description`",
                "must not be empty",
            );
        }
        let pools = Checked {
            path: self.file,
            text: self.text,
            problems: &mut self.problems,
        }
        .pools(pools);
        ParsedProvider {
            description,
            infra_type,
            extends,
            remove,
            is_abstract,
            config,
            projects,
            pools,
        }
    }

    /// Each `[[config]]` key declared once.
    fn config_declared_twice(&mut self, config: &[ConfigSpec]) {
        for (i, entry) in config.iter().enumerate() {
            if let Some(first) = config[..i].iter().find(|c| c.key == entry.key) {
                let line = first.declared_at.line.unwrap_or_default();
                self.problem(
                    entry.declared_at.clone(),
                    format!("config `{}`", entry.key),
                    format!("declared twice (first on line {line})"),
                );
            }
        }
    }

    /// `default_from` names an earlier `[[config]]` of kind "int", `at_least` and `at_most`
    /// another one.
    fn config_references(&mut self, config: &[ConfigSpec]) {
        for (i, entry) in config.iter().enumerate() {
            let named = [
                ("default_from", &entry.default_from, true),
                ("at_least", &entry.at_least, false),
                ("at_most", &entry.at_most, false),
            ];
            for (field, other, earlier) in named {
                let Some(other) = other else { continue };
                let within = match earlier {
                    true => &config[..i],
                    false => config,
                };
                let found = within
                    .iter()
                    .find(|c| c.key == *other && c.key != entry.key);
                if !found.is_some_and(|c| c.kind == ConfigKind::Int) {
                    let which = match earlier {
                        true => "an earlier `[[config]]` of kind \"int\" in this file",
                        false => "another `[[config]]` of kind \"int\" in this file",
                    };
                    self.problem(
                        entry.declared_at.clone(),
                        format!("config `{}`", entry.key),
                        format!("`{field}` names `{other}`, which is not {which}"),
                    );
                }
            }
        }
    }

    fn config(&mut self, raw: RawConfig) -> ConfigSpec {
        let RawConfig {
            key,
            prompt,
            default,
            env,
            kind,
            choices,
            optional,
            default_from,
            at_least,
            at_most,
        } = raw;
        let declared_at = self.at(&key);
        let key = key.into_inner();
        let subject = format!("config `{key}`");
        if let Some(message) = key_problem(&key) {
            self.problem(declared_at.clone(), &subject, message);
        }
        let default = default.map(|value| {
            let at = self.at(&value);
            let value = value.into_inner();
            if let Err(message) = kind.check(&value) {
                self.problem(at, &subject, format!("`default` {message}"));
            }
            toml_to_json(value)
        });
        self.choices(&subject, &declared_at, kind, &choices, default.as_ref());
        if env
            .as_deref()
            .is_some_and(|e| !crate::workspace::envfile::is_valid_key(e))
        {
            self.problem(
                declared_at.clone(),
                &subject,
                "`env` must be an environment variable name",
            );
        }
        let mut other = |field: &str, value: Option<Spanned<String>>| {
            let value = value?;
            let at = self.at(&value);
            if kind != ConfigKind::Int {
                self.problem(at, &subject, format!("`{field}` is only for kind \"int\""));
                return None;
            }
            Some((value.into_inner(), at))
        };
        let default_from = other("default_from", default_from);
        let at_least = other("at_least", at_least);
        let at_most = other("at_most", at_most);
        ConfigSpec {
            key,
            prompt,
            default,
            env,
            kind,
            choices: choices.into_iter().map(toml_to_json).collect(),
            optional,
            default_from: default_from.map(|(k, _)| k),
            at_least: at_least.map(|(k, _)| k),
            at_most: at_most.map(|(k, _)| k),
            declared_at,
        }
    }

    /// `choices`: only for a string or an int, each of its kind, the default among them.
    fn choices(
        &mut self,
        subject: &str,
        at: &Location,
        kind: ConfigKind,
        choices: &[toml::Value],
        default: Option<&serde_json::Value>,
    ) {
        if !choices.is_empty() && !matches!(kind, ConfigKind::String | ConfigKind::Int) {
            self.problem(
                at.clone(),
                subject,
                "`choices` is only for kind \"string\" or \"int\"",
            );
        }
        for choice in choices {
            if let Err(message) = kind.check(choice) {
                self.problem(at.clone(), subject, format!("a choice {message}"));
            }
        }
        if let (Some(default), false) = (default, choices.is_empty()) {
            let choices: Vec<_> = choices.iter().cloned().map(toml_to_json).collect();
            if !choices.contains(default) {
                self.problem(
                    at.clone(),
                    subject,
                    format!("`default` {default} is not one of its `choices`"),
                );
            }
        }
    }

    fn project(&mut self, raw: RawProject) -> ParsedProject {
        let RawProject {
            path,
            description,
            stage,
            after,
            before,
            insert_after,
            engine,
            required_config,
            secret,
            on_success,
            on_destroy,
            up,
            preview,
            refresh,
            destroy,
            drift,
            inputs,
            pool,
            retry,
        } = raw;
        let declared_at = self.at(&path);
        let path = path.into_inner();
        let subject = format!("project `{path}`");
        if let Some(message) = project_path_problem(&path) {
            self.problem(declared_at.clone(), &subject, message);
        }
        let required_config = self.required_config(&subject, required_config);
        let secrets = self.secrets(&subject, secret);
        let on_success = on_success
            .into_iter()
            .filter_map(|h| self.hook(&subject, h))
            .collect();
        let on_destroy = on_destroy
            .into_iter()
            .filter_map(|h| self.hook(&subject, h))
            .collect();
        let steps = Commands {
            up,
            preview,
            refresh,
            destroy,
            drift,
        };
        let engine = self.engine(&subject, &declared_at, engine, &steps);
        let inputs = self.inputs(&subject, inputs);
        let pool = pool.map(|pool| self.reference(pool));
        let retry = retry.and_then(|retry| {
            Checked {
                path: self.file,
                text: self.text,
                problems: &mut self.problems,
            }
            .retry(retry, Some(&path))
        });
        ParsedProject {
            project: Project {
                path,
                description,
                stage,
                after: after.into_iter().map(|r| self.reference(r)).collect(),
                before: before.into_iter().map(|r| self.reference(r)).collect(),
                engine,
                required_config,
                secrets,
                on_success,
                on_destroy,
                commands: steps,
                inputs,
                pool,
                retry,
                declared_at,
            },
            insert_after: insert_after.map(|r| self.reference(r)),
        }
    }

    /// `required_config`: each a valid key.
    fn required_config(&mut self, subject: &str, raw: Vec<Spanned<String>>) -> Vec<String> {
        raw.into_iter()
            .map(|key| {
                if let Some(message) = key_problem(key.get_ref()) {
                    let at = self.at(&key);
                    self.problem(
                        at,
                        subject,
                        format!("required_config `{}`: {message}", key.get_ref()),
                    );
                }
                key.into_inner()
            })
            .collect()
    }

    /// `[[project.secret]]`: each `namespace:name`, its default not empty.
    fn secrets(&mut self, subject: &str, raw: Vec<RawSecret>) -> Vec<SecretSpec> {
        raw.into_iter()
            .map(
                |RawSecret {
                     key,
                     prompt,
                     default,
                 }| {
                    let at = self.at(&key);
                    if !is_namespaced(key.get_ref()) {
                        self.problem(
                            at.clone(),
                            subject,
                            format!("secret `{}` is not `namespace:name`", key.get_ref()),
                        );
                    }
                    if default.as_deref() == Some("") {
                        self.problem(
                            at.clone(),
                            subject,
                            format!("secret `{}` has an empty default", key.get_ref()),
                        );
                    }
                    SecretSpec {
                        key: key.into_inner(),
                        prompt,
                        default,
                        declared_at: at,
                    }
                },
            )
            .collect()
    }

    /// The project's engine (a project with commands and no engine is a command project), and
    /// its commands: only a command project has them, and it has `up` and `destroy`.
    fn engine(
        &mut self,
        subject: &str,
        at: &Location,
        engine: Option<EngineKind>,
        steps: &Commands,
    ) -> Option<EngineKind> {
        // A project with commands and no engine is a command project.
        let engine = match engine {
            None if steps.any() => Some(EngineKind::running_commands()),
            engine => engine,
        };
        match engine {
            Some(engine) if engine.runs_commands() => {
                for (name, step) in [("up", &steps.up), ("destroy", &steps.destroy)] {
                    if step.as_deref().is_none_or(|s| s.trim().is_empty()) {
                        self.problem(
                            at.clone(),
                            subject,
                            format!(
                                "engine \"{engine}\" needs {} `{name}` command",
                                if name == "up" { "an" } else { "a" }
                            ),
                        );
                    }
                }
            }
            _ if steps.any() => self.problem(
                at.clone(),
                subject,
                "`up`, `preview`, `refresh`, `destroy` and `drift` commands are only for engine = \"command\"",
            ),
            _ => {}
        }
        engine
    }

    /// `[project.inputs]`: each name one Terraform would take as a variable's, each source
    /// `project:output`, and no two names one environment variable (`MARA_INPUT_<NAME>`).
    fn inputs(
        &mut self,
        subject: &str,
        raw: BTreeMap<Spanned<String>, Spanned<toml::Value>>,
    ) -> Vec<Input> {
        let mut inputs: Vec<Input> = Vec::new();
        for (name, source) in raw {
            let at = self.at(&name);
            let name = name.into_inner();
            if let Some(message) = input_name_problem(&name) {
                self.problem(at.clone(), subject, format!("input `{name}` {message}"));
            }
            let from_at = self.at(&source);
            let Some(text) = source.get_ref().as_str() else {
                let given = match source.get_ref() {
                    toml::Value::Table(_) => "a table".to_string(),
                    other => format!("{} {other}", other.type_str()),
                };
                self.problem(
                    from_at,
                    subject,
                    format!("input `{name}` is {given}: it is a string, \"project:output\""),
                );
                continue;
            };
            let Some((project, output)) = text
                .rsplit_once(':')
                .filter(|(p, o)| !p.is_empty() && is_output_name(o))
            else {
                self.problem(
                    from_at,
                    subject,
                    format!(
                        "input `{name}` = \"{}\" is not `project:output` (e.g. \"network:subnet_id\")",
                        text.escape_debug()
                    ),
                );
                continue;
            };
            let variable = crate::engine::command::input_var(&name);
            if let Some(other) = inputs
                .iter()
                .find(|i| crate::engine::command::input_var(&i.name) == variable)
            {
                self.problem(
                    at.clone(),
                    subject,
                    format!(
                        "inputs `{}` and `{name}` would both be ${variable}",
                        other.name
                    ),
                );
            }
            inputs.push(Input {
                name,
                from: Reference {
                    target: project.to_string(),
                    at: from_at,
                },
                output: output.to_string(),
            });
        }
        inputs
    }

    fn hook(&mut self, subject: &str, raw: RawHook) -> Option<Hook> {
        let RawHook {
            kind,
            output,
            merge,
            run,
        } = raw;
        let at = self.at(&kind);
        match (*kind.get_ref(), run) {
            (HookKind::Kubeconfig, None) => Some(Hook::Kubeconfig {
                output: output.unwrap_or_else(|| "kubeconfig".into()),
                merge: merge.unwrap_or(false),
            }),
            (HookKind::Kubeconfig, Some(_)) => {
                self.problem(
                    at,
                    subject,
                    "a \"kubeconfig\" hook takes `output` and `merge`, not `run`",
                );
                None
            }
            (HookKind::Command, Some(run))
                if output.is_none() && merge.is_none() && !run.trim().is_empty() =>
            {
                Some(Hook::Command { run })
            }
            (HookKind::Command, _) => {
                self.problem(
                    at,
                    subject,
                    "a \"command\" hook takes one non-empty `run` (and no `output` or `merge`)",
                );
                None
            }
        }
    }
}

/// `namespace:name`, both parts non-empty.
/// What is wrong with a configuration key named in a provider: `namespace:name`, optionally a
/// path into its value (`aip:aip_config.required_env.DATABASE_URL`, docs/formats.md).
fn key_problem(key: &str) -> Option<String> {
    match crate::workspace::config_path::ConfigPath::parse(key) {
        Err(message) => Some(format!("not a configuration path: {message}")),
        Ok(path) if !is_namespaced(&path.key) => Some(if path.is_nested() {
            format!(
                "the path's key `{}` is not `namespace:name` (e.g. `aip:config.env.URL`)",
                path.key
            )
        } else {
            "keys are `namespace:name`, e.g. `aws:region`".to_string()
        }),
        Ok(_) => None,
    }
}

pub fn is_namespaced(key: &str) -> bool {
    matches!(key.split_once(':'), Some((ns, name)) if !ns.is_empty() && !name.is_empty())
}

/// Whether an output's name is one: not empty, no white space or control character around or
/// in it.
fn is_output_name(name: &str) -> bool {
    !name.is_empty() && !name.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// What is wrong with an input's name: what both a Terraform variable and an environment
/// variable take (an ASCII letter or `_`, then letters, digits, `_` and `-`), less the names
/// Terraform reserves.
fn input_name_problem(name: &str) -> Option<String> {
    const RESERVED: &[&str] = &[
        "_",
        "source",
        "version",
        "providers",
        "count",
        "for_each",
        "lifecycle",
        "depends_on",
        "locals",
    ];
    let mut chars = name.chars();
    let starts = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !starts || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-')) {
        Some(
            "is not an input's name: an ASCII letter or `_`, then letters, digits, `_` and `-` (what a Terraform variable and an environment variable both take)"
                .to_string(),
        )
    } else if RESERVED.contains(&name) {
        Some("is a name Terraform reserves: it cannot be a variable's".to_string())
    } else {
        None
    }
}

/// Project paths are relative, `/`-separated, and stay inside the projects directory.
fn project_path_problem(path: &str) -> Option<&'static str> {
    if path.is_empty() {
        Some("`path` must not be empty")
    } else if path.starts_with('/') || path.contains('\\') {
        Some("`path` must be relative and use `/`")
    } else if path
        .split('/')
        .any(|segment| segment.is_empty() || segment == "." || segment == "..")
    {
        Some("`path` must not contain empty, `.` or `..` segments")
    } else {
        None
    }
}

pub fn toml_to_json(value: toml::Value) -> serde_json::Value {
    match value {
        toml::Value::String(s) => serde_json::Value::String(s),
        toml::Value::Integer(i) => serde_json::Value::from(i),
        toml::Value::Float(f) => serde_json::Value::from(f),
        toml::Value::Boolean(b) => serde_json::Value::Bool(b),
        toml::Value::Datetime(d) => serde_json::Value::String(d.to_string()),
        toml::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(toml_to_json).collect())
        }
        toml::Value::Table(table) => serde_json::Value::Object(
            table
                .into_iter()
                .map(|(k, v)| (k, toml_to_json(v)))
                .collect(),
        ),
    }
}
