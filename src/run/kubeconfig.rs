//! The kubeconfig hook's files (docs/formats.md, "Providers"; docs/commands.md, "up, preview,
//! refresh, destroy"): the stack's own kubeconfig `<state_dir>/kube/<stack>.yaml` (mode 0600,
//! written atomically), and its entries merged into the user's kubeconfig (the first path of
//! `KUBECONFIG`, else `~/.kube/config`) — upserted by name, `current-context` set, a backup kept
//! beside it, nothing else touched. Unmerging removes every entry identical to one in the stack's
//! file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{Map, Value};

use crate::files::write_private;

/// Where the hook writes: the stack's file, and the user's kubeconfig it merges into.
#[derive(Debug, Clone)]
pub struct Files {
    /// `<state_dir>/kube/<stack>.yaml`.
    pub stack: PathBuf,
    /// The workspace root, to name the stack's file shortly.
    pub root: PathBuf,
}

impl Files {
    fn shown(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }
}

/// The user's kubeconfig: the first path of `KUBECONFIG`, else `~/.kube/config`.
pub fn user_kubeconfig(env: &BTreeMap<String, String>) -> Option<PathBuf> {
    if let Some(first) = env
        .get("KUBECONFIG")
        .and_then(|k| k.split(':').find(|p| !p.is_empty()))
    {
        return Some(PathBuf::from(first));
    }
    env.get("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| Path::new(home).join(".kube").join("config"))
}

/// After `up`: writes the stack output `output` as the stack's kubeconfig, and with `merge` into
/// the user's. The lines to show, or why the project fails.
pub fn write(
    files: &Files,
    env: &BTreeMap<String, String>,
    outputs: &Value,
    output: &str,
    merge: bool,
) -> Result<Vec<String>, String> {
    let value = outputs.get(output).ok_or_else(|| {
        format!(
            "the kubeconfig hook needs the stack output `{output}`, which the stack does not have"
        )
    })?;
    let kubeconfig = decode_kubeconfig(value)
        .map_err(|e| format!("the stack output `{output}` is not a kubeconfig: {e}"))?;
    let text = serde_saphyr::to_string(&kubeconfig).map_err(|e| e.to_string())?;
    write_private(&files.stack, &text)
        .map_err(|e| format!("cannot write {}: {e}", files.stack.display()))?;
    let mut lines = vec![format!(
        "kubeconfig written to {}",
        files.shown(&files.stack)
    )];
    if merge {
        let Some(target) = user_kubeconfig(env) else {
            return Err("cannot merge the kubeconfig: neither KUBECONFIG nor HOME is set".into());
        };
        let existing = read_kubeconfig(&target)?;
        let merged = merge_kubeconfig(existing.clone(), &kubeconfig);
        if existing.as_ref() != Some(&merged) {
            if target.exists() {
                let backup = backup_path(&target);
                std::fs::copy(&target, &backup)
                    .map_err(|e| format!("cannot back up {}: {e}", target.display()))?;
            }
            let text = serde_saphyr::to_string(&merged).map_err(|e| e.to_string())?;
            write_private(&target, &text)
                .map_err(|e| format!("cannot write {}: {e}", target.display()))?;
        }
        let context_name = merged
            .get("current-context")
            .and_then(Value::as_str)
            .unwrap_or_default();
        lines.push(format!(
            "merged into {} (current context: {context_name})",
            target.display()
        ));
    }
    Ok(lines)
}

/// After `destroy`: removes what `write` wrote: the stack's entries from the user's kubeconfig,
/// and the stack's file.
pub fn remove(files: &Files, env: &BTreeMap<String, String>) -> Result<Vec<String>, String> {
    let Some(ours) = read_kubeconfig(&files.stack)? else {
        return Ok(Vec::new());
    };
    let mut lines = Vec::new();
    if let Some(target) = user_kubeconfig(env)
        && let Some(existing) = read_kubeconfig(&target)?
    {
        let cleaned = unmerge_kubeconfig(existing.clone(), &ours);
        if cleaned != existing {
            std::fs::copy(&target, backup_path(&target))
                .map_err(|e| format!("cannot back up {}: {e}", target.display()))?;
            let text = serde_saphyr::to_string(&cleaned).map_err(|e| e.to_string())?;
            write_private(&target, &text)
                .map_err(|e| format!("cannot write {}: {e}", target.display()))?;
            lines.push(format!(
                "removed the stack's entries from {}",
                target.display()
            ));
        }
    }
    std::fs::remove_file(&files.stack)
        .map_err(|e| format!("cannot remove {}: {e}", files.stack.display()))?;
    lines.push(format!("removed {}", files.shown(&files.stack)));
    Ok(lines)
}

/// `config` → `config.mara.bak`, beside it.
fn backup_path(target: &Path) -> PathBuf {
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(".mara.bak");
    target.with_file_name(name)
}

fn read_kubeconfig(path: &Path) -> Result<Option<Value>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    serde_saphyr::from_str::<Value>(&text)
        .map(Some)
        .map_err(|e| {
            format!(
                "{} is not valid YAML ({}); it was left unchanged",
                path.display(),
                e.without_snippet()
                    .to_string()
                    .lines()
                    .next()
                    .unwrap_or_default()
            )
        })
}

/// A kubeconfig from an output: an object, or YAML/JSON text, or base64 of either.
pub fn decode_kubeconfig(value: &Value) -> Result<Value, String> {
    let parsed = match value {
        Value::Object(_) => value.clone(),
        Value::String(text) => match parse_text(text) {
            Some(v) => v,
            None => {
                let compact: String = text.split_whitespace().collect();
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(compact)
                    .map_err(|_| "neither YAML, JSON nor base64".to_string())?;
                let decoded = String::from_utf8(bytes)
                    .map_err(|_| "base64 of something that is not text".to_string())?;
                parse_text(&decoded).ok_or("base64 of something that is not a kubeconfig")?
            }
        },
        _ => return Err("not an object or text".into()),
    };
    let is_kubeconfig = parsed.get("clusters").is_some() || parsed.get("contexts").is_some();
    if is_kubeconfig {
        Ok(parsed)
    } else {
        Err("it has no clusters or contexts".into())
    }
}

fn parse_text(text: &str) -> Option<Value> {
    serde_saphyr::from_str::<Value>(text)
        .ok()
        .filter(Value::is_object)
}

const SECTIONS: [&str; 3] = ["clusters", "users", "contexts"];

/// Upserts the clusters, users and contexts of `new` into `existing` by name, and sets the current
/// context; everything else of `existing` is kept as it was.
pub fn merge_kubeconfig(existing: Option<Value>, new: &Value) -> Value {
    let mut merged = match existing {
        Some(Value::Object(map)) => map,
        _ => Map::from_iter([
            ("apiVersion".into(), Value::from("v1")),
            ("kind".into(), Value::from("Config")),
        ]),
    };
    for section in SECTIONS {
        let list = merged
            .entry(section)
            .or_insert_with(|| Value::Array(Vec::new()));
        if !list.is_array() {
            *list = Value::Array(Vec::new());
        }
        let list = list.as_array_mut().expect("an array");
        for entry in new
            .get(section)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = entry.get("name");
            match list.iter_mut().find(|e| e.get("name") == name) {
                Some(existing) => *existing = entry.clone(),
                None => list.push(entry.clone()),
            }
        }
    }
    let current = new
        .get("current-context")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .or_else(|| {
            new.get("contexts")?
                .as_array()?
                .first()?
                .get("name")?
                .as_str()
                .map(str::to_string)
        });
    if let Some(current) = current {
        merged.insert("current-context".into(), Value::String(current));
    }
    Value::Object(merged)
}

/// Removes from `existing` every cluster, user and context identical to one in `ours`.
pub fn unmerge_kubeconfig(existing: Value, ours: &Value) -> Value {
    let Value::Object(mut map) = existing else {
        return existing;
    };
    for section in SECTIONS {
        let ours: Vec<&Value> = ours
            .get(section)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .collect();
        if let Some(Value::Array(list)) = map.get_mut(section) {
            list.retain(|entry| !ours.contains(&entry));
        }
    }
    let our_contexts: Vec<&str> = ours
        .get("contexts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("name")?.as_str())
        .collect();
    if map
        .get("current-context")
        .and_then(Value::as_str)
        .is_some_and(|c| our_contexts.contains(&c))
    {
        map.remove("current-context");
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ours() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "mara-dev", "cluster": {"server": "https://127.0.0.1:6443"}}],
            "users": [{"name": "mara-dev-admin", "user": {"token": "t"}}],
            "contexts": [{"name": "mara-dev", "context": {"cluster": "mara-dev", "user": "mara-dev-admin"}}],
            "current-context": "mara-dev",
        })
    }

    #[test]
    fn every_encoding_of_a_kubeconfig_decodes() {
        let yaml = serde_saphyr::to_string(&ours()).unwrap();
        let json_text = ours().to_string();
        let b64 = base64::engine::general_purpose::STANDARD.encode(&yaml);
        for value in [
            ours(),
            Value::String(yaml),
            Value::String(json_text),
            Value::String(b64),
        ] {
            assert_eq!(
                decode_kubeconfig(&value).unwrap()["current-context"],
                "mara-dev"
            );
        }
        assert!(decode_kubeconfig(&Value::String("hello".into())).is_err());
    }

    #[test]
    fn merging_upserts_by_name_and_keeps_the_rest() {
        let existing = json!({
            "apiVersion": "v1", "kind": "Config", "preferences": {"colors": true},
            "clusters": [{"name": "prod", "cluster": {"server": "https://prod"}}, {"name": "mara-dev", "cluster": {"server": "old"}}],
            "users": [{"name": "me", "user": {}}],
            "contexts": [{"name": "prod", "context": {"cluster": "prod", "user": "me"}}],
            "current-context": "prod",
        });
        let merged = merge_kubeconfig(Some(existing.clone()), &ours());
        assert_eq!(merged["clusters"].as_array().unwrap().len(), 2);
        assert_eq!(
            merged["clusters"][1]["cluster"]["server"],
            "https://127.0.0.1:6443"
        );
        assert_eq!(merged["contexts"].as_array().unwrap().len(), 2);
        assert_eq!(merged["current-context"], "mara-dev");
        assert_eq!(merged["preferences"], json!({"colors": true}));
        let cleaned = unmerge_kubeconfig(merged, &ours());
        assert_eq!(cleaned["contexts"], existing["contexts"]);
        assert_eq!(cleaned["users"], existing["users"]);
        assert!(cleaned.get("current-context").is_none());
    }
}
