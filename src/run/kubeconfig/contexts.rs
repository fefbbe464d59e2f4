//! The contexts mara made current in one user's kubeconfig, kept beside that file (docs/
//! commands.md, "Hooks"): which context each stack's merge made current and which one was
//! current before it, for every workspace that merges into the file. A stack's destroy gives the
//! user back the context that was current before it — and hands that context on to the stack
//! whose merge came after it — whatever order stacks, and workspaces, are destroyed in.
//!
//! The chain is `.<file>.mara-contexts.json` in the kubeconfig's directory, private, read and
//! written only under the kubeconfig's lock. A stack is keyed by its owner, `<stack>@<workspace>`
//! (`mark::Owner::key`): the same for every copy of the workspace, so that a cleaned workspace or
//! a second clone gives back the right context. Before issue 42 a stack was keyed by the absolute
//! path of its record in `.mara`; such a link is taken over (`claim`) by the owner it matches.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One stack's merge: the context it made current, and the one current before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    pub context: String,
    pub previous: Option<String>,
}

/// Every stack merged into one kubeconfig, by its owner (`<stack>@<workspace>`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Chain {
    pub stacks: BTreeMap<String, Link>,
}

impl Chain {
    /// `owner`'s merge made `context` current, `previous` being current before; a stack merged
    /// again keeps the context current before its first merge.
    pub fn merged(&mut self, owner: &str, context: &str, previous: Option<String>) -> &Link {
        let link = self.stacks.entry(owner.to_string()).or_insert(Link {
            context: context.to_string(),
            previous,
        });
        link.context = context.to_string();
        link
    }

    /// `key`'s link, when it has none, from the first other key `was_it` says is the same
    /// owner's (an alias of its workspace, or a key from before issue 42). Whether it changed.
    pub fn claim(&mut self, key: &str, was_it: impl Fn(&str, &Link) -> bool) -> bool {
        if self.stacks.contains_key(key) {
            return false;
        }
        let Some(old) = (self.stacks.iter())
            .find(|(k, link)| was_it(k, link))
            .map(|(k, _)| k.clone())
        else {
            return false;
        };
        let link = self.stacks.remove(&old).expect("the link found");
        self.stacks.insert(key.to_string(), link);
        true
    }

    /// `owner` taken out: its link, and every other stack that would give back its context
    /// gives back the one current before it instead.
    pub fn removed(&mut self, owner: &str) -> Option<Link> {
        let link = self.stacks.remove(owner)?;
        for other in self.stacks.values_mut() {
            if other.previous.as_deref() == Some(link.context.as_str()) {
                other.previous = link.previous.clone();
            }
        }
        Some(link)
    }
}

/// Whether `key` is one from before issue 42: the absolute path of a stack's record,
/// `<state_dir>/kube/<stack>.merged.json`.
pub fn keyed_by_record(key: &str) -> bool {
    key.starts_with('/') && key.ends_with(".merged.json")
}

/// The chain of the kubeconfig at `real` (its symlinks followed).
pub fn path(real: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(real.file_name().unwrap_or_default());
    name.push(".mara-contexts.json");
    real.with_file_name(name)
}

pub fn read(real: &Path) -> Result<Chain, String> {
    let file = path(real);
    match crate::files::read_to_string(&file) {
        Ok(text) => serde_json::from_str(&text)
            .map_err(|e| format!("{} is not mara's chain of contexts: {e}", file.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Chain::default()),
        Err(e) => Err(format!("cannot read {}: {e}", file.display())),
    }
}

/// Writes the chain (removes it once empty).
pub fn write(real: &Path, chain: &Chain) -> Result<(), String> {
    let file = path(real);
    if chain.stacks.is_empty() {
        return match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(format!("cannot remove {}: {e}", file.display()))
            }
            _ => Ok(()),
        };
    }
    let text = serde_json::to_string_pretty(chain).expect("a chain serializes");
    crate::files::write_private(&file, &text)
        .map_err(|e| format!("cannot write {}: {e}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_current_before_the_first_merge_comes_back_whatever_the_order() {
        let orders = [
            [0, 1, 2],
            [1, 0, 2],
            [1, 2, 0],
            [2, 1, 0],
            [0, 2, 1],
            [2, 0, 1],
        ];
        for order in orders {
            let mut chain = Chain::default();
            let mut current = Some("prod".to_string());
            for ws in 0..3 {
                let context = format!("mara-{ws}");
                chain.merged(&format!("ws{ws}"), &context, current.clone());
                current = Some(context);
            }
            for ws in order {
                let link = chain.removed(&format!("ws{ws}")).unwrap();
                if current.as_deref() == Some(link.context.as_str()) {
                    current = link.previous;
                }
            }
            assert_eq!(current.as_deref(), Some("prod"), "{order:?}");
            assert!(chain.stacks.is_empty());
        }
    }

    #[test]
    fn a_link_keyed_the_old_way_is_taken_over_once() {
        let mut chain = Chain::default();
        let old = "/home/u/shop/.mara/kube/dev.merged.json";
        chain.merged(old, "mara-dev", Some("prod".into()));
        chain.merged("qa@shop", "mara-qa", Some("mara-dev".into()));
        let was_it = |k: &str, _: &Link| k == old;
        assert!(chain.claim("dev@shop", was_it));
        assert_eq!(chain.stacks["dev@shop"].previous.as_deref(), Some("prod"));
        assert!(!chain.stacks.contains_key(old));
        assert!(!chain.claim("dev@shop", |_, _| true), "it has its own");
        assert!(!chain.claim("x@shop", |_, _| false));
        assert!(keyed_by_record(old) && !keyed_by_record("dev@shop"));
    }
}
