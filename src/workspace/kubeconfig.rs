//! Which kubeconfig reaches a stack's cluster (docs/commands.md, "kubectl"): the one mara writes,
//! `<state_dir>/kube/<stack>.yaml` (with its own current context), else the file and context the
//! stack's configuration names (`kubernetes:kubeconfig`, `kubernetes:context`), as the kubeconfig
//! provider takes an existing cluster. `mara kubectl`, `mara cluster status` and the kubectl
//! engine all take it from here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::Workspace;
use super::stack::StackName;
use super::stack_config::StackConfig;

/// A kubeconfig file, and the context to use in it (`None`: its current context).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub file: PathBuf,
    pub context: Option<String>,
}

/// The stack's kubeconfig: the file mara writes when it exists; else the configured one, when
/// the configuration names another file; else the file mara writes (which does not exist yet).
pub fn choose(
    workspace: &Workspace,
    stack: &StackName,
    config: Option<&StackConfig>,
    env: &BTreeMap<String, String>,
) -> Choice {
    let written = workspace.kubeconfig_file(stack);
    let configured = config.and_then(|c| {
        let file = c.get_text("kubernetes:kubeconfig")?;
        let file = workspace.root.join(expand_home(&file, env));
        Some((file, c.get_text("kubernetes:context")))
    });
    match configured {
        Some((file, context)) if !written.is_file() && file != written => Choice { file, context },
        _ => Choice {
            file: written,
            context: None,
        },
    }
}

/// `~/…` against the environment's HOME (a relative path is then taken from the workspace root).
fn expand_home(path: &str, env: &BTreeMap<String, String>) -> PathBuf {
    match (path.strip_prefix("~/"), env.get("HOME")) {
        (Some(rest), Some(home)) => Path::new(home).join(rest),
        _ => PathBuf::from(path),
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

/// The user's kubeconfig at `path`, read as kubectl reads it — `None` when there is none — or why
/// mara cannot merge into it (not YAML, not a mapping of lists), naming the file and line.
pub fn read_user(path: &Path) -> Result<Option<Value>, String> {
    // The user's file, read as every input is: a FIFO or a device is refused, not waited on.
    let text = match crate::workspace::read_input(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    // Read as kubectl reads it (YAML 1.1: `0755` is octal), so that what mara writes back of the
    // user's own entries means the same to it.
    let mut options = serde_saphyr::Options::default();
    options.legacy_octal_numbers = true;
    // A kubeconfig of thousands of clusters is read as kubectl reads it: the bounds on its size
    // are the input's (`read_input`), not a configuration file's count of nodes. The bounds on
    // aliases (which expand) stay.
    let mut budget = serde_saphyr::Budget::default();
    budget.max_events = 40_000_000;
    budget.max_nodes = 10_000_000;
    options.budget = Some(budget);
    let value = serde_saphyr::from_str_with_options::<Value>(&text, options).map_err(|e| {
        format!(
            "{} is not valid YAML ({}); it was left unchanged",
            path.display(),
            crate::workspace::yaml::plain_message(&e)
        )
    })?;
    shaped(path, &text, &value)?;
    Ok(Some(value).filter(|v| !v.is_null()))
}

/// A kubeconfig mara can merge into: a mapping whose `clusters`, `users` and `contexts` are lists
/// (or absent). Anything else is refused, naming the file and line, and left as it is.
fn shaped(path: &Path, text: &str, value: &Value) -> Result<(), String> {
    let what = |v: &Value| match v {
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "true or false",
        Value::Null => "empty",
    };
    let Value::Object(map) = value else {
        if value.is_null() {
            return Ok(());
        }
        return Err(format!(
            "{}:1: a kubeconfig is a mapping (`apiVersion`, `clusters`, …), and this one is {}: it was left unchanged",
            path.display(),
            what(value)
        ));
    };
    for section in ["clusters", "users", "contexts"] {
        match map.get(section) {
            None | Some(Value::Null) | Some(Value::Array(_)) => {}
            Some(other) => {
                let line = text
                    .lines()
                    .position(|l| l.starts_with(&format!("{section}:")))
                    .map_or(1, |i| i + 1);
                return Err(format!(
                    "{}:{line}: `{section}` is {}, where kubectl has a list: it was left unchanged",
                    path.display(),
                    what(other)
                ));
            }
        }
    }
    Ok(())
}
