//! The contexts mara made current in one user's kubeconfig, kept beside that file (docs/
//! commands.md, "Hooks"): which context each stack's merge made current and which one was
//! current before it, for every workspace that merges into the file. A stack's destroy gives the
//! user back the context that was current before it — and hands that context on to the stack
//! whose merge came after it — whatever order stacks, and workspaces, are destroyed in.
//!
//! The chain is `.<file>.mara-contexts.json` in the kubeconfig's directory, private, read and
//! written only under the kubeconfig's lock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One stack's merge: the context it made current, and the one current before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    pub context: String,
    pub previous: Option<String>,
}

/// Every stack merged into one kubeconfig, by its owner (the record of the workspace's stack).
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
}
