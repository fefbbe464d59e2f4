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
        let mut pulumi_packs: Vec<PathBuf> = Vec::new();
        for pack in raw.pulumi_packs.into_iter().flatten() {
            // Named twice (`policy/a`, `./policy/a/`): run once.
            match self.pulumi_pack(&pack) {
                Some(path) if !pulumi_packs.contains(&path) => pulumi_packs.push(path),
                _ => {}
            }
        }
        PolicySettings {
            paths,
            packages,
            deployment_packages,
            pulumi_packs,
        }
    }

    /// A Pulumi policy pack of `policy.pulumi_packs`: a directory of the workspace (a link
    /// that leads out of it is refused too) with a `PulumiPolicy.yaml` that names its `runtime`
    /// (Pulumi fails on any other, once it has started), whose path has no comma (Pulumi splits
    /// `--policy-pack` values at commas). Its path as written, without `.` or a trailing `/`.
    fn pulumi_pack(&mut self, value: &Spanned<String>) -> Option<PathBuf> {
        let path: PathBuf = (self.path_in("pulumi_packs", value)?.components())
            .filter(|c| *c != std::path::Component::CurDir)
            .collect();
        let root = self.path.parent().unwrap_or(std::path::Path::new("."));
        let text = value.get_ref();
        let problem = if text.contains(',') {
            Some(format!(
                "`{text}` has a comma, which Pulumi reads as two packs: rename the directory"
            ))
        } else {
            pack_problem(root, &path).map(|why| format!("`{text}` {why}"))
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

/// Why the directory at `path` (from `root`) is not a Pulumi policy pack mara can pass on; `None`
/// when it is one.
fn pack_problem(root: &std::path::Path, path: &std::path::Path) -> Option<String> {
    let dir = root.join(path);
    if dir.is_file() {
        return Some(
            "is a file: name the pack's directory (the one holding its PulumiPolicy.yaml)".into(),
        );
    }
    if let (Ok(real), Ok(real_root)) = (dir.canonicalize(), root.canonicalize()) {
        if !real.starts_with(&real_root) {
            return Some(format!(
                "leads out of the workspace (to {}): keep the pack inside it",
                real.display()
            ));
        }
        // mara passes the pack's absolute path, which Pulumi would split at a comma.
        if real.to_string_lossy().contains(',') {
            return Some(format!(
                "is at {}, a path with a comma, which Pulumi reads as two packs: move the workspace",
                real.display()
            ));
        }
    }
    let project = dir.join("PulumiPolicy.yaml");
    let Ok(text) = std::fs::read_to_string(&project) else {
        return Some("is not a Pulumi policy pack: it has no PulumiPolicy.yaml".into());
    };
    #[derive(serde::Deserialize)]
    struct PolicyProject {
        runtime: Option<serde_json::Value>,
    }
    match serde_saphyr::from_str::<PolicyProject>(&text) {
        Err(error) => Some(format!(
            "has a PulumiPolicy.yaml that is not YAML Pulumi reads: {}",
            error.to_string().lines().next().unwrap_or_default()
        )),
        Ok(PolicyProject { runtime: None }) => {
            Some("has a PulumiPolicy.yaml without its `runtime` (nodejs, python, opa, …)".into())
        }
        Ok(_) => None,
    }
}
