//! Pulumi's update plans (`preview --save-plan FILE`, `up --plan FILE`), for the stand-in's
//! resources. The plan holds what the preview computed — each resource's steps and the changes
//! its inputs and outputs were to make (`adds`, `updates`, `deletes`, as Pulumi's `PlanDiff`) —
//! and the configuration it was made with, secrets as the stack file keeps them (encrypted).
//!
//! `up --plan` holds the update to it as Pulumi's engine does (`pkg/resource/deploy/plan.go`,
//! the step generator's `validateSteps`), with its messages: a step of a resource the plan does
//! not hold (`create is not allowed by the plan: no steps were expected for this resource`), one
//! more impactful than planned (`… this resource is constrained to same`), a property that
//! changes otherwise than planned (`resource <urn> violates plan: properties changed:
//! ~~count[{2}!={3}]`; the root stack's outputs, registered last, without the URN), a planned
//! step that does not come (`expected resource operations for <urn> but none were seen`). A
//! step may do less than planned (the same instead of an update, an update instead of a
//! replacement), and a value already what the plan sets is no violation: the plan binds the
//! operations and the values they lead to, not the state the update starts from.
//!
//! The stand-in checks the whole update before it writes anything; the real CLI checks each
//! step as it comes (after its own preview, unless `--skip-preview`).

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Map, Value, json};

use crate::Failure;
use crate::backend;

/// Writes the plan of a preview from `before` to `after` into `file`, made with `config`.
pub fn save(
    file: &Path,
    (before, after): (&[Value], &[Value]),
    config: &Map<String, Value>,
) -> Result<(), Failure> {
    let mut plans = Map::new();
    for (op, urn) in crate::step_ops(before, after) {
        let key = urn.as_str().unwrap_or_default().to_string();
        let old = find(before, &urn);
        let goal = match find(after, &urn) {
            None => Value::Null,
            Some(new) => json!({
                "type": new["type"],
                "name": key.rsplit("::").next().unwrap_or_default(),
                "custom": new["custom"],
                "parent": new.get("parent").cloned().unwrap_or(Value::Null),
                "inputDiff": diff(section(old, "inputs"), section(Some(new), "inputs")),
                "outputDiff": diff(section(old, "outputs"), section(Some(new), "outputs")),
            }),
        };
        plans.insert(key, json!({"goal": goal, "steps": [op]}));
    }
    let plan = json!({
        "manifest": backend::manifest(),
        "config": config,
        "resourcePlans": plans,
    });
    let text = serde_json::to_string_pretty(&plan).expect("JSON") + "\n";
    std::fs::write(file, text).map_err(|e| Failure::io(file, e))
}

/// The plan in `file`.
pub fn read(file: &Path) -> Result<Value, Failure> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Failure::new(1, format!("could not read plan {}: {e}", file.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| Failure::new(1, format!("could not read plan {}: {e}", file.display())))
}

/// Why the update from `before` to `after` leaves `plan` (the first thing found, as the engine
/// stops at it), or `Ok` when the plan holds it.
pub fn check(plan: &Value, before: &[Value], after: &[Value]) -> Result<(), String> {
    let empty = Map::new();
    let plans = plan["resourcePlans"].as_object().unwrap_or(&empty);
    let mut seen = BTreeSet::new();
    for (op, urn) in crate::step_ops(before, after) {
        let key = urn.as_str().unwrap_or_default();
        let (old, new) = (find(before, &urn), find(after, &urn));
        // The root stack is a component without inputs: its step is a same; what changes is
        // its outputs, registered once the program has run, and checked then.
        let stack = new.is_some_and(|r| r["type"] == "pulumi:pulumi:Stack");
        let op = if stack && op == "update" { "same" } else { op };
        let Some(planned) = plans.get(key) else {
            if op != "same" {
                return Err(format!(
                    "{op} is not allowed by the plan: no steps were expected for this resource"
                ));
            }
            continue;
        };
        seen.insert(key.to_string());
        let goal = &planned["goal"];
        if new.is_some() && goal.is_null() {
            return Err(format!(
                "resource {key} violates plan: resource unexpectedly not deleted"
            ));
        }
        if new.is_some() {
            let inputs = (section(old, "inputs"), section(new, "inputs"));
            check_diff(inputs, &goal["inputDiff"])
                .map_err(|e| format!("resource {key} violates plan: {e}"))?;
        }
        let constraint = planned["steps"][0].as_str();
        match constraint {
            None => {
                return Err(format!(
                    "{op} is not allowed by the plan: no more steps were expected for this resource"
                ));
            }
            Some(constraint) if !constrained_to(op, constraint) => {
                return Err(format!(
                    "{op} is not allowed by the plan: this resource is constrained to {constraint}"
                ));
            }
            Some(_) => {}
        }
    }
    // The root stack's outputs are registered once the program has run.
    for new in after.iter().filter(|r| r["type"] == "pulumi:pulumi:Stack") {
        let key = new["urn"].as_str().unwrap_or_default();
        let Some(planned) = plans.get(key) else {
            continue;
        };
        let outputs = (
            section(find(before, &new["urn"]), "outputs"),
            section(Some(new), "outputs"),
        );
        check_diff(outputs, &planned["goal"]["outputDiff"])
            .map_err(|e| format!("resource violates plan: {e}"))?;
    }
    match plans.keys().find(|key| !seen.contains(*key)) {
        Some(key) => Err(format!(
            "expected resource operations for {key} but none were seen"
        )),
        None => Ok(()),
    }
}

/// Whether a step `op` is no more than the plan's `constraint` (Pulumi's `ConstrainedTo`).
fn constrained_to(op: &str, constraint: &str) -> bool {
    op == constraint
        || match constraint {
            "create" | "update" => op == "same",
            "replace" | "create-replacement" | "delete-replaced" => op == "same" || op == "update",
            _ => false,
        }
}

fn find<'a>(resources: &'a [Value], urn: &Value) -> Option<&'a Value> {
    resources.iter().find(|r| &r["urn"] == urn)
}

/// A resource's `inputs` or `outputs` (none when it is not there).
fn section<'a>(resource: Option<&'a Value>, name: &str) -> &'a Map<String, Value> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    resource
        .and_then(|r| r[name].as_object())
        .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
}

/// What goes from `old` to `new`: the properties added, updated (to their new values) and
/// deleted.
fn diff(old: &Map<String, Value>, new: &Map<String, Value>) -> Value {
    let mut adds = Map::new();
    let mut updates = Map::new();
    for (key, value) in new {
        match old.get(key) {
            None => {
                adds.insert(key.clone(), value.clone());
            }
            Some(was) if was != value => {
                updates.insert(key.clone(), value.clone());
            }
            Some(_) => {}
        }
    }
    let deletes: Vec<&String> = old.keys().filter(|k| !new.contains_key(*k)).collect();
    json!({"adds": adds, "updates": updates, "deletes": deletes})
}

/// Pulumi's `checkDiff`: whether going from `olds` to `news` is what `planned` (a `diff`)
/// allows; what is not, each as `MakeError` says it, sorted.
fn check_diff(
    (olds, news): (&Map<String, Value>, &Map<String, Value>),
    planned: &Value,
) -> Result<(), String> {
    let empty = Map::new();
    let adds = planned["adds"].as_object().unwrap_or(&empty);
    let updates = planned["updates"].as_object().unwrap_or(&empty);
    let deletes: Vec<&str> = (planned["deletes"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    let error = |key: &str, actual_op: &str, actual: Option<&Value>| {
        let (expected_op, expected) = match (adds.get(key), updates.get(key)) {
            (Some(v), _) => ("+", Some(v)),
            (None, Some(v)) => ("~", Some(v)),
            (None, None) if deletes.contains(&key) => ("-", None),
            (None, None) => ("=", None),
        };
        let values = match (expected, actual) {
            (Some(e), Some(a)) => format!("[{}!={}]", shown(e), shown(a)),
            (None, Some(v)) | (Some(v), None) => format!("[{}]", shown(v)),
            (None, None) => String::new(),
        };
        format!("{expected_op}{actual_op}{key}{values}")
    };
    let mut changes = Vec::new();
    let keys: BTreeSet<&String> = olds.keys().chain(news.keys()).collect();
    for key in keys {
        match (olds.get(key), news.get(key)) {
            (None, Some(v)) if adds.get(key) != Some(v) => changes.push(error(key, "+", Some(v))),
            (Some(_), None) if !deletes.contains(&key.as_str()) => {
                changes.push(error(key, "-", None))
            }
            (Some(a), Some(b)) if a != b && updates.get(key).or(adds.get(key)) != Some(b) => {
                changes.push(error(key, "~", Some(b)))
            }
            _ => {}
        }
    }
    // What the plan expected that did not come.
    for (key, expected) in adds.iter().chain(updates.iter()) {
        match news.get(key) {
            Some(v) if v != expected && olds.get(key) == Some(v) => {
                changes.push(error(key, "=", Some(v)))
            }
            None => changes.push(error(key, "-", None)),
            _ => {}
        }
    }
    for &key in &deletes {
        match (olds.get(key), news.get(key)) {
            (None, Some(v)) => changes.push(error(key, "+", Some(v))),
            (Some(a), Some(b)) if a != b => changes.push(error(key, "~", Some(b))),
            (Some(_), Some(v)) => changes.push(error(key, "=", Some(v))),
            _ => {}
        }
    }
    changes.sort();
    changes.dedup();
    match changes.is_empty() {
        true => Ok(()),
        false => Err(format!("properties changed: {}", changes.join(", "))),
    }
}

/// A value as Pulumi's `PropertyValue.String()` writes it (`{3}`, `{[{a} {b}]}`,
/// `{map[k:{v}]}`); a secret as `{[secret]}`, never its value.
fn shown(value: &Value) -> String {
    let inner = match value {
        Value::Object(map) if map.contains_key(backend::SECRET_SIG) => "[secret]".to_string(),
        Value::Object(map) => {
            let entries: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{k}:{}", shown(v)))
                .collect();
            format!("map[{}]", entries.join(" "))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(shown).collect();
            format!("[{}]", items.join(" "))
        }
        Value::String(text) => text.clone(),
        Value::Null => "<nil>".to_string(),
        other => other.to_string(),
    };
    format!("{{{inner}}}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(outputs: Value) -> Value {
        json!({"urn": "urn:pulumi:dev::p::pulumi:pulumi:Stack::p-dev", "custom": false, "type": "pulumi:pulumi:Stack", "outputs": outputs})
    }

    #[test]
    fn an_update_is_held_to_the_values_its_plan_leads_to() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let before = [stack(json!({"count": 2, "name": "a"}))];
        let planned = [stack(json!({"count": 3, "name": "a"}))];
        save(file.path(), (&before, &planned), &Map::new()).unwrap();
        let plan = read(file.path()).unwrap();
        assert_eq!(check(&plan, &before, &planned), Ok(()));
        // Already what the plan leads to: the same instead of the update.
        assert_eq!(check(&plan, &planned, &planned), Ok(()));
        let other = [stack(json!({"count": 4, "name": "a"}))];
        assert_eq!(
            check(&plan, &before, &other),
            Err("resource violates plan: properties changed: ~~count[{3}!={4}]".into())
        );
        let more = [stack(json!({"count": 3, "name": "b"}))];
        assert_eq!(
            check(&plan, &before, &more),
            Err("resource violates plan: properties changed: =~name[{b}]".into())
        );
        let secret = json!({backend::SECRET_SIG: "x", "ciphertext": "v1:abc"});
        let hidden = [stack(json!({"count": 3, "name": secret}))];
        let said = check(&plan, &before, &hidden).unwrap_err();
        assert!(said.ends_with("=~name[{[secret]}]"), "{said}");
        assert!(!said.contains("abc"), "{said}");
    }

    #[test]
    fn a_resource_the_plan_does_not_hold_is_not_created() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let before = [stack(json!({}))];
        save(file.path(), (&before, &before), &Map::new()).unwrap();
        let plan = read(file.path()).unwrap();
        let reference = json!({"urn": "urn:pulumi:dev::p::pulumi:pulumi:StackReference::r", "custom": true, "type": "pulumi:pulumi:StackReference", "inputs": {"name": "o/q/dev"}, "outputs": {"name": "o/q/dev"}});
        let after = [stack(json!({})), reference];
        assert_eq!(
            check(&plan, &before, &after),
            Err(
                "create is not allowed by the plan: no steps were expected for this resource"
                    .into()
            )
        );
        // Planned, and gone from the program: its create never comes.
        save(file.path(), (&before, &after), &Map::new()).unwrap();
        let plan = read(file.path()).unwrap();
        assert_eq!(
            check(&plan, &before, &before),
            Err("expected resource operations for urn:pulumi:dev::p::pulumi:pulumi:StackReference::r but none were seen".into())
        );
    }
}
