//! The kubeconfig hook's files (docs/formats.md, "Providers"; docs/commands.md, "Hooks").
//!
//! The stack's own kubeconfig, `<state_dir>/kube/<stack>.yaml`, is the stack output as it is
//! (mode 0600, written atomically): `mara kubectl` uses it.
//!
//! Merged into the user's kubeconfig (the first path of `KUBECONFIG`, else `~/.kube/config`), its
//! entries get names of their own — `mara-<stack>`, or `mara-<stack>-<name>` when a section holds
//! several — because engines reuse generic names (pulumi-eks: cluster `kubernetes`, user and
//! context `aws`) that a user's own entries, or another stack's, already have. mara records what
//! it wrote in `<state_dir>/kube/<stack>.merged.json`, never replaces an entry it did not write,
//! and on `destroy` removes only what it wrote (unless changed since) and restores the
//! `current-context` it found — through the chain of contexts kept beside the user's file
//! (`contexts`), whichever workspace's stack goes first. The user's file is changed under its lock (`<file>.lock`, kubectl's
//! convention), written atomically through a symlink to its target, with a backup of the file as
//! it was before mara first changed it; a section it did not have is never added empty.

mod contexts;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::files::write_private;
pub use crate::workspace::kubeconfig::{read_user as read_kubeconfig, user_kubeconfig};

/// Where the hook writes: the stack's file, and what it needs to merge into the user's.
#[derive(Debug, Clone)]
pub struct Files {
    /// `<state_dir>/kube/<stack>.yaml`.
    pub stack: PathBuf,
    /// The workspace root, to name the stack's file shortly.
    pub root: PathBuf,
    /// The stack's name: the merged entries are `mara-<stack>`.
    pub stack_name: String,
}

impl Files {
    fn shown(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// `<state_dir>/kube/<stack>.merged.json`: what mara wrote into the user's kubeconfig.
    fn record(&self) -> PathBuf {
        self.stack.with_extension("merged.json")
    }

    /// The stack, as the chain of contexts beside a user's kubeconfig names it: its record's
    /// path (one per workspace and stack).
    fn owner(&self) -> String {
        let record = self.record();
        std::path::absolute(&record)
            .unwrap_or(record)
            .display()
            .to_string()
    }
}

const SECTIONS: [&str; 3] = ["clusters", "users", "contexts"];

/// What mara merged into a user's kubeconfig for one stack.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Merged {
    /// The user's kubeconfig it was merged into.
    pub target: PathBuf,
    /// Each section's entries, as written, by name.
    pub entries: BTreeMap<String, BTreeMap<String, Value>>,
    /// The context mara made current.
    pub context: Option<String>,
    /// The `current-context` before mara first set its own, restored when unmerging.
    pub previous_context: Option<String>,
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
        let recorded = read_record(files)?;
        // Merged elsewhere before (KUBECONFIG changed since): taken out of that file first, so
        // that no entry of mara's is left where no record points any more.
        if let Some(moved) = recorded.as_ref().filter(|r| r.target != target) {
            lines.extend(take_out(files, moved, false)?);
        }
        // The file and the stack's record change together, under the file's lock: another
        // stack's destroy hands its previous context on to the records it finds there, so the
        // record is read again inside it.
        let context = with_user_file(
            &target,
            |existing| {
                let earlier = read_record(files)?.filter(|r| r.target == target);
                let (merged, record) =
                    self::merge(existing, &kubeconfig, &files.stack_name, earlier.as_ref())
                        .map_err(|clash| format!("{}: {clash}", target.display()))?;
                // Recorded before the file is written: a record that claims entries the file
                // does not get is harmless (only entries exactly as recorded are ever removed);
                // entries in the file that no record claims would be the user's for good.
                let mut record = Merged {
                    target: target.clone(),
                    ..record
                };
                // The context to give back is the chain's, beside the file: another
                // workspace's merge may have come before this one.
                if let Some(context) = &record.context {
                    let real = resolve_symlinks(&target);
                    let mut chain = contexts::read(&real)?;
                    let owner = files.owner();
                    let previous = record.previous_context.clone();
                    record.previous_context =
                        chain.merged(&owner, context, previous).previous.clone();
                    contexts::write(&real, &chain)?;
                }
                write_record(files, &record)?;
                Ok((Some(merged), record.context.unwrap_or_default()))
            },
            Ok,
        )?;
        lines.push(format!(
            "merged into {} (context {context})",
            target.display()
        ));
    }
    Ok(lines)
}

/// After `destroy`: removes what `write` wrote: its entries from the user's kubeconfig (the
/// previous `current-context` restored), and the stack's file.
pub fn remove(files: &Files) -> Result<Vec<String>, String> {
    let mut lines = Vec::new();
    if let Some(record) = read_record(files)? {
        lines.extend(take_out(files, &record, true)?);
    }
    if files.stack.exists() {
        std::fs::remove_file(&files.stack)
            .map_err(|e| format!("cannot remove {}: {e}", files.stack.display()))?;
        lines.push(format!("removed {}", files.shown(&files.stack)));
    }
    Ok(lines)
}

/// Takes what `record` says mara merged out of the file it was merged into (each entry only if
/// still as written), and hands its previous context on to any other stack's record that would
/// give back this stack's context: the contexts are restored whatever order stacks go in. With
/// `forget`, the stack's record is removed. All of it under the file's lock, so that stacks
/// merged and removed at once see each other's records whole.
fn take_out(files: &Files, record: &Merged, forget: bool) -> Result<Vec<String>, String> {
    let target = &record.target;
    let real = resolve_symlinks(target);
    let records = |_: &Merged, kept: Vec<String>| -> Result<Vec<String>, String> {
        // Out of the chain: a stack merged after this one gives back what was current before.
        let mut chain = contexts::read(&real)?;
        if chain.removed(&files.owner()).is_some() {
            contexts::write(&real, &chain)?;
        }
        if forget {
            std::fs::remove_file(files.record())
                .map_err(|e| format!("cannot remove {}: {e}", files.record().display()))?;
        }
        Ok(kept)
    };
    if read_kubeconfig(target)?.is_none() {
        // The chain beside it changes under the file's lock all the same.
        let _lock = Lock::take(&real)?;
        records(record, Vec::new())?;
        return Ok(Vec::new());
    }
    let kept = with_user_file(
        target,
        |existing| {
            // As it is now: the context to give back is the chain's (another stack's removal,
            // from any workspace, may have handed one on to it).
            let fresh = read_record(files)?.filter(|r| r.target == *target);
            let mut record = fresh.unwrap_or_else(|| record.clone());
            if let Some(link) = contexts::read(&real)?.stacks.get(&files.owner()) {
                record.previous_context = link.previous.clone();
            }
            let Some(existing) = existing else {
                return Ok((None, (record, Vec::new())));
            };
            let (cleaned, kept) = unmerge(existing, &record);
            Ok((Some(cleaned), (record, kept)))
        },
        // Only once the file is written: a record gone before the file changed would leave
        // mara's entries there with nothing to say they are mara's.
        |(record, kept)| records(&record, kept),
    )?;
    let mut lines = vec![format!(
        "removed the stack's entries from {}",
        target.display()
    )];
    for name in kept {
        lines.push(format!(
            "left {name} in {}: it changed since mara wrote it",
            target.display()
        ));
    }
    Ok(lines)
}

/// The names mara gives a stack's entries of one section: `mara-<stack>` for a section of one
/// entry, else `mara-<stack>-<name>`.
fn renamed(stack: &str, section: &[Value]) -> BTreeMap<String, String> {
    let base = format!("mara-{stack}");
    section
        .iter()
        .filter_map(|e| e.get("name")?.as_str())
        .map(|name| {
            let new = match section.len() {
                1 => base.clone(),
                _ => format!("{base}-{name}"),
            };
            (name.to_string(), new)
        })
        .collect()
}

/// Merges the stack's kubeconfig `new` into `existing` under mara's names, and says what it
/// wrote. `earlier` is what mara wrote for the stack before: its entries may be replaced, any
/// other entry of the same name may not (the error names it).
pub fn merge(
    existing: Option<Value>,
    new: &Value,
    stack: &str,
    earlier: Option<&Merged>,
) -> Result<(Value, Merged), String> {
    let mut merged = match existing {
        Some(Value::Object(map)) => map,
        _ => Map::from_iter([
            ("apiVersion".into(), Value::from("v1")),
            ("kind".into(), Value::from("Config")),
        ]),
    };
    let names: Names = SECTIONS
        .iter()
        .map(|&s| (s, renamed(stack, &section(new, s))))
        .collect();
    let mut record = Merged {
        previous_context: earlier.and_then(|e| e.previous_context.clone()),
        ..Merged::default()
    };
    for section_name in SECTIONS {
        merge_section(&mut merged, &mut record, section_name, new, &names, earlier)?;
    }
    make_current(&mut merged, &mut record, new, &names, earlier);
    Ok((Value::Object(merged), record))
}

/// Each section's names in the stack's kubeconfig, and the names mara gives them (`renamed`).
type Names<'a> = BTreeMap<&'a str, BTreeMap<String, String>>;

/// The entries of section `name` (`clusters`, `users`, `contexts`) of a kubeconfig.
fn section(config: &Value, name: &str) -> Vec<Value> {
    config
        .get(name)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The entries of one section of `new` into `merged` under mara's names (a context's cluster and
/// user too), each written into `record`; an entry of the same name that mara did not write
/// (`earlier` says which it did) is refused.
fn merge_section(
    merged: &mut Map<String, Value>,
    record: &mut Merged,
    section_name: &str,
    new: &Value,
    names: &Names<'_>,
    earlier: Option<&Merged>,
) -> Result<(), String> {
    let ours = |section: &str, name: &str| {
        earlier.is_some_and(|e| e.entries.get(section).is_some_and(|s| s.contains_key(name)))
    };
    let entries = section(new, section_name);
    if entries.is_empty() {
        return Ok(());
    }
    let list = merged
        .entry(section_name)
        .or_insert_with(|| Value::Array(Vec::new()));
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    let list = list.as_array_mut().expect("an array");
    for entry in entries {
        let Some(old_name) = entry.get("name").and_then(Value::as_str) else {
            continue;
        };
        let new_name = names[section_name][old_name].clone();
        let mut entry = entry.clone();
        entry["name"] = Value::String(new_name.clone());
        if section_name == "contexts" {
            for (field, target) in [("cluster", "clusters"), ("user", "users")] {
                let referred = entry["context"][field].as_str().map(str::to_string);
                if let Some(new_ref) = referred.and_then(|r| names[target].get(&r).cloned()) {
                    entry["context"][field] = Value::String(new_ref);
                }
            }
        }
        match list
            .iter_mut()
            .find(|e| e.get("name").and_then(Value::as_str) == Some(&new_name))
        {
            Some(_) if !ours(section_name, &new_name) => {
                let one = section_name.trim_end_matches('s');
                return Err(format!(
                    "it already has a {one} `{new_name}` that mara did not write: mara never replaces it; rename or remove it, then run `mara up` again"
                ));
            }
            Some(existing) => *existing = entry.clone(),
            None => list.push(entry.clone()),
        }
        record
            .entries
            .entry(section_name.to_string())
            .or_default()
            .insert(new_name, entry);
    }
    Ok(())
}

/// The context `new` makes current, under mara's name, recorded; and made current in `merged` on
/// the stack's first merge (`earlier` is none), the one it replaces recorded to give back.
fn make_current(
    merged: &mut Map<String, Value>,
    record: &mut Merged,
    new: &Value,
    names: &Names<'_>,
    earlier: Option<&Merged>,
) {
    let wanted = new
        .get("current-context")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .or_else(|| {
            section(new, "contexts")
                .first()?
                .get("name")?
                .as_str()
                .map(str::to_string)
        });
    let Some(context) = wanted.and_then(|c| names["contexts"].get(&c).cloned()) else {
        return;
    };
    let current = merged
        .get("current-context")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map(str::to_string);
    // mara's context becomes current on the stack's first merge only (as k3d's and the
    // clouds' own tools do); a later `up` leaves the user's choice alone, and the context
    // to give back stays the one current before that first merge.
    if earlier.is_none() {
        if current.as_deref() != Some(context.as_str()) {
            record.previous_context = current;
        }
        merged.insert("current-context".into(), Value::String(context.clone()));
    }
    record.context = Some(context);
}

/// Removes from `existing` what `record` says mara wrote, each entry only if it is still as mara
/// wrote it, and restores the previous `current-context`. Returns the file and the entries left
/// in place because they changed.
pub fn unmerge(existing: Value, record: &Merged) -> (Value, Vec<String>) {
    let Value::Object(mut map) = existing else {
        return (existing, Vec::new());
    };
    let mut kept = Vec::new();
    for (section, entries) in &record.entries {
        if let Some(Value::Array(list)) = map.get_mut(section) {
            list.retain(|entry| {
                let Some(name) = entry.get("name").and_then(Value::as_str) else {
                    return true;
                };
                match entries.get(name) {
                    Some(written) if written == entry => false,
                    Some(_) => {
                        kept.push(format!("{} `{name}`", section.trim_end_matches('s')));
                        true
                    }
                    None => true,
                }
            });
        }
    }
    let current = map
        .get("current-context")
        .and_then(Value::as_str)
        .map(str::to_string);
    // The user's own `current-context` comes back as it was, even one this file does not define
    // (it may be in another file of KUBECONFIG's list) — but not a context of mara's that is gone
    // (another stack's, removed meanwhile from outside this workspace's records).
    if current.is_some() && current == record.context {
        let defined = |name: &str| {
            map.get("contexts")
                .and_then(Value::as_array)
                .is_some_and(|list| {
                    list.iter()
                        .any(|c| c.get("name").and_then(Value::as_str) == Some(name))
                })
        };
        match &record.previous_context {
            Some(previous) if defined(previous) || !previous.starts_with("mara-") => {
                map.insert("current-context".into(), Value::String(previous.clone()));
            }
            _ => {
                map.remove("current-context");
            }
        }
    }
    (Value::Object(map), kept)
}

/// Reads, changes and writes back the user's kubeconfig `target` under its lock: `change` gets
/// the file's content (`None` when there is none) and returns what to write (`None`: nothing).
/// The file is written through a symlink to its target, atomically with mode 0600, after a
/// backup of it as it was before mara first changed it.
fn with_user_file<T, U>(
    target: &Path,
    change: impl FnOnce(Option<Value>) -> Result<(Option<Value>, T), String>,
    after: impl FnOnce(T) -> Result<U, String>,
) -> Result<U, String> {
    let real = resolve_symlinks(target);
    let _lock = Lock::take(&real)?;
    let existing = read_kubeconfig(&real)?;
    let (changed, result) = change(existing.clone())?;
    if let Some(changed) = changed
        && Some(&changed) != existing.as_ref()
    {
        let backup = backup_path(&real);
        if real.exists() && !backup.exists() {
            std::fs::copy(&real, &backup)
                .map_err(|e| format!("cannot back up {}: {e}", target.display()))?;
        }
        let text = serde_saphyr::to_string(&changed).map_err(|e| e.to_string())?;
        write_private(&real, &text)
            .map_err(|e| format!("cannot write {}: {e}", target.display()))?;
    }
    // What may only follow the file's write (removing mara's records), still under the lock.
    after(result)
}

/// `path` with every symlink followed, also when the file at its end does not exist yet.
fn resolve_symlinks(path: &Path) -> PathBuf {
    let mut path = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::read_link(&path) {
            Ok(target) => {
                path = match path.parent() {
                    Some(dir) => dir.join(target),
                    None => target,
                }
            }
            Err(_) => break,
        }
    }
    path
}

/// kubectl's lock on a kubeconfig: the file `<file>.lock`, made exclusively and removed after.
struct Lock(PathBuf);

impl Lock {
    fn take(file: &Path) -> Result<Lock, String> {
        let mut name = file.file_name().unwrap_or_default().to_os_string();
        name.push(".lock");
        let path = file.with_file_name(name);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(_) => return Ok(Lock(path)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if Instant::now() > deadline {
                        return Err(format!(
                            "{} has been locked for 30 s ({} exists): remove it if no kubectl or mara is running",
                            file.display(),
                            path.display()
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(format!("cannot lock {}: {e}", file.display())),
            }
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What mara merged into a user's kubeconfig for the stack whose own kubeconfig is `stack_file`
/// (`mara cluster status` shows it); `None` when nothing is merged, or the record is unreadable.
pub fn merged_for(stack_file: &Path) -> Option<Merged> {
    read_record_at(&stack_file.with_extension("merged.json"))
        .ok()
        .flatten()
}

fn read_record(files: &Files) -> Result<Option<Merged>, String> {
    read_record_at(&files.record())
}

fn read_record_at(path: &Path) -> Result<Option<Merged>, String> {
    match crate::files::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| format!("{} is not mara's record of a merge: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

fn write_record(files: &Files, record: &Merged) -> Result<(), String> {
    write_record_at(&files.record(), record)
}

fn write_record_at(path: &Path, record: &Merged) -> Result<(), String> {
    let text = serde_json::to_string_pretty(record).expect("a record serializes");
    write_private(path, &text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// `config` → `config.mara.bak`, beside it.
fn backup_path(target: &Path) -> PathBuf {
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(".mara.bak");
    target.with_file_name(name)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What pulumi-eks outputs: generic names that any AWS stack shares.
    fn eks(server: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "kubernetes", "cluster": {"server": server}}],
            "users": [{"name": "aws", "user": {"exec": {"command": "aws"}}}],
            "contexts": [{"name": "aws", "context": {"cluster": "kubernetes", "user": "aws"}}],
            "current-context": "aws",
        })
    }

    /// A user's own kubeadm cluster, named as kubeadm names it.
    fn users_own() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Config", "preferences": {"colors": true},
            "clusters": [{"name": "kubernetes", "cluster": {"server": "https://kubeadm:6443"}}],
            "users": [{"name": "kubernetes-admin", "user": {"token": "t"}}],
            "contexts": [{"name": "kubernetes-admin@kubernetes", "context": {"cluster": "kubernetes", "user": "kubernetes-admin"}}],
            "current-context": "kubernetes-admin@kubernetes",
        })
    }

    /// Where the hook of `stack` writes, in a workspace at `dir`.
    fn setup(dir: &Path, stack: &str) -> Files {
        Files {
            stack: dir.join(format!(".mara/kube/{stack}.yaml")),
            root: dir.to_path_buf(),
            stack_name: stack.to_string(),
        }
    }

    fn current(path: &Path) -> Option<String> {
        let value = read_kubeconfig(path).unwrap().unwrap();
        value["current-context"].as_str().map(str::to_string)
    }

    #[test]
    fn stacks_removed_in_the_order_they_came_give_back_the_user_s_context() {
        let dir = tempfile::tempdir().unwrap();
        let kube = dir.path().join("kube/config");
        std::fs::create_dir_all(kube.parent().unwrap()).unwrap();
        std::fs::write(&kube, serde_saphyr::to_string(&users_own()).unwrap()).unwrap();
        let env = BTreeMap::from([("KUBECONFIG".to_string(), kube.display().to_string())]);
        let (dev, prod) = (setup(dir.path(), "dev"), setup(dir.path(), "prod"));
        for (files, server) in [(&dev, "https://dev"), (&prod, "https://prod")] {
            let outputs = json!({"kubeconfig": eks(server)});
            write(files, &env, &outputs, "kubeconfig", true).unwrap();
        }
        assert_eq!(current(&kube).as_deref(), Some("mara-prod"));
        remove(&dev).unwrap();
        assert_eq!(
            current(&kube).as_deref(),
            Some("mara-prod"),
            "not dev's: it stays"
        );
        remove(&prod).unwrap();
        assert_eq!(
            current(&kube).as_deref(),
            Some("kubernetes-admin@kubernetes"),
            "the context before either stack"
        );
        assert_eq!(read_kubeconfig(&kube).unwrap().unwrap(), users_own());
    }

    #[test]
    fn a_merge_into_another_file_takes_the_entries_out_of_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let (first, second) = (dir.path().join("a/config"), dir.path().join("b/config"));
        let dev = setup(dir.path(), "dev");
        let outputs = json!({"kubeconfig": eks("https://dev")});
        for kube in [&first, &second] {
            let env = BTreeMap::from([("KUBECONFIG".to_string(), kube.display().to_string())]);
            write(&dev, &env, &outputs, "kubeconfig", true).unwrap();
        }
        let in_first = read_kubeconfig(&first).unwrap().unwrap();
        assert_eq!(in_first["clusters"], json!([]), "{in_first}");
        assert_eq!(read_record(&dev).unwrap().unwrap().target, second);
        remove(&dev).unwrap();
        assert_eq!(
            read_kubeconfig(&second).unwrap().unwrap()["clusters"],
            json!([])
        );
    }

    #[test]
    fn every_encoding_of_a_kubeconfig_decodes() {
        let yaml = serde_saphyr::to_string(&eks("https://a")).unwrap();
        let json_text = eks("https://a").to_string();
        let b64 = base64::engine::general_purpose::STANDARD.encode(&yaml);
        for value in [
            eks("https://a"),
            Value::String(yaml),
            Value::String(json_text),
            Value::String(b64),
        ] {
            assert_eq!(decode_kubeconfig(&value).unwrap()["current-context"], "aws");
        }
        assert!(decode_kubeconfig(&Value::String("hello".into())).is_err());
    }

    #[test]
    fn merged_entries_get_names_of_their_own_and_clobber_nothing() {
        let (merged, dev) = merge(Some(users_own()), &eks("https://dev"), "dev", None).unwrap();
        // The user's `kubernetes` cluster still points at their kubeadm cluster.
        assert_eq!(
            merged["clusters"][0]["cluster"]["server"],
            "https://kubeadm:6443"
        );
        assert_eq!(merged["clusters"][1]["name"], "mara-dev");
        assert_eq!(
            merged["contexts"][1]["context"],
            json!({"cluster": "mara-dev", "user": "mara-dev"})
        );
        assert_eq!(merged["current-context"], "mara-dev");
        assert_eq!(merged["preferences"], json!({"colors": true}));
        assert_eq!(
            dev.previous_context.as_deref(),
            Some("kubernetes-admin@kubernetes")
        );
        // A second AWS stack coexists with the first.
        let (both, prod) = merge(Some(merged), &eks("https://prod"), "prod", None).unwrap();
        let names: Vec<&str> = both["contexts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["kubernetes-admin@kubernetes", "mara-dev", "mara-prod"]
        );
        // Unmerging prod gives dev back its context; unmerging dev gives the user theirs.
        let (back, kept) = unmerge(both, &prod);
        assert!(kept.is_empty());
        assert_eq!(back["current-context"], "mara-dev");
        let (back, _) = unmerge(back, &dev);
        assert_eq!(back, users_own(), "exactly the user's file");
    }

    #[test]
    fn mara_s_context_becomes_current_once_and_the_user_s_choice_then_stands() {
        let (merged, dev) = merge(Some(users_own()), &eks("https://dev"), "dev", None).unwrap();
        assert_eq!(merged["current-context"], "mara-dev");
        let mut switched = merged;
        switched["contexts"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "staging", "context": {"cluster": "kubernetes", "user": "kubernetes-admin"}}));
        switched["current-context"] = json!("staging");
        // A second up of dev, after the user chose `staging`: their choice stands.
        let (again, dev) = merge(Some(switched), &eks("https://dev2"), "dev", Some(&dev)).unwrap();
        assert_eq!(again["current-context"], "staging");
        assert_eq!(again["clusters"][1]["cluster"]["server"], "https://dev2");
        assert_eq!(
            dev.previous_context.as_deref(),
            Some("kubernetes-admin@kubernetes")
        );
        let (back, _) = unmerge(again, &dev);
        assert_eq!(back["current-context"], "staging");
    }

    #[test]
    fn an_entry_mara_did_not_write_is_never_replaced() {
        let mut existing = users_own();
        existing["contexts"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "mara-dev", "context": {"cluster": "kubernetes", "user": "kubernetes-admin"}}));
        let error = merge(Some(existing.clone()), &eks("https://dev"), "dev", None).unwrap_err();
        assert!(
            error.contains("already has a context `mara-dev` that mara did not write"),
            "{error}"
        );
        // What mara wrote before, it may replace (a second up); what changed since, it leaves.
        let (merged, record) = merge(None, &eks("https://dev"), "dev", None).unwrap();
        let (again, _) = merge(
            Some(merged.clone()),
            &eks("https://dev2"),
            "dev",
            Some(&record),
        )
        .unwrap();
        assert_eq!(again["clusters"][0]["cluster"]["server"], "https://dev2");
        let mut edited = merged;
        edited["users"][0]["user"] = json!({"token": "the user's own"});
        let (_, kept) = unmerge(edited, &record);
        assert_eq!(kept, ["user `mara-dev`"]);
    }

    #[test]
    fn several_entries_of_a_section_keep_their_names_after_the_stack() {
        let mut two = eks("https://dev");
        two["contexts"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "admin", "context": {"cluster": "kubernetes", "user": "aws"}}));
        let (merged, record) = merge(None, &two, "dev", None).unwrap();
        let names: Vec<&str> = merged["contexts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["mara-dev-aws", "mara-dev-admin"]);
        assert_eq!(merged["current-context"], "mara-dev-aws");
        assert_eq!(record.context.as_deref(), Some("mara-dev-aws"));
        // Nothing empty is added that was not there.
        let no_users = json!({"clusters": [{"name": "c", "cluster": {}}], "contexts": []});
        let (merged, _) = merge(None, &no_users, "dev", None).unwrap();
        assert!(merged.get("users").is_none() && merged.get("contexts").is_none());
    }
}
