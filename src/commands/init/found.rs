//! What `mara init` finds in a repository of projects (docs/commands.md, "init"): its Pulumi
//! projects (a `Pulumi.yaml`) and Terraform modules (`.tf` files), and whether they are a
//! built-in provider's — the original MARA's layout, under `pulumi/python` — or its own.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::engine::{EngineKind, ProjectFiles};
use crate::provider::Provider;
use crate::workspace::pulumi_project::PulumiProject;
use crate::workspace::survey;

/// A project found: its directory relative to the root, its engine, and a Pulumi project's name.
#[derive(Debug, Clone)]
pub struct Found {
    pub path: String,
    pub engine: EngineKind,
    pub name: Option<String>,
    /// A Pulumi project's Python virtualenv, as its file names it (relative to its directory).
    pub virtualenv: Option<String>,
}

/// A built-in provider whose projects are found under one directory.
#[derive(Debug, Clone)]
pub struct Matched {
    pub provider: String,
    pub found: usize,
    pub of: usize,
}

/// What the repository holds.
#[derive(Debug, Clone)]
pub enum Layout {
    /// No project: the starter is written.
    Empty,
    /// The built-in providers' projects under `projects_dir`; the virtualenvs their
    /// `Pulumi.yaml` files name that are not there (relative to the root).
    Builtin {
        projects_dir: String,
        matched: Vec<Matched>,
        venvs: Vec<String>,
    },
    /// Projects of its own, listed by a provider written for them.
    Own(Vec<Found>),
}

/// The projects under `root`: every directory with a `Pulumi.yaml` (or `Pulumi.yml`), or with
/// `.tf` files; none inside another found (a module's own modules are its).
pub fn projects(root: &Path) -> Vec<Found> {
    let mut found: Vec<(PathBuf, Found)> = Vec::new();
    for (dir, _) in survey::directories(root) {
        if found.iter().any(|(d, _)| dir.starts_with(d)) {
            continue;
        }
        let relative = dir.strip_prefix(root).unwrap_or(&dir).to_string_lossy();
        if relative.is_empty() {
            continue;
        }
        let project = match PulumiProject::load_in(&dir) {
            Some(read) => {
                let read = read.ok();
                Found {
                    path: relative.into_owned(),
                    engine: EngineKind::default(),
                    name: read.as_ref().map(|p| p.name.clone()),
                    virtualenv: read.and_then(|p| p.virtualenv),
                }
            }
            None if has_tf(&dir) => Found {
                path: relative.into_owned(),
                engine: EngineKind::named("terraform").expect("an engine of mara's"),
                name: None,
                virtualenv: None,
            },
            None => continue,
        };
        found.push((dir, project));
    }
    found.into_iter().map(|(_, f)| f).collect()
}

pub fn has_tf(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".tf"))
    })
}

/// The layout of `root`, which holds `projects`, against the built-in `providers`: theirs when
/// one directory holds at least half of some provider's projects (at least two), else its own.
pub fn layout(root: &Path, projects: Vec<Found>, providers: &[Provider]) -> Layout {
    if projects.is_empty() {
        return Layout::Empty;
    }
    let mut all: Vec<(String, Matched)> = Vec::new();
    for provider in providers {
        let paths: Vec<&str> = (provider.projects.iter())
            .filter(|p| p.engine_or(EngineKind::default()).project_files() != ProjectFiles::Nothing)
            .map(|p| p.path.as_str())
            .collect();
        let Some((dir, found)) = survey::projects_dir_of(root, &paths) else {
            continue;
        };
        if found >= 2 && found * 2 >= paths.len() {
            let provider = provider.name.clone();
            all.push((
                dir,
                Matched {
                    provider,
                    found,
                    of: paths.len(),
                },
            ));
        }
    }
    // The directory that holds the most, and every provider it holds.
    let Some(best) = all
        .iter()
        .max_by_key(|(_, m)| m.found)
        .map(|(d, _)| d.clone())
    else {
        return Layout::Own(projects);
    };
    Layout::Builtin {
        venvs: missing_venvs(root, &projects),
        matched: (all.into_iter())
            .filter(|(dir, _)| *dir == best)
            .map(|(_, m)| m)
            .collect(),
        projects_dir: best,
    }
}

/// The virtualenvs the Pulumi projects' files name that are not there, relative to `root`.
fn missing_venvs(root: &Path, projects: &[Found]) -> Vec<String> {
    let mut missing = BTreeSet::new();
    for project in projects {
        let dir = root.join(&project.path);
        let absent = (project.virtualenv.as_deref())
            .and_then(|venv| crate::workspace::pulumi_project::missing_virtualenv(&dir, venv));
        if let Some(venv) = absent {
            let shown = venv.strip_prefix(root).unwrap_or(&venv);
            missing.insert(shown.to_string_lossy().into_owned());
        }
    }
    missing.into_iter().collect()
}
