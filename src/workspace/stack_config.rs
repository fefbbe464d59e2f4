//! The shared stack configuration `<config_dir>/Pulumi.<stack>.yaml` (docs/formats.md, "Stack
//! configuration"), read as Pulumi writes it: a mapping with a `config:` mapping of namespaced
//! keys, whose values may be nested and whose `secure:` values are secrets that mara never shows.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::{Error, Location, Problem, Result};
use crate::workspace::config_path::{ConfigPath, Found, Step};
use crate::workspace::yaml_nodes::{self, Edit, Seg};
use crate::workspace::{yaml, yaml_edit};

/// The key that records which provider built the stack.
pub const INFRA_TYPE_KEY: &str = "kubernetes:infra_type";

/// The key that names the kubeconfig file of a stack's cluster.
pub const KUBECONFIG_KEY: &str = "kubernetes:kubeconfig";

/// A stack configuration file's state: a missing or empty file means the stack's first run.
#[derive(Debug, Clone)]
pub enum StackConfigFile {
    Missing(PathBuf),
    /// The file exists but holds no configuration keys.
    Empty {
        path: PathBuf,
        text: String,
    },
    Present(StackConfig),
}

impl StackConfigFile {
    pub fn load(path: &Path) -> Result<StackConfigFile> {
        let text = match super::read_input(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(StackConfigFile::Missing(path.to_path_buf()));
            }
            Err(e) => return Err(Error::read(path, e)),
        };
        StackConfigFile::from_text(path, text)
    }

    /// Edits the file at `path` as it is now: under an exclusive lock of its directory
    /// (`files::DirLock`), it is read afresh, `change` says what to write (`None`: nothing),
    /// and that is written in place of it (`files::rewrite`). Concurrent edits (twenty `config
    /// set` at once, a run recording `kubernetes:infra_type`) take turns, each on what the one
    /// before wrote. The file as written, when it was.
    pub fn edit(
        path: &Path,
        change: impl FnOnce(&StackConfigFile) -> Result<Option<String>>,
    ) -> Result<Option<StackConfigFile>> {
        // The directory of the file itself: workspaces that share one configuration through
        // symlinks take their turns on it.
        let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let dir = real.parent().unwrap_or(Path::new("."));
        let _turn = crate::files::DirLock::take(dir).map_err(|e| Error::write(path, e))?;
        let current = StackConfigFile::load(path)?;
        let Some(text) = change(&current)? else {
            return Ok(None);
        };
        crate::files::rewrite(path, &text).map_err(|e| Error::write(path, e))?;
        StackConfigFile::from_text(path, text).map(Some)
    }

    /// The file at `path` holding `text` (what mara has just written, without reading it back).
    pub fn from_text(path: &Path, text: String) -> Result<StackConfigFile> {
        let config = StackConfig::parse(path, &text)?;
        Ok(if config.values.is_empty() {
            StackConfigFile::Empty {
                path: path.to_path_buf(),
                text,
            }
        } else {
            StackConfigFile::Present(config)
        })
    }

    /// The file's text as read (empty when there is no file).
    pub fn text(&self) -> &str {
        match self {
            StackConfigFile::Missing(_) => "",
            StackConfigFile::Empty { text, .. } => text,
            StackConfigFile::Present(config) => &config.text,
        }
    }

    /// The text a fingerprint hashes: the file's, without mara's own bookkeeping — the line of
    /// `kubernetes:infra_type`, which a stack's first `up` adds to a file that lacks it, and which
    /// no project reads — so that recording it is no change (docs/commands.md, `--changed`).
    pub fn fingerprinted(&self) -> String {
        let bookkeeping = |line: &str| {
            let key = line.trim_start().trim_start_matches(['"', '\'']);
            key.strip_prefix(INFRA_TYPE_KEY)
                .is_some_and(|rest| rest.trim_start_matches(['"', '\'']).starts_with(':'))
        };
        (self.text().split_inclusive('\n'))
            .filter(|line| !bookkeeping(line))
            .collect()
    }

    pub fn path(&self) -> &Path {
        match self {
            StackConfigFile::Missing(path) | StackConfigFile::Empty { path, .. } => path,
            StackConfigFile::Present(config) => &config.path,
        }
    }

    pub fn config(&self) -> Option<&StackConfig> {
        match self {
            StackConfigFile::Present(config) => Some(config),
            _ => None,
        }
    }

    pub fn is_first_run(&self) -> bool {
        self.config().is_none()
    }

    /// Whether there is no file at all (an empty one is a stack configured with nothing).
    pub fn is_missing(&self) -> bool {
        matches!(self, StackConfigFile::Missing(_))
    }

    /// The file's text with `value` at `path` and nothing else changed (docs/decisions.md,
    /// "Typed, nested configuration").
    pub fn with_value(
        &self,
        path: &ConfigPath,
        value: &Value,
    ) -> std::result::Result<String, EditError> {
        let mut expected = self.config().map(|c| c.values.clone()).unwrap_or_default();
        path.set(&mut expected, value.clone())
            .map_err(EditError::Shape)?;
        let text = yaml_edit::set(self.text(), path, &expected).map_err(EditError::Layout)?;
        // Certain means: the whole document reads back as before but for the value, and every
        // comment is still there.
        let mut document = match yaml::parse_value(self.path(), self.text()) {
            Ok(Value::Object(document)) => document,
            _ => Map::new(),
        };
        document.insert("config".into(), Value::Object(expected));
        let read = yaml::parse_value(self.path(), &text).ok();
        let now = yaml_edit::comments(&text);
        let kept = yaml_edit::comments(self.text())
            .iter()
            .all(|c| now.contains(c));
        match read {
            Some(Value::Object(read)) if read == document && kept => {
                as_written(self.text(), &text, path, false)?;
                Ok(text)
            }
            _ => Err(EditError::Layout(
                "the file is laid out in a way that mara does not edit safely".into(),
            )),
        }
    }
}

/// `new` keeps every value of `old` that the edit of `path` does not change written as it was,
/// byte for byte (`yaml_nodes::preserved`): another YAML reader (Pulumi's) may read a value
/// rewritten from mara's reading of it otherwise (`no`, `0644`).
fn as_written(
    old: &str,
    new: &str,
    path: &ConfigPath,
    removes_item: bool,
) -> std::result::Result<(), EditError> {
    let mut segs = vec![Seg::Key("config".into()), Seg::Key(path.key.clone())];
    segs.extend(path.steps.iter().map(|step| match step {
        Step::Key(key) => Seg::Key(key.clone()),
        Step::Index(i) => Seg::Index(*i),
    }));
    let edit = Edit {
        path: segs,
        removes_item,
    };
    yaml_nodes::preserved(old, new, &edit).map_err(|why| {
        EditError::Layout(format!(
            "it would write other values anew ({why}), which YAML readers may read differently"
        ))
    })
}

impl StackConfigFile {
    /// The configuration the engines get. It is this file, unless `kubernetes:kubeconfig` holds a
    /// path relative to the workspace (`root`), as a stack's first run writes it so that the file
    /// says the same on every machine: engines run in each project's directory, where such a path
    /// leads elsewhere, so they get a copy (under `state_dir`) with the path made absolute.
    pub fn for_engines(&self, root: &Path, state_dir: &Path) -> Option<StackConfigFile> {
        let config = self.config()?;
        let path = ConfigPath::literal(KUBECONFIG_KEY);
        let Found::Value(Value::String(file)) = config.find(&path) else {
            return None;
        };
        if file.is_empty() || file.starts_with('~') || Path::new(file).is_absolute() {
            return None;
        }
        let absolute = Value::String(root.join(file).display().to_string());
        let text = self.with_value(&path, &absolute).ok()?;
        let name = self.path().file_name()?;
        StackConfigFile::from_text(&state_dir.join("config").join(name), text).ok()
    }

    /// The file's text without the entry at `path` and nothing else changed: certain, as for
    /// `with_value`, when the whole document reads back as before but for the entry, and every
    /// comment but those of the lines taken out is still there.
    pub fn without(&self, path: &ConfigPath) -> std::result::Result<String, EditError> {
        let mut expected = self.config().map(|c| c.values.clone()).unwrap_or_default();
        if !path.remove(&mut expected) {
            return Err(EditError::Shape(format!("`{path}` is not set in the file")));
        }
        // A list item: the list written anew without it (as `set` writes one), else the key's
        // lines taken out.
        let (text, removed) = match path.steps.iter().any(|s| matches!(s, Step::Index(_))) {
            true => {
                let mut list = path.clone();
                if let Some(Step::Index(_)) = list.steps.last() {
                    list.steps.pop();
                }
                (yaml_edit::set(self.text(), &list, &expected), Vec::new())
            }
            false => yaml_edit::remove(self.text(), path)
                .map(|(text, removed)| (Ok(text), removed))
                .map_err(EditError::Layout)?,
        };
        let text = text.map_err(EditError::Layout)?;
        let mut document = match yaml::parse_value(self.path(), self.text()) {
            Ok(Value::Object(document)) => document,
            _ => Map::new(),
        };
        document.insert("config".into(), Value::Object(expected));
        let read = yaml::parse_value(self.path(), &text).ok();
        let mut kept = yaml_edit::comments(self.text());
        for gone in yaml_edit::comments(&removed.concat()) {
            if let Some(at) = kept.iter().position(|c| *c == gone) {
                kept.remove(at);
            }
        }
        let empty = |v: &Value| v.as_object().is_some_and(|m| m.is_empty()) || v.is_null();
        let same = match &read {
            Some(Value::Object(read)) => {
                *read == document
                    // An emptied `config:` reads as nothing.
                    || (read.get("config").is_some_and(empty)
                        && document.get("config").is_some_and(empty)
                        && read.len() == document.len())
            }
            _ => false,
        };
        match same && yaml_edit::comments(&text) == kept {
            true => {
                let removes_item = matches!(path.steps.last(), Some(Step::Index(_)));
                as_written(self.text(), &text, path, removes_item)?;
                Ok(text)
            }
            false => Err(EditError::Layout(
                "the file is laid out in a way that mara does not edit safely".into(),
            )),
        }
    }
}

/// Why a value cannot be set in a file.
#[derive(Debug, Clone, PartialEq)]
pub enum EditError {
    /// A value on the way has another shape (a string where the path needs a mapping).
    Shape(String),
    /// The file is not laid out so that a line edit is certain; left to the person.
    Layout(String),
}

/// A parsed stack configuration.
#[derive(Debug, Clone)]
pub struct StackConfig {
    pub path: PathBuf,
    text: String,
    /// `config:` — namespaced key to value, in file order.
    pub values: Map<String, Value>,
}

/// A configuration value as mara may show it.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigValue<'a> {
    Secret,
    Plain(&'a Value),
}

impl StackConfig {
    pub fn parse(path: &Path, text: &str) -> Result<StackConfig> {
        let document = yaml::parse_value(path, text)?;
        let values = match document {
            Value::Null => Map::new(),
            Value::Object(mut top) => match top.remove("config") {
                None | Some(Value::Null) => Map::new(),
                Some(Value::Object(values)) => values,
                Some(_) => {
                    return Err(Error::config(
                        Problem::new("must be a mapping of `namespace:key: value` entries")
                            .at(location_of_key(path, text, "config"))
                            .subject("`config`"),
                    ));
                }
            },
            _ => {
                return Err(Error::config(
                    Problem::new(
                        "a stack configuration must be a YAML mapping with a `config:` key",
                    )
                    .in_file(path),
                ));
            }
        };
        Ok(StackConfig {
            path: path.to_path_buf(),
            text: text.to_string(),
            values,
        })
    }

    pub fn get(&self, key: &str) -> Option<ConfigValue<'_>> {
        self.values.get(key).map(|value| {
            if is_secure(value) {
                ConfigValue::Secret
            } else {
                ConfigValue::Plain(value)
            }
        })
    }

    pub fn contains(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    /// What `path` finds: a value, a secret, or nothing.
    pub fn find(&self, path: &ConfigPath) -> Found<'_> {
        path.find(&self.values)
    }

    /// Where `path` is set (its deepest key that the file has), for messages about its value.
    pub fn location_of_path(&self, path: &ConfigPath) -> Location {
        match yaml_edit::line_of(&self.text, path) {
            Some(line) => Location::line(&self.path, line),
            None => self.location_of(&path.key),
        }
    }

    /// A plain string value (numbers and booleans as their text); `None` for secrets and objects.
    pub fn get_text(&self, key: &str) -> Option<String> {
        match self.get(key)? {
            ConfigValue::Plain(Value::String(s)) => Some(s.clone()),
            ConfigValue::Plain(v @ (Value::Number(_) | Value::Bool(_))) => Some(v.to_string()),
            _ => None,
        }
    }

    /// `kubernetes:infra_type` as text; `Err` (with where it is) when it is set to something
    /// that is not text: a list, a mapping, a secret.
    pub fn infra_type(&self) -> std::result::Result<Option<String>, Box<Problem>> {
        match (self.contains(INFRA_TYPE_KEY), self.get_text(INFRA_TYPE_KEY)) {
            (_, Some(text)) => Ok(Some(text)),
            (false, None) => Ok(None),
            (true, None) => Err(Box::new(Problem::new(
                "kubernetes:infra_type is not a plain value: it names the provider that built the stack, as text",
            )
            .at(self.location_of(INFRA_TYPE_KEY))
            .hint("write it as `kubernetes:infra_type: AWS` (the provider's infra_type), or remove it and pass --provider"))),
        }
    }

    /// Where `key` is set, for messages about its value.
    pub fn location_of(&self, key: &str) -> Location {
        location_of_key(&self.path, &self.text, key)
    }

    /// The file's text with `key: value` (a plain string) added at the top of its `config:`
    /// mapping and nothing else changed — comments, order, quoting — or `None` when the file is
    /// not laid out so that this is certain (a flow-style mapping, say), or already has the key.
    pub fn with_key(&self, key: &str, value: &str) -> Option<String> {
        if self.contains(key) {
            return None;
        }
        let lines: Vec<&str> = self.text.split_inclusive('\n').collect();
        let at = lines.iter().position(|l| {
            let l = l.trim_end();
            l == "config:" || l.starts_with("config: #") || l.starts_with("config:  #")
        })?;
        // The mapping's indentation: that of its first key.
        let first = lines[at + 1..]
            .iter()
            .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))?;
        let indent = &first[..first.len() - first.trim_start().len()];
        if indent.is_empty() {
            return None;
        }
        let plain = !value.is_empty()
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            && value.parse::<f64>().is_err()
            && !matches!(
                value.to_ascii_lowercase().as_str(),
                "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "y" | "n"
            );
        let shown = match plain {
            true => value.to_string(),
            false => serde_json::to_string(value).expect("a string serializes"),
        };
        let mut text: String = lines[..=at].concat();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("{indent}{key}: {shown}\n"));
        text.push_str(&lines[at + 1..].concat());
        // Certain means: it reads back as before, with the key.
        let read = StackConfig::parse(&self.path, &text).ok()?;
        let mut expected = self.values.clone();
        expected.insert(key.to_string(), Value::String(value.to_string()));
        let same = read.values.len() == expected.len()
            && expected.iter().all(|(k, v)| read.values.get(k) == Some(v));
        same.then_some(text)
    }

    /// Keys without a namespace: Pulumi would give each project its own, so in a shared file they
    /// mean something different to every project.
    pub fn keys_without_namespace(&self) -> impl Iterator<Item = &str> {
        self.values
            .keys()
            .map(String::as_str)
            .filter(|k| !k.contains(':'))
    }
}

/// `{secure: …}` is how Pulumi stores an encrypted value.
pub use crate::engine::pulumi::is_secure;

/// The line of a mapping key in YAML text, found by its text (`key:` after indentation, optionally
/// quoted); the file alone when it cannot be found.
pub fn location_of_key(path: &Path, text: &str, key: &str) -> Location {
    let candidates = [
        format!("{key}:"),
        format!("\"{key}\":"),
        format!("'{key}':"),
    ];
    text.lines()
        .position(|line| {
            let line = line.trim_start();
            candidates.iter().any(|c| line.starts_with(c.as_str()))
        })
        .map_or_else(
            || Location::file(path),
            |index| Location::line(path, index + 1),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_item_is_removed_and_the_items_after_it_move_up() {
        let file = StackConfigFile::from_text(
            Path::new("/w/Pulumi.dev.yaml"),
            "config:\n  a:b: 1 # kept\n  app:list:\n    - x\n    - \"y\"\n  app:m:\n    l: [p, q]\n".into(),
        )
        .unwrap();
        let path = |p: &str| ConfigPath::parse(p).unwrap();
        assert_eq!(
            file.without(&path("app:list[0]")).unwrap(),
            "config:\n  a:b: 1 # kept\n  app:list:\n    - \"y\"\n  app:m:\n    l: [p, q]\n"
        );
        let edited = file.without(&path("app:m.l[1]")).unwrap();
        let reread = StackConfigFile::from_text(Path::new("/w/Pulumi.dev.yaml"), edited).unwrap();
        assert_eq!(
            reread.config().unwrap().values["app:m"],
            serde_json::json!({"l": ["p"]})
        );
        assert_eq!(
            file.without(&path("app:list[2]")),
            Err(EditError::Shape(
                "`app:list[2]` is not set in the file".into()
            ))
        );
    }

    #[test]
    fn engines_get_a_workspace_relative_kubeconfig_made_absolute() {
        let file = |text: &str| {
            StackConfigFile::from_text(Path::new("/w/config/pulumi/Pulumi.dev.yaml"), text.into())
                .unwrap()
        };
        let relative =
            file("config:\n  kubernetes:kubeconfig: .mara/kube/dev.yaml # ours\n  a:b: 1\n");
        let copy = relative
            .for_engines(Path::new("/w"), Path::new("/w/.mara"))
            .unwrap();
        assert_eq!(copy.path(), Path::new("/w/.mara/config/Pulumi.dev.yaml"));
        assert_eq!(
            copy.text(),
            "config:\n  kubernetes:kubeconfig: /w/.mara/kube/dev.yaml # ours\n  a:b: 1\n"
        );
        for text in [
            "config:\n  kubernetes:kubeconfig: /home/me/.kube/config\n",
            "config:\n  kubernetes:kubeconfig: ~/.kube/config\n",
            "config:\n  a:b: 1\n",
        ] {
            assert!(
                file(text)
                    .for_engines(Path::new("/w"), Path::new("/w/.mara"))
                    .is_none(),
                "{text}"
            );
        }
    }

    #[test]
    fn recording_the_provider_is_no_change_to_a_fingerprint() {
        let path = Path::new("Pulumi.dev.yaml");
        let before = "# mine\nconfig:\n  a:b: 1 # note\n";
        let after = "# mine\nconfig:\n  kubernetes:infra_type: AWS\n  a:b: 1 # note\n";
        let quoted = "# mine\nconfig:\n  \"kubernetes:infra_type\": AWS\n  a:b: 1 # note\n";
        let file = |text: &str| StackConfigFile::from_text(path, text.to_string()).unwrap();
        assert_eq!(file(after).fingerprinted(), file(before).fingerprinted());
        assert_eq!(file(quoted).fingerprinted(), before);
        // Anything else still counts.
        assert_ne!(
            file("config:\n  a:b: 2 # note\n").fingerprinted(),
            file(before).fingerprinted()
        );
        assert_eq!(
            file("config:\n  kubernetes:infra_types: x\n").fingerprinted(),
            "config:\n  kubernetes:infra_types: x\n"
        );
    }

    const TEXT: &str = "encryptionsalt: v1:abc\nconfig:\n  aws:region: us-west-2\n  eks:min_size: 3\n  kubernetes:infra_type: AWS\n  vpc:azs:\n    - us-west-2a\n  sirius:pwd:\n    secure: v1:xyz\n";

    #[test]
    fn a_key_is_added_keeping_everything_else() {
        let text = "# ours\nencryptionsalt: v1:abc\nconfig:\n    aws:region: us-west-2 # near\n    vpc:azs:\n        - a\n";
        let config = StackConfig::parse(Path::new("Pulumi.dev.yaml"), text).unwrap();
        assert_eq!(
            config.with_key(INFRA_TYPE_KEY, "AWS").unwrap(),
            "# ours\nencryptionsalt: v1:abc\nconfig:\n    kubernetes:infra_type: AWS\n    aws:region: us-west-2 # near\n    vpc:azs:\n        - a\n"
        );
        assert!(
            config
                .with_key(INFRA_TYPE_KEY, "true")
                .unwrap()
                .contains("kubernetes:infra_type: \"true\"\n")
        );
        let flow = StackConfig::parse(Path::new("p"), "config: {aws:region: x}\n").unwrap();
        assert_eq!(flow.with_key(INFRA_TYPE_KEY, "AWS"), None);
        let has = StackConfig::parse(Path::new("p"), TEXT).unwrap();
        assert_eq!(has.with_key(INFRA_TYPE_KEY, "DO"), None);
    }

    #[test]
    fn an_edit_that_would_change_anything_else_is_refused() {
        let set = |text: &str, path: &str, value: Value| {
            let file =
                StackConfigFile::from_text(Path::new("Pulumi.dev.yaml"), text.into()).unwrap();
            file.with_value(&ConfigPath::parse(path).unwrap(), &value)
        };
        // An anchor in the value replaced, and an alias outside `config:` that read it.
        let aliased =
            "secretsprovider: &p passphrase\nconfig:\n  a:b: &p awskms://x\nenvironment:\n  - *p\n";
        assert!(matches!(
            set(aliased, "a:b", "new".into()),
            Err(EditError::Layout(_))
        ));
        // A value that would have to become a mapping is named as such.
        assert!(matches!(
            set("config:\n  a:b: text\n", "a:b.c", 1.into()),
            Err(EditError::Shape(_))
        ));
        // A byte order mark stays.
        let text = set("\u{feff}config:\n  a:b: 1\n", "a:b", 2.into()).unwrap();
        assert_eq!(text, "\u{feff}config:\n  a:b: 2\n");
    }

    #[test]
    fn reads_values_secrets_and_lines() {
        let config = StackConfig::parse(Path::new("Pulumi.dev.yaml"), TEXT).unwrap();
        assert_eq!(config.get_text("aws:region").as_deref(), Some("us-west-2"));
        assert_eq!(config.get_text("eks:min_size").as_deref(), Some("3"));
        assert_eq!(config.get("sirius:pwd"), Some(ConfigValue::Secret));
        assert_eq!(config.get_text("sirius:pwd"), None);
        assert_eq!(config.location_of(INFRA_TYPE_KEY).line, Some(5));
        assert!(config.get("nope").is_none());
    }

    #[test]
    fn empty_and_comment_only_files_are_a_first_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("Pulumi.dev.yaml");
        assert!(StackConfigFile::load(&path).unwrap().is_first_run());
        for text in ["", "# only a comment\n", "config: {}\n", "config:\n"] {
            std::fs::write(&path, text).unwrap();
            assert!(
                matches!(
                    StackConfigFile::load(&path).unwrap(),
                    StackConfigFile::Empty { .. }
                ),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_syntax_error_names_the_line() {
        let err = StackConfig::parse(Path::new("Pulumi.dev.yaml"), "config:\n  a:b: [1, 2\n")
            .unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("Pulumi.dev.yaml:"), "{text}");
        let err = StackConfig::parse(Path::new("Pulumi.dev.yaml"), "config: 3\n").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("Pulumi.dev.yaml:1: `config`: must be a mapping"),
            "{err}"
        );
    }
}
