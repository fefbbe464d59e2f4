//! mara's mark on the entries it merges into a user's kubeconfig (docs/commands.md, "Hooks";
//! docs/decisions.md, "Kubeconfig ownership travels with the kubeconfig (issue 42)").
//!
//! A kubeconfig's cluster, user and context each carry `extensions`, a list of `{name,
//! extension}` that kubectl keeps when it rewrites the file. mara's is named `mara`:
//!
//! ```yaml
//! extensions:
//! - name: mara
//!   extension:
//!     workspace: gitlab.example.com/g/p   # the workspace's identity (workspace::identity)
//!     stack: dev
//!     digest: sha256:…                    # the entry as mara wrote it
//! ```
//!
//! The entry is mara's for a stack of a workspace when its mark names them; it is unchanged
//! since mara wrote it when its digest is the one in the mark. The digest is taken of the entry
//! without the mark, in a form kubectl's own rewrites do not change: keys sorted, an empty,
//! `false` or null value the same as none, an exec credential's `interactiveMode: IfAvailable`
//! (kubectl's default) the same as none. It is a SHA-256: it tells whether an entry changed, and
//! nothing of what the entry holds.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::workspace::identity::Identity;

/// The name of mara's extension.
pub const EXTENSION: &str = "mara";

/// Whose merge an entry is: a workspace (by its identity) and one of its stacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub workspace: Identity,
    pub stack: String,
}

impl Owner {
    pub fn new(workspace: Identity, stack: &str) -> Owner {
        Owner {
            workspace,
            stack: stack.to_string(),
        }
    }

    /// The owner as the chain of contexts beside a user's kubeconfig names it: `<stack>@<workspace>`
    /// (a stack name has no `@`).
    pub fn key(&self) -> String {
        key(&self.stack, &self.workspace.name)
    }

    /// The keys the owner had under its identity's aliases.
    pub fn alias_keys(&self) -> Vec<String> {
        (self.workspace.aliases.iter())
            .map(|alias| key(&self.stack, alias))
            .collect()
    }

    fn owns(&self, mark: &Mark) -> bool {
        mark.stack == self.stack && self.workspace.answers_to(&mark.workspace)
    }
}

fn key(stack: &str, workspace: &str) -> String {
    format!("{stack}@{workspace}")
}

/// What mara's extension says of an entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    pub workspace: String,
    pub stack: String,
    pub digest: String,
}

/// Whose an entry of a user's kubeconfig is, to an owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The owner's, and whether it is as mara wrote it.
    Ours { unchanged: bool },
    /// Marked by mara for another stack or workspace.
    Theirs(Mark),
    /// Without mara's mark (or with one mara cannot read): the user's.
    Unmarked,
}

/// The field of an entry of `section` that holds its extensions: `cluster`, `user`, `context`.
pub(super) fn body(section: &str) -> &'static str {
    match section {
        "clusters" => "cluster",
        "users" => "user",
        _ => "context",
    }
}

/// Whose the entry of `section` is, to `owner`.
pub fn claim(section: &str, entry: &Value, owner: &Owner) -> Claim {
    match mark_of(section, entry) {
        Some(mark) if owner.owns(&mark) => Claim::Ours {
            unchanged: digest(section, entry) == mark.digest,
        },
        Some(mark) => Claim::Theirs(mark),
        None => Claim::Unmarked,
    }
}

/// mara's mark on an entry of `section`, if it carries one mara can read.
pub fn mark_of(section: &str, entry: &Value) -> Option<Mark> {
    let extensions = entry.get(body(section))?.get("extensions")?.as_array()?;
    let ours = extensions
        .iter()
        .find(|e| e.get("name").and_then(Value::as_str) == Some(EXTENSION))?;
    serde_json::from_value(ours.get("extension")?.clone()).ok()
}

/// The entry of `section` with `owner`'s mark, its digest of the entry as it is: added last to
/// its extensions, or in place of a mark of mara's it had.
pub fn marked(section: &str, entry: &Value, owner: &Owner) -> Value {
    let mark = Mark {
        workspace: owner.workspace.name.clone(),
        stack: owner.stack.clone(),
        digest: digest(section, entry),
    };
    let extension = serde_json::json!({
        "name": EXTENSION,
        "extension": serde_json::to_value(mark).expect("a mark serializes"),
    });
    let mut entry = entry.clone();
    let body = entry
        .as_object_mut()
        .map(|e| e.entry(body(section)).or_insert_with(|| Map::new().into()));
    let Some(Value::Object(body)) = body else {
        // An entry that is not a mapping, or whose body is not: mara does not merge one.
        return entry;
    };
    let list = body
        .entry("extensions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    let list = list.as_array_mut().expect("an array");
    match list
        .iter_mut()
        .find(|e| e.get("name").and_then(Value::as_str) == Some(EXTENSION))
    {
        Some(existing) => *existing = extension,
        None => list.push(extension),
    }
    entry
}

/// The digest of an entry of `section` without mara's mark, as kubectl's rewrites leave it
/// (see the module's comment).
pub fn digest(section: &str, entry: &Value) -> String {
    let mut entry = entry.clone();
    if let Some(Value::Object(body)) = entry.get_mut(body(section))
        && let Some(Value::Array(list)) = body.get_mut("extensions")
    {
        list.retain(|e| e.get("name").and_then(Value::as_str) != Some(EXTENSION));
    }
    let mut text = String::new();
    canonical(&entry, false, &mut text);
    let hash = Sha256::digest(text.as_bytes());
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// Whether two entries of `section` are the same once kubectl's rewrites are set aside.
pub fn same(section: &str, a: &Value, b: &Value) -> bool {
    digest(section, a) == digest(section, b)
}

/// `value` as JSON with its keys sorted and what kubectl leaves out or adds by default left out
/// (`in_exec`: inside an exec credential).
fn canonical(value: &Value, in_exec: bool, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map
                .iter()
                .filter(|(k, v)| !(nothing(v) || in_exec && kubectl_default(k, v)))
                .map(|(k, _)| k)
                .collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(&map[key], key == "exec", out);
            }
            out.push('}');
        }
        Value::Array(list) => {
            out.push('[');
            for (i, item) in list.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, false, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A value kubectl writes as no value at all: null, `false`, empty text, an empty list or map.
fn nothing(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// A field kubectl adds to an exec credential when it rewrites the file.
fn kubectl_default(key: &str, value: &Value) -> bool {
    key == "interactiveMode" && value.as_str() == Some("IfAvailable")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::identity::Source;
    use serde_json::json;

    fn owner(workspace: &str, stack: &str) -> Owner {
        Owner::new(Identity::named(workspace, Source::Configured), stack)
    }

    #[test]
    fn a_marked_entry_is_its_owner_s_until_it_changes() {
        let shop = owner("shop", "dev");
        let entry =
            json!({"name": "mara-dev", "user": {"exec": {"command": "aws", "args": ["eks"]}}});
        let ours = marked("users", &entry, &shop);
        assert_eq!(
            ours["user"]["extensions"][0]["extension"]["workspace"],
            "shop"
        );
        assert_eq!(
            claim("users", &ours, &shop),
            Claim::Ours { unchanged: true }
        );
        // Marked again: the mark is replaced, never doubled.
        let again = marked("users", &ours, &shop);
        assert_eq!(again, ours);
        // As kubectl writes it back: its defaults and empty fields change nothing.
        let mut rewritten = ours.clone();
        rewritten["user"]["exec"]["env"] = Value::Null;
        rewritten["user"]["exec"]["provideClusterInfo"] = json!(false);
        rewritten["user"]["exec"]["interactiveMode"] = json!("IfAvailable");
        assert_eq!(
            claim("users", &rewritten, &shop),
            Claim::Ours { unchanged: true }
        );
        // Changed by its user: still theirs to replace, but changed.
        let mut edited = ours.clone();
        edited["user"]["exec"]["args"] = json!(["eks", "--profile", "mine"]);
        assert_eq!(
            claim("users", &edited, &shop),
            Claim::Ours { unchanged: false }
        );
        // Another stack's, another workspace's, the user's own.
        let prod = owner("shop", "prod");
        assert!(matches!(claim("users", &ours, &prod), Claim::Theirs(m) if m.stack == "dev"));
        let other = owner("other", "dev");
        assert!(matches!(claim("users", &ours, &other), Claim::Theirs(m) if m.workspace == "shop"));
        assert_eq!(claim("users", &entry, &shop), Claim::Unmarked);
        // An alias of the workspace's: its own.
        let mut renamed = Identity::named("gitlab.example.com/g/p", Source::Remote);
        renamed.aliases.push("shop".into());
        assert_eq!(
            claim("users", &ours, &Owner::new(renamed, "dev")),
            Claim::Ours { unchanged: true }
        );
    }

    #[test]
    fn the_mark_keeps_the_entry_s_other_extensions() {
        let entry = json!({"name": "c", "cluster": {"server": "https://a", "extensions": [
            {"name": "cluster_info", "extension": {"provider": "minikube.sigs.k8s.io"}}
        ]}});
        let ours = marked("clusters", &entry, &owner("w", "dev"));
        let names: Vec<&str> = ours["cluster"]["extensions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["cluster_info", "mara"]);
        assert!(same("clusters", &entry, &ours), "the mark is not the entry");
    }

    #[test]
    fn nothing_the_entry_holds_is_in_its_mark() {
        let entry = json!({"name": "u", "user": {"token": "hunter2-token"}});
        let ours = marked("users", &entry, &owner("w", "dev"));
        let mark = serde_json::to_string(&ours["user"]["extensions"]).unwrap();
        assert!(!mark.contains("hunter2"), "{mark}");
        let digest = mark_of("users", &ours).unwrap().digest;
        assert!(
            digest.starts_with("sha256:") && digest.len() == 71,
            "{digest}"
        );
    }
}
