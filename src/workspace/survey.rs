//! A look over a repository's directories (docs/commands.md, "init"): where a provider's
//! projects are when they are not where the workspace looks (the original MARA's are under
//! `pulumi/python`), and which directories hold a project of an engine's. Bounded: a few levels
//! down, hidden directories, virtualenvs and build output skipped. Nothing here writes.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

/// How far below the root a survey looks, and how many directories it reads at most.
const DEPTH: usize = 6;
const MOST: usize = 20_000;

/// Each directory under `root` (itself first), breadth first, with how deep it is; not into
/// hidden directories, virtualenvs, `node_modules`, `target` or `__pycache__`.
pub fn directories(root: &Path) -> Vec<(PathBuf, usize)> {
    let mut found = Vec::new();
    let mut next = VecDeque::from([(root.to_path_buf(), 0)]);
    while let Some((dir, depth)) = next.pop_front() {
        if found.len() == MOST {
            break;
        }
        found.push((dir.clone(), depth));
        if depth == DEPTH {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut children: Vec<PathBuf> = (entries.flatten())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .filter(|p| !skipped(p))
            .collect();
        children.sort();
        next.extend(children.into_iter().map(|c| (c, depth + 1)));
    }
    found
}

/// A directory no project lives in.
fn skipped(dir: &Path) -> bool {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    name.starts_with('.')
        || matches!(name, "node_modules" | "target" | "__pycache__")
        || dir.join("pyvenv.cfg").is_file()
}

/// The directory under `root` that holds the most of `paths` (projects' paths) as
/// directories, relative to `root` (`.` for itself), with how many it holds; `None` when none
/// holds any.
pub fn projects_dir_of(root: &Path, paths: &[&str]) -> Option<(String, usize)> {
    let firsts: Vec<&str> = (paths.iter()).filter_map(|p| p.split('/').next()).collect();
    let mut best: Option<(PathBuf, usize)> = None;
    for (dir, _) in directories(root) {
        // Only where a project's first directory is: a stat a path of the rest.
        if !firsts.iter().any(|f| dir.join(f).is_dir()) {
            continue;
        }
        let holds = paths.iter().filter(|p| dir.join(p).is_dir()).count();
        if holds > best.as_ref().map_or(0, |b| b.1) {
            best = Some((dir, holds));
        }
    }
    let (dir, holds) = best?;
    let relative = dir.strip_prefix(root).unwrap_or(&dir);
    let shown = match relative.as_os_str().is_empty() {
        true => ".".to_string(),
        false => relative.to_string_lossy().into_owned(),
    };
    Some((shown, holds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_that_holds_most_of_the_projects_is_found() {
        let root = tempfile::tempdir().unwrap();
        for dir in [
            "pulumi/python/infrastructure/aws/vpc",
            "pulumi/python/infrastructure/aws/eks",
            "pulumi/python/venv",
            "other/infrastructure/aws/vpc",
            ".git/infrastructure/aws/vpc",
            ".git/infrastructure/aws/eks",
        ] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        let paths = [
            "infrastructure/aws/vpc",
            "infrastructure/aws/eks",
            "kubernetes/app",
        ];
        assert_eq!(
            projects_dir_of(root.path(), &paths),
            Some(("pulumi/python".to_string(), 2))
        );
        assert_eq!(projects_dir_of(root.path(), &["nowhere/x"]), None);
    }
}
