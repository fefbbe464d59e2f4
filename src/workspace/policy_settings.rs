//! `[policy]` in mara.toml (docs/commands.md, "Policies"): where the workspace's Rego policies
//! are, which packages are evaluated per project and which over the whole deployment, and the
//! Pulumi policy packs its previews and updates run. Each value is checked here with its line.

use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use super::budgets::Checked;
use crate::error::{Location, Problem};

/// The workspace's policies, with every default applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySettings {
    /// Files or directories of `.rego` files, from the workspace root; each with where
    /// mara.toml names it (`None`: the default `policy/`, which may be absent).
    pub paths: Vec<(PathBuf, Option<Location>)>,
    /// The packages evaluated over each project's plan (conftest's namespaces).
    pub packages: Vec<String>,
    /// The packages evaluated once over the whole deployment.
    pub deployment_packages: Vec<String>,
    /// Pulumi policy packs (directories with a `PulumiPolicy.yaml`, from the workspace root),
    /// passed to Pulumi's previews and updates (`--policy-pack`).
    pub pulumi_packs: Vec<PathBuf>,
}

impl Default for PolicySettings {
    fn default() -> Self {
        PolicySettings {
            paths: vec![(PathBuf::from("policy"), None)],
            packages: vec!["main".into()],
            deployment_packages: vec!["deployment".into()],
            pulumi_packs: Vec::new(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    paths: Option<Vec<Spanned<String>>>,
    packages: Option<Vec<Spanned<String>>>,
    deployment_packages: Option<Vec<Spanned<String>>>,
    pulumi_packs: Option<Vec<Spanned<String>>>,
}

impl Checked<'_> {
    /// `[policy]`: paths inside the workspace, package names as Rego writes them.
    pub fn policy(&mut self, raw: Option<RawPolicy>) -> PolicySettings {
        let defaults = PolicySettings::default();
        let Some(raw) = raw else {
            return defaults;
        };
        let paths = match raw.paths {
            Some(paths) => (paths.into_iter())
                .filter_map(|p| {
                    let at = self.at(&p);
                    self.path_in("paths", &p).map(|path| (path, Some(at)))
                })
                .collect(),
            None => defaults.paths,
        };
        let packages = match raw.packages {
            Some(names) => self.packages("packages", names),
            None => defaults.packages,
        };
        let deployment_packages = match raw.deployment_packages {
            Some(names) => self.packages("deployment_packages", names),
            None => defaults.deployment_packages,
        };
        let pulumi_packs = (raw.pulumi_packs.into_iter().flatten())
            .filter_map(|p| self.pulumi_pack(&p))
            .collect();
        PolicySettings {
            paths,
            packages,
            deployment_packages,
            pulumi_packs,
        }
    }

    /// A Pulumi policy pack of `policy.pulumi_packs`: a directory of the workspace with a
    /// `PulumiPolicy.yaml` (Pulumi fails on any other, once it has started), whose path has no
    /// comma (Pulumi splits `--policy-pack` values at commas).
    fn pulumi_pack(&mut self, value: &Spanned<String>) -> Option<PathBuf> {
        let path = self.path_in("pulumi_packs", value)?;
        let root = self.path.parent().unwrap_or(std::path::Path::new("."));
        let problem = if value.get_ref().contains(',') {
            Some(format!(
                "`{}` has a comma, which Pulumi reads as two packs: rename the directory",
                value.get_ref()
            ))
        } else if !root.join(&path).join("PulumiPolicy.yaml").is_file() {
            Some(format!(
                "`{}` is not a Pulumi policy pack: it has no PulumiPolicy.yaml",
                value.get_ref()
            ))
        } else {
            None
        };
        let Some(message) = problem else {
            return Some(path);
        };
        let at = self.at(value);
        (self.problems).push(
            Problem::new(message)
                .at(at)
                .subject("`policy.pulumi_packs`"),
        );
        None
    }

    fn at<T>(&self, value: &Spanned<T>) -> Location {
        Location::at_offset(self.path, self.text, value.span().start)
    }

    /// A path of `policy.<key>`: relative, inside the workspace.
    fn path_in(&mut self, key: &str, value: &Spanned<String>) -> Option<PathBuf> {
        let text = value.get_ref();
        let path = std::path::Path::new(text);
        let problem = if text.trim().is_empty() {
            Some("must name a file or directory, not be empty".to_string())
        } else if path.is_absolute() {
            Some(format!("`{text}` must be relative to the workspace root"))
        } else if path
            .components()
            .any(|c| c == std::path::Component::ParentDir)
        {
            Some(format!("`{text}` must stay inside the workspace (no `..`)"))
        } else {
            None
        };
        match problem {
            Some(message) => {
                let at = self.at(value);
                (self.problems).push(
                    Problem::new(message)
                        .at(at)
                        .subject(format!("`policy.{key}`")),
                );
                None
            }
            None => Some(PathBuf::from(text)),
        }
    }

    /// Package names of `policy.<key>`: Rego's dotted names (`main`, `terraform.aws`).
    fn packages(&mut self, key: &str, names: Vec<Spanned<String>>) -> Vec<String> {
        let valid = |name: &str| {
            !name.is_empty()
                && name.split('.').all(|part| {
                    let mut chars = part.chars();
                    chars
                        .next()
                        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
                })
        };
        let mut packages = Vec::new();
        for name in names {
            let text = name
                .get_ref()
                .strip_prefix("data.")
                .unwrap_or(name.get_ref());
            if valid(text) {
                packages.push(text.to_string());
                continue;
            }
            let at = self.at(&name);
            self.problems.push(
                Problem::new(format!(
                    "{:?} is not a Rego package name (dotted names of letters, digits and `_`, as `main` or `terraform.aws`)",
                    name.get_ref()
                ))
                .at(at)
                .subject(format!("`policy.{key}`")),
            );
        }
        packages
    }
}
