//! The keys of the shared configuration that something of a deployment is known to read
//! (docs/commands.md, "config"): those its provider declares (`[[config]]`, a project's
//! `required_config` and `[[project.secret]]`), those each Pulumi project declares under
//! `config:` in its `Pulumi.yaml`, and each Terraform module's variables in its namespace —
//! which are all that module reads of it. `config set` warns of a key none of them is.

use std::collections::{BTreeMap, BTreeSet};

use super::Deployment;
use crate::engine::ProjectFiles;
use crate::workspace::pulumi_project::PulumiProject;

/// What a deployment is known to read of the shared configuration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KnownKeys {
    /// Every key known, `namespace:key` (a path's first part: `app:labels` for
    /// `app:labels.owner`).
    keys: BTreeSet<String>,
    /// The namespaces whose every key read is known, each with the project that reads it (a
    /// Terraform module, by its path).
    closed: BTreeMap<String, String>,
}

impl KnownKeys {
    /// The keys of every project of `deployment`'s provider, its files read on every core (a
    /// project file that cannot be read says nothing here: the checks before a run say why).
    pub fn of(deployment: &Deployment) -> KnownKeys {
        let provider = &deployment.provider;
        let workspace = &deployment.files.workspace;
        let default_engine = workspace.settings.engine;
        let declared = (provider.config.iter().map(|c| c.key.as_str())).chain(
            provider.projects.iter().flat_map(|p| {
                (p.required_config.iter().map(String::as_str))
                    .chain(p.secrets.iter().map(|s| s.key.as_str()))
            }),
        );
        let mut known = KnownKeys::default();
        known.keys.extend(declared.map(first_part));
        let projects = &provider.projects;
        let read = crate::parallel::map(projects.len(), |k| {
            let project = &projects[k];
            let engine = project.engine_or(default_engine);
            let dir = workspace.project_dir(&project.path);
            let pulumi = (engine.project_files() == ProjectFiles::PulumiProject)
                .then(|| PulumiProject::load_in(&dir))
                .flatten()
                .and_then(Result::ok);
            let variables = engine.config_keys_read(&dir);
            (pulumi, variables)
        });
        // A namespace a project reads without its files saying every key (a Pulumi program's)
        // is open, whoever else reads it.
        let mut open = BTreeSet::new();
        for (project, (pulumi, variables)) in projects.iter().zip(read) {
            let engine = project.engine_or(default_engine);
            let name = pulumi.as_ref().map(|p| p.name.as_str());
            let namespace = engine.config_namespace(project.leaf(), name);
            if let Some(pulumi) = &pulumi {
                known
                    .keys
                    .extend(pulumi.config_keys.iter().map(|k| first_part(k)));
            }
            match (variables, namespace) {
                (Some(variables), Some(namespace)) => {
                    let keys = variables.iter().map(|v| format!("{namespace}:{v}"));
                    known.keys.extend(keys);
                    known.closed.insert(namespace, project.path.clone());
                }
                (None, Some(namespace)) => {
                    open.insert(namespace);
                }
                _ => {}
            }
        }
        known
            .closed
            .retain(|namespace, _| !open.contains(namespace));
        known
    }

    /// Whether `key` (a top-level key, `namespace:key`) is one something is known to read.
    pub fn knows(&self, key: &str) -> bool {
        self.keys.contains(key)
    }

    /// The known key `key` is likely a misspelling of: one of its namespace spelled like it
    /// (`app:replica` for `app:replicas`; the names alone compared, as a shared `app:` would
    /// make any two alike), else one of another namespace spelled like it whole (`ap:replicas`).
    pub fn near(&self, key: &str) -> Option<&str> {
        let (namespace, name) = key.split_once(':')?;
        let (same, other): (Vec<&String>, Vec<&String>) = (self.keys.iter())
            .partition(|known| known.split_once(':').is_some_and(|(n, _)| n == namespace));
        let names = same
            .iter()
            .filter_map(|k| k.split_once(':'))
            .map(|(_, n)| n);
        match crate::error::did_you_mean(name, names) {
            Some(near) => same
                .into_iter()
                .find(|k| k.split_once(':').is_some_and(|(_, n)| n == near))
                .map(String::as_str),
            None => crate::error::did_you_mean(key, other.into_iter().map(String::as_str)),
        }
    }

    /// The project that reads every key of `key`'s namespace that is read, when one is known
    /// to (a Terraform module: its variables).
    pub fn sole_reader(&self, key: &str) -> Option<&str> {
        let namespace = key.split_once(':')?.0;
        self.closed.get(namespace).map(String::as_str)
    }
}

/// A declared key's top-level key: `app:labels` of `app:labels.owner` or `app:list[0]`.
fn first_part(key: &str) -> String {
    key.split(['.', '[']).next().unwrap_or(key).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_near_one_of_its_namespace_by_its_name() {
        let known = KnownKeys {
            keys: ["app:replicas", "app:image", "network:cidr"]
                .map(String::from)
                .into(),
            closed: BTreeMap::from([("app".into(), "apps/app".into())]),
        };
        assert_eq!(known.near("app:replica"), Some("app:replicas"));
        assert_eq!(
            known.near("app:zone"),
            None,
            "`app:` alone makes no two alike"
        );
        assert_eq!(known.near("netwrk:cidr"), Some("network:cidr"));
        assert_eq!(known.sole_reader("app:zone"), Some("apps/app"));
        assert_eq!(known.sole_reader("network:cidrr"), None);
        assert!(known.knows("app:image") && !known.knows("app:imag"));
    }
}
