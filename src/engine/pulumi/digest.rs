//! What a Pulumi preview digest plans (docs/commands.md, "up, preview, refresh, destroy"): each
//! step's property changes, the root stack's outputs, and the plan as one digest.

use serde_json::Value;

/// The properties a preview digest's step changes: its `detailedDiff` (paths like
/// `outputs.name` or `tags.env`, each with its kind), else its `diffReasons` (top-level keys, an
/// update each), with the old and new values found at those paths in its `oldState` and
/// `newState` (inputs, or outputs for `outputs.…`). A secret is `[secret]`.
pub fn resource_diff(step: &Value) -> crate::engine::ResourceDiff {
    let urn = step["urn"].as_str().unwrap_or_default();
    let name = urn.rsplit("::").next().unwrap_or(urn);
    let kind = step["newState"]["type"]
        .as_str()
        .or_else(|| step["oldState"]["type"].as_str())
        .map(str::to_string)
        .unwrap_or_else(|| {
            urn.rsplit_once("::")
                .and_then(|(t, _)| t.rsplit("::").next())
                .unwrap_or_default()
                .to_string()
        });
    let mut properties: Vec<crate::engine::PropertyDiff> = Vec::new();
    let value_at = |state: &Value, path: &str| -> Option<String> {
        let (section, rest) = match path.strip_prefix("outputs.") {
            Some(rest) => ("outputs", rest),
            None => ("inputs", path),
        };
        let mut value = &state[section];
        for segment in property_path(rest) {
            value = match segment {
                Segment::Key(key) => value.get(key)?,
                Segment::Index(i) => value.get(i)?,
            };
        }
        Some(shown_value(value))
    };
    if let Some(detailed) = step["detailedDiff"].as_object() {
        for (path, diff) in detailed {
            let kind = diff["kind"].as_str().unwrap_or("update").to_string();
            properties.push(crate::engine::PropertyDiff {
                path: path.clone(),
                old: value_at(&step["oldState"], path).filter(|_| !kind.starts_with("add")),
                new: value_at(&step["newState"], path).filter(|_| !kind.starts_with("delete")),
                kind,
            });
        }
    } else {
        for reason in step["diffReasons"].as_array().into_iter().flatten() {
            let Some(path) = reason.as_str() else {
                continue;
            };
            properties.push(crate::engine::PropertyDiff {
                path: path.to_string(),
                kind: "update".into(),
                old: value_at(&step["oldState"], path),
                new: value_at(&step["newState"], path),
            });
        }
    }
    properties.sort_by(|a, b| a.path.cmp(&b.path));
    crate::engine::ResourceDiff {
        op: step["op"].as_str().unwrap_or("update").to_string(),
        resource: format!("{kind} ({name})"),
        properties,
    }
}

enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

/// `a.b[0].c` (and `["a.b"]`) as keys and indices.
fn property_path(path: &str) -> Vec<Segment<'_>> {
    let mut segments = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("[\"") {
            let end = after.find("\"]").unwrap_or(after.len());
            segments.push(Segment::Key(&after[..end]));
            rest = after.get(end + 2..).unwrap_or_default();
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']').unwrap_or(after.len());
            match after[..end].parse() {
                Ok(index) => segments.push(Segment::Index(index)),
                Err(_) => segments.push(Segment::Key(&after[..end])),
            }
            rest = after.get(end + 1..).unwrap_or_default();
        } else {
            let rest_trimmed = rest.strip_prefix('.').unwrap_or(rest);
            let end = rest_trimmed.find(['.', '[']).unwrap_or(rest_trimmed.len());
            if end > 0 {
                segments.push(Segment::Key(&rest_trimmed[..end]));
            }
            rest = &rest_trimmed[end..];
            if end == 0 && !rest.starts_with('[') {
                rest = rest.get(1..).unwrap_or_default();
            }
        }
    }
    segments
}

/// A value of a preview's state as people read it: JSON text, a secret as `[secret]` (Pulumi's
/// secret signature, or a value already blinded), nested secrets too.
fn shown_value(value: &Value) -> String {
    match blinded(value.clone()) {
        Value::String(text) if text == "[secret]" => text,
        other => other.to_string(),
    }
}

/// The key that marks a secret value in Pulumi's state.
const SECRET_SIGNATURE: &str = "4dabf18193072939515e22adb298388d";

/// `value` with each of Pulumi's secret values (an object with its secret signature, whatever
/// its ciphertext) as `[secret]`, nested ones too.
pub fn blinded(value: Value) -> Value {
    match value {
        Value::Object(map) if map.contains_key(SECRET_SIGNATURE) => Value::from("[secret]"),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, blinded(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(blinded).collect()),
        other => other,
    }
}

/// Whether a URN names the root stack (`…::pulumi:pulumi:Stack::…`).
pub(super) fn is_root_urn(urn: &Value) -> bool {
    (urn.as_str()).is_some_and(|urn| urn.contains("::pulumi:pulumi:Stack::"))
}

/// The root stack's step of a preview digest: its type before or after, or its URN, says it.
fn stack_step(digest: &Value) -> Option<&Value> {
    (digest["steps"].as_array().into_iter().flatten()).find(|step| {
        step["newState"]["type"] == "pulumi:pulumi:Stack"
            || step["oldState"]["type"] == "pulumi:pulumi:Stack"
            || is_root_urn(&step["urn"])
    })
}

/// The root stack's outputs that a preview digest changes (its step's `oldState` and
/// `newState` outputs differ; without a step, none), and whether it creates the stack.
pub fn stack_outputs(digest: &Value) -> (Vec<String>, bool) {
    let Some(step) = stack_step(digest) else {
        return (Vec::new(), false);
    };
    let created = step["op"] == "create";
    let empty = serde_json::Map::new();
    let old = step["oldState"]["outputs"].as_object().unwrap_or(&empty);
    let new = step["newState"]["outputs"].as_object().unwrap_or(&empty);
    let names: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    let changed = names
        .into_iter()
        .filter(|name| old.get(*name) != new.get(*name))
        .cloned()
        .collect();
    (changed, created)
}

/// The value Pulumi's preview gives an output known only once applied.
const UNKNOWN: &str = "04da6b54-80e4-46f7-96ec-b56ff0331ba9";

/// The root stack's outputs as a preview digest plans them (its step's `newState` outputs):
/// each value (`None` where it holds the unknown value, or is a secret that changes — the digest
/// holds its ciphertext), whether it changes, and whether it is secret. `None` when the digest
/// has no root stack step.
pub fn planned_outputs(digest: &Value) -> Option<crate::engine::PlannedOutputs> {
    fn holds(value: &Value, wanted: &dyn Fn(&Value) -> bool) -> bool {
        wanted(value)
            || match value {
                Value::Object(map) => map.values().any(|v| holds(v, wanted)),
                Value::Array(items) => items.iter().any(|v| holds(v, wanted)),
                _ => false,
            }
    }
    let step = stack_step(digest)?;
    let old = step["oldState"]["outputs"].as_object();
    let new = step["newState"]["outputs"].as_object()?;
    let planned = new.iter().map(|(name, value)| {
        let changes = old.and_then(|o| o.get(name)) != Some(value);
        let unknown = holds(value, &|v| v.as_str() == Some(UNKNOWN));
        // Pulumi's digest and a streamed one hold a secret as `[secret]`; a stored one as its
        // ciphertext.
        let secret = holds(value, &|v| {
            v.get(SECRET_SIGNATURE).is_some() || v.as_str() == Some("[secret]")
        });
        let planned = crate::engine::PlannedOutput {
            value: (!unknown && !secret).then(|| value.clone()),
            changes,
            secret,
        };
        (name.clone(), planned)
    });
    Some(planned.collect())
}

/// What a preview digest plans, as one digest (`crate::engine::plan_digest`): each step's op, resource
/// and new inputs and outputs, a secret as `[secret]` (its ciphertext changes with each
/// encryption).
pub fn plan_digest(digest: &Value) -> String {
    let mut steps: Vec<Value> = (digest["steps"].as_array().into_iter().flatten())
        .filter(|step| !crate::engine::changes_nothing(step["op"].as_str().unwrap_or_default()))
        .map(|step| {
            let new = &step["newState"];
            serde_json::json!([
                step["urn"],
                step["op"],
                blinded(new["inputs"].clone()),
                blinded(new["outputs"].clone())
            ])
        })
        .collect();
    steps.sort_by_key(|step| step.to_string());
    crate::engine::plan_digest(&Value::Array(steps))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_digest_plans_known_values_and_says_which_are_known_only_once_applied() {
        let digest = serde_json::json!({"steps": [
            {"op": "update", "urn": "urn:pulumi:dev::vpc::pulumi:pulumi:Stack::vpc-dev",
             "oldState": {"type": "pulumi:pulumi:Stack", "outputs": {
                 "cidr": "10.0.0.0/16", "id": "vpc-1", "name": "a",
                 "token": {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "ciphertext": "x"},
                 "gone": 1}},
             "newState": {"type": "pulumi:pulumi:Stack", "outputs": {
                 "cidr": "10.0.0.0/16", "id": "04da6b54-80e4-46f7-96ec-b56ff0331ba9",
                 "name": "b", "subnets": ["s-1", "04da6b54-80e4-46f7-96ec-b56ff0331ba9"],
                 "token": {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "ciphertext": "y"}}}}
        ]});
        let planned = super::planned_outputs(&digest).unwrap();
        let shown: Vec<(&str, Option<String>, bool, bool)> = (planned.iter())
            .map(|(n, p)| {
                (
                    n.as_str(),
                    p.value.as_ref().map(|v| v.to_string()),
                    p.changes,
                    p.secret,
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                ("cidr", Some("\"10.0.0.0/16\"".into()), false, false),
                ("id", None, true, false),
                ("name", Some("\"b\"".into()), true, false),
                ("subnets", None, true, false),
                ("token", None, true, true),
            ]
        );
        assert!(super::planned_outputs(&serde_json::json!({"steps": []})).is_none());
    }
}
