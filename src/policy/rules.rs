//! The rules of the compiled policies, read off their syntax trees, and conftest's conventions
//! for what they say (docs/commands.md, "Policies").

use std::collections::BTreeMap;
use std::path::Path;

use super::Level;
use crate::error::{Location, Problem};

/// What a rule named `name` decides, by conftest's conventions: `deny`, `violation` and their
/// `_`-suffixed forms block; `warn` and its forms are shown.
pub(super) fn level_of(name: &str) -> Option<Level> {
    let is = |prefix: &str| {
        name == prefix
            || name
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with('_') && rest.len() > 1)
    };
    match () {
        _ if is("deny") || is("violation") => Some(Level::Deny),
        _ if is("warn") => Some(Level::Warn),
        _ => None,
    }
}

/// The rules of `packages` (by name, without `data.`) that decide, as `data.<package>.<rule>`,
/// each with its level.
pub(super) fn deciding(
    all: &BTreeMap<String, Vec<String>>,
    packages: &[String],
) -> Vec<(String, Level)> {
    let mut found = Vec::new();
    for package in packages {
        for rule in all.get(package).into_iter().flatten() {
            if let Some(level) = level_of(rule) {
                found.push((format!("data.{package}.{rule}"), level));
            }
        }
    }
    found
}

/// Every package's rules, by name (a rule defined in several bodies or files once), read from
/// the engine's syntax trees: a package `a.b` is `a.b`, a rule `deny contains msg if …`, `deny
/// [msg] { … }` or `deny_x := …` is its first name.
pub(super) fn of(engine: &regorus::Engine) -> Result<BTreeMap<String, Vec<String>>, String> {
    let text = engine.get_ast_as_json().map_err(|e| e.to_string())?;
    let policies: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let mut all: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for policy in policies.as_array().into_iter().flatten() {
        let ast = &policy["ast"];
        let Some(package) = dotted(&ast["package"]["refr"]) else {
            continue;
        };
        let rules = all.entry(package).or_default();
        for rule in ast["rules"].as_array().into_iter().flatten() {
            if let Some(name) = rule_name(rule)
                && !rules.contains(&name)
            {
                rules.push(name);
            }
        }
    }
    Ok(all)
}

/// A rule's first name: its head's reference, to its root variable.
fn rule_name(rule: &serde_json::Value) -> Option<String> {
    let refr = match (rule.get("Spec"), rule.get("Default")) {
        (Some(spec), _) => {
            let head = spec["head"].as_object()?.values().next()?;
            &head["refr"]
        }
        (None, Some(default)) => &default["refr"],
        _ => return None,
    };
    root_var(refr)
}

/// The variable a reference starts from (`deny` of `deny.x` or `deny[x]`).
fn root_var(expr: &serde_json::Value) -> Option<String> {
    if let Some(var) = expr.get("Var") {
        return var_name(var);
    }
    let inner = expr.get("RefDot").or_else(|| expr.get("RefBrack"))?;
    root_var(&inner["refr"])
}

/// A `Var` node's name (its value: a string).
fn var_name(var: &serde_json::Value) -> Option<String> {
    // `Var { span, value, eidx }`, serialized as an object, or as a tuple by older versions.
    let value = match var {
        serde_json::Value::Object(fields) => fields.get("value")?,
        serde_json::Value::Array(items) => items.get(1)?,
        _ => return None,
    };
    value.as_str().map(str::to_string)
}

/// A package's reference as dotted text (`a.b.c`).
fn dotted(expr: &serde_json::Value) -> Option<String> {
    if let Some(var) = expr.get("Var") {
        return var_name(var);
    }
    if let Some(dot) = expr.get("RefDot") {
        let field = dot["field"].as_array()?.get(1)?.as_str()?;
        return Some(format!("{}.{field}", dotted(&dot["refr"])?));
    }
    if let Some(brack) = expr.get("RefBrack") {
        let index = &brack["index"];
        let key = index.get("String").and_then(|s| s["value"].as_str())?;
        return Some(format!("{}.{key}", dotted(&brack["refr"])?));
    }
    None
}

/// An input as the engine takes it.
pub(super) fn value_of(input: &serde_json::Value) -> Result<regorus::Value, String> {
    serde_json::from_value(input.clone()).map_err(|e| e.to_string())
}

/// What a deciding rule's value says, by conftest's conventions: each string of a set (or
/// array) is a message; an object's `msg` is one, the rest of the object its details; a rule
/// that is `true` says its own name; false, empty and undefined say nothing.
pub(super) fn messages(value: &regorus::Value) -> Vec<(String, Option<String>)> {
    let json = match value {
        regorus::Value::Undefined => return Vec::new(),
        value => serde_json::to_value(value).unwrap_or(serde_json::Value::Null),
    };
    let items = match json {
        serde_json::Value::Array(items) => items,
        other => vec![other],
    };
    items.into_iter().filter_map(message).collect()
}

fn message(item: serde_json::Value) -> Option<(String, Option<String>)> {
    match item {
        serde_json::Value::String(text) => Some((text, None)),
        serde_json::Value::Bool(true) => Some(("(no message)".into(), None)),
        serde_json::Value::Object(mut fields) => {
            let text = match fields.remove("msg") {
                Some(serde_json::Value::String(text)) => text,
                Some(other) => other.to_string(),
                None => serde_json::Value::Object(fields.clone()).to_string(),
            };
            let details =
                (!fields.is_empty()).then(|| serde_json::Value::Object(fields).to_string());
            Some((text, details))
        }
        serde_json::Value::Null | serde_json::Value::Bool(false) => None,
        other => Some((other.to_string(), None)),
    }
}

/// What regorus says of an error — `--> file:line:col`, the source line marked, `error: …` —
/// as the file and line it names (when it names one) and its message.
pub(super) fn located(said: &str) -> (Option<Location>, String) {
    let at = (said.lines())
        .find_map(|l| l.trim_start().strip_prefix("--> "))
        .and_then(|place| {
            let mut parts = place.rsplitn(3, ':');
            let _column = parts.next()?;
            let line = parts.next()?.trim().parse::<usize>().ok()?;
            Some(Location::line(parts.next()?, line))
        });
    let message = (said.lines())
        .find_map(|l| l.trim_start().strip_prefix("error:"))
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| said.trim());
    (at, message.to_string())
}

/// A compile error of `file` as a problem at its line.
pub(super) fn compile_problem(file: &Path, said: &str) -> Problem {
    let (at, message) = located(said);
    // Conftest's older examples write Rego v0 (`deny[msg] { … }`).
    let hint = (message.contains("`if` keyword is required")).then_some(
        "mara reads Rego v1, as OPA 1.0 does: write `deny contains msg if { … }` for conftest's `deny[msg] { … }`",
    );
    Problem::new(format!("the policy does not compile: {message}"))
        .at(at.unwrap_or_else(|| Location::file(file)))
        .maybe_hint(hint.map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_said_at_its_line() {
        let said = "\n--> policy/b.rego:3:30\n  |\n3 | deny contains x if { x := foo(1) }\n  |                              ^\nerror: could not find function foo";
        let (at, message) = located(said);
        assert_eq!(at, Some(Location::line("policy/b.rego", 3)));
        assert_eq!(message, "could not find function foo");
        let (at, message) = located("plain words");
        assert_eq!((at, message.as_str()), (None, "plain words"));
    }

    #[test]
    fn conftests_rule_names_decide() {
        assert_eq!(level_of("deny"), Some(Level::Deny));
        assert_eq!(level_of("deny_public_bucket"), Some(Level::Deny));
        assert_eq!(level_of("violation"), Some(Level::Deny));
        assert_eq!(level_of("violation_tags"), Some(Level::Deny));
        assert_eq!(level_of("warn"), Some(Level::Warn));
        assert_eq!(level_of("warn_x"), Some(Level::Warn));
        assert_eq!(level_of("denied"), None);
        assert_eq!(level_of("deny_"), None);
        assert_eq!(level_of("test_deny"), None);
        assert_eq!(level_of("allow"), None);
    }
}
