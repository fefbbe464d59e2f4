//! The walk of the projects' files, as git sees them (docs/decisions.md, issue 28: "The
//! fingerprint walk is mara's own"): every directory and regular file under a root, hidden ones included, never into `.git`, `.mara` or
//! the state directory, without what an ignore file on the way ignores — `.ignore` over
//! `.gitignore` over `.git/info/exclude`, a deeper file over the ones above, those of the
//! directories above the root too — and without what the user's global gitignore ignores.
//!
//! It reads each directory's ignore files from the directory's own listing, so a directory costs
//! its listing and nothing more: no probing for ignore files that are not there. The listing says
//! what each is: one that is a FIFO, socket, device or directory is noted and refused (`Special`),
//! never opened, and its directory is not walked; a regular one is still opened without waiting
//! (`files::read`), in case it was replaced since.
//! The rules are the `ignore` crate's (its parser, its precedence): the unit tests hold the two
//! walks to the same files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ignore::gitignore::{Gitignore, GitignoreBuilder};

/// What a walk leaves out besides the ignore files' rules.
pub(super) struct Filter<'a> {
    pub state_dir: &'a Path,
    pub global: &'a Gitignore,
    pub special: &'a Special,
    /// The walk goes only where this says yes.
    pub keep: &'a (dyn Fn(&Path) -> bool + Sync),
}

/// Every directory (`true`) and regular file (`false`) under `root`, `root` itself first, in no
/// particular order: a directory's children are listed on every core, level by level.
pub(super) fn walk(root: &Path, filter: &Filter<'_>) -> Vec<(PathBuf, bool)> {
    let Ok(above) = Rules::above(root, filter.special) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut level = vec![(root.to_path_buf(), above)];
    let mut first = true;
    while !level.is_empty() {
        let visited = crate::parallel::map(level.len(), |i| {
            let (dir, rules) = &level[i];
            visit(dir, rules, filter)
        });
        let mut next = Vec::new();
        for (i, visited) in visited.into_iter().enumerate() {
            let Some((entries, subdirs)) = visited else {
                continue;
            };
            if first {
                found.push((level[i].0.clone(), true));
            }
            found.extend(entries);
            next.extend(subdirs);
        }
        first = false;
        level = next;
    }
    found
}

type Entries = Vec<(PathBuf, bool)>;
type Subdirs = Vec<(PathBuf, Option<Arc<Rules>>)>;

/// A directory's kept entries and the subdirectories to walk next, each with the rules that hold
/// in it; `None` when the directory cannot be listed, or one of its ignore files read.
fn visit(
    dir: &Path,
    rules: &Option<Arc<Rules>>,
    filter: &Filter<'_>,
) -> Option<(Entries, Subdirs)> {
    let listing: Vec<(std::ffi::OsString, std::fs::FileType)> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            Some((entry.file_name(), entry.file_type().ok()?))
        })
        .collect();
    let rules = Rules::of(dir, &listing, rules.clone(), filter.special, None).ok()?;
    let mut entries = Vec::new();
    let mut subdirs = Vec::new();
    for (name, kind) in listing {
        let is_dir = kind.is_dir();
        if !is_dir && !kind.is_file() || name == ".git" || name == ".mara" {
            continue;
        }
        let path = dir.join(name);
        if path.starts_with(filter.state_dir)
            || filter.global.matched(&path, is_dir).is_ignore()
            || !(filter.keep)(&path)
            || Rules::ignored(&rules, &path, is_dir)
        {
            continue;
        }
        if is_dir {
            subdirs.push((path.clone(), rules.clone()));
        }
        entries.push((path, is_dir));
    }
    Some((entries, subdirs))
}

/// The ignore files of one directory, parsed, chained to those of the directories above it that
/// have any (most have none, and share their parent's chain).
pub(super) struct Rules {
    /// `.ignore`, `.gitignore` and `.git/info/exclude`, in the order they take precedence.
    files: [Gitignore; 3],
    /// For a directory above the walk's root when the root is not its canonical form: the root
    /// and that form, for the paths its rules see.
    renamed: Option<Arc<(PathBuf, PathBuf)>>,
    /// A repository's root (`.git` or `.jj` there): the `.gitignore` and exclude files above it
    /// are not the repository's, and say nothing below it (git's own rule); `.ignore` files do.
    repository: bool,
    parent: Option<Arc<Rules>>,
}

/// `Err`: an ignore file that is no regular file, noted.
type Read = Result<Option<Arc<Rules>>, ()>;

impl Rules {
    /// The rules of the directories above `root`, from `/` down (none when it has no canonical
    /// form: it is not there). They see a path under the root's canonical form, as the `ignore`
    /// crate shows it to them.
    fn above(root: &Path, special: &Special) -> Read {
        let Ok(canonical) = root.canonicalize() else {
            return Ok(None);
        };
        let renamed =
            (canonical != root).then(|| Arc::new((root.to_path_buf(), canonical.clone())));
        // Above the repository the root is in, only `.ignore` files say anything (`ignored`):
        // no other file there is read, nor refused.
        let repository = (canonical.ancestors()).find(|dir| {
            [".git", ".jj"]
                .iter()
                .any(|n| dir.join(n).metadata().is_ok())
        });
        let mut rules = None;
        // Every directory above is looked at, so that each ignore file refused is named.
        let mut refused = false;
        let parents: Vec<&Path> = canonical.ancestors().skip(1).collect();
        for dir in parents.into_iter().rev() {
            let outside = repository.is_some_and(|r| r != dir && r.starts_with(dir));
            let names: &[&str] = match outside {
                true => &[".ignore"],
                false => &[".ignore", ".gitignore", ".git", ".jj"],
            };
            let listing: Vec<_> = (names.iter())
                .filter_map(|name| {
                    let kind = std::fs::symlink_metadata(dir.join(name)).ok()?.file_type();
                    Some((name.into(), kind))
                })
                .collect();
            match Rules::of(dir, &listing, rules.clone(), special, renamed.clone()) {
                Ok(theirs) => rules = theirs,
                Err(()) => refused = true,
            }
        }
        match refused {
            true => Err(()),
            false => Ok(rules),
        }
    }

    /// The rules in `dir`, whose entries are `listing`: its parent's, with its own ignore files'
    /// on top when it has any.
    fn of(
        dir: &Path,
        listing: &[(std::ffi::OsString, std::fs::FileType)],
        parent: Option<Arc<Rules>>,
        special: &Special,
        renamed: Option<Arc<(PathBuf, PathBuf)>>,
    ) -> Read {
        let kind_of = |name: &str| {
            (listing.iter())
                .find(|(entry, _)| entry == name)
                .map(|(_, kind)| *kind)
        };
        let exclude = kind_of(".git").map_or(Ok(None), |kind| exclude_file(dir, kind, special));
        // As the `ignore` crate asks it: `.git` or `.jj` there, whatever it is (a link to it).
        let there = |name: &str| {
            kind_of(name).is_some_and(|k| !k.is_symlink() || dir.join(name).metadata().is_ok())
        };
        let repository = there(".git") || there(".jj");
        let found = [
            kind_of(".ignore").map(|kind| (dir.join(".ignore"), Some(kind))),
            kind_of(".gitignore").map(|kind| (dir.join(".gitignore"), Some(kind))),
            exclude.clone().ok().flatten().map(|path| (path, None)),
        ];
        // Each of them read (or refused: every one that is no regular file is named).
        let read = found.map(|file| match file {
            Some((path, kind)) => parse(dir, &path, kind, special).map(Some),
            None => Ok(None),
        });
        let [Ok(ignore), Ok(gitignore), Ok(exclude_rules)] = read else {
            return Err(());
        };
        exclude?;
        if ignore.is_none() && gitignore.is_none() && exclude_rules.is_none() && !repository {
            return Ok(parent);
        }
        let or_none = |rules: Option<Gitignore>| rules.unwrap_or_else(Gitignore::empty);
        let (ignore, gitignore, exclude) =
            (or_none(ignore), or_none(gitignore), or_none(exclude_rules));
        Ok(Some(Arc::new(Rules {
            files: [ignore, gitignore, exclude],
            renamed,
            repository,
            parent,
        })))
    }

    /// Whether the rules in force ignore `path`: of each kind of file, the deepest that says
    /// anything of it decides; a `.ignore` over a `.gitignore` over the exclude file. Above a
    /// repository's root only `.ignore` files count.
    fn ignored(rules: &Option<Arc<Rules>>, path: &Path, is_dir: bool) -> bool {
        let mut said: [Option<bool>; 3] = [None; 3];
        let mut in_repository = false;
        let mut canonical = None;
        let mut next = rules.as_deref();
        while let Some(rules) = next {
            let path = match rules.renamed.as_deref() {
                Some((root, root_canonical)) => canonical
                    .get_or_insert_with(|| {
                        root_canonical.join(path.strip_prefix(root).unwrap_or(path))
                    })
                    .as_path(),
                None => path,
            };
            for (kind, (said, file)) in said.iter_mut().zip(&rules.files).enumerate() {
                if said.is_none() && (kind == 0 || !in_repository) {
                    let m = file.matched(path, is_dir);
                    *said = (!m.is_none()).then(|| m.is_ignore());
                }
            }
            in_repository |= rules.repository;
            next = rules.parent.as_deref();
        }
        said.into_iter().flatten().next().unwrap_or(false)
    }
}

/// The exclude file of the repository whose `.git` (of kind `kind`) is in `dir`: in the `.git`
/// directory, or for a worktree's or a submodule's `.git` file in the common directory of the
/// git directory it names. The files read on the way are read only when regular: one that is not is
/// noted (`Err`).
fn exclude_file(
    dir: &Path,
    kind: std::fs::FileType,
    special: &Special,
) -> Result<Option<PathBuf>, ()> {
    let git = dir.join(".git");
    let kind = match (kind.is_symlink(), std::fs::metadata(&git)) {
        (false, _) => kind,
        (true, Ok(metadata)) => metadata.file_type(),
        (true, Err(_)) => return Ok(None),
    };
    if !kind.is_file() {
        return Ok(Some(git.join("info/exclude")));
    }
    let first_line = |path: &Path| match std::fs::metadata(path) {
        Ok(metadata) if !metadata.is_file() => {
            special.note(path.to_path_buf());
            Err(())
        }
        Ok(_) => Ok(crate::files::read_to_string(path)
            .ok()
            .and_then(|text| text.lines().next().map(str::to_string))),
        Err(_) => Ok(None),
    };
    // Relative paths are the git directory's, as git reads them (the crate reads them from the
    // current directory); a git directory without `commondir` (a submodule's) is its own.
    let Some(git_dir) =
        first_line(&git)?.and_then(|line| line.strip_prefix("gitdir: ").map(|p| dir.join(p)))
    else {
        return Ok(None);
    };
    let common = match first_line(&git_dir.join("commondir"))? {
        Some(common) => git_dir.join(common),
        None => git_dir,
    };
    Ok(Some(common.join("info/exclude")))
}

/// An ignore file's rules, rooted at `dir`, line by line as the `ignore` crate reads them (a
/// byte-order mark dropped, a bad pattern skipped, nothing after a line that is not UTF-8). One
/// that is not there has none; one that is no regular file is noted and never opened — what it
/// is comes from the directory's listing (`kind`), asked only of a symlink or of a file the
/// listing did not show (`None`: the exclude file).
fn parse(
    dir: &Path,
    path: &Path,
    kind: Option<std::fs::FileType>,
    special: &Special,
) -> Result<Gitignore, ()> {
    let is_file = match kind.filter(|kind| !kind.is_symlink()) {
        Some(kind) => kind.is_file(),
        None => match std::fs::metadata(path) {
            Ok(metadata) => metadata.is_file(),
            // Not there (a symlink to nothing), as the crate skips it.
            Err(_) => return Ok(Gitignore::empty()),
        },
    };
    // Opened without blocking even so: it may have been replaced since.
    let bytes = match is_file.then(|| crate::files::read(path)) {
        None => Err(()),
        Some(Ok(bytes)) => Ok(bytes),
        Some(Err(error)) if error.kind() == std::io::ErrorKind::InvalidInput => Err(()),
        // One that cannot be read has no rules, as the crate reads it.
        Some(Err(_)) => Ok(Vec::new()),
    };
    let Ok(bytes) = bytes else {
        special.note(path.to_path_buf());
        return Err(());
    };
    let mut builder = GitignoreBuilder::new(dir);
    let mut lines = bytes.split(|&b| b == b'\n').peekable();
    let mut first = true;
    while let Some(line) = lines.next() {
        if line.is_empty() && lines.peek().is_none() {
            break;
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Ok(line) = std::str::from_utf8(line) else {
            break;
        };
        let line = match first {
            true => line.trim_start_matches('\u{feff}'),
            false => line,
        };
        first = false;
        let _ = builder.add_line(Some(path.to_path_buf()), line);
    }
    Ok(builder.build().unwrap_or_else(|_| Gitignore::empty()))
}

/// The ignore files a walk would read that are not regular files (a FIFO would hold the walk,
/// and mara with it, forever): noted as they are met, and refused.
#[derive(Clone, Default)]
pub(super) struct Special(Arc<std::sync::Mutex<Vec<PathBuf>>>);

impl Special {
    pub(super) fn note(&self, path: PathBuf) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(path);
    }

    pub(super) fn refuse(&self) -> crate::error::Result<()> {
        let mut noted = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        noted.sort();
        noted.dedup();
        let problems: Vec<crate::error::Problem> = noted
            .iter()
            .map(|path| {
                crate::error::Problem::new(
                    "it is not a regular file (a FIFO, socket, device or directory), where an ignore file (or the git configuration naming one) belongs: mara does not read it",
                )
                .at(crate::error::Location::file(path))
                .hint("remove it, or make it a file")
            })
            .collect();
        match problems.is_empty() {
            true => Ok(()),
            false => Err(crate::error::Error::Problems(problems)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mkfifo(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let made = std::process::Command::new("mkfifo").arg(path).status();
        assert!(made.unwrap().success());
    }

    /// A walk from `root`: the files it finds, relative to the root, and what it refuses, by
    /// name (it never waits on a FIFO); each sorted.
    fn walked(root: &Path) -> (Vec<String>, Vec<PathBuf>) {
        let (special, global) = (Special::default(), Gitignore::empty());
        let filter = Filter {
            state_dir: Path::new("/nowhere"),
            global: &global,
            special: &special,
            keep: &|_| true,
        };
        let mut files: Vec<String> = (walk(root, &filter).into_iter())
            .filter(|(_, is_dir)| !is_dir)
            .map(|(path, _)| path.strip_prefix(root).unwrap().display().to_string())
            .collect();
        files.sort();
        let mut noted = special.0.lock().unwrap().clone();
        noted.sort();
        (files, noted)
    }

    fn refused(root: &Path) -> Vec<PathBuf> {
        walked(root).1
    }

    fn found(root: &Path) -> Vec<String> {
        walked(root).0
    }

    #[test]
    fn every_ignore_file_above_the_root_that_is_no_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("a/b/project");
        std::fs::create_dir_all(&root).unwrap();
        mkfifo(&dir.path().join(".ignore"));
        mkfifo(&dir.path().join("a/b/.gitignore"));
        assert_eq!(
            refused(&root),
            [
                dir.path().join(".ignore"),
                dir.path().join("a/b/.gitignore")
            ]
        );
    }

    #[test]
    fn a_worktree_s_files_are_read_only_when_they_are_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("wt");
        std::fs::create_dir_all(&root).unwrap();
        let git_dir = dir.path().join("repo/.git/worktrees/wt");
        std::fs::create_dir_all(&git_dir).unwrap();
        std::fs::write(
            root.join(".git"),
            format!("gitdir: {}\n", git_dir.display()),
        )
        .unwrap();
        std::fs::write(root.join("main.py"), "kept").unwrap();
        assert_eq!(refused(&root), Vec::<PathBuf>::new());
        mkfifo(&git_dir.join("commondir"));
        assert_eq!(refused(&root), [git_dir.join("commondir")]);
    }

    #[test]
    fn a_repository_s_rules_are_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let write = |path: &str, text: &str| {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        // A .gitignore above the repository says nothing in it; a .ignore does.
        write(".gitignore", "*\n");
        write(".ignore", "*.tmp\n");
        write("ws/.git/HEAD", "");
        write("ws/main.py", "kept");
        write("ws/x.tmp", "ignored by the .ignore above");
        // A submodule (no commondir: its git directory is its own), by a relative path.
        write("ws/.git/modules/sub/info/exclude", "*.sub\n");
        write("ws/sub/.git", "gitdir: ../.git/modules/sub\n");
        write("ws/sub/a.sub", "ignored by the submodule's exclude file");
        write("ws/sub/b.py", "kept");
        assert_eq!(found(&dir.path().join("ws")), ["main.py", "sub/b.py"]);
    }

    #[test]
    fn what_is_above_a_repository_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("outer/ws");
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::create_dir_all(dir.path().join("outer/.git/info")).unwrap();
        mkfifo(&dir.path().join("outer/.gitignore"));
        mkfifo(&dir.path().join("outer/.git/info/exclude"));
        assert_eq!(refused(&ws), Vec::<PathBuf>::new());
        // Without a repository of its own, the workspace is the outer one's, and those are read.
        std::fs::remove_dir(ws.join(".git")).unwrap();
        assert_eq!(refused(&ws).len(), 2);
    }
}
