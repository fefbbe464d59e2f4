//! Hooks (SPEC §6.4): what runs after a project's successful `up` (`on_success`) or `destroy`
//! (`on_destroy`).
//!
//! `kubeconfig` after `up` reads the named stack output (YAML or JSON text, base64 of either, or an
//! object), writes `<state_dir>/kube/<stack>.yaml` (mode 0600, atomically) and, with `merge`,
//! upserts its clusters, users and contexts by name into the user's kubeconfig (the first path
//! of `KUBECONFIG`, else `~/.kube/config`), sets `current-context`, keeps a backup beside it and
//! touches nothing else. After `destroy` it removes what it wrote: the stack's file, and from the
//! user's kubeconfig every entry identical to one in that file.
//!
//! `command` runs `sh -c <run>` in the project's directory with `MARA_STACK`, `MARA_PROJECT`,
//! `MARA_PROVIDER`, `MARA_KUBECONFIG` and every stack output as `MARA_OUTPUT_<NAME>`.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Map, Value};

use super::project::ProjectJob;
use crate::engine::{Operation, Step, StepKind};
use crate::provider::Hook;

/// What hooks need to know about the run.
#[derive(Debug, Clone)]
pub struct HookContext {
    pub workspace_root: PathBuf,
    pub stack: String,
    pub provider: String,
    /// `<state_dir>/kube/<stack>.yaml`.
    pub kubeconfig_file: PathBuf,
    pub env: Arc<BTreeMap<String, String>>,
}

impl HookContext {
    /// The user's kubeconfig: the first path of `KUBECONFIG`, else `~/.kube/config`.
    pub fn user_kubeconfig(&self) -> Option<PathBuf> {
        if let Some(first) = self
            .env
            .get("KUBECONFIG")
            .and_then(|k| k.split(':').find(|p| !p.is_empty()))
        {
            return Some(PathBuf::from(first));
        }
        self.env
            .get("HOME")
            .filter(|h| !h.is_empty())
            .map(|home| Path::new(home).join(".kube").join("config"))
    }

    fn shown(&self, path: &Path) -> String {
        path.strip_prefix(&self.workspace_root)
            .unwrap_or(path)
            .display()
            .to_string()
    }
}

/// Runs one hook; the lines to show, or why the project fails.
pub async fn run(
    hook: &Hook,
    job: &ProjectJob,
    outputs: &Value,
    context: &HookContext,
) -> Result<Vec<String>, String> {
    match (hook, job.operation) {
        (Hook::Kubeconfig { output, merge }, Operation::Up) => {
            write_kubeconfig(context, outputs, output, *merge)
        }
        (Hook::Kubeconfig { .. }, _) => remove_kubeconfig(context),
        (Hook::Command { run }, _) => {
            let mut env = (*context.env).clone();
            env.insert("MARA_STACK".into(), context.stack.clone());
            env.insert("MARA_PROJECT".into(), job.path.clone());
            env.insert("MARA_PROVIDER".into(), context.provider.clone());
            env.insert(
                "MARA_KUBECONFIG".into(),
                context.kubeconfig_file.display().to_string(),
            );
            for (name, value) in outputs.as_object().into_iter().flatten() {
                let text = match value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                env.insert(output_variable(name), text);
            }
            let cwd = if job.dir.is_dir() {
                job.dir.clone()
            } else {
                context.workspace_root.clone()
            };
            let step = Step::new(
                StepKind::Operation,
                "sh",
                vec!["-c".into(), run.clone()],
                cwd,
            );
            job.run_hook_process(&step, &env)
                .await
                .map(|()| Vec::new())
                .map_err(|e| format!("the hook `{run}` failed: {e}"))
        }
    }
}

/// `cluster-name` → `MARA_OUTPUT_CLUSTER_NAME`.
pub fn output_variable(name: &str) -> String {
    crate::provider::env_var_name("MARA_OUTPUT_", name)
}

fn write_kubeconfig(
    context: &HookContext,
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
    write_private(&context.kubeconfig_file, &text)
        .map_err(|e| format!("cannot write {}: {e}", context.kubeconfig_file.display()))?;
    let mut lines = vec![format!(
        "kubeconfig written to {}",
        context.shown(&context.kubeconfig_file)
    )];
    if merge {
        let Some(target) = context.user_kubeconfig() else {
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

fn remove_kubeconfig(context: &HookContext) -> Result<Vec<String>, String> {
    let Some(ours) = read_kubeconfig(&context.kubeconfig_file)? else {
        return Ok(Vec::new());
    };
    let mut lines = Vec::new();
    if let Some(target) = context.user_kubeconfig()
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
    std::fs::remove_file(&context.kubeconfig_file)
        .map_err(|e| format!("cannot remove {}: {e}", context.kubeconfig_file.display()))?;
    lines.push(format!(
        "removed {}",
        context.shown(&context.kubeconfig_file)
    ));
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

/// Writes `text` to `path` atomically (a temporary file beside it, then a rename) with mode 0600.
pub fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    write_atomic(path, text, 0o600)
}

/// Writes `text` to `path` atomically with `mode`: a reader sees the old file or the new one,
/// never a part.
pub fn write_atomic(path: &Path, text: &str, mode: u32) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let temp = dir.join(format!(
        ".{}.mara-{}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&temp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temp);
    })
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

    #[test]
    fn private_files_are_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kube/dev.yaml");
        write_private(&path, "x").unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "x");
    }

    #[test]
    fn output_variables() {
        assert_eq!(output_variable("cluster_name"), "MARA_OUTPUT_CLUSTER_NAME");
        assert_eq!(
            output_variable("lb-ingress.ip"),
            "MARA_OUTPUT_LB_INGRESS_IP"
        );
    }
}
