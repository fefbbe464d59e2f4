//! Policies as code (docs/commands.md, "Policies"): the workspace's Rego files, compiled once per
//! run by `regorus` (OPA's language, in the binary: no OPA server), and evaluated with conftest's
//! conventions — `deny`, `violation` (they block) and `warn` (it is shown) rules, and their
//! `deny_*`, `violation_*` and `warn_*` forms — in two kinds of package: per project, over each
//! project's own plan (Terraform's `show -json`, Pulumi's preview digest) with mara's context;
//! per deployment, over the whole run (`run::gate` builds both inputs).

mod rules;
pub mod test;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Location, Problem, Result};
pub use crate::workspace::policy_settings::PolicySettings as Settings;

/// Which input a package is evaluated over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Each project's plan, with mara's context (`[policy] packages`, `main` by default).
    Project,
    /// The run as a whole (`[policy] deployment_packages`, `deployment` by default).
    Deployment,
}

/// Whether a message blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// A `deny` or `violation` rule's: nothing is applied.
    Deny,
    /// A `warn` rule's: shown, and the run goes on.
    Warn,
}

/// One message of a decision.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Message {
    pub level: Level,
    /// The rule that said it, as `data.<package>.<rule>`; a Pulumi policy pack's as
    /// `pulumi:<pack>/<policy>`.
    pub rule: String,
    /// Its text: the rule's string, or its object's `msg`.
    pub text: String,
    /// The project it is about: the one whose plan it read (a per-project package's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// What else a `violation` object said besides its `msg` (conftest's `details`), as JSON
    /// text (written as JSON).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "as_json",
        deserialize_with = "from_json"
    )]
    pub details: Option<String>,
}

impl Message {
    /// A violation of a Pulumi policy pack's policy, in `project`: its rule
    /// `pulumi:<pack>/<policy>`, its details the resource and the pack's version.
    pub fn of_pack(violation: &crate::engine::PolicyViolation, project: &str) -> Message {
        let details = serde_json::json!({
            "resource": violation.resource,
            "pack_version": violation.version,
        });
        Message {
            level: if violation.mandatory {
                Level::Deny
            } else {
                Level::Warn
            },
            rule: format!("{PACK_RULE}{}/{}", violation.pack, violation.policy),
            text: violation.message.clone(),
            project: Some(project.to_string()),
            details: Some(details.to_string()),
        }
    }

    /// Whether a Pulumi policy pack said it (`of_pack`), not the workspace's Rego.
    pub fn is_pack(&self) -> bool {
        self.rule.starts_with(PACK_RULE)
    }
}

/// How the rule of a Pulumi policy pack's message starts.
const PACK_RULE: &str = "pulumi:";

/// JSON read back as its text (what `as_json` wrote).
fn from_json<'de, D: serde::Deserializer<'de>>(
    from: D,
) -> std::result::Result<Option<String>, D::Error> {
    let value: Option<serde_json::Value> = Option::deserialize(from)?;
    Ok(value.map(|v| v.to_string()))
}

/// JSON text written as the JSON it is.
fn as_json<S: serde::Serializer>(
    text: &Option<String>,
    to: S,
) -> std::result::Result<S::Ok, S::Error> {
    let value: Option<serde_json::Value> =
        text.as_deref().and_then(|t| serde_json::from_str(t).ok());
    value.serialize(to)
}

/// What the policies decided over one input, or over a run: every message, denials first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub messages: Vec<Message>,
}

impl Decision {
    /// Whether any message blocks.
    pub fn denies(&self) -> bool {
        self.messages.iter().any(|m| m.level == Level::Deny)
    }

    pub fn denied(&self) -> impl Iterator<Item = &Message> {
        self.messages.iter().filter(|m| m.level == Level::Deny)
    }

    pub fn warned(&self) -> impl Iterator<Item = &Message> {
        self.messages.iter().filter(|m| m.level == Level::Warn)
    }

    /// Adds `other`'s messages, keeping the order: denials first, then by rule and text.
    pub fn extend(&mut self, other: Decision) {
        self.messages.extend(other.messages);
        self.messages.sort();
        self.messages.dedup();
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }
}

/// The workspace's policies, compiled: what a run evaluates, every input with the same engine.
pub struct Policies {
    engine: regorus::Engine,
    /// The files read, from the workspace root.
    pub files: Vec<PathBuf>,
    /// What they are, as one digest: every file's path and text, and which packages decide
    /// (saved plans record the policies that judged them).
    pub digest: String,
    /// The rules each kind of package evaluates, as `data.<package>.<rule>`, with their level.
    rules: BTreeMap<Kind, Vec<(String, Level)>>,
    /// Every rule of every package, by package: what `mara policy test` looks through.
    all_rules: BTreeMap<String, Vec<String>>,
}

/// A policy that failed as it was evaluated (a built-in's error, a conflict of values): the
/// rule, where the failure is, and what it is.
#[derive(Debug)]
pub struct Failed {
    pub rule: String,
    pub at: Option<Location>,
    pub message: String,
}

impl Failed {
    fn of(rule: &str, said: &str) -> Failed {
        let (at, message) = rules::located(said);
        Failed {
            rule: rule.to_string(),
            at,
            message,
        }
    }

    /// As a problem of the configuration: at its line.
    pub fn problem(&self) -> Problem {
        let problem = Problem::new(format!("{} failed: {}", self.rule, self.message));
        match &self.at {
            Some(at) => problem.at(at.clone()),
            None => problem,
        }
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.at {
            Some(at) => write!(f, "{at}: policy {} failed: {}", self.rule, self.message),
            None => write!(f, "policy {} failed: {}", self.rule, self.message),
        }
    }
}

impl Policies {
    /// The policies of the workspace at `root`: `None` when it has none (no `policy/`, and
    /// mara.toml names no other place). A path mara.toml names that is not there, a file that
    /// cannot be read, and a policy that does not compile are errors naming the file and line.
    pub fn load(root: &Path, settings: &Settings) -> Result<Option<Policies>> {
        let files = files_of(root, settings)?;
        if files.is_empty() {
            return Ok(None);
        }
        let started = std::time::Instant::now();
        let mut engine = regorus::Engine::new();
        let mut problems = Vec::new();
        let mut digested = format!(
            "{:?} {:?}\n",
            settings.packages, settings.deployment_packages
        );
        for file in &files {
            let full = root.join(file);
            let text = crate::files::read(&full)
                .map_err(|e| Error::read(&full, e))
                .and_then(|bytes| {
                    String::from_utf8(bytes).map_err(|_| {
                        Error::config(
                            Problem::new("is not UTF-8 text").at(Location::file(file.clone())),
                        )
                    })
                })?;
            digested.push_str(&format!("{}\n{}\n", file.display(), text.len()));
            digested.push_str(&text);
            if let Err(error) = engine.add_policy(file.display().to_string(), text) {
                problems.push(rules::compile_problem(file, &format!("{error:#}")));
            }
        }
        if !problems.is_empty() {
            return Err(Error::Problems(problems));
        }
        let all_rules = rules::of(&engine).map_err(|message| {
            Error::config(Problem::new(message).at(Location::file(files[0].clone())))
        })?;
        undeclared(root, settings, &all_rules)?;
        let rules = BTreeMap::from([
            (
                Kind::Project,
                rules::deciding(&all_rules, &settings.packages),
            ),
            (
                Kind::Deployment,
                rules::deciding(&all_rules, &settings.deployment_packages),
            ),
        ]);
        let mut policies = Policies {
            engine,
            digest: crate::engine::sha256(&digested),
            files,
            rules,
            all_rules,
        };
        policies.preflight()?;
        tracing::debug!(
            files = policies.files.len(),
            micros = started.elapsed().as_micros() as u64,
            "policies compiled"
        );
        Ok(Some(policies))
    }

    /// Each deciding rule evaluated once over an empty input, before anything runs: what OPA
    /// refuses as it compiles and regorus finds only as it evaluates (a function that does not
    /// exist, two values of one rule) is a configuration error at its line (exit 3), not a run
    /// that fails at its gate.
    fn preflight(&mut self) -> Result<()> {
        let empty = serde_json::json!({});
        let mut problems = Vec::new();
        for kind in [Kind::Project, Kind::Deployment] {
            if let Err(failed) = self.evaluate(kind, &empty, None) {
                problems.push(failed.problem());
            }
        }
        match problems.is_empty() {
            true => Ok(()),
            false => Err(Error::Problems(problems)),
        }
    }

    /// Whether any package of `kind` has a rule that decides.
    pub fn has(&self, kind: Kind) -> bool {
        self.rules.get(&kind).is_some_and(|r| !r.is_empty())
    }

    /// What the packages of `kind` decide over `input`; `project` names the project a
    /// per-project input is of.
    pub fn evaluate(
        &mut self,
        kind: Kind,
        input: &serde_json::Value,
        project: Option<&str>,
    ) -> std::result::Result<Decision, Failed> {
        let rules = self.rules.get(&kind).cloned().unwrap_or_default();
        if rules.is_empty() {
            return Ok(Decision::default());
        }
        let value = rules::value_of(input).map_err(|message| Failed {
            rule: "input".into(),
            at: None,
            message,
        })?;
        self.engine.set_input(value);
        let mut decision = Decision::default();
        for (rule, level) in rules {
            let value = (self.engine.eval_rule(rule.clone()))
                .map_err(|e| Failed::of(&rule, &format!("{e:#}")))?;
            for (text, details) in rules::messages(&value) {
                decision.messages.push(Message {
                    level,
                    rule: rule.clone(),
                    text,
                    project: project.map(str::to_string),
                    details,
                });
            }
        }
        decision.messages.sort();
        decision.messages.dedup();
        Ok(decision)
    }
}

/// The `.rego` files the settings name, from `root`, in a stable order; none when the default
/// `policy/` is not there. Test files (`*_test.rego`) count: their rules are `test_` rules,
/// which a run never evaluates, and `mara policy test` needs them with the rest.
fn files_of(root: &Path, settings: &Settings) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut problems = Vec::new();
    for (path, named_at) in &settings.paths {
        let full = root.join(path);
        match std::fs::metadata(&full) {
            Ok(meta) if meta.is_dir() => {
                rego_files_in(&full, root, &mut files).map_err(|e| Error::read(&full, e))?
            }
            Ok(_) => files.push(path.clone()),
            Err(_) if named_at.is_none() => {}
            Err(e) => problems.push(
                Problem::new(format!("{} is not there ({e})", path.display()))
                    .subject("`policy.paths`")
                    .at(named_at.clone().expect("named in mara.toml")),
            ),
        }
    }
    if !problems.is_empty() {
        return Err(Error::Problems(problems));
    }
    files.sort();
    files.dedup();
    Ok(files)
}

/// Every `.rego` file under `dir` (its subdirectories too, as conftest's `--all-namespaces`
/// reads them), as paths from `root`.
fn rego_files_in(dir: &Path, root: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        // A Pulumi policy pack (`PulumiPolicy.yaml`) is Pulumi's to run (`pulumi_packs`), in
        // its own Rego dialect: not one of the workspace's policies.
        if path.is_dir() && !path.join("PulumiPolicy.yaml").is_file() {
            rego_files_in(&path, root, files)?;
        } else if path.extension().is_some_and(|e| e == "rego") {
            files.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
        }
    }
    Ok(())
}

/// A package `[policy]` names that no policy declares — a typo would turn the gate off in
/// silence — is an error; the defaults (`main`, `deployment`) may be absent.
fn undeclared(
    root: &Path,
    settings: &Settings,
    all_rules: &BTreeMap<String, Vec<String>>,
) -> Result<()> {
    let defaults = Settings::default();
    let named = [
        ("packages", &settings.packages, &defaults.packages),
        (
            "deployment_packages",
            &settings.deployment_packages,
            &defaults.deployment_packages,
        ),
    ];
    let declared: Vec<&str> = all_rules.keys().map(String::as_str).collect();
    let mut problems = Vec::new();
    for (key, packages, default) in named {
        for package in packages.iter().filter(|p| !default.contains(p)) {
            if !all_rules.contains_key(package) {
                problems.push(
                    Problem::new(format!(
                        "no policy declares package `{package}` (they declare: {})",
                        declared.join(", ")
                    ))
                    .subject(format!("`policy.{key}`"))
                    .at(Location::file(root.join("mara.toml"))),
                );
            }
        }
    }
    match problems.is_empty() {
        true => Ok(()),
        false => Err(Error::Problems(problems)),
    }
}
