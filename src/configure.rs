//! What a stack still needs before `up` (docs/commands.md, "First run" and "Secrets"), and getting
//! it: the provider's `[[config]]` answers on a stack's first run, and every secret of a selected
//! project that the secrets project does not store yet.
//!
//! On a terminal the answers are asked for through a `Prompter` (typed and checked as entered);
//! without one nothing is asked: a secret comes from `MARA_SECRET_<KEY>`, and what cannot be
//! supplied that way is refused by `deployment::checks` before anything runs. Nothing here prints,
//! and secret values never reach a command line, a file of mara's or its output.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::{Result, plural};
use crate::graph::Plan;
use crate::provider::{ConfigKind, ConfigSpec, Provider, SecretSpec, secret_env_var};
use crate::workspace::config_path::ConfigPath;
use crate::workspace::stack::StackName;
use crate::workspace::stack_config::{INFRA_TYPE_KEY, StackConfigFile};

/// Someone who can be asked.
pub trait Prompter {
    /// Tells them something (on standard error, between the questions).
    fn say(&mut self, text: &str);

    /// A line of text; `check` refuses an answer with its reason, and the question is asked
    /// again. An empty answer takes `default` when there is one.
    fn text(
        &mut self,
        prompt: &str,
        default: Option<&str>,
        check: &dyn Fn(&str) -> std::result::Result<(), String>,
    ) -> Result<String>;

    /// One of `items`, by its index.
    fn choose(&mut self, prompt: &str, items: &[String], default: usize) -> Result<usize>;

    /// Yes or no.
    fn confirm(&mut self, prompt: &str, default: bool) -> Result<bool>;

    /// A secret: hidden as it is typed, typed twice. May be empty (the caller decides).
    fn secret(&mut self, prompt: &str) -> Result<String>;
}

/// A secret value: never printed, never formatted by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    /// The value, for the one place that must pass it on (an engine's standard input).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[secret]")
    }
}

/// Answers to the first-run questions.
#[derive(Debug, Default)]
pub struct FirstRun {
    /// Plain values, written to the shared configuration with `kubernetes:infra_type`.
    pub values: Map<String, Value>,
    /// `kind = "secret"` answers, stored encrypted in the shared configuration.
    pub secrets: Vec<(String, Secret)>,
}

/// Everything gathered for a stack before `up`.
#[derive(Debug, Default)]
pub struct Answers {
    pub first_run: FirstRun,
    /// The secrets of selected projects, to store in the secrets project.
    pub secrets: Vec<(String, Secret)>,
}

/// What this `up` has to get before it runs.
#[derive(Debug, Default)]
pub struct Needs<'p> {
    /// The first-run questions (empty when the stack has its configuration).
    pub config: Vec<&'p ConfigSpec>,
    /// Secrets of selected projects that the secrets project does not store yet.
    pub secrets: Vec<&'p SecretSpec>,
    /// A first run's: the stack with its configuration whose name is spelt like this one's
    /// (`workspace::stack::near_stack`), said before the questions.
    pub near_stack: Option<String>,
}

impl Needs<'_> {
    pub fn is_empty(&self) -> bool {
        self.config.is_empty() && self.secrets.is_empty()
    }
}

/// Works out what `up` needs: the provider's questions when the stack has no configuration, and
/// the secrets of the selected projects that `stored` (the secrets project's own stack file)
/// does not hold.
pub fn needs<'p>(
    provider: &'p Provider,
    plan: &Plan<'p>,
    secrets_project: &str,
    config: &StackConfigFile,
    stored: &StackConfigFile,
) -> Needs<'p> {
    let config_needed: Vec<&ConfigSpec> = if config.is_first_run() {
        provider.config.iter().collect()
    } else {
        Vec::new()
    };
    let secrets = secrets_of(plan, secrets_project)
        .into_iter()
        .filter(|s| {
            let path = ConfigPath::parse(&s.key).unwrap_or_else(|_| ConfigPath::literal(&s.key));
            !stored.config().is_some_and(|c| {
                !matches!(c.find(&path), crate::workspace::config_path::Found::Missing)
            })
        })
        .collect();
    Needs {
        config: config_needed,
        secrets,
        near_stack: None,
    }
}

/// Every secret the selected projects declare, once each, in execution order — and, when the
/// selection holds the secrets project, every secret of the whole graph: that project's program
/// reads them all from its own configuration, so it is deployed with them stored (a run on one
/// machine stores them once; a CI job, on a runner of its own, stores them there).
pub fn secrets_of<'p>(plan: &Plan<'p>, secrets_project: &str) -> Vec<&'p SecretSpec> {
    let graph = plan.graph;
    let whole = graph
        .lookup(secrets_project)
        .is_some_and(|i| plan.contains(i));
    let order: Vec<usize> = match whole {
        true => graph.order().to_vec(),
        false => plan.order().to_vec(),
    };
    let mut secrets: Vec<&SecretSpec> = Vec::new();
    for &i in &order {
        for secret in &graph.project(i).secrets {
            if !secrets.iter().any(|s| s.key == secret.key) {
                secrets.push(secret);
            }
        }
    }
    secrets
}

/// The example configuration a repository may keep beside its stacks' (the original MARA's
/// `config/pulumi/Pulumi.stackname.yaml.example`, `EXAMPLE`): a first run's defaults come from
/// its `config:` map before the provider's, as the original took them (for a question the
/// provider gives a default, not an optional one: `default_of`) — a number as it is written
/// (`1.20`, not the original's `1.2`). Empty when there is none, or it does not read.
pub fn example_defaults(config_dir: &std::path::Path) -> BTreeMap<String, Value> {
    let file = config_dir.join(EXAMPLE);
    let Ok(text) = crate::workspace::read_input(&file) else {
        return BTreeMap::new();
    };
    let Ok(nodes) = crate::workspace::yaml_nodes::nodes(&text) else {
        tracing::debug!(file = %file.display(), "the example configuration does not read");
        return BTreeMap::new();
    };
    use crate::workspace::yaml_nodes::Seg;
    (nodes.into_iter())
        .filter_map(|node| match node.path.as_slice() {
            [Seg::Key(top), Seg::Key(key)] if top == "config" => {
                let raw = node.raw.trim();
                let value = match serde_json::from_str::<Value>(raw) {
                    Ok(value @ (Value::String(_) | Value::Bool(_))) => value,
                    Ok(Value::Number(n)) if n.is_i64() => Value::Number(n),
                    // A version (`1.20`) and a plain or single-quoted word, as written.
                    _ => Value::String(raw.trim_matches('\'').to_string()),
                };
                Some((key.clone(), value))
            }
            _ => None,
        })
        .collect()
}

/// The example configuration's file name, in the configuration's directory.
pub const EXAMPLE: &str = "Pulumi.stackname.yaml.example";

/// The default of a question: its `env` variable when set, else the repository's `example`
/// configuration's value (`example_defaults`), else the provider's default with `{stack}` and
/// `{kubeconfig}` filled in.
pub fn default_of(
    spec: &ConfigSpec,
    env: &BTreeMap<String, String>,
    stack: &StackName,
    kubeconfig: &str,
    example: &BTreeMap<String, Value>,
) -> Option<Value> {
    if let Some(value) = spec
        .env
        .as_ref()
        .and_then(|e| env.get(e))
        .filter(|v| !v.is_empty())
    {
        return Some(match spec.kind {
            ConfigKind::List => {
                Value::Array(split_list(value).into_iter().map(Value::String).collect())
            }
            _ => Value::String(value.clone()),
        });
    }
    // Where the provider offers a default for a question that must be answered — where the
    // original took the example's — not for an optional one or one without a default (a
    // placeholder such as `mara.example.com` is no answer).
    if !spec.optional
        && spec.default.is_some()
        && let Some(value) = example.get(&spec.key)
    {
        return Some(value.clone());
    }
    spec.default.clone().map(|value| match value {
        Value::String(text) => Value::String(
            text.replace("{stack}", stack.as_str())
                .replace("{kubeconfig}", kubeconfig),
        ),
        other => other,
    })
}

/// A `kind = "secret"` question whose `env` variable is set needs no answer: the projects read
/// the variable (DIGITALOCEAN_TOKEN, LINODE_TOKEN).
pub fn supplied_by_env(spec: &ConfigSpec, env: &BTreeMap<String, String>) -> bool {
    spec.kind == ConfigKind::Secret
        && spec
            .env
            .as_ref()
            .is_some_and(|e| env.get(e).is_some_and(|v| !v.is_empty()))
}

/// Without a terminal: what the environment supplies (`MARA_SECRET_*`, a token's own variable).
/// Anything it does not supply was refused before the run by `deployment::checks`.
pub fn from_environment(needs: &Needs<'_>, env: &BTreeMap<String, String>) -> Answers {
    let mut answers = Answers::default();
    for spec in &needs.config {
        if spec.kind == ConfigKind::Secret
            && !supplied_by_env(spec, env)
            && let Some(value) = supplied_secret(&spec.key, env)
        {
            answers.first_run.secrets.push((spec.key.clone(), value));
        }
    }
    for spec in &needs.secrets {
        if let Some(value) = supplied_secret(&spec.key, env) {
            answers.secrets.push((spec.key.clone(), value));
        }
    }
    answers
}

/// On a terminal: asks every question, then every secret.
pub fn ask(
    needs: &Needs<'_>,
    env: &BTreeMap<String, String>,
    (stack, kubeconfig): (&StackName, &str),
    example: &BTreeMap<String, Value>,
    provider: &Provider,
    prompter: &mut dyn Prompter,
) -> Result<Answers> {
    let mut answers = Answers::default();
    let first_run = &mut answers.first_run;
    if !needs.config.is_empty() {
        let near = match &needs.near_stack {
            Some(near) => format!(
                " Did you mean stack `{near}`, which has its configuration? Ctrl-C stops here."
            ),
            None => String::new(),
        };
        prompter.say(&format!(
            "Stack {stack} has no configuration yet: provider {} asks {} questions.{near}",
            provider.name,
            needs.config.len()
        ));
    }
    for spec in &needs.config {
        if supplied_by_env(spec, env) {
            continue;
        }
        // An answer given just before may be the default (the desired size, the minimum).
        let default = match spec
            .default_from
            .as_ref()
            .and_then(|k| first_run.values.get(k))
        {
            Some(answered) => Some(answered.clone()),
            None => default_of(spec, env, stack, kubeconfig, example),
        };
        ask_one(spec, default, env, prompter, first_run)?;
    }
    if !needs.secrets.is_empty() {
        let n = needs.secrets.len();
        let supplied = (needs.secrets.iter())
            .filter(|s| supplied_secret(&s.key, env).is_some())
            .count();
        let from = match (supplied, n) {
            (0, _) => String::new(),
            (1, 1) => " (given by its MARA_SECRET_* variable)".to_string(),
            (s, n) if s == n => " (given by their MARA_SECRET_* variables)".to_string(),
            (s, _) => format!(" ({s} given by their MARA_SECRET_* variables)"),
        };
        prompter.say(&format!(
            "{n} {} not stored yet{from}; {} kept encrypted in the secrets project.",
            plural(n, "secret is", "secrets are"),
            plural(n, "it is", "they are"),
        ));
    }
    for spec in &needs.secrets {
        let value = match supplied_secret(&spec.key, env) {
            Some(value) => value,
            None => ask_secret(prompter, &spec.prompt, spec.default.as_deref())?,
        };
        answers.secrets.push((spec.key.clone(), value));
    }
    Ok(answers)
}

/// One question of a first run, answered into `first_run` (a secret kept apart).
fn ask_one(
    spec: &ConfigSpec,
    default: Option<Value>,
    env: &BTreeMap<String, String>,
    prompter: &mut dyn Prompter,
    first_run: &mut FirstRun,
) -> Result<()> {
    match spec.kind {
        ConfigKind::Secret => {
            let value = match supplied_secret(&spec.key, env) {
                Some(value) => value,
                None => ask_secret(prompter, &spec.prompt, None)?,
            };
            first_run.secrets.push((spec.key.clone(), value));
        }
        ConfigKind::Bool => {
            let default = default.as_ref().and_then(Value::as_bool).unwrap_or(false);
            let answer = prompter.confirm(&spec.prompt, default)?;
            first_run
                .values
                .insert(spec.key.clone(), Value::Bool(answer));
        }
        _ if !spec.choices.is_empty() => {
            let items: Vec<String> = spec.choices.iter().map(display).collect();
            let start = default
                .as_ref()
                .and_then(|d| spec.choices.iter().position(|c| c == d))
                .unwrap_or(0);
            let index = prompter.choose(&spec.prompt, &items, start)?;
            first_run
                .values
                .insert(spec.key.clone(), spec.choices[index].clone());
        }
        kind => {
            let optional = spec.optional;
            let default = default.as_ref().map(display);
            let earlier = &first_run.values;
            let text = prompter.text(&spec.prompt, default.as_deref(), &|answer| {
                check_answer(kind, answer, optional)?;
                match typed(kind, answer) {
                    Some(value) if !is_none(optional, answer) => {
                        check_bounds(spec, &value, earlier)
                    }
                    _ => Ok(()),
                }
            })?;
            if let Some(value) = typed(kind, &text).filter(|_| !is_none(optional, &text)) {
                first_run.values.insert(spec.key.clone(), value);
            }
        }
    }
    Ok(())
}

/// A secret given by its `MARA_SECRET_<KEY>` variable is never asked for, on a terminal either.
pub fn supplied_secret(key: &str, env: &BTreeMap<String, String>) -> Option<Secret> {
    env.get(&secret_env_var(key))
        .filter(|v| !v.is_empty())
        .map(|v| Secret::new(v.clone()))
}

/// Hidden input, typed twice; an empty answer takes the default, and is refused without one.
pub fn ask_secret(
    prompter: &mut dyn Prompter,
    prompt: &str,
    default: Option<&str>,
) -> Result<Secret> {
    let prompt = match default {
        Some(_) => format!("{prompt} (it has a default: Enter keeps it)"),
        None => format!("{prompt} (no default: it must be typed)"),
    };
    loop {
        let value = prompter.secret(&prompt)?;
        match (value.is_empty(), default) {
            (false, _) => return Ok(Secret::new(value)),
            (true, Some(default)) => return Ok(Secret::new(default.to_string())),
            (true, None) => prompter.say("A secret cannot be empty; again."),
        }
    }
}

/// Whether an answer to an optional question says "none" (the original runner's word for it).
fn is_none(optional: bool, answer: &str) -> bool {
    optional && answer.trim().eq_ignore_ascii_case("none")
}

/// Whether a typed answer fits its kind (an empty one, or `none`, only when the question is
/// optional: the key is then left out).
pub fn check_answer(
    kind: ConfigKind,
    answer: &str,
    optional: bool,
) -> std::result::Result<(), String> {
    let answer = answer.trim();
    if answer.is_empty() || is_none(optional, answer) {
        return if optional {
            Ok(())
        } else {
            Err("an answer is needed".into())
        };
    }
    match kind {
        ConfigKind::Int => answer
            .parse::<i64>()
            .map(|_| ())
            .map_err(|_| format!("`{answer}` is not a whole number")),
        ConfigKind::List if split_list(answer).is_empty() => {
            Err("give at least one item, separated by commas".into())
        }
        _ => Ok(()),
    }
}

/// The value an answer stands for; `None` for an empty answer (the key stays unset).
pub fn typed(kind: ConfigKind, answer: &str) -> Option<Value> {
    let answer = answer.trim();
    if answer.is_empty() {
        return None;
    }
    Some(match kind {
        ConfigKind::Int => answer
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or_else(|_| Value::String(answer.into())),
        ConfigKind::Bool => Value::Bool(matches!(
            answer.to_lowercase().as_str(),
            "y" | "yes" | "t" | "true" | "1"
        )),
        ConfigKind::List => {
            Value::Array(split_list(answer).into_iter().map(Value::String).collect())
        }
        ConfigKind::String | ConfigKind::Secret => Value::String(answer.to_string()),
    })
}

/// The value `config set` stores for `raw` at `path`: typed by the `[[config]]` entry that
/// declares the path, its kind and choices checked; without one, as Pulumi's own `config set`
/// stores it (a top-level value as a string; below it, with `--path`, `true`/`false` and whole
/// numbers typed).
pub fn value_to_set(
    spec: Option<&ConfigSpec>,
    path: &ConfigPath,
    raw: &str,
) -> std::result::Result<Value, String> {
    let Some(spec) = spec else {
        if !path.is_nested() {
            return Ok(Value::String(raw.to_string()));
        }
        // As Pulumi's `config set --path` types it: a number with a leading zero (`0644`,
        // `007`) stays text.
        let leading_zero = raw.len() > 1 && raw.starts_with('0');
        return Ok(match raw {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ if leading_zero => Value::String(raw.to_string()),
            _ => raw
                .parse::<i64>()
                .map(Value::from)
                .unwrap_or_else(|_| Value::String(raw.to_string())),
        });
    };
    let shown = crate::error::quoted(raw);
    let value = match spec.kind {
        ConfigKind::Int => raw.trim().parse::<i64>().map(Value::from).map_err(|_| {
            let digits = raw.trim().trim_start_matches('-');
            match !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                true => format!("{shown} is too large for a whole number"),
                false => format!("must be a whole number, not {shown}"),
            }
        })?,
        ConfigKind::Bool => Value::Bool(
            parse_bool(raw).ok_or_else(|| format!("must be true or false, not {shown}"))?,
        ),
        ConfigKind::List => {
            let items = split_list(raw);
            if items.is_empty() {
                return Err("must be a list: give its items separated by commas".into());
            }
            Value::Array(items.into_iter().map(Value::String).collect())
        }
        ConfigKind::String | ConfigKind::Secret => Value::String(raw.to_string()),
    };
    check_choice(spec, &value)?;
    Ok(value)
}

/// A value set where the file has one keeps the type the file gives it (docs/decisions.md,
/// "Edits that change only what was asked (issue 45)"): given as text that is exactly that
/// type's writing of it — `2` where the file has a number, `true` where it has a boolean, any
/// text where it has a string — it is set as that type, so that `config set app:replicas 4`,
/// then `2`, leaves the file as it was. Otherwise, and where the file has no such value, it is
/// `typed` as the provider or Pulumi's `config set` types it.
pub fn as_the_file_types(current: Option<&Value>, typed: Value, raw: &str) -> Value {
    let as_given = match &typed {
        Value::String(text) => text == raw,
        Value::Number(_) | Value::Bool(_) => {
            let written = typed.to_string();
            written == raw
        }
        _ => false,
    };
    if !as_given {
        return typed;
    }
    let number = || {
        let number = match raw.parse::<i64>() {
            Ok(whole) => serde_json::Number::from(whole),
            Err(_) => serde_json::Number::from_f64(raw.parse::<f64>().ok()?)?,
        };
        // Only a number written back as given (`1.5`, not `1.50` or `1e3`).
        (number.to_string() == raw).then_some(Value::Number(number))
    };
    let kept = match current {
        Some(Value::String(_)) => Some(Value::String(raw.to_string())),
        Some(Value::Number(_)) => number(),
        Some(Value::Bool(_)) => matches!(raw, "true" | "false").then(|| Value::Bool(raw == "true")),
        _ => None,
    };
    kept.unwrap_or(typed)
}

/// Whether a value in the stack configuration fits its `[[config]]` entry, as a Pulumi program
/// reads it: an int is a number or a string of one (`config.requireNumber` parses strings), a
/// bool `true`/`false` or their text, a list a sequence of strings, a string any scalar.
pub fn check_stored(spec: &ConfigSpec, value: &Value) -> std::result::Result<(), String> {
    let text = match value {
        Value::String(s) => Some(s.as_str()),
        _ => None,
    };
    let fits = match spec.kind {
        ConfigKind::Int => value.is_i64() || text.is_some_and(|t| t.trim().parse::<i64>().is_ok()),
        ConfigKind::Bool => value.is_boolean() || text.and_then(parse_bool).is_some(),
        ConfigKind::List => value
            .as_array()
            .is_some_and(|items| items.iter().all(Value::is_string)),
        ConfigKind::String | ConfigKind::Secret => !value.is_object() && !value.is_array(),
    };
    if !fits {
        let wanted = match spec.kind {
            ConfigKind::Int => "a whole number",
            ConfigKind::Bool => "true or false",
            ConfigKind::List => "a list of strings",
            ConfigKind::String | ConfigKind::Secret => "a single value",
        };
        return Err(format!("must be {wanted}, not {}", shown(value)));
    }
    check_choice(spec, value)
}

/// Whether an `int` value keeps within the other keys' values (`values`) its entry names: at
/// least `at_least`'s, at most `at_most`'s. A bound that is not set, or not a number, is not
/// checked (its own check says so).
pub fn check_bounds(
    spec: &ConfigSpec,
    value: &Value,
    values: &Map<String, Value>,
) -> std::result::Result<(), String> {
    let int = |v: &Value| match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    let Some(n) = int(value) else {
        return Ok(());
    };
    let bound = |key: &Option<String>| -> Option<(String, i64)> {
        let key = key.as_ref()?;
        Some((key.clone(), int(values.get(key)?)?))
    };
    if let Some((key, least)) = bound(&spec.at_least)
        && n < least
    {
        return Err(format!("is {n}, less than `{key}` ({least})"));
    }
    if let Some((key, most)) = bound(&spec.at_most)
        && n > most
    {
        return Err(format!("is {n}, more than `{key}` ({most})"));
    }
    Ok(())
}

/// A value among the entry's `choices`, compared as text (`"3"` is the choice 3).
fn check_choice(spec: &ConfigSpec, value: &Value) -> std::result::Result<(), String> {
    if spec.choices.is_empty() || spec.choices.iter().any(|c| display(c) == display(value)) {
        return Ok(());
    }
    let choices: Vec<String> = spec.choices.iter().map(display).collect();
    Err(format!(
        "must be one of {}, not {}",
        choices.join(", "),
        shown(value)
    ))
}

/// A value in a message, in backquotes: text as it is, anything else as JSON.
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => crate::error::quoted(s),
        other => crate::error::quoted(&other.to_string()),
    }
}

/// `true`/`false` as Go's `strconv.ParseBool` reads them (what `pulumi config set --type bool`
/// and the Go SDK's `config.GetBool` accept).
fn parse_bool(text: &str) -> Option<bool> {
    match text.trim() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

fn split_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn display(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(display).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

/// The shared configuration of a first run, as Pulumi itself would write it: a `config:` mapping
/// of namespaced keys, strings that YAML would read as something else quoted, numbers and booleans
/// as typed values (`config set --type`), lists as sequences (`config set --path`).
pub fn first_run_document(values: &Map<String, Value>, infra_type: Option<&str>) -> String {
    let mut config = Map::new();
    if let Some(infra_type) = infra_type {
        config.insert(
            INFRA_TYPE_KEY.to_string(),
            Value::String(infra_type.to_string()),
        );
    }
    for (key, value) in values {
        // A `[[config]]` key is a path (checked when the provider was read): a nested one
        // writes its value where it belongs.
        match ConfigPath::parse(key) {
            Ok(path) if path.set(&mut config, value.clone()).is_ok() => {}
            _ => {
                config.insert(key.clone(), value.clone());
            }
        }
    }
    // Written as `config set` writes a new entry: keys unquoted where YAML reads them as
    // written (`kubernetes:infra_type:`), so that the file reads as a person would write it.
    crate::workspace::yaml_edit::document(&config)
}

pub use crate::workspace::envfile::SECRET_PREFIX;

/// The token of `mara serve`'s two actions (docs/commands.md, "serve"): a secret of mara's.
pub const SERVE_TOKEN_VARIABLE: &str = "MARA_SERVE_TOKEN";

/// `MARA_SECRET_*`, `MARA_LEDGER_URL` (which may hold the ledger's password) and
/// `MARA_SERVE_TOKEN` never reach an engine or a hook: they are only for mara.
pub fn strip_secret_variables(env: &mut BTreeMap<String, String>) {
    env.retain(|key, _| {
        !key.starts_with(SECRET_PREFIX) && key != "MARA_LEDGER_URL" && key != SERVE_TOKEN_VARIABLE
    });
}

/// `MARA_SERVE_TOKEN`'s value, when it is set: redacted from what a run writes, as a secret is
/// (an engine never gets it, but a program may find it elsewhere and print it).
pub fn serve_token(env: &BTreeMap<String, String>) -> Option<String> {
    (env.get(SERVE_TOKEN_VARIABLE).map(|t| t.trim().to_string())).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Location;
    use crate::workspace::stack_config::StackConfig;

    fn spec(key: &str, kind: ConfigKind, default: Option<Value>, env: Option<&str>) -> ConfigSpec {
        ConfigSpec {
            default_from: None,
            at_least: None,
            at_most: None,
            key: key.into(),
            prompt: format!("{key}?"),
            default,
            env: env.map(str::to_string),
            kind,
            choices: Vec::new(),
            optional: false,
            declared_at: Location::file("p.toml"),
        }
    }

    #[test]
    fn defaults_come_from_the_environment_then_the_provider_with_templates() {
        let stack = StackName::parse("dev").unwrap();
        let env = BTreeMap::from([("AWS_DEFAULT_REGION".to_string(), "eu-west-1".to_string())]);
        let region = spec(
            "aws:region",
            ConfigKind::String,
            Some(Value::from("us-east-1")),
            Some("AWS_DEFAULT_REGION"),
        );
        assert_eq!(
            default_of(&region, &env, &stack, "/k", &BTreeMap::new()),
            Some(Value::from("eu-west-1"))
        );
        assert_eq!(
            default_of(&region, &BTreeMap::new(), &stack, "/k", &BTreeMap::new()),
            Some(Value::from("us-east-1"))
        );
        let context = spec(
            "kubernetes:context",
            ConfigKind::String,
            Some(Value::from("k3d-mara-{stack} {kubeconfig}")),
            None,
        );
        assert_eq!(
            default_of(
                &context,
                &env,
                &stack,
                "/w/.mara/kube/dev.yaml",
                &BTreeMap::new()
            ),
            Some(Value::from("k3d-mara-dev /w/.mara/kube/dev.yaml"))
        );
    }

    #[test]
    fn the_repositorys_example_configuration_comes_before_the_providers_default() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(EXAMPLE),
            "# the catalogue\nconfig:\n  docean:instance_size: s-4vcpu-8gb\n  eks:k8s_version: 1.20\n  docean:node_count: 3\n  aws:profile: 'none'\n  vpc:azs:\n    - a\n",
        )
        .unwrap();
        let example = example_defaults(dir.path());
        assert_eq!(example["docean:instance_size"], Value::from("s-4vcpu-8gb"));
        assert_eq!(
            example["eks:k8s_version"],
            Value::from("1.20"),
            "as written"
        );
        assert_eq!(example["docean:node_count"], Value::from(3));
        assert_eq!(example["aws:profile"], Value::from("none"));
        assert!(!example.contains_key("vpc:azs"));
        let stack = StackName::parse("dev").unwrap();
        let size = spec(
            "docean:instance_size",
            ConfigKind::String,
            Some(Value::from("s-2vcpu-4gb")),
            None,
        );
        let (none, nothing) = (BTreeMap::new(), BTreeMap::new());
        assert_eq!(
            default_of(&size, &none, &stack, "/k", &example),
            Some(Value::from("s-4vcpu-8gb"))
        );
        assert_eq!(
            default_of(&size, &none, &stack, "/k", &nothing),
            Some(Value::from("s-2vcpu-4gb"))
        );
        // None, or one that does not read: the provider's.
        assert!(example_defaults(&dir.path().join("nowhere")).is_empty());
        std::fs::write(dir.path().join(EXAMPLE), "config: [\n").unwrap();
        assert!(example_defaults(dir.path()).is_empty());
    }

    #[test]
    fn answers_are_checked_and_typed() {
        assert!(check_answer(ConfigKind::Int, "12", false).is_ok());
        assert_eq!(
            check_answer(ConfigKind::Int, "twelve", false).unwrap_err(),
            "`twelve` is not a whole number"
        );
        assert!(check_answer(ConfigKind::String, " ", false).is_err());
        assert!(check_answer(ConfigKind::String, "", true).is_ok());
        assert_eq!(
            typed(ConfigKind::List, "a, b,, c"),
            Some(serde_json::json!(["a", "b", "c"]))
        );
        assert_eq!(typed(ConfigKind::Int, "3"), Some(Value::from(3)));
        assert_eq!(typed(ConfigKind::Bool, "Yes"), Some(Value::Bool(true)));
        assert_eq!(typed(ConfigKind::String, ""), None);
    }

    #[test]
    fn a_value_set_back_keeps_the_type_the_file_gives_it() {
        let (two, text) = (Value::from(2), Value::from("2"));
        // Where the file has a number, a number; given back, the file is as it was.
        assert_eq!(as_the_file_types(Some(&two), "4".into(), "4"), 4);
        assert_eq!(
            as_the_file_types(Some(&Value::from(1.5)), "2.5".into(), "2.5"),
            2.5
        );
        // Text that a number does not write back as given stays text.
        for raw in ["04", "1e3", "1.50", "four", "+4"] {
            assert_eq!(as_the_file_types(Some(&two), raw.into(), raw), raw);
        }
        // Where the file has text, text: a path's `5` is not made a number.
        assert_eq!(as_the_file_types(Some(&text), Value::from(5), "5"), "5");
        assert_eq!(
            as_the_file_types(Some(&Value::Bool(true)), "false".into(), "false"),
            false
        );
        // A typing that is not the text as given (`Yes` for a bool) is the provider's.
        assert_eq!(
            as_the_file_types(Some(&text), Value::Bool(true), "Yes"),
            true
        );
        assert_eq!(as_the_file_types(None, text.clone(), "2"), "2");
    }

    #[test]
    fn the_first_run_file_reads_back_with_its_types() {
        let mut values = Map::new();
        values.insert("eks:k8s_version".into(), Value::from("1.34"));
        values.insert("eks:min_size".into(), Value::from(3));
        values.insert("linode:k8s_ha".into(), Value::Bool(true));
        values.insert(
            "vpc:azs".into(),
            serde_json::json!(["us-east-1a", "us-east-1b"]),
        );
        values.insert("aws:profile".into(), Value::from("true"));
        let text = first_run_document(&values, Some("AWS"));
        assert!(
            text.starts_with("config:\n  kubernetes:infra_type: AWS\n"),
            "no key quoted that YAML reads as written:\n{text}"
        );
        let config = StackConfig::parse(std::path::Path::new("Pulumi.dev.yaml"), &text).unwrap();
        assert_eq!(config.values["kubernetes:infra_type"], "AWS");
        assert_eq!(
            config.values["eks:k8s_version"],
            Value::from("1.34"),
            "{text}"
        );
        assert_eq!(config.values["eks:min_size"], Value::from(3));
        assert_eq!(config.values["linode:k8s_ha"], Value::Bool(true));
        assert_eq!(
            config.values["vpc:azs"],
            serde_json::json!(["us-east-1a", "us-east-1b"])
        );
        assert_eq!(
            config.values["aws:profile"],
            Value::from("true"),
            "a string stays a string: {text}"
        );
    }

    #[test]
    fn questions_are_asked_typed_and_checked_through_the_prompter() {
        let stack = StackName::parse("dev").unwrap();
        let mut count = spec("k3d:servers", ConfigKind::Int, Some(Value::from(1)), None);
        count.prompt = "How many servers".into();
        let token = spec(
            "do:token",
            ConfigKind::Secret,
            None,
            Some("DIGITALOCEAN_TOKEN"),
        );
        let provider = Provider {
            config: vec![count, token],
            ..crate::provider::Registry::builtin().resolve("k3d").unwrap()
        };
        let needs = Needs {
            config: provider.config.iter().collect(),
            secrets: Vec::new(),
            near_stack: None,
        };
        let mut prompter = crate::ui::prompt::Scripted::new(["three", "3", "", "s3cr3t"]);
        let answers = ask(
            &needs,
            &BTreeMap::new(),
            (&stack, "/k"),
            &BTreeMap::new(),
            &provider,
            &mut prompter,
        )
        .unwrap();
        assert_eq!(answers.first_run.values["k3d:servers"], Value::from(3));
        assert_eq!(answers.first_run.secrets[0].1.expose(), "s3cr3t");
        assert_eq!(
            prompter.transcript,
            [
                "Stack dev has no configuration yet: provider k3d asks 2 questions.",
                "? How many servers",
                "! `three` is not a whole number",
                "? How many servers",
                "? do:token? (no default: it must be typed)",
                "A secret cannot be empty; again.",
                "? do:token? (no default: it must be typed)",
            ]
        );
    }

    #[test]
    fn the_aws_questions_ask_as_the_original_did() {
        let stack = StackName::parse("dev").unwrap();
        let provider = crate::provider::Registry::builtin().resolve("aws").unwrap();
        let needs = Needs {
            config: provider.config.iter().collect(),
            secrets: Vec::new(),
            near_stack: None,
        };
        // Region and version as offered; no profile ("none"), every zone; the sizes out of order
        // first.
        let answers = ["", "none", "", "", "", "5", "2", "10", "11", ""];
        let mut prompter = crate::ui::prompt::Scripted::new(answers);
        let env = BTreeMap::new();
        let none = BTreeMap::new();
        let answers = ask(
            &needs,
            &env,
            (&stack, "/k"),
            &none,
            &provider,
            &mut prompter,
        )
        .unwrap();
        let values = &answers.first_run.values;
        assert!(
            !values.contains_key("aws:profile"),
            "none leaves it out: {values:?}"
        );
        assert_eq!(values["aws:region"], Value::from("us-east-1"));
        assert_eq!(values["eks:min_size"], Value::from(5));
        assert_eq!(values["eks:max_size"], Value::from(10));
        assert_eq!(
            values["eks:desired_capacity"],
            Value::from(5),
            "the minimum just given is the default"
        );
        let refused: Vec<&String> = (prompter.transcript.iter())
            .filter(|l| l.starts_with('!'))
            .collect();
        assert_eq!(
            refused,
            [
                "! is 2, less than `eks:min_size` (5)",
                "! is 11, more than `eks:max_size` (10)"
            ]
        );
    }

    #[test]
    fn without_a_terminal_answers_come_from_the_environment() {
        let token = spec(
            "do:token",
            ConfigKind::Secret,
            None,
            Some("DIGITALOCEAN_TOKEN"),
        );
        let secret = SecretSpec {
            key: "prometheus:adminpass".into(),
            prompt: "pw".into(),
            default: None,
            declared_at: Location::file("p.toml"),
        };
        let needs = Needs {
            config: vec![&token],
            secrets: vec![&secret],
            near_stack: None,
        };
        let env = BTreeMap::from([
            ("MARA_SECRET_DO_TOKEN".to_string(), "t".to_string()),
            (
                "MARA_SECRET_PROMETHEUS_ADMINPASS".to_string(),
                "p".to_string(),
            ),
        ]);
        let answers = from_environment(&needs, &env);
        assert_eq!(answers.first_run.secrets.len(), 1);
        assert_eq!(answers.secrets[0].1.expose(), "p");
        let mut with_token = env.clone();
        with_token.insert("DIGITALOCEAN_TOKEN".into(), "x".into());
        assert!(
            from_environment(&needs, &with_token)
                .first_run
                .secrets
                .is_empty(),
            "a token in its own variable is read by the projects, not stored"
        );
    }

    #[test]
    fn secrets_never_print() {
        assert_eq!(format!("{:?}", Secret::new("hunter2".into())), "[secret]");
        let mut env = BTreeMap::from([
            ("MARA_SECRET_X".to_string(), "v".to_string()),
            ("PATH".to_string(), "/bin".to_string()),
        ]);
        strip_secret_variables(&mut env);
        assert_eq!(env.keys().collect::<Vec<_>>(), ["PATH"]);
    }
}
