//! Policy packs (`--policy-pack DIR`, on `preview` and `up`), as the stand-in runs them.
//!
//! A pack is a directory with a `PulumiPolicy.yaml`; without one Pulumi fails with `failed to
//! load Pulumi policy project located at "DIR": …` before the program runs. Of the runtimes a
//! pack can name, the stand-in runs Pulumi's OPA bridge (`runtime: opa`, pulumi/pulumi-policy-opa):
//! the pack's `.rego` files, of one package, whose rules decide by their names — `deny*` and
//! `violation*` are mandatory, `warn*` advisory, each evaluated on every resource the operation
//! would leave (its inputs overlaid at the top of `input`, with `type`, `urn`, `name` and their
//! `__` forms, and `properties`); `stack_deny*`, `stack_violation*` and `stack_warn*` once, on
//! `{"resources": [...]}`. Another runtime needs its language host, which the stand-in has not:
//! it refuses it. The pack is named after its directory; its version is `PulumiPolicy.yaml`'s
//! `version`, else `0.0.1`.
//!
//! Each violation is a `policyEvent` as the engine emits it (`pkg/engine/events.go`): the message
//! wrapped in colour directives (`<{%reset%}>…<{%reset%}>\n`, colour `raw`; `--color never` takes
//! them out, `pkg/backend/display/display.go`), the policy's and the
//! pack's names, the enforcement level. A mandatory one fails the operation (exit 1, no message of
//! its own: a "bail"); the stand-in applies a stack's resources at once, so an `up` it fails
//! applies none of them.

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::Failure;

/// One loaded pack.
pub struct Pack {
    pub name: String,
    pub version: String,
    package: String,
    engine: regorus::Engine,
}

/// One violation of a pack's policy.
pub struct Violation {
    pub urn: String,
    pub policy: String,
    pub message: String,
    pub mandatory: bool,
    pub pack: String,
    pub version: String,
}

/// The packs of `--policy-pack` (each value split at commas, as Pulumi's string slices are).
pub fn load_all(values: &[String]) -> Result<Vec<Pack>, Failure> {
    let paths = values
        .iter()
        .flat_map(|v| v.split(','))
        .filter(|p| !p.is_empty());
    paths.map(load).collect()
}

fn load(path: &str) -> Result<Pack, Failure> {
    let dir = Path::new(path);
    let failed = |why: String| {
        Failure::new(
            1,
            format!("failed to load Pulumi policy project located at {path:?}: {why}"),
        )
    };
    let project = dir.join("PulumiPolicy.yaml");
    let text = std::fs::read_to_string(&project)
        .map_err(|e| failed(format!("open {}: {}", project.display(), io_words(&e))))?;
    let yaml: Value = serde_saphyr::from_str(&text).map_err(|e| failed(e.to_string()))?;
    let runtime = yaml["runtime"]
        .as_str()
        .or_else(|| yaml["runtime"]["name"].as_str())
        .unwrap_or_default();
    if runtime != "opa" {
        return Err(failed(format!(
            "the stand-in runs policy packs of runtime `opa` only, not {runtime:?}"
        )));
    }
    // The bridge's policies are OPA v0 Rego (`deny[msg] { … }`); `import rego.v1` opts a file in.
    let mut engine = regorus::Engine::new();
    engine.set_rego_v0(true);
    let mut packages = std::collections::BTreeSet::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| failed(io_words(&e)))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rego"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|e| failed(io_words(&e)))?;
        let package = engine
            .add_policy(file.display().to_string(), text)
            .map_err(|e| failed(format!("{e:#}")))?;
        packages.insert(package.trim_start_matches("data.").to_string());
    }
    let package = match packages.len() {
        1 => packages.pop_first().expect("one package"),
        0 => return Err(failed("the pack has no .rego file".into())),
        _ => return Err(failed(format!("one package per pack, not {packages:?}"))),
    };
    let name = dir
        .canonicalize()
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| path.to_string());
    let version = yaml["version"].as_str().unwrap_or("0.0.1").to_string();
    Ok(Pack {
        name,
        version,
        package,
        engine,
    })
}

fn io_words(error: &std::io::Error) -> String {
    match error.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        _ => error.to_string(),
    }
}

impl Pack {
    /// What the pack's resource policies say of `resource` (a state: `urn`, `type`, `inputs`).
    pub fn analyze(&mut self, resource: &Value) -> Result<Vec<Violation>, Failure> {
        let urn = resource["urn"].as_str().unwrap_or_default().to_string();
        self.decide(resource_input(resource), "", &urn)
    }

    /// What the pack's stack policies say of all the resources; violations of the root stack.
    pub fn analyze_stack(
        &mut self,
        resources: &[Value],
        stack_urn: &str,
    ) -> Result<Vec<Violation>, Failure> {
        let all: Vec<Value> = resources.iter().map(resource_input).collect();
        self.decide(json!({"resources": all}), "stack_", stack_urn)
    }

    /// The rules of the pack whose names start with `prefix` and then `deny`, `violation` or
    /// `warn`, over `input`.
    fn decide(&mut self, input: Value, prefix: &str, urn: &str) -> Result<Vec<Violation>, Failure> {
        let value: regorus::Value = serde_json::from_value(input).expect("JSON is a value");
        self.engine.set_input(value);
        let results = self
            .engine
            .eval_query(format!("data.{}", self.package), false)
            .map_err(|e| Failure::new(1, format!("policy pack {}: {e:#}", self.name)))?;
        let rules = results
            .result
            .first()
            .and_then(|r| r.expressions.first())
            .map(|e| serde_json::to_value(&e.value).unwrap_or(Value::Null))
            .unwrap_or(Value::Null);
        let mut violations = Vec::new();
        for (rule, value) in rules.as_object().into_iter().flatten() {
            let Some(rest) = rule.strip_prefix(prefix) else {
                continue;
            };
            let mandatory = match () {
                _ if rest.starts_with("deny") || rest.starts_with("violation") => true,
                _ if rest.starts_with("warn") => false,
                _ => continue,
            };
            if prefix.is_empty() && rule.starts_with("stack_") {
                continue;
            }
            for message in messages(value) {
                violations.push(Violation {
                    urn: urn.to_string(),
                    policy: rule.clone(),
                    message,
                    mandatory,
                    pack: self.name.clone(),
                    version: self.version.clone(),
                });
            }
        }
        Ok(violations)
    }
}

/// The OPA bridge's input for one resource: its inputs at the top, then what Pulumi knows of it
/// (a property of the same name wins over the plain form; the `__` forms always hold).
fn resource_input(resource: &Value) -> Value {
    let urn = resource["urn"].as_str().unwrap_or_default();
    let name = urn.rsplit("::").next().unwrap_or_default();
    let properties = resource.get("inputs").cloned().unwrap_or_else(|| json!({}));
    let mut input = Map::new();
    for (key, value) in [
        ("type", resource["type"].clone()),
        ("urn", Value::from(urn)),
        ("name", Value::from(name)),
        ("properties", properties.clone()),
    ] {
        input.insert(format!("__{key}"), value.clone());
        input.insert(key.to_string(), value);
    }
    for (key, value) in properties.as_object().into_iter().flatten() {
        input.insert(key.clone(), value.clone());
    }
    Value::Object(input)
}

/// A rule's messages: the strings of its set, or each object's `msg`.
fn messages(value: &Value) -> Vec<String> {
    let one = |item: &Value| match item {
        Value::String(text) => Some(text.clone()),
        Value::Object(fields) => fields
            .get("msg")
            .and_then(Value::as_str)
            .map(str::to_string),
        Value::Bool(true) => Some(String::new()),
        _ => None,
    };
    match value {
        Value::Array(items) => items.iter().filter_map(one).collect(),
        other => one(other).into_iter().collect(),
    }
}

/// The `policyEvent` of a violation, as Pulumi's JSON display writes it: its message in colour
/// directives (colour `raw`), or without them (`plain`: `--color never`, colour `never`).
pub fn event(violation: &Violation, plain: bool) -> Value {
    let (message, color) = match plain {
        true => (format!("{}\n", violation.message), "never"),
        false => (
            format!("<{{%reset%}}>{}<{{%reset%}}>\n", violation.message),
            "raw",
        ),
    };
    json!({
        "resourceUrn": violation.urn,
        "message": message,
        "color": color,
        "policyName": violation.policy,
        "policyPackName": violation.pack,
        "policyPackVersion": violation.version,
        "policyPackVersionTag": violation.version,
        "enforcementLevel": if violation.mandatory { "mandatory" } else { "advisory" },
    })
}

/// The packs as the `summaryEvent`'s `PolicyPacks` names them: name → `v` and the version tag.
pub fn summary(packs: &[Pack]) -> Value {
    let named = packs
        .iter()
        .map(|p| (p.name.clone(), Value::from(format!("v{}", p.version))));
    Value::Object(named.collect())
}
