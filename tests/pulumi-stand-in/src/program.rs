//! A small subset of Pulumi YAML, evaluated as the real YAML runtime would: `config` (typed, with
//! defaults; a name without `:` is in the project's namespace), `variables`, `outputs` with
//! `${…}` interpolation and property access, the `fn::toJSON`, `fn::toBase64`, `fn::fromBase64`
//! and `fn::secret` functions, and `pulumi:pulumi:StackReference` resources reading another
//! stack's outputs. Secrecy travels with values: anything computed from a secret is secret.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Map, Value, json};

use crate::Failure;
use crate::backend::{self, Backend};

pub struct Project {
    pub dir: PathBuf,
    pub name: String,
    pub doc: Map<String, Value>,
}

impl Project {
    /// The `Pulumi.yaml` in `cwd` or the nearest directory above it.
    pub fn find(cwd: &Path) -> Result<Project, Failure> {
        let dir = cwd.ancestors().find(|d| d.join("Pulumi.yaml").is_file() || d.join("Pulumi.yml").is_file()).ok_or_else(|| {
            Failure::new(
                1,
                format!(
                    "no Pulumi.yaml project file found (searching upwards from {}). If you have not created a project yet, use `pulumi new` to do so: no project file found",
                    cwd.display()
                ),
            )
        })?;
        let file = if dir.join("Pulumi.yaml").is_file() {
            dir.join("Pulumi.yaml")
        } else {
            dir.join("Pulumi.yml")
        };
        let text = std::fs::read_to_string(&file).map_err(|e| Failure::io(&file, e))?;
        let doc: Value = serde_saphyr::from_str(&text)
            .map_err(|e| Failure::new(1, format!("could not read {}: {e}", file.display())))?;
        let Value::Object(doc) = doc else {
            return Err(Failure::new(
                1,
                format!("{} is not a mapping", file.display()),
            ));
        };
        let name = doc
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| Failure::new(1, "project is missing a 'name' attribute"))?
            .to_string();
        Ok(Project {
            dir: dir.to_path_buf(),
            name,
            doc,
        })
    }

    /// Where the project's own stack configuration lives (`stackConfigDir` honoured).
    pub fn stack_config_path(&self, stack: &str) -> PathBuf {
        let dir = self
            .doc
            .get("stackConfigDir")
            .and_then(Value::as_str)
            .map(|d| self.dir.join(d))
            .unwrap_or_else(|| self.dir.clone());
        dir.join(format!("Pulumi.{stack}.yaml"))
    }

    /// `key` as stored: a key without a namespace is in the project's.
    pub fn full_key(&self, key: &str) -> String {
        if key.contains(':') {
            key.to_string()
        } else {
            format!("{}:{key}", self.name)
        }
    }
}

/// The result of running the program.
pub struct Evaluated {
    /// Output name → value, with secret leaves wrapped (see `SECRET`).
    pub outputs: Map<String, Value>,
    /// The stack references read: resource name → the referenced stack's name.
    pub references: BTreeMap<String, String>,
}

/// Inside evaluation, a secret value is `{SECRET: <plaintext value>}`.
pub const SECRET: &str = backend::SECRET_SIG;

fn secret(value: Value) -> Value {
    if is_secret(&value) {
        value
    } else {
        json!({ SECRET: value })
    }
}

pub fn is_secret(value: &Value) -> bool {
    matches!(value, Value::Object(m) if m.len() == 1 && m.contains_key(SECRET))
}

/// The value with every secret wrapper removed, and whether there was one.
pub fn reveal(value: &Value) -> (Value, bool) {
    match value {
        Value::Object(m) if is_secret(value) => (reveal(&m[SECRET]).0, true),
        Value::Object(m) => {
            let mut any = false;
            let map = m
                .iter()
                .map(|(k, v)| {
                    let (v, s) = reveal(v);
                    any |= s;
                    (k.clone(), v)
                })
                .collect();
            (Value::Object(map), any)
        }
        Value::Array(items) => {
            let mut any = false;
            let items = items
                .iter()
                .map(|v| {
                    let (v, s) = reveal(v);
                    any |= s;
                    v
                })
                .collect();
            (Value::Array(items), any)
        }
        other => (other.clone(), false),
    }
}

struct Evaluator<'a> {
    project: &'a Project,
    stack: &'a str,
    backend: &'a Backend,
    passphrase: Option<String>,
    config: BTreeMap<String, Value>,
    variables: Map<String, Value>,
    computed: BTreeMap<String, Value>,
    in_progress: BTreeSet<String>,
    resources: Map<String, Value>,
    references: BTreeMap<String, String>,
}

pub fn evaluate(
    project: &Project,
    stack: &str,
    config: &Map<String, Value>,
    backend: &Backend,
    passphrase: Option<String>,
) -> Result<Evaluated, Failure> {
    let mut evaluator = Evaluator {
        project,
        stack,
        backend,
        passphrase,
        config: BTreeMap::new(),
        variables: project
            .doc
            .get("variables")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
        computed: BTreeMap::new(),
        in_progress: BTreeSet::new(),
        resources: project
            .doc
            .get("resources")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
        references: BTreeMap::new(),
    };
    evaluator.load_config(config)?;
    for (name, resource) in evaluator.resources.clone() {
        let kind = resource
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if kind != "pulumi:pulumi:StackReference" {
            return Err(Failure::new(
                1,
                format!(
                    "resource `{name}` has type `{kind}`: the stand-in evaluates only pulumi:pulumi:StackReference"
                ),
            ));
        }
    }
    let mut outputs = Map::new();
    for (name, expression) in project
        .doc
        .get("outputs")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
    {
        let value = evaluator.eval(&expression)?;
        outputs.insert(name, value);
    }
    Ok(Evaluated {
        outputs,
        references: evaluator.references,
    })
}

impl Evaluator<'_> {
    fn load_config(&mut self, stack_config: &Map<String, Value>) -> Result<(), Failure> {
        let declared = self
            .project
            .doc
            .get("config")
            .or_else(|| self.project.doc.get("configuration"));
        let declared = declared
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for (name, spec) in declared {
            let key = self.project.full_key(&name);
            let (kind, default, declared_secret) = match &spec {
                Value::Object(s)
                    if s.contains_key("type")
                        || s.contains_key("default")
                        || s.contains_key("secret") =>
                {
                    (
                        s.get("type").and_then(Value::as_str).map(str::to_lowercase),
                        s.get("default").cloned(),
                        s.get("secret").and_then(Value::as_bool).unwrap_or(false),
                    )
                }
                other => (None, Some(other.clone()), false),
            };
            let value = match stack_config.get(&key) {
                Some(Value::Object(m)) if m.len() == 1 && m.contains_key("secure") => {
                    let passphrase = match &self.passphrase {
                        Some(p) => p.clone(),
                        None => return Err(backend::passphrase(&|_| None).unwrap_err()),
                    };
                    let text =
                        backend::decrypt(m["secure"].as_str().unwrap_or_default(), &passphrase)?;
                    secret(coerce(&key, Value::String(text), kind.as_deref())?)
                }
                Some(value) => coerce(&key, value.clone(), kind.as_deref())?,
                None => match default {
                    Some(default) => default,
                    None => {
                        return Err(Failure::new(
                            1,
                            format!(
                                "Missing required configuration variable '{key}'\n    please set a value using the command `pulumi config set {key} <value>`"
                            ),
                        ));
                    }
                },
            };
            let value = if declared_secret {
                secret(value)
            } else {
                value
            };
            let short = name.rsplit(':').next().unwrap_or(&name).to_string();
            self.config.insert(name.clone(), value.clone());
            self.config.entry(short).or_insert(value);
        }
        Ok(())
    }

    fn root(&mut self, name: &str) -> Result<Value, Failure> {
        if name == "pulumi" {
            return Ok(
                json!({"stack": self.stack, "project": self.project.name, "organization": "organization"}),
            );
        }
        if let Some(value) = self.config.get(name) {
            return Ok(value.clone());
        }
        if let Some(value) = self.computed.get(name) {
            return Ok(value.clone());
        }
        if let Some(expression) = self.variables.get(name).cloned() {
            if !self.in_progress.insert(name.to_string()) {
                return Err(Failure::new(
                    1,
                    format!("variable `{name}` refers to itself"),
                ));
            }
            let value = self.eval(&expression)?;
            self.in_progress.remove(name);
            self.computed.insert(name.to_string(), value.clone());
            return Ok(value);
        }
        if let Some(resource) = self.resources.get(name).cloned() {
            let value = self.stack_reference(name, &resource)?;
            self.computed.insert(name.to_string(), value.clone());
            return Ok(value);
        }
        Err(Failure::new(
            1,
            format!(
                "the reference `${{{name}}}` does not name a config value, variable or resource"
            ),
        ))
    }

    fn stack_reference(&mut self, name: &str, resource: &Value) -> Result<Value, Failure> {
        let properties = resource.get("properties").cloned().unwrap_or(Value::Null);
        let target = self.eval(
            properties
                .get("name")
                .unwrap_or(&Value::String(name.to_string())),
        )?;
        let (target, _) = reveal(&target);
        let target = target.as_str().unwrap_or_default().to_string();
        let parts: Vec<&str> = target.split('/').collect();
        let (project, stack) = match parts.as_slice() {
            [stack] => (self.project.name.as_str(), *stack),
            ["organization", stack] => (self.project.name.as_str(), *stack),
            ["organization", project, stack] => (*project, *stack),
            _ => {
                return Err(Failure::new(
                    1,
                    format!(
                        "invalid stack reference \"{target}\": the organization must be `organization` on a DIY backend"
                    ),
                ));
            }
        };
        if !self.backend.exists(project, stack)? {
            return Err(Failure::new(
                1,
                format!("unknown stack \"organization/{project}/{stack}\""),
            ));
        }
        let checkpoint = self.backend.read(project, stack)?;
        let mut outputs = Map::new();
        for (key, value) in stack_outputs(&checkpoint) {
            let value = match value.get("ciphertext").and_then(Value::as_str) {
                Some(ciphertext) if value.get(backend::SECRET_SIG).is_some() => {
                    let passphrase = self
                        .passphrase
                        .clone()
                        .ok_or_else(|| backend::passphrase(&|_| None).unwrap_err())?;
                    let text = backend::decrypt(ciphertext, &passphrase)?;
                    secret(serde_json::from_str(&text).unwrap_or(Value::String(text)))
                }
                _ => value,
            };
            outputs.insert(key, value);
        }
        self.references
            .insert(name.to_string(), format!("organization/{project}/{stack}"));
        Ok(json!({"name": target, "id": target, "outputs": outputs}))
    }

    fn eval(&mut self, expression: &Value) -> Result<Value, Failure> {
        match expression {
            Value::String(text) => self.interpolate(text),
            Value::Array(items) => Ok(Value::Array(
                items
                    .iter()
                    .map(|i| self.eval(i))
                    .collect::<Result<_, _>>()?,
            )),
            Value::Object(map)
                if map.len() == 1
                    && map
                        .keys()
                        .next()
                        .is_some_and(|k| k.to_lowercase().starts_with("fn::")) =>
            {
                let (name, argument) = map.iter().next().expect("one entry");
                let argument = self.eval(argument)?;
                let (plain, was_secret) = reveal(&argument);
                let result = match name.to_lowercase().as_str() {
                    "fn::tojson" => Value::String(plain.to_string()),
                    "fn::tobase64" => Value::String(B64.encode(plain.as_str().unwrap_or_default())),
                    "fn::frombase64" => {
                        let bytes = B64
                            .decode(plain.as_str().unwrap_or_default())
                            .map_err(|e| Failure::new(1, format!("fn::fromBase64: {e}")))?;
                        Value::String(
                            String::from_utf8(bytes)
                                .map_err(|_| Failure::new(1, "fn::fromBase64: not UTF-8"))?,
                        )
                    }
                    "fn::secret" => return Ok(secret(plain)),
                    other => {
                        return Err(Failure::new(
                            1,
                            format!("the stand-in does not implement {other}"),
                        ));
                    }
                };
                Ok(if was_secret { secret(result) } else { result })
            }
            Value::Object(map) => {
                let mut out = Map::new();
                for (k, v) in map {
                    out.insert(k.clone(), self.eval(v)?);
                }
                Ok(Value::Object(out))
            }
            other => Ok(other.clone()),
        }
    }

    /// `${…}` interpolation: a string that is exactly one expression keeps the value's type.
    fn interpolate(&mut self, text: &str) -> Result<Value, Failure> {
        let mut parts: Vec<Result<String, String>> = Vec::new(); // Ok(literal) / Err(expression)
        let mut rest = text;
        let mut literal = String::new();
        while let Some(start) = rest.find('$') {
            literal.push_str(&rest[..start]);
            let after = &rest[start..];
            if let Some(escaped) = after.strip_prefix("$${") {
                literal.push_str("${");
                rest = escaped;
            } else if let Some(body) = after.strip_prefix("${") {
                let end = body.find('}').ok_or_else(|| {
                    Failure::new(1, format!("unterminated interpolation in `{text}`"))
                })?;
                if !literal.is_empty() {
                    parts.push(Ok(std::mem::take(&mut literal)));
                }
                parts.push(Err(body[..end].to_string()));
                rest = &body[end + 1..];
            } else {
                literal.push('$');
                rest = &after[1..];
            }
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(Ok(literal));
        }
        if let [Err(expression)] = parts.as_slice() {
            return self.access(expression);
        }
        let mut out = String::new();
        let mut any_secret = false;
        for part in parts {
            match part {
                Ok(literal) => out.push_str(&literal),
                Err(expression) => {
                    let (value, was_secret) = reveal(&self.access(&expression)?);
                    any_secret |= was_secret;
                    match value {
                        Value::String(s) => out.push_str(&s),
                        Value::Null => {}
                        other => out.push_str(&other.to_string()),
                    }
                }
            }
        }
        Ok(if any_secret {
            secret(Value::String(out))
        } else {
            Value::String(out)
        })
    }

    /// Property access: `root`, `root.a`, `root["a"]`, `root[0]`, `["root key"].a`.
    fn access(&mut self, expression: &str) -> Result<Value, Failure> {
        let path = parse_path(expression).ok_or_else(|| {
            Failure::new(
                1,
                format!("cannot parse the expression `${{{expression}}}`"),
            )
        })?;
        let mut value = self.root(&path[0])?;
        let mut tainted = false;
        for step in &path[1..] {
            if is_secret(&value) {
                tainted = true;
                value = value[SECRET].clone();
            }
            let next = match (&value, step.parse::<usize>()) {
                (Value::Array(items), Ok(index)) => items.get(index).cloned(),
                (Value::Object(map), _) => map.get(step).cloned(),
                _ => None,
            };
            value = next.ok_or_else(|| {
                Failure::new(1, format!("`${{{expression}}}`: there is no `{step}` here"))
            })?;
        }
        Ok(if tainted { secret(value) } else { value })
    }
}

/// `a.b["c"][0]` → ["a", "b", "c", "0"].
fn parse_path(expression: &str) -> Option<Vec<String>> {
    let mut path = Vec::new();
    let chars: Vec<char> = expression.trim().chars().collect();
    let mut i = 0;
    let mut current = String::new();
    while i < chars.len() {
        match chars[i] {
            '.' => {
                if !current.is_empty() {
                    path.push(std::mem::take(&mut current));
                }
                i += 1;
            }
            '[' => {
                if !current.is_empty() {
                    path.push(std::mem::take(&mut current));
                }
                let end = chars[i..].iter().position(|&c| c == ']')? + i;
                let inner: String = chars[i + 1..end].iter().collect();
                let inner = inner.trim();
                path.push(inner.trim_matches('"').replace("\\\"", "\""));
                i = end + 1;
            }
            c => {
                current.push(c);
                i += 1;
            }
        }
    }
    if !current.is_empty() {
        path.push(current);
    }
    (!path.is_empty()).then_some(path)
}

fn coerce(key: &str, value: Value, kind: Option<&str>) -> Result<Value, Failure> {
    let bad = || {
        Failure::new(
            1,
            format!(
                "Stack configuration value '{key}' is not a valid {}",
                kind.unwrap_or("value")
            ),
        )
    };
    Ok(match (kind, &value) {
        (Some("integer" | "int" | "number"), Value::String(s)) => s
            .trim()
            .parse::<i64>()
            .map(Value::from)
            .or_else(|_| s.trim().parse::<f64>().map(Value::from))
            .map_err(|_| bad())?,
        (Some("integer" | "int" | "number"), Value::Number(_)) => value,
        (Some("integer" | "int" | "number"), _) => return Err(bad()),
        (Some("boolean" | "bool"), Value::String(s)) => {
            Value::Bool(s.parse::<bool>().map_err(|_| bad())?)
        }
        (Some("string"), Value::Number(n)) => Value::String(n.to_string()),
        (Some("string"), Value::Bool(b)) => Value::String(b.to_string()),
        _ => value,
    })
}

/// The outputs recorded in a checkpoint (those of its `pulumi:pulumi:Stack` resource).
pub fn stack_outputs(checkpoint: &Value) -> Map<String, Value> {
    checkpoint["checkpoint"]["latest"]["resources"]
        .as_array()
        .and_then(|resources| {
            resources
                .iter()
                .find(|r| r["type"] == "pulumi:pulumi:Stack")
        })
        .and_then(|stack| stack["outputs"].as_object().cloned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse() {
        assert_eq!(
            parse_path("a.b[\"c d\"][0]").unwrap(),
            ["a", "b", "c d", "0"]
        );
        assert_eq!(
            parse_path("kubeconfig.outputs[\"cluster_name\"]").unwrap(),
            ["kubeconfig", "outputs", "cluster_name"]
        );
    }

    #[test]
    fn secrets_travel_through_reveal() {
        let v = json!({"a": secret(json!("x")), "b": 1});
        let (plain, was) = reveal(&v);
        assert!(was);
        assert_eq!(plain, json!({"a": "x", "b": 1}));
    }
}
