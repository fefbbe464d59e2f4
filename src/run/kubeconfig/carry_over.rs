//! The one-shot carry-over of a record from before issue 42 (docs/decisions.md, "Kubeconfig
//! ownership travels with the kubeconfig (issue 42)").
//!
//! Until then, what mara merged into a user's kubeconfig was recorded in the workspace, in
//! `<state_dir>/kube/<stack>.merged.json`: the file, each entry as written, the context made
//! current and the one current before. The first `up` or `destroy` of the stack that finds one
//! reads it, once: each entry it lists that is still as recorded (kubectl's rewrites aside) gets
//! mara's mark; the stack's link in the chain of contexts beside the file, keyed by the record's
//! path, is keyed by workspace and stack (or made from the record, for a record older than the
//! chain); the file is noted as where the stack is merged; and the record is removed. An entry
//! changed since it was recorded gets no mark: nothing says it is still mara's, so it is the
//! user's from then on. Nothing else reads a record: once none is left, this module can go.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

use super::{Files, Owner, SECTIONS, contexts, mark, resolve_symlinks, with_user_file};

/// A record of a merge, as mara wrote it before issue 42.
#[derive(Debug, Deserialize)]
struct Record {
    /// The user's kubeconfig it was merged into.
    target: PathBuf,
    /// Each section's entries, as written, by name.
    #[serde(default)]
    entries: BTreeMap<String, BTreeMap<String, Value>>,
    /// The context mara made current.
    context: Option<String>,
    /// The `current-context` before mara first set its own.
    previous_context: Option<String>,
}

/// Carries the stack's record over into marks in the file it names, and removes it; nothing
/// when there is none. The lines to show.
pub(super) fn carry_over(files: &Files, owner: &Owner) -> Result<Vec<String>, String> {
    let path = files.record();
    let record: Record = match crate::files::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map_err(|e| format!("{} is not mara's record of a merge: {e}", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let target = &record.target;
    let real = resolve_symlinks(target);
    let marked = with_user_file(
        target,
        |existing| {
            let Some(existing) = existing else {
                return Ok((None, 0));
            };
            let (config, marked) = mark_recorded(existing, &record, owner);
            let mut chain = contexts::read(&real)?;
            let key = owner.key();
            let old = files.record_key();
            chain.claim(&key, |k, _| k == old);
            let context_kept = (record.context.as_ref())
                .is_some_and(|c| super::own_names(&config, owner, "contexts").contains(c));
            if let Some(context) = record.context.as_ref().filter(|_| context_kept)
                && !chain.stacks.contains_key(&key)
            {
                chain.merged(&key, context, record.previous_context.clone());
            }
            contexts::write(&real, &chain)?;
            super::write_merged_into(files, target)?;
            Ok((Some(config), marked))
        },
        // Only once the file has its marks, still under its lock: the record is needed no more.
        |marked| {
            std::fs::remove_file(&path)
                .map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
            Ok(marked)
        },
    )?;
    Ok(vec![format!(
        "carried over {}: {marked} of the stack's entries in {} now carry mara's mark",
        files.shown(&path),
        target.display()
    )])
}

/// `config` with `owner`'s mark on each entry `record` lists that is still as recorded and has
/// no mark of mara's; how many got one.
fn mark_recorded(mut config: Value, record: &Record, owner: &Owner) -> (Value, usize) {
    let mut marked = 0;
    for (section, entries) in &record.entries {
        if !SECTIONS.contains(&section.as_str()) {
            continue;
        }
        let Some(Value::Array(list)) = config.get_mut(section) else {
            continue;
        };
        for entry in list.iter_mut() {
            let written = entry
                .get("name")
                .and_then(Value::as_str)
                .and_then(|name| entries.get(name));
            let Some(written) = written else {
                continue;
            };
            if mark::mark_of(section, entry).is_none() && mark::same(section, entry, written) {
                *entry = mark::marked(section, entry, owner);
                marked += 1;
            }
        }
    }
    (config, marked)
}
