//! The kubeconfig hook's files (docs/formats.md, "Providers"; docs/commands.md, "Hooks").
//!
//! The stack's own kubeconfig, `<state_dir>/kube/<stack>.yaml`, is the stack output as it is
//! (mode 0600, written atomically): `mara kubectl` uses it.
//!
//! Merged into the user's kubeconfig (the first path of `KUBECONFIG`, else `~/.kube/config`), its
//! entries get names of their own — `mara-<stack>`, or `mara-<stack>-<name>` when a section holds
//! several — because engines reuse generic names (pulumi-eks: cluster `kubernetes`, user and
//! context `aws`) that a user's own entries, or another stack's, already have.
//!
//! What mara merged is marked in the kubeconfig itself, not in the workspace (docs/decisions.md,
//! "Kubeconfig ownership travels with the kubeconfig (issue 42)"): each entry carries mara's
//! extension (`mark`), naming the workspace (`workspace::identity`: mara.toml's `id`, else its
//! git remote, else its directory) and the stack, with a digest of the entry as mara wrote it. A
//! second clone, a cleaned workspace or a CI runner whose home persists recognises its own
//! entries by it. mara never replaces an entry not marked as the stack's; `up` replaces the
//! stack's own (one changed since mara wrote it is said); `destroy` removes only the stack's own
//! that are unchanged, and restores the `current-context` it found — through the chain of
//! contexts kept beside the user's file (`contexts`), keyed by workspace and stack, whichever
//! workspace's stack goes first. `<state_dir>/kube/<stack>.merged-into.json` names the file last
//! merged into, so that an `up` with `KUBECONFIG` elsewhere, or a `destroy`, takes the entries out
//! of it too: a note of where to look, never of what is whose. A record from before issue 42
//! (`<stack>.merged.json`) is carried over once (`carry_over`).
//!
//! The user's file is changed under its lock (`<file>.lock`, kubectl's convention), written
//! atomically through a symlink to its target, with a backup of the file as it was before mara
//! first changed it; a section it did not have is never added empty.

mod carry_over;
mod contexts;
mod mark;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use self::contexts::Link;
pub use self::mark::{Claim, EXTENSION, Mark, Owner};
use crate::files::write_private;
use crate::workspace::Workspace;
use crate::workspace::identity::{self, Source};
pub use crate::workspace::kubeconfig::{read_user as read_kubeconfig, user_kubeconfig};
use crate::workspace::stack::StackName;

/// Where the hook writes: the stack's file, and what it needs to merge into the user's.
#[derive(Debug, Clone)]
pub struct Files {
    /// `<state_dir>/kube/<stack>.yaml`.
    pub stack: PathBuf,
    /// The workspace root, to name the stack's file shortly, and to know which workspace this is.
    pub root: PathBuf,
    /// The stack's name: the merged entries are `mara-<stack>`.
    pub stack_name: String,
    /// mara.toml's `id`, which names the workspace in the marks of its entries.
    pub id: Option<String>,
}

impl Files {
    /// The hook's files for `stack` of `workspace`.
    pub fn of(workspace: &Workspace, stack: &StackName) -> Files {
        Files {
            stack: workspace.kubeconfig_file(stack),
            root: workspace.root.clone(),
            stack_name: stack.to_string(),
            id: workspace.settings.id.clone(),
        }
    }

    fn shown(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// Whose the merged entries are: this workspace, by its identity, and the stack.
    fn owner(&self) -> Result<Owner, String> {
        let workspace = identity::identify(&self.root, self.id.as_deref())?;
        Ok(Owner::new(workspace, &self.stack_name))
    }

    /// `<state_dir>/kube/<stack>.merged-into.json`: the user's kubeconfig the stack was last
    /// merged into.
    fn merged_into(&self) -> PathBuf {
        self.stack.with_extension("merged-into.json")
    }

    /// `<state_dir>/kube/<stack>.merged.json`: the record of a merge from before issue 42.
    fn record(&self) -> PathBuf {
        self.stack.with_extension("merged.json")
    }

    /// The stack, as the chain of contexts beside a user's kubeconfig named it before issue 42:
    /// its record's absolute path.
    fn record_key(&self) -> String {
        let record = self.record();
        std::path::absolute(&record)
            .unwrap_or(record)
            .display()
            .to_string()
    }
}

const SECTIONS: [&str; 3] = ["clusters", "users", "contexts"];

/// Where a stack is merged (`mara cluster status` shows it): the user's kubeconfig, and the
/// stack's context in it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Merged {
    pub target: PathBuf,
    pub context: Option<String>,
}

/// What merging a stack's kubeconfig into a user's did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Merge {
    /// The stack's context: the one its first merge makes current.
    pub context: Option<String>,
    /// The `current-context` before, when this merge made the stack's current.
    pub previous: Option<String>,
    /// The names of the stack's contexts in the file.
    pub contexts: Vec<String>,
    /// The stack's entries that had changed since mara wrote them, replaced (`context
    /// `mara-dev``).
    pub replaced: Vec<String>,
}

impl Merge {
    /// The link the chain of contexts gets for this merge.
    pub fn link(&self) -> Option<Link> {
        Some(Link {
            context: self.context.clone()?,
            previous: self.previous.clone(),
        })
    }
}

/// What taking a stack's entries out of a user's kubeconfig did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Unmerged {
    /// The entries removed (`cluster `mara-dev``).
    pub removed: Vec<String>,
    /// The stack's entries left in place because they changed since mara wrote them.
    pub kept: Vec<String>,
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
        lines.extend(merge_into(files, &target, &kubeconfig)?);
    }
    Ok(lines)
}

/// Merges the stack's `kubeconfig` into the user's `target`, under its lock, the chain of
/// contexts beside it changed with it. The lines to show.
fn merge_into(files: &Files, target: &Path, kubeconfig: &Value) -> Result<Vec<String>, String> {
    let owner = files.owner()?;
    let mut lines = carry_over::carry_over(files, &owner)?;
    // Merged elsewhere before (KUBECONFIG changed since): taken out of that file once this
    // merge is done, so that no entry of mara's is left where mara no longer looks — and a
    // merge refused here leaves the entries where they were.
    let moved = read_merged_into(files)?.filter(|m| m != target);
    let real = resolve_symlinks(target);
    let merge = with_user_file(
        target,
        |existing| {
            let (merged, merge) = self::merge(existing, kubeconfig, &owner)
                .map_err(|clash| format!("{}: {clash}", target.display()))?;
            // The context to give back is the chain's, beside the file: another workspace's
            // merge may have come before this one.
            if let Some(link) = merge.link() {
                let mut chain = contexts::read(&real)?;
                claim_link(&mut chain, files, &owner, &merge.contexts);
                chain.merged(&owner.key(), &link.context, link.previous);
                contexts::write(&real, &chain)?;
            }
            // Noted before the file is written: a note of a file that holds nothing of the
            // stack's is harmless; a file whose entries no note points at is looked in only
            // while `KUBECONFIG` names it.
            write_merged_into(files, target)?;
            Ok((Some(merged), merge))
        },
        Ok,
    )?;
    if let Some(moved) = moved {
        lines.extend(take_out(files, &owner, &moved)?);
    }
    let shown = target.display();
    for entry in &merge.replaced {
        lines.push(format!(
            "replaced {entry} in {shown}: it had changed since mara wrote it"
        ));
    }
    let context = merge.context.unwrap_or_default();
    lines.push(format!("merged into {shown} (context {context})"));
    Ok(lines)
}

/// Before an `up` that merges: an entry named as the stack's (`mara-<stack>`) in the user's
/// kubeconfig that is not the stack's — the user's, or another stack's or workspace's — would
/// refuse the merge after the cluster project ran; said before anything runs instead. (A
/// cluster whose kubeconfig holds several gets names only its output tells; the merge still
/// refuses those.) A record from before issue 42 is carried over by the merge: not judged here.
pub fn refused_merge(files: &Files, env: &BTreeMap<String, String>) -> Result<(), String> {
    let Some(target) = user_kubeconfig(env) else {
        return Ok(());
    };
    if files.record().exists() {
        return Ok(());
    }
    let Some(existing) = read_kubeconfig(&target)? else {
        return Ok(());
    };
    let owner = files.owner()?;
    let name = format!("mara-{}", files.stack_name);
    for section_name in SECTIONS {
        let found = section(&existing, section_name);
        let entry = found
            .iter()
            .find(|e| e.get("name").and_then(Value::as_str) == Some(&name));
        let Some(entry) = entry else {
            continue;
        };
        match mark::claim(section_name, entry, &owner) {
            Claim::Ours { .. } => {}
            claim => {
                let why = refusal(section_name, &name, &claim, &owner);
                return Err(format!("{}: {why}", target.display()));
            }
        }
    }
    Ok(())
}

/// After `destroy`: removes what `write` wrote: the stack's entries from the user's kubeconfig
/// (the previous `current-context` restored) — from the file it was last merged into and from
/// the one `KUBECONFIG` (or HOME) names now —, and the stack's file.
pub fn remove(files: &Files, env: &BTreeMap<String, String>) -> Result<Vec<String>, String> {
    let mut lines = Vec::new();
    let current = user_kubeconfig(env);
    let look = files.record().exists()
        || files.merged_into().exists()
        || current.as_deref().is_some_and(touched_by_mara);
    if look {
        let owner = files.owner()?;
        lines.extend(carry_over::carry_over(files, &owner)?);
        let mut targets: Vec<PathBuf> = read_merged_into(files)?.into_iter().collect();
        if let Some(current) = current
            && !(targets.iter()).any(|t| resolve_symlinks(t) == resolve_symlinks(&current))
        {
            targets.push(current);
        }
        for target in &targets {
            lines.extend(take_out(files, &owner, target)?);
        }
        forget_merged_into(files)?;
    }
    if files.stack.exists() {
        std::fs::remove_file(&files.stack)
            .map_err(|e| format!("cannot remove {}: {e}", files.stack.display()))?;
        lines.push(format!("removed {}", files.shown(&files.stack)));
    }
    Ok(lines)
}

/// Whether mara may have merged into the user's kubeconfig `target`: it holds an entry with
/// mara's mark, or a chain of contexts beside it. (A destroy looks in the user's file even when
/// the stack never merged: one mara never touched is left alone, unlocked, even unreadable.)
fn touched_by_mara(target: &Path) -> bool {
    let marked = read_kubeconfig(target)
        .ok()
        .flatten()
        .is_some_and(|config| {
            (SECTIONS.iter()).any(|&s| {
                section(&config, s)
                    .iter()
                    .any(|e| mark::mark_of(s, e).is_some())
            })
        });
    marked || contexts::path(&resolve_symlinks(target)).exists()
}

/// Takes the stack's entries out of the user's `target` (each only if unchanged) and its link
/// out of the chain of contexts beside it, which hands its previous context on to any other
/// stack that would give back this stack's context: the contexts are restored whatever order
/// stacks go in. All of it under the file's lock. The lines to show.
fn take_out(files: &Files, owner: &Owner, target: &Path) -> Result<Vec<String>, String> {
    let real = resolve_symlinks(target);
    let done = with_user_file(
        target,
        |existing| {
            let mut chain = contexts::read(&real)?;
            let before = chain.clone();
            let own = existing
                .as_ref()
                .map_or_else(Vec::new, |c| own_names(c, owner, "contexts"));
            claim_link(&mut chain, files, owner, &own);
            let link = chain.stacks.get(&owner.key()).cloned();
            let (cleaned, done) = match existing {
                Some(existing) => {
                    let (cleaned, done) = unmerge(existing, owner, link.as_ref());
                    (Some(cleaned), done)
                }
                None => (None, Unmerged::default()),
            };
            Ok((cleaned, (chain, before, done)))
        },
        // Out of the chain only once the file is written: a link gone before the file changed
        // would leave the stack's context current with nothing to give back.
        |(mut chain, before, done)| {
            chain.removed(&owner.key());
            if chain != before {
                contexts::write(&real, &chain)?;
            }
            Ok(done)
        },
    )?;
    let mut lines = Vec::new();
    if !done.removed.is_empty() {
        lines.push(format!(
            "removed the stack's entries from {}",
            target.display()
        ));
    }
    for entry in done.kept {
        lines.push(format!(
            "left {entry} in {}: it changed since mara wrote it",
            target.display()
        ));
    }
    Ok(lines)
}

/// The owner's link in the chain, taken over from a key it had before: an alias of its
/// workspace's, or (before issue 42) the path of its record — this copy's, or any whose context
/// is one of the stack's `own` contexts in the file.
fn claim_link(chain: &mut contexts::Chain, files: &Files, owner: &Owner, own: &[String]) {
    let aliases = owner.alias_keys();
    let record = files.record_key();
    chain.claim(&owner.key(), |key, link| {
        aliases.iter().any(|a| a == key)
            || (contexts::keyed_by_record(key) && (key == record || own.contains(&link.context)))
    });
}

/// The names of `owner`'s entries in one section of a kubeconfig.
fn own_names(config: &Value, owner: &Owner, section_name: &str) -> Vec<String> {
    section(config, section_name)
        .iter()
        .filter(|e| matches!(mark::claim(section_name, e, owner), Claim::Ours { .. }))
        .filter_map(|e| e.get("name")?.as_str().map(str::to_string))
        .collect()
}

/// Which user's kubeconfig the stack is merged into, and its context there (`mara cluster
/// status` shows them): the file it was last merged into, else the one `KUBECONFIG` (or HOME)
/// names, when it holds the stack's entries; `None` otherwise.
pub fn merged_for(files: &Files, env: &BTreeMap<String, String>) -> Option<Merged> {
    let owner = files.owner().ok()?;
    let noted = read_merged_into(files).ok().flatten();
    noted
        .into_iter()
        .chain(user_kubeconfig(env))
        .find_map(|target| {
            let config = read_kubeconfig(&target).ok().flatten()?;
            let holds = (SECTIONS.iter()).any(|s| !own_names(&config, &owner, s).is_empty());
            let contexts = own_names(&config, &owner, "contexts");
            let current = config.get("current-context").and_then(Value::as_str);
            let context = (contexts.iter().find(|c| Some(c.as_str()) == current))
                .or(contexts.first())
                .cloned();
            holds.then_some(Merged { target, context })
        })
}

/// The note of where the stack was last merged.
#[derive(Debug, Serialize, Deserialize)]
struct MergedInto {
    file: PathBuf,
}

/// The user's kubeconfig the stack was last merged into, as its note says.
fn read_merged_into(files: &Files) -> Result<Option<PathBuf>, String> {
    let path = files.merged_into();
    match crate::files::read_to_string(&path) {
        Ok(text) => serde_json::from_str::<MergedInto>(&text)
            .map(|note| Some(note.file))
            .map_err(|e| {
                format!(
                    "{} is not mara's note of where the stack is merged ({e}): remove it",
                    path.display()
                )
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

fn write_merged_into(files: &Files, target: &Path) -> Result<(), String> {
    let path = files.merged_into();
    let note = MergedInto {
        file: target.to_path_buf(),
    };
    let text = serde_json::to_string_pretty(&note).expect("a note serializes");
    write_private(&path, &text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn forget_merged_into(files: &Files) -> Result<(), String> {
    let path = files.merged_into();
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("cannot remove {}: {e}", path.display()))
        }
        _ => Ok(()),
    }
}

/// An entry as messages name it: `cluster `mara-dev``.
fn describe(section: &str, name: &str) -> String {
    format!("{} `{name}`", section.trim_end_matches('s'))
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

/// Merges the stack's kubeconfig `new` into `existing` under mara's names, each entry marked as
/// `owner`'s, and says what it did. An entry of the same name marked as `owner`'s is replaced;
/// any other is not, and the error says whose it is.
pub fn merge(
    existing: Option<Value>,
    new: &Value,
    owner: &Owner,
) -> Result<(Value, Merge), String> {
    let mut merged = match existing {
        Some(Value::Object(map)) => map,
        _ => Map::from_iter([
            ("apiVersion".into(), Value::from("v1")),
            ("kind".into(), Value::from("Config")),
        ]),
    };
    let names: Names = SECTIONS
        .iter()
        .map(|&s| (s, renamed(&owner.stack, &section(new, s))))
        .collect();
    // The stack's first merge into this file: none of its entries is there yet.
    let first = !SECTIONS.iter().any(|&s| {
        (merged
            .get(s)
            .and_then(Value::as_array)
            .into_iter()
            .flatten())
        .any(|e| matches!(mark::claim(s, e, owner), Claim::Ours { .. }))
    });
    let mut merge = Merge::default();
    for section_name in SECTIONS {
        merge_section(&mut merged, &mut merge, section_name, new, &names, owner)?;
    }
    make_current(&mut merged, &mut merge, new, &names, first);
    Ok((Value::Object(merged), merge))
}

/// The entries of one section of `new` into `merged` under mara's names (a context's cluster and
/// user too), each marked as `owner`'s; an entry of the same name that is not `owner`'s is
/// refused.
fn merge_section(
    merged: &mut Map<String, Value>,
    merge: &mut Merge,
    section_name: &str,
    new: &Value,
    names: &Names<'_>,
    owner: &Owner,
) -> Result<(), String> {
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
        let entry = mark::marked(
            section_name,
            &under_mara_s_names(&entry, section_name, &new_name, names),
            owner,
        );
        match list
            .iter_mut()
            .find(|e| e.get("name").and_then(Value::as_str) == Some(&new_name))
        {
            Some(existing) => match mark::claim(section_name, existing, owner) {
                Claim::Ours { unchanged } => {
                    if !unchanged {
                        merge.replaced.push(describe(section_name, &new_name));
                    }
                    *existing = entry;
                }
                claim => return Err(refusal(section_name, &new_name, &claim, owner)),
            },
            None => list.push(entry),
        }
        if section_name == "contexts" {
            merge.contexts.push(new_name);
        }
    }
    Ok(())
}

/// An entry of the stack's kubeconfig under mara's name `new_name`, a context's cluster and user
/// under theirs.
fn under_mara_s_names(entry: &Value, section_name: &str, new_name: &str, names: &Names) -> Value {
    let mut entry = entry.clone();
    entry["name"] = Value::String(new_name.to_string());
    if section_name == "contexts" {
        for (field, target) in [("cluster", "clusters"), ("user", "users")] {
            let referred = entry["context"][field].as_str().map(str::to_string);
            if let Some(new_ref) = referred.and_then(|r| names[target].get(&r).cloned()) {
                entry["context"][field] = Value::String(new_ref);
            }
        }
    }
    entry
}

/// Why the entry `name` of `section` is not replaced: the user's (no mark), or another stack's or
/// workspace's, named. A workspace known by its directory only is told how every copy of it
/// could share one name.
fn refusal(section: &str, name: &str, claim: &Claim, owner: &Owner) -> String {
    let one = section.trim_end_matches('s');
    let (whose, another_workspace) = match claim {
        Claim::Theirs(mark) if owner.workspace.answers_to(&mark.workspace) => (
            format!(
                " for this stack: it is stack `{}`'s, of this workspace; mara never replaces another stack's entry; rename or remove it",
                mark.stack
            ),
            false,
        ),
        Claim::Theirs(mark) => (
            format!(
                " for this workspace: it is stack `{}`'s of workspace `{}`; mara never replaces another workspace's entry; destroy that stack there, or rename or remove the entry",
                mark.stack, mark.workspace
            ),
            true,
        ),
        // Written by hand (or by a tool): whatever names the workspace, it is not mara's.
        _ => (
            ": mara never replaces it; rename or remove it".to_string(),
            false,
        ),
    };
    let mut message = format!(
        "it already has a {one} `{name}` that mara did not write{whose}, then run `mara up` again"
    );
    if another_workspace && owner.workspace.source == Source::Directory {
        message.push_str(&format!(
            " (this workspace has no `id` in mara.toml and no git remote `origin`, so only its directory, {}, recognises the entries it merged: set `id = \"…\"` in mara.toml, committed, for every copy of it to share)",
            owner.workspace.name
        ));
    }
    message
}

/// The context `new` makes current, under mara's name, said; and made current in `merged` on
/// the stack's `first` merge into the file, the one it replaces said to give back.
fn make_current(
    merged: &mut Map<String, Value>,
    merge: &mut Merge,
    new: &Value,
    names: &Names<'_>,
    first: bool,
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
    // clouds' own tools do); a later `up` — from any copy of the workspace — leaves the user's
    // choice alone, and the context to give back stays the one current before that first merge.
    if first {
        if current.as_deref() != Some(context.as_str()) {
            merge.previous = current;
        }
        merged.insert("current-context".into(), Value::String(context.clone()));
    }
    merge.context = Some(context);
}

/// Removes from `existing` the entries marked as `owner`'s, each only if it is still as mara
/// wrote it, and restores the `current-context` that `link` (the chain's) says was current
/// before the stack's. Returns the file, and what was removed and kept.
pub fn unmerge(existing: Value, owner: &Owner, link: Option<&Link>) -> (Value, Unmerged) {
    let Value::Object(mut map) = existing else {
        return (existing, Unmerged::default());
    };
    let mut done = Unmerged::default();
    let mut own_contexts = Vec::new();
    for section in SECTIONS {
        let Some(Value::Array(list)) = map.get_mut(section) else {
            continue;
        };
        list.retain(|entry| {
            let Claim::Ours { unchanged } = mark::claim(section, entry, owner) else {
                return true;
            };
            let name = entry.get("name").and_then(Value::as_str).unwrap_or("");
            if section == "contexts" {
                own_contexts.push(name.to_string());
            }
            let list = match unchanged {
                true => &mut done.removed,
                false => &mut done.kept,
            };
            list.push(describe(section, name));
            !unchanged
        });
    }
    restore_current(&mut map, link, &own_contexts);
    (Value::Object(map), done)
}

/// When the `current-context` is the stack's (`link`'s, or one of its `own` contexts), the one
/// current before it comes back.
fn restore_current(map: &mut Map<String, Value>, link: Option<&Link>, own: &[String]) {
    let Some(current) = map.get("current-context").and_then(Value::as_str) else {
        return;
    };
    let ours = link.is_some_and(|l| l.context == current) || own.iter().any(|c| c == current);
    if !ours {
        return;
    }
    let defined = |name: &str| {
        map.get("contexts")
            .and_then(Value::as_array)
            .is_some_and(|list| {
                list.iter()
                    .any(|c| c.get("name").and_then(Value::as_str) == Some(name))
            })
    };
    // The user's own `current-context` comes back as it was, even one this file does not define
    // (it may be in another file of KUBECONFIG's list) — but not a context of mara's that is gone
    // (another stack's, removed meanwhile from outside this workspace).
    match link.and_then(|l| l.previous.clone()) {
        Some(previous) if defined(&previous) || !previous.starts_with("mara-") => {
            map.insert("current-context".into(), Value::String(previous));
        }
        _ => {
            map.remove("current-context");
        }
    }
}

/// Reads, changes and writes back the user's kubeconfig `target` under its lock: `change` gets
/// the file's content (`None` when there is none) and returns what to write (`None`: nothing).
/// The file is written through a symlink to its target, atomically (a new one 0600, one that is
/// there keeping its mode and owner; a read-only or hard-linked one refused), after a backup of
/// it as it was before mara first changed it.
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
        // A file that cannot stay what it was (read-only, hard-linked) is refused before
        // anything is written, its backup included.
        let refused = |e| format!("cannot write {}: {e}", target.display());
        crate::files::replaceable(&real).map_err(refused)?;
        let backup = backup_path(&real);
        if real.exists() && !backup.exists() {
            std::fs::copy(&real, &backup)
                .map_err(|e| format!("cannot back up {}: {e}", target.display()))?;
        }
        let text = serde_saphyr::to_string(&changed).map_err(|e| e.to_string())?;
        // A new file is 0600 (it holds credentials); one that is there keeps its mode and
        // owner, as kubectl keeps them.
        crate::files::replace(&real, &text, 0o600).map_err(refused)?;
    }
    // What may only follow the file's write (a link out of the chain, a record carried over),
    // still under the lock.
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
    use crate::workspace::identity::Identity;
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

    /// The stack `stack` of the workspace `id`.
    fn owner(id: &str, stack: &str) -> Owner {
        Owner::new(Identity::named(id, Source::Configured), stack)
    }

    /// Where the hook of `stack` writes, in a workspace at `dir` (known by its directory).
    fn setup(dir: &Path, stack: &str) -> Files {
        Files {
            stack: dir.join(format!(".mara/kube/{stack}.yaml")),
            root: dir.to_path_buf(),
            stack_name: stack.to_string(),
            id: None,
        }
    }

    /// A user's kubeconfig at `dir/kube/config` holding `config`, and the environment naming it.
    fn user_file(dir: &Path, config: &Value) -> (PathBuf, BTreeMap<String, String>) {
        let kube = dir.join("kube/config");
        std::fs::create_dir_all(kube.parent().unwrap()).unwrap();
        std::fs::write(&kube, serde_saphyr::to_string(config).unwrap()).unwrap();
        let env = BTreeMap::from([("KUBECONFIG".to_string(), kube.display().to_string())]);
        (kube, env)
    }

    fn current(path: &Path) -> Option<String> {
        let value = read_kubeconfig(path).unwrap().unwrap();
        value["current-context"].as_str().map(str::to_string)
    }

    fn names(config: &Value, section: &str) -> Vec<String> {
        config[section]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn stacks_removed_in_the_order_they_came_give_back_the_user_s_context() {
        let dir = tempfile::tempdir().unwrap();
        let (kube, env) = user_file(dir.path(), &users_own());
        let (dev, prod) = (setup(dir.path(), "dev"), setup(dir.path(), "prod"));
        for (files, server) in [(&dev, "https://dev"), (&prod, "https://prod")] {
            let outputs = json!({"kubeconfig": eks(server)});
            write(files, &env, &outputs, "kubeconfig", true).unwrap();
        }
        assert_eq!(current(&kube).as_deref(), Some("mara-prod"));
        remove(&dev, &env).unwrap();
        assert_eq!(
            current(&kube).as_deref(),
            Some("mara-prod"),
            "not dev's: it stays"
        );
        remove(&prod, &env).unwrap();
        assert_eq!(
            current(&kube).as_deref(),
            Some("kubernetes-admin@kubernetes"),
            "the context before either stack"
        );
        assert_eq!(read_kubeconfig(&kube).unwrap().unwrap(), users_own());
        assert!(!contexts::path(&kube).exists(), "no chain left");
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
        assert_eq!(read_merged_into(&dev).unwrap(), Some(second.clone()));
        // Removed from the file it was merged into, whatever KUBECONFIG says now.
        let elsewhere = BTreeMap::from([("HOME".to_string(), dir.path().display().to_string())]);
        remove(&dev, &elsewhere).unwrap();
        assert_eq!(
            read_kubeconfig(&second).unwrap().unwrap()["clusters"],
            json!([])
        );
        assert!(!dev.merged_into().exists());
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
        let (dev_owner, prod_owner) = (owner("shop", "dev"), owner("shop", "prod"));
        let (merged, dev) = merge(Some(users_own()), &eks("https://dev"), &dev_owner).unwrap();
        // The user's `kubernetes` cluster still points at their kubeadm cluster.
        assert_eq!(
            merged["clusters"][0]["cluster"]["server"],
            "https://kubeadm:6443"
        );
        assert_eq!(merged["clusters"][1]["name"], "mara-dev");
        assert_eq!(merged["contexts"][1]["context"]["cluster"], "mara-dev");
        assert_eq!(merged["contexts"][1]["context"]["user"], "mara-dev");
        assert_eq!(
            mark::mark_of("contexts", &merged["contexts"][1])
                .unwrap()
                .stack,
            "dev"
        );
        assert_eq!(merged["current-context"], "mara-dev");
        assert_eq!(merged["preferences"], json!({"colors": true}));
        assert_eq!(dev.previous.as_deref(), Some("kubernetes-admin@kubernetes"));
        // A second AWS stack coexists with the first.
        let (both, prod) = merge(Some(merged), &eks("https://prod"), &prod_owner).unwrap();
        assert_eq!(
            names(&both, "contexts"),
            ["kubernetes-admin@kubernetes", "mara-dev", "mara-prod"]
        );
        // Unmerging prod gives dev back its context; unmerging dev gives the user theirs.
        let (back, done) = unmerge(both, &prod_owner, prod.link().as_ref());
        assert!(done.kept.is_empty());
        assert_eq!(done.removed.len(), 3);
        assert_eq!(back["current-context"], "mara-dev");
        let (back, _) = unmerge(back, &dev_owner, dev.link().as_ref());
        assert_eq!(back, users_own(), "exactly the user's file");
    }

    #[test]
    fn mara_s_context_becomes_current_once_and_the_user_s_choice_then_stands() {
        let shop = owner("shop", "dev");
        let (merged, first) = merge(Some(users_own()), &eks("https://dev"), &shop).unwrap();
        assert_eq!(merged["current-context"], "mara-dev");
        let mut switched = merged;
        switched["contexts"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "staging", "context": {"cluster": "kubernetes", "user": "kubernetes-admin"}}));
        switched["current-context"] = json!("staging");
        // A second up of dev, after the user chose `staging`: their choice stands.
        let (again, second) = merge(Some(switched), &eks("https://dev2"), &shop).unwrap();
        assert_eq!(again["current-context"], "staging");
        assert_eq!(again["clusters"][1]["cluster"]["server"], "https://dev2");
        assert_eq!(second.previous, None, "not its first merge");
        let (back, _) = unmerge(again, &shop, first.link().as_ref());
        assert_eq!(back["current-context"], "staging");
    }

    #[test]
    fn an_entry_mara_did_not_write_is_never_replaced() {
        let shop = owner("shop", "dev");
        let mut existing = users_own();
        existing["contexts"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "mara-dev", "context": {"cluster": "kubernetes", "user": "kubernetes-admin"}}));
        let error = merge(Some(existing.clone()), &eks("https://dev"), &shop).unwrap_err();
        assert!(
            error.contains(
                "already has a context `mara-dev` that mara did not write: mara never replaces it"
            ),
            "{error}"
        );
        assert!(!error.contains("`id`"), "the workspace has one: {error}");
        // Its own, mara replaces (a second up) — changed since or not; it says which it replaced
        // changed. What changed, `destroy` leaves.
        let (merged, _) = merge(None, &eks("https://dev"), &shop).unwrap();
        let mut edited = merged.clone();
        edited["users"][0]["user"]["exec"]["args"] = json!(["--profile", "mine"]);
        let (again, merge) = merge(Some(edited.clone()), &eks("https://dev2"), &shop).unwrap();
        assert_eq!(again["clusters"][0]["cluster"]["server"], "https://dev2");
        assert_eq!(merge.replaced, ["user `mara-dev`"]);
        let (left, done) = unmerge(edited, &shop, None);
        assert_eq!(done.kept, ["user `mara-dev`"]);
        assert_eq!(names(&left, "users"), ["mara-dev"]);
        assert!(names(&left, "clusters").is_empty());
    }

    #[test]
    fn several_entries_of_a_section_keep_their_names_after_the_stack() {
        let shop = owner("shop", "dev");
        let mut two = eks("https://dev");
        two["contexts"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "admin", "context": {"cluster": "kubernetes", "user": "aws"}}));
        let (merged, done) = merge(None, &two, &shop).unwrap();
        assert_eq!(
            names(&merged, "contexts"),
            ["mara-dev-aws", "mara-dev-admin"]
        );
        assert_eq!(merged["current-context"], "mara-dev-aws");
        assert_eq!(done.context.as_deref(), Some("mara-dev-aws"));
        // Nothing empty is added that was not there.
        let no_users = json!({"clusters": [{"name": "c", "cluster": {}}], "contexts": []});
        let (merged, _) = merge(None, &no_users, &shop).unwrap();
        assert!(merged.get("users").is_none() && merged.get("contexts").is_none());
    }

    #[test]
    fn ownership_is_recognised_once_the_workspace_s_state_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let (kube, env) = user_file(dir.path(), &users_own());
        let workspace = dir.path().join("shop");
        let dev = setup(&workspace, "dev");
        let outputs = json!({"kubeconfig": eks("https://dev")});
        write(&dev, &env, &outputs, "kubeconfig", true).unwrap();
        assert_eq!(
            merged_for(&dev, &env),
            Some(Merged {
                target: kube.clone(),
                context: Some("mara-dev".into())
            })
        );
        // `git clean -fdx`: nothing of mara's is left in the workspace.
        std::fs::remove_dir_all(workspace.join(".mara")).unwrap();
        assert_eq!(merged_for(&dev, &env).unwrap().target, kube);
        let again = json!({"kubeconfig": eks("https://dev2")});
        let lines = write(&dev, &env, &again, "kubeconfig", true).unwrap();
        assert!(lines.iter().all(|l| !l.contains("replaced")), "{lines:?}");
        let merged = read_kubeconfig(&kube).unwrap().unwrap();
        assert_eq!(names(&merged, "clusters"), ["kubernetes", "mara-dev"]);
        assert_eq!(merged["clusters"][1]["cluster"]["server"], "https://dev2");
        // And once more, before its destroy.
        std::fs::remove_dir_all(workspace.join(".mara")).unwrap();
        let lines = remove(&dev, &env).unwrap();
        assert_eq!(
            lines,
            [format!(
                "removed the stack's entries from {}",
                kube.display()
            )]
        );
        assert_eq!(read_kubeconfig(&kube).unwrap().unwrap(), users_own());
        // A destroy finds nothing more, and leaves the file alone.
        assert!(remove(&dev, &env).unwrap().is_empty());
    }

    /// A git clone at `dir` whose `origin` is `url`.
    fn clone_of(dir: &Path, url: &str) {
        std::fs::create_dir_all(dir.join(".git")).unwrap();
        let config = format!("[remote \"origin\"]\n\turl = {url}\n");
        std::fs::write(dir.join(".git/config"), config).unwrap();
    }

    #[test]
    fn a_second_clone_recognises_its_entries_and_no_other_workspace_does() {
        let dir = tempfile::tempdir().unwrap();
        let (kube, env) = user_file(dir.path(), &users_own());
        let outputs = json!({"kubeconfig": eks("https://dev")});
        // A CI runner's clone (a token in its URL), then a developer's (SSH).
        let (ci, laptop) = (dir.path().join("ci"), dir.path().join("laptop"));
        clone_of(
            &ci,
            "https://gitlab-ci-token:SECRET@gitlab.example.com/g/shop.git",
        );
        clone_of(&laptop, "git@gitlab.example.com:g/shop.git");
        write(&setup(&ci, "dev"), &env, &outputs, "kubeconfig", true).unwrap();
        write(&setup(&laptop, "dev"), &env, &outputs, "kubeconfig", true).unwrap();
        let text = std::fs::read_to_string(&kube).unwrap();
        assert!(
            text.contains("workspace: gitlab.example.com/g/shop"),
            "{text}"
        );
        for file in [kube.clone(), contexts::path(&kube)] {
            let text = std::fs::read_to_string(&file).unwrap();
            assert!(!text.contains("SECRET"), "{}: {text}", file.display());
        }
        // Another repository's workspace: refused, naming whose entry it is.
        let other = dir.path().join("other");
        clone_of(&other, "https://gitlab.example.com/g/other.git");
        let error = write(&setup(&other, "dev"), &env, &outputs, "kubeconfig", true).unwrap_err();
        assert!(
            error.contains("a cluster `mara-dev` that mara did not write for this workspace: it is stack `dev`'s of workspace `gitlab.example.com/g/shop`"),
            "{error}"
        );
        assert!(!error.contains("`id`"), "it has a remote: {error}");
        // A workspace known by its directory only is told of `id`.
        let alone = dir.path().join("alone");
        std::fs::create_dir_all(&alone).unwrap();
        let error = write(&setup(&alone, "dev"), &env, &outputs, "kubeconfig", true).unwrap_err();
        assert!(
            error.contains("no `id` in mara.toml and no git remote `origin`")
                && error.contains("set `id = \"…\"` in mara.toml"),
            "{error}"
        );
        assert_eq!(
            std::fs::read_to_string(&kube).unwrap(),
            text,
            "left as it was"
        );
        // The same workspace with an `id`: what its remote marked is still its own.
        let mut with_id = setup(&laptop, "dev");
        with_id.id = Some("shop".into());
        write(&with_id, &env, &outputs, "kubeconfig", true).unwrap();
        assert!(
            std::fs::read_to_string(&kube)
                .unwrap()
                .contains("workspace: shop")
        );
        remove(&setup(&ci, "prod"), &env).unwrap();
        assert!(
            current(&kube).is_some_and(|c| c == "mara-dev"),
            "not prod's"
        );
        // `ci` has no `id`, and answers to the remote only: the marks say `shop` now.
        remove(&with_id, &env).unwrap();
        assert_eq!(read_kubeconfig(&kube).unwrap().unwrap(), users_own());
    }

    #[test]
    fn the_user_s_own_entry_of_mara_s_name_is_never_replaced_by_a_workspace_known_by_its_directory()
    {
        let dir = tempfile::tempdir().unwrap();
        let mut own = users_own();
        own["clusters"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "mara-dev", "cluster": {"server": "https://mine"}}));
        let (kube, env) = user_file(dir.path(), &own);
        let before = std::fs::read_to_string(&kube).unwrap();
        let outputs = json!({"kubeconfig": eks("https://dev")});
        let error = write(
            &setup(dir.path(), "dev"),
            &env,
            &outputs,
            "kubeconfig",
            true,
        )
        .unwrap_err();
        assert!(
            error.contains(
                "already has a cluster `mara-dev` that mara did not write: mara never replaces it"
            ),
            "{error}"
        );
        // Written by hand, it is nobody's workspace's: no `id` would make it mara's.
        assert!(!error.contains("set `id"), "{error}");
        assert_eq!(std::fs::read_to_string(&kube).unwrap(), before);
        // A destroy leaves it too (and removes the stack's own file, written before the merge).
        let lines = remove(&setup(dir.path(), "dev"), &env).unwrap();
        assert_eq!(lines, ["removed .mara/kube/dev.yaml"]);
        assert_eq!(std::fs::read_to_string(&kube).unwrap(), before);
    }

    /// What mara before issue 42 left: the entries merged without a mark, its record in
    /// `.mara`, and the chain keyed by the record's path.
    fn merged_before_issue_42(files: &Files, kube: &Path, server: &str) {
        let shop = owner("unused", &files.stack_name);
        let (merged, done) = merge(read_kubeconfig(kube).unwrap(), &eks(server), &shop).unwrap();
        let mut entries: BTreeMap<String, BTreeMap<String, Value>> = BTreeMap::new();
        let mut unmarked = merged.clone();
        for section in SECTIONS {
            for entry in unmarked[section].as_array_mut().unwrap() {
                if let Some(Value::Object(body)) = entry.get_mut(mark::body(section)) {
                    body.remove("extensions");
                }
                let name = entry["name"].as_str().unwrap().to_string();
                if name.starts_with("mara-") {
                    entries
                        .entry(section.into())
                        .or_default()
                        .insert(name, entry.clone());
                }
            }
        }
        std::fs::write(kube, serde_saphyr::to_string(&unmarked).unwrap()).unwrap();
        let record = json!({"target": kube, "entries": entries,
            "context": done.context, "previous_context": done.previous});
        std::fs::create_dir_all(files.record().parent().unwrap()).unwrap();
        std::fs::write(files.record(), record.to_string()).unwrap();
        let mut chain = contexts::read(kube).unwrap();
        chain.merged(
            &files.record_key(),
            done.context.as_deref().unwrap(),
            done.previous,
        );
        contexts::write(kube, &chain).unwrap();
    }

    #[test]
    fn an_old_record_is_carried_over_once_and_then_removed() {
        let dir = tempfile::tempdir().unwrap();
        let (kube, env) = user_file(dir.path(), &users_own());
        let workspace = dir.path().join("shop");
        let (dev, prod) = (setup(&workspace, "dev"), setup(&workspace, "prod"));
        merged_before_issue_42(&dev, &kube, "https://dev");
        merged_before_issue_42(&prod, &kube, "https://prod");
        // The user changed prod's user since; kubectl rewrote the file its way (defaults).
        let mut config = read_kubeconfig(&kube).unwrap().unwrap();
        config["users"][1]["user"]["exec"]["provideClusterInfo"] = json!(false);
        config["users"][2]["user"]["exec"]["args"] = json!(["--profile", "mine"]);
        std::fs::write(&kube, serde_saphyr::to_string(&config).unwrap()).unwrap();
        // dev's up carries its record over: its entries marked, the record gone.
        let outputs = json!({"kubeconfig": eks("https://dev")});
        let lines = write(&dev, &env, &outputs, "kubeconfig", true).unwrap();
        assert!(
            lines[1]
                .starts_with("carried over .mara/kube/dev.merged.json: 3 of the stack's entries"),
            "{lines:?}"
        );
        assert!(!dev.record().exists());
        assert_eq!(read_merged_into(&dev).unwrap(), Some(kube.clone()));
        let chain = contexts::read(&kube).unwrap();
        let dev_key = dev.owner().unwrap().key();
        assert_eq!(
            chain.stacks[&dev_key].previous.as_deref(),
            Some("kubernetes-admin@kubernetes")
        );
        assert!(!chain.stacks.contains_key(&dev.record_key()));
        // prod's destroy: carried over, then removed — but its changed user, unmarked, stays.
        let lines = remove(&prod, &env).unwrap();
        assert!(lines[0].contains("2 of the stack's entries"), "{lines:?}");
        assert!(!prod.record().exists());
        let left = read_kubeconfig(&kube).unwrap().unwrap();
        assert_eq!(
            names(&left, "users"),
            ["kubernetes-admin", "mara-dev", "mara-prod"]
        );
        assert_eq!(
            names(&left, "contexts"),
            ["kubernetes-admin@kubernetes", "mara-dev"]
        );
        assert_eq!(
            current(&kube).as_deref(),
            Some("mara-dev"),
            "prod's gave back dev's"
        );
        // Nothing to carry over any more; dev's destroy gives the user their context.
        remove(&dev, &env).unwrap();
        assert_eq!(
            current(&kube).as_deref(),
            Some("kubernetes-admin@kubernetes")
        );
        assert_eq!(
            names(&read_kubeconfig(&kube).unwrap().unwrap(), "clusters"),
            ["kubernetes"]
        );
        assert!(!contexts::path(&kube).exists());
    }
}
